//! The CPU reference solver: D3Q19 in plain Rust, parallel over grid rows with
//! rayon.
//!
//! It is the accuracy reference for the CUDA kernels (same layout, same AA
//! streaming, same boundary rules, same arithmetic order), the solver CI tests
//! run, and the fallback on machines without a CUDA GPU. See the module docs of
//! [`super`] for the streaming scheme.

use std::ops::Range;

use rayon::prelude::*;

use super::boundary::{edge_cell, odd_rules, specular_partner, OddLink, MIRROR};
use super::lattice::{self, opposite, E, LANES, Q, W};
use super::links::{self, check as check_links, WallLinks};
use super::slabs::{Part, SlabLattice, Transfer};
use crate::solver::flags::{self, CellType, NEAR, TYPE_MASK};
use crate::solver::{
    average::HostAverages, check_params, Averages, ChangeSums, Fields, Grid, Initial, Params,
    Schedule, Solver, SolverError, Stats,
};

/// Whether this processor runs AVX2 (checked once; the standard library
/// caches the answer).
fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && !crate::system::portable_simd()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[inline(always)]
fn neg(e: [i32; 3]) -> [i32; 3] {
    [-e[0], -e[1], -e[2]]
}

/// The cell at `x + e` of the odd step's row whose neighbouring rows start
/// at `row_start` (indexed by e_z + 1, e_y + 1), wrapping along x.
#[inline(always)]
fn row_cell(row_start: &[[usize; 3]; 3], nx: usize, x: usize, e: [i32; 3]) -> usize {
    let xx = x as isize + e[0] as isize;
    let xx = if xx < 0 {
        xx + nx as isize
    } else if xx >= nx as isize {
        xx - nx as isize
    } else {
        xx
    };
    row_start[(e[2] + 1) as usize][(e[1] + 1) as usize] + xx as usize
}

/// Lane l's neighbour along e in a run of LANES cells at a periodic row's
/// start (`START`: x = 0) and/or end (`END`: x + LANES = nx), given as
/// (the rows' starts, nx, x): cell x + l + e_x of its row, but for the
/// lane that crosses the row's end, wrapped. Each is known where the
/// loops unroll, so the other lanes load and store as whole vectors: lane
/// by lane wrapped (`row_cell`), the reads and writes of a 64³ row's two
/// end runs took 28% of the odd step's time, those of its six inner runs
/// 20% (perf; 14% more MLUPS at 64³ since).
#[inline(always)]
fn end_run_cell<const START: bool, const END: bool>(
    (row_start, nx, x): (&[[usize; 3]; 3], usize, usize),
    e: [i32; 3],
    l: usize,
) -> usize {
    let row = row_start[(e[2] + 1) as usize][(e[1] + 1) as usize];
    if START && e[0] < 0 && l == 0 {
        row + nx - 1
    } else if END && e[0] > 0 && l == LANES - 1 {
        row
    } else {
        ((row + x + l) as isize + e[0] as isize) as usize
    }
}

/// The odd step's reads for a run at a row's ends ([`end_run_cell`]):
/// slot opposite(j) of each lane's neighbour against e_j.
///
/// SAFETY: as `odd_row`'s; inlined into it, so that its AVX2 form's loads
/// are AVX2's.
#[inline(always)]
unsafe fn load_end_run<const START: bool, const END: bool>(
    lat: Lattice,
    run: (&[[usize; 3]; 3], usize, usize),
    f: &mut [[f32; LANES]; Q],
) {
    for (j, v) in f.iter_mut().enumerate() {
        for (l, w) in v.iter_mut().enumerate() {
            let cell = end_run_cell::<START, END>(run, neg(E[j]), l);
            *w = unsafe { lat.get(opposite(j), cell) };
        }
    }
}

/// The odd step's writes for a run at a row's ends: slot i of each lane's
/// neighbour along e_i. SAFETY: as [`load_end_run`]'s.
#[inline(always)]
unsafe fn store_end_run<const START: bool, const END: bool>(
    lat: Lattice,
    run: (&[[usize; 3]; 3], usize, usize),
    f: &[[f32; LANES]; Q],
) {
    for (i, v) in f.iter().enumerate() {
        for (l, w) in v.iter().enumerate() {
            let cell = end_run_cell::<START, END>(run, E[i], l);
            unsafe { lat.set(i, cell, *w) };
        }
    }
}

#[inline(always)]
fn edot(i: usize, u: [f32; 3]) -> f32 {
    E[i][0] as f32 * u[0] + E[i][1] as f32 * u[1] + E[i][2] as f32 * u[2]
}

/// The population array shared between rayon workers.
///
/// SAFETY: the AA pattern gives every slot exactly one reader and one writer per
/// step, and that is the same cell (module docs of `solver`), so concurrent
/// updates of different cells never touch the same element.
#[derive(Clone, Copy)]
struct Lattice {
    ptr: *mut f32,
    cells: usize,
}
unsafe impl Send for Lattice {}
unsafe impl Sync for Lattice {}

impl Lattice {
    #[inline(always)]
    unsafe fn get(self, i: usize, cell: usize) -> f32 {
        *self.ptr.add(i * self.cells + cell)
    }
    #[inline(always)]
    unsafe fn set(self, i: usize, cell: usize, v: f32) {
        *self.ptr.add(i * self.cells + cell) = v;
    }
}

/// Per-step constants of the cell update.
#[derive(Clone, Copy)]
struct Update {
    omega_plus: f32,
    omega_minus: f32,
    force: [f32; 3],
    tau: f32,
    /// A subgrid model or regularized collision ([`lattice::collide_model`],
    /// in lanes [`lattice::collide_model_lanes`]).
    model: Option<lattice::Model>,
}

impl Update {
    fn new(p: &Params) -> Update {
        let (omega_plus, omega_minus) = lattice::relaxation_rates(p.collision, p.tau);
        Update {
            omega_plus,
            omega_minus,
            force: p.force,
            tau: p.tau,
            model: p.model(),
        }
    }

    /// The collision of [`LANES`] bulk fluid cells at once.
    #[inline(always)]
    fn apply_lanes(&self, f: &mut [[f32; LANES]; Q]) {
        match self.model {
            None => lattice::collide_lanes(f, self.omega_plus, self.omega_minus, self.force),
            Some(m) => lattice::collide_model_lanes(f, self.tau, m, self.force),
        }
    }

