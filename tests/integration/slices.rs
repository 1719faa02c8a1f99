//! Slices through the field (lavapipe): exact colours of a linear field at
//! known pixels, contour lines where the field crosses their levels, solid
//! cells in the obstacle colour.

use glam::Vec3;

use crate::common::{self, Shot};
use flowscope::render::colour::ColourMap;
use flowscope::render::derive::PlotType;
use flowscope::render::viewer::{SurfaceMode, ViewSettings, Viewer};
use flowscope::solver::flags::{self, CellType};
use flowscope::solver::Fields;

const SIZE: [usize; 3] = [32, 16, 8];
const PIXELS: [u32; 2] = [640, 400];
const SHOT: Shot = Shot(PIXELS);

/// ux = 0.001 x: linear along x, so trilinear sampling is exact.
fn linear() -> Fields {
    let mut f = Fields::new(SIZE);
    for z in 0..SIZE[2] {
        for y in 0..SIZE[1] {
            for x in 0..SIZE[0] {
                let i = f.index(x, y, z);
                f.rho[i] = 1.0;
                f.ux[i] = 0.001 * x as f32;
            }
        }
    }
    f
}

/// A colour as the picture stores it: the shaders' values are display values.
fn byte(c: f32) -> f32 {
    255.0 * c.clamp(0.0, 1.0)
}

#[test]
fn a_slice_shows_a_linear_field_in_exact_colours_with_contours_at_their_levels() {
    let gpu = common::gpu();
    let mut viewer = Viewer::new(&gpu);
    // A block of moving-wall cells (solid, not drawn as an obstacle surface)
    // that the slice cuts.
    let mut cell_flags = vec![flags::make(CellType::Fluid, 0); SIZE.iter().product()];
    for z in 0..SIZE[2] {
        for y in 10..14 {
            for x in 24..28 {
                cell_flags[x + SIZE[0] * (y + SIZE[1] * z)] = flags::make(CellType::MovingWall, 0);
            }
        }
    }
    viewer
        .upload(&gpu, &linear(), &cell_flags, 1, None)
        .unwrap();
    let settings = ViewSettings {
        plot: PlotType::Ux,
        colour_by: None,
        colour_map: ColourMap::Viridis,
        mode: SurfaceMode::None,
        aa_samples: 1,
        slices: [None, None, Some(0.5)],
        ..Default::default()
    };
    let plain = SHOT.render(&mut viewer, &gpu, &settings);
    if let Ok(path) = std::env::var("FLOWSCOPE_KEEP_SLICE") {
        flowscope::render::scene::save_png(std::path::Path::new(&path), PIXELS, &plain).unwrap();
    }
    let (lo, hi) = viewer.info.range;
    assert!(
        (lo - 0.0).abs() < 1e-7 && (hi - 0.031).abs() < 1e-6,
        "{lo} {hi}"
    );
    let z = 3.5; // half of 0..7
    for x in [2.3f32, 7.7, 13.1, 18.6, 21.4] {
        for y in [2.2f32, 6.5, 8.9] {
            let at = SHOT.pixel(&viewer.camera, Vec3::new(x, y, z));
            let want = ColourMap::Viridis
                .sample((0.001 * x - lo) / (hi - lo))
                .map(byte);
            let got = SHOT.rgb(&plain, at);
            for c in 0..3 {
                assert!(
                    (got[c] - want[c]).abs() <= 3.0,
                    "x {x} y {y}: {got:?} vs {want:?}"
                );
            }
        }
    }
    // Solid cells cut by the slice: the obstacle colour, unlit.
    let got = SHOT.rgb(&plain, SHOT.pixel(&viewer.camera, Vec3::new(25.5, 11.5, z)));
    let want = [0.6f32, 0.62, 0.68].map(byte);
    for c in 0..3 {
        assert!((got[c] - want[c]).abs() <= 2.0, "{got:?} vs {want:?}");
    }
    // Contours at 4 levels: dark lines where ux = lo + k (hi - lo) / 4, i.e.
    // x = 7.75, 15.5, 23.25; the colour untouched between them.
    let contoured = SHOT.render(
        &mut viewer,
        &gpu,
        &ViewSettings {
            contours: 4,
            ..settings
        },
    );
    for x in [7.75f32, 15.5] {
        let at = SHOT.pixel(&viewer.camera, Vec3::new(x, 6.5, z));
        let (line, without) = (SHOT.rgb(&contoured, at), SHOT.rgb(&plain, at));
        assert!(
            line.iter().sum::<f32>() < 0.6 * without.iter().sum::<f32>(),
            "no line at x {x}: {line:?} vs {without:?}"
        );
    }
    for x in [4.0f32, 11.6, 19.4] {
        let at = SHOT.pixel(&viewer.camera, Vec3::new(x, 6.5, z));
        assert_eq!(
            SHOT.rgb(&contoured, at),
            SHOT.rgb(&plain, at),
            "a line at x {x}"
        );
    }
    // No slice: nothing drawn there but the background.
    let none = SHOT.render(
        &mut viewer,
        &gpu,
        &ViewSettings {
            slices: [None; 3],
            ..settings
        },
    );
    let at = SHOT.pixel(&viewer.camera, Vec3::new(13.1, 6.5, z));
    assert_ne!(SHOT.rgb(&none, at), SHOT.rgb(&plain, at));
}

