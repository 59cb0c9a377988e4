//! `upgrades_max_in_flight`: how many nodes may be upgrading at once, so that a wrong
//! `upgrade` answer from the helper cannot take a whole site down at once.
//!
//! A node takes a slot just before its `release_update` and holds it while it is
//! away upgrading: the slot is given back when a later inventory of the node reports
//! another version than the one it was upgraded from (it came back upgraded), when
//! the `release_update` failed, or after [`SLOT_TIMEOUT`] (a node that never came
//! back, or came back on its old version). A node found again before it went down
//! still reports its old version and keeps its slot, so the cap holds even then. A
//! node that finds no free slot ends its attempt as `upgrade_waiting` (not an error)
//! and waits its turn: the waiting nodes are kept first come, first served (at most
//! [`WAITING_MAX`]), and each slot given back wakes the next one
//! ([`UpgradeSlots::take_woken`]), which the fleet queues again at once; a node is
//! also tried again whenever it is found.
//!
//! The slots are those of one provisioner instance: its *part* of the cap. Alone (or
//! with leader election) the part is the whole cap. With `active_active` the cap is
//! a site's, and the membership (`fleet::membership`) splits it among the live
//! instances with [`split`] and sets each instance's part with
//! [`UpgradeSlots::set_part`] whenever the live set changes: the parts add up to the
//! cap, except that every live instance gets at least one slot, so with fewer slots
//! than instances the site may have `max(cap, instances)` nodes upgrading at once. A
//! part that grows wakes as many waiting nodes as it frees slots; a part that shrinks
//! below the slots held revokes nothing (those nodes are already away): new nodes
//! wait until fewer than the part are held. So just after the live set changed, the
//! slots held under the old split still count only with the instance that took them
//! (and not at all once that instance is gone), and the site may briefly have more
//! nodes away than the cap, until they come back or [`SLOT_TIMEOUT`] passes.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prometheus::IntGauge;

use crate::choria::identity::Identity;

/// How long a node that never comes back holds its slot.
pub(crate) const SLOT_TIMEOUT: Duration = Duration::from_secs(600);

/// Most nodes remembered as waiting for a slot (the work queue's capacity); beyond
/// it a node is tried again only when it is found again.
pub(crate) const WAITING_MAX: usize = 50_000;

/// The part of a cap of `max` slots that the instance at `rank` (0-based) in the
/// sorted list of `live` instances gets: `max / live`, one more for the first
/// `max % live` ranks, and at least 1, so that no live instance's nodes wait forever
/// when `max < live` (the site-wide total is then `live`). Every instance sorts the
/// same live set the same way, so the parts add up to `max` when `max >= live`.
/// With no live instance (never asked by the membership) the whole cap.
pub(crate) fn split(max: usize, live: usize, rank: usize) -> usize {
    if live == 0 {
        return max;
    }
    (max / live + usize::from(rank < max % live)).max(1)
}

/// The slots of one provisioner instance.
#[derive(Debug)]
pub(crate) struct UpgradeSlots {
    max: Option<usize>,
    timeout: Duration,
    held: Mutex<Holders>,
    queue: Mutex<Waiting>,
    /// `choria_provisioner_upgrade_slots`: the part, 0 when unlimited.
    gauge: Option<IntGauge>,
}

/// The nodes holding a slot, and how many slots this instance has now. Locked
/// before [`Waiting`] whenever both are.
#[derive(Debug)]
struct Holders {
    part: usize,
    nodes: HashMap<Identity, Held>,
}

impl Holders {
    /// How many slots are free now (none while more than the part are held).
    fn free(&self) -> usize {
        self.part.saturating_sub(self.nodes.len())
    }

    /// Gives back the slots held longer than `timeout`.
    fn expire(&mut self, now: Instant, timeout: Duration) {
        self.nodes
            .retain(|_, h| now.duration_since(h.since) < timeout);
    }
}

/// The nodes waiting for a slot, first come first served, and those woken.
#[derive(Debug, Default)]
struct Waiting {
    order: VecDeque<Identity>,
    members: HashSet<Identity>,
    woken: Vec<Identity>,
}

impl Waiting {
    /// Wakes up to `n` waiting nodes.
    fn wake(&mut self, n: usize) {
        for _ in 0..n {
            let Some(identity) = self.order.pop_front() else {
                return;
            };
            self.members.remove(&identity);
            self.woken.push(identity);
        }
    }
}

