//! Facts about the machine and the process, below everything else: the memory
//! the system can give, how to print byte counts, and the developer knobs of
//! the environment, read once at start-up into one [`Tuning`] value that is
//! passed down (library code never reads the environment itself).

use std::path::PathBuf;

pub mod ranks;

/// Exit codes of the binary.
pub mod exit {
    pub const OK: i32 = 0;
    /// Bad input or a failure with a message.
    pub const ERROR: i32 = 1;
    /// The simulation became unstable (outputs so far were written).
    pub const UNSTABLE: i32 = 3;
    /// Stopped by Ctrl-C (outputs were written).
    pub const INTERRUPTED: i32 = 130;
}

/// Memory the system can give us now (Linux `MemAvailable`), if known.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Keeps the resident size of a long session flat; called once at start-up,
/// before any thread. glibc's malloc gives threads their own 64 MiB arenas
/// (up to 8 per core), and after a large block is freed it raises its mmap
/// threshold to that block's size. The field frames the solver thread fills
/// (megabytes each) and the window thread frees then land in those arenas,
/// which return memory only from their top: a 30-minute soak of the window
/// grew from 0.3 to 1.1 GB, a dozen arenas full of free space. A fixed
/// threshold keeps blocks of 1 MiB and more in mappings of their own, given
/// back when freed, and one arena holds the rest. Below that, free space at
/// the arena's top is kept up to 64 MiB: a software Vulkan driver (lavapipe)
/// allocates and frees some 36 MB in half-megabyte blocks every frame on a
/// thread of its own, and returning it each time made the resident size
/// swing by that much (and page-faulted it in again every frame). With a
/// second arena that thread's blocks went to heaps of their own, which glibc
/// unmaps whenever they empty, whatever the trim threshold: the window swung
/// between 595 and 635 MB; with one, it stays put. Settings of the user's
/// own (`GLIBC_TUNABLES=glibc.malloc....`) are left as they are.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("GLIBC_TUNABLES").is_some() {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before any
    // other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1024 * 1024);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 * 1024 * 1024);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// "12.3 MiB" style sizes.
pub fn human_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} GiB", b / (1024.0 * 1024.0 * 1024.0))
    } else if b >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / (1024.0 * 1024.0))
    } else {
        format!("{:.1} KiB", b / 1024.0)
    }
}

