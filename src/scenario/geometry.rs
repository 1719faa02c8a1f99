//! Voxelisation: domain faces and obstacles to cell flags.

use glam::DVec3;

use super::{mesh, parabolic_axes, Face, InletProfile, Scenario, Shape};
use crate::solver::flags::{self, CellType};
use crate::solver::lbm::lattice::{E, Q};
use crate::solver::lbm::links::WallLinks;
use crate::solver::{Profile, Profiles, VELOCITY_SLOTS};

/// An obstacle as the solver and the force output see it.
#[derive(Clone, Debug, PartialEq)]
pub struct ObstacleInfo {
    /// "1 (sphere)".
    pub name: String,
    pub cells: u64,
    /// The reference area of its drag and lift coefficients, in cells: the
    /// shape's own frontal area where its surface is interpolated (π r² for
    /// a sphere, the diameter times the span for a cylinder across the flow),
    /// the cells of its shadow on the plane normal to the drag axis
    /// otherwise (staircases, meshes).
    pub frontal_area: f64,
}

/// The velocities that inlet and moving-wall cells reference by their tag,
/// as multiples of the scenario's reference speed (a live change of that
/// speed rescales them without voxelising again), and their profiles.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VelocitySlots {
    pub velocities: [[f64; 3]; VELOCITY_SLOTS],
    pub profiles: Profiles,
}

impl VelocitySlots {
    /// The slots in lattice units for the reference speed `u_lattice`.
    pub fn lattice(&self, u_lattice: f64) -> [[f32; 3]; VELOCITY_SLOTS] {
        self.velocities.map(|v| v.map(|c| (c * u_lattice) as f32))
    }
}

/// Flags and what they reference.
#[derive(Clone, Debug, PartialEq)]
pub struct Voxels {
    pub flags: Vec<u8>,
    pub slots: VelocitySlots,
    pub fluid_cells: u64,
    /// Obstacle `k` has flag tag `k + 1`.
    pub obstacles: Vec<ObstacleInfo>,
    /// Links into obstacles with interpolated surfaces.
    pub links: WallLinks,
}

/// Bounding box `(lo, hi)` of a shape, in cell coordinates.
pub fn bounds(shape: &Shape) -> ([f64; 3], [f64; 3]) {
    match shape {
        Shape::Sphere { center, radius, .. } => {
            (center.map(|c| c - radius), center.map(|c| c + radius))
        }
        Shape::Cylinder {
            center,
            radius,
            axis,
            ..
        } => {
            let mut lo = center.map(|c| c - radius);
            let mut hi = center.map(|c| c + radius);
            lo[axis.index()] = center[axis.index()];
            hi[axis.index()] = center[axis.index()];
            (lo, hi)
        }
        Shape::Box { min, max } => (*min, *max),
        Shape::Buildings {
            min, max, heights, ..
        } => {
            let mut hi = *max;
            hi[2] = min[2] + heights[1];
            (*min, hi)
        }
        Shape::Mesh { placed, .. } => (placed.lo, placed.hi),
    }
}

