//! `.vti` output read back by an independent reader (Python's vtk package).

use flowscope::solver::flags::NEAR;
use flowscope::solver::Solver;

use crate::common::*;

const READER: &str = r#"
import sys
import vtk
from vtk.util.numpy_support import vtk_to_numpy
r = vtk.vtkXMLImageDataReader()
r.SetFileName(sys.argv[1])
r.Update()
img = r.GetOutput()
print("dims", *img.GetDimensions())
pd = img.GetPointData()
for k in range(pd.GetNumberOfArrays()):
    name = pd.GetArrayName(k)
    a = vtk_to_numpy(pd.GetArray(name)).reshape(-1)
    print(name, len(a), " ".join(repr(float(v)) for v in a))
"#;

#[test]
fn vti_round_trip_through_python_vtk_gives_back_the_same_numbers() {
    let s = load(
        "cylinder.toml",
        &[
            "domain.size=[20,12,3]",
            "obstacles.0.center=[6,5.5,0]",
            "obstacles.0.radius=2",
            "fluid.length_cells=4",
            "fluid.reynolds=20",
        ],
    );
    let mut solver = cpu(&s);
    solver
        .start_averages(flowscope::solver::Schedule {
            from_step: 20,
            every: 2,
        })
        .unwrap();
    solver.step(37).unwrap();
    let fields = solver.fields().unwrap();
    let averages = solver.averages().unwrap().unwrap();
    assert_eq!((averages.from_step, averages.samples), (20, 9));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.vti");
    flowscope::io::vti::write(&path, &fields, Some(&averages), solver.flags(), None).unwrap();
    let out = std::process::Command::new("python3")
        .args(["-c", READER, path.to_str().unwrap()])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "the independent reader failed (CI installs it with `pip install vtk`): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut arrays = std::collections::HashMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let name = words.next().unwrap().to_string();
        let rest: Vec<f64> = words.map(|w| w.parse().unwrap()).collect();
        arrays.insert(name, rest);
    }
    assert_eq!(arrays["dims"], vec![20.0, 12.0, 3.0]);
    let n = fields.rho.len();
    assert_eq!(arrays["rho"][0] as usize, n);
    let rho = &arrays["rho"][1..];
    let p = &arrays["pressure"][1..];
    let v = &arrays["velocity"][1..];
    let f = &arrays["flags"][1..];
    assert_eq!(v.len(), 3 * n);
    for c in 0..n {
        assert_eq!(rho[c] as f32, fields.rho[c], "rho at {c}");
        assert_eq!(p[c] as f32, fields.pressure(c), "p at {c}");
        assert_eq!(v[3 * c] as f32, fields.ux[c]);
        assert_eq!(v[3 * c + 1] as f32, fields.uy[c]);
        assert_eq!(v[3 * c + 2] as f32, fields.uz[c]);
        assert_eq!(f[c] as u8, solver.flags()[c] & !NEAR);
    }
    // Not a trivial field.
    assert!(fields.ux.iter().any(|&u| u > 0.01));
    let (um, ur) = (&arrays["velocity_mean"][1..], &arrays["velocity_rms"][1..]);
    let (pm, pr) = (&arrays["pressure_mean"][1..], &arrays["pressure_rms"][1..]);
    for c in 0..n {
        for k in 0..3 {
            assert_eq!(um[3 * c + k] as f32, averages.velocity_mean[k][c]);
            assert_eq!(ur[3 * c + k] as f32, averages.velocity_rms[k][c]);
        }
        assert_eq!(pm[c] as f32, averages.pressure_mean[c]);
        assert_eq!(pr[c] as f32, averages.pressure_rms[c]);
    }
    assert!(averages.velocity_rms[0].iter().any(|&r| r > 1e-4));
}

const SERIES_READER: &str = r#"
import sys, os
import xml.etree.ElementTree as ET
import vtk
from vtk.util.numpy_support import vtk_to_numpy
pvd = sys.argv[1]
for ds in ET.parse(pvd).getroot().iter("DataSet"):
    r = vtk.vtkXMLImageDataReader()
    r.SetFileName(os.path.join(os.path.dirname(pvd), ds.get("file")))
    r.Update()
    img = r.GetOutput()
    pd = img.GetPointData()
    v = vtk_to_numpy(pd.GetArray("velocity")).reshape(-1)
    vs = vtk_to_numpy(pd.GetArray("velocity_m_s")).reshape(-1)
    p = vtk_to_numpy(pd.GetArray("pressure")).reshape(-1)
    ps = vtk_to_numpy(pd.GetArray("pressure_pa")).reshape(-1)
    i = abs(v).argmax()
    j = abs(p).argmax()
    print(ds.get("timestep"), ds.get("file"), img.GetSpacing()[0], vs[i] / v[i], ps[j] / p[j])
"#;

/// The sphere scenario, small, with a `[physical]` section instead of a
/// Reynolds number (water-like, 2 mm cells).
fn physical_sphere(dir: &std::path::Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(scenario_path("sphere.toml"))
        .unwrap()
        .replace("reynolds = 500.0\n", "")
        .replace("length_cells = 40", "length_cells = 4")
        .replace("size = [400, 256, 256]", "size = [24, 12, 12]")
        .replace("center = [100.0, 127.5, 127.5]", "center = [8.0, 5.5, 5.5]")
        .replace("radius = 20.0", "radius = 2.0")
        + "\n[physical]\ncell_size_m = 0.002\nvelocity_m_s = 0.05\nviscosity_m2_s = 1e-5\ndensity_kg_m3 = 1000\n";
    let path = dir.join("physical.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_series_in_physical_units_opens_as_one_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let scenario = physical_sphere(d);
    let o = flowscope(
        &[
            "run",
            scenario.to_str().unwrap(),
            "--solver",
            "cpu",
            "-q",
            "--steps",
            "30",
            "--vti",
            "flow.vti",
            "--vti-every",
            "10",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for step in [10, 20, 30] {
        assert!(d.join(format!("flow_{step:06}.vti")).exists());
    }
    assert!(d.join("flow.vti").exists() && d.join("flow.pvd").exists());
    let out = std::process::Command::new("python3")
        .args(["-c", SERIES_READER, d.join("flow.pvd").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    let s = flowscope::scenario::Scenario::load(&scenario, &[]).unwrap();
    let u = &s.units;
    let dt = u.time_step_s().unwrap();
    for (k, row) in rows.iter().enumerate() {
        let step = (10 * (k + 1)) as f64;
        let time: f64 = row[0].parse().unwrap();
        assert!((time - step * dt).abs() < 1e-9 * step * dt, "{row:?}");
        assert_eq!(row[1], format!("flow_{:06}.vti", 10 * (k + 1)));
        let num = |i: usize| row[i].parse::<f64>().unwrap();
        assert!((num(2) - 0.002).abs() < 1e-12, "{row:?}");
        let rel = |a: f64, b: f64| (a - b).abs() / b;
        assert!(rel(num(3), u.velocity_scale().unwrap()) < 1e-5, "{row:?}");
        assert!(rel(num(4), u.pressure_scale().unwrap()) < 1e-5, "{row:?}");
    }
}
