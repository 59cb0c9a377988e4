//! The `approvals` thread: shares the table with the other instances of the site
//! and keeps the approval file current.
//!
//! - **Changes.** Each local change (a hold, an operator's decision) is sent at
//!   once, in batches of at most [`MAX_RECORDS`], on `provisioning.provisioner.
//!   approvals.<site>.<md5(instance)>` (which provisioning-mode nodes can neither
//!   publish nor read). An instance's own messages are left in the reader thread
//!   by their subject, unread: it never works on what it sent.
//! - **Anti-entropy.** Every [`DIGEST_EVERY`] (with a jitter) each instance sends
//!   its table's digest (`table::record_digest`). An instance whose own digest
//!   differs from a peer's twice in a row sends its whole table, then its digest; so
//!   a lost hello or a lost change (instances started together, an inbox that
//!   overflowed, a partition) is made up for within a few periods, whatever order
//!   instances start, stop and reconnect in, and the merge rule (`merge.rs`) makes
//!   the order of arrival irrelevant. Once the tables agree, only digests flow.
//! - **Hellos.** At start and after a reconnection to the broker (messages sent
//!   meanwhile are lost) the thread says hello, and every instance that hears it
//!   sends its whole table (at most once per [`FULL_EVERY`]).
//! - **Bounded.** A whole table goes out at [`FULL_BYTES_PER_SECOND`] at most, in
//!   slices between the thread's other work, and never asks for another one.
//!   Messages wait for this thread in an inbox of [`INBOX`] messages and
//!   [`INBOX_BYTES`]: past either they are dropped and counted
//!   (`peer_messages_dropped{kind="approvals"}`); the digests fetch them again.
//! - **Catching up.** Until this instance has heard a peer's table agree with its
//!   own (or nobody answered its hello within [`HELLO_ANSWER`], or
//!   [`CATCH_UP_GRACE`] passed), an approval it holds is not acted on
//!   (`Approvals::caught_up`): the approval may be one a peer undid while this
//!   instance was down.
//! - **The file.** Every [`SAVE_EVERY`] it writes the file if the table changed (the
//!   holds and the peers' records: operators' decisions are written before they
//!   are answered), and once a second it sets how long the oldest pending node has
//!   waited.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, bounded, never, select, tick, Receiver};

use super::Approvals;
use crate::choria::bus::Bus;
use crate::choria::peers::{
    publish_approvals, subscribe_approvals, ApprovalBatch, ApprovalRecord, BatchKind, Seal,
    TableDigest, MAX_APPROVAL_MESSAGE, MAX_RECORDS,
};
use crate::metrics::Metrics;
use crate::throttle::Throttle;

/// Messages waiting for the thread.
pub(crate) const INBOX: usize = 256;
/// Bytes of the messages waiting for the thread.
pub(crate) const INBOX_BYTES: usize = 16 * 1024 * 1024;
/// The least time between two whole tables sent, and between two hellos.
pub(crate) const FULL_EVERY: Duration = Duration::from_secs(5);
/// How often the table's digest is sent (each period drawn within ±20 %).
pub(crate) const DIGEST_EVERY: Duration = Duration::from_secs(5);
/// The most bytes a second of a whole table sent.
pub(crate) const FULL_BYTES_PER_SECOND: usize = 4 * 1024 * 1024;
/// How long after a hello no answer means nobody is there to catch up with.
pub(crate) const HELLO_ANSWER: Duration = Duration::from_secs(3);
/// The longest this instance waits to agree with a peer before it acts on the
/// approvals it holds anyway.
pub(crate) const CATCH_UP_GRACE: Duration = Duration::from_secs(30);
/// How often the file is written when only holds and peers' records changed it.
pub(crate) const SAVE_EVERY: Duration = Duration::from_secs(5);
/// The most bytes of records one message carries (well under nats-server's
/// default 1 MiB payload and the receivers' 512 KiB).
const BATCH_BYTES: usize = 256 * 1024;
/// How often a whole table being sent goes on.
const PACE: Duration = Duration::from_millis(50);
/// The most peers whose digests are compared (more is a misconfigured site).
const MAX_PEERS: usize = 64;

/// A whole table being sent, a slice at a time.
struct FullSend {
    records: Vec<Arc<ApprovalRecord>>,
    next: usize,
}

