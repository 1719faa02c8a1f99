//! `flowscope bench`: solver speed in MLUPS on a periodic box of fluid, and for
//! CUDA the device's copy bandwidth and the share of it the solver reaches.

use std::time::Instant;

mod projection;
mod render;
mod scenario;
mod stream;
mod voxelize;

use super::{PrecisionArg, SolverKind};
use crate::solver::flags::{self, CellType};
use crate::solver::lbm::cpu::CpuSolver;
use crate::solver::lbm::cuda::{self, CudaSolver, Placement};
use crate::solver::lbm::slabs::{Partition, SlabSolver};
use crate::solver::{Collision, Grid, Initial, Params, Precision, Solver};
use crate::system::{human_bytes, Tuning};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[arg(long, value_enum, default_value = "auto")]
    pub solver: SolverKind,
    /// Edge of the cubic grid; repeat for several sizes.
    #[arg(long = "size", default_values_t = [64usize])]
    pub sizes: Vec<usize>,
    /// Storage precision(s) of the CUDA solver.
    #[arg(long = "precision", value_enum, default_values_t = [PrecisionArg::Fp32])]
    pub precisions: Vec<PrecisionArg>,
    /// Timed repeats per size (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Collision model to time.
    #[arg(long, value_enum, default_value = "trt")]
    pub collision: CollisionArg,
    /// Time the Smagorinsky subgrid model with this constant (e.g. 0.1).
    #[arg(long)]
    pub smagorinsky: Option<f32>,
    /// CUDA threads per block along x; repeat to compare.
    #[arg(long = "block", default_values_t = [cuda::DEFAULT_BLOCK])]
    pub blocks: Vec<u32>,
    /// Also allocate and run the largest cube that fits the GPU, per precision.
    #[arg(long)]
    pub largest: bool,
    /// Time the visualisation passes instead (wgpu): derive + min/max +
    /// isosurface extraction of a --size cube, and drawing a frame.
    #[arg(long)]
    pub render: bool,
    /// Time the solver while the window's pipeline streams its fields: the
    /// solver thread runs the scenario (default: the cavity at each --size)
    /// and a consumer uploads, derives, extracts and draws every frame, as
    /// the window does; compared with the same solver stepping alone.
    #[arg(long)]
    pub stream: bool,
    /// Time mesh voxelisation instead: icospheres of 82 k to 5.2 M triangles
    /// into each --size cube, on the CPU and the GPU (whose cells must be the
    /// CPU's), and the defect check that loading a mesh runs.
    #[arg(long)]
    pub voxelize: bool,
    /// A scenario to time beside the periodic box of the same size, with
    /// the share of its step each kernel takes (with --stream: the scenario
    /// streamed, its domain resized to each --size cube).
    #[arg(long)]
    pub scenario: Option<std::path::PathBuf>,
    /// Scale the --scenario by this factor in every direction (obstacles
    /// with it), e.g. 2 for 8 times the cells.
    #[arg(long, value_name = "F", requires = "scenario")]
    pub scale: Option<f64>,
    /// Override a key of the --scenario before it is scaled, e.g.
    /// --set fluid.reynolds=1000.
    #[arg(long = "set", value_name = "KEY=VALUE", requires = "scenario")]
    pub set: Vec<String>,
    /// The solution method to time: `projection` times its solver (CUDA
    /// where there is a GPU) on the cavity at each --size, per step and per
    /// part (advection and diffusion, pressure, correction), with its
    /// pressure solve's iterations; on the CPU beside the lattice Boltzmann
    /// CPU solver, on a GPU also the urban-flow seed's city block.
    #[arg(long, value_enum, default_value = "lbm")]
    pub method: crate::scenario::Method,
    /// With --method projection: also time the Jacobi baseline (the
    /// urban-flow seed's pressure solver).
    #[arg(long)]
    pub jacobi: bool,
    /// Seconds to stream per size.
    #[arg(long, default_value_t = 6.0)]
    pub seconds: f64,
    /// What the --stream consumer does with each frame: `full` (upload,
    /// derive, extract, draw, as the window does), `extract` (no draw),
    /// `upload` only, or `none`
    /// (drop it): where the solver's lost time goes.
    #[arg(long, default_value = "full", value_parser = ["full", "extract", "upload", "none"], hide = true)]
    pub consumer: String,
    /// --stream frames always through host memory, as where the solver and
    /// the window are on different GPUs (the comparison for shared frames).
    #[arg(long, hide = true)]
    pub host_frames: bool,
    /// What --stream draws with every frame: the plain surface, the surface
    /// and three slices through the middle (with their own range), the
    /// surface and the volume rendering of vorticity, or the slices or the
    /// volume without the surface.
    #[arg(long, value_enum, default_value = "surface")]
    pub view: StreamView,
    /// Display limit for --stream (see the window's --display-limit).
    #[arg(long, value_name = "N", default_value_t = crate::solver::display::DEFAULT_LIMIT,
          value_parser = super::parse_display_limit)]
    pub display_limit: usize,
    /// Spread the CUDA solver over 1, 2, ... GPUs (comma list): strong scaling
    /// of each --size cube, weak scaling with a --size cube per GPU.
    #[arg(long, value_delimiter = ',')]
    pub gpus: Vec<usize>,
    /// Extra domains to run on the largest GPU count, as NXxNYxNZ.
    #[arg(long = "domain")]
    pub domains: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StreamView {
    Surface,
    Slices,
    Volume,
    SlicesOnly,
    VolumeOnly,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CollisionArg {
    Bgk,
    Trt,
    Regularized,
}

/// The collision a benchmark times: the model and the subgrid model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Collider {
    pub collision: Collision,
    /// Smagorinsky constant; 0 without the subgrid model.
    pub smagorinsky: f32,
}

