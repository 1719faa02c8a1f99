//! One domain over several devices: 1×N slabs along z.
//!
//! Each slab's lattice holds its own layers plus one halo layer on each side
//! that has a neighbour (at a non-periodic domain face there is none, and the
//! lattice's own face rules apply as on one device). Slabs are stacked along z
//! because z is the slowest index of the structure-of-arrays layout: the
//! populations of one direction in one layer are a single contiguous run, so a
//! face's five crossing populations travel as five contiguous runs with no pack
//! or unpack kernel.
//!
//! What crosses a face, with the AA scheme (see [`super`]):
//! * after an even step, the halo must hold what the neighbour's edge layer just
//!   wrote into the slots that the odd step reads across the face
//!   ([`Partition::transfers`] with `after_even`, "fill");
//! * after an odd step, the edge layer's writes into the halo belong to the
//!   neighbour's edge layer ("write-back").
//!
//! Both use the same five slots per face: [`DOWN`] for the halo below a slab and
//! [`UP`] for the one above. The fill copies whole planes (a halo is scratch).
//! The write-back copies only the slots the odd step really wrote into the halo
//! ([`super::boundary::odd_writes_into`]): where a neighbour is a wall, the edge cell
//! on the other side writes that slot itself (bounce-back), and a plain copy
//! would overwrite it. Every cell then sees exactly the neighbourhood it has on
//! one device, so the arithmetic per cell is identical and N slabs reproduce one
//! device bit for bit.
//!
//! A step updates the edge layers first, starts the exchange, then updates the
//! interior, which touches neither halos nor the exchanged slots of the edges:
//! the exchange hides behind it ([`SlabSolver::step`]).

use std::ops::Range;

use super::lattice::{E, Q};
use super::links::WallLinks;
use crate::solver::{
    average, Averages, ChangeSums, Fields, Grid, Params, Piece, Schedule, Solver, SolverError,
    Stats,
};
use crate::system::ranks::Peers;

/// Directions crossing a face upwards (e_z = +1), in index order.
pub const UP: [usize; 5] = crossing(1);
/// Directions crossing a face downwards (e_z = −1).
pub const DOWN: [usize; 5] = crossing(-1);

const fn crossing(ez: i32) -> [usize; 5] {
    let mut out = [0usize; 5];
    let mut k = 0;
    let mut i = 0;
    while i < Q {
        if E[i][2] == ez {
            out[k] = i;
            k += 1;
        }
        i += 1;
    }
    out
}

/// Which part of a slab's owned layers an update covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The layers next to halos (first, so the exchange can start).
    Edges,
    /// The rest.
    Interior,
}

/// One slab: the global layers it owns and the ones it holds as halos.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slab {
    pub layers: Range<usize>,
    /// Global layer held below the owned ones (wrapping at a periodic face).
    pub halo_below: Option<usize>,
    pub halo_above: Option<usize>,
}

impl Slab {
    /// Layers of the slab's lattice: owned plus halos.
    pub fn local_layers(&self) -> usize {
        self.layers.len() + self.halo_below.is_some() as usize + self.halo_above.is_some() as usize
    }

    /// The owned layers in the slab's own numbering.
    pub fn owned(&self) -> Range<usize> {
        let lo = self.halo_below.is_some() as usize;
        lo..lo + self.layers.len()
    }

    /// Global layer of each local layer.
    pub fn global_layers(&self) -> Vec<usize> {
        self.halo_below
            .into_iter()
            .chain(self.layers.clone())
            .chain(self.halo_above)
            .collect()
    }

    /// Local layers to update for `part`.
    #[allow(clippy::single_range_in_vec_init)]
    pub fn part(&self, part: Part) -> Vec<Range<usize>> {
        let owned = self.owned();
        let (first, last) = (owned.start, owned.end - 1);
        match part {
            Part::Edges if first == last => vec![first..first + 1],
            Part::Edges => vec![first..first + 1, last..last + 1],
            Part::Interior if owned.len() <= 2 => vec![],
            Part::Interior => vec![first + 1..last],
        }
    }
}

/// A copy of five population planes from one slab's layer to another's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub from: usize,
    pub from_layer: usize,
    pub to: usize,
    pub to_layer: usize,
    pub slots: [usize; 5],
    /// Copy only these entries of the five planes (`k * nx * ny + cell`, for
    /// slot `slots[k]`, sorted); all when `None`.
    pub mask: Option<Vec<u32>>,
}

/// The split of a grid into slabs along z.
#[derive(Clone, Debug, PartialEq)]
pub struct Partition {
    pub grid: Grid,
    pub slabs: Vec<Slab>,
}

/// Fewest layers a slab may own.
pub const MIN_LAYERS: usize = 2;

impl Partition {
    /// Splits `grid` into `count` slabs of nearly equal thickness (the first
    /// `nz % count` get one layer more).
    pub fn new(grid: Grid, count: usize) -> Result<Partition, SolverError> {
        let nz = grid.size[2];
        if count == 0 {
            return Err(SolverError::InvalidParams("0 devices asked for".into()));
        }
        if nz < count * MIN_LAYERS {
            return Err(SolverError::InvalidParams(format!(
                "grid {grid} has {nz} layers along z: {count} devices need at least {} \
                 ({MIN_LAYERS} per device); use at most {} devices or a taller grid",
                count * MIN_LAYERS,
                (nz / MIN_LAYERS).max(1)
            )));
        }
        let (base, extra) = (nz / count, nz % count);
        let mut slabs = Vec::with_capacity(count);
        let mut z = 0;
        let periodic = grid.periodic[2] && count > 1;
        for s in 0..count {
            let len = base + (s < extra) as usize;
            let layers = z..z + len;
            z += len;
            let halo_below = if s > 0 {
                Some(layers.start - 1)
            } else {
                periodic.then_some(nz - 1)
            };
            let halo_above = if s + 1 < count {
                Some(layers.end)
            } else {
                periodic.then_some(0)
            };
            slabs.push(Slab {
                layers,
                halo_below,
                halo_above,
            });
        }
        Ok(Partition { grid, slabs })
    }

    /// Global coordinates of a cell of slab `s`'s lattice.
    pub fn global_cell(&self, s: usize, local: [usize; 3]) -> [usize; 3] {
        let layers = self.slabs[s].global_layers();
        [local[0], local[1], layers[local[2].min(layers.len() - 1)]]
    }

