//! The control panel: reads what the worker and the view report, and returns
//! commands. It owns no simulation state.

use std::path::PathBuf;

use glam::Vec3;

use crate::render::colour::ColourMap;
use crate::render::derive::PlotType;
use crate::render::raymarch::{Opacity, VolumePreset, VolumeSettings};
use crate::render::scene::{Anaglyph, Stereo};
use crate::render::streamlines::{LineStyle, Rake, StreamlineSettings};
use crate::render::viewer::ViewerInfo;
use crate::render::viewer::{SurfaceMode, ViewSettings};
use crate::scenario::Turbulence;
use crate::session::{Command, Status};

/// What the view reports for display.
#[derive(Clone, Debug, Default)]
pub struct ViewInfo {
    pub view: ViewerInfo,
    pub frame_ms: f32,
}

/// Where streamlines start, as the panel offers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RakeKind {
    /// The renderer's own seeds for the scenario.
    #[default]
    Preset,
    Line,
    Plane,
    Box,
}

impl RakeKind {
    pub const ALL: [RakeKind; 4] = [
        RakeKind::Preset,
        RakeKind::Line,
        RakeKind::Plane,
        RakeKind::Box,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RakeKind::Preset => "preset",
            RakeKind::Line => "line",
            RakeKind::Plane => "plane",
            RakeKind::Box => "box",
        }
    }
}

/// The rake as the panel edits it: fractions of the domain, so it stays put
/// across grid sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RakeControls {
    pub kind: RakeKind,
    pub centre: [f32; 3],
    /// Extent as a fraction of the domain.
    pub extent: f32,
    /// The axis a line runs along, or a plane faces.
    pub axis: usize,
    pub count: u32,
}

impl Default for RakeControls {
    fn default() -> Self {
        RakeControls {
            kind: RakeKind::Preset,
            centre: [0.1, 0.5, 0.5],
            extent: 0.6,
            axis: 0,
            count: 12,
        }
    }
}

impl RakeControls {
    /// The rake in cells of a `size` grid.
    pub fn rake(&self, size: [usize; 3]) -> Rake {
        let s = Vec3::new(size[0] as f32, size[1] as f32, size[2] as f32) - Vec3::ONE;
        let c = Vec3::from(self.centre) * s;
        let (u, v) = ((self.axis + 1) % 3, (self.axis + 2) % 3);
        let (mut a, mut b) = (Vec3::ZERO, Vec3::ZERO);
        a[u] = self.extent * s[u];
        b[v] = self.extent * s[v];
        let n = self.count.max(1);
        match self.kind {
            RakeKind::Line => {
                let mut d = Vec3::ZERO;
                d[self.axis] = self.extent * s[self.axis];
                Rake::Line {
                    from: c - d * 0.5,
                    to: c + d * 0.5,
                    count: n,
                }
            }
            RakeKind::Plane => Rake::Plane {
                corner: c - (a + b) * 0.5,
                a,
                b,
                counts: [n, n],
            },
            RakeKind::Box => Rake::Box {
                lo: c - s * self.extent * 0.5,
                hi: c + s * self.extent * 0.5,
                count: n * n,
                seed: 1,
            },
            RakeKind::Preset => Rake::Preset,
        }
    }
}

/// UI-side state that persists between frames (not simulation state).
#[derive(Clone, Debug, Default)]
pub struct PanelState {
    pub reynolds_text: String,
    pub velocity_text: String,
    /// Set when the user asked for a screenshot; the app saves the next frame.
    pub screenshot: bool,
    pub iso_text: String,
    pub path_text: String,
    pub show_help: bool,
    /// Probe point (cell coordinates); its series is in the status's history.
    pub probe: [f32; 3],
    pub rake: RakeControls,
    /// The display limit last asked for (cells per axis of a cube).
    pub display_limit: usize,
    /// The plot line as typed, `X0,Y0,Z0:X1,Y1,Z1:N` (as `--probe`), and
    /// why it could not be read.
    pub line_text: String,
    pub line_error: Option<String>,
    /// The first end of a plot line clicked on a slice (solver cells), until
    /// the second is clicked.
    pub line_start: Option<[f64; 3]>,
}

/// Display limits the panel offers.
pub const DISPLAY_LIMITS: [usize; 8] = [64, 128, 192, 256, 384, 512, 768, 1024];

pub const PLOTS: [PlotType; 9] = [
    PlotType::Pressure,
    PlotType::Speed,
    PlotType::Ux,
    PlotType::Uy,
    PlotType::Uz,
    PlotType::Vorticity,
    PlotType::Curl,
    PlotType::Q,
    PlotType::Concentration,
];

/// A labelled text field for a number: `Some` once Enter is pressed in it,
/// holding the number typed (`None` if it is not one).
fn entered(ui: &mut egui::Ui, label: &str, text: &mut String) -> Option<Option<f64>> {
    ui.horizontal(|ui| {
        let label = ui.label(label);
        let r = ui.text_edit_singleline(text).labelled_by(label.id);
        (r.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter)))
            .then(|| text.trim().parse::<f64>().ok())
    })
    .inner
}

