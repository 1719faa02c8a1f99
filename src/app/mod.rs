//! The window: winit + egui + wgpu. The solver runs on its own thread (a
//! [`crate::session::Worker`]); this thread uploads the newest field frame,
//! draws the 3D view ([`view`]) and the panel ([`crate::ui`]), and sends
//! commands back.

pub mod persist;
pub mod view;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use winit::application::ApplicationHandler;
use winit::event::WindowEvent;
use winit::event_loop::{ActiveEventLoop, ControlFlow, EventLoop, EventLoopProxy};
use winit::window::{Window, WindowId};

use crate::render::gpu::Gpu;
use crate::scenario::Scenario;
use crate::session::{Backend, Command, Start, Worker};
use crate::ui::{PanelState, ViewInfo};
use view::{View, ViewSettings};

/// How the window was asked to start.
#[derive(Clone, Debug)]
pub struct Options {
    pub scenario: Scenario,
    pub backend: Backend,
    /// See [`Command::SetDisplayLimit`].
    pub display_limit: usize,
    /// Drive the window by itself for this many frames, then exit (tests).
    pub smoke_frames: Option<u64>,
    /// Settings of the last session, and where to keep this one's.
    pub persisted: persist::Persisted,
    pub settings_path: Option<PathBuf>,
    /// Shown in the panel at start (e.g. why another scenario opened).
    pub notice: Option<String>,
}

/// Why the window could not run.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("no display to open a window on ({0}); the headless commands work without one: flowscope run | render | bench | info")]
    NoDisplay(String),
    #[error("{0}")]
    Graphics(String),
}

#[derive(Debug, Clone, Copy)]
struct Wake;

struct Gfx {
    window: Arc<Window>,
    surface: wgpu::Surface<'static>,
    config: wgpu::SurfaceConfiguration,
    gpu: Gpu,
    egui_state: egui_winit::State,
    egui_renderer: egui_wgpu::Renderer,
    view: View,
}

struct App {
    options: Options,
    proxy: EventLoopProxy<Wake>,
    ctx: egui::Context,
    gfx: Option<Gfx>,
    worker: Option<Worker>,
    settings: ViewSettings,
    panel: PanelState,
    info: ViewInfo,
    scenarios: Vec<PathBuf>,
    frames: u64,
    last_frame: Instant,
    /// When the last field frame reached the view.
    last_upload: Option<Instant>,
    /// The grid the probe was placed in.
    probe_grid: [usize; 3],
    /// The last scenario whose contaminant was put on show: a scenario
    /// with sources opens on its concentration, once.
    shown_release: Option<std::path::PathBuf>,
    /// The panel's message the smoke run last printed.
    smoke_message: Option<String>,
    error: Option<AppError>,
    /// A slice being dragged: its axis and where it was grabbed (cells).
    slice_drag: Option<(usize, glam::Vec3)>,
}

/// The smoke run's frame by which every plot type has been drawn at every
/// isovalue (with spheres, streamlines and anaglyph on, from frame 84).
const SMOKE_CYCLE_DONE: u64 = 84 + 240;

/// Field frames closer together than this count as streaming: each is drawn
/// once, without accumulating antialiasing samples. The next frame restarts
/// the picture within tens of milliseconds anyway, and every extra rendering
/// takes the GPU from the solver.
const STREAMING_GAP: Duration = Duration::from_millis(250);

