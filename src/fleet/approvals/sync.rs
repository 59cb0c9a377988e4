//! The `approvals` thread: shares the table with the other instances of the site
//! and keeps the approval file current.
//!
//! - Each local change (a hold, an operator's decision) is sent at once, in
//!   batches of at most [`MAX_RECORDS`], on `provisioning.provisioner.approvals.
//!   <site>` (which provisioning-mode nodes can neither publish nor read).
//! - At start, after a reconnection to the broker (messages sent meanwhile are
//!   lost), and after its inbox had to drop a message, the thread says hello;
//!   every instance that hears a hello sends its whole table (at most once per
//!   [`FULL_EVERY`]), so an instance that was down or cut off catches up, and
//!   the merge rule (`merge.rs`) makes the order of arrival irrelevant.
//! - Messages wait for this thread in an inbox of [`INBOX`] messages and
//!   [`INBOX_BYTES`]: past either they are dropped and counted
//!   (`peer_messages_dropped{kind="approvals"}`), and a hello fetches them again.
//! - Once a second it writes the file if the table changed (the holds and the
//!   peers' records: operators' decisions are written before they are answered),
//!   and sets how long the oldest pending node has waited.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, tick, Receiver};

use super::Approvals;
use crate::choria::bus::Bus;
use crate::choria::peers::{
    publish_approvals, subscribe_approvals, ApprovalBatch, ApprovalRecord, BatchKind, RecordWire,
    MAX_RECORDS,
};
use crate::metrics::Metrics;
use crate::throttle::Throttle;

/// Messages waiting for the thread.
pub(crate) const INBOX: usize = 256;
/// Bytes of the messages waiting for the thread.
pub(crate) const INBOX_BYTES: usize = 16 * 1024 * 1024;
/// The least time between two whole tables sent, and between two hellos.
pub(crate) const FULL_EVERY: Duration = Duration::from_secs(5);
/// The most bytes of records one message carries (well under nats-server's
/// default 1 MiB payload and the receivers' 512 KiB).
const BATCH_BYTES: usize = 256 * 1024;

/// The thread's state.
struct Sync {
    approvals: Arc<Approvals>,
    bus: Bus,
    site: String,
    metrics: Arc<Metrics>,
    /// A message was dropped from the inbox: say hello again.
    missed: Arc<AtomicBool>,
    last_hello: Option<Instant>,
    last_full: Option<Instant>,
    /// A hello came while a whole table was sent too recently: send at the next tick.
    owe_full: bool,
    refusals: Throttle,
    failures: Throttle,
}

/// Starts the `approvals` thread for `site`; it says hello again whenever
/// `reconnected` is told of a reconnection, and ends when `stop` is dropped (after
/// sending what is queued and writing the file).
pub(crate) fn start(
    approvals: Arc<Approvals>,
    bus: Bus,
    site: &str,
    metrics: Arc<Metrics>,
    stop: Receiver<()>,
    mut reconnected: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    let (inbox_tx, inbox) = bounded::<Vec<u8>>(INBOX);
    let waiting = Arc::new(AtomicUsize::new(0));
    let missed = Arc::new(AtomicBool::new(false));
    let subscription = {
        let (waiting, missed, metrics) = (
            Arc::clone(&waiting),
            Arc::clone(&missed),
            Arc::clone(&metrics),
        );
        subscribe_approvals(&bus, site, move |data| {
            let n = data.len();
            let room = waiting.fetch_add(n, Ordering::Relaxed) + n <= INBOX_BYTES;
            if !room || inbox_tx.try_send(data).is_err() {
                waiting.fetch_sub(n, Ordering::Relaxed);
                missed.store(true, Ordering::Relaxed);
                metrics
                    .peer_messages_dropped
                    .with_label_values(&["approvals"])
                    .inc();
            }
        })?
    };
    let mut sync = Sync {
        approvals,
        bus,
        site: site.to_string(),
        metrics,
        missed,
        last_hello: None,
        last_full: None,
        owe_full: false,
        refusals: Throttle::default(),
        failures: Throttle::default(),
    };
    std::thread::Builder::new()
        .name("approvals".into())
        .spawn(move || {
            let _subscription = subscription;
            sync.hello();
            let ticks = tick(Duration::from_secs(1));
            let outbox = sync.approvals.outbox();
            loop {
                select! {
                    recv(stop) -> _ => break,
                    recv(inbox) -> msg => {
                        if let Ok(data) = msg {
                            waiting.fetch_sub(data.len(), Ordering::Relaxed);
                            sync.received(&data);
                        }
                    }
                    recv(outbox) -> record => {
                        if let Ok(record) = record {
                            sync.send_changes(record, &outbox);
                        }
                    }
                    recv(reconnected) -> told => match told {
                        // Whatever the others sent while we were away is lost.
                        Ok(()) => sync.hello(),
                        // The connection is gone for good: nothing more to hear.
                        Err(_) => reconnected = crossbeam_channel::never(),
                    },
                    recv(ticks) -> _ => sync.tick(),
                }
            }
            if let Ok(first) = outbox.try_recv() {
                sync.send_changes(first, &outbox);
            }
            sync.save();
        })
}

