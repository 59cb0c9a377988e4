//! The attempts' timer: one heap of wakes shared with the workers, and a thread that
//! sleeps until the earliest and schedules the attempt it names (the driver's
//! contract, in `driver.rs`'s module doc, says what a wake may and may not do).

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Cell, Cells, Phase};

/// Timer entries, earliest first: when, and which attempt (by id, so that a wake
/// outliving its attempt holds 24 bytes and not the attempt's cell).
pub(super) struct Wake(pub(super) Instant, pub(super) u64);

impl PartialEq for Wake {
    fn eq(&self, other: &Wake) -> bool {
        self.0 == other.0
    }
}
impl Eq for Wake {}
impl PartialOrd for Wake {
    fn partial_cmp(&self, other: &Wake) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Wake {
    fn cmp(&self, other: &Wake) -> std::cmp::Ordering {
        other.0.cmp(&self.0)
    }
}

/// The least time the timer thread sleeps between two rounds: wakes due within it are
/// handled together, so that thousands of attempts cost at most 200 wake-ups a second
/// (a wake is late by at most this much; it only ends a wait).
const TIMER_SLACK: Duration = Duration::from_millis(5);

/// The attempts' timer: one heap of wakes, shared with the workers, and a thread
/// that sleeps until the earliest. A worker wakes the thread only for a wake earlier
/// than every one it holds, so most wakes cost a heap push and no context switch.
pub(super) struct Timer {
    pub(super) heap: Mutex<BinaryHeap<Wake>>,
    pub(super) cells: Arc<Cells>,
    pub(super) thread: std::sync::OnceLock<std::thread::Thread>,
    pub(super) stop: AtomicBool,
}

impl Timer {
    /// The timer and its thread, which ends when [`Timer::stop`] is called.
    pub(super) fn start(cells: Arc<Cells>) -> std::io::Result<Arc<Timer>> {
        let timer = Arc::new(Timer {
            heap: Mutex::new(BinaryHeap::new()),
            cells,
            thread: std::sync::OnceLock::new(),
            stop: AtomicBool::new(false),
        });
        let runs = Arc::clone(&timer);
        let handle = std::thread::Builder::new()
            .name("attempt-timer".into())
            .spawn(move || runs.run())?;
        let _ = timer.thread.set(handle.thread().clone());
        Ok(timer)
    }

    /// Wakes the attempt `id` at `at`.
    pub(super) fn schedule(&self, at: Instant, id: u64) {
        let mut heap = self.heap.lock();
        let earlier = heap.peek().is_none_or(|w| at < w.0);
        heap.push(Wake(at, id));
        drop(heap);
        if earlier {
            self.unpark();
        }
    }

    /// Drops the wakes that will wake nothing (their attempt ended, or asked for
    /// another wake since) once they outnumber the live attempts twice over: at
    /// 100,000 nodes they were 130,000 entries (3 MB) waiting for their time. The
    /// heap is taken out and put back, so workers scheduling meanwhile never wait
    /// on the sifting.
    pub(super) fn purge_if_stale(&self) {
        let live = self.cells.lock().len();
        if self.heap.lock().len() <= 2 * live + 4096 {
            return;
        }
        let taken = std::mem::take(&mut *self.heap.lock());
        let with_cells: Vec<(Wake, Option<Arc<Cell>>)> = {
            let cells = self.cells.lock();
            taken
                .into_iter()
                .map(|w| {
                    let cell = cells.get(&w.1).cloned();
                    (w, cell)
                })
                .collect()
        };
        let current = with_cells.into_iter().filter_map(|(w, cell)| {
            let cell = cell?;
            let state = cell.state.lock();
            let pending = !matches!(state.phase, Phase::Ended) && state.inbox.wake == Some(w.0);
            pending.then_some(w)
        });
        let kept: Vec<Wake> = current.collect();
        self.heap.lock().extend(kept);
    }

    fn unpark(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.unpark();
    }

    /// Wakes each attempt at the time it asked, a round at a time.
    fn run(&self) {
        let mut due = Vec::new();
        while !self.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let next = {
                let mut heap = self.heap.lock();
                while heap.peek().is_some_and(|w| w.0 <= now) {
                    due.extend(heap.pop());
                }
                heap.peek().map(|w| w.0)
            };
            let woken: Vec<(Instant, Arc<Cell>)> = {
                let cells = self.cells.lock();
                due.drain(..)
                    .filter_map(|Wake(at, id)| Some((at, Arc::clone(cells.get(&id)?))))
                    .collect()
            };
            for (at, cell) in woken {
                cell.wake(at);
            }
            self.purge_if_stale();
            match next {
                Some(next) => std::thread::park_timeout(
                    next.saturating_duration_since(Instant::now())
                        .max(TIMER_SLACK),
                ),
                None => std::thread::park(),
            }
        }
    }
}
