//! Probe lines: fields sampled trilinearly at points along a segment.

use crate::solver::Fields;

/// A segment from `start` to `end` (cell coordinates) with `points` samples.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeLine {
    pub start: [f64; 3],
    pub end: [f64; 3],
    pub points: usize,
}

impl std::str::FromStr for ProbeLine {
    type Err = String;

    /// Parses `X0,Y0,Z0:X1,Y1,Z1:N`.
    fn from_str(s: &str) -> Result<ProbeLine, String> {
        let usage = || format!("probe `{s}`: expected X0,Y0,Z0:X1,Y1,Z1:N, e.g. 32,0,2:32,65,2:65");
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() != 3 {
            return Err(usage());
        }
        let point = |p: &str| -> Result<[f64; 3], String> {
            let v: Vec<f64> = p
                .split(',')
                .map(|c| c.trim().parse::<f64>())
                .collect::<Result<_, _>>()
                .map_err(|_| usage())?;
            v.try_into().map_err(|_| usage())
        };
        let points: usize = parts[2].trim().parse().map_err(|_| usage())?;
        if points == 0 {
            return Err(format!("probe `{s}`: N must be at least 1"));
        }
        Ok(ProbeLine {
            start: point(parts[0])?,
            end: point(parts[1])?,
            points,
        })
    }
}

/// One sample: position, ρ, u, p − p0.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub position: [f64; 3],
    pub rho: f64,
    pub u: [f64; 3],
    pub pressure: f64,
}

impl ProbeLine {
    pub fn positions(&self) -> Vec<[f64; 3]> {
        (0..self.points)
            .map(|k| {
                let t = if self.points == 1 {
                    0.0
                } else {
                    k as f64 / (self.points - 1) as f64
                };
                [0, 1, 2].map(|a| self.start[a] + t * (self.end[a] - self.start[a]))
            })
            .collect()
    }

    /// Checks that every point lies inside a grid of `size` cells.
    pub fn check(&self, size: [usize; 3]) -> Result<(), String> {
        for p in [self.start, self.end] {
            for a in 0..3 {
                if !(p[a] >= 0.0 && p[a] <= (size[a] - 1) as f64) {
                    return Err(format!(
                        "probe point {p:?} lies outside the grid (coordinates run from 0 to {:?})",
                        size.map(|n| n - 1)
                    ));
                }
            }
        }
        Ok(())
    }

    pub fn sample(&self, fields: &Fields) -> Vec<Sample> {
        self.positions()
            .into_iter()
            .map(|p| sample_at(fields, p))
            .collect()
    }
}

/// Trilinear interpolation of ρ and u at `p` (cell coordinates, clamped to the grid).
pub fn sample_at(fields: &Fields, p: [f64; 3]) -> Sample {
    let size = fields.size;
    let mut base = [0usize; 3];
    let mut frac = [0.0f64; 3];
    for a in 0..3 {
        let max = (size[a] - 1) as f64;
        let v = p[a].clamp(0.0, max);
        let b = (v.floor() as usize).min(size[a].saturating_sub(2));
        base[a] = b;
        frac[a] = if size[a] == 1 { 0.0 } else { v - b as f64 };
    }
    let mut rho = 0.0;
    let mut u = [0.0; 3];
    for corner in 0..8 {
        let off = [corner & 1, (corner >> 1) & 1, (corner >> 2) & 1];
        let mut w = 1.0;
        let mut q = [0usize; 3];
        for a in 0..3 {
            w *= if off[a] == 1 { frac[a] } else { 1.0 - frac[a] };
            q[a] = (base[a] + off[a]).min(size[a] - 1);
        }
        let c = fields.index(q[0], q[1], q[2]);
        rho += w * fields.rho[c] as f64;
        u[0] += w * fields.ux[c] as f64;
        u[1] += w * fields.uy[c] as f64;
        u[2] += w * fields.uz[c] as f64;
    }
    Sample {
        position: p,
        rho,
        u,
        pressure: crate::solver::lbm::lattice::CS2 as f64 * (rho - 1.0),
    }
}

/// CSV with a header: `step,x,y,z,rho,ux,uy,uz,p`, and with time averages
/// (`means`, the same points sampled from [`crate::solver::Averages::mean_fields`])
/// `ux_mean,uy_mean,uz_mean,p_mean` too.
pub fn to_csv(step: u64, samples: &[Sample], means: Option<&[Sample]>) -> String {
    let mut s = String::from("step,x,y,z,rho,ux,uy,uz,p");
    if means.is_some() {
        s.push_str(",ux_mean,uy_mean,uz_mean,p_mean");
    }
    s.push('\n');
    for (k, m) in samples.iter().enumerate() {
        s.push_str(&format!(
            "{step},{},{},{},{:.9},{:.9e},{:.9e},{:.9e},{:.9e}",
            m.position[0], m.position[1], m.position[2], m.rho, m.u[0], m.u[1], m.u[2], m.pressure
        ));
        if let Some(a) = means.and_then(|means| means.get(k)) {
            s.push_str(&format!(
                ",{:.9e},{:.9e},{:.9e},{:.9e}",
                a.u[0], a.u[1], a.u[2], a.pressure
            ));
        }
        s.push('\n');
    }
    s
}
