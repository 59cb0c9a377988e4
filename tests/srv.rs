//! Brokers found only by DNS SRV records, as go-choria finds them: against a DNS server
//! of the tests on 127.0.0.1, in process (the resolver pointed at it, an option for
//! tests only) and, where user namespaces are allowed, the binary in a network
//! namespace of its own whose `/etc/resolv.conf` names that server on port 53.
#![cfg(feature = "sim")]

mod support;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use choria_provisioner::choria::client_config::{BrokersFoundBy, ClientConfig};
use choria_provisioner::choria::srv::Resolver;
use choria_provisioner::config::{Config, Pause};
use choria_provisioner::fleet::daemon::{Daemon, DaemonOptions};
use choria_provisioner::metrics::Metrics;
use crossbeam_channel::bounded;
use support::dns::{DnsServer, Zone};
use support::rig::*;
use support::{NatsServer, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_choria-provisioner");

/// A zone naming the broker at `target:port` by `record`, with the host's A record.
fn zone(record: &str, target: &str, port: u16) -> Zone {
    let mut srv = HashMap::new();
    srv.insert(
        record.to_string(),
        vec![
            // A lower priority on a port where nothing listens: tried after.
            (20, 0, 1, target.to_string()),
            (10, 5, port, target.to_string()),
        ],
    );
    let mut a = HashMap::new();
    a.insert(target.to_string(), Ipv4Addr::LOCALHOST);
    Zone { srv, a }
}

#[test]
fn five_nodes_are_provisioned_through_a_broker_found_by_its_srv_record() {
    let server = NatsServer::start();
    // Only go-choria's second name has records: the first is asked, then this one.
    let dns = DnsServer::start(
        zone(
            "_x-puppet-mcollective._tcp.example.net",
            "localhost",
            server.port,
        ),
        0,
    );
    let dir = TempDir::new("srv");
    let cfg = dir.write(
        "choria.cfg",
        "identity = p1.test\nplugin.choria.srv_domain = example.net\n",
    );
    let yaml = dir.write(
        "p.yaml",
        &format!("choria_insecure: true\n{}", support::daemon::base_yaml("")),
    );
    let config = Arc::new(Config::load(&yaml).unwrap().config);
    let mut client = ClientConfig::load(&cfg).unwrap();
    choria_provisioner::cli::apply_provisioner_overrides(&mut client, &config);
    assert!(
        client.validate().is_empty(),
        "no hosts is not a problem: {:?}",
        client.validate()
    );
    client.resolver = Some(Resolver::with_servers(
        vec![dns.addr()],
        Duration::from_secs(2),
    ));
    let brokers = client.brokers();
    assert_eq!(
        brokers.urls,
        [
            format!("nats://localhost:{}", server.port),
            "nats://localhost:1".to_string()
        ],
        "by priority"
    );
    assert!(matches!(brokers.found_by, BrokersFoundBy::Srv(_)));
    assert_eq!(
        brokers.lookups(),
        [
            "SRV _mcollective-server._tcp.example.net: no records",
            "SRV _x-puppet-mcollective._tcp.example.net: 2 brokers"
        ]
    );
    let metrics = Arc::new(Metrics::new("test").unwrap());
    let pause = Arc::new(Pause::new(metrics.paused.clone()));
    let (_stop, shutdown) = bounded::<()>(0);
    let daemon = Daemon::start(
        &config,
        &client,
        &metrics,
        &pause,
        DaemonOptions::default(),
        &shutdown,
    )
    .unwrap();
    let fleet = sim(&server.url(), 5, |_| {});
    wait_provisioned(&fleet, 5, Duration::from_secs(60));
    assert!(dns.answered() >= 2, "{}", dns.answered());
    assert!(daemon.stop());
}

#[test]
fn without_records_or_hosts_go_choria_s_default_broker_is_named() {
    let dns = DnsServer::start(Zone::default(), 0);
    let dir = TempDir::new("srv-none");
    let cfg = dir.write(
        "choria.cfg",
        "identity = p1.corp.example.net\nplugin.choria.use_srv = true\n",
    );
    let mut client = ClientConfig::load(&cfg).unwrap();
    client.resolver = Some(Resolver::with_servers(
        vec![dns.addr()],
        Duration::from_secs(2),
    ));
    // No srv_domain and no domain from the resolver: the identity's domain.
    let brokers = client.brokers();
    assert_eq!(brokers.urls, ["nats://puppet:4222"]);
    assert_eq!(
        brokers.lookups(),
        [
            "SRV _mcollective-server._tcp.corp.example.net: no records",
            "SRV _x-puppet-mcollective._tcp.corp.example.net: no records"
        ]
    );
    assert!(brokers.describe().contains("no SRV records found"));
    // A resolver that does not answer: said, and still the default.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client.resolver = Some(Resolver::with_servers(
        vec![silent.local_addr().unwrap()],
        Duration::from_millis(200),
    ));
    let brokers = client.brokers();
    assert_eq!(brokers.urls, ["nats://puppet:4222"]);
    assert!(
        brokers.lookups()[0].contains("no name server answered"),
        "{:?}",
        brokers.lookups()
    );
    // SRV off: no lookup at all.
    std::fs::write(&cfg, "identity = p1.test\nplugin.choria.use_srv = false\n").unwrap();
    let client = ClientConfig::load(&cfg).unwrap();
    let brokers = client.brokers();
    assert_eq!(brokers.urls, ["nats://puppet:4222"]);
    assert!(brokers.lookups().is_empty());
}

