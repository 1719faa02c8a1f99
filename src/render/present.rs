//! From renderings to the picture shown: accumulation antialiasing (the running
//! mean of jittered renderings, per eye) and the final compose, mono or a
//! red/cyan anaglyph. Shaders: `shaders/present/{accumulate,compose}.wgsl`.

use glam::Vec2;

use super::gpu::{Gpu, GpuError};
use super::gpu_data::OneParam;
use super::passes::{buffer_entry, compute_pipeline, texture_entry};
use super::scene::{Anaglyph, Target};

/// How the accumulated images become the picture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compose {
    Mono,
    Anaglyph(Anaglyph),
}

impl Compose {
    fn code(self) -> u32 {
        match self {
            Compose::Mono => 0,
            Compose::Anaglyph(Anaglyph::RedCyan) => 1,
            Compose::Anaglyph(Anaglyph::Dubois) => 2,
        }
    }
}

/// Sub-pixel offset of sample `k` in pixels, in [-0.5, 0.5)²: the Halton
/// sequence in bases 2 and 3, which covers the pixel evenly for any count.
pub fn jitter(k: u32) -> Vec2 {
    fn halton(mut i: u32, base: u32) -> f32 {
        let (mut f, mut r) = (1.0f32, 0.0f32);
        while i > 0 {
            f /= base as f32;
            r += f * (i % base) as f32;
            i /= base;
        }
        r
    }
    Vec2::new(halton(k + 1, 2), halton(k + 1, 3)) - Vec2::splat(0.5)
}

/// The textures of one picture size.
pub struct Frames {
    pub size: [u32; 2],
    /// Where each rendering is drawn before it is accumulated.
    pub scratch: Target,
    /// The picture (rgba8, sRGB-encoded values): shown, saved, read back.
    pub picture: wgpu::Texture,
    pub picture_view: wgpu::TextureView,
    /// Per eye and parity k: scratch + mean k → mean 1 − k. The means are
    /// ping-pong textures per eye, linear light.
    accumulate: [[wgpu::BindGroup; 2]; 2],
    /// Per parity k, mono and stereo: means k → picture.
    compose: [[wgpu::BindGroup; 2]; 2],
}

pub struct Presenter {
    accumulate_layout: wgpu::BindGroupLayout,
    accumulate: wgpu::ComputePipeline,
    compose_layout: wgpu::BindGroupLayout,
    compose: wgpu::ComputePipeline,
    accumulate_params: wgpu::Buffer,
    compose_params: wgpu::Buffer,
    pub frames: Option<Frames>,
}

fn layout(gpu: &Gpu, label: &str, output: wgpu::TextureFormat) -> wgpu::BindGroupLayout {
    let c = wgpu::ShaderStages::COMPUTE;
    let texture = |binding| texture_entry(binding, wgpu::TextureViewDimension::D2);
    gpu.device
        .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(label),
            entries: &[
                texture(0),
                texture(1),
                wgpu::BindGroupLayoutEntry {
                    binding: 2,
                    visibility: c,
                    ty: wgpu::BindingType::StorageTexture {
                        access: wgpu::StorageTextureAccess::WriteOnly,
                        format: output,
                        view_dimension: wgpu::TextureViewDimension::D2,
                    },
                    count: None,
                },
                buffer_entry(3, wgpu::BufferBindingType::Uniform, c),
            ],
        })
}

const ACCUMULATION_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba32Float;
const PICTURE_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8Unorm;

