//! Choria protocol v1 and v2 envelopes (go-choria's `protocol/v1` and `protocol/v2`), both
//! directions: the provisioner encodes requests and decodes replies; the node's half
//! (decode a request, encode a reply: the fleet simulator's) is in `node_side`,
//! which the daemon does not compile.
//!
//! Every decoder takes arbitrary network bytes and returns a typed
//! [`ProtocolError`] naming the layer that failed; none panics. Hashes are checked
//! over the exact bytes received, never over re-serialised JSON. Encoders write
//! Go's bytes (field order, escaping, base64 placement), pinned by the worked
//! example of §2.11 in `src/choria/protocol/go_vectors.rs`.

mod credentials;
mod debug;
pub(crate) mod gojson;
pub mod mcorpc;
#[cfg(any(test, feature = "node-side"))]
mod node_side;
mod scan;
pub(crate) mod scratch;
mod v1;
mod v2;

use std::fmt;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::crypto::ids;
use crate::untrusted::shown;

pub use credentials::{certname, client_identity, Credentials};
#[cfg(test)]
use node_side::Rejection;
#[cfg(any(test, feature = "node-side"))]
pub use node_side::{
    decode_request, encode_reply, encode_request, DecodedRequest, DISCOVERY_REPLY,
};

/// Largest payload any decoder accepts (NATS' own default limit is 1 MiB).
pub(crate) const MAX_PAYLOAD: usize = 8 * 1024 * 1024;

/// The discovery request body: base64 of `ping`, sent as text.
pub const DISCOVERY_REQUEST: &[u8] = b"cGluZw==";

/// Protocol version of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `choria:*:1` (x509 and insecure deployments).
    V1,
    /// `io.choria.protocol.v2.*` (Organization Issuer deployments).
    V2,
}

/// The layer of the onion a decoding error happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// The outer transport message.
    Transport,
    /// The secure request or secure reply.
    Secure,
    /// The request.
    Request,
    /// The reply.
    Reply,
    /// The MCollective-RPC body.
    Body,
    /// Signing or credentials.
    Credentials,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Transport => "transport",
            Layer::Secure => "secure message",
            Layer::Request => "request",
            Layer::Reply => "reply",
            Layer::Body => "RPC body",
            Layer::Credentials => "credentials",
        })
    }
}

/// A message that could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {layer}: {reason}")]
pub struct ProtocolError {
    /// Where it failed.
    pub layer: Layer,
    /// What was wrong.
    pub reason: String,
}

impl ProtocolError {
    /// An error in `layer`.
    pub(crate) fn new(layer: Layer, reason: impl fmt::Display) -> ProtocolError {
        ProtocolError {
            layer,
            reason: reason.to_string(),
        }
    }

    /// JSON that did not decode in `layer`, described without quoting the bytes
    /// received (a node could make us log anything, the token it was sent included).
    pub(crate) fn json(layer: Layer, e: &serde_json::Error) -> ProtocolError {
        ProtocolError::new(layer, crate::json_text::describe(e))
    }
}

/// `bytes` decoded as the JSON of a `T` in `layer`; what does not decode is described
/// by [`ProtocolError::json`], never quoted.
pub(crate) fn read_json<'de, T: Deserialize<'de>>(
    layer: Layer,
    bytes: &'de [u8],
) -> Result<T, ProtocolError> {
    serde_json::from_slice(bytes).map_err(|e| ProtocolError::json(layer, &e))
}

/// A request filter (shared by v1 and v2); Go always sends all five arrays.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Filter {
    /// Fact filters (`{"fact","operator","value"}` objects).
    #[serde(default, deserialize_with = "null_default")]
    pub fact: Vec<serde_json::Value>,
    /// Configuration-management classes.
    #[serde(default, deserialize_with = "null_default")]
    pub cf_class: Vec<String>,
    /// Agents the node must have (all of them).
    #[serde(default, deserialize_with = "null_default")]
    pub agent: Vec<String>,
    /// Identities (any of them).
    #[serde(default, deserialize_with = "null_default")]
    pub identity: Vec<String>,
    /// Compound expressions.
    #[serde(default, deserialize_with = "null_default")]
    pub compound: Vec<serde_json::Value>,
}

fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

impl Filter {
    /// Appends the filter as Go writes it (the bytes [`gojson::to_vec`] gives), its
    /// strings escaped in one pass.
    pub(crate) fn write_go(&self, out: &mut Vec<u8>) {
        gojson::Object::start(out)
            .values("fact", &self.fact)
            .strs("cf_class", &self.cf_class)
            .strs("agent", &self.agent)
            .strs("identity", &self.identity)
            .values("compound", &self.compound)
            .end();
    }

