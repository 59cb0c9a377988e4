//! One provisioner assembled from its parts: the connection, the RPC client, the
//! provisioning sequence, the fleet, the lifecycle listener, discovery and (when
//! configured) the election or the active-active membership. `cli::run` starts one;
//! tests start several in one process.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;

use super::discovery::{BroadcastDiscovery, Rediscovery, REDISCOVERY};
use super::election::{Callbacks, Election, ElectionError, ElectionOptions, ElectionState};
use super::membership::{Membership, MembershipError, HEARTBEAT};
use super::{Fleet, FleetOptions, Provision, COOLDOWN, LOCK_WINDOW, QUEUE_CAPACITY};
use crate::choria::client_config::ClientConfig;
use crate::choria::connector::{ConnectError, ConnectionState, Connector};
use crate::choria::identity::{Identity, IdentityError};
use crate::choria::lifecycle::{self, Event};
use crate::choria::rpc::{RpcClient, RpcError};
use crate::choria::subject::{QueueGroup, SubjectError};
use crate::config::{Config, IdentityPolicy, Pause};
use crate::metrics::Metrics;
use crate::node::driver::Driver;
use crate::node::key_material::KeyLoadError;
use crate::node::sequence::{NodeSequence, Timeouts};

/// The component of the provisioner's own lifecycle events.
pub(crate) const COMPONENT: &str = "provisioner";

/// Settings that are not in the YAML (tests shorten them).
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// Work queue capacity.
    pub capacity: usize,
    /// How long a provisioned identity stays known.
    pub cooldown: Duration,
    /// Discovery period; `None` uses the configuration's `interval`.
    pub interval: Option<Duration>,
    /// Election settings.
    pub election: ElectionOptions,
    /// Active-active heartbeat period (a peer silent for three is dropped).
    pub heartbeat: Duration,
    /// When a discovery that overflowed the queue is followed by an early one.
    pub rediscovery: Rediscovery,
    /// How long a node another provisioner holds is left alone before it is offered
    /// again (`LOCK_WINDOW`; the simulator's lock is shorter in tests).
    pub lock_window: Duration,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            capacity: QUEUE_CAPACITY,
            cooldown: COOLDOWN,
            interval: None,
            election: ElectionOptions::default(),
            heartbeat: HEARTBEAT,
            rediscovery: REDISCOVERY,
            lock_window: LOCK_WINDOW,
        }
    }
}

/// Why a provisioner could not start; `Display` gives the text `run` prints.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No connection to a broker (the configuration cannot make one, or the daemon
    /// was told to stop while still trying).
    #[error("Provisioning could not start: could not create initial events connection: {0}")]
    Connect(ConnectError),
    /// The RPC client could not be set up on the connection.
    #[error("Provisioning could not configure Choria: {0}")]
    Rpc(RpcError),
    /// The key material the enabled features need could not be loaded.
    #[error("Provisioning could not be configured: {0}")]
    Keys(KeyLoadError),
    /// Peer messages cannot be signed or checked with this instance's credentials.
    #[error("The instances of this site cannot share their tables: {0}")]
    Seal(crate::choria::peers::SealSetupError),
    /// The leader election could not be set up.
    #[error(transparent)]
    Election(ElectionError),
    /// `active_active` is on but this instance's identity is not a valid identity.
    #[error("active_active needs a valid identity for this instance: {0}")]
    Identity(IdentityError),
    /// The active-active membership could not start.
    #[error(transparent)]
    Membership(MembershipError),
    /// The site makes no valid queue group for the startup events.
    #[error("invalid site for a queue group: {0}")]
    QueueGroup(SubjectError),
    /// The startup events of the lifecycle component could not be subscribed to.
    #[error("Could not subscribe to startup events of {component}: {error}")]
    Events {
        /// The component (`lifecycle_component`).
        component: String,
        /// Why.
        error: std::io::Error,
    },
    /// A thread could not be started.
    #[error("cannot start the {name} thread: {error}")]
    Thread {
        /// Which (`events`, `election`, `discovery`, `approvals`).
        name: &'static str,
        /// Why.
        error: std::io::Error,
    },
}

