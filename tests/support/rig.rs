//! A provisioner daemon and a simulated fleet in this process, for the tests that need
//! the whole provisioner against a real nats-server.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use choria_provisioner::choria::client_config::ClientConfig;
use choria_provisioner::config::{Config, Pause};
use choria_provisioner::hosts::daemon::{Daemon, DaemonOptions};
use choria_provisioner::metrics::Metrics;
use choria_provisioner::sim::{Sim, SimOptions};
use crossbeam_channel::{bounded, Sender};

use super::TempDir;

/// The shell example helper shipped in packaging/.
pub fn helper() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("packaging/examples/provision-helper.sh")
}

/// One provisioner in this process, stopped when dropped.
pub struct Provisioner {
    daemon: Option<Daemon>,
    /// Its metrics.
    pub metrics: Arc<Metrics>,
    /// Its pause flag.
    pub pause: Arc<Pause>,
    /// Its identity.
    pub identity: String,
    _stop: Sender<()>,
    _dir: TempDir,
}

impl Provisioner {
    /// Starts a provisioner named `identity` on `url` with `yaml` added to a test
    /// configuration (insecure, 8 workers, the example helper unless `yaml` names one).
    pub fn start(url: &str, identity: &str, yaml: &str, options: DaemonOptions) -> Provisioner {
        Provisioner::start_paused(url, identity, yaml, options, false)
    }

    /// As [`Provisioner::start`], paused from the start when `paused`.
    pub fn start_paused(
        url: &str,
        identity: &str,
        yaml: &str,
        options: DaemonOptions,
        paused: bool,
    ) -> Provisioner {
        let dir = TempDir::new("rig");
        let cfg = dir.write(
            "choria.cfg",
            &format!("identity = {identity}\nplugin.choria.middleware_hosts = {url}\n"),
        );
        let base_helper = if yaml.contains("helper:") {
            String::new()
        } else {
            format!("helper: {}\n", helper().display())
        };
        let workers = if yaml.contains("workers:") {
            ""
        } else {
            "workers: 8\n"
        };
        let yaml = dir.write(
            "p.yaml",
            &format!("{workers}{base_helper}choria_insecure: true\nshutdown_timeout: 5s\n{yaml}"),
        );
        let config = Arc::new(Config::load(&yaml).unwrap().config);
        let mut client = ClientConfig::load(&cfg).unwrap();
        client.apply_provisioner_overrides(&config);
        let metrics = Arc::new(Metrics::new("test").unwrap());
        let pause = Arc::new(Pause::new(metrics.paused.clone()));
        if paused {
            pause.pause();
        }
        let (stop, shutdown) = bounded::<()>(0);
        let daemon = Daemon::start(&config, &client, &metrics, &pause, options, &shutdown).unwrap();
        Provisioner {
            daemon: Some(daemon),
            metrics,
            pause,
            identity: identity.to_string(),
            _stop: stop,
            _dir: dir,
        }
    }

    /// The running daemon.
    pub fn daemon(&self) -> &Daemon {
        self.daemon.as_ref().unwrap()
    }

    /// Stops the daemon; true if everything stopped within the bound.
    pub fn stop(&mut self) -> bool {
        self.daemon.take().map(|d| d.stop()).unwrap_or(true)
    }

    /// Reconnections of its broker connection so far.
    pub fn reconnections(&self) -> u64 {
        self.metrics
            .connector_reconnections
            .with_label_values(&[&self.identity])
            .get()
    }

    /// The value of counter `family{label=value}` (one label) in its metrics.
    pub fn counter(&self, family: &str, labels: &[&str]) -> u64 {
        let m = &self.metrics;
        match family {
            "refused_identities" => m.refused_identities.with_label_values(labels).get(),
            "rejected_replies" => m.rejected_replies.with_label_values(labels).get(),
            "contested_replies" => m.contested_replies.with_label_values(labels).get(),
            "dropped_events" => m.dropped_events.with_label_values(labels).get(),
            other => panic!("no counter {other} in the rig"),
        }
    }
}

impl Drop for Provisioner {
    fn drop(&mut self) {
        self.stop();
    }
}

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
