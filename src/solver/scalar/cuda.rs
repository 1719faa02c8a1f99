//! The contaminants on the flow's GPU: `kernels/scalar/transport.cu`, the
//! sub-steps of [`super::Dispersion`] queued on the flow solver's stream
//! ([`Solver::device_stream`]) after its steps, in the velocity the flow's
//! step kernels leave as they read it ([`Solver::enqueue_leaving_velocity`]).
//! Compiled without FMA contraction and in the CPU's order of operations, so
//! that the two agree bit for bit given the same velocity.
//!
//! The largest Courant number, which sets the number of sub-steps, is copied
//! back as a transport step begins; the host waits for it only where the
//! step ends, by when the flow's later steps are queued behind it.

use std::sync::Arc;

use cudarc::driver::{
    CudaEvent, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice, PushKernelArg,
};

use super::engine::{not_begun, Engine};
use super::transport::{self, Plan, Role, Sub};
use super::{pack_state, unpack_state, Reading, Setup, MAX_FIELDS};
use crate::solver::lbm::cuda::guarded;
use crate::solver::{Grid, Params, Solver, SolverError};

const SOURCE: &str = include_str!("../../../kernels/scalar/transport.cu");

/// Layers per thread of `eddy_maxima` (defined for NVRTC as MAXIMA_LAYERS).
const MAXIMA_LAYERS: u32 = 8;
/// Layers per thread of `diffuse` (DIFFUSE_LAYERS): 4 and 8 took the same
/// time at 256³ on the H100, 16 a tenth longer (at 10 blocks a
/// multiprocessor).
const DIFFUSE_LAYERS: u32 = 8;
/// Blocks of `diffuse` a multiprocessor is to hold (DIFFUSE_BLOCKS, its
/// launch bound): 16 leaves 32 registers a thread. H100, 256³: 57.1 µs a
/// sub-step, the same at 14, against 61.7 µs at 12 (40 registers); loading
/// each layer a layer ahead took 60.0 µs at 12 and spilled at 16 (71.5 µs).
const DIFFUSE_BLOCKS: u32 = 16;
/// Blocks of `diffuse_eddy` (DIFFUSE_EDDY_BLOCKS), which also loads the
/// diffusivities around each cell: 12, 40 registers a thread.
const DIFFUSE_EDDY_BLOCKS: u32 = 12;
/// Layers per thread of `advect` (ADVECT_LAYERS).
const ADVECT_LAYERS: u32 = 8;
/// Blocks of `advect` a multiprocessor is to hold (ADVECT_BLOCKS): 8
/// leaves 64 registers a thread. H100, 256³: 236 µs a sub-step (248 µs
/// while the limiter divided), against 315 µs at the compiler's own 96 (5
/// blocks).
const ADVECT_BLOCKS: u32 = 8;

struct Kernels {
    advect: CudaFunction,
    diffuse: CudaFunction,
    diffuse_eddy: CudaFunction,
    eddy_maxima: CudaFunction,
    courant_max: CudaFunction,
    release: CudaFunction,
    doses: CudaFunction,
    gather: CudaFunction,
}

fn dev(e: impl std::fmt::Display) -> SolverError {
    SolverError::Device(format!("contaminant transport: {e}"))
}

/// Compiles `kernels/scalar/transport.cu` for compute capability
/// `major.minor` with NVRTC (no GPU needed).
pub fn compile(major: i32, minor: i32) -> Result<cudarc::nvrtc::Ptx, String> {
    // SAFETY: only tries to open the shared library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(
            "NVRTC (libnvrtc.so) is not installed: the contaminant moves on the host".into(),
        );
    }
    let options = cudarc::nvrtc::CompileOptions {
        options: vec![
            format!("--gpu-architecture=compute_{major}{minor}"),
            // Products rounded as on the CPU: the same values.
            "--fmad=false".into(),
            format!("-DMAXIMA_LAYERS={MAXIMA_LAYERS}"),
            format!("-DDIFFUSE_LAYERS={DIFFUSE_LAYERS}"),
            format!("-DDIFFUSE_BLOCKS={DIFFUSE_BLOCKS}"),
            format!("-DDIFFUSE_EDDY_BLOCKS={DIFFUSE_EDDY_BLOCKS}"),
            format!("-DADVECT_LAYERS={ADVECT_LAYERS}"),
            format!("-DADVECT_BLOCKS={ADVECT_BLOCKS}"),
        ],
        ..Default::default()
    };
    match std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(SOURCE, options)) {
        Ok(Ok(ptx)) => Ok(ptx),
        Ok(Err(e)) => Err(format!(
            "NVRTC could not compile kernels/scalar/transport.cu: {e:?}"
        )),
        Err(_) => Err("NVRTC failed on kernels/scalar/transport.cu".into()),
    }
}

