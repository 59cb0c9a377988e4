//! Every `choria_provision` action of the fleet simulator with its successes and its
//! errors, restart outcomes (configuration, server JWT against the issuer) and every
//! fault mode, against a real nats-server.
#![cfg(feature = "sim")]
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use choria_provisioner::choria::protocol::{self};
use choria_provisioner::crypto::ids;
use choria_provisioner::sim::{CsrKey, Fault, Faults, Phase};
use serde_json::{json, Value};
use support::sim_node::*;

#[test]
fn jwt_checks_the_token_and_the_provisioning_lock() {
    let rig = rig(1, |o| o.token = "s3cret".into());
    let node = id(0);
    let r = call(&rig.nc, &node, "jwt", json!({"token": "wrong"}));
    assert_status(&r, 1, "Incorrect provision token supplied");
    assert_eq!(r["data"], json!({}));
    let r = call(&rig.nc, &node, "jwt", json!({"token": 5}));
    assert_eq!(r["statuscode"], 4, "{r}");
    let r = call_ok(&rig.nc, &node, "jwt", json!({"token": "s3cret"}));
    let jwt = r["data"]["jwt"].as_str().unwrap();
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(jwt.split('.').nth(1).unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["cht"], "s3cret");
    assert_eq!(claims["purpose"], "choria_provisioning");
    let ecdh = r["data"]["ecdh_public"].as_str().unwrap();
    assert_eq!(ecdh.len(), 64);
    assert!(ecdh.bytes().all(|b| b.is_ascii_hexdigit()));
    // Every jwt call makes a new ECDH pair.
    let again = call(&rig.nc, &node, "jwt", json!({"token": "s3cret"}));
    assert_ne!(again["data"]["ecdh_public"], r["data"]["ecdh_public"]);

    // Another sender is locked out of every locked action, before any other check;
    // restart and shutdown take no lock.
    for action in ["jwt", "gen25519", "gencsr", "configure", "release_update"] {
        let r = call_as(
            &rig.nc,
            &node,
            "choria_provision",
            action,
            json!({"token": "wrong"}),
            "other.example.net",
            WAIT,
        )
        .unwrap();
        assert_status(&r, 1, "Could not obtain provisioning lock");
    }
    let r = call_as(
        &rig.nc,
        &node,
        "choria_provision",
        "restart",
        json!({"token": "wrong"}),
        "other.example.net",
        WAIT,
    )
    .unwrap();
    assert_status(&r, 1, "Incorrect provision token supplied");
    let r = call(&rig.nc, &node, "nonsense", json!({"token": "s3cret"}));
    assert_status(&r, 2, "Unknown action nonsense for agent choria_provision");
}

#[test]
fn gen25519_signs_the_nonce_and_gencsr_makes_rsa_as_real_nodes_do() {
    let rig = rig(2, |o| o.csr_key = CsrKey::Rsa);
    let r = call_ok(
        &rig.nc,
        &id(0),
        "gen25519",
        json!({"nonce": "abc123", "token": ""}),
    );
    choria_provisioner::crypto::nonce::verify_nonce_signature(
        r["data"]["public_key"].as_str().unwrap(),
        "abc123",
        r["data"]["signature"].as_str().unwrap(),
    )
    .expect("the nonce signature verifies");
    assert_eq!(r["data"]["directory"], "/etc/choria");

    let r = call_ok(
        &rig.nc,
        &id(0),
        "gencsr",
        json!({"cn": "", "C": "GB", "o": "Example", "OU": "Ops", "L": "London", "ST": "Ignored"}),
    );
    let csr = r["data"]["csr"].as_str().unwrap();
    let names = choria_provisioner::crypto::csr::parse_csr(csr).unwrap();
    assert_eq!(names.common_name, id(0));
    let text = String::from_utf8(
        Command::new("openssl")
            .args(["req", "-noout", "-subject", "-verify"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write as _;
                c.stdin.take().unwrap().write_all(csr.as_bytes())?;
                c.wait_with_output()
            })
            .map(|o| o.stdout)
            .unwrap_or_default(),
    )
    .unwrap();
    if !text.is_empty() {
        assert!(
            text.contains("C=GB, L=London, O=Example, OU=Ops, CN=sim-00000.example.net")
                || text.contains(
                    "C = GB, L = London, O = Example, OU = Ops, CN = sim-00000.example.net"
                ),
            "{text}"
        );
        assert!(!text.contains("Ignored"));
    }
    let public = r["data"]["public_key"].as_str().unwrap();
    assert!(public.starts_with("-----BEGIN PUBLIC KEY-----"));
    // The body is PKCS#1 despite the label, as Go writes it: SEQUENCE { n, e }.
    let der = choria_provisioner::crypto::pem::decode(public).unwrap().der;
    assert_eq!(&der[..2], [0x30, 0x82]);
    assert_eq!(
        der[4], 0x02,
        "starts with the modulus INTEGER, not an AlgorithmIdentifier"
    );
    assert!(
        der.len() > 256 && der.len() < 300,
        "RSA 2048: {} bytes",
        der.len()
    );
}

