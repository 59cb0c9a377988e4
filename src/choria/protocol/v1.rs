//! Protocol v1 (`choria:*:1`): only the transport `data` is base64; the secure
//! `message` and the request/reply `message` are JSON text in strings.

use serde::{Deserialize, Serialize};

use std::borrow::Cow;
use std::cell::RefCell;

use super::credentials::Credentials;
use super::scratch;
use super::{
    expect_protocol, gojson, hash_is, read_json, unb64_into, DecodedReply, Layer, Protocol,
    ProtocolError, RequestSpec,
};

#[cfg(any(test, feature = "node-side"))]
pub(super) mod node_side;

/// Transport protocol string.
pub(super) const TRANSPORT: &str = "choria:transport:1";
const SECURE_REQUEST: &str = "choria:secure:request:1";
const SECURE_REPLY: &str = "choria:secure:reply:1";
const REQUEST: &str = "choria:request:1";
const REPLY: &str = "choria:reply:1";

/// The headers as serde would write them; [`write_headers`] writes these bytes by hand.
#[cfg(test)]
#[derive(Serialize)]
struct Headers<'a> {
    #[serde(rename = "reply-to", skip_serializing_if = "str::is_empty")]
    reply_to: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    mc_sender: &'a str,
    #[serde(rename = "seen-by", skip_serializing_if = "Vec::is_empty")]
    seen_by: Vec<[&'a str; 3]>,
}

/// A v1 transport as it is read.
type TransportIn<'a> = super::TransportIn<'a, HeadersIn<'a>>;

/// The headers a reader uses, borrowed from the transport where nothing is escaped
/// (an RPC reply's are read and dropped: no copies).
#[derive(Deserialize, Default)]
struct HeadersIn<'a> {
    #[cfg(any(test, feature = "node-side"))]
    #[serde(borrow, rename = "reply-to", default)]
    reply_to: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    mc_sender: Option<Cow<'a, str>>,
}

/// The secure reply as serde would write it; [`encode_reply`] writes it by hand and
/// [`SecureReplyIn`] reads it.
#[cfg(test)]
#[derive(Serialize)]
struct SecureReply {
    protocol: String,
    message: String,
    hash: String,
}

/// [`SecureReply`] as decoded: borrowed from the data where a value has no escape.
#[derive(Deserialize)]
struct SecureReplyIn<'a> {
    #[serde(borrow)]
    protocol: Cow<'a, str>,
    #[serde(borrow)]
    message: Cow<'a, str>,
    #[serde(borrow)]
    hash: Cow<'a, str>,
}

#[derive(Serialize, Deserialize)]
struct Reply {
    protocol: String,
    message: String,
    envelope: ReplyEnvelope,
}

#[derive(Serialize, Deserialize)]
struct ReplyEnvelope {
    requestid: String,
    senderid: String,
    agent: String,
    time: i64,
}

fn text(body: &[u8], layer: Layer) -> Result<&str, ProtocolError> {
    std::str::from_utf8(body)
        .map_err(|_| ProtocolError::new(layer, "v1 messages must be UTF-8 text"))
}

/// `Transport` with `data`, written by hand (the base64 needs no scan for escapes),
/// appended to `out`.
fn transport(out: &mut Vec<u8>, data: &[u8], reply_to: &str, sender: &str, seen_by: Option<&str>) {
    out.reserve(data.len() / 3 * 4 + 256);
    gojson::Object::start(out)
        .str("protocol", TRANSPORT)
        .base64("data", data)
        .raw("headers", |out| {
            write_headers(out, reply_to, sender, seen_by)
        })
        .end();
}

/// `Headers`, by hand: the bytes serde gives for them.
fn write_headers(out: &mut Vec<u8>, reply_to: &str, sender: &str, seen_by: Option<&str>) {
    let mut headers = gojson::Object::start(out);
    if !reply_to.is_empty() {
        headers = headers.str("reply-to", reply_to);
    }
    if !sender.is_empty() {
        headers = headers.str("mc_sender", sender);
    }
    if let Some(url) = seen_by {
        headers = headers.raw("seen-by", |out| {
            out.extend_from_slice(b"[[");
            gojson::write_str(out, url);
            out.push(b',');
            gojson::write_str(out, sender);
            out.push(b',');
            gojson::write_str(out, url);
            out.push(b']');
            out.push(b']');
        });
    }
    headers.end();
}

thread_local! {
    /// The request and secure layers of the request this thread is encoding (they
    /// are copied into the transport and never leave).
    static LAYERS: RefCell<[Vec<u8>; 2]> = const { RefCell::new([Vec::new(), Vec::new()]) };
    /// The transport data of the reply this thread is reading, base64-decoded (what a
    /// decoded reply keeps is copied out of it).
    static REPLY_DATA: RefCell<[Vec<u8>; 1]> = const { RefCell::new([Vec::new()]) };
}