/// Draws the side panel; returns the commands for the solver thread. The
/// sections follow ParaView's order (simulation, fields and surface, display,
/// plots, files) and scroll when the window is short.
pub fn panel(
    ui: &mut egui::Ui,
    status: &Status,
    view: &ViewInfo,
    settings: &mut ViewSettings,
    state: &mut PanelState,
    scenarios: &[PathBuf],
) -> Vec<Command> {
    let mut commands = Vec::new();
    egui::ScrollArea::vertical()
        .auto_shrink([false, false])
        .show(ui, |ui| {
            header(ui, status);
            section(ui, "Simulation", |ui| {
                run_section(ui, status, view, state, &mut commands)
            });
            section(ui, "Fields and surface", |ui| {
                fields_section(ui, status, view, settings, state, &mut commands)
            });
            section(ui, "Display", |ui| {
                let grid = crate::solver::display::coarse_size(status.size, status.stride.max(1));
                display_limit(ui, status, state, grid, &mut commands);
                display(ui, view, settings, state, grid);
            });
            section(ui, "Plots", |ui| commands.extend(plots(ui, status, state)));
            section(ui, "Files", |ui| {
                files_section(ui, status, state, scenarios, &mut commands)
            });
        });
    commands
}

/// A collapsible section, open at first.
fn section(ui: &mut egui::Ui, title: &str, body: impl FnOnce(&mut egui::Ui)) {
    egui::CollapsingHeader::new(egui::RichText::new(title).strong())
        .default_open(true)
        .show(ui, body);
}

const ERROR_COLOUR: egui::Color32 = egui::Color32::from_rgb(255, 120, 90);
const WARNING_COLOUR: egui::Color32 = egui::Color32::from_rgb(240, 200, 90);

/// What runs, why this solver, and what is wrong or risky.
fn header(ui: &mut egui::Ui, status: &Status) {
    ui.heading("flowscope");
    ui.label(format!(
        "{}  ({}×{}×{})",
        status.scenario, status.size[0], status.size[1], status.size[2]
    ));
    ui.label(&status.solver);
    // The line that says why: "no usable CUDA GPU (…)" when auto fell back.
    if !status.backend.is_empty() && status.backend != status.solver {
        let colour = if status.backend.contains("no usable CUDA") {
            WARNING_COLOUR
        } else {
            ui.visuals().text_color()
        };
        ui.colored_label(colour, &status.backend);
    }
    for w in &status.warnings {
        ui.colored_label(WARNING_COLOUR, format!("warning: {w}"));
    }
    if let Some(m) = &status.message {
        ui.colored_label(ERROR_COLOUR, m);
    }
}

fn run_section(
    ui: &mut egui::Ui,
    status: &Status,
    view: &ViewInfo,
    state: &mut PanelState,
    commands: &mut Vec<Command>,
) {
    ui.horizontal(|ui| {
        if status.running {
            if ui.button("Pause").clicked() {
                commands.push(Command::Pause);
            }
        } else if ui.button("Run").clicked() {
            commands.push(Command::Run);
        }
        if ui.button("Step").clicked() {
            commands.push(Command::Step(1));
        }
        if ui.button("Reset").clicked() {
            commands.push(Command::Reset);
        }
    });
    ui.label(format!(
        "step {}   {:.1} MLUPS   {:.1} ms/frame",
        status.step, status.mlups, view.frame_ms
    ));
    ui.label(format!(
        "Re {:.1}   u {:.4}   τ {:.4}   max |u| {:.4}",
        status.reynolds, status.velocity, status.tau, status.max_speed
    ));
    let mut les = status.turbulence == Turbulence::Smagorinsky;
    let toggled = ui
        .checkbox(&mut les, "subgrid model (LES)")
        .on_hover_text(
            "Smagorinsky–Lilly large-eddy simulation, for turbulent flows (Reynolds number \
             above ~10³); turning it on takes the regularized collision",
        )
        .changed();
    if toggled {
        commands.push(Command::SetTurbulence(if les {
            Turbulence::Smagorinsky
        } else {
            Turbulence::None
        }));
    }
    ui.horizontal(|ui| {
        use crate::scenario::Method;
        ui.label("method");
        for (method, name, hint) in [
            (
                Method::Lbm,
                "lattice Boltzmann",
                "D3Q19 lattice Boltzmann, on the CPU or CUDA",
            ),
            (
                Method::Projection,
                "projection",
                "incompressible Navier–Stokes on a staggered grid, pressure by \
                 multigrid-preconditioned CG, on the CPU or CUDA",
            ),
        ] {
            let on = status.method == method;
            if ui.selectable_label(on, name).on_hover_text(hint).clicked() && !on {
                commands.push(Command::SetMethod(method));
            }
        }
    });
    ui.label(format!("collision {}", status.collision));
    match entered(ui, "Reynolds", &mut state.reynolds_text) {
        Some(Some(re)) => commands.push(Command::SetReynolds(re)),
        Some(None) => state.reynolds_text = format!("{:.1}", status.reynolds),
        None => {}
    }
    match entered(ui, "speed (lattice)", &mut state.velocity_text) {
        Some(Some(u)) => commands.push(Command::SetVelocity(u)),
        Some(None) => state.velocity_text = format!("{:.4}", status.velocity),
        None => {}
    }
}

