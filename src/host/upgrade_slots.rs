//! `upgrades_max_in_flight`: how many nodes of this provisioner may be upgrading at
//! once, so that a wrong `upgrade` answer from the helper cannot take a whole site
//! down at once.
//!
//! A node takes a slot just before its `release_update` and holds it while it is
//! away upgrading: the slot is given back when the node's next attempt starts (it
//! came back and was found again), when the `release_update` failed, or after
//! [`SLOT_TIMEOUT`] for a node that never came back. A node that finds no free slot
//! ends its attempt as `upgrade_waiting` (not an error) and is tried again when it
//! is next found.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::choria::identity::Identity;

/// How long a node that never comes back holds its slot.
pub const SLOT_TIMEOUT: Duration = Duration::from_secs(600);

/// The slots of one provisioner.
#[derive(Debug)]
pub struct UpgradeSlots {
    max: Option<usize>,
    timeout: Duration,
    held: Mutex<HashMap<Identity, Instant>>,
}

impl UpgradeSlots {
    /// `max` slots (`None`: unlimited, as Go), each held at most `timeout`.
    pub fn new(max: Option<usize>, timeout: Duration) -> UpgradeSlots {
        UpgradeSlots {
            max,
            timeout,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// Takes a slot for `identity`; false when all are held by other nodes.
    pub fn try_take(&self, identity: &Identity) -> bool {
        let Some(max) = self.max else {
            return true;
        };
        let mut held = self.held.lock();
        let now = Instant::now();
        let timeout = self.timeout;
        held.retain(|_, since| now.duration_since(*since) < timeout);
        if held.contains_key(identity) || held.len() < max {
            held.insert(identity.clone(), now);
            true
        } else {
            false
        }
    }

    /// Gives `identity`'s slot back, if it holds one.
    pub fn release(&self, identity: &Identity) {
        if self.max.is_some() {
            self.held.lock().remove(identity);
        }
    }

    /// The nodes holding a slot now, with when they took it.
    pub fn holders(&self) -> Vec<(Identity, Instant)> {
        let now = Instant::now();
        self.held
            .lock()
            .iter()
            .filter(|(_, since)| now.duration_since(**since) < self.timeout)
            .map(|(i, s)| (i.clone(), *s))
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
        assert!(slots.try_take(&id("a")));
        assert!(slots.try_take(&id("b")));
        assert!(!slots.try_take(&id("c")), "the third waits");
        assert!(slots.try_take(&id("a")), "a holder keeps its slot");
        slots.release(&id("a"));
        assert!(slots.try_take(&id("c")));
        assert_eq!(slots.holders().len(), 2);
    }

    #[test]
    fn unlimited_by_default_and_a_node_that_never_returns_times_out() {
        let open = UpgradeSlots::new(None, SLOT_TIMEOUT);
        for n in 0..100 {
            assert!(open.try_take(&id(&format!("n{n}"))));
        }
        assert!(open.holders().is_empty());
        let slots = UpgradeSlots::new(Some(1), Duration::from_millis(30));
        assert!(slots.try_take(&id("a")));
        assert!(!slots.try_take(&id("b")));
        std::thread::sleep(Duration::from_millis(40));
        assert!(slots.try_take(&id("b")), "a's slot timed out");
    }
}
