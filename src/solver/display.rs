//! Display frames: the fields a window shows, averaged over `stride`³ blocks of
//! cells when the grid is larger than the display limit. The CUDA solver does
//! this on the GPU before its copy (`display_fields` in `kernels/lbm/d3q19.cu`);
//! [`downsample_fields`] is the same arithmetic on the host, for the other
//! solvers and as the reference of the CUDA check.

use super::{flags, Fields};

/// The default display limit: at most 256³ cells on screen.
pub const DEFAULT_LIMIT: usize = 256;

/// The smallest stride that keeps the display grid within `limit`³ cells.
pub fn stride_for(size: [usize; 3], limit: usize) -> usize {
    let budget = (limit.max(1) as u128).pow(3);
    (1..)
        .find(|&s| {
            coarse_size(size, s)
                .iter()
                .map(|&n| n as u128)
                .product::<u128>()
                <= budget
        })
        .expect("stride as large as the grid gives one cell")
}

/// Cells of the display grid along each axis: partial blocks at the far faces
/// count as cells.
pub fn coarse_size(size: [usize; 3], stride: usize) -> [usize; 3] {
    size.map(|n| n.div_ceil(stride.max(1)))
}

/// The cells of block `(x, y, z)` along one axis.
fn block(axis_len: usize, stride: usize, k: usize) -> std::ops::Range<usize> {
    k * stride..((k + 1) * stride).min(axis_len)
}

/// The mean of each field over each block, summed in x-fastest cell order in
/// FP32 and divided by the block's cell count, as the CUDA kernel does, so
/// that the two agree bit for bit. Stride 1 gives `f` back as it is.
pub fn downsample_fields(f: Fields, stride: usize) -> Fields {
    if stride <= 1 {
        return f;
    }
    let mut out = Fields::default();
    downsample_fields_into(&f, stride, &mut out);
    out
}

/// [`downsample_fields`] into `out`, reusing its vectors (stride > 1).
pub fn downsample_fields_into(f: &Fields, stride: usize, out: &mut Fields) {
    use rayon::prelude::*;
    let size = coarse_size(f.size, stride);
    let [nx, ny, _] = f.size;
    let layer = size[0] * size[1];
    out.size = size;
    for v in [&mut out.rho, &mut out.ux, &mut out.uy, &mut out.uz] {
        v.resize(layer * size[2], 0.0);
    }
    out.rho
        .par_chunks_mut(layer)
        .zip(out.ux.par_chunks_mut(layer))
        .zip(out.uy.par_chunks_mut(layer))
        .zip(out.uz.par_chunks_mut(layer))
        .enumerate()
        .for_each(|(z, (((rho, ux), uy), uz))| {
            for i in 0..layer {
                let (x, y) = (i % size[0], i / size[0]);
                let mut s = [0.0f32; 4];
                let mut count = 0u32;
                for zz in block(f.size[2], stride, z) {
                    for yy in block(ny, stride, y) {
                        for xx in block(nx, stride, x) {
                            let c = xx + nx * (yy + ny * zz);
                            s[0] += f.rho[c];
                            s[1] += f.ux[c];
                            s[2] += f.uy[c];
                            s[3] += f.uz[c];
                            count += 1;
                        }
                    }
                }
                let m = s.map(|v| v / count as f32);
                [rho[i], ux[i], uy[i], uz[i]] = m;
            }
        });
    out.concentration.resize(f.concentration.len(), Vec::new());
    for (c, o) in f.concentration.iter().zip(&mut out.concentration) {
        downsample_scalar_into(f.size, c, stride, o);
    }
}

