//! The table of approvals: one record per identity, bounded in count (and so in
//! bytes: every string of a record is bounded). No I/O, no clock: the caller passes
//! the time.
//!
//! Two bounds, each enforced by forgetting the oldest tenth at once when it is
//! passed (so that a flood costs one sort per tenth, not one scan per identity):
//! - pending records: `max_pending`; the ones seen longest ago go (an honest node
//!   is seen again by every discovery, a made-up name only while someone keeps
//!   answering for it);
//! - decided records (approved, denied, forgotten): [`MAX_DECIDED`]; the ones
//!   decided longest ago go. A forgotten decision only makes its node wait again:
//!   a denied node comes back as pending, never as approved.

use std::collections::HashMap;

use crate::choria::identity::Identity;
use crate::choria::peers::{ApprovalRecord, Decision};

/// The most decided records kept.
pub(crate) const MAX_DECIDED: usize = 100_000;

/// What a merge or a decision changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Nothing: the table already knew as much or more.
    None,
    /// The record was taken; the identity's decision was this before (`None`: it
    /// had no record).
    Took(Option<Decision>),
}

/// The records, with their counts.
#[derive(Debug)]
pub(crate) struct Table {
    records: HashMap<Identity, ApprovalRecord>,
    pending: usize,
    max_pending: usize,
    max_decided: usize,
    /// Pending records forgotten because there were too many, since the last call
    /// of [`Table::take_evicted`].
    evicted: u64,
}

impl Table {
    /// An empty table keeping at most `max_pending` pending records.
    pub(crate) fn new(max_pending: usize) -> Table {
        Table::with_bounds(max_pending, MAX_DECIDED)
    }

    /// An empty table with both bounds given (tests use small ones).
    pub(crate) fn with_bounds(max_pending: usize, max_decided: usize) -> Table {
        Table {
            records: HashMap::new(),
            pending: 0,
            max_pending: max_pending.max(1),
            max_decided: max_decided.max(1),
            evicted: 0,
        }
    }

    /// The record of `identity`.
    pub(crate) fn get(&self, identity: &Identity) -> Option<&ApprovalRecord> {
        self.records.get(identity)
    }

