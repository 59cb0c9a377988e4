//! An operator's approval of new identities (`approval: required`), as `salt-key`
//! and `puppetserver ca` let sites do: a node that answered its inventory (and its
//! JWT and CSR checks) waits before its helper runs, so nothing is signed,
//! encrypted or sent to it until a person says yes.
//!
//! - **The hold.** [`Approvals`] is the node sequence's approval gate
//!   (`node::approval::Gate`): at the end of an attempt's reply grace, a node that
//!   needs approval and has none is recorded as pending (first and last seen, its
//!   version, the facts `approval_facts` names) and the attempt ends
//!   (`Outcome::PendingApproval`): no worker, no waiting-attempt slot is held.
//! - **Admission.** [`Fleet::add`](super::Fleet::add) asks [`Approvals::admission`]
//!   first: a pending node is not queued (a sighting only refreshes its last seen),
//!   a denied one is refused and counted (`refused_identities{reason="denied"}`,
//!   logged once per identity per [`DENIED_LOG_EVERY`]).
//! - **Decisions.** `approve`, `approve --all`, `deny` and `forget` (by name or by
//!   pattern, `approvals/select.rs`) come through the
//!   control socket (`fleet/control.rs`) with the operator the kernel names; each
//!   is written to the approval file before the operator is answered, to the audit
//!   trail and the log, and an approved node is queued at once.
//! - **Expiry.** A pending identity not seen for `approval_pending_expiry`, and an
//!   approval given ahead of time for a node that did not come within
//!   `approval_ahead_expiry`, are forgotten (`approvals/expiry.rs`), as decisions
//!   `by: expiry`; a denial never expires.
//! - **Bounds.** The table keeps `approval_max_pending` pending records and
//!   100,000 decided ones (`approvals/table.rs` says which give way); every string
//!   of a record is bounded, so the table is bounded in bytes too.
//! - **Every instance of the site** holds the same table: each change is sent on
//!   `provisioning.provisioner.approvals.<site>` and merged by one join whatever
//!   the order (`approvals/merge.rs`: a decision's clock, never a hold, orders it;
//!   `approvals/sync.rs`, `approvals/table.rs`),
//!   so an approval given on one instance is honoured by the one that owns the
//!   node, in active-active and across an election.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::audit::AuditLog;
use super::control::Operator;
use super::{Fleet, Source};
use crate::choria::identity::Identity;
use crate::choria::peers::{ApprovalRecord, Decision, MAX_BY, MAX_CLOCK, MAX_REASON, MAX_VERSION};
use crate::config::{ApprovalRules, Config};
use crate::metrics::Metrics;
use crate::node::approval::{Gate, Verdict};

mod decider;
mod expiry;
mod facts;
mod file;
mod merge;
mod pages;
pub(crate) mod policy;
mod select;
pub(crate) mod sync;
mod table;

pub(crate) use decider::Decider;
use expiry::Expiry;
pub(crate) use file::ApprovalFileError;
use pages::{List, Pages};
pub(crate) use select::{compile as compile_pattern, MatchAction};
use table::{Change, Table};

/// How often a denied identity's refusal is logged.
pub(crate) const DENIED_LOG_EVERY: Duration = Duration::from_secs(600);

/// The most pending records one page of `pending` shows.
pub(crate) const MAX_PAGE: usize = 100;

/// Changes waiting to be sent to the other instances.
const OUTBOX: usize = 4096;

/// The most identities whose last denial log time is kept.
const DENIED_LOGGED: usize = 10_000;

/// What [`Approvals::admission`] says of an identity offered to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Queue it (approved, no approval needed, or not seen yet: its attempt asks
    /// the gate once its inventory is in).
    Go,
    /// It waits for an operator: not queued.
    Pending,
    /// An operator denied it: refused.
    Denied,
    /// Approved, but this instance has not caught up with its peers since it
    /// started: not queued yet; it is offered once caught up.
    Deferred,
}

/// One pending node as `pending` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PendingRow {
    /// The node.
    pub identity: String,
    /// First held, Unix seconds.
    pub first_seen: u64,
    /// Last seen (held, discovered or announced), Unix seconds.
    pub last_seen: u64,
    /// The version its inventory gave.
    pub version: String,
    /// The facts `approval_facts` names.
    pub facts: Vec<(String, String)>,
    /// When it is forgotten unless seen again (`approval_pending_expiry`), Unix
    /// seconds.
    #[serde(default)]
    pub expires: u64,
}

