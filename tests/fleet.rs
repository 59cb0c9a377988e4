//! The whole provisioner against a real nats-server and the fleet simulator, both
//! in this process: exactly-once provisioning, faults, events vs discovery, a full
//! queue, pausing, a broker restart, and two provisioners with leader election.
#![cfg(feature = "sim")]

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use choria_provisioner::choria::client_config::ClientConfig;
use choria_provisioner::config::{Config, Pause};
use choria_provisioner::hosts::daemon::DaemonOptions;
use choria_provisioner::hosts::election::{ElectionOptions, ElectionState};
use choria_provisioner::metrics::Metrics;
use choria_provisioner::sim::{Faults, Phase, Sim, SimOptions, Summary};
use crossbeam_channel::bounded;
use support::{create_election_bucket, election_broker, NatsServer, TempDir};

fn helper() -> PathBuf {
    support::daemon::example_helper()
}

/// One provisioner in this process.
type Provisioner = support::daemon::InProcess;

fn fast() -> DaemonOptions {
    DaemonOptions {
        cooldown: Duration::from_secs(3),
        interval: Some(Duration::from_secs(2)),
        ..DaemonOptions::default()
    }
}

fn sim(url: &str, nodes: usize, f: impl FnOnce(&mut SimOptions)) -> Sim {
    let mut options = SimOptions {
        nodes,
        restart_delay: Duration::from_millis(500),
        ..SimOptions::default()
    };
    f(&mut options);
    Sim::start(url, options).unwrap()
}

fn wait_until(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

const SEQUENCE: [&str; 3] = [
    "rpcutil#inventory",
    "choria_provision#configure",
    "choria_provision#restart",
];

/// Every node provisioned; each restarted exactly `expected(node)` times.
fn assert_provisioned(summary: &Summary, expected: impl Fn(&str) -> u32) {
    for node in &summary.nodes {
        assert_eq!(
            node.phase,
            Phase::Provisioned,
            "{} is {:?}",
            node.identity,
            node.phase
        );
        assert_eq!(
            node.restarts,
            expected(&node.identity),
            "{} restarts: {:?}",
            node.identity,
            node.rpcs
        );
        let config = node.configuration.as_ref().unwrap();
        assert_eq!(config["identity"], node.identity);
        assert_eq!(config["plugin.choria.server.provision"], "false");
    }
}

#[test]
fn a_thousand_nodes_are_provisioned_exactly_once_including_nodes_that_come_back() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 1000, |o| o.comeback = 0.1);
    let prov = Provisioner::start(&server.url(), "p1.test", "", fast());
    wait_until("all provisioned", Duration::from_secs(120), || {
        fleet.progress().provisioned == 1000
    });
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
    wait_until("all provisioned", Duration::from_secs(150), || {
        fleet.progress().provisioned == 200
    });
    let summary = fleet.summary();
    let faulty = summary.nodes.iter().filter(|n| n.fault.is_some()).count();
    assert!(faulty >= 10, "faults were exercised: {faulty}");
    assert_provisioned(&summary, |_| 1);
    assert!(
        prov.daemon().rpc().rejected() > 0,
        "garbage replies were rejected"
    );
    assert!(prov
        .metrics
        .render()
        .contains("choria_provisioner_rpc_time_count"));
}

#[test]
fn nodes_found_by_events_only() {
    let server = NatsServer::start();
    let prov = Provisioner::start(
        &server.url(),
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
    let fleet = sim(&server.url(), 50, |_| {});
    wait_until("all provisioned", Duration::from_secs(60), || {
        fleet.progress().provisioned == 50
    });
    assert_eq!(prov.metrics.event_discovered.get(), 50);
    assert_eq!(prov.metrics.discovered.get(), 0);
    assert_provisioned(&fleet.summary(), |_| 1);
}

#[test]
fn nodes_found_by_discovery_only() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 50, |_| {});
    wait_until("booted", Duration::from_secs(10), || {
        fleet.progress().booted == 50
    });
    // Listening to another component: no startup event reaches the provisioner.
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        "lifecycle_component: elsewhere\n",
        fast(),
    );
    wait_until("all provisioned", Duration::from_secs(60), || {
        fleet.progress().provisioned == 50
    });
    assert_eq!(prov.metrics.discovered.get(), 50);
    assert_eq!(prov.metrics.event_discovered.get(), 0);
    assert_provisioned(&fleet.summary(), |_| 1);
}

