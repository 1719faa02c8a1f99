//! flowscope: explore 3D fluid flows live.
//!
//! The library holds everything the `flowscope` binary uses: the lattice
//! Boltzmann solvers ([`solver`]), scenario files and units ([`scenario`]),
//! file formats ([`io`]) and the command line ([`cli`]).

pub mod solver;
pub mod scenario;
pub mod io;
pub mod cli;
