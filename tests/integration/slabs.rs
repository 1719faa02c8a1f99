//! The multi-GPU decomposition, run on the CPU: the domain split into slabs
//! along z with the exchange maps the CUDA solver uses must reproduce one
//! lattice bit for bit, on every shipped scenario.

use flowscope::scenario::Scenario;
use flowscope::session::select::{build_cpu, build_cpu_slabs};
use flowscope::solver::Solver;

use crate::common::repo;

fn same_bits(a: &[f32], b: &[f32]) -> Option<usize> {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits())
}

#[test]
fn slabs_reproduce_one_lattice_bit_for_bit_on_every_scenario() {
    let cases = flowscope::cli::check::cases(&repo().join("assets/scenarios"), 40_000).unwrap();
    assert!(
        cases.len() >= 7,
        "every scenario plus the channel and BGK cavity"
    );
    for case in cases {
        let s = Scenario::load(&case.path, &case.overrides).unwrap();
        let mut one = build_cpu(&s, None).unwrap();
        for count in [2, 3] {
            let mut split = build_cpu_slabs(&s, count).unwrap();
            assert_eq!(split.flags(), one.flags(), "{}", case.name);
            one.reset().unwrap();
            // Both parities: after an odd step and after an even one.
            for steps in [37, 1] {
                one.step(steps).unwrap();
                split.step(steps).unwrap();
                let t = one.time_step();
                assert_eq!(split.time_step(), t);
                let (a, b) = (one.populations().unwrap(), split.populations().unwrap());
                if let Some(k) = same_bits(&a, &b) {
                    panic!(
                        "{} on {count} slabs, step {t}: population {k} differs: {} vs {}",
                        case.name, a[k], b[k]
                    );
                }
                let (fa, fb) = (one.fields().unwrap(), split.fields().unwrap());
                for (x, y) in [(&fa.rho, &fb.rho), (&fa.ux, &fb.ux), (&fa.uz, &fb.uz)] {
                    assert_eq!(same_bits(x, y), None, "{} fields, step {t}", case.name);
                }
                let (sa, sb) = (one.stats().unwrap(), split.stats().unwrap());
                assert_eq!(sa.cells, sb.cells);
                assert!((sa.mass - sb.mass).abs() <= 1e-9 * sa.mass, "{}", case.name);
                assert_eq!(sa.max_speed, sb.max_speed);
                assert_eq!(sa.max_speed_cell, sb.max_speed_cell, "{}", case.name);
                for (p, q) in one
                    .obstacle_forces()
                    .unwrap()
                    .iter()
                    .zip(split.obstacle_forces().unwrap())
                {
                    for d in 0..3 {
                        assert!(
                            (p[d] - q[d]).abs() <= 1e-9 * p[d].abs().max(1e-6),
                            "{} forces",
                            case.name
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn slabs_resume_from_a_checkpoint_and_report_steadiness_like_one_lattice() {
    let s = Scenario::load(
        &repo().join("assets/scenarios/cylinder.toml"),
        &[
            "domain.size=[32,24,12]",
            "obstacles.0.center=[10,11.5,0]",
            "obstacles.0.radius=2.5",
        ]
        .map(String::from),
    )
    .unwrap();
    let mut one = build_cpu(&s, None).unwrap();
    one.step(23).unwrap();
    let mid = one.populations().unwrap();
    let before = one.fields().unwrap();
    one.velocity_change().unwrap();
    one.step(20).unwrap();
    // The in-place steadiness sums equal the definition on two field copies.
    let expected = flowscope::solver::relative_change(&one.fields().unwrap(), &before, 20);
    let mut split = build_cpu_slabs(&s, 4).unwrap();
    split.set_populations(23, &mid).unwrap();
    split.velocity_change().unwrap();
    split.step(20).unwrap();
    assert_eq!(
        same_bits(&one.populations().unwrap(), &split.populations().unwrap()),
        None
    );
    let (a, b) = (
        one.velocity_change().unwrap().unwrap(),
        split.velocity_change().unwrap().unwrap(),
    );
    assert!((a - b).abs() <= 1e-12 * a, "steadiness {a} vs {b}");
    assert_eq!(a, expected);
    assert!(a > 0.0);
}

#[test]
fn too_many_slabs_for_the_grid_is_a_clear_error() {
    let s = Scenario::load(
        &repo().join("assets/scenarios/cavity.toml"),
        &["domain.size=[8,8,5]".to_string()],
    )
    .unwrap();
    let e = build_cpu_slabs(&s, 3).err().expect("refused").to_string();
    assert!(e.contains("at most 2 devices"), "{e}");
}