    /// Turns the incoming populations of a running cell into its outgoing ones.
    #[inline(always)]
    fn apply(&self, flag: u8, f: &mut [f32; Q]) {
        match flag & TYPE_MASK {
            0 => match self.model {
                None => lattice::collide(f, self.omega_plus, self.omega_minus, self.force),
                Some(m) => lattice::collide_model(f, self.tau, m, self.force),
            },
            // Outlet: ρ = 1 and the velocity that arrives.
            _ => {
                let (rho, j) = lattice::moments(f);
                let inv = 1.0 / rho;
                *f = lattice::equilibrium_shifted(1.0, [j[0] * inv, j[1] * inv, j[2] * inv]);
            }
        }
    }
}

/// D3Q19 on the CPU.
pub struct CpuSolver {
    grid: Grid,
    flags: Vec<u8>,
    f: Vec<f32>,
    params: Params,
    initial: Initial,
    t: u64,
    /// Where the even step updates a cell as bulk fluid, in runs of lanes:
    /// bulk fluid, and the NEAR fluid cells whose even update is the bulk
    /// one (`flags::even_step_differs`).
    even_bulk: Vec<bool>,
    /// The running NEAR cells, ascending, with the odd step's rules of each
    /// (`boundary::odd_rules`, as the CUDA solver's `aa_boundary_rules`
    /// takes them).
    near_rules: Vec<(u32, u64)>,
    /// Velocity snapshot (x, y, z planes) of `velocity_change` and its step.
    snapshot: Option<(u64, [Vec<f32>; 3])>,
    /// Layers (z) this solver updates; the others are halos of a slab.
    owned: Range<usize>,
    /// Time averages, while kept.
    averages: Option<HostAverages>,
    /// Links into interpolated walls ([`links`]).
    links: WallLinks,
}

impl CpuSolver {
    /// `flags` are the cell flags (see [`flags`]); the NEAR bits are recomputed.
    pub fn new(
        grid: Grid,
        cell_flags: Vec<u8>,
        params: Params,
        initial: Initial,
    ) -> Result<CpuSolver, SolverError> {
        let owned = 0..grid.size[2];
        Self::slab(grid, cell_flags, params, initial, owned)
    }

    /// As [`CpuSolver::new`], updating only the layers `owned`: one slab of a
    /// [`super::slabs::SlabSolver`] (tests of the multi-GPU exchange).
    pub fn slab(
        grid: Grid,
        mut cell_flags: Vec<u8>,
        params: Params,
        initial: Initial,
        owned: Range<usize>,
    ) -> Result<CpuSolver, SolverError> {
        check_params(&params)?;
        if cell_flags.len() != grid.cells() {
            return Err(SolverError::StateMismatch(format!(
                "{} flags for a grid of {} cells",
                cell_flags.len(),
                grid.cells()
            )));
        }
        if let Initial::Fields(fields) = &initial {
            if fields.size != grid.size {
                return Err(SolverError::StateMismatch(format!(
                    "initial fields of size {:?} for grid {grid}",
                    fields.size
                )));
            }
        }
        flags::mark_near_cells(&grid, &mut cell_flags);
        let mut solver = CpuSolver {
            grid,
            flags: cell_flags,
            f: Vec::new(),
            params,
            initial,
            t: 0,
            snapshot: None,
            owned,
            averages: None,
            links: WallLinks::default(),
            even_bulk: Vec::new(),
            near_rules: Vec::new(),
        };
        solver.even_bulk = solver.even_bulk();
        solver.near_rules = (0..solver.grid.cells())
            .into_par_iter()
            .filter(|&c| solver.flags[c] & NEAR != 0 && flags::runs(solver.flags[c]))
            .map(|c| (c as u32, odd_rules(&solver.grid, &solver.flags, c)))
            .collect();
        solver.initialise();
        Ok(solver)
    }

    /// Makes the links of `links` interpolated walls (before the first step).
    pub fn set_links(&mut self, links: WallLinks) -> Result<(), SolverError> {
        check_links(&links, &self.flags, self.t)?;
        self.links = links;
        self.even_bulk = self.even_bulk();
        self.initialise();
        Ok(())
    }

    fn initialise(&mut self) {
        self.f = super::initial_populations(&self.grid, &self.flags, &self.params, &self.initial);
        links::initial_adjust(&self.links, &mut self.f, self.grid.cells());
        self.t = 0;
    }

    /// [`CpuSolver::even_bulk`] of the flags and links.
    fn even_bulk(&self) -> Vec<bool> {
        (0..self.grid.cells())
            .into_par_iter()
            .map(|c| {
                let f = self.flags[c];
                f == 0
                    || (CellType::of(f) == CellType::Fluid
                        && !flags::even_step_differs(
                            &self.grid,
                            &self.flags,
                            c,
                            self.links.at(c).is_some(),
                        ))
            })
            .collect()
    }

    fn lattice(&mut self) -> Lattice {
        Lattice {
            ptr: self.f.as_mut_ptr(),
            cells: self.grid.cells(),
        }
    }

    /// Partner of a specular (free-slip) reflection: a population leaving cell `p`
    /// along `e` into a free-slip face normal to `axis` lands in the running cell
    /// `p + e` with the normal component removed. Valid only where the face is
    /// flat around the reflection (both `p + e` and `p + e_normal` are free-slip
    /// cells), which keeps every slot used owned by a non-running cell; elsewhere
    /// (edges where faces meet) the caller falls back to bounce-back.
    #[inline]
    fn specular(&self, p: [usize; 3], e: [i32; 3], axis: usize) -> Option<usize> {
        specular_partner(&self.grid, &self.flags, p, e, axis)
    }

    /// Velocity of inlet or moving-wall cell `c` with flag `flag`: its slot's,
    /// times the slot's profile at the cell.
    #[inline]
    fn wall_velocity(&self, flag: u8, c: usize) -> [f32; 3] {
        self.params
            .wall_velocity(flags::tag(flag) as usize, &self.grid, c)
    }

