//! The level kernels of `poisson.cu` and the explicit terms of `flow.cu`
//! run on the CPU (compiled by g++ over `tests/emulation/prelude.h`, a
//! thread per CUDA thread) against the CPU code they mirror, to the bit:
//! their index arithmetic, wraps, faces and weights are checked on every
//! machine, not only where a GPU is.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::super::flow::{Flow, Kind};
use super::super::multigrid::{prolong_add, restrict};
use super::super::poisson::{coords, Face, Operator};
use super::{
    cell_bytes, face_bits, odd_periodic_axes, packed_coefficients, packed_links, split_order,
    upward_weights, CellBytes,
};

/// The over-relaxation the sweeps are checked with: not 1, whose product
/// would hide a factor left out.
const OMEGA: f32 = 1.3;

/// The harness of `tests/emulation/NAME.cpp`, built once per test run.
fn harness(name: &'static str) -> PathBuf {
    static BUILT: OnceLock<std::sync::Mutex<Vec<&'static str>>> = OnceLock::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("target/emulation");
    let exe = dir.join(name);
    let mut built = BUILT.get_or_init(Default::default).lock().expect("lock");
    if !built.contains(&name) {
        std::fs::create_dir_all(&dir).expect("target/emulation");
        // No fused multiply-adds, as NVRTC's --fmad=false: the CPU's
        // rounding.
        let out = Command::new("g++")
            .args([
                "-std=c++20",
                "-O1",
                "-ffp-contract=off",
                "-w",
                "-pthread",
                "-o",
            ])
            .arg(&exe)
            .arg(root.join(format!("tests/emulation/{name}.cpp")))
            .output()
            .expect("g++ runs (install g++: tools/test-deps.sh)");
        assert!(
            out.status.success(),
            "g++ failed on tests/emulation/{name}.cpp:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        built.push(name);
    }
    exe
}

/// Runs harness `name` from `input` and returns the floats it wrote.
fn emulate(name: &'static str, input: Vec<u8>) -> Vec<f32> {
    let exe = harness(name);
    let dir = tempfile::tempdir().expect("temporary folder");
    let (path_in, path_out) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::write(&path_in, input).expect("input written");
    let status = Command::new(exe)
        .arg(&path_in)
        .arg(&path_out)
        .status()
        .expect("harness runs");
    assert!(status.success(), "harness {name}: {status}");
    std::fs::read(&path_out)
        .expect("output")
        .chunks(4)
        .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

/// Appends `data`, padded to whole words (the harnesses' `take`).
fn put(bytes: &mut Vec<u8>, data: &[u8]) {
    bytes.extend_from_slice(data);
    bytes.resize(bytes.len().div_ceil(4) * 4, 0);
}

fn floats(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|f| f.to_le_bytes()).collect()
}

/// A level as the GPU holds it.
struct Device {
    op: Operator,
    links: Vec<u8>,
    weights: Option<Vec<f32>>,
    diag: Option<Vec<f32>>,
    /// The coefficients packed one word a cell, in place of `weights` and
    /// `diag`.
    words: Option<Vec<u32>>,
}

impl Device {
    fn of(op: &Operator, finest: bool) -> Device {
        let packed = if finest { packed_links(op) } else { None };
        Device {
            op: op.clone(),
            links: packed.clone().unwrap_or_else(|| op.links.clone()),
            weights: upward_weights(op).expect("symmetric"),
            diag: packed.is_none().then(|| op.diag.clone()),
            words: None,
        }
    }

    /// The finest level with its links in split rows
    /// (`set_split_preconditioner`), as the host puts them.
    fn split(op: &Operator) -> Device {
        let links = packed_links(op).expect("the finest grid's links hold its diagonal");
        Device {
            op: op.clone(),
            links: split_order(&links, op.size),
            weights: None,
            diag: None,
            words: None,
        }
    }

    /// A coarse level with its coefficients packed (`set_packed_coarse`):
    /// smoothing and restriction from the words, prolongation with the
    /// diagonal's array as before.
    fn packed(op: &Operator) -> Device {
        let upward = upward_weights(op)
            .expect("symmetric")
            .expect("a coarse level");
        let words = packed_coefficients(op, &upward).expect("counts of 1/64 that fit");
        Device {
            op: op.clone(),
            links: op.links.clone(),
            weights: None,
            diag: Some(op.diag.clone()),
            words: Some(words),
        }
    }
}

/// Runs `mode` (0 residual, 1 smooth, 2 restriction, 3 prolongation, 4
/// A x with x·A x after it; 5, 6, 7 smooth, restriction, prolongation on x
/// and b in 16 bits; 8 to_half; 9 b − A x with b·b, r·r and x·x after it;
/// 10, 11, 12 smooth, restriction, prolongation with split rows, x and b
/// given in natural order; 14, 15, 16 smooth, restriction and prolongation
/// with split rows four cells a thread; 18, 19, 20 the same in 16 bits)
/// on `fine` (and `coarse`) and returns what
/// the kernel wrote; `sweeps`: how many, whether in reverse and whether
/// from x = 0 (x's values unused, as the host's cycles); `words`:
/// the 16-bit window's two factors (or, for to_half, r·r).
#[allow(clippy::too_many_arguments)]
fn run(
    mode: i32,
    fine: &Device,
    coarse: Option<&Operator>,
    x: &[f32],
    b: &[f32],
    e: &[f32],
    sweeps: [i32; 3],
    words: [u32; 2],
) -> Vec<f32> {
    let op = &fine.op;
    let c = coarse.map_or([0; 3], |c| c.size);
    let mut header = [0i32; 17];
    header[..8].copy_from_slice(&[
        mode,
        op.size[0] as i32,
        op.size[1] as i32,
        op.size[2] as i32,
        face_bits(&op.faces) as i32,
        odd_periodic_axes(op) as i32,
        if fine.words.is_some() {
            2
        } else {
            fine.weights.is_some() as i32
        },
        fine.diag.is_some() as i32,
    ]);
    header[8..16].copy_from_slice(&[
        c[0] as i32,
        c[1] as i32,
        c[2] as i32,
        sweeps[0],
        sweeps[1],
        sweeps[2],
        words[0] as i32,
        words[1] as i32,
    ]);
    header[16] = OMEGA.to_bits() as i32;
    let mut bytes: Vec<u8> = header.iter().flat_map(|v| v.to_le_bytes()).collect();
    put(&mut bytes, &fine.links);
    match &fine.words {
        Some(words) => put(
            &mut bytes,
            &words
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .collect::<Vec<_>>(),
        ),
        None => put(&mut bytes, &floats(fine.weights.as_deref().unwrap_or(&[]))),
    }
    put(&mut bytes, &floats(fine.diag.as_deref().unwrap_or(&[])));
    put(&mut bytes, &floats(x));
    put(&mut bytes, &floats(b));
    if let Some(coarse) = coarse {
        put(&mut bytes, &floats(&coarse.diag));
    }
    put(&mut bytes, &floats(e));
    emulate("poisson", bytes)
}

fn same(name: &str, gpu: &[f32], cpu: &[f32]) {
    assert_eq!(gpu.len(), cpu.len(), "{name}");
    let differ: Vec<usize> = (0..cpu.len())
        .filter(|&c| gpu[c].to_bits() != cpu[c].to_bits())
        .collect();
    assert!(
        differ.is_empty(),
        "{name}: {} of {} cells differ, first {} ({} against {})",
        differ.len(),
        cpu.len(),
        differ[0],
        gpu[differ[0]],
        cpu[differ[0]]
    );
}

/// Cells of a block, a wall with holes and two pillars solid.
fn fluid(size: [usize; 3]) -> Vec<bool> {
    (0..size.iter().product())
        .map(|c| {
            let [x, y, z] = coords(size, c);
            let block = (4..9).contains(&x) && (3..11).contains(&y) && z < 7;
            let wall = x == 14 && (y + z) % 4 != 0;
            let pillar = (18..20).contains(&x) && (5..7).contains(&y);
            let post = (58..62).contains(&x) && (9..12).contains(&y);
            !(block || wall || pillar || post)
        })
        .collect()
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32 ^ seed).wrapping_mul(2654435761).rotate_left(13);
            (h % 20001) as f32 / 10000.0 - 1.0
        })
        .collect()
}

