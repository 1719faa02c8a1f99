//! The pressure Poisson equation of the projection method on one grid: the
//! seven-point operator over the fluid cells (cell-centred, unit spacing),
//! with walls and obstacles as zero-gradient (Neumann) faces, wrapping
//! (periodic) axes and fixed-pressure (Dirichlet, p = 0) faces; its
//! red-black Gauss–Seidel smoother; and the vector operations conjugate
//! gradients needs. [`super::multigrid`] builds the coarser grids from it.
//!
//! The operator is the negative Laplacian times h², symmetric and positive
//! (semi-)definite: (A p)_c = Σ (p_c − p_n) over the fluid neighbours n, plus
//! 2 p_c for each fixed-pressure face of the cell (the ghost value −p_c puts
//! p = 0 on the face). Without a fixed-pressure face the constants are its
//! null space ([`Operator::singular`]).

use rayon::prelude::*;

/// What lies beyond a face of the domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Face {
    /// A wall: no flow through it, zero pressure gradient.
    Wall,
    /// The axis wraps around to the opposite face.
    Periodic,
    /// The pressure is fixed at zero on the face (an outlet).
    Fixed,
}

/// Directions of the six neighbours: −x, +x, −y, +y, −z, +z.
const DIRECTIONS: usize = 6;

/// The operator of one grid.
#[derive(Clone, Debug)]
pub struct Operator {
    pub size: [usize; 3],
    /// Per axis, the faces at its low and high end.
    pub faces: [[Face; 2]; 3],
    /// Per cell: bit d set where the neighbour in direction d is a fluid
    /// cell it is coupled to.
    pub(super) links: Vec<u8>,
    /// Per cell and direction: the coupling's weight; empty: 1 for every
    /// link (the finest grid). A coarse grid's weights count the fine links
    /// across each face ([`Operator::coarse`]).
    pub(super) weights: Vec<[f32; DIRECTIONS]>,
    /// Per cell: the sum of its couplings plus 2 per fixed-pressure face; 0
    /// for solid cells (and for a fluid cell with nothing to couple to).
    pub(super) diag: Vec<f32>,
    /// No fixed-pressure face: A has the constants in its null space, and
    /// A p = b has a solution only where b sums to zero.
    pub singular: bool,
}

impl Operator {
    /// The operator over the cells where `fluid` holds.
    pub fn new(size: [usize; 3], fluid: &[bool], faces: [[Face; 2]; 3]) -> Operator {
        Operator::with_fixed_cells(size, fluid, &vec![false; fluid.len()], faces)
    }

    /// [`Operator::new`] with the pressure fixed at zero in the cells where
    /// `fixed` holds (outlets): a fluid cell next to one adds 1 to its
    /// diagonal instead of a coupling.
    pub fn with_fixed_cells(
        size: [usize; 3],
        fluid: &[bool],
        fixed: &[bool],
        faces: [[Face; 2]; 3],
    ) -> Operator {
        let n = size[0] * size[1] * size[2];
        assert_eq!(fluid.len(), n, "one fluid flag per cell");
        for (a, f) in faces.iter().enumerate() {
            assert_eq!(
                f[0] == Face::Periodic,
                f[1] == Face::Periodic,
                "axis {a}: both faces periodic or neither"
            );
        }
        let mut links = vec![0u8; n];
        let mut diag = vec![0.0f32; n];
        let mut fixed_faces = false;
        for c in 0..n {
            if !fluid[c] {
                continue;
            }
            let p = coords(size, c);
            let mut bits = 0u8;
            let mut d = 0.0f32;
            for dir in 0..DIRECTIONS {
                let (axis, high) = (dir / 2, dir % 2);
                match neighbour(size, &faces, p, dir) {
                    Some(m) if fluid[m] && m != c => {
                        bits |= 1 << dir;
                        d += 1.0;
                    }
                    Some(m) if fixed[m] => {
                        d += 1.0;
                        fixed_faces = true;
                    }
                    Some(_) => {}
                    None if faces[axis][high] == Face::Fixed => {
                        d += 2.0;
                        fixed_faces = true;
                    }
                    None => {}
                }
            }
            links[c] = bits;
            diag[c] = d;
        }
        Operator {
            size,
            faces,
            links,
            weights: Vec::new(),
            diag,
            singular: !fixed_faces,
        }
    }

