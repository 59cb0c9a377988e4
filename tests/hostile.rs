//! Hostile nodes against the whole provisioner over a real nats-server: every named
//! input below is sent by a node with exactly the rights a Choria broker gives a
//! provisioning-mode server (`tests/support/hostile.rs`), while honest simulated nodes
//! boot in the same run. Each case asserts the specific outcome (the refusal and its
//! counter), that the provisioner's connection stayed up (no reconnect), and that the
//! honest nodes were provisioned exactly once.
#![cfg(feature = "sim")]
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

mod support;

#[path = "hostile/helper.rs"]
mod helper;

#[path = "hostile/waiting.rs"]
mod waiting;

#[path = "hostile/bytes.rs"]
mod bytes;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use choria_provisioner::choria::identity::Identity;
use choria_provisioner::choria::protocol::mcorpc::{RpcReply, StatusCode};
use choria_provisioner::sim::{Phase, Sim};
use support::hostile::{ok, Hostile, RawPublisher};
use support::rig::{
    all_late, fast, helper_answering, issuer_public_hex, jwt_settings, jwt_sim, sim,
    wait_provisioned, wait_until, Provisioner, ISSUER_SEED,
};
use support::{NatsServer, TempDir};

/// Every honest node is provisioned, each restarted exactly once.
fn assert_all_provisioned_once(fleet: &Sim) {
    for node in fleet.summary().nodes {
        assert_eq!(node.phase, Phase::Provisioned, "{}", node.identity);
        assert_eq!(
            node.restarts, 1,
            "{} restarted {} times: {:?}",
            node.identity, node.restarts, node.rpcs
        );
    }
}

/// The provisioner's connection never dropped.
fn assert_connection_held(prov: &Provisioner) {
    assert_eq!(prov.reconnections(), 0, "the broker connection was lost");
    assert!(prov.daemon().connection().is_connected());
}

/// Identity shapes a hostile node may claim, with the refusal reason each gets.
const BAD_IDENTITIES: [(&str, &str, &str); 13] = [
    (
        "NATS protocol injection",
        "evil 0\r\n\r\nPUB provisioning.injected 5\r\nhello\r\nPUB provisioning.node.z",
        "character",
    ),
    ("a space", "evil node.example.net", "character"),
    ("a * wildcard", "*.example.net", "character"),
    ("a > wildcard", "evil.>", "character"),
    ("a NUL byte", "evil\0.example.net", "character"),
    ("a tab", "evil\t.example.net", "character"),
    ("non-ASCII", "névil.example.net", "character"),
    ("a slash", "evil/../node.example.net", "character"),
    ("an empty label", "evil..example.net", "empty_label"),
    ("a leading dot", ".evil.example.net", "empty_label"),
    ("a trailing dot", "evil.example.net.", "empty_label"),
    ("a leading hyphen", "-evil.example.net", "hyphen"),
    ("a label ending in a hyphen", "evil-.example.net", "hyphen"),
];

/// Counts messages on `provisioning.>` subjects nobody should publish to.
fn spy(server: &NatsServer) -> (nats::Connection, crossbeam_channel::Receiver<String>) {
    let nc = nats::connect(server.url()).unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    for subject in ["provisioning.injected", "provisioning.node.z", "PUB"] {
        let tx = tx.clone();
        nc.subscribe(subject).unwrap().with_handler(move |m| {
            let _ = tx.send(m.subject);
            Ok(())
        });
    }
    nc.flush().unwrap();
    (nc, rx)
}

/// Waits until the 10 nodes of `fleet` are provisioned once each, and checks that
/// every one of [`BAD_IDENTITIES`], and one of 5,000 bytes, was refused from `source`
/// and counted with its reason.
fn provisioned_refusing_every_bad_identity(prov: &Provisioner, fleet: &Sim, source: &str) {
    wait_provisioned(fleet, 10, Duration::from_secs(60));
    assert_all_provisioned_once(fleet);
    for (name, _, reason) in BAD_IDENTITIES {
        assert!(
            prov.counter("refused_identities", &[source, reason]) >= 1,
            "{name}: not counted as {reason}"
        );
    }
    assert!(
        prov.counter("refused_identities", &[source, "too_long"]) >= 1,
        "5,000 bytes"
    );
}

#[test]
fn hostile_identities_in_discovery_replies_are_refused_counted_and_never_published_to() {
    let server = NatsServer::start();
    let (_spy, injected) = spy(&server);
    let attacker = Hostile::connect(&server.url(), None);
    let mut senders: Vec<String> = BAD_IDENTITIES.iter().map(|c| c.1.to_string()).collect();
    senders.push("e".repeat(5000));
    let _answers = attacker.answer_discovery(senders);
    attacker.flush();
    let fleet = sim(&server.url(), 10, |_| {});
    let prov = Provisioner::start(&server.url(), "p1.test", "", fast());
    provisioned_refusing_every_bad_identity(&prov, &fleet, "discovery");
    assert!(
        injected.try_recv().is_err(),
        "a message reached a subject the provisioner never chose"
    );
    assert_eq!(prov.metrics.provision_errors.get(), 0);
    assert_eq!(prov.daemon().fleet().known(), 10, "only honest nodes known");
    assert_connection_held(&prov);
}

#[test]
fn hostile_identities_in_startup_events_are_refused_counted_and_never_queued() {
    let server = NatsServer::start();
    let (_spy, injected) = spy(&server);
    let fleet = sim(&server.url(), 10, |o| o.boot_rate = 5.0);
    let prov = Provisioner::start(&server.url(), "p1.test", "", fast());
    let attacker = Hostile::connect(&server.url(), None);
    for (_, identity, _) in BAD_IDENTITIES {
        attacker.startup_event(identity, "provision_mode_server");
    }
    attacker.startup_event(&"e".repeat(5000), "provision_mode_server");
    attacker.flush();
    provisioned_refusing_every_bad_identity(&prov, &fleet, "event");
    assert_eq!(
        prov.counter("dropped_events", &["invalid_identity"]),
        BAD_IDENTITIES.len() as u64 + 1
    );
    assert!(injected.try_recv().is_err());
    assert_connection_held(&prov);
}

#[test]
fn oversized_undecodable_and_foreign_events_are_dropped_with_their_reason() {
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 5, |o| o.boot_rate = 5.0);
    let prov = Provisioner::start(&server.url(), "p1.test", "", fast());
    let attacker = Hostile::connect(&server.url(), None);
    let subject = "choria.lifecycle.event.startup.provision_mode_server";
    // 100 KiB of valid JSON: over the 64 KiB a startup event may have.
    let huge = serde_json::json!({"protocol": "io.choria.lifecycle.v1.startup", "identity": "n1", "pad": "x".repeat(100 * 1024)});
    attacker.publish(subject, &serde_json::to_vec(&huge).unwrap());
    attacker.publish(subject, b"\x00\xffnot json");
    attacker.publish(subject, br#"{"protocol":"io.choria.lifecycle.v1.startup"#);
    // 10,000 nested arrays: serde's recursion limit, not our stack.
    attacker.publish(subject, "[".repeat(10_000).as_bytes());
    attacker.flush();
    wait_provisioned(&fleet, 5, Duration::from_secs(60));
    assert_eq!(prov.counter("dropped_events", &["too_large"]), 1);
    assert_eq!(prov.counter("dropped_events", &["undecodable"]), 3);
    assert_all_provisioned_once(&fleet);
    assert_connection_held(&prov);
}

