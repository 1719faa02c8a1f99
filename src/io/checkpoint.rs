//! Checkpoints: the full solver state in one file, and back.
//!
//! Layout (little endian): the 16-byte magic, a format version, the grid, the
//! step, a hash of the cell flags (so a file from other geometry is refused), the
//! length of the flow's state, then that state ([`Solver::populations`]: the
//! lattice Boltzmann solvers' raw shifted populations in storage order, the
//! projection method's velocities, pressure and last explicit terms; a file
//! of the other method is refused by its length), then the state the run
//! carries besides the flow (contaminant concentrations and doses; version 2
//! on, its length in the header), then an FNV-1a hash of everything before
//! it. A resumed run continues bit for bit: the populations and the step are
//! the whole state of the AA scheme.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::solver::flags::NEAR;
use crate::solver::{Solver, SolverError};

const MAGIC: &[u8; 16] = b"FLOWSCOPE-CKPT\0\0";
/// Bump on any change of layout or meaning.
pub const VERSION: u32 = 2;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot {what} checkpoint {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a flowscope checkpoint (or it is truncated or corrupted): {why}")]
    NotACheckpoint { path: PathBuf, why: String },
    #[error("{path} was written by checkpoint format version {found}; this flowscope reads versions 1 to {VERSION}. Rerun the simulation with this version")]
    Version { path: PathBuf, found: u32 },
    #[error("{path} holds a {found} grid but the scenario has {expected}: resume with the scenario (and --set values) it was written with")]
    Grid {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error(transparent)]
    Solver(#[from] SolverError),
    #[error("{path} was written for other geometry (obstacles or boundary faces differ from the scenario's): resume with the scenario it was written with")]
    Geometry { path: PathBuf },
    #[error("{path} holds the state of another solution method ({found} values where this run's method keeps {expected}): resume it with the method it was written with ([run] method, or --method lbm / --method projection)")]
    Method {
        path: PathBuf,
        found: u64,
        expected: u64,
    },
    #[error("{path} was written by {found} processes, and this run has {expected}: resume it with mpirun -n {found} (or write a .ckpt, which resumes on any number)")]
    Processes {
        path: PathBuf,
        found: usize,
        expected: usize,
    },
    #[error("checkpoint {path}: {why}")]
    Pieces { path: PathBuf, why: String },
}

/// What a checkpoint holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub size: [usize; 3],
    pub step: u64,
    pub flags_hash: u64,
    pub populations: Vec<f32>,
    /// [`Solver::carried_state`]: empty where the run carried nothing.
    pub carried: Vec<f32>,
}

fn fnv1a(hash: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *hash ^= b as u64;
        *hash = hash.wrapping_mul(0x0000_0100_0000_01B3);
    }
}

const FNV_START: u64 = 0xCBF2_9CE4_8422_2325;

/// Hash of the geometry part of the flags (the derived NEAR bit left out).
pub fn flags_hash(flags: &[u8]) -> u64 {
    let mut h = FNV_START;
    for &f in flags {
        fnv1a(&mut h, &[f & !NEAR]);
    }
    h
}

/// Populations go through this many bytes at a time, on their way to or from
/// the file: a checkpoint never holds a second copy of the lattice in memory.
const CHUNK_BYTES: usize = 1 << 16;

/// A writer that hashes what passes through it.
struct Hashing<'a> {
    inner: &'a mut dyn Write,
    hash: u64,
}

impl Hashing<'_> {
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        fnv1a(&mut self.hash, bytes);
        self.inner.write_all(bytes)
    }

    /// Little-endian floats, a chunk at a time.
    fn put_floats(&mut self, values: &[f32]) -> std::io::Result<()> {
        let mut buf = [0u8; CHUNK_BYTES];
        for part in values.chunks(CHUNK_BYTES / 4) {
            for (b, v) in buf.chunks_exact_mut(4).zip(part) {
                b.copy_from_slice(&v.to_le_bytes());
            }
            self.put(&buf[..part.len() * 4])?;
        }
        Ok(())
    }
}