/// A running provisioner.
pub struct Daemon {
    fleet: Arc<Fleet>,
    connector: Connector,
    rpc: Arc<RpcClient>,
    threads: Vec<JoinHandle<()>>,
    election: Option<Arc<Mutex<ElectionState>>>,
    membership: Option<Arc<Membership>>,
    trigger: Option<Sender<()>>,
    shutdown_timeout: Duration,
    keys: KeyReloader,
    approvals: Option<Arc<super::approvals::Approvals>>,
}

/// Loads the key files of a running provisioner again (on SIGHUP).
#[derive(Clone)]
pub(crate) struct KeyReloader(Arc<NodeSequence>);

impl KeyReloader {
    /// Loads every key file again: the new keys are used from the next node on, and
    /// each change is logged; when one does not load, the keys in use are kept, the
    /// error is logged and `choria_provisioner_key_reload_failures` counts it.
    /// Returns whether the new keys are in use.
    pub(crate) fn reload(&self) -> bool {
        self.0.reload_keys()
    }
}

/// What signs this instance's messages to the other instances of its site and
/// checks theirs (only a provisioner writes the tables they share): needed with
/// `active_active` or shared approvals.
fn peer_seal(
    config: &Config,
    client: &ClientConfig,
    approvals: bool,
) -> Result<Arc<crate::choria::peers::Seal>, StartError> {
    if !config.active_active && !approvals {
        return Ok(crate::choria::peers::Seal::insecure());
    }
    let seal = crate::choria::peers::Seal::for_client(client, &config.peer_signers)
        .map_err(StartError::Seal)?;
    if seal.is_secure() {
        log::info!(
            "Messages to the other instances of site {} are signed, and theirs checked",
            config.site
        );
    } else {
        log::warn!(
            "choria_insecure: messages between the instances of site {} can be neither \
             signed nor checked; anyone holding the broker's provisioning password can \
             write the tables they share",
            config.site
        );
    }
    Ok(seal)
}

impl Daemon {
    /// Connects (retrying until `shutdown` disconnects), announces itself and starts
    /// every thread.
    pub fn start(
        config: &Arc<Config>,
        client: &ClientConfig,
        metrics: &Arc<Metrics>,
        pause: &Arc<Pause>,
        options: DaemonOptions,
        shutdown: &Receiver<()>,
    ) -> Result<Daemon, StartError> {
        let (connector, rpc) = Self::connect(client, metrics, shutdown)?;
        let timeouts = Timeouts {
            provision: client.rpc_timeout(Duration::from_secs(20)),
            rpcutil: client.rpc_timeout(Duration::from_secs(2)),
        };
        let sequence = NodeSequence::new(
            Arc::clone(config),
            Arc::clone(metrics),
            Arc::clone(pause),
            timeouts,
        )
        .map_err(StartError::Keys)?;
        let upgrade_slots = sequence.upgrade_slots();
        let approvals = config.approval.then(|| {
            let approvals =
                super::approvals::Approvals::new(config, &client.identity, Arc::clone(metrics));
            approvals.restore();
            sequence.set_gate(Arc::clone(&approvals) as Arc<dyn crate::node::approval::Gate>);
            approvals
        });
        let sequence = Arc::new(sequence);
        let keys = KeyReloader(Arc::clone(&sequence));
        let provisioner =
            Driver::new(sequence, Arc::clone(&rpc)).map_err(|error| StartError::Thread {
                name: "attempt-timer",
                error,
            })?;
        let fleet = Self::new_fleet(config, client, metrics, pause, &options, provisioner);
        fleet.set_connection(connector.state());
        let (trigger_tx, trigger) = bounded::<()>(1);
        // Startup events published while we were away are lost: discover at once.
        connector.state().tell_reconnections(trigger_tx.clone());
        let mut daemon = Daemon {
            fleet: Arc::clone(&fleet),
            connector,
            rpc: Arc::clone(&rpc),
            threads: Vec::new(),
            election: None,
            membership: None,
            trigger: Some(trigger_tx.clone()),
            shutdown_timeout: config.shutdown_timeout,
            keys,
            approvals: None,
        };
        let seal = peer_seal(config, client, approvals.is_some())?;
        if let Some(approvals) = approvals {
            daemon.share_approvals(config, metrics, approvals, Arc::clone(&seal))?;
        }
        if config.leader_election {
            pause.pause();
            let (thread, state) = daemon.start_election(
                client,
                metrics,
                options.election.clone(),
                trigger_tx.clone(),
            )?;
            daemon.election = Some(state);
            daemon.threads.push(thread);
        }
        if config.active_active {
            daemon.join_active_active(config, client, metrics, &options, upgrade_slots, seal)?;
        }
        fleet.start();
        let listener = daemon.listen_for_events(config, metrics)?;
        daemon.threads.push(listener);
        daemon.start_discovery(config, client, &options, rpc, trigger)?;
        Ok(daemon)
    }