#[test]
fn thousands_of_ghosts_cost_a_round_trip_each_and_honest_nodes_keep_their_pace() {
    let server = NatsServer::start();
    let attacker = Hostile::connect(&server.url(), None);
    let ghosts: Vec<String> = (0..3000)
        .map(|n| format!("ghost-{n:05}.example.net"))
        .collect();
    let _answers = attacker.answer_discovery(ghosts);
    for n in 0..2000 {
        attacker.startup_event(
            &format!("event-ghost-{n:05}.example.net"),
            "provision_mode_server",
        );
    }
    attacker.flush();
    let prov = Provisioner::start(&server.url(), "p1.test", "", fast());
    // The honest nodes boot while the provisioner is busy with 5,000 ghosts.
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let fleet = sim(&server.url(), 20, |_| {});
    wait_provisioned(&fleet, 20, Duration::from_secs(30));
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "20 honest nodes took {took:?} behind the ghosts"
    );
    assert_all_provisioned_once(&fleet);
    // The ghosts are still being recognised behind the honest nodes on a busy machine.
    wait_until("3,000 ghosts recognised", Duration::from_secs(60), || {
        prov.metrics.unreachable_nodes.get() >= 3000
    });
    assert_eq!(
        prov.metrics.provision_errors.get(),
        0,
        "a ghost is no error"
    );
    assert_connection_held(&prov);
}

/// A helper that hands every node `key` with a certificate and its configuration (a
/// node writes the key only with a certificate, a CA and an SSL directory, as Go).
fn helper_with_key(dir: &TempDir, key_pem: &str) -> std::path::PathBuf {
    let key_json = serde_json::to_string(key_pem).unwrap();
    let cert_json = serde_json::to_string(&fixture("rsa2048-cert.pem")).unwrap();
    dir.script(
        "key-helper.sh",
        &format!(
            "#!/bin/sh\ninput=$(cat)\nid=$(printf '%s' \"$input\" | sed -n 's/^{{\"identity\":\"\\([^\"]*\\)\".*/\\1/p')\n\
             cat <<EOF\n{{\"configuration\": {{\"identity\": \"$id\", \"plugin.choria.server.provision\": \"false\"}}, \"key\": {key_json}, \"certificate\": {cert_json}, \"ca\": {cert_json}, \"ssldir\": \"/etc/choria/ssl\"}}\nEOF\n"
        ),
    )
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// Decrypts a `configure` key with the attacker's X25519 secret: the attack of
/// issue #11, which must never give back the helper's key.
fn attacker_decrypts(secret: &[u8; 32], data: &serde_json::Value, key_der: &[u8]) -> bool {
    let (Some(key), Some(public)) = (data["key"].as_str(), data["ecdh_public"].as_str()) else {
        return false;
    };
    let Some(theirs) = hex::decode(public)
        .ok()
        .and_then(|k| <[u8; 32]>::try_from(k).ok())
    else {
        return false;
    };
    let shared = x25519_dalek::StaticSecret::from(*secret)
        .diffie_hellman(&x25519_dalek::PublicKey::from(theirs));
    let Some(block) = choria_provisioner::crypto::pem::decode(key) else {
        return false;
    };
    choria_provisioner::crypto::key_transport::decrypt_pem_block(&block, shared.as_bytes())
        .is_ok_and(|der| der == key_der)
}

/// A race under way: the provisioner, its fleet of 10 nodes, the attacker with its
/// racing subscription, and hostile nodes that only read.
struct Race<'a> {
    prov: &'a Provisioner,
    fleet: &'a Sim,
    attacker: &'a Hostile,
    readers: &'a [&'a Hostile],
    race: nats::Handler,
}

/// The parts of a [`Race`], in its fields' order.
fn racing<'a>(
    prov: &'a Provisioner,
    fleet: &'a Sim,
    attacker: &'a Hostile,
    readers: &'a [&'a Hostile],
    race: nats::Handler,
) -> Race<'a> {
    Race {
        prov,
        fleet,
        attacker,
        readers,
        race,
    }
}

impl Race<'_> {
    /// Waits until `rpc` was contested for each node while the attacker forges valid
    /// replies (or anything else that must stop every attempt), checks that nothing
    /// was configured or sent (nor seen by the readers) and that `nothing_issued`
    /// holds, then stops the race and waits until every node is provisioned exactly
    /// once.
    fn contested_then_provisioned(self, rpc: &str, nothing_issued: impl FnOnce() -> bool) {
        self.wait_contested(rpc);
        assert_eq!(
            self.fleet.progress().configured,
            0,
            "nothing configured under attack"
        );
        for hostile in std::iter::once(self.attacker).chain(self.readers.iter().copied()) {
            assert!(
                hostile.loot.configures.lock().is_empty(),
                "no configure was sent while the {rpc} replies were contested"
            );
        }
        assert!(nothing_issued(), "nothing issued while contested");
        self.stop_and_provision();
    }

    /// As [`Race::contested_then_provisioned`] for an attacker sending undecodable
    /// replies only, where a node may be configured meanwhile: a flood that the
    /// workers happen to read as fast as it comes (a loaded machine delivers it in
    /// trickles) overflows no inbox, every forgery is read and refused, and the node's
    /// own reply is rightly accepted; only a flood that overflowed stops an attempt.
    fn flooded_then_provisioned(self, rpc: &str) {
        self.wait_contested(rpc);
        self.stop_and_provision();
    }

    fn wait_contested(&self, rpc: &str) {
        wait_until("every node contested", Duration::from_secs(30), || {
            self.prov.counter("contested_replies", &[rpc]) >= 10
        });
    }

    fn stop_and_provision(self) {
        assert!(self.attacker.loot.forged.load(Ordering::Relaxed) >= 10);
        self.race.unsubscribe().unwrap();
        self.attacker.flush();
        wait_provisioned(self.fleet, 10, Duration::from_secs(60));
        assert_all_provisioned_once(self.fleet);
    }
}

/// Every `configure` `reader` saw (at least one per node of 10) carries a non-empty
/// `field`, which `check` is given with the node's name.
fn each_configure_read(reader: &Hostile, field: &str, check: impl Fn(&str, &str)) {
    let configures = reader.loot.configures.lock();
    assert!(configures.len() >= 10, "every configure was readable");
    for (node, data) in configures.iter() {
        let value = data[field].as_str().unwrap_or_default();
        assert!(!value.is_empty(), "{node}: a configure without {field}");
        check(node, value);
    }
}

