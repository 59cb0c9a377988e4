//! Routed replies: one wildcard subscription on `provisioning.reply.<md5(caller)>.*`
//! for the whole connection. The connection's reader thread looks up the last subject
//! token (the request id) and hands the reply straight to whoever waits for it, so a
//! reply wakes exactly one thread: its caller. Thousands of concurrent requests cost
//! no subscribe/unsubscribe round trips (Go opened two NATS connections per RPC try).
//!
//! Nothing is decoded on the reader thread: a reply is handed over as bytes and
//! checked by its caller, and every route is a bounded [`Mailbox`] that never blocks
//! the reader, so a flood of replies (forged or not) can neither stall the reader nor
//! grow memory: what does not fit is counted and dropped, and the mailbox remembers
//! how many it dropped, since one of them may have been the node's own reply (its
//! caller treats any drop as a contest: `rpc.rs`). A caller waits on its
//! mailbox without spinning: one futex wake per reply, no `sched_yield` loop (a
//! crossbeam channel spins and yields before it parks, which cost more CPU than the
//! reply itself with a few dozen workers waiting).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::bus::{Bus, Delivered, Subscription};
use super::subject::{Subject, SubjectError, SubjectFilter};

/// What the router hands to a waiting caller.
#[derive(Debug)]
pub enum Routed {
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
pub type Sink = Arc<dyn Fn(Routed) -> bool + Send + Sync>;

/// The replies to one request, for its caller: at most `capacity` wait; the reader
/// thread adds without blocking, the caller waits without spinning. What does not fit
/// is dropped unread and counted, for the caller to see ([`Mailbox::take_dropped`]).
pub struct Mailbox {
    inbox: Mutex<Inbox>,
    capacity: usize,
    arrived: Condvar,
}

/// A mailbox's contents, under its lock.
struct Inbox {
    queue: VecDeque<Routed>,
    /// Replies dropped because the queue was full, since the caller last asked.
    dropped: u64,
}

impl Mailbox {
    fn new(capacity: usize) -> Mailbox {
        Mailbox {
            // Made here, on the caller's thread, which also frees it: left to the first
            // push it was allocated on the reader thread and freed by the caller, the
            // pattern that sends glibc's malloc down its slow path.
            inbox: Mutex::new(Inbox {
                queue: VecDeque::with_capacity(capacity.clamp(1, 4)),
                dropped: 0,
            }),
            capacity: capacity.max(1),
            arrived: Condvar::new(),
        }
    }

    /// Adds `routed` unless the mailbox is full (then it is dropped and counted); wakes
    /// the caller if it waits.
    fn offer(&self, routed: Routed) -> bool {
        let mut inbox = self.inbox.lock();
        if inbox.queue.len() >= self.capacity {
            inbox.dropped += 1;
            return false;
        }
        inbox.queue.push_back(routed);
        drop(inbox);
        self.arrived.notify_one();
        true
    }

    /// How many replies were dropped unread since the last call: each may have been
    /// the one that mattered.
    pub fn take_dropped(&self) -> u64 {
        std::mem::take(&mut self.inbox.lock().dropped)
    }

    /// The next reply, waiting at most `timeout` for one.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Routed> {
        let deadline = Instant::now().checked_add(timeout);
        let mut inbox = self.inbox.lock();
        loop {
            if let Some(routed) = inbox.queue.pop_front() {
                return Some(routed);
            }
            let timed_out = match deadline {
                Some(deadline) => self.arrived.wait_until(&mut inbox, deadline).timed_out(),
                None => {
                    self.arrived.wait(&mut inbox);
                    false
                }
            };
            if timed_out {
                return inbox.queue.pop_front();
            }
        }
    }

    /// The next reply if one is there.
    pub fn try_recv(&self) -> Option<Routed> {
        self.inbox.lock().queue.pop_front()
    }
}

/// Where the replies to one request id go.
#[derive(Clone)]
enum Target {
    /// A mailbox a caller waits on.
    Mailbox(Arc<Mailbox>),
    /// A function run on the reader thread.
    Sink(Sink),
}

type Routes = Mutex<HashMap<RouteKey, Target>>;

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

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("prefix", &self.prefix)
            .field("pending", &self.pending())
            .finish()
    }
}

/// A request id registered with a [`Sink`]; unregisters itself when dropped.
pub struct Collecting<'a> {
    router: &'a Router,
    key: Option<RouteKey>,
}

