//! One byte budget for what the network hands the daemon and it holds on to: the
//! replies routed to attempts and not read yet, and the inventories attempts keep
//! until their helper runs. Imports nothing of the crate.
//!
//! A [`Charge`] holds its bytes against the budget until it is dropped. Who may
//! take what is the caller's rule, through the ceiling it asks under: a request's
//! first reply may fill the budget, a further reply to it (a duplicate, or a
//! forger's) only half of it, so a flood of duplicates can never keep a node's own
//! first reply out; an inventory already decoded is charged whatever the budget
//! holds (its bytes are in memory already), so that while many are kept, new replies
//! give way.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// The budget: a limit and what is held now (also shown by a gauge).
#[derive(Debug)]
pub(crate) struct ByteBudget {
    limit: u64,
    held: AtomicI64,
    shown: prometheus::IntGauge,
}

impl ByteBudget {
    /// A budget of `limit` bytes, held bytes shown in `shown`.
    pub(crate) fn new(limit: u64, shown: prometheus::IntGauge) -> Arc<ByteBudget> {
        shown.set(0);
        Arc::new(ByteBudget {
            limit,
            held: AtomicI64::new(0),
            shown,
        })
    }

    fn add(&self, bytes: i64) -> i64 {
        let now = self.held.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.shown.set(now);
        now
    }

    /// The whole budget.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Acquire).max(0) as u64
    }

    /// Holds `bytes` if what is held stays within `ceiling` (at most the limit);
    /// `None` when it would not.
    pub(crate) fn try_charge(self: &Arc<Self>, bytes: usize, ceiling: u64) -> Option<Charge> {
        let bytes = i64::try_from(bytes).ok()?;
        let ceiling = i64::try_from(ceiling.min(self.limit)).unwrap_or(i64::MAX);
        // Added first, taken back if over: of concurrent charges, each sees all
        // those added before it, so together they never pass the ceiling.
        if self.add(bytes) > ceiling && bytes > 0 {
            self.add(-bytes);
            return None;
        }
        Some(Charge {
            budget: Arc::clone(self),
            bytes,
        })
    }

    /// Holds `bytes` whatever is held already (bytes that are in memory anyway).
    pub(crate) fn charge(self: &Arc<Self>, bytes: usize) -> Charge {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        self.add(bytes);
        Charge {
            budget: Arc::clone(self),
            bytes,
        }
    }
}

/// Bytes held against a [`ByteBudget`]; given back when dropped.
#[derive(Debug)]
pub(crate) struct Charge {
    budget: Arc<ByteBudget>,
    bytes: i64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.add(-self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(limit: u64) -> Arc<ByteBudget> {
        ByteBudget::new(limit, prometheus::IntGauge::new("held", "held").unwrap())
    }

    #[test]
    fn charges_stay_under_their_ceiling_and_are_given_back_when_dropped() {
        let b = budget(100);
        let first = b.try_charge(60, b.limit()).expect("fits");
        assert!(
            b.try_charge(30, b.limit() / 2).is_none(),
            "a duplicate's half is taken"
        );
        let second = b
            .try_charge(40, b.limit())
            .expect("the rest, for a first reply");
        assert!(b.try_charge(1, b.limit()).is_none(), "full");
        assert_eq!(b.held(), 100);
        drop(first);
        assert_eq!(b.held(), 40);
        // Kept inventories are charged whatever is held: they are in memory anyway.
        let kept = b.charge(500);
        assert_eq!(b.held(), 540);
        assert!(
            b.try_charge(1, b.limit()).is_none(),
            "over: nothing new comes in"
        );
        drop((second, kept));
        assert_eq!(b.held(), 0);
        assert!(b.try_charge(0, 0).is_some(), "nothing costs nothing");
    }

    #[test]
    fn concurrent_charges_never_pass_the_ceiling_together() {
        use std::sync::atomic::AtomicUsize;
        let b = budget(1000);
        // The bytes of every charge that succeeded and is not dropped yet.
        let total = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                let (b, total) = (&b, &total);
                s.spawn(move || {
                    let mut held = Vec::new();
                    for _ in 0..10_000 {
                        if let Some(c) = b.try_charge(7, 1000) {
                            held.push(c);
                            let now = total.fetch_add(7, Ordering::AcqRel) + 7;
                            assert!(now <= 1000, "{now}");
                        }
                        if held.len() > 10 {
                            total.fetch_sub(7 * held.len(), Ordering::AcqRel);
                            held.clear();
                        }
                    }
                    total.fetch_sub(7 * held.len(), Ordering::AcqRel);
                });
            }
        });
        assert_eq!(b.held(), 0);
    }
}
