//! Active-active membership: the live instances of one `site` and which nodes this
//! one owns.
//!
//! Each instance publishes a `Heartbeat` every `heartbeat` on
//! `provisioning.provisioner.peers.<site>` (`choria::peers`), a subject
//! provisioning-mode nodes can neither publish to nor read, so no node can fake a
//! peer or silence one. A peer silent for [`SILENT_BEATS`] heartbeats is dropped; a
//! peer that stops cleanly says `leaving` and is dropped at once. The live set
//! (this instance included) decides ownership by rendezvous hashing
//! ([`super::rendezvous`]): every instance sees the same set and agrees without
//! talking.
//!
//! Timing: an instance owns nothing until it has listened for one heartbeat period
//! (`joining`): by then it has heard every live peer, and every peer has heard it (it
//! beats at once, and a peer answers a newcomer with a beat of its own). It then
//! triggers a discovery. Every change of the live set triggers one too (at most one
//! per heartbeat period), so nodes that changed hands are found at once rather than
//! at the next `interval`. Nodes a worker takes are checked again, so a node queued
//! before the change is dropped by its old owner.
//!
//! The pause flag (`config::Pause`, set by whatever embeds the daemon) takes this
//! instance out of the set as `leaving` does, until it is resumed: a paused
//! instance's share goes to the others rather than waiting with it.
//!
//! The upgrade cap (`upgrades_max_in_flight`) is the site's: the membership splits
//! it among the live instances (`node::upgrade_slots::split`, by rank in the sorted
//! live set) and sets this instance's part on the slots the provisioning sequence
//! takes from (`Membership::share_upgrade_slots`) whenever the live set changes.
//!
//! Leaving: `Membership::leave` says `leaving` and owns nothing from then on; the
//! daemon lets the nodes in flight finish (they hold the node's provisioning lock) and
//! forgets the rest, which their new owners have already discovered.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, never, select, tick, Receiver, Sender};
use parking_lot::{Mutex, RwLock};

use super::rendezvous::Members;
use super::{AddResult, Fleet, Ownership, Source};
use crate::backoff::random_u64;
use crate::choria::bus::Bus;
use crate::choria::identity::Identity;
use crate::choria::peers::{self, Handoff, Heartbeat, PeerMessageError, PeerState};
use crate::metrics::Metrics;
use crate::node::upgrade_slots::{split, UpgradeSlots};
use crate::throttle::Throttle;

/// The heartbeat period in production.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

/// A peer silent for this many heartbeat periods is dropped.
pub const SILENT_BEATS: u32 = 3;

/// Handoffs waiting for the membership thread.
const BACKLOG: usize = 1024;

/// Heartbeats waiting for the membership thread: a few per peer and period.
const BEATS_BACKLOG: usize = 256;

/// Where this instance stands among its peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Listening for peers before owning anything.
    Joining,
    /// A member: provisions its share.
    Active,
    /// Paused by the operator: out of the set (its share goes to the others) until
    /// resumed.
    Paused,
    /// Stopping: owns nothing.
    Leaving,
}

impl MemberState {
    /// `joining`, `active`, `paused` or `leaving`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            MemberState::Joining => "joining",
            MemberState::Active => "active",
            MemberState::Paused => "paused",
            MemberState::Leaving => "leaving",
        }
    }
}

/// What the reader thread hands the membership thread.
#[derive(Debug, Clone, Copy)]
struct Peer {
    incarnation: u64,
    sequence: u64,
    seen: Instant,
    /// Its own heartbeat period: it is silent after [`SILENT_BEATS`] of them.
    every: Duration,
}

/// Why the membership could not start; `Display` says what failed.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    /// The heartbeats of the site could not be subscribed to.
    #[error("cannot subscribe to the heartbeats of site {site}: {error}")]
    Heartbeats {
        /// The site.
        site: String,
        /// Why.
        error: std::io::Error,
    },
    /// The handoffs to this instance could not be subscribed to.
    #[error("cannot subscribe to node handoffs: {0}")]
    Handoffs(std::io::Error),
    /// The membership thread could not be started.
    #[error("cannot start the membership thread: {0}")]
    Thread(std::io::Error),
}

