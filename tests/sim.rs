//! The fleet simulator as a provisioning-mode server, against a real nats-server:
//! hand-made v1 and v2 requests and the exact replies, what it drops, discovery,
//! every `choria_provision` action with its successes and its errors, restart
//! outcomes (configuration, server JWT against the issuer), every fault mode, and
//! `choria-fleet-sim keys` driving a TLS broker, the provisioner and the simulator
//! binaries end to end.
#![cfg(feature = "sim")]
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use choria_provisioner::choria::protocol::mcorpc::RpcRequestBody;
use choria_provisioner::choria::protocol::{self, Credentials, Filter, Protocol, RequestSpec};
use choria_provisioner::crypto::ids;
use choria_provisioner::sim::{CsrKey, Fault, Faults, Phase, Sim, SimOptions};
use serde_json::{json, Value};
use support::{free_port, wait_for_port, NatsServer, TempDir};

const SENDER: &str = "provisioner.example.net";
const CALLER: &str = "choria=provisioner.example.net";
const WAIT: Duration = Duration::from_secs(5);
const SILENCE: Duration = Duration::from_millis(700);

/// Fields drop in order: the clients go before the server they are connected to
/// (a nats connection whose server is gone waits for it on drop).
struct Rig {
    sim: Sim,
    nc: nats::Connection,
    _server: NatsServer,
}

fn rig(nodes: usize, f: impl FnOnce(&mut SimOptions)) -> Rig {
    let server = NatsServer::start();
    let mut options = SimOptions {
        nodes,
        restart_delay: Duration::from_millis(200),
        csr_key: CsrKey::Ec,
        ..SimOptions::default()
    };
    f(&mut options);
    let sim = Sim::start(&server.url(), options).unwrap();
    let nc = nats::connect(server.url()).unwrap();
    Rig {
        _server: server,
        sim,
        nc,
    }
}

fn id(n: usize) -> String {
    format!("sim-{n:05}.example.net")
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn now() -> i64 {
    ids::unix_now() as i64
}

/// Publishes `payload` to `subject` and returns the first message on `reply_to`
/// within `wait`.
fn exchange(
    nc: &nats::Connection,
    subject: &str,
    payload: &[u8],
    reply_to: &str,
    wait: Duration,
) -> Option<Vec<u8>> {
    let sub = nc.subscribe(reply_to).unwrap();
    nc.flush().unwrap();
    nc.publish(subject, payload).unwrap();
    sub.next_timeout(wait).ok().map(|m| m.data)
}

/// The envelope fields of a hand-made request.
struct Hand<'a> {
    id: String,
    collective: &'a str,
    ttl: i64,
    time: i64,
    filter: Value,
    agent: &'a str,
    body: &'a str,
}

