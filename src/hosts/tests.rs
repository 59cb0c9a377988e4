//! Scheduler rules, exercised with an in-process provisioner whose outcomes the test
//! controls (the network paths are covered by the integration tests).

use super::*;
use crate::choria::rpc::RpcError;
use crossbeam_channel::{Receiver, Sender};
use std::collections::HashMap;

fn id(text: &str) -> Identity {
    Identity::parse(text).unwrap()
}

/// A provisioner whose attempts run to their end on the worker that begins them (no
/// parking): the scheduler's rules do not depend on how an attempt waits.
trait RunsToEnd: Send + Sync {
    fn provision(&self, identity: &Identity, since: Instant, stopping: &AtomicBool) -> Outcome;

    fn woken(&self) -> Vec<Identity> {
        Vec::new()
    }

    fn pass_on_wakes(&self, _n: usize) {}
}

impl<T: RunsToEnd> Provision for T {
    fn begin(&self, ticket: Ticket, stopping: &AtomicBool) -> Option<Finished> {
        let outcome = self.provision(&ticket.identity, ticket.since, stopping);
        Some(Finished {
            ticket,
            outcome,
            silent: false,
        })
    }

    fn ready(&self) -> Receiver<Ready> {
        crossbeam_channel::never()
    }

    fn resume(&self, _ready: Ready, _stopping: &AtomicBool) -> Option<Finished> {
        None
    }

    fn has_room(&self) -> bool {
        true
    }

    fn abandon_all(&self) -> Vec<Finished> {
        Vec::new()
    }

    fn waiting(&self) -> usize {
        0
    }

    fn upgrading(&self) -> Vec<(Identity, Instant)> {
        Vec::new()
    }

    fn woken(&self) -> Vec<Identity> {
        RunsToEnd::woken(self)
    }

    fn pass_on_wakes(&self, n: usize) {
        RunsToEnd::pass_on_wakes(self, n)
    }
}

/// Records every attempt; each identity's attempts wait for a go-ahead when gated.
struct Recorder {
    calls: Mutex<Vec<String>>,
    outcomes: Mutex<HashMap<String, Outcome>>,
    gate: Option<Receiver<()>>,
    started: Sender<String>,
    /// Upgrade turns, as `UpgradeSlots` keeps them: waiting in order, and woken.
    waiting: Mutex<std::collections::VecDeque<Identity>>,
    woken: Mutex<Vec<Identity>>,
}

impl RunsToEnd for Recorder {
    fn provision(&self, identity: &Identity, _since: Instant, stopping: &AtomicBool) -> Outcome {
        self.calls.lock().push(identity.to_string());
        let _ = self.started.send(identity.to_string());
        if let Some(gate) = &self.gate {
            while !stopping.load(Ordering::Relaxed) {
                if gate.recv_timeout(Duration::from_millis(10)).is_ok() {
                    break;
                }
            }
        }
        self.outcomes
            .lock()
            .get(identity.as_str())
            .cloned()
            .unwrap_or(Outcome::Done)
    }

    fn woken(&self) -> Vec<Identity> {
        std::mem::take(&mut *self.woken.lock())
    }

    fn pass_on_wakes(&self, n: usize) {
        let mut waiting = self.waiting.lock();
        let next = waiting.len().min(n);
        self.woken.lock().extend(waiting.drain(..next));
    }
}

struct Rig {
    fleet: Arc<Fleet>,
    recorder: Arc<Recorder>,
    started: Receiver<String>,
    release: Option<Sender<()>>,
}

fn rig(workers: usize, capacity: usize, cooldown: Duration, gated: bool) -> Rig {
    let rig = unstarted_rig(workers, capacity, cooldown, gated);
    rig.fleet.start();
    rig
}