    /// A filter selecting nodes that have `agent`.
    pub fn agent(agent: &str) -> Filter {
        Filter {
            agent: vec![agent.to_string()],
            ..Filter::default()
        }
    }
}

/// Everything needed to build one request, borrowed from its caller: a request costs
/// no copies of the strings it is made of.
#[derive(Clone)]
pub struct RequestSpec<'a> {
    /// Target agent.
    pub agent: &'a str,
    /// Collective (`provisioning`).
    pub collective: &'a str,
    /// Caller id (`choria=<certname>` in v1, the JWT's `callerid` in v2).
    pub caller_id: &'a str,
    /// Sender id (our identity).
    pub sender_id: &'a str,
    /// Seconds the request stays valid.
    pub ttl: u64,
    /// Node filter.
    pub filter: &'a Filter,
    /// The body (RPC JSON, or [`DISCOVERY_REQUEST`]).
    pub body: &'a [u8],
    /// Request id to use; a new one when `None`.
    pub request_id: Option<&'a str>,
    /// Creation time in Unix nanoseconds; now when `None`.
    pub time_ns: Option<i64>,
    /// The broker URL for the informational `seen-by` header (v1); omitted if `None`.
    pub seen_by: Option<&'a str>,
}

impl RequestSpec<'_> {
    /// The TTL as the envelopes carry it (a signed 64-bit number): a configured
    /// value beyond `i64::MAX` is sent as `i64::MAX`, not wrapped to a negative.
    pub(crate) fn wire_ttl(&self) -> i64 {
        i64::try_from(self.ttl).unwrap_or(i64::MAX)
    }
}

/// A reply as the provisioner reads it.
#[derive(Clone, PartialEq)]
pub struct DecodedReply {
    /// Version it came in.
    pub protocol: Protocol,
    /// Request id it answers.
    pub request_id: String,
    /// Identity of the node that replied (envelope sender).
    pub sender_id: String,
    /// Agent that answered.
    pub agent: String,
    /// Reply time, Unix seconds.
    pub time: i64,
    /// The body (RPC reply JSON or `pong`).
    pub body: Vec<u8>,
}

/// A new request id for `protocol`.
pub(crate) fn new_request_id(protocol: Protocol) -> String {
    match protocol {
        Protocol::V1 => ids::v1_request_id(),
        Protocol::V2 => ids::ksuid(),
    }
}

/// `provisioning.reply.<md5hex(caller_id)>` for `collective`.
pub fn reply_prefix(
    collective: &str,
    caller_id: &str,
) -> Result<super::subject::Subject, super::subject::SubjectError> {
    use md5::{Digest, Md5};
    super::subject::Subject::new(format!(
        "{collective}.reply.{}",
        hex::encode(Md5::digest(caller_id.as_bytes()))
    ))
}

/// [`encode_request`] into `out` (appended), so a caller can reuse its buffer; returns
/// the request's id (the spec's own when it has one).
pub(crate) fn encode_request_into<'a>(
    spec: &RequestSpec<'a>,
    reply_to: &str,
    credentials: &Credentials,
    protocol: Protocol,
    out: &mut Vec<u8>,
) -> Result<std::borrow::Cow<'a, str>, ProtocolError> {
    let id = match spec.request_id {
        Some(id) => std::borrow::Cow::Borrowed(id),
        None => std::borrow::Cow::Owned(new_request_id(protocol)),
    };
    let time_ns = spec.time_ns.unwrap_or_else(crate::clock::unix_nanos);
    match protocol {
        Protocol::V1 => v1::encode_request(
            spec,
            &id,
            time_ns / 1_000_000_000,
            reply_to,
            credentials,
            out,
        )?,
        Protocol::V2 => v2::encode_request(spec, &id, time_ns, reply_to, credentials, out)?,
    }
    Ok(id)
}

/// The transport as far as routing needs it.
#[derive(Debug, Deserialize)]
struct TransportProbe<'a> {
    #[serde(borrow)]
    protocol: std::borrow::Cow<'a, str>,
}

fn check_size(bytes: &[u8]) -> Result<(), ProtocolError> {
    if bytes.len() > MAX_PAYLOAD {
        return Err(ProtocolError::new(
            Layer::Transport,
            format!("{} bytes exceeds the {MAX_PAYLOAD} byte limit", bytes.len()),
        ));
    }
    Ok(())
}

