//! The transport of a passive scalar by a given velocity field: finite
//! volumes on the cell centres, the method-independent half of dispersion.
//!
//! Advection is the flux-limited Lax–Wendroff scheme (Sweby 1984) with a
//! third-order (QUICKEST) slope held inside Sweby's TVD region ([`limited`]):
//! third order where the field is smooth, first-order upwind at extrema and
//! jumps, so a plume neither smears over a few cells (the seed's warning
//! about numerical diffusion) nor over- or undershoots (c stays within [0,
//! the source's value]). The update is unsplit (every face's flux from the
//! same values, which is what a GPU kernel wants). Diffusion is the
//! explicit 7-point Laplacian with face diffusivities averaged from the
//! cells'. The sub-steps keep both together bounded ([`substeps`]), or,
//! where diffusion would ask for many more of them, each on its own
//! ([`Plan`]). Every face flux is a function of the face's two cells alone, so
//! what leaves one cell enters its neighbour exactly: the total is conserved
//! to rounding in a closed box.
//!
//! Faces to solid cells carry nothing (walls and obstacles are impermeable);
//! inlet cells hold the inflow concentration and feed the fluid through
//! their faces; beyond an outlet (a grid face without a neighbour) the
//! concentration has zero gradient, so what flows out leaves with the
//! cell's own value.

use crate::solver::flags::{CellType, TYPE_MASK};
use crate::solver::{Fields, Grid};

/// Largest sum of the Courant numbers |u_x| + |u_y| + |u_z| (Δt/Δx) of a
/// sub-step without diffusion: the unsplit update stays bounded up to it.
pub const CFL: f32 = 0.5;
/// Largest diffusion number 6 D Δt / Δx² of a sub-step (explicit stability
/// needs ≤ 1; kept below it so that diffusion alone never oscillates).
pub const DIFFUSION_NUMBER: f32 = 0.9;

/// What a cell is to the scalar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Updated by the fluxes through its faces (fluid, outlets).
    Open,
    /// Holds its value and feeds its open neighbours (inlets).
    Held,
    /// Impermeable (walls, obstacles, moving walls, free-slip faces).
    Closed,
}

impl Role {
    #[inline(always)]
    pub fn of(flag: u8) -> Role {
        match CellType::of(flag & TYPE_MASK) {
            CellType::Fluid | CellType::Outlet => Role::Open,
            CellType::Inlet => Role::Held,
            _ => Role::Closed,
        }
    }
}

/// The limited slope factor φ(r) at Courant number ν times the jump, for
/// r = `slope` / `jump` (`slope` the upwind difference, `jump` the one
/// across the face, not zero): the third-order (QUICKEST-like) blend
/// ((2 − ν) + (1 + ν) r)/3 of Lax–Wendroff and Beam–Warming, held inside
/// Sweby's TVD region 0 ≤ φ ≤ min(2r, 2). Multiplied through by the jump
/// rather than divided by it (a division cost the GPU's advection a fifth of
/// its instructions); the bounds 2·slope and 2·jump are then exact, where
/// φ(r)·jump rounded r first.
#[inline(always)]
// min/max rather than clamp: a NaN gives 0 as fminf/fmaxf do in the CUDA
// twin, where clamp would give NaN.
#[allow(clippy::manual_clamp)]
pub fn limited(slope: f32, jump: f32, nu: f32) -> f32 {
    let third = ((2.0 - nu) * jump + (1.0 + nu) * slope) * (1.0 / 3.0);
    if jump > 0.0 {
        (2.0 * slope).min(third).min(2.0 * jump).max(0.0)
    } else {
        // Multiplied by a negative jump the bounds swap sides.
        (2.0 * slope).max(third).max(2.0 * jump).min(0.0)
    }
}

/// Flux-limited advective flux u·c_face through a face with normal velocity
/// `u`, given the cells upstream of it (`far`, `up`) and downstream (`down`)
/// for u ≥ 0; for u < 0 the caller passes them mirrored. `nu` is |u|·Δt.
#[inline(always)]
pub fn advective_flux(u: f32, far: f32, up: f32, down: f32, dt: f32) -> f32 {
    let jump = down - up;
    let correction = if jump != 0.0 {
        let nu = u.abs() * dt;
        0.5 * (1.0 - nu) * limited(up - far, jump, nu)
    } else {
        0.0
    };
    u * (up + correction)
}

/// Index arithmetic of a grid with periodic wrap.
#[derive(Clone, Copy)]
struct Walker {
    size: [usize; 3],
    periodic: [bool; 3],
    stride: [usize; 3],
}

impl Walker {
    fn new(grid: &Grid) -> Walker {
        let [nx, ny, _] = grid.size;
        Walker {
            size: grid.size,
            periodic: grid.periodic,
            stride: [1, nx, nx * ny],
        }
    }

    /// The cell `d` steps from cell `c` (at coordinate `p` along axis `a`).
    #[inline(always)]
    fn step(&self, c: usize, p: usize, a: usize, d: isize) -> Option<usize> {
        let n = self.size[a] as isize;
        let q = p as isize + d;
        let s = self.stride[a] as isize;
        if (0..n).contains(&q) {
            Some((c as isize + d * s) as usize)
        } else if self.periodic[a] {
            let w = q.rem_euclid(n);
            Some((c as isize + (w - p as isize) * s) as usize)
        } else {
            None
        }
    }
}

