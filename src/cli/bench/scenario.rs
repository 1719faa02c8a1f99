//! `flowscope bench --scenario FILE [--scale F]`: a real scenario's speed
//! beside the periodic box of the same cells, and where its step's time goes.

use super::{median_rate, time_cpu, time_cuda, BenchArgs, Collider};
use crate::scenario::Scenario;
use crate::session::select;
use crate::solver::scalar::{Carried, Setup};
use crate::solver::{Precision, Solver};
use crate::system::Tuning;

/// The scenario of `path` with the keys of `set`, scaled by `scale` in
/// every direction (obstacles with it; the Reynolds number kept where τ
/// allows).
fn scaled(path: &std::path::Path, set: &[String], scale: f64) -> anyhow::Result<Scenario> {
    let s = Scenario::load(path, set)?;
    if scale == 1.0 {
        return Ok(s);
    }
    let mut overrides = set.to_vec();
    overrides.extend(crate::validation::scaled_overrides(&s, scale, 0.51));
    Ok(Scenario::load(path, &overrides)?)
}

pub(super) fn bench_scenario(
    args: &BenchArgs,
    path: &std::path::Path,
    use_cuda: bool,
    tuning: &Tuning,
) -> anyhow::Result<()> {
    let scale = args.scale.unwrap_or(1.0);
    if !(scale > 0.0 && scale.is_finite()) {
        anyhow::bail!("--scale {scale}: give a positive factor, e.g. 2");
    }
    let scenario = scaled(path, &args.set, scale)?;
    let [nx, ny, nz] = scenario.size;
    let collider = Collider {
        collision: scenario.collision,
        smagorinsky: match scenario.turbulence {
            crate::scenario::Turbulence::Smagorinsky => scenario.smagorinsky_constant as f32,
            crate::scenario::Turbulence::None => 0.0,
        },
    };
    println!(
        "{} scaled by {scale}: {nx}x{ny}x{nz} = {} cells, collision {collider}",
        scenario.name,
        scenario.cells()
    );
    println!("the box: a periodic {nx}x{ny}x{nz} grid of fluid, same collision");
    if !use_cuda {
        let mut solver = select::build_cpu(&scenario, None)?;
        let mlups = time_cpu(&mut solver, args.repeats)?;
        let mut boxed = super::bench_solver_grid(scenario.size, collider)?;
        let box_mlups = time_cpu(&mut boxed, args.repeats)?;
        println!(
            "cpu  scenario {mlups:.2} MLUPS, box {box_mlups:.2} MLUPS: {:.1}% of the box",
            100.0 * mlups / box_mlups
        );
        return Ok(());
    }
    for &p in &args.precisions {
        let precision: Precision = p.into();
        let mut solver = select::build_cuda(&scenario, precision, tuning)?;
        let mlups = time_cuda(&mut solver, args.repeats)?;
        let parts = solver.profile_steps(20)?;
        // The same with the NEAR cells in a launch of their own (what the
        // shared launch saves, and where the time of the parts goes).
        solver.set_fuse_near(!tuning.fuse_near);
        let other = time_cuda(&mut solver, args.repeats)?;
        let other_parts = solver.profile_steps(20)?;
        drop(solver);
        let mut boxed = super::cuda_grid(scenario.size, collider, precision, tuning)?;
        let box_mlups = time_cuda(&mut boxed, args.repeats)?;
        drop(boxed);
        println!(
            "{:>5}  scenario {mlups:>8.0} MLUPS   box {box_mlups:>8.0} MLUPS   {:>5.1}% of the box",
            precision.name(),
            100.0 * mlups / box_mlups
        );
        let how = |fused: bool| match fused {
            true => "NEAR cells in the bulk kernels' launch",
            false => "NEAR cells launched apart",
        };
        println!(
            "       {}: {other:.0} MLUPS ({:.1}% of the box)",
            how(!tuning.fuse_near),
            100.0 * other / box_mlups
        );
        for (fused, parts) in [(tuning.fuse_near, parts), (!tuning.fuse_near, other_parts)] {
            let total: f64 = parts.iter().map(|p| p.1).sum();
            let per_step = |ms: f64| ms / 20.0;
            let line: Vec<String> = parts
                .iter()
                .map(|(name, ms)| {
                    format!(
                        "{name} {:.3} ms ({:.0}%)",
                        per_step(*ms),
                        100.0 * ms / total
                    )
                })
                .collect();
            println!(
                "       {}, per step with an event around each launch ({:.3} ms): {}",
                how(fused),
                per_step(total),
                line.join(", ")
            );
        }
        if tuning.concurrent_boundary {
            println!(
                "       (a plain step runs aa_boundary odd beside the odd step's bulk kernel; \
                 the events serialise them)"
            );
        }
        if precision == Precision::Fp32 {
            bench_contaminant(args, &scenario, tuning)?;
        }
    }
    Ok(())
}

/// The cost of the scenario's contaminant on the GPU: the step with it
/// against the flow's alone, both timed on the wall clock, moved every flow
/// step and every 4, 8 and 16 (`[dispersion] interval`).
fn bench_contaminant(args: &BenchArgs, scenario: &Scenario, tuning: &Tuning) -> anyhow::Result<()> {
    let flow = select::build_cuda(scenario, Precision::Fp32, tuning)?;
    let Some(setup) = scenario
        .releases
        .setup(flow.grid(), flow.flags(), &scenario.path)?
    else {
        return Ok(());
    };
    let mut flow: Box<dyn Solver> = Box::new(flow);
    // Untimed steps first (a multiple of 1, 4, 8 and 16): what runs once
    // (the driver's first load of a module, the first transport step's
    // allocations) stays out of the times.
    flow.step(WARM_UP_STEPS)?;
    let alone = median_rate(&mut *flow, CONTAMINANT_STEPS, args.repeats)?;
    drop(flow);
    let mut intervals = vec![1, 4, 8, 16];
    if !intervals.contains(&setup.interval) {
        intervals.push(setup.interval);
    }
    for interval in intervals {
        let flow = Box::new(select::build_cuda(scenario, Precision::Fp32, tuning)?);
        let setup = Setup {
            interval,
            ..setup.clone()
        };
        let (mut carried, why) = Carried::placed(flow, setup.clone());
        if let Some(why) = why {
            anyhow::bail!("the contaminant could not be moved on the GPU: {why}");
        }
        carried.step(WARM_UP_STEPS)?;
        let with = median_rate(&mut carried, CONTAMINANT_STEPS, args.repeats)?;
        let (courant, diffusivity) = carried.maxima();
        println!(
            " FP32  with {} contaminant field{} moved every {interval} step{}: {with:>8.0} MLUPS against {alone:.0} alone: +{:.1}% per step ({} sub-steps a transport step)",
            setup.fields,
            if setup.fields == 1 { "" } else { "s" },
            if interval == 1 { "" } else { "s" },
            100.0 * (alone / with - 1.0),
            Setup::plan(interval, courant, diffusivity),
        );
    }
    Ok(())
}

/// Steps per timing of [`bench_contaminant`]: whole periods of every
/// interval timed (an even interval k repeats every 2k steps).
const CONTAMINANT_STEPS: u64 = 416;
/// Untimed steps before them.
const WARM_UP_STEPS: u64 = 32;
