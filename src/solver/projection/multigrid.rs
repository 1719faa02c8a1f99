//! Geometric multigrid for the pressure Poisson equation, and conjugate
//! gradients preconditioned by one V-cycle of it.
//!
//! Coarser grids halve each axis (rounding up: a last coarse cell may cover
//! one fine cell), their operators weighted by the fine couplings across
//! each coarse face ([`Operator::coarse`]), so that obstacles thinner than a
//! coarse cell still block. The
//! V-cycle smooths with red-black Gauss–Seidel ([`Cycle`] gives the sweeps),
//! restricts the residual by summing the fine cells (halved: the unscaled
//! seven-point operator of a grid twice as coarse is four times the fine
//! one's, and eight cells are summed), solves the coarsest grid by conjugate
//! gradients, and prolongs trilinearly from the coarse cells around each
//! fine cell (mirrored beyond a face as its condition says; next to a solid
//! coarse cell, from the one holding it). The smoothing after the
//! correction runs its colours in the opposite order. Restriction and
//! prolongation are not each other's transpose (the transpose of the
//! trilinear map converged slower), so CG takes the flexible β; it stops
//! at a relative residual, or where f32 rounding stops it, and starts from
//! the `x` it is given: the flow passes the last pressures extrapolated
//! to the solve's time (`flow::extrapolation`).

use rayon::prelude::*;

use super::poisson::{axpy, dot, Face, Operator};

/// Coarsening stops at this many cells or fewer.
const COARSEST_CELLS: usize = 512;
/// The cycle's shape: red-black Gauss–Seidel sweeps before and after the
/// coarse-grid correction on each grid, and how many times the finest grid
/// takes the second grid's correction.
///
/// Without obstacles the finest grid, where a sweep costs seven times all
/// coarser grids' together, sweeps once before and three times after and
/// takes one correction: on the city block its solves took as many cycles
/// as with three and three (2.22 a solve over steps 20 to 60), and the 128³
/// rates of the test below moved from 0.092 / 0.050 to 0.095 / 0.077; on
/// every grid it lost more (0.130 / 0.097), as did two and two on the finest
/// (0.094 / 0.065; issue 20, 2026-11-27).
///
/// Around obstacles the second grid's correction falls short where thin
/// obstacles dissolve into fractional coarse couplings (0.190 per cycle
/// with walls all round). The finest grid then sweeps twice before and four
/// times after and takes the second grid's correction twice (a W at the
/// top: from the second grid down once more on its residual): 0.098 / 0.045
/// (walls / an outlet). On the H100 the city block's sub-step takes 1.85 ms
/// against 1.69, in a 256³ grid 6.36–6.39 against 6.00 (2.63 G
/// cell-steps/s), the cylinder at Re 100 0.391 s of wall-clock per D/U
/// against 0.326. Two and three sweeps (0.110) or one and three (0.110)
/// with the two corrections, two and four with one (0.179), or the second
/// visit without its three sweeps down (0.104), fall short of tenfold
/// (thirty-first session).
///
/// That cycle's sweeps are over-relaxed (ω = 1.3 on every grid): the city
/// block's solves, each ending at the f32 floor from the fitted first
/// guess, take 1.16 cycles instead of 1.32 (CPU, solves 21 to 121; ω =
/// 1.15 / 1.2 / 1.25 / 1.35 / 1.45 / 1.6 gave 1.24 / 1.18 / 1.19 / 1.21 /
/// 1.34 / 2.13, ω = 1.3 on the finest grid alone 1.23, on the coarser ones
/// alone 1.36), and on the H200 its sub-step takes 1.17–1.18 ms against
/// 1.27, in a 256³ grid 3.91–3.92 against 3.95 (thirty-sixth session). The
/// 128³ rates of the test below: 0.087 / 0.054 against 0.098 / 0.045. The
/// plain cycle keeps ω = 1: 1.3 there gives 0.105 with walls all round, and
/// the cavity's solves take as many cycles either way.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Cycle {
    finest: [usize; 2],
    second_grid_visits: usize,
    omega: f32,
    coarser: [usize; 2],
}

impl Cycle {
    /// Every coarser grid sweeps three times each way and takes its next
    /// grid's correction once. Two before and three after on the stronger
    /// cycle keep its 128³ rates tenfold (0.091 / 0.055) and made the city
    /// block's sub-step 3% faster on the H200 (1.14 ms against 1.17–1.18),
    /// but with them `check-cuda --projection-only` failed on the duct with
    /// a parabolic inlet (the GPU's solve, half of its steps with the 16-bit
    /// preconditioner, stalled at a residual of 4.4 where the CPU's reached
    /// 4e-5) and the urban log inlet (1.1e-5; thirty-seventh session).
    const COARSER: [usize; 2] = [3, 3];

    /// The over-relaxation of the stronger cycle's sweeps.
    const OMEGA_AROUND_OBSTACLES: f32 = 1.3;

    /// The shape for `op`'s grid: the stronger one where cells inside the
    /// grid (off its outer layer) take no part.
    pub(super) fn for_grid(op: &Operator) -> Cycle {
        if op.has_obstacles() {
            Cycle {
                finest: [2, 4],
                second_grid_visits: 2,
                omega: Self::OMEGA_AROUND_OBSTACLES,
                coarser: Self::COARSER,
            }
        } else {
            Cycle {
                finest: [1, 3],
                second_grid_visits: 1,
                omega: 1.0,
                coarser: Self::COARSER,
            }
        }
    }

    /// A shape of `finest` sweeps before and after the correction on the
    /// finest grid, `second_grid_visits` of the second grid and `coarser`
    /// sweeps on each coarser grid, every sweep over-relaxed by `omega`, or
    /// None unless each count is 1 or more (the GPU's first pass down
    /// starts its x from zero) and 0 < ω < 2 (where Gauss–Seidel
    /// converges).
    pub(super) fn new(
        finest: [usize; 2],
        second_grid_visits: usize,
        omega: f32,
        coarser: [usize; 2],
    ) -> Option<Cycle> {
        let counts = finest.iter().chain(&coarser).chain([&second_grid_visits]);
        (counts.into_iter().all(|&n| n >= 1) && omega > 0.0 && omega < 2.0).then_some(Cycle {
            finest,
            second_grid_visits,
            omega,
            coarser,
        })
    }

    /// The coarser grids' sweeps down and up.
    pub(super) fn coarser(self) -> [usize; 2] {
        self.coarser
    }

    /// The over-relaxation of every grid's Gauss–Seidel sweeps.
    pub(super) fn omega(self) -> f32 {
        self.omega
    }