/// Which version a payload claims to be, from the transport's `protocol` key.
pub fn transport_version(bytes: &[u8]) -> Result<Protocol, ProtocolError> {
    check_size(bytes)?;
    let probe: TransportProbe = read_json(Layer::Transport, bytes)?;
    match &*probe.protocol {
        v1::TRANSPORT => Ok(Protocol::V1),
        v2::TRANSPORT => Ok(Protocol::V2),
        other => Err(ProtocolError::new(
            Layer::Transport,
            format!("unknown protocol \"{}\"", shown(other)),
        )),
    }
}

/// Runs the reader of `bytes`'s protocol version. A v1 transport is parsed once
/// (`v1_parsed` takes it; v2's is parsed as many times as before); any other input
/// takes the probe of `transport_version`, which gives the errors it always gave.
fn by_version<T>(
    bytes: &[u8],
    v1_parsed: impl FnOnce(v1::Parsed<'_>) -> Result<T, ProtocolError>,
    v1: fn(&[u8]) -> Result<T, ProtocolError>,
    v2: fn(&[u8]) -> Result<T, ProtocolError>,
) -> Result<T, ProtocolError> {
    check_size(bytes)?;
    match v1::parse(bytes) {
        Ok(t) if t.protocol() == v1::TRANSPORT => return v1_parsed(t),
        Ok(t) if t.protocol() == v2::TRANSPORT => return v2(bytes),
        _ => {}
    }
    match transport_version(bytes)? {
        Protocol::V1 => v1(bytes),
        Protocol::V2 => v2(bytes),
    }
}

/// Decodes a reply payload of either version, checking its hash.
pub fn decode_reply(bytes: &[u8]) -> Result<DecodedReply, ProtocolError> {
    by_version(
        bytes,
        v1::decode_parsed_reply,
        v1::decode_reply,
        v2::decode_reply,
    )
}

/// The transport sender (`mc_sender` / `sender`) of a reply, all discovery reads.
pub(crate) fn transport_sender(bytes: &[u8]) -> Result<String, ProtocolError> {
    let sender = by_version(
        bytes,
        v1::parsed_sender,
        v1::transport_sender,
        v2::transport_sender,
    )?;
    if sender.is_empty() {
        return Err(ProtocolError::new(Layer::Transport, "no sender header"));
    }
    Ok(sender)
}

/// A transport as it is read, with its version's headers `H`: borrowed where the input
/// has no escape (the base64 data never has one), so no copy is made.
#[derive(Deserialize)]
struct TransportIn<'a, H> {
    #[serde(borrow)]
    protocol: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    data: std::borrow::Cow<'a, str>,
    #[serde(default)]
    headers: H,
}

impl<H> TransportIn<'_, H> {
    /// The data, base64-decoded, and the headers, once the transport's protocol is
    /// `expected`.
    fn open(self, expected: &str) -> Result<(Vec<u8>, H), ProtocolError> {
        expect_protocol(Layer::Transport, &self.protocol, expected)?;
        Ok((unb64(&self.data, Layer::Transport, "data")?, self.headers))
    }
}

/// A transport as serde would write it, with its version's headers `H`: what each
/// version's `transport` writes by hand is checked against it.
#[cfg(test)]
#[derive(Serialize)]
struct TransportOut<'a, H> {
    protocol: &'a str,
    data: String,
    headers: H,
}

/// Checks that a layer carries the protocol string it must.
fn expect_protocol(layer: Layer, actual: &str, expected: &str) -> Result<(), ProtocolError> {
    if actual == expected {
        Ok(())
    } else {
        Err(ProtocolError::new(
            layer,
            format!("protocol \"{}\" is not {expected}", shown(actual)),
        ))
    }
}

/// base64 (standard, padded) of `bytes`.
pub(crate) fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

/// Decodes standard base64 for `layer`.
fn unb64(text: &str, layer: Layer, what: &str) -> Result<Vec<u8>, ProtocolError> {
    let mut out = Vec::new();
    unb64_into(text, layer, what, &mut out)?;
    Ok(out)
}

/// [`unb64`] appended to `out`.
fn unb64_into(
    text: &str,
    layer: Layer,
    what: &str,
    out: &mut Vec<u8>,
) -> Result<(), ProtocolError> {
    B64.decode_vec(text, out)
        .map_err(|e| ProtocolError::new(layer, format!("{what} is not base64: {e}")))
}

