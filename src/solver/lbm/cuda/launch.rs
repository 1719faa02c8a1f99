//! Launching the step kernels: the kernel parameters' C mirror, the choice of
//! bulk kernel and its launch shape (a pure function, tested on the CPU), and
//! launches as programmatic dependents on Hopper and newer.

use std::ffi::c_void;
use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{
    sys, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg,
};

use super::{dev, CudaSolver};
use crate::solver::lbm::lattice;
use crate::solver::{Grid, Params, Profile, SolverError, VELOCITY_SLOTS};

/// Threads per block along x for the lattice kernels (tunable by `bench --block`).
pub const DEFAULT_BLOCK: u32 = 128;
/// Blocks of the grid-stride reduction kernels (`stats`, `forces`).
pub(super) const REDUCTION_BLOCKS: u32 = 1024;
pub(super) const REDUCTION_THREADS: u32 = 256;

/// Kernel parameters, by value. Keep in sync with `struct Params` in
/// kernels/lbm/d3q19.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct CudaParams {
    pub nx: u32,
    pub ny: u32,
    pub nz: u32,
    /// Bit a set when axis a is periodic.
    pub periodic: u32,
    pub omega_plus: f32,
    pub omega_minus: f32,
    pub force: [f32; 3],
    pub has_force: u32,
    /// τ, 18√2 C_s² (0: no subgrid model) and the `MODEL_*` bits of kernels
    /// compiled with `COLLISION_MODEL`.
    pub tau0: f32,
    pub smagorinsky: f32,
    pub model: u32,
    pub velocities: [[f32; 3]; VELOCITY_SLOTS],
    /// Per slot: 0 uniform, 1 | axes << 4 parabolic, 2 log law
    /// ([`crate::solver::Profile`]), and the log law's roughness.
    pub profile: [u32; VELOCITY_SLOTS],
    pub roughness: [f32; VELOCITY_SLOTS],
    pub wall_lo: [f32; 3],
    pub wall_hi: [f32; 3],
    /// Interpolated walls: the boundary list's length and device address, and
    /// the device address of its links' q (0: none; see
    /// [`crate::solver::lbm::links`]). Addresses in 32-bit halves, low first,
    /// so that the struct stays 4-byte aligned (the kernel file says why).
    pub near_count: u32,
    pub near: [u32; 2],
    pub link_q: [u32; 2],
    /// Where a step leaves its velocity (kernels compiled with
    /// `WRITE_VELOCITY`, and `velocity_rest`), in halves as above.
    pub velocity: [u32; 2],
}
const _: () = assert!(
    std::mem::size_of::<CudaParams>()
        == 4 * 13 + 4 * 3 * VELOCITY_SLOTS + 8 * VELOCITY_SLOTS + 24 + 4 + 16 + 8
);
const _: () = assert!(std::mem::align_of::<CudaParams>() == 4);

/// A device address as the kernels' `Params` keep it.
pub fn address_halves(address: u64) -> [u32; 2] {
    [address as u32, (address >> 32) as u32]
}

// SAFETY: plain old data with the C layout of the kernel's `Params`.
unsafe impl DeviceRepr for CudaParams {}

impl CudaParams {
    pub fn new(grid: &Grid, p: &Params) -> CudaParams {
        let (omega_plus, omega_minus) = lattice::relaxation_rates(p.collision, p.tau);
        CudaParams {
            nx: grid.size[0] as u32,
            ny: grid.size[1] as u32,
            nz: grid.size[2] as u32,
            periodic: (0..3)
                .filter(|&a| grid.periodic[a])
                .map(|a| 1u32 << a)
                .sum(),
            omega_plus,
            omega_minus,
            force: p.force,
            has_force: (p.force != [0.0; 3]) as u32,
            tau0: p.tau,
            smagorinsky: p.model().map_or(0.0, |m| m.smagorinsky),
            model: p
                .model()
                .map_or(0, |m| m.trt as u32 | (m.regularized as u32) << 1),
            velocities: p.velocities,
            profile: p.profiles.slots.map(|s| match s {
                Profile::Uniform => 0,
                Profile::Parabolic { axes } => {
                    1 | (0..3).filter(|&a| axes[a]).map(|a| 16u32 << a).sum::<u32>()
                }
                Profile::Log { .. } => 2,
            }),
            roughness: p.profiles.slots.map(|s| match s {
                Profile::Log { roughness } => roughness,
                _ => 0.0,
            }),
            wall_lo: p.profiles.lo,
            wall_hi: p.profiles.hi,
            near_count: 0,
            near: [0; 2],
            link_q: [0; 2],
            velocity: [0; 2],
        }
    }

    /// These parameters with the interpolated walls of `other`.
    pub fn with_links_of(self, other: &CudaParams) -> CudaParams {
        CudaParams {
            near_count: other.near_count,
            near: other.near,
            link_q: other.link_q,
            ..self
        }
    }
}

pub(super) enum Lattice {
    Fp32(CudaSlice<f32>),
    Fp16(CudaSlice<u16>),
}

impl Lattice {
    /// Pushes the population array as a kernel argument the kernel reads.
    pub(super) fn arg<'a>(&'a self, b: &mut cudarc::driver::LaunchArgs<'a>) {
        match self {
            Lattice::Fp32(f) => b.arg(f),
            Lattice::Fp16(f) => b.arg(f),
        };
    }

    /// Pushes the population array as a kernel argument the kernel writes.
    pub(super) fn arg_mut<'a>(&'a mut self, b: &mut cudarc::driver::LaunchArgs<'a>) {
        match self {
            Lattice::Fp32(f) => b.arg(f),
            Lattice::Fp16(f) => b.arg(f),
        };
    }
}

/// A step kernel's argument pointers, on the stack: the step launches its
/// kernels every step, and a heap vector each time was needless.
struct StepArgs {
    ptrs: [*mut c_void; 10],
    len: usize,
}

impl StepArgs {
    fn new() -> StepArgs {
        StepArgs {
            ptrs: [std::ptr::null_mut(); 10],
            len: 0,
        }
    }

    fn push(&mut self, arg: *mut c_void) {
        self.ptrs[self.len] = arg;
        self.len += 1;
    }

    fn extend<const N: usize>(&mut self, args: [*mut c_void; N]) {
        args.into_iter().for_each(|a| self.push(a));
    }

    fn as_mut_slice(&mut self) -> &mut [*mut c_void] {
        &mut self.ptrs[..self.len]
    }
}

