//! Fixed vectors from go-choria's `protocol/v1` and `protocol/v2`: the codec must produce go-choria's
//! bytes, not merely round-trip with itself.

use crate::choria::lifecycle;
use crate::choria::protocol::mcorpc::{RpcReply, RpcRequestBody};
use crate::choria::protocol::{self, Credentials, Filter, Layer, Protocol, Rejection, RequestSpec};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

const ID: &str = "5f2b9a0c3d4e4f6a8b7c1d2e3f405162";
const T0: i64 = 1_767_225_600;
const BROKER: &str = "nats://broker.example.net:4222";
const REQUEST_VECTOR: &str = include_str!("../../../tests/fixtures/v1_inventory_request.json");
const REPLY_VECTOR: &str = include_str!("../../../tests/fixtures/v1_inventory_reply.json");
const INVENTORY_REPLY: &str = r#"{"action":"inventory","statuscode":0,"statusmsg":"OK","data":{"agents":["choria_provision","choria_util","discovery","rpcutil"],"classes":[],"collectives":["provisioning"],"data_plugins":["choria","config_item","scout"],"facts":{"os":"linux"},"machines":[],"main_collective":"provisioning","version":"0.30.0","upgradable":false}}"#;

/// The spec borrows its filter and body: leaked, a few bytes per test, so that every
/// test can take it as it is.
fn inventory_spec(protocol: Protocol) -> RequestSpec<'static> {
    RequestSpec {
        agent: "rpcutil",
        collective: "provisioning",
        caller_id: "choria=provisioner.example.net",
        sender_id: "provisioner.example.net",
        ttl: 60,
        filter: Box::leak(Box::new(Filter::agent("rpcutil"))),
        body: RpcRequestBody::new("rpcutil", "inventory", serde_json::json!({}))
            .encode()
            .leak(),
        request_id: Some(match protocol {
            Protocol::V1 => ID,
            Protocol::V2 => "2z1Rk3cJ0bq8YVwX4mTn6PpLsAe",
        }),
        time_ns: Some(T0 * 1_000_000_000),
        seen_by: Some(BROKER),
    }
}

fn reply_subject() -> String {
    format!(
        "{}.{ID}",
        protocol::reply_prefix("provisioning", "choria=provisioner.example.net").unwrap()
    )
}

/// The secure layer of a transport: its `data`, base64-decoded, as JSON.
fn secure_layer(transport: &[u8]) -> serde_json::Value {
    let transport: serde_json::Value = serde_json::from_slice(transport).unwrap();
    let data = STANDARD
        .decode(transport["data"].as_str().unwrap())
        .unwrap();
    serde_json::from_slice(&data).unwrap()
}

#[test]
fn v1_request_is_byte_for_byte_the_worked_example() {
    assert_eq!(
        reply_subject(),
        "provisioning.reply.6079c8d10a2ceceb5904de01a22e9b41.5f2b9a0c3d4e4f6a8b7c1d2e3f405162"
    );
    let (id, payload) = protocol::encode_request(
        &inventory_spec(Protocol::V1),
        &reply_subject(),
        &Credentials::Insecure,
        Protocol::V1,
    )
    .unwrap();
    assert_eq!(id, ID);
    assert_eq!(String::from_utf8(payload).unwrap(), REQUEST_VECTOR);
}

#[test]
fn v1_reply_of_the_worked_example_decodes() {
    let reply = protocol::decode_reply(REPLY_VECTOR.as_bytes()).unwrap();
    assert_eq!(reply.protocol, Protocol::V1);
    assert_eq!(reply.request_id, ID);
    assert_eq!(reply.sender_id, "n1.example.net");
    assert_eq!(reply.agent, "rpcutil");
    assert_eq!(reply.time, T0 + 1);
    let body = RpcReply::decode(&reply.body).unwrap();
    assert_eq!(body.statuscode, 0);
    assert_eq!(body.data["version"], "0.30.0");
    assert_eq!(
        protocol::transport_sender(REPLY_VECTOR.as_bytes()).unwrap(),
        "n1.example.net"
    );
}

