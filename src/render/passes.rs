//! Long-lived compute pipelines over field volumes: the derived scalar and its
//! min/max. Created once; per-call data are uniform writes and bind groups.

use std::sync::Arc;

use wgpu::util::DeviceExt;

use super::derive::PlotType;
use super::gpu::{Gpu, GpuError};
use super::gpu_data::{DeriveParams, ReduceParams, UnpackParams};
use super::shaders;
use super::volume::Volume;
use crate::solver::display::SharedLease;

/// A compute pass's unfiltered float texture (3D volumes; 2D pictures).
pub(crate) fn texture_entry(
    binding: u32,
    dimension: wgpu::TextureViewDimension,
) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Texture {
            sample_type: wgpu::TextureSampleType::Float { filterable: false },
            view_dimension: dimension,
            multisampled: false,
        },
        count: None,
    }
}

/// A 3D volume for a compute pass.
pub(crate) fn volume_entry(binding: u32) -> wgpu::BindGroupLayoutEntry {
    texture_entry(binding, wgpu::TextureViewDimension::D3)
}

/// A 3D volume a compute pass writes.
pub(crate) fn volume_output_entry(
    binding: u32,
    format: wgpu::TextureFormat,
) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::StorageTexture {
            access: wgpu::StorageTextureAccess::WriteOnly,
            format,
            view_dimension: wgpu::TextureViewDimension::D3,
        },
        count: None,
    }
}

pub(crate) fn buffer_entry(
    binding: u32,
    ty: wgpu::BufferBindingType,
    visibility: wgpu::ShaderStages,
) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

pub(crate) fn storage(read_only: bool) -> wgpu::BufferBindingType {
    wgpu::BufferBindingType::Storage { read_only }
}

/// A pipeline layout of one bind group (every pass here uses group 0 only).
pub(crate) fn one_group_layout(
    gpu: &Gpu,
    label: &str,
    layout: &wgpu::BindGroupLayout,
) -> wgpu::PipelineLayout {
    gpu.device
        .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(label),
            bind_group_layouts: &[Some(layout)],
            immediate_size: 0,
        })
}

pub(crate) fn compute_pipeline(
    gpu: &Gpu,
    layout: &wgpu::BindGroupLayout,
    shader: &str,
    entry: &str,
) -> wgpu::ComputePipeline {
    let module = shaders::module(gpu, shader);
    let pipeline_layout = one_group_layout(gpu, shader, layout);
    gpu.device
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: None,
        })
}

/// `shaders/fields/unpack.wgsl`: a shared display frame (see
/// [`crate::solver::display::SharedFrame`]) into the field texture.
pub struct UnpackPass {
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::ComputePipeline,
    /// Bytes per storage binding at most, below the device's own limit (tests).
    binding_limit: Option<u64>,
    /// Parameters of each batch of layers, [`PARAMS_STRIDE`] bytes apart
    /// (grown when a frame needs more batches).
    params: wgpu::Buffer,
}

/// Bytes between batches' parameters: a uniform binding offset alignment
/// every device meets.
const PARAMS_STRIDE: u64 = 256;

fn unpack_params(gpu: &Gpu, batches: u64) -> wgpu::Buffer {
    gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("unpack params"),
        size: batches * PARAMS_STRIDE,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    })
}

