//! Contaminant releases in a scenario: `[[sources]]`, `[[receptors]]` and
//! the `[dispersion]` section, checked when the file is read and turned into
//! the cells of a [`Setup`] once the geometry is voxelised.

use serde::Deserialize;
use toml::Spanned;

use super::{Axis, Ctx, ScenarioError};
use crate::solver::scalar::{transport::Role, Receptor, Release, Setup, Source, MAX_FIELDS};
use crate::solver::Grid;

/// `[dispersion]`: the diffusivities and what inlets bring.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DispersionSection {
    /// Schmidt number ν/D of the molecular diffusivity.
    #[serde(default = "one")]
    pub schmidt: f64,
    /// Turbulent Schmidt number, with the subgrid model.
    #[serde(default = "turbulent_schmidt")]
    pub turbulent_schmidt: f64,
    /// Concentration of the inflow.
    #[serde(default)]
    pub inflow: f64,
    /// Flow steps per transport step ([`DEFAULT_INTERVAL`] unless set; 1:
    /// every step): the scalar is moved with the velocity of about every
    /// `interval`-th step, taken at even and odd steps in turn
    /// ([`Setup::transport_starting_at`]). The flow's time step is bound by
    /// its sound speed, the scalar's only by the flow speed, so a few flow
    /// steps per transport step cost little accuracy and save most of the
    /// scalar's cost.
    #[serde(default = "default_interval")]
    pub interval: u32,
}

fn default_interval() -> u32 {
    DEFAULT_INTERVAL
}

/// Flow steps per transport step unless the scenario says: on the H100 the
/// scalar then adds 14–15% to a flow step at 256³ (70% moved every step),
/// and the urban release's doses stay within 0.1–2.7% of every step's
/// (BENCHMARKS.md, fourteenth session).
pub const DEFAULT_INTERVAL: u32 = 8;

/// Most flow steps per transport step.
pub const MAX_INTERVAL: u32 = 100;

fn one() -> f64 {
    1.0
}

fn turbulent_schmidt() -> f64 {
    0.7
}

