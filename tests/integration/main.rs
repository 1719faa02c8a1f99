//! Integration tests, one module per feature, in one test binary so CI links once.

// Index loops over cells and directions read more plainly in physics checks.
#![allow(clippy::needless_range_loop)]

mod common;

mod averages;
mod checkpoint;
mod cli;
mod cuda;
mod dispersion;
mod forces;
mod fuzz;
mod mesh;
#[cfg(feature = "mpi")]
mod mpi;
mod panel;
mod physics;
mod projection;
mod render;
mod scenarios;
mod slabs;
mod slices;
mod validation;
mod visual;
mod volume;
mod vti;
mod walls;
mod window;
