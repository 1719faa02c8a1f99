//! Where the concentrations of a run live and move: the [`Engine`] behind
//! [`super::Carried`], and its host implementation [`Host`] ([`Dispersion`]
//! with the flow's velocity copied out); the GPU's is
//! [`super::cuda::DeviceDispersion`], each MPI process's
//! [`super::slab::SlabHost`], whose cells are shared as a [`Spread`] says.

use super::{Dispersion, Reading, Setup};
use crate::solver::{Fields, Grid, Params, Solver, SolverError};
use crate::system::ranks::Peers;

/// Where the concentrations live and move.
///
/// A transport step over flow steps `first .. first + span` moves the fields
/// in the flow's velocity at `first`: [`Engine::begin`] takes it (and the
/// parameters) as the first of those steps is queued, [`Engine::transport`]
/// moves the fields after the last.
pub trait Engine: Send {
    /// "on the host", "on the GPU".
    fn place(&self) -> &'static str;
    fn setup(&self) -> &Setup;
    /// Takes from the flow's current state what the transport step starting
    /// now moves in (its velocity and parameters), and queues the flow's
    /// next step.
    fn begin(&mut self, flow: &mut dyn Solver) -> Result<(), SolverError>;
    /// Transports the fields over the `span` flow steps from `first` on,
    /// in what [`Engine::begin`] took.
    fn transport(&mut self, flow: &dyn Solver, first: u64, span: u32) -> Result<(), SolverError>;
    /// Whether a transport step has begun and not yet moved the fields.
    fn under_way(&self) -> bool;
    /// The largest Courant-number sum and diffusivity of the last transport
    /// step (they set its sub-steps; `check-cuda` compares them).
    fn maxima(&self) -> (f32, f32);
    /// Adds one flow step of the current concentrations to the doses.
    fn add_doses(&mut self) -> Result<(), SolverError>;
    /// The concentration fields (copied to the host where they are not).
    fn fields(&mut self) -> Result<&[Vec<f32>], SolverError>;
    /// As [`Engine::fields`] where this process writes files (rank 0 of an
    /// MPI run), `None` on the others; every process calls it together.
    fn fields_on_root(&mut self) -> Result<Option<&[Vec<f32>]>, SolverError> {
        self.fields().map(Some)
    }
    /// The fields of this process's cells, gathered from nowhere else: the
    /// whole grid's but where [`Engine::spread`] says otherwise.
    fn own_fields(&mut self) -> Result<Vec<&[f32]>, SolverError> {
        Ok(self.fields()?.iter().map(|c| &c[..]).collect())
    }
    /// [`Engine::state`] of this process's own cells where they are spread
    /// ([`Engine::spread`]); `None` otherwise.
    fn own_state(&mut self) -> Option<Vec<f32>> {
        None
    }
    /// Restores [`Engine::own_state`] (a transport step under way continues
    /// with `params`).
    fn set_own_state(&mut self, _state: &[f32], _params: &Params) -> Result<(), SolverError> {
        Err(SolverError::StateMismatch(
            "these contaminants are not spread over processes".into(),
        ))
    }
    /// How the cells are shared among the processes of an MPI run, where
    /// each moves its own.
    fn spread(&self) -> Option<&Spread> {
        None
    }
    /// Each receptor's readings, one per field.
    fn readings(&mut self) -> Result<Vec<Vec<Reading>>, SolverError>;
    /// The state a checkpoint keeps ([`super::pack_state`]), with the
    /// velocity of a transport step under way.
    fn state(&mut self) -> Result<Vec<f32>, SolverError>;
    /// Restores [`Engine::state`]; a transport step under way continues
    /// with the parameters `params`.
    fn set_state(&mut self, state: &[f32], params: &Params) -> Result<(), SolverError>;
    /// Back to the start: no contaminant anywhere but in inlets.
    fn reset(&mut self, flags: &[u8]) -> Result<(), SolverError>;
    fn memory_bytes(&self) -> u64;
}

/// The host engine: [`Dispersion`] with the flow's velocity copied out.
pub struct Host {
    dispersion: Dispersion,
    /// The velocity the transport step under way moves in (its buffers
    /// reused between steps).
    velocity: Fields,
    /// The flow's parameters as the transport step under way began.
    begun: Option<Params>,
}

impl Host {
    pub fn new(grid: &Grid, flags: &[u8], setup: Setup) -> Host {
        Host {
            dispersion: Dispersion::new(grid, flags, setup),
            velocity: Fields::default(),
            begun: None,
        }
    }
}