impl PendingRow {
    fn of(r: &ApprovalRecord, expiry: &Expiry) -> PendingRow {
        PendingRow {
            identity: r.identity.to_string(),
            first_seen: r.first_seen,
            last_seen: r.last_seen,
            version: r.version.clone(),
            facts: r.facts.clone(),
            expires: expiry.expires(r).unwrap_or(0),
        }
    }
}

/// What an operator's decision did.
#[derive(Debug)]
pub(crate) struct Decided {
    /// The identities whose standing changed.
    pub changed: Vec<Identity>,
    /// The identities the decision could not be taken for, and why.
    pub not_taken: Vec<(Identity, NotTaken)>,
    /// Whether the approval file has the decision (it applies either way).
    pub saved: Result<(), ApprovalFileError>,
}

/// Why a decision on an identity was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NotTaken {
    /// Its decision clock is at [`MAX_CLOCK`]: no later decision can be ordered
    /// after it (only a peer or a file that lies puts it there).
    #[error("its decision clock is at its limit")]
    ClockExhausted,
}

/// The approvals of one provisioner: the table, its file, the gate.
pub(crate) struct Approvals {
    rules: ApprovalRules,
    facts: Vec<String>,
    table: Mutex<Table>,
    /// The pending and denied records sorted for pages.
    pages: Pages,
    file: Option<PathBuf>,
    /// Serialises writes of the file.
    writing: Mutex<()>,
    /// The table changed since the file was written.
    dirty: AtomicBool,
    /// This instance, as records name it.
    instance: String,
    metrics: Arc<Metrics>,
    outbox_tx: Sender<ApprovalRecord>,
    outbox_rx: Receiver<ApprovalRecord>,
    /// A change could not be queued for the others: the sync sends the whole table.
    resync: AtomicBool,
    fleet: OnceLock<Weak<Fleet>>,
    audit: OnceLock<Arc<AuditLog>>,
    /// When each denied identity's refusal was last logged.
    denied_logged: Mutex<HashMap<Identity, Instant>>,
    /// False from the sync thread's start until this instance's table agreed with
    /// a peer's (or nobody answered): approvals are not acted on meanwhile.
    caught_up: AtomicBool,
    /// Approved identities offered while catching up, offered again once caught up
    /// (at most [`DEFERRED`]; the next discovery finds the others).
    deferred: Mutex<HashSet<Identity>>,
    /// When pending identities and approvals given ahead of time expire.
    expiry: Expiry,
    /// When the table was last looked at for what expired.
    expired_at: Mutex<Option<Instant>>,
    /// The site's approval policy program, if it has one.
    policy: Option<policy::Policy>,
}

/// The most approved identities remembered while catching up.
const DEFERRED: usize = 10_000;

/// A string cut to `most` characters, control characters dropped.
fn clean(text: &str, most: usize) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .take(most)
        .collect()
}

impl Approvals {
    /// The approvals of `config` for the instance `instance`; call
    /// [`Approvals::restore`] to read the file.
    pub(crate) fn new(config: &Config, instance: &str, metrics: Arc<Metrics>) -> Arc<Approvals> {
        let (outbox_tx, outbox_rx) = bounded(OUTBOX);
        Arc::new(Approvals {
            rules: ApprovalRules::new(&config.approval_identities, &config.approval_preapproved),
            facts: config.approval_facts.clone(),
            table: Mutex::new(Table::new(config.approval_max_pending)),
            pages: Pages::default(),
            file: config.approval_state_file(),
            writing: Mutex::new(()),
            dirty: AtomicBool::new(false),
            instance: clean(instance, MAX_BY),
            metrics,
            outbox_tx,
            outbox_rx,
            resync: AtomicBool::new(false),
            fleet: OnceLock::new(),
            audit: OnceLock::new(),
            denied_logged: Mutex::new(HashMap::new()),
            caught_up: AtomicBool::new(true),
            deferred: Mutex::new(HashSet::new()),
            expiry: Expiry {
                pending: config.approval_pending_expiry,
                ahead: config.approval_ahead_expiry,
            },
            expired_at: Mutex::new(None),
            policy: policy::Policy::of(config),
        })
    }

