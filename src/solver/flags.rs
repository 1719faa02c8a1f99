//! Cell flags: one byte per cell, shared bit for bit with `kernels/lbm/d3q19.cu`.
//!
//! ```text
//! bit 7    NEAR: a running cell with a neighbour that does not run or lies
//!          outside a non-periodic face; only these take the slow boundary path
//! bits 3-6 tag: obstacle index (Wall), velocity slot (MovingWall, Inlet),
//!          face axis (FreeSlip), CONVECTIVE_OUTLET or 0 (Outlet)
//! bits 0-2 cell type
//! ```

/// What a cell is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CellType {
    /// Ordinary fluid: streams and collides.
    Fluid = 0,
    /// Resting solid: half-way bounce-back for its fluid neighbours.
    Wall = 1,
    /// Solid moving tangentially (a cavity lid): bounce-back with the
    /// wall-velocity correction.
    MovingWall = 2,
    /// Velocity inlet: bounce-back with the velocity term of its slot's velocity
    /// (Ladd). Link-wise like the walls, so TRT keeps its accuracy and stability
    /// there; an equilibrium inlet made TRT unstable at τ close to ½.
    Inlet = 3,
    /// Fixed-pressure outlet: emits the equilibrium of ρ = 1 and the velocity
    /// that arrives at it (zero-gradient).
    Outlet = 4,
    /// Free-slip face: specular reflection for its fluid neighbours.
    FreeSlip = 5,
}

pub const TYPE_MASK: u8 = 0b0000_0111;
pub const TAG_SHIFT: u8 = 3;
pub const TAG_MASK: u8 = 0b0111_1000;
pub const NEAR: u8 = 0b1000_0000;
/// Tags hold 4 bits.
pub const MAX_TAG: u8 = 15;
/// The tag of an outlet whose velocity the projection method convects out
/// (the lattice Boltzmann method treats every outlet alike).
pub const CONVECTIVE_OUTLET: u8 = 1;

impl CellType {
    #[inline(always)]
    pub fn of(flag: u8) -> CellType {
        match flag & TYPE_MASK {
            0 => CellType::Fluid,
            1 => CellType::Wall,
            2 => CellType::MovingWall,
            3 => CellType::Inlet,
            4 => CellType::Outlet,
            _ => CellType::FreeSlip,
        }
    }

    /// Cells that stream and collide (hold populations of their own).
    #[inline(always)]
    pub fn runs(self) -> bool {
        matches!(self, CellType::Fluid | CellType::Outlet)
    }

    pub fn name(self) -> &'static str {
        match self {
            CellType::Fluid => "fluid",
            CellType::Wall => "wall",
            CellType::MovingWall => "moving wall",
            CellType::Inlet => "inlet",
            CellType::Outlet => "outlet",
            CellType::FreeSlip => "free-slip",
        }
    }
}

/// A flag byte from a type and a tag (NEAR is computed later by
/// [`mark_near_cells`]).
#[inline]
pub fn make(cell: CellType, tag: u8) -> u8 {
    debug_assert!(tag <= MAX_TAG);
    (cell as u8) | (tag << TAG_SHIFT)
}

#[inline(always)]
pub fn tag(flag: u8) -> u8 {
    (flag & TAG_MASK) >> TAG_SHIFT
}

#[inline(always)]
pub fn runs(flag: u8) -> bool {
    // Fluid = 0, Outlet = 4.
    matches!(flag & TYPE_MASK, 0 | 4)
}

