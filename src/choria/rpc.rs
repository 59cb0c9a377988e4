//! Direct RPC to one node and broadcast discovery, over the daemon's one connection.
//!
//! A request goes to `provisioning.node.<identity>` with the reply subject
//! `provisioning.reply.<md5(callerid)>.<requestid>` both in the Choria transport
//! header (where servers reply) and as the NATS reply subject, registered with the
//! `Router` before publishing. The NATS reply subject makes nats-server answer "no
//! responders" at once when no server subscribes to the node's subject, so a made-up
//! identity costs one round trip instead of a worker's timeouts.
//!
//! A reply is accepted only if its envelope names the request id and the identity
//! that was asked; anything else is counted and ignored while the caller keeps
//! waiting, and the deadline is checked on every message, so no flood extends a call.
//! A provisioning-mode node can read every request and answer in any node's name, so
//! an accepted reply comes with a [`Watch`]: the caller keeps listening and, before it
//! trusts what the node said, asks whether a second, different reply came in the
//! same name ([`Watch::settle`]). A request keeps at most 8 replies for its caller;
//! one dropped unread because more came may have been the node's own, pushed out by
//! a forger's copies, so any drop contests the request too (`Contest::Flooded`).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::bus::Bus;
use super::client_config::ClientConfig;
use super::connector::{redact_url, Connector};
use super::identity::Identity;
use super::protocol::mcorpc::RequestData;
use super::protocol::{self, scratch, Credentials, Filter, Protocol, RequestSpec};
use super::router::{Pending, Route, Routed, Router, Sink};
use super::subject::{Subject, SubjectError};
use crate::metrics::Metrics;
use crate::throttle::Throttle;
use crate::untrusted::shown;

/// The collective provisioning happens in.
pub const COLLECTIVE: &str = "provisioning";

/// From this many requests in flight on, a request is not flushed on its own: each
/// flush is a PING/PONG round trip that blocks the caller, while the nats flusher
/// thread writes everything published within 5 ms in one go. A lone request (the
/// usual case on a quiet fleet) still leaves at once.
const FLUSH_BELOW_IN_FLIGHT: usize = 8;

/// The agent every provisioning RPC addresses, and the one discovery looks for.
pub(crate) const PROVISION_AGENT: &str = "choria_provision";

/// The agent of the inventory request.
pub(crate) const RPCUTIL_AGENT: &str = "rpcutil";

thread_local! {
    /// The RPC body and the NATS payload of the request this thread is sending.
    static REQUEST_BUFFERS: std::cell::RefCell<[Vec<u8>; 2]> =
        const { std::cell::RefCell::new([Vec::new(), Vec::new()]) };
}

/// How long a lone request's flush may wait for the broker's PONG.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Replies kept per direct request: the real one plus a few forged or duplicated ones.
const REPLIES_PER_REQUEST: usize = 8;

/// Messages a probe's mailbox keeps (`RpcClient::nobody_listens`): the broker's one
/// status, and room for what else is sent there before its PONG.
const PROBE_REPLIES: usize = 4;

mod contested;
mod discovery;
pub(crate) use contested::{Contest, Contested};

/// A decoded RPC reply from one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The node that answered (envelope sender).
    pub sender: String,
    /// MCollective status code (0 OK).
    pub statuscode: u64,
    /// Status message (`OK` or the refusal).
    pub statusmsg: String,
    /// The action's output: a JSON object, each action reading its own fields.
    pub data: protocol::mcorpc::ReplyData,
}

