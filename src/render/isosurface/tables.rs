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