fn fields_section(
    ui: &mut egui::Ui,
    status: &Status,
    view: &ViewInfo,
    settings: &mut ViewSettings,
    state: &mut PanelState,
    commands: &mut Vec<Command>,
) {
    egui::ComboBox::from_label("plot")
        .selected_text(settings.plot.name())
        .show_ui(ui, |ui| {
            for p in PLOTS {
                if ui.selectable_label(settings.plot == p, p.name()).clicked() {
                    set_plot(settings, p);
                }
            }
        });
    if status.contaminants > 0 {
        ui.label(format!(
            "{} contaminant field{} (concentration shows the first)",
            status.contaminants,
            if status.contaminants == 1 { "" } else { "s" }
        ));
        for (name, readings) in &status.receptors {
            let values: Vec<String> = readings
                .iter()
                .map(|r| format!("c {:.3e}, dose {:.3e}", r.concentration, r.dose))
                .collect();
            ui.label(format!("{name}: {}", values.join("; ")));
        }
    }
    ui.horizontal(|ui| {
        let mut mean = status.show_mean;
        if ui
            .checkbox(&mut mean, "mean")
            .on_hover_text(
                "Every plot shows the time average of the fields instead of the current \
                 ones, kept from the step this is first turned on (a sample every 10 steps)",
            )
            .changed()
        {
            commands.push(Command::ShowMean(mean));
        }
        if ui
            .add_enabled(
                status.averaging.is_some(),
                egui::Button::new("reset average"),
            )
            .on_hover_text("Start the time average over from the current step")
            .clicked()
        {
            commands.push(Command::ResetAverages);
        }
    });
    if let Some((from, samples)) = status.averaging {
        ui.label(format!("averaged over {samples} samples since step {from}"));
    }
    let mut frac = settings.iso_frac;
    if ui
        .add(egui::Slider::new(&mut frac, 0.0..=1.0).text("isovalue (fraction of range)"))
        .changed()
    {
        settings.iso_frac = frac;
        settings.iso = None;
    }
    let v = &view.view;
    let shown = match settings.mode {
        SurfaceMode::Spheres => format!("{} spheres", v.spheres),
        _ => format!("{} triangles", v.triangles),
    };
    ui.label(format!(
        "isovalue {:.4e} in [{:.3e}, {:.3e}], {shown}",
        v.isovalue, v.range.0, v.range.1
    ));
    if let Some(v) = entered(ui, "isovalue", &mut state.iso_text) {
        settings.iso = v.map(|v| v as f32).filter(|v| v.is_finite());
    }
    colouring(ui, view, settings);
}

fn display_limit(
    ui: &mut egui::Ui,
    status: &Status,
    state: &mut PanelState,
    grid: [usize; 3],
    commands: &mut Vec<Command>,
) {
    ui.horizontal(|ui| {
        egui::ComboBox::from_label("display limit")
            .selected_text(format!("{}³", state.display_limit))
            .show_ui(ui, |ui| {
                for l in DISPLAY_LIMITS {
                    if ui
                        .selectable_value(&mut state.display_limit, l, format!("{l}³"))
                        .clicked()
                    {
                        commands.push(Command::SetDisplayLimit(l));
                    }
                }
            });
    })
    .response
    .on_hover_text("larger grids are averaged over blocks of cells before they are shown");
    if status.stride > 1 {
        ui.label(format!(
            "showing {}×{}×{}: means of {s}×{s}×{s} cells",
            grid[0],
            grid[1],
            grid[2],
            s = status.stride
        ));
    }
}

fn files_section(
    ui: &mut egui::Ui,
    status: &Status,
    state: &mut PanelState,
    scenarios: &[PathBuf],
    commands: &mut Vec<Command>,
) {
    ui.label("scenario");
    ui.horizontal_wrapped(|ui| {
        for path in scenarios {
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            if ui.button(name).clicked() {
                commands.push(Command::Open(path.clone()));
            }
        }
    });
    ui.horizontal(|ui| {
        ui.add(
            egui::TextEdit::singleline(&mut state.path_text)
                .hint_text("scenario .toml, checkpoint .ckpt or mesh .stl"),
        );
        if ui
            .button("Open")
            .on_hover_text("a scenario runs, a checkpoint continues, a mesh joins the scenario as an obstacle (or drop the file on the window)")
            .clicked()
            && !state.path_text.trim().is_empty()
        {
            commands.push(open_command(PathBuf::from(state.path_text.trim())));
        }
    });
    ui.horizontal_wrapped(|ui| {
        if ui.button("Export VTI").clicked() {
            commands.push(Command::ExportVti(PathBuf::from(format!(
                "flowscope-{}.vti",
                status.step
            ))));
        }
        if ui.button("Checkpoint").clicked() {
            commands.push(Command::SaveCheckpoint(PathBuf::from(format!(
                "flowscope-{}.ckpt",
                status.step
            ))));
        }
        if ui.button("Load checkpoint").clicked() && !state.path_text.trim().is_empty() {
            commands.push(Command::LoadCheckpoint(PathBuf::from(
                state.path_text.trim(),
            )));
        }
        if ui.button("Screenshot").clicked() {
            state.screenshot = true;
        }
        if ui.button("Help").clicked() {
            state.show_help = !state.show_help;
        }
    });
}

