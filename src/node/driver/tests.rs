//! The driver's contract (its module doc), checked: the intake's byte rules, and a
//! seeded stress test of replies, timer wakes and workers racing on cells.

use super::*;
use std::collections::BinaryHeap;
use std::time::Duration;

mod intake_tests {
    use super::*;

    /// A cell with `budget` bytes and replies of at most `max_reply`, and its
    /// counters (too large, over budget).
    fn cell(budget: u64, max_reply: usize) -> (Arc<Cell>, Arc<Intake>, Receiver<Ready>) {
        let gauge = prometheus::IntGauge::new("held", "held").unwrap();
        let counter = |n: &str| prometheus::IntCounter::new(n, n).unwrap();
        let intake = Arc::new(Intake {
            budget: ByteBudget::new(budget, gauge),
            max_reply,
            too_large: counter("too_large"),
            over_budget: counter("over_budget"),
        });
        let (ready, ready_rx) = unbounded();
        let cell = Arc::new(Cell {
            id: 1,
            state: Mutex::new(CellState {
                phase: Phase::Running,
                inbox: Inbox::default(),
            }),
            ready,
            intake: Arc::clone(&intake),
        });
        (cell, intake, ready_rx)
    }

    fn reply(bytes: usize) -> Routed {
        Routed::Reply(vec![b'x'; bytes])
    }

    /// (unread, dropped) of `tag`.
    fn counts(cell: &Cell, tag: usize) -> (usize, u64) {
        cell.state
            .lock()
            .inbox
            .counts
            .get(tag)
            .copied()
            .unwrap_or((0, 0))
    }

    #[test]
    fn a_reply_over_the_cap_is_lost_not_contested() {
        let (cell, intake, _ready) = cell(10_000, 1_000);
        assert!(cell.routed(0, reply(1_001)), "not an overflow");
        assert_eq!(intake.too_large.get(), 1);
        assert_eq!(counts(&cell, 0), (0, 0));
        assert!(cell.routed(0, reply(1_000)));
        assert_eq!(counts(&cell, 0), (1, 0));
        assert_eq!(intake.budget.held(), 1_000);
    }

    #[test]
    fn first_replies_may_fill_the_budget_duplicates_half_and_reading_gives_bytes_back() {
        let (cell, intake, _ready) = cell(10_000, 5_000);
        // Duplicates of request 0 use up to half of the budget; the next is a contest.
        assert!(cell.routed(0, reply(4_000)));
        assert!(cell.routed(0, reply(1_000)));
        assert!(
            !cell.routed(0, reply(1_000)),
            "over half: dropped, told as a contest"
        );
        assert_eq!(counts(&cell, 0), (2, 1));
        // A first reply to request 1 may still use the rest.
        assert!(cell.routed(1, reply(5_000)));
        assert_eq!(intake.budget.held(), 10_000);
        // Full: a first reply to request 2 is lost (its retry is answered), not a
        // contest, and a later reply to it is a first one again.
        assert!(cell.routed(2, reply(100)));
        assert_eq!(counts(&cell, 2), (0, 0));
        assert_eq!(intake.over_budget.get(), 2);
        // What a worker reads is given back.
        let taken: Vec<_> = cell.state.lock().inbox.items.drain(..).collect();
        drop(taken);
        assert_eq!(intake.budget.held(), 0);
        assert!(cell.routed(2, reply(100)));
        assert_eq!(counts(&cell, 2), (1, 0));
    }
}

mod contract_tests {
    use super::*;
    use crate::test_rng::Rng;
    use std::sync::atomic::AtomicU64;

    fn setting(name: &str, default: u64) -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    /// A parked cell (as an attempt waiting on its node is), with a big budget.
    pub(super) fn parked_cell(id: u64, ready: &Sender<Ready>) -> Arc<Cell> {
        let identity = Identity::parse(&format!("n{id}.example.net")).unwrap();
        let progress = Arc::new(Progress::new());
        let now = Instant::now();
        let ticket = Ticket {
            identity: identity.clone(),
            generation: id,
            since: now,
            started: now,
            progress: Arc::clone(&progress),
        };
        let intake = Arc::new(Intake {
            budget: ByteBudget::new(u64::MAX / 4, prometheus::IntGauge::new("h", "h").unwrap()),
            max_reply: 1 << 20,
            too_large: prometheus::IntCounter::new("t", "t").unwrap(),
            over_budget: prometheus::IntCounter::new("o", "o").unwrap(),
        });
        Arc::new(Cell {
            id,
            state: Mutex::new(CellState {
                phase: Phase::Parked(Parked {
                    ticket,
                    attempt: Attempt::new(identity, now, progress),
                    ids: Vec::new(),
                    routes: Vec::new(),
                    silent: false,
                }),
                inbox: Inbox::default(),
            }),
            ready: ready.clone(),
            intake,
        })
    }