    /// Where a free-slip face meets an inlet or a moving wall, a link that cannot
    /// reflect specularly bounces back off that neighbour along the face instead,
    /// with its velocity: the velocity of the cell at `p + e` without the normal
    /// component, if it is an inlet or a moving wall.
    #[inline]
    fn edge_velocity(&self, p: [usize; 3], e: [i32; 3], axis: usize) -> Option<[f32; 3]> {
        edge_cell(&self.grid, &self.flags, p, e, axis).map(|t| self.wall_velocity(self.flags[t], t))
    }

    /// Incoming populations of running cell `c` in the odd-step layout, with the
    /// boundary rules. `lat` may be read concurrently with other cells' updates
    /// only within the AA ownership rules.
    #[inline]
    unsafe fn read_odd(&self, lat: Lattice, c: usize, p: [usize; 3]) -> [f32; Q] {
        let g = &self.grid;
        let mut f = [0.0f32; Q];
        f[0] = lat.get(0, c);
        for j in 1..Q {
            let o = opposite(j);
            f[j] = match g.neighbour(p[0], p[1], p[2], neg(E[j])) {
                // From beyond a non-periodic face: the cell's own previous outgoing
                // j, kept in this slot, which no other cell owns.
                None => lat.get(j, c),
                Some(s) => {
                    let sf = self.flags[s];
                    match CellType::of(sf) {
                        CellType::Fluid | CellType::Outlet => lat.get(o, s),
                        CellType::Wall => lat.get(j, c),
                        CellType::MovingWall | CellType::Inlet => {
                            lat.get(j, c) + 6.0 * W[j] * edot(j, self.wall_velocity(sf, s))
                        }
                        CellType::FreeSlip => {
                            let axis = flags::tag(sf) as usize;
                            let jr = MIRROR[axis][j];
                            match self.specular(p, neg(E[j]), axis) {
                                Some(s2) if jr != j => lat.get(opposite(jr), s2),
                                _ => match self.edge_velocity(p, neg(E[j]), axis) {
                                    Some(v) => lat.get(j, c) + 6.0 * W[j] * edot(j, v),
                                    None => lat.get(j, c),
                                },
                            }
                        }
                    }
                }
            };
        }
        if let Some(q) = self.links.at(c) {
            links::complete_incoming(q, &mut f);
        }
        f
    }

    /// Writes outgoing populations of running cell `c` in the odd-step layout
    /// (the reference the rules of `odd_by_rules`, which the step uses, are
    /// tested against).
    #[cfg(test)]
    #[inline]
    unsafe fn write_odd(&self, lat: Lattice, c: usize, p: [usize; 3], f: &[f32; Q]) {
        let g = &self.grid;
        let q = self.links.at(c);
        lat.set(0, c, f[0]);
        for i in 1..Q {
            let o = opposite(i);
            if g.neighbour(p[0], p[1], p[2], neg(E[i])).is_none() {
                // Keep a copy for the next step's read "from outside" (see read_odd).
                lat.set(i, c, f[i]);
            }
            match g.neighbour(p[0], p[1], p[2], E[i]) {
                // Leaves the domain.
                None => {}
                Some(m) => {
                    let mf = self.flags[m];
                    match CellType::of(mf) {
                        CellType::Fluid | CellType::Outlet => lat.set(i, m, f[i]),
                        CellType::Wall => {
                            lat.set(o, c, q.map_or(f[i], |q| links::bounced(q[i - 1], f, i)))
                        }
                        CellType::MovingWall | CellType::Inlet => {
                            lat.set(o, c, f[i] - 6.0 * W[i] * edot(i, self.wall_velocity(mf, m)))
                        }
                        CellType::FreeSlip => {
                            let axis = flags::tag(mf) as usize;
                            let ir = MIRROR[axis][i];
                            match self.specular(p, E[i], axis) {
                                Some(t) if ir != i => lat.set(ir, t, f[i]),
                                _ => match self.edge_velocity(p, E[i], axis) {
                                    Some(v) => lat.set(o, c, f[i] - 6.0 * W[i] * edot(i, v)),
                                    None => lat.set(o, c, f[i]),
                                },
                            }
                        }
                    }
                }
            }
        }
    }

    /// Incoming populations of running cell `c` at the current step.
    fn incoming(&self, c: usize) -> [f32; Q] {
        let lat = Lattice {
            ptr: self.f.as_ptr() as *mut f32,
            cells: self.grid.cells(),
        };
        // SAFETY: read-only access; no update runs concurrently (&self).
        unsafe {
            if self.t.is_multiple_of(2) {
                let mut f = [0.0f32; Q];
                for (i, v) in f.iter_mut().enumerate() {
                    *v = lat.get(i, c);
                }
                if let Some(q) = self.links.at(c) {
                    links::complete_incoming(q, &mut f);
                }
                f
            } else {
                self.read_odd(lat, c, self.grid.coords(c))
            }
        }
    }

    /// Runs the current step on `layers` (time does not advance).
    fn update_layers(&mut self, layers: Range<usize>) {
        if self.t.is_multiple_of(2) {
            self.step_even(layers);
        } else {
            self.step_odd(layers);
        }
    }

    /// Adds the current state to the time averages if a sample is due.
    fn sample_if_due(&mut self) {
        if self
            .averages
            .as_ref()
            .is_some_and(|a| a.schedule.due(self.t))
        {
            self.add_sample_now();
        }
    }

    /// Adds the current state of the owned cells to the time averages.
    fn add_sample_now(&mut self) {
        if let Some(mut averages) = self.averages.take() {
            averages.add(self.owned_cells(), |c| self.shown_fields(c));
            self.averages = Some(averages);
        }
    }

    /// Density and velocity of cell `c` as [`Solver::fields`] gives them:
    /// boundary cells show their prescribed values.
    fn shown_fields(&self, c: usize) -> (f32, [f32; 3]) {
        let fl = self.flags[c];
        match CellType::of(fl) {
            _ if flags::runs(fl) => self.cell_fields(c),
            CellType::MovingWall | CellType::Inlet => (1.0, self.wall_velocity(fl, c)),
            CellType::FreeSlip => self.free_slip_fields(c, flags::tag(fl) as usize),
            _ => (1.0, [0.0; 3]),
        }
    }