#[test]
fn a_full_queue_loses_no_node() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 60, |_| {});
    wait_until("booted", Duration::from_secs(10), || {
        fleet.progress().booted == 60
    });
    let _prov = Provisioner::start(
        &server.url(),
        "p1.test",
        "workers: 2\n",
        DaemonOptions {
            capacity: 5,
            ..fast()
        },
    );
    wait_until("all provisioned", Duration::from_secs(90), || {
        fleet.progress().provisioned == 60
    });
    assert_provisioned(&fleet.summary(), |_| 1);
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
    wait_until("all provisioned", Duration::from_secs(60), || {
        fleet.progress().provisioned == 20
    });
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
    wait_until("all provisioned", Duration::from_secs(120), || {
        fleet.progress().provisioned == 300
    });
    for node in fleet.summary().nodes {
        assert_eq!(node.phase, Phase::Provisioned);
        assert!(node.restarts >= 1);
    }
}

#[test]
fn two_provisioners_with_leader_election_one_provisions_and_the_standby_takes_over() {
    let server = election_broker();
    create_election_bucket(&server, Duration::from_secs(30));
    let url = server
        .url()
        .replace("nats://", "nats://provisioner:s3cret@");
    let node_url = server.url().replace("nats://", "nats://node:n0de@");
    let election = || DaemonOptions {
        election: ElectionOptions {
            startup_spread: Duration::from_millis(200),
            ..ElectionOptions::default()
        },
        ..fast()
    };
    let mut a = Provisioner::start(&url, "a.test", "leader_election: true\n", election());
    let mut b = Provisioner::start(&url, "b.test", "leader_election: true\n", election());
    let leader_of = |p: &Provisioner| {
        p.daemon()
            .election()
            .map(|s| *s.lock() == ElectionState::Leader)
            .unwrap_or(false)
    };
    wait_until("a leader", Duration::from_secs(15), || {
        leader_of(&a) || leader_of(&b)
    });
    let first = sim(&node_url, 50, |o| o.prefix = "first-".into());
    wait_until("first batch provisioned", Duration::from_secs(60), || {
        first.progress().provisioned == 50
    });
    let (leader, standby) = if leader_of(&a) {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    assert_eq!(leader.metrics.provisioned.get(), 50);
    assert_eq!(
        standby.metrics.provisioned.get(),
        0,
        "the standby provisions nothing"
    );
    assert_eq!(standby.metrics.paused.get(), 1);

    assert!(leader.stop(), "clean stop");
    let started = Instant::now();
    wait_until("standby leads", Duration::from_secs(10), || {
        leader_of(standby)
    });
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "handover took {:?}",
        started.elapsed()
    );
    let second = sim(&node_url, 50, |o| o.prefix = "second-".into());
    wait_until("second batch provisioned", Duration::from_secs(60), || {
        second.progress().provisioned == 50
    });
    assert_eq!(standby.metrics.provisioned.get(), 50);
    assert_provisioned(&first.summary(), |_| 1);
    assert_provisioned(&second.summary(), |_| 1);
}

/// The provisioner binary against `url`, logging to a file in `dir`.
fn spawn_binary(dir: &TempDir, url: &str) -> std::process::Child {
    let cfg = dir.write(
        "choria.cfg",
        &format!("identity = p1.test\nplugin.choria.middleware_hosts = {url}\n"),
    );
    let yaml = dir.write(
        "p.yaml",
        &format!(
            "workers: 4\nhelper: {}\nchoria_insecure: true\nshutdown_timeout: 3s\nlogfile: {}\n",
            helper().display(),
            dir.path().join("p.log").display()
        ),
    );
    std::process::Command::new(env!("CARGO_BIN_EXE_choria-provisioner"))
        .args([
            "--config",
            &yaml.display().to_string(),
            "--choria-config",
            &cfg.display().to_string(),
        ])
        .spawn()
        .unwrap()
}

