//! Isosurfaces on the GPU, as triangles by marching tetrahedra
//! (`shaders/isosurface/extract.wgsl`) or as one sphere impostor per
//! straddling cell (`shaders/impostor/append.wgsl`): appended to a storage
//! buffer with a bump counter, an overflow flag that makes the CPU grow the
//! buffer, and indirect draw arguments, so geometry never comes back to the
//! CPU. `cpu` is the triangles' test twin.

pub mod cpu;
pub mod tables;

use super::gpu::{Gpu, GpuError};
use super::gpu_data::{ExtractParams, Vertex};
use super::passes::{buffer_entry, compute_pipeline, storage, volume_entry};
use super::volume::Volume;

/// Extraction pipelines and their buffers.
pub struct Extractor {
    layout: wgpu::BindGroupLayout,
    extract: wgpu::ComputePipeline,
    args: wgpu::ComputePipeline,
    /// Triangle vertices ([`Vertex`]) or spheres (vec4: centre, colour value).
    pub output: wgpu::Buffer,
    /// [element count, overflow flag].
    pub counter: wgpu::Buffer,
    /// Indirect draw arguments: (vertex count, 1, 0, 0) for triangles,
    /// (3 × sphere count, 1, 0, 0) for spheres.
    pub draw_args: wgpu::Buffer,
    params: wgpu::Buffer,
    /// Bound as the range where the isovalue is absolute.
    no_range: wgpu::Buffer,
    /// Elements the output holds.
    pub capacity: u32,
    element: Element,
    /// When set, the extraction pass writes its GPU time there (benchmarks).
    pub timer: Option<super::gpu::GpuTimer>,
    /// Corner range [lo, hi] of the cubes extracted (default: everything).
    pub clip: ([u32; 3], [u32; 3]),
}

/// The isovalue of an extraction.
#[derive(Clone, Copy, Debug)]
pub enum Iso<'a> {
    Value(f32),
    /// This fraction of the [min, max] range the buffer holds (as
    /// [`super::passes::MinMax::result`] leaves it), computed on the GPU.
    Fraction(f32, &'a wgpu::Buffer),
}

/// What an extractor emits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Element {
    Vertex,
    Sphere,
}

impl Element {
    fn bytes(self) -> u64 {
        match self {
            Element::Vertex => std::mem::size_of::<Vertex>() as u64,
            Element::Sphere => 16,
        }
    }

    /// Elements come in groups of this many (a triangle's vertices).
    fn group(self) -> u32 {
        match self {
            Element::Vertex => 3,
            Element::Sphere => 1,
        }
    }
}

impl Extractor {
    /// Marching tetrahedra, room for `capacity` vertices to begin with.
    pub fn new(gpu: &Gpu, capacity: u32) -> Extractor {
        Extractor::with(gpu, capacity, Element::Vertex, "isosurface/extract.wgsl")
    }

    /// Sphere impostors, room for `capacity` spheres to begin with.
    pub fn spheres(gpu: &Gpu, capacity: u32) -> Extractor {
        Extractor::with(gpu, capacity, Element::Sphere, "impostor/append.wgsl")
    }

