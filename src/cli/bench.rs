//! `flowscope bench`: solver speed in MLUPS on a periodic box of fluid, and for
//! CUDA the device's copy bandwidth and the share of it the solver reaches.

use std::time::Instant;

use super::{PrecisionArg, SolverKind};
use crate::solver::cpu::CpuSolver;
use crate::solver::cuda::{self, CudaSolver};
use crate::solver::flags::{self, CellType};
use crate::solver::slabs::{Partition, SlabSolver};
use crate::solver::{Collision, Grid, Initial, Params, Precision, Solver};

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
    /// Scenario for --stream (its domain is resized to each --size cube).
    #[arg(long)]
    pub scenario: Option<std::path::PathBuf>,
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
pub enum CollisionArg {
    Bgk,
    Trt,
}

/// Bytes the AA scheme must move per cell and step: 19 reads + 19 writes.
pub fn bytes_per_cell_step(precision: Precision) -> f64 {
    38.0 * precision.bytes_per_population() as f64
}

fn periodic_box(n: usize) -> (Grid, Vec<u8>) {
    periodic_grid([n, n, n])
}

fn periodic_grid(size: [usize; 3]) -> (Grid, Vec<u8>) {
    let grid = Grid {
        size,
        periodic: [true; 3],
    };
    (grid, vec![flags::make(CellType::Fluid, 0); grid.cells()])
}

/// A periodic cube of fluid with a shear flow, so the arithmetic is real.
pub fn bench_solver(n: usize, collision: Collision) -> anyhow::Result<CpuSolver> {
    let (grid, cell_flags) = periodic_box(n);
    let mut fields = crate::solver::Fields::new(grid.size);
    for z in 0..n {
        for y in 0..n {
            for x in 0..n {
                let c = fields.index(x, y, z);
                let phase = 2.0 * std::f32::consts::PI * y as f32 / n as f32;
                fields.ux[c] = 0.05 * phase.sin();
                fields.uz[c] = 0.02 * phase.cos();
            }
        }
    }
    Ok(CpuSolver::new(
        grid,
        cell_flags,
        Params::new(0.6, collision),
        Initial::Fields(fields),
    )?)
}

