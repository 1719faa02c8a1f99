//! The CUDA solver: `kernels/d3q19.cu` compiled at run time by NVRTC and launched
//! through cudarc (dynamic loading, so the program builds and runs its CPU path
//! on machines without CUDA).
//!
//! Same layout, streaming scheme, boundary rules and arithmetic order as the CPU
//! reference solver; the FP32 kernels are compiled without FMA contraction so
//! that their results agree with it bit for bit. Every CUDA call's error is checked, and
//! `step` synchronises and checks once per batch of launches.

use std::ffi::c_void;
use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    LaunchConfig, PinnedHostSlice, PushKernelArg,
};

use super::display::{SharedFrame, SharedLease};
use super::lattice::{self, Q};
use super::select::CudaUnavailable;
use super::slabs::{ChangeSums, Part, SlabLattice, Transfer};
use super::{
    check_params, flags, Fields, Grid, Initial, Params, Precision, Solver, SolverError, Stats,
    TakenFrame, VELOCITY_SLOTS,
};

/// The kernel source, embedded so the binary needs no files at run time.
pub const KERNEL_SOURCE: &str = include_str!("../../kernels/d3q19.cu");

/// Threads per block along x for the lattice kernels (tunable by `bench --block`).
pub const DEFAULT_BLOCK: u32 = 128;
/// Blocks of the grid-stride reduction kernels (`stats`, `forces`).
const REDUCTION_BLOCKS: u32 = 1024;
const REDUCTION_THREADS: u32 = 256;

/// Kernel parameters, by value. Keep in sync with `struct Params` in
/// kernels/d3q19.cu.
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
    pub velocities: [[f32; 3]; VELOCITY_SLOTS],
}
const _: () = assert!(std::mem::size_of::<CudaParams>() == 4 * 10 + 4 * 3 * VELOCITY_SLOTS);

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
            velocities: p.velocities,
        }
    }
}

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

/// NVRTC source for a storage precision: a define picks the storage type.
pub fn kernel_source(precision: Precision) -> String {
    let define = match precision {
        Precision::Fp32 => "",
        Precision::Fp16 => "#define STORAGE_FP16\n",
    };
    let tuning = std::env::var("FLOWSCOPE_KERNEL_DEFINES").unwrap_or_default();
    format!("{}{define}{KERNEL_SOURCE}", defines(&tuning))
}

/// `#define` lines for a developer's tuning string such as `ODD_PAIR_BLOCKS=3`
/// (the environment variable `FLOWSCOPE_KERNEL_DEFINES`, for benchmarks of
/// kernel variants without a rebuild).
fn defines(tuning: &str) -> String {
    tuning
        .split_whitespace()
        .map(|d| match d.split_once('=') {
            Some((name, value)) => format!("#define {name} {value}\n"),
            None => format!("#define {d}\n"),
        })
        .collect()
}

/// NVRTC options for a device of compute capability `major.minor`. FP32: no
/// FMA contraction, since the CPU reference rounds every product and the two
/// agree bit for bit. 16-bit storage rounds far more than FMA changes, and its
/// kernels are bound by instruction issue: contraction is allowed there.
pub fn compile_options(major: i32, minor: i32, precision: Precision) -> Vec<String> {
    vec![
        format!("--gpu-architecture=compute_{major}{minor}"),
        match precision {
            Precision::Fp32 => "--fmad=false".into(),
            Precision::Fp16 => "--fmad=true".into(),
        },
        "--std=c++17".into(),
        "-default-device".into(),
    ]
}

/// Compiles the kernels for one storage precision with NVRTC (needs only the
/// NVRTC library, no GPU).
pub fn compile(precision: Precision, major: i32, minor: i32) -> Result<cudarc::nvrtc::Ptx, String> {
    // SAFETY: only tries to open the shared library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(availability(true, false, Ok(1)).unwrap_err().0);
    }
    let options = cudarc::nvrtc::CompileOptions {
        options: compile_options(major, minor, precision),
        ..Default::default()
    };
    let source = kernel_source(precision);
    match std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(source, options)) {
        Ok(Ok(ptx)) => Ok(ptx),
        Ok(Err(cudarc::nvrtc::CompileError::CompileError { log, .. })) => Err(format!(
            "NVRTC could not compile kernels/d3q19.cu ({}):\n{}",
            precision.name(),
            log.to_string_lossy()
        )),
        Ok(Err(other)) => Err(format!("NVRTC failed: {other:?}")),
        Err(_) => Err(
            "NVRTC failed (a symbol is missing from libnvrtc.so: is it older than CUDA 12?)".into(),
        ),
    }
}

/// What `probe` found.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub free_bytes: u64,
    pub total_bytes: u64,
    pub multiprocessors: i32,
}

/// Why no CUDA device can be used, from what was found (testable without a GPU).
pub fn availability(
    driver_found: bool,
    nvrtc_found: bool,
    devices: Result<i32, String>,
) -> Result<(), CudaUnavailable> {
    if !driver_found {
        return Err(CudaUnavailable(
            "no NVIDIA driver found (libcuda.so is not on the library path); install the NVIDIA driver to use the GPU".into(),
        ));
    }
    if !nvrtc_found {
        return Err(CudaUnavailable(
            "the NVRTC run-time compiler (libnvrtc.so) was not found; install the CUDA toolkit's NVRTC library (e.g. cuda-nvrtc) and add it to LD_LIBRARY_PATH".into(),
        ));
    }
    match devices {
        Err(e) => Err(CudaUnavailable(format!(
            "the NVIDIA driver could not be initialised ({e})"
        ))),
        Ok(0) => Err(CudaUnavailable(
            "the NVIDIA driver reports no CUDA device".into(),
        )),
        Ok(_) => Ok(()),
    }
}

/// Runs a cudarc call that may panic (missing symbols in the dynamically loaded
/// library) and turns the panic into an error.
fn guarded<T>(
    what: &str,
    f: impl FnOnce() -> Result<T, cudarc::driver::DriverError>,
) -> Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown failure".into());
            Err(format!("{what}: {msg}"))
        }
    }
}

/// Looks for a usable CUDA device 0 and describes it.
pub fn probe() -> Result<DeviceInfo, CudaUnavailable> {
    probe_device(0)
}

/// Number of CUDA devices, after the same checks as [`probe`].
pub fn device_count() -> Result<usize, CudaUnavailable> {
    probe()?;
    guarded("cuDeviceGetCount", CudaContext::device_count)
        .map(|n| n as usize)
        .map_err(CudaUnavailable)
}