/// A [`rig`] whose threads are not started: the test plays the worker and the
/// finisher.
fn unstarted_rig(workers: usize, capacity: usize, cooldown: Duration, gated: bool) -> Rig {
    let metrics = Arc::new(Metrics::new("test").unwrap());
    let pause = Arc::new(Pause::new(metrics.paused.clone()));
    let (release, gate) = crossbeam_channel::unbounded();
    let (started_tx, started) = crossbeam_channel::unbounded();
    let recorder = Arc::new(Recorder {
        calls: Mutex::new(Vec::new()),
        outcomes: Mutex::new(HashMap::new()),
        gate: gated.then_some(gate),
        started: started_tx,
        waiting: Mutex::new(Default::default()),
        woken: Mutex::new(Vec::new()),
    });
    let fleet = Fleet::new(
        FleetOptions {
            workers,
            capacity,
            cooldown,
            shutdown_timeout: Duration::from_secs(2),
            lock_window: Duration::from_secs(1),
            silent_cooldown: Duration::from_secs(1),
        },
        metrics,
        pause,
        Arc::clone(&recorder) as Arc<dyn Provision>,
    );
    Rig {
        fleet,
        recorder,
        started,
        release: gated.then_some(release),
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn an_identity_is_queued_at_most_once_until_finished() {
    let r = rig(1, 10, Duration::from_secs(60), true);
    assert_eq!(r.fleet.add(&id("n1"), Source::Discovery), AddResult::Added);
    assert_eq!(r.fleet.add(&id("n1"), Source::Event), AddResult::Known);
    r.started.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(
        r.fleet.add(&id("n1"), Source::Discovery),
        AddResult::Known,
        "in progress"
    );
    r.release.as_ref().unwrap().send(()).unwrap();
    wait_until("provisioned", || r.fleet.metrics().provisioned.get() == 1);
    assert_eq!(
        r.fleet.add(&id("n1"), Source::Discovery),
        AddResult::Known,
        "cooling down"
    );
    assert_eq!(r.recorder.calls.lock().len(), 1);
    assert_eq!(r.fleet.metrics().discovered.get(), 1);
    assert_eq!(r.fleet.metrics().event_discovered.get(), 0);
    r.fleet.stop();
}

#[test]
fn the_cooldown_ends_and_the_node_can_come_back() {
    let r = rig(1, 10, Duration::from_millis(100), false);
    r.fleet.add(&id("n1"), Source::Discovery);
    wait_until("provisioned", || r.fleet.metrics().provisioned.get() == 1);
    assert!(r.fleet.is_known("n1"));
    wait_until("forgotten after the cool-down", || !r.fleet.is_known("n1"));
    assert_eq!(r.fleet.add(&id("n1"), Source::Event), AddResult::Added);
    wait_until("provisioned again", || {
        r.fleet.metrics().provisioned.get() == 2
    });
    assert_eq!(r.fleet.metrics().event_discovered.get(), 1);
    r.fleet.stop();
}

/// A fleet whose threads are not started: the test plays the worker and the finisher.
fn unstarted(cooldown: Duration) -> Arc<Fleet> {
    unstarted_rig(1, 10, cooldown, false).fleet
}

#[test]
fn a_cool_down_that_ran_out_is_over_before_the_finisher_forgets_it() {
    let fleet = unstarted(Duration::from_millis(50));
    assert_eq!(fleet.add(&id("n1"), Source::Discovery), AddResult::Added);
    let job = fleet.work_rx.try_recv().unwrap();
    assert!(fleet.begin(&job).is_some());
    fleet.finish(&job, &Outcome::Done, false);
    assert_eq!(
        fleet.add(&id("n1"), Source::Discovery),
        AddResult::Known,
        "cooling down"
    );
    std::thread::sleep(Duration::from_millis(60));
    // No finisher runs here: the entry is still in the map, its cool-down over.
    assert!(fleet.is_known("n1"));
    assert_eq!(
        fleet.add(&id("n1"), Source::Discovery),
        AddResult::Added,
        "queued again as soon as the cool-down ran out"
    );
    let again = fleet.work_rx.try_recv().unwrap();
    assert_ne!(again.generation, job.generation);
    // The finisher's late finish names the old generation: the new entry stays.
    let finish = fleet.done_rx.try_recv().unwrap();
    assert_eq!(finish.generation, job.generation);
    let mut due = vec![(finish.generation, finish.identity, finish.then)];
    fleet.cooled_down(&mut due);
    assert!(due.is_empty());
    assert!(fleet.is_known("n1"), "the new generation is not forgotten");
    assert!(fleet.begin(&again).is_some(), "and is still queued");
}

#[test]
fn one_batch_forgets_only_the_entries_at_their_generation_and_offers_the_locked_ones() {
    let fleet = unstarted(Duration::from_secs(60));
    for name in ["a", "b", "c"] {
        assert_eq!(fleet.add(&id(name), Source::Discovery), AddResult::Added);
    }
    let jobs: Vec<Job> = fleet.work_rx.try_iter().collect();
    let generation = |name: &str| {
        jobs.iter()
            .find(|j| j.identity.as_str() == name)
            .unwrap()
            .generation
    };
    let mut due = vec![
        (generation("a"), id("a"), AfterCoolDown::Forget),
        (generation("b") + 100, id("b"), AfterCoolDown::Forget),
        (generation("c"), id("c"), AfterCoolDown::Offer),
        (1_000, id("unknown"), AfterCoolDown::Offer),
    ];
    fleet.cooled_down(&mut due);
    assert!(!fleet.is_known("a"), "forgotten");
    assert!(fleet.is_known("b"), "another generation: kept");
    assert!(fleet.is_known("c"), "offered again");
    assert!(
        !fleet.is_known("unknown"),
        "nothing offered that was not there"
    );
    let offered: Vec<Job> = fleet.work_rx.try_iter().collect();
    assert_eq!(offered.len(), 1);
    assert_eq!(offered[0].identity.as_str(), "c");
    assert_ne!(offered[0].generation, generation("c"));
    assert_eq!(
        fleet.metrics().waiting_nodes.get(),
        2,
        "gauges updated once for the batch"
    );
}

#[test]
fn the_finisher_wakes_at_most_four_times_a_second_at_the_default_cool_down() {
    assert_eq!(
        finisher::slack(COOLDOWN.min(LOCK_WINDOW)),
        Duration::from_millis(250)
    );
    assert_eq!(
        finisher::slack(Duration::from_secs(6400)),
        Duration::from_millis(250)
    );
    assert_eq!(
        finisher::slack(Duration::from_secs(32)),
        Duration::from_millis(500) / 2
    );
    assert_eq!(
        finisher::slack(Duration::from_secs(8)),
        Duration::from_millis(125)
    );
    assert_eq!(
        finisher::slack(Duration::from_millis(100)),
        Duration::from_millis(10)
    );
    assert_eq!(finisher::slack(Duration::ZERO), Duration::from_millis(10));
}

#[test]
fn failures_and_upgrades_are_forgotten_at_once() {
    let r = rig(1, 10, Duration::from_secs(600), false);
    r.recorder
        .outcomes
        .lock()
        .insert("bad".into(), Outcome::Failed("boom".into()));
    r.recorder
        .outcomes
        .lock()
        .insert("up".into(), Outcome::Upgraded);
    r.recorder
        .outcomes
        .lock()
        .insert("later".into(), Outcome::Deferred("cmdb".into()));
    for id in ["bad", "up", "later"] {
        r.fleet.add(&self::id(id), Source::Discovery);
    }
    wait_until("all attempted", || {
        !r.fleet.is_known("bad") && !r.fleet.is_known("up") && !r.fleet.is_known("later")
    });
    let m = r.fleet.metrics();
    assert_eq!(m.provision_errors.get(), 2, "failed and deferred");
    assert_eq!(m.provisioned.get(), 1, "the upgrade counts as provisioned");
    r.fleet.stop();
}

#[test]
fn a_full_queue_refuses_without_losing_the_node() {
    let r = rig(1, 2, Duration::from_millis(10), true);
    r.fleet.add(&id("busy"), Source::Discovery);
    r.started.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(r.fleet.add(&id("a"), Source::Discovery), AddResult::Added);
    assert_eq!(r.fleet.add(&id("b"), Source::Discovery), AddResult::Added);
    assert_eq!(
        r.fleet.add(&id("c"), Source::Discovery),
        AddResult::QueueFull
    );
    assert!(
        !r.fleet.is_known("c"),
        "not kept, so the next discovery retries it"
    );
    assert_eq!(r.fleet.take_queue_full(), 1);
    assert_eq!(r.fleet.take_queue_full(), 0);
    assert_eq!(
        r.fleet.metrics().discovered.get(),
        3,
        "the refused one is not counted"
    );
    assert_eq!(r.fleet.metrics().work_queue_entries.get(), 2);
    assert_eq!(r.fleet.metrics().waiting_nodes.get(), 3);
    for _ in 0..3 {
        r.release.as_ref().unwrap().send(()).unwrap();
    }
    wait_until("queue drained", || r.fleet.queued() == 0);
    assert_eq!(r.fleet.add(&id("c"), Source::Discovery), AddResult::Added);
    r.release.as_ref().unwrap().send(()).unwrap();
    wait_until("all four provisioned", || {
        r.fleet.metrics().provisioned.get() == 4
    });
    r.fleet.stop();
}

#[test]
fn gauges_follow_the_queue_as_workers_take_from_it() {
    let r = rig(1, 10, Duration::from_secs(60), true);
    for id in ["a", "b", "c"] {
        r.fleet.add(&self::id(id), Source::Discovery);
    }
    r.started.recv_timeout(Duration::from_secs(5)).unwrap();
    wait_until("one dequeued", || {
        r.fleet.metrics().work_queue_entries.get() == 2
    });
    assert_eq!(r.fleet.metrics().busy_workers.get(), 1);
    assert_eq!(r.fleet.metrics().waiting_nodes.get(), 3);
    r.fleet.stop();
}

#[test]
fn remove_all_forgets_everything_and_a_late_finish_keeps_the_new_entry() {
    let r = rig(1, 10, Duration::from_millis(50), true);
    r.fleet.add(&id("n1"), Source::Discovery);
    r.fleet.add(&id("n2"), Source::Discovery);
    r.started.recv_timeout(Duration::from_secs(5)).unwrap();
    r.fleet.remove_all();
    assert_eq!(r.fleet.known(), 0);
    assert_eq!(r.fleet.queued(), 0);
    assert_eq!(r.fleet.metrics().waiting_nodes.get(), 0);
    // n1 is re-added while its old attempt is still running: a new generation.
    assert_eq!(r.fleet.add(&id("n1"), Source::Event), AddResult::Added);
    r.recorder
        .outcomes
        .lock()
        .insert("n1".into(), Outcome::Failed("old attempt".into()));
    r.release.as_ref().unwrap().send(()).unwrap();
    wait_until("old attempt finished", || {
        r.fleet.metrics().provision_errors.get() == 1
    });
    assert!(
        r.fleet.is_known("n1"),
        "the old attempt's finish must not remove the new entry"
    );
    r.recorder.outcomes.lock().remove("n1");
    r.release.as_ref().unwrap().send(()).unwrap();
    wait_until("new attempt done", || {
        r.fleet.metrics().provisioned.get() == 1
    });
    assert_eq!(
        *r.recorder.calls.lock(),
        ["n1", "n1"],
        "n2 was dropped by remove_all"
    );
    r.fleet.stop();
}

#[test]
fn stop_waits_for_in_flight_nodes_within_the_bound() {
    let r = rig(2, 10, Duration::from_secs(60), true);
    r.fleet.add(&id("n1"), Source::Discovery);
    r.started.recv_timeout(Duration::from_secs(5)).unwrap();
    let started = Instant::now();
    assert!(
        r.fleet.stop(),
        "the provisioner sees `stopping` and returns"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(
        r.fleet.add(&id("n2"), Source::Discovery),
        AddResult::Stopping
    );
}

#[test]
fn two_fleets_in_one_process_are_independent() {
    let a = rig(1, 10, Duration::from_secs(60), false);
    let b = rig(1, 10, Duration::from_secs(60), false);
    a.fleet.add(&id("n1"), Source::Discovery);
    wait_until("a provisioned", || a.fleet.metrics().provisioned.get() == 1);
    assert_eq!(b.fleet.add(&id("n1"), Source::Discovery), AddResult::Added);
    wait_until("b provisioned", || b.fleet.metrics().provisioned.get() == 1);
    assert_eq!(a.fleet.metrics().provisioned.get(), 1);
    a.fleet.stop();
    b.fleet.stop();
}

struct FixedDiscovery(Result<Vec<Identity>, RpcError>);

impl discovery::Discover for FixedDiscovery {
    fn discover(&self) -> Result<Vec<Identity>, RpcError> {
        self.0.clone()
    }
}

#[test]
fn a_discovery_cycle_counts_and_queues_each_identity_once() {
    let r = rig(1, 10, Duration::from_secs(60), true);
    let found = FixedDiscovery(Ok(vec![id("a"), id("b"), id("a")]));
    discovery::cycle(&r.fleet, &found);
    let m = r.fleet.metrics();
    assert_eq!(m.discover_cycles.get(), 1);
    assert_eq!(m.discovered.get(), 2, "duplicates are not counted twice");
    discovery::cycle(
        &r.fleet,
        &FixedDiscovery(Err(RpcError::Publish("no brokers".into()))),
    );
    assert_eq!(m.discover_cycles.get(), 2);
    assert_eq!(m.discovery_errors.get(), 1);
    r.fleet.pause().pause();
    discovery::cycle(&r.fleet, &found);
    assert_eq!(
        m.discover_cycles.get(),
        2,
        "paused cycles are skipped, not counted"
    );
    assert_eq!(m.paused.get(), 1);
    r.fleet.stop();
}

#[test]
fn the_discovery_loop_runs_at_once_and_on_trigger() {
    let r = rig(1, 10, Duration::from_secs(60), true);
    let fleet = Arc::clone(&r.fleet);
    let (trigger_tx, trigger) = crossbeam_channel::bounded(1);
    let loop_thread = std::thread::spawn(move || {
        let found = FixedDiscovery(Ok(vec![id("a")]));
        discovery::run(&fleet, &found, Duration::from_secs(3600), &trigger)
    });
    wait_until("first cycle at start", || {
        r.fleet.metrics().discover_cycles.get() == 1
    });
    trigger_tx.send(()).unwrap();
    wait_until("triggered cycle", || {
        r.fleet.metrics().discover_cycles.get() == 2
    });
    r.fleet.stop();
    loop_thread.join().unwrap();
}

/// Finds `per_call` identities never seen before on every call, and records when.
struct EndlessDiscovery {
    per_call: usize,
    calls: Mutex<Vec<Instant>>,
}

impl discovery::Discover for EndlessDiscovery {
    fn discover(&self) -> Result<Vec<Identity>, RpcError> {
        let mut calls = self.calls.lock();
        let first = calls.len() * self.per_call;
        calls.push(Instant::now());
        Ok((first..first + self.per_call)
            .map(|n| id(&format!("n{n}")))
            .collect())
    }
}

fn quick(min_gap_ms: u64) -> discovery::Rediscovery {
    discovery::Rediscovery {
        min_gap: Duration::from_millis(min_gap_ms),
        poll: Duration::from_millis(5),
    }
}

#[test]
fn an_overflowing_discovery_is_followed_once_the_queue_is_half_empty() {
    // One gated worker, busy with a node, and a queue of 4: the first discovery's 10
    // nodes do not fit.
    let r = rig(1, 4, Duration::from_secs(60), true);
    r.fleet.add(&id("busy"), Source::Event);
    assert_eq!(
        r.started.recv_timeout(Duration::from_secs(5)).unwrap(),
        "busy"
    );
    let fleet = Arc::clone(&r.fleet);
    let (_trigger_tx, trigger) = crossbeam_channel::bounded(1);
    let loop_thread = std::thread::spawn(move || {
        let found = FixedDiscovery(Ok((0..10).map(|n| id(&format!("n{n}"))).collect()));
        discovery::run_with(
            &fleet,
            &found,
            Duration::from_secs(3600),
            &trigger,
            quick(50),
        )
    });
    let cycles = || r.fleet.metrics().discover_cycles.get();
    let discovered = || r.fleet.metrics().discovered.get();
    wait_until("the first discovery", || discovered() == 4);
    assert_eq!(r.fleet.queued(), 4);
    // Far beyond the gap, but the queue is still full: nothing is discovered.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(cycles(), 1, "no early discovery while the queue is full");
    // One node done: 3 of 4 queued, still more than half.
    let release = r.release.as_ref().unwrap();
    release.send(()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        cycles(),
        1,
        "no early discovery while the queue is over half full"
    );
    // Another: 2 of 4, and the next discovery comes at once, an hour before the
    // interval, and fills the queue again with 2 of the 6 left out.
    release.send(()).unwrap();
    wait_until("the early discovery", || discovered() == 6);
    assert_eq!(cycles(), 2);
    assert_eq!(r.fleet.queued(), 4);
    r.fleet.stop();
    loop_thread.join().unwrap();
}

#[test]
fn early_discoveries_come_at_most_once_per_min_gap() {
    // Every discovery overflows a queue of 2 that two quick workers empty at once: only
    // the gap holds the loop back.
    let r = rig(2, 2, Duration::from_secs(60), false);
    let fleet = Arc::clone(&r.fleet);
    let found = Arc::new(EndlessDiscovery {
        per_call: 10,
        calls: Mutex::new(Vec::new()),
    });
    let (_trigger_tx, trigger) = crossbeam_channel::bounded(1);
    let discoverer = Arc::clone(&found);
    let gap = Duration::from_millis(150);
    let loop_thread = std::thread::spawn(move || {
        discovery::run_with(
            &fleet,
            &*discoverer,
            Duration::from_secs(3600),
            &trigger,
            quick(gap.as_millis() as u64),
        )
    });
    std::thread::sleep(Duration::from_millis(1000));
    r.fleet.stop();
    loop_thread.join().unwrap();
    let calls = found.calls.lock().clone();
    assert!(
        calls.len() >= 3,
        "overflowing discoveries repeat before the interval: {} calls",
        calls.len()
    );
    assert!(calls.len() <= 1 + 1000 / 150, "{} calls", calls.len());
    for pair in calls.windows(2) {
        assert!(
            pair[1] - pair[0] >= gap,
            "{:?} between two discoveries",
            pair[1] - pair[0]
        );
    }
}

#[test]
fn a_discovery_that_fits_waits_for_the_interval() {
    let r = rig(2, 100, Duration::from_secs(60), false);
    let fleet = Arc::clone(&r.fleet);
    let (_trigger_tx, trigger) = crossbeam_channel::bounded(1);
    let loop_thread = std::thread::spawn(move || {
        let found = FixedDiscovery(Ok(vec![id("a"), id("b")]));
        discovery::run_with(
            &fleet,
            &found,
            Duration::from_secs(3600),
            &trigger,
            quick(1),
        )
    });
    wait_until("both provisioned", || {
        r.fleet.metrics().provisioned.get() == 2
    });
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(r.fleet.metrics().discover_cycles.get(), 1);
    r.fleet.stop();
    loop_thread.join().unwrap();
}

#[test]
fn startup_events_queue_nodes_unless_paused() {
    let r = rig(1, 10, Duration::from_secs(60), true);
    let fleet = Arc::clone(&r.fleet);
    let (tx, rx) = crossbeam_channel::unbounded::<Identity>();
    let listener = std::thread::spawn(move || events::run(&fleet, &rx));
    tx.send(id("n1")).unwrap();
    wait_until("event queued", || {
        r.fleet.metrics().event_discovered.get() == 1
    });
    r.fleet.pause().pause();
    tx.send(id("n2")).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(!r.fleet.is_known("n2"), "dropped while paused");
    r.fleet.pause().resume();
    tx.send(id("n3")).unwrap();
    wait_until("event queued after resume", || {
        r.fleet.metrics().event_discovered.get() == 2
    });
    drop(tx);
    listener.join().unwrap();
    r.fleet.stop();
}

/// Panics for one identity, provisions the others.
struct PanicsFor(&'static str, Mutex<Vec<String>>);

impl RunsToEnd for PanicsFor {
    fn provision(&self, identity: &Identity, _since: Instant, _stopping: &AtomicBool) -> Outcome {
        self.1.lock().push(identity.to_string());
        if identity.as_str() == self.0 {
            panic!("index out of bounds: the len is 3 but the index is 7");
        }
        Outcome::Done
    }
}

#[test]
fn a_panic_in_one_attempt_fails_that_node_and_the_worker_goes_on() {
    let metrics = Arc::new(Metrics::new("test").unwrap());
    let pause = Arc::new(Pause::new(metrics.paused.clone()));
    let provisioner = Arc::new(PanicsFor("boom", Mutex::new(Vec::new())));
    // One worker: the nodes after the panic can only be provisioned by the same one.
    let fleet = Fleet::new(
        FleetOptions {
            workers: 1,
            capacity: 10,
            cooldown: Duration::from_secs(60),
            ..FleetOptions::default()
        },
        Arc::clone(&metrics),
        pause,
        Arc::clone(&provisioner) as Arc<dyn Provision>,
    );
    for id in ["a", "boom", "b", "c"] {
        assert_eq!(
            fleet.add(&self::id(id), Source::Discovery),
            AddResult::Added
        );
    }
    fleet.start();
    wait_until("the others provisioned", || metrics.provisioned.get() == 3);
    assert_eq!(metrics.provision_errors.get(), 1, "the panic is counted");
    assert_eq!(metrics.busy_workers.get(), 0, "busy_workers restored");
    assert!(
        !fleet.is_known("boom"),
        "finished as failed: forgotten at once, so it can be tried again"
    );
    assert_eq!(*provisioner.1.lock(), ["a", "boom", "b", "c"]);
    // The worker is still alive for new work.
    assert_eq!(fleet.add(&id("boom"), Source::Event), AddResult::Added);
    assert_eq!(fleet.add(&id("d"), Source::Event), AddResult::Added);
    wait_until("d provisioned", || metrics.provisioned.get() == 4);
    assert_eq!(metrics.provision_errors.get(), 2);
    assert!(fleet.stop(), "the worker thread ends normally");
}

#[test]
fn a_panic_becomes_a_failure_naming_the_node_and_the_message() {
    let payload = std::panic::catch_unwind(|| panic!("bad {} state", "seq")).unwrap_err();
    assert_eq!(
        crate::host::driver::panicked("n1.example.net", payload.as_ref()),
        Outcome::Failed("provisioning n1.example.net panicked: bad seq state".into())
    );
    let payload = std::panic::catch_unwind(|| panic!("static\nmessage")).unwrap_err();
    assert_eq!(
        crate::host::driver::panicked("n1", payload.as_ref()),
        Outcome::Failed("provisioning n1 panicked: static\\nmessage".into()),
        "escaped: one log line"
    );
    let payload = std::panic::catch_unwind(|| std::panic::panic_any(42u8)).unwrap_err();
    assert_eq!(
        crate::host::driver::panicked("n1", payload.as_ref()),
        Outcome::Failed("provisioning n1 panicked: a panic without a message".into())
    );
    let long = "x".repeat(2000);
    let payload = std::panic::catch_unwind(|| panic!("{long}")).unwrap_err();
    let Outcome::Failed(text) = crate::host::driver::panicked("n1", payload.as_ref()) else {
        unreachable!()
    };
    assert!(text.len() < 600 && text.ends_with("..."), "{}", text.len());
}

#[test]
fn the_release_profile_unwinds_so_that_workers_can_catch_panics() {
    let manifest = include_str!("../../Cargo.toml");
    let release = manifest
        .split("[profile.release]")
        .nth(1)
        .expect("a release profile")
        .split("\n[")
        .next()
        .unwrap();
    assert!(
        release.lines().any(|l| l.trim() == "panic = \"unwind\""),
        "panic = \"abort\" would turn a caught panic into a dead daemon:\n{release}"
    );
}

/// Owns the identities in its set (active-active's question, answered by the test).
struct Owns(Mutex<std::collections::HashSet<String>>);

impl Ownership for Owns {
    fn owns(&self, identity: &Identity) -> bool {
        self.0.lock().contains(identity.as_str())
    }
}

#[test]
fn another_instance_s_node_is_not_queued_and_a_disowned_one_is_dropped_by_its_worker() {
    let r = rig(1, 10, Duration::from_secs(60), true);
    let owns = Arc::new(Owns(Mutex::new(
        ["n1", "n2"].iter().map(|s| s.to_string()).collect(),
    )));
    r.fleet
        .set_ownership(Arc::clone(&owns) as Arc<dyn Ownership>);
    assert_eq!(
        r.fleet.add(&id("n9"), Source::Discovery),
        AddResult::NotOurs
    );
    assert!(!r.fleet.is_known("n9"));
    assert_eq!(r.fleet.metrics().discovered.get(), 0, "not counted");
    assert_eq!(r.fleet.add(&id("n1"), Source::Discovery), AddResult::Added);
    r.started.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(r.fleet.working(), 1);
    assert_eq!(r.fleet.add(&id("n2"), Source::Event), AddResult::Added);
    assert_eq!(r.fleet.queued_identities(), vec![id("n2")]);
    // The live set changes while n2 waits: it is another instance's now.
    owns.0.lock().remove("n2");
    r.release.as_ref().unwrap().send(()).unwrap();
    wait_until("n2 dropped", || !r.fleet.is_known("n2"));
    assert_eq!(*r.recorder.calls.lock(), ["n1"]);
    assert_eq!(r.fleet.metrics().provision_errors.get(), 0);
    r.fleet.stop();
}

#[test]
fn a_woken_node_that_is_another_instance_s_now_passes_its_turn_on() {
    let r = rig(1, 10, Duration::from_secs(60), false);
    let owns = Arc::new(Owns(Mutex::new(
        ["n1", "n3"].iter().map(|s| s.to_string()).collect(),
    )));
    r.fleet
        .set_ownership(Arc::clone(&owns) as Arc<dyn Ownership>);
    // n1's attempt gives an upgrade slot back: n2 is woken, but another instance
    // owns n2 now, so the turn goes to n3, which is queued and provisioned.
    *r.recorder.woken.lock() = vec![id("n2")];
    r.recorder.waiting.lock().push_back(id("n3"));
    assert_eq!(r.fleet.add(&id("n1"), Source::Discovery), AddResult::Added);
    let m = Arc::clone(r.fleet.metrics());
    wait_until("n1 and n3 provisioned", || m.provisioned.get() == 2);
    assert_eq!(*r.recorder.calls.lock(), ["n1", "n3"]);
    assert!(!r.fleet.is_known("n2"), "n2 is not queued here");
    assert!(r.recorder.waiting.lock().is_empty());
    r.fleet.stop();
}

#[test]
fn a_locked_node_is_left_alone_for_the_lock_window_then_offered_again_without_an_error() {
    let r = rig(1, 10, Duration::from_secs(60), false);
    r.recorder.outcomes.lock().insert(
        "n1".into(),
        Outcome::Locked("n1: Could not obtain provisioning lock".into()),
    );
    assert_eq!(r.fleet.add(&id("n1"), Source::Discovery), AddResult::Added);
    r.started.recv_timeout(Duration::from_secs(5)).unwrap();
    let first = Instant::now();
    let m = Arc::clone(r.fleet.metrics());
    wait_until("locked outcome", || {
        m.outcomes.with_label_values(&["locked"]).get() == 1
    });
    // Within the window the node stays known: a discovery does not queue it again.
    assert_eq!(r.fleet.add(&id("n1"), Source::Discovery), AddResult::Known);
    assert_eq!(m.provision_errors.get(), 0);
    assert_eq!(m.provisioned.get(), 0);
    // The holder went away: once the window has passed the node is offered again
    // without any discovery or event (the lock has run out, anyone may finish it).
    r.recorder.outcomes.lock().remove("n1");
    r.started.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        first.elapsed() >= Duration::from_secs(1),
        "offered again after {:?}, inside the 1 s lock window",
        first.elapsed()
    );
    wait_until("provisioned", || m.provisioned.get() == 1);
    assert_eq!(*r.recorder.calls.lock(), ["n1", "n1"]);
    assert_eq!(m.discovered.get(), 1, "the second offer is not a discovery");
    assert_eq!(m.provision_errors.get(), 0);
    r.fleet.stop();
}

#[test]
fn a_locked_node_that_is_no_longer_ours_when_its_window_ends_is_forgotten() {
    let r = rig(1, 10, Duration::from_secs(60), false);
    let owns = Arc::new(Owns(Mutex::new(
        ["n1"].iter().map(|s| s.to_string()).collect(),
    )));
    r.fleet
        .set_ownership(Arc::clone(&owns) as Arc<dyn Ownership>);
    r.recorder.outcomes.lock().insert(
        "n1".into(),
        Outcome::Locked("n1: Could not obtain provisioning lock".into()),
    );
    assert_eq!(r.fleet.add(&id("n1"), Source::Discovery), AddResult::Added);
    let m = Arc::clone(r.fleet.metrics());
    wait_until("locked outcome", || {
        m.outcomes.with_label_values(&["locked"]).get() == 1
    });
    // The live set changes during the window: another instance owns n1 now.
    owns.0.lock().clear();
    wait_until("forgotten after the window", || !r.fleet.is_known("n1"));
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !r.fleet.is_known("n1"),
        "not offered to this instance again"
    );
    assert_eq!(*r.recorder.calls.lock(), ["n1"]);
    assert_eq!(m.provision_errors.get(), 0);
    r.fleet.stop();
}

#[test]
fn node_status_shows_queued_in_flight_cooling_down_and_finished_nodes() {
    use crate::metrics::{NodeLookup, NodeStatus};
    let r = rig(1, 10, Duration::from_secs(60), true);
    let status = status::FleetStatus(Arc::clone(&r.fleet));
    for n in ["n1", "n2", "n3"] {
        r.fleet.add(&id(n), Source::Discovery);
    }
    r.started.recv_timeout(Duration::from_secs(5)).unwrap();
    let doc = status.nodes();
    assert_eq!(doc["in_flight"][0]["identity"], "n1", "{doc}");
    assert_eq!(doc["in_flight"][0]["step"], "start");
    assert_eq!(doc["in_flight"][0]["attempt"], 1);
    let queued: Vec<(String, u64)> = doc["queued"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["identity"].as_str().unwrap().to_string(),
                v["position"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut queued = queued;
    queued.sort();
    assert_eq!(
        queued,
        [("n2".into(), 1), ("n3".into(), 2)],
        "first in, first out"
    );
    r.recorder
        .outcomes
        .lock()
        .insert("n2".into(), Outcome::Failed("boom".into()));
    for _ in 0..3 {
        r.release.as_ref().unwrap().send(()).unwrap();
    }
    wait_until("all finished", || {
        status.nodes()["recent"].as_array().unwrap().len() == 3
    });
    let doc = status.nodes();
    assert_eq!(doc["cooling_down"].as_array().unwrap().len(), 2, "{doc}");
    let NodeLookup::Found(n2) = status.node("n2") else {
        panic!("n2 is known by its history");
    };
    assert_eq!(n2["state"], "finished");
    assert_eq!(n2["recent"][0]["outcome"], "failed");
    assert_eq!(n2["recent"][0]["error"], "boom");
    let NodeLookup::Found(n1) = status.node("n1") else {
        panic!("n1 cools down");
    };
    assert_eq!(n1["state"], "cooling_down");
    assert!(n1["until"].as_str().unwrap().ends_with('Z'));
    assert_eq!(status.node("n9"), NodeLookup::Unknown);
    assert!(matches!(status.node("bad..name"), NodeLookup::Invalid(_)));
    r.fleet.stop();
}
