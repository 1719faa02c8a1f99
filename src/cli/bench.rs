//! `flowscope bench`: solver speed in MLUPS on a periodic box of fluid.

use std::time::Instant;

use super::SolverKind;
use crate::solver::cpu::CpuSolver;
use crate::solver::flags::{self, CellType};
use crate::solver::{Collision, Grid, Initial, Params, Solver};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[arg(long, value_enum, default_value = "auto")]
    pub solver: SolverKind,
    /// Edge of the cubic grid; repeat for several sizes.
    #[arg(long = "size", default_values_t = [64usize])]
    pub sizes: Vec<usize>,
    /// Timed repeats per size (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Collision model to time.
    #[arg(long, default_value = "trt")]
    pub collision: String,
}

/// Bytes the AA scheme must move per cell and step in FP32 (19 reads + 19 writes).
pub const BYTES_PER_CELL_STEP_FP32: f64 = 152.0;

fn collision(name: &str) -> anyhow::Result<Collision> {
    match name {
        "bgk" => Ok(Collision::Bgk),
        "trt" => Ok(Collision::Trt),
        other => anyhow::bail!("--collision {other}: use bgk or trt"),
    }
}

/// A periodic cube of fluid with a gentle shear flow, so the arithmetic is real.
pub fn bench_solver(n: usize, collision: Collision) -> anyhow::Result<CpuSolver> {
    let grid = Grid {
        size: [n, n, n],
        periodic: [true; 3],
    };
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
    let flags = vec![flags::make(CellType::Fluid, 0); grid.cells()];
    Ok(CpuSolver::new(
        grid,
        flags,
        Params::new(0.6, collision),
        Initial::Fields(fields),
    )?)
}

pub fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let collision = collision(&args.collision)?;
    match args.solver {
        SolverKind::Cuda => anyhow::bail!("the CUDA benchmark is not part of this build yet"),
        SolverKind::Auto | SolverKind::Cpu => {}
    }
    println!(
        "solver: CPU reference ({} threads), collision {collision}, FP32",
        rayon::current_num_threads()
    );
    println!(
        "{:>6} {:>12} {:>10} {:>12}",
        "size", "cells", "MLUPS", "GB/s"
    );
    for &n in &args.sizes {
        if n < 4 {
            anyhow::bail!("--size {n}: use at least 4");
        }
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
            mlups * 1e6 * BYTES_PER_CELL_STEP_FP32 / 1e9
        );
    }
    Ok(())
}
