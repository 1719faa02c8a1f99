//! The 3D view, without a window: field volumes, the derived scalar, the
//! isosurface (mesh or sphere impostors), obstacles, streamlines and the
//! bounding box, rendered mono or as an anaglyph with accumulation
//! antialiasing into a picture texture. The window shows that texture; the
//! `render` command and screenshots read it back. Long-lived pipelines; per
//! frame only uploads (when a new field frame arrived), re-extraction (when
//! it or a setting it depends on changed) and one more sample.

use glam::Vec2;

use super::colour::ColourMap;
use super::derive::PlotType;
use super::gpu::{Gpu, GpuError};
use super::gpu_data::Vertex;
use super::isosurface::{Extractor, Iso};
use super::lines::{box_lines, Lines};
use super::passes::{DerivePass, MinMax, Reduction, UnpackPass};
use super::present::{jitter, Compose, Presenter};
use super::raymarch::{RayMarchPass, VolumeSettings};
use super::readback::Readbacks;
use super::scene::{Camera, Draw, DrawPipeline, Shading, Side, Stereo};
use super::slices::{SlicePass, SlicePositions};
use super::streamlines::{LineStyle, Rake, StreamlineSettings, Tracer, STAGNATION};
use std::sync::Arc;

use super::interop::SharedImports;
use super::volume::{FieldStaging, Volume};
use crate::scenario::mesh::ObstacleMeshes;
use crate::solver::display::SharedLease;
use crate::solver::{Fields, Grid};

/// How the isosurface is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SurfaceMode {
    /// Triangles by marching tetrahedra.
    #[default]
    Mesh,
    /// One sphere impostor per cell the surface passes through (fast).
    Spheres,
    /// No isosurface (streamlines and obstacles only).
    None,
}

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
    pub mode: SurfaceMode,
    /// Sphere impostor radius in cells.
    pub sphere_radius: f32,
    pub streamlines: Option<StreamlineSettings>,
    pub stereo: Option<Stereo>,
    /// Mid-grey background (less ghosting through anaglyph glasses).
    pub grey_background: bool,
    /// Renderings averaged per picture (1: no antialiasing).
    pub aa_samples: u32,
    /// Axis-aligned slices, as fractions of the domain along x, y and z.
    pub slices: SlicePositions,
    /// The field each slice (x, y, z) shows; none: the surface's colouring
    /// (the plotted field when the surface is plain).
    pub slice_colour_by: [Option<PlotType>; 3],
    /// Each slice's colour range; none: the field's extremes on it.
    pub slice_range: [Option<(f32, f32)>; 3],
    /// Contour lines on the slices at this many levels of the colour range.
    pub contours: u32,
    /// In-plane velocity arrows on the slices every this many cells (0: none).
    pub arrows: u32,
    /// Volume rendering of a field.
    pub volume: Option<VolumeSettings>,
}

impl Default for ViewSettings {
    fn default() -> Self {
        ViewSettings {
            plot: PlotType::Speed,
            iso_frac: 0.5,
            iso: None,
            colour_by: Some(PlotType::Speed.default_colour()),
            colour_map: ColourMap::Viridis,
            mode: SurfaceMode::Mesh,
            sphere_radius: 0.6,
            streamlines: None,
            stereo: None,
            grey_background: false,
            aa_samples: 16,
            slices: [None; 3],
            slice_colour_by: [None; 3],
            slice_range: [None; 3],
            contours: 0,
            arrows: 0,
            volume: None,
        }
    }
}

impl ViewSettings {
    /// The settings that decide the geometry (not how it is looked at).
    fn geometry(&self) -> ViewSettings {
        ViewSettings {
            sphere_radius: 0.0,
            stereo: None,
            grey_background: false,
            aa_samples: 0,
            // Slices and the volume rendering have their own fields and
            // ranges (`Viewer::update_slices`, `Viewer::update_volume`).
            slices: [None; 3],
            slice_colour_by: [None; 3],
            slice_range: [None; 3],
            contours: 0,
            arrows: 0,
            volume: None,
            streamlines: self.streamlines.map(|s| StreamlineSettings {
                radius: 0.0,
                style: LineStyle::Tubes,
                ..s
            }),
            ..*self
        }
    }
}

/// What the view has computed, for display.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ViewerInfo {
    /// Range of the plotted scalar (GPU min/max).
    pub range: (f32, f32),
    /// Range of the field colouring the surface, when one does.
    pub colour_range: Option<(f32, f32)>,
    /// The field `colour_range` is of: the colouring of the picture shown,
    /// which lags a change of the settings by a frame.
    pub colour_by: Option<PlotType>,
    pub isovalue: f32,
    pub triangles: u32,
    pub spheres: u32,
    /// Streamlines traced, and the speed range that colours them.
    pub streamlines: u32,
    pub speed_range: (f32, f32),
    /// Renderings in the current picture.
    pub samples: u32,
    /// Each slice's field and colour range, where one is shown, and the
    /// largest speed on them (the arrows' scale).
    pub slice_colour: [Option<(PlotType, (f32, f32))>; 3],
    pub slice_speed: f32,
    /// The volume rendering's field and colour range, when it is on.
    pub volume_colour: Option<(PlotType, (f32, f32))>,
}

