//! The processes of one run started by `mpirun` (the `mpi` feature).
//!
//! Every rank runs the same command on the same scenario and owns some slabs
//! of the domain ([`crate::solver::lbm::slabs`]). Each call a solver makes here
//! is collective: every rank makes the same calls in the same order, which the
//! run loop guarantees by taking every decision from values all ranks share
//! (the step, reduced statistics, the arguments). Rank 0 alone writes files and
//! prints; the others' standard output and error go to `/dev/null`, except for
//! their own errors, which name the rank and stop the whole job
//! ([`fail`]) so that no rank waits for one that has gone. A rank that waits
//! on the others past [`TIMEOUT_VARIABLE`]'s limit (a network failure, a
//! stopped process) ends the job too, saying what it waited for
//! ([`Watchdog`]).

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

/// Seconds a rank waits on the others before it ends the job.
pub const TIMEOUT_VARIABLE: &str = "FLOWSCOPE_MPI_TIMEOUT";

/// The wait past which a rank gives up when [`TIMEOUT_VARIABLE`] is not set:
/// long enough for rank 0 to write a checkpoint of the largest grid while
/// the others wait for it at the next step.
pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// The limit [`TIMEOUT_VARIABLE`] sets (`value`, when set), or why it is
/// not one.
pub fn parse_timeout(value: Option<&str>) -> Result<std::time::Duration, String> {
    let Some(v) = value else {
        return Ok(DEFAULT_TIMEOUT);
    };
    match v.trim().parse::<f64>() {
        Ok(secs) if secs > 0.0 && secs.is_finite() => Ok(std::time::Duration::from_secs_f64(secs)),
        _ => Err(format!(
            "{TIMEOUT_VARIABLE}={v}: give the seconds a process may wait on the others, a \
             positive number (default {})",
            DEFAULT_TIMEOUT.as_secs()
        )),
    }
}

/// What a rank is waiting for, while it waits on the others.
#[derive(Clone, Debug, PartialEq)]
pub struct Wait {
    pub since: std::time::Instant,
    /// The operation, e.g. "values gathered to rank 0".
    pub what: &'static str,
    /// The ranks it expects messages from (empty where it cannot tell).
    pub from: Vec<usize>,
}

impl Wait {
    /// The message of a rank that gave up after `waited`.
    pub fn message(&self, waited: std::time::Duration, limit: std::time::Duration) -> String {
        let whom = match &self.from[..] {
            [] => "from the other processes".to_string(),
            [one] => format!("from rank {one}"),
            [rest @ .., last] => format!(
                "from ranks {} and {last}",
                rest.iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        format!(
            "error: no answer {whom} for {:.0} s while waiting for {}: a network failure, or a \
             process stopped or stuck; ending the job (the limit is {} s: {TIMEOUT_VARIABLE}=SECONDS \
             sets it)",
            waited.as_secs_f64(),
            self.what,
            limit.as_secs_f64()
        )
    }
}

/// Watches the waits on the other ranks from a thread of its own: one that
/// lasts past the limit cannot end by itself (MPI's calls do not time out),
/// so the watchdog reports it and ends the process, and `mpirun` then ends
/// the others.
pub struct Watchdog {
    current: std::sync::Mutex<Current>,
    limit: std::time::Duration,
}

/// The wait under way, if `active`; its list of ranks keeps its capacity
/// from wait to wait (a wait begins at every step's halo exchange).
struct Current {
    active: bool,
    wait: Wait,
}

impl Watchdog {
    pub fn new(limit: std::time::Duration) -> Watchdog {
        Watchdog {
            current: std::sync::Mutex::new(Current {
                active: false,
                wait: Wait {
                    since: std::time::Instant::now(),
                    what: "",
                    from: Vec::new(),
                },
            }),
            limit,
        }
    }

    /// Marks the start of a wait for messages `from` these ranks (in any
    /// order, repeats allowed); it ends when the guard is dropped.
    pub fn waiting(
        &self,
        what: &'static str,
        from: impl IntoIterator<Item = usize>,
    ) -> WaitGuard<'_> {
        let wait = self.prepare(what, from);
        wait.start();
        wait
    }

    /// [`Watchdog::waiting`] that begins at [`WaitGuard::start`]: for a
    /// caller that can name the ranks only before work of its own.
    pub fn prepare(
        &self,
        what: &'static str,
        from: impl IntoIterator<Item = usize>,
    ) -> WaitGuard<'_> {
        let mut c = self.current.lock().unwrap_or_else(|e| e.into_inner());
        c.active = false;
        c.wait.what = what;
        c.wait.from.clear();
        c.wait.from.extend(from);
        c.wait.from.sort_unstable();
        c.wait.from.dedup();
        WaitGuard(self)
    }

