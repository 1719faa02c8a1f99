//! Checkpoints: resume bit for bit; refuse files that do not fit.

use flowscope::io::checkpoint;
use flowscope::solver::Solver;

use crate::common::*;

const SMALL: &[&str] = &[
    "domain.size=[48,24,6]",
    "obstacles.0.center=[12,11.5,0]",
    "obstacles.0.radius=3",
    "fluid.length_cells=6",
    "fluid.reynolds=60",
    "fluid.velocity=0.05",
];

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["run", "cylinder.toml", "--solver", "cpu", "-q"];
    for s in SMALL {
        v.push("--set");
        v.push(s);
    }
    v.extend_from_slice(extra);
    v
}

#[test]
fn a_resumed_run_equals_an_uninterrupted_one_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        scenario_path("cylinder.toml"),
        dir.path().join("cylinder.toml"),
    )
    .unwrap();
    let d = dir.path();
    for method in ["lbm", "projection"] {
        let run = |extra: &[&str]| {
            let mut a = args(&["--method", method]);
            a.extend_from_slice(extra);
            let o = flowscope(&a, d);
            assert!(o.status.success(), "{method}: {}", stderr(&o));
            o
        };
        // Odd split point: the AA layout differs between even and odd steps.
        run(&["--steps", "301", "--checkpoint", "whole.ckpt"]);
        run(&["--steps", "157", "--checkpoint", "half.ckpt"]);
        let o = run(&[
            "--steps",
            "301",
            "--resume",
            "half.ckpt",
            "--checkpoint",
            "resumed.ckpt",
        ]);
        assert!(
            stderr(&o).contains("resumed from half.ckpt at step 157"),
            "{method}: {}",
            stderr(&o)
        );
        let whole = std::fs::read(d.join("whole.ckpt")).unwrap();
        let resumed = std::fs::read(d.join("resumed.ckpt")).unwrap();
        assert_eq!(whole.len(), resumed.len(), "{method}");
        assert!(
            whole == resumed,
            "{method}: resumed run differs from the uninterrupted one"
        );
        let s = load("cylinder.toml", SMALL);
        let solver = cpu(&s);
        let lbm = checkpoint::load(
            &d.join("resumed.ckpt"),
            s.size,
            solver.flags(),
            solver.state_len(),
        );
        if method == "lbm" {
            // The library sees the same step and populations.
            assert_eq!(lbm.unwrap().step, 301);
        } else {
            // The other method's state is refused with the cause, by the
            // library and on the command line.
            assert!(lbm.is_err());
            let o = flowscope(&args(&["--steps", "310", "--resume", "whole.ckpt"]), d);
            assert!(!o.status.success());
            assert!(
                stderr(&o).contains("another solution method"),
                "{}",
                stderr(&o)
            );
        }
    }
}

#[test]
fn checkpoints_of_other_grids_geometry_or_versions_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(scenario_path("cylinder.toml"), d.join("cylinder.toml")).unwrap();
    let o = flowscope(&args(&["--steps", "10", "--checkpoint", "a.ckpt"]), d);
    assert!(o.status.success(), "{}", stderr(&o));

    let o = flowscope(
        &args(&[
            "--steps",
            "20",
            "--resume",
            "a.ckpt",
            "--set",
            "domain.size=[50,24,6]",
        ]),
        d,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("holds a 48x24x6 grid but the scenario has 50x24x6"),
        "{}",
        stderr(&o)
    );

    let o = flowscope(
        &args(&[
            "--steps",
            "20",
            "--resume",
            "a.ckpt",
            "--set",
            "obstacles.0.radius=4",
        ]),
        d,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("other geometry"), "{}", stderr(&o));

    let mut bytes = std::fs::read(d.join("a.ckpt")).unwrap();
    bytes[16] = 99; // format version
    std::fs::write(d.join("v.ckpt"), &bytes).unwrap();
    let o = flowscope(&args(&["--steps", "20", "--resume", "v.ckpt"]), d);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("format version 99"), "{}", stderr(&o));

    let mut bytes = std::fs::read(d.join("a.ckpt")).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0x55;
    std::fs::write(d.join("c.ckpt"), &bytes).unwrap();
    let o = flowscope(&args(&["--steps", "20", "--resume", "c.ckpt"]), d);
    assert!(
        stderr(&o).contains("checksum does not match"),
        "{}",
        stderr(&o)
    );

    std::fs::write(d.join("x.ckpt"), b"hello").unwrap();
    let o = flowscope(&args(&["--steps", "20", "--resume", "x.ckpt"]), d);
    assert!(
        stderr(&o).contains("is not a flowscope checkpoint"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn library_resume_continues_identically() {
    let s = load(
        "cavity.toml",
        &["domain.size=[20,20,20]", "fluid.length_cells=18"],
    );
    let mut a = cpu(&s);
    a.step(75).unwrap();
    let mid = a.populations().unwrap();
    a.step(50).unwrap();
    let mut b = cpu(&s);
    b.set_populations(75, &mid).unwrap();
    b.step(50).unwrap();
    assert_eq!(b.time_step(), 125);
    let (pa, pb) = (a.populations().unwrap(), b.populations().unwrap());
    assert!(pa.iter().zip(&pb).all(|(x, y)| x.to_bits() == y.to_bits()));
}
