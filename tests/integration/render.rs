//! GPU passes on a real adapter (lavapipe in CI: a missing adapter fails, it does
//! not skip), checked against their CPU twins and analytic answers.

use flowscope::render::derive::{derive, PlotType};
use flowscope::render::gpu::Gpu;
use flowscope::render::isosurface::{cpu, Extractor, Iso};
use flowscope::render::passes::{DerivePass, MinMax, UnpackPass};
use flowscope::render::volume::{FieldStaging, Volume};
use flowscope::solver::Fields;

use crate::common::*;

fn gpu() -> Gpu {
    Gpu::headless().unwrap_or_else(|e| panic!("{e} (CI installs mesa-vulkan-drivers)"))
}

#[test]
fn marching_tetrahedra_on_the_gpu_give_a_closed_sphere() {
    let gpu = gpu();
    let n = 64u32;
    let r = 20.0f32;
    let c = [31.63f32, 31.41, 31.77];
    let mut field = Vec::with_capacity((n * n * n) as usize);
    for z in 0..n {
        for y in 0..n {
            for x in 0..n {
                let d = [x as f32 - c[0], y as f32 - c[1], z as f32 - c[2]];
                field.push((d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt());
            }
        }
    }
    let volume = Volume::scalar(&gpu, [n, n, n]);
    volume.write_scalar(&gpu, &field);
    // Start small so the overflow flag and buffer growth are exercised too.
    let mut extractor = Extractor::new(&gpu, 3000);
    let count = extractor.extract(&gpu, &volume, r).unwrap();
    assert!(
        extractor.capacity >= count && count > 3000,
        "count {count}, capacity {}",
        extractor.capacity
    );
    let vertices = extractor.read_vertices(&gpu, count).unwrap();
    let tris: Vec<[[f32; 3]; 3]> = vertices
        .chunks_exact(3)
        .map(|t| [0, 1, 2].map(|k| [t[k].position[0], t[k].position[1], t[k].position[2]]))
        .collect();
    let open = cpu::open_edges(&tris);
    assert!(
        open.is_empty(),
        "{} edges not shared by exactly two triangles",
        open.len()
    );
    let area = cpu::area(&tris);
    let exact = 4.0 * std::f64::consts::PI * (r as f64).powi(2);
    println!(
        "GPU sphere: {} triangles, area {area:.2} vs 4πr² = {exact:.2} ({:+.3}%)",
        tris.len(),
        100.0 * (area - exact) / exact
    );
    assert!((area - exact).abs() / exact < 0.01);
    let worst = vertices
        .iter()
        .map(|v| {
            let d: f32 = (0..3)
                .map(|k| (v.position[k] - c[k]).powi(2))
                .sum::<f32>()
                .sqrt();
            (d - r).abs()
        })
        .fold(0.0f32, f32::max);
    assert!(worst < 0.05, "vertex {worst} cells off the sphere");
    // The same triangles as the CPU twin (same tetrahedra, same interpolation).
    assert_eq!(cpu::extract(&field, [64, 64, 64], r).len(), tris.len());
}

#[test]
fn a_relative_isovalue_is_worked_out_on_the_gpu_from_its_range() {
    let gpu = gpu();
    let n = 40u32;
    let field: Vec<f32> = (0..n * n * n)
        .map(|i| {
            let (x, y, z) = ((i % n) as f32, ((i / n) % n) as f32, (i / (n * n)) as f32);
            (0.21 * x).sin() * (0.17 * y).cos() + 0.3 * (0.13 * z).sin() + 2.0
        })
        .collect();
    let scalar = Volume::scalar(&gpu, [n, n, n]);
    scalar.write_scalar(&gpu, &field);
    let minmax = MinMax::new(&gpu);
    let (lo, hi) = minmax.compute(&gpu, &scalar, f32::MIN).unwrap();
    let frac = 0.37f32;
    let mut host = Extractor::new(&gpu, 1 << 18);
    let want = host.extract(&gpu, &scalar, lo + frac * (hi - lo)).unwrap();
    // Min/max and extraction in one submission, no read-back in between; a
    // buffer too small for the surface says so through the counter.
    let mut relative = Extractor::new(&gpu, 300);
    let counts = |e: &mut Extractor| {
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        minmax.run(&gpu, &mut encoder, &scalar, f32::MIN);
        e.run(
            &gpu,
            &mut encoder,
            &scalar,
            &scalar,
            Iso::Fraction(frac, &minmax.result),
        );
        gpu.queue.submit([encoder.finish()]);
        let c = gpu.read_buffer(&e.counter, 8).unwrap();
        bytemuck::cast_slice::<u8, u32>(&c).to_vec()
    };
    let first = counts(&mut relative);
    assert_eq!(first, [want, 1], "overflow flagged with the full count");
    relative.grow(&gpu, first[0]).unwrap();
    assert_eq!(counts(&mut relative), [want, 0]);
    let sort = |mut v: Vec<[f32; 3]>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v
    };
    let positions = |e: &Extractor| {
        sort(
            e.read_vertices(&gpu, want)
                .unwrap()
                .iter()
                .map(|v| [0, 1, 2].map(|k| v.position[k]))
                .collect(),
        )
    };
    let (a, b) = (positions(&host), positions(&relative));
    let worst = a
        .iter()
        .zip(&b)
        .flat_map(|(p, q)| (0..3).map(move |k| (p[k] - q[k]).abs()))
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-4, "vertices {worst} cells apart");
}