    fn plane(&self) -> usize {
        self.grid.size[0] * self.grid.size[1]
    }

    /// The grid of slab `s`'s lattice. Across slabs z never wraps: the halos
    /// stand for the neighbours.
    pub fn local_grid(&self, s: usize) -> Grid {
        let [nx, ny, _] = self.grid.size;
        let mut periodic = self.grid.periodic;
        if self.slabs.len() > 1 {
            periodic[2] = false;
        }
        Grid {
            size: [nx, ny, self.slabs[s].local_layers()],
            periodic,
        }
    }

    /// Slab `s`'s parameters: inlet profiles that vary along z measure it
    /// from the slab's first local layer.
    pub fn local_params(&self, s: usize, params: &Params) -> Params {
        let slab = &self.slabs[s];
        let first = slab.layers.start as f32 - slab.halo_below.is_some() as u32 as f32;
        let mut local = params.clone();
        local.profiles.lo[2] -= first;
        local.profiles.hi[2] -= first;
        local
    }

    /// Slab `s`'s share of the links into interpolated walls: those of its
    /// owned cells, in its numbering (halos are never updated by it).
    pub fn local_links(&self, s: usize, links: &WallLinks) -> WallLinks {
        let nxy = self.plane();
        let slab = &self.slabs[s];
        let first = slab.layers.start * nxy;
        let mut local = links.window(first, slab.layers.len() * nxy);
        let shift = (slab.owned().start * nxy) as u32;
        for c in &mut local.cells {
            *c += shift;
        }
        local
    }

    /// Slab `s`'s share of a per-cell array of `planes` planes of the global grid
    /// (flags: 1 plane; populations: 19; fields: 4), halos included.
    pub fn scatter<T: Copy>(&self, s: usize, global: &[T], planes: usize) -> Vec<T> {
        let nxy = self.plane();
        let n = self.grid.cells();
        assert_eq!(global.len(), planes * n, "array of the global grid");
        let layers = self.slabs[s].global_layers();
        let mut out = Vec::with_capacity(planes * layers.len() * nxy);
        for p in 0..planes {
            for &z in &layers {
                let at = p * n + z * nxy;
                out.extend_from_slice(&global[at..at + nxy]);
            }
        }
        out
    }

    /// Copies slab `s`'s owned layers of a per-cell array into the global one.
    pub fn gather<T: Copy>(&self, s: usize, local: &[T], planes: usize, global: &mut [T]) {
        let nxy = self.plane();
        let n = self.grid.cells();
        let slab = &self.slabs[s];
        let local_n = slab.local_layers() * nxy;
        assert_eq!(local.len(), planes * local_n, "array of slab {s}");
        let owned = slab.owned();
        for p in 0..planes {
            let src = &local[p * local_n + owned.start * nxy..p * local_n + owned.end * nxy];
            let at = p * n + slab.layers.start * nxy;
            global[at..at + src.len()].copy_from_slice(src);
        }
    }

    /// The copies that make the slabs one lattice again after an even step
    /// (`after_even`: fill the halos) or after an odd one (write the halos back;
    /// see [`Partition::mask_write_back`]).
    pub fn transfers(&self, after_even: bool) -> Vec<Transfer> {
        let count = self.slabs.len();
        let mut out = Vec::new();
        for a in 0..count {
            // Face between slab a and the one above it.
            if self.slabs[a].halo_above.is_none() {
                continue;
            }
            let b = (a + 1) % count;
            let (sa, sb) = (&self.slabs[a], &self.slabs[b]);
            let a_top = sa.owned().end - 1;
            let a_halo = sa.local_layers() - 1;
            let b_bottom = sb.owned().start;
            let b_halo = 0;
            if after_even {
                out.push(Transfer {
                    from: a,
                    from_layer: a_top,
                    to: b,
                    to_layer: b_halo,
                    slots: DOWN,
                    mask: None,
                });
                out.push(Transfer {
                    from: b,
                    from_layer: b_bottom,
                    to: a,
                    to_layer: a_halo,
                    slots: UP,
                    mask: None,
                });
            } else {
                out.push(Transfer {
                    from: b,
                    from_layer: b_halo,
                    to: a,
                    to_layer: a_top,
                    slots: DOWN,
                    mask: None,
                });
                out.push(Transfer {
                    from: a,
                    from_layer: a_halo,
                    to: b,
                    to_layer: b_bottom,
                    slots: UP,
                    mask: None,
                });
            }
        }
        out
    }
}

impl Partition {
    /// Restricts write-back transfers to the slots the sending slab's odd step
    /// writes into its halo, given the global cell flags.
    pub fn mask_write_back(&self, transfers: &mut [Transfer], global_flags: &[u8]) {
        let nxy = self.plane();
        for t in transfers {
            let grid = self.local_grid(t.from);
            let flags = self.scatter(t.from, global_flags, 1);
            let edge = if t.from_layer == 0 {
                1
            } else {
                t.from_layer - 1
            };
            let mut mask: Vec<u32> =
                super::boundary::odd_writes_into(&grid, &flags, edge, t.from_layer)
                    .into_iter()
                    .map(|(slot, cell)| {
                        let k = t
                            .slots
                            .iter()
                            .position(|&s| s == slot)
                            .expect("the odd step writes only crossing directions into a halo");
                        (k * nxy + cell) as u32
                    })
                    .collect();
            mask.sort_unstable();
            mask.dedup();
            t.mask = Some(mask);
        }
    }
}

/// A solver that can be one slab of a [`SlabSolver`].
pub trait SlabLattice: Solver + Sized {
    /// Shared state of the exchange (a communicator, or nothing).
    type Link: Send;