    /// Reads the approval file (a file that cannot be read is moved aside, and every
    /// node waits for a decision again).
    pub(crate) fn restore(&self) {
        let Some(path) = &self.file else {
            return;
        };
        match file::load(path) {
            Ok(loaded) => {
                let n = loaded.records.len();
                let mut table = self.table.lock();
                for record in loaded.records {
                    table.merge(record);
                }
                log::info!(
                    "Read {n} approval records ({} pending) from {}",
                    table.pending(),
                    path.display()
                );
                if loaded.refused > 0 {
                    log::error!(
                        "Skipped {} invalid records of the approval file {}",
                        loaded.refused,
                        path.display()
                    );
                }
            }
            Err(e) => {
                let aside = file::move_aside(path);
                log::error!(
                    "{e}; starting with no approvals: every node waits for a decision again{}",
                    aside.map_or(String::new(), |p| format!(
                        " (the file was moved to {})",
                        p.display()
                    ))
                );
            }
        }
        self.update_gauges();
    }

    /// From now on, approved nodes are offered to `fleet` and decisions are written
    /// to `audit`.
    pub(crate) fn attach(&self, fleet: &Arc<Fleet>, audit: Option<Arc<AuditLog>>) {
        let _ = self.fleet.set(Arc::downgrade(fleet));
        if let Some(audit) = audit {
            let _ = self.audit.set(audit);
        }
    }

    /// Whether `identity` may be queued (see [`Admission`]); a pending one's last
    /// sighting is noted.
    pub(crate) fn admission(&self, identity: &Identity) -> Admission {
        if !self.rules.needs_approval(identity.as_str()) {
            return Admission::Go;
        }
        let mut table = self.table.lock();
        match table.standing(identity) {
            Some(Decision::Pending) => {
                table.seen(identity, crate::clock::unix_now());
                Admission::Pending
            }
            Some(Decision::Denied) => Admission::Denied,
            Some(Decision::Approved) if !self.caught_up.load(Ordering::Acquire) => {
                drop(table);
                let mut deferred = self.deferred.lock();
                if deferred.len() < DEFERRED {
                    deferred.insert(identity.clone());
                }
                Admission::Deferred
            }
            _ => Admission::Go,
        }
    }

    /// The sync thread starts: approvals wait until [`Approvals::caught_up`].
    pub(crate) fn catching_up(&self) {
        self.caught_up.store(false, Ordering::Release);
    }

    /// This instance's table has caught up with its peers' (or nobody answered):
    /// approvals are acted on from now on, and the ones deferred are offered.
    pub(crate) fn caught_up(&self) {
        if self.caught_up.swap(true, Ordering::AcqRel) {
            return;
        }
        let deferred = std::mem::take(&mut *self.deferred.lock());
        log::info!(
            "The approvals table caught up with the site's other instances; offering {} approved identities found meanwhile",
            deferred.len()
        );
        for identity in &deferred {
            self.offer(identity);
        }
    }

    /// True when a refusal of `identity` as denied should be logged now (once per
    /// [`DENIED_LOG_EVERY`] per identity).
    pub(crate) fn log_denial_now(&self, identity: &Identity) -> bool {
        let mut logged = self.denied_logged.lock();
        let now = Instant::now();
        if logged.len() >= DENIED_LOGGED {
            logged.retain(|_, at| now.duration_since(*at) < DENIED_LOG_EVERY);
            if logged.len() >= DENIED_LOGGED {
                return false;
            }
        }
        match logged.get(identity) {
            Some(at) if now.duration_since(*at) < DENIED_LOG_EVERY => false,
            _ => {
                logged.insert(identity.clone(), now);
                true
            }
        }
    }

    /// Pending records now, and a page of them (longest waiting first; the control
    /// socket asks for [`MAX_PAGE`] at most).
    pub(crate) fn pending(&self, offset: usize, limit: usize) -> (usize, Vec<PendingRow>) {
        let total = self.table.lock().pending();
        if limit == 0 {
            return (total, Vec::new()); // a count alone: nothing sorted
        }
        let (page, _) = self.pages.page(&self.table, List::Pending, offset, limit);
        (
            total,
            page.iter()
                .map(|r| PendingRow::of(r, &self.expiry))
                .collect(),
        )
    }

    /// A page of the denied records (most recent decision first), and their count.
    pub(crate) fn denied(&self, offset: usize, limit: usize) -> (Vec<Arc<ApprovalRecord>>, usize) {
        self.pages.page(&self.table, List::Denied, offset, limit)
    }

    /// The record of `identity`, if it has one.
    pub(crate) fn record(&self, identity: &Identity) -> Option<ApprovalRecord> {
        self.table.lock().get(identity).cloned()
    }