#[test]
fn v1_server_side_decodes_the_request_and_reproduces_the_reply() {
    let request = protocol::decode_request(REQUEST_VECTOR.as_bytes()).unwrap();
    assert_eq!(request.request_id, ID);
    assert_eq!(request.caller_id, "choria=provisioner.example.net");
    assert_eq!(request.reply_to, reply_subject());
    assert_eq!(request.filter.agent, ["rpcutil"]);
    assert_eq!(
        request.body,
        br#"{"agent":"rpcutil","action":"inventory","data":{}}"#
    );
    assert_eq!(
        request.validate_for_provisioning(Protocol::V1, T0 + 1),
        Ok(())
    );
    let reply = protocol::encode_reply(
        &request,
        "n1.example.net",
        INVENTORY_REPLY.as_bytes(),
        (T0 + 1) * 1_000_000_000,
        Some(BROKER),
    );
    assert_eq!(String::from_utf8(reply).unwrap(), REPLY_VECTOR);
}

#[test]
fn v1_discovery_reply_hash_matches_the_spec() {
    let mut spec = inventory_spec(Protocol::V1);
    let filter = Filter::agent("choria_provision");
    spec.agent = "discovery";
    spec.filter = &filter;
    spec.body = protocol::DISCOVERY_REQUEST;
    spec.request_id = Some("0a1b2c3d4e5f40718293a4b5c6d7e8f9");
    spec.time_ns = Some(1_767_225_590 * 1_000_000_000);
    let (_, payload) =
        protocol::encode_request(&spec, "r", &Credentials::Insecure, Protocol::V1).unwrap();
    let request = protocol::decode_request(&payload).unwrap();
    assert_eq!(request.body, b"ping", "the server base64-decodes cGluZw==");
    let reply = protocol::encode_reply(
        &request,
        "n1.example.net",
        b"pong",
        1_767_225_590 * 1_000_000_000,
        None,
    );
    let secure = secure_layer(&reply);
    assert_eq!(
        secure["message"],
        r#"{"protocol":"choria:reply:1","message":"pong","envelope":{"requestid":"0a1b2c3d4e5f40718293a4b5c6d7e8f9","senderid":"n1.example.net","agent":"discovery","time":1767225590}}"#
    );
    assert_eq!(
        secure["hash"],
        "H3E0I92buKw6M7NlcVHmdzcfGF8bzvLJQHGJ21SYXOs="
    );
}

#[test]
fn a_tampered_reply_fails_its_hash() {
    let transport: serde_json::Value = serde_json::from_str(REPLY_VECTOR).unwrap();
    let secure = STANDARD
        .decode(transport["data"].as_str().unwrap())
        .unwrap();
    let tampered = String::from_utf8(secure)
        .unwrap()
        .replace("0.30.0", "9.99.9");
    let forged = serde_json::json!({
        "protocol": "choria:transport:1",
        "data": STANDARD.encode(tampered),
        "headers": {"mc_sender": "n1.example.net"},
    });
    let err = protocol::decode_reply(forged.to_string().as_bytes()).unwrap_err();
    assert_eq!(err.layer, Layer::Secure);
    assert!(err.to_string().contains("hash does not match"), "{err}");
}

fn seed() -> [u8; 32] {
    let mut s = [0u8; 32];
    for (i, b) in s.iter_mut().enumerate() {
        *b = i as u8;
    }
    s
}

/// A client JWT whose claims say `callerid`; the node does not verify it.
const CALLER_JWT: &str =
    "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9.eyJjYWxsZXJpZCI6InByb3Zpc2lvbmVyX3NpZ25lciJ9.c2ln";

