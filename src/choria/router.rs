//! Routed replies: one wildcard subscription on `provisioning.reply.<md5(caller)>.*`
//! for the whole connection. The connection's reader thread looks up the last subject
//! token (the request id) and hands the reply to the [`Sink`] registered for it, so
//! thousands of concurrent requests cost no subscribe/unsubscribe round trips (Go
//! opened two NATS connections per RPC try).
//!
//! Nothing is decoded on the reader thread: a reply is handed over as bytes and
//! checked by whoever registered its route. A sink must return at once and never
//! block the reader (the attempts' driver puts the bytes in a bounded queue, and
//! discovery in a bounded buffer); what it refuses is counted here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::bus::{Bus, Delivered, Subscription};
use super::subject::{Subject, SubjectError, SubjectFilter};

/// What the router hands to a waiting caller.
#[derive(Debug)]
pub(crate) enum Routed {
    /// A reply's payload, unchecked.
    Reply(Vec<u8>),
    /// nats-server's "no responders": nobody subscribes to the request's subject, so no
    /// node will ever answer it.
    NoResponders,
}

/// Counters of what the router saw.
#[derive(Debug, Default)]
pub struct RouterStats {
    /// Replies routed to a waiting caller.
    pub routed: AtomicU64,
    /// Replies for no pending request (late, duplicate or forged).
    pub unexpected: AtomicU64,
    /// Replies dropped because their caller's channel was full (a flood).
    pub overflow: AtomicU64,
}

/// A function that takes a request's replies on the reader thread (discovery uses
/// one, so that its thousands of replies need no channel of their size); it returns
/// false for a reply it dropped (a full bounded inbox), which the router counts.
pub(crate) type Sink = Arc<dyn Fn(Routed) -> bool + Send + Sync>;

/// Where the replies to each request id go.
type Routes = Mutex<HashMap<RouteKey, Sink>>;

/// Most bytes of a request id the router registers: v1's ids are 32 hex digits and
/// v2's 27-character KSUIDs.
const MAX_ID: usize = 32;

/// A request id held inline, so that registering one allocates nothing; a reply
/// subject's last token longer than [`MAX_ID`] is no request of ours.
#[derive(Clone, Copy)]
struct RouteKey {
    len: u8,
    bytes: [u8; MAX_ID],
}

impl RouteKey {
    /// `id` as a key, or `None` when it is longer than [`MAX_ID`].
    fn new(id: &str) -> Option<RouteKey> {
        let mut bytes = [0u8; MAX_ID];
        bytes.get_mut(..id.len())?.copy_from_slice(id.as_bytes());
        Some(RouteKey {
            len: id.len() as u8,
            bytes,
        })
    }

    /// The id's bytes: what the map hashes and compares, on the reader thread for
    /// every reply, without checking them as UTF-8 again.
    fn bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    fn as_str(&self) -> &str {
        // Made from a `&str` whole.
        std::str::from_utf8(self.bytes()).unwrap_or_default()
    }
}

impl PartialEq for RouteKey {
    fn eq(&self, other: &RouteKey) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for RouteKey {}

impl std::hash::Hash for RouteKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.bytes().hash(state)
    }
}

/// The reply router of one connection.
pub struct Router {
    prefix: Subject,
    routes: Arc<Routes>,
    stats: Arc<RouterStats>,
    _subscription: Subscription,
}

/// A request id registered with a [`Sink`]; it owns its share of the routes, so
/// that it can live with a parked attempt, and unregisters itself when dropped.
pub(crate) struct Route {
    routes: Arc<Routes>,
    key: Option<RouteKey>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("id", &self.key.as_ref().map(RouteKey::as_str))
            .finish()
    }
}

impl Drop for Route {
    fn drop(&mut self) {
        if let Some(key) = &self.key {
            self.routes.lock().remove(key);
        }
    }
}