/// The 16-bit window of `poisson.cu`'s `half_scale` for r·r = `rr` over
/// `n` cells: the factors `down`, `up`.
fn window(rr: f64, n: usize) -> [f32; 2] {
    let rms = (rr / n as f64).sqrt();
    let e = if rms > 0.0 && rms < 1e300 {
        ((rms.to_bits() >> 52) & 0x7ff) as i32 - 1023
    } else {
        0
    };
    let e = e.clamp(-100, 20) + 6;
    [power_of_two(-e), power_of_two(e)]
}

fn power_of_two(e: i32) -> f32 {
    f32::from_bits(((127 + e) as u32) << 23)
}

/// `v` as `poisson.cu`'s `Half` stores it in `window`, read back.
fn stored(v: f32, [down, up]: [f32; 2]) -> f32 {
    let a = (v.abs() * down * power_of_two(-112)).to_bits();
    let h = ((v.to_bits() >> 16) & 0x8000) | ((a + 0x1000).min(0x0f7f_e000) >> 13);
    f32::from_bits(((h & 0x8000) << 16) | ((h & 0x7fff) << 13)) * power_of_two(112) * up
}

#[test]
fn the_16_bit_window_rounds_to_half_precision_and_saturates() {
    let w = window(4.0 * 1000.0, 1000);
    // RMS 2 = 2^1: stored at 2^-6 in half's units.
    assert_eq!(w, [power_of_two(-7), power_of_two(7)]);
    for v in values(5000, 9) {
        let v = v * 3.0;
        let s = stored(v, w);
        assert_eq!(stored(s, w), s, "{v}: stored twice");
        // Half's 11 significant bits where it is normal (|v| 2^-7 ≥ 2^-14),
        // its subnormals' step below.
        let bound = (v.abs() * power_of_two(-11)).max(power_of_two(-25 + 7));
        assert!((s - v).abs() <= bound, "{v} stored as {s}");
    }
    // Half's largest value, 65504, in the window's units; NaN and ∞ too.
    let top = 65504.0 * power_of_two(7);
    assert_eq!(stored(1e9, w), top);
    assert_eq!(stored(-f32::INFINITY, w), -top);
    assert_eq!(stored(f32::NAN, w).abs(), top);
    // Residuals of no size or beyond f64 keep the middle window.
    assert_eq!(window(0.0, 10), window(f64::INFINITY, 10));
    assert_eq!(window(0.0, 10), [power_of_two(-6), power_of_two(6)]);
}

