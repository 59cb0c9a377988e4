//! `choria-provisioner run`: start-up in Go's order (configuration, logging,
//! `/metrics`, signals, pid file, broker connection, own startup event, election,
//! listener, workers, discovery), then the daemon until a signal stops it.

use std::sync::Arc;

use crossbeam_channel::Receiver;
use parking_lot::Mutex;

use crate::choria::client_config::ClientConfig;
use crate::config::{Config, Pause};
use crate::fleet::control::{Controller, DaemonHooks};
use crate::fleet::control_socket::ControlSocket;
use crate::fleet::daemon::{Daemon, DaemonOptions};
use crate::fleet::election::ElectionState;
use crate::fleet::membership::{MemberState, Membership};
use crate::metrics::{Metrics, MetricsServer, Readiness, Role};

use super::args::Invocation;
use super::{fail, prepare, signals, usage, PidFile};

/// Runs the daemon, writing its process id to `pid` when given; returns the exit
/// code.
pub(crate) fn run(inv: &Invocation, pid: Option<&str>) -> i32 {
    let prepared = match prepare(inv) {
        Ok(p) => p,
        Err(e) => {
            for line in &e.lines {
                fail(line);
            }
            if e.usage {
                eprintln!("{}", usage());
            }
            return 1;
        }
    };
    let config = Arc::new(prepared.config);
    let client = prepared.client;
    let log = match crate::logging::init(&config.logfile, config.loglevel, inv.debug) {
        Ok(h) => h,
        Err(e) => return fail(format!("Provisioning could not configure logging: {e}")),
    };
    for w in &prepared.warnings {
        log::warn!("{w}");
    }
    // Helpers' pipes, the broker, the monitor's connections: a soft limit of 1,024
    // (systemd's default) is the first thing a busy daemon would run out of. Raised
    // before anything is opened, logged after the line that says we start.
    let open_files = crate::sys::raise_open_files_limit();
    let metrics = match Metrics::new(&config.site) {
        Ok(m) => Arc::new(m),
        Err(e) => return fail(format!("Could not create metrics: {e}")),
    };
    let pause = Arc::new(Pause::new(metrics.paused.clone()));
    let controller = Arc::new(Controller::new(
        Arc::clone(&pause),
        config.pause_file.clone(),
    ));
    controller.restore();
    let health = Arc::new(HealthInputs::default());
    let _monitor = if config.monitor_port > 0 {
        match MetricsServer::start_with_nodes(
            config.monitor_host.as_deref(),
            config.monitor_port,
            Arc::clone(&metrics),
            health.source(Arc::clone(&pause), &config),
            Arc::clone(&health.nodes) as crate::metrics::NodeSource,
        ) {
            Ok(server) => {
                log::info!(
                    "Serving /metrics, /healthz, /readyz and /nodes on {}",
                    server.local_addr()
                );
                Some(server)
            }
            Err(e) => return fail(e),
        }
    } else {
        None
    };
    let shutdown = match signals::install(log, Arc::clone(&health.reload)) {
        Ok(rx) => rx,
        Err(e) => return fail(format!("Could not install signal handlers: {e}")),
    };
    let _control = match &config.control_socket {
        Some(path) => {
            match ControlSocket::open(path, Arc::clone(&controller), Arc::clone(&metrics)) {
                Ok(socket) => {
                    log::info!(
                        "Taking pause and resume on the control socket {}",
                        path.display()
                    );
                    Some(socket)
                }
                Err(e) => return fail(e),
            }
        }
        None => None,
    };
    let _pid = match pid {
        Some(path) => match PidFile::write(std::path::Path::new(path)) {
            Ok(p) => Some(p),
            Err(e) => return fail(format!("Could not write PID: {e}")),
        },
        None => None,
    };
    log::info!(
        "Choria Provisioner version {} starting with configuration file {} as {}",
        crate::VERSION,
        config.file.display(),
        client.identity
    );
    match open_files {
        Ok((soft, hard)) => log::info!("Open file limit: {soft} (hard limit {hard})"),
        Err(e) => log::warn!("Could not read or raise the open file limit: {e}"),
    }
    serve(
        &config,
        &client,
        &metrics,
        &pause,
        &health,
        &controller,
        &shutdown,
    )
}

/// What `/healthz` and `/readyz` report beyond the pause flag.
#[derive(Default)]
struct HealthInputs {
    connection: Mutex<Option<Arc<crate::choria::connector::ConnectionState>>>,
    election: Mutex<Option<Arc<Mutex<ElectionState>>>>,
    membership: Mutex<Option<Arc<Membership>>>,
    nodes: Arc<crate::metrics::LateNodes>,
    reload: signals::ReloadSlot,
}

impl HealthInputs {
    fn source(
        self: &Arc<Self>,
        pause: Arc<Pause>,
        config: &Config,
    ) -> crate::metrics::HealthSource {
        Arc::new(HealthView {
            state: Arc::clone(self),
            pause,
            site: config.site.clone(),
            leader_election: config.leader_election,
            active_active: config.active_active,
        })
    }
}

/// The monitoring listener's view of one provisioner.
struct HealthView {
    state: Arc<HealthInputs>,
    pause: Arc<Pause>,
    site: String,
    leader_election: bool,
    active_active: bool,
}

