//! Leader election over Choria Streams KV (go-choria's Streams leader election): the campaign for the
//! `provisioner` key of the `CHORIA_LEADER_ELECTION` bucket. The key is reached
//! through `choria::kv`, which knows the subjects.
//!
//! Go's campaign timing and callbacks are kept (create with expected sequence 0,
//! refresh with the last revision, `won` 200 ms after the second successful write,
//! `lost` on the first failed refresh). Beyond Go: a bucket that cannot be opened or
//! has a bad TTL is logged and retried (never a silent forever-pause, never a fatal
//! exit from a background thread), the state is visible in `/healthz`, and a leader
//! that stops cleanly hands over at once instead of letting the key expire: it writes
//! an empty value as its last revision and announces that revision to the standbys on
//! a provisioner-only subject (`choria::peers`). A standby takes over only with a
//! write that expects exactly that revision, so the bucket itself must show that the
//! leader let go; nothing a node can publish (a forged `shutdown` lifecycle event, say)
//! is read by the election at all.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, never, select, Receiver};
use parking_lot::Mutex;

use crate::backoff::{random_u64, FIVE_SEC, TWENTY_SEC};
use crate::choria::bus::Bus;
use crate::choria::kv::{KvError, KvKey};
use crate::choria::peers::{self, Resignation};
use crate::choria::subject::SubjectError;
use crate::metrics::Metrics;
use crate::throttle::Throttle;

/// The bucket Choria brokers create for elections.
pub(crate) const BUCKET: &str = "CHORIA_LEADER_ELECTION";

/// The election (key) the provisioner campaigns in.
pub(crate) const ELECTION: &str = "provisioner";

/// The JetStream API prefix Choria brokers import JetStream under.
pub(crate) const API_PREFIX: &str = "choria.streams.";

/// At most one takeover attempt per this period, whatever is announced.
const TAKEOVER_EVERY: Duration = Duration::from_secs(1);

/// Where the election stands, for `/healthz` and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElectionState {
    /// Reading the bucket.
    Starting,
    /// The bucket cannot be used; retrying. The text says why.
    Unavailable(String),
    /// Campaigning, not leader.
    Standby,
    /// Leader: this instance provisions.
    Leader,
}

impl ElectionState {
    /// `starting`, `unavailable`, `standby` or `leader`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            ElectionState::Starting => "starting",
            ElectionState::Unavailable(_) => "unavailable",
            ElectionState::Standby => "standby",
            ElectionState::Leader => "leader",
        }
    }
}

/// What the provisioner does when leadership changes.
pub struct Callbacks {
    /// Became leader: resume and discover.
    pub won: Box<dyn Fn() + Send>,
    /// Lost leadership: pause and forget every node.
    pub lost: Box<dyn Fn() + Send>,
}

/// Election settings.
#[derive(Debug, Clone)]
pub struct ElectionOptions {
    /// JetStream API prefix (with the trailing dot).
    pub api_prefix: String,
    /// Bucket name.
    pub bucket: String,
    /// Key (election name).
    pub key: String,
    /// Upper bound of the random sleep before the first campaign (Go: 5 s).
    pub startup_spread: Duration,
    /// Timeout of each JetStream request (Go: 5 s).
    pub request_timeout: Duration,
    /// Hand the key over at once on a clean stop (and take it over when another
    /// leader does).
    pub handover: bool,
}

impl Default for ElectionOptions {
    fn default() -> Self {
        ElectionOptions {
            api_prefix: API_PREFIX.into(),
            bucket: BUCKET.into(),
            key: ELECTION.into(),
            startup_spread: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            handover: true,
        }
    }
}

/// One candidate in the `provisioner` election.
pub struct Election {
    bus: Bus,
    kv: KvKey,
    identity: String,
    options: ElectionOptions,
    metrics: Arc<Metrics>,
    state: Arc<Mutex<ElectionState>>,
}

/// Why a candidate could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElectionError {
    /// The bucket or key (with the API prefix) makes no valid NATS subject.
    #[error("invalid election bucket or key: {0}")]
    InvalidBucketOrKey(SubjectError),
}

impl Election {
    /// A candidate named `identity` on `bus`.
    pub fn new(
        bus: Bus,
        identity: &str,
        options: ElectionOptions,
        metrics: Arc<Metrics>,
    ) -> Result<Election, ElectionError> {
        let kv = KvKey::new(
            bus.clone(),
            &options.api_prefix,
            &options.bucket,
            &options.key,
            options.request_timeout,
        )
        .map_err(ElectionError::InvalidBucketOrKey)?;
        Ok(Election {
            bus,
            kv,
            identity: identity.to_string(),
            options,
            metrics,
            state: Arc::new(Mutex::new(ElectionState::Starting)),
        })
    }

    /// Shared view of the state for `/healthz`.
    pub fn state(&self) -> Arc<Mutex<ElectionState>> {
        Arc::clone(&self.state)
    }

    fn set_state(&self, state: ElectionState) {
        let leader = state == ElectionState::Leader;
        *self.state.lock() = state;
        self.metrics
            .election_leader
            .with_label_values(&[&self.options.key, &self.identity])
            .set(i64::from(leader));
    }

