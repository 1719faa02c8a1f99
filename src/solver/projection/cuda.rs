//! The projection method's step on a CUDA GPU: `kernels/projection/flow.cu`
//! (explicit terms, Adams–Bashforth, outlets, the pressure equation's
//! right-hand side, the correction) and `kernels/projection/poisson.cu`
//! (multigrid, conjugate gradients, Jacobi). The host's [`Flow`] keeps the
//! geometry, builds the multigrid operators and stays the copy that fields,
//! forces and checkpoints are read from ([`DeviceFlow::pull`]).
//!
//! The kernels keep the CPU's order of operations without FMA contraction;
//! the dot products are trees in double precision, summed in another order
//! than the CPU's, so the CG scalars agree with the CPU's to double rounding
//! and, cast to f32, have so far been equal (`check-cuda --projection-only`:
//! every shipped scenario bit for bit), unless the preconditioner keeps the
//! finest grid's vectors in 16 bits ([`DeviceFlow::set_half_preconditioner`]).
//! CG's scalars stay on the GPU: each iteration reads back one small
//! vector, to decide whether to go on.

use std::sync::Arc;

use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchArgs, LaunchConfig,
    PushKernelArg, ValidAsZeroBits,
};

use super::flow::{Carry, Flow, Kind, StepTimes, BEFORE};
use super::multigrid::{restart, Cycle, Floor, Solve, JACOBI_CHECK, JACOBI_OMEGA};
use super::poisson::{Face, Operator};
use crate::solver::lbm::cuda::guarded;
use crate::solver::SolverError;

const FLOW_SOURCE: &str = include_str!("../../../kernels/projection/flow.cu");
const POISSON_SOURCE: &str = include_str!("../../../kernels/projection/poisson.cu");

/// Most blocks of the first pass of a reduction (256 threads each): enough
/// loads in flight to keep the memory busy (1024 reached a third of it).
const REDUCE_BLOCKS: u32 = 4096;

/// Slots of the scalars CG keeps on the GPU.
const RZ: [i32; 2] = [0, 1];
const RZ_CROSS: i32 = 2;
const PQ: i32 = 3;
const RR: i32 = 4;
const SUM: i32 = 5;
const BB: i32 = 6;
const XX: i32 = 7;
/// The true residual's r·r from `cg_update_check` (RR: the recurrence's).
const RR_TRUE: i32 = 8;
const SCALARS: usize = 9;

fn dev(e: impl std::fmt::Display) -> SolverError {
    SolverError::Device(format!("projection method on the GPU: {e}"))
}

/// Compiles one of the kernel files for compute capability `major.minor`.
pub fn compile(
    name: &str,
    source: &str,
    major: i32,
    minor: i32,
) -> Result<cudarc::nvrtc::Ptx, String> {
    // SAFETY: only tries to open the shared library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(
            "NVRTC (libnvrtc.so) is not installed: install the CUDA toolkit's \
             NVRTC library, or run the projection method with --solver cpu"
                .into(),
        );
    }
    let options = cudarc::nvrtc::CompileOptions {
        options: vec![
            format!("--gpu-architecture=compute_{major}{minor}"),
            // Products rounded as on the CPU.
            "--fmad=false".into(),
            "--std=c++17".into(),
        ],
        ..Default::default()
    };
    match std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(source, options)) {
        Ok(Ok(ptx)) => Ok(ptx),
        Ok(Err(cudarc::nvrtc::CompileError::CompileError { log, .. })) => Err(format!(
            "NVRTC could not compile kernels/projection/{name}:\n{}",
            log.to_string_lossy()
        )),
        Ok(Err(e)) => Err(format!("NVRTC failed on kernels/projection/{name}: {e:?}")),
        Err(_) => Err(format!("NVRTC failed on kernels/projection/{name}")),
    }
}

/// Both kernel files, as NVRTC compiles them (no GPU needed).
pub fn sources() -> [(&'static str, &'static str); 2] {
    [("flow.cu", FLOW_SOURCE), ("poisson.cu", POISSON_SOURCE)]
}

struct Kernels {
    explicit_terms: CudaFunction,
    explicit_terms_listed: CudaFunction,
    eddy_viscosity: CudaFunction,
    cell_velocity: CudaFunction,
    adams_bashforth: CudaFunction,
    carry_outflow: CudaFunction,
    divergence_rhs: CudaFunction,
    correct: CudaFunction,
    fastest: CudaFunction,
    apply: CudaFunction,
    smooth: CudaFunction,
    smooth_half: CudaFunction,
    smooth_packed: CudaFunction,
    jacobi: CudaFunction,
    restrict_residual: CudaFunction,
    restrict_residual_half: CudaFunction,
    restrict_residual_packed: CudaFunction,
    prolong_add: CudaFunction,
    prolong_add_half: CudaFunction,
    to_half: CudaFunction,
    from_half: CudaFunction,
    smooth_split: CudaFunction,
    smooth_split4: CudaFunction,
    smooth_split4_half: CudaFunction,
    half_window: CudaFunction,
    restrict_residual_split4_half: CudaFunction,
    prolong_add_split4_half: CudaFunction,
    restrict_residual_split: CudaFunction,
    restrict_residual_split4: CudaFunction,
    prolong_add_split: CudaFunction,
    prolong_add_split4: CudaFunction,
    to_split: CudaFunction,
    coarsest_gather: CudaFunction,
    coarsest_solve: CudaFunction,
    reduce: CudaFunction,
    reduce_finish: CudaFunction,
    subtract_mean: CudaFunction,
    residual_dots: CudaFunction,
    direction: CudaFunction,
    predict: CudaFunction,
    apply_dot: CudaFunction,
    cg_update_sum: CudaFunction,
    cg_update_check: CudaFunction,
    subtract_mean_dots: CudaFunction,
}

/// One grid of the multigrid hierarchy on the GPU: its operator.
struct Level {
    size: [usize; 3],
    /// `size` as the kernels take it.
    dims: [i32; 3],
    faces: u32,
    /// The periodic axes of odd length (see the `smooth` kernel).
    odd: u32,
    links: CudaSlice<u8>,
    weights: Option<CudaSlice<f32>>,
    diag: CudaSlice<f32>,
    /// Whether `links` holds the diagonal too (the kernels' `diagonal`): the
    /// kernels then take no `diag` and read a byte a cell less.
    packed: bool,
    /// A coarse level's couplings and diagonal in one word a cell, where
    /// they fit ([`packed_coefficients`]), and whether the level kernels
    /// take them instead of `weights` and `diag`
    /// ([`DeviceFlow::set_packed_coarse`]).
    words: Option<CudaSlice<u32>>,
    use_words: bool,
}

/// A null pointer for the kernels' optional arguments.
static NULL: u64 = 0;

impl Level {
    /// Pushes the operator as the level kernels take it: links, weights
    /// (null: all 1; or the packed words), diagonal (null: in the links
    /// byte, or in the packed words), the three sizes, the faces.
    fn push<'a>(&'a self, l: &mut LaunchArgs<'a>) {
        self.push_with(l, &self.links);
    }

    /// [`Level::push`] with `links` in place of the level's own (the
    /// finest grid's with split rows).
    fn push_with<'a>(&'a self, l: &mut LaunchArgs<'a>, links: &'a CudaSlice<u8>) {
        l.arg(links);
        match (&self.words, &self.weights) {
            (Some(words), _) if self.use_words => {
                l.arg(words).arg(&NULL);
            }
            (_, Some(w)) => {
                l.arg(w);
                self.push_diag(l);
            }
            (_, None) => {
                l.arg(&NULL);
                self.push_diag(l);
            }
        }
        l.arg(&self.dims[0])
            .arg(&self.dims[1])
            .arg(&self.dims[2])
            .arg(&self.faces);
    }

    /// The diagonal as the kernels take it: null where `links` holds it.
    fn push_diag<'a>(&'a self, l: &mut LaunchArgs<'a>) {
        if self.packed {
            l.arg(&NULL);
        } else {
            l.arg(&self.diag);
        }
    }
}

/// The periodic axes of odd length of a level (bit a for axis a), whose
/// end cells the `smooth` kernel takes in passes of their own.
fn odd_periodic_axes(op: &Operator) -> u32 {
    (0..3)
        .filter(|&a| op.faces[a][0] == Face::Periodic && op.size[a] % 2 == 1)
        .map(|a| 1u32 << a)
        .sum()
}

/// A coarse operator's couplings as the kernels read them: toward +x, +y
/// and +z, an array of cells for each axis (none on the finest grid, whose
/// couplings are all 1). The kernels take the coupling toward −x from the
/// cell below (wrapping at every face, as they find neighbours): this
/// checks, at every link, that it is the cell's own to the bit.
fn upward_weights(op: &Operator) -> Result<Option<Vec<f32>>, String> {
    if op.weights.is_empty() {
        return Ok(None);
    }
    let n = op.cells();
    let size = op.size;
    let mut upward = vec![0.0f32; 3 * n];
    for (c, w) in op.weights.iter().enumerate() {
        for a in 0..3 {
            upward[a * n + c] = w[2 * a + 1];
        }
    }
    let plane = [1, size[0], size[0] * size[1]];
    for (c, w) in op.weights.iter().enumerate() {
        let p = super::poisson::coords(size, c);
        for a in 0..3 {
            if op.links[c] & (1 << (2 * a)) == 0 {
                continue;
            }
            let below = if p[a] == 0 {
                c + (size[a] - 1) * plane[a]
            } else {
                c - plane[a]
            };
            if upward[a * n + below].to_bits() != w[2 * a].to_bits() {
                return Err(format!(
                    "the {:?}-cell grid's coupling of cell {p:?} toward −{} differs from its \
                     neighbour's toward it",
                    size,
                    ["x", "y", "z"][a]
                ));
            }
        }
    }
    Ok(Some(upward))
}

/// Where the kernels' `Split` keeps cell `p` of a grid of `size` (an even
/// length along x): each row's cells of colour 0 ((x + y + z) even) first,
/// in order of x, then those of colour 1.
fn split_index(size: [usize; 3], [x, y, z]: [usize; 3]) -> usize {
    size[0] * (y + size[1] * z) + ((x + y + z) & 1) * (size[0] / 2) + x / 2
}

/// `values` of a grid of `size` in natural order, put in `Split`'s.
fn split_order<T: Copy + Default>(values: &[T], size: [usize; 3]) -> Vec<T> {
    let mut out = vec![T::default(); values.len()];
    let mut cells = values.iter();
    for z in 0..size[2] {
        for y in 0..size[1] {
            for x in 0..size[0] {
                out[split_index(size, [x, y, z])] = *cells.next().expect("a value a cell");
            }
        }
    }
    out
}

/// The finest grid's links with its diagonal's fixed-pressure part (the
/// diagonal less the links: 1 per outlet next to the cell) in bits 6-7, as
/// the kernels' `diagonal` reads it; none where a part is over 3 or the
/// operator has coupling weights.
fn packed_links(op: &Operator) -> Option<Vec<u8>> {
    if !op.weights.is_empty() {
        return None;
    }
    op.links
        .iter()
        .zip(&op.diag)
        .map(|(&bits, &d)| {
            let extra = d - (bits & 63).count_ones() as f32;
            ((0.0..=3.0).contains(&extra) && extra.fract() == 0.0)
                .then_some(bits | (extra as u8) << 6)
        })
        .collect()
}

/// A coarse level's couplings toward +x, +y, +z (`upward`, three arrays of
/// cells) and diagonal packed one word a cell as the kernels' `Packed`
/// reads them (counts of 1/64: 7 bits each, the diagonal 11 from bit 21),
/// or none where a value would not come back to the bit, or where the
/// links are not the couplings that are not 0 (which the kernels take them
/// for).
fn packed_coefficients(op: &Operator, upward: &[f32]) -> Option<Vec<u32>> {
    let n = op.cells();
    let count = |v: f32, bits: u32| {
        let k = v * 64.0;
        let fits = k >= 0.0 && k < (1u32 << bits) as f32 && k.fract() == 0.0;
        (fits && ((k as u32) as f32 * 0.015625).to_bits() == v.to_bits()).then_some(k as u32)
    };
    (0..n)
        .map(|c| {
            let links = (0..6).all(|d| (op.links[c] >> d & 1 == 1) == (op.weights[c][d] > 0.0));
            if !links {
                return None;
            }
            let mut word = count(op.diag[c], 11)? << 21;
            for a in 0..3 {
                word |= count(upward[a * n + c], 7)? << (7 * a);
            }
            Some(word)
        })
        .collect()
}

