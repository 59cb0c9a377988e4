//! The whole provisioner against a real nats-server and the fleet simulator, both
//! in this process: exactly-once provisioning, faults, events vs discovery, a full
//! queue, pausing, a broker restart, and a fleet of ten thousand.
#![cfg(feature = "sim")]

mod support;

use std::time::Duration;

use choria_provisioner::fleet::daemon::DaemonOptions;
use choria_provisioner::fleet::discovery::Rediscovery;
use choria_provisioner::sim::{Faults, Phase};
use support::broker::{ChoriaBroker, Network};
use support::rig::*;
use support::NatsServer;

/// A simulated fleet of `nodes` that have all booted, failing the test after `within`.
fn booted(server: &NatsServer, nodes: u64, within: Duration) -> choria_provisioner::sim::Sim {
    let fleet = sim(&server.url(), nodes as usize, |_| {});
    wait_until("booted", within, || fleet.progress().booted == nodes);
    fleet
}

#[test]
fn a_thousand_nodes_are_provisioned_exactly_once_including_nodes_that_come_back() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 1000, |o| o.comeback = 0.1);
    let prov = Provisioner::start(&server.url(), "p1.test", "", fast());
    wait_provisioned(&fleet, 1000, Duration::from_secs(120));
    let summary = fleet.summary();
    let comebacks: std::collections::HashSet<String> = summary
        .nodes
        .iter()
        .filter(|n| n.restarts == 2)
        .map(|n| n.identity.clone())
        .collect();
    assert!(
        (50..150).contains(&comebacks.len()),
        "about 10% came back: {}",
        comebacks.len()
    );
    assert_provisioned(&summary, |id| if comebacks.contains(id) { 2 } else { 1 });
    for node in summary.nodes.iter().filter(|n| n.restarts == 1) {
        assert_eq!(node.rpcs, SEQUENCE, "{}", node.identity);
    }
    assert_eq!(
        prov.metrics.provisioned.get(),
        1000 + comebacks.len() as u64
    );
    assert_eq!(prov.metrics.provision_errors.get(), 0);
}

#[test]
fn a_fleet_with_ten_percent_faulty_nodes_is_provisioned() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 200, |o| {
        o.faults = Faults {
            silent: 0.02,
            silent_first: 2,
            slow: 0.02,
            slow_by: Duration::from_millis(1500),
            error: 0.02,
            garbage: 0.02,
            reboot: 0.02,
        }
    });
    let prov = Provisioner::start(&server.url(), "p1.test", "", fast());
    wait_provisioned(&fleet, 200, Duration::from_secs(150));
    let summary = fleet.summary();
    let faulty = summary.nodes.iter().filter(|n| n.fault.is_some()).count();
    assert!(faulty >= 10, "faults were exercised: {faulty}");
    assert_provisioned(&summary, |_| 1);
    assert!(
        ["undecodable", "wrong_sender"].iter().any(|r| prov
            .metrics
            .rejected_replies
            .with_label_values(&[r])
            .get()
            > 0),
        "garbage replies were rejected"
    );
    prov.assert_renders("choria_provisioner_rpc_time_count");
}

#[test]
fn nodes_found_by_events_only() {
    nodes_found_by_events_only_on(Meeting::Open(NatsServer::start()));
}

#[test]
fn nodes_found_by_events_only_through_a_choria_broker_with_an_issuer() {
    nodes_found_by_events_only_on(Meeting::Choria(ChoriaBroker::start(Network::Issuer)));
}

#[test]
fn nodes_found_by_events_only_through_a_choria_broker_with_mutual_tls() {
    nodes_found_by_events_only_on(Meeting::Choria(ChoriaBroker::start(Network::MutualTls)));
}

fn nodes_found_by_events_only_on(meeting: Meeting) {
    let prov = meeting.provisioner(
        "p1.test",
        "",
        DaemonOptions {
            interval: Some(Duration::from_secs(3600)),
            ..fast()
        },
    );
    // The first discovery ran before any node booted.
    wait_until("first discovery done", Duration::from_secs(10), || {
        prov.metrics.discover_cycles.get() == 1
    });
    std::thread::sleep(Duration::from_secs(3));
    let fleet = meeting.fleet(50, |_| {});
    wait_provisioned(&fleet, 50, Duration::from_secs(60));
    assert_eq!(prov.metrics.event_discovered.get(), 50);
    assert_eq!(prov.metrics.discovered.get(), 0);
    assert_provisioned(&fleet.summary(), |_| 1);
    meeting.assert_let_in(1);
}

#[test]
fn nodes_found_by_discovery_only() {
    let server = NatsServer::start();
    let fleet = booted(&server, 50, Duration::from_secs(10));
    // Listening to another component: no startup event reaches the provisioner.
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        "lifecycle_component: elsewhere\n",
        fast(),
    );
    wait_provisioned(&fleet, 50, Duration::from_secs(60));
    assert_eq!(prov.metrics.discovered.get(), 50);
    assert_eq!(prov.metrics.event_discovered.get(), 0);
    assert_provisioned(&fleet.summary(), |_| 1);
}

#[test]
fn a_full_queue_loses_no_node() {
    let server = NatsServer::start();
    let fleet = booted(&server, 60, Duration::from_secs(10));
    let _prov = Provisioner::start(
        &server.url(),
        "p1.test",
        "workers: 2\n",
        DaemonOptions {
            capacity: 5,
            ..fast()
        },
    );
    wait_provisioned(&fleet, 60, Duration::from_secs(90));
    assert_provisioned(&fleet.summary(), |_| 1);
}

