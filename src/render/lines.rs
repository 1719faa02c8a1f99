//! Depth-tested line segments (`shaders/scene/lines.wgsl`): the domain's
//! bounding box (grey) with axes from its origin corner (x red, y green,
//! z blue), and the streamline rake.

use glam::Vec3;

use super::gpu::Gpu;
use super::gpu_data::CameraUniform;
use super::passes::buffer_entry;
use super::scene::{depth_tested_pipeline, Eye, Shading};

/// Line segments from a list of (position, colour) vertices.
pub struct Lines {
    pipeline: wgpu::RenderPipeline,
    vertices: Option<wgpu::Buffer>,
    /// What `vertices` holds (a new frame usually brings the same lines).
    data: Vec<f32>,
    camera: wgpu::Buffer,
    bind: wgpu::BindGroup,
    count: u32,
}

impl Lines {
    pub fn new(gpu: &Gpu) -> Lines {
        let layout = gpu
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("lines"),
                entries: &[buffer_entry(
                    0,
                    wgpu::BufferBindingType::Uniform,
                    wgpu::ShaderStages::VERTEX_FRAGMENT,
                )],
            });
        let attributes = wgpu::vertex_attr_array![0 => Float32x3, 1 => Float32x3];
        let buffers = [Some(wgpu::VertexBufferLayout {
            array_stride: 24,
            step_mode: wgpu::VertexStepMode::Vertex,
            attributes: &attributes,
        })];
        let pipeline = depth_tested_pipeline(
            gpu,
            "scene/lines.wgsl",
            &layout,
            &buffers,
            wgpu::PrimitiveTopology::LineList,
        );
        let camera = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("lines camera"),
            size: std::mem::size_of::<CameraUniform>() as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("lines"),
            layout: &layout,
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: camera.as_entire_binding(),
            }],
        });
        Lines {
            pipeline,
            vertices: None,
            data: Vec::new(),
            camera,
            bind,
            count: 0,
        }
    }

    /// Replaces the segments: (x, y, z, r, g, b) per vertex, two per segment.
    pub fn set(&mut self, gpu: &Gpu, data: &[f32]) {
        use wgpu::util::DeviceExt;
        if self.data == data {
            return;
        }
        self.data = data.to_vec();
        self.count = (data.len() / 6) as u32;
        self.vertices = (self.count > 0).then(|| {
            gpu.device
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some("lines"),
                    contents: bytemuck::cast_slice(data),
                    usage: wgpu::BufferUsages::VERTEX,
                })
        });
    }

    /// Writes the camera uniform (before the pass's submission) and draws.
    pub fn draw(&self, gpu: &Gpu, pass: &mut wgpu::RenderPass<'_>, eye: &Eye) {
        let Some(vertices) = &self.vertices else {
            return;
        };
        let uniform = Shading::plain([1.0; 3]).uniform(eye, [0.0; 4]);
        gpu.queue
            .write_buffer(&self.camera, 0, bytemuck::bytes_of(&uniform));
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.bind, &[]);
        pass.set_vertex_buffer(0, vertices.slice(..));
        pass.draw(0..self.count, 0..1);
    }
}

/// Line-list vertices (position, colour) of the box around cells 0..size−1
/// (faces half a cell out) and of the axes along its edges from the origin.
pub fn box_lines(size: [u32; 3]) -> Vec<f32> {
    let lo = Vec3::splat(-0.5);
    let hi = Vec3::new(size[0] as f32, size[1] as f32, size[2] as f32) - Vec3::splat(0.5);
    let corner = |k: u32| {
        Vec3::new(
            if k & 1 == 1 { hi.x } else { lo.x },
            if k & 2 == 2 { hi.y } else { lo.y },
            if k & 4 == 4 { hi.z } else { lo.z },
        )
    };
    let axis_colours = [[0.9, 0.25, 0.2], [0.3, 0.85, 0.3], [0.3, 0.5, 1.0]];
    let mut out = Vec::new();
    for k in 0..8u32 {
        for bit in [1u32, 2, 4] {
            if k & bit == 0 {
                let c = if k == 0 {
                    axis_colours[bit.trailing_zeros() as usize]
                } else {
                    [0.45, 0.47, 0.5]
                };
                let (a, b) = (corner(k), corner(k | bit));
                out.extend_from_slice(&[
                    a.x, a.y, a.z, c[0], c[1], c[2], b.x, b.y, b.z, c[0], c[1], c[2],
                ]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_box_has_twelve_edges_three_of_them_coloured_axes() {
        let v = super::box_lines([4, 5, 6]);
        assert_eq!(v.len(), 12 * 2 * 6);
        let grey = v.chunks(12).filter(|l| l[3] == 0.45).count();
        assert_eq!(grey, 9);
        // Corners at -0.5 and n - 0.5.
        assert!(v.chunks(6).all(|p| [0, 1, 2]
            .iter()
            .all(|&a| p[a] == -0.5 || p[a] == [4.0, 5.0, 6.0][a] - 0.5)));
    }
}
