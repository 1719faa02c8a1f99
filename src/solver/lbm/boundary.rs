//! The boundary rules of the odd step that more than one part needs: the
//! specular reflection of free-slip walls, and which halo slots the odd step
//! writes (the CPU solver streams by them; the slab exchange maps send exactly
//! those slots back).

use super::lattice::{E, Q};
use crate::solver::flags::{self, CellType};
use crate::solver::Grid;

/// `MIRROR[axis][i]`: direction `i` with its component along `axis` negated.
pub const MIRROR: [[usize; Q]; 3] = mirror_table();

const fn mirror_table() -> [[usize; Q]; 3] {
    let mut table = [[0usize; Q]; 3];
    let mut axis = 0;
    while axis < 3 {
        let mut i = 0;
        while i < Q {
            let mut want = E[i];
            want[axis] = -want[axis];
            let mut k = 0;
            while k < Q {
                if E[k][0] == want[0] && E[k][1] == want[1] && E[k][2] == want[2] {
                    table[axis][i] = k;
                }
                k += 1;
            }
            i += 1;
        }
        axis += 1;
    }
    table
}

/// The running cell that a population leaving `p` along `e` reaches by
/// specular reflection at a free-slip wall normal to `axis`, if the wall is
/// there (see [`super::cpu::CpuSolver`]'s odd step).
#[inline]
pub fn specular_partner(
    g: &Grid,
    cell_flags: &[u8],
    p: [usize; 3],
    e: [i32; 3],
    axis: usize,
) -> Option<usize> {
    let mut normal = [0; 3];
    normal[axis] = e[axis];
    let free_slip = |d: [i32; 3]| {
        g.neighbour(p[0], p[1], p[2], d)
            .is_some_and(|m| CellType::of(cell_flags[m]) == CellType::FreeSlip)
    };
    if e[axis] == 0 || !free_slip(e) || !free_slip(normal) {
        return None;
    }
    along_face(g, p, e, axis).filter(|&t| flags::runs(cell_flags[t]))
}

/// The cell at `p + e` without `e`'s component along `axis`.
fn along_face(g: &Grid, p: [usize; 3], e: [i32; 3], axis: usize) -> Option<usize> {
    let mut tangential = e;
    tangential[axis] = 0;
    g.neighbour(p[0], p[1], p[2], tangential)
}

/// Where a free-slip face meets an inlet or a moving wall, a link that cannot
/// reflect specularly bounces back off that neighbour along the face instead,
/// with its velocity: the cell at `p + e` without the normal component, if
/// it is an inlet or a moving wall.
#[inline]
pub fn edge_cell(
    g: &Grid,
    cell_flags: &[u8],
    p: [usize; 3],
    e: [i32; 3],
    axis: usize,
) -> Option<usize> {
    if (0..3).all(|a| a == axis || e[a] == 0) {
        return None;
    }
    along_face(g, p, e, axis).filter(|&t| {
        matches!(
            CellType::of(cell_flags[t]),
            CellType::Inlet | CellType::MovingWall
        )
    })
}

/// What the odd step does across the link of a running cell toward its
/// neighbour along one direction d: both what arrives from there (incoming
/// opposite(d)) and where outgoing d goes (the CPU solver's `read_odd` and
/// `write_odd`). 3 bits a direction in [`odd_rules`]; `R_*` in
/// kernels/lbm/d3q19.cu.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum OddLink {
    /// The neighbour runs: slot d of the neighbour, both ways.
    Stream = 0,
    /// A wall (or a free-slip face with no reflection there): the cell's own
    /// slot opposite(d), both ways; interpolated with the link's q where
    /// it has one (only links toward walls do: `geometry::wall_links`).
    Bounce = 1,
    /// An inlet or a moving wall: bounce-back with its velocity's term.
    Moving = 2,
    /// A free-slip face: slot MIRROR[axis][d] of the cell at p + e_d without
    /// the normal component, both ways.
    Specular = 3,
    /// A free-slip face beside an inlet or a moving wall ([`edge_cell`]):
    /// bounce-back with that cell's velocity.
    Edge = 4,
    /// Beyond a non-periodic face: nothing arrives (the cell's own slot
    /// opposite(d) holds what it sent along opposite(d)), nothing is sent.
    Face = 5,
}