/// Why an RPC try failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcError {
    /// The request could not be built.
    Encode(String),
    /// A subject could not be made (never for a validated identity).
    Subject(SubjectError),
    /// The request could not be published.
    Publish(String),
    /// nats-server said nobody subscribes to the node's subject: no server is there.
    NoResponders {
        /// The node asked.
        identity: Identity,
    },
    /// No acceptable reply within the timeout (Go: `received 0 responses ...`).
    NoReply {
        /// The node asked.
        identity: Identity,
        /// How long we waited.
        waited: Duration,
        /// Replies that came but were rejected, with the last reason.
        rejected: Option<(u64, String)>,
    },
    /// Replies were dropped unread while waiting (more came than a node sends): someone
    /// else answers in the node's name, and no reply to the request can be trusted.
    Contested(Contested),
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpcError::Contested(c) => c.fmt(f),
            RpcError::Encode(e) => write!(f, "could not encode the request: {e}"),
            RpcError::Subject(e) => write!(f, "could not address the request: {e}"),
            RpcError::Publish(e) => write!(f, "could not publish the request: {e}"),
            RpcError::NoResponders { identity } => write!(
                f,
                "no server listens for {identity}: nobody subscribes to {COLLECTIVE}.node.{identity}"
            ),
            RpcError::NoReply {
                identity,
                waited,
                rejected: None,
            } => write!(
                f,
                "received 0 responses while expecting a response from {identity} (waited {:.1}s)",
                waited.as_secs_f64()
            ),
            RpcError::NoReply {
                identity,
                waited,
                rejected: Some((n, why)),
            } => write!(
                f,
                "received 0 valid responses while expecting a response from {identity} (waited {:.1}s; {n} rejected, last: {why})",
                waited.as_secs_f64()
            ),
        }
    }
}

impl std::error::Error for RpcError {}

/// An accepted reply's request, still listening for more replies in the same name.
pub struct Watch<'a> {
    listening: Listening<'a>,
    identity: Identity,
    agent: &'static str,
    action: &'static str,
    body: Vec<u8>,
    asked_at: Instant,
}

impl fmt::Debug for Watch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_request(f, "Watch", &self.identity, self.agent, self.action)
    }
}

impl Watch<'_> {
    /// When the request was handed to the broker connection. A node's answers are
    /// awaited from then: a twin is a reply the node was asked for at the same moment,
    /// whichever of the two came first.
    pub fn asked_at(&self) -> Instant {
        self.asked_at
    }

    /// Reads what else arrived for this request until `until` (at once if past):
    /// `Err` when a valid reply in the node's name differs from the accepted one, or
    /// when a reply was dropped unread because the request's mailbox was full (it may
    /// have been that different reply). Identical copies and invalid replies that were
    /// read are not a contest (they are counted).
    pub fn settle(&self, until: Instant) -> Result<(), Contested> {
        let Listening { pending, client } = &self.listening;
        loop {
            client.check_dropped(pending, &self.identity, self.agent, self.action)?;
            let left = until.saturating_duration_since(Instant::now());
            let next = if left.is_zero() {
                pending.replies.try_recv()
            } else {
                pending.replies.recv_timeout(left)
            };
            let Some(next) = next else {
                return client.check_dropped(pending, &self.identity, self.agent, self.action);
            };
            let Routed::Reply(bytes) = next else {
                // A reply came, so somebody listens: the status is forged.
                client.count_forged_status(&self.identity);
                continue;
            };
            match client.accept(&bytes, pending.id(), &self.identity) {
                Ok((_, body)) if body != self.body => {
                    return Err(client.contest(
                        &self.identity,
                        self.agent,
                        self.action,
                        Contest::Different,
                    ));
                }
                Ok(_) => {}
                Err(rejection) => client.count_rejection(&rejection),
            }
        }
    }
}

/// A request's route and the client that made it. When the request is done with,
/// however that happens (answered and watched to the end, or given up unanswered
/// because a request before it in its group failed), the replies its mailbox dropped
/// unread since the last look are counted under `rejected_replies{reason="overflow"}`:
/// too late to contest anything, but a flood all the same.
struct Listening<'a> {
    pending: Pending<'a>,
    client: &'a RpcClient,
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.client
            .count_dropped(self.pending.replies.take_dropped());
    }
}

/// Whether a request is flushed to the broker as it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Flushed at once while few requests are in flight, so that a lone request
    /// leaves now rather than with the client's flusher.
    Now,
    /// Not flushed: another request follows at once and is flushed with it.
    Later,
}

/// A request on its way, whose replies are kept (up to the mailbox's 8) until
/// [`Asked::answer`] reads them.
pub struct Asked<'a> {
    listening: Listening<'a>,
    identity: Identity,
    subject: Subject,
    agent: &'static str,
    action: &'static str,
    timeout: Duration,
    started: Instant,
    asked_at: Instant,
}

impl fmt::Debug for Asked<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_request(f, "Asked", &self.identity, self.agent, self.action)
    }
}