impl Collider {
    fn params(self, tau: f32) -> Params {
        let mut p = Params::new(tau, self.collision);
        p.smagorinsky = self.smagorinsky;
        p
    }
}

impl std::fmt::Display for Collider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.collision)?;
        if self.smagorinsky > 0.0 {
            write!(f, " + Smagorinsky C_s {}", self.smagorinsky)?;
        }
        Ok(())
    }
}

/// Bytes the AA scheme must move per cell and step: 19 reads + 19 writes.
pub fn bytes_per_cell_step(precision: Precision) -> f64 {
    38.0 * precision.bytes_per_population() as f64
}

fn periodic_grid(size: [usize; 3]) -> (Grid, Vec<u8>) {
    let grid = Grid {
        size,
        periodic: [true; 3],
    };
    (grid, vec![flags::make(CellType::Fluid, 0); grid.cells()])
}

/// A periodic cube of fluid with a shear flow, so the arithmetic is real.
pub fn bench_solver(n: usize, collision: Collider) -> anyhow::Result<CpuSolver> {
    bench_solver_grid([n, n, n], collision)
}

/// [`bench_solver`] on a periodic grid of any size.
pub fn bench_solver_grid(size: [usize; 3], collision: Collider) -> anyhow::Result<CpuSolver> {
    let (grid, cell_flags) = periodic_grid(size);
    let mut fields = crate::solver::Fields::new(grid.size);
    let [nx, ny, nz] = size;
    for z in 0..nz {
        for y in 0..ny {
            for x in 0..nx {
                let c = fields.index(x, y, z);
                let phase = 2.0 * std::f32::consts::PI * y as f32 / ny as f32;
                fields.ux[c] = 0.05 * phase.sin();
                fields.uz[c] = 0.02 * phase.cos();
            }
        }
    }
    Ok(CpuSolver::new(
        grid,
        cell_flags,
        collision.params(0.6),
        Initial::Fields(fields),
    )?)
}