    /// Cell indices of the owned layers.
    fn owned_cells(&self) -> Range<usize> {
        let nxy = self.grid.size[0] * self.grid.size[1];
        self.owned.start * nxy..self.owned.end * nxy
    }

    fn step_even(&mut self, layers: Range<usize>) {
        // SAFETY: rows touch disjoint slots in the AA even step.
        unsafe { self.rows(layers, Self::even_row, Self::even_row_avx2) }
    }

    /// `row` (or `row_avx2` where the processor has AVX2) on every row of
    /// `layers`, in parallel.
    ///
    /// # Safety
    /// The rows must touch disjoint slots (as each AA step's rows do).
    unsafe fn rows(
        &mut self,
        layers: Range<usize>,
        row: unsafe fn(&Self, Lattice, &Update, usize),
        row_avx2: unsafe fn(&Self, Lattice, &Update, usize),
    ) {
        let lat = self.lattice();
        let update = Update::new(&self.params);
        let ny = self.grid.size[1];
        let run = if has_avx2() { row_avx2 } else { row };
        let this = &*self;
        (layers.start * ny..layers.end * ny)
            .into_par_iter()
            // SAFETY: the caller's word; AVX2 only where the processor has it.
            .for_each(|r| unsafe { run(this, lat, &update, r) });
    }

    /// [`CpuSolver::even_row`] compiled for AVX2: eight lanes per register.
    /// No FMA: each product is rounded as in the portable path (and the CUDA
    /// kernels), so results stay bit for bit.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn even_row_avx2(&self, lat: Lattice, update: &Update, row: usize) {
        self.even_row(lat, update, row)
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn even_row_avx2(&self, lat: Lattice, update: &Update, row: usize) {
        self.even_row(lat, update, row)
    }

    /// The even step on one row of cells.
    #[inline(always)]
    unsafe fn even_row(&self, lat: Lattice, update: &Update, row: usize) {
        let nx = self.grid.size[0];
        let flags = &self.flags;
        let grid = &self.grid;
        let base = row * nx;
        let mut x = 0;
        while x < nx {
            let c = base + x;
            // SAFETY: AA even step touches only the cells' own slots.
            unsafe {
                if x + LANES <= nx && self.even_bulk[c..c + LANES].iter().all(|&b| b) {
                    let mut f = [[0.0f32; LANES]; Q];
                    for (i, v) in f.iter_mut().enumerate() {
                        for (l, w) in v.iter_mut().enumerate() {
                            *w = lat.get(i, c + l);
                        }
                    }
                    update.apply_lanes(&mut f);
                    for (i, v) in f.iter().enumerate() {
                        for (l, w) in v.iter().enumerate() {
                            lat.set(opposite(i), c + l, *w);
                        }
                    }
                    x += LANES;
                    continue;
                }
                let fl = flags[c];
                if flags::runs(fl) {
                    let mut f = [0.0f32; Q];
                    for (i, v) in f.iter_mut().enumerate() {
                        *v = lat.get(i, c);
                    }
                    let q = if fl & NEAR != 0 {
                        self.links.at(c)
                    } else {
                        None
                    };
                    if let Some(q) = q {
                        links::complete_incoming(q, &mut f);
                    }
                    update.apply(fl, &mut f);
                    match q {
                        None => {
                            for (i, v) in f.iter().enumerate() {
                                lat.set(opposite(i), c, *v);
                            }
                        }
                        Some(q) => {
                            lat.set(0, c, f[0]);
                            for i in 1..Q {
                                lat.set(opposite(i), c, links::bounced(q[i - 1], &f, i));
                            }
                        }
                    }
                    if fl & NEAR != 0 {
                        // Populations arriving from beyond a non-periodic face
                        // are the cell's own outgoing ones (zero gradient).
                        // Slot j then holds only the outgoing opposite(j),
                        // which leaves the domain and is read by nobody.
                        let [px, py, pz] = grid.coords(c);
                        for j in 1..Q {
                            if grid.neighbour(px, py, pz, neg(E[j])).is_none() {
                                lat.set(j, c, f[j]);
                            }
                        }
                    }
                }
            }
            x += 1;
        }
    }

    fn step_odd(&mut self, layers: Range<usize>) {
        // SAFETY: as in the AA odd step (see odd_row).
        unsafe { self.rows(layers, Self::odd_row, Self::odd_row_avx2) }
    }

    /// [`CpuSolver::odd_row`] compiled for AVX2 (no FMA, as `even_row_avx2`).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn odd_row_avx2(&self, lat: Lattice, update: &Update, row: usize) {
        self.odd_row(lat, update, row)
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn odd_row_avx2(&self, lat: Lattice, update: &Update, row: usize) {
        self.odd_row(lat, update, row)
    }

