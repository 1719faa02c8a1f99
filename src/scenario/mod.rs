//! Scenario files: the box and the fluid, the geometry, what to run.
//!
//! A scenario is a small TOML file (`assets/scenarios/*.toml`). Loading parses it
//! with spans, applies `--set key=value` overrides, derives lattice units and
//! checks them; every problem becomes a [`ScenarioError`] naming the file, the
//! line and the fix. Coordinates are in cells: cell `(x, y, z)` has its centre at
//! `(x, y, z)`. Each non-periodic face is one layer of boundary cells, so the fluid
//! of a `size = [66, 66, 66]` cavity is 64³ and its walls sit at 0.5 and 64.5.

pub mod geometry;
pub mod mesh;
pub mod release;
pub mod units;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::solver::{Collision, Grid, Initial, Params};
use crate::system::human_bytes;
pub use units::{PhysicalUnits, Units};

/// Warning thresholds (errors beyond the hard limits).
pub const TAU_RISKY: f64 = 0.51;
pub const MACH_RISKY: f64 = 0.15;
pub const MACH_MAX: f64 = 0.3;

/// Where scenario errors point.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioError {
    pub file: PathBuf,
    /// 1-based line and column, when the problem has a place in the file.
    pub line: Option<(usize, usize)>,
    pub message: String,
    pub help: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some((line, col)) => {
                write!(f, "{}:{line}:{col}: {}", self.file.display(), self.message)?
            }
            None => write!(f, "{}: {}", self.file.display(), self.message)?,
        }
        if !self.help.is_empty() {
            write!(f, "\n  help: {}", self.help)?;
        }
        Ok(())
    }
}

impl std::error::Error for ScenarioError {}

/// One domain face's boundary condition, as written in the file: a name
/// (`"wall"`, `"periodic"`, `"outlet"`, `"convective_outlet"`,
/// `"free_slip"`) or a table
/// (`{ moving_wall = [u, v, w] }`, `{ inlet = [u, v, w], profile = "log",
/// roughness = 0.5 }`).
#[derive(Clone, Debug, PartialEq)]
pub enum Face {
    Wall,
    Periodic,
    /// Fixed pressure; the velocity carried over from the fluid next to it
    /// (zero gradient).
    Outlet,
    /// Fixed pressure; the velocity convected out, ∂u/∂t + U ∂u/∂n = 0 (the
    /// projection method; the lattice Boltzmann method takes it as `Outlet`).
    ConvectiveOutlet,
    FreeSlip,
    /// Tangential velocity in units of `fluid.velocity`.
    MovingWall([f64; 3]),
    /// Inflow velocity in units of `fluid.velocity`: the profile's largest.
    Inlet {
        velocity: [f64; 3],
        profile: InletProfile,
    },
}

impl Face {
    /// A uniform inlet.
    pub fn inlet(velocity: [f64; 3]) -> Face {
        Face::Inlet {
            velocity,
            profile: InletProfile::Uniform,
        }
    }

    /// The velocity of an inlet or moving wall.
    pub fn velocity(&self) -> Option<[f64; 3]> {
        match self {
            Face::Inlet { velocity, .. } | Face::MovingWall(velocity) => Some(*velocity),
            _ => None,
        }
    }
}

/// How an inlet's velocity varies over its face (`profile = …`).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum InletProfile {
    /// The same velocity everywhere (the default).
    #[default]
    Uniform,
    /// Zero at the walls on either side, the inlet velocity midway: laminar
    /// channel flow between two walls, or a duct's product of two parabolas.
    Parabolic,
    /// Log law over the floor (the z_min wall), the inlet velocity at the
    /// top: the atmospheric boundary layer, `roughness` z0 in cells.
    Log { roughness: f64 },
}

impl fmt::Display for InletProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InletProfile::Uniform => write!(f, "uniform profile"),
            InletProfile::Parabolic => write!(f, "parabolic profile"),
            InletProfile::Log { roughness } => {
                write!(f, "log-law profile (roughness z0 = {roughness} cells)")
            }
        }
    }
}

const FACE_NAMES: &[&str] = &[
    "wall",
    "periodic",
    "outlet",
    "convective_outlet",
    "free_slip",
    "moving_wall",
    "inlet",
];

