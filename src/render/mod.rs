//! GPU visualisation: fields in 3D textures, derived scalars, reductions and
//! isosurfaces as compute passes, and off-screen rendering to PNG. (The live
//! window builds on these.)

pub mod colour;
pub mod derive;
pub mod gpu;
pub mod gpu_data;
pub mod interop;
pub mod isosurface;
pub mod legend;
pub mod lines;
pub mod passes;
pub mod present;
pub mod raymarch;
pub mod readback;
pub mod scene;
pub mod shaders;
pub mod slices;
pub mod streamlines;
pub mod viewer;
pub mod volume;