/// Launches a bulk step kernel. With `overlapped` (Hopper and newer) it is a
/// programmatic dependent of the kernel before it in the stream: it may start
/// while that kernel's last blocks run, and its blocks wait (`griddepcontrol.wait`
/// in the kernel) until that kernel's writes are visible. Steps at 256³ take
/// under a millisecond, so the launch latency otherwise costs about 0.6%.
///
/// # Safety
/// `args` must point to values matching the kernel's parameters.
unsafe fn launch_step_kernel(
    stream: &CudaStream,
    function: &CudaFunction,
    cfg: LaunchConfig,
    overlapped: bool,
    args: &mut [*mut c_void],
) -> Result<(), SolverError> {
    // The raw launch uses the thread's current context, which with several
    // GPUs may be another device's (cudarc's launches bind it the same way).
    stream.context().bind_to_thread().map_err(dev)?;
    // SAFETY: an all-zero attribute is a valid value of the C struct.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: &raw mut attr,
        numAttrs: u32::from(overlapped),
    };
    // SAFETY: the caller vouches for the arguments; the config and attribute
    // live until the call returns.
    unsafe {
        sys::cuLaunchKernelEx(
            &config,
            function.cu_function(),
            args.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
    .map_err(dev)
}

/// The stream and events of the odd step's boundary kernel beside the bulk
/// kernel ([`CudaSolver::launch_odd_beside`]).
pub(super) struct Beside {
    /// Of the greatest priority, so that the boundary kernel's blocks, few
    /// and slow, start first.
    stream: Arc<CudaStream>,
    forked: cudarc::driver::CudaEvent,
    joined: cudarc::driver::CudaEvent,
}

impl Beside {
    pub(super) fn new(ctx: &Arc<cudarc::driver::CudaContext>) -> Result<Beside, SolverError> {
        use cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING;
        ctx.bind_to_thread().map_err(dev)?;
        let (_, greatest) = cudarc::driver::result::stream::get_priority_range().map_err(dev)?;
        Ok(Beside {
            stream: ctx.new_stream_with_priority(greatest).map_err(dev)?,
            forked: ctx.new_event(Some(CU_EVENT_DISABLE_TIMING)).map_err(dev)?,
            joined: ctx.new_event(Some(CU_EVENT_DISABLE_TIMING)).map_err(dev)?,
        })
    }
}

/// Largest share of `aa_odd4` warps with partly bulk quads
/// (`flags::mixed_quad_share`) for which it is chosen over `aa_odd2`.
const MIXED_QUAD_LIMIT: f64 = 0.1;

/// Fewest cells in an even step's launch for `aa_even4`: a thread's four
/// cells leave small grids too few blocks to fill the GPU (H100, 16-bit:
/// the cavity's box of 66³ cells 26 028 → 24 428 MLUPS, the 256×128×64
/// box 33 584 → 33 862; BENCHMARKS.md, twenty-eighth session).
pub const EVEN_QUAD_CELLS: usize = 1 << 20;

/// Threads per block of `aa_even2` and `aa_odd2` (their `__launch_bounds__`).
const PAIR_BLOCK: u32 = 128;

/// Most threads per block of `aa_odd4` (its `__launch_bounds__`).
const QUAD_BLOCK: u32 = 256;

pub(super) struct Kernels {
    pub(super) even: CudaFunction,
    /// Two cells per thread with accesses twice as wide, where the grid allows.
    pub(super) even2: CudaFunction,
    /// Four cells per thread (16-bit storage only).
    pub(super) even4: Option<CudaFunction>,
    pub(super) odd2: CudaFunction,
    /// `odd2` with warps that run on from one row into the next.
    pub(super) odd2_rows: CudaFunction,
    /// Four cells per thread (FP32 only).
    pub(super) odd4: Option<CudaFunction>,
    pub(super) odd: CudaFunction,
    /// `even2` with the step's NEAR cells in the same launch
    /// (`near_schedule`).
    pub(super) even2_near: CudaFunction,
    pub(super) boundary: CudaFunction,
    /// The odd step's NEAR cells, by their rules (`boundary::odd_rules`),
    /// and its light cells (`boundary::light_mask`).
    pub(super) boundary_rules: CudaFunction,
    /// The same without the free-slip, edge and outlet code.
    pub(super) boundary_rules_plain: CudaFunction,
    /// Threads a cell of `boundary_rules` (`compile::rules_lanes`).
    pub(super) rules_lanes: u32,
    pub(super) fields: CudaFunction,
    pub(super) average: CudaFunction,
    pub(super) display: CudaFunction,
    /// The display frame from the fields a step left (`enqueue_leaving_fields`).
    pub(super) display_planes: CudaFunction,
    pub(super) stats: CudaFunction,
    pub(super) forces: CudaFunction,
    pub(super) init_uniform: CudaFunction,
    pub(super) fill_f32: CudaFunction,
    pub(super) velocity_change: CudaFunction,
    pub(super) unpack: CudaFunction,
    pub(super) links_initial: CudaFunction,
    pub(super) velocity_rest: CudaFunction,
}

/// The bulk kernel of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKernel {
    /// One cell per thread (`aa_even`).
    Even,
    /// Two cells per thread with accesses twice as wide (`aa_even2`).
    Even2,
    /// Four cells per thread, 16-bit storage only (`aa_even4`).
    Even4,
    Odd,
    Odd2,
    /// `Odd2` over each layer's pairs in a row of blocks (`aa_odd2_rows`).
    Odd2Rows,
    /// Four cells per thread, FP32 only (`aa_odd4`).
    Odd4,
}

/// The module of a step's kernels: `velocity`, compiled with
/// `WRITE_VELOCITY`, with `leave_velocity` (once loaded), else `plain`.
fn step_kernels<'a>(
    plain: &'a Kernels,
    velocity: &'a Option<Kernels>,
    leave_velocity: bool,
) -> &'a Kernels {
    match (velocity, leave_velocity) {
        (Some(k), true) => k,
        _ => plain,
    }
}

impl Kernels {
    pub(super) fn step(&self, kernel: StepKernel) -> &CudaFunction {
        match kernel {
            StepKernel::Even => &self.even,
            StepKernel::Even2 => &self.even2,
            // `step_launch` is only asked for it where `aa_even4` was loaded.
            StepKernel::Even4 => self.even4.as_ref().unwrap_or(&self.even2),
            StepKernel::Odd => &self.odd,
            StepKernel::Odd2 => &self.odd2,
            StepKernel::Odd2Rows => &self.odd2_rows,
            // `odd_quads` is only set where `aa_odd4` was loaded.
            StepKernel::Odd4 => self.odd4.as_ref().unwrap_or(&self.odd2),
        }
    }

