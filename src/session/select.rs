//! Choosing and building a solver for a scenario: CUDA on one GPU or as
//! slabs over several, or the CPU reference, each after checking that the
//! grid fits, with one voxelisation per build.

use std::ops::Range;

use crate::scenario::geometry::{ObstacleInfo, VelocitySlots, Voxels};
use crate::scenario::{Method, Scenario, ScenarioError};
use crate::solver::lbm::cpu::CpuSolver;
use crate::solver::lbm::cuda::{self, CudaSolver, CudaUnavailable, Placement};
use crate::solver::lbm::links::WallLinks;
use crate::solver::lbm::slabs::{Partition, SlabSolver};
use crate::solver::projection::ProjectionSolver;
use crate::solver::scalar::Carried;
use crate::solver::{Fields, Grid, Initial, Params, Precision, Solver, SolverError};
use crate::system::ranks::Peers;
use crate::system::Tuning;

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

/// Which solver to build: the user's choice, storage and GPU count, and the
/// developer knobs read at start-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    pub choice: Choice,
    pub precision: Precision,
    pub gpus: Gpus,
    pub tuning: Tuning,
}

impl Backend {
    /// The CPU reference solver (tests, and machines without a GPU).
    pub fn cpu() -> Backend {
        Backend {
            choice: Choice::Cpu,
            precision: Precision::Fp32,
            gpus: Gpus::One,
            tuning: Tuning::default(),
        }
    }
}

/// What a solver's geometry holds besides its cell flags (which the solver
/// keeps).
#[derive(Clone, Debug, PartialEq)]
pub struct Geometry {
    /// Obstacle `k` has flag tag `k + 1`.
    pub obstacles: Vec<ObstacleInfo>,
    /// For live changes of the reference speed ([`Scenario::params`]).
    pub slots: VelocitySlots,
    pub fluid_cells: u64,
}

/// Splits voxels into the flags a solver takes and the rest.
fn split(voxels: Voxels) -> (Vec<u8>, WallLinks, Geometry) {
    let geometry = Geometry {
        obstacles: voxels.obstacles,
        slots: voxels.slots,
        fluid_cells: voxels.fluid_cells,
    };
    (voxels.flags, voxels.links, geometry)
}

