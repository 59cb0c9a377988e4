//! Active-active (issue #14): several provisioners of one site provisioning one
//! simulated fleet at once over a real nats-server, all in this process: each node
//! exactly once, fair shares, an instance that dies, one that stops cleanly,
//! servers older than go-choria v0.29 (no provisioning lock), and
//! `upgrades_max_in_flight` split among the live instances.
#![cfg(feature = "sim")]

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use choria_provisioner::choria::identity::Identity;
use choria_provisioner::fleet::daemon::DaemonOptions;
use choria_provisioner::fleet::membership::MemberState;
use choria_provisioner::fleet::rendezvous::Members;
use choria_provisioner::sim::{Phase, Summary};
use support::broker::{ChoriaBroker, Network};
use support::hostile::Hostile;
use support::rig::*;
use support::{NatsServer, TempDir};

const ACTIVE: &str = "site: lon\nactive_active: true\n";

/// Heartbeats every 200 ms: a silent peer is dropped after 600 ms.
fn active() -> DaemonOptions {
    beating(200)
}

/// Heartbeats every `ms`: the tests that need a stable live set on a busy machine
/// beat slower, so that a stalled thread is not taken for a dead peer.
fn beating(ms: u64) -> DaemonOptions {
    DaemonOptions {
        heartbeat: Duration::from_millis(ms),
        ..fast()
    }
}

/// Instances that never discover on a timer (an hour's interval) and offer a node
/// another instance held again after `lock`: whatever they finish after a peer dies
/// is brought back by the membership change and the lock window, not by a tick.
fn no_ticks(lock: Duration) -> impl Fn() -> DaemonOptions {
    move || DaemonOptions {
        interval: Some(Duration::from_secs(3600)),
        lock_window: lock,
        ..active()
    }
}

fn start(server: &NatsServer, names: &[&str], yaml: &str) -> Vec<Provisioner> {
    start_with(server, names, yaml, active)
}

fn start_with(
    server: &NatsServer,
    names: &[&str],
    yaml: &str,
    options: impl Fn() -> DaemonOptions,
) -> Vec<Provisioner> {
    names
        .iter()
        .map(|n| Provisioner::start(&server.url(), n, yaml, options()))
        .collect()
}

/// Waits until every provisioner is active and sees `n` live instances.
fn wait_for_members(ps: &[&Provisioner], n: usize) {
    wait_until(
        &format!("{n} active members"),
        Duration::from_secs(10),
        || {
            ps.iter().all(|p| {
                let m = p.daemon().membership().expect("active-active");
                m.state() == MemberState::Active && m.live().len() == n
            })
        },
    );
}

/// A helper that takes `delay` seconds before answering as the example helper does.
fn slow_helper(dir: &TempDir, delay: &str) -> String {
    let script = dir.script(
        "slow-helper.sh",
        &format!(
            "#!/bin/sh\nsleep {delay}\nexec {}\n",
            support::daemon::example_helper().display()
        ),
    );
    format!(
        "{ACTIVE}helper: {}\nhelper_timeout: 20s\n",
        script.display()
    )
}

/// The provisioning lock of the dying-instance tests. Long enough that the survivors
/// reach the dead instance's nodes while they are still locked even on a loaded
/// machine (3 s was not, with a profiler running).
const LOCK: Duration = Duration::from_secs(6);

/// The settings of the dying-instance tests. With the jwt feature the first RPC
/// (`jwt`) takes the node's provisioning lock, so every node the dying instance has in
/// flight (in its slow helper) is locked when it dies. At most four attempts under
/// way, so it holds few locks when it dies, each short (the grace is not these tests'
/// subject) so the survivors reach them in time.
fn dying_instance_yaml(dir: &TempDir) -> String {
    format!(
        "{}workers: 4\nmax_waiting_attempts: 4\nreply_grace: 20ms\n{}",
        slow_helper(dir, "0.05"),
        jwt_settings()
    )
}

