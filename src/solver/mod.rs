//! The face every solution method shows the rest of the program: the
//! [`Solver`] trait, grids, macroscopic fields, parameters, storage precision,
//! statistics and errors, plus the cell flags ([`flags`]) and display frames
//! ([`display`]) that every method shares.
//!
//! The methods live below it: [`lbm`] (D3Q19 lattice Boltzmann, CPU and CUDA)
//! and, being built, [`projection`] (incompressible Navier–Stokes).
//! Nothing here knows how a method stores its state.

pub mod average;
pub mod display;
pub mod flags;
pub mod lbm;
pub mod projection;
pub mod scalar;

use std::fmt;

pub use average::{Averages, Schedule};

pub use lbm::lattice::Collision;

/// Most velocity slots a scenario can use for inlets and moving walls.
pub const VELOCITY_SLOTS: usize = 16;

/// Grid dimensions and which axes wrap around.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    pub size: [usize; 3],
    pub periodic: [bool; 3],
}

impl Grid {
    pub fn cells(&self) -> usize {
        self.size[0] * self.size[1] * self.size[2]
    }

    #[inline(always)]
    pub fn index(&self, x: usize, y: usize, z: usize) -> usize {
        x + self.size[0] * (y + self.size[1] * z)
    }

    pub fn coords(&self, cell: usize) -> [usize; 3] {
        let nx = self.size[0];
        let ny = self.size[1];
        [cell % nx, (cell / nx) % ny, cell / (nx * ny)]
    }

    /// Neighbour of `(x, y, z)` at offset `e`: wraps on periodic axes, `None`
    /// beyond a non-periodic face.
    #[inline]
    pub fn neighbour(&self, x: usize, y: usize, z: usize, e: [i32; 3]) -> Option<usize> {
        let p = [x, y, z];
        let mut q = [0usize; 3];
        for a in 0..3 {
            let n = self.size[a] as i64;
            let mut v = p[a] as i64 + e[a] as i64;
            if v < 0 || v >= n {
                if !self.periodic[a] {
                    return None;
                }
                v = v.rem_euclid(n);
            }
            q[a] = v as usize;
        }
        Some(self.index(q[0], q[1], q[2]))
    }
}

/// Parameters that can change while a run goes on.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// Relaxation time τ; kinematic viscosity ν = (τ − ½)/3.
    pub tau: f32,
    pub collision: Collision,
    /// Body force per unit volume on fluid cells (lattice units), Guo forcing.
    pub force: [f32; 3],
    /// Velocities referenced by the tag of inlet and moving-wall cells.
    pub velocities: [[f32; 3]; VELOCITY_SLOTS],
    /// Smagorinsky constant C_s of the subgrid model; 0 without one.
    pub smagorinsky: f32,
    /// How the velocity of each slot varies over its inlet face.
    pub profiles: Profiles,
}

impl Params {
    pub fn new(tau: f32, collision: Collision) -> Params {
        Params {
            tau,
            collision,
            force: [0.0; 3],
            velocities: [[0.0; 3]; VELOCITY_SLOTS],
            smagorinsky: 0.0,
            profiles: Profiles::default(),
        }
    }

    /// The velocity of boundary cell `cell` of `grid` tagged with velocity
    /// slot `slot` (its coordinates are worked out only for a profile).
    #[inline]
    pub fn wall_velocity(&self, slot: usize, grid: &Grid, cell: usize) -> [f32; 3] {
        let v = self.velocities[slot];
        match self.profiles.slots[slot] {
            Profile::Uniform => v,
            _ => {
                let f = self.profiles.factor(slot, grid.coords(cell));
                [v[0] * f, v[1] * f, v[2] * f]
            }
        }
    }

    /// What the collision does beyond plain BGK or TRT, if anything.
    pub fn model(&self) -> Option<lbm::lattice::Model> {
        lbm::lattice::Model::of(self.collision, self.smagorinsky)
    }

    pub fn viscosity(&self) -> f32 {
        (self.tau - 0.5) / 3.0
    }
}

