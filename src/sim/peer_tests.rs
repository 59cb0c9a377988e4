//! The daemon's sealed peer messages against credentials the simulator makes: a site CA with
//! provisioner certificates, a CA the site does not trust, an organisation issuer
//! and the client JWTs it signs.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ring::signature::Ed25519KeyPair;

use super::*;
use crate::choria::peers::{PeerMessageError, MAX_AGE, PEER_REFUSALS};
use crate::crypto::jwt::SigningKey;
use crate::sim::keygen::{self, ClientCredential};

const SUBJECT: &str = "provisioning.provisioner.peers.lon";
const NOW: u64 = 1_800_000_000;

/// A seal of `credential` trusting the CA `ca`, allowing `signers`.
fn rsa_seal(credential: &ClientCredential, ca: &str, signers: &[&str]) -> Arc<Seal> {
    let Credentials::Rsa { key, pubcert } =
        Credentials::rsa(&credential.key, &credential.certificate).unwrap()
    else {
        unreachable!("an RSA credential")
    };
    let certificate = x509::pem_certificates(&pubcert).remove(0);
    let signers: Vec<String> = signers.iter().map(|s| s.to_string()).collect();
    Seal::secure(
        PeerKey::Rsa { key, certificate },
        PeerTrust::Ca(Anchors::from_pem(ca).unwrap()),
        &signers,
        crate::clock::unix_now(),
    )
    .unwrap()
}

/// The site CA with p1, p2 and web1 (a node's name), and another CA with p1.
struct Pki {
    ca: String,
    p1: ClientCredential,
    p2: ClientCredential,
    node: ClientCredential,
    rogue: ClientCredential,
}

fn pki() -> Pki {
    let year = Duration::from_secs(365 * 86_400);
    let (ca, mut site) =
        keygen::client_pki(&["p1.example.net", "p2.example.net", "web1"], year).unwrap();
    let (_, mut other) = keygen::client_pki(&["p1.example.net"], year).unwrap();
    Pki {
        ca,
        node: site.pop().unwrap(),
        p2: site.pop().unwrap(),
        p1: site.pop().unwrap(),
        rogue: other.pop().unwrap(),
    }
}

fn now() -> u64 {
    crate::clock::unix_now()
}

#[test]
fn certificates_of_the_site_ca_with_an_allowed_name_are_believed_and_nothing_else() {
    let pki = pki();
    let allowed = ["^p[0-9]+\\.example\\.net$"];
    let receiver = rsa_seal(&pki.p2, &pki.ca, &allowed);
    let p1 = rsa_seal(&pki.p1, &pki.ca, &allowed);
    let sealed = p1.seal(SUBJECT, b"{\"hello\":1}", now()).unwrap();
    let opened = receiver.open(SUBJECT, &sealed, 4096, now()).unwrap();
    assert_eq!(opened.body, b"{\"hello\":1}");
    assert_eq!(opened.signer.as_deref(), Some("p1.example.net"));

    let refused = |data: &[u8]| receiver.open(SUBJECT, data, 4096, now()).unwrap_err();
    assert_eq!(refused(b"{\"hello\":1}"), PeerMessageError::Unsigned);
    // The same name from a CA the site does not trust.
    let rogue = rsa_seal(&pki.rogue, &pki.ca.clone(), &allowed);
    let forged = rogue.seal(SUBJECT, b"{}", now()).unwrap();
    assert_eq!(refused(&forged), PeerMessageError::Untrusted);
    // A node's certificate from the site CA: trusted, but not a provisioner.
    let node = rsa_seal(&pki.node, &pki.ca, &["^web1$"]);
    let by_node = node.seal(SUBJECT, b"{}", now()).unwrap();
    assert_eq!(refused(&by_node), PeerMessageError::Signer);
    // The body changed after signing.
    let text = String::from_utf8(p1.seal(SUBJECT, b"{\"a\":1}", now()).unwrap()).unwrap();
    let tampered = text.replace(
        &STANDARD.encode(b"{\"a\":1}"),
        &STANDARD.encode(b"{\"a\":2}"),
    );
    assert_eq!(refused(tampered.as_bytes()), PeerMessageError::Signature);
    // A valid message after all of them is still believed.
    let after = p1.seal(SUBJECT, b"{\"after\":1}", now()).unwrap();
    assert_eq!(
        receiver.open(SUBJECT, &after, 4096, now()).unwrap().body,
        b"{\"after\":1}"
    );
}