    /// The wait under way when it has lasted past the limit at `now`.
    pub fn overdue(&self, now: std::time::Instant) -> Option<(Wait, std::time::Duration)> {
        let c = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let waited = now.saturating_duration_since(c.wait.since);
        (c.active && waited > self.limit).then(|| (c.wait.clone(), waited))
    }

    /// Checks every so often from a thread of its own, and ends the process
    /// on the first wait past the limit.
    pub fn watch(&'static self) {
        let every = (self.limit / 10).clamp(
            std::time::Duration::from_millis(100),
            std::time::Duration::from_secs(5),
        );
        std::thread::spawn(move || loop {
            std::thread::sleep(every);
            if let Some((wait, waited)) = self.overdue(std::time::Instant::now()) {
                report(&wait.message(waited, self.limit));
                // Straight out: the main thread is inside MPI, and exit's
                // handlers could wait on it.
                // SAFETY: ends the process; nothing runs after it.
                unsafe { libc::_exit(super::exit::ERROR) }
            }
        });
    }
}

/// Ends a wait of [`Watchdog::waiting`].
pub struct WaitGuard<'a>(&'a Watchdog);

impl WaitGuard<'_> {
    /// Begins the wait now.
    pub fn start(&self) {
        let mut c = self.0.current.lock().unwrap_or_else(|e| e.into_inner());
        c.wait.since = std::time::Instant::now();
        c.active = true;
    }
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        self.0
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .active = false;
    }
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
    let world = if launched > 1 {
        nccl_between_processes_through_cuda_ipc();
        let limit = parse_timeout(std::env::var(TIMEOUT_VARIABLE).ok().as_deref())?;
        join(launched, limit)?
    } else {
        None
    };
    if let Some(w) = &world {
        if w.rank() != 0 {
            quiet_stdio();
        }
    }
    let _ = WORLD.set(world);
    Ok(())
}

/// NCCL's variable for its transport between processes of one machine, and
/// what flowscope sets it to unless the user has.
const NCCL_CUMEM: (&str, &str) = ("NCCL_CUMEM_ENABLE", "0");

/// NCCL (2.28) passes buffers between the processes of one machine through
/// cuMem handles by default (its `P2P/CUMEM` transport): on 4 H100s over
/// NVLink that cost 0.57 ms a step against one process's slabs (512³ FP32:
/// 52.6 against 68.5 GLUPS), where the legacy CUDA IPC transport it falls
/// back to with NCCL_CUMEM_ENABLE=0 matched them (69.7; BENCHMARKS.md,
/// issue 26). Set before MPI and NCCL start any thread, and only where the
/// user has not chosen (`mpirun -x NCCL_CUMEM_ENABLE=1` brings cuMem back).
fn nccl_between_processes_through_cuda_ipc() {
    let (name, _) = NCCL_CUMEM;
    if let Some(value) = nccl_cumem_to_set(std::env::var_os(name).as_deref()) {
        std::env::set_var(name, value);
    }
}

/// The value to give [`NCCL_CUMEM`]'s variable, given the one it has.
fn nccl_cumem_to_set(current: Option<&std::ffi::OsStr>) -> Option<&'static str> {
    current.is_none().then_some(NCCL_CUMEM.1)
}

#[cfg(not(feature = "mpi"))]
fn join(launched: usize, _limit: std::time::Duration) -> Result<Option<Box<dyn Peers>>, String> {
    Err(format!(
        "started as one of {launched} MPI processes, but this flowscope was built without MPI: \
         build it with `cargo build --release --features mpi` (needs Open MPI's libopenmpi-dev \
         and libclang-dev), or run it without mpirun"
    ))
}

