//! `choria-fleet-sim`: N provisioning-mode Choria servers on one NATS connection.
//!
//! Built for tests, the demo and the benchmark, and for operators who want to try a
//! helper or a configuration before pointing the provisioner at real machines. Each
//! node in provisioning mode subscribes to its own `provisioning.node.<identity>`, as
//! a real server does (so a request to a node that is not there gets nats-server's
//! "no responders"), but every subscription hands its messages over on the
//! connection's reader thread to one work queue (no thread per node); a few worker
//! threads decode requests with the server side of the real codec, check them as a
//! provisioning-mode server does (dropping what it would drop), and answer from the
//! node's state; one timer thread runs delayed work (slow replies, restarts).
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

pub mod faults;
pub mod filter;
pub mod keygen;
pub mod node;
pub mod peer;
mod summary;
mod timer;
pub mod verify;

use summary::{node_summary, Counters, StreamedNodes, MAX_DISCOVERIES_KEPT};
pub use summary::{DiscoverySummary, FleetProgress, NodeSummary, Summary};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use parking_lot::Mutex;
use serde::Serialize;

use crate::choria::bus::{Bus, Subscription};
use crate::choria::lifecycle::Event;
use crate::choria::protocol::mcorpc::{RpcReply, RpcRequestBody, StatusCode};
use crate::choria::protocol::{self, Protocol};
use crate::choria::subject::{Subject, SubjectFilter};
use crate::crypto::ids;
pub use faults::{Fault, Faults};
pub use node::{AfterRestart, CsrKey, Node, Phase};
use timer::Timer;

/// Simulator settings.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Number of nodes.
    pub nodes: usize,
    /// Identity of node *n* is `<prefix><n>.<domain>`.
    pub prefix: String,
    /// Domain of the identities.
    pub domain: String,
    /// Server version in inventory.
    pub version: String,
    /// Provisioning token (`cht`); empty accepts any token.
    pub token: String,
    /// Nodes booted per second (0: all at once).
    pub boot_rate: f64,
    /// Fraction of nodes that come back in provisioning mode after their restart.
    pub comeback: f64,
    /// Whether nodes allow `release_update`.
    pub upgradable: bool,
    /// Delay before a restarted or upgraded node is back (go-choria: 2 s).
    pub restart_delay: Duration,
    /// Lifecycle component of the startup events.
    pub component: String,
    /// Request-processing threads.
    pub workers: usize,
    /// Faults and the fractions of nodes that have them.
    pub faults: Faults,
    /// ed25519 seed that signs the nodes' provisioning JWT (random when `None`); its
    /// public key also verifies server JWTs unless `issuer_public` is set.
    pub issuer_seed: Option<[u8; 32]>,
    /// The organisation issuer's public key: a server JWT it did not sign (directly
    /// or through a chain issuer) leaves the node [`Phase::Rejected`] after restart.
    pub issuer_public: Option<[u8; 32]>,
    /// The provisioning JWT every node holds, verbatim (e.g. from
    /// `choria-fleet-sim keys`); its `cht`, `v2` and `update` claims set `token`
    /// (when empty), `v2` and `upgradable`. Made and signed with `issuer_seed` when
    /// `None`.
    pub jwt: Option<String>,
    /// Nodes speak protocol v2 only (their JWT's `v2` claim), v1 only otherwise.
    pub v2: bool,
    /// The key `gencsr` makes.
    pub csr_key: CsrKey,
    /// CA certificate to verify the broker with; the connection then requires TLS,
    /// as provisioning-mode servers always use it.
    pub tls_ca: Option<std::path::PathBuf>,
    /// The nodes' provisioning lock window (go-choria v0.29 and later: 2 minutes);
    /// `None` plays older servers, which have no lock.
    pub lock_window: Option<Duration>,
    /// After the connection to the broker comes back, each node stays away for a
    /// random time up to this (drawn anew at each reconnection), as real servers
    /// reconnect on their own back-off with jitter: it answers nothing meanwhile.
    /// `None` (the default): every node is back with the connection.
    pub reconnect_spread: Option<Duration>,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            nodes: 10,
            prefix: "sim-".into(),
            domain: "example.net".into(),
            version: "0.30.2".into(),
            token: String::new(),
            boot_rate: 0.0,
            comeback: 0.0,
            upgradable: false,
            restart_delay: Duration::from_secs(2),
            component: "provision_mode_server".into(),
            workers: 2,
            faults: Faults::default(),
            issuer_seed: None,
            issuer_public: None,
            jwt: None,
            v2: false,
            csr_key: CsrKey::default(),
            tls_ca: None,
            lock_window: Some(node::LOCK),
            reconnect_spread: None,
        }
    }
}