#[test]
fn a_replayed_or_moved_or_stale_message_is_refused() {
    let pki = pki();
    let receiver = rsa_seal(&pki.p2, &pki.ca, &["^p"]);
    let p1 = rsa_seal(&pki.p1, &pki.ca, &["^p"]);
    let first = p1.seal(SUBJECT, b"1", now()).unwrap();
    let second = p1.seal(SUBJECT, b"2", now()).unwrap();
    assert!(receiver.open(SUBJECT, &second, 64, now()).is_ok());
    for (data, why) in [(&second, "the same again"), (&first, "an older one")] {
        assert_eq!(
            receiver.open(SUBJECT, data, 64, now()),
            Err(PeerMessageError::Replayed),
            "{why}"
        );
    }
    // Signed for another subject (a handoff sent to someone else).
    let elsewhere = p1
        .seal("provisioning.provisioner.peers.lon.node.x", b"3", now())
        .unwrap();
    assert_eq!(
        receiver.open(SUBJECT, &elsewhere, 64, now()),
        Err(PeerMessageError::Replayed)
    );
    // Sealed more than MAX_AGE ago, or ahead, by the receiver's clock.
    for at in [now() - MAX_AGE - 5, now() + MAX_AGE + 5] {
        let old = p1.seal(SUBJECT, b"4", at).unwrap();
        assert_eq!(
            receiver.open(SUBJECT, &old, 64, now()),
            Err(PeerMessageError::Stale)
        );
    }
    // Another process of the same signer (a restart) starts its own sequence.
    let restarted = rsa_seal(&pki.p1, &pki.ca, &["^p"]);
    let fresh = restarted.seal(SUBJECT, b"5", now()).unwrap();
    assert!(receiver.open(SUBJECT, &fresh, 64, now()).is_ok());
}

#[test]
fn without_peer_signers_only_the_instance_s_own_certificate_name_is_allowed() {
    let pki = pki();
    // p1 and a second process with p1's certificate (instances sharing one).
    let receiver = rsa_seal(&pki.p1, &pki.ca, &[]);
    let twin = rsa_seal(&pki.p1, &pki.ca, &[]);
    let p2 = rsa_seal(&pki.p2, &pki.ca, &[]);
    let sealed = twin.seal(SUBJECT, b"{}", now()).unwrap();
    assert!(receiver.open(SUBJECT, &sealed, 64, now()).is_ok());
    let other = p2.seal(SUBJECT, b"{}", now()).unwrap();
    assert_eq!(
        receiver.open(SUBJECT, &other, 64, now()),
        Err(PeerMessageError::Signer)
    );
}

#[test]
fn insecure_sends_plain_and_reads_either_form_unchecked() {
    let pki = pki();
    let insecure = Seal::insecure();
    assert_eq!(insecure.seal(SUBJECT, b"{}", NOW).unwrap(), b"{}");
    assert_eq!(insecure.open(SUBJECT, b"{}", 64, NOW).unwrap().body, b"{}");
    let p1 = rsa_seal(&pki.p1, &pki.ca, &[]);
    let sealed = p1.seal(SUBJECT, b"{\"x\":1}", NOW).unwrap();
    let opened = insecure.open(SUBJECT, &sealed, 64, NOW).unwrap();
    assert_eq!(
        (opened.body.as_slice(), opened.signer),
        (&b"{\"x\":1}"[..], None)
    );
}

#[test]
fn bounds_hold_before_anything_is_decoded_or_verified() {
    let pki = pki();
    let receiver = rsa_seal(&pki.p2, &pki.ca, &["^p"]);
    let p1 = rsa_seal(&pki.p1, &pki.ca, &["^p"]);
    // A body over its kind's bound, sealed properly.
    let big = p1.seal(SUBJECT, &vec![b'x'; 5000], now()).unwrap();
    assert!(matches!(
        receiver.open(SUBJECT, &big, 4096, now()),
        Err(PeerMessageError::TooLarge(5000))
    ));
    // A sealed message over the sealed bound is not parsed.
    let mut huge = b"{\"peer_seal\":1,".to_vec();
    huge.resize(Seal::sealed_limit(4096) + 1, b' ');
    assert!(matches!(
        receiver.open(SUBJECT, &huge, 4096, now()),
        Err(PeerMessageError::TooLarge(_))
    ));
    for junk in [
        &b"{\"peer_seal\":1}"[..],
        b"{\"peer_seal\":\"x\"}",
        b"{\"peer_seal\":1,\"subject\":\"s\",\"incarnation\":1,\"seq\":1,\"time\":1,\"body\":\"!\",\"signature\":\"\",\"certificate\":\"!!\"}",
    ] {
        let e = receiver.open(SUBJECT, junk, 4096, now()).unwrap_err();
        assert!(PEER_REFUSALS.contains(&e.reason()), "{e:?}");
        assert_ne!(e, PeerMessageError::Replayed);
    }
}