static PORTABLE_SIMD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes the CPU solver keep to its portable code even where the processor
/// has wider vector units ([`Tuning::portable_simd`]; the results are the
/// same bit for bit, only the speed differs).
pub fn set_portable_simd(on: bool) {
    PORTABLE_SIMD.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// See [`set_portable_simd`].
pub fn portable_simd() -> bool {
    PORTABLE_SIMD.load(std::sync::atomic::Ordering::Relaxed)
}

/// Developer knobs for benchmarks of variants without a rebuild. Users never
/// need them; the README's developer section lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// `FLOWSCOPE_KERNEL_DEFINES`: `NAME=VALUE` words prepended to the CUDA
    /// kernels as `#define`s.
    pub kernel_defines: String,
    /// `FLOWSCOPE_OVERLAP_STEPS=0` turns off programmatic dependent launches
    /// of the bulk step kernels (on by default where the GPU has them).
    pub overlap_steps: bool,
    /// `FLOWSCOPE_EXCHANGE=nccl|peer`: how the slabs of several GPUs exchange
    /// halos (NCCL where its library loads when unset).
    pub exchange: Option<String>,
    /// `FLOWSCOPE_SHADER_DIR`: read the WGSL shaders from this directory
    /// instead of the copies built into the binary.
    pub shader_dir: Option<PathBuf>,
    /// `FLOWSCOPE_PORTABLE_SIMD=1`: the CPU solver keeps to the portable
    /// (SSE2) code where the processor has AVX2 ([`set_portable_simd`]).
    pub portable_simd: bool,
    /// `FLOWSCOPE_NO_GRAPHS=1`: the projection method's CUDA solver queues
    /// its CG iterations launch by launch instead of replaying them as CUDA
    /// graphs (to measure what the graphs save).
    pub cuda_graphs: bool,
    /// Whether the projection method's CUDA multigrid keeps the finest
    /// grid's x and b in 16 bits (the outer CG in f32): by default (None)
    /// where they would overflow the GPU's L2 cache in f32 and split rows
    /// take four cells a thread; `FLOWSCOPE_HALF_PRECONDITIONER=0` never,
    /// `=1` on every grid (with `FLOWSCOPE_SPLIT_PRECONDITIONER=0`: in the
    /// natural order).
    pub half_preconditioner: Option<bool>,
    /// The projection method's CUDA multigrid keeps the finest grid's x, b
    /// and links with each row's cells of one colour, then the other's;
    /// `FLOWSCOPE_SPLIT_PRECONDITIONER=0` keeps them in the natural order
    /// (the same values, to compare).
    pub split_preconditioner: bool,
    /// With split rows on a grid whose length along x is a multiple of 8,
    /// each thread of the finest grid's colour passes takes four cells;
    /// `FLOWSCOPE_QUAD_SWEEPS=0` takes one (the same values, to compare).
    pub quad_sweeps: bool,
    /// The projection method's CUDA multigrid sweeps its first coarse grids
    /// from one word a cell holding their couplings and diagonal;
    /// `FLOWSCOPE_PACKED_COARSE=0` sweeps them from four arrays and the
    /// links (the same values, to compare).
    pub packed_coarse: bool,
    /// `FLOWSCOPE_CYCLE=down,up,visits[,omega[,down,up]]`: the projection
    /// method's multigrid cycle sweeps down and up that many times on the
    /// finest grid and visits the second grid that many times, its sweeps
    /// over-relaxed by omega (1 if left out), the coarser grids sweeping the
    /// last two counts (3 and 3 if left out), whatever its grid (to time
    /// other shapes; each count 1 or more), as given: the solver reads it.
    pub cycle: Option<String>,
    /// `FLOWSCOPE_FITTED_GUESS=N`: how many of the last pressures the
    /// projection method's pressure solves fit their first guess to (a
    /// quadratic by least squares, once there are more than three; 4 to 6),
    /// or 0 for the quadratic through the last three; unset, the solver's
    /// own choice.
    /// As given: the solver reads it.
    pub fitted_guess: Option<String>,
    /// The projection method's CG iterations (CPU and GPU alike) leave the
    /// true residual in r and, on the GPU, compute it in the pass that
    /// updates the pressure instead of a pass of their own;
    /// `FLOWSCOPE_FUSED_CHECK=0` gives the check its own pass.
    pub fused_check: bool,
    /// `FLOWSCOPE_CG_RESTARTS=N`: how many times the projection method's
    /// pressure solves may restart CG where they stall far above their
    /// tolerance (CPU and GPU alike; 3 by default, 0 turns it off). As
    /// given: the solver reads it.
    pub cg_restarts: Option<String>,
    /// `FLOWSCOPE_SEPARATE_BOUNDARY=1`: the LBM's CUDA step updates the
    /// cells next to walls, inlets and outlets in a launch of its own after
    /// the bulk kernel instead of in the bulk kernel's launch.
    pub fuse_near: bool,
    /// While a session runs, the LBM's CUDA step before each display frame
    /// leaves the fields it reads, and the frame is averaged from them
    /// instead of from the lattice (`display_planes`); `FLOWSCOPE_STEP_FRAMES=0`
    /// reads the lattice for every frame.
    pub step_frames: bool,
    /// The LBM's CUDA odd step runs its boundary kernel on a stream of its
    /// own beside the bulk kernel (the two touch disjoint slots);
    /// `FLOWSCOPE_CONCURRENT_BOUNDARY=0` runs it after the bulk kernel.
    pub concurrent_boundary: bool,
    /// Which of the LBM's CUDA odd step's NEAR cells take its light path
    /// (`boundary::light_mask`): by default all where the lattice fits in
    /// L2, else those without a wall link along ±x itself;
    /// `FLOWSCOPE_LIGHT_CELLS=0` none, `=all` all, `=x` the latter always.
    pub light_cells: LightKnob,
    /// Whether the LBM's CUDA odd step runs the warps of its pair kernel on
    /// from one row into the next; by default where a row's own warps
    /// would leave more than 5% of their lanes idle (`launch::ODD_ROWS_IDLE`),
    /// `FLOWSCOPE_ODD_ROWS=1` always, `=0` never.
    pub odd_rows: Option<bool>,
    /// The LBM's CUDA even step lists, with the outlets and other cells on
    /// its faces across x, the cells that share their rows' 32-byte blocks,
    /// in FP32 (`boundary::face_sector_companions`);
    /// `FLOWSCOPE_FACE_SECTORS=0` lists the face cells alone.
    pub face_sectors: bool,
}

/// [`Tuning::light_cells`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LightKnob {
    Auto,
    Off,
    All,
    NotAlongX,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            kernel_defines: String::new(),
            overlap_steps: true,
            exchange: None,
            shader_dir: None,
            portable_simd: false,
            cuda_graphs: true,
            half_preconditioner: None,
            split_preconditioner: true,
            quad_sweeps: true,
            packed_coarse: true,
            fitted_guess: None,
            fused_check: true,
            cg_restarts: None,
            cycle: None,
            fuse_near: true,
            step_frames: true,
            concurrent_boundary: true,
            light_cells: LightKnob::Auto,
            odd_rows: None,
            face_sectors: true,
        }
    }
}

impl Tuning {
    /// The knobs as the environment sets them (called once, by `main`).
    pub fn from_env() -> Tuning {
        Tuning::from_vars(|name| std::env::var_os(name))
    }

