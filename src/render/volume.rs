//! Fields on the GPU: ρ and u in an rgba32float 3D texture, the derived scalar
//! (and obstacle indicator) in r32float 3D textures.

use super::gpu::Gpu;
use crate::solver::{flags, Fields};

/// One 3D texture and its view.
pub struct Volume {
    pub size: [u32; 3],
    pub texture: wgpu::Texture,
    pub view: wgpu::TextureView,
}

fn extent(size: [u32; 3]) -> wgpu::Extent3d {
    wgpu::Extent3d {
        width: size[0],
        height: size[1],
        depth_or_array_layers: size[2],
    }
}

impl Volume {
    fn new(
        gpu: &Gpu,
        size: [u32; 3],
        format: wgpu::TextureFormat,
        usage: wgpu::TextureUsages,
        label: &str,
    ) -> Volume {
        let texture = gpu.device.create_texture(&wgpu::TextureDescriptor {
            label: Some(label),
            size: extent(size),
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D3,
            format,
            usage,
            view_formats: &[],
        });
        let view = texture.create_view(&wgpu::TextureViewDescriptor::default());
        Volume {
            size,
            texture,
            view,
        }
    }

    /// (ρ, ux, uy, uz) per cell, written by [`Volume::write_fields`].
    pub fn fields(gpu: &Gpu, size: [u32; 3]) -> Volume {
        Volume::new(
            gpu,
            size,
            wgpu::TextureFormat::Rgba32Float,
            wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
            "fields",
        )
    }

    /// One float per cell, written by compute passes or [`Volume::write_scalar`].
    pub fn scalar(gpu: &Gpu, size: [u32; 3]) -> Volume {
        Volume::new(
            gpu,
            size,
            wgpu::TextureFormat::R32Float,
            wgpu::TextureUsages::TEXTURE_BINDING
                | wgpu::TextureUsages::STORAGE_BINDING
                | wgpu::TextureUsages::COPY_DST
                | wgpu::TextureUsages::COPY_SRC,
            "scalar",
        )
    }

    fn write(&self, gpu: &Gpu, bytes: &[u8], texel: u32) {
        gpu.queue.write_texture(
            self.texture.as_image_copy(),
            bytes,
            wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(self.size[0] * texel),
                rows_per_image: Some(self.size[1]),
            },
            extent(self.size),
        );
    }

    pub fn write_fields(&self, gpu: &Gpu, f: &Fields) {
        self.write_fields_through(gpu, f, &mut Vec::new());
    }

    /// [`Volume::write_fields`] interleaving in `texels`, which keeps its
    /// memory for the next frame (a fresh 16-bytes-a-cell buffer each frame
    /// costs the UI thread its page faults).
    pub fn write_fields_through(&self, gpu: &Gpu, f: &Fields, texels: &mut Vec<[f32; 4]>) {
        use rayon::prelude::*;
        // Interleaving a large grid is the UI thread's biggest cost per frame:
        // spread it over the cores.
        texels.resize(f.rho.len(), [0.0; 4]);
        texels
            .par_chunks_mut(1 << 14)
            .enumerate()
            .for_each(|(k, chunk)| {
                for (i, t) in chunk.iter_mut().enumerate() {
                    let c = (k << 14) + i;
                    *t = [f.rho[c], f.ux[c], f.uy[c], f.uz[c]];
                }
            });
        self.write(gpu, bytemuck::cast_slice(texels), 16);
    }

    pub fn write_scalar(&self, gpu: &Gpu, values: &[f32]) {
        self.write(gpu, bytemuck::cast_slice(values), 4);
    }

    /// 1 inside solid cells (walls, obstacles), 0 elsewhere: obstacles are
    /// drawn as the 0.5 isosurface of this.
    pub fn write_solid(&self, gpu: &Gpu, cell_flags: &[u8]) {
        let v: Vec<f32> = cell_flags
            .iter()
            .map(|&f| {
                if flags::CellType::of(f) == flags::CellType::Wall && flags::tag(f) > 0 {
                    1.0
                } else {
                    0.0
                }
            })
            .collect();
        self.write_scalar(gpu, &v);
    }

    /// 1 in every solid cell (walls and obstacles, resting or moving), 0
    /// elsewhere: where streamlines stop.
    pub fn write_blocked(&self, gpu: &Gpu, cell_flags: &[u8]) {
        let v: Vec<f32> = cell_flags
            .iter()
            .map(|&f| {
                let t = flags::CellType::of(f);
                f32::from(u8::from(
                    t == flags::CellType::Wall || t == flags::CellType::MovingWall,
                ))
            })
            .collect();
        self.write_scalar(gpu, &v);
    }

    /// Reads an r32float volume back (tests).
    pub fn read_scalar(&self, gpu: &Gpu) -> Result<Vec<f32>, super::gpu::GpuError> {
        let bytes = gpu.read_texture(&self.texture, 4)?;
        Ok(bytemuck::cast_slice(&bytes).to_vec())
    }
}
