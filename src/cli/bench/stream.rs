//! `flowscope bench --stream`: the solver's speed while the window's consumer
//! takes every frame it can, against the same solver alone.

use std::time::{Duration, Instant};

use super::render::wait;
use super::{median, BenchArgs};
use crate::render::gpu::Gpu;
use crate::render::viewer::{SurfaceMode, ViewSettings, Viewer};
use crate::scenario::Scenario;
use crate::session::{select, Backend, Command, Frame, Gpus, Start, Worker};
use crate::system::Tuning;

/// The solver's speed while the visualiser streams (see `BenchArgs::stream`).
pub(super) fn bench_stream(args: &BenchArgs, tuning: &Tuning) -> anyhow::Result<()> {
    let mut gpu = Gpu::headless()?;
    gpu.shader_dir = tuning.shader_dir.clone();
    let source = args
        .scenario
        .clone()
        .unwrap_or_else(|| "assets/scenarios/cavity.toml".into());
    println!(
        "adapter: {} ({:?}); scenario {}; drawing {:?}",
        gpu.info.name,
        gpu.info.device_type,
        source.display(),
        args.view
    );
    let share = crate::render::interop::device_uuid(&gpu).filter(|_| !args.host_frames);
    println!(
        "{:>6} {:>8} {:>16} {:>16} {:>8} {:>12} {:>14} {:>8}",
        "size", "display", "alone (MLUPS)", "streaming", "kept", "frames/s", "frame (ms)", "shared"
    );
    for &n in &args.sizes {
        let set = [format!("domain.size=[{n},{n},{n}]")];
        let scenario = Scenario::load(&source, &set)?;
        let backend = Backend {
            choice: args.solver.into(),
            precision: args.precisions[0].into(),
            gpus: Gpus::One,
            tuning: tuning.clone(),
        };
        // Alone: the same solver, stepping in chunks of the same length as the
        // worker's (it aims at 25 chunks per second).
        let mut solver =
            select::build(&backend, &scenario, crate::system::available_memory())?.solver;
        solver.step(20)?;
        let began = Instant::now();
        let (mut steps, mut chunk) = (0u64, 2u64);
        while began.elapsed().as_secs_f64() < args.seconds / 2.0 {
            let t = Instant::now();
            solver.step(chunk)?;
            steps += chunk;
            if t.elapsed().as_secs_f64() < 0.02 {
                chunk = (chunk * 2).min(8192);
            }
        }
        let alone = scenario.cells() as f64 * steps as f64 / began.elapsed().as_secs_f64() / 1e6;
        drop(solver);

        let start = Start {
            scenario: scenario.clone(),
            backend,
            display_limit: args.display_limit,
            probe: [0.0; 3],
        };
        let worker = Worker::start(start, || {});
        if let Some(device) = share {
            worker.send(Command::ShareDisplay(Some(device)));
        }
        let mut viewer = Viewer::new(&gpu);
        // The plain surface: extraction without a range read back (the
        // figures in BENCHMARKS.md are of it).
        let mut settings = ViewSettings {
            aa_samples: 1,
            colour_by: None,
            ..Default::default()
        };
        match args.view {
            super::StreamView::Surface => {}
            super::StreamView::Slices => settings.slices = [Some(0.5); 3],
            super::StreamView::Volume => settings.volume = Some(Default::default()),
            super::StreamView::SlicesOnly => {
                settings.slices = [Some(0.5); 3];
                settings.mode = SurfaceMode::None;
            }
            super::StreamView::VolumeOnly => {
                settings.volume = Some(Default::default());
                settings.mode = SurfaceMode::None;
            }
        }
        // What the window does with a frame: import (or upload) it, then
        // derive, extract and draw, waiting for the GPU.
        let consume = |viewer: &mut Viewer, frame: Frame| -> anyhow::Result<()> {
            if args.consumer != "none" {
                viewer.upload(
                    &gpu,
                    &frame.fields,
                    &frame.flags,
                    frame.geometry,
                    frame.shared.as_ref(),
                )?;
                if viewer.sharing_refused() && share.is_some() {
                    anyhow::bail!("the solver's display frames could not be imported");
                }
            }
            match args.consumer.as_str() {
                "full" => _ = viewer.render(&gpu, &settings, [1920, 1080])?,
                "extract" => viewer.update(&gpu, &settings)?,
                _ => {}
            }
            wait(&gpu)
        };
        // Let it load, settle its chunk length and make (and import) its
        // display frames, which takes a few hundred milliseconds once.
        let warm = Instant::now();
        while warm.elapsed().as_secs_f64() < 1.5
            || (worker.status().step < 50 && warm.elapsed().as_secs() < 60)
        {
            match worker.take_frame() {
                Some(frame) => consume(&mut viewer, frame)?,
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        let before = worker.status();
        let (start_step, began) = (before.step, Instant::now());
        let shared_before = viewer.shared_uploads;
        let (mut frames, mut frame_ms) = (0u32, Vec::new());
        while began.elapsed().as_secs_f64() < args.seconds {
            match worker.take_frame() {
                Some(frame) => {
                    let t = Instant::now();
                    consume(&mut viewer, frame)?;
                    frame_ms.push(t.elapsed().as_secs_f64() * 1e3);
                    frames += 1;
                }
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        let secs = began.elapsed().as_secs_f64();
        let status = worker.status();
        if let Some(m) = status.message {
            anyhow::bail!("the solver thread stopped: {m}");
        }
        let streaming = scenario.cells() as f64 * (status.step - start_step) as f64 / secs / 1e6;
        let shown = crate::solver::display::coarse_size(
            [n; 3],
            crate::solver::display::stride_for([n; 3], args.display_limit),
        );
        // Frames that reached their texture by a copy within the GPU.
        let shared = viewer.shared_uploads - shared_before;
        println!(
            "{:>6} {:>8} {:>16.1} {:>16.1} {:>7.1}% {:>12.1} {:>14.2} {:>7.0}%",
            n,
            format!("{}³", shown[0]),
            alone,
            streaming,
            100.0 * streaming / alone,
            frames as f64 / secs,
            median(frame_ms),
            100.0 * shared as f64 / frames.max(1) as f64
        );
        let (a, b) = (before.timing, status.timing);
        let chunks = (b.chunks - a.chunks).max(1) as f64;
        let per = |x: f64, y: f64| 1e3 * (x - y) / chunks;
        println!(
            "{:>6} per chunk of {:.1} steps: stepping {:.2} ms (delivering {:.2}), sampling {:.2}, rest of the loop {:.2}",
            "",
            (b.steps - a.steps) as f64 / chunks,
            per(b.stepping, a.stepping),
            per(b.delivering, a.delivering),
            per(b.sampling, a.sampling),
            per(b.other, a.other) - per(b.sampling, a.sampling),
        );
    }
    Ok(())
}
