//! The CUDA solver: `kernels/d3q19.cu` compiled at run time by NVRTC and launched
//! through cudarc (dynamic loading, so the program builds and runs its CPU path
//! on machines without CUDA).
//!
//! Same layout, streaming scheme, boundary rules and arithmetic order as the CPU
//! reference solver; kernels are compiled without FMA contraction so that FP32
//! results agree with it to rounding. Every CUDA call's error is checked, and
//! `step` synchronises and checks once per batch of launches.

use std::sync::Arc;

use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg,
};

use super::lattice::{self, Q};
use super::select::CudaUnavailable;
use super::{
    check_params, flags, Fields, Grid, Initial, Params, Precision, Solver, SolverError, Stats,
    VELOCITY_SLOTS,
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
    format!("{define}{KERNEL_SOURCE}")
}

/// NVRTC options for a device of compute capability `major.minor`. No FMA
/// contraction: the CPU reference rounds every product.
pub fn compile_options(major: i32, minor: i32) -> Vec<String> {
    vec![
        format!("--gpu-architecture=compute_{major}{minor}"),
        "--fmad=false".into(),
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
        options: compile_options(major, minor),
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
    // SAFETY: these only try to open the shared libraries.
    let driver = unsafe { cudarc::driver::sys::is_culib_present() };
    let nvrtc = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    let count = if driver {
        guarded("cuInit", CudaContext::device_count)
    } else {
        Ok(0)
    };
    availability(driver, nvrtc, count)?;
    let info = guarded("device 0", || {
        let ctx = CudaContext::new(0)?;
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

/// Refuses a grid that would not fit in `free` bytes of device memory, naming the
/// largest cube that would.
pub fn check_fits(size: [usize; 3], precision: Precision, free: u64) -> Result<(), SolverError> {
    let cells = size.iter().map(|&n| n as u64).product::<u64>();
    let per_cell = precision.bytes_per_cell() as u64;
    // Keep room for the CUDA context, reduction buffers and the field output of
    // a downsampled view.
    let reserve = 512 * 1024 * 1024u64;
    let usable = free.saturating_sub(reserve);
    if cells * per_cell <= usable {
        return Ok(());
    }
    let side = ((usable / per_cell) as f64).cbrt().floor() as u64;
    Err(SolverError::Device(format!(
        "the grid {}x{}x{} needs {} of GPU memory in {} storage ({per_cell} bytes per cell), but {} are free; \
         the largest cube that fits is {side}³ ({:.0} million cells); use a smaller grid, --precision fp16, or the CPU solver",
        size[0],
        size[1],
        size[2],
        crate::scenario::human_bytes(cells * per_cell),
        precision.name(),
        crate::scenario::human_bytes(free),
        (usable / per_cell) as f64 / 1e6
    )))
}

enum Lattice {
    Fp32(CudaSlice<f32>),
    Fp16(CudaSlice<u16>),
}

struct Kernels {
    even: CudaFunction,
    odd: CudaFunction,
    fields: CudaFunction,
    stats: CudaFunction,
    forces: CudaFunction,
    init_uniform: CudaFunction,
    fill_f32: CudaFunction,
}

/// D3Q19 on one CUDA GPU.
pub struct CudaSolver {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    kernels: Kernels,
    lattice: Lattice,
    flags_dev: CudaSlice<u8>,
    fields_dev: Option<CudaSlice<f32>>,
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
    device_name: String,
    /// Fill output buffers with NaN before each use (checks).
    pub poison: bool,
}

fn dev(e: impl std::fmt::Display) -> SolverError {
    SolverError::Device(e.to_string())
}

impl CudaSolver {
    /// Compiles the kernels, checks memory, uploads flags and the initial state.
    pub fn new(
        grid: Grid,
        mut cell_flags: Vec<u8>,
        params: Params,
        initial: Initial,
        precision: Precision,
    ) -> Result<CudaSolver, SolverError> {
        check_params(&params)?;
        let info = probe().map_err(|e| SolverError::Device(e.0))?;
        if cell_flags.len() != grid.cells() {
            return Err(SolverError::StateMismatch(format!(
                "{} flags for a grid of {} cells",
                cell_flags.len(),
                grid.cells()
            )));
        }
        if grid.size.iter().any(|&n| n > u32::MAX as usize)
            || grid.size[1] > 65535
            || grid.size[2] > 65535
        {
            return Err(SolverError::InvalidParams(format!(
                "grid {grid}: y and z must be at most 65535 cells for the CUDA launch shape"
            )));
        }
        check_fits(grid.size, precision, info.free_bytes)?;
        flags::mark_near_cells(&grid, &mut cell_flags);

        let ctx = guarded("creating the CUDA context", || CudaContext::new(0))
            .map_err(SolverError::Device)?;
        let stream = ctx.default_stream();
        let (major, minor) = info.compute_capability;
        let ptx = compile(precision, major, minor).map_err(SolverError::Device)?;
        let module = ctx.load_module(ptx).map_err(dev)?;
        let load = |name: &str| module.load_function(name).map_err(dev);
        let kernels = Kernels {
            even: load("aa_even")?,
            odd: load("aa_odd")?,
            fields: load("fields")?,
            stats: load("stats")?,
            forces: load("forces")?,
            init_uniform: load("init_uniform")?,
            fill_f32: load("fill_f32")?,
        };
        let n = grid.cells();
        let lattice = match precision {
            Precision::Fp32 => Lattice::Fp32(stream.alloc_zeros::<f32>(Q * n).map_err(dev)?),
            Precision::Fp16 => Lattice::Fp16(stream.alloc_zeros::<u16>(Q * n).map_err(dev)?),
        };
        let flags_dev = stream.clone_htod(&cell_flags).map_err(dev)?;
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
            fields_dev: None,
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
            device_name: info.name,
            poison: false,
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
        // The lattice kernels are compiled with __launch_bounds__(256).
        self.block = block.clamp(32, 256);
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
                match &mut self.lattice {
                    Lattice::Fp32(f) => b.arg(f),
                    Lattice::Fp16(f) => b.arg(f),
                };
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
                let half: Vec<u16> = populations
                    .iter()
                    .map(|&v| f32_to_f16(v * 32768.0))
                    .collect();
                self.stream.memcpy_htod(&half, f).map_err(dev)?
            }
        }
        self.stream.synchronize().map_err(dev)
    }

    fn launch_step(&mut self) -> Result<(), SolverError> {
        let cfg = self.lattice_config();
        let kernel = if self.t.is_multiple_of(2) {
            &self.kernels.even
        } else {
            &self.kernels.odd
        };
        let mut b = self.stream.launch_builder(kernel);
        match &mut self.lattice {
            Lattice::Fp32(f) => b.arg(f),
            Lattice::Fp16(f) => b.arg(f),
        };
        b.arg(&self.flags_dev).arg(&self.kparams);
        // SAFETY: (f, flags, params) is the signature of aa_even and aa_odd; the
        // launch grid covers nx x ny x nz and the kernels bound-check x.
        unsafe { b.launch(cfg) }.map_err(dev)?;
        self.t += 1;
        Ok(())
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
            let count = 4 * self.grid.cells() as u64;
            let nan = f32::NAN;
            let cfg = self.reduction_config();
            let buf = self.fields_dev.as_mut().expect("allocated above");
            // SAFETY: fill_f32(out, count, value) over a buffer of `count` floats.
            unsafe {
                self.stream
                    .launch_builder(&self.kernels.fill_f32)
                    .arg(buf)
                    .arg(&count)
                    .arg(&nan)
                    .launch(cfg)
            }
            .map_err(dev)?;
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
        match &self.lattice {
            Lattice::Fp32(f) => b.arg(f),
            Lattice::Fp16(f) => b.arg(f),
        };
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
        self.kparams = CudaParams::new(&self.grid, &params);
        self.params = params;
        Ok(())
    }

    fn step(&mut self, n: u64) -> Result<(), SolverError> {
        self.enqueue_steps(n)?;
        self.stream.synchronize().map_err(dev)
    }

    fn time_step(&self) -> u64 {
        self.t
    }

    fn reset(&mut self) -> Result<(), SolverError> {
        self.initialise()
    }

    fn fields(&mut self) -> Result<Fields, SolverError> {
        let n = self.grid.cells();
        let stream = self.stream.clone();
        let buf = self.compute_fields()?;
        let host = stream.clone_dtoh(buf).map_err(dev)?;
        let mut out = Fields {
            size: self.grid.size,
            rho: host[..n].to_vec(),
            ux: host[n..2 * n].to_vec(),
            uy: host[2 * n..3 * n].to_vec(),
            uz: host[3 * n..].to_vec(),
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
        let mut b = self.stream.launch_builder(&self.kernels.stats);
        match &self.lattice {
            Lattice::Fp32(f) => b.arg(f),
            Lattice::Fp16(f) => b.arg(f),
        };
        b.arg(&self.flags_dev)
            .arg(&self.kparams)
            .arg(&parity)
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
        let count = count.max(1.0);
        Ok(Stats {
            step: self.t,
            mass,
            mean_velocity: mom.map(|m| m / count),
            max_speed: best,
            max_speed_cell: self.grid.coords(best_cell as usize),
            non_finite_cell: (bad != u64::MAX).then(|| self.grid.coords(bad as usize)),
        })
    }

    fn obstacle_forces(&mut self) -> Result<Vec<[f64; 3]>, SolverError> {
        let cfg = self.reduction_config();
        let parity = self.parity();
        let mut b = self.stream.launch_builder(&self.kernels.forces);
        match &self.lattice {
            Lattice::Fp32(f) => b.arg(f),
            Lattice::Fp16(f) => b.arg(f),
        };
        b.arg(&self.flags_dev)
            .arg(&self.kparams)
            .arg(&parity)
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
                .map(|h| f16_to_f32(h) * (1.0 / 32768.0))
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
        self.upload(populations)?;
        self.t = step;
        Ok(())
    }

    fn memory_bytes(&self) -> u64 {
        let n = self.grid.cells() as u64;
        n * self.precision.bytes_per_cell() as u64 + self.fields_dev.as_ref().map_or(0, |_| 16 * n)
    }
}

/// IEEE half to f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = if exp == 0 {
        if man == 0 {
            sign
        } else {
            // Subnormal: value = man * 2^-24.
            let v = man as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -v } else { v };
        }
    } else if exp == 31 {
        sign | 0x7f80_0000 | (man << 13)
    } else {
        sign | ((exp + 112) << 23) | (man << 13)
    };
    f32::from_bits(bits)
}