/// A client JWT signed by `issuer` for the key of `seed`, with `permissions`.
fn client_jwt(issuer: &[u8; 32], seed: &[u8; 32], permissions: serde_json::Value) -> String {
    let now = crate::clock::unix_now() as i64;
    SigningKey::from_ed25519_seed(issuer)
        .sign_jwt(&json!({
            "callerid": "choria=provisioner",
            "purpose": "choria_client_id",
            "public_key": keygen::ed25519_public_hex(seed),
            "permissions": permissions,
            "iss": format!("I-{}", keygen::ed25519_public_hex(issuer)),
            "exp": now + 3600,
            "nbf": now,
            "iat": now,
        }))
        .unwrap()
}

fn ed25519_seal(seed: &[u8; 32], jwt: String, issuers: Vec<[u8; 32]>) -> Arc<Seal> {
    let key = Arc::new(Ed25519KeyPair::from_seed_unchecked(seed).unwrap());
    Seal::secure(
        PeerKey::Ed25519 { key, jwt },
        PeerTrust::Issuers(issuers),
        &[],
        now(),
    )
    .unwrap()
}

#[test]
fn client_jwts_of_the_issuer_with_the_provisioner_permission_are_believed() {
    let (issuer, rogue_issuer) = ([1u8; 32], [2u8; 32]);
    let issuer_public = keygen::ed25519_public(&issuer);
    let receiver_seed = [3u8; 32];
    let receiver = ed25519_seal(
        &receiver_seed,
        client_jwt(&issuer, &receiver_seed, json!({"provisioner": true})),
        vec![issuer_public],
    );
    let seed = [4u8; 32];
    let good = ed25519_seal(
        &seed,
        client_jwt(&issuer, &seed, json!({"provisioner": true})),
        vec![issuer_public],
    );
    let sealed = good.seal(SUBJECT, b"{}", now()).unwrap();
    let opened = receiver.open(SUBJECT, &sealed, 64, now()).unwrap();
    assert_eq!(opened.signer.as_deref(), Some("choria=provisioner"));

    let not_provisioner = ed25519_seal(
        &seed,
        client_jwt(&issuer, &seed, json!({"streams_user": true})),
        vec![issuer_public],
    );
    let sealed = not_provisioner.seal(SUBJECT, b"{}", now()).unwrap();
    assert_eq!(
        receiver.open(SUBJECT, &sealed, 64, now()),
        Err(PeerMessageError::Signer)
    );
    let other_issuer = ed25519_seal(
        &seed,
        client_jwt(&rogue_issuer, &seed, json!({"provisioner": true})),
        vec![issuer_public],
    );
    let sealed = other_issuer.seal(SUBJECT, b"{}", now()).unwrap();
    assert_eq!(
        receiver.open(SUBJECT, &sealed, 64, now()),
        Err(PeerMessageError::Untrusted)
    );
    // A good JWT presented with another key than the one it names.
    let thief = ed25519_seal(
        &[9u8; 32],
        client_jwt(&issuer, &seed, json!({"provisioner": true})),
        vec![issuer_public],
    );
    let sealed = thief.seal(SUBJECT, b"{}", now()).unwrap();
    assert_eq!(
        receiver.open(SUBJECT, &sealed, 64, now()),
        Err(PeerMessageError::Signature)
    );
}

/// What sealing and opening cost, per message (a measurement: `cargo test --release
/// --features sim,fuzzing --lib sim::peer::tests::what_a_seal_costs -- --ignored
/// --nocapture`).
#[test]
#[ignore = "a measurement"]
fn what_a_seal_costs() {
    let pki = pki();
    let receiver = rsa_seal(&pki.p2, &pki.ca, &["^p"]);
    let p1 = rsa_seal(&pki.p1, &pki.ca, &["^p"]);
    let seed = [4u8; 32];
    let issuer = [1u8; 32];
    let jwt = client_jwt(&issuer, &seed, json!({"provisioner": true}));
    let ed = ed25519_seal(&seed, jwt.clone(), vec![keygen::ed25519_public(&issuer)]);
    let ed_receiver = ed25519_seal(&[3u8; 32], jwt, vec![keygen::ed25519_public(&issuer)]);
    let body = br#"{"from":"p1.example.net","node":"n1.example.net"}"#;
    for (name, sender, opener) in [("RSA 2048", &p1, &receiver), ("ed25519", &ed, &ed_receiver)] {
        let n = 500;
        let started = std::time::Instant::now();
        let sealed: Vec<Vec<u8>> = (0..n)
            .map(|_| sender.seal(SUBJECT, body, now()).unwrap())
            .collect();
        let seal = started.elapsed() / n;
        let started = std::time::Instant::now();
        for m in &sealed {
            opener.open(SUBJECT, m, 4096, now()).unwrap();
        }
        let open = started.elapsed() / n;
        println!(
            "{name}: seal {seal:?}, open {open:?} a message ({} bytes sealed)",
            sealed[0].len()
        );
    }
}
