//! Attacks on time: nodes that are slow, silent or made up, and replies that come
//! late. A worker never waits on a node, so none of them holds the pool, and the
//! reply grace is long enough to catch a forger racing a slow node.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use choria_provisioner::choria::protocol::mcorpc::{RpcReply, StatusCode};

use super::support::hostile::{ok, GhostFlood, Hostile};
use super::support::rig::{
    all_late, fast, jwt_sim, sim, wait_provisioned, wait_until, Provisioner,
};
use super::support::{NatsServer, TempDir};
use super::{assert_all_provisioned_once, assert_connection_held, reader, KeyThief};

/// 20 honest nodes booting into a flood of ghost events, 10 a second, from an
/// attacker subscribed to every node's subject (so nats-server never says "no
/// responders"); with `answer_inventory` the attacker also answers the ghosts'
/// inventory, and nothing after. Eight workers.
fn ghost_flood(answer_inventory: bool) {
    let server = NatsServer::start();
    let attacker = Hostile::connect(&server.url(), None);
    let race = attacker.race(Box::new(move |target, _, body| {
        (answer_inventory && target.starts_with("ghost-") && body.action == "inventory")
            .then(|| ok("inventory", serde_json::json!({"version": "0.30.2"})))
    }));
    attacker.flush();
    let prov = Provisioner::start(&server.url(), "p1.test", "workers: 8\n", fast());
    let flood = GhostFlood::start(&server.url(), 10);
    // Ghosts pile up for 5 s: each is tried on its timetable, 5 inventory tries.
    wait_until("ghosts are waiting", Duration::from_secs(20), || {
        prov.metrics.waiting_attempts.get() >= 20
    });
    std::thread::sleep(Duration::from_secs(3));
    let booted = Instant::now();
    let fleet = sim(&server.url(), 20, |_| {});
    wait_provisioned(&fleet, 20, Duration::from_secs(20));
    let took = booted.elapsed();
    let waiting = prov.metrics.waiting_attempts.get();
    let ghosts = flood.stop();
    assert!(ghosts >= 50, "the flood ran: {ghosts} ghosts");
    assert!(
        waiting >= 20,
        "the ghosts waited meanwhile, holding no worker: {waiting}"
    );
    // Their usual pace here is a second or two; the flood adds nothing that counts.
    assert!(
        took < Duration::from_secs(10),
        "20 honest nodes took {took:?} under the flood"
    );
    if !answer_inventory {
        assert!(
            prov.metrics.silent_attempts.get() > 0,
            "the silent ghosts were counted as such"
        );
    }
    assert_all_provisioned_once(&fleet);
    drop(race);
    assert_connection_held(&prov);
}

#[test]
fn a_flood_of_silent_ghosts_from_a_subscribing_attacker_holds_no_worker() {
    ghost_flood(false);
}

#[test]
fn a_flood_of_ghosts_answering_only_inventory_holds_no_worker() {
    ghost_flood(true);
}

/// Nodes that answer `slow_by` late, raced on `jwt` and `inventory` by a node that
/// answers at once with its own key, under the production reply grace (2 s): no key
/// is encrypted for the attacker, and every race is counted.
fn slow_nodes_raced(slow_by: Duration) {
    let server = NatsServer::start();
    let dir = TempDir::new("race-slow");
    let thief = KeyThief::new(&server, [7u8; 32]);
    let (reader, _read) = reader(&server);
    let attacker = Hostile::connect(&server.url(), None);
    let forged = thief.forged.clone();
    let race = attacker.race(Box::new(move |_, _, body| match body.action.as_str() {
        "jwt" => Some(forged.clone()),
        "inventory" => Some(ok("inventory", serde_json::json!({"version": "6.6.6"}))),
        _ => None,
    }));
    attacker.flush();
    let fleet = jwt_sim(&server.url(), 10, all_late(slow_by));
    let config = format!("reply_grace: 2s\n{}", thief.config(&dir));
    let prov = Provisioner::start(&server.url(), "p1.test", &config, fast());
    let contested = || {
        prov.counter("contested_replies", &["choria_provision#jwt"])
            + prov.counter("contested_replies", &["rpcutil#inventory"])
    };
    wait_until("every node's race counted", Duration::from_secs(60), || {
        contested() >= 10
    });
    assert_eq!(
        fleet.progress().configured,
        0,
        "nothing configured under attack"
    );
    race.unsubscribe().unwrap();
    attacker.flush();
    wait_provisioned(&fleet, 10, Duration::from_secs(90));
    assert_all_provisioned_once(&fleet);
    thief.assert_nothing_stolen(&reader);
    assert_connection_held(&prov);
}