    /// Connects to the broker, announces this provisioner's startup and makes the
    /// RPC client.
    fn connect(
        client: &ClientConfig,
        metrics: &Arc<Metrics>,
        shutdown: &Receiver<()>,
    ) -> Result<(Connector, Arc<RpcClient>), StartError> {
        let connector =
            Connector::connect(client, metrics, shutdown).map_err(StartError::Connect)?;
        let startup = Event::new("startup", &client.identity, COMPONENT, crate::VERSION);
        if let Err(e) = lifecycle::publish(connector.bus(), &startup) {
            log::warn!("Could not publish the startup event: {e}");
        }
        let rpc = Arc::new(
            RpcClient::new(&connector, client, Arc::clone(metrics)).map_err(StartError::Rpc)?,
        );
        Ok((connector, rpc))
    }

    /// The scheduler of `provisioner`, with its board and audit trail.
    fn new_fleet(
        config: &Config,
        client: &ClientConfig,
        metrics: &Arc<Metrics>,
        pause: &Arc<Pause>,
        options: &DaemonOptions,
        provisioner: Arc<Driver>,
    ) -> Arc<Fleet> {
        let fleet = Fleet::new(
            FleetOptions {
                workers: config.workers,
                capacity: options.capacity,
                cooldown: options.cooldown,
                shutdown_timeout: config.shutdown_timeout,
                lock_window: options.lock_window,
                identity_policy: IdentityPolicy::new(&config.identity_allow, &config.identity_deny)
                    .map(Arc::new),
                ..FleetOptions::default()
            },
            Arc::clone(metrics),
            Arc::clone(pause),
            provisioner as Arc<dyn Provision>,
        );
        fleet.board().set_instance(&client.identity);
        if let Some(path) = &config.audit_file {
            let audit = super::audit::AuditLog::open(path, Arc::clone(metrics));
            log::info!("Writing the audit trail to {}", path.display());
            fleet.board().set_audit(Arc::new(audit));
        }
        fleet
    }

    /// Holds new identities for operators (`approval: required`): the fleet asks
    /// `approvals` before queueing, approved nodes are queued, decisions are
    /// audited, and the `approvals` thread shares the table with the site's other
    /// instances and keeps its file.
    fn share_approvals(
        &mut self,
        config: &Config,
        metrics: &Arc<Metrics>,
        approvals: Arc<super::approvals::Approvals>,
        seal: Arc<crate::choria::peers::Seal>,
    ) -> Result<(), StartError> {
        approvals.attach(&self.fleet, self.fleet.board().audit().cloned());
        self.fleet.set_approvals(Arc::clone(&approvals));
        let (reconnected_tx, reconnected) = bounded(1);
        self.connector.state().tell_reconnections(reconnected_tx);
        let thread = super::approvals::sync::start(
            Arc::clone(&approvals),
            self.connector.bus().clone(),
            seal,
            &config.site,
            Arc::clone(metrics),
            self.fleet.stopped(),
            reconnected,
        )
        .map_err(|error| StartError::Thread {
            name: "approvals",
            error,
        })?;
        self.threads.push(thread);
        let programs = super::approvals::policy::start(&approvals, &self.fleet.stopped()).map_err(
            |error| StartError::Thread {
                name: "approval-policy",
                error,
            },
        )?;
        self.threads.extend(programs);
        self.approvals = Some(approvals);
        Ok(())
    }

