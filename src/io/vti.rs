//! VTK XML image data (`.vti`) that ParaView opens: point data `rho`,
//! `pressure` (p − p0, lattice units), `velocity` (3 components), the
//! contaminants' `concentration` (`concentration_2`, …) where there are any, and `flags`
//! (cell type in bits 0–2, tag in bits 3–6), raw appended binary. With time
//! averages, `velocity_mean`, `velocity_rms` (RMS of each component's
//! fluctuation), `pressure_mean` and `pressure_rms` join them. With
//! physical units the spacing is in metres and `velocity_m_s` and
//! `pressure_pa` (and `…_m_s`, `…_pa` of the averages) join the lattice
//! arrays; a series of them is tied together by a `.pvd` collection.

use std::path::{Path, PathBuf};

use crate::scenario::units::Units;
use crate::solver::flags::NEAR;
use crate::solver::{Averages, Fields, Piece};

/// Scales from lattice to SI units (from a scenario's `[physical]` section).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Physical {
    pub cell_size_m: f64,
    /// m/s per lattice velocity unit.
    pub velocity: f64,
    /// Pa per lattice pressure unit.
    pub pressure: f64,
    /// Seconds per time step.
    pub time_step_s: f64,
}

impl Physical {
    pub fn of(units: &Units) -> Option<Physical> {
        Some(Physical {
            cell_size_m: units.physical.as_ref()?.cell_size_m,
            velocity: units.velocity_scale()?,
            pressure: units.pressure_scale()?,
            time_step_s: units.time_step_s()?,
        })
    }
}