    /// Sets up the exchange between these slabs for these transfers.
    fn link(
        slabs: &mut [Self],
        fill: &[Transfer],
        write_back: &[Transfer],
    ) -> Result<Self::Link, SolverError>;
    /// Updates the current step on `part` of the owned layers; time stays.
    fn update(&mut self, part: Part, layers: &[Range<usize>]) -> Result<(), SolverError>;
    /// Moves the populations of `transfers` between slabs, once the edges of
    /// the current step are updated (possibly in the background).
    fn exchange(
        link: &mut Self::Link,
        slabs: &mut [Self],
        transfers: &[Transfer],
        after_even: bool,
    ) -> Result<(), SolverError>;
    /// Sets up the transfers to and from other processes' slabs (of `count`,
    /// this process holding `held`) on the device itself, e.g. NCCL; false
    /// where the lattice cannot, and [`SlabLattice::read_planes`] and
    /// [`SlabLattice::write_planes`] carry them through the host. Every
    /// process must decide alike.
    fn link_remote(
        _link: &mut Self::Link,
        _slabs: &mut [Self],
        _held: Range<usize>,
        _count: usize,
        _peers: &dyn Peers,
        _write_back: &[(i32, Transfer)],
    ) -> Result<bool, SolverError> {
        Ok(false)
    }
    /// Starts the transfers to and from other processes set up by
    /// [`SlabLattice::link_remote`], once the edges are updated, as
    /// [`SlabLattice::exchange`] does between this process's slabs.
    fn exchange_remote(
        _link: &mut Self::Link,
        _slabs: &mut [Self],
        _held: Range<usize>,
        _transfers: &[(i32, Transfer)],
        _after_even: bool,
    ) -> Result<(), SolverError> {
        Err(SolverError::Device(
            "this solver passes halos to other processes through the host only".into(),
        ))
    }
    /// The populations of `slots` in local layer `layer` into `out`, as five
    /// planes: what crosses to a slab of another process (once the edges are
    /// updated).
    fn read_planes(
        &mut self,
        layer: usize,
        slots: &[usize; 5],
        out: &mut [f32],
    ) -> Result<(), SolverError>;
    /// Writes five planes of [`SlabLattice::read_planes`] into local layer
    /// `layer`: only the entries of `mask` (as in [`Transfer::mask`]) when given.
    fn write_planes(
        &mut self,
        layer: usize,
        slots: &[usize; 5],
        planes: &[f32],
        mask: Option<&[u32]>,
    ) -> Result<(), SolverError>;
    /// Ends the current step.
    fn advance(&mut self);
    /// Waits until every exchange started has landed.
    fn settle(slabs: &mut [Self]) -> Result<(), SolverError>;
    /// The steadiness sums over the owned cells since the last call (None on the first).
    fn change_sums(&mut self) -> Result<Option<ChangeSums>, SolverError>;
    /// Sets the time step without touching the populations.
    fn set_time(&mut self, t: u64);
    /// Adds the current state to the time averages this slab keeps
    /// ([`Solver::start_averages`]), whatever their schedule: the slab solver
    /// samples once the exchange of the step has landed.
    fn add_sample(&mut self) -> Result<(), SolverError>;
}

/// The transfers of one exchange (after an even step, or an odd one), as this
/// process makes them.
#[derive(Default)]
struct Exchange {
    /// Between slabs this process holds, in their local numbering.
    local: Vec<Transfer>,
    /// To or from a slab of another process, in the partition's numbering,
    /// each with its message tag (its place in the whole list, the same on
    /// both sides).
    remote: Vec<(i32, Transfer)>,
}

impl Exchange {
    fn split(all: Vec<Transfer>, held: &Range<usize>) -> Exchange {
        let mut out = Exchange::default();
        for (tag, t) in all.into_iter().enumerate() {
            match (held.contains(&t.from), held.contains(&t.to)) {
                (true, true) => out.local.push(Transfer {
                    from: t.from - held.start,
                    to: t.to - held.start,
                    ..t
                }),
                (false, false) => {}
                _ => out.remote.push((tag as i32, t)),
            }
        }
        out
    }
}

/// One domain as slabs on several devices, behaving as one [`Solver`]; under
/// MPI each process holds some of the slabs and the others' travel as messages
/// ([`crate::system::ranks`]).
pub struct SlabSolver<S: SlabLattice> {
    partition: Partition,
    /// The slabs of this process: `held` of the partition.
    slabs: Vec<S>,
    held: Range<usize>,
    peers: Option<&'static dyn Peers>,
    /// The transfers to and from other processes go device to device
    /// ([`SlabLattice::link_remote`]), not through the host.
    on_device: bool,
    link: S::Link,
    fill: Exchange,
    write_back: Exchange,
    flags: Vec<u8>,
    /// The parameters of the whole grid (each slab gets
    /// [`Partition::local_params`]).
    params: Params,
    /// When the time averages sample, while they are kept.
    averages: Option<(Schedule, u64)>,
    /// Skip the exchange (benchmarks only: measures what it costs; results are wrong).
    pub skip_exchange: bool,
    /// Where the exchange with other processes took its time.
    spent: ExchangeTime,
    /// The five planes of each transfer to or from another process, kept
    /// from step to step.
    wire: Vec<Vec<f32>>,
}

/// Seconds of the exchange with other processes, by phase.
#[derive(Clone, Copy, Debug, Default)]
struct ExchangeTime {
    steps: u64,
    /// Reading the planes that leave (from a GPU: waiting for the edges too).
    read: f64,
    /// Updating the interior while the messages travel.
    interior: f64,
    /// Waiting for messages after the interior was done.
    wait: f64,
    /// Writing the planes that arrived.
    write: f64,
}

impl<S: SlabLattice> SlabSolver<S> {
    /// `build(s, local grid, local flags, owned layers, local parameters)`
    /// makes slab `s`'s lattice.
    pub fn new(
        partition: Partition,
        cell_flags: Vec<u8>,
        params: Params,
        build: impl FnMut(usize, Grid, Vec<u8>, Range<usize>, Params) -> Result<S, SolverError>,
    ) -> Result<SlabSolver<S>, SolverError> {
        Self::on_ranks(partition, cell_flags, params, None, build)
    }

