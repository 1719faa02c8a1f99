//! Drawing: an orbit camera with off-axis stereo eyes, the draw pipelines of
//! the scene (mesh, sphere impostors, streamline tubes), and an off-screen
//! target that becomes a PNG.

use glam::{Mat4, Vec2, Vec3};

use super::colour::ColourMap;
use super::gpu::{Gpu, GpuError};
use super::gpu_data::CameraUniform;
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

/// Red/cyan colour matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Anaglyph {
    /// Red from the left eye, green and blue from the right.
    RedCyan,
    /// Dubois' least-squares matrices: less retinal rivalry, truer colours.
    Dubois,
}

impl Anaglyph {
    pub fn name(self) -> &'static str {
        match self {
            Anaglyph::RedCyan => "red-cyan",
            Anaglyph::Dubois => "dubois",
        }
    }
}

/// Off-axis stereo: two eyes side by side with parallel view directions and
/// frusta sheared so that one plane (zero parallax) lands on the screen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stereo {
    pub anaglyph: Anaglyph,
    /// Eye separation as a multiple of the rule of thumb, zero-parallax
    /// distance / 30.
    pub separation: f32,
    /// Zero-parallax distance as a fraction of the camera's distance to its
    /// target (1: the plane through the middle of the domain).
    pub zero_parallax: f32,
}

impl Default for Stereo {
    fn default() -> Self {
        Stereo {
            anaglyph: Anaglyph::Dubois,
            separation: 1.0,
            zero_parallax: 1.0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Left,
    Right,
}

/// One rendering's viewpoint: what the draw shaders need of the camera.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Eye {
    pub view_proj: Mat4,
    pub position: Vec3,
    /// Direction towards the light (the same for both eyes).
    pub light: Vec3,
}

impl Camera {
    /// Looks at the whole box of `size` cells from the front, above and left.
    pub fn framing(size: [u32; 3]) -> Camera {
        let s = Vec3::new(size[0] as f32, size[1] as f32, size[2] as f32);
        let mut camera = Camera {
            target: (s - Vec3::ONE) * 0.5,
            distance: s.length(),
            yaw: -2.2,
            pitch: 0.55,
            fov_y: 0.8,
        };
        // Square or wider views: the vertical field of view is the narrower.
        camera.fit(size, 1.0);
        camera
    }

