//! The projection method run as the program runs a scenario: selected by
//! `[run] method` or `--method`, the same cells and units as the lattice
//! Boltzmann method, clear errors for what it does not handle yet.

use crate::common::{flowscope, scenario_path, stderr, stdout};
use flowscope::scenario::{Method, Scenario};
use flowscope::session::select::{build, Backend};

/// The cavity at 18³ (16³ fluid cells), Re 10, after `steps` steps by
/// `method`.
fn cavity(method: Method, steps: u64) -> flowscope::solver::Fields {
    let sets = [
        "domain.size=[18,18,18]".to_string(),
        "fluid.length_cells=16".to_string(),
        "fluid.reynolds=10".to_string(),
    ];
    let mut scenario = Scenario::load(&scenario_path("cavity.toml"), &sets).unwrap();
    scenario.run.method = method;
    let mut selected = build(&Backend::cpu(), &scenario, None).unwrap();
    selected.solver.step(steps).unwrap();
    selected.solver.fields().unwrap()
}

#[test]
fn both_methods_give_the_same_cavity_flow() {
    // Steady by then (the viscous time 16²/ν is 2000 steps).
    let (lbm, projection) = (cavity(Method::Lbm, 4000), cavity(Method::Projection, 4000));
    let lid = 0.08f32;
    // Away from the walls: at the lid's corners the velocity jumps, and the
    // two methods' wall rules differ most there (the 16³ grid is coarse).
    let (mut worst, mut sum, mut count) = (0.0f32, 0.0f32, 0);
    for c in 0..lbm.ux.len() {
        let p = [c % 18, (c / 18) % 18, c / 324];
        if p.iter().any(|&v| !(3..=14).contains(&v)) {
            continue;
        }
        let d = [
            lbm.ux[c] - projection.ux[c],
            lbm.uy[c] - projection.uy[c],
            lbm.uz[c] - projection.uz[c],
        ];
        let d = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt() / lid;
        worst = worst.max(d);
        sum += d * d;
        count += 1;
    }
    let rms = (sum / count as f32).sqrt();
    // Measured: 1.4% of the lid speed RMS, 2.9% at worst.
    assert!(rms < 0.02 && worst < 0.04, "rms {rms}, worst {worst}");
    // The pressure shows as the density a lattice Boltzmann solver would
    // have: the same field up to a constant.
    let centre = |f: &flowscope::solver::Fields| {
        let top = f.index(9, 16, 9);
        let mid = f.index(9, 8, 9);
        f.rho[top] - f.rho[mid]
    };
    let (a, b) = (centre(&lbm), centre(&projection));
    assert!((a - b).abs() < 0.2 * a.abs(), "{a} {b}");
}

