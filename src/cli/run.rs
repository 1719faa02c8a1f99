//! `flowscope run`: a scenario headless, with progress, outputs and checkpoints.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};

use super::{exit, SolverArgs};
use crate::io::probe::ProbeLine;
use crate::io::{checkpoint, probe, vti, GrowingFile};
use crate::scenario::Scenario;
use crate::session::select;
use crate::solver::average::welford;
use crate::solver::{Averages, Fields, Piece, Schedule, Solver};
use crate::system::{ranks, Tuning};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Scenario file (see assets/scenarios/).
    pub scenario: PathBuf,
    #[command(flatten)]
    pub solver: SolverArgs,
    /// Run until this time step (a resumed run counts from step 0 too).
    /// Default: run.steps of the scenario. With --until-steady (or
    /// run.until_steady) it is the cap.
    #[arg(long)]
    pub steps: Option<u64>,
    /// Stop when the mean relative change of the velocity per step drops below
    /// TOL (checked every --every steps); --steps then caps the run.
    #[arg(long, value_name = "TOL")]
    pub until_steady: Option<f64>,
    /// Override a scenario key, e.g. --set fluid.reynolds=400 --set domain.size=[64,64,4].
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// The solution method (default: the scenario's [run] method, else lbm).
    #[arg(long, value_enum)]
    pub method: Option<crate::scenario::Method>,
    /// Write the final fields as VTK image data (.vti, opens in ParaView).
    /// Under mpirun a .pvti name has each process write its own piece
    /// (out_0.vti, …) and rank 0 the collection that ParaView opens, for grids
    /// too large to gather on one machine.
    #[arg(long, value_name = "FILE")]
    pub vti: Option<PathBuf>,
    /// Sample ρ, u, p on a line: X0,Y0,Z0:X1,Y1,Z1:N (cell coordinates).
    #[arg(long, value_name = "LINE", requires = "probe_out")]
    pub probe: Option<ProbeLine>,
    /// CSV file for the probe samples at the end of the run.
    #[arg(long, value_name = "FILE", requires = "probe")]
    pub probe_out: Option<PathBuf>,
    /// CSV file of drag and lift coefficients per obstacle, every --every steps.
    #[arg(long, value_name = "FILE")]
    pub forces: Option<PathBuf>,
    /// CSV file of each receptor's concentration and dose (its time
    /// integral, in concentration × steps) every --every steps, for
    /// scenarios with contaminant sources and `[[receptors]]`.
    #[arg(long, value_name = "FILE")]
    pub receptors: Option<PathBuf>,
    /// Interval in steps for forces, receptors, stability and steadiness checks.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub every: u64,
    /// Also write the fields every K steps as a numbered series beside the
    /// --vti file (out_000100.vti, …) and an out.pvd collection that ParaView
    /// opens as one animated dataset.
    #[arg(long, value_name = "K", requires = "vti", value_parser = clap::value_parser!(u64).range(1..))]
    pub vti_every: Option<u64>,
    /// Keep time averages from step STEP on: the mean and RMS of the
    /// velocity and pressure per cell (in the --vti file as velocity_mean,
    /// velocity_rms, pressure_mean, pressure_rms; in the probe CSV as
    /// ux_mean…p_mean) and of the force coefficients (the last two rows of
    /// --forces). A resumed run starts its averages afresh.
    #[arg(long, value_name = "STEP")]
    pub average_from: Option<u64>,
    /// Steps between the samples of the time averages (consecutive steps
    /// differ little: the flow moves a twentieth of a cell per step).
    #[arg(long, value_name = "K", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub average_every: u64,
    /// Save the full solver state to FILE at the end (and every --checkpoint-every steps).
    /// A .ckpt holds it whole (under mpirun gathered on rank 0: it resumes on
    /// any number of processes); a .pckpt names one piece per process
    /// (FILE_0.ckpt, …), for grids too large to gather, and resumes on as many.
    #[arg(long, value_name = "FILE")]
    pub checkpoint: Option<PathBuf>,
    #[arg(long, value_name = "N", requires = "checkpoint", value_parser = clap::value_parser!(u64).range(1..))]
    pub checkpoint_every: Option<u64>,
    /// Continue from a checkpoint written for the same scenario.
    #[arg(long, value_name = "FILE")]
    pub resume: Option<PathBuf>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Outputs requested at the end (or at an early stop).
