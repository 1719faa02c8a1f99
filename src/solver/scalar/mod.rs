//! Passive scalars (contaminant concentrations) carried by the flow of
//! either solution method (issue 24): [`transport`], the finite-volume
//! advection and diffusion on the cell centres, and [`Dispersion`], the
//! fields, their sources and the receptors that record them.

pub mod carried;
pub mod cuda;
pub mod engine;
pub mod slab;
pub mod transport;

pub use carried::Carried;

use crate::solver::{Fields, Grid, Params};
use transport::{Plan, Role};

/// Most concentration fields a run carries.
pub const MAX_FIELDS: usize = 4;

/// How a source releases its contaminant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Release {
    /// The source's cells are held at this concentration.
    Concentration(f32),
    /// This amount (concentration × cells) is added per flow step, spread
    /// evenly over the source's cells.
    Rate(f32),
}

/// A release into one field over some cells, from step `start` (included)
/// to `stop` (excluded).
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    /// Index of the field (0 ..< [`MAX_FIELDS`]).
    pub field: usize,
    /// The open cells it releases into.
    pub cells: Vec<u32>,
    pub release: Release,
    pub start: u64,
    pub stop: Option<u64>,
}

impl Source {
    /// Whether it releases during the flow step from `step` to `step + 1`.
    pub fn active(&self, step: u64) -> bool {
        step >= self.start && self.stop.is_none_or(|s| step < s)
    }
}

/// A point where the concentrations and doses are recorded: the cell that
/// contains it.
#[derive(Clone, Debug, PartialEq)]
pub struct Receptor {
    pub name: String,
    pub position: [f64; 3],
    pub cell: u32,
}

/// Everything about the scalars a scenario asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct Setup {
    /// Number of concentration fields (1 ..= [`MAX_FIELDS`]).
    pub fields: usize,
    pub sources: Vec<Source>,
    pub receptors: Vec<Receptor>,
    /// Schmidt number ν/D of the molecular diffusivity D.
    pub schmidt: f32,
    /// Turbulent Schmidt number ν_t/D_t, used when the subgrid model is on.
    pub schmidt_turbulent: f32,
    /// Concentration of what enters through inlets.
    pub inflow: f32,
    /// Flow steps per transport step (≥ 1), on average: the scalar moves
    /// with the velocity of the first step of each transport step, over all
    /// of its steps at once ([`Setup::transport_starting_at`]).
    pub interval: u32,
}

impl Setup {
    /// Whether a transport step starts with the flow step from `step`: it
    /// moves the fields in the velocity of the flow at `step`.
    ///
    /// The first steps alternate between even and odd: the lattice
    /// Boltzmann velocity can oscillate with a period of two steps (its
    /// non-hydrodynamic modes, barely damped as τ nears ½ in a turbulent
    /// flow), and a velocity always taken at even steps would carry one
    /// phase of that oscillation into the plume. An odd interval alternates
    /// by itself; an even interval k alternates spans of k − 1 and k + 1.
    /// (Measured on an LES channel at Re 2000, CPU: the doses of every 2nd,
    /// 4th and 6th step with uniform spans were 4–7% off those of every
    /// step and every 3rd, which agreed within 0.6%.)
    pub fn transport_starting_at(&self, step: u64) -> bool {
        let k = self.interval as u64;
        match k % 2 {
            1 => step.is_multiple_of(k),
            _ => matches!(step % (2 * k), r if r == 0 || r == k - 1),
        }
    }

    /// The transport step that ends with the flow step from `step` to
    /// `step + 1`, if one does: its first flow step and how many it covers.
    pub fn transport_ending_at(&self, step: u64) -> Option<(u64, u32)> {
        let k = self.interval as u64;
        let end = step + 1;
        let span = match k % 2 {
            1 => end.is_multiple_of(k).then_some(k),
            _ => match end % (2 * k) {
                0 => Some(k + 1),
                r if r == k - 1 => Some(k - 1),
                _ => None,
            },
        }?;
        Some((end - span, span as u32))
    }

    /// How many of the `span` flow steps from `first` on the source releases
    /// in.
    fn active_steps(source: &Source, first: u64, span: u32) -> u32 {
        (first..first + span as u64)
            .filter(|&s| source.active(s))
            .count() as u32
    }

