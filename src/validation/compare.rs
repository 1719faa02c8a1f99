//! Agreement of two solvers' fields.

use crate::solver::flags;
use crate::solver::Fields;

/// How far fields `b` are from the reference `a` over running cells.
#[derive(Clone, Debug, PartialEq)]
pub struct Agreement {
    /// Largest |u_b − u_a| component difference (lattice units).
    pub max_abs_u: f64,
    /// Largest |ρ_b − ρ_a|.
    pub max_abs_rho: f64,
    /// Largest ‖u_b − u_a‖ relative to the largest ‖u_a‖.
    pub max_rel_speed: f64,
    /// Cells where either side is not finite.
    pub non_finite: usize,
}

pub fn agreement(a: &Fields, b: &Fields, cell_flags: &[u8]) -> Agreement {
    let mut out = Agreement {
        max_abs_u: 0.0,
        max_abs_rho: 0.0,
        max_rel_speed: 0.0,
        non_finite: 0,
    };
    let mut max_speed = 0.0f64;
    let mut max_diff = 0.0f64;
    for c in 0..a.rho.len() {
        if !flags::runs(cell_flags[c]) {
            continue;
        }
        let (ua, ub) = (a.velocity(c), b.velocity(c));
        if !(ua.iter().chain(&ub).all(|v| v.is_finite())
            && a.rho[c].is_finite()
            && b.rho[c].is_finite())
        {
            out.non_finite += 1;
            continue;
        }
        let d: Vec<f64> = (0..3).map(|k| ub[k] as f64 - ua[k] as f64).collect();
        out.max_abs_u = d.iter().fold(out.max_abs_u, |m, v| m.max(v.abs()));
        out.max_abs_rho = out
            .max_abs_rho
            .max((b.rho[c] as f64 - a.rho[c] as f64).abs());
        max_diff = max_diff.max(d.iter().map(|v| v * v).sum::<f64>().sqrt());
        max_speed = max_speed.max(ua.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt());
    }
    out.max_rel_speed = if max_speed > 0.0 {
        max_diff / max_speed
    } else {
        max_diff
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_fields_agree_and_a_difference_is_found() {
        let mut a = Fields::new([4, 3, 2]);
        for c in 0..24 {
            a.ux[c] = 0.01 * c as f32;
        }
        let flags = vec![0u8; 24];
        let same = agreement(&a, &a.clone(), &flags);
        assert_eq!(
            (same.max_abs_u, same.max_rel_speed, same.non_finite),
            (0.0, 0.0, 0)
        );
        let mut b = a.clone();
        b.uy[5] = 0.023;
        b.rho[7] = f32::NAN;
        let d = agreement(&a, &b, &flags);
        assert!((d.max_abs_u - 0.023).abs() < 1e-7);
        assert!((d.max_rel_speed - 0.023 / 0.23).abs() < 1e-6);
        assert_eq!(d.non_finite, 1);
    }
}