    /// As [`SlabSolver::new`], with the slabs shared among the processes of
    /// `peers` in rank order (an equal number each); `build` is called for
    /// this process's slabs only.
    pub fn on_ranks(
        partition: Partition,
        cell_flags: Vec<u8>,
        params: Params,
        peers: Option<&'static dyn Peers>,
        mut build: impl FnMut(usize, Grid, Vec<u8>, Range<usize>, Params) -> Result<S, SolverError>,
    ) -> Result<SlabSolver<S>, SolverError> {
        let count = partition.slabs.len();
        let (ranks, rank) = peers.map_or((1, 0), |p| (p.size(), p.rank()));
        if !count.is_multiple_of(ranks) {
            return Err(SolverError::InvalidParams(format!(
                "{count} slabs cannot be shared equally by {ranks} processes"
            )));
        }
        let per_rank = count / ranks;
        let held = rank * per_rank..(rank + 1) * per_rank;
        let mut flags = cell_flags;
        crate::solver::flags::mark_near_cells(&partition.grid, &mut flags);
        let mut slabs = Vec::with_capacity(per_rank);
        for s in held.clone() {
            let local = partition.scatter(s, &flags, 1);
            slabs.push(build(
                s,
                partition.local_grid(s),
                local,
                partition.slabs[s].owned(),
                partition.local_params(s, &params),
            )?);
        }
        let fill = Exchange::split(partition.transfers(true), &held);
        let mut write_back = partition.transfers(false);
        partition.mask_write_back(&mut write_back, &flags);
        let write_back = Exchange::split(write_back, &held);
        let mut link = S::link(&mut slabs, &fill.local, &write_back.local)?;
        let on_device = match peers {
            Some(p) => S::link_remote(
                &mut link,
                &mut slabs,
                held.clone(),
                count,
                p,
                &write_back.remote,
            )?,
            None => false,
        };
        Ok(SlabSolver {
            fill,
            write_back,
            partition,
            slabs,
            held,
            peers,
            on_device,
            link,
            flags,
            params,
            averages: None,
            skip_exchange: false,
            spent: ExchangeTime::default(),
            wire: Vec::new(),
        })
    }

    pub fn partition(&self) -> &Partition {
        &self.partition
    }

    pub fn slabs(&mut self) -> &mut [S] {
        &mut self.slabs
    }

    pub fn link(&self) -> &S::Link {
        &self.link
    }

    /// Samples the time averages of every slab if one is due now.
    fn sample_if_due(&mut self) -> Result<(), SolverError> {
        let Some((schedule, samples)) = self.averages.as_mut() else {
            return Ok(());
        };
        if !schedule.due(self.slabs[0].time_step()) {
            return Ok(());
        }
        *samples += 1;
        S::settle(&mut self.slabs)?;
        for s in &mut self.slabs {
            s.add_sample()?;
        }
        Ok(())
    }

    /// Every slab's `get`, in the partition's order: this process's computed
    /// here, the others' gathered from their processes (every process calls
    /// this together). Slab `s` gives `len(s)` values.
    fn each_slab<T: Copy>(
        &mut self,
        len: impl Fn(usize) -> usize,
        gather: fn(&dyn Peers, &[T]) -> Vec<T>,
        get: impl FnMut(usize, &mut S) -> Result<Vec<T>, SolverError>,
    ) -> Result<Vec<Vec<T>>, SolverError> {
        let mine = self.own_slabs(&len, get)?;
        let Some(peers) = self.peers else {
            return Ok(mine);
        };
        Ok(split_slabs(
            &gather(peers, &mine.concat()),
            self.partition.slabs.len(),
            len,
        ))
    }

    /// `get` of this process's slabs, checked against `len`.
    fn own_slabs<T>(
        &mut self,
        len: &impl Fn(usize) -> usize,
        mut get: impl FnMut(usize, &mut S) -> Result<Vec<T>, SolverError>,
    ) -> Result<Vec<Vec<T>>, SolverError> {
        let mut mine = Vec::with_capacity(self.slabs.len());
        for (s, slab) in self.held.clone().zip(&mut self.slabs) {
            let values = get(s, slab)?;
            if values.len() != len(s) {
                return Err(SolverError::StateMismatch(format!(
                    "slab {s} gave {} values where {} were expected",
                    values.len(),
                    len(s)
                )));
            }
            mine.push(values);
        }
        Ok(mine)
    }

    fn gather_planes(
        &mut self,
        planes: usize,
        get: impl Fn(&mut S) -> Result<Vec<f32>, SolverError>,
    ) -> Result<Vec<f32>, SolverError> {
        let gathered = self.gather_planes_with(planes, |peers, v| peers.all_gather_f32(v), get)?;
        Ok(gathered.expect("every process gathers the whole"))
    }

    /// The whole domain's fields, gathered across processes by `gather`:
    /// `None` where it leaves this process nothing.
    fn fields_with(
        &mut self,
        gather: fn(&dyn Peers, &[f32]) -> Vec<f32>,
    ) -> Result<Option<Fields>, SolverError> {
        let gathered = self.gather_planes_with(4, gather, |s| {
            let f = s.fields()?;
            Ok([f.rho, f.ux, f.uy, f.uz].concat())
        })?;
        let Some(all) = gathered else {
            return Ok(None);
        };
        let n = self.partition.grid.cells();
        Ok(Some(Fields {
            size: self.partition.grid.size,
            rho: all[..n].to_vec(),
            ux: all[n..2 * n].to_vec(),
            uy: all[2 * n..3 * n].to_vec(),
            uz: all[3 * n..].to_vec(),
            concentration: Vec::new(),
        }))
    }

    /// [`SlabSolver::gather_planes`] with `gather` across processes: `None`
    /// where it leaves this process nothing ([`Peers::gather_f32_to_root`]).
    fn gather_planes_with(
        &mut self,
        planes: usize,
        gather: fn(&dyn Peers, &[f32]) -> Vec<f32>,
        get: impl Fn(&mut S) -> Result<Vec<f32>, SolverError>,
    ) -> Result<Option<Vec<f32>>, SolverError> {
        let n = self.partition.grid.cells();
        let p = self.partition.clone();
        let counts = |s: usize| planes * p.local_grid(s).cells();
        let mine = self.own_slabs(&counts, |_, slab| get(slab))?;
        let all = match self.peers {
            Some(peers) => {
                let whole = gather(peers, &mine.concat());
                if whole.is_empty() {
                    return Ok(None);
                }
                split_slabs(&whole, p.slabs.len(), counts)
            }
            None => mine,
        };
        let mut out = vec![0.0f32; planes * n];
        for (s, local) in all.iter().enumerate() {
            self.partition.gather(s, local, planes, &mut out);
        }
        Ok(Some(out))
    }

