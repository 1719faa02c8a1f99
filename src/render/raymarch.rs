//! Volume rendering (`shaders/volume/march.wgsl`): rays through a scalar
//! volume, coloured by a colour map and made translucent by an opacity curve,
//! drawn over the opaque scene and stopped at its depth.

use super::colour::ColourMap;
use super::derive::PlotType;
use super::gpu::Gpu;
use super::gpu_data::{MarchParams, QuantizeParams};
use super::passes::{buffer_entry, compute_pipeline, storage, volume_entry};
use super::scene::{Eye, Target, COLOR_FORMAT};
use super::shaders;
use super::volume::Volume;

/// Handles an opacity curve has at most (the uniform's room).
pub const MAX_HANDLES: usize = 8;

/// The opacity curve: opacity per cell of path at fractions t of the colour
/// range, linear between handles (t ascending) and flat beyond the ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Opacity {
    handles: [[f32; 2]; MAX_HANDLES],
    count: usize,
}

impl Opacity {
    /// A curve through `points` (t, opacity), sorted by t; t and opacity are
    /// clamped to [0, 1]. At most [`MAX_HANDLES`] points.
    pub fn new(points: &[[f32; 2]]) -> Result<Opacity, String> {
        if points.len() > MAX_HANDLES {
            return Err(format!(
                "{} opacity handles: at most {MAX_HANDLES}",
                points.len()
            ));
        }
        if let Some(p) = points.iter().find(|p| !p.iter().all(|v| v.is_finite())) {
            return Err(format!("opacity handle {}:{} is not a number", p[0], p[1]));
        }
        let mut handles = [[0.0; 2]; MAX_HANDLES];
        for (h, p) in handles.iter_mut().zip(points) {
            *h = p.map(|v| v.clamp(0.0, 1.0));
        }
        handles[..points.len()].sort_by(|a, b| a[0].total_cmp(&b[0]));
        Ok(Opacity {
            handles,
            count: points.len(),
        })
    }

    /// `T:A,T:A,...`, e.g. `0:0,0.5:0.02,1:0.3`.
    pub fn parse(text: &str) -> Result<Opacity, String> {
        let points = text
            .split(',')
            .map(|pair| {
                let (t, a) = pair.split_once(':').ok_or_else(|| {
                    format!("`{pair}` is not T:OPACITY (e.g. 0.5:0.1: at the middle of the range, 0.1 of the light stopped per cell)")
                })?;
                let number = |s: &str| {
                    s.trim()
                        .parse::<f32>()
                        .map_err(|_| format!("`{s}` in `{pair}` is not a number"))
                };
                Ok([number(t)?, number(a)?])
            })
            .collect::<Result<Vec<_>, String>>()?;
        Opacity::new(&points)
    }

    pub fn handles(&self) -> &[[f32; 2]] {
        &self.handles[..self.count]
    }

    /// Moves handle `k` (kept between its neighbours in t).
    pub fn set(&mut self, k: usize, [t, a]: [f32; 2]) {
        if k >= self.count {
            return;
        }
        let lo = if k == 0 { 0.0 } else { self.handles[k - 1][0] };
        let hi = if k + 1 == self.count {
            1.0
        } else {
            self.handles[k + 1][0]
        };
        self.handles[k] = [t.clamp(lo, hi), a.clamp(0.0, 1.0)];
    }

    /// Adds a handle (none beyond [`MAX_HANDLES`]).
    pub fn insert(&mut self, [t, a]: [f32; 2]) {
        if self.count < MAX_HANDLES && t.is_finite() && a.is_finite() {
            self.handles[self.count] = [t.clamp(0.0, 1.0), a.clamp(0.0, 1.0)];
            self.count += 1;
            self.handles[..self.count].sort_by(|a, b| a[0].total_cmp(&b[0]));
        }
    }

    /// Removes handle `k`, keeping two at least.
    pub fn remove(&mut self, k: usize) {
        if k < self.count && self.count > 2 {
            self.handles.copy_within(k + 1..self.count, k);
            self.count -= 1;
            self.handles[self.count] = [0.0; 2];
        }
    }

