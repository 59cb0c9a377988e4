//! Routed replies: one wildcard subscription on `provisioning.reply.<md5(caller)>.*`
//! for the whole connection, dispatching each reply by the last subject token (the
//! request id) to whoever waits for it. Thousands of concurrent requests therefore
//! cost no subscribe/unsubscribe round trips (Go opened two NATS connections per
//! RPC try). Nothing is decoded on the dispatch thread: a reply is handed over as
//! bytes and checked by the waiting caller, so a hostile reply cannot stall routing.

#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use parking_lot::Mutex;

/// Where replies to one request id go: a bounded channel (an RPC keeps a few, so a
/// forged reply arriving first cannot hide the real one) or an unbounded one (a
/// discovery wants them all).
type Route = Sender<Vec<u8>>;

/// Counters of what the router saw, for debugging and tests.
#[derive(Debug, Default)]
pub struct RouterStats {
    /// Replies routed to a waiting caller.
    pub routed: AtomicU64,
    /// Replies for no pending request (late, duplicate or forged).
    pub unexpected: AtomicU64,
}

/// The reply router of one connection.
pub struct Router {
    prefix: String,
    routes: Arc<Mutex<HashMap<String, Route>>>,
    stats: Arc<RouterStats>,
    _subscription: nats::Handler,
}

/// A registered request id; unregisters itself when dropped.
pub struct Pending<'a> {
    router: &'a Router,
    id: String,
    /// Reply payloads as they arrive.
    pub replies: Receiver<Vec<u8>>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.router.routes.lock().remove(&self.id);
    }
}

impl Router {
    /// Subscribes to `<prefix>.*` on `nc` and starts dispatching.
    pub fn start(nc: &nats::Connection, prefix: &str) -> std::io::Result<Router> {
        let routes: Arc<Mutex<HashMap<String, Route>>> = Arc::default();
        let stats: Arc<RouterStats> = Arc::default();
        let subscription = nc.subscribe(&format!("{prefix}.*"))?;
        let (r, s) = (Arc::clone(&routes), Arc::clone(&stats));
        let handler = subscription.with_handler(move |msg| {
            if msg.is_no_responders() {
                return Ok(());
            }
            let id = msg.subject.rsplit('.').next().unwrap_or("");
            let route = r.lock().get(id).cloned();
            let delivered = route.is_some_and(|tx| tx.try_send(msg.data).is_ok());
            if delivered {
                s.routed.fetch_add(1, Ordering::Relaxed);
            } else {
                s.unexpected.fetch_add(1, Ordering::Relaxed);
                log::debug!("Ignoring a reply on {} for no pending request", msg.subject);
            }
            Ok(())
        });
        Ok(Router {
            prefix: prefix.to_string(),
            routes,
            stats,
            _subscription: handler,
        })
    }

    /// The reply subject for request `id`.
    pub fn reply_subject(&self, id: &str) -> String {
        format!("{}.{id}", self.prefix)
    }

    /// Registers `id` for a single-target request: up to 8 replies are kept for the
    /// caller to check, later ones dropped.
    pub fn expect_one(&self, id: &str) -> Pending<'_> {
        let (tx, rx) = bounded(8);
        self.routes.lock().insert(id.to_string(), tx);
        Pending {
            router: self,
            id: id.to_string(),
            replies: rx,
        }
    }

    /// Registers `id` for every reply until the returned value is dropped.
    pub fn expect_all(&self, id: &str) -> Pending<'_> {
        let (tx, rx) = unbounded();
        self.routes.lock().insert(id.to_string(), tx);
        Pending {
            router: self,
            id: id.to_string(),
            replies: rx,
        }
    }

    /// What the router saw so far.
    pub fn stats(&self) -> &RouterStats {
        &self.stats
    }

    /// Requests currently waiting for replies.
    pub fn pending(&self) -> usize {
        self.routes.lock().len()
    }
}
