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
for name in ["rho", "pressure", "velocity", "flags"]:
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
    solver.step(37).unwrap();
    let fields = solver.fields().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.vti");
    flowscope::io::vti::write(&path, &fields, solver.flags()).unwrap();
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
}
