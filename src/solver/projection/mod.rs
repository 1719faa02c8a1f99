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

/// The projection method's pressure solver (`run.pressure` of a scenario).
#[derive(Clone, Copy, Debug, Default, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PressureSolver {
    /// Conjugate gradients preconditioned by a multigrid V-cycle.
    #[default]
    Multigrid,
    /// Plain Jacobi iteration, the urban-flow seed's solver: the baseline
    /// the multigrid is measured against.
    Jacobi,
}

impl PressureSolver {
    /// Its name in descriptions.
    pub fn describe(self) -> &'static str {
        match self {
            PressureSolver::Multigrid => "multigrid-preconditioned CG",
            PressureSolver::Jacobi => "Jacobi iteration",
        }
    }
}
