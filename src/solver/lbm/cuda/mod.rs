//! The CUDA solver: `kernels/lbm/d3q19.cu` compiled at run time by NVRTC and launched
//! through cudarc (dynamic loading, so the program builds and runs its CPU path
//! on machines without CUDA).
//!
//! Same layout, streaming scheme, boundary rules and arithmetic order as the CPU
//! reference solver; the FP32 kernels are compiled without FMA contraction so
//! that their results agree with it bit for bit. Every CUDA call's error is checked, and
//! `step` synchronises and checks once per batch of launches.
//!
//! By job: [`compile`] (NVRTC), [`device`] (probing, memory budget), [`launch`]
//! (kernel parameters, kernel choice, launches), [`display`] (display frames
//! and their export to Vulkan), [`exchange`] (halos between GPUs); the
//! [`Solver`] implementation is here.

mod compile;
mod device;
mod display;
mod exchange;
mod launch;

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};

pub use compile::{compile, compile_options, kernel_source, leaving_velocity, KERNEL_SOURCE};
pub(crate) use device::guarded;
pub use device::{
    availability, check_fits, device_count, largest_cube, probe, probe_device, CudaUnavailable,
    DeviceInfo,
};
pub use exchange::{exchange_choice, CudaLink, NcclComm, Transport};
pub use launch::{
    fp16c_decode, fp16c_encode, lattice_config, prefers_odd_quads, step_launch, CudaParams, Quads,
    StepKernel, DEFAULT_BLOCK,
};

use super::boundary::{
    face_sector_companions, light_mask, odd_rules as odd_rules_of, rules_are_plain, LightCells,
};
use super::lattice::Q;
use super::links::{check as check_links, WallLinks};
use super::slabs::SlabLattice;
use crate::solver::{
    average, check_params, flags, Averages, Fields, Grid, Initial, Params, Precision, Schedule,
    Solver, SolverError, Stats, TakenFrame,
};
use crate::system::{LightKnob, Tuning};
use device::lattice_bytes;
use display::Display;
use exchange::SlabLink;
use launch::{fill_nan, Kernels, Lattice, REDUCTION_BLOCKS};

/// Per-block partial of the `stats` kernel. Keep in sync with `StatsPartial`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
struct StatsPartial {
    mass: f64,
    momentum: [f64; 3],
    count: f64,
    max_speed: f32,
    pad: u32,
    max_cell: u64,
    bad_cell: u64,
}
const _: () = assert!(std::mem::size_of::<StatsPartial>() == 64);

/// Where a solver runs: its GPU, and the layers it updates when it is one
/// slab of a domain over several GPUs (the others are halos).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub ordinal: usize,
    pub owned: Option<Range<usize>>,
}

impl Placement {
    /// Slab `s` on GPU `s`, updating the layers `owned`.
    pub fn slab(s: usize, owned: Range<usize>) -> Placement {
        Placement {
            ordinal: s,
            owned: Some(owned),
        }
    }
}

/// D3Q19 on one CUDA GPU, or on one slab of a domain spread over several.
pub struct CudaSolver {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    kernels: Kernels,
    lattice: Lattice,
    /// Cell flags and bulk bits (`flags::with_bulk_bits`).
    flags_dev: CudaSlice<u8>,
    /// Cells with the NEAR flag (boundary kernel), sorted, on the device and here.
    near_dev: CudaSlice<u32>,
    near: Vec<u32>,
    /// q of the interpolated walls' links, 18 per entry of `near`
    /// ([`WallLinks::aligned`]), while there are any.
    links_dev: Option<CudaSlice<f32>>,
    /// The NEAR cells each step leaves to its boundary kernels.
    lists: BoundaryLists,
    /// Layers (z) this solver updates; the others are halos of a slab.
    owned: Range<usize>,
    link: Option<SlabLink>,
    fields_dev: Option<CudaSlice<f32>>,
    display: Option<Display>,
    /// [`Tuning::step_frames`]: running chunks end with a step that leaves
    /// its fields in `frame_planes` for the display frame begun after it
    /// (off again where there was no memory for them).
    step_frames: bool,
    /// ux, uy, uz, ρ of the state a step read (4n floats), once needed.
    frame_planes: Option<CudaSlice<f32>>,
    /// The step whose fields `frame_planes` hold, until the state changes
    /// another way than by that step.
    planes_left: Option<u64>,
    /// Display frames made from `frame_planes` (for the check).
    pub frames_from_planes: u64,
    /// This GPU's UUID once a graphics device on it asked for shared display
    /// frames ([`Solver::share_display`]).
    share: Option<[u8; 16]>,
    /// Velocity snapshot of `velocity_change` (3n floats) and its step.
    snapshot_dev: Option<(u64, CudaSlice<f32>)>,
    /// Time averages, while kept.
    averages: Option<DeviceAverages>,
    stats_dev: CudaSlice<u8>,
    forces_dev: CudaSlice<f64>,
    grid: Grid,
    flags: Vec<u8>,
    params: Params,
    kparams: CudaParams,
    initial: Initial,
    precision: Precision,
    t: u64,
    block: u32,
    /// Bulk step kernels launched as programmatic dependents (compute
    /// capability 9.0 and newer, unless [`Tuning::overlap_steps`] is off).
    overlap_steps: bool,
    /// [`Tuning::exchange`]: how slabs exchange halos.
    exchange: Option<String>,
    device_name: String,
    /// Fill output buffers with NaN before each use (checks).
    pub poison: bool,
    /// The odd step's bulk kernel is `aa_odd4` (see `set_odd_quads`).
    odd_quads: bool,
    /// Whether the odd step's pair kernel runs its warps on from row to row
    /// (`launch::Quads::odd_rows`; [`Tuning::odd_rows`]).
    odd_rows: Option<bool>,
    /// Whether the even step may take `aa_even4`, `None` by its size (see
    /// `set_even_quads`).
    even_quads: Option<bool>,
    /// The NEAR cells are updated in the bulk kernel's launch (its `_near`
    /// variant) where it has one, instead of by `aa_boundary` after it
    /// ([`Tuning::fuse_near`], `set_fuse_near`).
    fuse_near: bool,
    /// The odd step's NEAR cells that take its light path
    /// ([`Tuning::light_cells`], [`light_cells`]).
    light_cells: LightCells,
    /// The even step's list takes the cells that share the blocks of this
    /// many cells of its faces' cells ([`Tuning::face_sectors`],
    /// `boundary::face_sector_companions`; 0: none).
    face_sector: usize,
    /// The block orders of `aa_even2_near` launches (launch::near_schedule),
    /// by layers, made on first use.
    near_schedules: Vec<(Range<usize>, CudaSlice<u32>)>,
    /// How `kernels` were compiled (again when the collision model changes).
    build: KernelBuild,
    /// The same compiled with `WRITE_VELOCITY`, once a step was asked to
    /// leave its velocity ([`Solver::enqueue_leaving_velocity`]).
    velocity_kernels: Option<Kernels>,
    /// Whether any cell is an inlet (`launch_step_leaving_velocity` then
    /// writes theirs with `velocity_rest`).
    inlets: bool,
    /// Where the odd step's boundary kernel runs beside its bulk kernel
    /// ([`Tuning::concurrent_boundary`]; not for slabs).
    beside: Option<launch::Beside>,
    /// The five planes a halo exchange through the host copies
    /// (`read_planes`, `write_planes`), kept from step to step.
    host_planes: Vec<u8>,
    /// A masked halo write's merged planes (`write_planes`), kept for the
    /// same reason.
    merged_planes: Vec<f32>,
}

