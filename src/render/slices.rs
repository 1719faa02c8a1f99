//! Axis-aligned slices through the field (`shaders/slices/draw.wgsl`): up to
//! three planes across the domain, colour-mapped from a scalar volume,
//! obstacles in their colour, optional contour lines and in-plane velocity
//! arrows (`shaders/slices/arrows.wgsl`); drawn in the scene pass with
//! depth, so they combine with surfaces, streamlines and stereo.

use glam::Vec3;

use super::gpu::Gpu;
use super::gpu_data::CameraUniform;
use super::passes::{buffer_entry, storage};
use super::scene::depth_tested_pipeline;
use super::volume::Volume;

/// Where the slices are: per axis, the plane's position as a fraction of the
/// domain (0 and 1 the first and last cell centres), or none.
pub type SlicePositions = [Option<f32>; 3];

/// Instances of plane k's arrows start at k times this
/// (`shaders/slices/arrows.wgsl`, PLANE_INSTANCES).
const PLANE_INSTANCES: u32 = 1 << 20;

/// The slice and arrow pipelines and their per-eye uniforms.
pub struct SlicePass {
    /// [min, max] of each slice's colour range (x, y, z from slot
    /// [`SlicePass::COLOUR`]), then of the speed on them (whose top scales
    /// the arrows, slot [`SlicePass::SPEED`]): written on the GPU
    /// ([`super::passes::MinMax::run_to`]) or from a fixed range, and read
    /// there, so that a streamed frame waits for no read-back.
    pub ranges: wgpu::Buffer,
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::RenderPipeline,
    camera: wgpu::Buffer,
    /// Each plane's bind group (its own field volume), and the volumes they
    /// were made for.
    bind: Option<([wgpu::BindGroup; 3], [wgpu::Texture; 3], wgpu::Texture)>,
    arrow_layout: wgpu::BindGroupLayout,
    arrows: wgpu::RenderPipeline,
    arrow_camera: wgpu::Buffer,
    /// The arrows' bind group, the field volume it was made for, and the
    /// instances to draw per plane.
    arrow_bind: Option<(wgpu::BindGroup, wgpu::Texture, [u32; 3])>,
}