pub fn bench(args: BenchArgs, tuning: &Tuning) -> anyhow::Result<()> {
    if args.render {
        return render::bench_render(&args, tuning);
    }
    if args.stream {
        return stream::bench_stream(&args, tuning);
    }
    if args.voxelize {
        return voxelize::bench_voxelize(&args);
    }
    let collision = Collider {
        collision: match args.collision {
            CollisionArg::Bgk => Collision::Bgk,
            CollisionArg::Trt => Collision::Trt,
            CollisionArg::Regularized => Collision::Regularized,
        },
        smagorinsky: match args.smagorinsky {
            Some(c) if !(c > 0.0 && c <= 0.5) => {
                anyhow::bail!("--smagorinsky {c}: give a constant between 0 and 0.5, e.g. 0.1")
            }
            c => c.unwrap_or(0.0),
        },
    };
    for &n in &args.sizes {
        if n < 4 {
            anyhow::bail!("--size {n}: use at least 4");
        }
    }
    let use_cuda = match args.solver {
        SolverKind::Cpu => false,
        SolverKind::Cuda => {
            cuda::probe().map_err(|e| anyhow::anyhow!("the CUDA solver cannot be used: {e}"))?;
            true
        }
        SolverKind::Auto => match cuda::probe() {
            Ok(_) => true,
            Err(e) => {
                println!("no usable CUDA GPU ({e}): benchmarking the CPU solver");
                false
            }
        },
    };
    if let Some(path) = &args.scenario {
        return scenario::bench_scenario(&args, path, use_cuda, tuning);
    }
    if args.method == crate::scenario::Method::Projection {
        return projection::bench_projection(&args, use_cuda, tuning);
    }
    if use_cuda && !args.gpus.is_empty() {
        bench_gpus(&args, collision, tuning)
    } else if use_cuda {
        bench_cuda(&args, collision, tuning)
    } else {
        bench_cpu(&args, collision)
    }
}

fn bench_cpu(args: &BenchArgs, collision: Collider) -> anyhow::Result<()> {
    println!(
        "solver: CPU reference ({} threads), collision {collision}, FP32",
        rayon::current_num_threads()
    );
    println!(
        "{:>6} {:>12} {:>10} {:>12}",
        "size", "cells", "MLUPS", "GB/s"
    );
    for &n in &args.sizes {
        let mut solver = bench_solver(n, collision)?;
        let mlups = time_cpu(&mut solver, args.repeats)?;
        println!(
            "{:>6} {:>12} {:>10.2} {:>12.2}",
            n,
            n * n * n,
            mlups,
            mlups * 1e6 * bytes_per_cell_step(Precision::Fp32) / 1e9
        );
    }
    Ok(())
}

/// MLUPS of a CPU solver: after a warm-up, even step counts lasting ~0.5 s,
/// median of `repeats`.
pub(super) fn time_cpu(solver: &mut dyn Solver, repeats: usize) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    solver.step(2)?;
    let per_step = t0.elapsed().as_secs_f64() / 2.0;
    let steps = (((0.5 / per_step).ceil() as u64).max(2) + 1) & !1;
    median_rate(solver, steps, repeats)
}

/// Median MLUPS of `repeats` runs of `steps` steps; refuses a flow that
/// blew up meanwhile.
fn median_rate(solver: &mut dyn Solver, steps: u64, repeats: usize) -> anyhow::Result<f64> {
    let cells = solver.grid().cells() as f64;
    let mut rates = Vec::new();
    for _ in 0..repeats.max(1) {
        let t = Instant::now();
        solver.step(steps)?;
        rates.push(cells * steps as f64 / t.elapsed().as_secs_f64() / 1e6);
    }
    if let Some(e) = solver.stats()?.instability() {
        anyhow::bail!("benchmark flow became unstable: {e}");
    }
    Ok(median(rates))
}

