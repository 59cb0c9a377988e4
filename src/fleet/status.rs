//! What the fleet knows about each node, for people: the attempts in flight (step,
//! since, tries), a bounded history of finished attempts, the attempt number of each
//! identity, and the audit trail those finished attempts are written to. Read by
//! `/nodes` and `/nodes/<identity>` on the monitoring port ([`FleetStatus`]).
//!
//! Bounds: [`HISTORY`] finished attempts in all, at most [`PER_IDENTITY`] of one
//! identity (a node that fails again and again does not push everyone else out);
//! attempt numbers of at most [`COUNTED`] identities (beyond it they restart at 1).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{json, Value};

use super::audit::AuditLog;
use super::{Fleet, Lane, State};
use crate::choria::identity::Identity;
use crate::choria::peers::{ApprovalRecord, Decision};
use crate::metrics::{NodeLookup, NodesQuery};
use crate::node::outcome::Outcome;
use crate::node::progress::{Facts, Progress};

/// Finished attempts kept for `/nodes`.
pub(crate) const HISTORY: usize = 1000;

/// Finished attempts of one identity kept for `/nodes`.
pub(crate) const PER_IDENTITY: usize = 20;

/// Identities whose attempts are numbered.
pub(crate) const COUNTED: usize = 100_000;

/// Most characters of an outcome's text kept in a record.
const TEXT_MAX: usize = 1000;

/// One finished attempt: a line of the audit trail and an entry of `/nodes`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Record {
    /// When it ended, in Unix seconds; written as RFC 3339, UTC (formatted only
    /// when the record is written or shown, not for every node).
    #[serde(serialize_with = "as_rfc3339")]
    pub time: i64,
    /// The provisioner that made it (shared by every record, not copied).
    pub instance: Arc<str>,
    /// The node.
    pub identity: Identity,
    /// The outcome label (`provisioned`, `deferred`, `failed` …).
    pub outcome: &'static str,
    /// The step it ended at.
    pub step: &'static str,
    /// How long it took, in seconds.
    pub duration_seconds: f64,
    /// Which attempt of this identity (since this process started).
    pub attempt: u64,
    /// What went wrong, for a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why it ended here, for an outcome that is not a failure (`upgrade_waiting`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the attempt learnt (tokens' ids and expiries, certificate, versions,
    /// the helper's `msg`).
    #[serde(flatten)]
    pub facts: Facts,
}

/// The finished attempts kept: at most [`HISTORY`] in all and [`PER_IDENTITY`] per
/// node, with each node's count kept beside them so that adding one costs the same
/// whatever the history holds (a scan of it per attempt was a tenth of the daemon's
/// CPU in `make bench`).
#[derive(Default)]
struct History {
    /// Oldest first.
    records: VecDeque<Arc<Record>>,
    /// How many of `records` each node has (never zero).
    per_identity: HashMap<Identity, usize>,
}

impl History {
    fn push(&mut self, record: Arc<Record>) {
        let mine = self
            .per_identity
            .get(&record.identity)
            .copied()
            .unwrap_or(0);
        if mine >= PER_IDENTITY {
            // Rare: a node that failed PER_IDENTITY times while the rest of the
            // history did not push its records out.
            if let Some(pos) = self
                .records
                .iter()
                .position(|r| r.identity == record.identity)
            {
                if let Some(oldest) = self.records.remove(pos) {
                    self.forget(&oldest.identity);
                }
            }
        }
        if self.records.len() >= HISTORY {
            if let Some(oldest) = self.records.pop_front() {
                self.forget(&oldest.identity);
            }
        }
        *self
            .per_identity
            .entry(record.identity.clone())
            .or_insert(0) += 1;
        self.records.push_back(record);
    }

    fn forget(&mut self, identity: &Identity) {
        if let Some(n) = self.per_identity.get_mut(identity) {
            *n -= 1;
            if *n == 0 {
                self.per_identity.remove(identity);
            }
        }
    }
}

