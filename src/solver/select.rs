//! Choosing and building a solver for a scenario.

use super::cpu::CpuSolver;
use super::cuda::{self, CudaSolver};
use super::{Precision, Solver, SolverError};
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

fn voxels_with_fluid(
    scenario: &Scenario,
) -> Result<crate::scenario::geometry::Voxels, SelectError> {
    let voxels = scenario.voxelize();
    if voxels.fluid_cells == 0 {
        return Err(SelectError::Solver(SolverError::InvalidParams(format!(
            "{}: the domain has no fluid cells; make it larger or the obstacles smaller",
            scenario.path.display()
        ))));
    }
    Ok(voxels)
}

/// Builds the CPU reference solver for a scenario, after checking it fits in
/// `available` bytes of host memory.
pub fn build_cpu(scenario: &Scenario, available: Option<u64>) -> Result<CpuSolver, SelectError> {
    if let Some(bytes) = available {
        scenario.check_memory(crate::cli::BYTES_PER_CELL_FP32, bytes, "the CPU solver")?;
    }
    let voxels = voxels_with_fluid(scenario)?;
    let params = scenario.params(&voxels);
    Ok(CpuSolver::new(
        scenario.grid(),
        voxels.flags,
        params,
        scenario.initial(),
    )?)
}

/// Builds the CUDA solver (device 0) for a scenario.
pub fn build_cuda(scenario: &Scenario, precision: Precision) -> Result<CudaSolver, SelectError> {
    let info = cuda::probe().map_err(SelectError::CudaUnavailable)?;
    // Refuse before voxelising: the host would build flags for nothing.
    cuda::check_fits(scenario.size, precision, info.free_bytes).map_err(|e| {
        SelectError::Scenario(crate::scenario::ScenarioError {
            file: scenario.path.clone(),
            line: None,
            message: e.to_string(),
            help: "make domain.size smaller".into(),
        })
    })?;
    let voxels = voxels_with_fluid(scenario)?;
    let params = scenario.params(&voxels);
    Ok(CudaSolver::new(
        scenario.grid(),
        voxels.flags,
        params,
        scenario.initial(),
        precision,
    )?)
}

/// Builds the solver the user chose; `auto` takes CUDA where a device is usable
/// and says why it did not otherwise.
pub fn build(
    choice: Choice,
    scenario: &Scenario,
    precision: Precision,
    available: Option<u64>,
) -> Result<Selected, SelectError> {
    let cpu_only = |why: String| -> Result<Selected, SelectError> {
        if precision != Precision::Fp32 {
            eprintln!(
                "note: the CPU solver stores FP32 only; --precision {} ignored",
                precision.name()
            );
        }
        Ok(Selected {
            solver: Box::new(build_cpu(scenario, available)?),
            reason: why,
        })
    };
    match choice {
        Choice::Cpu => cpu_only("CPU solver (asked for with --solver cpu)".into()),
        Choice::Cuda => {
            let solver = build_cuda(scenario, precision)?;
            let reason = solver.describe();
            Ok(Selected {
                solver: Box::new(solver),
                reason,
            })
        }
        Choice::Auto => match cuda::probe() {
            Err(why) => cpu_only(format!("CPU solver: no usable CUDA GPU ({why})")),
            Ok(_) => {
                let solver = build_cuda(scenario, precision)?;
                let reason = solver.describe();
                Ok(Selected {
                    solver: Box::new(solver),
                    reason,
                })
            }
        },
    }
}