/// The nodes c.lon touched first but did not finish, each checked to have been
/// finished within `bound` of c's first touch.
fn held_by_c_finished_within(summary: &Summary, bound: Duration) -> Vec<&str> {
    let held: Vec<_> = summary
        .nodes
        .iter()
        .filter(|n| n.callers.first().map(String::as_str) == Some("c.lon"))
        .filter(|n| n.restarted_by.as_deref() != Some("c.lon"))
        .collect();
    for n in &held {
        let took = Duration::from_millis(n.provisioning_ms.unwrap());
        assert!(
            took < bound,
            "{} finished {took:?} after c first touched it",
            n.identity
        );
    }
    held.iter().map(|n| n.identity.as_str()).collect()
}

fn restarted_by(summary: &Summary, who: &str) -> usize {
    summary
        .nodes
        .iter()
        .filter(|n| n.restarted_by.as_deref() == Some(who))
        .count()
}

fn touched_twice(summary: &Summary) -> Vec<String> {
    summary
        .nodes
        .iter()
        .filter(|n| n.callers.len() > 1)
        .map(|n| format!("{} {:?}", n.identity, n.callers))
        .collect()
}

#[test]
fn three_instances_provision_a_thousand_nodes_once_each_with_fair_shares() {
    let server = NatsServer::start();
    let ps = start_with(&server, &["a.lon", "b.lon", "c.lon"], ACTIVE, || {
        beating(500)
    });
    wait_for_members(&ps.iter().collect::<Vec<_>>(), 3);
    for p in &ps {
        assert_eq!(p.metrics.peers.get(), 3);
        assert!((p.metrics.share.get() - 1.0 / 3.0).abs() < 1e-9);
    }
    // Booted after the provisioners: found through startup events (one queue group,
    // handed to their owners) and discovery.
    let fleet = sim(&server.url(), 1000, |_| {});
    wait_provisioned(&fleet, 1000, Duration::from_secs(90));
    let summary = fleet.summary();
    assert_provisioned(&summary, |_| 1);
    let mut total = 0;
    for p in &ps {
        let done = p.metrics.provisioned.get() as usize;
        assert_eq!(done, restarted_by(&summary, &p.identity), "{}", p.identity);
        assert!(done >= 200, "{} did only {done} of 1000", p.identity);
        assert_eq!(p.metrics.provision_errors.get(), 0, "{}", p.identity);
        total += done;
    }
    assert_eq!(total, 1000);
    let twice = touched_twice(&summary);
    assert!(
        twice.len() <= 5,
        "{} nodes touched twice: {twice:?}",
        twice.len()
    );
    let events: u64 = ps.iter().map(|p| p.metrics.event_discovered.get()).sum();
    assert!(events > 0, "startup events reached the owners");
}