/// A node after other nodes' private keys: it holds its own X25519 secret and a valid
/// provisioning JWT (every provisioning-mode node has one), and answers their `jwt`
/// requests with its own ECDH key, so that `configure` would carry their key
/// encrypted for it.
struct KeyThief {
    /// The key the helper hands every node, to recognise it.
    key_pem: String,
    key_der: Vec<u8>,
    /// The thief's X25519 secret.
    secret: [u8; 32],
    /// The `jwt` reply it forges.
    forged: RpcReply,
}

impl KeyThief {
    fn new(server: &NatsServer, secret: [u8; 32]) -> KeyThief {
        let key_pem = fixture("rsa2048-pkcs1.pem");
        let key_der = choria_provisioner::crypto::pem::decode(&key_pem)
            .unwrap()
            .der;
        let public = x25519_dalek::PublicKey::from(&x25519_dalek::StaticSecret::from(secret));
        let jwt = choria_provisioner::sim::keygen::provisioning_jwt(
            &ISSUER_SEED,
            "s3cret",
            &server.url(),
            false,
            false,
            Duration::from_secs(3600),
        )
        .unwrap();
        let forged = ok(
            "jwt",
            serde_json::json!({
                "jwt": jwt,
                "ecdh_public": hex::encode(public.as_bytes()),
            }),
        );
        KeyThief {
            key_pem,
            key_der,
            secret,
            forged,
        }
    }

    /// The provisioner's configuration: the `jwt` feature and a helper handing out
    /// the key.
    fn config(&self, dir: &TempDir) -> String {
        format!(
            "helper: {}\n{}",
            helper_with_key(dir, &self.key_pem).display(),
            jwt_settings()
        )
    }

    /// Asserts that no `configure` the `reader` saw (at least 10) carried the key
    /// encrypted for the thief.
    fn assert_nothing_stolen(&self, reader: &Hostile) {
        let configures = reader.loot.configures.lock();
        assert!(configures.len() >= 10, "every configure was readable");
        for (node, data) in configures.iter() {
            assert!(
                !attacker_decrypts(&self.secret, data, &self.key_der),
                "the key for {node} was encrypted for the attacker"
            );
        }
    }
}

#[test]
fn a_node_racing_other_nodes_jwt_replies_gets_no_key_and_they_are_provisioned_once_it_stops() {
    let server = NatsServer::start();
    let dir = TempDir::new("race-jwt");
    let thief = KeyThief::new(&server, [42u8; 32]);
    // A second hostile node only reads, for the whole run, what every node may read.
    let (reader, _read) = reader(&server);
    let attacker = Hostile::connect(&server.url(), None);
    let forged = thief.forged.clone();
    let race = attacker.answer("jwt", move |_| forged.clone());
    let fleet = jwt_sim(&server.url(), 10, |_| {});
    let prov = Provisioner::start(&server.url(), "p1.test", &thief.config(&dir), fast());
    racing(&prov, &fleet, &attacker, &[&reader], race)
        .contested_then_provisioned("choria_provision#jwt", || true);
    for node in fleet.summary().nodes {
        let got = node.private_key.expect("the node got its key");
        let got = choria_provisioner::crypto::pem::decode(&got).unwrap().der;
        assert_eq!(
            got, thief.key_der,
            "{} holds the helper's key",
            node.identity
        );
    }
    thief.assert_nothing_stolen(&reader);
    assert_connection_held(&prov);
}

#[test]
fn forged_inventory_replies_before_or_after_the_real_one_stop_the_attempt() {
    let server = NatsServer::start();
    let attacker = Hostile::connect(&server.url(), None);
    let race = attacker.answer("inventory", |_| {
        ok(
            "inventory",
            serde_json::json!({"version": "6.6.6", "facts": {"role": "db"}}),
        )
    });
    let fleet = sim(&server.url(), 10, |_| {});
    // A grace ten times the production one: the attacker and the nodes answer at
    // once, but on a loaded machine either thread can be late by more than 50 ms.
    let prov = Provisioner::start(&server.url(), "p1.test", "reply_grace: 500ms\n", fast());
    racing(&prov, &fleet, &attacker, &[], race)
        .contested_then_provisioned("rpcutil#inventory", || true);
    assert_connection_held(&prov);
}

/// Copies of its forgery a flooding attacker sends after the first: more than a
/// request's inbox keeps, so the node's own reply, which comes later, finds it full.
const FLOOD_COPIES: usize = 20;

#[test]
fn a_forgery_followed_by_a_flood_cannot_push_the_real_reply_out_and_go_unnoticed() {
    // The attack: answer a node's `jwt` first with the attacker's ECDH key, then fill
    // the request's bounded inbox with identical copies (which alone are no
    // contest), so that the node's real, different reply is dropped when it comes and
    // the key is sent encrypted for the attacker. Any reply dropped from a request's
    // inbox must count as a contest: it may have been the real one.
    let server = NatsServer::start();
    let dir = TempDir::new("flood-jwt");
    let thief = KeyThief::new(&server, [43u8; 32]);
    let (reader, _read) = reader(&server);
    let attacker = Hostile::connect(&server.url(), None);
    let publisher = attacker.nc().clone();
    let loot = std::sync::Arc::clone(&attacker.loot);
    let forged = thief.forged.encode();
    let race = attacker.race(Box::new(move |target, request, body| {
        if body.action != "jwt" {
            return None;
        }
        let payload = choria_provisioner::choria::protocol::encode_reply(
            request,
            target,
            &forged,
            choria_provisioner::clock::unix_nanos(),
            None,
        );
        for _ in 0..=FLOOD_COPIES {
            let _ = publisher.publish(&request.reply_to, &payload);
        }
        loot.forged.fetch_add(1, Ordering::Relaxed);
        None
    }));
    attacker.flush();
    // The nodes answer 300 ms late: the flood has always filled the inbox by then.
    let fleet = jwt_sim(&server.url(), 10, all_late(Duration::from_millis(300)));
    let prov = Provisioner::start(&server.url(), "p1.test", &thief.config(&dir), fast());
    racing(&prov, &fleet, &attacker, &[&reader], race)
        .contested_then_provisioned("choria_provision#jwt", || true);
    assert!(
        prov.counter("rejected_replies", &["overflow"]) >= 10,
        "every reply dropped from a full inbox is counted"
    );
    thief.assert_nothing_stolen(&reader);
    assert_connection_held(&prov);
}

/// A reader for the whole run: a second hostile node that only records what every
/// node may read (each `configure` request among them).
fn reader(server: &NatsServer) -> (Hostile, nats::Handler) {
    let reader = Hostile::connect(&server.url(), None);
    let read = reader.race(Box::new(|_, _, _| None));
    reader.flush();
    (reader, read)
}

