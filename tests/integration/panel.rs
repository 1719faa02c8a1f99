//! The control panel driven through egui_kittest (AccessKit): each control
//! sends the command it names, and nothing else.

use std::path::PathBuf;

use egui::accesskit::Role;
use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;

use flowscope::render::derive::PlotType;
use flowscope::render::viewer::ViewSettings;
use flowscope::session::{Command, Status};
use flowscope::ui::{panel, shortcuts, PanelState, ViewInfo};

struct Panel {
    status: Status,
    view: ViewInfo,
    settings: ViewSettings,
    state: PanelState,
    scenarios: Vec<PathBuf>,
    commands: Vec<Command>,
}

fn harness(running: bool) -> Harness<'static, Panel> {
    harness_sized(running, egui::vec2(480.0, 1600.0))
}

fn harness_sized(running: bool, size: egui::Vec2) -> Harness<'static, Panel> {
    let status = Status {
        scenario: "cavity".into(),
        solver: "CPU".into(),
        running,
        step: 1200,
        reynolds: 100.0,
        velocity: 0.1,
        tau: 0.53,
        size: [66, 66, 66],
        stride: 1,
        ..Default::default()
    };
    let state = Panel {
        status,
        view: ViewInfo::default(),
        settings: ViewSettings::default(),
        state: PanelState {
            display_limit: 256,
            ..Default::default()
        },
        scenarios: vec![
            PathBuf::from("assets/scenarios/cavity.toml"),
            PathBuf::from("assets/scenarios/cylinder.toml"),
        ],
        commands: Vec::new(),
    };
    Harness::builder().with_size(size).build_ui_state(
        |ui, p: &mut Panel| {
            let sent = panel(
                ui,
                &p.status,
                &p.view,
                &mut p.settings,
                &mut p.state,
                &p.scenarios,
            );
            p.commands.extend(sent);
            let keys = shortcuts(ui.ctx(), &p.status, &mut p.settings);
            p.commands.extend(keys);
        },
        state,
    )
}

/// The commands the panel sent since the last call.
fn sent(h: &mut Harness<'static, Panel>) -> Vec<Command> {
    std::mem::take(&mut h.state_mut().commands)
}

#[test]
fn run_controls_send_their_commands() {
    let mut h = harness(true);
    h.run();
    assert_eq!(sent(&mut h), vec![], "drawing alone sends nothing");
    h.get_by_label("Pause").click();
    h.run();
    assert_eq!(sent(&mut h), vec![Command::Pause]);
    h.get_by_label("Step").click();
    h.run();
    assert_eq!(sent(&mut h), vec![Command::Step(1)]);
    h.get_by_label("Reset").click();
    h.run();
    assert_eq!(sent(&mut h), vec![Command::Reset]);
    // Paused, the same place offers Run.
    h.state_mut().status.running = false;
    h.run();
    assert!(h.query_by_label("Pause").is_none());
    h.get_by_label("Run").click();
    h.run();
    assert_eq!(sent(&mut h), vec![Command::Run]);
}

#[test]
fn the_subgrid_model_checkbox_turns_the_model_on_and_off() {
    use flowscope::scenario::Turbulence;
    let mut h = harness(true);
    h.run();
    h.get_by_label("subgrid model (LES)").click();
    h.run();
    assert_eq!(
        sent(&mut h),
        vec![Command::SetTurbulence(Turbulence::Smagorinsky)]
    );
    // The status says it is on: the box is ticked, a click turns it off.
    h.state_mut().status.turbulence = Turbulence::Smagorinsky;
    h.state_mut().status.collision = flowscope::solver::Collision::Regularized;
    h.run();
    assert!(h.query_by_label("collision regularized").is_some());
    h.get_by_label("subgrid model (LES)").click();
    h.run();
    assert_eq!(sent(&mut h), vec![Command::SetTurbulence(Turbulence::None)]);
}

#[test]
fn the_method_switch_starts_the_scenario_over_with_the_other_method() {
    use flowscope::scenario::Method;
    let mut h = harness(true);
    h.run();
    // The method running now: nothing to send.
    h.get_by_label("lattice Boltzmann").click();
    h.run();
    assert_eq!(sent(&mut h), vec![]);
    h.get_by_label("projection").click();
    h.run();
    assert_eq!(sent(&mut h), vec![Command::SetMethod(Method::Projection)]);
    h.state_mut().status.method = Method::Projection;
    h.run();
    h.get_by_label("lattice Boltzmann").click();
    h.run();
    assert_eq!(sent(&mut h), vec![Command::SetMethod(Method::Lbm)]);
}