#[test]
fn the_nodes_of_an_instance_that_dies_are_finished_by_the_others() {
    let server = NatsServer::start();
    let dir = TempDir::new("active-kill");
    let yaml = dying_instance_yaml(&dir);
    let ps = start_with(&server, &["a.lon", "b.lon", "c.lon"], &yaml, no_ticks(LOCK));
    wait_for_members(&ps.iter().collect::<Vec<_>>(), 3);
    let fleet = jwt_sim(&server.url(), 240, |o| {
        o.lock_window = Some(LOCK);
    });
    let c = &ps[2];
    wait_until("c is busy", Duration::from_secs(20), || {
        c.metrics.provisioned.get() >= 10
    });
    // c dies: its connection drops without a word, its nodes in flight keep their
    // provisioning locks until the window ends.
    c.daemon().connector().close(Duration::from_millis(100));
    let died = Instant::now();
    let c_done_at_death = c.metrics.provisioned.get();
    wait_for_members(&[&ps[0], &ps[1]], 2);
    // Three silent heartbeats (600 ms), and a little for a busy machine.
    assert!(
        died.elapsed() < Duration::from_secs(3),
        "c dropped after {:?}",
        died.elapsed()
    );
    let (a, b) = (&ps[0], &ps[1]);
    let mut last = (fleet.progress().provisioned, Instant::now());
    let mut longest = Duration::ZERO;
    wait_until("all provisioned", Duration::from_secs(30), || {
        let now = fleet.progress().provisioned;
        if now != last.0 {
            longest = longest.max(last.1.elapsed());
            last = (now, Instant::now());
        }
        now == 240
    });
    assert!(
        longest <= LOCK,
        "provisioning paused for {longest:?}, longer than the lock window"
    );
    let summary = fleet.summary();
    assert_provisioned(&summary, |_| 1);
    // The nodes c held: refused to the others while locked (not an error), offered
    // again once the lock window has passed (no discovery tick in this test). A held
    // node's lock lasts a window from c's last use of it; a survivor that meets it
    // leaves the node alone for a window from then (it cannot see when the lock
    // ends), so the node is done within two windows of c's first touch, plus the time
    // c held it and the attempt itself (3 s for a loaded machine).
    let held = held_by_c_finished_within(&summary, 2 * LOCK + Duration::from_secs(3));
    assert!(!held.is_empty(), "c held nodes when it died");
    let locked: u64 = [a, b]
        .iter()
        .map(|p| p.metrics.outcomes.with_label_values(&["locked"]).get())
        .sum();
    assert!(locked > 0, "the others met c's locks");
    assert!(c.metrics.provisioned.get() <= c_done_at_death + 4);
    let survivors = a.metrics.provisioned.get() + b.metrics.provisioned.get();
    assert_eq!(
        survivors as usize + restarted_by(&summary, "c.lon"),
        240,
        "a and b finished every node c did not"
    );
    for p in [a, b] {
        assert_eq!(p.metrics.provision_errors.get(), 0, "{}", p.identity);
    }
}

#[test]
fn a_clean_stop_hands_the_share_over_at_once() {
    let server = NatsServer::start();
    let dir = TempDir::new("active-stop");
    // Two attempts under way at a time (each short: the grace is not this test's
    // subject): the rest of b's share waits in its queue.
    let yaml = format!(
        "{}workers: 2\nmax_waiting_attempts: 2\nreply_grace: 20ms\n",
        slow_helper(&dir, "0.1")
    );
    let mut ps = start(&server, &["a.lon", "b.lon"], &yaml);
    wait_for_members(&ps.iter().collect::<Vec<_>>(), 2);
    let fleet = sim(&server.url(), 200, |_| {});
    wait_until("b is busy", Duration::from_secs(20), || {
        ps[1].metrics.provisioned.get() >= 5
    });
    let two = Members::new([
        Identity::parse("a.lon").unwrap(),
        Identity::parse("b.lon").unwrap(),
    ]);
    let mut b = ps.pop().unwrap();
    let a = &ps[0];
    let stopped = Instant::now();
    let stopper = std::thread::spawn(move || {
        assert!(b.stop(), "b stopped in time");
        b
    });
    // Within 2 s, a owns everything and has queued b's unprovisioned nodes.
    wait_until("a took b's share", Duration::from_secs(2), || {
        let m = a.daemon().membership().unwrap();
        let left: Vec<String> = fleet
            .summary()
            .nodes
            .into_iter()
            .filter(|n| n.phase != Phase::Provisioned && n.callers.is_empty())
            .filter(|n| two.owner(&n.identity).map(|o| o.as_str()) == Some("b.lon"))
            .map(|n| n.identity)
            .collect();
        m.live().len() == 1
            && a.metrics.share.get() == 1.0
            && !left.is_empty()
            && left.iter().all(|n| a.daemon().fleet().is_known(n))
    });
    let took = stopped.elapsed();
    assert!(took < Duration::from_secs(2), "handover took {took:?}");
    let b = stopper.join().unwrap();
    wait_provisioned(&fleet, 200, Duration::from_secs(40));
    let summary = fleet.summary();
    assert_provisioned(&summary, |_| 1);
    assert_eq!(
        a.metrics.provisioned.get() + b.metrics.provisioned.get(),
        200
    );
    let twice = touched_twice(&summary);
    assert!(twice.is_empty(), "touched twice: {twice:?}");
}