impl SlicePass {
    pub const COLOUR: u32 = 0;
    pub const SPEED: u32 = 3;

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
                    buffer_entry(3, storage(true), wgpu::ShaderStages::FRAGMENT),
                ],
            });
        let pipeline = depth_tested_pipeline(
            gpu,
            "slices/draw.wgsl",
            &layout,
            &[],
            wgpu::PrimitiveTopology::TriangleList,
        );
        let uniform = |label| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: std::mem::size_of::<CameraUniform>() as u64,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        };
        let arrow_layout = gpu
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("slice arrows"),
                entries: &[
                    buffer_entry(0, wgpu::BufferBindingType::Uniform, vf),
                    texture(1),
                    buffer_entry(2, storage(true), wgpu::ShaderStages::VERTEX),
                ],
            });
        let arrows = depth_tested_pipeline(
            gpu,
            "slices/arrows.wgsl",
            &arrow_layout,
            &[],
            wgpu::PrimitiveTopology::TriangleList,
        );
        let ranges = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("slice ranges"),
            size: 32,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        SlicePass {
            ranges,
            layout,
            pipeline,
            camera: uniform("slices camera"),
            bind: None,
            arrow_layout,
            arrows,
            arrow_camera: uniform("slice arrows camera"),
            arrow_bind: None,
        }
    }

    /// Arrows per plane on a grid of `spacing` cells over a grid of `size`.
    pub fn arrow_counts(positions: &SlicePositions, size: [u32; 3], spacing: f32) -> [u32; 3] {
        let across = |n: u32| ((n.max(1) - 1) as f32 / spacing).floor() as u32 + 1;
        [0, 1, 2].map(|k| match positions[k] {
            Some(_) if spacing >= 1.0 => {
                (across(size[(k + 1) % 3]) * across(size[(k + 2) % 3])).min(PLANE_INSTANCES)
            }
            _ => 0,
        })
    }

    /// Sets the arrows' field volume and this eye's uniform (`uniform.extra`
    /// from [`SlicePass::extra`] with the spacing as w, `colour` the arrows'
    /// colour).
    pub fn prepare_arrows(
        &mut self,
        gpu: &Gpu,
        fields: &Volume,
        uniform: &CameraUniform,
        counts: [u32; 3],
    ) {
        if self
            .arrow_bind
            .as_ref()
            .is_none_or(|(_, f, _)| *f != fields.texture)
        {
            let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("slice arrows"),
                layout: &self.arrow_layout,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: self.arrow_camera.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: wgpu::BindingResource::TextureView(&fields.view),
                    },
                    wgpu::BindGroupEntry {
                        binding: 2,
                        resource: self.ranges.as_entire_binding(),
                    },
                ],
            });
            self.arrow_bind = Some((bind, fields.texture.clone(), counts));
        }
        if let Some(bind) = self.arrow_bind.as_mut() {
            bind.2 = counts;
        }
        gpu.queue
            .write_buffer(&self.arrow_camera, 0, bytemuck::bytes_of(uniform));
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

    /// Sets the volumes (each plane's field, x, y, z, and the solid cells)
    /// and this eye's uniform (`uniform.extra` from [`SlicePass::extra`],
    /// `uniform.colour` the obstacle colour, the colour map's range unused:
    /// the shader reads [`SlicePass::ranges`]).
    pub fn prepare(
        &mut self,
        gpu: &Gpu,
        values: &[Volume; 3],
        solid: &Volume,
        uniform: &CameraUniform,
    ) {
        let current = self.bind.as_ref().is_some_and(|(_, v, s)| {
            (0..3).all(|k| v[k] == values[k].texture) && *s == solid.texture
        });
        if !current {
            let bind = |values: &Volume| {
                gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
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
                        wgpu::BindGroupEntry {
                            binding: 3,
                            resource: self.ranges.as_entire_binding(),
                        },
                    ],
                })
            };
            self.bind = Some((
                [bind(&values[0]), bind(&values[1]), bind(&values[2])],
                std::array::from_fn(|k| values[k].texture.clone()),
                solid.texture.clone(),
            ));
        }
        gpu.queue
            .write_buffer(&self.camera, 0, bytemuck::bytes_of(uniform));
    }

    /// Draws the planes set in the last [`SlicePass::prepare`].
    pub fn draw(&self, pass: &mut wgpu::RenderPass<'_>) {
        if let Some((binds, _, _)) = &self.bind {
            pass.set_pipeline(&self.pipeline);
            for (k, bind) in binds.iter().enumerate() {
                let k = k as u32;
                pass.set_bind_group(0, bind, &[]);
                pass.draw(6 * k..6 * k + 6, 0..1);
            }
        }
    }

    /// Draws the arrows set in the last [`SlicePass::prepare_arrows`].
    pub fn draw_arrows(&self, pass: &mut wgpu::RenderPass<'_>) {
        if let Some((bind, _, counts)) = &self.arrow_bind {
            pass.set_pipeline(&self.arrows);
            pass.set_bind_group(0, bind, &[]);
            for (k, &n) in counts.iter().enumerate() {
                if n > 0 {
                    let first = k as u32 * PLANE_INSTANCES;
                    pass.draw(0..9, first..first + n);
                }
            }
        }
    }
}

/// The nearest slice a ray (`origin + s dir`, s > 0) meets inside the
/// domain's box of `size` cells: its axis and the point (cells).
pub fn pick(
    positions: &SlicePositions,
    size: [u32; 3],
    origin: Vec3,
    dir: Vec3,
) -> Option<(usize, Vec3)> {
    let planes = SlicePass::extra(positions, size, 0);
    let hi = Vec3::from(size.map(|n| n as f32)) - 0.5;
    let mut best: Option<(f32, usize, Vec3)> = None;
    for axis in 0..3 {
        if positions[axis].is_none() || dir[axis].abs() < 1e-9 {
            continue;
        }
        let s = (planes[axis] - origin[axis]) / dir[axis];
        let p = origin + dir * s;
        let inside = (0..3).all(|b| b == axis || (-0.5..=hi[b]).contains(&p[b]));
        if s > 0.0 && inside && best.is_none_or(|(t, _, _)| s < t) {
            best = Some((s, axis, p));
        }
    }
    best.map(|(_, axis, p)| (axis, p))
}

