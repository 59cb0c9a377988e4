//! The control socket's door: a Unix socket of mode 0600 that takes one JSON line
//! from root or the daemon's own user, hands it to the [`Controller`] and writes
//! its answer (the protocol is in `fleet/control.rs`).
//!
//! What one client can cost, whoever it is:
//! - **who**: the peer's uid is read from the kernel (`SO_PEERCRED`); anyone but
//!   root and the daemon's user is refused, counted and logged (at most once a
//!   minute), before a byte is read;
//! - **how much**: a request of [`MAX_REQUEST`] bytes at most;
//! - **how long**: the whole request within [`REQUEST_DEADLINE`], however slowly it
//!   drips, and the answer within [`IO_TIMEOUT`];
//! - **how many**: [`MAX_CLIENTS`] at once, each on a thread of its own, so a held
//!   connection never delays another; one more is refused at once;
//! - **stopping**: the socket's drop shuts every client down and waits for none;
//!   the accepting thread is woken through a socket pair of its own, never through
//!   the socket's path, so it ends whatever happened to the file (removed, replaced
//!   by another socket or a plain file, its directory gone, descriptors
//!   exhausted); the file is removed only if it is still the one this process made.
//! - **one daemon a path**: before anything is removed or renamed, the daemon takes
//!   a lock on the path: an abstract Unix socket named after it, which the kernel
//!   frees when the process ends however it ends. A second daemon configured with
//!   the same path refuses to start and says so.
//!
//! Refusals are counted in `connections_refused{door="control"}` by reason
//! (`CONTROL_REFUSALS`).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::control::{ControlRequest, Controller, Operator, Response};
use crate::metrics::Metrics;
use crate::throttle::Throttle;

/// The most a request may be.
pub(crate) const MAX_REQUEST: usize = 4096;
/// The largest answer a client reads: a page of `pending` is 100 identities with
/// their facts, each bounded.
const MAX_ANSWER: u64 = 2 * 1024 * 1024;
/// How long a client may take to send its whole request.
pub(crate) const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// How long the answer may take to be written (and, for `send`, to come).
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Clients served at once.
pub(crate) const MAX_CLIENTS: usize = 8;

/// Why the control socket could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("control_socket {}: {what}", .path.display())]
pub(crate) struct OpenError {
    path: PathBuf,
    what: String,
}

/// What the accepting thread and the clients' threads share.
struct Door {
    controller: Arc<Controller>,
    metrics: Arc<Metrics>,
    stop: AtomicBool,
    /// The clients being served, by number: shut down on stop.
    clients: Mutex<Vec<(u64, UnixStream)>>,
    /// Refused peers, logged at most once a minute.
    refused_peers: Throttle,
}

impl Door {
    fn refused(&self, reason: &str) {
        self.metrics
            .connections_refused
            .with_label_values(&["control", reason])
            .inc();
    }

    /// The peer's credentials when it may use the socket: root or our own uid.
    fn admit_peer(&self, stream: &UnixStream) -> Option<Operator> {
        let peer = match crate::sys::peer_credentials(stream.as_fd()) {
            Ok(peer) => peer,
            Err(e) => {
                log::warn!("The control socket could not tell who connected: {e}; refused");
                self.refused("peer");
                return None;
            }
        };
        let ours = crate::proc_self::effective_uid();
        if peer.uid == 0 || Some(peer.uid) == ours {
            return Some(Operator::from_peer(peer));
        }
        self.refused("peer");
        if let Some(note) = self.refused_peers.ready_note("refused peers") {
            log::warn!(
                "The control socket refused uid {} (pid {}): only root and the provisioner's own user may use it{note}",
                peer.uid,
                peer.pid
            );
        }
        None
    }
}

/// The listening control socket; removed (if still ours), its thread ended and its
/// clients closed when dropped.
pub(crate) struct ControlSocket {
    path: PathBuf,
    /// The socket file's device and inode as this process made it.
    made: (u64, u64),
    door: Arc<Door>,
    /// Our end of the accepting thread's wake-up pair: shut down to wake it.
    wake: UnixStream,
    /// The lock on the path, held while the socket is open.
    _lock: UnixListener,
    thread: Option<JoinHandle<()>>,
}

/// The abstract socket name that locks `path`: the path made absolute (its
/// directory resolved, so two spellings of one path share a lock), hashed to stay
/// within the 107 bytes a socket name may have.
fn lock_name(path: &Path) -> std::io::Result<String> {
    let directory = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.canonicalize()?,
        _ => std::env::current_dir()?,
    };
    let file = path.file_name().unwrap_or_default();
    let absolute = directory.join(file);
    use md5::{Digest, Md5};
    let digest = Md5::digest(absolute.as_os_str().as_encoded_bytes());
    Ok(format!(
        "choria-provisioner.control.{}",
        hex::encode(digest)
    ))
}

