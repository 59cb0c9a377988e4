//! Fleet scheduling: the identity → entry map, the bounded work queue, the worker
//! pool and the finisher (the Go provisioner, choria-io/provisioner).
//!
//! All state lives in a [`Fleet`] value (Go kept it in package globals), so two
//! provisioners can run in one process. Users observe Go's rule *an identity is
//! queued at most once until it is finished*, with Go's defects fixed: entries carry
//! a generation so a late finish never removes a newer entry, a full queue is
//! reported as such (not as "added"), the gauges are exact, and shutdown waits for
//! in-flight nodes within a bound.

mod admission;
pub(crate) mod approvals;
pub(crate) mod audit;
pub(crate) mod control;
pub(crate) mod control_socket;
pub mod daemon;
pub mod discovery;
pub mod election;
pub(crate) mod events;
mod finisher;
pub mod membership;
pub mod rendezvous;
pub(crate) mod status;
mod workers;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;

use crate::choria::identity::Identity;
use crate::config::{IdentityPolicy, Pause};
use crate::metrics::Metrics;
use crate::node::driver::{Driver, Finished, Ready, Ticket};
use crate::node::outcome::Outcome;

/// Go's work queue capacity.
pub(crate) const QUEUE_CAPACITY: usize = 50_000;

/// How long a provisioned node stays known after its restart (Go's 60 s).
pub(crate) const COOLDOWN: Duration = Duration::from_secs(60);

/// How long a node another provisioner holds is left alone before it is offered to
/// the workers again: go-choria's provisioning lock lasts two minutes from its
/// holder's last use, plus a margin for clock steps and the holder's last call.
pub(crate) const LOCK_WINDOW: Duration = Duration::from_secs(125);

/// How long an identity whose attempt failed without a single reply is kept before it
/// may be queued again, the first time; it doubles each time in a row, up to
/// [`SILENT_COOLDOWN_MAX`].
pub(crate) const SILENT_COOLDOWN: Duration = Duration::from_secs(30);

/// How long after the broker connection came back a silent node is not struck:
/// until the last follow-up discovery (`discovery::FOLLOW_UPS`), which finds the
/// nodes that were not back yet.
pub(crate) const RECOVERY_WINDOW: Duration = discovery::FOLLOW_UPS[discovery::FOLLOW_UPS.len() - 1];

/// The longest a silent identity is kept.
pub(crate) const SILENT_COOLDOWN_MAX: Duration = Duration::from_secs(3600);

/// Silent identities whose strikes are counted at once.
pub(crate) const SILENT_KEPT: usize = 100_000;

/// Provisions nodes; implemented by the host layer's `Driver`. An attempt begins
/// on a worker and, whenever it waits on its node, is parked without a thread until
/// something arrives for it: it comes back on [`Provision::ready`], and a worker
/// [`Provision::resume`]s it.
pub trait Provision: Send + Sync {
    /// Begins an attempt for the ticket's node: `Some` when it ended at once,
    /// `None` when it is parked. Implementations watch `stopping`.
    fn begin(&self, ticket: Ticket, stopping: &AtomicBool) -> Option<Finished>;

    /// Parked attempts that have something to do.
    fn ready(&self) -> Receiver<Ready>;

    /// Runs a parked attempt's next turns: `Some` when it ended.
    fn resume(&self, ready: Ready, stopping: &AtomicBool) -> Option<Finished>;

    /// Whether another attempt may begin now (the attempts under way are bounded).
    fn has_room(&self) -> bool;

    /// Ends every parked attempt: the fleet is stopping.
    fn abandon_all(&self) -> Vec<Finished>;

    /// Attempts under way (parked or with a worker).
    fn waiting(&self) -> usize;

    /// The nodes away upgrading (holding an `upgrades_max_in_flight` slot) and
    /// since when.
    fn upgrading(&self) -> Vec<(Identity, Instant)>;

    /// Nodes that ended an attempt waiting (`upgrade_waiting`) and whose turn has
    /// come: the fleet queues them again.
    fn woken(&self) -> Vec<Identity>;

    /// `n` of the nodes [`Provision::woken`] gave are not this instance's to queue
    /// (another instance owns them now): wake as many other waiting nodes instead.
    fn pass_on_wakes(&self, n: usize);
}

