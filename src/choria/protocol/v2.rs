//! Protocol v2 (`io.choria.protocol.v2.*`): every nested payload is base64 (Go
//! `[]byte`), times are nanoseconds, ids are KSUIDs, and the caller's JWT travels
//! in the secure request.

use serde::{Deserialize, Serialize};

use super::credentials::Credentials;
use super::{
    b64, expect_protocol, gojson, hash, read_json, unb64, DecodedReply, Filter, Layer, Protocol,
    ProtocolError, RequestSpec,
};

#[cfg(any(test, feature = "node-side"))]
pub(super) mod node_side;

/// Transport protocol string.
pub(super) const TRANSPORT: &str = "io.choria.protocol.v2.transport";
const SECURE_REQUEST: &str = "io.choria.protocol.v2.secure_request";
const SECURE_REPLY: &str = "io.choria.protocol.v2.secure_reply";
const REQUEST: &str = "io.choria.protocol.v2.request";
const REPLY: &str = "io.choria.protocol.v2.reply";

#[derive(Serialize)]
struct Headers<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    reply: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    sender: &'a str,
}

#[derive(Deserialize, Default)]
struct HeadersIn {
    #[cfg(any(test, feature = "node-side"))]
    reply: Option<String>,
    sender: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct SecureRequest {
    protocol: String,
    request: String,
    signature: String,
    caller: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    signer: String,
}

#[derive(Serialize, Deserialize)]
struct SecureReply {
    protocol: String,
    reply: String,
    hash: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    signature: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    sender: String,
}

#[derive(Serialize, Deserialize)]
struct Request {
    protocol: String,
    message: String,
    id: String,
    sender: String,
    caller: String,
    collective: String,
    agent: String,
    ttl: i64,
    time: i64,
    #[serde(default)]
    filter: Filter,
}

#[derive(Serialize, Deserialize)]
struct Reply {
    protocol: String,
    message: String,
    request: String,
    sender: String,
    agent: String,
    time: i64,
}

/// `Transport` with `data`, written by hand (the base64 needs no scan for escapes).
fn transport(out: &mut Vec<u8>, data: &[u8], reply: &str, sender: &str) {
    out.reserve(data.len() / 3 * 4 + 256);
    gojson::Object::start(out)
        .str("protocol", TRANSPORT)
        .base64("data", data)
        .value("headers", &Headers { reply, sender })
        .end();
}

pub(super) fn encode_request(
    spec: &RequestSpec,
    id: &str,
    time_ns: i64,
    reply_to: &str,
    credentials: &Credentials,
    out: &mut Vec<u8>,
) -> Result<(), ProtocolError> {
    let request = gojson::to_vec(&Request {
        protocol: REQUEST.into(),
        message: b64(spec.body),
        id: id.into(),
        sender: spec.sender_id.into(),
        caller: spec.caller_id.into(),
        collective: spec.collective.into(),
        agent: spec.agent.into(),
        ttl: spec.wire_ttl(),
        time: time_ns,
        filter: spec.filter.clone(),
    });
    let (signature, caller_jwt) = credentials.sign_v2(&request)?;
    let secure = gojson::to_vec(&SecureRequest {
        protocol: SECURE_REQUEST.into(),
        request: b64(&request),
        signature: b64(&signature),
        caller: caller_jwt,
        signer: String::new(),
    });
    transport(out, &secure, reply_to, spec.sender_id);
    Ok(())
}

fn open(bytes: &[u8]) -> Result<(Vec<u8>, HeadersIn), ProtocolError> {
    let t: super::TransportIn<HeadersIn> = read_json(Layer::Transport, bytes)?;
    t.open(TRANSPORT)
}

pub(super) fn transport_sender(bytes: &[u8]) -> Result<String, ProtocolError> {
    Ok(open(bytes)?.1.sender.unwrap_or_default())
}

pub(super) fn decode_reply(bytes: &[u8]) -> Result<DecodedReply, ProtocolError> {
    let (data, _) = open(bytes)?;
    let secure: SecureReply = read_json(Layer::Secure, &data)?;
    expect_protocol(Layer::Secure, &secure.protocol, SECURE_REPLY)?;
    let reply_bytes = unb64(&secure.reply, Layer::Secure, "reply")?;
    if hash(&reply_bytes) != secure.hash {
        return Err(ProtocolError::new(
            Layer::Secure,
            "the reply hash does not match the message",
        ));
    }
    let reply: Reply = read_json(Layer::Reply, &reply_bytes)?;
    expect_protocol(Layer::Reply, &reply.protocol, REPLY)?;
    Ok(DecodedReply {
        protocol: Protocol::V2,
        request_id: reply.request,
        sender_id: reply.sender,
        agent: reply.agent,
        time: reply.time / 1_000_000_000,
        body: unb64(&reply.message, Layer::Reply, "message")?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::TransportOut;
    use super::*;

    #[test]
    fn the_transport_written_by_hand_is_the_struct_serialised() {
        for (reply, sender) in [("r.1", "n<1>"), ("", "")] {
            let data = b"{\"any\":\"<bytes>\"}\x00";
            let mut written = Vec::new();
            transport(&mut written, data, reply, sender);
            assert_eq!(
                written,
                gojson::to_vec(&TransportOut {
                    protocol: TRANSPORT,
                    data: b64(data),
                    headers: Headers { reply, sender },
                })
            );
        }
    }
}