/// The multigrid hierarchy: operators, the coarser grids' solution and
/// right-hand side (the finest grid's are CG's), and the coarsest grid's
/// dense solve.
struct Hierarchy {
    levels: Vec<Level>,
    coarser: Vec<(CudaSlice<f32>, CudaSlice<f32>)>,
    /// The finest grid's x and b in 16 bits, where the preconditioner
    /// keeps them so ([`DeviceFlow::set_half_preconditioner`]).
    half: Option<HalfFinest>,
    /// The finest grid's x, b and links with split rows, where the
    /// preconditioner keeps them so
    /// ([`DeviceFlow::set_split_preconditioner`]; not with `half`).
    split: Option<SplitFinest>,
    coarsest: Coarsest,
    singular: bool,
    shape: Cycle,
}

/// The finest grid's x and b of the preconditioner in 16 bits (the
/// kernels' `Half`), and the window `to_half` chose for them.
struct HalfFinest {
    x: CudaSlice<u16>,
    b: CudaSlice<u16>,
    scale: CudaSlice<f32>,
}

/// The finest grid's x, b and links of the preconditioner with split rows
/// (the kernels' `Split`: each row's cells of colour 0 first, then those
/// of colour 1).
struct SplitFinest {
    x: CudaSlice<f32>,
    b: CudaSlice<f32>,
    links: CudaSlice<u8>,
    /// The colour passes four cells a thread (`smooth_split4`): where the
    /// length along x is a multiple of 8 ([`DeviceFlow::set_quad_sweeps`]).
    quad: bool,
}

/// The kernels that take four cells a thread on split rows.
#[derive(Clone, Copy)]
struct Quad<'a> {
    smooth: &'a CudaFunction,
    restrict: &'a CudaFunction,
    prolong: &'a CudaFunction,
}

/// The kernels of a level whose x and b are of one storage: f32, or (the
/// finest grid's) 16 bits with its window, or f32 with split rows and the
/// links in that order.
#[derive(Clone, Copy)]
struct Storage<'a> {
    smooth: &'a CudaFunction,
    restrict: &'a CudaFunction,
    prolong: &'a CudaFunction,
    scale: Option<&'a CudaSlice<f32>>,
    links: Option<&'a CudaSlice<u8>>,
    /// Split rows' colour passes four cells a thread, their restriction
    /// and prolongation four coarse cells (columns) a thread, where a level
    /// allows.
    quad: Option<Quad<'a>>,
}

impl<'a> Storage<'a> {
    fn f32(k: &'a Kernels) -> Storage<'a> {
        Storage {
            smooth: &k.smooth,
            restrict: &k.restrict_residual,
            prolong: &k.prolong_add,
            scale: None,
            links: None,
            quad: None,
        }
    }

    fn half(k: &'a Kernels, scale: &'a CudaSlice<f32>) -> Storage<'a> {
        Storage {
            smooth: &k.smooth_half,
            restrict: &k.restrict_residual_half,
            prolong: &k.prolong_add_half,
            scale: Some(scale),
            links: None,
            quad: None,
        }
    }

    /// Split rows in 16 bits, four cells a thread (the level's length along
    /// x a multiple of 8, no periodic axis of odd length: [`quad_level`]),
    /// the only kernels it has.
    fn split_half(
        k: &'a Kernels,
        links: &'a CudaSlice<u8>,
        scale: &'a CudaSlice<f32>,
    ) -> Storage<'a> {
        let quad = Quad {
            smooth: &k.smooth_split4_half,
            restrict: &k.restrict_residual_split4_half,
            prolong: &k.prolong_add_split4_half,
        };
        Storage {
            smooth: quad.smooth,
            restrict: quad.restrict,
            prolong: quad.prolong,
            scale: Some(scale),
            links: Some(links),
            quad: Some(quad),
        }
    }

    fn split(k: &'a Kernels, links: &'a CudaSlice<u8>, quad: bool) -> Storage<'a> {
        Storage {
            smooth: &k.smooth_split,
            restrict: &k.restrict_residual_split,
            prolong: &k.prolong_add_split,
            scale: None,
            links: Some(links),
            quad: quad.then_some(Quad {
                smooth: &k.smooth_split4,
                restrict: &k.restrict_residual_split4,
                prolong: &k.prolong_add_split4,
            }),
        }
    }

    /// The level's operator, with the storage's links where it has them.
    fn push_level(&self, level: &'a Level, l: &mut LaunchArgs<'a>) {
        match self.links {
            Some(links) => level.push_with(l, links),
            None => level.push(l),
        }
    }

    /// The 16-bit kernels' last argument.
    fn push_scale(&self, l: &mut LaunchArgs<'a>) {
        if let Some(scale) = self.scale {
            l.arg(scale);
        }
    }
}

/// CG's r and z in the natural order at the ends of a cycle on split rows
/// (`smooth_split`'s `r` and `z`): its first pass, from zero, takes b from
/// `from` (none: b already in split rows), its last passes write the result
/// into `into` (which must be given with split rows).
struct Ends<'a> {
    from: Option<&'a CudaSlice<f32>>,
    into: Option<&'a mut CudaSlice<f32>>,
}

impl Ends<'_> {
    /// The split kernels' last two arguments: r for the pass from zero, z
    /// for the last pass, null in the others.
    fn push<'b>(&'b mut self, l: &mut LaunchArgs<'b>, zero: bool, last: bool) {
        match self.from {
            Some(r) if zero => l.arg(r),
            _ => l.arg(&NULL),
        };
        match &mut self.into {
            Some(z) if last => l.arg(&mut **z),
            _ => l.arg(&NULL),
        };
    }

    fn none() -> Self {
        Ends {
            from: None,
            into: None,
        }
    }
}

/// The coarsest grid's dense solve.
struct Coarsest {
    inverse: CudaSlice<f64>,
    cells: CudaSlice<u32>,
    m: u32,
    y: CudaSlice<f64>,
}

/// The stream and the kernels.
struct Gpu {
    stream: Arc<CudaStream>,
    k: Kernels,
}

/// CG's vectors on the finest grid.
#[derive(Clone, Copy)]
enum Vector {
    P,
    Rhs,
    R,
    Z,
    ZOld,
    Direction,
    Q,
}

// The split borrows of `vectors` (`let [p, _, r, z, z_old, direction, q]`)
// take their places in this order.
const _: () = assert!(Vector::Z as usize == 3 && Vector::Direction as usize == 5);
const _: () = assert!(Vector::Q as usize == 6 && Vector::ZOld as usize == 4);

/// How the pressure is solved (from the host's [`super::multigrid::Pcg`]).
#[derive(Clone, Copy)]
pub struct Settings {
    pub tolerance: f64,
    pub jacobi: bool,
    pub max_iterations: usize,
    pub max_sweeps: usize,
    /// [`super::multigrid::Pcg::fused_check`].
    pub fused_check: bool,
    /// [`super::multigrid::Pcg::restarts`].
    pub restarts: usize,
}

/// The flow's arrays on the GPU and the kernels that step them.
pub struct DeviceFlow {
    gpu: Gpu,
    pub name: String,
    size: [usize; 3],
    periodic: u32,
    kinds: CudaSlice<u8>,
    open: CudaSlice<u8>,
    /// The cells that are not plain ([`plain_cells`]) and have an open
    /// face, whose explicit terms take the general path in a launch of
    /// their own.
    general: CudaSlice<u32>,
    general_count: u32,
    wall: CudaSlice<f32>,
    outflow: CudaSlice<u32>,
    outflow_count: u32,
    /// Three planes each.
    u: CudaSlice<f32>,
    now: CudaSlice<f32>,
    previous: CudaSlice<f32>,
    /// The eddy viscosity of the subgrid model (unused without it).
    eddy: CudaSlice<f32>,
    /// Indexed by [`Vector`].
    vectors: [CudaSlice<f32>; 7],
    /// The pressures of the solves before the last (`Flow::history`), one
    /// plane each, in a ring: `Flow::history[k]` is plane
    /// `(newest + k) % BEFORE`, so that a solve's first guess writes one
    /// plane of them, not all.
    history: CudaSlice<f32>,
    newest: usize,
    mg: Hierarchy,
    /// Active cells of the finest grid.
    active: f64,
    scalars: CudaSlice<f64>,
    partial: CudaSlice<f64>,
    fastest_bits: CudaSlice<u32>,
    /// Where the sub-steps spent their time, measured only when `timed`
    /// (the GPU is waited for at each part's end).
    pub spent: StepTimes,
    pub timed: bool,
    /// One CG iteration captured per arrangement: whether its update takes
    /// the check ([`Settings::fused_check`]), whether the pressure and q
    /// have traded places (`p_swapped`), whether z and the last z have
    /// (`swapped`), the parity of the iteration (its r·z slots) and whether
    /// it is a solve's first.
    graphs: [Option<Graph>; 32],
    swapped: bool,
    p_swapped: bool,
    /// Whether to capture graphs (off where the driver cannot, or by
    /// [`DeviceFlow::set_graphs`]).
    capture: bool,
}

/// A captured graph, moved with its solver to the thread that steps it.
struct Graph(cudarc::driver::CudaGraph);

// SAFETY: CUDA forbids only concurrent use of a graph; the solver that owns
// it is used by one thread at a time (`&mut self`).
unsafe impl Send for Graph {}

impl Graph {
    fn launch(&self) -> Result<(), cudarc::driver::DriverError> {
        self.0.launch()
    }
}

/// Bytes of GPU memory per cell: the velocities, their explicit terms now
/// and before, the eddy viscosity, the seven vectors of the pressure solve,
/// the five pressures before, the flags, the walls' velocities, the
/// coarser grids (about a seventh more), and the finest grid's x, b and
/// links with split rows.
pub const DEVICE_BYTES_PER_CELL: usize = 4 * (3 + 3 + 3 + 1 + 7 + BEFORE + 3 + 2) + 3 + 8 + 9;

/// What the flow kernels read of each cell: its kind (flow.cu's FLUID,
/// WALL, SLIP, OUTFLOW), its open faces (bit a: the face of component a)
/// with [`PLAIN`], and the cells that `explicit_terms_listed` takes (not
/// plain, a face open).
struct CellBytes {
    kinds: Vec<u8>,
    open: Vec<u8>,
    general: Vec<u32>,
}

fn cell_bytes(flow: &Flow) -> CellBytes {
    let kinds = flow
        .kinds
        .iter()
        .map(|k| match k {
            Kind::Fluid => 0,
            Kind::Wall => 1,
            Kind::Slip => 2,
            Kind::Outflow => 3,
        })
        .collect();
    let plain = plain_cells(flow);
    let open: Vec<u8> = (0..flow.cells())
        .map(|c| {
            (0..3).map(|a| (flow.open[a][c] as u8) << a).sum::<u8>()
                | if plain[c] { PLAIN } else { 0 }
        })
        .collect();
    let general = (0..flow.cells())
        .filter(|&c| !plain[c] && open[c] & 7 != 0)
        .map(|c| c as u32)
        .collect();
    CellBytes {
        kinds,
        open,
        general,
    }
}

/// Bit of a cell's `open` byte on the GPU set where the cell is plain.
const PLAIN: u8 = 8;

/// The cells inside the grid's outer layer whose six neighbours flow (fluid
/// or outlet), as `plain_cell` in flow.cu: every stencil of their faces
/// reads plain face values, with no ghost, wrap or wall among them.
fn plain_cells(flow: &Flow) -> Vec<bool> {
    let [nx, ny, nz] = flow.size;
    let stride = [1, nx, nx * ny];
    let flows = |c: usize| matches!(flow.kinds[c], Kind::Fluid | Kind::Outflow);
    (0..flow.cells())
        .map(|c| {
            let p = [c % nx, (c / nx) % ny, c / (nx * ny)];
            (0..3).all(|a| {
                (1..[nx, ny, nz][a] - 1).contains(&p[a])
                    && flows(c - stride[a])
                    && flows(c + stride[a])
            })
        })
        .collect()
}