    /// Sweeps before and after the correction on level `k` (0: the finest).
    pub(super) fn sweeps(self, k: usize) -> [usize; 2] {
        if k == 0 {
            self.finest
        } else {
            self.coarser
        }
    }

    /// Times level `k` takes level `k + 1`'s correction.
    pub(super) fn visits(self, k: usize) -> usize {
        if k == 0 {
            self.second_grid_visits
        } else {
            1
        }
    }
}

/// CG stops after this many iterations without a real gain.
const STALLED: usize = 3;

/// A stall above this many times the tolerance is not f32's floor: CG
/// restarts there (where [`Pcg::restarts`] allows) instead of stopping.
const RESTART_ABOVE: f64 = 100.0;

/// Whether a solve that ended as `end` at `residual` restarts CG from its
/// x (the next direction the preconditioned residual alone), counting the
/// restart in `done` against the `allowed` ones.
pub(super) fn restart(
    end: End,
    residual: f64,
    tolerance: f64,
    done: &mut usize,
    allowed: usize,
) -> bool {
    let again = end == End::Plain && residual > RESTART_ABOVE * tolerance && *done < allowed;
    *done += again as usize;
    again
}

/// One grid of the hierarchy and its work vectors.
struct Level {
    op: Operator,
    x: Vec<f32>,
    b: Vec<f32>,
    r: Vec<f32>,
}

impl Level {
    fn new(op: Operator) -> Level {
        let n = op.cells();
        Level {
            op,
            x: vec![0.0; n],
            b: vec![0.0; n],
            r: vec![0.0; n],
        }
    }
}

/// The grids from the finest (0) to the coarsest, and the coarsest's
/// factorisation.
pub struct Multigrid {
    levels: Vec<Level>,
    coarsest: Coarsest,
    shape: Cycle,
}

impl Multigrid {
    pub fn new(op: Operator) -> Multigrid {
        let mut levels = vec![Level::new(op)];
        loop {
            let fine = &levels.last().expect("one at least").op;
            // Every axis halves (the scalings below assume eight fine cells
            // to a coarse one): an axis of one cell ends it.
            if fine.cells() <= COARSEST_CELLS || fine.size.iter().any(|&n| n < 2) {
                break;
            }
            let coarse = fine.coarse();
            levels.push(Level::new(coarse));
        }
        let coarsest = Coarsest::new(&levels.last().expect("one at least").op);
        let shape = Cycle::for_grid(&levels[0].op);
        Multigrid {
            levels,
            coarsest,
            shape,
        }
    }

    /// The cycle's sweeps and visits.
    pub(super) fn shape(&self) -> Cycle {
        self.shape
    }

    /// Takes another shape than its grid's ([`Cycle::for_grid`]).
    pub(super) fn set_shape(&mut self, shape: Cycle) {
        self.shape = shape;
    }

    /// The finest grid's operator.
    pub fn operator(&self) -> &Operator {
        &self.levels[0].op
    }

    /// Grids in the hierarchy.
    pub fn depth(&self) -> usize {
        self.levels.len()
    }

    /// The operators from the finest grid to the coarsest.
    pub(super) fn operators(&self) -> impl Iterator<Item = &Operator> {
        self.levels.iter().map(|l| &l.op)
    }

    /// The coarsest grid's active cells and the inverse of its factorised
    /// matrix (row-major, double precision; with the constants added where
    /// the operator is singular, as [`Coarsest`] solves), or why it has
    /// none: too many cells for a dense matrix.
    pub(super) fn coarsest_inverse(&self) -> Result<(Vec<usize>, Vec<f64>), String> {
        let Coarsest::Dense { cells, lower } = &self.coarsest else {
            return Err(format!(
                "its coarsest grid ({:?} cells) is too large for a dense solve: every axis \
                 needs at least 2 cells and the grid should halve down to {COARSEST_CELLS} \
                 cells or fewer",
                self.levels.last().expect("one at least").op.size
            ));
        };
        let m = cells.len();
        // Column j of A⁻¹ = L⁻ᵀ L⁻¹ e_j, by the substitutions of `solve`.
        let columns: Vec<Vec<f64>> = (0..m)
            .into_par_iter()
            .map(|j| {
                let mut y = vec![0.0f64; m];
                y[j] = 1.0;
                for i in j..m {
                    let mut v = y[i];
                    for k in j..i {
                        v -= lower[i * m + k] * y[k];
                    }
                    y[i] = v / lower[i * m + i];
                }
                for i in (0..m).rev() {
                    let mut v = y[i];
                    for k in i + 1..m {
                        v -= lower[k * m + i] * y[k];
                    }
                    y[i] = v / lower[i * m + i];
                }
                y
            })
            .collect();
        let mut inverse = vec![0.0f64; m * m];
        for (j, column) in columns.iter().enumerate() {
            for (i, v) in column.iter().enumerate() {
                inverse[i * m + j] = *v;
            }
        }
        Ok((cells.clone(), inverse))
    }

    /// z ≈ A⁻¹ r by one cycle from zero.
    pub fn cycle(&mut self, r: &[f32], z: &mut [f32]) {
        self.levels[0].b.copy_from_slice(r);
        self.levels[0].x.fill(0.0);
        self.down_up(0);
        z.copy_from_slice(&self.levels[0].x);
    }

    fn down_up(&mut self, k: usize) {
        if k + 1 == self.levels.len() {
            let l = &mut self.levels[k];
            self.coarsest.solve(&l.op, &l.b, &mut l.x, &mut l.r);
            return;
        }
        let [down, up] = self.shape.sweeps(k);
        {
            let l = &mut self.levels[k];
            l.op.smooth(&mut l.x, &l.b, down, false, self.shape.omega);
            l.op.residual(&l.x, &l.b, &mut l.r);
        }
        let (fine, coarse) = self.levels.split_at_mut(k + 1);
        let (fine, coarse) = (&mut fine[k], &mut coarse[0]);
        restrict(&fine.op, &fine.r, &coarse.op, &mut coarse.b);
        coarse.x.fill(0.0);
        for _ in 0..self.shape.visits(k) {
            self.down_up(k + 1);
        }
        let (fine, coarse) = self.levels.split_at_mut(k + 1);
        let (fine, coarse) = (&mut fine[k], &coarse[0]);
        prolong_add(&coarse.op, &coarse.x, &fine.op, &mut fine.x);
        fine.op
            .smooth(&mut fine.x, &fine.b, up, true, self.shape.omega);
    }
}

