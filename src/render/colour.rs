//! Colour maps for surfaces coloured by a second field, and the colour bar.

/// How a surface is coloured by the value it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ColourMap {
    /// One colour; the value is ignored.
    #[default]
    Plain,
    /// Perceptually ordered dark blue → yellow (matplotlib's viridis, five stops).
    Viridis,
    /// Diverging blue → grey → red (Moreland's cool-warm, five stops).
    CoolWarm,
}

const VIRIDIS: [[f32; 3]; 5] = [
    [0.267, 0.005, 0.329],
    [0.230, 0.322, 0.546],
    [0.128, 0.567, 0.551],
    [0.369, 0.789, 0.383],
    [0.993, 0.906, 0.144],
];
const COOL_WARM: [[f32; 3]; 5] = [
    [0.230, 0.299, 0.754],
    [0.552, 0.690, 0.996],
    [0.865, 0.865, 0.865],
    [0.957, 0.604, 0.482],
    [0.706, 0.016, 0.150],
];

impl ColourMap {
    pub const ALL: [ColourMap; 3] = [ColourMap::Plain, ColourMap::Viridis, ColourMap::CoolWarm];

    /// The map's number in `shaders/isosurface/draw.wgsl`.
    pub fn index(self) -> u32 {
        self as u32
    }

    pub fn name(self) -> &'static str {
        match self {
            ColourMap::Plain => "plain",
            ColourMap::Viridis => "viridis",
            ColourMap::CoolWarm => "cool-warm",
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
    }
}