    fn with(gpu: &Gpu, capacity: u32, element: Element, shader: &str) -> Extractor {
        let c = wgpu::ShaderStages::COMPUTE;
        // Same order as the @group(0) block of extract.wgsl.
        let layout = gpu
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("extract"),
                entries: &[
                    volume_entry(0),
                    buffer_entry(1, storage(false), c),
                    buffer_entry(2, storage(false), c),
                    buffer_entry(3, wgpu::BufferBindingType::Uniform, c),
                    buffer_entry(4, storage(false), c),
                    volume_entry(5),
                    buffer_entry(6, storage(true), c),
                ],
            });
        let extract = compute_pipeline(gpu, &layout, shader, "main");
        let args = compute_pipeline(gpu, &layout, shader, "args");
        let buffer = |label, size, usage| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation: false,
            })
        };
        use wgpu::BufferUsages as U;
        let (output, capacity) = Self::output_buffer(gpu, element, capacity);
        Extractor {
            layout,
            extract,
            args,
            output,
            counter: buffer("iso counter", 8, U::STORAGE | U::COPY_DST | U::COPY_SRC),
            draw_args: buffer(
                "iso draw args",
                16,
                U::STORAGE | U::INDIRECT | U::COPY_SRC | U::COPY_DST,
            ),
            params: buffer(
                "iso params",
                std::mem::size_of::<ExtractParams>() as u64,
                U::UNIFORM | U::COPY_DST,
            ),
            no_range: buffer("iso no range", 8, U::STORAGE),
            capacity,
            element,
            timer: None,
            clip: ([0; 3], [u32::MAX; 3]),
        }
    }

    /// Leaves out the boundary layer of each non-periodic face of `grid`.
    pub fn clip_to_interior(&mut self, grid: &crate::solver::Grid) {
        let lo = [0, 1, 2].map(|a| if grid.periodic[a] { 0 } else { 1 });
        let hi = [0, 1, 2].map(|a| grid.size[a] as u32 - 1 - lo[a]);
        self.clip = (lo, hi);
    }

    fn output_buffer(gpu: &Gpu, element: Element, capacity: u32) -> (wgpu::Buffer, u32) {
        let max = (gpu.device.limits().max_storage_buffer_binding_size / element.bytes())
            .min(u32::MAX as u64) as u32;
        let g = element.group();
        let capacity = capacity.clamp(g, max) / g * g;
        let buffer = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("iso output"),
            size: capacity as u64 * element.bytes(),
            // COPY_DST: mesh triangles are appended (`append`).
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        (buffer, capacity)
    }

    /// Records extraction of the `iso` surface of `scalar` and the draw
    /// arguments; each vertex carries `colour` interpolated there (position.w).
    /// The counter ([`Extractor::counter`]) then says how many elements there
    /// are and whether they overflowed the buffer ([`Extractor::grow`]).
    pub fn run(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        scalar: &Volume,
        colour: &Volume,
        iso: Iso,
    ) {
        let (iso, relative, range) = match iso {
            Iso::Value(v) => (v, 0, &self.no_range),
            Iso::Fraction(f, range) => (f, 1, range),
        };
        let p = ExtractParams {
            size: scalar.size,
            iso,
            lo: self.clip.0,
            capacity: self.capacity,
            hi: self.clip.1,
            relative,
        };
        gpu.queue
            .write_buffer(&self.params, 0, bytemuck::bytes_of(&p));
        gpu.queue
            .write_buffer(&self.counter, 0, bytemuck::cast_slice(&[0u32, 0u32]));
        let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("extract"),
            layout: &self.layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::TextureView(&scalar.view),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: self.output.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: self.counter.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: self.params.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 4,
                    resource: self.draw_args.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 5,
                    resource: wgpu::BindingResource::TextureView(&colour.view),
                },
                wgpu::BindGroupEntry {
                    binding: 6,
                    resource: range.as_entire_binding(),
                },
            ],
        });
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("extract"),
            timestamp_writes: self.timer.as_ref().map(|t| t.writes()),
        });
        pass.set_bind_group(0, &bind, &[]);
        pass.set_pipeline(&self.extract);
        let [x, y, z] = scalar.size;
        pass.dispatch_workgroups(x.div_ceil(4), y.div_ceil(4), z.div_ceil(4));
        pass.set_pipeline(&self.args);
        pass.dispatch_workgroups(1, 1, 1);
    }

    /// Extracts, and if the buffer overflowed grows it to fit and extracts again.
    /// Returns the vertex (or sphere) count: a read-back of 8 bytes, not of
    /// the geometry.
    pub fn extract(&mut self, gpu: &Gpu, scalar: &Volume, iso: f32) -> Result<u32, GpuError> {
        self.extract_coloured(gpu, scalar, scalar, iso)
    }

    /// [`Extractor::extract`], the vertices carrying `colour` (same size).
    pub fn extract_coloured(
        &mut self,
        gpu: &Gpu,
        scalar: &Volume,
        colour: &Volume,
        iso: f32,
    ) -> Result<u32, GpuError> {
        loop {
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            self.run(gpu, &mut encoder, scalar, colour, Iso::Value(iso));
            gpu.queue.submit([encoder.finish()]);
            let bytes = gpu.read_buffer(&self.counter, 8)?;
            let c: &[u32] = bytemuck::cast_slice(&bytes);
            if c[1] == 0 {
                return Ok(c[0]);
            }
            self.grow(gpu, c[0])?;
        }
    }

    /// Adds `vertices` after the `count` the last extraction wrote (growing
    /// the buffer and extracting again with `again` where they do not fit),
    /// and draws them with it.
    pub fn append(
        &mut self,
        gpu: &Gpu,
        mut count: u32,
        vertices: &[Vertex],
        again: impl Fn(&mut Extractor) -> Result<u32, GpuError>,
    ) -> Result<(), GpuError> {
        if vertices.is_empty() {
            return Ok(());
        }
        assert_eq!(self.element, Element::Vertex, "triangles only");
        let total = count as u64 + vertices.len() as u64;
        if total > u32::MAX as u64 / 2 {
            return Err(GpuError::Device(format!(
                "{} mesh vertices do not fit one draw",
                vertices.len()
            )));
        }
        if total > self.capacity as u64 {
            self.grow(gpu, total as u32)?;
            count = again(self)?;
        }
        let offset = count as u64 * self.element.bytes();
        gpu.queue
            .write_buffer(&self.output, offset, bytemuck::cast_slice(vertices));
        let args = [count + vertices.len() as u32, 1, 0, 0];
        gpu.queue
            .write_buffer(&self.draw_args, 0, bytemuck::cast_slice(&args));
        Ok(())
    }

    /// Makes room for `needed` elements (and a quarter more) after an
    /// overflow; the extraction must then run again.
    pub fn grow(&mut self, gpu: &Gpu, needed: u32) -> Result<(), GpuError> {
        let want = (needed as u64 * 5 / 4).min(u32::MAX as u64) as u32;
        let (buffer, capacity) = Self::output_buffer(gpu, self.element, want);
        if capacity <= self.capacity {
            let what = match self.element {
                Element::Vertex => "vertices",
                Element::Sphere => "spheres",
            };
            return Err(GpuError::Device(format!(
                "the isosurface needs {needed} {what}, more than one buffer may hold ({}); choose another isovalue",
                self.capacity
            )));
        }
        // Rare (the buffer grows by a quarter more than needed), and where
        // memory is short the first thing to know.
        eprintln!(
            "display: the isosurface needs {needed} elements; its buffer grows to {:.0} MB",
            capacity as f64 * self.element.bytes() as f64 / 1e6
        );
        self.output = buffer;
        self.capacity = capacity;
        Ok(())
    }

    /// The extracted vertices (tests; rendering draws them in place).
    pub fn read_vertices(&self, gpu: &Gpu, count: u32) -> Result<Vec<Vertex>, GpuError> {
        assert_eq!(self.element, Element::Vertex, "a sphere extractor");
        Ok(bytemuck::cast_slice(&self.read(gpu, count)?).to_vec())
    }

    /// The extracted spheres: centre and colour value (tests).
    pub fn read_spheres(&self, gpu: &Gpu, count: u32) -> Result<Vec<[f32; 4]>, GpuError> {
        assert_eq!(self.element, Element::Sphere, "a triangle extractor");
        Ok(bytemuck::cast_slice(&self.read(gpu, count)?).to_vec())
    }

    fn read(&self, gpu: &Gpu, count: u32) -> Result<Vec<u8>, GpuError> {
        if count == 0 {
            return Ok(Vec::new());
        }
        gpu.read_buffer(&self.output, count as u64 * self.element.bytes())
    }
}
