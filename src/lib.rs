//! flowscope: explore 3D fluid flows live.
//!
//! The library holds everything the `flowscope` binary uses, in floors that
//! import only downward:
//!
//! ```text
//! main → cli → app → ui → session → render / io / validation → solver / scenario → system
//! ```
//!
//! [`cli`] is the command line; [`app`] the window and [`ui`] its panel;
//! [`session`] a running scenario (solver thread, frames, time series);
//! [`render`] the WGSL passes, [`io`] file formats, [`validation`] published
//! reference data; [`solver`] the solution methods behind one face and
//! [`scenario`] the scenario files and units; [`system`] machine facts and
//! the developer knobs.

// `!(x > 0.0)` is deliberate throughout: it rejects NaN, which `x <= 0.0` lets
// through.
#![allow(clippy::neg_cmp_op_on_partial_ord)]
// Lattice code indexes several arrays by direction and axis in one loop; index
// loops say that more plainly than zipped iterators.
#![allow(clippy::needless_range_loop)]

pub mod app;
pub mod cli;
pub mod io;
pub mod render;
pub mod scenario;
pub mod session;
pub mod solver;
pub mod system;
pub mod ui;
pub mod validation;
