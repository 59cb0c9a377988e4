//! The operator's control socket (`control_socket`): `choria-provisioner pause`,
//! `resume` and `status` talk to the running daemon through it.
//!
//! A Unix socket of mode 0600 (created under a temporary name, made 0600, then
//! renamed into place, so it is never reachable with wider rights). One request per
//! connection, one JSON line each way:
//!
//! ```text
//! {"command": "pause", "reason": "CA outage"}  ->  {"ok": true, "paused": true, "operator_pause": {...}, "message": "..."}
//! {"command": "resume"}                        ->  {"ok": true, "paused": false, "operator_pause": null, "message": "..."}
//! {"command": "status"}                        ->  {"ok": true, ...}
//! anything else                                ->  {"ok": false, "error": "..."}
//! ```
//!
//! Connections are served one at a time on one thread, each bounded to 4 KiB and
//! 2 s. An operator's pause is kept in `pause_file` (when set) so that it holds
//! across a restart until `resume`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Sender;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::Fleet;
use crate::config::{OperatorPause, Pause};

/// The most a request may be.
const MAX_REQUEST: u64 = 4096;
/// How long one connection may take to send its request or read the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest reason kept.
pub(crate) const MAX_REASON: usize = 256;

/// What an operator asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum ControlRequest {
    /// Stop provisioning until `resume`.
    Pause {
        /// Why (shown in `/healthz`, `/readyz`, `nodes` and the log).
        #[serde(default)]
        reason: String,
    },
    /// Lift an operator's pause and discover at once.
    Resume,
    /// Only say how things are.
    Status,
}

/// The daemon's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Response {
    /// Whether the request was carried out.
    pub ok: bool,
    /// Whether provisioning is paused now (by an operator or the election).
    #[serde(default)]
    pub paused: bool,
    /// The operator's pause, if any.
    pub operator_pause: Option<OperatorPause>,
    /// What was done, for the operator.
    #[serde(default)]
    pub message: String,
    /// Why the request was refused (`ok` false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Why a pause reason is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReasonError {
    /// Over [`MAX_REASON`] characters.
    TooLong,
    /// A control character (a newline, an escape sequence).
    ControlCharacter,
}

impl std::fmt::Display for ReasonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReasonError::TooLong => {
                write!(f, "the reason is longer than {MAX_REASON} characters")
            }
            ReasonError::ControlCharacter => write!(f, "the reason holds control characters"),
        }
    }
}

fn check_reason(reason: &str) -> Result<(), ReasonError> {
    if reason.chars().count() > MAX_REASON {
        return Err(ReasonError::TooLong);
    }
    if reason.chars().any(char::is_control) {
        return Err(ReasonError::ControlCharacter);
    }
    Ok(())
}

/// The pause file could not be written or removed.
#[derive(Debug)]
pub(crate) struct PauseFileError {
    path: PathBuf,
    writing: bool,
    error: std::io::Error,
}

impl std::fmt::Display for PauseFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.writing { "write" } else { "remove" };
        write!(
            f,
            "could not {what} the pause file {}: {}",
            self.path.display(),
            self.error
        )
    }
}

impl std::error::Error for PauseFileError {}

/// What the daemon lets the control socket reach once it runs: the scheduler (its
/// queue is emptied on pause) and the discovery trigger (pulled on resume).
pub(crate) struct DaemonHooks {
    /// The scheduler.
    pub fleet: Arc<Fleet>,
    /// Starts a discovery now.
    pub discover: Sender<()>,
}

/// Carries out operators' requests: the pause flag, the pause file, the daemon.
pub(crate) struct Controller {
    pause: Arc<Pause>,
    pause_file: Option<PathBuf>,
    daemon: Mutex<Option<DaemonHooks>>,
}

impl Controller {
    /// A controller for `pause`, keeping operators' pauses in `pause_file`.
    pub(crate) fn new(pause: Arc<Pause>, pause_file: Option<PathBuf>) -> Controller {
        Controller {
            pause,
            pause_file,
            daemon: Mutex::new(None),
        }
    }