#[test]
fn v2_request_has_go_s_shape_and_a_verifiable_signature() {
    let creds = Credentials::ed25519(&seed(), CALLER_JWT, true).unwrap();
    let mut spec = inventory_spec(Protocol::V2);
    spec.caller_id = "provisioner_signer";
    let reply_to = protocol::reply_prefix("provisioning", "provisioner_signer")
        .unwrap()
        .to_string()
        + ".2z1Rk3cJ0bq8YVwX4mTn6PpLsAe";
    let (_, payload) = protocol::encode_request(&spec, &reply_to, &creds, Protocol::V2).unwrap();
    let transport: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(transport["protocol"], "io.choria.protocol.v2.transport");
    assert_eq!(transport["headers"]["reply"], reply_to.as_str());
    assert_eq!(transport["headers"]["sender"], "provisioner.example.net");
    let secure_bytes = STANDARD
        .decode(transport["data"].as_str().unwrap())
        .unwrap();
    let secure_text = String::from_utf8(secure_bytes.clone()).unwrap();
    assert!(
        secure_text
            .starts_with(r#"{"protocol":"io.choria.protocol.v2.secure_request","request":""#),
        "{secure_text}"
    );
    let secure: serde_json::Value = serde_json::from_slice(&secure_bytes).unwrap();
    assert_eq!(secure["caller"], CALLER_JWT);
    let request_bytes = STANDARD
        .decode(secure["request"].as_str().unwrap())
        .unwrap();
    let expected = format!(
        r#"{{"protocol":"io.choria.protocol.v2.request","message":"eyJhZ2VudCI6InJwY3V0aWwiLCJhY3Rpb24iOiJpbnZlbnRvcnkiLCJkYXRhIjp7fX0=","id":"2z1Rk3cJ0bq8YVwX4mTn6PpLsAe","sender":"provisioner.example.net","caller":"provisioner_signer","collective":"provisioning","agent":"rpcutil","ttl":60,"time":{},"filter":{{"fact":[],"cf_class":[],"agent":["rpcutil"],"identity":[],"compound":[]}}}}"#,
        T0 as i128 * 1_000_000_000
    );
    assert_eq!(String::from_utf8(request_bytes.clone()).unwrap(), expected);
    // Verified independently of our signer: ring's verifier with the seed's public key.
    let public = creds.ed25519_public_hex().unwrap();
    let public = (0..64)
        .step_by(2)
        .map(|i| u8::from_str_radix(&public[i..i + 2], 16).unwrap())
        .collect::<Vec<_>>();
    let signature = STANDARD
        .decode(secure["signature"].as_str().unwrap())
        .unwrap();
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, &public)
        .verify(&request_bytes, &signature)
        .expect("the signature verifies over the exact request bytes");

    let decoded = protocol::decode_request(&payload).unwrap();
    assert_eq!(decoded.protocol, Protocol::V2);
    assert_eq!(decoded.time, T0);
    assert_eq!(decoded.validate_for_provisioning(Protocol::V2, T0), Ok(()));
    assert_eq!(
        decoded.validate_for_provisioning(Protocol::V1, T0),
        Err(Rejection::Version(Protocol::V2)),
        "a v1 node drops a v2 request"
    );
    let reply = protocol::encode_reply(
        &decoded,
        "n1.example.net",
        INVENTORY_REPLY.as_bytes(),
        (T0 + 1) * 1_000_000_000,
        None,
    );
    let back = protocol::decode_reply(&reply).unwrap();
    assert_eq!(back.protocol, Protocol::V2);
    assert_eq!(back.request_id, "2z1Rk3cJ0bq8YVwX4mTn6PpLsAe");
    assert_eq!(back.body, INVENTORY_REPLY.as_bytes());
    assert_eq!(back.time, T0 + 1);
}

/// An insecure v1 `rpcutil#inventory` request as a node decodes it.
fn v1_inventory_request() -> protocol::DecodedRequest {
    let (_, payload) = protocol::encode_request(
        &inventory_spec(Protocol::V1),
        "r",
        &Credentials::Insecure,
        Protocol::V1,
    )
    .unwrap();
    protocol::decode_request(&payload).unwrap()
}

#[test]
fn a_provisioning_server_drops_what_go_drops() {
    let ok = v1_inventory_request();
    let check = |f: &dyn Fn(&mut protocol::DecodedRequest), now: i64| {
        let mut r = ok.clone();
        f(&mut r);
        r.validate_for_provisioning(Protocol::V1, now)
    };
    assert!(matches!(
        check(&|r| r.collective = "mcollective".into(), T0),
        Err(Rejection::Collective(_))
    ));
    assert!(matches!(
        check(&|r| r.ttl = 29, T0),
        Err(Rejection::Ttl(29))
    ));
    assert!(matches!(
        check(&|r| r.request_id = "abc".into(), T0),
        Err(Rejection::RequestId(_))
    ));
    assert!(matches!(
        check(&|_| {}, T0 + 60),
        Err(Rejection::Expired { .. })
    ));
    assert!(matches!(
        check(&|_| {}, T0 - 60),
        Err(Rejection::Expired { .. })
    ));
    assert_eq!(check(&|_| {}, T0 + 59), Ok(()));
}

/// Found by the `request_round_trip` fuzzer: `now + ttl` overflowed (a panic in debug
/// builds) for a TTL near `i64::MAX`; the window is computed without overflow.
#[test]
fn a_huge_ttl_or_time_is_checked_without_overflow() {
    let mut r = v1_inventory_request();
    r.ttl = i64::MAX;
    assert_eq!(r.validate_for_provisioning(Protocol::V1, T0), Ok(()));
    assert_eq!(r.validate_for_provisioning(Protocol::V1, 0), Ok(()));
    r.time = i64::MIN;
    assert_eq!(
        r.validate_for_provisioning(Protocol::V1, i64::MAX),
        Err(Rejection::Expired {
            time: i64::MIN,
            now: i64::MAX
        })
    );
}