/// How an inlet's velocity varies over its face: the slot's velocity times a
/// factor of the boundary cell's position, at most 1 (the slot's velocity is
/// the profile's largest, so the scenario's Mach check holds for it).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum Profile {
    #[default]
    Uniform,
    /// Laminar channel or duct flow: Π 4s(1 − s) over the marked axes, s the
    /// position between the walls bounding them ([`Profiles::lo`], `hi`):
    /// zero at the walls, 1 midway.
    Parabolic { axes: [bool; 3] },
    /// Atmospheric boundary layer over the floor at `lo[2]`:
    /// ln((h + z0)/z0) / ln((H + z0)/z0) at height h above it, H the height of
    /// the top (`hi[2]`), z0 the roughness length in cells. The shift by z0
    /// keeps the first cell above the floor moving (plain ln(h/z0) is zero or
    /// negative below z0).
    Log { roughness: f32 },
}

/// The profiles of the velocity slots and the walls they refer to.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Profiles {
    pub slots: [Profile; VELOCITY_SLOTS],
    /// Wall surfaces bounding the fluid along each axis, in cell coordinates
    /// (0.5 and n − 1.5 where a face is a layer of boundary cells).
    pub lo: [f32; 3],
    pub hi: [f32; 3],
}

impl Profiles {
    /// The factor of slot `slot` at boundary cell `p`, in [0, 1]. The CUDA
    /// kernels (`profile_factor`) do the same arithmetic.
    pub fn factor(&self, slot: usize, p: [usize; 3]) -> f32 {
        match self.slots[slot] {
            Profile::Uniform => 1.0,
            Profile::Parabolic { axes } => {
                let mut f = 1.0f32;
                for a in 0..3 {
                    if axes[a] {
                        let s = (p[a] as f32 - self.lo[a]) / (self.hi[a] - self.lo[a]);
                        f *= 4.0 * s * (1.0 - s);
                    }
                }
                f.max(0.0)
            }
            Profile::Log { roughness } => {
                let h = p[2] as f32 - self.lo[2];
                if h <= 0.0 {
                    return 0.0;
                }
                let top = self.hi[2] - self.lo[2];
                (ln(1.0 + h / roughness) / ln(1.0 + top / roughness)).min(1.0)
            }
        }
    }
}

/// The natural logarithm of a positive finite `x`, to about 1e-7, by
/// operations the CUDA kernels (`portable_log`) repeat one for one: the
/// library logarithms of the two differ in the last bit, and the plain FP32
/// kernels agree with the CPU bit for bit. x = m 2^e with m in [√½, √2),
/// ln m = 2 atanh(s), s = (m − 1)/(m + 1), |s| < 0.172, to s⁹.
pub fn ln(x: f32) -> f32 {
    let bits = x.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 127;
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000);
    if m > std::f32::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let series = s * (2.0 + s2 * (2.0 / 3.0 + s2 * (0.4 + s2 * (2.0 / 7.0 + s2 * (2.0 / 9.0)))));
    e as f32 * std::f32::consts::LN_2 + series
}

/// How populations are stored (arithmetic is always FP32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Precision {
    /// 4 bytes per population: the accuracy reference.
    #[default]
    Fp32,
    /// 2 bytes per population: f_i − w_i in a 16-bit float of 11 mantissa bits
    /// (see `kernels/lbm/d3q19.cu`); about twice as fast on GPUs (half the memory
    /// traffic), velocity within ~1e-3.
    Fp16,
}

impl Precision {
    pub fn bytes_per_population(self) -> usize {
        match self {
            Precision::Fp32 => 4,
            Precision::Fp16 => 2,
        }
    }

    /// Bytes per cell of the lattice: 19 populations and the flag byte.
    pub fn bytes_per_cell(self) -> usize {
        lbm::lattice::Q * self.bytes_per_population() + 1
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
        }
    }
}

/// Initial state: equilibrium of these fields.
#[derive(Clone, Debug, PartialEq)]
pub enum Initial {
    /// ρ = 1 and one velocity in every running cell.
    Uniform([f32; 3]),
    /// Per-cell density and velocity (tests, restarts from exported fields).
    Fields(Fields),
    /// ρ = 1 and `velocity` plus a pseudo-random perturbation of up to
    /// `amplitude` per component ([`perturbation`]), which seeds
    /// three-dimensional turbulence where geometry and flow are symmetric. Cell
    /// (x, y, z) draws from the global cell (x, y, (z + z_offset) mod nz_global):
    /// a slab of a larger grid starts as its part of the whole.
    Perturbed {
        velocity: [f32; 3],
        amplitude: f32,
        z_offset: u32,
        nz_global: u32,
    },
}