pub fn bench(args: BenchArgs) -> anyhow::Result<()> {
    if args.render {
        return bench_render(&args);
    }
    if args.stream {
        return bench_stream(&args);
    }
    let collision = match args.collision {
        CollisionArg::Bgk => Collision::Bgk,
        CollisionArg::Trt => Collision::Trt,
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
    if use_cuda && !args.gpus.is_empty() {
        bench_gpus(&args, collision)
    } else if use_cuda {
        bench_cuda(&args, collision)
    } else {
        bench_cpu(&args, collision)
    }
}

fn bench_cpu(args: &BenchArgs, collision: Collision) -> anyhow::Result<()> {
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
        let cells = (n * n * n) as f64;
        // Warm up, then choose an even step count lasting ~0.5 s per repeat.
        let t0 = Instant::now();
        solver.step(2)?;
        let per_step = t0.elapsed().as_secs_f64() / 2.0;
        let steps = (((0.5 / per_step).ceil() as u64).max(2) + 1) & !1;
        let mut rates = Vec::new();
        for _ in 0..args.repeats.max(1) {
            let t = Instant::now();
            solver.step(steps)?;
            rates.push(cells * steps as f64 / t.elapsed().as_secs_f64() / 1e6);
        }
        rates.sort_by(|a, b| a.total_cmp(b));
        let mlups = rates[rates.len() / 2];
        if let Some(e) = solver.stats()?.instability() {
            anyhow::bail!("benchmark flow became unstable: {e}");
        }
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
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

fn cuda_box(n: usize, collision: Collision, precision: Precision) -> anyhow::Result<CudaSolver> {
    cuda_grid([n, n, n], collision, precision)
}

fn cuda_grid(
    size: [usize; 3],
    collision: Collision,
    precision: Precision,
) -> anyhow::Result<CudaSolver> {
    let (grid, cell_flags) = periodic_grid(size);
    // A uniform flow does the same arithmetic as any other (no data-dependent
    // branches) and needs no host-side initial state for large grids.
    Ok(CudaSolver::new(
        grid,
        cell_flags,
        Params::new(0.6, collision),
        Initial::Uniform([0.05, 0.02, -0.01]),
        precision,
    )?)
}

fn bench_cuda(args: &BenchArgs, collision: Collision) -> anyhow::Result<()> {
    let info = cuda::probe().map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "device: {} (sm_{}{}, {} SMs), {} free of {}",
        info.name,
        info.compute_capability.0,
        info.compute_capability.1,
        info.multiprocessors,
        crate::scenario::human_bytes(info.free_bytes),
        crate::scenario::human_bytes(info.total_bytes)
    );
    let probe = cuda_box(16, collision, Precision::Fp32)?;
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
            let mut solver = cuda_box(n, collision, precision)?;
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
            let mut solver = cuda_box(side, collision, precision)?;
            let mlups = time_cuda(&mut solver, 3)?;
            println!(
                "largest {}: {side}³ = {:.2} billion cells, {} on the GPU, {:.0} MLUPS",
                precision.name(),
                (side as f64).powi(3) / 1e9,
                crate::scenario::human_bytes(solver.memory_bytes()),
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
    collision: Collision,
    precision: Precision,
) -> anyhow::Result<SlabSolver<CudaSolver>> {
    let (grid, cell_flags) = periodic_grid(size);
    let partition = Partition::new(grid, count)?;
    Ok(SlabSolver::new(
        partition,
        cell_flags,
        |s, grid, f, owned| {
            CudaSolver::on_device(
                s,
                grid,
                f,
                Params::new(0.6, collision),
                Initial::Uniform([0.05, 0.02, -0.01]),
                precision,
                Some(owned),
            )
        },
    )?)
}

/// MLUPS of `solver` by wall clock over batches of steps (each batch ends
/// synchronised), median of `repeats`.
fn time_wall(solver: &mut dyn Solver, repeats: usize) -> anyhow::Result<f64> {
    let cells = solver.grid().cells() as f64;
    solver.step(10)?;
    let t = Instant::now();
    solver.step(10)?;
    let per_step = t.elapsed().as_secs_f64() / 10.0;
    let steps = (((0.5 / per_step).ceil() as u64).clamp(2, 4000) + 1) & !1;
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
    collision: Collision,
    precision: Precision,
    repeats: usize,
    base: Option<f64>,
) -> anyhow::Result<f64> {
    let (mlups, unhidden) = if count == 1 {
        let mut s = cuda_grid(size, collision, precision)?;
        (time_wall(&mut s, repeats)?, None)
    } else {
        let mut s = cuda_slabs(size, count, collision, precision)?;
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

fn bench_gpus(args: &BenchArgs, collision: Collision) -> anyhow::Result<()> {
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
            crate::scenario::human_bytes(info.free_bytes)
        );
    }
    if counts.iter().any(|&n| n > 1) {
        let probe = cuda_slabs([16, 16, 16], 2, collision, Precision::Fp32)
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
                        collision,
                        precision,
                        args.repeats,
                        base,
                    )?;
                    base.get_or_insert(per);
                }
            }
        }
        let most = *counts.last().unwrap_or(&1);
        for d in &args.domains {
            let size = parse_domain(d)?;
            let mut s = cuda_slabs(size, most, collision, precision)?;
            let mlups = time_wall(&mut s, args.repeats.min(3))?;
            println!(
                "domain {d} on {most} GPUs: {:.0} MLUPS, {} on the GPUs ({} per GPU)",
                mlups,
                crate::scenario::human_bytes(s.memory_bytes()),
                crate::scenario::human_bytes(s.memory_bytes() / most as u64)
            );
        }
    }
    Ok(())
}

/// Median wall-clock time of `f` (which submits GPU work and waits for it).
fn median_ms(repeats: usize, mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    f()?;
    let mut times = Vec::new();
    for _ in 0..repeats.max(3) {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(times))
}

/// Waits until the GPU has finished everything submitted.
fn wait(gpu: &crate::render::gpu::Gpu) -> anyhow::Result<()> {
    gpu.device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| anyhow::anyhow!("waiting for the GPU: {e}"))?;
    Ok(())
}

