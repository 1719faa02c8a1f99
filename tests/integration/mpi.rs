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
    // cavity-dye: a contaminant, whose concentration (and its mean) rank 0
    // writes too.
    for name in ["cylinder", "cube", "urban", "cavity-dye"] {
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
                // Averages too: rank 0 alone gathers them, as the fields.
                "--average-from".into(),
                "8".into(),
                "--average-every".into(),
                "2".into(),
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

/// Contaminants where each process moves its own layers: z periodic (the
/// halos wrap), the subgrid model (eddy diffusivities from the halo
/// velocity), a source held on the layer where two processes meet, a rate
/// released over all of them into a second field, receptors on three
/// processes, moved every third flow step.
const SPREAD: &str = r#"
name = "release across processes"
[domain]
size = [40, 18, 12]
[boundaries]
x_min = { inlet = [1.0, 0.0, 0.0] }
x_max = "outlet"
y = "wall"
z = "periodic"
[fluid]
reynolds = 400.0
length_cells = 6
velocity = 0.06
turbulence = "smagorinsky"
[[obstacles]]
shape = "cylinder"
center = [12.0, 8.5, 0.0]
radius = 3.0
axis = "z"
[dispersion]
interval = 3
[[sources]]
point = [6.0, 9.0, 6.0]
concentration = 1.0
[[sources]]
box = { min = [5.0, 3.0, 0.0], max = [6.0, 4.0, 11.0] }
rate = 0.5
field = 2
start = 5
[[receptors]]
name = "low"
point = [16.0, 9.0, 1.0]
[[receptors]]
name = "middle"
point = [19.0, 9.0, 6.0]
[[receptors]]
name = "high"
point = [22.0, 5.0, 10.0]
"#;

#[test]
fn contaminants_moved_by_each_process_on_its_layers_equal_one_process_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("spread.toml"), SPREAD).unwrap();
    let outputs = |tag: &str| {
        vec![
            "--steps".to_string(),
            "600".into(),
            "--every".into(),
            "100".into(),
            "--vti".into(),
            format!("{tag}.vti"),
            "--receptors".into(),
            format!("{tag}.csv"),
            "--average-from".into(),
            "100".into(),
            "--average-every".into(),
            "2".into(),
        ]
    };
    let args = |extra: &[String]| -> Vec<String> {
        let mut a: Vec<String> = run_args("spread.toml", &[])
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend_from_slice(extra);
        a
    };
    let one = args(&outputs("one"));
    let o = flowscope(&one.iter().map(String::as_str).collect::<Vec<_>>(), d);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = std::fs::read_to_string(d.join("one.csv")).unwrap();
    let last: Vec<f64> = csv
        .lines()
        .last()
        .unwrap()
        .split(',')
        .map(|v| v.parse().unwrap())
        .collect();
    // Something reached each receptor in each field: the comparison below
    // compares numbers, not zeros.
    assert!(last[1..].iter().all(|&v| v > 0.0), "{csv}");
    for n in [2, 3] {
        let tag = format!("n{n}");
        let a = args(&outputs(&tag));
        let o = mpirun(n, &a.iter().map(String::as_str).collect::<Vec<_>>(), d);
        let e = stderr(&o);
        assert!(o.status.success(), "{n} processes: {e}");
        assert!(e.contains("on the host of each process"), "{e}");
        for ext in ["vti", "csv"] {
            assert!(
                bytes(&d.join(format!("one.{ext}"))) == bytes(&d.join(format!("{tag}.{ext}"))),
                "the .{ext} of {n} processes differs from one process's"
            );
        }
    }
    // Pieces: each process its own layers' concentrations and means.
    let mut a = args(&outputs("parts"));
    let at = a.iter().position(|v| v == "parts.vti").unwrap();
    a[at] = "parts.pvti".into();
    let o = mpirun(3, &a.iter().map(String::as_str).collect::<Vec<_>>(), d);
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("parts.pvti (3 pieces beside it)"), "{e}");
    // The same arrays as one process's file, the two concentrations and
    // their means among them.
    assert_same_in_vtk(d, "parts.pvti", "one.vti");
    // A checkpoint inside a transport step (301 = 100 × 3 + 1), written by 3
    // processes, resumes on 3 and on 1 as the run that went straight on.
    let stop = args(&[
        "--steps".into(),
        "301".into(),
        "--checkpoint".into(),
        "c.ckpt".into(),
    ]);
    let o = mpirun(3, &stop.iter().map(String::as_str).collect::<Vec<_>>(), d);
    assert!(o.status.success(), "{}", stderr(&o));
    let resume = |tag: &str| {
        args(&[
            "--steps".into(),
            "600".into(),
            "--resume".into(),
            "c.ckpt".into(),
            "--vti".into(),
            format!("{tag}.vti"),
            "--receptors".into(),
            format!("{tag}.csv"),
            "--every".into(),
            "100".into(),
        ])
    };
    let o = mpirun(
        3,
        &resume("three")
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = flowscope(
        &resume("single")
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let straight = args(&[
        "--steps".into(),
        "600".into(),
        "--vti".into(),
        "straight.vti".into(),
        "--receptors".into(),
        "straight.csv".into(),
        "--every".into(),
        "100".into(),
    ]);
    let o = flowscope(&straight.iter().map(String::as_str).collect::<Vec<_>>(), d);
    assert!(o.status.success(), "{}", stderr(&o));
    // The same checkpoint in pieces: each process its own layers'
    // concentrations, doses and the velocity under way.
    let stop = args(&[
        "--steps".into(),
        "301".into(),
        "--checkpoint".into(),
        "c.pckpt".into(),
    ]);
    let o = mpirun(3, &stop.iter().map(String::as_str).collect::<Vec<_>>(), d);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut pieces = resume("pieces");
    let at = pieces.iter().position(|v| v == "c.ckpt").unwrap();
    pieces[at] = "c.pckpt".into();
    let o = mpirun(3, &pieces.iter().map(String::as_str).collect::<Vec<_>>(), d);
    assert!(o.status.success(), "{}", stderr(&o));
    let last_line = |name: &str| {
        let text = std::fs::read_to_string(d.join(name)).unwrap();
        text.lines().last().unwrap().to_string()
    };
    for tag in ["three", "single", "pieces"] {
        assert!(
            bytes(&d.join(format!("{tag}.vti"))) == bytes(&d.join("straight.vti")),
            "resumed on {tag}: the .vti differs from the run that went straight on"
        );
        // The doses went through the checkpoint too.
        assert_eq!(
            last_line(&format!("{tag}.csv")),
            last_line("straight.csv"),
            "resumed on {tag}"
        );
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

/// The processes of a run under `mpirun` whose arguments hold `marker`, as
/// (rank, pid), from /proc (Linux).
fn ranks_running(marker: &str) -> Vec<(u32, u32)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args = String::from_utf8_lossy(&cmdline);
        if !args.contains(marker) || !args.starts_with(env!("CARGO_BIN_EXE_flowscope")) {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let rank = environ
            .split(|&b| b == 0)
            .filter_map(|v| v.strip_prefix(b"OMPI_COMM_WORLD_RANK="))
            .find_map(|v| std::str::from_utf8(v).ok()?.parse().ok());
        if let Some(rank) = rank {
            found.push((rank, pid));
        }
    }
    found
}

/// Two processes running the cube for good under `mpirun` (with `env` set
/// for them), stderr to `stderr.txt` in `d`, and the process id of rank 1
/// once both run; `marker` (the run's output path) finds the processes.
fn start_two(d: &Path, marker: &Path, env: &[(&str, &str)]) -> (std::process::Child, u32) {
    use std::time::{Duration, Instant};
    let log = std::fs::File::create(d.join("stderr.txt")).unwrap();
    let path = scenario_path("cube.toml");
    let mut mpirun = Command::new("mpirun");
    mpirun.args(["--allow-run-as-root", "--oversubscribe", "-n", "2"]);
    for (k, v) in env {
        mpirun.env(k, v).args(["-x", k]);
    }
    let mut job = mpirun
        .arg(env!("CARGO_BIN_EXE_flowscope"))
        .args(run_args(
            path.to_str().unwrap(),
            &["--steps", "10000000", "--vti", marker.to_str().unwrap()],
        ))
        .current_dir(d)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("mpirun starts (Debian's openmpi-bin)");
    let marker = marker.to_str().unwrap();
    let started = Instant::now();
    let victim = loop {
        let ranks = ranks_running(marker);
        if ranks.len() == 2 {
            break ranks.iter().find(|r| r.0 == 1).expect("rank 1").1;
        }
        if started.elapsed() > Duration::from_secs(60) || job.try_wait().unwrap().is_some() {
            let _ = job.kill();
            panic!("the two processes did not start: {ranks:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Into the steps (MPI set up, halos being exchanged).
    std::thread::sleep(Duration::from_secs(3));
    (job, victim)
}

/// Waits up to a minute for the job to end after `signal` went to rank 1,
/// and returns its status and stderr; a job still running is killed and the
/// test fails.
fn ended_after(
    mut job: std::process::Child,
    victim: u32,
    signal: &str,
    d: &Path,
    marker: &Path,
) -> (std::process::ExitStatus, String) {
    use std::time::{Duration, Instant};
    let marker = marker.to_str().unwrap();
    let sent = Command::new("kill")
        .args([signal, &victim.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let since = Instant::now();
    let status = loop {
        if let Some(status) = job.try_wait().unwrap() {
            break status;
        }
        if since.elapsed() > Duration::from_secs(60) {
            let _ = job.kill();
            for (_, pid) in ranks_running(marker) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            panic!("the run hung after rank 1 got {signal}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let e = std::fs::read_to_string(d.join("stderr.txt")).unwrap();
    // The other process went with it.
    let left = ranks_running(marker);
    for (_, pid) in &left {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    assert!(left.is_empty(), "processes left: {left:?}; {e}");
    (status, e)
}

#[test]
fn a_killed_process_ends_the_run_with_a_message_naming_it_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The run's output path, unique to this test, finds its processes.
    let marker = d.join("never-written.vti");
    let (job, victim) = start_two(d, &marker, &[]);
    let (status, e) = ended_after(job, victim, "-KILL", d, &marker);
    assert!(!status.success(), "{e}");
    assert!(e.contains("rank 1"), "the message names the rank: {e}");
}

/// A process that stops answering, as behind a failed network: its peer
/// waits past the limit, says for what and from whom, and ends the job.
#[test]
fn a_process_that_stops_answering_ends_the_run_after_the_wait_limit_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let marker = d.join("never-written-either.vti");
    let (job, victim) = start_two(d, &marker, &[("FLOWSCOPE_MPI_TIMEOUT", "5")]);
    let (status, e) = ended_after(job, victim, "-STOP", d, &marker);
    assert!(!status.success(), "{e}");
    assert!(
        e.contains("rank 0 of 2: error: no answer from rank 1 for"),
        "rank 0 names rank 1: {e}"
    );
    assert!(e.contains("network failure"), "{e}");
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

/// Reads a `.pvti` and a `.vti` with Python's vtk and says whether every
/// array is equal.
const SAME_AS_VTI: &str = r#"
import sys
import numpy as np
from vtkmodules.vtkIOXML import vtkXMLImageDataReader, vtkXMLPImageDataReader
from vtkmodules.util.numpy_support import vtk_to_numpy
def read(reader, path):
    reader.SetFileName(path)
    reader.Update()
    return reader.GetOutput()
pieces = read(vtkXMLPImageDataReader(), sys.argv[1])
whole = read(vtkXMLImageDataReader(), sys.argv[2])
assert pieces.GetDimensions() == whole.GetDimensions(), (pieces.GetDimensions(), whole.GetDimensions())
a, b = pieces.GetPointData(), whole.GetPointData()
names = sorted(b.GetArrayName(i) for i in range(b.GetNumberOfArrays()))
assert sorted(a.GetArrayName(i) for i in range(a.GetNumberOfArrays())) == names, names
for name in names:
    x, y = vtk_to_numpy(a.GetArray(name)), vtk_to_numpy(b.GetArray(name))
    assert x.shape == y.shape and np.array_equal(x, y), name
print("same", len(names), "arrays", pieces.GetDimensions())
"#;

#[test]
fn pieces_written_by_three_processes_open_in_vtk_as_the_single_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let path = scenario_path("cube.toml");
    let s = path.to_str().unwrap();
    let averages = [
        "--steps",
        "20",
        "--average-from",
        "10",
        "--average-every",
        "2",
    ];
    let with = |out: &'static str| [&averages[..], &["--vti", out]].concat();
    let o = flowscope(&run_args(s, &with("whole.vti")), d);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = mpirun(3, &run_args(s, &with("parts.pvti")), d);
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("parts.pvti (3 pieces beside it)"), "{e}");
    // One process writes a collection of one piece.
    let o = flowscope(&run_args(s, &with("one.pvti")), d);
    assert!(o.status.success(), "{}", stderr(&o));
    for (pvti, pieces) in [("parts.pvti", 3), ("one.pvti", 1)] {
        for k in 0..pieces {
            let stem = pvti.trim_end_matches(".pvti");
            assert!(d.join(format!("{stem}_{k}.vti")).exists());
        }
        assert_same_in_vtk(d, pvti, "whole.vti");
    }
}

/// `pvti` and `whole` (in `d`) open in Python's `vtk` with the same arrays,
/// equal value for value ([`SAME_AS_VTI`]).
fn assert_same_in_vtk(d: &Path, pvti: &str, whole: &str) {
    let out = Command::new("python3")
        .args(["-c", SAME_AS_VTI, pvti, whole])
        .current_dir(d)
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.starts_with("same"),
        "{pvti}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_checkpoint_in_pieces_resumes_on_as_many_processes_and_refuses_another_count() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let path = scenario_path("cylinder.toml");
    let s = path.to_str().unwrap();
    let o = flowscope(&run_args(s, &["--steps", "21", "--vti", "straight.vti"]), d);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = mpirun(
        3,
        &run_args(s, &["--steps", "11", "--checkpoint", "c.pckpt"]),
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!((0..3).all(|k| d.join(format!("c_{k}.ckpt")).exists()));
    let resume = [
        "--steps",
        "21",
        "--resume",
        "c.pckpt",
        "--vti",
        "resumed.vti",
    ];
    let o = mpirun(3, &run_args(s, &resume), d);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(bytes(&d.join("resumed.vti")) == bytes(&d.join("straight.vti")));
    for n in [1, 2] {
        let o = if n == 1 {
            flowscope(&run_args(s, &resume), d)
        } else {
            mpirun(n, &run_args(s, &resume), d)
        };
        let e = stderr(&o);
        assert!(!o.status.success(), "{e}");
        assert!(
            e.contains(&format!(
                "was written by 3 processes, and this run has {n}: resume it with mpirun -n 3"
            )),
            "{e}"
        );
    }
}
