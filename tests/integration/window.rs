//! The window under Xvfb (CI installs xvfb and lavapipe): it drives itself
//! through plot types, a resize, minimise and restore, a scenario change, pause
//! and step, then exits; it must not crash. Without a display it says so.

use std::process::{Command, Stdio};

use crate::common::*;

const SMALL_CAVITY: &str = r#"
name = "Small cavity"
[domain]
size = [26, 26, 26]
[boundaries]
x = "wall"
y_min = "wall"
y_max = { moving_wall = [1.0, 0.0, 0.0] }
z = "wall"
[fluid]
reynolds = 100.0
length_cells = 24
velocity = 0.08
"#;

const SMALL_CUBE: &str = r#"
name = "Small cube"
[domain]
size = [48, 24, 16]
[boundaries]
x_min = { inlet = [1.0, 0.0, 0.0] }
x_max = "outlet"
y = "free_slip"
z_min = "wall"
z_max = "free_slip"
[fluid]
reynolds = 42.0
length_cells = 6
velocity = 0.05
collision = "bgk"
[[obstacles]]
shape = "box"
min = [12.0, 9.0, 1.0]
max = [17.0, 14.0, 6.0]
"#;

#[test]
fn window_survives_plot_switches_resize_minimise_and_scenario_changes_under_xvfb() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cavity.toml"), SMALL_CAVITY).unwrap();
    std::fs::write(dir.path().join("cube.toml"), SMALL_CUBE).unwrap();
    let broken = SMALL_CUBE.replace("size = [48, 24, 16]", "size = [48, 24, 16, 2]");
    std::fs::write(dir.path().join("broken.toml"), broken).unwrap();
    // A mesh the smoke run opens as the file field or a drop would.
    let ball = flowscope::scenario::mesh::icosphere(1.0, 2);
    std::fs::write(
        dir.path().join("ball.stl"),
        flowscope::scenario::mesh::stl::to_binary(&ball, "ball"),
    )
    .unwrap();
    let config = dir.path().join("config");
    let display = format!(":{}", 90 + std::process::id() % 100);
    let mut xvfb = Command::new("Xvfb")
        .args([display.as_str(), "-screen", "0", "1280x800x24"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("Xvfb runs (CI installs Debian's xvfb)");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let out = Command::new(env!("CARGO_BIN_EXE_flowscope"))
        .args([
            "gui",
            "cavity.toml",
            "--solver",
            "cpu",
            "--smoke-frames",
            "92",
        ])
        .current_dir(dir.path())
        .env("DISPLAY", &display)
        .env("XDG_CONFIG_HOME", &config)
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "exit {:?}: {err}", out.status.code());
    assert!(
        !err.contains("panicked") && !err.contains("GPU error"),
        "{err}"
    );
    // The broken scenario: its error in the panel, and the cavity kept (the
    // cube opened later by the smoke run replaced it).
    assert!(
        err.contains("panel: ")
            && err.contains("broken.toml")
            && err.contains("domain.size has 4 values"),
        "{err}"
    );
    assert!(err.contains("smoke run done: Small cube"), "{err}");
    assert!(err.contains("320 mesh triangles drawn"), "{err}");
    // Settings persist: the next session, with no scenario named, opens the
    // last one with the last view options.
    let settings = std::fs::read_to_string(config.join("flowscope/settings.toml")).unwrap();
    assert!(
        settings.contains("cube.toml") && settings.contains("anaglyph = true"),
        "{settings}"
    );
    let again = Command::new(env!("CARGO_BIN_EXE_flowscope"))
        .args(["gui", "--solver", "cpu", "--smoke-frames", "3"])
        .current_dir(dir.path())
        .env("DISPLAY", &display)
        .env("XDG_CONFIG_HOME", &config)
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .unwrap();
    xvfb.kill().ok();
    xvfb.wait().ok();
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{err}");
    assert!(err.contains("smoke run done: Small cube"), "{err}");
    // The screenshot button (pressed by the smoke run) saved the 3D view.
    let shot = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "png"))
        .expect("a screenshot");
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let info = decoder.read_info().unwrap().info().clone();
    assert!(
        info.width > 100 && info.height > 100,
        "{}x{}",
        info.width,
        info.height
    );
    if let Ok(keep) = std::env::var("FLOWSCOPE_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
}

#[test]
fn without_a_display_the_window_says_so_in_one_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_flowscope"))
        .current_dir(repo())
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("WAYLAND_SOCKET")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no display to open a window on")
            && err.contains("flowscope run | render | bench | info"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