#[test]
fn the_mean_checkbox_and_reset_ask_for_time_averages() {
    let mut h = harness(true);
    h.run();
    // Nothing averaged yet: no reset to ask for.
    h.get_by_label("reset average").click();
    h.run();
    assert_eq!(sent(&mut h), vec![]);
    h.get_by_label("mean").click();
    h.run();
    assert_eq!(sent(&mut h), vec![Command::ShowMean(true)]);
    h.state_mut().status.show_mean = true;
    h.state_mut().status.averaging = Some((120, 37));
    h.run();
    assert!(h
        .query_by_label("averaged over 37 samples since step 120")
        .is_some());
    h.get_by_label("reset average").click();
    h.run();
    assert_eq!(sent(&mut h), vec![Command::ResetAverages]);
    h.get_by_label("mean").click();
    h.run();
    assert_eq!(sent(&mut h), vec![Command::ShowMean(false)]);
}

#[test]
fn typed_reynolds_number_is_sent_and_a_bad_one_is_put_back() {
    let mut h = harness(true);
    h.run();
    let field = h.get_by_role_and_label(Role::TextInput, "Reynolds");
    field.focus();
    field.type_text("250");
    h.run();
    h.key_press(egui::Key::Enter);
    h.run();
    assert_eq!(sent(&mut h), vec![Command::SetReynolds(250.0)]);
    let field = h.get_by_role_and_label(Role::TextInput, "Reynolds");
    field.focus();
    field.type_text("fast");
    h.run();
    h.key_press(egui::Key::Enter);
    h.run();
    assert_eq!(sent(&mut h), vec![]);
    assert!(h.state().state.reynolds_text.starts_with("100"));
    let field = h.get_by_role_and_label(Role::TextInput, "speed (lattice)");
    field.focus();
    field.type_text("0.05");
    h.run();
    h.key_press(egui::Key::Enter);
    h.run();
    assert_eq!(sent(&mut h), vec![Command::SetVelocity(0.05)]);
}

#[test]
fn plot_type_scenario_and_display_limit_pickers() {
    let mut h = harness(true);
    h.run();
    h.get_by_label("plot").click();
    h.run();
    h.get_by_label("vorticity").click();
    h.run();
    assert_eq!(h.state().settings.plot, PlotType::Vorticity);
    assert_eq!(sent(&mut h), vec![], "plot types are the view's business");

    h.get_by_label("cylinder").click();
    h.run();
    assert_eq!(
        sent(&mut h),
        vec![Command::Open(PathBuf::from(
            "assets/scenarios/cylinder.toml"
        ))]
    );

    h.get_by_label("display limit").click();
    h.run();
    h.get_by_label("128³").click();
    h.run();
    assert_eq!(sent(&mut h), vec![Command::SetDisplayLimit(128)]);
    assert_eq!(h.state().state.display_limit, 128);
    // A coarser display grid is shown as such.
    h.state_mut().status.stride = 2;
    h.run();
    h.get_by_label_contains("showing 33×33×33");
}

#[test]
fn slice_checkboxes_put_planes_in_the_view_with_contours() {
    let mut h = harness(true);
    h.run();
    h.get_by_label("z slice").click();
    h.run();
    assert_eq!(h.state().settings.slices, [None, None, Some(0.5)]);
    // Its position slider and the contour slider are shown now.
    assert!(h.get_all_by_label_contains("z slice at").next().is_some());
    assert!(h
        .get_all_by_label_contains("contour lines")
        .next()
        .is_some());
    h.get_by_label("x slice").click();
    h.run();
    assert_eq!(h.state().settings.slices, [Some(0.5), None, Some(0.5)]);
    h.get_by_label("z slice").click();
    h.run();
    assert_eq!(h.state().settings.slices, [Some(0.5), None, None]);
    assert_eq!(sent(&mut h), vec![], "slices are the view's business");
}