struct Volumes {
    size: [u32; 3],
    fields: Volume,
    scalar: Volume,
    colour: Volume,
    speed: Volume,
    /// Obstacles (drawn as their own surface).
    solid: Volume,
    /// Every solid cell (where streamlines stop).
    blocked: Volume,
    /// Each slice's field (x, y, z: the layers it samples), and the volume
    /// rendering's.
    slices: [Volume; 3],
    density: Volume,
    /// The first contaminant field, and whether a frame brought one.
    concentration: Volume,
    has_concentration: bool,
}

impl Volumes {
    /// What the derive pass reads.
    fn inputs(&self) -> (&Volume, &Volume) {
        (&self.fields, &self.concentration)
    }
}

#[derive(Default)]
struct Draws {
    obstacles: Option<Draw>,
    surface: Option<Draw>,
    spheres: Option<Draw>,
    tubes: Option<Draw>,
    chain: Option<Draw>,
}

pub struct Viewer {
    derive: DerivePass,
    minmax: MinMax,
    surface: Extractor,
    spheres: Extractor,
    obstacles: Extractor,
    slices: SlicePass,
    raymarch: RayMarchPass,
    tracer: Tracer,
    mesh: DrawPipeline,
    impostors: DrawPipeline,
    tubes: DrawPipeline,
    lines: Lines,
    presenter: Presenter,
    volumes: Option<Volumes>,
    /// Interleaving space for field uploads, kept between frames.
    staging: FieldStaging,
    /// Frames the solver shares from GPU memory, imported.
    imports: SharedImports,
    unpack: UnpackPass,
    /// Frames that came by a copy within the GPU rather than from the host.
    pub shared_uploads: u64,
    draws: Draws,
    pub camera: Camera,
    pub info: ViewerInfo,
    /// Counts uploads: a new field frame means new geometry.
    frame: u64,
    geometry: u64,
    preset: Rake,
    computed: Option<(u64, ViewSettings)>,
    /// What the slices' and the volume's fields and ranges were computed for.
    slices_computed: Option<SliceKey>,
    volume_computed: Option<VolumeKey>,
    accumulating: Option<(u64, ViewSettings, Camera, [u32; 2])>,
    /// Counts pictures replaced by a resize (the window re-registers its
    /// texture when this changes).
    pub picture_generation: u64,
    /// When set, the scene pass and the volume rendering write their GPU
    /// times there (benchmarks).
    pub scene_timer: Option<super::gpu::GpuTimer>,
    pub volume_timer: Option<super::gpu::GpuTimer>,
    /// What the updates recorded for this frame's first submission: one
    /// submission per frame, since each hands the GPU from the solver to the
    /// window and back while frames stream.
    work: Option<wgpu::CommandEncoder>,
    /// Ranges and counts coming back, with the frame and settings they are of.
    readbacks: Readbacks<(u64, ViewSettings)>,
    /// The slices' and the volume's ranges coming back (for the legends).
    slice_readbacks: Readbacks<SliceKey>,
    volume_readbacks: Readbacks<VolumeKey>,
    /// Uniforms of the reductions recorded beside others: each slice's field
    /// (x, y, z), their speed, the volume's field.
    reductions: [Reduction; 5],
    /// Mesh obstacles, drawn from their triangles, and the stride of the
    /// display grid they are placed in.
    meshes: (Arc<ObstacleMeshes>, usize),
}

/// Frame, and each slice's field, the positions, each fixed range, arrow
/// spacing and colour map (a diverging one centres ranges on zero).
type SliceKey = (
    u64,
    (
        [PlotType; 3],
        SlicePositions,
        [Option<(f32, f32)>; 3],
        u32,
        ColourMap,
    ),
);
/// Frame, and field, fixed range and colour map of the volume rendering.
type VolumeKey = (u64, (PlotType, Option<(f32, f32)>, ColourMap));

const OBSTACLE_COLOUR: [f32; 3] = [0.6, 0.62, 0.68];
const ARROW_COLOUR: [f32; 3] = [0.02, 0.02, 0.03];
const SURFACE_COLOUR: [f32; 3] = [0.95, 0.55, 0.2];
const BACKGROUND: [f64; 3] = [0.12, 0.13, 0.15];
const GREY: [f64; 3] = [0.5, 0.5, 0.5];

impl Viewer {
    pub fn new(gpu: &Gpu) -> Viewer {
        Viewer {
            derive: DerivePass::new(gpu),
            minmax: MinMax::new(gpu),
            surface: Extractor::new(gpu, 1 << 20),
            spheres: Extractor::spheres(gpu, 1 << 18),
            obstacles: Extractor::new(gpu, 1 << 18),
            slices: SlicePass::new(gpu),
            raymarch: RayMarchPass::new(gpu),
            tracer: Tracer::new(gpu),
            mesh: DrawPipeline::mesh(gpu),
            impostors: DrawPipeline::spheres(gpu),
            tubes: DrawPipeline::tubes(gpu),
            lines: Lines::new(gpu),
            presenter: Presenter::new(gpu),
            volumes: None,
            staging: FieldStaging::default(),
            imports: SharedImports::default(),
            unpack: UnpackPass::new(gpu),
            shared_uploads: 0,
            draws: Draws::default(),
            camera: Camera::framing([64, 64, 64]),
            info: ViewerInfo::default(),
            frame: 0,
            geometry: u64::MAX,
            preset: Rake::Preset,
            computed: None,
            slices_computed: None,
            volume_computed: None,
            accumulating: None,
            picture_generation: 0,
            scene_timer: None,
            volume_timer: None,
            work: None,
            readbacks: Readbacks::default(),
            slice_readbacks: Readbacks::default(),
            volume_readbacks: Readbacks::default(),
            reductions: std::array::from_fn(|_| MinMax::reduction(gpu)),
            meshes: (Arc::default(), 1),
        }
    }

