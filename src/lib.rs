//! flowscope: explore 3D fluid flows live.
//!
//! The library holds everything the `flowscope` binary uses: the lattice
//! Boltzmann solvers ([`solver`]), scenario files and units ([`scenario`]),
//! file formats ([`io`]) and the command line ([`cli`]).

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
pub mod solver;
pub mod ui;
pub mod validation;
