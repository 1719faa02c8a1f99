//! Time averages (`run --average-from`): what the solvers keep against sums
//! taken here from the fields, steady and periodic flows, slabs, the CLI.

use flowscope::session::select::build_cpu_slabs;
use flowscope::solver::{Fields, Schedule, Solver};

use crate::common::*;

fn small_cylinder() -> flowscope::scenario::Scenario {
    load(
        "cylinder.toml",
        &[
            "domain.size=[40,20,6]",
            "obstacles.0.center=[10,9.5,0]",
            "obstacles.0.radius=3",
            "fluid.length_cells=6",
            "fluid.reynolds=120",
            "fluid.velocity=0.08",
        ],
    )
}

/// Mean and population RMS of each value over the snapshots, in f64, two-pass.
fn two_pass(snapshots: &[Vec<f64>]) -> (Vec<f64>, Vec<f64>) {
    let n = snapshots.len() as f64;
    let len = snapshots[0].len();
    let mean: Vec<f64> = (0..len)
        .map(|i| snapshots.iter().map(|s| s[i]).sum::<f64>() / n)
        .collect();
    let rms = (0..len)
        .map(|i| {
            (snapshots
                .iter()
                .map(|s| (s[i] - mean[i]).powi(2))
                .sum::<f64>()
                / n)
                .sqrt()
        })
        .collect();
    (mean, rms)
}

fn values(f: &Fields) -> Vec<f64> {
    let p = (0..f.rho.len()).map(|c| f.pressure(c));
    f.ux.iter()
        .chain(&f.uy)
        .chain(&f.uz)
        .copied()
        .chain(p)
        .map(|v| v as f64)
        .collect()
}

#[test]
fn the_cpu_solver_averages_exactly_the_sampled_steps() {
    let s = small_cylinder();
    let mut solver = cpu(&s);
    solver.step(100).unwrap();
    // From a later step, every third step; sampled here too, from the fields.
    solver
        .start_averages(Schedule {
            from_step: 130,
            every: 3,
        })
        .unwrap();
    let mut snapshots = Vec::new();
    while solver.time_step() < 400 {
        solver.step(1).unwrap();
        let t = solver.time_step();
        if t >= 130 && (t - 130).is_multiple_of(3) {
            snapshots.push(values(&solver.fields().unwrap()));
        }
    }
    let a = solver.averages().unwrap().unwrap();
    assert_eq!((a.from_step, a.samples), (130, snapshots.len() as u64));
    let (mean, rms) = two_pass(&snapshots);
    let n = s.cells() as usize;
    let mut worst = 0.0f64;
    for c in 0..n {
        for q in 0..4 {
            let (m, r) = match q {
                3 => (a.pressure_mean[c], a.pressure_rms[c]),
                k => (a.velocity_mean[k][c], a.velocity_rms[k][c]),
            };
            // f32 storage of the results; the sums themselves are f64.
            worst = worst
                .max((m as f64 - mean[q * n + c]).abs())
                .max((r as f64 - rms[q * n + c]).abs());
        }
    }
    println!("largest difference from the two-pass sums: {worst:.2e}");
    assert!(worst < 1e-8, "{worst}");
    // The wake is unsteady: something fluctuates.
    assert!(a.velocity_rms[1].iter().any(|&r| r > 1e-3));
    // A reset forgets them.
    solver.reset().unwrap();
    assert!(solver.averages().unwrap().is_none());
}

#[test]
fn averages_of_a_steady_flow_are_its_fields_with_zero_rms() {
    // Uniform flow through a periodic box: every step is the same state.
    let s = load(
        "cavity.toml",
        &[
            "domain.size=[8,6,4]",
            "boundaries.x=\"periodic\"",
            "boundaries.y_min=\"periodic\"",
            "boundaries.y_max=\"periodic\"",
            "boundaries.z=\"periodic\"",
            "fluid.initial_velocity=[1,0.5,-0.25]",
        ],
    );
    let mut solver = cpu(&s);
    solver
        .start_averages(Schedule {
            from_step: 0,
            every: 1,
        })
        .unwrap();
    solver.step(50).unwrap();
    let f = solver.fields().unwrap();
    let a = solver.averages().unwrap().unwrap();
    assert_eq!(a.samples, 51, "step 0 and the 50 after it");
    for c in 0..f.rho.len() {
        assert_eq!(a.velocity_mean(c), f.velocity(c));
        assert_eq!(a.velocity_rms(c), [0.0; 3]);
        assert!((a.pressure_mean[c] - f.pressure(c)).abs() < 1e-9);
        assert!(a.pressure_rms[c] < 1e-9);
    }
}

