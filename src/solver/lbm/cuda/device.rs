//! Finding a usable CUDA device (driver, NVRTC, devices) and sizing grids to
//! its memory. Every failure becomes a sentence for the user: without a driver
//! cudarc panics rather than returning an error, so calls are guarded.

use cudarc::driver::{sys, CudaContext};

use crate::solver::{Precision, SolverError};
use crate::system::human_bytes;

/// Why a CUDA solver could not be used, in one line for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CudaUnavailable(pub String);

/// What `probe` found.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub free_bytes: u64,
    pub total_bytes: u64,
    pub multiprocessors: i32,
    pub l2_bytes: u64,
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
pub(crate) fn guarded<T>(
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
        release_freed_memory(&ctx)?;
        let (free, total) = ctx.mem_get_info()?;
        Ok(DeviceInfo {
            name: ctx.name()?,
            compute_capability: ctx.compute_capability()?,
            free_bytes: free as u64,
            total_bytes: total as u64,
            multiprocessors: ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            l2_bytes: ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?
                as u64,
        })
    })
    .map_err(CudaUnavailable)?;
    Ok(info)
}

/// Gives back to the driver what earlier solvers on this device freed.
/// Their buffers are freed stream-ordered into the device's memory pool,
/// which keeps them until a synchronisation: without this a 1024³ 16-bit
/// grid (39 GiB) was refused on an 80 GB H100 right after another had been
/// dropped, the free memory reading 39.07 GiB (`bench --gpus 1,2
/// --size 1024 --precision fp16`, its weak rows).
fn release_freed_memory(ctx: &CudaContext) -> Result<(), cudarc::driver::DriverError> {
    ctx.synchronize()?;
    if !ctx.has_async_alloc() {
        return Ok(());
    }
    let mut pool = std::ptr::null_mut();
    // SAFETY: the context is current (synchronize bound it); the pool is
    // the device's default one, which cuMemAllocAsync draws on.
    unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()).result()?;
        sys::cuMemPoolTrimTo(pool, 0).result()
    }
}

/// Device memory kept free beside the lattice: the CUDA context, reduction
/// buffers and the two display frames of a window at the default limit
/// (2 × 16 bytes × 256³ = 512 MiB).
const RESERVE: u64 = 768 * 1024 * 1024;

/// The side of the largest cube of cells whose lattice fits in `free` bytes.
pub fn largest_cube(precision: Precision, free: u64) -> u64 {
    ((free.saturating_sub(RESERVE) as f64 / device_bytes_per_cell(precision)).cbrt()).floor() as u64
}

/// Device bytes per cell: populations, the flag, the bulk bit and the even
/// step's bit (`flags::with_bulk_bits`).
fn device_bytes_per_cell(precision: Precision) -> f64 {
    precision.bytes_per_cell() as f64 + 0.25
}

/// Device bytes of the lattice, flags and both bit arrays of `cells` cells.
pub(super) fn lattice_bytes(precision: Precision, cells: u64) -> u64 {
    cells * precision.bytes_per_cell() as u64 + 4 + 2 * cells.div_ceil(32) * 4
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
        human_bytes(needed),
        precision.name(),
        human_bytes(free),
        usable as f64 / per_cell / 1e6
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(e.contains("largest cube that fits is 1032³"), "{e}");
        let e = check_fits([2048, 2048, 2048], Precision::Fp16, 80 * gib)
            .unwrap_err()
            .to_string();
        // 39 bytes and two bits per cell.
        assert!(e.contains("1294³") && e.contains("fp16"), "{e}");
        for precision in [Precision::Fp32, Precision::Fp16] {
            let side = largest_cube(precision, 80 * gib) as usize;
            assert!(check_fits([side; 3], precision, 80 * gib).is_ok());
            assert!(check_fits([side + 1; 3], precision, 80 * gib).is_err());
        }
    }
}
