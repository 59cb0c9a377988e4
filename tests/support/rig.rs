//! A provisioner daemon and a simulated fleet in this process, for the tests that need
//! the whole provisioner against a real nats-server.

use std::time::{Duration, Instant};

use std::path::PathBuf;

use choria_provisioner::fleet::daemon::DaemonOptions;
use choria_provisioner::sim::{Phase, Sim, SimOptions, Summary};

use super::broker::ChoriaBroker;
use super::{NatsServer, TempDir};

#[allow(unused_imports)] // not every test binary uses it
pub use super::daemon::InProcess as Provisioner;

/// Short intervals and cool-downs for tests.
pub fn fast() -> DaemonOptions {
    DaemonOptions {
        cooldown: Duration::from_secs(3),
        interval: Some(Duration::from_secs(2)),
        ..DaemonOptions::default()
    }
}

/// A simulated fleet of `nodes` on `url`, restarting in 500 ms, adjusted by `f`.
pub fn sim(url: &str, nodes: usize, f: impl FnOnce(&mut SimOptions)) -> Sim {
    let mut options = SimOptions {
        nodes,
        restart_delay: Duration::from_millis(500),
        ..SimOptions::default()
    };
    f(&mut options);
    Sim::start(url, options).unwrap()
}

/// A simulator adjustment: every node answers every request `by` late.
pub fn all_late(by: Duration) -> impl FnOnce(&mut SimOptions) {
    move |o| {
        o.faults.slow = 1.0;
        o.faults.slow_by = by;
    }
}