    /// The opacity per cell at `t` (the shader's `opacity`).
    pub fn at(&self, t: f32) -> f32 {
        let h = self.handles();
        let Some(first) = h.first() else {
            return 0.0;
        };
        if t <= first[0] {
            return first[1];
        }
        for w in h.windows(2) {
            let (p, q) = (w[0], w[1]);
            if t <= q[0] {
                let span = q[0] - p[0];
                let f = if span > 0.0 { (t - p[0]) / span } else { 1.0 };
                return p[1] + (q[1] - p[1]) * f;
            }
        }
        h[h.len() - 1][1]
    }

    /// Whether the curve stops no light anywhere.
    pub fn is_empty(&self) -> bool {
        self.handles().iter().all(|h| h[1] <= 0.0)
    }
}

/// Points of the transfer function's table over the colour range.
pub const TABLE: usize = 256;

/// Most opacity per cell: 1 would leave log2(0).
const MOST_OPAQUE: f32 = 0.9999;

/// The transfer function as the shader reads it, at `TABLE` evenly spaced
/// points from the bottom of the colour range to its top (linear between):
/// the map's colour, and log2 of the light one cell of path lets through,
/// log2(1 − a), so that a segment of l cells lets 2^(l · log2(1 − a))
/// through: one exp2 per step, and exactly Beer–Lambert's law.
pub fn transfer_table(map: ColourMap, opacity: &Opacity) -> Vec<[f32; 4]> {
    (0..TABLE)
        .map(|i| {
            let t = i as f32 / (TABLE - 1) as f32;
            let [r, g, b] = map.sample(t);
            let a = opacity.at(t).clamp(0.0, MOST_OPAQUE);
            [r, g, b, (1.0 - a).log2()]
        })
        .collect()
}

/// Starting points for the transfer function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum VolumePreset {
    /// |∇ × u| in inferno: the vortex cores glow, the still flow is clear.
    Vorticity,
    /// Speed in viridis: the fast flow shows, the wake is clear.
    Speed,
}

impl VolumePreset {
    pub const ALL: [VolumePreset; 2] = [VolumePreset::Vorticity, VolumePreset::Speed];

    pub fn name(self) -> &'static str {
        match self {
            VolumePreset::Vorticity => "vorticity",
            VolumePreset::Speed => "speed",
        }
    }

    pub fn settings(self) -> VolumeSettings {
        let (field, map, points): (_, _, &[[f32; 2]]) = match self {
            VolumePreset::Vorticity => (
                PlotType::Vorticity,
                ColourMap::Inferno,
                // Vorticity is heavy-tailed (the boundary layers hold the
                // top of the range): the wake's vortices sit low in it.
                &[[0.0, 0.0], [0.04, 0.0], [0.25, 0.12], [1.0, 0.5]],
            ),
            VolumePreset::Speed => (
                PlotType::Speed,
                ColourMap::Viridis,
                &[[0.0, 0.0], [0.4, 0.0], [0.8, 0.015], [1.0, 0.08]],
            ),
        };
        VolumeSettings {
            field,
            map,
            opacity: Opacity::new(points).expect("at most MAX_HANDLES finite points"),
            range: None,
            step: 0.5,
        }
    }
}

/// What the volume rendering shows and how.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VolumeSettings {
    pub field: PlotType,
    pub map: ColourMap,
    pub opacity: Opacity,
    /// A fixed colour range; none: the field's range (GPU min/max).
    pub range: Option<(f32, f32)>,
    /// Ray-march step in cells; each accumulated sample starts its steps
    /// elsewhere, so a still view is sampled more finely.
    pub step: f32,
}

impl Default for VolumeSettings {
    fn default() -> Self {
        VolumePreset::Vorticity.settings()
    }
}

