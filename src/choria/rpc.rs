//! Direct RPC to one node and broadcast discovery, over the daemon's one connection.
//!
//! A request goes to `provisioning.node.<identity>` with the reply subject
//! `provisioning.reply.<md5(callerid)>.<requestid>` in the transport header (not in
//! the NATS reply field), registered with the [`Router`] before publishing. A reply
//! is accepted only if its envelope names the request id and the identity that was
//! asked; anything else is counted and ignored while the caller keeps waiting.

#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::client_config::ClientConfig;
use super::connector::Connector;
use super::protocol::{self, Credentials, Filter, Protocol, RequestSpec};
use super::router::Router;

/// The collective provisioning happens in.
pub const COLLECTIVE: &str = "provisioning";

/// From this many requests in flight on, a request is not flushed on its own: each
/// flush is a PING/PONG round trip that blocks the caller, while the nats flusher
/// thread writes everything published within 5 ms in one go. A lone request (the
/// usual case on a quiet fleet) still leaves at once.
const FLUSH_BELOW_IN_FLIGHT: usize = 8;

/// A decoded RPC reply from one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The node that answered (envelope sender).
    pub sender: String,
    /// MCollective status code (0 OK).
    pub statuscode: u64,
    /// Status message (`OK` or the refusal).
    pub statusmsg: String,
    /// The action's output.
    pub data: serde_json::Value,
}

