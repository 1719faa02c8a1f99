//! The wgpu device: headless (no window, no surface) or shared with a window.

/// Why no GPU rendering is possible.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no Vulkan graphics adapter found ({0}); on Debian/Ubuntu install mesa-vulkan-drivers (software rendering) or a GPU driver with Vulkan")]
    NoAdapter(String),
    #[error("graphics device: {0}")]
    Device(String),
}

/// A device and its queue.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    /// Whether timestamp queries are available (benchmarks).
    pub timestamps: bool,
    /// Read the WGSL shaders from this directory instead of the built-in
    /// copies ([`crate::system::Tuning::shader_dir`]); set it before the
    /// passes are made.
    pub shader_dir: Option<std::path::PathBuf>,
}

/// Native wgpu futures complete on their first poll.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut f = std::pin::pin!(f);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

impl Gpu {
    /// Opens the best Vulkan adapter (a real GPU before a software one).
    pub fn headless() -> Result<Gpu, GpuError> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: wgpu::Backends::VULKAN,
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let adapter = block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        }))
        .map_err(|e| GpuError::NoAdapter(e.to_string()))?;
        Gpu::from_adapter(&adapter)
    }

    /// Opens a device on an adapter (the window picks one that can present).
    pub fn from_adapter(adapter: &wgpu::Adapter) -> Result<Gpu, GpuError> {
        let info = adapter.get_info();
        let wanted = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::VULKAN_EXTERNAL_MEMORY_FD;
        let features = adapter.features() & wanted;
        let (device, queue) = block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("flowscope"),
            required_features: features,
            // The adapter's own limits: isosurface buffers want its largest
            // storage bindings (2 GiB on the H100, 128 MiB on lavapipe).
            required_limits: adapter.limits(),
            ..Default::default()
        }))
        .map_err(|e| GpuError::Device(e.to_string()))?;
        // A validation error is a bug, but it should not take the user's run
        // with it: report it and carry on (wgpu's default handler panics).
        device.on_uncaptured_error(std::sync::Arc::new(|e: wgpu::Error| {
            eprintln!("GPU error: {e}")
        }));
        Ok(Gpu {
            shader_dir: None,
            device,
            queue,
            info,
            timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
        })
    }

    /// A 2D texture of `size` pixels, one mip level, one sample.
    pub fn texture_2d(
        &self,
        size: [u32; 2],
        format: wgpu::TextureFormat,
        usage: wgpu::TextureUsages,
        label: &str,
    ) -> wgpu::Texture {
        self.device.create_texture(&wgpu::TextureDescriptor {
            label: Some(label),
            size: wgpu::Extent3d {
                width: size[0],
                height: size[1],
                depth_or_array_layers: 1,
            },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format,
            usage,
            view_formats: &[],
        })
    }

    /// Copies a whole texture (COPY_SRC, one mip level) to the host as tightly
    /// packed rows of `texel_bytes`-byte texels, slices after one another.
    pub fn read_texture(
        &self,
        texture: &wgpu::Texture,
        texel_bytes: u32,
    ) -> Result<Vec<u8>, GpuError> {
        let size = texture.size();
        let (w, h, d) = (size.width, size.height, size.depth_or_array_layers);
        let tight = w * texel_bytes;
        let row =
            tight.div_ceil(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT) * wgpu::COPY_BYTES_PER_ROW_ALIGNMENT;
        let bytes = (row * h * d) as u64;
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("texture readback"),
            size: bytes,
            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self.device.create_command_encoder(&Default::default());
        encoder.copy_texture_to_buffer(
            texture.as_image_copy(),
            wgpu::TexelCopyBufferInfo {
                buffer: &buffer,
                layout: wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(row),
                    rows_per_image: Some(h),
                },
            },
            size,
        );
        self.queue.submit([encoder.finish()]);
        let padded = self.read_buffer(&buffer, bytes)?;
        let mut out = Vec::with_capacity((tight * h * d) as usize);
        for r in 0..(h * d) as usize {
            let start = r * row as usize;
            out.extend_from_slice(&padded[start..start + tight as usize]);
        }
        Ok(out)
    }

    /// Copies `size` bytes of `buffer` (COPY_SRC) to the host, waiting for the GPU.
    pub fn read_buffer(&self, buffer: &wgpu::Buffer, size: u64) -> Result<Vec<u8>, GpuError> {
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, size);
        self.queue.submit([encoder.finish()]);
        staging.slice(..).map_async(wgpu::MapMode::Read, |_| {});
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| GpuError::Device(format!("waiting for the GPU: {e}")))?;
        let bytes = staging
            .slice(..)
            .get_mapped_range()
            .map_err(|e| GpuError::Device(format!("reading back a buffer: {e}")))?
            .to_vec();
        staging.unmap();
        Ok(bytes)
    }
}

/// GPU time of one pass from timestamp queries (benchmarks; needs
/// [`Gpu::timestamps`]).
pub struct GpuTimer {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    period_ns: f32,
}

impl GpuTimer {
    pub fn new(gpu: &Gpu) -> Option<GpuTimer> {
        gpu.timestamps.then(|| GpuTimer {
            set: gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("timer"),
                ty: wgpu::QueryType::Timestamp,
                count: 2,
            }),
            resolve: gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("timer resolve"),
                size: 16,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }),
            period_ns: gpu.queue.get_timestamp_period(),
        })
    }

    /// For a compute pass's descriptor: start and end of the pass.
    pub fn writes(&self) -> wgpu::ComputePassTimestampWrites<'_> {
        wgpu::ComputePassTimestampWrites {
            query_set: &self.set,
            beginning_of_pass_write_index: Some(0),
            end_of_pass_write_index: Some(1),
        }
    }

    /// For a render pass's descriptor: start and end of the pass.
    pub fn render_writes(&self) -> wgpu::RenderPassTimestampWrites<'_> {
        wgpu::RenderPassTimestampWrites {
            query_set: &self.set,
            beginning_of_pass_write_index: Some(0),
            end_of_pass_write_index: Some(1),
        }
    }

    /// Milliseconds between the two timestamps of the last timed pass.
    pub fn read_ms(&self, gpu: &Gpu) -> Result<f64, GpuError> {
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        encoder.resolve_query_set(&self.set, 0..2, &self.resolve, 0);
        gpu.queue.submit([encoder.finish()]);
        let bytes = gpu.read_buffer(&self.resolve, 16)?;
        let t: &[u64] = bytemuck::cast_slice(&bytes);
        Ok(t[1].saturating_sub(t[0]) as f64 * self.period_ns as f64 * 1e-6)
    }
}
