//! Volume rendering (lavapipe): Beer–Lambert through a constant field, an
//! empty transfer function drawing nothing, and composition with the opaque
//! scene by depth.

use glam::{DVec3, Vec2, Vec3};

use crate::common::{self, Shot};
use flowscope::render::colour::ColourMap;
use flowscope::render::derive::PlotType;
use flowscope::render::gpu::Gpu;
use flowscope::render::raymarch::{Opacity, VolumeSettings};
use flowscope::render::scene::Camera;
use flowscope::render::viewer::{SurfaceMode, ViewSettings, Viewer};
use flowscope::solver::flags::{self, CellType};
use flowscope::solver::Fields;

const SIZE: [usize; 3] = [32, 24, 16];
const PIXELS: [u32; 2] = [480, 360];
const SHOT: Shot = Shot(PIXELS);
/// The view's background (render::viewer's BACKGROUND) in picture bytes.
const BACKGROUND: [f32; 3] = [0.12, 0.13, 0.15];

/// ux from `f(x)` everywhere.
fn fields(f: impl Fn(usize) -> f32) -> Fields {
    let mut fields = Fields::new(SIZE);
    for z in 0..SIZE[2] {
        for y in 0..SIZE[1] {
            for x in 0..SIZE[0] {
                let i = fields.index(x, y, z);
                fields.rho[i] = 1.0;
                fields.ux[i] = f(x);
            }
        }
    }
    fields
}

fn volume(opacity: &str, step: f32) -> ViewSettings {
    ViewSettings {
        plot: PlotType::Ux,
        colour_by: None,
        mode: SurfaceMode::None,
        aa_samples: 1,
        volume: Some(VolumeSettings {
            field: PlotType::Ux,
            map: ColourMap::Viridis,
            opacity: Opacity::parse(opacity).unwrap(),
            range: None,
            step,
        }),
        ..Default::default()
    }
}

/// Length of the ray through the centre of pixel `(x, y)` inside the
/// domain's box (half a cell beyond the cell centres), in f64.
fn path_length(camera: &Camera, (x, y): (usize, usize)) -> f64 {
    let ndc = Vec2::new(
        (x as f32 + 0.5) / PIXELS[0] as f32 * 2.0 - 1.0,
        1.0 - (y as f32 + 0.5) / PIXELS[1] as f32 * 2.0,
    );
    let (origin, dir) = camera.ray(SHOT.aspect(), ndc);
    let (o, d) = (origin.as_dvec3(), dir.as_dvec3());
    let lo = DVec3::splat(-0.5);
    let hi = DVec3::new(SIZE[0] as f64, SIZE[1] as f64, SIZE[2] as f64) - 0.5;
    let a = (lo - o) / d;
    let b = (hi - o) / d;
    let near = a.min(b).max_element().max(0.0);
    let far = a.max(b).min_element();
    (far - near).max(0.0)
}

