//! The control socket against real clients: what it answers, and what a slow,
//! oversized or excess client costs (nothing another client or a stop notices).

use super::*;
use crate::config::Pause;
use crate::test_nats_server::TempDir;

fn pause() -> Arc<Pause> {
    Arc::new(Pause::new(prometheus::IntGauge::new("p", "p").unwrap()))
}

fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics::new("lon").unwrap())
}

/// A control socket at `control.sock` in a new directory named `name`: the
/// directory (the caller keeps it alive), the socket's path, its pause flag, and it.
fn opened(name: &str) -> (TempDir, PathBuf, Arc<Pause>, ControlSocket) {
    let dir = TempDir::new(name);
    let path = dir.path().join("control.sock");
    let flag = pause();
    let controller = Arc::new(Controller::new(Arc::clone(&flag), None));
    let socket = ControlSocket::open(&path, controller, metrics()).unwrap();
    (dir, path, flag, socket)
}

fn refused(socket: &ControlSocket, reason: &str) -> u64 {
    socket
        .door
        .metrics
        .connections_refused
        .with_label_values(&["control", reason])
        .get()
}

/// A client that sends one byte of a request every 300 ms, for at most 6 s.
fn dripping(path: &Path) -> (UnixStream, JoinHandle<()>) {
    let stream = UnixStream::connect(path).unwrap();
    let writer = stream.try_clone().unwrap();
    let thread = std::thread::spawn(move || {
        for byte in br#"{"command": "pause", "reason": "slowly"}"#.iter().take(20) {
            if (&writer).write_all(&[*byte]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    (stream, thread)
}

/// True once the daemon closed `stream` (within `within`).
fn closed_within(stream: &UnixStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 256];
    match (&*stream).read(&mut buf) {
        Ok(0) => true,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        Ok(_) => false,
    }
}

#[test]
fn the_socket_is_0600_answers_one_line_and_refuses_what_is_not_a_request() {
    let (_dir, path, flag, socket) = opened("control-socket");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // Another daemon on the same socket is refused by the lock.
    let second = ControlSocket::open(&path, Arc::new(Controller::new(pause(), None)), metrics());
    assert!(second.is_err_and(|e| e
        .to_string()
        .contains("another choria-provisioner is running with this control_socket")));
    // A socket another program listens on is not replaced.
    let other = path.with_file_name("other.sock");
    let _listening = UnixListener::bind(&other).unwrap();
    let third = ControlSocket::open(&other, Arc::new(Controller::new(pause(), None)), metrics());
    assert!(third.is_err_and(|e| e
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
        [vec![b' '; MAX_REQUEST + 10], b"\n".to_vec()].concat(),
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
}

#[test]
fn a_dripping_client_is_dropped_at_the_deadline_and_never_delays_another() {
    let (_dir, path, flag, socket) = opened("control-drip");
    let started = Instant::now();
    let (slow, dripper) = dripping(&path);
    std::thread::sleep(Duration::from_millis(100));
    let asked = Instant::now();
    let r = send(
        &path,
        &ControlRequest::Pause {
            reason: "now".into(),
        },
    )
    .unwrap();
    assert!(r.ok && flag.paused(), "{r:?}");
    assert!(
        asked.elapsed() < Duration::from_millis(500),
        "{:?}",
        asked.elapsed()
    );
    assert!(closed_within(&slow, Duration::from_secs(3)));
    let dropped_after = started.elapsed();
    assert!(
        dropped_after >= REQUEST_DEADLINE
            && dropped_after < REQUEST_DEADLINE + Duration::from_secs(1),
        "{dropped_after:?}"
    );
    assert_eq!(refused(&socket, "timeout"), 1);
    assert_eq!(
        flag.operator().unwrap().reason,
        "now",
        "the slow pause never came through"
    );
    dripper.join().unwrap();
    drop(socket);
}

#[test]
fn clients_beyond_the_cap_are_told_busy_and_a_stop_waits_on_none() {
    let (_dir, path, _flag, socket) = opened("control-busy");
    let held: Vec<_> = (0..MAX_CLIENTS).map(|_| dripping(&path)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let r = send(&path, &ControlRequest::Status).unwrap();
    assert!(
        !r.ok && r.error.as_deref().unwrap_or("").starts_with("busy"),
        "{r:?}"
    );
    assert_eq!(refused(&socket, "busy"), 1);
    let stopping = Instant::now();
    drop(socket);
    assert!(
        stopping.elapsed() < Duration::from_millis(500),
        "{:?}",
        stopping.elapsed()
    );
    for (stream, thread) in held {
        assert!(closed_within(&stream, Duration::from_secs(1)));
        thread.join().unwrap();
    }
    assert!(!path.exists());
}

#[test]
fn a_request_dripping_past_the_size_cap_is_refused_without_being_held() {
    let (_dir, path, _flag, socket) = opened("control-big");
    let stream = UnixStream::connect(&path).unwrap();
    // No newline: the cap, not the line's end, ends the read.
    (&stream).write_all(&[b'{'; MAX_REQUEST + 2]).unwrap();
    let mut answer = String::new();
    BufReader::new(&stream).read_line(&mut answer).unwrap();
    let r: Response = serde_json::from_str(&answer).unwrap();
    assert!(r.error.unwrap().contains("longer than 4096 bytes"));
    assert_eq!(refused(&socket, "too_large"), 1);
    drop(socket);
}

/// The socket's file removed, replaced by another process's socket, or by a plain
/// file: the stop ends the accepting thread at once all the same, and leaves
/// whatever is at the path now alone.
#[test]
fn a_stop_never_depends_on_the_socket_s_file() {
    for (name, replace) in [
        ("removed", None),
        ("another-socket", Some(true)),
        ("plain-file", Some(false)),
    ] {
        let (_dir, path, _flag, socket) = opened(&format!("control-{name}"));
        std::fs::remove_file(&path).unwrap();
        let _other = match replace {
            Some(true) => Some(UnixListener::bind(&path).unwrap()),
            Some(false) => {
                std::fs::write(&path, b"not a socket").unwrap();
                None
            }
            None => None,
        };
        let started = Instant::now();
        drop(socket);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{name}: the stop waited {:?}",
            started.elapsed()
        );
        assert_eq!(path.exists(), replace.is_some(), "{name}: left alone");
    }
}

/// A second socket on a path a live one holds is refused with the reason, before
/// anything is removed; the first goes on serving; once it is closed, the path is
/// free again.
#[test]
fn a_second_daemon_on_the_same_path_is_refused_and_the_first_keeps_serving() {
    let (_dir, path, flag, socket) = opened("control-twice");
    let controller = Arc::new(Controller::new(pause(), None));
    let e = ControlSocket::open(&path, Arc::clone(&controller), metrics())
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("another choria-provisioner is running"), "{e}");
    // The same path spelt another way shares the lock.
    let dotted = path.parent().unwrap().join(".").join("control.sock");
    assert!(ControlSocket::open(&dotted, Arc::clone(&controller), metrics()).is_err());
    let answer = send(
        &path,
        &ControlRequest::Pause {
            reason: "still here".into(),
        },
    )
    .unwrap();
    assert!(answer.ok && flag.paused(), "the first still serves");
    drop(socket);
    let again = ControlSocket::open(&path, controller, metrics()).unwrap();
    drop(again);
}