/// A sphere-and-vortex velocity field whose speed isosurface is a closed,
/// wrinkled surface.
fn vortex_field(n: usize) -> crate::solver::Fields {
    let mut f = crate::solver::Fields::new([n, n, n]);
    let c = (n as f32 - 1.0) / 2.0;
    for z in 0..n {
        for y in 0..n {
            for x in 0..n {
                let i = f.index(x, y, z);
                let (dx, dy, dz) = (x as f32 - c, y as f32 - c, z as f32 - c);
                let r = (dx * dx + dy * dy + dz * dz).sqrt() / c;
                let wobble = 1.0 + 0.1 * (dx * 0.3).sin() * (dy * 0.2).cos() * (dz * 0.25).sin();
                f.ux[i] = 0.05 * (1.0 - r * wobble).max(0.0) - 0.01 * dy / c;
                f.uy[i] = 0.01 * dx / c;
                f.uz[i] = 0.002 * (dz * 0.1).sin();
            }
        }
    }
    f
}

/// ux is a gyroid of the given period (cells): its zero surface fills the
/// whole box, for counts of impostors in the millions.
fn gyroid_field(n: usize, period: f32) -> crate::solver::Fields {
    let mut f = crate::solver::Fields::new([n, n, n]);
    let k = std::f32::consts::TAU / period;
    for z in 0..n {
        for y in 0..n {
            for x in 0..n {
                let i = f.index(x, y, z);
                let (a, b, c) = (x as f32 * k + 0.3, y as f32 * k + 0.2, z as f32 * k + 0.1);
                f.ux[i] = a.sin() * b.cos() + b.sin() * c.cos() + c.sin() * a.cos();
            }
        }
    }
    f
}

