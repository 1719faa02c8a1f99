//! Drag and lift by momentum exchange.

use crate::common::*;

#[test]
fn drag_on_a_cylinder_at_low_reynolds_number_is_positive_converges_and_lift_vanishes() {
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
            "domain.size=[96,48,4]",
            "--set",
            "obstacles.0.center=[24,23.5,0]",
            "--set",
            "obstacles.0.radius=4",
            "--set",
            "fluid.length_cells=8",
            "--set",
            "fluid.reynolds=10",
            "--set",
            "fluid.velocity=0.05",
            "--steps",
            "6000",
            "--forces",
            "forces.csv",
            "--every",
            "250",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(d.join("forces.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("step,cd_1cylinder,cl_1cylinder"));
    let rows: Vec<(u64, f64, f64)> = lines
        .map(|l| {
            let v: Vec<&str> = l.split(',').collect();
            (
                v[0].parse().unwrap(),
                v[1].parse().unwrap(),
                v[2].parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(rows.len(), 24);
    let last = rows[rows.len() - 1];
    let before = rows[rows.len() - 5];
    println!(
        "cylinder Re 10: Cd {:.4} at step {}, {:.4} at step {}, Cl {:.2e}",
        last.1, last.0, before.1, before.0, last.2
    );
    assert!(last.1 > 1.0 && last.1 < 20.0, "Cd = {}", last.1);
    assert!(
        ((last.1 - before.1) / last.1).abs() < 0.01,
        "Cd still changing: {} -> {}",
        before.1,
        last.1
    );
    assert!(
        last.2.abs() < 1e-3 * last.1,
        "lift of a symmetric setup: {}",
        last.2
    );
    // Early values differ: it did converge, not start flat.
    assert!((rows[0].1 - last.1).abs() > 0.01 * last.1);
}
