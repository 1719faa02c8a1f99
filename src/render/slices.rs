//! Axis-aligned slices through the field (`shaders/slices/draw.wgsl`): up to
//! three planes across the domain, colour-mapped from a scalar volume,
//! obstacles in their colour, optional contour lines; drawn in the scene pass
//! with depth, so they combine with surfaces, streamlines and stereo.

use super::gpu::Gpu;
use super::gpu_data::CameraUniform;
use super::passes::buffer_entry;
use super::scene::depth_tested_pipeline;
use super::volume::Volume;

/// Where the slices are: per axis, the plane's position as a fraction of the
/// domain (0 and 1 the first and last cell centres), or none.
pub type SlicePositions = [Option<f32>; 3];

/// The slice pipeline and its per-eye uniform.
pub struct SlicePass {
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::RenderPipeline,
    camera: wgpu::Buffer,
    /// The bind group and the volumes it was made for.
    bind: Option<(wgpu::BindGroup, wgpu::Texture, wgpu::Texture)>,
}

impl SlicePass {
    pub fn new(gpu: &Gpu) -> SlicePass {
        let vf = wgpu::ShaderStages::VERTEX_FRAGMENT;
        let texture = |binding| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: vf,
            ty: wgpu::BindingType::Texture {
                sample_type: wgpu::TextureSampleType::Float { filterable: false },
                view_dimension: wgpu::TextureViewDimension::D3,
                multisampled: false,
            },
            count: None,
        };
        let layout = gpu
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("slices"),
                entries: &[
                    buffer_entry(0, wgpu::BufferBindingType::Uniform, vf),
                    texture(1),
                    texture(2),
                ],
            });
        let pipeline = depth_tested_pipeline(
            gpu,
            "slices/draw.wgsl",
            &layout,
            &[],
            wgpu::PrimitiveTopology::TriangleList,
        );
        let camera = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("slices camera"),
            size: std::mem::size_of::<CameraUniform>() as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        SlicePass {
            layout,
            pipeline,
            camera,
            bind: None,
        }
    }

    /// The planes' positions in cells of a grid of `size` for the uniform's
    /// `extra` (below -1: off), and the contour levels.
    pub fn extra(positions: &SlicePositions, size: [u32; 3], contours: u32) -> [f32; 4] {
        let at = |a: usize| match positions[a] {
            Some(f) => f.clamp(0.0, 1.0) * (size[a] as f32 - 1.0),
            None => -2.0,
        };
        [at(0), at(1), at(2), contours as f32]
    }

    /// Sets the volumes and this eye's uniform (`uniform.extra` from
    /// [`SlicePass::extra`], `uniform.colour` the obstacle colour).
    pub fn prepare(&mut self, gpu: &Gpu, values: &Volume, solid: &Volume, uniform: &CameraUniform) {
        let current = self
            .bind
            .as_ref()
            .is_some_and(|(_, v, s)| *v == values.texture && *s == solid.texture);
        if !current {
            let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("slices"),
                layout: &self.layout,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: self.camera.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: wgpu::BindingResource::TextureView(&values.view),
                    },
                    wgpu::BindGroupEntry {
                        binding: 2,
                        resource: wgpu::BindingResource::TextureView(&solid.view),
                    },
                ],
            });
            self.bind = Some((bind, values.texture.clone(), solid.texture.clone()));
        }
        gpu.queue
            .write_buffer(&self.camera, 0, bytemuck::bytes_of(uniform));
    }

    /// Draws the planes set in the last [`SlicePass::prepare`].
    pub fn draw(&self, pass: &mut wgpu::RenderPass<'_>) {
        if let Some((bind, _, _)) = &self.bind {
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, bind, &[]);
            pass.draw(0..18, 0..1);
        }
    }
}
