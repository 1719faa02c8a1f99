//! Run-time compilation of `kernels/lbm/d3q19.cu` with NVRTC: the source with
//! its storage define and the developer's `#define`s, and the options that keep
//! FP32 results bit for bit equal to the CPU reference.

use crate::solver::Precision;

/// The kernel source, embedded so the binary needs no files at run time.
pub const KERNEL_SOURCE: &str = include_str!("../../../../kernels/lbm/d3q19.cu");

/// NVRTC source for a storage precision (a define picks the storage type),
/// after the developer's `#define`s ([`defines`]).
pub fn kernel_source(precision: Precision, defines_text: &str, model: bool) -> String {
    let define = match precision {
        Precision::Fp32 => "",
        Precision::Fp16 => "#define STORAGE_FP16\n",
    };
    let model = if model {
        "#define COLLISION_MODEL\n"
    } else {
        ""
    };
    format!("{}{define}{model}{KERNEL_SOURCE}", defines(defines_text))
}

/// The `#define` words of the module whose step kernels also leave the
/// velocity they read (a contaminant's transport steps), after `defines`.
pub fn leaving_velocity(defines: &str) -> String {
    format!("{defines} WRITE_VELOCITY")
}

/// Threads a NEAR cell in `aa_boundary_rules` (its `RULES_LANES`), which a
/// developer's `RULES_LANES=N` (1, 2, 4 or 8) overrides.
pub const RULES_LANES: u32 = 2;

/// The threads a cell of `aa_boundary_rules` compiled with `defines_text`.
pub fn rules_lanes(defines_text: &str) -> u32 {
    defines_text
        .split_whitespace()
        .filter_map(|d| d.strip_prefix("RULES_LANES="))
        .filter_map(|v| v.parse().ok())
        .next_back()
        .unwrap_or(RULES_LANES)
}

/// `#define` lines for a developer's tuning string such as `ODD_PAIR_BLOCKS=3`
/// ([`crate::system::Tuning::kernel_defines`], for benchmarks of kernel variants without a
/// rebuild).
fn defines(tuning: &str) -> String {
    tuning
        .split_whitespace()
        .map(|d| match d.split_once('=') {
            Some((name, value)) => format!("#define {name} {value}\n"),
            None => format!("#define {d}\n"),
        })
        .collect()
}

/// NVRTC options for a device of compute capability `major.minor`. FP32: no
/// FMA contraction, since the CPU reference rounds every product and the two
/// agree bit for bit. 16-bit storage rounds far more than FMA changes, and its
/// kernels are bound by instruction issue: contraction is allowed there.
pub fn compile_options(major: i32, minor: i32, precision: Precision, model: bool) -> Vec<String> {
    vec![
        format!("--gpu-architecture=compute_{major}{minor}"),
        // Plain FP32 kernels round every product as the CPU reference does
        // (bit for bit); 16-bit storage and the collision models agree with
        // it to float rounding, and contraction saves them instructions.
        match (precision, model) {
            (Precision::Fp32, false) => "--fmad=false".into(),
            _ => "--fmad=true".into(),
        },
        "--std=c++17".into(),
        "-default-device".into(),
    ]
}

/// Compiles the kernels for one storage precision with NVRTC (needs only the
/// NVRTC library, no GPU).
pub fn compile(
    precision: Precision,
    major: i32,
    minor: i32,
    kernel_defines: &str,
    model: bool,
) -> Result<cudarc::nvrtc::Ptx, String> {
    // SAFETY: only tries to open the shared library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(super::device::availability(true, false, Ok(1))
            .err()
            .map_or_else(String::new, |e| e.0));
    }
    let options = cudarc::nvrtc::CompileOptions {
        options: compile_options(major, minor, precision, model),
        ..Default::default()
    };
    let source = kernel_source(precision, kernel_defines, model);
    match std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(source, options)) {
        Ok(Ok(ptx)) => Ok(ptx),
        Ok(Err(cudarc::nvrtc::CompileError::CompileError { log, .. })) => Err(format!(
            "NVRTC could not compile kernels/lbm/d3q19.cu ({}):\n{}",
            precision.name(),
            log.to_string_lossy()
        )),
        Ok(Err(other)) => Err(format!("NVRTC failed: {other:?}")),
        Err(_) => Err(
            "NVRTC failed (a symbol is missing from libnvrtc.so: is it older than CUDA 12?)".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_lanes_follow_the_kernel_default_and_the_developer_define() {
        assert!(KERNEL_SOURCE.contains(&format!("#define RULES_LANES {RULES_LANES}\n")));
        assert_eq!(rules_lanes("ODD_PAIR_BLOCKS=3"), RULES_LANES);
        assert_eq!(rules_lanes("RULES_LANES=2 NO_EVEN_QUAD"), 2);
    }

    #[test]
    fn tuning_defines_become_define_lines() {
        assert_eq!(defines(""), "");
        assert_eq!(
            defines(" ODD_PAIR_BLOCKS=3  FOO "),
            "#define ODD_PAIR_BLOCKS 3\n#define FOO\n"
        );
    }

    #[test]
    fn kernel_source_selects_storage_and_options_disable_fma() {
        assert!(kernel_source(Precision::Fp16, "", false).starts_with("#define STORAGE_FP16\n"));
        assert!(!kernel_source(Precision::Fp32, "", false).contains("#define STORAGE_FP16\n"));
        for name in [
            "aa_even(",
            "aa_odd(",
            "aa_even2(",
            "aa_even4(",
            "aa_odd2(",
            "aa_odd4(",
            "aa_boundary(",
            "aa_boundary_rules(",
            "fields(",
            "stats(",
            "forces(",
            "init_uniform(",
            "fill_f32(",
        ] {
            assert!(
                KERNEL_SOURCE.contains(&format!("__global__ void {name}"))
                    || KERNEL_SOURCE.contains(name),
                "{name}"
            );
        }
        let o = compile_options(9, 0, Precision::Fp32, false);
        assert!(o.contains(&"--gpu-architecture=compute_90".to_string()));
        assert!(o.contains(&"--fmad=false".to_string()));
        assert!(compile_options(9, 0, Precision::Fp16, false).contains(&"--fmad=true".to_string()));
    }
}