    /// The whole domain's averages, gathered across processes by `gather`:
    /// `None` where none are kept or `gather` leaves this process nothing.
    fn averages_with(
        &mut self,
        gather: fn(&dyn Peers, &[f32]) -> Vec<f32>,
    ) -> Result<Option<Averages>, SolverError> {
        let Some((schedule, samples)) = self.averages else {
            return Ok(None);
        };
        let planes = 2 * average::QUANTITIES;
        let all = self.gather_planes_with(planes, gather, |s| {
            let a = s
                .averages()?
                .ok_or_else(|| SolverError::StateMismatch("a slab lost its averages".into()))?;
            let [u0, u1, u2] = a.velocity_mean;
            let [r0, r1, r2] = a.velocity_rms;
            Ok([u0, u1, u2, a.pressure_mean, r0, r1, r2, a.pressure_rms].concat())
        })?;
        let Some(all) = all else {
            return Ok(None);
        };
        let n = self.partition.grid.cells();
        let plane = |k: usize| all[k * n..(k + 1) * n].to_vec();
        Ok(Some(Averages {
            size: self.partition.grid.size,
            from_step: schedule.from_step,
            samples,
            velocity_mean: [plane(0), plane(1), plane(2)],
            pressure_mean: plane(3),
            velocity_rms: [plane(4), plane(5), plane(6)],
            pressure_rms: plane(7),
            concentration_mean: Vec::new(),
        }))
    }

    /// [`SlabSolver::each_slab`] of f64 values (sums stay exact on the wire).
    fn each_slab_f64(
        &mut self,
        len: usize,
        get: impl FnMut(usize, &mut S) -> Result<Vec<f64>, SolverError>,
    ) -> Result<Vec<Vec<f64>>, SolverError> {
        self.each_slab(|_| len, |peers, v| peers.all_gather_f64(v), get)
    }

    /// The interior of the current step on every slab of this process, with
    /// the transfers to and from other processes' slabs in flight meanwhile.
    fn update_interior(
        &mut self,
        interior: &[Vec<Range<usize>>],
        after_even: bool,
    ) -> Result<(), SolverError> {
        let update = |slabs: &mut [S]| -> Result<(), SolverError> {
            for (slab, layers) in slabs.iter_mut().zip(interior) {
                slab.update(Part::Interior, layers)?;
                slab.advance();
            }
            Ok(())
        };
        let exchange = if after_even {
            &self.fill
        } else {
            &self.write_back
        };
        let peers = match self.peers {
            Some(p) if !self.skip_exchange && !exchange.remote.is_empty() => p,
            _ => return update(&mut self.slabs),
        };
        if self.on_device {
            S::exchange_remote(
                &mut self.link,
                &mut self.slabs,
                self.held.clone(),
                &exchange.remote,
                after_even,
            )?;
            return update(&mut self.slabs);
        }
        let held = self.held.clone();
        let rank_of = |s: usize| s / held.len();
        let nxy = self.partition.plane();
        let began = std::time::Instant::now();
        let mut wire = std::mem::take(&mut self.wire);
        wire.resize_with(exchange.remote.len(), || vec![0.0f32; 5 * nxy]);
        let mut sends = Vec::new();
        let mut receives = Vec::new();
        let mut landing = Vec::new();
        for ((tag, t), planes) in exchange.remote.iter().zip(&mut wire) {
            if held.contains(&t.from) {
                self.slabs[t.from - held.start].read_planes(t.from_layer, &t.slots, planes)?;
                sends.push((rank_of(t.to), *tag, &planes[..]));
            } else {
                receives.push((rank_of(t.from), *tag, &mut planes[..]));
                landing.push(t);
            }
        }
        let read = began.elapsed().as_secs_f64();
        let mut result = Ok(());
        let mut interior = 0.0;
        let slabs = &mut self.slabs;
        peers.exchange(&sends, &mut receives, &mut || {
            let began = std::time::Instant::now();
            result = update(slabs);
            interior = began.elapsed().as_secs_f64();
        });
        result?;
        let exchanged = began.elapsed().as_secs_f64();
        for ((_, _, planes), t) in receives.iter().zip(landing) {
            self.slabs[t.to - held.start].write_planes(
                t.to_layer,
                &t.slots,
                planes,
                t.mask.as_deref(),
            )?;
        }
        self.wire = wire;
        let spent = &mut self.spent;
        spent.steps += 1;
        spent.read += read;
        spent.interior += interior;
        spent.wait += exchanged - read - interior;
        spent.write += began.elapsed().as_secs_f64() - exchanged;
        Ok(())
    }
}

impl<S: SlabLattice> Solver for SlabSolver<S> {
    fn describe(&self) -> String {
        let count = self.partition.slabs.len();
        match self.peers {
            Some(p) => format!(
                "{count} slabs along z over {} MPI processes (halos {}), each: {}",
                p.size(),
                if self.on_device {
                    "device to device"
                } else {
                    "through the host"
                },
                self.slabs[0].describe()
            ),
            None => format!("{count} slabs along z, each: {}", self.slabs[0].describe()),
        }
    }

    fn grid(&self) -> &Grid {
        &self.partition.grid
    }

    fn flags(&self) -> &[u8] {
        &self.flags
    }

    fn params(&self) -> &Params {
        &self.params
    }

    fn set_params(&mut self, params: Params) -> Result<(), SolverError> {
        for (k, s) in self.held.clone().zip(&mut self.slabs) {
            s.set_params(self.partition.local_params(k, &params))?;
        }
        self.params = params;
        Ok(())
    }

    fn step(&mut self, n: u64) -> Result<(), SolverError> {
        let edges: Vec<_> = self
            .partition
            .slabs
            .iter()
            .map(|s| s.part(Part::Edges))
            .collect();
        let interior: Vec<_> = self
            .partition
            .slabs
            .iter()
            .map(|s| s.part(Part::Interior))
            .collect();
        let (edges, interior) = (&edges[self.held.clone()], &interior[self.held.clone()]);
        for _ in 0..n {
            for (slab, layers) in self.slabs.iter_mut().zip(edges) {
                slab.update(Part::Edges, layers)?;
            }
            let after_even = self.time_step().is_multiple_of(2);
            if !self.skip_exchange {
                let transfers = if after_even {
                    &self.fill.local
                } else {
                    &self.write_back.local
                };
                S::exchange(&mut self.link, &mut self.slabs, transfers, after_even)?;
            }
            // The slabs count the steps (`advance`).
            self.update_interior(interior, after_even)?;
            self.sample_if_due()?;
        }
        S::settle(&mut self.slabs)
    }

