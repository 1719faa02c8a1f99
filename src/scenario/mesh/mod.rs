//! Triangle meshes as obstacles: reading STL, refusing broken meshes, placing a
//! mesh in the grid, and turning it into solid cells by ray parity.
//!
//! Voxelisation casts one ray along +x through each column of cell centres
//! `(y, z)` and counts the triangles it crosses before each centre: a cell is
//! solid where that count is odd. Rays through an edge or a vertex are decided
//! by a fixed infinitesimal shift of the ray (simulation of simplicity), the
//! same in every triangle that shares the edge, so each crossing of the surface
//! counts exactly once and a closed mesh never leaks. The arithmetic is f64
//! without fused multiply-adds, and the CUDA voxeliser does the same
//! operations, so both give the same cells.

pub mod cuda;
pub mod stl;

use std::path::Path;

use rayon::prelude::*;

pub use stl::Triangle;

/// A mesh placed in the grid: triangles in cell coordinates.
#[derive(Clone, Default, PartialEq)]
pub struct PlacedMesh {
    pub triangles: Vec<[[f64; 3]; 3]>,
    /// Bounding box in cells.
    pub lo: [f64; 3],
    pub hi: [f64; 3],
}

impl std::fmt::Debug for PlacedMesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PlacedMesh({} triangles, {:?} to {:?})",
            self.triangles.len(),
            self.lo,
            self.hi
        )
    }
}

/// The mesh obstacles of a scenario as the window draws them: their triangles
/// (cells of the solver's grid, f32) and their flag tags, whose voxels it
/// then leaves out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObstacleMeshes {
    pub tags: Vec<u8>,
    pub triangles: Vec<[[f32; 3]; 3]>,
}

