//! The pause flag: the one switch that stops all provisioning work.
//!
//! Two holds set it: the leader election (or an active-active instance that is not
//! in the live set yet), through [`Pause::pause`] and [`Pause::resume`], and an
//! operator, through [`Pause::hold_for_operator`] and [`Pause::release_operator`].
//! Provisioning runs only when neither holds it. Discovery, the event listener, every
//! RPC try and every helper start read the flag, a `parking_lot::RwLock<bool>`. Each
//! change is mirrored into the `choria_provisioner_paused` gauge handed in at
//! construction, so this module needs nothing from `metrics`.

use parking_lot::{Mutex, RwLock};
use prometheus::IntGauge;

/// Why an operator paused provisioning, and since when.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OperatorPause {
    /// What the operator said (may be empty).
    pub reason: String,
    /// When (Unix seconds).
    pub since: i64,
}

/// Who holds the flag.
#[derive(Debug, Default)]
struct Holds {
    election: bool,
    operator: Option<OperatorPause>,
}

impl Holds {
    fn paused(&self) -> bool {
        self.election || self.operator.is_some()
    }
}

/// A shared pause flag (`parking_lot::RwLock<bool>`) that keeps a gauge in step.
#[derive(Debug)]
pub struct Pause {
    paused: RwLock<bool>,
    holds: Mutex<Holds>,
    gauge: IntGauge,
}

impl Pause {
    /// A running (not paused) flag; sets `gauge` to 0.
    pub fn new(gauge: IntGauge) -> Pause {
        gauge.set(0);
        Pause {
            paused: RwLock::new(false),
            holds: Mutex::new(Holds::default()),
            gauge,
        }
    }

    /// The election's hold: stops provisioning work until [`Pause::resume`].
    pub fn pause(&self) {
        self.change(|h| h.election = true);
    }

    /// Lifts the election's hold; work goes on unless an operator holds the flag.
    pub fn resume(&self) {
        self.change(|h| h.election = false);
    }

    /// An operator's hold, until [`Pause::release_operator`]. A second one replaces
    /// the reason.
    pub fn hold_for_operator(&self, pause: OperatorPause) {
        self.change(|h| h.operator = Some(pause));
    }

    /// Lifts the operator's hold; returns the hold it lifted, if any.
    pub fn release_operator(&self) -> Option<OperatorPause> {
        let mut lifted = None;
        self.change(|h| lifted = h.operator.take());
        lifted
    }

    /// The operator's hold, if any.
    pub(crate) fn operator(&self) -> Option<OperatorPause> {
        self.holds.lock().operator.clone()
    }

    /// True while provisioning is paused (by either hold).
    pub(crate) fn paused(&self) -> bool {
        *self.paused.read()
    }

    fn change(&self, f: impl FnOnce(&mut Holds)) {
        let mut holds = self.holds.lock();
        f(&mut holds);
        let value = holds.paused();
        *self.paused.write() = value;
        self.gauge.set(i64::from(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_change_sets_the_gauge() {
        let gauge = IntGauge::new("paused", "test").unwrap();
        gauge.set(7);
        let pause = Pause::new(gauge.clone());
        assert_eq!(gauge.get(), 0);
        assert!(!pause.paused());
        pause.pause();
        assert!(pause.paused());
        assert_eq!(gauge.get(), 1);
        pause.resume();
        assert!(!pause.paused());
        assert_eq!(gauge.get(), 0);
    }

    #[test]
    fn work_goes_on_only_when_neither_the_election_nor_an_operator_holds_it() {
        let gauge = IntGauge::new("paused", "test").unwrap();
        let pause = Pause::new(gauge.clone());
        let held = OperatorPause {
            reason: "CA outage".into(),
            since: 5,
        };
        pause.hold_for_operator(held.clone());
        assert!(pause.paused());
        assert_eq!(pause.operator(), Some(held.clone()));
        // The election winning does not lift an operator's pause.
        pause.pause();
        pause.resume();
        assert!(pause.paused(), "still held by the operator");
        assert_eq!(gauge.get(), 1);
        // Nor does the operator's resume lift the election's.
        pause.pause();
        assert_eq!(pause.release_operator(), Some(held));
        assert!(pause.paused(), "still held by the election");
        assert_eq!(pause.release_operator(), None);
        pause.resume();
        assert!(!pause.paused());
        assert_eq!(gauge.get(), 0);
        assert_eq!(pause.operator(), None);
    }
}