impl Initial {
    /// The initial velocity of cell `p` of `grid` (ρ is 1) for the uniform
    /// kinds; `None` for [`Initial::Fields`].
    pub fn velocity_at(&self, grid: &Grid, p: [usize; 3]) -> Option<[f32; 3]> {
        match self {
            Initial::Uniform(u) => Some(*u),
            Initial::Fields(_) => None,
            Initial::Perturbed {
                velocity,
                amplitude,
                z_offset,
                nz_global,
            } => {
                let [nx, ny, _] = grid.size;
                let z = (p[2] as u64 + *z_offset as u64) % (*nz_global).max(1) as u64;
                let cell = (p[0] as u64 + nx as u64 * (p[1] as u64 + ny as u64 * z)) as u32;
                Some(std::array::from_fn(|k| {
                    velocity[k] + amplitude * perturbation(cell, k as u32)
                }))
            }
        }
    }
}

/// A pseudo-random number in [−1, 1) for component `k` of cell `cell`: the
/// lowbias32 integer hash, the same in the CUDA kernel `init_uniform`.
pub fn perturbation(cell: u32, k: u32) -> f32 {
    let mut h = cell.wrapping_mul(3).wrapping_add(k);
    h ^= h >> 16;
    h = h.wrapping_mul(0x7feb_352d);
    h ^= h >> 15;
    h = h.wrapping_mul(0x846c_a68b);
    h ^= h >> 16;
    (h >> 8) as f32 * (2.0 / 16_777_216.0) - 1.0
}

/// Macroscopic fields, one value per cell, x fastest.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Fields {
    pub size: [usize; 3],
    pub rho: Vec<f32>,
    pub ux: Vec<f32>,
    pub uy: Vec<f32>,
    pub uz: Vec<f32>,
    /// Contaminant concentrations ([`scalar`]), one vector per field; empty
    /// where the run carries none.
    pub concentration: Vec<Vec<f32>>,
}

impl Fields {
    /// Becomes the fields of a `size` grid stored as ρ, ux, uy, uz in four
    /// consecutive planes, copied over all cores into the vectors it has.
    pub fn copy_from_planes(&mut self, size: [usize; 3], planes: &[f32]) {
        use rayon::prelude::*;
        let n = size.iter().product::<usize>();
        assert_eq!(planes.len(), 4 * n, "four planes of {n} values");
        self.size = size;
        for (k, out) in [&mut self.rho, &mut self.ux, &mut self.uy, &mut self.uz]
            .into_iter()
            .enumerate()
        {
            // Written once, in parallel, into the capacity the vector has: a
            // shared frame leaves its vectors empty, and filling them with
            // zeros first on one core took 30 ms at 256³ (against 6 for the
            // copy), longer than the 512³ chunk it overlaps.
            out.clear();
            out.par_extend(planes[k * n..(k + 1) * n].par_iter().copied());
        }
    }

    /// Whether every value is finite and every speed within the stable
    /// limit (checked over all cores).
    pub fn is_stable(&self) -> bool {
        use rayon::prelude::*;
        let limit = MAX_STABLE_SPEED * MAX_STABLE_SPEED;
        (0..self.rho.len())
            .into_par_iter()
            .with_min_len(1 << 14)
            .all(|c| {
                let [x, y, z] = self.velocity(c);
                self.rho[c].is_finite() && (x * x + y * y + z * z) <= limit
            })
    }

    /// Whether the fields hold values (a shared display frame may come
    /// without; see [`TakenFrame::host`]).
    pub fn has_values(&self) -> bool {
        !self.rho.is_empty()
    }

    pub fn new(size: [usize; 3]) -> Fields {
        let n = size[0] * size[1] * size[2];
        Fields {
            size,
            rho: vec![1.0; n],
            ux: vec![0.0; n],
            uy: vec![0.0; n],
            uz: vec![0.0; n],
            concentration: Vec::new(),
        }
    }

    pub fn index(&self, x: usize, y: usize, z: usize) -> usize {
        x + self.size[0] * (y + self.size[1] * z)
    }