    /// What a source does to its cells in each of `rounds` rounds of the
    /// `span` flow steps from `first` ([`Plan`]): `None` while it is off,
    /// else the value to set (`false`) or add (`true`). The CUDA path
    /// applies the same value.
    pub fn release_value(
        source: &Source,
        first: u64,
        span: u32,
        rounds: u32,
    ) -> Option<(bool, f32)> {
        let active = Self::active_steps(source, first, span);
        if active == 0 {
            return None;
        }
        Some(match source.release {
            Release::Concentration(v) => (false, v),
            Release::Rate(r) => (
                true,
                r * (active as f32 / rounds as f32) / source.cells.len() as f32,
            ),
        })
    }

    /// How a transport step over `span` flow steps is cut into sub-steps,
    /// for the largest Courant-number sum `courant` and diffusivity
    /// `diffusivity` of one flow step.
    pub fn plan(span: u32, courant: f32, diffusivity: f32) -> Plan {
        Plan::of(span as f32 * courant, span as f32 * diffusivity)
    }

    /// What `source` does to its `cells` of field `c` after a sub-step of
    /// the transport step over the `span` flow steps from `first` cut as
    /// `plan` says: a held value is set after every sub-step, a rate is
    /// added as each round ends ([`Plan::sub_steps`]).
    pub fn release(
        source: &Source,
        cells: &[u32],
        c: &mut [f32],
        (first, span): (u64, u32),
        plan: Plan,
        round_ends: bool,
    ) {
        match Self::release_value(source, first, span, plan.rounds) {
            Some((false, v)) => cells.iter().for_each(|&i| c[i as usize] = v),
            Some((true, v)) if round_ends => cells.iter().for_each(|&i| c[i as usize] += v),
            _ => {}
        }
    }
}

/// One receptor's record of one field.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Reading {
    pub concentration: f32,
    /// Σ c over the flow steps so far (the time integral, Δt = 1 step).
    pub dose: f64,
}

#[cfg(test)]
impl Setup {
    /// One field, no sources or receptors, moved every `interval` flow
    /// steps: for tests that set the concentrations themselves.
    pub(crate) fn bare(interval: u32) -> Setup {
        Setup {
            fields: 1,
            sources: Vec::new(),
            receptors: Vec::new(),
            schmidt: 1.0,
            schmidt_turbulent: 0.7,
            inflow: 0.0,
            interval,
        }
    }
}

/// The concentration fields of a run, advanced one flow step at a time with
/// the velocity of that step.
#[derive(Clone, Debug)]
pub struct Dispersion {
    setup: Setup,
    fields: Vec<Vec<f32>>,
    next: Vec<f32>,
    /// The face fluxes of a sub-step ([`transport::advance`]).
    flux: Vec<f32>,
    diffusivity: Vec<f32>,
    /// Per receptor, per field.
    doses: Vec<[f64; MAX_FIELDS]>,
    /// How the last transport step was cut.
    plan: Plan,
    /// The largest Courant-number sum and diffusivity of the last
    /// transport step.
    maxima: (f32, f32),
}

impl Dispersion {
    pub fn new(grid: &Grid, flags: &[u8], setup: Setup) -> Dispersion {
        let mut d = Dispersion {
            fields: vec![Vec::new(); setup.fields],
            next: vec![0.0; grid.cells()],
            flux: Vec::new(),
            diffusivity: Vec::new(),
            doses: vec![[0.0; MAX_FIELDS]; setup.receptors.len()],
            plan: Plan::default(),
            maxima: (0.0, 0.0),
            setup,
        };
        d.reset(flags);
        d
    }

    /// Back to the start: no contaminant anywhere but in inlets.
    pub fn reset(&mut self, flags: &[u8]) {
        let inflow = self.setup.inflow;
        for c in &mut self.fields {
            c.clear();
            c.extend(flags.iter().map(|&f| {
                if Role::of(f) == Role::Held {
                    inflow
                } else {
                    0.0
                }
            }));
        }
        self.doses.iter_mut().for_each(|d| *d = [0.0; MAX_FIELDS]);
        self.plan = Plan::default();
    }

    pub fn setup(&self) -> &Setup {
        &self.setup
    }

    /// The concentration fields.
    pub fn fields(&self) -> &[Vec<f32>] {
        &self.fields
    }

    /// Per receptor, per field: the doses so far.
    pub fn doses(&self) -> &[[f64; MAX_FIELDS]] {
        &self.doses
    }

    /// The largest Courant-number sum and diffusivity of the last
    /// transport step (they set its sub-steps).
    pub fn maxima(&self) -> (f32, f32) {
        self.maxima
    }

    /// How the last transport step was cut.
    pub fn plan(&self) -> Plan {
        self.plan
    }