/// The `public_key` claim of a server JWT (read, not verified).
fn server_jwt_key(token: &str) -> String {
    let claims: serde_json::Value =
        choria_provisioner::crypto::jwt::unverified_claims(token).expect("a server JWT");
    claims["public_key"]
        .as_str()
        .unwrap_or_default()
        .to_ascii_lowercase()
}

#[test]
fn a_node_racing_other_nodes_gen25519_replies_gets_no_server_jwt_and_they_are_provisioned_once_it_stops(
) {
    use ring::signature::KeyPair as _;
    let server = NatsServer::start();
    let dir = TempDir::new("race-gen25519");
    let (reader, _read) = reader(&server);
    // The attacker's own ed25519 key: its reply signs each request's nonce, so it
    // would pass every check if it were the only one.
    let attacker_key = ring::signature::Ed25519KeyPair::from_seed_unchecked(&[66; 32]).unwrap();
    let attacker_public = hex::encode(attacker_key.public_key().as_ref());
    let public = attacker_public.clone();
    let attacker = Hostile::connect(&server.url(), None);
    let race = attacker.race(Box::new(move |_, _, body| {
        if body.action != "gen25519" {
            return None;
        }
        let nonce = body.data["nonce"].as_str()?;
        let signature = attacker_key.sign(nonce.as_bytes());
        Some(ok(
            "gen25519",
            serde_json::json!({
                "public_key": public,
                "directory": "/etc/choria",
                "signature": hex::encode(signature.as_ref()),
            }),
        ))
    }));
    attacker.flush();
    let fleet = sim(&server.url(), 10, |o| o.issuer_seed = Some(ISSUER_SEED));
    // What `packaging/examples/ed25519-helper.py` answers: the choria security
    // provider, whose node boots only with a server JWT for its own seed.
    let helper = helper_answering(
        &dir,
        "ed25519-helper.sh",
        r#"{"configuration": {"identity": "$id", "plugin.choria.server.provision": "false",
            "plugin.security.provider": "choria",
            "plugin.security.choria.token_file": "/etc/choria/server.jwt",
            "plugin.security.choria.seed_file": "/etc/choria/server.seed"},
          "server_claims": {"exp": 3600, "permissions": {"streams": true, "submission": true}}}"#,
        "0",
    );
    let seed_file = dir.write("signer.seed", &hex::encode(ISSUER_SEED));
    // As for inventory: the attacker and the nodes answer at once, but on a loaded
    // machine either can be late by more than the production 50 ms.
    let options = fast();
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        &format!(
            "reply_grace: 500ms\nhelper: {}\nfeatures: {{ed25519: true}}\njwt_verify_cert: {}\njwt_signing_key: {}\n",
            helper.display(),
            issuer_public_hex(),
            seed_file.display()
        ),
        options,
    );
    // Provisioned under the choria security provider: each node booted with a server
    // JWT for its own seed, signed by the issuer.
    racing(&prov, &fleet, &attacker, &[&reader], race)
        .contested_then_provisioned("choria_provision#gen25519", || {
            fleet.summary().nodes.iter().all(|n| n.server_jwt.is_none())
        });
    for node in fleet.summary().nodes {
        let jwt = node.server_jwt.expect("the node got a server JWT");
        assert_ne!(
            server_jwt_key(&jwt),
            attacker_public,
            "{}: a server JWT for the attacker's key",
            node.identity
        );
    }
    each_configure_read(&reader, "server_jwt", |node, jwt| {
        assert_ne!(
            server_jwt_key(jwt),
            attacker_public,
            "the server JWT for {node} was issued for the attacker's key"
        );
    });
    assert_connection_held(&prov);
}

/// A PKCS#10 request for `cn` signed with `key`, as a node's `gencsr` makes it.
fn csr_for(cn: &str, key: &p256::ecdsa::SigningKey) -> String {
    use std::str::FromStr;
    use x509_cert::builder::{Builder, RequestBuilder};
    use x509_cert::der::EncodePem;
    let subject = x509_cert::name::Name::from_str(&format!("CN={cn}")).unwrap();
    RequestBuilder::new(subject, key)
        .and_then(|b| b.build::<p256::ecdsa::DerSignature>())
        .unwrap()
        .to_pem(x509_cert::der::pem::LineEnding::LF)
        .unwrap()
}

/// A certificate's subject and its public key (SubjectPublicKeyInfo, DER in hex).
fn certificate_key(pem: &str) -> (String, String) {
    use x509_cert::der::{DecodePem, Encode};
    let cert = x509_cert::Certificate::from_pem(pem).expect("a PEM certificate");
    let tbs = cert.tbs_certificate;
    (
        tbs.subject.to_string(),
        hex::encode(tbs.subject_public_key_info.to_der().unwrap()),
    )
}

#[test]
fn a_node_racing_other_nodes_gencsr_replies_gets_no_certificate_and_they_are_provisioned_once_it_stops(
) {
    use p256::pkcs8::EncodePublicKey as _;
    if !support::on_path("python3") || !support::on_path("openssl") {
        eprintln!("SKIP: the CA-signing helper needs python3 and openssl");
        return;
    }
    let server = NatsServer::start();
    let dir = TempDir::new("race-gencsr");
    let Some(tls) = support::make_tls(&dir) else {
        return;
    };
    let (reader, _read) = reader(&server);
    // The attacker's own key: its CSR names the asked node, so it would pass every
    // check if it were the only reply.
    let attacker_key = p256::ecdsa::SigningKey::from_slice(&[66; 32]).unwrap();
    let attacker_spki = hex::encode(
        attacker_key
            .verifying_key()
            .to_public_key_der()
            .unwrap()
            .as_bytes(),
    );
    let public_pem = attacker_key
        .verifying_key()
        .to_public_key_pem(p256::pkcs8::LineEnding::LF)
        .unwrap();
    let attacker = Hostile::connect(&server.url(), None);
    let race = attacker.answer("gencsr", move |target| {
        ok(
            "gencsr",
            serde_json::json!({
                "csr": csr_for(target, &attacker_key),
                "public_key": public_pem,
                "ssldir": "/etc/choria/ssl",
            }),
        )
    });
    // The simulator's default RSA 2048 keys, as real nodes make: each real reply
    // comes only once its key is made, 0.2-3.7 s after the attacker's here, far past
    // the tests' 300 ms `reply_grace`, so only `csr_reply_grace` catches it; with
    // `csr_reply_grace: 0s` the helper signs the attacker's CSR for most nodes.
    // Simulated nodes share the test machine's CPUs, the slow hardware of
    // `docs/security.md`: on two loaded cores their keys took up to 3.7 s with the default 8
    // workers and 2.8 s with 2, past the production 2 s, so `csr_reply_grace` is
    // raised as `docs/security.md` advises, and 2 workers keep at most two keys in the making
    // at once (4 in the simulator, whose discovery waits for a node making its key:
    // the other key must not wait behind it).
    let fleet = sim(&server.url(), 10, |o| o.workers = 4);
    // The shipped example helper, signing every CSR it is given with a test CA.
    let helper = format!(
        "env PROVISION_CA_CERT={} PROVISION_CA_KEY={} {}/packaging/examples/provision-helper.py",
        tls.ca.display(),
        dir.path().join("ca.key").display(),
        env!("CARGO_MANIFEST_DIR")
    );
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        &format!("helper: {helper}\nfeatures: {{pki: true}}\nworkers: 2\ncsr_reply_grace: 5s\n"),
        fast(),
    );
    racing(&prov, &fleet, &attacker, &[&reader], race).contested_then_provisioned(
        "choria_provision#gencsr",
        || {
            fleet
                .summary()
                .nodes
                .iter()
                .all(|n| n.certificate.is_none())
        },
    );
    for node in fleet.summary().nodes {
        let cert = node.certificate.expect("the node got a certificate");
        let (subject, spki) = certificate_key(&cert);
        assert_eq!(subject, format!("CN={}", node.identity));
        assert_ne!(
            spki, attacker_spki,
            "{}: a certificate for the attacker's key",
            node.identity
        );
    }
    each_configure_read(&reader, "certificate", |node, cert| {
        assert_ne!(
            certificate_key(cert).1,
            attacker_spki,
            "the certificate for {node} was issued for the attacker's key"
        );
    });
    assert_connection_held(&prov);
}