/// The thread's state.
struct Sync {
    approvals: Arc<Approvals>,
    bus: Bus,
    /// Signs our messages, checks the peers'.
    seal: Arc<Seal>,
    site: String,
    metrics: Arc<Metrics>,
    started: Instant,
    last_hello: Option<Instant>,
    /// A peer's digest arrived since the last hello.
    answered: bool,
    last_full: Option<Instant>,
    /// A whole table is owed (a hello, or a digest that differed twice).
    owe_full: bool,
    full: Option<FullSend>,
    /// Peers whose last digest differed from ours.
    differing: HashSet<String>,
    last_save: Instant,
    /// Jitter of the digest periods.
    draws: u64,
    refusals: Throttle,
    failures: Throttle,
}

/// Starts the `approvals` thread for `site`; it says hello again whenever
/// `reconnected` is told of a reconnection, and ends when `stop` is dropped (after
/// sending what is queued and writing the file).
pub(crate) fn start(
    approvals: Arc<Approvals>,
    bus: Bus,
    seal: Arc<Seal>,
    site: &str,
    metrics: Arc<Metrics>,
    stop: Receiver<()>,
    mut reconnected: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    let (inbox_tx, inbox) = bounded::<(String, Vec<u8>)>(INBOX);
    let waiting = Arc::new(AtomicUsize::new(0));
    let subscription = {
        let (waiting, metrics) = (Arc::clone(&waiting), Arc::clone(&metrics));
        subscribe_approvals(&bus, site, approvals.instance(), move |subject, data| {
            let n = data.len();
            let room = waiting.fetch_add(n, Ordering::Relaxed) + n <= INBOX_BYTES;
            if !room || inbox_tx.try_send((subject, data)).is_err() {
                // The digests make up for it: no hello, which would have every
                // peer send its whole table again into a full inbox.
                waiting.fetch_sub(n, Ordering::Relaxed);
                metrics
                    .peer_messages_dropped
                    .with_label_values(&["approvals"])
                    .inc();
            }
        })?
    };
    let mut seed = [0u8; 8];
    seed.copy_from_slice(&crate::crypto::ids::id_bytes()[..8]);
    let draws = u64::from_le_bytes(seed);
    approvals.catching_up();
    let mut sync = Sync {
        approvals,
        bus,
        seal,
        site: site.to_string(),
        metrics,
        started: Instant::now(),
        last_hello: None,
        answered: false,
        last_full: None,
        owe_full: false,
        full: None,
        differing: HashSet::new(),
        last_save: Instant::now(),
        draws,
        refusals: Throttle::default(),
        failures: Throttle::default(),
    };
    std::thread::Builder::new()
        .name("approvals".into())
        .spawn(move || {
            let _subscription = subscription;
            sync.run(&stop, &inbox, &waiting, &mut reconnected);
        })
}

impl Sync {
    /// The thread's loop, until `stop`; then what is queued is sent and the file
    /// written.
    fn run(
        &mut self,
        stop: &Receiver<()>,
        inbox: &Receiver<(String, Vec<u8>)>,
        waiting: &AtomicUsize,
        reconnected: &mut Receiver<()>,
    ) {
        self.hello();
        let ticks = tick(Duration::from_secs(1));
        let mut digest_due = after(self.digest_period());
        let outbox = self.approvals.outbox();
        loop {
            let pace = if self.full.is_some() {
                after(PACE)
            } else {
                never()
            };
            select! {
                recv(stop) -> _ => break,
                recv(inbox) -> msg => {
                    if let Ok((subject, data)) = msg {
                        waiting.fetch_sub(data.len(), Ordering::Relaxed);
                        self.received(&subject, &data);
                    }
                }
                recv(outbox) -> record => {
                    if let Ok(record) = record {
                        self.send_changes(record, &outbox);
                    }
                }
                recv(reconnected) -> told => match told {
                    // Whatever the others sent while we were away is lost.
                    Ok(()) => self.hello(),
                    // The connection is gone for good: nothing more to hear.
                    Err(_) => *reconnected = never(),
                },
                recv(pace) -> _ => self.send_full_slice(),
                recv(digest_due) -> _ => {
                    self.send_digest();
                    digest_due = after(self.digest_period());
                }
                recv(ticks) -> _ => self.tick(),
            }
        }
        if let Ok(first) = outbox.try_recv() {
            self.send_changes(first, &outbox);
        }
        self.save();
    }

