//! `bench --method projection`: the projection method's CPU solver on the
//! lid-driven cavity at each --size, per step and per part, as the urban-flow
//! seed's table breaks its step down, beside the lattice Boltzmann CPU solver
//! on the same scenario.

use std::time::Instant;

use super::{median, BenchArgs};
use crate::scenario::{Method, PressureSolver, Scenario};
use crate::session::select;
use crate::solver::Solver;

/// Steps run before timing, so that the pressure solves start warm from a
/// developing flow rather than from rest.
const WARM_UP: u64 = 10;

pub fn bench_projection(args: &BenchArgs) -> anyhow::Result<()> {
    println!(
        "projection method, CPU ({} threads): the lid-driven cavity at Re 100, per lattice step \
         after {WARM_UP} steps; median of {} runs",
        rayon::current_num_threads(),
        args.repeats.max(1)
    );
    println!(
        "{:>5} {:>10} {:>10} {:>8} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9}",
        "size",
        "pressure",
        "ms/step",
        "MLUPS",
        "sub-steps",
        "explicit",
        "pressure",
        "correction",
        "iter/sub",
        "LBM MLUPS"
    );
    let mut solvers = vec![PressureSolver::Multigrid];
    if args.jacobi {
        solvers.push(PressureSolver::Jacobi);
    }
    for &n in &args.sizes {
        let sets = [
            format!("domain.size=[{n},{n},{n}]"),
            format!("fluid.length_cells={}", n - 2),
            "fluid.reynolds=100".to_string(),
        ];
        let path = std::path::Path::new(crate::cli::DEFAULT_SCENARIO);
        let mut scenario = Scenario::load(path, &sets)?;
        let available = crate::system::available_memory();
        let lbm = {
            let mut cpu = select::build_cpu(&scenario, available)?;
            super::time_cpu(&mut cpu, args.repeats)?
        };
        scenario.run.method = Method::Projection;
        for &pressure in &solvers {
            scenario.run.pressure = pressure;
            let mut solver = select::build_projection(&scenario, available)?;
            solver.step(WARM_UP)?;
            // About half a second per run, at least one step.
            let t = Instant::now();
            solver.step(1)?;
            let steps = ((0.5 / t.elapsed().as_secs_f64()).ceil() as u64).clamp(1, 1000);
            let mut runs = Vec::new();
            for _ in 0..args.repeats.max(1) {
                let before = solver.spent();
                let t = Instant::now();
                solver.step(steps)?;
                let seconds = t.elapsed().as_secs_f64();
                let after = solver.spent();
                runs.push((seconds / steps as f64, before, after));
            }
            if let Some(e) = solver.stats()?.instability() {
                anyhow::bail!("benchmark flow became unstable: {e}");
            }
            let per_step = median(runs.iter().map(|r| r.0).collect());
            let (_, before, after) = runs
                .iter()
                .find(|r| r.0 == per_step)
                .expect("the median is one of the runs");
            let sub_steps = (after.sub_steps - before.sub_steps) as f64;
            let total = (after.explicit - before.explicit)
                + (after.pressure - before.pressure)
                + (after.correction - before.correction);
            let share = |a: f64, b: f64| format!("{:.0}%", 100.0 * (a - b) / total.max(1e-12));
            println!(
                "{:>5} {:>10} {:>10.2} {:>8.2} {:>9.1} {:>9} {:>9} {:>10} {:>9.1} {:>9.2}",
                n,
                match pressure {
                    PressureSolver::Multigrid => "MG-PCG",
                    PressureSolver::Jacobi => "Jacobi",
                },
                per_step * 1e3,
                (n * n * n) as f64 / per_step / 1e6,
                sub_steps / steps as f64,
                share(after.explicit, before.explicit),
                share(after.pressure, before.pressure),
                share(after.correction, before.correction),
                (after.iterations - before.iterations) as f64 / sub_steps.max(1.0),
                lbm
            );
        }
    }
    Ok(())
}
