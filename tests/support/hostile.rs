//! A hostile provisioning-mode node: a plain NATS client with exactly the rights a
//! Choria broker gives such a node (it reads every `provisioning.node.>` request and
//! publishes replies, discovery answers and lifecycle events), used to attack the
//! provisioner in `tests/hostile.rs`.
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use choria_provisioner::choria::protocol::mcorpc::{RpcReply, RpcRequestBody, StatusCode};
use choria_provisioner::choria::protocol::{self, DecodedRequest};
use choria_provisioner::crypto::ids;
use parking_lot::Mutex;

/// What the attacker saw and did.
#[derive(Debug, Default)]
pub struct Loot {
    /// Requests seen, as `identity agent#action`.
    pub seen: Mutex<Vec<String>>,
    /// Forged replies sent.
    pub forged: AtomicU64,
    /// `configure` requests seen, with their `key` and `ecdh_public` (identity, data).
    pub configures: Mutex<Vec<(String, serde_json::Value)>>,
}

/// A startup event announcing `identity` (any string) for `component`, stamped now,
/// in the flat Choria format.
pub fn startup_event(identity: &str, component: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "protocol": "io.choria.lifecycle.v1.startup",
        "id": ids::uuid_v4(),
        "identity": identity,
        "component": component,
        "timestamp": choria_provisioner::clock::unix_now(),
        "version": "0.30.2",
    }))
    .unwrap()
}

/// A hostile node's connection.
pub struct Hostile {
    nc: nats::Connection,
    /// What it saw.
    pub loot: Arc<Loot>,
}

/// A forgery: given the node a request was for, the request and its RPC body, the
/// reply to send in that node's name (`None`: stay quiet).
pub type Forger = dyn Fn(&str, &DecodedRequest, &RpcRequestBody) -> Option<RpcReply> + Send + Sync;

impl Hostile {
    /// Connects to `url` (optionally as `user`/`password`).
    pub fn connect(url: &str, user: Option<(&str, &str)>) -> Hostile {
        let options = match user {
            Some((u, p)) => nats::Options::with_user_pass(u, p),
            None => nats::Options::new(),
        };
        Hostile {
            nc: options
                .with_name("hostile")
                .connect(url)
                .expect("hostile connect"),
            loot: Arc::default(),
        }
    }

    /// The raw connection.
    pub fn nc(&self) -> &nats::Connection {
        &self.nc
    }

    /// Answers every discovery request with one reply per sender in `senders`
    /// (arbitrary strings, JSON-escaped into the envelope as Go would).
    pub fn answer_discovery(&self, senders: Vec<String>) -> nats::Handler {
        let publisher = self.nc.clone();
        self.nc
            .subscribe("provisioning.broadcast.agent.discovery")
            .unwrap()
            .with_handler(move |msg| {
                let Ok(request) = protocol::decode_request(&msg.data) else {
                    return Ok(());
                };
                for sender in &senders {
                    let payload = protocol::encode_reply(
                        &request,
                        sender,
                        protocol::DISCOVERY_REPLY,
                        choria_provisioner::clock::unix_nanos(),
                        None,
                    );
                    publisher.publish(&request.reply_to, payload)?;
                }
                Ok(())
            })
    }

    /// Publishes a startup event announcing `identity` (any string) for `component`.
    pub fn startup_event(&self, identity: &str, component: &str) {
        self.publish(
            &format!("choria.lifecycle.event.startup.{component}"),
            &startup_event(identity, component),
        );
    }

    /// Publishes raw bytes.
    pub fn publish(&self, subject: &str, payload: &[u8]) {
        self.nc.publish(subject, payload).unwrap();
    }

    /// Flushes what was published.
    pub fn flush(&self) {
        self.nc.flush_timeout(Duration::from_secs(5)).unwrap();
    }

    /// [`Hostile::race`] on one action: answers every `action` request with what
    /// `forge` makes for the asked node, and flushes before returning.
    pub fn answer(
        &self,
        action: &'static str,
        forge: impl Fn(&str) -> RpcReply + Send + Sync + 'static,
    ) -> nats::Handler {
        let race = self.race(Box::new(move |target, _, body| {
            (body.action == action).then(|| forge(target))
        }));
        self.flush();
        race
    }

    /// Reads every request to every node (as the broker allows) and answers those for
    /// which `forge` returns a reply, in the asked node's name, before or after the
    /// real node. Records what it saw in [`Hostile::loot`].
    pub fn race(&self, forge: Box<Forger>) -> nats::Handler {
        let publisher = self.nc.clone();
        let loot = Arc::clone(&self.loot);
        self.nc
            .subscribe("provisioning.node.>")
            .unwrap()
            .with_handler(move |msg| {
                let target = msg.subject.trim_start_matches("provisioning.node.");
                let Ok(request) = protocol::decode_request(&msg.data) else {
                    return Ok(());
                };
                let Ok(body) = RpcRequestBody::decode(&request.body) else {
                    return Ok(());
                };
                loot.seen
                    .lock()
                    .push(format!("{target} {}#{}", request.agent, body.action));
                if body.action == "configure" {
                    loot.configures
                        .lock()
                        .push((target.to_string(), body.data.clone()));
                }
                if let Some(reply) = forge(target, &request, &body) {
                    let payload = protocol::encode_reply(
                        &request,
                        target,
                        &reply.encode(),
                        choria_provisioner::clock::unix_nanos(),
                        None,
                    );
                    loot.forged.fetch_add(1, Ordering::Relaxed);
                    publisher.publish(&request.reply_to, payload)?;
                }
                Ok(())
            })
    }
}

/// Publishes startup events for made-up identities (`ghost-<n>.example.net`),
/// `per_second` of them, until stopped or dropped (two minutes at most).
pub struct GhostFlood {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl GhostFlood {
    pub fn start(url: &str, per_second: u32) -> GhostFlood {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let sent_so_far = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&sent_so_far);
        let attacker = Hostile::connect(url, None);
        let thread = std::thread::spawn(move || {
            let gap = Duration::from_secs(1) / per_second;
            let started = Instant::now();
            let mut sent = 0u32;
            // At most two minutes of events, whatever the test does; paced from the
            // start, so that the time a publish takes does not lower the rate.
            while !flag.load(Ordering::Relaxed) && sent < 120 * per_second {
                attacker.startup_event(
                    &format!("ghost-{sent}.example.net"),
                    "provision_mode_server",
                );
                sent += 1;
                counted.store(u64::from(sent), Ordering::Relaxed);
                if sent % 10 == 0 || per_second <= 100 {
                    attacker.flush();
                }
                if let Some(wait) = (started + gap * sent).checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
            u64::from(sent)
        });
        GhostFlood {
            stop,
            sent: sent_so_far,
            thread: Some(thread),
        }
    }

    /// Waits until `n` ghosts were announced (at most `within`); how many were.
    pub fn until(&self, n: u64, within: Duration) -> u64 {
        let deadline = Instant::now() + within;
        while self.sent.load(Ordering::Relaxed) < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.sent.load(Ordering::Relaxed)
    }

    /// Stops the flood; how many ghosts it announced.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map_or(0, |t| t.join().unwrap())
    }
}

impl Drop for GhostFlood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// An OK reply with `data`.
pub fn ok(action: &str, data: serde_json::Value) -> RpcReply {
    RpcReply::new(action, StatusCode::Ok, "OK", data)
}

#[allow(unused_imports)] // where the hostile tests have always found it
pub use super::RawPublisher;