/// Writes the solver's state as a checkpoint, atomically (temporary file,
/// then rename), so a crash while writing never destroys the previous one.
/// Refused when the state has blown up (NaN, or speeds past the stability
/// limit): such a checkpoint could not be resumed, and saving it would replace
/// the last good one. The populations stream from the solver to the file in
/// pieces, so saving a large grid takes no memory beyond the solver's own.
pub fn save(path: &Path, solver: &mut dyn Solver) -> Result<(), CheckpointError> {
    if let Some(e) = solver.stats()?.instability() {
        return Err(e.into());
    }
    let carried = solver.carried_state()?.unwrap_or_default();
    save_with(path, solver, &carried)
}

/// [`save`] with `carried` as the state beyond the flow.
fn save_with(path: &Path, solver: &mut dyn Solver, carried: &[f32]) -> Result<(), CheckpointError> {
    let size = solver.grid().size;
    let count = solver.state_len() as u64;
    let (step, hash) = (solver.time_step(), flags_hash(solver.flags()));
    let mut failed = None;
    let written = super::write_atomically(path, |file| {
        let mut out = Hashing {
            inner: file,
            hash: FNV_START,
        };
        out.put(MAGIC)?;
        out.put(&VERSION.to_le_bytes())?;
        for word in
            size.map(|n| n as u64)
                .into_iter()
                .chain([step, hash, count, carried.len() as u64])
        {
            out.put(&word.to_le_bytes())?;
        }
        let mut io_error = None;
        let mut seen = 0u64;
        let visited = solver.visit_populations(&mut |part| {
            seen += part.len() as u64;
            if io_error.is_none() {
                io_error = out.put_floats(part).err();
            }
        });
        if let Some(e) = io_error {
            return Err(e);
        }
        if let Err(e) = visited {
            failed = Some(e);
            return Err(std::io::Error::other(
                "the solver could not hand over its state",
            ));
        }
        if seen != count {
            failed = Some(SolverError::StateMismatch(format!(
                "{seen} values for a state of {count}"
            )));
            return Err(std::io::Error::other(
                "the solver handed over a wrong state",
            ));
        }
        out.put_floats(carried)?;
        let h = out.hash;
        out.inner.write_all(&h.to_le_bytes())
    });
    match (written, failed) {
        (_, Some(e)) => Err(e.into()),
        (Err(e), None) => Err(CheckpointError::Io {
            what: "write",
            path: path.to_path_buf(),
            source: e,
        }),
        (Ok(()), None) => Ok(()),
    }
}

/// Bytes before the populations: signature, version, grid, step, flags hash,
/// population count and (version 2 on) the carried state's length.
const HEADER: usize = 20 + 8 * 7;
const HEADER_1: usize = HEADER - 8;