#[test]
fn gpu_min_max_equals_the_cpu_exactly_on_random_data_of_odd_sizes() {
    let gpu = gpu();
    let minmax = MinMax::new(&gpu);
    let mut seed = 0x9e3779b97f4a7c15u64;
    for size in [[1u32, 1, 1], [17, 9, 5], [33, 31, 29], [101, 7, 3]] {
        let n = (size[0] * size[1] * size[2]) as usize;
        let values: Vec<f32> = (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                ((seed >> 11) as f64 / (1u64 << 53) as f64 * 2e4 - 1e4) as f32 * 1.37e-3
            })
            .collect();
        let volume = Volume::scalar(&gpu, size);
        volume.write_scalar(&gpu, &values);
        let (lo, hi) = minmax.compute(&gpu, &volume, f32::MIN).unwrap();
        let want = values
            .iter()
            .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
        assert_eq!((lo, hi), want, "size {size:?}");
        // Q's range starts at 0 (only Q > 0 marks a vortex); a floor above
        // the maximum leaves the range as it is.
        let floored = minmax.compute(&gpu, &volume, 0.0).unwrap();
        assert_eq!(floored, (want.0.max(0.0), want.1), "size {size:?}");
        let above = minmax.compute(&gpu, &volume, want.1 + 1.0).unwrap();
        assert_eq!(above, want, "size {size:?}");
    }
}

#[test]
fn derived_vorticity_q_and_concentration_match_the_cpu() {
    let gpu = gpu();
    let size = [24usize, 20, 16];
    let mut f = Fields::new(size);
    for z in 0..size[2] {
        for y in 0..size[1] {
            for x in 0..size[0] {
                let c = f.index(x, y, z);
                let (a, b, d) = (x as f32 * 0.31, y as f32 * 0.23, z as f32 * 0.17);
                f.rho[c] = 1.0 + 0.01 * (a + b).sin();
                f.ux[c] = 0.05 * b.sin() * d.cos();
                f.uy[c] = 0.04 * a.cos() + 0.01 * d.sin();
                f.uz[c] = 0.03 * (a * b * 0.1).sin();
            }
        }
    }
    f.concentration = vec![(0..f.rho.len())
        .map(|c| (c as f32 * 0.37).sin().abs())
        .collect()];
    let s = size.map(|v| v as u32);
    let fields = Volume::fields(&gpu, s);
    fields.write_fields(&gpu, &f).unwrap();
    let concentration = Volume::scalar(&gpu, s);
    concentration.write_scalar(&gpu, &f.concentration[0]);
    let scalar = Volume::scalar(&gpu, s);
    let pass = DerivePass::new(&gpu);
    for plot in [
        PlotType::Pressure,
        PlotType::Speed,
        PlotType::Uy,
        PlotType::Vorticity,
        PlotType::Curl,
        PlotType::Q,
        PlotType::Concentration,
    ] {
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        pass.run(&gpu, &mut encoder, (&fields, &concentration), &scalar, plot);
        gpu.queue.submit([encoder.finish()]);
        let got = scalar.read_scalar(&gpu).unwrap();
        let want = derive(&f, plot);
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        println!(
            "{}: max |GPU - CPU| = {worst:.2e} (field scale {scale:.2e})",
            plot.name()
        );
        assert!(scale > 1e-4, "{}: trivial field", plot.name());
        assert!(worst < 1e-5, "{}: {worst}", plot.name());
    }
}