impl Hand<'_> {
    fn inventory() -> Hand<'static> {
        Hand {
            id: ids::v1_request_id(),
            collective: "provisioning",
            ttl: 60,
            time: now(),
            filter: json!({"fact": [], "cf_class": [], "agent": ["rpcutil"], "identity": [], "compound": []}),
            agent: "rpcutil",
            body: r#"{"agent":"rpcutil","action":"inventory","data":{}}"#,
        }
    }

    fn reply_to(&self) -> String {
        format!(
            "{}.{}",
            protocol::reply_prefix("provisioning", CALLER).unwrap(),
            self.id
        )
    }

    /// The three v1 layers built by hand as `spec/choria-protocol.md` §2.11 shows.
    fn v1(&self) -> Vec<u8> {
        let request = format!(
            r#"{{"protocol":"choria:request:1","message":{},"envelope":{{"requestid":"{}","senderid":"{SENDER}","callerid":"{CALLER}","collective":"{}","agent":"{}","ttl":{},"time":{},"filter":{}}}}}"#,
            json_string(self.body),
            self.id,
            self.collective,
            self.agent,
            self.ttl,
            self.time,
            self.filter
        );
        let secure = format!(
            r#"{{"protocol":"choria:secure:request:1","message":{},"signature":"insecure","pubcert":"insecure"}}"#,
            json_string(&request)
        );
        format!(
            r#"{{"protocol":"choria:transport:1","data":"{}","headers":{{"reply-to":"{}","mc_sender":"{SENDER}","seen-by":[["nats://127.0.0.1:4222","{SENDER}","nats://127.0.0.1:4222"]]}}}}"#,
            B64.encode(secure),
            self.reply_to()
        )
        .into_bytes()
    }

    /// The three v2 layers built by hand as §3 shows (everything nested is base64).
    fn v2(&self) -> Vec<u8> {
        let request = format!(
            r#"{{"protocol":"io.choria.protocol.v2.request","message":"{}","id":"{}","sender":"{SENDER}","caller":"{CALLER}","collective":"{}","agent":"{}","ttl":{},"time":{},"filter":{}}}"#,
            B64.encode(self.body),
            self.id,
            self.collective,
            self.agent,
            self.ttl,
            self.time * 1_000_000_000,
            self.filter
        );
        let secure = format!(
            r#"{{"protocol":"io.choria.protocol.v2.secure_request","request":"{}","signature":"aW5zZWN1cmU=","caller":"eyJhbGciOiJFZERTQSJ9.e30.c2ln"}}"#,
            B64.encode(request)
        );
        format!(
            r#"{{"protocol":"io.choria.protocol.v2.transport","data":"{}","headers":{{"reply":"{}","sender":"{SENDER}"}}}}"#,
            B64.encode(secure),
            self.reply_to()
        )
        .into_bytes()
    }
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

fn sha256_b64(bytes: &[u8]) -> String {
    B64.encode(ring::digest::digest(&ring::digest::SHA256, bytes))
}

#[test]
fn a_hand_made_v1_request_is_answered_as_the_worked_example_says() {
    let rig = rig(2, |_| {});
    let hand = Hand::inventory();
    let reply = exchange(
        &rig.nc,
        &format!("provisioning.node.{}", id(1)),
        &hand.v1(),
        &hand.reply_to(),
        WAIT,
    )
    .expect("a reply");

    let transport: Value = serde_json::from_slice(&reply).unwrap();
    assert_eq!(keys(&transport), ["protocol", "data", "headers"]);
    assert_eq!(transport["protocol"], "choria:transport:1");
    assert_eq!(keys(&transport["headers"]), ["mc_sender", "seen-by"]);
    assert_eq!(transport["headers"]["mc_sender"], id(1));
    let secure_bytes = B64.decode(transport["data"].as_str().unwrap()).unwrap();
    let secure: Value = serde_json::from_slice(&secure_bytes).unwrap();
    assert_eq!(keys(&secure), ["protocol", "message", "hash"]);
    assert_eq!(secure["protocol"], "choria:secure:reply:1");
    let message = secure["message"].as_str().unwrap();
    assert_eq!(secure["hash"], sha256_b64(message.as_bytes()));
    let reply: Value = serde_json::from_str(message).unwrap();
    assert_eq!(keys(&reply), ["protocol", "message", "envelope"]);
    assert_eq!(reply["protocol"], "choria:reply:1");
    assert_eq!(
        keys(&reply["envelope"]),
        ["requestid", "senderid", "agent", "time"]
    );
    assert_eq!(reply["envelope"]["requestid"], hand.id.as_str());
    assert_eq!(reply["envelope"]["senderid"], id(1));
    assert_eq!(reply["envelope"]["agent"], "rpcutil");
    assert!((reply["envelope"]["time"].as_i64().unwrap() - now()).abs() <= 2);
    let body: Value = serde_json::from_str(reply["message"].as_str().unwrap()).unwrap();
    assert_eq!(keys(&body), ["action", "statuscode", "statusmsg", "data"]);
    assert_eq!(body["statuscode"], 0);
    assert_eq!(body["statusmsg"], "OK");
    assert_eq!(
        keys(&body["data"]),
        [
            "agents",
            "classes",
            "collectives",
            "data_plugins",
            "facts",
            "machines",
            "main_collective",
            "version",
            "upgradable"
        ]
    );
    assert_eq!(
        body["data"]["agents"],
        json!(["choria_provision", "choria_util", "discovery", "rpcutil"])
    );
    assert_eq!(body["data"]["main_collective"], "provisioning");
    assert_eq!(body["data"]["facts"]["identity"], id(1));
    assert_eq!(rig.sim.summary().nodes[1].rpcs, ["rpcutil#inventory"]);
    assert!(rig.sim.summary().nodes[0].rpcs.is_empty());
}