#[test]
fn replies_in_the_attacker_s_own_name_and_garbage_are_rejected_and_counted() {
    let server = NatsServer::with_config("max_payload: 8388608");
    let attacker = Hostile::connect(&server.url(), None);
    let publisher = attacker.nc().clone();
    // To every inventory request: a reply in the attacker's name, undecodable bytes, a
    // 10,000-deep JSON, bad base64 and an 8 MiB field: five, fewer than a request's
    // inbox keeps, so each is refused and counted (the 8 MiB one unread: it is over
    // max_reply_bytes), and the node's own reply is still accepted.
    let _race = attacker.race(Box::new(move |_, request, body| {
        if body.action != "inventory" {
            return None;
        }
        let reply = RpcReply::new("inventory", StatusCode::Ok, "OK", serde_json::json!({}));
        let mine = choria_provisioner::choria::protocol::encode_reply(
            request,
            "attacker.example.net",
            &reply.encode(),
            choria_provisioner::clock::unix_nanos(),
            None,
        );
        let to = &request.reply_to;
        let _ = publisher.publish(to, mine);
        let _ = publisher.publish(to, b"\xff\xfe garbage");
        let _ = publisher.publish(to, "[".repeat(10_000));
        let _ = publisher.publish(
            to,
            br#"{"protocol":"choria:transport:1","data":"!!!not base64!!!","headers":{}}"#,
        );
        let big = format!(
            r#"{{"protocol":"choria:transport:1","data":"{}","headers":{{}}}}"#,
            "A".repeat(8 * 1024 * 1024 - 100)
        );
        let _ = publisher.publish(to, big);
        None
    }));
    attacker.flush();
    // The real nodes answer 400 ms late, so the junk always meets a route that is
    // still open (on a loaded machine the attacker could otherwise come after the
    // attempt had moved on).
    let fleet = sim(&server.url(), 10, all_late(Duration::from_millis(400)));
    let prov = Provisioner::start(&server.url(), "p1.test", "", fast());
    wait_provisioned(&fleet, 10, Duration::from_secs(60));
    assert_all_provisioned_once(&fleet);
    assert!(prov.counter("rejected_replies", &["wrong_sender"]) >= 10);
    assert!(prov.counter("rejected_replies", &["undecodable"]) >= 30);
    assert!(prov.counter("rejected_replies", &["too_large"]) >= 10);
    assert_eq!(prov.counter("rejected_replies", &["overflow"]), 0);
    assert_eq!(prov.counter("contested_replies", &["rpcutil#inventory"]), 0);
    assert_eq!(prov.metrics.provision_errors.get(), 0);
    assert_connection_held(&prov);
}

#[test]
fn a_flood_of_replies_in_a_node_s_name_stops_its_attempts_until_the_flood_ends() {
    flood_inventory_replies(false);
}

#[test]
fn a_flood_of_replies_to_a_request_sent_ahead_stops_the_attempt_too() {
    // With `jwt`, inventory goes out with jwt and waits in its inbox while jwt's
    // reply (300 ms late) is awaited: the flood fills it unread.
    flood_inventory_replies(true);
}

/// 500 garbage replies to every inventory request: more than its inbox keeps, so
/// some are dropped unread, and the node's own reply could be among them while a
/// forgery is accepted. The attempt stops (nothing is configured) and the node is
/// tried again after the cool-down.
fn flood_inventory_replies(jwt: bool) {
    let server = NatsServer::start();
    let attacker = Hostile::connect(&server.url(), None);
    let publisher = attacker.nc().clone();
    let loot = std::sync::Arc::clone(&attacker.loot);
    let race = attacker.race(Box::new(move |_, request, body| {
        if body.action != "inventory" {
            return None;
        }
        for _ in 0..500 {
            let _ = publisher.publish(&request.reply_to, b"{}");
        }
        loot.forged.fetch_add(1, Ordering::Relaxed);
        None
    }));
    attacker.flush();
    let fleet = jwt_sim(
        &server.url(),
        10,
        all_late(Duration::from_millis(if jwt { 300 } else { 400 })),
    );
    let config = if jwt {
        jwt_settings()
    } else {
        "token: s3cret\n".to_string()
    };
    let prov = Provisioner::start(&server.url(), "p1.test", &config, fast());
    racing(&prov, &fleet, &attacker, &[], race).flooded_then_provisioned("rpcutil#inventory");
    let overflow = prov
        .daemon()
        .rpc()
        .router()
        .stats()
        .overflow
        .load(Ordering::Relaxed);
    assert!(overflow > 0, "the flood overflowed its bounded route");
    let counted = prov.counter("rejected_replies", &["overflow"]);
    assert!(
        (10..=overflow).contains(&counted),
        "replies dropped from inboxes are counted: {counted} of {overflow}"
    );
    assert_connection_held(&prov);
}

/// The longest `PUB` line nats-server takes by default (`max_control_line`, with its
/// CRLF): the `MSG` line it makes of it for the subscriber is longer by the `sid`.
const MAX_CONTROL_LINE: usize = 4096;

/// The subject of the startup events the provisioner listens to in these tests.
const STARTUPS: &[u8] = b"choria.lifecycle.event.startup.provision_mode_server";