impl Shared {
    /// The protocol version the nodes' security provider decodes.
    fn speaks(&self) -> Protocol {
        if self.options.v2 {
            Protocol::V2
        } else {
            Protocol::V1
        }
    }
}

/// What the reader thread hands to the sim's workers.
enum Work {
    /// A broadcast discovery request.
    Discovery(Vec<u8>),
    /// A request to node `.0`.
    Direct(usize, Vec<u8>),
}

struct Shared {
    bus: Bus,
    /// Each node's subscription to its own subject while it is in provisioning mode.
    subscriptions: Vec<Mutex<Option<Subscription>>>,
    /// Where the subscriptions hand requests over.
    inbox: Sender<Work>,
    nodes: Vec<Mutex<Node>>,
    faults: Vec<Option<Fault>>,
    booted: Vec<AtomicBool>,
    /// Each node's way back after a reconnection ([`SimOptions::reconnect_spread`]).
    away: Arc<Away>,
    counters: Counters,
    options: SimOptions,
    timer: Timer,
    url: String,
    /// The start, as an instant and in Unix milliseconds, to date instants.
    epoch: (Instant, u64),
    discoveries: Mutex<Vec<DiscoverySummary>>,
}

/// When each node is back after the connection's last reconnection: milliseconds
/// since `since` (0: never away).
struct Away {
    since: Instant,
    back_at_ms: Vec<AtomicU64>,
    reconnections: AtomicU64,
}

impl Away {
    fn new(nodes: usize) -> Away {
        Away {
            since: Instant::now(),
            back_at_ms: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            reconnections: AtomicU64::new(0),
        }
    }

    /// The connection is back: every node draws when it is.
    fn reconnected(&self, spread: Duration) {
        let salt = self.reconnections.fetch_add(1, Ordering::Relaxed) + 1;
        let now = self.since.elapsed().as_millis() as u64;
        for (n, back) in self.back_at_ms.iter().enumerate() {
            let delay = (faults::unit_of(n, salt) * spread.as_millis() as f64) as u64;
            back.store(now + delay, Ordering::Relaxed);
        }
    }

    /// Whether node `n` is connected now.
    fn here(&self, n: usize) -> bool {
        let back = self.back_at_ms[n].load(Ordering::Relaxed);
        back == 0 || self.since.elapsed().as_millis() as u64 >= back
    }
}

impl Shared {
    /// `at` in Unix milliseconds.
    fn unix_ms(&self, at: Instant) -> u64 {
        let (instant, ms) = self.epoch;
        ms.saturating_add(at.saturating_duration_since(instant).as_millis() as u64)
    }
}

/// A running simulated fleet.
pub struct Sim {
    shared: Arc<Shared>,
    stop: Option<Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    _discovery: Subscription,
}

/// The identity of node `n`.
pub fn identity(options: &SimOptions, n: usize) -> String {
    format!("{}{n:05}.{}", options.prefix, options.domain)
}

