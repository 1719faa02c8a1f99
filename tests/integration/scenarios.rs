//! Shipped scenarios run; malformed scenarios give the documented errors.

use std::path::Path;

use flowscope::scenario::{Scenario, ScenarioError};
use flowscope::solver::Solver;

use crate::common::*;

#[test]
fn every_shipped_scenario_loads_runs_ten_steps_and_reports_sane_units() {
    let mut names: Vec<String> = std::fs::read_dir(repo().join("assets/scenarios"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    names.sort();
    assert!(names.len() >= 5, "{names:?}");
    for name in &names {
        let full = load(name, &[]);
        // The large ones at about 4 million cells: ten steps of the full
        // 26-million-cell LES would take minutes on CI's two cores.
        let factor = (4e6 / full.cells() as f64).cbrt();
        let s = if factor < 1.0 {
            let o = flowscope::validation::scaled_overrides(&full, factor, 0.5);
            load(name, &o.iter().map(String::as_str).collect::<Vec<_>>())
        } else {
            full.clone()
        };
        let u = &full.units;
        assert!(u.tau > 0.5 && u.tau < 2.0, "{name}: τ {}", u.tau);
        assert!(u.mach() > 0.0 && u.mach() <= 0.3, "{name}: Ma {}", u.mach());
        let re = u.velocity_lattice * u.length_cells / u.viscosity_lattice;
        assert!(
            (re - u.reynolds).abs() < 1e-9 * re,
            "{name}: Re inconsistent"
        );
        let mut solver = cpu(&s);
        solver.step(10).unwrap();
        let stats = solver.stats().unwrap();
        assert!(
            stats.instability().is_none(),
            "{name}: {:?}",
            stats.instability()
        );
        assert!(stats.max_speed > 0.0, "{name}: nothing moves");
        drop(solver);
        let o = flowscope(&["info", scenario_path(name).to_str().unwrap()], &repo());
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains(&format!("τ = {:.5}", u.tau)), "{name}: {out}");
        assert!(
            out.contains("memory") && out.contains("Re = "),
            "{name}: {out}"
        );
    }
}

const GOOD: &str = r#"name = "test"

[domain]
size = [20, 12, 6]

[boundaries]
x_min = { inlet = [1.0, 0.0, 0.0] }
x_max = "outlet"
y = "free_slip"
z = "periodic"

[fluid]
reynolds = 50.0
length_cells = 6
velocity = 0.05

[[obstacles]]
shape = "sphere"
center = [6.0, 5.5, 3.0]
radius = 2.0
"#;

fn parse(text: &str) -> Result<Scenario, ScenarioError> {
    Scenario::from_text(Path::new("bad.toml"), text, &[])
}

fn error(text: &str) -> ScenarioError {
    match parse(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => {
            println!("{e}");
            e
        }
    }
}

#[test]
fn the_good_file_parses() {
    let s = parse(GOOD).unwrap();
    assert_eq!(s.size, [20, 12, 6]);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
}

#[test]
fn unknown_key_names_the_line_and_the_key() {
    let e = error(&GOOD.replace("reynolds = 50.0", "reynold = 50.0"));
    assert_eq!(e.line.map(|l| l.0), Some(13));
    assert!(e.message.contains("unknown field `reynold`"), "{e}");
    assert!(e.to_string().starts_with("bad.toml:13:"), "{e}");
}

#[test]
fn missing_key_is_named() {
    let e = error(&GOOD.replace("length_cells = 6\n", ""));
    assert!(e.message.contains("missing field `length_cells`"), "{e}");
}

#[test]
fn toml_syntax_error_names_the_line() {
    let e = error(&GOOD.replace("size = [20, 12, 6]", "size = [20, 12, 6"));
    assert!(e.line.is_some(), "{e}");
    assert!(e.line.unwrap().0 >= 4, "{e}");
}

#[test]
fn tau_at_or_below_one_half_is_an_error_with_a_fix() {
    let e = error(&GOOD.replace("reynolds = 50.0", "reynolds = 1e12"));
    assert_eq!(e.line.map(|l| l.0), Some(13));
    assert!(e.message.contains("is not above 0.5"), "{e}");
    assert!(e.help.contains("lower the Reynolds number"), "{e}");
}

#[test]
fn mach_above_limit_is_an_error_and_risky_values_are_warnings() {
    let e = error(&GOOD.replace("velocity = 0.05", "velocity = 0.2"));
    assert_eq!(e.line.map(|l| l.0), Some(15));
    assert!(e.message.contains("Mach number 0.346"), "{e}");
    let s = parse(&GOOD.replace("velocity = 0.05", "velocity = 0.1")).unwrap();
    assert!(
        s.warnings.iter().any(|w| w.contains("Mach number 0.173")),
        "{:?}",
        s.warnings
    );
    let s = parse(&GOOD.replace("reynolds = 50.0", "reynolds = 5000.0")).unwrap();
    assert!(
        s.warnings.iter().any(|w| w.contains("τ = 0.5002")),
        "{:?}",
        s.warnings
    );
}

#[test]
fn obstacle_outside_the_domain_is_an_error() {
    let e = error(&GOOD.replace("center = [6.0, 5.5, 3.0]", "center = [19.0, 5.5, 3.0]"));
    assert!(
        e.message
            .contains("obstacle 1 (sphere) reaches outside the domain along x"),
        "{e}"
    );
    assert_eq!(e.line.map(|l| l.0), Some(17));
}

#[test]
fn one_sided_periodic_and_double_speed_are_errors() {
    let e = error(&GOOD.replace("z = \"periodic\"", "z_min = \"periodic\"\nz_max = \"wall\""));
    assert!(e.message.contains("only one z face is periodic"), "{e}");
    let e = error(&GOOD.replace("velocity = 0.05", "velocity = 0.05\nmach = 0.1"));
    assert!(
        e.message.contains("both fluid.velocity and fluid.mach"),
        "{e}"
    );
}

#[test]
fn bad_values_are_named() {
    let e = error(&GOOD.replace("x_max = \"outlet\"", "x_max = \"exit\""));
    assert!(e.message.contains("unknown variant `exit`"), "{e}");
    assert_eq!(e.line.map(|l| l.0), Some(8));
    let e = error(&GOOD.replace("size = [20, 12, 6]", "size = [20, 2, 6]"));
    assert!(e.message.contains("at least 3 cells"), "{e}");
}

#[test]
fn set_overrides_apply_and_bad_paths_are_errors() {
    let o = vec![
        "fluid.reynolds=400".to_string(),
        "domain.size=[64,64,8]".to_string(),
        "fluid.collision=bgk".to_string(),
    ];
    let s = Scenario::from_text(Path::new("x.toml"), GOOD, &o).unwrap();
    assert_eq!(s.size, [64, 64, 8]);
    assert_eq!(s.units.reynolds, 400.0);
    assert_eq!(s.collision, flowscope::solver::Collision::Bgk);
    let s = Scenario::from_text(
        Path::new("x.toml"),
        GOOD,
        &["obstacles.0.center=[8.0,5.5,3.0]".into()],
    )
    .unwrap();
    assert!(
        matches!(s.obstacles[0], flowscope::scenario::Shape::Sphere { center, .. } if center[0] == 8.0)
    );
    let e = Scenario::from_text(Path::new("x.toml"), GOOD, &["obstacles.3.radius=3".into()])
        .unwrap_err();
    assert!(e.message.contains("has 1 entries"), "{e}");
    let e = Scenario::from_text(Path::new("x.toml"), GOOD, &["fluid.reynolds".into()]).unwrap_err();
    assert!(e.message.contains("expected key=value"), "{e}");
    let e = Scenario::from_text(Path::new("x.toml"), GOOD, &["fluid.viscosity=0.1".into()])
        .unwrap_err();
    assert!(
        e.message.contains("unknown field `viscosity`") && e.message.contains("--set"),
        "{e}"
    );
}

#[test]
fn physical_units_are_converted_and_printed() {
    let text = GOOD.replace("reynolds = 50.0\n", "")
        + "\n[physical]\ncell_size_m = 0.001\nvelocity_m_s = 0.25\nviscosity_m2_s = 1e-5\n";
    let s = parse(&text).unwrap();
    assert!((s.units.reynolds - 0.25 * 0.006 / 1e-5).abs() < 1e-9);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.toml"), &text).unwrap();
    let o = flowscope(&["info", "p.toml"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("dt = 2.0000e-4 s per step"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_grid_larger_than_memory_is_refused_naming_the_largest_that_fits() {
    let o = flowscope(
        &[
            "run",
            "assets/scenarios/cavity.toml",
            "--solver",
            "cpu",
            "--set",
            "domain.size=[6000,6000,6000]",
            "--steps",
            "1",
        ],
        &repo(),
    );
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("assets/scenarios/cavity.toml:"), "{e}");
    assert!(
        e.contains("needs") && e.contains("for the CPU solver, but only"),
        "{e}"
    );
    assert!(e.contains("the largest cube that fits is"), "{e}");
}

#[test]
fn a_missing_file_says_so() {
    let o = flowscope(&["info", "no/such/file.toml"], &repo());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot read the scenario file"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn values_that_are_not_numbers_or_lists_of_the_wrong_length_are_refused_up_front() {
    // (replacement, what the message names, the line it points at)
    let cases = [
        (
            "size = [20, 12, 6]",
            "size = [20, 12, 6, 4]",
            "domain.size has 4 values",
            4,
        ),
        (
            "center = [6.0, 5.5, 3.0]",
            "center = [6.0, 5.5]",
            "exactly 3 values",
            17,
        ),
        (
            "velocity = 0.05",
            "velocity = 0.05\ninitial_velocity = [nan, 0, 0]",
            "fluid.initial_velocity",
            16,
        ),
        (
            "velocity = 0.05",
            "velocity = 0.05\nforce = [0, inf, 0]",
            "fluid.force",
            16,
        ),
        (
            "length_cells = 6",
            "length_cells = inf",
            "fluid.length_cells = inf",
            14,
        ),
        (
            "length_cells = 6",
            "length_cells = nan",
            "fluid.length_cells = NaN",
            14,
        ),
        ("reynolds = 50.0", "reynolds = 1e-300", "is above 100", 13),
        (
            "reynolds = 50.0",
            "reynolds = nan",
            "fluid.reynolds = NaN",
            13,
        ),
        (
            "center = [6.0, 5.5, 3.0]",
            "center = [nan, 5.5, 3.0]",
            "not a number",
            17,
        ),
        ("radius = 2.0", "radius = inf", "outside the domain", 17),
    ];
    for (from, to, names, line) in cases {
        let text = GOOD.replace(from, to);
        assert_ne!(text, GOOD);
        let e = error(&text);
        assert!(e.to_string().contains(names), "{to}: {e}");
        assert_eq!(e.line.map(|l| l.0), Some(line), "{to}: {e}");
        assert!(!e.help.is_empty(), "{to}: {e}");
    }
    let e = error(&GOOD.replace("reynolds = 50.0", "reynolds = 1e-300"));
    assert!(e.help.contains("raise the Reynolds number"), "{e}");
    let moving = "x_max = { moving_wall = [0.0, nan, 0.0] }";
    let e = error(&GOOD.replace("x_max = \"outlet\"", moving));
    assert!(e.message.contains("boundaries.x_max: the velocity"), "{e}");
    assert_eq!(e.line.map(|l| l.0), Some(8), "{e}");
}

#[test]
fn an_obstacle_that_covers_no_cell_is_refused_naming_its_line() {
    // Between cell centres: a radius under half a cell holds none of them.
    let s = parse(
        &GOOD
            .replace("center = [6.0, 5.5, 3.0]", "center = [6.5, 5.5, 3.5]")
            .replace("radius = 2.0", "radius = 0.4"),
    )
    .unwrap();
    let e = s.check_voxels(&s.voxelize()).unwrap_err();
    assert!(
        e.message
            .contains("obstacle 1 (sphere): with radius 0.4 it holds no cell centre"),
        "{e}"
    );
    assert_eq!(e.line.map(|l| l.0), Some(17), "{e}");
    // The solver is not built: no run reports a drag of 0.
    let built = flowscope::session::select::build_cpu(&s, None);
    assert!(built.is_err_and(|e| e.to_string().contains("holds no cell centre")));
    // `info` says so too, at once.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.toml");
    std::fs::write(
        &path,
        GOOD.replace("radius = 2.0", "radius = 0.4")
            .replace("center = [6.0, 5.5, 3.0]", "center = [6.5, 5.5, 3.5]"),
    )
    .unwrap();
    let o = flowscope(&["info", path.to_str().unwrap()], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("holds no cell centre"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn info_on_a_huge_grid_checks_its_size_without_voxelising_it() {
    let o = flowscope(
        &[
            "info",
            scenario_path("cavity.toml").to_str().unwrap(),
            "--set",
            "domain.size=[2000,2000,2000]",
        ],
        &repo(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("8000000000 cells"), "{out}");
    assert!(out.contains("not counted"), "{out}");
    assert!(
        out.contains("warning: the grid 2000x2000x2000 needs"),
        "{out}"
    );
}

#[test]
fn the_subgrid_model_takes_the_regularized_collision_and_its_constant_is_checked() {
    use flowscope::scenario::{Turbulence, SMAGORINSKY_CONSTANT};
    use flowscope::solver::Collision;
    let plain = parse(GOOD).unwrap();
    assert_eq!(
        (plain.turbulence, plain.collision),
        (Turbulence::None, Collision::Trt)
    );
    assert_eq!(plain.params(&plain.voxelize().slots).smagorinsky, 0.0);

    let les = GOOD.replace(
        "velocity = 0.05\n",
        "velocity = 0.05\nturbulence = \"smagorinsky\"\n",
    );
    let s = parse(&les).unwrap();
    assert_eq!(
        (s.turbulence, s.collision),
        (Turbulence::Smagorinsky, Collision::Regularized)
    );
    let p = s.params(&s.voxelize().slots);
    assert_eq!(p.smagorinsky, SMAGORINSKY_CONSTANT as f32);
    assert!(p.model().is_some_and(|m| m.regularized));
    // A collision the file names is kept; the constant can be set.
    let s = parse(&les.replace(
        "turbulence = \"smagorinsky\"\n",
        "turbulence = \"smagorinsky\"\ncollision = \"trt\"\nsmagorinsky_constant = 0.17\n",
    ))
    .unwrap();
    assert_eq!(s.collision, Collision::Trt);
    assert_eq!(s.params(&s.voxelize().slots).smagorinsky, 0.17);
    // A high Reynolds number with the model on: no τ warning.
    let s = parse(&les.replace("reynolds = 50.0", "reynolds = 5000.0")).unwrap();
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    // Without it, the warning names the model.
    let s = parse(&GOOD.replace("reynolds = 50.0", "reynolds = 5000.0")).unwrap();
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("turbulence = \"smagorinsky\"")),
        "{:?}",
        s.warnings
    );

    let e = error(&GOOD.replace(
        "velocity = 0.05\n",
        "velocity = 0.05\nsmagorinsky_constant = 0.1\n",
    ));
    assert!(e.message.contains("fluid.turbulence is \"none\""), "{e}");
    assert_eq!(e.line.map(|l| l.0), Some(16));
    for bad in ["0.0", "-0.1", "0.9", "nan"] {
        let e = error(&les.replace(
            "turbulence = \"smagorinsky\"\n",
            &format!("turbulence = \"smagorinsky\"\nsmagorinsky_constant = {bad}\n"),
        ));
        assert!(e.message.contains("is not between 0 and 0.5"), "{bad}: {e}");
        assert!(e.help.contains("0.08 and 0.2"), "{e}");
    }
    let e = error(&les.replace("\"smagorinsky\"", "\"wale\""));
    assert!(e.message.contains("unknown variant `wale`"), "{e}");
}

#[test]
fn inlet_profiles_parse_and_are_checked_against_the_faces_around_them() {
    use flowscope::scenario::{Face, InletProfile};
    use flowscope::solver::Profile;
    let with = |face: &str, others: &[(&str, &str)]| {
        let mut text = GOOD.replace("x_min = { inlet = [1.0, 0.0, 0.0] }", face);
        for (a, b) in others {
            text = text.replace(a, b);
        }
        text
    };
    // A channel: walls across y, a parabolic inlet.
    let channel = with(
        "x_min = { inlet = [1.0, 0.0, 0.0], profile = \"parabolic\" }",
        &[("y = \"free_slip\"", "y = \"wall\"")],
    );
    let s = parse(&channel).unwrap();
    assert_eq!(
        s.faces[0],
        Face::Inlet {
            velocity: [1.0, 0.0, 0.0],
            profile: InletProfile::Parabolic
        }
    );
    let p = s.params(&s.voxelize().slots);
    assert_eq!(
        p.profiles.slots[1],
        Profile::Parabolic {
            axes: [false, true, false]
        }
    );
    assert_eq!((p.profiles.lo[1], p.profiles.hi[1]), (0.5, 10.5));
    // Over a floor: the log law.
    let floor = with(
        "x_min = { inlet = [1.0, 0.0, 0.0], profile = \"log\", roughness = 0.5 }",
        &[
            (
                "z = \"periodic\"",
                "z_min = \"wall\"\nz_max = \"free_slip\"",
            ),
            ("y = \"free_slip\"", "y = \"periodic\""),
        ],
    );
    let s = parse(&floor).unwrap();
    let p = s.params(&s.voxelize().slots);
    assert_eq!(p.profiles.slots[1], Profile::Log { roughness: 0.5 });
    assert_eq!(p.profiles.lo[2], 0.5);

    let cases: &[(String, &str)] = &[
        (
            with(
                "x_min = { inlet = [1.0, 0.0, 0.0], profile = \"parabolic\" }",
                &[],
            ),
            "no pair of faces across it is two walls",
        ),
        (
            with(
                "x_min = { inlet = [1.0, 0.0, 0.0], profile = \"log\" }",
                &[],
            ),
            "needs `roughness`",
        ),
        (
            with(
                "x_min = { inlet = [1.0, 0.0, 0.0], profile = \"log\", roughness = 0.5 }",
                &[],
            ),
            "needs a floor, but z_min is Periodic",
        ),
        (
            floor.replace("roughness = 0.5", "roughness = 0.0"),
            "roughness = 0 must be a length",
        ),
        (
            floor.replace("roughness = 0.5", "roughness = 9.0"),
            "roughness = 9 must be a length",
        ),
        (
            with("x_min = { inlet = [1.0, 0.0, 0.0], roughness = 0.5 }", &[]),
            "`roughness` belongs to profile = \"log\"",
        ),
        (
            with(
                "x_min = { inlet = [1.0, 0.0, 0.0], profile = \"cubic\" }",
                &[],
            ),
            "unknown variant `cubic`",
        ),
        (
            with(
                "x_min = { moving_wall = [0.0, 1.0, 0.0], profile = \"parabolic\" }",
                &[],
            ),
            "belong to inlets, not moving walls",
        ),
        (
            with("x_min = { inlet = [1.0, 0.0, 0.0], speed = 2 }", &[]),
            "unknown field `speed`",
        ),
        (with("x_min = \"inlet\"", &[]), "`inlet` needs a velocity"),
        (with("x_min = \"wal\"", &[]), "unknown variant `wal`"),
        (
            with("x_min = { inlet = [1.0, 0.0] }", &[]),
            "exactly 3 values",
        ),
        (with("x_min = {}", &[]), "needs `inlet = [u, v, w]`"),
    ];
    for (text, expected) in cases {
        let e = error(text);
        assert!(e.to_string().contains(expected), "{expected}: {e}");
        assert_eq!(e.line.map(|l| l.0), Some(7), "{e}");
    }
    // A log-law inlet on the floor itself.
    let e = error(
        &floor
            .replace(
                "x_min = { inlet = [1.0, 0.0, 0.0], profile = \"log\", roughness = 0.5 }",
                "x_min = \"wall\"",
            )
            .replace(
                "z_max = \"free_slip\"",
                "z_max = { inlet = [0.0, 0.0, -1.0], profile = \"log\", roughness = 0.5 }",
            ),
    );
    assert!(e.message.contains("cannot be on a z face"), "{e}");
}

#[test]
fn initial_noise_perturbs_each_cell_the_same_way_on_any_split_and_is_checked() {
    use flowscope::solver::{Grid, Initial};
    let s = parse(&GOOD.replace(
        "velocity = 0.05\n",
        "velocity = 0.05\ninitial_noise = 0.1\n",
    ))
    .unwrap();
    let initial = s.initial();
    let Initial::Perturbed { amplitude, .. } = initial else {
        panic!("{initial:?}")
    };
    assert!((amplitude - 0.005).abs() < 1e-9);
    let grid = Grid {
        size: s.size,
        periodic: [false, false, true],
    };
    let mut sum = [0.0f64; 3];
    let mut distinct = std::collections::HashSet::new();
    let n = grid.cells();
    for c in 0..n {
        let u = initial.velocity_at(&grid, grid.coords(c)).unwrap();
        let base = [0.05, 0.0, 0.0];
        for k in 0..3 {
            let d = u[k] - base[k];
            assert!(d.abs() <= amplitude, "{d}");
            sum[k] += d as f64;
        }
        distinct.insert(u[2].to_bits());
    }
    // Zero mean within the sampling error, and really random-looking.
    for k in 0..3 {
        assert!(
            (sum[k] / n as f64).abs() < 0.1 * amplitude as f64,
            "{sum:?}"
        );
    }
    assert!(distinct.len() > n * 9 / 10, "{} of {n}", distinct.len());
    // A slab's cell (x, y, z) is the global (x, y, z + offset).
    let slab = Initial::Perturbed {
        velocity: [0.05, 0.0, 0.0],
        amplitude,
        z_offset: 2,
        nz_global: 6,
    };
    let local = Grid {
        size: [20, 12, 3],
        periodic: [false; 3],
    };
    assert_eq!(
        slab.velocity_at(&local, [3, 4, 1]),
        initial.velocity_at(&grid, [3, 4, 3])
    );
    for bad in ["-0.1", "0.6", "nan"] {
        let e = error(&GOOD.replace(
            "velocity = 0.05\n",
            &format!("velocity = 0.05\ninitial_noise = {bad}\n"),
        ));
        assert!(e.message.contains("is not between 0 and 0.5"), "{e}");
    }
}

#[test]
fn a_convective_outlet_is_the_projection_methods_and_a_plain_outlet_to_the_lbm() {
    use flowscope::scenario::Face;
    use flowscope::session::select::{build, Backend};
    let text = GOOD.replace("x_max = \"outlet\"", "x_max = \"convective_outlet\"");
    let s = parse(&text).unwrap();
    assert_eq!(s.faces[1], Face::ConvectiveOutlet);
    assert!(
        s.warnings.iter().any(|w| {
            w.contains("boundaries.x_max = \"convective_outlet\"") && w.contains("zero-gradient")
        }),
        "{:?}",
        s.warnings
    );
    // In a file for the projection method: no warning, and it takes effect
    // where the flow leaves.
    let outlet_velocities = |text: &str| {
        let s =
            parse(&text.replace("[fluid]", "[run]\nmethod = \"projection\"\n\n[fluid]")).unwrap();
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        let mut selected = build(&Backend::cpu(), &s, None).unwrap();
        selected.solver.step(30).unwrap();
        let f = selected.solver.fields().unwrap();
        (0..f.uy.len())
            .filter(|c| c % 20 == 19)
            .map(|c| f.uy[c])
            .collect::<Vec<f32>>()
    };
    let (convective, zero_gradient) = (outlet_velocities(&text), outlet_velocities(GOOD));
    let change = convective
        .iter()
        .zip(&zero_gradient)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(change > 1e-5, "{change}");
}
