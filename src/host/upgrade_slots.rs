//! `upgrades_max_in_flight`: how many nodes of this provisioner may be upgrading at
//! once, so that a wrong `upgrade` answer from the helper cannot take a whole site
//! down at once.
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

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::choria::identity::Identity;

/// How long a node that never comes back holds its slot.
pub const SLOT_TIMEOUT: Duration = Duration::from_secs(600);

/// Most nodes remembered as waiting for a slot (the work queue's capacity); beyond
/// it a node is tried again only when it is found again.
pub const WAITING_MAX: usize = 50_000;

/// The slots of one provisioner.
#[derive(Debug)]
pub struct UpgradeSlots {
    max: Option<usize>,
    timeout: Duration,
    held: Mutex<HashMap<Identity, Held>>,
    queue: Mutex<Waiting>,
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
    /// `max` slots (`None`: unlimited, as Go), each held at most `timeout`.
    pub fn new(max: Option<usize>, timeout: Duration) -> UpgradeSlots {
        UpgradeSlots {
            max,
            timeout,
            held: Mutex::new(HashMap::new()),
            queue: Mutex::new(Waiting::default()),
        }
    }

    /// Takes a slot for `identity`, upgrading from version `from`; false when all
    /// are held by other nodes.
    pub fn try_take(&self, identity: &Identity, from: &str) -> bool {
        let Some(max) = self.max else {
            return true;
        };
        let mut held = self.held.lock();
        let now = Instant::now();
        let timeout = self.timeout;
        let before = held.len();
        held.retain(|_, h| now.duration_since(h.since) < timeout);
        self.freed(before - held.len());
        if held.contains_key(identity) || held.len() < max {
            held.insert(
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

    /// `n` slots were given back: wake as many waiting nodes.
    fn freed(&self, n: usize) {
        if n > 0 {
            self.queue.lock().wake(n);
        }
    }

    /// The waiting nodes woken by slots given back since the last call, to be
    /// queued again.
    pub fn take_woken(&self) -> Vec<Identity> {
        std::mem::take(&mut self.queue.lock().woken)
    }

    /// The node reported `version` in its inventory: its slot is given back if it
    /// holds one and now runs another version than it was upgraded from.
    pub fn seen(&self, identity: &Identity, version: &str) {
        if self.max.is_none() {
            return;
        }
        let mut held = self.held.lock();
        if held.get(identity).is_some_and(|h| h.from != version) {
            held.remove(identity);
            drop(held);
            self.freed(1);
        }
    }

    /// Gives `identity`'s slot back, if it holds one.
    pub fn release(&self, identity: &Identity) {
        if self.max.is_some() && self.held.lock().remove(identity).is_some() {
            self.freed(1);
        }
    }

    /// The nodes holding a slot now, with when they took it.
    pub fn holders(&self) -> Vec<(Identity, Instant)> {
        let now = Instant::now();
        self.held
            .lock()
            .iter()
            .filter(|(_, h)| now.duration_since(h.since) < self.timeout)
            .map(|(i, h)| (i.clone(), h.since))
            .collect()
    }
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
}