impl Presenter {
    pub fn new(gpu: &Gpu) -> Presenter {
        let accumulate_layout = layout(gpu, "accumulate", ACCUMULATION_FORMAT);
        let compose_layout = layout(gpu, "compose", PICTURE_FORMAT);
        let params = |label| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: std::mem::size_of::<OneParam>() as u64,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        };
        Presenter {
            accumulate: compute_pipeline(
                gpu,
                &accumulate_layout,
                "present/accumulate.wgsl",
                "main",
            ),
            compose: compute_pipeline(gpu, &compose_layout, "present/compose.wgsl", "main"),
            accumulate_layout,
            compose_layout,
            accumulate_params: params("accumulate params"),
            compose_params: params("compose params"),
            frames: None,
        }
    }

    /// Makes the textures for `size` unless they exist; true when new ones were
    /// made (whoever shows the picture must take the new view).
    pub fn resize(&mut self, gpu: &Gpu, size: [u32; 2]) -> bool {
        if self.frames.as_ref().is_some_and(|f| f.size == size) {
            return false;
        }
        let texture = |format, usage, label| gpu.texture_2d(size, format, usage, label);
        use wgpu::TextureUsages as U;
        let accumulation = || {
            texture(
                ACCUMULATION_FORMAT,
                U::STORAGE_BINDING | U::TEXTURE_BINDING,
                "accumulation",
            )
            .create_view(&Default::default())
        };
        let picture = texture(
            PICTURE_FORMAT,
            U::STORAGE_BINDING | U::TEXTURE_BINDING | U::COPY_SRC,
            "picture",
        );
        let picture_view = picture.create_view(&Default::default());
        let scratch = Target::new(gpu, size);
        let means = [
            [accumulation(), accumulation()],
            [accumulation(), accumulation()],
        ];
        let bind = |layout, params: &wgpu::Buffer, inputs: [&wgpu::TextureView; 2], output| {
            let view = |binding, view| wgpu::BindGroupEntry {
                binding,
                resource: wgpu::BindingResource::TextureView(view),
            };
            gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("present"),
                layout,
                entries: &[
                    view(0, inputs[0]),
                    view(1, inputs[1]),
                    view(2, output),
                    wgpu::BindGroupEntry {
                        binding: 3,
                        resource: params.as_entire_binding(),
                    },
                ],
            })
        };
        let accumulate = [0, 1].map(|eye| {
            [0, 1].map(|k| {
                bind(
                    &self.accumulate_layout,
                    &self.accumulate_params,
                    [&scratch.color_view, &means[eye][k]],
                    &means[eye][1 - k],
                )
            })
        });
        let compose = [0, 1].map(|k| {
            [0, 1].map(|right| {
                bind(
                    &self.compose_layout,
                    &self.compose_params,
                    [&means[0][k], &means[right][k]],
                    &picture_view,
                )
            })
        });
        self.frames = Some(Frames {
            size,
            scratch,
            picture,
            picture_view,
            accumulate,
            compose,
        });
        true
    }

    fn frames(&self) -> &Frames {
        self.frames.as_ref().expect("Presenter::resize first")
    }

    fn dispatch(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        pipeline: &wgpu::ComputePipeline,
        bind: &wgpu::BindGroup,
    ) {
        let [w, h] = self.frames().size;
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, bind, &[]);
        pass.dispatch_workgroups(w.div_ceil(8), h.div_ceil(8), 1);
    }

    /// Records folding the scratch rendering into eye `eye`'s mean, which
    /// holds `samples` renderings so far. (Writes the parameters now: submit
    /// before the next accumulate.)
    pub fn accumulate(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        eye: usize,
        samples: u32,
    ) {
        let p = OneParam {
            value: samples,
            _pad: [0; 3],
        };
        gpu.queue
            .write_buffer(&self.accumulate_params, 0, bytemuck::bytes_of(&p));
        let bind = &self.frames().accumulate[eye][samples as usize % 2];
        self.dispatch(encoder, &self.accumulate, bind);
    }

    /// Records the picture from the means of `samples` renderings per eye.
    pub fn compose(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        mode: Compose,
        samples: u32,
    ) {
        let p = OneParam {
            value: mode.code(),
            _pad: [0; 3],
        };
        gpu.queue
            .write_buffer(&self.compose_params, 0, bytemuck::bytes_of(&p));
        let stereo = usize::from(mode != Compose::Mono);
        let bind = &self.frames().compose[samples as usize % 2][stereo];
        self.dispatch(encoder, &self.compose, bind);
    }

    /// The picture's RGBA8 pixels, rows top to bottom.
    pub fn read_rgba(&self, gpu: &Gpu) -> Result<Vec<u8>, GpuError> {
        gpu.read_texture(&self.frames().picture, 4)
    }
}

fn to_linear(c: f32) -> f32 {
    if c <= 0.04045 {
        c / 12.92
    } else {
        ((c + 0.055) / 1.055).powf(2.4)
    }
}

fn to_srgb(c: f32) -> f32 {
    let x = c.clamp(0.0, 1.0);
    if x <= 0.0031308 {
        x * 12.92
    } else {
        1.055 * x.powf(1.0 / 2.4) - 0.055
    }
}

/// The Dubois matrices (SPEC §4), rows: out = L·left + R·right in linear RGB.
pub const DUBOIS_LEFT: [[f32; 3]; 3] = [
    [0.437, 0.449, 0.164],
    [-0.062, -0.062, -0.024],
    [-0.048, -0.050, -0.017],
];
pub const DUBOIS_RIGHT: [[f32; 3]; 3] = [
    [-0.011, -0.032, -0.007],
    [0.377, 0.761, 0.009],
    [-0.026, -0.093, 1.234],
];

/// What compose.wgsl makes of one left and one right sRGB-encoded pixel
/// (values 0–1): the CPU reference for tests and documentation.
pub fn compose_pixel(mode: Compose, left: [f32; 3], right: [f32; 3]) -> [f32; 3] {
    let l = left.map(to_linear);
    let r = right.map(to_linear);
    let out = match mode {
        Compose::Mono => l,
        Compose::Anaglyph(Anaglyph::RedCyan) => [l[0], r[1], r[2]],
        Compose::Anaglyph(Anaglyph::Dubois) => [0, 1, 2].map(|i| {
            (0..3)
                .map(|j| DUBOIS_LEFT[i][j] * l[j] + DUBOIS_RIGHT[i][j] * r[j])
                .sum()
        }),
    };
    out.map(to_srgb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_the_pixel_and_spreads_over_it() {
        let pts: Vec<Vec2> = (0..16).map(jitter).collect();
        assert!(pts.iter().all(|p| p.abs().max_element() <= 0.5));
        // Every quadrant of the pixel gets samples, and the mean is near the centre.
        for (sx, sy) in [(1.0, 1.0), (1.0, -1.0), (-1.0, 1.0), (-1.0, -1.0)] {
            let n = pts
                .iter()
                .filter(|p| p.x * sx > 0.0 && p.y * sy > 0.0)
                .count();
            assert!(n >= 2, "quadrant ({sx}, {sy}) has {n} samples");
        }
        let mean = pts.iter().copied().sum::<Vec2>() / 16.0;
        assert!(mean.length() < 0.06, "mean {mean}");
    }

    #[test]
    fn srgb_round_trip() {
        for i in 0..=255 {
            let c = i as f32 / 255.0;
            assert!((to_srgb(to_linear(c)) - c).abs() < 1e-5);
        }
    }
}