    /// Pressure relative to the rest pressure: p − p0 = c_s² (ρ − 1).
    pub fn pressure(&self, cell: usize) -> f32 {
        lbm::lattice::CS2 * (self.rho[cell] - 1.0)
    }

    pub fn velocity(&self, cell: usize) -> [f32; 3] {
        [self.ux[cell], self.uy[cell], self.uz[cell]]
    }
}

/// Whole-domain reductions over running cells (f64 accumulation).
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    pub step: u64,
    /// Σ ρ over running cells.
    pub mass: f64,
    /// Running cells counted (non-finite ones excluded).
    pub cells: u64,
    pub mean_velocity: [f64; 3],
    pub max_speed: f32,
    pub max_speed_cell: [usize; 3],
    /// First cell (in memory order) with a NaN or infinite density or velocity.
    pub non_finite_cell: Option<[usize; 3]>,
}

/// One process's part of the fields (the pieces of a ParaView `.pvti`):
/// its layers along z and the first layer of the next process's, since the
/// pieces of point data share their boundary points.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    /// Global layer of the piece's first layer.
    pub first_layer: usize,
    pub fields: Fields,
    pub averages: Option<Averages>,
    pub flags: Vec<u8>,
    /// Every process's first and last layer (inclusive), in rank order.
    pub extents: Vec<[usize; 2]>,
}

/// Largest lattice speed we accept before calling a run unstable.
pub const MAX_STABLE_SPEED: f32 = 0.5;

impl Stats {
    /// The instability, if any, these numbers show.
    pub fn instability(&self) -> Option<SolverError> {
        if let Some(cell) = self.non_finite_cell {
            return Some(SolverError::Unstable {
                step: self.step,
                cell,
                what: "the density or velocity became NaN/infinite".into(),
            });
        }
        if !(self.max_speed <= MAX_STABLE_SPEED) {
            return Some(SolverError::Unstable {
                step: self.step,
                cell: self.max_speed_cell,
                what: format!(
                    "the lattice speed reached {:.3} (limit {MAX_STABLE_SPEED})",
                    self.max_speed
                ),
            });
        }
        None
    }
}

/// Errors a solver reports.
#[derive(Debug, thiserror::Error)]
pub enum SolverError {
    #[error(
        "the simulation became unstable at step {step}: {what} at cell ({}, {}, {}). \
         Lower the Reynolds number (fluid.reynolds) or the lattice speed (fluid.velocity / fluid.mach), \
         or refine the grid (domain.size, fluid.length_cells) so that τ stays above ~0.51; \
         for a turbulent flow (Reynolds number above ~10³) turn on the subgrid model \
         (fluid.turbulence = \"smagorinsky\", which takes the regularized collision)",
        cell[0], cell[1], cell[2]
    )]
    Unstable {
        step: u64,
        cell: [usize; 3],
        what: String,
    },
    #[error("invalid parameter: {0}")]
    InvalidParams(String),
    #[error("state does not fit this solver: {0}")]
    StateMismatch(String),
    #[error("GPU error: {0}")]
    Device(String),
}

