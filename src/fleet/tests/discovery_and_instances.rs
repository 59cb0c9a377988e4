//! Scheduler rules of discovery, startup events, panicking attempts and
//! active-active ownership, on the rig of `tests/mod.rs`.

use super::*;
use crate::choria::rpc::Discovered;

struct FixedDiscovery(Result<Vec<Identity>, RpcError>);

impl discovery::Discover for FixedDiscovery {
    fn discover(&self, found: &mut dyn FnMut(Identity)) -> Result<Discovered, RpcError> {
        let identities = self.0.clone()?;
        let senders = identities.len() as u64;
        identities.into_iter().for_each(found);
        Ok(Discovered {
            senders,
            ..Discovered::default()
        })
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

/// On every call finds `per_call` identities never seen before, and on its first
/// call reports `dropped_first` replies dropped unread; records when it was called.
struct ScriptedDiscovery {
    per_call: usize,
    dropped_first: u64,
    calls: Mutex<Vec<Instant>>,
}

impl ScriptedDiscovery {
    fn new(per_call: usize, dropped_first: u64) -> Arc<ScriptedDiscovery> {
        Arc::new(ScriptedDiscovery {
            per_call,
            dropped_first,
            calls: Mutex::new(Vec::new()),
        })
    }
}

impl discovery::Discover for ScriptedDiscovery {
    fn discover(&self, found: &mut dyn FnMut(Identity)) -> Result<Discovered, RpcError> {
        let mut calls = self.calls.lock();
        let first = calls.len() * self.per_call;
        calls.push(Instant::now());
        (first..first + self.per_call).for_each(|n| found(id(&format!("n{n}"))));
        Ok(Discovered {
            senders: self.per_call as u64,
            dropped: if calls.len() == 1 {
                self.dropped_first
            } else {
                0
            },
            ..Discovered::default()
        })
    }
}

/// Runs the discovery loop on a thread of its own until the fleet stops: an hour's
/// interval, so that only early discoveries come, at most one per `min_gap_ms`.
fn early_discovery_loop(
    fleet: &Arc<Fleet>,
    discoverer: Arc<dyn discovery::Discover>,
    min_gap_ms: u64,
) -> std::thread::JoinHandle<()> {
    let fleet = Arc::clone(fleet);
    std::thread::spawn(move || {
        // Held by the loop's thread: a closed trigger would end the loop.
        let (_trigger_tx, trigger) = crossbeam_channel::bounded(1);
        let rediscovery = discovery::Rediscovery {
            min_gap: Duration::from_millis(min_gap_ms),
            poll: Duration::from_millis(5),
        };
        discovery::run_with(
            &fleet,
            &*discoverer,
            Duration::from_secs(3600),
            &trigger,
            rediscovery,
        )
    })
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
    let found = FixedDiscovery(Ok((0..10).map(|n| id(&format!("n{n}"))).collect()));
    let loop_thread = early_discovery_loop(&r.fleet, Arc::new(found), 50);
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
fn a_discovery_that_dropped_replies_is_followed_early_once() {
    // The queue is empty and took everything heard, but replies were dropped unread:
    // their nodes are looked for again after the gap, not an hour later, and a
    // discovery that dropped nothing does not repeat.
    let r = rig(1, 10, Duration::from_secs(60), false);
    let found = ScriptedDiscovery::new(0, 7);
    let loop_thread = early_discovery_loop(&r.fleet, Arc::clone(&found) as _, 50);
    wait_until("the early discovery", || found.calls.lock().len() == 2);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        found.calls.lock().len(),
        2,
        "no third one: nothing was dropped"
    );
    r.fleet.stop();
    loop_thread.join().unwrap();
}

#[test]
fn early_discoveries_come_at_most_once_per_min_gap() {
    // Every discovery overflows a queue of 2 that two quick workers empty at once: only
    // the gap holds the loop back.
    let r = rig(2, 2, Duration::from_secs(60), false);
    let found = ScriptedDiscovery::new(10, 0);
    let gap = Duration::from_millis(150);
    let loop_thread =
        early_discovery_loop(&r.fleet, Arc::clone(&found) as _, gap.as_millis() as u64);
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
    let found = FixedDiscovery(Ok(vec![id("a"), id("b")]));
    let loop_thread = early_discovery_loop(&r.fleet, Arc::new(found), 1);
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
        crate::node::driver::panicked("n1.example.net", payload.as_ref()),
        Outcome::Failed("provisioning n1.example.net panicked: bad seq state".into())
    );
    let payload = std::panic::catch_unwind(|| panic!("static\nmessage")).unwrap_err();
    assert_eq!(
        crate::node::driver::panicked("n1", payload.as_ref()),
        Outcome::Failed("provisioning n1 panicked: static\\nmessage".into()),
        "escaped: one log line"
    );
    let payload = std::panic::catch_unwind(|| std::panic::panic_any(42u8)).unwrap_err();
    assert_eq!(
        crate::node::driver::panicked("n1", payload.as_ref()),
        Outcome::Failed("provisioning n1 panicked: a panic without a message".into())
    );
    let long = "x".repeat(2000);
    let payload = std::panic::catch_unwind(|| panic!("{long}")).unwrap_err();
    let Outcome::Failed(text) = crate::node::driver::panicked("n1", payload.as_ref()) else {
        unreachable!()
    };
    assert!(text.len() < 600 && text.ends_with("..."), "{}", text.len());
}

#[test]
fn the_release_profile_unwinds_so_that_workers_can_catch_panics() {
    let manifest = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
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
    // Before the attempt, so before its end: the window counts from the end, and a
    // clock read after `started` may already be later than that under load.
    let first = Instant::now();
    assert_eq!(r.fleet.add(&id("n1"), Source::Discovery), AddResult::Added);
    r.started.recv_timeout(Duration::from_secs(5)).unwrap();
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
    use crate::metrics::{NodeLookup, NodeStatus, NodesQuery};
    let r = rig(1, 10, Duration::from_secs(60), true);
    let status = status::FleetStatus(Arc::clone(&r.fleet));
    for n in ["n1", "n2", "n3"] {
        r.fleet.add(&id(n), Source::Discovery);
    }
    r.started.recv_timeout(Duration::from_secs(5)).unwrap();
    let doc = status.nodes(&NodesQuery::default());
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
        status.nodes(&NodesQuery::default())["recent"]
            .as_array()
            .unwrap()
            .len()
            == 3
    });
    let doc = status.nodes(&NodesQuery::default());
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