    /// The operator of the grid twice as coarse (each axis halved, rounding
    /// up): a coarse cell's coupling across a face is the fine couplings
    /// across it over 4 (a whole face of fluid: 1, as the fine grid's), its
    /// fixed-pressure part likewise; a coarse cell takes part where any of
    /// its fine cells does. Obstacles thinner than a coarse cell keep
    /// blocking what they block on the fine grid.
    pub fn coarse(&self) -> Operator {
        let size = self.size.map(|n| n.div_ceil(2));
        let n = size[0] * size[1] * size[2];
        let parent = |p: [usize; 3]| p[0] / 2 + size[0] * (p[1] / 2 + size[1] * (p[2] / 2));
        let mut weights = vec![[0.0f32; DIRECTIONS]; n];
        let mut fixed = vec![0.0f32; n];
        let mut any = vec![false; n];
        for c in 0..self.cells() {
            if !self.active(c) {
                continue;
            }
            let p = coords(self.size, c);
            let big = parent(p);
            any[big] = true;
            let mut coupled = 0.0;
            for dir in 0..DIRECTIONS {
                if self.links[c] & (1 << dir) == 0 {
                    continue;
                }
                let w = self.weight(c, dir);
                coupled += w;
                let m = neighbour(self.size, &self.faces, p, dir).expect("linked");
                if parent(coords(self.size, m)) != big {
                    weights[big][dir] += 0.25 * w;
                }
            }
            fixed[big] += 0.25 * (self.diag[c] - coupled);
        }
        let mut links = vec![0u8; n];
        let mut diag = vec![0.0f32; n];
        for big in 0..n {
            if !any[big] {
                weights[big] = [0.0; DIRECTIONS];
                continue;
            }
            for dir in 0..DIRECTIONS {
                if weights[big][dir] > 0.0 {
                    links[big] |= 1 << dir;
                }
            }
            diag[big] = weights[big].iter().sum::<f32>() + fixed[big];
        }
        Operator {
            size,
            faces: self.faces,
            links,
            weights,
            diag,
            singular: self.singular,
        }
    }

    /// The weight of cell `c`'s coupling in direction `dir` (where linked).
    #[inline]
    fn weight(&self, c: usize, dir: usize) -> f32 {
        if self.weights.is_empty() {
            1.0
        } else {
            self.weights[c][dir]
        }
    }

    pub fn cells(&self) -> usize {
        self.links.len()
    }

    /// Whether a cell off the grid's outer layer takes no part: obstacles,
    /// or walls thicker than a cell.
    pub fn has_obstacles(&self) -> bool {
        let [nx, ny, nz] = self.size;
        let inner = |v: usize, n: usize| v > 0 && v + 1 < n;
        (0..self.cells()).any(|c| {
            let [x, y, z] = coords(self.size, c);
            inner(x, nx) && inner(y, ny) && inner(z, nz) && !self.active(c)
        })
    }

    /// Whether cell `c` takes part (fluid with something to couple to).
    #[inline]
    pub fn active(&self, c: usize) -> bool {
        self.diag[c] > 0.0
    }

    #[inline]
    fn plane(&self) -> usize {
        self.size[0] * self.size[1]
    }

    /// Σ w x over the linked neighbours of cell `c` at `p`.
    #[inline]
    fn neighbour_sum(&self, x: &[f32], c: usize, p: [usize; 3]) -> f32 {
        let bits = self.links[c];
        let mut s = 0.0f32;
        for dir in 0..DIRECTIONS {
            if bits & (1 << dir) != 0 {
                let m = neighbour(self.size, &self.faces, p, dir).expect("linked");
                s += self.weight(c, dir) * x[m];
            }
        }
        s
    }

