//! The node's half of the protocol: a request decoded and checked as a
//! provisioning-mode server checks it, and a reply encoded. The fleet simulator, the
//! fuzz targets and the tests use it; the daemon only sends requests and reads
//! replies, so it never compiles this module (feature `node-side`).

use std::fmt;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

use super::{
    by_version, encode_request_into, Credentials, Filter, Protocol, ProtocolError, RequestSpec,
};
use crate::untrusted::shown;

/// The discovery reply body.
pub const DISCOVERY_REPLY: &[u8] = b"pong";

/// A request as a node reads it.
#[derive(Clone, PartialEq)]
pub struct DecodedRequest {
    /// Version it came in.
    pub protocol: Protocol,
    /// Request id.
    pub request_id: String,
    /// Sender identity.
    pub sender_id: String,
    /// Caller id.
    pub caller_id: String,
    /// Collective.
    pub collective: String,
    /// Agent.
    pub agent: String,
    /// TTL, seconds.
    pub ttl: i64,
    /// Creation time, Unix seconds.
    pub time: i64,
    /// Filter.
    pub filter: Filter,
    /// Body bytes (base64-decoded where the server would decode it).
    pub body: Vec<u8>,
    /// Subject to reply to, from the transport header.
    pub reply_to: String,
}

/// Why a provisioning-mode server drops a request without replying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// Not for the `provisioning` collective.
    Collective(String),
    /// The request id has the wrong length for its version.
    RequestId(String),
    /// TTL below the v1 schema minimum of 30 (v2: below 1).
    Ttl(i64),
    /// Created outside `(now - ttl, now + ttl)`.
    Expired {
        /// Request time.
        time: i64,
        /// Server time.
        now: i64,
    },
    /// The version differs from the one the node's security provider speaks.
    Version(Protocol),
    /// No reply subject.
    NoReplyTo,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Collective(c) => {
                write!(f, "collective \"{}\" is not provisioning", shown(c))
            }
            Rejection::RequestId(id) => {
                write!(f, "request id \"{}\" has the wrong length", shown(id))
            }
            Rejection::Ttl(t) => write!(f, "ttl {t} is below the minimum"),
            Rejection::Expired { time, now } => {
                write!(f, "request created at {time} is outside the ttl at {now}")
            }
            Rejection::Version(p) => write!(f, "protocol {p:?} is not spoken here"),
            Rejection::NoReplyTo => write!(f, "no reply subject"),
        }
    }
}

impl DecodedRequest {
    /// The checks a provisioning-mode server makes before dispatching (§2.10): a
    /// failure means the request is dropped without a reply.
    pub(crate) fn validate_for_provisioning(
        &self,
        speaks: Protocol,
        now: i64,
    ) -> Result<(), Rejection> {
        if self.protocol != speaks {
            return Err(Rejection::Version(self.protocol));
        }
        let (id_ok, min_ttl) = match self.protocol {
            Protocol::V1 => (self.request_id.len() == 32, 30),
            Protocol::V2 => (!self.request_id.is_empty(), 1),
        };
        if !id_ok {
            return Err(Rejection::RequestId(self.request_id.clone()));
        }
        if self.ttl < min_ttl {
            return Err(Rejection::Ttl(self.ttl));
        }
        if self.collective != "provisioning" {
            return Err(Rejection::Collective(self.collective.clone()));
        }
        // Both values come from the wire (or the clock): saturate, never overflow.
        if self.time <= now.saturating_sub(self.ttl) || self.time >= now.saturating_add(self.ttl) {
            return Err(Rejection::Expired {
                time: self.time,
                now,
            });
        }
        if self.reply_to.is_empty() {
            return Err(Rejection::NoReplyTo);
        }
        Ok(())
    }
}

/// Encodes a request; returns its id and the NATS payload.
pub fn encode_request(
    spec: &RequestSpec,
    reply_to: &str,
    credentials: &Credentials,
    protocol: Protocol,
) -> Result<(String, Vec<u8>), ProtocolError> {
    let mut payload = Vec::new();
    let id = encode_request_into(spec, reply_to, credentials, protocol, &mut payload)?;
    Ok((id.into_owned(), payload))
}

/// Decodes a request payload of either version (server side); the simulator reads
/// one per request.
pub fn decode_request(bytes: &[u8]) -> Result<DecodedRequest, ProtocolError> {
    by_version(
        bytes,
        super::v1::node_side::decode_parsed_request,
        super::v1::node_side::decode_request,
        super::v2::node_side::decode_request,
    )
}

/// Encodes a reply to `request` from `sender` with `body` made at `time_ns`;
/// `seen_by` is the broker URL for v1's informational `seen-by` header.
pub fn encode_reply(
    request: &DecodedRequest,
    sender: &str,
    body: &[u8],
    time_ns: i64,
    seen_by: Option<&str>,
) -> Vec<u8> {
    match request.protocol {
        Protocol::V1 => super::v1::node_side::encode_reply(
            request,
            sender,
            body,
            time_ns / 1_000_000_000,
            seen_by,
        ),
        Protocol::V2 => super::v2::node_side::encode_reply(request, sender, body, time_ns),
    }
}

/// The body a server dispatches: base64-decoded if it decodes, else as sent (§2.8).
pub(super) fn server_body(message: &[u8]) -> Vec<u8> {
    std::str::from_utf8(message)
        .ok()
        .and_then(|text| B64.decode(text).ok())
        .unwrap_or_else(|| message.to_vec())
}
