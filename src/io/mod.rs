//! Files flowscope reads and writes: checkpoints, VTK image data, probe and
//! force tables.

pub mod checkpoint;
pub mod probe;
pub mod vti;

use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes a file whole or not at all: `write` fills a temporary file beside
/// `path` (`NAME.partial`), which replaces `path` only once it is complete, so
/// a failure or a kill mid-write leaves the previous file as it was.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp = partial_path(path);
    let result = (|| {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        write(&mut file)?;
        file.into_inner().map_err(|e| e.into_error())?.sync_all()
    })();
    match result {
        Ok(()) => std::fs::rename(&tmp, path),
        Err(e) => {
            // The partial file is worthless; the error says what went wrong.
            std::fs::remove_file(&tmp).ok();
            Err(e)
        }
    }
}

/// `out.vti` → `out.vti.partial`, in the same folder (a rename stays on one
/// file system).
fn partial_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_the_previous_file_and_no_partial_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        write_atomically(&path, |w| w.write_all(b"first")).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        let e = write_atomically(&path, |w| {
            w.write_all(b"half of the second")?;
            Err(std::io::Error::other("disk full"))
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "disk full");
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        assert!(!partial_path(&path).exists());
        write_atomically(&path, |w| w.write_all(b"second")).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }
}