/// Takes the lock on `path`; `Err` says why not.
fn lock(path: &Path) -> Result<UnixListener, OpenError> {
    let fail = |what: String| OpenError {
        path: path.to_path_buf(),
        what,
    };
    let name = lock_name(path).map_err(|e| fail(format!("cannot resolve its directory: {e}")))?;
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| fail(format!("cannot name its lock: {e}")))?;
    UnixListener::bind_addr(&address).map_err(|e| {
        fail(if e.kind() == std::io::ErrorKind::AddrInUse {
            "another choria-provisioner is running with this control_socket (it holds the socket's lock); stop it or give this one another path".to_string()
        } else {
            format!("cannot take its lock: {e}")
        })
    })
}

impl ControlSocket {
    /// Listens on `path` (mode 0600) and serves `controller` from a thread of its
    /// own. A socket left by a process that is gone is replaced; one another daemon
    /// holds the lock of, or one that answers, is not.
    pub(crate) fn open(
        path: &Path,
        controller: Arc<Controller>,
        metrics: Arc<Metrics>,
    ) -> Result<ControlSocket, OpenError> {
        let fail = |what: String| OpenError {
            path: path.to_path_buf(),
            what,
        };
        let lock = lock(path)?;
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
        let made = std::fs::symlink_metadata(path)
            .map(|m| (m.dev(), m.ino()))
            .map_err(|e| fail(e.to_string()))?;
        let (wake, woken) = UnixStream::pair().map_err(|e| fail(e.to_string()))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| fail(e.to_string()))?;
        let door = Arc::new(Door {
            controller,
            metrics,
            stop: AtomicBool::new(false),
            clients: Mutex::new(Vec::new()),
            refused_peers: Throttle::default(),
        });
        let accepting = Arc::clone(&door);
        let thread = std::thread::Builder::new()
            .name("control".into())
            .spawn(move || accept_loop(&listener, &woken, &accepting))
            .map_err(|e| fail(format!("cannot start its thread: {e}")))?;
        Ok(ControlSocket {
            path: path.to_path_buf(),
            made,
            door,
            wake,
            _lock: lock,
            thread: Some(thread),
        })
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        self.door.stop.store(true, Ordering::Release);
        for (_, client) in self.door.clients.lock().iter() {
            let _ = client.shutdown(std::net::Shutdown::Both);
        }
        // Wakes the accepting thread (its end reads the hang-up), which then sees
        // the stop: nothing depends on the socket's path.
        let _ = self.wake.shutdown(std::net::Shutdown::Both);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let still_ours =
            std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.made);
        if still_ours {
            let _ = std::fs::remove_file(&self.path);
        } else {
            log::warn!(
                "The control socket {} is no longer the one this provisioner made: left as it is",
                self.path.display()
            );
        }
    }
}

/// Waits until the listener has a connection or `woken` says stop; true for a
/// connection.
fn wait_for_client(listener: &UnixListener, woken: &UnixStream) -> bool {
    use crate::sys::{poll, PollFd};
    loop {
        let mut fds = [
            PollFd::new(listener.as_fd(), PollFd::IN),
            PollFd::new(woken.as_fd(), PollFd::IN),
        ];
        match poll(&mut fds, Duration::from_secs(1)) {
            Ok(_) if fds[1].ready() => return false,
            Ok(_) if fds[0].ready() => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // Cannot wait: try to accept (non-blocking) every 100 ms instead.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(100));
                return true;
            }
        }
    }
}