    /// What the workers saw: replies read, replies dropped (told as counts), wakes
    /// taken; and any breach of the contract.
    #[derive(Default)]
    struct Seen {
        read: AtomicU64,
        dropped: AtomicU64,
        woken: AtomicU64,
        breaches: Mutex<Vec<String>>,
    }

    /// A worker's turn on a cell it took: what arrived, as `collect` takes it.
    fn drain(cell: &Cell, seen: &Seen) {
        let mut state = cell.state.lock();
        let inbox = &mut state.inbox;
        let read = inbox.items.drain(..).count() as u64;
        let dropped: u64 = inbox
            .counts
            .iter_mut()
            .map(|(unread, lost)| {
                *unread = 0;
                std::mem::take(lost)
            })
            .sum();
        let woken = std::mem::take(&mut inbox.woken);
        drop(state);
        seen.read.fetch_add(read, Ordering::Relaxed);
        seen.dropped.fetch_add(dropped, Ordering::Relaxed);
        seen.woken.fetch_add(u64::from(woken), Ordering::Relaxed);
    }

    /// A worker, as `resume` and `turns` run a cell: take it, look at what arrived,
    /// park it unless more came meanwhile.
    fn worker(
        cells: &[Arc<Cell>],
        running: &[AtomicBool],
        seen: &Seen,
        ready: &Receiver<Ready>,
        producing: &AtomicBool,
        mut rng: Rng,
    ) {
        loop {
            let Ok(Ready(cell)) = ready.recv_timeout(Duration::from_millis(50)) else {
                if producing.load(Ordering::Relaxed) {
                    continue;
                }
                return;
            };
            let index = cell.id as usize;
            let Some(mut parked) = cell.take_ready() else {
                seen.breaches
                    .lock()
                    .push(format!("cell {index} ready twice"));
                continue;
            };
            loop {
                if running[index].swap(true, Ordering::AcqRel) {
                    seen.breaches
                        .lock()
                        .push(format!("cell {index} on two workers"));
                }
                drain(&cells[index], seen);
                if rng.below(8) == 0 {
                    std::thread::yield_now();
                }
                running[index].store(false, Ordering::Release);
                match cells[index].park(parked) {
                    None => break,
                    Some(back) => parked = back,
                }
            }
        }
    }

    #[test]
    fn a_cell_is_ready_once_and_a_stale_ready_or_wake_finds_nothing_to_take() {
        let (ready_tx, ready_rx) = unbounded::<Ready>();
        let cell = parked_cell(1, &ready_tx);
        // Parked -> Ready: one Ready however many wakes and replies arrive.
        cell.wake(Instant::now());
        cell.wake(Instant::now());
        assert!(cell.routed(0, Routed::Reply(vec![0; 8])));
        assert_eq!(ready_rx.len(), 1, "one Ready for a ready cell");
        // The daemon stops: `abandon_all` takes the attempt out of Ready too.
        let parked = cell
            .state
            .lock()
            .phase
            .take(true)
            .expect("a ready cell is taken");
        let Ready(stale) = ready_rx.try_recv().unwrap();
        assert!(
            stale.take_ready().is_none(),
            "the stale Ready finds nothing"
        );
        // Ended, as `Driver::end` leaves it: never scheduled, never taken again.
        cell.state.lock().phase = Phase::Ended;
        drop(parked);
        cell.wake(Instant::now());
        assert!(cell.routed(1, Routed::Reply(vec![0; 8])));
        assert!(
            ready_rx.is_empty(),
            "an ended cell is never put on the channel"
        );
        assert!(cell.take_ready().is_none());
        assert!(cell.state.lock().phase.take(true).is_none());
    }