/// GPU memory of `fields` fields on `n` cells: the fields, the next values,
/// the diffusivities, the velocity, the roles and the open faces.
fn device_bytes(fields: usize, n: u64) -> u64 {
    (fields as u64 + 5) * 4 * n + 2 * n
}

/// The concentration fields of a run on the flow's GPU.
pub struct DeviceDispersion {
    setup: Setup,
    grid: Grid,
    stream: Arc<CudaStream>,
    kernels: Kernels,
    /// [`Role`] of each cell (0 open, 1 held, 2 closed).
    role: CudaSlice<u8>,
    /// [`transport::open_faces`] of each cell, for `diffuse`.
    faces: CudaSlice<u8>,
    /// The flow's cell flags, whose closed cells' velocity the state leaves
    /// out ([`transport::clear_closed`]).
    flags: Vec<u8>,
    /// The fields at the start: the inflow concentration in inlets.
    initial: Vec<f32>,
    fields: Vec<CudaSlice<f32>>,
    next: CudaSlice<f32>,
    /// Per cell with the subgrid model; else the molecular value first.
    diffusivity: CudaSlice<f32>,
    /// One zero: the diffusivity of an advection-only sub-step.
    zero: CudaSlice<f32>,
    /// Each source's cells.
    sources: Vec<CudaSlice<u32>>,
    receptors: CudaSlice<u32>,
    /// [`MAX_FIELDS`] per receptor.
    doses: CudaSlice<f64>,
    /// The fields at the receptors ([`Engine::readings`]).
    gathered: CudaSlice<f32>,
    /// The velocity of the transport step under way (three planes).
    velocity: CudaSlice<f32>,
    /// The `eddy_maxima` kernel's two maxima, as float bits, and their copy on
    /// the host.
    largest: CudaSlice<u32>,
    largest_host: PinnedHostSlice<u32>,
    /// Recorded after each copy into `largest_host`: the flow solver turns
    /// cudarc's own event tracking off, so the pinned slice's event is
    /// never recorded and its reads would not wait.
    largest_copied: CudaEvent,
    /// What the last transport step read back.
    last_maxima: (f32, f32),
    /// What the transport step under way began with.
    begun: Option<Begun>,
    /// The fields copied to the host, when asked for.
    host: Vec<Vec<f32>>,
    /// The molecular diffusivity in `diffusivity[0]`, while it holds one.
    uploaded: Option<f32>,
}

/// The parameters a transport step began with.
#[derive(Clone, Copy)]
struct Begun {
    /// The molecular diffusivity.
    molecular: f32,
    /// With the subgrid model's eddy diffusivity per cell.
    eddy: bool,
}

