//! Fields on the GPU: ρ and u in an rgba32float 3D texture, the derived scalar
//! (and obstacle indicator) in r32float 3D textures.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::gpu::{Gpu, GpuError};
use crate::solver::{flags, Fields};

/// One layer of a mapped staging buffer, handed to a worker thread.
struct LayerPtr(std::ptr::NonNull<[u8]>);

// SAFETY: each LayerPtr is a distinct range of mapped memory, written by one
// thread (wgpu's WriteOnly is not Send for slices only for want of a bound).
unsafe impl Send for LayerPtr {}

/// Host-visible buffers the fields are interleaved into and copied from into
/// their texture: one pass over the data on the host, where `write_texture`
/// would add a copy into its own staging memory. After the copy each buffer is
/// mapped again, ready for the next frame.
#[derive(Default)]
pub struct FieldStaging {
    buffers: Vec<wgpu::Buffer>,
    /// Bytes per buffer and layers per buffer they were made for.
    shape: (u64, usize, usize),
    /// Every buffer is mapped again (set by the map callbacks).
    mapped: Vec<Arc<AtomicBool>>,
    submission: Option<wgpu::SubmissionIndex>,
    /// Bytes per buffer at most, below the device's own limit (tests).
    buffer_limit: Option<u64>,
}

impl FieldStaging {
    /// Staging in buffers of at most `bytes` (whole layers, at least one).
    pub fn with_buffer_limit(bytes: u64) -> FieldStaging {
        FieldStaging {
            buffer_limit: Some(bytes),
            ..Default::default()
        }
    }