    /// Approves `identities` (pending or not seen yet: a pre-approval), on behalf of
    /// `by`; each approved node is queued at once.
    pub(crate) fn approve(&self, identities: &[Identity], by: &Operator) -> Decided {
        self.decide(
            identities,
            Decision::Approved,
            "",
            Decider::Operator(by),
            None,
        )
    }

    /// Approves every node pending since `as_of` (Unix nanoseconds) or before: the
    /// ones the operator counted, not those held since.
    pub(crate) fn approve_all(&self, as_of: u64, by: &Operator) -> Decided {
        let identities = self.table.lock().pending_as_of(as_of);
        self.decide(
            &identities,
            Decision::Approved,
            "",
            Decider::Operator(by),
            None,
        )
    }

    /// Denies `identities` with `reason` (checked by the caller).
    pub(crate) fn deny(&self, identities: &[Identity], reason: &str, by: &Operator) -> Decided {
        self.decide(
            identities,
            Decision::Denied,
            reason,
            Decider::Operator(by),
            None,
        )
    }

    /// Takes back any decision on `identities`: each waits for one again when seen.
    pub(crate) fn forget(&self, identities: &[Identity], by: &Operator) -> Decided {
        self.decide(
            identities,
            Decision::Forgotten,
            "",
            Decider::Operator(by),
            None,
        )
    }

    /// Records `decision` for each of `identities`, writes the file, tells the
    /// audit trail, the log and the other instances, and queues approved nodes.
    ///
    /// Each decision's clock is one more than the record's: it comes after every
    /// decision this instance has seen for the identity, on every instance that
    /// merges it (`merge.rs`). An approval or a denial keeps the node's sightings;
    /// a forget starts them afresh (the node waits again when seen).
    fn decide(
        &self,
        identities: &[Identity],
        decision: Decision,
        reason: &str,
        by: Decider<'_>,
        pattern: Option<&str>,
    ) -> Decided {
        let now = u64::try_from(crate::clock::unix_nanos()).unwrap_or(0);
        let (mut changed, mut not_taken) = (Vec::new(), Vec::new());
        {
            let mut table = self.table.lock();
            for identity in identities {
                let old = table.get(identity).cloned();
                let standing = old.as_ref().map(ApprovalRecord::standing);
                if matches!(by, Decider::Policy(_)) && standing != Some(Decision::Pending) {
                    continue; // a person (or another instance's program) decided first
                }
                let same = old.as_ref().is_some_and(|o| o.reason == reason);
                if (standing == Some(decision) && same)
                    || (decision == Decision::Forgotten && standing.is_none())
                {
                    continue;
                }
                let clock = old.as_ref().map_or(0, |o| o.clock);
                if clock >= MAX_CLOCK {
                    not_taken.push((identity.clone(), NotTaken::ClockExhausted));
                    continue;
                }
                let mut record = old.unwrap_or_else(|| {
                    let mut none = ApprovalRecord::held(identity.clone(), 0);
                    (none.held_at, none.first_seen, none.last_seen) = (0, 0, 0);
                    none
                });
                record.clock = clock + 1;
                record.decision = decision;
                record.at = now;
                record.by = clean(&by.text(), MAX_BY);
                record.operator = by.operator();
                record.instance.clone_from(&self.instance);
                record.reason = clean(reason, MAX_REASON);
                if decision == Decision::Forgotten {
                    (record.held_at, record.first_seen, record.last_seen) = (0, 0, 0);
                    record.version.clear();
                    record.facts.clear();
                }
                // A higher clock than the table's: the join takes it whole.
                table.merge(record.clone());
                self.send(record);
                changed.push(identity.clone());
            }
        }
        if !changed.is_empty() {
            self.dirty.store(true, Ordering::Relaxed);
            self.pages.invalidate();
        }
        let saved = self.save();
        for identity in &changed {
            self.decided_here(identity, decision, reason, by, pattern);
        }
        self.update_gauges();
        Decided {
            changed,
            not_taken,
            saved,
        }
    }