#[test]
fn protocol_lines_as_long_as_the_broker_allows_never_drop_the_connection() {
    // A node can make the broker send the provisioner a MSG line longer than 4 KiB:
    // a reply or a lifecycle event with a NATS reply-to as long as the broker's
    // max_control_line allows. The client once read protocol lines into a fixed 4 KiB
    // buffer and dropped the connection on a longer one (a node could disconnect the
    // provisioner with one reply, again on every reconnect).
    fn long_reply_to(to: &[u8], payload: &[u8]) -> Vec<u8> {
        let line = format!("PUB  {}\r\n", payload.len()).len() + to.len();
        let mut reply_to = b"_INBOX.".to_vec();
        reply_to.resize(MAX_CONTROL_LINE - line - 1, b'r');
        reply_to
    }
    raw_forgeries_to_every_inventory(
        |raw, to| {
            let payload = b"not a reply";
            raw.publish(
                to.as_bytes(),
                &long_reply_to(to.as_bytes(), payload),
                payload,
            );
        },
        |raw| {
            let event = b"not an event";
            raw.publish(STARTUPS, &long_reply_to(STARTUPS, event), event);
            raw.flush();
        },
        1,
    );
}

#[test]
fn replies_to_ids_that_are_not_a_pending_request_route_nowhere_whatever_their_length() {
    // The router keys its routes by request ids held inline (at most 32 bytes, the
    // longest this crate makes). A node that reads a request can answer on its reply
    // prefix with any last token: the real id cut short or lengthened, one longer
    // than any key, one as long as the broker allows, one that splits a UTF-8
    // character at the limit. Each is counted as unexpected and changes nothing.
    fn tokens(id: &str) -> Vec<String> {
        vec![
            format!("{id}x"),
            id[..id.len() - 1].to_string(),
            "y".repeat(33),
            "z".repeat(3000),
            format!("{}é", "w".repeat(31)),
        ]
    }
    let server = NatsServer::start();
    let attacker = Hostile::connect(&server.url(), None);
    let race = RawRace::start(
        &server,
        &attacker,
        |action| action == "inventory",
        |raw, to| {
            let (prefix, id) = to.rsplit_once('.').expect("a reply subject has tokens");
            for token in tokens(id) {
                let subject = format!("{prefix}.{token}");
                raw.publish(subject.as_bytes(), b"_INBOX.x", b"not a reply");
            }
        },
    );
    let fleet = sim(&server.url(), 5, |_| {});
    let prov = Provisioner::start(&server.url(), "p1.test", "", fast());
    wait_provisioned(&fleet, 5, Duration::from_secs(60));
    assert_all_provisioned_once(&fleet);
    let forged = race.sent() * tokens("0123456789abcdef").len() as u64;
    assert!(forged >= 5, "no inventory was forged");
    let unexpected = || {
        prov.daemon()
            .rpc()
            .router()
            .stats()
            .unexpected
            .load(Ordering::Relaxed)
    };
    wait_until(
        "every forged reply counted as unexpected",
        Duration::from_secs(10),
        || unexpected() >= forged,
    );
    assert_eq!(prov.metrics.provision_errors.get(), 0);
    assert_connection_held(&prov);
}

/// A raw NATS client (`RawPublisher`) that sends `forge(raw, reply subject)`, and
/// flushes, for every request `attacker` reads whose action `wanted` accepts.
struct RawRace {
    raw: std::sync::Arc<parking_lot::Mutex<RawPublisher>>,
    sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
    _race: nats::Handler,
}

impl RawRace {
    fn start(
        server: &NatsServer,
        attacker: &Hostile,
        wanted: fn(&str) -> bool,
        forge: impl Fn(&mut RawPublisher, &str) + Send + Sync + 'static,
    ) -> RawRace {
        let raw = std::sync::Arc::new(parking_lot::Mutex::new(RawPublisher::connect(
            &server.url(),
        )));
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (raw_race, sent_race) = (raw.clone(), sent.clone());
        let race = attacker.race(Box::new(move |_, request, body| {
            if wanted(&body.action) {
                let mut raw = raw_race.lock();
                forge(&mut raw, &request.reply_to);
                raw.flush();
                sent_race.fetch_add(1, Ordering::Relaxed);
            }
            None
        }));
        attacker.flush();
        RawRace {
            raw,
            sent,
            _race: race,
        }
    }

