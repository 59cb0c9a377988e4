//! `choria-provisioner run`: start-up in Go's order (configuration, logging,
//! `/metrics`, signals, pid file, broker connection, own startup event, election,
//! listener, workers, discovery), then the daemon until a signal stops it.

#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver};
use parking_lot::Mutex;

use crate::choria::client_config::ClientConfig;
use crate::choria::connector::{ConnectError, Connector};
use crate::choria::lifecycle::{self, Event};
use crate::choria::rpc::RpcClient;
use crate::config::{Config, Pause};
use crate::host::sequence::{Provisioner, Timeouts};
use crate::hosts::discovery::BroadcastDiscovery;
use crate::hosts::election::{Callbacks, Election, ElectionOptions, ElectionState, Handover};
use crate::hosts::{Fleet, FleetOptions, Provision, COOLDOWN, QUEUE_CAPACITY};
use crate::metrics::{Metrics, MetricsServer};

use super::args::Invocation;
use super::{fail, prepare, signals, usage, PidFile};

/// The component of the provisioner's own lifecycle events.
const COMPONENT: &str = "provisioner";

/// Runs the daemon; returns the exit code.
pub fn run(inv: &Invocation) -> i32 {
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
    let metrics = match Metrics::new(&config.site) {
        Ok(m) => Arc::new(m),
        Err(e) => return fail(format!("Could not create metrics: {e}")),
    };
    let pause = Arc::new(Pause::new(metrics.paused.clone()));
    let health = Arc::new(Health::default());
    let _monitor = if config.monitor_port > 0 {
        match MetricsServer::start(
            config.monitor_host.as_deref(),
            config.monitor_port,
            Arc::clone(&metrics),
            health.source(Arc::clone(&pause), config.site.clone()),
        ) {
            Ok(server) => {
                log::info!("Serving /metrics and /healthz on {}", server.local_addr());
                Some(server)
            }
            Err(e) => return fail(e),
        }
    } else {
        None
    };
    let shutdown = match signals::install(log) {
        Ok(rx) => rx,
        Err(e) => return fail(format!("Could not install signal handlers: {e}")),
    };
    let _pid = match inv.pid.as_deref() {
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
    serve(&config, &client, &metrics, &pause, &health, &shutdown)
}

/// What `/healthz` reports beyond the pause flag.
#[derive(Default)]
struct Health {
    connection: Mutex<Option<Arc<crate::choria::connector::ConnectionState>>>,
    election: Mutex<Option<Arc<Mutex<ElectionState>>>>,
}

impl Health {
    fn source(self: &Arc<Self>, pause: Arc<Pause>, site: String) -> crate::metrics::HealthSource {
        let me = Arc::clone(self);
        Arc::new(move || {
            let connected = me
                .connection
                .lock()
                .as_ref()
                .is_some_and(|c| c.is_connected());
            let leader = me.election.lock().as_ref().map(|e| e.lock().name());
            serde_json::json!({
                "version": crate::VERSION,
                "site": site,
                "paused": pause.paused(),
                "connected": connected,
                "leader": leader,
            })
        })
    }
}

/// Connects and provisions until `shutdown` disconnects.
fn serve(
    config: &Arc<Config>,
    client: &ClientConfig,
    metrics: &Arc<Metrics>,
    pause: &Arc<Pause>,
    health: &Arc<Health>,
    shutdown: &Receiver<()>,
) -> i32 {
    let connector = match Connector::connect(client, metrics, shutdown) {
        Ok(c) => c,
        Err(e @ ConnectError::Shutdown) | Err(e @ ConnectError::Config(_)) => {
            return fail(format!(
                "Provisioning could not start: could not create initial events connection: {e}"
            ))
        }
    };
    *health.connection.lock() = Some(connector.state());
    let startup = Event::new("startup", &client.identity, COMPONENT, crate::VERSION);
    if let Err(e) = connector
        .nats()
        .publish(&startup.subject(), startup.to_choria_json())
    {
        log::warn!("Could not publish the startup event: {e}");
    }
    let rpc = match RpcClient::new(&connector, client) {
        Ok(rpc) => Arc::new(rpc),
        Err(e) => return fail(format!("Provisioning could not configure Choria: {e}")),
    };
    let timeouts = Timeouts {
        provision: client.rpc_timeout(Duration::from_secs(20)),
        rpcutil: client.rpc_timeout(Duration::from_secs(2)),
    };
    let provisioner = match Provisioner::new(
        Arc::clone(config),
        Arc::clone(&rpc),
        Arc::clone(metrics),
        Arc::clone(pause),
        timeouts,
    ) {
        Ok(p) => Arc::new(p) as Arc<dyn Provision>,
        Err(e) => return fail(format!("Provisioning could not be configured: {e}")),
    };
    let fleet = Fleet::new(
        FleetOptions {
            workers: config.workers,
            capacity: QUEUE_CAPACITY,
            cooldown: COOLDOWN,
            shutdown_timeout: config.shutdown_timeout,
        },
        Arc::clone(metrics),
        Arc::clone(pause),
        provisioner,
    );
    let (trigger_tx, trigger) = bounded::<()>(1);
    let mut threads = Vec::new();
    if config.leader_election {
        pause.pause();
        let (election, state) = election(&connector, client, metrics, &fleet, trigger_tx.clone());
        *health.election.lock() = Some(state);
        threads.push(election);
    }
    fleet.start();
    threads.push(listen_for_events(&connector, config, &fleet));
    let discoverer = BroadcastDiscovery {
        rpc: Arc::clone(&rpc),
        initial: client.discovery_timeout,
        window: Duration::from_millis(300),
        // Go stopped at a fixed 2 s, truncating large fleets; the window still ends
        // discovery 300 ms after the last reply.
        limit: client.discovery_timeout + Duration::from_secs(8),
    };
    let discovery_fleet = Arc::clone(&fleet);
    let interval = config.interval;
    threads.push(
        std::thread::Builder::new()
            .name("discovery".into())
            .spawn(move || {
                crate::hosts::discovery::run(&discovery_fleet, &discoverer, interval, &trigger)
            })
            .expect("spawn discovery thread"),
    );
    let _ = shutdown.recv();
    log::warn!("Stopping: no new nodes are taken, in-flight nodes finish their current step");
    drop(trigger_tx);
    if !fleet.stop() {
        log::warn!(
            "Some nodes were still being provisioned after {:?}; they will be picked up again",
            config.shutdown_timeout
        );
    }
    for t in threads {
        let _ = t.join();
    }
    connector.close();
    log::info!("Choria Provisioner stopped");
    0
}

/// Subscribes to startup events of the configured component and runs the listener.
fn listen_for_events(
    connector: &Connector,
    config: &Config,
    fleet: &Arc<Fleet>,
) -> std::thread::JoinHandle<()> {
    let (tx, rx) = bounded::<Vec<u8>>(1000);
    let subject = lifecycle::subject("startup", &config.lifecycle_component);
    match connector.nats().subscribe(&subject) {
        Ok(sub) => {
            // The handler only forwards bytes: decoding happens on the listener thread.
            // (Dropping the returned handle does not unsubscribe.)
            sub.with_handler(move |msg| {
                if tx.try_send(msg.data).is_err() {
                    log::warn!("Dropping a startup event: the listener is 1000 events behind");
                }
                Ok(())
            });
        }
        Err(e) => log::error!("Could not subscribe to {subject}: {e}"),
    }
    let fleet = Arc::clone(fleet);
    std::thread::Builder::new()
        .name("events".into())
        .spawn(move || {
            let decode = |b: &[u8]| lifecycle::startup_identity(b).map_err(|e| e.to_string());
            crate::hosts::events::run(&fleet, &rx, &decode)
        })
        .expect("spawn events thread")
}

/// Starts the election thread; returns it and its state for `/healthz`.
fn election(
    connector: &Connector,
    client: &ClientConfig,
    metrics: &Arc<Metrics>,
    fleet: &Arc<Fleet>,
    trigger: crossbeam_channel::Sender<()>,
) -> (std::thread::JoinHandle<()>, Arc<Mutex<ElectionState>>) {
    let election = Election::new(
        connector.nats().clone(),
        &client.identity,
        ElectionOptions::default(),
        Arc::clone(metrics),
    );
    let state = election.state();
    let (won_fleet, lost_fleet, stop_fleet) =
        (Arc::clone(fleet), Arc::clone(fleet), Arc::clone(fleet));
    let identity = client.identity.clone();
    let thread = std::thread::Builder::new()
        .name("election".into())
        .spawn(move || {
            let callbacks = Callbacks {
                won: Box::new(move || {
                    won_fleet.pause().resume();
                    log::warn!("Became leader after winning election");
                    // Never block the campaign on a discovery in progress (Go did).
                    if trigger.try_send(()).is_ok() {
                        log::info!("Triggered a discovery after becoming leader");
                    }
                }),
                lost: Box::new(move || {
                    lost_fleet.pause().pause();
                    log::warn!("Lost leadership");
                    lost_fleet.remove_all();
                }),
            };
            let handover = Handover {
                subject: lifecycle::subject("shutdown", COMPONENT),
                message: Box::new(move || {
                    Event::new("shutdown", &identity, COMPONENT, crate::VERSION).to_choria_json()
                }),
                resigned: Box::new(|bytes| {
                    lifecycle::decode(bytes)
                        .ok()
                        .filter(|e| e.kind() == "shutdown" && e.component == COMPONENT)
                        .map(|e| e.identity)
                }),
            };
            election.run(callbacks, Some(handover), &stop_fleet.stopped());
        })
        .expect("spawn election thread");
    (thread, state)
}