fn accept_loop(listener: &UnixListener, woken: &UnixStream, door: &Arc<Door>) {
    let mut pause = Duration::from_millis(5);
    let mut next_client = 0u64;
    loop {
        if !wait_for_client(listener, woken) || door.stop.load(Ordering::Acquire) {
            break;
        }
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => {
                // EMFILE and the like: wait it out (5 ms doubling to 1 s), never end.
                door.refused("accept_failed");
                log::warn!("The control socket could not accept a connection: {e}");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        pause = Duration::from_millis(5);
        if door.stop.load(Ordering::Acquire) {
            break;
        }
        let Some(operator) = door.admit_peer(&stream) else {
            continue;
        };
        let Some(id) = register(door, &stream, &mut next_client) else {
            door.refused("busy");
            let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = (&stream).write_all(&answer_line(&door.controller.refuse(format!(
                "busy: {MAX_CLIENTS} other requests are being served; try again"
            ))));
            continue;
        };
        let serving = Arc::clone(door);
        let started = std::thread::Builder::new()
            .name("control-client".into())
            .stack_size(128 * 1024)
            .spawn(move || {
                serve_one(&stream, &serving, operator);
                serving.clients.lock().retain(|(i, _)| *i != id);
            });
        if let Err(e) = started {
            log::warn!("The control socket could not start a thread for a client: {e}");
            door.clients.lock().retain(|(i, _)| *i != id);
        }
    }
}

/// Takes a place among the clients being served; `None` when all are taken.
fn register(door: &Door, stream: &UnixStream, next: &mut u64) -> Option<u64> {
    let mut clients = door.clients.lock();
    if clients.len() >= MAX_CLIENTS || door.stop.load(Ordering::Acquire) {
        return None;
    }
    let handle = stream.try_clone().ok()?;
    *next += 1;
    clients.push((*next, handle));
    Some(*next)
}

/// What reading a request came to.
enum Request {
    Line(Vec<u8>),
    TooLarge,
    TimedOut,
    Failed(std::io::Error),
}

/// Reads up to a newline within [`REQUEST_DEADLINE`] of now, whatever the pace.
fn read_request(stream: &UnixStream) -> Request {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    let mut line = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Request::TimedOut;
        }
        if let Err(e) = stream.set_read_timeout(Some(left)) {
            return Request::Failed(e);
        }
        let n = match (&*stream).read(&mut chunk) {
            Ok(0) => return Request::Line(line),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Request::TimedOut
            }
            Err(e) => return Request::Failed(e),
        };
        let got = &chunk[..n];
        let end = got.iter().position(|b| *b == b'\n');
        let take = end.map_or(n, |at| at + 1);
        if line.len() + take > MAX_REQUEST + 1 {
            return Request::TooLarge;
        }
        line.extend_from_slice(&got[..take]);
        if end.is_some() {
            return Request::Line(line);
        }
    }
}

/// Reads one request, answers it and closes the connection.
fn serve_one(stream: &UnixStream, door: &Door, operator: Operator) {
    let controller = &door.controller;
    let response = match read_request(stream) {
        Request::Failed(e) => {
            if !door.stop.load(Ordering::Acquire) {
                log::warn!("The control socket could not read a request: {e}");
            }
            return;
        }
        Request::TimedOut => {
            door.refused("timeout");
            if !door.stop.load(Ordering::Acquire) {
                log::warn!(
                    "The control socket dropped a client ({operator}) that did not send its request within {REQUEST_DEADLINE:?}"
                );
            }
            return;
        }
        Request::TooLarge => {
            door.refused("too_large");
            Response {
                error: Some(format!("the request is longer than {MAX_REQUEST} bytes")),
                ..controller.refuse(String::new())
            }
        }
        Request::Line(line) => match serde_json::from_slice::<ControlRequest>(&line) {
            Ok(request) => controller.handle(request, &operator),
            Err(e) => {
                controller.refuse(format!("not a request: {}", crate::json_text::describe(&e)))
            }
        },
    };
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let _ = (&*stream).write_all(&answer_line(&response));
}

fn answer_line(response: &Response) -> Vec<u8> {
    let mut text = serde_json::to_vec(response).unwrap_or_default();
    text.push(b'\n');
    text
}

/// Why a request could not be put to the daemon.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// Nothing answers on the socket.
    #[error("could not reach the provisioner on its control_socket {}: {error}", .path.display())]
    Unreachable {
        /// The control socket.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The request could not be sent or the answer read.
    #[error("no answer from the provisioner: {0}")]
    Exchange(std::io::Error),
    /// The answer is not a [`Response`]; what was wrong, without its values.
    #[error("the provisioner's answer is not understood: {0}")]
    Answer(String),
}

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
        .map_err(SendError::Exchange)?;
    // A daemon that refuses at once (busy) writes its answer and closes before
    // reading: the request then cannot be written, but the answer is there to read.
    let sent = (&stream).write_all(&text);
    let read = BufReader::new((&stream).take(MAX_ANSWER)).read_until(b'\n', &mut line);
    match (sent, read) {
        (_, Ok(n)) if n > 0 => {}
        (Err(e), _) | (Ok(()), Err(e)) => return Err(SendError::Exchange(e)),
        (Ok(()), Ok(_)) => {
            return Err(SendError::Exchange(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the provisioner closed the connection without answering",
            )))
        }
    }
    serde_json::from_slice(&line)
        .map_err(|e| SendError::Answer(crate::json_text::describe(&e).to_string()))
}

#[cfg(test)]
mod tests;