#[test]
fn slabs_average_like_one_lattice() {
    let s = small_cylinder();
    let schedule = Schedule {
        from_step: 10,
        every: 4,
    };
    let mut one = cpu(&s);
    one.start_averages(schedule).unwrap();
    one.step(201).unwrap();
    let a = one.averages().unwrap().unwrap();
    for count in [2, 3] {
        let mut split = build_cpu_slabs(&s, count).unwrap();
        split.start_averages(schedule).unwrap();
        split.step(150).unwrap();
        split.step(51).unwrap();
        let b = split.averages().unwrap().unwrap();
        assert_eq!(a, b, "{count} slabs");
    }
}

#[test]
fn run_writes_the_averages_to_the_vti_probe_and_forces_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = flowscope(
        &[
            "run",
            scenario_path("cylinder.toml").to_str().unwrap(),
            "--solver",
            "cpu",
            "-q",
            "--set",
            "domain.size=[40,20,4]",
            "--set",
            "obstacles.0.center=[10,9.5,0]",
            "--set",
            "obstacles.0.radius=3",
            "--set",
            "fluid.length_cells=6",
            "--set",
            "fluid.reynolds=120",
            "--set",
            "fluid.velocity=0.08",
            "--steps",
            "600",
            "--every",
            "20",
            "--average-from",
            "300",
            "--average-every",
            "5",
            "--forces",
            "forces.csv",
            "--vti",
            "out.vti",
            "--probe",
            "20,0,2:20,19,2:20",
            "--probe-out",
            "probe.csv",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("force coefficients from step 300, 16 rows"),
        "{err}"
    );
    // The closing rows are the mean and RMS of the rows from step 300 on.
    let text = std::fs::read_to_string(d.join("forces.csv")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let rows: Vec<Vec<f64>> = lines[1..lines.len() - 2]
        .iter()
        .map(|l| l.split(',').map(|v| v.parse().unwrap()).collect())
        .filter(|r: &Vec<f64>| r[0] >= 300.0)
        .collect();
    assert_eq!(rows.len(), 16);
    let parse = |line: &str, label: &str| -> Vec<f64> {
        let mut v = line.split(',');
        assert_eq!(v.next(), Some(label));
        v.map(|x| x.parse().unwrap()).collect()
    };
    let (mean, rms) = (
        parse(lines[lines.len() - 2], "mean"),
        parse(lines[lines.len() - 1], "rms"),
    );
    for k in 0..2 {
        let values: Vec<f64> = rows.iter().map(|r| r[k + 1]).collect();
        let m = values.iter().sum::<f64>() / 16.0;
        let r = (values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / 16.0).sqrt();
        assert!(
            (mean[k] - m).abs() <= 1e-6 * m.abs().max(1e-3),
            "{mean:?} vs {m}"
        );
        assert!((rms[k] - r).abs() <= 1e-5 * r.max(1e-3), "{rms:?} vs {r}");
    }
    let probe = std::fs::read_to_string(d.join("probe.csv")).unwrap();
    assert!(
        probe.starts_with("step,x,y,z,rho,ux,uy,uz,p,ux_mean,uy_mean,uz_mean,p_mean\n"),
        "{probe}"
    );
    assert_eq!(probe.lines().nth(5).unwrap().split(',').count(), 13);
    let vti = std::fs::read(d.join("out.vti")).unwrap();
    let head = String::from_utf8_lossy(&vti[..2000.min(vti.len())]);
    for name in [
        "velocity_mean",
        "velocity_rms",
        "pressure_mean",
        "pressure_rms",
    ] {
        assert!(head.contains(&format!("Name=\"{name}\"")), "{name}: {head}");
    }
}