    /// Moves the eye along its line of sight to the nearest distance at which
    /// every corner of the box of `size` cells is inside a view of `aspect`
    /// (width / height), with a small margin.
    pub fn fit(&mut self, size: [u32; 3], aspect: f32) {
        let half = Vec3::new(size[0] as f32, size[1] as f32, size[2] as f32) * 0.5;
        let centre = half - Vec3::splat(0.5);
        let dir = (self.eye() - self.target).normalize();
        let right = dir.cross(Vec3::Z).normalize_or(Vec3::X);
        let up = right.cross(dir);
        let ty = (0.5 * self.fov_y).tan();
        let tx = ty * aspect.max(1e-3);
        let mut distance = 0.0f32;
        for corner in 0..8 {
            let sign = |bit: u32| if corner & bit == 0 { -1.0 } else { 1.0 };
            let c = centre + half * Vec3::new(sign(1), sign(2), sign(4)) - self.target;
            // Depth of the corner is distance − c·dir; it must cover the
            // corner's offset across the view at both half-angles.
            let along = c.dot(dir);
            distance = distance
                .max(c.dot(right).abs() / tx + along)
                .max(c.dot(up).abs() / ty + along);
        }
        self.distance = distance * 1.08;
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

    fn projection(&self, aspect: f32) -> Mat4 {
        let near = (self.distance * 0.01).max(0.01);
        Mat4::perspective_rh(self.fov_y, aspect, near, self.distance * 4.0)
    }

    pub fn view_proj(&self, aspect: f32) -> Mat4 {
        self.projection(aspect) * Mat4::look_at_rh(self.eye(), self.target, Vec3::Z)
    }

    /// The ray through a point of the picture (normalised device
    /// coordinates) of the mono eye: origin on the near plane, unit direction.
    pub fn ray(&self, aspect: f32, ndc: Vec2) -> (Vec3, Vec3) {
        let inverse = self.view_proj(aspect).inverse();
        let near = inverse.project_point3(ndc.extend(0.0));
        let far = inverse.project_point3(ndc.extend(1.0));
        (near, (far - near).normalize())
    }

    /// The camera's right-hand direction (screen x).
    pub fn right(&self) -> Vec3 {
        (self.target - self.eye()).cross(Vec3::Z).normalize()
    }

    /// The mono eye, or one eye of a stereo pair, with the image shifted by
    /// `jitter` (normalised device units) for accumulation antialiasing.
    ///
    /// Each stereo eye sits half the separation to the side and looks along
    /// the camera's own direction; its image is shifted sideways (an
    /// asymmetric frustum) by the amount that brings points on the
    /// zero-parallax plane to the same pixel in both eyes.
    pub fn eye_view(&self, aspect: f32, stereo: Option<(Stereo, Side)>, jitter: Vec2) -> Eye {
        let centre = self.eye();
        let forward = (self.target - centre).normalize();
        let (position, shift) = match stereo {
            None => (centre, 0.0),
            Some((s, side)) => {
                let zp = s.zero_parallax * self.distance;
                let half = 0.5 * s.separation * zp / 30.0;
                let sign = if side == Side::Left { -1.0 } else { 1.0 };
                let half_width = zp * (0.5 * self.fov_y).tan() * aspect;
                (
                    centre + self.right() * sign * half,
                    sign * half / half_width,
                )
            }
        };
        let view = Mat4::look_to_rh(position, forward, Vec3::Z);
        let shear = Mat4::from_translation(Vec3::new(shift + jitter.x, jitter.y, 0.0));
        Eye {
            view_proj: shear * self.projection(aspect) * view,
            position,
            light: (centre - self.target + Vec3::new(0.0, 0.0, self.distance)).normalize(),
        }
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
    let module = shaders::module(gpu, shader);
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

/// How a drawable is coloured: one colour, or a map over a value range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shading {
    pub colour: [f32; 3],
    pub map: Option<(ColourMap, f32, f32)>,
}

impl Shading {
    pub fn plain(colour: [f32; 3]) -> Shading {
        Shading { colour, map: None }
    }

    /// The shaders' camera uniform for `eye`; `extra` is the shader's own
    /// (radius, points per line).
    pub fn uniform(&self, eye: &Eye, extra: [f32; 4]) -> CameraUniform {
        let c = self.colour;
        CameraUniform {
            view_proj: eye.view_proj.to_cols_array_2d(),
            eye: eye.position.extend(1.0).to_array(),
            colour: [c[0], c[1], c[2], 1.0],
            light: eye.light.extend(0.0).to_array(),
            colour_map: match self.map {
                Some((m, lo, hi)) if m != ColourMap::Plain => [lo, hi, m.index() as f32, 0.0],
                _ => [0.0; 4],
            },
            extra,
        }
    }
}

/// A draw pipeline that pulls its geometry from one storage buffer: the
/// isosurface mesh, sphere impostors, or streamline tubes.
pub struct DrawPipeline {
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::RenderPipeline,
}

/// Per-drawable data: the camera uniform and the bind group over the source
/// buffer.
pub struct Draw {
    camera: wgpu::Buffer,
    bind: wgpu::BindGroup,
    source: wgpu::Buffer,
}

impl DrawPipeline {
    /// Triangles from the extractor: `isosurface/draw.wgsl`.
    pub fn mesh(gpu: &Gpu) -> DrawPipeline {
        DrawPipeline::new(gpu, "isosurface/draw.wgsl")
    }

    /// One sphere per vec4 (centre, value): `impostor/draw.wgsl`.
    pub fn spheres(gpu: &Gpu) -> DrawPipeline {
        DrawPipeline::new(gpu, "impostor/draw.wgsl")
    }

    /// Streamline points as tube segments: `streamlines/tubes.wgsl`.
    pub fn tubes(gpu: &Gpu) -> DrawPipeline {
        DrawPipeline::new(gpu, "streamlines/tubes.wgsl")
    }

    fn new(gpu: &Gpu, shader: &str) -> DrawPipeline {
        let vf = wgpu::ShaderStages::VERTEX_FRAGMENT;
        let layout = gpu
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(shader),
                entries: &[
                    buffer_entry(0, storage(true), wgpu::ShaderStages::VERTEX),
                    buffer_entry(1, wgpu::BufferBindingType::Uniform, vf),
                ],
            });
        let pipeline = depth_tested_pipeline(
            gpu,
            shader,
            &layout,
            &[],
            wgpu::PrimitiveTopology::TriangleList,
        );
        DrawPipeline { layout, pipeline }
    }