impl Sim {
    /// Connects to `url` and starts serving `options.nodes` nodes.
    pub fn start(url: &str, mut options: SimOptions) -> std::io::Result<Sim> {
        let invalid = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, m);
        // Only an issuer the caller named verifies server JWTs.
        if options.issuer_public.is_none() {
            options.issuer_public = options.issuer_seed.as_ref().map(keygen::ed25519_public);
        }
        let jwt = match options.jwt.take() {
            Some(jwt) => {
                // Read unverified, as a server reads its own provisioning.jwt.
                let claims: crate::crypto::jwt::ProvisioningClaims =
                    crate::crypto::jwt::unverified_claims(jwt.trim()).map_err(|e| {
                        invalid(format!("the provisioning JWT does not parse: {e}"))
                    })?;
                if claims.cht.is_empty() {
                    // A real server refuses to start with it ("no auth token").
                    return Err(invalid("the provisioning JWT has no token (cht)".into()));
                }
                if options.token.is_empty() {
                    options.token = claims.cht.clone();
                }
                options.v2 |= claims.v2;
                options.upgradable |= claims.update;
                jwt
            }
            None => {
                let seed = *options.issuer_seed.get_or_insert_with(|| {
                    let mut seed = [0u8; 32];
                    ids::random_bytes(&mut seed);
                    seed
                });
                keygen::provisioning_jwt(
                    &seed,
                    &options.token,
                    url,
                    options.v2,
                    options.upgradable,
                    Duration::from_secs(365 * 86_400),
                )
                .map_err(invalid)?
            }
        };
        // A provisioning-mode server presents its provisioning JWT as `auth_token`
        // (go-choria `choria/connection.go`); brokers without auth ignore it.
        let away = Arc::new(Away::new(options.nodes));
        let mut connect = nats::Options::with_token(&jwt)
            .with_name("choria-fleet-sim")
            .max_reconnects(None);
        if let Some(spread) = options.reconnect_spread {
            let away = Arc::clone(&away);
            connect = connect.reconnect_callback(move || away.reconnected(spread));
        }
        if let Some(ca) = &options.tls_ca {
            connect = connect.tls_required(true).add_root_certificate(ca);
        }
        let nc = connect.connect(url)?;
        let jwt: Arc<str> = jwt.into();
        let mut nodes = Vec::with_capacity(options.nodes);
        let mut faults = Vec::with_capacity(options.nodes);
        for n in 0..options.nodes {
            let id = identity(&options, n);
            let mut node = Node::new(&id, &options.version, &options.token, Arc::clone(&jwt));
            node.upgradable = options.upgradable;
            node.csr_key = options.csr_key;
            node.lock_window = options.lock_window;
            if faults::fraction_pick(n, 0x5eed, options.comeback) {
                node.after_restart = AfterRestart::ComeBack;
            }
            faults.push(options.faults.pick(n));
            nodes.push(Mutex::new(node));
        }
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let (inbox, work) = unbounded::<Work>();
        let bus = Bus::new(nc);
        let shared = Arc::new(Shared {
            bus: bus.clone(),
            subscriptions: (0..options.nodes).map(|_| Mutex::new(None)).collect(),
            inbox: inbox.clone(),
            booted: (0..options.nodes).map(|_| AtomicBool::new(false)).collect(),
            away,
            nodes,
            faults,
            counters: Counters::default(),
            timer: Timer::start(stopped.clone()),
            url: url.to_string(),
            epoch: (
                Instant::now(),
                (crate::clock::unix_nanos() / 1_000_000) as u64,
            ),
            discoveries: Mutex::new(Vec::new()),
            options,
        });
        let discovery = SubjectFilter::new("provisioning.broadcast.agent.discovery")
            .map_err(|e| invalid(e.to_string()))?;
        let discovery_subscription = bus.subscribe(&discovery, None, move |m| {
            let _ = inbox.send(Work::Discovery(m.data));
        })?;
        bus.flush(Duration::from_secs(5))?;
        let mut threads = Vec::new();
        for n in 0..shared.options.workers.max(1) {
            let (shared, work, stopped) = (Arc::clone(&shared), work.clone(), stopped.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("sim-worker-{n}"))
                    .spawn(move || worker(&shared, &work, &stopped))?,
            );
        }
        let boot = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name("sim-boot".into())
                .spawn(move || boot_all(&boot, &stopped))?,
        );
        Ok(Sim {
            shared,
            stop: Some(stop),
            threads,
            _discovery: discovery_subscription,
        })
    }

    /// The counters now.
    pub fn progress(&self) -> FleetProgress {
        let c = &self.shared.counters;
        let (mut provisioned, mut shut_down, mut rejected) = (0, 0, 0);
        for node in &self.shared.nodes {
            match node.lock().phase {
                Phase::Provisioned => provisioned += 1,
                Phase::Shutdown => shut_down += 1,
                Phase::Rejected => rejected += 1,
                Phase::Provisioning | Phase::Restarting => {}
            }
        }
        FleetProgress {
            shut_down,
            rejected,
            booted: c.booted.load(Ordering::Relaxed),
            discovery_replies: c.discovery_replies.load(Ordering::Relaxed),
            configured: c.configured.load(Ordering::Relaxed),
            restarted: c.restarted.load(Ordering::Relaxed),
            provisioned,
            failed: c.failed.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            upgrading_peak: c.upgrading_peak.load(Ordering::Relaxed),
        }
    }

    /// Every node's state.
    pub fn summary(&self) -> Summary {
        self.summary_of(
            self.shared
                .nodes
                .iter()
                .zip(&self.shared.faults)
                .map(|(n, fault)| node_summary(&n.lock(), *fault))
                .collect(),
        )
    }

    /// Writes the JSON of [`Sim::summary`] (pretty, the same text) to `out` one node
    /// at a time: neither the summary nor its text is held whole, which at 100,000
    /// nodes was the simulator's peak (160 MB of copies, then 78 MB of text).
    pub fn write_summary(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, &self.summary_of(StreamedNodes(&self.shared)))?;
        out.flush()
    }

    /// The summary with `nodes` for its nodes.
    fn summary_of<Nodes>(&self, nodes: Nodes) -> Summary<Nodes> {
        let (first_request_unix_ms, last_restart_unix_ms) = self.span();
        Summary {
            progress: self.progress(),
            first_request_unix_ms,
            last_restart_unix_ms,
            discoveries: self.shared.discoveries.lock().clone(),
            nodes,
        }
    }

    /// The first request any node received and the last restart any node answered,
    /// in Unix milliseconds.
    fn span(&self) -> (Option<u64>, Option<u64>) {
        let (mut first, mut last) = (None::<Instant>, None::<Instant>);
        for n in &self.shared.nodes {
            let n = n.lock();
            if let Some(at) = n.first_request {
                first = Some(first.map_or(at, |f| f.min(at)));
            }
            if let Some(at) = n.restarted_at {
                last = Some(last.map_or(at, |l| l.max(at)));
            }
        }
        (
            first.map(|at| self.shared.unix_ms(at)),
            last.map(|at| self.shared.unix_ms(at)),
        )
    }

    /// Stops serving and disconnects.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.shared.timer.join();
        for subscription in &self.shared.subscriptions {
            subscription.lock().take();
        }
        let _ = self.shared.bus.flush(Duration::from_secs(1));
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Boots every node at the configured rate, each announcing itself with a
/// CloudEvents startup event.
fn boot_all(shared: &Arc<Shared>, stopped: &Receiver<()>) {
    let gap = if shared.options.boot_rate > 0.0 {
        Duration::from_secs_f64(1.0 / shared.options.boot_rate)
    } else {
        Duration::ZERO
    };
    let started = Instant::now();
    for n in 0..shared.nodes.len() {
        if !gap.is_zero() {
            let due = started + gap * n as u32;
            let wait = due.saturating_duration_since(Instant::now());
            if !wait.is_zero()
                && stopped
                    .recv_timeout(wait)
                    .is_err_and(|e| e.is_disconnected())
            {
                return;
            }
        }
        shared.booted[n].store(true, Ordering::Relaxed);
        shared.counters.booted.fetch_add(1, Ordering::Relaxed);
        announce(shared, n);
    }
}

