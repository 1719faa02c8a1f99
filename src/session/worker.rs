//! The solver thread: owns the [`Engine`], obeys [`Command`]s, and publishes
//! the newest field frame. It never waits for its driver, and the driver never
//! waits for it: a frame not yet taken is replaced by the next one.
//!
//! Its loop takes the commands that arrived ([`Session::apply`]), then runs
//! one chunk of steps and samples ([`Session::advance`]).

use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::engine::Engine;
use super::error::{one_line, SessionError};
use super::protocol::{Command, Frame, LoopTiming, Mailbox, Status};
use super::select::Backend;
use crate::scenario::Scenario;

/// Handle the driver keeps.
pub struct Worker {
    pub commands: Sender<Command>,
    pub mailbox: Arc<Mailbox>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Where a worker starts.
#[derive(Clone, Debug)]
pub struct Start {
    pub scenario: Scenario,
    pub backend: Backend,
    /// See [`Command::SetDisplayLimit`].
    pub display_limit: usize,
    /// See [`Command::SetProbe`].
    pub probe: [f32; 3],
}

impl Worker {
    /// Starts the solver thread on a scenario (the solver is built there, so
    /// that the CUDA context belongs to that thread). `wake` is called after
    /// each publish.
    pub fn start(start: Start, wake: impl Fn() + Send + 'static) -> Worker {
        let (tx, rx) = std::sync::mpsc::channel();
        let mailbox = Arc::new(Mailbox::default());
        let mb = mailbox.clone();
        let thread = std::thread::Builder::new()
            .name("solver".into())
            .spawn(move || run(start, rx, mb, wake));
        let thread = match thread {
            Ok(t) => Some(t),
            Err(e) => {
                mailbox.report(one_line(&SessionError::Thread(e)));
                None
            }
        };
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

/// How often (at most) the time series and the solver's statistics are
/// sampled while it runs: every display frame would cost the solver a step's
/// worth of work.
pub(super) const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// The length of a chunk of steps the worker aims at: a field frame after
/// each, unless the window has not taken the last one yet.
const FRAME_SECONDS: f64 = 0.042;

/// The solver thread's state between loop turns.
struct Session {
    engine: Engine,
    backend: Backend,
    mailbox: Arc<Mailbox>,
    limit: usize,
    share: Option<[u8; 16]>,
    running: bool,
    pending_steps: u64,
    chunk: u64,
    mlups: f64,
    last_sample: Instant,
    sample_every: Duration,
    timing: LoopTiming,
    looped: Instant,
}

/// Whether the loop goes on after a command.
#[derive(PartialEq)]
enum Flow {
    Continue,
    Quit,
}

fn run(start: Start, rx: Receiver<Command>, mailbox: Arc<Mailbox>, wake: impl Fn()) {
    let Start {
        scenario,
        backend,
        display_limit: limit,
        mut probe,
    } = start;
    let mut share = None;
    let mut loaded = Engine::load(scenario, &backend, 1, limit, probe);
    let engine = loop {
        match loaded {
            Ok(engine) => break engine,
            Err(e) => {
                mailbox.report(one_line(&e));
                wake();
            }
        }
        // Nothing runs until a scenario loads.
        loaded = loop {
            match rx.recv() {
                Ok(Command::Load(s)) => break Engine::load(*s, &backend, 1, limit, probe),
                Ok(Command::Open(path)) => match Scenario::load(&path, &[]) {
                    Ok(s) => break Engine::load(s, &backend, 1, limit, probe),
                    Err(e) => break Err(e.into()),
                },
                Ok(Command::ShareDisplay(device)) => share = device,
                Ok(Command::SetProbe(p)) => probe = p,
                Ok(Command::Quit) | Err(_) => return,
                Ok(_) => {}
            }
        };
    };
    let mut session = Session {
        engine,
        backend,
        mailbox,
        limit,
        share,
        running: true,
        pending_steps: 0,
        chunk: 2,
        mlups: 0.0,
        last_sample: Instant::now(),
        sample_every: SAMPLE_EVERY,
        timing: LoopTiming::default(),
        looped: Instant::now(),
    };
    session.engine.solver.share_display(share);
    if let Err(e) = session.engine.publish(&session.mailbox) {
        session.fail(e);
    }
    loop {
        // Commands first; block only while paused with nothing to do.
        let busy = session.running || session.pending_steps > 0 || session.engine.publisher.copying;
        let command = if busy {
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
            match session.apply(command) {
                Ok(Flow::Quit) => return,
                Ok(Flow::Continue) => {
                    if let Ok(mut s) = session.mailbox.status.lock() {
                        s.message = None;
                    }
                }
                Err(e) => session.fail(e),
            }
        }
        if session.running || session.pending_steps > 0 {
            session.advance();
        } else if let Err(e) = session.engine.deliver(&session.mailbox) {
            // Stopped: the last frame under way is the one to show.
            session.fail(e);
        }
        session.report_status();
        wake();
    }
}

impl Session {
    /// Shows why something failed.
    fn fail(&self, e: SessionError) {
        self.mailbox.report(one_line(&e));
    }

    /// Stops running and shows why.
    fn stop(&mut self, e: SessionError) {
        self.running = false;
        self.pending_steps = 0;
        self.fail(e);
    }

    fn apply(&mut self, command: Command) -> Result<Flow, SessionError> {
        let mailbox = self.mailbox.clone();
        let engine = &mut self.engine;
        match command {
            Command::Run => self.running = true,
            Command::Pause => {
                self.running = false;
                engine.show_now(&mailbox)?;
            }
            Command::Step(n) => {
                self.running = false;
                self.pending_steps += n;
            }
            Command::Reset => {
                engine.solver.reset()?;
                engine.keep_averages()?;
                engine.publish(&mailbox)?;
            }
            Command::ShowMean(on) => {
                engine.publisher.mean = on;
                if let Err(e) = engine.keep_averages() {
                    engine.publisher.mean = false;
                    return Err(e);
                }
                engine.deliver(&mailbox)?;
                engine.publish(&mailbox)?;
            }
            Command::ResetAverages => {
                engine.restart_averages()?;
                if engine.publisher.mean {
                    engine.publish(&mailbox)?;
                }
            }
            Command::SetReynolds(re) => {
                let scenario = engine.scenario.with_reynolds(re)?;
                engine.retune(scenario)?;
            }
            Command::SetVelocity(u) => {
                let scenario = engine.scenario.with_velocity(u)?;
                engine.retune(scenario)?;
            }
            Command::SetTurbulence(t) => {
                let scenario = engine.scenario.with_turbulence(t);
                engine.retune(scenario)?;
            }
            Command::Open(path) => {
                let scenario = Scenario::load(&path, &[])?;
                return self.apply(Command::Load(Box::new(scenario)));
            }
            Command::AddMesh(path) => {
                let scenario = with_mesh(&engine.scenario, &path)?;
                return self.apply(Command::Load(Box::new(scenario)));
            }
            Command::SetMethod(method) => {
                let mut scenario = engine.scenario.clone();
                scenario.run.method = method;
                return self.apply(Command::Load(Box::new(scenario)));
            }
            Command::Load(scenario) => {
                let generation = engine.publisher.geometry + 1;
                let probe = engine.publisher.probe;
                let mean = engine.publisher.mean;
                // Cloned: a scenario that fails to load leaves the old one
                // running with its line.
                let line = engine.publisher.line.clone();
                *engine = Engine::load(*scenario, &self.backend, generation, self.limit, probe)?;
                engine.solver.share_display(self.share);
                engine.publisher.mean = mean;
                // The line goes on where it still fits the new grid.
                engine.publisher.line = line.filter(|l| l.check(engine.solver.grid().size).is_ok());
                engine.keep_averages()?;
                self.running = true;
                engine.publish(&mailbox)?;
            }
            Command::SaveCheckpoint(p) => engine.save_checkpoint(&p)?,
            Command::LoadCheckpoint(p) => {
                engine.load_checkpoint(&p)?;
                engine.keep_averages()?;
                engine.publish(&mailbox)?;
            }
            Command::ExportVti(p) => engine.export_vti(&p)?,
            Command::SetDisplayLimit(0) => {
                return Err(SessionError::Input(
                    "the display limit must be at least 1 cell".into(),
                ))
            }
            Command::SetDisplayLimit(limit) => {
                self.limit = limit;
                if engine.set_display_limit(limit) {
                    // Frames under way are on the old grid.
                    engine.deliver(&mailbox)?;
                    engine.publish(&mailbox)?;
                }
            }
            Command::SetProbe(p) => {
                engine.publisher.probe = p;
                engine.history.probe.clear();
            }
            Command::SetLine(line) => {
                if let Some(l) = &line {
                    l.check(engine.solver.grid().size)
                        .map_err(|e| SessionError::Input(format!("plot line: {e}")))?;
                }
                engine.publisher.line = line;
                // Sampled now, from a fresh frame, when paused too.
                engine.publish(&mailbox)?;
            }
            Command::ExportLine(path) => engine.export_line(&path)?,
            Command::ShareDisplay(device) => {
                self.share = device;
                // Frames under way keep their host copies.
                engine.deliver(&mailbox)?;
                engine.solver.share_display(device);
            }
            Command::Quit => return Ok(Flow::Quit),
        }
        Ok(Flow::Continue)
    }

    /// Runs one chunk of steps (or the steps asked for), hands over the frame
    /// begun after the last chunk meanwhile, samples the time series, and
    /// begins the next frame.
    fn advance(&mut self) {
        let mailbox = self.mailbox.clone();
        // Running chunks end on even steps, where the time series are
        // sampled: near τ = ½ populations flip between the two AA layouts'
        // steps, and so would the forces.
        let n = if self.running {
            self.chunk + self.engine.solver.time_step() % 2
        } else {
            self.pending_steps.min(self.chunk)
        };
        let began = Instant::now();
        self.timing.other += began.duration_since(self.looped).as_secs_f64();
        let overlapped = self.engine.publisher.copying;
        // A running chunk is followed by a display frame (unless the last one
        // is still untaken): its last step may leave what the frame needs.
        let framed = self.running && !self.engine.publisher.mean;
        let mut result = if framed {
            self.engine.solver.enqueue_for_display(n)
        } else {
            self.engine.solver.enqueue(n)
        }
        .map_err(SessionError::from);
        // While the GPU steps: hand over the frame begun after the last
        // chunk, waiting here for its copy (which overlaps these steps).
        if result.is_ok() {
            result = self.engine.deliver(&mailbox);
        }
        let delivered = Instant::now();
        result = result.and_then(|_| Ok(self.engine.solver.finish()?));
        let secs = began.elapsed().as_secs_f64();
        // How long the steps outlasted the host's work on the last frame.
        let waited = delivered.elapsed().as_secs_f64();
        self.looped = Instant::now();
        if self.running {
            self.timing.chunks += 1;
            self.timing.steps += n;
            self.timing.stepping += secs;
            self.timing.delivering += delivered.duration_since(began).as_secs_f64();
        }
        self.pending_steps = self.pending_steps.saturating_sub(n);
        if let Err(e) = result {
            self.stop(e);
            return;
        }
        self.mlups = self.engine.scenario.cells() as f64 * n as f64 / secs.max(1e-9) / 1e6;
        // About 24 chunks and as many frames of fields per second (each costs
        // the GPU some work: fewer would be cheaper, but 20 is what looks
        // live; steps of a large grid make the chunks coarser),
        // with chunks of steps that outlast the host's work on a frame (else
        // the GPU idles).
        let host_bound = overlapped && waited < 0.1 * secs;
        let mut scale = (FRAME_SECONDS / secs.max(1e-4)).clamp(0.5, 2.0);
        if host_bound && secs < 0.1 {
            scale = scale.max(1.25);
        }
        // Even, so that running chunks end on even steps.
        self.chunk = (((self.chunk as f64 * scale / 2.0).round() as u64) * 2).clamp(2, 8192);
        let mut stable = true;
        if !self.running || self.last_sample.elapsed() >= self.sample_every {
            self.last_sample = Instant::now();
            let area = self.engine.obstacle_area();
            let engine = &mut self.engine;
            engine
                .history
                .record(engine.solver.as_mut(), &engine.scenario, area);
            let stats = engine.solver.stats();
            // Sampling takes the GPU from the solver (at 512³ about 2.5 ms a
            // time on an H200, reading the lattice): at most ~1% of its time,
            // however large the grid.
            self.sample_every = SAMPLE_EVERY.max(self.last_sample.elapsed() * 100);
            self.timing.sampling += self.last_sample.elapsed().as_secs_f64();
            match stats {
                Ok(stats) => {
                    if let Some(e) = stats.instability() {
                        // Keep the last good frame on screen; say why it stopped.
                        stable = false;
                        self.stop(SessionError::Unstable(e));
                    }
                    if let Ok(mut s) = mailbox.status.lock() {
                        s.max_speed = stats.max_speed;
                    }
                }
                Err(e) => self.fail(e.into()),
            }
        }
        // While it runs, a frame the driver has not taken yet is not worth
        // replacing; a single step always shows.
        let untaken = mailbox.frame.lock().is_ok_and(|f| f.is_some());
        if stable && (!self.running || !untaken) {
            // Host copies of shared frames only as often as the probe is
            // sampled.
            let host = !self.running || self.engine.publisher.host_copied.elapsed() >= SAMPLE_EVERY;
            if let Err(e) = self.engine.begin_frame(&mailbox, host, self.running) {
                self.stop(e);
            }
        }
    }

    fn report_status(&self) {
        let engine = &self.engine;
        let units = &engine.scenario.units;
        if let Ok(mut s) = self.mailbox.status.lock() {
            s.scenario = engine.scenario.name.clone();
            s.path = engine.scenario.path.clone();
            s.solver = engine.solver.describe();
            s.backend = engine.reason.clone();
            s.warnings = engine.scenario.warnings.clone();
            s.running = self.running;
            s.step = engine.solver.time_step();
            s.mlups = self.mlups;
            s.reynolds = units.reynolds;
            s.velocity = units.velocity_lattice;
            s.tau = units.tau;
            s.method = engine.scenario.run.method;
            s.turbulence = engine.scenario.turbulence;
            s.collision = engine.scenario.collision;
            s.show_mean = engine.publisher.mean;
            s.averaging = engine.solver.average_progress();
            s.size = engine.scenario.size;
            s.stride = engine.publisher.stride;
            s.history = engine.history.clone();
            s.timing = self.timing;
            s.contaminants = engine.scenario.releases.fields();
            s.receptors = engine.solver.receptors();
        }
    }
}

/// `current` with the mesh in `path` added as an obstacle, keeping its live
/// Reynolds number, speed and subgrid model.
fn with_mesh(current: &Scenario, path: &std::path::Path) -> Result<Scenario, SessionError> {
    // The scenario resolves `file` against its own folder.
    let path = std::path::absolute(path).map_err(|e| {
        SessionError::Input(format!(
            "the mesh path {} cannot be used: {e}",
            path.display()
        ))
    })?;
    let table =
        crate::scenario::mesh::obstacle_table(&path, current.size).map_err(SessionError::Input)?;
    let text = format!("{}{table}", current.source);
    let u = &current.units;
    Ok(Scenario::from_text(&current.path, &text, &[])?
        .with_reynolds(u.reynolds)?
        .with_velocity(u.velocity_lattice)?
        .with_turbulence(current.turbulence))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::scenario::{Method, Turbulence};
    use crate::solver::display;
    use crate::solver::Collision;

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
        let worker = cpu_worker(scenario);
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
        // Saving now would replace a good checkpoint with a state that cannot
        // be resumed: refused, the file left alone.
        let dir = tempfile::tempdir().unwrap();
        let ckpt = dir.path().join("good.ckpt");
        std::fs::write(&ckpt, b"the last good checkpoint").unwrap();
        worker.send(Command::SaveCheckpoint(ckpt.clone()));
        let s = wait_for(&worker, |s| {
            s.message
                .as_deref()
                .is_some_and(|m| m.contains("no checkpoint saved"))
        });
        assert!(s.message.unwrap().contains("is left as it was"));
        assert_eq!(std::fs::read(&ckpt).unwrap(), b"the last good checkpoint");
    }

    /// A worker on the CPU solver at the default display limit.
    fn cpu_worker(scenario: Scenario) -> Worker {
        let start = Start {
            scenario,
            backend: Backend::cpu(),
            display_limit: display::DEFAULT_LIMIT,
            probe: [0.0; 3],
        };
        Worker::start(start, || {})
    }

    fn shipped(name: &str) -> Scenario {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        Scenario::load(&root.join("assets/scenarios").join(name), &[]).unwrap()
    }

    fn wait_for(worker: &Worker, what: impl Fn(&Status) -> bool) -> Status {
        // A minute: on a loaded machine a sample of the fields takes long,
        // and the worker samples less often to keep sampling's share small.
        for _ in 0..3000 {
            let s = worker.status();
            if what(&s) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("timed out; status {:?}", worker.status());
    }

    #[test]
    fn a_mesh_opened_in_the_window_joins_the_scenario_and_a_broken_one_is_refused() {
        use crate::scenario::mesh::{self, stl};
        let dir = tempfile::tempdir().unwrap();
        let ball = dir.path().join("ball.stl");
        std::fs::write(&ball, stl::to_binary(&mesh::icosphere(3.0, 2), "ball")).unwrap();
        let open = dir.path().join("open.stl");
        let mut torn = mesh::icosphere(3.0, 1);
        torn.pop();
        std::fs::write(&open, stl::to_binary(&torn, "open")).unwrap();
        let worker = cpu_worker(shipped("cavity.toml").with_reynolds(50.0).unwrap());
        wait_for(&worker, |s| s.step > 4);
        worker.send(Command::AddMesh(open));
        let s = wait_for(&worker, |s| s.message.is_some());
        let m = s.message.unwrap();
        assert!(m.contains("open.stl") && m.contains("3 open edges"), "{m}");
        worker.send(Command::AddMesh(ball));
        // The new scenario starts over with the sphere as obstacle 1 (the
        // cavity has none), its live Reynolds number kept.
        let s = wait_for(&worker, |s| s.history.obstacle.is_some());
        assert_eq!(s.history.obstacle.as_deref(), Some("1 (mesh)"));
        assert!((s.reynolds - 50.0).abs() < 1e-9, "{}", s.reynolds);
        let frame = loop {
            let f = wait_for_frame(&worker);
            if !f.meshes.is_empty() {
                break f;
            }
        };
        assert_eq!(frame.meshes.tags, vec![1]);
        assert_eq!(frame.meshes.triangles.len(), 320);
        // Scaled to a quarter of the 66-cell box: 16.5 cells across.
        let xs: Vec<f32> = frame
            .meshes
            .triangles
            .iter()
            .flatten()
            .map(|v| v[0])
            .collect();
        let span = xs.iter().cloned().fold(f32::MIN, f32::max)
            - xs.iter().cloned().fold(f32::MAX, f32::min);
        assert!((span - 16.5).abs() < 0.5, "{span}");
        let solid = frame
            .flags
            .iter()
            .filter(|&&f| crate::solver::flags::tag(f) == 1)
            .count();
        assert!(solid > 1000, "{solid} cells");
    }

    #[test]
    fn the_plot_line_samples_the_fields_as_the_probe_does_and_exports_the_same_csv() {
        use crate::io::probe::{to_csv, ProbeLine};
        use crate::solver::Solver;
        let scenario = shipped("cavity.toml");
        let worker = cpu_worker(scenario.clone());
        wait_for(&worker, |s| s.step > 6);
        worker.send(Command::Pause);
        let at = wait_for(&worker, |s| !s.running).step;
        let line: ProbeLine = "33,0,33:33,65,33:66".parse().unwrap();
        worker.send(Command::SetLine(Some(line.clone())));
        let s = wait_for(&worker, |s| s.history.line.is_some());
        let (step, samples) = s.history.line.unwrap();
        assert_eq!((step, samples.len()), (at, 66));
        // The same state computed apart, sampled by --probe's sampler.
        let mut reference = crate::session::select::build_cpu(&scenario, None).unwrap();
        reference.step(at).unwrap();
        let want = line.sample(&reference.fields().unwrap());
        assert_eq!(samples, want, "display grid = solver grid here");
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("line.csv");
        worker.send(Command::ExportLine(csv.clone()));
        for _ in 0..300 {
            if csv.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            std::fs::read_to_string(&csv).unwrap(),
            to_csv(at, &want, None)
        );
        // A line outside the grid is refused and the old one kept.
        worker.send(Command::SetLine(Some("0,0,0:99,0,0:5".parse().unwrap())));
        let s = wait_for(&worker, |s| s.message.is_some());
        assert!(s.message.unwrap().contains("plot line"));
        assert_eq!(s.history.line.map(|l| l.1.len()), Some(66));
        worker.send(Command::SetLine(None));
        wait_for(&worker, |s| s.history.line.is_none());
    }

    #[test]
    fn the_mean_shows_time_averages_that_restart_on_reset() {
        let worker = cpu_worker(shipped("cavity.toml"));
        wait_for(&worker, |s| s.step > 10);
        assert_eq!(worker.status().averaging, None);
        worker.send(Command::Pause);
        worker.send(Command::ShowMean(true));
        let s = wait_for(&worker, |s| s.show_mean && s.averaging.is_some());
        let (from, samples) = s.averaging.unwrap();
        assert_eq!(
            (from, samples),
            (s.step, 1),
            "the current step, sampled at once"
        );
        // One sample: the mean frame is the current state.
        let mean = wait_for_frame(&worker);
        worker.send(Command::ShowMean(false));
        wait_for(&worker, |s| !s.show_mean);
        let now = wait_for_frame(&worker);
        assert_eq!(mean.step, now.step);
        for c in 0..now.fields.ux.len() {
            assert!((mean.fields.ux[c] - now.fields.ux[c]).abs() < 1e-9);
        }
        // Stepping on adds samples (one every 10 steps); a reset of the
        // averages starts them over at the current step.
        worker.send(Command::ShowMean(true));
        worker.send(Command::Step(40));
        let s = wait_for(&worker, |s| s.averaging.is_some_and(|a| a.1 == 5));
        assert_eq!(s.averaging.unwrap().0, from);
        worker.send(Command::ResetAverages);
        let s = wait_for(&worker, |s| s.averaging.is_some_and(|a| a.0 != from));
        assert_eq!(s.averaging, Some((s.step, 1)));
        // A reset of the flow keeps averaging, from step 0.
        worker.send(Command::Reset);
        wait_for(&worker, |s| s.averaging == Some((0, 1)));
    }

    fn wait_for_frame(worker: &Worker) -> Frame {
        for _ in 0..600 {
            if let Some(f) = worker.take_frame() {
                return f;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("no frame");
    }

    #[test]
    fn worker_runs_pauses_steps_and_reports_bad_input_without_dying() {
        let worker = cpu_worker(shipped("cavity.toml"));
        // Steadiness points need two even-step chunks.
        let s = wait_for(&worker, |s| s.step > 20 && s.history.change.len() >= 2);
        assert!(s.solver.contains("CPU"));
        // What the panel shows beside the solver: which one and why, the
        // scenario's file and its warnings.
        assert_eq!(s.backend, "CPU solver (asked for with --solver cpu)");
        assert!(s.path.ends_with("cavity.toml") && s.warnings.is_empty());
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
        worker.send(Command::Open("no/such.toml".into()));
        wait_for(&worker, |s| {
            s.message
                .as_deref()
                .is_some_and(|m| m.contains("cannot read"))
        });
        worker.send(Command::Reset);
        wait_for(&worker, |s| s.step == 0);
        // A scenario near τ = ½: its warning reaches the panel.
        let risky = shipped("cavity.toml").with_reynolds(20_000.0).unwrap();
        worker.send(Command::Load(Box::new(risky)));
        let s = wait_for(&worker, |s| !s.warnings.is_empty());
        assert!(s.warnings[0].contains("τ = 0.50"), "{:?}", s.warnings);
    }

    #[test]
    fn a_live_reynolds_or_speed_change_sets_tau_without_touching_the_file_system() {
        // A scenario whose file does not exist: reading it again would fail.
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/scenarios/cavity.toml"),
        )
        .unwrap();
        let nowhere = Path::new("/nonexistent/flowscope/cavity.toml");
        let scenario =
            Scenario::from_text(nowhere, &text, &["domain.size=[12,12,12]".into()]).unwrap();
        let (length, speed) = (scenario.units.length_cells, scenario.units.velocity_lattice);
        let worker = cpu_worker(scenario);
        wait_for(&worker, |s| s.step > 0);
        worker.send(Command::SetReynolds(37.5));
        let s = wait_for(&worker, |s| s.reynolds == 37.5);
        assert!(s.message.is_none(), "{:?}", s.message);
        assert_eq!(s.tau, 3.0 * (speed * length / 37.5) + 0.5);
        worker.send(Command::SetVelocity(speed / 2.0));
        let s = wait_for(&worker, |s| s.velocity == speed / 2.0);
        assert!(s.message.is_none(), "{:?}", s.message);
        assert_eq!(s.reynolds, 37.5);
        assert_eq!(s.tau, 3.0 * (speed / 2.0 * length / 37.5) + 0.5);
        // And the run goes on at the new τ.
        let at = s.step;
        wait_for(&worker, |s| s.step > at + 10 && s.message.is_none());
        // The subgrid model on, live: with the regularized collision, and the
        // run goes on; off again, the collision stays.
        assert_eq!(
            (s.turbulence, s.collision),
            (Turbulence::None, Collision::Trt)
        );
        worker.send(Command::SetTurbulence(Turbulence::Smagorinsky));
        let s = wait_for(&worker, |s| s.turbulence == Turbulence::Smagorinsky);
        assert_eq!(s.collision, Collision::Regularized);
        let at = s.step;
        let s = wait_for(&worker, |s| s.step > at + 10);
        assert!(s.message.is_none(), "{:?}", s.message);
        worker.send(Command::SetTurbulence(Turbulence::None));
        let s = wait_for(&worker, |s| s.turbulence == Turbulence::None);
        assert_eq!(s.collision, Collision::Regularized);
        // The other method: the scenario starts over with it, and back.
        worker.send(Command::SetMethod(Method::Projection));
        let s = wait_for(&worker, |s| s.method == Method::Projection && s.step > 5);
        assert!(s.solver.contains("projection method"), "{}", s.solver);
        assert!(s.message.is_none(), "{:?}", s.message);
        worker.send(Command::SetMethod(Method::Lbm));
        let s = wait_for(&worker, |s| s.method == Method::Lbm && s.step > 5);
        assert!(!s.solver.contains("projection"), "{}", s.solver);
    }
}