impl<'de> Deserialize<'de> for Face {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Face, D::Error> {
        use serde::de::{self, MapAccess, Visitor};
        struct FaceVisitor;
        impl<'de> Visitor<'de> for FaceVisitor {
            type Value = Face;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "\"wall\", \"periodic\", \"outlet\", \"convective_outlet\", \"free_slip\", { moving_wall = [u, v, w] } or { inlet = [u, v, w] }",
                )
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<Face, E> {
                match name {
                    "wall" => Ok(Face::Wall),
                    "periodic" => Ok(Face::Periodic),
                    "outlet" => Ok(Face::Outlet),
                    "convective_outlet" => Ok(Face::ConvectiveOutlet),
                    "free_slip" => Ok(Face::FreeSlip),
                    "moving_wall" | "inlet" => Err(E::custom(format!(
                        "`{name}` needs a velocity: {{ {name} = [1.0, 0.0, 0.0] }}"
                    ))),
                    _ => Err(E::unknown_variant(name, FACE_NAMES)),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Face, A::Error> {
                let three = |v: Vec<f64>| -> Result<[f64; 3], A::Error> {
                    let n = v.len();
                    v.try_into()
                        .map_err(|_| de::Error::invalid_length(n, &"exactly 3 values"))
                };
                let (mut inlet, mut moving, mut profile, mut roughness) = (None, None, None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "inlet" => inlet = Some(three(map.next_value()?)?),
                        "moving_wall" => moving = Some(three(map.next_value()?)?),
                        "profile" => profile = Some(map.next_value::<String>()?),
                        "roughness" => roughness = Some(map.next_value::<f64>()?),
                        other => {
                            return Err(de::Error::unknown_field(
                                other,
                                &["inlet", "moving_wall", "profile", "roughness"],
                            ))
                        }
                    }
                }
                match (inlet, moving) {
                    (Some(_), Some(_)) => Err(de::Error::custom(
                        "a face is either an inlet or a moving wall, not both",
                    )),
                    (None, Some(v)) => match (profile, roughness) {
                        (None, None) => Ok(Face::MovingWall(v)),
                        _ => Err(de::Error::custom(
                            "`profile` and `roughness` belong to inlets, not moving walls",
                        )),
                    },
                    (Some(velocity), None) => {
                        let profile = match (profile.as_deref(), roughness) {
                            (None | Some("uniform"), None) => InletProfile::Uniform,
                            (Some("parabolic"), None) => InletProfile::Parabolic,
                            (Some("log"), Some(roughness)) => InletProfile::Log { roughness },
                            (Some("log"), None) => {
                                return Err(de::Error::custom(
                                    "a log-law profile needs `roughness`, the roughness length z0 in cells, e.g. roughness = 0.5",
                                ))
                            }
                            (None | Some("uniform" | "parabolic"), Some(_)) => {
                                return Err(de::Error::custom(
                                    "`roughness` belongs to profile = \"log\"",
                                ))
                            }
                            (Some(other), _) => {
                                return Err(de::Error::unknown_variant(
                                    other,
                                    &["uniform", "parabolic", "log"],
                                ))
                            }
                        };
                        Ok(Face::Inlet { velocity, profile })
                    }
                    (None, None) => Err(de::Error::custom(
                        "a face table needs `inlet = [u, v, w]` or `moving_wall = [u, v, w]`",
                    )),
                }
            }
        }
        d.deserialize_any(FaceVisitor)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Axis {
    X,
    Y,
    Z,
}

impl Axis {
    pub fn index(self) -> usize {
        self as usize
    }
}

/// How the walls of a curved obstacle meet the lattice.
///
/// Interpolated is the default: on the GPU the sphere at Re 100 (20 cells
/// across, 15 diameters of domain) drags 1.6% above Schiller–Naumann with it
/// and 5.2% above with staircase walls, and the scenario runs 1% slower
/// (BENCHMARKS.md, issue 21).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Surface {
    /// Half-way bounce-back at the faces of the solid cells: the surface moves
    /// to the cells' faces (first order in the wall position).
    Staircase,
    /// Interpolated bounce-back with the exact wall distance of each link
    /// (second order; `solver::lbm::links`).
    #[default]
    Interpolated,
}

/// An obstacle (solid cells with their own drag and lift).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "shape", rename_all = "snake_case", deny_unknown_fields)]
pub enum Shape {
    Sphere {
        #[serde(deserialize_with = "exactly")]
        center: [f64; 3],
        radius: f64,
        #[serde(default)]
        surface: Surface,
    },
    /// Circular cylinder through the whole domain along `axis`.
    Cylinder {
        #[serde(deserialize_with = "exactly")]
        center: [f64; 3],
        radius: f64,
        axis: Axis,
        #[serde(default)]
        surface: Surface,
    },
    /// Axis-aligned box; cells whose centres lie within [min, max].
    Box {
        #[serde(deserialize_with = "exactly")]
        min: [f64; 3],
        #[serde(deserialize_with = "exactly")]
        max: [f64; 3],
    },
    /// Blocks of buildings on the floor (z = min[2]): square blocks of `block`
    /// cells separated by `street` cells, heights drawn from `heights` with `seed`.
    Buildings {
        #[serde(deserialize_with = "exactly")]
        min: [f64; 3],
        #[serde(deserialize_with = "exactly")]
        max: [f64; 3],
        block: f64,
        street: f64,
        #[serde(deserialize_with = "exactly")]
        heights: [f64; 2],
        #[serde(default)]
        seed: u64,
    },
    /// A closed triangle mesh from an STL file (binary or ASCII), voxelised by
    /// ray parity.
    Mesh {
        /// The STL file, relative to the scenario file.
        file: PathBuf,
        /// Mesh units to cells.
        #[serde(default = "one")]
        scale: f64,
        /// Where the mesh's bounding-box centre goes, in cells.
        #[serde(deserialize_with = "exactly")]
        center: [f64; 3],
        /// Degrees about x, then y, then z.
        #[serde(default, deserialize_with = "exactly")]
        rotate: [f64; 3],
        #[serde(default)]
        surface: Surface,
        /// The triangles in cells, filled in when the scenario is loaded.
        #[serde(skip)]
        placed: std::sync::Arc<mesh::PlacedMesh>,
    },
}

fn one() -> f64 {
    1.0
}

impl Shape {
    /// Its walls' treatment (boxes and buildings are staircases: their faces
    /// lie on cell faces).
    pub fn surface(&self) -> Surface {
        match self {
            Shape::Sphere { surface, .. }
            | Shape::Cylinder { surface, .. }
            | Shape::Mesh { surface, .. } => *surface,
            _ => Surface::Staircase,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Shape::Sphere { .. } => "sphere",
            Shape::Cylinder { .. } => "cylinder",
            Shape::Box { .. } => "box",
            Shape::Buildings { .. } => "buildings",
            Shape::Mesh { .. } => "mesh",
        }
    }
}

/// A list of exactly `N` values. serde reads `[T; N]` from the first N items
/// of a longer list and drops the rest silently, so `size = [64, 64, 64, 4]`
/// would pass as 64³.
fn exactly<'de, D, T, const N: usize>(d: D) -> Result<[T; N], D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    let items = Vec::<T>::deserialize(d)?;
    let n = items.len();
    items
        .try_into()
        .map_err(|_| serde::de::Error::invalid_length(n, &format!("exactly {N} values").as_str()))
}

