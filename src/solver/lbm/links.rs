//! Interpolated bounce-back (Bouzidi, Firdaouss & Lallemand 2001) on curved
//! walls: each link from a fluid cell into an interpolated obstacle carries the
//! fraction q of the link that lies in the fluid, and the population that comes
//! back along it is interpolated instead of reflected half-way.
//!
//! For the link `i` of cell x into the wall, with post-collision populations f*:
//!
//! * q < ½: f_ī(x, t+1) = 2q f*_i(x, t) + (1 − 2q) f*_i(x − e_i, t)
//! * q ≥ ½: f_ī(x, t+1) = 1/(2q) f*_i(x, t) + (1 − 1/(2q)) f*_ī(x, t)
//!
//! In the AA pattern both fit the cell's own update without touching a slot
//! another cell owns: f*_i(x − e_i, t) is the population that streams into x
//! along i at t+1, which x reads anyway. So the cell writes
//! `a f*_i + b f*_ī` into the bounce-back slot when it collides, and adds
//! `c f_i` when it reads the next step (`a, b, c` from [`coefficients`]). Where
//! x − e_i does not run (a gap one cell wide), q < ½ falls back to the
//! interpolation between f*_i(x) and f*_ī(x) at the write; such links are
//! stored as −q. q = ½ is half-way bounce-back exactly (a = 1, b = c = 0).

use super::lattice::{opposite, Q};
use crate::solver::{flags, SolverError};

/// Links of cells into interpolated walls, by cell: `q[k][i - 1]` for the link
/// along direction `i` of cell `cells[k]`; 0 where the link is not
/// interpolated (half-way bounce-back), negative for the fallback (above).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WallLinks {
    /// Cell indices, ascending.
    pub cells: Vec<u32>,
    pub q: Vec<[f32; Q - 1]>,
}

impl WallLinks {
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The links of cell `c`, if it has interpolated ones.
    #[inline]
    pub fn at(&self, c: usize) -> Option<&[f32; Q - 1]> {
        self.cells
            .binary_search(&(c as u32))
            .ok()
            .map(|k| &self.q[k])
    }

    /// The links of cells `first..first + count`, renumbered from 0 (one
    /// slab's share of the whole domain's).
    pub fn window(&self, first: usize, count: usize) -> WallLinks {
        let a = self.cells.partition_point(|&c| (c as usize) < first);
        let z = self
            .cells
            .partition_point(|&c| (c as usize) < first + count);
        WallLinks {
            cells: self.cells[a..z].iter().map(|&c| c - first as u32).collect(),
            q: self.q[a..z].to_vec(),
        }
    }

    /// Links, with the q of each cell aligned to `near` (the CUDA solver's
    /// list of boundary cells, ascending): 18 values per listed cell.
    pub fn aligned(&self, near: &[u32]) -> Vec<f32> {
        let mut out = vec![0.0f32; (Q - 1) * near.len()];
        for (k, &c) in near.iter().enumerate() {
            if let Some(q) = self.at(c as usize) {
                out[(Q - 1) * k..(Q - 1) * (k + 1)].copy_from_slice(q);
            }
        }
        out
    }
}

/// Refuses links that do not fit a lattice of `cell_flags` (unsorted, out of
/// range, on a cell that does not run, q outside (0, 1]), or that come after
/// the first step.
pub fn check(links: &WallLinks, cell_flags: &[u8], t: u64) -> Result<(), SolverError> {
    if t != 0 && !links.is_empty() {
        return Err(SolverError::InvalidParams(format!(
            "interpolated walls are set before the first step, not at step {t}"
        )));
    }
    let bad = |why: String| Err(SolverError::InvalidParams(format!("wall links: {why}")));
    if links.q.len() != links.cells.len() {
        return bad(format!(
            "{} cells but {} sets of q",
            links.cells.len(),
            links.q.len()
        ));
    }
    if links.cells.windows(2).any(|w| w[0] >= w[1]) {
        return bad("cells not in ascending order".into());
    }
    for (k, &c) in links.cells.iter().enumerate() {
        if !cell_flags.get(c as usize).is_some_and(|&f| flags::runs(f)) {
            return bad(format!("cell {c} is not a running cell of the lattice"));
        }
        if let Some(q) = links.q[k].iter().find(|q| !(q.abs() <= 1.0)) {
            return bad(format!("q = {q} at cell {c} is not in [-1, 1]"));
        }
    }
    Ok(())
}