/// A step's NEAR cells that the bulk kernels leave to a boundary kernel,
/// sorted, here and on the device, with their links' q (18 an entry) while
/// there are interpolated walls.
struct BoundaryList {
    cells: Vec<u32>,
    cells_dev: CudaSlice<u32>,
    links_dev: Option<CudaSlice<f32>>,
}

/// The boundary kernels' lists.
struct BoundaryLists {
    /// The even step's (`aa_boundary`, or the NEAR blocks of
    /// `aa_even2_near`): the NEAR cells whose even update is not the bulk
    /// one (`flags::even_step_differs`).
    even: BoundaryList,
    /// The odd step's light NEAR cells (`boundary::light_mask`), with their
    /// masks, for the last blocks of `aa_boundary_rules`.
    light: BoundaryList,
    light_masks_dev: CudaSlice<u64>,
    /// The odd step's other NEAR cells, for `aa_boundary_rules`, with their
    /// rules (`boundary::odd_rules`).
    rules: BoundaryList,
    rules_dev: CudaSlice<u64>,
    /// No NEAR cell of `rules` needs the free-slip, edge or outlet code
    /// (`boundary::rules_are_plain`): `aa_boundary_rules_plain` takes them.
    plain: bool,
}

impl BoundaryLists {
    /// The lists, and the flags with their bulk bits, for NEAR cells `near`
    /// with the links' q `aligned` (18 an entry of `near`); `light` says
    /// which of the odd step's take its light path; the even step's takes
    /// the cells sharing its faces' cells' blocks of `face_sector` cells
    /// too ([`face_sector_companions`]; 0: none).
    fn new(
        stream: &Arc<CudaStream>,
        grid: &Grid,
        cell_flags: &[u8],
        near: &[u32],
        aligned: Option<&[f32]>,
        light: LightCells,
        face_sector: usize,
    ) -> Result<(BoundaryLists, Vec<u8>), SolverError> {
        use rayon::prelude::*;

        let links_of = |k: usize| aligned.map(|q| &q[(Q - 1) * k..(Q - 1) * (k + 1)]);
        let linked = |k: usize| links_of(k).is_some_and(|q| q.iter().any(|&v| v != 0.0));
        // Cells with the entry of `near` whose links' q they take (none: no
        // links).
        let list_of = |entries: &[(u32, Option<usize>)]| -> Result<BoundaryList, SolverError> {
            let cells: Vec<u32> = entries.iter().map(|e| e.0).collect();
            let links: Option<Vec<f32>> = aligned.map(|_| {
                entries
                    .iter()
                    .flat_map(|e| match e.1.and_then(links_of) {
                        Some(q) => q.to_vec(),
                        None => vec![0.0; Q - 1],
                    })
                    .collect()
            });
            Ok(BoundaryList {
                cells_dev: upload_list(stream, &cells)?,
                links_dev: links.map(|q| upload_list(stream, &q)).transpose()?,
                cells,
            })
        };
        // Entries `entries` of `near` with their links' q.
        let list = |entries: &[usize]| -> Result<BoundaryList, SolverError> {
            let entries: Vec<(u32, Option<usize>)> =
                entries.iter().map(|&k| (near[k], Some(k))).collect();
            list_of(&entries)
        };
        let mut even: Vec<(u32, Option<usize>)> = (0..near.len())
            .filter(|&k| flags::even_step_differs(grid, cell_flags, near[k] as usize, linked(k)))
            .map(|k| (near[k], Some(k)))
            .collect();
        let listed: Vec<u32> = even.iter().map(|e| e.0).collect();
        let companions = face_sector_companions(grid, cell_flags, &listed, face_sector);
        even.extend(companions.iter().map(|&c| (c, None)));
        even.sort_unstable_by_key(|e| e.0);
        let even = list_of(&even)?;
        let rules: Vec<u64> = near
            .par_iter()
            .map(|&c| odd_rules_of(grid, cell_flags, c as usize))
            .collect();
        let masks: Vec<Option<u64>> = (0..near.len())
            .map(|k| {
                light_mask(
                    grid,
                    cell_flags,
                    near[k] as usize,
                    rules[k],
                    linked(k),
                    light,
                )
            })
            .collect();
        let (lights, heavy): (Vec<usize>, Vec<usize>) =
            (0..near.len()).partition(|&k| masks[k].is_some());
        let light_masks: Vec<u64> = lights.iter().filter_map(|&k| masks[k]).collect();
        let heavy_rules: Vec<u64> = heavy.iter().map(|&k| rules[k]).collect();
        let bits = flags::with_bulk_bits(cell_flags, &even.cells);
        let rules = list(&heavy)?;
        Ok((
            BoundaryLists {
                even,
                light: list(&lights)?,
                light_masks_dev: upload_list(stream, &light_masks)?,
                plain: rules_are_plain(cell_flags, &rules.cells, &heavy_rules),
                rules,
                rules_dev: upload_list(stream, &heavy_rules)?,
            },
            bits,
        ))
    }
}