/// The means of one field `c` of a `size` grid over `stride`³ blocks, as
/// [`downsample_fields_into`] takes them (a copy at stride 1).
pub fn downsample_scalar_into(size: [usize; 3], c: &[f32], stride: usize, out: &mut Vec<f32>) {
    use rayon::prelude::*;
    if stride <= 1 {
        out.clear();
        out.extend_from_slice(c);
        return;
    }
    let coarse = coarse_size(size, stride);
    let [nx, ny, _] = size;
    let layer = coarse[0] * coarse[1];
    out.resize(layer * coarse[2], 0.0);
    out.par_chunks_mut(layer).enumerate().for_each(|(z, o)| {
        for (i, o) in o.iter_mut().enumerate() {
            let (x, y) = (i % coarse[0], i / coarse[0]);
            let (mut s, mut count) = (0.0f32, 0u32);
            for zz in block(size[2], stride, z) {
                for yy in block(ny, stride, y) {
                    for xx in block(nx, stride, x) {
                        s += c[xx + nx * (yy + ny * zz)];
                        count += 1;
                    }
                }
            }
            *o = s / count.max(1) as f32;
        }
    });
}

/// The cell flags of the display grid: each block takes its most common flag,
/// except that a block on the domain's faces takes the most common boundary
/// flag of its cells on the faces, so that one-cell walls and inlets stay on
/// the display grid's faces (and faces of fluid stay fluid: periodic).
pub fn downsample_flags(cell_flags: &[u8], size: [usize; 3], stride: usize) -> Vec<u8> {
    use rayon::prelude::*;
    if stride <= 1 || cell_flags.is_empty() {
        return cell_flags.to_vec();
    }
    let coarse = coarse_size(size, stride);
    let on_face = |q: [usize; 3]| (0..3).any(|a| q[a] == 0 || q[a] == size[a] - 1);
    let is_boundary = |f: u8| flags::CellType::of(f) != flags::CellType::Fluid;
    let layers: Vec<Vec<u8>> = (0..coarse[2])
        .into_par_iter()
        .map(|z| {
            let mut out = Vec::with_capacity(coarse[0] * coarse[1]);
            // (flag, count) of one block: a handful of distinct flags.
            let mut counts: Vec<(u8, u32)> = Vec::new();
            for y in 0..coarse[1] {
                for x in 0..coarse[0] {
                    let cells = || {
                        block(size[2], stride, z).flat_map(move |zz| {
                            block(size[1], stride, y).flat_map(move |yy| {
                                block(size[0], stride, x).map(move |xx| [xx, yy, zz])
                            })
                        })
                    };
                    let faces = cells().any(on_face);
                    counts.clear();
                    for q in cells().filter(|&q| !faces || on_face(q)) {
                        // The NEAR mark is the solver's bookkeeping, not the cell's kind.
                        let f = cell_flags[q[0] + size[0] * (q[1] + size[1] * q[2])] & !flags::NEAR;
                        match counts.iter_mut().find(|e| e.0 == f) {
                            Some(e) => e.1 += 1,
                            None => counts.push((f, 1)),
                        }
                    }
                    let boundary = faces && counts.iter().any(|e| is_boundary(e.0));
                    // Most common (of the boundary flags on a face); ties go
                    // to the lowest flag value.
                    let best = counts
                        .iter()
                        .filter(|e| !boundary || is_boundary(e.0))
                        .max_by_key(|e| (e.1, std::cmp::Reverse(e.0)))
                        .map_or(0, |e| e.0);
                    out.push(best);
                }
            }
            out
        })
        .collect();
    layers.concat()
}

/// A point in cell coordinates of the full grid, in those of the display grid
/// (cell centres map to block centres).
pub fn to_display(p: [f64; 3], stride: usize) -> [f64; 3] {
    let s = stride.max(1) as f64;
    p.map(|v| (v + 0.5) / s - 0.5)
}

/// Bytes per row of texels (ρ, ux, uy, uz as f32) in a frame laid out for a
/// buffer-to-texture copy: rows start at the copy alignment.
pub fn texel_row_bytes(nx: usize) -> u64 {
    (nx as u64 * 16).next_multiple_of(256)
}