/// The odd step's rule across the link from running cell `p` along `e`, of
/// direction `d`.
pub fn odd_link(g: &Grid, cell_flags: &[u8], p: [usize; 3], d: usize) -> OddLink {
    let e = E[d];
    let Some(m) = g.neighbour(p[0], p[1], p[2], e) else {
        return OddLink::Face;
    };
    let mf = cell_flags[m];
    match CellType::of(mf) {
        CellType::Fluid | CellType::Outlet => OddLink::Stream,
        CellType::Wall => OddLink::Bounce,
        CellType::MovingWall | CellType::Inlet => OddLink::Moving,
        CellType::FreeSlip => {
            let axis = flags::tag(mf) as usize;
            if MIRROR[axis][d] != d && specular_partner(g, cell_flags, p, e, axis).is_some() {
                OddLink::Specular
            } else if edge_cell(g, cell_flags, p, e, axis).is_some() {
                OddLink::Edge
            } else {
                OddLink::Bounce
            }
        }
    }
}

/// The odd step's rules of running cell `c`: [`odd_link`] of direction d in
/// bits 3d..3d + 3, for d = 1..18 (`aa_boundary_rules` reads them).
pub fn odd_rules(g: &Grid, cell_flags: &[u8], c: usize) -> u64 {
    let p = g.coords(c);
    (1..Q).fold(0u64, |rules, d| {
        rules | (odd_link(g, cell_flags, p, d) as u64) << (3 * d)
    })
}

/// Whether the odd step's NEAR cells `near` (their rules `rules`, an entry
/// each) need none of `aa_boundary_rules`' free-slip, edge and outlet code,
/// so that `aa_boundary_rules_plain` can take them.
pub fn rules_are_plain(cell_flags: &[u8], near: &[u32], rules: &[u64]) -> bool {
    let slip = |r: u64| {
        (1..Q).any(|d| {
            let link = (r >> (3 * d)) & 7;
            link == OddLink::Specular as u64 || link == OddLink::Edge as u64
        })
    };
    near.iter()
        .all(|&c| CellType::of(cell_flags[c as usize]) != CellType::Outlet)
        && !rules.iter().any(|&r| slip(r))
}

/// Which NEAR cells the odd step leaves to its light path
/// (`aa_boundary_rules`' last blocks, [`light_mask`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LightCells {
    /// None: every NEAR cell by its rules.
    None,
    /// Every light cell.
    All,
    /// The light cells without a link along ±x itself that bounces back or
    /// reflects. Such a cell, beside a wall across x, takes a sector of its
    /// own for each of its 38 accesses, and on its light path the odd
    /// step's boundary kernel read more from DRAM than on the rules' path
    /// (Nsight Compute, the cavity at 256³ in FP32: 197 against 156 MB, 253
    /// against 192 µs, with a quarter of the instructions; the cause not
    /// found), and the step ran 3% slower; where the lattice fits in L2 they
    /// gain instead (the cavity as shipped, 66³: 87.5 → 90.7% of the box in
    /// FP32, 75.4 → 80.5% in 16-bit; BENCHMARKS.md, thirtieth session).
    NotAlongX,
}

/// Bit of a light mask ([`light_mask`]) for a link that reflects
/// specularly: `SPECULAR << d`.
pub const SPECULAR: u64 = 1 << 32;
/// Where a light mask keeps the axis of its cell's free-slip wall.
pub const SLIP_AXIS_SHIFT: u32 = 62;

/// Where NEAR cell `c` (odd-step rules `rules`) is light under `which`, the
/// bit mask of its links that do not stream: bit d where the link toward
/// x + e_d bounces back, `SPECULAR << d` where it reflects specularly at a
/// free-slip wall, whose axis (one for all such links of the cell) sits
/// at [`SLIP_AXIS_SHIFT`]. That is all that the kernels' light path needs:
/// a fluid cell whose links all stream, bounce back or reflect off one
/// free-slip wall, none of them onto an interpolated wall (`linked`).
pub fn light_mask(
    g: &Grid,
    cell_flags: &[u8],
    c: usize,
    rules: u64,
    linked: bool,
    which: LightCells,
) -> Option<u64> {
    if which == LightCells::None || linked || CellType::of(cell_flags[c]) != CellType::Fluid {
        return None;
    }
    let p = g.coords(c);
    let mut axis = None;
    let mut mask = 0u64;
    for d in 1..Q {
        match (rules >> (3 * d)) & 7 {
            r if r == OddLink::Stream as u64 => {}
            r if r == OddLink::Bounce as u64 => mask |= 1 << d,
            r if r == OddLink::Specular as u64 => {
                let m = g.neighbour(p[0], p[1], p[2], E[d])?;
                let a = flags::tag(cell_flags[m]) as u64;
                if *axis.get_or_insert(a) != a {
                    return None;
                }
                mask |= SPECULAR << d;
            }
            _ => return None,
        }
    }
    let along_x = (1..Q)
        .filter(|&d| E[d][1] == 0 && E[d][2] == 0)
        .any(|d| mask & (1 << d | SPECULAR << d) != 0);
    (which == LightCells::All || !along_x).then_some(mask | axis.unwrap_or(0) << SLIP_AXIS_SHIFT)
}

