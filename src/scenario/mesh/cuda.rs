//! The CUDA mesh voxeliser: `kernels/mesh/voxelize.cu`, the same crossings and
//! parity as [`super::solid_bits`] one thread per triangle, then one per column.

use std::sync::Arc;

use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};

use super::PlacedMesh;
use crate::solver::lbm::cuda::{guarded, probe};

const SOURCE: &str = include_str!("../../../kernels/mesh/voxelize.cu");

/// A compiled voxeliser on device 0.
pub struct CudaVoxelizer {
    ctx: Arc<CudaContext>,
    crossings: cudarc::driver::CudaFunction,
    parity: cudarc::driver::CudaFunction,
}

impl CudaVoxelizer {
    /// Compiles the kernels (the error says why CUDA cannot be used).
    pub fn new() -> Result<CudaVoxelizer, String> {
        let info = probe().map_err(|e| e.0)?;
        let (major, minor) = info.compute_capability;
        let options = cudarc::nvrtc::CompileOptions {
            options: vec![
                format!("--gpu-architecture=compute_{major}{minor}"),
                // Products rounded as on the CPU: the same cells.
                "--fmad=false".into(),
            ],
            ..Default::default()
        };
        let ptx = match std::panic::catch_unwind(|| {
            cudarc::nvrtc::compile_ptx_with_opts(SOURCE, options)
        }) {
            Ok(Ok(ptx)) => ptx,
            Ok(Err(e)) => {
                return Err(format!(
                    "NVRTC could not compile kernels/mesh/voxelize.cu: {e:?}"
                ))
            }
            Err(_) => return Err("NVRTC failed on kernels/mesh/voxelize.cu".into()),
        };
        guarded("mesh voxeliser", || {
            let ctx = CudaContext::new(0)?;
            let module = ctx.load_module(ptx)?;
            Ok(CudaVoxelizer {
                crossings: module.load_function("mesh_crossings")?,
                parity: module.load_function("mesh_parity")?,
                ctx,
            })
        })
    }

    /// Solid cells of `mesh` in a grid of `size`, as [`super::solid_bits`].
    pub fn solid_bits(&self, mesh: &PlacedMesh, size: [usize; 3]) -> Result<Vec<u32>, String> {
        let [nx, ny, nz] = size;
        let words = (nx * ny * nz).div_ceil(32);
        let flat: Vec<f64> = mesh.triangles.iter().flatten().flatten().copied().collect();
        let n = mesh.triangles.len() as u32;
        let (nx32, ny32, nz32) = (nx as i32, ny as i32, nz as i32);
        let columns = (ny * nz) as u32;
        guarded("mesh voxelisation", || {
            let stream = self.ctx.default_stream();
            let tris = stream.clone_htod(&flat)?;
            let mut flips = stream.alloc_zeros::<u32>(words)?;
            let mut out = stream.alloc_zeros::<u32>(words)?;
            let cfg = |items: u32| LaunchConfig {
                grid_dim: (items.div_ceil(256).clamp(1, 65_535), 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = stream.launch_builder(&self.crossings);
            b.arg(&tris)
                .arg(&n)
                .arg(&nx32)
                .arg(&ny32)
                .arg(&nz32)
                .arg(&mut flips);
            // SAFETY: mesh_crossings(const double*, unsigned, int, int, int, unsigned*):
            // 9n doubles, words covering nx·ny·nz bits.
            unsafe { b.launch(cfg(n)) }?;
            let mut b = stream.launch_builder(&self.parity);
            b.arg(&flips).arg(&nx32).arg(&columns).arg(&mut out);
            // SAFETY: mesh_parity(const unsigned*, int, unsigned, unsigned*), same words.
            unsafe { b.launch(cfg(columns)) }?;
            stream.clone_dtoh(&out)
        })
    }
}