    /// Requests forged for so far.
    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

/// A run in which a raw NATS client (`RawPublisher`) sends `forge(raw, reply
/// subject)` for every inventory request while 5 honest nodes boot; once they are
/// provisioned, `then(raw)` sends what else the test sends, of which `dropped_events`
/// must be dropped as undecodable startup events. Checks that the forgeries were sent,
/// every node was provisioned once, the forgeries were counted as undecodable replies
/// and the provisioner's connection held throughout.
fn raw_forgeries_to_every_inventory(
    forge: impl Fn(&mut RawPublisher, &str) + Send + Sync + 'static,
    then: impl FnOnce(&mut RawPublisher),
    dropped_events: u64,
) {
    let server = NatsServer::start();
    let attacker = Hostile::connect(&server.url(), None);
    let race = RawRace::start(&server, &attacker, |action| action == "inventory", forge);
    let fleet = sim(&server.url(), 5, |_| {});
    let prov = Provisioner::start(&server.url(), "p1.test", "", fast());
    wait_provisioned(&fleet, 5, Duration::from_secs(60));
    assert!(race.sent() >= 1, "no inventory was forged");
    assert_all_provisioned_once(&fleet);
    assert!(prov.counter("rejected_replies", &["undecodable"]) >= 1);
    then(&mut race.raw.lock());
    wait_until(
        "the startup events sent dropped as undecodable",
        Duration::from_secs(10),
        || prov.counter("dropped_events", &["undecodable"]) >= dropped_events,
    );
    assert_connection_held(&prov);
}

#[test]
fn header_blocks_that_do_not_parse_never_drop_the_connection() {
    // nats-server passes an HPUB's header bytes through unread: a node can send the
    // provisioner's reply subject a message whose header block is not NATS/1.0. The
    // client once failed its read loop on it and reconnected, once per message. Now
    // they are delivered without headers, and refused for what they hold.
    raw_forgeries_to_every_inventory(
        |raw, to| {
            for headers in [
                &b"garbage\r\n\r\n"[..],
                b"NATS/1.0\r\nno colon\r\n\r\n",
                b"\xff\xfe\r\n\r\n",
                b"x",
            ] {
                raw.hpub(to, headers, b"not a reply");
            }
        },
        |_| {},
        0,
    );
}

#[test]
fn forged_no_responders_statuses_never_make_a_live_node_unreachable() {
    // nats-server says "no responders" with an empty message whose header block is
    // `NATS/1.0 503`, and passes a node's HPUB header bytes on unread: a node that
    // reads the requests of others could send that status to every reply subject,
    // and each honest node would have been given up as gone. A status is believed
    // only when the broker says the same of a probe, so the nodes are provisioned,
    // and the forgeries are counted.
    let server = NatsServer::start();
    let attacker = Hostile::connect(&server.url(), None);
    // Twice before each real reply; the second comes after a probe found the node.
    let race = RawRace::start(
        &server,
        &attacker,
        |_| true,
        |raw, to| {
            raw.hpub(to, b"NATS/1.0 503\r\n\r\n", b"");
            raw.hpub(to, b"NATS/1.0 503\r\n\r\n", b"");
        },
    );
    // The nodes answer 100 ms late, so every forgery comes before the real reply.
    let fleet = sim(&server.url(), 5, |o| {
        o.faults.slow = 1.0;
        o.faults.slow_by = Duration::from_millis(100);
    });
    let prov = Provisioner::start(&server.url(), "p1.test", "", fast());
    wait_provisioned(&fleet, 5, Duration::from_secs(60));
    assert_all_provisioned_once(&fleet);
    assert!(race.sent() >= 15, "the statuses were forged");
    // Both statuses of each of the 15 requests (inventory, configure, restart).
    assert!(
        prov.counter("rejected_replies", &["forged_no_responders"]) >= 30,
        "forged statuses counted: {}",
        prov.counter("rejected_replies", &["forged_no_responders"])
    );
    assert_eq!(prov.metrics.unreachable_nodes.get(), 0, "no node given up");
    assert_eq!(prov.metrics.provision_errors.get(), 0);
    assert_connection_held(&prov);
}

#[test]
fn subjects_and_reply_tos_that_are_not_utf8_or_hold_unicode_spaces_never_drop_the_connection() {
    // nats-server passes a PUB's subject and reply-to on byte for byte. The client once
    // read the MSG line as UTF-8 and split it on Unicode whitespace: invalid UTF-8, or
    // U+00A0 in a reply-to (one argument too many), failed the read loop and the
    // client reconnected, once per message. The router's subscription is
    // `<prefix>.*`, so a node can also choose the last token of the subject.
    raw_forgeries_to_every_inventory(
        |raw, to| {
            let to = to.as_bytes();
            for reply_to in [
                &b"\xff\xfe"[..],
                "r\u{a0}x".as_bytes(),
                "r\u{2028}x".as_bytes(),
            ] {
                raw.publish(to, reply_to, b"not a reply");
            }
            let mut subject = to[..to.iter().rposition(|&b| b == b'.').unwrap()].to_vec();
            subject.extend_from_slice(b".\xc3\x28");
            raw.publish(&subject, b"r", b"not a reply");
        },
        |raw| {
            raw.publish(STARTUPS, b"\xff", b"not an event");
            raw.publish(STARTUPS, "e\u{a0}v".as_bytes(), b"not an event");
            raw.flush();
        },
        2,
    );
}

#[test]
fn the_broker_password_never_reaches_a_node_in_seen_by() {
    let server = NatsServer::with_config(
        "authorization { users = [ {user: provisioner, password: s3cret}, {user: node, password: n0de} ] }",
    );
    let url = format!("nats://provisioner:s3cret@127.0.0.1:{}", server.port);
    let node_url = format!("nats://node:n0de@127.0.0.1:{}", server.port);
    let attacker = Hostile::connect(&node_url, None);
    let raw = std::sync::Arc::new(parking_lot::Mutex::new(Vec::<Vec<u8>>::new()));
    let seen = std::sync::Arc::clone(&raw);
    let _sub = attacker
        .nc()
        .subscribe("provisioning.node.>")
        .unwrap()
        .with_handler(move |m| {
            seen.lock().push(m.data);
            Ok(())
        });
    attacker.flush();
    let fleet = sim(&node_url, 3, |_| {});
    let prov = Provisioner::start(&url, "p1.test", "", fast());
    wait_provisioned(&fleet, 3, Duration::from_secs(60));
    let raw = raw.lock();
    assert!(raw.len() >= 9, "the attacker read the requests");
    for request in raw.iter() {
        let text = String::from_utf8_lossy(request);
        assert!(!text.contains("s3cret"), "password in a request: {text}");
        assert!(
            text.contains("seen-by"),
            "v1 requests carry seen-by: {text}"
        );
    }
    assert_connection_held(&prov);
}

#[test]
fn a_valid_identity_parses_and_a_hostile_one_never_becomes_a_subject() {
    // The choke point alone: no Identity, hence no Subject, from a hostile string.
    for (name, bad, _) in BAD_IDENTITIES {
        assert!(Identity::parse(bad).is_err(), "{name}");
        assert!(
            choria_provisioner::choria::subject::Subject::new(format!("provisioning.node.{bad}"))
                .is_err()
                || !bad.contains([' ', '\r', '\n', '\t', '\0', '*', '>']),
            "{name}"
        );
    }
    assert!(Identity::parse("node-1.example.net").is_ok());
}

#[test]
fn forged_resignations_during_ha_never_make_a_second_leader() {
    use choria_provisioner::fleet::election::ElectionState;
    let server = support::election_broker();
    support::create_election_bucket(&server, Duration::from_secs(30));
    let url = support::rig::as_provisioner(&server.url());
    let node_url = support::rig::as_node(&server.url());
    let election = support::rig::electing;
    let a = Provisioner::start(&url, "a.test", "leader_election: true\n", election());
    let b = Provisioner::start(&url, "b.test", "leader_election: true\n", election());
    let leads = |p: &Provisioner| {
        p.daemon()
            .election()
            .is_some_and(|s| *s.lock() == ElectionState::Leader)
    };
    wait_until("a leader", Duration::from_secs(15), || {
        leads(&a) || leads(&b)
    });
    let (leader, standby) = if leads(&a) { (&a, &b) } else { (&b, &a) };
    let attacker = Hostile::connect(&node_url, None);
    // What Go's standby obeyed: a shutdown event of component provisioner naming the
    // leader, which any provisioning-mode node may publish.
    let event = serde_json::json!({
        "protocol": "io.choria.lifecycle.v1.shutdown",
        "id": "forged",
        "identity": leader.identity,
        "component": "provisioner",
        "timestamp": choria_provisioner::clock::unix_now(),
    });
    // And resignations with every revision the key can have had: the broker refuses
    // them, a node may not publish on provisioning.provisioner.>.
    for _ in 0..5 {
        attacker.publish(
            "choria.lifecycle.event.shutdown.provisioner",
            &serde_json::to_vec(&event).unwrap(),
        );
        for revision in 1..=300u64 {
            attacker.publish(
                "provisioning.provisioner.election.provisioner.resigned",
                format!(
                    r#"{{"identity":"{}","revision":{revision}}}"#,
                    leader.identity
                )
                .as_bytes(),
            );
        }
        attacker.flush();
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !leads(standby),
            "the standby took the key from a live leader"
        );
    }
    let fleet = sim(&node_url, 20, |_| {});
    wait_provisioned(&fleet, 20, Duration::from_secs(60));
    assert_all_provisioned_once(&fleet);
    assert!(leads(leader) && !leads(standby), "one leader throughout");
    assert_eq!(
        standby.metrics.provisioned.get(),
        0,
        "the standby sent no RPC"
    );
    assert_connection_held(leader);
    assert_connection_held(standby);
}

