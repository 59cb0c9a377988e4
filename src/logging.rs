//! Log output as the Go daemon writes it, so existing log shippers keep parsing.
//!
//! Standard error and standard output get logrus-style text lines
//! (`time="…" level=info msg="…"`); a file gets one JSON object per line with the keys
//! in logrus' (alphabetical) order: `component`, `level`, `msg`, `time` (RFC 3339,
//! UTC). The file is opened for append and can be reopened after logrotate moved it
//! ([`LogHandle::reopen`], called on SIGHUP). Secrets are kept out of log lines by
//! their callers; this module never sees configuration values.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::{LogLevel, LogTarget};

/// Lets the signal handler reopen the log file.
#[derive(Debug, Clone, Default)]
pub(crate) struct LogHandle {
    file: Option<(PathBuf, Arc<Mutex<File>>)>,
}

impl LogHandle {
    /// Reopens the log file by name (after rotation); a no-op for stdout/stderr.
    pub(crate) fn reopen(&self) -> io::Result<()> {
        if let Some((path, file)) = &self.file {
            let fresh = open_append(path)?;
            *file.lock() = fresh;
        }
        Ok(())
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// A writer whose file can be swapped under it.
struct SharedFile(Arc<Mutex<File>>);

impl Write for SharedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.lock().flush()
    }
}

/// Installs the process logger. `debug` (from `--debug`) wins over `level`.
/// Fails if the log file cannot be opened or a logger is already installed.
pub(crate) fn init(target: &LogTarget, level: LogLevel, debug: bool) -> io::Result<LogHandle> {
    let level = if debug { LogLevel::Debug } else { level };
    let filter = match (target, level) {
        (LogTarget::Discard, _) => log::LevelFilter::Off,
        (_, LogLevel::Debug) => log::LevelFilter::Debug,
        (_, LogLevel::Info) => log::LevelFilter::Info,
        (_, LogLevel::Warn) => log::LevelFilter::Warn,
        (_, LogLevel::Error | LogLevel::Fatal) => log::LevelFilter::Error,
    };
    let mut builder = env_logger::Builder::new();
    builder
        .filter_level(filter)
        // The NATS client's own chatter stays at warnings unless debugging.
        .filter_module("nats", filter.min(log::LevelFilter::Warn));
    let mut handle = LogHandle::default();
    match target {
        LogTarget::File(path) => {
            let file = Arc::new(Mutex::new(open_append(path).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot open log file {}: {e}", path.display()),
                )
            })?));
            handle.file = Some((path.clone(), Arc::clone(&file)));
            builder
                .format(|buf, record| writeln!(buf, "{}", json_line(record, now_unix())))
                .target(env_logger::Target::Pipe(Box::new(SharedFile(file))));
        }
        LogTarget::Stdout => {
            builder
                .format(|buf, record| writeln!(buf, "{}", text_line(record, now_unix())))
                .target(env_logger::Target::Stdout);
        }
        LogTarget::Stderr | LogTarget::Discard => {
            builder
                .format(|buf, record| writeln!(buf, "{}", text_line(record, now_unix())))
                .target(env_logger::Target::Stderr);
        }
    }
    builder
        .try_init()
        .map_err(|e| io::Error::other(format!("cannot install logger: {e}")))?;
    Ok(handle)
}

fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// logrus level names (`warning`, not `warn`).
fn level_name(level: log::Level) -> &'static str {
    match level {
        log::Level::Error => "error",
        log::Level::Warn => "warning",
        log::Level::Info => "info",
        log::Level::Debug => "debug",
        log::Level::Trace => "trace",
    }
}

/// The module that logged, without the crate prefix (`fleet::events` → `events`).
fn component(record: &log::Record) -> String {
    let target = record.target();
    target.rsplit("::").next().unwrap_or(target).to_string()
}

/// One JSON log line: `{"component":…,"level":…,"msg":…,"time":…}`.
pub(crate) fn json_line(record: &log::Record, unix: f64) -> String {
    serde_json::json!({
        "component": component(record),
        "level": level_name(record.level()),
        "msg": record.args().to_string(),
        "time": crate::clock::rfc3339(unix),
    })
    .to_string()
}

/// One logrus-style text line: `time="…" level=info msg="…" component=…`.
pub(crate) fn text_line(record: &log::Record, unix: f64) -> String {
    format!(
        "time=\"{}\" level={} msg={} component={}",
        crate::clock::rfc3339(unix),
        level_name(record.level()),
        serde_json::Value::String(record.args().to_string()),
        component(record)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_record<R>(msg: &str, f: impl FnOnce(&log::Record) -> R) -> R {
        f(&log::Record::builder()
            .args(format_args!("{msg}"))
            .level(log::Level::Warn)
            .target("choria_provisioner::fleet::events")
            .build())
    }

    #[test]
    fn json_lines_as_logrus_writes_them() {
        let line = with_record("Adding \"n1\" to the work queue", |r| json_line(r, 0.0));
        assert_eq!(
            line,
            r#"{"component":"events","level":"warning","msg":"Adding \"n1\" to the work queue","time":"1970-01-01T00:00:00Z"}"#
        );
    }

    #[test]
    fn text_lines_quote_the_message() {
        let line = with_record("a b", |r| text_line(r, 0.0));
        assert_eq!(
            line,
            r#"time="1970-01-01T00:00:00Z" level=warning msg="a b" component=events"#
        );
    }
}