impl UnpackPass {
    pub fn new(gpu: &Gpu) -> UnpackPass {
        // Same order as the @group(0) block of unpack.wgsl.
        let layout = gpu
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("unpack"),
                entries: &[
                    buffer_entry(0, storage(true), wgpu::ShaderStages::COMPUTE),
                    volume_output_entry(1, wgpu::TextureFormat::Rgba32Float),
                    buffer_entry(
                        2,
                        wgpu::BufferBindingType::Uniform,
                        wgpu::ShaderStages::COMPUTE,
                    ),
                ],
            });
        let pipeline = compute_pipeline(gpu, &layout, "fields/unpack.wgsl", "main");
        UnpackPass {
            layout,
            pipeline,
            binding_limit: None,
            params: unpack_params(gpu, 1),
        }
    }

    /// Unpacks in batches of at most `bytes` (whole layers, at least one).
    pub fn with_binding_limit(gpu: &Gpu, bytes: u64) -> UnpackPass {
        UnpackPass {
            binding_limit: Some(bytes),
            ..UnpackPass::new(gpu)
        }
    }

    /// Texels in rows of `row_bytes` from `texels` into `fields`, in batches
    /// of layers within the device's largest storage binding.
    /// Copies a frame's texels from `buffer` (in the layout of
    /// [`crate::solver::display::SharedFrame`]) into `fields` within the
    /// GPU; `lease` is let go of once the copy is done, and the solver may
    /// write the frame again.
    pub fn copy_shared(
        &mut self,
        gpu: &Gpu,
        buffer: &wgpu::Buffer,
        lease: Arc<SharedLease>,
        fields: &Volume,
    ) {
        assert_eq!(
            lease.size.map(|n| n as u32),
            fields.size,
            "a frame of the volume's size"
        );
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        self.run(gpu, &mut encoder, buffer, lease.row_bytes(), fields);
        gpu.queue.submit([encoder.finish()]);
        gpu.queue.on_submitted_work_done(move || drop(lease));
    }

    pub fn run(
        &mut self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        texels: &wgpu::Buffer,
        row_bytes: u64,
        fields: &Volume,
    ) {
        let [nx, ny, nz] = fields.size;
        let layer = row_bytes * ny as u64;
        let most = gpu.device.limits().max_storage_buffer_binding_size;
        let most = self.binding_limit.map_or(most, |l| l.min(most));
        let batch = (most / layer).clamp(1, nz as u64) as u32;
        let batches = nz.div_ceil(batch) as u64;
        if self.params.size() < batches * PARAMS_STRIDE {
            self.params = unpack_params(gpu, batches);
        }
        for (k, z0) in (0..nz).step_by(batch as usize).enumerate() {
            let p = UnpackParams {
                size: [nx, ny, batch.min(nz - z0)],
                pitch: (row_bytes / 16) as u32,
                z0,
                _pad: [0; 3],
            };
            gpu.queue.write_buffer(
                &self.params,
                k as u64 * PARAMS_STRIDE,
                bytemuck::bytes_of(&p),
            );
        }
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&self.pipeline);
        for (k, z0) in (0..nz).step_by(batch as usize).enumerate() {
            let layers = batch.min(nz - z0);
            let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("unpack"),
                layout: &self.layout,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: texels,
                            offset: z0 as u64 * layer,
                            size: std::num::NonZeroU64::new(layers as u64 * layer),
                        }),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: wgpu::BindingResource::TextureView(&fields.view),
                    },
                    wgpu::BindGroupEntry {
                        binding: 2,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: &self.params,
                            offset: k as u64 * PARAMS_STRIDE,
                            size: std::num::NonZeroU64::new(
                                std::mem::size_of::<UnpackParams>() as u64
                            ),
                        }),
                    },
                ],
            });
            pass.set_bind_group(0, &bind, &[]);
            pass.dispatch_workgroups(nx.div_ceil(64), ny.div_ceil(4), layers);
        }
    }
}

/// `shaders/fields/derive.wgsl`: fields → scalar of a plot type.
pub struct DerivePass {
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::ComputePipeline,
    /// A ring of [`PARAM_SLOTS`] parameter slots bound at a dynamic offset:
    /// parameters are written when the submission starts, so each run
    /// recorded into one submission needs a slot of its own.
    params: wgpu::Buffer,
    next: std::cell::Cell<u64>,
}

/// Derivations one submission may record.
const PARAM_SLOTS: u64 = 16;
/// Bytes between them (the uniform-offset alignment WebGPU guarantees).
const PARAM_STRIDE: u64 = 256;

