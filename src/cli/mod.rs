//! The command line: `info`, `run`, `bench` (headless), and by default the window.
//!
//! Errors are reported once, here, with their chain; the exit code says what
//! kind of failure it was (see [`ExitCode`]).

mod bench;
pub mod check;
mod render;
mod run;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::scenario::{Face, InletProfile, Scenario};
use crate::session::{Backend, Choice, Gpus};
use crate::solver::Precision;
use crate::system::{available_memory, human_bytes, Tuning};

/// Exit codes of the binary (in `system`, where a process that gives up
/// on the others ends with one too).
pub use crate::system::exit;

#[derive(Parser, Debug)]
#[command(
    name = "flowscope",
    version,
    about = "Explore 3D fluid flows live (D3Q19 lattice Boltzmann, CUDA or CPU)"
)]
pub struct Cli {
    /// Without a command, the window opens on the default scenario.
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SolverKind {
    /// CUDA where a usable GPU is found, the CPU otherwise.
    Auto,
    Cpu,
    Cuda,
}

impl From<SolverKind> for Choice {
    fn from(kind: SolverKind) -> Self {
        match kind {
            SolverKind::Auto => Choice::Auto,
            SolverKind::Cpu => Choice::Cpu,
            SolverKind::Cuda => Choice::Cuda,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    Fp32,
    Fp16,
}

impl From<PrecisionArg> for Precision {
    fn from(p: PrecisionArg) -> Self {
        match p {
            PrecisionArg::Fp32 => Precision::Fp32,
            PrecisionArg::Fp16 => Precision::Fp16,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Open the window on a scenario (the default command).
    Gui(GuiArgs),
    /// Print a scenario's derived units, cell counts and memory per solver.
    Info {
        scenario: PathBuf,
        /// Override a scenario key, e.g. --set fluid.reynolds=400.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// The solution method (default: the scenario's [run] method, else lbm).
        #[arg(long, value_enum)]
        method: Option<crate::scenario::Method>,
    },
    /// Run a scenario headless and write the requested outputs.
    Run(Box<run::RunArgs>),
    /// Measure solver speed in MLUPS (million lattice-cell updates per second).
    Bench(bench::BenchArgs),
    /// Run a scenario and draw an isosurface off-screen to a PNG file.
    Render(Box<render::RenderArgs>),
    /// Compare the CUDA solver with the CPU reference (needs a GPU).
    CheckCuda(check::CheckArgs),
    /// Compile the CUDA kernels with NVRTC (needs libnvrtc, no GPU) and write
    /// the PTX to a folder.
    #[command(hide = true)]
    CompileKernels {
        /// Compute capability, e.g. 90 for Hopper.
        #[arg(long, default_value_t = 90)]
        arch: i32,
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// Parses arguments, runs the command, prints any error, returns the exit code.
pub fn main() -> i32 {
    crate::system::tune_allocator();
    let cli = Cli::parse();
    if let Err(e) = crate::system::ranks::init() {
        eprintln!("error: {e}");
        return exit::ERROR;
    }
    // The only place the environment's developer knobs are read.
    let tuning = Tuning::from_env();
    crate::system::set_portable_simd(tuning.portable_simd);
    let command = cli.command.unwrap_or(Command::Gui(GuiArgs {
        scenario: None,
        solver: SolverArgs {
            solver: SolverKind::Auto,
            precision: PrecisionArg::Fp32,
            gpus: Gpus::One,
        },
        display_limit: None,
        smoke_frames: None,
    }));
    if let (Some(w), false) = (
        crate::system::ranks::world(),
        matches!(command, Command::Run(_)),
    ) {
        crate::system::ranks::report(&format!(
            "error: only `flowscope run` spreads over MPI processes; start this command \
             without mpirun (it was started as one of {} processes)",
            w.size()
        ));
        return exit::ERROR;
    }
    let result = match command {
        Command::Gui(args) => gui(args, tuning).map(|_| exit::OK),
        Command::Info {
            scenario,
            set,
            method,
        } => info(&scenario, &set, method).map(|_| exit::OK),
        Command::Run(args) => run::run(*args, &tuning),
        Command::Bench(args) => bench::bench(args, &tuning).map(|_| exit::OK),
        Command::Render(args) => render::render(*args, &tuning).map(|_| exit::OK),
        Command::CheckCuda(args) => {
            check::check(args, &tuning).map(|ok| if ok { exit::OK } else { exit::ERROR })
        }
        Command::CompileKernels { arch, out } => {
            compile_kernels(arch, out.as_deref(), &tuning).map(|_| exit::OK)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // Through `ranks::report`: a rank other than 0 prints nothing else.
            let mut message = format!("error: {e}");
            for cause in e.chain().skip(1) {
                message.push_str(&format!("\n  caused by: {cause}"));
            }
            crate::system::ranks::report(&message);
            exit::ERROR
        }
    }
}

/// A display limit: cells per axis of the largest cube shown.
pub fn parse_display_limit(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (8..=4096).contains(&n) => Ok(n),
        _ => Err(format!(
            "`{s}` is not a display limit: give the cells per axis of the largest cube to show, from 8 to 4096 (default 256)"
        )),
    }
}

/// Grids up to this many cells are voxelised by `info` to count their cells.
const INFO_VOXEL_LIMIT: u64 = 1 << 26;

/// The scenario the window opens when none is named.
pub const DEFAULT_SCENARIO: &str = "assets/scenarios/cavity.toml";

/// Which solver runs a scenario (the window and `run`).
#[derive(clap::Args, Debug)]
pub struct SolverArgs {
    /// Which solver: auto picks CUDA when a usable GPU is found.
    #[arg(long, value_enum, default_value = "auto")]
    pub solver: SolverKind,
    /// Population storage of the CUDA solver (fp16 halves memory and traffic).
    #[arg(long, value_enum, default_value = "fp32")]
    pub precision: PrecisionArg,
    /// GPUs to spread the domain over (slabs along z): a number or `all`.
    #[arg(long, default_value = "1")]
    pub gpus: Gpus,
}

impl SolverArgs {
    pub fn backend(&self, tuning: &Tuning) -> Backend {
        Backend {
            choice: self.solver.into(),
            precision: self.precision.into(),
            gpus: self.gpus,
            tuning: tuning.clone(),
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct GuiArgs {
    /// Default: the scenario open when the window last closed, else
    /// assets/scenarios/cavity.toml.
    pub scenario: Option<PathBuf>,
    #[command(flatten)]
    pub solver: SolverArgs,
    /// Show at most N³ cells: larger grids are averaged over blocks of cells
    /// (on the GPU with CUDA) before they are copied to the window.
    /// Default: the last session's, else 256.
    #[arg(long, value_name = "N", value_parser = parse_display_limit)]
    pub display_limit: Option<usize>,
    /// Drive the window by itself for N frames (plot types, resize, minimise,
    /// a scenario change), then exit: a smoke test under Xvfb.
    #[arg(long, hide = true)]
    pub smoke_frames: Option<u64>,
}

fn gui(args: GuiArgs, tuning: Tuning) -> anyhow::Result<()> {
    use crate::app::persist::{self, Persisted};
    let settings_path = persist::path();
    let persisted = settings_path
        .as_deref()
        .map(Persisted::load)
        .unwrap_or_default();
    // The scenario named, else last session's, else the default; one that
    // does not load gives way to the next, and the panel says why.
    let named = args.scenario.is_some();
    let mut candidates: Vec<PathBuf> = args.scenario.into_iter().collect();
    candidates.extend(persisted.scenario.clone().filter(|p| p.exists()));
    candidates.push(PathBuf::from(DEFAULT_SCENARIO));
    let mut notice = None;
    let mut scenario = None;
    for path in &candidates {
        let loaded = if path.exists() {
            Scenario::load(path, &[]).map_err(|e| e.to_string())
        } else {
            Err(format!(
                "scenario {} not found; run flowscope from the project folder or name a scenario file: flowscope gui path/to/scenario.toml",
                path.display()
            ))
        };
        match loaded {
            Ok(s) => {
                scenario = Some(s);
                break;
            }
            Err(e) if notice.is_none() => notice = Some(e),
            Err(_) => {}
        }
    }
    let Some(scenario) = scenario else {
        anyhow::bail!("{}", notice.unwrap_or_default());
    };
    let notice = notice.map(|n| format!("{n}; opened {} instead", scenario.path.display()));
    if let (Some(n), true) = (&notice, named) {
        eprintln!("error: {n}");
    }
    let display_limit = args
        .display_limit
        .or(persisted
            .display_limit
            .filter(|n| parse_display_limit(&n.to_string()).is_ok()))
        .unwrap_or(crate::solver::display::DEFAULT_LIMIT);
    crate::app::run(crate::app::Options {
        backend: args.solver.backend(&tuning),
        scenario,
        display_limit,
        smoke_frames: args.smoke_frames,
        persisted,
        settings_path,
        notice,
    })?;
    Ok(())
}

fn face_name(f: &Face) -> String {
    match f {
        Face::Wall => "wall".into(),
        Face::Periodic => "periodic".into(),
        Face::Outlet => "outlet".into(),
        Face::ConvectiveOutlet => "convective outlet".into(),
        Face::FreeSlip => "free-slip".into(),
        Face::MovingWall(v) => format!("moving wall {v:?}×u"),
        Face::Inlet {
            velocity,
            profile: InletProfile::Uniform,
        } => format!("inlet {velocity:?}×u"),
        Face::Inlet { velocity, profile } => format!("inlet {velocity:?}×u, {profile}"),
    }
}

fn info(
    path: &std::path::Path,
    set: &[String],
    method: Option<crate::scenario::Method>,
) -> anyhow::Result<()> {
    use crate::scenario::Method;
    let mut s = Scenario::load(path, set)?;
    if let Some(method) = method {
        s.run.method = method;
    }
    let u = &s.units;
    // `info` stays quick: cells are counted (a pass over the grid) only up to
    // a size that takes well under a second; `run` checks the rest.
    let voxels = if s.cells() <= INFO_VOXEL_LIMIT {
        let v = s.voxelize();
        s.check_voxels(&v)?;
        Some(v)
    } else {
        None
    };
    println!("{} ({})", s.name, s.path.display());
    if !s.description.is_empty() {
        println!("  {}", s.description);
    }
    let fluid = voxels
        .as_ref()
        .map_or("not counted above 64 M cells".into(), |v| {
            v.fluid_cells.to_string()
        });
    match s.run.method {
        Method::Lbm => println!("method          lattice Boltzmann (D3Q19; CPU and CUDA)"),
        Method::Projection => println!(
            "method          projection (staggered grid, Adams–Bashforth, pressure by {} to \
             a relative residual of {:e}; CPU and CUDA), CFL {}",
            s.run.pressure.describe(),
            s.run.tolerance,
            s.run.cfl
        ),
    }
    println!(
        "grid            {} x {} x {} = {} cells ({fluid} fluid)",
        s.size[0],
        s.size[1],
        s.size[2],
        s.cells()
    );
    let names = ["x_min", "x_max", "y_min", "y_max", "z_min", "z_max"];
    let faces: Vec<String> = s
        .faces
        .iter()
        .zip(names)
        .map(|(f, n)| format!("{n} {}", face_name(f)))
        .collect();
    println!("faces           {}", faces.join(", "));
    for (k, o) in s.obstacles.iter().enumerate() {
        if let crate::scenario::Shape::Mesh { file, placed, .. } = o {
            let (lo, hi) = (placed.lo, placed.hi);
            println!(
                "mesh            {} (mesh): {}, {} triangles, cells x {:.1} to {:.1}, y {:.1} to {:.1}, z {:.1} to {:.1}",
                k + 1,
                file.display(),
                placed.triangles.len(),
                lo[0],
                hi[0],
                lo[1],
                hi[1],
                lo[2],
                hi[2]
            );
        }
    }
    for o in voxels.iter().flat_map(|v| &v.obstacles) {
        println!(
            "obstacle        {}: {} cells, frontal area {} cells",
            o.name, o.cells, o.frontal_area
        );
    }
    if let Some(v) = &voxels {
        let grid = s.grid();
        if let Some(setup) = s.releases.setup(&grid, &v.flags, &s.path)? {
            for (k, src) in setup.sources.iter().enumerate() {
                let release = match src.release {
                    crate::solver::scalar::Release::Concentration(c) => format!("held at {c}"),
                    crate::solver::scalar::Release::Rate(r) => format!("{r} per step"),
                };
                let until = src.stop.map_or("the end".into(), |s| format!("step {s}"));
                println!(
                    "source          {}: field {}, {} cells, {release}, from step {} to {until}",
                    k + 1,
                    src.field + 1,
                    src.cells.len(),
                    src.start
                );
            }
            for r in &setup.receptors {
                println!("receptor        {}: at {:?}", r.name, r.position);
            }
            let every = match setup.interval {
                1 => "every flow step".to_string(),
                k => format!("every {k} flow steps"),
            };
            println!(
                "dispersion      Sc {}, Sc_t {}, inflow {}, moved {every}",
                setup.schmidt, setup.schmidt_turbulent, setup.inflow
            );
        }
    }
    println!(
        "lattice units   Re = {:.2}, L = {} cells, u = {:.5}, Ma = {:.4}",
        u.reynolds,
        u.length_cells,
        u.velocity_lattice,
        u.mach()
    );
    let subgrid = match s.turbulence {
        crate::scenario::Turbulence::Smagorinsky => {
            format!(", Smagorinsky LES (C_s {})", s.smagorinsky_constant)
        }
        crate::scenario::Turbulence::None => String::new(),
    };
    println!(
        "                ν = {:.6e}, τ = {:.5}, collision {}{subgrid}",
        u.viscosity_lattice, u.tau, s.collision
    );
    println!(
        "                {:.0} steps per flow-through of L",
        u.steps_per_flow_through()
    );
    if let Some(p) = &u.physical {
        let dt = u.time_step_s().unwrap_or(f64::NAN);
        println!(
            "physical units  dx = {} m, U = {} m/s, ν = {:e} m²/s, ρ = {} kg/m³",
            p.cell_size_m, p.velocity_m_s, p.viscosity_m2_s, p.density_kg_m3
        );
        println!(
            "                dt = {dt:.4e} s per step, L = {:.4} m, domain {:.4} x {:.4} x {:.4} m",
            u.length_cells * p.cell_size_m,
            s.size[0] as f64 * p.cell_size_m,
            s.size[1] as f64 * p.cell_size_m,
            s.size[2] as f64 * p.cell_size_m
        );
        println!(
            "                1 lattice velocity = {:.4} m/s, 1 lattice pressure = {:.4} Pa",
            u.velocity_scale().unwrap_or(f64::NAN),
            u.pressure_scale().unwrap_or(f64::NAN)
        );
    } else {
        println!("physical units  none given (add a [physical] section to see them)");
    }
    let bytes = |p: Precision| human_bytes(s.cells() * p.bytes_per_cell() as u64);
    let (per_cell, solver) = match s.run.method {
        Method::Lbm => {
            println!(
                "memory          CPU (FP32) {}, CUDA FP32 {}, CUDA 16-bit {}",
                bytes(Precision::Fp32),
                bytes(Precision::Fp32),
                bytes(Precision::Fp16)
            );
            (Precision::Fp32.bytes_per_cell(), "the CPU solver")
        }
        Method::Projection => {
            let per_cell = crate::solver::projection::solver::BYTES_PER_CELL;
            println!(
                "memory          CPU (FP32) {}",
                human_bytes(s.cells() * per_cell as u64)
            );
            (per_cell, "the projection method")
        }
    };
    if let Some(available) = available_memory() {
        if let Err(e) = s.check_memory(per_cell as f64, available, solver) {
            println!("warning: {}", e.message);
            println!("         {}", e.help);
        }
    }
    for w in &s.warnings {
        println!("warning: {w}");
    }
    Ok(())
}

fn compile_kernels(
    arch: i32,
    out: Option<&std::path::Path>,
    tuning: &Tuning,
) -> anyhow::Result<()> {
    // Plain BGK/TRT, and with a collision model (subgrid model, regularized);
    // each also with step kernels that leave the velocity (a contaminant's
    // transport steps).
    let variants = [Precision::Fp32, Precision::Fp16]
        .into_iter()
        .flat_map(|p| [(p, false), (p, true)])
        .flat_map(|(p, m)| [(p, m, false), (p, m, true)]);
    for (precision, model, velocity) in variants {
        let defines = if velocity {
            crate::solver::lbm::cuda::leaving_velocity(&tuning.kernel_defines)
        } else {
            tuning.kernel_defines.clone()
        };
        let ptx =
            crate::solver::lbm::cuda::compile(precision, arch / 10, arch % 10, &defines, model)
                .map_err(anyhow::Error::msg)?;
        let name = format!(
            "{}{}{}",
            precision.name(),
            if model { "_model" } else { "" },
            if velocity { "_velocity" } else { "" }
        );
        let text = ptx.to_src();
        println!(
            "{name}: {} bytes of PTX, kernels: {}",
            text.len(),
            entries(&text).join(" ")
        );
        write_ptx(out, &format!("d3q19_{name}.ptx"), &text)?;
    }
    let ptx =
        crate::solver::scalar::cuda::compile(arch / 10, arch % 10).map_err(anyhow::Error::msg)?;
    let text = ptx.to_src();
    println!(
        "transport: {} bytes of PTX, kernels: {}",
        text.len(),
        entries(&text).join(" ")
    );
    write_ptx(out, "transport.ptx", &text)?;
    for (name, source) in crate::solver::projection::cuda::sources() {
        let ptx = crate::solver::projection::cuda::compile(name, source, arch / 10, arch % 10)
            .map_err(anyhow::Error::msg)?;
        let text = ptx.to_src();
        let stem = name.trim_end_matches(".cu");
        println!(
            "projection {stem}: {} bytes of PTX, kernels: {}",
            text.len(),
            entries(&text).join(" ")
        );
        write_ptx(out, &format!("projection_{stem}.ptx"), &text)?;
    }
    Ok(())
}

/// The names of a PTX module's kernels.
fn entries(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix(".visible .entry ")
                .and_then(|r| r.split('(').next())
        })
        .collect()
}

fn write_ptx(dir: Option<&std::path::Path>, name: &str, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join(name), text)?;
    }
    Ok(())
}