/// What opening a file means, by its extension: an STL mesh joins the running
/// scenario as an obstacle, a checkpoint continues it, anything else is read
/// as a scenario (which says what is wrong with a file that is not one).
pub fn open_command(path: PathBuf) -> Command {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    match ext.as_deref() {
        Some("stl") => Command::AddMesh(path),
        Some("ckpt") => Command::LoadCheckpoint(path),
        _ => Command::Open(path),
    }
}

/// Colour-by field, colour map, and the colour bar of the current range.
fn colouring(ui: &mut egui::Ui, view: &ViewInfo, settings: &mut ViewSettings) {
    let label = |p: Option<PlotType>| p.map_or("one colour", |p| p.name());
    egui::ComboBox::from_label("colour by")
        .selected_text(label(settings.colour_by))
        .show_ui(ui, |ui| {
            ui.selectable_value(&mut settings.colour_by, None, label(None));
            for p in PLOTS {
                ui.selectable_value(&mut settings.colour_by, Some(p), p.name());
            }
        });
    if settings.colour_by.is_none() {
        return;
    }
    map_picker(ui, "colour map", &mut settings.colour_map);
    if let Some((lo, hi)) = view.view.colour_range {
        colour_bar(ui, settings.colour_map, lo, hi);
    }
}

/// Surface mode, streamlines, stereo and antialiasing.
fn display(
    ui: &mut egui::Ui,
    view: &ViewInfo,
    settings: &mut ViewSettings,
    state: &mut PanelState,
    size: [usize; 3],
) {
    ui.horizontal(|ui| {
        ui.label("surface");
        for (m, name) in [
            (SurfaceMode::Mesh, "mesh"),
            (SurfaceMode::Spheres, "spheres"),
            (SurfaceMode::None, "none"),
        ] {
            ui.selectable_value(&mut settings.mode, m, name);
        }
    });
    if settings.mode == SurfaceMode::Spheres {
        ui.add(egui::Slider::new(&mut settings.sphere_radius, 0.1..=3.0).text("sphere radius"));
    }
    let mut on = settings.streamlines.is_some();
    ui.checkbox(&mut on, "streamlines (L)");
    match (on, settings.streamlines.as_mut()) {
        (false, _) => settings.streamlines = None,
        (true, None) => settings.streamlines = Some(StreamlineSettings::default()),
        (true, Some(s)) => {
            let r = &mut state.rake;
            ui.horizontal(|ui| {
                ui.label("rake");
                for kind in RakeKind::ALL {
                    ui.selectable_value(&mut r.kind, kind, kind.name());
                }
            });
            if r.kind != RakeKind::Preset {
                ui.horizontal(|ui| {
                    ui.label("centre");
                    for (k, axis) in ["x", "y", "z"].iter().enumerate() {
                        ui.add(
                            egui::DragValue::new(&mut r.centre[k])
                                .range(0.0..=1.0)
                                .speed(0.005)
                                .prefix(*axis),
                        );
                    }
                });
                ui.horizontal(|ui| {
                    ui.label("axis");
                    for (k, axis) in ["x", "y", "z"].iter().enumerate() {
                        ui.selectable_value(&mut r.axis, k, *axis);
                    }
                });
                ui.add(egui::Slider::new(&mut r.extent, 0.02..=1.0).text("extent"));
                ui.add(egui::Slider::new(&mut r.count, 1..=64).text("seeds per side"));
            }
            s.rake = r.rake(size);
            ui.add(
                egui::Slider::new(&mut s.steps, 10..=5000)
                    .logarithmic(true)
                    .text("steps"),
            );
            ui.add(egui::Slider::new(&mut s.step_cells, 0.05..=2.0).text("step (cells)"));
            ui.add(egui::Slider::new(&mut s.radius, 0.05..=2.0).text("radius"));
            ui.horizontal(|ui| {
                ui.selectable_value(&mut s.style, LineStyle::Tubes, "tubes");
                ui.selectable_value(&mut s.style, LineStyle::Spheres, "spheres");
            });
            let (lo, hi) = view.view.speed_range;
            ui.label(format!(
                "{} lines, coloured by speed",
                view.view.streamlines
            ));
            let map = match settings.colour_map {
                ColourMap::Plain => ColourMap::Viridis,
                m => m,
            };
            colour_bar(ui, map, lo, hi);
        }
    }
    ui.horizontal(|ui| {
        ui.label("slices");
        for (k, axis) in ["x", "y", "z"].iter().enumerate() {
            let mut on = settings.slices[k].is_some();
            if ui.checkbox(&mut on, format!("{axis} slice")).changed() {
                settings.slices[k] = on.then_some(0.5);
            }
        }
    });
    for (k, axis) in ["x", "y", "z"].iter().enumerate() {
        if let Some(at) = settings.slices[k].as_mut() {
            ui.add(egui::Slider::new(at, 0.0..=1.0).text(format!("{axis} slice at (fraction)")));
        }
    }
    if settings.slices.iter().any(Option::is_some) {
        slice_colouring(ui, view, settings);
        ui.add(egui::Slider::new(&mut settings.contours, 0..=32).text("contour lines"))
            .on_hover_text("lines on the slices at this many levels of the colour range (0: none)");
        ui.add(egui::Slider::new(&mut settings.arrows, 0..=32).text("arrows every (cells)"))
            .on_hover_text("in-plane velocity arrows on the slices (0: none); the longest is the fastest flow on the slices");
        ui.label(
            "Shift-drag a slice to move it; Ctrl-click two points on slices for the plot line",
        )
        .on_hover_text("the line's ends are typed in Plots, line");
    }
    volume(ui, view, settings);
    let mut stereo = settings.stereo.is_some();
    ui.checkbox(&mut stereo, "red/cyan anaglyph (A)");
    match (stereo, settings.stereo.as_mut()) {
        (false, _) => settings.stereo = None,
        (true, None) => {
            settings.stereo = Some(Stereo::default());
            settings.grey_background = true;
        }
        (true, Some(s)) => {
            ui.horizontal(|ui| {
                for a in [Anaglyph::Dubois, Anaglyph::RedCyan] {
                    ui.selectable_value(&mut s.anaglyph, a, a.name());
                }
            });
            ui.add(
                egui::Slider::new(&mut s.separation, 0.0..=3.0)
                    .text("eye separation (× distance/30)"),
            );
            ui.add(
                egui::Slider::new(&mut s.zero_parallax, 0.3..=2.0)
                    .text("zero-parallax distance (× to centre)"),
            );
        }
    }
    ui.checkbox(&mut settings.grey_background, "grey background");
    ui.horizontal(|ui| {
        ui.add(egui::Slider::new(&mut settings.aa_samples, 1..=64).text("antialiasing samples"))
            .on_hover_text(
                "Renderings averaged into the picture. While field frames stream in, \
                 each is drawn once; the samples accumulate when they stop.",
            );
        ui.label(format!("{}", view.view.samples));
    });
}