impl Sync {
    /// Asks every instance for its table.
    fn hello(&mut self) {
        self.last_hello = Some(Instant::now());
        self.publish(BatchKind::Hello, Vec::new());
    }

    /// Reads one message: refused ones are counted, a hello is answered, records
    /// are merged.
    fn received(&mut self, data: &[u8]) {
        let batch = match ApprovalBatch::parse(data, &self.site) {
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
            return;
        }
        if batch.kind == BatchKind::Hello {
            self.owe_full = true;
            self.send_full_if_due();
        }
        if !batch.records.is_empty() {
            self.approvals.merge(batch.records, &batch.from);
        }
    }

    /// Sends `first` and whatever else waits in `outbox`.
    fn send_changes(&mut self, first: ApprovalRecord, outbox: &Receiver<ApprovalRecord>) {
        let mut records = vec![first];
        records.extend(outbox.try_iter().take(4 * MAX_RECORDS));
        self.publish(BatchKind::Update, records);
    }

    /// Sends the whole table if a hello asked for it and none was sent lately.
    fn send_full_if_due(&mut self) {
        let due = self.last_full.is_none_or(|at| at.elapsed() >= FULL_EVERY);
        if self.owe_full && due {
            self.owe_full = false;
            self.last_full = Some(Instant::now());
            let all = self.approvals.all_records();
            self.publish(BatchKind::Update, all);
        }
    }

    /// Once a second: the file, the oldest pending node's wait, what is owed.
    fn tick(&mut self) {
        self.save();
        self.approvals.update_oldest();
        if self.approvals.take_resync() {
            self.owe_full = true;
        }
        self.send_full_if_due();
        let hello_due = self.last_hello.is_none_or(|at| at.elapsed() >= FULL_EVERY);
        if hello_due && self.missed.swap(false, Ordering::Relaxed) {
            self.hello();
        }
    }

    fn save(&self) {
        if let Err(e) = self.approvals.save() {
            if let Some(note) = self.failures.ready_note("failures") {
                log::error!("{e}; trying again in a second{note}");
            }
        }
    }

    /// Publishes `records` in batches small enough for any peer to read.
    fn publish(&self, kind: BatchKind, records: Vec<ApprovalRecord>) {
        let mut batch = Vec::new();
        let mut bytes = 0;
        let mut batches = Vec::new();
        for record in records {
            let size = serde_json::to_vec(&RecordWire::from(&record)).map_or(0, |b| b.len());
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
            };
            if let Err(e) = publish_approvals(&self.bus, &message) {
                if let Some(note) = self.failures.ready_note("failures") {
                    log::warn!("Could not send approvals to the other instances: {e}{note}");
                }
            }
        }
    }
}