#[test]
fn sigterm_mid_run_exits_0_within_the_bound_and_a_second_run_finishes_the_rest() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 200, |o| {
        o.faults = Faults {
            slow: 0.5,
            slow_by: Duration::from_millis(300),
            ..Faults::default()
        }
    });
    let dir = TempDir::new("sigterm");
    let mut first = spawn_binary(&dir, &server.url());
    wait_until("some provisioned", Duration::from_secs(60), || {
        fleet.progress().provisioned >= 20
    });
    let signalled = Instant::now();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    let status = first.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(
        signalled.elapsed() < Duration::from_secs(3 + 3),
        "bounded: {:?}",
        signalled.elapsed()
    );
    let done = fleet.progress().provisioned;
    assert!(done < 200, "the first run was interrupted ({done} done)");
    let mut second = spawn_binary(&dir, &server.url());
    wait_until("the rest provisioned", Duration::from_secs(120), || {
        fleet.progress().provisioned == 200
    });
    unsafe { libc::kill(second.id() as i32, libc::SIGTERM) };
    assert_eq!(second.wait().unwrap().code(), Some(0));
    for node in fleet.summary().nodes {
        assert_eq!(node.phase, Phase::Provisioned, "{}", node.identity);
    }
}

#[test]
fn when_the_leader_s_connection_dies_the_standby_takes_over_after_the_ttl() {
    let server = election_broker();
    create_election_bucket(&server, Duration::from_secs(4));
    let url = server
        .url()
        .replace("nats://", "nats://provisioner:s3cret@");
    let node_url = server.url().replace("nats://", "nats://node:n0de@");
    let election = || DaemonOptions {
        election: ElectionOptions {
            startup_spread: Duration::from_millis(200),
            ..ElectionOptions::default()
        },
        ..fast()
    };
    let a = Provisioner::start(&url, "a.test", "leader_election: true\n", election());
    let leader_of = |p: &Provisioner| {
        p.daemon()
            .election()
            .map(|s| *s.lock() == ElectionState::Leader)
            .unwrap_or(false)
    };
    wait_until("a leads", Duration::from_secs(15), || leader_of(&a));
    let b = Provisioner::start(&url, "b.test", "leader_election: true\n", election());
    std::thread::sleep(Duration::from_secs(1));
    assert!(!leader_of(&b));
    // The leader's broker connection dies: no resignation, its key must expire.
    a.daemon().connector().nats().clone().close();
    let started = Instant::now();
    wait_until("b leads", Duration::from_secs(20), || leader_of(&b));
    assert!(
        started.elapsed() < Duration::from_secs(4 + 8),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(a.metrics.paused.get(), 1, "the old leader paused itself");
    let fleet = sim(&node_url, 30, |_| {});
    wait_until("b provisions", Duration::from_secs(60), || {
        fleet.progress().provisioned == 30
    });
    assert_eq!(b.metrics.provisioned.get(), 30);
    assert_eq!(a.metrics.provisioned.get(), 0);
    assert_provisioned(&fleet.summary(), |_| 1);
}

#[test]
fn a_second_signal_exits_at_once() {
    let server = NatsServer::start();
    // One node that answers only after 10 s: the worker waits inside an RPC.
    let fleet = sim(&server.url(), 1, |o| {
        o.faults = Faults {
            slow: 1.0,
            slow_by: Duration::from_secs(10),
            ..Faults::default()
        }
    });
    let dir = TempDir::new("second-signal");
    let mut child = spawn_with(&dir, &server.url(), &helper(), "shutdown_timeout: 30s\n");
    wait_until(
        "the first RPC is in flight",
        Duration::from_secs(30),
        || fleet.summary().nodes[0].rpcs.len() == 1,
    );
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first signal waits for the node in flight"
    );
    let second = Instant::now();
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(
        second.elapsed() < Duration::from_secs(2),
        "{:?}",
        second.elapsed()
    );
    assert_eq!(status.code(), Some(1));
}