#[test]
fn configure_writes_what_it_is_sent_and_refuses_what_go_refuses() {
    let rig = rig(1, |o| o.token = "t".into());
    let node = id(0);
    let cfg = json!({"identity": node, "plugin.choria.server.provision": "false"}).to_string();
    let r = call(
        &rig.nc,
        &node,
        "configure",
        json!({"token": "t", "config": ""}),
    );
    assert_status(
        &r,
        1,
        "Did not receive any configuration to write, cannot write a empty configuration file",
    );
    let r = call(
        &rig.nc,
        &node,
        "configure",
        json!({"token": "t", "config": cfg, "key": "-----BEGIN RSA PRIVATE KEY-----"}),
    );
    assert_status(
        &r,
        1,
        "EDCH Public Key not supplied while providing a private key",
    );
    let r = call(
        &rig.nc,
        &node,
        "configure",
        json!({"token": "t", "config": "{\"loglevel\": 1}"}),
    );
    assert_eq!(r["statuscode"], 1);
    assert!(r["statusmsg"]
        .as_str()
        .unwrap()
        .starts_with("Could not decode configuration data: "));
    let r = call(
        &rig.nc,
        &node,
        "configure",
        json!({"token": "t", "config": cfg, "action_policies": {"default.txt": "allow"}}),
    );
    assert_status(
        &r,
        1,
        "Could not save Action Policies: expected \"default.txt\" to have .policy extension",
    );

    // A key that does not decrypt with the node's ECDH secret is refused.
    let jwt = call(&rig.nc, &node, "jwt", json!({"token": "t"}));
    let node_public = jwt["data"]["ecdh_public"].as_str().unwrap().to_string();
    let tls = |key: &str, ecdh: &str| {
        json!({"token": "t", "config": cfg, "certificate": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
               "ca": "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n", "ssldir": "/etc/choria/ssl",
               "key": key, "ecdh_public": ecdh, "action_policies": {"default.policy": "policy default allow"},
               "opa_policies": {}, "server_jwt": ""})
    };
    let mut our_secret = [0u8; 32];
    ids::random_bytes(&mut our_secret);
    let ours = x25519_dalek::StaticSecret::from(our_secret);
    let our_public = hex::encode(x25519_dalek::PublicKey::from(&ours).as_bytes());
    // Decrypting with the wrong secret fails on the PKCS#7 padding, as in Go; about one
    // garbage block in 256 happens to end in valid padding, so try a few encryptions.
    // A try that passes by that chance configures the node, as Go's agent would, and
    // writes its policies once more.
    let stranger = x25519_dalek::PublicKey::from(&x25519_dalek::StaticSecret::from([5u8; 32]));
    let mut configured_by_chance = 0;
    let refused = (0..8).any(|_| {
        let (wrong, _) = choria_provisioner::crypto::key_transport::encrypt_key_for_node(
            "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n",
            &hex::encode(stranger.as_bytes()),
        )
        .unwrap();
        let r = call(&rig.nc, &node, "configure", tls(&wrong, &our_public));
        if r["statuscode"] == 0 {
            configured_by_chance += 1;
        }
        r["statusmsg"]
            == "TLS Setup Failed: could not decrypt private key: x509: decryption password incorrect"
    });
    assert!(refused, "a key for another X25519 key is refused");
    let r = call(&rig.nc, &node, "configure", tls("not a PEM", &our_public));
    assert_status(
        &r,
        1,
        "TLS Setup Failed: could not decrypt private key: bad key received",
    );

    // go-choria's provision agent, `providers/agent/mcorpc/golang/provision`: X25519 with the node's public key, the shared secret
    // as the password of Go's legacy PEM encryption (AES-256-CBC, EVP_BytesToKey).
    let theirs: [u8; 32] = hex::decode(&node_public).unwrap().try_into().unwrap();
    let shared = ours.diffie_hellman(&x25519_dalek::PublicKey::from(theirs));
    let secret_der: Vec<u8> = (0u8..=200).collect();
    let mut iv = [0u8; 16];
    ids::random_bytes(&mut iv);
    let encrypted = choria_provisioner::crypto::key_transport::encrypt_pem_block(
        &secret_der,
        shared.as_bytes(),
        iv,
    );
    assert!(encrypted.contains("Proc-Type: 4,ENCRYPTED"));
    assert!(encrypted.contains("DEK-Info: AES-256-CBC,"));
    let r = call_ok(&rig.nc, &node, "configure", tls(&encrypted, &our_public));
    assert_eq!(
        r["data"]["message"],
        "Wrote 3 lines to /etc/choria/server.conf"
    );
    let summary = &rig.sim.summary().nodes[0];
    let written = choria_provisioner::crypto::pem::decode(summary.private_key.as_deref().unwrap())
        .unwrap()
        .der;
    assert_eq!(written, secret_der, "the node decrypted the key");
    assert_eq!(
        summary.policies,
        vec!["default.policy"; configured_by_chance + 1],
        "one write per configure that passed"
    );
    assert!(summary.certificate.is_some());
    assert_eq!(
        summary.configuration.as_ref().unwrap()["identity"],
        node.as_str()
    );
    let text = the_streamed_summary_is_the_summary(&rig.sim);
    assert!(text.contains("\"private_key\": \"-----BEGIN RSA PRIVATE KEY-----"));
}