struct Outputs<'a> {
    args: &'a RunArgs,
    physical: Option<vti::Physical>,
}

impl Outputs<'_> {
    /// Checks every output path before the first step, so that a typo does
    /// not throw a computation away at its end.
    fn check(args: &RunArgs) -> anyhow::Result<()> {
        let outputs = [
            (&args.vti, "--vti", &["vti", "pvti"][..]),
            (&args.probe_out, "--probe-out", &["csv"][..]),
            (&args.receptors, "--receptors", &["csv"][..]),
            (&args.forces, "--forces", &["csv"][..]),
            (&args.checkpoint, "--checkpoint", &["ckpt", "pckpt"][..]),
        ];
        for (path, option, extensions) in outputs {
            if let Some(path) = path {
                crate::io::check_output(path, option, extensions).map_err(anyhow::Error::msg)?;
            }
        }
        if let (Some(vti), Some(_)) = (&args.vti, args.vti_every) {
            if is_pvti(vti) {
                bail!(
                    "--vti-every writes a series of .vti files: name --vti {} with the .vti \
                     extension (a .pvti is written once, at the end)",
                    vti.display()
                );
            }
            let pvd = vti.with_extension("pvd");
            crate::io::check_output(&pvd, "--vti-every", &["pvd"]).map_err(anyhow::Error::msg)?;
        }
        Ok(())
    }

    /// Writes the final fields, probe samples and checkpoint.
    fn write(&self, solver: &mut dyn Solver) -> anyhow::Result<()> {
        self.write_fields(solver, |path, _| path.to_path_buf())?;
        if let Some(path) = &self.args.checkpoint {
            save_checkpoint(solver, path)?;
            eprintln!("wrote {} (step {})", path.display(), solver.time_step());
        }
        Ok(())
    }

    /// The `.vti` and probe CSV of the current step, each at `place(path asked
    /// for, step)`.
    fn write_fields(
        &self,
        solver: &mut dyn Solver,
        place: impl Fn(&Path, u64) -> PathBuf,
    ) -> anyhow::Result<()> {
        let args = self.args;
        let step = solver.time_step();
        let (pieces, whole) = match &args.vti {
            Some(path) if is_pvti(path) => (Some(path), None),
            vti => (None, vti.as_ref()),
        };
        if let Some(path) = pieces {
            self.write_pieces(solver, &place(path, step))?;
        }
        if whole.is_none() && args.probe.is_none() {
            return Ok(());
        }
        // Every rank takes part (the calls are collective); rank 0 alone
        // receives the fields, and writes.
        let fields = solver.fields_on_root()?;
        let averages = solver.averages_on_root()?;
        let Some(fields) = fields else {
            return Ok(());
        };
        if let Some(path) = whole {
            self.write_vti(
                &place(path, step),
                &fields,
                averages.as_ref(),
                solver.flags(),
            )?;
        }
        if let Some(path) = &args.probe_out {
            self.write_probe(&place(path, step), step, &fields, averages.as_ref())?;
        }
        Ok(())
    }

    /// After a blow-up: the requested files keep their last good content,
    /// the blown-up fields go to separately named files for diagnosis.
    fn write_diagnosis(&self, solver: &mut dyn Solver) -> anyhow::Result<()> {
        let args = self.args;
        self.write_fields(solver, crate::io::diagnosis_path)?;
        if let Some(path) = &args.checkpoint {
            if path.exists() {
                eprintln!(
                    "kept {}, the last good checkpoint (a blown-up state cannot be resumed)",
                    path.display()
                );
            } else {
                eprintln!(
                    "no checkpoint written: no good state was saved before the blow-up (a blown-up state cannot be resumed)"
                );
            }
        }
        Ok(())
    }

    /// A `.pvti` and its pieces: each process writes its own (one piece in
    /// one process), rank 0 the collection.
    fn write_pieces(&self, solver: &mut dyn Solver, path: &Path) -> anyhow::Result<()> {
        let piece = match solver.piece()? {
            Some(piece) => piece,
            None => {
                let fields = solver.fields()?;
                let last = fields.size[2] - 1;
                Piece {
                    first_layer: 0,
                    averages: solver.averages()?,
                    flags: solver.flags().to_vec(),
                    fields,
                    extents: vec![[0, last]],
                }
            }
        };
        let own = vti::piece_path(path, ranks::rank());
        let layout = vti::write_at(
            &own,
            &piece.fields,
            piece.averages.as_ref(),
            &piece.flags,
            self.physical.as_ref(),
            piece.first_layer,
        )
        .with_context(|| format!("cannot write {}", own.display()))?;
        if ranks::is_root() {
            vti::write_pvti(path, &piece, &layout, self.physical.as_ref())
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!(
                "wrote {} ({} piece{} beside it)",
                path.display(),
                piece.extents.len(),
                if piece.extents.len() == 1 { "" } else { "s" }
            );
        }
        Ok(())
    }

    fn write_vti(
        &self,
        path: &Path,
        fields: &Fields,
        averages: Option<&Averages>,
        flags: &[u8],
    ) -> anyhow::Result<()> {
        vti::write(path, fields, averages, flags, self.physical.as_ref())
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
        Ok(())
    }

    fn write_probe(
        &self,
        path: &Path,
        step: u64,
        fields: &Fields,
        averages: Option<&Averages>,
    ) -> anyhow::Result<()> {
        let Some(line) = &self.args.probe else {
            return Ok(());
        };
        let means = averages.map(|a| line.sample(&a.mean_fields()));
        let csv = probe::to_csv(step, &line.sample(fields), means.as_deref());
        crate::io::write_atomically(path, |w| w.write_all(csv.as_bytes()))
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
        Ok(())
    }
}