/// Which nodes this instance provisions (active-active: the nodes it owns among the
/// live instances). Asked when a node is offered and again when a worker takes it.
pub(crate) trait Ownership: Send + Sync {
    /// True when this instance should provision `identity` now.
    fn owns(&self, identity: &Identity) -> bool;

    /// False while this instance owns nothing yet (joining) or any more (leaving):
    /// discovery is skipped then.
    fn ready(&self) -> bool {
        true
    }
}

/// Where an identity came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A broadcast discovery reply.
    Discovery,
    /// A lifecycle startup event.
    Event,
    /// A node that waited its turn (an upgrade slot, or another provisioner's
    /// lock window) and is queued again; not counted as discovered.
    Retry,
}

impl Source {
    /// The `source` label of `refused_identities`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Source::Discovery => "discovery",
            Source::Event => "event",
            Source::Retry => "retry",
        }
    }
}

/// What [`Fleet::add`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddResult {
    /// Newly queued.
    Added,
    /// Already known (queued, being provisioned or cooling down); nothing queued.
    Known,
    /// The work queue is full; the identity is not kept, the next discovery retries.
    QueueFull,
    /// The fleet is stopping.
    Stopping,
    /// Another instance owns the node (active-active); nothing queued.
    NotOurs,
    /// The identity policy (`identity_allow`, `identity_deny`) refuses it, or an
    /// operator denied it: counted, nothing queued, nothing kept.
    Refused,
    /// It waits for an operator's approval (`approval: required`): nothing queued;
    /// its last sighting is noted.
    Pending,
}

/// Scheduler settings.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// Worker threads.
    pub workers: usize,
    /// Work queue capacity (50,000 in production; small in tests).
    pub capacity: usize,
    /// How long an identity stays known after a successful attempt.
    pub cooldown: Duration,
    /// How long `Fleet::stop` waits for in-flight nodes.
    pub shutdown_timeout: Duration,
    /// How long a node found locked by another provisioner is left alone before it
    /// is offered again (`LOCK_WINDOW`).
    pub lock_window: Duration,
    /// The first cool-down of a silent identity (`SILENT_COOLDOWN`).
    pub silent_cooldown: Duration,
    /// `identity_allow` and `identity_deny`: an identity they refuse is never queued.
    pub identity_policy: Option<Arc<IdentityPolicy>>,
}

impl Default for FleetOptions {
    fn default() -> Self {
        FleetOptions {
            workers: 4,
            capacity: QUEUE_CAPACITY,
            cooldown: COOLDOWN,
            shutdown_timeout: Duration::from_secs(10),
            lock_window: LOCK_WINDOW,
            silent_cooldown: SILENT_COOLDOWN,
            identity_policy: None,
        }
    }
}

/// A queued unit of work: one identity at one generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Job {
    /// Node identity.
    pub identity: Identity,
    /// The entry generation this job belongs to.
    pub generation: u64,
}

/// Where an entry is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting in the queue since the instant (a stale node is not asked), in that
    /// lane (kept here rather than beside the state: the map's entries stay 32
    /// bytes, a megabyte at 100,000 nodes).
    Queued(Instant, Lane),
    Working,
    /// Known until the instant, so that nobody queues it meanwhile; then the
    /// finisher does what the second field says.
    CoolingDown(Instant, AfterCoolDown),
}

/// What the finisher does with an entry once its time has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterCoolDown {
    /// Forget it: a discovery or a startup event queues it again.
    Forget,
    /// Forget it and offer it to the workers again at once, if it is still ours: a
    /// node another provisioner held (its lock has run out, and if that provisioner
    /// died nothing else would bring the node back before the next discovery).
    Offer,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    generation: u64,
    state: State,
}

/// The two lanes of the work queue. A node a discovery found (or that waited its
/// turn) is confirmed: it answered a broadcast, or was already being provisioned.
/// A node known only from a startup event may be made up by anyone who can publish
/// one: it waits in a lane of its own, which workers take from only when the
/// confirmed lane is empty, so that honest nodes are never starved behind a flood of
/// announced names; a discovery that finds a node waiting there moves it to the
/// confirmed lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Lane {
    /// Found by a discovery, or queued again after waiting its turn.
    Confirmed,
    /// Known only from a startup event (or a peer's handoff of one).
    Announced,
}

