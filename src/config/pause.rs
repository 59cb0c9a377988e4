//! The pause flag: the one switch that stops all provisioning work.
//!
//! Only the leader election changes it; discovery, the event listener, every RPC try
//! and every helper start read it. Each change is mirrored into the
//! `choria_provisioner_paused` gauge handed in at construction, so this module needs
//! nothing from `metrics`.

use parking_lot::RwLock;
use prometheus::IntGauge;

/// A shared pause flag (`parking_lot::RwLock<bool>`) that keeps a gauge in step.
#[derive(Debug)]
pub struct Pause {
    paused: RwLock<bool>,
    gauge: IntGauge,
}

impl Pause {
    /// A running (not paused) flag; sets `gauge` to 0.
    pub fn new(gauge: IntGauge) -> Pause {
        gauge.set(0);
        Pause {
            paused: RwLock::new(false),
            gauge,
        }
    }

    /// Stops provisioning work until [`Pause::resume`].
    pub fn pause(&self) {
        self.set(true);
    }

    /// Lets provisioning work go on.
    pub fn resume(&self) {
        self.set(false);
    }

    /// Inverts the flag and returns the new state.
    pub fn flip(&self) -> bool {
        let mut paused = self.paused.write();
        *paused = !*paused;
        self.gauge.set(i64::from(*paused));
        *paused
    }

    /// True while provisioning is paused.
    pub fn paused(&self) -> bool {
        *self.paused.read()
    }

    fn set(&self, value: bool) {
        let mut paused = self.paused.write();
        *paused = value;
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
        assert_eq!(gauge.get(), 0);
        assert!(pause.flip());
        assert_eq!(gauge.get(), 1);
        assert!(!pause.flip());
        assert_eq!(gauge.get(), 0);
    }
}