/// Reads a checkpoint and checks it against the grid and flags of the scenario
/// it is to resume and the length of its method's state (`state_len`,
/// [`Solver::state_len`]). The header and the file's length are checked
/// before the populations are read, so a file that is not a checkpoint
/// (`/dev/zero`, a huge file, one whose header lies) is refused without
/// reading it whole.
pub fn load(
    path: &Path,
    size: [usize; 3],
    flags: &[u8],
    state_len: usize,
) -> Result<Checkpoint, CheckpointError> {
    let io = |source| CheckpointError::Io {
        what: "read",
        path: path.to_path_buf(),
        source,
    };
    let bad = |why: &str| CheckpointError::NotACheckpoint {
        path: path.to_path_buf(),
        why: why.into(),
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut head = Vec::with_capacity(HEADER);
    (&mut file)
        .take(HEADER as u64)
        .read_to_end(&mut head)
        .map_err(io)?;
    if head.len() < 16 + 4 || &head[..16] != MAGIC {
        return Err(bad("the file does not start with the checkpoint signature"));
    }
    let version = u32::from_le_bytes(head[16..20].try_into().expect("4 bytes"));
    if version == 0 || version > VERSION {
        return Err(CheckpointError::Version {
            path: path.to_path_buf(),
            found: version,
        });
    }
    let header = if version == 1 { HEADER_1 } else { HEADER };
    if head.len() < header {
        return Err(bad("the header is cut short"));
    }
    if head.len() > header {
        // A shorter header of an older format: the populations start sooner.
        head.truncate(header);
        file.seek(std::io::SeekFrom::Start(header as u64))
            .map_err(io)?;
    }
    let word =
        |k: usize| u64::from_le_bytes(head[20 + 8 * k..28 + 8 * k].try_into().expect("8 bytes"));
    let (step, hash, count) = (word(3), word(4), word(5));
    let carried_count = if version == 1 { 0 } else { word(6) };
    let found = [word(0), word(1), word(2)];
    if found != size.map(|n| n as u64) {
        return Err(CheckpointError::Grid {
            path: path.to_path_buf(),
            found: format!("{}x{}x{}", found[0], found[1], found[2]),
            expected: format!("{}x{}x{}", size[0], size[1], size[2]),
        });
    }
    if hash != flags_hash(flags) {
        return Err(CheckpointError::Geometry {
            path: path.to_path_buf(),
        });
    }
    // The flow's state, the carried state and the checksum.
    let expected = (header as u64 + 8)
        .checked_add(count.saturating_mul(4))
        .and_then(|n| n.checked_add(carried_count.saturating_mul(4)));
    let length = file.metadata().map_err(io)?.len();
    if expected != Some(length) {
        return Err(bad("its length does not match its header"));
    }
    if count != state_len as u64 {
        return Err(CheckpointError::Method {
            path: path.to_path_buf(),
            found: count,
            expected: state_len as u64,
        });
    }
    let mut h = FNV_START;
    fnv1a(&mut h, &head);
    let mut buf = [0u8; CHUNK_BYTES];
    let mut floats = |count: u64| -> Result<Vec<f32>, CheckpointError> {
        let mut out = Vec::with_capacity(count as usize);
        let mut left = count as usize * 4;
        while left > 0 {
            let part = &mut buf[..left.min(CHUNK_BYTES)];
            file.read_exact(part).map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => bad("its length does not match its header"),
                _ => io(e),
            })?;
            fnv1a(&mut h, part);
            out.extend(
                part.chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))),
            );
            left -= part.len();
        }
        Ok(out)
    };
    let populations = floats(count)?;
    let carried = floats(carried_count)?;
    let mut tail = [0u8; 8];
    file.read_exact(&mut tail)
        .map_err(|_| bad("its length does not match its header"))?;
    if h != u64::from_le_bytes(tail) {
        return Err(bad("its checksum does not match"));
    }
    Ok(Checkpoint {
        size,
        step,
        flags_hash: hash,
        populations,
        carried,
    })
}

/// [`save`] under MPI: rank 0 writes the whole state, the other processes take
/// part in gathering it (in the order `save` asks for it).
pub fn save_gathered(path: &Path, solver: &mut dyn Solver) -> Result<(), CheckpointError> {
    if crate::system::ranks::is_root() {
        return save(path, solver);
    }
    if let Some(e) = solver.stats()?.instability() {
        return Err(e.into());
    }
    solver.carried_state()?;
    Ok(solver.visit_populations(&mut |_| {})?)
}

/// First line of a checkpoint written in pieces.
const PIECES_MAGIC: &str = "flowscope checkpoint in pieces, format 1";

/// The file of process `k`'s piece of the checkpoint `path` (`run.pckpt` →
/// `run_0.ckpt`), beside it.
pub fn piece_path(path: &Path, k: usize) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!("{stem}_{k}.ckpt"))
}

