//! The provisioner binary and its signals during a run: SIGTERM mid-run exits 0
//! within the bound, a second signal exits at once, a running helper is killed.
#![cfg(feature = "sim")]

mod support;

use std::time::{Duration, Instant};

use choria_provisioner::sim::{Faults, Phase};
use support::daemon::{spawn, spawn_with};
use support::rig::*;
use support::{NatsServer, TempDir};

/// The provisioner binary against `url` with the example helper, logging to a file in
/// `dir`.
fn spawn_binary(dir: &TempDir, url: &str) -> std::process::Child {
    spawn(dir, url, "workers: 4\nshutdown_timeout: 3s\n")
}

#[test]
fn sigterm_mid_run_exits_0_within_the_bound_and_a_second_run_finishes_the_rest() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 200, |o| {
        o.faults = Faults {
            slow: 0.5,
            slow_by: Duration::from_millis(300),
            ..Faults::default()
        }
    });
    let dir = TempDir::new("sigterm");
    let mut first = spawn_binary(&dir, &server.url());
    wait_until("some provisioned", Duration::from_secs(60), || {
        fleet.progress().provisioned >= 20
    });
    let signalled = Instant::now();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    let status = first.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(
        signalled.elapsed() < Duration::from_secs(3 + 3),
        "bounded: {:?}",
        signalled.elapsed()
    );
    let done = fleet.progress().provisioned;
    assert!(done < 200, "the first run was interrupted ({done} done)");
    let mut second = spawn_binary(&dir, &server.url());
    wait_provisioned(&fleet, 200, Duration::from_secs(120));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(second.id() as i32, libc::SIGTERM) };
    assert_eq!(second.wait().unwrap().code(), Some(0));
    for node in fleet.summary().nodes {
        assert_eq!(node.phase, Phase::Provisioned, "{}", node.identity);
    }
}

#[test]
fn a_second_signal_exits_at_once() {
    let server = NatsServer::start();
    // One node that answers only after 10 s: the worker waits inside an RPC.
    let fleet = sim(&server.url(), 1, all_late(Duration::from_secs(10)));
    let dir = TempDir::new("second-signal");
    let mut child = spawn(&dir, &server.url(), "shutdown_timeout: 30s\n");
    wait_until(
        "the first RPC is in flight",
        Duration::from_secs(30),
        || fleet.summary().nodes[0].rpcs.len() == 1,
    );
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first signal waits for the node in flight"
    );
    let second = Instant::now();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(
        second.elapsed() < Duration::from_secs(2),
        "{:?}",
        second.elapsed()
    );
    assert_eq!(status.code(), Some(1));
}

#[test]
fn stopping_kills_a_running_helper_and_exits_0_within_the_bound() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 1, |_| {});
    let dir = TempDir::new("stop-helper");
    let marker = dir.path().join("helper-finished");
    let slow = dir.script(
        "slow-helper.sh",
        &format!(
            "#!/bin/sh\nsleep 20\ntouch {}\necho '{{\"defer\": true}}'\n",
            marker.display()
        ),
    );
    let mut child = spawn_with(
        env!("CARGO_BIN_EXE_choria-provisioner"),
        &dir,
        "p1.test",
        &server.url(),
        &format!(
            "helper: {}\nhelper_timeout: 60s\nshutdown_timeout: 10s\n",
            slow.display()
        ),
    );
    wait_until("the helper runs", Duration::from_secs(30), || {
        fleet.summary().nodes[0].rpcs.len() == 1
    });
    std::thread::sleep(Duration::from_millis(300));
    let signalled = Instant::now();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "{:?}",
        signalled.elapsed()
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(!marker.exists(), "the helper was killed, not left running");
}