/// Coarse right-hand side: half the sum of the fine residual over each
/// coarse cell.
pub(super) fn restrict(fine: &Operator, r: &[f32], coarse: &Operator, b: &mut [f32]) {
    let [nx, ny, _] = coarse.size;
    b.par_chunks_mut(nx * ny)
        .enumerate()
        .for_each(|(z, plane)| {
            for (i, out) in plane.iter_mut().enumerate() {
                let (x, y) = (i % nx, i / nx);
                let mut s = 0.0f32;
                for dz in 0..2 {
                    for dy in 0..2 {
                        for dx in 0..2 {
                            let p = [2 * x + dx, 2 * y + dy, 2 * z + dz];
                            if p.iter().zip(fine.size).all(|(&q, n)| q < n) {
                                s += r[p[0] + fine.size[0] * (p[1] + fine.size[1] * p[2])];
                            }
                        }
                    }
                }
                let c = z * nx * ny + i;
                *out = if coarse.active(c) { 0.5 * s } else { 0.0 };
            }
        });
}

/// The two coarse cells (index, weight) nearest to fine cell `i` along an
/// axis of `n` coarse cells with faces `faces`: the one holding it (3/4) and
/// the one on the side of its centre (1/4), wrapped on a periodic axis;
/// beyond another face the holder's mirror image: itself at a wall (zero
/// gradient), itself negated at a fixed-pressure face (zero on the face).
#[inline]
fn along(i: usize, n: usize, faces: [Face; 2]) -> [(usize, f32); 2] {
    let holder = i / 2;
    let beyond = |face: Face, wrapped: usize| match face {
        Face::Periodic => (wrapped, 0.25),
        Face::Wall => (holder, 0.25),
        Face::Fixed => (holder, -0.25),
    };
    let other = if i.is_multiple_of(2) {
        if holder == 0 {
            beyond(faces[0], n - 1)
        } else {
            (holder - 1, 0.25)
        }
    } else if holder + 1 == n {
        beyond(faces[1], 0)
    } else {
        (holder + 1, 0.25)
    };
    [(holder, 0.75), other]
}

/// The coarse cells fine cell `p` takes its correction from, with their
/// weights: trilinear (mirrored beyond faces, see [`along`]) where all
/// eight are active, else the coarse cell holding it; `len` of the 8
/// entries are used.
struct Stencil {
    entries: [(usize, f32); 8],
    len: usize,
}

impl Stencil {
    fn of(coarse: &Operator, faces: [[Face; 2]; 3], p: [usize; 3]) -> Stencil {
        let w = [0, 1, 2].map(|a| along(p[a], coarse.size[a], faces[a]));
        let mut s = Stencil {
            entries: [(0, 0.0); 8],
            len: 0,
        };
        for &(kz, az) in &w[2] {
            for &(ky, ay) in &w[1] {
                for &(kx, ax) in &w[0] {
                    let k = kx + coarse.size[0] * (ky + coarse.size[1] * kz);
                    if coarse.active(k) {
                        let weight = ax * ay * az;
                        s.entries[s.len] = (k, weight);
                        s.len += 1;
                    }
                }
            }
        }
        if s.len < 8 {
            // Next to a solid coarse cell: the holder's value alone (what
            // lies beyond an obstacle says little about this side of it).
            let holder = w[0][0].0 + coarse.size[0] * (w[1][0].0 + coarse.size[1] * w[2][0].0);
            s.entries[0] = (holder, 1.0);
            s.len = 1;
            return s;
        }
        s
    }

    fn entries(&self) -> &[(usize, f32)] {
        &self.entries[..self.len]
    }
}

/// x_fine += the coarse correction, trilinear from the fluid coarse cells.
pub(super) fn prolong_add(coarse: &Operator, e: &[f32], fine: &Operator, x: &mut [f32]) {
    let [nx, ny, _] = fine.size;
    x.par_chunks_mut(nx * ny)
        .enumerate()
        .for_each(|(z, plane)| {
            for (i, out) in plane.iter_mut().enumerate() {
                if fine.active(z * nx * ny + i) {
                    let p = [i % nx, i / nx, z];
                    for &(k, w) in Stencil::of(coarse, fine.faces, p).entries() {
                        *out += w * e[k];
                    }
                }
            }
        });
}

/// Most cells the coarsest grid is factorised for (a dense matrix).
const DENSE_CELLS: usize = 2048;

/// The coarsest grid's solver: its matrix over the active cells factorised
/// (Cholesky, double precision; a singular one with the constants added,
/// A + 1 1ᵀ/m, whose solution for a right-hand side of zero mean is A's of
/// zero mean), exact and linear; conjugate gradients where it is too big.
enum Coarsest {
    Dense { cells: Vec<usize>, lower: Vec<f64> },
    Iterative,
}

impl Coarsest {
    fn new(op: &Operator) -> Coarsest {
        let cells: Vec<usize> = (0..op.cells()).filter(|&c| op.active(c)).collect();
        let m = cells.len();
        if m > DENSE_CELLS {
            return Coarsest::Iterative;
        }
        let mut a = vec![0.0f64; m * m];
        let (mut e, mut column) = (vec![0.0f32; op.cells()], vec![0.0f32; op.cells()]);
        for (j, &cj) in cells.iter().enumerate() {
            e[cj] = 1.0;
            op.apply(&e, &mut column);
            e[cj] = 0.0;
            for (i, &ci) in cells.iter().enumerate() {
                a[i * m + j] = column[ci] as f64;
            }
        }
        if op.singular {
            for v in &mut a {
                *v += 1.0 / m as f64;
            }
        }
        // A = L Lᵀ, L in the lower triangle.
        for j in 0..m {
            let mut d = a[j * m + j];
            for k in 0..j {
                d -= a[j * m + k] * a[j * m + k];
            }
            if !(d > 0.0) {
                return Coarsest::Iterative;
            }
            let d = d.sqrt();
            a[j * m + j] = d;
            for i in j + 1..m {
                let mut v = a[i * m + j];
                for k in 0..j {
                    v -= a[i * m + k] * a[j * m + k];
                }
                a[i * m + j] = v / d;
            }
        }
        Coarsest::Dense { cells, lower: a }
    }