#[derive(Debug, Clone)]
struct Held {
    since: Instant,
    from: String,
}

impl UpgradeSlots {
    /// `max` slots (`None`: unlimited, as Go), each held at most `timeout`; the part
    /// starts as the whole cap.
    pub(crate) fn new(max: Option<usize>, timeout: Duration) -> UpgradeSlots {
        UpgradeSlots {
            max,
            timeout,
            held: Mutex::new(Holders {
                part: max.unwrap_or(0),
                nodes: HashMap::new(),
            }),
            queue: Mutex::new(Waiting::default()),
            gauge: None,
        }
    }

    /// The same, showing the part in `gauge` (0 when unlimited).
    pub(crate) fn with_gauge(
        max: Option<usize>,
        timeout: Duration,
        gauge: IntGauge,
    ) -> UpgradeSlots {
        gauge.set(gauge_value(max.unwrap_or(0)));
        UpgradeSlots {
            gauge: Some(gauge),
            ..UpgradeSlots::new(max, timeout)
        }
    }

    /// The configured cap (`upgrades_max_in_flight`); `None` when unlimited.
    pub(crate) fn cap(&self) -> Option<usize> {
        self.max
    }

    /// How many slots this instance has now; `None` when unlimited.
    pub(crate) fn part(&self) -> Option<usize> {
        self.max.map(|_| self.held.lock().part)
    }

    /// Sets how many slots this instance has (its part of the cap, see [`split`]);
    /// nothing when unlimited. A larger part wakes as many waiting nodes as it frees
    /// slots; a smaller one takes no slot back: new nodes wait until fewer than the
    /// part are held.
    pub(crate) fn set_part(&self, part: usize) {
        if self.max.is_none() {
            return;
        }
        let mut held = self.held.lock();
        let before = held.free();
        held.expire(Instant::now(), self.timeout);
        held.part = part;
        let after = held.free();
        if let Some(g) = &self.gauge {
            g.set(gauge_value(part));
        }
        drop(held);
        self.wake(after.saturating_sub(before));
    }

    /// Takes a slot for `identity`, upgrading from version `from`; false when all
    /// of this instance's part are held by other nodes.
    pub(crate) fn try_take(&self, identity: &Identity, from: &str) -> bool {
        if self.max.is_none() {
            return true;
        }
        let mut held = self.held.lock();
        let now = Instant::now();
        let before = held.free();
        held.expire(now, self.timeout);
        self.wake(held.free().saturating_sub(before));
        if held.nodes.contains_key(identity) || held.free() > 0 {
            held.nodes.insert(
                identity.clone(),
                Held {
                    since: now,
                    from: from.to_string(),
                },
            );
            true
        } else {
            let mut queue = self.queue.lock();
            if queue.members.len() < WAITING_MAX && queue.members.insert(identity.clone()) {
                queue.order.push_back(identity.clone());
            }
            false
        }
    }

    /// `n` slots came free (given back, or a larger part): wake as many waiting
    /// nodes.
    fn wake(&self, n: usize) {
        if n > 0 {
            self.queue.lock().wake(n);
        }
    }

    /// Wakes `n` more waiting nodes in place of woken ones this instance no longer
    /// provisions (active-active: another instance owns them now), so a turn is not
    /// lost with them.
    pub(crate) fn pass_on(&self, n: usize) {
        self.wake(n);
    }

    /// The waiting nodes woken by slots given back since the last call, to be
    /// queued again.
    pub(crate) fn take_woken(&self) -> Vec<Identity> {
        std::mem::take(&mut self.queue.lock().woken)
    }

    /// The node reported `version` in its inventory: its slot is given back if it
    /// holds one and now runs another version than it was upgraded from.
    pub(crate) fn seen(&self, identity: &Identity, version: &str) {
        if self.max.is_none() {
            return;
        }
        let held = self.held.lock();
        if held.nodes.get(identity).is_some_and(|h| h.from != version) {
            self.give_back(held, identity);
        }
    }

    /// Gives `identity`'s slot back, if it holds one.
    #[cfg(test)]
    pub(crate) fn release(&self, identity: &Identity) {
        if self.max.is_some() {
            self.give_back(self.held.lock(), identity);
        }
    }