    /// Pending records now.
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }

    /// Every record.
    pub(crate) fn records(&self) -> impl Iterator<Item = &ApprovalRecord> {
        self.records.values()
    }

    /// How many pending records were forgotten for room since the last call.
    pub(crate) fn take_evicted(&mut self) -> u64 {
        std::mem::take(&mut self.evicted)
    }

    /// Notes that `identity` was seen at `now` (Unix seconds), if it is pending;
    /// true when it is.
    pub(crate) fn seen(&mut self, identity: &Identity, now: u64) -> bool {
        match self.records.get_mut(identity) {
            Some(r) if r.decision == Decision::Pending => {
                r.last_seen = r.last_seen.max(now);
                true
            }
            _ => false,
        }
    }

    /// Takes `record` if it is newer than what the table has (a later `at`, or the
    /// same `at` and a stricter decision), except that an approval or a denial and a
    /// hold never compare times: the decision wins. Two pending records of one
    /// identity are one: the first sighting and the last are kept, the newer facts
    /// win.
    pub(crate) fn merge(&mut self, record: ApprovalRecord) -> Change {
        let before = match self.records.get_mut(&record.identity) {
            Some(old)
                if old.decision == Decision::Pending && record.decision == Decision::Pending =>
            {
                let first = match (old.first_seen, record.first_seen) {
                    (0, f) | (f, 0) => f,
                    (a, b) => a.min(b),
                };
                let last = old.last_seen.max(record.last_seen);
                let at = old.at.min(record.at);
                if record.last_seen > old.last_seen {
                    old.version = record.version;
                    old.facts = record.facts;
                }
                let changed = (first, last, at) != (old.first_seen, old.last_seen, old.at);
                (old.first_seen, old.last_seen, old.at) = (first, last, at);
                return if changed {
                    Change::Took(Some(Decision::Pending))
                } else {
                    Change::None
                };
            }
            // An operator's approval or denial is never undone by a hold, whatever
            // the times say: the holding instance's clock may run ahead, or it held
            // the node before the decision reached it. (A forgotten decision is
            // undone by a later hold: both mean "waits".)
            Some(old) if record.decision == Decision::Pending && old.decision.decided() => {
                return Change::None
            }
            Some(old) if old.decision == Decision::Pending && record.decision.decided() => {
                Some(old.decision)
            }
            Some(old) if (old.at, old.decision) >= (record.at, record.decision) => {
                return Change::None
            }
            Some(old) => Some(old.decision),
            None => None,
        };
        self.put(record);
        Change::Took(before)
    }

    /// Puts `record` in, replacing the identity's, and keeps the bounds.
    fn put(&mut self, record: ApprovalRecord) {
        let pending = record.decision == Decision::Pending;
        if let Some(old) = self.records.insert(record.identity.clone(), record) {
            if old.decision == Decision::Pending {
                self.pending -= 1;
            }
        }
        if pending {
            self.pending += 1;
            if self.pending > self.max_pending {
                self.evict_pending();
            }
        } else if self.records.len() - self.pending > self.max_decided {
            self.evict_decided();
        }
    }

    /// Forgets the tenth of the pending records seen longest ago.
    fn evict_pending(&mut self) {
        let mut oldest: Vec<(u64, u64, Identity)> = self
            .records
            .values()
            .filter(|r| r.decision == Decision::Pending)
            .map(|r| (r.last_seen, r.at, r.identity.clone()))
            .collect();
        oldest.sort_unstable();
        let n = (self.max_pending / 10).max(1).min(oldest.len());
        for (_, _, identity) in oldest.into_iter().take(n) {
            self.records.remove(&identity);
        }
        self.pending -= n;
        self.evicted += n as u64;
    }

    /// Forgets the tenth of the decided records decided longest ago.
    fn evict_decided(&mut self) {
        let mut oldest: Vec<(u64, Identity)> = self
            .records
            .values()
            .filter(|r| r.decision != Decision::Pending)
            .map(|r| (r.at, r.identity.clone()))
            .collect();
        oldest.sort_unstable();
        let n = (self.max_decided / 10).max(1).min(oldest.len());
        for (_, identity) in oldest.into_iter().take(n) {
            self.records.remove(&identity);
        }
    }

    /// The pending records, longest waiting first (by first sighting, then
    /// identity): `limit` of them from `offset`.
    pub(crate) fn pending_page(&self, offset: usize, limit: usize) -> Vec<ApprovalRecord> {
        if limit == 0 {
            return Vec::new(); // a count alone: [`Table::pending`], no sort
        }
        let mut all: Vec<&ApprovalRecord> = self
            .records
            .values()
            .filter(|r| r.decision == Decision::Pending)
            .collect();
        all.sort_unstable_by(|a, b| (a.first_seen, &a.identity).cmp(&(b.first_seen, &b.identity)));
        all.into_iter().skip(offset).take(limit).cloned().collect()
    }

    /// The records of `decision`, most recent decision first: `limit` from `offset`,
    /// and how many there are.
    pub(crate) fn decided_page(
        &self,
        decision: Decision,
        offset: usize,
        limit: usize,
    ) -> (Vec<ApprovalRecord>, usize) {
        if limit == 0 {
            let total = self
                .records
                .values()
                .filter(|r| r.decision == decision)
                .count();
            return (Vec::new(), total);
        }
        let mut all: Vec<&ApprovalRecord> = self
            .records
            .values()
            .filter(|r| r.decision == decision)
            .collect();
        let total = all.len();
        all.sort_unstable_by(|a, b| (b.at, &a.identity).cmp(&(a.at, &b.identity)));
        let page = all.into_iter().skip(offset).take(limit).cloned().collect();
        (page, total)
    }

    /// The pending identities held at or before `as_of` (Unix nanoseconds).
    pub(crate) fn pending_as_of(&self, as_of: u64) -> Vec<Identity> {
        self.records
            .values()
            .filter(|r| r.decision == Decision::Pending && r.at <= as_of)
            .map(|r| r.identity.clone())
            .collect()
    }

    /// The first sighting of the pending record waiting longest (Unix seconds).
    pub(crate) fn oldest_pending(&self) -> Option<u64> {
        self.records
            .values()
            .filter(|r| r.decision == Decision::Pending && r.first_seen > 0)
            .map(|r| r.first_seen)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Identity {
        Identity::parse(s).unwrap()
    }

    fn record(name: &str, decision: Decision, at: u64) -> ApprovalRecord {
        ApprovalRecord {
            identity: id(name),
            decision,
            at,
            by: String::new(),
            reason: String::new(),
            first_seen: at,
            last_seen: at,
            version: String::new(),
            facts: Vec::new(),
        }
    }

    #[test]
    fn the_later_record_wins_and_ties_go_to_the_stricter_decision() {
        let mut t = Table::new(10);
        assert_eq!(
            t.merge(record("n1", Decision::Pending, 1)),
            Change::Took(None)
        );
        assert_eq!(t.pending(), 1);
        assert_eq!(
            t.merge(record("n1", Decision::Approved, 5)),
            Change::Took(Some(Decision::Pending))
        );
        assert_eq!(t.pending(), 0);
        assert_eq!(t.merge(record("n1", Decision::Forgotten, 4)), Change::None);
        assert_eq!(t.merge(record("n1", Decision::Approved, 5)), Change::None);
        assert_eq!(
            t.merge(record("n1", Decision::Denied, 5)),
            Change::Took(Some(Decision::Approved))
        );
        assert_eq!(t.merge(record("n1", Decision::Approved, 5)), Change::None);
        assert_eq!(t.get(&id("n1")).unwrap().decision, Decision::Denied);
        // Any order of the same records ends in the same table.
        let mut other = Table::new(10);
        for (d, at) in [
            (Decision::Denied, 5),
            (Decision::Pending, 1),
            (Decision::Approved, 5),
            (Decision::Forgotten, 4),
        ] {
            other.merge(record("n1", d, at));
        }
        assert_eq!(other.get(&id("n1")), t.get(&id("n1")));
    }

    #[test]
    fn a_decision_beats_a_hold_whatever_the_clocks_say() {
        let mut t = Table::new(10);
        // The holding instance's clock runs ahead of the deciding one's.
        t.merge(record("n1", Decision::Approved, 5));
        assert_eq!(t.merge(record("n1", Decision::Pending, 50)), Change::None);
        assert_eq!(t.get(&id("n1")).unwrap().decision, Decision::Approved);
        let mut other = Table::new(10);
        other.merge(record("n1", Decision::Pending, 50));
        assert_eq!(
            other.merge(record("n1", Decision::Denied, 5)),
            Change::Took(Some(Decision::Pending))
        );
        assert_eq!(other.pending(), 0);
        // A later hold does undo a forgotten decision.
        other.merge(record("n1", Decision::Forgotten, 60));
        assert_eq!(
            other.merge(record("n1", Decision::Pending, 70)),
            Change::Took(Some(Decision::Forgotten))
        );
    }

    #[test]
    fn two_pending_records_are_one_with_the_first_and_last_sightings() {
        let mut t = Table::new(10);
        t.merge(record("n1", Decision::Pending, 10));
        let mut later = record("n1", Decision::Pending, 20);
        later.facts = vec![("os.name".into(), "AlmaLinux".into())];
        assert_eq!(t.merge(later), Change::Took(Some(Decision::Pending)));
        let r = t.get(&id("n1")).unwrap();
        assert_eq!((r.first_seen, r.last_seen, r.at), (10, 20, 10));
        assert_eq!(r.facts.len(), 1, "the facts of the last sighting");
        assert_eq!(t.pending(), 1);
        assert!(t.seen(&id("n1"), 30));
        assert_eq!(t.get(&id("n1")).unwrap().last_seen, 30);
        assert!(!t.seen(&id("n2"), 30));
    }

    #[test]
    fn past_its_bound_the_oldest_tenth_of_pending_goes_and_decisions_are_bounded_too() {
        let mut t = Table::with_bounds(100, 50);
        for n in 0..100u64 {
            t.merge(record(&format!("n{n}"), Decision::Pending, n + 1));
        }
        assert!(t.seen(&id("n0"), 1_000), "n0 seen again: kept");
        t.merge(record("late", Decision::Pending, 500));
        assert_eq!(t.pending(), 91);
        assert_eq!(t.take_evicted(), 10);
        assert!(t.get(&id("n0")).is_some());
        assert!(t.get(&id("n1")).is_none() && t.get(&id("n10")).is_none());
        assert!(t.get(&id("n11")).is_some() && t.get(&id("late")).is_some());
        for n in 0..51u64 {
            t.merge(record(&format!("d{n}"), Decision::Denied, 1_000 + n));
        }
        assert_eq!(t.records().count() - t.pending(), 46);
        assert!(t.get(&id("d0")).is_none() && t.get(&id("d50")).is_some());
    }

    #[test]
    fn pages_are_ordered_and_approve_all_takes_only_what_was_shown() {
        let mut t = Table::new(10);
        for (n, at) in [("c", 3), ("a", 1), ("b", 2)] {
            t.merge(record(n, Decision::Pending, at));
        }
        let names = |v: Vec<ApprovalRecord>| {
            v.into_iter()
                .map(|r| r.identity.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(t.pending_page(0, 10)), ["a", "b", "c"]);
        assert_eq!(names(t.pending_page(1, 1)), ["b"]);
        let mut as_of = t.pending_as_of(2);
        as_of.sort();
        assert_eq!(as_of, [id("a"), id("b")]);
        assert_eq!(t.oldest_pending(), Some(1));
        t.merge(record("x", Decision::Denied, 7));
        t.merge(record("y", Decision::Denied, 9));
        let (page, total) = t.decided_page(Decision::Denied, 0, 1);
        assert_eq!((names(page), total), (vec!["y".to_string()], 2));
    }
}