impl DerivePass {
    pub fn new(gpu: &Gpu) -> DerivePass {
        // Same order as the @group(0) block of derive.wgsl.
        let layout = gpu
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("derive"),
                entries: &[
                    volume_entry(0),
                    volume_output_entry(1, wgpu::TextureFormat::R32Float),
                    wgpu::BindGroupLayoutEntry {
                        binding: 2,
                        visibility: wgpu::ShaderStages::COMPUTE,
                        ty: wgpu::BindingType::Buffer {
                            ty: wgpu::BufferBindingType::Uniform,
                            has_dynamic_offset: true,
                            min_binding_size: wgpu::BufferSize::new(
                                std::mem::size_of::<DeriveParams>() as u64,
                            ),
                        },
                        count: None,
                    },
                    volume_entry(3),
                ],
            });
        let pipeline = compute_pipeline(gpu, &layout, "fields/derive.wgsl", "main");
        let params = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("derive params"),
            size: PARAM_SLOTS * PARAM_STRIDE,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        DerivePass {
            layout,
            pipeline,
            params,
            next: Default::default(),
        }
    }

    /// Records deriving `plot` from `fields` (and the `concentration`
    /// volume) into `scalar` everywhere.
    pub fn run(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        (fields, concentration): (&Volume, &Volume),
        scalar: &Volume,
        plot: PlotType,
    ) {
        let size = fields.size;
        self.run_box(
            gpu,
            encoder,
            (fields, concentration),
            scalar,
            plot,
            [0; 3],
            size,
        )
    }

    /// [`DerivePass::run`] in the box of `extent` cells from `origin` only
    /// (e.g. the layers a slice samples).
    #[allow(clippy::too_many_arguments)]
    pub fn run_box(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        (fields, concentration): (&Volume, &Volume),
        scalar: &Volume,
        plot: PlotType,
        origin: [u32; 3],
        extent: [u32; 3],
    ) {
        let p = DeriveParams {
            size: fields.size,
            plot: plot.index(),
            origin,
            _pad: 0,
        };
        let slot = self.next.get();
        self.next.set((slot + 1) % PARAM_SLOTS);
        let offset = slot * PARAM_STRIDE;
        gpu.queue
            .write_buffer(&self.params, offset, bytemuck::bytes_of(&p));
        let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("derive"),
            layout: &self.layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::TextureView(&fields.view),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: wgpu::BindingResource::TextureView(&scalar.view),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &self.params,
                        offset: 0,
                        size: wgpu::BufferSize::new(std::mem::size_of::<DeriveParams>() as u64),
                    }),
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: wgpu::BindingResource::TextureView(&concentration.view),
                },
            ],
        });
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &bind, &[offset as u32]);
        let [x, y, z] = extent;
        pass.dispatch_workgroups(x.div_ceil(4), y.div_ceil(4), z.div_ceil(4));
    }
}

/// Workgroups of the first reduction stage.
const REDUCE_GROUPS: u32 = 256;

/// `shaders/fields/minmax.wgsl`: exact min and max of a scalar volume, or
/// of the union of up to three planes through it, left on the GPU for the
/// passes that colour by it.
pub struct MinMax {
    layout: wgpu::BindGroupLayout,
    partial: wgpu::ComputePipeline,
    finish: wgpu::ComputePipeline,
    /// Room for three planes' first stages side by side.
    partials: wgpu::Buffer,
    /// [min, max] of the last [`MinMax::run`].
    pub result: wgpu::Buffer,
    params: Reduction,
}

/// The uniforms of one reduction: a stage's parameters are written when
/// the submission starts, so reductions recorded into one submission each
/// need their own.
pub struct Reduction([wgpu::Buffer; 4]);

