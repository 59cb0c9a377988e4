//! go-choria's back-off policies (`backoff/backoff.go`): a table of steps in
//! milliseconds, each jittered uniformly to `[½, 1½)` of its value.
//!
//! `FIVE_SEC` paces RPC retries and the initial broker connect; `TWENTY_SEC` paces
//! reconnects and election campaigns. This module imports nothing else of the crate.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// A back-off policy: step *n* is `steps[min(n, len - 1)]` milliseconds, jittered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    steps: &'static [u64],
}

/// 500 ms rising to 5 s (11 steps).
pub(crate) const FIVE_SEC: Policy = Policy {
    steps: &[
        500, 750, 1000, 1500, 2000, 2500, 3000, 3500, 4000, 4500, 5000,
    ],
};

/// 500 ms rising to 20 s (44 steps).
pub(crate) const TWENTY_SEC: Policy = Policy {
    steps: &[
        500, 750, 1000, 1500, 2000, 2500, 3000, 3500, 4000, 4500, 5000, 5500, 5750, 6000, 6500,
        7000, 7500, 8000, 8500, 9000, 9500, 10000, 10500, 10750, 11000, 11500, 12000, 12500, 13000,
        13500, 14000, 14500, 15000, 15500, 15750, 16000, 16500, 17000, 17500, 18000, 18500, 19000,
        19500, 20000,
    ],
};

impl Policy {
    /// The un-jittered step for attempt `n` (0-based; past the end the last step).
    pub(crate) fn step(&self, n: usize) -> Duration {
        let ms = self.steps[n.min(self.steps.len() - 1)];
        Duration::from_millis(ms)
    }

    /// The jittered delay for attempt `n`: uniform in `[step/2, step·3/2)`.
    pub(crate) fn duration(&self, n: usize) -> Duration {
        let step = self.step(n).as_millis() as u64;
        let jitter = random_u64() % step.max(1);
        Duration::from_millis(step / 2 + jitter)
    }
}

/// A random number from the standard library's per-hasher random keys; good enough for
/// jitter, which needs spread, not secrecy.
pub(crate) fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_jitter_bounds() {
        assert_eq!(FIVE_SEC.step(0), Duration::from_millis(500));
        assert_eq!(FIVE_SEC.step(1), Duration::from_millis(750));
        assert_eq!(FIVE_SEC.step(99), Duration::from_secs(5));
        assert_eq!(TWENTY_SEC.step(43), Duration::from_secs(20));
        assert_eq!(TWENTY_SEC.step(12), Duration::from_millis(5750));
        for n in 0..50 {
            let d = TWENTY_SEC.duration(n);
            let s = TWENTY_SEC.step(n);
            assert!(
                d >= s / 2 && d < s * 3 / 2,
                "{n}: {d:?} outside jitter of {s:?}"
            );
        }
        let spread: std::collections::HashSet<_> = (0..50).map(|_| FIVE_SEC.duration(10)).collect();
        assert!(spread.len() > 10, "jitter spreads: {spread:?}");
    }
}
