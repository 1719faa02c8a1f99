//! A loaded scenario and its solver, as the solver thread holds them: loading
//! (one voxelisation), live changes of the fluid numbers (in memory, no file
//! read, no new voxels), checkpoints and exports.

use std::path::Path;

use super::error::SessionError;
use super::history::History;
use super::protocol::Mailbox;
use super::publisher::Publisher;
use super::select::{self, Backend, Geometry};
use crate::io::checkpoint::{self, CheckpointError};
use crate::scenario::mesh::ObstacleMeshes;
use crate::scenario::Scenario;
use crate::solver::{Schedule, Solver, SolverError};

/// Steps between the samples of the window's time averages (as `run`'s
/// default).
const WINDOW_AVERAGE_EVERY: u64 = 10;

pub(super) struct Engine {
    pub(super) scenario: Scenario,
    pub(super) solver: Box<dyn Solver>,
    pub(super) geometry: Geometry,
    pub(super) history: History,
    pub(super) publisher: Publisher,
    /// Which solver runs and why (e.g. why CUDA is not used).
    pub(super) reason: String,
}

impl Engine {
    /// Builds the solver for `scenario`; `generation` numbers the geometry
    /// (frames of a new one replace the window's volumes).
    pub(super) fn load(
        scenario: Scenario,
        backend: &Backend,
        generation: u64,
        limit: usize,
        probe: [f32; 3],
    ) -> Result<Engine, SessionError> {
        let selected = select::build(backend, &scenario, crate::system::available_memory())?;
        let history = History {
            obstacle: selected.geometry.obstacles.first().map(|o| o.name.clone()),
            ..Default::default()
        };
        let mut publisher = Publisher::new(generation, probe);
        publisher.meshes = std::sync::Arc::new(ObstacleMeshes::of(&scenario));
        let mut engine = Engine {
            scenario,
            solver: selected.solver,
            geometry: selected.geometry,
            history,
            publisher,
            reason: selected.reason,
        };
        engine.set_display_limit(limit);
        Ok(engine)
    }

    /// See [`Publisher::set_display_limit`].
    pub(super) fn set_display_limit(&mut self, limit: usize) -> bool {
        self.publisher
            .set_display_limit(self.solver.as_ref(), limit)
    }

    /// See [`Publisher::publish`].
    pub(super) fn publish(&mut self, mailbox: &Mailbox) -> Result<(), SessionError> {
        self.publisher
            .publish(self.solver.as_mut(), &mut self.history, mailbox)
    }

    /// See [`Publisher::begin_frame`].
    pub(super) fn begin_frame(
        &mut self,
        mailbox: &Mailbox,
        host: bool,
        live: bool,
    ) -> Result<(), SessionError> {
        self.publisher
            .begin_frame(self.solver.as_mut(), &mut self.history, mailbox, host, live)
    }

    /// See [`Publisher::deliver`].
    pub(super) fn deliver(&mut self, mailbox: &Mailbox) -> Result<(), SessionError> {
        self.publisher
            .deliver(self.solver.as_mut(), &mut self.history, mailbox)
    }

    /// See [`Publisher::show_now`].
    pub(super) fn show_now(&mut self, mailbox: &Mailbox) -> Result<(), SessionError> {
        self.publisher
            .show_now(self.solver.as_mut(), &mut self.history, mailbox)
    }

    /// Keeps time averages while the mean is shown: after a reset, a loaded
    /// checkpoint or scenario, they start over from the current step.
    pub(super) fn keep_averages(&mut self) -> Result<(), SessionError> {
        if self.publisher.mean && self.solver.average_progress().is_none() {
            self.restart_averages()?;
        }
        Ok(())
    }

    /// Starts the time averages over from the current step.
    pub(super) fn restart_averages(&mut self) -> Result<(), SessionError> {
        self.solver.start_averages(Schedule {
            from_step: self.solver.time_step(),
            every: WINDOW_AVERAGE_EVERY,
        })?;
        Ok(())
    }

    /// Frontal area of the first obstacle, the reference of its coefficients.
    pub(super) fn obstacle_area(&self) -> Option<f64> {
        self.geometry
            .obstacles
            .first()
            .map(|o| o.frontal_area.max(1.0))
    }

    /// Runs on with changed fluid numbers (same geometry): τ and the velocity
    /// slots follow from the scenario in memory.
    pub(super) fn retune(&mut self, scenario: Scenario) -> Result<(), SessionError> {
        let params = scenario.params(&self.geometry.slots);
        self.solver.set_params(params)?;
        self.scenario = scenario;
        Ok(())
    }

    pub(super) fn save_checkpoint(&mut self, path: &Path) -> Result<(), SessionError> {
        checkpoint::save(path, self.solver.as_mut()).map_err(|e| match e {
            CheckpointError::Solver(e @ SolverError::Unstable { .. }) => SessionError::Input(format!(
                "no checkpoint saved: {e} (a blown-up state cannot be resumed; {} is left as it was)",
                path.display()
            )),
            CheckpointError::Solver(e) => e.into(),
            e => e.into(),
        })
    }

    pub(super) fn load_checkpoint(&mut self, path: &Path) -> Result<(), SessionError> {
        checkpoint::restore(path, self.solver.as_mut())?;
        // The steadiness criterion starts over from here.
        self.solver.velocity_change()?;
        Ok(())
    }

    /// Writes the fields along the plot line, sampled on the solver's grid,
    /// as `run --probe-out` writes them.
    pub(super) fn export_line(&mut self, path: &Path) -> Result<(), SessionError> {
        let Some(line) = self.publisher.line.clone() else {
            return Err(SessionError::Input(
                "no plot line to export: enter X0,Y0,Z0:X1,Y1,Z1:N and press Plot first".into(),
            ));
        };
        let fields = self.solver.fields()?;
        let csv = crate::io::probe::to_csv(self.solver.time_step(), &line.sample(&fields), None);
        crate::io::write_atomically(path, |w| w.write_all(csv.as_bytes())).map_err(|source| {
            SessionError::Write {
                path: path.to_path_buf(),
                source,
            }
        })
    }

    pub(super) fn export_vti(&mut self, path: &Path) -> Result<(), SessionError> {
        let fields = self.solver.fields()?;
        // The averages the window keeps go with the fields.
        let averages = self.solver.averages()?;
        let physical = crate::io::vti::Physical::of(&self.scenario.units);
        crate::io::vti::write(
            path,
            &fields,
            averages.as_ref(),
            self.solver.flags(),
            physical.as_ref(),
        )
        .map_err(|source| SessionError::Write {
            path: path.to_path_buf(),
            source,
        })
    }
}