/// A checkpoint per process, for grids too large to gather on one machine:
/// each process saves its own lattice ([`Solver::own_lattice`], halos
/// included; the whole in one process) as a plain checkpoint,
/// [`piece_path`]`(path, rank)`; once every piece is written, rank 0 writes
/// `path`, which names how many there are and the step they hold. It resumes
/// on the same number of processes ([`restore_pieces`]).
pub fn save_pieces(path: &Path, solver: &mut dyn Solver) -> Result<(), CheckpointError> {
    use crate::system::ranks;
    // Contaminants: each process's own cells, beside its lattice.
    let carried = solver.own_carried_state()?;
    let spread = solver.own_lattice().is_some();
    if spread && carried.is_none() && solver.carried_state()?.is_some() {
        return Err(CheckpointError::Pieces {
            path: path.into(),
            why: "this run's contaminants are not spread over the processes: name the \
                  checkpoint .ckpt"
                .into(),
        });
    }
    if let Some(e) = solver.stats()?.instability() {
        return Err(e.into());
    }
    let (size, step) = (solver.grid().size, solver.time_step());
    let piece = piece_path(path, ranks::rank());
    let written = match (solver.own_lattice(), carried) {
        (Some(own), Some(carried)) => save_with(&piece, own, &carried),
        (Some(own), None) => save(&piece, own),
        (None, _) => save(&piece, solver),
    };
    // No manifest names a piece that is missing.
    let failed = ranks::world().map_or(written.is_err(), |w| w.any(written.is_err()));
    written?;
    if failed {
        return Err(CheckpointError::Pieces {
            path: path.into(),
            why: "another process could not write its piece (its message says why)".into(),
        });
    }
    if !ranks::is_root() {
        return Ok(());
    }
    let processes = ranks::world().map_or(1, |w| w.size());
    let [nx, ny, nz] = size;
    let text = format!("{PIECES_MAGIC}\nprocesses {processes}\nsize {nx} {ny} {nz}\nstep {step}\n");
    super::write_atomically(path, |f| f.write_all(text.as_bytes())).map_err(|source| {
        CheckpointError::Io {
            what: "write",
            path: path.into(),
            source,
        }
    })
}

/// Resumes [`save_pieces`]' checkpoint: each process loads its own piece.
pub fn restore_pieces(path: &Path, solver: &mut dyn Solver) -> Result<u64, CheckpointError> {
    use crate::system::ranks;
    let text = std::fs::read_to_string(path).map_err(|source| CheckpointError::Io {
        what: "read",
        path: path.into(),
        source,
    })?;
    let not_one = |why: &str| CheckpointError::NotACheckpoint {
        path: path.into(),
        why: why.into(),
    };
    let mut lines = text.lines();
    if lines.next() != Some(PIECES_MAGIC) {
        return Err(not_one(
            "its first line does not name a checkpoint in pieces",
        ));
    }
    let mut field = |key: &str| -> Result<Vec<u64>, CheckpointError> {
        lines
            .next()
            .and_then(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().map(|w| w.parse().ok()).collect())
            .ok_or_else(|| not_one(&format!("no line `{key} …`")))
    };
    let (processes, size, step) = match (field("processes")?, field("size")?, field("step")?) {
        (p, s, t) if p.len() == 1 && s.len() == 3 && t.len() == 1 => {
            (p[0] as usize, [s[0], s[1], s[2]].map(|v| v as usize), t[0])
        }
        _ => return Err(not_one("a line holds the wrong number of values")),
    };
    let expected = ranks::world().map_or(1, |w| w.size());
    if processes != expected {
        return Err(CheckpointError::Processes {
            path: path.into(),
            found: processes,
            expected,
        });
    }
    if size != solver.grid().size {
        return Err(CheckpointError::Grid {
            path: path.into(),
            found: format!("{size:?}"),
            expected: format!("{:?}", solver.grid().size),
        });
    }
    let piece = piece_path(path, ranks::rank());
    let (resumed, carried) = match solver.own_lattice() {
        Some(own) => {
            let c = load(&piece, own.grid().size, own.flags(), own.state_len())?;
            own.set_populations(c.step, &c.populations)?;
            (c.step, c.carried)
        }
        None => (restore(&piece, solver)?, Vec::new()),
    };
    if !carried.is_empty() {
        solver.set_own_carried_state(&carried)?;
    }
    if resumed != step {
        return Err(CheckpointError::Pieces {
            path: path.into(),
            why: format!(
                "{} holds step {resumed} but the checkpoint step {step}: a piece of another checkpoint",
                piece.display()
            ),
        });
    }
    Ok(step)
}