/// Slab `s`'s share of an initial state.
fn slab_initial(partition: &Partition, s: usize, initial: &Initial) -> Initial {
    match initial {
        Initial::Uniform(u) => Initial::Uniform(*u),
        Initial::Perturbed {
            velocity,
            amplitude,
            ..
        } => {
            let slab = &partition.slabs[s];
            let nz = partition.grid.size[2];
            // Local layer 0 is the halo below, or the first owned layer.
            let first = slab.halo_below.unwrap_or(slab.layers.start);
            Initial::Perturbed {
                velocity: *velocity,
                amplitude: *amplitude,
                z_offset: first as u32,
                nz_global: nz as u32,
            }
        }
        Initial::Fields(f) => {
            let all = [&f.rho[..], &f.ux[..], &f.uy[..], &f.uz[..]].concat();
            let local = partition.scatter(s, &all, 4);
            let n = local.len() / 4;
            let grid = partition.local_grid(s);
            Initial::Fields(Fields {
                size: grid.size,
                rho: local[..n].to_vec(),
                ux: local[n..2 * n].to_vec(),
                uy: local[2 * n..3 * n].to_vec(),
                uz: local[3 * n..].to_vec(),
                concentration: Vec::new(),
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
    let (flags, links, geometry) = split(voxels_with_fluid(scenario)?);
    let params = scenario.params(&geometry.slots);
    let initial = scenario.initial();
    let partition = Partition::new(scenario.grid(), count)?;
    let p = partition.clone();
    Ok(SlabSolver::new(
        partition,
        flags,
        params,
        cpu_slab(&p, &links, &initial),
    )?)
}

/// What builds slab `s` of partition `p` on the CPU, with its share of the
/// links and of the initial state.
fn cpu_slab<'a>(
    p: &'a Partition,
    links: &'a WallLinks,
    initial: &'a Initial,
) -> impl FnMut(usize, Grid, Vec<u8>, Range<usize>, Params) -> Result<CpuSolver, SolverError> + 'a {
    move |s, grid, flags, owned, params| {
        let mut slab = CpuSolver::slab(grid, flags, params, slab_initial(p, s, initial), owned)?;
        let local = p.local_links(s, links);
        if !local.is_empty() {
            slab.set_links(local)?;
        }
        Ok(slab)
    }
}

/// The CUDA solver over GPUs 0..count, one slab each.
pub fn build_cuda_slabs(
    scenario: &Scenario,
    precision: Precision,
    count: usize,
    tuning: &Tuning,
) -> Result<SlabSolver<CudaSolver>, SelectError> {
    Ok(cuda_slabs(scenario, precision, count, tuning)?.0)
}

fn cuda_slabs(
    scenario: &Scenario,
    precision: Precision,
    count: usize,
    tuning: &Tuning,
) -> Result<(SlabSolver<CudaSolver>, Geometry), SelectError> {
    let partition = Partition::new(scenario.grid(), count)?;
    // Refuse before voxelising, naming the slab that does not fit.
    for s in 0..count {
        let info = cuda::probe_device(s).map_err(SelectError::CudaUnavailable)?;
        cuda::check_fits(partition.local_grid(s).size, precision, info.free_bytes).map_err(
            |e| {
                SelectError::Scenario(ScenarioError {
                    file: scenario.path.clone(),
                    line: None,
                    message: format!("slab {s} of {count} (GPU {s}): {e}"),
                    help: "make domain.size smaller or use more GPUs".into(),
                })
            },
        )?;
    }
    let (flags, links, geometry) = split(voxels_on_gpu(scenario)?);
    let params = scenario.params(&geometry.slots);
    let initial = scenario.initial();
    let p = partition.clone();
    let solver = SlabSolver::new(partition, flags, params, |s, grid, flags, owned, params| {
        let mut slab = CudaSolver::on_device(
            Placement::slab(s, owned),
            grid,
            flags,
            params,
            slab_initial(&p, s, &initial),
            precision,
            tuning,
        )?;
        // Setting links initialises the slab again: only where it has some.
        let local = p.local_links(s, &links);
        if !local.is_empty() {
            slab.set_links(local)?;
        }
        Ok(slab)
    })?;
    Ok((solver, geometry))
}

/// This process's slabs of a run over MPI processes: one on the CPU, or with
/// CUDA one per `--gpus` (default 1), dealt out by the rank on the machine
/// (local rank k takes GPUs k·g … k·g + g − 1, wrapping where the machine has
/// fewer, so that processes may share one).
fn on_ranks(
    scenario: &Scenario,
    backend: &Backend,
    peers: &'static dyn Peers,
) -> Result<Selected, SelectError> {
    let ranks = peers.size();
    if scenario.run.method == Method::Projection {
        return Err(SolverError::InvalidParams(format!(
            "the projection method does not split over MPI processes yet: run it without \
             mpirun (one process), or use the lattice Boltzmann method (--method lbm) with \
             mpirun -n {ranks}"
        ))
        .into());
    }
    let cuda = match backend.choice {
        Choice::Cpu => false,
        Choice::Cuda => true,
        Choice::Auto => cuda::probe().is_ok(),
    };
    let gpus = if cuda {
        cuda::device_count().map_err(SelectError::CudaUnavailable)?
    } else {
        0
    };
    let per_process = match (cuda, backend.gpus) {
        (_, Gpus::One) => 1,
        (false, _) => {
            return Err(SolverError::InvalidParams(
                "--gpus is for the CUDA solver; CPU processes hold one slab each".into(),
            )
            .into())
        }
        (true, Gpus::Count(n)) => n,
        (true, Gpus::All) => gpus.max(1),
    };
    let count = ranks * per_process;
    let partition = Partition::new(scenario.grid(), count).map_err(|e| {
        SolverError::InvalidParams(format!(
            "mpirun -n {ranks} with {per_process} slab(s) per process: {e}"
        ))
    })?;
    let (flags, links, geometry) = split(if cuda {
        voxels_on_gpu(scenario)?
    } else {
        voxels_with_fluid(scenario)?
    });
    let params = scenario.params(&geometry.slots);
    let initial = scenario.initial();
    let p = partition.clone();
    if cuda && per_process > gpus {
        eprintln!(
            "note: {per_process} slabs per process on {gpus} GPU(s): some share a GPU \
             (FLOWSCOPE_EXCHANGE=peer lets slabs of one process share one)"
        );
    }
    let solver: Box<dyn Solver> = if cuda {
        let first = peers.rank() * per_process;
        let gpu =
            |s: usize| (crate::system::ranks::local_rank() * per_process + s - first) % gpus.max(1);
        for s in first..first + per_process {
            let info = cuda::probe_device(gpu(s)).map_err(SelectError::CudaUnavailable)?;
            cuda::check_fits(p.local_grid(s).size, backend.precision, info.free_bytes).map_err(
                |e| {
                    SelectError::Scenario(ScenarioError {
                        file: scenario.path.clone(),
                        line: None,
                        message: format!("rank {}, slab {s} (GPU {}): {e}", peers.rank(), gpu(s)),
                        help: "make domain.size smaller or start more processes".into(),
                    })
                },
            )?;
        }
        Box::new(SlabSolver::on_ranks(
            partition,
            flags,
            params,
            Some(peers),
            |s, grid, flags, owned, params| {
                let mut slab = CudaSolver::on_device(
                    Placement {
                        ordinal: gpu(s),
                        owned: Some(owned),
                    },
                    grid,
                    flags,
                    params,
                    slab_initial(&p, s, &initial),
                    backend.precision,
                    &backend.tuning,
                )?;
                let local = p.local_links(s, &links);
                if !local.is_empty() {
                    slab.set_links(local)?;
                }
                Ok(slab)
            },
        )?)
    } else {
        Box::new(SlabSolver::on_ranks(
            partition,
            flags,
            params,
            Some(peers),
            cpu_slab(&p, &links, &initial),
        )?)
    };
    let reason = solver.describe();
    Ok(Selected {
        solver,
        reason,
        geometry,
    })
}

/// CUDA on one GPU or as slabs over several.
fn build_cuda_any(scenario: &Scenario, backend: &Backend) -> Result<Selected, SelectError> {
    let available = cuda::device_count().map_err(SelectError::CudaUnavailable)?;
    let count = backend.gpus.resolve(available)?;
    let (solver, geometry): (Box<dyn Solver>, _) = if count == 1 {
        let (s, g) = cuda_one(scenario, backend.precision, &backend.tuning)?;
        (Box::new(s), g)
    } else {
        let (s, g) = cuda_slabs(scenario, backend.precision, count, &backend.tuning)?;
        (Box::new(s), g)
    };
    let reason = solver.describe();
    Ok(Selected {
        solver,
        reason,
        geometry,
    })
}

/// Which solver the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    Auto,
    Cpu,
    Cuda,
}

/// The solver built, a line saying which one and why, and its geometry.
pub struct Selected {
    pub solver: Box<dyn Solver>,
    pub reason: String,
    pub geometry: Geometry,
}

/// Errors of [`build`].
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    #[error("the CUDA solver was asked for but cannot be used: {0}")]
    CudaUnavailable(CudaUnavailable),
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error(transparent)]
    Solver(#[from] SolverError),
}

