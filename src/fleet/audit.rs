//! The audit trail (`audit_file`): one JSON line per finished attempt, appended to a
//! file of its own. Reopened by name on SIGHUP (after logrotate moved it), like the
//! log. A line that cannot be written is counted in
//! `choria_provisioner_audit_write_errors` and warned about at most once a minute;
//! it never stops provisioning. The file is reopened at the next line after a
//! failure, so a full disk or a deleted directory heals by itself.
//!
//! What goes in a line is [`super::status::Record`]: nothing secret is ever in it.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::metrics::Metrics;
use crate::throttle::Throttle;

/// The audit file of one provisioner.
#[derive(Debug)]
pub(crate) struct AuditLog {
    path: PathBuf,
    file: Mutex<Option<File>>,
    metrics: Arc<Metrics>,
    throttle: Throttle,
}

fn open_append(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)
}

impl AuditLog {
    /// The audit file at `path`, opened now; a file that cannot be opened is
    /// counted and warned about, and opened again at the next line.
    pub(crate) fn open(path: &Path, metrics: Arc<Metrics>) -> AuditLog {
        let log = AuditLog {
            path: path.to_path_buf(),
            file: Mutex::new(None),
            metrics,
            throttle: Throttle::default(),
        };
        match open_append(path) {
            Ok(f) => *log.file.lock() = Some(f),
            Err(e) => log.failed("open", &e),
        }
        log
    }

    /// Where the lines go.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Reopens the file by name (after rotation).
    pub(crate) fn reopen(&self) -> io::Result<()> {
        let fresh = open_append(&self.path);
        let mut file = self.file.lock();
        match fresh {
            Ok(f) => {
                *file = Some(f);
                Ok(())
            }
            Err(e) => {
                *file = None;
                Err(e)
            }
        }
    }

    /// Counts a reopen that failed (its caller logs it); the next line tries again.
    pub(crate) fn reopen_failed(&self) {
        self.metrics.audit_write_errors.inc();
    }

    /// Appends `line` and a newline in one write; a failure is counted and warned
    /// about (rate-limited), never returned.
    pub(crate) fn write(&self, line: &str) {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        let mut file = self.file.lock();
        if file.is_none() {
            match open_append(&self.path) {
                Ok(f) => *file = Some(f),
                Err(e) => {
                    drop(file);
                    return self.failed("open", &e);
                }
            }
        }
        let result = file
            .as_mut()
            .map_or(Ok(()), |f| f.write_all(&bytes).and_then(|()| f.flush()));
        if let Err(e) = result {
            // Opened afresh next time.
            *file = None;
            drop(file);
            self.failed("write", &e);
        }
    }

    fn failed(&self, what: &str, e: &io::Error) {
        self.metrics.audit_write_errors.inc();
        if let Some(more) = self.throttle.ready_note("failures") {
            log::warn!(
                "Could not {what} the audit file {}: {e}; provisioning goes on{more}",
                self.path.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_nats_server::TempDir;

    /// An audit log on `path`, with the metrics it counts its failures in.
    fn opened(path: &Path) -> (AuditLog, Arc<Metrics>) {
        let metrics = Arc::new(Metrics::new("t").unwrap());
        (AuditLog::open(path, Arc::clone(&metrics)), metrics)
    }

    #[test]
    fn lines_are_appended_and_a_rotated_file_is_reopened() {
        let d = TempDir::new("audit-rotate");
        let path = d.path().join("audit.log");
        let (log, metrics) = opened(&path);
        log.write(r#"{"n":1}"#);
        std::fs::rename(&path, d.path().join("audit.log.1")).unwrap();
        log.write(r#"{"n":2}"#);
        log.reopen().unwrap();
        log.write(r#"{"n":3}"#);
        assert_eq!(
            std::fs::read_to_string(d.path().join("audit.log.1")).unwrap(),
            "{\"n\":1}\n{\"n\":2}\n"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"n\":3}\n");
        assert_eq!(metrics.audit_write_errors.get(), 0);
    }

    #[test]
    fn failures_are_counted_and_heal() {
        let d = TempDir::new("audit-heal");
        let path = d.path().join("sub/audit.log");
        let (log, metrics) = opened(&path);
        assert_eq!(metrics.audit_write_errors.get(), 1, "open failed");
        log.write("{}");
        assert_eq!(metrics.audit_write_errors.get(), 2);
        std::fs::create_dir_all(d.path().join("sub")).unwrap();
        log.write("{}");
        assert_eq!(metrics.audit_write_errors.get(), 2, "healed");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}\n");
        let full = AuditLog::open(Path::new("/dev/full"), Arc::clone(&metrics));
        full.write("{}");
        assert_eq!(metrics.audit_write_errors.get(), 3, "ENOSPC counted");
    }
}