/// The attempt numbers of at most [`COUNTED`] identities, each known by a keyed
/// hash rather than by name: 16 bytes an identity (24 keyed by name), and no name
/// kept alive after the fleet has forgotten it (at 100,000 nodes, names of about 40
/// bytes each). The key is random per board, so nobody can make two names share a
/// number; by chance two of 100,000 do with a probability near 3 in 10^10, and
/// then one's number counts both.
#[derive(Default)]
struct Numbering {
    keys: std::collections::hash_map::RandomState,
    counts: HashMap<u64, u32>,
}

impl Numbering {
    /// The number of `identity`'s attempt that starts now (1 for its first).
    fn next(&mut self, identity: &Identity) -> u64 {
        use std::hash::BuildHasher;
        let key = self.keys.hash_one(identity.as_str());
        if self.counts.len() >= COUNTED && !self.counts.contains_key(&key) {
            self.counts.clear();
        }
        let n = self.counts.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        u64::from(*n)
    }
}

struct InFlight {
    progress: Arc<Progress>,
    started: Instant,
    attempt: u64,
}

/// The status of one fleet.
#[derive(Default)]
pub(crate) struct Board {
    in_flight: Mutex<HashMap<Identity, InFlight>>,
    history: Mutex<History>,
    attempts: Mutex<Numbering>,
    audit: OnceLock<Arc<AuditLog>>,
    instance: OnceLock<Arc<str>>,
}

/// `until` seen from now, as wall-clock Unix seconds.
fn wall(at: Instant) -> f64 {
    let now = Instant::now();
    let unix = crate::clock::unix_nanos() as f64 / 1e9;
    if at >= now {
        unix + (at - now).as_secs_f64()
    } else {
        unix - (now - at).as_secs_f64()
    }
}

fn rfc3339(at: Instant) -> String {
    crate::clock::rfc3339(wall(at))
}

/// A record's `time`, Unix seconds, as RFC 3339.
fn as_rfc3339<S: serde::Serializer>(unix: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::clock::rfc3339(*unix as f64))
}

fn cut(text: String) -> String {
    if text.chars().count() <= TEXT_MAX {
        return text;
    }
    let mut out: String = text.chars().take(TEXT_MAX).collect();
    out.push_str(&format!("…({} bytes)", text.len()));
    out
}

impl Board {
    /// Sends every finished attempt to `audit` from now on (set once).
    pub(crate) fn set_audit(&self, audit: Arc<AuditLog>) {
        let _ = self.audit.set(audit);
    }

    /// The audit trail, when one is set.
    pub(crate) fn audit(&self) -> Option<&Arc<AuditLog>> {
        self.audit.get()
    }

    /// Names this provisioner in every record (set once).
    pub(crate) fn set_instance(&self, identity: &str) {
        let _ = self.instance.set(identity.into());
    }

    /// An attempt of `identity` starts; returns its number.
    pub(super) fn begin(&self, identity: &Identity, progress: Arc<Progress>) -> u64 {
        let attempt = self.attempts.lock().next(identity);
        self.in_flight.lock().insert(
            identity.clone(),
            InFlight {
                progress,
                started: Instant::now(),
                attempt,
            },
        );
        attempt
    }