/// What every solver (CPU reference, CUDA) offers the CLI and the visualizer.
pub trait Solver: Send {
    /// Short description, e.g. "CPU (rayon, 2 threads)".
    fn describe(&self) -> String;
    fn grid(&self) -> &Grid;
    fn flags(&self) -> &[u8];
    fn params(&self) -> &Params;
    fn set_params(&mut self, params: Params) -> Result<(), SolverError>;
    /// Advances `n` time steps.
    fn step(&mut self, n: u64) -> Result<(), SolverError>;
    /// Number of time steps done since the initial state.
    fn time_step(&self) -> u64;
    /// Back to the initial state at step 0.
    fn reset(&mut self) -> Result<(), SolverError>;
    /// Density and velocity of every cell at the current step.
    fn fields(&mut self) -> Result<Fields, SolverError>;
    /// [`Solver::fields`] into `out`, reusing its vectors where the solver
    /// can: the window asks for every frame, and fresh vectors would be
    /// page-faulted in and given back each time.
    fn fields_into(&mut self, out: &mut Fields) -> Result<(), SolverError> {
        *out = self.fields()?;
        Ok(())
    }
    /// [`Solver::fields`] for writing out: the same on MPI rank 0 and in a
    /// single process, `None` on the other ranks, which then hold no copy of
    /// the whole domain (every rank calls it together).
    fn fields_on_root(&mut self) -> Result<Option<Fields>, SolverError> {
        Ok(Some(self.fields()?))
    }
    fn stats(&mut self) -> Result<Stats, SolverError>;
    /// Force on each obstacle tag (index 0 is unused) by momentum exchange on the
    /// bounce-back links at the current step, in lattice units.
    fn obstacle_forces(&mut self) -> Result<Vec<[f64; 3]>, SolverError>;
    /// Raw shifted populations in storage order (for checkpoints), as FP32:
    /// the whole state of the flow ([`Solver::state_len`] values; another
    /// method's, such as the projection method's velocities and pressure,
    /// in its own layout).
    fn populations(&mut self) -> Result<Vec<f32>, SolverError>;
    /// How many values [`Solver::populations`] hands over: Q per cell for
    /// the lattice Boltzmann solvers.
    fn state_len(&self) -> usize {
        lbm::lattice::Q * self.grid().cells()
    }
    /// Hands the raw populations to `visit` in storage order, a piece at a
    /// time, as FP32 (checkpoints): solvers that can, hand over pieces of
    /// their own storage instead of a copy of the whole lattice.
    fn visit_populations(&mut self, visit: &mut dyn FnMut(&[f32])) -> Result<(), SolverError> {
        visit(&self.populations()?);
        Ok(())
    }
    /// Restores raw populations and the step counter (from a checkpoint).
    fn set_populations(&mut self, step: u64, populations: &[f32]) -> Result<(), SolverError>;
    /// Bytes of memory the solver holds for the lattice.
    fn memory_bytes(&self) -> u64;
    /// The steadiness criterion: mean relative change of the velocity per step
    /// since the previous call, Σ|u − u_prev| / Σ|u| / steps ([`relative_change`]).
    /// The first call only takes the snapshot and returns `None`.
    fn velocity_change(&mut self) -> Result<Option<f64>, SolverError>;

    /// Starts time averages anew: the state after step `schedule.from_step`
    /// and every `schedule.every` steps after it is sampled as the solver
    /// steps ([`average`]); a first step already reached counts from the
    /// current one, which is sampled at once. Solvers that keep none say so.
    fn start_averages(&mut self, _schedule: Schedule) -> Result<(), SolverError> {
        Err(SolverError::InvalidParams(format!(
            "{} keeps no time averages",
            self.describe()
        )))
    }

    /// Stops the averages and frees their memory.
    fn stop_averages(&mut self) {}

    /// The averages so far, while they are kept.
    fn averages(&mut self) -> Result<Option<Averages>, SolverError> {
        Ok(None)
    }

    /// [`Solver::averages`] for writing out, as [`Solver::fields_on_root`]:
    /// the same on MPI rank 0 and in a single process, `None` on the other
    /// ranks (every rank calls it together).
    fn averages_on_root(&mut self) -> Result<Option<Averages>, SolverError> {
        self.averages()
    }

    /// The first step averaged and the samples so far, while averages are
    /// kept (without copying them).
    fn average_progress(&self) -> Option<(u64, u64)> {
        None
    }

    /// Queues `n` time steps without waiting for them where the solver runs
    /// elsewhere (CUDA); [`Solver::finish`] waits. The others step here.
    fn enqueue(&mut self, n: u64) -> Result<(), SolverError> {
        self.step(n)
    }

    /// Waits for the steps [`Solver::enqueue`] queued.
    fn finish(&mut self) -> Result<(), SolverError> {
        Ok(())
    }

    /// Starts a display frame of the current step, averaged over `stride`³
    /// blocks ([`display::downsample_fields`]), copied while the solver steps
    /// on; [`Solver::take_display`] hands it over. Without `host`, a frame
    /// that goes to shared GPU memory ([`Solver::share_display`]) is not
    /// copied to the host. `Ok(false)`: this solver has no such path, and the
    /// caller downsamples [`Solver::fields`].
    fn begin_display(&mut self, _stride: usize, _host: bool) -> Result<bool, SolverError> {
        Ok(false)
    }

    /// Queues `n` steps after which a display frame will be begun
    /// ([`Solver::begin_display`]): a solver may have the last of them leave
    /// what the frame needs, and that frame then shows the state the last
    /// step started from. The default queues plain steps.
    fn enqueue_for_display(&mut self, n: u64) -> Result<(), SolverError> {
        self.enqueue(n)
    }