fn exactly_some<'de, D, T, const N: usize>(d: D) -> Result<Option<[T; N]>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    exactly(d).map(Some)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DomainSection {
    size: Spanned<Vec<i64>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct BoundarySection {
    x: Option<Spanned<Face>>,
    y: Option<Spanned<Face>>,
    z: Option<Spanned<Face>>,
    x_min: Option<Spanned<Face>>,
    x_max: Option<Spanned<Face>>,
    y_min: Option<Spanned<Face>>,
    y_max: Option<Spanned<Face>>,
    z_min: Option<Spanned<Face>>,
    z_max: Option<Spanned<Face>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FluidSection {
    reynolds: Option<Spanned<f64>>,
    length_cells: Spanned<f64>,
    velocity: Option<Spanned<f64>>,
    mach: Option<Spanned<f64>>,
    /// Default: TRT, or the regularized collision with a subgrid model.
    collision: Option<Collision>,
    #[serde(default)]
    turbulence: Turbulence,
    smagorinsky_constant: Option<Spanned<f64>>,
    /// Body force per unit volume, lattice units.
    #[serde(default, deserialize_with = "exactly")]
    force: [f64; 3],
    /// Initial velocity in units of `velocity`; default: the first inlet's.
    #[serde(default, deserialize_with = "exactly_some")]
    initial_velocity: Option<[f64; 3]>,
    /// Random perturbation of the initial velocity, in units of `velocity`.
    initial_noise: Option<Spanned<f64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PhysicalSection {
    cell_size_m: Spanned<f64>,
    velocity_m_s: Spanned<f64>,
    viscosity_m2_s: Spanned<f64>,
    #[serde(default = "default_density")]
    density_kg_m3: f64,
}

fn default_density() -> f64 {
    1.0
}

/// What to run when nothing else is asked for.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunSection {
    #[serde(default = "default_steps")]
    pub steps: u64,
    /// Stop once the mean relative change of the velocity per step is below this.
    pub until_steady: Option<f64>,
    /// The solution method.
    #[serde(default)]
    pub method: Method,
    /// The projection method's advective CFL number: its sub-steps keep
    /// the largest |u| Δt / Δx to it (and the viscous limit).
    #[serde(default = "default_cfl")]
    pub cfl: f64,
    /// How the projection method solves for the pressure.
    #[serde(default)]
    pub pressure: PressureSolver,
    /// The relative residual ‖b − A p‖ / ‖b‖ at which the projection
    /// method's pressure solves stop (or earlier, at f32's rounding floor).
    #[serde(default = "default_tolerance")]
    pub tolerance: f64,
    /// The share of first-order upwind the projection method blends into
    /// its central differences for advection (the seed's hybrid factor):
    /// 0 is central (second order), 1 upwind (first order, robust).
    #[serde(default)]
    pub upwind: f64,
}

/// The projection method's pressure solver: the solver's own type.
pub use crate::solver::projection::PressureSolver;

fn default_cfl() -> f64 {
    0.5
}

fn default_tolerance() -> f64 {
    crate::solver::projection::solver::TOLERANCE
}

/// How the flow is solved.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// D3Q19 lattice Boltzmann (CPU and CUDA).
    #[default]
    Lbm,
    /// Incompressible Navier–Stokes by projection on a staggered grid (CPU).
    Projection,
}

fn default_steps() -> u64 {
    1000
}

impl Default for RunSection {
    fn default() -> Self {
        RunSection {
            steps: default_steps(),
            until_steady: None,
            method: Method::Lbm,
            cfl: default_cfl(),
            pressure: PressureSolver::Multigrid,
            tolerance: default_tolerance(),
            upwind: 0.0,
        }
    }
}

/// Axes onto which obstacle forces are projected for drag and lift.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ForcesSection {
    #[serde(default = "axis_x")]
    pub drag: Axis,
    #[serde(default = "axis_y")]
    pub lift: Axis,
}

fn axis_x() -> Axis {
    Axis::X
}
fn axis_y() -> Axis {
    Axis::Y
}