/// The inputs of a sub-step that do not change between the fields.
pub struct Flow<'a> {
    pub grid: &'a Grid,
    pub flags: &'a [u8],
    pub velocity: &'a Fields,
    /// Diffusivity of each cell (lattice units); one value for all when it
    /// holds a single value.
    pub diffusivity: &'a [f32],
    /// The sub-step, in flow steps.
    pub dt: f32,
}

impl Flow<'_> {
    #[inline(always)]
    fn diffusivity(&self, c: usize) -> f32 {
        if self.diffusivity.len() == 1 {
            self.diffusivity[0]
        } else {
            self.diffusivity[c]
        }
    }

    /// Whether nothing passes the face between `lo` and `hi`: walls and
    /// obstacles are impermeable, and two held cells exchange nothing.
    #[inline(always)]
    fn shut(&self, lo: usize, hi: usize) -> bool {
        let (rl, rh) = (Role::of(self.flags[lo]), Role::of(self.flags[hi]));
        rl == Role::Closed || rh == Role::Closed || (rl == Role::Held && rh == Role::Held)
    }

    /// The diffusive flux alone through the face between `lo` and its
    /// neighbour `hi` in +a ([`diffuse`]).
    #[inline(always)]
    fn diffusive(&self, c: &[f32], lo: usize, hi: usize) -> f32 {
        if self.shut(lo, hi) {
            return 0.0;
        }
        let d = 0.5 * (self.diffusivity(lo) + self.diffusivity(hi));
        -(d * (c[hi] - c[lo]))
    }

    /// The advective and diffusive flux through the face between `lo` and
    /// its neighbour `hi` in +`a` (both present), positive towards `hi`.
    #[inline(always)]
    fn face(&self, w: &Walker, c: &[f32], lo: usize, hi: usize, a: usize) -> f32 {
        if self.shut(lo, hi) {
            return 0.0;
        }
        let vel = |k: usize| match a {
            0 => self.velocity.ux[k],
            1 => self.velocity.uy[k],
            _ => self.velocity.uz[k],
        };
        let u = 0.5 * (vel(lo) + vel(hi));
        // The cell beyond the upstream one, where it is there and not solid
        // (otherwise the upstream value: first-order upwind next to walls).
        let beyond = |from: usize, d: isize| -> f32 {
            let p = coordinate(w, from, a);
            match w.step(from, p, a, d) {
                Some(k) if Role::of(self.flags[k]) != Role::Closed => c[k],
                _ => c[from],
            }
        };
        let advective = if u >= 0.0 {
            advective_flux(u, beyond(lo, -1), c[lo], c[hi], self.dt)
        } else {
            advective_flux(u, beyond(hi, 1), c[hi], c[lo], self.dt)
        };
        let d = 0.5 * (self.diffusivity(lo) + self.diffusivity(hi));
        advective - d * (c[hi] - c[lo])
    }
}

#[inline(always)]
fn coordinate(w: &Walker, c: usize, a: usize) -> usize {
    (c / w.stride[a]) % w.size[a]
}

/// One sub-step of `flow.dt` for one field: `next` becomes `c` advanced
/// (held and closed cells keep their values). Two passes, so that each face
/// flux is worked out once: each cell's flux through its +x, +y and +z faces
/// (through the grid face where it has no neighbour) into the three planes
/// of `flux`, then each open cell's sum over its six faces, in f64 (the
/// order of the sum fixed: +x, −x, +y, −y, +z, −z). The CUDA kernel
/// `advect` does it in one pass, each face worked out by both its cells
/// from the same values: the same bits.
pub fn advance(flow: &Flow, c: &[f32], next: &mut [f32], flux: &mut Vec<f32>) {
    use rayon::prelude::*;
    let w = Walker::new(flow.grid);
    let [nx, ny, _] = flow.grid.size;
    let (layer, n) = (nx * ny, c.len());
    flux.resize(3 * n, 0.0);
    let (fx, rest) = flux.split_at_mut(n);
    let (fy, fz) = rest.split_at_mut(n);
    fx.par_chunks_mut(layer)
        .zip(fy.par_chunks_mut(layer))
        .zip(fz.par_chunks_mut(layer))
        .enumerate()
        .for_each(|(z, ((fx, fy), fz))| {
            let mut planes = [fx, fy, fz];
            for i in 0..layer {
                let cell = z * layer + i;
                let p = [i % nx, i / nx, z];
                for (a, plane) in planes.iter_mut().enumerate() {
                    plane[i] = match w.step(cell, p[a], a, 1) {
                        Some(hi) => flow.face(&w, c, cell, hi, a),
                        None => edge_flux(flow, c, cell, a, 1.0),
                    };
                }
            }
        });
    let flux = &flux[..];
    let dt = flow.dt as f64;
    update_open_cells(flow, c, next, |cell, p| {
        let mut net = 0.0f64;
        for a in 0..3 {
            let plane = &flux[a * n..(a + 1) * n];
            net += plane[cell] as f64;
            match w.step(cell, p[a], a, -1) {
                Some(lo) => net -= plane[lo] as f64,
                None => net -= edge_flux(flow, c, cell, a, -1.0) as f64,
            }
        }
        (c[cell] as f64 - dt * net) as f32
    });
}

