//! Direct RPC and broadcast discovery against a real nats-server, with responders
//! written here that decode requests with the server side of our codec.
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use choria_provisioner::choria::client_config::ClientConfig;
use choria_provisioner::choria::connector::Connector;
use choria_provisioner::choria::identity::Identity;
use choria_provisioner::choria::protocol::mcorpc::{RpcReply, RpcRequestBody, StatusCode};
use choria_provisioner::choria::protocol::{self, Protocol};
use choria_provisioner::choria::rpc::{Flush, RpcClient, RpcError};
use choria_provisioner::config::Config;
use choria_provisioner::metrics::Metrics;
use crossbeam_channel::bounded;
use support::{NatsServer, TempDir};

/// How a responder misbehaves.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Good,
    WrongSender,
    WrongHash,
    Silent,
    /// The reply, then `FLOOD_COPIES - 1` copies of it: more than a request keeps.
    Flood,
}

/// Replies a flooding responder sends per request.
const FLOOD_COPIES: u64 = 20;

/// Answers every request for `identity` (or every identity under `provisioning.node.>`
/// when `identity` is `*`) like a provisioning-mode node would.
fn responder(server: &NatsServer, identity: &str, mode: Mode) -> nats::Connection {
    let nc = nats::connect(server.url()).unwrap();
    let subject = if identity == "*" {
        "provisioning.node.>".to_string()
    } else {
        format!("provisioning.node.{identity}")
    };
    let sub = nc.subscribe(&subject).unwrap();
    let publisher = nc.clone();
    sub.with_handler(move |msg| {
        let me = msg
            .subject
            .trim_start_matches("provisioning.node.")
            .to_string();
        let Ok(request) = protocol::decode_request(&msg.data) else {
            return Ok(());
        };
        if request
            .validate_for_provisioning(Protocol::V1, choria_provisioner::clock::unix_now() as i64)
            .is_err()
        {
            return Ok(());
        }
        let body = RpcRequestBody::decode(&request.body).unwrap();
        let reply = RpcReply::new(
            &body.action,
            StatusCode::Ok,
            "OK",
            serde_json::json!({"echo": body.data, "me": me}),
        );
        let sender = if mode == Mode::WrongSender {
            "impostor.example.net"
        } else {
            me.as_str()
        };
        let mut payload = protocol::encode_reply(
            &request,
            sender,
            &reply.encode(),
            choria_provisioner::clock::unix_nanos(),
            None,
        );
        if mode == Mode::WrongHash {
            payload = forge_hash(&payload);
        }
        let copies = match mode {
            Mode::Silent => 0,
            Mode::Flood => FLOOD_COPIES,
            _ => 1,
        };
        for _ in 0..copies {
            publisher.publish(&request.reply_to, &payload)?;
        }
        Ok(())
    });
    nc.flush().unwrap();
    nc
}

/// Changes the reply message but keeps the old hash.
fn forge_hash(payload: &[u8]) -> Vec<u8> {
    let mut t: serde_json::Value = serde_json::from_slice(payload).unwrap();
    let secure = STANDARD.decode(t["data"].as_str().unwrap()).unwrap();
    let secure = String::from_utf8(secure).unwrap().replace("OK", "KO");
    t["data"] = STANDARD.encode(secure).into();
    t.to_string().into_bytes()
}

/// Answers discovery broadcasts for `count` identities `node-<n>`.
fn discovery_responders(server: &NatsServer, count: usize) -> nats::Connection {
    let nc = nats::connect(server.url()).unwrap();
    let sub = nc
        .subscribe("provisioning.broadcast.agent.discovery")
        .unwrap();
    let publisher = nc.clone();
    sub.with_handler(move |msg| {
        let Ok(request) = protocol::decode_request(&msg.data) else {
            return Ok(());
        };
        if request.body != b"ping" || request.filter.agent != ["choria_provision"] {
            return Ok(());
        }
        for n in 0..count {
            let payload = protocol::encode_reply(
                &request,
                &format!("node-{n}"),
                b"pong",
                choria_provisioner::clock::unix_nanos(),
                None,
            );
            publisher.publish(&request.reply_to, payload)?;
        }
        Ok(())
    });
    nc.flush().unwrap();
    nc
}

fn id(text: &str) -> Identity {
    Identity::parse(text).unwrap()
}

fn rejected(rpc: &RpcClient, reason: &str) -> u64 {
    rpc.metrics()
        .rejected_replies
        .with_label_values(&[reason])
        .get()
}

/// `rpcutil#inventory` to `node` with empty data: the error, the call must fail.
fn failed_inventory(rpc: &RpcClient, node: &str, timeout: Duration) -> RpcError {
    rpc.call(
        &id(node),
        "rpcutil",
        "inventory",
        &serde_json::json!({}),
        timeout,
    )
    .expect_err("the inventory call fails")
}