/// A x and x·A x (a thread stepping through several cells), the residual,
/// both smoothers' orders, restriction and prolongation on the finest grid
/// and the first coarse one, for faces of every kind (odd periodic axes
/// included), with x and b in f32 and in 16 bits in three windows: the
/// kernels equal the CPU to the bit.
#[test]
fn the_level_kernels_run_on_the_cpu_equal_the_cpu_operator() {
    let cases = [
        (
            [27, 17, 13],
            [
                [Face::Wall, Face::Fixed],
                [Face::Periodic; 2],
                [Face::Wall; 2],
            ],
        ),
        (
            [25, 14, 11],
            [[Face::Periodic; 2], [Face::Wall; 2], [Face::Periodic; 2]],
        ),
        // Periodic axes of even length, a wall of odd length, a grid wider
        // than a block's 32 threads of a colour.
        (
            [72, 17, 12],
            [
                [Face::Periodic; 2],
                [Face::Wall, Face::Fixed],
                [Face::Periodic; 2],
            ],
        ),
        (
            [10, 6, 4],
            [
                [Face::Wall; 2],
                [Face::Periodic; 2],
                [Face::Wall, Face::Fixed],
            ],
        ),
        // Walls across x (a multiple of 8: split rows' colour passes four
        // cells a thread) and the fixed-pressure part of the diagonal
        // beside them.
        (
            [16, 6, 5],
            [
                [Face::Fixed, Face::Wall],
                [Face::Periodic; 2],
                [Face::Wall; 2],
            ],
        ),
        // Periodic axes of odd length across y and z with an even x, for
        // split rows (a neighbour across those wraps of the cell's own
        // colour).
        (
            [26, 15, 9],
            [
                [Face::Wall, Face::Fixed],
                [Face::Periodic; 2],
                [Face::Periodic; 2],
            ],
        ),
    ];
    for (size, faces) in cases {
        let finest = Operator::new(size, &fluid(size), faces);
        let coarse = finest.coarse();
        let coarser = coarse.coarse();
        for (depth, (op, below)) in [(&finest, &coarse), (&coarse, &coarser)]
            .into_iter()
            .enumerate()
        {
            let name = |what: &str| format!("{size:?} {faces:?} level {depth}: {what}");
            let n = op.cells();
            let level = Device::of(op, depth == 0);
            let mut x = values(n, 1);
            op.clear_inactive(&mut x);
            let b = values(n, 2);
            let mut e = values(below.cells(), 3);
            below.clear_inactive(&mut e);

            let mut ax = vec![0.0; n];
            op.apply(&x, &mut ax);
            let mut gpu = run(4, &level, None, &x, &b, &[], [0; 3], [0; 2]);
            let dot = gpu.pop().expect("the dot product") as f64;
            same(&name("A x"), &gpu, &ax);
            let cpu = super::super::poisson::dot(&x, &ax);
            assert!(
                (dot - cpu).abs() <= 1e-6 * cpu.abs(),
                "{}: {dot} against {cpu}",
                name("x·A x")
            );

            let mut r = vec![0.0; n];
            op.residual(&x, &b, &mut r);
            let mut gpu = run(9, &level, None, &x, &b, &[], [0; 3], [0; 2]);
            let sums = gpu.split_off(n);
            same(&name("residual with its dot products"), &gpu, &r);
            let dot = super::super::poisson::dot;
            // A pass's sums in double, to their rounding: the order of the
            // trees is not the CPU's.
            let close = |what: &str, gpu: &[f32], cpu: [f64; 3]| {
                for (k, cpu) in cpu.into_iter().enumerate() {
                    let gpu = gpu[k] as f64;
                    assert!(
                        (gpu - cpu).abs() <= 1e-6 * cpu.abs(),
                        "{}: {gpu} against {cpu}",
                        name(&format!("{what} {k}"))
                    );
                }
            };
            close(
                "residual_dots' sum",
                &sums,
                [dot(&b, &b), dot(&r, &r), dot(&x, &x)],
            );

            // CG's update with its check (cg_update_check): x + α d, the
            // true residual of it, and the recurrence's sums.
            let mut d = values(n, 4);
            op.clear_inactive(&mut d);
            let alpha = 0.37f32;
            let mut ad = vec![0.0; n];
            op.apply(&d, &mut ad);
            let mut moved = x.clone();
            super::super::poisson::axpy(alpha, &d, &mut moved);
            let mut r_new = vec![0.0; n];
            op.residual(&moved, &b, &mut r_new);
            let recurrence: f64 = (r.iter().zip(&ad))
                .map(|(&r, &q)| {
                    let v = r + -alpha * q;
                    v as f64 * v as f64
                })
                .sum();
            let words = [alpha.to_bits(), 0];
            let input = [d.as_slice(), r.as_slice()].concat();
            let mut gpu = run(13, &level, None, &x, &b, &input, [0; 3], words);
            let sums = gpu.split_off(2 * n);
            let gpu_r = gpu.split_off(n);
            same(&name("x updated apart"), &gpu, &moved);
            same(&name("the true residual of the update"), &gpu_r, &r_new);
            let cpu = [recurrence, dot(&r_new, &r_new), dot(&moved, &moved)];
            close("cg_update_check's sum", &sums, cpu);

            // The level kernels of every level, with the coefficients as
            // arrays and, on the first coarse grid, packed.
            let garbage = values(n, 7);
            same(
                &name("residual"),
                &run(0, &level, None, &x, &b, &[], [0; 3], [0; 2]),
                &r,
            );
            // modes: smooth, restriction, prolongation.
            let checks =
                |level: &Device, how: &str, [smooth, restriction, prolongation]: [i32; 3]| {
                    let name = |what: &str| name(&format!("{what}{how}"));
                    for reverse in [false, true] {
                        let mut smoothed = x.clone();
                        op.smooth(&mut smoothed, &b, 2, reverse, OMEGA);
                        let sweeps = [2, reverse as i32, 0];
                        let gpu = run(smooth, level, None, &x, &b, &[], sweeps, [0; 2]);
                        same(
                            &name(&format!("smooth, reverse {reverse}")),
                            &gpu,
                            &smoothed,
                        );
                    }
                    // From zero: the kernels never read x's values (given as
                    // garbage, inactive cells too).
                    let mut smoothed = vec![0.0; n];
                    op.smooth(&mut smoothed, &b, 2, false, OMEGA);
                    let gpu = run(smooth, level, None, &garbage, &b, &[], [2, 0, 1], [0; 2]);
                    same(&name("smooth from zero"), &gpu, &smoothed);

                    let mut coarse_b = vec![0.0; below.cells()];
                    restrict(op, &r, below, &mut coarse_b);
                    let gpu = run(restriction, level, Some(below), &x, &b, &[], [0; 3], [0; 2]);
                    same(&name("restriction"), &gpu, &coarse_b);

                    let mut prolonged = x.clone();
                    prolong_add(below, &e, op, &mut prolonged);
                    let gpu = run(prolongation, level, Some(below), &x, &b, &e, [0; 3], [0; 2]);
                    same(&name("prolongation"), &gpu, &prolonged);
                };
            checks(&level, "", [1, 2, 3]);
            if depth == 1 {
                checks(&Device::packed(op), ", coefficients packed", [1, 2, 3]);
            }
            if depth == 0 && size[0].is_multiple_of(2) {
                checks(&Device::split(op), ", split rows", [10, 11, 12]);
            }
            if depth == 0 && size[0].is_multiple_of(8) && odd_periodic_axes(op) == 0 {
                let how = ", split rows four cells a thread";
                checks(&Device::split(op), how, [14, 15, 16]);
            }

            // 16 bits: r's own window, one where most of x saturates, one
            // where all of it is subnormal.
            let rr = super::super::poisson::dot(&b, &b);
            let windows = [
                window(rr, n),
                [power_of_two(20), power_of_two(-20)],
                [power_of_two(-20), power_of_two(20)],
            ];
            for w in windows {
                let name = |what: &str| name(&format!("{what} in 16 bits, window {w:?}"));
                let words = w.map(f32::to_bits);
                let xs: Vec<f32> = x.iter().map(|&v| stored(v, w)).collect();
                let bs: Vec<f32> = b.iter().map(|&v| stored(v, w)).collect();
                // The arrays' kernels, and on split rows four cells a
                // thread where the grid allows (modes 18 to 20).
                let quad = depth == 0 && size[0].is_multiple_of(8) && odd_periodic_axes(op) == 0;
                let split = quad.then(|| Device::split(op));
                let mut kinds = vec![(&level, [5, 6, 7], "")];
                if let Some(split) = &split {
                    kinds.push((split, [18, 19, 20], ", split rows four cells a thread"));
                }
                for (level, [smooth, restriction, prolongation], how) in kinds {
                    let name = |what: &str| name(&format!("{what}{how}"));
                    let mut smoothed = xs.clone();
                    op.smooth_stored(&mut smoothed, &bs, 2, true, OMEGA, |v| stored(v, w));
                    let gpu = run(smooth, level, None, &x, &b, &[], [2, 1, 0], words);
                    same(&name("smooth"), &gpu, &smoothed);
                    let mut smoothed = vec![0.0; n];
                    op.smooth_stored(&mut smoothed, &bs, 1, false, OMEGA, |v| stored(v, w));
                    let gpu = run(smooth, level, None, &garbage, &b, &[], [1, 0, 1], words);
                    same(&name("smooth from zero"), &gpu, &smoothed);

                    let mut r = vec![0.0; n];
                    op.residual(&xs, &bs, &mut r);
                    let mut coarse_b = vec![0.0; below.cells()];
                    restrict(op, &r, below, &mut coarse_b);
                    let gpu = run(restriction, level, Some(below), &x, &b, &[], [0; 3], words);
                    same(&name("restriction"), &gpu, &coarse_b);

                    let mut prolonged = xs.clone();
                    prolong_add(below, &e, op, &mut prolonged);
                    prolonged.iter_mut().for_each(|v| *v = stored(*v, w));
                    let gpu = run(prolongation, level, Some(below), &x, &b, &e, [0; 3], words);
                    same(&name("prolongation"), &gpu, &prolonged);
                }
            }

            // to_half: the window from r·r, and r stored in it.
            let rr = super::super::poisson::dot(&b, &b) * 1e-12;
            let r: Vec<f32> = b.iter().map(|v| v * 1e-6).collect();
            let bits = rr.to_bits();
            let mut gpu = run(
                8,
                &level,
                None,
                &r,
                &b,
                &[],
                [0; 3],
                [bits as u32, (bits >> 32) as u32],
            );
            let w = window(rr, n);
            let windows = gpu.split_off(n);
            assert_eq!(windows[..2], w, "{}", name("to_half's window"));
            assert_eq!(windows[2..], w, "{}", name("half_window's window"));
            let cpu: Vec<f32> = r.iter().map(|&v| stored(v, w)).collect();
            same(&name("to_half"), &gpu, &cpu);
        }
    }
}

