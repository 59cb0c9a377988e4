//! Fuzzing entry points (cargo feature `fuzzing`, never in the daemon).
//!
//! One `pub fn <target>(data: &[u8])` per cargo-fuzz target of `fuzz/`: it feeds the
//! bytes to the real decoder and asserts what must hold for any input (round trips,
//! ordering laws, no secret in `Debug`); a panic is a finding. The fuzz targets and
//! `tests/fuzz_smoke.rs` call the same functions, so a crash input replays on stable.
//!
//! Several targets read a first "mode" byte that picks how the rest is used (raw
//! text, or DER wrapped in PEM so mutations reach the ASN.1 parser), documented on
//! each function. [`seeds`] builds the starting corpus with the crate's own encoders.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::signature::{Ed25519KeyPair, KeyPair as _};

use crate::choria::client_config::{broker_host_port, parse_lines, ClientConfig};
use crate::choria::kv::{parse_bucket_ttl, parse_pub_ack};
use crate::choria::lifecycle::{self, Event};
use crate::choria::peers::{Handoff, Heartbeat, PeerState, HEARTBEAT_MS, PEER_REFUSALS};
use crate::choria::protocol::mcorpc::{ReplyBody, RpcReply, RpcRequestBody, StatusCode};
use crate::choria::protocol::{self, gojson, Credentials, Filter, Protocol, RequestSpec};
use crate::config::{format_duration, parse_duration, shell_words, Config, Secret};
use crate::crypto::csr::{parse_csr, validate_csr, CsrError, DenyList};
use crate::crypto::ids::{ksuid_from, ksuid_time, KSUID_EPOCH};
use crate::crypto::jwt::{
    add_chain_issuer_data, verify_jws, verify_provisioning_token, ServerClaims, SigningKey,
    SigningToken, StandardClaims, VerifyKey, PROVISIONING_PURPOSE,
};
use crate::crypto::key_transport::{decrypt_pem_block, encrypt_key_for_node, encrypt_pem_block};
use crate::crypto::nonce::verify_nonce_signature;
use crate::crypto::pem::{self, Block};
use crate::node::helper::{Ed25519Info, HelperOutput};
use crate::node::key_material::KeyMaterial as Keys;
use crate::node::version;

/// Targets whose input comes from nodes, the broker or the helper: fuzzed longest.
pub const NETWORK_TARGETS: &[&str] = &[
    "decode_reply",
    "decode_request",
    "decode_transport",
    "request_round_trip",
    "rpc_body",
    "lifecycle_event",
    "startup_identity",
    "csr",
    "pem_decrypt",
    "provisioning_jwt",
    "helper_output",
    "nonce_ecdh",
    "peer_messages",
];

/// Targets whose input is the operator's configuration or our own values.
pub const OTHER_TARGETS: &[&str] = &[
    "key_files",
    "ids",
    "rpm_version",
    "client_config",
    "config_yaml",
    "duration",
    "shell_words",
    "election_replies",
];

/// Runs the entry point named `target`; false when there is no such target.
pub fn run(target: &str, data: &[u8]) -> bool {
    let f: fn(&[u8]) = match target {
        "decode_reply" => decode_reply,
        "decode_request" => decode_request,
        "decode_transport" => decode_transport,
        "request_round_trip" => request_round_trip,
        "rpc_body" => rpc_body,
        "lifecycle_event" => lifecycle_event,
        "startup_identity" => startup_identity,
        "csr" => csr,
        "pem_decrypt" => pem_decrypt,
        "provisioning_jwt" => provisioning_jwt,
        "helper_output" => helper_output,
        "nonce_ecdh" => nonce_ecdh,
        "key_files" => key_files,
        "ids" => ids,
        "rpm_version" => rpm_version,
        "client_config" => client_config,
        "config_yaml" => config_yaml,
        "duration" => duration,
        "shell_words" => shell_words,
        "election_replies" => election_replies,
        "peer_messages" => peer_messages,
        _ => return false,
    };
    f(data);
    true
}

/// The fixed "now" of every time check here (2026-01-01T00:00:00Z).
pub const NOW: i64 = 1_767_225_600;

/// Seed of the ed25519 key that signs and verifies the fuzzers' JWTs.
const ED_SEED: [u8; 32] = [7; 32];

/// The RSA key pair of `tests/fixtures` (2048 bits) for RS256 tokens.
const RSA_KEY_PEM: &str = include_str!("../tests/fixtures/test-rsa-signer.key");
const RSA_PUBLIC_PEM: &str = include_str!("../tests/fixtures/test-rsa-signer.pub");

fn ed_key() -> &'static Ed25519KeyPair {
    static KEY: OnceLock<Ed25519KeyPair> = OnceLock::new();
    KEY.get_or_init(|| Ed25519KeyPair::from_seed_unchecked(&ED_SEED).expect("32-byte seed"))
}

fn rsa_key() -> &'static ring::signature::RsaKeyPair {
    static KEY: OnceLock<ring::signature::RsaKeyPair> = OnceLock::new();
    KEY.get_or_init(|| {
        let block = pem::decode(RSA_KEY_PEM).expect("fixture key is PEM");
        ring::signature::RsaKeyPair::from_der(&block.der).expect("fixture key is RSA")
    })
}

fn verify_keys() -> &'static (VerifyKey, VerifyKey) {
    static KEYS: OnceLock<(VerifyKey, VerifyKey)> = OnceLock::new();
    KEYS.get_or_init(|| {
        let ed: [u8; 32] = ed_key().public_key().as_ref().try_into().expect("32 bytes");
        let rsa = VerifyKey::from_file_contents(RSA_PUBLIC_PEM.as_bytes()).expect("fixture");
        (VerifyKey::Ed25519(ed), rsa)
    })
}

/// A compact JWS over arbitrary header and claims bytes, signed as `alg` says
/// (`EdDSA` with [`ED_SEED`], `RS256` with the fixture key, anything else unsigned):
/// the forger's side, so that mutated claims reach the claim checks.
fn forge_jws(alg: &str, claims: &[u8]) -> String {
    let header = format!(r#"{{"alg":"{alg}","typ":"JWT"}}"#);
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(claims)
    );
    let sig = match alg {
        "EdDSA" => ed_key().sign(input.as_bytes()).as_ref().to_vec(),
        "RS256" => {
            let key = rsa_key();
            let mut sig = vec![0u8; key.public().modulus_len()];
            key.sign(
                &ring::signature::RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                input.as_bytes(),
                &mut sig,
            )
            .expect("RSA signing");
            sig
        }
        _ => Vec::new(),
    };
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig))
}

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

// ------------------------------------------------------------------------ wire codecs