fn voxels_with_fluid(scenario: &Scenario) -> Result<Voxels, SelectError> {
    let voxels = scenario.voxelize();
    scenario.check_voxels(&voxels)?;
    Ok(voxels)
}

/// [`voxels_with_fluid`] with meshes voxelised on the GPU when there is one
/// (the same cells as on the CPU, which stays the fallback).
fn voxels_on_gpu(scenario: &Scenario) -> Result<Voxels, SelectError> {
    let has_mesh = scenario
        .obstacles
        .iter()
        .any(|o| matches!(o, crate::scenario::Shape::Mesh { .. }));
    let gpu = if has_mesh {
        crate::scenario::mesh::cuda::CudaVoxelizer::new().ok()
    } else {
        None
    };
    let Some(gpu) = gpu else {
        return voxels_with_fluid(scenario);
    };
    let voxels = crate::scenario::geometry::voxelize_with(scenario, &|mesh, size| {
        gpu.solid_bits(mesh, size)
            .unwrap_or_else(|_| crate::scenario::mesh::solid_bits(mesh, size))
    });
    scenario.check_voxels(&voxels)?;
    Ok(voxels)
}

/// The projection method's solver: on the GPU where `backend` asks for one
/// or finds one, else (or where the GPU cannot take the grid, with the
/// reason) on the CPU.
fn projection(
    scenario: &Scenario,
    backend: &Backend,
    available: Option<u64>,
) -> Result<Selected, SelectError> {
    let cuda = match backend.choice {
        Choice::Cpu => Err("asked for with --solver cpu".to_string()),
        Choice::Cuda => Ok(()),
        Choice::Auto => cuda::probe()
            .map(drop)
            .map_err(|why| format!("no usable CUDA GPU ({why})")),
    };
    if backend.choice == Choice::Cuda {
        cuda::probe().map_err(SelectError::CudaUnavailable)?;
    }
    let (mut solver, geometry) = projection_cpu(scenario, available)?;
    tune_projection(&mut solver, &backend.tuning)?;
    // Here rather than in the first step, which `run` times.
    solver.start();
    let fallback = match cuda {
        Err(why) => Some(why),
        Ok(()) => match solver.move_to_gpu(0) {
            Ok(()) => {
                tune_projection_gpu(&mut solver, &backend.tuning)?;
                None
            }
            Err(e) if backend.choice == Choice::Cuda => return Err(e.into()),
            Err(e) => Some(e.to_string()),
        },
    };
    let reason = match fallback {
        None => solver.describe(),
        Some(why) => format!("{} ({why})", solver.describe()),
    };
    Ok(Selected {
        solver: Box::new(solver),
        reason,
        geometry,
    })
}