#[cfg(feature = "mpi")]
fn join(_launched: usize, limit: std::time::Duration) -> Result<Option<Box<dyn Peers>>, String> {
    let world = mpi_world::Mpi::init(limit)?;
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

    use super::{Peers, Watchdog};

    /// The world communicator; MPI is used from the thread that runs the
    /// command only (`Threading::Funneled`).
    pub struct Mpi {
        world: mpi::topology::SimpleCommunicator,
        watchdog: &'static Watchdog,
        /// Every rank but this one: those a collective call waits on.
        others: Vec<usize>,
    }

    /// Kept until [`finish`]: dropping it finalises MPI.
    static UNIVERSE: Mutex<Option<mpi::environment::Universe>> = Mutex::new(None);

    // SAFETY: the communicator is a handle; MPI is initialised for calls from
    // one thread at a time, and the run loop makes every call from its thread.
    unsafe impl Send for Mpi {}
    unsafe impl Sync for Mpi {}

    impl Mpi {
        pub fn init(limit: std::time::Duration) -> Result<Mpi, String> {
            let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Funneled)
                .ok_or("MPI was already initialised")?;
            let world = universe.world();
            *UNIVERSE.lock().unwrap_or_else(|e| e.into_inner()) = Some(universe);
            // One for the life of the process, as MPI's.
            let watchdog: &'static Watchdog = Box::leak(Box::new(Watchdog::new(limit)));
            watchdog.watch();
            let me = world.rank() as usize;
            let others = (0..world.size() as usize).filter(|&r| r != me).collect();
            Ok(Mpi {
                world,
                watchdog,
                others,
            })
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
            let _wait = self.watchdog.waiting(
                "values gathered from every process",
                self.others.iter().copied(),
            );
            let (counts, displs) = self.counts(local.len());
            let mut out = vec![0.0f32; counts.iter().map(|&c| c as usize).sum()];
            let mut parts = PartitionMut::new(&mut out[..], &counts[..], &displs[..]);
            self.world.all_gather_varcount_into(local, &mut parts);
            out
        }

        fn all_gather_f64(&self, local: &[f64]) -> Vec<f64> {
            let _wait = self.watchdog.waiting(
                "sums gathered from every process",
                self.others.iter().copied(),
            );
            let (counts, displs) = self.counts(local.len());
            let mut out = vec![0.0f64; counts.iter().map(|&c| c as usize).sum()];
            let mut parts = PartitionMut::new(&mut out[..], &counts[..], &displs[..]);
            self.world.all_gather_varcount_into(local, &mut parts);
            out
        }

        fn gather_f32_to_root(&self, local: &[f32]) -> Vec<f32> {
            let _wait = self
                .watchdog
                .waiting("values gathered to rank 0", self.others.iter().copied());
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
            let _wait = self.watchdog.waiting(
                "a flag shared by every process",
                self.others.iter().copied(),
            );
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
            let wait = self
                .watchdog
                .prepare("the halo planes", receives.iter().map(|r| r.0));
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
                // The work is this process's own: the wait starts after it.
                wait.start();
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn nccl_between_processes_uses_cuda_ipc_unless_the_user_chose() {
        assert_eq!(nccl_cumem_to_set(None), Some("0"));
        assert_eq!(nccl_cumem_to_set(Some("1".as_ref())), None);
        assert_eq!(nccl_cumem_to_set(Some("0".as_ref())), None);
    }

    #[test]
    fn the_wait_limit_is_read_from_its_variable_and_a_bad_value_says_what_to_give() {
        assert_eq!(parse_timeout(None), Ok(DEFAULT_TIMEOUT));
        assert_eq!(parse_timeout(Some("5")), Ok(Duration::from_secs(5)));
        assert_eq!(parse_timeout(Some(" 0.5 ")), Ok(Duration::from_millis(500)));
        for bad in ["0", "-3", "ten", "inf", ""] {
            let e = parse_timeout(Some(bad)).unwrap_err();
            assert!(
                e.contains(TIMEOUT_VARIABLE) && e.contains("positive"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_wait_past_the_limit_is_reported_with_what_and_whom_it_waited_for() {
        let dog = Watchdog::new(Duration::from_secs(5));
        let start = Instant::now();
        assert_eq!(dog.overdue(start + Duration::from_secs(60)), None);
        {
            // Prepared, not begun: the process's own work is not a wait.
            let wait = dog.prepare("the halo planes", [1]);
            assert_eq!(dog.overdue(Instant::now() + Duration::from_secs(60)), None);
            wait.start();
            assert!(dog
                .overdue(Instant::now() + Duration::from_secs(6))
                .is_some());
        }
        {
            let _wait = dog.waiting("the halo planes", [3, 1, 3]);
            let now = Instant::now();
            assert_eq!(dog.overdue(now + Duration::from_secs(4)), None);
            let (wait, waited) = dog.overdue(now + Duration::from_secs(6)).expect("overdue");
            assert!(waited >= Duration::from_secs(6));
            let m = wait.message(waited, Duration::from_secs(5));
            assert!(m.contains("from ranks 1 and 3"), "{m}");
            let three = Wait {
                from: vec![1, 2, 3],
                ..wait.clone()
            };
            let m3 = three.message(waited, Duration::from_secs(5));
            assert!(m3.contains("from ranks 1, 2 and 3"), "{m3}");
            assert!(m.contains("the halo planes"), "{m}");
            assert!(m.contains("network failure"), "{m}");
            assert!(m.contains("FLOWSCOPE_MPI_TIMEOUT"), "{m}");
        }
        // Over once its guard is dropped.
        assert_eq!(dog.overdue(Instant::now() + Duration::from_secs(60)), None);
        let _wait = dog.waiting("values gathered to rank 0", []);
        let (wait, waited) = dog
            .overdue(Instant::now() + Duration::from_secs(6))
            .unwrap();
        let m = wait.message(waited, Duration::from_secs(5));
        assert!(m.contains("from the other processes"), "{m}");
        let one = Wait {
            from: vec![2],
            ..wait
        };
        assert!(one
            .message(waited, Duration::from_secs(5))
            .contains("from rank 2 "));
    }
}
