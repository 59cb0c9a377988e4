//! Stale requests expire (`approval_pending_expiry`, `approval_ahead_expiry`): a
//! pending identity not seen for the first is forgotten, and an approval given
//! ahead of time for an identity that never came is forgotten after the second. A
//! denial never expires by itself. Each expiry is a decision like an operator's
//! (`by: expiry`): audited, counted, and shared with the site's other instances.

use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::{Duration, Instant};

use super::Decider;
use crate::choria::identity::Identity;
use crate::choria::peers::{ApprovalRecord, Decision};

/// How often the table is looked at for what expired.
pub(crate) const EXPIRE_EVERY: Duration = Duration::from_secs(10);

/// The two expiries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expiry {
    /// `approval_pending_expiry`.
    pub pending: Duration,
    /// `approval_ahead_expiry`.
    pub ahead: Duration,
}

impl Expiry {
    /// When `record` expires unless its node is seen, Unix seconds; `None` for a
    /// record that does not (a denial, an approval of a node that came, a forget).
    pub(crate) fn expires(&self, record: &ApprovalRecord) -> Option<u64> {
        match record.standing() {
            Decision::Pending if record.last_seen > 0 => {
                Some(record.last_seen.saturating_add(self.pending.as_secs()))
            }
            Decision::Approved if record.first_seen == 0 => {
                Some((record.at / 1_000_000_000).saturating_add(self.ahead.as_secs()))
            }
            _ => None,
        }
    }

    /// The pending identities of `records` past their expiry at `now` (Unix
    /// seconds), and the approvals given ahead of time past theirs.
    pub(crate) fn due<'a>(
        &self,
        records: impl Iterator<Item = &'a ApprovalRecord>,
        now: u64,
    ) -> (Vec<Identity>, Vec<Identity>) {
        let (mut pending, mut ahead) = (Vec::new(), Vec::new());
        for r in records {
            if self.expires(r).is_some_and(|at| at <= now) {
                match r.standing() {
                    Decision::Pending => pending.push(r.identity.clone()),
                    _ => ahead.push(r.identity.clone()),
                }
            }
        }
        (pending, ahead)
    }
}

impl super::Approvals {
    /// Forgets the pending identities not seen for `approval_pending_expiry` and
    /// the approvals given ahead of time whose node did not come within
    /// `approval_ahead_expiry`, at most every [`EXPIRE_EVERY`], and never
    /// while this instance is paused (a standby's sightings are not kept up to
    /// date). Returns how many were forgotten.
    pub(crate) fn expire_if_due(&self) -> usize {
        {
            let mut last = self.expired_at.lock();
            if last.is_some_and(|at| at.elapsed() < EXPIRE_EVERY) {
                return 0;
            }
            *last = Some(Instant::now());
        }
        let paused = self
            .fleet
            .get()
            .and_then(Weak::upgrade)
            .is_none_or(|f| f.pause().paused());
        // A table restored from the file may be behind the others' sightings.
        if paused || !self.caught_up.load(Ordering::Acquire) {
            return 0;
        }
        self.expire(crate::clock::unix_now())
    }

    /// [`Approvals::expire_if_due`]'s work at `now` (Unix seconds).
    pub(super) fn expire(&self, now: u64) -> usize {
        let (pending, ahead) = self.expiry.due(self.table.lock().records(), now);
        let mut forgotten = 0;
        for (identities, reason) in [
            (
                pending,
                format!(
                    "not seen for {} (approval_pending_expiry)",
                    crate::config::format_duration(self.expiry.pending)
                ),
            ),
            (
                ahead,
                format!(
                    "approved ahead of time and not seen within {} (approval_ahead_expiry)",
                    crate::config::format_duration(self.expiry.ahead)
                ),
            ),
        ] {
            if !identities.is_empty() {
                let decided = self.decide(
                    &identities,
                    Decision::Forgotten,
                    &reason,
                    Decider::Expiry,
                    None,
                );
                forgotten += decided.changed.len();
            }
        }
        forgotten
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_and_ahead_approvals_expire_and_nothing_else_does() {
        let expiry = Expiry {
            pending: Duration::from_secs(100),
            ahead: Duration::from_secs(10),
        };
        let id = |s: &str| Identity::parse(s).unwrap();
        let mut pending = ApprovalRecord::held(id("p"), 1_000 * 1_000_000_000);
        pending.last_seen = 1_050;
        let mut ahead = ApprovalRecord::held(id("a"), 0);
        (ahead.decision, ahead.clock, ahead.at) = (Decision::Approved, 1, 1_000 * 1_000_000_000);
        (ahead.held_at, ahead.first_seen, ahead.last_seen) = (0, 0, 0);
        let mut came = ahead.clone();
        came.identity = id("c");
        (came.first_seen, came.last_seen) = (1_001, 1_001);
        let mut denied = pending.clone();
        denied.identity = id("d");
        (denied.decision, denied.clock, denied.at) = (Decision::Denied, 1, 1);
        assert_eq!(expiry.expires(&pending), Some(1_150));
        assert_eq!(expiry.expires(&ahead), Some(1_010));
        assert_eq!(expiry.expires(&came), None, "the node came");
        assert_eq!(expiry.expires(&denied), None, "a denial never expires");
        let all = [pending, ahead, came, denied];
        assert_eq!(expiry.due(all.iter(), 1_009), (vec![], vec![]));
        assert_eq!(expiry.due(all.iter(), 1_010), (vec![], vec![id("a")]));
        assert_eq!(
            expiry.due(all.iter(), 1_150),
            (vec![id("p")], vec![id("a")])
        );
    }
}