    /// Mapped buffers for `layers` layers of `layer` bytes, `per_buffer` layers each.
    fn prepare(
        &mut self,
        gpu: &Gpu,
        layer: u64,
        layers: usize,
        per_buffer: usize,
    ) -> Result<(), GpuError> {
        if let Some(index) = self.submission.take() {
            gpu.device
                .poll(wgpu::PollType::Wait {
                    submission_index: Some(index),
                    timeout: None,
                })
                .map_err(|e| GpuError::Device(format!("waiting for the field upload: {e}")))?;
        }
        let shape = (layer, layers, per_buffer);
        if self.shape == shape && self.mapped.iter().all(|m| m.load(Ordering::Acquire)) {
            return Ok(());
        }
        // New sizes, or a mapping that failed: fresh buffers, mapped at creation.
        self.buffers = (0..layers.div_ceil(per_buffer))
            .map(|k| {
                gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("field staging"),
                    size: layer * per_buffer.min(layers - k * per_buffer) as u64,
                    usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: true,
                })
            })
            .collect();
        self.mapped = self
            .buffers
            .iter()
            .map(|_| Arc::new(AtomicBool::new(true)))
            .collect();
        self.shape = shape;
        Ok(())
    }

    /// Maps the buffers again once the copies of `submission` are done.
    fn remap(&mut self, submission: wgpu::SubmissionIndex) {
        for (buffer, mapped) in self.buffers.iter().zip(&self.mapped) {
            mapped.store(false, Ordering::Release);
            let mapped = mapped.clone();
            buffer.slice(..).map_async(wgpu::MapMode::Write, move |r| {
                mapped.store(r.is_ok(), Ordering::Release)
            });
        }
        self.submission = Some(submission);
    }
}

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
            // STORAGE_BINDING: shared frames are unpacked into it; COPY_SRC:
            // checks read it back.
            wgpu::TextureUsages::TEXTURE_BINDING
                | wgpu::TextureUsages::STORAGE_BINDING
                | wgpu::TextureUsages::COPY_DST
                | wgpu::TextureUsages::COPY_SRC,
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

    pub fn write_fields(&self, gpu: &Gpu, f: &Fields) -> Result<(), GpuError> {
        self.write_fields_through(gpu, f, &mut FieldStaging::default())
    }

    /// [`Volume::write_fields`] through `staging`, which keeps its buffers
    /// for the next frame.
    pub fn write_fields_through(
        &self,
        gpu: &Gpu,
        f: &Fields,
        staging: &mut FieldStaging,
    ) -> Result<(), GpuError> {
        use rayon::prelude::*;
        let [nx, ny, nz] = f.size;
        assert_eq!(
            f.size.map(|n| n as u32),
            self.size,
            "fields of the volume's size"
        );
        let row = (nx as u64 * 16).next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT as u64);
        let layer = row * ny as u64;
        // Buffers of whole layers, each within the device's largest buffer.
        let most = gpu.device.limits().max_buffer_size;
        let most = staging.buffer_limit.map_or(most, |l| l.min(most));
        let per_buffer = (most / layer).clamp(1, nz as u64) as usize;
        staging.prepare(gpu, layer, nz, per_buffer)?;
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        for (k, buffer) in staging.buffers.iter().enumerate() {
            let z0 = k * per_buffer;
            let layers = per_buffer.min(nz - z0);
            {
                let mut view = buffer.slice(..).get_mapped_range_mut().map_err(|e| {
                    GpuError::Device(format!("writing the field staging buffer: {e}"))
                })?;
                let mut rest = view.slice(..);
                let mut parts = Vec::with_capacity(layers);
                for _ in 0..layers {
                    let (mut part, tail) = rest.split_at(layer as usize);
                    parts.push(LayerPtr(part.as_raw_ptr()));
                    rest = tail;
                }
                // Interleaving a large grid is the UI thread's biggest cost
                // per frame: one pass, straight into the mapped memory, over
                // all cores.
                parts.into_par_iter().enumerate().for_each(|(dz, ptr)| {
                    // SAFETY: the layers are disjoint ranges of `view`, which
                    // outlives this loop.
                    let mut part = unsafe { wgpu::WriteOnly::new(ptr.0) };
                    let mut texels = vec![[0.0f32; 4]; nx];
                    for y in 0..ny {
                        let c0 = nx * (y + ny * (z0 + dz));
                        for (x, t) in texels.iter_mut().enumerate() {
                            let c = c0 + x;
                            *t = [f.rho[c], f.ux[c], f.uy[c], f.uz[c]];
                        }
                        let at = y * row as usize;
                        part.slice(at..at + 16 * nx)
                            .copy_from_slice(bytemuck::cast_slice(&texels));
                    }
                });
            }
            buffer.unmap();
            encoder.copy_buffer_to_texture(
                wgpu::TexelCopyBufferInfo {
                    buffer,
                    layout: wgpu::TexelCopyBufferLayout {
                        offset: 0,
                        bytes_per_row: Some(row as u32),
                        rows_per_image: Some(ny as u32),
                    },
                },
                wgpu::TexelCopyTextureInfo {
                    texture: &self.texture,
                    mip_level: 0,
                    origin: wgpu::Origin3d {
                        x: 0,
                        y: 0,
                        z: z0 as u32,
                    },
                    aspect: wgpu::TextureAspect::All,
                },
                extent([nx as u32, ny as u32, layers as u32]),
            );
        }
        let submission = gpu.queue.submit([encoder.finish()]);
        staging.remap(submission);
        Ok(())
    }

    pub fn write_scalar(&self, gpu: &Gpu, values: &[f32]) {
        self.write(gpu, bytemuck::cast_slice(values), 4);
    }

    /// 1 inside obstacle cells, 0 elsewhere: obstacles are drawn as the 0.5
    /// isosurface of this, except those tagged `drawn_apart` (meshes, drawn
    /// from their triangles).
    pub fn write_solid(&self, gpu: &Gpu, cell_flags: &[u8], drawn_apart: &[u8]) {
        let v: Vec<f32> = cell_flags
            .iter()
            .map(|&f| {
                let tag = flags::tag(f);
                if flags::CellType::of(f) == flags::CellType::Wall
                    && tag > 0
                    && !drawn_apart.contains(&tag)
                {
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