fn has_extension(path: &Path, ext: &str) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

fn is_pvti(path: &Path) -> bool {
    has_extension(path, "pvti")
}

/// Mean and RMS of the force coefficients over the rows of the averaging
/// window (Welford, as the field averages).
#[derive(Default)]
struct ForceAverages {
    samples: u64,
    mean: Vec<f64>,
    m2: Vec<f64>,
}

impl ForceAverages {
    fn add(&mut self, coefficients: &[f64]) {
        self.samples += 1;
        self.mean.resize(coefficients.len(), 0.0);
        self.m2.resize(coefficients.len(), 0.0);
        for (k, &x) in coefficients.iter().enumerate() {
            welford(&mut self.mean[k], &mut self.m2[k], x, self.samples);
        }
    }

    /// The closing rows of the forces CSV: `mean,…` and `rms,…` (the RMS of
    /// each coefficient's fluctuation about its mean), and the same on stderr.
    fn write(&self, file: &mut GrowingFile, from: Option<u64>) -> anyhow::Result<()> {
        let Some(from) = from else {
            return Ok(());
        };
        if self.samples == 0 {
            eprintln!("no force coefficients averaged: the run ended before step {from}");
            return Ok(());
        }
        let row = |label: &str, values: Vec<f64>| {
            let mut row = label.to_string();
            for v in values {
                row.push_str(&format!(",{v:.6e}"));
            }
            row
        };
        let rms: Vec<f64> = self
            .m2
            .iter()
            .map(|s| (s / self.samples as f64).sqrt())
            .collect();
        let (mean_row, rms_row) = (row("mean", self.mean.clone()), row("rms", rms));
        file.write_line(&mean_row)?;
        file.write_line(&rms_row)?;
        eprintln!(
            "force coefficients from step {from}, {} rows: {mean_row}; {rms_row}",
            self.samples
        );
        Ok(())
    }
}