    /// Transports the fields over the `span` flow steps from `first` on in
    /// `velocity` (the flow at `first`, before them), with the viscosity of
    /// `params`.
    pub fn advance(
        &mut self,
        grid: &Grid,
        flags: &[u8],
        params: &Params,
        velocity: &Fields,
        first: u64,
        span: u32,
    ) {
        let molecular = params.viscosity() / self.setup.schmidt;
        let largest = if params.smagorinsky > 0.0 {
            transport::eddy_diffusivity(
                grid,
                flags,
                velocity,
                params.smagorinsky,
                self.setup.schmidt_turbulent,
                molecular,
                &mut self.diffusivity,
            );
            self.diffusivity.iter().copied().fold(molecular, f32::max)
        } else {
            self.diffusivity.clear();
            self.diffusivity.push(molecular);
            molecular
        };
        let courant = transport::largest_courant(flags, velocity, 0..flags.len());
        self.maxima = (courant, largest);
        let plan = Setup::plan(span, courant, largest);
        self.plan = plan;
        let mut flow = transport::Flow {
            grid,
            flags,
            velocity,
            diffusivity: &self.diffusivity,
            dt: 0.0,
        };
        for (k, c) in self.fields.iter_mut().enumerate() {
            for (sub, dt, round_ends) in plan.sub_steps(span) {
                flow.dt = dt;
                transport::sub_step(&flow, sub, c, &mut self.next, &mut self.flux);
                std::mem::swap(c, &mut self.next);
                for s in self.setup.sources.iter().filter(|s| s.field == k) {
                    Setup::release(s, &s.cells, c, (first, span), plan, round_ends);
                }
            }
        }
    }

    /// Adds one flow step of the current concentrations to the doses.
    pub fn add_doses(&mut self) {
        for (r, dose) in self.setup.receptors.iter().zip(&mut self.doses) {
            for (k, c) in self.fields.iter().enumerate() {
                dose[k] += c[r.cell as usize] as f64;
            }
        }
    }

    /// One flow step from `step`: transports when a transport step ends with
    /// it ([`Setup::transport_ending_at`]), then adds to the doses. For a
    /// velocity that does not change (tests); [`Carried`] takes each
    /// transport step's from the flow at its start.
    pub fn step(
        &mut self,
        grid: &Grid,
        flags: &[u8],
        params: &Params,
        velocity: &Fields,
        step: u64,
    ) {
        if let Some((first, span)) = self.setup.transport_ending_at(step) {
            self.advance(grid, flags, params, velocity, first, span);
        }
        self.add_doses();
    }

    /// Each receptor's readings, one per field.
    pub fn readings(&self) -> Vec<Vec<Reading>> {
        self.setup
            .receptors
            .iter()
            .zip(&self.doses)
            .map(|(r, dose)| {
                (0..self.fields.len())
                    .map(|k| Reading {
                        concentration: self.fields[k][r.cell as usize],
                        dose: dose[k],
                    })
                    .collect()
            })
            .collect()
    }

    /// The state as FP32 values ([`pack_state`]): what a checkpoint keeps.
    pub fn state(&self) -> Vec<f32> {
        pack_state(&self.fields, &self.doses, None)
    }

    /// Restores [`Dispersion::state`]; the rest of `state` after it (the
    /// velocity of a transport step under way, [`pack_state`]).
    pub fn set_state<'a>(&mut self, state: &'a [f32]) -> Result<&'a [f32], String> {
        unpack_state(state, self.next.len(), &mut self.fields, &mut self.doses)
    }
}

/// The fields, then each receptor's doses (one per field) split into two
/// floats each so that they come back exactly; then, while a transport step
/// is under way, the velocity it moves in (ux, uy, uz planes): a run resumed
/// in its middle ends it as the run that was stopped would have.
pub fn pack_state(
    fields: &[Vec<f32>],
    doses: &[[f64; MAX_FIELDS]],
    velocity: Option<[&[f32]; 3]>,
) -> Vec<f32> {
    let mut out: Vec<f32> = fields.iter().flatten().copied().collect();
    for d in doses {
        for v in &d[..fields.len()] {
            let bits = v.to_bits();
            out.push(f32::from_bits((bits >> 32) as u32));
            out.push(f32::from_bits(bits as u32));
        }
    }
    for plane in velocity.into_iter().flatten() {
        out.extend_from_slice(plane);
    }
    out
}

