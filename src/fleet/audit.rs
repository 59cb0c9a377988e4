//! The audit trail (`audit_file`): one JSON line per finished attempt, appended to a
//! file of its own. Reopened by name on SIGHUP (after logrotate moved it), like the
//! log. A line that cannot be written is counted in
//! `choria_provisioner_audit_write_errors` and warned about at most once a minute;
//! it never stops provisioning. The file is reopened at the next line after a
//! failure, so a full disk or a deleted directory heals by itself.
//!
//! What goes in a line is [`super::status::Record`]: nothing secret is ever in it.
//!
//! Attempts that sent nothing to a node and made nothing for it (a node that was
//! gone or stale, or one that never answered: what a flood of made-up names ends
//! in) are quiet: [`QUIET_LINES_PER_MINUTE`] of them are written line by line each
//! minute, and the rest are counted and written as one line per outcome when the
//! minute is over (`"aggregated": n`, the first and last time, a few of the
//! identities), so that a flood grows the file by a bounded amount. The finisher
//! wakes when the minute ends ([`AuditLog::summary_due`]) to write them, so they
//! are on disk then, whatever comes next (a SIGKILL included).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::metrics::Metrics;
use crate::throttle::Throttle;

/// Quiet attempts written line by line in each minute; the rest are summed up.
pub(crate) const QUIET_LINES_PER_MINUTE: u32 = 60;

/// Identities named in a summary line.
const EXAMPLES: usize = 5;

/// The audit file of one provisioner.
#[derive(Debug)]
pub(crate) struct AuditLog {
    path: PathBuf,
    file: Mutex<Option<File>>,
    metrics: Arc<Metrics>,
    throttle: Throttle,
    quiet: Mutex<Quiet>,
}

/// The quiet attempts of the current window.
#[derive(Debug)]
struct Quiet {
    /// A minute (shorter in tests).
    window: Duration,
    started: Instant,
    written: u32,
    /// By outcome, what was not written line by line.
    held: BTreeMap<&'static str, Held>,
}

/// Quiet attempts of one outcome held for a summary line.
#[derive(Debug)]
struct Held {
    instance: Arc<str>,
    count: u64,
    first: i64,
    last: i64,
    examples: Vec<String>,
}

impl Quiet {
    fn new(window: Duration) -> Quiet {
        Quiet {
            window,
            started: Instant::now(),
            written: 0,
            held: BTreeMap::new(),
        }
    }

    /// The summary lines of a window that is over (a new one starts), or none.
    fn roll(&mut self, now: Instant) -> Vec<String> {
        if now.duration_since(self.started) < self.window {
            return Vec::new();
        }
        self.started = now;
        self.written = 0;
        std::mem::take(&mut self.held)
            .into_iter()
            .map(|(outcome, held)| held.line(outcome))
            .collect()
    }
}

impl Held {
    fn line(&self, outcome: &str) -> String {
        serde_json::json!({
            "time": crate::clock::rfc3339(self.last as f64),
            "instance": &*self.instance,
            "outcome": outcome,
            "aggregated": self.count,
            "first": crate::clock::rfc3339(self.first as f64),
            "examples": self.examples,
        })
        .to_string()
    }
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
            quiet: Mutex::new(Quiet::new(Duration::from_secs(60))),
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

    /// Writes the line of a quiet attempt (`record`, encoded as `line`), or holds it
    /// for its outcome's summary once [`QUIET_LINES_PER_MINUTE`] were written in
    /// this minute.
    pub(crate) fn write_quiet(&self, record: &super::status::Record, line: &str) {
        let (summaries, write) = {
            let mut quiet = self.quiet.lock();
            let summaries = quiet.roll(Instant::now());
            let write = quiet.written < QUIET_LINES_PER_MINUTE;
            if write {
                quiet.written += 1;
            } else {
                let held = quiet.held.entry(record.outcome).or_insert_with(|| Held {
                    instance: Arc::clone(&record.instance),
                    count: 0,
                    first: record.time,
                    last: record.time,
                    examples: Vec::new(),
                });
                held.count += 1;
                held.last = record.time;
                if held.examples.len() < EXAMPLES {
                    held.examples.push(record.identity.as_str().to_string());
                }
            }
            (summaries, write)
        };
        for summary in summaries {
            self.write(&summary);
        }
        if write {
            self.write(line);
        }
    }