    fn solve(&self, op: &Operator, b: &[f32], x: &mut [f32], r: &mut [f32]) {
        let (cells, lower) = match self {
            Coarsest::Dense { cells, lower } => (cells, lower),
            Coarsest::Iterative => return solve_iteratively(op, b, x, r),
        };
        let m = cells.len();
        let mut y: Vec<f64> = cells.iter().map(|&c| b[c] as f64).collect();
        if op.singular {
            let mean = y.iter().sum::<f64>() / m.max(1) as f64;
            y.iter_mut().for_each(|v| *v -= mean);
        }
        for i in 0..m {
            let mut v = y[i];
            for k in 0..i {
                v -= lower[i * m + k] * y[k];
            }
            y[i] = v / lower[i * m + i];
        }
        for i in (0..m).rev() {
            let mut v = y[i];
            for k in i + 1..m {
                v -= lower[k * m + i] * y[k];
            }
            y[i] = v / lower[i * m + i];
        }
        x.fill(0.0);
        for (&c, v) in cells.iter().zip(y) {
            x[c] = v as f32;
        }
    }
}

/// The coarsest grid by conjugate gradients, far below the fine grid's
/// tolerance, so that the cycle stays nearly linear.
fn solve_iteratively(op: &Operator, b: &[f32], x: &mut [f32], r: &mut [f32]) {
    let mut rhs = b.to_vec();
    if op.singular {
        op.remove_mean(&mut rhs);
    }
    x.fill(0.0);
    r.copy_from_slice(&rhs);
    let norm_b = dot(&rhs, &rhs);
    if norm_b == 0.0 {
        return;
    }
    let mut p = r.to_vec();
    let mut q = vec![0.0f32; r.len()];
    let mut rr = norm_b;
    for _ in 0..4 * op.cells() {
        op.apply(&p, &mut q);
        let pq = dot(&p, &q);
        if pq <= 0.0 {
            break;
        }
        let alpha = (rr / pq) as f32;
        axpy(alpha, &p, x);
        axpy(-alpha, &q, r);
        let rr_new = dot(r, r);
        if rr_new <= 1e-14 * norm_b {
            break;
        }
        let beta = (rr_new / rr) as f32;
        p.par_iter_mut()
            .zip(r.par_iter())
            .for_each(|(p, &r)| *p = r + beta * *p);
        rr = rr_new;
    }
}

/// Jacobi sweeps between two checks of the residual.
pub(super) const JACOBI_CHECK: usize = 20;
/// The Jacobi baseline's damping: undamped, the odd–even mode of a box with
/// walls all round (every cell's diagonal alike) flips sign each sweep and
/// never decays.
pub(super) const JACOBI_OMEGA: f32 = 0.9;

/// How a solve went.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Solve {
    /// CG iterations (each one V-cycle), or Jacobi sweeps.
    pub iterations: usize,
    /// ‖b − A x‖ / ‖b‖ at the end.
    pub residual: f64,
}

/// A solve ends at a true residual within this factor of the floor learned
/// from the last one that ran into it.
const NEAR_FLOOR: f64 = 2.0;
/// Each solve that ends near the learned floor lowers it by this factor, so
/// that a floor that has fallen (the flow changed) is found again: every
/// fourteenth solve or so tries for the tolerance and, stalling, learns
/// anew.
const FORGET: f64 = 0.95;

/// Where conjugate gradients stops short of its tolerance: at the rounding
/// floor of f32, where the residual stops falling and going on would only
/// let the directions lose their conjugacy.
///
/// A solve that finds the floor (two true residuals above the tolerance in
/// a row, the second not clearly below the first) spends an iteration to
/// learn that it gains nothing (the 128³ cavity at Re 100: 1.13e-6 after one
/// V-cycle, 1.08e-6 after two). So the floor it found is kept, per unit of
/// ‖x‖ / ‖b‖ (as f32's rounding of x scales), and the next solves end at a
/// true residual within [`NEAR_FLOOR`] of it. Neither the floor nor the
/// point where it shows can be foreseen from the problem alone: a smooth
/// pressure reaches thirty times below the f32 rounding of a flow's.
pub(super) struct Floor {
    best: f64,
    stalled: usize,
    last_checked: Option<f64>,
}

/// How a solve ended, for the floor it leaves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum End {
    /// At the tolerance, at the iteration cap, or stalled between checks.
    Plain,
    /// At a true residual within [`NEAR_FLOOR`] of the learned floor.
    NearFloor,
    /// At the floor: a true residual above the tolerance with no clear
    /// gain.
    Floor,
}

impl Floor {
    /// From the residual CG starts with.
    pub(super) fn new(residual: f64) -> Floor {
        Floor {
            best: residual,
            stalled: 0,
            last_checked: None,
        }
    }

    /// The true residual a solve settles for: the tolerance, or near the
    /// floor `learned` (per unit ‖x‖ / ‖b‖) for an x with Σ x² = `xx`.
    pub(super) fn target(tolerance: f64, learned: Option<f64>, xx: f64, norm_b: f64) -> f64 {
        learned.map_or(tolerance, |f| {
            tolerance.max(NEAR_FLOOR * f * xx.sqrt() / norm_b)
        })
    }

    /// The floor learned from a solve that ended as `end` at the true
    /// `residual` with Σ x² = `xx`, from the one learned before.
    pub(super) fn learn(
        learned: Option<f64>,
        end: End,
        residual: f64,
        xx: f64,
        norm_b: f64,
    ) -> Option<f64> {
        match end {
            End::Plain => learned,
            End::NearFloor => learned.map(|f| f * FORGET),
            End::Floor if xx > 0.0 => Some(residual * norm_b / xx.sqrt()),
            End::Floor => learned,
        }
    }

    /// Whether to stop after an iteration that left `residual` (`checked`:
    /// the true residual, computed because the recurrence's reached the
    /// target, and the [`Floor::target`] it had): a true residual at its
    /// target above the tolerance; two true residuals above the tolerance
    /// in a row, the second not clearly below the first; or no clear gain
    /// for [`STALLED`] iterations, or for one within ten times the
    /// tolerance (far from it, a pause may be a bump on the way down).
    pub(super) fn reached(
        &mut self,
        residual: f64,
        checked: Option<f64>,
        tolerance: f64,
    ) -> Option<End> {
        if let Some(target) = checked {
            if residual > tolerance && residual <= target {
                return Some(End::NearFloor);
            }
            if residual > tolerance {
                if self
                    .last_checked
                    .is_some_and(|before| residual >= 0.7 * before)
                {
                    return Some(End::Floor);
                }
                self.last_checked = Some(residual);
            }
        }
        if residual < 0.7 * self.best {
            self.best = residual;
            self.stalled = 0;
            return None;
        }
        self.stalled += 1;
        let at_floor = checked.is_some() && residual > tolerance;
        (self.stalled == STALLED || residual < 10.0 * tolerance).then_some(if at_floor {
            End::Floor
        } else {
            End::Plain
        })
    }
}