/// Looks for a usable CUDA device `ordinal` and describes it.
pub fn probe_device(ordinal: usize) -> Result<DeviceInfo, CudaUnavailable> {
    // SAFETY: these only try to open the shared libraries.
    let driver = unsafe { cudarc::driver::sys::is_culib_present() };
    let nvrtc = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    let count = if driver {
        guarded("cuInit", CudaContext::device_count)
    } else {
        Ok(0)
    };
    availability(driver, nvrtc, count)?;
    let info = guarded(&format!("device {ordinal}"), || {
        let ctx = CudaContext::new(ordinal)?;
        let (free, total) = ctx.mem_get_info()?;
        Ok(DeviceInfo {
            name: ctx.name()?,
            compute_capability: ctx.compute_capability()?,
            free_bytes: free as u64,
            total_bytes: total as u64,
            multiprocessors: ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        })
    })
    .map_err(CudaUnavailable)?;
    Ok(info)
}

/// Device memory kept free beside the lattice: the CUDA context, reduction
/// buffers and the two display frames of a window at the default limit
/// (2 × 16 bytes × 256³ = 512 MiB).
const RESERVE: u64 = 768 * 1024 * 1024;

/// The side of the largest cube of cells whose lattice fits in `free` bytes.
pub fn largest_cube(precision: Precision, free: u64) -> u64 {
    ((free.saturating_sub(RESERVE) as f64 / device_bytes_per_cell(precision)).cbrt()).floor() as u64
}

/// Device bytes per cell: populations, the flag and the bulk bit.
fn device_bytes_per_cell(precision: Precision) -> f64 {
    precision.bytes_per_cell() as f64 + 0.125
}

/// Device bytes of the lattice, flags and bulk bits of `cells` cells.
fn lattice_bytes(precision: Precision, cells: u64) -> u64 {
    cells * precision.bytes_per_cell() as u64 + 4 + cells.div_ceil(32) * 4
}

/// Refuses a grid that would not fit in `free` bytes of device memory, naming the
/// largest cube that would.
pub fn check_fits(size: [usize; 3], precision: Precision, free: u64) -> Result<(), SolverError> {
    let cells = size.iter().map(|&n| n as u64).product::<u64>();
    let per_cell = device_bytes_per_cell(precision);
    let usable = free.saturating_sub(RESERVE);
    let needed = lattice_bytes(precision, cells);
    if needed <= usable {
        return Ok(());
    }
    let side = largest_cube(precision, free);
    Err(SolverError::Device(format!(
        "the grid {}x{}x{} needs {} of GPU memory in {} storage ({per_cell} bytes per cell), but {} are free; \
         the largest cube that fits is {side}³ ({:.0} million cells); use a smaller grid, --precision fp16, or the CPU solver",
        size[0],
        size[1],
        size[2],
        crate::scenario::human_bytes(needed),
        precision.name(),
        crate::scenario::human_bytes(free),
        usable as f64 / per_cell / 1e6
    )))
}

enum Lattice {
    Fp32(CudaSlice<f32>),
    Fp16(CudaSlice<u16>),
}

impl Lattice {
    /// Pushes the population array as a kernel argument the kernel reads.
    fn arg<'a>(&'a self, b: &mut cudarc::driver::LaunchArgs<'a>) {
        match self {
            Lattice::Fp32(f) => b.arg(f),
            Lattice::Fp16(f) => b.arg(f),
        };
    }

    /// Pushes the population array as a kernel argument the kernel writes.
    fn arg_mut<'a>(&'a mut self, b: &mut cudarc::driver::LaunchArgs<'a>) {
        match self {
            Lattice::Fp32(f) => b.arg(f),
            Lattice::Fp16(f) => b.arg(f),
        };
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

/// Largest share of `aa_odd4` warps with partly bulk quads
/// (`flags::mixed_quad_share`) for which it is chosen over `aa_odd2`.
const MIXED_QUAD_LIMIT: f64 = 0.1;

/// Threads per block of `aa_even2` and `aa_odd2` (their `__launch_bounds__`).
const PAIR_BLOCK: u32 = 128;

/// Most threads per block of `aa_odd4` (its `__launch_bounds__`).
const QUAD_BLOCK: u32 = 256;

struct Kernels {
    even: CudaFunction,
    /// Two cells per thread with accesses twice as wide, where the grid allows.
    even2: CudaFunction,
    odd2: CudaFunction,
    /// Four cells per thread (FP32 only).
    odd4: Option<CudaFunction>,
    odd: CudaFunction,
    boundary: CudaFunction,
    fields: CudaFunction,
    display: CudaFunction,
    stats: CudaFunction,
    forces: CudaFunction,
    init_uniform: CudaFunction,
    fill_f32: CudaFunction,
    velocity_change: CudaFunction,
    unpack: CudaFunction,
}

/// A slab's side of the halo exchange (see [`super::slabs`]): its own stream,
/// so that the exchange overlaps the update of the slab's interior.
struct SlabLink {
    comm: Arc<CudaStream>,
    /// The layers next to the halos are updated (recorded on the solver's stream).
    edges_done: CudaEvent,
    /// This slab's incoming transfers are done (recorded on `comm`).
    comm_done: CudaEvent,
    /// The solver's stream must wait for `comm_done` before it touches the edges.
    pending: bool,
}

/// Display frames under way (see [`Solver::begin_display`]): averaged on the
/// solver's stream into a device slot, then copied on `copy` into pinned host
/// memory while the solver steps on. Three slots, so that frames can start
/// while earlier ones are still copying (a copy to the host of a 256³ frame
/// takes longer than a chunk of steps on the H100); the newest finished one
/// wins.
struct Display {
    copy: Arc<CudaStream>,
    stride: usize,
    size: [usize; 3],
    slots: [DisplaySlot; 3],
    next: usize,
}

struct DisplaySlot {
    device: CudaSlice<f32>,
    /// The texels of the frame for the graphics device, when it shares them.
    shared: Option<Exported>,
    /// Held from the write of `shared` until the frame is taken or dropped.
    lease: Option<SharedLease>,
    /// Set by the kernel where the frame is unstable, and its host copy.
    unstable: CudaSlice<u32>,
    unstable_host: PinnedHostSlice<u32>,
    /// Whether the frame in this slot is copied into `host`.
    host_copy: bool,
    /// Cached (not write-combined) pinned memory: the host reads it.
    host: PinnedHostSlice<f32>,
    computed: CudaEvent,
    copied: CudaEvent,
    /// The step of the frame in this slot, until it is taken or dropped.
    step: Option<u64>,
}

impl DisplaySlot {
    fn new(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        len: usize,
    ) -> Result<Self, SolverError> {
        let short = |what: &str, e: cudarc::driver::DriverError| {
            SolverError::Device(format!(
                "no {what} memory left for a display frame ({}): {e}; lower the display limit",
                crate::scenario::human_bytes(4 * len as u64)
            ))
        };
        Ok(DisplaySlot {
            device: stream
                .alloc_zeros::<f32>(len)
                .map_err(|e| short("GPU", e))?,
            // SAFETY: written by the copy before it is read (`step` is set then).
            host: unsafe { ctx.alloc_pinned_with_flags::<f32>(len, 0) }
                .map_err(|e| short("pinned host", e))?,
            computed: ctx.new_event(None).map_err(dev)?,
            copied: ctx.new_event(None).map_err(dev)?,
            step: None,
            shared: None,
            lease: None,
            unstable: stream.alloc_zeros::<u32>(1).map_err(|e| short("GPU", e))?,
            // SAFETY: written by the copy before it is read, as `host`.
            unstable_host: unsafe { ctx.alloc_pinned_with_flags::<u32>(1, 0) }
                .map_err(|e| short("pinned host", e))?,
            host_copy: true,
        })
    }
}