/// The median, NaN for no values (a stream that showed no frame).
pub(super) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Device-to-device copy bandwidth (bytes read + written per second).
fn copy_bandwidth(solver: &CudaSolver) -> anyhow::Result<f64> {
    use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;
    let stream = solver.stream().clone();
    let len = 512 * 1024 * 1024 / 4 * 4; // 2 GiB of f32
    let src = stream.alloc_zeros::<f32>(len)?;
    let mut dst = stream.alloc_zeros::<f32>(len)?;
    stream.memcpy_dtod(&src, &mut dst)?;
    let mut rates = Vec::new();
    for _ in 0..7 {
        let start = stream.record_event(Some(CU_EVENT_DEFAULT))?;
        for _ in 0..5 {
            stream.memcpy_dtod(&src, &mut dst)?;
        }
        let end = stream.record_event(Some(CU_EVENT_DEFAULT))?;
        let ms = start.elapsed_ms(&end)? as f64;
        rates.push(5.0 * 2.0 * (len * 4) as f64 / (ms / 1e3));
    }
    stream.synchronize()?;
    Ok(median(rates))
}

/// Times `solver` (events around batches of steps after a warm-up): MLUPS.
fn time_cuda(solver: &mut CudaSolver, repeats: usize) -> anyhow::Result<f64> {
    use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;
    let cells = solver.grid().cells() as f64;
    solver.step(10)?;
    let stream = solver.stream().clone();
    let start = stream.record_event(Some(CU_EVENT_DEFAULT))?;
    solver.enqueue_steps(10)?;
    let end = stream.record_event(Some(CU_EVENT_DEFAULT))?;
    let per_step = start.elapsed_ms(&end)? as f64 / 10.0 / 1e3;
    let steps = (((0.3 / per_step).ceil() as u64).clamp(2, 2000) + 1) & !1;
    let mut rates = Vec::new();
    for _ in 0..repeats.max(1) {
        let start = stream.record_event(Some(CU_EVENT_DEFAULT))?;
        solver.enqueue_steps(steps)?;
        let end = stream.record_event(Some(CU_EVENT_DEFAULT))?;
        let s = start.elapsed_ms(&end)? as f64 / 1e3;
        rates.push(cells * steps as f64 / s / 1e6);
    }
    stream.synchronize()?;
    if let Some(e) = solver.stats()?.instability() {
        anyhow::bail!("benchmark flow became unstable: {e}");
    }
    Ok(median(rates))
}

fn cuda_box(
    n: usize,
    collision: Collider,
    precision: Precision,
    tuning: &Tuning,
) -> anyhow::Result<CudaSolver> {
    cuda_grid([n, n, n], collision, precision, tuning)
}

fn cuda_grid(
    size: [usize; 3],
    collision: Collider,
    precision: Precision,
    tuning: &Tuning,
) -> anyhow::Result<CudaSolver> {
    let (grid, cell_flags) = periodic_grid(size);
    // A uniform flow does the same arithmetic as any other (no data-dependent
    // branches) and needs no host-side initial state for large grids.
    Ok(CudaSolver::new(
        grid,
        cell_flags,
        collision.params(0.6),
        Initial::Uniform([0.05, 0.02, -0.01]),
        precision,
        tuning,
    )?)
}