impl DeviceDispersion {
    /// Compiles the kernels and uploads the fields for the GPU `flow` runs
    /// on; `None` where it runs on none, the error says why it cannot be
    /// done on its GPU.
    pub fn new(
        flow: &mut dyn Solver,
        setup: Setup,
    ) -> Result<Option<DeviceDispersion>, SolverError> {
        let Some(stream) = flow.device_stream() else {
            return Ok(None);
        };
        if !flow.prepare_leaving_velocity()? {
            return Ok(None);
        }
        let ctx = stream.context().clone();
        let (major, minor) = ctx.compute_capability().map_err(dev)?;
        let ptx = compile(major, minor).map_err(SolverError::Device)?;
        let grid = *flow.grid();
        let n = grid.cells();
        if n as u64 >= u32::MAX as u64 {
            return Err(SolverError::InvalidParams(format!(
                "grid {grid}: the GPU transport takes fewer than 2^32 cells"
            )));
        }
        let flags = flow.flags();
        let roles: Vec<u8> = flags
            .iter()
            .map(|&f| match Role::of(f) {
                Role::Open => 0,
                Role::Held => 1,
                Role::Closed => 2,
            })
            .collect();
        let faces = transport::open_faces(&grid, flags);
        let initial: Vec<f32> = roles
            .iter()
            .map(|&r| if r == 1 { setup.inflow } else { 0.0 })
            .collect();
        // cudarc allocates at least one element: empty lists keep a dummy.
        let at_least_one = |v: Vec<u32>| if v.is_empty() { vec![0] } else { v };
        let receptor_cells = at_least_one(setup.receptors.iter().map(|r| r.cell).collect());
        let slots = setup.receptors.len().max(1);
        let kernels = guarded("loading the contaminant kernels", || {
            let module = ctx.load_module(ptx)?;
            let load = |name: &str| module.load_function(name);
            Ok(Kernels {
                advect: load("advect")?,
                diffuse: load("diffuse")?,
                diffuse_eddy: load("diffuse_eddy")?,
                eddy_maxima: load("eddy_maxima")?,
                courant_max: load("courant_max")?,
                release: load("release")?,
                doses: load("doses")?,
                gather: load("gather")?,
            })
        })
        .map_err(SolverError::Device)?;
        let bytes = device_bytes(setup.fields, n as u64);
        guarded("contaminant transport", || {
            let mut fields = Vec::new();
            for _ in 0..setup.fields {
                fields.push(stream.clone_htod(&initial)?);
            }
            Ok(Some(DeviceDispersion {
                grid,
                kernels,
                role: stream.clone_htod(&roles)?,
                faces: stream.clone_htod(&faces)?,
                flags: flags.to_vec(),
                fields,
                next: stream.alloc_zeros(n)?,
                diffusivity: stream.alloc_zeros(n)?,
                zero: stream.alloc_zeros(1)?,
                sources: setup
                    .sources
                    .iter()
                    .map(|s| stream.clone_htod(&at_least_one(s.cells.clone())))
                    .collect::<Result<_, _>>()?,
                receptors: stream.clone_htod(&receptor_cells)?,
                doses: stream.alloc_zeros(MAX_FIELDS * slots)?,
                gathered: stream.alloc_zeros(MAX_FIELDS * slots)?,
                velocity: stream.alloc_zeros(3 * n)?,
                largest: stream.alloc_zeros(2)?,
                // SAFETY: each read (`maxima`) waits for the copy of
                // `largest` queued before it (`largest_copied`).
                largest_host: unsafe { ctx.alloc_pinned_with_flags(2, 0)? },
                largest_copied: ctx.new_event(None)?,
                last_maxima: (0.0, 0.0),
                begun: None,
                host: Vec::new(),
                uploaded: None,
                initial,
                setup,
                stream: stream.clone(),
            }))
        })
        .map_err(|e| {
            SolverError::Device(format!(
                "no room for the contaminant on the GPU ({} needed: {e}); carry fewer fields or use a smaller grid",
                crate::system::human_bytes(bytes)
            ))
        })
    }

    fn lattice_config(&self) -> LaunchConfig {
        let [nx, ny, nz] = self.grid.size.map(|s| s as u32);
        // Four rows to a block: the faces' and the strain's neighbours along
        // y are in the same block. H100, urban release moved every step:
        // +79.5% against +85.8% with blocks of one row of 128 (BENCHMARKS.md,
        // 2026-11-24 (late)).
        let [bx, by, bz] = [32, 4, 1];
        LaunchConfig {
            grid_dim: (nx.div_ceil(bx), ny.div_ceil(by), nz.div_ceil(bz)),
            block_dim: (bx, by, bz),
            shared_mem_bytes: 0,
        }
    }