    /// Waits for the display frames under way, copies the newest into `out`
    /// (reusing its vectors) and returns its step; older ones are dropped.
    fn take_display(&mut self, _out: &mut Fields) -> Result<Option<TakenFrame>, SolverError> {
        Ok(None)
    }

    /// Asks for display frames in GPU memory that the graphics device with
    /// this UUID can import ([`display::SharedFrame`]), or (`None`) no more.
    /// Solvers that cannot (another device, no CUDA) ignore it.
    fn share_display(&mut self, _device: Option<[u8; 16]>) {}
    /// Where a solver spread over processes spent its halo exchange (rank 0's
    /// view), once it has stepped.
    fn exchange_note(&self) -> Option<String> {
        None
    }
    /// This process's own lattice when the solver is spread over processes
    /// (MPI): its slab, halos included, for a checkpoint per process; `None`
    /// in one process.
    fn own_lattice(&mut self) -> Option<&mut dyn Solver> {
        None
    }
    /// This process's part of the fields when the solver is spread over
    /// processes (MPI); `None` in one process (see [`Piece`]).
    fn piece(&mut self) -> Result<Option<Piece>, SolverError> {
        Ok(None)
    }
    /// [`Solver::carried_state`] of this process's own cells, where the
    /// state beyond the flow is spread over processes (a checkpoint in
    /// pieces); `None` otherwise.
    fn own_carried_state(&mut self) -> Result<Option<Vec<f32>>, SolverError> {
        Ok(None)
    }
    /// Restores [`Solver::own_carried_state`], every process together.
    fn set_own_carried_state(&mut self, _state: &[f32]) -> Result<(), SolverError> {
        Err(SolverError::StateMismatch(
            "the checkpoint's piece holds contaminant concentrations but this run carries \
             none spread over processes"
                .into(),
        ))
    }
    /// The layers along z this process owns and the processes of the run,
    /// when the solver is spread over processes (MPI); `None` in one process.
    fn own_layers(
        &self,
    ) -> Option<(
        std::ops::Range<usize>,
        &'static dyn crate::system::ranks::Peers,
    )> {
        None
    }
    /// The velocity of [`Solver::own_layers`] (ux, uy, uz, each those layers'
    /// cells in order), gathered from nowhere else.
    fn own_velocity_into(&mut self, _out: &mut [Vec<f32>; 3]) -> Result<(), SolverError> {
        Err(SolverError::StateMismatch(
            "the velocity of this process's layers was asked of a solver that is not spread \
             over processes"
                .into(),
        ))
    }

    /// State beyond the flow that a checkpoint keeps (the contaminants of
    /// [`scalar::carried::Carried`]), as FP32 values; `None` without any.
    fn carried_state(&mut self) -> Result<Option<Vec<f32>>, SolverError> {
        Ok(None)
    }

    /// Restores [`Solver::carried_state`].
    fn set_carried_state(&mut self, _state: &[f32]) -> Result<(), SolverError> {
        Err(SolverError::StateMismatch(
            "the checkpoint holds contaminant concentrations but this run carries none".into(),
        ))
    }

    /// Each receptor's name and readings (one per concentration field), as
    /// of the end of the last `step` or `finish`.
    fn receptors(&self) -> Vec<(String, Vec<scalar::Reading>)> {
        Vec::new()
    }

    /// The CUDA stream the solver runs on, where it runs on one GPU: work
    /// queued there (a contaminant moved on the GPU,
    /// [`scalar::cuda::DeviceDispersion`]) follows its steps.
    fn device_stream(&self) -> Option<std::sync::Arc<cudarc::driver::CudaStream>> {
        None
    }

    /// Readies [`Solver::enqueue_leaving_velocity`] (compiles what it
    /// needs), where this solver can leave its velocity: whether it can.
    fn prepare_leaving_velocity(&mut self) -> Result<bool, SolverError> {
        Ok(false)
    }

    /// Queues one step that also leaves the velocity of the state it starts
    /// from, as [`Solver::fields`] reports it, in three planes of n floats
    /// (ux, uy, uz) in `planes` (on this solver's GPU), for work queued
    /// after it on [`Solver::device_stream`]. `Ok(false)`: this solver
    /// cannot, and queued nothing.
    fn enqueue_leaving_velocity(
        &mut self,
        _planes: &mut cudarc::driver::CudaSlice<f32>,
    ) -> Result<bool, SolverError> {
        Ok(false)
    }
}

