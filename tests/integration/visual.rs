//! The original's visual techniques on lavapipe: anaglyph compose, sphere
//! impostors, streamlines and accumulation antialiasing.

use glam::{Vec2, Vec3};

use flowscope::render::colour::ColourMap;
use flowscope::render::derive::PlotType;
use flowscope::render::gpu::Gpu;
use flowscope::render::gpu_data::CameraUniform;
use flowscope::render::isosurface::Extractor;
use flowscope::render::present::{compose_pixel, Compose, Presenter};
use flowscope::render::scene::{Anaglyph, Camera, DrawPipeline, Shading, Target};
use flowscope::render::streamlines::Tracer;
use flowscope::render::viewer::{SurfaceMode, ViewSettings, Viewer};
use flowscope::render::volume::Volume;
use flowscope::solver::Fields;

fn gpu() -> Gpu {
    Gpu::headless().expect("a Vulkan adapter (lavapipe: apt install mesa-vulkan-drivers)")
}

fn fill(gpu: &Gpu, target: &Target, rgb: [u8; 3]) {
    let [w, h] = target.size;
    let px: Vec<u8> = (0..w * h)
        .flat_map(|_| [rgb[0], rgb[1], rgb[2], 255])
        .collect();
    gpu.queue.write_texture(
        target.color.as_image_copy(),
        &px,
        wgpu::TexelCopyBufferLayout {
            offset: 0,
            bytes_per_row: Some(4 * w),
            rows_per_image: Some(h),
        },
        target.color.size(),
    );
}

#[test]
fn anaglyph_compose_gives_the_expected_pixels() {
    let gpu = gpu();
    let mut presenter = Presenter::new(&gpu);
    presenter.resize(&gpu, [8, 4]);
    let (left, right) = ([200u8, 50, 100], [30u8, 220, 180]);
    let unit = |c: [u8; 3]| c.map(|v| v as f32 / 255.0);
    for (mode, expect) in [
        // Red from the left, green and blue from the right: the channels
        // pass through (an sRGB round trip, ±1).
        (Compose::Anaglyph(Anaglyph::RedCyan), Some([200, 220, 180])),
        (Compose::Anaglyph(Anaglyph::Dubois), None),
        (Compose::Mono, Some(left)),
    ] {
        let scratch = &presenter.frames.as_ref().unwrap().scratch;
        for (eye, colour) in [(0, left), (1, right)] {
            fill(&gpu, scratch, colour);
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            presenter.accumulate(&gpu, &mut encoder, eye, 0);
            gpu.queue.submit([encoder.finish()]);
        }
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        presenter.compose(&gpu, &mut encoder, mode, 1);
        gpu.queue.submit([encoder.finish()]);
        let px = presenter.read_rgba(&gpu).unwrap();
        let got = [px[0], px[1], px[2]];
        assert!(px.chunks(4).all(|p| p[..3] == got[..]), "uniform picture");
        let want = match expect {
            Some(w) => w,
            None => {
                // Dubois by hand from SPEC §4, in linear light.
                let lin = |c: u8| {
                    let c = c as f64 / 255.0;
                    if c <= 0.04045 {
                        c / 12.92
                    } else {
                        ((c + 0.055) / 1.055).powf(2.4)
                    }
                };
                let (l, r) = (left.map(lin), right.map(lin));
                let ml = [
                    [0.437, 0.449, 0.164],
                    [-0.062, -0.062, -0.024],
                    [-0.048, -0.050, -0.017],
                ];
                let mr = [
                    [-0.011, -0.032, -0.007],
                    [0.377, 0.761, 0.009],
                    [-0.026, -0.093, 1.234],
                ];
                [0, 1, 2].map(|i| {
                    let v: f64 = (0..3).map(|j| ml[i][j] * l[j] + mr[i][j] * r[j]).sum();
                    let v = v.clamp(0.0, 1.0);
                    let s = if v <= 0.0031308 {
                        v * 12.92
                    } else {
                        1.055 * v.powf(1.0 / 2.4) - 0.055
                    };
                    (s * 255.0).round() as u8
                })
            }
        };
        for c in 0..3 {
            assert!(
                (got[c] as i32 - want[c] as i32).abs() <= 1,
                "{mode:?}: got {got:?}, want {want:?}"
            );
        }
        // The CPU reference agrees with the shader.
        let reference = compose_pixel(mode, unit(left), unit(right));
        for c in 0..3 {
            assert!(
                (reference[c] * 255.0 - got[c] as f32).abs() <= 1.0,
                "{mode:?}"
            );
        }
    }
}