#[test]
fn a_hand_made_v2_request_is_answered_by_a_v2_node_which_drops_v1() {
    let v1_rig = rig(1, |_| {});
    let rig = rig(1, |o| o.v2 = true);
    let subject = format!("provisioning.node.{}", id(0));
    let hand = Hand {
        id: ids::ksuid(),
        ..Hand::inventory()
    };
    let reply = exchange(&rig.nc, &subject, &hand.v2(), &hand.reply_to(), WAIT).expect("a reply");
    let transport: Value = serde_json::from_slice(&reply).unwrap();
    assert_eq!(transport["protocol"], "io.choria.protocol.v2.transport");
    assert_eq!(transport["headers"]["sender"], id(0));
    let secure: Value =
        serde_json::from_slice(&B64.decode(transport["data"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(keys(&secure), ["protocol", "reply", "hash"]);
    assert_eq!(secure["protocol"], "io.choria.protocol.v2.secure_reply");
    let reply_bytes = B64.decode(secure["reply"].as_str().unwrap()).unwrap();
    assert_eq!(secure["hash"], sha256_b64(&reply_bytes));
    let reply: Value = serde_json::from_slice(&reply_bytes).unwrap();
    assert_eq!(
        keys(&reply),
        ["protocol", "message", "request", "sender", "agent", "time"]
    );
    assert_eq!(reply["protocol"], "io.choria.protocol.v2.reply");
    assert_eq!(reply["request"], hand.id.as_str());
    assert_eq!(reply["sender"], id(0));
    let ns = reply["time"].as_i64().unwrap();
    assert!((ns / 1_000_000_000 - now()).abs() <= 2, "nanoseconds: {ns}");
    let body: Value =
        serde_json::from_slice(&B64.decode(reply["message"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(body["statuscode"], 0);

    // A v2 node's security provider cannot decode v1: no reply at all.
    let v1 = Hand::inventory();
    assert!(exchange(&rig.nc, &subject, &v1.v1(), &v1.reply_to(), SILENCE).is_none());
    // And a v1 node drops v2.
    let hand = Hand {
        id: ids::ksuid(),
        ..Hand::inventory()
    };
    assert!(exchange(&v1_rig.nc, &subject, &hand.v2(), &hand.reply_to(), SILENCE).is_none());
    assert_eq!(v1_rig.sim.progress().dropped, 1);
}

#[test]
fn requests_a_provisioning_mode_server_drops_get_no_reply() {
    let rig = rig(2, |_| {});
    let subject = format!("provisioning.node.{}", id(0));
    let filter = |agent: Value, identity: Value, fact: Value| json!({"fact": fact, "cf_class": [], "agent": agent, "identity": identity, "compound": []});
    let dropped = [
        (
            "collective",
            Hand {
                collective: "mcollective",
                ..Hand::inventory()
            },
        ),
        (
            "ttl below 30",
            Hand {
                ttl: 20,
                ..Hand::inventory()
            },
        ),
        (
            "too old",
            Hand {
                time: now() - 120,
                ..Hand::inventory()
            },
        ),
        (
            "from the future",
            Hand {
                time: now() + 120,
                ..Hand::inventory()
            },
        ),
        (
            "id of 36 characters",
            Hand {
                id: ids::uuid_v4(),
                ..Hand::inventory()
            },
        ),
        (
            "another identity",
            Hand {
                filter: filter(json!(["rpcutil"]), json!([id(1)]), json!([])),
                ..Hand::inventory()
            },
        ),
        (
            "an agent it lacks",
            Hand {
                filter: filter(json!(["puppet"]), json!([]), json!([])),
                ..Hand::inventory()
            },
        ),
        (
            "a fact it lacks",
            Hand {
                filter: filter(
                    json!([]),
                    json!([]),
                    json!([{"fact": "os.family", "operator": "==", "value": "Debian"}]),
                ),
                ..Hand::inventory()
            },
        ),
    ];
    for (why, hand) in &dropped {
        assert!(
            exchange(&rig.nc, &subject, &hand.v1(), &hand.reply_to(), SILENCE).is_none(),
            "{why}: answered"
        );
    }
    assert_eq!(rig.sim.progress().dropped, dropped.len() as u64);
    // Matching filters are answered: identity regex, fact, agent regex.
    let hand = Hand {
        filter: filter(
            json!(["/^choria_prov/"]),
            json!(["/^sim-0+\\./"]),
            json!([{"fact": "os.family", "operator": "==", "value": "RedHat"}]),
        ),
        ..Hand::inventory()
    };
    assert!(exchange(&rig.nc, &subject, &hand.v1(), &hand.reply_to(), WAIT).is_some());
    assert!(rig.sim.summary().nodes[1].rpcs.is_empty());
}

/// Sends a discovery with `filter` and collects the senders for `wait`.
fn discover(nc: &nats::Connection, filter: Filter, wait: Duration) -> Vec<String> {
    let spec = RequestSpec {
        agent: "discovery".into(),
        collective: "provisioning".into(),
        caller_id: CALLER.into(),
        sender_id: SENDER.into(),
        ttl: 60,
        filter,
        body: protocol::DISCOVERY_REQUEST.to_vec(),
        request_id: None,
        time_ns: None,
        seen_by: None,
    };
    let prefix = protocol::reply_prefix("provisioning", CALLER).unwrap();
    let id = ids::v1_request_id();
    let reply_to = format!("{prefix}.{id}");
    let spec = RequestSpec {
        request_id: Some(id),
        ..spec
    };
    let (_, payload) =
        protocol::encode_request(&spec, &reply_to, &Credentials::Insecure, Protocol::V1).unwrap();
    let sub = nc.subscribe(&reply_to).unwrap();
    nc.flush().unwrap();
    nc.publish("provisioning.broadcast.agent.discovery", payload)
        .unwrap();
    let deadline = Instant::now() + wait;
    let mut found = Vec::new();
    while let Ok(m) = sub.next_timeout(deadline.saturating_duration_since(Instant::now())) {
        let reply = protocol::decode_reply(&m.data).unwrap();
        assert_eq!(reply.body, b"pong");
        found.push(reply.sender_id);
    }
    found.sort();
    found
}

#[test]
fn discovery_is_answered_through_the_choria_provision_filter_only() {
    let rig = rig(8, |_| {});
    let all: Vec<String> = (0..8).map(id).collect();
    assert_eq!(
        discover(&rig.nc, Filter::agent("choria_provision"), SILENCE),
        all
    );
    assert!(discover(&rig.nc, Filter::agent("puppet"), SILENCE).is_empty());
    // Facts narrow it: role is derived from the node number (web for 0 and 4).
    let by_role = Filter {
        fact: vec![json!({"fact": "role", "operator": "==", "value": "web"})],
        ..Filter::agent("choria_provision")
    };
    assert_eq!(discover(&rig.nc, by_role, SILENCE), [id(0), id(4)]);
}

/// One RPC to `identity` from `sender`/`caller` (the lock owner); the RPC reply.
fn call_as(
    nc: &nats::Connection,
    identity: &str,
    agent: &str,
    action: &str,
    data: Value,
    sender: &str,
    wait: Duration,
) -> Option<Value> {
    let caller = format!("choria={sender}");
    let id = ids::v1_request_id();
    let reply_to = format!(
        "{}.{id}",
        protocol::reply_prefix("provisioning", &caller).unwrap()
    );
    let spec = RequestSpec {
        agent: agent.into(),
        collective: "provisioning".into(),
        caller_id: caller,
        sender_id: sender.into(),
        ttl: 60,
        filter: Filter::agent(agent),
        body: RpcRequestBody::new(agent, action, data).encode(),
        request_id: Some(id),
        time_ns: None,
        seen_by: None,
    };
    let (_, payload) =
        protocol::encode_request(&spec, &reply_to, &Credentials::Insecure, Protocol::V1).unwrap();
    let reply = exchange(
        nc,
        &format!("provisioning.node.{identity}"),
        &payload,
        &reply_to,
        wait,
    )?;
    let reply = protocol::decode_reply(&reply).unwrap();
    assert_eq!(reply.sender_id, identity);
    Some(serde_json::from_slice(&reply.body).unwrap())
}

fn call(nc: &nats::Connection, identity: &str, action: &str, data: Value) -> Value {
    call_as(nc, identity, "choria_provision", action, data, SENDER, WAIT)
        .unwrap_or_else(|| panic!("{action}: no reply"))
}

fn assert_status(reply: &Value, code: i64, msg: &str) {
    assert_eq!(reply["statuscode"], code, "{reply}");
    assert_eq!(reply["statusmsg"], msg, "{reply}");
}

#[test]
fn jwt_checks_the_token_and_the_provisioning_lock() {
    let rig = rig(1, |o| o.token = "s3cret".into());
    let node = id(0);
    let r = call(&rig.nc, &node, "jwt", json!({"token": "wrong"}));
    assert_status(&r, 1, "Incorrect provision token supplied");
    assert_eq!(r["data"], json!({}));
    let r = call(&rig.nc, &node, "jwt", json!({"token": 5}));
    assert_eq!(r["statuscode"], 4, "{r}");
    let r = call(&rig.nc, &node, "jwt", json!({"token": "s3cret"}));
    assert_status(&r, 0, "OK");
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
    let r = call(
        &rig.nc,
        &id(0),
        "gen25519",
        json!({"nonce": "abc123", "token": ""}),
    );
    assert_status(&r, 0, "OK");
    choria_provisioner::crypto::nonce::verify_nonce_signature(
        r["data"]["public_key"].as_str().unwrap(),
        "abc123",
        r["data"]["signature"].as_str().unwrap(),
    )
    .expect("the nonce signature verifies");
    assert_eq!(r["data"]["directory"], "/etc/choria");

    let r = call(
        &rig.nc,
        &id(0),
        "gencsr",
        json!({"cn": "", "C": "GB", "o": "Example", "OU": "Ops", "L": "London", "ST": "Ignored"}),
    );
    assert_status(&r, 0, "OK");
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
    let our_public = ids::hex(x25519_dalek::PublicKey::from(&ours).as_bytes());
    // Decrypting with the wrong secret fails on the PKCS#7 padding, as in Go; about one
    // garbage block in 256 happens to end in valid padding, so try a few encryptions.
    let stranger = x25519_dalek::PublicKey::from(&x25519_dalek::StaticSecret::from([5u8; 32]));
    let refused = (0..8).any(|_| {
        let (wrong, _) = choria_provisioner::crypto::key_transport::encrypt_key_for_node(
            "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n",
            &ids::hex(stranger.as_bytes()),
        )
        .unwrap();
        let r = call(&rig.nc, &node, "configure", tls(&wrong, &our_public));
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

    // spec/provision-agent.md §6: X25519 with the node's public key, the shared secret
    // as the password of Go's legacy PEM encryption (AES-256-CBC, EVP_BytesToKey).
    let theirs: [u8; 32] = ids::unhex(&node_public).unwrap().try_into().unwrap();
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
    let r = call(&rig.nc, &node, "configure", tls(&encrypted, &our_public));
    assert_status(&r, 0, "OK");
    assert_eq!(
        r["data"]["message"],
        "Wrote 3 lines to /etc/choria/server.conf"
    );
    let summary = &rig.sim.summary().nodes[0];
    let written = choria_provisioner::crypto::pem::decode(summary.private_key.as_deref().unwrap())
        .unwrap()
        .der;
    assert_eq!(written, secret_der, "the node decrypted the key");
    assert_eq!(summary.policies, ["default.policy"]);
    assert!(summary.certificate.is_some());
    assert_eq!(
        summary.configuration.as_ref().unwrap()["identity"],
        node.as_str()
    );
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

    let r = call(&rig.nc, &id(2), "shutdown", json!({"token": "t"}));
    assert_status(&r, 0, "OK");
    assert!(r["data"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Shutting Choria Server down after "));
    // A node that shut down or left answers nothing.
    assert!(call_as(
        &rig.nc,
        &id(2),
        "rpcutil",
        "inventory",
        json!({}),
        SENDER,
        SILENCE
    )
    .is_none());
    let deadline = Instant::now() + WAIT;
    while rig.sim.summary().nodes[0].phase != Phase::Provisioned && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let summary = rig.sim.summary();
    assert_eq!(summary.nodes[0].phase, Phase::Provisioned);
    assert_eq!(summary.nodes[2].phase, Phase::Shutdown);
    assert_eq!(summary.progress.shut_down, 1);
    assert!(call_as(
        &rig.nc,
        &id(0),
        "rpcutil",
        "inventory",
        json!({}),
        SENDER,
        SILENCE
    )
    .is_none());
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
    let r = call(
        &up.nc,
        &id(0),
        "release_update",
        json!({"version": "0.31.0", "repository": "https://repo.example.net/choria"}),
    );
    assert_status(&r, 0, "OK");
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

fn rig_upgradable() -> Rig {
    rig(1, |o| {
        o.upgradable = true;
        o.restart_delay = Duration::from_millis(100);
    })
}

/// Configures, (optionally) writes a server JWT, restarts, and returns where the
/// node ended up and why.
fn restart_with(
    rig: &Rig,
    n: usize,
    config: Value,
    server_jwt: impl FnOnce(&str) -> String,
) -> (Phase, Option<String>) {
    let node = id(n);
    let key = call(&rig.nc, &node, "gen25519", json!({"nonce": "n"}));
    let public = key["data"]["public_key"].as_str().unwrap().to_string();
    let r = call(
        &rig.nc,
        &node,
        "configure",
        json!({"config": config.to_string(), "server_jwt": server_jwt(&public)}),
    );
    assert_status(&r, 0, "OK");
    let r = call(&rig.nc, &node, "restart", json!({"splay": 1}));
    assert_status(&r, 0, "OK");
    let deadline = Instant::now() + WAIT;
    loop {
        let s = &rig.sim.summary().nodes[n];
        if s.phase != Phase::Restarting || Instant::now() > deadline {
            return (s.phase, s.note.clone());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn server_jwt(signer: &[u8; 32], identity: &str, public: &str) -> String {
    let now = now();
    let claims = json!({
        "identity": identity, "collectives": ["choria"], "ou": "choria", "purpose": "choria_server",
        "public_key": public, "iss": "Choria Provisioner", "exp": now + 3600, "nbf": now, "iat": now,
        "jti": ids::ksuid(),
    });
    choria_provisioner::crypto::jwt::SigningKey::from_ed25519_seed(signer)
        .sign_jwt(&claims)
        .unwrap()
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
    let inventory_within = |n: usize, wait: Duration| {
        call_as(
            &rig.nc,
            &id(n),
            "rpcutil",
            "inventory",
            json!({}),
            SENDER,
            wait,
        )
    };
    let inventory = |n: usize| inventory_within(n, WAIT);
    let silent_to = |n: usize| inventory_within(n, SILENCE).is_none();

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
}

// ------------------------------------------------------------------------ the binaries

fn bin(name: &str) -> PathBuf {
    PathBuf::from(match name {
        "sim" => env!("CARGO_BIN_EXE_choria-fleet-sim"),
        _ => env!("CARGO_BIN_EXE_choria-provisioner"),
    })
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `keys`, a TLS nats-server from its `nats-server.conf`, the provisioner from its
/// YAML and choria.cfg, and the simulator from `--keys`: every node provisioned.
fn keys_end_to_end(v2: bool) -> Value {
    let dir = TempDir::new("keys");
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let mut args = vec![
        "keys".to_string(),
        "--dir".into(),
        dir.path().display().to_string(),
        "--token".into(),
        "s3cret".into(),
        "--nats".into(),
        url.clone(),
    ];
    if v2 {
        args.push("--v2".into());
    }
    let out = Command::new(bin("sim")).args(&args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = String::from_utf8(out.stdout).unwrap();
    for f in [
        "issuer.seed",
        "provisioning.jwt",
        "signer.jwt",
        "ca.pem",
        "provisioner-key.pem",
    ] {
        assert!(listed.contains(f), "{f} in {listed}");
    }
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |f: &str| {
        std::fs::metadata(dir.path().join(f))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("issuer.seed"), 0o600);
    assert_eq!(mode("provisioner-key.pem"), 0o600);
    assert_eq!(mode("ca.pem"), 0o644);
    // It never overwrites without --force.
    let again = Command::new(bin("sim")).args(&args).output().unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));

    let _nats = Killed(
        Command::new(support::nats_server_binary())
            .arg("-c")
            .arg(dir.path().join("nats-server.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(wait_for_port(port, Duration::from_secs(10)));
    let yaml = dir.path().join("choria-provisioner.yaml");
    let cfg = dir.path().join("choria.cfg");
    let check = Command::new(bin("provisioner"))
        .args(["check", "--config"])
        .arg(&yaml)
        .arg("--choria-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let log = dir.path().join("provisioner.log");
    let _provisioner = Killed(
        Command::new(bin("provisioner"))
            .arg("--config")
            .arg(&yaml)
            .arg("--choria-config")
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let summary = dir.path().join("summary.json");
    let sim = Command::new(bin("sim"))
        .args([
            "--nats",
            &url,
            "--nodes",
            "5",
            "--quiet",
            "--duration",
            "40s",
            "--keys",
        ])
        .arg(dir.path())
        .arg("--summary")
        .arg(&summary)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut sim = Killed(sim);
    loop {
        match sim.0.try_wait().unwrap() {
            Some(status) => {
                assert!(status.success());
                break;
            }
            None if Instant::now() > deadline => panic!("the simulator did not finish"),
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    let summary: Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    assert_eq!(
        summary["progress"]["provisioned"],
        5,
        "{summary:#}\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    summary
}

#[test]
fn keys_drive_a_tls_broker_the_provisioner_and_the_simulator_v1() {
    let summary = keys_end_to_end(false);
    for node in summary["nodes"].as_array().unwrap() {
        assert_eq!(
            node["rpcs"],
            json!([
                "choria_provision#jwt",
                "rpcutil#inventory",
                "choria_provision#configure",
                "choria_provision#restart"
            ])
        );
    }
}

#[test]
fn keys_drive_a_tls_broker_the_provisioner_and_the_simulator_v2_with_a_chain_issuer() {
    let summary = keys_end_to_end(true);
    for node in summary["nodes"].as_array().unwrap() {
        assert_eq!(node["phase"], "provisioned", "{node}");
        let jwt = node["server_jwt"].as_str().expect("a server JWT");
        let claims: choria_provisioner::crypto::jwt::ServerClaims =
            choria_provisioner::crypto::jwt::unverified_claims(jwt).unwrap();
        assert!(claims.standard.iss.starts_with("C-"), "chain-issued");
        assert_eq!(claims.identity, node["identity"].as_str().unwrap());
    }
}

#[test]
fn the_simulator_refuses_a_remote_broker_and_bad_flags() {
    let run = |args: &[&str]| Command::new(bin("sim")).args(args).output().unwrap();
    let out = run(&["--nats", "nats://broker.example.net:4222", "--nodes", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-remote"));
    let out = run(&["--features", "v3"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown feature \"v3\""));
    let out = run(&["--csr-key", "dsa"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--csr-key must be rsa or ec"));
    let out = run(&["keys"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dir"));
    let out = run(&["keys", "--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--v2"));
}
