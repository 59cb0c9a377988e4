//! Only a provisioner writes the tables a site's instances share: two instances of
//! the real binary in secure mode (the `file` provider, mutual TLS through the
//! Choria broker front end), and a forger who holds the broker's provisioning
//! password. Its heartbeats, handoffs and approvals (unsigned, signed by a CA the
//! site does not trust, signed by a certificate of the site whose name is not a
//! provisioner's, or a real instance's message replayed) are refused and counted,
//! and change nothing; a real peer's messages after them are merged.
#![cfg(feature = "sim")]

mod support;

use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use choria_provisioner::choria::connector::Connector;
use choria_provisioner::choria::subject::{Subject, SubjectFilter};
use choria_provisioner::metrics::Metrics;
use choria_provisioner::sim::keygen::{client_pki, ClientCredential};
use choria_provisioner::sim::peer::sealed_with_certificate;
use md5::Digest as _;
use parking_lot::Mutex;
use support::broker::{ChoriaBroker, Network};
use support::daemon::{cli, cli_ok, example_helper};
use support::hostile::startup_event;
use support::rig::*;
use support::{free_port, http_get, wait_for_port, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_choria-provisioner");

/// An instance killed when the test ends.
struct Instance {
    child: Child,
    dir: TempDir,
    port: u16,
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Instance {
    /// The binary as `identity` through the rig, with `security` as its
    /// `plugin.security.*` lines: active-active in site `lon`, approval required.
    fn start(rig: &ChoriaBroker, security: &str, identity: &str) -> Instance {
        let dir = TempDir::new("peer-seal");
        let port = free_port();
        let cfg = dir.write(
            "choria.cfg",
            &format!(
                "identity = {identity}\nplugin.choria.middleware_hosts = {}\n{security}",
                rig.url()
            ),
        );
        let yaml = dir.write(
            "p.yaml",
            &format!(
                "logfile: {}\n{}helper: {}\nworkers: 2\nshutdown_timeout: 3s\n\
                 monitor_host: 127.0.0.1\nmonitor_port: {port}\ncontrol_socket: {}\n\
                 pause_file: {}\napproval: required\nactive_active: true\nsite: lon\n",
                dir.path().join("p.log").display(),
                rig.yaml(),
                example_helper().display(),
                dir.path().join("control.sock").display(),
                dir.path().join("paused").display(),
            ),
        );
        let child = std::process::Command::new(BIN)
            .args(["--config", &yaml.display().to_string()])
            .args(["--choria-config", &cfg.display().to_string()])
            .spawn()
            .unwrap();
        let instance = Instance { child, dir, port };
        assert!(wait_for_port(port, Duration::from_secs(30)), "monitor up");
        wait_until("control socket", Duration::from_secs(20), || {
            cli(&instance.dir, &["pending", "--json"]).status.success()
        });
        instance
    }

    fn metric(&self, line_start: &str) -> f64 {
        let (_, text) = http_get(self.port, "/metrics");
        text.lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {line_start} in {text}"))
    }

    fn refused(&self, reason: &str) -> f64 {
        self.metric(&format!(
            "choria_provisioner_peer_messages_refused{{reason=\"{reason}\""
        ))
    }

    /// The live instances of the site, this one included.
    fn peers(&self) -> f64 {
        self.metric("choria_provisioner_peers{")
    }

    /// The identities `pending --json` lists.
    fn pending(&self) -> Vec<String> {
        let v: serde_json::Value =
            serde_json::from_str(&cli_ok(&self.dir, &["pending", "--json"])).unwrap();
        v["pending"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["identity"].as_str().unwrap().to_string())
            .collect()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("p.log")).unwrap_or_default()
    }
}

/// Waits until each of two instances counts both among the live set.
fn see_each_other(p1: &Instance, p2: &Instance) {
    wait_until(
        "each instance sees the other",
        Duration::from_secs(30),
        || p1.peers() == 2.0 && p2.peers() == 2.0,
    );
}

/// Every message on `provisioning.provisioner.>`, as (subject, bytes).
type Heard = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// The first message heard on a subject `on` accepts whose body says `text`.
fn heard(heard: &Heard, on: impl Fn(&str) -> bool, text: &str) -> Option<(String, Vec<u8>)> {
    heard
        .lock()
        .iter()
        .find(|(s, d)| on(s) && body_of(d).contains(text))
        .cloned()
}

/// A real handoff from p2 to p1, as heard. The fleet's own startup events give
/// one only when an event of a node p1 owns reached p2 (the queue group splits them)
/// before either instance knew the node: with 12 nodes, none does once in 30 runs.
/// So, until one is heard, the forger announces made-up nodes, 8 at a time: each
/// reaches p2 and is p1's one time in four, so 64 of them all miss once in 10^8.
fn a_handoff_heard(forger: &Connector, log: &Heard, to_p1: &str) -> (String, Vec<u8>) {
    for round in 0..=8 {
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while std::time::Instant::now() < deadline {
            if let Some(h) = heard(log, |s| s == to_p1, "\"node\"") {
                return h;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        for n in 0..8 {
            publish(
                forger,
                "choria.lifecycle.event.startup.provision_mode_server",
                &startup_event(
                    &format!("late-{round}-{n}.example.net"),
                    "provision_mode_server",
                ),
            );
        }
        forger.bus().flush(Duration::from_secs(5)).unwrap();
    }
    panic!("no handoff to p1 heard after 64 nodes announced");
}

/// The nodes of the test's fleet.
const NODES: usize = 12;

/// The body of a sealed message.
fn body_of(sealed: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(sealed).unwrap_or_default();
    let body = STANDARD
        .decode(v["body"].as_str().unwrap_or_default())
        .unwrap_or_default();
    String::from_utf8(body).unwrap_or_default()
}

fn publish(forger: &Connector, subject: &str, data: &[u8]) {
    forger
        .bus()
        .publish(&Subject::new(subject).unwrap(), data)
        .unwrap();
}

#[test]
fn forged_heartbeats_handoffs_and_approvals_are_refused_and_a_real_peer_s_are_merged() {
    let rig = ChoriaBroker::start(Network::MutualTls);
    let scratch = TempDir::new("peer-seal-keys");
    let year = Duration::from_secs(365 * 86_400);
    // The site trusts a second CA of its own (its bundle holds both), which signed
    // a node's certificate; a third CA nobody trusts signed one in the
    // provisioners' own name.
    let (second_ca, mut second) = client_pki(&["web1.test"], year).unwrap();
    let node: ClientCredential = second.pop().unwrap();
    let (_, mut third) = client_pki(&["provisioner.test.local"], year).unwrap();
    let rogue: ClientCredential = third.pop().unwrap();
    let bundle = scratch.write(
        "bundle.pem",
        &format!(
            "{}{second_ca}",
            std::fs::read_to_string(rig.path("ca.pem")).unwrap()
        ),
    );
    let security: String = rig
        .choria_cfg()
        .lines()
        .map(|l| {
            if l.starts_with("plugin.security.file.ca") {
                format!("plugin.security.file.ca = {}\n", bundle.display())
            } else {
                format!("{l}\n")
            }
        })
        .collect();

    // The forger: the provisioning password and a certificate the broker takes,
    // listening to everything the instances say.
    let forger = Connector::connect_once(
        &rig.client("forger.test"),
        &Arc::new(Metrics::new("f").unwrap()),
    )
    .expect("the forger gets in");
    let log: Heard = Arc::default();
    let kept = Arc::clone(&log);
    let _listening = forger
        .bus()
        .subscribe(
            &SubjectFilter::new("provisioning.provisioner.>").unwrap(),
            None,
            move |m| kept.lock().push((m.subject, m.data)),
        )
        .unwrap();
    forger.bus().flush(Duration::from_secs(5)).unwrap();

    let p1 = Instance::start(&rig, &security, "p1.test");
    let p2 = Instance::start(&rig, &security, "p2.test");
    see_each_other(&p1, &p2);
    let fleet = sim(&rig.url(), NODES, |o| rig.nodes(o));
    wait_until(
        "every node pending on both",
        Duration::from_secs(60),
        || p1.pending().len() == NODES && p2.pending().len() == NODES,
    );
    cli_ok(&p2.dir, &["approve", "sim-00000.example.net"]);
    wait_provisioned(&fleet, 1, Duration::from_secs(60));
    let approvals_of_p2 = format!(
        "provisioning.provisioner.approvals.lon.{}",
        hex::encode(md5::Md5::digest(b"p2.test"))
    );
    let handoffs_to_p1 = format!(
        "provisioning.provisioner.peers.lon.node.{}",
        hex::encode(md5::Md5::digest(b"p1.test"))
    );
    let approval =
        heard(&log, |s| s == approvals_of_p2, "\"approved\"").expect("p2's approval heard");
    let beat = heard(
        &log,
        |s| s == "provisioning.provisioner.peers.lon",
        "\"p2.test\"",
    )
    .expect("p2's heartbeat heard");
    let handoff = a_handoff_heard(&forger, &log, &handoffs_to_p1);

    // Each message turned into what the forger wants: sim-00001 approved, a peer
    // p9 alive, a made-up node handed over.
    let forged = [
        (
            approval.0.clone(),
            body_of(&approval.1).replace("sim-00000", "sim-00001"),
        ),
        (
            beat.0.clone(),
            body_of(&beat.1).replace("p2.test", "p9.test"),
        ),
        (handoff.0.clone(), {
            let b = body_of(&handoff.1);
            let node = serde_json::from_str::<serde_json::Value>(&b).unwrap()["node"]
                .as_str()
                .unwrap()
                .to_string();
            b.replace(&node, "ghost-handoff.example.net")
        }),
    ];
    let now = || choria_provisioner::clock::unix_now();
    let before: Vec<f64> = ["unsigned", "untrusted", "signer", "replayed"]
        .iter()
        .map(|r| p1.refused(r))
        .collect();
    for (subject, body) in &forged {
        publish(&forger, subject, body.as_bytes());
        let by = |c: &ClientCredential| {
            sealed_with_certificate(&c.certificate, &c.key, subject, body.as_bytes(), now())
                .unwrap()
        };
        publish(&forger, subject, &by(&rogue));
        publish(&forger, subject, &by(&node));
    }
    for (subject, data) in [&approval, &beat, &handoff] {
        publish(&forger, subject, data);
    }
    forger.bus().flush(Duration::from_secs(5)).unwrap();
    wait_until("every forgery counted", Duration::from_secs(15), || {
        ["unsigned", "untrusted", "signer"]
            .iter()
            .zip(&before)
            .all(|(r, b)| p1.refused(r) >= b + 3.0)
            && p1.refused("replayed") >= before[3] + 3.0
    });
    // Nothing merged: p9 is no peer, the ghost was not queued (it would be
    // pending), sim-00001 is still pending and never provisioned.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(p1.peers(), 2.0, "p9 is no peer");
    let pending = p1.pending();
    assert!(
        pending.contains(&"sim-00001.example.net".to_string()),
        "{pending:?}"
    );
    assert!(
        !pending.iter().any(|p| p.starts_with("ghost")),
        "{pending:?}"
    );
    assert_eq!(pending.len(), NODES - 1, "{pending:?}");
    assert_eq!(fleet.progress().provisioned, 1);
    assert!(
        p1.log().contains("peer_messages_refused"),
        "the refusals are logged"
    );

    // A real peer's message after all that is believed.
    cli_ok(&p2.dir, &["approve", "sim-00001.example.net"]);
    wait_until("p1 learns p2's approval", Duration::from_secs(20), || {
        !p1.pending().contains(&"sim-00001.example.net".to_string())
    });
    wait_provisioned(&fleet, 2, Duration::from_secs(60));
    assert_eq!(p1.peers(), 2.0, "p2's heartbeats still count");
    assert_eq!(
        provisioned_names(&fleet),
        ["sim-00000.example.net", "sim-00001.example.net"]
    );
    fleet.stop();
}

/// With the `choria` provider the instances sign with their seed and present their
/// client JWT, which the organisation issuer signed with the `provisioner`
/// permission: they believe each other, and refuse a JWT without that permission.
#[test]
fn instances_of_an_issuer_network_believe_each_other_s_client_jwts() {
    let rig = ChoriaBroker::start(Network::Issuer);
    let security = rig.choria_cfg();
    assert!(
        security.contains("plugin.security.issuer.choria.public"),
        "the keys command names the issuer: {security}"
    );
    let p1 = Instance::start(&rig, &security, "p1.test");
    let p2 = Instance::start(&rig, &security, "p2.test");
    see_each_other(&p1, &p2);
    for reason in [
        "unsigned",
        "untrusted",
        "signer",
        "signature",
        "replayed",
        "stale",
    ] {
        assert_eq!(p1.refused(reason), 0.0, "{reason}");
        assert_eq!(p2.refused(reason), 0.0, "{reason}");
    }
    assert!(p1.log().contains("are signed, and theirs checked"));
}
