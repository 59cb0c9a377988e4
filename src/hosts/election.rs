//! Leader election over Choria Streams KV (`spec/election.md`), with raw requests to
//! the two subjects a Choria broker imports into the provisioning account:
//! `choria.streams.STREAM.INFO.KV_CHORIA_LEADER_ELECTION` and
//! `choria.streams.$KV.CHORIA_LEADER_ELECTION.provisioner`. The `nats` crate's KV
//! store cannot be used: it writes to unprefixed `$KV...` subjects and has no write
//! timeout.
//!
//! Go's campaign timing and callbacks are kept (create with expected sequence 0,
//! refresh with the last revision, `won` 200 ms after the second successful write,
//! `lost` on the first failed refresh). Beyond Go: a bucket that cannot be opened or
//! has a bad TTL is logged and retried (never a silent forever-pause, never a fatal
//! exit from a background thread), the state is visible in `/healthz`, and a leader
//! that stops cleanly announces it so that a standby takes over at once instead of
//! waiting for the key to expire (§7).

#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver};
use parking_lot::Mutex;

use crate::backoff::{random_u64, FIVE_SEC, TWENTY_SEC};
use crate::metrics::Metrics;

/// The bucket Choria brokers create for elections.
pub const BUCKET: &str = "CHORIA_LEADER_ELECTION";

/// The election (key) the provisioner campaigns in.
pub const ELECTION: &str = "provisioner";

/// The JetStream API prefix Choria brokers import JetStream under.
pub const API_PREFIX: &str = "choria.streams.";

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
    pub fn name(&self) -> &'static str {
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

/// Reads a resignation message: the identity that resigned, if it is one.
pub type ResignationParser = Box<dyn Fn(&[u8]) -> Option<String> + Send>;

/// How the election announces and notices a clean leader stop.
pub struct Handover {
    /// Subject the resignation is published on and listened to.
    pub subject: String,
    /// The message a stopping leader publishes (a lifecycle shutdown event).
    pub message: Box<dyn Fn() -> Vec<u8> + Send>,
    /// The identity a received message announces, if it is a resignation.
    pub resigned: ResignationParser,
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
}