/// The knobs a projection solver takes before it moves to a GPU (its first
/// guess, its cycle's shape, the fused check, CG's restarts), as `run`,
/// `bench` and `check-cuda` set them.
pub fn tune_projection(solver: &mut ProjectionSolver, tuning: &Tuning) -> Result<(), SolverError> {
    solver.set_fitted_guess(tuning.fitted_guess.as_deref())?;
    solver.set_cycle(tuning.cycle.as_deref())?;
    solver.set_fused_check(tuning.fused_check);
    solver.set_cg_restarts(tuning.cg_restarts.as_deref())?;
    Ok(())
}

/// `Tuning`'s knobs of the projection method's GPU solver, on a solver
/// moved to the GPU (its own defaults are the f32 preconditioner's, which
/// `check-cuda` compares against the CPU; the 16-bit one, by default,
/// where it pays).
pub fn tune_projection_gpu(
    solver: &mut ProjectionSolver,
    tuning: &Tuning,
) -> Result<(), SolverError> {
    solver.set_graphs(tuning.cuda_graphs);
    solver.set_packed_coarse(tuning.packed_coarse);
    solver.set_split_preconditioner(tuning.split_preconditioner)?;
    solver.set_quad_sweeps(tuning.quad_sweeps);
    // Whether it pays depends on the split rows' threads, set above.
    let half = match tuning.half_preconditioner {
        Some(on) => on,
        None => solver.half_preconditioner_pays()?,
    };
    solver.set_half_preconditioner(half)?;
    Ok(())
}

/// The projection method's CPU solver for a scenario, as `[run]` sets it up,
/// after checking it fits in `available` bytes of host memory.
pub fn build_projection(
    scenario: &Scenario,
    available: Option<u64>,
) -> Result<ProjectionSolver, SelectError> {
    Ok(projection_cpu(scenario, available)?.0)
}

fn projection_cpu(
    scenario: &Scenario,
    available: Option<u64>,
) -> Result<(ProjectionSolver, Geometry), SelectError> {
    if let Some(bytes) = available {
        let per_cell = crate::solver::projection::solver::BYTES_PER_CELL;
        scenario.check_memory(per_cell as f64, bytes, "the projection solver")?;
    }
    let (flags, _links, geometry) = split(voxels_with_fluid(scenario)?);
    let params = scenario.params(&geometry.slots);
    let solver = ProjectionSolver::new(scenario.grid(), flags, params, scenario.initial())?
        .with_cfl(scenario.run.cfl as f32)
        .with_tolerance(scenario.run.tolerance)
        .with_pressure(scenario.run.pressure)
        .with_upwind(scenario.run.upwind as f32);
    Ok((solver, geometry))
}

/// Builds the CPU reference solver for a scenario, after checking it fits in
/// `available` bytes of host memory.
pub fn build_cpu(scenario: &Scenario, available: Option<u64>) -> Result<CpuSolver, SelectError> {
    Ok(cpu_one(scenario, available)?.0)
}