#[test]
fn nodes_answering_in_a_fifth_of_a_second_raced_on_jwt_and_inventory_lose_no_key() {
    slow_nodes_raced(Duration::from_millis(200));
}

#[test]
fn nodes_answering_in_a_second_and_a_half_raced_on_jwt_and_inventory_lose_no_key() {
    slow_nodes_raced(Duration::from_millis(1500));
}

#[test]
fn a_different_configure_reply_after_the_real_one_is_a_security_event_and_counted() {
    let server = NatsServer::start();
    let attacker = Hostile::connect(&server.url(), None);
    // The forger answers configure 150 ms after the request, the node 400 ms after:
    // whichever comes second, configure and the key it carried have left.
    let race = attacker.answer("configure", |_| {
        std::thread::sleep(Duration::from_millis(150));
        ok("configure", serde_json::json!({"message": "forged"}))
    });
    let fleet = sim(&server.url(), 3, |o| {
        o.faults.slow = 1.0;
        o.faults.slow_by = Duration::from_millis(400);
    });
    let prov = Provisioner::start(&server.url(), "p1.test", "reply_grace: 100ms\n", fast());
    wait_until("every late twin counted", Duration::from_secs(30), || {
        prov.metrics.contested_after_configure.get() >= 1
    });
    assert!(
        prov.counter("contested_replies", &["choria_provision#configure"]) >= 1,
        "counted under its rpc too"
    );
    race.unsubscribe().unwrap();
    attacker.flush();
    wait_provisioned(&fleet, 3, Duration::from_secs(60));
    assert_connection_held(&prov);
}

#[test]
fn a_forged_lock_refusal_followed_by_the_node_s_reply_is_a_contest_not_a_lock() {
    let server = NatsServer::start();
    let attacker = Hostile::connect(&server.url(), None);
    let race = attacker.answer("configure", |_| {
        RpcReply::new(
            "configure",
            StatusCode::Aborted,
            "Could not obtain provisioning lock",
            serde_json::json!({}),
        )
    });
    // The nodes answer 100 ms late: the forged refusal comes first.
    let fleet = sim(&server.url(), 5, |o| {
        o.faults.slow = 1.0;
        o.faults.slow_by = Duration::from_millis(100);
    });
    let prov = Provisioner::start(&server.url(), "p1.test", "reply_grace: 500ms\n", fast());
    wait_until(
        "every forged refusal contested",
        Duration::from_secs(30),
        || prov.counter("contested_replies", &["choria_provision#configure"]) >= 5,
    );
    assert_eq!(prov.metrics.lock_refusals.get(), 0, "no refusal believed");
    assert_eq!(
        prov.metrics.outcomes.with_label_values(&["locked"]).get(),
        0
    );
    race.unsubscribe().unwrap();
    attacker.flush();
    wait_provisioned(&fleet, 5, Duration::from_secs(60));
    assert_connection_held(&prov);
}

/// A startup event of about 64 KiB with `keys` keys, announcing `identity`.
fn bloated_event(identity: &str, keys: usize) -> Vec<u8> {
    let mut event = serde_json::Map::new();
    event.insert("protocol".into(), "io.choria.lifecycle.v1.startup".into());
    event.insert("identity".into(), identity.into());
    event.insert("component".into(), "provision_mode_server".into());
    for n in 0..keys {
        event.insert(format!("k{n:05}"), serde_json::json!([n, {"x": n}]));
    }
    let mut bytes = serde_json::to_vec(&event).unwrap();
    bytes.truncate(64 * 1024);
    bytes
}

