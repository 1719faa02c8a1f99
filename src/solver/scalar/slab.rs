//! The contaminants of one process of an MPI run ([`SlabHost`]): each
//! process moves the concentrations of the layers along z its flow owns, with
//! two layers of halo on each side, and exchanges those halos with its
//! neighbours before every sub-step. Every face flux of an owned cell reads
//! at most two cells beyond the face, and the eddy diffusivity of a face's
//! cell one beyond that, so each owned value is computed from exactly the
//! numbers one process would use: the concentrations equal one process's bit
//! for bit, and no process ever holds the whole grid's velocity.

use std::ops::Range;

use super::engine::{not_begun, Engine, Spread};
use super::transport::{self, Role};
use super::{pack_state, unpack_state, Reading, Setup, MAX_FIELDS};
use crate::solver::{Fields, Grid, Params, Solver, SolverError};
use crate::system::ranks::Peers;

/// Layers of halo on each side: the limited fluxes read two cells upstream
/// of a face.
const HALO: usize = 2;

/// Message tags, apart from the flow's (which number its transfers from 0).
const TAG_UP: i32 = 30_001;
const TAG_DOWN: i32 = 30_002;
const TAG_VELOCITY_UP: i32 = 30_003;
const TAG_VELOCITY_DOWN: i32 = 30_004;

/// The host engine of one process of an MPI run: its own layers of every
/// field (and halos), the sources and receptors in them.
pub struct SlabHost {
    peers: &'static dyn Peers,
    spread: Spread,
    /// The whole run's setup (what [`Engine::setup`] answers).
    setup: Setup,
    global: Grid,
    /// Global layer of each local one (halos wrap at a periodic face).
    layers: Vec<usize>,
    /// The owned layers in local numbering.
    owned: Range<usize>,
    /// The processes the halos below and above come from.
    below: Option<usize>,
    above: Option<usize>,
    /// Each process's owned layers, in rank order.
    extents: Vec<Range<usize>>,
    grid: Grid,
    flags: Vec<u8>,
    fields: Vec<Vec<f32>>,
    next: Vec<f32>,
    flux: Vec<f32>,
    diffusivity: Vec<f32>,
    /// The velocity of the transport step under way, halos included.
    velocity: Fields,
    begun: Option<Params>,
    /// Each source's cells among the owned ones, in local numbering.
    sources: Vec<Vec<u32>>,
    /// The owned receptors: index in the setup's list, local cell.
    receptors: Vec<(usize, usize)>,
    /// Per receptor of the whole list (zero where another process owns it).
    doses: Vec<[f64; MAX_FIELDS]>,
    maxima: (f32, f32),
    /// The whole fields, gathered for [`Engine::fields`].
    whole: Vec<Vec<f32>>,
    /// Halo planes on the way in, below then above, and the owned planes
    /// on the way out (kept from sub-step to sub-step).
    incoming: Vec<f32>,
    outgoing: Vec<f32>,
    /// The flow's velocity of the owned layers, as it hands it over.
    own_velocity: [Vec<f32>; 3],
}

