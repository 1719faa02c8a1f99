//! Conversions between physical and lattice units, in one place.
//!
//! Lattice units: cell size dx = 1, time step dt = 1. A scenario fixes the
//! characteristic length in cells, the lattice reference speed (or the Mach
//! number) and the Reynolds number; the viscosity and τ follow. Physical units are
//! optional: given the cell size, the reference speed and the viscosity in SI
//! units, the Reynolds number and the time step follow from them instead.

use crate::solver::lbm::lattice::CS2;

/// The physical side of a scenario, when it has one.
#[derive(Clone, Debug, PartialEq)]
pub struct PhysicalUnits {
    /// Edge of one cell, metres.
    pub cell_size_m: f64,
    /// Reference speed (inflow or lid), metres per second.
    pub velocity_m_s: f64,
    /// Kinematic viscosity, square metres per second.
    pub viscosity_m2_s: f64,
    /// Density, kilograms per cubic metre (for pressures in pascal).
    pub density_kg_m3: f64,
}

/// Everything derived from the scenario's numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct Units {
    pub length_cells: f64,
    pub velocity_lattice: f64,
    pub reynolds: f64,
    pub viscosity_lattice: f64,
    pub tau: f64,
    pub physical: Option<PhysicalUnits>,
}

impl Units {
    /// From a Reynolds number, length in cells and lattice reference speed.
    pub fn from_reynolds(reynolds: f64, length_cells: f64, velocity_lattice: f64) -> Units {
        let viscosity_lattice = velocity_lattice * length_cells / reynolds;
        Units {
            length_cells,
            velocity_lattice,
            reynolds,
            viscosity_lattice,
            tau: 3.0 * viscosity_lattice + 0.5,
            physical: None,
        }
    }

    /// From physical units: the Reynolds number is U L / ν with L = length_cells × dx.
    pub fn from_physical(
        physical: PhysicalUnits,
        length_cells: f64,
        velocity_lattice: f64,
    ) -> Units {
        let length_m = length_cells * physical.cell_size_m;
        let reynolds = physical.velocity_m_s * length_m / physical.viscosity_m2_s;
        let mut units = Units::from_reynolds(reynolds, length_cells, velocity_lattice);
        units.physical = Some(physical);
        units
    }

    /// Lattice velocity for a Mach number: u = Ma · c_s.
    pub fn velocity_for_mach(mach: f64) -> f64 {
        mach * (CS2 as f64).sqrt()
    }

    pub fn mach(&self) -> f64 {
        self.velocity_lattice / (CS2 as f64).sqrt()
    }

    /// Seconds per time step, when physical units are known.
    pub fn time_step_s(&self) -> Option<f64> {
        self.physical
            .as_ref()
            .map(|p| p.cell_size_m * self.velocity_lattice / p.velocity_m_s)
    }

    /// Metres per second per lattice velocity unit.
    pub fn velocity_scale(&self) -> Option<f64> {
        self.physical
            .as_ref()
            .map(|p| p.velocity_m_s / self.velocity_lattice)
    }

    /// Pascal per lattice pressure unit (ρ_phys (dx/dt)²).
    pub fn pressure_scale(&self) -> Option<f64> {
        let v = self.velocity_scale()?;
        self.physical.as_ref().map(|p| p.density_kg_m3 * v * v)
    }

    /// Time steps for the reference flow to cross one characteristic length.
    pub fn steps_per_flow_through(&self) -> f64 {
        self.length_cells / self.velocity_lattice
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tau_from_reynolds_matches_the_original_cylinder_run() {
        // Original: D = 12.8 cells, u = 0.0209, nu = 0.00083752 -> Re ~ 320.
        let u = Units::from_reynolds(0.0209 * 12.8 / 0.00083752, 12.8, 0.0209);
        assert!((u.viscosity_lattice - 0.00083752).abs() < 1e-12);
        assert!((u.tau - (3.0 * 0.00083752 + 0.5)).abs() < 1e-12);
    }

    #[test]
    fn physical_units_give_the_same_reynolds_number_and_a_consistent_time_step() {
        let p = PhysicalUnits {
            cell_size_m: 0.001,
            velocity_m_s: 0.5,
            viscosity_m2_s: 1e-6,
            density_kg_m3: 1000.0,
        };
        let u = Units::from_physical(p, 40.0, 0.05);
        assert!((u.reynolds - 0.5 * 0.04 / 1e-6).abs() < 1e-6);
        let dt = u.time_step_s().unwrap();
        // nu_lattice = nu dt / dx^2
        assert!((u.viscosity_lattice - 1e-6 * dt / 1e-6).abs() < 1e-12);
    }
}