/// Which of the odd step's NEAR cells take its light path
/// ([`Tuning::light_cells`]): by default all where the lattice of `lattice`
/// bytes fits in the device's L2 of `l2` bytes, else
/// [`LightCells::NotAlongX`] (whose doc says why).
fn light_cells(knob: LightKnob, lattice: u64, l2: u64) -> LightCells {
    match knob {
        LightKnob::Auto if lattice <= l2 => LightCells::All,
        LightKnob::Auto | LightKnob::NotAlongX => LightCells::NotAlongX,
        LightKnob::All => LightCells::All,
        LightKnob::Off => LightCells::None,
    }
}

/// How many cells of the even step's x faces' blocks its list takes
/// ([`BoundaryLists::new`]): a 32-byte sector's 8 in FP32 where `on`
/// ([`Tuning::face_sectors`]), none in 16-bit. On the H200 the FP32
/// scenarios with outlets gained 1.1 to 1.6 points of the box's speed; in
/// 16-bit, whose sectors hold 16 cells, the list's extra cells cost more than
/// the sectors saved, 1.5 to 2.7 points (BENCHMARKS.md, forty-fourth
/// session).
fn face_sector(on: bool, precision: Precision) -> usize {
    match (on, precision) {
        (true, Precision::Fp32) => 32 / precision.bytes_per_population(),
        _ => 0,
    }
}

/// A list on the device; cudarc cannot allocate zero elements, so an empty
/// one keeps one dummy entry.
fn upload_list<T: cudarc::driver::DeviceRepr + Default + Copy>(
    stream: &Arc<CudaStream>,
    list: &[T],
) -> Result<CudaSlice<T>, SolverError> {
    let dummy = [T::default()];
    stream
        .clone_htod(if list.is_empty() { &dummy[..] } else { list })
        .map_err(dev)
}

/// Time averages on the device (`average_sample`): four planes of means and
/// four of sums of squared deviations, n doubles each.
struct DeviceAverages {
    schedule: Schedule,
    samples: u64,
    acc: CudaSlice<f64>,
}

/// What the kernels are compiled for.
#[derive(Clone, Debug, PartialEq)]
struct KernelBuild {
    precision: Precision,
    capability: (i32, i32),
    /// The developer's `#define`s ([`Tuning::kernel_defines`]).
    defines: String,
    /// With `COLLISION_MODEL`: a subgrid model or the regularized collision
    /// ([`Params::model`]); without, plain BGK/TRT, untouched by either.
    model: bool,
}

impl KernelBuild {
    /// The same with `WRITE_VELOCITY`: step kernels that leave the velocity.
    fn leaving_velocity(&self) -> KernelBuild {
        KernelBuild {
            defines: compile::leaving_velocity(&self.defines),
            ..self.clone()
        }
    }