/// u = ω ẑ × (r − c): solid-body rotation about the z axis through c.
fn rotation(n: usize, omega: f32) -> Fields {
    let mut f = Fields::new([n, n, 8]);
    let c = (n as f32 - 1.0) / 2.0;
    for z in 0..8 {
        for y in 0..n {
            for x in 0..n {
                let i = f.index(x, y, z);
                f.rho[i] = 1.0;
                f.ux[i] = -omega * (y as f32 - c);
                f.uy[i] = omega * (x as f32 - c);
            }
        }
    }
    f
}

fn volumes(gpu: &Gpu, f: &Fields, blocked: &[f32]) -> (Volume, Volume) {
    let size = f.size.map(|n| n as u32);
    let fields = Volume::fields(gpu, size);
    fields.write_fields(gpu, f).unwrap();
    let solid = Volume::scalar(gpu, size);
    solid.write_scalar(gpu, blocked);
    (fields, solid)
}

fn trace(
    gpu: &Gpu,
    fields: &Volume,
    solid: &Volume,
    seeds: &[Vec3],
    steps: u32,
    dt: f32,
) -> Tracer {
    let mut tracer = Tracer::new(gpu);
    tracer.set_seeds(gpu, seeds, steps).unwrap();
    let mut encoder = gpu.device.create_command_encoder(&Default::default());
    tracer.trace(gpu, &mut encoder, fields, solid, dt, 1e-7);
    gpu.queue.submit([encoder.finish()]);
    tracer
}

#[test]
fn a_streamline_in_solid_body_rotation_returns_to_its_seed() {
    let gpu = gpu();
    let (n, omega) = (48, 0.004f32);
    let f = rotation(n, omega);
    let (fields, solid) = volumes(&gpu, &f, &vec![0.0; f.rho.len()]);
    let c = (n as f32 - 1.0) / 2.0;
    let seeds = [
        Vec3::new(c + 10.0, c, 3.0),
        Vec3::new(c, c - 17.5, 4.2),
        Vec3::new(c + 3.3, c + 4.1, 2.0),
    ];
    let steps = 1000;
    let period = std::f32::consts::TAU / omega;
    let tracer = trace(&gpu, &fields, &solid, &seeds, steps, period / steps as f32);
    for (k, seed) in seeds.iter().enumerate() {
        let line = tracer.read_line(&gpu, k as u32).unwrap();
        assert_eq!(line.len(), steps as usize + 1, "line {k} ran every step");
        let end = Vec3::from_slice(&line[steps as usize][..3]);
        assert!(
            (end - *seed).length() < 1e-3,
            "line {k} ends {} cells from its seed",
            (end - *seed).length()
        );
        // Halfway round it is opposite the seed, and it keeps its radius.
        let half = Vec3::from_slice(&line[steps as usize / 2][..3]);
        let centre = Vec3::new(c, c, seed.z);
        assert!((half - (2.0 * centre - *seed)).length() < 1e-2);
        let r = (*seed - centre).length();
        let speed = omega * r;
        assert!((line[10][3] - speed).abs() < 1e-5 * speed.max(1.0) + 1e-6);
    }
}

#[test]
fn streamlines_stop_at_an_obstacle_and_seeds_inside_one_give_none() {
    let gpu = gpu();
    let size = [40, 12, 12];
    let mut f = Fields::new(size);
    f.ux.iter_mut().for_each(|u| *u = 0.05);
    f.rho.iter_mut().for_each(|r| *r = 1.0);
    // A solid block at x = 25..30 across the whole channel.
    let mut blocked = vec![0.0f32; f.rho.len()];
    for z in 0..12 {
        for y in 0..12 {
            for x in 25..30 {
                blocked[f.index(x, y, z)] = 1.0;
            }
        }
    }
    let (fields, solid) = volumes(&gpu, &f, &blocked);
    let seeds = [
        Vec3::new(3.0, 6.0, 6.0),
        Vec3::new(27.0, 6.0, 6.0),
        Vec3::new(33.0, 5.0, 5.0),
        Vec3::new(-2.0, 5.0, 5.0),
    ];
    // A fifth of a cell per step.
    let tracer = trace(&gpu, &fields, &solid, &seeds, 500, 4.0);
    let lengths = tracer.read_lengths(&gpu).unwrap();
    // Upstream: runs to just before the block (the nearest cell of the next
    // point would be solid), far short of the step limit.
    let up = tracer.read_line(&gpu, 0).unwrap();
    let last = up.last().unwrap();
    assert!(
        last[0] < 24.5 && last[0] >= 24.3,
        "stopped at x = {}",
        last[0]
    );
    assert!(up
        .iter()
        .all(|p| (p[1] - 6.0).abs() < 1e-5 && (p[2] - 6.0).abs() < 1e-5));
    assert!((up.len() as u32) < 501);
    // Inside the block, and outside the domain: no line at all.
    assert_eq!(lengths[1], 0);
    assert_eq!(lengths[3], 0);
    // Downstream of the block: runs to the outflow edge.
    let down = tracer.read_line(&gpu, 2).unwrap();
    assert!(down.last().unwrap()[0] > 38.7, "{:?}", down.last());
}

