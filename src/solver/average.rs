//! Time averages of the fields (`run --average-from`, the window's "mean"):
//! the running mean and RMS of the velocity and the pressure per cell.
//!
//! Each sample updates the mean and the sum of squared deviations by Welford's
//! method in f64 (the CUDA kernel `average_sample` does the same): a million
//! samples of a value lose nothing measurable, where a float sum would stop
//! growing once the samples fall below its rounding step, and the variance
//! does not come from the difference of two large sums.

use super::{lbm::lattice::CS2, Fields};

/// Quantities averaged per cell, in this order: ux, uy, uz, p − p0.
pub const QUANTITIES: usize = 4;

/// When samples are taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The first sample's step.
    pub from_step: u64,
    /// Steps between samples.
    pub every: u64,
}

impl Schedule {
    /// This schedule for a solver at step `t`: a first step already passed
    /// becomes `t`, and at least one step lies between samples.
    pub fn from_now(self, t: u64) -> Schedule {
        Schedule {
            from_step: self.from_step.max(t),
            every: self.every.max(1),
        }
    }

    /// Whether the state after step `t` is sampled.
    pub fn due(&self, t: u64) -> bool {
        t >= self.from_step && (t - self.from_step).is_multiple_of(self.every)
    }

    /// Steps from `t` to the next sample after it.
    pub fn steps_to_next(&self, t: u64) -> u64 {
        if t < self.from_step {
            self.from_step - t
        } else {
            self.every - (t - self.from_step) % self.every
        }
    }
}

/// The averages so far, in lattice units, one value per cell, x fastest.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Averages {
    pub size: [usize; 3],
    /// Step of the first sample, and samples taken.
    pub from_step: u64,
    pub samples: u64,
    pub velocity_mean: [Vec<f32>; 3],
    /// Root mean square of the fluctuation u − ū per component.
    pub velocity_rms: [Vec<f32>; 3],
    pub pressure_mean: Vec<f32>,
    pub pressure_rms: Vec<f32>,
    /// Mean contaminant concentration per field, where the run carries any.
    pub concentration_mean: Vec<Vec<f32>>,
}

impl Averages {
    /// The mean fields as [`Fields`] (ρ from the mean pressure), for plots.
    pub fn mean_fields(&self) -> Fields {
        let [ux, uy, uz] = self.velocity_mean.clone();
        Fields {
            size: self.size,
            rho: self.pressure_mean.iter().map(|p| 1.0 + p / CS2).collect(),
            ux,
            uy,
            uz,
            concentration: self.concentration_mean.clone(),
        }
    }

    pub fn velocity_mean(&self, cell: usize) -> [f32; 3] {
        [0, 1, 2].map(|k| self.velocity_mean[k][cell])
    }

    pub fn velocity_rms(&self, cell: usize) -> [f32; 3] {
        [0, 1, 2].map(|k| self.velocity_rms[k][cell])
    }

    /// From the mean and the sums of squared deviations, quantity by
    /// quantity ([`QUANTITIES`] planes of `size` cells each).
    pub fn from_sums(
        size: [usize; 3],
        schedule: Schedule,
        samples: u64,
        mut plane: impl FnMut(usize) -> (Vec<f64>, Vec<f64>),
    ) -> Averages {
        let mut out = Averages {
            size,
            from_step: schedule.from_step,
            samples,
            ..Averages::default()
        };
        let count = samples.max(1) as f64;
        for q in 0..QUANTITIES {
            let (mean, m2) = plane(q);
            let mean: Vec<f32> = mean.iter().map(|&m| m as f32).collect();
            let rms: Vec<f32> = m2.iter().map(|&s| (s / count).sqrt() as f32).collect();
            match q {
                3 => {
                    out.pressure_mean = mean;
                    out.pressure_rms = rms;
                }
                k => {
                    out.velocity_mean[k] = mean;
                    out.velocity_rms[k] = rms;
                }
            }
        }
        out
    }
}

/// Welford's update of one cell's mean and sum of squared deviations with
/// sample `x`, the `count`-th (1-based).
#[inline]
pub fn welford(mean: &mut f64, m2: &mut f64, x: f64, count: u64) {
    let delta = x - *mean;
    *mean += delta / count as f64;
    *m2 += delta * (x - *mean);
}

/// Running averages kept on the host (the CPU solver).
#[derive(Clone, Debug)]
pub struct HostAverages {
    pub schedule: Schedule,
    pub samples: u64,
    /// Per cell: [`QUANTITIES`] means, then as many sums of squared deviations.
    sums: Vec<f64>,
}

const PER_CELL: usize = 2 * QUANTITIES;

impl HostAverages {
    /// Zeroed sums for `cells` cells, or why there is no memory for them.
    pub fn new(schedule: Schedule, cells: usize) -> Result<HostAverages, String> {
        let values = PER_CELL * cells;
        let bytes = 8 * values as u64;
        let refuse = || {
            format!(
                "not enough memory for the time averages ({} for {cells} cells); \
                 average a smaller grid",
                crate::system::human_bytes(bytes)
            )
        };
        // Linux promises memory it may not have: ask what is free first. A
        // failed allocation would abort the program, and the run with it.
        if crate::system::available_memory().is_some_and(|free| bytes > free) {
            return Err(refuse());
        }
        let mut sums = Vec::new();
        sums.try_reserve_exact(values).map_err(|_| refuse())?;
        sums.resize(values, 0.0);
        Ok(HostAverages {
            schedule,
            samples: 0,
            sums,
        })
    }