#[test]
fn field_uploads_reuse_their_staging_across_frames_and_buffers() {
    let gpu = gpu();
    // Rows of 13 texels are padded to the copy alignment; 5 layers of 7 rows
    // make one buffer, or three of at most two layers.
    let size = [13usize, 7, 5];
    let frame = |k: f32| {
        let mut f = Fields::new(size);
        for c in 0..f.rho.len() {
            f.rho[c] = 1.0 + 1e-3 * c as f32;
            f.ux[c] = k + c as f32;
            f.uy[c] = -k * c as f32;
            f.uz[c] = 0.5 * k;
        }
        f
    };
    let s = size.map(|v| v as u32);
    let fields = Volume::fields(&gpu, s);
    let scalar = Volume::scalar(&gpu, s);
    let none = Volume::scalar(&gpu, s);
    let pass = DerivePass::new(&gpu);
    let layer = 7 * 256;
    for mut staging in [
        FieldStaging::default(),
        FieldStaging::with_buffer_limit(2 * layer),
    ] {
        for k in [1.0f32, 2.0, 3.0] {
            let f = frame(k);
            fields.write_fields_through(&gpu, &f, &mut staging).unwrap();
            for (plot, want) in [(PlotType::Ux, &f.ux), (PlotType::Uy, &f.uy)] {
                let mut encoder = gpu.device.create_command_encoder(&Default::default());
                pass.run(&gpu, &mut encoder, (&fields, &none), &scalar, plot);
                gpu.queue.submit([encoder.finish()]);
                assert_eq!(&scalar.read_scalar(&gpu).unwrap(), want, "frame {k}");
            }
        }
    }
}

#[test]
fn shared_frames_are_imported_and_copied_within_the_gpu() {
    use flowscope::render::interop::{self, SharedImports};
    use std::sync::Arc;
    let gpu = gpu();
    // Exported by Vulkan here (by CUDA on a GPU machine): 13-texel rows
    // padded to 256 bytes, as the solver writes them.
    let size = [13usize, 7, 5];
    let (exported, frame) = interop::export_for_test(&gpu, size).expect("exportable memory");
    let mut want = Fields::new(size);
    let row = frame.row_bytes() as usize / 16;
    let mut texels = vec![[f32::NAN; 4]; row * 7 * 5];
    for c in 0..want.rho.len() {
        let (x, yz) = (c % 13, c / 13);
        want.rho[c] = 1.0 + 1e-3 * c as f32;
        want.ux[c] = 0.25 + c as f32;
        want.uy[c] = -(c as f32) * 0.5;
        want.uz[c] = 3.0;
        texels[yz * row + x] = [want.rho[c], want.ux[c], want.uy[c], want.uz[c]];
    }
    gpu.queue
        .write_buffer(&exported, 0, bytemuck::cast_slice(&texels));
    gpu.queue.submit([]);
    let frame = Arc::new(frame);
    let lease = Arc::new(frame.lease().expect("free"));
    let mut imports = SharedImports::default();
    let imported = imports.buffer(&gpu, &lease).expect("importable");
    assert_eq!(
        imports.buffer(&gpu, &lease).unwrap(),
        imported,
        "imported once"
    );

    let s = size.map(|v| v as u32);
    let (fields, scalar) = (Volume::fields(&gpu, s), Volume::scalar(&gpu, s));
    let none = Volume::scalar(&gpu, s);
    let pass = DerivePass::new(&gpu);
    // In one batch of layers, and in three of at most two layers.
    for mut unpack in [
        UnpackPass::new(&gpu),
        UnpackPass::with_binding_limit(&gpu, 2 * 7 * 256),
    ] {
        fields.write_fields(&gpu, &Fields::new(size)).unwrap();
        unpack.copy_shared(&gpu, &imported, lease.clone(), &fields);
        for (plot, want) in [(PlotType::Ux, &want.ux), (PlotType::Uy, &want.uy)] {
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            pass.run(&gpu, &mut encoder, (&fields, &none), &scalar, plot);
            gpu.queue.submit([encoder.finish()]);
            assert_eq!(&scalar.read_scalar(&gpu).unwrap(), want, "{plot:?}");
        }
    }
    drop(lease);
    // The copies are done: the solver may write the frame again.
    assert!(
        frame.lease().is_some(),
        "the lease is given back after the copy"
    );

    // Memory of another GPU is refused, and frames then come from the host.
    let (_, mut other) = interop::export_for_test(&gpu, size).unwrap();
    other.device[0] ^= 1;
    let mut imports = SharedImports::default();
    let e = imports.buffer(&gpu, &other).unwrap_err();
    assert!(e.contains("another GPU"), "{e}");
    assert!(imports.refused.is_some());
}

