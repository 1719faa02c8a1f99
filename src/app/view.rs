//! The 3D view: field volumes, derived scalar, isosurfaces and obstacles, drawn
//! off-screen into a texture that egui shows. Long-lived pipelines; per frame
//! only uploads (when a new field frame arrived) and re-extraction (when the
//! frame, plot type or isovalue changed).

use crate::render::colour::ColourMap;
use crate::render::derive::PlotType;
use crate::render::gpu::{Gpu, GpuError};
use crate::render::isosurface::Extractor;
use crate::render::passes::{DerivePass, MinMax};
use crate::render::scene::{Camera, MeshDraw, MeshRenderer, Shading, Target};
use crate::render::volume::Volume;
use crate::solver::Grid;

use super::worker::Frame;

/// What the user chose to see.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ViewSettings {
    pub plot: PlotType,
    /// Isovalue as a fraction of the current range, unless `iso` is set.
    pub iso_frac: f32,
    pub iso: Option<f32>,
    /// Colour the surface by a second field, with this map.
    pub colour_by: Option<PlotType>,
    pub colour_map: ColourMap,
}

impl Default for ViewSettings {
    fn default() -> Self {
        ViewSettings {
            plot: PlotType::Speed,
            iso_frac: 0.5,
            iso: None,
            colour_by: None,
            colour_map: ColourMap::Viridis,
        }
    }
}

struct Volumes {
    size: [u32; 3],
    fields: Volume,
    scalar: Volume,
    colour: Volume,
    solid: Volume,
}

pub struct View {
    derive: DerivePass,
    minmax: MinMax,
    surface: Extractor,
    obstacles: Extractor,
    renderer: MeshRenderer,
    volumes: Option<Volumes>,
    target: Option<Target>,
    pub texture: Option<egui::TextureId>,
    pub camera: Camera,
    geometry: u64,
    /// Range of the current scalar field (GPU min/max).
    pub range: (f32, f32),
    /// Range of the colouring field, when colouring.
    pub colour_range: Option<(f32, f32)>,
    pub isovalue: f32,
    pub triangles: u32,
    drawn: Option<(u64, ViewSettings)>,
    step: u64,
    /// Draw data of the obstacles and the surface.
    draws: [Option<MeshDraw>; 2],
    bounds: Option<crate::render::lines::BoxRenderer>,
}

impl View {
    pub fn new(gpu: &Gpu) -> View {
        View {
            derive: DerivePass::new(gpu),
            minmax: MinMax::new(gpu),
            surface: Extractor::new(gpu, 1 << 20),
            obstacles: Extractor::new(gpu, 1 << 18),
            renderer: MeshRenderer::new(gpu),
            volumes: None,
            target: None,
            texture: None,
            camera: Camera::framing([64, 64, 64]),
            geometry: 0,
            range: (0.0, 0.0),
            colour_range: None,
            isovalue: 0.0,
            triangles: 0,
            drawn: None,
            step: 0,
            draws: [None, None],
            bounds: None,
        }
    }

    /// Takes a new field frame: uploads it (and the obstacles when the geometry
    /// changed).
    pub fn upload(&mut self, gpu: &Gpu, frame: &Frame) -> Result<(), GpuError> {
        let size = frame.fields.size.map(|n| n as u32);
        if self.volumes.as_ref().map(|v| v.size) != Some(size) {
            self.volumes = Some(Volumes {
                size,
                fields: Volume::fields(gpu, size),
                scalar: Volume::scalar(gpu, size),
                colour: Volume::scalar(gpu, size),
                solid: Volume::scalar(gpu, size),
            });
            self.camera = Camera::framing(size);
            self.bounds = Some(crate::render::lines::BoxRenderer::new(gpu, size));
            self.geometry = 0;
        }
        let v = self.volumes.as_ref().expect("just made");
        v.fields.write_fields(gpu, &frame.fields);
        if self.geometry != frame.geometry {
            v.solid.write_solid(gpu, &frame.flags);
            self.obstacles.extract(gpu, &v.solid, 0.5)?;
            let grid = Grid {
                size: frame.fields.size,
                periodic: [0, 1, 2].map(|a| {
                    !frame.flags.is_empty() && periodic_axis(&frame.flags, frame.fields.size, a)
                }),
            };
            self.surface.clip_to_interior(&grid);
            self.geometry = frame.geometry;
        }
        self.step = frame.step;
        self.drawn = None;
        Ok(())
    }