/// The ray march and its per-eye uniforms: a compute pass after the scene's,
/// reading the scene's depth, then a pass that lays its picture over the
/// scene. It marches through the field as 8-bit fractions of its colour
/// range (`volume/quantize.wgsl`; the transfer function has 256 points
/// anyway), sampled trilinearly by the texture units on every adapter
/// (32-bit floats filter only where the adapter offers it); on the H100 as
/// fast as through the 32-bit field.
pub struct RayMarchPass {
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::ComputePipeline,
    compose_layout: wgpu::BindGroupLayout,
    compose: wgpu::RenderPipeline,
    /// The march's picture (premultiplied colour, opacity) at the target's
    /// size, and the bind group that lays it over the scene.
    picture: Option<(wgpu::Texture, wgpu::TextureView, wgpu::BindGroup)>,
    params: wgpu::Buffer,
    sampler: wgpu::Sampler,
    quantize_layout: wgpu::BindGroupLayout,
    quantize: wgpu::ComputePipeline,
    quantize_params: wgpu::Buffer,
    /// [min, max] of the colour range: written on the GPU
    /// ([`super::passes::MinMax::run_to`]) or from a fixed range, and read
    /// there, so that a streamed frame waits for no read-back.
    pub range: wgpu::Buffer,
    /// The quantized field: the buffer the compute pass fills, the r8unorm
    /// texture it is copied into, and the grid and row pitch they are for.
    levels: Option<Levels>,
    /// The transfer function's table (rgba16float, linear between its
    /// points) and what it was made from.
    table: wgpu::Texture,
    table_view: wgpu::TextureView,
    table_of: Option<(ColourMap, Opacity)>,
    /// The bind group and the volume and depth textures it was made for.
    bind: Option<(wgpu::BindGroup, wgpu::Texture, wgpu::Texture)>,
}

/// The march's picture: half floats, premultiplied.
const PICTURE_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba16Float;

struct Levels {
    buffer: wgpu::Buffer,
    texture: wgpu::Texture,
    view: wgpu::TextureView,
    size: [u32; 3],
    pitch: u32,
}