    /// (A x)_c as a sum of differences x_c − x_n: neighbouring values are
    /// close, so each difference is exact and the sum is accurate relative
    /// to itself, where diag·x_c − Σ x_n would lose all digits below the
    /// rounding of x_c (smooth fields: most of them).
    #[inline]
    fn differences(&self, x: &[f32], c: usize, p: [usize; 3]) -> f32 {
        let bits = self.links[c];
        let own = x[c];
        let (mut s, mut coupled) = (0.0f32, 0.0f32);
        for dir in 0..DIRECTIONS {
            if bits & (1 << dir) != 0 {
                let m = neighbour(self.size, &self.faces, p, dir).expect("linked");
                let w = self.weight(c, dir);
                s += w * (own - x[m]);
                coupled += w;
            }
        }
        s + (self.diag[c] - coupled) * own
    }

    /// out = A x (0 in cells that take no part).
    pub fn apply(&self, x: &[f32], out: &mut [f32]) {
        let plane = self.plane();
        out.par_chunks_mut(plane).enumerate().for_each(|(z, out)| {
            for (i, o) in out.iter_mut().enumerate() {
                let c = z * plane + i;
                *o = if self.active(c) {
                    let p = [i % self.size[0], i / self.size[0], z];
                    self.differences(x, c, p)
                } else {
                    0.0
                };
            }
        });
    }

    /// r = b − A x.
    pub fn residual(&self, x: &[f32], b: &[f32], r: &mut [f32]) {
        self.apply(x, r);
        r.par_iter_mut()
            .zip(b.par_iter())
            .for_each(|(r, b)| *r = b - *r);
        self.clear_inactive(r);
    }

    /// Zeroes the cells that take no part.
    pub fn clear_inactive(&self, v: &mut [f32]) {
        v.par_iter_mut().enumerate().for_each(|(c, v)| {
            if !self.active(c) {
                *v = 0.0
            }
        });
    }

    /// `sweeps` red-black Gauss–Seidel sweeps on A x = b: the cells with
    /// x + y + z even first (odd first when `reverse`: the adjoint of the
    /// forward sweep, which keeps a V-cycle symmetric), then the others,
    /// each from its neighbours' newest values, over-relaxed by `omega`
    /// (1: plain Gauss–Seidel).
    pub fn smooth(&self, x: &mut [f32], b: &[f32], sweeps: usize, reverse: bool, omega: f32) {
        self.smooth_stored(x, b, sweeps, reverse, omega, |v| v);
    }

    /// [`Operator::smooth`] with each new value passed through `store`
    /// (the GPU's 16-bit storage of the finest grid's preconditioner, in
    /// its tests).
    pub fn smooth_stored(
        &self,
        x: &mut [f32],
        b: &[f32],
        sweeps: usize,
        reverse: bool,
        omega: f32,
        store: impl Fn(f32) -> f32 + Sync,
    ) {
        let plane = self.plane();
        let nz = self.size[2];
        // Across a periodic z face of odd length the first and last planes
        // hold neighbours of one colour: the last goes after the others, so
        // that what it reads does not depend on the threads.
        let last_apart = nz > 1 && nz % 2 == 1 && self.faces[2][0] == Face::Periodic;
        for _ in 0..sweeps {
            for colour in [reverse as usize, !reverse as usize] {
                let shared = SharedMut(x.as_mut_ptr(), x.len());
                let sweep_plane = |z: usize| {
                    // SAFETY: the tasks write only cells of this colour in
                    // their own plane, and read only cells of the other
                    // colour (every neighbour of a cell has the other
                    // colour, also across a periodic face of even length;
                    // across an odd one along x or y the neighbour is in
                    // the same plane, and along z the last plane is swept
                    // alone) and their own cell.
                    let x = unsafe { shared.slice() };
                    for y in 0..self.size[1] {
                        let start = (colour + y + z) % 2;
                        for xi in (start..self.size[0]).step_by(2) {
                            let c = z * plane + y * self.size[0] + xi;
                            if self.active(c) {
                                let s = self.neighbour_sum(x, c, [xi, y, z]);
                                let gs = (b[c] + s) / self.diag[c];
                                x[c] = store(x[c] + omega * (gs - x[c]));
                            }
                        }
                    }
                };
                (0..nz - last_apart as usize)
                    .into_par_iter()
                    .for_each(sweep_plane);
                if last_apart {
                    sweep_plane(nz - 1);
                }
            }
        }
    }

