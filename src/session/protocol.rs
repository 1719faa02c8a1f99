//! What crosses between a session's engine (the solver thread) and whoever
//! drives it (the window, `run`, `bench --stream`): commands one way, frames
//! and status the other. Neither side ever waits for the other.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::history::History;
use crate::scenario::mesh::ObstacleMeshes;
use crate::scenario::{Scenario, Turbulence};
use crate::solver::display::SharedLease;
use crate::solver::{Collision, Fields};

/// What a driver asks of the solver thread.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    Run,
    Pause,
    /// Advance this many steps, then pause.
    Step(u64),
    Reset,
    /// Change the Reynolds number live (τ follows; the lattice speed stays).
    SetReynolds(f64),
    /// Change the reference speed (inlets, lids) live, in lattice units (the
    /// Reynolds number stays).
    SetVelocity(f64),
    /// Turn the subgrid model on or off live (see
    /// [`Scenario::with_turbulence`]).
    SetTurbulence(Turbulence),
    /// Show the time-averaged fields instead of the current ones (averages
    /// are kept from the first time this is asked for on).
    ShowMean(bool),
    /// Start the time averages over from the current step.
    ResetAverages,
    /// Replace the running scenario by this one (parsed by the driver).
    Load(Box<Scenario>),
    /// Start the running scenario over with this solution method; it goes
    /// on unchanged if the method cannot run it.
    SetMethod(crate::scenario::Method),
    /// Read this scenario file and run it; the running scenario goes on if
    /// the file cannot be used.
    Open(PathBuf),
    /// Add the STL mesh in this file to the running scenario as an obstacle
    /// ([`crate::scenario::mesh::obstacle_table`]) and start it over; it goes
    /// on unchanged if the mesh cannot be used.
    AddMesh(PathBuf),
    SaveCheckpoint(PathBuf),
    /// Continue from a checkpoint of the current scenario.
    LoadCheckpoint(PathBuf),
    ExportVti(PathBuf),
    /// Show at most this many cells per axis of a cube (the display limit):
    /// larger grids are averaged over blocks before they are copied.
    SetDisplayLimit(usize),
    /// Sample the velocity at this point (cells of the solver's grid) into
    /// [`History::probe`], which starts over.
    SetProbe([f32; 3]),
    /// Sample the fields along this line into [`History::line`] with every
    /// frame (none: stop).
    SetLine(Option<crate::io::probe::ProbeLine>),
    /// Write the fields along the plot line as `--probe-out` does (CSV),
    /// sampled on the solver's grid.
    ExportLine(PathBuf),
    /// The window's graphics device (its UUID) can import display frames
    /// from GPU memory: the solver also writes them there when it runs on
    /// the same GPU ([`crate::solver::Solver::share_display`]); `None`: it
    /// cannot after all.
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
    /// The mesh obstacles, drawn from their triangles (they change with
    /// `geometry`).
    pub meshes: Arc<ObstacleMeshes>,
    /// The same fields in GPU memory the window can import and copy from
    /// (it lets go of the lease once its copy is done). Such frames come
    /// with host fields ([`Fields::has_values`]) about every
    /// [`super::worker::SAMPLE_EVERY`] (for the probe), and when paused or
    /// stepping.
    pub shared: Option<Arc<SharedLease>>,
}

/// What the worker reports besides frames.
#[derive(Clone, Debug, Default)]
pub struct Status {
    pub scenario: String,
    /// The scenario's file.
    pub path: std::path::PathBuf,
    pub solver: String,
    /// Which solver was chosen and why: with `--solver auto` on a machine
    /// without a usable GPU, the reason CUDA is not used.
    pub backend: String,
    /// The scenario's risky values (τ near ½, high Mach), as `run` prints them.
    pub warnings: Vec<String>,
    pub running: bool,
    pub step: u64,
    pub mlups: f64,
    pub reynolds: f64,
    pub velocity: f64,
    pub tau: f64,
    /// The solution method, and the subgrid model and the collision the
    /// solver runs with.
    pub method: crate::scenario::Method,
    pub turbulence: Turbulence,
    pub collision: Collision,
    pub max_speed: f32,
    /// Whether frames show the time averages, and the averages' first step
    /// and samples while they are kept.
    pub show_mean: bool,
    pub averaging: Option<(u64, u64)>,
    /// Set when the run stopped itself (instability) or a command failed:
    /// the error and its causes, in one line.
    pub message: Option<String>,
    pub size: [usize; 3],
    /// Cells of the solver's grid per display cell along each axis.
    pub stride: usize,
    pub history: History,
    /// Where the running loop's time went (for `bench --stream`).
    pub timing: LoopTiming,
    /// Contaminant fields the run carries (0: none), and each receptor's
    /// name and readings.
    pub contaminants: usize,
    pub receptors: Vec<(String, Vec<crate::solver::scalar::Reading>)>,
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

/// Shared between the worker and its driver.
#[derive(Default)]
pub struct Mailbox {
    pub frame: Mutex<Option<Frame>>,
    pub status: Mutex<Status>,
}

impl Mailbox {
    /// Says something to the driver in the status line.
    pub fn report(&self, message: String) {
        if let Ok(mut s) = self.status.lock() {
            s.message = Some(message);
        }
    }
}
