//! Checkpoints: the full solver state in one file, and back.
//!
//! Layout (little endian): the 16-byte magic, a format version, the grid, the
//! step, a hash of the cell flags (so a file from other geometry is refused), the
//! storage precision, then the raw shifted populations in storage order, then an
//! FNV-1a hash of everything before it. A resumed run continues bit for bit: the
//! populations and the step are the whole state of the AA scheme.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::solver::flags::NEAR;

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
    let tmp = path.with_extension("ckpt.partial");
    let mut file = std::fs::File::create(&tmp).map_err(|e| io("create", e))?;
    file.write_all(&bytes).map_err(|e| io("write", e))?;
    file.sync_all().map_err(|e| io("write", e))?;
    std::fs::rename(&tmp, path).map_err(|e| io("rename", e))?;
    Ok(())
}

/// Reads a checkpoint and checks it against the grid and flags of the scenario
/// it is to resume.
pub fn load(path: &Path, size: [usize; 3], flags: &[u8]) -> Result<Checkpoint, CheckpointError> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|source| CheckpointError::Io {
            what: "read",
            path: path.to_path_buf(),
            source,
        })?;
    let bad = |why: &str| CheckpointError::NotACheckpoint {
        path: path.to_path_buf(),
        why: why.into(),
    };
    if bytes.len() < 16 + 4 || &bytes[..16] != MAGIC {
        return Err(bad("the file does not start with the checkpoint signature"));
    }
    let version = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(CheckpointError::Version {
            path: path.to_path_buf(),
            found: version,
        });
    }
    let header = 20 + 8 * 6;
    if bytes.len() < header + 8 {
        return Err(bad("the header is cut short"));
    }
    let (body, tail) = bytes.split_at(bytes.len() - 8);
    let mut h = FNV_START;
    fnv1a(&mut h, body);
    if h != u64::from_le_bytes(tail.try_into().expect("8 bytes")) {
        return Err(bad("its checksum does not match"));
    }
    let word =
        |k: usize| u64::from_le_bytes(bytes[20 + 8 * k..28 + 8 * k].try_into().expect("8 bytes"));
    let found = [word(0) as usize, word(1) as usize, word(2) as usize];
    let step = word(3);
    let hash = word(4);
    let count = word(5) as usize;
    if found != size {
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
    if body.len() != header + count * 4 {
        return Err(bad("its length does not match its header"));
    }
    let populations: Vec<f32> = body[header..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    Ok(Checkpoint {
        size: found,
        step,
        flags_hash: hash,
        populations,
    })
}