/// Loads a checkpoint for `solver`'s scenario and puts its state in
/// `solver`; returns the step it resumes at.
pub fn restore(path: &Path, solver: &mut dyn Solver) -> Result<u64, CheckpointError> {
    let c = load(path, solver.grid().size, solver.flags(), solver.state_len())?;
    solver.set_populations(c.step, &c.populations)?;
    match (c.carried.is_empty(), solver.carried_state()?.is_some()) {
        (false, _) => solver.set_carried_state(&c.carried)?,
        (true, true) => eprintln!(
            "note: {} holds no contaminant concentrations: they start from none at step {}",
            path.display(),
            c.step
        ),
        (true, false) => {}
    }
    Ok(c.step)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solver::lbm::cpu::CpuSolver;
    use crate::solver::lbm::lattice::{self, Collision};
    use crate::solver::{Grid, Initial, Params};

    /// The state of the lattice Boltzmann solver on the 2×3×4 grid.
    const STATE: usize = lattice::Q * 24;

    /// A periodic box driven by a body force: every population differs.
    fn cavity(size: [usize; 3]) -> CpuSolver {
        let grid = Grid {
            size,
            periodic: [true; 3],
        };
        let mut params = Params::new(0.8, Collision::Bgk);
        params.force = [1e-5, 0.0, 0.0];
        let flags = vec![0u8; grid.cells()];
        CpuSolver::new(grid, flags, params, Initial::Uniform([0.01, 0.0, 0.0])).unwrap()
    }

    fn saved(dir: &Path, size: [usize; 3], flags: &[u8]) -> PathBuf {
        let path = dir.join("a.ckpt");
        let mut solver = cavity(size);
        assert_eq!(solver.flags(), flags);
        solver.step(7).unwrap();
        save(&path, &mut solver).unwrap();
        path
    }

    #[test]
    fn a_round_trip_gives_back_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let flags = vec![0u8; 24];
        let path = saved(dir.path(), [2, 3, 4], &flags);
        let c = load(&path, [2, 3, 4], &flags, STATE).unwrap();
        assert_eq!(
            (c.size, c.step, c.populations.len()),
            ([2, 3, 4], 7, 19 * 24)
        );
        let mut again = cavity([2, 3, 4]);
        again.step(7).unwrap();
        assert_eq!(c.populations, again.populations().unwrap());
    }

    #[test]
    fn a_checkpoint_of_format_1_still_resumes() {
        // Format 1: no length of the carried state in the header, nothing
        // after the populations.
        let dir = tempfile::tempdir().unwrap();
        let flags = vec![0u8; 24];
        let path = saved(dir.path(), [2, 3, 4], &flags);
        let bytes = std::fs::read(&path).unwrap();
        let mut old = bytes[..HEADER - 8].to_vec();
        old[16..20].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(&bytes[HEADER - 8..HEADER], &0u64.to_le_bytes());
        old.extend_from_slice(&bytes[HEADER..bytes.len() - 8]);
        let mut h = FNV_START;
        fnv1a(&mut h, &old);
        old.extend_from_slice(&h.to_le_bytes());
        let v1 = dir.path().join("v1.ckpt");
        std::fs::write(&v1, &old).unwrap();
        let (a, b) = (
            load(&path, [2, 3, 4], &flags, STATE).unwrap(),
            load(&v1, [2, 3, 4], &flags, STATE).unwrap(),
        );
        assert_eq!(a, b);
        assert!(b.carried.is_empty());
    }

    #[test]
    fn regression_dev_zero_is_refused_without_being_read() {
        let started = std::time::Instant::now();
        let flags = [0u8; 64 * 64 * 64];
        let e = load(Path::new("/dev/zero"), [64, 64, 64], &flags, STATE).unwrap_err();
        assert!(
            e.to_string()
                .contains("does not start with the checkpoint signature"),
            "{e}"
        );
        assert!(started.elapsed().as_secs() < 5);
    }

    #[test]
    fn a_header_that_claims_more_than_the_file_holds_is_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let flags = vec![0u8; 24];
        let path = saved(dir.path(), [2, 3, 4], &flags);
        let mut bytes = std::fs::read(&path).unwrap();
        // A population count of 2^60: no allocation of that size may happen.
        bytes[60..68].copy_from_slice(&(1u64 << 60).to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let e = load(&path, [2, 3, 4], &flags, STATE).unwrap_err();
        assert!(
            e.to_string().contains("length does not match its header"),
            "{e}"
        );
        // Cut short: the same.
        let good = saved(dir.path(), [2, 3, 4], &flags);
        let bytes = std::fs::read(&good).unwrap();
        std::fs::write(&good, &bytes[..bytes.len() - 100]).unwrap();
        let e = load(&good, [2, 3, 4], &flags, STATE).unwrap_err();
        assert!(
            e.to_string().contains("length does not match its header"),
            "{e}"
        );
    }

    /// The lid-driven cavity by the projection method, quasi-2D.
    fn projection_cavity() -> crate::solver::projection::ProjectionSolver {
        use crate::solver::flags::{make, CellType};
        let size = [12, 10, 2];
        let grid = Grid {
            size,
            periodic: [false, false, true],
        };
        let flags: Vec<u8> = (0..grid.cells())
            .map(|c| {
                let [x, y, _] = grid.coords(c);
                if y == size[1] - 1 {
                    make(CellType::MovingWall, 1)
                } else if x == 0 || x == size[0] - 1 || y == 0 {
                    make(CellType::Wall, 0)
                } else {
                    make(CellType::Fluid, 0)
                }
            })
            .collect();
        let mut params = Params::new(0.8, Collision::Bgk);
        params.velocities[1] = [0.05, 0.0, 0.0];
        crate::solver::projection::ProjectionSolver::new(
            grid,
            flags,
            params,
            Initial::Uniform([0.0; 3]),
        )
        .unwrap()
    }

    #[test]
    fn the_projection_method_resumes_bit_for_bit_and_its_state_fits_no_lattice() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.ckpt");
        let mut whole = projection_cavity();
        whole.step(20).unwrap();
        save(&path, &mut whole).unwrap();
        whole.step(15).unwrap();
        let mut resumed = projection_cavity();
        assert_eq!(restore(&path, &mut resumed).unwrap(), 20);
        resumed.step(15).unwrap();
        assert_eq!(resumed.time_step(), 35);
        let (a, b) = (whole.fields().unwrap(), resumed.fields().unwrap());
        for (x, y) in [(&a.ux, &b.ux), (&a.uy, &b.uy), (&a.rho, &b.rho)] {
            assert!(x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()));
        }
        assert!(
            a.ux.iter().any(|&v| v.abs() > 1e-3),
            "the lid moved the fluid"
        );
        // Into the lattice Boltzmann solver: refused, naming the cause.
        let mut lbm = CpuSolver::new(
            *resumed.grid(),
            resumed.flags().to_vec(),
            resumed.params().clone(),
            Initial::Uniform([0.0; 3]),
        )
        .unwrap();
        let e = restore(&path, &mut lbm).unwrap_err();
        assert!(e.to_string().contains("another solution method"), "{e}");
        assert!(e.to_string().contains("--method"), "{e}");
    }
}