    /// Keeps one drawable's data current: created once (again only when its
    /// source buffer was replaced), the camera uniform rewritten per eye.
    pub fn prepare<'d>(
        &self,
        gpu: &Gpu,
        cache: &'d mut Option<Draw>,
        source: &wgpu::Buffer,
        uniform: &CameraUniform,
    ) -> &'d Draw {
        if cache.as_ref().is_none_or(|d| d.source != *source) {
            let camera = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("camera"),
                size: std::mem::size_of::<CameraUniform>() as u64,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("draw"),
                layout: &self.layout,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: source.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: camera.as_entire_binding(),
                    },
                ],
            });
            *cache = Some(Draw {
                camera,
                bind,
                source: source.clone(),
            });
        }
        let draw = cache.as_ref().expect("made above");
        gpu.queue
            .write_buffer(&draw.camera, 0, bytemuck::bytes_of(uniform));
        draw
    }

    /// Draws with arguments a compute pass wrote.
    pub fn draw_indirect(&self, pass: &mut wgpu::RenderPass<'_>, draw: &Draw, args: &wgpu::Buffer) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &draw.bind, &[]);
        pass.draw_indirect(args, 0);
    }

    /// Draws `vertices` vertices (three per sphere, six per tube segment).
    pub fn draw(&self, pass: &mut wgpu::RenderPass<'_>, draw: &Draw, vertices: u32) {
        if vertices > 0 {
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &draw.bind, &[]);
            pass.draw(0..vertices, 0..1);
        }
    }
}

/// An off-screen colour and depth target.
pub struct Target {
    pub size: [u32; 2],
    pub color: wgpu::Texture,
    pub color_view: wgpu::TextureView,
    /// Read by the volume rendering, which stops its rays there.
    pub depth: wgpu::Texture,
    pub depth_view: wgpu::TextureView,
}

impl Target {
    pub fn new(gpu: &Gpu, size: [u32; 2]) -> Target {
        let texture = |format, usage, label| gpu.texture_2d(size, format, usage, label);
        let color = texture(
            COLOR_FORMAT,
            wgpu::TextureUsages::RENDER_ATTACHMENT
                | wgpu::TextureUsages::COPY_SRC
                | wgpu::TextureUsages::COPY_DST
                | wgpu::TextureUsages::TEXTURE_BINDING,
            "color",
        );
        let depth = texture(
            DEPTH_FORMAT,
            wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::TEXTURE_BINDING,
            "depth",
        );
        Target {
            size,
            color_view: color.create_view(&Default::default()),
            depth_view: depth.create_view(&Default::default()),
            depth,
            color,
        }
    }

    pub fn aspect(&self) -> f32 {
        self.size[0] as f32 / self.size[1] as f32
    }

    /// Begins a pass that clears to `background` (timed when `timer` is set).
    pub fn begin<'e>(
        &self,
        encoder: &'e mut wgpu::CommandEncoder,
        background: [f64; 3],
        timer: Option<&super::gpu::GpuTimer>,
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
            timestamp_writes: timer.map(|t| t.render_writes()),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn camera() -> Camera {
        Camera {
            target: Vec3::new(30.0, 20.0, 10.0),
            distance: 90.0,
            yaw: -2.2,
            pitch: 0.4,
            fov_y: 0.8,
        }
    }

    /// Normalised device coordinates of `p` seen by `eye`.
    fn ndc(eye: &Eye, p: Vec3) -> Vec3 {
        eye.view_proj.project_point3(p)
    }

    fn pair(stereo: Stereo) -> (Eye, Eye) {
        let c = camera();
        let left = c.eye_view(1.6, Some((stereo, Side::Left)), Vec2::ZERO);
        let right = c.eye_view(1.6, Some((stereo, Side::Right)), Vec2::ZERO);
        (left, right)
    }

