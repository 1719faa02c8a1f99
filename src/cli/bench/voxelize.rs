//! `flowscope bench --voxelize`: mesh voxelisation time against triangle
//! count, on the CPU and (where there is one) the GPU, and the time to check a
//! mesh for defects as loading does.

use std::time::Instant;

use super::BenchArgs;
use crate::scenario::mesh::{self, cuda::CudaVoxelizer};

/// Icosphere subdivision levels: 20 · 4^level triangles (82 k to 5.2 M).
const LEVELS: [u32; 4] = [6, 7, 8, 9];

pub fn bench_voxelize(args: &BenchArgs) -> anyhow::Result<()> {
    let gpu = match CudaVoxelizer::new() {
        Ok(g) => Some(g),
        Err(e) => {
            println!("no GPU voxeliser ({e}): CPU only");
            None
        }
    };
    println!(
        "{:>10} {:>6} {:>10} {:>10} {:>10} {:>10}",
        "triangles", "grid", "check s", "CPU s", "GPU s", "solid"
    );
    for &n in &args.sizes {
        for level in LEVELS {
            let tris = mesh::icosphere(1.0, level);
            let t0 = Instant::now();
            mesh::check(&tris).map_err(|e| anyhow::anyhow!(e))?;
            let check_s = t0.elapsed().as_secs_f64();
            // A sphere of 0.4 n radius, off the cell centres.
            let c = n as f64 / 2.0 + 0.3;
            let placed = mesh::place(&tris, 0.8 * n as f64 / 2.0, [c; 3], [0.0; 3]);
            let time =
                |f: &dyn Fn() -> anyhow::Result<Vec<u32>>| -> anyhow::Result<(f64, Vec<u32>)> {
                    let mut times = Vec::new();
                    let mut bits = Vec::new();
                    for _ in 0..args.repeats.max(1) {
                        let t0 = Instant::now();
                        bits = f()?;
                        times.push(t0.elapsed().as_secs_f64());
                    }
                    times.sort_by(f64::total_cmp);
                    Ok((times[times.len() / 2], bits))
                };
            let (cpu_s, cpu) = time(&|| Ok(mesh::solid_bits(&placed, [n; 3])))?;
            let gpu_s = match &gpu {
                Some(g) => {
                    let (s, bits) = time(&|| {
                        g.solid_bits(&placed, [n; 3])
                            .map_err(|e| anyhow::anyhow!(e))
                    })?;
                    anyhow::ensure!(bits == cpu, "the GPU's cells differ from the CPU's");
                    format!("{s:.3}")
                }
                None => "-".into(),
            };
            let solid: u64 = cpu.iter().map(|w| u64::from(w.count_ones())).sum();
            println!(
                "{:>10} {:>5}³ {check_s:>10.3} {cpu_s:>10.3} {gpu_s:>10} {solid:>10}",
                tris.len(),
                n
            );
        }
    }
    Ok(())
}
