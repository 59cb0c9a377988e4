//! Warnings that a hostile peer can repeat at will are logged at most once per
//! period, with a count of what was held back. Imports nothing of the crate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How often a throttled warning may be logged by default.
pub(crate) const WARN_EVERY: Duration = Duration::from_secs(60);

/// One kind of repeated warning.
#[derive(Debug)]
pub(crate) struct Throttle {
    period: Duration,
    last: Mutex<Option<Instant>>,
    held_back: AtomicU64,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new(WARN_EVERY)
    }
}

impl Throttle {
    /// A throttle letting one warning through per `period`.
    pub(crate) fn new(period: Duration) -> Throttle {
        Throttle {
            period,
            last: Mutex::new(None),
            held_back: AtomicU64::new(0),
        }
    }

    /// `Some(n)` when a warning may be logged now, `n` being how many were held back
    /// since the last one; `None` (and one more held back) otherwise.
    pub(crate) fn ready(&self) -> Option<u64> {
        let now = Instant::now();
        let mut last = self.last.lock();
        if last.is_some_and(|t| now.duration_since(t) < self.period) {
            self.held_back.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *last = Some(now);
        Some(self.held_back.swap(0, Ordering::Relaxed))
    }

    /// [`Throttle::ready`] as the end of a warning line: `Some("")` when nothing was
    /// held back, `Some(" (n more <what> since the last warning)")` otherwise.
    pub(crate) fn ready_note(&self, what: &str) -> Option<String> {
        self.ready().map(|held_back| match held_back {
            0 => String::new(),
            n => format!(" ({n} more {what} since the last warning)"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_per_period_with_the_count_held_back() {
        let t = Throttle::new(Duration::from_millis(100));
        assert_eq!(t.ready(), Some(0));
        assert_eq!(t.ready(), None);
        assert_eq!(t.ready(), None);
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(t.ready(), Some(2));
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(t.ready_note("drops").as_deref(), Some(""));
        assert_eq!(t.ready_note("drops"), None);
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(
            t.ready_note("drops").as_deref(),
            Some(" (1 more drops since the last warning)")
        );
    }
}