/// The receptors CSV's header: `step`, then per receptor and field its
/// concentration and dose (`c_NAME`, `dose_NAME`; `c2_NAME`, … for the
/// second field on).
fn receptor_header(receptors: &[(String, Vec<crate::solver::scalar::Reading>)]) -> String {
    let mut header = String::from("step");
    for (name, readings) in receptors {
        let name = name.replace([',', '"'], "_");
        for k in 0..readings.len() {
            let n = if k == 0 {
                String::new()
            } else {
                (k + 1).to_string()
            };
            header.push_str(&format!(",c{n}_{name},dose{n}_{name}"));
        }
    }
    header
}

fn receptor_row(t: u64, receptors: &[(String, Vec<crate::solver::scalar::Reading>)]) -> String {
    let mut row = t.to_string();
    for (_, readings) in receptors {
        for r in readings {
            row.push_str(&format!(",{:.6e},{:.6e}", r.concentration, r.dose));
        }
    }
    row
}

/// A `.pckpt` is saved in pieces, one per process; a `.ckpt` whole, gathered
/// on rank 0 under MPI.
fn save_checkpoint(solver: &mut dyn Solver, path: &Path) -> anyhow::Result<()> {
    if has_extension(path, "pckpt") {
        Ok(checkpoint::save_pieces(path, solver)?)
    } else {
        Ok(checkpoint::save_gathered(path, solver)?)
    }
}

/// Creates a CSV that grows row by row, on rank 0 alone.
fn growing_csv(path: &Path, header: &str) -> anyhow::Result<Option<GrowingFile>> {
    if !ranks::is_root() {
        return Ok(None);
    }
    let mut f =
        GrowingFile::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    f.write_line(header)?;
    Ok(Some(f))
}

fn install_interrupt() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    if let Err(e) = ctrlc::set_handler(move || f.store(true, Ordering::SeqCst)) {
        eprintln!("warning: Ctrl-C will not stop the run cleanly: {e}");
    }
    flag
}

/// How often a run without a terminal prints its progress.
const PLAIN_PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// The progress line's note on steadiness: the change so far against the
/// target, or that none has been measured yet.
fn change_note(change: f64, until_steady: Option<f64>) -> String {
    let now = if change.is_finite() {
        format!("{change:.2e}")
    } else {
        "not measured yet".into()
    };
    match until_steady {
        Some(tol) => format!("change {now} (steady below {tol:.0e})"),
        None => format!("change {now}"),
    }
}