    /// The variant of `kernel` that also updates the step's NEAR cells,
    /// where it has one (the even step's paired kernel: the kernel file says
    /// why the others have none).
    pub(super) fn step_near(&self, kernel: StepKernel) -> Option<&CudaFunction> {
        match kernel {
            StepKernel::Even2 => Some(&self.even2_near),
            _ => None,
        }
    }
}

/// Marks the blocks of NEAR cells in a `_near` launch's schedule.
pub const NEAR_BLOCK: u32 = 1 << 31;

/// The order of the blocks of `aa_even2_near`, launched as `aa_even2`'s
/// `cfg` (step_launch) from cell `c_begin`, with the NEAR cells `near` of its
/// layers: `aa_even2`'s block indices, and `NEAR_BLOCK | i` for the block of
/// NEAR cells i·threads.. right after the bulk block of its last cell (the
/// kernel file says why). One entry per block of the launch.
pub fn near_schedule(cfg: &LaunchConfig, c_begin: u64, near: &[u32]) -> Vec<u32> {
    let threads = cfg.block_dim.0 as usize;
    // A pair of cells per thread.
    let owner = |cell: u32| ((cell as u64 - c_begin) / 2 / threads as u64) as u32;
    let mut order = Vec::with_capacity(cfg.grid_dim.0 as usize + near.len().div_ceil(threads));
    let mut blocks = near.chunks(threads).enumerate().peekable();
    for b in 0..cfg.grid_dim.0 {
        order.push(b);
        while let Some((i, _)) = blocks.next_if(|(_, c)| owner(c[c.len() - 1]) <= b) {
            order.push(NEAR_BLOCK | i as u32);
        }
    }
    order
}

/// Whether the odd step should take `aa_odd4`: it needs rows of a multiple of
/// 4 cells, and where walls or inlets end the rows (a share of its warps
/// above [`MIXED_QUAD_LIMIT`] holds partly bulk quads, whose lanes diverge)
/// `aa_odd2` is faster.
pub fn prefers_odd_quads(loaded: bool, nx: usize, mixed_quad_share: f64) -> bool {
    loaded && nx.is_multiple_of(4) && mixed_quad_share <= MIXED_QUAD_LIMIT
}