/// Publishes a lifecycle event of `kind` for a node (CloudEvents, as servers do);
/// `new_version` is set for `upgraded`.
fn emit(shared: &Shared, identity: &str, version: &str, kind: &str, new_version: &str) {
    let mut event = Event::new(kind, identity, &shared.options.component, version);
    event.new_version = new_version.to_string();
    publish_event(shared, &event);
}

fn publish_event(shared: &Shared, event: &Event) {
    if let Ok(subject) = event.subject() {
        let _ = shared.bus.publish(&subject, &event.to_cloudevent_json());
    }
}

/// Node `n` enters provisioning mode: it subscribes to its subject and publishes its
/// startup event.
fn announce(shared: &Shared, n: usize) {
    let identity = shared.nodes[n].lock().identity.clone();
    let version = shared.nodes[n].lock().version.clone();
    listen(shared, n, &identity);
    let event = Event::new("startup", &identity, &shared.options.component, &version);
    publish_event(shared, &event);
}

/// Subscribes node `n` to `provisioning.node.<identity>` unless it already is.
fn listen(shared: &Shared, n: usize, identity: &str) {
    let mut slot = shared.subscriptions[n].lock();
    if slot.is_some() {
        return;
    }
    let Ok(filter) = SubjectFilter::new(format!("provisioning.node.{identity}")) else {
        return;
    };
    let inbox = shared.inbox.clone();
    *slot = shared
        .bus
        .subscribe(&filter, None, move |m| {
            let _ = inbox.send(Work::Direct(n, m.data));
        })
        .ok();
}