/// A JWT with `header` and `claims`, signed by `seed` (ed25519) when given, or with
/// `signature` as its third part.
fn jwt_with(
    header: &serde_json::Value,
    claims: &serde_json::Value,
    seed: Option<[u8; 32]>,
) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let signed = format!(
        "{}.{}",
        b64.encode(header.to_string()),
        b64.encode(claims.to_string())
    );
    let signature = match seed {
        Some(seed) => b64.encode(
            ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed)
                .unwrap()
                .sign(signed.as_bytes())
                .as_ref(),
        ),
        None => b64.encode(b"not a signature"),
    };
    format!("{signed}.{signature}")
}

#[test]
fn hostile_jwts_csrs_and_keys_from_nodes_fail_those_nodes_with_their_own_error() {
    support::logs::capture();
    let server = NatsServer::start();
    let dir = TempDir::new("hostile-tokens");
    let now = choria_provisioner::clock::unix_now() as i64;
    let claims = |exp: serde_json::Value| {
        serde_json::json!({"purpose": "choria_provisioning", "cht": "s3cret", "chu": server.url(),
            "iat": now, "exp": exp, "iss": "issuer", "ou": "choria"})
    };
    let later = now + 3600;
    let unsigned = |alg: &str| {
        jwt_with(
            &serde_json::json!({"alg": alg}),
            &claims(later.into()),
            None,
        )
    };
    let eddsa = serde_json::json!({"alg": "EdDSA", "typ": "JWT"});
    let signed = |exp: i64, seed| jwt_with(&eddsa, &claims(exp.into()), Some(seed));
    let good_jwt = signed(later, ISSUER_SEED);
    let csr_block = |label: &str, body: &str| {
        format!("-----BEGIN {label}-----\n{body}\n-----END {label}-----\n")
    };
    let request = "CERTIFICATE REQUEST";
    // (identity, less ".tokens.test"; jwt reply; gencsr reply; the error its attempt
    // must end with)
    #[rustfmt::skip]
    let cases: Vec<(&str, String, String, &str)> = vec![
        ("evil-jwt-alg-none", unsigned("none"), String::new(), "signing method none is invalid"),
        ("evil-jwt-hs256", unsigned("HS256"), String::new(), "signing method HS256 is invalid"),
        ("evil-jwt-other-key", signed(later, [9; 32]), String::new(), "token signature is invalid"),
        ("evil-jwt-expired", signed(now - 60, ISSUER_SEED), String::new(), "token is expired"),
        ("evil-jwt-three-dots", "a.b.c".into(), String::new(), "token is malformed"),
        ("evil-jwt-bad-base64", "!!!.???.***".into(), String::new(), "token is malformed"),
        ("evil-jwt-300-kib", "a".repeat(300 * 1024), String::new(), "exceeds"),
        ("evil-jwt-empty", String::new(), String::new(), "no JWT received from evil-jwt-empty"),
        // A valid signature over an exp of i64::MAX: accepted without overflow, so the
        // attempt goes on to fail at its CSR.
        ("evil-jwt-exp-max", signed(i64::MAX, ISSUER_SEED), "hello".into(), "could not parse CSR: no PEM block found"),
        ("evil-csr-not-pem", good_jwt.clone(), "hello".into(), "no PEM block found"),
        ("evil-csr-certificate-block", good_jwt.clone(), csr_block("CERTIFICATE", "AAAA"), "PEM block is \"CERTIFICATE\""),
        ("evil-csr-garbage-der", good_jwt.clone(), csr_block(request, "AAAAAAAA"), "invalid CSR from evil-csr-garbage-der"),
        ("evil-csr-bad-base64", good_jwt.clone(), csr_block(request, "!!!!"), "invalid CSR from evil-csr-bad-base64"),
        ("evil-csr-other-cn", good_jwt.clone(), fixture("csr-n1.pem"), "does not match identity evil-csr-other-cn"),
        ("evil-csr-no-cn", good_jwt.clone(), fixture("csr-no-cn.pem"), "expected one common name"),
        ("evil-csr-huge", good_jwt.clone(), csr_block(request, &"A".repeat(200_000)), "exceeds"),
    ];
    let cases: Vec<(String, String, String, &str)> = cases
        .into_iter()
        .map(|(name, jwt, csr, error)| (format!("{name}.tokens.test"), jwt, csr, error))
        .collect();
    let attacker = Hostile::connect(&server.url(), None);
    let _discovery = attacker.answer_discovery(cases.iter().map(|c| c.0.to_string()).collect());
    let replies: std::collections::HashMap<String, (String, String)> = cases
        .iter()
        .map(|(id, jwt, csr, _)| (id.to_string(), (jwt.clone(), csr.clone())))
        .collect();
    let _serve = attacker.race(Box::new(move |target, _, body| {
        let (jwt, csr) = replies.get(target)?;
        Some(match body.action.as_str() {
            "jwt" => ok(
                "jwt",
                serde_json::json!({"jwt": jwt, "ecdh_public": "11".repeat(32)}),
            ),
            "gencsr" => ok(
                "gencsr",
                serde_json::json!({"csr": csr, "public_key": "", "ssldir": "/etc/choria/ssl"}),
            ),
            "inventory" => ok("inventory", serde_json::json!({"version": "0.30.2"})),
            other => ok(other, serde_json::json!({})),
        })
    }));
    attacker.flush();
    let fleet = jwt_sim(&server.url(), 6, |_| {});
    let prov = Provisioner::start(
        &server.url(),
        "p1.tokens.test",
        &format!(
            "helper: {}\ntoken: s3cret\nfeatures: {{jwt: true, pki: true}}\njwt_verify_cert: {}\n",
            helper_with_key(&dir, &fixture("rsa2048-pkcs1.pem")).display(),
            issuer_public_hex()
        ),
        fast(),
    );
    wait_provisioned(&fleet, 6, Duration::from_secs(60));
    for (identity, _, _, error) in &cases {
        wait_until(identity, Duration::from_secs(30), || {
            support::logs::lines_with(&format!("Provisioning {identity} failed:"))
                .iter()
                .any(|l| l.contains(error))
        });
    }
    assert!(prov.metrics.provision_errors.get() >= cases.len() as u64);
    for line in support::logs::lines_with("tokens.test") {
        assert!(
            line.len() < 2000,
            "a node's string reached the log uncut: {line:.300}"
        );
        assert!(!line.contains("s3cret"), "the token in a log line: {line}");
    }
    assert_all_provisioned_once(&fleet);
    assert_connection_held(&prov);
}
