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

/// Schäfer & Turek's benchmark 2D-1 (1996): a cylinder of diameter D at
/// (2D, 2D) in a channel 4.1 D high, parabolic inflow of mean speed Ū,
/// Re = Ū D / ν = 20: drag coefficient 2F/(ρ Ū² D) between 5.57 and 5.59.
/// Here D = 10 cells, the parabolic inlet's peak 1.5 Ū, periodic in z. The
/// staircase cylinder in a channel of 4.2 D within 3%; the interpolated one
/// in the benchmark's 4.1 D within 1%.
#[test]
fn cylinder_in_a_channel_matches_schaefer_turek_2d1_drag_within_three_percent() {
    for (surface, height, tolerance) in [("staircase", 44, 0.03), ("interpolated", 43, 0.01)] {
        let cd = schaefer_turek_2d1(surface, height);
        println!("Schäfer–Turek 2D-1 at D = 10 cells, {surface}: Cd {cd:.3} (5.57–5.59)");
        assert!((cd - 5.58).abs() < tolerance * 5.58, "{surface}: Cd {cd}");
    }
}

fn schaefer_turek_2d1(surface: &str, height: usize) -> f64 {
    let size = format!("domain.size=[222,{height},4]");
    let surface = format!("obstacles.0.surface=\"{surface}\"");
    let scenario = load(
        "cylinder.toml",
        &[
            &size,
            &surface,
            "boundaries.x_min={ inlet = [1.0, 0.0, 0.0], profile = \"parabolic\" }",
            "boundaries.y=\"wall\"",
            // Re 20 on the mean speed is 30 on the peak the scenario names.
            "fluid.reynolds=30",
            "fluid.length_cells=10",
            "fluid.velocity=0.05",
            "fluid.collision=\"trt\"",
            "obstacles.0.center=[20.5,20.5,0]",
            "obstacles.0.radius=5",
        ],
    );
    let obstacle = scenario.voxelize().obstacles[0].clone();
    assert_eq!(obstacle.frontal_area, 40.0, "10 cells by 4");
    let mut solver = cpu(&scenario);
    solver.step(8000).unwrap();
    let u_mean = 0.05 / 1.5;
    let q = 0.5 * u_mean * u_mean * obstacle.frontal_area;
    // The mean over the last steps (a weak acoustic ripple remains).
    let mut cd = 0.0;
    for _ in 0..8 {
        solver.step(500).unwrap();
        cd += solver.obstacle_forces().unwrap()[1][0] / q / 8.0;
    }
    cd
}
