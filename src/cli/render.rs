//! `flowscope render`: run a scenario, then draw an isosurface off-screen to PNG
//! (wgpu without a window or surface).

use std::path::PathBuf;

use anyhow::{bail, Context};

use super::{PrecisionArg, SolverKind};
use crate::render::colour::ColourMap;
use crate::render::derive::PlotType;
use crate::render::gpu::Gpu;
use crate::render::legend::{self, Legend};
use crate::render::raymarch::{Opacity, VolumePreset};
use crate::render::scene::{save_png, Anaglyph, Camera, Stereo};
use crate::render::streamlines::{LineStyle, Rake, StreamlineSettings};
use crate::render::viewer::{SurfaceMode, ViewSettings, Viewer};
use crate::scenario::Scenario;
use crate::session::{select, Backend, Gpus};
use crate::system::Tuning;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StereoArg {
    /// Red/cyan glasses.
    Anaglyph,
}

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
    /// The solution method (default: the scenario's [run] method, else lbm).
    #[arg(long, value_enum)]
    pub method: Option<crate::scenario::Method>,
    /// What the isosurface shows.
    #[arg(long, value_enum, default_value = "speed")]
    pub plot: PlotType,
    /// Isovalue.
    #[arg(long, conflicts_with = "iso_frac")]
    pub iso: Option<f32>,
    /// Isovalue as a fraction of the field's range (0 = min, 1 = max).
    #[arg(long, default_value_t = 0.5)]
    pub iso_frac: f32,
    /// How the isosurface is drawn: triangles, sphere impostors, or not at all.
    #[arg(long, value_enum, default_value = "mesh")]
    pub mode: SurfaceMode,
    /// Sphere impostor radius in cells (--mode spheres).
    #[arg(long, allow_negative_numbers = true, default_value_t = 0.6)]
    pub sphere_radius: f32,
    /// Colour the surface by a field (pressure, speed, …) or `plain` for one
    /// colour. Default: speed (pressure on a speed surface, where the speed is
    /// the same everywhere).
    #[arg(long, value_name = "FIELD|plain", value_parser = parse_colour_by)]
    pub colour_by: Option<ColourBy>,
    /// Colour map for --colour-by, slices and streamlines: viridis, inferno,
    /// cool-warm (diverging: a field of both signs gets a range symmetric
    /// about zero) or turbo.
    #[arg(long, default_value = "viridis")]
    pub colour_map: String,
    /// Streamlines from a rake (cell coordinates): preset (the default),
    /// line:X,Y,Z:X,Y,Z:N, plane:X,Y,Z:AX,AY,AZ:BX,BY,BZ:NA,NB or
    /// box:X,Y,Z:X,Y,Z:N[:SEED].
    #[arg(long, value_name = "RAKE", num_args = 0..=1, default_missing_value = "preset")]
    pub streamlines: Option<String>,
    /// RK4 steps per streamline at most.
    #[arg(long, default_value_t = 1000)]
    pub streamline_steps: u32,
    /// Streamline step length in cells where the flow is fastest.
    #[arg(long, default_value_t = 0.5)]
    pub streamline_step: f32,
    /// Streamline tube (or sphere) radius in cells.
    #[arg(long, default_value_t = 0.3)]
    pub streamline_radius: f32,
    #[arg(long, value_enum, default_value = "tubes")]
    pub streamline_style: LineStyle,
    /// Stereo picture.
    #[arg(long, value_enum)]
    pub stereo: Option<StereoArg>,
    /// Anaglyph colour matrices.
    #[arg(long, value_enum, default_value = "dubois")]
    pub anaglyph: Anaglyph,
    /// Eye separation as a multiple of zero-parallax distance / 30.
    #[arg(long, allow_negative_numbers = true, default_value_t = 1.0)]
    pub eye_separation: f32,
    /// Zero-parallax distance as a fraction of the distance to the domain's
    /// centre.
    #[arg(long, default_value_t = 1.0)]
    pub zero_parallax: f32,
    /// Background: dark, or mid-grey (the default in stereo: less ghosting).
    #[arg(long, value_enum)]
    pub background: Option<Background>,
    /// Antialiasing: renderings averaged with sub-pixel jitter (1: none).
    #[arg(long, default_value_t = 16)]
    pub aa: u32,
    /// Image size, WIDTHxHEIGHT.
    #[arg(long, default_value = "1280x720")]
    pub size: String,
    /// Draw what the window shows with this display limit: a grid larger
    /// than N³ cells as means over blocks of cells (default: every cell).
    #[arg(long, value_name = "N", value_parser = super::parse_display_limit)]
    pub display_limit: Option<usize>,
    /// Camera angles (radians) and distance (cells); defaults frame the domain.
    #[arg(long, allow_negative_numbers = true)]
    pub yaw: Option<f32>,
    #[arg(long, allow_negative_numbers = true)]
    pub pitch: Option<f32>,
    #[arg(long)]
    pub distance: Option<f32>,
    /// Slices through the field, e.g. `x=0.5,z=0.3`: a value up to 1 is a
    /// fraction of the domain, a larger one a cell index.
    #[arg(long, value_name = "AXIS=POS,...", value_parser = parse_slices)]
    pub slice: Option<[Option<f32>; 3]>,
    /// The field the slices show, one for all (e.g. `vorticity`) or per
    /// slice (`x=vorticity,z=speed`); default: the surface's colouring, or
    /// the plotted field when the surface is plain.
    #[arg(long, value_name = "FIELD|AXIS=FIELD,...", value_parser = parse_slice_fields)]
    pub slice_colour_by: Option<[Option<PlotType>; 3]>,
    /// The slices' colour range, LO:HI for all or per slice
    /// (`x=-0.01:0.01,z=0:0.1`); default: the field's extremes on each.
    #[arg(long, value_name = "LO:HI|AXIS=LO:HI,...", value_parser = parse_slice_ranges)]
    pub slice_range: Option<[Option<(f32, f32)>; 3]>,
    /// Contour lines on the slices at this many levels of the colour range.
    #[arg(long, default_value_t = 0)]
    pub contours: u32,
    /// In-plane velocity arrows on the slices, one every N cells.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub arrows: u32,
    /// Volume rendering, from a preset transfer function (vorticity, speed).
    #[arg(long, value_enum, value_name = "PRESET", num_args = 0..=1, default_missing_value = "vorticity")]
    pub volume: Option<VolumePreset>,
    /// The field the volume rendering shows (default: the preset's).
    #[arg(long, value_enum, requires = "volume")]
    pub volume_field: Option<PlotType>,
    /// The volume's opacity per cell at fractions of its colour range,
    /// T:A,... (e.g. 0:0,0.5:0.02,1:0.3; linear between, flat beyond).
    #[arg(long, value_name = "T:A,...", requires = "volume", value_parser = Opacity::parse)]
    pub volume_opacity: Option<Opacity>,
    /// The volume's colour range, LO:HI (default: the field's extremes).
    #[arg(long, value_name = "LO:HI", requires = "volume", value_parser = parse_range)]
    pub volume_range: Option<(f32, f32)>,
    /// The volume's colour map (default: the preset's).
    #[arg(long, requires = "volume")]
    pub volume_colour_map: Option<String>,
    /// Ray-march step in cells.
    #[arg(long, requires = "volume")]
    pub volume_step: Option<f32>,
    #[arg(long)]
    pub out: PathBuf,
}