    /// Adds one sample over `cells`: `sample(cell)` gives the density and
    /// velocity a cell shows.
    pub fn add(
        &mut self,
        cells: std::ops::Range<usize>,
        sample: impl Fn(usize) -> (f32, [f32; 3]) + Sync,
    ) {
        use rayon::prelude::*;
        self.samples += 1;
        let count = self.samples;
        const CHUNK: usize = 1 << 14;
        let start = cells.start;
        self.sums[PER_CELL * cells.start..PER_CELL * cells.end]
            .par_chunks_mut(PER_CELL * CHUNK)
            .enumerate()
            .for_each(|(k, chunk)| {
                for (i, cell) in chunk.chunks_exact_mut(PER_CELL).enumerate() {
                    let (rho, u) = sample(start + k * CHUNK + i);
                    let x = [u[0], u[1], u[2], CS2 * (rho - 1.0)];
                    let (mean, m2) = cell.split_at_mut(QUANTITIES);
                    for q in 0..QUANTITIES {
                        welford(&mut mean[q], &mut m2[q], x[q] as f64, count);
                    }
                }
            });
    }

    pub fn averages(&self, size: [usize; 3]) -> Averages {
        Averages::from_sums(size, self.schedule, self.samples, |q| {
            let cells = self.sums.chunks_exact(PER_CELL);
            (
                cells.clone().map(|c| c[q]).collect(),
                cells.map(|c| c[QUANTITIES + q]).collect(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_samples_from_its_first_step_every_k_steps() {
        let s = Schedule {
            from_step: 10,
            every: 4,
        };
        assert!(!s.due(9) && s.due(10) && !s.due(11) && s.due(14));
        assert_eq!(s.steps_to_next(0), 10);
        assert_eq!(s.steps_to_next(10), 4);
        assert_eq!(s.steps_to_next(12), 2);
    }

    #[test]
    fn averages_of_a_periodic_signal_over_whole_periods_are_exact() {
        // Cell c carries a + b sin(2π k / 16 + c) at sample k: over whole
        // periods the mean is a and the RMS of the fluctuation b/√2.
        let size = [3, 2, 1];
        let mut host = HostAverages::new(
            Schedule {
                from_step: 0,
                every: 1,
            },
            6,
        )
        .unwrap();
        let period = 16;
        for k in 0..10 * period {
            let phase = 2.0 * std::f64::consts::PI * k as f64 / period as f64;
            host.add(0..6, |c| {
                let s = (phase + c as f64).sin();
                let u = [0.05 + 0.01 * s, -0.02 * s, 0.0];
                (1.0 + (0.003 * s) as f32 * 3.0, u.map(|v| v as f32))
            });
        }
        let a = host.averages(size);
        assert_eq!(a.samples, 160);
        for c in 0..6 {
            let mean = a.velocity_mean(c);
            let rms = a.velocity_rms(c);
            assert!((mean[0] - 0.05).abs() < 1e-8, "{mean:?}");
            assert!(mean[1].abs() < 1e-8 && mean[2] == 0.0, "{mean:?}");
            assert!((rms[0] as f64 - 0.01 / 2f64.sqrt()).abs() < 1e-8, "{rms:?}");
            assert!((rms[1] as f64 - 0.02 / 2f64.sqrt()).abs() < 1e-8, "{rms:?}");
            assert_eq!(rms[2], 0.0);
            assert!(a.pressure_mean[c].abs() < 1e-8);
            assert!((a.pressure_rms[c] as f64 - 0.003 / 2f64.sqrt()).abs() < 1e-8);
        }
        // The mean fields carry the mean pressure back as a density.
        assert!((a.mean_fields().rho[0] - 1.0).abs() < 1e-7);
    }

    #[test]
    fn welford_keeps_a_million_samples_exact_where_a_float_sum_drifts() {
        // A mean of 0.05 with fluctuations of 1e-3 over 10^6 samples.
        let (mut mean, mut m2) = (0.0, 0.0);
        let mut float_sum = 0.0f32;
        let n = 1_000_000u64;
        for k in 1..=n {
            let x = 0.05f64 + 1e-3 * if k % 2 == 0 { 1.0 } else { -1.0 };
            welford(&mut mean, &mut m2, x as f32 as f64, k);
            float_sum += x as f32;
        }
        // The samples are the two floats nearest 0.051 and 0.049.
        let (hi, lo) = (
            (0.05f64 + 1e-3) as f32 as f64,
            (0.05f64 - 1e-3) as f32 as f64,
        );
        let exact = (hi + lo) / 2.0;
        assert!((mean - exact).abs() < 1e-12, "{mean} vs {exact}");
        assert!(((m2 / n as f64).sqrt() - (hi - lo) / 2.0).abs() < 1e-12);
        // What plain single precision would have given.
        assert!((float_sum as f64 / n as f64 - exact).abs() > 1e-5);
    }
}