/// One instance's view of its site's live instances.
pub struct Membership {
    me: Identity,
    site: String,
    incarnation: u64,
    heartbeat: Duration,
    bus: Bus,
    /// Signs our heartbeats and handoffs, checks the peers'.
    seal: Arc<peers::Seal>,
    metrics: Arc<Metrics>,
    view: RwLock<Arc<Members>>,
    peers: Mutex<HashMap<Identity, Peer>>,
    sequence: Mutex<u64>,
    settled: AtomicBool,
    away: AtomicBool,
    leaving: AtomicBool,
    /// The upgrade slots whose part this membership sets, once shared; locked while
    /// a part is computed and set, so that two changes (the membership thread's and
    /// `leave`) cannot set their parts in the wrong order.
    slots: Mutex<Option<Arc<UpgradeSlots>>>,
}

impl Membership {
    /// The membership of `me` in `site` (one subject token, checked by the
    /// configuration), beating every `heartbeat` on `bus`.
    pub(crate) fn new(
        me: Identity,
        site: &str,
        heartbeat: Duration,
        bus: Bus,
        seal: Arc<peers::Seal>,
        metrics: Arc<Metrics>,
    ) -> Arc<Membership> {
        metrics.peers.set(0);
        metrics.share.set(0.0);
        Arc::new(Membership {
            view: RwLock::new(Arc::new(Members::new([me.clone()]))),
            me,
            site: site.to_string(),
            incarnation: random_u64(),
            heartbeat: heartbeat.clamp(
                Duration::from_millis(*peers::HEARTBEAT_MS.start()),
                Duration::from_millis(*peers::HEARTBEAT_MS.end()),
            ),
            bus,
            seal,
            metrics,
            peers: Mutex::new(HashMap::new()),
            sequence: Mutex::new(0),
            settled: AtomicBool::new(false),
            away: AtomicBool::new(false),
            leaving: AtomicBool::new(false),
            slots: Mutex::new(None),
        })
    }

    /// Joining, active, paused or leaving.
    pub fn state(&self) -> MemberState {
        if self.leaving.load(Ordering::Relaxed) {
            MemberState::Leaving
        } else if self.away.load(Ordering::Relaxed) {
            MemberState::Paused
        } else if self.settled.load(Ordering::Relaxed) {
            MemberState::Active
        } else {
            MemberState::Joining
        }
    }

    /// True while this instance is in its own live set (not paused, not leaving).
    fn present(&self) -> bool {
        !self.leaving.load(Ordering::Relaxed) && !self.away.load(Ordering::Relaxed)
    }

    /// The live instances, this one included unless it is paused or leaving, sorted.
    pub fn live(&self) -> Vec<Identity> {
        self.view.read().identities().cloned().collect()
    }

    /// The fraction of the nodes this instance owns: `1/live` while active, else 0.
    pub(crate) fn share(&self) -> f64 {
        let view = self.view.read();
        if self.state() == MemberState::Active && view.contains(&self.me) {
            1.0 / view.len() as f64
        } else {
            0.0
        }
    }

    /// The live instance that owns `node` (this one while joining, too).
    pub(crate) fn owner(&self, node: &Identity) -> Option<Identity> {
        self.view.read().owner(node.as_str()).cloned()
    }

    /// Splits the upgrade cap of `slots` among the live instances from now on,
    /// setting this instance's part at once.
    pub(crate) fn share_upgrade_slots(&self, slots: Arc<UpgradeSlots>) {
        *self.slots.lock() = Some(slots);
        self.update_upgrade_part();
    }

    /// This instance's part of the upgrade cap now; `None` when unlimited (or no
    /// slots were shared).
    pub fn upgrade_part(&self) -> Option<usize> {
        self.slots.lock().as_ref().and_then(|s| s.part())
    }