#[test]
fn a_constant_field_lets_through_exactly_the_beer_lambert_light() {
    let gpu = common::gpu();
    let mut viewer = Viewer::new(&gpu);
    viewer
        .upload(&gpu, &fields(|_| 0.01), &[], 1, None)
        .unwrap();
    // 0.05 of the light stopped per cell: σ = −ln 0.95 per cell.
    let settings = volume("0:0.05,1:0.05", 0.5);
    let picture = SHOT.render(&mut viewer, &gpu, &settings);
    if let Ok(path) = std::env::var("FLOWSCOPE_KEEP_VOLUME") {
        flowscope::render::scene::save_png(std::path::Path::new(&path), PIXELS, &picture).unwrap();
    }
    let info = viewer.info.volume_colour.expect("volume range");
    assert_eq!(info.0, PlotType::Ux);
    // One value everywhere: the colour map's middle.
    let colour = ColourMap::Viridis.sample(0.5);
    let camera = viewer.camera;
    let centre = (PIXELS[0] as usize / 2, PIXELS[1] as usize / 2);
    let mut checked = 0;
    for (dx, dy) in [(0i32, 0i32), (-60, 20), (45, -35), (90, 60), (-120, -50)] {
        let at = (
            (centre.0 as i32 + dx) as usize,
            (centre.1 as i32 + dy) as usize,
        );
        let length = path_length(&camera, at);
        assert!(length > 5.0, "{at:?}: {length}");
        let through = 0.95f64.powf(length);
        let got = SHOT.rgb(&picture, at);
        for c in 0..3 {
            let want =
                255.0 * ((1.0 - through) * colour[c] as f64 + through * BACKGROUND[c] as f64);
            assert!(
                (got[c] as f64 - want).abs() <= (0.01 * want).max(1.0),
                "{at:?}, path {length:.2} cells, channel {c}: {} vs {want:.2}",
                got[c]
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 5);
    // The step does not change the picture (each segment's opacity is for
    // its own length).
    let coarse = SHOT.render(&mut viewer, &gpu, &volume("0:0.05,1:0.05", 3.0));
    let differ = picture
        .iter()
        .zip(&coarse)
        .filter(|(a, b)| a.abs_diff(**b) > 1)
        .count();
    assert_eq!(differ, 0, "{differ} bytes differ between steps 0.5 and 3");
}

/// A slab of large ux across x = 12..20, obstacles in front of and behind it.
fn slab_scene(gpu: &Gpu) -> Viewer {
    let mut viewer = Viewer::new(gpu);
    let mut cell_flags = vec![flags::make(CellType::Fluid, 0); SIZE.iter().product()];
    let mut block = |xs: std::ops::Range<usize>, ys: std::ops::Range<usize>| {
        for z in 5..11 {
            for y in ys.clone() {
                for x in xs.clone() {
                    cell_flags[x + SIZE[0] * (y + SIZE[1] * z)] = flags::make(CellType::Wall, 1);
                }
            }
        }
    };
    block(3..8, 2..7);
    block(24..29, 15..20);
    let slab = fields(|x| if (12..=20).contains(&x) { 0.02 } else { 0.0 });
    viewer.upload(gpu, &slab, &cell_flags, 1, None).unwrap();
    // From the −x side, level: the near obstacle, the slab, the far one.
    let mut camera = Camera::framing(SIZE.map(|n| n as u32));
    camera.yaw = std::f32::consts::PI;
    camera.pitch = 0.0;
    camera.fit(SIZE.map(|n| n as u32), SHOT.aspect());
    viewer.camera = camera;
    viewer
}

#[test]
fn an_empty_transfer_function_draws_nothing() {
    let gpu = common::gpu();
    let mut viewer = slab_scene(&gpu);
    let plain = ViewSettings {
        volume: None,
        slices: [None, Some(0.5), None],
        ..volume("0:0,1:0", 0.5)
    };
    let without = SHOT.render(&mut viewer, &gpu, &plain);
    let empty = SHOT.render(
        &mut viewer,
        &gpu,
        &ViewSettings {
            slices: [None, Some(0.5), None],
            ..volume("0:0,0.5:0,1:0", 0.5)
        },
    );
    assert!(viewer.info.volume_colour.is_some(), "the volume was drawn");
    assert_eq!(without, empty);
}

#[test]
fn the_volume_hides_what_lies_behind_it_and_not_what_lies_in_front() {
    let gpu = common::gpu();
    let mut viewer = slab_scene(&gpu);
    let without = SHOT.render(
        &mut viewer,
        &gpu,
        &ViewSettings {
            volume: None,
            ..volume("0:0", 0.5)
        },
    );
    // Clear but for the top of the range, where it is nearly opaque: the
    // slab's edges (ramps between cells) take on little of the lower colours.
    let with = SHOT.render(&mut viewer, &gpu, &volume("0:0,0.95:0,1:0.95", 0.5));
    if let Ok(path) = std::env::var("FLOWSCOPE_KEEP_VOLUME") {
        flowscope::render::scene::save_png(std::path::Path::new(&path), PIXELS, &with).unwrap();
    }
    let camera = viewer.camera;
    // The near obstacle's face towards the eye, in front of the slab: untouched.
    let near = SHOT.pixel(&camera, Vec3::new(2.5, 4.0, 7.5));
    let (a, b) = (SHOT.rgb(&without, near), SHOT.rgb(&with, near));
    assert!(
        a.iter().zip(&b).all(|(p, q)| (p - q).abs() <= 1.0),
        "in front: {a:?} vs {b:?}"
    );
    assert!(
        a.iter()
            .zip(&BACKGROUND)
            .any(|(p, q)| (p - 255.0 * q).abs() > 20.0),
        "the obstacle is drawn there: {a:?}"
    );
    // The far obstacle behind the opaque slab: the slab's colour (the map's
    // top), not the obstacle's.
    let far = SHOT.pixel(&camera, Vec3::new(23.5, 17.0, 7.5));
    let top = ColourMap::Viridis.sample(1.0).map(|c| 255.0 * c);
    let (a, b) = (SHOT.rgb(&without, far), SHOT.rgb(&with, far));
    assert!(
        a.iter().zip(&top).any(|(p, q)| (p - q).abs() > 30.0),
        "without the volume the obstacle shows: {a:?}"
    );
    assert!(
        b.iter().zip(&top).all(|(p, q)| (p - q).abs() <= 6.0),
        "behind the slab: {b:?} vs {top:?}"
    );
}
