//! STL meshes as obstacles: voxelisation against analytic shapes, placement,
//! and every refused defect.

use std::path::Path;

use flowscope::scenario::mesh::{self, stl, Triangle};
use flowscope::scenario::{Scenario, Shape};
use flowscope::solver::flags::{self, CellType};

use crate::common::*;

/// A scenario in `dir` with one obstacle, the rest of the file fixed.
fn scenario_text(size: usize, obstacle: &str) -> String {
    format!(
        r#"name = "mesh test"
[domain]
size = [{size}, {size}, {size}]
[boundaries]
x_min = {{ inlet = [1, 0, 0] }}
x_max = "outlet"
[fluid]
reynolds = 20
velocity = 0.05
length_cells = 20
[[obstacles]]
{obstacle}
"#
    )
}

fn write_scenario(dir: &Path, size: usize, obstacle: &str) -> std::path::PathBuf {
    let path = dir.join("s.toml");
    std::fs::write(&path, scenario_text(size, obstacle)).unwrap();
    path
}

fn solid_cells(s: &Scenario) -> Vec<bool> {
    s.voxelize()
        .flags
        .iter()
        .map(|&f| CellType::of(f) == CellType::Wall && flags::tag(f) == 1)
        .collect()
}

#[test]
fn an_stl_sphere_fills_the_analytic_volume_and_the_analytic_spheres_cells() {
    let dir = tempfile::tempdir().unwrap();
    // 20 480 triangles, vertices on the sphere of radius 10.
    let sphere = mesh::icosphere(10.0, 5);
    std::fs::write(dir.path().join("ball.stl"), stl::to_binary(&sphere, "ball")).unwrap();
    let meshed = Scenario::load(
        &write_scenario(
            dir.path(),
            41,
            r#"shape = "mesh"
file = "ball.stl"
center = [20, 20, 20]"#,
        ),
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let analytic = Scenario::load(
        &write_scenario(
            dir.path(),
            41,
            "shape = \"sphere\"\ncenter = [20, 20, 20]\nradius = 10",
        ),
        &[],
    )
    .unwrap();
    let (m, a) = (solid_cells(&meshed), solid_cells(&analytic));
    let volume = m.iter().filter(|&&b| b).count() as f64;
    let exact = 4.0 / 3.0 * std::f64::consts::PI * 1000.0;
    assert!(
        (volume / exact - 1.0).abs() < 0.03,
        "{volume} cells, analytic {exact:.1}"
    );
    // Cells that differ: only those the surface grazes, whose centres lie on
    // the sphere (x² + y² + z² = 100 has whole solutions) or between it and the
    // inscribed polyhedron.
    let mut differ = 0;
    for (c, (&mb, &ab)) in m.iter().zip(&a).enumerate() {
        if mb != ab {
            differ += 1;
            let p = [c % 41, c / 41 % 41, c / 1681].map(|v| v as f64 - 20.0);
            let r = (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt();
            assert!((r - 10.0).abs() < 0.02, "cell {p:?} at r {r} differs");
        }
    }
    // The 30 whole points on the sphere (±10 and permutations of (0, 6, 8)).
    assert!(differ <= 30, "{differ} cells differ");
    println!("mesh sphere: {volume} cells (analytic {exact:.1}), {differ} differ from the analytic shape");
}

#[test]
fn scale_rotation_and_an_ascii_file_place_a_box_mesh() {
    let dir = tempfile::tempdir().unwrap();
    // 2 x 1 x 0.5 units; scale 10 makes it 20 x 10 x 5 cells; 90° about z
    // turns it to 10 x 20 x 5. Centres off the cell centres so that no face
    // grazes one.
    let b = mesh::box_mesh([-1.0, 0.0, 3.0], [1.0, 1.0, 3.5]);
    std::fs::write(dir.path().join("box.stl"), stl::to_ascii(&b, "box")).unwrap();
    for (rotate, extent) in [
        ([0, 0, 0], [20, 10, 5]),
        ([0, 0, 90], [10, 20, 5]),
        ([90, 0, 0], [20, 5, 10]),
    ] {
        let s = Scenario::load(
            &write_scenario(
                dir.path(),
                61,
                &format!(
                    "shape = \"mesh\"\nfile = \"box.stl\"\nscale = 10\ncenter = [30.25, 30.25, 30.25]\nrotate = {rotate:?}"
                ),
            ),
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let solid = solid_cells(&s);
        let cells: Vec<[usize; 3]> = (0..solid.len())
            .filter(|&c| solid[c])
            .map(|c| [c % 61, c / 61 % 61, c / 3721])
            .collect();
        assert_eq!(cells.len(), extent.iter().product::<usize>(), "{rotate:?}");
        for a in 0..3 {
            let lo = cells.iter().map(|p| p[a]).min().unwrap();
            let hi = cells.iter().map(|p| p[a]).max().unwrap();
            assert_eq!(hi - lo + 1, extent[a], "{rotate:?} axis {a}");
            // Centred on 30.25: cells from ⌈30.25 - e/2⌉.
            assert_eq!(lo, (30.25 - extent[a] as f64 / 2.0).ceil() as usize);
        }
    }
}

#[test]
fn broken_meshes_are_refused_naming_the_file_and_the_defect() {
    let dir = tempfile::tempdir().unwrap();
    let good = mesh::box_mesh([0.0; 3], [1.0; 3]);
    let bin = stl::to_binary(&good, "ok");
    let with = |f: &dyn Fn(&mut Vec<Triangle>)| {
        let mut t = good.clone();
        f(&mut t);
        stl::to_binary(&t, "broken")
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.stl", Vec::new(), "not an STL file"),
        ("none.stl", stl::to_binary(&[], "none"), "holds no triangles"),
        ("cut.stl", bin[..bin.len() - 20].to_vec(), "is truncated"),
        ("text.stl", b"this is not a mesh at all, but it is long enough to pass for a header of a binary STL file: 0123456789".to_vec(), "is text that does not begin with `solid`"),
        ("open.stl", with(&|t| { t.pop(); }), "3 open edges: the mesh is not closed"),
        ("flipped.stl", with(&|t| t[4].swap(0, 1)), "disagree on orientation"),
        ("flat.stl", with(&|t| t.push([[0.0; 3], [0.5; 3], [1.0; 3]])), "1 degenerate triangles"),
        ("nan.stl", with(&|t| t[3][1][2] = f32::NAN), "not a finite number (the first is triangle 4)"),
        ("ascii.stl", b"solid x\nfacet normal 0 0 1\nouter loop\nvertex 0 0 0\nvertex 1 0 0\nendloop\n".to_vec(), "line 6: `endloop` where `vertex` should be"),
    ];
    for (name, bytes, want) in &cases {
        std::fs::write(dir.path().join(name), bytes).unwrap();
        let path = write_scenario(
            dir.path(),
            20,
            &format!("shape = \"mesh\"\nfile = \"{name}\"\nscale = 4\ncenter = [10, 10, 10]"),
        );
        let e = Scenario::load(&path, &[]).unwrap_err().to_string();
        assert!(e.contains(name) && e.contains(want), "{name}: {e}");
        // The error points at the obstacle's table in the scenario file.
        assert!(e.contains("s.toml:1"), "{name}: {e}");
    }
    let path = write_scenario(
        dir.path(),
        20,
        "shape = \"mesh\"\nfile = \"missing.stl\"\ncenter = [10, 10, 10]",
    );
    let e = Scenario::load(&path, &[]).unwrap_err().to_string();
    assert!(
        e.contains("missing.stl cannot be read") && e.contains("relative to the scenario file"),
        "{e}"
    );
    // Too large for the domain, and nonsense placement numbers.
    std::fs::write(dir.path().join("ok.stl"), &bin).unwrap();
    let path = write_scenario(
        dir.path(),
        20,
        "shape = \"mesh\"\nfile = \"ok.stl\"\nscale = 30\ncenter = [10, 10, 10]",
    );
    let e = Scenario::load(&path, &[]).unwrap_err().to_string();
    assert!(e.contains("reaches outside the domain"), "{e}");
    let path = write_scenario(
        dir.path(),
        20,
        "shape = \"mesh\"\nfile = \"ok.stl\"\nscale = -1\ncenter = [10, 10, 10]",
    );
    let e = Scenario::load(&path, &[]).unwrap_err().to_string();
    assert!(e.contains("scale = -1 must be a positive number"), "{e}");
}

#[test]
fn info_describes_a_mesh_obstacle() {
    let dir = tempfile::tempdir().unwrap();
    let sphere = mesh::icosphere(1.0, 2);
    std::fs::write(dir.path().join("ball.stl"), stl::to_binary(&sphere, "ball")).unwrap();
    let path = write_scenario(
        dir.path(),
        40,
        "shape = \"mesh\"\nfile = \"ball.stl\"\nscale = 8\ncenter = [20, 20, 20]",
    );
    let o = flowscope(&["info", path.to_str().unwrap()], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("mesh            1 (mesh): ball.stl, 320 triangles, cells x "),
        "{out}"
    );
    assert!(out.contains("obstacle        1 (mesh): "), "{out}");
    let s = Scenario::load(&path, &[]).unwrap();
    assert!(matches!(&s.obstacles[0], Shape::Mesh { placed, .. } if placed.triangles.len() == 320));
}

#[test]
fn the_window_draws_a_mesh_obstacle_from_its_triangles_not_its_voxels() {
    use flowscope::render::gpu::Gpu;
    use flowscope::render::viewer::Viewer;
    use flowscope::scenario::mesh::ObstacleMeshes;
    use flowscope::solver::{display, Fields};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let sphere = mesh::icosphere(1.0, 2);
    std::fs::write(dir.path().join("ball.stl"), stl::to_binary(&sphere, "ball")).unwrap();
    // A mesh and an analytic sphere: the sphere from its voxels, the mesh
    // from its 320 triangles.
    let text = scenario_text(
        32,
        "shape = \"mesh\"\nfile = \"ball.stl\"\nscale = 6\ncenter = [10.3, 15.5, 15.5]\n[[obstacles]]\nshape = \"sphere\"\ncenter = [22, 15.5, 15.5]\nradius = 4",
    );
    let path = dir.path().join("s.toml");
    std::fs::write(&path, text).unwrap();
    let s = Scenario::load(&path, &[]).unwrap();
    let flags = s.voxelize().flags;
    let meshes = Arc::new(ObstacleMeshes::of(&s));
    assert_eq!(
        (meshes.tags.clone(), meshes.triangles.len()),
        (vec![1], 320)
    );
    let gpu = Gpu::headless().unwrap_or_else(|e| panic!("{e} (CI installs mesa-vulkan-drivers)"));
    for stride in [1usize, 2] {
        let size = display::coarse_size(s.size, stride);
        let cell_flags = display::downsample_flags(&flags, s.size, stride);
        let fields = Fields::new(size);
        let mut viewer = Viewer::new(&gpu);
        viewer.set_meshes(&meshes, stride);
        viewer.upload(&gpu, &fields, &cell_flags, 1, None).unwrap();
        let vertices = viewer.obstacle_vertices(&gpu).unwrap();
        let n = vertices.len();
        assert!(n > 3 * 320, "the voxel sphere is drawn too: {n}");
        // The mesh's triangles come last, in display cells.
        let tail = &vertices[n - 3 * 320..];
        let shift = 0.5 * (stride as f32 - 1.0);
        for (v, p) in tail.iter().zip(meshes.triangles.iter().flatten()) {
            for a in 0..3 {
                let want = (p[a] - shift) / stride as f32;
                assert!((v.position[a] - want).abs() < 1e-5, "{v:?} vs {p:?}");
            }
        }
        // No voxel triangle is left where the mesh is (x < 16 / stride).
        let voxel_near_mesh = vertices[..n - 3 * 320]
            .iter()
            .filter(|v| v.position[0] < 16.0 / stride as f32)
            .count();
        assert_eq!(voxel_near_mesh, 0, "stride {stride}");
    }
}