    /// When the minute whose held quiet attempts are not written yet ends: the
    /// finisher wakes then and calls [`AuditLog::flush_quiet`], so a summary is
    /// written when its minute ends, not at the next quiet attempt (`None`: none
    /// held).
    pub(crate) fn summary_due(&self) -> Option<Instant> {
        let quiet = self.quiet.lock();
        (!quiet.held.is_empty()).then(|| quiet.started + quiet.window)
    }

    /// Writes the summaries of a minute that is over (a quiet line that comes later
    /// would too); on stop, of the minute under way as well.
    pub(crate) fn flush_quiet(&self, all: bool) {
        let summaries = {
            let mut quiet = self.quiet.lock();
            if all {
                quiet.started = Instant::now() - quiet.window;
            }
            quiet.roll(Instant::now())
        };
        for summary in summaries {
            self.write(&summary);
        }
    }

    #[cfg(test)]
    fn with_quiet_window(self, window: Duration) -> AuditLog {
        *self.quiet.lock() = Quiet::new(window);
        self
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

impl Drop for AuditLog {
    fn drop(&mut self) {
        self.flush_quiet(true);
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

#[cfg(test)]
mod quiet_tests {
    use super::*;
    use crate::choria::identity::Identity;
    use crate::fleet::status::Record;
    use crate::test_nats_server::TempDir;

    fn record(n: u32, outcome: &'static str) -> Record {
        Record {
            time: 1_700_000_000 + i64::from(n),
            instance: Arc::from("p1"),
            identity: Identity::parse(&format!("ghost-{n}.example.net")).unwrap(),
            outcome,
            step: "inventory",
            duration_seconds: 1.0,
            attempt: 1,
            error: Some("no reply".into()),
            reason: None,
            facts: Default::default(),
        }
    }

    #[test]
    fn quiet_attempts_past_sixty_a_minute_are_summed_up_in_one_line_per_outcome() {
        let d = TempDir::new("audit-quiet");
        let path = d.path().join("audit.log");
        let metrics = Arc::new(Metrics::new("t").unwrap());
        let log = AuditLog::open(&path, metrics).with_quiet_window(Duration::from_millis(300));
        for n in 0..200 {
            let r = record(n, if n % 2 == 0 { "failed" } else { "unreachable" });
            log.write_quiet(&r, &serde_json::to_string(&r).unwrap());
        }
        let lines = |p: &Path| std::fs::read_to_string(p).unwrap().lines().count();
        assert_eq!(lines(&path), 60, "sixty written line by line");
        std::thread::sleep(Duration::from_millis(350));
        let r = record(500, "failed");
        log.write_quiet(&r, &serde_json::to_string(&r).unwrap());
        let text = std::fs::read_to_string(&path).unwrap();
        let all: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            all.len(),
            63,
            "two summaries, then the new window's first line"
        );
        let summed: Vec<(&str, u64)> = all[60..62]
            .iter()
            .map(|v| {
                (
                    v["outcome"].as_str().unwrap(),
                    v["aggregated"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(summed, [("failed", 70), ("unreachable", 70)]);
        assert_eq!(all[60]["examples"].as_array().unwrap().len(), EXAMPLES);
        assert_eq!(all[60]["first"], "2023-11-14T22:14:20Z");
        assert_eq!(all[62]["identity"], "ghost-500.example.net");
        // What is held when the log closes is written then.
        for n in 600..700 {
            let r = record(n, "failed");
            log.write_quiet(&r, &serde_json::to_string(&r).unwrap());
        }
        drop(log);
        let last = std::fs::read_to_string(&path).unwrap();
        let last: serde_json::Value = serde_json::from_str(last.lines().last().unwrap()).unwrap();
        assert_eq!(last["aggregated"], 41);
    }
}