    /// This instance's part of a cap of `max` for the current view: its [`split`]
    /// while active; 0 while out of the active set (joining, paused, leaving).
    ///
    /// Why 0 and not the last part or the whole cap: out of the active set this
    /// instance owns no node, and its peers have already split the whole cap among
    /// themselves, so any slot it took (an attempt that was in flight when it paused
    /// or began leaving) would be one over the cap; 0 cannot exceed. It cannot starve
    /// either: meanwhile its nodes belong to the active instances, which upgrade them
    /// under their own parts, and becoming active (after joining, when resumed) sets
    /// a part of at least 1, which wakes the nodes waiting here.
    fn part_of(&self, max: usize) -> usize {
        let view = Arc::clone(&self.view.read());
        let rank = view.identities().position(|i| *i == self.me);
        match rank {
            Some(rank) if self.state() == MemberState::Active => split(max, view.len(), rank),
            _ => 0,
        }
    }

    /// Sets this instance's part of the upgrade cap for the current view.
    fn update_upgrade_part(&self) {
        let slots = self.slots.lock();
        let Some(slots) = slots.as_ref() else {
            return;
        };
        if let Some(max) = slots.cap() {
            let part = self.part_of(max);
            if slots.part() != Some(part) {
                log::info!(
                    "Upgrade slots of this instance: {part} of the site's {max} (upgrades_max_in_flight)"
                );
            }
            slots.set_part(part);
        }
    }

    /// Says `leaving` to the peers (best effort: flushed within 1 s) and owns nothing
    /// from now on.
    pub(crate) fn leave(&self) {
        if self.leaving.swap(true, Ordering::Relaxed) {
            return;
        }
        self.rebuild();
        self.beat(PeerState::Leaving);
        let _ = self.bus.flush(Duration::from_secs(1));
        log::info!(
            "Left the active-active set of site {}: its nodes belong to the others",
            self.site
        );
    }

    /// Hands the node of a startup event this instance does not own to its owner.
    /// Nothing is sent while joining or when this instance is the owner (the
    /// discovery that ends the joining finds the node).
    pub(crate) fn hand_off(&self, node: &Identity) {
        match self.owner(node) {
            Some(owner) if owner != self.me => {
                let handoff = Handoff {
                    from: self.me.clone(),
                    node: node.clone(),
                };
                match peers::publish_handoff(&self.bus, &self.seal, &self.site, &owner, &handoff) {
                    Ok(()) => log::debug!("Handed {node} to its owner {owner}"),
                    Err(e) => log::debug!("Could not hand {node} to {owner}: {e}"),
                }
            }
            _ => log::debug!("Dropping the startup event of {node} while joining"),
        }
    }

