//! Lid-driven cavity against Ghia, Ghia & Shin (1982).

use flowscope::solver::{Fields, Solver};
use flowscope::validation::ghia::{cavity_deviation, Deviation};

use crate::common::*;

/// Runs the quasi-2D cavity (periodic in z) to a steady state; returns the
/// deviation from Ghia, the steps run and the final change per step.
fn cavity(
    reynolds: f64,
    n: usize,
    lid: f64,
    max_steps: u64,
    skip: &[(char, f64)],
) -> (Deviation, u64, f64) {
    let size = format!("domain.size=[{},{},4]", n + 2, n + 2);
    let length = format!("fluid.length_cells={n}");
    let re = format!("fluid.reynolds={reynolds}");
    let speed = format!("fluid.velocity={lid}");
    let scenario = load(
        "cavity.toml",
        &[&size, &length, &re, &speed, "boundaries.z=\"periodic\""],
    );
    let mut solver = cpu(&scenario);
    let chunk = 1000u64;
    let mut previous: Option<Fields> = None;
    let mut change = f64::INFINITY;
    while solver.time_step() < max_steps && change >= 1e-7 {
        solver.step(chunk).unwrap();
        let fields = solver.fields().unwrap();
        if let Some(p) = &previous {
            change = flowscope::solver::relative_change(&fields, p, chunk);
        }
        previous = Some(fields);
    }
    let d = cavity_deviation(&previous.expect("ran"), n, lid, reynolds, skip);
    for p in d.points.iter().filter(|p| p.2 > 0.01) {
        println!("  {} at {:.4}: deviation {:.4}", p.0, p.1, p.2);
    }
    (d, solver.time_step(), change)
}

#[test]
fn cavity_re100_matches_ghia_within_two_percent_of_the_lid_speed() {
    let (d, steps, change) = cavity(100.0, 64, 0.1, 60_000, &[]);
    println!("cavity Re 100, 64x64: max deviation {:.4}, RMS {:.4} (lid speed units), {steps} steps, change/step {change:.2e}", d.max, d.rms);
    assert!(change < 1e-7, "not steady after {steps} steps: {change:e}");
    assert!(d.max < 0.02, "max deviation {}", d.max);
}

#[test]
fn cavity_re400_reports_its_deviation_from_ghia() {
    // Ghia's Re 400 v at x = 0.9063 (-0.23827) breaks the smooth run of its
    // neighbours (-0.228 at 0.9453, -0.450 at 0.8594), which imply about -0.37;
    // it is a known misprint of the table. Its deviation is printed, not bounded.
    let (d, steps, change) = cavity(400.0, 96, 0.1, 120_000, &[('v', 0.9063)]);
    println!("cavity Re 400, 96x96: max deviation {:.4} (without v at x = 0.9063), RMS {:.4} (lid speed units), {steps} steps, change/step {change:.2e}", d.max, d.rms);
    assert!(change < 1e-7, "not steady after {steps} steps: {change:e}");
    assert!(d.max < 0.02, "max deviation {}", d.max);
}