    /// The display grid's size, once a frame came.
    pub fn grid_size(&self) -> Option<[u32; 3]> {
        self.volumes.as_ref().map(|v| v.size)
    }

    /// Triangles of mesh obstacles drawn.
    pub fn mesh_triangles(&self) -> usize {
        self.meshes.0.triangles.len()
    }

    /// The triangles the obstacles are drawn with (tests).
    pub fn obstacle_vertices(&self, gpu: &Gpu) -> Result<Vec<Vertex>, GpuError> {
        let args = gpu.read_buffer(&self.obstacles.draw_args, 16)?;
        let count = bytemuck::cast_slice::<u8, u32>(&args)[0];
        self.obstacles.read_vertices(gpu, count)
    }

    /// The mesh obstacles of the frames that follow, in cells of a solver
    /// grid `stride` times the display grid's: drawn from their triangles
    /// instead of from their voxels. New meshes are new geometry.
    pub fn set_meshes(&mut self, meshes: &Arc<ObstacleMeshes>, stride: usize) {
        if !Arc::ptr_eq(&self.meshes.0, meshes) || self.meshes.1 != stride {
            self.meshes = (meshes.clone(), stride.max(1));
            self.geometry = u64::MAX;
        }
    }

    /// Takes a field frame (and the cell flags, which change with `geometry`;
    /// empty flags: no solids), from `shared` GPU memory where it can. A new
    /// grid size reframes the camera.
    pub fn upload(
        &mut self,
        gpu: &Gpu,
        fields: &Fields,
        cell_flags: &[u8],
        geometry: u64,
        shared: Option<&Arc<SharedLease>>,
    ) -> Result<(), GpuError> {
        let size = fields.size.map(|n| n as u32);
        if self.volumes.as_ref().map(|v| v.size) != Some(size) {
            self.volumes = Some(Volumes {
                size,
                fields: Volume::fields(gpu, size),
                scalar: Volume::scalar(gpu, size),
                colour: Volume::scalar(gpu, size),
                speed: Volume::scalar(gpu, size),
                solid: Volume::scalar(gpu, size),
                blocked: Volume::scalar(gpu, size),
                slices: std::array::from_fn(|_| Volume::scalar(gpu, size)),
                density: Volume::scalar(gpu, size),
                concentration: Volume::scalar(gpu, size),
                has_concentration: false,
            });
            self.camera = Camera::framing(size);
            self.geometry = u64::MAX;
        }
        let v = self.volumes.as_mut().expect("just made");
        match fields.concentration.first() {
            Some(c) if c.len() == fields.size.iter().product::<usize>() => {
                v.concentration.write_scalar(gpu, c);
                v.has_concentration = true;
            }
            // A run without contaminants after one with: zeros again.
            _ if v.has_concentration => {
                v.concentration
                    .write_scalar(gpu, &vec![0.0; fields.size.iter().product()]);
                v.has_concentration = false;
            }
            _ => {}
        }
        let v = self.volumes.as_ref().expect("just made");
        let imported = shared.filter(|s| s.size == fields.size).and_then(|s| {
            let first = self.imports.refused.is_none();
            match self.imports.buffer(gpu, s) {
                Ok(b) => Some((b, s.clone())),
                Err(e) => {
                    if first {
                        eprintln!("display frames go through host memory: {e}");
                    }
                    None
                }
            }
        });
        match imported {
            Some((buffer, lease)) => {
                self.unpack.copy_shared(gpu, &buffer, lease, &v.fields);
                self.shared_uploads += 1;
            }
            None if fields.has_values() => {
                v.fields
                    .write_fields_through(gpu, fields, &mut self.staging)?
            }
            // A shared frame this device cannot import (the caller tells the
            // solver, see `sharing_refused`): the last frame stays.
            None => return Ok(()),
        }
        if self.geometry != geometry {
            let none;
            let cell_flags = if cell_flags.is_empty() {
                none = vec![0u8; fields.size.iter().product()];
                &none
            } else {
                cell_flags
            };
            let (meshes, stride) = &self.meshes;
            v.solid.write_solid(gpu, cell_flags, &meshes.tags);
            v.blocked.write_blocked(gpu, cell_flags);
            let count = self.obstacles.extract(gpu, &v.solid, 0.5)?;
            let triangles = mesh_vertices(meshes, *stride);
            self.obstacles
                .append(gpu, count, &triangles, |o| o.extract(gpu, &v.solid, 0.5))?;
            let grid = Grid {
                size: fields.size,
                periodic: [0, 1, 2].map(|a| periodic_axis(cell_flags, fields.size, a)),
            };
            self.surface.clip_to_interior(&grid);
            self.spheres.clip_to_interior(&grid);
            self.preset = Rake::preset(cell_flags, fields.size);
            self.geometry = geometry;
        }
        self.frame += 1;
        Ok(())
    }

