//! The processes of one run started by `mpirun` (the `mpi` feature).
//!
//! Every rank runs the same command on the same scenario and owns some slabs
//! of the domain ([`crate::solver::lbm::slabs`]). Each call a solver makes here
//! is collective: every rank makes the same calls in the same order, which the
//! run loop guarantees by taking every decision from values all ranks share
//! (the step, reduced statistics, the arguments). Rank 0 alone writes files and
//! prints; the others' standard output and error go to `/dev/null`, except for
//! their own errors, which name the rank and stop the whole job
//! ([`fail`]) so that no rank waits for one that has gone.

use std::sync::OnceLock;

/// The other processes of this run, as the solver exchanges with them.
pub trait Peers: Send + Sync {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// Every rank's `local`, concatenated in rank order (lengths may differ).
    fn all_gather_f32(&self, local: &[f32]) -> Vec<f32>;
    /// As [`Peers::all_gather_f32`], for sums and counts that must stay exact.
    fn all_gather_f64(&self, local: &[f64]) -> Vec<f64>;
    /// As [`Peers::all_gather_f32`] on rank 0; the other ranks get nothing
    /// (an empty vector) and hold no copy of the whole.
    fn gather_f32_to_root(&self, local: &[f32]) -> Vec<f32>;
    /// Whether `flag` is set on any rank.
    fn any(&self, flag: bool) -> bool;
    /// Posts the sends (to rank, tag, data) and receives (from rank, tag,
    /// buffer of the expected length), runs `work` meanwhile, and returns once
    /// every message has landed.
    fn exchange(
        &self,
        sends: &[(usize, i32, &[f32])],
        receives: &mut [(usize, i32, &mut [f32])],
        work: &mut dyn FnMut(),
    );
}

static WORLD: OnceLock<Option<Box<dyn Peers>>> = OnceLock::new();

/// The ranks of this run when `mpirun` started more than one, else `None`.
pub fn world() -> Option<&'static dyn Peers> {
    WORLD.get().and_then(|w| w.as_deref())
}

/// This process's rank (0 without MPI).
pub fn rank() -> usize {
    world().map_or(0, |w| w.rank())
}

/// Whether this process prints and writes the run's files.
pub fn is_root() -> bool {
    rank() == 0
}

/// The number of processes a launcher says it started, from the variables
/// Open MPI, MPICH and PMIx set (1 when started by hand).
pub fn launched_size() -> usize {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .unwrap_or(1)
}

/// This process's rank among those on its machine, from the launcher's
/// variables (Open MPI, MPICH, Slurm), else its rank: GPUs are dealt out by it.
pub fn local_rank() -> usize {
    [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "SLURM_LOCALID",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.parse().ok())
    .unwrap_or_else(rank)
}

/// Joins the other ranks when a launcher started several processes. Without
/// the `mpi` feature that is an error naming the fix: N copies of the same run
/// would each write the same files.
pub fn init() -> Result<(), String> {
    let launched = launched_size();
    let world = if launched > 1 { join(launched)? } else { None };
    if let Some(w) = &world {
        if w.rank() != 0 {
            quiet_stdio();
        }
    }
    let _ = WORLD.set(world);
    Ok(())
}

#[cfg(not(feature = "mpi"))]
fn join(launched: usize) -> Result<Option<Box<dyn Peers>>, String> {
    Err(format!(
        "started as one of {launched} MPI processes, but this flowscope was built without MPI: \
         build it with `cargo build --release --features mpi` (needs Open MPI's libopenmpi-dev \
         and libclang-dev), or run it without mpirun"
    ))
}

#[cfg(feature = "mpi")]
fn join(_launched: usize) -> Result<Option<Box<dyn Peers>>, String> {
    let world = mpi_world::Mpi::init()?;
    Ok((world.size() > 1).then(|| Box::new(world) as Box<dyn Peers>))
}

/// Where a rank other than 0 still reports its own errors: the standard
/// error it was started with.
static ERRORS: OnceLock<i32> = OnceLock::new();

/// Sends standard output and error to `/dev/null`, keeping a copy of the
/// error stream for [`fail`] and for panics.
fn quiet_stdio() {
    // SAFETY: plain descriptor calls on descriptors this process owns.
    unsafe {
        let saved = libc::dup(2);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
        if saved < 0 || null < 0 {
            return;
        }
        libc::dup2(null, 1);
        libc::dup2(null, 2);
        libc::close(null);
        let _ = ERRORS.set(saved);
    }
    std::panic::set_hook(Box::new(|info| {
        report(&format!("panicked: {info}"));
    }));
}

