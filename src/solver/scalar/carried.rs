//! A flow solver with contaminants: any [`Solver`] whose fields carry
//! concentrations, advanced on the host after each of its steps with the
//! velocity of that step ([`Dispersion`]). It is the CPU path of every
//! method; everything else passes through to the flow solver.

use super::{Dispersion, Reading, Setup};
use crate::solver::average::{welford, Schedule};
use crate::solver::display::downsample_scalar_into;
use crate::solver::{Averages, Fields, Grid, Params, Solver, SolverError, Stats, TakenFrame};

pub struct Carried {
    flow: Box<dyn Solver>,
    dispersion: Dispersion,
    /// The velocity of the last step (reused between steps).
    velocity: Fields,
    /// Running means of the concentrations, on the flow's schedule.
    means: Option<Means>,
    /// The block size of the display frames asked for.
    display_stride: usize,
}

struct Means {
    schedule: Schedule,
    samples: u64,
    /// Per field, per cell: the mean and the sum of squared deviations.
    mean: Vec<Vec<f64>>,
    m2: Vec<Vec<f64>>,
}

impl Carried {
    pub fn new(flow: Box<dyn Solver>, setup: Setup) -> Carried {
        let dispersion = Dispersion::new(flow.grid(), flow.flags(), setup);
        Carried {
            flow,
            dispersion,
            velocity: Fields::default(),
            means: None,
            display_stride: 1,
        }
    }

    fn sample(&mut self) {
        let t = self.flow.time_step();
        let Some(m) = &mut self.means else { return };
        if !m.schedule.due(t) {
            return;
        }
        m.samples += 1;
        for (k, c) in self.dispersion.fields().iter().enumerate() {
            for (cell, &v) in c.iter().enumerate() {
                welford(
                    &mut m.mean[k][cell],
                    &mut m.m2[k][cell],
                    v as f64,
                    m.samples,
                );
            }
        }
    }
}

impl Solver for Carried {
    fn describe(&self) -> String {
        format!(
            "{} with {} contaminant field{} on the host",
            self.flow.describe(),
            self.dispersion.fields().len(),
            if self.dispersion.fields().len() == 1 {
                ""
            } else {
                "s"
            }
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
            self.flow.step(1)?;
            self.flow.fields_into(&mut self.velocity)?;
            let (grid, flags, params) = (*self.flow.grid(), self.flow.flags(), self.flow.params());
            self.dispersion
                .advance(&grid, flags, params, &self.velocity, step);
            self.sample();
        }
        Ok(())
    }

    fn time_step(&self) -> u64 {
        self.flow.time_step()
    }

    fn reset(&mut self) -> Result<(), SolverError> {
        self.flow.reset()?;
        self.dispersion.reset(self.flow.flags());
        self.means = None;
        Ok(())
    }

    fn fields(&mut self) -> Result<Fields, SolverError> {
        let mut out = Fields::default();
        self.fields_into(&mut out)?;
        Ok(out)
    }

    fn fields_into(&mut self, out: &mut Fields) -> Result<(), SolverError> {
        self.flow.fields_into(out)?;
        let fields = self.dispersion.fields();
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

    fn visit_populations(&mut self, visit: &mut dyn FnMut(&[f32])) -> Result<(), SolverError> {
        self.flow.visit_populations(visit)
    }

    fn set_populations(&mut self, step: u64, populations: &[f32]) -> Result<(), SolverError> {
        self.flow.set_populations(step, populations)
    }

    fn carried_state(&self) -> Option<Vec<f32>> {
        Some(self.dispersion.state())
    }

    fn set_carried_state(&mut self, state: &[f32]) -> Result<(), SolverError> {
        self.dispersion
            .set_state(state)
            .map_err(SolverError::StateMismatch)
    }

    fn memory_bytes(&self) -> u64 {
        let fields = self.dispersion.fields().len() as u64 + 1;
        self.flow.memory_bytes() + fields * 4 * self.flow.grid().cells() as u64
    }

    fn velocity_change(&mut self) -> Result<Option<f64>, SolverError> {
        self.flow.velocity_change()
    }

    fn start_averages(&mut self, schedule: Schedule) -> Result<(), SolverError> {
        self.flow.start_averages(schedule)?;
        let schedule = schedule.from_now(self.flow.time_step());
        let (k, n) = (self.dispersion.fields().len(), self.flow.grid().cells());
        self.means = Some(Means {
            schedule,
            samples: 0,
            mean: vec![vec![0.0; n]; k],
            m2: vec![vec![0.0; n]; k],
        });
        // A first step already reached is sampled at once, as the flow's.
        self.sample();
        Ok(())
    }

    fn stop_averages(&mut self) {
        self.flow.stop_averages();
        self.means = None;
    }

    fn averages(&mut self) -> Result<Option<Averages>, SolverError> {
        let Some(mut a) = self.flow.averages()? else {
            return Ok(None);
        };
        if let Some(m) = &self.means {
            a.concentration_mean = m
                .mean
                .iter()
                .map(|v| v.iter().map(|&x| x as f32).collect())
                .collect();
        }
        Ok(Some(a))
    }

    fn average_progress(&self) -> Option<(u64, u64)> {
        self.flow.average_progress()
    }

    fn enqueue(&mut self, n: u64) -> Result<(), SolverError> {
        self.step(n)
    }

    fn finish(&mut self) -> Result<(), SolverError> {
        self.flow.finish()
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
            let fields = self.dispersion.fields();
            out.concentration.resize(fields.len(), Vec::new());
            for (c, o) in fields.iter().zip(&mut out.concentration) {
                downsample_scalar_into(grid, c, self.display_stride, o);
            }
        }
        Ok(taken)
    }

    fn share_display(&mut self, _device: Option<[u8; 16]>) {}

    fn receptors(&self) -> Vec<(String, Vec<Reading>)> {
        self.dispersion
            .setup()
            .receptors
            .iter()
            .zip(self.dispersion.readings())
            .map(|(r, readings)| (r.name.clone(), readings))
            .collect()
    }
}
