//! The `--pid` file: the process id in decimal, no newline, mode 0644, removed when
//! the daemon stops normally (also after a start-up failure that follows it, unlike
//! Go, which left stale files behind on fatal exits).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A written pid file, removed on drop.
#[derive(Debug)]
pub(crate) struct PidFile {
    path: PathBuf,
}

impl PidFile {
    /// Writes this process' id to `path`.
    pub(crate) fn write(path: &Path) -> std::io::Result<PidFile> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o644)
            .open(path)?;
        write!(file, "{}", std::process::id())?;
        Ok(PidFile {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