    /// Logs, audits, counts and (approved) queues one decision taken here.
    fn decided_here(
        &self,
        identity: &Identity,
        decision: Decision,
        reason: &str,
        by: Decider<'_>,
        pattern: Option<&str>,
    ) {
        self.metrics
            .approval_decisions
            .with_label_values(&[decision.name(), by.label()])
            .inc();
        let why = if reason.is_empty() {
            String::new()
        } else {
            format!(": {}", crate::untrusted::quoted(reason))
        };
        let how = pattern.map_or(String::new(), |p| {
            format!(" (matched by {})", crate::untrusted::quoted(p))
        });
        match by {
            Decider::Operator(who) => {
                log::warn!(
                    "{identity} {} by an operator, {who}{how}{why}",
                    decision.name()
                )
            }
            Decider::Expiry => log::info!("{identity} {} by expiry{why}", decision.name()),
            Decider::Policy(program) => log::warn!(
                "{identity} {} by the approval policy program {program}{why}",
                decision.name()
            ),
        }
        if let Some(audit) = self.audit.get() {
            let mut line = json!({
                "time": crate::clock::rfc3339(crate::clock::unix_now() as f64),
                "instance": self.instance,
                "event": "approval",
                "identity": identity.as_str(),
                "decision": decision.name(),
                "by": by.label(),
                "reason": reason,
            });
            if let Decider::Operator(who) = by {
                line["operator"] = json!({"uid": who.uid, "user": who.user, "pid": who.pid});
            }
            if let Some(pattern) = pattern {
                line["pattern"] = json!(pattern);
            }
            if let Decider::Policy(program) = by {
                line["program"] = json!(program);
            }
            audit.write(&line.to_string());
        }
        if decision == Decision::Approved {
            self.offer(identity);
        }
    }

    /// Queues an approved node (if it is ours: [`Fleet::add`] decides), unless this
    /// instance is paused (a standby of an election, an operator's pause): the
    /// instance that provisions now queues it, and the discovery after a resume
    /// finds it.
    fn offer(&self, identity: &Identity) {
        if let Some(fleet) = self.fleet.get().and_then(Weak::upgrade) {
            if fleet.pause().paused() {
                return;
            }
            let result = fleet.add(identity, Source::Retry);
            log::debug!("Offered approved {identity} to the queue: {result:?}");
        }
    }

    /// Takes records another instance sent; a decision new to this instance is
    /// logged and written to its audit trail (with the instance that took it and
    /// the operator as that instance recorded them), and the identities that
    /// became approved are queued.
    pub(crate) fn merge(&self, records: Vec<ApprovalRecord>, from: &str) {
        let mut approved = Vec::new();
        let mut decisions = Vec::new();
        let mut any = false;
        {
            let mut table = self.table.lock();
            for record in records {
                let identity = record.identity.clone();
                let clock_before = table.get(&identity).map_or(0, |r| r.clock);
                let Change::Took(before) = table.merge(record) else {
                    continue;
                };
                any = true;
                let Some(now) = table.get(&identity) else {
                    continue; // forgotten at once for room
                };
                if now.clock > clock_before {
                    decisions.push(now.clone());
                }
                if now.standing() == Decision::Approved && before != Some(Decision::Approved) {
                    approved.push(identity);
                }
            }
        }
        if any {
            self.dirty.store(true, Ordering::Relaxed);
            self.update_gauges();
        }
        for record in &decisions {
            self.decided_elsewhere(record, from);
        }
        for identity in &approved {
            self.offer(identity);
        }
    }

    /// Logs and audits a decision another instance took, as it recorded it.
    fn decided_elsewhere(&self, r: &ApprovalRecord, from: &str) {
        log::info!(
            "{} {} by {} on the instance {} (told by {})",
            r.identity,
            r.decision.name(),
            crate::untrusted::shown(&r.by),
            crate::untrusted::shown(&r.instance),
            crate::untrusted::shown(from)
        );
        if let Some(audit) = self.audit.get() {
            let line = json!({
                "time": crate::clock::rfc3339(crate::clock::unix_now() as f64),
                "instance": self.instance,
                "event": "approval",
                "identity": r.identity.as_str(),
                "decision": r.decision.name(),
                "decided_on": r.instance,
                "decided_at": crate::clock::rfc3339(r.at as f64 / 1e9),
                "operator": r.operator.as_ref().map(|o| json!({"uid": o.uid, "user": o.user, "pid": o.pid})),
                "by": r.by,
                "reason": r.reason,
                "told_by": from,
            });
            audit.write(&line.to_string());
        }
    }

    /// Queues `record` for the other instances; when the outbox is full the whole
    /// table is sent instead.
    fn send(&self, record: ApprovalRecord) {
        if self.outbox_tx.try_send(record).is_err() {
            self.resync.store(true, Ordering::Relaxed);
        }
    }