/// The error of a transport step that was never begun.
pub(super) fn not_begun() -> SolverError {
    SolverError::Device("a contaminant transport step ended that never began".into())
}

impl Engine for Host {
    fn place(&self) -> &'static str {
        "on the host"
    }

    fn setup(&self) -> &Setup {
        self.dispersion.setup()
    }

    fn begin(&mut self, flow: &mut dyn Solver) -> Result<(), SolverError> {
        flow.fields_into(&mut self.velocity)?;
        super::transport::clear_closed(flow.flags(), &mut self.velocity);
        self.begun = Some(flow.params().clone());
        flow.enqueue(1)
    }

    fn transport(&mut self, flow: &dyn Solver, first: u64, span: u32) -> Result<(), SolverError> {
        let params = self.begun.take().ok_or_else(not_begun)?;
        let (grid, flags) = (*flow.grid(), flow.flags());
        self.dispersion
            .advance(&grid, flags, &params, &self.velocity, first, span);
        Ok(())
    }

    fn under_way(&self) -> bool {
        self.begun.is_some()
    }

    fn maxima(&self) -> (f32, f32) {
        self.dispersion.maxima()
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
        let d = &self.dispersion;
        let v = &self.velocity;
        let velocity = self
            .begun
            .is_some()
            .then(|| [&v.ux[..], &v.uy[..], &v.uz[..]]);
        Ok(super::pack_state(d.fields(), d.doses(), velocity))
    }

    fn set_state(&mut self, state: &[f32], params: &Params) -> Result<(), SolverError> {
        let velocity = self
            .dispersion
            .set_state(state)
            .map_err(SolverError::StateMismatch)?;
        self.begun = None;
        if !velocity.is_empty() {
            let n = velocity.len() / 3;
            let v = &mut self.velocity;
            v.ux = velocity[..n].to_vec();
            v.uy = velocity[n..2 * n].to_vec();
            v.uz = velocity[2 * n..].to_vec();
            self.begun = Some(params.clone());
        }
        Ok(())
    }

    fn reset(&mut self, flags: &[u8]) -> Result<(), SolverError> {
        self.dispersion.reset(flags);
        self.begun = None;
        Ok(())
    }

    fn memory_bytes(&self) -> u64 {
        let n = self.dispersion.fields().first().map_or(0, Vec::len) as u64;
        // The fields, the next values, the three flux planes, the
        // diffusivities and the copied flow.
        (self.dispersion.fields().len() as u64 + 9) * 4 * n
    }
}

/// Message tag of [`Spread::with_next_layer`], apart from the flow's (which
/// number their transfers from 0) and [`super::slab`]'s.
const TAG_PIECE: i32 = 30_005;

/// How the cells of an MPI run are shared: each process owns a range of
/// layers along z, in rank order. Every call is collective.
pub struct Spread {
    peers: &'static dyn Peers,
    /// Cells in a layer.
    plane: usize,
}

impl Spread {
    pub(super) fn new(peers: &'static dyn Peers, plane: usize) -> Spread {
        Spread { peers, plane }
    }

    /// The whole grid's `own` (this process's cells), on every process.
    pub fn gather_all(&self, own: &[f32]) -> Vec<f32> {
        self.peers.all_gather_f32(own)
    }

    /// The whole grid's `own` on rank 0; empty on the others.
    pub fn gather_to_root(&self, own: &[f32]) -> Vec<f32> {
        self.peers.gather_f32_to_root(own)
    }

    /// `own` and, where there is a next process, its first layer: a piece of
    /// a `.pvti`, whose pieces share their boundary points
    /// ([`crate::solver::Piece`]).
    pub fn with_next_layer(&self, own: &[f32]) -> Vec<f32> {
        let (rank, ranks) = (self.peers.rank(), self.peers.size());
        let mut next = vec![0.0f32; self.plane];
        let sends: Vec<(usize, i32, &[f32])> = match rank {
            0 => Vec::new(),
            _ => vec![(rank - 1, TAG_PIECE, &own[..self.plane])],
        };
        let has_next = rank + 1 < ranks;
        let mut receives: Vec<(usize, i32, &mut [f32])> = match has_next {
            true => vec![(rank + 1, TAG_PIECE, &mut next[..])],
            false => Vec::new(),
        };
        self.peers.exchange(&sends, &mut receives, &mut || {});
        let mut out = own.to_vec();
        if has_next {
            out.extend_from_slice(&next);
        }
        out
    }
}