#[test]
fn every_colour_map_in_the_shader_is_the_one_the_legend_draws() {
    let gpu = common::gpu();
    let mut viewer = Viewer::new(&gpu);
    viewer.upload(&gpu, &linear(), &[], 1, None).unwrap();
    for map in [
        ColourMap::Viridis,
        ColourMap::Inferno,
        ColourMap::Turbo,
        ColourMap::CoolWarm,
    ] {
        let settings = ViewSettings {
            plot: PlotType::Ux,
            colour_by: Some(PlotType::Ux),
            colour_map: map,
            mode: SurfaceMode::None,
            aa_samples: 1,
            slices: [None, None, Some(0.5)],
            ..Default::default()
        };
        let picture = SHOT.render(&mut viewer, &gpu, &settings);
        let (lo, hi) = viewer.info.colour_range.expect("coloured");
        for x in [1.2f32, 9.9, 16.4, 24.8, 29.5] {
            let at = SHOT.pixel(&viewer.camera, Vec3::new(x, 7.5, 3.5));
            let want = map.sample((0.001 * x - lo) / (hi - lo)).map(byte);
            let got = SHOT.rgb(&picture, at);
            for c in 0..3 {
                assert!(
                    (got[c] - want[c]).abs() <= 3.0,
                    "{} at x {x}: {got:?} vs {want:?}",
                    map.name()
                );
            }
        }
    }
}