/// Blocks of `block` threads along x (at most the row rounded up to a warp),
/// one grid row per (y, z).
pub fn lattice_config(size: [usize; 3], block: u32) -> LaunchConfig {
    let [nx, ny, nz] = size;
    let bx = block.min((nx as u32).div_ceil(32) * 32);
    LaunchConfig {
        grid_dim: ((nx as u32).div_ceil(bx), ny as u32, nz as u32),
        block_dim: (bx, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Which of the four-cell kernels a step may take: `aa_even4` (loaded, and
/// the even step lists no NEAR cells in the layers: it has no `_near`
/// variant) and `aa_odd4` (in use); and whether the odd step's pair kernel
/// takes its rows in warps of their own (`Some(false)`), in warps that run
/// on from one row into the next (`Some(true)`), or as [`ODD_ROWS_IDLE`]
/// says (`None`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quads {
    pub even: bool,
    pub odd: bool,
    pub odd_rows: Option<bool>,
}

/// Largest share of idle lanes in the warps of a row of pairs for which the
/// odd step's pair kernel takes a row a block (`aa_odd2`); above it,
/// `aa_odd2_rows`, whose warps run on into the next row. H200, 16-bit: the
/// cavity's rows of 66 cells (48% idle) 21 970 → 23 079 MLUPS, the sphere's
/// of 400 (11%) 32 633 → 34 383, rows of 256 (none) 31 676 → 31 355 (its
/// 16-bit kernel takes 96 registers against 80; BENCHMARKS.md,
/// forty-third session).
pub const ODD_ROWS_IDLE: f64 = 0.05;

/// The share of idle lanes in the warps of a row of `pairs` pairs.
pub fn idle_lanes(pairs: usize) -> f64 {
    1.0 - pairs as f64 / (pairs.div_ceil(32) * 32) as f64
}

/// The bulk kernel and its launch shape for a step of `parity` over the
/// layers `layers` of a grid of `size`; `block` is the single-cell kernels'
/// block and `quads` the four-cell kernels it may take.
pub fn step_launch(
    size: [usize; 3],
    parity: u32,
    layers: Range<usize>,
    block: u32,
    quads: Quads,
) -> (StepKernel, LaunchConfig) {
    let [nx, ny, _] = size;
    if parity == 0 {
        // The wider kernels need aligned pairs (quads) in every slot; with
        // layers of a multiple of 2 (4) cells every layer range groups the
        // same cells (slabs must match one GPU bit for bit).
        let cells = (layers.len() * nx * ny) as u64;
        let paired = (nx * ny).is_multiple_of(2);
        // The paired kernels are compiled for blocks of PAIR_BLOCK threads.
        let (kernel, threads, block) = if quads.even && (nx * ny).is_multiple_of(4) {
            (StepKernel::Even4, cells / 4, PAIR_BLOCK)
        } else if paired {
            (StepKernel::Even2, cells / 2, PAIR_BLOCK)
        } else {
            (StepKernel::Even, cells, block)
        };
        let cfg = LaunchConfig {
            grid_dim: (threads.div_ceil(block as u64) as u32, 1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        };
        return (kernel, cfg);
    }
    let mut cfg = lattice_config(size, block);
    let kernel = if quads.odd {
        // A row in one block up to QUAD_BLOCK threads (rows split into
        // blocks of 128 left warps idle); short rows several to a block.
        let threads = nx as u32 / 4;
        cfg.block_dim.0 = QUAD_BLOCK.min(threads.div_ceil(32) * 32);
        cfg.grid_dim.0 = threads.div_ceil(cfg.block_dim.0);
        if PAIR_BLOCK.is_multiple_of(cfg.block_dim.0) {
            cfg.block_dim.1 = PAIR_BLOCK / cfg.block_dim.0;
            cfg.grid_dim.1 = (ny as u32).div_ceil(cfg.block_dim.1);
        }
        StepKernel::Odd4
    } else if nx.is_multiple_of(2) && quads.odd_rows.unwrap_or(idle_lanes(nx / 2) > ODD_ROWS_IDLE) {
        let threads = (nx / 2 * ny) as u32;
        cfg.block_dim = (PAIR_BLOCK, 1, 1);
        cfg.grid_dim = (threads.div_ceil(PAIR_BLOCK), 1, 1);
        StepKernel::Odd2Rows
    } else if nx.is_multiple_of(2) {
        let threads = nx as u32 / 2;
        cfg.block_dim.0 = PAIR_BLOCK.min(threads.div_ceil(32) * 32);
        cfg.grid_dim.0 = threads.div_ceil(cfg.block_dim.0);
        StepKernel::Odd2
    } else {
        StepKernel::Odd
    };
    cfg.grid_dim.2 = layers.len() as u32;
    (kernel, cfg)
}

/// Poisons a buffer with NaN (checks), with the `fill_f32` kernel.
pub(super) fn fill_nan(
    stream: &Arc<CudaStream>,
    fill_f32: &CudaFunction,
    buf: &mut CudaSlice<f32>,
    cfg: LaunchConfig,
) -> Result<(), SolverError> {
    let (count, nan) = (buf.len() as u64, f32::NAN);
    // SAFETY: fill_f32(out, count, value) over a buffer of `count` floats.
    unsafe {
        stream
            .launch_builder(fill_f32)
            .arg(buf)
            .arg(&count)
            .arg(&nan)
            .launch(cfg)
    }
    .map_err(dev)?;
    Ok(())
}

impl CudaSolver {
    pub(super) fn lattice_config(&self) -> LaunchConfig {
        lattice_config(self.grid.size, self.block)
    }

    pub(super) fn reduction_config(&self) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (REDUCTION_BLOCKS, 1, 1),
            block_dim: (REDUCTION_THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Runs the current step on layers `layers` (time does not advance).
    pub(super) fn launch_layers(&mut self, layers: Range<usize>) -> Result<(), SolverError> {
        self.launch_layers_with(layers, self.kparams, false, self.fuse_near)
    }

    /// Entries `a..z` of `list`: its NEAR cells of `layers`.
    fn entries(&self, list: &[u32], layers: &Range<usize>) -> Range<usize> {
        let nxy = (self.grid.size[0] * self.grid.size[1]) as u64;
        let (c0, c1) = (layers.start as u64 * nxy, layers.end as u64 * nxy);
        let a = list.partition_point(|&c| (c as u64) < c0);
        let z = list.partition_point(|&c| (c as u64) < c1);
        a..z
    }

    /// The four-cell kernels the current step over `layers` may take from
    /// `kernels` (with `fuse` as `fuses_near` takes it): `aa_even4` where it
    /// was loaded and enabled and the even step lists no NEAR cells there
    /// that the paired kernel's `_near` variant would take.
    fn quads(&self, kernels: &Kernels, layers: &Range<usize>, fuse: bool) -> Quads {
        let cells = layers.len() * self.grid.size[0] * self.grid.size[1];
        Quads {
            even: kernels.even4.is_some()
                && !self.fuses_near(StepKernel::Even2, layers, fuse)
                && self.even_quads.unwrap_or(cells >= EVEN_QUAD_CELLS),
            odd: self.odd_quads,
            odd_rows: self.odd_rows,
        }
    }

    /// Whether the bulk kernel of the current step over `layers` is the
    /// `_near` variant of `kernel` (with `fuse`, where it has one and the
    /// even step lists NEAR cells there).
    fn fuses_near(&self, kernel: StepKernel, layers: &Range<usize>, fuse: bool) -> bool {
        fuse && self.kernels.step_near(kernel).is_some()
            && !self.entries(&self.lists.even.cells, layers).is_empty()
    }

    /// The step on `layers` with `params`, from the `WRITE_VELOCITY` module
    /// with `leave_velocity`: one launch of the bulk kernel's `_near` variant
    /// with `fuse` where it has one, else the bulk kernel, then the step's
    /// boundary kernel (`launch_boundaries`).
    fn launch_layers_with(
        &mut self,
        layers: Range<usize>,
        params: CudaParams,
        leave_velocity: bool,
        fuse: bool,
    ) -> Result<(), SolverError> {
        if layers.is_empty() {
            return Ok(());
        }
        let listed = || !self.entries(&self.near, &layers).is_empty();
        if self.parity() == 1 && self.beside.is_some() && self.link.is_none() && listed() {
            return self.launch_odd_beside(layers, params, leave_velocity);
        }
        let fused = self.launch_bulk_with(layers.clone(), params, leave_velocity, fuse)?;
        if !fused {
            self.launch_boundaries(&self.stream, &layers, params, leave_velocity)?;
        }
        Ok(())
    }

    /// The odd step with its boundary kernel on `beside`'s stream, from the
    /// even step's end to the bulk kernel's: the AA scheme gives each slot
    /// one owner a step, and `aa_boundary_rules` and the bulk kernels store
    /// only their own cells' slots. After the bulk kernel, its few blocks
    /// left most of the GPU idle: the cavity's odd step took half as long
    /// again as the box's (BENCHMARKS.md, twenty-fifth session).
    fn launch_odd_beside(
        &mut self,
        layers: Range<usize>,
        params: CudaParams,
        leave_velocity: bool,
    ) -> Result<(), SolverError> {
        let beside = self.beside.as_ref().expect("the caller checked");
        beside.forked.record(&self.stream).map_err(dev)?;
        beside.stream.wait(&beside.forked).map_err(dev)?;
        self.launch_boundaries(&beside.stream, &layers, params, leave_velocity)?;
        beside.joined.record(&beside.stream).map_err(dev)?;
        let fused = self.launch_bulk_with(layers, params, leave_velocity, false)?;
        debug_assert!(!fused, "the odd step has no _near kernel");
        let beside = self.beside.as_ref().expect("the caller checked");
        self.stream.wait(&beside.joined).map_err(dev)
    }

    /// The bulk step kernel of the current step over `layers` with `params`,
    /// from the `WRITE_VELOCITY` module with `leave_velocity`; with `fuse`
    /// its `_near` variant where there is one and the even step lists NEAR
    /// cells there. Returns whether it was that variant (which leaves
    /// nothing to the boundary kernels).
    fn launch_bulk_with(
        &mut self,
        layers: Range<usize>,
        mut params: CudaParams,
        leave_velocity: bool,
        fuse: bool,
    ) -> Result<bool, SolverError> {
        let nxy = self.grid.size[0] * self.grid.size[1];
        let n = self.grid.cells() as u64;
        let parity = self.parity();
        let (c0, c1) = ((layers.start * nxy) as u64, (layers.end * nxy) as u64);
        let mut f = self.lattice_ptr();
        let mut flags = self.flags_dev.device_ptr(&self.stream).0;
        let kernels = step_kernels(&self.kernels, &self.velocity_kernels, leave_velocity);
        let (kernel, mut cfg) = step_launch(
            self.grid.size,
            parity,
            layers.clone(),
            self.block,
            self.quads(kernels, &layers, fuse),
        );
        let fused = match self.fuses_near(kernel, &layers, fuse) {
            true => kernels.step_near(kernel),
            false => None,
        };
        let even = &self.lists.even;
        let near = self.entries(&even.cells, &layers);
        if let (Some(_), Some(q)) = (fused, &even.links_dev) {
            params.link_q = address_halves(q.device_ptr(&self.stream).0);
        }
        let function = fused.unwrap_or(kernels.step(kernel));
        let mut count = near.len() as u32;
        let mut first = near.start as u32;
        let mut schedule = match fused {
            Some(_) => {
                let key = layers.clone();
                let at = match self.near_schedules.iter().position(|s| s.0 == key) {
                    Some(at) => at,
                    None => {
                        let order = near_schedule(&cfg, c0, &even.cells[near.clone()]);
                        let order = self.stream.clone_htod(&order).map_err(dev)?;
                        self.near_schedules.push((key, order));
                        self.near_schedules.len() - 1
                    }
                };
                let order = &self.near_schedules[at].1;
                cfg.grid_dim = (order.len() as u32, 1, 1);
                order.device_ptr(&self.stream).0
            }
            None => 0,
        };
        // u32 entries, so `first` entries in.
        let mut cells = even.cells_dev.device_ptr(&self.stream).0 + 4 * near.start as u64;
        let (mut n, mut c0, mut c1, mut z0) = (n, c0, c1, layers.start as u32);
        let mut args = StepArgs::new();
        args.extend([
            (&raw mut f).cast(),
            (&raw mut flags).cast(),
            (&raw mut params).cast(),
        ]);
        if parity == 0 {
            args.extend([
                (&raw mut n).cast(),
                (&raw mut c0).cast(),
                (&raw mut c1).cast(),
            ]);
        } else {
            args.push((&raw mut z0).cast());
        }
        if fused.is_some() {
            args.extend([
                (&raw mut cells).cast(),
                (&raw mut count).cast(),
                (&raw mut first).cast(),
                (&raw mut schedule).cast(),
            ]);
        }
        // SAFETY: (f, flags, params, n, c_begin, c_end) is the even kernels'
        // signature, (f, flags, params, z0) the odd ones', and aa_even2_near
        // adds (cells, count, first, schedule): `cells` holds the `count`
        // NEAR cells of the layers, from entry `first` of the list, and
        // `schedule` one entry per block of the grid, which its NEAR blocks
        // and aa_even2's blocks make up (near_schedule). The even kernels
        // bound-check against c_end <= n, the odd grid covers layers z0 .. z0
        // + len within the lattice. The argument values outlive the call,
        // which copies them.
        unsafe {
            launch_step_kernel(
                &self.stream,
                function,
                cfg,
                self.overlap_steps,
                args.as_mut_slice(),
            )
        }?;
        Ok(fused.is_some())
    }

    /// The bulk step kernel of the current parity over `layers`, by name
    /// (`_near` where it updates the NEAR cells too).
    pub fn bulk_kernel_name(&self, layers: Range<usize>) -> &'static str {
        let (kernel, _) = step_launch(
            self.grid.size,
            self.parity(),
            layers.clone(),
            self.block,
            self.quads(&self.kernels, &layers, self.fuse_near),
        );
        let fused = self.fuses_near(kernel, &layers, self.fuse_near);
        match (kernel, fused) {
            (StepKernel::Even, _) => "aa_even",
            (StepKernel::Even2, false) => "aa_even2",
            (StepKernel::Even2, true) => "aa_even2_near",
            (StepKernel::Even4, _) => "aa_even4",
            (StepKernel::Odd, _) => "aa_odd",
            (StepKernel::Odd2, _) => "aa_odd2",
            (StepKernel::Odd2Rows, _) => "aa_odd2_rows",
            (StepKernel::Odd4, _) => "aa_odd4",
        }
    }

    /// The boundary kernel of the current step over the NEAR cells of
    /// `layers` that its bulk kernel left, with `params`, from the
    /// `WRITE_VELOCITY` module with `leave_velocity` (after the bulk
    /// kernel): the even step's `aa_boundary` over its list, the odd step's
    /// `aa_boundary_rules` over its rules' list and its light cells.
    fn launch_boundaries(
        &self,
        stream: &Arc<CudaStream>,
        layers: &Range<usize>,
        mut params: CudaParams,
        leave_velocity: bool,
    ) -> Result<(), SolverError> {
        let kernels = step_kernels(&self.kernels, &self.velocity_kernels, leave_velocity);
        let lists = &self.lists;
        let odd = self.parity() == 1;
        let (function, list) = match odd {
            false => (&kernels.boundary, &lists.even),
            true if lists.plain => (&kernels.boundary_rules_plain, &lists.rules),
            true => (&kernels.boundary_rules, &lists.rules),
        };
        let near = self.entries(&list.cells, layers);
        let light = match odd {
            true => self.entries(&lists.light.cells, layers),
            false => 0..0,
        };
        if near.is_empty() && light.is_empty() {
            return Ok(());
        }
        if let Some(q) = &list.links_dev {
            params.link_q = address_halves(q.device_ptr(&self.stream).0);
        }
        let (mut count, mut first) = (near.len() as u32, near.start as u32);
        let mut cells = list.cells_dev.device_ptr(&self.stream).0 + 4 * near.start as u64;
        let mut rules = lists.rules_dev.device_ptr(&self.stream).0 + 8 * near.start as u64;
        let mut light_count = light.len() as u32;
        let mut light_cells =
            lists.light.cells_dev.device_ptr(&self.stream).0 + 4 * light.start as u64;
        let mut masks = lists.light_masks_dev.device_ptr(&self.stream).0 + 8 * light.start as u64;
        let mut f = self.lattice_ptr();
        let mut flags = self.flags_dev.device_ptr(&self.stream).0;
        let mut args = StepArgs::new();
        args.extend([
            (&raw mut f).cast(),
            (&raw mut flags).cast(),
            (&raw mut params).cast(),
            (&raw mut cells).cast(),
        ]);
        if odd {
            args.push((&raw mut rules).cast());
        }
        args.extend([(&raw mut count).cast(), (&raw mut first).cast()]);
        if odd {
            args.extend([
                (&raw mut light_cells).cast(),
                (&raw mut masks).cast(),
                (&raw mut light_count).cast(),
            ]);
        }
        // The odd step's kernel takes `rules_lanes` threads a cell of its
        // rules, then one a light cell, each part in whole blocks.
        let blocks = match odd {
            false => u64::from(count).div_ceil(128),
            true => {
                (u64::from(count) * u64::from(kernels.rules_lanes)).div_ceil(128)
                    + u64::from(light_count).div_ceil(128)
            }
        };
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: aa_boundary takes (f, flags, params, cells, count, first),
        // aa_boundary_rules (f, flags, params, cells, rules, count, first,
        // light cells, masks, light count); its first blocks take the
        // `count` cells, `rules_lanes` threads a cell in blocks of 128 (a
        // multiple of it), the blocks after them the light cells, a thread
        // each. `cells` (and `rules`) hold `count` entries from entry `first`
        // of their list, whose links `params` points at, the light cells and
        // their masks `light_count`. The argument values outlive the call,
        // which copies them.
        unsafe {
            launch_step_kernel(
                stream,
                function,
                cfg,
                self.overlap_steps && Arc::ptr_eq(stream, &self.stream),
                args.as_mut_slice(),
            )
        }?;
        Ok(())
    }

    pub(super) fn launch_step(&mut self) -> Result<(), SolverError> {
        self.launch_layers(self.owned.clone())?;
        self.t += 1;
        Ok(())
    }

    /// The step kernels compiled with `WRITE_VELOCITY`, compiled on first
    /// use (and again after the collision model changes).
    pub(super) fn velocity_kernels(&mut self) -> Result<&Kernels, SolverError> {
        if self.velocity_kernels.is_none() {
            let build = self.build.leaving_velocity();
            self.velocity_kernels = Some(build.load(&self.ctx)?);
        }
        Ok(self.velocity_kernels.as_ref().expect("just loaded"))
    }

    /// One step that also leaves the velocity of the state it starts from
    /// at the device address `planes` (three planes of n floats, as `fields`
    /// reports it; with bit 0 of the address set, the density too, in a
    /// fourth) in the cells that run and the inlets: `velocity_rest`
    /// writes the inlets', before the step, and the step kernels, compiled
    /// with `WRITE_VELOCITY`, the others as they read them.
    pub(super) fn launch_step_leaving_velocity(&mut self, planes: u64) -> Result<(), SolverError> {
        self.velocity_kernels()?;
        let mut params = self.kparams;
        params.velocity = address_halves(planes);
        let parity = self.parity();
        if self.inlets {
            let cfg = self.lattice_config();
            let mut b = self.stream.launch_builder(&self.kernels.velocity_rest);
            self.lattice.arg(&mut b);
            b.arg(&self.flags_dev).arg(&params).arg(&parity);
            // SAFETY: velocity_rest(const store_t*, const u8*, Params, u32);
            // the grid covers the lattice, and `planes` holds 3n floats, 4n
            // with bit 0 set (the callers' word: Solver::enqueue_leaving_velocity,
            // enqueue_leaving_fields).
            unsafe { b.launch(cfg) }.map_err(dev)?;
        }
        self.launch_layers_with(self.owned.clone(), params, true, self.fuse_near)?;
        self.t += 1;
        Ok(())
    }

    /// Cells of the owned layers, as a range of cell indices.
    pub(super) fn owned_cells(&self) -> (u64, u64) {
        let nxy = (self.grid.size[0] * self.grid.size[1]) as u64;
        (self.owned.start as u64 * nxy, self.owned.end as u64 * nxy)
    }

    /// Where the time of `steps` steps goes, kernel by kernel (a `_near`
    /// kernel's time includes the NEAR cells'): CUDA events
    /// around each launch (which keeps a step kernel from starting under the
    /// previous one, so the sum exceeds a plain step slightly). Milliseconds
    /// per kernel name, summed.
    pub fn profile_steps(&mut self, steps: u64) -> Result<Vec<(&'static str, f64)>, SolverError> {
        use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;
        let mut times: Vec<(&'static str, f64)> = Vec::new();
        let mut add = |name: &'static str, ms: f64| match times.iter_mut().find(|t| t.0 == name) {
            Some(t) => t.1 += ms,
            None => times.push((name, ms)),
        };
        let owned = self.owned.clone();
        let mut events = Vec::new();
        for _ in 0..steps {
            let bulk = self.bulk_kernel_name(owned.clone());
            let e0 = self
                .stream
                .record_event(Some(CU_EVENT_DEFAULT))
                .map_err(dev)?;
            let overlap = std::mem::replace(&mut self.overlap_steps, false);
            let result = self.launch_bulk_with(owned.clone(), self.kparams, false, self.fuse_near);
            self.overlap_steps = overlap;
            let fused = result?;
            let e1 = self
                .stream
                .record_event(Some(CU_EVENT_DEFAULT))
                .map_err(dev)?;
            if !fused {
                let overlap = std::mem::replace(&mut self.overlap_steps, false);
                let result = self.launch_boundaries(&self.stream, &owned, self.kparams, false);
                self.overlap_steps = overlap;
                result?;
            }
            let e2 = self
                .stream
                .record_event(Some(CU_EVENT_DEFAULT))
                .map_err(dev)?;
            let boundary = match self.parity() {
                0 => "aa_boundary even",
                _ => "aa_boundary odd",
            };
            events.push((bulk, (!fused).then_some(boundary), e0, e1, e2));
            self.t += 1;
        }
        self.stream.synchronize().map_err(dev)?;
        for (bulk, boundary, e0, e1, e2) in events {
            add(bulk, e0.elapsed_ms(&e1).map_err(dev)? as f64);
            if let Some(boundary) = boundary {
                add(boundary, e1.elapsed_ms(&e2).map_err(dev)? as f64);
            }
        }
        Ok(times)
    }

    /// Launches `n` steps without waiting (benchmarks time them with events).
    pub fn enqueue_steps(&mut self, n: u64) -> Result<(), SolverError> {
        for _ in 0..n {
            self.launch_step()?;
        }
        Ok(())
    }

    pub(super) fn parity(&self) -> u32 {
        (self.t % 2) as u32
    }

    /// Whether the odd step uses `aa_odd4` (FP32, nx a multiple of 4); by
    /// default only where few of its warps hold partly bulk quads. Checks turn
    /// it on to compare both kernels with the CPU.
    pub fn set_odd_quads(&mut self, on: bool) {
        self.odd_quads = on && self.kernels.odd4.is_some() && self.grid.size[0].is_multiple_of(4);
    }

    /// Whether the even step uses `aa_even4` (16-bit storage, where the
    /// even step lists no NEAR cells) wherever the layers allow, or the
    /// paired kernels; `None` (the default): the quads from
    /// [`EVEN_QUAD_CELLS`] cells a launch on. Checks run both on small grids
    /// and compare them bit for bit.
    pub fn set_even_quads(&mut self, on: Option<bool>) {
        self.even_quads = on;
    }

    /// Whether the step updates the NEAR cells in the bulk kernel's launch
    /// where that kernel has a `_near` variant (the default), or with
    /// `aa_boundary` after it. Checks and benchmarks run both.
    pub fn set_fuse_near(&mut self, on: bool) {
        self.fuse_near = on;
    }

    pub(super) fn lattice_ptr(&self) -> sys::CUdeviceptr {
        match &self.lattice {
            Lattice::Fp32(f) => f.device_ptr(&self.stream).0,
            Lattice::Fp16(f) => f.device_ptr(&self.stream).0,
        }
    }
}

/// Decodes the 16-bit storage format of `kernels/lbm/d3q19.cu` (sign, 4 exponent
/// bits of bias 15, 11 mantissa bits; subnormals below 2^-14). Exact; the same
/// operations as the kernel.
pub fn fp16c_decode(h: u16) -> f32 {
    let h = h as u32;
    f32::from_bits(((h & 0x8000) << 16) | ((h & 0x7fff) << 12)) * f32::from_bits(0x7780_0000)
    // 2^112
}

/// Encodes to the 16-bit storage format as the kernel does: round to nearest,
/// ties away from zero (twice in the subnormal range), saturating at |v| ≥ 2
/// and for NaN.
pub fn fp16c_encode(v: f32) -> u16 {
    let a = (v.abs() * f32::from_bits(0x0780_0000)).to_bits(); // 2^-112
    let r = (a + 0x800).min(0x7ff_f000) >> 12;
    (((v.to_bits() >> 16) & 0x8000) | r) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    type Shape = (StepKernel, (u32, u32, u32), (u32, u32, u32));

    /// The kernel and the grid and block dimensions of a launch.
    fn launch(size: [usize; 3], parity: u32, layers: Range<usize>, block: u32, odd: bool) -> Shape {
        let quads = Quads {
            even: false,
            odd,
            odd_rows: Some(false),
        };
        let (k, c) = step_launch(size, parity, layers, block, quads);
        assert_eq!(c.shared_mem_bytes, 0);
        (k, c.grid_dim, c.block_dim)
    }

    #[test]
    fn even_steps_pair_cells_where_the_layers_hold_an_even_count() {
        assert_eq!(
            launch([64, 64, 64], 0, 0..64, 128, true),
            (StepKernel::Even2, (1024, 1, 1), (128, 1, 1))
        );
        // A slab's layers: the same pairs as one lattice.
        assert_eq!(
            launch([64, 64, 64], 0, 10..20, 96, false),
            (StepKernel::Even2, (160, 1, 1), (128, 1, 1))
        );
        assert_eq!(
            launch([5, 3, 7], 0, 0..7, 96, false),
            (StepKernel::Even, (2, 1, 1), (96, 1, 1))
        );
    }

    #[test]
    fn even_steps_take_quads_where_allowed_and_the_layers_hold_a_multiple_of_four() {
        let even = Quads {
            even: true,
            odd: false,
            odd_rows: None,
        };
        let shape = |size, layers| {
            let (k, c) = step_launch(size, 0, layers, 96, even);
            (k, c.grid_dim, c.block_dim)
        };
        assert_eq!(
            shape([64, 64, 64], 0..64),
            (StepKernel::Even4, (512, 1, 1), (128, 1, 1))
        );
        // A slab's layers group the same cells as one lattice.
        assert_eq!(
            shape([66, 10, 20], 3..9),
            (StepKernel::Even4, (8, 1, 1), (128, 1, 1))
        );
        assert_eq!(
            shape([66, 11, 20], 0..20),
            (StepKernel::Even2, (57, 1, 1), (128, 1, 1))
        );
        assert_eq!(
            shape([5, 3, 7], 0..7),
            (StepKernel::Even, (2, 1, 1), (96, 1, 1))
        );
    }

    #[test]
    fn odd_steps_take_the_widest_kernel_the_rows_allow() {
        // Long rows: one row of quads per block of up to 256 threads.
        assert_eq!(
            launch([640, 8, 8], 1, 0..8, 128, true),
            (StepKernel::Odd4, (1, 8, 8), (160, 1, 1))
        );
        assert_eq!(
            launch([2048, 4, 4], 1, 1..3, 128, true),
            (StepKernel::Odd4, (2, 4, 2), (256, 1, 1))
        );
        // Short rows: several rows to a block of 128.
        assert_eq!(
            launch([68, 10, 6], 1, 0..6, 128, true),
            (StepKernel::Odd4, (1, 3, 6), (32, 4, 1))
        );
        assert_eq!(
            launch([66, 10, 6], 1, 2..5, 128, false),
            (StepKernel::Odd2, (1, 10, 3), (64, 1, 1))
        );
        assert_eq!(
            launch([65, 10, 6], 1, 0..6, 128, false),
            (StepKernel::Odd, (1, 10, 6), (96, 1, 1))
        );
    }

    #[test]
    fn odd_pair_warps_run_on_into_the_next_row_where_rows_leave_lanes_idle() {
        let shape = |size: [usize; 3], odd_rows| {
            let quads = Quads {
                even: false,
                odd: false,
                odd_rows,
            };
            let (k, c) = step_launch(size, 1, 2..5, 128, quads);
            (k, c.grid_dim, c.block_dim)
        };
        // Rows of 33 pairs: a layer's 330 pairs in three blocks and a part.
        assert_eq!(
            shape([66, 10, 6], None),
            (StepKernel::Odd2Rows, (3, 1, 3), (128, 1, 1))
        );
        assert_eq!(
            shape([66, 10, 6], Some(false)),
            (StepKernel::Odd2, (1, 10, 3), (64, 1, 1))
        );
        // Rows of 200 pairs leave an eighth of the lanes idle, rows of 128
        // none; rows of odd length take the single-cell kernel either way.
        assert_eq!(
            shape([400, 10, 6], None),
            (StepKernel::Odd2Rows, (16, 1, 3), (128, 1, 1))
        );
        assert_eq!(
            shape([400, 10, 6], Some(false)),
            (StepKernel::Odd2, (2, 10, 3), (128, 1, 1))
        );
        assert_eq!(
            shape([256, 10, 6], None),
            (StepKernel::Odd2, (1, 10, 3), (128, 1, 1))
        );
        assert_eq!(shape([65, 10, 6], Some(true)).0, StepKernel::Odd);
        assert_eq!(idle_lanes(33), 31.0 / 64.0);
        assert_eq!(idle_lanes(128), 0.0);
        assert!((idle_lanes(200) - 24.0 / 224.0).abs() < 1e-12);
    }

    #[test]
    fn near_blocks_follow_the_bulk_block_of_their_last_cell() {
        for (size, layers) in [
            ([64, 64, 64], 0..64),
            ([64, 64, 64], 8..24),
            ([66, 40, 30], 3..30),
            ([16, 4, 4], 0..4),
        ] {
            let (kernel, cfg) = step_launch(size, 0, layers.clone(), 128, Quads::default());
            assert_eq!(kernel, StepKernel::Even2);
            let [nx, ny, _] = size;
            let c_begin = (layers.start * nx * ny) as u64;
            // Cells of the layers' faces along x and y, and every 7th.
            let near: Vec<u32> = (layers.start * nx * ny..layers.end * nx * ny)
                .filter(|c| {
                    let (x, y) = (c % nx, c / nx % ny);
                    x == 0 || x == nx - 1 || y == 0 || c % 7 == 0
                })
                .map(|c| c as u32)
                .collect();
            let order = near_schedule(&cfg, c_begin, &near);
            assert_eq!(
                order.len(),
                cfg.grid_dim.0 as usize + near.len().div_ceil(128)
            );
            let (mut next_near, mut next_bulk) = (0, 0);
            for (k, &s) in order.iter().enumerate() {
                if s & NEAR_BLOCK == 0 {
                    assert_eq!(s, next_bulk);
                    next_bulk += 1;
                    continue;
                }
                let i = (s & !NEAR_BLOCK) as usize;
                assert_eq!(i, next_near);
                next_near += 1;
                // Right after the block whose pairs hold its last cell: the
                // bulk entry before it is that block.
                let last = near[(i * 128 + 127).min(near.len() - 1)] as u64;
                let owner = ((last - c_begin) / 2 / 128) as u32;
                let before = order[..k].iter().rev().find(|&&s| s & NEAR_BLOCK == 0);
                assert_eq!(before, Some(&owner), "{size:?} cell {last}");
            }
            assert_eq!(next_near, near.len().div_ceil(128));
            assert_eq!(next_bulk, cfg.grid_dim.0);
        }
    }

    #[test]
    fn odd_quads_only_where_few_warps_hold_partly_bulk_quads() {
        assert!(prefers_odd_quads(true, 256, 0.0));
        assert!(prefers_odd_quads(true, 256, MIXED_QUAD_LIMIT));
        assert!(!prefers_odd_quads(true, 256, 0.5));
        assert!(!prefers_odd_quads(true, 258, 0.0));
        assert!(!prefers_odd_quads(false, 256, 0.0));
    }

    #[test]
    fn storage_format_round_trips_and_rounds_to_nearest() {
        for h in 0u16..=0xffff {
            let f = fp16c_decode(h);
            // Negative zero decodes to -0.0 and encodes back to 0x8000.
            assert_eq!(fp16c_encode(f), h, "{h:#06x} -> {f}");
        }
        // Ordered: positive codes decode to increasing values.
        for h in 0u16..0x7fff {
            assert!(fp16c_decode(h) < fp16c_decode(h + 1));
        }
        // Nearest: the error is at most half the spacing of neighbouring codes.
        let mut seed = 12345u64;
        for _ in 0..100_000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
                * 2f32.powi(-(((seed >> 20) % 20) as i32));
            let h = fp16c_encode(v);
            let d = fp16c_decode(h);
            let mag = h & 0x7fff;
            let up = fp16c_decode((mag + 1).min(0x7fff)) - fp16c_decode(mag);
            let down = if mag > 0 {
                fp16c_decode(mag) - fp16c_decode(mag - 1)
            } else {
                up
            };
            // Double rounding in the subnormal range may add up to 2^-38.
            assert!(
                (d - v).abs() <= 0.5 * up.max(down) * 1.0000001 + 2f32.powi(-38),
                "{v} -> {d}"
            );
        }
        // 11 mantissa bits: relative spacing 2^-11 in the normal range.
        // Ties round away from zero.
        assert_eq!(
            fp16c_decode(fp16c_encode(1.0 + 1.0 / 4096.0)),
            1.0 + 1.0 / 2048.0
        );
        assert_eq!(
            fp16c_decode(fp16c_encode(-1.0 - 1.0 / 4096.0)),
            -1.0 - 1.0 / 2048.0
        );
        assert_eq!(fp16c_decode(fp16c_encode(1.0 + 0.99 / 4096.0)), 1.0);
        assert_eq!(
            fp16c_decode(fp16c_encode(1.0 + 3.0 / 4096.0)),
            1.0 + 2.0 / 2048.0
        );
        assert_eq!(fp16c_encode(5.0), 0x7fff);
        assert_eq!(fp16c_encode(f32::NAN), 0x7fff);
    }

    #[test]
    fn params_mirror_the_kernel_struct() {
        let grid = Grid {
            size: [8, 9, 10],
            periodic: [true, false, true],
        };
        let mut p = Params::new(0.8, lattice::Collision::Bgk);
        p.force = [1e-5, 0.0, 0.0];
        let k = CudaParams::new(&grid, &p);
        assert_eq!(
            (k.nx, k.ny, k.nz, k.periodic, k.has_force),
            (8, 9, 10, 0b101, 1)
        );
        assert_eq!(k.omega_plus, k.omega_minus);
        assert_eq!((k.tau0, k.smagorinsky, k.model), (0.8, 0.0, 0));
        p.collision = lattice::Collision::Trt;
        p.smagorinsky = 0.1;
        let k = CudaParams::new(&grid, &p);
        assert_eq!(k.model, 1, "MODEL_TRT");
        assert!((k.smagorinsky - 18.0 * 2f32.sqrt() * 0.01).abs() < 1e-6);
        p.collision = lattice::Collision::Regularized;
        assert_eq!(CudaParams::new(&grid, &p).model, 2, "MODEL_REGULARIZED");
        // Profile codes: parabolic along y and z, the log law.
        p.profiles.slots[1] = crate::solver::Profile::Parabolic {
            axes: [false, true, true],
        };
        p.profiles.slots[2] = crate::solver::Profile::Log { roughness: 0.5 };
        let k = CudaParams::new(&grid, &p);
        assert_eq!(k.profile[..3], [0, 1 | 32 | 64, 2]);
        assert_eq!(k.roughness[..3], [0.0, 0.0, 0.5]);
        // The kernel's Params: 4 u32, 2 f32, 3 f32, u32, 2 f32, u32, 16x3 f32,
        // 16 u32, 16 f32, 2x3 f32, 5 u32 (the links, none here), 2 u32 (no
        // velocity asked for).
        assert_eq!(
            std::mem::size_of::<CudaParams>(),
            244 + 64 + 64 + 24 + 20 + 8
        );
        assert_eq!((k.near_count, k.near, k.link_q), (0, [0; 2], [0; 2]));
        assert_eq!(k.velocity, [0; 2]);
        assert_eq!(
            address_halves(0x1234_5678_9abc_def0),
            [0x9abc_def0, 0x1234_5678]
        );
    }
}