/// The running cells that share a `sector`-cell block of the storage (32
/// bytes of one direction's plane: 8 cells in FP32, 16 in 16-bit) with a
/// cell of the sorted list `listed` on a face across x (x = 0 or nx − 1),
/// in that cell's row, and are not listed themselves; sorted. The even
/// step reads and writes only a cell's own slots: with these in its list,
/// one warp of the list moves each such block once and the bulk kernel
/// leaves it alone, where an outlet alone in the list took a sector for
/// each of its 38 accesses and the bulk kernel moved the same sectors again.
pub fn face_sector_companions(
    g: &Grid,
    cell_flags: &[u8],
    listed: &[u32],
    sector: usize,
) -> Vec<u32> {
    let nx = g.size[0];
    let mut out = Vec::new();
    if sector <= 1 {
        return out;
    }
    for &c in listed {
        let c = c as usize;
        let x = c % nx;
        if x != 0 && x + 1 != nx {
            continue;
        }
        let row = c - x;
        let block = c - c % sector;
        for m in block.max(row)..(block + sector).min(row + nx) {
            if flags::runs(cell_flags[m]) && listed.binary_search(&(m as u32)).is_err() {
                out.push(m as u32);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The slots of layer `halo` that the odd step of the running cells in the
/// adjacent layer `edge` writes, as (direction, cell within the layer), in the
/// order of `write_odd`. The write pattern depends on the flags only (the same
/// in the kernels), so this is the exact set a slab must send back to the
/// neighbour that owns `halo`: the other slots there were written by that
/// neighbour itself (bounce-back) or by nobody.
pub fn odd_writes_into(
    grid: &Grid,
    cell_flags: &[u8],
    edge: usize,
    halo: usize,
) -> Vec<(usize, usize)> {
    let [nx, ny, _] = grid.size;
    let nxy = nx * ny;
    let mut out = Vec::new();
    for y in 0..ny {
        for x in 0..nx {
            let c = grid.index(x, y, edge);
            if !flags::runs(cell_flags[c]) {
                continue;
            }
            for i in 1..Q {
                let Some(m) = grid.neighbour(x, y, edge, E[i]) else {
                    continue;
                };
                let mf = cell_flags[m];
                let (slot, target) = match CellType::of(mf) {
                    CellType::Fluid | CellType::Outlet => (i, m),
                    CellType::FreeSlip => {
                        let axis = flags::tag(mf) as usize;
                        let ir = MIRROR[axis][i];
                        match specular_partner(grid, cell_flags, [x, y, edge], E[i], axis) {
                            Some(t) if ir != i => (ir, t),
                            _ => continue,
                        }
                    }
                    _ => continue,
                };
                if target / nxy == halo {
                    out.push((slot, target % nxy));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solver::flags::{mark_near_cells, NEAR};

    #[test]
    fn only_the_cavity_of_the_shipped_scenarios_takes_the_plain_rules_kernel() {
        for (name, plain) in [
            ("cavity", true),
            ("cube", false),
            ("cylinder", false),
            ("urban", false),
        ] {
            let (_, flags, near, rules) = near_of(name);
            assert_eq!(rules_are_plain(&flags, &near, &rules), plain, "{name}");
        }
    }

    /// The NEAR cells of a shipped scenario, its grid, flags and rules.
    fn near_of(name: &str) -> (Grid, Vec<u8>, Vec<u32>, Vec<u64>) {
        let path = format!("assets/scenarios/{name}.toml");
        let scenario = crate::scenario::Scenario::load(path.as_ref(), &[]).unwrap();
        let grid = scenario.grid();
        let mut flags = scenario.voxelize().flags;
        mark_near_cells(&grid, &mut flags);
        let near: Vec<u32> = (0..flags.len())
            .filter(|&c| flags[c] & NEAR != 0)
            .map(|c| c as u32)
            .collect();
        let rules = near
            .iter()
            .map(|&c| odd_rules(&grid, &flags, c as usize))
            .collect();
        (grid, flags, near, rules)
    }

    #[test]
    fn face_sector_companions_fill_the_outlets_sectors_in_their_rows() {
        use crate::solver::flags::even_step_differs;
        // The cube: an inlet across x = 0, an outlet across x = 255, rows of
        // 256 cells (32 sectors of 8 FP32 cells).
        let (g, flags, near, _) = near_of("cube");
        let listed: Vec<u32> = near
            .iter()
            .copied()
            .filter(|&c| even_step_differs(&g, &flags, c as usize, false))
            .collect();
        let [nx, ny, nz] = g.size;
        let outlets = listed
            .iter()
            .filter(|&&c| c as usize % nx == nx - 1)
            .count();
        // Every row but those of the free-slip and wall faces around them.
        assert_eq!(outlets, (ny - 2) * (nz - 2));
        for sector in [8, 16] {
            let extra = face_sector_companions(&g, &flags, &listed, sector);
            assert!(extra.windows(2).all(|w| w[0] < w[1]));
            // Each row's last block, less its outlet: no cell outside it.
            assert_eq!(extra.len(), outlets * (sector - 1), "sector {sector}");
            for &c in &extra {
                let c = c as usize;
                assert!(c % nx >= nx - sector && flags::runs(flags[c]));
                assert!(listed.binary_search(&(c as u32)).is_err());
            }
        }
        assert!(face_sector_companions(&g, &flags, &listed, 1).is_empty());
        // A row that does not start on a block: only its own cells.
        let g = Grid {
            size: [12, 2, 1],
            periodic: [false, true, true],
        };
        let flags = vec![0u8; 24];
        let extra = face_sector_companions(&g, &flags, &[12, 23], 8);
        assert_eq!(extra, [13, 14, 15, 16, 17, 18, 19, 20, 21, 22]);
    }

    #[test]
    fn light_masks_hold_each_link_rule_and_leave_the_lid_and_x_walls_to_the_rules() {
        // The cavity: 64³ fluid in a layer of walls, the lid at y = 65. Every
        // NEAR cell is light but the 64² beside the lid; without those with a
        // link along ±x into a wall, also not the 2 · 63 · 64 beside the x
        // walls below the lid.
        let (g, flags, near, rules) = near_of("cavity");
        let count = |which| {
            (0..near.len())
                .filter(|&k| {
                    light_mask(&g, &flags, near[k] as usize, rules[k], false, which).is_some()
                })
                .count()
        };
        assert_eq!(near.len(), 64 * 64 * 64 - 62 * 62 * 62);
        assert_eq!(count(LightCells::All), near.len() - 64 * 64);
        assert_eq!(
            count(LightCells::NotAlongX),
            near.len() - 64 * 64 - 2 * 63 * 64
        );
        assert_eq!(count(LightCells::None), 0);
        // An interpolated wall's links take the rules.
        let k = near
            .iter()
            .position(|&c| g.coords(c as usize) == [1, 1, 1])
            .unwrap();
        assert!(light_mask(
            &g,
            &flags,
            near[k] as usize,
            rules[k],
            false,
            LightCells::All
        )
        .is_some());
        assert!(light_mask(
            &g,
            &flags,
            near[k] as usize,
            rules[k],
            true,
            LightCells::All
        )
        .is_none());
        // The urban block: its free-slip top reflects along z; each mask's
        // bits are the links' rules.
        let (g, flags, near, rules) = near_of("urban");
        let mut reflecting = 0;
        for (k, &c) in near.iter().enumerate() {
            let Some(mask) = light_mask(&g, &flags, c as usize, rules[k], false, LightCells::All)
            else {
                continue;
            };
            assert_eq!(CellType::of(flags[c as usize]), CellType::Fluid);
            for d in 1..Q {
                let rule = (rules[k] >> (3 * d)) & 7;
                assert_eq!(mask >> d & 1 != 0, rule == OddLink::Bounce as u64);
                assert_eq!(mask & SPECULAR << d != 0, rule == OddLink::Specular as u64);
            }
            if mask >> 32 != 0 {
                reflecting += 1;
                assert_eq!(mask >> SLIP_AXIS_SHIFT, 2);
            }
        }
        assert!(
            reflecting >= 200 * 256,
            "{reflecting} light cells below the free-slip top"
        );
    }
}