fn cpu_one(
    scenario: &Scenario,
    available: Option<u64>,
) -> Result<(CpuSolver, Geometry), SelectError> {
    if let Some(bytes) = available {
        let per_cell = Precision::Fp32.bytes_per_cell() as f64;
        scenario.check_memory(per_cell, bytes, "the CPU solver")?;
    }
    let (flags, links, geometry) = split(voxels_with_fluid(scenario)?);
    let params = scenario.params(&geometry.slots);
    let mut solver = CpuSolver::new(scenario.grid(), flags, params, scenario.initial())?;
    if !links.is_empty() {
        solver.set_links(links)?;
    }
    Ok((solver, geometry))
}

/// Builds the CUDA solver (device 0) for a scenario.
pub fn build_cuda(
    scenario: &Scenario,
    precision: Precision,
    tuning: &Tuning,
) -> Result<CudaSolver, SelectError> {
    Ok(cuda_one(scenario, precision, tuning)?.0)
}

fn cuda_one(
    scenario: &Scenario,
    precision: Precision,
    tuning: &Tuning,
) -> Result<(CudaSolver, Geometry), SelectError> {
    let info = cuda::probe().map_err(SelectError::CudaUnavailable)?;
    // Refuse before voxelising: the host would build flags for nothing.
    cuda::check_fits(scenario.size, precision, info.free_bytes).map_err(|e| {
        SelectError::Scenario(ScenarioError {
            file: scenario.path.clone(),
            line: None,
            message: e.to_string(),
            help: "make domain.size smaller".into(),
        })
    })?;
    let (flags, links, geometry) = split(voxels_on_gpu(scenario)?);
    let params = scenario.params(&geometry.slots);
    let mut solver = CudaSolver::new(
        scenario.grid(),
        flags,
        params,
        scenario.initial(),
        precision,
        tuning,
    )?;
    if !links.is_empty() {
        solver.set_links(links)?;
    }
    Ok((solver, geometry))
}

/// Builds the solver the user chose; `auto` takes CUDA where a device is usable
/// and says why it did not otherwise. A scenario with contaminant sources gets
/// them carried by the flow ([`Carried`]).
pub fn build(
    backend: &Backend,
    scenario: &Scenario,
    available: Option<u64>,
) -> Result<Selected, SelectError> {
    let mut selected = build_flow(backend, scenario, available)?;
    let setup = scenario.releases.setup(
        selected.solver.grid(),
        selected.solver.flags(),
        &scenario.path,
    )?;
    if let Some(setup) = setup {
        let fields = setup.fields;
        let (carried, why) = Carried::placed(selected.solver, setup);
        selected.reason = format!(
            "{}; {fields} contaminant field{} carried {}",
            selected.reason,
            if fields == 1 { "" } else { "s" },
            carried.place()
        );
        if let Some(why) = why {
            selected.reason = format!("{} (not on the GPU: {why})", selected.reason);
        }
        selected.solver = Box::new(carried);
    }
    Ok(selected)
}

fn build_flow(
    backend: &Backend,
    scenario: &Scenario,
    available: Option<u64>,
) -> Result<Selected, SelectError> {
    let precision = backend.precision;
    let cpu_only = |why: String| -> Result<Selected, SelectError> {
        if backend.gpus != Gpus::One {
            eprintln!("note: the CPU solver runs on the CPU; --gpus ignored");
        }
        if precision != Precision::Fp32 {
            eprintln!(
                "note: the CPU solver stores FP32 only; --precision {} ignored",
                precision.name()
            );
        }
        let (solver, geometry) = cpu_one(scenario, available)?;
        Ok(Selected {
            solver: Box::new(solver),
            reason: why,
            geometry,
        })
    };
    if let Some(peers) = crate::system::ranks::world() {
        return on_ranks(scenario, backend, peers);
    }
    if scenario.run.method == Method::Projection {
        return projection(scenario, backend, available);
    }
    match backend.choice {
        Choice::Cpu => cpu_only("CPU solver (asked for with --solver cpu)".into()),
        Choice::Cuda => build_cuda_any(scenario, backend),
        Choice::Auto => match cuda::probe() {
            Err(why) => cpu_only(format!("CPU solver: no usable CUDA GPU ({why})")),
            Ok(_) => build_cuda_any(scenario, backend),
        },
    }
}
