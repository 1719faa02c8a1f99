//! Marching tetrahedra tables shared by the CPU twin and `shaders/isosurface/extract.wgsl`.
//!
//! Cube corners are numbered `x + 2y + 4z`. Every cube is split into the same six
//! tetrahedra around its main diagonal 0–7 (Kuhn triangulation); the face
//! diagonals then coincide across neighbouring cubes, so the surface is
//! watertight and no case is ambiguous.

/// The six tetrahedra of a cube, as corner indices. Keep in sync with the WGSL.
pub const TETRAHEDRA: [[usize; 4]; 6] = [
    [0, 1, 3, 7],
    [0, 3, 2, 7],
    [0, 2, 6, 7],
    [0, 6, 4, 7],
    [0, 4, 5, 7],
    [0, 5, 1, 7],
];

/// Offset of cube corner `k`.
pub fn corner(k: usize) -> [usize; 3] {
    [k & 1, (k >> 1) & 1, (k >> 2) & 1]
}

#[cfg(test)]
mod tests {
    use super::TETRAHEDRA;

    #[test]
    fn the_wgsl_packs_the_same_tetrahedra() {
        let src = crate::render::shaders::ALL
            .iter()
            .find(|(p, _)| *p == "isosurface/extract.wgsl")
            .expect("listed")
            .1;
        let hex = src
            .split("const CYCLE: u32 = 0x")
            .nth(1)
            .and_then(|rest| rest.split('u').next())
            .expect("the CYCLE constant");
        let cycle = u32::from_str_radix(hex, 16).unwrap();
        for (t, tet) in TETRAHEDRA.iter().enumerate() {
            let unpacked = [0, (cycle >> (4 * t)) & 15, (cycle >> (4 * t + 4)) & 15, 7];
            assert_eq!(unpacked.map(|k| k as usize), *tet, "tetrahedron {t}");
            let mask: u32 = tet.iter().map(|&k| 1 << k).sum();
            let counted = format!("pieces(below, {mask:#X}u)").replace("0X", "0x");
            assert!(src.contains(&counted), "{counted} missing");
        }
    }
}