impl Lane {
    /// `confirmed` or `announced`, as `/nodes` shows it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Lane::Confirmed => "confirmed",
            Lane::Announced => "announced",
        }
    }
}

/// The scheduler of one provisioner.
pub struct Fleet {
    hosts: Mutex<HashMap<Identity, Entry>>,
    next_generation: AtomicU64,
    work_tx: Sender<Job>,
    work_rx: Receiver<Job>,
    /// The announced lane (`Lane::Announced`), a fifth of `capacity`.
    announced_tx: Sender<Job>,
    announced_rx: Receiver<Job>,
    /// When the earliest cool-down in `hosts` runs out, in nanoseconds since
    /// `epoch` (`u64::MAX`: none): written only under `hosts`' lock, so the
    /// finisher sweeps the map only when something is due.
    next_cool_down: AtomicU64,
    epoch: Instant,
    stop_tx: Mutex<Option<Sender<()>>>,
    stop_rx: Receiver<()>,
    stopping: AtomicBool,
    options: FleetOptions,
    metrics: Arc<Metrics>,
    pause: Arc<Pause>,
    provisioner: Arc<dyn Provision>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    queue_full: AtomicU64,
    ownership: OnceLock<Arc<dyn Ownership>>,
    board: status::Board,
    /// Silent identities and how many attempts in a row they let fail unanswered.
    silent: Mutex<HashMap<Identity, u32>>,
    /// Until when the workers let attempts under way finish their step, once
    /// stopping.
    stop_deadline: OnceLock<Instant>,
    /// Identities the policy refused, logged at most once a minute.
    policy_refusals: crate::throttle::Throttle,
    /// The generations of the attempts under way that were taken from the announced
    /// lane: at most [`Fleet::announced_in_flight_max`].
    announced_in_flight: Mutex<std::collections::HashSet<u64>>,
    /// Operators' approvals (`approval: required`), set once before start.
    approvals: OnceLock<Arc<approvals::Approvals>>,
    /// The broker connection, set once before start: a node silent while it
    /// recovers is not struck (see [`Fleet::finish`]).
    connection: OnceLock<Arc<crate::choria::connector::ConnectionState>>,
}

impl Fleet {
    /// A scheduler that hands nodes to `provisioner`; call `Fleet::start` to run it.
    pub fn new(
        options: FleetOptions,
        metrics: Arc<Metrics>,
        pause: Arc<Pause>,
        provisioner: Arc<dyn Provision>,
    ) -> Arc<Fleet> {
        let (work_tx, work_rx) = bounded(options.capacity.max(1));
        let (announced_tx, announced_rx) = bounded((options.capacity / 5).max(1));
        let (stop_tx, stop_rx) = bounded(0);
        metrics.waiting_nodes.set(0);
        metrics.work_queue_entries.set(0);
        Arc::new(Fleet {
            hosts: Mutex::new(HashMap::new()),
            next_generation: AtomicU64::new(1),
            work_tx,
            work_rx,
            announced_tx,
            announced_rx,
            next_cool_down: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
            stop_tx: Mutex::new(Some(stop_tx)),
            stop_rx,
            stopping: AtomicBool::new(false),
            policy_refusals: crate::throttle::Throttle::default(),
            announced_in_flight: Mutex::new(std::collections::HashSet::new()),
            approvals: OnceLock::new(),
            connection: OnceLock::new(),
            options,
            metrics,
            pause,
            provisioner,
            threads: Mutex::new(Vec::new()),
            queue_full: AtomicU64::new(0),
            ownership: OnceLock::new(),
            board: status::Board::default(),
            silent: Mutex::new(HashMap::new()),
            stop_deadline: OnceLock::new(),
        })
    }

    /// Provisions only the nodes `ownership` says are ours (set once, before
    /// [`Fleet::start`]); without it every node is ours.
    pub(crate) fn set_ownership(&self, ownership: Arc<dyn Ownership>) {
        let _ = self.ownership.set(ownership);
    }

    /// Strikes no silent node while `connection` is down or has just come back
    /// (set once, before [`Fleet::start`]).
    pub(crate) fn set_connection(
        &self,
        connection: Arc<crate::choria::connector::ConnectionState>,
    ) {
        let _ = self.connection.set(connection);
    }