impl SlabHost {
    /// The engine of the layers `own` (global numbering) of `flow`'s grid on
    /// this process of `peers`; every process makes its own together.
    pub fn new(
        flow: &dyn Solver,
        own: Range<usize>,
        peers: &'static dyn Peers,
        setup: Setup,
    ) -> Result<SlabHost, SolverError> {
        let global = *flow.grid();
        let [nx, ny, nz] = global.size;
        let nxy = nx * ny;
        let ends = peers.all_gather_f64(&[own.start as f64, own.end as f64]);
        let extents: Vec<Range<usize>> = ends
            .chunks_exact(2)
            .map(|e| e[0] as usize..e[1] as usize)
            .collect();
        if let Some(thin) = extents.iter().position(|e| e.len() < HALO) {
            return Err(SolverError::InvalidParams(format!(
                "process {thin} owns {} layers along z; the contaminant needs {HALO} on every \
                 process: use fewer processes or a taller grid",
                extents[thin].len()
            )));
        }
        let owner = |z: usize| extents.iter().position(|e| e.contains(&z));
        let periodic = global.periodic[2];
        let beyond = |offset: isize| -> Option<usize> {
            let z = own.start as isize + offset;
            let z = if periodic {
                z.rem_euclid(nz as isize)
            } else if (0..nz as isize).contains(&z) {
                z
            } else {
                return None;
            };
            Some(z as usize)
        };
        let below_layers: Option<Vec<usize>> = (1..=HALO as isize)
            .rev()
            .map(|d| beyond(-d))
            .collect::<Option<Vec<_>>>()
            .filter(|l| !l.iter().any(|z| own.contains(z)));
        let above_layers: Option<Vec<usize>> = (0..HALO as isize)
            .map(|d| beyond(own.len() as isize + d))
            .collect::<Option<Vec<_>>>()
            .filter(|l| !l.iter().any(|z| own.contains(z)));
        let below = below_layers.as_ref().and_then(|l| owner(l[0]));
        let above = above_layers.as_ref().and_then(|l| owner(l[0]));
        let layers: Vec<usize> = below_layers
            .clone()
            .unwrap_or_default()
            .into_iter()
            .chain(own.clone())
            .chain(above_layers.unwrap_or_default())
            .collect();
        let first = below_layers.map_or(0, |l| l.len());
        let owned = first..first + own.len();
        let grid = Grid {
            size: [nx, ny, layers.len()],
            periodic: [global.periodic[0], global.periodic[1], false],
        };
        let global_flags = flow.flags();
        let flags: Vec<u8> = layers
            .iter()
            .flat_map(|&z| &global_flags[z * nxy..(z + 1) * nxy])
            .copied()
            .collect();
        let local = |cell: u32| -> Option<usize> {
            let z = cell as usize / nxy;
            own.contains(&z)
                .then(|| (z - own.start + first) * nxy + cell as usize % nxy)
        };
        let sources = setup
            .sources
            .iter()
            .map(|s| {
                s.cells
                    .iter()
                    .filter_map(|&c| local(c).map(|c| c as u32))
                    .collect()
            })
            .collect();
        let receptors = setup
            .receptors
            .iter()
            .enumerate()
            .filter_map(|(i, r)| local(r.cell).map(|c| (i, c)))
            .collect();
        let mut engine = SlabHost {
            peers,
            spread: Spread::new(peers, nxy),
            global,
            layers,
            owned,
            below,
            above,
            extents,
            next: vec![0.0; grid.cells()],
            flux: Vec::new(),
            diffusivity: Vec::new(),
            velocity: Fields::default(),
            begun: None,
            sources,
            receptors,
            doses: vec![[0.0; MAX_FIELDS]; setup.receptors.len()],
            maxima: (0.0, 0.0),
            whole: Vec::new(),
            incoming: Vec::new(),
            outgoing: Vec::new(),
            own_velocity: [Vec::new(), Vec::new(), Vec::new()],
            fields: vec![Vec::new(); setup.fields],
            grid,
            flags,
            setup,
        };
        engine.reset(global_flags)?;
        Ok(engine)
    }

    fn plane(&self) -> usize {
        self.grid.size[0] * self.grid.size[1]
    }

