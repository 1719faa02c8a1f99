//! The 2D lid-driven cavity benchmark of Ghia, Ghia & Shin (1982), J. Comput.
//! Phys. 48:387–411, Tables I and II (`assets/reference/`).

use crate::solver::Fields;

const U_TABLE: &str = include_str!("../../assets/reference/ghia1982_u_vertical_centerline.csv");
const V_TABLE: &str = include_str!("../../assets/reference/ghia1982_v_horizontal_centerline.csv");

/// The Reynolds numbers of the tables' columns, in order.
pub const REYNOLDS: [f64; 3] = [100.0, 400.0, 1000.0];

/// Rows `(coordinate, [value at each of REYNOLDS])`.
fn table(text: &str) -> Vec<(f64, [f64; 3])> {
    text.lines()
        .filter(|l| {
            !l.starts_with('#')
                && !l.trim().is_empty()
                && !l.starts_with(|c: char| c.is_alphabetic())
        })
        .filter_map(|l| {
            let v: Vec<f64> = l.split(',').filter_map(|x| x.trim().parse().ok()).collect();
            (v.len() == 4).then(|| (v[0], [v[1], v[2], v[3]]))
        })
        .collect()
}

/// Deviation of a simulated cavity from Ghia's centreline profiles.
#[derive(Clone, Debug, PartialEq)]
pub struct Deviation {
    /// Largest |simulated − reference| in units of the lid speed, over the points
    /// not skipped.
    pub max: f64,
    pub rms: f64,
    /// (profile 'u' or 'v', coordinate, deviation) of every point.
    pub points: Vec<(char, f64, f64)>,
}

/// Linear interpolation in a profile sampled at the wall (0.5), the fluid cell
/// centres 1..=n and the opposite wall (n + 0.5).
fn interpolate(fluid: &[f64], walls: (f64, f64), p: f64) -> f64 {
    let n = fluid.len();
    let mut xs = vec![0.5];
    let mut vs = vec![walls.0];
    for (k, v) in fluid.iter().enumerate() {
        xs.push((k + 1) as f64);
        vs.push(*v);
    }
    xs.push(n as f64 + 0.5);
    vs.push(walls.1);
    let i = xs
        .iter()
        .rposition(|&x| x <= p)
        .unwrap_or(0)
        .min(xs.len() - 2);
    let t = (p - xs[i]) / (xs[i + 1] - xs[i]);
    vs[i] * (1.0 - t) + vs[i + 1] * t
}

/// Compares the steady fields of a quasi-2D cavity (n x n fluid cells in x and y
/// inside one wall layer, lid at y = n + 1 moving in +x at `lid`) with Ghia's
/// tables at `reynolds` (one of [`REYNOLDS`]). Points in `skip` are reported, not counted.
pub fn cavity_deviation(
    f: &Fields,
    n: usize,
    lid: f64,
    reynolds: f64,
    skip: &[(char, f64)],
) -> Deviation {
    let z = f.size[2] / 2;
    // Half-way bounce-back: the walls sit at 0.5 and n + 0.5, the cavity centre
    // at 0.5 + n/2.
    let mid = 0.5 + 0.5 * n as f64;
    let (a, b) = (mid.floor() as usize, mid.ceil() as usize);
    let t = mid - mid.floor();
    let u_centre: Vec<f64> = (1..=n)
        .map(|y| {
            (f.ux[f.index(a, y, z)] as f64 * (1.0 - t) + f.ux[f.index(b, y, z)] as f64 * t) / lid
        })
        .collect();
    let v_centre: Vec<f64> = (1..=n)
        .map(|x| {
            (f.uy[f.index(x, a, z)] as f64 * (1.0 - t) + f.uy[f.index(x, b, z)] as f64 * t) / lid
        })
        .collect();
    let column = REYNOLDS
        .iter()
        .position(|&r| r == reynolds)
        .unwrap_or_else(|| {
            panic!("Ghia's tables in assets/reference hold Re {REYNOLDS:?}, not {reynolds}")
        });
    let pick = |row: &(f64, [f64; 3])| row.1[column];
    let mut points = Vec::new();
    for r in table(U_TABLE) {
        points.push((
            'u',
            r.0,
            (interpolate(&u_centre, (0.0, 1.0), 0.5 + r.0 * n as f64) - pick(&r)).abs(),
        ));
    }
    for r in table(V_TABLE) {
        points.push((
            'v',
            r.0,
            (interpolate(&v_centre, (0.0, 0.0), 0.5 + r.0 * n as f64) - pick(&r)).abs(),
        ));
    }
    let counted: Vec<f64> = points
        .iter()
        .filter(|p| !skip.contains(&(p.0, p.1)))
        .map(|p| p.2)
        .collect();
    Deviation {
        max: counted.iter().cloned().fold(0.0, f64::max),
        rms: (counted.iter().map(|d| d * d).sum::<f64>() / counted.len().max(1) as f64).sqrt(),
        points,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tables_have_all_rows() {
        assert_eq!(super::table(super::U_TABLE).len(), 17);
        assert_eq!(super::table(super::V_TABLE).len(), 17);
        // Spot values of the Re 1000 column (Ghia's minimum of u, maximum of v).
        let u = super::table(super::U_TABLE);
        assert_eq!(u[11], (0.1719, [-0.10150, -0.24299, -0.38289]));
        let v = super::table(super::V_TABLE);
        assert_eq!(v[11].1[2], 0.37095);
    }
}