    /// True while the broker connection is down or came back less than
    /// [`RECOVERY_WINDOW`] ago.
    fn connection_recovering(&self) -> bool {
        self.connection
            .get()
            .is_some_and(|c| c.recovering(RECOVERY_WINDOW))
    }

    /// Asks `approvals` before queueing any node (set once, before
    /// [`Fleet::start`]).
    pub(crate) fn set_approvals(&self, approvals: Arc<approvals::Approvals>) {
        let _ = self.approvals.set(approvals);
    }

    /// Operators' approvals, when `approval: required`.
    pub(crate) fn approvals(&self) -> Option<&Arc<approvals::Approvals>> {
        self.approvals.get()
    }

    /// True unless an [`Ownership`] says another instance owns `identity`.
    pub(crate) fn owns(&self, identity: &Identity) -> bool {
        self.ownership.get().is_none_or(|o| o.owns(identity))
    }

    /// False while an [`Ownership`] says this instance owns nothing.
    pub(crate) fn owns_any(&self) -> bool {
        self.ownership.get().is_none_or(|o| o.ready())
    }

    /// The identities waiting in the queue (not yet taken by a worker).
    pub(crate) fn queued_identities(&self) -> Vec<Identity> {
        self.hosts
            .lock()
            .iter()
            .filter(|(_, e)| matches!(e.state, State::Queued(..)))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Entries being provisioned by a worker right now.
    pub(crate) fn working(&self) -> usize {
        self.hosts
            .lock()
            .values()
            .filter(|e| e.state == State::Working)
            .count()
    }

    /// Starts the workers and the finisher.
    pub(crate) fn start(self: &Arc<Fleet>) {
        let mut threads = self.threads.lock();
        for n in 0..self.options.workers {
            let fleet = Arc::clone(self);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("worker-{n}"))
                    .spawn(move || workers::run(&fleet))
                    .expect("spawn worker thread"),
            );
        }
        let fleet = Arc::clone(self);
        threads.push(
            std::thread::Builder::new()
                .name("finisher".into())
                .spawn(move || finisher::run(&fleet))
                .expect("spawn finisher thread"),
        );
    }

    /// How many offers were refused because the queue was full since the last call.
    pub(crate) fn take_queue_full(&self) -> u64 {
        self.queue_full.swap(0, Ordering::Relaxed)
    }

    /// Forgets every identity and empties the queue (leadership lost). Nodes inside
    /// workers carry on until their next pause check fails.
    pub(crate) fn remove_all(&self) {
        let mut hosts = self.hosts.lock();
        hosts.clear();
        while self.work_rx.try_recv().is_ok() {}
        while self.announced_rx.try_recv().is_ok() {}
        drop(hosts);
        self.update_gauges();
    }

    /// True when `identity` is known at any state.
    pub fn is_known(&self, identity: &str) -> bool {
        self.hosts.lock().contains_key(identity)
    }

    /// Number of identities known (queued, in progress or cooling down).
    pub fn known(&self) -> usize {
        self.hosts.lock().len()
    }

    /// Entries waiting in the work queue (both lanes).
    pub fn queued(&self) -> usize {
        self.work_rx.len() + self.announced_rx.len()
    }

    /// The work queue's capacity.
    pub(crate) fn capacity(&self) -> usize {
        self.options.capacity.max(1)
    }

    /// The pause flag.
    pub(crate) fn pause(&self) -> &Arc<Pause> {
        &self.pause
    }

    /// What is known of each node (in flight, history, audit trail).
    pub(crate) fn board(&self) -> &status::Board {
        &self.board
    }

    /// The metrics.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// A receiver that disconnects when the fleet stops, for loops to select on.
    pub(crate) fn stopped(&self) -> Receiver<()> {
        self.stop_rx.clone()
    }

    /// True once [`Fleet::stop`] was called.
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Stops taking work, lets in-flight nodes finish their current step and waits
    /// for the threads up to the shutdown timeout. Returns true if all stopped.
    pub(crate) fn stop(&self) -> bool {
        let deadline = Instant::now() + self.options.shutdown_timeout;
        let _ = self.stop_deadline.set(deadline);
        self.stopping.store(true, Ordering::Relaxed);
        self.stop_tx.lock().take();
        let threads: Vec<JoinHandle<()>> = self.threads.lock().drain(..).collect();
        let mut all = true;
        for t in threads {
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if t.is_finished() {
                let _ = t.join();
            } else {
                all = false;
            }
        }
        for finished in self.provisioner.abandon_all() {
            workers::finished(self, finished);
        }
        all
    }

    /// Takes the next job's entry if it is still current, marking it in progress.
    fn begin(&self, job: &Job) -> Option<Instant> {
        let mut hosts = self.hosts.lock();
        let entry = hosts.get_mut(&job.identity)?;
        let State::Queued(since, lane) = entry.state else {
            return None;
        };
        if entry.generation != job.generation {
            return None;
        }
        entry.state = State::Working;
        if lane == Lane::Announced {
            self.announced_in_flight.lock().insert(job.generation);
        }
        Some(since)
    }

    /// Attempts of announced nodes (known only from a startup event) under way at
    /// once: four per worker, so that made-up names answering their inventory
    /// never keep more helper runs waiting than the workers get through in a
    /// moment, and a confirmed node always finds a worker soon.
    pub(crate) fn announced_in_flight_max(&self) -> usize {
        self.options.workers.max(1) * 4
    }

    /// Whether another announced node may be begun now.
    pub(crate) fn announced_has_room(&self) -> bool {
        self.announced_in_flight.lock().len() < self.announced_in_flight_max()
    }

    /// Announced nodes waiting in their lane.
    pub(crate) fn announced_waiting(&self) -> usize {
        self.announced_rx.len()
    }

    /// Routes an attempt's outcome: forget now, after the cool-down, or (a node
    /// another provisioner holds) offer it again after the lock window.
    ///
    /// A node that never answered gets a cool-down that grows each time it stays
    /// silent (a made-up name is not tried again and again), except while the
    /// broker connection recovers: real nodes come back on their own schedule after
    /// an outage, up to the last follow-up discovery, and one asked before it was
    /// back is forgotten at once, to be queued again by the discovery that finds it.
    fn finish(&self, job: &Job, outcome: &Outcome, silent: bool) {
        self.announced_in_flight.lock().remove(&job.generation);
        if silent && matches!(outcome, Outcome::Failed(_)) && self.connection_recovering() {
            log::debug!(
                "{} did not answer while the broker connection recovers: forgotten, not \
                 struck; the next discovery that finds it queues it again",
                job.identity
            );
            self.remove(&job.identity, job.generation);
            return;
        }
        let strikes = self.silent_strikes(&job.identity, outcome, silent);
        let (wait, then) = if let Some(strikes) = strikes {
            // A made-up name is not queued again straight away, and less often each
            // time it stays silent.
            let wait = self
                .options
                .silent_cooldown
                .saturating_mul(1 << strikes.saturating_sub(1).min(16))
                .min(SILENT_COOLDOWN_MAX);
            log::debug!(
                "{} stayed silent ({strikes} times in a row): not queued again for {}s",
                job.identity,
                wait.as_secs()
            );
            (wait, AfterCoolDown::Forget)
        } else if outcome.needs_cooldown() {
            (self.options.cooldown, AfterCoolDown::Forget)
        } else if matches!(outcome, Outcome::Locked(_)) {
            (self.options.lock_window, AfterCoolDown::Offer)
        } else {
            self.remove(&job.identity, job.generation);
            return;
        };
        let now = Instant::now();
        let at = now.checked_add(wait).unwrap_or(now);
        let mut hosts = self.hosts.lock();
        if let Some(entry) = hosts.get_mut(&job.identity) {
            if entry.generation == job.generation {
                entry.state = State::CoolingDown(at, then);
                self.next_cool_down
                    .fetch_min(self.since_epoch(at), Ordering::Relaxed);
            }
        }
    }

    /// `at` in nanoseconds since the fleet was made.
    fn since_epoch(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX - 1)
    }

    /// When the earliest cool-down runs out, if any cools down.
    fn next_cool_down(&self) -> Option<Instant> {
        let next = self.next_cool_down.load(Ordering::Relaxed);
        (next != u64::MAX).then(|| self.epoch + Duration::from_nanos(next))
    }

    /// Counts an attempt that ended without a single reply from its node: the times in
    /// a row it did, or `None` when it answered (its count is forgotten) or ended
    /// otherwise than in failure. At most [`SILENT_KEPT`] identities are counted; past
    /// that a silent one gets the first cool-down only.
    fn silent_strikes(&self, identity: &Identity, outcome: &Outcome, silent: bool) -> Option<u32> {
        let mut strikes = self.silent.lock();
        if !silent || !matches!(outcome, Outcome::Failed(_)) {
            strikes.remove(identity);
            return None;
        }
        if strikes.len() >= SILENT_KEPT && !strikes.contains_key(identity) {
            return Some(1);
        }
        let n = strikes.entry(identity.clone()).or_insert(0);
        *n = n.saturating_add(1);
        Some(*n)
    }

    /// The finisher's end of cool-downs: when one has run out by `now`, forgets
    /// every entry whose cool-down has, in one walk of the map under its lock, then
    /// offers again those whose [`AfterCoolDown`] says so. The walk is the price of
    /// keeping no second record of the cool-downs (a heap of them was 4 MB at
    /// 100,000 nodes), at most once per [`finisher::slack`] and only while something
    /// is due: measured on 2026-12-07 (release build, a 100,000-entry map, three
    /// runs), 0.42-0.68 ms for a walk that forgets nothing and 2.9-3.9 ms for one that
    /// forgets every entry (each forgotten name is freed), under the map's lock.
    fn cooled_down(&self, now: Instant) {
        if self.next_cool_down().is_none_or(|next| next > now) {
            return;
        }
        let mut offers = Vec::new();
        let mut next = u64::MAX;
        let mut hosts = self.hosts.lock();
        hosts.retain(|identity, entry| match entry.state {
            State::CoolingDown(at, then) if at <= now => {
                if then == AfterCoolDown::Offer {
                    offers.push(identity.clone());
                }
                false
            }
            State::CoolingDown(at, _) => {
                next = next.min(self.since_epoch(at));
                true
            }
            State::Queued(..) | State::Working => true,
        });
        self.next_cool_down.store(next, Ordering::Relaxed);
        drop(hosts);
        self.update_gauges();
        for identity in offers {
            match self.add(&identity, Source::Retry) {
                AddResult::Added => log::debug!(
                    "Offering {identity} again: the lock another provisioner held has run out"
                ),
                AddResult::QueueFull => log::debug!(
                    "Could not offer {identity} again, the queue is full; the next discovery will"
                ),
                AddResult::Known
                | AddResult::Stopping
                | AddResult::NotOurs
                | AddResult::Refused
                | AddResult::Pending => {}
            }
        }
    }

    /// The longest the finisher may sleep without taking a finish late.
    fn finisher_sleep(&self) -> Duration {
        self.options.cooldown.min(self.options.lock_window)
    }

    /// Forgets `identity` if its entry is still generation `generation`.
    fn remove(&self, identity: &Identity, generation: u64) {
        let mut hosts = self.hosts.lock();
        if hosts
            .get(identity)
            .is_some_and(|e| e.generation == generation)
        {
            hosts.remove(identity);
        }
        drop(hosts);
        self.update_gauges();
    }

    fn update_gauges(&self) {
        self.metrics
            .waiting_nodes
            .set(self.hosts.lock().len() as i64);
        self.metrics.work_queue_entries.set(self.queued() as i64);
    }
}

impl Provision for Driver {
    fn begin(&self, ticket: Ticket, stopping: &AtomicBool) -> Option<Finished> {
        Driver::begin(self, ticket, stopping)
    }

    fn ready(&self) -> Receiver<Ready> {
        Driver::ready(self)
    }

    fn resume(&self, ready: Ready, stopping: &AtomicBool) -> Option<Finished> {
        Driver::resume(self, ready, stopping)
    }

    fn has_room(&self) -> bool {
        Driver::has_room(self)
    }

    fn abandon_all(&self) -> Vec<Finished> {
        Driver::abandon_all(self)
    }

    fn waiting(&self) -> usize {
        Driver::waiting(self)
    }

    fn upgrading(&self) -> Vec<(Identity, Instant)> {
        self.sequence().upgrading()
    }

    fn woken(&self) -> Vec<Identity> {
        self.sequence().woken()
    }

    fn pass_on_wakes(&self, n: usize) {
        self.sequence().pass_on_wakes(n)
    }
}

#[cfg(test)]
mod tests;