/// A point clicked on a slice (solver cells): the first is the plot line's
/// start, the second its end, which sends the line (sampled about once per
/// cell) and writes it in the line field as it could be typed.
pub fn line_end_clicked(state: &mut PanelState, point: [f64; 3]) -> Option<Command> {
    let point = point.map(|v| (v * 10.0).round() / 10.0);
    let Some(start) = state.line_start.take() else {
        state.line_start = Some(point);
        state.line_text = format!("{},{},{}:", point[0], point[1], point[2]);
        return None;
    };
    let length = (0..3)
        .map(|k| (point[k] - start[k]).powi(2))
        .sum::<f64>()
        .sqrt();
    let points = length.ceil() as usize + 1;
    state.line_text = format!(
        "{},{},{}:{},{},{}:{points}",
        start[0], start[1], start[2], point[0], point[1], point[2]
    );
    state.line_error = None;
    state
        .line_text
        .parse()
        .ok()
        .map(|line| Command::SetLine(Some(line)))
}

/// The field each slice shows and its range.
fn slice_colouring(ui: &mut egui::Ui, view: &ViewInfo, settings: &mut ViewSettings) {
    let label = |p: Option<PlotType>| p.map_or("as the surface", |p| p.name());
    let map = match settings.colour_map {
        ColourMap::Plain => ColourMap::Viridis,
        m => m,
    };
    for (k, axis) in ["x", "y", "z"].iter().enumerate() {
        if settings.slices[k].is_none() {
            continue;
        }
        let field = &mut settings.slice_colour_by[k];
        egui::ComboBox::from_label(format!("{axis} slice shows"))
            .selected_text(label(*field))
            .show_ui(ui, |ui| {
                ui.selectable_value(field, None, label(None));
                for p in PLOTS {
                    ui.selectable_value(field, Some(p), p.name());
                }
            });
        let shown = view.view.slice_colour[k].map(|(_, r)| r);
        range_editor(
            ui,
            &format!("fixed {axis} slice range"),
            &mut settings.slice_range[k],
            shown,
        );
        if let Some((lo, hi)) = shown {
            colour_bar(ui, map, lo, hi);
        }
    }
}

/// A range the user fixes (two numbers) or leaves to the field's extremes;
/// fixing starts from the range `shown`.
fn range_editor(
    ui: &mut egui::Ui,
    label: &str,
    range: &mut Option<(f32, f32)>,
    shown: Option<(f32, f32)>,
) {
    let mut fixed = range.is_some();
    if ui
        .checkbox(&mut fixed, label)
        .on_hover_text("off: from the field's extremes, anew with every frame")
        .changed()
    {
        *range = fixed.then(|| shown.unwrap_or((0.0, 1.0)));
    }
    if let Some((lo, hi)) = range.as_mut() {
        let speed = ((*hi - *lo).abs() * 0.005).max(1e-9) as f64;
        ui.horizontal(|ui| {
            ui.add(egui::DragValue::new(lo).speed(speed).prefix("from "));
            ui.add(egui::DragValue::new(hi).speed(speed).prefix("to "));
        });
        if *hi <= *lo {
            *hi = *lo + f32::EPSILON.max(lo.abs() * 1e-6);
        }
    }
}

