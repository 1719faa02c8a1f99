//! The solver thread: owns the solver, obeys [`Command`]s, and publishes the
//! newest field frame. It never waits for the UI, and the UI never waits for it:
//! a frame not yet taken is replaced by the next one.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::scenario::Scenario;
use crate::solver::display::{self, SharedLease};
use crate::solver::select::{self, Backend};
use crate::solver::{Fields, Solver};

/// What the UI asks of the solver thread.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    Run,
    Pause,
    /// Advance this many steps, then pause.
    Step(u64),
    Reset,
    /// Change the Reynolds number live (τ follows; the lattice speed stays).
    SetReynolds(f64),
    /// Change the reference speed (inlets, lids) live, in lattice units.
    SetVelocity(f64),
    Load(PathBuf),
    SaveCheckpoint(PathBuf),
    /// Continue from a checkpoint of the current scenario.
    LoadCheckpoint(PathBuf),
    ExportVti(PathBuf),
    /// Show at most this many cells per axis of a cube (the display limit):
    /// larger grids are averaged over blocks before they are copied.
    SetDisplayLimit(usize),
    /// The window's graphics device (its UUID) can import display frames
    /// from GPU memory: the solver also writes them there when it runs on
    /// the same GPU ([`Solver::share_display`]); `None`: it cannot after all.
    ShareDisplay(Option<[u8; 16]>),
    Quit,
}

/// One published state of the flow, on the display grid.
#[derive(Clone, Debug)]
pub struct Frame {
    pub step: u64,
    pub fields: Arc<Fields>,
    pub flags: Arc<Vec<u8>>,
    /// Changes when the geometry (scenario) or the display grid changes.
    pub geometry: u64,
    /// Cells of the solver's grid per display cell along each axis.
    pub stride: usize,
    /// The same fields in GPU memory the window can import and copy from
    /// (it lets go of the lease once its copy is done). Such frames come
    /// with host fields ([`Fields::has_values`]) about every
    /// [`SAMPLE_EVERY`] (for the probe), and when paused or stepping.
    pub shared: Option<Arc<SharedLease>>,
}

/// What the worker reports besides frames.
#[derive(Clone, Debug, Default)]
pub struct Status {
    pub scenario: String,
    pub solver: String,
    pub running: bool,
    pub step: u64,
    pub mlups: f64,
    pub reynolds: f64,
    pub velocity: f64,
    pub tau: f64,
    pub max_speed: f32,
    /// Set when the run stopped itself (instability) or a command failed.
    pub message: Option<String>,
    pub size: [usize; 3],
    /// Cells of the solver's grid per display cell along each axis.
    pub stride: usize,
    pub history: History,
    /// Where the running loop's time went (for `bench --stream`).
    pub timing: LoopTiming,
}

/// Seconds the running loop spent in each part, summed over its chunks.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoopTiming {
    pub chunks: u64,
    pub steps: u64,
    /// From queuing a chunk until the GPU finished it.
    pub stepping: f64,
    /// Of that, handing over the last frame (host work the steps overlap).
    pub delivering: f64,
    /// Statistics and time series, with the GPU otherwise idle.
    pub sampling: f64,
    /// The rest of the loop: starting the next frame, commands, status.
    pub other: f64,
}

/// Time series for the plots: (step, value) pairs, the newest [`HISTORY`].
#[derive(Clone, Debug, Default)]
pub struct History {
    /// log10 of the mean relative change of the velocity per step.
    pub change: Vec<[f64; 2]>,
    /// Drag and lift coefficients of the first obstacle.
    pub drag: Vec<[f64; 2]>,
    pub lift: Vec<[f64; 2]>,
    pub obstacle: Option<String>,
    /// Shedding Strouhal number f L / U from the lift signal, once it oscillates.
    pub strouhal: Option<f64>,
}

/// Samples kept per series.
pub const HISTORY: usize = 2000;