/// Conjugate gradients preconditioned by a multigrid V-cycle, or plain
/// Jacobi iteration ([`Pcg::jacobi`]).
pub struct Pcg {
    pub mg: Multigrid,
    /// Solve by Jacobi sweeps instead (the urban-flow seed's solver, kept as
    /// the baseline), up to `max_sweeps`.
    pub jacobi: bool,
    pub max_sweeps: usize,
    /// Stop at this relative residual ‖b − A x‖ / ‖b‖.
    pub tolerance: f64,
    pub max_iterations: usize,
    /// The f32 floor the last solve that ran into it found, per unit
    /// ‖x‖ / ‖b‖ ([`Floor`]).
    pub floor: Option<f64>,
    /// Each iteration of a nonsingular solve leaves the true residual
    /// b − A x in r, not CG's recurrence r − α A p (whose norm still decides
    /// when to look at the true one): what the GPU's update does in the pass
    /// that updates x, instead of a pass of its own for the check (on by
    /// default; `FLOWSCOPE_FUSED_CHECK=0`). On the H200 the city block's
    /// sub-step takes 1.12–1.13 ms against 1.17–1.18, in a 256³ grid
    /// 3.77–3.79 against 3.90–3.94 (thirty-seventh session).
    pub fused_check: bool,
    /// How many times a solve may restart CG from its x where it stalls
    /// far above the tolerance (3 by default; `FLOWSCOPE_CG_RESTARTS=N`,
    /// 0 turns it off). Flexible CG with the multigrid cycle
    /// (unequal sweeps down and up) can lose its directions: the
    /// seed's city block with a release, scaled to 300 000 cells, stalled
    /// at relative residuals of 5e-2 and 4e-2 in its fourth and seventh
    /// steps from rest (CPU, ω = 1 alike); three restarts took every one
    /// of its first 20 solves below 1e-5, in 159 iterations against 205
    /// (thirty-seventh session). On the H200 `check-cuda --projection-only`
    /// passes with it and the timings do not move (thirty-eighth session).
    pub restarts: usize,
    r: Vec<f32>,
    z: Vec<f32>,
    z_old: Vec<f32>,
    p: Vec<f32>,
    q: Vec<f32>,
}

impl Pcg {
    /// Takes `old`'s settings (not what its solves learned): for the same
    /// operator, rebuilt.
    pub fn keep_settings(&mut self, old: &Pcg) {
        self.mg.set_shape(old.mg.shape());
        self.jacobi = old.jacobi;
        self.max_sweeps = old.max_sweeps;
        self.tolerance = old.tolerance;
        self.max_iterations = old.max_iterations;
        self.fused_check = old.fused_check;
        self.restarts = old.restarts;
    }

    pub fn new(op: Operator, tolerance: f64) -> Pcg {
        let n = op.cells();
        Pcg {
            mg: Multigrid::new(op),
            jacobi: false,
            max_sweeps: 200_000,
            tolerance,
            max_iterations: 200,
            floor: None,
            fused_check: true,
            restarts: 3,
            r: vec![0.0; n],
            z: vec![0.0; n],
            z_old: vec![0.0; n],
            p: vec![0.0; n],
            q: vec![0.0; n],
        }
    }

    /// Jacobi sweeps from `x` until the relative residual reaches the
    /// tolerance (checked every [`JACOBI_CHECK`] sweeps) or `max_sweeps`;
    /// `iterations` counts the sweeps.
    fn solve_jacobi(&mut self, b: &[f32], x: &mut [f32], norm_b: f64) -> Solve {
        let op = self.mg.operator();
        let mut sweeps = 0;
        let mut residual = dot(&self.r, &self.r).sqrt() / norm_b;
        while residual > self.tolerance && sweeps < self.max_sweeps {
            for _ in 0..JACOBI_CHECK {
                op.jacobi(x, b, JACOBI_OMEGA, &mut self.z);
                x.copy_from_slice(&self.z);
            }
            sweeps += JACOBI_CHECK;
            if op.singular {
                op.remove_mean(x);
            }
            op.residual(x, b, &mut self.r);
            residual = dot(&self.r, &self.r).sqrt() / norm_b;
        }
        Solve {
            iterations: sweeps,
            residual,
        }
    }