    /// Takes the field already uploaded as a new frame: everything shown is
    /// derived from it again (benchmarks: what a streamed frame costs).
    pub fn new_frame(&mut self) {
        self.frame += 1;
    }

    /// Whether shared display frames cannot be imported here: the solver
    /// should send host copies of every frame instead.
    pub fn sharing_refused(&self) -> bool {
        self.imports.refused.is_some()
    }

    /// The rake `settings` trace from (the preset resolved).
    pub fn rake(&self, settings: &StreamlineSettings) -> Rake {
        match settings.rake {
            Rake::Preset => self.preset,
            r => r,
        }
    }

    fn derive_range(
        &self,
        gpu: &Gpu,
        plot: PlotType,
        out: &Volume,
    ) -> Result<(f32, f32), GpuError> {
        let v = self.volumes.as_ref().expect("uploaded");
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        self.derive.run(gpu, &mut encoder, v.inputs(), out, plot);
        gpu.queue.submit([encoder.finish()]);
        self.minmax.compute(gpu, out, plot.range_floor())
    }

    /// Recomputes what `settings` show if the frame or they changed: the
    /// scalar and its range, the isosurface, the streamlines, the slices and
    /// the volume.
    pub fn update(&mut self, gpu: &Gpu, settings: &ViewSettings) -> Result<(), GpuError> {
        self.record_update(gpu, settings)?;
        self.submit(gpu, None);
        Ok(())
    }

    /// This frame's work so far, to record more into.
    fn take_work(&mut self, gpu: &Gpu) -> wgpu::CommandEncoder {
        self.work
            .take()
            .unwrap_or_else(|| gpu.device.create_command_encoder(&Default::default()))
    }

    /// Submits the work recorded so far and then `last`, in one submission,
    /// and asks for the read-backs it fills.
    fn submit(&mut self, gpu: &Gpu, last: Option<wgpu::CommandEncoder>) {
        let encoders: Vec<_> = self.work.take().into_iter().chain(last).collect();
        if encoders.is_empty() {
            return;
        }
        gpu.queue.submit(encoders.into_iter().map(|e| e.finish()));
        self.readbacks.map_submitted();
        self.slice_readbacks.map_submitted();
        self.volume_readbacks.map_submitted();
    }

    /// [`Viewer::update`] without submitting what it records on the GPU.
    fn record_update(&mut self, gpu: &Gpu, settings: &ViewSettings) -> Result<(), GpuError> {
        self.collect(gpu, false)?;
        if self.volumes.is_none() {
            return Ok(());
        }
        let key = (self.frame, settings.geometry());
        if self.computed != Some(key) {
            // Colour maps and streamlines need their ranges on the host
            // before they are drawn; the plain surface needs nothing back.
            let colouring = settings.colour_by.is_some() && settings.colour_map != ColourMap::Plain;
            if colouring || settings.streamlines.is_some() {
                self.update_with_ranges(gpu, settings)?;
            } else {
                self.update_on_gpu(gpu, settings);
            }
            self.computed = Some(key);
        }
        self.update_slices(gpu, settings);
        self.update_volume(gpu, settings);
        Ok(())
    }

