//! VTK XML image data (`.vti`) that ParaView opens: point data `rho`,
//! `pressure` (p − p0, lattice units), `velocity` (3 components) and `flags`
//! (cell type in bits 0–2, tag in bits 3–6), raw appended binary.

use std::path::Path;

use crate::solver::flags::NEAR;
use crate::solver::Fields;

/// Writes `fields` and `flags` to `path` (whole or not at all, see
/// [`super::write_atomically`]). Spacing is one cell, origin 0.
pub fn write(path: &Path, fields: &Fields, flags: &[u8]) -> std::io::Result<()> {
    let [nx, ny, nz] = fields.size;
    let n = nx * ny * nz;
    let pressure: Vec<f32> = (0..n).map(|c| fields.pressure(c)).collect();
    let mut velocity = Vec::with_capacity(3 * n);
    for c in 0..n {
        velocity.extend_from_slice(&fields.velocity(c));
    }
    let geometry: Vec<u8> = flags.iter().map(|f| f & !NEAR).collect();
    let blocks: [(&str, &str, usize, &[u8]); 4] = [
        ("rho", "Float32", 1, bytemuck::cast_slice(&fields.rho)),
        ("pressure", "Float32", 1, bytemuck::cast_slice(&pressure)),
        ("velocity", "Float32", 3, bytemuck::cast_slice(&velocity)),
        ("flags", "UInt8", 1, &geometry),
    ];
    let extent = format!("0 {} 0 {} 0 {}", nx - 1, ny - 1, nz - 1);
    let mut xml = String::new();
    xml.push_str("<?xml version=\"1.0\"?>\n");
    xml.push_str("<VTKFile type=\"ImageData\" version=\"1.0\" byte_order=\"LittleEndian\" header_type=\"UInt64\">\n");
    xml.push_str(&format!(
        "  <ImageData WholeExtent=\"{extent}\" Origin=\"0 0 0\" Spacing=\"1 1 1\">\n    <Piece Extent=\"{extent}\">\n      <PointData Scalars=\"rho\" Vectors=\"velocity\">\n"
    ));
    let mut offset = 0usize;
    for (name, ty, comps, bytes) in &blocks {
        xml.push_str(&format!(
            "        <DataArray type=\"{ty}\" Name=\"{name}\" NumberOfComponents=\"{comps}\" format=\"appended\" offset=\"{offset}\"/>\n"
        ));
        offset += 8 + bytes.len();
    }
    xml.push_str(
        "      </PointData>\n    </Piece>\n  </ImageData>\n  <AppendedData encoding=\"raw\">\n   _",
    );
    super::write_atomically(path, |file| {
        file.write_all(xml.as_bytes())?;
        for (_, _, _, bytes) in &blocks {
            file.write_all(&(bytes.len() as u64).to_le_bytes())?;
            file.write_all(bytes)?;
        }
        file.write_all(b"\n  </AppendedData>\n</VTKFile>\n")
    })
}