impl ObstacleMeshes {
    pub fn of(scenario: &super::Scenario) -> ObstacleMeshes {
        let mut out = ObstacleMeshes::default();
        for (k, o) in scenario.obstacles.iter().enumerate() {
            if let super::Shape::Mesh { placed, .. } = o {
                out.tags.push((k + 1) as u8);
                out.triangles.extend(
                    placed
                        .triangles
                        .iter()
                        .map(|t| t.map(|v| v.map(|c| c as f32))),
                );
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.tags.is_empty()
    }
}

/// The `[[obstacles]]` table that adds the mesh in `path` to a grid of
/// `size`: centred across the flow a quarter of the way along x, scaled so
/// that its largest side spans a quarter of the grid's smallest one. For
/// meshes opened in the window; the mesh is read (and checked) here.
pub fn obstacle_table(path: &Path, size: [usize; 3]) -> Result<String, String> {
    let triangles = load_cached(path)?;
    let (lo, hi) = bounding_box(&triangles);
    let extent = (0..3).map(|a| hi[a] - lo[a]).fold(0.0, f64::max);
    let smallest = size.iter().copied().min().unwrap_or(1) as f64;
    let scale = if extent > 0.0 {
        0.25 * smallest / extent
    } else {
        1.0
    };
    let center = [
        0.25 * (size[0] as f64 - 1.0),
        0.5 * (size[1] as f64 - 1.0),
        0.5 * (size[2] as f64 - 1.0),
    ];
    // TOML basic strings: backslashes and quotes escaped.
    let file = path
        .display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    Ok(format!(
        "\n[[obstacles]]\nshape = \"mesh\"\nfile = \"{file}\"\nscale = {scale}\ncenter = [{}, {}, {}]\n",
        center[0], center[1], center[2]
    ))
}

/// Reads an STL mesh and refuses it where it is not a closed, consistently
/// oriented surface of finite, non-degenerate triangles. The error names the
/// file and the defect.
pub fn load(path: &Path) -> Result<Vec<Triangle>, String> {
    let name = path.display();
    // Meshes of a million triangles and more take a second or longer to read
    // and check: a spinner on the terminal says what is happening (indicatif
    // draws nothing where stderr is not a terminal).
    let bytes = std::fs::metadata(path).map_or(0, |m| m.len());
    let spinner = (bytes > PROGRESS_BYTES).then(|| {
        let s = indicatif::ProgressBar::new_spinner();
        s.set_message(format!(
            "reading the mesh {name} ({} MB)",
            bytes / 1_000_000
        ));
        s.enable_steady_tick(std::time::Duration::from_millis(100));
        s
    });
    let triangles = stl::read(path).map_err(|e| format!("the mesh {name} {e}"))?;
    if let Some(s) = &spinner {
        s.set_message(format!(
            "checking the mesh {name} ({} triangles)",
            triangles.len()
        ));
    }
    let checked = check(&triangles).map_err(|e| format!("the mesh {name}: {e}"));
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    checked.map(|_| triangles)
}

/// Files above this size get a spinner while they load (about a million
/// triangles).
const PROGRESS_BYTES: u64 = 40_000_000;

/// [`load`], keeping the last meshes read: a scenario is parsed again for
/// every live change, and a large mesh takes a second to read and check.
pub fn load_cached(path: &Path) -> Result<std::sync::Arc<Vec<Triangle>>, String> {
    use std::sync::{Arc, Mutex};
    type Stamp = (std::path::PathBuf, Option<std::time::SystemTime>, u64);
    static CACHE: Mutex<Vec<(Stamp, Arc<Vec<Triangle>>)>> = Mutex::new(Vec::new());
    let meta = std::fs::metadata(path).ok();
    let stamp: Stamp = (
        path.to_path_buf(),
        meta.as_ref().and_then(|m| m.modified().ok()),
        meta.as_ref().map_or(0, |m| m.len()),
    );
    if let Some((_, t)) = CACHE.lock().unwrap().iter().find(|(s, _)| *s == stamp) {
        return Ok(t.clone());
    }
    let triangles = Arc::new(load(path)?);
    let mut cache = CACHE.lock().unwrap();
    cache.retain(|(s, _)| s.0 != stamp.0);
    if cache.len() >= 4 {
        cache.remove(0);
    }
    cache.push((stamp, triangles.clone()));
    Ok(triangles)
}

/// The defects that make a mesh unusable as a solid (see [`load`]).
pub fn check(triangles: &[Triangle]) -> Result<(), String> {
    let bad = |pred: &(dyn Fn(&Triangle) -> bool + Sync)| {
        let count = triangles.par_iter().filter(|t| pred(t)).count();
        let first = triangles.iter().position(pred);
        (count, first.map(|k| k + 1))
    };
    if let (n, Some(first)) = bad(&|t| !t.iter().flatten().all(|c| c.is_finite())) {
        return Err(format!(
            "{n} triangles have a coordinate that is not a finite number (the first is triangle {first})"
        ));
    }
    if let (n, Some(first)) = bad(&|t| area2(t) == 0.0) {
        return Err(format!(
            "{n} degenerate triangles (zero area: repeated or collinear vertices; the first is triangle {first}); remove them in a mesh tool"
        ));
    }
    let (open, flipped) = edge_defects(triangles);
    if open > 0 {
        return Err(format!(
            "{open} open edges: the mesh is not closed (every edge must be shared by an even number of triangles, usually two); close its holes in a mesh tool"
        ));
    }
    if flipped > 0 {
        return Err(format!(
            "{flipped} edges where neighbouring triangles disagree on orientation: the normals are inconsistent; reorient the faces in a mesh tool"
        ));
    }
    Ok(())
}

/// Twice the area of a triangle, squared (in f64 of its f32 coordinates).
fn area2(t: &Triangle) -> f64 {
    let [p0, p1, p2] = t.map(|v| glam::DVec3::from(v.map(f64::from)));
    (p1 - p0).cross(p2 - p0).length_squared()
}

/// Counts edges used by an odd number of triangles (open), and edges used an
/// even number of times but not as often in each direction (inconsistent
/// orientation). Vertices are the same where their coordinates are.
fn edge_defects(triangles: &[Triangle]) -> (usize, usize) {
    let key = |v: [f32; 3]| v.map(|c| if c == 0.0 { 0 } else { c.to_bits() });
    // Vertex ids by sorting the coordinates.
    let mut keys: Vec<([u32; 3], u32)> = triangles
        .par_iter()
        .enumerate()
        .flat_map_iter(|(k, t)| (0..3).map(move |j| (key(t[j]), (3 * k + j) as u32)))
        .collect();
    keys.par_sort_unstable();
    let mut id = vec![0u32; keys.len()];
    let mut next = 0u32;
    for (k, (v, slot)) in keys.iter().enumerate() {
        if k > 0 && keys[k - 1].0 != *v {
            next += 1;
        }
        id[*slot as usize] = next;
    }
    // Edges as (low id, high id, +1 forward / -1 backward).
    let mut edges: Vec<(u32, u32, i32)> = (0..triangles.len())
        .into_par_iter()
        .flat_map_iter(|k| {
            let id = &id;
            (0..3).map(move |j| {
                let (a, b) = (id[3 * k + j], id[3 * k + (j + 1) % 3]);
                if a < b {
                    (a, b, 1)
                } else {
                    (b, a, -1)
                }
            })
        })
        .collect();
    edges.par_sort_unstable();
    let (mut open, mut flipped) = (0, 0);
    for group in edges.chunk_by(|x, y| (x.0, x.1) == (y.0, y.1)) {
        let balance: i32 = group.iter().map(|e| e.2).sum();
        if group.len() % 2 == 1 {
            open += 1;
        } else if balance != 0 {
            flipped += 1;
        }
    }
    (open, flipped)
}

/// Bounding box of triangles.
pub fn bounding_box(triangles: &[Triangle]) -> ([f64; 3], [f64; 3]) {
    bounds_of(triangles.iter().flatten().map(|v| v.map(f64::from)))
}

fn bounds_of(points: impl Iterator<Item = [f64; 3]>) -> ([f64; 3], [f64; 3]) {
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    for v in points {
        for a in 0..3 {
            lo[a] = lo[a].min(v[a]);
            hi[a] = hi[a].max(v[a]);
        }
    }
    (lo, hi)
}

/// Places a mesh in the grid: its bounding-box centre moves to `center`
/// (cells), it is scaled by `scale` (mesh units to cells) and rotated by
/// `rotate` degrees about x, then y, then z.
pub fn place(triangles: &[Triangle], scale: f64, center: [f64; 3], rotate: [f64; 3]) -> PlacedMesh {
    let (lo, hi) = bounding_box(triangles);
    let mid = [0, 1, 2].map(|a| 0.5 * (lo[a] + hi[a]));
    let r = rotation(rotate);
    let tf = |v: [f32; 3]| -> [f64; 3] {
        let d = [0, 1, 2].map(|a| (f64::from(v[a]) - mid[a]) * scale);
        [0, 1, 2].map(|i| center[i] + r[i][0] * d[0] + r[i][1] * d[1] + r[i][2] * d[2])
    };
    let placed: Vec<[[f64; 3]; 3]> = triangles.par_iter().map(|t| t.map(tf)).collect();
    let (lo, hi) = bounds_of(placed.iter().flatten().copied());
    PlacedMesh {
        triangles: placed,
        lo,
        hi,
    }
}

/// Rz · Ry · Rx for angles in degrees: x first.
fn rotation(deg: [f64; 3]) -> [[f64; 3]; 3] {
    let [(sx, cx), (sy, cy), (sz, cz)] = deg.map(|d| d.to_radians().sin_cos());
    let rx = [[1.0, 0.0, 0.0], [0.0, cx, -sx], [0.0, sx, cx]];
    let ry = [[cy, 0.0, sy], [0.0, 1.0, 0.0], [-sy, 0.0, cy]];
    let rz = [[cz, -sz, 0.0], [sz, cz, 0.0], [0.0, 0.0, 1.0]];
    let mul = |a: [[f64; 3]; 3], b: [[f64; 3]; 3]| {
        std::array::from_fn(|i| std::array::from_fn(|j| (0..3).map(|k| a[i][k] * b[k][j]).sum()))
    };
    mul(rz, mul(ry, rx))
}

/// The canonical edge function of edge `p`–`q` in the (y, z) plane at `(y,
/// z)`, and the side an on-edge point falls to: the edge is taken from its
/// lower to its higher end (by y, then z) whichever triangle asks, so that
/// neighbours compute the same number; the on-edge sign is that of the
/// function at the ray shifted by (ε, ε²). Returns the value signed for the
/// direction p → q and that sign (never 0).
#[inline(always)]
fn edge(p: [f64; 2], q: [f64; 2], y: f64, z: f64) -> (f64, f64) {
    let forward = p[0] < q[0] || (p[0] == q[0] && p[1] < q[1]);
    let (a, b) = if forward { (p, q) } else { (q, p) };
    let e = (b[0] - a[0]) * (z - a[1]) - (b[1] - a[1]) * (y - a[0]);
    let side = if e != 0.0 {
        e
    } else if b[1] != a[1] {
        a[1] - b[1]
    } else {
        b[0] - a[0]
    };
    let sign = 1f64.copysign(side);
    if forward {
        (e, sign)
    } else {
        (-e, -sign)
    }
}

/// Calls `hit(y, z, first)` for every column of cell centres `(y, z)` that
/// triangle `t` crosses, with the first cell index along x at or beyond the
/// crossing (not clamped to the grid).
#[inline(always)]
pub fn crossings(t: &[[f64; 3]; 3], ny: usize, nz: usize, mut hit: impl FnMut(usize, usize, i64)) {
    let yz = t.map(|v| [v[1], v[2]]);
    let area = (yz[1][0] - yz[0][0]) * (yz[2][1] - yz[0][1])
        - (yz[1][1] - yz[0][1]) * (yz[2][0] - yz[0][0]);
    if area == 0.0 {
        // Edge-on to the rays: the shifted ray misses it.
        return;
    }
    let lo = |a: usize| t[0][a].min(t[1][a]).min(t[2][a]).ceil().max(0.0);
    let hi = |a: usize, n: usize| {
        t[0][a]
            .max(t[1][a])
            .max(t[2][a])
            .floor()
            .min(n as f64 - 1.0)
    };
    let (y0, y1, z0, z1) = (lo(1), hi(1, ny), lo(2), hi(2, nz));
    if y0 > y1 || z0 > z1 {
        return;
    }
    for z in z0 as usize..=z1 as usize {
        for y in y0 as usize..=y1 as usize {
            let (yf, zf) = (y as f64, z as f64);
            // w_k: the edge function opposite vertex k.
            let (w0, s0) = edge(yz[1], yz[2], yf, zf);
            let (w1, s1) = edge(yz[2], yz[0], yf, zf);
            let (w2, s2) = edge(yz[0], yz[1], yf, zf);
            if s0 != s1 || s1 != s2 {
                continue;
            }
            let sum = w0 + w1 + w2;
            if sum == 0.0 {
                // A sliver whose edges all round through the centre.
                continue;
            }
            let x = (w0 * t[0][0] + w1 * t[1][0] + w2 * t[2][0]) / sum;
            hit(y, z, x.ceil() as i64);
        }
    }
}

/// Solid cells of a closed mesh in a grid of `size`: bit `c % 32` of word `c /
/// 32` for cell `c = x + nx (y + ny z)`.
pub fn solid_bits(mesh: &PlacedMesh, size: [usize; 3]) -> Vec<u32> {
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    let [nx, ny, nz] = size;
    let words = (nx * ny * nz).div_ceil(32);
    let flips: Vec<AtomicU32> = (0..words).map(|_| AtomicU32::new(0)).collect();
    mesh.triangles.par_iter().for_each(|t| {
        crossings(t, ny, nz, |y, z, first| {
            if first < nx as i64 {
                let c = first.max(0) as usize + nx * (y + ny * z);
                flips[c / 32].fetch_xor(1 << (c % 32), Relaxed);
            }
        })
    });
    let flips: Vec<u32> = flips.into_iter().map(AtomicU32::into_inner).collect();
    parity(&flips, size)
}

/// Running parity of the flip bits along each column (x).
pub fn parity(flips: &[u32], size: [usize; 3]) -> Vec<u32> {
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    let [nx, ny, nz] = size;
    let out: Vec<AtomicU32> = (0..flips.len()).map(|_| AtomicU32::new(0)).collect();
    (0..ny * nz).into_par_iter().for_each(|col| {
        let base = nx * col;
        let mut inside = false;
        let mut word = 0u32;
        for x in 0..nx {
            let c = base + x;
            inside ^= flips[c / 32] >> (c % 32) & 1 == 1;
            if inside {
                word |= 1 << (c % 32);
            }
            if c % 32 == 31 || x == nx - 1 {
                if word != 0 {
                    out[c / 32].fetch_or(word, Relaxed);
                }
                word = 0;
            }
        }
    });
    out.into_iter().map(AtomicU32::into_inner).collect()
}

/// An icosphere: the icosahedron with each face split `levels` times, its
/// vertices on the sphere (outward orientation). For tests and benchmarks.
pub fn icosphere(radius: f32, levels: u32) -> Vec<Triangle> {
    let g = (1.0 + 5f32.sqrt()) / 2.0;
    let v = [
        [-1.0, g, 0.0],
        [1.0, g, 0.0],
        [-1.0, -g, 0.0],
        [1.0, -g, 0.0],
        [0.0, -1.0, g],
        [0.0, 1.0, g],
        [0.0, -1.0, -g],
        [0.0, 1.0, -g],
        [g, 0.0, -1.0],
        [g, 0.0, 1.0],
        [-g, 0.0, -1.0],
        [-g, 0.0, 1.0],
    ];
    let faces = [
        [0, 11, 5],
        [0, 5, 1],
        [0, 1, 7],
        [0, 7, 10],
        [0, 10, 11],
        [1, 5, 9],
        [5, 11, 4],
        [11, 10, 2],
        [10, 7, 6],
        [7, 1, 8],
        [3, 9, 4],
        [3, 4, 2],
        [3, 2, 6],
        [3, 6, 8],
        [3, 8, 9],
        [4, 9, 5],
        [2, 4, 11],
        [6, 2, 10],
        [8, 6, 7],
        [9, 8, 1],
    ];
    // Vertices in f64 on the unit sphere; a midpoint is computed from its two
    // ends in a fixed order so neighbouring faces share it exactly.
    let unit = |p: [f64; 3]| {
        let l = (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt();
        p.map(|c| c / l)
    };
    let mut tris: Vec<[[f64; 3]; 3]> = faces
        .iter()
        .map(|f| f.map(|k| unit(v[k].map(f64::from))))
        .collect();
    let mid = |a: [f64; 3], b: [f64; 3]| {
        let (a, b) = if a < b { (a, b) } else { (b, a) };
        unit([0, 1, 2].map(|k| a[k] + b[k]))
    };
    for _ in 0..levels {
        tris = tris
            .iter()
            .flat_map(|&[a, b, c]| {
                let (ab, bc, ca) = (mid(a, b), mid(b, c), mid(c, a));
                [[a, ab, ca], [b, bc, ab], [c, ca, bc], [ab, bc, ca]]
            })
            .collect();
    }
    tris.iter()
        .map(|t| t.map(|p| p.map(|c| (c * f64::from(radius)) as f32)))
        .collect()
}

/// A regular octahedron with its vertices at ±`half` on the axes (outward
/// orientation): rays along x through its centre pass through two vertices,
/// a test of the tie rule.
pub fn octahedron(half: f32) -> Vec<Triangle> {
    let s = half;
    let v = [
        [s, 0.0, 0.0],
        [-s, 0.0, 0.0],
        [0.0, s, 0.0],
        [0.0, -s, 0.0],
        [0.0, 0.0, s],
        [0.0, 0.0, -s],
    ];
    [(2, 4), (4, 3), (3, 5), (5, 2)]
        .iter()
        .flat_map(|&(a, b)| [[v[0], v[a], v[b]], [v[1], v[b], v[a]]])
        .collect()
}

/// An axis-aligned box from `lo` to `hi` as 12 outward triangles.
pub fn box_mesh(lo: [f32; 3], hi: [f32; 3]) -> Vec<Triangle> {
    let p = |k: usize| {
        [
            if k & 1 == 0 { lo[0] } else { hi[0] },
            if k & 2 == 0 { lo[1] } else { hi[1] },
            if k & 4 == 0 { lo[2] } else { hi[2] },
        ]
    };
    // Quads (outward, counter-clockwise seen from outside).
    let quads = [
        [0, 2, 3, 1], // z lo
        [4, 5, 7, 6], // z hi
        [0, 1, 5, 4], // y lo
        [2, 6, 7, 3], // y hi
        [0, 4, 6, 2], // x lo
        [1, 3, 7, 5], // x hi
    ];
    quads
        .iter()
        .flat_map(|q| [[p(q[0]), p(q[1]), p(q[2])], [p(q[0]), p(q[2]), p(q[3])]])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(bits: &[u32]) -> u64 {
        bits.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    #[test]
    fn closed_meshes_pass_and_defects_are_named() {
        assert_eq!(check(&icosphere(1.0, 2)), Ok(()));
        let mut open = icosphere(1.0, 1);
        open.pop();
        assert!(check(&open).unwrap_err().contains("3 open edges"));
        let mut flipped = box_mesh([0.0; 3], [1.0; 3]);
        flipped[0].swap(1, 2);
        flipped[1].swap(1, 2);
        let e = check(&flipped).unwrap_err();
        assert!(
            e.contains("4 edges where neighbouring triangles disagree"),
            "{e}"
        );
        let mut degenerate = box_mesh([0.0; 3], [1.0; 3]);
        degenerate.push([[0.0; 3], [0.5, 0.5, 0.5], [1.0; 3]]);
        degenerate.push([[0.0; 3], [1.0; 3], [0.5, 0.5, 0.5]]);
        let e = check(&degenerate).unwrap_err();
        assert!(
            e.contains("2 degenerate") && e.contains("triangle 13"),
            "{e}"
        );
        let mut nan = box_mesh([0.0; 3], [1.0; 3]);
        nan[5][2][1] = f32::NAN;
        let e = check(&nan).unwrap_err();
        assert!(
            e.contains("1 triangles have a coordinate") && e.contains("triangle 6"),
            "{e}"
        );
    }

    #[test]
    fn a_box_mesh_fills_the_cells_whose_centres_it_holds() {
        // Faces on cell centres: the crossing at a centre counts that cell in.
        let mesh = place(
            &box_mesh([2.0, 3.0, 4.0], [9.5, 7.0, 8.0]),
            1.0,
            [5.75, 5.0, 6.0],
            [0.0; 3],
        );
        let size = [14, 11, 12];
        let bits = solid_bits(&mesh, size);
        for z in 0..size[2] {
            for y in 0..size[1] {
                for x in 0..size[0] {
                    let c = x + size[0] * (y + size[1] * z);
                    let inside =
                        (2..=9).contains(&x) && (3..=7).contains(&y) && (4..=8).contains(&z);
                    // The max faces on centres (y 7, z 8) are grazed: the
                    // shifted ray decides; x 9.5 lies between centres.
                    let solid = bits[c / 32] >> (c % 32) & 1 == 1;
                    let grazed = y == 7 || z == 8 || y == 3 || z == 4;
                    if !grazed {
                        assert_eq!(solid, inside, "cell {x} {y} {z}");
                    }
                }
            }
        }
        // Exactly one of each pair of opposite grazed layers is in.
        assert_eq!(count(&bits), 8 * 4 * 4);
    }

    #[test]
    fn rays_through_shared_vertices_and_edges_count_once() {
        // An octahedron centred on a cell centre, its vertices on centres:
        // the central ray passes through two vertices.
        let tris = octahedron(4.0);
        assert_eq!(check(&tris), Ok(()));
        let mesh = place(&tris, 1.0, [8.0, 8.0, 8.0], [0.0; 3]);
        let bits = solid_bits(&mesh, [17, 17, 17]);
        // |x| + |y| + |z| ≤ 4 about the centre, less the cells the shifted
        // rays leave out on the faces: never a whole column filled by a leak.
        for z in 0..17 {
            for y in 0..17 {
                let row: Vec<bool> = (0..17)
                    .map(|x| {
                        let c = x + 17 * (y + 17 * z);
                        bits[c / 32] >> (c % 32) & 1 == 1
                    })
                    .collect();
                assert!(!row[0] && !row[16], "leak in column {y} {z}");
                let d = (y as i32 - 8).abs() + (z as i32 - 8).abs();
                let n = row.iter().filter(|&&b| b).count() as i32;
                if d < 4 {
                    assert!(
                        (2 * (4 - d) - 1..=2 * (4 - d) + 1).contains(&n),
                        "{y} {z}: {n}"
                    );
                } else if d > 4 {
                    assert_eq!(n, 0);
                }
            }
        }
    }

    #[test]
    fn rotation_turns_x_into_y_about_z() {
        let r = rotation([0.0, 0.0, 90.0]);
        let v = [0, 1, 2].map(|i| r[i][0]);
        assert!((v[0]).abs() < 1e-12 && (v[1] - 1.0).abs() < 1e-12);
        // x first: 90° about x takes y to z, then 90° about z takes x to y.
        let r = rotation([90.0, 0.0, 90.0]);
        let y = [0, 1, 2].map(|i| r[i][1]);
        assert!((y[2] - 1.0).abs() < 1e-12, "{y:?}");
    }
}