/// `next` = `updated(cell, its coordinates)` at each open cell, `c` at the
/// held and closed ones, which keep their values.
#[inline(always)]
fn update_open_cells(
    flow: &Flow,
    c: &[f32],
    next: &mut [f32],
    updated: impl Fn(usize, [usize; 3]) -> f32 + Sync,
) {
    use rayon::prelude::*;
    let [nx, ny, _] = flow.grid.size;
    let layer = nx * ny;
    next.par_chunks_mut(layer)
        .enumerate()
        .for_each(|(z, out_layer)| {
            for (i, out) in out_layer.iter_mut().enumerate() {
                let cell = z * layer + i;
                *out = c[cell];
                if Role::of(flow.flags[cell]) != Role::Open {
                    continue;
                }
                *out = updated(cell, [i % nx, i / nx, z]);
            }
        });
}

/// The flux out through a grid face without a neighbour (an outlet's outer
/// face): zero gradient, so the cell's own value at its own velocity.
#[inline(always)]
fn edge_flux(flow: &Flow, c: &[f32], cell: usize, a: usize, side: f32) -> f32 {
    let u = match a {
        0 => flow.velocity.ux[cell],
        1 => flow.velocity.uy[cell],
        _ => flow.velocity.uz[cell],
    };
    // Only outflow leaves; an inflowing velocity brings nothing in.
    if u * side > 0.0 {
        u * c[cell]
    } else {
        0.0
    }
}

/// The sub-steps one flow step needs for the largest Courant-number sum
/// `courant` and the largest diffusivity `diffusivity`: advection and
/// diffusion share one bound. A cell's new value is a weighted sum of the
/// old values around it; the limited fluxes take up to 2 Σν of its own
/// weight (Σν ≤ [`CFL`] alone) and the Laplacian 6 D Δt, so it stays
/// bounded (no weight negative) while Σν / CFL + 6 D Δt ≤ 1; diffusion alone
/// keeps to [`DIFFUSION_NUMBER`]. Each limit on its own was not enough: a
/// plume moved every 6 or 8 flow steps at once blew up at Σν = 0.27 with
/// 6 D Δt = 0.8 (scalar::tests::a_continuous_point_source_…).
// min/max rather than clamp: a NaN velocity (a blown-up flow, which the
// flow's own check reports) must not panic here.
#[allow(clippy::manual_clamp)]
pub fn substeps(courant: f32, diffusivity: f32) -> u32 {
    let shared = courant / CFL + 6.0 * diffusivity;
    let diffusion = 6.0 * diffusivity / DIFFUSION_NUMBER;
    shared.max(diffusion).ceil().max(1.0).min(1e6) as u32
}

/// Cost of a diffusion-only sub-step ([`diffuse`]) against a sub-step that
/// advects ([`advance`]), as [`Plan::of`] weighs them: on the H100 at 256³
/// a `diffuse` takes 56 µs, an `advect` 236 µs (Nsight Compute,
/// BENCHMARKS.md, eighteenth session).
pub const DIFFUSION_COST: f32 = 0.24;

/// How a transport step is cut into sub-steps: `rounds` rounds, each an
/// advection sub-step of 1/`rounds` of the step, and where diffusion does
/// not fit in them, `diffusion` diffusion-only sub-steps of 1/`diffusion` of
/// the step shared out among the rounds, after their advection. The
/// releases follow each round.
///
/// Advection and diffusion in one sub-step share one bound ([`substeps`]):
/// where diffusion dominates (a fine grid at a low Reynolds number, the
/// diffusivity a fifth of a cell² per step) every sub-step pays the limited
/// fluxes for what the Laplacian alone asks. Split, each operator keeps its
/// own bound (Σν ≤ [`CFL`]; 6 D Δt ≤ [`DIFFUSION_NUMBER`]), so each stays
/// bounded and the pair does too, and the extra sub-steps are the cheap
/// ones. It is used where it saves time by [`DIFFUSION_COST`]; elsewhere the
/// unsplit sub-step, as accurate and cheaper there, is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Plan {
    pub rounds: u32,
    /// Diffusion-only sub-steps in all; 0 where each advection sub-step
    /// diffuses too.
    pub diffusion: u32,
}

/// "3" (each advects and diffuses), "2 + 11" (two advect, eleven diffuse).
impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self.diffusion {
            0 => write!(f, "{}", self.rounds),
            m => write!(f, "{} + {m}", self.rounds),
        }
    }
}

/// One sub-step of a [`Plan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sub {
    /// [`advance`] with the diffusivities.
    Both,
    /// [`advance`] with none.
    Advection,
    /// [`diffuse`].
    Diffusion,
}

