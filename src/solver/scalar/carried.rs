//! A flow solver with contaminants: any [`Solver`] whose fields carry
//! concentrations, moved after each transport step of its flow with the
//! velocity at its start. Where they move is the [`Engine`]: on the host
//! ([`Host`], the reference for every method) or on the flow's GPU
//! ([`DeviceDispersion`]); everything else passes through to the flow
//! solver.

use super::cuda::DeviceDispersion;
use super::engine::{Engine, Host};
use super::slab::SlabHost;
use super::{Reading, Setup};
use crate::solver::average::{welford, Schedule};
use crate::solver::display::downsample_scalar_into;
use crate::solver::{
    Averages, Fields, Grid, Params, Piece, Solver, SolverError, Stats, TakenFrame,
};

pub struct Carried {
    flow: Box<dyn Solver>,
    engine: Box<dyn Engine>,
    /// Running means of the concentrations, on the flow's schedule.
    means: Option<Means>,
    /// The block size of the display frames asked for.
    display_stride: usize,
    /// The receptors' readings at the end of the last `step`.
    readings: Vec<Vec<Reading>>,
    /// The step a transport step under way began at, where that was not
    /// its scheduled start.
    late_start: Option<u64>,
}

struct Means {
    schedule: Schedule,
    samples: u64,
    /// Per field, per cell: the mean and the sum of squared deviations.
    mean: Vec<Vec<f64>>,
    m2: Vec<Vec<f64>>,
}

impl Carried {
    /// `flow` with the contaminants of `setup` moved on the host.
    pub fn new(flow: Box<dyn Solver>, setup: Setup) -> Carried {
        let engine = Box::new(Host::new(flow.grid(), flow.flags(), setup));
        Carried::with_engine(flow, engine)
    }

    /// `flow` with the contaminants of `setup` moved on its GPU where it
    /// runs on one ([`Solver::device_stream`]), else on the host; with
    /// why a flow on a GPU could not take them there.
    pub fn placed(mut flow: Box<dyn Solver>, setup: Setup) -> (Carried, Option<String>) {
        if let Some((layers, peers)) = flow.own_layers() {
            let why = match SlabHost::new(&*flow, layers, peers, setup.clone()) {
                Ok(engine) => return (Carried::with_engine(flow, Box::new(engine)), None),
                Err(e) => e.to_string(),
            };
            return (Carried::new(flow, setup), Some(why));
        }
        let why = match DeviceDispersion::new(&mut *flow, setup.clone()) {
            Ok(Some(engine)) => return (Carried::with_engine(flow, Box::new(engine)), None),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        };
        (Carried::new(flow, setup), why)
    }

    /// The largest Courant-number sum and diffusivity of the last transport
    /// step, which set its sub-steps.
    pub fn maxima(&self) -> (f32, f32) {
        self.engine.maxima()
    }

    /// Where the contaminants move: "on the host", "on the GPU".
    pub fn place(&self) -> &'static str {
        self.engine.place()
    }

    fn with_engine(flow: Box<dyn Solver>, engine: Box<dyn Engine>) -> Carried {
        // Nothing released yet: every receptor reads zero.
        let setup = engine.setup();
        let readings = vec![vec![Reading::default(); setup.fields]; setup.receptors.len()];
        Carried {
            flow,
            engine,
            means: None,
            display_stride: 1,
            readings,
            late_start: None,
        }
    }

    fn sample(&mut self) -> Result<(), SolverError> {
        let t = self.flow.time_step();
        let Some(m) = &mut self.means else {
            return Ok(());
        };
        if !m.schedule.due(t) {
            return Ok(());
        }
        m.samples += 1;
        for (k, c) in self.engine.own_fields()?.iter().enumerate() {
            for (cell, &v) in c.iter().enumerate() {
                welford(
                    &mut m.mean[k][cell],
                    &mut m.m2[k][cell],
                    v as f64,
                    m.samples,
                );
            }
        }
        Ok(())
    }

    /// After a resumed state: a checkpoint inside a transport step must
    /// hold its velocity; the receptors read what it holds.
    fn check_resumed(&mut self) -> Result<(), SolverError> {
        self.late_start = None;
        let step = self.flow.time_step();
        let setup = self.engine.setup();
        if !setup.transport_starting_at(step) && !self.engine.under_way() {
            return Err(SolverError::StateMismatch(format!(
                "the checkpoint stops in the middle of a transport step of the contaminant \
                 (one every {} flow steps, step {step}) but holds no velocity for it: it was \
                 written by an older flowscope; resume it with [dispersion] interval = 1",
                setup.interval
            )));
        }
        self.readings = self.engine.readings()?;
        Ok(())
    }

    /// The concentrations' means, where they are kept, over the cells
    /// `cut` asks for. Collective where the engine's cells are spread over
    /// processes (each keeps its own cells' means).
    fn concentration_means(&self, cut: Cut) -> Option<Vec<Vec<f32>>> {
        let m = self.means.as_ref()?;
        let spread = self.engine.spread();
        let plane = self.flow.grid().size[0] * self.flow.grid().size[1];
        let means = m.mean.iter().map(|v| {
            let own: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            match (spread, cut) {
                (Some(s), Cut::All) => s.gather_all(&own),
                (Some(s), Cut::Root) => s.gather_to_root(&own),
                (Some(s), Cut::Piece { .. }) => s.with_next_layer(&own),
                (None, Cut::Piece { first, layers }) => {
                    own[first * plane..(first + layers) * plane].to_vec()
                }
                (None, _) => own,
            }
        });
        Some(means.collect())
    }
}

