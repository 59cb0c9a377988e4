//! Pages of the pending and denied records, for `pending` and `/nodes`: sorted
//! once and kept, outside the table's lock, so that however many clients poll, the
//! table pays one pass of reference counts at most once a second while it changes
//! (and none while it does not), and each request pays for its page alone. A page
//! may be a second older than the table; an operator's decision makes the next
//! request sort afresh.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::table::Table;
use crate::choria::peers::{ApprovalRecord, Decision};

/// How long sorted pages serve a table that changed since.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// The pending records, longest waiting first (by first sighting, then identity),
/// and the denied ones, most recent first, as of the table's `generation`.
struct Sorted {
    generation: u64,
    built: Instant,
    pending: Arc<Vec<Arc<ApprovalRecord>>>,
    denied: Arc<Vec<Arc<ApprovalRecord>>>,
}

/// The sorted pages of one table.
#[derive(Default)]
pub(crate) struct Pages {
    sorted: Mutex<Option<Sorted>>,
}

/// Which list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum List {
    /// Pending, longest waiting first.
    Pending,
    /// Denied, most recent decision first.
    Denied,
}

impl Pages {
    /// `limit` records of `list` from `offset`, and how many the list holds.
    pub(crate) fn page(
        &self,
        table: &Mutex<Table>,
        list: List,
        offset: usize,
        limit: usize,
    ) -> (Vec<Arc<ApprovalRecord>>, usize) {
        let all = self.sorted(table, list);
        let page = all.iter().skip(offset).take(limit).cloned().collect();
        (page, all.len())
    }

    /// The next request sorts afresh (an operator's decision changed the table).
    pub(crate) fn invalidate(&self) {
        *self.sorted.lock() = None;
    }

    /// `list`, sorted: kept if the table has not changed since, or changed less
    /// than [`FRESH_FOR`] ago; otherwise built again. One request builds while the
    /// others wait for it here, not on the table's lock.
    fn sorted(&self, table: &Mutex<Table>, list: List) -> Arc<Vec<Arc<ApprovalRecord>>> {
        let mut sorted = self.sorted.lock();
        let generation = table.lock().generation();
        let usable = sorted
            .as_ref()
            .is_some_and(|s| s.generation == generation || s.built.elapsed() < FRESH_FOR);
        if !usable {
            *sorted = Some(build(table));
        }
        let s = sorted.as_ref().expect("built above");
        Arc::clone(match list {
            List::Pending => &s.pending,
            List::Denied => &s.denied,
        })
    }
}

/// Both lists from one snapshot, sorted after the table's lock is released.
fn build(table: &Mutex<Table>) -> Sorted {
    let (generation, records) = {
        let t = table.lock();
        (t.generation(), t.snapshot())
    };
    let (mut pending, mut denied): (Vec<_>, Vec<_>) = records
        .into_iter()
        .filter(|r| matches!(r.standing(), Decision::Pending | Decision::Denied))
        .partition(|r| r.standing() == Decision::Pending);
    pending.sort_unstable_by(|a, b| (a.first_seen, &a.identity).cmp(&(b.first_seen, &b.identity)));
    denied.sort_unstable_by(|a, b| (b.at, &a.identity).cmp(&(a.at, &b.identity)));
    Sorted {
        generation,
        built: Instant::now(),
        pending: Arc::new(pending),
        denied: Arc::new(denied),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choria::identity::Identity;

    fn names(v: Vec<Arc<ApprovalRecord>>) -> Vec<String> {
        v.into_iter().map(|r| r.identity.to_string()).collect()
    }

    #[test]
    fn pages_are_ordered_kept_while_fresh_and_sorted_again_when_told() {
        let table = Mutex::new(Table::new(10));
        for (n, at) in [("c", 3), ("a", 1), ("b", 2)] {
            let id = Identity::parse(n).unwrap();
            table
                .lock()
                .merge(ApprovalRecord::held(id, at * 1_000_000_000));
        }
        for (n, at) in [("x", 7), ("y", 9)] {
            let mut r = ApprovalRecord::held(Identity::parse(n).unwrap(), 0);
            (r.clock, r.decision, r.at, r.held_at) = (1, Decision::Denied, at, 0);
            table.lock().merge(r);
        }
        let pages = Pages::default();
        let (page, total) = pages.page(&table, List::Pending, 0, 10);
        assert_eq!(
            (names(page), total),
            (vec!["a".into(), "b".into(), "c".into()], 3)
        );
        assert_eq!(names(pages.page(&table, List::Pending, 1, 1).0), ["b"]);
        let (page, total) = pages.page(&table, List::Denied, 0, 1);
        assert_eq!((names(page), total), (vec!["y".to_string()], 2));
        // A change within the second: the kept pages serve; told, they are new.
        let d = Identity::parse("d").unwrap();
        table.lock().merge(ApprovalRecord::held(d, 1));
        assert_eq!(pages.page(&table, List::Pending, 0, 10).1, 3);
        pages.invalidate();
        assert_eq!(names(pages.page(&table, List::Pending, 0, 1).0), ["d"]);
    }
}