    /// The field each slice shows and its range over it (or the fixed one),
    /// and the largest speed on them for the arrows; again only when the
    /// frame or these settings changed. The ranges stay on the GPU for the
    /// slices and come back for the legends without waiting.
    fn update_slices(&mut self, gpu: &Gpu, settings: &ViewSettings) {
        if settings.slices.iter().all(Option::is_none) {
            self.info.slice_colour = [None; 3];
            self.slices_computed = None;
            return;
        }
        let default = match settings.colour_map {
            ColourMap::Plain => settings.plot,
            _ => settings.colour_by.unwrap_or(settings.plot),
        };
        let fields = settings.slice_colour_by.map(|f| f.unwrap_or(default));
        let view = (
            fields,
            settings.slices,
            settings.slice_range,
            settings.arrows,
            settings.colour_map,
        );
        let key = (self.frame, view);
        if self.slices_computed == Some(key) {
            return;
        }
        // Another view: no legend until its ranges come back.
        if self.slices_computed.is_none_or(|(_, v)| v != view) {
            self.info.slice_colour = [None; 3];
        }
        let mut encoder = self.take_work(gpu);
        let v = self.volumes.as_ref().expect("uploaded");
        let at = SlicePass::extra(&settings.slices, v.size, 0);
        let planes: Vec<(usize, f32)> = (0..3)
            .filter(|&a| settings.slices[a].is_some())
            .map(|a| (a, at[a]))
            .collect();
        // Only the two layers around a plane, which its slice samples.
        let layers =
            |encoder: &mut wgpu::CommandEncoder, out: &Volume, plot, (axis, at): (usize, f32)| {
                let mut origin = [0; 3];
                let mut extent = v.size;
                origin[axis] = (at.max(0.0).floor() as u32).min(v.size[axis] - 1);
                extent[axis] = 2;
                self.derive
                    .run_box(gpu, encoder, v.inputs(), out, plot, origin, extent);
            };
        let ranges = &self.slices.ranges;
        let diverging = slice_map(settings.colour_map).diverging();
        for &(axis, at) in &planes {
            let field = fields[axis];
            layers(&mut encoder, &v.slices[axis], field, (axis, at));
            let slot = SlicePass::COLOUR + axis as u32;
            match settings.slice_range[axis] {
                Some((lo, hi)) => {
                    gpu.queue
                        .write_buffer(ranges, 8 * slot as u64, bytemuck::cast_slice(&[lo, hi]))
                }
                None => self.minmax.run_to(
                    gpu,
                    &mut encoder,
                    &self.reductions[axis],
                    &v.slices[axis],
                    field.range_floor(),
                    &[(axis, at)],
                    (ranges, slot),
                    diverging,
                ),
            }
        }
        if settings.arrows > 0 {
            for &plane in &planes {
                layers(&mut encoder, &v.speed, PlotType::Speed, plane);
            }
            self.minmax.run_to(
                gpu,
                &mut encoder,
                &self.reductions[3],
                &v.speed,
                f32::MIN,
                &planes,
                (ranges, SlicePass::SPEED),
                false,
            );
        } else {
            encoder.clear_buffer(ranges, 8 * SlicePass::SPEED as u64, Some(8));
        }
        let readback = self.slice_readbacks.start(
            gpu,
            &mut encoder,
            [0, 1, 2, SlicePass::SPEED].map(|slot| Some((ranges, 8 * slot as u64))),
        );
        self.work = Some(encoder);
        self.slice_readbacks.pending.push((readback, key));
        self.slices_computed = Some(key);
    }

    /// The volume rendering's field and its range (or the fixed one), again
    /// only when the frame or these settings changed; the range stays on the
    /// GPU and comes back for the legend without waiting.
    fn update_volume(&mut self, gpu: &Gpu, settings: &ViewSettings) {
        let Some(vs) = &settings.volume else {
            self.info.volume_colour = None;
            self.volume_computed = None;
            return;
        };
        let view = (vs.field, vs.range, vs.map);
        let key = (self.frame, view);
        if self.volume_computed == Some(key) {
            return;
        }
        if self.volume_computed.is_none_or(|(_, v)| v != view) {
            self.info.volume_colour = None;
        }
        let mut encoder = self.take_work(gpu);
        let v = self.volumes.as_ref().expect("uploaded");
        self.derive
            .run(gpu, &mut encoder, v.inputs(), &v.density, vs.field);
        let range = &self.raymarch.range;
        match vs.range {
            Some((lo, hi)) => gpu
                .queue
                .write_buffer(range, 0, bytemuck::cast_slice(&[lo, hi])),
            None => self.minmax.run_to(
                gpu,
                &mut encoder,
                &self.reductions[4],
                &v.density,
                vs.field.range_floor(),
                &[],
                (range, 0),
                vs.map.diverging(),
            ),
        }
        let readback =
            self.volume_readbacks
                .start(gpu, &mut encoder, [Some((range, 0)), None, None, None]);
        self.raymarch.set_field(gpu, &mut encoder, &v.density);
        self.work = Some(encoder);
        self.volume_readbacks.pending.push((readback, key));
        self.volume_computed = Some(key);
    }

    /// The plain surface in one submission: derive, min/max, and extraction
    /// at an isovalue the GPU works out from that range. The range and the
    /// element count come back without waiting ([`Viewer::collect`]): while
    /// the solver streams, every read-back would hand the GPU to the solver
    /// and back once more per frame.
    fn update_on_gpu(&mut self, gpu: &Gpu, settings: &ViewSettings) {
        let mut encoder = self.take_work(gpu);
        let v = self.volumes.as_ref().expect("uploaded");
        self.derive
            .run(gpu, &mut encoder, v.inputs(), &v.scalar, settings.plot);
        self.minmax
            .run(gpu, &mut encoder, &v.scalar, settings.plot.range_floor());
        let iso = match settings.iso {
            Some(value) => Iso::Value(value),
            None => Iso::Fraction(settings.iso_frac, &self.minmax.result),
        };
        let extractor = match settings.mode {
            SurfaceMode::Mesh => Some(&self.surface),
            SurfaceMode::Spheres => Some(&self.spheres),
            SurfaceMode::None => None,
        };
        if let Some(e) = extractor {
            e.run(gpu, &mut encoder, &v.scalar, &v.scalar, iso);
        }
        self.lines.set(gpu, &box_lines(v.size));
        let readback = self.readbacks.start(
            gpu,
            &mut encoder,
            [
                Some((&self.minmax.result, 0)),
                extractor.map(|e| (&e.counter, 0)),
                None,
                None,
            ],
        );
        self.work = Some(encoder);
        self.readbacks
            .pending
            .push((readback, (self.frame, settings.geometry())));
        self.info = ViewerInfo {
            colour_range: None,
            colour_by: None,
            streamlines: 0,
            speed_range: (0.0, 0.0),
            ..self.info
        };
        if settings.mode != SurfaceMode::Mesh {
            self.info.triangles = 0;
        }
        if settings.mode != SurfaceMode::Spheres {
            self.info.spheres = 0;
        }
    }