    /// Re-derives and re-extracts if needed, then draws into the texture of
    /// `size` pixels. Returns the egui texture to show.
    pub fn draw(
        &mut self,
        gpu: &Gpu,
        egui: &mut egui_wgpu::Renderer,
        settings: ViewSettings,
        size: [u32; 2],
    ) -> Result<Option<egui::TextureId>, GpuError> {
        let Some(v) = self.volumes.as_ref() else {
            return Ok(None);
        };
        if self.drawn.map(|d| d.1) != Some(settings) || self.drawn.is_none() {
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            self.derive
                .run(gpu, &mut encoder, &v.fields, &v.scalar, settings.plot);
            gpu.queue.submit([encoder.finish()]);
            self.range = self.minmax.compute(gpu, &v.scalar)?;
            self.isovalue = settings
                .iso
                .unwrap_or(self.range.0 + settings.iso_frac * (self.range.1 - self.range.0));
            self.colour_range = match settings.colour_by {
                Some(plot) if settings.colour_map != ColourMap::Plain => {
                    let mut encoder = gpu.device.create_command_encoder(&Default::default());
                    self.derive
                        .run(gpu, &mut encoder, &v.fields, &v.colour, plot);
                    gpu.queue.submit([encoder.finish()]);
                    Some(self.minmax.compute(gpu, &v.colour)?)
                }
                _ => None,
            };
            let colour = if self.colour_range.is_some() {
                &v.colour
            } else {
                &v.scalar
            };
            self.triangles =
                self.surface
                    .extract_coloured(gpu, &v.scalar, colour, self.isovalue)?
                    / 3;
            self.drawn = Some((self.step, settings));
        }
        let size = [size[0].clamp(16, 8192), size[1].clamp(16, 8192)];
        if self.target.as_ref().map(|t| t.size) != Some(size) {
            let target = Target::new(gpu, size);
            match self.texture {
                Some(id) => egui.update_egui_texture_from_wgpu_texture(
                    &gpu.device,
                    &target.color_view,
                    wgpu::FilterMode::Linear,
                    id,
                ),
                None => {
                    self.texture = Some(egui.register_native_texture(
                        &gpu.device,
                        &target.color_view,
                        wgpu::FilterMode::Linear,
                    ))
                }
            }
            self.target = Some(target);
        }
        let target = self.target.as_ref().expect("made above");
        let aspect = target.aspect();
        self.renderer.prepare(
            gpu,
            &mut self.draws[0],
            &self.obstacles,
            &self.camera,
            aspect,
            Shading::plain([0.6, 0.62, 0.68]),
        );
        self.renderer.prepare(
            gpu,
            &mut self.draws[1],
            &self.surface,
            &self.camera,
            aspect,
            Shading {
                colour: [0.95, 0.55, 0.2],
                map: self
                    .colour_range
                    .map(|(lo, hi)| (settings.colour_map, lo, hi)),
            },
        );
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        {
            let mut pass = target.begin(&mut encoder, [0.12, 0.13, 0.15]);
            if let Some(b) = &self.bounds {
                b.draw(gpu, &mut pass, &self.camera, aspect);
            }
            for (draw, extractor) in self.draws.iter().zip([&self.obstacles, &self.surface]) {
                if let Some(d) = draw {
                    self.renderer.draw(&mut pass, d, extractor);
                }
            }
        }
        gpu.queue.submit([encoder.finish()]);
        Ok(self.texture)
    }
}

impl View {
    /// Saves the last drawn 3D view as a PNG.
    pub fn screenshot(&self, gpu: &Gpu, path: &std::path::Path) -> Result<(), String> {
        let target = self.target.as_ref().ok_or("nothing drawn yet")?;
        let pixels = target.read_rgba(gpu).map_err(|e| e.to_string())?;
        crate::render::scene::save_png(path, target.size, &pixels)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// Whether an axis wraps, from the flags: no boundary cells on its faces.
fn periodic_axis(flags: &[u8], size: [usize; 3], axis: usize) -> bool {
    use crate::solver::flags::{self as f, CellType};
    let [nx, ny, nz] = size;
    let at = |x: usize, y: usize, z: usize| flags[x + nx * (y + ny * z)];
    let n = size[axis];
    let (b, c) = match axis {
        0 => (ny, nz),
        1 => (nx, nz),
        _ => (nx, ny),
    };
    for i in 0..b {
        for j in 0..c {
            let p = |k: usize| match axis {
                0 => at(k, i, j),
                1 => at(i, k, j),
                _ => at(i, j, k),
            };
            for k in [0, n - 1] {
                let fl = p(k);
                if CellType::of(fl) != CellType::Fluid
                    && !(CellType::of(fl) == CellType::Wall && f::tag(fl) > 0)
                {
                    return false;
                }
            }
        }
    }
    true
}
