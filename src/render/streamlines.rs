//! Streamlines: seeds from a rake, traced on the GPU by RK4
//! (`shaders/streamlines/trace.wgsl`) into a buffer the tube and sphere
//! shaders draw from in place.

use glam::Vec3;

use super::gpu::{Gpu, GpuError};
use super::gpu_data::TraceParams;
use super::passes::{buffer_entry, compute_pipeline, storage, volume_entry};
use super::volume::Volume;
use crate::solver::flags::CellType;

/// Where streamlines start (cell coordinates).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rake {
    /// The scenario's own: a plane just inside its inlet, or across the
    /// middle of the domain when it has none.
    Preset,
    /// `count` seeds evenly along a segment.
    Line { from: Vec3, to: Vec3, count: u32 },
    /// A grid of `counts[0] × counts[1]` seeds on the parallelogram
    /// `corner + s·a + t·b`, s, t in [0, 1].
    Plane {
        corner: Vec3,
        a: Vec3,
        b: Vec3,
        counts: [u32; 2],
    },
    /// `count` seeds uniformly at random in a box (the same ones for the same
    /// `seed`).
    Box {
        lo: Vec3,
        hi: Vec3,
        count: u32,
        seed: u32,
    },
}

/// How streamlines are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LineStyle {
    Tubes,
    /// Chains of sphere impostors, one per point.
    Spheres,
}

/// Streamline settings of the view.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamlineSettings {
    pub rake: Rake,
    /// RK4 steps per line at most.
    pub steps: u32,
    /// Step length in cells where the flow is fastest (the time step is this
    /// over the largest speed).
    pub step_cells: f32,
    /// Tube or sphere radius in cells.
    pub radius: f32,
    pub style: LineStyle,
}

impl Default for StreamlineSettings {
    fn default() -> Self {
        StreamlineSettings {
            rake: Rake::Preset,
            steps: 1000,
            step_cells: 0.5,
            radius: 0.3,
            style: LineStyle::Tubes,
        }
    }
}

/// Lines per workgroup of `trace.wgsl` (eight invocations each).
const LINES_PER_GROUP: u32 = 8;

/// Lines stop where the speed is below this fraction of the largest.
pub const STAGNATION: f32 = 1e-3;

fn seed_count(counts: &[u32]) -> u32 {
    counts.iter().fold(1u32, |a, &c| a.saturating_mul(c))
}

impl Rake {
    /// Number of seeds.
    pub fn count(&self) -> u32 {
        match *self {
            Rake::Preset => 0,
            Rake::Line { count, .. } | Rake::Box { count, .. } => count,
            Rake::Plane { counts, .. } => seed_count(&counts),
        }
    }

    /// The seed points (none for `Preset`: resolve it with [`Rake::preset`]).
    pub fn seeds(&self) -> Vec<Vec3> {
        let along = |i: u32, n: u32| {
            if n <= 1 {
                0.5
            } else {
                i as f32 / (n - 1) as f32
            }
        };
        match *self {
            Rake::Preset => Vec::new(),
            Rake::Line { from, to, count } => {
                (0..count).map(|i| from.lerp(to, along(i, count))).collect()
            }
            Rake::Plane {
                corner,
                a,
                b,
                counts,
            } => (0..counts[1])
                .flat_map(|j| {
                    (0..counts[0])
                        .map(move |i| corner + a * along(i, counts[0]) + b * along(j, counts[1]))
                })
                .collect(),
            Rake::Box {
                lo,
                hi,
                count,
                seed,
            } => {
                // SplitMix64: small, fast and plenty random for seed points.
                let mut state = seed as u64 ^ 0x9e37_79b9_7f4a_7c15;
                let mut next = move || {
                    state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                    let mut z = state;
                    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                    ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32
                };
                (0..count)
                    .map(|_| {
                        let t = Vec3::new(next(), next(), next());
                        lo + (hi - lo) * t
                    })
                    .collect()
            }
        }
    }