/// `(a, b, c)` of a link's stored q (module docs); the same operations as
/// `bouzidi` in kernels/lbm/d3q19.cu.
#[inline(always)]
pub fn coefficients(q: f32) -> (f32, f32, f32) {
    if q < 0.0 {
        let t = -2.0 * q;
        (t, 1.0 - t, 0.0)
    } else if q < 0.5 {
        let t = 2.0 * q;
        (t, 0.0, 1.0 - t)
    } else {
        let t = 1.0 / (2.0 * q);
        (t, 1.0 - t, 0.0)
    }
}

/// The read half: adds `c f_i` to each interpolated link's returning
/// population `f_ī` in incoming populations `f`.
#[inline]
pub fn complete_incoming(q: &[f32; Q - 1], f: &mut [f32; Q]) {
    for i in 1..Q {
        let qi = q[i - 1];
        if qi != 0.0 {
            let (_, _, c) = coefficients(qi);
            if c != 0.0 {
                f[opposite(i)] += c * f[i];
            }
        }
    }
}

/// The write half: the value link `i` stores in its bounce-back slot, from
/// the post-collision populations `f` of its cell.
#[inline(always)]
pub fn bounced(q: f32, f: &[f32; Q], i: usize) -> f32 {
    if q == 0.0 {
        return f[i];
    }
    let (a, b, _) = coefficients(q);
    a * f[i] + b * f[opposite(i)]
}

/// Makes freshly initialised populations consistent with the read half: the
/// bounce-back slot of each link holds `f_ī − c f_i`, so that the first read
/// gives back `f_ī`. Only for the even step's layout (time 0).
pub fn initial_adjust(links: &WallLinks, f: &mut [f32], cells: usize) {
    for (k, &c) in links.cells.iter().enumerate() {
        let c = c as usize;
        for i in 1..Q {
            let qi = links.q[k][i - 1];
            if qi == 0.0 {
                continue;
            }
            let (_, _, cc) = coefficients(qi);
            if cc != 0.0 {
                let v = f[i * cells + c];
                f[opposite(i) * cells + c] -= cc * v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_way_is_plain_bounce_back_and_coefficients_sum_to_one() {
        assert_eq!(coefficients(0.5), (1.0, 0.0, 0.0));
        for q in [0.01f32, 0.2, 0.49, 0.5, 0.7, 1.0, -0.3] {
            let (a, b, c) = coefficients(q);
            assert!((a + b + c - 1.0).abs() < 1e-6, "{q}");
        }
        let f: [f32; Q] = std::array::from_fn(|i| i as f32);
        assert_eq!(bounced(0.0, &f, 3), 3.0);
        assert_eq!(bounced(0.5, &f, 3), 3.0);
    }

    #[test]
    fn windows_renumber_the_cells_of_a_slab() {
        let links = WallLinks {
            cells: vec![3, 10, 17, 40],
            q: vec![[0.1; Q - 1], [0.2; Q - 1], [0.3; Q - 1], [0.4; Q - 1]],
        };
        let w = links.window(10, 20);
        assert_eq!(w.cells, vec![0, 7]);
        assert_eq!(w.q[1][0], 0.3);
        let a = links.aligned(&[2, 10, 40]);
        assert_eq!(a.len(), 54);
        assert_eq!((a[0], a[18], a[36]), (0.0, 0.2, 0.4));
    }
}