impl RayMarchPass {
    pub fn new(gpu: &Gpu) -> RayMarchPass {
        let f = wgpu::ShaderStages::COMPUTE;
        let uniform = |binding| buffer_entry(binding, wgpu::BufferBindingType::Uniform, f);
        let layout = gpu
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("volume/march"),
                entries: &[
                    uniform(1),
                    wgpu::BindGroupLayoutEntry {
                        binding: 2,
                        visibility: f,
                        ty: wgpu::BindingType::Texture {
                            sample_type: wgpu::TextureSampleType::Float { filterable: true },
                            view_dimension: wgpu::TextureViewDimension::D3,
                            multisampled: false,
                        },
                        count: None,
                    },
                    wgpu::BindGroupLayoutEntry {
                        binding: 3,
                        visibility: f,
                        ty: wgpu::BindingType::Texture {
                            sample_type: wgpu::TextureSampleType::Depth,
                            view_dimension: wgpu::TextureViewDimension::D2,
                            multisampled: false,
                        },
                        count: None,
                    },
                    wgpu::BindGroupLayoutEntry {
                        binding: 4,
                        visibility: f,
                        ty: wgpu::BindingType::Sampler(wgpu::SamplerBindingType::Filtering),
                        count: None,
                    },
                    wgpu::BindGroupLayoutEntry {
                        binding: 5,
                        visibility: f,
                        ty: wgpu::BindingType::Texture {
                            sample_type: wgpu::TextureSampleType::Float { filterable: true },
                            view_dimension: wgpu::TextureViewDimension::D2,
                            multisampled: false,
                        },
                        count: None,
                    },
                    wgpu::BindGroupLayoutEntry {
                        binding: 7,
                        visibility: f,
                        ty: wgpu::BindingType::StorageTexture {
                            access: wgpu::StorageTextureAccess::WriteOnly,
                            format: PICTURE_FORMAT,
                            view_dimension: wgpu::TextureViewDimension::D2,
                        },
                        count: None,
                    },
                ],
            });
        let pipeline = compute_pipeline(gpu, &layout, "volume/march.wgsl", "main");
        let compose_layout =
            gpu.device
                .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some("volume/compose"),
                    entries: &[wgpu::BindGroupLayoutEntry {
                        binding: 0,
                        visibility: wgpu::ShaderStages::FRAGMENT,
                        ty: wgpu::BindingType::Texture {
                            sample_type: wgpu::TextureSampleType::Float { filterable: false },
                            view_dimension: wgpu::TextureViewDimension::D2,
                            multisampled: false,
                        },
                        count: None,
                    }],
                });
        let shader = "volume/compose.wgsl";
        let module = shaders::module(gpu, shader);
        let pipeline_layout = super::passes::one_group_layout(gpu, shader, &compose_layout);
        // Premultiplied: the scene keeps the light the volume lets through.
        let over = wgpu::BlendComponent {
            src_factor: wgpu::BlendFactor::One,
            dst_factor: wgpu::BlendFactor::OneMinusSrcAlpha,
            operation: wgpu::BlendOperation::Add,
        };
        let compose = gpu
            .device
            .create_render_pipeline(&wgpu::RenderPipelineDescriptor {
                label: Some(shader),
                layout: Some(&pipeline_layout),
                vertex: wgpu::VertexState {
                    module: &module,
                    entry_point: Some("vs_main"),
                    compilation_options: Default::default(),
                    buffers: &[],
                },
                fragment: Some(wgpu::FragmentState {
                    module: &module,
                    entry_point: Some("fs_main"),
                    compilation_options: Default::default(),
                    targets: &[Some(wgpu::ColorTargetState {
                        format: COLOR_FORMAT,
                        blend: Some(wgpu::BlendState {
                            color: over,
                            alpha: over,
                        }),
                        write_mask: wgpu::ColorWrites::ALL,
                    })],
                }),
                primitive: Default::default(),
                depth_stencil: None,
                multisample: Default::default(),
                multiview_mask: None,
                cache: None,
            });
        let buffer = |label, size| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        };
        let table = gpu.texture_2d(
            [TABLE as u32, 1],
            wgpu::TextureFormat::Rgba16Float,
            wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
            "transfer function",
        );
        let c = wgpu::ShaderStages::COMPUTE;
        let quantize_layout =
            gpu.device
                .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some("volume/quantize"),
                    entries: &[
                        volume_entry(0),
                        buffer_entry(1, storage(false), c),
                        buffer_entry(2, wgpu::BufferBindingType::Uniform, c),
                        buffer_entry(3, storage(true), c),
                    ],
                });
        RayMarchPass {
            layout,
            pipeline,
            compose_layout,
            compose,
            picture: None,
            params: buffer("march params", std::mem::size_of::<MarchParams>() as u64),
            quantize: compute_pipeline(gpu, &quantize_layout, "volume/quantize.wgsl", "main"),
            quantize_layout,
            quantize_params: buffer(
                "quantize params",
                std::mem::size_of::<QuantizeParams>() as u64,
            ),
            range: gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("volume range"),
                size: 8,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            levels: None,
            sampler: gpu.device.create_sampler(&wgpu::SamplerDescriptor {
                label: Some("volume"),
                mag_filter: wgpu::FilterMode::Linear,
                min_filter: wgpu::FilterMode::Linear,
                ..Default::default()
            }),
            table_view: table.create_view(&Default::default()),
            table,
            table_of: None,
            bind: None,
        }
    }

    /// Records taking the field to march through: `scalar` as fractions of
    /// the range in [`RayMarchPass::range`] (when the encoder runs).
    pub fn set_field(&mut self, gpu: &Gpu, encoder: &mut wgpu::CommandEncoder, scalar: &Volume) {
        let size = scalar.size;
        let pitch = size[0].div_ceil(256) * 256;
        if self
            .levels
            .as_ref()
            .is_none_or(|l| l.size != size || l.pitch != pitch)
        {
            let buffer = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("volume levels"),
                size: pitch as u64 * size[1] as u64 * size[2] as u64,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            let texture = gpu.device.create_texture(&wgpu::TextureDescriptor {
                label: Some("volume levels"),
                size: wgpu::Extent3d {
                    width: size[0],
                    height: size[1],
                    depth_or_array_layers: size[2],
                },
                mip_level_count: 1,
                sample_count: 1,
                dimension: wgpu::TextureDimension::D3,
                format: wgpu::TextureFormat::R8Unorm,
                usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
                view_formats: &[],
            });
            self.levels = Some(Levels {
                view: texture.create_view(&Default::default()),
                buffer,
                texture,
                size,
                pitch,
            });
        }
        let levels = self.levels.as_ref().expect("made above");
        let params = QuantizeParams { size, pitch };
        gpu.queue
            .write_buffer(&self.quantize_params, 0, bytemuck::bytes_of(&params));
        let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("volume/quantize"),
            layout: &self.quantize_layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::TextureView(&scalar.view),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: levels.buffer.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: self.quantize_params.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: self.range.as_entire_binding(),
                },
            ],
        });
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&self.quantize);
            pass.set_bind_group(0, &bind, &[]);
            pass.dispatch_workgroups((pitch / 4).div_ceil(64), size[1], size[2]);
        }
        encoder.copy_buffer_to_texture(
            wgpu::TexelCopyBufferInfo {
                buffer: &levels.buffer,
                layout: wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(pitch),
                    rows_per_image: Some(size[1]),
                },
            },
            levels.texture.as_image_copy(),
            wgpu::Extent3d {
                width: size[0],
                height: size[1],
                depth_or_array_layers: size[2],
            },
        );
    }

    /// Sets the target whose depth stops the rays, and this eye's uniforms;
    /// `sample` is the accumulated sample's index. Draws nothing until a
    /// field was set ([`RayMarchPass::set_field`]).
    pub fn prepare(
        &mut self,
        gpu: &Gpu,
        target: &Target,
        eye: &Eye,
        settings: &VolumeSettings,
        sample: u32,
    ) {
        let Some(levels) = self.levels.as_ref() else {
            return;
        };
        let sized = self
            .picture
            .as_ref()
            .is_some_and(|(t, _, _)| t.width() == target.size[0] && t.height() == target.size[1]);
        if !sized {
            let texture = gpu.texture_2d(
                target.size,
                PICTURE_FORMAT,
                wgpu::TextureUsages::STORAGE_BINDING | wgpu::TextureUsages::TEXTURE_BINDING,
                "volume picture",
            );
            let view = texture.create_view(&Default::default());
            let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("volume/compose"),
                layout: &self.compose_layout,
                entries: &[wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::TextureView(&view),
                }],
            });
            self.picture = Some((texture, view, bind));
            self.bind = None;
        }
        let picture = &self.picture.as_ref().expect("made above").1;
        let current = self
            .bind
            .as_ref()
            .is_some_and(|(_, v, d)| *v == levels.texture && *d == target.depth);
        if !current {
            let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("volume/march"),
                layout: &self.layout,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: self.params.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 2,
                        resource: wgpu::BindingResource::TextureView(&levels.view),
                    },
                    wgpu::BindGroupEntry {
                        binding: 3,
                        resource: wgpu::BindingResource::TextureView(&target.depth_view),
                    },
                    wgpu::BindGroupEntry {
                        binding: 4,
                        resource: wgpu::BindingResource::Sampler(&self.sampler),
                    },
                    wgpu::BindGroupEntry {
                        binding: 5,
                        resource: wgpu::BindingResource::TextureView(&self.table_view),
                    },
                    wgpu::BindGroupEntry {
                        binding: 7,
                        resource: wgpu::BindingResource::TextureView(picture),
                    },
                ],
            });
            self.bind = Some((bind, levels.texture.clone(), target.depth.clone()));
        }
        if self.table_of != Some((settings.map, settings.opacity)) {
            let halves: Vec<u16> = transfer_table(settings.map, &settings.opacity)
                .iter()
                .flatten()
                .map(|&v| half::f16::from_f32(v).to_bits())
                .collect();
            gpu.queue.write_texture(
                self.table.as_image_copy(),
                bytemuck::cast_slice(&halves),
                wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(TABLE as u32 * 8),
                    rows_per_image: None,
                },
                wgpu::Extent3d {
                    width: TABLE as u32,
                    height: 1,
                    depth_or_array_layers: 1,
                },
            );
            self.table_of = Some((settings.map, settings.opacity));
        }
        let params = MarchParams {
            inverse_view_proj: eye.view_proj.inverse().to_cols_array_2d(),
            march: [settings.step, sample as f32, 0.0, 0.0],
        };
        gpu.queue
            .write_buffer(&self.params, 0, bytemuck::bytes_of(&params));
    }

    /// Marches through the volume and lays the result over what `target`
    /// holds (the march timed when `timer` is set).
    pub fn draw(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        target: &Target,
        timer: Option<&super::gpu::GpuTimer>,
    ) {
        let (Some((bind, _, _)), Some((_, _, compose))) = (&self.bind, &self.picture) else {
            return;
        };
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("volume march"),
                timestamp_writes: timer.map(|t| t.writes()),
            });
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, bind, &[]);
            pass.dispatch_workgroups(target.size[0].div_ceil(8), target.size[1].div_ceil(8), 1);
        }
        let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("volume compose"),
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view: &target.color_view,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations {
                    load: wgpu::LoadOp::Load,
                    store: wgpu::StoreOp::Store,
                },
            })],
            depth_stencil_attachment: None,
            timestamp_writes: None,
            occlusion_query_set: None,
            multiview_mask: None,
        });
        pass.set_pipeline(&self.compose);
        pass.set_bind_group(0, compose, &[]);
        pass.draw(0..3, 0..1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_opacity_curve_is_linear_between_handles_and_flat_beyond() {
        let o = Opacity::parse("0.8:0.5, 0.2:0.1,0.5:0.1").unwrap();
        assert_eq!(o.handles(), &[[0.2, 0.1], [0.5, 0.1], [0.8, 0.5]]);
        assert_eq!(o.at(0.0), 0.1);
        assert_eq!(o.at(0.35), 0.1);
        assert!((o.at(0.65) - 0.3).abs() < 1e-6);
        assert_eq!(o.at(1.0), 0.5);
        assert!(!o.is_empty());
        assert!(Opacity::parse("0:0,1:0").unwrap().is_empty());
        assert!(Opacity::new(&[]).unwrap().is_empty());
        assert_eq!(Opacity::new(&[]).unwrap().at(0.3), 0.0);
        // Values clamped to [0, 1]; bad text named.
        assert_eq!(Opacity::parse("0:2").unwrap().handles(), &[[0.0, 1.0]]);
        assert!(Opacity::parse("0.5").unwrap_err().contains("T:OPACITY"));
        assert!(Opacity::parse("0:x").unwrap_err().contains("`x`"));
        assert!(Opacity::parse("0:nan")
            .unwrap_err()
            .contains("not a number"));
        let nine = ["0:0"; 9].join(",");
        assert!(Opacity::parse(&nine).unwrap_err().contains("at most 8"));
    }

    #[test]
    fn a_dragged_handle_stays_between_its_neighbours() {
        let mut o = Opacity::parse("0:0,0.5:0.1,1:0.3").unwrap();
        o.set(1, [0.9, 1.5]);
        assert_eq!(o.handles()[1], [0.9, 1.0]);
        o.set(1, [1.2, 0.2]);
        assert_eq!(o.handles()[1], [1.0, 0.2]);
        o.set(0, [-1.0, 0.0]);
        assert_eq!(o.handles()[0], [0.0, 0.0]);
        o.set(7, [0.5, 0.5]);
        assert_eq!(o.handles().len(), 3);
        o.insert([0.5, 0.4]);
        assert_eq!(
            o.handles(),
            &[[0.0, 0.0], [0.5, 0.4], [1.0, 0.2], [1.0, 0.3]]
        );
        o.remove(1);
        assert_eq!(o.handles(), &[[0.0, 0.0], [1.0, 0.2], [1.0, 0.3]]);
        o.remove(0);
        o.remove(0);
        assert_eq!(o.handles(), &[[1.0, 0.2], [1.0, 0.3]], "two stay");
        for _ in 0..10 {
            o.insert([0.3, 0.1]);
        }
        assert_eq!(o.handles().len(), MAX_HANDLES);
    }

    #[test]
    fn the_table_holds_the_maps_colour_and_the_light_a_cell_lets_through() {
        let o = Opacity::parse("0:0,0.5:0.2,1:1").unwrap();
        let table = transfer_table(ColourMap::Inferno, &o);
        assert_eq!(table.len(), TABLE);
        for (i, row) in table.iter().enumerate() {
            let t = i as f32 / 255.0;
            let c = ColourMap::Inferno.sample(t);
            assert_eq!(row[..3], c[..]);
            let through = 2f32.powf(row[3]);
            let want = 1.0 - o.at(t).min(MOST_OPAQUE);
            assert!(
                (through - want).abs() < 1e-6 * want.max(1e-4),
                "{t}: {through} vs {want}"
            );
        }
        // Nothing stopped: exactly zero, so an empty curve draws nothing.
        assert_eq!(table[0][3], 0.0);
    }

    #[test]
    fn presets_stop_light_only_in_the_upper_part_of_the_range() {
        for p in VolumePreset::ALL {
            let s = p.settings();
            assert_eq!(s.opacity.at(0.0), 0.0, "{}", p.name());
            assert!(s.opacity.at(1.0) > 0.0);
            assert!(s.step > 0.0);
        }
    }
}