/// GPU memory exported as a POSIX file descriptor (CUDA's virtual memory
/// management API) and mapped here: a display frame's texels that Vulkan
/// imports ([`SharedFrame`]).
struct Exported {
    ctx: Arc<CudaContext>,
    handle: sys::CUmemGenericAllocationHandle,
    /// Reserved address range (0: none yet) and whether it is mapped.
    ptr: sys::CUdeviceptr,
    mapped: bool,
    frame: Arc<SharedFrame>,
    bytes: usize,
}

impl Exported {
    fn new(ctx: &Arc<CudaContext>, size: [usize; 3], device: [u8; 16]) -> Result<Exported, String> {
        use std::os::fd::FromRawFd;
        let fail = |what: &str, e: cudarc::driver::DriverError| format!("{what}: {e}");
        ctx.bind_to_thread()
            .map_err(|e| fail("binding the context", e))?;
        // SAFETY: a plain C struct; zero is "unset" for every field not set here.
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes =
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = ctx.ordinal() as i32;
        let mut granularity = 0usize;
        // SAFETY: valid pointers to a local and to the property struct.
        unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut granularity,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        }
        .result()
        .map_err(|e| fail("allocation granularity", e))?;
        let data = super::display::texel_row_bytes(size[0]) * (size[1] * size[2]) as u64;
        let bytes = (data as usize).next_multiple_of(granularity.max(1));
        let mut handle = 0;
        // SAFETY: as above; the handle is released in Drop.
        unsafe { sys::cuMemCreate(&mut handle, bytes, &prop, 0) }
            .result()
            .map_err(|e| fail("exportable allocation", e))?;
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: a POSIX handle is an int written through the pointer.
        let exported = unsafe {
            sys::cuMemExportToShareableHandle(
                (&mut fd as *mut std::ffi::c_int).cast(),
                handle,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        }
        .result();
        if let Err(e) = exported {
            // SAFETY: the handle made above, used by nothing else.
            let _ = unsafe { sys::cuMemRelease(handle) };
            return Err(fail("exporting the allocation", e));
        }
        let mut out = Exported {
            ctx: ctx.clone(),
            handle,
            ptr: 0,
            mapped: false,
            frame: Arc::new(SharedFrame::new(
                // SAFETY: the descriptor the export just made, owned by nobody else.
                unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) },
                bytes as u64,
                size,
                device,
            )),
            bytes,
        };
        // SAFETY: reserve and map the whole allocation, then allow access
        // from this device; each step is undone in Drop.
        unsafe {
            sys::cuMemAddressReserve(&mut out.ptr, bytes, granularity, 0, 0)
                .result()
                .map_err(|e| fail("reserving addresses", e))?;
            sys::cuMemMap(out.ptr, bytes, 0, handle, 0)
                .result()
                .map_err(|e| fail("mapping", e))?;
            out.mapped = true;
            let access = sys::CUmemAccessDesc {
                location: prop.location,
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            sys::cuMemSetAccess(out.ptr, bytes, &access, 1)
                .result()
                .map_err(|e| fail("setting access", e))?;
        }
        Ok(out)
    }
}