    /// Takes the ranges and counts that came back (all of them, waiting for
    /// the GPU, when `wait`): the newest into [`Viewer::info`]. An overflowed
    /// surface grows its buffer and is extracted again at the next update.
    fn collect(&mut self, gpu: &Gpu, wait: bool) -> Result<(), GpuError> {
        if self.readbacks.pending.is_empty()
            && self.slice_readbacks.pending.is_empty()
            && self.volume_readbacks.pending.is_empty()
        {
            return Ok(());
        }
        let poll = if wait {
            wgpu::PollType::wait_indefinitely()
        } else {
            wgpu::PollType::Poll
        };
        gpu.device
            .poll(poll)
            .map_err(|e| GpuError::Device(format!("waiting for the GPU: {e}")))?;
        // The newest range of what the slices and the volume show now (of
        // this frame or one a little older: a legend needs no more).
        for (values, (_, view)) in self.slice_readbacks.take_ready()? {
            if self.slices_computed.is_some_and(|(_, v)| v == view) {
                let (fields, positions) = (view.0, view.1);
                self.info.slice_colour = std::array::from_fn(|a| {
                    positions[a].map(|_| (fields[a], values.ranges[SlicePass::COLOUR as usize + a]))
                });
                self.info.slice_speed = values.ranges[SlicePass::SPEED as usize].1;
            }
        }
        for (values, (_, view)) in self.volume_readbacks.take_ready()? {
            if self.volume_computed.is_some_and(|(_, v)| v == view) {
                self.info.volume_colour = Some((view.0, values.range));
            }
        }
        for (values, key) in self.readbacks.take_ready()? {
            let settings = key.1;
            if values.overflow {
                let extractor = match settings.mode {
                    SurfaceMode::Spheres => &mut self.spheres,
                    _ => &mut self.surface,
                };
                extractor.grow(gpu, values.count)?;
                self.computed = None;
                self.accumulating = None;
                continue;
            }
            if self.computed != Some(key) {
                continue;
            }
            let (lo, hi) = values.range;
            self.info.range = values.range;
            self.info.isovalue = settings.iso.unwrap_or(lo + settings.iso_frac * (hi - lo));
            match settings.mode {
                SurfaceMode::Mesh => self.info.triangles = values.count / 3,
                SurfaceMode::Spheres => self.info.spheres = values.count,
                SurfaceMode::None => {}
            }
        }
        Ok(())
    }

    /// Waits for what is still coming back from the GPU: afterwards
    /// [`Viewer::info`] describes the picture. Returns false when the surface
    /// overflowed its buffer and must be extracted and drawn again.
    pub fn settle(&mut self, gpu: &Gpu) -> Result<bool, GpuError> {
        self.collect(gpu, true)?;
        Ok(self.computed.is_some())
    }

    /// Computes the scalar and the other fields' ranges with read-backs in
    /// between, for what needs them on the host (colour maps, streamlines).
    fn update_with_ranges(&mut self, gpu: &Gpu, settings: &ViewSettings) -> Result<(), GpuError> {
        let v = self.volumes.as_ref().expect("uploaded");
        let range = self.derive_range(gpu, settings.plot, &v.scalar)?;
        let isovalue = settings
            .iso
            .unwrap_or(range.0 + settings.iso_frac * (range.1 - range.0));
        let colour_range = match settings.colour_by {
            Some(plot) if settings.colour_map != ColourMap::Plain => Some(
                settings
                    .colour_map
                    .range(self.derive_range(gpu, plot, &v.colour)?),
            ),
            _ => None,
        };
        let colour = if colour_range.is_some() {
            &v.colour
        } else {
            &v.scalar
        };
        let (mut triangles, mut spheres) = (0, 0);
        match settings.mode {
            SurfaceMode::Mesh => {
                triangles = self
                    .surface
                    .extract_coloured(gpu, &v.scalar, colour, isovalue)?
                    / 3
            }
            SurfaceMode::Spheres => {
                spheres = self
                    .spheres
                    .extract_coloured(gpu, &v.scalar, colour, isovalue)?
            }
            SurfaceMode::None => {}
        }
        let mut outline = box_lines(v.size);
        let (mut lines, mut speed_range) = (0, (0.0, 0.0));
        if let Some(s) = &settings.streamlines {
            speed_range = match settings.plot {
                PlotType::Speed => range,
                _ => self.derive_range(gpu, PlotType::Speed, &v.speed)?,
            };
            let rake = self.rake(s);
            outline.extend(rake.outline());
            let seeds = if speed_range.1 > 0.0 {
                rake.seeds()
            } else {
                Vec::new()
            };
            self.tracer.set_seeds(gpu, &seeds, s.steps)?;
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            self.tracer.trace(
                gpu,
                &mut encoder,
                &v.fields,
                &v.blocked,
                s.step_cells / speed_range.1.max(f32::MIN_POSITIVE),
                STAGNATION * speed_range.1,
            );
            gpu.queue.submit([encoder.finish()]);
            lines = self.tracer.lines;
        }
        self.lines.set(gpu, &outline);
        self.info = ViewerInfo {
            range,
            colour_range,
            colour_by: colour_range.and(settings.colour_by),
            isovalue,
            triangles,
            spheres,
            streamlines: lines,
            speed_range,
            ..self.info
        };
        Ok(())
    }

