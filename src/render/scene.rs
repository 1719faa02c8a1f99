//! Drawing: an orbit camera, the isosurface renderer and an off-screen target
//! that becomes a PNG.

use glam::{Mat4, Vec3};

use super::colour::ColourMap;
use super::gpu::{Gpu, GpuError};
use super::gpu_data::CameraUniform;
use super::isosurface::Extractor;
use super::passes::{buffer_entry, storage};
use super::shaders;

/// Orbit camera around a target point (cell coordinates).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Camera {
    pub target: Vec3,
    pub distance: f32,
    /// Radians around the vertical (z) axis, and above the horizontal plane.
    pub yaw: f32,
    pub pitch: f32,
    pub fov_y: f32,
}

impl Camera {
    /// Looks at the whole box of `size` cells from the front, above and left.
    pub fn framing(size: [u32; 3]) -> Camera {
        let s = Vec3::new(size[0] as f32, size[1] as f32, size[2] as f32);
        Camera {
            target: (s - Vec3::ONE) * 0.5,
            distance: s.length() * 0.9,
            yaw: -2.2,
            pitch: 0.55,
            fov_y: 0.8,
        }
    }

    /// Yaw 0 puts the eye on the +x side; pitch > 0 above the target.
    pub fn eye(&self) -> Vec3 {
        let dir = Vec3::new(
            self.pitch.cos() * self.yaw.cos(),
            self.pitch.cos() * self.yaw.sin(),
            self.pitch.sin(),
        );
        self.target + dir * self.distance
    }

    pub fn view_proj(&self, aspect: f32) -> Mat4 {
        let view = Mat4::look_at_rh(self.eye(), self.target, Vec3::Z);
        let near = (self.distance * 0.01).max(0.01);
        let proj = Mat4::perspective_rh(self.fov_y, aspect, near, self.distance * 4.0);
        proj * view
    }
}

pub const COLOR_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8Unorm;
pub const DEPTH_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Depth32Float;

/// A render pipeline into the off-screen target (colour + depth, depth-tested)
/// from a shader with `vs_main` and `fs_main`.
pub(crate) fn depth_tested_pipeline(
    gpu: &Gpu,
    shader: &str,
    layout: &wgpu::BindGroupLayout,
    buffers: &[Option<wgpu::VertexBufferLayout<'_>>],
    topology: wgpu::PrimitiveTopology,
) -> wgpu::RenderPipeline {
    let module = shaders::module(&gpu.device, shader);
    let pipeline_layout = super::passes::one_group_layout(gpu, shader, layout);
    gpu.device
        .create_render_pipeline(&wgpu::RenderPipelineDescriptor {
            label: Some(shader),
            layout: Some(&pipeline_layout),
            vertex: wgpu::VertexState {
                module: &module,
                entry_point: Some("vs_main"),
                compilation_options: Default::default(),
                buffers,
            },
            fragment: Some(wgpu::FragmentState {
                module: &module,
                entry_point: Some("fs_main"),
                compilation_options: Default::default(),
                targets: &[Some(COLOR_FORMAT.into())],
            }),
            primitive: wgpu::PrimitiveState {
                topology,
                ..Default::default()
            },
            depth_stencil: Some(wgpu::DepthStencilState {
                format: DEPTH_FORMAT,
                depth_write_enabled: Some(true),
                depth_compare: Some(wgpu::CompareFunction::Less),
                stencil: Default::default(),
                bias: Default::default(),
            }),
            multisample: Default::default(),
            multiview_mask: None,
            cache: None,
        })
}

/// How a surface is coloured: one colour, or a map over a value range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shading {
    pub colour: [f32; 3],
    pub map: Option<(ColourMap, f32, f32)>,
}

impl Shading {
    pub fn plain(colour: [f32; 3]) -> Shading {
        Shading { colour, map: None }
    }
}

/// The isosurface pipeline: triangles straight from the extractor's buffer.
pub struct MeshRenderer {
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::RenderPipeline,
}

/// Per-surface draw data: the camera uniform and the bind group over the
/// extractor's vertex buffer.
pub struct MeshDraw {
    camera: wgpu::Buffer,
    bind: wgpu::BindGroup,
    vertices: wgpu::Buffer,
}

