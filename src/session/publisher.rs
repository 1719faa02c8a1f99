//! Publishing field frames to the driver: display frames begun after a chunk
//! of steps and handed over during the next (copied while the solver steps
//! on, where the solver can), or made on the spot. A frame that shows a
//! blow-up is never published: the last good one stays on screen.

use std::sync::Arc;
use std::time::Instant;

use super::error::SessionError;
use super::history::History;
use super::protocol::{Frame, Mailbox};
use crate::scenario::mesh::ObstacleMeshes;
use crate::solver::display::{self, SharedLease};
use crate::solver::{Fields, Solver, MAX_STABLE_SPEED};

/// The publishing side of an engine: the display grid, the frame under way
/// and the pool of field buffers. Its calls take the solver that makes the
/// frames and the history that samples the probe from them.
pub(super) struct Publisher {
    /// Numbers the geometry (scenario and display grid) of published frames.
    pub(super) geometry: u64,
    /// Cells of the grid per display cell, and the display grid's cell flags,
    /// shared by every frame (they change with the geometry and the limit).
    pub(super) stride: usize,
    pub(super) flags: Arc<Vec<u8>>,
    /// The scenario's mesh obstacles, for every frame.
    pub(super) meshes: Arc<ObstacleMeshes>,
    /// A display frame may be copying (see [`Solver::begin_display`]).
    pub(super) copying: bool,
    /// The step of the newest frame published.
    pub(super) shown: Option<u64>,
    /// When the last display frame with a host copy was started.
    pub(super) host_copied: Instant,
    /// Fields of published frames, reused once the driver has let go of them:
    /// a fresh vector per frame would cost page faults over all of it.
    pub(super) pool: Vec<Arc<Fields>>,
    /// The solver's fields before they are averaged down to the display
    /// grid, kept for the next frame.
    full: Fields,
    /// The probe point, in cells of the solver's grid.
    pub(super) probe: [f32; 3],
    /// The line the panel plots the fields along, if any.
    pub(super) line: Option<crate::io::probe::ProbeLine>,
    /// Frames show the time averages ([`Solver::averages`]), made on the
    /// host at most every [`MEAN_EVERY`] while running: each copies the
    /// whole grid's sums.
    pub(super) mean: bool,
    mean_shown: Option<Instant>,
}

/// How often a running session shows new time averages.
pub(super) const MEAN_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// Frames the pool keeps: the one on screen, the one in the mailbox, spares.
const POOL: usize = 4;

impl Publisher {
    /// A publisher of frames of geometry number `geometry` (the display grid
    /// is set by the first [`Publisher::set_display_limit`]).
    pub(super) fn new(geometry: u64, probe: [f32; 3]) -> Publisher {
        Publisher {
            geometry,
            stride: 0,
            flags: Arc::default(),
            meshes: Arc::default(),
            copying: false,
            shown: None,
            host_copied: Instant::now(),
            pool: Vec::new(),
            full: Fields::default(),
            probe,
            line: None,
            mean: false,
            mean_shown: None,
        }
    }

    /// Sets the display grid for `limit`; a new grid counts as a new
    /// geometry. Whether the grid changed.
    pub(super) fn set_display_limit(&mut self, solver: &dyn Solver, limit: usize) -> bool {
        let size = solver.grid().size;
        let stride = display::stride_for(size, limit);
        if stride == self.stride {
            return false;
        }
        self.stride = stride;
        self.flags = Arc::new(display::downsample_flags(solver.flags(), size, stride));
        if stride <= 1 {
            self.full = Fields::default();
        }
        self.geometry += 1;
        true
    }

    /// Publishes the current step now (after a reset, a load, a new limit, or
    /// for solvers without display frames of their own).
    pub(super) fn publish(
        &mut self,
        solver: &mut dyn Solver,
        history: &mut History,
        mailbox: &Mailbox,
    ) -> Result<(), SessionError> {
        if self.mean {
            if let Some(averages) = solver.averages()? {
                return self.publish_mean(solver, averages.mean_fields(), mailbox);
            }
        }
        let mut fields = self.spare_fields();
        if self.stride <= 1 {
            solver.fields_into(&mut fields)?;
        } else {
            solver.fields_into(&mut self.full)?;
            display::downsample_fields_into(&self.full, self.stride, &mut fields);
        }
        let step = solver.time_step();
        if !fields.is_stable() {
            return Err(unstable(solver, step));
        }
        self.publish_fields(step, fields, None, history, mailbox);
        Ok(())
    }

