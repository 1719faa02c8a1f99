//! The headless command line: probes, instability exit, Ctrl-C, bench.

use flowscope::solver::Solver;

use crate::common::*;

#[test]
fn probe_writes_a_csv_line_of_samples_with_a_header() {
    let dir = tempfile::tempdir().unwrap();
    let o = flowscope(
        &[
            "run",
            scenario_path("cavity.toml").to_str().unwrap(),
            "--solver",
            "cpu",
            "-q",
            "--set",
            "domain.size=[18,18,4]",
            "--set",
            "boundaries.z=\"periodic\"",
            "--set",
            "fluid.length_cells=16",
            "--steps",
            "400",
            "--probe",
            "8.5,0,1:8.5,17,1:18",
            "--probe-out",
            "p.csv",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(dir.path().join("p.csv")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "step,x,y,z,rho,ux,uy,uz,p");
    assert_eq!(lines.len(), 19);
    let ux = |k: usize| -> f64 { lines[k].split(',').nth(5).unwrap().parse().unwrap() };
    // Bottom wall cell rests, the lid cell moves at the lid speed, the cavity
    // centre flows backwards.
    assert_eq!(ux(1), 0.0);
    assert!((ux(18) - 0.08).abs() < 1e-6, "{}", ux(18));
    assert!(ux(6) < 0.0, "{}", ux(6));
}

#[test]
fn a_blow_up_keeps_the_last_good_checkpoint_and_writes_its_state_apart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // An earlier, complete result of the same name must survive too.
    std::fs::write(d.join("last.vti"), "an earlier good result").unwrap();
    let o = flowscope(
        &[
            "run",
            scenario_path("cylinder.toml").to_str().unwrap(),
            "--solver",
            "cpu",
            "-q",
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
            "--forces",
            "f.csv",
            "--vti",
            "last.vti",
            "--checkpoint",
            "good.ckpt",
            "--checkpoint-every",
            "50",
        ],
        d,
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{e}");
    assert!(e.contains("the simulation became unstable at step"), "{e}");
    assert!(
        e.contains("Lower the Reynolds number (fluid.reynolds)"),
        "{e}"
    );
    assert!(e.contains("warning: τ = 0.5001"), "{e}");
    let blown: u64 = e
        .split("unstable at step ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .and_then(|n| n.parse().ok())
        .expect("the step of the blow-up");
    // The requested files keep their good content; the blown-up fields are
    // written apart, under a name that says so.
    assert_eq!(
        std::fs::read_to_string(d.join("last.vti")).unwrap(),
        "an earlier good result"
    );
    let diagnosis = d.join(format!("last.unstable-step-{blown}.vti"));
    assert!(diagnosis.exists(), "{e}");
    assert!(
        e.contains("kept good.ckpt, the last good checkpoint"),
        "{e}"
    );
    // The checkpoint is the last good state: it resumes.
    let s = load(
        "cylinder.toml",
        &[
            "domain.size=[64,32,4]",
            "obstacles.0.center=[16,15.5,0]",
            "fluid.reynolds=65000",
            "fluid.velocity=0.17",
        ],
    );
    let solver = cpu(&s);
    let c = flowscope::io::checkpoint::load(
        &d.join("good.ckpt"),
        s.size,
        solver.flags(),
        solver.state_len(),
    )
    .unwrap();
    assert!(
        c.step < blown && c.step.is_multiple_of(50),
        "{} {blown}",
        c.step
    );
    assert!(c.populations.iter().all(|p| p.is_finite()));
    let rows = std::fs::read_to_string(d.join("f.csv")).unwrap();
    assert!(rows.lines().count() >= 2, "{rows}");
    let left: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn output_paths_are_checked_before_the_first_step() {
    let dir = tempfile::tempdir().unwrap();
    let cavity = scenario_path("cavity.toml");
    let cases: [(&[&str], &str); 6] = [
        (
            &["--vti", "no/such/folder/out.vti"],
            "--vti no/such/folder/out.vti: the folder no/such/folder does not exist",
        ),
        (&["--vti", "out.vtk"], "name the file with that extension"),
        (
            &["--forces", "missing/f.csv"],
            "the folder missing does not exist",
        ),
        (
            &["--probe", "1,1,1:5,5,5:4", "--probe-out", "p.txt"],
            "--probe-out p.txt: this output is written as .csv",
        ),
        (
            &["--checkpoint", "state.bin"],
            "--checkpoint state.bin: this output is written as .ckpt",
        ),
        (&["--checkpoint", "typo/s.ckpt"], "typo does not exist"),
    ];
    for (extra, says) in cases {
        let mut args = vec![
            "run",
            cavity.to_str().unwrap(),
            "--solver",
            "cpu",
            "-q",
            "--steps",
            "100000000",
        ];
        args.extend_from_slice(extra);
        let o = flowscope(&args, dir.path());
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {e}");
        assert!(e.contains(says), "{extra:?}: {e}");
        // Refused before the solver was built: no step was run.
        assert!(!e.contains("CPU solver"), "{extra:?}: {e}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn run_steps_caps_a_run_until_steady_and_progress_shows_the_change() {
    let dir = tempfile::tempdir().unwrap();
    // The shipped cavity has both run.steps and run.until_steady; a tiny
    // cap and an unreachable tolerance: the cap must stop it.
    let o = flowscope(
        &[
            "run",
            scenario_path("cavity.toml").to_str().unwrap(),
            "--solver",
            "cpu",
            "--set",
            "domain.size=[34,34,34]",
            "--set",
            "fluid.length_cells=32",
            "--set",
            "run.steps=1400",
            "--set",
            "run.until_steady=1e-12",
        ],
        dir.path(),
    );
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("step 1400: 1400 steps"), "{e}");
    assert!(e.contains("not steady after 1400 steps"), "{e}");
    // Without a terminal, plain progress lines with the change against the
    // target (the first once a change is measured, then every 2 s).
    let progress: Vec<&str> = e
        .lines()
        .filter(|l| l.starts_with("step ") && l.contains("/1400"))
        .collect();
    assert!(!progress.is_empty(), "{e}");
    assert!(
        progress
            .iter()
            .all(|l| l.contains("(steady below 1e-12)") && !l.contains("NaN")),
        "{e}"
    );
}

#[test]
fn ctrl_c_stops_cleanly_and_writes_the_requested_outputs() {
    stops_cleanly_on("-INT");
}

#[test]
fn sigterm_and_sighup_stop_cleanly_like_ctrl_c() {
    // A batch scheduler's stop, and a closed terminal.
    stops_cleanly_on("-TERM");
    stops_cleanly_on("-HUP");
}

/// A long run stopped by `signal` writes its outputs whole and exits 130.
fn stops_cleanly_on(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_flowscope"))
        .args([
            "run",
            scenario_path("cavity.toml").to_str().unwrap(),
            "--solver",
            "cpu",
            "-q",
            "--steps",
            "100000000",
            "--every",
            "10",
            "--vti",
            "out.vti",
            "--checkpoint",
            "out.ckpt",
        ])
        .current_dir(dir.path())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let kill = std::process::Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{e}");
    assert!(e.contains("interrupted at step"), "{e}");
    assert!(
        dir.path().join("out.vti").exists() && dir.path().join("out.ckpt").exists(),
        "{e}"
    );
    // Written beside and renamed: nothing half-written is left.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn bench_breaks_the_projection_methods_step_down_beside_its_jacobi_baseline() {
    let o = flowscope(
        &[
            "bench",
            "--solver",
            "cpu",
            "--method",
            "projection",
            "--jacobi",
            "--size",
            "12",
            "--repeats",
            "1",
        ],
        &repo(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let row = |name: &str| -> Vec<f64> {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with("12 ") && l.contains(name))
            .unwrap_or_else(|| panic!("a row for {name}: {out}"));
        line.split_whitespace()
            .filter_map(|w| w.trim_end_matches('%').parse().ok())
            .collect()
    };
    // size, ms/step, MLUPS, sub-steps, Mcell/s, three shares, iterations,
    // LBM MLUPS.
    let (mg, jacobi) = (row("MG-PCG"), row("Jacobi"));
    assert_eq!(mg.len(), 10, "{out}");
    let shares: f64 = mg[5..8].iter().sum();
    assert!((shares - 100.0).abs() <= 2.0, "{out}");
    assert!(mg[2] > 0.0 && mg[4] > 0.0 && mg[9] > 0.0, "{out}");
    // Cell-steps per second: cells × sub-steps per lattice step / its time.
    let rate = 12f64.powi(3) * mg[3] / (mg[1] * 1e-3) / 1e6;
    assert!(
        (mg[4] - rate).abs() < 0.06 + 0.02 * rate,
        "{} vs {rate}: {out}",
        mg[4]
    );
    // The baseline needs many more iterations per solve.
    assert!(jacobi[8] > 10.0 * mg[8], "{out}");
}

#[test]
fn bench_prints_mlups() {
    let o = flowscope(
        &["bench", "--solver", "cpu", "--size", "24", "--repeats", "1"],
        &repo(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("24 "))
        .expect("a row for size 24");
    let mlups: f64 = row.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(mlups > 0.1, "{out}");
}

#[test]
fn steady_state_criterion_stops_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let o = flowscope(
        &[
            "run",
            scenario_path("cavity.toml").to_str().unwrap(),
            "--solver",
            "cpu",
            "-q",
            "--set",
            "domain.size=[14,14,4]",
            "--set",
            "boundaries.z=\"periodic\"",
            "--set",
            "fluid.length_cells=12",
            "--set",
            "fluid.reynolds=10",
            "--until-steady",
            "1e-5",
            "--steps",
            "200000",
            "--every",
            "100",
        ],
        dir.path(),
    );
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("steady at step"), "{e}");
}

#[test]
fn bench_render_times_the_visualisation_passes() {
    let o = flowscope(
        &["bench", "--render", "--size", "24", "--repeats", "1"],
        &repo(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    // The volume rendering's table: framed at steps 1 and 0.5, close at 1,
    // each with the clear and the preset transfer function timed.
    let volume: Vec<&str> = out
        .lines()
        .filter(|l| {
            l.trim_start().starts_with("24 ") && (l.contains("framed") || l.contains("close"))
        })
        .collect();
    assert_eq!(volume.len(), 3, "{out}");
    for row in &volume {
        let ms: Vec<f64> = row
            .split_whitespace()
            .skip(2)
            .map(|w| w.parse().unwrap_or(f64::NAN))
            .collect();
        assert!(ms.len() == 3 && ms[1] > 0.0 && ms[2] > 0.0, "{row}");
    }
    // Six more (passes and frames, impostors, slices, streamed frames,
    // uploads, streamlines), a row each; "-" where the adapter has no GPU
    // timer.
    let rows: Vec<Vec<f64>> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("24 ") && !volume.contains(l))
        .map(|l| {
            l.split_whitespace()
                .map(|w| {
                    if w == "-" {
                        f64::NAN
                    } else {
                        w.parse().unwrap()
                    }
                })
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 6, "{out}");
    let (frames, spheres, slices, streamed, uploads, lines) =
        (&rows[0], &rows[1], &rows[2], &rows[3], &rows[4], &rows[5]);
    // A streamed frame of each view, timed.
    assert!(
        streamed.len() == 7 && streamed[1..].iter().all(|&ms| ms > 0.0),
        "{out}"
    );
    // Three slices: the frame timed.
    assert!(slices.len() == 3 && slices[1] > 0.0, "{out}");
    // The upload and its host-side part, both timed.
    assert!(uploads[1] > 0.0 && uploads[2] > 0.0, "{out}");
    // derive, extract, its GPU time and that without a surface, triangles,
    // mono frame and its scene pass's GPU time, anaglyph picture.
    assert!(
        frames.len() == 9
            && frames[1..].iter().all(|&v| v > 0.0 || v.is_nan())
            && frames[5] > 100.0,
        "{out}"
    );
    // spheres, frame time, fps.
    assert!(spheres[1] > 100.0 && spheres[2] > 0.0, "{out}");
    // lines, steps, points (some lines leave the box early), trace time.
    assert!(
        lines[1] > 1000.0 && lines[2] == 1000.0 && lines[3] > lines[1] * 10.0,
        "{out}"
    );
}

#[test]
fn bench_stream_compares_the_solver_alone_and_while_streaming() {
    let o = flowscope(
        &[
            "bench",
            "--stream",
            "--solver",
            "cpu",
            "--size",
            "20",
            "--seconds",
            "2",
        ],
        &repo(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let row: Vec<f64> = out
        .lines()
        .find(|l| l.trim_start().starts_with("20 "))
        .expect("a row for size 20")
        .replace(['%', '³'], "")
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    // The display grid, MLUPS alone and streaming, the share kept, frames per
    // second, frame time.
    assert_eq!(row[1], 20.0, "{out}");
    assert!(row[2] > 0.0 && row[3] > 0.0, "{out}");
    // The share from the printed speeds, which are rounded to 0.05 (slow runs
    // under a loaded CI machine make that rounding matter).
    let lowest = 100.0 * (row[3] - 0.05) / (row[2] + 0.05);
    let highest = 100.0 * (row[3] + 0.05) / (row[2] - 0.05).max(0.01);
    assert!(row[4] >= lowest - 0.05 && row[4] <= highest + 0.05, "{out}");
    assert!(row[5] > 1.0 && row[6] > 0.0, "{out}");
}

#[test]
fn bench_times_a_scaled_scenario_beside_the_box_of_its_size() {
    let o = flowscope(
        &[
            "bench",
            "--solver",
            "cpu",
            "--scenario",
            scenario_path("urban.toml").to_str().unwrap(),
            "--scale",
            "0.25",
            "--repeats",
            "1",
        ],
        &repo(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("scaled by 0.25: 64x64x16 = 65536 cells"),
        "{out}"
    );
    assert!(out.contains("the box: a periodic 64x64x16 grid"), "{out}");
    let share: f64 = out
        .split("MLUPS: ")
        .nth(1)
        .and_then(|r| r.split('%').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(share > 5.0 && share < 200.0, "{out}");
    let o = flowscope(
        &[
            "bench",
            "--solver",
            "cpu",
            "--scenario",
            "urban.toml",
            "--scale=-2",
        ],
        &repo(),
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--scale -2: give a positive factor"),
        "{}",
        stderr(&o)
    );
}