#[test]
fn servers_without_the_lock_are_provisioned_once_with_a_warning() {
    support::logs::capture();
    let server = NatsServer::start();
    let ps = start_with(&server, &["old-a.lon", "old-b.lon"], ACTIVE, || {
        beating(500)
    });
    wait_for_members(&ps.iter().collect::<Vec<_>>(), 2);
    let fleet = sim(&server.url(), 200, |o| {
        o.lock_window = None;
        o.version = "0.28.0".into();
        o.prefix = "old-".into();
    });
    wait_provisioned(&fleet, 200, Duration::from_secs(30));
    let summary = fleet.summary();
    assert_provisioned(&summary, |_| 1);
    assert!(touched_twice(&summary).is_empty());
    for p in &ps {
        assert!(p.metrics.provisioned.get() >= 60, "{}", p.identity);
    }
    let warned = support::logs::lines_with("older than 0.29.0: it has no provisioning lock");
    assert!(
        warned
            .iter()
            .any(|l| l.contains(".example.net runs Choria 0.28.0")),
        "{warned:?}"
    );
    let known: HashSet<&str> = ["old-a.lon", "old-b.lon"].into();
    assert!(summary
        .nodes
        .iter()
        .all(|n| known.contains(n.restarted_by.as_deref().unwrap_or(""))));
}

#[test]
fn two_instances_through_a_choria_broker() {
    let meeting = Meeting::Choria(ChoriaBroker::start(Network::Issuer));
    let ps: Vec<Provisioner> = ["a.lon", "b.lon"]
        .iter()
        .map(|n| meeting.provisioner(n, ACTIVE, active()))
        .collect();
    wait_for_members(&ps.iter().collect::<Vec<_>>(), 2);
    let fleet = meeting.fleet(60, |_| {});
    wait_provisioned(&fleet, 60, Duration::from_secs(60));
    let summary = fleet.summary();
    assert_provisioned(&summary, |_| 1);
    assert!(touched_twice(&summary).is_empty());
    for p in &ps {
        assert!(p.metrics.provisioned.get() >= 10, "{}", p.identity);
    }
    meeting.assert_let_in(2);
}

#[test]
fn a_node_can_neither_fake_nor_silence_a_peer_and_bad_peer_messages_are_counted() {
    let server = support::election_broker();
    let url = as_provisioner(&server.url());
    let ps: Vec<Provisioner> = ["a.lon", "b.lon"]
        .iter()
        .map(|n| Provisioner::start(&url, n, ACTIVE, active()))
        .collect();
    wait_for_members(&ps.iter().collect::<Vec<_>>(), 2);
    let beat = |identity: &str, state: &str, site: &str| {
        serde_json::json!({
            "identity": identity, "site": site, "incarnation": 1, "sequence": 99,
            "time": 0, "every_ms": 200, "state": state,
        })
        .to_string()
    };
    // A provisioning-mode node: the broker refuses its publications there.
    let node = Hostile::connect(&as_node(&server.url()), None);
    // Nor can it read them (heartbeats flow every 200 ms meanwhile).
    let listening = node.nc().subscribe("provisioning.provisioner.>").unwrap();
    for _ in 0..3 {
        node.publish(
            "provisioning.provisioner.peers.lon",
            beat("ghost.lon", "alive", "lon").as_bytes(),
        );
        node.publish(
            "provisioning.provisioner.peers.lon",
            beat("a.lon", "leaving", "lon").as_bytes(),
        );
        node.flush();
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        listening.next_timeout(Duration::from_millis(500)).is_err(),
        "a node read a peer message"
    );
    for p in &ps {
        let live = p.daemon().membership().unwrap().live();
        assert_eq!(live.len(), 2, "{}: {live:?}", p.identity);
        assert_eq!(p.metrics.peers.get(), 2);
    }
    // A misconfigured provisioner (it may publish there): refused and counted.
    let other = Hostile::connect(&url, None);
    other.publish("provisioning.provisioner.peers.lon", b"{not json");
    other.publish(
        "provisioning.provisioner.peers.lon",
        beat("x.par", "alive", "par").as_bytes(),
    );
    other.publish(
        "provisioning.provisioner.peers.lon",
        beat("bad id", "alive", "lon").as_bytes(),
    );
    other.publish(
        "provisioning.provisioner.peers.lon",
        beat("slow.lon", "alive", "lon")
            .replace("\"every_ms\":200", "\"every_ms\":3600000")
            .as_bytes(),
    );
    other.flush();
    let refused = |p: &Provisioner, reason: &str| {
        p.metrics
            .peer_messages_refused
            .with_label_values(&[reason])
            .get()
    };
    wait_until("refusals counted", Duration::from_secs(5), || {
        ps.iter().all(|p| {
            refused(p, "undecodable") == 1
                && refused(p, "foreign_site") == 1
                && refused(p, "identity") == 1
                && refused(p, "period") == 1
        })
    });
    for p in &ps {
        assert_eq!(p.daemon().membership().unwrap().live().len(), 2);
    }
}