/// (x − c)² + … : spheres of radius √iso around the middle of an n³ box.
fn sphere_scalar(n: usize) -> Vec<f32> {
    let c = (n as f32 - 1.0) / 2.0 + 0.17;
    let mut v = Vec::with_capacity(n * n * n);
    for z in 0..n {
        for y in 0..n {
            for x in 0..n {
                let d = Vec3::new(x as f32, y as f32, z as f32) - Vec3::splat(c);
                v.push(d.length());
            }
        }
    }
    v
}

#[test]
fn one_impostor_per_straddling_cell_on_the_surface() {
    let gpu = gpu();
    let n = 40;
    let values = sphere_scalar(n);
    let volume = Volume::scalar(&gpu, [n as u32; 3]);
    volume.write_scalar(&gpu, &values);
    let iso = 13.3;
    let mut spheres = Extractor::spheres(&gpu, 64);
    let count = spheres.extract(&gpu, &volume, iso).unwrap();
    let at = |x: usize, y: usize, z: usize| values[x + n * (y + n * z)];
    let mut cpu = 0;
    for z in 0..n - 1 {
        for y in 0..n - 1 {
            for x in 0..n - 1 {
                let below = (0..8)
                    .filter(|k| at(x + (k & 1), y + ((k >> 1) & 1), z + ((k >> 2) & 1)) < iso)
                    .count();
                cpu += usize::from(below > 0 && below < 8);
            }
        }
    }
    assert_eq!(count as usize, cpu, "GPU spheres vs CPU straddling cells");
    assert!(spheres.capacity >= count, "grew past the first 64");
    let c = Vec3::splat((n as f32 - 1.0) / 2.0 + 0.17);
    for s in spheres.read_spheres(&gpu, count).unwrap() {
        let r = (Vec3::from_slice(&s[..3]) - c).length();
        assert!((r - iso).abs() < 0.1, "sphere {s:?} at radius {r}");
        assert!((s[3] - iso).abs() < 0.1, "colour value is the field there");
    }
}

/// Draws spheres (centre, value, radius) with viridis colours by value, seen
/// from +x, one draw each in the order given, and returns the centre pixel.
fn centre_pixel(gpu: &Gpu, spheres: &[([f32; 4], f32)]) -> [u8; 3] {
    use wgpu::util::DeviceExt;
    let target = Target::new(gpu, [64, 64]);
    let camera = Camera {
        target: Vec3::ZERO,
        distance: 20.0,
        yaw: 0.0,
        pitch: 0.0,
        fov_y: 0.6,
    };
    let eye = camera.eye_view(1.0, None, Vec2::ZERO);
    let shading = Shading {
        colour: [1.0; 3],
        map: Some((ColourMap::Viridis, 0.0, 1.0)),
    };
    let pipeline = DrawPipeline::spheres(gpu);
    let mut caches: Vec<Option<_>> = spheres.iter().map(|_| None).collect();
    for ((sphere, radius), cache) in spheres.iter().zip(caches.iter_mut()) {
        let buffer = gpu
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: None,
                contents: bytemuck::cast_slice(&[*sphere]),
                usage: wgpu::BufferUsages::STORAGE,
            });
        let uniform: CameraUniform = shading.uniform(&eye, [*radius, 0.0, 0.0, 0.0]);
        pipeline.prepare(gpu, cache, &buffer, &uniform);
    }
    let mut encoder = gpu.device.create_command_encoder(&Default::default());
    {
        let mut pass = target.begin(&mut encoder, [0.0; 3], None);
        for draw in caches.iter().flatten() {
            pipeline.draw(&mut pass, draw, 3);
        }
    }
    gpu.queue.submit([encoder.finish()]);
    let px = target.read_rgba(gpu).unwrap();
    let i = 4 * (32 * 64 + 32);
    [px[i], px[i + 1], px[i + 2]]
}

