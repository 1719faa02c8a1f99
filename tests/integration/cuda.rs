//! The CUDA path without a GPU: the kernels compile with NVRTC, and asking for
//! CUDA where there is none is a clear error, never a panic.

use std::path::PathBuf;
use std::process::Command;

use crate::common::*;

/// Folder of the NVRTC library from Python's `nvidia-cuda-nvrtc` package.
fn nvrtc_dir() -> PathBuf {
    let out = Command::new("python3")
        .args([
            "-c",
            "import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], 'cu13', 'lib'))",
        ])
        .output()
        .expect("python3 runs");
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        dir.join("libnvrtc.so.13").exists(),
        "NVRTC not found (CI installs it with `pip install nvidia-cuda-nvrtc==13.0.*`): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

#[test]
fn kernels_compile_with_nvrtc_for_hopper_in_both_precisions_with_and_without_a_collision_model_or_the_velocity(
) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_flowscope"))
        .args(["compile-kernels", "--arch", "90", "--out"])
        .arg(dir.path())
        .env("LD_LIBRARY_PATH", nvrtc_dir())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for precision in ["fp32", "fp16", "fp32_model", "fp16_model"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{precision}:")))
            .expect("a line per variant");
        for kernel in [
            "aa_even",
            "aa_odd",
            "fields",
            "stats",
            "forces",
            "init_uniform",
        ] {
            assert!(
                line.split_whitespace().any(|w| w == kernel),
                "{precision}: {kernel} missing in {line}"
            );
        }
        let ptx =
            std::fs::read_to_string(dir.path().join(format!("d3q19_{precision}.ptx"))).unwrap();
        assert!(ptx.contains(".target sm_90"), "{precision}");
        // Plain FP32: no FMA contraction, the CPU reference rounds each product.
        // 16-bit storage rounds far more: contraction saves instructions there.
        // The collision models agree with it to float rounding: contracted.
        assert_eq!(
            ptx.contains("fma.rn.f32"),
            precision != "fp32",
            "{precision}: FMA contraction"
        );
    }
    // The Smagorinsky model's two square roots per cell: in the model's
    // step kernels only.
    let fp32 = std::fs::read_to_string(dir.path().join("d3q19_fp32.ptx")).unwrap();
    let model = std::fs::read_to_string(dir.path().join("d3q19_fp32_model.ptx")).unwrap();
    let roots = |ptx: &str| ptx.matches("sqrt.rn.f32").count();
    assert!(
        roots(&model) > roots(&fp32) + 8,
        "{} vs {}",
        roots(&model),
        roots(&fp32)
    );
    // Steps that begin a contaminant's transport step also store the
    // velocity (three FP32 planes), in every variant; the others do not.
    for variant in ["fp32", "fp16", "fp32_model", "fp16_model"] {
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        let plain = read(&format!("d3q19_{variant}.ptx"));
        let velocity = read(&format!("d3q19_{variant}_velocity.ptx"));
        let stores = |ptx: &str| ptx.matches("st.global.f32").count();
        assert!(
            stores(&velocity) >= stores(&plain) + 3 * 5,
            "{variant}: {} stores with the velocity, {} without",
            stores(&velocity),
            stores(&plain)
        );
        assert!(plain.contains(".entry velocity_rest("));
    }
    let fp16 = std::fs::read_to_string(dir.path().join("d3q19_fp16.ptx")).unwrap();
    // 16-bit stores, encoded through the 2^-112 scaling of fp16c_encode.
    assert!(fp16.contains("st.global.u16") || fp16.contains("st.global.b16"));
    assert!(fp16.contains("0f07800000"), "fp16c scaling constant");
    // The contaminant's kernels: the CPU scheme's arithmetic, every product
    // rounded (no contraction), the advection's face fluxes summed in f64.
    let line = text
        .lines()
        .find(|l| l.starts_with("transport:"))
        .expect("a line for the transport kernels");
    for kernel in [
        "advect",
        "diffuse",
        "diffuse_eddy",
        "eddy_maxima",
        "courant_max",
        "release",
        "doses",
        "gather",
    ] {
        assert!(
            line.split_whitespace().any(|w| w == kernel),
            "{kernel} missing in {line}"
        );
    }
    let transport = std::fs::read_to_string(dir.path().join("transport.ptx")).unwrap();
    assert!(transport.contains(".target sm_90"));
    assert!(!transport.contains("fma.rn.f32"), "FMA contraction");
    assert!(transport.contains("add.rn.f64") || transport.contains("add.f64"));
    // The projection method's kernels, likewise without contraction.
    for (stem, kernels) in [
        (
            "flow",
            &[
                "explicit_terms",
                "eddy_viscosity",
                "cell_velocity",
                "adams_bashforth",
                "carry_outflow",
                "divergence_rhs",
                "correct",
                "fastest",
            ][..],
        ),
        (
            "poisson",
            &[
                "apply",
                "smooth",
                "smooth_half",
                "smooth_packed",
                "jacobi",
                "restrict_residual",
                "restrict_residual_half",
                "restrict_residual_packed",
                "prolong_add",
                "prolong_add_half",
                "to_half",
                "from_half",
                "smooth_split",
                "restrict_residual_split",
                "prolong_add_split",
                "to_split",
                "residual_dots",
                "predict",
                "coarsest_gather",
                "coarsest_solve",
                "reduce",
                "reduce_finish",
                "subtract_mean",
                "direction",
                "apply_dot",
                "cg_update_sum",
                "subtract_mean_dots",
            ][..],
        ),
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("projection {stem}:")))
            .expect("a line per projection kernel file");
        for kernel in kernels {
            assert!(
                line.split_whitespace().any(|w| w == *kernel),
                "{kernel} missing in {line}"
            );
        }
        let ptx =
            std::fs::read_to_string(dir.path().join(format!("projection_{stem}.ptx"))).unwrap();
        assert!(ptx.contains(".target sm_90"));
        assert!(!ptx.contains("fma.rn.f32"), "{stem}: FMA contraction");
    }
}

#[test]
fn asking_for_cuda_without_a_gpu_is_a_one_line_error() {
    let o = flowscope(
        &[
            "run",
            "assets/scenarios/cavity.toml",
            "--solver",
            "cuda",
            "--steps",
            "2",
        ],
        &repo(),
    );
    if o.status.success() {
        // A machine with a GPU: nothing to check here.
        assert!(stderr(&o).contains("CUDA solver on"), "{}", stderr(&o));
        return;
    }
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.starts_with("error: the CUDA solver was asked for but cannot be used: "),
        "{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
    let o = flowscope(
        &["run", "assets/scenarios/cavity.toml", "--steps", "2", "-q"],
        &repo(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("CPU solver: no usable CUDA GPU ("),
        "{}",
        stderr(&o)
    );
}

#[test]
fn check_cuda_in_parts_refuses_two_parts_at_once_and_needs_a_gpu() {
    let o = flowscope(&["check-cuda", "--lbm-only", "--projection-only"], &repo());
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("cannot be used with"), "{e}");
    let o = flowscope(&["check-cuda", "--lbm-only", "--steps", "3"], &repo());
    let e = stderr(&o);
    if o.status.success() {
        // A machine with a GPU ran the part.
        assert!(stdout(&o).contains("all checks passed"), "{e}");
        return;
    }
    assert!(e.contains("no usable CUDA GPU"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
}