impl MeshRenderer {
    pub fn new(gpu: &Gpu) -> MeshRenderer {
        let vf = wgpu::ShaderStages::VERTEX_FRAGMENT;
        let layout = gpu
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("mesh"),
                entries: &[
                    buffer_entry(0, storage(true), wgpu::ShaderStages::VERTEX),
                    buffer_entry(1, wgpu::BufferBindingType::Uniform, vf),
                ],
            });
        let pipeline = depth_tested_pipeline(
            gpu,
            "isosurface/draw.wgsl",
            &layout,
            &[],
            wgpu::PrimitiveTopology::TriangleList,
        );
        MeshRenderer { layout, pipeline }
    }

    /// Keeps the draw data of one surface current: created once (again only
    /// when the extractor's vertex buffer was replaced), the camera uniform
    /// rewritten each frame.
    pub fn prepare<'d>(
        &self,
        gpu: &Gpu,
        cache: &'d mut Option<MeshDraw>,
        extractor: &Extractor,
        camera: &Camera,
        aspect: f32,
        shading: Shading,
    ) -> &'d MeshDraw {
        let Shading { colour, map } = shading;
        let uniform = CameraUniform {
            view_proj: camera.view_proj(aspect).to_cols_array_2d(),
            eye: camera.eye().extend(1.0).to_array(),
            colour: [colour[0], colour[1], colour[2], 1.0],
            light: (camera.eye() - camera.target + Vec3::new(0.0, 0.0, camera.distance))
                .normalize()
                .extend(0.0)
                .to_array(),
            colour_map: match map {
                Some((m, lo, hi)) if m != ColourMap::Plain => [lo, hi, m.index() as f32, 0.0],
                _ => [0.0; 4],
            },
        };
        let stale = cache
            .as_ref()
            .is_none_or(|d| d.vertices != extractor.vertices);
        if stale {
            let camera = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("camera"),
                size: std::mem::size_of::<CameraUniform>() as u64,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("mesh"),
                layout: &self.layout,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: extractor.vertices.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: camera.as_entire_binding(),
                    },
                ],
            });
            *cache = Some(MeshDraw {
                camera,
                bind,
                vertices: extractor.vertices.clone(),
            });
        }
        let draw = cache.as_ref().expect("made above");
        gpu.queue
            .write_buffer(&draw.camera, 0, bytemuck::bytes_of(&uniform));
        draw
    }

    pub fn draw(&self, pass: &mut wgpu::RenderPass<'_>, draw: &MeshDraw, extractor: &Extractor) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &draw.bind, &[]);
        pass.draw_indirect(&extractor.draw_args, 0);
    }
}

/// An off-screen colour and depth target.
pub struct Target {
    pub size: [u32; 2],
    pub color: wgpu::Texture,
    pub color_view: wgpu::TextureView,
    pub depth_view: wgpu::TextureView,
}

impl Target {
    pub fn new(gpu: &Gpu, size: [u32; 2]) -> Target {
        let extent = wgpu::Extent3d {
            width: size[0],
            height: size[1],
            depth_or_array_layers: 1,
        };
        let texture = |format, usage, label| {
            gpu.device.create_texture(&wgpu::TextureDescriptor {
                label: Some(label),
                size: extent,
                mip_level_count: 1,
                sample_count: 1,
                dimension: wgpu::TextureDimension::D2,
                format,
                usage,
                view_formats: &[],
            })
        };
        let color = texture(
            COLOR_FORMAT,
            wgpu::TextureUsages::RENDER_ATTACHMENT
                | wgpu::TextureUsages::COPY_SRC
                | wgpu::TextureUsages::TEXTURE_BINDING,
            "color",
        );
        let depth = texture(
            DEPTH_FORMAT,
            wgpu::TextureUsages::RENDER_ATTACHMENT,
            "depth",
        );
        Target {
            size,
            color_view: color.create_view(&Default::default()),
            depth_view: depth.create_view(&Default::default()),
            color,
        }
    }

    pub fn aspect(&self) -> f32 {
        self.size[0] as f32 / self.size[1] as f32
    }

    /// Begins a pass that clears to `background`.
    pub fn begin<'e>(
        &self,
        encoder: &'e mut wgpu::CommandEncoder,
        background: [f64; 3],
    ) -> wgpu::RenderPass<'e> {
        encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("scene"),
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view: &self.color_view,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations {
                    load: wgpu::LoadOp::Clear(wgpu::Color {
                        r: background[0],
                        g: background[1],
                        b: background[2],
                        a: 1.0,
                    }),
                    store: wgpu::StoreOp::Store,
                },
            })],
            depth_stencil_attachment: Some(wgpu::RenderPassDepthStencilAttachment {
                view: &self.depth_view,
                depth_ops: Some(wgpu::Operations {
                    load: wgpu::LoadOp::Clear(1.0),
                    store: wgpu::StoreOp::Store,
                }),
                stencil_ops: None,
            }),
            timestamp_writes: None,
            occlusion_query_set: None,
            multiview_mask: None,
        })
    }

    /// RGBA8 pixels, rows top to bottom.
    pub fn read_rgba(&self, gpu: &Gpu) -> Result<Vec<u8>, GpuError> {
        gpu.read_texture(&self.color, 4)
    }
}

/// Writes RGBA8 pixels as a PNG.
pub fn save_png(path: &std::path::Path, size: [u32; 2], rgba: &[u8]) -> std::io::Result<()> {
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut encoder = png::Encoder::new(file, size[0], size[1]);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(std::io::Error::other)?;
    writer
        .write_image_data(rgba)
        .map_err(std::io::Error::other)?;
    writer.finish().map_err(std::io::Error::other)
}