/// A request's `Debug`: which node and action, none of its bytes.
fn debug_request(
    f: &mut fmt::Formatter<'_>,
    name: &str,
    identity: &Identity,
    agent: &str,
    action: &str,
) -> fmt::Result {
    f.debug_struct(name)
        .field("identity", identity)
        .field("agent", &agent)
        .field("action", &action)
        .finish()
}

impl<'a> Asked<'a> {
    /// Waits for the first valid reply, until the request's timeout (counted from when
    /// it was sent). Replies that are not valid are counted and skipped; a reply
    /// dropped unread ends the wait as a contest.
    pub fn answer(self) -> Result<Answer<'a>, RpcError> {
        let Asked {
            listening,
            identity,
            subject,
            agent,
            action,
            timeout,
            started,
            asked_at,
        } = self;
        let (pending, client) = (&listening.pending, listening.client);
        let mut rejected: Option<(u64, String)> = None;
        // Whether a probe found someone subscribed to the node's subject.
        let mut listened_to = false;
        // Replies read after the deadline.
        let mut late = 0;
        loop {
            // Checked on every message: a flood cannot extend the call.
            let left = timeout.saturating_sub(started.elapsed());
            let routed = if left.is_zero() {
                // What is already there still counts when the request is read late
                // (one sent ahead waits while others are read): up to a mailbox's
                // worth, without waiting, so that nothing that keeps coming after the
                // deadline keeps the call going.
                late += 1;
                if late > REPLIES_PER_REQUEST {
                    None
                } else {
                    pending.replies.try_recv()
                }
            } else {
                pending.replies.recv_timeout(left)
            };
            // A reply dropped unread may have been the node's own: whatever is
            // accepted now could be a forgery that no twin would expose.
            client
                .check_dropped(pending, &identity, agent, action)
                .map_err(RpcError::Contested)?;
            let bytes = match routed {
                None => {
                    return Err(RpcError::NoReply {
                        identity,
                        waited: started.elapsed(),
                        rejected,
                    })
                }
                Some(Routed::NoResponders) => {
                    // Anyone may publish a "no responders" status to a reply subject
                    // (a node that reads the requests of others sees theirs): it is
                    // believed only when the broker says the same of a probe.
                    if listened_to || !client.nobody_listens(&subject, timeout) {
                        listened_to = true;
                        client.count_forged_status(&identity);
                        continue;
                    }
                    client.metrics.unreachable_nodes.inc();
                    return Err(RpcError::NoResponders { identity });
                }
                Some(Routed::Reply(bytes)) => bytes,
            };
            match client.accept(&bytes, pending.id(), &identity) {
                Ok((reply, body)) => {
                    return Ok(Answer {
                        reply,
                        watch: Watch {
                            listening,
                            identity,
                            agent,
                            action,
                            body,
                            asked_at,
                        },
                    })
                }
                Err(why) => {
                    client.count_rejection(&why);
                    log::debug!(
                        "Rejected a reply to {agent}#{action} for {identity}: {}",
                        why.detail
                    );
                    let n = rejected.as_ref().map(|(n, _)| n + 1).unwrap_or(1);
                    rejected = Some((n, why.detail));
                }
            }
        }
    }
}

/// An accepted reply and the watch over its request.
#[derive(Debug)]
pub struct Answer<'a> {
    /// The reply.
    pub reply: Reply,
    /// Keeps listening for other replies in the node's name until dropped.
    pub watch: Watch<'a>,
}

/// Why a reply was not accepted.
#[derive(Debug)]
pub(crate) struct Rejection {
    /// The `rejected_replies` label.
    pub(crate) reason: &'static str,
    /// What was wrong, without the node's values.
    pub(crate) detail: String,
}

/// RPC and discovery over one connection.
pub struct RpcClient {
    bus: Bus,
    router: Router,
    protocol: Protocol,
    credentials: Credentials,
    identity: String,
    caller_id: String,
    ttl: u64,
    seen_by: Option<String>,
    metrics: Arc<Metrics>,
    warn_identity: Arc<Throttle>,
    node_prefix: Subject,
    discovery_subject: Subject,
    /// The filter of every provisioning request and of discovery, made once.
    provision_filter: Filter,
    /// The inventory request's filter, made once.
    rpcutil_filter: Filter,
}

