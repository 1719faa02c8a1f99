//! `flowscope render`: run a scenario, then draw an isosurface off-screen to PNG
//! (wgpu without a window or surface).

use std::path::PathBuf;

use anyhow::{bail, Context};

use super::{PrecisionArg, SolverKind};
use crate::render::colour::ColourMap;
use crate::render::derive::PlotType;
use crate::render::gpu::Gpu;
use crate::render::isosurface::Extractor;
use crate::render::passes::{DerivePass, MinMax};
use crate::render::scene::{save_png, Camera, MeshRenderer, Shading, Target};
use crate::render::volume::Volume;
use crate::scenario::Scenario;
use crate::solver::select::{self, Choice, Gpus};

#[derive(clap::Args, Debug)]
pub struct RenderArgs {
    pub scenario: PathBuf,
    #[arg(long, value_enum, default_value = "auto")]
    pub solver: SolverKind,
    #[arg(long, value_enum, default_value = "fp32")]
    pub precision: PrecisionArg,
    /// Time steps to run before drawing.
    #[arg(long, default_value_t = 0)]
    pub steps: u64,
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// What the isosurface shows.
    #[arg(long, value_enum, default_value = "speed")]
    pub plot: PlotType,
    /// Isovalue.
    #[arg(long, conflicts_with = "iso_frac")]
    pub iso: Option<f32>,
    /// Isovalue as a fraction of the field's range (0 = min, 1 = max).
    #[arg(long, default_value_t = 0.5)]
    pub iso_frac: f32,
    /// Colour the surface by a second field (default: one colour).
    #[arg(long, value_enum)]
    pub colour_by: Option<PlotType>,
    /// Colour map for --colour-by: viridis or cool-warm.
    #[arg(long, default_value = "viridis")]
    pub colour_map: String,
    /// Image size, WIDTHxHEIGHT.
    #[arg(long, default_value = "1280x720")]
    pub size: String,
    /// Camera angles (radians) and distance (cells); defaults frame the domain.
    #[arg(long, allow_negative_numbers = true)]
    pub yaw: Option<f32>,
    #[arg(long, allow_negative_numbers = true)]
    pub pitch: Option<f32>,
    #[arg(long)]
    pub distance: Option<f32>,
    #[arg(long)]
    pub out: PathBuf,
}

fn parse_size(s: &str) -> anyhow::Result<[u32; 2]> {
    let (w, h) = s
        .split_once('x')
        .with_context(|| format!("--size {s}: expected WIDTHxHEIGHT, e.g. 1920x1080"))?;
    let (w, h): (u32, u32) = (w.trim().parse()?, h.trim().parse()?);
    if w == 0 || h == 0 || w > 16384 || h > 16384 {
        bail!("--size {s}: width and height must be 1 to 16384");
    }
    Ok([w, h])
}

pub fn render(args: RenderArgs) -> anyhow::Result<()> {
    let size = parse_size(&args.size)?;
    // Checked before the flow runs, which may take a while.
    let colour_map = match ColourMap::from_name(&args.colour_map) {
        Some(m) if m != ColourMap::Plain => m,
        _ => bail!("--colour-map {}: use viridis or cool-warm", args.colour_map),
    };
    let scenario = Scenario::load(&args.scenario, &args.set)?;
    for w in &scenario.warnings {
        eprintln!("warning: {w}");
    }
    // Open the GPU first: no point running the flow if nothing can draw it.
    let gpu = Gpu::headless()?;
    let choice: Choice = args.solver.into();
    let selected = select::build(
        choice,
        &scenario,
        args.precision.into(),
        Gpus::One,
        super::available_memory(),
    )?;
    let mut solver = selected.solver;
    eprintln!(
        "{}: {}; drawing on {} ({:?})",
        scenario.name, selected.reason, gpu.info.name, gpu.info.device_type
    );
    solver.step(args.steps)?;
    if let Some(e) = solver.stats()?.instability() {
        return Err(e.into());
    }
    let fields = solver.fields()?;
    let dims = scenario.size.map(|n| n as u32);
    let field_volume = Volume::fields(&gpu, dims);
    field_volume.write_fields(&gpu, &fields);
    let scalar = Volume::scalar(&gpu, dims);
    let mut encoder = gpu.device.create_command_encoder(&Default::default());
    DerivePass::new(&gpu).run(&gpu, &mut encoder, &field_volume, &scalar, args.plot);
    gpu.queue.submit([encoder.finish()]);
    let (lo, hi) = MinMax::new(&gpu).compute(&gpu, &scalar)?;
    let iso = args.iso.unwrap_or(lo + args.iso_frac * (hi - lo));
    let mut surface = Extractor::new(&gpu, 1 << 20);
    surface.clip_to_interior(solver.grid());
    let (vertices, map) = match args.colour_by {
        None => (surface.extract(&gpu, &scalar, iso)?, None),
        Some(plot) => {
            let map = colour_map;
            let colour = Volume::scalar(&gpu, dims);
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            DerivePass::new(&gpu).run(&gpu, &mut encoder, &field_volume, &colour, plot);
            gpu.queue.submit([encoder.finish()]);
            let (clo, chi) = MinMax::new(&gpu).compute(&gpu, &colour)?;
            eprintln!(
                "colour: {plot:?} from {clo:.4e} to {chi:.4e} ({})",
                map.name()
            );
            let n = surface.extract_coloured(&gpu, &scalar, &colour, iso)?;
            (n, Some((map, clo, chi)))
        }
    };
    let solid = Volume::scalar(&gpu, dims);
    solid.write_solid(&gpu, solver.flags());
    let mut obstacles = Extractor::new(&gpu, 1 << 18);
    let obstacle_vertices = obstacles.extract(&gpu, &solid, 0.5)?;

    let target = Target::new(&gpu, size);
    let mut camera = Camera::framing(dims);
    camera.yaw = args.yaw.unwrap_or(camera.yaw);
    camera.pitch = args.pitch.unwrap_or(camera.pitch);
    camera.distance = args.distance.unwrap_or(camera.distance);
    let renderer = MeshRenderer::new(&gpu);
    let bounds = crate::render::lines::BoxRenderer::new(&gpu, dims);
    let (mut surface_cache, mut obstacle_cache) = (None, None);
    let aspect = target.aspect();
    let surface_draw = renderer.prepare(
        &gpu,
        &mut surface_cache,
        &surface,
        &camera,
        aspect,
        Shading {
            colour: [0.95, 0.55, 0.2],
            map,
        },
    );
    let obstacle_draw = renderer.prepare(
        &gpu,
        &mut obstacle_cache,
        &obstacles,
        &camera,
        aspect,
        Shading::plain([0.6, 0.62, 0.68]),
    );
    let mut encoder = gpu.device.create_command_encoder(&Default::default());
    {
        let mut pass = target.begin(&mut encoder, [0.12, 0.13, 0.15]);
        bounds.draw(&gpu, &mut pass, &camera, aspect);
        renderer.draw(&mut pass, obstacle_draw, &obstacles);
        renderer.draw(&mut pass, surface_draw, &surface);
    }
    gpu.queue.submit([encoder.finish()]);
    let pixels = target.read_rgba(&gpu)?;
    save_png(&args.out, size, &pixels)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    eprintln!(
        "wrote {}: {} at step {}, isovalue {iso:.4e} (range {lo:.4e} to {hi:.4e}), {} surface and {} obstacle triangles",
        args.out.display(),
        args.plot.name(),
        solver.time_step(),
        vertices / 3,
        obstacle_vertices / 3
    );
    Ok(())
}
