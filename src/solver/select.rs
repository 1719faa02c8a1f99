//! Choosing and building a solver for a scenario.

use super::cpu::CpuSolver;
use super::{Solver, SolverError};
use crate::scenario::Scenario;

/// Which solver the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    Auto,
    Cpu,
    Cuda,
}

/// Why a CUDA solver could not be used, in one line for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CudaUnavailable(pub String);

/// The solver built, and a line saying which one and why.
pub struct Selected {
    pub solver: Box<dyn Solver>,
    pub reason: String,
}

/// Errors of [`build`].
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    #[error("the CUDA solver was asked for but cannot be used: {0}")]
    CudaUnavailable(CudaUnavailable),
    #[error(transparent)]
    Scenario(#[from] crate::scenario::ScenarioError),
    #[error(transparent)]
    Solver(#[from] SolverError),
}

/// Builds the CPU reference solver for a scenario, after checking it fits in
/// `available` bytes of host memory.
pub fn build_cpu(scenario: &Scenario, available: Option<u64>) -> Result<CpuSolver, SelectError> {
    if let Some(bytes) = available {
        scenario.check_memory(crate::cli::BYTES_PER_CELL_FP32, bytes, "the CPU solver")?;
    }
    let voxels = scenario.voxelize();
    if voxels.fluid_cells == 0 {
        return Err(SelectError::Solver(SolverError::InvalidParams(format!(
            "{}: the domain has no fluid cells; make it larger or the obstacles smaller",
            scenario.path.display()
        ))));
    }
    let params = scenario.params(&voxels);
    Ok(CpuSolver::new(
        scenario.grid(),
        voxels.flags,
        params,
        scenario.initial(),
    )?)
}

/// Builds the solver the user chose.
pub fn build(
    choice: Choice,
    scenario: &Scenario,
    available: Option<u64>,
) -> Result<Selected, SelectError> {
    let cuda = cuda_status();
    match (choice, cuda) {
        (Choice::Cuda, Err(why)) => Err(SelectError::CudaUnavailable(why)),
        (Choice::Cpu, _) => Ok(Selected {
            solver: Box::new(build_cpu(scenario, available)?),
            reason: "CPU solver (asked for with --solver cpu)".into(),
        }),
        (Choice::Auto, Err(why)) => Ok(Selected {
            solver: Box::new(build_cpu(scenario, available)?),
            reason: format!("CPU solver: no usable CUDA GPU ({why})"),
        }),
        (_, Ok(())) => Err(SelectError::CudaUnavailable(CudaUnavailable(
            "the CUDA solver is not part of this build yet".into(),
        ))),
    }
}

/// Whether a CUDA solver can run here; the error says why not.
pub fn cuda_status() -> Result<(), CudaUnavailable> {
    Err(CudaUnavailable(
        "the CUDA solver is not part of this build yet".into(),
    ))
}