    /// Asks every instance for its table.
    fn hello(&mut self) {
        self.last_hello = Some(Instant::now());
        self.answered = false;
        self.publish(BatchKind::Hello, Vec::new(), None);
    }

    /// The next digest period: [`DIGEST_EVERY`] ± 20 %, so that instances started
    /// together do not send in step.
    fn digest_period(&mut self) -> Duration {
        self.draws = self
            .draws
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let spread = DIGEST_EVERY.as_millis() as u64 * 2 / 5;
        let offset = (self.draws >> 33) % spread.max(1);
        DIGEST_EVERY * 4 / 5 + Duration::from_millis(offset)
    }

    /// Reads one message: refused ones are counted, a hello is answered, a digest
    /// compared, records merged.
    fn received(&mut self, subject: &str, data: &[u8]) {
        let opened = self.seal.open(
            subject,
            data,
            MAX_APPROVAL_MESSAGE,
            crate::clock::unix_now(),
        );
        let batch = match opened.and_then(|o| ApprovalBatch::parse(&o.body, &self.site)) {
            Ok(b) => b,
            Err(e) => {
                self.metrics
                    .peer_messages_refused
                    .with_label_values(&[e.reason()])
                    .inc();
                if let Some(note) = self.refusals.ready_note("refused") {
                    log::warn!("Refused an approvals message: {e}{note}");
                }
                return;
            }
        };
        if batch.from == self.approvals.instance() {
            return; // a copy of ours on a subject we do not send on: nothing to learn
        }
        if !batch.records.is_empty() {
            self.approvals.merge(batch.records, &batch.from);
        }
        match batch.kind {
            BatchKind::Hello => self.owe_full = true,
            BatchKind::Digest => {
                // A peer is there: catching up waits for its table (a hello is
                // answered with the whole table, then the digest).
                self.answered = true;
                if let Some(theirs) = batch.digest {
                    self.compare(&batch.from, theirs);
                }
            }
            BatchKind::Update => {}
        }
    }

    /// Compares a peer's digest with ours: equal, we have caught up; different
    /// twice in a row, our whole table is owed.
    fn compare(&mut self, from: &str, theirs: TableDigest) {
        let (sum, count) = self.approvals.digest();
        if theirs.sum == sum && theirs.count == count as u64 {
            self.differing.remove(from);
            self.approvals.caught_up();
            return;
        }
        if self.differing.contains(from) {
            self.owe_full = true;
        } else if self.differing.len() < MAX_PEERS {
            self.differing.insert(from.to_string());
        }
    }

    /// Sends `first` and whatever else waits in `outbox`.
    fn send_changes(&mut self, first: ApprovalRecord, outbox: &Receiver<ApprovalRecord>) {
        let mut records = vec![first];
        records.extend(outbox.try_iter().take(4 * MAX_RECORDS));
        self.publish(BatchKind::Update, records, None);
    }

    /// Starts sending the whole table if one is owed and none was sent lately.
    fn start_full_if_due(&mut self) {
        let due = self.last_full.is_none_or(|at| at.elapsed() >= FULL_EVERY);
        if self.owe_full && due && self.full.is_none() {
            self.owe_full = false;
            self.differing.clear();
            self.last_full = Some(Instant::now());
            self.full = Some(FullSend {
                records: self.approvals.snapshot(),
                next: 0,
            });
            self.send_full_slice();
        }
    }

    /// Sends the next slice of the whole table ([`FULL_BYTES_PER_SECOND`] × [`PACE`]
    /// bytes at most); after the last, the digest.
    fn send_full_slice(&mut self) {
        let Some(full) = &mut self.full else {
            return;
        };
        let budget = FULL_BYTES_PER_SECOND / (1000 / PACE.as_millis() as usize);
        let (mut slice, mut bytes) = (Vec::new(), 0);
        while let Some(record) = full.records.get(full.next) {
            bytes += record_size(record);
            slice.push((**record).clone());
            full.next += 1;
            if bytes >= budget {
                break;
            }
        }
        let done = full.next >= full.records.len();
        if done {
            self.full = None;
        }
        if !slice.is_empty() {
            self.publish(BatchKind::Update, slice, None);
        }
        if done {
            self.send_digest();
        }
    }