    /// Ends `identity`'s attempt with `outcome`: a record for the history and the
    /// audit trail. `silent`: it never had a valid reply (with a node that was gone
    /// or stale, held for approval or denied, a quiet attempt: written at a bounded
    /// rate, see `fleet::audit`).
    pub(super) fn finish(
        &self,
        identity: &Identity,
        outcome: &Outcome,
        took: Duration,
        silent: bool,
    ) {
        let Some(flight) = self.in_flight.lock().remove(identity) else {
            return;
        };
        let text = || Some(cut(outcome.to_string()));
        let (error, reason) = match outcome {
            Outcome::Done | Outcome::ShutDown | Outcome::Upgraded | Outcome::Deferred(_) => {
                (None, None)
            }
            Outcome::UpgradeWaiting(_) | Outcome::PendingApproval(_) => (None, text()),
            _ => (text(), None),
        };
        let mut facts = flight.progress.facts();
        if let Outcome::Deferred(msg) = outcome {
            if facts.helper_msg.is_none() && !msg.is_empty() {
                facts.helper_msg = Some(crate::untrusted::shown(msg));
            }
        }
        let record = Arc::new(Record {
            time: crate::clock::unix_nanos() / 1_000_000_000,
            instance: self.instance.get().cloned().unwrap_or_default(),
            identity: identity.clone(),
            outcome: outcome.label(),
            step: flight.progress.position().step,
            duration_seconds: (took.as_secs_f64() * 1000.0).round() / 1000.0,
            attempt: flight.attempt,
            error,
            reason,
            facts,
        });
        if let Some(audit) = self.audit.get() {
            // Nothing was made for or sent to the node (held or denied ones wait
            // in the approvals table, where the operator looks).
            let quiet = silent
                || matches!(
                    outcome,
                    Outcome::Unreachable(_)
                        | Outcome::Stale(_)
                        | Outcome::PendingApproval(_)
                        | Outcome::Denied(_)
                );
            match serde_json::to_string(&*record) {
                Ok(line) if quiet => audit.write_quiet(&record, &line),
                Ok(line) => audit.write(&line),
                Err(e) => log::error!("Could not encode the audit record of {identity}: {e}"),
            }
        }
        self.history.lock().push(record);
    }

    fn in_flight_json(&self, identity: &Identity, f: &InFlight) -> Value {
        let at = f.progress.position();
        json!({
            "identity": identity.as_str(),
            "state": "in_flight",
            "attempt": f.attempt,
            "started": rfc3339(f.started),
            "step": at.step,
            "step_since": rfc3339(at.since),
            "tries": at.tries,
        })
    }

    fn history_of(&self, identity: &str) -> Vec<Arc<Record>> {
        self.history
            .lock()
            .records
            .iter()
            .rev()
            .filter(|r| r.identity.as_str() == identity)
            .cloned()
            .collect()
    }
}

/// The `/nodes` view of one fleet.
pub(crate) struct FleetStatus(pub Arc<Fleet>);

/// A queued node: its lane and generation (its place), identity and time queued.
type Queued = (Lane, u64, Identity, Instant);

/// A node cooling down: until when, and its identity.
type Cooling = (Instant, Identity);

/// One `/nodes` answer being made: the page `query` asks for of each list, with
/// each list's total and, when more follow, the path of its next page. A list is
/// given whole and in its order; only the page asked for is made into JSON.
struct Page<'q> {
    query: &'q NodesQuery,
    doc: serde_json::Map<String, Value>,
    totals: serde_json::Map<String, Value>,
    next: serde_json::Map<String, Value>,
}

