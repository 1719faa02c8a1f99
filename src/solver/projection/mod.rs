//! The incompressible projection (fractional-step) method of the urban-flow
//! source (issue 20), beside the lattice Boltzmann method. So far, on the
//! CPU: the staggered-grid flow with Adams–Bashforth and the projection
//! ([`flow`]), the pressure Poisson equation ([`poisson`]) and its solver,
//! conjugate gradients preconditioned by geometric multigrid
//! ([`multigrid`]), and the [`crate::solver::Solver`] that runs a scenario
//! with them ([`solver`]: walls, moving walls, inlets, outlets, free slip,
//! periodic axes; no CUDA twin yet).

pub mod cuda;
pub mod flow;
pub mod multigrid;
pub mod poisson;
pub mod solver;

pub use solver::ProjectionSolver;