impl Router {
    /// Subscribes to `<prefix>.*` on `bus` and starts routing; a message whose header
    /// block was read past (a flood) is counted in `oversized` and dropped.
    pub(crate) fn start(
        bus: &Bus,
        prefix: Subject,
        oversized: prometheus::IntCounter,
    ) -> std::io::Result<Router> {
        let routes: Arc<Routes> = Arc::default();
        let stats: Arc<RouterStats> = Arc::default();
        let filter = SubjectFilter::new(format!("{prefix}.*"))
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let (r, s) = (Arc::clone(&routes), Arc::clone(&stats));
        let subscription = bus.subscribe(&filter, None, move |msg| {
            if msg.oversized_headers {
                // A flood's, never a node's: nothing of Choria's has a header block.
                oversized.inc();
                return;
            }
            route(&r, &s, msg)
        })?;
        Ok(Router {
            prefix,
            routes,
            stats,
            _subscription: subscription,
        })
    }

    /// The reply subject for request `id`.
    pub(crate) fn reply_subject(&self, id: &str) -> Result<Subject, SubjectError> {
        self.prefix.child(id)
    }

    /// Registers `id` with `sink` until the returned [`Route`] is dropped; `sink` runs
    /// on the reader thread and must return at once.
    pub(crate) fn route(&self, id: &str, sink: Sink) -> Route {
        let key = RouteKey::new(id);
        match key {
            Some(key) => {
                self.routes.lock().insert(key, sink);
            }
            None => log::error!("Request id {id:?} is too long to route its replies"),
        }
        Route {
            routes: Arc::clone(&self.routes),
            key,
        }
    }

    /// What the router saw so far.
    pub fn stats(&self) -> &RouterStats {
        &self.stats
    }

    /// Requests currently waiting for replies.
    pub(crate) fn pending(&self) -> usize {
        self.routes.lock().len()
    }
}

/// Runs on the reader thread: one map lookup and one non-blocking hand-over.
fn route(routes: &Routes, stats: &RouterStats, msg: Delivered) {
    let id = msg.subject.rsplit('.').next().unwrap_or("");
    let routed = if msg.no_responders {
        Routed::NoResponders
    } else {
        Routed::Reply(msg.data)
    };
    // Cloned out so that the lock is not held while handing over or sinking.
    let route = RouteKey::new(id).and_then(|key| routes.lock().get(&key).cloned());
    match route {
        Some(sink) => {
            if sink(routed) {
                stats.routed.fetch_add(1, Ordering::Relaxed);
            } else {
                stats.overflow.fetch_add(1, Ordering::Relaxed);
            }
        }
        None => {
            stats.unexpected.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choria::protocol::{new_request_id, Protocol};

    #[test]
    fn every_request_id_this_crate_makes_fits_a_route_key_and_reads_back() {
        for protocol in [Protocol::V1, Protocol::V2] {
            for _ in 0..100 {
                let id = new_request_id(protocol);
                let key = RouteKey::new(&id).expect("fits");
                assert_eq!(key.as_str(), id);
            }
        }
    }

    #[test]
    fn route_keys_are_equal_and_hash_alike_by_their_text_and_a_longer_token_is_none() {
        use std::collections::HashSet;
        let a = RouteKey::new("abc").unwrap();
        let keys: HashSet<RouteKey> = [
            a,
            RouteKey::new("abcd").unwrap(),
            RouteKey::new("").unwrap(),
        ]
        .into_iter()
        .collect();
        assert_eq!(keys.len(), 3);
        assert!(keys.contains(&RouteKey::new("abc").unwrap()));
        assert!(!keys.contains(&RouteKey::new("ab").unwrap()));
        assert!(RouteKey::new(&"x".repeat(MAX_ID)).is_some());
        assert!(RouteKey::new(&"x".repeat(MAX_ID + 1)).is_none());
        // A multi-byte character whose bytes straddle the limit is refused whole.
        let straddling = format!("{}é", "x".repeat(MAX_ID - 1));
        assert!(RouteKey::new(&straddling).is_none());
    }
}