/// Which cells of the whole grid a process is given.
#[derive(Clone, Copy)]
enum Cut {
    /// All of them, on every process.
    All,
    /// All of them on rank 0, none on the others.
    Root,
    /// The layers of this process's piece of a `.pvti`.
    Piece { first: usize, layers: usize },
}

impl Solver for Carried {
    fn describe(&self) -> String {
        format!(
            "{} with {} contaminant field{} {}",
            self.flow.describe(),
            self.engine.setup().fields,
            if self.engine.setup().fields == 1 {
                ""
            } else {
                "s"
            },
            self.engine.place()
        )
    }

    fn grid(&self) -> &Grid {
        self.flow.grid()
    }

    fn flags(&self) -> &[u8] {
        self.flow.flags()
    }

    fn params(&self) -> &Params {
        self.flow.params()
    }

    fn set_params(&mut self, params: Params) -> Result<(), SolverError> {
        self.flow.set_params(params)
    }

    fn step(&mut self, n: u64) -> Result<(), SolverError> {
        for _ in 0..n {
            let step = self.flow.time_step();
            // A run that starts inside a transport step with nothing under
            // way (a checkpoint without contaminants resumed) begins one
            // there, over the rest of that step.
            let starting = self.engine.setup().transport_starting_at(step);
            if !starting && !self.engine.under_way() {
                self.late_start = Some(step);
            }
            // Queued, not waited for: the engine's own copies and reductions
            // wait where they need the flow.
            if starting || self.late_start == Some(step) {
                self.engine.begin(&mut *self.flow)?;
            } else {
                self.flow.enqueue(1)?;
            }
            if let Some((first, span)) = self.engine.setup().transport_ending_at(step) {
                let (first, span) = match self.late_start.take() {
                    Some(from) => (from, (first + span as u64 - from) as u32),
                    None => (first, span),
                };
                self.engine.transport(&*self.flow, first, span)?;
            }
            self.engine.add_doses()?;
            self.sample()?;
        }
        self.finish()
    }

    fn time_step(&self) -> u64 {
        self.flow.time_step()
    }

    fn reset(&mut self) -> Result<(), SolverError> {
        self.flow.reset()?;
        self.engine.reset(self.flow.flags())?;
        self.means = None;
        self.late_start = None;
        self.readings = self.engine.readings()?;
        Ok(())
    }

    fn fields(&mut self) -> Result<Fields, SolverError> {
        let mut out = Fields::default();
        self.fields_into(&mut out)?;
        Ok(out)
    }

    fn fields_on_root(&mut self) -> Result<Option<Fields>, SolverError> {
        // Both gathers on every process, in the same order.
        let flow = self.flow.fields_on_root()?;
        let concentration = self.engine.fields_on_root()?;
        Ok(flow.zip(concentration).map(|(mut out, c)| {
            out.concentration = c.to_vec();
            out
        }))
    }

