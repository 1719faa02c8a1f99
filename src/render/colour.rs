//! Colour maps for surfaces coloured by a second field, and the colour bar.

/// How a surface is coloured by the value it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ColourMap {
    /// One colour; the value is ignored.
    #[default]
    Plain,
    /// Perceptually ordered dark blue → yellow (matplotlib's viridis, five stops).
    Viridis,
    /// Diverging blue → grey → red (Moreland's cool-warm, five stops); its
    /// range is made symmetric about zero for a field of both signs.
    CoolWarm,
    /// Perceptually ordered black → purple → orange → pale yellow
    /// (matplotlib's inferno, five stops).
    Inferno,
    /// A rainbow for those who insist (Google's turbo, five stops: smoother
    /// than jet, still not perceptually ordered).
    Turbo,
}

const VIRIDIS: [[f32; 3]; 5] = [
    [0.267, 0.005, 0.329],
    [0.230, 0.322, 0.546],
    [0.128, 0.567, 0.551],
    [0.369, 0.789, 0.383],
    [0.993, 0.906, 0.144],
];
const INFERNO: [[f32; 3]; 5] = [
    [0.001, 0.000, 0.014],
    [0.341, 0.063, 0.430],
    [0.736, 0.216, 0.330],
    [0.976, 0.557, 0.035],
    [0.988, 1.000, 0.643],
];
const TURBO: [[f32; 3]; 5] = [
    [0.190, 0.072, 0.232],
    [0.155, 0.733, 0.924],
    [0.641, 0.990, 0.235],
    [0.984, 0.581, 0.148],
    [0.480, 0.016, 0.011],
];
const COOL_WARM: [[f32; 3]; 5] = [
    [0.230, 0.299, 0.754],
    [0.552, 0.690, 0.996],
    [0.865, 0.865, 0.865],
    [0.957, 0.604, 0.482],
    [0.706, 0.016, 0.150],
];

impl ColourMap {
    pub const ALL: [ColourMap; 5] = [
        ColourMap::Plain,
        ColourMap::Viridis,
        ColourMap::CoolWarm,
        ColourMap::Inferno,
        ColourMap::Turbo,
    ];

    /// Whether the map is centred on a neutral middle (for signed fields).
    pub fn diverging(self) -> bool {
        self == ColourMap::CoolWarm
    }

    /// The range to map: for a diverging map and a field of both signs,
    /// symmetric about zero, so that zero gets the middle colour.
    pub fn range(self, (lo, hi): (f32, f32)) -> (f32, f32) {
        if self.diverging() && lo < 0.0 && hi > 0.0 {
            let m = lo.abs().max(hi);
            (-m, m)
        } else {
            (lo, hi)
        }
    }

    /// The map's number in `shaders/isosurface/draw.wgsl`.
    pub fn index(self) -> u32 {
        self as u32
    }

    pub fn name(self) -> &'static str {
        match self {
            ColourMap::Plain => "plain",
            ColourMap::Viridis => "viridis",
            ColourMap::CoolWarm => "cool-warm",
            ColourMap::Inferno => "inferno",
            ColourMap::Turbo => "turbo",
        }
    }

    pub fn from_name(s: &str) -> Option<ColourMap> {
        Self::ALL.into_iter().find(|m| m.name() == s)
    }

    /// The colour at `t` in [0, 1] (clamped); the same piecewise-linear ramp as
    /// the shader. `Plain` has no ramp and returns mid grey.
    pub fn sample(self, t: f32) -> [f32; 3] {
        let stops = match self {
            ColourMap::Plain => return [0.5; 3],
            ColourMap::Viridis => &VIRIDIS,
            ColourMap::CoolWarm => &COOL_WARM,
            ColourMap::Inferno => &INFERNO,
            ColourMap::Turbo => &TURBO,
        };
        let x = t.clamp(0.0, 1.0) * 4.0;
        let i = (x.floor() as usize).min(3);
        let f = x - i as f32;
        std::array::from_fn(|k| stops[i][k] + f * (stops[i + 1][k] - stops[i][k]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramps_hit_their_stops_and_clamp() {
        let close = |a: [f32; 3], b: [f32; 3]| (0..3).all(|k| (a[k] - b[k]).abs() < 1e-6);
        assert!(close(ColourMap::Viridis.sample(0.0), VIRIDIS[0]));
        assert!(close(ColourMap::Viridis.sample(1.0), VIRIDIS[4]));
        assert!(close(ColourMap::CoolWarm.sample(0.5), COOL_WARM[2]));
        assert!(close(ColourMap::CoolWarm.sample(-3.0), COOL_WARM[0]));
        assert!(close(ColourMap::CoolWarm.sample(7.0), COOL_WARM[4]));
        let mid = ColourMap::Viridis.sample(0.125);
        for k in 0..3 {
            assert!((mid[k] - 0.5 * (VIRIDIS[0][k] + VIRIDIS[1][k])).abs() < 1e-6);
        }
        for m in ColourMap::ALL {
            assert_eq!(ColourMap::from_name(m.name()), Some(m));
        }
        assert!(close(ColourMap::Inferno.sample(0.75), INFERNO[3]));
        assert!(close(ColourMap::Turbo.sample(0.5), TURBO[2]));
        assert_eq!(ColourMap::CoolWarm.range((-1.0, 3.0)), (-3.0, 3.0));
        assert_eq!(ColourMap::CoolWarm.range((1.0, 3.0)), (1.0, 3.0));
        assert_eq!(ColourMap::Viridis.range((-1.0, 3.0)), (-1.0, 3.0));
    }
}