/// Node `n` leaves provisioning mode (restarts, shuts down): its subject goes.
fn leave(shared: &Shared, n: usize) {
    shared.subscriptions[n].lock().take();
}

/// Publishes `payload` to a request's reply subject, if it is a valid subject.
fn reply_to(bus: &Bus, subject: &str, payload: &[u8]) {
    if let Ok(subject) = Subject::new(subject) {
        let _ = bus.publish(&subject, payload);
    }
}

fn worker(shared: &Arc<Shared>, work: &Receiver<Work>, stopped: &Receiver<()>) {
    loop {
        let work = crossbeam_channel::select! {
            recv(work) -> m => match m { Ok(m) => m, Err(_) => return },
            recv(stopped) -> _ => return,
        };
        match work {
            Work::Discovery(data) => discovery(shared, &data),
            Work::Direct(n, data) => direct(shared, n, &data),
        }
    }
}

fn now_secs() -> i64 {
    crate::clock::unix_now() as i64
}

/// Answers a broadcast discovery for every booted node in provisioning mode whose
/// agents pass the filter.
fn discovery(shared: &Arc<Shared>, payload: &[u8]) {
    let Ok(request) = protocol::decode_request(payload) else {
        shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if request
        .validate_for_provisioning(shared.speaks(), now_secs())
        .is_err()
        || request.body != b"ping"
    {
        shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let arrived = Instant::now();
    let mut replies = 0u64;
    for (n, node) in shared.nodes.iter().enumerate() {
        if !shared.booted[n].load(Ordering::Relaxed) || !shared.away.here(n) {
            continue;
        }
        let node = node.lock();
        if node.phase != Phase::Provisioning || !passes(&node, &request.filter) {
            continue;
        }
        let reply = protocol::encode_reply(
            &request,
            &node.identity,
            protocol::DISCOVERY_REPLY,
            crate::clock::unix_nanos(),
            Some(&shared.url),
        );
        drop(node);
        reply_to(&shared.bus, &request.reply_to, &reply);
        replies += 1;
        shared
            .counters
            .discovery_replies
            .fetch_add(1, Ordering::Relaxed);
    }
    let mut kept = shared.discoveries.lock();
    if kept.len() < MAX_DISCOVERIES_KEPT {
        kept.push(DiscoverySummary {
            at_unix_ms: shared.unix_ms(arrived),
            replies,
            answered_ms: arrived.elapsed().as_millis() as u64,
        });
    }
}

/// True when `node` passes a request's filter (facts are built only when asked for).
fn passes(node: &Node, f: &protocol::Filter) -> bool {
    let facts = if f.fact.is_empty() {
        serde_json::Value::Null
    } else {
        node.facts()
    };
    filter::passes(
        f,
        &filter::NodeFacts {
            identity: &node.identity,
            agents: &node::AGENTS,
            classes: &[],
            facts: &facts,
        },
    )
}

/// Handles one direct request to node `n`.
fn direct(shared: &Arc<Shared>, n: usize, payload: &[u8]) {
    let dropped = || {
        shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
    };
    if !shared.booted[n].load(Ordering::Relaxed) || !shared.away.here(n) {
        return dropped();
    }
    let Ok(request) = protocol::decode_request(payload) else {
        return dropped();
    };
    if request
        .validate_for_provisioning(shared.speaks(), now_secs())
        .is_err()
    {
        return dropped();
    }
    let fault = shared.faults[n];
    let mut node = shared.nodes[n].lock();
    if node.phase != Phase::Provisioning || !passes(&node, &request.filter) {
        return dropped();
    }
    node.requests += 1;
    node.first_request.get_or_insert_with(Instant::now);
    let nth = node.requests;
    match fault {
        Some(Fault::Silent) if nth <= shared.options.faults.silent_first => return dropped(),
        Some(Fault::Reboot) if nth == 3 => {
            // The node restarts mid-sequence: forgets its keys and lock, announces itself.
            node.reboot();
            drop(node);
            let s = Arc::clone(shared);
            shared
                .timer
                .after(Duration::from_millis(500), move || announce(&s, n));
            return dropped();
        }
        _ => {}
    }
    let reply = match RpcRequestBody::decode(&request.body) {
        Err(e) => RpcReply::new(
            "",
            StatusCode::InvalidData,
            &format!("Could not process request: {e}"),
            serde_json::json!({}),
        ),
        Ok(_) if matches!(fault, Some(Fault::Error)) && nth == 1 => RpcReply::new(
            "",
            StatusCode::UnknownError,
            "simulated failure",
            serde_json::json!({}),
        ),
        Ok(body) => {
            let owner = format!("{}.{}", request.sender_id, request.caller_id);
            node.touched_by(&request.sender_id);
            let (reply, effect) = node.handle(
                &request.agent,
                &body.action,
                &body.data,
                &owner,
                Instant::now(),
            );
            if reply.statuscode == 0 {
                match body.action.as_str() {
                    "configure" => {
                        shared.counters.configured.fetch_add(1, Ordering::Relaxed);
                        emit(shared, &node.identity, &node.version, "provisioned", "");
                    }
                    "restart" => {
                        shared.counters.restarted.fetch_add(1, Ordering::Relaxed);
                        node.restarted_by = Some(request.sender_id.clone());
                    }
                    _ => {}
                }
            }
            apply(shared, n, &mut node, effect);
            reply
        }
    };
    if reply.statuscode != 0 {
        shared.counters.failed.fetch_add(1, Ordering::Relaxed);
    }
    let identity = node.identity.clone();
    drop(node);
    let mut payload = protocol::encode_reply(
        &request,
        &identity,
        &reply.encode(),
        crate::clock::unix_nanos(),
        Some(&shared.url),
    );
    if let Some(Fault::Garbage) = fault {
        if nth == 1 {
            payload = faults::garble(&payload, n, &request);
        }
    }
    let subject = request.reply_to;
    match fault {
        Some(Fault::Slow) => {
            let bus = shared.bus.clone();
            shared.timer.after(shared.options.faults.slow_by, move || {
                reply_to(&bus, &subject, &payload);
            });
        }
        _ => reply_to(&shared.bus, &subject, &payload),
    }
}

/// Carries out what an action started: restarts, upgrades, shutdowns.
fn apply(shared: &Arc<Shared>, n: usize, node: &mut Node, effect: node::NodeEffect) {
    let delay = shared.options.restart_delay;
    match effect {
        node::NodeEffect::None => {}
        node::NodeEffect::Shutdown => {
            emit(shared, &node.identity, &node.version, "shutdown", "");
            node.phase = Phase::Shutdown;
            leave(shared, n);
        }
        node::NodeEffect::Restart => {
            emit(shared, &node.identity, &node.version, "shutdown", "");
            node.phase = Phase::Restarting;
            let s = Arc::clone(shared);
            shared.timer.after(delay, move || {
                leave(&s, n);
                let mut node = s.nodes[n].lock();
                node.reboot();
                let phase = if node.after_restart == AfterRestart::ComeBack && node.restarts == 1 {
                    node.phase = Phase::Provisioning;
                    node.note = Some("came back in provisioning mode (--comeback)".into());
                    Phase::Provisioning
                } else {
                    node.boot(s.options.issuer_public.as_ref(), now_secs())
                };
                drop(node);
                if phase == Phase::Provisioning {
                    announce(&s, n);
                }
            });
        }
        node::NodeEffect::Upgrade(version) => {
            emit(shared, &node.identity, &node.version, "upgraded", &version);
            node.phase = Phase::Restarting;
            let away = shared.counters.upgrading.fetch_add(1, Ordering::Relaxed) + 1;
            shared
                .counters
                .upgrading_peak
                .fetch_max(away, Ordering::Relaxed);
            let s = Arc::clone(shared);
            shared.timer.after(delay, move || {
                s.counters.upgrading.fetch_sub(1, Ordering::Relaxed);
                leave(&s, n);
                let mut node = s.nodes[n].lock();
                node.reboot();
                node.version = version;
                node.phase = Phase::Provisioning;
                drop(node);
                announce(&s, n);
            });
        }
    }
}