/// Volume rendering: on or off, preset, field, colour map, opacity curve,
/// range and step.
fn volume(ui: &mut egui::Ui, view: &ViewInfo, settings: &mut ViewSettings) {
    let mut on = settings.volume.is_some();
    if ui.checkbox(&mut on, "volume rendering (V)").changed() {
        settings.volume = on.then(VolumeSettings::default);
    }
    let Some(v) = settings.volume.as_mut() else {
        return;
    };
    ui.horizontal(|ui| {
        ui.label("preset");
        for p in VolumePreset::ALL {
            if ui.button(p.name()).clicked() {
                *v = p.settings();
            }
        }
    });
    egui::ComboBox::from_label("volume field")
        .selected_text(v.field.name())
        .show_ui(ui, |ui| {
            for p in PLOTS {
                ui.selectable_value(&mut v.field, p, p.name());
            }
        });
    map_picker(ui, "volume colour map", &mut v.map);
    opacity_editor(ui, &mut v.opacity, v.map);
    let shown = view.view.volume_colour.map(|(_, r)| r);
    range_editor(ui, "fixed volume range", &mut v.range, shown);
    if let Some((lo, hi)) = shown {
        colour_bar(ui, v.map, lo, hi);
    }
    ui.add(
        egui::Slider::new(&mut v.step, 0.1..=4.0)
            .logarithmic(true)
            .text("step (cells)"),
    )
    .on_hover_text("the ray-march step while the view moves; a still view's accumulated samples fill in between");
}

/// The opacity curve over the colour map: drag a handle, double-click to add
/// one, right-click one to remove it. Opacity (per cell of path) is drawn on
/// a square-root scale, where the small values that matter are visible.
fn opacity_editor(ui: &mut egui::Ui, opacity: &mut Opacity, map: ColourMap) {
    let width = ui.available_width().min(240.0);
    let (rect, response) =
        ui.allocate_exact_size(egui::vec2(width, 90.0), egui::Sense::click_and_drag());
    let painter = ui.painter_at(rect.expand(4.0));
    let strip = egui::Rect::from_min_max(egui::pos2(rect.left(), rect.bottom() - 8.0), rect.max);
    paint_gradient(&painter, strip, map);
    painter.rect_stroke(
        rect,
        0.0,
        egui::Stroke::new(1.0, egui::Color32::from_gray(90)),
        egui::StrokeKind::Inside,
    );
    let to_screen = |[t, a]: [f32; 2]| {
        egui::pos2(
            rect.left() + t * rect.width(),
            rect.bottom() - 8.0 - a.sqrt() * (rect.height() - 12.0),
        )
    };
    let from_screen = |p: egui::Pos2| {
        let t = ((p.x - rect.left()) / rect.width()).clamp(0.0, 1.0);
        let a = ((rect.bottom() - 8.0 - p.y) / (rect.height() - 12.0)).clamp(0.0, 1.0);
        [t, a * a]
    };
    let curve: Vec<egui::Pos2> = (0..=64)
        .map(|k| {
            let t = k as f32 / 64.0;
            to_screen([t, opacity.at(t)])
        })
        .collect();
    painter.add(egui::Shape::line(
        curve,
        egui::Stroke::new(1.5, egui::Color32::from_gray(230)),
    ));
    let mut remove = None;
    for (k, &h) in opacity.handles().to_vec().iter().enumerate() {
        let centre = to_screen(h);
        let id = response.id.with(k);
        let handle = ui.interact(
            egui::Rect::from_center_size(centre, egui::vec2(12.0, 12.0)),
            id,
            egui::Sense::click_and_drag(),
        );
        if handle.dragged() {
            if let Some(p) = handle.interact_pointer_pos() {
                opacity.set(k, from_screen(p));
            }
        }
        if handle.secondary_clicked() {
            remove = Some(k);
        }
        let hot = handle.hovered() || handle.dragged();
        painter.circle_filled(centre, if hot { 5.5 } else { 4.0 }, egui::Color32::WHITE);
    }
    if let Some(k) = remove {
        opacity.remove(k);
    }
    if response.double_clicked() {
        if let Some(p) = response.interact_pointer_pos() {
            opacity.insert(from_screen(p));
        }
    }
    response.on_hover_text("opacity per cell against the field (square-root scale): drag a handle, double-click to add one, right-click one to remove it");
}

/// A horizontal bar of the map with its end values.
pub fn colour_bar(ui: &mut egui::Ui, map: ColourMap, lo: f32, hi: f32) {
    let width = ui.available_width().min(240.0);
    let (rect, _) = ui.allocate_exact_size(egui::vec2(width, 14.0), egui::Sense::hover());
    paint_gradient(ui.painter(), rect, map);
    ui.horizontal(|ui| {
        ui.label(format!("{lo:.3e}"));
        ui.add_space((width - 140.0).max(8.0));
        ui.label(format!("{hi:.3e}"));
    });
}

/// The map from its bottom (left) to its top (right) across `rect`.
fn paint_gradient(painter: &egui::Painter, rect: egui::Rect, map: ColourMap) {
    let steps = 48;
    for k in 0..steps {
        let c = map.sample((k as f32 + 0.5) / steps as f32);
        let x0 = rect.left() + rect.width() * k as f32 / steps as f32;
        let x1 = rect.left() + rect.width() * (k + 1) as f32 / steps as f32;
        painter.rect_filled(
            egui::Rect::from_min_max(
                egui::pos2(x0, rect.top()),
                egui::pos2(x1 + 0.5, rect.bottom()),
            ),
            0.0,
            egui::Color32::from_rgb(
                (c[0] * 255.0) as u8,
                (c[1] * 255.0) as u8,
                (c[2] * 255.0) as u8,
            ),
        );
    }
}