/// The visualisation passes on analytic fields. Times include submission
/// and the wait for the GPU (an upper bound on the GPU time); frames go
/// through the whole picture path (scene, accumulate, compose).
fn bench_render(args: &BenchArgs) -> anyhow::Result<()> {
    use crate::render::derive::PlotType;
    use crate::render::gpu::{Gpu, GpuTimer};
    use crate::render::isosurface::Extractor;
    use crate::render::passes::{DerivePass, MinMax};
    use crate::render::scene::Stereo;
    use crate::render::streamlines::{Rake, Tracer};
    use crate::render::viewer::{SurfaceMode, ViewSettings, Viewer};
    use crate::render::volume::{FieldStaging, Volume};

    const HD: [u32; 2] = [1920, 1080];
    let gpu = Gpu::headless()?;
    println!(
        "adapter: {} ({:?}, {:?})",
        gpu.info.name, gpu.info.device_type, gpu.info.backend
    );
    // A new camera angle per repeat, so every frame is drawn afresh.
    let mut turn = 0.0f32;
    let mut frame = |viewer: &mut Viewer, settings: &ViewSettings| -> anyhow::Result<()> {
        turn += 1e-3;
        viewer.camera.yaw = -2.2 + turn;
        viewer.render_all(&gpu, settings, HD)?;
        wait(&gpu)
    };
    println!(
        "{:>6} {:>14} {:>14} {:>12} {:>12} {:>12} {:>16} {:>12} {:>22}",
        "size",
        "derive+range",
        "extract (ms)",
        "(GPU time)",
        "(no surface)",
        "triangles",
        "1920x1080 (ms)",
        "(scene GPU)",
        "anaglyph 16 AA (ms)"
    );
    let mut uploads = Vec::new();
    for &n in &args.sizes {
        let f = vortex_field(n);
        let size = [n as u32; 3];
        let fields = Volume::fields(&gpu, size);
        // The window's upload of a frame, and its host-side part alone (the
        // same interleave into ordinary memory): the rest is the GPU's copy.
        let mut staging = FieldStaging::default();
        fields.write_fields_through(&gpu, &f, &mut staging)?;
        let upload_ms = median_ms(args.repeats, || {
            fields.write_fields_through(&gpu, &f, &mut staging)?;
            wait(&gpu)
        })?;
        let mut texels = vec![[0.0f32; 4]; f.rho.len()];
        let interleave_ms = median_ms(args.repeats, || {
            use rayon::prelude::*;
            texels
                .par_chunks_mut(1 << 14)
                .enumerate()
                .for_each(|(k, chunk)| {
                    for (i, t) in chunk.iter_mut().enumerate() {
                        let c = (k << 14) + i;
                        *t = [f.rho[c], f.ux[c], f.uy[c], f.uz[c]];
                    }
                });
            Ok(())
        })?;
        uploads.push((n, upload_ms, interleave_ms));
        let scalar = Volume::scalar(&gpu, size);
        let derive = DerivePass::new(&gpu);
        let minmax = MinMax::new(&gpu);
        let mut range = (0.0f32, 0.0f32);
        let derive_ms = median_ms(args.repeats, || {
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            derive.run(&gpu, &mut encoder, &fields, &scalar, PlotType::Speed);
            gpu.queue.submit([encoder.finish()]);
            range = minmax.compute(&gpu, &scalar)?;
            Ok(())
        })?;
        let mut extractor = Extractor::new(&gpu, 1 << 22);
        extractor.timer = GpuTimer::new(&gpu);
        let iso = range.0 + 0.5 * (range.1 - range.0);
        let mut vertices = 0;
        let mut gpu_ms = Vec::new();
        let extract_ms = median_ms(args.repeats, || {
            vertices = extractor.extract(&gpu, &scalar, iso)?;
            if let Some(t) = &extractor.timer {
                gpu_ms.push(t.read_ms(&gpu)?);
            }
            Ok(())
        })?;
        let timed = |ms: Vec<f64>| {
            if ms.is_empty() {
                "-".to_string()
            } else {
                format!("{:.2}", median(ms))
            }
        };
        let extract_gpu = timed(gpu_ms);
        // The same pass where no cube holds the surface: what every cube costs.
        let mut empty_ms = Vec::new();
        for _ in 0..args.repeats {
            extractor.extract(&gpu, &scalar, range.1 + 1.0)?;
            if let Some(t) = &extractor.timer {
                empty_ms.push(t.read_ms(&gpu)?);
            }
        }
        let empty_gpu = timed(empty_ms);
        let mut viewer = Viewer::new(&gpu);
        viewer.upload(&gpu, &f, &[], 0, None)?;
        let mono = ViewSettings {
            aa_samples: 1,
            ..Default::default()
        };
        let frame_ms = median_ms(args.repeats, || frame(&mut viewer, &mono))?;
        viewer.scene_timer = GpuTimer::new(&gpu);
        let mut scene_ms = Vec::new();
        for _ in 0..args.repeats {
            frame(&mut viewer, &mono)?;
            if let Some(t) = &viewer.scene_timer {
                scene_ms.push(t.read_ms(&gpu)?);
            }
        }
        viewer.scene_timer = None;
        let scene_gpu = timed(scene_ms);
        let anaglyph = ViewSettings {
            stereo: Some(Stereo::default()),
            grey_background: true,
            aa_samples: 16,
            ..Default::default()
        };
        let anaglyph_ms = median_ms(args.repeats, || frame(&mut viewer, &anaglyph))?;
        println!(
            "{:>6} {:>14.2} {:>14.2} {:>12} {:>12} {:>12} {:>16.2} {:>12} {:>22.1}",
            n,
            derive_ms,
            extract_ms,
            extract_gpu,
            empty_gpu,
            vertices / 3,
            frame_ms,
            scene_gpu,
            anaglyph_ms
        );
    }

    println!();
    println!(
        "{:>6} {:>12} {:>16} {:>10}",
        "size", "spheres", "1920x1080 (ms)", "fps"
    );
    for &n in &args.sizes {
        // Period 40 gives about 2 million straddling cells at 256³.
        let f = gyroid_field(n, 40.0);
        let mut viewer = Viewer::new(&gpu);
        viewer.upload(&gpu, &f, &[], 0, None)?;
        let spheres = ViewSettings {
            plot: PlotType::Ux,
            iso: Some(0.0),
            mode: SurfaceMode::Spheres,
            sphere_radius: 0.6,
            aa_samples: 1,
            ..Default::default()
        };
        let ms = median_ms(args.repeats, || frame(&mut viewer, &spheres))?;
        println!(
            "{:>6} {:>12} {:>16.2} {:>10.0}",
            n,
            viewer.info.spheres,
            ms,
            1e3 / ms
        );
    }

    println!();
    println!(
        "{:>6} {:>18} {:>22}",
        "size", "field upload (ms)", "host interleave (ms)"
    );
    for (n, upload, interleave) in uploads {
        println!("{n:>6} {upload:>18.2} {interleave:>22.2}");
    }

    println!();
    println!(
        "{:>6} {:>8} {:>8} {:>12} {:>12}",
        "size", "lines", "steps", "points", "trace (ms)"
    );
    for &n in &args.sizes {
        let f = vortex_field(n);
        let size = [n as u32; 3];
        let fields = Volume::fields(&gpu, size);
        fields.write_fields(&gpu, &f)?;
        let blocked = Volume::scalar(&gpu, size);
        blocked.write_scalar(&gpu, &vec![0.0; n * n * n]);
        let hi = glam::Vec3::splat(n as f32 - 1.0);
        // 10,000 lines, or as many as one storage binding holds (software
        // adapters bind less).
        let fit = gpu.device.limits().max_storage_buffer_binding_size / (1001 * 16);
        let rake = Rake::Box {
            lo: hi * 0.2,
            hi: hi * 0.8,
            count: fit.min(10_000) as u32,
            seed: 1,
        };
        let mut tracer = Tracer::new(&gpu);
        tracer.set_seeds(&gpu, &rake.seeds(), 1000)?;
        // Half a cell per step at the largest speed (0.05), no stagnation stop:
        // every line runs its 1000 steps unless it leaves the box.
        let trace_ms = median_ms(args.repeats, || {
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            tracer.trace(&gpu, &mut encoder, &fields, &blocked, 10.0, 0.0);
            gpu.queue.submit([encoder.finish()]);
            wait(&gpu)
        })?;
        let points: u64 = tracer.read_lengths(&gpu)?.iter().map(|&n| n as u64).sum();
        println!(
            "{:>6} {:>8} {:>8} {:>12} {:>12.2}",
            n, tracer.lines, tracer.steps, points, trace_ms
        );
    }
    Ok(())
}