fn push(series: &mut Vec<[f64; 2]>, point: [f64; 2]) {
    if series.len() >= HISTORY {
        series.drain(..HISTORY / 4);
    }
    series.push(point);
}

/// Frequency (per step) of an oscillating signal from its upward mean crossings
/// over the newest half of the samples; `None` until it has crossed at least 4
/// times with regular periods.
pub fn oscillation_frequency(series: &[[f64; 2]]) -> Option<f64> {
    let recent = &series[series.len() / 2..];
    if recent.len() < 8 {
        return None;
    }
    let mean = recent.iter().map(|p| p[1]).sum::<f64>() / recent.len() as f64;
    let amplitude = recent
        .iter()
        .map(|p| (p[1] - mean).abs())
        .fold(0.0, f64::max);
    if !(amplitude > 1e-6) {
        return None;
    }
    let mut crossings = Vec::new();
    for w in recent.windows(2) {
        let (a, b) = (w[0][1] - mean, w[1][1] - mean);
        if a < 0.0 && b >= 0.0 {
            // Upward crossing, interpolated in time.
            crossings.push(w[0][0] + (w[1][0] - w[0][0]) * (-a / (b - a)));
        }
    }
    if crossings.len() < 4 {
        return None;
    }
    // A shedding signal repeats: its periods agree within 20%; start-up
    // transients and noise do not.
    let periods: Vec<f64> = crossings.windows(2).map(|w| w[1] - w[0]).collect();
    let mean_period = periods.iter().sum::<f64>() / periods.len() as f64;
    if periods
        .iter()
        .any(|p| (p - mean_period).abs() > 0.2 * mean_period)
    {
        return None;
    }
    Some(1.0 / mean_period)
}

/// Shared between the worker and the UI.
#[derive(Default)]
pub struct Mailbox {
    pub frame: Mutex<Option<Frame>>,
    pub status: Mutex<Status>,
}

/// Handle the UI keeps.
pub struct Worker {
    pub commands: Sender<Command>,
    pub mailbox: Arc<Mailbox>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    /// Starts the solver thread on a scenario (loaded there, so that the CUDA
    /// context belongs to that thread). `wake` is called after each publish.
    /// `display_limit`: see [`Command::SetDisplayLimit`].
    pub fn start(
        scenario: PathBuf,
        backend: Backend,
        display_limit: usize,
        wake: impl Fn() + Send + 'static,
    ) -> Worker {
        let (tx, rx) = std::sync::mpsc::channel();
        let mailbox = Arc::new(Mailbox::default());
        let mb = mailbox.clone();
        let thread = std::thread::Builder::new()
            .name("solver".into())
            .spawn(move || run(scenario, backend, display_limit, rx, mb, wake))
            .ok();
        if thread.is_none() {
            mailbox
                .status
                .lock()
                .map(|mut s| s.message = Some("could not start the solver thread".into()))
                .ok();
        }
        Worker {
            commands: tx,
            mailbox,
            thread,
        }
    }

    /// Sends a command; a stopped worker has said why in its status.
    pub fn send(&self, command: Command) {
        if self.commands.send(command).is_err() {
            if let Ok(mut s) = self.mailbox.status.lock() {
                s.message
                    .get_or_insert_with(|| "the solver thread has stopped".into());
            }
        }
    }

    pub fn take_frame(&self) -> Option<Frame> {
        self.mailbox.frame.lock().ok().and_then(|mut f| f.take())
    }

    pub fn status(&self) -> Status {
        self.mailbox
            .status
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if self.commands.send(Command::Quit).is_ok() {
            if let Some(t) = self.thread.take() {
                if t.join().is_err() {
                    eprintln!("the solver thread panicked while stopping");
                }
            }
        }
    }
}