#[test]
fn stopping_kills_a_running_helper_and_exits_0_within_the_bound() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 1, |_| {});
    let dir = TempDir::new("stop-helper");
    let marker = dir.path().join("helper-finished");
    let slow = dir.script(
        "slow-helper.sh",
        &format!(
            "#!/bin/sh\nsleep 20\ntouch {}\necho '{{\"defer\": true}}'\n",
            marker.display()
        ),
    );
    let mut child = spawn_with(
        &dir,
        &server.url(),
        &slow,
        "helper_timeout: 60s\nshutdown_timeout: 10s\n",
    );
    wait_until("the helper runs", Duration::from_secs(30), || {
        fleet.summary().nodes[0].rpcs.len() == 1
    });
    std::thread::sleep(Duration::from_millis(300));
    let signalled = Instant::now();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "{:?}",
        signalled.elapsed()
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(!marker.exists(), "the helper was killed, not left running");
}

/// The provisioner binary with `helper` and extra YAML, logging to a file in `dir`.
fn spawn_with(
    dir: &TempDir,
    url: &str,
    helper: &std::path::Path,
    yaml: &str,
) -> std::process::Child {
    let cfg = dir.write(
        "choria.cfg",
        &format!("identity = p1.test\nplugin.choria.middleware_hosts = {url}\n"),
    );
    let yaml = dir.write(
        "p.yaml",
        &format!(
            "helper: {}\nchoria_insecure: true\nlogfile: {}\n{yaml}",
            helper.display(),
            dir.path().join("p.log").display()
        ),
    );
    std::process::Command::new(env!("CARGO_BIN_EXE_choria-provisioner"))
        .args([
            "--config",
            &yaml.display().to_string(),
            "--choria-config",
            &cfg.display().to_string(),
        ])
        .spawn()
        .unwrap()
}

const ISSUER_SEED: [u8; 32] = [7; 32];

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn public_of(seed: &[u8; 32]) -> Vec<u8> {
    use ring::signature::KeyPair as _;
    ring::signature::Ed25519KeyPair::from_seed_unchecked(seed)
        .unwrap()
        .public_key()
        .as_ref()
        .to_vec()
}

#[test]
fn feature_jwt_verifies_each_node_s_provisioning_jwt() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 20, |o| {
        o.issuer_seed = Some(ISSUER_SEED);
        o.token = "s3cret".into();
    });
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        &format!(
            "token: s3cret\nfeatures: {{jwt: true}}\njwt_verify_cert: {}\n",
            hex(&public_of(&ISSUER_SEED))
        ),
        fast(),
    );
    wait_until("all provisioned", Duration::from_secs(60), || {
        fleet.progress().provisioned == 20
    });
    for node in fleet.summary().nodes {
        assert_eq!(
            node.rpcs,
            [
                "choria_provision#jwt",
                "rpcutil#inventory",
                "choria_provision#configure",
                "choria_provision#restart"
            ],
            "{}",
            node.identity
        );
    }
    assert_eq!(prov.metrics.provision_errors.get(), 0);
}

#[test]
fn feature_jwt_refuses_a_jwt_from_another_issuer_and_a_wrong_token() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 5, |o| {
        o.issuer_seed = Some([9; 32]);
        o.token = "s3cret".into();
    });
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        &format!(
            "token: s3cret\nfeatures: {{jwt: true}}\njwt_verify_cert: {}\n",
            hex(&public_of(&ISSUER_SEED))
        ),
        fast(),
    );
    wait_until("every node failed once", Duration::from_secs(30), || {
        prov.metrics.provision_errors.get() >= 5
    });
    assert_eq!(
        fleet.progress().configured,
        0,
        "nothing configured with an unverified JWT"
    );
    drop(prov);
    // A wrong token is refused by the node at once: no five tries with back-off.
    let wrong = Provisioner::start(&server.url(), "p2.test", "token: wrong\n", fast());
    wait_until("refused", Duration::from_secs(30), || {
        wrong.metrics.provision_errors.get() >= 5
    });
    assert!(wrong
        .metrics
        .render()
        .contains("choria_provisioner_rpc_errors{rpc=\"rpcutil#inventory\",site=\"test\"} 0"));
    assert_eq!(fleet.progress().configured, 0);
}

