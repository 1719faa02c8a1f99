//! `flowscope run`: a scenario headless, with progress, outputs and checkpoints.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};

use super::{exit, SolverArgs};
use crate::io::probe::ProbeLine;
use crate::io::{checkpoint, probe, vti};
use crate::scenario::Scenario;
use crate::session::select;
use crate::solver::Solver;
use crate::system::Tuning;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Scenario file (see assets/scenarios/).
    pub scenario: PathBuf,
    #[command(flatten)]
    pub solver: SolverArgs,
    /// Run until this time step (a resumed run counts from step 0 too).
    /// Default: run.steps of the scenario, unless --until-steady is given.
    #[arg(long)]
    pub steps: Option<u64>,
    /// Stop when the mean relative change of the velocity per step drops below
    /// TOL (checked every --every steps); --steps then caps the run.
    #[arg(long, value_name = "TOL")]
    pub until_steady: Option<f64>,
    /// Override a scenario key, e.g. --set fluid.reynolds=400 --set domain.size=[64,64,4].
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Write the final fields as VTK image data (.vti, opens in ParaView).
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
    /// Interval in steps for forces, stability and steadiness checks.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub every: u64,
    /// Save the full solver state to FILE at the end (and every --checkpoint-every steps).
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
}

impl Outputs<'_> {
    fn write(&self, solver: &mut dyn Solver) -> anyhow::Result<()> {
        let args = self.args;
        let need_fields = args.vti.is_some() || args.probe.is_some();
        if !need_fields && args.checkpoint.is_none() {
            return Ok(());
        }
        if need_fields {
            let fields = solver.fields()?;
            if let Some(path) = &args.vti {
                vti::write(path, &fields, solver.flags())
                    .with_context(|| format!("cannot write {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
            if let (Some(line), Some(path)) = (&args.probe, &args.probe_out) {
                let csv = probe::to_csv(solver.time_step(), &line.sample(&fields));
                crate::io::write_atomically(path, |w| w.write_all(csv.as_bytes()))
                    .with_context(|| format!("cannot write {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
        }
        if let Some(path) = &args.checkpoint {
            save_checkpoint(solver, path)?;
            eprintln!("wrote {} (step {})", path.display(), solver.time_step());
        }
        Ok(())
    }
}

fn save_checkpoint(solver: &mut dyn Solver, path: &Path) -> anyhow::Result<()> {
    let ckpt = checkpoint::Checkpoint {
        size: solver.grid().size,
        step: solver.time_step(),
        flags_hash: checkpoint::flags_hash(solver.flags()),
        populations: solver.populations()?,
    };
    checkpoint::save(path, &ckpt)?;
    Ok(())
}

fn install_interrupt() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    if let Err(e) = ctrlc::set_handler(move || f.store(true, Ordering::SeqCst)) {
        eprintln!("warning: Ctrl-C will not stop the run cleanly: {e}");
    }
    flag
}

pub fn run(args: RunArgs, tuning: &Tuning) -> anyhow::Result<i32> {
    let scenario = Scenario::load(&args.scenario, &args.set)?;
    for w in &scenario.warnings {
        eprintln!("warning: {w}");
    }
    if let Some(line) = &args.probe {
        line.check(scenario.size).map_err(anyhow::Error::msg)?;
    }
    if let Some(tol) = args.until_steady {
        if !(tol > 0.0) {
            bail!("--until-steady {tol}: the tolerance must be positive (e.g. 1e-6)");
        }
    }
    let backend = args.solver.backend(tuning);
    let selected = select::build(&backend, &scenario, crate::system::available_memory())?;
    let mut solver = selected.solver;
    eprintln!("{}: {}", scenario.name, selected.reason);
    let obstacles = selected.geometry.obstacles;

    if let Some(path) = &args.resume {
        let ckpt = checkpoint::load(path, scenario.size, solver.flags())?;
        solver.set_populations(ckpt.step, &ckpt.populations)?;
        eprintln!("resumed from {} at step {}", path.display(), ckpt.step);
    }

    let until_steady = args.until_steady.or(scenario.run.until_steady);
    let target = match (args.steps, until_steady) {
        (Some(n), _) => n,
        (None, Some(_)) => u64::MAX,
        (None, None) => scenario.run.steps,
    };
    let start_step = solver.time_step();
    if target < start_step {
        bail!(
            "--steps {target} is before the checkpoint's step {start_step}: --steps counts from the start of the simulation"
        );
    }

    let mut forces_file = match &args.forces {
        Some(path) => {
            let mut f = std::io::BufWriter::new(
                std::fs::File::create(path)
                    .with_context(|| format!("cannot create {}", path.display()))?,
            );
            let mut header = String::from("step");
            for o in &obstacles {
                let tag = o.name.replace([' ', '(', ')'], "");
                header.push_str(&format!(",cd_{tag},cl_{tag}"));
            }
            writeln!(f, "{header}")?;
            Some(f)
        }
        None => None,
    };
    let u_ref = scenario.units.velocity_lattice;
    let drag_axis = scenario.forces.drag.index();
    let lift_axis = scenario.forces.lift.index();

    let interrupted = install_interrupt();
    let bar = if args.quiet || target == u64::MAX {
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
    let outputs = Outputs { args: &args };
    let mut code = exit::OK;
    let checkpoint_every = args.checkpoint_every.unwrap_or(u64::MAX);

    while solver.time_step() < target {
        let t = solver.time_step();
        // Stop at the next multiple of --every (and of --checkpoint-every).
        let mut next = (t / args.every + 1) * args.every;
        if checkpoint_every != u64::MAX {
            next = next.min((t / checkpoint_every + 1) * checkpoint_every);
        }
        let next = next.min(target);
        let began = Instant::now();
        solver.step(next - t)?;
        step_time += began.elapsed();
        steps_done += next - t;
        let t = next;

        let stats = solver.stats()?;
        if let Some(err) = stats.instability() {
            bar.abandon();
            if let Some(f) = forces_file.as_mut() {
                f.flush()?;
            }
            outputs.write(solver.as_mut())?;
            eprintln!("error: {err}");
            return Ok(exit::UNSTABLE);
        }
        if let Some(f) = forces_file.as_mut() {
            if t % args.every == 0 || t == target {
                let forces = solver.obstacle_forces()?;
                let mut row = format!("{t}");
                for (k, o) in obstacles.iter().enumerate() {
                    let force = forces[k + 1];
                    let q = 0.5 * u_ref * u_ref * o.frontal_area.max(1.0);
                    row.push_str(&format!(
                        ",{:.6e},{:.6e}",
                        force[drag_axis] / q,
                        force[lift_axis] / q
                    ));
                }
                writeln!(f, "{row}")?;
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
        let secs = step_time.as_secs_f64().max(1e-9);
        bar.set_position(t - start_step);
        bar.set_message(format!(
            "{:.1} steps/s  {:.2} MLUPS  change {:.2e}",
            steps_done as f64 / secs,
            cells * steps_done as f64 / secs / 1e6,
            last_change
        ));
        if let Some(tol) = until_steady {
            if last_change < tol {
                eprintln!(
                    "steady at step {t}: mean relative change per step {last_change:.3e} < {tol:e}"
                );
                break;
            }
        }
        if interrupted.load(Ordering::SeqCst) {
            eprintln!("interrupted at step {t}; writing outputs");
            code = exit::INTERRUPTED;
            break;
        }
    }
    bar.finish_and_clear();
    if let Some(f) = forces_file.as_mut() {
        f.flush()?;
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
    outputs.write(solver.as_mut())?;
    Ok(code)
}
