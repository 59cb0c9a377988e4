//! The one rule by which two records of an identity become one: a join, so that
//! every instance that has seen the same records holds the same record, whatever
//! order they came in, however often, and whatever the instances' clocks say.
//!
//! A record is a decision and the sightings that belong to it:
//!
//! - **The decision** is ordered by its `clock`, a per-identity counter: an
//!   operator's decision on an instance is one more than the clock of the record
//!   that instance holds, so it comes after every decision that instance had seen
//!   for the identity (a Lamport clock). A record with a higher clock wins whole:
//!   a forget undoes every approval it saw, on every instance, including one that
//!   was down when it was made and comes back with the old approval (that approval
//!   has the lower clock). Wall-clock times are never compared for order, so a
//!   skewed clock cannot invert two decisions, and a replayed old message cannot
//!   undo a newer one (its clock is lower).
//! - **Two decisions with the same clock** were taken on instances that had not
//!   heard of each other's: the one that lets less through wins (denied, then
//!   forgotten, then approved: [`Decision`]'s order), then the later `at`, the
//!   instance, the operator and the reason, so that the tie is broken the same way
//!   everywhere.
//! - **The sightings** of the same decision join field by field: the first hold and
//!   the first sighting are the earliest (0 is none), the last sighting the latest,
//!   and the version and facts those of the latest sighting (ties by the values
//!   themselves). A hold is a sighting: it never changes a decision, so it never
//!   undoes one; a sighting made before a decision the merging instance already
//!   has is dropped with the older clock (a forget starts the identity's sightings
//!   afresh: it waits again when seen).
//!
//! The lexicographic product of a total order (the clock) and a join of its parts
//! is a join: commutative, associative, idempotent. `merge_tests.rs` checks it over
//! random histories of several instances.

use std::cmp::Ordering;

use crate::choria::peers::{ApprovalRecord, DecidedBy, Decision};

/// The decision's rank among decisions of the same clock: the stricter is greater.
fn tie_rank(decision: Decision) -> u8 {
    match decision {
        Decision::Pending => 0,
        Decision::Approved => 1,
        Decision::Forgotten => 2,
        Decision::Denied => 3,
    }
}

/// Compares the decisions of two records of the same clock (a total order over
/// everything the decision holds).
fn decision_order(a: &ApprovalRecord, b: &ApprovalRecord) -> Ordering {
    fn key(r: &ApprovalRecord) -> (u8, u64, &str, &str, &str, Option<&DecidedBy>) {
        let operator = r.operator.as_ref();
        (
            tie_rank(r.decision),
            r.at,
            &r.instance,
            &r.by,
            &r.reason,
            operator,
        )
    }
    key(a).cmp(&key(b))
}

/// The earlier of two times where 0 means none.
fn earliest(a: u64, b: u64) -> u64 {
    match (a, b) {
        (0, x) | (x, 0) => x,
        (a, b) => a.min(b),
    }
}

/// Joins `other` into `into`; true when `into` changed.
pub(crate) fn join(into: &mut ApprovalRecord, other: &ApprovalRecord) -> bool {
    match other.clock.cmp(&into.clock) {
        Ordering::Less => false,
        Ordering::Greater => {
            *into = other.clone();
            true
        }
        Ordering::Equal => {
            let before = (into.held_at, into.first_seen, into.last_seen);
            let mut changed = false;
            if decision_order(other, into) == Ordering::Greater {
                into.decision = other.decision;
                into.at = other.at;
                into.instance.clone_from(&other.instance);
                into.by.clone_from(&other.by);
                into.operator.clone_from(&other.operator);
                into.reason.clone_from(&other.reason);
                changed = true;
            }
            let newer_sighting = (other.last_seen, &other.version, &other.facts)
                > (into.last_seen, &into.version, &into.facts);
            if newer_sighting {
                into.version.clone_from(&other.version);
                into.facts.clone_from(&other.facts);
                changed = true;
            }
            into.held_at = earliest(into.held_at, other.held_at);
            into.first_seen = earliest(into.first_seen, other.first_seen);
            into.last_seen = into.last_seen.max(other.last_seen);
            changed || before != (into.held_at, into.first_seen, into.last_seen)
        }
    }
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
