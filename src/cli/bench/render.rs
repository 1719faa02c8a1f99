//! `flowscope bench --render`: the visualisation passes' GPU and wall times on
//! analytic fields.

use super::{median, median_ms, BenchArgs};
use crate::system::Tuning;

/// Waits until the GPU has finished everything submitted.
pub(super) fn wait(gpu: &crate::render::gpu::Gpu) -> anyhow::Result<()> {
    gpu.device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| anyhow::anyhow!("waiting for the GPU: {e}"))?;
    Ok(())
}

/// A sphere-and-vortex velocity field whose speed isosurface is a closed,
/// wrinkled surface.
fn vortex_field(n: usize) -> crate::solver::Fields {
    let mut f = crate::solver::Fields::new([n, n, n]);
    let c = (n as f32 - 1.0) / 2.0;
    for z in 0..n {
        for y in 0..n {
            for x in 0..n {
                let i = f.index(x, y, z);
                let (dx, dy, dz) = (x as f32 - c, y as f32 - c, z as f32 - c);
                let r = (dx * dx + dy * dy + dz * dz).sqrt() / c;
                let wobble = 1.0 + 0.1 * (dx * 0.3).sin() * (dy * 0.2).cos() * (dz * 0.25).sin();
                f.ux[i] = 0.05 * (1.0 - r * wobble).max(0.0) - 0.01 * dy / c;
                f.uy[i] = 0.01 * dx / c;
                f.uz[i] = 0.002 * (dz * 0.1).sin();
            }
        }
    }
    f
}

/// ux is a gyroid of the given period (cells): its zero surface fills the
/// whole box, for counts of impostors in the millions.
fn gyroid_field(n: usize, period: f32) -> crate::solver::Fields {
    let mut f = crate::solver::Fields::new([n, n, n]);
    let k = std::f32::consts::TAU / period;
    for z in 0..n {
        for y in 0..n {
            for x in 0..n {
                let i = f.index(x, y, z);
                let (a, b, c) = (x as f32 * k + 0.3, y as f32 * k + 0.2, z as f32 * k + 0.1);
                f.ux[i] = a.sin() * b.cos() + b.sin() * c.cos() + c.sin() * a.cos();
            }
        }
    }
    f
}

