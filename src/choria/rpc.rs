//! Direct RPC to one node and broadcast discovery, over the daemon's one connection.
//!
//! A request goes to `provisioning.node.<identity>` with the reply subject
//! `provisioning.reply.<md5(callerid)>.<requestid>` both in the Choria transport
//! header (where servers reply) and as the NATS reply subject, registered with the
//! `Router` before publishing. The NATS reply subject makes nats-server answer "no
//! responders" at once when no server subscribes to the node's subject, so a made-up
//! identity costs one round trip instead of a worker's timeouts.
//!
//! The caller registers where the replies go (`RpcClient::send_routed`), and the
//! requests' state lives with it, not here: the attempts' driver (`node/driver.rs`)
//! hands a node's replies to its attempt, which accepts one only if
//! `RpcClient::accept` finds that its envelope names the request id and the node
//! asked, counts and ignores anything else, and keeps listening for a second,
//! different reply in the node's name (a contest, `Contested`) until the node's
//! `restart` is answered. Whether a "no responders" status is the broker's is asked
//! of the broker itself (`RpcClient::probe`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::bus::Bus;
use super::client_config::ClientConfig;
use super::connector::{redact_url, Connector};
use super::identity::Identity;
use super::protocol::mcorpc::RequestData;
use super::protocol::{self, scratch, Credentials, Filter, Protocol, RequestSpec};
use super::router::{Route, Routed, Router, Sink};
use super::subject::{Subject, SubjectError};
use crate::metrics::Metrics;
use crate::throttle::Throttle;
use crate::untrusted::shown;

/// The collective provisioning happens in.
pub(crate) const COLLECTIVE: &str = "provisioning";

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

mod contested;
mod discovery;
pub(crate) use discovery::Discovered;
#[cfg(test)]
mod tests;
pub(crate) use contested::{Contest, Contested};

/// A decoded RPC reply from one node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
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
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
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

/// Whether a request is flushed to the broker as it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flush {
    /// Flushed at once while few requests are in flight, so that a lone request
    /// leaves now rather than with the client's flusher.
    Now,
    /// Not flushed: another request follows at once and is flushed with it.
    Later,
}

/// Why a reply was not accepted.
#[derive(Debug)]
pub(crate) struct ReplyRejection {
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

impl RpcClient {
    /// Builds the client for `connector` with the identity, caller id, protocol version
    /// and credentials that `client` selects.
    pub(crate) fn new(
        connector: &Connector,
        client: &ClientConfig,
        metrics: Arc<Metrics>,
    ) -> Result<RpcClient, RpcError> {
        let (protocol, credentials, caller_id) =
            protocol::client_identity(client).map_err(|e| RpcError::Encode(e.to_string()))?;
        let prefix = protocol::reply_prefix(COLLECTIVE, &caller_id).map_err(RpcError::Subject)?;
        let oversized = metrics
            .rejected_replies
            .with_label_values(&["oversized_headers"]);
        let router = Router::start(connector.bus(), prefix.clone(), oversized)
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
    /// subject: a signed `rpcutil#ping` request with a reply subject of its own, then
    /// a fence, a message of ours to that reply subject. nats-server answers "no
    /// responders" for the first while it handles its publish, before it reads the
    /// fence, and hands both back in that order; a status after the fence is
    /// nobody's but a forger's. `told` is called once, on the reader thread, when the
    /// fence arrives: `true` when the broker's status came before it. A node that is
    /// there takes the probe as the valid request it is and may answer its ping; the
    /// answer is not read. (An empty probe was a request a node could not decode,
    /// which a real server logs as invalid.)
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
        scratch::with(&REQUEST_BUFFERS, |[body, payload]| {
            protocol::mcorpc::RpcRequestBody::write_for(
                body,
                RPCUTIL_AGENT,
                "ping",
                &serde_json::Value::Object(serde_json::Map::new()),
            );
            let spec = self.spec(RPCUTIL_AGENT, &self.rpcutil_filter, body, &id);
            self.send(&spec, payload, &subject, FLUSH_TIMEOUT, Flush::Later)
        })?;
        self.bus
            .publish(&reply, &fence)
            .map_err(|e| RpcError::Publish(e.to_string()))?;
        Ok(route)
    }

    /// Decodes and checks one reply for request `id` from `identity`; returns it with
    /// its RPC body bytes.
    pub(crate) fn accept(
        &self,
        bytes: &[u8],
        id: &str,
        identity: &Identity,
    ) -> Result<(Reply, Vec<u8>), ReplyRejection> {
        let reject = |reason, detail: String| ReplyRejection { reason, detail };
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