impl Plan {
    /// The plan for a transport step with the Courant-number sum `courant`
    /// and the diffusivity `diffusivity` over all of it (in cells, and
    /// cells² per transport step).
    // min/max rather than clamp: NaN (a blown-up flow) gives one sub-step.
    #[allow(clippy::manual_clamp)]
    pub fn of(courant: f32, diffusivity: f32) -> Plan {
        let both = substeps(courant, diffusivity);
        let rounds = (courant / CFL).ceil().max(1.0).min(1e6) as u32;
        if both > rounds {
            let needed = 6.0 * diffusivity / DIFFUSION_NUMBER;
            let diffusion = needed.ceil().max(1.0).min(1e6) as u32;
            if rounds as f32 + diffusion as f32 * DIFFUSION_COST < both as f32 {
                return Plan { rounds, diffusion };
            }
        }
        Plan {
            rounds: both,
            diffusion: 0,
        }
    }

    /// Sub-steps in all.
    pub fn substeps(&self) -> u32 {
        self.rounds + self.diffusion
    }

    /// The sub-steps of a transport step over `span` flow steps in order:
    /// what each does, its length in flow steps, and whether a round ends
    /// with it (the rates release then; held sources are set after each).
    pub fn sub_steps(&self, span: u32) -> impl Iterator<Item = (Sub, f32, bool)> {
        let (r, m) = (self.rounds, self.diffusion);
        let round = span as f32 / r as f32;
        let diffusion = span as f32 / m.max(1) as f32;
        (0..r).flat_map(move |i| {
            // Round i diffuses over the diffusion sub-steps j with
            // ⌈(j + 1) r / m⌉ = i + 1: as evenly shared as they go.
            let count = ((i + 1) * m).div_ceil(r) - (i * m).div_ceil(r);
            let first = match (m, count) {
                (0, _) => (Sub::Both, round, true),
                (_, 0) => (Sub::Advection, round, true),
                _ => (Sub::Advection, round, false),
            };
            let rest = (0..count).map(move |j| (Sub::Diffusion, diffusion, j + 1 == count));
            std::iter::once(first).chain(rest)
        })
    }
}

/// One sub-step of `flow.dt` of a [`Plan`]: `next` becomes `c` advanced.
pub fn sub_step(flow: &Flow, sub: Sub, c: &[f32], next: &mut [f32], flux: &mut Vec<f32>) {
    match sub {
        Sub::Both => advance(flow, c, next, flux),
        Sub::Advection => advance(
            &Flow {
                diffusivity: &[0.0],
                ..*flow
            },
            c,
            next,
            flux,
        ),
        Sub::Diffusion => diffuse(flow, c, next),
    }
}

/// One diffusion-only sub-step of `flow.dt` for one field, in one pass:
/// each open cell sums the diffusive fluxes through its six faces, each
/// worked out as [`Flow::face`] works out its diffusive part (so what leaves
/// one cell enters its neighbour exactly), in [`advance`]'s order. Grid
/// faces without a neighbour carry nothing (zero gradient); held and closed
/// cells keep their values. The CUDA kernel `diffuse` is the same.
///
/// In f32 throughout, where [`advance`] sums in f64: the GPU's f64
/// conversions and adds made `diffuse` compute-bound (65.7 µs a sub-step
/// on the H100 at 256³, 56.2 in f32), and the few extra roundings of the
/// sum are of the order of the one every update ends with (a closed box
/// still keeps its total to 1e-6, the tests below).
pub fn diffuse(flow: &Flow, c: &[f32], next: &mut [f32]) {
    let w = Walker::new(flow.grid);
    update_open_cells(flow, c, next, |cell, p| {
        let mut net = 0.0f32;
        for (a, &p) in p.iter().enumerate() {
            if let Some(hi) = w.step(cell, p, a, 1) {
                net += flow.diffusive(c, cell, hi);
            }
            if let Some(lo) = w.step(cell, p, a, -1) {
                net -= flow.diffusive(c, lo, cell);
            }
        }
        c[cell] - flow.dt * net
    });
}

/// Sets the velocity of the closed cells to zero. The transport reads none
/// of it (their faces carry nothing, the strain and the maxima skip them),
/// and the GPU's step kernels do not write it: the host engines clear it
/// as a transport step begins and the GPU's as it saves one under way, so
/// that what they save is the same.
pub fn clear_closed(flags: &[u8], velocity: &mut Fields) {
    use rayon::prelude::*;
    for plane in [&mut velocity.ux, &mut velocity.uy, &mut velocity.uz] {
        plane
            .par_iter_mut()
            .zip(flags.par_iter())
            .with_min_len(1 << 14)
            .filter(|(_, &f)| Role::of(f) == Role::Closed)
            .for_each(|(u, _)| *u = 0.0);
    }
}

/// Bit 6 of an [`open_faces`] byte: the cell is [`Role::Open`].
pub const OPEN_CELL: u8 = 1 << 6;

/// Each cell's faces through which [`diffuse`] may exchange, as a byte: bit
/// 2a for the face towards +a and bit 2a + 1 towards −a where a neighbour
/// is there (across a periodic edge too) and not closed, and
/// [`OPEN_CELL`]. What `diffuse` works out from the roles of seven cells
/// and the grid's edges, the CUDA kernel reads from one byte.
pub fn open_faces(grid: &Grid, flags: &[u8]) -> Vec<u8> {
    use rayon::prelude::*;
    let w = Walker::new(grid);
    (0..grid.cells())
        .into_par_iter()
        .with_min_len(1 << 14)
        .map(|cell| {
            let p = grid.coords(cell);
            let mut bits = 0u8;
            for (a, &p) in p.iter().enumerate() {
                for (side, d) in [(0, 1), (1, -1)] {
                    let open = w
                        .step(cell, p, a, d)
                        .is_some_and(|k| Role::of(flags[k]) != Role::Closed);
                    bits |= (open as u8) << (2 * a + side);
                }
            }
            if Role::of(flags[cell]) == Role::Open {
                bits |= OPEN_CELL;
            }
            bits
        })
        .collect()
}