#[test]
fn nodes_comes_a_page_at_a_time_and_one_node_is_looked_up() {
    use crate::metrics::{NodeLookup, NodeStatus, NodesQuery};
    // No worker runs: every node stays queued.
    let r = unstarted_rig(1, 2000, Duration::from_secs(60), true);
    let status = status::FleetStatus(Arc::clone(&r.fleet));
    for n in 0..1200 {
        r.fleet.add(&id(&format!("n{n:04}")), Source::Discovery);
    }
    let page = |query: &str| status.nodes(&NodesQuery::parse(query).unwrap());
    let first = page("");
    assert_eq!(first["queued"].as_array().unwrap().len(), 500);
    assert_eq!(first["queued"][0]["position"], 1);
    assert_eq!(first["queued"][0]["identity"], "n0000", "queue order");
    assert_eq!(first["total"]["queued"], 1200);
    assert_eq!(first["total"]["recent"], 0);
    assert_eq!(
        first["next"]["queued"],
        "/nodes?state=queued&offset=500&limit=500"
    );
    assert!(first["next"].get("recent").is_none());
    let last = page("state=queued&offset=1000&limit=500");
    let positions: Vec<u64> = last["queued"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["position"].as_u64().unwrap())
        .collect();
    assert_eq!(positions, (1001..=1200).collect::<Vec<_>>());
    assert_eq!(last["next"], serde_json::json!({}));
    assert!(last.get("recent").is_none(), "only the list asked for");
    let big = page("limit=1000");
    assert_eq!(big["queued"].as_array().unwrap().len(), 1000);
    for bad in [
        "limit=1001",
        "offset=-1",
        "state=everything",
        "page=2",
        "limit=x",
    ] {
        assert!(NodesQuery::parse(bad).is_err(), "{bad}");
    }
    // One node is a lookup: its state without a walk of the queue for its place.
    let NodeLookup::Found(n) = status.node("n0700") else {
        panic!("n0700 is queued");
    };
    assert_eq!(
        (n["state"].as_str(), n.get("position")),
        (Some("queued"), None)
    );
    r.fleet.stop();
}