impl<'q> Page<'q> {
    fn new(query: &'q NodesQuery, doc: serde_json::Map<String, Value>) -> Page<'q> {
        Page {
            query,
            doc,
            totals: serde_json::Map::new(),
            next: serde_json::Map::new(),
        }
    }

    /// Adds the list `name` of `items` (when the query wants it), each shown by
    /// `show` with its place in the whole list.
    fn list<T>(&mut self, name: &str, items: Vec<T>, show: impl Fn(usize, T) -> Value) {
        let query = self.query;
        if !query.wants(name) {
            return;
        }
        let total = items.len();
        let shown: Vec<Value> = items
            .into_iter()
            .enumerate()
            .skip(query.offset)
            .take(query.limit)
            .map(|(n, item)| show(n, item))
            .collect();
        if query.offset.saturating_add(query.limit) < total {
            self.next.insert(name.into(), query.next_of(name).into());
        }
        self.totals.insert(name.into(), total.into());
        self.doc.insert(name.into(), shown.into());
    }

    /// Adds the list `name` when only its page was made: `page` starts at the
    /// query's offset, and the whole list has `total` entries.
    fn list_page<T>(
        &mut self,
        name: &str,
        total: usize,
        page: Vec<T>,
        show: impl Fn(usize, T) -> Value,
    ) {
        let query = self.query;
        let shown: Vec<Value> = page
            .into_iter()
            .take(query.limit)
            .enumerate()
            .map(|(n, item)| show(query.offset + n, item))
            .collect();
        if query.offset.saturating_add(query.limit) < total {
            self.next.insert(name.into(), query.next_of(name).into());
        }
        self.totals.insert(name.into(), total.into());
        self.doc.insert(name.into(), shown.into());
    }

    fn finish(mut self) -> Value {
        self.doc.insert("total".into(), self.totals.into());
        self.doc.insert("next".into(), self.next.into());
        Value::Object(self.doc)
    }
}

impl FleetStatus {
    /// The queued nodes in queue order (generation, identity, since) and the nodes
    /// cooling down by end (until, identity), as asked: copied under the fleet's
    /// lock (identities are shared, not copied), sorted and shown after it.
    fn known(&self, query: &NodesQuery) -> (Vec<Queued>, Vec<Cooling>) {
        let mut queued = Vec::new();
        let mut cooling = Vec::new();
        // A page of other lists walks no map under the fleet's lock.
        if !query.wants("queued") && !query.wants("cooling_down") {
            return (queued, cooling);
        }
        {
            let hosts = self.0.hosts.lock();
            for (identity, entry) in hosts.iter() {
                match entry.state {
                    State::Queued(since, lane) if query.wants("queued") => {
                        queued.push((lane, entry.generation, identity.clone(), since))
                    }
                    State::CoolingDown(until, _) if query.wants("cooling_down") => {
                        cooling.push((until, identity.clone()))
                    }
                    _ => {}
                }
            }
        }
        // Each lane is first in, first out and generations only grow; the confirmed
        // lane goes first: a node's place is its rank by lane, then generation.
        queued.sort_unstable();
        cooling.sort_unstable();
        (queued, cooling)
    }

    /// One node's entry in the fleet's map, looked up (a queued node's place is
    /// left out: it would take a walk of the queue).
    fn known_one(&self, identity: &Identity) -> Option<Value> {
        let state = self.0.hosts.lock().get(identity).map(|e| e.state);
        match state? {
            State::Queued(since, _) => Some(json!({
                "identity": identity.as_str(),
                "state": "queued",
                "since": rfc3339(since),
            })),
            State::CoolingDown(until, _) => Some(json!({
                "identity": identity.as_str(),
                "state": "cooling_down",
                "until": rfc3339(until),
            })),
            State::Working => None,
        }
    }

    /// What every `/nodes` answer starts with: who answers, when, and the pause.
    fn header(&self) -> serde_json::Map<String, Value> {
        let mut doc = serde_json::Map::new();
        let instance = self.0.board.instance.get().cloned().unwrap_or_default();
        doc.insert("instance".into(), json!(instance));
        let now = crate::clock::rfc3339(crate::clock::unix_nanos() as f64 / 1e9);
        doc.insert("time".into(), now.into());
        doc.insert("paused".into(), self.0.pause().paused().into());
        doc.insert("operator_pause".into(), json!(self.0.pause().operator()));
        doc
    }

    /// The attempts in flight, as asked, in the order they began (bounded by
    /// `max_waiting_attempts`).
    fn in_flight(&self, query: &NodesQuery) -> Vec<((Instant, Identity), Value)> {
        if !query.wants("in_flight") {
            return Vec::new();
        }
        let board = &self.0.board;
        let mut in_flight: Vec<((Instant, Identity), Value)> = board
            .in_flight
            .lock()
            .iter()
            .map(|(i, f)| ((f.started, i.clone()), board.in_flight_json(i, f)))
            .collect();
        in_flight.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        in_flight
    }

    /// The finished attempts kept, newest first, as asked.
    fn recent(&self, query: &NodesQuery) -> Vec<Arc<Record>> {
        if !query.wants("recent") {
            return Vec::new();
        }
        let history = self.0.board.history.lock();
        history.records.iter().rev().cloned().collect()
    }