impl MinMax {
    pub fn new(gpu: &Gpu) -> MinMax {
        let layout = gpu
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("minmax"),
                entries: &[
                    volume_entry(0),
                    buffer_entry(1, storage(false), wgpu::ShaderStages::COMPUTE),
                    buffer_entry(2, storage(false), wgpu::ShaderStages::COMPUTE),
                    buffer_entry(
                        3,
                        wgpu::BufferBindingType::Uniform,
                        wgpu::ShaderStages::COMPUTE,
                    ),
                ],
            });
        let partial = compute_pipeline(gpu, &layout, "fields/minmax.wgsl", "partial");
        let finish = compute_pipeline(gpu, &layout, "fields/minmax.wgsl", "finish");
        let partials = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("minmax partials"),
            size: 3 * 8 * REDUCE_GROUPS as u64,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        let result = gpu
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("minmax result"),
                contents: bytemuck::cast_slice(&[f32::NAN, f32::NAN]),
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            });
        MinMax {
            layout,
            partial,
            finish,
            partials,
            result,
            params: Self::reduction(gpu),
        }
    }

    /// Uniforms for reductions recorded beside others ([`MinMax::run_to`]).
    pub fn reduction(gpu: &Gpu) -> Reduction {
        Reduction(std::array::from_fn(|_| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("minmax params"),
                size: std::mem::size_of::<ReduceParams>() as u64,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        }))
    }

    /// Records the reduction of `scalar` into `self.result`: [min, max],
    /// with min raised to `floor` where that is below max (else ignored).
    pub fn run(&self, gpu: &Gpu, encoder: &mut wgpu::CommandEncoder, scalar: &Volume, floor: f32) {
        self.run_to(
            gpu,
            encoder,
            &self.params,
            scalar,
            floor,
            &[],
            (&self.result, 0),
            false,
        )
    }

    /// [`MinMax::run`] over the whole volume (no `planes`) or over the
    /// union of up to three planes normal to an axis at a position (cells)
    /// as the slices there show the field, into `out`'s `slot`-th [min,
    /// max]; a `symmetric` range that has both signs is centred on zero
    /// (a diverging colour map's).
    #[allow(clippy::too_many_arguments)]
    pub fn run_to(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        reduction: &Reduction,
        scalar: &Volume,
        floor: f32,
        planes: &[(usize, f32)],
        (out, slot): (&wgpu::Buffer, u32),
        symmetric: bool,
    ) {
        assert!(planes.len() <= 3, "three planes at most");
        let whole = [(3, 0.0)];
        let stages: Vec<(u32, f32)> = if planes.is_empty() {
            whole.to_vec()
        } else {
            planes.iter().map(|&(a, p)| (a as u32, p)).collect()
        };
        let params = |axis, position, base, groups| ReduceParams {
            size: scalar.size,
            groups,
            floor,
            axis,
            position,
            base,
            slot,
            symmetric: symmetric as u32,
            _pad: [0; 2],
        };
        let bind = |uniform: &wgpu::Buffer| {
            gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("minmax"),
                layout: &self.layout,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: wgpu::BindingResource::TextureView(&scalar.view),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: self.partials.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 2,
                        resource: out.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 3,
                        resource: uniform.as_entire_binding(),
                    },
                ],
            })
        };
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&self.partial);
        for (k, &(axis, position)) in stages.iter().enumerate() {
            let p = params(axis, position, k as u32 * REDUCE_GROUPS, REDUCE_GROUPS);
            gpu.queue
                .write_buffer(&reduction.0[k], 0, bytemuck::bytes_of(&p));
            pass.set_bind_group(0, &bind(&reduction.0[k]), &[]);
            pass.dispatch_workgroups(REDUCE_GROUPS, 1, 1);
        }
        let p = params(3, 0.0, 0, stages.len() as u32 * REDUCE_GROUPS);
        gpu.queue
            .write_buffer(&reduction.0[3], 0, bytemuck::bytes_of(&p));
        pass.set_pipeline(&self.finish);
        pass.set_bind_group(0, &bind(&reduction.0[3]), &[]);
        pass.dispatch_workgroups(1, 1, 1);
    }

    /// Runs the reduction and reads [min, max] back (a few bytes: the slider range).
    pub fn compute(&self, gpu: &Gpu, scalar: &Volume, floor: f32) -> Result<(f32, f32), GpuError> {
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        self.run(gpu, &mut encoder, scalar, floor);
        gpu.queue.submit([encoder.finish()]);
        let bytes = gpu.read_buffer(&self.result, 8)?;
        let v: &[f32] = bytemuck::cast_slice(&bytes);
        Ok((v[0], v[1]))
    }
}