    /// One Jacobi sweep, damped by `omega`: out = x + ω (b − A x) / diag in
    /// the cells that take part (0 elsewhere), every cell from the old values
    /// (order-free).
    pub fn jacobi(&self, x: &[f32], b: &[f32], omega: f32, out: &mut [f32]) {
        let plane = self.plane();
        out.par_chunks_mut(plane).enumerate().for_each(|(z, out)| {
            for (i, o) in out.iter_mut().enumerate() {
                let c = z * plane + i;
                *o = if self.active(c) {
                    let p = [i % self.size[0], i / self.size[0], z];
                    x[c] + omega * (b[c] - self.differences(x, c, p)) / self.diag[c]
                } else {
                    0.0
                };
            }
        });
    }

    /// Σ v over the cells that take part, and their count; in the same
    /// order whatever the threads (see [`dot`]).
    pub fn sum(&self, v: &[f32]) -> (f64, usize) {
        let parts: Vec<(f64, usize)> = v
            .par_chunks(REDUCTION_CHUNK)
            .enumerate()
            .map(|(k, part)| {
                let first = k * REDUCTION_CHUNK;
                part.iter()
                    .enumerate()
                    .filter(|&(i, _)| self.active(first + i))
                    .fold((0.0, 0), |(s, n), (_, &v)| (s + v as f64, n + 1))
            })
            .collect();
        parts
            .iter()
            .fold((0.0, 0), |(s, n), &(ps, pn)| (s + ps, n + pn))
    }

    /// Subtracts v's mean over the cells that take part (for a singular
    /// operator: the part of v in its null space).
    pub fn remove_mean(&self, v: &mut [f32]) {
        let (sum, count) = self.sum(v);
        if count > 0 {
            let mean = (sum / count as f64) as f32;
            v.par_iter_mut().enumerate().for_each(|(c, v)| {
                if self.active(c) {
                    *v -= mean
                }
            });
        }
    }
}

/// Raw access to a slice from parallel tasks that write disjoint cells.
#[derive(Clone, Copy)]
struct SharedMut(*mut f32, usize);
unsafe impl Send for SharedMut {}
unsafe impl Sync for SharedMut {}

impl SharedMut {
    /// # Safety
    /// No two tasks may write the same element, nor read one another writes.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self) -> &mut [f32] {
        std::slice::from_raw_parts_mut(self.0, self.1)
    }
}

#[inline]
pub(super) fn coords(size: [usize; 3], c: usize) -> [usize; 3] {
    [
        c % size[0],
        (c / size[0]) % size[1],
        c / (size[0] * size[1]),
    ]
}

/// The cell next to `p` in direction `dir` (−x, +x, −y, +y, −z, +z):
/// wrapping on a periodic axis, none beyond another face.
#[inline]
pub(super) fn neighbour(
    size: [usize; 3],
    faces: &[[Face; 2]; 3],
    p: [usize; 3],
    dir: usize,
) -> Option<usize> {
    let axis = dir / 2;
    let n = size[axis];
    let mut q = p;
    if dir.is_multiple_of(2) {
        if p[axis] == 0 {
            if faces[axis][0] != Face::Periodic {
                return None;
            }
            q[axis] = n - 1;
        } else {
            q[axis] -= 1;
        }
    } else if p[axis] + 1 == n {
        if faces[axis][1] != Face::Periodic {
            return None;
        }
        q[axis] = 0;
    } else {
        q[axis] += 1;
    }
    Some(q[0] + size[0] * (q[1] + size[1] * q[2]))
}

/// Cells per piece of a reduction: each piece is summed in order on one
/// thread, then the pieces in order, so that the sum does not depend on how
/// rayon shares the work (a resumed run repeats the uninterrupted one bit
/// for bit).
const REDUCTION_CHUNK: usize = 1 << 12;

/// Σ a·b in double precision, in the same order whatever the threads.
pub fn dot(a: &[f32], b: &[f32]) -> f64 {
    let parts: Vec<f64> = a
        .par_chunks(REDUCTION_CHUNK)
        .zip(b.par_chunks(REDUCTION_CHUNK))
        .map(|(a, b)| {
            a.iter()
                .zip(b)
                .fold(0.0, |s, (&a, &b)| s + a as f64 * b as f64)
        })
        .collect();
    parts.iter().sum()
}