    /// The scenario's preset: a 16 × 12 plane one cell downstream of the
    /// inlet face with the most inlet cells, over the middle 80 % of that face;
    /// without an inlet, the same across the middle of the domain normal to x.
    pub fn preset(cell_flags: &[u8], size: [usize; 3]) -> Rake {
        let [nx, ny, nz] = size;
        let s = Vec3::new(nx as f32, ny as f32, nz as f32) - Vec3::ONE;
        // No flags (an analytic field): no inlet.
        let at = |x: usize, y: usize, z: usize| {
            cell_flags.get(x + nx * (y + ny * z)).copied().unwrap_or(0)
        };
        let is_inlet = |f: u8| CellType::of(f) == CellType::Inlet;
        let mut best = (0usize, 0usize, false);
        for axis in 0..3 {
            for high in [false, true] {
                let k = if high { size[axis] - 1 } else { 0 };
                let (b, c) = match axis {
                    0 => (ny, nz),
                    1 => (nx, nz),
                    _ => (nx, ny),
                };
                let mut n = 0;
                for i in 0..b {
                    for j in 0..c {
                        let f = match axis {
                            0 => at(k, i, j),
                            1 => at(i, k, j),
                            _ => at(i, j, k),
                        };
                        n += usize::from(is_inlet(f));
                    }
                }
                if n > best.0 {
                    best = (n, axis, high);
                }
            }
        }
        let (axis, position) = match best {
            (0, ..) => (0, 0.5 * s.x),
            (_, axis, high) => (axis, if high { s[axis] - 2.0 } else { 2.0 }),
        };
        let (u, v) = ((axis + 1) % 3, (axis + 2) % 3);
        let mut corner = Vec3::ZERO;
        corner[axis] = position;
        corner[u] = 0.1 * s[u];
        corner[v] = 0.1 * s[v];
        let (mut a, mut b) = (Vec3::ZERO, Vec3::ZERO);
        a[u] = 0.8 * s[u];
        b[v] = 0.8 * s[v];
        Rake::Plane {
            corner,
            a,
            b,
            counts: [16, 12],
        }
    }

    /// Line-list vertices (position, colour) outlining the rake, to show it
    /// in the view.
    pub fn outline(&self) -> Vec<f32> {
        let colour = [0.95, 0.9, 0.3];
        let mut out = Vec::new();
        let mut segment = |p: Vec3, q: Vec3| {
            out.extend_from_slice(&[p.x, p.y, p.z]);
            out.extend_from_slice(&colour);
            out.extend_from_slice(&[q.x, q.y, q.z]);
            out.extend_from_slice(&colour);
        };
        match *self {
            Rake::Preset => {}
            Rake::Line { from, to, .. } => segment(from, to),
            Rake::Plane { corner, a, b, .. } => {
                let c = [corner, corner + a, corner + a + b, corner + b];
                for i in 0..4 {
                    segment(c[i], c[(i + 1) % 4]);
                }
            }
            Rake::Box { lo, hi, .. } => {
                let corner = |k: u32| {
                    Vec3::new(
                        if k & 1 == 1 { hi.x } else { lo.x },
                        if k & 2 == 2 { hi.y } else { lo.y },
                        if k & 4 == 4 { hi.z } else { lo.z },
                    )
                };
                for k in 0..8u32 {
                    for bit in [1u32, 2, 4] {
                        if k & bit == 0 {
                            segment(corner(k), corner(k | bit));
                        }
                    }
                }
            }
        }
        out
    }

    /// Parses `line:X,Y,Z:X,Y,Z:N`, `plane:X,Y,Z:AX,AY,AZ:BX,BY,BZ:NA,NB`,
    /// `box:X,Y,Z:X,Y,Z:N[:SEED]` or `preset` (cell coordinates).
    pub fn parse(text: &str) -> Result<Rake, String> {
        let usage = "expected preset, line:X,Y,Z:X,Y,Z:N, plane:X,Y,Z:AX,AY,AZ:BX,BY,BZ:NA,NB or box:X,Y,Z:X,Y,Z:N[:SEED] (cells)";
        let parts: Vec<&str> = text.trim().split(':').collect();
        let vec3 = |s: &str| -> Result<Vec3, String> {
            let v: Vec<f32> = s
                .split(',')
                .map(|x| x.trim().parse::<f32>())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{text}: {s}: {e}; {usage}"))?;
            match v[..] {
                [x, y, z] if v.iter().all(|c| c.is_finite()) => Ok(Vec3::new(x, y, z)),
                _ => Err(format!("{text}: {s} is not three numbers; {usage}")),
            }
        };
        let counts = |s: &str, n: usize| -> Result<Vec<u32>, String> {
            let c: Vec<u32> = s
                .split(',')
                .map(|x| x.trim().parse::<u32>())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{text}: {s}: {e}; {usage}"))?;
            if c.len() != n || c.contains(&0) {
                return Err(format!(
                    "{text}: {s}: expected {n} positive count(s); {usage}"
                ));
            }
            Ok(c)
        };
        let rake = match parts[..] {
            ["preset"] => Rake::Preset,
            ["line", a, b, n] => Rake::Line {
                from: vec3(a)?,
                to: vec3(b)?,
                count: counts(n, 1)?[0],
            },
            ["plane", c, a, b, n] => {
                let n = counts(n, 2)?;
                Rake::Plane {
                    corner: vec3(c)?,
                    a: vec3(a)?,
                    b: vec3(b)?,
                    counts: [n[0], n[1]],
                }
            }
            ["box", lo, hi, n] | ["box", lo, hi, n, _] => Rake::Box {
                lo: vec3(lo)?,
                hi: vec3(hi)?,
                count: counts(n, 1)?[0],
                seed: match parts.get(4) {
                    Some(s) => s
                        .trim()
                        .parse()
                        .map_err(|e| format!("{text}: seed {s}: {e}"))?,
                    None => 1,
                },
            },
            _ => return Err(format!("{text}: {usage}")),
        };
        Ok(rake)
    }
}