    /// Brings the picture one rendering (per eye) closer to `settings`'
    /// sample count at `size` pixels, starting over when anything changed.
    /// Returns whether more renderings are wanted.
    pub fn render(
        &mut self,
        gpu: &Gpu,
        settings: &ViewSettings,
        size: [u32; 2],
    ) -> Result<bool, GpuError> {
        if self.volumes.is_none() {
            return Ok(false);
        }
        // Submitted with the first eye's drawing.
        self.record_update(gpu, settings)?;
        let size = size.map(|n| n.clamp(16, 8192));
        if self.presenter.resize(gpu, size) {
            self.picture_generation += 1;
            self.accumulating = None;
        }
        let key = (self.frame, *settings, self.camera, size);
        if self.accumulating != Some(key) {
            self.accumulating = Some(key);
            self.info.samples = 0;
        }
        let wanted = settings.aa_samples.max(1);
        let k = self.info.samples;
        if k >= wanted {
            self.submit(gpu, None);
            return Ok(false);
        }
        let offset = if wanted > 1 { jitter(k) } else { Vec2::ZERO };
        let ndc = Vec2::new(
            2.0 * offset.x / size[0] as f32,
            2.0 * offset.y / size[1] as f32,
        );
        let aspect = size[0] as f32 / size[1] as f32;
        let sides: &[Option<Side>] = match settings.stereo {
            Some(_) => &[Some(Side::Left), Some(Side::Right)],
            None => &[None],
        };
        self.info.samples = k + 1;
        let mode = match settings.stereo {
            Some(s) => Compose::Anaglyph(s.anaglyph),
            None => Compose::Mono,
        };
        // A submission per eye (each writes its camera uniforms first); the
        // last one composes the picture too.
        for (i, side) in sides.iter().enumerate() {
            let stereo = settings.stereo.zip(*side);
            let eye = self.camera.eye_view(aspect, stereo, ndc);
            self.prepare_draws(gpu, settings, &eye, k);
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            self.draw_scene(gpu, &mut encoder, settings, &eye);
            self.presenter.accumulate(gpu, &mut encoder, i, k);
            if i + 1 == sides.len() {
                self.presenter
                    .compose(gpu, &mut encoder, mode, self.info.samples);
            }
            self.submit(gpu, Some(encoder));
        }
        Ok(self.info.samples < wanted)
    }

    /// Renders until the picture holds all its samples, and waits for the
    /// GPU: then [`Viewer::info`] describes the picture.
    pub fn render_all(
        &mut self,
        gpu: &Gpu,
        settings: &ViewSettings,
        size: [u32; 2],
    ) -> Result<(), GpuError> {
        loop {
            while self.render(gpu, settings, size)? {}
            if self.settle(gpu)? {
                return Ok(());
            }
        }
    }

    /// Writes each drawable's camera uniform for `eye` (before the submission
    /// that draws it).
    fn prepare_draws(
        &mut self,
        gpu: &Gpu,
        settings: &ViewSettings,
        eye: &super::scene::Eye,
        sample: u32,
    ) {
        let obstacle = Shading::plain(OBSTACLE_COLOUR).uniform(eye, [0.0; 4]);
        self.mesh.prepare(
            gpu,
            &mut self.draws.obstacles,
            &self.obstacles.output,
            &obstacle,
        );
        let surface = Shading {
            colour: SURFACE_COLOUR,
            map: self
                .info
                .colour_range
                .map(|(lo, hi)| (settings.colour_map, lo, hi)),
        };
        match settings.mode {
            SurfaceMode::Mesh => {
                let u = surface.uniform(eye, [0.0; 4]);
                self.mesh
                    .prepare(gpu, &mut self.draws.surface, &self.surface.output, &u);
            }
            SurfaceMode::Spheres => {
                let u = surface.uniform(eye, [settings.sphere_radius, 0.0, 0.0, 0.0]);
                self.impostors
                    .prepare(gpu, &mut self.draws.spheres, &self.spheres.output, &u);
            }
            SurfaceMode::None => {}
        }
        let v = self.volumes.as_ref().expect("uploaded");
        if self.slices_computed.is_some() {
            // The range is on the GPU (SlicePass::ranges).
            let shading = Shading {
                colour: OBSTACLE_COLOUR,
                map: Some((slice_map(settings.colour_map), 0.0, 0.0)),
            };
            let extra = SlicePass::extra(&settings.slices, v.size, settings.contours);
            self.slices
                .prepare(gpu, &v.slices, &v.blocked, &shading.uniform(eye, extra));
            if settings.arrows > 0 {
                let counts =
                    SlicePass::arrow_counts(&settings.slices, v.size, settings.arrows as f32);
                let mut arrows = Shading::plain(ARROW_COLOUR).uniform(eye, extra);
                arrows.extra[3] = settings.arrows as f32;
                self.slices.prepare_arrows(gpu, &v.fields, &arrows, counts);
            }
        }
        if let (Some(vs), Some(_), Some(frames)) = (
            &settings.volume,
            self.volume_computed,
            self.presenter.frames.as_ref(),
        ) {
            self.raymarch.prepare(gpu, &frames.scratch, eye, vs, sample);
        }
        if let (Some(s), Some(points)) = (&settings.streamlines, &self.tracer.points) {
            let (lo, hi) = self.info.speed_range;
            let map = match settings.colour_map {
                ColourMap::Plain => ColourMap::Viridis,
                m => m,
            };
            let shading = Shading {
                colour: SURFACE_COLOUR,
                map: Some((map, lo, hi)),
            };
            let extra = [s.radius, self.tracer.points_per_line() as f32, 0.0, 0.0];
            let u = shading.uniform(eye, extra);
            match s.style {
                LineStyle::Tubes => self.tubes.prepare(gpu, &mut self.draws.tubes, points, &u),
                LineStyle::Spheres => {
                    self.impostors
                        .prepare(gpu, &mut self.draws.chain, points, &u)
                }
            };
        }
    }