/// y += k x.
pub fn axpy(k: f32, x: &[f32], y: &mut [f32]) {
    y.par_iter_mut()
        .zip(x.par_iter())
        .for_each(|(y, &x)| *y += k * x);
}

#[cfg(test)]
mod tests {
    use super::*;

    const WALLS: [[Face; 2]; 3] = [[Face::Wall; 2]; 3];

    #[test]
    fn the_operator_is_symmetric_and_sums_differences_over_fluid_neighbours() {
        let size = [5, 4, 3];
        let n = 60;
        let mut fluid = vec![true; n];
        fluid[1 + 5 * (2 + 4)] = false;
        let faces = [
            [Face::Periodic; 2],
            [Face::Wall, Face::Fixed],
            [Face::Wall; 2],
        ];
        let a = Operator::new(size, &fluid, faces);
        assert!(!a.singular);
        // Columns of A: A e_j for every j; A_ij == A_ji.
        let column = |j: usize| {
            let mut e = vec![0.0; n];
            e[j] = 1.0;
            let mut out = vec![0.0; n];
            a.apply(&e, &mut out);
            out
        };
        let columns: Vec<Vec<f32>> = (0..n).map(column).collect();
        for i in 0..n {
            for j in 0..n {
                assert_eq!(columns[j][i], columns[i][j], "{i} {j}");
            }
        }
        // A corner cell at x = 0, y = 3 (fixed face above), z = 0: neighbours
        // x = 4 (wrapped), x = 1, y = 2, z = 1, plus 2 for the fixed face.
        let c = 5 * 3;
        assert_eq!(columns[c][c], 6.0);
        assert_eq!(columns[c][4 + 5 * 3], -1.0);
        // The solid cell takes no part, and its neighbours see a wall there.
        let solid = 1 + 5 * (2 + 4);
        assert!(columns[solid].iter().all(|&v| v == 0.0));
        assert_eq!(columns[solid + 1][solid + 1], 5.0);
        // Walls everywhere: singular, constants in the null space.
        let walls = Operator::new(size, &vec![true; n], WALLS);
        assert!(walls.singular);
        let mut out = vec![1.0; n];
        walls.apply(&vec![3.5; n], &mut out);
        assert!(out.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn gauss_seidel_takes_out_the_rough_part_of_the_residual() {
        let size = [16, 16, 16];
        let n = 4096;
        let a = Operator::new(size, &vec![true; n], [[Face::Fixed; 2]; 3]);
        // A rough error (alternating signs) dies within a few sweeps.
        let mut x: Vec<f32> = (0..n)
            .map(|c| {
                let p = coords(size, c);
                if (p[0] + p[1] + p[2]).is_multiple_of(2) {
                    1.0
                } else {
                    -1.0
                }
            })
            .collect();
        let b = vec![0.0; n];
        let mut r = vec![0.0; n];
        let norm = |x: &[f32], r: &mut [f32]| {
            a.residual(x, &b, r);
            dot(r, r).sqrt()
        };
        let before = norm(&x, &mut r);
        a.smooth(&mut x, &b, 2, false, 1.0);
        let after = norm(&x, &mut r);
        assert!(after < 0.1 * before, "{before} → {after}");
    }

    #[test]
    fn obstacles_are_solid_cells_off_the_outer_layer() {
        let size = [6, 5, 4];
        let n = 120;
        // A cavity's walls: the outer layer solid.
        let shell: Vec<bool> = (0..n)
            .map(|c| {
                let p = coords(size, c);
                (0..3).all(|a| p[a] > 0 && p[a] + 1 < size[a])
            })
            .collect();
        assert!(!Operator::new(size, &shell, WALLS).has_obstacles());
        assert!(!Operator::new(size, &vec![true; n], WALLS).has_obstacles());
        let mut block = shell.clone();
        block[2 + 6 * (2 + 5 * 2)] = false;
        assert!(Operator::new(size, &block, WALLS).has_obstacles());
    }
}