impl Default for ElectionOptions {
    fn default() -> Self {
        ElectionOptions {
            api_prefix: API_PREFIX.into(),
            bucket: BUCKET.into(),
            key: ELECTION.into(),
            startup_spread: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// Why a KV write failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WriteError {
    /// Someone else holds the key; the current revision when the server said it.
    WrongSequence(Option<u64>),
    /// Timeout, no responders, broken connection, unexpected answer.
    Other(String),
}

/// One candidate in the `provisioner` election.
pub struct Election {
    nc: nats::Connection,
    identity: String,
    options: ElectionOptions,
    metrics: Arc<Metrics>,
    state: Arc<Mutex<ElectionState>>,
}

impl Election {
    /// A candidate named `identity` on connection `nc`.
    pub fn new(
        nc: nats::Connection,
        identity: &str,
        options: ElectionOptions,
        metrics: Arc<Metrics>,
    ) -> Election {
        Election {
            nc,
            identity: identity.to_string(),
            options,
            metrics,
            state: Arc::new(Mutex::new(ElectionState::Starting)),
        }
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

    fn key_subject(&self) -> String {
        format!(
            "{}$KV.{}.{}",
            self.options.api_prefix, self.options.bucket, self.options.key
        )
    }

    /// Reads the bucket's TTL (`max_age`), checking it as nats.go does.
    fn bucket_ttl(&self) -> Result<Duration, String> {
        let subject = format!(
            "{}STREAM.INFO.KV_{}",
            self.options.api_prefix, self.options.bucket
        );
        let reply = self
            .nc
            .request_timeout(&subject, "", self.options.request_timeout)
            .map_err(|e| format!("cannot access KV Bucket {}: {e}", self.options.bucket))?;
        parse_bucket_ttl(&self.options.bucket, &reply.data)
    }

    /// Writes our identity to the key if its last revision is `expected` (0: absent).
    fn write(&self, expected: u64) -> Result<u64, WriteError> {
        let mut headers = nats::header::HeaderMap::new();
        headers.insert("Nats-Expected-Last-Subject-Sequence", expected.to_string());
        let reply = self
            .nc
            .request_with_headers_or_timeout(
                &self.key_subject(),
                Some(&headers),
                Some(self.options.request_timeout),
                self.identity.as_bytes(),
            )
            .map_err(|e| WriteError::Other(e.to_string()))?;
        parse_pub_ack(&reply.data)
    }

    /// Runs the election until `stop` disconnects. With `handover`, a leader that stops
    /// announces it, and a standby that hears another leader resign takes over at once.
    pub fn run(&self, callbacks: Callbacks, handover: Option<Handover>, stop: &Receiver<()>) {
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
        let resignations = self.subscribe_handover(&handover);
        let mut campaign = Campaign::default();
        let mut next = Instant::now();
        loop {
            let wait = next.saturating_duration_since(Instant::now());
            let mut takeover = false;
            select! {
                recv(stop) -> _ => break,
                recv(resignations) -> msg => {
                    if let (Ok(msg), Some(h)) = (msg, &handover) {
                        match (h.resigned)(&msg) {
                            Some(who) if who != self.identity && !campaign.leader => {
                                log::info!("Leader {who} resigned, taking over the election");
                                takeover = true;
                            }
                            _ => continue,
                        }
                    }
                }
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
            if let Some(h) = &handover {
                // Our last write is done; tell the standbys they may take the key.
                let _ = self.nc.publish(&h.subject, (h.message)());
                let _ = self.nc.flush_timeout(Duration::from_secs(1));
                log::info!("Resigned leadership of '{}'", self.options.key);
            }
        }
    }

    fn subscribe_handover(&self, handover: &Option<Handover>) -> Receiver<Vec<u8>> {
        let (tx, rx) = crossbeam_channel::bounded(16);
        if let Some(h) = handover {
            match self.nc.subscribe(&h.subject) {
                Ok(sub) => {
                    // The subscription handler only forwards bytes; decoding happens
                    // on the election thread.
                    let _ = sub.with_handler(move |m| {
                        let _ = tx.try_send(m.data);
                        Ok(())
                    });
                }
                Err(e) => log::warn!("Cannot listen for leader resignations: {e}"),
            }
        }
        rx
    }

    /// Retries the bucket status with the FiveSec back-off until it is usable.
    fn wait_for_bucket(&self, stop: &Receiver<()>) -> Option<Duration> {
        for attempt in 0usize.. {
            match self.bucket_ttl() {
                Ok(ttl) => return Some(ttl),
                Err(why) => {
                    log::error!("Leader election cannot start, retrying: {why}");
                    self.set_state(ElectionState::Unavailable(why));
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

    fn tick(&self, c: &mut Campaign, callbacks: &Callbacks, takeover: bool) {
        if c.leader {
            self.count("leader");
            match self.write(c.revision) {
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
                    log::warn!("Lost leadership of '{}': {e:?}", self.options.key);
                    *c = Campaign::default();
                    self.set_state(ElectionState::Standby);
                    (callbacks.lost)();
                }
            }
            return;
        }
        self.count("candidate");
        let mut expected = if takeover { c.seen.unwrap_or(0) } else { 0 };
        // A resigned leader's last revision may be newer than the one we saw: the
        // failure tells it, and one retry with it is still a compare-and-swap.
        for _ in 0..2 {
            match self.write(expected) {
                Ok(rev) => {
                    *c = Campaign {
                        leader: true,
                        revision: rev,
                        notify: true,
                        ..Campaign::default()
                    };
                    log::info!("Campaign for '{}' won the key", self.options.key);
                    return;
                }
                Err(WriteError::WrongSequence(current)) => {
                    c.seen = current;
                    match current {
                        Some(n) if takeover && n != expected => expected = n,
                        _ => break,
                    }
                }
                Err(WriteError::Other(e)) => {
                    log::debug!("Campaign for '{}' failed: {e}", self.options.key);
                    break;
                }
            }
        }
        c.tries += 1;
    }
}

/// Reads a stream-info reply for `bucket` and checks its TTL (`max_age`) as nats.go
/// does: one message per subject, a TTL from 1 s to 1 h, and a campaign interval
/// (¾ TTL) of at least 1 s that leaves 1 s before expiry.
pub(crate) fn parse_bucket_ttl(bucket: &str, data: &[u8]) -> Result<Duration, String> {
    let info: serde_json::Value = serde_json::from_slice(data).map_err(|e| {
        format!(
            "cannot access KV Bucket {}: invalid stream info: {e}",
            bucket
        )
    })?;
    if let Some(err) = info.get("error") {
        return Err(format!(
            "cannot access KV Bucket {}: {}",
            bucket,
            err.get("description")
                .and_then(|d| d.as_str())
                .unwrap_or("error")
        ));
    }
    let config = &info["config"];
    if config["max_msgs_per_subject"].as_i64().unwrap_or(0) < 1 {
        return Err(format!(
            "bad bucket {}: max_msgs_per_subject must be 1",
            bucket
        ));
    }
    let ttl = Duration::from_nanos(config["max_age"].as_u64().unwrap_or(0));
    if ttl < Duration::from_secs(1) {
        return Err("bucket TTL should be 1 second or more".into());
    }
    if ttl > Duration::from_secs(3600) {
        return Err("bucket TTL should be less than or equal to 1 hour".into());
    }
    let interval = ttl.mul_f64(0.75);
    if interval < Duration::from_secs(1) {
        return Err(format!("campaign interval {interval:?} too small"));
    }
    if ttl - interval < Duration::from_secs(1) {
        return Err(format!(
            "campaign interval {interval:?} is too close to bucket ttl {ttl:?}"
        ));
    }
    Ok(ttl)
}

/// Reads a JetStream PubAck: the new revision, or why the write failed (a wrong
/// expected sequence carries the key's current revision when the server names it).
pub(crate) fn parse_pub_ack(data: &[u8]) -> Result<u64, WriteError> {
    let ack: serde_json::Value = serde_json::from_slice(data)
        .map_err(|e| WriteError::Other(format!("invalid PubAck: {e}")))?;
    if let Some(err) = ack.get("error") {
        let description = err["description"].as_str().unwrap_or("");
        if err["err_code"].as_u64() == Some(10071) {
            let current = description.rsplit(' ').next().and_then(|n| n.parse().ok());
            return Err(WriteError::WrongSequence(current));
        }
        return Err(WriteError::Other(description.to_string()));
    }
    ack["seq"]
        .as_u64()
        .filter(|s| *s > 0)
        .ok_or_else(|| WriteError::Other("PubAck without a sequence".into()))
}

/// The campaign loop's state.
#[derive(Debug, Default)]
struct Campaign {
    leader: bool,
    revision: u64,
    tries: usize,
    notify: bool,
    /// The key's revision as the last failed create reported it.
    seen: Option<u64>,
}