/// `x=0.5,z=40`: per axis, a fraction (up to 1) or a cell index.
fn parse_slices(text: &str) -> Result<[Option<f32>; 3], String> {
    let mut out = [None; 3];
    for part in text.split(',') {
        let (axis, value) = part.split_once('=').ok_or_else(|| {
            format!("`{part}` is not AXIS=POSITION (e.g. x=0.5 for the middle, z=40 for cell 40)")
        })?;
        let a = axis_index(axis)?;
        let v: f32 = value.trim().parse().map_err(|_| {
            format!("`{value}` is not a position: a fraction 0 to 1 or a cell index")
        })?;
        if !(v >= 0.0 && v.is_finite()) {
            return Err(format!("{axis}={value}: positions are 0 or more"));
        }
        out[a] = Some(v);
    }
    Ok(out)
}

/// `x` → 0, `y` → 1, `z` → 2.
fn axis_index(axis: &str) -> Result<usize, String> {
    match axis.trim() {
        "x" => Ok(0),
        "y" => Ok(1),
        "z" => Ok(2),
        other => Err(format!("`{other}` is not an axis: use x, y or z")),
    }
}

/// One value for every slice, or `AXIS=VALUE,...` per slice.
fn per_slice<T: Copy>(
    text: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<[Option<T>; 3], String> {
    if !text.contains('=') {
        return Ok([Some(parse(text)?); 3]);
    }
    let mut out = [None; 3];
    for part in text.split(',') {
        let (axis, value) = part
            .split_once('=')
            .ok_or_else(|| format!("`{part}` is not AXIS=VALUE (e.g. x=speed)"))?;
        out[axis_index(axis)?] = Some(parse(value)?);
    }
    Ok(out)
}

/// `vorticity`, or `x=vorticity,z=speed`.
fn parse_slice_fields(text: &str) -> Result<[Option<PlotType>; 3], String> {
    use clap::ValueEnum;
    per_slice(text, |name| {
        PlotType::from_str(name.trim(), true).map_err(|_| {
            let names: Vec<String> = PlotType::value_variants()
                .iter()
                .filter_map(|p| p.to_possible_value().map(|v| v.get_name().to_string()))
                .collect();
            format!("`{name}` is not a field: one of {}", names.join(", "))
        })
    })
}

/// `LO:HI`, or `x=LO:HI,z=LO:HI`.
fn parse_slice_ranges(text: &str) -> Result<[Option<(f32, f32)>; 3], String> {
    per_slice(text, parse_range)
}

/// `LO:HI`, two numbers, LO below HI.
fn parse_range(text: &str) -> Result<(f32, f32), String> {
    let (lo, hi) = text
        .split_once(':')
        .ok_or_else(|| format!("`{text}` is not LO:HI (e.g. -0.01:0.01)"))?;
    let number = |s: &str| {
        s.trim()
            .parse::<f32>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("`{s}` in `{text}` is not a number"))
    };
    let (lo, hi) = (number(lo)?, number(hi)?);
    if lo >= hi {
        return Err(format!("`{text}`: LO must be below HI"));
    }
    Ok((lo, hi))
}