/// Restores [`pack_state`] into `fields` (each of `cells` values) and
/// `doses`, which give the expected counts; the velocity planes after them
/// (empty if none).
pub fn unpack_state<'a>(
    state: &'a [f32],
    cells: usize,
    fields: &mut [Vec<f32>],
    doses: &mut [[f64; MAX_FIELDS]],
) -> Result<&'a [f32], String> {
    let expected = fields.len() * (cells + 2 * doses.len());
    if state.len() != expected && state.len() != expected + 3 * cells {
        return Err(format!(
            "{} concentration values for {expected} expected",
            state.len(),
        ));
    }
    for (k, c) in fields.iter_mut().enumerate() {
        c.clear();
        c.extend_from_slice(&state[k * cells..(k + 1) * cells]);
    }
    let mut rest = state[fields.len() * cells..expected].chunks_exact(2);
    for d in doses {
        for v in &mut d[..fields.len()] {
            let p = rest.next().expect("length checked");
            *v = f64::from_bits(((p[0].to_bits() as u64) << 32) | p[1].to_bits() as u64);
        }
    }
    Ok(&state[expected..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solver::flags::{make, CellType};
    use crate::solver::lbm::lattice::Collision;

    #[test]
    fn a_continuous_point_source_in_uniform_flow_makes_the_analytic_plume() {
        // Moved every flow step, and every 4, 6 and 8 steps over as many at
        // once (the GPU's contaminant meets its cost goal at 256³ every 8:
        // BENCHMARKS.md). Σ|u| = 0.1 and 6D = 0.3 per step, and the last
        // transport step spans 1, 5, 7 and 9 steps (an even interval
        // alternates spans one shorter and one longer). Every step, one
        // sub-step does both; from every 4th, diffusion takes more sub-steps
        // than advection and gets its own (transport::Plan): 5 steps, one
        // advection sub-step (Σν = 0.5) and two of diffusion (6DΔt = 0.75
        // each); 7 and 9 steps, two rounds and three of diffusion (6DΔt =
        // 0.7 and 0.9).
        let plan = |rounds, diffusion| Plan { rounds, diffusion };
        for (interval, plan) in [
            (1, plan(1, 0)),
            (4, plan(1, 2)),
            (6, plan(2, 3)),
            (8, plan(2, 3)),
        ] {
            plume(interval, plan);
        }
    }

    fn plume(interval: u32, plan: Plan) {
        // Inlet at x = 0, outlet at x = nx − 1, periodic across.
        let size = [112, 48, 48];
        let grid = Grid {
            size,
            periodic: [false, true, true],
        };
        let flags: Vec<u8> = (0..grid.cells())
            .map(|cell| match grid.coords(cell)[0] {
                0 => make(CellType::Inlet, 0),
                x if x == size[0] - 1 => make(CellType::Outlet, 0),
                _ => 0,
            })
            .collect();
        let u = 0.1f32;
        let mut v = Fields::new(size);
        v.ux.iter_mut().for_each(|x| *x = u);
        // ν = 0.05, Sc = 1: D = 0.05, a plume σ = √(2Dx/U) = 4.5 cells wide
        // 20 cells downstream.
        let params = Params::new(0.65, Collision::Bgk);
        let d = params.viscosity();
        let at = [16usize, 24, 24];
        let rate = 1.0f32;
        let source = grid.index(at[0], at[1], at[2]) as u32;
        let receptors: Vec<Receptor> = [12usize, 20, 28, 40, 56]
            .iter()
            .map(|&dx| Receptor {
                name: format!("x+{dx}"),
                position: [(at[0] + dx) as f64, at[1] as f64, at[2] as f64],
                cell: grid.index(at[0] + dx, at[1], at[2]) as u32,
            })
            .collect();
        let setup = Setup {
            fields: 1,
            sources: vec![Source {
                field: 0,
                cells: vec![source],
                release: Release::Rate(rate),
                start: 0,
                stop: None,
            }],
            receptors: receptors.clone(),
            schmidt: 1.0,
            schmidt_turbulent: 0.7,
            inflow: 0.0,
            interval,
        };
        let mut dispersion = Dispersion::new(&grid, &flags, setup);
        for step in 0..1600 {
            dispersion.step(&grid, &flags, &params, &v, step);
        }
        assert_eq!(dispersion.plan(), plan, "every {interval}");
        let readings = dispersion.readings();
        for (r, reading) in receptors.iter().zip(&readings) {
            let x = r.position[0] - at[0] as f64;
            let exact = rate as f64 / (4.0 * std::f64::consts::PI * d as f64 * x);
            let got = reading[0].concentration as f64;
            eprintln!("every {interval}: {}: {got:.5} vs {exact:.5}", r.name);
            assert!(
                (got / exact - 1.0).abs() < 0.05,
                "every {interval}: {}: {got} vs {exact}",
                r.name
            );
        }
        // Nothing upstream of an inlet, nothing negative anywhere.
        let c = &dispersion.fields()[0];
        assert!(c.iter().all(|&v| v >= 0.0));
        assert!((0..grid.cells())
            .filter(|&k| grid.coords(k)[0] == 0)
            .all(|k| c[k] == 0.0));
    }

    #[test]
    fn transport_steps_cover_every_flow_step_once_and_start_on_both_parities() {
        for interval in 1..=9u32 {
            let setup = Setup::bare(interval);
            let (mut next, mut starts) = (0u64, Vec::new());
            for step in 0..200 {
                assert_eq!(
                    setup.transport_starting_at(step),
                    step == next,
                    "every {interval}: step {step}"
                );
                if step == next {
                    starts.push(step);
                }
                if let Some((first, span)) = setup.transport_ending_at(step) {
                    assert_eq!(first, next, "every {interval}: step {step}");
                    assert_eq!(first + span as u64, step + 1);
                    assert!(span.abs_diff(interval) <= 1);
                    next = step + 1;
                }
            }
            // The velocity is taken at even and odd steps alike, as often as
            // the interval says on average.
            if interval > 1 {
                let odd = starts.iter().filter(|&&s| s % 2 == 1).count();
                assert!(odd.abs_diff(starts.len() - odd) <= 1, "every {interval}");
            }
            let mean = 200.0 / starts.len() as f64;
            assert!(
                (mean / interval as f64 - 1.0).abs() < 0.1,
                "every {interval}"
            );
        }
    }

    #[test]
    fn a_rate_releases_its_amount_over_the_steps_it_is_on_whatever_the_interval() {
        let source = Source {
            field: 0,
            cells: vec![1, 2, 3, 4],
            release: Release::Rate(6.0),
            start: 5,
            stop: Some(11),
        };
        for interval in [1u32, 3, 4, 7] {
            let setup = Setup::bare(interval);
            let mut total = 0.0f64;
            for step in 0..40 {
                let Some((first, span)) = setup.transport_ending_at(step) else {
                    continue;
                };
                for substeps in [1u32, 3] {
                    let Some((add, v)) = Setup::release_value(&source, first, span, substeps)
                    else {
                        continue;
                    };
                    assert!(add);
                    if substeps == 1 {
                        total += v as f64 * 4.0;
                    }
                }
            }
            // Six steps (5 to 10) at 6 per step, spread over four cells.
            assert!((total - 36.0).abs() < 1e-4, "every {interval}: {total}");
        }
        let held = Source {
            release: Release::Concentration(2.0),
            ..source
        };
        assert_eq!(Setup::release_value(&held, 0, 4, 2), None);
        assert_eq!(Setup::release_value(&held, 8, 4, 2), Some((false, 2.0)));
        assert_eq!(Setup::release_value(&held, 12, 4, 2), None);
    }

    #[test]
    fn a_state_comes_back_exactly() {
        let grid = Grid {
            size: [6, 5, 4],
            periodic: [true; 3],
        };
        let flags = vec![0u8; grid.cells()];
        let setup = Setup {
            fields: 2,
            sources: vec![Source {
                field: 1,
                cells: vec![7, 8],
                release: Release::Concentration(2.0),
                start: 1,
                stop: Some(3),
            }],
            receptors: vec![Receptor {
                name: "r".into(),
                position: [2.0, 1.0, 0.0],
                cell: 8,
            }],
            schmidt: 1.0,
            schmidt_turbulent: 0.7,
            inflow: 0.0,
            interval: 1,
        };
        let params = Params::new(0.8, Collision::Bgk);
        let mut v = Fields::new(grid.size);
        v.uy.iter_mut().for_each(|x| *x = 0.05);
        let mut a = Dispersion::new(&grid, &flags, setup);
        for step in 0..5 {
            a.step(&grid, &flags, &params, &v, step);
        }
        let mut b = a.clone();
        b.reset(&flags);
        b.set_state(&a.state()).unwrap();
        assert_eq!(a.readings(), b.readings());
        assert_eq!(a.fields(), b.fields());
        assert!(a.readings()[0][1].dose > 0.0 && a.readings()[0][0].dose == 0.0);
        assert!(b.set_state(&[0.0; 3]).is_err());
    }
}