/// base64 of the SHA-256 of `bytes`.
fn hash(bytes: &[u8]) -> String {
    b64(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
}

/// Whether `expected` is the base64 of the SHA-256 of `bytes` ([`hash`] without
/// making a string: checked on every reply).
fn hash_is(bytes: &[u8], expected: &str) -> bool {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut text = [0u8; 44]; // 32 bytes in padded base64
    matches!(B64.encode_slice(digest.as_ref(), &mut text), Ok(44) if text[..] == *expected.as_bytes())
}

#[cfg(test)]
mod go_vectors;

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    #[test]
    fn a_reply_hash_is_checked_as_the_base64_of_its_sha256() {
        let message = br#"{"protocol":"choria:reply:1"}"#;
        let right = hash(message);
        assert!(hash_is(message, &right));
        assert!(!hash_is(b"other", &right));
        assert!(!hash_is(message, &right[..43]), "cut short");
        assert!(!hash_is(message, &format!("{right}=")), "one byte more");
        assert!(!hash_is(message, ""));
        assert!(!hash_is(message, &right.to_lowercase()));
    }

    fn request(ttl: i64, time: i64) -> DecodedRequest {
        DecodedRequest {
            protocol: Protocol::V1,
            request_id: "0".repeat(32),
            sender_id: "p1".into(),
            caller_id: "choria=p1".into(),
            collective: "provisioning".into(),
            agent: "choria_provision".into(),
            ttl,
            time,
            filter: Filter::default(),
            body: Vec::new(),
            reply_to: "r".into(),
        }
    }

    #[test]
    fn extreme_ttls_and_times_neither_overflow_nor_pass_by_wrapping() {
        let now = 1_700_000_000;
        // A huge TTL covers every time instead of wrapping round.
        for time in [-(1 << 62), 0, now, 1 << 62] {
            assert_eq!(
                request(i64::MAX, time).validate_for_provisioning(Protocol::V1, now),
                Ok(()),
                "time {time}"
            );
        }
        // Clocks at the ends of i64.
        for now in [i64::MIN, i64::MAX] {
            let r = request(i64::MAX, 0).validate_for_provisioning(Protocol::V1, now);
            assert!(
                matches!(r, Ok(()) | Err(Rejection::Expired { .. })),
                "{r:?}"
            );
        }
        assert!(matches!(
            request(60, i64::MIN).validate_for_provisioning(Protocol::V1, now),
            Err(Rejection::Expired { .. })
        ));
        assert!(matches!(
            request(60, i64::MAX).validate_for_provisioning(Protocol::V1, now),
            Err(Rejection::Expired { .. })
        ));
        assert_eq!(
            request(i64::MIN, now).validate_for_provisioning(Protocol::V1, now),
            Err(Rejection::Ttl(i64::MIN))
        );
    }

    #[test]
    fn a_filter_written_by_hand_is_the_filter_serialised() {
        let filters = [
            Filter::default(),
            Filter::agent("choria_provision"),
            Filter {
                fact: vec![serde_json::json!({"fact": "a<b", "operator": "==", "value": 1.5})],
                cf_class: vec!["x&y".into(), "\u{2028}".into()],
                agent: vec!["a".into(), "b".into()],
                identity: vec!["n\"1\"".into()],
                compound: vec![serde_json::json!([{"z": null, "a": [true]}])],
            },
        ];
        for filter in filters {
            let mut out = Vec::new();
            filter.write_go(&mut out);
            assert_eq!(out, gojson::to_vec(&filter), "{filter:?}");
        }
    }

    #[test]
    fn a_configured_ttl_beyond_i64_is_sent_as_i64_max() {
        let spec = RequestSpec {
            agent: "rpcutil",
            collective: "provisioning",
            caller_id: "choria=p1",
            sender_id: "p1",
            ttl: u64::MAX,
            filter: &Filter::default(),
            body: b"{}",
            request_id: None,
            time_ns: Some(i64::MAX),
            seen_by: None,
        };
        assert_eq!(spec.wire_ttl(), i64::MAX);
        let (_, payload) =
            encode_request(&spec, "r", &Credentials::Insecure, Protocol::V1).unwrap();
        let decoded = decode_request(&payload).unwrap();
        assert_eq!(decoded.ttl, i64::MAX, "not wrapped to -1");
        assert_eq!(decoded.time, i64::MAX / 1_000_000_000);
        let claims = URL_SAFE_NO_PAD.encode(br#"{"callerid":"choria=p1"}"#);
        let creds = Credentials::ed25519(&[7; 32], &format!("e30.{claims}.sig"), true).unwrap();
        let (_, payload) = encode_request(&spec, "r", &creds, Protocol::V2).unwrap();
        let decoded = decode_request(&payload).unwrap();
        assert_eq!(decoded.ttl, i64::MAX, "not wrapped to -1");
    }
}