    /// Takes `identity`'s slot (if any) out of `held` and wakes a waiting node if
    /// that freed a slot of the part (not when more than the part were held).
    fn give_back(&self, mut held: parking_lot::MutexGuard<'_, Holders>, identity: &Identity) {
        let before = held.free();
        if held.nodes.remove(identity).is_some() {
            let freed = held.free().saturating_sub(before);
            drop(held);
            self.wake(freed);
        }
    }

    /// The nodes holding a slot now, with when they took it.
    pub(crate) fn holders(&self) -> Vec<(Identity, Instant)> {
        let now = Instant::now();
        self.held
            .lock()
            .nodes
            .iter()
            .filter(|(_, h)| now.duration_since(h.since) < self.timeout)
            .map(|(i, h)| (i.clone(), h.since))
            .collect()
    }
}

/// A part as a gauge value.
fn gauge_value(part: usize) -> i64 {
    i64::try_from(part).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Identity {
        Identity::parse(s).unwrap()
    }

    #[test]
    fn the_cap_holds_and_slots_come_back() {
        let slots = UpgradeSlots::new(Some(2), SLOT_TIMEOUT);
        assert!(slots.try_take(&id("a"), "1.0"));
        assert!(slots.try_take(&id("b"), "1.0"));
        assert!(!slots.try_take(&id("c"), "1.0"), "the third waits");
        assert!(slots.try_take(&id("a"), "1.0"), "a holder keeps its slot");
        slots.release(&id("a"));
        assert!(slots.try_take(&id("c"), "1.0"));
        assert_eq!(slots.holders().len(), 2);
        slots.seen(&id("b"), "1.0");
        assert_eq!(slots.holders().len(), 2, "b is not back yet: still 1.0");
        slots.seen(&id("b"), "2.0");
        assert_eq!(slots.holders().len(), 1, "b came back upgraded");
        slots.seen(&id("z"), "2.0");
        assert!(slots.try_take(&id("a"), "1.0"));
        assert!(!slots.try_take(&id("z"), "1.0"));
    }

    #[test]
    fn each_slot_given_back_wakes_the_next_waiting_node() {
        let slots = UpgradeSlots::new(Some(1), SLOT_TIMEOUT);
        assert!(slots.try_take(&id("a"), "1.0"));
        for n in ["b", "c", "b", "d"] {
            assert!(!slots.try_take(&id(n), "1.0"));
        }
        assert!(slots.take_woken().is_empty(), "nothing given back yet");
        slots.seen(&id("a"), "2.0");
        assert_eq!(slots.take_woken(), [id("b")], "first come, first served");
        assert!(slots.take_woken().is_empty());
        assert!(slots.try_take(&id("b"), "1.0"));
        slots.release(&id("b"));
        slots.release(&id("b"));
        assert_eq!(slots.take_woken(), [id("c")], "one slot, one node");
        let quick = UpgradeSlots::new(Some(1), Duration::from_millis(20));
        assert!(quick.try_take(&id("a"), "1.0"));
        assert!(!quick.try_take(&id("b"), "1.0"));
        std::thread::sleep(Duration::from_millis(30));
        assert!(quick.try_take(&id("c"), "1.0"), "a timed out");
        assert_eq!(quick.take_woken(), [id("b")]);
    }

    #[test]
    fn unlimited_by_default_and_a_node_that_never_returns_times_out() {
        let open = UpgradeSlots::new(None, SLOT_TIMEOUT);
        for n in 0..100 {
            assert!(open.try_take(&id(&format!("n{n}")), "1.0"));
        }
        assert!(open.holders().is_empty());
        let slots = UpgradeSlots::new(Some(1), Duration::from_millis(30));
        assert!(slots.try_take(&id("a"), "1.0"));
        assert!(!slots.try_take(&id("b"), "1.0"));
        std::thread::sleep(Duration::from_millis(40));
        assert!(slots.try_take(&id("b"), "1.0"), "a's slot timed out");
    }

    #[test]
    fn the_cap_is_split_among_the_live_instances_at_least_one_each() {
        let parts = |max, live| (0..live).map(|r| split(max, live, r)).collect::<Vec<_>>();
        assert_eq!(parts(5, 3), [2, 2, 1]);
        assert_eq!(parts(7, 2), [4, 3]);
        assert_eq!(parts(6, 3), [2, 2, 2]);
        assert_eq!(parts(4, 1), [4]);
        // Fewer slots than instances: one each, so the site total is the instances.
        assert_eq!(parts(2, 3), [1, 1, 1]);
        assert_eq!(parts(1, 4), [1, 1, 1, 1]);
        for max in 1..40 {
            for live in 1..12 {
                let p = parts(max, live);
                assert_eq!(p.iter().sum::<usize>(), max.max(live), "{max} over {live}");
                assert!(p.iter().all(|&n| n >= 1), "{max} over {live}: {p:?}");
                assert!(p.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1));
            }
        }
        assert_eq!(split(3, 0, 0), 3, "nobody live: the whole cap");
    }

    #[test]
    fn a_larger_part_wakes_as_many_waiting_nodes_as_it_frees_slots() {
        let gauge = IntGauge::new("slots", "slots").unwrap();
        let slots = UpgradeSlots::with_gauge(Some(4), SLOT_TIMEOUT, gauge.clone());
        assert_eq!((slots.part(), gauge.get()), (Some(4), 4), "the whole cap");
        slots.set_part(1);
        assert_eq!((slots.part(), gauge.get()), (Some(1), 1));
        assert!(slots.try_take(&id("a"), "1.0"));
        for n in ["b", "c", "d"] {
            assert!(!slots.try_take(&id(n), "1.0"), "{n} waits");
        }
        slots.set_part(1);
        assert!(slots.take_woken().is_empty(), "the same part frees nothing");
        slots.set_part(3);
        assert_eq!(gauge.get(), 3);
        assert_eq!(
            slots.take_woken(),
            [id("b"), id("c")],
            "two slots came free"
        );
        assert!(slots.try_take(&id("b"), "1.0"));
        assert!(slots.try_take(&id("c"), "1.0"));
        assert!(!slots.try_take(&id("d"), "1.0"), "the part is full again");
        slots.set_part(0);
        assert!(slots.take_woken().is_empty());
        assert_eq!(gauge.get(), 0);
        slots.set_part(4);
        assert_eq!(slots.take_woken(), [id("d")], "one slot free of four");
    }

    #[test]
    fn a_woken_node_that_is_not_ours_passes_its_turn_to_the_next_waiting_one() {
        let slots = UpgradeSlots::new(Some(1), SLOT_TIMEOUT);
        assert!(slots.try_take(&id("a"), "1.0"));
        for n in ["b", "c", "d"] {
            assert!(!slots.try_take(&id(n), "1.0"), "{n} waits");
        }
        slots.release(&id("a"));
        assert_eq!(slots.take_woken(), [id("b")]);
        // b belongs to another instance now: its turn goes to c, then d.
        slots.pass_on(1);
        assert_eq!(slots.take_woken(), [id("c")]);
        slots.pass_on(2);
        assert_eq!(slots.take_woken(), [id("d")], "no more are waiting");
        slots.pass_on(1);
        assert!(slots.take_woken().is_empty());
    }

    #[test]
    fn a_smaller_part_revokes_nothing_and_new_nodes_wait_until_fewer_are_held() {
        let slots = UpgradeSlots::new(Some(4), SLOT_TIMEOUT);
        for n in ["a", "b", "c", "d"] {
            assert!(slots.try_take(&id(n), "1.0"));
        }
        slots.set_part(2);
        assert_eq!(slots.holders().len(), 4, "nothing revoked");
        assert!(slots.try_take(&id("a"), "1.0"), "a holder keeps its slot");
        assert!(!slots.try_take(&id("e"), "1.0"), "4 held, part 2: e waits");
        slots.release(&id("a"));
        slots.seen(&id("b"), "2.0");
        assert!(slots.take_woken().is_empty(), "still 2 held of a part of 2");
        assert!(!slots.try_take(&id("f"), "1.0"));
        slots.release(&id("c"));
        assert_eq!(slots.take_woken(), [id("e")], "1 held of 2: one comes free");
        assert!(slots.try_take(&id("e"), "1.0"));
        assert!(!slots.try_take(&id("g"), "1.0"));
        assert_eq!(slots.holders().len(), 2);
        let unlimited = UpgradeSlots::new(None, SLOT_TIMEOUT);
        unlimited.set_part(1);
        assert_eq!(unlimited.part(), None, "nothing to split");
        assert!(unlimited.try_take(&id("a"), "1.0") && unlimited.try_take(&id("b"), "1.0"));
    }
}
