//! One provisioner daemon in this test process, against a broker URL: the
//! configuration files written to a scratch directory, the daemon started as `run`
//! starts it, stopped (and awaited) when dropped.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use choria_provisioner::choria::client_config::ClientConfig;
use choria_provisioner::config::{Config, Pause};
use choria_provisioner::fleet::daemon::{Daemon, DaemonOptions};
use choria_provisioner::metrics::Metrics;
use crossbeam_channel::{bounded, Sender};

use super::TempDir;

/// The example helper that configures any node (`packaging/examples`).
pub fn example_helper() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("packaging/examples/provision-helper.sh")
}

/// A provisioner running in this process.
pub struct InProcess {
    daemon: Option<Daemon>,
    /// Its metrics.
    pub metrics: Arc<Metrics>,
    /// Its pause flag.
    pub pause: Arc<Pause>,
    /// Its identity.
    pub identity: String,
    _stop: Sender<()>,
    /// Its scratch directory (configuration files).
    pub dir: TempDir,
}

impl InProcess {
    /// Starts a provisioner named `identity` on `url` with `yaml` added to the
    /// defaults: the example helper unless `yaml` names one, `workers: 8` unless it
    /// sets them, no TLS, a 5 s shutdown.
    pub fn start(url: &str, identity: &str, yaml: &str, options: DaemonOptions) -> InProcess {
        InProcess::start_paused(url, identity, yaml, options, false)
    }

    /// [`InProcess::start`], paused from the start when `paused`.
    pub fn start_paused(
        url: &str,
        identity: &str,
        yaml: &str,
        options: DaemonOptions,
        paused: bool,
    ) -> InProcess {
        let dir = TempDir::new("daemon");
        let cfg = dir.write(
            "choria.cfg",
            &format!("identity = {identity}\nplugin.choria.middleware_hosts = {url}\n"),
        );
        let yaml = dir.write(
            "p.yaml",
            &format!("choria_insecure: true\n{}", base_yaml(yaml)),
        );
        InProcess::launch(dir, identity, &cfg, &yaml, options, paused)
    }

    /// A provisioner connecting through the Choria broker front end `broker` with
    /// the credentials `choria-fleet-sim keys` made for it.
    #[cfg(feature = "sim")]
    pub fn start_through(
        broker: &super::broker::ChoriaBroker,
        identity: &str,
        yaml: &str,
        options: DaemonOptions,
    ) -> InProcess {
        let dir = TempDir::new("daemon");
        let (cfg, yaml) = broker.write_provisioner(
            &dir,
            identity,
            &broker.url(),
            &broker.choria_cfg(),
            &base_yaml(yaml),
        );
        InProcess::launch(dir, identity, &cfg, &yaml, options, false)
    }

    /// Starts the daemon of the files `cfg` and `yaml` in `dir`, as `run` does.
    pub fn launch(
        dir: TempDir,
        identity: &str,
        cfg: &Path,
        yaml: &Path,
        options: DaemonOptions,
        paused: bool,
    ) -> InProcess {
        let config = Arc::new(Config::load(yaml).unwrap().config);
        let mut client = ClientConfig::load(cfg).unwrap();
        choria_provisioner::cli::apply_provisioner_overrides(&mut client, &config);
        let metrics = Arc::new(Metrics::new("test").unwrap());
        let pause = Arc::new(Pause::new(metrics.paused.clone()));
        if paused {
            pause.pause();
        }
        let (stop, shutdown) = bounded::<()>(0);
        let daemon = Daemon::start(&config, &client, &metrics, &pause, options, &shutdown).unwrap();
        InProcess {
            daemon: Some(daemon),
            metrics,
            pause,
            identity: identity.to_string(),
            _stop: stop,
            dir,
        }
    }

    /// The running daemon.
    pub fn daemon(&self) -> &Daemon {
        self.daemon.as_ref().expect("the daemon is running")
    }

    /// Reconnections of its broker connection so far.
    pub fn reconnections(&self) -> u64 {
        self.metrics
            .connector_reconnections
            .with_label_values(&[&self.identity])
            .get()
    }

    /// Checks that its metrics exposition holds `series`.
    pub fn assert_renders(&self, series: &str) {
        let text = self.metrics.render();
        assert!(text.contains(series), "{series} missing from\n{text}");
    }

    /// The value of the counter `family` with `labels` in its metrics.
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

