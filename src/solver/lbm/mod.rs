//! The D3Q19 lattice Boltzmann method: the lattice ([`lattice`]), the CPU
//! reference solver ([`cpu`]), the CUDA solver ([`cuda`]) and one domain over
//! several devices ([`slabs`]).
//!
//! Both solvers store one population array in structure-of-arrays order
//! (`f[i * cells + cell]`, `cell = x + nx * (y + ny * z)`) and stream in place with
//! the **AA pattern** (Bailey et al. 2009, the original work's "alternating relax"):
//!
//! * even steps ("A") read the 19 populations of a cell from its own slots,
//!   collide, and write each outgoing population `i` into the cell's own slot
//!   `opposite(i)`; nothing leaves the cell;
//! * odd steps ("B") read incoming population `j` from slot `opposite(j)` of the
//!   neighbour `x - e_j`, collide, and write outgoing `i` into slot `i` of the
//!   neighbour `x + e_i`.
//!
//! Every slot is read and written by exactly one cell within a step, so the update
//! is race-free in place and needs half the memory of a two-array scheme — the
//! reason for this choice over propagate+relax. We chose AA over esoteric pull
//! (which also runs in one array) because its even step is purely local, so all
//! boundary handling lives in one place (the odd step's neighbour reads and writes)
//! and the even-step kernel is a straight streaming loop on the GPU.
//!
//! Boundary rules of the odd step (see [`cpu`] and `kernels/lbm/d3q19.cu`): a read from
//! or write to a non-running neighbour becomes half-way bounce-back within the cell
//! (plus the wall-velocity term for moving walls and inlets), or specular reflection through
//! the neighbouring cell along the wall (free-slip). Slot `k` of cell `s` is owned
//! within a step by cell `s - e_k`; these rules only use slots whose owner is a
//! non-running cell, so they stay race-free. A population that would arrive from
//! beyond a non-periodic face (at outlet cells) is the cell's own
//! outgoing one of the previous step (zero gradient), kept in the slot owned by
//! the missing neighbour.

pub mod boundary;
pub mod cpu;
pub mod cuda;
pub mod lattice;
pub mod links;
pub mod slabs;

use crate::solver::{flags, Grid, Initial, Params};

/// Shifted initial populations in storage order: the equilibrium of the initial
/// fields in running cells, zero elsewhere.
pub fn initial_populations(
    grid: &Grid,
    cell_flags: &[u8],
    _params: &Params,
    initial: &Initial,
) -> Vec<f32> {
    let n = grid.cells();
    let mut f = vec![0.0f32; lattice::Q * n];
    for c in 0..n {
        let fl = cell_flags[c];
        if !flags::runs(fl) {
            continue;
        }
        let (rho, u) = match initial {
            Initial::Fields(fields) => (fields.rho[c], fields.velocity(c)),
            _ => (
                1.0,
                initial
                    .velocity_at(grid, grid.coords(c))
                    .expect("a uniform kind"),
            ),
        };
        let feq = lattice::equilibrium_shifted(rho, u);
        for i in 0..lattice::Q {
            f[i * n + c] = feq[i];
        }
    }
    f
}