/// Why an RPC try failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcError {
    /// The request could not be built.
    Encode(String),
    /// The request could not be published.
    Publish(String),
    /// No acceptable reply within the timeout (Go: `received 0 responses ...`).
    NoReply {
        /// The node asked.
        identity: String,
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
            RpcError::Publish(e) => write!(f, "could not publish the request: {e}"),
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

/// RPC and discovery over one connection.
pub struct RpcClient {
    nc: nats::Connection,
    router: Router,
    protocol: Protocol,
    credentials: Credentials,
    identity: String,
    caller_id: String,
    ttl: u64,
    seen_by: Option<String>,
    rejected: AtomicU64,
}

impl RpcClient {
    /// Builds the client for `connector` with the identity, caller id, protocol version
    /// and credentials that `client` selects.
    pub fn new(connector: &Connector, client: &ClientConfig) -> Result<RpcClient, RpcError> {
        let (protocol, credentials, caller_id) =
            protocol::client_identity(client).map_err(|e| RpcError::Encode(e.to_string()))?;
        let prefix = protocol::reply_prefix(COLLECTIVE, &caller_id);
        let router = Router::start(connector.nats(), &prefix)
            .map_err(|e| RpcError::Publish(format!("cannot subscribe to {prefix}.*: {e}")))?;
        Ok(RpcClient {
            nc: connector.nats().clone(),
            router,
            protocol,
            credentials,
            identity: client.identity.clone(),
            caller_id,
            ttl: client.ttl,
            seen_by: client.middleware_hosts.first().cloned(),
            rejected: AtomicU64::new(0),
        })
    }

    /// Replies rejected so far (wrong sender, wrong id, bad hash, undecodable).
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// The router, for its counters.
    pub fn router(&self) -> &Router {
        &self.router
    }

    fn spec(&self, agent: &str, filter_agent: &str, body: Vec<u8>, id: String) -> RequestSpec {
        RequestSpec {
            agent: agent.to_string(),
            collective: COLLECTIVE.to_string(),
            caller_id: self.caller_id.clone(),
            sender_id: self.identity.clone(),
            ttl: self.ttl,
            filter: Filter::agent(filter_agent),
            body,
            request_id: Some(id),
            time_ns: None,
            seen_by: self.seen_by.clone(),
        }
    }

    /// Encodes `spec` with its routed reply subject and publishes it to `subject`.
    /// With few requests in flight it flushes (at most `timeout`) so the request
    /// leaves at once; under load the nats flusher writes many together instead.
    fn send(&self, spec: RequestSpec, subject: &str, timeout: Duration) -> Result<(), RpcError> {
        let id = spec.request_id.clone().unwrap_or_default();
        let (_, payload) = protocol::encode_request(
            &spec,
            &self.router.reply_subject(&id),
            &self.credentials,
            self.protocol,
        )
        .map_err(|e| RpcError::Encode(e.to_string()))?;
        self.nc
            .publish(subject, payload)
            .map_err(|e| RpcError::Publish(e.to_string()))?;
        if self.router.pending() < FLUSH_BELOW_IN_FLIGHT {
            let _ = self.nc.flush_timeout(timeout);
        }
        Ok(())
    }

    /// One try of `agent#action` to `identity`, waiting at most `timeout`.
    pub fn call(
        &self,
        identity: &str,
        agent: &str,
        action: &str,
        data: &serde_json::Value,
        timeout: Duration,
    ) -> Result<Reply, RpcError> {
        let id = protocol::new_request_id(self.protocol);
        let body = protocol::mcorpc::RpcRequestBody::new(agent, action, data.clone()).encode();
        let pending = self.router.expect_one(&id);
        let started = Instant::now();
        self.send(
            self.spec(agent, agent, body, id.clone()),
            &format!("{COLLECTIVE}.node.{identity}"),
            timeout,
        )?;
        let mut rejected: Option<(u64, String)> = None;
        loop {
            let left = timeout.saturating_sub(started.elapsed());
            let Ok(bytes) = pending.replies.recv_timeout(left) else {
                return Err(RpcError::NoReply {
                    identity: identity.to_string(),
                    waited: started.elapsed(),
                    rejected,
                });
            };
            match self.accept(&bytes, &id, identity) {
                Ok(reply) => return Ok(reply),
                Err(why) => {
                    self.rejected.fetch_add(1, Ordering::Relaxed);
                    log::debug!("Rejected a reply to {agent}#{action} for {identity}: {why}");
                    let n = rejected.as_ref().map(|(n, _)| n + 1).unwrap_or(1);
                    rejected = Some((n, why));
                }
            }
        }
    }

    /// Decodes and checks one reply for request `id` from `identity`.
    fn accept(&self, bytes: &[u8], id: &str, identity: &str) -> Result<Reply, String> {
        let decoded = protocol::decode_reply(bytes).map_err(|e| e.to_string())?;
        if decoded.request_id != id {
            return Err(format!("reply is for request {}", decoded.request_id));
        }
        if decoded.sender_id != identity {
            return Err(format!("reply comes from {}", decoded.sender_id));
        }
        let body = protocol::mcorpc::RpcReply::decode(&decoded.body).map_err(|e| e.to_string())?;
        Ok(Reply {
            sender: decoded.sender_id,
            statuscode: body.statuscode,
            statusmsg: body.statusmsg,
            data: body.data,
        })
    }

    /// Broadcast discovery of nodes with the `choria_provision` agent: collects the
    /// transport senders until `window` passes without a reply (after the first one),
    /// `initial` passes without any, or `limit` is reached. Duplicates are removed.
    pub fn discover(
        &self,
        initial: Duration,
        window: Duration,
        limit: Duration,
    ) -> Result<Vec<String>, RpcError> {
        let id = protocol::new_request_id(self.protocol);
        let pending = self.router.expect_all(&id);
        let started = Instant::now();
        let spec = self.spec(
            "discovery",
            "choria_provision",
            protocol::DISCOVERY_REQUEST.to_vec(),
            id,
        );
        self.send(
            spec,
            &format!("{COLLECTIVE}.broadcast.agent.discovery"),
            limit,
        )?;
        let mut seen = std::collections::HashSet::new();
        let mut found = Vec::new();
        let mut wait = initial.min(limit);
        loop {
            let left = limit.saturating_sub(started.elapsed());
            let Ok(bytes) = pending.replies.recv_timeout(wait.min(left)) else {
                break;
            };
            match protocol::transport_sender(&bytes) {
                Ok(sender) if seen.insert(sender.clone()) => found.push(sender),
                Ok(_) => {}
                Err(e) => {
                    self.rejected.fetch_add(1, Ordering::Relaxed);
                    log::debug!("Ignoring an undecodable discovery reply: {e}");
                }
            }
            wait = window;
        }
        Ok(found)
    }
}
