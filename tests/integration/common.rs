//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use flowscope::render::gpu::Gpu;
use flowscope::render::scene::Camera;
use flowscope::render::viewer::{ViewSettings, Viewer};
use flowscope::scenario::Scenario;
use flowscope::solver::flags::{self, CellType};
use flowscope::solver::lbm::cpu::CpuSolver;
use flowscope::solver::{Grid, Initial, Params};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn scenario_path(name: &str) -> PathBuf {
    repo().join("assets/scenarios").join(name)
}

pub fn load(name: &str, overrides: &[&str]) -> Scenario {
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    Scenario::load(&scenario_path(name), &o).unwrap_or_else(|e| panic!("{e}"))
}

pub fn cpu(scenario: &Scenario) -> CpuSolver {
    flowscope::session::select::build_cpu(scenario, None).unwrap_or_else(|e| panic!("{e}"))
}

/// A solver on a grid whose flags come from `cell(x, y, z)`.
pub fn solver_with(
    size: [usize; 3],
    periodic: [bool; 3],
    params: Params,
    initial: Initial,
    cell: impl Fn(usize, usize, usize) -> u8,
) -> CpuSolver {
    let grid = Grid { size, periodic };
    let mut f = vec![flags::make(CellType::Fluid, 0); grid.cells()];
    for z in 0..size[2] {
        for y in 0..size[1] {
            for x in 0..size[0] {
                f[grid.index(x, y, z)] = cell(x, y, z);
            }
        }
    }
    CpuSolver::new(grid, f, params, initial).expect("valid solver")
}

/// Runs the flowscope binary.
pub fn flowscope(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flowscope"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("the flowscope binary runs")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A PNG file's header and pixels.
pub fn read_png(path: &Path) -> (png::OutputInfo, Vec<u8>) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    (info, buf)
}

/// The headless adapter (lavapipe in CI, where a GPU test must not skip).
pub fn gpu() -> Gpu {
    Gpu::headless().unwrap_or_else(|e| panic!("{e} (CI installs mesa-vulkan-drivers)"))
}

/// Off-screen pictures of one size, in pixels.
pub struct Shot(pub [u32; 2]);

impl Shot {
    /// Renders every sample of `settings` and reads the picture back (RGBA8,
    /// rows top to bottom).
    pub fn render(&self, viewer: &mut Viewer, gpu: &Gpu, settings: &ViewSettings) -> Vec<u8> {
        viewer.render_all(gpu, settings, self.0).unwrap();
        viewer.read_rgba(gpu).unwrap().0
    }

    /// A pixel's colour as the picture stores it (display values × 255).
    pub fn rgb(&self, picture: &[u8], (x, y): (usize, usize)) -> [f32; 3] {
        let k = 4 * (y * self.0[0] as usize + x);
        [0, 1, 2].map(|c| picture[k + c] as f32)
    }

    pub fn aspect(&self) -> f32 {
        self.0[0] as f32 / self.0[1] as f32
    }

    /// The pixel (column, row) a point of the domain lands on.
    pub fn pixel(&self, camera: &Camera, p: glam::Vec3) -> (usize, usize) {
        let eye = camera.eye_view(self.aspect(), None, glam::Vec2::ZERO);
        let ndc = eye.view_proj.project_point3(p);
        let x = (ndc.x + 1.0) / 2.0 * self.0[0] as f32;
        let y = (1.0 - ndc.y) / 2.0 * self.0[1] as f32;
        (x as usize, y as usize)
    }
}