/// The visualisation passes on analytic fields. Times include submission
/// and the wait for the GPU (an upper bound on the GPU time); frames go
/// through the whole picture path (scene, accumulate, compose).
pub(super) fn bench_render(args: &BenchArgs, tuning: &Tuning) -> anyhow::Result<()> {
    use crate::render::derive::PlotType;
    use crate::render::gpu::{Gpu, GpuTimer};
    use crate::render::isosurface::Extractor;
    use crate::render::passes::{DerivePass, MinMax};
    use crate::render::raymarch::{Opacity, VolumePreset};
    use crate::render::scene::Stereo;
    use crate::render::streamlines::{Rake, Tracer};
    use crate::render::viewer::{SurfaceMode, ViewSettings, Viewer};
    use crate::render::volume::{FieldStaging, Volume};

    const HD: [u32; 2] = [1920, 1080];
    let mut gpu = Gpu::headless()?;
    gpu.shader_dir = tuning.shader_dir.clone();
    println!(
        "adapter: {} ({:?}, {:?})",
        gpu.info.name, gpu.info.device_type, gpu.info.backend
    );
    // A new camera angle per repeat, so every frame is drawn afresh.
    let mut turn = 0.0f32;
    let mut frame = |viewer: &mut Viewer, settings: &ViewSettings| -> anyhow::Result<()> {
        turn += 1e-3;
        viewer.camera.yaw = -2.2 + turn;
        viewer.render_all(&gpu, settings, HD)?;
        wait(&gpu)
    };
    println!(
        "{:>6} {:>14} {:>14} {:>12} {:>12} {:>12} {:>16} {:>12} {:>22}",
        "size",
        "derive+range",
        "extract (ms)",
        "(GPU time)",
        "(no surface)",
        "triangles",
        "1920x1080 (ms)",
        "(scene GPU)",
        "anaglyph 16 AA (ms)"
    );
    let mut uploads = Vec::new();
    for &n in &args.sizes {
        let f = vortex_field(n);
        let size = [n as u32; 3];
        let fields = Volume::fields(&gpu, size);
        // The window's upload of a frame, and its host-side part alone (the
        // same interleave into ordinary memory): the rest is the GPU's copy.
        let mut staging = FieldStaging::default();
        fields.write_fields_through(&gpu, &f, &mut staging)?;
        let upload_ms = median_ms(args.repeats, || {
            fields.write_fields_through(&gpu, &f, &mut staging)?;
            wait(&gpu)
        })?;
        let mut texels = vec![[0.0f32; 4]; f.rho.len()];
        let interleave_ms = median_ms(args.repeats, || {
            use rayon::prelude::*;
            texels
                .par_chunks_mut(1 << 14)
                .enumerate()
                .for_each(|(k, chunk)| {
                    for (i, t) in chunk.iter_mut().enumerate() {
                        let c = (k << 14) + i;
                        *t = [f.rho[c], f.ux[c], f.uy[c], f.uz[c]];
                    }
                });
            Ok(())
        })?;
        uploads.push((n, upload_ms, interleave_ms));
        let scalar = Volume::scalar(&gpu, size);
        let no_contaminant = Volume::scalar(&gpu, size);
        let derive = DerivePass::new(&gpu);
        let minmax = MinMax::new(&gpu);
        let mut range = (0.0f32, 0.0f32);
        let derive_ms = median_ms(args.repeats, || {
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            derive.run(
                &gpu,
                &mut encoder,
                (&fields, &no_contaminant),
                &scalar,
                PlotType::Speed,
            );
            gpu.queue.submit([encoder.finish()]);
            range = minmax.compute(&gpu, &scalar, f32::MIN)?;
            Ok(())
        })?;
        let mut extractor = Extractor::new(&gpu, 1 << 22);
        extractor.timer = GpuTimer::new(&gpu);
        let iso = range.0 + 0.5 * (range.1 - range.0);
        let mut vertices = 0;
        let mut gpu_ms = Vec::new();
        let extract_ms = median_ms(args.repeats, || {
            vertices = extractor.extract(&gpu, &scalar, iso)?;
            if let Some(t) = &extractor.timer {
                gpu_ms.push(t.read_ms(&gpu)?);
            }
            Ok(())
        })?;
        let timed = |ms: Vec<f64>| {
            if ms.is_empty() {
                "-".to_string()
            } else {
                format!("{:.2}", median(ms))
            }
        };
        let extract_gpu = timed(gpu_ms);
        // The same pass where no cube holds the surface: what every cube costs.
        let mut empty_ms = Vec::new();
        for _ in 0..args.repeats {
            extractor.extract(&gpu, &scalar, range.1 + 1.0)?;
            if let Some(t) = &extractor.timer {
                empty_ms.push(t.read_ms(&gpu)?);
            }
        }
        let empty_gpu = timed(empty_ms);
        let mut viewer = Viewer::new(&gpu);
        viewer.upload(&gpu, &f, &[], 0, None)?;
        // The plain surface, as in BENCHMARKS.md.
        let mono = ViewSettings {
            aa_samples: 1,
            colour_by: None,
            ..Default::default()
        };
        let frame_ms = median_ms(args.repeats, || frame(&mut viewer, &mono))?;
        viewer.scene_timer = GpuTimer::new(&gpu);
        let mut scene_ms = Vec::new();
        for _ in 0..args.repeats {
            frame(&mut viewer, &mono)?;
            if let Some(t) = &viewer.scene_timer {
                scene_ms.push(t.read_ms(&gpu)?);
            }
        }
        viewer.scene_timer = None;
        let scene_gpu = timed(scene_ms);
        let anaglyph = ViewSettings {
            stereo: Some(Stereo::default()),
            grey_background: true,
            aa_samples: 16,
            colour_by: None,
            ..Default::default()
        };
        let anaglyph_ms = median_ms(args.repeats, || frame(&mut viewer, &anaglyph))?;
        println!(
            "{:>6} {:>14.2} {:>14.2} {:>12} {:>12} {:>12} {:>16.2} {:>12} {:>22.1}",
            n,
            derive_ms,
            extract_ms,
            extract_gpu,
            empty_gpu,
            vertices / 3,
            frame_ms,
            scene_gpu,
            anaglyph_ms
        );
    }

    println!();
    println!(
        "{:>6} {:>12} {:>16} {:>10}",
        "size", "spheres", "1920x1080 (ms)", "fps"
    );
    for &n in &args.sizes {
        // Period 40 gives about 2 million straddling cells at 256³.
        let f = gyroid_field(n, 40.0);
        let mut viewer = Viewer::new(&gpu);
        viewer.upload(&gpu, &f, &[], 0, None)?;
        let spheres = ViewSettings {
            plot: PlotType::Ux,
            iso: Some(0.0),
            mode: SurfaceMode::Spheres,
            sphere_radius: 0.6,
            aa_samples: 1,
            colour_by: None,
            ..Default::default()
        };
        let ms = median_ms(args.repeats, || frame(&mut viewer, &spheres))?;
        println!(
            "{:>6} {:>12} {:>16.2} {:>10.0}",
            n,
            viewer.info.spheres,
            ms,
            1e3 / ms
        );
    }

    println!();
    println!(
        "{:>6} {:>30} {:>16}",
        "size", "3 slices 1920x1080 frame (ms)", "scene GPU (ms)"
    );
    for &n in &args.sizes {
        // Three planes through the middle, contour lines on, no surface:
        // the scene pass is the slices (and the box outline).
        let f = vortex_field(n);
        let mut viewer = Viewer::new(&gpu);
        viewer.upload(&gpu, &f, &[], 0, None)?;
        let slices = ViewSettings {
            mode: SurfaceMode::None,
            aa_samples: 1,
            slices: [Some(0.5); 3],
            contours: 8,
            ..Default::default()
        };
        let ms = median_ms(args.repeats, || frame(&mut viewer, &slices))?;
        viewer.scene_timer = GpuTimer::new(&gpu);
        let mut scene_ms = Vec::new();
        for _ in 0..args.repeats {
            frame(&mut viewer, &slices)?;
            if let Some(t) = &viewer.scene_timer {
                scene_ms.push(t.read_ms(&gpu)?);
            }
        }
        let scene = if scene_ms.is_empty() {
            "-".to_string()
        } else {
            format!("{:.3}", median(scene_ms))
        };
        println!("{n:>6} {ms:>30.2} {scene:>16}");
    }

    println!();
    println!("volume rendering at 1920x1080:");
    println!(
        "{:>6} {:>8} {:>6} {:>24} {:>24}",
        "size", "view", "step", "volume, clear (GPU ms)", "volume, preset (GPU ms)"
    );
    for &n in &args.sizes {
        // "framed": the default camera, the box fitted to the view; "close":
        // nearer, the box beyond every edge of the picture. "clear": so
        // little opacity that every ray runs through the whole box (no early
        // stop); "preset": the vorticity preset.
        let f = vortex_field(n);
        let mut viewer = Viewer::new(&gpu);
        viewer.upload(&gpu, &f, &[], 0, None)?;
        let size = [n as u32; 3];
        viewer.volume_timer = GpuTimer::new(&gpu);
        for (view, nearer, step) in [
            ("framed", 1.0, 1.0f32),
            ("framed", 1.0, 0.5),
            ("close", 0.6, 1.0),
        ] {
            let mut camera = crate::render::scene::Camera::framing(size);
            camera.fit(size, HD[0] as f32 / HD[1] as f32);
            camera.distance *= nearer;
            viewer.camera = camera;
            let mut row = Vec::new();
            for opacity in ["0:0.002,1:0.002", ""] {
                let mut volume = VolumePreset::Vorticity.settings();
                if !opacity.is_empty() {
                    volume.opacity = Opacity::parse(opacity).map_err(anyhow::Error::msg)?;
                }
                volume.step = step;
                let settings = ViewSettings {
                    mode: SurfaceMode::None,
                    aa_samples: 1,
                    volume: Some(volume),
                    ..Default::default()
                };
                let mut ms = Vec::new();
                for _ in 0..args.repeats {
                    frame(&mut viewer, &settings)?;
                    if let Some(t) = &viewer.volume_timer {
                        ms.push(t.read_ms(&gpu)?);
                    }
                }
                row.push(if ms.is_empty() {
                    "-".to_string()
                } else {
                    format!("{:.3}", median(ms))
                });
            }
            println!("{n:>6} {view:>8} {step:>6} {:>24} {:>24}", row[0], row[1]);
        }
    }

    println!();
    println!("a streamed frame at 1920x1080 (a new field frame: derived, reduced and drawn; wall ms with the wait):");
    println!(
        "{:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "size", "surface", "+slices", "+volume", "slices", "volume", "nothing"
    );
    for &n in &args.sizes {
        // What the window's GPU work per streamed frame costs the solver.
        let f = vortex_field(n);
        let mut viewer = Viewer::new(&gpu);
        viewer.upload(&gpu, &f, &[], 0, None)?;
        let surface = ViewSettings {
            aa_samples: 1,
            colour_by: None,
            ..Default::default()
        };
        let views = [
            surface,
            ViewSettings {
                slices: [Some(0.5); 3],
                ..surface
            },
            ViewSettings {
                volume: Some(Default::default()),
                ..surface
            },
            ViewSettings {
                mode: SurfaceMode::None,
                slices: [Some(0.5); 3],
                ..surface
            },
            ViewSettings {
                mode: SurfaceMode::None,
                volume: Some(Default::default()),
                ..surface
            },
            ViewSettings {
                mode: SurfaceMode::None,
                ..surface
            },
        ];
        let mut row = Vec::new();
        for view in &views {
            frame(&mut viewer, view)?;
            row.push(median_ms(args.repeats, || {
                viewer.new_frame();
                frame(&mut viewer, view)
            })?);
        }
        println!(
            "{n:>6} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
            row[0], row[1], row[2], row[3], row[4], row[5]
        );
    }

    println!();
    println!(
        "{:>6} {:>18} {:>22}",
        "size", "field upload (ms)", "host interleave (ms)"
    );
    for (n, upload, interleave) in uploads {
        println!("{n:>6} {upload:>18.2} {interleave:>22.2}");
    }

    println!();
    println!(
        "{:>6} {:>8} {:>8} {:>12} {:>12}",
        "size", "lines", "steps", "points", "trace (ms)"
    );
    for &n in &args.sizes {
        let f = vortex_field(n);
        let size = [n as u32; 3];
        let fields = Volume::fields(&gpu, size);
        fields.write_fields(&gpu, &f)?;
        let blocked = Volume::scalar(&gpu, size);
        blocked.write_scalar(&gpu, &vec![0.0; n * n * n]);
        let hi = glam::Vec3::splat(n as f32 - 1.0);
        // 10,000 lines, or as many as one storage binding holds (software
        // adapters bind less).
        let fit = gpu.device.limits().max_storage_buffer_binding_size / (1001 * 16);
        let rake = Rake::Box {
            lo: hi * 0.2,
            hi: hi * 0.8,
            count: fit.min(10_000) as u32,
            seed: 1,
        };
        let mut tracer = Tracer::new(&gpu);
        tracer.set_seeds(&gpu, &rake.seeds(), 1000)?;
        // Half a cell per step at the largest speed (0.05), no stagnation stop:
        // every line runs its 1000 steps unless it leaves the box.
        let trace_ms = median_ms(args.repeats, || {
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            tracer.trace(&gpu, &mut encoder, &fields, &blocked, 10.0, 0.0);
            gpu.queue.submit([encoder.finish()]);
            wait(&gpu)
        })?;
        let points: u64 = tracer.read_lengths(&gpu)?.iter().map(|&n| n as u64).sum();
        println!(
            "{:>6} {:>8} {:>8} {:>12} {:>12.2}",
            n, tracer.lines, tracer.steps, points, trace_ms
        );
    }
    Ok(())
}