    #[test]
    fn replies_wakes_and_workers_racing_lose_nothing_and_never_share_a_cell() {
        let seed = setting("DRIVER_STRESS_SEED", 0x5EED_C0DE);
        let replies = setting("DRIVER_STRESS_REPLIES", 40_000);
        let (ready_tx, ready_rx) = unbounded::<Ready>();
        let cells: Vec<Arc<Cell>> = (0..16).map(|id| parked_cell(id, &ready_tx)).collect();
        let running: Vec<AtomicBool> = (0..16).map(|_| AtomicBool::new(false)).collect();
        let seen = Seen::default();
        let (routed, wakes) = (AtomicU64::new(0), AtomicU64::new(0));
        let producing = AtomicBool::new(true);
        std::thread::scope(|s| {
            // Two reader threads route replies to random cells and requests, a
            // quarter of them to cell 0: one hot cell, where a reply most often
            // races its worker's park.
            let readers: Vec<_> = (0..2u64)
                .map(|r| {
                    let (cells, routed) = (&cells, &routed);
                    s.spawn(move || {
                        let mut rng = Rng(seed ^ (r + 1));
                        for _ in 0..replies / 2 {
                            let hot = rng.below(4) == 0;
                            let cell = &cells[if hot { 0 } else { rng.below(16) }];
                            let tag = rng.below(3) as Tag;
                            let _ = cell.routed(tag, Routed::Reply(vec![0; 8]));
                            routed.fetch_add(1, Ordering::Relaxed);
                            if rng.below(64) == 0 {
                                std::thread::yield_now();
                            }
                        }
                    })
                })
                .collect();
            // The timer wakes random cells meanwhile.
            s.spawn(|| {
                let mut rng = Rng(seed ^ 0xA11);
                while producing.load(Ordering::Relaxed) {
                    cells[rng.below(16)].wake(Instant::now());
                    wakes.fetch_add(1, Ordering::Relaxed);
                    std::thread::yield_now();
                }
            });
            for w in 0..4u64 {
                let (cells, running, seen, ready_rx, producing) =
                    (&cells, &running, &seen, &ready_rx, &producing);
                s.spawn(move || {
                    worker(
                        cells,
                        running,
                        seen,
                        ready_rx,
                        producing,
                        Rng(seed ^ (0xB0 + w)),
                    )
                });
            }
            for reader in readers {
                reader.join().unwrap();
            }
            producing.store(false, Ordering::Relaxed);
        });
        let breaches = seen.breaches.lock().clone();
        assert!(
            breaches.is_empty(),
            "seed {seed:#x}: {} breaches, the first: {:?}",
            breaches.len(),
            &breaches[..breaches.len().min(5)]
        );
        let read = seen.read.load(Ordering::Relaxed);
        let dropped = seen.dropped.load(Ordering::Relaxed);
        assert_eq!(
            read + dropped,
            routed.load(Ordering::Relaxed),
            "seed {seed:#x}: every reply was read or told as dropped"
        );
        for cell in &cells {
            let state = cell.state.lock();
            assert!(
                matches!(state.phase, Phase::Parked(_)) && state.inbox.is_empty(),
                "seed {seed:#x}: cell {} left with something to do and nobody to do it",
                cell.id
            );
        }
        let woken = seen.woken.load(Ordering::Relaxed);
        assert!(
            woken >= 1 && woken <= wakes.load(Ordering::Relaxed),
            "{woken} wakes taken"
        );
    }
}

mod timer_tests {
    use super::*;

    #[test]
    fn stale_wakes_are_purged_once_they_outnumber_the_live_attempts() {
        let cells = Arc::new(Cells::default());
        // The timer without its thread, which would purge too, racing this test's
        // own purge (and leaving fewer stale wakes than the purge's threshold).
        let timer = Timer {
            heap: Mutex::new(BinaryHeap::new()),
            cells: Arc::clone(&cells),
            thread: std::sync::OnceLock::new(),
            stop: AtomicBool::new(false),
        };
        let (ready, _ready_rx) = unbounded();
        // One live attempt, waiting for a wake in an hour.
        let live = contract_tests::parked_cell(7, &ready);
        let at = Instant::now() + Duration::from_secs(3600);
        live.state.lock().inbox.wake = Some(at);
        cells.lock().insert(7, Arc::clone(&live));
        timer.schedule(at, 7);
        // Its earlier wake (replaced), and 5,000 of attempts that ended.
        timer.schedule(at - Duration::from_secs(10), 7);
        for id in 100..5_100 {
            timer.schedule(at, id);
        }
        timer.purge_if_stale();
        let left: Vec<(Instant, u64)> = timer.heap.lock().iter().map(|w| (w.0, w.1)).collect();
        assert_eq!(left, [(at, 7)], "only the live attempt's current wake");
    }
}