    fn upgrading(&self) -> Vec<(Identity, Instant)> {
        let mut upgrading = self.0.provisioner.upgrading();
        upgrading.sort_unstable_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        upgrading
    }
}

impl FleetStatus {
    /// The pending and denied lists, when `approval: required` (a page of each
    /// taken from the approvals table).
    fn approvals(&self, query: &NodesQuery, page: &mut Page<'_>) {
        let Some(approvals) = self.0.approvals() else {
            return;
        };
        if query.wants("pending") {
            let (total, rows) = approvals.pending(query.offset, query.limit);
            page.list_page("pending", total, rows, |n, row| {
                json!({
                    "identity": row.identity,
                    "state": "pending",
                    "position": n + 1,
                    "first_seen": crate::clock::rfc3339(row.first_seen as f64),
                    "last_seen": crate::clock::rfc3339(row.last_seen as f64),
                    "version": row.version,
                    "facts": row.facts.into_iter().map(|(k, v)| (k, Value::String(v))).collect::<serde_json::Map<String, Value>>(),
                })
            });
        }
        if query.wants("denied") {
            let (rows, total) = approvals.denied(query.offset, query.limit);
            page.list_page("denied", total, rows, |_, r| approval_json(&r));
        }
    }
}

/// A pending or denied node as `/nodes` shows it.
fn approval_json(r: &ApprovalRecord) -> Value {
    let state = r.standing().name();
    let decided = crate::clock::rfc3339((r.at / 1_000_000_000) as f64);
    let mut doc = json!({"identity": r.identity.as_str(), "state": state});
    if r.standing() == Decision::Pending {
        doc["first_seen"] = crate::clock::rfc3339(r.first_seen as f64).into();
        doc["last_seen"] = crate::clock::rfc3339(r.last_seen as f64).into();
    } else {
        doc["since"] = decided.into();
        doc["by"] = r.by.clone().into();
        doc["reason"] = r.reason.clone().into();
    }
    doc
}

fn upgrading_json(identity: &Identity, since: Instant) -> Value {
    json!({"identity": identity.as_str(), "state": "upgrading", "since": rfc3339(since)})
}

impl crate::metrics::NodeStatus for FleetStatus {
    fn nodes(&self, query: &NodesQuery) -> Value {
        let mut page = Page::new(query, self.header());
        let (queued, cooling) = self.known(query);
        page.list("queued", queued, |n, (lane, _, i, since)| {
            json!({
                "identity": i.as_str(),
                "state": "queued",
                "position": n + 1,
                "lane": lane.name(),
                "since": rfc3339(since),
            })
        });
        page.list("in_flight", self.in_flight(query), |_, (_, v)| v);
        page.list("cooling_down", cooling, |_, (until, i)| {
            json!({
                "identity": i.as_str(),
                "state": "cooling_down",
                "until": rfc3339(until),
            })
        });
        page.list("upgrading", self.upgrading(), |_, (i, since)| {
            upgrading_json(&i, since)
        });
        self.approvals(query, &mut page);
        page.list("recent", self.recent(query), |_, r| {
            serde_json::to_value(&*r).unwrap_or(Value::Null)
        });
        page.finish()
    }