/// The largest |u_x| + |u_y| + |u_z| over the open cells of `cells`.
pub fn largest_courant(flags: &[u8], velocity: &Fields, cells: std::ops::Range<usize>) -> f32 {
    use rayon::prelude::*;
    cells
        .into_par_iter()
        .with_min_len(1 << 14)
        .filter(|&c| Role::of(flags[c]) == Role::Open)
        .map(|c| velocity.ux[c].abs() + velocity.uy[c].abs() + velocity.uz[c].abs())
        .reduce(|| 0.0, f32::max)
}

/// The eddy diffusivity ν_t / Sc_t of each cell from the Smagorinsky model,
/// ν_t = (C_s Δ)² |S|, |S| = √(2 S_ij S_ij) from central differences of the
/// cell-centred velocity (one-sided next to solid cells and grid faces),
/// plus the molecular diffusivity.
pub fn eddy_diffusivity(
    grid: &Grid,
    flags: &[u8],
    velocity: &Fields,
    smagorinsky: f32,
    schmidt_turbulent: f32,
    molecular: f32,
    out: &mut Vec<f32>,
) {
    use rayon::prelude::*;
    let w = Walker::new(grid);
    let [nx, ny, _] = grid.size;
    out.resize(grid.cells(), molecular);
    let comps = [&velocity.ux, &velocity.uy, &velocity.uz];
    out.par_chunks_mut(nx * ny)
        .enumerate()
        .for_each(|(z, layer)| {
            for (i, out) in layer.iter_mut().enumerate() {
                let cell = z * nx * ny + i;
                *out = molecular;
                if Role::of(flags[cell]) == Role::Closed {
                    continue;
                }
                let p = [i % nx, i / nx, z];
                // g[k][a] = ∂u_k/∂x_a
                let mut g = [[0.0f32; 3]; 3];
                for a in 0..3 {
                    let side = |d: isize| {
                        w.step(cell, p[a], a, d)
                            .filter(|&k| Role::of(flags[k]) != Role::Closed)
                    };
                    let (hi, lo) = (side(1), side(-1));
                    let (span, up, down) = match (hi, lo) {
                        (Some(h), Some(l)) => (2.0, h, l),
                        (Some(h), None) => (1.0, h, cell),
                        (None, Some(l)) => (1.0, cell, l),
                        (None, None) => continue,
                    };
                    for k in 0..3 {
                        g[k][a] = (comps[k][up] - comps[k][down]) / span;
                    }
                }
                let mut ss = 0.0f32;
                for k in 0..3 {
                    for a in 0..3 {
                        let s = 0.5 * (g[k][a] + g[a][k]);
                        ss += s * s;
                    }
                }
                let strain = (2.0 * ss).sqrt();
                *out = molecular + smagorinsky * smagorinsky * strain / schmidt_turbulent;
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solver::flags::{make, CellType};

    /// A periodic box in uniform flow `u`.
    fn uniform(size: [usize; 3], u: [f32; 3]) -> (Grid, Vec<u8>, Fields) {
        let grid = Grid {
            size,
            periodic: [true; 3],
        };
        let n = grid.cells();
        let mut f = Fields::new(size);
        f.ux = vec![u[0]; n];
        f.uy = vec![u[1]; n];
        f.uz = vec![u[2]; n];
        (grid, vec![0u8; n], f)
    }

    /// Runs `steps` flow steps of `c` in the given flow, each cut as
    /// [`Plan`] says.
    fn run(grid: &Grid, flags: &[u8], v: &Fields, d: f32, c: &mut Vec<f32>, steps: usize) {
        let plan = Plan::of(largest_courant(flags, v, 0..flags.len()), d);
        let mut flow = Flow {
            grid,
            flags,
            velocity: v,
            diffusivity: &[d],
            dt: 0.0,
        };
        let (mut next, mut flux) = (vec![0.0; c.len()], Vec::new());
        for _ in 0..steps {
            for (sub, dt, _) in plan.sub_steps(1) {
                flow.dt = dt;
                sub_step(&flow, sub, c, &mut next, &mut flux);
                std::mem::swap(c, &mut next);
            }
        }
    }

    /// Mean and variance of `c` along axis `a` on a periodic axis of length
    /// `n`, around `centre` (unwrapped to the nearest image).
    fn moments(grid: &Grid, c: &[f32], a: usize, centre: f64) -> (f64, f64) {
        let n = grid.size[a] as f64;
        let (mut m0, mut m1, mut m2) = (0.0f64, 0.0f64, 0.0f64);
        for (cell, &v) in c.iter().enumerate() {
            let x = grid.coords(cell)[a] as f64;
            let d = (x - centre + n / 2.0).rem_euclid(n) - n / 2.0;
            m0 += v as f64;
            m1 += v as f64 * d;
            m2 += v as f64 * d * d;
        }
        let mean = m1 / m0;
        (centre + mean, m2 / m0 - mean * mean)
    }

    #[test]
    fn a_gaussian_puff_travels_with_the_flow_and_spreads_as_diffusion_says() {
        // Moved every flow step, and every eighth over eight at once (the
        // interval at which the GPU's contaminant costs what the issue
        // allows at 256³: BENCHMARKS.md).
        // Σ|u| = 0.25 and 6D = 0.072 per step: every step one sub-step does
        // both; the last transport step of every eighth spans nine steps
        // (spans of seven and nine alternate), and its diffusion, which
        // would take a sixth sub-step doing both, takes one of its own
        // after the first of five advection sub-steps (Plan).
        let plan = |rounds, diffusion| Plan { rounds, diffusion };
        for (interval, plan) in [(1, plan(1, 0)), (8, plan(5, 1))] {
            puff(interval, plan);
        }
    }

    fn puff(interval: u32, plan: Plan) {
        use crate::solver::lbm::lattice::Collision;
        use crate::solver::scalar::{pack_state, Dispersion, Setup};
        use crate::solver::Params;
        let size = [64, 64, 64];
        let u = [0.2f32, 0.05, 0.0];
        let (grid, flags, v) = uniform(size, u);
        // D = ν (Sc = 1) = 0.012.
        let params = Params::new(0.536, Collision::Bgk);
        let (s0, d) = (4.0f64, params.viscosity());
        let start = [20.0, 24.0, 30.0];
        let c: Vec<f32> = (0..grid.cells())
            .map(|cell| {
                let p = grid.coords(cell);
                let r2: f64 = (0..3).map(|a| (p[a] as f64 - start[a]).powi(2)).sum();
                (-r2 / (2.0 * s0 * s0)).exp() as f32
            })
            .collect();
        let mass0: f64 = c.iter().map(|&v| v as f64).sum();
        let setup = Setup::bare(interval);
        let mut dispersion = Dispersion::new(&grid, &flags, setup);
        dispersion
            .set_state(&pack_state(&[c], &[], None))
            .expect("one field, no receptors");
        // Five box lengths along x.
        let steps = 5 * 64 * 5;
        for step in 0..steps {
            dispersion.step(&grid, &flags, &params, &v, step);
        }
        assert_eq!(dispersion.plan(), plan, "every {interval}");
        let c = &dispersion.fields()[0];
        let t = steps as f64;
        let expected = s0 * s0 + 2.0 * d as f64 * t;
        for a in 0..3 {
            let centre = start[a] + u[a] as f64 * t;
            let (mean, var) = moments(&grid, c, a, centre);
            let wrapped = (mean - centre + 0.5 * size[a] as f64).rem_euclid(size[a] as f64)
                - 0.5 * size[a] as f64;
            eprintln!(
                "every {interval}: axis {a}: centre off by {wrapped:.4}, variance {var:.3} vs {expected:.3}"
            );
            assert!(
                wrapped.abs() < 0.002 * (u[a] as f64 * t).abs() + 0.02,
                "every {interval}: axis {a}: centre off by {wrapped}"
            );
            assert!(
                (var / expected - 1.0).abs() < 0.02,
                "every {interval}: axis {a}: variance {var:.2}, expected {expected:.2}"
            );
        }
        let mass: f64 = c.iter().map(|&v| v as f64).sum();
        assert!(
            (mass / mass0 - 1.0).abs() < 1e-6,
            "every {interval}: {mass} vs {mass0}"
        );
        assert!(c.iter().all(|&v| v >= 0.0));
    }

    #[test]
    fn a_plan_splits_where_diffusion_asks_more_sub_steps_and_covers_the_step() {
        // Advection-bound: one sub-step does both.
        assert_eq!(
            Plan::of(0.9, 0.01),
            Plan {
                rounds: 2,
                diffusion: 0
            }
        );
        // The diffusion of a fine grid at Re 100 (D = 0.19 per step) over 9
        // steps with Σν = 0.1: 13 sub-steps unsplit; split, 2 and 12 cheap
        // ones (6 D Δt = 0.855 each).
        let plan = Plan::of(0.9, 1.71);
        assert_eq!(
            plan,
            Plan {
                rounds: 2,
                diffusion: 12
            }
        );
        assert_eq!(substeps(0.9, 1.71), 13);
        for (plan, shares) in [
            (plan, [6, 6, 0]),
            (
                Plan {
                    rounds: 3,
                    diffusion: 7,
                },
                [3, 2, 2],
            ),
        ] {
            let subs: Vec<_> = plan.sub_steps(9).collect();
            assert_eq!(subs.len() as u32, plan.substeps());
            for kind in [Sub::Advection, Sub::Diffusion] {
                let time: f32 = subs.iter().filter(|s| s.0 == kind).map(|s| s.1).sum();
                assert!((time - 9.0).abs() < 1e-5, "{kind:?}: {time}");
            }
            // Each round is an advection sub-step, then its share of the
            // diffusion, the last of which ends it.
            let rounds: Vec<_> = subs.split_inclusive(|s| s.2).collect();
            assert_eq!(rounds.len() as u32, plan.rounds);
            for (round, share) in rounds.iter().zip(shares) {
                assert_eq!(round[0].0, Sub::Advection);
                assert_eq!(round.len(), 1 + share);
                assert!(round[1..].iter().all(|s| s.0 == Sub::Diffusion));
            }
        }
        // Fewer diffusion sub-steps than rounds: a round without any ends
        // with its advection.
        let subs: Vec<_> = Plan {
            rounds: 3,
            diffusion: 1,
        }
        .sub_steps(3)
        .collect();
        assert_eq!(subs[1], (Sub::Diffusion, 3.0, true));
        assert_eq!(subs[2], (Sub::Advection, 1.0, true));
        // Each operator within its own bound.
        let diffusion = Plan::of(0.9, 1.71).sub_steps(9).nth(1).unwrap();
        assert!(0.9 / 2.0 <= CFL && 6.0 * 0.19 * diffusion.1 <= DIFFUSION_NUMBER);
        // A blown-up flow still gives a plan.
        assert_eq!(Plan::of(f32::NAN, 0.01).rounds, 1);
    }

    #[test]
    fn a_diffusion_dominated_top_hat_spreads_as_diffusion_says_within_its_bounds() {
        use crate::solver::lbm::lattice::Collision;
        use crate::solver::scalar::{pack_state, Dispersion, Setup};
        use crate::solver::Params;
        // A slab of 1 sixteen cells wide in x, in a slow flow along x with
        // D = ν = 0.19 (Sc = 1), moved every 8th step: split sub-steps
        // (a_plan_splits_…). Diffusion adds 2Dt to the variance of any
        // shape; the limited fluxes add a little (the top-hat's edges).
        let size = [128, 4, 4];
        let u = [0.1f32, 0.0, 0.0];
        let (grid, flags, v) = uniform(size, u);
        let params = Params::new(1.07, Collision::Bgk);
        let d = params.viscosity() as f64;
        let c: Vec<f32> = (0..grid.cells())
            .map(|cell| (40..56).contains(&grid.coords(cell)[0]) as u8 as f32)
            .collect();
        let mass0: f64 = c.iter().map(|&v| v as f64).sum();
        let setup = Setup::bare(8);
        let mut dispersion = Dispersion::new(&grid, &flags, setup);
        dispersion.set_state(&pack_state(&[c], &[], None)).unwrap();
        let steps = 400;
        let mut top = 1.0f32;
        for step in 0..steps {
            dispersion.step(&grid, &flags, &params, &v, step);
            let c = &dispersion.fields()[0];
            let (lo, hi) = c
                .iter()
                .fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
            assert!(lo >= 0.0 && hi <= top, "step {step}: c in [{lo}, {hi}]");
            top = hi;
        }
        assert_eq!(
            dispersion.plan(),
            Plan {
                rounds: 2,
                diffusion: 12
            }
        );
        let c = &dispersion.fields()[0];
        let t = steps as f64;
        let centre = 47.5 + u[0] as f64 * t;
        let (mean, var) = moments(&grid, c, 0, centre);
        let expected = (16.0f64 * 16.0 - 1.0) / 12.0 + 2.0 * d * t;
        eprintln!("centre {mean:.3} vs {centre:.3}, variance {var:.3} vs {expected:.3}");
        assert!((mean - centre).abs() < 0.05, "{mean} vs {centre}");
        assert!((var / expected - 1.0).abs() < 0.02, "{var} vs {expected}");
        let mass: f64 = c.iter().map(|&v| v as f64).sum();
        assert!((mass / mass0 - 1.0).abs() < 1e-6, "{mass} vs {mass0}");
    }

    #[test]
    fn the_limited_slope_is_sweby_phi_times_the_jump_and_keeps_its_bounds_exactly() {
        // φ(r) as the ratio form gives it, in f64.
        let phi = |r: f64, nu: f64| {
            let third = ((2.0 - nu) + (1.0 + nu) * r) / 3.0;
            (2.0 * r).min(third).clamp(0.0, 2.0)
        };
        let values = [-3.0f32, -1.0, -0.3, -1e-3, 1e-3, 0.2, 0.7, 1.0, 2.5, 40.0];
        for &slope in &values {
            for &jump in &values {
                for nu in [0.0f32, 0.25, 0.5, 0.9] {
                    let got = limited(slope, jump, nu);
                    let exact = phi(slope as f64 / jump as f64, nu as f64) * jump as f64;
                    let scale = (slope.abs() + jump.abs()) as f64;
                    assert!(
                        (got as f64 - exact).abs() <= 1e-6 * scale,
                        "slope {slope}, jump {jump}, ν {nu}: {got} against {exact}"
                    );
                    // 0 ≤ φ ≤ min(2r, 2), times the jump: on the jump's side
                    // of zero, within 2·jump and, where r > 0, within
                    // 2·slope, in f32 with no rounding in between.
                    let (lo, hi) = if jump > 0.0 {
                        (0.0, 2.0 * jump)
                    } else {
                        (2.0 * jump, 0.0)
                    };
                    assert!(lo <= got && got <= hi, "slope {slope}, jump {jump}: {got}");
                    if slope / jump > 0.0 {
                        assert!(
                            got.abs() <= (2.0 * slope).abs(),
                            "slope {slope}, jump {jump}: {got}"
                        );
                    } else {
                        assert_eq!(got, 0.0, "slope {slope}, jump {jump}");
                    }
                }
            }
        }
    }

    #[test]
    fn open_faces_name_the_faces_diffusion_exchanges_through() {
        // 3³, periodic in x only; a wall at the centre, an inlet in a corner.
        let grid = Grid {
            size: [3, 3, 3],
            periodic: [true, false, false],
        };
        let mut flags = vec![0u8; grid.cells()];
        let at = |x: usize, y: usize, z: usize| x + 3 * (y + 3 * z);
        flags[at(1, 1, 1)] = make(CellType::Wall, 0);
        flags[at(2, 2, 2)] = make(CellType::Inlet, 0);
        let faces = open_faces(&grid, &flags);
        // +x is the wall; −x wraps to (2, 1, 1); y and z inside the grid.
        assert_eq!(faces[at(0, 1, 1)], OPEN_CELL | 0b11_1110);
        // −y and −z leave the grid; −x wraps.
        assert_eq!(faces[at(0, 0, 0)], OPEN_CELL | 0b01_0111);
        // The inlet is not open, its faces are; +x wraps to (0, 2, 2).
        assert_eq!(faces[at(2, 2, 2)], 0b10_1011);
        // A fluid cell exchanges with the inlet beside it.
        assert_eq!(faces[at(1, 2, 2)] & 1, 1);
        // The wall is not open; its neighbours are all there and open.
        assert_eq!(faces[at(1, 1, 1)], 0b11_1111);
    }

    #[test]
    fn a_step_profile_at_courant_one_half_stays_within_its_bounds() {
        for u in [[0.5f32, 0.0, 0.0], [0.0, -0.5, 0.0], [0.2, 0.2, 0.1]] {
            let (grid, flags, v) = uniform([48, 48, 8], u);
            let mut c: Vec<f32> = (0..grid.cells())
                .map(|cell| {
                    let p = grid.coords(cell);
                    if (10..24).contains(&p[0]) && (10..24).contains(&p[1]) {
                        1.0
                    } else {
                        0.0
                    }
                })
                .collect();
            run(&grid, &flags, &v, 0.0, &mut c, 200);
            let (lo, hi) = c
                .iter()
                .fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
            assert!(lo >= 0.0 && hi <= 1.0, "{u:?}: c in [{lo}, {hi}]");
            // Not smeared away: the plateau survives 100 cells of travel.
            assert!(hi > 0.99, "{u:?}: peak {hi}");
        }
    }

    #[test]
    fn a_closed_box_keeps_its_contaminant() {
        // A box with walls all round and a swirling (not divergence-free at
        // the walls) velocity: nothing leaves through the walls. What the
        // total may change by is the rounding of the FP32 values stored each
        // sub-step, a random walk of about 1e-9 of the total per sub-step.
        let size = [20, 18, 16];
        let grid = Grid {
            size,
            periodic: [false; 3],
        };
        let flags: Vec<u8> = (0..grid.cells())
            .map(|cell| {
                let p = grid.coords(cell);
                let edge = (0..3).any(|a| p[a] == 0 || p[a] == size[a] - 1);
                if edge {
                    make(CellType::Wall, 0)
                } else {
                    0
                }
            })
            .collect();
        let mut v = Fields::new(size);
        for cell in 0..grid.cells() {
            let [x, y, z] = grid.coords(cell).map(|p| p as f32);
            v.ux[cell] = 0.2 * (0.3 * y).sin();
            v.uy[cell] = 0.2 * (0.4 * z).cos();
            v.uz[cell] = 0.15 * (0.5 * x).sin();
        }
        // Advection-bound (each sub-step does both, summing in f64), then
        // diffusion-dominated (most sub-steps `diffuse`, summing in f32).
        let courant = largest_courant(&flags, &v, 0..grid.cells());
        assert_eq!(Plan::of(courant, 0.02).diffusion, 0);
        assert!(Plan::of(courant, 0.5).diffusion > Plan::of(courant, 0.5).rounds);
        for d in [0.02, 0.5] {
            let mut c: Vec<f32> = (0..grid.cells())
                .map(|cell| {
                    let p = grid.coords(cell);
                    if Role::of(flags[cell]) == Role::Open && p[0] < 8 {
                        1.0
                    } else {
                        0.0
                    }
                })
                .collect();
            let total = |c: &[f32]| c.iter().map(|&v| v as f64).sum::<f64>();
            let before = total(&c);
            run(&grid, &flags, &v, d, &mut c, 500);
            let after = total(&c);
            assert!(
                (after / before - 1.0).abs() < 1e-6,
                "D {d}: {after} vs {before}"
            );
            // It went somewhere: the far half received some.
            let far: f64 = (0..grid.cells())
                .filter(|&k| grid.coords(k)[0] >= 12)
                .map(|k| c[k] as f64)
                .sum();
            assert!(far > 0.1 * before, "D {d}: {far}");
            // Walls hold none.
            assert!((0..grid.cells())
                .filter(|&k| Role::of(flags[k]) == Role::Closed)
                .all(|k| c[k] == 0.0));
        }
    }
}
