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

/// Checks, before any work is done, that a file of one of `extensions` can be
/// written at `path`: the extension is known, the folder exists and takes a
/// new file. `option` names the flag in the message (`--vti`).
pub fn check_output(path: &Path, option: &str, extensions: &[&str]) -> Result<(), String> {
    let shown = path.display();
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if !extensions.contains(&ext.as_str()) {
        let names: Vec<String> = extensions.iter().map(|e| format!(".{e}")).collect();
        return Err(format!(
            "{option} {shown}: this output is written as {}; name the file with that extension",
            names.join(" or ")
        ));
    }
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !folder.is_dir() {
        return Err(format!(
            "{option} {shown}: the folder {} does not exist; create it (mkdir -p {}) or name another",
            folder.display(),
            folder.display()
        ));
    }
    if path.is_dir() {
        return Err(format!(
            "{option} {shown} is a folder; name a file in it, e.g. {}",
            path.join(format!("out.{}", extensions[0])).display()
        ));
    }
    // Writability is only known by trying: the temporary name is the one the
    // real write uses, so nothing else is touched.
    let probe = partial_path(path);
    match std::fs::File::create(&probe) {
        Ok(_) => {
            std::fs::remove_file(&probe).ok();
            Ok(())
        }
        Err(e) => Err(format!(
            "{option} {shown}: cannot write in the folder {} ({e}); name a writable place",
            folder.display()
        )),
    }
}

/// Where the state of a blown-up run goes for diagnosis, beside the file the
/// run was asked to write (which keeps its last good content):
/// `out.vti` → `out.unstable-step-1200.vti`.
pub fn diagnosis_path(path: &Path, step: u64) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.unstable-step-{step}.{}", ext.to_string_lossy()),
        None => format!("{stem}.unstable-step-{step}"),
    };
    path.with_file_name(name)
}

/// A file written row by row over a run (a force table): the rows go to
/// `NAME.partial`, which becomes `NAME` when the file is finished or dropped,
/// so an earlier table of the same name is replaced only by a complete one.
pub struct GrowingFile {
    path: PathBuf,
    file: Option<std::io::BufWriter<std::fs::File>>,
}

impl GrowingFile {
    pub fn create(path: &Path) -> std::io::Result<GrowingFile> {
        let file = std::fs::File::create(partial_path(path))?;
        Ok(GrowingFile {
            path: path.to_path_buf(),
            file: Some(std::io::BufWriter::new(file)),
        })
    }

    pub fn write_line(&mut self, line: &str) -> std::io::Result<()> {
        match self.file.as_mut() {
            Some(f) => writeln!(f, "{line}"),
            None => Err(std::io::Error::other("the file is already finished")),
        }
    }

    /// Flushes the rows so far and gives the file its name.
    pub fn finish(&mut self) -> std::io::Result<()> {
        if let Some(f) = self.file.take() {
            f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            std::fs::rename(partial_path(&self.path), &self.path)?;
        }
        Ok(())
    }
}

impl Drop for GrowingFile {
    /// Rows already computed are kept even when the run ends by an error.
    fn drop(&mut self) {
        self.finish().ok();
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

    #[test]
    fn output_paths_are_checked_before_any_work() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(check_output(&d.join("a.vti"), "--vti", &["vti"]), Ok(()));
        assert!(!d.join("a.vti").exists() && !d.join("a.vti.partial").exists());
        let e = check_output(&d.join("a.vtk"), "--vti", &["vti"]).unwrap_err();
        assert!(e.contains("--vti") && e.contains(".vti"), "{e}");
        let e = check_output(&d.join("typo/a.vti"), "--vti", &["vti"]).unwrap_err();
        assert!(
            e.contains("does not exist") && e.contains("mkdir -p"),
            "{e}"
        );
        std::fs::create_dir(d.join("x.csv")).unwrap();
        let e = check_output(&d.join("x.csv"), "--forces", &["csv"]).unwrap_err();
        assert!(e.contains("is a folder"), "{e}");
        assert!(check_output(Path::new("/proc/a.csv"), "--forces", &["csv"])
            .unwrap_err()
            .contains("cannot write"));
        // A bare name is a file in the working folder.
        assert!(check_output(Path::new("a.png"), "--out", &["png"]).is_ok());
    }

    #[test]
    fn a_growing_file_appears_only_when_finished_or_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.csv");
        std::fs::write(&path, "old complete table\n").unwrap();
        let mut f = GrowingFile::create(&path).unwrap();
        f.write_line("step,cd").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "old complete table\n"
        );
        f.write_line("100,1.5").unwrap();
        drop(f);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "step,cd\n100,1.5\n"
        );
        assert!(!partial_path(&path).exists());
        assert_eq!(
            diagnosis_path(Path::new("out/last.vti"), 1200),
            Path::new("out/last.unstable-step-1200.vti")
        );
    }
}