    /// Takes up a pause kept in the pause file by an earlier run. A file that cannot
    /// be read or decoded still pauses (an operator wrote it), with a reason that
    /// says so.
    pub(crate) fn restore(&self) {
        let Some(path) = &self.pause_file else {
            return;
        };
        let text = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                log::error!(
                    "Could not read the pause file {}: {e}; staying paused until resume",
                    path.display()
                );
                self.pause.hold_for_operator(OperatorPause {
                    reason: format!("the pause file could not be read: {}", e.kind()),
                    since: crate::clock::unix_seconds(),
                });
                return;
            }
        };
        let held = match serde_json::from_slice::<OperatorPause>(&text) {
            Ok(p) if check_reason(&p.reason).is_ok() => p,
            _ => OperatorPause {
                reason: "the pause file could not be decoded".into(),
                since: crate::clock::unix_seconds(),
            },
        };
        log::warn!(
            "Paused by an operator since {} (kept in {}): {}; run choria-provisioner resume to go on",
            crate::clock::rfc3339(held.since as f64),
            path.display(),
            shown(&held.reason)
        );
        self.pause.hold_for_operator(held);
    }

    /// From now on, a pause empties `hooks.fleet`'s queue and a resume discovers.
    pub(crate) fn attach(&self, hooks: DaemonHooks) {
        *self.daemon.lock() = Some(hooks);
    }

    /// Carries out `request`.
    pub(crate) fn handle(&self, request: ControlRequest) -> Response {
        match request {
            ControlRequest::Pause { reason } => {
                if let Err(e) = check_reason(&reason) {
                    return self.refuse(e.to_string());
                }
                let held = OperatorPause {
                    reason,
                    since: crate::clock::unix_seconds(),
                };
                self.pause.hold_for_operator(held.clone());
                log::warn!("Paused by an operator: {}", shown(&held.reason));
                if let Some(hooks) = &*self.daemon.lock() {
                    // Queued nodes are forgotten, as when leadership is lost: the
                    // discovery after resume finds them again.
                    hooks.fleet.remove_all();
                }
                let message = match self.keep(&held) {
                    Ok(Some(path)) => format!(
                        "paused; the pause holds across restarts until resume (kept in {})",
                        path.display()
                    ),
                    Ok(None) => {
                        "paused until resume or the end of this process (no pause_file is set)"
                            .into()
                    }
                    Err(e) => {
                        log::error!("{e}");
                        format!("paused, but {e}: a restart would not be paused")
                    }
                };
                self.answer(message)
            }
            ControlRequest::Resume => {
                let lifted = self.pause.release_operator();
                if let Err(e) = self.forget() {
                    log::error!("{e}");
                    self.pause
                        .hold_for_operator(lifted.clone().unwrap_or(OperatorPause {
                            reason: String::new(),
                            since: crate::clock::unix_seconds(),
                        }));
                    return self.refuse(format!("{e}: still paused"));
                }
                let message = match lifted {
                    None => "provisioning was not paused by an operator".to_string(),
                    Some(_) => {
                        log::warn!("Resumed by an operator");
                        let discovering = match &*self.daemon.lock() {
                            Some(hooks) => hooks.discover.try_send(()).is_ok(),
                            None => false,
                        };
                        if discovering {
                            "resumed; a discovery starts now".to_string()
                        } else {
                            "resumed".to_string()
                        }
                    }
                };
                let message = if self.pause.paused() {
                    format!("{message}; still paused by the election (this instance does not lead)")
                } else {
                    message
                };
                self.answer(message)
            }
            ControlRequest::Status => self.answer(String::new()),
        }
    }

    fn answer(&self, message: String) -> Response {
        Response {
            ok: true,
            paused: self.pause.paused(),
            operator_pause: self.pause.operator(),
            message,
            error: None,
        }
    }

    fn refuse(&self, error: String) -> Response {
        Response {
            ok: false,
            error: Some(error),
            ..self.answer(String::new())
        }
    }

    /// Writes the pause file (whole, through a rename); the path written, if any.
    fn keep(&self, held: &OperatorPause) -> Result<Option<&Path>, PauseFileError> {
        let Some(path) = &self.pause_file else {
            return Ok(None);
        };
        let temporary = path.with_extension("tmp");
        // Two plain fields: serialising cannot fail.
        let text = serde_json::to_vec(held).unwrap_or_default();
        std::fs::write(&temporary, text)
            .and_then(|()| std::fs::rename(&temporary, path))
            .map_err(|error| PauseFileError {
                path: path.clone(),
                writing: true,
                error,
            })?;
        Ok(Some(path))
    }

    /// Removes the pause file.
    fn forget(&self) -> Result<(), PauseFileError> {
        let Some(path) = &self.pause_file else {
            return Ok(());
        };
        match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(PauseFileError {
                path: path.clone(),
                writing: false,
                error,
            }),
        }
    }
}