    fn load(&self, ctx: &Arc<CudaContext>) -> Result<Kernels, SolverError> {
        let (major, minor) = self.capability;
        let ptx = compile(self.precision, major, minor, &self.defines, self.model)
            .map_err(SolverError::Device)?;
        let module = ctx.load_module(ptx).map_err(dev)?;
        let load = |name: &str| module.load_function(name).map_err(dev);
        Ok(Kernels {
            even: load("aa_even")?,
            even2: load("aa_even2")?,
            // Absent in FP32, in the WRITE_VELOCITY module and where
            // compiled with NO_EVEN_QUAD.
            even4: module.load_function("aa_even4").ok(),
            odd2: load("aa_odd2")?,
            odd2_rows: load("aa_odd2_rows")?,
            odd4: match self.precision {
                // Absent when compiled with NO_ODD_QUAD (Tuning::kernel_defines,
                // for benchmarks against aa_odd2).
                Precision::Fp32 => module.load_function("aa_odd4").ok(),
                Precision::Fp16 => None,
            },
            odd: load("aa_odd")?,
            even2_near: load("aa_even2_near")?,
            boundary: load("aa_boundary")?,
            boundary_rules: load("aa_boundary_rules")?,
            boundary_rules_plain: load("aa_boundary_rules_plain")?,
            rules_lanes: compile::rules_lanes(&self.defines),
            fields: load("fields")?,
            average: load("average_sample")?,
            display: load("display_fields")?,
            display_planes: load("display_planes")?,
            stats: load("stats")?,
            forces: load("forces")?,
            init_uniform: load("init_uniform")?,
            fill_f32: load("fill_f32")?,
            velocity_change: load("velocity_change")?,
            unpack: load("unpack_planes")?,
            links_initial: load("links_initial")?,
            velocity_rest: load("velocity_rest")?,
        })
    }
}

fn dev(e: impl std::fmt::Display) -> SolverError {
    SolverError::Device(e.to_string())
}

impl CudaSolver {
    /// Compiles the kernels, checks memory, uploads flags and the initial state.
    pub fn new(
        grid: Grid,
        cell_flags: Vec<u8>,
        params: Params,
        initial: Initial,
        precision: Precision,
        tuning: &Tuning,
    ) -> Result<CudaSolver, SolverError> {
        let whole = Placement {
            ordinal: 0,
            owned: None,
        };
        Self::on_device(whole, grid, cell_flags, params, initial, precision, tuning)
    }

    /// As [`CudaSolver::new`] where `placement` says: on its device, updating
    /// only its layers (one slab of a [`crate::solver::lbm::slabs::SlabSolver`]).
    pub fn on_device(
        placement: Placement,
        grid: Grid,
        mut cell_flags: Vec<u8>,
        params: Params,
        initial: Initial,
        precision: Precision,
        tuning: &Tuning,
    ) -> Result<CudaSolver, SolverError> {
        let Placement { ordinal, owned } = placement;
        check_params(&params)?;
        let info = probe_device(ordinal).map_err(|e| SolverError::Device(e.0))?;
        if cell_flags.len() != grid.cells() {
            return Err(SolverError::StateMismatch(format!(
                "{} flags for a grid of {} cells",
                cell_flags.len(),
                grid.cells()
            )));
        }
        // The kernels index cells with 32 bits and launch y and z as grid rows.
        if grid.cells() as u64 >= 1u64 << 32 || grid.size[1] > 65535 || grid.size[2] > 65535 {
            return Err(SolverError::InvalidParams(format!(
                "grid {grid}: the CUDA solver takes fewer than 2^32 cells and at most 65535 cells along y and z"
            )));
        }
        check_fits(grid.size, precision, info.free_bytes)?;
        flags::mark_near_cells(&grid, &mut cell_flags);

        let ctx = guarded("creating the CUDA context", || CudaContext::new(ordinal))
            .map_err(SolverError::Device)?;
        // The solver orders its streams (the halo exchange of a slab, the copies
        // of display frames) with its own events; cudarc's per-argument event
        // tracking would add records to every launch.
        // SAFETY: every buffer is used on `stream` only, except the exchange on
        // `comm`, ordered by `edges_done` / `comm_done`, and the display copies,
        // ordered by each slot's `computed` / `copied`.
        unsafe { ctx.disable_event_tracking() };
        let link = if owned.is_some() {
            let comm = ctx.new_stream().map_err(dev)?;
            Some(SlabLink {
                comm,
                edges_done: ctx.new_event(None).map_err(dev)?,
                comm_done: ctx.new_event(None).map_err(dev)?,
                pending: false,
            })
        } else {
            None
        };
        // A stream of its own rather than the legacy default stream: events
        // alone order it with the halo, display and boundary streams, and
        // whatever comes from the host goes on it (exchange.rs: write_planes).
        let stream = ctx.new_stream().map_err(dev)?;
        let beside = match tuning.concurrent_boundary && link.is_none() {
            true => Some(launch::Beside::new(&ctx)?),
            false => None,
        };
        let (major, minor) = info.compute_capability;
        let build = KernelBuild {
            precision,
            capability: (major, minor),
            defines: tuning.kernel_defines.clone(),
            model: params.model().is_some(),
        };
        let kernels = build.load(&ctx)?;
        let n = grid.cells();
        let lattice = match precision {
            Precision::Fp32 => Lattice::Fp32(stream.alloc_zeros::<f32>(Q * n).map_err(dev)?),
            Precision::Fp16 => Lattice::Fp16(stream.alloc_zeros::<u16>(Q * n).map_err(dev)?),
        };
        let near: Vec<u32> = (0..n)
            .filter(|&c| cell_flags[c] & flags::NEAR != 0)
            .map(|c| c as u32)
            .collect();
        let light = light_cells(
            tuning.light_cells,
            lattice_bytes(precision, n as u64),
            info.l2_bytes,
        );
        let face_sector = face_sector(tuning.face_sectors, precision);
        let (lists, bits) =
            BoundaryLists::new(&stream, &grid, &cell_flags, &near, None, light, face_sector)?;
        let flags_dev = stream.clone_htod(&bits).map_err(dev)?;
        let odd_quads = prefers_odd_quads(
            kernels.odd4.is_some(),
            grid.size[0],
            flags::mixed_quad_share(&cell_flags, grid.size[0]),
        );
        let near_dev = upload_list(&stream, &near)?;
        let stats_dev = stream
            .alloc_zeros::<u8>(REDUCTION_BLOCKS as usize * std::mem::size_of::<StatsPartial>())
            .map_err(dev)?;
        let forces_dev = stream
            .alloc_zeros::<f64>(REDUCTION_BLOCKS as usize * 48)
            .map_err(dev)?;
        let kparams = CudaParams::new(&grid, &params);
        let mut solver = CudaSolver {
            ctx,
            stream,
            kernels,
            lattice,
            flags_dev,
            near_dev,
            near,
            links_dev: None,
            lists,
            owned: owned.unwrap_or(0..grid.size[2]),
            link,
            fields_dev: None,
            display: None,
            step_frames: tuning.step_frames,
            frame_planes: None,
            planes_left: None,
            frames_from_planes: 0,
            share: None,
            snapshot_dev: None,
            averages: None,
            stats_dev,
            forces_dev,
            grid,
            inlets: cell_flags
                .iter()
                .any(|&f| flags::CellType::of(f & flags::TYPE_MASK) == flags::CellType::Inlet),
            flags: cell_flags,
            params,
            kparams,
            initial,
            precision,
            t: 0,
            block: DEFAULT_BLOCK,
            overlap_steps: major >= 9 && tuning.overlap_steps,
            exchange: tuning.exchange.clone(),
            device_name: info.name,
            poison: false,
            odd_quads,
            odd_rows: tuning.odd_rows,
            even_quads: None,
            fuse_near: tuning.fuse_near,
            light_cells: light,
            face_sector,
            near_schedules: Vec::new(),
            build,
            velocity_kernels: None,
            beside,
            host_planes: Vec::new(),
            merged_planes: Vec::new(),
        };
        solver.initialise()?;
        Ok(solver)
    }

