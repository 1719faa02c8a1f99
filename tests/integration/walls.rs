//! Interpolated bounce-back: second-order convergence where half-way
//! bounce-back converges at first order, the same state across slabs, and
//! curved obstacles' drag.

use flowscope::solver::flags::{self, CellType};
use flowscope::solver::lbm::lattice::{E, Q};
use flowscope::solver::lbm::links::WallLinks;
use flowscope::solver::{Collision, Initial, Params, Solver};

use crate::common::*;

/// Plane Poiseuille flow between walls at z = 1 − q and z = n + q (n fluid
/// layers 1..=n, walls in layers 0 and n + 1), driven by a body force. Returns
/// the relative L2 error of the velocity against the parabola between the true
/// walls.
fn channel(n: usize, q: f64, interpolated: bool) -> f64 {
    let nz = n + 2;
    let (lo, hi) = (1.0 - q, n as f64 + q);
    let h = hi - lo;
    let tau = 0.8f32;
    let nu = (tau as f64 - 0.5) / 3.0;
    let u_max = 0.01;
    let g = 8.0 * nu * u_max / (h * h);
    let mut params = Params::new(tau, Collision::Trt);
    params.force = [g as f32, 0.0, 0.0];
    let wall = flags::make(CellType::Wall, 1);
    let fluid = flags::make(CellType::Fluid, 0);
    let mut solver = solver_with(
        [2, 2, nz],
        [true, true, false],
        params,
        Initial::Uniform([0.0; 3]),
        |_, _, z| if z == 0 || z == nz - 1 { wall } else { fluid },
    );
    if interpolated {
        // The links of the first and last fluid layers into the walls: the
        // wall lies q of the way along every one (their z step is 1).
        let mut links = WallLinks::default();
        for z in [1, n] {
            for y in 0..2 {
                for x in 0..2 {
                    let mut qs = [0.0f32; Q - 1];
                    for i in 1..Q {
                        let towards = if z == 1 { -1 } else { 1 };
                        if E[i][2] == towards {
                            qs[i - 1] = q as f32;
                        }
                    }
                    links.cells.push((x + 2 * (y + 2 * z)) as u32);
                    links.q.push(qs);
                }
            }
        }
        links.cells.sort();
        solver.set_links(links).unwrap();
    }
    let steps = ((12.0 * h * h / nu) as u64 + 1) & !1;
    solver.step(steps).unwrap();
    let fields = solver.fields().unwrap();
    let (mut err, mut norm) = (0.0, 0.0);
    for z in 1..=n {
        let u = fields.ux[fields.index(0, 0, z)] as f64;
        let exact = g / (2.0 * nu) * (z as f64 - lo) * (hi - z as f64);
        err += (u - exact).powi(2);
        norm += exact * exact;
    }
    (err / norm).sqrt()
}

#[test]
fn interpolated_walls_converge_at_second_order_where_staircases_converge_at_first() {
    // The walls q of a link beyond the last fluid cells, q below ½ in one
    // series and above in the other, on 10, 20 and 40 fluid layers: the
    // staircase puts them half a link out, an error of a fixed share of a
    // cell whose weight halves with each doubling.
    for series in [[0.25; 3], [0.8; 3]] {
        let mut ratios = Vec::new();
        let mut previous: Option<(f64, f64)> = None;
        for (k, &q) in series.iter().enumerate() {
            let n = 10 << k;
            let (stair, inter) = (channel(n, q, false), channel(n, q, true));
            println!("n {n}, q {q}: L2 error staircase {stair:.3e}, interpolated {inter:.3e}");
            assert!(inter < stair / 3.0, "n {n} q {q}: {inter} vs {stair}");
            if let Some((s0, i0)) = previous {
                ratios.push((s0 / stair, i0 / inter));
            }
            previous = Some((stair, inter));
        }
        for (s, i) in ratios {
            println!("per doubling: staircase {s:.2}×, interpolated {i:.2}×");
            assert!(
                (1.7..2.4).contains(&s),
                "staircase converges {s}× per doubling"
            );
            assert!(
                (3.3..5.0).contains(&i),
                "interpolated converges {i}× per doubling"
            );
        }
    }
}

#[test]
fn interpolated_obstacles_take_their_own_frontal_area_and_staircases_their_shadow() {
    let set = |surface: &str| format!("obstacles.0.surface=\"{surface}\"");
    let cylinder = |surface: &str| {
        let s = load(
            "cylinder.toml",
            &[
                "domain.size=[64,48,6]",
                "obstacles.0.center=[16,24,0]",
                "obstacles.0.radius=5",
                &set(surface),
            ],
        );
        s.voxelize().obstacles[0].frontal_area
    };
    // Diameter 10 by a span of 6 (periodic z); the staircase's shadow is 11
    // cells across (|y - 24| ≤ 5).
    assert_eq!(cylinder("interpolated"), 60.0);
    assert_eq!(cylinder("staircase"), 66.0);
    let sphere = |surface: &str| {
        let s = load(
            "sphere.toml",
            &[
                "domain.size=[40,32,32]",
                "obstacles.0.center=[12,15.5,15.5]",
                "obstacles.0.radius=6",
                &set(surface),
            ],
        );
        s.voxelize().obstacles[0].frontal_area
    };
    assert_eq!(sphere("interpolated"), std::f64::consts::PI * 36.0);
    let shadow = sphere("staircase");
    assert!(
        (shadow - std::f64::consts::PI * 36.0).abs() < 12.0,
        "{shadow}"
    );
}