#[test]
fn feature_ed25519_issues_each_node_a_signed_server_jwt() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 10, |o| o.issuer_seed = Some(ISSUER_SEED));
    let dir = TempDir::new("ed25519");
    // Without a signing token the server JWT must be signed by the issuer itself,
    // or the broker (here: the simulated node after its restart) refuses it.
    let signer_seed = ISSUER_SEED;
    let seed_file = dir.write("signer.seed", &hex(&signer_seed));
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        &format!(
            "features: {{ed25519: true}}\njwt_verify_cert: {}\njwt_signing_key: {}\n",
            hex(&public_of(&ISSUER_SEED)),
            seed_file.display()
        ),
        fast(),
    );
    wait_until("all provisioned", Duration::from_secs(60), || {
        fleet.progress().provisioned == 10
    });
    assert_eq!(prov.metrics.provision_errors.get(), 0);
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    for node in fleet.summary().nodes {
        assert_eq!(
            node.rpcs,
            [
                "choria_provision#jwt",
                "choria_provision#gen25519",
                "rpcutil#inventory",
                "choria_provision#configure",
                "choria_provision#restart"
            ]
        );
        let jwt = node.server_jwt.expect("a server JWT was written");
        let parts: Vec<&str> = jwt.split('.').collect();
        let claims: serde_json::Value =
            serde_json::from_slice(&b64.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(claims["identity"], node.identity.as_str());
        assert_eq!(claims["purpose"], "choria_server");
        assert_eq!(claims["public_key"].as_str().unwrap().len(), 64);
        ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public_of(&signer_seed))
            .verify(
                format!("{}.{}", parts[0], parts[1]).as_bytes(),
                &b64.decode(parts[2]).unwrap(),
            )
            .expect("signed with jwt_signing_key");
    }
}

#[test]
fn feature_upgrades_upgrades_then_provisions_and_equal_versions_skip_the_upgrade() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 10, |o| {
        o.upgradable = true;
        o.version = "0.30.2".into();
    });
    let dir = TempDir::new("upgrades");
    let upgrading = dir.script(
        "upgrade-helper.sh",
        "#!/bin/sh\nid=$(sed -n 's/^{\"identity\":\"\\([^\"]*\\)\".*/\\1/p')\n\
         echo \"{\\\"upgrade\\\": \\\"0.31.0\\\", \\\"configuration\\\": {\\\"identity\\\": \\\"$id\\\", \\\"plugin.choria.server.provision\\\": \\\"false\\\"}}\"\n",
    );
    let yaml = format!(
        "helper: {}\nfeatures: {{upgrades: true}}\nupgrades_repository: https://repo.example.net/choria\n",
        upgrading.display()
    );
    let mut prov = Provisioner::start(
        &server.url(),
        "p1.test",
        &format!("workers: 4\n{yaml}"),
        fast(),
    );
    wait_until(
        "all upgraded and provisioned",
        Duration::from_secs(60),
        || fleet.progress().provisioned == 10,
    );
    for node in fleet.summary().nodes {
        assert_eq!(node.upgrades, ["0.31.0"], "{}", node.identity);
        assert_eq!(node.version, "0.31.0");
        assert_eq!(
            node.rpcs,
            [
                "rpcutil#inventory",
                "choria_provision#release_update",
                "rpcutil#inventory",
                "choria_provision#configure",
                "choria_provision#restart"
            ],
            "upgraded once, then configured on the new version without a second upgrade"
        );
    }
    assert_eq!(
        prov.metrics.provisioned.get(),
        20,
        "an upgrade counts as provisioned, as in Go"
    );
    prov.stop();
}