#[test]
fn a_discovery_that_overflows_the_queue_is_followed_before_the_interval() {
    let server = NatsServer::start();
    let fleet = booted(&server, 40, Duration::from_secs(10));
    // No startup event reaches the provisioner and the interval is an hour: only
    // early discoveries can find the nodes a queue of 5 leaves out.
    let gap = Duration::from_millis(300);
    let started = std::time::Instant::now();
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        "workers: 2\nlifecycle_component: elsewhere\n",
        DaemonOptions {
            capacity: 5,
            interval: Some(Duration::from_secs(3600)),
            rediscovery: Rediscovery {
                min_gap: gap,
                poll: Duration::from_millis(20),
            },
            ..fast()
        },
    );
    wait_provisioned(&fleet, 40, Duration::from_secs(60));
    let elapsed = started.elapsed();
    assert_provisioned(&fleet.summary(), |_| 1);
    assert_eq!(prov.metrics.discovered.get(), 40);
    let cycles = prov.metrics.discover_cycles.get();
    // A discovery queues at most 5 nodes plus the few the 2 workers take while its
    // burst of replies is being queued (each worker begins an attempt in the time
    // the discovery queues a dozen), so 40 nodes take early discoveries ...
    assert!(cycles >= 2, "{cycles} discoveries");
    // ... and never more than one per gap.
    let most = 1 + (elapsed.as_millis() / gap.as_millis()) as u64;
    assert!(cycles <= most, "{cycles} discoveries in {elapsed:?}");
    // The simulator saw each of them, each at least a gap after the one before.
    let seen = fleet.summary().discoveries;
    assert_eq!(seen.len() as u64, cycles);
    for pair in seen.windows(2) {
        assert!(
            pair[1].at_unix_ms - pair[0].at_unix_ms + 20 >= gap.as_millis() as u64,
            "{pair:?}"
        );
    }
}

#[test]
fn a_paused_fleet_provisions_nothing_until_resumed() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 20, |_| {});
    let prov = Provisioner::start_paused(&server.url(), "p1.test", "", fast(), true);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        fleet.summary().nodes.iter().all(|n| n.rpcs.is_empty()),
        "nothing was asked while paused"
    );
    assert_eq!(prov.metrics.discover_cycles.get(), 0);
    prov.pause.resume();
    wait_provisioned(&fleet, 20, Duration::from_secs(60));
    assert_provisioned(&fleet.summary(), |_| 1);
}

#[test]
fn a_broker_restart_mid_run_loses_no_node() {
    let mut server = NatsServer::start();
    let fleet = sim(&server.url(), 300, |o| o.boot_rate = 100.0);
    let prov = Provisioner::start(&server.url(), "p1.test", "", fast());
    wait_until("some provisioned", Duration::from_secs(30), || {
        fleet.progress().provisioned > 20
    });
    server.restart();
    wait_until("reconnected", Duration::from_secs(30), || {
        prov.daemon().connection().is_connected()
    });
    wait_provisioned(&fleet, 300, Duration::from_secs(120));
    for node in fleet.summary().nodes {
        assert_eq!(node.phase, Phase::Provisioned);
        assert!(node.restarts >= 1);
    }
}

#[test]
fn startup_events_lost_in_a_broker_outage_are_found_by_a_discovery_at_reconnect() {
    // Discovery every minute: a node whose startup event the provisioner missed
    // would wait up to that long without the discovery that follows a reconnect.
    let mut server = NatsServer::start();
    let once_a_minute = DaemonOptions {
        cooldown: Duration::from_secs(3),
        ..DaemonOptions::default()
    };
    let prov = Provisioner::start(&server.url(), "p1.test", "", once_a_minute);
    wait_until("the first discovery", Duration::from_secs(10), || {
        prov.metrics.discover_cycles.get() == 1
    });
    std::thread::sleep(Duration::from_secs(3));
    server.stop();
    // The provisioner's reconnects back off (0.5 s, 0.75 s, 1 s, …): the nodes are
    // on the new broker, their events published, before it is.
    std::thread::sleep(Duration::from_secs(2));
    server.restart();
    let fleet = sim(&server.url(), 20, |_| {});
    let restarted = std::time::Instant::now();
    wait_until("reconnected", Duration::from_secs(30), || {
        prov.daemon().connection().is_connected()
    });
    let reconnected = restarted.elapsed();
    wait_provisioned(&fleet, 20, Duration::from_secs(20));
    println!(
        "reconnected {reconnected:?} after the restart; 20 nodes provisioned {:?} after it",
        restarted.elapsed()
    );
    assert!(
        prov.metrics.discover_cycles.get() >= 2,
        "a discovery at the reconnect"
    );
    assert_provisioned(&fleet.summary(), |_| 1);
}

#[test]
fn ten_thousand_simulated_nodes_start_and_answer_one_discovery() {
    let server = NatsServer::start();
    let fleet = booted(&server, 10_000, Duration::from_secs(30));
    let prov = Provisioner::start_paused(&server.url(), "p1.test", "", fast(), true);
    let mut identities = std::collections::HashSet::new();
    let found = prov
        .daemon()
        .rpc()
        .discover(
            Duration::from_secs(2),
            Duration::from_millis(500),
            Duration::from_secs(20),
            &mut |id| assert!(identities.insert(id), "a sender handed over twice"),
        )
        .unwrap();
    assert_eq!(identities.len(), 10_000);
    assert_eq!(found.senders, 10_000);
    assert_eq!(fleet.progress().discovery_replies, 10_000);
}