fn client(server: &NatsServer, dir: &TempDir) -> RpcClient {
    let cfg = dir.write(
        "choria.cfg",
        &format!(
            "identity = provisioner.test.local\nplugin.choria.middleware_hosts = {}\n",
            server.url()
        ),
    );
    let helper = dir.script("helper", "#!/bin/sh\n");
    let yaml = dir.write(
        "p.yaml",
        &format!("helper: {}\nchoria_insecure: true\n", helper.display()),
    );
    let config = Config::load(&yaml).unwrap().config;
    let mut c = ClientConfig::load(&cfg).unwrap();
    choria_provisioner::cli::apply_provisioner_overrides(&mut c, &config);
    let metrics = Arc::new(Metrics::new("t").unwrap());
    let (_stop, shutdown) = bounded::<()>(0);
    let conn = Connector::connect(&c, &metrics, &shutdown).unwrap();
    RpcClient::new(&conn, &c, metrics).unwrap()
}

#[test]
fn a_direct_rpc_succeeds() {
    let server = NatsServer::start();
    let dir = TempDir::new("rpc");
    let _node = responder(&server, "n1.example.net", Mode::Good);
    let rpc = client(&server, &dir);
    let answer = rpc
        .call(
            &id("n1.example.net"),
            "choria_provision",
            "jwt",
            &serde_json::json!({"token": "t"}),
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!(rpc.router().pending(), 1, "the route is watched while kept");
    let reply = answer.reply;
    drop(answer.watch);
    assert_eq!(reply.sender, "n1.example.net");
    assert_eq!(reply.statuscode, 0);
    assert_eq!(reply.data.to_value().unwrap()["echo"]["token"], "t");
    assert_eq!(
        rpc.router().pending(),
        0,
        "the route is gone once the watch is dropped"
    );
}

#[test]
fn a_request_sent_ahead_is_answered_by_a_reply_that_came_in_time_and_is_read_late() {
    let server = NatsServer::start();
    let dir = TempDir::new("rpc");
    let _node = responder(&server, "n1.example.net", Mode::Good);
    let rpc = client(&server, &dir);
    let timeout = Duration::from_millis(300);
    let ask = |node: &str| {
        rpc.ask(
            &id(node),
            "rpcutil",
            "inventory",
            &serde_json::json!({}),
            timeout,
            Flush::Now,
        )
        .unwrap()
    };
    let asked = ask("n1.example.net");
    // The caller reads other replies first, past this request's deadline.
    std::thread::sleep(timeout * 2);
    let answer = asked.answer().expect("the reply came in time");
    assert_eq!(answer.reply.sender, "n1.example.net");
    // A request whose deadline passed with nothing in its mailbox ends at once.
    let _silent = responder(&server, "n2.example.net", Mode::Silent);
    let asked = ask("n2.example.net");
    std::thread::sleep(timeout * 2);
    let started = Instant::now();
    assert!(matches!(asked.answer(), Err(RpcError::NoReply { .. })));
    assert!(started.elapsed() < timeout, "no wait past the deadline");
}

/// A request sent ahead and then given up unanswered (a request before it in its
/// group failed) still counts the replies its mailbox dropped: the flood is counted
/// however the request ends.
#[test]
fn replies_dropped_from_a_request_given_up_unanswered_are_counted() {
    let server = NatsServer::start();
    let dir = TempDir::new("rpc");
    let _node = responder(&server, "n1.example.net", Mode::Flood);
    let rpc = client(&server, &dir);
    let asked = rpc
        .ask(
            &id("n1.example.net"),
            "rpcutil",
            "inventory",
            &serde_json::json!({}),
            Duration::from_secs(5),
            Flush::Now,
        )
        .unwrap();
    let stats = rpc.router().stats();
    let deadline = Instant::now() + Duration::from_secs(10);
    while stats.overflow.load(Ordering::Relaxed) < FLOOD_COPIES - 8 {
        assert!(
            Instant::now() < deadline,
            "the flood overflowed the mailbox"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(rejected(&rpc, "overflow"), 0, "not counted while unread");
    drop(asked);
    assert_eq!(
        rejected(&rpc, "overflow"),
        stats.overflow.load(Ordering::Relaxed),
        "every reply the mailbox dropped is counted once the request is given up"
    );
    assert_eq!(
        rpc.metrics()
            .contested_replies
            .with_label_values(&["rpcutil#inventory"])
            .get(),
        0,
        "a request nobody reads is not contested"
    );
}

#[test]
fn no_reply_times_out_with_go_s_message() {
    let server = NatsServer::start();
    let dir = TempDir::new("rpc");
    let _node = responder(&server, "n1.example.net", Mode::Silent);
    let rpc = client(&server, &dir);
    let started = Instant::now();
    let err = failed_inventory(&rpc, "n1.example.net", Duration::from_millis(500));
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert!(matches!(err, RpcError::NoReply { .. }));
    assert!(
        err.to_string()
            .starts_with("received 0 responses while expecting a response from n1.example.net"),
        "{err}"
    );
}

#[test]
fn no_responders_from_the_broker_is_believed_at_once_and_a_forged_one_is_not() {
    let server = NatsServer::start();
    let dir = TempDir::new("rpc");
    let rpc = client(&server, &dir);
    let forged = || rejected(&rpc, "forged_no_responders");
    // Nobody subscribes: nats-server's status, confirmed by the probe.
    let started = Instant::now();
    let err = failed_inventory(&rpc, "gone.example.net", Duration::from_secs(5));
    assert!(matches!(err, RpcError::NoResponders { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "not the timeout"
    );
    assert_eq!(rpc.metrics().unreachable_nodes.get(), 1);
    assert_eq!(forged(), 0);
    // A silent node is there, and another connection sends its request's reply
    // subject the status: the probe finds the node, so the call waits on (here until
    // its timeout) and counts the forgery.
    let _node = responder(&server, "n1.example.net", Mode::Silent);
    let forger = nats::connect(server.url()).unwrap();
    let mut raw = support::hostile::RawPublisher::connect(&server.url());
    let (to_forge, reply_tos) = bounded::<String>(4);
    let _forging = forger
        .subscribe("provisioning.node.n1.example.net")
        .unwrap()
        .with_handler(move |msg| {
            if let Some(reply) = msg.reply.filter(|_| !msg.data.is_empty()) {
                let _ = to_forge.try_send(reply);
            }
            Ok(())
        });
    forger.flush().unwrap();
    let forging = std::thread::spawn(move || {
        if let Ok(reply) = reply_tos.recv_timeout(Duration::from_secs(5)) {
            raw.hpub(&reply, b"NATS/1.0 503\r\n\r\n", b"");
            raw.flush();
        }
    });
    let started = Instant::now();
    let err = failed_inventory(&rpc, "n1.example.net", Duration::from_millis(800));
    forging.join().unwrap();
    assert!(matches!(err, RpcError::NoReply { .. }), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(800));
    assert_eq!(rpc.metrics().unreachable_nodes.get(), 1, "not given up");
    assert_eq!(forged(), 1);
}

#[test]
fn a_reply_from_the_wrong_sender_is_ignored() {
    let server = NatsServer::start();
    let dir = TempDir::new("rpc");
    let _node = responder(&server, "n1.example.net", Mode::WrongSender);
    let rpc = client(&server, &dir);
    let err = failed_inventory(&rpc, "n1.example.net", Duration::from_millis(500));
    assert!(
        err.to_string()
            .contains("1 rejected, last: reply comes from impostor.example.net"),
        "{err}"
    );
    assert_eq!(rejected(&rpc, "wrong_sender"), 1);
}

#[test]
fn a_reply_with_a_wrong_hash_is_rejected() {
    let server = NatsServer::start();
    let dir = TempDir::new("rpc");
    let _node = responder(&server, "n1.example.net", Mode::WrongHash);
    let rpc = client(&server, &dir);
    let err = failed_inventory(&rpc, "n1.example.net", Duration::from_millis(500));
    assert!(err.to_string().contains("hash does not match"), "{err}");
}

#[test]
fn a_thousand_concurrent_rpcs_from_sixteen_threads_are_all_answered_correctly() {
    let server = NatsServer::start();
    let dir = TempDir::new("rpc");
    let _nodes = responder(&server, "*", Mode::Good);
    let rpc = Arc::new(client(&server, &dir));
    let ok = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let (rpc, ok) = (Arc::clone(&rpc), Arc::clone(&ok));
            std::thread::spawn(move || {
                for i in 0..63 {
                    let id = id(&format!("node-{t}-{i}.example.net"));
                    let reply = rpc
                        .call(
                            &id,
                            "rpcutil",
                            "inventory",
                            &serde_json::json!({"n": i}),
                            Duration::from_secs(10),
                        )
                        .unwrap()
                        .reply;
                    let data = reply.data.to_value().unwrap();
                    assert_eq!(data["me"], id.as_str(), "each caller gets its own reply");
                    assert_eq!(data["echo"]["n"], i);
                    ok.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(ok.load(Ordering::Relaxed), 16 * 63);
    for reason in ["undecodable", "wrong_request", "wrong_sender"] {
        assert_eq!(rejected(&rpc, reason), 0, "{reason}");
    }
    assert_eq!(rpc.router().pending(), 0);
}

#[test]
fn discovery_of_two_hundred_nodes_closes_its_window_early() {
    let server = NatsServer::start();
    let dir = TempDir::new("rpc");
    let _fleet = discovery_responders(&server, 200);
    let rpc = client(&server, &dir);
    let started = Instant::now();
    let found = rpc
        .discover(
            Duration::from_secs(2),
            Duration::from_millis(300),
            Duration::from_secs(2),
        )
        .unwrap();
    let took = started.elapsed();
    assert_eq!(found.identities.len(), 200);
    assert_eq!(found.replies, 200);
    assert!(found.identities.iter().all(|id| id.starts_with("node-")));
    assert!(
        took < Duration::from_millis(1500),
        "closed 300 ms after the last reply: {took:?}"
    );
}

#[test]
fn discovery_with_nobody_listening_ends_at_the_initial_wait() {
    let server = NatsServer::start();
    let dir = TempDir::new("rpc");
    let rpc = client(&server, &dir);
    let started = Instant::now();
    let found = rpc
        .discover(
            Duration::from_millis(400),
            Duration::from_millis(300),
            Duration::from_secs(2),
        )
        .unwrap();
    assert!(found.identities.is_empty());
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(2),
        "{took:?}"
    );
}