/// Sets the NEAR bit on every running cell that has a neighbour (in any of the 18
/// lattice directions) that does not run, or that lies beyond a non-periodic
/// face; clears it everywhere else. Outlets are always NEAR: their update
/// differs from the bulk anyway.
pub fn mark_near_cells(grid: &super::Grid, flags: &mut [u8]) {
    use rayon::prelude::*;

    use super::lbm::lattice::{E, Q};
    let [nx, ny, _] = grid.size;
    let snapshot: Vec<u8> = flags.to_vec();
    flags
        .par_chunks_mut(nx * ny)
        .enumerate()
        .for_each(|(z, slab)| {
            for y in 0..ny {
                for x in 0..nx {
                    let n = x + nx * y;
                    let f = snapshot[grid.index(x, y, z)] & !NEAR;
                    let mut near = false;
                    if runs(f) {
                        near = CellType::of(f) != CellType::Fluid;
                        for e in E.iter().take(Q).skip(1) {
                            match grid.neighbour(x, y, z, *e) {
                                Some(m) => near |= !runs(snapshot[m]),
                                None => near = true,
                            }
                        }
                    }
                    slab[n] = if near { f | NEAR } else { f };
                }
            }
        });
}

/// The flags as the GPU keeps them: one byte per cell, zeros up to a multiple of
/// 4 bytes, then one bit per cell in little-endian 32-bit words, set where the
/// cell is bulk fluid (flag 0), then as many words set where the even step
/// updates the cell as a bulk cell: bulk fluid, and the fluid cells
/// `even_differs` leaves out. The bulk step kernels read their cells' bits
/// (`bulk_bits` and `even_bits` in kernels/lbm/d3q19.cu) instead of a flag byte
/// per cell, which is 1 of the 153 bytes a cell's step would otherwise move.
/// `even_differs` must hold every NEAR cell whose even update is not the bulk
/// one ([`even_step_differs`]).
pub fn with_bulk_bits(flags: &[u8], even_differs: &[u32]) -> Vec<u8> {
    use rayon::prelude::*;

    let words = |bit: fn(u8) -> bool| -> Vec<u32> {
        flags
            .par_chunks(32)
            .map(|chunk| {
                chunk
                    .iter()
                    .enumerate()
                    .fold(0u32, |w, (j, &f)| w | (u32::from(bit(f)) << j))
            })
            .collect()
    };
    let bulk = words(|f| f == 0);
    let mut even = words(|f| CellType::of(f) == CellType::Fluid);
    for &c in even_differs {
        even[c as usize / 32] &= !(1 << (c % 32));
    }
    let mut out = Vec::with_capacity(flags.len().next_multiple_of(4) + 8 * bulk.len());
    out.extend_from_slice(flags);
    out.resize(flags.len().next_multiple_of(4), 0);
    out.extend(bulk.iter().chain(&even).flat_map(|w| w.to_le_bytes()));
    out
}

/// Whether the even step's update of running cell `c` differs from a bulk
/// cell's (cpu.rs: the even step's boundary rules): an outlet, a cell with a
/// neighbour beyond a non-periodic face (its slot for what would arrive from
/// there keeps its own outgoing population), or one with an interpolated
/// link (`linked`). A fluid cell next to walls, inlets or free-slip faces
/// reads and writes only its own slots in the even step, as the bulk does:
/// their rules act in the odd step.
pub fn even_step_differs(grid: &super::Grid, flags: &[u8], c: usize, linked: bool) -> bool {
    use super::lbm::lattice::{E, Q};
    if CellType::of(flags[c]) != CellType::Fluid || linked {
        return true;
    }
    let [x, y, z] = grid.coords(c);
    E.iter()
        .take(Q)
        .skip(1)
        .any(|e| grid.neighbour(x, y, z, *e).is_none())
}