/// A reason as logged: quoted, or "no reason given".
fn shown(reason: &str) -> String {
    if reason.is_empty() {
        "no reason given".into()
    } else {
        format!("{reason:?}")
    }
}

/// Why the control socket could not be opened.
#[derive(Debug)]
pub(crate) struct OpenError {
    path: PathBuf,
    what: String,
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "control_socket {}: {}", self.path.display(), self.what)
    }
}

impl std::error::Error for OpenError {}

/// The listening control socket; removed and its thread ended when dropped.
pub(crate) struct ControlSocket {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ControlSocket {
    /// Listens on `path` (mode 0600) and serves `controller` on a thread of its own.
    /// A socket left by a process that is gone is replaced; one that answers is not.
    pub(crate) fn open(
        path: &Path,
        controller: Arc<Controller>,
    ) -> Result<ControlSocket, OpenError> {
        let fail = |what: String| OpenError {
            path: path.to_path_buf(),
            what,
        };
        if UnixStream::connect(path).is_ok() {
            return Err(fail("another process is listening on it".into()));
        }
        let temporary = path.with_extension(format!("tmp-{}", std::process::id()));
        let _ = std::fs::remove_file(&temporary);
        let listener = UnixListener::bind(&temporary).map_err(|e| fail(e.to_string()))?;
        let placed = std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o600))
            .and_then(|()| std::fs::rename(&temporary, path));
        if let Err(e) = placed {
            let _ = std::fs::remove_file(&temporary);
            return Err(fail(e.to_string()));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("control".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if stopping.load(Ordering::Acquire) {
                        break;
                    }
                    match stream {
                        Ok(stream) => serve_one(stream, &controller),
                        Err(e) => {
                            log::warn!("The control socket could not accept a connection: {e}");
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                }
            })
            .map_err(|e| fail(format!("cannot start its thread: {e}")))?;
        Ok(ControlSocket {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accepting thread, which then sees the stop.
        let _ = UnixStream::connect(&self.path);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Reads one request, answers it and closes the connection.
fn serve_one(stream: UnixStream, controller: &Controller) {
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let mut line = Vec::new();
    let read = BufReader::new((&stream).take(MAX_REQUEST + 1)).read_until(b'\n', &mut line);
    let response = match read {
        Err(e) => {
            log::warn!("The control socket could not read a request: {e}");
            return;
        }
        Ok(_) if line.len() as u64 > MAX_REQUEST => Response {
            error: Some(format!("the request is longer than {MAX_REQUEST} bytes")),
            ..controller.refuse(String::new())
        },
        Ok(_) => match serde_json::from_slice::<ControlRequest>(&line) {
            Ok(request) => controller.handle(request),
            Err(e) => {
                controller.refuse(format!("not a request: {}", crate::json_text::describe(&e)))
            }
        },
    };
    let mut text = serde_json::to_vec(&response).unwrap_or_default();
    text.push(b'\n');
    let _ = (&stream).write_all(&text);
}

/// Why a request could not be put to the daemon.
#[derive(Debug)]
pub(crate) enum SendError {
    /// Nothing answers on the socket.
    Unreachable {
        /// The control socket.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The request could not be sent or the answer read.
    Exchange(std::io::Error),
    /// The answer is not a [`Response`]; what was wrong, without its values.
    Answer(String),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Unreachable { path, error } => write!(
                f,
                "could not reach the provisioner on its control_socket {}: {error}",
                path.display()
            ),
            SendError::Exchange(e) => write!(f, "no answer from the provisioner: {e}"),
            SendError::Answer(e) => write!(f, "the provisioner's answer is not understood: {e}"),
        }
    }
}

impl std::error::Error for SendError {}

/// Sends `request` to the daemon listening on `path` and returns its answer.
pub(crate) fn send(path: &Path, request: &ControlRequest) -> Result<Response, SendError> {
    let stream = UnixStream::connect(path).map_err(|error| SendError::Unreachable {
        path: path.to_path_buf(),
        error,
    })?;
    // Requests are small plain values: serialising cannot fail.
    let mut text = serde_json::to_vec(request).unwrap_or_default();
    text.push(b'\n');
    let mut line = Vec::new();
    stream
        .set_read_timeout(Some(IO_TIMEOUT * 2))
        .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)))
        .and_then(|()| (&stream).write_all(&text))
        .and_then(|()| BufReader::new((&stream).take(64 * 1024)).read_until(b'\n', &mut line))
        .map_err(SendError::Exchange)?;
    serde_json::from_slice(&line)
        .map_err(|e| SendError::Answer(crate::json_text::describe(&e).to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "choria-prov-control-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn pause() -> Arc<Pause> {
        Arc::new(Pause::new(prometheus::IntGauge::new("p", "p").unwrap()))
    }

    #[test]
    fn a_pause_is_kept_in_its_file_until_resume_and_taken_up_again_at_start() {
        let dir = dir("keep");
        let file = dir.join("pause");
        let flag = pause();
        let controller = Controller::new(Arc::clone(&flag), Some(file.clone()));
        let r = controller.handle(ControlRequest::Pause {
            reason: "CA outage".into(),
        });
        assert!(r.ok && r.paused, "{r:?}");
        assert_eq!(r.operator_pause.as_ref().unwrap().reason, "CA outage");
        assert!(r.message.contains("holds across restarts"), "{r:?}");
        assert!(flag.paused());
        // A new process: paused again from the file.
        let again = pause();
        Controller::new(Arc::clone(&again), Some(file.clone())).restore();
        assert_eq!(again.operator().unwrap().reason, "CA outage");
        let r = controller.handle(ControlRequest::Resume);
        assert!(r.ok && !r.paused && r.operator_pause.is_none(), "{r:?}");
        assert!(!file.exists());
        let fresh = pause();
        Controller::new(Arc::clone(&fresh), Some(file.clone())).restore();
        assert!(!fresh.paused());
        // A file that does not decode still pauses.
        std::fs::write(&file, b"{\"reason\": 7}").unwrap();
        Controller::new(Arc::clone(&fresh), Some(file)).restore();
        assert_eq!(
            fresh.operator().unwrap().reason,
            "the pause file could not be decoded"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn reasons_are_bounded_and_free_of_control_characters() {
        let controller = Controller::new(pause(), None);
        for bad in [
            "a\nb".to_string(),
            "\u{1b}[31m".into(),
            "x".repeat(MAX_REASON + 1),
        ] {
            let r = controller.handle(ControlRequest::Pause { reason: bad });
            assert!(!r.ok && !r.paused, "{r:?}");
        }
        let r = controller.handle(ControlRequest::Pause {
            reason: "é".repeat(MAX_REASON),
        });
        assert!(r.ok && r.paused, "{r:?}");
    }

    #[test]
    fn the_socket_is_0600_answers_one_line_and_refuses_what_is_not_a_request() {
        let dir = dir("socket");
        let path = dir.join("control.sock");
        let flag = pause();
        let socket =
            ControlSocket::open(&path, Arc::new(Controller::new(Arc::clone(&flag), None))).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Another daemon on the same socket is refused.
        let second = ControlSocket::open(&path, Arc::new(Controller::new(pause(), None)));
        assert!(second.is_err_and(|e| e
            .to_string()
            .ends_with("another process is listening on it")));
        let r = send(&path, &ControlRequest::Pause { reason: "x".into() }).unwrap();
        assert!(r.ok && r.paused);
        assert!(flag.paused());
        let r = send(&path, &ControlRequest::Status).unwrap();
        assert_eq!(r.operator_pause.unwrap().reason, "x");
        // Garbage, an unknown command and an oversized request: refused, not fatal.
        for raw in [
            b"not json\n".to_vec(),
            b"{\"command\": \"reboot\"}\n".to_vec(),
            [vec![b' '; MAX_REQUEST as usize + 10], b"\n".to_vec()].concat(),
        ] {
            let stream = UnixStream::connect(&path).unwrap();
            (&stream).write_all(&raw).unwrap();
            let mut answer = String::new();
            BufReader::new(&stream).read_line(&mut answer).unwrap();
            let r: Response = serde_json::from_str(&answer).unwrap();
            assert!(!r.ok && r.error.is_some(), "{answer}");
        }
        // A client that sends nothing is given up after the timeout; the next is served.
        let idle = UnixStream::connect(&path).unwrap();
        let r = send(&path, &ControlRequest::Resume).unwrap();
        assert!(r.ok && !r.paused, "{r:?}");
        drop(idle);
        drop(socket);
        assert!(!path.exists(), "removed when closed");
        let _ = std::fs::remove_dir_all(dir);
    }
}
