//! Where the concentrations of a run live and move: the [`Engine`] behind
//! [`super::Carried`], and its host implementation [`Host`] ([`Dispersion`]
//! with the flow's velocity copied out); the GPU's is
//! [`super::cuda::DeviceDispersion`].

use super::{Dispersion, Reading, Setup};
use crate::solver::{Fields, Grid, Solver, SolverError};

/// Where the concentrations live and move.
pub trait Engine: Send {
    /// "on the host", "on the GPU".
    fn place(&self) -> &'static str;
    fn setup(&self) -> &Setup;
    /// Transports the fields over the `span` flow steps from `first` on with
    /// the flow's current velocity.
    fn transport(
        &mut self,
        flow: &mut dyn Solver,
        first: u64,
        span: u32,
    ) -> Result<(), SolverError>;
    /// Adds one flow step of the current concentrations to the doses.
    fn add_doses(&mut self) -> Result<(), SolverError>;
    /// The concentration fields (copied to the host where they are not).
    fn fields(&mut self) -> Result<&[Vec<f32>], SolverError>;
    /// Each receptor's readings, one per field.
    fn readings(&mut self) -> Result<Vec<Vec<Reading>>, SolverError>;
    /// The state a checkpoint keeps ([`super::pack_state`]).
    fn state(&mut self) -> Result<Vec<f32>, SolverError>;
    fn set_state(&mut self, state: &[f32]) -> Result<(), SolverError>;
    /// Back to the start: no contaminant anywhere but in inlets.
    fn reset(&mut self, flags: &[u8]) -> Result<(), SolverError>;
    fn memory_bytes(&self) -> u64;
}

/// The host engine: [`Dispersion`] with the flow's velocity copied out.
pub struct Host {
    dispersion: Dispersion,
    /// The velocity of the last transport step (reused between them).
    velocity: Fields,
}

impl Host {
    pub fn new(grid: &Grid, flags: &[u8], setup: Setup) -> Host {
        Host {
            dispersion: Dispersion::new(grid, flags, setup),
            velocity: Fields::default(),
        }
    }
}

impl Engine for Host {
    fn place(&self) -> &'static str {
        "on the host"
    }

    fn setup(&self) -> &Setup {
        self.dispersion.setup()
    }

    fn transport(
        &mut self,
        flow: &mut dyn Solver,
        first: u64,
        span: u32,
    ) -> Result<(), SolverError> {
        flow.fields_into(&mut self.velocity)?;
        let (grid, flags, params) = (*flow.grid(), flow.flags(), flow.params());
        self.dispersion
            .advance(&grid, flags, params, &self.velocity, first, span);
        Ok(())
    }

    fn add_doses(&mut self) -> Result<(), SolverError> {
        self.dispersion.add_doses();
        Ok(())
    }

    fn fields(&mut self) -> Result<&[Vec<f32>], SolverError> {
        Ok(self.dispersion.fields())
    }

    fn readings(&mut self) -> Result<Vec<Vec<Reading>>, SolverError> {
        Ok(self.dispersion.readings())
    }

    fn state(&mut self) -> Result<Vec<f32>, SolverError> {
        Ok(self.dispersion.state())
    }

    fn set_state(&mut self, state: &[f32]) -> Result<(), SolverError> {
        self.dispersion
            .set_state(state)
            .map_err(SolverError::StateMismatch)
    }

    fn reset(&mut self, flags: &[u8]) -> Result<(), SolverError> {
        self.dispersion.reset(flags);
        Ok(())
    }

    fn memory_bytes(&self) -> u64 {
        let n = self.dispersion.fields().first().map_or(0, Vec::len) as u64;
        // The fields, the next values, the three flux planes, the
        // diffusivities and the copied flow.
        (self.dispersion.fields().len() as u64 + 9) * 4 * n
    }
}