    /// Publishes time-averaged fields (the probe's time series samples the
    /// current fields only, so it skips them).
    fn publish_mean(
        &mut self,
        solver: &mut dyn Solver,
        mean: Fields,
        mailbox: &Mailbox,
    ) -> Result<(), SessionError> {
        self.mean_shown = Some(Instant::now());
        let fields = if self.stride <= 1 {
            mean
        } else {
            let mut out = self.spare_fields();
            display::downsample_fields_into(&mean, self.stride, &mut out);
            out
        };
        let step = solver.time_step();
        if !fields.is_stable() {
            return Err(unstable(solver, step));
        }
        self.post(step, fields, None, mailbox);
        Ok(())
    }

    /// Fields to copy a frame into: a pooled one nobody else holds, if any.
    fn spare_fields(&mut self) -> Fields {
        match self.pool.iter().position(|f| Arc::strong_count(f) == 1) {
            Some(k) => Arc::try_unwrap(self.pool.remove(k)).unwrap_or_default(),
            None => Fields::default(),
        }
    }

    fn publish_fields(
        &mut self,
        step: u64,
        fields: Fields,
        shared: Option<SharedLease>,
        history: &mut History,
        mailbox: &Mailbox,
    ) {
        history.record_probe(step, &fields, self.stride, self.probe);
        history.record_line(step, &fields, self.stride, self.line.as_ref());
        self.post(step, fields, shared, mailbox);
    }

    /// Puts a frame in the mailbox.
    fn post(&mut self, step: u64, fields: Fields, shared: Option<SharedLease>, mailbox: &Mailbox) {
        self.shown = Some(step);
        let fields = Arc::new(fields);
        self.pool.push(fields.clone());
        if self.pool.len() > POOL {
            self.pool.remove(0);
        }
        let frame = Frame {
            step,
            fields,
            flags: self.flags.clone(),
            geometry: self.geometry,
            stride: self.stride,
            meshes: self.meshes.clone(),
            shared: shared.map(Arc::new),
        };
        if let Ok(mut slot) = mailbox.frame.lock() {
            *slot = Some(frame);
        }
    }

    /// Starts the display frame of the current step: copied while the solver
    /// steps on where it can, made here otherwise. `live`: the session runs
    /// on (time-averaged frames come less often then).
    pub(super) fn begin_frame(
        &mut self,
        solver: &mut dyn Solver,
        history: &mut History,
        mailbox: &Mailbox,
        host: bool,
        live: bool,
    ) -> Result<(), SessionError> {
        if self.mean {
            // While running, not before the last mean frame has been on
            // screen a while.
            if live && self.mean_shown.is_some_and(|at| at.elapsed() < MEAN_EVERY) {
                return Ok(());
            }
            return self.publish(solver, history, mailbox);
        }
        if host {
            self.host_copied = Instant::now();
        }
        if solver.begin_display(self.stride, host)? {
            self.copying = true;
            Ok(())
        } else {
            self.publish(solver, history, mailbox)
        }
    }

    /// Publishes the display frame under way once its copy is done.
    pub(super) fn deliver(
        &mut self,
        solver: &mut dyn Solver,
        history: &mut History,
        mailbox: &Mailbox,
    ) -> Result<(), SessionError> {
        if !self.copying {
            return Ok(());
        }
        self.copying = false;
        let mut fields = self.spare_fields();
        match solver.take_display(&mut fields)? {
            Some(taken) if taken.stable => {
                self.publish_fields(taken.step, fields, taken.shared, history, mailbox);
                Ok(())
            }
            Some(taken) => Err(unstable(solver, taken.step)),
            None => Ok(()),
        }
    }

    /// Publishes the current step unless it is already shown.
    pub(super) fn show_now(
        &mut self,
        solver: &mut dyn Solver,
        history: &mut History,
        mailbox: &Mailbox,
    ) -> Result<(), SessionError> {
        // Frames under way first: they free their slots.
        self.deliver(solver, history, mailbox)?;
        // A second time where the first frame showed the step before (made
        // from the fields the last running step left, Solver::enqueue_for_display).
        for _ in 0..2 {
            if self.shown == Some(solver.time_step()) {
                return Ok(());
            }
            self.begin_frame(solver, history, mailbox, true, false)?;
            self.deliver(solver, history, mailbox)?;
        }
        Ok(())
    }
}

/// Why a frame that shows a blow-up was not published.
fn unstable(solver: &mut dyn Solver, step: u64) -> SessionError {
    // The solver's statistics say where (the blow-up only grows).
    match solver.stats().ok().and_then(|s| s.instability()) {
        Some(e) => SessionError::Unstable(e),
        None => SessionError::UnstableFrame {
            step,
            limit: MAX_STABLE_SPEED,
        },
    }
}