    fn start_averages(&mut self, schedule: Schedule) -> Result<(), SolverError> {
        self.stop_averages();
        // The slabs keep the sums; this solver says when to add to them.
        for s in &mut self.slabs {
            s.start_averages(Schedule {
                from_step: u64::MAX,
                every: 1,
            })?;
        }
        let schedule = schedule.from_now(self.time_step());
        self.averages = Some((schedule, 0));
        self.sample_if_due()
    }

    fn stop_averages(&mut self) {
        self.averages = None;
        for s in &mut self.slabs {
            s.stop_averages();
        }
    }

    fn average_progress(&self) -> Option<(u64, u64)> {
        self.averages.map(|(s, samples)| (s.from_step, samples))
    }

    fn averages(&mut self) -> Result<Option<Averages>, SolverError> {
        self.averages_with(|peers, v| peers.all_gather_f32(v))
    }

    fn averages_on_root(&mut self) -> Result<Option<Averages>, SolverError> {
        self.averages_with(|peers, v| peers.gather_f32_to_root(v))
    }

    fn time_step(&self) -> u64 {
        self.slabs[0].time_step()
    }

    fn reset(&mut self) -> Result<(), SolverError> {
        for s in &mut self.slabs {
            s.reset()?;
        }
        self.averages = None;
        Ok(())
    }

    fn fields(&mut self) -> Result<Fields, SolverError> {
        let fields = self.fields_with(|peers, v| peers.all_gather_f32(v))?;
        Ok(fields.expect("every process gathers the whole"))
    }

    fn fields_on_root(&mut self) -> Result<Option<Fields>, SolverError> {
        self.fields_with(|peers, v| peers.gather_f32_to_root(v))
    }

    fn stats(&mut self) -> Result<Stats, SolverError> {
        let p = self.partition.clone();
        let global = |s: usize, c: [usize; 3]| p.global_cell(s, c).map(|v| v as f64);
        // Each slab's numbers as exact f64s: mass, cells, momentum (3),
        // largest speed and its cell (3), whether and where it is non-finite (4).
        let all = self.each_slab_f64(13, |s, slab| {
            let st = slab.stats()?;
            let mut v = vec![st.mass, st.cells as f64];
            v.extend(st.mean_velocity.map(|m| m * st.cells as f64));
            v.push(st.max_speed as f64);
            v.extend(global(s, st.max_speed_cell));
            v.push(st.non_finite_cell.is_some() as u8 as f64);
            v.extend(global(s, st.non_finite_cell.unwrap_or_default()));
            Ok(v)
        })?;
        let mut total = Stats {
            step: self.time_step(),
            mass: 0.0,
            cells: 0,
            mean_velocity: [0.0; 3],
            max_speed: 0.0,
            max_speed_cell: [0; 3],
            non_finite_cell: None,
        };
        let mut momentum = [0.0f64; 3];
        let grid = self.partition.grid;
        let mut first_bad: Option<usize> = None;
        let cell = |v: &[f64]| [v[0] as usize, v[1] as usize, v[2] as usize];
        for v in &all {
            total.mass += v[0];
            total.cells += v[1] as u64;
            for d in 0..3 {
                momentum[d] += v[2 + d];
            }
            let max_speed = v[5] as f32;
            if max_speed > total.max_speed {
                total.max_speed = max_speed;
                total.max_speed_cell = cell(&v[6..9]);
            }
            if v[9] != 0.0 {
                let [x, y, z] = cell(&v[10..13]);
                let index = grid.index(x, y, z);
                if first_bad.is_none_or(|b| index < b) {
                    first_bad = Some(index);
                    total.non_finite_cell = Some([x, y, z]);
                }
            }
        }
        let count = total.cells.max(1) as f64;
        total.mean_velocity = momentum.map(|m| m / count);
        Ok(total)
    }

    fn obstacle_forces(&mut self) -> Result<Vec<[f64; 3]>, SolverError> {
        let tags = crate::solver::flags::MAX_TAG as usize + 1;
        let all = self.each_slab_f64(3 * tags, |_, slab| {
            Ok(slab.obstacle_forces()?.into_iter().flatten().collect())
        })?;
        let mut total = vec![[0.0f64; 3]; tags];
        for forces in &all {
            for (acc, f) in total.iter_mut().zip(forces.chunks_exact(3)) {
                for d in 0..3 {
                    acc[d] += f[d];
                }
            }
        }
        Ok(total)
    }

    fn populations(&mut self) -> Result<Vec<f32>, SolverError> {
        self.gather_planes(Q, |s| s.populations())
    }

    /// Under MPI rank 0 alone receives the whole lattice (it writes a
    /// checkpoint in one file); the other processes send theirs and visit
    /// nothing.
    fn visit_populations(&mut self, visit: &mut dyn FnMut(&[f32])) -> Result<(), SolverError> {
        let gather = |peers: &dyn Peers, v: &[f32]| peers.gather_f32_to_root(v);
        if let Some(all) = self.gather_planes_with(Q, gather, |s| s.populations())? {
            visit(&all);
        }
        Ok(())
    }

    fn set_populations(&mut self, step: u64, populations: &[f32]) -> Result<(), SolverError> {
        let expected = Q * self.partition.grid.cells();
        if populations.len() != expected {
            return Err(SolverError::StateMismatch(format!(
                "{} populations for a lattice of {expected}",
                populations.len()
            )));
        }
        // Halos get their neighbours' whole layers: right for either parity.
        for (s, slab) in self.held.clone().zip(&mut self.slabs) {
            let local = self.partition.scatter(s, populations, Q);
            slab.set_populations(step, &local)?;
        }
        self.averages = None;
        Ok(())
    }

    fn memory_bytes(&self) -> u64 {
        self.slabs.iter().map(|s| s.memory_bytes()).sum()
    }