fn bench_cuda(args: &BenchArgs, collision: Collider, tuning: &Tuning) -> anyhow::Result<()> {
    let info = cuda::probe().map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "device: {} (sm_{}{}, {} SMs), {} free of {}",
        info.name,
        info.compute_capability.0,
        info.compute_capability.1,
        info.multiprocessors,
        human_bytes(info.free_bytes),
        human_bytes(info.total_bytes)
    );
    let probe = cuda_box(16, collision, Precision::Fp32, tuning)?;
    let bandwidth = copy_bandwidth(&probe)?;
    drop(probe);
    println!(
        "device-to-device copy: {:.1} GB/s (bytes read + written)",
        bandwidth / 1e9
    );
    println!(
        "collision {collision}; timing: CUDA events, median of {} repeats after warm-up",
        args.repeats.max(1)
    );
    println!(
        "{:>9} {:>6} {:>6} {:>12} {:>10} {:>10} {:>8}",
        "precision", "block", "size", "cells", "MLUPS", "GB/s", "% copy"
    );
    for &p in &args.precisions {
        let precision: Precision = p.into();
        for &n in &args.sizes {
            let mut solver = cuda_box(n, collision, precision, tuning)?;
            for &block in &args.blocks {
                solver.set_block(block);
                let block = solver.block();
                let mlups = time_cuda(&mut solver, args.repeats)?;
                let gbs = mlups * 1e6 * bytes_per_cell_step(precision) / 1e9;
                println!(
                    "{:>9} {:>6} {:>6} {:>12} {:>10.0} {:>10.1} {:>7.1}%",
                    precision.name(),
                    block,
                    n,
                    n * n * n,
                    mlups,
                    gbs,
                    100.0 * gbs * 1e9 / bandwidth
                );
            }
        }
        if args.largest {
            let info = cuda::probe().map_err(|e| anyhow::anyhow!("{e}"))?;
            // A side the many-cells-per-thread kernels take: even, and a
            // multiple of 4 in FP32 (the odd step's four-cell kernel).
            let unit = match precision {
                Precision::Fp32 => 4,
                Precision::Fp16 => 2,
            };
            let side = cuda::largest_cube(precision, info.free_bytes) as usize / unit * unit;
            let mut solver = cuda_box(side, collision, precision, tuning)?;
            let mlups = time_cuda(&mut solver, 3)?;
            println!(
                "largest {}: {side}³ = {:.2} billion cells, {} on the GPU, {:.0} MLUPS",
                precision.name(),
                (side as f64).powi(3) / 1e9,
                human_bytes(solver.memory_bytes()),
                mlups
            );
        }
    }
    Ok(())
}

/// A periodic box of uniform flow as slabs on GPUs 0..count.
fn cuda_slabs(
    size: [usize; 3],
    count: usize,
    collision: Collider,
    precision: Precision,
    tuning: &Tuning,
) -> anyhow::Result<SlabSolver<CudaSolver>> {
    let (grid, cell_flags) = periodic_grid(size);
    let partition = Partition::new(grid, count)?;
    Ok(SlabSolver::new(
        partition,
        cell_flags,
        collision.params(0.6),
        |s, grid, f, owned, params| {
            CudaSolver::on_device(
                Placement::slab(s, owned),
                grid,
                f,
                params,
                Initial::Uniform([0.05, 0.02, -0.01]),
                precision,
                tuning,
            )
        },
    )?)
}

/// MLUPS of `solver` by wall clock over batches of steps (each batch ends
/// synchronised), median of `repeats`.
fn time_wall(solver: &mut dyn Solver, repeats: usize) -> anyhow::Result<f64> {
    solver.step(10)?;
    let t = Instant::now();
    solver.step(10)?;
    let per_step = t.elapsed().as_secs_f64() / 10.0;
    let steps = (((0.5 / per_step).ceil() as u64).clamp(2, 4000) + 1) & !1;
    median_rate(solver, steps, repeats)
}

fn parse_domain(s: &str) -> anyhow::Result<[usize; 3]> {
    let v: Vec<usize> = s
        .split('x')
        .map(|p| p.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| anyhow::anyhow!("--domain {s}: write it as NXxNYxNZ, e.g. 1024x1024x512"))?;
    match v[..] {
        [x, y, z] if x > 0 && y > 0 && z > 0 => Ok([x, y, z]),
        _ => anyhow::bail!("--domain {s}: write it as NXxNYxNZ, e.g. 1024x1024x512"),
    }
}