    /// Solves A x = b from the `x` given. For a singular operator the part
    /// of b in its null space (b's mean over the fluid) is left out: the
    /// equation has no solution with it.
    pub fn solve(&mut self, b: &[f32], x: &mut [f32]) -> Solve {
        let op = self.mg.operator();
        let singular = op.singular;
        let compatible;
        let b = if singular {
            let mut v = b.to_vec();
            op.remove_mean(&mut v);
            compatible = v;
            &compatible[..]
        } else {
            b
        };
        op.clear_inactive(x);
        op.residual(x, b, &mut self.r);
        let norm_b = dot(b, b).sqrt();
        if norm_b == 0.0 {
            x.fill(0.0);
            return Solve {
                iterations: 0,
                residual: 0.0,
            };
        }
        if self.jacobi {
            return self.solve_jacobi(b, x, norm_b);
        }
        let mut residual = dot(&self.r, &self.r).sqrt() / norm_b;
        let mut xx = dot(x, x);
        let check_at = Floor::target(self.tolerance, self.floor, xx, norm_b);
        let mut iterations = 0;
        let mut rz = 0.0;
        let mut floor = Floor::new(residual);
        // Iterations since CG (re)started, and restarts taken.
        let (mut since, mut restarts) = (0, 0);
        while residual > self.tolerance && iterations < self.max_iterations {
            self.mg.cycle(&self.r, &mut self.z);
            if singular {
                self.mg.operator().remove_mean(&mut self.z);
            }
            let rz_new = dot(&self.r, &self.z);
            if since == 0 {
                self.p.copy_from_slice(&self.z);
            } else {
                // Flexible (Polak–Ribière) β: r·(z − z_old) instead of r·z,
                // robust to a preconditioner that is not exactly symmetric.
                let beta = ((rz_new - dot(&self.r, &self.z_old)) / rz) as f32;
                self.p
                    .par_iter_mut()
                    .zip(self.z.par_iter())
                    .for_each(|(p, &z)| *p = z + beta * *p);
            }
            rz = rz_new;
            std::mem::swap(&mut self.z, &mut self.z_old);
            let op = self.mg.operator();
            op.apply(&self.p, &mut self.q);
            let pq = dot(&self.p, &self.q);
            if !(pq > 0.0) {
                break;
            }
            let alpha = (rz / pq) as f32;
            axpy(alpha, &self.p, x);
            let fused = self.fused_check && !singular;
            let estimate = if fused {
                // The recurrence's norm alone; r becomes the true residual.
                let recurrence: f64 = (self.r.par_iter().zip(self.q.par_iter()))
                    .map(|(&r, &q)| {
                        let v = r + -alpha * q;
                        v as f64 * v as f64
                    })
                    .sum();
                op.residual(x, b, &mut self.r);
                recurrence.sqrt() / norm_b
            } else {
                axpy(-alpha, &self.q, &mut self.r);
                if singular {
                    // Rounding leaves r a mean that A x can never cancel.
                    op.remove_mean(&mut self.r);
                }
                dot(&self.r, &self.r).sqrt() / norm_b
            };
            iterations += 1;
            since += 1;
            // The recurrence drifts from the true residual in f32: check
            // the true one before stopping.
            let mut checked = None;
            residual = estimate;
            if estimate <= check_at {
                if !fused {
                    op.residual(x, b, &mut self.r);
                }
                xx = dot(x, x);
                checked = Some(Floor::target(self.tolerance, self.floor, xx, norm_b));
                residual = dot(&self.r, &self.r).sqrt() / norm_b;
            }
            if let Some(end) = floor.reached(residual, checked, self.tolerance) {
                let allowed = if singular { 0 } else { self.restarts };
                if restart(end, residual, self.tolerance, &mut restarts, allowed) {
                    // From the true residual of x.
                    if !fused {
                        op.residual(x, b, &mut self.r);
                        residual = dot(&self.r, &self.r).sqrt() / norm_b;
                    }
                    (since, floor) = (0, Floor::new(residual));
                    continue;
                }
                self.floor = Floor::learn(self.floor, end, residual, xx, norm_b);
                break;
            }
        }
        Solve {
            iterations,
            residual,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::poisson::coords;
    use super::*;

    /// A smooth pressure field and b = A p for it on the operator's grid.
    fn known(op: &Operator) -> (Vec<f32>, Vec<f32>) {
        let [nx, ny, nz] = op.size.map(|n| n as f32);
        let pi = std::f32::consts::PI;
        let mut p: Vec<f32> = (0..op.cells())
            .map(|c| {
                let [x, y, z] = coords(op.size, c).map(|v| v as f32 + 0.5);
                (pi * x / nx).cos() * (2.0 * pi * y / ny).cos() * (pi * z / nz).sin()
                    + 0.3 * (3.0 * pi * x / nx).sin() * (pi * z / nz).cos()
            })
            .collect();
        op.clear_inactive(&mut p);
        let mut b = vec![0.0; op.cells()];
        op.apply(&p, &mut b);
        (p, b)
    }

    /// Cells of a 128³ box with a block and a row of pillars solid.
    fn obstacles(n: usize) -> Vec<bool> {
        (0..n * n * n)
            .map(|c| {
                let [x, y, z] = coords([n; 3], c);
                let block = (40..72).contains(&x) && (30..90).contains(&y) && z < 80;
                let pillar = (x % 16 < 3) && (y % 16 < 3) && x > 80;
                !(block || pillar)
            })
            .collect()
    }

    /// The residual's reduction per cycle, as a stationary iteration from
    /// zero, over `cycles` cycles (geometric mean), and the last residual.
    fn cycle_rate(op: Operator, cycles: usize) -> (f64, f64) {
        let (_, b) = known(&op);
        let n = op.cells();
        let mut mg = Multigrid::new(op);
        let (mut x, mut r, mut z) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        let norm_b = dot(&b, &b).sqrt();
        for _ in 0..cycles {
            mg.operator().residual(&x, &b, &mut r);
            mg.cycle(&r, &mut z);
            axpy(1.0, &z, &mut x);
        }
        mg.operator().residual(&x, &b, &mut r);
        let end = dot(&r, &r).sqrt() / norm_b;
        (end.powf(1.0 / cycles as f64), end)
    }

    #[test]
    fn a_cycle_cuts_the_residual_tenfold_on_a_128_cube_with_and_without_obstacles() {
        // Issue 20 asks for tenfold with and without obstacles. The plain
        // cycle gives 0.095 / 0.077 without them; around them it gave 0.091
        // with an outlet but 0.190 with walls all round, hence the stronger
        // cycle there (0.098 / 0.045; see `Cycle`). What follows was tried
        // on the plain cycle around obstacles (the rates up to the twenty-
        // first session's with three sweeps each way on the finest grid,
        // where they were 0.085 and 0.185).
        // Cycle by cycle both slow to about 0.29 from the fifth on (0.09
        // without obstacles), with 73% of r² left within a cell of a wall
        // or an obstacle (17% of the cells) after 7; a W-cycle gives 0.102, with 4
        // sweeps 0.085; 2 more Gauss–Seidel sweeps on the cells beside
        // solids at every level 0.153, at the finest alone 0.175 (issue 20,
        // 2026-11-26). With walls all round the block alone gives 0.156 and
        // the pillars alone 0.215; six sweeps on every coarser grid 0.140;
        // prolonging next to solid coarse cells by the trilinear weights of
        // the fluid ones, renormalized, changes nothing to three digits: the
        // coarse grids' correction, not the smoother, falls short there. Of
        // it, the 64³ grid's own V-cycle: with the 64³ problem solved (20
        // V-cycles of its own) the two-grid cycle gives 0.091, with two of
        // them 0.106, where solving the 32³ or 16³ one instead gives 0.171
        // and 0.177. Coarse couplings summed over each coarse face's rows in
        // series with half the couplings inside the two coarse cells (their
        // blockage felt) give 0.212, or 0.182 where only fractional inner
        // couplings count (2026-11-26, twentieth session). With one and
        // three sweeps on the finest grid, the 64³ grid's correction taken
        // twice (a second cycle from there down on its residual) gives
        // 0.084 / 0.073 / 0.110 / 0.075 for the four cases below, three
        // times 0.100; four and four or three and five sweeps on the 64³
        // grid alone 0.174 and 0.167; with two and four sweeps on the
        // finest grid and the 64³ correction twice all four reach tenfold:
        // 0.056 / 0.036 / 0.098 / 0.045 (CPU, 2026-11-27). On the GPU these
        // shapes cut the cycles a solve but not its time (the city block in
        // a 256³ grid 6.94 → 7.40 ms a sub-step; BENCHMARKS.md, twenty-
        // second session; 6.00 → 6.36 in the thirty-first), which is the
        // price of the stronger cycle, taken only around obstacles.
        // The pillars are what is slow: alone 0.191 (the block alone 0.097),
        // and the V-cycle of their 64³ coarse operator on its own 0.178,
        // of the 32³ one 0.098: the loss is where the three-cell pillars
        // dissolve into fractional couplings. Prolonging piecewise constant
        // wherever one of the eight coarse cells has a fractional coupling
        // gives 0.155 (from the holder only where it has one, 0.214);
        // coarse couplings as the open fraction to the power 1.5 or 0.7
        // give 0.228 and 0.211; coarse operators scaled by 0.9 (an
        // over-correction at every level) lose the plain case (0.289); the
        // 64³ level solved (30 V-cycles of its own) gives 0.100, the 32³
        // level solved under the 64³ operator 0.163: the 64³ → 32³
        // correction is what falls short. Any pillars thin at some level do
        // it: pillars four cells wide, aligned with the coarse cells (one
        // solid cell at 32³), give 0.136 at 128³ and 0.172 for the 32³
        // operator alone; two wide 0.140, one wide 0.125; prolongation
        // weights scaled by the coupling across each coarse face (as
        // operator-dependent interpolation does) change nothing (0.191;
        // CPU, twenty-fourth session). The coarse correction scaled by its
        // energy-minimizing step (r·e / e·Ae, one more operator application
        // a level; the steps came out 0.88–1.15) gives 0.148 taken on the
        // finest grid alone. Galerkin coarse operators (Pᵀ A P, the
        // trilinear P renormalized over the active coarse cells instead of
        // the holder's fallback, restriction Pᵀ) reach tenfold in every case
        // (0.053 / 0.060 / 0.031 for walls / obstacles and walls / obstacles
        // and outlet, against 0.069 / 0.167 / 0.077 for these operators in
        // the same lexicographic Gauss–Seidel cycle), but with 81 couplings
        // a coarse cell (125 further down); from the 64³ grid down only
        // 0.135; only within a coarse cell or two of a solid (the seven-
        // point operator elsewhere, scaled to match) 0.117 / 0.169 / 0.101
        // at 64³; lumped to seven points they diverge (second moments kept:
        // 0.28) (CPU, twenty-sixth session).
        let n = 128;
        let cases = [
            ("walls", vec![true; n * n * n], [[Face::Wall; 2]; 3], false),
            (
                "outlet, periodic y",
                vec![true; n * n * n],
                [
                    [Face::Wall, Face::Fixed],
                    [Face::Periodic; 2],
                    [Face::Wall; 2],
                ],
                false,
            ),
            ("obstacles, walls", obstacles(n), [[Face::Wall; 2]; 3], true),
            (
                "obstacles, outlet",
                obstacles(n),
                [[Face::Wall, Face::Fixed], [Face::Wall; 2], [Face::Wall; 2]],
                true,
            ),
        ];
        let plain = Cycle::for_grid(&Operator::new([8; 3], &[true; 512], [[Face::Wall; 2]; 3]));
        for (name, fluid, faces, around_obstacles) in cases {
            let op = Operator::new([n; 3], &fluid, faces);
            assert_eq!(
                Cycle::for_grid(&op) != plain,
                around_obstacles,
                "{name}: the stronger cycle where there are obstacles"
            );
            let (rate, end) = cycle_rate(op, 4);
            assert!(
                rate <= 0.1,
                "{name}: {rate:.3} per cycle (residual {end:.2e})"
            );
        }
    }

    #[test]
    fn the_fused_check_leaves_the_true_residual_and_solves_as_the_recurrence_does() {
        let n = 48;
        let fluid: Vec<bool> = (0..n * n * n)
            .map(|c| {
                let [x, y, z] = coords([n; 3], c);
                !((14..26).contains(&x) && (8..38).contains(&y) && z < 30)
            })
            .collect();
        let faces = [[Face::Wall, Face::Fixed], [Face::Wall; 2], [Face::Wall; 2]];
        let op = Operator::new([n; 3], &fluid, faces);
        let (_, b) = known(&op);
        let mut solved = Vec::new();
        for fused in [false, true] {
            let mut pcg = Pcg::new(op.clone(), 1e-5);
            pcg.fused_check = fused;
            let mut x = vec![0.0; n * n * n];
            let solve = pcg.solve(&b, &mut x);
            assert!(solve.residual <= 1e-5, "fused {fused}: {solve:?}");
            if fused {
                // r is b − A x to the bit, not the recurrence's.
                let mut r = vec![0.0; n * n * n];
                op.residual(&x, &b, &mut r);
                let differ = r
                    .iter()
                    .zip(&pcg.r)
                    .filter(|(a, b)| a.to_bits() != b.to_bits());
                assert_eq!(differ.count(), 0);
            }
            solved.push((solve.iterations, x));
        }
        let (plain, fused) = (&solved[0], &solved[1]);
        assert!(
            plain.0.abs_diff(fused.0) <= 1,
            "{} against {}",
            plain.0,
            fused.0
        );
        let most = plain.1.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let apart = (plain.1.iter().zip(&fused.1)).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(apart <= 1e-4 * most, "{apart} of {most}");
    }

    #[test]
    fn cg_with_multigrid_solves_to_the_tolerance_and_starts_from_the_last_solution() {
        let n = 64;
        let fluid: Vec<bool> = (0..n * n * n)
            .map(|c| {
                let [x, y, z] = coords([n; 3], c);
                !((20..36).contains(&x) && (10..50).contains(&y) && z < 40)
            })
            .collect();
        for faces in [
            [[Face::Wall; 2]; 3],
            [
                [Face::Wall, Face::Fixed],
                [Face::Periodic; 2],
                [Face::Wall; 2],
            ],
        ] {
            let op = Operator::new([n; 3], &fluid, faces);
            let (exact, b) = known(&op);
            let singular = op.singular;
            // This right-hand side is smooth: f32 pressures reach about
            // 5e-6 of it, where CG stops.
            let mut pcg = Pcg::new(op, 1e-5);
            let mut x = vec![0.0; n * n * n];
            let first = pcg.solve(&b, &mut x);
            assert!(first.residual <= 1e-5, "{first:?}");
            assert!(first.iterations <= 6, "{first:?}");
            // The solution itself (up to a constant without a fixed face).
            let op = pcg.mg.operator();
            let mut error: Vec<f32> = x.iter().zip(&exact).map(|(a, b)| a - b).collect();
            if singular {
                op.remove_mean(&mut error);
            }
            op.clear_inactive(&mut error);
            let worst = error.iter().fold(0.0f32, |m, e| m.max(e.abs()));
            assert!(worst < 1e-3, "{faces:?}: {worst}");
            // Warm: nothing left to do.
            let again = pcg.solve(&b, &mut x);
            assert_eq!(again.iterations, 0, "{again:?}");
            // Below the rounding floor: it stops when the residual stops
            // falling, no worse than it got.
            pcg.tolerance = 1e-10;
            let deep = pcg.solve(&b, &mut x);
            assert!(deep.iterations < 20 && deep.residual < 1e-5, "{deep:?}");
        }
    }

    #[test]
    fn a_shape_given_by_hand_is_taken_and_counts_of_zero_are_refused() {
        let three = [3, 3];
        assert!(Cycle::new([0, 2], 1, 1.0, three).is_none());
        assert!(Cycle::new([1, 2], 0, 1.0, three).is_none());
        assert!(Cycle::new([1, 2], 1, 1.0, [0, 3]).is_none());
        assert!(Cycle::new([1, 2], 1, 0.0, three).is_none());
        assert!(Cycle::new([1, 2], 1, 2.0, three).is_none());
        let n = 32;
        let op = Operator::new([n; 3], &vec![true; n * n * n], [[Face::Wall; 2]; 3]);
        let (_, b) = known(&op);
        let mut pcg = Pcg::new(op, 1e-5);
        let shape = Cycle::new([1, 2], 1, 1.2, [2, 3]).expect("counts of 1 or more, 0 < ω < 2");
        assert_ne!(pcg.mg.shape(), shape);
        pcg.mg.set_shape(shape);
        assert_eq!(pcg.mg.shape(), shape);
        let mut x = vec![0.0; n * n * n];
        let solve = pcg.solve(&b, &mut x);
        assert!(solve.residual <= 1e-5 && solve.iterations <= 8, "{solve:?}");
    }

    #[test]
    fn a_floor_found_by_two_true_residuals_ends_the_next_solves_near_it() {
        let tolerance = 1e-6;
        // Two true residuals above the tolerance, the second no clear gain:
        // the floor, kept per unit ‖x‖ / ‖b‖.
        let mut floor = Floor::new(2e-5);
        assert_eq!(floor.reached(1.13e-6, Some(tolerance), tolerance), None);
        let end = floor.reached(1.08e-6, Some(tolerance), tolerance);
        assert_eq!(end, Some(End::Floor));
        let learned = Floor::learn(None, End::Floor, 1.08e-6, 4.0e6, 2.0);
        assert!((learned.unwrap() - 1.08e-9).abs() < 1e-15, "{learned:?}");
        // The next solve's target: twice as high, as x scales.
        let target = Floor::target(tolerance, learned, 4.0e6, 2.0);
        assert!((target - 2.16e-6).abs() < 1e-12, "{target}");
        assert_eq!(Floor::target(tolerance, learned, 1.0, 2.0), tolerance);
        let mut floor = Floor::new(2e-5);
        assert_eq!(
            floor.reached(1.2e-6, Some(target), tolerance),
            Some(End::NearFloor)
        );
        // Each solve that ends there lowers it, until one stalls anew.
        let lower = Floor::learn(learned, End::NearFloor, 1.2e-6, 4.0e6, 2.0);
        assert!(lower.unwrap() < learned.unwrap());
        // A residual above the target, or a recurrence's not checked, goes on.
        let mut floor = Floor::new(2e-5);
        assert_eq!(floor.reached(2.5e-6, Some(target), tolerance), None);
        assert_eq!(floor.reached(1.2e-6, None, tolerance), None);
        // The tolerance reached is no floor: nothing learned.
        let mut floor = Floor::new(2e-5);
        let end = floor.reached(0.9e-6, Some(target), tolerance);
        assert_eq!(
            Floor::learn(learned, end.unwrap_or(End::Plain), 0.9e-6, 4.0e6, 2.0),
            learned
        );
    }

    #[test]
    fn jacobi_reaches_the_same_solution_in_a_hundred_times_the_iterations() {
        // The seed's solver, kept as the baseline: the same answer, far more
        // work.
        let n = 16;
        let fluid: Vec<bool> = (0..n * n * n)
            .map(|c| {
                let [x, y, z] = coords([n; 3], c);
                !((5..9).contains(&x) && (3..12).contains(&y) && z < 10)
            })
            .collect();
        let faces = [
            [Face::Wall, Face::Fixed],
            [Face::Periodic; 2],
            [Face::Wall; 2],
        ];
        let op = Operator::new([n; 3], &fluid, faces);
        let (exact, b) = known(&op);
        let mut multigrid = Pcg::new(op.clone(), 1e-5);
        let mut jacobi = Pcg::new(op, 1e-5);
        jacobi.jacobi = true;
        let (mut x, mut y) = (vec![0.0; n * n * n], vec![0.0; n * n * n]);
        let (m, j) = (multigrid.solve(&b, &mut x), jacobi.solve(&b, &mut y));
        assert!(j.residual <= 1e-5 && m.residual <= 1e-5, "{m:?} {j:?}");
        assert!(j.iterations > 100 * m.iterations, "{m:?} {j:?}");
        let worst = |v: &[f32]| {
            v.iter()
                .zip(&exact)
                .fold(0.0f32, |w, (a, e)| w.max((a - e).abs()))
        };
        assert!(
            worst(&x) < 1e-3 && worst(&y) < 1e-3,
            "{} {}",
            worst(&x),
            worst(&y)
        );
    }

    #[test]
    fn coarse_cells_are_fluid_where_any_fine_cell_is() {
        let size = [6, 5, 4];
        let mut fluid = vec![false; 120];
        fluid[5 + 6 * (4 + 5 * 3)] = true;
        let op = Operator::new(size, &fluid, [[Face::Fixed; 2]; 3]);
        let coarse = op.coarse();
        assert_eq!(coarse.size, [3, 3, 2]);
        let active: Vec<usize> = (0..18).filter(|&c| coarse.active(c)).collect();
        assert_eq!(active, vec![2 + 3 * (2 + 3)]);
    }

    #[test]
    fn trilinear_weights_along_an_axis() {
        let walls = [Face::Wall; 2];
        assert_eq!(along(4, 4, walls), [(2, 0.75), (1, 0.25)]);
        assert_eq!(along(5, 4, walls), [(2, 0.75), (3, 0.25)]);
        assert_eq!(along(0, 4, walls)[1], (0, 0.25));
        assert_eq!(along(7, 4, [Face::Wall, Face::Fixed])[1], (3, -0.25));
        let periodic = [Face::Periodic; 2];
        assert_eq!(along(0, 4, periodic)[1], (3, 0.25));
        assert_eq!(along(7, 4, periodic)[1], (0, 0.25));
    }
}