#[test]
fn a_paused_instance_gives_its_share_away_until_resumed() {
    let server = NatsServer::start();
    let ps = start(&server, &["a.lon", "b.lon"], ACTIVE);
    wait_for_members(&ps.iter().collect::<Vec<_>>(), 2);
    let (a, b) = (&ps[0], &ps[1]);
    // An operator's pause (what `choria-provisioner pause` asks through the control
    // socket).
    b.pause
        .hold_for_operator(choria_provisioner::config::OperatorPause {
            reason: "bad helper push".into(),
            since: 0,
        });
    wait_until("b out of the set", Duration::from_secs(3), || {
        a.daemon().membership().unwrap().live().len() == 1
            && b.daemon().membership().unwrap().state() == MemberState::Paused
    });
    assert_eq!(b.metrics.share.get(), 0.0);
    let fleet = sim(&server.url(), 50, |_| {});
    wait_provisioned(&fleet, 50, Duration::from_secs(20));
    assert_eq!(a.metrics.provisioned.get(), 50);
    assert_eq!(b.metrics.provisioned.get(), 0);
    assert!(b.pause.release_operator().is_some());
    wait_for_members(&ps.iter().collect::<Vec<_>>(), 2);
    assert!((b.metrics.share.get() - 0.5).abs() < 1e-9);
}

#[test]
fn the_nodes_of_a_sigkilled_process_are_finished_by_the_others() {
    use choria_provisioner::fleet::membership::{HEARTBEAT, SILENT_BEATS};
    let server = NatsServer::start();
    let dir = TempDir::new("active-sigkill");
    let yaml = dying_instance_yaml(&dir);
    // c is a real `choria-provisioner run` with the production heartbeat (2 s).
    let port = support::free_port();
    let mut c = support::daemon::spawn_with(
        env!("CARGO_BIN_EXE_choria-provisioner"),
        &dir,
        "c.lon",
        &server.url(),
        &format!("{yaml}monitor_port: {port}\nmonitor_host: 127.0.0.1\n"),
    );
    let ps = start_with(&server, &["a.lon", "b.lon"], &yaml, no_ticks(LOCK));
    assert!(support::wait_for_port(port, Duration::from_secs(10)));
    wait_until("c ready", Duration::from_secs(10), || {
        support::http_get(port, "/readyz").0 == 200
    });
    wait_for_members(&ps.iter().collect::<Vec<_>>(), 3);
    let fleet = jwt_sim(&server.url(), 300, |o| {
        o.lock_window = Some(LOCK);
    });
    wait_until("c is busy", Duration::from_secs(20), || {
        restarted_by(&fleet.summary(), "c.lon") >= 10
    });
    c.kill().unwrap();
    let _ = c.wait();
    let died = Instant::now();
    let silent = HEARTBEAT * SILENT_BEATS;
    wait_for_members(&ps.iter().collect::<Vec<_>>(), 2);
    assert!(
        died.elapsed() < silent + Duration::from_secs(1),
        "c dropped after {:?}",
        died.elapsed()
    );
    wait_provisioned(&fleet, 300, Duration::from_secs(30));
    let summary = fleet.summary();
    assert_provisioned(&summary, |_| 1);
    let by_c = restarted_by(&summary, "c.lon");
    let survivors = ps.iter().map(|p| p.metrics.provisioned.get()).sum::<u64>();
    assert_eq!(survivors as usize + by_c, 300);
    // c's nodes in flight waited for its silence to be noticed and the lock: a window
    // from c's last use, and a survivor that met it leaves the node alone for a
    // window from then (the survivors never discover on a timer here): no longer.
    held_by_c_finished_within(&summary, silent + 2 * LOCK + Duration::from_secs(3));
    for p in &ps {
        assert_eq!(p.metrics.provision_errors.get(), 0, "{}", p.identity);
    }
}