/// A display frame's texels in GPU memory that the solver exports and the
/// graphics device imports, so that a frame reaches its 3D texture by a copy
/// within the GPU instead of through host memory and the bus. Rows of
/// [`texel_row_bytes`], layers of `ny` rows.
#[derive(Debug)]
pub struct SharedFrame {
    /// Unique per allocation: the importer keeps its imports by it.
    pub id: u64,
    /// An exportable handle of the allocation (the importer takes a duplicate).
    pub fd: std::os::fd::OwnedFd,
    /// Bytes of the allocation, which an import must name exactly.
    pub bytes: u64,
    pub size: [usize; 3],
    /// The GPU that holds it (its UUID, as CUDA and Vulkan both report it).
    pub device: [u8; 16],
    /// Written by the solver or read by the importer (see [`SharedLease`]).
    busy: std::sync::atomic::AtomicBool,
}

impl SharedFrame {
    pub fn new(
        fd: std::os::fd::OwnedFd,
        bytes: u64,
        size: [usize; 3],
        device: [u8; 16],
    ) -> SharedFrame {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        SharedFrame {
            id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            fd,
            bytes,
            size,
            device,
            busy: Default::default(),
        }
    }

    pub fn row_bytes(&self) -> u64 {
        texel_row_bytes(self.size[0])
    }

    /// Bytes the texels span.
    pub fn data_bytes(&self) -> u64 {
        self.row_bytes() * (self.size[1] * self.size[2]) as u64
    }

    /// The right to write or read the frame, unless somebody holds it.
    pub fn lease(self: &std::sync::Arc<Self>) -> Option<SharedLease> {
        let taken = self.busy.swap(true, std::sync::atomic::Ordering::AcqRel);
        (!taken).then(|| SharedLease(self.clone()))
    }
}

/// Held from the solver's write of a shared frame until the graphics device
/// has copied it (or the frame is dropped): the solver does not write the
/// frame again meanwhile.
#[derive(Debug)]
pub struct SharedLease(std::sync::Arc<SharedFrame>);

impl std::ops::Deref for SharedLease {
    type Target = SharedFrame;
    fn deref(&self) -> &SharedFrame {
        &self.0
    }
}

impl Drop for SharedLease {
    fn drop(&mut self) {
        self.0
            .busy
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_frame_has_one_lease_at_a_time() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let frame =
            std::sync::Arc::new(SharedFrame::new(file.into(), 1 << 21, [13, 7, 5], [0; 16]));
        assert_eq!((frame.row_bytes(), frame.data_bytes()), (256, 256 * 35));
        let lease = frame.lease().expect("free");
        assert!(frame.lease().is_none(), "held");
        drop(lease);
        assert!(frame.lease().is_some(), "given back");
        let other = SharedFrame::new(
            std::fs::File::open("/dev/null").unwrap().into(),
            1,
            [1; 3],
            [0; 16],
        );
        assert_ne!(other.id, frame.id);
        assert_eq!(texel_row_bytes(16), 256);
        assert_eq!(texel_row_bytes(17), 512);
    }

    #[test]
    fn the_stride_keeps_the_display_grid_within_the_limit() {
        assert_eq!(stride_for([256, 256, 256], 256), 1);
        assert_eq!(stride_for([257, 256, 256], 256), 2);
        assert_eq!(stride_for([512, 128, 128], 256), 1);
        assert_eq!(stride_for([768, 768, 768], 256), 3);
        assert_eq!(stride_for([1000, 10, 10], 1), 1000);
        assert_eq!(coarse_size([7, 8, 9], 2), [4, 4, 5]);
    }

    #[test]
    fn concentrations_take_the_same_blocks_as_the_density() {
        // 9 cells at stride 4: blocks of 4, 4 and 1 (9 / 3 blocks would
        // wrongly give 3).
        let size = [9, 6, 5];
        let mut f = Fields::new(size);
        for (c, r) in f.rho.iter_mut().enumerate() {
            *r = (c as f32 * 0.7).sin();
        }
        f.concentration = vec![f.rho.clone()];
        let d = downsample_fields(f, 4);
        assert_eq!(d.size, [3, 2, 2]);
        assert_eq!(d.concentration, vec![d.rho.clone()]);
    }