#[test]
fn feature_pki_validates_each_node_s_csr_and_hands_it_to_the_helper() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 10, |o| o.issuer_seed = Some(ISSUER_SEED));
    let dir = TempDir::new("pki");
    let seen = dir.path().join("csr-seen");
    // Records that the helper got the CSR, then configures the node.
    let helper = dir.script(
        "pki-helper.sh",
        &format!(
            "#!/bin/sh\ninput=$(cat)\nid=$(printf '%s' \"$input\" | sed -n 's/^{{\"identity\":\"\\([^\"]*\\)\".*/\\1/p')\n\
             case \"$input\" in *BEGIN\\ CERTIFICATE\\ REQUEST*) echo \"$id\" >> {} ;; esac\n\
             echo \"{{\\\"configuration\\\": {{\\\"identity\\\": \\\"$id\\\", \\\"plugin.choria.server.provision\\\": \\\"false\\\"}}}}\"\n",
            seen.display()
        ),
    );
    let _prov = Provisioner::start(
        &server.url(),
        "p1.test",
        &format!(
            "helper: {}\nfeatures: {{jwt: true, pki: true}}\njwt_verify_cert: {}\n",
            helper.display(),
            hex(&public_of(&ISSUER_SEED))
        ),
        fast(),
    );
    wait_until("all provisioned", Duration::from_secs(60), || {
        fleet.progress().provisioned == 10
    });
    for node in fleet.summary().nodes {
        assert_eq!(
            node.rpcs,
            [
                "choria_provision#jwt",
                "rpcutil#inventory",
                "choria_provision#gencsr",
                "choria_provision#configure",
                "choria_provision#restart"
            ]
        );
    }
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap().lines().count(),
        10,
        "every helper run saw a CSR"
    );
}

#[test]
fn feature_pki_refuses_a_denied_identity() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 3, |o| o.domain = "privileged.choria".into());
    let prov = Provisioner::start(&server.url(), "p1.test", "features: {pki: true}\n", fast());
    wait_until("refused", Duration::from_secs(30), || {
        prov.metrics.provision_errors.get() >= 3
    });
    assert_eq!(
        fleet.progress().configured,
        0,
        "a denied name is never configured"
    );
}

/// A helper script answering `body` (JSON with `$id` for the node identity).
fn helper_answering(dir: &TempDir, name: &str, body: &str, delay: &str) -> PathBuf {
    dir.script(
        name,
        &format!(
            "#!/bin/sh\nid=$(sed -n 's/^{{\"identity\":\"\\([^\"]*\\)\".*/\\1/p')\nsleep {delay}\ncat <<JSON\n{body}\nJSON\n"
        ),
    )
}

const CONFIG: &str =
    r#""configuration": {"identity": "$id", "plugin.choria.server.provision": "false"}"#;

#[test]
fn the_helper_can_shut_a_node_down() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 3, |_| {});
    let dir = TempDir::new("shutdown");
    let h = helper_answering(
        &dir,
        "h.sh",
        r#"{"shutdown": true, "msg": "decommissioned"}"#,
        "0",
    );
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        &format!("helper: {}\n", h.display()),
        fast(),
    );
    wait_until("all shut down", Duration::from_secs(30), || {
        fleet
            .summary()
            .nodes
            .iter()
            .all(|n| n.phase == Phase::Shutdown)
    });
    for node in fleet.summary().nodes {
        assert_eq!(
            node.rpcs,
            ["rpcutil#inventory", "choria_provision#shutdown"]
        );
    }
    wait_until("counted", Duration::from_secs(5), || {
        prov.metrics.helper_shutdown_requests.get() == 3
    });
}