/// A combo box of the colour maps.
fn map_picker(ui: &mut egui::Ui, label: &str, map: &mut ColourMap) {
    egui::ComboBox::from_label(label)
        .selected_text(map.name())
        .show_ui(ui, |ui| {
            for m in [
                ColourMap::Viridis,
                ColourMap::Inferno,
                ColourMap::CoolWarm,
                ColourMap::Turbo,
            ] {
                ui.selectable_value(map, m, m.name());
            }
        });
}

/// Shows another plot type. A surface coloured by the old plot's default
/// field takes the new one's (speed, or pressure on a speed surface); a
/// colouring the user chose stays.
pub fn set_plot(settings: &mut ViewSettings, plot: PlotType) {
    if settings.colour_by == Some(settings.plot.default_colour()) {
        settings.colour_by = Some(plot.default_colour());
    }
    settings.plot = plot;
}

/// A small time-series plot for the panel. Scrolling moves the panel, not
/// the plot (a scroll once zoomed a curve out of sight); a dragged box zooms
/// in and a double-click goes back to the bounds that fit the data.
fn small_plot(id: &str) -> egui_plot::Plot<'_> {
    egui_plot::Plot::new(id)
        .height(90.0)
        .allow_scroll(false)
        .allow_zoom(false)
        .allow_drag(false)
        .allow_boxed_zoom(true)
        .allow_double_click_reset(true)
        .auto_bounds(egui::Vec2b::new(true, true))
}

/// A series as a plot line, once it has two points: a single point has no
/// extent along the step axis, and egui_plot then borrows the other axis's
/// extent, which for a velocity of 1e-19 leaves it no width at all.
fn series(name: &str, points: Vec<[f64; 2]>) -> Option<egui_plot::Line<'static>> {
    (points.len() >= 2).then(|| egui_plot::Line::new(name.to_string(), points))
}

fn plots(ui: &mut egui::Ui, status: &Status, state: &mut PanelState) -> Vec<Command> {
    use egui_plot::Legend;
    let h = &status.history;
    ui.label("steadiness: log10 mean relative change of u per step");
    small_plot("steadiness").show(ui, |p| {
        if let Some(line) = series("log10 change", h.change.clone()) {
            p.line(line);
        }
    });
    if let Some(name) = &h.obstacle {
        let st = h
            .strouhal
            .map_or("not yet oscillating".into(), |s| format!("{s:.3}"));
        ui.label(format!(
            "obstacle {name}: drag and lift coefficients; Strouhal {st}"
        ));
        small_plot("forces")
            .legend(Legend::default())
            .show(ui, |p| {
                for line in [series("Cd", h.drag.clone()), series("Cl", h.lift.clone())]
                    .into_iter()
                    .flatten()
                {
                    p.line(line);
                }
            });
    }
    let mut probe_moved = false;
    ui.horizontal(|ui| {
        ui.label("probe");
        for (k, axis) in ["x", "y", "z"].iter().enumerate() {
            let max = status.size[k].saturating_sub(1) as f32;
            probe_moved |= ui
                .add(
                    egui::DragValue::new(&mut state.probe[k])
                        .range(0.0..=max)
                        .prefix(*axis),
                )
                .changed();
        }
    });
    small_plot("probe").legend(Legend::default()).show(ui, |p| {
        for (k, name) in ["ux", "uy", "uz"].iter().enumerate() {
            let pts: Vec<[f64; 2]> = h.probe.iter().map(|s| [s[0], s[k + 1]]).collect();
            if let Some(line) = series(name, pts) {
                p.line(line);
            }
        }
    });
    let mut commands: Vec<Command> = probe_moved
        .then_some(Command::SetProbe(state.probe))
        .into_iter()
        .collect();
    commands.extend(line_plot(ui, status, state));
    commands
}