#[test]
fn volume_rendering_is_switched_on_with_a_preset_and_its_controls() {
    use flowscope::render::raymarch::VolumePreset;
    let mut h = harness(true);
    h.run();
    h.get_by_label("volume rendering (V)").click();
    h.run();
    let v = h.state().settings.volume.expect("on");
    assert_eq!(v, VolumePreset::Vorticity.settings());
    // Its controls: presets, field, map, range and step.
    assert!(h.get_all_by_label_contains("volume field").next().is_some());
    assert!(h
        .get_all_by_label_contains("fixed volume range")
        .next()
        .is_some());
    assert!(h.get_all_by_label_contains("step (cells)").next().is_some());
    h.get_by_role_and_label(Role::Button, "speed").click();
    h.run();
    assert_eq!(
        h.state().settings.volume,
        Some(VolumePreset::Speed.settings())
    );
    // Fixing the range starts from the range shown.
    h.state_mut().view.view.volume_colour = Some((PlotType::Speed, (0.0, 0.12)));
    h.run();
    h.get_by_label("fixed volume range").click();
    h.run();
    assert_eq!(h.state().settings.volume.unwrap().range, Some((0.0, 0.12)));
    h.get_by_label("volume rendering (V)").click();
    h.run();
    assert_eq!(h.state().settings.volume, None);
    assert_eq!(sent(&mut h), vec![], "the volume is the view's business");
}

#[test]
fn slices_take_a_field_of_their_own_and_arrows() {
    let mut h = harness(true);
    h.run();
    h.get_by_label("y slice").click();
    h.run();
    assert!(h
        .get_all_by_label_contains("y slice shows")
        .next()
        .is_some());
    assert!(h.query_by_label_contains("x slice shows").is_none());
    assert!(h.get_all_by_label_contains("arrows every").next().is_some());
    h.state_mut().view.view.slice_colour[1] = Some((PlotType::Speed, (0.01, 0.05)));
    h.run();
    h.get_by_label("fixed y slice range").click();
    h.run();
    assert_eq!(
        h.state().settings.slice_range,
        [None, Some((0.01, 0.05)), None]
    );
    h.get_by_label("fixed y slice range").click();
    h.run();
    assert_eq!(h.state().settings.slice_range, [None; 3]);
    // Each slice its own field.
    h.get_by_label("z slice").click();
    h.run();
    h.get_by_label("z slice shows").click();
    h.run();
    h.get_by_role_and_label(Role::Button, "ux").click();
    h.run();
    assert_eq!(
        h.state().settings.slice_colour_by,
        [None, None, Some(PlotType::Ux)]
    );
}

#[test]
fn the_plot_line_is_typed_as_the_probe_takes_it() {
    let mut h = harness(true);
    h.run();
    let field = h.get_by_role_and_label(Role::TextInput, "line");
    field.focus();
    field.type_text("1,2,3:4,5,6:7");
    h.run();
    h.get_by_label("Plot").click();
    h.run();
    assert_eq!(
        sent(&mut h),
        vec![Command::SetLine(Some("1,2,3:4,5,6:7".parse().unwrap()))]
    );
    let field = h.get_by_role_and_label(Role::TextInput, "line");
    field.focus();
    field.type_text("x");
    h.run();
    h.get_by_label("Plot").click();
    h.run();
    assert_eq!(
        sent(&mut h),
        vec![],
        "a line that does not parse is not sent"
    );
    assert!(h
        .get_all_by_label_contains("expected X0,Y0,Z0")
        .next()
        .is_some());
    h.get_by_label("Export line CSV").click();
    h.run();
    assert_eq!(
        sent(&mut h),
        vec![Command::ExportLine(PathBuf::from(
            "flowscope-line-1200.csv"
        ))]
    );
}

#[test]
fn export_checkpoint_screenshot_and_help_buttons() {
    let mut h = harness(true);
    h.run();
    h.get_by_label("Export VTI").click();
    h.run();
    h.get_by_label("Checkpoint").click();
    h.run();
    assert_eq!(
        sent(&mut h),
        vec![
            Command::ExportVti(PathBuf::from("flowscope-1200.vti")),
            Command::SaveCheckpoint(PathBuf::from("flowscope-1200.ckpt")),
        ]
    );
    h.get_by_label("Screenshot").click();
    h.run();
    assert!(h.state().state.screenshot);
    h.get_by_label("Help").click();
    h.run();
    assert!(h.state().state.show_help);
    assert_eq!(sent(&mut h), vec![]);
}

#[test]
fn keyboard_shortcuts_send_commands() {
    let mut h = harness(true);
    h.run();
    h.key_press(egui::Key::Space);
    h.run();
    h.key_press(egui::Key::S);
    h.run();
    h.key_press(egui::Key::R);
    h.run();
    assert_eq!(
        sent(&mut h),
        vec![Command::Pause, Command::Step(1), Command::Reset]
    );
    h.key_press(egui::Key::Num6);
    h.run();
    assert_eq!(h.state().settings.plot, flowscope::ui::PLOTS[5]);
}