fn upgrade_run(target: &str, upgradable: bool, optional: bool) -> (Summary, Arc<Metrics>) {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 3, |o| {
        o.upgradable = upgradable;
        o.version = "0.30.2".into();
    });
    let dir = TempDir::new("upgrade");
    let h = helper_answering(
        &dir,
        "h.sh",
        &format!(r#"{{"upgrade": "{target}", {CONFIG}}}"#),
        "0",
    );
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        &format!(
            "helper: {}\nfeatures: {{upgrades: true}}\nupgrades_repository: https://repo.example.net\nupgrades_optional: {optional}\n",
            h.display()
        ),
        fast(),
    );
    wait_until("settled", Duration::from_secs(30), || {
        fleet.progress().provisioned == 3 || prov.metrics.provision_errors.get() >= 3
    });
    (fleet.summary(), Arc::clone(&prov.metrics))
}

#[test]
fn upgrades_equal_older_failed_and_optional() {
    // Equal: no release_update at all.
    let (s, _) = upgrade_run("0:0.30.2", true, false);
    assert!(s
        .nodes
        .iter()
        .all(|n| n.upgrades.is_empty() && n.phase == Phase::Provisioned));
    // Older: downgrades are allowed (Go #210).
    let (s, _) = upgrade_run("0.29.0", true, false);
    assert!(s.nodes.iter().all(|n| n.upgrades == ["0.29.0"]));
    // Failed (the node refuses updates) and not optional: nothing is configured.
    let (s, m) = upgrade_run("0.31.0", false, false);
    assert!(
        s.nodes.iter().all(|n| n.configuration.is_none()),
        "{:?}",
        s.nodes[0].rpcs
    );
    assert!(m.provision_errors.get() >= 3);
    // Failed but optional: configured on the old version.
    let (s, _) = upgrade_run("0.31.0", false, true);
    assert!(s
        .nodes
        .iter()
        .all(|n| n.phase == Phase::Provisioned && n.version == "0.30.2"));
}

#[test]
fn a_node_locked_by_another_provisioner_fails_at_once() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 1, |_| {});
    // Another provisioner (another sender and caller) takes the node's lock.
    let other = Provisioner::start_paused(&server.url(), "other.test", "", fast(), true);
    let rpc = other.daemon().rpc();
    let id = fleet.summary().nodes[0].identity.clone();
    let reply = rpc
        .call(
            &id,
            "choria_provision",
            "jwt",
            &serde_json::json!({"token": ""}),
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!(reply.statuscode, 0, "the other caller holds the lock now");
    let dir = TempDir::new("lock");
    let h = helper_answering(&dir, "h.sh", &format!("{{{CONFIG}}}"), "0");
    let started = Instant::now();
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        &format!("helper: {}\n", h.display()),
        fast(),
    );
    wait_until("refused", Duration::from_secs(20), || {
        prov.metrics.provision_errors.get() >= 1
    });
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "no five tries with back-off"
    );
    let rpcs = &fleet.summary().nodes[0].rpcs;
    assert_eq!(
        rpcs.iter()
            .filter(|r| *r == "choria_provision#configure")
            .count(),
        1,
        "one configure, refused at once: {rpcs:?}"
    );
}

#[test]
fn pausing_mid_sequence_stops_the_node_before_its_next_rpc() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 1, |_| {});
    let dir = TempDir::new("pause");
    let h = helper_answering(&dir, "h.sh", &format!("{{{CONFIG}}}"), "2");
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        &format!("helper: {}\n", h.display()),
        fast(),
    );
    wait_until("the helper runs", Duration::from_secs(20), || {
        fleet.summary().nodes[0].rpcs.len() == 1
    });
    prov.pause.pause();
    wait_until("the attempt ends", Duration::from_secs(20), || {
        prov.metrics.provision_errors.get() == 1
    });
    assert_eq!(
        fleet.summary().nodes[0].rpcs,
        ["rpcutil#inventory"],
        "no configure after the pause"
    );
}