    /// The owned cells of a local array.
    fn own<'a>(&self, local: &'a [f32]) -> &'a [f32] {
        let nxy = self.plane();
        &local[self.owned.start * nxy..self.owned.end * nxy]
    }

    /// The local layers (halos included) of an array of the whole grid.
    fn take_layers(&self, global: &[f32], out: &mut Vec<f32>) {
        let nxy = self.plane();
        out.clear();
        for &z in &self.layers {
            out.extend_from_slice(&global[z * nxy..(z + 1) * nxy]);
        }
    }

    /// Fills the halo layers of the local arrays `planes` (each of the local
    /// grid's cells) from the neighbours' owned layers next to them.
    fn exchange(&mut self, planes: &mut [&mut Vec<f32>], tags: [i32; 2]) {
        let nxy = self.plane();
        let (first, end) = (self.owned.start, self.owned.end);
        let chunk = HALO * nxy;
        let count = planes.len() * chunk;
        self.outgoing.resize(2 * count, 0.0);
        let (bottom, top) = self.outgoing.split_at_mut(count);
        for (k, p) in planes.iter().enumerate() {
            bottom[k * chunk..(k + 1) * chunk]
                .copy_from_slice(&p[first * nxy..first * nxy + chunk]);
            top[k * chunk..(k + 1) * chunk].copy_from_slice(&p[end * nxy - chunk..end * nxy]);
        }
        let (bottom, top) = (&*bottom, &*top);
        self.incoming.resize(2 * count, 0.0);
        let (from_below, from_above) = self.incoming.split_at_mut(count);
        // What goes up arrives as the halo below of the process above.
        let [up, down] = tags;
        let mut sends: Vec<(usize, i32, &[f32])> = Vec::new();
        let mut receives: Vec<(usize, i32, &mut [f32])> = Vec::new();
        if let Some(r) = self.below {
            sends.push((r, down, bottom));
            receives.push((r, up, from_below));
        }
        if let Some(r) = self.above {
            sends.push((r, up, top));
            receives.push((r, down, from_above));
        }
        self.peers.exchange(&sends, &mut receives, &mut || {});
        let total = self.layers.len() * nxy;
        for (k, p) in planes.iter_mut().enumerate() {
            if self.below.is_some() {
                p[..chunk].copy_from_slice(&self.incoming[k * chunk..(k + 1) * chunk]);
            }
            if self.above.is_some() {
                let at = count + k * chunk;
                p[total - chunk..].copy_from_slice(&self.incoming[at..at + chunk]);
            }
        }
    }

    /// The largest of `local` over every process.
    fn largest(&self, local: [f32; 2]) -> [f32; 2] {
        let all = self.peers.all_gather_f32(&local);
        let mut out = [0.0f32; 2];
        for (k, o) in out.iter_mut().enumerate() {
            *o = all.chunks_exact(2).map(|v| v[k]).fold(local[k], f32::max);
        }
        out
    }

    /// Every receptor's concentration and dose per field, each from the
    /// process that owns it.
    fn gathered_readings(&self) -> Vec<Vec<Reading>> {
        let (count, fields) = (self.setup.receptors.len(), self.fields.len());
        let per = 2 * fields;
        let mut mine = vec![0.0f64; count * per];
        for &(i, cell) in &self.receptors {
            for k in 0..fields {
                mine[i * per + 2 * k] = self.fields[k][cell] as f64;
                mine[i * per + 2 * k + 1] = self.doses[i][k];
            }
        }
        let all = self.peers.all_gather_f64(&mine);
        let nxy = self.plane();
        (0..count)
            .map(|i| {
                let z = self.setup.receptors[i].cell as usize / nxy;
                let rank = self.extents.iter().position(|e| e.contains(&z));
                let at = rank.unwrap_or(0) * count * per + i * per;
                (0..fields)
                    .map(|k| Reading {
                        concentration: all[at + 2 * k] as f32,
                        dose: all[at + 2 * k + 1],
                    })
                    .collect()
            })
            .collect()
    }
}