fn face_bits(faces: &[[Face; 2]; 3]) -> u32 {
    let mut bits = 0;
    for (a, ends) in faces.iter().enumerate() {
        for (h, f) in ends.iter().enumerate() {
            let code = match f {
                Face::Wall => 0,
                Face::Periodic => 1,
                Face::Fixed => 2,
            };
            bits |= code << (2 * (2 * a + h));
        }
    }
    bits
}

fn cells_config(size: [usize; 3]) -> LaunchConfig {
    let [nx, ny, nz] = size.map(|s| s as u32);
    let [bx, by] = [32, 4];
    LaunchConfig {
        grid_dim: (nx.div_ceil(bx), ny.div_ceil(by), nz),
        block_dim: (bx, by, 1),
        shared_mem_bytes: 0,
    }
}

/// A thread per four cells along x of `size` (its length along x a
/// multiple of 4), as [`cells_config`] takes cells.
fn quads_config([nx, ny, nz]: [usize; 3]) -> LaunchConfig {
    cells_config([nx / 4, ny, nz])
}

fn list_config(count: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((count as u32).div_ceil(256).max(1), 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn one_block(threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn load(ctx: &Arc<cudarc::driver::CudaContext>) -> Result<Kernels, SolverError> {
    let (major, minor) = ctx.compute_capability().map_err(dev)?;
    let mut modules = Vec::new();
    for (name, source) in sources() {
        let ptx = compile(name, source, major, minor).map_err(SolverError::Device)?;
        modules.push(
            guarded("loading the projection kernels", || ctx.load_module(ptx))
                .map_err(SolverError::Device)?,
        );
    }
    guarded("loading the projection kernels", || {
        let f = |name: &str| modules[0].load_function(name);
        let g = |name: &str| modules[1].load_function(name);
        Ok(Kernels {
            explicit_terms: f("explicit_terms")?,
            explicit_terms_listed: f("explicit_terms_listed")?,
            eddy_viscosity: f("eddy_viscosity")?,
            cell_velocity: f("cell_velocity")?,
            adams_bashforth: f("adams_bashforth")?,
            carry_outflow: f("carry_outflow")?,
            divergence_rhs: f("divergence_rhs")?,
            correct: f("correct")?,
            fastest: f("fastest")?,
            apply: g("apply")?,
            smooth: g("smooth")?,
            smooth_half: g("smooth_half")?,
            smooth_packed: g("smooth_packed")?,
            jacobi: g("jacobi")?,
            restrict_residual: g("restrict_residual")?,
            restrict_residual_half: g("restrict_residual_half")?,
            restrict_residual_packed: g("restrict_residual_packed")?,
            prolong_add: g("prolong_add")?,
            prolong_add_half: g("prolong_add_half")?,
            to_half: g("to_half")?,
            from_half: g("from_half")?,
            smooth_split: g("smooth_split")?,
            smooth_split4: g("smooth_split4")?,
            smooth_split4_half: g("smooth_split4_half")?,
            half_window: g("half_window")?,
            restrict_residual_split4_half: g("restrict_residual_split4_half")?,
            prolong_add_split4_half: g("prolong_add_split4_half")?,
            restrict_residual_split: g("restrict_residual_split")?,
            restrict_residual_split4: g("restrict_residual_split4")?,
            prolong_add_split: g("prolong_add_split")?,
            prolong_add_split4: g("prolong_add_split4")?,
            to_split: g("to_split")?,
            coarsest_gather: g("coarsest_gather")?,
            coarsest_solve: g("coarsest_solve")?,
            reduce: g("reduce")?,
            reduce_finish: g("reduce_finish")?,
            subtract_mean: g("subtract_mean")?,
            residual_dots: g("residual_dots")?,
            direction: g("direction")?,
            predict: g("predict")?,
            apply_dot: g("apply_dot")?,
            cg_update_sum: g("cg_update_sum")?,
            cg_update_check: g("cg_update_check")?,
            subtract_mean_dots: g("subtract_mean_dots")?,
        })
    })
    .map_err(SolverError::Device)
}

impl DeviceFlow {
    /// The GPU twin of `flow` on device `ordinal`, with its state uploaded.
    pub fn new(flow: &Flow, ordinal: usize) -> Result<DeviceFlow, SolverError> {
        let n = flow.cells();
        if 3 * n as u64 >= u32::MAX as u64 {
            return Err(SolverError::InvalidParams(format!(
                "{n} cells: the projection method's GPU solver takes fewer than 2^32 / 3 \
                 (make domain.size smaller)"
            )));
        }
        let mg = &flow.pcg.mg;
        let (cells, inverse) = mg.coarsest_inverse().map_err(|why| {
            SolverError::InvalidParams(format!(
                "the projection method's GPU solver cannot take this grid: {why}; run it \
                 with --solver cpu"
            ))
        })?;
        let info = crate::solver::lbm::cuda::probe_device(ordinal)
            .map_err(|e| SolverError::Device(e.0))?;
        let need = (n * DEVICE_BYTES_PER_CELL) as u64 + (inverse.len() * 8) as u64;
        if need > info.free_bytes {
            return Err(SolverError::InvalidParams(format!(
                "the projection method needs {} of GPU memory for {n} cells, and {} has {} \
                 free: make domain.size smaller, or run it with --solver cpu",
                crate::system::human_bytes(need),
                info.name,
                crate::system::human_bytes(info.free_bytes)
            )));
        }
        let ctx = guarded("creating the CUDA context", || {
            cudarc::driver::CudaContext::new(ordinal)
        })
        .map_err(SolverError::Device)?;
        // One stream, in order: cudarc's per-slice events would only cost time.
        // SAFETY: every use of these slices is queued on the one stream.
        unsafe { ctx.disable_event_tracking() };
        let k = load(&ctx)?;
        // A stream of its own: the legacy default stream cannot be captured
        // into graphs.
        let stream = ctx.new_stream().map_err(dev)?;
        let CellBytes {
            kinds,
            open,
            general,
        } = cell_bytes(flow);
        let general_count = general.len() as u32;
        // One entry at least, as for the outlets.
        let general = if general.is_empty() { vec![0] } else { general };
        // One entry at least: cudarc allocates one element or more.
        let outflow: Vec<u32> = flow
            .outflow
            .iter()
            .flat_map(|&(c, m, code)| [c as u32, m as u32, code as u32])
            .chain([0, 0, 0])
            .collect();
        let ops: Vec<&Operator> = mg.operators().collect();
        let upward = ops
            .iter()
            .map(|op| upward_weights(op))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|why| {
                SolverError::InvalidParams(format!(
                    "the projection method's GPU solver cannot take this grid: {why} (a \
                     defect; run it with --solver cpu)"
                ))
            })?;
        let active = (0..n).filter(|&c| ops[0].active(c)).count() as f64;
        let m = cells.len();
        let cells32: Vec<u32> = cells.iter().map(|&c| c as u32).collect();
        let mut device = guarded("allocating the projection method's arrays", || {
            let mut levels = Vec::new();
            let mut coarser = Vec::new();
            for (depth, (op, upward)) in ops.iter().zip(&upward).enumerate() {
                let odd = odd_periodic_axes(op);
                let weights = match upward {
                    Some(w) => Some(stream.clone_htod(w)?),
                    None => None,
                };
                let packed = if depth == 0 { packed_links(op) } else { None };
                let words = match upward {
                    Some(upward) if depth > 0 => packed_coefficients(op, upward),
                    _ => None,
                };
                levels.push(Level {
                    size: op.size,
                    dims: op.size.map(|v| v as i32),
                    faces: face_bits(&op.faces),
                    odd,
                    links: stream.clone_htod(packed.as_ref().unwrap_or(&op.links))?,
                    weights,
                    // Nothing reads a packed level's diagonal.
                    diag: match packed {
                        Some(_) => stream.alloc_zeros(1)?,
                        None => stream.clone_htod(&op.diag)?,
                    },
                    packed: packed.is_some(),
                    words: match &words {
                        Some(w) => Some(stream.clone_htod(w)?),
                        None => None,
                    },
                    use_words: words.is_some(),
                });
                if depth > 0 {
                    coarser.push((
                        stream.alloc_zeros(op.cells())?,
                        stream.alloc_zeros(op.cells())?,
                    ));
                }
            }
            let vector = || stream.alloc_zeros::<f32>(n);
            Ok(DeviceFlow {
                name: info.name.clone(),
                size: flow.size,
                periodic: (0..3)
                    .filter(|&a| flow.periodic[a])
                    .map(|a| 1u32 << a)
                    .sum(),
                kinds: stream.clone_htod(&kinds)?,
                open: stream.clone_htod(&open)?,
                general: stream.clone_htod(&general)?,
                general_count,
                wall: stream.alloc_zeros(3 * n)?,
                outflow: stream.clone_htod(&outflow)?,
                outflow_count: flow.outflow.len() as u32,
                u: stream.alloc_zeros(3 * n)?,
                now: stream.alloc_zeros(3 * n)?,
                previous: stream.alloc_zeros(3 * n)?,
                eddy: stream.alloc_zeros(n)?,
                vectors: [
                    vector()?,
                    vector()?,
                    vector()?,
                    vector()?,
                    vector()?,
                    vector()?,
                    vector()?,
                ],
                history: stream.alloc_zeros(BEFORE * n)?,
                newest: 0,
                mg: Hierarchy {
                    singular: ops[0].singular,
                    shape: mg.shape(),
                    levels,
                    coarser,
                    half: None,
                    split: None,
                    coarsest: Coarsest {
                        inverse: stream.clone_htod(&inverse)?,
                        cells: stream.clone_htod(&cells32)?,
                        m: m as u32,
                        y: stream.alloc_zeros(m.max(1))?,
                    },
                },
                active,
                scalars: stream.alloc_zeros(SCALARS)?,
                partial: stream.alloc_zeros(3 * REDUCE_BLOCKS as usize)?,
                fastest_bits: stream.alloc_zeros(1)?,
                spent: StepTimes::default(),
                timed: false,
                graphs: Default::default(),
                swapped: false,
                p_swapped: false,
                capture: true,
                gpu: Gpu {
                    stream: stream.clone(),
                    k,
                },
            })
        })
        .map_err(|e| {
            SolverError::Device(format!(
                "{e} (the projection method needs about {} of GPU memory here: make \
                 domain.size smaller)",
                crate::system::human_bytes(need)
            ))
        })?;
        device.push(flow)?;
        device.set_split_preconditioner(true)?;
        Ok(device)
    }

    fn n(&self) -> usize {
        self.size.iter().product()
    }

    /// The stream its work runs on, in order.
    pub fn stream(&self) -> Arc<CudaStream> {
        self.gpu.stream.clone()
    }

    /// Queues the cell-centred velocities of the state now, as
    /// [`Flow::fields`] computes them, into three planes of `planes`.
    pub fn leave_velocity(&mut self, planes: &mut CudaSlice<f32>) -> Result<(), SolverError> {
        let n = self.n();
        if planes.len() < 3 * n {
            return Err(SolverError::Device(format!(
                "{} floats for the velocity of {n} cells",
                planes.len()
            )));
        }
        let [nx, ny, nz] = self.size.map(|v| v as i32);
        let mut b = self.gpu.stream.launch_builder(&self.gpu.k.cell_velocity);
        b.arg(&self.u)
            .arg(&self.kinds)
            .arg(&self.wall)
            .arg(&nx)
            .arg(&ny)
            .arg(&nz)
            .arg(&self.periodic)
            .arg(planes);
        // SAFETY: cell_velocity(const float*, const u8*, const float*, int,
        // int, int, unsigned, float*): u, wall and planes 3n (checked), kinds
        // n; the grid covers the cells.
        unsafe { b.launch(cells_config(self.size)) }
            .map(drop)
            .map_err(dev)
    }

    /// Whether CG iterations are replayed as CUDA graphs (`Tuning::cuda_graphs`;
    /// the same results either way).
    pub fn set_graphs(&mut self, on: bool) {
        self.capture = on;
        if !on {
            self.graphs = Default::default();
        }
    }

    /// Whether the preconditioner keeps the finest grid's x and b in 16
    /// bits (`Tuning::half_preconditioner`; by default where
    /// [`DeviceFlow::half_preconditioner_pays`]): half the bytes of its
    /// sweeps, restriction and prolongation there, the outer CG's vectors
    /// in f32 as before. Each solve still stops at its tolerance, but its
    /// iterates are no longer the CPU's to the bit. Only where split rows
    /// take four cells a thread ([`DeviceFlow::set_quad_sweeps`]; r stored
    /// and z given by the cycle's first and last passes) or are off (the
    /// natural order, by conversion passes of their own); split rows one
    /// cell a thread stay in f32, which those passes would make slower.
    pub fn set_half_preconditioner(&mut self, on: bool) -> Result<(), SolverError> {
        let stream = self.gpu.stream.clone();
        let n = self.n();
        // A grid of one level solves it directly.
        self.mg.half = match on && self.mg.levels.len() > 1 {
            true => Some(
                guarded("allocating the preconditioner's 16-bit vectors", || {
                    Ok(HalfFinest {
                        x: stream.alloc_zeros(n)?,
                        b: stream.alloc_zeros(n)?,
                        scale: stream.alloc_zeros(2)?,
                    })
                })
                .map_err(SolverError::Device)?,
            ),
            false => None,
        };
        // Graphs captured before hold the other storage's launches.
        self.graphs = Default::default();
        Ok(())
    }

    /// Whether the 16-bit preconditioner pays: where split rows take four
    /// cells a thread and the finest grid's x and b in f32 (8 bytes a
    /// cell) overflow the L2 cache. Below it the f32 passes run from L2
    /// and decoding costs more than the bytes saved (H200: the city block
    /// in 256³ 3.08–3.11 ms a sub-step against f32's 3.23, the cavity at
    /// 128³ 1.17 ms a step against 1.12; BENCHMARKS.md).
    pub fn half_preconditioner_pays(&self) -> Result<bool, SolverError> {
        let l2 = self
            .gpu
            .stream
            .context()
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
            .map_err(dev)?;
        Ok(self.quad_sweeps() && 8 * self.n() as u64 > l2 as u64)
    }

    /// Whether the preconditioner keeps the finest grid's x, b and links
    /// with split rows (the default; `Tuning::split_preconditioner`): each
    /// row's cells of one colour, then the other's, so that the colour
    /// passes, the restriction and the prolongation there read whole
    /// sectors of what they use, CG's r and z taken and given in the
    /// natural order by the cycle's first and last passes. The same values,
    /// so the same results to the bit. Only where the finest grid's length
    /// along x is even and its links hold its diagonal (as the grids of the
    /// scenarios do); returns whether it is on.
    pub fn set_split_preconditioner(&mut self, on: bool) -> Result<bool, SolverError> {
        let finest = &self.mg.levels[0];
        let fits = self.mg.levels.len() > 1
            && finest.size[0].is_multiple_of(2)
            && finest.packed
            && finest.weights.is_none();
        if on && self.mg.split.is_some() {
            return Ok(true);
        }
        self.mg.split = None;
        if on && fits {
            let stream = self.gpu.stream.clone();
            let n = self.n();
            let size = finest.size;
            let links = stream.clone_dtoh(&finest.links).map_err(dev)?;
            let links = split_order(&links, size);
            self.mg.split = Some(
                guarded("allocating the preconditioner's split vectors", || {
                    Ok(SplitFinest {
                        x: stream.alloc_zeros(n)?,
                        b: stream.alloc_zeros(n)?,
                        links: stream.clone_htod(&links)?,
                        quad: size[0].is_multiple_of(8),
                    })
                })
                .map_err(SolverError::Device)?,
            );
        }
        // Graphs captured before hold the other storage's launches.
        self.graphs = Default::default();
        Ok(self.mg.split.is_some())
    }

    /// Whether split rows' colour passes on the finest grid take four cells
    /// a thread (the default; `Tuning::quad_sweeps`) or one: the same
    /// values, so the same results to the bit. Only where the length along
    /// x is a multiple of 8 and no periodic axis has an odd length; returns
    /// whether they do.
    pub fn set_quad_sweeps(&mut self, on: bool) -> bool {
        let fits = self.mg.levels[0].size[0].is_multiple_of(8);
        if let Some(split) = &mut self.mg.split {
            split.quad = on && fits;
            // Graphs captured before hold the other kernel.
            self.graphs = Default::default();
        }
        self.quad_sweeps()
    }

    /// Whether the finest grid's colour passes take four cells a thread.
    fn quad_sweeps(&self) -> bool {
        self.mg.split.as_ref().is_some_and(|s| s.quad) && quad_level(&self.mg.levels[0])
    }

    /// Whether the coarse levels whose couplings and diagonal fit one word
    /// a cell ([`packed_coefficients`]: the first three below the finest,
    /// as the coarsening makes them) are swept from those words (the
    /// default) or from four arrays and the links (`Tuning::packed_coarse`):
    /// the same values, so the same results to the bit, from a quarter of
    /// the bytes.
    pub fn set_packed_coarse(&mut self, on: bool) {
        for level in &mut self.mg.levels {
            level.use_words = on && level.words.is_some();
        }
        // Graphs captured before hold the other arguments.
        self.graphs = Default::default();
    }

    /// Whether the preconditioner keeps the finest grid's vectors with split
    /// rows.
    pub fn split_rows(&self) -> bool {
        self.mg.split.is_some()
    }

    /// How many levels the kernels sweep from packed words.
    pub fn packed_levels(&self) -> usize {
        self.mg.levels.iter().filter(|l| l.use_words).count()
    }

    /// Uploads the host flow's state (velocities, pressure, explicit terms
    /// before) and its walls' velocities.
    pub fn push(&mut self, flow: &Flow) -> Result<(), SolverError> {
        let wall: Vec<f32> = (0..3)
            .flat_map(|a| flow.wall.iter().map(move |w| w[a]))
            .collect();
        let s = &self.gpu.stream;
        s.memcpy_htod(&flow.u.concat(), &mut self.u).map_err(dev)?;
        s.memcpy_htod(&flow.previous.concat(), &mut self.previous)
            .map_err(dev)?;
        s.memcpy_htod(&flow.p, &mut self.vectors[Vector::P as usize])
            .map_err(dev)?;
        s.memcpy_htod(&flow.history.concat(), &mut self.history)
            .map_err(dev)?;
        self.newest = 0;
        s.memcpy_htod(&wall, &mut self.wall).map_err(dev)?;
        s.synchronize().map_err(dev)
    }

    /// Downloads the state into the host flow.
    pub fn pull(&self, flow: &mut Flow) -> Result<(), SolverError> {
        let n = self.n();
        let s = &self.gpu.stream;
        for a in 0..3 {
            s.memcpy_dtoh(&self.u.slice(a * n..(a + 1) * n), &mut flow.u[a])
                .map_err(dev)?;
            s.memcpy_dtoh(
                &self.previous.slice(a * n..(a + 1) * n),
                &mut flow.previous[a],
            )
            .map_err(dev)?;
        }
        s.memcpy_dtoh(&self.vectors[Vector::P as usize], &mut flow.p)
            .map_err(dev)?;
        for (k, plane) in flow.history.iter_mut().enumerate() {
            let ring = (self.newest + k) % BEFORE;
            s.memcpy_dtoh(&self.history.slice(ring * n..(ring + 1) * n), plane)
                .map_err(dev)?;
        }
        s.synchronize().map_err(dev)
    }

    /// The largest |u| of any face (NaN: infinite).
    pub fn fastest(&mut self) -> Result<f32, SolverError> {
        let s = &self.gpu.stream;
        s.memset_zeros(&mut self.fastest_bits).map_err(dev)?;
        let count = 3 * self.n();
        let cfg = LaunchConfig {
            grid_dim: ((count as u32).div_ceil(256).clamp(1, 2048), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = s.launch_builder(&self.gpu.k.fastest);
        b.arg(&self.u).arg(&count).arg(&mut self.fastest_bits);
        // SAFETY: fastest(const float*, size_t, unsigned*): 3n velocities.
        unsafe { b.launch(cfg) }.map(drop).map_err(dev)?;
        let bits = s.clone_dtoh(&self.fastest_bits).map_err(dev)?;
        Ok(f32::from_bits(bits[0]))
    }

    /// The GPU's device-to-device copy rate in bytes per second (read plus
    /// write), from copies of 256 MiB: what the kernels' traffic compares to.
    pub fn copy_bandwidth(&self) -> Result<f64, SolverError> {
        let s = &self.gpu.stream;
        let words = 64 << 20;
        let src = s.alloc_zeros::<f32>(words).map_err(dev)?;
        let mut dst = s.alloc_zeros::<f32>(words).map_err(dev)?;
        s.memcpy_dtod(&src, &mut dst).map_err(dev)?;
        s.synchronize().map_err(dev)?;
        let copies = 20;
        let t = std::time::Instant::now();
        for _ in 0..copies {
            s.memcpy_dtod(&src, &mut dst).map_err(dev)?;
        }
        s.synchronize().map_err(dev)?;
        Ok((2 * 4 * words * copies) as f64 / t.elapsed().as_secs_f64())
    }

    fn lap(&self, part: &mut f64, since: &mut std::time::Instant) -> Result<(), SolverError> {
        if self.timed {
            self.gpu.stream.synchronize().map_err(dev)?;
            let now = std::time::Instant::now();
            *part += (now - *since).as_secs_f64();
            *since = now;
        }
        Ok(())
    }

    /// One sub-step of length `dt` of `flow` (whose clock and Adams–Bashforth
    /// flag advance on the host), as [`Flow::step`].
    pub fn step(&mut self, flow: &mut Flow, dt: f32) -> Result<(), SolverError> {
        let mut since = std::time::Instant::now();
        let mut spent = self.spent;
        let [nx, ny, nz] = self.size.map(|v| v as i32);
        let n = self.n();
        let cfg = cells_config(self.size);
        let (s, k) = (&self.gpu.stream, &self.gpu.k);
        let eddy_on = (flow.smagorinsky > 0.0) as i32;
        if eddy_on != 0 {
            let c2 = flow.smagorinsky * flow.smagorinsky;
            let mut b = s.launch_builder(&k.eddy_viscosity);
            b.arg(&self.u)
                .arg(&self.kinds)
                .arg(&self.wall)
                .arg(&nx)
                .arg(&ny)
                .arg(&nz)
                .arg(&self.periodic)
                .arg(&c2)
                .arg(&mut self.eddy);
            // SAFETY: eddy_viscosity(const float*, const u8*, const float*,
            // int, int, int, unsigned, float, float*): u and wall 3n, kinds
            // and eddy n; the grid covers the cells.
            unsafe { b.launch(cfg) }.map(drop).map_err(dev)?;
        }
        let ([fx, fy, fz], nu, upwind) = (flow.force, flow.nu, flow.upwind);
        let mut b = s.launch_builder(&k.explicit_terms);
        b.arg(&self.u)
            .arg(&self.open)
            .arg(&nx)
            .arg(&ny)
            .arg(&nz)
            .arg(&nu)
            .arg(&fx)
            .arg(&fy)
            .arg(&fz)
            .arg(&upwind)
            .arg(&self.eddy)
            .arg(&eddy_on)
            .arg(&mut self.now);
        // SAFETY: explicit_terms(const float*, const u8*, int, int, int,
        // float, float, float, float, float, const float*, int, float*): u
        // and out 3n, open and eddy n; the grid covers the cells.
        unsafe { b.launch(cfg) }.map(drop).map_err(dev)?;
        if self.general_count > 0 {
            let mut b = s.launch_builder(&k.explicit_terms_listed);
            b.arg(&self.u)
                .arg(&self.kinds)
                .arg(&self.open)
                .arg(&self.wall)
                .arg(&nx)
                .arg(&ny)
                .arg(&nz)
                .arg(&self.periodic)
                .arg(&nu)
                .arg(&fx)
                .arg(&fy)
                .arg(&fz)
                .arg(&upwind)
                .arg(&self.eddy)
                .arg(&eddy_on)
                .arg(&self.general)
                .arg(&self.general_count)
                .arg(&mut self.now);
            // SAFETY: explicit_terms_listed(const float*, const u8*, const
            // u8*, const float*, int, int, int, unsigned, float, float, float,
            // float, float, const float*, int, const unsigned*, unsigned,
            // float*): u, wall and out 3n, kinds, open and eddy n, `general`
            // `general_count` cells of the grid.
            unsafe { b.launch(list_config(self.general_count as usize)) }
                .map(drop)
                .map_err(dev)?;
        }
        let (count, has) = (3 * n, flow.has_previous as i32);
        let mut b = s.launch_builder(&k.adams_bashforth);
        b.arg(&mut self.u)
            .arg(&self.now)
            .arg(&self.previous)
            .arg(&count)
            .arg(&dt)
            .arg(&has);
        // SAFETY: adams_bashforth(float*, const float*, const float*, size_t,
        // float, int): three arrays of `count`.
        unsafe { b.launch(list_config(count)) }
            .map(drop)
            .map_err(dev)?;
        std::mem::swap(&mut self.now, &mut self.previous);
        flow.has_previous = true;
        self.carry_outflow(Carry::Convect(dt))?;
        self.lap(&mut spent.explicit, &mut since)?;
        let settings = Settings {
            tolerance: flow.pcg.tolerance,
            jacobi: flow.pcg.jacobi,
            max_iterations: flow.pcg.max_iterations,
            max_sweeps: flow.pcg.max_sweeps,
            fused_check: flow.pcg.fused_check,
            restarts: flow.pcg.restarts,
        };
        self.predict(flow, dt)?;
        let solve = self.project(dt, settings, &mut flow.pcg.floor)?;
        flow.last_solve = solve;
        spent.iterations += solve.iterations as u64;
        self.lap(&mut spent.pressure, &mut since)?;
        let (s, k) = (&self.gpu.stream, &self.gpu.k);
        let mut b = s.launch_builder(&k.correct);
        b.arg(&mut self.u)
            .arg(&self.vectors[Vector::P as usize])
            .arg(&self.open)
            .arg(&nx)
            .arg(&ny)
            .arg(&nz)
            .arg(&self.periodic)
            .arg(&dt);
        // SAFETY: correct(float*, const float*, const u8*, int, int, int,
        // unsigned, float): u 3n, p and open n.
        unsafe { b.launch(cfg) }.map(drop).map_err(dev)?;
        self.carry_outflow(Carry::Keep)?;
        self.lap(&mut spent.correction, &mut since)?;
        spent.sub_steps += 1;
        self.spent = spent;
        flow.time += dt as f64;
        flow.steps += 1;
        Ok(())
    }

    /// The solve's first guess, as [`Flow::predict`] (whose history count
    /// and spans advance on the host); the pressure now takes the oldest
    /// one's plane.
    fn predict(&mut self, flow: &mut Flow, dt: f32) -> Result<(), SolverError> {
        let len = flow.predictor_len();
        let w = super::flow::extrapolation(len, flow.spans, dt);
        let n = self.n();
        let (newest, len) = (self.newest as i32, len as i32);
        let finest = &self.mg.levels[0];
        let mut b = self.gpu.stream.launch_builder(&self.gpu.k.predict);
        b.arg(&mut self.vectors[Vector::P as usize])
            .arg(&mut self.history)
            .arg(&n)
            .arg(&newest)
            .arg(&len);
        for w in &w {
            b.arg(w);
        }
        b.arg(&finest.links);
        finest.push_diag(&mut b);
        // SAFETY: predict(float*, float*, size_t, int, int, float × 6, const
        // u8*, const float*): p n, history BEFORE n, its newest plane, the
        // planes the guess takes, the weights, the finest grid's links and
        // diagonal (or null).
        unsafe { b.launch(list_config(n)) }.map(drop).map_err(dev)?;
        self.newest = (self.newest + BEFORE - 1) % BEFORE;
        flow.advance_history(dt);
        Ok(())
    }

    fn carry_outflow(&mut self, carry: Carry) -> Result<(), SolverError> {
        if self.outflow_count == 0 {
            return Ok(());
        }
        let n = self.n();
        let (dt, mode) = match carry {
            Carry::Copy => (0.0f32, 0i32),
            Carry::Convect(dt) => (dt, 1),
            Carry::Keep => (0.0, 2),
        };
        let mut b = self.gpu.stream.launch_builder(&self.gpu.k.carry_outflow);
        b.arg(&mut self.u)
            .arg(&self.outflow)
            .arg(&self.outflow_count)
            .arg(&n)
            .arg(&dt)
            .arg(&mode);
        // SAFETY: carry_outflow(float*, const unsigned*, unsigned, size_t,
        // float, int): `count` triples of cells inside the grid.
        unsafe { b.launch(list_config(self.outflow_count as usize)) }
            .map(drop)
            .map_err(dev)
    }

    /// The right-hand side of the pressure equation and its solve (from
    /// the guess [`DeviceFlow::predict`] left in p).
    fn project(
        &mut self,
        dt: f32,
        settings: Settings,
        learned: &mut Option<f64>,
    ) -> Result<Solve, SolverError> {
        let [nx, ny, nz] = self.size.map(|v| v as i32);
        let mut b = self.gpu.stream.launch_builder(&self.gpu.k.divergence_rhs);
        b.arg(&self.u)
            .arg(&self.kinds)
            .arg(&nx)
            .arg(&ny)
            .arg(&nz)
            .arg(&self.periodic)
            .arg(&dt)
            .arg(&mut self.vectors[Vector::Rhs as usize]);
        // SAFETY: divergence_rhs(const float*, const u8*, int, int, int,
        // unsigned, float, float*): u 3n, the others n.
        unsafe { b.launch(cells_config(self.size)) }
            .map(drop)
            .map_err(dev)?;
        self.solve(settings, learned)
    }

    /// Queues scalars[slot0] = Σ a·b (b none: Σ a over the finest grid's
    /// active cells) and, with `second` (c, d, slot1), scalars[slot1] =
    /// Σ c·d.
    fn reduce(
        &mut self,
        a: Vector,
        b: Option<Vector>,
        second: Option<(Vector, Vector, i32)>,
        slot0: i32,
    ) -> Result<(), SolverError> {
        let n = self.n();
        let null = 0u64;
        let (_, cfg) = self.reduce_config();
        let (s, k, v) = (&self.gpu.stream, &self.gpu.k, &self.vectors);
        let mut l = s.launch_builder(&k.reduce);
        l.arg(&v[a as usize]);
        match b {
            Some(b) => l.arg(&v[b as usize]),
            None => l.arg(&null),
        };
        match second {
            Some((c, d, _)) => l.arg(&v[c as usize]).arg(&v[d as usize]),
            None => l.arg(&null).arg(&null),
        };
        // The kernel's e (Σ e·e): residual_dots sums those squares now.
        l.arg(&null);
        let finest = &self.mg.levels[0];
        match b {
            None => {
                l.arg(&finest.links);
                finest.push_diag(&mut l);
            }
            Some(_) => {
                l.arg(&null).arg(&null);
            }
        };
        l.arg(&n).arg(&mut self.partial);
        // SAFETY: reduce(const float* ×5, const u8*, const float*, size_t,
        // double*): vectors of n (or null), the finest grid's links and
        // diagonal (or null), 3 × blocks partial sums.
        unsafe { l.launch(cfg) }.map(drop).map_err(dev)?;
        self.finish(slot0, second.map_or(-1, |s| s.2))
    }

    /// The reductions' blocks (`reduce` and the passes fused with one), and
    /// their launch: blocks of 256 taking the cells by a grid-wide stride.
    fn reduce_config(&self) -> (u32, LaunchConfig) {
        let blocks = REDUCE_BLOCKS.min((self.n() as u32).div_ceil(256).max(1));
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        (blocks, cfg)
    }

    /// Queues the second pass of a reduction: the blocks' sums into
    /// scalars[slot0] and (unless negative) scalars[slot1].
    fn finish(&mut self, slot0: i32, slot1: i32) -> Result<(), SolverError> {
        self.finish_three(slot0, slot1, -1)
    }

    /// [`DeviceFlow::finish`] with the third sum `residual_dots` keeps
    /// apart into scalars[slot2] (unless negative).
    fn finish_three(&mut self, slot0: i32, slot1: i32, slot2: i32) -> Result<(), SolverError> {
        let (blocks, _) = self.reduce_config();
        let (s, k) = (&self.gpu.stream, &self.gpu.k);
        let mut l = s.launch_builder(&k.reduce_finish);
        l.arg(&self.partial)
            .arg(&blocks)
            .arg(&mut self.scalars)
            .arg(&slot0)
            .arg(&slot1)
            .arg(&slot2);
        // SAFETY: reduce_finish(const double*, unsigned, double*, int, int,
        // int): `blocks` pairs (and as many more after them where slot2 is
        // not negative), slots below SCALARS.
        unsafe { l.launch(one_block(256)) }.map(drop).map_err(dev)
    }

    /// Subtracts from `v` its mean over the active cells, whose sum is in
    /// scalars[SUM], then sums a·b into scalars[slot0] and, with `second`
    /// (c, d, slot1), c·d into scalars[slot1], in one pass (of v as it is
    /// after).
    fn subtract_mean_dots(
        &mut self,
        v: Vector,
        (a, b, slot0): (Vector, Vector, i32),
        second: Option<(Vector, Vector, i32)>,
    ) -> Result<(), SolverError> {
        let (n, count, null) = (self.n(), self.active, 0u64);
        let (_, cfg) = self.reduce_config();
        let ptr = |w: Vector| self.vectors[w as usize].device_ptr(&self.gpu.stream).0;
        let (v, a, b) = (ptr(v), ptr(a), ptr(b));
        let (c, d) = second.map_or((null, null), |(c, d, _)| (ptr(c), ptr(d)));
        let finest = &self.mg.levels[0];
        let mut l = self
            .gpu
            .stream
            .launch_builder(&self.gpu.k.subtract_mean_dots);
        l.arg(&v).arg(&finest.links);
        finest.push_diag(&mut l);
        l.arg(&n)
            .arg(&self.scalars)
            .arg(&SUM)
            .arg(&count)
            .arg(&a)
            .arg(&b)
            .arg(&c)
            .arg(&d)
            .arg(&mut self.partial);
        // SAFETY: subtract_mean_dots(float*, const u8*, const float*,
        // size_t, const double*, int, double, const float* ×4, double*):
        // vectors of n (c and d possibly null; any may be v, which the
        // kernel allows), the finest grid's links and diagonal (or null),
        // 2 × blocks partial sums.
        unsafe { l.launch(cfg) }.map(drop).map_err(dev)?;
        self.finish(slot0, second.map_or(-1, |s| s.2))
    }

    /// Subtracts the mean over the active cells from `v` (singular
    /// operators: the part in the null space).
    fn remove_mean(&mut self, v: Vector) -> Result<(), SolverError> {
        self.reduce(v, None, None, SUM)?;
        let n = self.n();
        let count = self.active;
        let finest = &self.mg.levels[0];
        let mut l = self.gpu.stream.launch_builder(&self.gpu.k.subtract_mean);
        l.arg(&mut self.vectors[v as usize]).arg(&finest.links);
        finest.push_diag(&mut l);
        l.arg(&n).arg(&self.scalars).arg(&SUM).arg(&count);
        // SAFETY: subtract_mean(float*, const u8*, const float*, size_t,
        // const double*, int, double): vectors of n, the finest grid's links
        // and diagonal (or null).
        unsafe { l.launch(list_config(n)) }.map(drop).map_err(dev)
    }

    /// The scalars, once the GPU has reached this point.
    fn scalars(&self) -> Result<[f64; SCALARS], SolverError> {
        let v = self.gpu.stream.clone_dtoh(&self.scalars).map_err(dev)?;
        Ok(v.try_into().expect("SCALARS values"))
    }

    /// r = rhs − A p with rhs·rhs, r·r and p·p into the scalars BB, RR
    /// and XX, in one pass.
    fn residual_dots(&mut self) -> Result<(), SolverError> {
        let (_, cfg) = self.reduce_config();
        {
            let finest = &self.mg.levels[0];
            let [p, rhs, r, ..] = &mut self.vectors;
            let mut l = self.gpu.stream.launch_builder(&self.gpu.k.residual_dots);
            finest.push(&mut l);
            l.arg(&*p).arg(&*rhs).arg(r).arg(&mut self.partial);
            // SAFETY: residual_dots(const u8*, const float*, const float*,
            // int, int, int, unsigned, const float*, const float*, float*,
            // double*): the finest grid's cells, 3 × blocks partial sums.
            unsafe { l.launch(cfg) }.map(drop).map_err(dev)?;
        }
        self.finish_three(BB, RR, XX)
    }

    /// r = rhs − A p on the finest grid.
    fn residual(&mut self) -> Result<(), SolverError> {
        let [p, rhs, r, ..] = &mut self.vectors;
        apply(&self.gpu, &self.mg.levels[0], p, rhs, true, r)
    }

    /// One damped Jacobi sweep from p into z (`back`: from z into p).
    fn jacobi_sweep(&mut self, back: bool) -> Result<(), SolverError> {
        let level = &self.mg.levels[0];
        let [nx, ny, nz] = level.size.map(|v| v as i32);
        let [p, rhs, _, z, ..] = &mut self.vectors;
        let (from, to) = if back { (&*z, p) } else { (&*p, z) };
        let mut l = self.gpu.stream.launch_builder(&self.gpu.k.jacobi);
        l.arg(&level.links);
        level.push_diag(&mut l);
        l.arg(&nx)
            .arg(&ny)
            .arg(&nz)
            .arg(&level.faces)
            .arg(from)
            .arg(&*rhs)
            .arg(&JACOBI_OMEGA)
            .arg(to);
        // SAFETY: jacobi(const u8*, const float*, int, int, int, unsigned,
        // const float*, const float*, float, float*): the finest grid's cells.
        unsafe { l.launch(cells_config(level.size)) }
            .map(drop)
            .map_err(dev)
    }

    /// Solves A p = rhs from the guess in p, as
    /// [`super::multigrid::Pcg::solve`]; `learned` is the f32 floor as
    /// [`super::multigrid::Pcg::floor`], which the solve may move.
    fn solve(
        &mut self,
        settings: Settings,
        learned: &mut Option<f64>,
    ) -> Result<Solve, SolverError> {
        let singular = self.mg.singular;
        if singular {
            self.remove_mean(Vector::Rhs)?;
        }
        // p's cells that take no part are 0 (`predict`).
        self.residual_dots()?;
        let s = self.scalars()?;
        let norm_b = s[BB as usize].sqrt();
        if norm_b == 0.0 {
            self.gpu
                .stream
                .memset_zeros(&mut self.vectors[Vector::P as usize])
                .map_err(dev)?;
            return Ok(Solve {
                iterations: 0,
                residual: 0.0,
            });
        }
        let mut residual = s[RR as usize].sqrt() / norm_b;
        let mut xx = s[XX as usize];
        let check_at = Floor::target(settings.tolerance, *learned, xx, norm_b);
        if settings.jacobi {
            let mut sweeps = 0;
            while residual > settings.tolerance && sweeps < settings.max_sweeps {
                for _ in 0..JACOBI_CHECK / 2 {
                    self.jacobi_sweep(false)?;
                    self.jacobi_sweep(true)?;
                }
                sweeps += JACOBI_CHECK;
                if singular {
                    self.remove_mean(Vector::P)?;
                }
                self.residual()?;
                self.reduce(Vector::R, Some(Vector::R), None, RR)?;
                residual = self.scalars()?[RR as usize].sqrt() / norm_b;
            }
            return Ok(Solve {
                iterations: sweeps,
                residual,
            });
        }
        let mut iterations = 0;
        let mut floor = Floor::new(residual);
        let fused = settings.fused_check && !singular;
        // Iterations since CG (re)started, and restarts taken (as the CPU's).
        let (mut since, mut restarts) = (0, 0);
        let allowed = if singular { 0 } else { settings.restarts };
        while residual > settings.tolerance && iterations < settings.max_iterations {
            // r·z of this iteration and of the last, in alternate slots.
            let (rz, rz_old) = (RZ[iterations % 2], RZ[(iterations + 1) % 2]);
            let first = since == 0;
            let key = 16 * fused as usize
                + 8 * self.p_swapped as usize
                + 4 * self.swapped as usize
                + 2 * (iterations % 2)
                + first as usize;
            let how = (rz, rz_old, first, fused);
            match &self.graphs[key] {
                Some(graph) => {
                    graph.launch().map_err(dev)?;
                    self.swap_z();
                    if fused {
                        self.swap_p();
                    }
                }
                None if self.capture => self.capture_iteration(key, how)?,
                None => self.queue_iteration(how)?,
            }
            let s = self.scalars()?;
            if !(s[PQ as usize] > 0.0) {
                break;
            }
            iterations += 1;
            since += 1;
            // The recurrence drifts from the true residual in f32: check
            // the true one before stopping.
            let estimate = s[RR as usize].sqrt() / norm_b;
            let mut checked = None;
            residual = if estimate <= check_at {
                // The update left the true residual's sums (fused).
                let (s, rr) = match fused {
                    true => (s, RR_TRUE),
                    false => {
                        self.residual_dots()?;
                        (self.scalars()?, RR)
                    }
                };
                xx = s[XX as usize];
                checked = Some(Floor::target(settings.tolerance, *learned, xx, norm_b));
                s[rr as usize].sqrt() / norm_b
            } else {
                estimate
            };
            if let Some(end) = floor.reached(residual, checked, settings.tolerance) {
                if restart(end, residual, settings.tolerance, &mut restarts, allowed) {
                    // From the true residual of x (the fused update left it).
                    if !fused {
                        self.residual_dots()?;
                        residual = self.scalars()?[RR as usize].sqrt() / norm_b;
                    }
                    (since, floor) = (0, Floor::new(residual));
                    continue;
                }
                *learned = Floor::learn(*learned, end, residual, xx, norm_b);
                break;
            }
        }
        Ok(Solve {
            iterations,
            residual,
        })
    }

    /// z and the last z trade places (a graph captured before the trade
    /// holds the old places: [`DeviceFlow::graphs`]).
    fn swap_z(&mut self) {
        self.vectors.swap(Vector::Z as usize, Vector::ZOld as usize);
        self.swapped = !self.swapped;
    }

    /// The pressure and q trade places: `cg_update_check` writes the new
    /// pressure into q's vector (as [`DeviceFlow::swap_z`]).
    fn swap_p(&mut self) {
        self.vectors.swap(Vector::P as usize, Vector::Q as usize);
        self.p_swapped = !self.p_swapped;
    }

    /// Queues one iteration of preconditioned CG up to the new r·r (the
    /// host reads the scalars after it): z = M⁻¹ r by a V-cycle, the new
    /// direction, q = A d, then p, r and r·r.
    /// `(rz, rz_old, first, fused)`: the slots of this iteration's r·z and
    /// the last's, whether it is a solve's first, and whether the update
    /// takes the check ([`Settings::fused_check`]: x into q's vector, then
    /// [`DeviceFlow::swap_p`]).
    fn queue_iteration(
        &mut self,
        (rz, rz_old, first, fused): (i32, i32, bool, bool),
    ) -> Result<(), SolverError> {
        let n = self.n();
        let singular = self.mg.singular;
        {
            let [_, _, r, z, ..] = &mut self.vectors;
            let (gpu, mg) = (&self.gpu, &mut self.mg);
            let s = &gpu.stream;
            let (levels, coarser, coarsest) = (&mg.levels, &mut mg.coarser, &mut mg.coarsest);
            let shape = (mg.singular, mg.shape);
            match (&mut mg.half, &mut mg.split) {
                (None, _) if levels.len() == 1 => coarsest_solve(gpu, coarsest, shape.0, z, r)?,
                (None, None) => {
                    let f32 = Storage::f32(&gpu.k);
                    let none = Ends::none();
                    down_up(
                        gpu, 0, levels, coarser, coarsest, shape, z, r, true, f32, none,
                    )?;
                }
                (Some(half), Some(split)) if split.quad && quad_level(&levels[0]) => {
                    // Split rows in 16 bits: the first pass stores r in
                    // b and the last gives z, so the window alone first.
                    let mut l = s.launch_builder(&gpu.k.half_window);
                    l.arg(&self.scalars).arg(&RR).arg(&n).arg(&mut half.scale);
                    // SAFETY: half_window(const double*, int, size_t,
                    // float*): RR below SCALARS, two floats of scale.
                    unsafe { l.launch(one_block(1)) }.map_err(dev)?;
                    let (x, b) = (&mut half.x, &half.b);
                    let storage = Storage::split_half(&gpu.k, &split.links, &half.scale);
                    let ends = Ends {
                        from: Some(&*r),
                        into: Some(z),
                    };
                    down_up(
                        gpu, 0, levels, coarser, coarsest, shape, x, b, true, storage, ends,
                    )?;
                }
                (_, Some(split)) => {
                    let finest = &levels[0];
                    // The first pass puts r in split rows as it starts from
                    // zero, but where a periodic axis of odd length needs
                    // x zeroed first.
                    let from = match finest.odd {
                        0 => Some(&*r),
                        _ => {
                            let [nx, ny, nz] = &finest.dims;
                            let mut l = s.launch_builder(&gpu.k.to_split);
                            l.arg(&*r).arg(nx).arg(ny).arg(nz).arg(&mut split.b);
                            // SAFETY: to_split(const float*, int, int, int,
                            // float*): vectors of the finest grid's cells.
                            unsafe { l.launch(cells_config(finest.size)) }.map_err(dev)?;
                            None
                        }
                    };
                    let (x, b) = (&mut split.x, &split.b);
                    let storage = Storage::split(&gpu.k, &split.links, split.quad);
                    let ends = Ends {
                        from,
                        into: Some(z),
                    };
                    down_up(
                        gpu, 0, levels, coarser, coarsest, shape, x, b, true, storage, ends,
                    )?;
                }
                (Some(half), None) => {
                    let mut l = s.launch_builder(&gpu.k.to_half);
                    l.arg(&*r)
                        .arg(&n)
                        .arg(&self.scalars)
                        .arg(&RR)
                        .arg(&mut half.b)
                        .arg(&mut half.scale);
                    // SAFETY: to_half(const float*, size_t, const double*,
                    // int, u16*, float*): vectors of n, RR below SCALARS,
                    // two floats of scale.
                    unsafe { l.launch(list_config(n)) }.map_err(dev)?;
                    let (x, b) = (&mut half.x, &half.b);
                    let storage = Storage::half(&gpu.k, &half.scale);
                    let none = Ends::none();
                    down_up(
                        gpu, 0, levels, coarser, coarsest, shape, x, b, true, storage, none,
                    )?;
                    let mut l = s.launch_builder(&gpu.k.from_half);
                    l.arg(&half.x).arg(&n).arg(&half.scale).arg(&mut *z);
                    // SAFETY: from_half(const u16*, size_t, const float*,
                    // float*): vectors of n, two floats of scale.
                    unsafe { l.launch(list_config(n)) }.map_err(dev)?;
                }
            }
        }
        let cross = Some((Vector::R, Vector::ZOld, RZ_CROSS));
        if singular {
            self.reduce(Vector::Z, None, None, SUM)?;
            self.subtract_mean_dots(Vector::Z, (Vector::R, Vector::Z, rz), cross)?;
        } else {
            self.reduce(Vector::R, Some(Vector::Z), cross, rz)?;
        }
        let first = first as i32;
        {
            let [_, _, _, z, _, direction, ..] = &mut self.vectors;
            let mut l = self.gpu.stream.launch_builder(&self.gpu.k.direction);
            l.arg(direction)
                .arg(&*z)
                .arg(&n)
                .arg(&self.scalars)
                .arg(&first)
                .arg(&rz)
                .arg(&RZ_CROSS)
                .arg(&rz_old);
            // A thread per four cells where n is a multiple of 4.
            let threads = if n.is_multiple_of(4) { n / 4 } else { n };
            // SAFETY: direction(float*, const float*, size_t, const
            // double*, int, int, int, int): vectors of n (16-byte aligned
            // allocations), slots below SCALARS.
            unsafe { l.launch(list_config(threads)) }
                .map(drop)
                .map_err(dev)?;
        }
        self.swap_z();
        let (_, cfg) = self.reduce_config();
        {
            // q = A d and d·q in one pass (fused: d·q alone, q's vector
            // left for the new pressure).
            let finest = &self.mg.levels[0];
            let [_, _, _, _, _, direction, q] = &mut self.vectors;
            let mut l = self.gpu.stream.launch_builder(&self.gpu.k.apply_dot);
            finest.push(&mut l);
            l.arg(&*direction);
            match fused {
                true => l.arg(&NULL),
                false => l.arg(q),
            };
            l.arg(&mut self.partial);
            // SAFETY: apply_dot(const u8*, const float*, const float*, int,
            // int, int, unsigned, const float*, float*, double*): the finest
            // grid's cells, 2 × blocks partial sums.
            unsafe { l.launch(cfg) }.map(drop).map_err(dev)?;
        }
        self.finish(PQ, -1)?;
        if fused {
            {
                let finest = &self.mg.levels[0];
                let [p, rhs, r, _, _, direction, q] = &mut self.vectors;
                let mut l = self.gpu.stream.launch_builder(&self.gpu.k.cg_update_check);
                finest.push(&mut l);
                l.arg(&*p)
                    .arg(&*direction)
                    .arg(&*rhs)
                    .arg(r)
                    .arg(q)
                    .arg(&self.scalars)
                    .arg(&rz)
                    .arg(&PQ)
                    .arg(&mut self.partial);
                // SAFETY: cg_update_check(const u8*, const float*, const
                // float*, int, int, int, unsigned, const float*, const
                // float*, const float*, float*, float*, const double*, int,
                // int, double*): the finest grid's cells, x_new (q's
                // vector) apart from x, slots below SCALARS, 3 × blocks
                // partial sums.
                unsafe { l.launch(cfg) }.map(drop).map_err(dev)?;
            }
            self.swap_p();
            return self.finish_three(RR, RR_TRUE, XX);
        }
        {
            // x and r updated, then r·r, or (singular) Σ r for its mean.
            let squares = !singular as i32;
            let finest = &self.mg.levels[0];
            let [p, _, r, _, _, direction, q] = &mut self.vectors;
            let mut l = self.gpu.stream.launch_builder(&self.gpu.k.cg_update_sum);
            l.arg(p)
                .arg(r)
                .arg(&*direction)
                .arg(&*q)
                .arg(&n)
                .arg(&self.scalars)
                .arg(&rz)
                .arg(&PQ)
                .arg(&finest.links);
            finest.push_diag(&mut l);
            l.arg(&squares).arg(&mut self.partial);
            // SAFETY: cg_update_sum(float*, float*, const float*, const
            // float*, size_t, const double*, int, int, const u8*, const
            // float*, int, double*): vectors of n, the finest grid's links
            // and diagonal (or null), 2 × blocks partial sums.
            unsafe { l.launch(cfg) }.map(drop).map_err(dev)?;
        }
        if singular {
            self.finish(SUM, -1)?;
            self.subtract_mean_dots(Vector::R, (Vector::R, Vector::R, RR), None)?;
        } else {
            self.finish(RR, -1)?;
        }
        Ok(())
    }

    /// [`DeviceFlow::queue_iteration`] captured into graph `key` and run:
    /// one launch instead of a hundred-odd, most of them on the coarse
    /// grids, where launching costs more than computing. A driver that
    /// cannot capture leaves the iterations to be queued one by one.
    fn capture_iteration(
        &mut self,
        key: usize,
        how: (i32, i32, bool, bool),
    ) -> Result<(), SolverError> {
        let stream = self.gpu.stream.clone();
        let mode = cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        if stream.begin_capture(mode).is_err() {
            self.capture = false;
            return self.queue_iteration(how);
        }
        let (swapped, p_swapped) = (self.swapped, self.p_swapped);
        let queued = self.queue_iteration(how);
        let flags = cudarc::driver::sys::CUgraphInstantiate_flags(0);
        let graph = stream.end_capture(flags);
        match (queued, graph) {
            (Ok(()), Ok(Some(graph))) => {
                graph.launch().map_err(dev)?;
                self.graphs[key] = Some(Graph(graph));
                Ok(())
            }
            (queued, _) => {
                // Nothing captured ran: queue it again, unrecorded.
                queued?;
                self.capture = false;
                if self.swapped != swapped {
                    self.swap_z();
                }
                if self.p_swapped != p_swapped {
                    self.swap_p();
                }
                self.queue_iteration(how)
            }
        }
    }
}

/// out = A x (`residual`: b − A x) on `level`.
fn apply(
    gpu: &Gpu,
    level: &Level,
    x: &CudaSlice<f32>,
    b: &CudaSlice<f32>,
    residual: bool,
    out: &mut CudaSlice<f32>,
) -> Result<(), SolverError> {
    let residual = residual as i32;
    let mut l = gpu.stream.launch_builder(&gpu.k.apply);
    level.push(&mut l);
    l.arg(x).arg(b).arg(&residual).arg(out);
    // SAFETY: apply(const u8*, const float*, const float*, int, int, int,
    // unsigned, const float*, const float*, int, float*): the level's cells
    // (weights three arrays of cells, or null).
    unsafe { l.launch(cells_config(level.size)) }
        .map(drop)
        .map_err(dev)
}

/// `count` red-black Gauss–Seidel sweeps on `level`, over-relaxed by
/// `omega`, the colours in the opposite order when `reverse`; from x = 0
/// when `from_zero` (x's values on entry unused: the first pass zeroes the
/// other colour's cells, or, along a periodic axis of odd length, x is
/// zeroed first).
#[allow(clippy::too_many_arguments)]
fn smooth<T: DeviceRepr + ValidAsZeroBits>(
    gpu: &Gpu,
    level: &Level,
    x: &mut CudaSlice<T>,
    b: &CudaSlice<T>,
    count: usize,
    reverse: bool,
    omega: f32,
    from_zero: bool,
    storage: Storage,
    mut ends: Ends,
) -> Result<(), SolverError> {
    let zero_pass = from_zero && level.odd == 0 && count > 0;
    if from_zero && !zero_pass {
        gpu.stream.memset_zeros(&mut *x).map_err(dev)?;
    }
    let split = storage.links.is_some();
    assert!(
        !split || (ends.from.is_some() == zero_pass && (ends.into.is_none() || count > 0)),
        "split rows: r for the pass from zero alone, z for the last passes"
    );
    let passes = level.odd.count_ones() as i32;
    let quad = storage.quad.filter(|_| quad_level(level));
    if let Some(Quad { smooth: kernel, .. }) = quad {
        return smooth_quad(
            gpu, level, kernel, storage, x, b, count, reverse, omega, zero_pass, ends,
        );
    }
    assert!(
        storage.quad.is_none() || storage.scale.is_none(),
        "split rows in 16 bits four cells a thread alone"
    );
    for sweep in 0..count {
        for (k, colour) in [reverse as i32, !reverse as i32].into_iter().enumerate() {
            for pass in 0..=passes {
                let zero = (zero_pass && sweep == 0 && k == 0) as i32;
                let last = sweep + 1 == count && k == 1;
                let kernel = match level.use_words {
                    true => &gpu.k.smooth_packed,
                    false => storage.smooth,
                };
                let mut l = gpu.stream.launch_builder(kernel);
                storage.push_level(level, &mut l);
                l.arg(&mut *x)
                    .arg(b)
                    .arg(&colour)
                    .arg(&level.odd)
                    .arg(&pass)
                    .arg(&zero)
                    .arg(&omega);
                storage.push_scale(&mut l);
                if split {
                    ends.push(&mut l, zero == 1, last);
                }
                let mut half = level.size;
                half[0] = half[0].div_ceil(2);
                // SAFETY: smooth(const u8*, const float*, const float*, int,
                // int, int, unsigned, T*, const T*, int, unsigned, int, int,
                // float)
                // (and, smooth_half, const float*; smooth_split, r and z,
                // const float* and float*, the finest grid's cells or null;
                // smooth_packed the words for the weights, a null
                // diagonal): the level's cells, a thread per cell of the
                // colour (per pair, `zero`), x and b in the storage's type
                // (and, split, the links in its order).
                unsafe { l.launch(cells_config(half)) }
                    .map(drop)
                    .map_err(dev)?;
            }
        }
    }
    Ok(())
}

/// Whether a level's colour passes on split rows take four cells a thread:
/// its length along x a multiple of 8, no periodic axis of odd length.
fn quad_level(level: &Level) -> bool {
    level.odd == 0 && level.size[0].is_multiple_of(8)
}

/// [`smooth`]'s colour passes on split rows four cells a thread
/// (`smooth_split4`; the level's length along x a multiple of 8, no
/// periodic axis of odd length).
#[allow(clippy::too_many_arguments)]
fn smooth_quad<T: DeviceRepr>(
    gpu: &Gpu,
    level: &Level,
    kernel: &CudaFunction,
    storage: Storage,
    x: &mut CudaSlice<T>,
    b: &CudaSlice<T>,
    count: usize,
    reverse: bool,
    omega: f32,
    zero_pass: bool,
    mut ends: Ends,
) -> Result<(), SolverError> {
    let links = storage.links.expect("four cells a thread on split rows");
    // Four cells a thread of a colour's half of each row.
    let [nx, ny, nz] = level.size;
    let config = quads_config([nx / 2, ny, nz]);
    for sweep in 0..count {
        for (k, colour) in [reverse as i32, !reverse as i32].into_iter().enumerate() {
            let zero = (zero_pass && sweep == 0 && k == 0) as i32;
            let last = sweep + 1 == count && k == 1;
            let mut l = gpu.stream.launch_builder(kernel);
            l.arg(links)
                .arg(&level.dims[0])
                .arg(&level.dims[1])
                .arg(&level.dims[2])
                .arg(&level.faces)
                .arg(&mut *x)
                .arg(b)
                .arg(&colour)
                .arg(&zero)
                .arg(&omega);
            ends.push(&mut l, zero == 1, last);
            storage.push_scale(&mut l);
            // SAFETY: smooth_split4(const u8*, int, int, int, unsigned,
            // float*, float*, int, int, float, const float*, float*) (and,
            // smooth_split4_half, x and b u16*, then const float*): the
            // finest grid's split links, x and b, r and z in the natural
            // order or null; a thread per four cells of the colour, each
            // array's base 16-byte aligned (allocations) and each thread's
            // four cells a 16- (8-) byte word (x's length a multiple of 8).
            unsafe { l.launch(config) }.map(drop).map_err(dev)?;
        }
    }
    Ok(())
}

/// The coarsest grid's solve: x = A⁻¹ b, dense.
fn coarsest_solve(
    gpu: &Gpu,
    coarsest: &mut Coarsest,
    singular: bool,
    x: &mut CudaSlice<f32>,
    b: &CudaSlice<f32>,
) -> Result<(), SolverError> {
    let s = &gpu.stream;
    let singular = singular as i32;
    let mut l = s.launch_builder(&gpu.k.coarsest_gather);
    l.arg(b)
        .arg(&coarsest.cells)
        .arg(&coarsest.m)
        .arg(&singular)
        .arg(&mut coarsest.y);
    // SAFETY: coarsest_gather(const float*, const unsigned*, unsigned, int,
    // double*): m cells of the level, m values.
    unsafe { l.launch(one_block(512)) }.map(drop).map_err(dev)?;
    s.memset_zeros(&mut *x).map_err(dev)?;
    let mut l = s.launch_builder(&gpu.k.coarsest_solve);
    l.arg(&coarsest.inverse)
        .arg(&coarsest.y)
        .arg(&coarsest.cells)
        .arg(&coarsest.m)
        .arg(&mut *x);
    let rows = LaunchConfig {
        grid_dim: (coarsest.m.div_ceil(8).max(1), 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: coarsest_solve(const double*, const double*, const unsigned*,
    // unsigned, float*): an m × m matrix, m values and cells.
    unsafe { l.launch(rows) }.map(drop).map_err(dev)
}

/// The cycle from `levels[0]` (level `depth` of the hierarchy, two levels
/// or more) down, shaped as the CPU's: x ≈ A⁻¹ b, from x as it is or, when
/// `from_zero`, from x = 0 (whatever x holds on entry); x and
/// b in `storage`'s type (the coarser grids' always f32). The coarser
/// grids' vectors are `coarser` (one fewer than `levels`); `shape`:
/// whether the operator is singular, and the cycle's shape.
#[allow(clippy::too_many_arguments)]
fn down_up<T: DeviceRepr + ValidAsZeroBits>(
    gpu: &Gpu,
    depth: usize,
    levels: &[Level],
    coarser: &mut [(CudaSlice<f32>, CudaSlice<f32>)],
    coarsest: &mut Coarsest,
    (singular, shape): (bool, Cycle),
    x: &mut CudaSlice<T>,
    b: &CudaSlice<T>,
    from_zero: bool,
    storage: Storage,
    ends: Ends,
) -> Result<(), SolverError> {
    let s = &gpu.stream;
    let (fine, coarse) = (&levels[0], &levels[1]);
    let [down, up] = shape.sweeps(depth);
    let Ends { from, into } = ends;
    let first = Ends { from, into: None };
    let omega = shape.omega();
    smooth(
        gpu, fine, x, b, down, false, omega, from_zero, storage, first,
    )?;
    let ((cx, cb), deeper) = coarser.split_first_mut().expect("a coarser grid");
    let [fx, fy, fz] = fine.size.map(|v| v as i32);
    let [nx, ny, nz] = coarse.size.map(|v| v as i32);
    // Split rows four coarse cells a thread where the fine length along x
    // is a multiple of 8.
    let quad = storage
        .quad
        .filter(|_| !fine.use_words && fine.size[0].is_multiple_of(8));
    let (kernel, config) = match (fine.use_words, quad) {
        (true, _) => (&gpu.k.restrict_residual_packed, cells_config(coarse.size)),
        (false, Some(Quad { restrict: four, .. })) => (four, quads_config(coarse.size)),
        (false, None) => (storage.restrict, cells_config(coarse.size)),
    };
    let mut l = s.launch_builder(kernel);
    storage.push_level(fine, &mut l);
    l.arg(&*x)
        .arg(b)
        .arg(&coarse.diag)
        .arg(&nx)
        .arg(&ny)
        .arg(&nz)
        .arg(&mut *cb);
    storage.push_scale(&mut l);
    // SAFETY: restrict_residual(const u8*, const float*, const float*, int,
    // int, int, unsigned, const T*, const T*, const float*, int, int, int,
    // float*) (and, restrict_residual_half, const float*;
    // restrict_residual_packed the words for the weights, a null diagonal;
    // restrict_residual_split as restrict_residual, on split rows; its
    // four-cell form, a thread per four coarse cells, their 16-byte words
    // aligned with the fine length along x a multiple of 8): the fine
    // level's cells (weights three arrays of cells, or null), the coarse
    // cells.
    unsafe { l.launch(config) }.map(drop).map_err(dev)?;
    let f32 = Storage::f32(&gpu.k);
    // Later visits go on from the first's result, as the CPU's.
    for visit in 0..shape.visits(depth) {
        if levels.len() == 2 {
            coarsest_solve(gpu, coarsest, singular, cx, cb)?;
        } else {
            let (deeper, below, first) = (&mut *deeper, &levels[1..], visit == 0);
            let shape = (singular, shape);
            down_up(
                gpu,
                depth + 1,
                below,
                deeper,
                coarsest,
                shape,
                cx,
                cb,
                first,
                f32,
                Ends::none(),
            )?;
        }
    }
    // Split rows four coarse columns a thread where the restriction took
    // four coarse cells.
    let columns = [coarse.size[0], fine.size[1], fine.size[2]];
    let (kernel, config) = match quad {
        Some(Quad { prolong: four, .. }) => (four, quads_config(columns)),
        None => (storage.prolong, cells_config(columns)),
    };
    let mut l = s.launch_builder(kernel);
    l.arg(&*cx)
        .arg(&coarse.diag)
        .arg(&nx)
        .arg(&ny)
        .arg(&nz)
        .arg(storage.links.unwrap_or(&fine.links));
    fine.push_diag(&mut l);
    l.arg(&fx).arg(&fy).arg(&fz).arg(&fine.faces).arg(&mut *x);
    storage.push_scale(&mut l);
    // SAFETY: prolong_add(const float*, const float*, int, int, int, const
    // u8*, const float*, int, int, int, unsigned, T*) (and, prolong_add_half,
    // const float*; prolong_add_split as prolong_add, on split rows): coarse
    // and fine cells (the fine diagonal null where its links hold it), a
    // thread per two fine cells of a row (prolong_add_split4 as
    // prolong_add_split, a thread per eight, their 16-byte words aligned).
    unsafe { l.launch(config) }.map(drop).map_err(dev)?;
    let last = Ends { from: None, into };
    smooth(gpu, fine, x, b, up, true, omega, false, storage, last)
}

#[cfg(test)]
mod emulated;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solver::projection::poisson::neighbour;

    /// A grid of `size` with a block, a wall with gaps thinner than a
    /// coarse cell, a fixed-pressure face and a periodic axis.
    fn obstacles(size: [usize; 3]) -> Operator {
        let fluid: Vec<bool> = (0..size.iter().product())
            .map(|c| {
                let [x, y, z] = super::super::poisson::coords(size, c);
                !((10..13).contains(&x) && y < 14 && z < 9 || x == 25 && y % 3 == 0)
            })
            .collect();
        let faces = [
            [Face::Wall, Face::Fixed],
            [Face::Periodic; 2],
            [Face::Wall; 2],
        ];
        Operator::new(size, &fluid, faces)
    }

    /// The first three coarse grids of a grid with obstacles and a
    /// fixed-pressure face pack one word a cell and decode (as the kernels'
    /// `packed_field`) to their arrays to the bit; a value that is no count
    /// of 1/64, or too large, or links other than the couplings that are
    /// not 0, keep the arrays.
    #[test]
    fn the_first_coarse_grids_pack_their_coefficients_to_the_bit() {
        let mut op = obstacles([64, 40, 32]);
        let field = |word: u32, k: usize| {
            let bits = if k < 3 {
                (word >> (7 * k)) & 127
            } else {
                word >> 21
            };
            bits as f32 * 0.015625
        };
        for depth in 1..=3 {
            op = op.coarse();
            let n = op.cells();
            let upward = upward_weights(&op).unwrap().expect("coarse weights");
            let words =
                packed_coefficients(&op, &upward).unwrap_or_else(|| panic!("level {depth} packs"));
            for c in 0..n {
                assert_eq!(field(words[c], 3).to_bits(), op.diag[c].to_bits());
                for a in 0..3 {
                    assert_eq!(field(words[c], a).to_bits(), upward[a * n + c].to_bits());
                }
            }
            // Some coupling strictly between 0 and 1 at this depth.
            assert!(upward.iter().any(|&w| w > 0.0 && w < 1.0), "level {depth}");
        }
        let upward = upward_weights(&op).unwrap().expect("coarse weights");
        for (c, v) in [(0, 1.0 / 256.0), (1, 2.0), (2, -0.25)] {
            let mut odd = upward.clone();
            odd[c] = v;
            assert_eq!(packed_coefficients(&op, &odd), None, "coupling {v}");
        }
        let mut big = op.clone();
        big.diag[0] = 32.0;
        assert_eq!(packed_coefficients(&big, &upward), None, "diagonal 32");
        let mut unlinked = op.clone();
        let c = (0..unlinked.cells())
            .find(|&c| unlinked.links[c] & 1 != 0)
            .unwrap();
        unlinked.links[c] &= !1;
        assert_eq!(
            packed_coefficients(&unlinked, &upward),
            None,
            "a link dropped"
        );
    }

    /// The coarse grids' couplings, three a cell, give back all six at
    /// every link (odd and periodic axes, obstacles thinner than a coarse
    /// cell), and a coupling that differs from its neighbour's is refused.
    #[test]
    fn three_couplings_a_cell_hold_the_coarse_operators() {
        let mut op = obstacles([37, 20, 15]);
        assert_eq!(upward_weights(&op), Ok(None), "the finest grid's are all 1");
        let mut checked = 0;
        while op.cells() > 8 {
            op = op.coarse();
            let n = op.cells();
            let upward = upward_weights(&op).unwrap().expect("coarse weights");
            for c in 0..n {
                let p = super::super::poisson::coords(op.size, c);
                for dir in 0..6 {
                    if op.links[c] & (1 << dir) == 0 {
                        continue;
                    }
                    let a = dir / 2;
                    let m = neighbour(op.size, &op.faces, p, dir).expect("linked");
                    let w = if dir % 2 == 1 {
                        upward[a * n + c]
                    } else {
                        upward[a * n + m]
                    };
                    assert_eq!(w, op.weights[c][dir], "{:?} cell {p:?} dir {dir}", op.size);
                    checked += 1;
                }
            }
            if n > 100 {
                let mut broken = op.clone();
                let c = (0..n).find(|&c| broken.links[c] & 1 != 0).unwrap();
                broken.weights[c][0] *= 1.5;
                assert!(upward_weights(&broken).is_err());
            }
        }
        assert!(checked > 1000, "{checked} links");
    }

    /// The cells `explicit_terms` takes itself: inside the outer layer, with
    /// fluid or outlets on all six sides (the cell's own kind aside).
    #[test]
    fn plain_cells_are_the_inner_ones_with_six_neighbours_that_flow() {
        let size = [6, 5, 4];
        let n = 120;
        let index = |x: usize, y: usize, z: usize| x + 6 * (y + 5 * z);
        let mut kinds = vec![Kind::Fluid; n];
        kinds[index(2, 2, 1)] = Kind::Wall;
        kinds[index(4, 3, 2)] = Kind::Outflow;
        kinds[index(1, 1, 2)] = Kind::Slip;
        let flow = Flow::new(
            size,
            [true, false, false],
            kinds,
            vec![[0.0; 3]; n],
            0.1,
            1e-6,
        );
        let plain = plain_cells(&flow);
        let expected = |x: usize, y: usize, z: usize| {
            let inner = (1..5).contains(&x) && (1..4).contains(&y) && (1..3).contains(&z);
            // Beside the wall at (2, 2, 1) or the free-slip cell at (1, 1, 2);
            // the outlet at (4, 3, 2) flows, so its neighbours stay plain.
            let beside = |(a, b, c): (usize, usize, usize)| {
                x.abs_diff(a) + y.abs_diff(b) + z.abs_diff(c) == 1
            };
            inner && !beside((2, 2, 1)) && !beside((1, 1, 2))
        };
        for z in 0..4 {
            for y in 0..5 {
                for x in 0..6 {
                    assert_eq!(plain[index(x, y, z)], expected(x, y, z), "{x} {y} {z}");
                }
            }
        }
        // A periodic axis does not make its end layers plain: their
        // stencils wrap.
        assert!(!plain[index(0, 2, 1)] && !plain[index(5, 2, 2)]);
        // The wall cell itself is plain, its neighbours flowing: its faces
        // are closed and `explicit_terms` writes their zeros.
        assert!(plain[index(2, 2, 1)] && plain[index(4, 3, 2)]);
    }
}
