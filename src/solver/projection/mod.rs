//! The incompressible projection (fractional-step) method of the urban-flow
//! source (issue 20), beside the lattice Boltzmann method. So far: the
//! pressure Poisson equation ([`poisson`]) and its solver, conjugate
//! gradients preconditioned by geometric multigrid ([`multigrid`]).

pub mod flow;
pub mod multigrid;
pub mod poisson;