#[test]
fn at_1280x800_the_panel_scrolls_to_every_button_and_its_sections_fold() {
    // The side panel of a 1280×800 window: 300 points wide, 800 tall.
    let mut h = harness_sized(true, egui::vec2(300.0, 800.0));
    h.run();
    let help = h.get_by_label("Help").rect();
    assert!(
        help.top() > 800.0,
        "the Files section starts below the fold: {help:?}"
    );
    h.get_by_label("Help").scroll_to_me();
    h.run();
    let help = h.get_by_label("Help").rect();
    assert!(help.bottom() <= 800.0 && help.top() >= 0.0, "{help:?}");
    h.get_by_label("Help").click();
    h.run();
    assert!(h.state().state.show_help);
    h.get_by_label("Screenshot").click();
    h.run();
    assert!(h.state().state.screenshot);
    // Sections fold like ParaView's panels.
    h.get_by_label("Display").scroll_to_me();
    h.run();
    assert!(h.query_by_label("streamlines (L)").is_some());
    h.get_by_label("Display").click();
    h.run();
    h.run();
    assert!(h.query_by_label("streamlines (L)").is_none());
    for title in ["Simulation", "Fields and surface", "Plots", "Files"] {
        h.get_by_label(title);
    }
}

#[test]
fn scrolling_over_a_plot_scrolls_the_panel_and_leaves_the_plot_alone() {
    let mut h = harness_sized(true, egui::vec2(300.0, 800.0));
    h.state_mut().status.history.change = (0..50)
        .map(|k| [k as f64 * 100.0, -(k as f64) / 10.0])
        .collect();
    h.run();
    let heading = h.get_by_label("flowscope").rect();
    let plot = h.get_by_label_contains("steadiness").rect();
    // The pointer over the plot below its label, then the wheel.
    h.hover_at(egui::pos2(plot.center().x, plot.bottom() + 40.0));
    h.event(egui::Event::MouseWheel {
        unit: egui::MouseWheelUnit::Point,
        delta: egui::vec2(0.0, -200.0),
        modifiers: egui::Modifiers::NONE,
        phase: egui::TouchPhase::Move,
        source: egui::MouseWheelSource::Wheel,
    });
    h.run();
    h.run();
    let moved = h.get_by_label("flowscope").rect();
    assert!(
        moved.top() < heading.top() - 50.0,
        "{heading:?} -> {moved:?}"
    );
}

#[test]
fn the_panel_says_why_cuda_is_not_used_and_shows_the_scenario_warnings() {
    let mut h = harness(true);
    h.state_mut().status.backend = "CPU solver: no usable CUDA GPU (no NVIDIA driver found)".into();
    h.state_mut().status.warnings =
        vec!["τ = 0.5004 is below 0.51: the run may become unstable".into()];
    h.run();
    h.get_by_label_contains("no usable CUDA GPU (no NVIDIA driver found)");
    h.get_by_label_contains("τ = 0.5004 is below 0.51");
}

#[test]
fn a_new_plot_type_takes_its_default_colouring_but_a_chosen_one_stays() {
    let mut h = harness(true);
    h.run();
    assert_eq!(h.state().settings.colour_by, Some(PlotType::Pressure));
    h.key_press(egui::Key::Num6);
    h.run();
    assert_eq!(h.state().settings.plot, PlotType::Vorticity);
    assert_eq!(h.state().settings.colour_by, Some(PlotType::Speed));
    h.state_mut().settings.colour_by = Some(PlotType::Q);
    h.key_press(egui::Key::Num1);
    h.run();
    assert_eq!(h.state().settings.colour_by, Some(PlotType::Q));
}

#[test]
fn plots_of_one_point_or_of_tiny_values_draw_without_tripping_egui_plot() {
    // The probe's first sample: one point, a velocity of 1e-19 (egui_plot's
    // bounds check failed on it in a debug build).
    let mut h = harness(true);
    h.state_mut().status.history.probe = vec![[48.0, -2.2e-19, 1.1e-20, 0.0]];
    h.state_mut().status.history.change = vec![[48.0, -3.0]];
    h.state_mut().status.history.obstacle = Some("1 (sphere)".into());
    h.state_mut().status.history.drag = vec![[48.0, 1e-19]];
    h.state_mut().status.history.lift = vec![[48.0, 0.0]];
    h.run();
    h.state_mut()
        .status
        .history
        .probe
        .push([96.0, -2.3e-19, 1.2e-20, 0.0]);
    h.state_mut().status.history.drag.push([96.0, 1.1e-19]);
    h.run();
    h.run();
}