struct State {
    scenario: Scenario,
    solver: Box<dyn Solver>,
    geometry: u64,
    /// Cells of the grid per display cell, and the display grid's cell flags,
    /// shared by every frame (they change with the geometry and the limit).
    stride: usize,
    flags: Arc<Vec<u8>>,
    /// A display frame may be copying (see [`Solver::begin_display`]).
    copying: bool,
    /// The step of the newest frame published.
    shown: Option<u64>,
    /// When the last display frame with a host copy was started.
    host_copied: Instant,
    /// Fields of published frames, reused once the UI has let go of them: a
    /// fresh vector per frame would cost page faults over all of it.
    pool: Vec<Arc<Fields>>,
    /// (name, frontal area) of the first obstacle, for its coefficients.
    obstacle: Option<(String, f64)>,
    history: History,
}

fn load(
    path: &std::path::Path,
    overrides: &[String],
    backend: Backend,
    geometry: u64,
    limit: usize,
) -> Result<State, String> {
    let scenario = Scenario::load(path, overrides).map_err(|e| e.to_string())?;
    let selected = select::build(
        backend.choice,
        &scenario,
        backend.precision,
        backend.gpus,
        crate::cli::available_memory(),
    )
    .map_err(|e| e.to_string())?;
    let obstacle = scenario
        .voxelize()
        .obstacles
        .first()
        .map(|o| (o.name.clone(), o.frontal_area.max(1.0)));
    let history = History {
        obstacle: obstacle.as_ref().map(|o| o.0.clone()),
        ..Default::default()
    };
    let mut state = State {
        scenario,
        solver: selected.solver,
        geometry,
        stride: 0,
        flags: Arc::default(),
        copying: false,
        shown: None,
        host_copied: Instant::now(),
        pool: Vec::new(),
        obstacle,
        history,
    };
    set_display_limit(&mut state, limit);
    Ok(state)
}

/// Sets the display grid for `limit`; a new grid counts as a new geometry.
fn set_display_limit(state: &mut State, limit: usize) {
    let size = state.solver.grid().size;
    let stride = display::stride_for(size, limit);
    if stride != state.stride {
        state.stride = stride;
        state.flags = Arc::new(display::downsample_flags(
            state.solver.flags(),
            size,
            stride,
        ));
        state.geometry += 1;
    }
}

/// Publishes the current step now (after a reset, a load, a new limit, or
/// for solvers without display frames of their own).
fn publish(state: &mut State, mailbox: &Mailbox) -> Result<(), String> {
    let fields = state.solver.fields().map_err(|e| e.to_string())?;
    let step = state.solver.time_step();
    let fields = display::downsample_fields(fields, state.stride);
    if !fields.is_stable() {
        return Err(unstable(state, step));
    }
    publish_fields(state, step, fields, None, mailbox);
    Ok(())
}

/// Why a frame that shows a blow-up was not published.
fn unstable(state: &mut State, step: u64) -> String {
    // The solver's statistics say where (the blow-up only grows).
    match state.solver.stats().ok().and_then(|s| s.instability()) {
        Some(e) => format!("paused: {e}"),
        None => format!(
            "paused: the fields of step {step} hold NaN or speeds above {}; lower the Reynolds number or the lattice speed",
            crate::solver::MAX_STABLE_SPEED
        ),
    }
}

/// Frames the pool keeps: the one on screen, the one in the mailbox, spares.
const POOL: usize = 4;

/// Fields to copy a frame into: a pooled one nobody else holds, if any.
fn spare_fields(state: &mut State) -> Fields {
    match state.pool.iter().position(|f| Arc::strong_count(f) == 1) {
        Some(k) => Arc::try_unwrap(state.pool.remove(k)).unwrap_or_default(),
        None => Fields::default(),
    }
}

fn publish_fields(
    state: &mut State,
    step: u64,
    fields: Fields,
    shared: Option<SharedLease>,
    mailbox: &Mailbox,
) {
    state.shown = Some(step);
    let fields = Arc::new(fields);
    state.pool.push(fields.clone());
    if state.pool.len() > POOL {
        state.pool.remove(0);
    }
    let frame = Frame {
        step,
        fields,
        flags: state.flags.clone(),
        geometry: state.geometry,
        stride: state.stride,
        shared: shared.map(Arc::new),
    };
    if let Ok(mut slot) = mailbox.frame.lock() {
        *slot = Some(frame);
    }
}