impl HealthView {
    fn connected(&self) -> bool {
        self.state
            .connection
            .lock()
            .as_ref()
            .is_some_and(|c| c.is_connected())
    }

    fn election_state(&self) -> Option<ElectionState> {
        self.state
            .election
            .lock()
            .as_ref()
            .map(|e| e.lock().clone())
    }

    /// `null` unless active-active: then the state, the live peers, the share and
    /// this instance's part of `upgrades_max_in_flight` (`null` when unlimited).
    fn active_active(&self) -> serde_json::Value {
        if !self.active_active {
            return serde_json::Value::Null;
        }
        match self.state.membership.lock().as_ref() {
            Some(m) => serde_json::json!({
                "state": m.state().name(),
                "peers": m.live().iter().map(|p| p.as_str()).collect::<Vec<_>>(),
                "share": m.share(),
                "upgrade_slots": m.upgrade_part(),
            }),
            None => serde_json::json!({
                "state": "starting",
                "peers": [],
                "share": 0.0,
                "upgrade_slots": null,
            }),
        }
    }
}

impl crate::metrics::Health for HealthView {
    fn health(&self) -> serde_json::Value {
        serde_json::json!({
            "version": crate::VERSION,
            "site": self.site,
            "paused": self.pause.paused(),
            "operator_pause": self.pause.operator(),
            "connected": self.connected(),
            "leader": self.election_state().map(|e| e.name()),
            "active_active": self.active_active(),
        })
    }

    fn readiness(&self) -> Readiness {
        let member = self.state.membership.lock().as_ref().map(|m| m.state());
        let role = match (self.leader_election, self.election_state()) {
            (false, _) if self.active_active => match member {
                Some(MemberState::Active) => Role::Active,
                Some(state) => Role::Waiting(state.name().to_string()),
                None => Role::Waiting("starting".to_string()),
            },
            (false, _) => Role::Alone,
            (true, Some(ElectionState::Leader)) => Role::Leader,
            (true, Some(state)) => Role::Waiting(state.name().to_string()),
            // Configured but not started yet.
            (true, None) => Role::Waiting("starting".to_string()),
        };
        Readiness {
            connected: self.connected(),
            role,
            operator_pause: self.pause.operator().map(|p| p.reason),
        }
    }
}

/// Connects and provisions until `shutdown` disconnects.
fn serve(
    config: &Arc<Config>,
    client: &ClientConfig,
    metrics: &Arc<Metrics>,
    pause: &Arc<Pause>,
    health: &Arc<HealthInputs>,
    controller: &Controller,
    shutdown: &Receiver<()>,
) -> i32 {
    let daemon = match Daemon::start(
        config,
        client,
        metrics,
        pause,
        DaemonOptions::default(),
        shutdown,
    ) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    *health.connection.lock() = Some(daemon.connection());
    *health.election.lock() = daemon.election();
    *health.membership.lock() = daemon.membership();
    health.nodes.set(daemon.node_status());
    if let Some(discover) = daemon.discovery_trigger() {
        controller.attach(DaemonHooks {
            fleet: Arc::clone(daemon.fleet()),
            discover,
        });
    }
    *health.reload.lock() = signals::Reloadable {
        audit: daemon.audit(),
        keys: Some(daemon.key_reloader()),
    };
    let _ = shutdown.recv();
    log::warn!("Stopping: no new nodes are taken, in-flight nodes finish their current step");
    if !daemon.stop() {
        log::warn!(
            "Some nodes were still being provisioned after {:?}; they will be picked up again",
            config.shutdown_timeout
        );
    }
    log::info!("Choria Provisioner stopped");
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Health as _;

    fn view(leader_election: bool, election: Option<ElectionState>) -> HealthView {
        let state = Arc::new(HealthInputs::default());
        *state.election.lock() = election.map(|e| Arc::new(Mutex::new(e)));
        HealthView {
            state,
            pause: Arc::new(Pause::new(prometheus::IntGauge::new("p", "p").unwrap())),
            site: "lon".into(),
            leader_election,
            active_active: false,
        }
    }

    #[test]
    fn readiness_role_follows_the_election() {
        for (election, state, role) in [
            (false, None, Role::Alone),
            (true, None, Role::Waiting("starting".into())),
            (
                true,
                Some(ElectionState::Standby),
                Role::Waiting("standby".into()),
            ),
            (
                true,
                Some(ElectionState::Unavailable("no bucket".into())),
                Role::Waiting("unavailable".into()),
            ),
            (true, Some(ElectionState::Leader), Role::Leader),
        ] {
            let v = view(election, state.clone());
            let r = v.readiness();
            assert_eq!(r.role, role, "{election} {state:?}");
            // Never connected here: not ready whatever the role.
            assert!(!r.connected && !r.is_ready(), "{r:?}");
            assert_eq!(
                v.health()["leader"],
                serde_json::json!(state.map(|s| s.name()))
            );
            assert_eq!(v.health()["active_active"], serde_json::Value::Null);
        }
    }

    #[test]
    fn an_active_active_member_waits_until_it_has_a_membership() {
        let mut v = view(false, None);
        v.active_active = true;
        assert_eq!(v.readiness().role, Role::Waiting("starting".into()));
        assert_eq!(v.health()["active_active"]["state"], "starting");
        assert_eq!(
            v.health()["active_active"]["upgrade_slots"],
            serde_json::Value::Null
        );
    }
}
