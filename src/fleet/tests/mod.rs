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
    let options = FleetOptions {
        workers,
        capacity,
        cooldown,
        shutdown_timeout: Duration::from_secs(2),
        lock_window: Duration::from_secs(1),
        silent_cooldown: Duration::from_secs(1),
        identity_policy: None,
    };
    unstarted_rig_with(options, gated)
}

/// [`unstarted_rig`] with `options` as they are.
fn unstarted_rig_with(options: FleetOptions, gated: bool) -> Rig {
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
        options,
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
    // The finisher's late walk finds the new generation queued: it stays.
    fleet.cooled_down(Instant::now());
    assert!(fleet.is_known("n1"), "the new generation is not forgotten");
    assert!(fleet.begin(&again).is_some(), "and is still queued");
}

#[test]
fn one_walk_forgets_only_the_entries_whose_cool_down_ran_out_and_offers_the_locked_ones() {
    // Cool-downs: 60 s after success, 1 s after a silent failure, a lock window of 1 s.
    let fleet = unstarted(Duration::from_secs(60));
    for name in ["done", "silent", "locked", "working"] {
        assert_eq!(fleet.add(&id(name), Source::Discovery), AddResult::Added);
    }
    let jobs: Vec<Job> = fleet.work_rx.try_iter().collect();
    let job = |name: &str| jobs.iter().find(|j| j.identity.as_str() == name).unwrap();
    for j in &jobs {
        assert!(fleet.begin(j).is_some());
    }
    assert_eq!(fleet.next_cool_down(), None, "nothing cools down yet");
    let before = Instant::now();
    fleet.finish(job("done"), &Outcome::Done, false);
    fleet.finish(job("silent"), &Outcome::Failed("no reply".into()), true);
    fleet.finish(job("locked"), &Outcome::Locked("held".into()), false);
    let next = fleet.next_cool_down().expect("the earliest cool-down");
    assert!(next >= before + Duration::from_secs(1) && next < before + Duration::from_secs(2));

    // Nothing is due yet: the walk forgets nothing.
    fleet.cooled_down(Instant::now());
    assert_eq!(fleet.metrics().waiting_nodes.get(), 4);

    fleet.cooled_down(Instant::now() + Duration::from_secs(2));
    assert!(fleet.is_known("done"), "still cooling down");
    assert!(!fleet.is_known("silent"), "forgotten");
    assert!(
        fleet.is_known("working"),
        "an attempt under way is never touched"
    );
    let offered: Vec<Job> = fleet.work_rx.try_iter().collect();
    assert_eq!(offered.len(), 1);
    assert_eq!(offered[0].identity.as_str(), "locked", "offered again");
    assert_ne!(offered[0].generation, job("locked").generation);
    assert_eq!(fleet.metrics().waiting_nodes.get(), 3);
    let next = fleet
        .next_cool_down()
        .expect("the success's cool-down is left");
    assert!(
        next >= before + Duration::from_secs(60),
        "recomputed by the walk"
    );
}

#[test]
fn a_node_silent_while_the_connection_recovers_is_forgotten_at_once_not_struck() {
    use crate::choria::connector::ConnectionState;
    let long_ago = Instant::now().checked_sub(RECOVERY_WINDOW + Duration::from_secs(1));
    let cases = [
        ("disconnected", ConnectionState::as_if(false, None), false),
        (
            "just reconnected",
            ConnectionState::as_if(true, Some(Instant::now())),
            false,
        ),
        (
            "reconnected long ago",
            ConnectionState::as_if(true, long_ago),
            true,
        ),
        ("never away", ConnectionState::as_if(true, None), true),
    ];
    for (case, state, struck) in cases {
        let fleet = unstarted(Duration::from_secs(60));
        fleet.set_connection(Arc::new(state));
        assert_eq!(fleet.add(&id("quiet"), Source::Discovery), AddResult::Added);
        let job = fleet.work_rx.try_recv().unwrap();
        assert!(fleet.begin(&job).is_some());
        fleet.finish(&job, &Outcome::Failed("no reply".into()), true);
        assert_eq!(fleet.is_known("quiet"), struck, "{case}");
        assert_eq!(
            fleet.add(&id("quiet"), Source::Discovery) == AddResult::Added,
            !struck,
            "{case}: a discovery that finds it queues it again only when not struck"
        );
        assert_eq!(
            fleet.silent.lock().contains_key(&id("quiet")),
            struck,
            "{case}: counted among the silent only when struck"
        );
    }
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

mod discovery_and_instances;

#[test]
fn confirmed_nodes_go_before_announced_ones_and_a_discovery_confirms_an_announced_one() {
    // A queue of 10: the announced lane holds a fifth of it, 2.
    let r = unstarted_rig(1, 10, Duration::from_secs(60), false);
    for n in ["e1", "e2"] {
        assert_eq!(r.fleet.add(&id(n), Source::Event), AddResult::Added);
    }
    assert_eq!(
        r.fleet.add(&id("e3"), Source::Event),
        AddResult::QueueFull,
        "the announced lane is full; the confirmed one is not"
    );
    assert_eq!(r.fleet.add(&id("d1"), Source::Discovery), AddResult::Added);
    // A discovery finds e2, announced before: it moves to the confirmed lane.
    assert_eq!(r.fleet.add(&id("e2"), Source::Discovery), AddResult::Known);
    assert_eq!(
        r.fleet.queued(),
        4,
        "e2's announced job stays, stale, until taken"
    );
    r.fleet.start();
    wait_until("all provisioned", || r.recorder.calls.lock().len() == 3);
    assert_eq!(*r.recorder.calls.lock(), ["d1", "e2", "e1"]);
    r.fleet.stop();
}

#[test]
fn an_identity_the_policy_refuses_is_never_queued_and_is_counted() {
    let policy = IdentityPolicy::new(&[r"\.example\.net$".into()], &["^ghost-".into()]);
    let r = unstarted_rig_with(
        FleetOptions {
            identity_policy: policy.map(Arc::new),
            ..FleetOptions::default()
        },
        false,
    );
    let (fleet, metrics) = (&r.fleet, r.fleet.metrics());
    for (name, source) in [
        ("ghost-1.example.net", Source::Event),
        ("web1.example.org", Source::Discovery),
    ] {
        assert_eq!(fleet.add(&id(name), source), AddResult::Refused, "{name}");
        assert!(!fleet.is_known(name));
    }
    assert_eq!(
        fleet.add(&id("web1.example.net"), Source::Event),
        AddResult::Added
    );
    assert_eq!(fleet.queued(), 1);
    let refused = |source| {
        metrics
            .refused_identities
            .with_label_values(&[source, "policy"])
            .get()
    };
    assert_eq!((refused("event"), refused("discovery")), (1, 1));
    assert_eq!(
        metrics.event_discovered.get(),
        1,
        "only the admitted one counts"
    );
}

#[test]
fn a_fleet_entry_stays_32_bytes() {
    // 100,000 of them at once: every byte is 100 KB (docs/performance.md).
    assert_eq!(std::mem::size_of::<Entry>(), 32);
}