    /// Runs the heartbeats until `stop` disconnects: listens for peers and handoffs,
    /// beats, drops silent peers, and asks `trigger` for a discovery when the live
    /// set changes. Subscribes before returning, so that a peer heard from at once is
    /// not missed.
    pub(crate) fn start(
        self: &Arc<Self>,
        fleet: Arc<Fleet>,
        trigger: Sender<()>,
    ) -> Result<std::thread::JoinHandle<()>, MembershipError> {
        // One channel each, so that a flood of handoffs can never crowd a heartbeat
        // out; heartbeats are taken first, so that a handoff sent after a peer's
        // `leaving` is taken after it (NATS keeps one publisher's order, and the
        // reader thread puts the beat in its channel before the handoff in its own).
        let (beats_tx, beats) = bounded::<Heartbeat>(BEATS_BACKLOG);
        let (handoffs_tx, handoffs) = bounded::<Identity>(BACKLOG);
        let dropped = |kind: &'static str| {
            let metrics = Arc::clone(&self.metrics);
            let warn = Throttle::default();
            move || {
                metrics
                    .peer_messages_dropped
                    .with_label_values(&[kind])
                    .inc();
                if warn.ready().is_some() {
                    log::warn!(
                        "Dropped a {kind} from another provisioner: its inbox is full \
                         (counted in peer_messages_dropped)"
                    );
                }
            }
        };
        let (beat_dropped, handoff_dropped) = (dropped("heartbeat"), dropped("handoff"));
        let refused = {
            let metrics = Arc::clone(&self.metrics);
            let warn = Arc::new(Throttle::default());
            move |e: PeerMessageError| {
                metrics
                    .peer_messages_refused
                    .with_label_values(&[e.reason()])
                    .inc();
                if warn.ready().is_some() {
                    log::warn!("Refused {e} (counted in peer_messages_refused)");
                }
            }
        };
        let on_beat = refused.clone();
        let beat_subscription =
            peers::subscribe_heartbeats(&self.bus, &self.seal, &self.site, move |m| match m {
                Ok(b) => {
                    if beats_tx.try_send(b).is_err() {
                        beat_dropped();
                    }
                }
                Err(e) => on_beat(e),
            })
            .map_err(|error| MembershipError::Heartbeats {
                site: self.site.clone(),
                error,
            })?;
        let handoff_subscription = peers::subscribe_handoffs(
            &self.bus,
            &self.seal,
            &self.site,
            &self.me,
            move |m| match m {
                Ok(h) => {
                    if handoffs_tx.try_send(h.node).is_err() {
                        handoff_dropped();
                    }
                }
                Err(e) => refused(e),
            },
        )
        .map_err(MembershipError::Handoffs)?;
        let this = Arc::clone(self);
        std::thread::Builder::new()
            .name("membership".into())
            .spawn(move || {
                let _subscriptions = (beat_subscription, handoff_subscription);
                this.run(&fleet, &beats, &handoffs, &trigger);
            })
            .map_err(MembershipError::Thread)
    }

    fn run(
        &self,
        fleet: &Fleet,
        beats: &Receiver<Heartbeat>,
        handoffs: &Receiver<Identity>,
        trigger: &Sender<()>,
    ) {
        let stopped = fleet.stopped();
        // Before the ticker, so that its first tick ends the joining.
        let started = Instant::now();
        let ticker = tick(self.heartbeat);
        let mut last_trigger: Option<Instant> = None;
        let mut pending_trigger = false;
        let (mut beats, mut handoffs) = (beats.clone(), handoffs.clone());
        self.beat(PeerState::Alive);
        log::info!(
            "Joining the active-active set of site {} as {}",
            self.site,
            self.me
        );
        loop {
            let mut changed = false;
            select! {
                recv(stopped) -> _ => break,
                recv(beats) -> msg => match msg {
                    Ok(b) => changed = self.heard(b),
                    Err(_) => beats = never(),
                },
                recv(handoffs) -> msg => match msg {
                    Ok(node) => {
                        // The heartbeats that came before it first.
                        while let Ok(b) = beats.try_recv() {
                            changed |= self.heard(b);
                        }
                        self.handed(fleet, &node);
                    }
                    Err(_) => handoffs = never(),
                },
                recv(ticker) -> _ => {
                    changed = self.follow_pause(fleet.pause().paused());
                    if self.present() {
                        self.beat(PeerState::Alive);
                    }
                    changed |= self.expire();
                    if !self.settled.load(Ordering::Relaxed)
                        && started.elapsed() >= self.heartbeat
                    {
                        self.settled.store(true, Ordering::Relaxed);
                        changed = true;
                    }
                },
            }
            if changed {
                self.rebuild();
                pending_trigger = true;
            }
            if pending_trigger
                && self.state() == MemberState::Active
                && last_trigger.is_none_or(|t| t.elapsed() >= self.heartbeat)
            {
                pending_trigger = false;
                last_trigger = Some(Instant::now());
                if trigger.try_send(()).is_ok() {
                    log::debug!("Triggered a discovery after the live set changed");
                }
            }
        }
        self.metrics.peers.set(0);
        self.metrics.share.set(0.0);
    }

    /// A paused instance leaves the set (its share goes to the others) and a resumed
    /// one comes back; true when that changed.
    fn follow_pause(&self, paused: bool) -> bool {
        if self.leaving.load(Ordering::Relaxed)
            || self.away.swap(paused, Ordering::Relaxed) == paused
        {
            return false;
        }
        if paused {
            self.beat(PeerState::Leaving);
            log::warn!(
                "Paused: out of the active-active set of site {}, its share goes to the others",
                self.site
            );
        } else {
            log::warn!(
                "Resumed: back in the active-active set of site {}",
                self.site
            );
        }
        true
    }

    /// A node another instance handed to us: queued if ours (never handed on again,
    /// so a node cannot bounce between instances; discovery finds it otherwise).
    fn handed(&self, fleet: &Fleet, node: &Identity) {
        if fleet.pause().paused() {
            return;
        }
        match fleet.add(node, Source::Event) {
            AddResult::Added => log::debug!("Queued {node}, handed over by a peer"),
            AddResult::NotOurs => log::debug!("Dropping {node}, handed over but not ours"),
            AddResult::Known
            | AddResult::QueueFull
            | AddResult::Stopping
            | AddResult::Refused
            | AddResult::Pending => {}
        }
    }

    /// Publishes one heartbeat.
    fn beat(&self, state: PeerState) {
        let sequence = {
            let mut s = self.sequence.lock();
            *s += 1;
            *s
        };
        let heartbeat = Heartbeat {
            identity: self.me.clone(),
            site: self.site.clone(),
            incarnation: self.incarnation,
            sequence,
            time: crate::clock::unix_now(),
            every_ms: self.heartbeat.as_millis() as u64,
            state,
        };
        if let Err(e) = peers::publish_heartbeat(&self.bus, &self.seal, &heartbeat) {
            log::debug!("Could not publish a heartbeat: {e}");
        }
    }

    /// Takes one heartbeat in; true when the live set changed.
    fn heard(&self, b: Heartbeat) -> bool {
        if b.identity == self.me {
            if b.incarnation != self.incarnation {
                log::warn!(
                    "Another provisioner of site {} uses this instance's identity {}: \
                     both provision the same share",
                    self.site,
                    self.me
                );
            }
            return false;
        }
        let mut peers = self.peers.lock();
        match b.state {
            PeerState::Leaving => {
                let known = peers
                    .get(&b.identity)
                    .is_some_and(|p| p.incarnation == b.incarnation);
                if known {
                    peers.remove(&b.identity);
                    log::info!("Peer {} left site {}", b.identity, self.site);
                }
                known
            }
            PeerState::Alive => match peers.get_mut(&b.identity) {
                Some(p) if p.incarnation == b.incarnation => {
                    if b.sequence > p.sequence {
                        p.sequence = b.sequence;
                        p.seen = Instant::now();
                        p.every = Duration::from_millis(b.every_ms);
                    }
                    false
                }
                _ => {
                    peers.insert(
                        b.identity.clone(),
                        Peer {
                            incarnation: b.incarnation,
                            sequence: b.sequence,
                            seen: Instant::now(),
                            every: Duration::from_millis(b.every_ms),
                        },
                    );
                    drop(peers);
                    log::info!("Peer {} joined site {}", b.identity, self.site);
                    // Let the newcomer hear us now rather than at our next beat.
                    if self.present() {
                        self.beat(PeerState::Alive);
                    }
                    true
                }
            },
        }
    }

    /// Drops the peers silent for [`SILENT_BEATS`] of their periods; true when any
    /// was.
    fn expire(&self) -> bool {
        let mut peers = self.peers.lock();
        let before = peers.len();
        peers.retain(|id, p| {
            let limit = p.every * SILENT_BEATS;
            let alive = p.seen.elapsed() < limit;
            if !alive {
                log::warn!(
                    "Peer {id} of site {} is silent for {limit:?}: its nodes belong to the others",
                    self.site
                );
            }
            alive
        });
        peers.len() != before
    }

    /// Recomputes the live set and the gauges.
    fn rebuild(&self) {
        let mut live: Vec<Identity> = self.peers.lock().keys().cloned().collect();
        if self.present() {
            live.push(self.me.clone());
        }
        let members = Members::new(live);
        let names: Vec<&str> = members.identities().map(Identity::as_str).collect();
        log::info!(
            "Active-active set of site {} is now {} ({})",
            self.site,
            names.len(),
            names.join(", ")
        );
        *self.view.write() = Arc::new(members);
        self.metrics.peers.set(self.view.read().len() as i64);
        self.metrics.share.set(self.share());
        self.update_upgrade_part();
    }
}

impl Ownership for Membership {
    fn owns(&self, identity: &Identity) -> bool {
        self.state() == MemberState::Active
            && self
                .view
                .read()
                .owner(identity.as_str())
                .is_some_and(|o| *o == self.me)
    }

    fn ready(&self) -> bool {
        self.state() == MemberState::Active
    }
}
