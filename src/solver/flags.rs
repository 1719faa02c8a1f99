//! Cell flags: one byte per cell, shared bit for bit with `kernels/d3q19.cu`.
//!
//! ```text
//! bit 7    NEAR: a running cell with a neighbour that does not run or lies
//!          outside a non-periodic face; only these take the slow boundary path
//! bits 3-6 tag: obstacle index (Wall), velocity slot (MovingWall, Inlet),
//!          face axis (FreeSlip)
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

    use super::lattice::{E, Q};
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