impl fmt::Debug for RpcClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RpcClient")
            .field("identity", &self.identity)
            .field("protocol", &self.protocol)
            .finish()
    }
}

impl RpcClient {
    /// Builds the client for `connector` with the identity, caller id, protocol version
    /// and credentials that `client` selects.
    pub fn new(
        connector: &Connector,
        client: &ClientConfig,
        metrics: Arc<Metrics>,
    ) -> Result<RpcClient, RpcError> {
        let (protocol, credentials, caller_id) =
            protocol::client_identity(client).map_err(|e| RpcError::Encode(e.to_string()))?;
        let prefix = protocol::reply_prefix(COLLECTIVE, &caller_id).map_err(RpcError::Subject)?;
        let router = Router::start(connector.bus(), prefix.clone())
            .map_err(|e| RpcError::Publish(format!("cannot subscribe to {prefix}.*: {e}")))?;
        let subject = |s: String| Subject::new(s).map_err(RpcError::Subject);
        Ok(RpcClient {
            bus: connector.bus().clone(),
            router,
            protocol,
            credentials,
            identity: client.identity.clone(),
            caller_id,
            ttl: client.ttl,
            // Informational only, and every node reads it: never with credentials.
            seen_by: client.middleware_hosts.first().map(|u| redact_url(u)),
            metrics,
            warn_identity: Arc::new(Throttle::default()),
            node_prefix: subject(format!("{COLLECTIVE}.node"))?,
            discovery_subject: subject(format!("{COLLECTIVE}.broadcast.agent.discovery"))?,
            provision_filter: Filter::agent(PROVISION_AGENT),
            rpcutil_filter: Filter::agent(RPCUTIL_AGENT),
        })
    }