/// The solver's speed while the visualiser streams (see `BenchArgs::stream`).
fn bench_stream(args: &BenchArgs) -> anyhow::Result<()> {
    use crate::app::worker::Worker;
    use crate::render::gpu::Gpu;
    use crate::render::viewer::{ViewSettings, Viewer};
    use crate::scenario::Scenario;
    use crate::solver::select::{self, Backend, Gpus};
    use std::time::Duration;

    let gpu = Gpu::headless()?;
    let source = args
        .scenario
        .clone()
        .unwrap_or_else(|| "assets/scenarios/cavity.toml".into());
    let dir = tempfile_dir()?;
    println!(
        "adapter: {} ({:?}); scenario {}",
        gpu.info.name,
        gpu.info.device_type,
        source.display()
    );
    let share = crate::render::interop::device_uuid(&gpu).filter(|_| !args.host_frames);
    println!(
        "{:>6} {:>8} {:>16} {:>16} {:>8} {:>12} {:>14} {:>8}",
        "size", "display", "alone (MLUPS)", "streaming", "kept", "frames/s", "frame (ms)", "shared"
    );
    for &n in &args.sizes {
        let set = [format!("domain.size=[{n},{n},{n}]")];
        let scenario = Scenario::load(&source, &set)?;
        // The worker loads a file: write the resized scenario out.
        let path = dir.join(format!("stream-{n}.toml"));
        std::fs::write(&path, &scenario.source)?;
        let backend = Backend {
            choice: args.solver.into(),
            precision: args.precisions[0].into(),
            gpus: Gpus::One,
        };
        // Alone: the same solver, stepping in chunks of the same length as the
        // worker's (it aims at 25 chunks per second).
        let mut solver = select::build(
            backend.choice,
            &scenario,
            backend.precision,
            Gpus::One,
            super::available_memory(),
        )?
        .solver;
        solver.step(20)?;
        let began = Instant::now();
        let (mut steps, mut chunk) = (0u64, 2u64);
        while began.elapsed().as_secs_f64() < args.seconds / 2.0 {
            let t = Instant::now();
            solver.step(chunk)?;
            steps += chunk;
            if t.elapsed().as_secs_f64() < 0.02 {
                chunk = (chunk * 2).min(8192);
            }
        }
        let alone = scenario.cells() as f64 * steps as f64 / began.elapsed().as_secs_f64() / 1e6;
        drop(solver);

        let worker = Worker::start(path, backend, args.display_limit, || {});
        if let Some(device) = share {
            worker.send(crate::app::worker::Command::ShareDisplay(Some(device)));
        }
        let mut viewer = Viewer::new(&gpu);
        let settings = ViewSettings {
            aa_samples: 1,
            ..Default::default()
        };
        // What the window does with a frame: import (or upload) it, then
        // derive, extract and draw, waiting for the GPU.
        let consume =
            |viewer: &mut Viewer, frame: crate::app::worker::Frame| -> anyhow::Result<()> {
                if args.consumer != "none" {
                    viewer.upload(
                        &gpu,
                        &frame.fields,
                        &frame.flags,
                        frame.geometry,
                        frame.shared.as_ref(),
                    )?;
                    if viewer.sharing_refused() && share.is_some() {
                        anyhow::bail!("the solver's display frames could not be imported");
                    }
                }
                match args.consumer.as_str() {
                    "full" => _ = viewer.render(&gpu, &settings, [1920, 1080])?,
                    "extract" => viewer.update(&gpu, &settings)?,
                    _ => {}
                }
                wait(&gpu)
            };
        // Let it load, settle its chunk length and make (and import) its
        // display frames, which takes a few hundred milliseconds once.
        let warm = Instant::now();
        while warm.elapsed().as_secs_f64() < 1.5
            || (worker.status().step < 50 && warm.elapsed().as_secs() < 60)
        {
            match worker.take_frame() {
                Some(frame) => consume(&mut viewer, frame)?,
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        let before = worker.status();
        let (start_step, began) = (before.step, Instant::now());
        let shared_before = viewer.shared_uploads;
        let (mut frames, mut frame_ms) = (0u32, Vec::new());
        while began.elapsed().as_secs_f64() < args.seconds {
            match worker.take_frame() {
                Some(frame) => {
                    let t = Instant::now();
                    consume(&mut viewer, frame)?;
                    frame_ms.push(t.elapsed().as_secs_f64() * 1e3);
                    frames += 1;
                }
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        let secs = began.elapsed().as_secs_f64();
        let status = worker.status();
        if let Some(m) = status.message {
            anyhow::bail!("the solver thread stopped: {m}");
        }
        let streaming = scenario.cells() as f64 * (status.step - start_step) as f64 / secs / 1e6;
        let shown = crate::solver::display::coarse_size(
            [n; 3],
            crate::solver::display::stride_for([n; 3], args.display_limit),
        );
        // Frames that reached their texture by a copy within the GPU.
        let shared = viewer.shared_uploads - shared_before;
        println!(
            "{:>6} {:>8} {:>16.1} {:>16.1} {:>7.1}% {:>12.1} {:>14.2} {:>7.0}%",
            n,
            format!("{}³", shown[0]),
            alone,
            streaming,
            100.0 * streaming / alone,
            frames as f64 / secs,
            median(frame_ms),
            100.0 * shared as f64 / frames.max(1) as f64
        );
        let (a, b) = (before.timing, status.timing);
        let chunks = (b.chunks - a.chunks).max(1) as f64;
        let per = |x: f64, y: f64| 1e3 * (x - y) / chunks;
        println!(
            "{:>6} per chunk of {:.1} steps: stepping {:.2} ms (delivering {:.2}), sampling {:.2}, rest of the loop {:.2}",
            "",
            (b.steps - a.steps) as f64 / chunks,
            per(b.stepping, a.stepping),
            per(b.delivering, a.delivering),
            per(b.sampling, a.sampling),
            per(b.other, a.other) - per(b.sampling, a.sampling),
        );
    }
    Ok(())
}

/// A fresh folder under the system's temporary one.
fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("flowscope-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| anyhow::anyhow!("cannot make {}: {e}", dir.display()))?;
    Ok(dir)
}
