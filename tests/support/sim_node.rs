//! Talking to the fleet simulator as the provisioner would, by hand: requests built
//! layer by layer, replies read back, for `tests/sim_*.rs`.
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use choria_provisioner::choria::protocol::mcorpc::RpcRequestBody;
use choria_provisioner::choria::protocol::{self, Credentials, Filter, Protocol, RequestSpec};
use choria_provisioner::crypto::ids;
use choria_provisioner::sim::{CsrKey, Phase, Sim, SimOptions};
use serde_json::{json, Value};

use super::NatsServer;

pub const SENDER: &str = "provisioner.example.net";
pub const CALLER: &str = "choria=provisioner.example.net";
pub const WAIT: Duration = Duration::from_secs(5);
pub const SILENCE: Duration = Duration::from_millis(700);

/// Fields drop in order: the clients go before the server they are connected to
/// (a nats connection whose server is gone waits for it on drop).
pub struct Rig {
    pub sim: Sim,
    pub nc: nats::Connection,
    pub _server: NatsServer,
}

pub fn rig(nodes: usize, f: impl FnOnce(&mut SimOptions)) -> Rig {
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

pub fn id(n: usize) -> String {
    format!("sim-{n:05}.example.net")
}

pub fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

pub fn now() -> i64 {
    choria_provisioner::clock::unix_now() as i64
}

/// Publishes `payload` to `subject` and returns the first message on `reply_to`
/// within `wait`.
pub fn exchange(
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
pub struct Hand<'a> {
    pub id: String,
    pub collective: &'a str,
    pub ttl: i64,
    pub time: i64,
    pub filter: Value,
    pub agent: &'a str,
    pub body: &'a str,
}

impl Hand<'_> {
    pub fn inventory() -> Hand<'static> {
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

    pub fn reply_to(&self) -> String {
        format!(
            "{}.{}",
            protocol::reply_prefix("provisioning", CALLER).unwrap(),
            self.id
        )
    }

    /// The three v1 layers built by hand as go-choria's `protocol/v1` and `protocol/v2` shows.
    pub fn v1(&self) -> Vec<u8> {
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
    pub fn v2(&self) -> Vec<u8> {
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

pub fn keys(v: &Value) -> Vec<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

pub fn sha256_b64(bytes: &[u8]) -> String {
    B64.encode(ring::digest::digest(&ring::digest::SHA256, bytes))
}

/// Sends a discovery with `filter` and collects the senders for `wait`.
pub fn discover(nc: &nats::Connection, filter: Filter, wait: Duration) -> Vec<String> {
    let spec = RequestSpec {
        agent: "discovery",
        collective: "provisioning",
        caller_id: CALLER,
        sender_id: SENDER,
        ttl: 60,
        filter: &filter,
        body: protocol::DISCOVERY_REQUEST,
        request_id: None,
        time_ns: None,
        seen_by: None,
    };
    let prefix = protocol::reply_prefix("provisioning", CALLER).unwrap();
    let id = ids::v1_request_id();
    let reply_to = format!("{prefix}.{id}");
    let spec = RequestSpec {
        request_id: Some(&id),
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

/// One RPC to `identity` from `sender`/`caller` (the lock owner); the RPC reply.
pub fn call_as(
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
        agent,
        collective: "provisioning",
        caller_id: &caller,
        sender_id: sender,
        ttl: 60,
        filter: &Filter::agent(agent),
        body: &RpcRequestBody::new(agent, action, data).encode(),
        request_id: Some(&id),
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

pub fn call(nc: &nats::Connection, identity: &str, action: &str, data: Value) -> Value {
    call_as(nc, identity, "choria_provision", action, data, SENDER, WAIT)
        .unwrap_or_else(|| panic!("{action}: no reply"))
}

/// [`call`], which must be answered `0 OK`: the reply.
pub fn call_ok(nc: &nats::Connection, identity: &str, action: &str, data: Value) -> Value {
    let reply = call(nc, identity, action, data);
    assert_status(&reply, 0, "OK");
    reply
}

/// `rpcutil#inventory` of `identity`, or `None` when it answers nothing within `wait`.
pub fn inventory_within(nc: &nats::Connection, identity: &str, wait: Duration) -> Option<Value> {
    call_as(
        nc,
        identity,
        "rpcutil",
        "inventory",
        json!({}),
        SENDER,
        wait,
    )
}

pub fn assert_status(reply: &Value, code: i64, msg: &str) {
    assert_eq!(reply["statuscode"], code, "{reply}");
    assert_eq!(reply["statusmsg"], msg, "{reply}");
}

pub fn rig_upgradable() -> Rig {
    rig(1, |o| {
        o.upgradable = true;
        o.restart_delay = Duration::from_millis(100);
    })
}

/// Configures, (optionally) writes a server JWT, restarts, and returns where the
/// node ended up and why.
pub fn restart_with(
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

pub fn server_jwt(signer: &[u8; 32], identity: &str, public: &str) -> String {
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
