//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