    fn exchange_note(&self) -> Option<String> {
        let s = self.spent;
        (s.steps > 0).then(|| {
            let ms = |v: f64| v * 1e3 / s.steps as f64;
            format!(
                "halo exchange with the other processes, per step: reading the planes {:.3} ms, \
                 interior (messages in flight) {:.3} ms, waiting beyond it {:.3} ms, writing \
                 {:.3} ms",
                ms(s.read),
                ms(s.interior),
                ms(s.wait),
                ms(s.write)
            )
        })
    }

    fn own_lattice(&mut self) -> Option<&mut dyn Solver> {
        match (self.peers, &mut self.slabs[..]) {
            (Some(_), [slab]) => Some(slab),
            _ => None,
        }
    }

    fn piece(&mut self) -> Result<Option<Piece>, SolverError> {
        let Some(peers) = self.peers else {
            return Ok(None);
        };
        let p = self.partition.clone();
        let averages = self
            .averages
            .map(|(schedule, samples)| (schedule.from_step, samples));
        let nxy = p.plane();
        // Each quantity's owned layers, slab after slab: ρ, u (3), and the
        // averages' ū (3), p̄, u_rms (3), p_rms.
        let mut planes: Vec<Vec<f32>> = Vec::new();
        for (s, slab) in self.held.clone().zip(&mut self.slabs) {
            let f = slab.fields()?;
            let mut local = vec![f.rho, f.ux, f.uy, f.uz];
            if averages.is_some() {
                let a = slab
                    .averages()?
                    .ok_or_else(|| SolverError::StateMismatch("a slab lost its averages".into()))?;
                let [u0, u1, u2] = a.velocity_mean;
                let [r0, r1, r2] = a.velocity_rms;
                local.extend([u0, u1, u2, a.pressure_mean, r0, r1, r2, a.pressure_rms]);
            }
            let owned = p.slabs[s].owned();
            planes.resize(local.len(), Vec::new());
            for (out, v) in planes.iter_mut().zip(local) {
                out.extend_from_slice(&v[owned.start * nxy..owned.end * nxy]);
            }
        }
        // The next process's first layer completes this piece.
        let (rank, ranks) = (peers.rank(), peers.size());
        let first_layer = p.slabs[self.held.start].layers.start;
        let first: Vec<f32> = planes.iter().flat_map(|v| &v[..nxy]).copied().collect();
        let mut next = vec![0.0f32; planes.len() * nxy];
        let sends: Vec<(usize, i32, &[f32])> = match rank {
            0 => Vec::new(),
            _ => vec![(rank - 1, 0, &first[..])],
        };
        let has_next = rank + 1 < ranks;
        let mut receives: Vec<(usize, i32, &mut [f32])> = match has_next {
            true => vec![(rank + 1, 0, &mut next[..])],
            false => Vec::new(),
        };
        peers.exchange(&sends, &mut receives, &mut || {});
        if has_next {
            for (out, layer) in planes.iter_mut().zip(next.chunks_exact(nxy)) {
                out.extend_from_slice(layer);
            }
        }
        let layers = planes[0].len() / nxy;
        let size = [p.grid.size[0], p.grid.size[1], layers];
        let mut q = planes.into_iter();
        let mut next = || q.next().expect("counted above");
        let fields = Fields {
            size,
            rho: next(),
            ux: next(),
            uy: next(),
            uz: next(),
            concentration: Vec::new(),
        };
        let averages = averages.map(|(from_step, samples)| Averages {
            size,
            from_step,
            samples,
            velocity_mean: [next(), next(), next()],
            pressure_mean: next(),
            velocity_rms: [next(), next(), next()],
            pressure_rms: next(),
            concentration_mean: Vec::new(),
        });
        let per_rank = self.held.len();
        let extents = (0..ranks)
            .map(|r| {
                let first = p.slabs[r * per_rank].layers.start;
                let last = p.slabs[(r + 1) * per_rank - 1].layers.end;
                [first, last.min(p.grid.size[2] - 1)]
            })
            .collect();
        Ok(Some(Piece {
            first_layer,
            flags: self.flags[first_layer * nxy..(first_layer + layers) * nxy].to_vec(),
            fields,
            averages,
            extents,
        }))
    }

    fn own_layers(&self) -> Option<(Range<usize>, &'static dyn Peers)> {
        let peers = self.peers?;
        let slabs = &self.partition.slabs;
        Some((
            slabs[self.held.start].layers.start..slabs[self.held.end - 1].layers.end,
            peers,
        ))
    }

    fn own_velocity_into(&mut self, out: &mut [Vec<f32>; 3]) -> Result<(), SolverError> {
        let nxy = self.partition.plane();
        out.iter_mut().for_each(Vec::clear);
        for (s, slab) in self.held.clone().zip(&mut self.slabs) {
            let f = slab.fields()?;
            let owned = self.partition.slabs[s].owned();
            for (o, v) in out.iter_mut().zip([&f.ux, &f.uy, &f.uz]) {
                o.extend_from_slice(&v[owned.start * nxy..owned.end * nxy]);
            }
        }
        Ok(())
    }

    fn velocity_change(&mut self) -> Result<Option<f64>, SolverError> {
        // Per slab: whether it has sums yet, its steps, and the two sums.
        let all = self.each_slab_f64(4, |_, slab| {
            Ok(match slab.change_sums()? {
                Some(c) => vec![1.0, c.steps as f64, c.diff, c.norm],
                None => vec![0.0; 4],
            })
        })?;
        let mut total: Option<ChangeSums> = None;
        for v in all.iter().filter(|v| v[0] != 0.0) {
            let t = total.get_or_insert(ChangeSums {
                steps: v[1] as u64,
                ..Default::default()
            });
            t.diff += v[2];
            t.norm += v[3];
        }
        Ok(total.map(|t| t.ratio()))
    }
}

