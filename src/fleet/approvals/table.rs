//! The table of approvals: one record per identity, bounded in count (and so in
//! bytes: every string of a record is bounded). No I/O, no clock: the caller passes
//! the time. Records merge by the join of `merge.rs`; each is kept behind an `Arc`,
//! so that a copy of the whole table (for the file, or a peer) costs a reference
//! count per record under the table's lock, and its encoding is done outside it.
//!
//! Two bounds, each enforced by forgetting the oldest tenth at once when it is
//! passed (so that a flood costs one sort per tenth, not one scan per identity):
//! - pending records: `max_pending`; the ones seen longest ago go (an honest node
//!   is seen again by every discovery, a made-up name only while someone keeps
//!   answering for it). A pending record that carries a forgotten decision keeps
//!   the decision (its sightings go), so that the forget still outranks an older
//!   approval a peer may bring back;
//! - decided records (approved, denied, forgotten): [`MAX_DECIDED`]; the ones
//!   decided longest ago go. A forgotten decision only makes its node wait again:
//!   a denied node comes back as pending, never as approved.
//!
//! The bounds are the one place the table is not a pure join: an instance that
//! forgot a record for room takes it back from a peer that kept it. Every instance
//! of a site runs with the same bounds, so they forget the same records.

use std::collections::HashMap;
use std::sync::Arc;

use super::merge::join;
use crate::choria::identity::Identity;
use crate::choria::peers::{ApprovalRecord, Decision};

/// The most decided records kept.
pub(crate) const MAX_DECIDED: usize = 100_000;

/// What a merge or a decision changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Nothing: the table already knew as much or more.
    None,
    /// The record changed; the identity stood thus before (`None`: it had no
    /// record).
    Took(Option<Decision>),
}

