//! Checkpoints: the full solver state in one file, and back.
//!
//! Layout (little endian): the 16-byte magic, a format version, the grid, the
//! step, a hash of the cell flags (so a file from other geometry is refused), the
//! storage precision, then the raw shifted populations in storage order, then an
//! FNV-1a hash of everything before it. A resumed run continues bit for bit: the
//! populations and the step are the whole state of the AA scheme.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::solver::flags::NEAR;
use crate::solver::lbm::lattice;
use crate::solver::{Solver, SolverError};

const MAGIC: &[u8; 16] = b"FLOWSCOPE-CKPT\0\0";
/// Bump on any change of layout or meaning.
pub const VERSION: u32 = 1;

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
    #[error("{path} was written by checkpoint format version {found}; this flowscope reads version {VERSION}. Rerun the simulation with this version")]
    Version { path: PathBuf, found: u32 },
    #[error("{path} holds a {found} grid but the scenario has {expected}: resume with the scenario (and --set values) it was written with")]
    Grid {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("{path} was written for other geometry (obstacles or boundary faces differ from the scenario's): resume with the scenario it was written with")]
    Geometry { path: PathBuf },
}

/// What a checkpoint holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub size: [usize; 3],
    pub step: u64,
    pub flags_hash: u64,
    pub populations: Vec<f32>,
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
    let stripped: Vec<u8> = flags.iter().map(|f| f & !NEAR).collect();
    fnv1a(&mut h, &stripped);
    h
}

/// A solver's state as a checkpoint. Refused when the state has blown up
/// (NaN, or speeds past the stability limit): such a checkpoint could not be
/// resumed, and saving it would replace the last good one.
pub fn capture(solver: &mut dyn Solver) -> Result<Checkpoint, SolverError> {
    if let Some(e) = solver.stats()?.instability() {
        return Err(e);
    }
    Ok(Checkpoint {
        size: solver.grid().size,
        step: solver.time_step(),
        flags_hash: flags_hash(solver.flags()),
        populations: solver.populations()?,
    })
}

/// Writes a checkpoint atomically (temporary file, then rename), so a crash
/// while writing never destroys the previous one.
pub fn save(path: &Path, ckpt: &Checkpoint) -> Result<(), CheckpointError> {
    let io = |what, source| CheckpointError::Io {
        what,
        path: path.to_path_buf(),
        source,
    };
    let mut bytes = Vec::with_capacity(64 + ckpt.populations.len() * 4);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    for n in ckpt.size {
        bytes.extend_from_slice(&(n as u64).to_le_bytes());
    }
    bytes.extend_from_slice(&ckpt.step.to_le_bytes());
    bytes.extend_from_slice(&ckpt.flags_hash.to_le_bytes());
    bytes.extend_from_slice(&(ckpt.populations.len() as u64).to_le_bytes());
    bytes.extend_from_slice(bytemuck::cast_slice(&ckpt.populations));
    let mut h = FNV_START;
    fnv1a(&mut h, &bytes);
    bytes.extend_from_slice(&h.to_le_bytes());
    super::write_atomically(path, |file| file.write_all(&bytes)).map_err(|e| io("write", e))
}

/// Bytes before the populations: signature, version, grid, step, flags hash
/// and population count.
const HEADER: usize = 20 + 8 * 6;

/// Reads a checkpoint and checks it against the grid and flags of the scenario
/// it is to resume. The header and the file's length are checked before the
/// populations are read, so a file that is not a checkpoint (`/dev/zero`, a
/// huge file, one whose header lies) is refused without reading it whole.
pub fn load(path: &Path, size: [usize; 3], flags: &[u8]) -> Result<Checkpoint, CheckpointError> {
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
    if version != VERSION {
        return Err(CheckpointError::Version {
            path: path.to_path_buf(),
            found: version,
        });
    }
    if head.len() < HEADER {
        return Err(bad("the header is cut short"));
    }
    let word =
        |k: usize| u64::from_le_bytes(head[20 + 8 * k..28 + 8 * k].try_into().expect("8 bytes"));
    let (step, hash, count) = (word(3), word(4), word(5));
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
    // The populations of the grid, and the checksum.
    let cells = size.iter().map(|&n| n as u64).product::<u64>();
    let expected = (HEADER as u64 + 8).checked_add(count.saturating_mul(4));
    let length = file.metadata().map_err(io)?.len();
    if count != lattice::Q as u64 * cells || expected != Some(length) {
        return Err(bad("its length does not match its header"));
    }
    let mut bytes = head;
    bytes.reserve_exact(length as usize - HEADER);
    file.read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 != length {
        return Err(bad("its length does not match its header"));
    }
    let (body, tail) = bytes.split_at(bytes.len() - 8);
    let mut h = FNV_START;
    fnv1a(&mut h, body);
    if h != u64::from_le_bytes(tail.try_into().expect("8 bytes")) {
        return Err(bad("its checksum does not match"));
    }
    let populations: Vec<f32> = body[HEADER..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    Ok(Checkpoint {
        size,
        step,
        flags_hash: hash,
        populations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved(dir: &Path, size: [usize; 3], flags: &[u8]) -> PathBuf {
        let path = dir.join("a.ckpt");
        let n = size.iter().product::<usize>();
        let ckpt = Checkpoint {
            size,
            step: 7,
            flags_hash: flags_hash(flags),
            populations: (0..lattice::Q * n).map(|k| k as f32).collect(),
        };
        save(&path, &ckpt).unwrap();
        path
    }

    #[test]
    fn a_round_trip_gives_back_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let flags = vec![0u8; 24];
        let path = saved(dir.path(), [2, 3, 4], &flags);
        let c = load(&path, [2, 3, 4], &flags).unwrap();
        assert_eq!(
            (c.size, c.step, c.populations.len()),
            ([2, 3, 4], 7, 19 * 24)
        );
        assert_eq!(c.populations[100], 100.0);
    }

    #[test]
    fn regression_dev_zero_is_refused_without_being_read() {
        let started = std::time::Instant::now();
        let e = load(Path::new("/dev/zero"), [64, 64, 64], &[0u8; 64 * 64 * 64]).unwrap_err();
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
        let e = load(&path, [2, 3, 4], &flags).unwrap_err();
        assert!(
            e.to_string().contains("length does not match its header"),
            "{e}"
        );
        // Cut short: the same.
        let good = saved(dir.path(), [2, 3, 4], &flags);
        let bytes = std::fs::read(&good).unwrap();
        std::fs::write(&good, &bytes[..bytes.len() - 100]).unwrap();
        let e = load(&good, [2, 3, 4], &flags).unwrap_err();
        assert!(
            e.to_string().contains("length does not match its header"),
            "{e}"
        );
    }
}