    fn fields_into(&mut self, out: &mut Fields) -> Result<(), SolverError> {
        self.flow.fields_into(out)?;
        let fields = self.engine.fields()?;
        out.concentration.resize(fields.len(), Vec::new());
        for (o, c) in out.concentration.iter_mut().zip(fields) {
            o.clone_from(c);
        }
        Ok(())
    }

    fn stats(&mut self) -> Result<Stats, SolverError> {
        self.flow.stats()
    }

    fn obstacle_forces(&mut self) -> Result<Vec<[f64; 3]>, SolverError> {
        self.flow.obstacle_forces()
    }

    fn populations(&mut self) -> Result<Vec<f32>, SolverError> {
        self.flow.populations()
    }

    fn state_len(&self) -> usize {
        self.flow.state_len()
    }

    fn visit_populations(&mut self, visit: &mut dyn FnMut(&[f32])) -> Result<(), SolverError> {
        self.flow.visit_populations(visit)
    }

    fn set_populations(&mut self, step: u64, populations: &[f32]) -> Result<(), SolverError> {
        self.flow.set_populations(step, populations)
    }

    fn carried_state(&mut self) -> Result<Option<Vec<f32>>, SolverError> {
        self.engine.state().map(Some)
    }

    fn set_carried_state(&mut self, state: &[f32]) -> Result<(), SolverError> {
        self.engine.set_state(state, self.flow.params())?;
        self.check_resumed()
    }

    fn own_carried_state(&mut self) -> Result<Option<Vec<f32>>, SolverError> {
        Ok(self.engine.own_state())
    }

    fn set_own_carried_state(&mut self, state: &[f32]) -> Result<(), SolverError> {
        self.engine.set_own_state(state, self.flow.params())?;
        self.check_resumed()
    }

    fn own_lattice(&mut self) -> Option<&mut dyn Solver> {
        self.flow.own_lattice()
    }

    fn memory_bytes(&self) -> u64 {
        self.flow.memory_bytes() + self.engine.memory_bytes()
    }

    fn velocity_change(&mut self) -> Result<Option<f64>, SolverError> {
        self.flow.velocity_change()
    }

    fn start_averages(&mut self, schedule: Schedule) -> Result<(), SolverError> {
        self.flow.start_averages(schedule)?;
        let schedule = schedule.from_now(self.flow.time_step());
        let k = self.engine.setup().fields;
        let n = self.engine.own_fields()?.first().map_or(0, |c| c.len());
        self.means = Some(Means {
            schedule,
            samples: 0,
            mean: vec![vec![0.0; n]; k],
            m2: vec![vec![0.0; n]; k],
        });
        // A first step already reached is sampled at once, as the flow's.
        self.sample()
    }

    fn stop_averages(&mut self) {
        self.flow.stop_averages();
        self.means = None;
    }

    fn averages(&mut self) -> Result<Option<Averages>, SolverError> {
        let a = self.flow.averages()?;
        let means = self.concentration_means(Cut::All);
        Ok(a.map(|a| with_means(a, means)))
    }

    fn averages_on_root(&mut self) -> Result<Option<Averages>, SolverError> {
        let a = self.flow.averages_on_root()?;
        let means = self.concentration_means(Cut::Root);
        Ok(a.map(|a| with_means(a, means)))
    }

    fn piece(&mut self) -> Result<Option<Piece>, SolverError> {
        let Some(mut piece) = self.flow.piece()? else {
            return Ok(None);
        };
        let (first, layers) = (piece.first_layer, piece.fields.size[2]);
        let plane = self.flow.grid().size[0] * self.flow.grid().size[1];
        let own: Vec<Vec<f32>> = self
            .engine
            .own_fields()?
            .iter()
            .map(|c| c.to_vec())
            .collect();
        piece.fields.concentration = match self.engine.spread() {
            Some(s) => own.iter().map(|c| s.with_next_layer(c)).collect(),
            None => own
                .iter()
                .map(|c| c[first * plane..(first + layers) * plane].to_vec())
                .collect(),
        };
        let means = self.concentration_means(Cut::Piece { first, layers });
        piece.averages = piece.averages.map(|a| with_means(a, means));
        Ok(Some(piece))
    }