impl Drop for Collecting<'_> {
    fn drop(&mut self) {
        self.router.unregister(self.key.as_ref());
    }
}

/// A request id registered with a [`Sink`] that owns its share of the routes, so
/// that it can live with a parked attempt rather than on a caller's stack;
/// unregisters itself when dropped.
pub struct Route {
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

/// A registered request id; unregisters itself when dropped.
pub struct Pending<'a> {
    router: &'a Router,
    /// `None` for an id too long to register (never one of ours): nothing is routed.
    key: Option<RouteKey>,
    /// Replies as they arrive (at most the capacity given when registering; later
    /// ones are dropped and counted).
    pub replies: Arc<Mailbox>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.router.unregister(self.key.as_ref());
    }
}

impl Pending<'_> {
    /// The request id (empty for one too long to register).
    pub fn id(&self) -> &str {
        self.key.as_ref().map_or("", RouteKey::as_str)
    }
}

impl Router {
    /// Subscribes to `<prefix>.*` on `bus` and starts routing.
    pub fn start(bus: &Bus, prefix: Subject) -> std::io::Result<Router> {
        let routes: Arc<Routes> = Arc::default();
        let stats: Arc<RouterStats> = Arc::default();
        let filter = SubjectFilter::new(format!("{prefix}.*"))
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let (r, s) = (Arc::clone(&routes), Arc::clone(&stats));
        let subscription = bus.subscribe(&filter, None, move |msg| route(&r, &s, msg))?;
        Ok(Router {
            prefix,
            routes,
            stats,
            _subscription: subscription,
        })
    }

    /// The reply subject for request `id`.
    pub fn reply_subject(&self, id: &str) -> Result<Subject, SubjectError> {
        self.prefix.child(id)
    }

    /// Registers `id`; up to `capacity` replies wait for the caller, later ones are
    /// dropped until it reads some.
    pub fn expect(&self, id: &str, capacity: usize) -> Pending<'_> {
        let mailbox = Arc::new(Mailbox::new(capacity));
        let key = self.register(id, Target::Mailbox(Arc::clone(&mailbox)));
        Pending {
            router: self,
            key,
            replies: mailbox,
        }
    }

    /// Registers `id` with `sink`, which takes every reply on the reader thread until
    /// the returned value is dropped. `sink` must return at once.
    pub fn collect(&self, id: &str, sink: Sink) -> Collecting<'_> {
        let key = self.register(id, Target::Sink(sink));
        Collecting { router: self, key }
    }

    /// Registers `id` with `sink` until the returned [`Route`] is dropped; `sink` runs
    /// on the reader thread and must return at once.
    pub fn route(&self, id: &str, sink: Sink) -> Route {
        let key = self.register(id, Target::Sink(sink));
        Route {
            routes: Arc::clone(&self.routes),
            key,
        }
    }

    /// Routes `id`'s replies to `route`; its key, or `None` (and nothing routed) for an
    /// id longer than any this crate makes.
    fn register(&self, id: &str, route: Target) -> Option<RouteKey> {
        let key = RouteKey::new(id);
        match key {
            Some(key) => {
                self.routes.lock().insert(key, route);
            }
            None => log::error!("Request id {id:?} is too long to route its replies"),
        }
        key
    }

    fn unregister(&self, key: Option<&RouteKey>) {
        if let Some(key) = key {
            self.routes.lock().remove(key);
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
        Some(Target::Mailbox(mailbox)) => {
            if mailbox.offer(routed) {
                stats.routed.fetch_add(1, Ordering::Relaxed);
            } else {
                stats.overflow.fetch_add(1, Ordering::Relaxed);
            }
        }
        Some(Target::Sink(sink)) => {
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
    fn a_full_mailbox_drops_what_does_not_fit_and_says_how_many_once() {
        let mailbox = Mailbox::new(2);
        for n in 0..5u8 {
            mailbox.offer(Routed::Reply(vec![n]));
        }
        assert_eq!(mailbox.take_dropped(), 3);
        assert_eq!(mailbox.take_dropped(), 0, "told once");
        // The first two are kept, in order; the dropped are gone.
        for n in 0..2u8 {
            assert!(matches!(mailbox.try_recv(), Some(Routed::Reply(b)) if b == [n]));
        }
        assert!(mailbox.try_recv().is_none());
        assert!(mailbox.offer(Routed::NoResponders), "room again once read");
        assert_eq!(mailbox.take_dropped(), 0);
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
