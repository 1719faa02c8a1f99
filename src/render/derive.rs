//! Derived scalars of the plot types: the GPU pass is `shaders/fields/derive.wgsl`;
//! this CPU twin (tests only) uses the same finite differences.

use crate::solver::Fields;

/// What the isosurface shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PlotType {
    /// p − p0 = (ρ − 1)/3.
    Pressure,
    /// |u|.
    #[default]
    Speed,
    Ux,
    Uy,
    Uz,
    /// |∇ × u|.
    Vorticity,
    /// (∇ × u)_z, the original's scalar vorticity.
    Curl,
    /// Q-criterion: (|Ω|² − |S|²)/2.
    Q,
    /// The first contaminant field's concentration (zero without one).
    Concentration,
}

impl PlotType {
    /// The selector in `DeriveParams.plot`.
    pub fn index(self) -> u32 {
        self as u32
    }

    pub fn name(self) -> &'static str {
        [
            "pressure",
            "speed",
            "ux",
            "uy",
            "uz",
            "vorticity",
            "curl",
            "Q",
            "concentration",
        ][self as usize]
    }

    /// The field that colours this plot's surface by default: speed, except
    /// on a speed surface (one speed everywhere), which pressure colours.
    pub fn default_colour(self) -> PlotType {
        if self == PlotType::Speed {
            PlotType::Pressure
        } else {
            PlotType::Speed
        }
    }

    /// The lower end of the range that isovalue fractions and colour maps
    /// span. Q is negative wherever strain outweighs rotation — along every
    /// wall, where the shear is largest — and only Q > 0 marks a vortex, so
    /// its range starts at 0; a fraction of the full range would put the
    /// default surface in the wall shear layers.
    pub fn range_floor(self) -> f32 {
        match self {
            PlotType::Q | PlotType::Concentration => 0.0,
            _ => f32::MIN,
        }
    }
}

fn derivative(f: &Fields, p: [usize; 3], axis: usize) -> [f32; 3] {
    let n = f.size[axis];
    let lo = p[axis].saturating_sub(1);
    let hi = (p[axis] + 1).min(n - 1);
    if hi == lo {
        return [0.0; 3];
    }
    let mut a = p;
    let mut b = p;
    a[axis] = lo;
    b[axis] = hi;
    let (ua, ub) = (
        f.velocity(f.index(a[0], a[1], a[2])),
        f.velocity(f.index(b[0], b[1], b[2])),
    );
    let d = (hi - lo) as f32;
    [0, 1, 2].map(|k| (ub[k] - ua[k]) / d)
}

/// The derived scalar at every cell (x fastest).
pub fn derive(f: &Fields, plot: PlotType) -> Vec<f32> {
    let [nx, ny, nz] = f.size;
    let mut out = Vec::with_capacity(nx * ny * nz);
    for z in 0..nz {
        for y in 0..ny {
            for x in 0..nx {
                let c = f.index(x, y, z);
                let u = f.velocity(c);
                let v = match plot {
                    PlotType::Pressure => (f.rho[c] - 1.0) / 3.0,
                    PlotType::Speed => (u[0] * u[0] + u[1] * u[1] + u[2] * u[2]).sqrt(),
                    PlotType::Ux => u[0],
                    PlotType::Uy => u[1],
                    PlotType::Uz => u[2],
                    PlotType::Concentration => f.concentration.first().map_or(0.0, |k| k[c]),
                    _ => {
                        // j[c][r] = d u_r / d x_c
                        let j = [
                            derivative(f, [x, y, z], 0),
                            derivative(f, [x, y, z], 1),
                            derivative(f, [x, y, z], 2),
                        ];
                        let w = [j[1][2] - j[2][1], j[2][0] - j[0][2], j[0][1] - j[1][0]];
                        match plot {
                            PlotType::Vorticity => (w[0] * w[0] + w[1] * w[1] + w[2] * w[2]).sqrt(),
                            PlotType::Curl => w[2],
                            _ => {
                                let (mut s2, mut o2) = (0.0f32, 0.0f32);
                                for r in 0..3 {
                                    for cc in 0..3 {
                                        let (jrc, jcr) = (j[cc][r], j[r][cc]);
                                        let s = 0.5 * (jrc + jcr);
                                        let o = 0.5 * (jrc - jcr);
                                        s2 += s * s;
                                        o2 += o * o;
                                    }
                                }
                                0.5 * (o2 - s2)
                            }
                        }
                    }
                };
                out.push(v);
            }
        }
    }
    out
}