/// Writes `message` where the user sees it, naming the rank when there are several.
pub fn report(message: &str) {
    use std::io::Write;
    let line = match world() {
        Some(w) => format!("rank {} of {}: {message}\n", w.rank(), w.size()),
        None => format!("{message}\n"),
    };
    match ERRORS.get() {
        Some(&fd) => {
            // SAFETY: `fd` is the duplicated standard error, open until exit.
            unsafe {
                libc::write(fd, line.as_ptr().cast(), line.len());
            }
        }
        None => {
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }
}

/// Ends the process with `code`. With MPI: `together` when every rank ends
/// here with it (a finished run, a blow-up, an interrupt: all ranks saw the
/// same reduced numbers), after the others; otherwise it is this process's
/// own failure, which aborts them all so that none waits for it.
pub fn exit(code: i32, together: bool) -> ! {
    #[cfg(feature = "mpi")]
    if world().is_some() {
        mpi_world::finish(code, together);
    }
    let _ = together;
    std::process::exit(code)
}

#[cfg(feature = "mpi")]
mod mpi_world {
    use std::sync::Mutex;

    use mpi::datatype::PartitionMut;
    use mpi::traits::*;

    use super::Peers;

    /// The world communicator; MPI is used from the thread that runs the
    /// command only (`Threading::Funneled`).
    pub struct Mpi {
        world: mpi::topology::SimpleCommunicator,
    }

    /// Kept until [`finish`]: dropping it finalises MPI.
    static UNIVERSE: Mutex<Option<mpi::environment::Universe>> = Mutex::new(None);

    // SAFETY: the communicator is a handle; MPI is initialised for calls from
    // one thread at a time, and the run loop makes every call from its thread.
    unsafe impl Send for Mpi {}
    unsafe impl Sync for Mpi {}

    impl Mpi {
        pub fn init() -> Result<Mpi, String> {
            let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Funneled)
                .ok_or("MPI was already initialised")?;
            let world = universe.world();
            *UNIVERSE.lock().unwrap_or_else(|e| e.into_inner()) = Some(universe);
            Ok(Mpi { world })
        }

        fn counts(&self, len: usize) -> (Vec<i32>, Vec<i32>) {
            let mut counts = vec![0i32; self.world.size() as usize];
            self.world.all_gather_into(&(len as i32), &mut counts[..]);
            let displs = counts
                .iter()
                .scan(0i32, |at, &c| {
                    let d = *at;
                    *at += c;
                    Some(d)
                })
                .collect();
            (counts, displs)
        }
    }

    impl Peers for Mpi {
        fn rank(&self) -> usize {
            self.world.rank() as usize
        }

        fn size(&self) -> usize {
            self.world.size() as usize
        }

        fn all_gather_f32(&self, local: &[f32]) -> Vec<f32> {
            let (counts, displs) = self.counts(local.len());
            let mut out = vec![0.0f32; counts.iter().map(|&c| c as usize).sum()];
            let mut parts = PartitionMut::new(&mut out[..], &counts[..], &displs[..]);
            self.world.all_gather_varcount_into(local, &mut parts);
            out
        }

        fn all_gather_f64(&self, local: &[f64]) -> Vec<f64> {
            let (counts, displs) = self.counts(local.len());
            let mut out = vec![0.0f64; counts.iter().map(|&c| c as usize).sum()];
            let mut parts = PartitionMut::new(&mut out[..], &counts[..], &displs[..]);
            self.world.all_gather_varcount_into(local, &mut parts);
            out
        }

        fn gather_f32_to_root(&self, local: &[f32]) -> Vec<f32> {
            let root = self.world.process_at_rank(0);
            if self.world.rank() != 0 {
                // Rank 0 needs every rank's count first.
                root.gather_into(&(local.len() as i32));
                root.gather_varcount_into(local);
                return Vec::new();
            }
            let mut counts = vec![0i32; self.world.size() as usize];
            root.gather_into_root(&(local.len() as i32), &mut counts[..]);
            let displs: Vec<i32> = counts
                .iter()
                .scan(0i32, |at, &c| {
                    let d = *at;
                    *at += c;
                    Some(d)
                })
                .collect();
            let mut out = vec![0.0f32; counts.iter().map(|&c| c as usize).sum()];
            let mut parts = PartitionMut::new(&mut out[..], &counts[..], &displs[..]);
            root.gather_varcount_into_root(local, &mut parts);
            out
        }

        fn any(&self, flag: bool) -> bool {
            let mut all = vec![0u8; self.size()];
            self.world.all_gather_into(&(flag as u8), &mut all[..]);
            all.iter().any(|&f| f != 0)
        }

        fn exchange(
            &self,
            sends: &[(usize, i32, &[f32])],
            receives: &mut [(usize, i32, &mut [f32])],
            work: &mut dyn FnMut(),
        ) {
            mpi::request::scope(|scope| {
                let mut pending = Vec::with_capacity(receives.len() + sends.len());
                for (from, tag, buffer) in receives.iter_mut() {
                    pending.push(
                        self.world
                            .process_at_rank(*from as i32)
                            .immediate_receive_into_with_tag(scope, &mut **buffer, *tag),
                    );
                }
                let mut sent = Vec::with_capacity(sends.len());
                for (to, tag, data) in sends {
                    sent.push(
                        self.world
                            .process_at_rank(*to as i32)
                            .immediate_send_with_tag(scope, *data, *tag),
                    );
                }
                work();
                for r in pending {
                    r.wait();
                }
                for r in sent {
                    r.wait();
                }
            });
        }
    }

    /// Finalises MPI and exits; a rank failing alone aborts the job instead.
    pub fn finish(code: i32, together: bool) -> ! {
        let universe = UNIVERSE.lock().unwrap_or_else(|e| e.into_inner()).take();
        if !together {
            if let Some(u) = &universe {
                u.world().abort(code);
            }
        }
        drop(universe);
        std::process::exit(code)
    }
}