    /// The router, for its counters.
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// The metrics replies and refusals are counted in.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn spec<'a>(
        &'a self,
        agent: &'a str,
        filter: &'a Filter,
        body: &'a [u8],
        id: &'a str,
    ) -> RequestSpec<'a> {
        RequestSpec {
            agent,
            collective: COLLECTIVE,
            caller_id: &self.caller_id,
            sender_id: &self.identity,
            ttl: self.ttl,
            filter,
            body,
            request_id: Some(id),
            time_ns: None,
            seen_by: self.seen_by.as_deref(),
        }
    }

    /// Encodes `spec` with its routed reply subject and publishes it to `subject`.
    /// With few requests in flight and [`Flush::Now`] it flushes (at most `timeout`)
    /// so the request leaves at once; under load the nats flusher writes many
    /// together instead.
    fn send(
        &self,
        spec: &RequestSpec,
        payload: &mut Vec<u8>,
        subject: &Subject,
        timeout: Duration,
        flush: Flush,
    ) -> Result<(), RpcError> {
        let reply = self
            .router
            .reply_subject(spec.request_id.unwrap_or_default())
            .map_err(RpcError::Subject)?;
        payload.clear();
        protocol::encode_request_into(
            spec,
            reply.as_str(),
            &self.credentials,
            self.protocol,
            payload,
        )
        .map_err(|e| RpcError::Encode(e.to_string()))?;
        self.bus
            .publish_request(subject, &reply, None, payload)
            .map_err(|e| RpcError::Publish(e.to_string()))?;
        if flush == Flush::Now && self.router.pending() < FLUSH_BELOW_IN_FLIGHT {
            let _ = self.bus.flush(timeout);
        }
        Ok(())
    }

    /// One try of `agent#action` to `identity`, waiting at most `timeout` for a valid
    /// reply. The answer's watch keeps listening for other replies in the node's name.
    pub fn call(
        &self,
        identity: &Identity,
        agent: &'static str,
        action: &'static str,
        data: &dyn RequestData,
        timeout: Duration,
    ) -> Result<Answer<'_>, RpcError> {
        self.ask(identity, agent, action, data, timeout, Flush::Now)?
            .answer()
    }

    /// Sends one try of `agent#action` to `identity` without waiting for its reply:
    /// [`Asked::answer`] waits for it, at most `timeout` from now. Its replies are
    /// kept from now on (up to the mailbox's 8; any dropped contests the request), so
    /// several requests to one node can be on their way at once.
    pub fn ask(
        &self,
        identity: &Identity,
        agent: &'static str,
        action: &'static str,
        data: &dyn RequestData,
        timeout: Duration,
        flush: Flush,
    ) -> Result<Asked<'_>, RpcError> {
        let id = protocol::new_request_id(self.protocol);
        let subject = self
            .node_prefix
            .child(identity)
            .map_err(RpcError::Subject)?;
        let pending = self.router.expect(&id, REPLIES_PER_REQUEST);
        let started = Instant::now();
        let other_filter;
        let filter = match agent {
            PROVISION_AGENT => &self.provision_filter,
            RPCUTIL_AGENT => &self.rpcutil_filter,
            _ => {
                other_filter = Filter::agent(agent);
                &other_filter
            }
        };
        scratch::with(&REQUEST_BUFFERS, |[body, payload]| {
            protocol::mcorpc::RpcRequestBody::write_for(body, agent, action, data);
            let spec = self.spec(agent, filter, body, &id);
            self.send(&spec, payload, &subject, timeout, flush)
        })?;
        Ok(Asked {
            listening: Listening {
                pending,
                client: self,
            },
            identity: identity.clone(),
            subject,
            agent,
            action,
            timeout,
            started,
            asked_at: Instant::now(),
        })
    }

    /// Sends `agent#action` with `data` to `identity` and returns at once with the
    /// request id; every message routed to its reply subject goes to `sink` on the
    /// reader thread, unchecked, until the returned [`Route`] is dropped.
    pub(crate) fn send_routed(
        &self,
        identity: &Identity,
        agent: &'static str,
        action: &'static str,
        data: &dyn RequestData,
        flush: Flush,
        sink: Sink,
    ) -> Result<(String, Route), RpcError> {
        let id = protocol::new_request_id(self.protocol);
        let subject = self
            .node_prefix
            .child(identity)
            .map_err(RpcError::Subject)?;
        let route = self.router.route(&id, sink);
        let filter = match agent {
            RPCUTIL_AGENT => &self.rpcutil_filter,
            _ => &self.provision_filter,
        };
        scratch::with(&REQUEST_BUFFERS, |[body, payload]| {
            protocol::mcorpc::RpcRequestBody::write_for(body, agent, action, data);
            let spec = self.spec(agent, filter, body, &id);
            self.send(&spec, payload, &subject, FLUSH_TIMEOUT, flush)
        })?;
        Ok((id, route))
    }

    /// Asks the broker, without waiting, whether anybody subscribes to `identity`'s
    /// subject: an empty message with a reply subject of its own, then a fence, a
    /// message of ours to that reply subject. nats-server answers "no responders" for
    /// the first while it handles its publish, before it reads the fence, and hands
    /// both back in that order; a status after the fence is nobody's but a forger's.
    /// `told` is called once, on the reader thread, when the fence arrives: `true`
    /// when the broker's status came before it. A node that is there reads the probe
    /// as a message it cannot decode and drops it (go-choria and the simulator).
    pub(crate) fn probe(
        &self,
        identity: &Identity,
        told: Box<dyn Fn(bool) + Send + Sync>,
    ) -> Result<Route, RpcError> {
        let subject = self
            .node_prefix
            .child(identity)
            .map_err(RpcError::Subject)?;
        let id = protocol::new_request_id(self.protocol);
        let reply = self.router.reply_subject(&id).map_err(RpcError::Subject)?;
        let fence = format!("fence {}", protocol::new_request_id(self.protocol)).into_bytes();
        // (nobody subscribes, fenced)
        let seen = Mutex::new((false, false));
        let expected = fence.clone();
        let route = self.router.route(
            &id,
            Arc::new(move |routed: Routed| {
                let mut seen = seen.lock();
                if seen.1 {
                    return true;
                }
                match routed {
                    Routed::NoResponders => seen.0 = true,
                    Routed::Reply(bytes) if bytes == expected => {
                        seen.1 = true;
                        told(seen.0);
                    }
                    Routed::Reply(_) => {}
                }
                true
            }),
        );
        self.bus
            .publish_request(&subject, &reply, None, b"")
            .and_then(|()| self.bus.publish(&reply, &fence))
            .map_err(|e| RpcError::Publish(e.to_string()))?;
        Ok(route)
    }

    /// Whether nobody is subscribed to `subject`, asked of the broker itself: an empty
    /// message with a reply subject of its own, then a PING, written together.
    /// nats-server sends "no responders" for a message nobody is subscribed to while
    /// it handles the publish, before it reads the PING, and the client hands out
    /// what it reads in order: a real status is in the probe's mailbox when the PONG
    /// is back. A forger must first be sent the probe and answer it, so its status
    /// comes after. A node that is there reads the probe as a message it cannot
    /// decode and drops it (go-choria and the simulator). When the probe cannot be
    /// sent, the status is believed, as it was before probes.
    fn nobody_listens(&self, subject: &Subject, timeout: Duration) -> bool {
        let id = protocol::new_request_id(self.protocol);
        let probe = self.router.expect(&id, PROBE_REPLIES);
        let Ok(reply) = self.router.reply_subject(&id) else {
            return true;
        };
        if self
            .bus
            .publish_request(subject, &reply, None, b"")
            .is_err()
            || self.bus.flush(timeout).is_err()
        {
            return true;
        }
        std::iter::from_fn(|| probe.replies.try_recv())
            .take(PROBE_REPLIES)
            .any(|r| matches!(r, Routed::NoResponders))
    }

    /// Counts a "no responders" status that a probe or a reply proved false.
    fn count_forged_status(&self, identity: &Identity) {
        self.metrics
            .rejected_replies
            .with_label_values(&["forged_no_responders"])
            .inc();
        log::debug!("Ignored a forged \"no responders\" status for {identity}");
    }

    /// `Err` (counted as a contest) when replies to `pending` were dropped unread since
    /// the last look.
    fn check_dropped(
        &self,
        pending: &Pending,
        identity: &Identity,
        agent: &str,
        action: &str,
    ) -> Result<(), Contested> {
        match pending.replies.take_dropped() {
            0 => Ok(()),
            dropped => {
                self.count_dropped(dropped);
                Err(self.contest(identity, agent, action, Contest::Flooded { dropped }))
            }
        }
    }

    /// Counts `dropped` replies under `rejected_replies{reason="overflow"}`.
    fn count_dropped(&self, dropped: u64) {
        if dropped > 0 {
            self.metrics
                .rejected_replies
                .with_label_values(&["overflow"])
                .inc_by(dropped);
        }
    }

    /// A contest of `agent#action` for `identity`, counted under `contested_replies`.
    fn contest(&self, identity: &Identity, agent: &str, action: &str, why: Contest) -> Contested {
        let rpc = format!("{agent}#{action}");
        self.metrics
            .contested_replies
            .with_label_values(&[&rpc])
            .inc();
        Contested {
            identity: identity.clone(),
            rpc,
            why,
        }
    }

    fn count_rejection(&self, why: &Rejection) {
        self.metrics
            .rejected_replies
            .with_label_values(&[why.reason])
            .inc();
    }

    /// Decodes and checks one reply for request `id` from `identity`; returns it with
    /// its RPC body bytes.
    pub(crate) fn accept(
        &self,
        bytes: &[u8],
        id: &str,
        identity: &Identity,
    ) -> Result<(Reply, Vec<u8>), Rejection> {
        let reject = |reason, detail: String| Rejection { reason, detail };
        let decoded =
            protocol::decode_reply(bytes).map_err(|e| reject("undecodable", e.to_string()))?;
        if decoded.request_id != id {
            return Err(reject(
                "wrong_request",
                format!("reply is for request {}", shown(&decoded.request_id)),
            ));
        }
        if decoded.sender_id != identity.as_str() {
            return Err(reject(
                "wrong_sender",
                format!("reply comes from {}", shown(&decoded.sender_id)),
            ));
        }
        let body = protocol::mcorpc::ReplyBody::decode(&decoded.body)
            .map_err(|e| reject("undecodable", e.to_string()))?;
        Ok((
            Reply {
                sender: decoded.sender_id,
                statuscode: body.statuscode,
                statusmsg: body.statusmsg,
                data: body.data,
            },
            decoded.body,
        ))
    }
}