#[test]
fn a_flood_of_large_startup_events_delays_no_reply_on_the_reader_thread() {
    let server = NatsServer::start();
    let prov = Provisioner::start(&server.url(), "p1.test", "", fast());
    // An attacker publishes 64 KiB events with thousands of keys as fast as it can
    // (at most 3,000 of them): each is handed over by the reader thread undecoded.
    let flooding = Arc::new(AtomicBool::new(true));
    let flood = {
        let attacker = Hostile::connect(&server.url(), None);
        let flooding = Arc::clone(&flooding);
        std::thread::spawn(move || {
            let whole = bloated_event("ghost.example.net", 4000);
            let mut sent = 0;
            while flooding.load(Ordering::Relaxed) && sent < 3000 {
                attacker.publish(
                    "choria.lifecycle.event.startup.provision_mode_server",
                    &whole,
                );
                sent += 1;
                if sent % 100 == 0 {
                    attacker.flush();
                }
            }
            sent
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let fleet = sim(&server.url(), 20, |_| {});
    wait_provisioned(&fleet, 20, Duration::from_secs(30));
    flooding.store(false, Ordering::Relaxed);
    let sent = flood.join().unwrap();
    assert!(sent >= 100, "the flood ran: {sent} events");
    // The replies were read as fast as they came: the inventory round trip, from
    // request to reply read, stayed short under the flood.
    let (seconds, tries) = prov.metrics.rpc_time.get(&["rpcutil#inventory"]);
    assert!(tries >= 20);
    let mean = seconds / tries as f64;
    assert!(
        mean < 0.5,
        "an inventory took {mean:.3} s on average under the flood"
    );
    assert_all_provisioned_once(&fleet);
    assert_connection_held(&prov);
}

#[test]
fn a_forged_inventory_of_an_upgrading_node_frees_no_upgrade_slot() {
    let server = NatsServer::start();
    let dir = TempDir::new("slot-forger");
    // Once a node was told to upgrade, the attacker answers its inventory at once,
    // claiming the new version; the node itself answers 400 ms later.
    let attacker = Hostile::connect(&server.url(), None);
    let upgraded = Arc::new(parking_lot::Mutex::new(std::collections::HashSet::new()));
    let seen = Arc::clone(&upgraded);
    let race = attacker.race(Box::new(move |target, _, body| {
        match body.action.as_str() {
            "release_update" => {
                seen.lock().insert(target.to_string());
                None
            }
            "inventory" if seen.lock().contains(target) => Some(ok(
                "inventory",
                serde_json::json!({"version": "0.31.0", "upgradable": true, "forged": true}),
            )),
            _ => None,
        }
    }));
    attacker.flush();
    let fleet = sim(&server.url(), 2, |o| {
        o.upgradable = true;
        o.version = "0.30.2".into();
        o.faults.slow = 1.0;
        o.faults.slow_by = Duration::from_millis(400);
    });
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        &format!(
            "reply_grace: 1s\n{}upgrades_max_in_flight: 1\n",
            super::support::rig::upgrading_settings(&dir)
        ),
        fast(),
    );
    wait_until(
        "the forged inventory contested",
        Duration::from_secs(60),
        || prov.counter("contested_replies", &["rpcutil#inventory"]) >= 1,
    );
    // The slot stays with the node that went to upgrade: the other one is not sent
    // to upgrade while it waits, and the cap held.
    let contested = Instant::now();
    while contested.elapsed() < Duration::from_secs(4) {
        assert_eq!(prov.metrics.upgrades_in_flight.get(), 1, "the slot is held");
        std::thread::sleep(Duration::from_millis(100));
    }
    let summary = fleet.summary();
    let upgraded_nodes: Vec<_> = summary
        .nodes
        .iter()
        .filter(|n| !n.upgrades.is_empty())
        .map(|n| n.identity.clone())
        .collect();
    assert_eq!(upgraded_nodes.len(), 1, "{upgraded_nodes:?}");
    assert_eq!(summary.progress.upgrading_peak, 1);
    assert_eq!(
        *upgraded.lock(),
        upgraded_nodes.into_iter().collect(),
        "release_update went to that node alone"
    );
    assert_eq!(
        fleet.progress().configured,
        0,
        "nothing configured on a forged inventory"
    );
    race.unsubscribe().unwrap();
}