    /// Sends this table's digest.
    fn send_digest(&mut self) {
        let (sum, count) = self.approvals.digest();
        let digest = TableDigest {
            sum,
            count: count as u64,
        };
        self.publish(BatchKind::Digest, Vec::new(), Some(digest));
    }

    /// Once a second: the file (every [`SAVE_EVERY`]), the oldest pending node's
    /// wait, what is owed, the catch-up's deadlines.
    fn tick(&mut self) {
        if self.last_save.elapsed() >= SAVE_EVERY {
            self.save();
        }
        self.approvals.update_oldest();
        if self.approvals.take_resync() {
            self.owe_full = true;
        }
        self.start_full_if_due();
        let unanswered = !self.answered
            && self
                .last_hello
                .is_some_and(|at| at.elapsed() >= HELLO_ANSWER);
        if unanswered || self.started.elapsed() >= CATCH_UP_GRACE {
            self.approvals.caught_up();
        }
        self.approvals.expire_if_due();
    }

    fn save(&mut self) {
        self.last_save = Instant::now();
        if let Err(e) = self.approvals.save() {
            if let Some(note) = self.failures.ready_note("failures") {
                log::error!("{e}; trying again in a second{note}");
            }
        }
    }

    /// Publishes `records` in batches small enough for any peer to read.
    fn publish(&self, kind: BatchKind, records: Vec<ApprovalRecord>, digest: Option<TableDigest>) {
        let mut batch = Vec::new();
        let mut bytes = 0;
        let mut batches = Vec::new();
        for record in records {
            let size = record_size(&record);
            if !batch.is_empty() && (batch.len() == MAX_RECORDS || bytes + size > BATCH_BYTES) {
                batches.push(std::mem::take(&mut batch));
                bytes = 0;
            }
            bytes += size;
            batch.push(record);
        }
        if !batch.is_empty() || batches.is_empty() {
            batches.push(batch);
        }
        for records in batches {
            let message = ApprovalBatch {
                from: self.approvals.instance().to_string(),
                site: self.site.clone(),
                kind,
                records,
                digest,
            };
            if let Err(e) = publish_approvals(&self.bus, &self.seal, &message) {
                if let Some(note) = self.failures.ready_note("failures") {
                    log::warn!("Could not send approvals to the other instances: {e}{note}");
                }
            }
        }
    }
}

/// At least a record's size on the wire, without encoding it: its field names and
/// numbers take under 320 bytes, and a string at most twice its length (a quote
/// or a backslash is escaped; control characters are refused).
fn record_size(r: &ApprovalRecord) -> usize {
    let strings = r.identity.as_str().len()
        + r.by.len()
        + r.instance.len()
        + r.reason.len()
        + r.version.len()
        + r.facts
            .iter()
            .map(|(k, v)| k.len() + v.len() + 4)
            .sum::<usize>();
    320 + 2 * strings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choria::identity::Identity;

    #[test]
    fn a_record_s_size_is_never_under_its_encoding() {
        let mut r = ApprovalRecord::held(Identity::parse("n1.example.net").unwrap(), u64::MAX);
        r.by = "\"\\".repeat(80);
        r.reason = "\"".repeat(256);
        r.instance = "\\".repeat(160);
        r.version = "\"".repeat(64);
        r.facts = vec![("\"".repeat(64), "\\".repeat(128)); 8];
        (r.clock, r.at, r.first_seen, r.last_seen) = (u64::MAX, u64::MAX, u64::MAX, u64::MAX);
        let encoded = serde_json::to_vec(&crate::choria::peers::RecordWire::from(&r)).unwrap();
        assert!(
            record_size(&r) >= encoded.len(),
            "{} < {}",
            record_size(&r),
            encoded.len()
        );
        let plain = ApprovalRecord::held(Identity::parse("n").unwrap(), 1);
        let encoded = serde_json::to_vec(&crate::choria::peers::RecordWire::from(&plain)).unwrap();
        assert!(record_size(&plain) >= encoded.len());
    }
}
