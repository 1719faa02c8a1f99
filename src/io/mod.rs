//! Files flowscope reads and writes: checkpoints, VTK image data, probe and
//! force tables.

pub mod checkpoint;
pub mod probe;
pub mod vti;