impl Drop for Exported {
    fn drop(&mut self) {
        // Errors here leave the memory to the context's teardown.
        let _ = self.ctx.bind_to_thread();
        // SAFETY: undoes exactly what `new` did; the frame's importers hold
        // their own references to the memory.
        unsafe {
            if self.mapped {
                let _ = sys::cuMemUnmap(self.ptr, self.bytes);
            }
            if self.ptr != 0 {
                let _ = sys::cuMemAddressFree(self.ptr, self.bytes);
            }
            let _ = sys::cuMemRelease(self.handle);
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
    /// Layers (z) this solver updates; the others are halos of a slab.
    owned: Range<usize>,
    link: Option<SlabLink>,
    fields_dev: Option<CudaSlice<f32>>,
    display: Option<Display>,
    /// This GPU's UUID once a graphics device on it asked for shared display
    /// frames ([`Solver::share_display`]).
    share: Option<[u8; 16]>,
    /// Velocity snapshot of `velocity_change` (3n floats) and its step.
    snapshot_dev: Option<(u64, CudaSlice<f32>)>,
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
    /// capability 9.0 and newer, unless `FLOWSCOPE_OVERLAP_STEPS=0`).
    overlap_steps: bool,
    device_name: String,
    /// Fill output buffers with NaN before each use (checks).
    pub poison: bool,
    /// The odd step's bulk kernel is `aa_odd4` (see `set_odd_quads`).
    odd_quads: bool,
}

/// A CUDA device UUID as the 16 bytes Vulkan reports too.
fn uuid_bytes(u: &sys::CUuuid) -> [u8; 16] {
    u.bytes.map(|b| b as u8)
}

fn dev(e: impl std::fmt::Display) -> SolverError {
    SolverError::Device(e.to_string())
}

/// Poisons a buffer with NaN (checks), with the `fill_f32` kernel.
fn fill_nan(
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
    /// Compiles the kernels, checks memory, uploads flags and the initial state.
    pub fn new(
        grid: Grid,
        cell_flags: Vec<u8>,
        params: Params,
        initial: Initial,
        precision: Precision,
    ) -> Result<CudaSolver, SolverError> {
        Self::on_device(0, grid, cell_flags, params, initial, precision, None)
    }

    /// As [`CudaSolver::new`] on device `ordinal`, updating only the layers
    /// `owned` (all when `None`): one slab of a [`super::slabs::SlabSolver`].
    pub fn on_device(
        ordinal: usize,
        grid: Grid,
        mut cell_flags: Vec<u8>,
        params: Params,
        initial: Initial,
        precision: Precision,
        owned: Option<Range<usize>>,
    ) -> Result<CudaSolver, SolverError> {
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
        let stream = ctx.default_stream();
        let (major, minor) = info.compute_capability;
        let ptx = compile(precision, major, minor).map_err(SolverError::Device)?;
        let module = ctx.load_module(ptx).map_err(dev)?;
        let load = |name: &str| module.load_function(name).map_err(dev);
        let kernels = Kernels {
            even: load("aa_even")?,
            even2: load("aa_even2")?,
            odd2: load("aa_odd2")?,
            odd4: match precision {
                // Absent when compiled with NO_ODD_QUAD (FLOWSCOPE_KERNEL_DEFINES,
                // for benchmarks against aa_odd2).
                Precision::Fp32 => module.load_function("aa_odd4").ok(),
                Precision::Fp16 => None,
            },
            odd: load("aa_odd")?,
            boundary: load("aa_boundary")?,
            fields: load("fields")?,
            display: load("display_fields")?,
            stats: load("stats")?,
            forces: load("forces")?,
            init_uniform: load("init_uniform")?,
            fill_f32: load("fill_f32")?,
            velocity_change: load("velocity_change")?,
            unpack: load("unpack_planes")?,
        };
        let n = grid.cells();
        let lattice = match precision {
            Precision::Fp32 => Lattice::Fp32(stream.alloc_zeros::<f32>(Q * n).map_err(dev)?),
            Precision::Fp16 => Lattice::Fp16(stream.alloc_zeros::<u16>(Q * n).map_err(dev)?),
        };
        let flags_dev = stream
            .clone_htod(&flags::with_bulk_bits(&cell_flags))
            .map_err(dev)?;
        let odd_quads = kernels.odd4.is_some()
            && grid.size[0].is_multiple_of(4)
            && flags::mixed_quad_share(&cell_flags, grid.size[0]) <= MIXED_QUAD_LIMIT;
        let near: Vec<u32> = (0..n)
            .filter(|&c| cell_flags[c] & flags::NEAR != 0)
            .map(|c| c as u32)
            .collect();
        // cudarc cannot allocate zero elements; an empty list keeps one dummy entry.
        let near_dev = stream
            .clone_htod(if near.is_empty() {
                &[0u32][..]
            } else {
                &near[..]
            })
            .map_err(dev)?;
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
            owned: owned.unwrap_or(0..grid.size[2]),
            link,
            fields_dev: None,
            display: None,
            share: None,
            snapshot_dev: None,
            stats_dev,
            forces_dev,
            grid,
            flags: cell_flags,
            params,
            kparams,
            initial,
            precision,
            t: 0,
            block: DEFAULT_BLOCK,
            overlap_steps: major >= 9
                && std::env::var("FLOWSCOPE_OVERLAP_STEPS").map_or(true, |v| v != "0"),
            device_name: info.name,
            poison: false,
            odd_quads,
        };
        solver.initialise()?;
        Ok(solver)
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

    fn lattice_config(&self) -> LaunchConfig {
        let [nx, ny, nz] = self.grid.size;
        let bx = self.block.min((nx as u32).div_ceil(32) * 32);
        LaunchConfig {
            grid_dim: ((nx as u32).div_ceil(bx), ny as u32, nz as u32),
            block_dim: (bx, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    fn reduction_config(&self) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (REDUCTION_BLOCKS, 1, 1),
            block_dim: (REDUCTION_THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    fn initialise(&mut self) -> Result<(), SolverError> {
        match &self.initial {
            Initial::Uniform(u) => {
                let cfg = self.lattice_config();
                let (ux, uy, uz) = (u[0], u[1], u[2]);
                let mut b = self.stream.launch_builder(&self.kernels.init_uniform);
                self.lattice.arg_mut(&mut b);
                b.arg(&self.flags_dev)
                    .arg(&self.kparams)
                    .arg(&ux)
                    .arg(&uy)
                    .arg(&uz);
                // SAFETY: argument list matches `init_uniform`; the grid covers the lattice.
                unsafe { b.launch(cfg) }.map_err(dev)?;
                self.stream.synchronize().map_err(dev)?;
            }
            Initial::Fields(_) => {
                let host = super::initial_populations(
                    &self.grid,
                    &self.flags,
                    &self.params,
                    &self.initial,
                );
                self.upload(&host)?;
            }
        }
        self.t = 0;
        Ok(())
    }

    fn upload(&mut self, populations: &[f32]) -> Result<(), SolverError> {
        match &mut self.lattice {
            Lattice::Fp32(f) => self.stream.memcpy_htod(populations, f).map_err(dev)?,
            Lattice::Fp16(f) => {
                let half: Vec<u16> = populations.iter().map(|&v| fp16c_encode(v)).collect();
                self.stream.memcpy_htod(&half, f).map_err(dev)?
            }
        }
        self.stream.synchronize().map_err(dev)
    }

    /// Runs the current step on layers `layers` (time does not advance).
    fn launch_layers(&mut self, layers: Range<usize>) -> Result<(), SolverError> {
        if layers.is_empty() {
            return Ok(());
        }
        let nxy = self.grid.size[0] * self.grid.size[1];
        let n = self.grid.cells() as u64;
        let parity = self.parity();
        let (c0, c1) = ((layers.start * nxy) as u64, (layers.end * nxy) as u64);
        let mut f = self.lattice_ptr();
        let mut flags = self.flags_dev.device_ptr(&self.stream).0;
        let mut params = self.kparams;
        let (function, cfg) = if parity == 0 {
            // The paired kernel needs aligned pairs in every slot; with an
            // even layer every layer range pairs the same cells (slabs must match
            // one GPU bit for bit).
            let [nx, ny, _] = self.grid.size;
            let paired = (nx * ny).is_multiple_of(2).then_some(&self.kernels.even2);
            // The paired kernels are compiled for blocks of PAIR_BLOCK threads.
            let (threads, block) = match paired {
                Some(_) => ((c1 - c0) / 2, PAIR_BLOCK),
                None => (c1 - c0, self.block),
            };
            let cfg = LaunchConfig {
                grid_dim: (threads.div_ceil(block as u64) as u32, 1, 1),
                block_dim: (block, 1, 1),
                shared_mem_bytes: 0,
            };
            (paired.unwrap_or(&self.kernels.even), cfg)
        } else {
            let [nx, ny, _] = self.grid.size;
            let quad = self.kernels.odd4.as_ref().filter(|_| self.odd_quads);
            let paired = quad.or(nx.is_multiple_of(2).then_some(&self.kernels.odd2));
            let mut cfg = self.lattice_config();
            if quad.is_some() {
                // A row in one block up to QUAD_BLOCK threads (rows split into
                // blocks of 128 left warps idle: 640³ at 93.9% of the copy
                // bandwidth, 95.2% so); short rows several to a block.
                let threads = nx as u32 / 4;
                cfg.block_dim.0 = QUAD_BLOCK.min(threads.div_ceil(32) * 32);
                cfg.grid_dim.0 = threads.div_ceil(cfg.block_dim.0);
                if PAIR_BLOCK.is_multiple_of(cfg.block_dim.0) {
                    cfg.block_dim.1 = PAIR_BLOCK / cfg.block_dim.0;
                    cfg.grid_dim.1 = (ny as u32).div_ceil(cfg.block_dim.1);
                }
            } else if paired.is_some() {
                let threads = nx as u32 / 2;
                cfg.block_dim.0 = PAIR_BLOCK.min(threads.div_ceil(32) * 32);
                cfg.grid_dim.0 = threads.div_ceil(cfg.block_dim.0);
            }
            cfg.grid_dim.2 = layers.len() as u32;
            (paired.unwrap_or(&self.kernels.odd), cfg)
        };
        let (mut n, mut c0, mut c1, mut z0) = (n, c0, c1, layers.start as u32);
        let mut args = [
            (&raw mut f).cast::<c_void>(),
            (&raw mut flags).cast(),
            (&raw mut params).cast(),
            (&raw mut n).cast(),
            (&raw mut c0).cast(),
            (&raw mut c1).cast(),
        ];
        if parity == 1 {
            args[3] = (&raw mut z0).cast();
        }
        let args = if parity == 0 {
            &mut args[..]
        } else {
            &mut args[..4]
        };
        // SAFETY: (f, flags, params, n, c_begin, c_end) is the even kernels'
        // signature, (f, flags, params, z0) the odd ones'; the even kernels
        // bound-check against c_end <= n, the odd grid covers layers z0 .. z0 +
        // len within the lattice. The argument values outlive the call, which
        // copies them.
        unsafe { launch_step_kernel(&self.stream, function, cfg, self.overlap_steps, args) }?;
        let a = self.near.partition_point(|&c| (c as u64) < c0);
        let z = self.near.partition_point(|&c| (c as u64) < c1);
        if z > a {
            let count = (z - a) as u32;
            let cfg = LaunchConfig {
                grid_dim: (count.div_ceil(128), 1, 1),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            };
            let cells = self.near_dev.slice(a..z);
            let mut b = self.stream.launch_builder(&self.kernels.boundary);
            self.lattice.arg_mut(&mut b);
            b.arg(&self.flags_dev)
                .arg(&self.kparams)
                .arg(&parity)
                .arg(&cells)
                .arg(&count);
            // SAFETY: signature of aa_boundary; `cells` holds `count` cells.
            unsafe { b.launch(cfg) }.map_err(dev)?;
        }
        Ok(())
    }

    fn launch_step(&mut self) -> Result<(), SolverError> {
        self.launch_layers(self.owned.clone())?;
        self.t += 1;
        Ok(())
    }

    /// Cells of the owned layers, as a range of cell indices.
    fn owned_cells(&self) -> (u64, u64) {
        let nxy = (self.grid.size[0] * self.grid.size[1]) as u64;
        (self.owned.start as u64 * nxy, self.owned.end as u64 * nxy)
    }

    /// Launches `n` steps without waiting (benchmarks time them with events).
    pub fn enqueue_steps(&mut self, n: u64) -> Result<(), SolverError> {
        for _ in 0..n {
            self.launch_step()?;
        }
        Ok(())
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    fn parity(&self) -> u32 {
        (self.t % 2) as u32
    }

    fn fields_buffer(&mut self) -> Result<(), SolverError> {
        if self.fields_dev.is_none() {
            let n = self.grid.cells();
            let buf = self.stream.alloc_zeros::<f32>(4 * n).map_err(|e| {
                SolverError::Device(format!(
                    "no GPU memory left for the field output ({} needed): {e}",
                    crate::scenario::human_bytes(16 * n as u64)
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

    /// Forgets display frames under way (the state they show is gone).
    fn drop_display_frames(&mut self) -> Result<(), SolverError> {
        if let Some(d) = &mut self.display {
            d.copy.synchronize().map_err(dev)?;
            for s in &mut d.slots {
                s.step = None;
                s.lease = None;
            }
        }
        Ok(())
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
        self.kparams = CudaParams::new(&self.grid, &params);
        self.params = params;
        Ok(())
    }

    fn step(&mut self, n: u64) -> Result<(), SolverError> {
        self.enqueue_steps(n)?;
        self.stream.synchronize().map_err(dev)
    }

    fn enqueue(&mut self, n: u64) -> Result<(), SolverError> {
        self.enqueue_steps(n)
    }

    fn finish(&mut self) -> Result<(), SolverError> {
        self.stream.synchronize().map_err(dev)
    }

    fn begin_display(&mut self, stride: usize, host: bool) -> Result<bool, SolverError> {
        if self.link.is_some() {
            // A slab: the slab solver gathers the whole domain.
            return Ok(false);
        }
        let stride = stride.max(1);
        if self.display.as_ref().map(|d| d.stride) != Some(stride) {
            self.drop_display_frames()?;
            self.display = None;
            let size = super::display::coarse_size(self.grid.size, stride);
            let len = 4 * size.iter().product::<usize>();
            let copy = self.ctx.new_stream().map_err(dev)?;
            let mut slots = [
                DisplaySlot::new(&self.ctx, &self.stream, len)?,
                DisplaySlot::new(&self.ctx, &self.stream, len)?,
                DisplaySlot::new(&self.ctx, &self.stream, len)?,
            ];
            if let Some(device) = self.share {
                for slot in &mut slots {
                    match Exported::new(&self.ctx, size, device) {
                        Ok(e) => slot.shared = Some(e),
                        Err(e) => {
                            // The host copy still shows every frame.
                            eprintln!("display frames go through host memory: {e}");
                            self.share = None;
                            break;
                        }
                    }
                }
                if self.share.is_none() {
                    slots.iter_mut().for_each(|s| s.shared = None);
                }
            }
            self.display = Some(Display {
                slots,
                copy,
                stride,
                size,
                next: 0,
            });
        }
        let parity = self.parity();
        let fill = self.reduction_config();
        let d = self.display.as_mut().expect("made above");
        let count = d.slots.len();
        let slot = &mut d.slots[d.next];
        if slot.step.is_some() && !slot.copied.try_is_complete().map_err(dev)? {
            // Still copying (a copy takes less than a chunk of steps, so this
            // is rare): this frame is skipped rather than waited for.
            return Ok(true);
        }
        d.next = (d.next + 1) % count;
        let m = d.size.iter().product::<usize>();
        if self.poison {
            fill_nan(&self.stream, &self.kernels.fill_f32, &mut slot.device, fill)?;
        }
        let (stride32, [mx, my, mz]) = (stride as u32, d.size.map(|v| v as u32));
        // The texels too, unless the graphics device still reads the last
        // frame of this slot (then this one shows through the host copy).
        slot.lease = None;
        slot.lease = slot.shared.as_ref().and_then(|e| e.frame.lease());
        let (texels, pitch) = match (&slot.lease, &slot.shared) {
            (Some(_), Some(e)) => (e.ptr, e.frame.row_bytes() / 16),
            _ => (0, 0),
        };
        slot.host_copy = host || texels == 0;
        self.stream.memset_zeros(&mut slot.unstable).map_err(dev)?;
        let max_speed2 = super::MAX_STABLE_SPEED * super::MAX_STABLE_SPEED;
        let mut b = self.stream.launch_builder(&self.kernels.display);
        self.lattice.arg(&mut b);
        b.arg(&self.flags_dev)
            .arg(&self.kparams)
            .arg(&parity)
            .arg(&stride32)
            .arg(&mx)
            .arg(&my)
            .arg(&mz)
            .arg(&mut slot.device)
            .arg(&texels)
            .arg(&pitch)
            .arg(&max_speed2)
            .arg(&mut slot.unstable);
        // SAFETY: signature of `display_fields`; `device` holds 4 m floats,
        // `texels` (unless null) my·mz rows of `pitch` float4s.
        let cfg = LaunchConfig {
            grid_dim: ((m as u32).div_ceil(256), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        unsafe { b.launch(cfg) }.map_err(dev)?;
        slot.computed.record(&self.stream).map_err(dev)?;
        d.copy.wait(&slot.computed).map_err(dev)?;
        if slot.host_copy {
            d.copy
                .memcpy_dtoh(&slot.device, &mut slot.host)
                .map_err(dev)?;
        }
        d.copy
            .memcpy_dtoh(&slot.unstable, &mut slot.unstable_host)
            .map_err(dev)?;
        slot.copied.record(&d.copy).map_err(dev)?;
        slot.step = Some(self.t);
        Ok(true)
    }

    fn take_display(&mut self, out: &mut Fields) -> Result<Option<TakenFrame>, SolverError> {
        let Some(d) = self.display.as_mut() else {
            return Ok(None);
        };
        let mut newest: Option<(usize, u64)> = None;
        for (k, s) in d.slots.iter().enumerate() {
            let Some(step) = s.step else { continue };
            // Blocks the host only: the solver's stream steps on meanwhile.
            s.copied.synchronize().map_err(dev)?;
            if newest.is_none_or(|(_, t)| t < step) {
                newest = Some((k, step));
            }
        }
        let Some((k, step)) = newest else {
            return Ok(None);
        };
        let shared = d.slots[k].lease.take();
        // Older frames are dropped with it.
        for s in &mut d.slots {
            if s.step.is_some_and(|t| t <= step) {
                s.step = None;
                s.lease = None;
            }
        }
        let slot = &d.slots[k];
        let stable = slot.unstable_host.as_slice().map_err(dev)?[0] == 0;
        if slot.host_copy {
            out.copy_from_planes(d.size, slot.host.as_slice().map_err(dev)?);
        } else {
            out.size = d.size;
            for v in [&mut out.rho, &mut out.ux, &mut out.uy, &mut out.uz] {
                v.clear();
            }
        }
        Ok(Some(TakenFrame {
            step,
            shared,
            host: slot.host_copy,
            stable,
        }))
    }

    fn time_step(&self) -> u64 {
        self.t
    }

    fn share_display(&mut self, device: Option<[u8; 16]>) {
        let ours = |d: &[u8; 16]| {
            self.link.is_none() && self.ctx.uuid().is_ok_and(|u| uuid_bytes(&u) == *d)
        };
        let share = device.filter(ours);
        if share != self.share {
            self.share = share;
            // New slots on the next frame, with or without shared texels.
            if self.drop_display_frames().is_ok() {
                self.display = None;
            }
        }
    }

    fn reset(&mut self) -> Result<(), SolverError> {
        self.drop_display_frames()?;
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
        Ok(())
    }

    fn velocity_change(&mut self) -> Result<Option<f64>, SolverError> {
        Ok(self.change_sums()?.map(|c| c.ratio()))
    }

    fn memory_bytes(&self) -> u64 {
        let n = self.grid.cells() as u64;
        let display = self
            .display
            .as_ref()
            .map_or(0, |d| 2 * 16 * d.size.iter().product::<usize>() as u64);
        lattice_bytes(self.precision, n) + self.fields_dev.as_ref().map_or(0, |_| 16 * n) + display
    }
}

/// How the slabs of a domain on several GPUs exchange their halos.
pub enum Transport {
    /// NCCL point-to-point sends and receives, grouped per exchange (one
    /// communicator per GPU, ranks in slab order).
    Nccl(Vec<NcclComm>),
    /// CUDA peer-to-peer copies (`cuMemcpyPeerAsync`), where NCCL is missing.
    Peer,
}

/// A masked write-back lands here first (on the receiving GPU), then
/// `unpack_planes` scatters the listed entries.
struct Staging {
    planes: CudaSlice<u8>,
    positions: CudaSlice<u32>,
    count: u32,
}

/// The exchange state of a [`super::slabs::SlabSolver`] on CUDA GPUs.
pub struct CudaLink {
    pub transport: Transport,
    /// One per write-back transfer, in order (None: unmasked).
    staging: Vec<Option<Staging>>,
}

impl CudaLink {
    pub fn name(&self) -> &'static str {
        match self.transport {
            Transport::Nccl(_) => "NCCL",
            Transport::Peer => "CUDA peer copies",
        }
    }
}

/// An NCCL communicator, destroyed on drop.
pub struct NcclComm(cudarc::nccl::sys::ncclComm_t);

// SAFETY: a communicator is a handle NCCL allows to be used from any one
// thread at a time; the solver that owns it is used by one thread at a time.
unsafe impl Send for NcclComm {}

impl Drop for NcclComm {
    fn drop(&mut self) {
        // SAFETY: created by ncclCommInitAll, destroyed once.
        unsafe {
            let _ = cudarc::nccl::result::comm_destroy(self.0);
        }
    }
}

/// Which exchange to use: NCCL when its library loads, peer copies otherwise;
/// `FLOWSCOPE_EXCHANGE=peer` or `=nccl` forces one.
pub fn exchange_choice(forced: Option<&str>, nccl_present: bool) -> Result<bool, SolverError> {
    match forced {
        Some("peer") => Ok(false),
        Some("nccl") if nccl_present => Ok(true),
        Some("nccl") => Err(SolverError::Device(
            "FLOWSCOPE_EXCHANGE=nccl, but the NCCL library (libnccl.so.2) was not found; \
             install NCCL or unset FLOWSCOPE_EXCHANGE to use peer copies"
                .into(),
        )),
        Some(other) => Err(SolverError::InvalidParams(format!(
            "FLOWSCOPE_EXCHANGE={other}: use nccl or peer"
        ))),
        None => Ok(nccl_present),
    }
}

fn nccl_err(e: impl std::fmt::Debug) -> SolverError {
    SolverError::Device(format!("NCCL: {e:?}"))
}

impl CudaSolver {
    /// Whether the odd step uses `aa_odd4` (FP32, nx a multiple of 4); by
    /// default only where few of its warps hold partly bulk quads. Checks turn
    /// it on to compare both kernels with the CPU.
    pub fn set_odd_quads(&mut self, on: bool) {
        self.odd_quads = on && self.kernels.odd4.is_some() && self.grid.size[0].is_multiple_of(4);
    }

    fn lattice_ptr(&self) -> sys::CUdeviceptr {
        match &self.lattice {
            Lattice::Fp32(f) => f.device_ptr(&self.stream).0,
            Lattice::Fp16(f) => f.device_ptr(&self.stream).0,
        }
    }

    /// Device address of slot `slot`, layer `layer` of the lattice, and the
    /// bytes of one layer of one slot.
    fn plane(&self, slot: usize, layer: usize) -> (sys::CUdeviceptr, usize) {
        let nxy = self.grid.size[0] * self.grid.size[1];
        let bytes = self.precision.bytes_per_population();
        let offset = (slot * self.grid.cells() + layer * nxy) * bytes;
        (self.lattice_ptr() + offset as u64, nxy * bytes)
    }

    fn link(&self) -> &SlabLink {
        self.link.as_ref().expect("a slab solver has a link")
    }

    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }
}

impl SlabLattice for CudaSolver {
    type Link = CudaLink;

    fn link(
        slabs: &mut [Self],
        _fill: &[Transfer],
        write_back: &[Transfer],
    ) -> Result<CudaLink, SolverError> {
        let mut staging = Vec::with_capacity(write_back.len());
        for t in write_back {
            staging.push(match &t.mask {
                None => None,
                Some(mask) => {
                    let to = &slabs[t.to];
                    let (_, bytes) = to.plane(0, 0);
                    let stream = &to.stream;
                    Some(Staging {
                        planes: stream.alloc_zeros::<u8>(5 * bytes).map_err(dev)?,
                        positions: stream
                            .clone_htod(if mask.is_empty() {
                                &[0u32][..]
                            } else {
                                &mask[..]
                            })
                            .map_err(dev)?,
                        count: mask.len() as u32,
                    })
                }
            });
        }
        for s in slabs.iter() {
            s.stream.synchronize().map_err(dev)?;
        }
        // SAFETY: only tries to open the library.
        let present = unsafe { cudarc::nccl::sys::is_culib_present() };
        let forced = std::env::var("FLOWSCOPE_EXCHANGE").ok();
        if !exchange_choice(forced.as_deref(), present)? {
            for a in 0..slabs.len() {
                for b in 0..slabs.len() {
                    if a == b {
                        continue;
                    }
                    let peer = slabs[b].ctx.cu_ctx();
                    slabs[a].ctx.bind_to_thread().map_err(dev)?;
                    // SAFETY: both contexts are alive. "Already enabled" is fine,
                    // and without peer access the copies still work (staged by
                    // the driver), so the result is not an error.
                    let _ = unsafe { sys::cuCtxEnablePeerAccess(peer, 0) };
                }
            }
            return Ok(CudaLink {
                transport: Transport::Peer,
                staging,
            });
        }
        // NVLink multicast (NVLS) stays off: this program never needs it, and the
        // lent machines must not create multicast objects.
        std::env::set_var("NCCL_NVLS_ENABLE", "0");
        let ordinals: Vec<i32> = slabs.iter().map(|s| s.ordinal() as i32).collect();
        let mut comms = vec![std::ptr::null_mut(); slabs.len()];
        // SAFETY: `comms` has one slot per device in `ordinals`.
        unsafe {
            cudarc::nccl::result::comm_init_all(
                comms.as_mut_ptr(),
                ordinals.len() as i32,
                ordinals.as_ptr(),
            )
        }
        .map_err(nccl_err)?;
        Ok(CudaLink {
            transport: Transport::Nccl(comms.into_iter().map(NcclComm).collect()),
            staging,
        })
    }

    fn update(&mut self, part: Part, layers: &[Range<usize>]) -> Result<(), SolverError> {
        if part == Part::Edges {
            let link = self.link.as_mut().expect("a slab solver has a link");
            if link.pending {
                self.stream.wait(&link.comm_done).map_err(dev)?;
                link.pending = false;
            }
        }
        for l in layers {
            self.launch_layers(l.clone())?;
        }
        Ok(())
    }

    fn exchange(
        link: &mut CudaLink,
        slabs: &mut [Self],
        transfers: &[Transfer],
        after_even: bool,
    ) -> Result<(), SolverError> {
        for s in slabs.iter() {
            let l = s.link();
            l.edges_done.record(&s.stream).map_err(dev)?;
            l.comm.wait(&l.edges_done).map_err(dev)?;
        }
        // Where each transfer lands: the lattice plane, or the staging planes of
        // a masked write-back.
        let target = |slabs: &[Self], t: &Transfer, i: usize, k: usize| -> sys::CUdeviceptr {
            match link
                .staging
                .get(i)
                .and_then(|s| s.as_ref())
                .filter(|_| !after_even)
            {
                Some(st) => {
                    let (_, bytes) = slabs[t.to].plane(0, 0);
                    st.planes.device_ptr(&slabs[t.to].stream).0 + (k * bytes) as u64
                }
                None => slabs[t.to].plane(t.slots[k], t.to_layer).0,
            }
        };
        match &link.transport {
            Transport::Nccl(comms) => {
                use cudarc::nccl::{result, sys::ncclDataType_t::ncclUint8};
                result::group_start().map_err(nccl_err)?;
                for (i, t) in transfers.iter().enumerate() {
                    for k in 0..5 {
                        let (src, bytes) = slabs[t.from].plane(t.slots[k], t.from_layer);
                        let dst = target(slabs, t, i, k);
                        // SAFETY: both planes lie inside live buffers; each rank's
                        // operations go to its own comm stream.
                        unsafe {
                            result::send(
                                src as *const _,
                                bytes,
                                ncclUint8,
                                t.to as i32,
                                comms[t.from].0,
                                slabs[t.from].link().comm.cu_stream() as _,
                            )
                            .map_err(nccl_err)?;
                            result::recv(
                                dst as *mut _,
                                bytes,
                                ncclUint8,
                                t.from as i32,
                                comms[t.to].0,
                                slabs[t.to].link().comm.cu_stream() as _,
                            )
                            .map_err(nccl_err)?;
                        }
                    }
                }
                result::group_end().map_err(nccl_err)?;
            }
            Transport::Peer => {
                for (i, t) in transfers.iter().enumerate() {
                    // The copy runs on the receiver's stream, after the sender's edges.
                    let to = slabs[t.to].link();
                    to.comm
                        .wait(&slabs[t.from].link().edges_done)
                        .map_err(dev)?;
                    for k in 0..5 {
                        let (src, bytes) = slabs[t.from].plane(t.slots[k], t.from_layer);
                        let dst = target(slabs, t, i, k);
                        slabs[t.to].ctx.bind_to_thread().map_err(dev)?;
                        // SAFETY: both planes lie inside live buffers of these contexts.
                        unsafe {
                            cudarc::driver::result::memcpy_peer_async(
                                slabs[t.to].ctx.cu_ctx(),
                                dst,
                                slabs[t.from].ctx.cu_ctx(),
                                src,
                                bytes,
                                slabs[t.to].link().comm.cu_stream(),
                            )
                        }
                        .map_err(dev)?;
                    }
                }
            }
        }
        if !after_even {
            for (t, st) in transfers.iter().zip(&link.staging) {
                let Some(st) = st else { continue };
                if st.count == 0 {
                    continue;
                }
                let to = &mut slabs[t.to];
                let n = to.grid.cells() as u64;
                let nxy = (to.grid.size[0] * to.grid.size[1]) as u32;
                let layer = t.to_layer as u32;
                let s = t.slots.map(|v| v as u32);
                let cfg = LaunchConfig {
                    grid_dim: (st.count.div_ceil(256), 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                };
                let comm = to.link().comm.clone();
                let mut b = comm.launch_builder(&to.kernels.unpack);
                to.lattice.arg_mut(&mut b);
                b.arg(&st.planes)
                    .arg(&st.positions)
                    .arg(&st.count)
                    .arg(&n)
                    .arg(&nxy)
                    .arg(&layer)
                    .arg(&s[0])
                    .arg(&s[1])
                    .arg(&s[2])
                    .arg(&s[3])
                    .arg(&s[4]);
                // SAFETY: signature of unpack_planes; positions index the five
                // staged planes and land inside the lattice.
                unsafe { b.launch(cfg) }.map_err(dev)?;
            }
        }
        for s in slabs.iter_mut() {
            let l = s.link.as_mut().expect("a slab solver has a link");
            l.comm_done.record(&l.comm).map_err(dev)?;
            l.pending = true;
        }
        Ok(())
    }

    fn advance(&mut self) {
        self.t += 1;
    }

    fn settle(slabs: &mut [Self]) -> Result<(), SolverError> {
        for s in slabs.iter_mut() {
            let l = s.link.as_mut().expect("a slab solver has a link");
            if l.pending {
                s.stream.wait(&l.comm_done).map_err(dev)?;
                l.pending = false;
            }
        }
        for s in slabs.iter() {
            s.stream.synchronize().map_err(dev)?;
            s.link().comm.synchronize().map_err(dev)?;
        }
        Ok(())
    }

    fn change_sums(&mut self) -> Result<Option<ChangeSums>, SolverError> {
        let n = self.grid.cells() as u64;
        if self.snapshot_dev.is_none() {
            let buf = self
                .stream
                .alloc_zeros::<f32>(3 * n as usize)
                .map_err(dev)?;
            self.snapshot_dev = Some((u64::MAX, buf));
        }
        let stream = self.stream.clone();
        let cfg = self.reduction_config();
        let t = self.t;
        let (c0, c1) = self.owned_cells();
        self.compute_fields()?;
        let fields = self.fields_dev.as_ref().expect("computed");
        let (since, snapshot) = self.snapshot_dev.as_mut().expect("allocated");
        let has_prev = (*since < t) as u32;
        let mut partials = stream
            .alloc_zeros::<f64>(2 * REDUCTION_BLOCKS as usize)
            .map_err(dev)?;
        let mut b = stream.launch_builder(&self.kernels.velocity_change);
        b.arg(fields)
            .arg(snapshot)
            .arg(&n)
            .arg(&c0)
            .arg(&c1)
            .arg(&has_prev)
            .arg(&mut partials);
        // SAFETY: signature of `velocity_change`; fields 4n, snapshot 3n, 2 doubles per block.
        unsafe { b.launch(cfg) }.map_err(dev)?;
        let sums = stream.clone_dtoh(&partials).map_err(dev)?;
        let steps = t.wrapping_sub(*since);
        *since = t;
        if has_prev == 0 {
            return Ok(None);
        }
        let (diff, norm) = sums
            .chunks_exact(2)
            .fold((0.0, 0.0), |(d, m), p| (d + p[0], m + p[1]));
        Ok(Some(ChangeSums { diff, norm, steps }))
    }

    fn set_time(&mut self, t: u64) {
        self.t = t;
    }
}

/// Decodes the 16-bit storage format of `kernels/d3q19.cu` (sign, 4 exponent
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
    fn tuning_defines_become_define_lines() {
        assert_eq!(defines(""), "");
        assert_eq!(
            defines(" ODD_PAIR_BLOCKS=3  FOO "),
            "#define ODD_PAIR_BLOCKS 3\n#define FOO\n"
        );
    }

    #[test]
    fn availability_says_what_is_missing() {
        assert!(availability(false, true, Ok(1))
            .unwrap_err()
            .0
            .contains("no NVIDIA driver"));
        assert!(availability(true, false, Ok(1))
            .unwrap_err()
            .0
            .contains("libnvrtc.so"));
        assert!(availability(true, true, Ok(0))
            .unwrap_err()
            .0
            .contains("no CUDA device"));
        assert!(availability(true, true, Err("CUDA_ERROR_NO_DEVICE".into()))
            .unwrap_err()
            .0
            .contains("could not be initialised"));
        assert!(availability(true, true, Ok(2)).is_ok());
    }

    #[test]
    fn too_large_grids_are_refused_naming_the_largest_cube() {
        let gib = 1024 * 1024 * 1024u64;
        assert!(check_fits([256, 256, 256], Precision::Fp32, 80 * gib).is_ok());
        let e = check_fits([2048, 2048, 2048], Precision::Fp32, 80 * gib)
            .unwrap_err()
            .to_string();
        assert!(e.contains("largest cube that fits is 1033³"), "{e}");
        let e = check_fits([2048, 2048, 2048], Precision::Fp16, 80 * gib)
            .unwrap_err()
            .to_string();
        // 39 bytes and a bit per cell.
        assert!(e.contains("1295³") && e.contains("fp16"), "{e}");
        for precision in [Precision::Fp32, Precision::Fp16] {
            let side = largest_cube(precision, 80 * gib) as usize;
            assert!(check_fits([side; 3], precision, 80 * gib).is_ok());
            assert!(check_fits([side + 1; 3], precision, 80 * gib).is_err());
        }
    }

    #[test]
    fn kernel_source_selects_storage_and_options_disable_fma() {
        assert!(kernel_source(Precision::Fp16).starts_with("#define STORAGE_FP16\n"));
        assert!(!kernel_source(Precision::Fp32).contains("#define STORAGE_FP16\n"));
        for name in [
            "aa_even(",
            "aa_odd(",
            "aa_even2(",
            "aa_odd2(",
            "aa_odd4(",
            "aa_boundary(",
            "fields(",
            "stats(",
            "forces(",
            "init_uniform(",
            "fill_f32(",
        ] {
            assert!(
                KERNEL_SOURCE.contains(&format!("__global__ void {name}"))
                    || KERNEL_SOURCE.contains(name),
                "{name}"
            );
        }
        let o = compile_options(9, 0, Precision::Fp32);
        assert!(o.contains(&"--gpu-architecture=compute_90".to_string()));
        assert!(o.contains(&"--fmad=false".to_string()));
        assert!(compile_options(9, 0, Precision::Fp16).contains(&"--fmad=true".to_string()));
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
        // The kernel's Params: 4 u32, 2 f32, 3 f32, u32, 16x3 f32.
        assert_eq!(std::mem::size_of::<CudaParams>(), 232);
    }
}
