//! Broadcast discovery: one request to every node with the `choria_provision`
//! agent, and the senders of the replies collected within a sliding window.

use super::*;
use crate::choria::identity::Identity;
use crate::choria::protocol::{self, scratch};
use crate::choria::router::Routed;
use crate::untrusted::shown;
use crossbeam_channel::unbounded;
use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::hash::BuildHasher;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Distinct senders one discovery keeps; more than a fleet of 50,000 can send, so
/// only a flood of made-up identities reaches it.
pub(crate) const MAX_DISCOVERY_SENDERS: usize = 100_000;

/// The largest discovery reply read; a real one is under 2 KiB.
const MAX_DISCOVERY_REPLY: usize = 16 * 1024;

/// The most discovery replies waiting to be decoded: the discovering thread decodes
/// a reply in a few microseconds, so an honest fleet's answers never pile up this
/// high; past it (a flood) they are dropped and counted. Counted on an unbounded
/// channel rather than made a bounded one, which would allocate every slot (2 MiB)
/// for each discovery, at the moment a whole fleet's replies are in memory too.
const DISCOVERY_BACKLOG: usize = 65_536;

/// The most bytes of discovery replies waiting to be decoded: a fleet's burst of
/// replies waits here while the discovering thread decodes them, and 4 MiB hold
/// about 7,000 replies of a real node (about 600 bytes each). Past it, replies are
/// dropped and counted, and the fleet discovers again early for their nodes: a busy
/// moment costs a node a few seconds, never memory beyond this.
const DISCOVERY_BYTES_BACKLOG: usize = 4 * 1024 * 1024;

/// What one broadcast discovery heard (its senders went to the caller as they came).
#[derive(Debug, Default)]
pub struct Discovered {
    /// Distinct, valid senders handed to the caller.
    pub senders: u64,
    /// Replies received (valid or not).
    pub replies: u64,
    /// Replies refused (undecodable, or an invalid identity).
    pub refused: u64,
    /// Replies dropped unread: too large, or beyond the backlog while the
    /// discovering thread was behind. Their senders may not have been heard.
    pub dropped: u64,
    /// How long the discovery listened.
    pub took: Duration,
}

/// What one discovery collected so far. Senders are told apart by a keyed hash, not
/// kept: a discovery of 100,000 nodes holds 8 bytes a sender, not a second copy of
/// every identity the fleet already holds. The key is random per discovery, so
/// nobody can make two identities collide; by chance, two of 100,000 senders do
/// with a probability near 3 in 10^10, and the one left out answers the next one.
struct Collected {
    keys: RandomState,
    seen: HashSet<u64>,
    replies: u64,
    refused: u64,
}

impl RpcClient {
    /// Broadcast discovery of nodes with the `choria_provision` agent: hands each
    /// new transport sender to `found` as it comes, until `window` passes without a
    /// new one (after the first), `initial` passes without any, or `limit` is
    /// reached, whatever keeps arriving. The reader thread only hands each reply's
    /// bytes over (at most 65,536 replies and 4 MiB wait); this thread decodes and
    /// validates the senders: invalid ones are counted and dropped, and at most
    /// `MAX_DISCOVERY_SENDERS` distinct ones are taken.
    pub fn discover(
        &self,
        initial: Duration,
        window: Duration,
        limit: Duration,
        found: &mut dyn FnMut(Identity),
    ) -> Result<Discovered, RpcError> {
        let id = protocol::new_request_id(self.protocol);
        // The reader thread only checks a reply's size and hands its bytes over; this
        // thread decodes them, so a flood of large replies delays no other reply.
        let (raw_tx, raw) = unbounded::<Vec<u8>>();
        let waiting_bytes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let sink = {
            let (waiting_bytes, dropped) = (Arc::clone(&waiting_bytes), Arc::clone(&dropped));
            let metrics = Arc::clone(&self.metrics);
            Arc::new(move |routed: Routed| {
                let Routed::Reply(bytes) = routed else {
                    return true;
                };
                let len = bytes.len();
                let over = len > MAX_DISCOVERY_REPLY
                    || waiting_bytes.fetch_add(len, Ordering::Relaxed) + len
                        > DISCOVERY_BYTES_BACKLOG;
                // The router's thread is the only sender: the count cannot pass the
                // bound between the check and the send.
                if over || raw_tx.len() >= DISCOVERY_BACKLOG || raw_tx.send(bytes).is_err() {
                    if len <= MAX_DISCOVERY_REPLY {
                        waiting_bytes.fetch_sub(len, Ordering::Relaxed);
                    }
                    metrics.discovery_overflow.inc();
                    dropped.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
                true
            })
        };
        let registration = self.router.route(&id, sink);
        let started = Instant::now();
        let spec = self.spec(
            "discovery",
            &self.provision_filter,
            protocol::DISCOVERY_REQUEST,
            &id,
        );
        scratch::with(&REQUEST_BUFFERS, |[_, payload]| {
            self.send(&spec, payload, &self.discovery_subject, limit, Flush::Now)
        })?;
        let mut c = Collected {
            keys: RandomState::new(),
            seen: HashSet::new(),
            replies: 0,
            refused: 0,
        };
        let mut wait = initial.min(limit);
        loop {
            let left = limit.saturating_sub(started.elapsed());
            if left.is_zero() {
                break;
            }
            let Ok(bytes) = raw.recv_timeout(wait.min(left)) else {
                break;
            };
            waiting_bytes.fetch_sub(bytes.len(), Ordering::Relaxed);
            if self.collect_sender(&mut c, &bytes, found) {
                wait = window;
            }
        }
        drop(registration);
        // What came before the registration was dropped and is still waiting.
        while let Ok(bytes) = raw.try_recv() {
            self.collect_sender(&mut c, &bytes, found);
        }
        Ok(Discovered {
            senders: c.seen.len() as u64,
            replies: c.replies,
            refused: c.refused,
            dropped: dropped.load(Ordering::Relaxed),
            took: started.elapsed(),
        })
    }

    /// Decodes one discovery reply's sender and hands it to `found` when it is new
    /// to this discovery; true then.
    fn collect_sender(
        &self,
        c: &mut Collected,
        bytes: &[u8],
        found: &mut dyn FnMut(Identity),
    ) -> bool {
        c.replies += 1;
        let sender = match protocol::transport_sender(bytes) {
            Ok(sender) => sender,
            Err(e) => {
                c.refused += 1;
                self.metrics
                    .refused_identities
                    .with_label_values(&["discovery", "undecodable"])
                    .inc();
                log::debug!("Ignoring an undecodable discovery reply: {e}");
                return false;
            }
        };
        match Identity::parse(&sender) {
            Ok(identity) => {
                let key = c.keys.hash_one(identity.as_str());
                if c.seen.contains(&key) {
                    false
                } else if c.seen.len() >= MAX_DISCOVERY_SENDERS {
                    self.metrics.discovery_overflow.inc();
                    false
                } else {
                    c.seen.insert(key);
                    found(identity);
                    true
                }
            }
            Err(e) => {
                c.refused += 1;
                self.metrics
                    .refused_identities
                    .with_label_values(&["discovery", e.reason()])
                    .inc();
                if let Some(held) = self.warn_identity.ready() {
                    log::warn!(
                        "Refused a discovery reply from {:?}: {e} ({held} more refused since the last warning)",
                        shown(&sender)
                    );
                }
                false
            }
        }
    }
}