/// A display frame handed over by [`Solver::take_display`].
#[derive(Debug)]
pub struct TakenFrame {
    pub step: u64,
    /// The same frame in shared GPU memory, when it was written there.
    pub shared: Option<display::SharedLease>,
    /// Whether the frame was copied into the host's fields (else they are
    /// left empty, of the frame's size).
    pub host: bool,
    /// Whether every value is finite and within the stable speed
    /// ([`Fields::is_stable`], checked where the frame was made).
    pub stable: bool,
}

impl fmt::Display for Grid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}x{}", self.size[0], self.size[1], self.size[2])
    }
}

/// Mean relative change of the velocity per step between two field snapshots
/// `steps` apart: Σ|u − u_prev| / Σ|u| / steps.
/// The steadiness criterion of the original work.
pub fn relative_change(now: &Fields, before: &Fields, steps: u64) -> f64 {
    change_sums(now, before, 0..now.rho.len(), steps).ratio()
}

/// The sums of [`relative_change`] over the cells `cells`.
pub fn change_sums(
    now: &Fields,
    before: &Fields,
    cells: std::ops::Range<usize>,
    steps: u64,
) -> ChangeSums {
    use rayon::prelude::*;
    // Fixed chunks summed in order: the same result on any thread count.
    const CHUNK: usize = 1 << 16;
    let start = cells.start;
    let (diff, norm) = (0..cells.len().div_ceil(CHUNK))
        .into_par_iter()
        .map(|k| {
            let (mut diff, mut norm) = (0.0f64, 0.0f64);
            for c in start + k * CHUNK..(start + (k + 1) * CHUNK).min(cells.end) {
                let (a, b) = (now.velocity(c), before.velocity(c));
                let d: f64 = (0..3).map(|k| (a[k] as f64 - b[k] as f64).powi(2)).sum();
                let n: f64 = (0..3).map(|k| (a[k] as f64).powi(2)).sum();
                diff += d.sqrt();
                norm += n.sqrt();
            }
            (diff, norm)
        })
        .collect::<Vec<_>>()
        .into_iter()
        .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
    ChangeSums { diff, norm, steps }
}

/// Sums of the steadiness criterion over some cells (see [`relative_change`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ChangeSums {
    /// Σ|u − u_prev|.
    pub diff: f64,
    /// Σ|u|.
    pub norm: f64,
    /// Steps between the two snapshots.
    pub steps: u64,
}

impl ChangeSums {
    pub fn ratio(&self) -> f64 {
        if self.norm == 0.0 {
            return if self.diff == 0.0 { 0.0 } else { f64::INFINITY };
        }
        self.diff / self.norm / self.steps.max(1) as f64
    }
}

/// Validates parameters every solver needs.
pub fn check_params(params: &Params) -> Result<(), SolverError> {
    if !(params.tau > 0.5) || !params.tau.is_finite() {
        return Err(SolverError::InvalidParams(format!(
            "τ = {} must be greater than 0.5 (viscosity must be positive)",
            params.tau
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_portable_logarithm_is_within_a_few_ulps_of_the_library_one() {
        let mut worst = 0.0f64;
        for k in 0..200_000 {
            let x = 1.0 + k as f32 * 0.01;
            let exact = (x as f64).ln();
            worst = worst.max(((super::ln(x) as f64) - exact).abs() / exact.max(1e-3));
        }
        // Around the ends of the mantissa's range [√½, √2) too.
        use std::f32::consts::{FRAC_1_SQRT_2, SQRT_2};
        let edges = [FRAC_1_SQRT_2, SQRT_2].map(|v| [v * 0.9999, v, v * 1.0001]);
        for x in [0.001f32, 0.5, 1.0, 2.0, 1e6]
            .into_iter()
            .chain(edges.into_iter().flatten())
        {
            let exact = (x as f64).ln();
            assert!(
                (super::ln(x) as f64 - exact).abs() < 3e-7 * exact.abs().max(1.0),
                "{x}"
            );
        }
        assert!(worst < 3e-7, "{worst}");
    }
}