/// Where a slice normal to `axis`, grabbed at `grab`, goes when the pointer's
/// ray is `origin + s dir`: to the point of the line through `grab` along the
/// axis nearest the ray, as a fraction of the domain. None while the ray runs
/// (nearly) along the axis, where that point is not defined.
pub fn drag(axis: usize, grab: Vec3, origin: Vec3, dir: Vec3, size: [u32; 3]) -> Option<f32> {
    let e = Vec3::AXES[axis];
    let d = dir.normalize();
    let de = d.dot(e);
    let across = 1.0 - de * de;
    if across < 1e-3 {
        return None;
    }
    let r = origin - grab;
    let along = (r.dot(e) - de * r.dot(d)) / across;
    let last = (size[axis].max(2) - 1) as f32;
    Some(((grab[axis] + along) / last).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::scene::Camera;

    #[test]
    fn the_pointer_picks_the_nearest_slice_inside_the_box() {
        let size = [41, 21, 11];
        let positions = [Some(0.5), None, Some(0.5)];
        // Straight down through (10, 10): the z-slice at 5 first.
        let down = Vec3::new(0.0, 0.0, -1.0);
        let hit = pick(&positions, size, Vec3::new(10.0, 10.0, 50.0), down);
        assert_eq!(hit, Some((2, Vec3::new(10.0, 10.0, 5.0))));
        // Along x from the left: the x-slice at 20.
        let (axis, p) = pick(&positions, size, Vec3::new(-30.0, 4.0, 2.0), Vec3::X).unwrap();
        assert_eq!((axis, p), (0, Vec3::new(20.0, 4.0, 2.0)));
        // Outside the box, behind the eye, or with no slice on: nothing.
        assert_eq!(
            pick(&positions, size, Vec3::new(-30.0, 40.0, 2.0), Vec3::X),
            None
        );
        assert_eq!(
            pick(&positions, size, Vec3::new(30.0, 4.0, 2.0), Vec3::X),
            None
        );
        assert_eq!(
            pick(&[None; 3], size, Vec3::new(10.0, 10.0, 50.0), down),
            None
        );
    }

    #[test]
    fn a_dragged_slice_follows_the_pointer_along_its_axis() {
        let size = [41, 21, 11];
        let grab = Vec3::new(20.0, 4.0, 2.0);
        // Seen from the side (along -y): the pointer's ray at x = 30 takes the
        // x-slice to cell 30.
        let f = drag(0, grab, Vec3::new(30.0, 100.0, 7.0), -Vec3::Y, size).unwrap();
        assert!((f - 0.75).abs() < 1e-6, "{f}");
        // Oblique rays through a point of the axis line put it there.
        let target = Vec3::new(12.0, 4.0, 2.0);
        let origin = Vec3::new(-20.0, -60.0, 45.0);
        let f = drag(0, grab, origin, target - origin, size).unwrap();
        assert!((f - 0.3).abs() < 1e-5, "{f}");
        // Clamped to the domain; undefined when looking along the axis.
        assert_eq!(
            drag(0, grab, Vec3::new(90.0, 100.0, 7.0), -Vec3::Y, size),
            Some(1.0)
        );
        assert_eq!(
            drag(0, grab, Vec3::new(-50.0, 4.0, 2.0), Vec3::X, size),
            None
        );
    }

    #[test]
    fn a_pixel_ray_from_the_camera_meets_what_the_pixel_shows() {
        let camera = Camera::framing([40, 20, 10]);
        let eye = camera.eye_view(1.5, None, glam::Vec2::ZERO);
        for p in [Vec3::new(20.0, 10.0, 5.0), Vec3::new(3.0, 17.0, 1.0)] {
            let ndc = eye.view_proj.project_point3(p).truncate();
            let (origin, dir) = camera.ray(1.5, ndc);
            let to = p - origin;
            let off = (to - dir * to.dot(dir)).length();
            assert!(off < 1e-3, "{p}: {off}");
        }
    }
}