/// Waits for `f`, failing the test after `within`.
pub fn wait_until(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `fleet` counts `nodes` provisioned, failing the test after `within`
/// with how many were.
/// The identities of `fleet` that are provisioned, in order.
pub fn provisioned_names(fleet: &Sim) -> Vec<String> {
    fleet
        .summary()
        .nodes
        .into_iter()
        .filter(|n| n.phase == choria_provisioner::sim::Phase::Provisioned)
        .map(|n| n.identity)
        .collect()
}

pub fn wait_provisioned(fleet: &Sim, nodes: u64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let provisioned = fleet.progress().provisioned;
        if provisioned == nodes {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after {within:?}: {provisioned} of {nodes} nodes provisioned"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `url` with the credentials of [`super::election_broker`]'s provisioner user.
pub fn as_provisioner(url: &str) -> String {
    url.replace("nats://", "nats://provisioner:s3cret@")
}

/// `url` with the credentials of [`super::election_broker`]'s node user.
pub fn as_node(url: &str) -> String {
    url.replace("nats://", "nats://node:n0de@")
}

/// [`fast`] for a provisioner in a leader election: candidates start within 200 ms.
pub fn electing() -> DaemonOptions {
    DaemonOptions {
        election: choria_provisioner::fleet::election::ElectionOptions {
            startup_spread: Duration::from_millis(200),
            ..Default::default()
        },
        ..fast()
    }
}

/// Where the provisioners and nodes of a test meet.
pub enum Meeting {
    /// A nats-server without accounts.
    Open(NatsServer),
    /// A nats-server laid out for elections; credentials in the URLs.
    Election(NatsServer),
    /// A Choria broker front end before the election layout: provisioners and nodes
    /// let in by their credentials, as on a real Choria network.
    Choria(ChoriaBroker),
}

impl Meeting {
    /// The nats-server that holds the election bucket.
    pub fn backend(&self) -> &NatsServer {
        match self {
            Meeting::Open(s) | Meeting::Election(s) => s,
            Meeting::Choria(b) => &b.backend,
        }
    }

    pub fn provisioner(&self, identity: &str, yaml: &str, options: DaemonOptions) -> Provisioner {
        match self {
            Meeting::Open(s) => Provisioner::start(&s.url(), identity, yaml, options),
            Meeting::Election(s) => {
                Provisioner::start(&as_provisioner(&s.url()), identity, yaml, options)
            }
            Meeting::Choria(b) => Provisioner::start_through(b, identity, yaml, options),
        }
    }

    pub fn fleet(&self, nodes: usize, f: impl FnOnce(&mut SimOptions)) -> Sim {
        match self {
            Meeting::Open(s) => sim(&s.url(), nodes, f),
            Meeting::Election(s) => sim(&as_node(&s.url()), nodes, f),
            Meeting::Choria(b) => sim(&b.url(), nodes, |o| {
                b.nodes(o);
                f(o)
            }),
        }
    }

    /// Every node and provisioner came in through the front end, if there is one.
    pub fn assert_let_in(&self, provisioners: usize) {
        if let Meeting::Choria(b) = self {
            let admitted = b.front.admitted();
            let by = |l| admitted.iter().filter(|a| a.landing == l).count();
            assert!(
                by(super::broker::Landing::Provisioner) >= provisioners,
                "{admitted:?}"
            );
            assert!(
                by(super::broker::Landing::ProvisioningServer) >= 1,
                "{admitted:?}"
            );
            assert!(b.front.refusals().is_empty(), "{:?}", b.front.refusals());
        }
    }
}

pub const SEQUENCE: [&str; 3] = [
    "rpcutil#inventory",
    "choria_provision#configure",
    "choria_provision#restart",
];

/// Every node provisioned; each restarted exactly `expected(node)` times.
pub fn assert_provisioned(summary: &Summary, expected: impl Fn(&str) -> u32) {
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

pub const ISSUER_SEED: [u8; 32] = [7; 32];

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The hex public key of [`ISSUER_SEED`], for `jwt_verify_cert`.
pub fn issuer_public_hex() -> String {
    hex(&public_of(&ISSUER_SEED))
}

/// The `jwt` feature's settings: the token `s3cret`, JWTs verified with
/// [`ISSUER_SEED`]'s key.
pub fn jwt_settings() -> String {
    format!(
        "token: s3cret\nfeatures: {{jwt: true}}\njwt_verify_cert: {}\n",
        issuer_public_hex()
    )
}

/// A simulated fleet for [`jwt_settings`]: each node holds a provisioning JWT that
/// [`ISSUER_SEED`] signed, with the token `s3cret`; then adjusted by `f`.
pub fn jwt_sim(url: &str, nodes: usize, f: impl FnOnce(&mut SimOptions)) -> Sim {
    sim(url, nodes, |o| {
        o.issuer_seed = Some(ISSUER_SEED);
        o.token = "s3cret".into();
        f(o);
    })
}

pub fn public_of(seed: &[u8; 32]) -> Vec<u8> {
    use ring::signature::KeyPair as _;
    ring::signature::Ed25519KeyPair::from_seed_unchecked(seed)
        .unwrap()
        .public_key()
        .as_ref()
        .to_vec()
}

/// A helper script answering `body` (JSON with `$id` for the node identity).
pub fn helper_answering(dir: &TempDir, name: &str, body: &str, delay: &str) -> PathBuf {
    dir.script(
        name,
        &format!(
            "#!/bin/sh\nid=$(sed -n 's/^{{\"identity\":\"\\([^\"]*\\)\".*/\\1/p')\nsleep {delay}\ncat <<JSON\n{body}\nJSON\n"
        ),
    )
}

/// Provisioner `p1.test` on `server` with [`fast`] timings, its helper `h.sh` in
/// `dir` answering `body` after `delay` seconds ([`helper_answering`]), and `extra`
/// YAML after the `helper:` line.
pub fn start_answering(
    server: &NatsServer,
    dir: &TempDir,
    body: &str,
    delay: &str,
    extra: &str,
) -> Provisioner {
    let h = helper_answering(dir, "h.sh", body, delay);
    let yaml = format!("helper: {}\n{extra}", h.display());
    Provisioner::start(&server.url(), "p1.test", &yaml, fast())
}

/// The settings of a provisioner whose helper asks every node to upgrade to 0.31.0
/// from `https://repo.example.net` (the `upgrades` feature).
pub fn upgrading_settings(dir: &TempDir) -> String {
    let helper = helper_answering(
        dir,
        "h.sh",
        &format!(r#"{{"upgrade": "0.31.0", {CONFIG}}}"#),
        "0",
    );
    format!(
        "helper: {}\nfeatures: {{upgrades: true}}\nupgrades_repository: https://repo.example.net\n",
        helper.display()
    )
}

pub const CONFIG: &str =
    r#""configuration": {"identity": "$id", "plugin.choria.server.provision": "false"}"#;