    /// The knobs from a lookup of variables by name.
    pub fn from_vars(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Tuning {
        let text = |name: &str| var(name).map(|v| v.to_string_lossy().into_owned());
        Tuning {
            kernel_defines: text("FLOWSCOPE_KERNEL_DEFINES").unwrap_or_default(),
            overlap_steps: text("FLOWSCOPE_OVERLAP_STEPS").is_none_or(|v| v != "0"),
            exchange: text("FLOWSCOPE_EXCHANGE").filter(|v| !v.is_empty()),
            shader_dir: var("FLOWSCOPE_SHADER_DIR").map(PathBuf::from),
            portable_simd: text("FLOWSCOPE_PORTABLE_SIMD").is_some_and(|v| v == "1"),
            cuda_graphs: text("FLOWSCOPE_NO_GRAPHS").is_none_or(|v| v != "1"),
            half_preconditioner: text("FLOWSCOPE_HALF_PRECONDITIONER").map(|v| v == "1"),
            split_preconditioner: text("FLOWSCOPE_SPLIT_PRECONDITIONER").is_none_or(|v| v != "0"),
            quad_sweeps: text("FLOWSCOPE_QUAD_SWEEPS").is_none_or(|v| v != "0"),
            packed_coarse: text("FLOWSCOPE_PACKED_COARSE").is_none_or(|v| v != "0"),
            fitted_guess: text("FLOWSCOPE_FITTED_GUESS"),
            fused_check: text("FLOWSCOPE_FUSED_CHECK").is_none_or(|v| v != "0"),
            cg_restarts: text("FLOWSCOPE_CG_RESTARTS"),
            cycle: text("FLOWSCOPE_CYCLE"),
            fuse_near: text("FLOWSCOPE_SEPARATE_BOUNDARY").is_none_or(|v| v != "1"),
            step_frames: text("FLOWSCOPE_STEP_FRAMES").is_none_or(|v| v != "0"),
            concurrent_boundary: text("FLOWSCOPE_CONCURRENT_BOUNDARY").is_none_or(|v| v != "0"),
            light_cells: match text("FLOWSCOPE_LIGHT_CELLS").as_deref() {
                Some("0") => LightKnob::Off,
                Some("all") => LightKnob::All,
                Some("x") => LightKnob::NotAlongX,
                _ => LightKnob::Auto,
            },
            odd_rows: text("FLOWSCOPE_ODD_ROWS").map(|v| v != "0"),
            face_sectors: text("FLOWSCOPE_FACE_SECTORS").is_none_or(|v| v != "0"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuning_reads_each_knob_and_defaults_without_them() {
        assert_eq!(Tuning::from_vars(|_| None), Tuning::default());
        let t = Tuning::from_vars(|name| {
            Some(
                match name {
                    "FLOWSCOPE_KERNEL_DEFINES" => "NO_ODD_QUAD",
                    "FLOWSCOPE_OVERLAP_STEPS" => "0",
                    "FLOWSCOPE_EXCHANGE" => "peer",
                    "FLOWSCOPE_PORTABLE_SIMD" => "1",
                    "FLOWSCOPE_NO_GRAPHS" => "1",
                    "FLOWSCOPE_HALF_PRECONDITIONER" => "0",
                    "FLOWSCOPE_SPLIT_PRECONDITIONER" => "0",
                    "FLOWSCOPE_PACKED_COARSE" => "0",
                    "FLOWSCOPE_QUAD_SWEEPS" => "0",
                    "FLOWSCOPE_FITTED_GUESS" => "0",
                    "FLOWSCOPE_FUSED_CHECK" => "0",
                    "FLOWSCOPE_CG_RESTARTS" => "3",
                    "FLOWSCOPE_CYCLE" => "1, 2,1",
                    "FLOWSCOPE_SEPARATE_BOUNDARY" => "1",
                    "FLOWSCOPE_STEP_FRAMES" => "0",
                    "FLOWSCOPE_CONCURRENT_BOUNDARY" => "0",
                    "FLOWSCOPE_LIGHT_CELLS" => "0",
                    "FLOWSCOPE_ODD_ROWS" => "0",
                    "FLOWSCOPE_FACE_SECTORS" => "0",
                    _ => "/tmp/shaders",
                }
                .into(),
            )
        });
        assert_eq!(t.kernel_defines, "NO_ODD_QUAD");
        assert!(!t.overlap_steps);
        assert!(!t.cuda_graphs);
        assert_eq!(t.half_preconditioner, Some(false));
        assert!(!t.split_preconditioner);
        assert!(!t.packed_coarse);
        assert!(!t.quad_sweeps);
        assert_eq!(t.fitted_guess.as_deref(), Some("0"));
        assert!(!t.fused_check);
        assert_eq!(t.cg_restarts.as_deref(), Some("3"));
        assert_eq!(t.cycle.as_deref(), Some("1, 2,1"));
        assert!(!t.fuse_near);
        assert!(!t.step_frames);
        assert!(!t.concurrent_boundary);
        assert_eq!(t.light_cells, LightKnob::Off);
        assert_eq!(t.odd_rows, Some(false));
        assert!(!t.face_sectors);
        assert_eq!(t.exchange.as_deref(), Some("peer"));
        assert_eq!(t.shader_dir, Some(PathBuf::from("/tmp/shaders")));
        assert!(t.portable_simd);
    }

    #[test]
    fn human_bytes_picks_the_unit() {
        assert_eq!(human_bytes(512), "0.5 KiB");
        assert_eq!(human_bytes(3 * 1024 * 1024), "3.0 MiB");
        assert_eq!(human_bytes(5 << 30), "5.00 GiB");
    }
}