#[test]
fn the_method_is_chosen_on_the_command_line_or_in_the_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let cavity = scenario_path("cavity.toml");
    let small = ["--set", "domain.size=[10,10,10]", "--steps", "20"];
    let run = |extra: &[&str]| {
        let mut args = vec!["run", cavity.to_str().unwrap()];
        args.extend_from_slice(&small);
        args.extend_from_slice(extra);
        flowscope(&args, dir.path())
    };
    for extra in [
        &["--method", "projection"][..],
        &["--set", "run.method=\"projection\""][..],
    ] {
        let o = run(extra);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("projection method, CPU"),
            "{}",
            stderr(&o)
        );
    }
    // The seed's pressure solver, kept as the baseline.
    let o = run(&["--method", "projection", "--set", "run.pressure=\"jacobi\""]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("pressure by Jacobi iteration"),
        "{}",
        stderr(&o)
    );
    // Its CUDA solver asked for where there is no GPU: said, with the cause.
    let o = run(&["--method", "projection", "--solver", "cuda"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("the CUDA solver was asked for but cannot be used"),
        "{}",
        stderr(&o)
    );
    // Left to choose, without a GPU: the CPU, and why.
    let o = run(&["--method", "projection"]);
    assert!(stderr(&o).contains("no usable CUDA GPU"), "{}", stderr(&o));
    // The subgrid model of `fluid.turbulence`, as the lattice Boltzmann
    // method takes it.
    let o = run(&[
        "--method",
        "projection",
        "--set",
        "fluid.turbulence=\"smagorinsky\"",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("Smagorinsky LES, C_s = 0.1"),
        "{}",
        stderr(&o)
    );
    // `info` names the method and its memory.
    let info = |extra: &[&str]| {
        let mut args = vec!["info", cavity.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = flowscope(&args, dir.path());
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let lbm = info(&[]);
    assert!(lbm.contains("method          lattice Boltzmann"), "{lbm}");
    assert!(lbm.contains("CUDA 16-bit"), "{lbm}");
    for extra in [
        &["--method", "projection"][..],
        &["--set", "run.method=\"projection\""][..],
    ] {
        let out = info(extra);
        assert!(out.contains("method          projection"), "{out}");
        assert!(out.contains("CFL 0.5"), "{out}");
        assert!(!out.contains("CUDA 16-bit"), "{out}");
    }
    // `[run] cfl` sets its sub-steps' CFL number and `[run] tolerance` where
    // the pressure solves stop, each said where the run starts; outside
    // (0, 1] and (0, 1) they are refused with the range.
    for (good, shown, bad, range) in [
        (
            "run.cfl=0.25",
            "CFL 0.25",
            ["run.cfl=0", "run.cfl=1.5"],
            "from above 0 to 1",
        ),
        (
            "run.tolerance=1e-8",
            "CG to 1e-8",
            ["run.tolerance=0", "run.tolerance=2"],
            "from above 0 to below 1",
        ),
    ] {
        let o = run(&["--method", "projection", "--set", good]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stderr(&o).contains(shown), "{}", stderr(&o));
        for bad in bad {
            let o = run(&["--method", "projection", "--set", bad]);
            assert!(!o.status.success());
            assert!(stderr(&o).contains(range), "{bad}: {}", stderr(&o));
        }
    }
    // `[run] upwind`, the seed's hybrid factor: said, and checked to [0, 1].
    let o = run(&["--method", "projection", "--set", "run.upwind=0.25"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("0.25 upwind"), "{}", stderr(&o));
    let o = run(&["--method", "projection", "--set", "run.upwind=1.5"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("from 0 (central) to 1"),
        "{}",
        stderr(&o)
    );
    // An unknown method is refused by name.
    let o = run(&["--set", "run.method=\"spectral\""]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("spectral"), "{}", stderr(&o));
}

/// The drag and lift on the cylinder of a quasi-2D channel (D 8 cells,
/// Re 20, steady) after `steps` steps by `method`.
fn cylinder_forces(method: Method, steps: u64) -> [f64; 3] {
    let sets = [
        "domain.size=[64,32,3]",
        "obstacles.0.center=[20,15.5,0]",
        "obstacles.0.radius=4",
        "fluid.length_cells=8",
        "fluid.reynolds=20",
        "fluid.velocity=0.05",
    ]
    .map(String::from);
    let mut scenario = Scenario::load(&scenario_path("cylinder.toml"), &sets).unwrap();
    scenario.run.method = method;
    let mut selected = build(&Backend::cpu(), &scenario, None).unwrap();
    selected.solver.step(steps).unwrap();
    selected.solver.obstacle_forces().unwrap()[1]
}

#[test]
fn both_methods_put_the_same_drag_on_a_cylinder() {
    let (lbm, projection) = (
        cylinder_forces(Method::Lbm, 2500),
        cylinder_forces(Method::Projection, 2500),
    );
    // Drag coefficient: force over ½ U² D per layer (three of them).
    let cd = |f: [f64; 3]| f[0] / (0.5 * 0.05f64.powi(2) * 8.0 * 3.0);
    let (a, b) = (cd(lbm), cd(projection));
    assert!(
        a > 1.0 && (b / a - 1.0).abs() < 0.1,
        "C_d: lbm {a}, projection {b}"
    );
    // Half a cell off the centre line: little lift either way.
    assert!(projection[1].abs() < 0.1 * projection[0], "{projection:?}");
}