/// Whether this machine lets us make a user, network and mount namespace and bring
/// its loopback up (`unshare` from util-linux, `ip` from iproute2: either may be
/// missing, or user namespaces refused, on a CI machine).
fn namespaces_allowed() -> bool {
    Command::new("unshare")
        .args(["-rnm", "sh", "-c", "ip link set lo up"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_binary_finds_its_broker_by_srv_in_a_network_namespace_of_its_own() {
    if !namespaces_allowed() {
        println!("SKIP the_binary_finds_its_broker_by_srv_in_a_network_namespace_of_its_own: unshare -rnm with ip link is not available here");
        return;
    }
    let dir = TempDir::new("srv-netns");
    // The namespace's resolver: our DNS server on 127.0.0.1:53, the domain by search.
    let resolv = dir.write("resolv.conf", "nameserver 127.0.0.1\nsearch example.net\n");
    let status = Command::new("unshare")
        .args(["-rnm", "--", "sh", "-c"])
        .arg(
            "ip link set lo up && mount --bind \"$1\" /etc/resolv.conf && \
             exec \"$2\" --exact srv_in_a_namespace --include-ignored --nocapture --test-threads=1",
        )
        .arg("sh")
        .arg(&resolv)
        .arg(std::env::current_exe().unwrap())
        .env("CHORIA_PROVISIONER_SRV_NAMESPACE", "1")
        .status()
        .unwrap();
    assert!(
        status.success(),
        "the test inside the namespace failed: {status}"
    );
}

/// Run by the test above inside its namespace (ignored otherwise): 5 nodes provisioned
/// by the binary through the broker its SRV record names, and `check` saying so.
#[test]
#[ignore = "run inside a network namespace by the_binary_finds_its_broker_by_srv_in_a_network_namespace_of_its_own"]
fn srv_in_a_namespace() {
    if std::env::var_os("CHORIA_PROVISIONER_SRV_NAMESPACE").is_none() {
        return;
    }
    let server = NatsServer::start();
    let _dns = DnsServer::start(
        zone(
            "_mcollective-server._tcp.example.net",
            "broker.example.net",
            server.port,
        ),
        53,
    );
    let dir = TempDir::new("srv-inside");
    // No middleware_hosts and no srv_domain: the domain comes from resolv.conf.
    let cfg = dir.write("choria.cfg", "identity = provisioner.test\n");
    let helper = support::daemon::example_helper();
    let yaml = dir.write(
        "p.yaml",
        &format!(
            "helper: {}\nchoria_insecure: true\nworkers: 2\nshutdown_timeout: 3s\nlogfile: {}\n",
            helper.display(),
            dir.path().join("p.log").display()
        ),
    );
    let out = support::passing_check(BIN, &yaml, &cfg);
    assert!(
        out.contains("lookup: SRV _mcollective-server._tcp.example.net: 2 brokers"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "brokers: nats://broker.example.net:{}, nats://broker.example.net:1 (from the SRV records of _mcollective-server._tcp.example.net)",
            server.port
        )),
        "{out}"
    );
    let mut child = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&yaml)
        .arg("--choria-config")
        .arg(&cfg)
        .spawn()
        .unwrap();
    let fleet = sim(&server.url(), 5, |_| {});
    let provisioned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_provisioned(&fleet, 5, Duration::from_secs(60))
    }));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    if provisioned.is_err() {
        panic!(
            "not provisioned; the log:\n{}",
            std::fs::read_to_string(dir.path().join("p.log")).unwrap_or_default()
        );
    }
    let log = std::fs::read_to_string(dir.path().join("p.log")).unwrap();
    assert!(log.contains("Brokers nats://broker.example.net:"), "{log}");
}