#[test]
fn impostors_write_their_true_depth() {
    let gpu = gpu();
    // Viridis: value 0 is purple (blue over green), value 1 yellow.
    let purple = |p: [u8; 3]| p[2] > p[1] && p[0] > 30;
    let yellow = |p: [u8; 3]| p[1] > 150 && p[0] > 150 && p[2] < 100;
    let big = ([0.0, 0.0, 0.0, 0.0], 4.0);
    for order in [[0usize, 1], [1, 0]] {
        // A small sphere well in front of the big one shows, whichever is
        // drawn first.
        let s = [big, ([6.0, 0.0, 0.0, 1.0], 1.0)];
        let p = centre_pixel(&gpu, &[s[order[0]], s[order[1]]]);
        assert!(yellow(p), "nearer sphere in front: {p:?}");
        // A small sphere whose centre is nearer than the big one's but which
        // lies inside it: only the big one's surface shows. (Depth from the
        // quads alone would put the small one in front.)
        let s = [big, ([2.5, 0.0, 0.0, 1.0], 1.0)];
        let p = centre_pixel(&gpu, &[s[order[0]], s[order[1]]]);
        assert!(purple(p), "the big sphere's surface is in front: {p:?}");
    }
}

fn vortex(n: usize) -> Fields {
    let mut f = Fields::new([n, n, n]);
    let c = (n as f32 - 1.0) / 2.0;
    for z in 0..n {
        for y in 0..n {
            for x in 0..n {
                let i = f.index(x, y, z);
                let d = Vec3::new(x as f32 - c, y as f32 - c, z as f32 - c);
                f.rho[i] = 1.0;
                f.ux[i] = 0.05 * (1.0 - d.length() / c).max(0.0) - 0.01 * d.y / c;
                f.uy[i] = 0.01 * d.x / c;
            }
        }
    }
    f
}

fn picture(gpu: &Gpu, viewer: &mut Viewer, settings: &ViewSettings) -> Vec<f32> {
    viewer.render_all(gpu, settings, [96, 64]).unwrap();
    let (px, _) = viewer.read_rgba(gpu).unwrap();
    px.iter().map(|&v| v as f32).collect()
}

fn mean_difference(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum::<f32>() / a.len() as f32
}

#[test]
fn accumulation_converges_at_edges_and_restarts_on_change() {
    let gpu = gpu();
    let mut viewer = Viewer::new(&gpu);
    viewer.upload(&gpu, &vortex(24), &[], 0, None).unwrap();
    let with = |n| ViewSettings {
        aa_samples: n,
        ..Default::default()
    };
    let images: Vec<Vec<f32>> = [1, 2, 4, 8, 16, 32, 64]
        .iter()
        .map(|&n| picture(&gpu, &mut viewer, &with(n)))
        .collect();
    let d: Vec<f32> = images
        .windows(2)
        .map(|w| mean_difference(&w[0], &w[1]))
        .collect();
    // Each doubling changes the picture less (Halton jitter: error ~ 1/N).
    assert!(d[1] > d[3] && d[3] > d[5], "differences {d:?}");
    assert!(d[5] < 0.35 * d[1], "differences {d:?}");
    // What antialiasing changed lies at edges: pixels with a contrasting
    // neighbour in the unjittered picture (silhouettes, the box lines).
    let (w, h) = (96usize, 64usize);
    let (one, many) = (&images[0], &images[6]);
    let contrast = |a: usize, b: usize| {
        (0..3)
            .map(|c| (one[4 * a + c] - one[4 * b + c]).abs())
            .fold(0.0, f32::max)
    };
    let mut partial = 0;
    for y in 1..h - 1 {
        for x in 1..w - 1 {
            let p = y * w + x;
            if (0..3).any(|c| (one[4 * p + c] - many[4 * p + c]).abs() > 24.0) {
                let edge = [p - 1, p + 1, p - w, p + w]
                    .iter()
                    .any(|&q| contrast(p, q) > 24.0);
                assert!(edge, "a large change away from any edge at ({x}, {y})");
                partial += 1;
            }
        }
    }
    assert!(partial > 20, "only {partial} partial-coverage pixels");
    // Complete: nothing more to do until something changes.
    let s = with(16);
    viewer.render_all(&gpu, &s, [96, 64]).unwrap();
    assert_eq!(viewer.info.samples, 16);
    assert!(!viewer.render(&gpu, &s, [96, 64]).unwrap());
    viewer.camera.yaw += 0.05;
    assert!(viewer.render(&gpu, &s, [96, 64]).unwrap());
    assert_eq!(viewer.info.samples, 1, "a camera move restarts");
    viewer.render_all(&gpu, &s, [96, 64]).unwrap();
    let iso = ViewSettings { iso_frac: 0.3, ..s };
    viewer.render(&gpu, &iso, [96, 64]).unwrap();
    assert_eq!(viewer.info.samples, 1, "an isovalue change restarts");
    viewer.render_all(&gpu, &iso, [96, 64]).unwrap();
    viewer.upload(&gpu, &vortex(24), &[], 0, None).unwrap();
    viewer.render(&gpu, &iso, [96, 64]).unwrap();
    assert_eq!(viewer.info.samples, 1, "a new field frame restarts");
}

