//! The incompressible projection (fractional-step) method of the urban-flow
//! source (issue 20), beside the lattice Boltzmann method: the
//! staggered-grid flow with Adams–Bashforth and the projection ([`flow`]),
//! the pressure Poisson equation ([`poisson`]) and its solver, conjugate
//! gradients preconditioned by geometric multigrid ([`multigrid`]), their
//! CUDA twin ([`cuda`], equal to them bit for bit where the check has run),
//! and the [`crate::solver::Solver`] that runs a scenario with them
//! ([`solver`]: walls, moving walls, inlets, outlets, free slip, periodic
//! axes).

pub mod cuda;
pub mod flow;
pub mod multigrid;
pub mod poisson;
pub mod solver;

pub use solver::ProjectionSolver;