/// One row of the scaling tables: MLUPS, efficiency against `base` per GPU,
/// and the share of step time the exchange adds (measured by skipping it).
fn scaling_row(
    kind: &str,
    size: [usize; 3],
    count: usize,
    (collision, precision): (Collider, Precision),
    repeats: usize,
    base: Option<f64>,
    tuning: &Tuning,
) -> anyhow::Result<f64> {
    let (mlups, unhidden) = if count == 1 {
        let mut s = cuda_grid(size, collision, precision, tuning)?;
        (time_wall(&mut s, repeats)?, None)
    } else {
        let mut s = cuda_slabs(size, count, collision, precision, tuning)?;
        let with = time_wall(&mut s, repeats)?;
        s.skip_exchange = true;
        let without = time_wall(&mut s, repeats)?;
        // Step time with the exchange over the step time without it.
        let unhidden = (without / with - 1.0).max(0.0);
        (with, Some(unhidden))
    };
    let per_gpu = mlups / count as f64;
    let eff = base.map_or(100.0, |b| 100.0 * per_gpu / b);
    println!(
        "{:>6} {:>16} {:>5} {:>10.0} {:>10.0} {:>7.1}% {:>12}",
        kind,
        format!("{}x{}x{}", size[0], size[1], size[2]),
        count,
        mlups,
        per_gpu,
        eff,
        unhidden.map_or("-".to_string(), |u| format!("{:.1}%", 100.0 * u))
    );
    Ok(per_gpu)
}

fn bench_gpus(args: &BenchArgs, collision: Collider, tuning: &Tuning) -> anyhow::Result<()> {
    let available = cuda::device_count().map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut counts = args.gpus.clone();
    counts.sort_unstable();
    counts.dedup();
    if let Some(&n) = counts.iter().find(|&&n| n == 0 || n > available) {
        anyhow::bail!("--gpus {n}: this machine has {available} CUDA device(s)");
    }
    for d in 0..available.min(*counts.last().unwrap_or(&1)) {
        let info = cuda::probe_device(d).map_err(|e| anyhow::anyhow!("{e}"))?;
        println!(
            "GPU {d}: {} ({} free)",
            info.name,
            human_bytes(info.free_bytes)
        );
    }
    if counts.iter().any(|&n| n > 1) {
        let probe = cuda_slabs([16, 16, 16], 2, collision, Precision::Fp32, tuning)
            .map_err(|e| anyhow::anyhow!("two GPUs cannot be linked: {e}"))?;
        println!(
            "halo exchange: {}; timing: wall clock, median of {} repeats after warm-up; \
             efficiency: MLUPS per GPU against {} GPU(s); unhidden: step time the exchange adds \
             (the same run without it)",
            probe.link().name(),
            args.repeats.max(1),
            counts[0]
        );
    }
    println!(
        "{:>6} {:>16} {:>5} {:>10} {:>10} {:>8} {:>12}",
        "mode", "grid", "GPUs", "MLUPS", "per GPU", "eff.", "unhidden"
    );
    for &p in &args.precisions {
        let precision: Precision = p.into();
        println!("storage {}, collision {collision}", precision.name());
        for &n in &args.sizes {
            // Strong: one grid over more GPUs; weak: one cube per GPU.
            for (kind, stack) in [("strong", false), ("weak", true)] {
                let mut base = None;
                for &count in &counts {
                    let nz = if stack { n * count } else { n };
                    let per = scaling_row(
                        kind,
                        [n, n, nz],
                        count,
                        (collision, precision),
                        args.repeats,
                        base,
                        tuning,
                    )?;
                    base.get_or_insert(per);
                }
            }
        }
        let most = *counts.last().unwrap_or(&1);
        for d in &args.domains {
            let size = parse_domain(d)?;
            let mut s = cuda_slabs(size, most, collision, precision, tuning)?;
            let mlups = time_wall(&mut s, args.repeats.min(3))?;
            println!(
                "domain {d} on {most} GPUs: {:.0} MLUPS, {} on the GPUs ({} per GPU)",
                mlups,
                human_bytes(s.memory_bytes()),
                human_bytes(s.memory_bytes() / most as u64)
            );
        }
    }
    Ok(())
}

/// Median wall-clock time of `f` (which submits GPU work and waits for it).
pub(super) fn median_ms(
    repeats: usize,
    mut f: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    f()?;
    let mut times = Vec::new();
    for _ in 0..repeats.max(3) {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(times))
}