    /// The odd step on one row of cells.
    #[inline(always)]
    unsafe fn odd_row(&self, lat: Lattice, update: &Update, row: usize) {
        let [nx, ny, nz] = self.grid.size;
        let periodic = self.grid.periodic;
        let this = self;
        let y = row % ny;
        let z = row / ny;
        // Start of the rows at (y+dy, z+dz); only NEAR cells can need a row
        // beyond a non-periodic face, and they take the checked path.
        let wrap = |v: isize, n: usize, p: bool| -> usize {
            if v < 0 {
                if p {
                    (v + n as isize) as usize
                } else {
                    0
                }
            } else if v >= n as isize {
                if p {
                    (v - n as isize) as usize
                } else {
                    0
                }
            } else {
                v as usize
            }
        };
        let mut row_start = [[0usize; 3]; 3];
        for (dz, r) in row_start.iter_mut().enumerate() {
            for (dy, s) in r.iter_mut().enumerate() {
                let yy = wrap(y as isize + dy as isize - 1, ny, periodic[1]);
                let zz = wrap(z as isize + dz as isize - 1, nz, periodic[2]);
                *s = nx * (yy + ny * zz);
            }
        }
        let base = row * nx;
        // The row's NEAR cells' rules, in the order the loop meets them.
        let near = &this.near_rules[this.near_rules.partition_point(|r| (r.0 as usize) < base)..];
        let mut next_near = 0;
        // Along a periodic x of a multiple of LANES cells, the runs at the
        // row's two ends too, their neighbours beyond the ends wrapped lane
        // by lane: one at a time, the 64³ box's rows took 8 of their 64
        // cells (the first and the last seven) by the scalar path.
        let wrapped_runs = periodic[0] && nx.is_multiple_of(LANES);
        let mut x = 0;
        while x < nx {
            let c = base + x;
            // SAFETY: AA odd step: cell c reads slot opposite(j) of x - e_j and
            // writes slot i of x + e_i; those slots belong to c alone.
            unsafe {
                let at_end = x == 0 || x + LANES == nx;
                if wrapped_runs && at_end && this.flags[c..c + LANES].iter().all(|&f| f == 0) {
                    let mut f = [[0.0f32; LANES]; Q];
                    let run = (&row_start, nx, x);
                    match (x == 0, x + LANES == nx) {
                        (true, false) => load_end_run::<true, false>(lat, run, &mut f),
                        (false, true) => load_end_run::<false, true>(lat, run, &mut f),
                        _ => load_end_run::<true, true>(lat, run, &mut f),
                    }
                    update.apply_lanes(&mut f);
                    match (x == 0, x + LANES == nx) {
                        (true, false) => store_end_run::<true, false>(lat, run, &f),
                        (false, true) => store_end_run::<false, true>(lat, run, &f),
                        _ => store_end_run::<true, true>(lat, run, &f),
                    }
                    x += LANES;
                    continue;
                }
                // Interior run of bulk fluid: no wrap along x, all neighbours run.
                if x >= 1 && x + LANES < nx && this.flags[c..c + LANES].iter().all(|&f| f == 0) {
                    let at = |e: [i32; 3]| -> usize {
                        row_start[(e[2] + 1) as usize][(e[1] + 1) as usize]
                            + (x as isize + e[0] as isize) as usize
                    };
                    let mut f = [[0.0f32; LANES]; Q];
                    for (j, v) in f.iter_mut().enumerate() {
                        let src = at(neg(E[j]));
                        for (l, w) in v.iter_mut().enumerate() {
                            *w = lat.get(opposite(j), src + l);
                        }
                    }
                    update.apply_lanes(&mut f);
                    for (i, v) in f.iter().enumerate() {
                        let dst = at(E[i]);
                        for (l, w) in v.iter().enumerate() {
                            lat.set(i, dst + l, *w);
                        }
                    }
                    x += LANES;
                    continue;
                }
                let fl = this.flags[c];
                if !flags::runs(fl) {
                    x += 1;
                    continue;
                }
                if fl & NEAR == 0 {
                    let at = |e: [i32; 3]| row_cell(&row_start, nx, x, e);
                    let mut f = [0.0f32; Q];
                    for (j, v) in f.iter_mut().enumerate() {
                        *v = lat.get(opposite(j), at(neg(E[j])));
                    }
                    update.apply(fl, &mut f);
                    for (i, v) in f.iter().enumerate() {
                        lat.set(i, at(E[i]), *v);
                    }
                } else {
                    while near[next_near].0 as usize != c {
                        next_near += 1;
                    }
                    let rules = near[next_near].1;
                    this.odd_by_rules(lat, update, c, [x, y, z], rules, &row_start);
                }
            }
            x += 1;
        }
    }

    /// The odd step of running NEAR cell `c` at `p` by its `rules`
    /// (`boundary::odd_rules`): what `read_odd`, the collision and
    /// `write_odd` do, bit for bit, with each link's rule decided once
    /// instead of from its neighbour's flags every step. `row_start` as in
    /// `odd_row`.
    ///
    /// SAFETY: as `odd_row`'s: the slots it touches belong to `c` alone.
    #[inline(always)]
    unsafe fn odd_by_rules(
        &self,
        lat: Lattice,
        update: &Update,
        c: usize,
        p: [usize; 3],
        rules: u64,
        row_start: &[[usize; 3]; 3],
    ) {
        let nx = self.grid.size[0];
        let kind = |d: usize| (rules >> (3 * d)) & 7;
        // The cell at p + e, wrapped as the row starts are: only links that
        // stay inside the domain use it.
        let at = |e: [i32; 3]| row_cell(row_start, nx, p[0], e);
        let axis_at = |d: usize| flags::tag(self.flags[at(E[d])]) as usize;
        let beside = |d: usize, axis: usize| {
            let mut e = E[d];
            e[axis] = 0;
            at(e)
        };
        let term = |i: usize, m: usize| 6.0 * W[i] * edot(i, self.wall_velocity(self.flags[m], m));
        const STREAM: u64 = OddLink::Stream as u64;
        const BOUNCE: u64 = OddLink::Bounce as u64;
        const MOVING: u64 = OddLink::Moving as u64;
        const SPECULAR: u64 = OddLink::Specular as u64;
        const EDGE: u64 = OddLink::Edge as u64;
        const FACE: u64 = OddLink::Face as u64;
        // SAFETY (every access below): the caller's.
        unsafe {
            let mut f = [0.0f32; Q];
            f[0] = lat.get(0, c);
            for (j, v) in f.iter_mut().enumerate().skip(1) {
                let d = opposite(j);
                *v = match kind(d) {
                    STREAM => lat.get(d, at(E[d])),
                    SPECULAR => {
                        let axis = axis_at(d);
                        lat.get(MIRROR[axis][d], beside(d, axis))
                    }
                    MOVING => lat.get(j, c) + term(j, at(E[d])),
                    EDGE => lat.get(j, c) + term(j, beside(d, axis_at(d))),
                    _ => lat.get(j, c),
                };
            }
            let q = self.links.at(c);
            if let Some(q) = q {
                links::complete_incoming(q, &mut f);
            }
            update.apply(self.flags[c], &mut f);
            lat.set(0, c, f[0]);
            for i in 1..Q {
                let o = opposite(i);
                if kind(o) == FACE {
                    // Keep a copy for the next step's read "from outside".
                    lat.set(i, c, f[i]);
                }
                match kind(i) {
                    STREAM => lat.set(i, at(E[i]), f[i]),
                    SPECULAR => {
                        let axis = axis_at(i);
                        lat.set(MIRROR[axis][i], beside(i, axis), f[i]);
                    }
                    MOVING => lat.set(o, c, f[i] - term(i, at(E[i]))),
                    EDGE => lat.set(o, c, f[i] - term(i, beside(i, axis_at(i)))),
                    BOUNCE => lat.set(o, c, q.map_or(f[i], |q| links::bounced(q[i - 1], &f, i))),
                    _ => {}
                }
            }
        }
    }