    /// Joins the site's active-active set: the membership's thread, the fleet's
    /// ownership and this instance's part of the upgrade slots.
    fn join_active_active(
        &mut self,
        config: &Config,
        client: &ClientConfig,
        metrics: &Arc<Metrics>,
        options: &DaemonOptions,
        upgrade_slots: Arc<crate::node::upgrade_slots::UpgradeSlots>,
        seal: Arc<crate::choria::peers::Seal>,
    ) -> Result<(), StartError> {
        let me = Identity::parse(&client.identity).map_err(StartError::Identity)?;
        let membership = Membership::new(
            me,
            &config.site,
            options.heartbeat,
            self.connector.bus().clone(),
            seal,
            Arc::clone(metrics),
        );
        // The cap is the site's: split among the live instances.
        membership.share_upgrade_slots(upgrade_slots);
        self.fleet
            .set_ownership(Arc::clone(&membership) as Arc<dyn super::Ownership>);
        let trigger = self.trigger.clone().expect("set before any thread starts");
        self.threads.push(
            membership
                .start(Arc::clone(&self.fleet), trigger)
                .map_err(StartError::Membership)?,
        );
        self.membership = Some(membership);
        Ok(())
    }

    /// The discovery thread: every `interval`, and whenever `trigger` says.
    fn start_discovery(
        &mut self,
        config: &Config,
        client: &ClientConfig,
        options: &DaemonOptions,
        rpc: Arc<RpcClient>,
        trigger: Receiver<()>,
    ) -> Result<(), StartError> {
        let discoverer = BroadcastDiscovery {
            rpc,
            initial: client.discovery_timeout,
            window: Duration::from_millis(300),
            // Go stopped at a fixed 2 s, truncating large fleets; the sliding window
            // still ends discovery 300 ms after the last reply.
            limit: client.discovery_timeout + Duration::from_secs(8),
        };
        let interval = options.interval.unwrap_or(config.interval);
        let rediscovery = options.rediscovery;
        let fleet = Arc::clone(&self.fleet);
        let thread = std::thread::Builder::new()
            .name("discovery".into())
            .spawn(move || {
                super::discovery::run_with(&fleet, &discoverer, interval, &trigger, rediscovery)
            })
            .map_err(|error| StartError::Thread {
                name: "discovery",
                error,
            })?;
        self.threads.push(thread);
        Ok(())
    }

    /// The scheduler.
    pub fn fleet(&self) -> &Arc<Fleet> {
        &self.fleet
    }

    /// The audit trail, when `audit_file` is set (reopened on SIGHUP).
    pub(crate) fn audit(&self) -> Option<Arc<super::audit::AuditLog>> {
        self.fleet.board().audit().cloned()
    }

    /// What starts a discovery at once (`None` once stopping).
    pub(crate) fn discovery_trigger(&self) -> Option<Sender<()>> {
        self.trigger.clone()
    }

    /// What reloads this provisioner's key files.
    pub(crate) fn key_reloader(&self) -> KeyReloader {
        self.keys.clone()
    }

    /// What `/nodes` shows of this provisioner.
    pub fn node_status(&self) -> crate::metrics::NodeSource {
        Arc::new(super::status::FleetStatus(Arc::clone(&self.fleet)))
    }

    /// The RPC client.
    pub fn rpc(&self) -> &Arc<RpcClient> {
        &self.rpc
    }

    /// The broker connection's state.
    pub fn connection(&self) -> Arc<ConnectionState> {
        self.connector.state()
    }

    /// The election state, when elections are on.
    pub fn election(&self) -> Option<Arc<Mutex<ElectionState>>> {
        self.election.clone()
    }

