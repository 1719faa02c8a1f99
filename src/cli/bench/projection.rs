//! `bench --method projection`: the projection method's solver (CUDA where
//! there is a GPU, else CPU) on the lid-driven cavity at each --size, per
//! step and per part, as the urban-flow seed's table breaks its step down;
//! on the CPU beside the lattice Boltzmann CPU solver, on a GPU with the
//! pressure solve's time in fine-grid sweeps' worth of memory traffic, and
//! the seed's own case (the city block, 256 × 256 × 64) after the cubes.

use std::time::Instant;

use super::{median, BenchArgs};
use crate::scenario::{Method, PressureSolver, Scenario};
use crate::session::select;
use crate::solver::projection::ProjectionSolver;
use crate::solver::Solver;
use crate::system::Tuning;

/// Steps run before timing, so that the pressure solves start warm from a
/// developing flow rather than from rest.
const WARM_UP: u64 = 10;

/// Bytes one Jacobi sweep of the finest grid moves per cell (x, b, the
/// diagonal and the result as f32, the links as one byte): the unit of the
/// pressure solve's traffic.
const SWEEP_BYTES: f64 = 17.0;

/// One timed case: per lattice step, and the parts' sums over the runs.
struct Timing {
    per_step: f64,
    sub_steps: f64,
    explicit: f64,
    pressure: f64,
    correction: f64,
    iterations: f64,
}

/// Times `solver` over `repeats` runs of about half a second each (the
/// median), then one run more with the GPU waited for at each part's end
/// for the shares.
fn time(solver: &mut ProjectionSolver, repeats: usize) -> anyhow::Result<Timing> {
    solver.step(WARM_UP)?;
    let t = Instant::now();
    solver.step(1)?;
    let steps = ((0.5 / t.elapsed().as_secs_f64()).ceil() as u64).clamp(1, 1000);
    // Sub-steps and iterations count over every run (the flow develops, and
    // with it the solves' iterations); the parts only over the last.
    let before = solver.spent();
    let mut runs = Vec::new();
    for _ in 0..repeats.max(1) {
        let t = Instant::now();
        solver.step(steps)?;
        runs.push(t.elapsed().as_secs_f64() / steps as f64);
    }
    solver.set_timed(true);
    solver.step(steps)?;
    let after = solver.spent();
    solver.set_timed(false);
    if let Some(e) = solver.stats()?.instability() {
        anyhow::bail!("benchmark flow became unstable: {e}");
    }
    let sub_steps = (after.sub_steps - before.sub_steps) as f64;
    Ok(Timing {
        per_step: median(runs),
        sub_steps: sub_steps / (steps * (repeats.max(1) as u64 + 1)) as f64,
        explicit: after.explicit - before.explicit,
        pressure: after.pressure - before.pressure,
        correction: after.correction - before.correction,
        iterations: (after.iterations - before.iterations) as f64 / sub_steps.max(1.0),
    })
}

impl Timing {
    fn total(&self) -> f64 {
        (self.explicit + self.pressure + self.correction).max(1e-12)
    }

    fn share(&self, part: f64) -> String {
        format!("{:.0}%", 100.0 * part / self.total())
    }

    /// The pressure solve per sub-step in fine-grid Jacobi sweeps' worth of
    /// traffic at the copy rate `bandwidth`, for `cells` cells.
    fn sweeps(&self, cells: f64, bandwidth: f64) -> f64 {
        let per_sub = self.per_step / self.sub_steps.max(1e-12) * self.pressure / self.total();
        per_sub / (SWEEP_BYTES * cells / bandwidth)
    }
}