    fn node(&self, raw: &str) -> NodeLookup {
        let identity = match Identity::parse(raw) {
            Ok(i) => i,
            Err(e) => return NodeLookup::Invalid(e.to_string()),
        };
        let board = &self.0.board;
        let mut now = board
            .in_flight
            .lock()
            .get(&identity)
            .map(|f| board.in_flight_json(&identity, f));
        if now.is_none() {
            now = self.known_one(&identity);
        }
        if now.is_none() {
            now = self
                .0
                .provisioner
                .upgrading()
                .into_iter()
                .find(|(i, _)| *i == identity)
                .map(|(i, since)| upgrading_json(&i, since));
        }
        if now.is_none() {
            now = self
                .0
                .approvals()
                .and_then(|a| a.record(&identity))
                .filter(|r| matches!(r.standing(), Decision::Pending | Decision::Denied))
                .map(|r| approval_json(&r));
        }
        let history = board.history_of(identity.as_str());
        if now.is_none() && history.is_empty() {
            return NodeLookup::Unknown;
        }
        let mut doc =
            now.unwrap_or_else(|| json!({"identity": identity.as_str(), "state": "finished"}));
        doc["recent"] = json!(history.iter().map(|r| &**r).collect::<Vec<&Record>>());
        NodeLookup::Found(doc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Identity {
        Identity::parse(s).unwrap()
    }

    fn attempt(board: &Board, identity: &Identity, outcome: &Outcome) -> u64 {
        let progress = Arc::new(Progress::new());
        let n = board.begin(identity, Arc::clone(&progress));
        progress.rpc_try("inventory", 2);
        board.finish(identity, outcome, Duration::from_millis(1500), false);
        n
    }

    #[test]
    fn a_record_keeps_seconds_and_is_written_with_an_rfc3339_time() {
        let record = Record {
            time: 1_764_892_800, // 2025-12-05T00:00:00Z
            instance: "p1.test".into(),
            identity: id("n1.example.net"),
            outcome: "provisioned",
            step: "restart",
            duration_seconds: 0.05,
            attempt: 1,
            error: None,
            reason: None,
            facts: Facts::default(),
        };
        let line = serde_json::to_value(&record).unwrap();
        assert_eq!(line["time"], "2025-12-05T00:00:00Z");
        assert_eq!(line["identity"], "n1.example.net");
        assert_eq!(line["instance"], "p1.test");
    }

    #[test]
    fn attempts_are_numbered_and_the_history_is_bounded_per_node_and_in_all() {
        let board = Board::default();
        board.set_instance("p1.test");
        let flappy = id("flappy.example.net");
        for n in 1..=PER_IDENTITY as u64 + 5 {
            let failed = Outcome::Failed(format!("try {n}"));
            assert_eq!(attempt(&board, &flappy, &failed), n);
        }
        let mine = board.history_of(flappy.as_str());
        assert_eq!(
            mine.len(),
            PER_IDENTITY,
            "one node keeps at most {PER_IDENTITY}"
        );
        assert_eq!(
            board.history.lock().per_identity[flappy.as_str()],
            PER_IDENTITY,
            "its count follows its records"
        );
        assert_eq!(mine[0].attempt, PER_IDENTITY as u64 + 5, "newest first");
        assert_eq!(mine[0].error.as_deref(), Some("try 25"));
        assert_eq!((mine[0].step, &*mine[0].instance), ("inventory", "p1.test"));
        assert_eq!(mine[0].duration_seconds, 1.5);
        for n in 0..HISTORY {
            attempt(&board, &id(&format!("n{n}.example.net")), &Outcome::Done);
        }
        assert_eq!(
            board.history.lock().records.len(),
            HISTORY,
            "bounded in all"
        );
        assert_eq!(
            board.history.lock().per_identity.values().sum::<usize>(),
            HISTORY,
            "the per-node counts add up"
        );
        assert!(
            board.history_of(flappy.as_str()).is_empty(),
            "the oldest went first"
        );
        assert!(board.in_flight.lock().is_empty());
    }

    #[test]
    fn records_say_error_reason_or_message_by_outcome() {
        let board = Board::default();
        let n1 = id("n1.example.net");
        attempt(&board, &n1, &Outcome::Deferred("not \"yet\"".into()));
        attempt(&board, &n1, &Outcome::UpgradeWaiting("waits".into()));
        attempt(&board, &n1, &Outcome::Failed("x".repeat(5000)));
        let h = board.history_of("n1.example.net");
        let json: Vec<Value> = h
            .iter()
            .map(|r| serde_json::to_value(&**r).unwrap())
            .collect();
        assert_eq!(json[2]["outcome"], "deferred");
        assert_eq!(
            json[2]["helper_msg"], "not \"yet\"",
            "as the helper wrote it"
        );
        assert!(json[2].get("error").is_none());
        assert_eq!(json[1]["reason"], "waits");
        assert!(json[1].get("error").is_none());
        let error = json[0]["error"].as_str().unwrap();
        assert!(
            error.ends_with("…(5000 bytes)") && error.len() < 1100,
            "cut"
        );
    }
}
