//! Voxelisation: domain faces and obstacles to cell flags.

use super::{mesh, parabolic_axes, Face, InletProfile, Scenario, Shape};
use crate::solver::flags::{self, CellType};
use crate::solver::{Profile, Profiles, VELOCITY_SLOTS};

/// An obstacle as the solver and the force output see it.
#[derive(Clone, Debug, PartialEq)]
pub struct ObstacleInfo {
    /// "1 (sphere)".
    pub name: String,
    pub cells: u64,
    /// Cells of the obstacle's shadow on the plane normal to the drag axis: the
    /// reference area of its drag and lift coefficients.
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
}

/// Bounding box `(lo, hi)` of a shape, in cell coordinates.
pub fn bounds(shape: &Shape) -> ([f64; 3], [f64; 3]) {
    match shape {
        Shape::Sphere { center, radius } => {
            (center.map(|c| c - radius), center.map(|c| c + radius))
        }
        Shape::Cylinder {
            center,
            radius,
            axis,
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
        Shape::Sphere { center, radius } => {
            let d: f64 = (0..3).map(|a| (p[a] - center[a]).powi(2)).sum();
            d <= radius * radius
        }
        Shape::Cylinder {
            center,
            radius,
            axis,
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
        Face::Outlet => 1,
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
        obstacles.push(ObstacleInfo {
            name: format!("{} ({})", k + 1, shape.kind()),
            cells: count,
            frontal_area: shadow.len() as f64,
        });
    }
    let fluid_cells = cell_flags
        .iter()
        .filter(|&&f| CellType::of(f) == CellType::Fluid)
        .count() as u64;
    Voxels {
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