#[test]
fn unknown_protocols_and_huge_payloads_are_typed_errors() {
    let e = protocol::decode_reply(br#"{"protocol":"choria:transport:9","data":""}"#).unwrap_err();
    assert_eq!(e.layer, Layer::Transport);
    let big = vec![b' '; 10 * 1024 * 1024];
    let e = protocol::decode_reply(&big).unwrap_err();
    assert!(e.to_string().contains("exceeds"), "{e}");
    let e =
        protocol::decode_reply(br#"{"protocol":"choria:transport:1","data":"%%%"}"#).unwrap_err();
    assert!(e.to_string().contains("not base64"), "{e}");
}

#[test]
fn lifecycle_events_in_both_formats() {
    let choria = br#"{"protocol":"io.choria.lifecycle.v1.startup","id":"3f6c1c2e-8a51-4c7e-9b0d-2f4b6a7c8d90","identity":"provisioner.example.net","component":"provisioner","timestamp":1767225600,"version":"0.16.0"}"#;
    let e = lifecycle::decode(choria).unwrap();
    assert_eq!(e.kind(), "startup");
    assert_eq!(e.identity, "provisioner.example.net");
    assert_eq!(
        e.to_choria_json(),
        choria.to_vec(),
        "our encoder writes the same bytes"
    );

    let cloud = br#"{"specversion":"1.0","id":"8e6a","source":"io.choria.lifecycle","type":"io.choria.lifecycle.v1.startup","datacontenttype":"application/json","subject":"n1.example.net","time":"2026-01-01T00:00:00Z","data":{"protocol":"io.choria.lifecycle.v1.startup","id":"8e6a","identity":"n1.example.net","component":"provision_mode_server","timestamp":1767225600,"version":"0.30.2"}}"#;
    assert_eq!(
        lifecycle::startup_identity(cloud).unwrap().as_deref(),
        Some("n1.example.net")
    );
    let legacy = br#"{"protocol":"choria:lifecycle:startup:1","identity":"n2","component":"provision_mode_server","timestamp":1}"#;
    assert_eq!(
        lifecycle::startup_identity(legacy).unwrap().as_deref(),
        Some("n2")
    );
    let alive = br#"{"protocol":"io.choria.lifecycle.v1.alive","identity":"n3","component":"provision_mode_server","timestamp":1}"#;
    assert_eq!(lifecycle::startup_identity(alive).unwrap(), None);
    assert!(lifecycle::decode(br#"{"protocol":"other"}"#).is_err());
    assert!(lifecycle::decode(br#"{"specversion":"1.0","source":"io.choria.lifecycle"}"#).is_err());

    let ours = lifecycle::Event::new("startup", "n9", "provision_mode_server", "0.30.2");
    let round = lifecycle::decode(&ours.to_cloudevent_json()).unwrap();
    assert_eq!(round, ours);
    assert_eq!(
        ours.subject().unwrap().as_str(),
        "choria.lifecycle.event.startup.provision_mode_server"
    );
}

use crate::test_rng::Rng;

fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..=rng.below(4) {
        if out.is_empty() {
            out.push(rng.next() as u8);
            continue;
        }
        let at = rng.below(out.len());
        match rng.below(4) {
            0 => out[at] = rng.next() as u8,
            1 => {
                out.truncate(at);
            }
            2 => out.insert(at, b"{}[]\",:0a\\"[rng.below(10)]),
            _ => {
                let end = (at + rng.below(16)).min(out.len());
                out.drain(at..end);
            }
        }
    }
    out
}

#[test]
fn every_decoder_survives_random_and_mutated_input() {
    let (_, v2_request) = protocol::encode_request(
        &inventory_spec(Protocol::V2),
        "r",
        &Credentials::ed25519(&seed(), CALLER_JWT, true).unwrap(),
        Protocol::V2,
    )
    .unwrap();
    let v2_reply = protocol::encode_reply(
        &protocol::decode_request(&v2_request).unwrap(),
        "n1",
        b"pong",
        0,
        None,
    );
    let seeds: Vec<Vec<u8>> = vec![
        REQUEST_VECTOR.as_bytes().to_vec(),
        REPLY_VECTOR.as_bytes().to_vec(),
        v2_request,
        v2_reply,
        INVENTORY_REPLY.as_bytes().to_vec(),
        br#"{"protocol":"io.choria.lifecycle.v1.startup","identity":"n","component":"c","timestamp":1}"#.to_vec(),
    ];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for round in 0..20_000 {
        let input = if round % 10 == 0 {
            (0..rng.below(64)).map(|_| rng.next() as u8).collect()
        } else {
            let pick = rng.below(seeds.len());
            mutate(&mut rng, &seeds[pick])
        };
        let _ = protocol::decode_reply(&input);
        let _ = protocol::decode_request(&input);
        let _ = protocol::transport_sender(&input);
        let _ = RpcReply::decode(&input);
        let _ = RpcRequestBody::decode(&input);
        let _ = lifecycle::decode(&input);
    }
    // Unmutated seeds still decode: the mutations, not the decoders, break them.
    assert!(protocol::decode_reply(&seeds[1]).is_ok() && protocol::decode_reply(&seeds[3]).is_ok());
}

#[test]
fn v1_requests_are_signed_with_the_file_provider_rsa_key() {
    let cert = include_str!("../../../tests/fixtures/rsa2048-cert.pem");
    for key in [
        include_str!("../../../tests/fixtures/rsa2048-pkcs1.pem"),
        include_str!("../../../tests/fixtures/rsa2048-pkcs8.pem"),
    ] {
        let creds = Credentials::rsa(key, cert).unwrap();
        let (_, payload) =
            protocol::encode_request(&inventory_spec(Protocol::V1), "r", &creds, Protocol::V1)
                .unwrap();
        let secure = secure_layer(&payload);
        assert_eq!(secure["pubcert"], cert);
        let signature = STANDARD
            .decode(secure["signature"].as_str().unwrap())
            .unwrap();
        // Verified with the public half, independently of the signer.
        let der = pem_der(key);
        let pair = if key.contains("BEGIN RSA PRIVATE KEY") {
            ring::signature::RsaKeyPair::from_der(&der)
        } else {
            ring::signature::RsaKeyPair::from_pkcs8(&der)
        }
        .unwrap();
        use ring::signature::KeyPair as _;
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            pair.public_key().as_ref(),
        )
        .verify(secure["message"].as_str().unwrap().as_bytes(), &signature)
        .expect("RSA-SHA256 over the exact request bytes");
    }
    assert!(Credentials::rsa("not a key", "").is_err());
}

fn pem_der(pem: &str) -> Vec<u8> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    STANDARD.decode(body).unwrap()
}

#[test]
fn the_choria_provider_selects_v2_with_the_jwt_caller_id() {
    use crate::choria::client_config::ClientConfig;
    let dir = std::env::temp_dir().join(format!("v2-identity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("client.jwt"), format!("{CALLER_JWT}\n")).unwrap();
    std::fs::write(dir.join("client.seed"), format!("{}\n", "07".repeat(32))).unwrap();
    let cfg = dir.join("choria.cfg");
    std::fs::write(
        &cfg,
        format!(
            "identity = p.example.net\nplugin.choria.middleware_hosts = h:4222\nplugin.security.provider = choria\n\
             plugin.security.choria.token_file = {}\nplugin.security.choria.seed_file = {}\n",
            dir.join("client.jwt").display(),
            dir.join("client.seed").display()
        ),
    )
    .unwrap();
    let client = ClientConfig::load(&cfg).unwrap();
    let (version, creds, caller) = protocol::client_identity(&client).unwrap();
    assert_eq!(version, Protocol::V2);
    assert_eq!(caller, "provisioner_signer");
    assert!(format!("{creds:?}").contains("***"), "keys never in Debug");
    let (_, payload) =
        protocol::encode_request(&inventory_spec(Protocol::V2), "r", &creds, Protocol::V2).unwrap();
    assert_eq!(
        protocol::decode_request(&payload).unwrap().protocol,
        Protocol::V2
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Found by the `rpc_body` fuzzer: serde_json's default float parser is off by one ULP
/// for some numbers, so a fact like `2222244444488897776.8` changed on its way to the
/// helper and our own encoding did not read back the same; floats are now parsed
/// correctly rounded, as Go's `strconv.ParseFloat` does.
#[test]
fn floats_in_rpc_data_are_read_exactly_and_read_back_the_same() {
    let text = "2222244444488897776.8";
    let body =
        format!(r#"{{"action":"inventory","statuscode":0,"data":{{"facts":{{"n":{text}}}}}}}"#);
    let reply = RpcReply::decode(body.as_bytes()).unwrap();
    let n = reply.data["facts"]["n"].as_f64().unwrap();
    assert_eq!(n, text.parse::<f64>().unwrap(), "correctly rounded");
    let again = RpcReply::decode(&reply.encode()).unwrap();
    assert_eq!(again, reply);
}