/// The explicit terms, plain cells and listed ones (walls moving and at
/// rest, free slip, outlets, a periodic axis), central, with upwinding and
/// with an eddy viscosity: the two kernels together equal `Flow::explicit`
/// to the bit.
#[test]
fn the_explicit_terms_run_on_the_cpu_equal_the_cpu_flow() {
    let size = [21, 12, 9];
    let n: usize = size.iter().product();
    let kinds: Vec<Kind> = (0..n)
        .map(|c| {
            let [x, y, z] = coords(size, c);
            // Floor and lid, the inlet, a block.
            let block = (6..9).contains(&x) && (3..7).contains(&y) && z < 5;
            if z == 0 || z == size[2] - 1 || x == 0 || block {
                Kind::Wall
            } else if x == size[0] - 1 {
                Kind::Outflow
            } else if x == 14 && y == 4 {
                Kind::Slip
            } else {
                Kind::Fluid
            }
        })
        .collect();
    // The lid (the top wall) and the inlet (x = 0) move.
    let wall: Vec<[f32; 3]> = (0..n)
        .map(|c| {
            let [x, _, z] = coords(size, c);
            match (x, z) {
                (_, z) if z == size[2] - 1 => [0.1, 0.02, 0.0],
                (0, _) => [0.05, 0.0, 0.0],
                _ => [0.0; 3],
            }
        })
        .collect();
    for (upwind, subgrid) in [(0.0, false), (0.3, false), (0.3, true)] {
        let mut flow = Flow::new(
            size,
            [false, true, false],
            kinds.clone(),
            wall.clone(),
            0.01,
            1e-6,
        );
        flow.upwind = upwind;
        flow.force = [1e-4, -2e-4, 3e-5];
        for a in 0..3 {
            flow.u[a] = values(n, 10 + a as u32).iter().map(|v| 0.1 * v).collect();
        }
        // The eddy viscosity of the subgrid model, where it is on.
        let eddy: Vec<f32> = match subgrid {
            true => values(n, 20).iter().map(|v| 0.002 * (v + 1.0)).collect(),
            false => vec![],
        };
        let mut cpu = vec![0.0; 3 * n];
        for (a, out) in cpu.chunks_mut(n).enumerate() {
            flow.explicit(a, &eddy, out);
        }
        let CellBytes {
            kinds: kind_bytes,
            open,
            general,
        } = cell_bytes(&flow);
        let periodic = (0..3)
            .filter(|&a| flow.periodic[a])
            .map(|a| 1i32 << a)
            .sum();
        let header = [
            size[0] as i32,
            size[1] as i32,
            size[2] as i32,
            periodic,
            general.len() as i32,
            subgrid as i32,
            0,
            0,
        ];
        let scalars = [
            flow.nu,
            flow.force[0],
            flow.force[1],
            flow.force[2],
            upwind,
            0.0,
            0.0,
            0.0,
        ];
        let mut bytes: Vec<u8> = header.iter().flat_map(|v| v.to_le_bytes()).collect();
        put(&mut bytes, &floats(&scalars));
        put(&mut bytes, &floats(&flow.u.concat()));
        put(&mut bytes, &kind_bytes);
        put(&mut bytes, &open);
        let walls: Vec<f32> = (0..3)
            .flat_map(|a| flow.wall.iter().map(move |w| w[a]))
            .collect();
        put(&mut bytes, &floats(&walls));
        let none = vec![0.0; n];
        put(&mut bytes, &floats(if subgrid { &eddy } else { &none }));
        let cells: Vec<u8> = general.iter().flat_map(|c| c.to_le_bytes()).collect();
        put(&mut bytes, &cells);
        let gpu = emulate("flow", bytes);
        same(
            &format!("explicit terms, upwind {upwind}, subgrid model {subgrid}"),
            &gpu,
            &cpu,
        );
        assert!(
            general.len() > 100 && general.len() < n / 2,
            "{} listed",
            general.len()
        );
    }
}