/// Opens the window and runs until it is closed.
pub fn run(options: Options) -> Result<(), AppError> {
    let event_loop = EventLoop::<Wake>::with_user_event().build().map_err(|e| {
        // winit prefixes the reason with a source location; keep the reason.
        let text = e.to_string();
        AppError::NoDisplay(
            text.rsplit(": ")
                .next()
                .unwrap_or(&text)
                .trim_end_matches('.')
                .to_string(),
        )
    })?;
    let proxy = event_loop.create_proxy();
    let dir = options
        .scenario
        .path
        .parent()
        // A bare file name is in the working folder.
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("assets/scenarios"));
    let mut scenarios: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                .collect()
        })
        .unwrap_or_default();
    scenarios.sort();
    let mut app = App {
        panel: PanelState {
            display_limit: options.display_limit,
            ..Default::default()
        },
        proxy,
        ctx: egui::Context::default(),
        gfx: None,
        worker: None,
        settings: options.persisted.view_settings(ViewSettings::default()),
        info: ViewInfo::default(),
        scenarios,
        options,
        frames: 0,
        last_frame: Instant::now(),
        last_upload: None,
        smoke_message: None,
        slice_drag: None,
        probe_grid: [0; 3],
        shown_release: None,
        error: None,
    };
    event_loop
        .run_app(&mut app)
        .map_err(|e| AppError::Graphics(e.to_string()))?;
    app.save_settings();
    match app.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

impl App {
    /// Keeps this session's scenario, view and display options for the next.
    fn save_settings(&self) {
        let Some(path) = &self.options.settings_path else {
            return;
        };
        let scenario = self
            .worker
            .as_ref()
            .map(|w| w.status().path)
            .filter(|p| !p.as_os_str().is_empty())
            .and_then(|p| std::fs::canonicalize(p).ok());
        let camera = self.gfx.as_ref().map(|g| g.view.viewer.camera);
        let angles = camera.map_or([0.0; 2], |c| [c.yaw, c.pitch]);
        let mut saved = persist::Persisted::capture(
            scenario.or(self.options.persisted.scenario.clone()),
            self.panel.display_limit,
            angles,
            &self.settings,
        );
        if camera.is_none() {
            saved.view_angles = self.options.persisted.view_angles;
        }
        if let Err(e) = saved.save(path) {
            eprintln!(
                "note: could not keep the settings in {}: {e}",
                path.display()
            );
        }
    }