/// Of the runs of 128 cells along x that hold bulk fluid (a warp of the FP32
/// odd step's `aa_odd4`, four cells per lane), the share that also hold a quad
/// of cells only partly bulk. Such a warp stores those cells one by one while
/// its other lanes wait: where walls or inlets end every row (the cavity at
/// 256³, every warp) the four-cell kernel is 3% slower than the two-cell one,
/// where no row ends it is 1% faster (BENCHMARKS.md, eighth session).
pub fn mixed_quad_share(flags: &[u8], nx: usize) -> f64 {
    use rayon::prelude::*;

    let run = |run: &[u8]| {
        let (mut any, mut mixed) = (false, false);
        for quad in run.chunks(4) {
            let bulk = quad.iter().filter(|&&f| f == 0).count();
            any |= bulk > 0;
            mixed |= bulk > 0 && bulk < quad.len();
        }
        (u64::from(mixed), u64::from(any))
    };
    let (mixed, busy) = flags
        .par_chunks(nx.max(1))
        .map(|row| {
            row.chunks(128)
                .map(run)
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
        })
        .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    if busy == 0 {
        0.0
    } else {
        mixed as f64 / busy as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_quads_are_counted_per_warp_run_of_each_row() {
        // Rows of 256 cells: two runs of 128 each.
        let nx = 256;
        let mut flags = vec![0u8; 4 * nx];
        // Row 0: all bulk. Row 1: a wall at x = 0 (its run holds a mixed quad).
        flags[nx] = make(CellType::Wall, 0);
        // Row 2: a whole quad of walls (not mixed).
        flags[2 * nx + 128..2 * nx + 132].fill(make(CellType::Wall, 0));
        // Row 3: no bulk cell at all (not counted).
        flags[3 * nx..].fill(NEAR);
        assert_eq!(mixed_quad_share(&flags, nx), 1.0 / 6.0);
        assert_eq!(mixed_quad_share(&flags[3 * nx..], nx), 0.0);
    }

    #[test]
    fn bulk_bits_mark_bulk_fluid_cells_after_the_padded_flags() {
        let mut flags = vec![0u8; 70];
        flags[1] = NEAR;
        flags[5] = NEAR;
        flags[33] = make(CellType::Wall, 0);
        flags[69] = make(CellType::Outlet, 0) | NEAR;
        // Cell 1 updates in the even step as the bulk does, cell 5 does not.
        let out = with_bulk_bits(&flags, &[5, 69]);
        assert_eq!(&out[..70], &flags[..]);
        assert_eq!(&out[70..72], &[0, 0]);
        let word = |k: usize| u32::from_le_bytes(out[72 + 4 * k..76 + 4 * k].try_into().unwrap());
        assert_eq!(out.len(), 72 + 6 * 4);
        assert_eq!(word(0), !0b10_0010);
        assert_eq!(word(1), !0b10);
        // The last word covers cells 64..69 only; cell 69 is an outlet.
        assert_eq!(word(2), 0b01_1111);
        // The even step's bits: walls and the listed cells left out.
        assert_eq!(word(3), !0b10_0000);
        assert_eq!(word(4), !0b10);
        assert_eq!(word(5), 0b01_1111);
    }

    #[test]
    fn the_even_step_differs_at_outlets_faces_and_links_only() {
        use crate::solver::Grid;
        // x periodic, y and z closed: the layers y = 0 and z = 0 have
        // neighbours beyond a face.
        let grid = Grid {
            size: [6, 5, 4],
            periodic: [true, false, false],
        };
        let mut flags = vec![0u8; grid.cells()];
        let wall = grid.index(2, 2, 2);
        flags[wall] = make(CellType::Wall, 0);
        flags[grid.index(4, 3, 2)] = make(CellType::Outlet, 0);
        mark_near_cells(&grid, &mut flags);
        let next_to_wall = grid.index(3, 2, 2);
        assert!(flags[next_to_wall] & NEAR != 0);
        assert!(!even_step_differs(&grid, &flags, next_to_wall, false));
        assert!(even_step_differs(&grid, &flags, next_to_wall, true));
        assert!(even_step_differs(&grid, &flags, grid.index(4, 3, 2), false));
        assert!(even_step_differs(&grid, &flags, grid.index(3, 0, 2), false));
        assert!(even_step_differs(&grid, &flags, grid.index(3, 2, 3), false));
        // x wraps: the first column is bulk-like in the even step.
        assert!(!even_step_differs(
            &grid,
            &flags,
            grid.index(0, 2, 2),
            false
        ));
    }
}