    #[test]
    fn the_default_camera_frames_every_corner_of_the_box() {
        for size in [[66, 66, 66], [256, 96, 64], [400, 100, 20], [12, 12, 300]] {
            for aspect in [16.0 / 9.0, 1.0, 0.6] {
                let mut c = Camera::framing(size);
                c.fit(size, aspect);
                let eye = c.eye_view(aspect, None, Vec2::ZERO);
                let mut widest = 0.0f32;
                for corner in 0..8u32 {
                    let p = Vec3::new(
                        if corner & 1 == 0 {
                            -0.5
                        } else {
                            size[0] as f32 - 0.5
                        },
                        if corner & 2 == 0 {
                            -0.5
                        } else {
                            size[1] as f32 - 0.5
                        },
                        if corner & 4 == 0 {
                            -0.5
                        } else {
                            size[2] as f32 - 0.5
                        },
                    );
                    let q = ndc(&eye, p);
                    assert!(
                        q.x.abs() <= 1.0 && q.y.abs() <= 1.0,
                        "{size:?} {aspect}: {q}"
                    );
                    widest = widest.max(q.x.abs()).max(q.y.abs());
                }
                // Framed, not lost in the middle of the picture.
                assert!(widest > 0.85, "{size:?} {aspect}: {widest}");
            }
        }
    }

    #[test]
    fn points_on_the_zero_parallax_plane_land_on_the_same_pixel() {
        let c = camera();
        let forward = (c.target - c.eye()).normalize();
        let up = c.right().cross(forward);
        for zp in [0.6, 1.0, 1.5] {
            let stereo = Stereo {
                zero_parallax: zp,
                ..Stereo::default()
            };
            let (l, r) = pair(stereo);
            let plane = c.eye() + forward * zp * c.distance;
            for (a, b) in [(0.0, 0.0), (7.0, -3.0), (-12.0, 9.0)] {
                let p = plane + c.right() * a + up * b;
                let (pl, pr) = (ndc(&l, p), ndc(&r, p));
                assert!((pl - pr).truncate().length() < 1e-5, "{pl} vs {pr}");
            }
            // Behind the plane: the right eye's image lies to the right
            // (uncrossed, positive parallax); in front, to the left.
            let behind = plane + forward * 20.0;
            let front = plane - forward * 20.0;
            assert!(ndc(&r, behind).x - ndc(&l, behind).x > 1e-3);
            assert!(ndc(&r, front).x - ndc(&l, front).x < -1e-3);
        }
    }

    #[test]
    fn stereo_eyes_look_parallel_through_asymmetric_frusta() {
        let c = camera();
        let (l, r) = pair(Stereo::default());
        // Parallel view directions: the vanishing point of every direction
        // moves by one and the same image offset from eye to eye (the
        // frustum shift); toed-in eyes would rotate the images apart instead.
        let forward = (c.target - c.eye()).normalize();
        let vanishing = |e: &Eye, d: Vec3| ndc(e, e.position + d * 1e4).truncate();
        let shift = vanishing(&r, forward) - vanishing(&l, forward);
        assert!(shift.x.abs() > 1e-3 && shift.y.abs() < 1e-5);
        for d in [
            forward + c.right() * 0.3,
            forward - Vec3::Z * 0.2,
            forward + Vec3::ONE * 0.1,
        ] {
            let d = d.normalize();
            let s = vanishing(&r, d) - vanishing(&l, d);
            assert!((s - shift).length() < 1e-4, "{s} vs {shift}");
        }
        // The eyes sit on the camera's right axis, separation = zp/30.
        let sep = r.position - l.position;
        assert!((sep.length() - c.distance / 30.0).abs() < 1e-3);
        assert!(sep.normalize().dot(c.right()) > 0.9999);
        // Asymmetric: each eye's straight-ahead ray is off the image centre,
        // by opposite amounts.
        let al = ndc(&l, l.position + forward * 50.0).x;
        let ar = ndc(&r, r.position + forward * 50.0).x;
        assert!(al.abs() > 1e-3 && (al + ar).abs() < 1e-5, "{al} {ar}");
        // The same light for both.
        assert_eq!(l.light, r.light);
    }

    #[test]
    fn mono_eye_without_jitter_is_the_plain_camera() {
        let c = camera();
        let e = c.eye_view(1.5, None, Vec2::ZERO);
        assert!(e.view_proj.abs_diff_eq(c.view_proj(1.5), 1e-6));
        assert_eq!(e.position, c.eye());
        // Jitter moves every point by the same image offset.
        let j = c.eye_view(1.5, None, Vec2::new(0.01, -0.02));
        for p in [c.target, c.target + Vec3::new(5.0, -3.0, 2.0)] {
            let d = ndc(&j, p) - ndc(&e, p);
            assert!((d.truncate() - Vec2::new(0.01, -0.02)).length() < 1e-5);
        }
    }
}