    fn init(&mut self, el: &ActiveEventLoop) -> Result<(), AppError> {
        let attributes = Window::default_attributes()
            .with_title("flowscope")
            .with_inner_size(winit::dpi::LogicalSize::new(1280.0, 800.0));
        let window = Arc::new(
            el.create_window(attributes)
                .map_err(|e| AppError::NoDisplay(e.to_string()))?,
        );
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: wgpu::Backends::VULKAN,
            ..wgpu::InstanceDescriptor::new_with_display_handle(Box::new(el.owned_display_handle()))
        });
        let surface = instance
            .create_surface(window.clone())
            .map_err(|e| AppError::Graphics(format!("cannot draw into the window: {e}")))?;
        let adapter =
            crate::render::gpu::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                compatible_surface: Some(&surface),
                ..Default::default()
            }))
            .map_err(|e| {
                AppError::Graphics(
                    crate::render::gpu::GpuError::NoAdapter(e.to_string()).to_string(),
                )
            })?;
        let mut gpu = Gpu::from_adapter(&adapter).map_err(|e| AppError::Graphics(e.to_string()))?;
        gpu.shader_dir = self.options.backend.tuning.shader_dir.clone();
        let caps = surface.get_capabilities(&adapter);
        let format = egui_wgpu::preferred_framebuffer_format(&caps.formats)
            .map_err(|e| AppError::Graphics(format!("{e:?}")))?;
        let size = window.inner_size();
        let config = wgpu::SurfaceConfiguration {
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT,
            format,
            color_space: wgpu::SurfaceColorSpace::Auto,
            width: size.width.max(1),
            height: size.height.max(1),
            present_mode: wgpu::PresentMode::AutoVsync,
            desired_maximum_frame_latency: 2,
            alpha_mode: caps.alpha_modes[0],
            view_formats: vec![],
        };
        surface.configure(&gpu.device, &config);
        let egui_renderer =
            egui_wgpu::Renderer::new(&gpu.device, format, egui_wgpu::RendererOptions::default());
        let egui_state = egui_winit::State::new(
            self.ctx.clone(),
            egui::ViewportId::ROOT,
            &*window,
            Some(window.scale_factor() as f32),
            window.theme(),
            Some(gpu.device.limits().max_texture_dimension_2d as usize),
        );
        let view = View::new(&gpu);
        let proxy = self.proxy.clone();
        let start = Start {
            scenario: self.options.scenario.clone(),
            backend: self.options.backend.clone(),
            display_limit: self.options.display_limit,
            probe: self.panel.probe,
        };
        let worker = Worker::start(start, move || {
            // The window may be gone; then nobody needs waking.
            proxy.send_event(Wake).ok();
        });
        if let Some(device) = crate::render::interop::device_uuid(&gpu) {
            worker.send(Command::ShareDisplay(Some(device)));
        }
        if let Some(notice) = self.options.notice.take() {
            worker.mailbox.report(notice);
        }
        self.worker = Some(worker);
        self.gfx = Some(Gfx {
            window,
            surface,
            config,
            gpu,
            egui_state,
            egui_renderer,
            view,
        });
        Ok(())
    }

    /// The self-driving smoke test: plot types, resizes, minimise, a scenario
    /// change, display limits, sphere impostors, streamlines and anaglyph, then
    /// exit.
    fn smoke(&mut self, el: &ActiveEventLoop) {
        let Some(total) = self.options.smoke_frames else {
            return;
        };
        let (Some(gfx), Some(worker)) = (self.gfx.as_ref(), self.worker.as_ref()) else {
            return;
        };
        let f = self.frames;
        if f % 10 == 5 {
            let plot = crate::ui::PLOTS[(f / 10) as usize % crate::ui::PLOTS.len()];
            crate::ui::set_plot(&mut self.settings, plot);
            self.settings.iso_frac = 0.2 + 0.6 * ((f / 10) % 3) as f32 / 2.0;
        }
        match f {
            20 => {
                let _requested = gfx
                    .window
                    .request_inner_size(winit::dpi::PhysicalSize::new(640, 480));
            }
            30 => gfx.window.set_minimized(true),
            34 => gfx.window.set_minimized(false),
            // A broken scenario first: the panel says why, the cavity runs on.
            37 => {
                if let Some(p) = self.scenarios.iter().find(|p| p.ends_with("broken.toml")) {
                    worker.send(Command::Open(p.clone()));
                }
            }
            40 => {
                if let Some(p) = self.scenarios.iter().find(|p| p.ends_with("cube.toml")) {
                    worker.send(Command::Open(p.clone()));
                }
            }
            // A mesh opened as the file field or a drop would (when the
            // test left one): it joins the cube as an obstacle.
            42 => {
                let ball = std::path::Path::new("ball.stl");
                if ball.exists() {
                    worker.send(crate::ui::open_command(ball.to_path_buf()));
                }
            }
            45 => self.panel.screenshot = true,
            50 => worker.send(Command::Pause),
            55 => worker.send(Command::Step(2)),
            60 => worker.send(Command::Run),
            62 => self.settings.mode = view::SurfaceMode::Spheres,
            // A coarser display grid and back: new volumes mid-run.
            64 => worker.send(Command::SetDisplayLimit(24)),
            78 => worker.send(Command::SetDisplayLimit(256)),
            68 => {
                self.settings.streamlines =
                    Some(crate::render::streamlines::StreamlineSettings::default())
            }
            74 => {
                self.settings.stereo = Some(crate::render::scene::Stereo::default());
                self.settings.grey_background = true;
            }
            84 => self.panel.screenshot = true,
            // The timer's plot types and isovalues repeat every 240 frames:
            // from here on, everything the soak shows has been drawn once.
            SMOKE_CYCLE_DONE => {
                eprintln!("smoke: every plot type drawn at every isovalue since the scripted start")
            }
            _ => {}
        }
        // What the panel says, for the test to read.
        let status = worker.status();
        if status.message != self.smoke_message {
            if let Some(m) = &status.message {
                eprintln!("panel: {m}");
            }
            self.smoke_message = status.message;
        }
        if f >= total {
            eprintln!(
                "smoke run done: {} ({}) at step {}, {} mesh triangles drawn",
                status.scenario,
                status.path.display(),
                status.step,
                gfx.view.viewer.mesh_triangles()
            );
            el.exit();
        }
    }

    fn redraw(&mut self, el: &ActiveEventLoop) {
        self.smoke(el);
        let Some(gfx) = self.gfx.as_mut() else { return };
        let Some(worker) = self.worker.as_ref() else {
            return;
        };
        let now = Instant::now();
        self.info.frame_ms = (now - self.last_frame).as_secs_f32() * 1000.0;
        self.last_frame = now;
        self.frames += 1;
        if let Some(frame) = worker.take_frame() {
            if let Err(e) = gfx.view.upload(&gfx.gpu, &frame) {
                self.error = Some(AppError::Graphics(e.to_string()));
                el.exit();
                return;
            }
            if self.last_upload.is_none() {
                // The first frame framed the grid: look from last session's angles.
                if let Some([yaw, pitch]) = self.options.persisted.angles() {
                    let camera = &mut gfx.view.viewer.camera;
                    camera.yaw = yaw;
                    camera.pitch = pitch;
                    camera.fit(frame.fields.size.map(|n| n as u32), 1.0);
                }
            }
            self.last_upload = Some(now);
            if frame.shared.is_some() && gfx.view.viewer.sharing_refused() {
                // Host copies of every frame from now on.
                worker.send(Command::ShareDisplay(None));
            }
        }
        let status = worker.status();
        if self.panel.reynolds_text.is_empty() && status.reynolds > 0.0 {
            self.panel.reynolds_text = format!("{:.1}", status.reynolds);
        }
        if self.panel.velocity_text.is_empty() && status.velocity > 0.0 {
            self.panel.velocity_text = format!("{:.4}", status.velocity);
        }
        if status.contaminants > 0 && self.shown_release.as_ref() != Some(&status.path) {
            self.shown_release = Some(status.path.clone());
            crate::ui::set_plot(
                &mut self.settings,
                crate::render::derive::PlotType::Concentration,
            );
        }
        if status.size != self.probe_grid && status.size.iter().all(|&n| n > 0) {
            // A new grid: the probe starts at its centre (a corner is a wall).
            self.probe_grid = status.size;
            self.panel.probe = status.size.map(|n| (n / 2) as f32);
            worker.send(Command::SetProbe(self.panel.probe));
        }
        let raw = gfx.egui_state.take_egui_input(&gfx.window);
        let mut commands = Vec::new();
        let mut view_rect = egui::Rect::NOTHING;
        let mut orbit = egui::Vec2::ZERO;
        let mut zoom = 0.0f32;
        // The pointer on the view: where, and whether it pressed with Shift
        // (grab a slice) or clicked with Ctrl (a plot line's end).
        let mut grab = None;
        let mut pointer = None;
        let mut pick_click = None;
        let mut released = false;
        let texture = gfx.view.texture;
        let ppp_now = gfx.window.scale_factor() as f32;
        let scenarios = self.scenarios.clone();
        let mut full = self.ctx.run_ui(raw, |ui| {
            commands.extend(crate::ui::shortcuts(ui.ctx(), &status, &mut self.settings));
            egui::Panel::left("controls")
                .resizable(true)
                .default_size(300.0)
                .show(ui, |ui| {
                    commands.extend(crate::ui::panel(
                        ui,
                        &status,
                        &self.info,
                        &mut self.settings,
                        &mut self.panel,
                        &scenarios,
                    ));
                });
            egui::CentralPanel::default().show(ui, |ui| {
                let (rect, response) =
                    ui.allocate_exact_size(ui.available_size(), egui::Sense::click_and_drag());
                view_rect = rect;
                let modifiers = ui.input(|i| i.modifiers);
                let at = response.interact_pointer_pos();
                if response.drag_started() && modifiers.shift {
                    grab = at;
                }
                if response.dragged() {
                    pointer = at;
                    orbit = response.drag_delta();
                }
                released = response.drag_stopped();
                if response.clicked() && modifiers.command {
                    pick_click = at;
                }
                if response.hovered() {
                    zoom = ui.input(|i| i.smooth_scroll_delta.y);
                }
                if let Some(id) = texture {
                    ui.painter().image(
                        id,
                        rect,
                        egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0)),
                        egui::Color32::WHITE,
                    );
                    let legends =
                        crate::render::legend::Legend::of(&self.settings, &self.info.view);
                    for (slot, legend) in legends.iter().enumerate() {
                        legend.paint(ui.painter(), rect, slot, legends.len());
                    }
                }
            });
            if self.panel.show_help {
                egui::Window::new("Keys")
                    .open(&mut self.panel.show_help)
                    .show(ui.ctx(), |ui| {
                        ui.monospace(crate::ui::HELP);
                    });
            }
        });
        for c in commands {
            worker.send(c);
        }
        // Picking with the mono eye's rays through the view's pixels.
        let aspect = view_rect.aspect_ratio().max(1e-3);
        let ndc = |p: egui::Pos2| {
            glam::Vec2::new(
                2.0 * (p.x - view_rect.left()) / view_rect.width() - 1.0,
                1.0 - 2.0 * (p.y - view_rect.top()) / view_rect.height(),
            )
        };
        let grid = gfx.view.viewer.grid_size();
        if let (Some(p), Some(size)) = (grab, grid) {
            let (origin, dir) = gfx.view.viewer.camera.ray(aspect, ndc(p));
            self.slice_drag = crate::render::slices::pick(&self.settings.slices, size, origin, dir);
        }
        if let (Some((axis, at)), Some(size)) = (self.slice_drag, grid) {
            orbit = egui::Vec2::ZERO;
            if let Some(p) = pointer {
                let (origin, dir) = gfx.view.viewer.camera.ray(aspect, ndc(p));
                if let Some(f) = crate::render::slices::drag(axis, at, origin, dir, size) {
                    self.settings.slices[axis] = Some(f);
                }
            }
        }
        if released {
            self.slice_drag = None;
        }
        if let (Some(p), Some(size)) = (pick_click, grid) {
            let (origin, dir) = gfx.view.viewer.camera.ray(aspect, ndc(p));
            if let Some((_, at)) =
                crate::render::slices::pick(&self.settings.slices, size, origin, dir)
            {
                // Display cells to the solver's (a display cell is the mean
                // of `stride`³ solver cells).
                let stride = status.stride.max(1) as f64;
                let solver = at
                    .to_array()
                    .map(|v| v as f64 * stride + 0.5 * (stride - 1.0));
                if let Some(c) = crate::ui::line_end_clicked(&mut self.panel, solver) {
                    worker.send(c);
                }
            }
        }
        let cam = &mut gfx.view.viewer.camera;
        cam.yaw -= orbit.x * 0.01;
        cam.pitch = (cam.pitch + orbit.y * 0.01).clamp(-1.5, 1.5);
        cam.distance *= (1.0 - zoom * 0.002).clamp(0.5, 2.0);
        let px = [
            (view_rect.width() * ppp_now).max(1.0) as u32,
            (view_rect.height() * ppp_now).max(1.0) as u32,
        ];
        let mut settings = self.settings;
        if self
            .last_upload
            .is_some_and(|t| now.duration_since(t) < STREAMING_GAP)
        {
            settings.aa_samples = 1;
        }
        if view_rect.is_positive() {
            match gfx
                .view
                .draw(&gfx.gpu, &mut gfx.egui_renderer, settings, px)
            {
                Ok(_) => self.info.view = gfx.view.viewer.info,
                Err(e) => {
                    if let Some(w) = self.worker.as_ref() {
                        w.mailbox.report(crate::session::one_line(&e));
                    }
                }
            }
        }
        if std::mem::take(&mut self.panel.screenshot) {
            let path = PathBuf::from(format!("flowscope-{}.png", status.step));
            let message = match gfx.view.screenshot(&gfx.gpu, &path) {
                Ok(()) => format!("saved {}", path.display()),
                Err(e) => e,
            };
            worker.mailbox.report(message);
        }
        gfx.egui_state
            .handle_platform_output(&gfx.window, std::mem::take(&mut full.platform_output));
        let ppp = full.pixels_per_point;
        let jobs = self.ctx.tessellate(std::mem::take(&mut full.shapes), ppp);
        let screen = egui_wgpu::ScreenDescriptor {
            size_in_pixels: [gfx.config.width, gfx.config.height],
            pixels_per_point: ppp,
        };
        let frame = match gfx.surface.get_current_texture() {
            wgpu::CurrentSurfaceTexture::Success(f)
            | wgpu::CurrentSurfaceTexture::Suboptimal(f) => f,
            wgpu::CurrentSurfaceTexture::Outdated | wgpu::CurrentSurfaceTexture::Lost => {
                gfx.surface.configure(&gfx.gpu.device, &gfx.config);
                full.textures_delta.clear();
                gfx.window.request_redraw();
                return;
            }
            _ => {
                full.textures_delta.clear();
                return;
            }
        };
        for (id, deltas) in full.textures_delta.set.drain() {
            for d in deltas {
                gfx.egui_renderer
                    .update_texture(&gfx.gpu.device, &gfx.gpu.queue, id, &d);
            }
        }
        let mut encoder = gfx
            .gpu
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("egui"),
            });
        let user = gfx.egui_renderer.update_buffers(
            &gfx.gpu.device,
            &gfx.gpu.queue,
            &mut encoder,
            &jobs,
            &screen,
        );
        let target = frame
            .texture
            .create_view(&wgpu::TextureViewDescriptor::default());
        {
            let mut pass = encoder
                .begin_render_pass(&wgpu::RenderPassDescriptor {
                    label: Some("egui"),
                    color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                        view: &target,
                        depth_slice: None,
                        resolve_target: None,
                        ops: wgpu::Operations {
                            load: wgpu::LoadOp::Clear(wgpu::Color::BLACK),
                            store: wgpu::StoreOp::Store,
                        },
                    })],
                    ..Default::default()
                })
                .forget_lifetime();
            gfx.egui_renderer.render(&mut pass, &jobs, &screen);
        }
        gfx.gpu
            .queue
            .submit(user.into_iter().chain(std::iter::once(encoder.finish())));
        for id in full.textures_delta.free.drain() {
            gfx.egui_renderer.free_texture(&id);
        }
        gfx.window.pre_present_notify();
        gfx.gpu.queue.present(frame);
        gfx.window.request_redraw();
        el.set_control_flow(ControlFlow::Poll);
    }
}