/// Appends the transport of `spec` to `out`.
pub(super) fn encode_request(
    spec: &RequestSpec,
    id: &str,
    time: i64,
    reply_to: &str,
    credentials: &Credentials,
    out: &mut Vec<u8>,
) -> Result<(), ProtocolError> {
    scratch::with(&LAYERS, |[request, secure]| {
        write_layers(spec, id, time, credentials, request, secure)?;
        transport(out, secure, reply_to, spec.sender_id, spec.seen_by);
        Ok(())
    })
}

/// `Request` and `SecureRequest`, written by hand into `request` and `secure`: the
/// nested message is escaped in one pass.
fn write_layers(
    spec: &RequestSpec,
    id: &str,
    time: i64,
    credentials: &Credentials,
    request: &mut Vec<u8>,
    secure: &mut Vec<u8>,
) -> Result<(), ProtocolError> {
    request.reserve(spec.body.len() * 2 + 512);
    gojson::Object::start(request)
        .str("protocol", REQUEST)
        .str("message", text(spec.body, Layer::Request)?)
        .raw("envelope", |out| {
            // `RequestEnvelopeOut`, by hand.
            gojson::Object::start(out)
                .str("requestid", id)
                .str("senderid", spec.sender_id)
                .str("callerid", spec.caller_id)
                .str("collective", spec.collective)
                .str("agent", spec.agent)
                .int("ttl", spec.wire_ttl())
                .int("time", time)
                .raw("filter", |out| spec.filter.write_go(out))
                .end()
        })
        .end();
    let (signature, pubcert) = credentials.sign_v1(request)?;
    secure.reserve(request.len() * 2 + pubcert.len() + signature.len() + 128);
    gojson::Object::start(secure)
        .str("protocol", SECURE_REQUEST)
        // Written above from `&str`s alone: nested without validating it again.
        .nested_json("message", request)
        .str("signature", &signature)
        .str("pubcert", &pubcert)
        .end();
    Ok(())
}

/// A transport parsed as v1's, its protocol not yet checked: [`super::decode_reply`]
/// parses a reply's transport once and dispatches on its `protocol`.
pub(super) struct Parsed<'a>(TransportIn<'a>);

impl Parsed<'_> {
    /// The transport's `protocol` string.
    pub(super) fn protocol(&self) -> &str {
        &self.0.protocol
    }
}

/// Parses `bytes` as a v1 transport without checking its protocol.
pub(super) fn parse(bytes: &[u8]) -> Result<Parsed<'_>, ProtocolError> {
    read_json(Layer::Transport, bytes).map(Parsed)
}

pub(super) fn transport_sender(bytes: &[u8]) -> Result<String, ProtocolError> {
    parsed_sender(parse(bytes)?)
}

/// [`transport_sender`] of a transport [`parse`]d already.
pub(super) fn parsed_sender(t: Parsed) -> Result<String, ProtocolError> {
    // The data is decoded only to be judged, as `open_parsed` judges it.
    with_data(&t.0, |_| Ok(()))?;
    Ok(t.0
        .headers
        .mc_sender
        .map(Cow::into_owned)
        .unwrap_or_default())
}

/// Runs `read` on the transport's data, base64-decoded into this thread's buffer
/// ([`open_parsed`] without a vector per reply: at three replies per node these were
/// blocks of a KiB or more, glibc's slow path).
fn with_data<R>(
    t: &TransportIn<'_>,
    read: impl FnOnce(&[u8]) -> Result<R, ProtocolError>,
) -> Result<R, ProtocolError> {
    expect_protocol(Layer::Transport, &t.protocol, TRANSPORT)?;
    scratch::with(&REPLY_DATA, |[data]| {
        unb64_into(&t.data, Layer::Transport, "data", data)?;
        read(data)
    })
}

pub(super) fn decode_reply(bytes: &[u8]) -> Result<DecodedReply, ProtocolError> {
    decode_parsed_reply(parse(bytes)?)
}

/// [`decode_reply`] of a transport [`parse`]d already.
pub(super) fn decode_parsed_reply(t: Parsed) -> Result<DecodedReply, ProtocolError> {
    with_data(&t.0, decode_secure_reply)
}

/// The secure and reply layers of a v1 reply's decoded transport `data`.
fn decode_secure_reply(data: &[u8]) -> Result<DecodedReply, ProtocolError> {
    let secure: SecureReplyIn = read_json(Layer::Secure, data)?;
    expect_protocol(Layer::Secure, &secure.protocol, SECURE_REPLY)?;
    if !hash_is(secure.message.as_bytes(), &secure.hash) {
        return Err(ProtocolError::new(
            Layer::Secure,
            "the reply hash does not match the message",
        ));
    }
    let reply: Reply =
        serde_json::from_str(&secure.message).map_err(|e| ProtocolError::json(Layer::Reply, &e))?;
    expect_protocol(Layer::Reply, &reply.protocol, REPLY)?;
    Ok(DecodedReply {
        protocol: Protocol::V1,
        request_id: reply.envelope.requestid,
        sender_id: reply.envelope.senderid,
        agent: reply.envelope.agent,
        time: reply.envelope.time,
        body: reply.message.into_bytes(),
    })
}