    /// A free-slip face cell reports the fluid next to it, without the normal
    /// velocity: the slip the face allows (keep in sync with the fields kernel).
    fn free_slip_fields(&self, c: usize, axis: usize) -> (f32, [f32; 3]) {
        let p = self.grid.coords(c);
        let mut e = [0; 3];
        e[axis] = if p[axis] == 0 { 1 } else { -1 };
        match self.grid.neighbour(p[0], p[1], p[2], e) {
            Some(m) if flags::runs(self.flags[m]) => {
                let (rho, mut u) = self.cell_fields(m);
                u[axis] = 0.0;
                (rho, u)
            }
            _ => (1.0, [0.0; 3]),
        }
    }

    /// Density and velocity a running cell reports.
    fn cell_fields(&self, c: usize) -> (f32, [f32; 3]) {
        let fl = self.flags[c];
        match CellType::of(fl) {
            CellType::Outlet => {
                let (rho, j) = lattice::moments(&self.incoming(c));
                (1.0, [j[0] / rho, j[1] / rho, j[2] / rho])
            }
            _ => {
                let (rho, j) = lattice::moments(&self.incoming(c));
                (rho, lattice::velocity(rho, j, self.params.force))
            }
        }
    }
}

impl Solver for CpuSolver {
    fn describe(&self) -> String {
        format!(
            "CPU reference solver ({} threads)",
            rayon::current_num_threads()
        )
    }

    fn grid(&self) -> &Grid {
        &self.grid
    }

    fn flags(&self) -> &[u8] {
        &self.flags
    }

    fn params(&self) -> &Params {
        &self.params
    }

    fn set_params(&mut self, params: Params) -> Result<(), SolverError> {
        check_params(&params)?;
        self.params = params;
        Ok(())
    }

    fn step(&mut self, n: u64) -> Result<(), SolverError> {
        for _ in 0..n {
            self.update_layers(self.owned.clone());
            self.t += 1;
            self.sample_if_due();
        }
        Ok(())
    }

    fn start_averages(&mut self, schedule: Schedule) -> Result<(), SolverError> {
        let schedule = schedule.from_now(self.t);
        self.averages = None;
        self.averages = Some(
            HostAverages::new(schedule, self.grid.cells()).map_err(SolverError::InvalidParams)?,
        );
        self.sample_if_due();
        Ok(())
    }

    fn stop_averages(&mut self) {
        self.averages = None;
    }

    fn average_progress(&self) -> Option<(u64, u64)> {
        self.averages
            .as_ref()
            .map(|a| (a.schedule.from_step, a.samples))
    }

    fn averages(&mut self) -> Result<Option<Averages>, SolverError> {
        Ok(self.averages.as_ref().map(|a| a.averages(self.grid.size)))
    }

    fn time_step(&self) -> u64 {
        self.t
    }

    fn reset(&mut self) -> Result<(), SolverError> {
        self.initialise();
        self.averages = None;
        Ok(())
    }

    fn fields(&mut self) -> Result<Fields, SolverError> {
        let mut out = Fields::default();
        self.fields_into(&mut out)?;
        Ok(out)
    }

    fn fields_into(&mut self, out: &mut Fields) -> Result<(), SolverError> {
        let n = self.grid.cells();
        out.size = self.grid.size;
        for v in [&mut out.rho, &mut out.ux, &mut out.uy, &mut out.uz] {
            v.resize(n, 0.0);
        }
        let this = &*self;
        out.rho
            .par_iter_mut()
            .zip(out.ux.par_iter_mut())
            .zip(out.uy.par_iter_mut())
            .zip(out.uz.par_iter_mut())
            .enumerate()
            .for_each(|(c, (((rho, ux), uy), uz))| {
                let (r, u) = this.shown_fields(c);
                *rho = r;
                *ux = u[0];
                *uy = u[1];
                *uz = u[2];
            });
        Ok(())
    }

    fn stats(&mut self) -> Result<Stats, SolverError> {
        #[derive(Clone)]
        struct Acc {
            mass: f64,
            momentum: [f64; 3],
            count: u64,
            max_speed: f32,
            max_cell: usize,
            bad: Option<usize>,
        }
        let empty = Acc {
            mass: 0.0,
            momentum: [0.0; 3],
            count: 0,
            max_speed: 0.0,
            max_cell: 0,
            bad: None,
        };
        let this = &*self;
        let acc = self
            .owned_cells()
            .into_par_iter()
            .fold(
                || empty.clone(),
                |mut a, c| {
                    if !flags::runs(this.flags[c]) {
                        return a;
                    }
                    let (rho, u) = this.cell_fields(c);
                    let speed = (u[0] * u[0] + u[1] * u[1] + u[2] * u[2]).sqrt();
                    if !(rho.is_finite() && speed.is_finite()) {
                        a.bad = Some(a.bad.map_or(c, |b| b.min(c)));
                        return a;
                    }
                    a.mass += rho as f64;
                    for d in 0..3 {
                        a.momentum[d] += u[d] as f64;
                    }
                    a.count += 1;
                    if speed > a.max_speed {
                        a.max_speed = speed;
                        a.max_cell = c;
                    }
                    a
                },
            )
            .reduce(
                || empty.clone(),
                |mut a, b| {
                    a.mass += b.mass;
                    for d in 0..3 {
                        a.momentum[d] += b.momentum[d];
                    }
                    a.count += b.count;
                    if b.max_speed > a.max_speed {
                        a.max_speed = b.max_speed;
                        a.max_cell = b.max_cell;
                    }
                    a.bad = match (a.bad, b.bad) {
                        (Some(x), Some(y)) => Some(x.min(y)),
                        (x, y) => x.or(y),
                    };
                    a
                },
            );
        let count = acc.count.max(1) as f64;
        Ok(Stats {
            step: self.t,
            mass: acc.mass,
            cells: acc.count,
            mean_velocity: acc.momentum.map(|m| m / count),
            max_speed: acc.max_speed,
            max_speed_cell: self.grid.coords(acc.max_cell),
            non_finite_cell: acc.bad.map(|c| self.grid.coords(c)),
        })
    }

