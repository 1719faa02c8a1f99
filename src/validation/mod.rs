//! Validation against published data and between solvers: the lid-driven
//! cavity against Ghia et al. (1982), CUDA against the CPU reference, and small
//! versions of the shipped scenarios for such checks.

pub mod compare;
pub mod ghia;

use crate::scenario::{Scenario, Shape};

/// `--set` overrides that shrink a scenario by `factor` (grid, obstacles and
/// characteristic length), and lower its Reynolds number where needed to keep
/// τ ≥ `min_tau` on the coarser grid.
pub fn scaled_overrides(s: &Scenario, factor: f64, min_tau: f64) -> Vec<String> {
    let sc = |v: f64| (v * factor * 100.0).round() / 100.0;
    let list = |v: [f64; 3]| format!("[{},{},{}]", sc(v[0]), sc(v[1]), sc(v[2]));
    let mut o = Vec::new();
    let size = s
        .size
        .map(|n| ((n as f64 * factor).round() as usize).max(4));
    o.push(format!("domain.size=[{},{},{}]", size[0], size[1], size[2]));
    // Rounding the domain down must not push an obstacle's far side outside it.
    let fit = |v: [f64; 3]| -> [f64; 3] { std::array::from_fn(|a| v[a].min((size[a] - 1) as f64)) };
    let length = sc(s.units.length_cells).max(1.0);
    o.push(format!("fluid.length_cells={length}"));
    for (k, shape) in s.obstacles.iter().enumerate() {
        match shape {
            Shape::Sphere { center, radius, .. } | Shape::Cylinder { center, radius, .. } => {
                o.push(format!("obstacles.{k}.center={}", list(*center)));
                o.push(format!("obstacles.{k}.radius={}", sc(*radius).max(1.0)));
            }
            Shape::Mesh { center, scale, .. } => {
                o.push(format!("obstacles.{k}.center={}", list(*center)));
                o.push(format!("obstacles.{k}.scale={}", scale * factor));
            }
            Shape::Box { min, max } => {
                // Keep floor-mounted boxes on the floor (first fluid layer).
                let mut lo = min.map(sc);
                if min[2] == 1.0 {
                    lo[2] = 1.0;
                }
                o.push(format!("obstacles.{k}.min=[{},{},{}]", lo[0], lo[1], lo[2]));
                let hi = fit(max.map(sc));
                o.push(format!("obstacles.{k}.max=[{},{},{}]", hi[0], hi[1], hi[2]));
            }
            Shape::Buildings {
                min,
                max,
                block,
                street,
                heights,
                ..
            } => {
                let mut lo = min.map(sc);
                let mut hi = fit(max.map(sc));
                if min[2] == 1.0 {
                    lo[2] = 1.0;
                    hi[2] = 1.0;
                }
                o.push(format!("obstacles.{k}.min=[{},{},{}]", lo[0], lo[1], lo[2]));
                o.push(format!("obstacles.{k}.max=[{},{},{}]", hi[0], hi[1], hi[2]));
                o.push(format!("obstacles.{k}.block={}", sc(*block).max(1.0)));
                o.push(format!("obstacles.{k}.street={}", sc(*street).max(1.0)));
                o.push(format!(
                    "obstacles.{k}.heights=[{},{}]",
                    sc(heights[0]).max(1.0),
                    sc(heights[1]).max(1.0)
                ));
            }
        }
    }
    // Releases and receptors move with the geometry; a source's box keeps at
    // least the cell around its centre.
    use crate::scenario::release::Region;
    let inside = |v: [f64; 3]| fit(v.map(|x| sc(x).max(0.0)));
    let point = |v: [f64; 3]| format!("[{},{},{}]", v[0], v[1], v[2]);
    for (k, src) in s.releases.sources.iter().enumerate() {
        match &src.region {
            Region::Point(p) => o.push(format!("sources.{k}.point={}", point(inside(*p)))),
            Region::Box { min, max } => {
                let (lo, hi) = (inside(*min), inside(*max));
                let mid: [f64; 3] = std::array::from_fn(|a| (0.5 * (lo[a] + hi[a])).round());
                let lo: [f64; 3] = std::array::from_fn(|a| lo[a].min(mid[a]));
                let hi: [f64; 3] = std::array::from_fn(|a| hi[a].max(mid[a]));
                o.push(format!(
                    "sources.{k}.box.min=[{},{},{}]",
                    lo[0], lo[1], lo[2]
                ));
                o.push(format!(
                    "sources.{k}.box.max=[{},{},{}]",
                    hi[0], hi[1], hi[2]
                ));
            }
            Region::Plane { axis, at } => {
                let a = axis.index();
                o.push(format!(
                    "sources.{k}.plane.at={}",
                    sc(*at).min((size[a] - 1) as f64)
                ));
            }
        }
    }
    for (k, r) in s.releases.receptors.iter().enumerate() {
        o.push(format!("receptors.{k}.point={}", point(inside(r.point))));
    }
    let nu_min = (min_tau - 0.5) / 3.0;
    let re_max = s.units.velocity_lattice * length / nu_min;
    if s.units.reynolds > re_max {
        match &s.units.physical {
            // With physical units the Reynolds number follows from the viscosity.
            Some(p) => o.push(format!(
                "physical.viscosity_m2_s={:e}",
                p.velocity_m_s * length * p.cell_size_m / re_max
            )),
            None => o.push(format!("fluid.reynolds={:.3}", re_max)),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_scenario_scales_down_to_a_valid_one() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/scenarios");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let s = Scenario::load(&path, &[]).unwrap();
            let o = scaled_overrides(&s, 0.25, 0.55);
            let small = Scenario::load(&path, &o).unwrap_or_else(|e| panic!("{e}"));
            assert!(small.cells() * 40 < s.cells(), "{}", path.display());
            assert!(
                small.units.tau >= 0.549,
                "{}: τ {}",
                path.display(),
                small.units.tau
            );
            let v = small.voxelize();
            assert_eq!(v.obstacles.len(), s.obstacles.len());
            assert!(
                v.obstacles.iter().all(|o| o.cells > 0),
                "{}: {:?}",
                path.display(),
                v.obstacles
            );
            // Sources and receptors still lie in the fluid.
            small
                .releases
                .setup(&small.grid(), &v.flags, &path)
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
}