    /// The active-active membership, when `active_active` is on.
    pub fn membership(&self) -> Option<Arc<Membership>> {
        self.membership.clone()
    }

    /// The broker connection (tests kill it to simulate a crash).
    pub fn connector(&self) -> &Connector {
        &self.connector
    }

    /// Stops: no new nodes, in-flight nodes finish their current step within the
    /// shutdown timeout, a leader resigns, the connection closes. An active-active
    /// member first says it is leaving (its peers take its share at once) and lets
    /// the nodes in flight finish whole, since they hold the nodes' provisioning locks
    /// (within the shutdown timeout, before the fleet's own wait for its threads).
    /// True if everything stopped within the bound.
    pub fn stop(mut self) -> bool {
        self.trigger.take();
        if let Some(membership) = &self.membership {
            membership.leave();
            // The queued nodes go straight to their new owners (who also discover).
            for node in self.fleet.queued_identities() {
                membership.hand_off(&node);
            }
            let _ = self.connector.bus().flush(Duration::from_secs(1));
            let deadline = std::time::Instant::now() + self.shutdown_timeout;
            while self.fleet.working() > 0 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let clean = self.fleet.stop();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.connector.close(Duration::from_secs(2));
        clean
    }

    /// The startup-event listener. Active-active members read the events in one
    /// queue group per site, so each event reaches one of them; a node it does not
    /// own is handed to its owner (`Membership::hand_off`).
    fn listen_for_events(
        &self,
        config: &Config,
        metrics: &Arc<Metrics>,
    ) -> Result<JoinHandle<()>, StartError> {
        let component = &config.lifecycle_component;
        let queue = match &self.membership {
            Some(_) => Some(
                QueueGroup::new(format!("provisioner.{}", config.site))
                    .map_err(StartError::QueueGroup)?,
            ),
            None => None,
        };
        let (subscription, identities) = lifecycle::subscribe_startups(
            self.connector.bus(),
            component,
            queue.as_ref(),
            Arc::clone(metrics),
        )
        .map_err(|error| StartError::Events {
            component: component.clone(),
            error,
        })?;
        let fleet = Arc::clone(&self.fleet);
        let membership = self.membership.clone();
        std::thread::Builder::new()
            .name("events".into())
            .spawn(move || {
                // Held for as long as the listener runs.
                let _subscription = subscription;
                match membership {
                    Some(m) => {
                        super::events::run_with(&fleet, &identities, &|node| m.hand_off(node))
                    }
                    None => super::events::run(&fleet, &identities),
                }
            })
            .map_err(|error| StartError::Thread {
                name: "events",
                error,
            })
    }

    fn start_election(
        &self,
        client: &ClientConfig,
        metrics: &Arc<Metrics>,
        options: ElectionOptions,
        trigger: Sender<()>,
    ) -> Result<(JoinHandle<()>, Arc<Mutex<ElectionState>>), StartError> {
        let election = Election::new(
            self.connector.bus().clone(),
            &client.identity,
            options,
            Arc::clone(metrics),
        )
        .map_err(StartError::Election)?;
        let state = election.state();
        let (won, lost, stop) = (
            Arc::clone(&self.fleet),
            Arc::clone(&self.fleet),
            Arc::clone(&self.fleet),
        );
        let thread = std::thread::Builder::new()
            .name("election".into())
            .spawn(move || {
                let callbacks = Callbacks {
                    won: Box::new(move || {
                        won.pause().resume();
                        log::warn!("Became leader after winning election");
                        // Never block the campaign on a discovery in progress (Go did).
                        if trigger.try_send(()).is_ok() {
                            log::info!("Triggered a discovery after becoming leader");
                        }
                    }),
                    lost: Box::new(move || {
                        lost.pause().pause();
                        log::warn!("Lost leadership");
                        lost.remove_all();
                    }),
                };
                election.run(callbacks, &stop.stopped());
            })
            .map_err(|error| StartError::Thread {
                name: "election",
                error,
            })?;
        Ok((thread, state))
    }
}