    fn obstacle_forces(&mut self) -> Result<Vec<[f64; 3]>, SolverError> {
        let update = Update::new(&self.params);
        let mut total = vec![[0.0f64; 3]; flags::MAX_TAG as usize + 1];
        for c in self.owned_cells() {
            let fl = self.flags[c];
            if fl & NEAR == 0 || !flags::runs(fl) {
                continue;
            }
            let p = self.grid.coords(c);
            let mut incoming: Option<[f32; Q]> = None;
            let mut collided: Option<[f32; Q]> = None;
            for i in 1..Q {
                let Some(m) = self.grid.neighbour(p[0], p[1], p[2], E[i]) else {
                    continue;
                };
                let mf = self.flags[m];
                if CellType::of(mf) != CellType::Wall || flags::tag(mf) == 0 {
                    continue;
                }
                let f = *incoming.get_or_insert_with(|| self.incoming(c));
                let q = self.links.at(c).map_or(0.0, |q| q[i - 1]);
                // Momentum given to the wall on link i: f*_i + f_opp(i) (unshifted
                // values). Half-way: the bounced-back f_opp(i) is f*_i of the step
                // before. Interpolated: f*_i is this step's, from colliding the
                // incoming populations (the same at steady state).
                let momentum = if q == 0.0 {
                    2.0 * (f[opposite(i)] as f64 + W[i] as f64)
                } else {
                    let post = *collided.get_or_insert_with(|| {
                        let mut post = f;
                        update.apply(fl, &mut post);
                        post
                    });
                    f[opposite(i)] as f64 + post[i] as f64 + 2.0 * W[i] as f64
                };
                let acc = &mut total[flags::tag(mf) as usize];
                for d in 0..3 {
                    acc[d] += momentum * E[i][d] as f64;
                }
            }
        }
        Ok(total)
    }

    fn populations(&mut self) -> Result<Vec<f32>, SolverError> {
        Ok(self.f.clone())
    }

    fn visit_populations(&mut self, visit: &mut dyn FnMut(&[f32])) -> Result<(), SolverError> {
        visit(&self.f);
        Ok(())
    }

    fn set_populations(&mut self, step: u64, populations: &[f32]) -> Result<(), SolverError> {
        if populations.len() != self.f.len() {
            return Err(SolverError::StateMismatch(format!(
                "{} populations for a lattice of {}",
                populations.len(),
                self.f.len()
            )));
        }
        self.f.copy_from_slice(populations);
        self.t = step;
        // Averages of another history do not continue on this one.
        self.averages = None;
        Ok(())
    }

    fn memory_bytes(&self) -> u64 {
        let averages = self.averages.as_ref().map_or(0, |_| {
            2 * crate::solver::average::QUANTITIES * 8 * self.grid.cells()
        });
        let boundary = self.even_bulk.len() + self.near_rules.len() * size_of::<(u32, u64)>();
        (self.f.len() * 4 + self.flags.len() + boundary + averages) as u64
    }

    fn velocity_change(&mut self) -> Result<Option<f64>, SolverError> {
        Ok(self.change_sums()?.map(|c| c.ratio()))
    }
}

impl SlabLattice for CpuSolver {
    type Link = ();

    fn link(
        _slabs: &mut [Self],
        _fill: &[Transfer],
        _back: &[Transfer],
    ) -> Result<(), SolverError> {
        Ok(())
    }

    fn update(&mut self, _part: Part, layers: &[Range<usize>]) -> Result<(), SolverError> {
        for l in layers {
            self.update_layers(l.clone());
        }
        Ok(())
    }

    fn exchange(
        _link: &mut (),
        slabs: &mut [Self],
        transfers: &[Transfer],
        _after_even: bool,
    ) -> Result<(), SolverError> {
        let mut planes = Vec::new();
        for t in transfers {
            let nxy = slabs[t.from].grid.size[0] * slabs[t.from].grid.size[1];
            planes.resize(5 * nxy, 0.0);
            slabs[t.from].read_planes(t.from_layer, &t.slots, &mut planes)?;
            slabs[t.to].write_planes(t.to_layer, &t.slots, &planes, t.mask.as_deref())?;
        }
        Ok(())
    }

    fn read_planes(
        &mut self,
        layer: usize,
        slots: &[usize; 5],
        out: &mut [f32],
    ) -> Result<(), SolverError> {
        let nxy = self.grid.size[0] * self.grid.size[1];
        let n = self.grid.cells();
        for (&k, out) in slots.iter().zip(out.chunks_exact_mut(nxy)) {
            let at = k * n + layer * nxy;
            out.copy_from_slice(&self.f[at..at + nxy]);
        }
        Ok(())
    }

    fn write_planes(
        &mut self,
        layer: usize,
        slots: &[usize; 5],
        planes: &[f32],
        mask: Option<&[u32]>,
    ) -> Result<(), SolverError> {
        let nxy = self.grid.size[0] * self.grid.size[1];
        let n = self.grid.cells();
        let at = |p: usize| slots[p / nxy] * n + layer * nxy + p % nxy;
        match mask {
            None => (0..planes.len()).for_each(|p| self.f[at(p)] = planes[p]),
            Some(mask) => mask
                .iter()
                .for_each(|&p| self.f[at(p as usize)] = planes[p as usize]),
        }
        Ok(())
    }

    fn advance(&mut self) {
        self.t += 1;
    }

    fn settle(_slabs: &mut [Self]) -> Result<(), SolverError> {
        Ok(())
    }