impl Default for ForcesSection {
    fn default() -> Self {
        ForcesSection {
            drag: Axis::X,
            lift: Axis::Y,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    name: String,
    #[serde(default)]
    description: String,
    domain: DomainSection,
    #[serde(default)]
    boundaries: BoundarySection,
    fluid: FluidSection,
    physical: Option<PhysicalSection>,
    #[serde(default)]
    obstacles: Vec<Spanned<Shape>>,
    #[serde(default)]
    run: RunSection,
    #[serde(default)]
    forces: ForcesSection,
    dispersion: Option<release::DispersionSection>,
    #[serde(default)]
    sources: Vec<Spanned<release::RawSource>>,
    #[serde(default)]
    receptors: Vec<Spanned<release::RawReceptor>>,
}

/// A loaded, checked scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    pub path: PathBuf,
    /// The file's text after `--set` overrides (kept for checkpoints and errors).
    pub source: String,
    pub name: String,
    pub description: String,
    pub size: [usize; 3],
    /// Faces in the order x_min, x_max, y_min, y_max, z_min, z_max.
    pub faces: [Face; 6],
    pub units: Units,
    pub collision: Collision,
    pub turbulence: Turbulence,
    /// The Smagorinsky constant C_s (used with [`Turbulence::Smagorinsky`]).
    pub smagorinsky_constant: f64,
    pub force: [f64; 3],
    pub initial_velocity: [f64; 3],
    /// Largest random perturbation of each initial velocity component, in
    /// units of `fluid.velocity` (0: none). A flow symmetric along an axis,
    /// such as the wake of a spanwise-periodic cylinder, stays exactly
    /// two-dimensional in deterministic arithmetic until something breaks the
    /// symmetry; a few percent lets the three-dimensional instability grow.
    pub initial_noise: f64,
    pub obstacles: Vec<Shape>,
    pub run: RunSection,
    pub forces: ForcesSection,
    /// Contaminant sources and receptors (`[[sources]]`, `[[receptors]]`,
    /// `[dispersion]`).
    pub releases: release::Releases,
    /// Merely risky settings, for the user to read.
    pub warnings: Vec<String>,
    size_span: Option<(usize, usize)>,
    /// Where each obstacle is written in the file.
    obstacle_lines: Vec<Option<(usize, usize)>>,
}

/// Whether a face is a no-slip wall (a parabolic profile vanishes there).
fn is_wall(face: &Face) -> bool {
    matches!(face, Face::Wall | Face::MovingWall(_))
}

/// The walled axes a parabolic profile on face `k` varies along: those across
/// its face with walls on both sides.
pub fn parabolic_axes(faces: &[Face; 6], k: usize) -> [bool; 3] {
    [0, 1, 2].map(|a| a != k / 2 && is_wall(&faces[2 * a]) && is_wall(&faces[2 * a + 1]))
}

/// Checks an inlet profile against the faces around it.
fn check_profile(
    ctx: &Ctx,
    faces: &[Face; 6],
    k: usize,
    profile: InletProfile,
    size: [usize; 3],
) -> Result<(), ScenarioError> {
    let names = ["x_min", "x_max", "y_min", "y_max", "z_min", "z_max"];
    let place = ctx.key(names[k]).or_else(|| ctx.key(&names[k][..1]));
    match profile {
        InletProfile::Uniform => Ok(()),
        InletProfile::Parabolic => {
            if parabolic_axes(faces, k).contains(&true) {
                Ok(())
            } else {
                Err(ctx.err(
                    place,
                    format!(
                        "boundaries.{}: a parabolic profile needs walls on both sides of the inlet along one of its axes, but no pair of faces across it is two walls",
                        names[k]
                    ),
                    "make the faces on either side walls (a channel), or use profile = \"uniform\"",
                ))
            }
        }
        InletProfile::Log { roughness } => {
            // The top of the fluid, as Profiles::hi puts it.
            let height = size[2] as f64 - 2.0;
            if k / 2 == 2 {
                Err(ctx.err(
                    place,
                    format!(
                        "boundaries.{}: a log-law profile grows with height above the floor (z_min), so it cannot be on a z face",
                        names[k]
                    ),
                    "put the log-law inlet on an x or y face",
                ))
            } else if faces[4] != Face::Wall {
                Err(ctx.err(
                    place,
                    format!(
                        "boundaries.{}: a log-law profile needs a floor, but z_min is {:?}",
                        names[k], faces[4]
                    ),
                    "set z_min = \"wall\" (the ground)",
                ))
            } else if !(roughness > 0.0 && roughness < height) {
                Err(ctx.err(
                    place,
                    format!(
                        "boundaries.{}: roughness = {roughness} must be a length in cells between 0 and the height of the fluid ({height})",
                        names[k]
                    ),
                    "use a roughness length of a fraction of a cell to a few cells, e.g. 0.5",
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// Lines and columns of byte offsets in a text.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rfind('\n').map_or(offset, |p| offset - p - 1) + 1;
    (line, col)
}

struct Ctx<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Ctx<'_> {
    /// Where `key = …` is written (the first line that sets it), for values
    /// read without their place in the file.
    fn key(&self, key: &str) -> Option<std::ops::Range<usize>> {
        let mut offset = 0;
        for line in self.text.split_inclusive('\n') {
            let trimmed = line.trim_start();
            if let Some(rest) = trimmed.strip_prefix(key) {
                if rest.trim_start().starts_with('=') {
                    let start = offset + (line.len() - trimmed.len());
                    return Some(start..start + key.len());
                }
            }
            offset += line.len();
        }
        None
    }

    fn err(
        &self,
        span: Option<std::ops::Range<usize>>,
        message: impl Into<String>,
        help: impl Into<String>,
    ) -> ScenarioError {
        ScenarioError {
            file: self.path.to_path_buf(),
            line: span.map(|s| line_col(self.text, s.start)),
            message: message.into(),
            help: help.into(),
        }
    }
}

impl Scenario {
    /// Reads and checks a scenario file, with `key=value` overrides applied first.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: path.to_path_buf(),
            line: None,
            message: format!("cannot read the scenario file: {e}"),
            help: "check the path; the shipped scenarios are in assets/scenarios/".into(),
        })?;
        Scenario::from_text(path, &text, overrides)
    }

    /// Like [`Scenario::load`] for text already in memory; `path` names it in errors.
    pub fn from_text(
        path: &Path,
        text: &str,
        overrides: &[String],
    ) -> Result<Scenario, ScenarioError> {
        let note = |mut e: ScenarioError| {
            if !overrides.is_empty() {
                e.message
                    .push_str(&format!(" (with --set {})", overrides.join(" --set ")));
            }
            e
        };
        let text = apply_overrides(path, text, overrides)?;
        let ctx = Ctx { path, text: &text };
        let file: ScenarioFile = toml::from_str(&text).map_err(|e| {
            let msg = e.message().trim_end().to_string();
            let help = if msg.contains("unknown field") {
                "remove or correct the key; the keys each section accepts are listed in README.md (Scenario files)"
            } else if msg.contains("missing field") {
                "add the missing key (see the shipped scenarios in assets/scenarios/ for examples)"
            } else if msg.contains("unknown variant") {
                "use one of the values listed in the message"
            } else {
                "fix the TOML syntax or value at this place"
            };
            note(ctx.err(e.span(), msg, help))
        })?;
        build(&ctx, file, &text).map_err(note)
    }

    /// The lattice grid (periodic axes from the faces).
    pub fn grid(&self) -> Grid {
        let periodic = [0, 1, 2].map(|a| self.faces[2 * a] == Face::Periodic);
        Grid {
            size: self.size,
            periodic,
        }
    }

    /// Cell flags, velocity slots and the obstacle list, from the geometry.
    pub fn voxelize(&self) -> geometry::Voxels {
        geometry::voxelize(self)
    }

    /// Solver parameters: τ, collision, body force, and the velocity slots of the
    /// inlets and moving walls (from [`geometry::Voxels::slots`]).
    pub fn params(&self, slots: &geometry::VelocitySlots) -> Params {
        let mut p = Params::new(self.units.tau as f32, self.collision);
        p.force = self.force.map(|f| f as f32);
        if self.turbulence == Turbulence::Smagorinsky {
            p.smagorinsky = self.smagorinsky_constant as f32;
        }
        p.velocities = slots.lattice(self.units.velocity_lattice);
        p.profiles = slots.profiles;
        p
    }

    /// This scenario at another Reynolds number, the lattice speed kept (τ
    /// follows). With physical units the viscosity follows instead, so that
    /// U L / ν stays the Reynolds number. Refused where τ would not be above ½.
    pub fn with_reynolds(&self, reynolds: f64) -> Result<Scenario, ScenarioError> {
        if !(reynolds > 0.0 && reynolds.is_finite()) {
            return Err(self.live_error(
                format!("the Reynolds number {reynolds} is not a positive number"),
                "use a Reynolds number such as 100",
            ));
        }
        let u = &self.units;
        let mut units = Units::from_reynolds(reynolds, u.length_cells, u.velocity_lattice);
        units.physical = u.physical.clone().map(|mut p| {
            p.viscosity_m2_s = p.velocity_m_s * u.length_cells * p.cell_size_m / reynolds;
            p
        });
        self.with_units(units)
    }

    /// This scenario at another lattice reference speed (inlets, lids), the
    /// Reynolds number kept. Refused above Mach 0.3 or where τ would not be
    /// above ½.
    pub fn with_velocity(&self, velocity_lattice: f64) -> Result<Scenario, ScenarioError> {
        if !(velocity_lattice > 0.0 && velocity_lattice.is_finite()) {
            return Err(self.live_error(
                format!("the lattice speed {velocity_lattice} is not a positive number"),
                "use a speed such as 0.05",
            ));
        }
        let u = &self.units;
        let mut units = Units::from_reynolds(u.reynolds, u.length_cells, velocity_lattice);
        units.physical = u.physical.clone();
        if let Some(message) = mach_error(&units) {
            return Err(self.live_error(
                message,
                format!(
                    "use a lattice speed ≤ {:.3} (Ma 0.3)",
                    Units::velocity_for_mach(MACH_MAX)
                ),
            ));
        }
        self.with_units(units)
    }

    /// This scenario with the subgrid model on or off. Turning it on also
    /// takes the regularized collision, the one that stays up with it
    /// ([`SMAGORINSKY_CONSTANT`] unless the file set a constant); turning it
    /// off keeps the collision.
    pub fn with_turbulence(&self, turbulence: Turbulence) -> Scenario {
        let mut s = self.clone();
        s.turbulence = turbulence;
        if turbulence == Turbulence::Smagorinsky {
            s.collision = Collision::Regularized;
        }
        s.warnings = unit_warnings(&s.units, s.turbulence, s.collision);
        s
    }

    fn with_units(&self, units: Units) -> Result<Scenario, ScenarioError> {
        if let Some((message, help)) = tau_error(&units) {
            return Err(self.live_error(message, help));
        }
        let mut s = self.clone();
        s.warnings = unit_warnings(&units, s.turbulence, s.collision);
        s.units = units;
        Ok(s)
    }

    /// An error in a value changed while the scenario runs (no file line).
    fn live_error(&self, message: String, help: impl Into<String>) -> ScenarioError {
        ScenarioError {
            file: self.path.clone(),
            line: None,
            message,
            help: help.into(),
        }
    }

    pub fn initial(&self) -> Initial {
        let u = self.units.velocity_lattice;
        let velocity = self.initial_velocity.map(|v| (v * u) as f32);
        if self.initial_noise > 0.0 {
            Initial::Perturbed {
                velocity,
                amplitude: (self.initial_noise * u) as f32,
                z_offset: 0,
                nz_global: self.size[2] as u32,
            }
        } else {
            Initial::Uniform(velocity)
        }
    }

    /// Checks that a solver needing `bytes_per_cell` fits in `available` bytes.
    pub fn check_memory(
        &self,
        bytes_per_cell: f64,
        available: u64,
        what: &str,
    ) -> Result<(), ScenarioError> {
        let cells = self.size.iter().map(|&n| n as f64).product::<f64>();
        let need = cells * bytes_per_cell;
        if need <= available as f64 {
            return Ok(());
        }
        let side = (available as f64 / bytes_per_cell).cbrt().floor();
        Err(ScenarioError {
            file: self.path.clone(),
            line: self.size_span,
            message: format!(
                "the grid {}x{}x{} needs {} for {what}, but only {} are available",
                self.size[0],
                self.size[1],
                self.size[2],
                human_bytes(need as u64),
                human_bytes(available)
            ),
            help: format!(
                "make domain.size smaller (the largest cube that fits is {side}³ cells, {:.0} million cells in all), or use a solver with more memory",
                available as f64 / bytes_per_cell / 1e6
            ),
        })
    }

    /// Refuses geometry that voxelised to nothing useful: no fluid cell, or
    /// an obstacle that covers no cell centre (its drag would read 0).
    pub fn check_voxels(&self, voxels: &geometry::Voxels) -> Result<(), ScenarioError> {
        if voxels.fluid_cells == 0 {
            return Err(ScenarioError {
                file: self.path.clone(),
                line: self.size_span,
                message: "the domain has no fluid cells".into(),
                help: "make the domain larger or the obstacles smaller".into(),
            });
        }
        for (k, o) in voxels.obstacles.iter().enumerate() {
            if o.cells == 0 {
                let shape = &self.obstacles[k];
                let why = match shape {
                    Shape::Sphere { radius, .. } | Shape::Cylinder { radius, .. } => format!(
                        "with radius {radius} it holds no cell centre (cell centres are whole numbers)"
                    ),
                    _ => "it holds no cell centre, or later obstacles cover all of it".into(),
                };
                return Err(ScenarioError {
                    file: self.path.clone(),
                    line: self.obstacle_lines.get(k).copied().flatten(),
                    message: format!("obstacle {}: {why}", o.name),
                    help: "make it larger (a radius of 1 cell or more), move it, or remove it; drag and lift of an empty obstacle would read 0".into(),
                });
            }
        }
        Ok(())
    }

    pub fn cells(&self) -> u64 {
        self.size.iter().map(|&n| n as u64).product()
    }
}

const TAU_HELP: &str =
    "lower the Reynolds number, lower the lattice speed, or use fewer cells per characteristic length";

const TAU_MAX_HELP: &str =
    "raise the Reynolds number, or lower the lattice speed (fluid.velocity) so that the lattice viscosity falls";

/// Why the derived units cannot run: τ not above ½. The solvers relax in
/// FP32, so τ must be above ½ there too.
fn tau_error(units: &Units) -> Option<(String, &'static str)> {
    let tau = units.tau as f32;
    if !(tau > 0.5) {
        return Some((format!(
            "τ = {:.6} is not above 0.5 (viscosity {:.3e} in lattice units): the scheme is unstable",
            units.tau, units.viscosity_lattice
        ), TAU_HELP));
    }
    // Far above 1 the populations hardly relax towards equilibrium in a step
    // and the boundary conditions lose their accuracy; at 1e300 it is not a
    // number in FP32 at all.
    (!(tau <= TAU_MAX)).then(|| {
        (format!(
            "τ = {:.3e} is above {TAU_MAX} (Reynolds number {:.3e}, viscosity {:.3e} in lattice units): the fluid is too viscous for the lattice",
            units.tau, units.reynolds, units.viscosity_lattice
        ), TAU_MAX_HELP)
    })
}

/// The subgrid model of `fluid.turbulence`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Turbulence {
    /// Direct simulation: the grid must resolve the smallest eddies.
    #[default]
    None,
    /// Smagorinsky–Lilly large-eddy simulation: an eddy viscosity
    /// (C_s Δ)² |S| from the local strain rate.
    Smagorinsky,
}

/// The default Smagorinsky constant. Lilly's 0.17 comes from isotropic
/// turbulence and damps sheared flows too much: near walls and in the wakes
/// of bluff bodies 0.1 (Deardorff's value for channel flow) is the usual
/// choice, also for LBM large-eddy simulations of cylinders, spheres and
/// buildings; a scenario can set its own.
pub const SMAGORINSKY_CONSTANT: f64 = 0.1;

/// The largest relaxation time a scenario may ask for.
pub const TAU_MAX: f32 = 100.0;

/// Why the derived units cannot run: a Mach number above [`MACH_MAX`].
fn mach_error(units: &Units) -> Option<String> {
    let mach = units.mach();
    (mach > MACH_MAX).then(|| {
        format!(
            "Mach number {mach:.3} (lattice speed {}) is above {MACH_MAX}: compressibility errors and instability",
            units.velocity_lattice
        )
    })
}

/// Merely risky values of the derived units, for the user to read.
fn unit_warnings(units: &Units, turbulence: Turbulence, collision: Collision) -> Vec<String> {
    let mut warnings = Vec::new();
    if units.tau < TAU_RISKY && turbulence == Turbulence::None {
        let collision_help = match collision {
            Collision::Regularized => "",
            _ => "; fluid.collision = \"regularized\" helps too",
        };
        warnings.push(format!(
            "τ = {:.4} is below {TAU_RISKY}: the run may become unstable; for turbulent flows turn on the subgrid model (fluid.turbulence = \"smagorinsky\"){collision_help}, or use a finer grid or a lower Reynolds number",
            units.tau
        ));
    }
    let mach = units.mach();
    if mach > MACH_RISKY {
        warnings.push(format!(
            "Mach number {mach:.3} is above {MACH_RISKY}: compressibility errors grow as Ma²"
        ));
    }
    warnings
}

fn span_of<T>(s: &Spanned<T>) -> Option<std::ops::Range<usize>> {
    Some(s.span())
}

fn build(ctx: &Ctx, file: ScenarioFile, text: &str) -> Result<Scenario, ScenarioError> {
    let mut warnings = Vec::new();

    // The box.
    let size_span = span_of(&file.domain.size);
    let size_raw: [i64; 3] = file
        .domain
        .size
        .get_ref()
        .as_slice()
        .try_into()
        .map_err(|_| {
            ctx.err(
                size_span.clone(),
                format!(
                    "domain.size has {} values; it takes three, the cells along x, y and z",
                    file.domain.size.get_ref().len()
                ),
                "write e.g. size = [128, 64, 64]",
            )
        })?;
    for (a, &n) in size_raw.iter().enumerate() {
        if n < 3 {
            return Err(ctx.err(
                size_span.clone(),
                format!("domain.size[{a}] = {n}: every axis needs at least 3 cells"),
                "give each axis 3 or more cells (one boundary layer per non-periodic face plus fluid)",
            ));
        }
    }
    let size = size_raw.map(|n| n as usize);
    let cells = size.iter().map(|&n| n as u128).product::<u128>();
    if cells > 1u128 << 48 {
        return Err(ctx.err(
            size_span.clone(),
            format!("domain.size = {size:?} has {cells} cells, more than any machine can hold"),
            "make the grid smaller",
        ));
    }

    // Faces.
    let b = &file.boundaries;
    let pairs = [
        (&b.x, &b.x_min, &b.x_max),
        (&b.y, &b.y_min, &b.y_max),
        (&b.z, &b.z_min, &b.z_max),
    ];
    let names = ["x", "y", "z"];
    let mut faces: Vec<Face> = Vec::with_capacity(6);
    for (a, (both, lo, hi)) in pairs.iter().enumerate() {
        if both.is_some() && (lo.is_some() || hi.is_some()) {
            let s = both.as_ref().map(span_of).unwrap_or(None);
            return Err(ctx.err(
                s,
                format!(
                    "boundaries.{} and boundaries.{0}_min/{0}_max both given",
                    names[a]
                ),
                format!(
                    "give either `{0}` for both faces or `{0}_min` and `{0}_max`",
                    names[a]
                ),
            ));
        }
        let pick = |side: &Option<Spanned<Face>>| -> Face {
            both.as_ref()
                .or(side.as_ref())
                .map(|s| s.get_ref().clone())
                .unwrap_or(Face::Wall)
        };
        let (f_lo, f_hi) = (pick(lo), pick(hi));
        if (f_lo == Face::Periodic) != (f_hi == Face::Periodic) {
            let s = lo.as_ref().or(hi.as_ref()).map(span_of).unwrap_or(None);
            return Err(ctx.err(
                s,
                format!("only one {} face is periodic", names[a]),
                format!(
                    "periodic edges come in pairs: write `{} = \"periodic\"`",
                    names[a]
                ),
            ));
        }
        faces.push(f_lo);
        faces.push(f_hi);
    }
    let faces: [Face; 6] = faces.try_into().expect("six faces");

    // The fluid and units.
    let fl = &file.fluid;
    let length_cells = *fl.length_cells.get_ref();
    if !(length_cells > 0.0 && length_cells.is_finite()) {
        return Err(ctx.err(
            span_of(&fl.length_cells),
            format!("fluid.length_cells = {length_cells} must be a positive number"),
            "set the characteristic length (diameter, cavity side, building height) in cells",
        ));
    }
    let (velocity, vspan) = match (&fl.velocity, &fl.mach) {
        (Some(_), Some(m)) => {
            return Err(ctx.err(
                span_of(m),
                "both fluid.velocity and fluid.mach are given",
                "give one of them: the lattice speed, or the Mach number (u = Ma/√3)",
            ))
        }
        (Some(v), None) => (*v.get_ref(), span_of(v)),
        (None, Some(m)) => (Units::velocity_for_mach(*m.get_ref()), span_of(m)),
        (None, None) => {
            return Err(ctx.err(
                span_of(&fl.length_cells),
                "the fluid has no reference speed",
                "add fluid.velocity (lattice units, e.g. 0.05) or fluid.mach (e.g. 0.1)",
            ))
        }
    };
    if !(velocity.is_finite() && velocity >= 0.0) {
        return Err(ctx.err(
            vspan,
            format!("the lattice speed {velocity} is not a non-negative number"),
            "use a speed such as 0.05",
        ));
    }
    let units = match (&fl.reynolds, &file.physical) {
        (Some(re), None) => {
            let r = *re.get_ref();
            if !(r > 0.0 && r.is_finite()) {
                return Err(ctx.err(span_of(re), format!("fluid.reynolds = {r} must be positive"), "use a Reynolds number such as 100"));
            }
            Units::from_reynolds(r, length_cells, velocity)
        }
        (Some(re), Some(_)) => {
            return Err(ctx.err(
                span_of(re),
                "fluid.reynolds is given together with a [physical] section",
                "drop fluid.reynolds (it follows from the physical speed, length and viscosity) or drop [physical]",
            ))
        }
        (None, Some(p)) => {
            for (v, name) in [(&p.cell_size_m, "cell_size_m"), (&p.velocity_m_s, "velocity_m_s"), (&p.viscosity_m2_s, "viscosity_m2_s")] {
                if !(*v.get_ref() > 0.0 && v.get_ref().is_finite()) {
                    return Err(ctx.err(span_of(v), format!("physical.{name} must be positive"), "give SI values, e.g. cell_size_m = 0.001"));
                }
            }
            Units::from_physical(
                PhysicalUnits {
                    cell_size_m: *p.cell_size_m.get_ref(),
                    velocity_m_s: *p.velocity_m_s.get_ref(),
                    viscosity_m2_s: *p.viscosity_m2_s.get_ref(),
                    density_kg_m3: p.density_kg_m3,
                },
                length_cells,
                velocity,
            )
        }
        (None, None) => {
            return Err(ctx.err(
                span_of(&fl.length_cells),
                "the fluid has no Reynolds number",
                "add fluid.reynolds, or a [physical] section with cell_size_m, velocity_m_s and viscosity_m2_s",
            ))
        }
    };
    let re_span = fl.reynolds.as_ref().map(span_of).unwrap_or(vspan.clone());
    if let Some((message, help)) = tau_error(&units) {
        return Err(ctx.err(re_span, message, help));
    }
    if let Some(message) = mach_error(&units) {
        return Err(ctx.err(
            vspan,
            message,
            format!(
                "use fluid.velocity ≤ {:.3} (Ma 0.3); to keep the Reynolds number, add cells",
                Units::velocity_for_mach(MACH_MAX)
            ),
        ));
    }
    let smagorinsky_constant = match (&fl.smagorinsky_constant, fl.turbulence) {
        (None, _) => SMAGORINSKY_CONSTANT,
        (Some(c), Turbulence::None) => return Err(ctx.err(
            span_of(c),
            "fluid.smagorinsky_constant is set but fluid.turbulence is \"none\"",
            "add fluid.turbulence = \"smagorinsky\" to use the subgrid model, or drop the constant",
        )),
        (Some(c), Turbulence::Smagorinsky) => {
            let v = *c.get_ref();
            if !(v > 0.0 && v <= 0.5) {
                return Err(ctx.err(
                    span_of(c),
                    format!("fluid.smagorinsky_constant = {v} is not between 0 and 0.5"),
                    format!("use a value between 0.08 and 0.2; the default {SMAGORINSKY_CONSTANT} suits most flows"),
                ));
            }
            v
        }
    };
    let collision = fl.collision.unwrap_or(match fl.turbulence {
        // The only combination that ran the urban block at Re 10⁴ and 10⁶
        // for 20 000 steps; TRT and BGK, with or without the model, blew up
        // (BENCHMARKS.md, 2026-11-24).
        Turbulence::Smagorinsky => Collision::Regularized,
        Turbulence::None => Collision::Trt,
    });
    warnings.extend(unit_warnings(&units, fl.turbulence, collision));
    if file.run.method == Method::Lbm {
        let names = ["x_min", "x_max", "y_min", "y_max", "z_min", "z_max"];
        for (name, face) in names.iter().zip(&faces) {
            if *face == Face::ConvectiveOutlet {
                warnings.push(format!(
                    "boundaries.{name} = \"convective_outlet\": the lattice Boltzmann method \
                     takes it as its zero-gradient outlet; the convective condition is the \
                     projection method's ([run] method = \"projection\")"
                ));
            }
        }
    }
    let force = fl.force;
    let finite = |values: &[f64]| values.iter().all(|v| v.is_finite());
    if !finite(&force) {
        return Err(ctx.err(
            ctx.key("force"),
            format!("fluid.force = {force:?} holds a value that is not a number"),
            "give the body force per unit volume in lattice units, e.g. [1e-6, 0, 0]",
        ));
    }
    if let Some(v) = fl.initial_velocity {
        if !finite(&v) {
            return Err(ctx.err(
                ctx.key("initial_velocity"),
                format!("fluid.initial_velocity = {v:?} holds a value that is not a number"),
                "give the initial velocity in units of fluid.velocity, e.g. [1, 0, 0]",
            ));
        }
    }
    if !finite(&[file.physical.as_ref().map_or(1.0, |p| p.density_kg_m3)])
        || file
            .physical
            .as_ref()
            .is_some_and(|p| !(p.density_kg_m3 > 0.0))
    {
        return Err(ctx.err(
            ctx.key("density_kg_m3"),
            "physical.density_kg_m3 must be a positive number",
            "give the density in kg/m³, e.g. 1.2 for air or 1000 for water",
        ));
    }

    // Velocities of faces must be tangential for moving walls.
    let face_names = ["x_min", "x_max", "y_min", "y_max", "z_min", "z_max"];
    for (k, face) in faces.iter().enumerate() {
        let axis = k / 2;
        if let Some(v) = &face.velocity() {
            if !finite(v) {
                let both = &face_names[k][..1];
                return Err(ctx.err(
                    ctx.key(face_names[k]).or_else(|| ctx.key(both)),
                    format!(
                        "boundaries.{}: the velocity {v:?} holds a value that is not a number",
                        face_names[k]
                    ),
                    "give the face velocity in units of fluid.velocity, e.g. [1, 0, 0]",
                ));
            }
        }
        if let Face::Inlet { profile, .. } = face {
            check_profile(ctx, &faces, k, *profile, size)?;
        }
        if let Face::MovingWall(v) = face {
            if v[axis] != 0.0 {
                return Err(ctx.err(
                    None,
                    format!("boundaries.{}: a moving wall must move along its face, but its velocity has a normal component {}", face_names[k], v[axis]),
                    "set the velocity component normal to the face to 0",
                ));
            }
        }
        if let Some(v) = face.velocity() {
            let speed = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt() * velocity;
            if speed / (crate::solver::lbm::lattice::CS2 as f64).sqrt() > MACH_MAX {
                return Err(ctx.err(
                    None,
                    format!(
                        "boundaries.{}: its speed {speed:.3} exceeds Mach {MACH_MAX}",
                        face_names[k]
                    ),
                    "give face velocities in units of fluid.velocity, of magnitude about 1",
                ));
            }
        }
    }
    let initial_noise = match &fl.initial_noise {
        None => 0.0,
        Some(v) => {
            let noise = *v.get_ref();
            if !(0.0..=0.5).contains(&noise) {
                return Err(ctx.err(
                    Some(v.span()),
                    format!("fluid.initial_noise = {noise} is not between 0 and 0.5"),
                    "give the perturbation in units of fluid.velocity, e.g. 0.05",
                ));
            }
            noise
        }
    };
    let initial_velocity = fl.initial_velocity.unwrap_or_else(|| {
        faces
            .iter()
            .find_map(|f| match f {
                Face::Inlet { velocity, .. } => Some(*velocity),
                _ => None,
            })
            .unwrap_or([0.0; 3])
    });

    // Obstacles.
    if file.obstacles.len() > crate::solver::flags::MAX_TAG as usize {
        return Err(ctx.err(
            span_of(&file.obstacles[crate::solver::flags::MAX_TAG as usize]),
            format!(
                "{} obstacles; at most {} are supported",
                file.obstacles.len(),
                crate::solver::flags::MAX_TAG
            ),
            "merge obstacles (a `buildings` obstacle holds many blocks)",
        ));
    }
    let mut obstacles = Vec::new();
    for (k, o) in file.obstacles.iter().enumerate() {
        let mut shape = o.get_ref().clone();
        if let Shape::Mesh {
            file: stl,
            scale,
            center,
            rotate,
            placed,
            ..
        } = &mut shape
        {
            if !(*scale > 0.0 && scale.is_finite() && rotate.iter().all(|r| r.is_finite())) {
                return Err(ctx.err(
                    span_of(o),
                    format!("obstacle {} (mesh): scale = {scale} must be a positive number and rotate = {rotate:?} finite angles", k + 1),
                    "scale converts mesh units to cells, e.g. 100 for a mesh in metres at 1 cm cells",
                ));
            }
            let at = ctx.path.parent().unwrap_or(Path::new("")).join(&*stl);
            let triangles = mesh::load_cached(&at).map_err(|e| {
                ctx.err(
                    span_of(o),
                    format!("obstacle {} (mesh): {e}", k + 1),
                    if e.contains("cannot be read") {
                        "check `file`: it is relative to the scenario file"
                    } else {
                        "repair the mesh in a mesh tool (e.g. MeshLab, Blender's 3D-Print toolbox) and export it again"
                    },
                )
            })?;
            *placed = std::sync::Arc::new(mesh::place(&triangles, *scale, *center, *rotate));
        }
        let shape = &shape;
        let (lo, hi) = geometry::bounds(shape);
        for a in 0..3 {
            let n = size[a] as f64;
            if lo[a] < 0.0 || hi[a] > n - 1.0 || lo[a] > hi[a] {
                return Err(ctx.err(
                    span_of(o),
                    format!(
                        "obstacle {} ({}) reaches outside the domain along {}: it spans {:.1} to {:.1}, the cells are 0 to {}",
                        k + 1,
                        shape.kind(),
                        names[a],
                        lo[a],
                        hi[a],
                        size[a] - 1
                    ),
                    "move its centre or make it smaller so it lies inside domain.size",
                ));
            }
        }
        if let Err(msg) = geometry::check_shape(shape) {
            return Err(ctx.err(
                span_of(o),
                format!("obstacle {} ({}): {msg}", k + 1, shape.kind()),
                "fix the obstacle's numbers",
            ));
        }
        obstacles.push(shape.clone());
    }
    if !(file.run.cfl > 0.0 && file.run.cfl <= 1.0) {
        return Err(ctx.err(
            None,
            format!(
                "run.cfl = {}: the projection method's CFL number goes from above 0 to 1",
                file.run.cfl
            ),
            "use 0.5 (the default) or less",
        ));
    }
    if !(0.0..=1.0).contains(&file.run.upwind) {
        return Err(ctx.err(
            None,
            format!(
                "run.upwind = {}: the share of upwind differences goes from 0 (central) to 1",
                file.run.upwind
            ),
            "use 0 (the default), or up to 1 where central differences leave wiggles",
        ));
    }
    if !(file.run.tolerance > 0.0 && file.run.tolerance < 1.0) {
        return Err(ctx.err(
            None,
            format!(
                "run.tolerance = {}: the pressure solve's relative residual goes from above 0 \
                 to below 1",
                file.run.tolerance
            ),
            "use 1e-6 (the default), or 1e-8 to 1e-4",
        ));
    }
    if let Some(tol) = file.run.until_steady {
        if !(tol > 0.0) {
            return Err(ctx.err(
                None,
                format!("run.until_steady = {tol} must be positive"),
                "use a tolerance such as 1e-6",
            ));
        }
    }

    let releases = release::check(ctx, size, file.dispersion, file.sources, file.receptors)?;
    let scenario = Scenario {
        path: ctx.path.to_path_buf(),
        source: text.to_string(),
        name: file.name,
        description: file.description,
        size,
        faces,
        units,
        collision,
        turbulence: fl.turbulence,
        smagorinsky_constant,
        force,
        initial_velocity,
        initial_noise,
        obstacles,
        run: file.run,
        forces: file.forces,
        releases,
        warnings,
        size_span: size_span.map(|s| line_col(text, s.start)),
        obstacle_lines: file
            .obstacles
            .iter()
            .map(|o| Some(line_col(text, o.span().start)))
            .collect(),
    };
    Ok(scenario)
}

/// Applies `key.path=value` overrides to the TOML text. Values are TOML
/// (`400`, `[64,64,4]`, `"bgk"`); a bare word is taken as a string.
pub fn apply_overrides(
    path: &Path,
    text: &str,
    overrides: &[String],
) -> Result<String, ScenarioError> {
    if overrides.is_empty() {
        return Ok(text.to_string());
    }
    let fail = |message: String, help: &str| ScenarioError {
        file: path.to_path_buf(),
        line: None,
        message,
        help: help.into(),
    };
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        let line = e.span().map(|s| line_col(text, s.start));
        ScenarioError {
            file: path.to_path_buf(),
            line,
            message: e.message().trim_end().to_string(),
            help: "fix the TOML syntax at this place".into(),
        }
    })?;
    for o in overrides {
        let Some((key, value)) = o.split_once('=') else {
            return Err(fail(
                format!("--set {o}: expected key=value"),
                "write e.g. --set fluid.reynolds=400",
            ));
        };
        let key = key.trim();
        let value = value.trim();
        let parsed: toml_edit::Value = match value.parse::<toml_edit::Value>() {
            Ok(v) => v,
            Err(_) => toml_edit::Value::from(value),
        };
        let parts: Vec<&str> = key.split('.').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(fail(
                format!("--set {o}: empty part in the key `{key}`"),
                "write dotted keys like fluid.reynolds",
            ));
        }
        set_path(doc.as_table_mut(), &parts, parsed).map_err(|m| {
            fail(
                format!("--set {o}: {m}"),
                "check the key path against the scenario file",
            )
        })?;
    }
    Ok(doc.to_string())
}

fn set_path(
    table: &mut dyn toml_edit::TableLike,
    parts: &[&str],
    value: toml_edit::Value,
) -> Result<(), String> {
    let key = parts[0];
    if parts.len() == 1 {
        table.insert(key, toml_edit::Item::Value(value));
        return Ok(());
    }
    if let Ok(index) = parts[1].parse::<usize>() {
        let list = table
            .get_mut(key)
            .and_then(|i| i.as_array_of_tables_mut())
            .ok_or_else(|| format!("`{key}` is not a list of tables"))?;
        let len = list.len();
        let entry = list
            .get_mut(index)
            .ok_or_else(|| format!("`{key}` has {len} entries (indices start at 0)"))?;
        if parts.len() == 2 {
            return Err(format!("give a key inside `{key}.{index}`"));
        }
        return set_path(entry, &parts[2..], value);
    }
    if table.get(key).is_none() {
        table.insert(key, toml_edit::Item::Table(toml_edit::Table::new()));
    }
    let inner = table
        .get_mut(key)
        .and_then(|i| i.as_table_like_mut())
        .ok_or_else(|| format!("`{key}` is not a table"))?;
    set_path(inner, &parts[1..], value)
}