/// The tracing pipeline and the lines' buffers.
pub struct Tracer {
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::ComputePipeline,
    params: wgpu::Buffer,
    seeds: Option<wgpu::Buffer>,
    /// What `seeds` holds (the rake rarely moves between frames).
    seed_points: Vec<Vec3>,
    /// Lines × (steps + 1) points: xyz, speed; NO_POINT past a line's end.
    pub points: Option<wgpu::Buffer>,
    lengths: Option<wgpu::Buffer>,
    pub lines: u32,
    pub steps: u32,
}

impl Tracer {
    pub fn new(gpu: &Gpu) -> Tracer {
        let c = wgpu::ShaderStages::COMPUTE;
        let layout = gpu
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("trace"),
                entries: &[
                    volume_entry(0),
                    volume_entry(1),
                    buffer_entry(2, storage(true), c),
                    buffer_entry(3, storage(false), c),
                    buffer_entry(4, storage(false), c),
                    buffer_entry(5, wgpu::BufferBindingType::Uniform, c),
                ],
            });
        Tracer {
            pipeline: compute_pipeline(gpu, &layout, "streamlines/trace.wgsl", "main"),
            layout,
            params: gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("trace params"),
                size: std::mem::size_of::<TraceParams>() as u64,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            seeds: None,
            seed_points: Vec::new(),
            points: None,
            lengths: None,
            lines: 0,
            steps: 0,
        }
    }

    /// Points per line in the buffer (steps + 1).
    pub fn points_per_line(&self) -> u32 {
        self.steps + 1
    }

    /// Sets the seeds and makes room for `steps` steps per line. Checks the
    /// size against the device's storage limit.
    pub fn set_seeds(&mut self, gpu: &Gpu, seeds: &[Vec3], steps: u32) -> Result<(), GpuError> {
        let steps = steps.max(1);
        let lines = seeds.len() as u32;
        let bytes = lines as u64 * (steps as u64 + 1) * 16;
        let groups = gpu.device.limits().max_compute_workgroups_per_dimension as u64;
        if lines as u64 > groups * LINES_PER_GROUP as u64 {
            return Err(GpuError::Device(format!(
                "{lines} streamlines are more than this GPU traces at once ({}); use fewer seeds",
                groups * LINES_PER_GROUP as u64
            )));
        }
        let limit = gpu.device.limits().max_storage_buffer_binding_size;
        if bytes > limit {
            return Err(GpuError::Device(format!(
                "{lines} streamlines of {steps} steps need {} MiB, more than this GPU binds at once ({} MiB); use fewer lines or steps",
                bytes >> 20,
                limit >> 20
            )));
        }
        use wgpu::util::DeviceExt;
        use wgpu::BufferUsages as U;
        let same = lines == self.lines && steps == self.steps && self.points.is_some();
        if same && self.seed_points == seeds {
            return Ok(());
        }
        self.seed_points = seeds.to_vec();
        self.lines = lines;
        self.steps = steps;
        if lines == 0 {
            self.seeds = None;
            self.points = None;
            self.lengths = None;
            return Ok(());
        }
        let data: Vec<[f32; 4]> = seeds.iter().map(|s| s.extend(0.0).to_array()).collect();
        self.seeds = Some(
            gpu.device
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some("seeds"),
                    contents: bytemuck::cast_slice(&data),
                    usage: U::STORAGE,
                }),
        );
        if !same {
            let buffer = |label, size| {
                gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size,
                    usage: U::STORAGE | U::COPY_SRC,
                    mapped_at_creation: false,
                })
            };
            self.points = Some(buffer("streamline points", bytes));
            self.lengths = Some(buffer("streamline lengths", lines as u64 * 4));
        }
        Ok(())
    }

    /// Records tracing every seed through the velocity of `fields` with time
    /// step `dt`, stopping in `solid` cells and below `min_speed`.
    pub fn trace(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        fields: &Volume,
        solid: &Volume,
        dt: f32,
        min_speed: f32,
    ) {
        let (Some(seeds), Some(points), Some(lengths)) = (&self.seeds, &self.points, &self.lengths)
        else {
            return;
        };
        let p = TraceParams {
            size: fields.size,
            steps: self.steps,
            dt,
            min_speed,
            lines: self.lines,
            _pad: 0,
        };
        gpu.queue
            .write_buffer(&self.params, 0, bytemuck::bytes_of(&p));
        let texture = |binding, view| wgpu::BindGroupEntry {
            binding,
            resource: wgpu::BindingResource::TextureView(view),
        };
        fn buffer(binding: u32, b: &wgpu::Buffer) -> wgpu::BindGroupEntry<'_> {
            wgpu::BindGroupEntry {
                binding,
                resource: b.as_entire_binding(),
            }
        }
        let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("trace"),
            layout: &self.layout,
            entries: &[
                texture(0, &fields.view),
                texture(1, &solid.view),
                buffer(2, seeds),
                buffer(3, points),
                buffer(4, lengths),
                buffer(5, &self.params),
            ],
        });
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups(self.lines.div_ceil(LINES_PER_GROUP), 1, 1);
    }

    /// Points per line that are set (0: the seed was in a solid or outside).
    pub fn read_lengths(&self, gpu: &Gpu) -> Result<Vec<u32>, GpuError> {
        match &self.lengths {
            Some(b) => {
                Ok(bytemuck::cast_slice(&gpu.read_buffer(b, self.lines as u64 * 4)?).to_vec())
            }
            None => Ok(Vec::new()),
        }
    }

    /// Line `line`'s points (xyz, speed), as many as it has.
    pub fn read_line(&self, gpu: &Gpu, line: u32) -> Result<Vec<[f32; 4]>, GpuError> {
        let Some(points) = &self.points else {
            return Ok(Vec::new());
        };
        let n = self.read_lengths(gpu)?[line as usize] as usize;
        let all: Vec<[f32; 4]> = bytemuck::cast_slice(&gpu.read_buffer(
            points,
            self.lines as u64 * self.points_per_line() as u64 * 16,
        )?)
        .to_vec();
        let start = line as usize * self.points_per_line() as usize;
        Ok(all[start..start + n].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rakes_parse_and_seed_where_they_say() {
        let line = Rake::parse("line:0,0,0:10,0,0:11").unwrap();
        let s = line.seeds();
        assert_eq!(s.len(), 11);
        assert_eq!(s[3], Vec3::new(3.0, 0.0, 0.0));
        let plane = Rake::parse("plane:1,2,3:4,0,0:0,6,0:3,4").unwrap();
        let s = plane.seeds();
        assert_eq!((s.len(), plane.count()), (12, 12));
        assert_eq!(s[0], Vec3::new(1.0, 2.0, 3.0));
        assert_eq!(s[11], Vec3::new(5.0, 8.0, 3.0));
        let boxed = Rake::parse("box:1,1,1:3,5,7:500:9").unwrap();
        let s = boxed.seeds();
        assert_eq!(s, boxed.seeds(), "same seed, same points");
        assert!(s
            .iter()
            .all(|p| p.cmpge(Vec3::ONE).all() && p.cmple(Vec3::new(3.0, 5.0, 7.0)).all()));
        let mean = s.iter().copied().sum::<Vec3>() / 500.0;
        assert!((mean - Vec3::new(2.0, 3.0, 4.0)).length() < 0.3, "{mean}");
        assert_eq!(Rake::parse("preset").unwrap(), Rake::Preset);
        for bad in [
            "",
            "line:0,0:1,1,1:3",
            "plane:0,0,0:1,0,0:0,1,0:3",
            "box:0,0,0:1,1,1:0",
            "ring:1",
        ] {
            assert!(Rake::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_preset_sits_behind_the_inlet_or_mid_domain() {
        let size = [20, 10, 8];
        let mut f = vec![0u8; 20 * 10 * 8];
        let inlet = CellType::Inlet as u8;
        for z in 0..8 {
            for y in 0..10 {
                f[19 + 20 * (y + 10 * z)] = inlet;
            }
        }
        let Rake::Plane { corner, a, b, .. } = Rake::preset(&f, size) else {
            panic!("a plane")
        };
        assert_eq!(corner.x, 17.0);
        assert_eq!((a.x, b.x), (0.0, 0.0));
        let Rake::Plane { corner, .. } = Rake::preset(&vec![0u8; 20 * 10 * 8], size) else {
            panic!("a plane")
        };
        assert_eq!(corner.x, 9.5);
        assert_eq!(Rake::Preset.outline().len(), 0);
        assert_eq!(
            Rake::parse("box:0,0,0:1,1,1:4").unwrap().outline().len(),
            12 * 12
        );
    }
}