    /// The sums of [`crate::solver::change_sums`] (same chunks, same order,
    /// same result), with the snapshot updated in place: a steadiness check
    /// holds one copy of the velocity, not two.
    fn change_sums(&mut self) -> Result<Option<ChangeSums>, SolverError> {
        const CHUNK: usize = 1 << 16;
        let cells = self.owned_cells();
        let (t, n) = (self.t, self.grid.cells());
        let mut snapshot = self.snapshot.take();
        let compare = matches!(&snapshot, Some((before, _)) if *before < t);
        let steps = snapshot
            .as_ref()
            .map_or(0, |(before, _)| t.saturating_sub(*before));
        let (_, [sx, sy, sz]) =
            snapshot.get_or_insert_with(|| (t, [vec![0.0; n], vec![0.0; n], vec![0.0; n]]));
        let this = &*self;
        let start = cells.start;
        let (diff, norm) = sx[cells.clone()]
            .par_chunks_mut(CHUNK)
            .zip(sy[cells.clone()].par_chunks_mut(CHUNK))
            .zip(sz[cells.clone()].par_chunks_mut(CHUNK))
            .enumerate()
            .map(|(k, ((x, y), z))| {
                let (mut diff, mut norm) = (0.0f64, 0.0f64);
                for (j, ((x, y), z)) in x.iter_mut().zip(y).zip(z).enumerate() {
                    let (_, a) = this.shown_fields(start + k * CHUNK + j);
                    let b = [*x, *y, *z];
                    let d: f64 = (0..3).map(|k| (a[k] as f64 - b[k] as f64).powi(2)).sum();
                    let m: f64 = (0..3).map(|k| (a[k] as f64).powi(2)).sum();
                    diff += d.sqrt();
                    norm += m.sqrt();
                    [*x, *y, *z] = a;
                }
                (diff, norm)
            })
            .collect::<Vec<_>>()
            .into_iter()
            .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
        if let Some((at, _)) = &mut snapshot {
            *at = t;
        }
        self.snapshot = snapshot;
        Ok(compare.then_some(ChangeSums { diff, norm, steps }))
    }

    fn set_time(&mut self, t: u64) {
        self.t = t;
    }

    fn add_sample(&mut self) -> Result<(), SolverError> {
        self.add_sample_now();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    /// The odd step over every running cell by `read_odd`, the collision
    /// and `write_odd`, each link's rule from its neighbour's flags, reading
    /// `before` (each slot has one reader and one writer, the same cell, so
    /// reading a copy is reading in place).
    fn odd_step_by_flags(s: &CpuSolver, before: &[f32]) -> Vec<f32> {
        let n = s.grid.cells();
        let update = Update::new(&s.params);
        let mut source = before.to_vec();
        let mut after = before.to_vec();
        let from = Lattice {
            ptr: source.as_mut_ptr(),
            cells: n,
        };
        let to = Lattice {
            ptr: after.as_mut_ptr(),
            cells: n,
        };
        for c in 0..n {
            let fl = s.flags[c];
            if flags::runs(fl) {
                let p = s.grid.coords(c);
                // SAFETY: both lattices hold Q * n values.
                unsafe {
                    let mut f = s.read_odd(from, c, p);
                    update.apply(fl, &mut f);
                    s.write_odd(to, c, p, &f);
                }
            }
        }
        after
    }

    /// Distinct small values in every slot, so that a slot read from the
    /// wrong place shows.
    fn distinct_state(n: usize) -> Vec<f32> {
        (0..Q * n)
            .map(|k| {
                let h = (k as u32).wrapping_mul(0x9e37_79b9) >> 8;
                (h as f32 / 16_777_216.0 - 0.5) * 0.01
            })
            .collect()
    }

    #[test]
    fn the_odd_step_in_runs_across_a_periodic_rows_ends_equals_the_odd_step_cell_by_cell() {
        // Rows of one run of LANES cells (at both ends), two and three,
        // and one of a length that is no multiple of LANES (its ends one
        // cell at a time).
        let sizes = [
            [LANES, 3, 4],
            [2 * LANES, 5, 3],
            [3 * LANES, 3, 4],
            [2 * LANES + 3, 4, 3],
        ];
        for size in sizes {
            let grid = Grid {
                size,
                periodic: [true; 3],
            };
            let fluid = vec![flags::make(CellType::Fluid, 0); grid.cells()];
            let params = Params::new(0.6, crate::solver::Collision::Trt);
            let rest = Initial::Uniform([0.0; 3]);
            let mut solver = CpuSolver::new(grid, fluid, params, rest).unwrap();
            let n = grid.cells();
            solver.set_populations(1, &distinct_state(n)).unwrap();
            let before = solver.populations().unwrap();
            let want = odd_step_by_flags(&solver, &before);
            solver.step(1).unwrap();
            let got = solver.populations().unwrap();
            let differ = (0..Q * n)
                .filter(|&k| want[k].to_bits() != got[k].to_bits())
                .count();
            assert_eq!(differ, 0, "{size:?}: {differ} slots differ");
        }
    }

    #[test]
    fn the_odd_step_by_rules_resolved_once_equals_the_odd_step_by_the_flags() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/scenarios");
        let (mut kinds, mut linked) = ([0usize; 6], 0);
        for name in ["cavity", "cube", "cylinder", "urban", "sphere", "ahmed"] {
            let path = dir.join(format!("{name}.toml"));
            let s = Scenario::load(&path, &[]).unwrap();
            let small = crate::validation::scaled_overrides(&s, 0.2, 0.55);
            let s = Scenario::load(&path, &small).unwrap();
            let voxels = s.voxelize();
            let params = s.params(&voxels.slots);
            let mut solver = CpuSolver::new(s.grid(), voxels.flags, params, s.initial()).unwrap();
            linked += voxels.links.cells.len();
            solver.set_links(voxels.links).unwrap();
            let n = solver.grid.cells();
            solver.set_populations(1, &distinct_state(n)).unwrap();
            let before = solver.populations().unwrap();
            let want = odd_step_by_flags(&solver, &before);
            solver.step(1).unwrap();
            let by_rules = solver.populations().unwrap();
            let differ = (0..Q * n)
                .filter(|&k| want[k].to_bits() != by_rules[k].to_bits())
                .count();
            assert_eq!(differ, 0, "{name}: {differ} slots differ");
            for c in 0..n {
                if flags::runs(solver.flags[c]) {
                    let rules = odd_rules(&solver.grid, &solver.flags, c);
                    for d in 1..Q {
                        kinds[((rules >> (3 * d)) & 7) as usize] += 1;
                    }
                }
            }
        }
        // Every kind of link occurs in the shipped scenarios, and
        // interpolated walls.
        assert!(kinds.iter().all(|&k| k > 0), "{kinds:?}");
        assert!(linked > 0);
    }
}