/// Slice positions as fractions of a grid of `size` (cell indices above 1
/// become fractions; beyond the grid is an error).
fn slice_fractions(slices: [Option<f32>; 3], size: [usize; 3]) -> anyhow::Result<[Option<f32>; 3]> {
    let mut out = [None; 3];
    for a in 0..3 {
        out[a] = match slices[a] {
            None => None,
            Some(v) if v <= 1.0 => Some(v),
            Some(v) => {
                let last = size[a].saturating_sub(1) as f32;
                if v > last {
                    bail!(
                        "--slice {}={v}: the grid has cells 0 to {last} along {}",
                        ["x", "y", "z"][a],
                        ["x", "y", "z"][a]
                    );
                }
                Some(v / last.max(1.0))
            }
        };
    }
    Ok(out)
}

/// What colours the surface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColourBy {
    Plain,
    Field(PlotType),
}

fn parse_colour_by(s: &str) -> Result<ColourBy, String> {
    if s == "plain" {
        return Ok(ColourBy::Plain);
    }
    <PlotType as clap::ValueEnum>::from_str(s, true)
        .map(ColourBy::Field)
        .map_err(|_| {
            format!("`{s}`: use plain or one of pressure, speed, ux, uy, uz, vorticity, curl, q")
        })
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Background {
    Dark,
    Grey,
}

/// The view settings the arguments ask for; bad values are refused before
/// the flow runs.
fn settings(args: &RenderArgs) -> anyhow::Result<ViewSettings> {
    let colour_map = match ColourMap::from_name(&args.colour_map) {
        Some(m) if m != ColourMap::Plain => m,
        _ => bail!(
            "--colour-map {}: use viridis, inferno, cool-warm or turbo",
            args.colour_map
        ),
    };
    let positive = |name: &str, v: f32| {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            Err(anyhow::anyhow!("{name} {v}: must be a positive number"))
        }
    };
    positive("--sphere-radius", args.sphere_radius)?;
    positive("--zero-parallax", args.zero_parallax)?;
    // Past a few times the comfortable separation the eyes cannot fuse the
    // picture, and far past it the domain leaves both images.
    if !(args.eye_separation.is_finite()
        && (0.0..=MAX_EYE_SEPARATION).contains(&args.eye_separation))
    {
        bail!(
            "--eye-separation {}: use 0 (no depth) to {MAX_EYE_SEPARATION}; 1 is comfortable",
            args.eye_separation
        );
    }
    if !(args.zero_parallax <= 100.0) {
        bail!("--zero-parallax {}: use a fraction of the distance to the domain's centre up to 100 (1 puts the centre on the screen)", args.zero_parallax);
    }
    if let Some(iso) = args.iso {
        if !iso.is_finite() {
            bail!("--iso {iso}: the isovalue must be a number; or give --iso-frac F (0 = min, 1 = max)");
        }
    }
    if !(0.0..=1.0).contains(&args.iso_frac) {
        bail!(
            "--iso-frac {}: use a fraction of the field's range from 0 to 1",
            args.iso_frac
        );
    }
    for (name, angle) in [("--yaw", args.yaw), ("--pitch", args.pitch)] {
        if angle.is_some_and(|a| !a.is_finite()) {
            bail!(
                "{name} {}: give an angle in radians",
                angle.unwrap_or_default()
            );
        }
    }
    if let Some(p) = args.pitch {
        if p.abs() >= std::f32::consts::FRAC_PI_2 {
            bail!("--pitch {p}: use an angle between -1.57 and 1.57 radians (straight down or up has no 'up' direction)");
        }
    }
    if let Some(d) = args.distance {
        positive("--distance", d)?;
    }
    if !(1..=1024).contains(&args.aa) {
        bail!("--aa {}: use 1 (no antialiasing) to 1024 samples", args.aa);
    }
    let streamlines = match &args.streamlines {
        None => None,
        Some(text) => {
            positive("--streamline-step", args.streamline_step)?;
            positive("--streamline-radius", args.streamline_radius)?;
            if !(1..=100_000).contains(&args.streamline_steps) {
                bail!(
                    "--streamline-steps {}: use 1 to 100000",
                    args.streamline_steps
                );
            }
            let rake = Rake::parse(text).map_err(|e| anyhow::anyhow!("--streamlines {e}"))?;
            Some(StreamlineSettings {
                rake,
                steps: args.streamline_steps,
                step_cells: args.streamline_step,
                radius: args.streamline_radius,
                style: args.streamline_style,
            })
        }
    };
    if args.arrows > 1024 {
        bail!(
            "--arrows {}: give the spacing in cells, 1 to 1024 (0: none)",
            args.arrows
        );
    }
    let volume = match args.volume {
        None => None,
        Some(preset) => {
            let mut v = preset.settings();
            v.field = args.volume_field.unwrap_or(v.field);
            v.opacity = args.volume_opacity.unwrap_or(v.opacity);
            v.range = args.volume_range;
            if let Some(name) = &args.volume_colour_map {
                v.map = match ColourMap::from_name(name) {
                    Some(m) if m != ColourMap::Plain => m,
                    _ => bail!(
                        "--volume-colour-map {name}: use viridis, inferno, cool-warm or turbo"
                    ),
                };
            }
            if let Some(step) = args.volume_step {
                if !(step.is_finite() && (0.05..=8.0).contains(&step)) {
                    bail!("--volume-step {step}: use 0.05 to 8 cells (0.5 is the default)");
                }
                v.step = step;
            }
            Some(v)
        }
    };
    let stereo = args.stereo.map(|_| Stereo {
        anaglyph: args.anaglyph,
        separation: args.eye_separation,
        zero_parallax: args.zero_parallax,
    });
    Ok(ViewSettings {
        plot: args.plot,
        iso_frac: args.iso_frac,
        iso: args.iso,
        colour_by: match args.colour_by {
            Some(ColourBy::Plain) => None,
            Some(ColourBy::Field(p)) => Some(p),
            None => Some(args.plot.default_colour()),
        },
        colour_map,
        mode: args.mode,
        sphere_radius: args.sphere_radius,
        streamlines,
        stereo,
        grey_background: args
            .background
            .map_or(stereo.is_some(), |b| b == Background::Grey),
        aa_samples: args.aa,
        slices: args.slice.unwrap_or([None; 3]),
        slice_colour_by: args.slice_colour_by.unwrap_or_default(),
        slice_range: args.slice_range.unwrap_or_default(),
        contours: args.contours,
        arrows: args.arrows,
        volume,
    })
}

