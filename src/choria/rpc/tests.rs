//! Direct requests, probes and broadcast discovery through the daemon's own path
//! (`send_routed`, `probe`, `accept`, `discover`) against a real nats-server, with
//! responders written here that decode requests with the server side of our codec.
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use crossbeam_channel::{bounded, Receiver};

use super::*;
use crate::choria::protocol::mcorpc::{RpcReply, RpcRequestBody, StatusCode};
use crate::test_nats_server::{NatsServer, TempDir};

/// How a responder misbehaves.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Good,
    WrongSender,
    WrongHash,
    Silent,
}

/// Answers every request for `identity` (or every identity under `provisioning.node.>`
/// when `identity` is `*`) as a provisioning-mode node would.
fn responder(server: &NatsServer, identity: &str, mode: Mode) -> nats::Connection {
    let nc = nats::connect(server.url()).unwrap();
    let subject = match identity {
        "*" => "provisioning.node.>".to_string(),
        _ => format!("provisioning.node.{identity}"),
    };
    let publisher = nc.clone();
    nc.subscribe(&subject).unwrap().with_handler(move |msg| {
        let me = msg.subject.trim_start_matches("provisioning.node.");
        let Ok(request) = protocol::decode_request(&msg.data) else {
            return Ok(()); // a probe, or not ours
        };
        let now = crate::clock::unix_now() as i64;
        if request
            .validate_for_provisioning(Protocol::V1, now)
            .is_err()
            || mode == Mode::Silent
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
        let sender = match mode {
            Mode::WrongSender => "impostor.example.net",
            _ => me,
        };
        let nanos = crate::clock::unix_nanos();
        let mut payload = protocol::encode_reply(&request, sender, &reply.encode(), nanos, None);
        if mode == Mode::WrongHash {
            payload = forge_hash(&payload);
        }
        publisher.publish(&request.reply_to, &payload)
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

/// Answers each discovery broadcast with one reply per `(sender, body)`, in order.
fn discovery_responders(server: &NatsServer, replies: Vec<(String, Vec<u8>)>) -> nats::Connection {
    let nc = nats::connect(server.url()).unwrap();
    let publisher = nc.clone();
    nc.subscribe("provisioning.broadcast.agent.discovery")
        .unwrap()
        .with_handler(move |msg| {
            let Ok(request) = protocol::decode_request(&msg.data) else {
                return Ok(());
            };
            if request.body != b"ping" || request.filter.agent != ["choria_provision"] {
                return Ok(());
            }
            for (sender, body) in &replies {
                let nanos = crate::clock::unix_nanos();
                let payload = protocol::encode_reply(&request, sender, body, nanos, None);
                publisher.publish(&request.reply_to, payload)?;
            }
            Ok(())
        });
    nc.flush().unwrap();
    nc
}

/// One discovery as the daemon runs it (2 s for the first reply, a 300 ms window,
/// 2 s at most): what it heard and the senders it handed over, in order.
fn discover_all(rpc: &RpcClient) -> (Discovered, Vec<Identity>) {
    let mut identities = Vec::new();
    let found = rpc
        .discover(
            Duration::from_secs(2),
            Duration::from_millis(300),
            Duration::from_secs(2),
            &mut |id| identities.push(id),
        )
        .unwrap();
    (found, identities)
}

/// `pong` from `node-0` … `node-<count - 1>`, each `times` in a row.
fn pongs(count: usize, times: usize) -> Vec<(String, Vec<u8>)> {
    (0..count)
        .flat_map(|n| std::iter::repeat_n((format!("node-{n}"), b"pong".to_vec()), times))
        .collect()
}

fn id(text: &str) -> Identity {
    Identity::parse(text).unwrap()
}

/// An insecure client of `server`, as the daemon builds it.
fn client(server: &NatsServer) -> RpcClient {
    let dir = TempDir::new("rpc");
    let cfg = dir.write(
        "choria.cfg",
        &format!(
            "identity = provisioner.test.local\nplugin.choria.middleware_hosts = {}\n",
            server.url()
        ),
    );
    let mut c = ClientConfig::load(&cfg).unwrap();
    c.insecure = true;
    let metrics = Arc::new(Metrics::new("t").unwrap());
    let (_stop, shutdown) = bounded::<()>(0);
    let conn = Connector::connect(&c, &metrics, &shutdown).unwrap();
    RpcClient::new(&conn, &c, metrics).unwrap()
}

/// `agent#action` to `node`: the request id, its route, and what is routed to it.
fn send(
    rpc: &RpcClient,
    node: &str,
    agent: &'static str,
    data: serde_json::Value,
) -> (String, Route, Receiver<Routed>) {
    let (tx, rx) = bounded(16);
    let sink: Sink = Arc::new(move |routed| tx.try_send(routed).is_ok());
    let action = if agent == RPCUTIL_AGENT {
        "inventory"
    } else {
        "jwt"
    };
    let (request, route) = rpc
        .send_routed(&id(node), agent, action, &data, Flush::Now, sink)
        .unwrap();
    (request, route, rx)
}

/// The first reply routed within `within`, judged by `accept`.
fn judged(
    rpc: &RpcClient,
    node: &str,
    request: &str,
    rx: &Receiver<Routed>,
    within: Duration,
) -> Option<Result<Reply, ReplyRejection>> {
    match rx.recv_timeout(within).ok()? {
        Routed::Reply(bytes) => Some(rpc.accept(&bytes, request, &id(node)).map(|(r, _)| r)),
        Routed::NoResponders => panic!("no responders for {node}"),
    }
}

#[test]
fn a_request_reaches_its_node_and_the_reply_is_routed_back_and_accepted() {
    let server = NatsServer::start();
    let _node = responder(&server, "n1.example.net", Mode::Good);
    let rpc = client(&server);
    let data = serde_json::json!({"token": "t"});
    let (request, route, rx) = send(&rpc, "n1.example.net", PROVISION_AGENT, data);
    assert_eq!(rpc.router().pending(), 1, "routed while the route is kept");
    let reply = judged(
        &rpc,
        "n1.example.net",
        &request,
        &rx,
        Duration::from_secs(5),
    )
    .expect("a reply")
    .expect("accepted");
    assert_eq!(reply.sender, "n1.example.net");
    assert_eq!((reply.statuscode, reply.statusmsg.as_str()), (0, "OK"));
    assert_eq!(reply.data.to_value().unwrap()["echo"]["token"], "t");
    drop(route);
    assert_eq!(rpc.router().pending(), 0, "the route goes with its owner");
    // Accepted only for its own request.
    let (_, _route, rx) = send(
        &rpc,
        "n1.example.net",
        PROVISION_AGENT,
        serde_json::json!({}),
    );
    let other = judged(&rpc, "n1.example.net", "0123", &rx, Duration::from_secs(5)).unwrap();
    assert_eq!(other.unwrap_err().reason, "wrong_request");
}

#[test]
fn a_reply_from_another_sender_or_with_a_wrong_hash_is_rejected_with_its_reason() {
    let server = NatsServer::start();
    let _impostor = responder(&server, "n1.example.net", Mode::WrongSender);
    let _forger = responder(&server, "n2.example.net", Mode::WrongHash);
    let rpc = client(&server);
    let within = Duration::from_secs(5);
    let (request, _route, rx) = send(&rpc, "n1.example.net", RPCUTIL_AGENT, serde_json::json!({}));
    let why = judged(&rpc, "n1.example.net", &request, &rx, within)
        .unwrap()
        .unwrap_err();
    assert_eq!(why.reason, "wrong_sender");
    assert_eq!(why.detail, "reply comes from impostor.example.net");
    let (request, _route, rx) = send(&rpc, "n2.example.net", RPCUTIL_AGENT, serde_json::json!({}));
    let why = judged(&rpc, "n2.example.net", &request, &rx, within)
        .unwrap()
        .unwrap_err();
    assert_eq!(why.reason, "undecodable");
    assert!(why.detail.contains("hash does not match"), "{}", why.detail);
}

/// What a probe of `node` is told: whether the broker said nobody listens.
fn probed(rpc: &RpcClient, node: &str) -> bool {
    let (tx, rx) = bounded(1);
    let _route = rpc
        .probe(
            &id(node),
            Box::new(move |nobody| {
                let _ = tx.try_send(nobody);
            }),
        )
        .unwrap();
    rx.recv_timeout(Duration::from_secs(5))
        .expect("the fence came back")
}

#[test]
fn no_responders_comes_at_once_and_a_probe_tells_the_broker_s_status_from_a_forged_one() {
    let server = NatsServer::start();
    let rpc = client(&server);
    // Nobody subscribes: nats-server's status, at once.
    let (_, _route, rx) = send(
        &rpc,
        "gone.example.net",
        RPCUTIL_AGENT,
        serde_json::json!({}),
    );
    let started = Instant::now();
    let routed = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(matches!(routed, Routed::NoResponders));
    assert!(started.elapsed() < Duration::from_secs(2), "not a timeout");
    assert!(probed(&rpc, "gone.example.net"), "the broker says so again");
    // A silent node is there, and another connection answers whatever it is sent
    // with a forged status: the probe's fence comes first.
    let _node = responder(&server, "n1.example.net", Mode::Silent);
    let forger = nats::connect(server.url()).unwrap();
    let (to_forge, reply_tos) = bounded::<String>(4);
    let _forging = forger
        .subscribe("provisioning.node.n1.example.net")
        .unwrap()
        .with_handler(move |msg| {
            if let Some(reply) = msg.reply {
                let _ = to_forge.try_send(reply);
            }
            Ok(())
        });
    forger.flush().unwrap();
    let mut raw = crate::test_nats_server::RawPublisher::connect(&server.url());
    let forging = std::thread::spawn(move || {
        let mut forged = 0;
        while let Ok(reply) = reply_tos.recv_timeout(Duration::from_secs(2)) {
            raw.hpub(&reply, b"NATS/1.0 503\r\n\r\n", b"");
            raw.flush();
            forged += 1;
        }
        forged
    });
    assert!(!probed(&rpc, "n1.example.net"), "the node is there");
    // The request itself gets the forged status: the attempt asks the probe.
    let (_, _route, rx) = send(&rpc, "n1.example.net", RPCUTIL_AGENT, serde_json::json!({}));
    let routed = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(matches!(routed, Routed::NoResponders), "forged");
    assert_eq!(forging.join().unwrap(), 2, "the probe and the request");
}

#[test]
fn a_probe_is_a_signed_ping_a_live_node_takes_and_may_answer() {
    let server = NatsServer::start();
    let rpc = client(&server);
    // A node that answers whatever valid request it gets, and a copy of what came.
    let _node = responder(&server, "n1.example.net", Mode::Good);
    let watcher = nats::connect(server.url()).unwrap();
    let seen = watcher
        .subscribe("provisioning.node.n1.example.net")
        .unwrap();
    watcher.flush().unwrap();
    assert!(!probed(&rpc, "n1.example.net"), "the node is there");
    let probe = seen.next_timeout(Duration::from_secs(5)).unwrap();
    let request = protocol::decode_request(&probe.data).expect("a Choria request");
    let now = crate::clock::unix_now() as i64;
    request
        .validate_for_provisioning(Protocol::V1, now)
        .expect("one a provisioning-mode server accepts");
    let body = RpcRequestBody::decode(&request.body).unwrap();
    assert_eq!(
        (body.agent.as_str(), body.action.as_str()),
        (RPCUTIL_AGENT, "ping")
    );
    // Nobody there: the broker's status before the fence, as before.
    assert!(probed(&rpc, "gone.example.net"));
}

#[test]
fn a_thousand_concurrent_requests_from_sixteen_threads_are_each_answered_by_their_node() {
    let server = NatsServer::start();
    let _nodes = responder(&server, "*", Mode::Good);
    let rpc = client(&server);
    std::thread::scope(|s| {
        for t in 0..16 {
            let rpc = &rpc;
            s.spawn(move || {
                for i in 0..63 {
                    let node = format!("node-{t}-{i}.example.net");
                    let data = serde_json::json!({"n": i});
                    let (request, _route, rx) = send(rpc, &node, RPCUTIL_AGENT, data);
                    let reply = judged(rpc, &node, &request, &rx, Duration::from_secs(10))
                        .expect("a reply")
                        .expect("accepted");
                    let data = reply.data.to_value().unwrap();
                    assert_eq!(data["me"], node.as_str(), "each caller gets its own reply");
                    assert_eq!(data["echo"]["n"], i);
                }
            });
        }
    });
    let stats = rpc.router().stats();
    let routed = stats.routed.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(routed, 16 * 63);
    assert_eq!(
        stats.unexpected.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert_eq!(rpc.router().pending(), 0);
}

#[test]
fn discovery_of_two_hundred_nodes_answering_twice_hands_each_over_once_and_closes_early() {
    let server = NatsServer::start();
    let _fleet = discovery_responders(&server, pongs(200, 2));
    let rpc = client(&server);
    let started = Instant::now();
    let (found, identities) = discover_all(&rpc);
    let took = started.elapsed();
    let distinct: std::collections::HashSet<_> = identities.iter().collect();
    assert_eq!((identities.len(), distinct.len()), (200, 200));
    assert_eq!(found.senders, 200);
    assert_eq!(found.replies, 400);
    assert!(identities.iter().all(|id| id.starts_with("node-")));
    assert!(
        took < Duration::from_millis(1500),
        "closed 300 ms after the last reply: {took:?}"
    );
}

#[test]
fn discovery_replies_too_large_to_read_are_dropped_and_counted() {
    let server = NatsServer::start();
    let mut replies = pongs(3, 1);
    replies.push(("node-huge-1".into(), vec![b'x'; 20 * 1024]));
    replies.push(("node-huge-2".into(), vec![b'x'; 20 * 1024]));
    let _fleet = discovery_responders(&server, replies);
    let rpc = client(&server);
    let (found, mut identities) = discover_all(&rpc);
    identities.sort();
    assert_eq!(identities, [id("node-0"), id("node-1"), id("node-2")]);
    assert_eq!((found.senders, found.replies, found.dropped), (3, 3, 2));
    assert_eq!(rpc.metrics.discovery_overflow.get(), 2);
}

#[test]
fn discovery_with_nobody_listening_ends_at_the_initial_wait() {
    let server = NatsServer::start();
    let rpc = client(&server);
    let started = Instant::now();
    let found = rpc
        .discover(
            Duration::from_millis(400),
            Duration::from_millis(300),
            Duration::from_secs(2),
            &mut |id| panic!("nobody answered, yet {id} was found"),
        )
        .unwrap();
    assert_eq!(found.senders, 0);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(2),
        "{took:?}"
    );
}