    /// Runs the election until `stop` disconnects.
    pub fn run(&self, callbacks: Callbacks, stop: &Receiver<()>) {
        let ttl = match self.wait_for_bucket(stop) {
            Some(ttl) => ttl,
            None => return,
        };
        log::info!(
            "Starting leader election against '{}' in bucket {} (TTL {:?})",
            self.options.key,
            self.options.bucket,
            ttl
        );
        self.set_state(ElectionState::Standby);
        let spread = self.options.startup_spread.as_millis() as u64;
        if spread > 0 {
            let sleep = Duration::from_millis(random_u64() % spread);
            if matches!(
                stop.recv_timeout(sleep),
                Err(crossbeam_channel::RecvTimeoutError::Disconnected)
            ) {
                return;
            }
        }
        let (resigned_tx, mut resignations) = bounded::<Resignation>(16);
        let _subscription = if self.options.handover {
            peers::subscribe_resignations(&self.bus, &self.options.key, move |r| {
                let _ = resigned_tx.try_send(r);
            })
            .map_err(|e| log::warn!("Cannot listen for leader resignations: {e}"))
            .ok()
        } else {
            None
        };
        let takeovers = Throttle::new(TAKEOVER_EVERY);
        let mut campaign = Campaign::default();
        let mut next = Instant::now();
        loop {
            let wait = next.saturating_duration_since(Instant::now());
            let mut takeover = None;
            select! {
                recv(stop) -> _ => break,
                recv(resignations) -> msg => match msg {
                    Ok(r) if r.identity != self.identity && !campaign.leader => {
                        if takeovers.ready().is_none() {
                            continue;
                        }
                        log::info!(
                            "Leader {} resigned at revision {}, taking over the election",
                            r.identity,
                            r.revision
                        );
                        takeover = Some(r.revision);
                    }
                    Ok(_) => continue,
                    // The subscription is gone with its connection: stop selecting on
                    // a channel that would be ready forever.
                    Err(_) => {
                        resignations = never();
                        continue;
                    }
                },
                default(wait) => {}
            }
            self.tick(&mut campaign, &callbacks, takeover);
            let delay = TWENTY_SEC.duration(campaign.tries);
            self.metrics
                .election_interval_seconds
                .with_label_values(&[&self.options.key, &self.identity])
                .set(delay.as_secs_f64());
            next = Instant::now() + delay;
        }
        if campaign.leader {
            self.set_state(ElectionState::Standby);
            if self.options.handover {
                self.resign(campaign.revision);
            }
        }
    }

    /// Our last write: an empty value at our revision, then its revision announced.
    fn resign(&self, revision: u64) {
        match self.kv.write(revision, b"") {
            Ok(last) => {
                let r = Resignation {
                    identity: self.identity.clone(),
                    revision: last,
                };
                let _ = peers::publish_resignation(&self.bus, &self.options.key, &r);
                let _ = self.bus.flush(Duration::from_secs(1));
                log::info!("Resigned leadership of '{}'", self.options.key);
            }
            Err(e) => log::warn!(
                "Could not hand over '{}' ({e}); it expires after the bucket TTL",
                self.options.key
            ),
        }
    }

    /// Retries the bucket status with the FiveSec back-off until it is usable.
    fn wait_for_bucket(&self, stop: &Receiver<()>) -> Option<Duration> {
        for attempt in 0usize.. {
            match self.kv.ttl() {
                Ok(ttl) => return Some(ttl),
                Err(why) => {
                    log::error!("Leader election cannot start, retrying: {why}");
                    self.set_state(ElectionState::Unavailable(why.to_string()));
                }
            }
            let delay = FIVE_SEC.duration(attempt);
            if matches!(
                stop.recv_timeout(delay),
                Err(crossbeam_channel::RecvTimeoutError::Disconnected)
            ) {
                return None;
            }
        }
        None
    }

    fn count(&self, state: &str) {
        self.metrics
            .election_campaigns
            .with_label_values(&[&self.options.key, &self.identity, state])
            .inc();
    }

    fn tick(&self, c: &mut Campaign, callbacks: &Callbacks, takeover: Option<u64>) {
        if c.leader {
            self.count("leader");
            match self.kv.write(c.revision, self.identity.as_bytes()) {
                Ok(rev) => {
                    c.revision = rev;
                    if c.notify {
                        c.notify = false;
                        std::thread::sleep(Duration::from_millis(200));
                        self.set_state(ElectionState::Leader);
                        (callbacks.won)();
                    }
                }
                Err(e) => {
                    log::warn!("Lost leadership of '{}': {e}", self.options.key);
                    *c = Campaign::default();
                    self.set_state(ElectionState::Standby);
                    (callbacks.lost)();
                }
            }
            return;
        }
        self.count("candidate");
        // A takeover expects exactly the announced revision: it succeeds only while the
        // resigning leader's empty value is still the key's last write.
        match self
            .kv
            .write(takeover.unwrap_or(0), self.identity.as_bytes())
        {
            Ok(rev) => {
                *c = Campaign {
                    leader: true,
                    revision: rev,
                    notify: true,
                    tries: 0,
                };
                log::info!("Campaign for '{}' won the key", self.options.key);
                return;
            }
            Err(KvError::WrongRevision(_)) => {}
            Err(e) => log::debug!("Campaign for '{}' failed: {e}", self.options.key),
        }
        c.tries += 1;
    }
}

/// The campaign loop's state.
#[derive(Debug, Default)]
struct Campaign {
    leader: bool,
    revision: u64,
    tries: usize,
    notify: bool,
}
