//! One run over several MPI processes (`--features mpi`, started by Open
//! MPI's `mpirun`): each process holds one slab, and the files equal those of
//! one process bit for bit.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{flowscope, scenario_path, stderr};

fn mpirun(n: usize, args: &[&str], cwd: &Path) -> Output {
    Command::new("mpirun")
        // CI runs as root; 3 processes on 2 cores need --oversubscribe.
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            &n.to_string(),
        ])
        .arg(env!("CARGO_BIN_EXE_flowscope"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("mpirun starts (Debian's openmpi-bin)")
}

fn run_args<'a>(scenario: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", scenario, "--solver", "cpu", "-q"];
    args.extend_from_slice(extra);
    args
}

fn bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn two_and_three_processes_write_the_files_of_one_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for name in ["cylinder", "cube", "urban"] {
        let path = scenario_path(&format!("{name}.toml"));
        let s = path.to_str().unwrap();
        let outputs = |tag: &str| {
            [
                "--steps".to_string(),
                "24".into(),
                "--vti".into(),
                format!("{name}-{tag}.vti"),
                "--forces".into(),
                format!("{name}-{tag}.csv"),
                "--every".into(),
                "8".into(),
            ]
        };
        let one = outputs("one");
        let o = flowscope(
            &run_args(s, &one.iter().map(String::as_str).collect::<Vec<_>>()),
            d,
        );
        assert!(o.status.success(), "{}", stderr(&o));
        for n in [2, 3] {
            let tag = format!("n{n}");
            let extra = outputs(&tag);
            let o = mpirun(
                n,
                &run_args(s, &extra.iter().map(String::as_str).collect::<Vec<_>>()),
                d,
            );
            let e = stderr(&o);
            assert!(o.status.success(), "{name}, {n} processes: {e}");
            assert!(
                e.contains(&format!("{n} slabs along z over {n} MPI processes")),
                "{e}"
            );
            // Rank 0 alone prints: one solver line, not n.
            assert_eq!(e.matches("slabs along z").count(), 1, "{e}");
            for ext in ["vti", "csv"] {
                assert!(
                    bytes(&d.join(format!("{name}-one.{ext}")))
                        == bytes(&d.join(format!("{name}-{tag}.{ext}"))),
                    "{name}: the .{ext} of {n} processes differs from one process's"
                );
            }
        }
    }
}

#[test]
fn a_checkpoint_written_by_three_processes_resumes_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let path = scenario_path("cube.toml");
    let s = path.to_str().unwrap();
    let o = flowscope(&run_args(s, &["--steps", "25", "--vti", "straight.vti"]), d);
    assert!(o.status.success(), "{}", stderr(&o));
    // An odd step: the halos hold the other parity's populations.
    let o = mpirun(
        3,
        &run_args(s, &["--steps", "13", "--checkpoint", "c.ckpt"]),
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let resume = ["--steps", "25", "--resume", "c.ckpt", "--vti"];
    let o = mpirun(3, &run_args(s, &[&resume[..], &["three.vti"]].concat()), d);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(bytes(&d.join("three.vti")) == bytes(&d.join("straight.vti")));
    // The checkpoint holds the whole lattice: one process resumes it too.
    let o = flowscope(&run_args(s, &[&resume[..], &["one.vti"]].concat()), d);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(bytes(&d.join("one.vti")) == bytes(&d.join("straight.vti")));
}

#[test]
fn a_blow_up_on_one_process_stops_them_all_with_its_message() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let path = scenario_path("cylinder.toml");
    let o = mpirun(
        2,
        &run_args(
            path.to_str().unwrap(),
            &[
                "--set",
                "domain.size=[64,32,4]",
                "--set",
                "obstacles.0.center=[16,15.5,0]",
                "--set",
                "fluid.reynolds=65000",
                "--set",
                "fluid.velocity=0.17",
                "--steps",
                "5000",
                "--every",
                "50",
                "--vti",
                "last.vti",
            ],
        ),
        d,
    );
    let e = stderr(&o);
    // Both processes stop at the same step with the exit code of a blow-up
    // (no hang, no abort); rank 0 says why and writes the diagnosis.
    assert_eq!(o.status.code(), Some(3), "{e}");
    assert_eq!(
        e.matches("the simulation became unstable at step").count(),
        1,
        "{e}"
    );
    assert!(
        std::fs::read_dir(d).unwrap().any(|f| f
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains("unstable-step")),
        "{e}"
    );
}

#[test]
fn commands_other_than_run_are_refused_under_mpirun() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenario_path("cavity.toml");
    let o = mpirun(2, &["info", path.to_str().unwrap()], dir.path());
    let e = stderr(&o);
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains("only `flowscope run` spreads over MPI processes"),
        "{e}"
    );
}