pub fn run(args: RunArgs, tuning: &Tuning) -> anyhow::Result<i32> {
    Outputs::check(&args)?;
    if let Some(tol) = args.until_steady {
        if !(tol > 0.0 && tol.is_finite()) {
            bail!("--until-steady {tol}: the tolerance must be a positive number (e.g. 1e-6)");
        }
    }
    let mut scenario = Scenario::load(&args.scenario, &args.set)?;
    if let Some(method) = args.method {
        scenario.run.method = method;
    }
    for w in &scenario.warnings {
        eprintln!("warning: {w}");
    }
    if let Some(line) = &args.probe {
        line.check(scenario.size).map_err(anyhow::Error::msg)?;
    }
    let backend = args.solver.backend(tuning);
    let selected = select::build(&backend, &scenario, crate::system::available_memory())?;
    let mut solver = selected.solver;
    eprintln!("{}: {}", scenario.name, selected.reason);
    let obstacles = selected.geometry.obstacles;

    if let Some(path) = &args.resume {
        let step = if has_extension(path, "pckpt") {
            checkpoint::restore_pieces(path, solver.as_mut())?
        } else {
            checkpoint::restore(path, solver.as_mut())?
        };
        eprintln!("resumed from {} at step {step}", path.display());
    }

    if let Some(from) = args.average_from {
        let schedule = Schedule {
            from_step: from,
            every: args.average_every,
        };
        solver
            .start_averages(schedule)
            .context("cannot keep the time averages --average-from asks for")?;
        if from < solver.time_step() {
            eprintln!(
                "time averages start at step {} (a resumed run does not continue the averages of the run before it)",
                solver.time_step()
            );
        }
    }
    let average_from = args.average_from.map(|from| from.max(solver.time_step()));
    let mut force_sums = ForceAverages::default();

    // Steadiness stops a run early; the step count always caps it.
    let until_steady = args.until_steady.or(scenario.run.until_steady);
    let target = args.steps.unwrap_or(scenario.run.steps);
    let start_step = solver.time_step();
    if target < start_step {
        bail!(
            "--steps {target} is before the checkpoint's step {start_step}: --steps counts from the start of the simulation"
        );
    }

    let mut forces_file = match &args.forces {
        Some(path) => {
            let mut header = String::from("step");
            for o in &obstacles {
                let tag = o.name.replace([' ', '(', ')'], "");
                header.push_str(&format!(",cd_{tag},cl_{tag}"));
            }
            growing_csv(path, &header)?
        }
        None => None,
    };
    let mut receptors_file = match &args.receptors {
        Some(path) => {
            let names = solver.receptors();
            if names.is_empty() {
                bail!(
                    "--receptors {}: the scenario has no [[receptors]] (or no [[sources]]) to record",
                    path.display()
                );
            }
            growing_csv(path, &receptor_header(&names))?
        }
        None => None,
    };
    let u_ref = scenario.units.velocity_lattice;
    let drag_axis = scenario.forces.drag.index();
    let lift_axis = scenario.forces.lift.index();
    let physical = vti::Physical::of(&scenario.units);
    let mut series = match (&args.vti, args.vti_every) {
        (Some(path), Some(_)) => Some(vti::Series::new(path, physical)),
        _ => None,
    };
    let vti_every = args.vti_every.unwrap_or(u64::MAX);

    let interrupted = install_interrupt();
    // Without a terminal (a batch job, a pipe) the bar is not drawn: plain
    // progress lines say the same every few seconds instead.
    let plain_progress = !args.quiet && !std::io::stderr().is_terminal();
    let mut last_line: Option<Instant> = None;
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(target - start_step);
        b.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  ETA {eta}")
                .expect("static template"),
        );
        b
    };
    let cells = scenario.cells() as f64;
    let mut step_time = Duration::ZERO;
    let mut steps_done = 0u64;
    let mut last_change = f64::NAN;
    let outputs = Outputs {
        args: &args,
        physical,
    };
    let mut code = exit::OK;
    let checkpoint_every = args.checkpoint_every.unwrap_or(u64::MAX);
    let next_multiple = |t: u64, k: u64| {
        if k == u64::MAX {
            u64::MAX
        } else {
            (t / k + 1) * k
        }
    };

    while solver.time_step() < target {
        let t = solver.time_step();
        // Stop at the next multiple of --every, --checkpoint-every, --vti-every.
        let next = next_multiple(t, args.every)
            .min(next_multiple(t, checkpoint_every))
            .min(next_multiple(t, vti_every))
            .min(target);
        let began = Instant::now();
        solver.step(next - t)?;
        step_time += began.elapsed();
        steps_done += next - t;
        let t = next;

        let stats = solver.stats()?;
        if let Some(err) = stats.instability() {
            bar.abandon();
            if let Some(f) = forces_file.as_mut() {
                force_sums.write(f, average_from)?;
                f.finish()?;
            }
            outputs.write_diagnosis(solver.as_mut())?;
            eprintln!("error: {err}");
            return Ok(exit::UNSTABLE);
        }
        if args.forces.is_some() && (t % args.every == 0 || t == target) {
            // Every rank reduces the forces; rank 0 has the file.
            let forces = solver.obstacle_forces()?;
            if let Some(f) = forces_file.as_mut() {
                let mut row = format!("{t}");
                let mut coefficients = Vec::with_capacity(2 * obstacles.len());
                for (k, o) in obstacles.iter().enumerate() {
                    let force = forces[k + 1];
                    let q = 0.5 * u_ref * u_ref * o.frontal_area.max(1.0);
                    let (cd, cl) = (force[drag_axis] / q, force[lift_axis] / q);
                    row.push_str(&format!(",{cd:.6e},{cl:.6e}"));
                    coefficients.extend([cd, cl]);
                }
                f.write_line(&row)?;
                if average_from.is_some_and(|from| t >= from) {
                    force_sums.add(&coefficients);
                }
            }
        }
        if args.receptors.is_some() && (t % args.every == 0 || t == target) {
            let readings = solver.receptors();
            if let Some(f) = receptors_file.as_mut() {
                f.write_line(&receptor_row(t, &readings))?;
            }
        }
        if (until_steady.is_some() || !args.quiet) && t % args.every == 0 {
            if let Some(change) = solver.velocity_change()? {
                last_change = change;
            }
        }
        if t % checkpoint_every == 0 {
            if let Some(path) = &args.checkpoint {
                save_checkpoint(solver.as_mut(), path)?;
            }
        }
        if let Some(series) = series.as_mut() {
            if t % vti_every == 0 {
                let fields = solver.fields_on_root()?;
                let averages = solver.averages_on_root()?;
                if let Some(fields) = fields {
                    series
                        .write(t, &fields, averages.as_ref(), solver.flags())
                        .with_context(|| format!("cannot write {}", series.member(t).display()))?;
                }
            }
        }
        let secs = step_time.as_secs_f64().max(1e-9);
        let message = format!(
            "{:.1} steps/s  {:.2} MLUPS  {}",
            steps_done as f64 / secs,
            cells * steps_done as f64 / secs / 1e6,
            change_note(last_change, until_steady)
        );
        // The first line as soon as there is a change to show, then every
        // few seconds.
        let due = match last_line {
            None => last_change.is_finite(),
            Some(at) => at.elapsed() >= PLAIN_PROGRESS_EVERY,
        };
        if plain_progress && due {
            eprintln!("step {t}/{target}  {message}");
            last_line = Some(Instant::now());
        }
        bar.set_position(t - start_step);
        bar.set_message(message);
        if let Some(tol) = until_steady {
            if last_change < tol {
                bar.suspend(|| {
                    eprintln!(
                        "steady at step {t}: mean relative change per step {last_change:.3e} < {tol:e}"
                    )
                });
                break;
            }
        }
        // A signal may reach the ranks at different steps: they stop together.
        let stop = interrupted.load(Ordering::SeqCst);
        if ranks::world().map_or(stop, |w| w.any(stop)) {
            bar.suspend(|| eprintln!("interrupted at step {t}; writing outputs"));
            code = exit::INTERRUPTED;
            break;
        }
    }
    bar.finish_and_clear();
    if let Some(f) = receptors_file.as_mut() {
        f.finish()?;
    }
    for (name, readings) in solver.receptors() {
        let values: Vec<String> = readings
            .iter()
            .map(|r| format!("c {:.4e}, dose {:.4e}", r.concentration, r.dose))
            .collect();
        eprintln!("receptor {name}: {}", values.join("; "));
    }
    if let Some(f) = forces_file.as_mut() {
        force_sums.write(f, average_from)?;
        f.finish()?;
    }
    if let (Some(tol), true) = (until_steady, code == exit::OK) {
        if !(last_change < tol) {
            eprintln!(
                "not steady after {target} steps (the cap, run.steps or --steps): last change {} against {tol:e}; raise the cap to run on",
                change_note(last_change, None).trim_start_matches("change ")
            );
        }
    }
    let secs = step_time.as_secs_f64().max(1e-9);
    let stats = solver.stats()?;
    eprintln!(
        "step {}: {} steps in {:.2} s, {:.2} MLUPS; mass {:.9e}, max speed {:.4} at {:?}, mean velocity ({:.3e}, {:.3e}, {:.3e})",
        solver.time_step(),
        steps_done,
        secs,
        cells * steps_done as f64 / secs / 1e6,
        stats.mass,
        stats.max_speed,
        stats.max_speed_cell,
        stats.mean_velocity[0],
        stats.mean_velocity[1],
        stats.mean_velocity[2]
    );
    if let Some(note) = solver.exchange_note() {
        eprintln!("{note}");
    }
    outputs.write(solver.as_mut())?;
    Ok(code)
}