/// Starts the display frame of the current step: copied while the solver
/// steps on where it can, made here otherwise.
fn begin_frame(state: &mut State, mailbox: &Mailbox, host: bool) -> Result<(), String> {
    if host {
        state.host_copied = Instant::now();
    }
    if state
        .solver
        .begin_display(state.stride, host)
        .map_err(|e| e.to_string())?
    {
        state.copying = true;
        Ok(())
    } else {
        publish(state, mailbox)
    }
}

/// Publishes the display frame under way once its copy is done. A frame that
/// shows a blow-up is not published: the error says why, and the last good
/// frame stays on screen.
fn deliver(state: &mut State, mailbox: &Mailbox) -> Result<(), String> {
    if !state.copying {
        return Ok(());
    }
    state.copying = false;
    let mut fields = spare_fields(state);
    match state.solver.take_display(&mut fields) {
        Ok(Some(taken)) if taken.stable => {
            publish_fields(state, taken.step, fields, taken.shared, mailbox);
            Ok(())
        }
        Ok(Some(taken)) => Err(unstable(state, taken.step)),
        Ok(None) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Publishes the current step unless it is already shown.
fn show_now(state: &mut State, mailbox: &Mailbox) -> Result<(), String> {
    // Frames under way first: they free their slots.
    deliver(state, mailbox)?;
    if state.shown == Some(state.solver.time_step()) {
        return Ok(());
    }
    begin_frame(state, mailbox, true)?;
    deliver(state, mailbox)
}

/// How often (at most) the time series and the solver's statistics are
/// sampled while it runs: every display frame would cost the solver a step's
/// worth of work.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// The length of a chunk of steps the worker aims at: a field frame after
/// each, though the window's share of the GPU and the frames it has not taken
/// yet leave about one chunk in ten without one.
const FRAME_SECONDS: f64 = 0.038;

fn run(
    path: PathBuf,
    backend: Backend,
    mut limit: usize,
    rx: Receiver<Command>,
    mailbox: Arc<Mailbox>,
    wake: impl Fn(),
) {
    let set_message = |m: String| {
        if let Ok(mut s) = mailbox.status.lock() {
            s.message = Some(m);
        }
    };
    let mut share = None;
    let mut state = match load(&path, &[], backend, 1, limit) {
        Ok(s) => s,
        Err(e) => {
            set_message(e);
            wake();
            // Wait for a Load or Quit.
            loop {
                match rx.recv() {
                    Ok(Command::Load(p)) => match load(&p, &[], backend, 1, limit) {
                        Ok(s) => break s,
                        Err(e) => {
                            set_message(e);
                            wake();
                        }
                    },
                    Ok(Command::ShareDisplay(device)) => share = device,
                    Ok(Command::Quit) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        }
    };
    state.solver.share_display(share);
    let mut overrides: Vec<String> = Vec::new();
    let mut running = true;
    let mut pending_steps = 0u64;
    let mut chunk = 2u64;
    let mut mlups = 0.0f64;
    let mut last_sample = Instant::now();
    let mut sample_every = SAMPLE_EVERY;
    let mut timing = LoopTiming::default();
    let mut looped = Instant::now();
    if let Err(e) = publish(&mut state, &mailbox) {
        set_message(e);
    }
    loop {
        // Commands first; block only while paused with nothing to do.
        let command = if running || pending_steps > 0 || state.copying {
            match rx.try_recv() {
                Ok(c) => Some(c),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => return,
            }
        } else {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(c) => Some(c),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
                Err(_) => return,
            }
        };
        if let Some(command) = command {
            let result: Result<(), String> = match command {
                Command::Run => {
                    running = true;
                    Ok(())
                }
                Command::Pause => {
                    running = false;
                    show_now(&mut state, &mailbox)
                }
                Command::Step(n) => {
                    running = false;
                    pending_steps += n;
                    Ok(())
                }
                Command::Reset => state
                    .solver
                    .reset()
                    .map_err(|e| e.to_string())
                    .and_then(|_| publish(&mut state, &mailbox)),
                Command::SetReynolds(re) | Command::SetVelocity(re)
                    if !(re > 0.0 && re.is_finite()) =>
                {
                    Err(format!("{re} is not a positive number"))
                }
                Command::SetReynolds(re) => {
                    overrides.retain(|o| !o.starts_with("fluid.reynolds="));
                    overrides.push(format!("fluid.reynolds={re}"));
                    retune(&mut state, &overrides)
                }
                Command::SetVelocity(u) => {
                    overrides.retain(|o| {
                        !o.starts_with("fluid.velocity=") && !o.starts_with("fluid.mach=")
                    });
                    overrides.push(format!("fluid.velocity={u}"));
                    retune(&mut state, &overrides)
                }
                Command::Load(p) => match load(&p, &[], backend, state.geometry + 1, limit) {
                    Ok(s) => {
                        state = s;
                        state.solver.share_display(share);
                        overrides.clear();
                        running = true;
                        publish(&mut state, &mailbox)
                    }
                    Err(e) => Err(e),
                },
                Command::SaveCheckpoint(p) => save_checkpoint(&mut state, &p),
                Command::LoadCheckpoint(p) => {
                    crate::io::checkpoint::load(&p, state.scenario.size, state.solver.flags())
                        .map_err(|e| e.to_string())
                        .and_then(|c| {
                            state
                                .solver
                                .set_populations(c.step, &c.populations)
                                .map_err(|e| e.to_string())
                        })
                        .and_then(|_| {
                            // The steadiness criterion starts over from here.
                            state.solver.velocity_change().map_err(|e| e.to_string())?;
                            publish(&mut state, &mailbox)
                        })
                }
                Command::ExportVti(p) => {
                    state
                        .solver
                        .fields()
                        .map_err(|e| e.to_string())
                        .and_then(|f| {
                            crate::io::vti::write(&p, &f, state.solver.flags())
                                .map_err(|e| format!("cannot write {}: {e}", p.display()))
                        })
                }
                Command::SetDisplayLimit(0) => {
                    Err("the display limit must be at least 1 cell".into())
                }
                Command::SetDisplayLimit(l) => {
                    limit = l;
                    let stride = state.stride;
                    set_display_limit(&mut state, limit);
                    if state.stride != stride {
                        // Frames under way are on the old grid.
                        deliver(&mut state, &mailbox).and_then(|_| publish(&mut state, &mailbox))
                    } else {
                        Ok(())
                    }
                }
                Command::ShareDisplay(device) => {
                    share = device;
                    // Frames under way keep their host copies.
                    deliver(&mut state, &mailbox).map(|_| state.solver.share_display(device))
                }
                Command::Quit => return,
            };
            match result {
                Ok(()) => {
                    if let Ok(mut s) = mailbox.status.lock() {
                        s.message = None;
                    }
                }
                Err(e) => set_message(e),
            }
        }
        if running || pending_steps > 0 {
            // Running chunks end on even steps, where the time series are
            // sampled: near τ = ½ populations flip between the two AA layouts'
            // steps, and so would the forces.
            let n = if running {
                chunk + state.solver.time_step() % 2
            } else {
                pending_steps.min(chunk)
            };
            let began = Instant::now();
            timing.other += began.duration_since(looped).as_secs_f64();
            let overlapped = state.copying;
            let mut result = state.solver.enqueue(n).map_err(|e| e.to_string());
            // While the GPU steps: hand over the frame begun after the last
            // chunk, waiting here for its copy (which overlaps these steps).
            if result.is_ok() {
                result = deliver(&mut state, &mailbox);
            }
            let delivered = Instant::now();
            result = result.and_then(|_| state.solver.finish().map_err(|e| e.to_string()));
            let secs = began.elapsed().as_secs_f64();
            // How long the steps outlasted the host's work on the last frame.
            let waited = delivered.elapsed().as_secs_f64();
            looped = Instant::now();
            if running {
                timing.chunks += 1;
                timing.steps += n;
                timing.stepping += secs;
                timing.delivering += delivered.duration_since(began).as_secs_f64();
            }
            pending_steps = pending_steps.saturating_sub(n);
            if let Err(e) = result {
                running = false;
                pending_steps = 0;
                set_message(e);
                continue;
            }
            mlups = state.scenario.cells() as f64 * n as f64 / secs.max(1e-9) / 1e6;
            // About 26 chunks and 22 frames of fields per second (each costs the GPU some
            // work: fewer would be cheaper, but 20 is what looks live), with
            // chunks of steps that outlast the host's work on a frame (else
            // the GPU idles).
            let host_bound = overlapped && waited < 0.1 * secs;
            let mut scale = (FRAME_SECONDS / secs.max(1e-4)).clamp(0.5, 2.0);
            if host_bound && secs < 0.1 {
                scale = scale.max(1.25);
            }
            // Even, so that running chunks end on even steps.
            chunk = (((chunk as f64 * scale / 2.0).round() as u64) * 2).clamp(2, 8192);
            let mut stable = true;
            if !running || last_sample.elapsed() >= sample_every {
                last_sample = Instant::now();
                record(&mut state);
                let stats = state.solver.stats();
                // Sampling takes the GPU from the solver (at 512³ about 8 ms
                // a time): at most ~2% of its time, however large the grid.
                sample_every = SAMPLE_EVERY.max(last_sample.elapsed() * 50);
                timing.sampling += last_sample.elapsed().as_secs_f64();
                match stats {
                    Ok(stats) => {
                        if let Some(e) = stats.instability() {
                            // Keep the last good frame on screen; say why it stopped.
                            stable = false;
                            running = false;
                            pending_steps = 0;
                            set_message(format!("paused: {e}"));
                        }
                        if let Ok(mut s) = mailbox.status.lock() {
                            s.max_speed = stats.max_speed;
                        }
                    }
                    Err(e) => set_message(e.to_string()),
                }
            }
            // While it runs, a frame the UI has not taken yet is not worth
            // replacing; a single step always shows.
            let untaken = mailbox.frame.lock().is_ok_and(|f| f.is_some());
            if stable && (!running || !untaken) {
                // Host copies of shared frames only as often as the probe
                // is sampled.
                let host = !running || state.host_copied.elapsed() >= SAMPLE_EVERY;
                if let Err(e) = begin_frame(&mut state, &mailbox, host) {
                    running = false;
                    pending_steps = 0;
                    set_message(e);
                }
            }
        } else if let Err(e) = deliver(&mut state, &mailbox) {
            // Stopped: the last frame under way is the one to show.
            set_message(e);
        }
        if let Ok(mut s) = mailbox.status.lock() {
            s.scenario = state.scenario.name.clone();
            s.solver = state.solver.describe();
            s.running = running;
            s.step = state.solver.time_step();
            s.mlups = mlups;
            s.reynolds = state.scenario.units.reynolds;
            s.velocity = state.scenario.units.velocity_lattice;
            s.tau = state.scenario.units.tau;
            s.size = state.scenario.size;
            s.stride = state.stride;
            s.history = state.history.clone();
            s.timing = timing;
        }
        wake();
    }
}

/// Adds the steadiness criterion and the first obstacle's coefficients to the
/// time series.
fn record(state: &mut State) {
    let step = state.solver.time_step();
    if !step.is_multiple_of(2) {
        return;
    }
    let t = step as f64;
    // The solver computes it where its fields are (on the GPU for CUDA).
    if let Ok(Some(change)) = state.solver.velocity_change() {
        if change > 0.0 && change.is_finite() {
            push(&mut state.history.change, [t, change.log10()]);
        }
    }
    if let Some((_, area)) = &state.obstacle {
        if let Ok(forces) = state.solver.obstacle_forces() {
            let u = state.scenario.units.velocity_lattice;
            let q = 0.5 * u * u * area;
            let f = forces[1];
            let (d, l) = (
                state.scenario.forces.drag.index(),
                state.scenario.forces.lift.index(),
            );
            push(&mut state.history.drag, [t, f[d] / q]);
            push(&mut state.history.lift, [t, f[l] / q]);
            state.history.strouhal = oscillation_frequency(&state.history.lift).map(|f| {
                f * state.scenario.units.length_cells / state.scenario.units.velocity_lattice
            });
        }
    }
}

/// Applies changed fluid numbers to the running solver (same geometry).
fn retune(state: &mut State, overrides: &[String]) -> Result<(), String> {
    let scenario = Scenario::load(&state.scenario.path, overrides).map_err(|e| e.to_string())?;
    let voxels = scenario.voxelize();
    let params = scenario.params(&voxels);
    state.solver.set_params(params).map_err(|e| e.to_string())?;
    state.scenario = scenario;
    Ok(())
}

fn save_checkpoint(state: &mut State, path: &std::path::Path) -> Result<(), String> {
    let ckpt = crate::io::checkpoint::Checkpoint {
        size: state.solver.grid().size,
        step: state.solver.time_step(),
        flags_hash: crate::io::checkpoint::flags_hash(state.solver.flags()),
        populations: state.solver.populations().map_err(|e| e.to_string())?,
    };
    crate::io::checkpoint::save(path, &ckpt).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solver::select::{Choice, Gpus};
    use crate::solver::Precision;

    #[test]
    fn oscillation_frequency_of_a_sampled_sine() {
        let period = 317.0;
        let series: Vec<[f64; 2]> = (0..3000)
            .map(|k| {
                let t = k as f64 * 7.0;
                [
                    t,
                    0.3 + 0.05 * (2.0 * std::f64::consts::PI * t / period).sin(),
                ]
            })
            .collect();
        let f = oscillation_frequency(&series).unwrap();
        assert!((f * period - 1.0).abs() < 1e-3, "{}", 1.0 / f);
        let flat: Vec<[f64; 2]> = (0..100).map(|k| [k as f64, 1.0]).collect();
        assert_eq!(oscillation_frequency(&flat), None);
        // A chirp's periods disagree: no frequency.
        let chirp: Vec<[f64; 2]> = (0..3000)
            .map(|k| [k as f64, (k as f64 * k as f64 * 4e-5).sin()])
            .collect();
        assert_eq!(oscillation_frequency(&chirp), None);
    }

    #[test]
    fn a_blow_up_pauses_the_run_with_the_cause_and_keeps_the_last_good_frame() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let overrides = [
            "domain.size=[64,32,4]",
            "obstacles.0.center=[16,15.5,0]",
            "fluid.reynolds=65000",
            "fluid.velocity=0.17",
        ]
        .map(String::from);
        let scenario =
            Scenario::load(&root.join("assets/scenarios/cylinder.toml"), &overrides).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blow-up.toml");
        std::fs::write(&path, &scenario.source).unwrap();
        let worker = cpu_worker(path);
        // Take frames as the window does until the run stops itself.
        let mut shown = Vec::new();
        let m = loop {
            shown.extend(worker.take_frame());
            if let Some(m) = worker.status().message {
                break m;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        assert!(
            m.starts_with("paused: the simulation became unstable"),
            "{m}"
        );
        assert!(m.contains("Reynolds number"), "{m}");
        assert!(!wait_for(&worker, |s| !s.running).running);
        shown.extend(worker.take_frame());
        assert!(shown.len() > 2 && shown.iter().all(|f| f.fields.is_stable()));
        let last = shown.last().unwrap().step;
        assert!(last > 0 && last < worker.status().step, "{last}");
    }

    /// A worker on the CPU solver at the default display limit.
    fn cpu_worker(scenario: PathBuf) -> Worker {
        let backend = Backend {
            choice: Choice::Cpu,
            precision: Precision::Fp32,
            gpus: Gpus::One,
        };
        Worker::start(scenario, backend, display::DEFAULT_LIMIT, || {})
    }

    fn wait_for(worker: &Worker, what: impl Fn(&Status) -> bool) -> Status {
        for _ in 0..600 {
            let s = worker.status();
            if what(&s) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("timed out; status {:?}", worker.status());
    }

    #[test]
    fn worker_runs_pauses_steps_and_reports_bad_input_without_dying() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/scenarios/cavity.toml");
        let worker = cpu_worker(path);
        // Steadiness points need two even-step chunks.
        let s = wait_for(&worker, |s| s.step > 20 && s.history.change.len() >= 2);
        assert!(s.solver.contains("CPU"));
        assert!(s
            .history
            .change
            .iter()
            .all(|p| p[1].is_finite() && p[1] < 0.0));
        let frame = worker.take_frame().unwrap();
        assert_eq!((frame.stride, frame.fields.size), (1, s.size));
        // A lower display limit: frames of block means on a coarser grid.
        worker.send(Command::SetDisplayLimit(10));
        let s = wait_for(&worker, |s| s.stride > 1);
        let stride = display::stride_for(s.size, 10);
        assert_eq!(s.stride, stride);
        let coarse = loop {
            match worker.take_frame() {
                Some(f) if f.stride == stride => break f,
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        let size = display::coarse_size(s.size, stride);
        assert!(size.iter().product::<usize>() <= 1000);
        assert_eq!(coarse.fields.size, size);
        assert_eq!(coarse.flags.len(), coarse.fields.rho.len());
        assert_ne!(coarse.geometry, frame.geometry);
        worker.send(Command::SetDisplayLimit(0));
        wait_for(&worker, |s| {
            s.message
                .as_deref()
                .is_some_and(|m| m.contains("display limit"))
        });
        worker.send(Command::SetDisplayLimit(display::DEFAULT_LIMIT));
        wait_for(&worker, |s| s.stride == 1);
        worker.send(Command::Pause);
        let paused = wait_for(&worker, |s| !s.running).step;
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(worker.status().step, paused);
        // A paused run shows the step it stopped at.
        assert_eq!(worker.take_frame().map(|f| f.step), Some(paused));
        worker.send(Command::Step(3));
        wait_for(&worker, |s| s.step == paused + 3);
        worker.send(Command::SetReynolds(-5.0));
        wait_for(&worker, |s| {
            s.message
                .as_deref()
                .is_some_and(|m| m.contains("not a positive number"))
        });
        worker.send(Command::SetReynolds(1e13));
        wait_for(&worker, |s| {
            s.message
                .as_deref()
                .is_some_and(|m| m.contains("is not above 0.5"))
        });
        worker.send(Command::SetReynolds(50.0));
        let s = wait_for(&worker, |s| (s.reynolds - 50.0).abs() < 1e-9);
        assert!(s.message.is_none());
        // A checkpoint saved, the run moved on, the checkpoint restored.
        let dir = tempfile::tempdir().unwrap();
        let ckpt = dir.path().join("w.ckpt");
        worker.send(Command::Pause);
        let at = wait_for(&worker, |s| !s.running).step;
        worker.send(Command::SaveCheckpoint(ckpt.clone()));
        worker.send(Command::Step(4));
        wait_for(&worker, |s| s.step == at + 4);
        worker.send(Command::LoadCheckpoint(ckpt));
        wait_for(&worker, |s| s.step == at);
        worker.send(Command::LoadCheckpoint("no/such.ckpt".into()));
        wait_for(&worker, |s| {
            s.message
                .as_deref()
                .is_some_and(|m| m.contains("cannot read checkpoint"))
        });
        worker.send(Command::Load("no/such.toml".into()));
        wait_for(&worker, |s| {
            s.message
                .as_deref()
                .is_some_and(|m| m.contains("cannot read"))
        });
        worker.send(Command::Reset);
        wait_for(&worker, |s| s.step == 0);
    }
}