    /// Stops the daemon (once); true when every thread stopped in time.
    pub fn stop(&mut self) -> bool {
        self.daemon.take().map(|d| d.stop()).unwrap_or(true)
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The test YAML `yaml` with the example helper, 8 workers and a 5 s shutdown unless
/// it sets them.
pub fn base_yaml(yaml: &str) -> String {
    let helper = if yaml.contains("helper:") {
        String::new()
    } else {
        format!("helper: {}\n", example_helper().display())
    };
    let workers = if yaml.contains("workers:") {
        ""
    } else {
        "workers: 8\n"
    };
    // The production grace (2 s) delays every node that long; tests that are not
    // about the grace use a shorter one, and those that are set their own.
    let grace = if yaml
        .lines()
        .any(|l| l.trim_start().starts_with("reply_grace:"))
    {
        ""
    } else {
        "reply_grace: 300ms\n"
    };
    format!("{workers}{helper}{grace}shutdown_timeout: 5s\n{yaml}")
}

/// The provisioner's binary against `url` with the example helper: [`spawn_with`].
pub fn spawn(dir: &TempDir, url: &str, yaml: &str) -> std::process::Child {
    // Cargo names the binary to integration tests only; the examples that compile
    // this file too would find it on PATH.
    let bin = option_env!("CARGO_BIN_EXE_choria-provisioner").unwrap_or("choria-provisioner");
    let yaml = format!("helper: {}\n{yaml}", example_helper().display());
    spawn_with(bin, dir, "p1.test", url, &yaml)
}

/// The client configuration (`choria.cfg`, as `identity` on `url`) and the
/// provisioner's YAML (`yaml`, logging to `p.log`) in `dir`: their paths.
pub fn files(dir: &TempDir, identity: &str, url: &str, yaml: &str) -> (PathBuf, PathBuf) {
    let cfg = dir.write(
        "choria.cfg",
        &format!("identity = {identity}\nplugin.choria.middleware_hosts = {url}\n"),
    );
    let yaml = dir.write(
        "p.yaml",
        &format!(
            "choria_insecure: true\nlogfile: {}\n{yaml}",
            dir.path().join("p.log").display()
        ),
    );
    (cfg, yaml)
}

/// The provisioner binary `bin` (the test's `CARGO_BIN_EXE_choria-provisioner`;
/// the example that shares this module has none) as `identity`, with `yaml` (which
/// names the helper), logging to a file in `dir`.
pub fn spawn_with(
    bin: &str,
    dir: &TempDir,
    identity: &str,
    url: &str,
    yaml: &str,
) -> std::process::Child {
    let (cfg, yaml) = files(dir, identity, url, yaml);
    std::process::Command::new(bin)
        .args([
            "--config",
            &yaml.display().to_string(),
            "--choria-config",
            &cfg.display().to_string(),
        ])
        .spawn()
        .unwrap()
}

/// `choria-provisioner <args> --config <dir>/p.yaml` (an operator's command to the
/// daemon [`spawn`] started in `dir`).
pub fn cli(dir: &TempDir, args: &[&str]) -> std::process::Output {
    let bin = option_env!("CARGO_BIN_EXE_choria-provisioner").unwrap_or("choria-provisioner");
    let config = dir.path().join("p.yaml");
    std::process::Command::new(bin)
        .args(args)
        .args(["--config", &config.display().to_string()])
        .output()
        .unwrap()
}

/// [`cli`], checked to succeed; its standard output.
pub fn cli_ok(dir: &TempDir, args: &[&str]) -> String {
    super::succeeded(&cli(dir, args), args)
}

/// `choria-provisioner nodes --monitor http://127.0.0.1:<port> <args>`: what an
/// operator sees of the daemon whose monitor port is `port`.
pub fn nodes(port: u16, args: &[&str]) -> std::process::Output {
    let bin = option_env!("CARGO_BIN_EXE_choria-provisioner").unwrap_or("choria-provisioner");
    std::process::Command::new(bin)
        .args(["nodes", "--monitor", &format!("http://127.0.0.1:{port}")])
        .args(args)
        .output()
        .unwrap()
}

/// [`nodes`], checked to succeed: the table it printed.
pub fn nodes_ok(port: u16, args: &[&str]) -> String {
    super::succeeded(&nodes(port, args), ("nodes", args))
}