    /// Writes the file now if the table changed since it was last written.
    pub(crate) fn save(&self) -> Result<(), ApprovalFileError> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let _writing = self.writing.lock();
        if !self.dirty.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        // A reference count per record under the lock; encoded and written after it.
        let snapshot = self.table.lock().snapshot();
        let bytes = file::encode(snapshot.iter().map(|r| &**r));
        file::write(path, &bytes).inspect_err(|_| self.dirty.store(true, Ordering::Relaxed))
    }

    /// Sets the pending gauge and counts evictions (cheap: no scan of the table).
    pub(crate) fn update_gauges(&self) {
        let (pending, evicted) = {
            let mut table = self.table.lock();
            (table.pending(), table.take_evicted())
        };
        self.metrics.pending_approval.set(pending as i64);
        if evicted > 0 {
            self.metrics.pending_evicted.inc_by(evicted);
            log::warn!(
                "Forgot {evicted} pending identities seen longest ago: more than approval_max_pending wait for a decision"
            );
        }
    }

    /// Sets how long the node pending longest has waited (a scan of the table: the
    /// sync thread does it once a second).
    pub(crate) fn update_oldest(&self) {
        let oldest = self.table.lock().oldest_pending();
        let waited = oldest.map_or(0, |first| crate::clock::unix_now().saturating_sub(first));
        self.metrics
            .pending_approval_oldest_seconds
            .set(i64::try_from(waited).unwrap_or(i64::MAX));
    }

    /// Every record, shared, for a peer that asked (a reference count each).
    pub(crate) fn snapshot(&self) -> Vec<Arc<ApprovalRecord>> {
        self.table.lock().snapshot()
    }

    /// The table's digest and its number of records.
    pub(crate) fn digest(&self) -> (u128, usize) {
        self.table.lock().digest()
    }

    /// The changes waiting to be sent to the other instances.
    pub(crate) fn outbox(&self) -> Receiver<ApprovalRecord> {
        self.outbox_rx.clone()
    }

    /// Whether the whole table must be sent (a change could not be queued); asking
    /// clears it.
    pub(crate) fn take_resync(&self) -> bool {
        self.resync.swap(false, Ordering::Relaxed)
    }

    /// This instance, as records name it.
    pub(crate) fn instance(&self) -> &str {
        &self.instance
    }
}

/// What an operator's decision in `record` says of the node, if it says anything.
fn decided_verdict(record: Option<&ApprovalRecord>) -> Option<Verdict> {
    match record.map(ApprovalRecord::standing) {
        Some(Decision::Approved) => Some(Verdict::Go),
        Some(Decision::Denied) => Some(Verdict::Denied),
        _ => None,
    }
}

impl Gate for Approvals {
    fn judge(
        &self,
        identity: &Identity,
        version: &str,
        inventory: &str,
        evidence: crate::node::approval::Evidence<'_>,
    ) -> Verdict {
        if !self.rules.needs_approval(identity.as_str()) {
            return Verdict::Go;
        }
        let now_ns = u64::try_from(crate::clock::unix_nanos()).unwrap_or(0);
        // An approved node (the usual case once decided) costs no facts' decoding.
        let decided = {
            let mut table = self.table.lock();
            if let Some(came) = table.came(identity, now_ns / 1_000_000_000) {
                // Approved ahead of time, and its node answered: it no longer
                // expires (queueing it on approval proves nothing, this does).
                self.dirty.store(true, Ordering::Relaxed);
                self.send(came);
            }
            decided_verdict(table.get(identity))
        };
        if let Some(decided) = decided {
            return decided;
        }
        let (version, facts) = (
            clean(version, MAX_VERSION),
            facts::facts_of(inventory, &self.facts),
        );
        let (change, decided, record) = {
            let mut table = self.table.lock();
            let change = table.hold(identity, now_ns, version, facts);
            // An operator may have decided while the facts were read: a hold
            // never undoes that, and the table says so.
            let record = table.get(identity).cloned();
            (change, decided_verdict(record.as_ref()), record)
        };
        if let Some(decided) = decided {
            return decided;
        }
        let new_hold =
            change == Change::Took(None) || change == Change::Took(Some(Decision::Forgotten));
        if new_hold {
            log::info!("{identity} waits for an operator's approval");
        }
        if let (true, Some(policy), Some(record)) = (new_hold, &self.policy, &record) {
            policy.offer(record, evidence, &self.metrics);
        }
        if let (Change::Took(_), Some(record)) = (change, record) {
            self.send(record);
        }
        self.dirty.store(true, Ordering::Relaxed);
        self.update_gauges();
        Verdict::Held
    }
}

#[cfg(test)]
mod tests;
