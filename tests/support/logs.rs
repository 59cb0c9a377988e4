//! The `log` records of this test process, kept for assertions on log lines.
//!
//! The `log` logger is process-wide: the first call of [`capture`] installs one that
//! keeps every record at `info` and above, and every later call shares it. Tests run
//! in parallel in one process, so a test must pick out its own lines (by an identity
//! or a path only it uses); [`lines_with`] does that.

use std::sync::{Mutex, OnceLock};

static LINES: OnceLock<Mutex<Vec<String>>> = OnceLock::new();

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            let line = format!("{} {}", record.level(), record.args());
            lines().lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    }

    fn flush(&self) {}
}

fn lines() -> &'static Mutex<Vec<String>> {
    LINES.get_or_init(|| Mutex::new(Vec::new()))
}

/// Starts capturing (once per process). Panics if another logger was installed
/// first, since the assertions on log lines would then see nothing.
pub fn capture() {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    let ok = *INSTALLED.get_or_init(|| {
        let ok = log::set_boxed_logger(Box::new(Capture)).is_ok();
        if ok {
            log::set_max_level(log::LevelFilter::Info);
        }
        ok
    });
    assert!(
        ok,
        "another logger was installed before support::logs::capture"
    );
}

/// Every captured line containing `needle`.
pub fn lines_with(needle: &str) -> Vec<String> {
    lines()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|l| l.contains(needle))
        .cloned()
        .collect()
}

/// Every captured line, from every test so far.
pub fn all_lines() -> Vec<String> {
    lines().lock().unwrap_or_else(|e| e.into_inner()).clone()
}