#[test]
fn the_helper_s_private_key_reaches_the_node_encrypted_and_decrypts_there() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 5, |o| o.issuer_seed = Some(ISSUER_SEED));
    let dir = TempDir::new("key");
    let key_pem = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rsa2048-pkcs1.pem"),
    )
    .unwrap();
    let cert = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rsa2048-cert.pem"),
    )
    .unwrap();
    let answer = serde_json::json!({
        "configuration": {"identity": "$id", "plugin.choria.server.provision": "false"},
        "certificate": cert,
        "ca": cert,
        "key": key_pem,
    });
    let h = helper_answering(&dir, "h.sh", &answer.to_string(), "0");
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        &format!(
            "helper: {}\nfeatures: {{jwt: true, pki: true}}\njwt_verify_cert: {}\n",
            h.display(),
            hex(&public_of(&ISSUER_SEED))
        ),
        fast(),
    );
    wait_until("all provisioned", Duration::from_secs(60), || {
        fleet.progress().provisioned == 5
    });
    assert_eq!(prov.metrics.provision_errors.get(), 0);
    let der = |pem: &str| -> Vec<u8> {
        use base64::Engine as _;
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap()
    };
    for node in fleet.summary().nodes {
        let got = node.private_key.expect("the node decrypted a private key");
        assert_eq!(
            der(&got),
            der(&key_pem),
            "{}: the key the helper made",
            node.identity
        );
    }
}

#[test]
fn a_node_waiting_longer_than_twice_the_interval_is_skipped() {
    use choria_provisioner::host::sequence::{Provisioner as Sequence, Timeouts};
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 1, |_| {});
    let dir = TempDir::new("stale");
    let cfg = dir.write(
        "choria.cfg",
        &format!(
            "identity = p1.test\nplugin.choria.middleware_hosts = {}\n",
            server.url()
        ),
    );
    let yaml = dir.write(
        "p.yaml",
        &format!("helper: {}\nchoria_insecure: true\n", helper().display()),
    );
    let config = Arc::new(Config::load(&yaml).unwrap().config);
    let mut client = ClientConfig::load(&cfg).unwrap();
    client.apply_provisioner_overrides(&config);
    let metrics = Arc::new(Metrics::new("test").unwrap());
    let pause = Arc::new(Pause::new(metrics.paused.clone()));
    let (_stop, shutdown) = bounded::<()>(0);
    let conn =
        choria_provisioner::choria::connector::Connector::connect(&client, &metrics, &shutdown)
            .unwrap();
    let rpc = Arc::new(choria_provisioner::choria::rpc::RpcClient::new(&conn, &client).unwrap());
    let timeouts = Timeouts {
        provision: Duration::from_secs(5),
        rpcutil: Duration::from_secs(2),
    };
    let sequence = Sequence::new(config, rpc, metrics, pause, timeouts).unwrap();
    let id = fleet.summary().nodes[0].identity.clone();
    let stopping = std::sync::atomic::AtomicBool::new(false);
    let since = Instant::now() - Duration::from_secs(121);
    let outcome = sequence.provision(&id, since, &stopping);
    assert!(
        outcome
            .to_string()
            .starts_with("skipping node that's been waiting 121s"),
        "{outcome}"
    );
    assert!(
        fleet.summary().nodes[0].rpcs.is_empty(),
        "nothing was asked"
    );
    let fresh = sequence.provision(&id, Instant::now(), &stopping);
    assert!(fresh.is_success(), "{fresh}");
}

#[test]
fn ten_thousand_simulated_nodes_start_and_answer_one_discovery() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 10_000, |_| {});
    wait_until("booted", Duration::from_secs(30), || {
        fleet.progress().booted == 10_000
    });
    let prov = Provisioner::start_paused(&server.url(), "p1.test", "", fast(), true);
    let found = prov
        .daemon()
        .rpc()
        .discover(
            Duration::from_secs(2),
            Duration::from_millis(500),
            Duration::from_secs(20),
        )
        .unwrap();
    assert_eq!(found.len(), 10_000);
    assert_eq!(fleet.progress().discovery_replies, 10_000);
}