/// Eye separation, as a multiple of the comfortable one, beyond which
/// `--eye-separation` is refused.
const MAX_EYE_SEPARATION: f32 = 5.0;

pub fn render(args: RenderArgs, tuning: &Tuning) -> anyhow::Result<()> {
    crate::io::check_output(&args.out, "--out", &["png"]).map_err(anyhow::Error::msg)?;
    let size = parse_size(&args.size)?;
    // Checked before the flow runs, which may take a while.
    let mut settings = settings(&args)?;
    let mut scenario = Scenario::load(&args.scenario, &args.set)?;
    if let Some(method) = args.method {
        scenario.run.method = method;
    }
    settings.slices = slice_fractions(settings.slices, scenario.size)?;
    for w in &scenario.warnings {
        eprintln!("warning: {w}");
    }
    // Open the GPU first: no point running the flow if nothing can draw it.
    let mut gpu = Gpu::headless()?;
    gpu.shader_dir = tuning.shader_dir.clone();
    let backend = Backend {
        choice: args.solver.into(),
        precision: args.precision.into(),
        gpus: Gpus::One,
        tuning: tuning.clone(),
    };
    let selected = select::build(&backend, &scenario, crate::system::available_memory())?;
    let mut solver = selected.solver;
    eprintln!(
        "{}: {}; drawing on {} ({:?})",
        scenario.name, selected.reason, gpu.info.name, gpu.info.device_type
    );
    solver.step(args.steps)?;
    if let Some(e) = solver.stats()?.instability() {
        return Err(e.into());
    }
    let mut fields = solver.fields()?;
    let mut flags = solver.flags().to_vec();
    if let Some(limit) = args.display_limit {
        use crate::solver::display;
        let stride = display::stride_for(fields.size, limit);
        if stride > 1 {
            eprintln!(
                "display limit {limit}³: means of {stride}³ cells, {:?} shown",
                display::coarse_size(fields.size, stride)
            );
        }
        flags = display::downsample_flags(&flags, fields.size, stride);
        fields = display::downsample_fields(fields, stride);
    }
    let mut viewer = Viewer::new(&gpu);
    let stride = args.display_limit.map_or(1, |limit| {
        crate::solver::display::stride_for(solver.grid().size, limit)
    });
    viewer.set_meshes(
        &std::sync::Arc::new(crate::scenario::mesh::ObstacleMeshes::of(&scenario)),
        stride,
    );
    viewer.upload(&gpu, &fields, &flags, 0, None)?;
    let mut camera = Camera::framing(fields.size.map(|n| n as u32));
    camera.yaw = args.yaw.unwrap_or(camera.yaw);
    camera.pitch = args.pitch.unwrap_or(camera.pitch);
    match args.distance {
        Some(d) => camera.distance = d,
        None => camera.fit(
            fields.size.map(|n| n as u32),
            size[0] as f32 / size[1] as f32,
        ),
    }
    viewer.camera = camera;
    viewer.render_all(&gpu, &settings, size)?;
    let (mut pixels, size) = viewer.read_rgba(&gpu)?;
    let legends = Legend::of(&settings, &viewer.info);
    legend::overlay(&gpu, &mut pixels, size, &legends)?;
    save_png(&args.out, size, &pixels)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    let info = viewer.info;
    let (lo, hi) = info.range;
    if let (Some(plot), Some((clo, chi))) = (settings.colour_by, info.colour_range) {
        eprintln!(
            "colour: {plot:?} from {clo:.4e} to {chi:.4e} ({})",
            settings.colour_map.name()
        );
    }
    let shown = match settings.mode {
        SurfaceMode::Mesh => format!("{} surface triangles", info.triangles),
        SurfaceMode::Spheres => format!("{} surface spheres", info.spheres),
        SurfaceMode::None => "no surface".into(),
    };
    eprintln!(
        "wrote {}: {} at step {}, isovalue {:.4e} (range {lo:.4e} to {hi:.4e}), {shown}, {} samples{}",
        args.out.display(),
        args.plot.name(),
        solver.time_step(),
        info.isovalue,
        info.samples,
        if settings.stereo.is_some() { ", anaglyph" } else { "" },
    );
    for (axis, colour) in ["x", "y", "z"].iter().zip(info.slice_colour) {
        if let Some((field, (lo, hi))) = colour {
            eprintln!("{axis} slice: {} from {lo:.4e} to {hi:.4e}", field.name());
        }
    }
    if let Some((field, (lo, hi))) = info.volume_colour {
        eprintln!("volume: {} from {lo:.4e} to {hi:.4e}", field.name());
    }
    if settings.streamlines.is_some() {
        let lengths = viewer.tracer().read_lengths(&gpu)?;
        let empty = lengths.iter().filter(|&&n| n == 0).count();
        eprintln!(
            "{} streamlines, {} points, speed {:.4e} to {:.4e}{}",
            lengths.len(),
            lengths.iter().map(|&n| n as u64).sum::<u64>(),
            info.speed_range.0,
            info.speed_range.1,
            if empty > 0 {
                format!("; {empty} seeds in a solid or outside the domain gave no line")
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_as_lo_colon_hi() {
        assert_eq!(parse_range("-0.01:0.02"), Ok((-0.01, 0.02)));
        assert!(parse_range("1:1").unwrap_err().contains("below"));
        assert!(parse_range("1").unwrap_err().contains("LO:HI"));
        assert!(parse_range("0:inf").unwrap_err().contains("not a number"));
    }

    #[test]
    fn slice_fields_and_ranges_parse_for_all_slices_or_each() {
        assert_eq!(
            parse_slice_fields("vorticity"),
            Ok([Some(PlotType::Vorticity); 3])
        );
        assert_eq!(
            parse_slice_fields("x=speed,z=ux"),
            Ok([Some(PlotType::Speed), None, Some(PlotType::Ux)])
        );
        assert!(parse_slice_fields("x=wind")
            .unwrap_err()
            .contains("not a field: one of"));
        assert_eq!(
            parse_slice_ranges("y=-0.01:0.02"),
            Ok([None, Some((-0.01, 0.02)), None])
        );
        assert_eq!(parse_slice_ranges("0:1"), Ok([Some((0.0, 1.0)); 3]));
        assert!(parse_slice_ranges("w=0:1")
            .unwrap_err()
            .contains("not an axis"));
        assert!(parse_slice_ranges("x=1:0").unwrap_err().contains("below"));
    }

    #[test]
    fn slices_parse_as_fractions_or_cells() {
        assert_eq!(
            parse_slices("x=0.5,z=40"),
            Ok([Some(0.5), None, Some(40.0)])
        );
        assert!(parse_slices("w=0.5").unwrap_err().contains("not an axis"));
        assert!(parse_slices("x").unwrap_err().contains("AXIS=POSITION"));
        assert!(parse_slices("y=-1").unwrap_err().contains("0 or more"));
        let f = slice_fractions([Some(0.25), None, Some(40.0)], [9, 9, 81]).unwrap();
        assert_eq!(f, [Some(0.25), None, Some(0.5)]);
        let e = slice_fractions([None, Some(12.0), None], [9, 9, 81]).unwrap_err();
        assert!(e.to_string().contains("cells 0 to 8 along y"), "{e}");
    }
}