/// A digest of what a record says that instances exchange: its identity, its
/// decision whole and its first hold (the other sightings are this instance's own
/// and only shown). md5, so that instances built apart agree; not a defence
/// against anyone (the messages' signatures are).
pub(crate) fn record_digest(r: &ApprovalRecord) -> u128 {
    use md5::{Digest, Md5};
    let mut h = Md5::new();
    for part in [
        r.identity.as_str().as_bytes(),
        r.decision.name().as_bytes(),
        r.instance.as_bytes(),
        r.by.as_bytes(),
        r.reason.as_bytes(),
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    for n in [r.clock, r.at, r.held_at] {
        h.update(n.to_le_bytes());
    }
    if let Some(o) = &r.operator {
        h.update(o.uid.to_le_bytes());
        h.update(o.pid.to_le_bytes());
        h.update(o.user.as_deref().unwrap_or("").as_bytes());
    }
    u128::from_le_bytes(h.finalize().into())
}

/// The records, with their counts.
#[derive(Debug)]
pub(crate) struct Table {
    records: HashMap<Identity, Arc<ApprovalRecord>>,
    /// The wrapping sum of [`record_digest`] over the records: two tables that hold
    /// the same records have the same sum, whatever order they were built in.
    digest: u128,
    /// Counts every change (for the sorted pages, `pages.rs`).
    generation: u64,
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
            digest: 0,
            generation: 0,
            pending: 0,
            max_pending: max_pending.max(1),
            max_decided: max_decided.max(1),
            evicted: 0,
        }
    }

    /// The record of `identity`.
    pub(crate) fn get(&self, identity: &Identity) -> Option<&ApprovalRecord> {
        self.records.get(identity).map(|r| &**r)
    }

    /// Where `identity` stands, if it has a record.
    pub(crate) fn standing(&self, identity: &Identity) -> Option<Decision> {
        self.records.get(identity).map(|r| r.standing())
    }

    /// Pending records now.
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }

    /// How many changes the table has seen.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// The table's digest and its number of records: equal on two instances when
    /// they hold the same decisions and holds.
    pub(crate) fn digest(&self) -> (u128, usize) {
        (self.digest, self.records.len())
    }

    /// Every record.
    pub(crate) fn records(&self) -> impl Iterator<Item = &ApprovalRecord> {
        self.records.values().map(|r| &**r)
    }

    /// Every record, shared: a reference count each (encode them after the lock).
    pub(crate) fn snapshot(&self) -> Vec<Arc<ApprovalRecord>> {
        self.records.values().cloned().collect()
    }

    /// How many pending records were forgotten for room since the last call.
    pub(crate) fn take_evicted(&mut self) -> u64 {
        std::mem::take(&mut self.evicted)
    }

    /// Notes that `identity` was seen at `now` (Unix seconds), if it is pending;
    /// true when it is.
    pub(crate) fn seen(&mut self, identity: &Identity, now: u64) -> bool {
        match self.records.get_mut(identity) {
            Some(r) if r.standing() == Decision::Pending => {
                if r.last_seen < now {
                    Arc::make_mut(r).last_seen = now;
                    self.generation += 1;
                }
                true
            }
            _ => false,
        }
    }

    /// An approved `identity` answered its inventory for the first time at `now`
    /// (Unix seconds): an approval given ahead of time whose node came. Its sightings start (so it
    /// no longer expires) and the record is returned, to be told to the others.
    pub(crate) fn came(&mut self, identity: &Identity, now: u64) -> Option<ApprovalRecord> {
        let r = self.records.get_mut(identity)?;
        if r.standing() != Decision::Approved || r.first_seen != 0 || now == 0 {
            return None;
        }
        let r = Arc::make_mut(r);
        (r.first_seen, r.last_seen) = (now, now);
        self.generation += 1;
        Some(r.clone())
    }

    /// Records a hold of `identity` at `now_ns` (Unix nanoseconds) with what its
    /// inventory said: a sighting of its current decision, which it never changes.
    pub(crate) fn hold(
        &mut self,
        identity: &Identity,
        now_ns: u64,
        version: String,
        facts: Vec<(String, String)>,
    ) -> Change {
        let mut sighting = match self.records.get(identity) {
            Some(r) => (**r).clone(),
            None => ApprovalRecord::held(identity.clone(), now_ns),
        };
        sighting.held_at = now_ns.max(1);
        sighting.first_seen = now_ns / 1_000_000_000;
        sighting.last_seen = sighting.first_seen;
        sighting.version = version;
        sighting.facts = facts;
        self.merge(sighting)
    }

    /// Joins `record` into the table (`merge.rs`), keeping the bounds.
    pub(crate) fn merge(&mut self, record: ApprovalRecord) -> Change {
        let Some(old) = self.records.get_mut(&record.identity) else {
            let pending = record.standing() == Decision::Pending;
            self.digest = self.digest.wrapping_add(record_digest(&record));
            self.records
                .insert(record.identity.clone(), Arc::new(record));
            self.counted(None, pending);
            return Change::Took(None);
        };
        if record.clock < old.clock {
            return Change::None; // the common refusal, without copying a shared record
        }
        let (before, digest_before) = (old.standing(), record_digest(old));
        if !join(Arc::make_mut(old), &record) {
            return Change::None;
        }
        self.digest = self
            .digest
            .wrapping_sub(digest_before)
            .wrapping_add(record_digest(old));
        let pending = old.standing() == Decision::Pending;
        self.counted(Some(before == Decision::Pending), pending);
        Change::Took(Some(before))
    }

    /// Counts a record that was pending (`None`: new) and is now, and keeps the
    /// bounds.
    fn counted(&mut self, was_pending: Option<bool>, pending: bool) {
        self.generation += 1;
        if was_pending == Some(true) {
            self.pending -= 1;
        }
        if pending {
            self.pending += 1;
            if self.pending > self.max_pending {
                self.evict_pending();
            }
        }
        if self.records.len() - self.pending > self.max_decided {
            self.evict_decided();
        }
    }

    /// Forgets the tenth of the pending records seen longest ago (a record with a
    /// decision keeps it, without its sightings).
    fn evict_pending(&mut self) {
        let mut oldest: Vec<(u64, u64, Identity)> = self
            .records
            .values()
            .filter(|r| r.standing() == Decision::Pending)
            .map(|r| (r.last_seen, r.held_at, r.identity.clone()))
            .collect();
        oldest.sort_unstable();
        let n = (self.max_pending / 10).max(1).min(oldest.len());
        for (_, _, identity) in oldest.into_iter().take(n) {
            let Some(record) = self.records.get_mut(&identity) else {
                continue;
            };
            self.digest = self.digest.wrapping_sub(record_digest(record));
            if record.clock == 0 {
                self.records.remove(&identity);
            } else {
                let r = Arc::make_mut(record);
                (r.held_at, r.first_seen, r.last_seen) = (0, 0, 0);
                r.version.clear();
                r.facts.clear();
                self.digest = self.digest.wrapping_add(record_digest(r));
            }
        }
        self.pending -= n;
        self.evicted += n as u64;
    }

    /// Forgets the tenth of the decided records decided longest ago.
    fn evict_decided(&mut self) {
        let mut oldest: Vec<(u64, Identity)> = self
            .records
            .values()
            .filter(|r| r.standing() != Decision::Pending)
            .map(|r| (r.at, r.identity.clone()))
            .collect();
        oldest.sort_unstable();
        let n = (self.max_decided / 10).max(1).min(oldest.len());
        for (_, identity) in oldest.into_iter().take(n) {
            if let Some(r) = self.records.remove(&identity) {
                self.digest = self.digest.wrapping_sub(record_digest(&r));
            }
        }
    }

    /// The pending identities held at or before `as_of` (Unix nanoseconds).
    pub(crate) fn pending_as_of(&self, as_of: u64) -> Vec<Identity> {
        self.records()
            .filter(|r| r.standing() == Decision::Pending && r.held_at <= as_of)
            .map(|r| r.identity.clone())
            .collect()
    }

    /// The first sighting of the pending record waiting longest (Unix seconds).
    pub(crate) fn oldest_pending(&self) -> Option<u64> {
        self.records()
            .filter(|r| r.standing() == Decision::Pending && r.first_seen > 0)
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

    /// A record of `name`: held at `seen` (seconds) when `decision` is pending,
    /// otherwise decided with `clock` at `seen`, and not seen since.
    fn record(name: &str, decision: Decision, clock: u64, seen: u64) -> ApprovalRecord {
        let mut r = ApprovalRecord::held(id(name), seen * 1_000_000_000);
        if decision != Decision::Pending {
            (r.clock, r.decision, r.at) = (clock, decision, seen);
            (r.held_at, r.first_seen, r.last_seen) = (0, 0, 0);
            r.instance = "p1".into();
        }
        r
    }

    #[test]
    fn the_higher_clock_wins_and_ties_go_to_the_stricter_decision() {
        let mut t = Table::new(10);
        assert_eq!(
            t.merge(record("n1", Decision::Pending, 0, 1)),
            Change::Took(None)
        );
        assert_eq!(t.pending(), 1);
        assert_eq!(
            t.merge(record("n1", Decision::Approved, 1, 5)),
            Change::Took(Some(Decision::Pending))
        );
        assert_eq!(t.pending(), 0);
        // A forget of a lower clock is older, whatever its time.
        assert_eq!(
            t.merge(record("n1", Decision::Forgotten, 1, 4)),
            Change::Took(Some(Decision::Approved)),
            "a tie: forgotten is stricter than approved"
        );
        assert_eq!(
            t.merge(record("n1", Decision::Approved, 1, 50)),
            Change::None
        );
        assert_eq!(
            t.merge(record("n1", Decision::Denied, 1, 2)),
            Change::Took(Some(Decision::Forgotten))
        );
        assert_eq!(
            t.merge(record("n1", Decision::Approved, 1, 5)),
            Change::None
        );
        assert_eq!(t.standing(&id("n1")), Some(Decision::Denied));
        assert_eq!(
            t.merge(record("n1", Decision::Approved, 2, 1)),
            Change::Took(Some(Decision::Denied)),
            "a later decision, though its clock on the wall is earlier"
        );
        // Any order of the same records ends in the same record.
        let mut other = Table::new(10);
        for (d, clock, at) in [
            (Decision::Approved, 2, 1),
            (Decision::Denied, 1, 2),
            (Decision::Pending, 0, 1),
            (Decision::Approved, 1, 5),
            (Decision::Forgotten, 1, 4),
        ] {
            other.merge(record("n1", d, clock, at));
        }
        assert_eq!(other.get(&id("n1")), t.get(&id("n1")));
    }

    #[test]
    fn a_hold_never_changes_a_decision_and_a_forget_starts_the_sightings_afresh() {
        let mut t = Table::new(10);
        t.merge(record("n1", Decision::Approved, 1, 5));
        // A hold made before the approval reached the holding instance.
        assert_eq!(
            t.merge(record("n1", Decision::Pending, 0, 50)),
            Change::None
        );
        assert_eq!(t.standing(&id("n1")), Some(Decision::Approved));
        // A hold of the same decision is a sighting of it, never a change of it.
        t.hold(&id("n1"), 60_000_000_000, "0.29.4".into(), Vec::new());
        assert_eq!(t.standing(&id("n1")), Some(Decision::Approved));
        // Forgotten: the sightings go with the old decision; the node waits again
        // once held.
        let mut forget = record("n1", Decision::Forgotten, 2, 70);
        forget.held_at = 0;
        assert_eq!(t.merge(forget), Change::Took(Some(Decision::Approved)));
        assert_eq!(t.standing(&id("n1")), Some(Decision::Forgotten));
        assert_eq!(t.pending(), 0);
        assert_eq!(
            t.hold(&id("n1"), 80_000_000_000, String::new(), Vec::new()),
            Change::Took(Some(Decision::Forgotten))
        );
        assert_eq!(t.standing(&id("n1")), Some(Decision::Pending));
        assert_eq!(t.pending(), 1);
        assert_eq!(t.get(&id("n1")).unwrap().clock, 2, "the forget stays");
    }

    #[test]
    fn two_sightings_of_one_decision_are_one_with_the_first_and_last() {
        let mut t = Table::new(10);
        t.merge(record("n1", Decision::Pending, 0, 10));
        let mut later = record("n1", Decision::Pending, 0, 20);
        later.facts = vec![("os.name".into(), "AlmaLinux".into())];
        assert_eq!(t.merge(later), Change::Took(Some(Decision::Pending)));
        let r = t.get(&id("n1")).unwrap();
        assert_eq!(
            (r.first_seen, r.last_seen, r.held_at),
            (10, 20, 10_000_000_000)
        );
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
            t.merge(record(&format!("n{n}"), Decision::Pending, 0, n + 1));
        }
        assert!(t.seen(&id("n0"), 1_000), "n0 seen again: kept");
        t.merge(record("late", Decision::Pending, 0, 500));
        assert_eq!(t.pending(), 91);
        assert_eq!(t.take_evicted(), 10);
        assert!(t.get(&id("n0")).is_some());
        assert!(t.get(&id("n1")).is_none() && t.get(&id("n10")).is_none());
        assert!(t.get(&id("n11")).is_some() && t.get(&id("late")).is_some());
        for n in 0..51u64 {
            t.merge(record(&format!("d{n}"), Decision::Denied, 1, 1_000 + n));
        }
        assert_eq!(t.records().count() - t.pending(), 46);
        assert!(t.get(&id("d0")).is_none() && t.get(&id("d50")).is_some());
    }

    #[test]
    fn an_evicted_pending_record_keeps_its_forget() {
        let mut t = Table::with_bounds(10, 50);
        t.merge(record("f", Decision::Forgotten, 3, 1));
        t.hold(&id("f"), 1_000_000_000, String::new(), Vec::new());
        for n in 0..10u64 {
            t.merge(record(&format!("n{n}"), Decision::Pending, 0, n + 2));
        }
        assert_eq!(t.take_evicted(), 1);
        let f = t.get(&id("f")).unwrap();
        assert_eq!((f.clock, f.standing()), (3, Decision::Forgotten));
        assert_eq!(
            t.merge(record("f", Decision::Approved, 2, 9)),
            Change::None,
            "an older approval a peer kept does not come back"
        );
    }

    #[test]
    fn approve_all_takes_only_what_was_held_by_the_count() {
        let mut t = Table::new(10);
        for (n, at) in [("c", 3), ("a", 1), ("b", 2)] {
            t.merge(record(n, Decision::Pending, 0, at));
        }
        let mut as_of = t.pending_as_of(2_000_000_000);
        as_of.sort();
        assert_eq!(as_of, [id("a"), id("b")]);
        assert_eq!(t.oldest_pending(), Some(1));
    }
}