/// Client-side reply decoder (transport → secure reply → reply, hash check).
pub fn decode_reply(data: &[u8]) {
    match protocol::decode_reply(data) {
        Ok(reply) => {
            let version = protocol::transport_version(data).expect("a decoded reply has a version");
            assert_eq!(version, reply.protocol);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// Server-side request decoder and the provisioning-mode checks; a reply to any
/// request that decodes must itself decode to the same id, agent, sender and body.
pub fn decode_request(data: &[u8]) {
    let request = match protocol::decode_request(data) {
        Ok(request) => request,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    for (speaks, now) in [(Protocol::V1, NOW), (Protocol::V2, NOW), (Protocol::V2, 0)] {
        if let Err(why) = request.validate_for_provisioning(speaks, now) {
            let _ = why.to_string();
        }
    }
    let reply = protocol::encode_reply(
        &request,
        "fuzz.example.net",
        &request.body,
        NOW * 1_000_000_000,
        None,
    );
    let back = protocol::decode_reply(&reply).expect("our own reply decodes");
    assert_eq!(back.protocol, request.protocol);
    assert_eq!(back.request_id, request.request_id);
    assert_eq!(back.agent, request.agent);
    assert_eq!(back.sender_id, "fuzz.example.net");
    // v1 bodies are text: a binary body is sent as lossy UTF-8.
    match request.protocol {
        Protocol::V1 => assert_eq!(back.body, String::from_utf8_lossy(&request.body).as_bytes()),
        Protocol::V2 => assert_eq!(back.body, request.body),
    }
    assert_eq!(back.time, NOW);
}

fn v2_credentials() -> &'static Credentials {
    static CREDENTIALS: OnceLock<Credentials> = OnceLock::new();
    CREDENTIALS.get_or_init(|| {
        let caller = forge_jws(
            "EdDSA",
            br#"{"callerid":"choria=provisioner","purpose":"choria_client_id"}"#,
        );
        Credentials::ed25519(&ED_SEED, &caller, true).expect("credentials")
    })
}

/// Requests we encode from fuzzed fields, v1 (insecure) and v2 (signed): they decode
/// to the same fields, pass or fail the provisioning checks without panicking, and a
/// reply to them decodes. Input: a mode byte (bit 0: v2), the TTL (8 bytes, read
/// below 2^63), the time in ns (8 bytes), then agent, collective, sender, caller,
/// request id and body separated by NUL bytes.
pub fn request_round_trip(data: &[u8]) {
    if data.len() < 17 {
        return;
    }
    let protocol = if data[0] & 1 == 1 {
        Protocol::V2
    } else {
        Protocol::V1
    };
    let ttl = u64::from_le_bytes(data[1..9].try_into().expect("8 bytes")) >> 1;
    let time_ns = i64::from_le_bytes(data[9..17].try_into().expect("8 bytes"));
    let mut fields = data[17..]
        .splitn(6, |&b| b == 0)
        .map(|f| String::from_utf8_lossy(f).into_owned());
    let mut next = || fields.next().unwrap_or_default();
    let (agent, collective, sender, caller, id, body) =
        (next(), next(), next(), next(), next(), next());
    let filter = Filter::agent(&agent);
    let spec = RequestSpec {
        filter: &filter,
        agent: &agent,
        collective: &collective,
        caller_id: &caller,
        sender_id: &sender,
        ttl,
        body: body.as_bytes(),
        request_id: Some(&id),
        time_ns: Some(time_ns),
        seen_by: Some("nats://broker.example.net:4222"),
    };
    let credentials = match protocol {
        Protocol::V1 => &Credentials::Insecure,
        Protocol::V2 => v2_credentials(),
    };
    let reply_to = "provisioning.reply.0123.1";
    let (id, bytes) = protocol::encode_request(&spec, reply_to, credentials, protocol)
        .expect("any UTF-8 fields encode");
    let request = protocol::decode_request(&bytes).expect("our own request decodes");
    assert_eq!(request.protocol, protocol);
    assert_eq!(request.request_id, id);
    assert_eq!(request.sender_id, spec.sender_id);
    assert_eq!(request.caller_id, spec.caller_id);
    assert_eq!(request.collective, spec.collective);
    assert_eq!(request.agent, spec.agent);
    assert_eq!(&request.filter, spec.filter);
    assert_eq!(request.reply_to, reply_to);
    assert_eq!(request.ttl, spec.ttl as i64);
    let seconds = match protocol {
        Protocol::V1 => time_ns / 1_000_000_000,
        Protocol::V2 => time_ns.div_euclid(1_000_000_000),
    };
    assert_eq!(request.time, seconds);
    // A server dispatches a body that is base64 text decoded (§2.8).
    if base64::engine::general_purpose::STANDARD
        .decode(spec.body)
        .is_err()
    {
        assert_eq!(request.body, spec.body);
    }
    if !spec.sender_id.is_empty() {
        assert_eq!(
            protocol::transport_sender(&bytes).as_deref(),
            Ok(spec.sender_id)
        );
    }
    for now in [NOW, request.time, 0] {
        let verdict = request.validate_for_provisioning(protocol, now);
        let id_ok = match protocol {
            Protocol::V1 => request.request_id.len() == 32,
            Protocol::V2 => !request.request_id.is_empty(),
        };
        let min_ttl = if protocol == Protocol::V1 { 30 } else { 1 };
        if now == request.time
            && id_ok
            && request.ttl >= min_ttl
            && request.collective == "provisioning"
        {
            assert_eq!(verdict, Ok(()), "a fresh request refused");
        }
    }
    let reply = protocol::encode_reply(&request, "n1.example.net", b"pong", time_ns, None);
    let back = protocol::decode_reply(&reply).expect("our own reply decodes");
    assert_eq!(back.request_id, request.request_id);
    assert_eq!(back.agent, request.agent);
    assert_eq!(back.body, b"pong");
}

/// The transport reader discovery uses (version and sender header only).
pub fn decode_transport(data: &[u8]) {
    let version = protocol::transport_version(data);
    if let Ok(sender) = protocol::transport_sender(data) {
        assert!(!sender.is_empty(), "an empty sender is an error");
        assert!(version.is_ok(), "a sender without a version");
    }
}

/// MCollective-RPC request and reply bodies: what decodes re-encodes and decodes; the
/// provisioner's reader (`mcorpc::ReplyBody`) takes every body serde's does, with the same
/// data, and refuses others only for a value the actions refuse when they read it;
/// the inventory written for the helper holds the data's values, sorted everywhere.
pub fn rpc_body(data: &[u8]) {
    let reply = RpcReply::decode(data);
    if let Ok(reply) = &reply {
        let again = RpcReply::decode(&reply.encode()).expect("our own reply body decodes");
        assert_eq!(&again, reply);
    }
    match (reply, ReplyBody::decode(data)) {
        (Ok(reply), Ok(body)) => {
            assert_eq!(
                (body.statuscode, body.statusmsg.as_str()),
                (reply.statuscode, reply.statusmsg.as_str())
            );
            assert_eq!(body.data.to_value().expect("serde read it"), reply.data);
        }
        (Ok(_), Err(e)) => panic!("a body serde reads is refused: {e}"),
        (Err(_), Ok(body)) => assert!(body.data.to_value().is_err()),
        (Err(_), Err(_)) => {}
    }
    if let Ok(body) = ReplyBody::decode(data) {
        let mut out = Vec::new();
        let written = gojson::write_map(&mut out, body.data.text(), &[("upgradable", "false")]);
        match (written, body.data.to_value()) {
            (Ok(()), Ok(mut value)) => {
                let back: serde_json::Value =
                    serde_json::from_slice(&out).expect("the inventory written is JSON");
                assert!(gojson::map_checks::sorted_everywhere(&back));
                if let serde_json::Value::Object(m) = &mut value {
                    m.entry("upgradable")
                        .or_insert(serde_json::Value::Bool(false));
                }
                use gojson::map_checks::as_float64;
                assert_eq!(as_float64(back), as_float64(value));
            }
            (Err(_), Err(_)) => assert!(out.is_empty()),
            (written, value) => panic!("write_map {written:?} but serde {:?}", value.err()),
        }
    }
    if let Ok(body) = RpcRequestBody::decode(data) {
        let again = RpcRequestBody::decode(&body.encode()).expect("our own request body decodes");
        assert_eq!(again, body);
    }
}

/// Lifecycle events in both formats: what decodes survives both encodings.
pub fn lifecycle_event(data: &[u8]) {
    if let Ok(event) = lifecycle::decode(data) {
        let choria = lifecycle::decode(&event.to_choria_json()).expect("Choria format decodes");
        assert_eq!(choria, event);
        let cloud = lifecycle::decode(&event.to_cloudevent_json()).expect("CloudEvent decodes");
        assert_eq!(cloud, event);
    }
}

/// The identity a startup event announces: consistent with the full decoder, and
/// announced again by a startup event we encode for it in either format.
pub fn startup_identity(data: &[u8]) {
    match lifecycle::startup_identity(data) {
        Ok(Some(identity)) => {
            assert!(!identity.is_empty());
            let event = lifecycle::decode(data).expect("a startup identity decodes");
            assert_eq!(event.kind(), "startup");
            assert_eq!(event.identity, identity.as_str());
            let again = Event {
                identity: identity.to_string(),
                ..event
            };
            for bytes in [again.to_choria_json(), again.to_cloudevent_json()] {
                assert_eq!(
                    lifecycle::startup_identity(&bytes).map_err(|e| e.to_string()),
                    Ok(Some(identity.clone()))
                );
            }
        }
        Ok(None) => {
            let event = lifecycle::decode(data).expect("an event that is not a startup decodes");
            assert_ne!(event.kind(), "startup");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

// ------------------------------------------------------------------------ node replies

fn deny_list() -> &'static DenyList {
    static DENY: OnceLock<DenyList> = OnceLock::new();
    DENY.get_or_init(DenyList::default)
}

/// CSR parsing and validation. Mode byte even: the rest is DER, sent as a
/// `CERTIFICATE REQUEST` PEM block; odd: the rest is the reply text itself.
/// A CSR that parses is accepted for its own CN unless a name is denied, and
/// refused for any other identity.
pub fn csr(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let csr_text = if mode & 1 == 0 {
        pem::encode(&Block {
            label: "CERTIFICATE REQUEST".into(),
            headers: vec![],
            der: rest.to_vec(),
        })
    } else {
        match text(rest) {
            Some(t) => t.to_string(),
            None => return,
        }
    };
    let deny = deny_list();
    match parse_csr(&csr_text) {
        Ok(names) => {
            match validate_csr(&csr_text, &names.common_name, deny) {
                Ok(valid) => {
                    assert_eq!(valid, names);
                    assert!(!deny.is_denied(&names.common_name));
                    assert!(names.dns_names.iter().all(|n| !deny.is_denied(n)));
                }
                Err(CsrError::Denied(name)) => assert!(deny.is_denied(&name)),
                Err(other) => panic!("a parsed CSR refused for its own CN: {other}"),
            }
            let stranger = format!("{}x", names.common_name);
            assert!(matches!(
                validate_csr(&csr_text, &stranger, deny),
                Err(CsrError::CommonNameMismatch { .. })
            ));
        }
        Err(e) => {
            let _ = e.to_string();
            assert_eq!(validate_csr(&csr_text, "n1.example.net", deny), Err(e));
        }
    }
}

/// PEM decoding and Go's legacy PEM encryption. Mode byte even: the rest is PEM
/// text, decoded, re-encoded, and decrypted with a fixed password (a block that
/// decrypts re-encrypts to the same ciphertext); odd: the rest is
/// `iv[16] ‖ password length ‖ password ‖ plaintext`, which must round-trip.
pub fn pem_decrypt(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        let Some(t) = text(rest) else { return };
        let Some(block) = pem::decode(t) else { return };
        let again = pem::decode(&pem::encode(&block)).expect("our own PEM decodes");
        assert_eq!(again.label, block.label);
        assert_eq!(again.der, block.der);
        if block
            .headers
            .iter()
            .all(|(k, v)| !k.contains("-----") && !v.contains("-----"))
        {
            assert_eq!(again, block);
        }
        let password = [0x5au8; 32];
        if let Ok(plain) = decrypt_pem_block(&block, &password) {
            let iv_hex = block
                .header("DEK-Info")
                .and_then(|v| v.split_once(','))
                .map(|(_, iv)| iv)
                .expect("a decrypted block has a DEK-Info IV");
            let iv: [u8; 16] = hex::decode(iv_hex)
                .ok()
                .and_then(|v| v.try_into().ok())
                .expect("a 16-byte IV");
            let encrypted = encrypt_pem_block(&plain, &password, iv);
            assert_eq!(pem::decode(&encrypted).expect("PEM").der, block.der);
        }
        return;
    }
    if rest.len() < 17 {
        return;
    }
    let iv: [u8; 16] = rest[..16].try_into().expect("16 bytes");
    let password_len = usize::from(rest[16] % 64).min(rest.len() - 17);
    let password = &rest[17..17 + password_len];
    let plain = &rest[17 + password_len..];
    let encrypted = encrypt_pem_block(plain, password, iv);
    let block = pem::decode(&encrypted).expect("our own encrypted PEM decodes");
    assert_eq!(block.label, "RSA PRIVATE KEY");
    assert_eq!(block.der.len(), (plain.len() / 16 + 1) * 16);
    assert_eq!(decrypt_pem_block(&block, password).as_deref(), Ok(plain));
}

/// Provisioning JWT verification at [`NOW`] against an ed25519 and an RSA key.
/// Mode byte 0–3: the rest is the token; 4–6: the rest is the claims, signed
/// EdDSA; 7: signed RS256 (so mutated claims get past the signature).
/// What verifies obeys every rule of choria-io/tokens and serializes for the
/// helper and back unchanged.
pub fn provisioning_jwt(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let token = match mode % 8 {
        0..=3 => match text(rest) {
            Some(t) => t.to_string(),
            None => return,
        },
        4..=6 => forge_jws("EdDSA", rest),
        _ => forge_jws("RS256", rest),
    };
    let (ed, rsa) = verify_keys();
    for key in [ed, rsa] {
        let claims = match verify_provisioning_token(&token, key, NOW) {
            Ok(claims) => claims,
            Err(e) => {
                let _ = e.to_string();
                continue;
            }
        };
        let s = &claims.standard;
        assert!(s.purpose == PROVISIONING_PURPOSE || s.sub == PROVISIONING_PURPOSE);
        assert!(!claims.ou.is_empty());
        assert!(s.exp.is_none_or(|exp| NOW < exp));
        assert!(s.nbf.is_none_or(|nbf| nbf <= NOW));
        if !s.tcs.is_empty() {
            assert!(s.iss.starts_with("C-"));
            let issexp = s.issexp.expect("a chained token has issexp");
            assert!(NOW < s.exp.map_or(issexp, |e| e.min(issexp)));
        }
        let shown = format!("{claims:?}");
        for secret in [&claims.cht, &claims.chpwd] {
            if secret.len() >= 8 && !claims.chu.contains(secret.as_str()) {
                assert!(!shown.contains(secret.as_str()), "a secret claim in Debug");
            }
        }
        let value = serde_json::to_value(&claims).expect("claims serialize for the helper");
        let back: crate::crypto::jwt::ProvisioningClaims =
            serde_json::from_value(value).expect("and deserialize");
        assert_eq!(back, claims);
    }
}

/// The ed25519 signing key the helper-output target signs server JWTs with, loaded
/// through [`Keys::load`] from a seed file that is removed once read.
fn server_keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("choria-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temporary directory");
        let seed = dir.join("signer.seed");
        std::fs::write(&seed, hex::encode(ED_SEED)).expect("seed file");
        let mut config = Config::defaults(Path::new("fuzz.yaml"));
        config.features.ed25519 = true;
        config.features.jwt = true;
        config.jwt_verify_cert = hex::encode(ed_key().public_key().as_ref());
        config.jwt_signing_key = seed.display().to_string();
        let keys = Keys::load(&config).expect("fuzz keys load");
        let _ = std::fs::remove_dir_all(&dir);
        keys
    })
}

/// Helper output as the provisioner decodes it, then the server JWT built from it
/// (`ed25519` feature) through the real `Keys::server_jwt`: the token verifies
/// with our key, names the node, has collectives and lives more than an hour.
pub fn helper_output(data: &[u8]) {
    let output = match HelperOutput::decode(data) {
        Ok(output) => output,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let node = Ed25519Info {
        public_key: hex::encode([9u8; 32]),
        directory: "/etc/choria".into(),
        signature: String::new(),
    };
    let signed = match server_keys().server_jwt("n1.example.net", Some(&node), &output) {
        Ok(signed) => signed,
        Err(outcome) => {
            let _ = outcome.to_string();
            return;
        }
    };
    let claims = verify_jws(&signed.token, &verify_keys().0).expect("our server JWT verifies");
    let claims: ServerClaims = serde_json::from_slice(&claims).expect("our claims decode");
    assert_eq!(
        claims, signed.claims,
        "the claims audited are the claims signed"
    );
    assert_eq!(claims.identity, "n1.example.net");
    assert_eq!(claims.standard.public_key, node.public_key);
    assert!(!claims.collectives.is_empty());
    let (iat, exp) = (
        claims.standard.iat.expect("iat"),
        claims.standard.exp.expect("exp"),
    );
    assert!(
        exp == i64::MAX || exp - iat > 3600,
        "validity {}",
        exp - iat
    );
}

/// The `gen25519` signature check and the key transport. Mode byte 0: the rest is
/// `public key hex \n nonce \n signature hex`; 1: the rest is the node's
/// `ecdh_public`; 2: the rest is the helper's key PEM, encrypted for a real X25519
/// key, which must decrypt to the same DER.
pub fn nonce_ecdh(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Some(t) = text(rest) else { return };
    match mode % 3 {
        0 => {
            let mut parts = t.splitn(3, '\n');
            let (public, nonce, sig) = (
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
            );
            if verify_nonce_signature(public, nonce, sig).is_ok() {
                let other = format!("{nonce}x");
                assert!(verify_nonce_signature(public, &other, sig).is_err());
            }
        }
        1 => {
            let key_pem = pem::encode(&Block {
                label: "PRIVATE KEY".into(),
                headers: vec![],
                der: b"fuzz key".to_vec(),
            });
            if let Ok((encrypted, ours)) = encrypt_key_for_node(&key_pem, t) {
                assert_eq!(hex::decode(t).ok().map(|k| k.len()), Some(32));
                assert_eq!(hex::decode(&ours).ok().map(|k| k.len()), Some(32));
                let block = pem::decode(&encrypted).expect("our encrypted PEM decodes");
                assert_eq!(block.der.len(), 16);
            }
        }
        _ => {
            use ring::agreement::{
                agree_ephemeral, EphemeralPrivateKey, UnparsedPublicKey, X25519,
            };
            let rng = ring::rand::SystemRandom::new();
            let node = EphemeralPrivateKey::generate(&X25519, &rng).expect("X25519 key");
            let node_public = hex::encode(node.compute_public_key().expect("public").as_ref());
            let Ok((encrypted, ours)) = encrypt_key_for_node(t, &node_public) else {
                assert!(pem::decode(t).is_none(), "a PEM key refused");
                return;
            };
            let ours = hex::decode(&ours).expect("hex");
            let block = pem::decode(&encrypted).expect("our encrypted PEM decodes");
            let plain = agree_ephemeral(node, &UnparsedPublicKey::new(&X25519, &ours), |s| {
                decrypt_pem_block(&block, s)
            })
            .expect("agreement");
            assert_eq!(plain, Ok(pem::decode(t).expect("PEM").der));
        }
    }
}

// ------------------------------------------------------------------------ local input

/// Key and token files: `jwt_signing_token`, `jwt_signing_key` and
/// `jwt_verify_cert` contents. Mode byte & 3: 0 raw bytes; 1, 2, 3: the rest is DER
/// in an `RSA PRIVATE KEY`, `PRIVATE KEY` or `PUBLIC KEY` PEM block. A signing key
/// signs a JWT its public key verifies, and `Debug` never shows the seed.
pub fn key_files(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let wrapped;
    let bytes = match mode & 3 {
        0 => rest,
        m => {
            let label = ["", "RSA PRIVATE KEY", "PRIVATE KEY", "PUBLIC KEY"][usize::from(m)];
            wrapped = pem::encode(&Block {
                label: label.into(),
                headers: vec![],
                der: rest.to_vec(),
            });
            wrapped.as_bytes()
        }
    };
    if let Some(t) = text(bytes) {
        if let Ok(token) = SigningToken::parse(t) {
            assert!(!token.jti.is_empty() && !token.public_key.is_empty() && !token.tcs.is_empty());
            let mut claims = ServerClaims {
                standard: StandardClaims {
                    jti: "fuzz".into(),
                    exp: Some(NOW),
                    ..StandardClaims::default()
                },
                ..ServerClaims::default()
            };
            let signer = SigningKey::from_ed25519_seed(&ED_SEED);
            add_chain_issuer_data(&mut claims, &token, &signer).expect("chain data");
            assert_eq!(claims.standard.issexp, Some(token.exp));
            assert!(claims.standard.exp.is_some_and(|e| e <= token.exp.max(NOW)));
            assert!(claims.standard.tcs.starts_with(&token.tcs));
        }
    }
    if let Ok(key) = SigningKey::from_file_contents(bytes, "fuzz.key") {
        let shown = format!("{key:?}");
        let verify = match &key {
            SigningKey::Ed25519(pair) => {
                let seed = bytes.trim_ascii().to_ascii_lowercase();
                assert!(!shown.contains(std::str::from_utf8(&seed).expect("hex")));
                VerifyKey::Ed25519(pair.public_key().as_ref().try_into().expect("32 bytes"))
            }
            SigningKey::Rsa(pair) => {
                VerifyKey::from_der(pair.public().as_ref()).expect("our public key")
            }
        };
        let token = key
            .sign_jwt(&serde_json::json!({"purpose": "fuzz"}))
            .expect("signing");
        verify_jws(&token, &verify).expect("a token we sign verifies");
    }
    if let Ok(key) = VerifyKey::from_file_contents(bytes) {
        let _ = format!("{key:?}");
        match &key {
            VerifyKey::Ed25519(k) => {
                assert_eq!(VerifyKey::from_hex(&hex::encode(k)), Ok(key.clone()))
            }
            VerifyKey::Rsa(der) => assert_eq!(VerifyKey::from_der(der), Ok(key.clone())),
        }
    }
}

/// Hex and KSUID ids: hex round-trips; a KSUID decodes to the time it was made
/// for; KSUIDs sort as their bytes do.
pub fn ids(data: &[u8]) {
    if let Some(t) = text(data) {
        if let Ok(bytes) = hex::decode(t) {
            assert_eq!(hex::encode(&bytes), t.to_ascii_lowercase());
        }
        if let Some(time) = ksuid_time(t) {
            assert!((KSUID_EPOCH..=KSUID_EPOCH + u64::from(u32::MAX)).contains(&time));
        }
    }
    let ksuid = |b: &[u8]| -> (String, u64) {
        let ts = u32::from_be_bytes(b[..4].try_into().expect("4 bytes"));
        let payload: [u8; 16] = b[4..20].try_into().expect("16 bytes");
        let time = KSUID_EPOCH + u64::from(ts);
        let id = ksuid_from(time, payload);
        assert_eq!(id.len(), 27);
        assert_eq!(ksuid_time(&id), Some(time));
        (id, time)
    };
    if data.len() >= 40 {
        let (a, b) = (&data[..20], &data[20..40]);
        assert_eq!(ksuid(a).0.cmp(&ksuid(b).0), a.cmp(b));
    } else if data.len() >= 20 {
        ksuid(&data[..20]);
    }
}

/// RPM version comparison is a total order: reflexive, antisymmetric, transitive,
/// and "equal" versions compare alike with everything. The input is up to three
/// versions separated by newlines.
pub fn rpm_version(data: &[u8]) {
    use std::cmp::Ordering::*;
    let Some(t) = text(data) else { return };
    let mut parts = t.splitn(3, '\n');
    let v = [
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
    ];
    for a in v {
        assert_eq!(version::compare(a, a), Equal, "{a:?}");
        for b in v {
            let ab = version::compare(a, b);
            assert_eq!(version::compare(b, a), ab.reverse(), "{a:?} {b:?}");
            for c in v {
                let (bc, ac) = (version::compare(b, c), version::compare(a, c));
                if ab != Greater && bc != Greater {
                    assert_ne!(ac, Greater, "{a:?} <= {b:?} <= {c:?}");
                }
                if ab == Equal {
                    assert_eq!(ac, bc, "{a:?} == {b:?} vs {c:?}");
                }
            }
        }
    }
}

/// `choria.cfg` lines and the typed client configuration built from them.
pub fn client_config(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let mut raw = BTreeMap::new();
    let unparsed = parse_lines(t, "", &mut raw);
    let lines = t.lines().count();
    assert!(unparsed.iter().all(|&n| (1..=lines).contains(&n)));
    for (key, value) in &raw {
        assert!(!key.is_empty() && key.trim_end() == key, "{key:?}");
        assert!(
            !value.is_empty() && value.trim_start() == value,
            "{value:?}"
        );
    }
    let mut plugin = BTreeMap::new();
    assert_eq!(parse_lines(t, "plugin.fuzz", &mut plugin), unparsed);
    assert_eq!(plugin.len(), raw.len());
    // An identity is always given: the default one would ask the resolver.
    raw.entry("identity".into())
        .or_insert_with(|| "fuzz.example.net".into());
    // The same file with another NATS password must print the same `Debug`.
    let mut other_raw = raw.clone();
    if let Some(pass) = other_raw.get_mut("plugin.nats.pass") {
        *pass = format!("{pass}-other");
    }
    let config = match ClientConfig::from_raw(Path::new("fuzz.cfg"), raw, vec![], vec![]) {
        Ok(config) => config,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let _ = config.tls_files();
    for url in &config.middleware_hosts {
        let _ = broker_host_port(url);
    }
    let _ = config.rpc_timeout(Duration::from_secs(20));
    let other = ClientConfig::from_raw(Path::new("fuzz.cfg"), other_raw, vec![], vec![])
        .expect("the password does not decide validity");
    assert_eq!(
        format!("{other:?}"),
        format!("{config:?}"),
        "the NATS password shows in Debug"
    );
}

/// The provisioner YAML: loading never panics; a configuration that loads prints an
/// effective YAML that loads again to the same settings, without its secrets.
/// Inputs naming a device, `/proc` or `/sys` file or a big file are skipped: the
/// validator reads the files a configuration names.
pub fn config_yaml(data: &[u8]) {
    if names_special_files(data) {
        return;
    }
    let path = Path::new("/nonexistent/fuzz.yaml");
    let loaded = match Config::from_yaml(path, data) {
        Ok(loaded) => loaded,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let c = &loaded.config;
    let shown = c.effective_yaml();
    let mut other = c.clone();
    for secret in [&mut other.token, &mut other.broker_provisioning_password] {
        if !secret.is_empty() {
            *secret = Secret::new("another secret");
        }
    }
    assert_eq!(other.effective_yaml(), shown, "a secret's value shows");
    let again = Config::from_yaml(path, shown.as_bytes())
        .unwrap_or_else(|e| panic!("the effective YAML does not load: {e}\n{shown}"))
        .config;
    let close =
        |a: Duration, b: Duration| a.abs_diff(b) <= Duration::from_millis(1) + a / 1_000_000;
    assert!(close(again.interval, c.interval));
    assert!(close(again.helper_timeout, c.helper_timeout));
    assert!(close(again.csr_reply_grace, c.csr_reply_grace));
    assert!(close(again.shutdown_timeout, c.shutdown_timeout));
    assert!(close(again.server_jwt_validity, c.server_jwt_validity));
    assert_eq!(again.workers, c.workers);
    assert_eq!(again.logfile, c.logfile);
    assert_eq!(again.loglevel, c.loglevel);
    assert_eq!(again.helper, c.helper);
    assert_eq!(again.lifecycle_component, c.lifecycle_component);
    assert_eq!(again.site, c.site);
    assert_eq!(again.monitor_port, c.monitor_port);
    assert_eq!(again.cert_deny_list, c.cert_deny_list);
    assert_eq!(again.jwt_verify_cert, c.jwt_verify_cert);
    assert_eq!(again.jwt_signing_key, c.jwt_signing_key);
    assert_eq!(again.jwt_signing_token, c.jwt_signing_token);
    assert_eq!(again.features, c.features);
    assert_eq!(again.leader_election, c.leader_election);
    assert_eq!(again.upgrades_repository, c.upgrades_repository);
}

/// True when a string of the YAML names something the validator must not read in a
/// fuzzing loop: a device, FIFO or socket, anything under `/dev`, `/proc` or `/sys`,
/// or a file over 1 MiB.
fn names_special_files(data: &[u8]) -> bool {
    fn walk(v: &serde_yaml::Value) -> bool {
        use serde_yaml::Value;
        match v {
            Value::String(s) => special(s),
            Value::Sequence(items) => items.iter().any(walk),
            Value::Mapping(map) => map.iter().any(|(k, v)| walk(k) || walk(v)),
            Value::Tagged(t) => walk(&t.value),
            _ => false,
        }
    }
    fn special(s: &str) -> bool {
        let Ok(path) = std::fs::canonicalize(s.trim()) else {
            return false;
        };
        if ["/dev", "/proc", "/sys"]
            .iter()
            .any(|p| path.starts_with(p))
        {
            return true;
        }
        match std::fs::metadata(&path) {
            Ok(m) => !(m.is_dir() || (m.is_file() && m.len() <= 1024 * 1024)),
            Err(_) => false,
        }
    }
    match serde_yaml::from_slice::<serde_yaml::Value>(data) {
        Ok(v) => walk(&v),
        Err(_) => false,
    }
}

/// 2562047 hours: Go's `time.Duration` maximum in whole hours.
const GO_MAX_SECONDS: u64 = 2_562_047 * 3600;

/// Choria durations: what parses is in range, and what we print for it parses back
/// to it (within the millisecond that printing keeps).
pub fn duration(data: &[u8]) {
    let round_trip = |d: Duration| {
        let shown = format_duration(d);
        let back = parse_duration(&shown)
            .unwrap_or_else(|e| panic!("{d:?} printed as {shown:?} does not parse: {e}"));
        let slack = Duration::from_millis(1) + d / 1_000_000_000;
        assert!(back.abs_diff(d) <= slack, "{d:?} → {shown:?} → {back:?}");
    };
    if let Some(t) = text(data) {
        if let Ok(d) = parse_duration(t) {
            assert!(d <= Duration::from_secs(1_000_000_000_000_000), "{d:?}");
            round_trip(d);
        }
    }
    if data.len() >= 12 {
        // Below Go's largest duration (2562047h, about 292 years).
        let secs = u64::from_le_bytes(data[..8].try_into().expect("8 bytes")) % GO_MAX_SECONDS;
        let nanos = u32::from_le_bytes(data[8..12].try_into().expect("4 bytes")) % 1_000_000_000;
        round_trip(Duration::new(secs, nanos));
    }
}

/// Shell-word splitting of the `helper` line: the words, each single-quoted and
/// joined by spaces, split back into the same words.
pub fn shell_words(data: &[u8]) {
    let Some(t) = text(data) else { return };
    match shell_words::split(t) {
        Ok(words) => {
            assert!(!words.is_empty());
            let quoted: Vec<String> = words
                .iter()
                .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
                .collect();
            assert_eq!(shell_words::split(&quoted.join(" ")), Ok(words));
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// The election's JetStream replies: a PubAck's revision is positive, a bucket's TTL
/// is within 1 s and 1 h.
pub fn election_replies(data: &[u8]) {
    if let Ok(revision) = parse_pub_ack(data) {
        assert!(revision > 0);
    }
    match parse_bucket_ttl(data, "CHORIA_LEADER_ELECTION") {
        Ok(ttl) => {
            assert!((Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&ttl));
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

/// Another provisioner's heartbeat or handoff (`choria::peers`), read as hostile:
/// whatever parses is valid (identities by the identity rule, the site ours, the
/// period in range) and round-trips through its own encoding; every refusal has a
/// known metric label and a message.
pub fn peer_messages(data: &[u8]) {
    match Heartbeat::parse(data, "lon") {
        Ok(b) => {
            assert_eq!(b.site, "lon");
            assert!(HEARTBEAT_MS.contains(&b.every_ms));
            assert!(crate::choria::identity::Identity::parse(b.identity.as_str()).is_ok());
            assert_eq!(Heartbeat::parse(&b.to_json(), "lon"), Ok(b));
        }
        Err(e) => {
            assert!(PEER_REFUSALS.contains(&e.reason()));
            assert!(!e.to_string().is_empty());
        }
    }
    match Handoff::parse(data) {
        Ok(h) => assert_eq!(Handoff::parse(&h.to_json()), Ok(h)),
        Err(e) => assert!(PEER_REFUSALS.contains(&e.reason())),
    }
}

// ------------------------------------------------------------------------ seeds

/// One starting input of a target's corpus.
#[derive(Debug, Clone)]
pub struct Seed {
    /// The target it is for.
    pub target: &'static str,
    /// A file name for it.
    pub name: String,
    /// The bytes.
    pub data: Vec<u8>,
}

fn with_mode(mode: u8, rest: &[u8]) -> Vec<u8> {
    let mut v = vec![mode];
    v.extend_from_slice(rest);
    v
}

/// The starting corpus, made with the crate's own encoders and the test fixtures
/// (deterministic: fixed ids, times and keys). `fuzz/seeds/` holds these files.
pub fn seeds() -> Vec<Seed> {
    let mut out = Vec::new();
    let mut add = |target: &'static str, name: &str, data: Vec<u8>| {
        out.push(Seed {
            target,
            name: name.to_string(),
            data,
        })
    };

    // Wire: v1 and v2 requests and replies.
    let caller_jwt = forge_jws(
        "EdDSA",
        br#"{"callerid":"choria=provisioner","purpose":"choria_client_id","exp":2082758400}"#,
    );
    let v2 = Credentials::ed25519(&ED_SEED, &caller_jwt, true).expect("credentials");
    let configure = RpcRequestBody::new(
        "choria_provision",
        "configure",
        serde_json::json!({"token": "s3cret", "config": "{\"a\":\"b\"}", "ca": "", "certificate": ""}),
    );
    let inventory = RpcRequestBody::new("rpcutil", "inventory", serde_json::json!({}));
    for (protocol, creds, tag) in [
        (Protocol::V1, Credentials::Insecure, "v1"),
        (Protocol::V2, v2, "v2"),
    ] {
        for (action, body) in [("inventory", &inventory), ("configure", &configure)] {
            let request_id = match protocol {
                Protocol::V1 => "6f0c3b9e2a4d4f1c8b7e5d3a2c1b0f9e".to_string(),
                Protocol::V2 => ksuid_from(NOW as u64, [3; 16]),
            };
            let (filter, encoded) = (Filter::agent(&body.agent), body.encode());
            let spec = RequestSpec {
                agent: &body.agent,
                collective: "provisioning",
                caller_id: "choria=provisioner",
                sender_id: "provisioner.example.net",
                ttl: 60,
                filter: &filter,
                body: &encoded,
                request_id: Some(&request_id),
                time_ns: Some(NOW * 1_000_000_000),
                seen_by: Some("nats://broker.example.net:4222"),
            };
            let reply_to = protocol::reply_prefix("provisioning", spec.caller_id)
                .expect("a valid caller id makes a valid subject")
                .child("1")
                .expect("a valid reply subject");
            let reply_to = reply_to.as_str();
            let (_, request) =
                protocol::encode_request(&spec, reply_to, &creds, protocol).expect("request");
            let decoded = protocol::decode_request(&request).expect("our request decodes");
            let reply_body = RpcReply::new(
                action,
                StatusCode::Ok,
                "OK",
                serde_json::json!({"ok": true}),
            )
            .encode();
            let reply = protocol::encode_reply(
                &decoded,
                "n1.example.net",
                &reply_body,
                NOW * 1_000_000_000,
                Some("nats://broker.example.net:4222"),
            );
            let pong = protocol::encode_reply(
                &decoded,
                "n2.example.net",
                protocol::DISCOVERY_REPLY,
                0,
                None,
            );
            add(
                "decode_request",
                &format!("{tag}_{action}_request"),
                request.clone(),
            );
            add(
                "decode_reply",
                &format!("{tag}_{action}_reply"),
                reply.clone(),
            );
            add(
                "decode_transport",
                &format!("{tag}_{action}_request"),
                request,
            );
            add("decode_transport", &format!("{tag}_{action}_reply"), reply);
            add(
                "decode_reply",
                &format!("{tag}_discovery_reply"),
                pong.clone(),
            );
            add("decode_transport", &format!("{tag}_discovery_reply"), pong);
            add("rpc_body", &format!("{action}_request"), body.encode());
            add("rpc_body", &format!("{action}_reply"), reply_body);
        }
    }

    // Request fields for the round trip: v1 and v2 inventory requests.
    for (mode, tag) in [(0u8, "v1"), (1, "v2")] {
        let mut fields = vec![mode];
        fields.extend_from_slice(&(60u64 << 1).to_le_bytes());
        fields.extend_from_slice(&(NOW * 1_000_000_000).to_le_bytes());
        let id = match mode {
            0 => "6f0c3b9e2a4d4f1c8b7e5d3a2c1b0f9e".to_string(),
            _ => ksuid_from(NOW as u64, [3; 16]),
        };
        let text = format!(
            "rpcutil\0provisioning\0provisioner.example.net\0choria=provisioner\0{id}\0{}",
            String::from_utf8(inventory.encode()).expect("JSON")
        );
        fields.extend_from_slice(text.as_bytes());
        add("request_round_trip", &format!("{tag}_inventory"), fields);
    }

    // Lifecycle events.
    let startup = Event {
        protocol: "io.choria.lifecycle.v1.startup".into(),
        id: "0f5b2c8e-1d3a-4b6c-9e7f-2a1b3c4d5e6f".into(),
        identity: "n1.example.net".into(),
        component: "provision_mode_server".into(),
        timestamp: NOW,
        version: "0.29.4".into(),
        new_version: String::new(),
    };
    let shutdown = Event {
        protocol: "io.choria.lifecycle.v1.shutdown".into(),
        component: "provisioner".into(),
        ..startup.clone()
    };
    for target in ["lifecycle_event", "startup_identity"] {
        add(target, "startup_choria", startup.to_choria_json());
        add(target, "startup_cloudevent", startup.to_cloudevent_json());
        add(target, "shutdown_cloudevent", shutdown.to_cloudevent_json());
        add(
            target,
            "startup_old_protocol",
            br#"{"protocol":"choria:lifecycle:startup:1","identity":"n1.example.net","component":"provision_mode_server","timestamp":1767225600,"version":"0.29.4"}"#.to_vec(),
        );
    }

    // CSRs: the fixtures as text (mode 1) and as DER (mode 0).
    for (name, csr_pem) in [
        ("n1", include_str!("../tests/fixtures/csr-n1.pem")),
        ("n1_sans", include_str!("../tests/fixtures/csr-n1-sans.pem")),
        (
            "n1_denied_san",
            include_str!("../tests/fixtures/csr-n1-denied-san.pem"),
        ),
        ("no_cn", include_str!("../tests/fixtures/csr-no-cn.pem")),
        (
            "privileged",
            include_str!("../tests/fixtures/csr-privileged.pem"),
        ),
    ] {
        add(
            "csr",
            &format!("{name}_pem"),
            with_mode(1, csr_pem.as_bytes()),
        );
        let der = pem::decode(csr_pem).expect("fixture CSR").der;
        add("csr", &format!("{name}_der"), with_mode(0, &der));
    }

    // PEM: an encrypted key (mode 0) and the plaintext form (mode 1).
    let encrypted = encrypt_pem_block(b"a private key", &[0x5a; 32], [1; 16]);
    add(
        "pem_decrypt",
        "encrypted_key",
        with_mode(0, encrypted.as_bytes()),
    );
    add(
        "pem_decrypt",
        "rsa_key",
        with_mode(0, RSA_KEY_PEM.as_bytes()),
    );
    let mut plain = vec![1u8; 16];
    plain.push(32);
    plain.extend_from_slice(&[0x5a; 32]);
    plain.extend_from_slice(b"a private key");
    add("pem_decrypt", "encrypt_round_trip", with_mode(1, &plain));

    // Provisioning JWTs: valid EdDSA and RS256 tokens, a chained one, broken ones,
    // and claims for the signing modes.
    let claims = br#"{"cht":"s3cret-token","chs":true,"chu":"nats://broker.example.net:4222","chpwd":"s3cret-password","extensions":{"site":"x"},"ou":"choria","v2":true,"purpose":"choria_provisioning","iss":"Choria Tests","exp":2082758400,"nbf":1767225600,"iat":1767225600,"jti":"37dGasRK6DuhIamYovPgATEaXBV"}"#;
    let chained = br#"{"cht":"t","purpose":"choria_provisioning","tcs":"abcd.ef01","iss":"C-37aRTCyLZhA33NCjazjSUUbfD8d.3aa7","issexp":2082758400,"exp":2082758400,"aud":["a","b"]}"#;
    let expired = br#"{"purpose":"choria_provisioning","exp":1}"#;
    add(
        "provisioning_jwt",
        "eddsa",
        with_mode(0, forge_jws("EdDSA", claims).as_bytes()),
    );
    add(
        "provisioning_jwt",
        "rs256",
        with_mode(0, forge_jws("RS256", claims).as_bytes()),
    );
    add(
        "provisioning_jwt",
        "chained",
        with_mode(0, forge_jws("EdDSA", chained).as_bytes()),
    );
    add(
        "provisioning_jwt",
        "expired",
        with_mode(0, forge_jws("EdDSA", expired).as_bytes()),
    );
    add(
        "provisioning_jwt",
        "alg_none",
        with_mode(0, forge_jws("none", claims).as_bytes()),
    );
    add(
        "provisioning_jwt",
        "alg_hs256",
        with_mode(0, forge_jws("HS256", claims).as_bytes()),
    );
    add("provisioning_jwt", "claims_eddsa", with_mode(4, claims));
    add("provisioning_jwt", "claims_chained", with_mode(5, chained));
    add("provisioning_jwt", "claims_rs256", with_mode(7, claims));

    // Key and token files.
    let signing_token = forge_jws(
        "EdDSA",
        br#"{"callerid":"choria=provisioner","purpose":"choria_client_id","tcs":"7156b9014eb1cf33","public_key":"3aa7308f0a2e6342498bc8a8f8c2a9211cd110d7a61dcb4420ab9cb5838604ec","exp":2082758400,"jti":"37aRTCyLZhA33NCjazjSUUbfD8d"}"#,
    );
    add(
        "key_files",
        "signing_token",
        with_mode(0, signing_token.as_bytes()),
    );
    add(
        "key_files",
        "seed",
        with_mode(0, format!("{}\n", hex::encode(ED_SEED)).as_bytes()),
    );
    add(
        "key_files",
        "ed25519_public",
        with_mode(0, hex::encode([9; 32]).as_bytes()),
    );
    for (name, file) in [
        (
            "rsa_pkcs1",
            include_str!("../tests/fixtures/rsa2048-pkcs1.pem"),
        ),
        (
            "rsa_pkcs8",
            include_str!("../tests/fixtures/rsa2048-pkcs8.pem"),
        ),
        ("rsa_public", RSA_PUBLIC_PEM),
        (
            "rsa_certificate",
            include_str!("../tests/fixtures/test-rsa-signer.crt"),
        ),
    ] {
        add(
            "key_files",
            &format!("{name}_pem"),
            with_mode(0, file.as_bytes()),
        );
        let block = pem::decode(file).expect("fixture PEM");
        let mode = match block.label.as_str() {
            "RSA PRIVATE KEY" => 1,
            "PRIVATE KEY" => 2,
            _ => 3,
        };
        add(
            "key_files",
            &format!("{name}_der"),
            with_mode(mode, &block.der),
        );
    }

    // Helper output.
    add(
        "helper_output",
        "configure",
        br#"{"defer":false,"msg":"","certificate":"","ca":"","key":"","ssldir":"/etc/choria/ssl","configuration":{"plugin.choria.middleware_hosts":"nats://broker.example.net:4222","collectives":"a, b,,c","plugin.security.provider":"choria"},"server_claims":{"ou":"site1","exp":157680000,"collectives":["c1"],"pub_subjects":["x.>"],"permissions":{"submission":true,"streams":true}},"action_policies":{"default.policy":"policy_default deny"},"opa_policies":{},"upgrade":""}"#.to_vec(),
    );
    add(
        "helper_output",
        "defer",
        br#"{"Defer":true,"Msg":"not yet","server_claims":null,"configuration":null}"#.to_vec(),
    );
    add(
        "helper_output",
        "absolute_exp",
        br#"{"configuration":{"plugin.security.provider":"file"},"server_claims":{"exp":2082758400}}"#.to_vec(),
    );

    // Nonce signature (the spec's vector) and key transport.
    add(
        "nonce_ecdh",
        "nonce_signature",
        with_mode(0, b"b012ef1e447947b3cdaf3f6e9459342407e24e597ec5b4ceccac8ab5cb03a6e9\n6f0c3b9e2a4d4f1c8b7e5d3a2c1b0f9e\ned441a6ca0a293309266a2e30a72b8cc19c6c8b4e3816a683398f2bc1cc1c15c0eaf07ff94022e68f156da33aaf4e7c3eeea5a18e6b1a2f54fa5d7745afaec09"),
    );
    add(
        "nonce_ecdh",
        "ecdh_public",
        with_mode(
            1,
            b"88a9a0ed27dc93c29466ea2bef99e078342b27e7a1d789fc35a9131f86c3a022",
        ),
    );
    add(
        "nonce_ecdh",
        "key_pem",
        with_mode(
            2,
            include_str!("../tests/fixtures/rsa2048-pkcs1.pem").as_bytes(),
        ),
    );

    // Ids.
    add("ids", "ksuid", b"37dGasRK6DuhIamYovPgATEaXBV".to_vec());
    add("ids", "hex", b"6f0c3b9e2a4d4f1c8b7e5d3a2c1b0f9E".to_vec());
    add("ids", "two_ksuids", (0u8..40).collect());

    // Versions, configuration, durations, shell words, election replies.
    add(
        "rpm_version",
        "three",
        b"0.29.4\n1:0.30.0-1.el8\n0.30.0~rc1^git2".to_vec(),
    );
    add(
        "rpm_version",
        "equal_spellings",
        b"0.29.04\n0:0.29.4-\n0.29_4".to_vec(),
    );
    add(
        "client_config",
        "choria_cfg",
        b"# provisioner\nidentity = provisioner.example.net\nplugin.choria.middleware_hosts = broker1:4222, nats://broker2:4222\nplugin.security.provider = file\nplugin.security.file.certificate = /etc/choria/cert.pem\nplugin.nats.user = provisioner\nplugin.nats.pass = s3cret-password\ndiscovery_timeout = 2\nplugin.choria.network.connect_timeout = 5s\nttl = 60\nplugin.choria.use_srv = false\ncollectives = provisioning\nnot a setting\n".to_vec(),
    );
    add(
        "config_yaml",
        "provisioner_yaml",
        b"workers: 4\ninterval: 1m\nlogfile: discard\nloglevel: info\nhelper: /bin/true --site 'a b'\nhelper_timeout: 10s\ncsr_reply_grace: 1.5s\ntoken: s3cret-token\nsite: testing\nmonitor_port: 8080\nmonitor_host: 127.0.0.1\nbroker_provisioning_password: s3cret-password\ncert_deny_list: ['/\\.admin$/', 'root']\nserver_jwt_validity: 1y\nleader_election: true\nshutdown_timeout: 1.5s\nfeatures:\n  PKI: yes\n  upgrades: true\nupgrades_optional: on\n".to_vec(),
    );
    add("config_yaml", "ed25519", b"helper: /bin/true\nfeatures: {ed25519: true}\njwt_verify_cert: 3aa7308f0a2e6342498bc8a8f8c2a9211cd110d7a61dcb4420ab9cb5838604ec\njwt_signing_key: /nonexistent/seed\nunknown_key: 1\n".to_vec());
    for (name, d) in [
        ("go", "1h30m10.5s"),
        ("days", "1.5d"),
        ("months", "2M"),
        ("micro", "250µs"),
    ] {
        add("duration", name, d.as_bytes().to_vec());
    }
    add(
        "shell_words",
        "helper_line",
        br#"/usr/bin/helper --site 'a b' "c \"d\" \$e" f\ g"#.to_vec(),
    );
    add(
        "election_replies",
        "pub_ack",
        br#"{"stream":"KV_CHORIA_LEADER_ELECTION","seq":5}"#.to_vec(),
    );
    add(
        "election_replies",
        "wrong_sequence",
        br#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 7"}}"#
            .to_vec(),
    );
    add(
        "election_replies",
        "stream_info",
        br#"{"config":{"name":"KV_CHORIA_LEADER_ELECTION","max_age":10000000000,"max_msgs_per_subject":1}}"#.to_vec(),
    );
    let beat = Heartbeat {
        identity: crate::choria::identity::Identity::parse("p1.lon.example.net")
            .expect("a valid identity"),
        site: "lon".into(),
        incarnation: 42,
        sequence: 7,
        time: NOW as u64,
        every_ms: 2000,
        state: PeerState::Alive,
    };
    add("peer_messages", "heartbeat", beat.to_json());
    add(
        "peer_messages",
        "leaving",
        Heartbeat {
            state: PeerState::Leaving,
            ..beat.clone()
        }
        .to_json(),
    );
    add(
        "peer_messages",
        "handoff",
        Handoff {
            from: beat.identity.clone(),
            node: crate::choria::identity::Identity::parse("node-1.example.net")
                .expect("a valid identity"),
        }
        .to_json(),
    );
    add(
        "election_replies",
        "stream_error",
        br#"{"error":{"code":404,"err_code":10059,"description":"stream not found"}}"#.to_vec(),
    );
    out
}