/// The gauge `choria_provisioner_upgrade_slots` of each of `ps` and the part its
/// membership reports, once they are `parts`.
fn wait_for_upgrade_parts(ps: &[&Provisioner], parts: &[i64]) {
    wait_until(
        &format!("upgrade slots {parts:?}"),
        Duration::from_secs(10),
        || {
            ps.iter().zip(parts).all(|(p, &part)| {
                let m = p.daemon().membership().expect("active-active");
                p.metrics.upgrade_slots.get() == part && m.upgrade_part() == Some(part as usize)
            })
        },
    );
}

#[test]
fn upgrades_max_in_flight_caps_the_site_split_among_the_live_instances() {
    let server = NatsServer::start();
    let dir = TempDir::new("active-upgrade-cap");
    let yaml = format!(
        "{ACTIVE}workers: 8\n{}upgrades_max_in_flight: 2\n",
        upgrading_settings(&dir)
    );
    // No discovery after the first: nodes that waited are queued again when a slot
    // is given back; a slower beat keeps the live set stable on a busy machine.
    let mut ps = start_with(&server, &["a.lon", "b.lon"], &yaml, || DaemonOptions {
        interval: Some(Duration::from_secs(600)),
        ..beating(500)
    });
    let both: Vec<&Provisioner> = ps.iter().collect();
    wait_for_members(&both, 2);
    wait_for_upgrade_parts(&both, &[1, 1]);
    let fleet = sim(&server.url(), 12, |o| {
        o.upgradable = true;
        o.version = "0.30.2".into();
        o.restart_delay = Duration::from_millis(300);
    });
    wait_provisioned(&fleet, 12, Duration::from_secs(30));
    let summary = fleet.summary();
    for node in &summary.nodes {
        assert_eq!(node.upgrades, ["0.31.0"], "{}", node.identity);
    }
    let peak = fleet.progress().upgrading_peak;
    assert!(
        (1..=2).contains(&peak),
        "at most 2 nodes away upgrading at once across both instances, saw {peak}"
    );
    let mut waited = 0;
    for p in &ps {
        assert!(
            restarted_by(&summary, &p.identity) > 0,
            "{} upgraded and provisioned its share",
            p.identity
        );
        assert_eq!(p.metrics.provision_errors.get(), 0, "{}", p.identity);
        waited += p
            .metrics
            .outcomes
            .with_label_values(&["upgrade_waiting"])
            .get();
    }
    assert!(waited > 0, "some nodes waited for a slot of their instance");
    // A paused instance has no slot and its peer has the whole cap, until resumed.
    ps[1].pause.pause();
    wait_for_upgrade_parts(&both, &[2, 0]);
    ps[1].pause.resume();
    wait_for_upgrade_parts(&both, &[1, 1]);
    // So does the instance left after a clean stop.
    let mut b = ps.pop().unwrap();
    assert!(b.stop(), "b stopped in time");
    assert_eq!(b.metrics.upgrade_slots.get(), 0, "a leaver has no slot");
    wait_for_upgrade_parts(&[&ps[0]], &[2]);
}