/// `flowscope render` of a small cylinder wake (speed surface at 0.6 of its
/// range, 320x200) with `extra` arguments; the command's output and the RGBA pixels.
fn render_cylinder(extra: &[&str]) -> (std::process::Output, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario_path("cylinder.toml");
    let mut args = vec![
        "render",
        scenario.to_str().unwrap(),
        "--solver",
        "cpu",
        "--set",
        "domain.size=[96,48,8]",
        "--set",
        "obstacles.0.center=[24,23.5,0]",
        "--set",
        "obstacles.0.radius=4",
        "--set",
        "fluid.length_cells=8",
        "--set",
        "fluid.reynolds=100",
        "--set",
        "fluid.velocity=0.05",
        "--steps",
        "600",
        "--plot",
        "speed",
        "--iso-frac",
        "0.6",
        "--size",
        "320x200",
        "--out",
        "out.png",
    ];
    args.extend_from_slice(extra);
    let o = flowscope(&args, dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let (info, buf) = read_png(&dir.path().join("out.png"));
    assert_eq!((info.width, info.height), (320, 200));
    (o, buf)
}

#[test]
fn render_command_draws_the_cylinder_wake() {
    let (_, buf) = render_cylinder(&[]);
    let pixels: Vec<&[u8]> = buf.chunks_exact(4).collect();
    let background = pixels[0];
    let differing = pixels.iter().filter(|p| p[..3] != background[..3]).count();
    let frac = differing as f64 / pixels.len() as f64;
    println!("render: {:.1}% of the pixels show geometry", 100.0 * frac);
    assert!(frac > 0.02 && frac < 0.9, "surface coverage {frac}");
    // Shading: the surface is not one flat colour.
    let mut shades: Vec<u8> = pixels
        .iter()
        .filter(|p| p[..3] != background[..3])
        .map(|p| p[1])
        .collect();
    shades.sort();
    shades.dedup();
    assert!(shades.len() > 20, "{} shades", shades.len());
}

#[test]
fn surface_vertices_carry_the_colouring_field_interpolated() {
    let gpu = gpu();
    let n = 24u32;
    let c = 11.7f32;
    let (mut dist, mut colour) = (Vec::new(), Vec::new());
    for z in 0..n {
        for y in 0..n {
            for x in 0..n {
                let d = [x as f32 - c, y as f32 - c, z as f32 - c];
                dist.push((d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt());
                // Linear in the cell coordinates: interpolation along an edge is exact.
                colour.push(0.5 * x as f32 - 0.25 * z as f32 + 3.0);
            }
        }
    }
    let scalar = Volume::scalar(&gpu, [n, n, n]);
    scalar.write_scalar(&gpu, &dist);
    let field = Volume::scalar(&gpu, [n, n, n]);
    field.write_scalar(&gpu, &colour);
    let mut extractor = Extractor::new(&gpu, 1 << 16);
    let count = extractor
        .extract_coloured(&gpu, &scalar, &field, 7.0)
        .unwrap();
    assert!(count > 300);
    let worst = extractor
        .read_vertices(&gpu, count)
        .unwrap()
        .iter()
        .map(|v| {
            let want = 0.5 * v.position[0] - 0.25 * v.position[2] + 3.0;
            (v.position[3] - want).abs()
        })
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-4, "colour value off by {worst}");
}

#[test]
fn render_coloured_by_a_second_field_spans_the_colour_map() {
    let (o, buf) = render_cylinder(&["--colour-by", "pressure", "--colour-map", "cool-warm"]);
    assert!(stderr(&o).contains("colour: Pressure"), "{}", stderr(&o));
    let pixels: Vec<&[u8]> = buf.chunks_exact(4).collect();
    // Cool-warm: some surface pixels clearly blue, some clearly red.
    let blue = pixels
        .iter()
        .filter(|p| p[2] as i32 > p[0] as i32 + 40)
        .count();
    let red = pixels
        .iter()
        .filter(|p| p[0] as i32 > p[2] as i32 + 40)
        .count();
    println!("coloured render: {blue} blue-ish and {red} red-ish pixels");
    assert!(blue > 50 && red > 50, "blue {blue}, red {red}");
    let dir = tempfile::tempdir().unwrap();
    let bad = flowscope(
        &[
            "render",
            scenario_path("cylinder.toml").to_str().unwrap(),
            "--colour-by",
            "pressure",
            "--colour-map",
            "rainbow",
            "--out",
            "x.png",
        ],
        dir.path(),
    );
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("use viridis, inferno, cool-warm or turbo"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn render_spheres_streamlines_and_anaglyph_from_the_command_line() {
    let (o, buf) = render_cylinder(&[
        "--mode",
        "spheres",
        "--streamlines",
        "--stereo",
        "anaglyph",
        "--aa",
        "4",
    ]);
    let err = stderr(&o);
    assert!(
        err.contains("surface spheres") && err.contains("4 samples, anaglyph"),
        "{err}"
    );
    // The preset rake: 16 × 12 seeds behind the inlet, all in the flow.
    assert!(err.contains("192 streamlines"), "{err}");
    assert!(!err.contains("gave no line"), "{err}");
    let pixels: Vec<&[u8]> = buf.chunks_exact(4).collect();
    // Grey background by default in stereo (Dubois keeps grey grey).
    assert!(
        pixels[0][..3].iter().all(|&c| (126..=130).contains(&c)),
        "{:?}",
        pixels[0]
    );
    let drawn = pixels.iter().filter(|p| p[..3] != pixels[0][..3]).count();
    assert!(drawn > 3000, "{drawn} pixels drawn");

    // A rake that misses the domain says so; bad values are refused up front.
    let (o, _) = render_cylinder(&["--mode", "none", "--streamlines", "line:-5,1,1:-5,9,1:4"]);
    assert!(stderr(&o).contains("4 seeds in a solid or outside the domain gave no line"));
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario_path("cylinder.toml");
    for (bad, message) in [
        (vec!["--streamlines", "ring:3"], "--streamlines ring:3"),
        (vec!["--aa", "0"], "--aa 0"),
        (vec!["--sphere-radius", "-1"], "--sphere-radius -1"),
        (
            vec!["--iso", "NaN"],
            "--iso NaN: the isovalue must be a number",
        ),
        (vec!["--iso-frac", "inf"], "--iso-frac inf"),
        (vec!["--yaw", "nan"], "--yaw NaN"),
        (vec!["--pitch", "2"], "--pitch 2"),
        (vec!["--distance", "0"], "--distance 0"),
        (vec!["--distance", "nan"], "--distance NaN"),
        (
            vec!["--stereo", "anaglyph", "--eye-separation", "1e9"],
            "--eye-separation 1000000000: use 0 (no depth) to 5",
        ),
        (vec!["--zero-parallax", "0"], "--zero-parallax 0"),
        (vec!["--colour-by", "temperature"], "use plain or one of"),
    ] {
        let mut args = vec!["render", scenario.to_str().unwrap(), "--out", "x.png"];
        args.extend(bad);
        let o = flowscope(&args, dir.path());
        assert!(!o.status.success());
        assert!(stderr(&o).contains(message), "{}", stderr(&o));
        // Refused before the flow runs or a GPU is opened.
        assert!(!stderr(&o).contains("drawing on"), "{}", stderr(&o));
    }
    // The format the extension names, or a refusal (no PNG bytes in a .jpg).
    for (out, message) in [
        ("x.jpg", "--out x.jpg: this output is written as .png"),
        ("no/such/x.png", "the folder no/such does not exist"),
    ] {
        let o = flowscope(
            &["render", scenario.to_str().unwrap(), "--out", out],
            dir.path(),
        );
        assert!(stderr(&o).contains(message), "{}", stderr(&o));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn render_with_a_display_limit_draws_block_means() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario_path("cavity.toml");
    let render = |limit: &str| {
        flowscope(
            &[
                "render",
                scenario.to_str().unwrap(),
                "--solver",
                "cpu",
                "--set",
                "domain.size=[24,24,24]",
                "--set",
                "fluid.length_cells=22",
                "--steps",
                "40",
                "--aa",
                "1",
                "--size",
                "160x120",
                "--display-limit",
                limit,
                "--out",
                "coarse.png",
            ],
            dir.path(),
        )
    };
    let o = render("8");
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("means of 3³ cells, [8, 8, 8] shown"), "{e}");
    assert!(dir.path().join("coarse.png").exists());
    let o = render("3");
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("is not a display limit"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn every_plot_type_shows_a_surface_at_its_default_isovalue() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario_path("cavity.toml");
    for plot in [
        "pressure",
        "speed",
        "ux",
        "uy",
        "uz",
        "vorticity",
        "curl",
        "q",
    ] {
        let o = flowscope(
            &[
                "render",
                scenario.to_str().unwrap(),
                "--solver",
                "cpu",
                "--set",
                "domain.size=[26,26,26]",
                "--set",
                "fluid.length_cells=24",
                "--steps",
                "300",
                "--plot",
                plot,
                "--aa",
                "1",
                "--size",
                "160x100",
                "--out",
                "p.png",
            ],
            dir.path(),
        );
        let e = stderr(&o);
        assert!(o.status.success(), "{plot}: {e}");
        let triangles: u64 = e
            .split(" surface triangles")
            .next()
            .and_then(|head| head.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{plot}: {e}"));
        assert!(triangles > 50, "{plot}: {e}");
        // The default look is coloured: by speed, or by pressure on a speed
        // surface.
        let colour = if plot == "speed" {
            "colour: Pressure"
        } else {
            "colour: Speed"
        };
        assert!(e.contains(colour), "{plot}: {e}");
    }
}

#[test]
fn render_pngs_carry_a_colour_legend_whenever_a_colour_map_is_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario_path("cavity.toml");
    let pixel_at = |extra: &[&str], x: usize, y: usize| {
        let mut args = small_cavity_render(&scenario, "l.png");
        args.extend_from_slice(extra);
        let o = flowscope(&args, dir.path());
        assert!(o.status.success(), "{}", stderr(&o));
        let (info, buf) = read_png(&dir.path().join("l.png"));
        let c = (y * info.width as usize + x) * info.color_type.samples();
        [buf[c] as i32, buf[c + 1] as i32, buf[c + 2] as i32]
    };
    use flowscope::render::colour::ColourMap;
    // The bar (rows 42 to 102 of a 200-line picture, 64 bands) shows the
    // map from its top colour down to its bottom colour.
    let expected = |map: ColourMap, row: usize| {
        let band = ((row as f32 + 0.5 - 42.0) / 60.0 * 64.0).floor();
        map.sample(1.0 - (band + 0.5) / 64.0)
            .map(|c| (c * 255.0) as i32)
    };
    let near = |a: [i32; 3], b: [i32; 3]| (0..3).all(|k| (a[k] - b[k]).abs() <= 6);
    for row in [44, 100] {
        let got = pixel_at(&[], 288, row);
        assert!(
            near(got, expected(ColourMap::Viridis, row)),
            "{row}: {got:?}"
        );
    }
    let top = pixel_at(&["--colour-map", "cool-warm"], 288, 44);
    assert!(near(top, expected(ColourMap::CoolWarm, 44)), "{top:?}");
    // One colour: no map, no legend; the background shows there.
    let plain = pixel_at(&["--colour-by", "plain"], 288, 44);
    let background = pixel_at(&["--colour-by", "plain"], 5, 5);
    assert_eq!(plain, background);
}

#[test]
fn render_gives_each_slice_its_own_field_and_range() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario_path("cavity.toml");
    let slices = [
        "--mode",
        "none",
        "--slice",
        "x=0.5,z=0.5",
        "--slice-colour-by",
    ];
    let cavity = small_cavity_render(&scenario, "s.png");
    let args = [
        &cavity[..],
        &slices,
        &["x=ux,z=speed", "--slice-range", "z=0:0.1"],
    ]
    .concat();
    let o = flowscope(&args, dir.path());
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("x slice: ux from "), "{err}");
    assert!(!err.contains("y slice"), "{err}");
    assert!(
        err.contains("z slice: speed from 0.0000e0 to 1.0000e-1"),
        "{err}"
    );
    let bad = flowscope(&[&cavity[..], &slices, &["x=wind"]].concat(), dir.path());
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("`wind` is not a field"),
        "{}",
        stderr(&bad)
    );
}

/// `render` of the cavity at 20³ after 50 CPU steps, one sample at 320×200,
/// into `out`.
fn small_cavity_render<'a>(scenario: &'a std::path::Path, out: &'a str) -> Vec<&'a str> {
    vec![
        "render",
        scenario.to_str().unwrap(),
        "--solver",
        "cpu",
        "--set",
        "domain.size=[20,20,20]",
        "--set",
        "fluid.length_cells=18",
        "--steps",
        "50",
        "--aa",
        "1",
        "--size",
        "320x200",
        "--out",
        out,
    ]
}