    /// Makes the links of `links` interpolated walls (before the first step).
    pub fn set_links(&mut self, links: WallLinks) -> Result<(), SolverError> {
        check_links(&links, &self.flags, self.t)?;
        let aligned = (!links.is_empty()).then(|| links.aligned(&self.near));
        if let Some(aligned) = &aligned {
            let q = self.stream.clone_htod(aligned).map_err(dev)?;
            self.kparams.near_count = self.near.len() as u32;
            self.kparams.near = launch::address_halves(self.near_dev.device_ptr(&self.stream).0);
            self.kparams.link_q = launch::address_halves(q.device_ptr(&self.stream).0);
            self.links_dev = Some(q);
        } else {
            self.links_dev = None;
            self.kparams = CudaParams::new(&self.grid, &self.params);
            self.planes_left = None;
        }
        // The cells with links now take the even step's boundary rules too.
        let (lists, bits) = BoundaryLists::new(
            &self.stream,
            &self.grid,
            &self.flags,
            &self.near,
            aligned.as_deref(),
            self.light_cells,
            self.face_sector,
        )?;
        self.stream
            .memcpy_htod(&bits, &mut self.flags_dev)
            .map_err(dev)?;
        self.lists = lists;
        self.near_schedules.clear();
        self.initialise()
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Threads per block along x for the lattice kernels.
    pub fn set_block(&mut self, block: u32) {
        // The lattice kernels are compiled with __launch_bounds__(128, 8).
        self.block = block.clamp(32, 128);
    }

    pub fn block(&self) -> u32 {
        self.block
    }

    pub(super) fn initialise(&mut self) -> Result<(), SolverError> {
        let uniform = match &self.initial {
            Initial::Uniform(u) => Some((*u, 0.0f32, 0u32, self.grid.size[2] as u32)),
            Initial::Perturbed {
                velocity,
                amplitude,
                z_offset,
                nz_global,
            } => Some((*velocity, *amplitude, *z_offset, *nz_global)),
            Initial::Fields(_) => None,
        };
        match uniform {
            Some((u, amp, zoff, nz_global)) => {
                let cfg = self.lattice_config();
                let (ux, uy, uz) = (u[0], u[1], u[2]);
                let mut b = self.stream.launch_builder(&self.kernels.init_uniform);
                self.lattice.arg_mut(&mut b);
                b.arg(&self.flags_dev)
                    .arg(&self.kparams)
                    .arg(&ux)
                    .arg(&uy)
                    .arg(&uz)
                    .arg(&amp)
                    .arg(&zoff)
                    .arg(&nz_global);
                // SAFETY: argument list matches `init_uniform`; the grid covers the lattice.
                unsafe { b.launch(cfg) }.map_err(dev)?;
                self.stream.synchronize().map_err(dev)?;
            }
            None => {
                let host = super::initial_populations(
                    &self.grid,
                    &self.flags,
                    &self.params,
                    &self.initial,
                );
                self.upload(&host)?;
            }
        }
        if self.links_dev.is_some() {
            let count = self.near.len() as u32;
            let cfg = LaunchConfig {
                grid_dim: (count.div_ceil(128), 1, 1),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = self.stream.launch_builder(&self.kernels.links_initial);
            self.lattice.arg_mut(&mut b);
            b.arg(&self.kparams);
            // SAFETY: links_initial(store_t*, Params): the links cover the boundary list.
            unsafe { b.launch(cfg) }.map_err(dev)?;
            self.stream.synchronize().map_err(dev)?;
        }
        self.t = 0;
        self.planes_left = None;
        Ok(())
    }

    pub(super) fn upload(&mut self, populations: &[f32]) -> Result<(), SolverError> {
        match &mut self.lattice {
            Lattice::Fp32(f) => self.stream.memcpy_htod(populations, f).map_err(dev)?,
            Lattice::Fp16(f) => {
                let half: Vec<u16> = populations.iter().map(|&v| fp16c_encode(v)).collect();
                self.stream.memcpy_htod(&half, f).map_err(dev)?
            }
        }
        self.stream.synchronize().map_err(dev)
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub(super) fn fields_buffer(&mut self) -> Result<(), SolverError> {
        if self.fields_dev.is_none() {
            let n = self.grid.cells();
            let buf = self.stream.alloc_zeros::<f32>(4 * n).map_err(|e| {
                SolverError::Device(format!(
                    "no GPU memory left for the field output ({} needed): {e}",
                    crate::system::human_bytes(16 * n as u64)
                ))
            })?;
            self.fields_dev = Some(buf);
        }
        if self.poison {
            let cfg = self.reduction_config();
            let buf = self.fields_dev.as_mut().expect("allocated above");
            fill_nan(&self.stream, &self.kernels.fill_f32, buf, cfg)?;
        }
        Ok(())
    }

    /// Queues the time averages' sample of the current step if one is due.
    fn sample_if_due(&mut self) -> Result<(), SolverError> {
        match &self.averages {
            Some(a) if a.schedule.due(self.t) => self.add_sample_now(),
            _ => Ok(()),
        }
    }

    /// Queues a sample of the current step into the time averages.
    pub(super) fn add_sample_now(&mut self) -> Result<(), SolverError> {
        let parity = self.parity();
        let cfg = self.lattice_config();
        let Some(a) = self.averages.as_mut() else {
            return Ok(());
        };
        a.samples += 1;
        let count = a.samples as f64;
        let mut b = self.stream.launch_builder(&self.kernels.average);
        self.lattice.arg(&mut b);
        b.arg(&self.flags_dev)
            .arg(&self.kparams)
            .arg(&parity)
            .arg(&mut a.acc)
            .arg(&count);
        // SAFETY: signature of `average_sample`; `acc` holds 8n doubles.
        unsafe { b.launch(cfg) }.map_err(dev)?;
        Ok(())
    }

    /// Computes ρ, ux, uy, uz into the device buffer (four planes of n floats).
    pub fn compute_fields(&mut self) -> Result<&CudaSlice<f32>, SolverError> {
        self.fields_buffer()?;
        let cfg = self.lattice_config();
        let parity = self.parity();
        let out = self.fields_dev.as_mut().expect("allocated");
        let mut b = self.stream.launch_builder(&self.kernels.fields);
        self.lattice.arg(&mut b);
        b.arg(&self.flags_dev)
            .arg(&self.kparams)
            .arg(&parity)
            .arg(out);
        // SAFETY: signature of `fields`; `out` holds 4n floats.
        unsafe { b.launch(cfg) }.map_err(dev)?;
        Ok(self.fields_dev.as_ref().expect("allocated"))
    }
}

impl Solver for CudaSolver {
    fn describe(&self) -> String {
        format!(
            "CUDA solver on {} ({} storage)",
            self.device_name,
            self.precision.name()
        )
    }

    fn grid(&self) -> &Grid {
        &self.grid
    }

    fn flags(&self) -> &[u8] {
        &self.flags
    }

    fn params(&self) -> &Params {
        &self.params
    }

    fn set_params(&mut self, params: Params) -> Result<(), SolverError> {
        check_params(&params)?;
        let model = params.model().is_some();
        if model != self.build.model {
            // Work queued on any stream (steps, display copies) uses the old
            // module: it finishes before the module goes.
            self.ctx.synchronize().map_err(dev)?;
            let build = KernelBuild {
                model,
                ..self.build.clone()
            };
            self.kernels = build.load(&self.ctx)?;
            self.velocity_kernels = None;
            self.odd_quads &= self.kernels.odd4.is_some();
            self.build = build;
        }
        self.kparams = CudaParams::new(&self.grid, &params).with_links_of(&self.kparams);
        self.planes_left = None;
        self.params = params;
        Ok(())
    }

    fn step(&mut self, n: u64) -> Result<(), SolverError> {
        self.enqueue(n)?;
        self.stream.synchronize().map_err(dev)
    }

    fn enqueue(&mut self, n: u64) -> Result<(), SolverError> {
        self.planes_left = None;
        let mut left = n;
        while left > 0 {
            let chunk = match &self.averages {
                Some(a) => a.schedule.steps_to_next(self.t).min(left),
                None => left,
            };
            self.enqueue_steps(chunk)?;
            left -= chunk;
            self.sample_if_due()?;
        }
        Ok(())
    }

    fn start_averages(&mut self, schedule: Schedule) -> Result<(), SolverError> {
        self.averages = None;
        let values = 2 * average::QUANTITIES * self.grid.cells();
        let acc = self.stream.alloc_zeros::<f64>(values).map_err(|e| {
            SolverError::Device(format!(
                "no GPU memory left for the time averages ({} needed): {e}; \
                 average a smaller grid, or use 16-bit storage to leave room",
                crate::system::human_bytes(8 * values as u64)
            ))
        })?;
        self.averages = Some(DeviceAverages {
            schedule: schedule.from_now(self.t),
            samples: 0,
            acc,
        });
        self.sample_if_due()
    }

    fn stop_averages(&mut self) {
        self.averages = None;
    }

    fn average_progress(&self) -> Option<(u64, u64)> {
        self.averages
            .as_ref()
            .map(|a| (a.schedule.from_step, a.samples))
    }

    fn averages(&mut self) -> Result<Option<Averages>, SolverError> {
        let Some(a) = &self.averages else {
            return Ok(None);
        };
        let n = self.grid.cells();
        let stream = &self.stream;
        let plane = |k: usize| stream.clone_dtoh(&a.acc.slice(k * n..(k + 1) * n));
        let mut failure = None;
        let out = Averages::from_sums(self.grid.size, a.schedule, a.samples, |q| {
            match (plane(q), plane(average::QUANTITIES + q)) {
                (Ok(mean), Ok(m2)) => (mean, m2),
                (Err(e), _) | (_, Err(e)) => {
                    failure.get_or_insert(e);
                    (vec![0.0; n], vec![0.0; n])
                }
            }
        });
        match failure {
            Some(e) => Err(dev(e)),
            None => Ok(Some(out)),
        }
    }

    fn finish(&mut self) -> Result<(), SolverError> {
        self.stream.synchronize().map_err(dev)
    }

    fn begin_display(&mut self, stride: usize, host: bool) -> Result<bool, SolverError> {
        self.begin_display_frame(stride, host)
    }

    fn enqueue_for_display(&mut self, n: u64) -> Result<(), SolverError> {
        self.enqueue_leaving_fields(n)
    }

    fn take_display(&mut self, out: &mut Fields) -> Result<Option<TakenFrame>, SolverError> {
        self.take_display_frame(out)
    }

    fn time_step(&self) -> u64 {
        self.t
    }

    fn share_display(&mut self, device: Option<[u8; 16]>) {
        self.set_shared_display(device)
    }

    fn reset(&mut self) -> Result<(), SolverError> {
        self.drop_display_frames()?;
        self.averages = None;
        self.initialise()
    }

    fn fields(&mut self) -> Result<Fields, SolverError> {
        let (n, size) = (self.grid.cells(), self.grid.size);
        let stream = self.stream.clone();
        let buf = self.compute_fields()?;
        // One copy per plane, straight into its own vector.
        let plane = |k: usize| {
            stream
                .clone_dtoh(&buf.slice(k * n..(k + 1) * n))
                .map_err(dev)
        };
        let mut out = Fields {
            size,
            rho: plane(0)?,
            ux: plane(1)?,
            uy: plane(2)?,
            uz: plane(3)?,
            concentration: Vec::new(),
        };
        if self.poison && out.rho.iter().any(|v| v.is_nan()) {
            // A running cell can legitimately be NaN after a blow-up, but a
            // non-running one never is: NaN there means a cell was not written.
            let unwritten = (0..n).find(|&c| !flags::runs(self.flags[c]) && out.rho[c].is_nan());
            if let Some(c) = unwritten {
                return Err(SolverError::Device(format!(
                    "the fields kernel did not write cell {:?}",
                    self.grid.coords(c)
                )));
            }
        }
        out.size = self.grid.size;
        Ok(out)
    }

    fn stats(&mut self) -> Result<Stats, SolverError> {
        let cfg = self.reduction_config();
        let parity = self.parity();
        let (c0, c1) = self.owned_cells();
        let mut b = self.stream.launch_builder(&self.kernels.stats);
        self.lattice.arg(&mut b);
        b.arg(&self.flags_dev)
            .arg(&self.kparams)
            .arg(&parity)
            .arg(&c0)
            .arg(&c1)
            .arg(&mut self.stats_dev);
        // SAFETY: signature of `stats`; one partial of 64 bytes per block.
        unsafe { b.launch(cfg) }.map_err(dev)?;
        let bytes = self.stream.clone_dtoh(&self.stats_dev).map_err(dev)?;
        let partials: &[StatsPartial] = bytemuck::cast_slice(&bytes);
        let (mut mass, mut mom, mut count) = (0.0f64, [0.0f64; 3], 0.0f64);
        let (mut best, mut best_cell, mut bad) = (0.0f32, 0u64, u64::MAX);
        for p in partials {
            mass += p.mass;
            for d in 0..3 {
                mom[d] += p.momentum[d];
            }
            count += p.count;
            if p.max_speed > best {
                best = p.max_speed;
                best_cell = p.max_cell;
            }
            bad = bad.min(p.bad_cell);
        }
        let cells = count as u64;
        let count = count.max(1.0);
        Ok(Stats {
            step: self.t,
            mass,
            cells,
            mean_velocity: mom.map(|m| m / count),
            max_speed: best,
            max_speed_cell: self.grid.coords(best_cell as usize),
            non_finite_cell: (bad != u64::MAX).then(|| self.grid.coords(bad as usize)),
        })
    }

    fn obstacle_forces(&mut self) -> Result<Vec<[f64; 3]>, SolverError> {
        let cfg = self.reduction_config();
        let parity = self.parity();
        let (c0, c1) = self.owned_cells();
        let mut b = self.stream.launch_builder(&self.kernels.forces);
        self.lattice.arg(&mut b);
        b.arg(&self.flags_dev)
            .arg(&self.kparams)
            .arg(&parity)
            .arg(&c0)
            .arg(&c1)
            .arg(&mut self.forces_dev);
        // SAFETY: signature of `forces`; 48 doubles per block.
        unsafe { b.launch(cfg) }.map_err(dev)?;
        let partials = self.stream.clone_dtoh(&self.forces_dev).map_err(dev)?;
        let mut total = vec![[0.0f64; 3]; flags::MAX_TAG as usize + 1];
        for block in partials.chunks_exact(48) {
            for tag in 0..16 {
                for d in 0..3 {
                    total[tag][d] += block[tag * 3 + d];
                }
            }
        }
        Ok(total)
    }

    fn populations(&mut self) -> Result<Vec<f32>, SolverError> {
        let out = match &self.lattice {
            Lattice::Fp32(f) => self.stream.clone_dtoh(f).map_err(dev)?,
            Lattice::Fp16(f) => self
                .stream
                .clone_dtoh(f)
                .map_err(dev)?
                .into_iter()
                .map(fp16c_decode)
                .collect(),
        };
        Ok(out)
    }

    fn visit_populations(&mut self, visit: &mut dyn FnMut(&[f32])) -> Result<(), SolverError> {
        // Pieces of 4 MiB: the host never holds the whole lattice (1.3 GB at
        // 256³ in FP32).
        const PIECE: usize = 1 << 20;
        let total = Q * self.grid.cells();
        let mut host = vec![0f32; PIECE.min(total)];
        for start in (0..total).step_by(PIECE) {
            let range = start..(start + PIECE).min(total);
            let out = &mut host[..range.len()];
            match &self.lattice {
                Lattice::Fp32(f) => self.stream.memcpy_dtoh(&f.slice(range), out).map_err(dev)?,
                Lattice::Fp16(f) => {
                    let half = self.stream.clone_dtoh(&f.slice(range)).map_err(dev)?;
                    for (o, h) in out.iter_mut().zip(half) {
                        *o = fp16c_decode(h);
                    }
                }
            }
            visit(out);
        }
        Ok(())
    }

    fn set_populations(&mut self, step: u64, populations: &[f32]) -> Result<(), SolverError> {
        if populations.len() != Q * self.grid.cells() {
            return Err(SolverError::StateMismatch(format!(
                "{} populations for a lattice of {}",
                populations.len(),
                Q * self.grid.cells()
            )));
        }
        self.drop_display_frames()?;
        self.upload(populations)?;
        self.t = step;
        self.planes_left = None;
        // Averages of another history do not continue on this one.
        self.averages = None;
        Ok(())
    }

    fn velocity_change(&mut self) -> Result<Option<f64>, SolverError> {
        Ok(self.change_sums()?.map(|c| c.ratio()))
    }

    fn device_stream(&self) -> Option<Arc<CudaStream>> {
        // A slab's velocity would be only its own layers'.
        self.link.is_none().then(|| self.stream.clone())
    }

    fn prepare_leaving_velocity(&mut self) -> Result<bool, SolverError> {
        if self.link.is_some() {
            return Ok(false);
        }
        self.velocity_kernels()?;
        Ok(true)
    }

    fn enqueue_leaving_velocity(
        &mut self,
        planes: &mut CudaSlice<f32>,
    ) -> Result<bool, SolverError> {
        if self.link.is_some() {
            return Ok(false);
        }
        self.planes_left = None;
        if planes.len() < 3 * self.grid.cells() {
            return Err(SolverError::Device(format!(
                "{} floats for the velocity of {} cells",
                planes.len(),
                self.grid.cells()
            )));
        }
        // The planes are used on this stream only (the context's event
        // tracking is off, so the guard records nothing).
        let stream = self.stream.clone();
        let (address, _guard) = planes.device_ptr_mut(&stream);
        self.launch_step_leaving_velocity(address)?;
        self.sample_if_due()?;
        Ok(true)
    }

    fn memory_bytes(&self) -> u64 {
        let n = self.grid.cells() as u64;
        let display = self
            .display
            .as_ref()
            .map_or(0, |d| 2 * 16 * d.size.iter().product::<usize>() as u64);
        let averages = self
            .averages
            .as_ref()
            .map_or(0, |_| 2 * average::QUANTITIES as u64 * 8 * n);
        lattice_bytes(self.precision, n)
            + self.fields_dev.as_ref().map_or(0, |_| 16 * n)
            + self.frame_planes.as_ref().map_or(0, |_| 16 * n)
            + display
            + averages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_even_steps_face_blocks_are_a_sector_of_fp32_cells_and_none_in_16_bit() {
        assert_eq!(face_sector(true, Precision::Fp32), 8);
        assert_eq!(face_sector(true, Precision::Fp16), 0);
        assert_eq!(face_sector(false, Precision::Fp32), 0);
    }

    #[test]
    fn light_cells_beside_x_walls_only_where_the_lattice_fits_in_l2() {
        let l2 = 50 << 20;
        let cavity = lattice_bytes(Precision::Fp32, 66 * 66 * 66);
        let cavity_256 = lattice_bytes(Precision::Fp16, 256 * 256 * 256);
        assert_eq!(light_cells(LightKnob::Auto, cavity, l2), LightCells::All);
        assert_eq!(
            light_cells(LightKnob::Auto, cavity_256, l2),
            LightCells::NotAlongX
        );
        assert_eq!(
            light_cells(LightKnob::NotAlongX, cavity, l2),
            LightCells::NotAlongX
        );
        assert_eq!(light_cells(LightKnob::All, cavity_256, l2), LightCells::All);
        assert_eq!(light_cells(LightKnob::Off, cavity, l2), LightCells::None);
    }
}
