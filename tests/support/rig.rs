//! A provisioner daemon and a simulated fleet in this process, for the tests that need
//! the whole provisioner against a real nats-server.

use std::time::{Duration, Instant};

use choria_provisioner::hosts::daemon::DaemonOptions;
use choria_provisioner::sim::{Sim, SimOptions};

#[allow(unused_imports)] // not every test binary uses it
pub use super::daemon::InProcess as Provisioner;

/// Short intervals and cool-downs for tests.
pub fn fast() -> DaemonOptions {
    DaemonOptions {
        cooldown: Duration::from_secs(3),
        interval: Some(Duration::from_secs(2)),
        ..DaemonOptions::default()
    }
}

/// A simulated fleet of `nodes` on `url`, restarting in 500 ms, adjusted by `f`.
pub fn sim(url: &str, nodes: usize, f: impl FnOnce(&mut SimOptions)) -> Sim {
    let mut options = SimOptions {
        nodes,
        restart_delay: Duration::from_millis(500),
        ..SimOptions::default()
    };
    f(&mut options);
    Sim::start(url, options).unwrap()
}

/// Waits for `f`, failing the test after `within`.
pub fn wait_until(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