    fn average_progress(&self) -> Option<(u64, u64)> {
        self.flow.average_progress()
    }

    fn enqueue(&mut self, n: u64) -> Result<(), SolverError> {
        self.step(n)
    }

    fn finish(&mut self) -> Result<(), SolverError> {
        self.flow.finish()?;
        self.readings = self.engine.readings()?;
        Ok(())
    }

    fn begin_display(&mut self, stride: usize, _host: bool) -> Result<bool, SolverError> {
        // Host copies always: the concentrations are joined to them here (a
        // frame in shared GPU memory would come without them).
        self.display_stride = stride;
        self.flow.begin_display(stride, true)
    }

    fn take_display(&mut self, out: &mut Fields) -> Result<Option<TakenFrame>, SolverError> {
        let taken = self.flow.take_display(out)?;
        if taken.is_some() {
            let grid = self.flow.grid().size;
            let fields = self.engine.fields()?;
            out.concentration.resize(fields.len(), Vec::new());
            for (c, o) in fields.iter().zip(&mut out.concentration) {
                downsample_scalar_into(grid, c, self.display_stride, o);
            }
        }
        Ok(taken)
    }

    fn share_display(&mut self, _device: Option<[u8; 16]>) {}

    fn exchange_note(&self) -> Option<String> {
        self.flow.exchange_note()
    }

    fn receptors(&self) -> Vec<(String, Vec<Reading>)> {
        self.engine
            .setup()
            .receptors
            .iter()
            .zip(&self.readings)
            .map(|(r, readings)| (r.name.clone(), readings.clone()))
            .collect()
    }
}

/// `a` with the concentrations' means, where there are any.
fn with_means(mut a: Averages, means: Option<Vec<Vec<f32>>>) -> Averages {
    if let Some(means) = means {
        a.concentration_mean = means;
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solver::lbm::cpu::CpuSolver;
    use crate::solver::lbm::lattice::Collision;
    use crate::solver::scalar::{Receptor, Release, Source};
    use crate::solver::Initial;

    /// A release in a periodic box of swirling flow, moved every third step.
    fn run() -> Carried {
        let grid = Grid {
            size: [8, 6, 5],
            periodic: [true; 3],
        };
        let flags = vec![0u8; grid.cells()];
        let flow = CpuSolver::new(
            grid,
            flags,
            Params::new(0.6, Collision::Bgk),
            Initial::Perturbed {
                velocity: [0.05, 0.02, 0.0],
                amplitude: 0.02,
                z_offset: 0,
                nz_global: 5,
            },
        )
        .unwrap();
        let setup = Setup {
            fields: 1,
            sources: vec![Source {
                field: 0,
                cells: vec![100],
                release: Release::Rate(1.0),
                start: 0,
                stop: None,
            }],
            receptors: vec![Receptor {
                name: "r".into(),
                position: [4.0, 0.0, 2.0],
                cell: 100,
            }],
            schmidt: 1.0,
            schmidt_turbulent: 0.7,
            inflow: 0.0,
            interval: 3,
        };
        Carried::new(Box::new(flow), setup)
    }

    #[test]
    fn a_state_taken_inside_a_transport_step_keeps_its_velocity() {
        let mut whole = run();
        whole.step(8).unwrap();
        let mut first = run();
        first.step(4).unwrap();
        // Step 4 is inside the transport step over 3, 4, 5: begun at 3 with
        // the flow's velocity then, which the state carries.
        let state = first.carried_state().unwrap().unwrap();
        let n = first.grid().cells();
        assert_eq!(state.len(), n + 2 + 3 * n);
        let mut second = run();
        let populations = first.populations().unwrap();
        second.set_populations(4, &populations).unwrap();
        second.set_carried_state(&state).unwrap();
        second.step(4).unwrap();
        assert_eq!(
            whole.carried_state().unwrap(),
            second.carried_state().unwrap()
        );
        assert!(whole.receptors()[0].1[0].dose > 0.0);
        // Without it, that step cannot end as it would have.
        let mut third = run();
        third.set_populations(4, &populations).unwrap();
        let e = third.set_carried_state(&state[..n + 2]).unwrap_err();
        assert!(e.to_string().contains("middle of a transport step"), "{e}");
    }
}