pub fn bench_projection(args: &BenchArgs, use_cuda: bool, tuning: &Tuning) -> anyhow::Result<()> {
    let place = if use_cuda {
        "CUDA".to_string()
    } else {
        format!("CPU ({} threads)", rayon::current_num_threads())
    };
    println!(
        "projection method, {place}: the lid-driven cavity at Re 100, per lattice step after \
         {WARM_UP} steps; median of {} runs; parts from one run more",
        args.repeats.max(1)
    );
    println!(
        "{:>5} {:>8} {:>10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9}",
        "size",
        "pressure",
        "ms/step",
        "MLUPS",
        "sub-steps",
        "Mcell/s",
        "explicit",
        "pressure",
        "correction",
        "iter/sub",
        if use_cuda { "sweeps" } else { "LBM MLUPS" }
    );
    let mut solvers = vec![PressureSolver::Multigrid];
    if args.jacobi {
        solvers.push(PressureSolver::Jacobi);
    }
    let available = crate::system::available_memory();
    let build = |scenario: &Scenario| -> anyhow::Result<ProjectionSolver> {
        let mut solver = select::build_projection(scenario, available)?;
        select::tune_projection(&mut solver, tuning)?;
        if use_cuda {
            solver.move_to_gpu(0)?;
            select::tune_projection_gpu(&mut solver, tuning)?;
        }
        Ok(solver)
    };
    let mut bandwidth = None;
    for &n in &args.sizes {
        let sets = [
            format!("domain.size=[{n},{n},{n}]"),
            format!("fluid.length_cells={}", n - 2),
            "fluid.reynolds=100".to_string(),
        ];
        let path = std::path::Path::new(crate::cli::DEFAULT_SCENARIO);
        let mut scenario = Scenario::load(path, &sets)?;
        let lbm = if use_cuda {
            None
        } else {
            let mut cpu = select::build_cpu(&scenario, available)?;
            Some(super::time_cpu(&mut cpu, args.repeats)?)
        };
        scenario.run.method = Method::Projection;
        for &pressure in &solvers {
            scenario.run.pressure = pressure;
            let mut solver = build(&scenario)?;
            if bandwidth.is_none() {
                bandwidth = solver.copy_bandwidth()?;
            }
            let t = time(&mut solver, args.repeats)?;
            let cells = (n * n * n) as f64;
            let last = match (lbm, bandwidth) {
                (Some(lbm), _) => format!("{lbm:.2}"),
                (None, Some(bw)) => format!("{:.1}", t.sweeps(cells, bw)),
                (None, None) => "-".into(),
            };
            println!(
                "{:>5} {:>8} {:>10.2} {:>8.1} {:>9.1} {:>9.1} {:>9} {:>9} {:>10} {:>9.1} {:>9}",
                n,
                match pressure {
                    PressureSolver::Multigrid => "MG-PCG",
                    PressureSolver::Jacobi => "Jacobi",
                },
                t.per_step * 1e3,
                cells / t.per_step / 1e6,
                t.sub_steps,
                cells * t.sub_steps / t.per_step / 1e6,
                t.share(t.explicit),
                t.share(t.pressure),
                t.share(t.correction),
                t.iterations,
                last
            );
        }
    }
    if let Some(bw) = bandwidth {
        println!(
            "copy rate {:.0} GB/s (read + write); sweeps: the pressure solve per sub-step in \
             fine-grid Jacobi sweeps' worth of traffic ({SWEEP_BYTES} bytes per cell)",
            bw / 1e9
        );
        // The seed's own case: its city block, 256 × 256 × 64, 1000 of its
        // time steps; then the same buildings in a 256³ grid (the issue's
        // goal at 256³ with obstacles), by multigrid alone (Jacobi would
        // run for hours).
        let path = std::path::Path::new("assets/scenarios/urban.toml");
        let tall = vec!["domain.size=[256,256,256]".to_string()];
        let cases = solvers
            .iter()
            .map(|&p| (vec![], p))
            .chain([(tall, PressureSolver::Multigrid)]);
        for (sets, pressure) in cases {
            let mut scenario = Scenario::load(path, &sets)?;
            scenario.run.method = Method::Projection;
            scenario.run.pressure = pressure;
            let mut solver = build(&scenario)?;
            let t = time(&mut solver, args.repeats)?;
            let cells = scenario.grid().cells() as f64;
            let per_sub = t.per_step / t.sub_steps.max(1e-12);
            println!(
                "urban {} {:>8}: {:.2} ms per sub-step ({:.1} sub-steps per lattice step), \
                 {:.3} Gcell/s, 1000 sub-steps in {:.2} s; explicit {} pressure {} correction {}, \
                 {:.1} iterations, {:.1} sweeps",
                scenario.grid(),
                match pressure {
                    PressureSolver::Multigrid => "MG-PCG",
                    PressureSolver::Jacobi => "Jacobi",
                },
                per_sub * 1e3,
                t.sub_steps,
                cells / per_sub / 1e9,
                per_sub * 1000.0,
                t.share(t.explicit),
                t.share(t.pressure),
                t.share(t.correction),
                t.iterations,
                t.sweeps(cells, bw)
            );
        }
    }
    Ok(())
}
