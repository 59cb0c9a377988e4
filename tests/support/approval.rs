//! The real binary with `approval: required` (the approval tests' rig): a counting
//! helper, a control socket, a pause file, an audit trail and a monitor port.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use choria_provisioner::sim::{identity, SimOptions};

use super::daemon::{cli, cli_ok};
use super::rig::wait_until;
use super::{http_get, wait_for_port, TempDir};

/// Cargo names the binary to integration tests only; the example that shares
/// this module finds it on PATH.
const BIN: &str = match option_env!("CARGO_BIN_EXE_choria-provisioner") {
    Some(bin) => bin,
    None => "choria-provisioner",
};

/// A helper that notes each run in `helper-runs`, then configures the node as the
/// example helper does.
pub fn counting_helper(dir: &TempDir) -> PathBuf {
    dir.script(
        "counting-helper.sh",
        &format!(
            "#!/bin/sh\necho run >> {}\nexec {}\n",
            dir.path().join("helper-runs").display(),
            super::daemon::example_helper().display()
        ),
    )
}

pub fn helper_runs(dir: &TempDir) -> usize {
    std::fs::read_to_string(dir.path().join("helper-runs"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// The daemon's YAML: approval required, a control socket, a pause file (the
/// approval file goes beside it), an audit trail, a monitor port.
/// `extra` may name other `approval_facts`.
pub fn settings(dir: &TempDir, port: u16, extra: &str) -> String {
    let facts = if extra.contains("approval_facts:") {
        ""
    } else {
        "approval_facts: [networking.fqdn, os.name, role]\n"
    };
    format!(
        "helper: {}\nworkers: 4\nshutdown_timeout: 3s\nmonitor_host: 127.0.0.1\nmonitor_port: {port}\n\
         control_socket: {}\npause_file: {}\naudit_file: {}\napproval: required\n\
         {facts}{extra}",
        counting_helper(dir).display(),
        dir.path().join("control.sock").display(),
        dir.path().join("paused").display(),
        dir.path().join("audit.log").display(),
    )
}

/// A daemon killed if the test fails before it stops it.
pub struct Daemon(pub Option<Child>);

impl Daemon {
    pub fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The binary as `identity`, up when its monitor port answers and its control
/// socket takes requests.
pub fn spawn(dir: &TempDir, identity: &str, url: &str, port: u16, extra: &str) -> Daemon {
    let daemon = launch(dir, identity, url, port, extra);
    ready(dir, port);
    daemon
}

/// The binary as `identity`, started.
pub fn launch(dir: &TempDir, identity: &str, url: &str, port: u16, extra: &str) -> Daemon {
    let child = super::daemon::spawn_with(BIN, dir, identity, url, &settings(dir, port, extra));
    Daemon(Some(child))
}

/// Waits until the daemon of `dir` answers on its monitor port and control socket.
pub fn ready(dir: &TempDir, port: u16) {
    assert!(wait_for_port(port, Duration::from_secs(20)), "monitor up");
    wait_until("control socket", Duration::from_secs(20), || {
        cli(dir, &["pending", "--json"]).status.success()
    });
}

pub fn stop(mut daemon: Daemon) {
    let mut child = daemon.0.take().unwrap();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// What `pending --json` says.
pub fn pending(dir: &TempDir) -> serde_json::Value {
    serde_json::from_str(&cli_ok(dir, &["pending", "--json"])).unwrap()
}

pub fn total_pending(dir: &TempDir) -> u64 {
    pending(dir)["total_pending"].as_u64().unwrap()
}

pub fn metric(port: u16, line_start: &str) -> f64 {
    let (_, text) = http_get(port, "/metrics");
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {line_start} in {text}"))
}

pub fn names(options: &SimOptions, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|n| identity(options, n)).collect()
}

pub fn rpcs_of(fleet: &choria_provisioner::sim::Sim, name: &str) -> Vec<String> {
    fleet
        .summary()
        .nodes
        .into_iter()
        .find(|n| n.identity == name)
        .map(|n| n.rpcs)
        .unwrap_or_default()
}

/// The process's peak resident set (`VmHWM`), in bytes.
pub fn peak_rss(pid: u32) -> u64 {
    let status =
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap()
}

/// The identities `pending --json` lists.
pub fn pending_names(dir: &TempDir) -> Vec<String> {
    pending(dir)["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["identity"].as_str().unwrap().to_string())
        .collect()
}
