//! Broadcast discovery: one request to every node with the `choria_provision`
//! agent, and the senders of the replies collected within a sliding window.

use super::*;
use crate::choria::identity::Identity;
use crate::choria::protocol::{self, scratch};
use crate::choria::router::Routed;
use crate::untrusted::shown;
use crossbeam_channel::bounded;
use std::collections::HashSet;
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
/// high; past it (a flood) they are dropped and counted.
const DISCOVERY_BACKLOG: usize = 65_536;

/// The most bytes of discovery replies waiting to be decoded.
const DISCOVERY_BYTES_BACKLOG: usize = 32 * 1024 * 1024;

/// What one broadcast discovery found.
#[derive(Debug, Default)]
pub struct Discovered {
    /// Distinct, valid identities in the order they answered.
    pub identities: Vec<Identity>,
    /// Replies received (valid or not).
    pub replies: u64,
    /// Replies refused (undecodable, or an invalid identity).
    pub refused: u64,
    /// How long the discovery listened.
    pub took: Duration,
}

/// What one discovery collected so far.
#[derive(Default)]
struct Collected {
    seen: HashSet<Identity>,
    order: Vec<Identity>,
    replies: u64,
    refused: u64,
}

impl RpcClient {
    /// Broadcast discovery of nodes with the `choria_provision` agent: collects the
    /// transport senders until `window` passes without a new one (after the first),
    /// `initial` passes without any, or `limit` is reached, whatever keeps arriving.
    /// The reader thread only hands each reply's bytes over (at most 65,536 replies
    /// and 32 MiB wait); this thread decodes and validates the senders: invalid ones
    /// are counted and dropped, and at most `MAX_DISCOVERY_SENDERS` are kept.
    pub fn discover(
        &self,
        initial: Duration,
        window: Duration,
        limit: Duration,
    ) -> Result<Discovered, RpcError> {
        let id = protocol::new_request_id(self.protocol);
        // The reader thread only checks a reply's size and hands its bytes over; this
        // thread decodes them, so a flood of large replies delays no other reply.
        let (raw_tx, raw) = bounded::<Vec<u8>>(DISCOVERY_BACKLOG);
        let waiting_bytes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let sink = {
            let waiting_bytes = Arc::clone(&waiting_bytes);
            let metrics = Arc::clone(&self.metrics);
            Arc::new(move |routed: Routed| {
                let Routed::Reply(bytes) = routed else {
                    return true;
                };
                let len = bytes.len();
                let over = len > MAX_DISCOVERY_REPLY
                    || waiting_bytes.fetch_add(len, Ordering::Relaxed) + len
                        > DISCOVERY_BYTES_BACKLOG;
                if over || raw_tx.try_send(bytes).is_err() {
                    if len <= MAX_DISCOVERY_REPLY {
                        waiting_bytes.fetch_sub(len, Ordering::Relaxed);
                    }
                    metrics.discovery_overflow.inc();
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
        let mut c = Collected::default();
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
            if self.collect_sender(&mut c, &bytes) {
                wait = window;
            }
        }
        drop(registration);
        // What came before the registration was dropped and is still waiting.
        while let Ok(bytes) = raw.try_recv() {
            self.collect_sender(&mut c, &bytes);
        }
        Ok(Discovered {
            identities: c.order,
            replies: c.replies,
            refused: c.refused,
            took: started.elapsed(),
        })
    }

    /// Decodes one discovery reply's sender into `c`; true when it is a new node.
    fn collect_sender(&self, c: &mut Collected, bytes: &[u8]) -> bool {
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
            Ok(identity) if c.seen.contains(&identity) => false,
            Ok(_) if c.seen.len() >= MAX_DISCOVERY_SENDERS => {
                self.metrics.discovery_overflow.inc();
                false
            }
            Ok(identity) => {
                c.seen.insert(identity.clone());
                c.order.push(identity);
                true
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