    fn list_config(count: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: ((count as u32).div_ceil(128).max(1), 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    fn periodic(&self) -> u32 {
        (0..3)
            .filter(|&a| self.grid.periodic[a])
            .map(|a| 1u32 << a)
            .sum()
    }

    /// Queues the eddy diffusivities and the maxima of the velocity just
    /// left in `self.velocity`, and the maxima's copy to the host.
    fn queue_maxima(&mut self, begun: Begun, smagorinsky: f32) -> Result<(), SolverError> {
        let [nx, ny, nz] = self.grid.size.map(|s| s as i32);
        let periodic = self.periodic();
        let molecular = begun.molecular;
        if begun.eddy {
            self.uploaded = None;
        } else if self.uploaded != Some(molecular) {
            // Once per value: a copy from the host waits for the stream.
            self.stream
                .memcpy_htod(&[molecular], &mut self.diffusivity.slice_mut(0..1))
                .map_err(dev)?;
            self.uploaded = Some(molecular);
        }
        self.stream.memset_zeros(&mut self.largest).map_err(dev)?;
        if begun.eddy {
            let sct = self.setup.schmidt_turbulent;
            let mut cfg = self.lattice_config();
            cfg.grid_dim.2 = (nz as u32).div_ceil(MAXIMA_LAYERS * cfg.block_dim.2);
            let mut b = self.stream.launch_builder(&self.kernels.eddy_maxima);
            b.arg(&self.role)
                .arg(&self.velocity)
                .arg(&nx)
                .arg(&ny)
                .arg(&nz)
                .arg(&periodic)
                .arg(&smagorinsky)
                .arg(&sct)
                .arg(&molecular)
                .arg(&mut self.diffusivity)
                .arg(&mut self.largest);
            // SAFETY: eddy_maxima(const u8*, const float*, int, int, int,
            // u32, float, float, float, float*, u32*): roles and
            // diffusivities of n cells, the velocity 3n floats, two
            // outputs; the grid covers the cells.
            unsafe { b.launch(cfg) }.map_err(dev)?;
        } else {
            let n = self.grid.cells() as u32;
            // Four cells a thread at most once over, in at most 2048 blocks
            // (a few a multiprocessor) that stride on from there.
            let cfg = LaunchConfig {
                grid_dim: (n.div_ceil(4 * 256).clamp(1, 2048), 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = self.stream.launch_builder(&self.kernels.courant_max);
            b.arg(&self.role)
                .arg(&self.velocity)
                .arg(&n)
                .arg(&mut self.largest);
            // SAFETY: courant_max(const u8*, const float*, u32, u32*): the
            // roles of n cells, the velocity 3n floats, one output; the
            // threads stride over the cells.
            unsafe { b.launch(cfg) }.map_err(dev)?;
        }
        self.stream
            .memcpy_dtoh(&self.largest, &mut self.largest_host)
            .map_err(dev)?;
        self.largest_copied.record(&self.stream).map_err(dev)
    }

    /// Waits for the maxima [`Self::queue_maxima`] queued: the largest
    /// Courant-number sum and diffusivity of the open cells.
    fn maxima(&self, begun: Begun) -> Result<(f32, f32), SolverError> {
        self.largest_copied.synchronize().map_err(dev)?;
        let out = self.largest_host.as_slice().map_err(dev)?;
        let courant = f32::from_bits(out[0]);
        let diffusivity = if begun.eddy {
            begun.molecular.max(f32::from_bits(out[1]))
        } else {
            begun.molecular
        };
        Ok((courant, diffusivity))
    }

    /// Begins a transport step in the velocity now in `self.velocity`, with
    /// the flow parameters `params`.
    fn begin_with(&mut self, params: &Params) -> Result<(), SolverError> {
        let begun = Begun {
            molecular: params.viscosity() / self.setup.schmidt,
            eddy: params.smagorinsky > 0.0,
        };
        self.queue_maxima(begun, params.smagorinsky)?;
        self.begun = Some(begun);
        Ok(())
    }

    /// Queues the sub-steps of field `k` of the transport step over the
    /// `span` flow steps from `first` as `plan` cuts it, in
    /// `self.velocity`, each followed by its sources' release
    /// ([`Setup::release`], as on the host).
    fn substeps(
        &mut self,
        k: usize,
        begun: Begun,
        first: u64,
        span: u32,
        plan: Plan,
    ) -> Result<(), SolverError> {
        for (sub, dt, round_ends) in plan.sub_steps(span) {
            self.launch_sub_step(k, sub, dt, begun)?;
            for (source, s) in self.setup.sources.iter().enumerate() {
                let Some((add, value)) = (s.field == k)
                    .then(|| Setup::release_value(s, first, span, plan.rounds))
                    .flatten()
                    .filter(|&(add, _)| round_ends || !add)
                else {
                    continue;
                };
                let cells = &self.sources[source];
                let count = s.cells.len() as u32;
                let add = add as u32;
                let mut b = self.stream.launch_builder(&self.kernels.release);
                b.arg(&mut self.fields[k])
                    .arg(cells)
                    .arg(&count)
                    .arg(&add)
                    .arg(&value);
                // SAFETY: release(float*, const u32*, u32, u32, float): `count`
                // cells, each inside the field.
                unsafe { b.launch(Self::list_config(count as usize)) }.map_err(dev)?;
            }
        }
        Ok(())
    }

    /// One sub-step of field `k` into `self.next`, then swapped in.
    fn launch_sub_step(
        &mut self,
        k: usize,
        sub: Sub,
        dt: f32,
        begun: Begun,
    ) -> Result<(), SolverError> {
        let eddy = begun.eddy;
        let [nx, ny, nz] = self.grid.size.map(|s| s as i32);
        let periodic = self.periodic();
        // Both take two cells of a row and a run of layers a thread.
        let layers = match sub {
            Sub::Diffusion => DIFFUSE_LAYERS,
            _ => ADVECT_LAYERS,
        };
        let mut cfg = self.lattice_config();
        cfg.grid_dim.0 = (nx as u32).div_ceil(2 * cfg.block_dim.0);
        cfg.grid_dim.2 = (nz as u32).div_ceil(layers);
        if sub == Sub::Diffusion {
            // The value the host engine diffuses with, as queue_maxima
            // uploads it for the other kernels.
            let d = begun.molecular;
            let kernel = match eddy {
                true => &self.kernels.diffuse_eddy,
                false => &self.kernels.diffuse,
            };
            let mut b = self.stream.launch_builder(kernel);
            b.arg(&self.fields[k]).arg(&mut self.next).arg(&self.faces);
            match eddy {
                true => b.arg(&self.diffusivity),
                false => b.arg(&d),
            };
            b.arg(&dt).arg(&nx).arg(&ny).arg(&nz).arg(&periodic);
            // SAFETY: diffuse(const float*, float*, const u8*, float, float,
            // int, int, int, u32), and diffuse_eddy likewise with the
            // per-cell diffusivities (const float*) fourth: n cells each;
            // the grid covers the columns, two of a row and DIFFUSE_LAYERS
            // layers a thread.
            unsafe { b.launch(cfg) }.map_err(dev)?;
        } else {
            let (diffusivity, single) = match sub {
                Sub::Advection => (&self.zero, 1u32),
                _ => (&self.diffusivity, (!eddy) as u32),
            };
            let mut b = self.stream.launch_builder(&self.kernels.advect);
            b.arg(&self.fields[k])
                .arg(&mut self.next)
                .arg(&self.role)
                .arg(&self.velocity)
                .arg(diffusivity)
                .arg(&single)
                .arg(&dt)
                .arg(&nx)
                .arg(&ny)
                .arg(&nz)
                .arg(&periodic);
            // SAFETY: advect(const float*, float*, const u8*, const float*,
            // const float*, u32, float, int, int, int, u32): n cells each,
            // the velocity 3n (the diffusivities one where `single`); the
            // grid covers the columns, two of a row and ADVECT_LAYERS layers
            // a thread.
            unsafe { b.launch(cfg) }.map_err(dev)?;
        }
        std::mem::swap(&mut self.fields[k], &mut self.next);
        Ok(())
    }
}

impl Engine for DeviceDispersion {
    fn place(&self) -> &'static str {
        "on the GPU"
    }

    fn setup(&self) -> &Setup {
        &self.setup
    }

    fn begin(&mut self, flow: &mut dyn Solver) -> Result<(), SolverError> {
        if !flow.enqueue_leaving_velocity(&mut self.velocity)? {
            return Err(SolverError::Device(
                "the flow no longer leaves its velocity on the GPU".into(),
            ));
        }
        self.begin_with(flow.params())
    }

    fn transport(&mut self, _flow: &dyn Solver, first: u64, span: u32) -> Result<(), SolverError> {
        let begun = self.begun.take().ok_or_else(not_begun)?;
        let (courant, diffusivity) = self.maxima(begun)?;
        self.last_maxima = (courant, diffusivity);
        let plan = Setup::plan(span, courant, diffusivity);
        for k in 0..self.setup.fields {
            self.substeps(k, begun, first, span, plan)?;
        }
        Ok(())
    }

    fn under_way(&self) -> bool {
        self.begun.is_some()
    }

    fn maxima(&self) -> (f32, f32) {
        self.last_maxima
    }

    fn add_doses(&mut self) -> Result<(), SolverError> {
        let count = self.setup.receptors.len() as u32;
        if count == 0 {
            return Ok(());
        }
        for k in 0..self.setup.fields {
            let k32 = k as u32;
            let mut b = self.stream.launch_builder(&self.kernels.doses);
            b.arg(&self.fields[k])
                .arg(&self.receptors)
                .arg(&count)
                .arg(&k32)
                .arg(&mut self.doses);
            // SAFETY: doses(const float*, const u32*, u32, u32, double*):
            // `count` receptors, MAX_FIELDS doses each.
            unsafe { b.launch(Self::list_config(count as usize)) }.map_err(dev)?;
        }
        Ok(())
    }

    fn fields(&mut self) -> Result<&[Vec<f32>], SolverError> {
        let n = self.grid.cells();
        self.host.resize(self.setup.fields, Vec::new());
        for (host, field) in self.host.iter_mut().zip(&self.fields) {
            host.resize(n, 0.0);
            self.stream.memcpy_dtoh(field, host).map_err(dev)?;
        }
        Ok(&self.host)
    }

    fn readings(&mut self) -> Result<Vec<Vec<Reading>>, SolverError> {
        let count = self.setup.receptors.len();
        if count == 0 {
            return Ok(Vec::new());
        }
        for k in 0..self.setup.fields {
            let (k32, count32) = (k as u32, count as u32);
            let mut b = self.stream.launch_builder(&self.kernels.gather);
            b.arg(&self.fields[k])
                .arg(&self.receptors)
                .arg(&count32)
                .arg(&k32)
                .arg(&mut self.gathered);
            // SAFETY: gather(const float*, const u32*, u32, u32, float*):
            // `count` receptors, MAX_FIELDS slots each.
            unsafe { b.launch(Self::list_config(count)) }.map_err(dev)?;
        }
        let c = self.stream.clone_dtoh(&self.gathered).map_err(dev)?;
        let dose = self.stream.clone_dtoh(&self.doses).map_err(dev)?;
        Ok((0..count)
            .map(|r| {
                (0..self.setup.fields)
                    .map(|k| Reading {
                        concentration: c[k * count + r],
                        dose: dose[MAX_FIELDS * r + k],
                    })
                    .collect()
            })
            .collect())
    }

    fn state(&mut self) -> Result<Vec<f32>, SolverError> {
        let dose = self.stream.clone_dtoh(&self.doses).map_err(dev)?;
        let doses: Vec<[f64; MAX_FIELDS]> = dose
            .chunks_exact(MAX_FIELDS)
            .take(self.setup.receptors.len())
            .map(|d| d.try_into().expect("chunks of MAX_FIELDS"))
            .collect();
        let n = self.grid.cells();
        let velocity = match self.begun {
            Some(_) => {
                let v = self.stream.clone_dtoh(&self.velocity).map_err(dev)?;
                let mut fields = crate::solver::Fields::new(self.grid.size);
                fields.ux = v[..n].to_vec();
                fields.uy = v[n..2 * n].to_vec();
                fields.uz = v[2 * n..].to_vec();
                transport::clear_closed(&self.flags, &mut fields);
                Some(fields)
            }
            None => None,
        };
        let planes = velocity.as_ref().map(|v| [&v.ux[..], &v.uy[..], &v.uz[..]]);
        Ok(pack_state(self.fields()?, &doses, planes))
    }

    fn set_state(&mut self, state: &[f32], params: &Params) -> Result<(), SolverError> {
        let mut fields = vec![Vec::new(); self.setup.fields];
        let mut doses = vec![[0.0; MAX_FIELDS]; self.setup.receptors.len()];
        let velocity = unpack_state(state, self.grid.cells(), &mut fields, &mut doses)
            .map_err(SolverError::StateMismatch)?;
        for (dev_field, host) in self.fields.iter_mut().zip(&fields) {
            self.stream.memcpy_htod(host, dev_field).map_err(dev)?;
        }
        if !doses.is_empty() {
            let flat: Vec<f64> = doses.iter().flatten().copied().collect();
            self.stream
                .memcpy_htod(&flat, &mut self.doses.slice_mut(0..flat.len()))
                .map_err(dev)?;
        }
        self.begun = None;
        if !velocity.is_empty() {
            self.stream
                .memcpy_htod(velocity, &mut self.velocity)
                .map_err(dev)?;
            self.begin_with(params)?;
        }
        self.stream.synchronize().map_err(dev)
    }

    fn reset(&mut self, _flags: &[u8]) -> Result<(), SolverError> {
        for field in &mut self.fields {
            self.stream.memcpy_htod(&self.initial, field).map_err(dev)?;
        }
        self.stream.memset_zeros(&mut self.doses).map_err(dev)?;
        self.begun = None;
        self.stream.synchronize().map_err(dev)
    }

    fn memory_bytes(&self) -> u64 {
        device_bytes(self.setup.fields, self.grid.cells() as u64)
    }
}