#[test]
fn a_slice_takes_its_own_field_and_range_over_its_plane() {
    let gpu = common::gpu();
    let mut viewer = Viewer::new(&gpu);
    // ux = 0.001 x + 0.0005 y, uy = 0.002 z, uz = 0.001 (x − 10): linear,
    // so sampling is exact.
    let mut f = Fields::new(SIZE);
    for z in 0..SIZE[2] {
        for y in 0..SIZE[1] {
            for x in 0..SIZE[0] {
                let i = f.index(x, y, z);
                f.rho[i] = 1.0;
                f.ux[i] = 0.001 * x as f32 + 0.0005 * y as f32;
                f.uy[i] = 0.002 * z as f32;
                f.uz[i] = 0.001 * (x as f32 - 10.0);
            }
        }
    }
    viewer.upload(&gpu, &f, &[], 1, None).unwrap();
    // An x-slice at x = 10.5 (the grid's cells 0 to 31): ux from 0.0105 to
    // 0.0105 + 0.0005 · 15 on it, while the field spans 0 to 0.0385.
    let settings = ViewSettings {
        plot: PlotType::Speed,
        colour_by: None,
        mode: SurfaceMode::None,
        aa_samples: 1,
        slices: [Some(10.5 / 31.0), None, None],
        slice_colour_by: [Some(PlotType::Ux); 3],
        ..Default::default()
    };
    SHOT.render(&mut viewer, &gpu, &settings);
    assert_eq!(viewer.info.slice_colour[1..], [None, None]);
    let (field, (lo, hi)) = viewer.info.slice_colour[0].expect("slices shown");
    assert_eq!(field, PlotType::Ux);
    assert!(
        (lo - 0.0105).abs() < 1e-6 && (hi - 0.018).abs() < 1e-6,
        "{lo} {hi}"
    );
    // Two slices: each its own range (the y-slice at y = 15: ux from
    // 0.0075 to 0.0385), and with it its own colours.
    let two = ViewSettings {
        slices: [Some(10.5 / 31.0), Some(1.0), None],
        ..settings
    };
    let picture = SHOT.render(&mut viewer, &gpu, &two);
    let (_, (lo, hi)) = viewer.info.slice_colour[0].unwrap();
    assert!(
        (lo - 0.0105).abs() < 1e-6 && (hi - 0.018).abs() < 1e-6,
        "{lo} {hi}"
    );
    let (_, (lo, hi)) = viewer.info.slice_colour[1].unwrap();
    assert!(
        (lo - 0.0075).abs() < 1e-6 && (hi - 0.0385).abs() < 1e-6,
        "{lo} {hi}"
    );
    for (p, t) in [
        // On the x-slice: ux = 0.0105 + 0.0005 y.
        (Vec3::new(10.5, 12.0, 5.0), 12.0 / 15.0),
        // On the y-slice: ux = 0.0075 + 0.001 x.
        (Vec3::new(24.0, 15.0, 3.0), 24.0 / 31.0),
    ] {
        let want = ColourMap::Viridis.sample(t).map(byte);
        let got = SHOT.rgb(&picture, SHOT.pixel(&viewer.camera, p));
        for c in 0..3 {
            assert!((got[c] - want[c]).abs() <= 3.0, "{p}: {got:?} vs {want:?}");
        }
    }
    // Each its own field, and a legend each.
    let own = ViewSettings {
        slice_colour_by: [Some(PlotType::Ux), Some(PlotType::Uz), None],
        ..two
    };
    SHOT.render(&mut viewer, &gpu, &own);
    let (field, (lo, hi)) = viewer.info.slice_colour[1].unwrap();
    assert_eq!(field, PlotType::Uz);
    assert!(
        (lo + 0.010).abs() < 1e-6 && (hi - 0.021).abs() < 1e-6,
        "{lo} {hi}"
    );
    let titles: Vec<String> = flowscope::render::legend::Legend::of(&own, &viewer.info)
        .into_iter()
        .map(|l| l.title)
        .collect();
    assert_eq!(titles, ["x slice: ux", "y slice: uz"]);
    // Another field, and a fixed range kept as given.
    SHOT.render(
        &mut viewer,
        &gpu,
        &ViewSettings {
            slices: [None, None, Some(2.0 / 7.0)],
            slice_colour_by: [Some(PlotType::Uy); 3],
            ..settings
        },
    );
    let (field, (lo, hi)) = viewer.info.slice_colour[2].unwrap();
    assert_eq!(field, PlotType::Uy);
    assert!(
        (lo - 0.004).abs() < 1e-6 && (hi - 0.004).abs() < 1e-6,
        "{lo} {hi}"
    );
    let fixed = ViewSettings {
        slice_range: [Some((-0.01, 0.05)); 3],
        ..settings
    };
    let picture = SHOT.render(&mut viewer, &gpu, &fixed);
    assert_eq!(viewer.info.slice_colour[0].unwrap().1, (-0.01, 0.05));
    let at = SHOT.pixel(&viewer.camera, Vec3::new(10.5, 7.0, 3.0));
    let want = ColourMap::Viridis
        .sample((0.0105 + 0.0035 + 0.01) / 0.06)
        .map(byte);
    let got = SHOT.rgb(&picture, at);
    for c in 0..3 {
        assert!((got[c] - want[c]).abs() <= 3.0, "{got:?} vs {want:?}");
    }
    // Its legend names the slices' field.
    let legends = flowscope::render::legend::Legend::of(&fixed, &viewer.info);
    assert!(
        legends
            .iter()
            .any(|l| l.title == "slices: ux" && l.range == (-0.01, 0.05)),
        "{legends:?}"
    );
    // A signed field on a z-slice: uz = 0.001 (x − 10) from −0.010 to
    // 0.021; a diverging map centres its range on zero at once (the same
    // frame, only the map changed).
    let signed = ViewSettings {
        slices: [None, None, Some(0.5)],
        slice_colour_by: [Some(PlotType::Uz); 3],
        ..settings
    };
    SHOT.render(&mut viewer, &gpu, &signed);
    let (_, (lo, hi)) = viewer.info.slice_colour[2].unwrap();
    assert!(
        (lo + 0.010).abs() < 1e-6 && (hi - 0.021).abs() < 1e-6,
        "{lo} {hi}"
    );
    SHOT.render(
        &mut viewer,
        &gpu,
        &ViewSettings {
            colour_map: ColourMap::CoolWarm,
            ..signed
        },
    );
    let (_, (lo, hi)) = viewer.info.slice_colour[2].unwrap();
    assert!(
        (lo + 0.021).abs() < 1e-6 && (hi - 0.021).abs() < 1e-6,
        "{lo} {hi}"
    );
}