/// `all`, the values of `slabs` slabs in order, cut into slab `s`'s `len(s)`.
fn split_slabs<T: Copy>(all: &[T], slabs: usize, len: impl Fn(usize) -> usize) -> Vec<Vec<T>> {
    let mut at = 0;
    (0..slabs)
        .map(|s| {
            let part = all[at..at + len(s)].to_vec();
            at += len(s);
            part
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(nz: usize, periodic: bool) -> Grid {
        Grid {
            size: [3, 2, nz],
            periodic: [false, false, periodic],
        }
    }

    #[test]
    fn crossing_directions_are_the_five_each_way_and_opposite() {
        assert_eq!(UP, [5, 9, 11, 16, 18]);
        assert_eq!(DOWN, [6, 10, 12, 15, 17]);
        let mut opposites: Vec<usize> = UP
            .iter()
            .map(|&i| crate::solver::lbm::lattice::opposite(i))
            .collect();
        opposites.sort();
        assert_eq!(opposites, DOWN);
    }

    #[test]
    fn slabs_cover_the_grid_once_with_halos_where_neighbours_are() {
        let p = Partition::new(grid(10, false), 3).unwrap();
        let layers: Vec<_> = p.slabs.iter().map(|s| s.layers.clone()).collect();
        assert_eq!(layers, vec![0..4, 4..7, 7..10]);
        assert_eq!(p.slabs[0].global_layers(), vec![0, 1, 2, 3, 4]);
        assert_eq!(p.slabs[1].global_layers(), vec![3, 4, 5, 6, 7]);
        assert_eq!(p.slabs[2].global_layers(), vec![6, 7, 8, 9]);
        assert_eq!(p.slabs[0].owned(), 0..4);
        assert_eq!(p.slabs[1].owned(), 1..4);
        assert!(!p.local_grid(1).periodic[2]);

        let q = Partition::new(grid(8, true), 2).unwrap();
        assert_eq!(q.slabs[0].global_layers(), vec![7, 0, 1, 2, 3, 4]);
        assert_eq!(q.slabs[1].global_layers(), vec![3, 4, 5, 6, 7, 0]);
        // One slab is the whole grid, periodic as before.
        let one = Partition::new(grid(8, true), 1).unwrap();
        assert_eq!(one.slabs[0].global_layers(), (0..8).collect::<Vec<_>>());
        assert!(one.local_grid(0).periodic[2]);
    }

    #[test]
    fn too_many_devices_for_the_layers_is_refused_with_the_most_that_fit() {
        let e = Partition::new(grid(5, false), 3).unwrap_err().to_string();
        assert!(e.contains("at most 2 devices"), "{e}");
        assert!(Partition::new(grid(5, false), 0).is_err());
    }

    #[test]
    fn parts_split_owned_layers_into_edges_and_interior() {
        let p = Partition::new(grid(10, false), 2).unwrap();
        let s = &p.slabs[1];
        assert_eq!(s.owned(), 1..6);
        assert_eq!(s.part(Part::Edges), vec![1..2, 5..6]);
        assert_eq!(s.part(Part::Interior), vec![2..5]);
    }

    #[test]
    fn transfers_pair_edges_with_halos_both_ways() {
        let p = Partition::new(grid(8, true), 2).unwrap();
        let fill = p.transfers(true);
        // Two faces (one wraps), two directions each.
        assert_eq!(fill.len(), 4);
        assert!(fill.contains(&Transfer {
            from: 0,
            from_layer: 4,
            to: 1,
            to_layer: 0,
            slots: DOWN,
            mask: None,
        }));
        assert!(fill.contains(&Transfer {
            from: 1,
            from_layer: 1,
            to: 0,
            to_layer: 5,
            slots: UP,
            mask: None,
        }));
        // The wrapping face: slab 1's top (global 7) below slab 0's bottom.
        assert!(fill.contains(&Transfer {
            from: 1,
            from_layer: 4,
            to: 0,
            to_layer: 0,
            slots: DOWN,
            mask: None,
        }));
        let back = p.transfers(false);
        for (f, b) in fill.iter().zip(&back) {
            // Write-back reverses each fill.
            assert_eq!(
                (f.from, f.from_layer, f.to, f.to_layer),
                (b.to, b.to_layer, b.from, b.from_layer)
            );
            assert_eq!(f.slots, b.slots);
        }
        let open = Partition::new(grid(8, false), 2).unwrap();
        assert_eq!(open.transfers(true).len(), 2);
    }

    #[test]
    fn scatter_then_gather_is_the_identity() {
        let p = Partition::new(grid(9, true), 3).unwrap();
        let n = p.grid.cells();
        let global: Vec<f32> = (0..2 * n).map(|v| v as f32).collect();
        let mut back = vec![-1.0f32; 2 * n];
        for s in 0..3 {
            let local = p.scatter(s, &global, 2);
            assert_eq!(local.len(), 2 * p.local_grid(s).cells());
            p.gather(s, &local, 2, &mut back);
        }
        assert_eq!(back, global);
    }

    /// A slab's solver marks its NEAR cells again on its own grid (whose z
    /// never wraps: halos stand for the neighbours); every owned cell must
    /// take the update it takes in one domain (its flags, whether the even
    /// step lists it, its odd step's rules), or slabs would not match one
    /// GPU bit for bit wherever the two updates round differently.
    #[test]
    fn slab_cells_take_the_updates_of_one_domain() {
        use crate::solver::flags::{even_step_differs, mark_near_cells, NEAR};
        use crate::solver::lbm::boundary::odd_rules;
        for name in ["cube", "cylinder", "urban", "sphere"] {
            let path = format!("assets/scenarios/{name}.toml");
            let scenario = crate::scenario::Scenario::load(path.as_ref(), &[]).unwrap();
            let global = scenario.grid();
            let mut flags = scenario.voxelize().flags;
            mark_near_cells(&global, &mut flags);
            let update = |g: &Grid, f: &[u8], c: usize| {
                let near = f[c] & NEAR != 0;
                (
                    f[c],
                    near && even_step_differs(g, f, c, false),
                    if near { odd_rules(g, f, c) } else { 0 },
                )
            };
            let partition = Partition::new(global, 2).unwrap();
            for s in 0..2 {
                let grid = partition.local_grid(s);
                let mut local = partition.scatter(s, &flags, 1);
                mark_near_cells(&grid, &mut local);
                let [nx, ny, _] = grid.size;
                for z in partition.slabs[s].owned() {
                    for (x, y) in (0..ny).flat_map(|y| (0..nx).map(move |x| (x, y))) {
                        let [gx, gy, gz] = partition.global_cell(s, [x, y, z]);
                        assert_eq!(
                            update(&grid, &local, grid.index(x, y, z)),
                            update(&global, &flags, global.index(gx, gy, gz)),
                            "{name}, slab {s}, cell ({gx}, {gy}, {gz})"
                        );
                    }
                }
            }
        }
    }
}