    #[test]
    fn downsampling_averages_blocks_including_partial_ones() {
        let size = [5, 4, 3];
        let mut f = Fields::new(size);
        for c in 0..60 {
            f.rho[c] = c as f32;
            f.ux[c] = 1.0;
            f.uy[c] = -(c as f32);
            f.uz[c] = (c % 5) as f32;
        }
        let d = downsample_fields(f.clone(), 2);
        assert_eq!(d.size, [3, 2, 2]);
        // Block (0,0,0): cells x 0..2, y 0..2, z 0..2.
        let first: Vec<f32> = [0, 1, 5, 6, 20, 21, 25, 26].map(|c| c as f32).to_vec();
        assert_eq!(d.rho[0], first.iter().sum::<f32>() / 8.0);
        // Block (2,1,1): x 4, y 2..4, z 2 alone: two cells.
        let last = 2 + 3 * (1 + 2);
        assert_eq!(d.rho[last], (54.0 + 59.0) / 2.0);
        assert_eq!(d.uz[last], 4.0);
        assert!(d.ux.iter().all(|&v| v == 1.0));
        assert_eq!(downsample_fields(f.clone(), 1), f);
    }

    #[test]
    fn downsampled_flags_keep_thin_walls_on_the_faces_and_obstacles_by_majority() {
        let size = [9, 9, 9];
        let idx = |x: usize, y: usize, z: usize| x + 9 * (y + 9 * z);
        let wall = flags::make(flags::CellType::Wall, 0);
        let obstacle = flags::make(flags::CellType::Wall, 1);
        let fluid = flags::make(flags::CellType::Fluid, 0);
        let mut f = vec![fluid; 729];
        for z in 0..9 {
            for y in 0..9 {
                f[idx(0, y, z)] = wall;
            }
        }
        // An obstacle filling most of the block around (4..6)³.
        for z in 3..6 {
            for y in 3..6 {
                for x in 3..6 {
                    f[idx(x, y, z)] = obstacle;
                }
            }
        }
        let d = downsample_flags(&f, size, 3);
        assert_eq!(d.len(), 27);
        // The x = 0 face stays a wall although it is a third of its blocks.
        for z in 0..3 {
            for y in 0..3 {
                assert_eq!(d[3 * (y + 3 * z)], wall, "({y},{z})");
            }
        }
        assert_eq!(d[1 + 3 * (1 + 3)], obstacle);
        assert_eq!(d[2 + 3 * (1 + 3)], fluid);
    }

    #[test]
    fn frames_copy_from_planes_into_their_vectors_and_check_stability() {
        let mut f = Fields::new([3, 2, 1]);
        let planes: Vec<f32> = (0..24).map(|v| v as f32 * 0.01).collect();
        f.copy_from_planes([2, 2, 1], &planes[..16]);
        assert_eq!((f.size, f.rho.len()), ([2, 2, 1], 4));
        assert_eq!(f.uz, planes[12..16]);
        assert!(f.is_stable());
        f.uy[2] = 0.6;
        assert!(!f.is_stable());
        f.uy[2] = 0.0;
        f.rho[3] = f32::NAN;
        assert!(!f.is_stable());
        // A shared frame leaves the vectors empty; a later host copy of a
        // larger grid fills them again, plane by plane.
        for v in [&mut f.rho, &mut f.ux, &mut f.uy, &mut f.uz] {
            v.clear();
        }
        f.copy_from_planes([3, 2, 1], &planes);
        assert_eq!((f.size, f.rho.len(), f.uz.len()), ([3, 2, 1], 6, 6));
        assert_eq!(f.rho, planes[..6]);
        assert_eq!(f.uy, planes[12..18]);
        assert_eq!(f.uz, planes[18..]);
    }

    #[test]
    fn probe_points_map_cell_centres_to_block_centres() {
        assert_eq!(to_display([0.5, 2.5, 10.0], 1), [0.5, 2.5, 10.0]);
        // Cells 0 and 1 make block 0: their middle is its centre.
        assert_eq!(to_display([0.5, 2.5, 4.5], 2), [0.0, 1.0, 2.0]);
    }
}