#[test]
fn arrows_on_a_slice_point_along_the_flow_in_its_plane() {
    let gpu = common::gpu();
    let mut viewer = Viewer::new(&gpu);
    let dark = |c: [f32; 3]| c.iter().all(|&v| v < 20.0);
    for (u, along, beside) in [
        (
            [0.01f32, 0.0, 0.003],
            Vec3::new(4.0, 7.5, 3.5),
            Vec3::new(7.5, 10.5, 3.5),
        ),
        (
            [0.0, 0.01, 0.003],
            Vec3::new(7.5, 4.0, 3.5),
            Vec3::new(4.0, 7.5, 3.5),
        ),
    ] {
        let mut f = Fields::new(SIZE);
        for i in 0..f.rho.len() {
            f.rho[i] = 1.0;
            f.ux[i] = u[0];
            f.uy[i] = u[1];
            // Out of the plane: not drawn.
            f.uz[i] = u[2];
        }
        viewer.upload(&gpu, &f, &[], 1, None).unwrap();
        let mut camera = flowscope::render::scene::Camera::framing(SIZE.map(|n| n as u32));
        camera.pitch = 1.55;
        camera.fit(SIZE.map(|n| n as u32), PIXELS[0] as f32 / PIXELS[1] as f32);
        viewer.camera = camera;
        // Arrows every 16 cells: centres at x = 7.5 and 23.5, y = 7.5; the
        // longest (all arrows here) 14.4 cells long, its shaft 1.6 wide.
        let settings = ViewSettings {
            plot: PlotType::Speed,
            colour_by: None,
            mode: SurfaceMode::None,
            aa_samples: 1,
            slices: [None, None, Some(0.5)],
            arrows: 16,
            ..Default::default()
        };
        let picture = SHOT.render(&mut viewer, &gpu, &settings);
        assert!(
            dark(SHOT.rgb(&picture, SHOT.pixel(&viewer.camera, along))),
            "{u:?}: no arrow at {along}"
        );
        assert!(
            !dark(SHOT.rgb(&picture, SHOT.pixel(&viewer.camera, beside))),
            "{u:?}: an arrow at {beside}"
        );
        let plain = SHOT.render(
            &mut viewer,
            &gpu,
            &ViewSettings {
                arrows: 0,
                ..settings
            },
        );
        assert!(!dark(SHOT.rgb(&plain, SHOT.pixel(&viewer.camera, along))));
    }
}

#[test]
fn a_streamed_frame_is_coloured_by_its_own_range_without_a_read_back() {
    let gpu = common::gpu();
    let mut viewer = Viewer::new(&gpu);
    viewer.upload(&gpu, &linear(), &[], 1, None).unwrap();
    let settings = ViewSettings {
        plot: PlotType::Ux,
        colour_by: None,
        mode: SurfaceMode::None,
        aa_samples: 1,
        slices: [None, None, Some(0.5)],
        arrows: 4,
        ..Default::default()
    };
    SHOT.render(&mut viewer, &gpu, &settings);
    let (lo, hi) = viewer.info.slice_colour[2].unwrap().1;
    assert!(lo.abs() < 1e-7 && (hi - 0.031).abs() < 1e-6, "{lo} {hi}");
    // The next frame reversed and three times as fast, with a cross flow
    // (the arrows' speed is another field, derived in the same submission):
    // one rendering, as a streamed frame gets, with no wait for what comes
    // back.
    let mut next = linear();
    for (i, u) in next.ux.iter_mut().enumerate() {
        *u = 0.003 * (31 - i % SIZE[0]) as f32;
    }
    next.uy.fill(0.05);
    viewer.upload(&gpu, &next, &[], 1, None).unwrap();
    assert!(!viewer.render(&gpu, &settings, PIXELS).unwrap());
    let (picture, _) = viewer.read_rgba(&gpu).unwrap();
    for x in [2.3f32, 13.1, 21.4, 28.2] {
        let at = SHOT.pixel(&viewer.camera, Vec3::new(x, 4.6, 3.5));
        let want = ColourMap::Viridis.sample(1.0 - x / 31.0).map(byte);
        let got = SHOT.rgb(&picture, at);
        for c in 0..3 {
            assert!(
                (got[c] - want[c]).abs() <= 3.0,
                "x {x}: {got:?} vs {want:?}"
            );
        }
    }
    // The legend's range follows.
    viewer.settle(&gpu).unwrap();
    let (lo, hi) = viewer.info.slice_colour[2].unwrap().1;
    assert!(lo.abs() < 1e-7 && (hi - 0.093).abs() < 1e-6, "{lo} {hi}");
    let top = (0.093f32 * 0.093 + 0.05 * 0.05).sqrt();
    assert!((viewer.info.slice_speed - top).abs() < 1e-6);
}
