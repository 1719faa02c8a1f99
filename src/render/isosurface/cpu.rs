//! CPU twin of the GPU isosurface extraction, for tests only: the same
//! tetrahedra, the same edge interpolation (always from the lower grid index to
//! the higher, so both tetrahedra sharing an edge compute the same bits).

use super::tables::{corner, TETRAHEDRA};

/// Triangles (three vertices each) of the isosurface `value = iso` of a scalar
/// field on an `nx × ny × nz` grid (x fastest), in cell coordinates.
pub fn extract(field: &[f32], size: [usize; 3], iso: f32) -> Vec<[[f32; 3]; 3]> {
    let [nx, ny, nz] = size;
    let at = |p: [usize; 3]| p[0] + nx * (p[1] + ny * p[2]);
    let mut tris = Vec::new();
    for z in 0..nz.saturating_sub(1) {
        for y in 0..ny.saturating_sub(1) {
            for x in 0..nx.saturating_sub(1) {
                let pts: Vec<[usize; 3]> = (0..8)
                    .map(|k| {
                        let c = corner(k);
                        [x + c[0], y + c[1], z + c[2]]
                    })
                    .collect();
                for tet in TETRAHEDRA {
                    let p: Vec<[usize; 3]> = tet.iter().map(|&k| pts[k]).collect();
                    let v: Vec<f32> = p.iter().map(|&q| field[at(q)]).collect();
                    tetra(&p, &v, iso, &at, &mut tris);
                }
            }
        }
    }
    tris
}

/// Point where the edge between grid points `a` and `b` crosses `iso`, computed
/// from the point with the lower linear index.
pub fn edge_point(
    a: [usize; 3],
    va: f32,
    b: [usize; 3],
    vb: f32,
    iso: f32,
    at: &dyn Fn([usize; 3]) -> usize,
) -> [f32; 3] {
    let (a, va, b, vb) = if at(a) < at(b) {
        (a, va, b, vb)
    } else {
        (b, vb, a, va)
    };
    let t = (iso - va) / (vb - va);
    [0, 1, 2].map(|k| a[k] as f32 + t * (b[k] as f32 - a[k] as f32))
}

fn tetra(
    p: &[[usize; 3]],
    v: &[f32],
    iso: f32,
    at: &dyn Fn([usize; 3]) -> usize,
    out: &mut Vec<[[f32; 3]; 3]>,
) {
    let inside: Vec<usize> = (0..4).filter(|&k| v[k] < iso).collect();
    let outside: Vec<usize> = (0..4).filter(|&k| v[k] >= iso).collect();
    let e = |i: usize, o: usize| edge_point(p[i], v[i], p[o], v[o], iso, at);
    match inside.len() {
        1 => {
            let i = inside[0];
            out.push([e(i, outside[0]), e(i, outside[1]), e(i, outside[2])]);
        }
        3 => {
            let o = outside[0];
            out.push([e(inside[0], o), e(inside[1], o), e(inside[2], o)]);
        }
        2 => {
            let (a, b) = (inside[0], inside[1]);
            let (c, d) = (outside[0], outside[1]);
            let (p0, p1, p2, p3) = (e(a, c), e(a, d), e(b, d), e(b, c));
            out.push([p0, p1, p2]);
            out.push([p0, p2, p3]);
        }
        _ => {}
    }
}

/// Sum of triangle areas.
pub fn area(tris: &[[[f32; 3]; 3]]) -> f64 {
    tris.iter()
        .map(|t| {
            let u = [0, 1, 2].map(|k| (t[1][k] - t[0][k]) as f64);
            let v = [0, 1, 2].map(|k| (t[2][k] - t[0][k]) as f64);
            let c = [
                u[1] * v[2] - u[2] * v[1],
                u[2] * v[0] - u[0] * v[2],
                u[0] * v[1] - u[1] * v[0],
            ];
            0.5 * (c[0] * c[0] + c[1] * c[1] + c[2] * c[2]).sqrt()
        })
        .sum()
}

/// Edges used by other than exactly two triangles (by exact vertex bits); empty
/// for a closed, watertight surface. Degenerate triangles (an edge of zero
/// length) are skipped, as they add no surface.
pub fn open_edges(tris: &[[[f32; 3]; 3]]) -> Vec<([u32; 3], [u32; 3], usize)> {
    use std::collections::HashMap;
    let key = |p: [f32; 3]| p.map(f32::to_bits);
    let mut count: HashMap<([u32; 3], [u32; 3]), usize> = HashMap::new();
    for t in tris {
        let k = [key(t[0]), key(t[1]), key(t[2])];
        if k[0] == k[1] || k[1] == k[2] || k[0] == k[2] {
            continue;
        }
        for (a, b) in [(0, 1), (1, 2), (2, 0)] {
            let e = if k[a] < k[b] {
                (k[a], k[b])
            } else {
                (k[b], k[a])
            };
            *count.entry(e).or_default() += 1;
        }
    }
    count
        .into_iter()
        .filter(|(_, n)| *n != 2)
        .map(|(e, n)| (e.0, e.1, n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance from a point near the grid's centre (so no vertex sits on a
    /// grid point by symmetry).
    fn distance_field(n: usize) -> Vec<f32> {
        let c = [
            (n - 1) as f32 / 2.0 + 0.13,
            (n - 1) as f32 / 2.0 - 0.07,
            (n - 1) as f32 / 2.0 + 0.21,
        ];
        let mut f = vec![0.0; n * n * n];
        for z in 0..n {
            for y in 0..n {
                for x in 0..n {
                    let d = [x as f32 - c[0], y as f32 - c[1], z as f32 - c[2]];
                    f[x + n * (y + n * z)] = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
                }
            }
        }
        f
    }

    #[test]
    fn cpu_twin_extracts_a_closed_sphere_of_the_right_area() {
        let r = 20.0;
        let f = distance_field(64);
        let tris = extract(&f, [64, 64, 64], r);
        assert!(open_edges(&tris).is_empty());
        let a = area(&tris);
        let exact = 4.0 * std::f64::consts::PI * (r as f64).powi(2);
        assert!((a - exact).abs() / exact < 0.01, "area {a} vs {exact}");
    }
}
