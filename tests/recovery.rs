//! Recovery that does not depend on who comes back first, against the real binary
//! and a real nats-server: a broker restarted while nodes boot, with the nodes
//! coming back on their own schedule (0 to 20 s after the connection, as
//! go-choria's reconnect back-off with jitter has them) and the provisioner before
//! or after them.
#![cfg(feature = "sim")]

mod support;

use std::time::{Duration, Instant};

use support::rig::*;
use support::{NatsServer, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_choria-provisioner");

/// The broker-restart scenario and the audit flood each take the machine's two
/// cores for long stretches; run in parallel, the restart's 30 s deadline would
/// measure the flood. They take turns.
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A daemon killed when the test ends.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One run: 100 nodes boot at 20 a second; once 30 are provisioned the broker is
/// restarted, and each node reconnects up to `spread` after the connection does.
/// Every node is provisioned within 30 s of the restart, once.
fn broker_restart_while_nodes_boot(spread: Duration) -> Duration {
    let _turn = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    let mut server = NatsServer::start();
    let dir = TempDir::new("recovery");
    let yaml = format!(
        "helper: {}\nworkers: 4\nshutdown_timeout: 3s\nloglevel: debug\n",
        support::daemon::example_helper().display()
    );
    let _daemon = Daemon(support::daemon::spawn_with(
        BIN,
        &dir,
        "p1.test",
        &server.url(),
        &yaml,
    ));
    let fleet = sim(&server.url(), 100, |o| {
        o.boot_rate = 20.0;
        o.reconnect_spread = Some(spread);
    });
    wait_until("30 provisioned", Duration::from_secs(60), || {
        fleet.progress().provisioned >= 30
    });
    server.stop();
    std::thread::sleep(Duration::from_millis(500));
    server.restart();
    let restarted = Instant::now();
    while fleet.progress().provisioned < 100 && restarted.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = restarted.elapsed();
    let left: Vec<String> = fleet
        .summary()
        .nodes
        .into_iter()
        .filter(|n| n.phase != choria_provisioner::sim::Phase::Provisioned)
        .map(|n| format!("{} {:?} {:?}", n.identity, n.phase, n.rpcs))
        .collect();
    assert!(
        left.is_empty(),
        "not provisioned 30 s after the restart: {left:?}; the daemon's log of them:\n{}",
        log_of(&dir, &left)
    );
    assert_provisioned(&fleet.summary(), |_| 1);
    fleet.stop();
    took
}

/// The lines of the daemon's log (at most 40) that name one of `nodes` (each
/// given as "<identity> ..."), for a failure's message.
fn log_of(dir: &TempDir, nodes: &[String]) -> String {
    let log = std::fs::read_to_string(dir.path().join("p.log")).unwrap_or_default();
    let names: Vec<&str> = nodes.iter().filter_map(|n| n.split(' ').next()).collect();
    log.lines()
        .filter(|line| names.iter().any(|name| line.contains(name)))
        .take(40)
        .collect::<Vec<_>>()
        .join("\n")
}

/// How many runs (`RECOVERY_RUNS`; `make recovery` runs 10).
fn runs() -> usize {
    std::env::var("RECOVERY_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

#[test]
fn nodes_that_come_back_up_to_20_s_after_a_broker_restart_are_all_provisioned_within_30_s() {
    for run in 0..runs() {
        let took = broker_restart_while_nodes_boot(Duration::from_secs(20));
        eprintln!(
            "run {}: every node provisioned {took:?} after the restart",
            run + 1
        );
    }
}

/// The daemon of `dir` with a control socket, up when the socket answers.
fn with_control_socket(dir: &TempDir, server: &NatsServer, identity: &str) -> Daemon {
    let yaml = format!(
        "helper: {}\nworkers: 2\nshutdown_timeout: 3s\ncontrol_socket: {}\npause_file: {}\n",
        support::daemon::example_helper().display(),
        dir.path().join("control.sock").display(),
        dir.path().join("paused").display(),
    );
    let daemon = Daemon(support::daemon::spawn_with(
        BIN,
        dir,
        identity,
        &server.url(),
        &yaml,
    ));
    wait_until("the control socket", Duration::from_secs(20), || {
        support::daemon::cli(dir, &["resume"]).status.success()
    });
    daemon
}

/// SIGTERM to `daemon`; how long it took to exit, and its exit code.
fn terminate(daemon: &mut Daemon) -> (Duration, Option<i32>) {
    let started = Instant::now();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(daemon.0.id() as i32, libc::SIGTERM) };
    let until = started + Duration::from_secs(20);
    while Instant::now() < until {
        if let Some(status) = daemon.0.try_wait().unwrap() {
            return (started.elapsed(), status.code());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (started.elapsed(), None)
}

/// The control socket's file removed, replaced by another process's socket, or by
/// a plain file, then SIGTERM: the daemon stops within its shutdown_timeout, and
/// leaves what is at the path alone.
#[test]
fn the_daemon_stops_whatever_happened_to_its_control_socket_s_file() {
    let server = NatsServer::start();
    for case in ["removed", "another-socket", "plain-file"] {
        let dir = TempDir::new(&format!("recovery-{case}"));
        let mut daemon = with_control_socket(&dir, &server, "p1.test");
        let path = dir.path().join("control.sock");
        std::fs::remove_file(&path).unwrap();
        let _other = match case {
            "another-socket" => Some(std::os::unix::net::UnixListener::bind(&path).unwrap()),
            "plain-file" => {
                std::fs::write(&path, b"not a socket").unwrap();
                None
            }
            _ => None,
        };
        let (took, code) = terminate(&mut daemon);
        assert_eq!(code, Some(0), "{case}: exited 0 within 20 s ({took:?})");
        assert!(took < Duration::from_secs(3), "{case}: took {took:?}");
        assert_eq!(path.exists(), case != "removed", "{case}: left alone");
    }
}

/// A second daemon configured with the control socket a live one holds exits 1 and
/// says why; the first keeps serving `pause`.
#[test]
fn a_second_daemon_on_a_held_control_socket_exits_one_and_the_first_keeps_serving() {
    let server = NatsServer::start();
    let dir = TempDir::new("recovery-twice");
    let mut first = with_control_socket(&dir, &server, "p1.test");
    let other = TempDir::new("recovery-twice-b");
    let yaml = format!(
        "helper: {}\ncontrol_socket: {}\npause_file: {}\n",
        support::daemon::example_helper().display(),
        dir.path().join("control.sock").display(),
        other.path().join("paused").display(),
    );
    let (cfg, yaml) = support::daemon::files(&other, "p2.test", &server.url(), &yaml);
    let second = std::process::Command::new(BIN)
        .args(["--config", &yaml.display().to_string()])
        .args(["--choria-config", &cfg.display().to_string()])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&second.stdout),
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(second.status.code(), Some(1), "{text}");
    assert!(
        text.contains("another choria-provisioner is running with this control_socket"),
        "{text}"
    );
    let out = support::daemon::cli(&dir, &["pause", "--reason", "still mine"]);
    assert!(out.status.success(), "{out:?}");
    let (_, code) = terminate(&mut first);
    assert_eq!(code, Some(0));
}

/// A flood of made-up names, then quiet, then SIGKILL after the minute: the
/// summary line of the attempts past the audit trail's sixty a minute was written
/// when the minute ended (not at a next quiet attempt that never came), and is not
/// lost with the process.
#[test]
fn a_flood_s_audit_summary_is_written_when_its_minute_ends_and_survives_a_sigkill() {
    let _turn = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    let server = NatsServer::start();
    let dir = TempDir::new("recovery-audit");
    let audit = dir.path().join("audit.log");
    let yaml = format!(
        "helper: {}\nworkers: 4\naudit_file: {}\n",
        support::daemon::example_helper().display(),
        audit.display(),
    );
    let mut daemon = Daemon(support::daemon::spawn_with(
        BIN,
        &dir,
        "p1.test",
        &server.url(),
        &yaml,
    ));
    let started = Instant::now();
    wait_until("the audit file", Duration::from_secs(20), || {
        dir.path().join("p.log").exists()
    });
    // 15 s of made-up names, then quiet: nothing after the flood could write the
    // summary but the end of the minute.
    let flood = support::hostile::GhostFlood::start(&server.url(), 200);
    flood.until(3_000, Duration::from_secs(30));
    flood.stop();
    let summed = || {
        std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .contains("\"aggregated\":")
    };
    wait_until("a summary line", Duration::from_secs(75), summed);
    let written_after = started.elapsed();
    daemon.0.kill().unwrap();
    daemon.0.wait().unwrap();
    assert!(summed(), "the line is on disk after SIGKILL");
    assert!(
        written_after >= Duration::from_secs(59),
        "written when the minute ended: {written_after:?}"
    );
}
