//! An operator's pause through the binary's control socket: nothing is provisioned
//! while paused, the pause holds across a restart, and `resume` provisions every
//! waiting node at once; `/healthz`, `/readyz`, `/metrics` and `nodes` show it.
#![cfg(feature = "sim")]

mod support;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use support::daemon::{cli, cli_ok, nodes_ok};
use support::rig::*;
use support::{free_port, http_get, wait_for_port, NatsServer, TempDir};

/// The provisioner binary with a control socket, a pause file and a monitor port.
fn spawn(dir: &TempDir, url: &str, port: u16) -> Child {
    let child = support::daemon::spawn(
        dir,
        url,
        &format!(
            "workers: 2\nshutdown_timeout: 3s\nmonitor_host: 127.0.0.1\nmonitor_port: {port}\n\
             control_socket: {}\npause_file: {}\n",
            dir.path().join("control.sock").display(),
            dir.path().join("paused").display()
        ),
    );
    assert!(wait_for_port(port, Duration::from_secs(20)), "monitor up");
    let socket = dir.path().join("control.sock");
    wait_until("control socket", Duration::from_secs(10), || {
        socket.exists()
    });
    child
}

fn stop(mut child: Child) {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

fn health(port: u16) -> serde_json::Value {
    serde_json::from_str(&http_get(port, "/healthz").1).unwrap()
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_pause_holds_for_10_s_and_across_a_restart_and_resume_provisions_everyone() {
    let server = NatsServer::start();
    let dir = TempDir::new("operator-pause");
    let port = free_port();
    let first = spawn(&dir, &server.url(), port);
    assert_eq!(mode(&dir.path().join("control.sock")), 0o600);
    let out = cli_ok(&dir, &["pause", "--reason", "CA outage"]);
    assert!(out.contains("paused by an operator: CA outage"), "{out}");
    // Five nodes boot while paused: their startup events are not acted on.
    let fleet = sim(&server.url(), 5, |_| {});
    let paused_at = Instant::now();
    while paused_at.elapsed() < Duration::from_secs(10) {
        assert_eq!(fleet.progress().provisioned, 0, "provisioned while paused");
        std::thread::sleep(Duration::from_millis(250));
    }
    let h = health(port);
    assert_eq!(h["paused"], true);
    assert_eq!(h["operator_pause"]["reason"], "CA outage");
    let (status, body) = http_get(port, "/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("paused by an operator: CA outage"), "{body}");
    let (_, metrics) = http_get(port, "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("choria_provisioner_paused{") && l.ends_with(" 1")),
        "{metrics}"
    );
    let table = nodes_ok(port, &[]);
    assert!(
        table.contains("PAUSED by an operator since ") && table.contains(": CA outage"),
        "{table}"
    );
    // A restart is still paused: the pause was kept in pause_file.
    stop(first);
    let second = spawn(&dir, &server.url(), port);
    assert_eq!(health(port)["operator_pause"]["reason"], "CA outage");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        fleet.progress().provisioned,
        0,
        "provisioned after a restart"
    );
    // Resume: a discovery at once finds all five.
    let out = cli_ok(&dir, &["resume"]);
    assert!(out.contains("a discovery starts now"), "{out}");
    let resumed = Instant::now();
    wait_provisioned(&fleet, 5, Duration::from_secs(20));
    println!("provisioned {:?} after resume", resumed.elapsed());
    assert!(
        !dir.path().join("paused").exists(),
        "the pause file is gone"
    );
    let h = health(port);
    assert_eq!(h["paused"], false);
    assert_eq!(h["operator_pause"], serde_json::Value::Null);
    assert_eq!(http_get(port, "/readyz").0, 200);
    stop(second);
    assert!(!dir.path().join("control.sock").exists(), "socket removed");
}

#[test]
fn pause_without_a_control_socket_or_a_daemon_says_why() {
    let dir = TempDir::new("operator-pause-cli");
    dir.write("p.yaml", "helper: /bin/true\n");
    let o = cli(&dir, &["pause"]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(e.contains("sets no control_socket"), "{e}");
    let socket = dir.path().join("c.sock");
    dir.write(
        "p.yaml",
        &format!("helper: /bin/true\ncontrol_socket: {}\n", socket.display()),
    );
    let o = cli(&dir, &["resume"]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        e.contains(&format!(
            "could not reach the provisioner on its control_socket {}",
            socket.display()
        )),
        "{e}"
    );
}