    fn draw_scene(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        settings: &ViewSettings,
        eye: &super::scene::Eye,
    ) {
        let frames = self.presenter.frames.as_ref().expect("resized");
        let background = if settings.grey_background {
            GREY
        } else {
            BACKGROUND
        };
        let mut pass = frames
            .scratch
            .begin(encoder, background, self.scene_timer.as_ref());
        self.lines.draw(gpu, &mut pass, eye);
        if let Some(d) = &self.draws.obstacles {
            self.mesh
                .draw_indirect(&mut pass, d, &self.obstacles.draw_args);
        }
        if self.slices_computed.is_some() {
            self.slices.draw(&mut pass);
            if settings.arrows > 0 {
                self.slices.draw_arrows(&mut pass);
            }
        }
        match (settings.mode, &self.draws.surface, &self.draws.spheres) {
            (SurfaceMode::Mesh, Some(d), _) => {
                self.mesh
                    .draw_indirect(&mut pass, d, &self.surface.draw_args)
            }
            (SurfaceMode::Spheres, _, Some(d)) => {
                self.impostors
                    .draw_indirect(&mut pass, d, &self.spheres.draw_args)
            }
            _ => {}
        }
        if let Some(s) = &settings.streamlines {
            let (lines, per) = (self.tracer.lines, self.tracer.points_per_line());
            match (s.style, &self.draws.tubes, &self.draws.chain) {
                (LineStyle::Tubes, Some(d), _) => {
                    self.tubes.draw(&mut pass, d, 6 * lines * (per - 1))
                }
                (LineStyle::Spheres, _, Some(d)) => {
                    self.impostors.draw(&mut pass, d, 3 * lines * per)
                }
                _ => {}
            }
        }
        drop(pass);
        // Over everything opaque, which stops its rays.
        if settings.volume.is_some() && self.volume_computed.is_some() {
            self.raymarch
                .draw(encoder, &frames.scratch, self.volume_timer.as_ref());
        }
    }

    /// The picture (rgba8), once something was rendered.
    pub fn picture(&self) -> Option<&wgpu::TextureView> {
        self.presenter.frames.as_ref().map(|f| &f.picture_view)
    }

    /// The picture's pixels (RGBA8, rows top to bottom) and size.
    pub fn read_rgba(&self, gpu: &Gpu) -> Result<(Vec<u8>, [u32; 2]), GpuError> {
        let f = self
            .presenter
            .frames
            .as_ref()
            .ok_or_else(|| GpuError::Device("nothing rendered yet".into()))?;
        Ok((self.presenter.read_rgba(gpu)?, f.size))
    }

    /// Saves the picture as a PNG.
    pub fn screenshot(&self, gpu: &Gpu, path: &std::path::Path) -> Result<(), String> {
        let (pixels, size) = self.read_rgba(gpu).map_err(|e| e.to_string())?;
        super::scene::save_png(path, size, &pixels)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// The streamline tracer (tests and benchmarks read its lines).
    pub fn tracer(&self) -> &Tracer {
        &self.tracer
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

/// Triangles of mesh obstacles as vertices of the display grid (a display
/// cell's centre is the mean of the centres of the `stride`³ cells it
/// covers), with their face normals.
pub fn mesh_vertices(meshes: &ObstacleMeshes, stride: usize) -> Vec<Vertex> {
    let s = stride as f32;
    let shift = 0.5 * (s - 1.0);
    meshes
        .triangles
        .iter()
        .flat_map(|t| {
            let p = t.map(|v| (glam::Vec3::from(v) - shift) / s);
            let n = (p[1] - p[0]).cross(p[2] - p[0]).extend(0.0).to_array();
            p.map(|v| Vertex {
                position: v.extend(0.0).to_array(),
                normal: n,
            })
        })
        .collect()
}

/// The map slices are coloured with: the surface's, viridis for plain.
fn slice_map(map: ColourMap) -> ColourMap {
    match map {
        ColourMap::Plain => ColourMap::Viridis,
        m => m,
    }
}