/// A float array: name, components, values, and the scale to SI units with
/// the name of the scaled copy.
type Array<'a> = (&'a str, usize, Vec<f32>, Option<(f64, &'a str)>);

/// Writes `fields` and `flags` to `path` (whole or not at all, see
/// [`super::write_atomically`]). Spacing is one cell, or `physical`'s cell
/// size in metres; the origin is 0.
pub fn write(
    path: &Path,
    fields: &Fields,
    averages: Option<&Averages>,
    flags: &[u8],
    physical: Option<&Physical>,
) -> std::io::Result<()> {
    write_at(path, fields, averages, flags, physical, 0).map(|_| ())
}

/// The arrays a file holds (name, VTK type, components) and the vector array
/// shown first: what a [`write_pvti`] collection declares of its pieces.
pub struct Layout {
    arrays: Vec<(String, &'static str, usize)>,
    vectors: &'static str,
}

/// One array of the file: name, VTK type, components, values.
type Block = (String, &'static str, usize, Values);

/// An array's values, kept in their own type (no copy to bytes).
enum Values {
    F32(Vec<f32>),
    U8(Vec<u8>),
}

impl Values {
    fn bytes(&self) -> &[u8] {
        match self {
            Values::F32(v) => bytemuck::cast_slice(v),
            Values::U8(v) => v,
        }
    }
}

/// The arrays of a file, in order, and the name of the vector array shown
/// first.
fn blocks(
    fields: &Fields,
    averages: Option<&Averages>,
    flags: &[u8],
    physical: Option<&Physical>,
) -> (Vec<Block>, &'static str) {
    let [nx, ny, nz] = fields.size;
    let n = nx * ny * nz;
    let pressure: Vec<f32> = (0..n).map(|c| fields.pressure(c)).collect();
    let interleave = |v: &dyn Fn(usize) -> [f32; 3]| -> Vec<f32> {
        let mut out = Vec::with_capacity(3 * n);
        for c in 0..n {
            out.extend_from_slice(&v(c));
        }
        out
    };
    let velocity = interleave(&|c| fields.velocity(c));
    let geometry: Vec<u8> = flags.iter().map(|f| f & !NEAR).collect();
    let scaled =
        |v: &[f32], s: f64| -> Vec<f32> { v.iter().map(|&x| (x as f64 * s) as f32).collect() };
    let mut arrays: Vec<Array> = vec![
        (
            "pressure",
            1,
            pressure,
            physical.map(|p| (p.pressure, "pressure_pa")),
        ),
        (
            "velocity",
            3,
            velocity,
            physical.map(|p| (p.velocity, "velocity_m_s")),
        ),
    ];
    if let Some(a) = averages {
        let (pu, pp) = (physical.map(|p| p.velocity), physical.map(|p| p.pressure));
        arrays.push((
            "velocity_mean",
            3,
            interleave(&|c| a.velocity_mean(c)),
            pu.map(|s| (s, "velocity_mean_m_s")),
        ));
        arrays.push((
            "velocity_rms",
            3,
            interleave(&|c| a.velocity_rms(c)),
            pu.map(|s| (s, "velocity_rms_m_s")),
        ));
        arrays.push((
            "pressure_mean",
            1,
            a.pressure_mean.clone(),
            pp.map(|s| (s, "pressure_mean_pa")),
        ));
        arrays.push((
            "pressure_rms",
            1,
            a.pressure_rms.clone(),
            pp.map(|s| (s, "pressure_rms_pa")),
        ));
    }
    // `concentration`, `concentration_2`, … and their means.
    let name = |k: usize| match k {
        0 => "concentration".to_string(),
        k => format!("concentration_{}", k + 1),
    };
    let names: Vec<(String, String)> = (0..fields.concentration.len())
        .map(|k| (name(k), format!("{}_mean", name(k))))
        .collect();
    for (k, c) in fields.concentration.iter().enumerate() {
        arrays.push((&names[k].0, 1, c.clone(), None));
        if let Some(mean) = averages.and_then(|a| a.concentration_mean.get(k)) {
            arrays.push((&names[k].1, 1, mean.clone(), None));
        }
    }
    let si: Vec<(&str, usize, Vec<f32>)> = arrays
        .iter()
        .filter_map(|(_, comps, values, to_si)| {
            to_si.map(|(scale, name)| (name, *comps, scaled(values, scale)))
        })
        .collect();
    let float = |name: &str, comps: usize, values: Vec<f32>| -> Block {
        (name.to_string(), "Float32", comps, Values::F32(values))
    };
    let mut blocks = vec![float("rho", 1, fields.rho.clone())];
    for (name, comps, values, _) in arrays {
        blocks.push(float(name, comps, values));
    }
    for (name, comps, values) in si {
        blocks.push(float(name, comps, values));
    }
    blocks.push(("flags".into(), "UInt8", 1, Values::U8(geometry)));
    let vectors = match physical {
        Some(_) => "velocity_m_s",
        None => "velocity",
    };
    (blocks, vectors)
}

fn spacing(physical: Option<&Physical>) -> String {
    match physical {
        Some(p) => {
            let d = p.cell_size_m;
            format!("{d:e} {d:e} {d:e}")
        }
        None => "1 1 1".to_string(),
    }
}

/// The extent of `size` points starting at global layer `first_layer`.
fn extent(size: [usize; 3], first_layer: usize) -> String {
    let [nx, ny, nz] = size;
    format!(
        "0 {} 0 {} {first_layer} {}",
        nx - 1,
        ny - 1,
        first_layer + nz - 1
    )
}

/// As [`write`], for fields whose first layer is the grid's layer
/// `first_layer`: one piece of a [`write_pvti`] collection, itself a
/// complete file. Returns the arrays it wrote.
pub fn write_at(
    path: &Path,
    fields: &Fields,
    averages: Option<&Averages>,
    flags: &[u8],
    physical: Option<&Physical>,
    first_layer: usize,
) -> std::io::Result<Layout> {
    let (blocks, vectors) = blocks(fields, averages, flags, physical);
    let spacing = spacing(physical);
    let extent = extent(fields.size, first_layer);
    let mut xml = String::new();
    xml.push_str("<?xml version=\"1.0\"?>\n");
    xml.push_str("<VTKFile type=\"ImageData\" version=\"1.0\" byte_order=\"LittleEndian\" header_type=\"UInt64\">\n");
    xml.push_str(&format!(
        "  <ImageData WholeExtent=\"{extent}\" Origin=\"0 0 0\" Spacing=\"{spacing}\">\n    <Piece Extent=\"{extent}\">\n      <PointData Scalars=\"rho\" Vectors=\"{vectors}\">\n"
    ));
    let mut offset = 0usize;
    for (name, ty, comps, values) in &blocks {
        xml.push_str(&format!(
            "        <DataArray type=\"{ty}\" Name=\"{name}\" NumberOfComponents=\"{comps}\" format=\"appended\" offset=\"{offset}\"/>\n"
        ));
        offset += 8 + values.bytes().len();
    }
    xml.push_str(
        "      </PointData>\n    </Piece>\n  </ImageData>\n  <AppendedData encoding=\"raw\">\n   _",
    );
    super::write_atomically(path, |file| {
        file.write_all(xml.as_bytes())?;
        for (_, _, _, values) in &blocks {
            let bytes = values.bytes();
            file.write_all(&(bytes.len() as u64).to_le_bytes())?;
            file.write_all(bytes)?;
        }
        file.write_all(b"\n  </AppendedData>\n</VTKFile>\n")
    })?;
    Ok(Layout {
        arrays: blocks
            .into_iter()
            .map(|(name, ty, comps, _)| (name, ty, comps))
            .collect(),
        vectors,
    })
}

/// The file name of piece `k` of the collection `path` (`out.pvti` →
/// `out_0.vti`), beside it.
pub fn piece_path(path: &Path, k: usize) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!("{stem}_{k}.vti"))
}

/// A ParaView parallel image file (`.pvti`) tying together the pieces
/// [`piece_path`]`(path, k)` of layers `piece.extents[k]` (first and last,
/// inclusive), each holding the arrays of `layout` (what [`write_at`] wrote
/// of `piece`, any one of them).
pub fn write_pvti(
    path: &Path,
    piece: &Piece,
    layout: &Layout,
    physical: Option<&Physical>,
) -> std::io::Result<()> {
    let vectors = layout.vectors;
    let [nx, ny, _] = piece.fields.size;
    let last = piece.extents.last().map_or(0, |e| e[1]);
    let whole = extent([nx, ny, last + 1], 0);
    let spacing = spacing(physical);
    let mut xml = String::new();
    xml.push_str("<?xml version=\"1.0\"?>\n");
    xml.push_str("<VTKFile type=\"PImageData\" version=\"1.0\" byte_order=\"LittleEndian\" header_type=\"UInt64\">\n");
    xml.push_str(&format!(
        "  <PImageData WholeExtent=\"{whole}\" GhostLevel=\"0\" Origin=\"0 0 0\" Spacing=\"{spacing}\">\n    <PPointData Scalars=\"rho\" Vectors=\"{vectors}\">\n"
    ));
    for (name, ty, comps) in &layout.arrays {
        xml.push_str(&format!(
            "      <PDataArray type=\"{ty}\" Name=\"{name}\" NumberOfComponents=\"{comps}\"/>\n"
        ));
    }
    xml.push_str("    </PPointData>\n");
    for (k, [first, last]) in piece.extents.iter().enumerate() {
        let source = piece_path(path, k);
        let source = source.file_name().unwrap_or_default().to_string_lossy();
        let extent = extent([nx, ny, last - first + 1], *first);
        xml.push_str(&format!(
            "    <Piece Extent=\"{extent}\" Source=\"{source}\"/>\n"
        ));
    }
    xml.push_str("  </PImageData>\n</VTKFile>\n");
    super::write_atomically(path, |file| file.write_all(xml.as_bytes()))
}

/// A numbered series of `.vti` files beside `base` (`out.vti` →
/// `out_000100.vti`, …) and the `out.pvd` collection that ParaView opens as
/// one animated dataset. The collection is rewritten after each file, so it
/// is valid whenever the run stops.
pub struct Series {
    base: PathBuf,
    physical: Option<Physical>,
    written: Vec<(u64, String)>,
}

impl Series {
    pub fn new(base: &Path, physical: Option<Physical>) -> Series {
        Series {
            base: base.to_path_buf(),
            physical,
            written: Vec::new(),
        }
    }

    /// The collection's path: `out.vti` → `out.pvd`.
    pub fn collection(&self) -> PathBuf {
        self.base.with_extension("pvd")
    }

    /// The series file of `step`.
    pub fn member(&self, step: u64) -> PathBuf {
        let stem = self.base.file_stem().unwrap_or_default().to_string_lossy();
        self.base.with_file_name(format!("{stem}_{step:06}.vti"))
    }

    /// Writes the fields of `step` and the updated collection; returns the
    /// new member's path.
    pub fn write(
        &mut self,
        step: u64,
        fields: &Fields,
        averages: Option<&Averages>,
        flags: &[u8],
    ) -> std::io::Result<PathBuf> {
        let path = self.member(step);
        write(&path, fields, averages, flags, self.physical.as_ref())?;
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        self.written.retain(|(s, _)| *s != step);
        self.written.push((step, name));
        let mut xml = String::from(
            "<?xml version=\"1.0\"?>\n<VTKFile type=\"Collection\" version=\"0.1\" byte_order=\"LittleEndian\">\n  <Collection>\n",
        );
        for (s, file) in &self.written {
            // Physical seconds where known, else time steps.
            let time = match &self.physical {
                Some(p) => format!("{:e}", *s as f64 * p.time_step_s),
                None => s.to_string(),
            };
            let file = file
                .replace('&', "&amp;")
                .replace('"', "&quot;")
                .replace('<', "&lt;");
            xml.push_str(&format!(
                "    <DataSet timestep=\"{time}\" group=\"\" part=\"0\" file=\"{file}\"/>\n"
            ));
        }
        xml.push_str("  </Collection>\n</VTKFile>\n");
        super::write_atomically(&self.collection(), |f| f.write_all(xml.as_bytes()))?;
        Ok(path)
    }
}