/// The fields along a line: typed as `--probe` takes it, plotted against the
/// distance from its start, exported as `--probe-out` writes it.
fn line_plot(ui: &mut egui::Ui, status: &Status, state: &mut PanelState) -> Vec<Command> {
    use egui_plot::Legend;
    let mut commands = Vec::new();
    ui.horizontal(|ui| {
        let label = ui.label("line");
        ui.add(
            egui::TextEdit::singleline(&mut state.line_text)
                .hint_text("X0,Y0,Z0:X1,Y1,Z1:N")
                .desired_width(180.0),
        )
        .labelled_by(label.id);
        if ui.button("Plot").clicked() {
            let text = state.line_text.trim();
            if text.is_empty() {
                commands.push(Command::SetLine(None));
            } else {
                match text.parse::<crate::io::probe::ProbeLine>() {
                    Ok(line) => commands.push(Command::SetLine(Some(line))),
                    Err(e) => state.line_error = Some(e),
                }
            }
        }
        if ui.button("Export line CSV").clicked() {
            commands.push(Command::ExportLine(PathBuf::from(format!(
                "flowscope-line-{}.csv",
                status.step
            ))));
        }
    });
    if commands.iter().any(|c| matches!(c, Command::SetLine(_))) {
        state.line_error = None;
    }
    if let Some(e) = &state.line_error {
        ui.colored_label(egui::Color32::LIGHT_RED, e);
    }
    if let Some((step, samples)) = &status.history.line {
        let start = samples.first().map_or([0.0; 3], |s| s.position);
        let distance = |p: [f64; 3]| {
            ((p[0] - start[0]).powi(2) + (p[1] - start[1]).powi(2) + (p[2] - start[2]).powi(2))
                .sqrt()
        };
        ui.label(format!(
            "along the line at step {step} (cells from its start)"
        ));
        small_plot("line").legend(Legend::default()).show(ui, |p| {
            type Column = fn(&crate::io::probe::Sample) -> f64;
            let columns: [(&str, Column); 4] = [
                ("ux", |s| s.u[0]),
                ("uy", |s| s.u[1]),
                ("uz", |s| s.u[2]),
                ("p", |s| s.pressure),
            ];
            for (name, value) in columns {
                let pts = samples
                    .iter()
                    .map(|s| [distance(s.position), value(s)])
                    .collect();
                if let Some(line) = series(name, pts) {
                    p.line(line);
                }
            }
        });
    }
    commands
}

/// Keyboard shortcuts: space run/pause, s step, r reset, 1–8 plot types, m
/// surface mode, l streamlines, a anaglyph.
pub fn shortcuts(
    ctx: &egui::Context,
    status: &Status,
    settings: &mut ViewSettings,
) -> Vec<Command> {
    let mut commands = Vec::new();
    if ctx.egui_wants_keyboard_input() {
        return commands;
    }
    ctx.input(|i| {
        if i.key_pressed(egui::Key::Space) {
            commands.push(if status.running {
                Command::Pause
            } else {
                Command::Run
            });
        }
        if i.key_pressed(egui::Key::S) {
            commands.push(Command::Step(1));
        }
        if i.key_pressed(egui::Key::R) {
            commands.push(Command::Reset);
        }
        let keys = [
            egui::Key::Num1,
            egui::Key::Num2,
            egui::Key::Num3,
            egui::Key::Num4,
            egui::Key::Num5,
            egui::Key::Num6,
            egui::Key::Num7,
            egui::Key::Num8,
            egui::Key::Num9,
        ];
        if i.key_pressed(egui::Key::M) {
            settings.mode = match settings.mode {
                SurfaceMode::Mesh => SurfaceMode::Spheres,
                SurfaceMode::Spheres => SurfaceMode::None,
                SurfaceMode::None => SurfaceMode::Mesh,
            };
        }
        if i.key_pressed(egui::Key::L) {
            settings.streamlines = match settings.streamlines {
                Some(_) => None,
                None => Some(StreamlineSettings::default()),
            };
        }
        if i.key_pressed(egui::Key::V) {
            settings.volume = match settings.volume {
                Some(_) => None,
                None => Some(VolumeSettings::default()),
            };
        }
        if i.key_pressed(egui::Key::A) {
            settings.stereo = match settings.stereo {
                Some(_) => None,
                None => Some(Stereo::default()),
            };
            settings.grey_background = settings.stereo.is_some();
        }
        for (k, p) in keys.iter().zip(PLOTS) {
            if i.key_pressed(*k) {
                set_plot(settings, p);
            }
        }
    });
    commands
}

pub const HELP: &str = "Space  run / pause\nS      one step\nR      reset\n1–9    plot type (pressure, speed, ux, uy, uz, vorticity, curl, Q, concentration)\nM      surface: mesh, spheres, none\nL      streamlines on / off\nV      volume rendering on / off\nA      red/cyan anaglyph on / off\nDrag   orbit   ·   Scroll  zoom\nShift-drag a slice   move it\nCtrl-click on slices   the plot line's ends";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_clicks_on_slices_make_the_plot_line() {
        let mut state = PanelState::default();
        assert_eq!(line_end_clicked(&mut state, [1.04, 2.0, 3.0]), None);
        assert_eq!(state.line_text, "1,2,3:");
        let sent = line_end_clicked(&mut state, [1.0, 12.0, 3.0]);
        assert_eq!(state.line_text, "1,2,3:1,12,3:11");
        assert_eq!(
            sent,
            Some(Command::SetLine(Some("1,2,3:1,12,3:11".parse().unwrap())))
        );
        // A third click starts the next line.
        assert_eq!(line_end_clicked(&mut state, [5.0, 5.0, 5.0]), None);
        assert_eq!(state.line_start, Some([5.0, 5.0, 5.0]));
    }

    #[test]
    fn opened_files_are_routed_by_their_extension() {
        let cmd = |p: &str| open_command(PathBuf::from(p));
        assert_eq!(cmd("car.STL"), Command::AddMesh("car.STL".into()));
        assert_eq!(cmd("run.ckpt"), Command::LoadCheckpoint("run.ckpt".into()));
        assert_eq!(cmd("a.toml"), Command::Open("a.toml".into()));
        assert_eq!(cmd("no-extension"), Command::Open("no-extension".into()));
    }
}
