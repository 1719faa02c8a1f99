//! Choosing and building a solver for a scenario.

use super::cpu::CpuSolver;
use super::cuda::{self, CudaSolver};
use super::slabs::{Partition, SlabSolver};
use super::{Initial, Precision, Solver, SolverError};
use crate::scenario::Scenario;

/// How many GPUs to spread one domain over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Gpus {
    #[default]
    One,
    Count(usize),
    All,
}

impl std::str::FromStr for Gpus {
    type Err = String;
    fn from_str(s: &str) -> Result<Gpus, String> {
        match s {
            "all" => Ok(Gpus::All),
            _ => match s.parse::<usize>() {
                Ok(0) | Err(_) => Err(format!("'{s}': give a number of GPUs (1, 2, ...) or 'all'")),
                Ok(1) => Ok(Gpus::One),
                Ok(n) => Ok(Gpus::Count(n)),
            },
        }
    }
}

impl Gpus {
    /// The number of GPUs to use when `available` are present.
    pub fn resolve(self, available: usize) -> Result<usize, SolverError> {
        match self {
            Gpus::One => Ok(1),
            Gpus::All => Ok(available.max(1)),
            Gpus::Count(n) if n <= available => Ok(n),
            Gpus::Count(n) => Err(SolverError::Device(format!(
                "--gpus {n}: only {available} CUDA device(s) found; use --gpus {available} or --gpus all"
            ))),
        }
    }
}

/// Which solver to build: the user's choice, storage and GPU count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backend {
    pub choice: Choice,
    pub precision: Precision,
    pub gpus: Gpus,
}

/// Slab `s`'s share of an initial state.
fn slab_initial(partition: &Partition, s: usize, initial: &Initial) -> Initial {
    match initial {
        Initial::Uniform(u) => Initial::Uniform(*u),
        Initial::Fields(f) => {
            let all = [&f.rho[..], &f.ux[..], &f.uy[..], &f.uz[..]].concat();
            let local = partition.scatter(s, &all, 4);
            let n = local.len() / 4;
            let grid = partition.local_grid(s);
            Initial::Fields(super::Fields {
                size: grid.size,
                rho: local[..n].to_vec(),
                ux: local[n..2 * n].to_vec(),
                uy: local[2 * n..3 * n].to_vec(),
                uz: local[3 * n..].to_vec(),
            })
        }
    }
}

/// The CPU solver split into `count` slabs with the multi-GPU exchange maps
/// (tests: N slabs must reproduce one lattice bit for bit).
pub fn build_cpu_slabs(
    scenario: &Scenario,
    count: usize,
) -> Result<SlabSolver<CpuSolver>, SelectError> {
    let voxels = voxels_with_fluid(scenario)?;
    let params = scenario.params(&voxels);
    let initial = scenario.initial();
    let partition = Partition::new(scenario.grid(), count)?;
    let p = partition.clone();
    Ok(SlabSolver::new(
        partition,
        voxels.flags,
        |s, grid, flags, owned| {
            CpuSolver::slab(
                grid,
                flags,
                params.clone(),
                slab_initial(&p, s, &initial),
                owned,
            )
        },
    )?)
}

/// The CUDA solver over GPUs 0..count, one slab each.
pub fn build_cuda_slabs(
    scenario: &Scenario,
    precision: Precision,
    count: usize,
) -> Result<SlabSolver<CudaSolver>, SelectError> {
    let partition = Partition::new(scenario.grid(), count)?;
    // Refuse before voxelising, naming the slab that does not fit.
    for s in 0..count {
        let info = cuda::probe_device(s).map_err(SelectError::CudaUnavailable)?;
        cuda::check_fits(partition.local_grid(s).size, precision, info.free_bytes).map_err(
            |e| {
                SelectError::Scenario(crate::scenario::ScenarioError {
                    file: scenario.path.clone(),
                    line: None,
                    message: format!("slab {s} of {count} (GPU {s}): {e}"),
                    help: "make domain.size smaller or use more GPUs".into(),
                })
            },
        )?;
    }
    let voxels = voxels_with_fluid(scenario)?;
    let params = scenario.params(&voxels);
    let initial = scenario.initial();
    let p = partition.clone();
    Ok(SlabSolver::new(
        partition,
        voxels.flags,
        |s, grid, flags, owned| {
            CudaSolver::on_device(
                s,
                grid,
                flags,
                params.clone(),
                slab_initial(&p, s, &initial),
                precision,
                Some(owned),
            )
        },
    )?)
}

/// CUDA on one GPU or as slabs over several.
fn build_cuda_any(
    scenario: &Scenario,
    precision: Precision,
    gpus: Gpus,
) -> Result<Selected, SelectError> {
    let available = cuda::device_count().map_err(SelectError::CudaUnavailable)?;
    let count = gpus.resolve(available)?;
    let solver: Box<dyn Solver> = if count == 1 {
        Box::new(build_cuda(scenario, precision)?)
    } else {
        Box::new(build_cuda_slabs(scenario, precision, count)?)
    };
    let reason = solver.describe();
    Ok(Selected { solver, reason })
}

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
    gpus: Gpus,
    available: Option<u64>,
) -> Result<Selected, SelectError> {
    let cpu_only = |why: String| -> Result<Selected, SelectError> {
        if gpus != Gpus::One {
            eprintln!("note: the CPU solver runs on the CPU; --gpus ignored");
        }
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
        Choice::Cuda => build_cuda_any(scenario, precision, gpus),
        Choice::Auto => match cuda::probe() {
            Err(why) => cpu_only(format!("CPU solver: no usable CUDA GPU ({why})")),
            Ok(_) => build_cuda_any(scenario, precision, gpus),
        },
    }
}