/// `write_summary` (what the binary writes, node by node) is the pretty JSON of
/// `summary()`, byte for byte: the text.
fn the_streamed_summary_is_the_summary(sim: &choria_provisioner::sim::Sim) -> String {
    let mut streamed = Vec::new();
    sim.write_summary(&mut streamed).unwrap();
    let whole = serde_json::to_string_pretty(&sim.summary()).unwrap();
    assert_eq!(String::from_utf8(streamed).unwrap(), whole);
    whole
}

#[test]
fn restart_release_update_and_shutdown() {
    let rig = rig(3, |o| o.token = "t".into());
    let lifecycle = rig
        .nc
        .subscribe("choria.lifecycle.event.*.provision_mode_server")
        .unwrap();
    rig.nc.flush().unwrap();
    let node0 = |action: &str, data: Value| call(&rig.nc, &id(0), action, data);
    let on = json!({"plugin.choria.server.provision": "true"}).to_string();
    let off = json!({"plugin.choria.server.provision": "false"}).to_string();
    let r = node0("configure", json!({"token": "t", "config": on}));
    assert_status(&r, 0, "OK");
    let r = node0("restart", json!({"token": "t", "splay": 1}));
    assert_status(
        &r,
        1,
        "Configuration /etc/choria/server.conf enables provisioning, restart cannot continue",
    );
    let r = node0("restart", json!({"token": "t", "splay": "1"}));
    assert_eq!(r["statuscode"], 4, "{r}");
    let r = node0("configure", json!({"token": "t", "config": off}));
    assert_status(&r, 0, "OK");
    let r = node0("restart", json!({"token": "t", "splay": 1}));
    assert_status(&r, 0, "OK");
    assert_eq!(r["data"]["message"], "Restarting Choria Server after 2s");

    let r = call(
        &rig.nc,
        &id(1),
        "release_update",
        json!({"token": "t", "version": "0.31.0", "repository": "https://repo.example.net"}),
    );
    assert_status(&r, 1, "Version updates is not enabled in the configuration");

    let r = call_ok(&rig.nc, &id(2), "shutdown", json!({"token": "t"}));
    assert!(r["data"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Shutting Choria Server down after "));
    // A node that shut down or left answers nothing.
    assert!(inventory_within(&rig.nc, &id(2), SILENCE).is_none());
    let deadline = Instant::now() + WAIT;
    while rig.sim.summary().nodes[0].phase != Phase::Provisioned && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let summary = rig.sim.summary();
    assert_eq!(summary.nodes[0].phase, Phase::Provisioned);
    assert_eq!(summary.nodes[2].phase, Phase::Shutdown);
    assert_eq!(summary.progress.shut_down, 1);
    assert!(inventory_within(&rig.nc, &id(0), SILENCE).is_none());
    // What real servers publish: provisioned after each configure, shutdown before a
    // restart and on shutdown (startup events of the boot are skipped).
    let mut seen = Vec::new();
    while let Ok(m) = lifecycle.next_timeout(Duration::from_millis(300)) {
        let event = choria_provisioner::choria::lifecycle::decode(&m.data).unwrap();
        if event.kind() != "startup" {
            seen.push(format!("{} {}", event.kind(), event.identity));
        }
    }
    assert_eq!(
        seen,
        [
            format!("provisioned {}", id(0)),
            format!("provisioned {}", id(0)),
            format!("shutdown {}", id(0)),
            format!("shutdown {}", id(2)),
        ]
    );

    // An upgradable node takes the new version and announces itself again.
    let up = rig_upgradable();
    let events = up
        .nc
        .subscribe("choria.lifecycle.event.startup.provision_mode_server")
        .unwrap();
    let upgraded = up
        .nc
        .subscribe("choria.lifecycle.event.upgraded.provision_mode_server")
        .unwrap();
    up.nc.flush().unwrap();
    call_ok(
        &up.nc,
        &id(0),
        "release_update",
        json!({"version": "0.31.0", "repository": "https://repo.example.net/choria"}),
    );
    let event = upgraded.next_timeout(WAIT).expect("an upgraded event");
    let event = choria_provisioner::choria::lifecycle::decode(&event.data).unwrap();
    assert_eq!(
        (event.version.as_str(), event.new_version.as_str()),
        ("0.30.2", "0.31.0")
    );
    let event = events
        .next_timeout(WAIT)
        .expect("a startup event after the upgrade");
    let event = choria_provisioner::choria::lifecycle::decode(&event.data).unwrap();
    assert_eq!(event.identity, id(0));
    let inv = call_as(
        &up.nc,
        &id(0),
        "rpcutil",
        "inventory",
        json!({}),
        SENDER,
        WAIT,
    )
    .unwrap();
    assert_eq!(inv["data"]["version"], "0.31.0");
}

#[test]
fn after_restart_the_server_jwt_is_checked_against_the_issuer() {
    let issuer = [4u8; 32];
    let rig = rig(5, |o| o.issuer_seed = Some(issuer));
    let choria = |n: usize| json!({"identity": id(n), "plugin.choria.server.provision": "false", "plugin.security.provider": "choria"});
    let (phase, note) = restart_with(&rig, 0, choria(0), |p| server_jwt(&issuer, &id(0), p));
    assert_eq!(phase, Phase::Provisioned, "{note:?}");
    let (phase, note) = restart_with(&rig, 1, choria(1), |p| server_jwt(&[8; 32], &id(1), p));
    assert_eq!(phase, Phase::Rejected);
    assert!(note.unwrap().contains("the broker refuses the server JWT"));
    let (phase, note) = restart_with(&rig, 2, choria(2), |p| server_jwt(&issuer, &id(0), p));
    assert_eq!(phase, Phase::Rejected);
    assert!(note.unwrap().contains("sim-00000"), "for another node");
    let (phase, note) = restart_with(&rig, 3, choria(3), |_| String::new());
    assert_eq!(phase, Phase::Provisioning);
    assert!(note.unwrap().contains("no server.jwt"));
    // No plugin.choria.server.provision: the JWT's chpd puts it back in provisioning.
    let (phase, note) = restart_with(&rig, 4, json!({"identity": id(4)}), |_| String::new());
    assert_eq!(phase, Phase::Provisioning);
    assert!(note.unwrap().contains("chpd"));
    let progress = rig.sim.progress();
    assert_eq!(
        (progress.provisioned, progress.rejected, progress.finished()),
        (1, 2, 3)
    );
    assert!(call_as(
        &rig.nc,
        &id(4),
        "rpcutil",
        "inventory",
        json!({}),
        SENDER,
        WAIT
    )
    .is_some());
}

#[test]
fn every_fault_mode_shows_up() {
    // Fault fractions are deterministic per node number: find one node of each.
    let faults = Faults {
        silent: 0.2,
        silent_first: 2,
        slow: 0.2,
        slow_by: Duration::from_millis(800),
        error: 0.2,
        garbage: 0.2,
        reboot: 0.2,
    };
    let rig = rig(60, |o| o.faults = faults.clone());
    let summary = rig.sim.summary();
    let first = |fault: Fault, skip: usize| {
        summary
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.fault == Some(fault))
            .nth(skip)
            .map(|(i, _)| i)
            .unwrap_or_else(|| panic!("no node with {fault:?}"))
    };
    let inventory = |n: usize| inventory_within(&rig.nc, &id(n), WAIT);
    let silent_to = |n: usize| inventory_within(&rig.nc, &id(n), SILENCE).is_none();

    let silent = first(Fault::Silent, 0);
    assert!(silent_to(silent) && silent_to(silent));
    assert_eq!(
        inventory(silent).unwrap()["statuscode"],
        0,
        "answers the third"
    );

    let slow = first(Fault::Slow, 0);
    let started = Instant::now();
    assert_eq!(inventory(slow).unwrap()["statuscode"], 0);
    assert!(started.elapsed() >= Duration::from_millis(800));

    let error = first(Fault::Error, 0);
    assert_status(&inventory(error).unwrap(), 5, "simulated failure");
    assert_eq!(inventory(error).unwrap()["statuscode"], 0);

    // Garbage comes in three kinds, by node number: truncated, bad hash, impostor.
    let mut kinds = std::collections::BTreeSet::new();
    for skip in 0.. {
        let Some(n) = summary
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, s)| s.fault == Some(Fault::Garbage))
            .nth(skip)
            .map(|(i, _)| i)
        else {
            break;
        };
        let hand = Hand::inventory();
        let raw = exchange(
            &rig.nc,
            &format!("provisioning.node.{}", id(n)),
            &hand.v1(),
            &hand.reply_to(),
            WAIT,
        )
        .unwrap();
        let kind = match protocol::decode_reply(&raw) {
            Err(e) if e.to_string().contains("hash") => "hash",
            Err(_) => "truncated",
            Ok(r) if r.sender_id == "impostor.example.net" => "impostor",
            Ok(r) => panic!("garbage node {n} answered properly: {r:?}"),
        };
        kinds.insert(kind);
        assert_eq!(inventory(n).unwrap()["statuscode"], 0, "then it behaves");
    }
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["hash", "impostor", "truncated"]
    );

    // A rebooting node drops its third request, forgets its ECDH key and lock, and
    // announces itself again.
    let reboot = first(Fault::Reboot, 0);
    let events = rig
        .nc
        .subscribe("choria.lifecycle.event.startup.provision_mode_server")
        .unwrap();
    rig.nc.flush().unwrap();
    let jwt = call(&rig.nc, &id(reboot), "jwt", json!({}));
    assert_eq!(jwt["statuscode"], 0);
    assert!(inventory(reboot).is_some());
    assert!(silent_to(reboot), "the third request is lost");
    let event = events.next_timeout(WAIT).expect("a startup event");
    assert_eq!(
        choria_provisioner::choria::lifecycle::decode(&event.data)
            .unwrap()
            .identity,
        id(reboot)
    );
    let (key, ours) = choria_provisioner::crypto::key_transport::encrypt_key_for_node(
        "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n",
        jwt["data"]["ecdh_public"].as_str().unwrap(),
    )
    .unwrap();
    let r = call(
        &rig.nc,
        &id(reboot),
        "configure",
        json!({"config": "{\"a\":\"b\"}", "certificate": "c", "ca": "c", "ssldir": "/s", "key": key, "ecdh_public": ours}),
    );
    assert_eq!(r["statuscode"], 1, "the old ECDH key is gone: {r}");
    let text = the_streamed_summary_is_the_summary(&rig.sim);
    assert!(text.contains("\"fault\": \"reboot\""), "{text}");
}

// ------------------------------------------------------------------------ the binaries