impl Engine for SlabHost {
    fn place(&self) -> &'static str {
        "on the host of each process"
    }

    fn setup(&self) -> &Setup {
        &self.setup
    }

    fn begin(&mut self, flow: &mut dyn Solver) -> Result<(), SolverError> {
        let mut own = std::mem::take(&mut self.own_velocity);
        flow.own_velocity_into(&mut own)?;
        let nxy = self.plane();
        let (n, at) = (self.grid.cells(), self.owned.start * nxy);
        let mut v = std::mem::take(&mut self.velocity);
        v.size = self.grid.size;
        for (local, own) in [&mut v.ux, &mut v.uy, &mut v.uz].into_iter().zip(&own) {
            local.resize(n, 0.0);
            local[at..at + own.len()].copy_from_slice(own);
        }
        self.exchange(
            &mut [&mut v.ux, &mut v.uy, &mut v.uz],
            [TAG_VELOCITY_UP, TAG_VELOCITY_DOWN],
        );
        transport::clear_closed(&self.flags, &mut v);
        self.velocity = v;
        self.own_velocity = own;
        self.begun = Some(flow.params().clone());
        flow.enqueue(1)
    }

    fn transport(&mut self, _flow: &dyn Solver, first: u64, span: u32) -> Result<(), SolverError> {
        let params = self.begun.take().ok_or_else(not_begun)?;
        let molecular = params.viscosity() / self.setup.schmidt;
        let own_largest = if params.smagorinsky > 0.0 {
            transport::eddy_diffusivity(
                &self.grid,
                &self.flags,
                &self.velocity,
                params.smagorinsky,
                self.setup.schmidt_turbulent,
                molecular,
                &mut self.diffusivity,
            );
            self.own(&self.diffusivity)
                .iter()
                .copied()
                .fold(molecular, f32::max)
        } else {
            self.diffusivity.clear();
            self.diffusivity.push(molecular);
            molecular
        };
        let nxy = self.plane();
        let own = self.owned.start * nxy..self.owned.end * nxy;
        let own_courant = transport::largest_courant(&self.flags, &self.velocity, own);
        let [courant, largest] = self.largest([own_courant, own_largest]);
        self.maxima = (courant, largest);
        let plan = Setup::plan(span, courant, largest);
        let mut fields = std::mem::take(&mut self.fields);
        let (mut next, mut flux) = (
            std::mem::take(&mut self.next),
            std::mem::take(&mut self.flux),
        );
        for (k, c) in fields.iter_mut().enumerate() {
            for (sub, dt, round_ends) in plan.sub_steps(span) {
                self.exchange(&mut [&mut *c], [TAG_UP, TAG_DOWN]);
                let flow = transport::Flow {
                    grid: &self.grid,
                    flags: &self.flags,
                    velocity: &self.velocity,
                    diffusivity: &self.diffusivity,
                    dt,
                };
                transport::sub_step(&flow, sub, c, &mut next, &mut flux);
                std::mem::swap(c, &mut next);
                let sources = self.setup.sources.iter().zip(&self.sources);
                for (s, cells) in sources.filter(|(s, _)| s.field == k) {
                    Setup::release(s, cells, c, (first, span), plan, round_ends);
                }
            }
        }
        (self.fields, self.next, self.flux) = (fields, next, flux);
        Ok(())
    }

    fn under_way(&self) -> bool {
        self.begun.is_some()
    }

    fn maxima(&self) -> (f32, f32) {
        self.maxima
    }

    fn add_doses(&mut self) -> Result<(), SolverError> {
        for &(i, cell) in &self.receptors {
            for (k, c) in self.fields.iter().enumerate() {
                self.doses[i][k] += c[cell] as f64;
            }
        }
        Ok(())
    }

    fn fields(&mut self) -> Result<&[Vec<f32>], SolverError> {
        let whole: Vec<Vec<f32>> = self
            .fields
            .iter()
            .map(|c| self.spread.gather_all(self.own(c)))
            .collect();
        self.whole = whole;
        Ok(&self.whole)
    }

    fn own_fields(&mut self) -> Result<Vec<&[f32]>, SolverError> {
        Ok(self.fields.iter().map(|c| self.own(c)).collect())
    }

    fn spread(&self) -> Option<&Spread> {
        Some(&self.spread)
    }

    fn own_state(&mut self) -> Option<Vec<f32>> {
        // The local layers as they are, halos included (the velocity's were
        // exchanged as the transport step began), and the doses of the
        // receptors owned here among zeros: a piece resumes on the same
        // processes without asking the others.
        let v = &self.velocity;
        let velocity = self
            .begun
            .is_some()
            .then(|| [&v.ux[..], &v.uy[..], &v.uz[..]]);
        Some(pack_state(&self.fields, &self.doses, velocity))
    }

    fn set_own_state(&mut self, state: &[f32], params: &Params) -> Result<(), SolverError> {
        let cells = self.grid.cells();
        let velocity = unpack_state(state, cells, &mut self.fields, &mut self.doses)
            .map_err(SolverError::StateMismatch)?;
        self.begun = None;
        if !velocity.is_empty() {
            let v = &mut self.velocity;
            v.size = self.grid.size;
            v.ux = velocity[..cells].to_vec();
            v.uy = velocity[cells..2 * cells].to_vec();
            v.uz = velocity[2 * cells..].to_vec();
            self.begun = Some(params.clone());
        }
        Ok(())
    }

    fn fields_on_root(&mut self) -> Result<Option<&[Vec<f32>]>, SolverError> {
        let whole: Vec<Vec<f32>> = self
            .fields
            .iter()
            .map(|c| self.spread.gather_to_root(self.own(c)))
            .collect();
        self.whole = whole;
        Ok((self.peers.rank() == 0).then_some(&self.whole[..]))
    }

    fn readings(&mut self) -> Result<Vec<Vec<Reading>>, SolverError> {
        Ok(self.gathered_readings())
    }

    fn state(&mut self) -> Result<Vec<f32>, SolverError> {
        // Rank 0 writes the checkpoint: it alone gets the whole state.
        let fields: Vec<Vec<f32>> = self
            .fields
            .iter()
            .map(|c| self.spread.gather_to_root(self.own(c)))
            .collect();
        let doses: Vec<[f64; MAX_FIELDS]> = self
            .gathered_readings()
            .iter()
            .map(|r| {
                let mut d = [0.0; MAX_FIELDS];
                r.iter().zip(&mut d).for_each(|(r, d)| *d = r.dose);
                d
            })
            .collect();
        let velocity = self.begun.is_some().then(|| {
            let v = &self.velocity;
            [&v.ux, &v.uy, &v.uz].map(|c| self.spread.gather_to_root(self.own(c)))
        });
        if self.peers.rank() != 0 {
            return Ok(Vec::new());
        }
        let velocity = velocity.as_ref().map(|[x, y, z]| [&x[..], &y[..], &z[..]]);
        Ok(pack_state(&fields, &doses, velocity))
    }

    fn set_state(&mut self, state: &[f32], params: &Params) -> Result<(), SolverError> {
        // Every process reads the whole checkpoint and keeps its layers.
        let cells = self.global.cells();
        let mut whole = vec![Vec::new(); self.fields.len()];
        let velocity = unpack_state(state, cells, &mut whole, &mut self.doses)
            .map_err(SolverError::StateMismatch)?;
        let mut fields = std::mem::take(&mut self.fields);
        for (c, w) in fields.iter_mut().zip(&whole) {
            self.take_layers(w, c);
        }
        self.fields = fields;
        self.begun = None;
        if !velocity.is_empty() {
            let mut v = std::mem::take(&mut self.velocity);
            v.size = self.grid.size;
            for (k, out) in [&mut v.ux, &mut v.uy, &mut v.uz].into_iter().enumerate() {
                self.take_layers(&velocity[k * cells..(k + 1) * cells], out);
            }
            self.velocity = v;
            self.begun = Some(params.clone());
        }
        Ok(())
    }

    fn reset(&mut self, _flags: &[u8]) -> Result<(), SolverError> {
        let inflow = self.setup.inflow;
        for c in &mut self.fields {
            c.clear();
            c.extend(self.flags.iter().map(|&f| match Role::of(f) {
                Role::Held => inflow,
                _ => 0.0,
            }));
        }
        self.doses.iter_mut().for_each(|d| *d = [0.0; MAX_FIELDS]);
        self.begun = None;
        Ok(())
    }

    fn memory_bytes(&self) -> u64 {
        let n = self.grid.cells() as u64;
        // The fields, the next values, the three flux planes, the
        // diffusivities and the velocity.
        (self.fields.len() as u64 + 8) * 4 * n
    }
}