/// f32 to IEEE half, round to nearest even (as the GPU's `cvt.rn.f16.f32`).
pub fn f32_to_f16(v: f32) -> u16 {
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let man = bits & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 31 {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1u32 << shift) - 1);
        let mut r = m >> shift;
        if rest > half || (rest == half && (r & 1) == 1) {
            r += 1;
        }
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && (r & 1) == 1) {
        r += 1;
    }
    sign | r as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_conversion_round_trips_and_rounds_to_nearest_even() {
        for h in 0u16..=0xffff {
            let f = f16_to_f32(h);
            if f.is_nan() {
                continue;
            }
            assert_eq!(f32_to_f16(f), h, "{h:#06x} -> {f}");
        }
        assert_eq!(f16_to_f32(f32_to_f16(1.0 + 1.0 / 2048.0)), 1.0); // tie to even
        assert_eq!(
            f16_to_f32(f32_to_f16(1.0 + 3.0 / 2048.0)),
            1.0 + 2.0 / 1024.0
        );
        assert_eq!(f16_to_f32(f32_to_f16(65504.0)), 65504.0);
        assert!(f16_to_f32(f32_to_f16(1e6)).is_infinite());
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
        assert!(e.contains("largest cube that fits is 1034³"), "{e}");
        let e = check_fits([2048, 2048, 2048], Precision::Fp16, 80 * gib)
            .unwrap_err()
            .to_string();
        assert!(e.contains("1298³") && e.contains("fp16"), "{e}");
    }

    #[test]
    fn kernel_source_selects_storage_and_options_disable_fma() {
        assert!(kernel_source(Precision::Fp16).starts_with("#define STORAGE_FP16\n"));
        assert!(!kernel_source(Precision::Fp32).contains("#define STORAGE_FP16\n"));
        for name in [
            "aa_even",
            "aa_odd",
            "fields",
            "stats",
            "forces",
            "init_uniform",
            "fill_f32",
        ] {
            assert!(
                KERNEL_SOURCE.contains(&format!("void __launch_bounds__(256) {name}("))
                    || KERNEL_SOURCE.contains(&format!("void {name}(")),
                "{name}"
            );
        }
        let o = compile_options(9, 0);
        assert!(o.contains(&"--gpu-architecture=compute_90".to_string()));
        assert!(o.contains(&"--fmad=false".to_string()));
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