impl ApplicationHandler<Wake> for App {
    fn resumed(&mut self, el: &ActiveEventLoop) {
        if self.gfx.is_some() {
            return;
        }
        if let Err(e) = self.init(el) {
            self.error = Some(e);
            el.exit();
        }
    }

    fn user_event(&mut self, _el: &ActiveEventLoop, _event: Wake) {
        if let Some(g) = &self.gfx {
            g.window.request_redraw();
        }
    }

    fn window_event(&mut self, el: &ActiveEventLoop, _id: WindowId, event: WindowEvent) {
        let Some(gfx) = self.gfx.as_mut() else { return };
        let response = gfx.egui_state.on_window_event(&gfx.window, &event);
        if response.repaint {
            gfx.window.request_redraw();
        }
        match event {
            WindowEvent::CloseRequested => el.exit(),
            WindowEvent::Resized(size) => {
                if size.width > 0 && size.height > 0 {
                    gfx.config.width = size.width;
                    gfx.config.height = size.height;
                    gfx.surface.configure(&gfx.gpu.device, &gfx.config);
                }
                gfx.window.request_redraw();
            }
            WindowEvent::RedrawRequested => self.redraw(el),
            // A scenario, checkpoint or mesh dropped on the window opens.
            WindowEvent::DroppedFile(path) => {
                if let Some(w) = &self.worker {
                    w.send(crate::ui::open_command(path));
                }
            }
            _ => {}
        }
    }
}
