//! The time series a session keeps for its plots: the steadiness criterion,
//! the first obstacle's force coefficients with the shedding Strouhal number,
//! and the velocity at the probe point.

use crate::scenario::Scenario;
use crate::solver::{display, Fields, Solver};

/// Samples kept per series.
pub const HISTORY: usize = 2000;

/// Time series for the plots: (step, value…) points, the newest [`HISTORY`].
#[derive(Clone, Debug, Default)]
pub struct History {
    /// log10 of the mean relative change of the velocity per step.
    pub change: Vec<[f64; 2]>,
    /// Drag and lift coefficients of the first obstacle.
    pub drag: Vec<[f64; 2]>,
    pub lift: Vec<[f64; 2]>,
    pub obstacle: Option<String>,
    /// Shedding Strouhal number f L / U from the lift signal, once it oscillates.
    pub strouhal: Option<f64>,
    /// Velocity at the probe point: (step, ux, uy, uz), lattice units.
    pub probe: Vec<[f64; 4]>,
    /// The fields along the plot line, and the step they are of.
    pub line: Option<(u64, Vec<crate::io::probe::Sample>)>,
}

fn push<const N: usize>(series: &mut Vec<[f64; N]>, point: [f64; N]) {
    if series.len() >= HISTORY {
        series.drain(..HISTORY / 4);
    }
    series.push(point);
}

impl History {
    /// Adds the steadiness criterion and the first obstacle's coefficients
    /// (`area`: its frontal area in cells) at the solver's current step.
    pub(super) fn record(
        &mut self,
        solver: &mut dyn Solver,
        scenario: &Scenario,
        area: Option<f64>,
    ) {
        let step = solver.time_step();
        if !step.is_multiple_of(2) {
            return;
        }
        let t = step as f64;
        // The solver computes it where its fields are (on the GPU for CUDA).
        if let Ok(Some(change)) = solver.velocity_change() {
            if change > 0.0 && change.is_finite() {
                push(&mut self.change, [t, change.log10()]);
            }
        }
        let Some(area) = area else { return };
        if let Ok(forces) = solver.obstacle_forces() {
            let units = &scenario.units;
            let u = units.velocity_lattice;
            let q = 0.5 * u * u * area;
            let f = forces[1];
            let (d, l) = (scenario.forces.drag.index(), scenario.forces.lift.index());
            push(&mut self.drag, [t, f[d] / q]);
            push(&mut self.lift, [t, f[l] / q]);
            self.strouhal = oscillation_frequency(&self.lift)
                .map(|f| f * units.length_cells / units.velocity_lattice);
        }
    }

    /// Adds the velocity at `probe` (cells of the solver's grid) from a
    /// frame's fields on a display grid of `stride`.
    pub(super) fn record_probe(
        &mut self,
        step: u64,
        fields: &Fields,
        stride: usize,
        probe: [f32; 3],
    ) {
        if !fields.has_values() {
            return;
        }
        if self.probe.last().is_some_and(|p| p[0] > step as f64) {
            // A reset or an earlier checkpoint: the series starts over.
            self.probe.clear();
        }
        let at = display::to_display(probe.map(f64::from), stride);
        let s = crate::io::probe::sample_at(fields, at);
        push(&mut self.probe, [step as f64, s.u[0], s.u[1], s.u[2]]);
    }

    /// Samples `line` (cells of the solver's grid) from a frame's fields on
    /// a display grid of `stride`: on the solver's grid itself (stride 1)
    /// these are the numbers `--probe` writes.
    pub(super) fn record_line(
        &mut self,
        step: u64,
        fields: &Fields,
        stride: usize,
        line: Option<&crate::io::probe::ProbeLine>,
    ) {
        let Some(line) = line else {
            self.line = None;
            return;
        };
        if !fields.has_values() {
            return;
        }
        let samples = line
            .positions()
            .into_iter()
            .map(|p| {
                let mut s = crate::io::probe::sample_at(fields, display::to_display(p, stride));
                s.position = p;
                s
            })
            .collect();
        self.line = Some((step, samples));
    }
}

/// Frequency (per step) of an oscillating signal from its upward mean crossings
/// over the newest half of the samples; `None` until it has crossed at least 4
/// times with regular periods.
pub fn oscillation_frequency(series: &[[f64; 2]]) -> Option<f64> {
    let recent = &series[series.len() / 2..];
    if recent.len() < 8 {
        return None;
    }
    let mean = recent.iter().map(|p| p[1]).sum::<f64>() / recent.len() as f64;
    let amplitude = recent
        .iter()
        .map(|p| (p[1] - mean).abs())
        .fold(0.0, f64::max);
    if !(amplitude > 1e-6) {
        return None;
    }
    let mut crossings = Vec::new();
    for w in recent.windows(2) {
        let (a, b) = (w[0][1] - mean, w[1][1] - mean);
        if a < 0.0 && b >= 0.0 {
            // Upward crossing, interpolated in time.
            crossings.push(w[0][0] + (w[1][0] - w[0][0]) * (-a / (b - a)));
        }
    }
    if crossings.len() < 4 {
        return None;
    }
    // A shedding signal repeats: its periods agree within 20%; start-up
    // transients and noise do not.
    let periods: Vec<f64> = crossings.windows(2).map(|w| w[1] - w[0]).collect();
    let mean_period = periods.iter().sum::<f64>() / periods.len() as f64;
    if periods
        .iter()
        .any(|p| (p - mean_period).abs() > 0.2 * mean_period)
    {
        return None;
    }
    Some(1.0 / mean_period)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oscillation_frequency_of_a_sampled_sine() {
        let period = 317.0;
        let series: Vec<[f64; 2]> = (0..3000)
            .map(|k| {
                let t = k as f64 * 7.0;
                [
                    t,
                    0.3 + 0.05 * (2.0 * std::f64::consts::PI * t / period).sin(),
                ]
            })
            .collect();
        let f = oscillation_frequency(&series).unwrap();
        assert!((f * period - 1.0).abs() < 1e-3, "{}", 1.0 / f);
        let flat: Vec<[f64; 2]> = (0..100).map(|k| [k as f64, 1.0]).collect();
        assert_eq!(oscillation_frequency(&flat), None);
        // A chirp's periods disagree: no frequency.
        let chirp: Vec<[f64; 2]> = (0..3000)
            .map(|k| [k as f64, (k as f64 * k as f64 * 4e-5).sin()])
            .collect();
        assert_eq!(oscillation_frequency(&chirp), None);
    }

    #[test]
    fn the_probe_series_samples_display_frames_and_starts_over_after_a_reset() {
        let mut fields = Fields::new([4, 4, 4]);
        let c = fields.index(2, 2, 2);
        fields.ux[c] = 0.25;
        let mut h = History::default();
        // A frame of stride 2 holds solver cell (4, 4, 4) at display cell (2, 2, 2)…
        h.record_probe(10, &fields, 2, [4.5, 4.5, 4.5]);
        h.record_probe(12, &fields, 2, [4.5, 4.5, 4.5]);
        assert_eq!(h.probe.len(), 2);
        assert_eq!(h.probe[1][0], 12.0);
        assert!(h.probe[1][1] > 0.0, "{:?}", h.probe);
        // …and frames without host values are skipped.
        h.record_probe(14, &Fields::default(), 1, [0.0; 3]);
        assert_eq!(h.probe.len(), 2);
        h.record_probe(2, &fields, 1, [0.0; 3]);
        assert_eq!(h.probe.len(), 1);
    }
}