#[test]
fn the_plain_surface_needs_no_read_back_and_matches_the_one_that_reads_back() {
    let gpu = gpu();
    let mut viewer = Viewer::new(&gpu);
    viewer.upload(&gpu, &vortex(24), &[], 0, None).unwrap();
    for mode in [SurfaceMode::Mesh, SurfaceMode::Spheres] {
        for (iso_frac, iso) in [(0.4, None), (0.5, Some(0.02))] {
            let plain = ViewSettings {
                aa_samples: 1,
                mode,
                iso_frac,
                iso,
                ..Default::default()
            };
            // Streamlines read the ranges back before anything is drawn.
            let reading = ViewSettings {
                streamlines: Some(Default::default()),
                ..plain
            };
            viewer.render_all(&gpu, &reading, [96, 64]).unwrap();
            let want = viewer.info;
            viewer.render_all(&gpu, &plain, [96, 64]).unwrap();
            let got = viewer.info;
            assert_eq!(got.range, want.range, "{plain:?}");
            assert!(
                (got.isovalue - want.isovalue).abs() <= 1e-7,
                "{got:?} {want:?}"
            );
            assert!(got.triangles + got.spheres > 100, "{got:?}");
            assert_eq!((got.triangles, got.spheres), (want.triangles, want.spheres));
        }
    }
}

#[test]
fn the_viewer_draws_every_mode_mono_and_anaglyph() {
    let gpu = gpu();
    let mut viewer = Viewer::new(&gpu);
    viewer.upload(&gpu, &vortex(24), &[], 0, None).unwrap();
    let base = ViewSettings {
        aa_samples: 2,
        ..Default::default()
    };
    let stereo = Some(flowscope::render::scene::Stereo::default());
    let streamlines = Some(flowscope::render::streamlines::StreamlineSettings::default());
    let mut pictures = Vec::new();
    for s in [
        base,
        ViewSettings {
            mode: SurfaceMode::Spheres,
            ..base
        },
        ViewSettings {
            mode: SurfaceMode::None,
            streamlines,
            ..base
        },
        ViewSettings {
            stereo,
            grey_background: true,
            ..base
        },
        ViewSettings {
            mode: SurfaceMode::Spheres,
            plot: PlotType::Ux,
            stereo,
            streamlines,
            ..base
        },
    ] {
        let img = picture(&gpu, &mut viewer, &s);
        let background = if s.grey_background { 128.0 } else { 31.0 };
        let drawn = img
            .chunks(4)
            .filter(|p| (p[0] - background).abs() > 12.0)
            .count();
        assert!(drawn > 200, "{s:?}: only {drawn} pixels drawn");
        match s.mode {
            SurfaceMode::Spheres => assert!(viewer.info.spheres > 100),
            SurfaceMode::Mesh => assert!(viewer.info.triangles > 100),
            SurfaceMode::None => assert_eq!((viewer.info.spheres, viewer.info.triangles), (0, 0)),
        }
        if s.streamlines.is_some() {
            // The preset rake (no inlet here: mid-domain, 16 × 12 seeds).
            assert_eq!(viewer.info.streamlines, 192);
            let lengths = viewer.tracer().read_lengths(&gpu).unwrap();
            assert!(lengths.iter().filter(|&&n| n > 10).count() > 100);
        }
        pictures.push(img);
    }
    // Anaglyph differs from mono.
    assert!(mean_difference(&pictures[0], &pictures[3]) > 5.0);
}