/// Checks numbers `bounds` cannot: positive sizes, sane building parameters.
pub fn check_shape(shape: &Shape) -> Result<(), String> {
    let (lo, hi) = bounds(shape);
    if !lo.iter().chain(&hi).all(|v| v.is_finite()) {
        return Err(format!(
            "its position or size holds a value that is not a number ({shape:?})"
        ));
    }
    match shape {
        Shape::Sphere { radius, .. } | Shape::Cylinder { radius, .. } if !(*radius > 0.0) => {
            Err(format!("radius {radius} must be positive"))
        }
        Shape::Buildings {
            block,
            street,
            heights,
            ..
        } => {
            if !(*block >= 1.0) || !(*street >= 0.0) {
                Err(format!(
                    "block = {block} must be at least 1 cell and street = {street} not negative"
                ))
            } else if !(heights[0] >= 1.0 && heights[1] >= heights[0]) {
                Err(format!(
                    "heights = {heights:?} must be [low, high] with 1 ≤ low ≤ high"
                ))
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

/// splitmix64: a tiny deterministic generator for building heights.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Whether the cell centred at `p` is inside `shape`. `heights` holds the
/// per-block heights of a `buildings` shape.
fn inside(shape: &Shape, p: [f64; 3], heights: &[Vec<f64>]) -> bool {
    match shape {
        Shape::Sphere { center, radius, .. } => {
            let d: f64 = (0..3).map(|a| (p[a] - center[a]).powi(2)).sum();
            d <= radius * radius
        }
        Shape::Cylinder {
            center,
            radius,
            axis,
            ..
        } => {
            let d: f64 = (0..3)
                .filter(|&a| a != axis.index())
                .map(|a| (p[a] - center[a]).powi(2))
                .sum();
            d <= radius * radius
        }
        Shape::Box { min, max } => (0..3).all(|a| p[a] >= min[a] && p[a] <= max[a]),
        Shape::Buildings {
            min,
            max,
            block,
            street,
            ..
        } => {
            if (0..2).any(|a| p[a] < min[a] || p[a] > max[a]) || p[2] < min[2] {
                return false;
            }
            let pitch = block + street;
            let local = [(p[0] - min[0]) / pitch, (p[1] - min[1]) / pitch];
            let cell = local.map(|v| v.floor());
            let within = (0..2).all(|a| (local[a] - cell[a]) * pitch < *block);
            if !within {
                return false;
            }
            let (i, j) = (cell[0] as usize, cell[1] as usize);
            let h = heights
                .get(i)
                .and_then(|r| r.get(j))
                .copied()
                .unwrap_or(0.0);
            p[2] < min[2] + h
        }
        // Voxelised as a whole by ray parity (see `voxelize_with`).
        Shape::Mesh { .. } => false,
    }
}

fn building_heights(shape: &Shape) -> Vec<Vec<f64>> {
    let Shape::Buildings {
        min,
        max,
        block,
        street,
        heights,
        seed,
    } = shape
    else {
        return Vec::new();
    };
    let pitch = block + street;
    let nx = ((max[0] - min[0]) / pitch).floor() as usize + 1;
    let ny = ((max[1] - min[1]) / pitch).floor() as usize + 1;
    let mut state = *seed;
    (0..nx)
        .map(|_| {
            (0..ny)
                .map(|_| {
                    let r = (splitmix(&mut state) >> 11) as f64 / (1u64 << 53) as f64;
                    (heights[0] + r * (heights[1] - heights[0])).round()
                })
                .collect()
        })
        .collect()
}

fn face_rank(face: &Face) -> u8 {
    match face {
        Face::Periodic => 0,
        Face::Outlet | Face::ConvectiveOutlet => 1,
        Face::Inlet { .. } => 2,
        Face::FreeSlip => 3,
        Face::Wall => 4,
        Face::MovingWall(_) => 5,
    }
}

/// Builds the flags: faces first (where faces meet, the higher-ranked one wins:
/// moving wall > wall > free-slip > inlet > outlet, so that free-slip faces stay
/// flat up to their edges), then obstacles.
pub fn voxelize(scenario: &Scenario) -> Voxels {
    voxelize_with(scenario, &mesh::solid_bits)
}

/// The solid cells of a placed mesh in a grid (bit `c` for cell `c`).
pub type MeshVoxelizer<'a> = dyn Fn(&mesh::PlacedMesh, [usize; 3]) -> Vec<u32> + 'a;

/// [`voxelize`] with another mesh voxeliser (the CUDA one).
pub fn voxelize_with(scenario: &Scenario, mesh_voxels: &MeshVoxelizer) -> Voxels {
    let [nx, ny, nz] = scenario.size;
    let mut velocities = [[0.0f64; 3]; VELOCITY_SLOTS];
    let mut profiles = [Profile::Uniform; VELOCITY_SLOTS];
    let mut used = 1usize; // slot 0 stays zero
    let mut slot_of = |v: [f64; 3], profile: Profile| -> u8 {
        if let Some(k) = (0..used).position(|k| velocities[k] == v && profiles[k] == profile) {
            return k as u8;
        }
        // Six faces can use at most six slots, so this never runs out.
        velocities[used] = v;
        profiles[used] = profile;
        used += 1;
        (used - 1) as u8
    };
    let face_flags: Vec<(u8, u8)> = scenario
        .faces
        .iter()
        .enumerate()
        .map(|(k, f)| {
            let flag = match f {
                Face::Periodic => flags::make(CellType::Fluid, 0),
                Face::Wall => flags::make(CellType::Wall, 0),
                Face::Outlet => flags::make(CellType::Outlet, 0),
                Face::ConvectiveOutlet => flags::make(CellType::Outlet, flags::CONVECTIVE_OUTLET),
                Face::FreeSlip => flags::make(CellType::FreeSlip, (k / 2) as u8),
                Face::MovingWall(v) => {
                    flags::make(CellType::MovingWall, slot_of(*v, Profile::Uniform))
                }
                Face::Inlet { velocity, profile } => {
                    let profile = match *profile {
                        InletProfile::Uniform => Profile::Uniform,
                        InletProfile::Parabolic => Profile::Parabolic {
                            axes: parabolic_axes(&scenario.faces, k),
                        },
                        InletProfile::Log { roughness } => Profile::Log {
                            roughness: roughness as f32,
                        },
                    };
                    flags::make(CellType::Inlet, slot_of(*velocity, profile))
                }
            };
            (face_rank(f), flag)
        })
        .collect();
    // Where the fluid ends along each axis: half a cell beyond the last fluid
    // cell of a non-periodic face (halfway bounce-back).
    let periodic = [0, 1, 2].map(|a| scenario.faces[2 * a] == Face::Periodic);
    let lo = [0, 1, 2].map(|a| if periodic[a] { 0.0 } else { 0.5 });
    let hi = [0, 1, 2].map(|a| {
        let n = scenario.size[a] as f32;
        if periodic[a] {
            n
        } else {
            n - 1.5
        }
    });

    let n = nx * ny * nz;
    let mut cell_flags = vec![flags::make(CellType::Fluid, 0); n];
    let size = [nx, ny, nz];
    for z in 0..nz {
        for y in 0..ny {
            for x in 0..nx {
                let p = [x, y, z];
                let mut best = (0u8, flags::make(CellType::Fluid, 0));
                for a in 0..3 {
                    for (side, at) in [(0, 0), (1, size[a] - 1)] {
                        if p[a] == at {
                            let cand = face_flags[2 * a + side];
                            if cand.0 > best.0 {
                                best = cand;
                            }
                        }
                    }
                }
                cell_flags[x + nx * (y + ny * z)] = best.1;
            }
        }
    }

    let drag = scenario.forces.drag.index();
    let mut obstacles = Vec::new();
    for (k, shape) in scenario.obstacles.iter().enumerate() {
        let tag = (k + 1) as u8;
        let heights = building_heights(shape);
        let bits = match shape {
            Shape::Mesh { placed, .. } => Some(mesh_voxels(placed, size)),
            _ => None,
        };
        let (lo, hi) = bounds(shape);
        let mut lo = lo.map(|v| v.floor().max(0.0) as usize);
        let mut hi = [0, 1, 2].map(|a| (hi[a].ceil() as usize).min(size[a] - 1));
        if let Shape::Cylinder { axis, .. } = shape {
            // Cylinders run through the whole domain along their axis.
            lo[axis.index()] = 0;
            hi[axis.index()] = size[axis.index()] - 1;
        }
        let mut count = 0u64;
        let mut shadow = std::collections::HashSet::new();
        for z in lo[2]..=hi[2] {
            for y in lo[1]..=hi[1] {
                for x in lo[0]..=hi[0] {
                    let c = x + nx * (y + ny * z);
                    let solid = match &bits {
                        Some(b) => b[c / 32] >> (c % 32) & 1 == 1,
                        None => inside(shape, [x as f64, y as f64, z as f64], &heights),
                    };
                    if solid
                        && flags::runs(cell_flags[c])
                        && CellType::of(cell_flags[c]) == CellType::Fluid
                    {
                        cell_flags[c] = flags::make(CellType::Wall, tag);
                        count += 1;
                        let p = [x, y, z];
                        let key: Vec<usize> = (0..3).filter(|&a| a != drag).map(|a| p[a]).collect();
                        shadow.insert(key);
                    }
                }
            }
        }
        let exact = match shape {
            Shape::Sphere { radius, .. } => Some(std::f64::consts::PI * radius * radius),
            Shape::Cylinder { radius, axis, .. } if axis.index() != drag => {
                // The span: the layers along the axis that hold its cells.
                let a = axis.index();
                let side: Vec<usize> = (0..3).filter(|&b| b != drag).collect();
                let along = side.iter().position(|&b| b == a).expect("across the flow");
                let layers: std::collections::HashSet<usize> =
                    shadow.iter().map(|k| k[along]).collect();
                Some(2.0 * radius * layers.len() as f64)
            }
            _ => None,
        };
        let frontal_area = match exact {
            Some(area) if shape.surface() == super::Surface::Interpolated && count > 0 => area,
            _ => shadow.len() as f64,
        };
        obstacles.push(ObstacleInfo {
            name: format!("{} ({})", k + 1, shape.kind()),
            cells: count,
            frontal_area,
        });
    }
    let fluid_cells = cell_flags
        .iter()
        .filter(|&&f| CellType::of(f) == CellType::Fluid)
        .count() as u64;
    let links = wall_links(scenario, &cell_flags);
    Voxels {
        links,
        flags: cell_flags,
        slots: VelocitySlots {
            velocities,
            profiles: Profiles {
                slots: profiles,
                lo,
                hi,
            },
        },
        fluid_cells,
        obstacles,
    }
}

/// The wall distance of every link from a running cell into an obstacle with
/// an interpolated surface: where the segment from the cell centre to its
/// neighbour's crosses the shape's surface (see [`WallLinks`]).
fn wall_links(scenario: &Scenario, cell_flags: &[u8]) -> WallLinks {
    use rayon::prelude::*;
    use std::collections::BTreeMap;

    let grid = scenario.grid();
    let [nx, ny, _] = scenario.size;
    let mut all: BTreeMap<u32, [f32; Q - 1]> = BTreeMap::new();
    for (k, shape) in scenario.obstacles.iter().enumerate() {
        if shape.surface() != super::Surface::Interpolated {
            continue;
        }
        let tag = (k + 1) as u8;
        let bins = match shape {
            Shape::Mesh { placed, .. } => Some(TriangleBins::new(placed)),
            _ => None,
        };
        let (lo, hi) = bounds(shape);
        let mut lo = [0, 1, 2].map(|a| (lo[a].floor() - 1.0).max(0.0) as usize);
        let mut hi = [0, 1, 2].map(|a| ((hi[a].ceil() + 1.0) as usize).min(scenario.size[a] - 1));
        if let Shape::Cylinder { axis, .. } = shape {
            lo[axis.index()] = 0;
            hi[axis.index()] = scenario.size[axis.index()] - 1;
        }
        let found: Vec<(u32, [f32; Q - 1])> = (lo[2]..=hi[2])
            .into_par_iter()
            .flat_map_iter(|z| {
                let mut out = Vec::new();
                for y in lo[1]..=hi[1] {
                    for x in lo[0]..=hi[0] {
                        let c = x + nx * (y + ny * z);
                        if !flags::runs(cell_flags[c]) {
                            continue;
                        }
                        let mut q = [0.0f32; Q - 1];
                        for i in 1..Q {
                            let Some(m) = grid.neighbour(x, y, z, E[i]) else {
                                continue;
                            };
                            let mf = cell_flags[m];
                            if CellType::of(mf) != CellType::Wall || flags::tag(mf) != tag {
                                continue;
                            }
                            let p = [x as f64, y as f64, z as f64];
                            let e = E[i].map(f64::from);
                            let Some(t) = link_fraction(shape, p, e, bins.as_ref()) else {
                                continue;
                            };
                            let t = t.clamp(1e-3, 1.0) as f32;
                            // Below ½ the interpolation reads the population
                            // streaming in from behind; without a running cell
                            // there, the local fallback (stored negative).
                            let behind = grid.neighbour(x, y, z, E[i].map(|v| -v));
                            let runs_behind = behind.is_some_and(|b| flags::runs(cell_flags[b]));
                            q[i - 1] = if t < 0.5 && !runs_behind { -t } else { t };
                        }
                        if q.iter().any(|&v| v != 0.0) {
                            out.push((c as u32, q));
                        }
                    }
                }
                out
            })
            .collect();
        for (c, q) in found {
            let entry = all.entry(c).or_insert([0.0; Q - 1]);
            for i in 0..Q - 1 {
                if q[i] != 0.0 {
                    entry[i] = q[i];
                }
            }
        }
    }
    WallLinks {
        cells: all.keys().copied().collect(),
        q: all.values().copied().collect(),
    }
}

/// Where the segment from `p` to `p + e` first meets the surface of `shape`,
/// as a fraction of its length, if it does within [0, 1].
fn link_fraction(
    shape: &Shape,
    p: [f64; 3],
    e: [f64; 3],
    bins: Option<&TriangleBins>,
) -> Option<f64> {
    let quadratic = |d: [f64; 3], e: [f64; 3], r: f64| -> Option<f64> {
        let (d, e) = (DVec3::from(d), DVec3::from(e));
        let a = e.dot(e);
        let b = d.dot(e);
        let c = d.dot(d) - r * r;
        let disc = b * b - a * c;
        if a == 0.0 || disc < 0.0 {
            return None;
        }
        let t = (-b - disc.sqrt()) / a;
        (-1e-9..=1.0 + 1e-9).contains(&t).then_some(t)
    };
    match shape {
        Shape::Sphere { center, radius, .. } => {
            quadratic([0, 1, 2].map(|a| p[a] - center[a]), e, *radius)
        }
        Shape::Cylinder {
            center,
            radius,
            axis,
            ..
        } => {
            let mut d = [0, 1, 2].map(|a| p[a] - center[a]);
            let mut e = e;
            d[axis.index()] = 0.0;
            e[axis.index()] = 0.0;
            quadratic(d, e, *radius)
        }
        Shape::Mesh { placed, .. } => bins.and_then(|b| b.first_hit(placed, p, e)),
        _ => None,
    }
}

/// Triangles by the unit boxes `[k, k + 1)` their bounding boxes overlap: the
/// candidates for a link between two cell centres.
struct TriangleBins {
    bins: std::collections::HashMap<[i32; 3], Vec<u32>>,
}

impl TriangleBins {
    fn new(mesh: &mesh::PlacedMesh) -> TriangleBins {
        let mut bins: std::collections::HashMap<[i32; 3], Vec<u32>> = Default::default();
        for (k, t) in mesh.triangles.iter().enumerate() {
            let lo = [0, 1, 2].map(|a| t[0][a].min(t[1][a]).min(t[2][a]).floor() as i32);
            let hi = [0, 1, 2].map(|a| t[0][a].max(t[1][a]).max(t[2][a]).floor() as i32);
            for z in lo[2]..=hi[2] {
                for y in lo[1]..=hi[1] {
                    for x in lo[0]..=hi[0] {
                        bins.entry([x, y, z]).or_default().push(k as u32);
                    }
                }
            }
        }
        TriangleBins { bins }
    }

    /// The nearest crossing of the segment `p` to `p + e` with a triangle
    /// (Möller–Trumbore), as a fraction of the segment.
    fn first_hit(&self, mesh: &mesh::PlacedMesh, p: [f64; 3], e: [f64; 3]) -> Option<f64> {
        let lo = [0, 1, 2].map(|a| p[a].min(p[a] + e[a]).floor() as i32);
        let hi = [0, 1, 2].map(|a| p[a].max(p[a] + e[a]).floor() as i32);
        let (origin, dir) = (DVec3::from(p), DVec3::from(e));
        let mut best: Option<f64> = None;
        for z in lo[2]..=hi[2] {
            for y in lo[1]..=hi[1] {
                for x in lo[0]..=hi[0] {
                    for &k in self.bins.get(&[x, y, z]).into_iter().flatten() {
                        let [v0, v1, v2] = mesh.triangles[k as usize].map(DVec3::from);
                        let (e1, e2) = (v1 - v0, v2 - v0);
                        let h = dir.cross(e2);
                        let det = e1.dot(h);
                        if det.abs() < 1e-14 {
                            continue;
                        }
                        let s = origin - v0;
                        let u = s.dot(h) / det;
                        if !(-1e-9..=1.0 + 1e-9).contains(&u) {
                            continue;
                        }
                        let qv = s.cross(e1);
                        let v = dir.dot(qv) / det;
                        if v < -1e-9 || u + v > 1.0 + 1e-9 {
                            continue;
                        }
                        let t = e2.dot(qv) / det;
                        if (-1e-9..=1.0 + 1e-9).contains(&t) && best.is_none_or(|b| t < b) {
                            best = Some(t);
                        }
                    }
                }
            }
        }
        best
    }
}