impl Default for DispersionSection {
    fn default() -> Self {
        DispersionSection {
            schmidt: 1.0,
            turbulent_schmidt: turbulent_schmidt(),
            inflow: 0.0,
            interval: DEFAULT_INTERVAL,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawBox {
    pub min: [f64; 3],
    pub max: [f64; 3],
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawPlane {
    pub axis: Axis,
    pub at: f64,
}

/// One `[[sources]]` table as written.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawSource {
    point: Option<[f64; 3]>,
    #[serde(rename = "box")]
    region: Option<RawBox>,
    plane: Option<RawPlane>,
    concentration: Option<f64>,
    rate: Option<f64>,
    #[serde(default = "first_field")]
    field: u32,
    #[serde(default)]
    start: u64,
    stop: Option<u64>,
}

fn first_field() -> u32 {
    1
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawReceptor {
    name: Option<String>,
    point: [f64; 3],
}

/// Where a source releases.
#[derive(Clone, Debug, PartialEq)]
pub enum Region {
    /// The cell containing the point.
    Point([f64; 3]),
    /// Cells whose centres lie within [min, max].
    Box { min: [f64; 3], max: [f64; 3] },
    /// The layer of cells at `at` across `axis`.
    Plane { axis: Axis, at: f64 },
}

/// A checked source, before the geometry is known.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceSpec {
    pub region: Region,
    pub release: Release,
    /// 0-based.
    pub field: usize,
    pub start: u64,
    pub stop: Option<u64>,
    /// Where it is written, for errors found after voxelising.
    pub line: Option<(usize, usize)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ReceptorSpec {
    pub name: String,
    pub point: [f64; 3],
    pub line: Option<(usize, usize)>,
}

/// The releases of a scenario.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Releases {
    pub dispersion: DispersionSection,
    pub sources: Vec<SourceSpec>,
    pub receptors: Vec<ReceptorSpec>,
}

/// The cell containing `p` (cell centres are at integers).
fn cell_of(p: [f64; 3]) -> [i64; 3] {
    p.map(|v| v.round() as i64)
}

fn inside(size: [usize; 3], c: [i64; 3]) -> bool {
    (0..3).all(|a| c[a] >= 0 && c[a] < size[a] as i64)
}

pub(super) fn check(
    ctx: &Ctx,
    size: [usize; 3],
    dispersion: Option<DispersionSection>,
    sources: Vec<Spanned<RawSource>>,
    receptors: Vec<Spanned<RawReceptor>>,
) -> Result<Releases, ScenarioError> {
    let dispersion = dispersion.unwrap_or_default();
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !positive(dispersion.schmidt) || !positive(dispersion.turbulent_schmidt) {
        return Err(ctx.err(
            ctx.key("schmidt").or(ctx.key("turbulent_schmidt")),
            "dispersion.schmidt and dispersion.turbulent_schmidt must be positive numbers",
            "use e.g. schmidt = 1.0 (gases in air: 0.7 to 2) and turbulent_schmidt = 0.7",
        ));
    }
    if !(dispersion.inflow.is_finite() && dispersion.inflow >= 0.0) {
        return Err(ctx.err(
            ctx.key("inflow"),
            format!(
                "dispersion.inflow = {}: a concentration is finite and not negative",
                dispersion.inflow
            ),
            "use 0 for clean air coming in",
        ));
    }
    if !(1..=MAX_INTERVAL).contains(&dispersion.interval) {
        return Err(ctx.err(
            ctx.key("interval"),
            format!(
                "dispersion.interval = {}: the flow steps per transport step go from 1 to {MAX_INTERVAL}",
                dispersion.interval
            ),
            "use 1 to move the contaminant every flow step, or a few (e.g. 4) to make it cheaper",
        ));
    }
    let mut out = Releases {
        dispersion,
        ..Releases::default()
    };
    for (k, s) in sources.into_iter().enumerate() {
        let span = Some(s.span());
        let s = s.into_inner();
        let err = |message: String, help: &str| ctx.err(span.clone(), message, help);
        let what = format!("sources[{k}]");
        let region = match (s.point, s.region, s.plane) {
            (Some(p), None, None) => {
                if !inside(size, cell_of(p)) {
                    return Err(err(
                        format!("{what}: point {p:?} lies outside the domain {size:?}"),
                        "give a point inside domain.size (cell centres are at 0 … n − 1)",
                    ));
                }
                Region::Point(p)
            }
            (None, Some(b), None) => {
                if (0..3).any(|a| !(b.min[a] <= b.max[a])) {
                    return Err(err(
                        format!("{what}: box min {:?} is not below max {:?}", b.min, b.max),
                        "write box = { min = [x0, y0, z0], max = [x1, y1, z1] } with min ≤ max",
                    ));
                }
                Region::Box {
                    min: b.min,
                    max: b.max,
                }
            }
            (None, None, Some(p)) => Region::Plane {
                axis: p.axis,
                at: p.at,
            },
            _ => {
                return Err(err(
                    format!("{what}: give exactly one of point, box or plane"),
                    "e.g. point = [40, 64, 8], box = { min = […], max = […] } or plane = { axis = \"x\", at = 10 }",
                ))
            }
        };
        let release = match (s.concentration, s.rate) {
            (Some(c), None) if positive(c) => Release::Concentration(c as f32),
            (None, Some(r)) if positive(r) => Release::Rate(r as f32),
            (None, None) | (Some(_), Some(_)) => {
                return Err(err(
                    format!("{what}: give exactly one of concentration or rate"),
                    "concentration = C holds the source's cells at C; rate = R adds R per step",
                ))
            }
            _ => {
                return Err(err(
                    format!("{what}: the concentration or rate must be a positive number"),
                    "e.g. concentration = 1.0",
                ))
            }
        };
        if s.field == 0 || s.field as usize > MAX_FIELDS {
            return Err(err(
                format!(
                    "{what}: field = {}; fields are numbered 1 to {MAX_FIELDS}",
                    s.field
                ),
                "leave field out (1) unless sources should be told apart",
            ));
        }
        if s.stop.is_some_and(|stop| stop <= s.start) {
            return Err(err(
                format!(
                    "{what}: stop = {} is not after start = {}",
                    s.stop.unwrap_or(0),
                    s.start
                ),
                "stop is the first step without the release; leave it out to release until the end",
            ));
        }
        out.sources.push(SourceSpec {
            region,
            release,
            field: s.field as usize - 1,
            start: s.start,
            stop: s.stop,
            line: span.map(|r| super::line_col(ctx.text, r.start)),
        });
    }
    for (k, r) in receptors.into_iter().enumerate() {
        let span = Some(r.span());
        let r = r.into_inner();
        let name = r.name.unwrap_or_else(|| format!("receptor {}", k + 1));
        if !inside(size, cell_of(r.point)) {
            return Err(ctx.err(
                span,
                format!(
                    "receptors[{k}] ({name}): point {:?} lies outside the domain {size:?}",
                    r.point
                ),
                "give a point inside domain.size",
            ));
        }
        if out.receptors.iter().any(|o| o.name == name) {
            return Err(ctx.err(
                span,
                format!("receptors[{k}]: a second receptor named \"{name}\""),
                "give each receptor its own name (the CSV's columns carry it)",
            ));
        }
        out.receptors.push(ReceptorSpec {
            name,
            point: r.point,
            line: span.map(|s| super::line_col(ctx.text, s.start)),
        });
    }
    if out.sources.is_empty() && !out.receptors.is_empty() {
        return Err(ctx.err(
            None,
            "receptors without any [[sources]]: there is nothing for them to record",
            "add a [[sources]] table, or remove the receptors",
        ));
    }
    Ok(out)
}

impl Releases {
    /// Concentration fields the sources fill (0 without sources).
    pub fn fields(&self) -> usize {
        self.sources.iter().map(|s| s.field + 1).max().unwrap_or(0)
    }

    /// The fields, sources and receptors on the voxelised `flags`; `None`
    /// without sources. A source or receptor without an open cell is an
    /// error naming it.
    pub fn setup(
        &self,
        grid: &Grid,
        flags: &[u8],
        path: &std::path::Path,
    ) -> Result<Option<Setup>, ScenarioError> {
        if self.sources.is_empty() {
            return Ok(None);
        }
        let open = |c: usize| Role::of(flags[c]) == Role::Open;
        let index = |c: [i64; 3]| grid.index(c[0] as usize, c[1] as usize, c[2] as usize);
        let err = |line, message: String| {
            ScenarioError {
            file: path.to_path_buf(),
            line,
            message,
            help: "move it into the fluid: solid cells (walls, obstacles) and inlets hold no contaminant".into(),
        }
        };
        let mut sources = Vec::new();
        for (k, s) in self.sources.iter().enumerate() {
            let cells: Vec<u32> = match &s.region {
                Region::Point(p) => vec![index(cell_of(*p))],
                Region::Box { min, max } => (0..grid.cells())
                    .filter(|&c| {
                        let p = grid.coords(c);
                        (0..3).all(|a| min[a] <= p[a] as f64 && p[a] as f64 <= max[a])
                    })
                    .collect(),
                Region::Plane { axis, at } => {
                    let (a, at) = (axis.index(), at.round() as i64);
                    (0..grid.cells())
                        .filter(|&c| grid.coords(c)[a] as i64 == at)
                        .collect()
                }
            }
            .into_iter()
            .filter(|&c| open(c))
            .map(|c| c as u32)
            .collect();
            if cells.is_empty() {
                return Err(err(s.line, format!("sources[{k}] covers no fluid cell")));
            }
            sources.push(Source {
                field: s.field,
                cells,
                release: s.release,
                start: s.start,
                stop: s.stop,
            });
        }
        let mut receptors = Vec::new();
        for r in &self.receptors {
            let cell = index(cell_of(r.point));
            if !open(cell) {
                return Err(err(
                    r.line,
                    format!(
                        "receptor \"{}\" at {:?} lies in a solid or inlet cell",
                        r.name, r.point
                    ),
                ));
            }
            receptors.push(Receptor {
                name: r.name.clone(),
                position: r.point,
                cell: cell as u32,
            });
        }
        Ok(Some(Setup {
            fields: sources.iter().map(|s| s.field + 1).max().unwrap_or(1),
            sources,
            receptors,
            schmidt: self.dispersion.schmidt as f32,
            schmidt_turbulent: self.dispersion.turbulent_schmidt as f32,
            inflow: self.dispersion.inflow as f32,
            interval: self.dispersion.interval,
        }))
    }
}
