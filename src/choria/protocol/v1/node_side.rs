//! v1's node side (see `protocol::node_side`): a request read as a server reads it,
//! a reply written as a server writes it.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::super::node_side::server_body;
use super::super::{
    expect_protocol, gojson, hash, DecodedRequest, Filter, Layer, Protocol, ProtocolError,
};
use super::{
    parse, transport, HeadersIn, Parsed, TransportIn, REPLY, REQUEST, SECURE_REPLY, SECURE_REQUEST,
    TRANSPORT,
};

#[derive(Serialize, Deserialize)]
pub(super) struct SecureRequest {
    pub(super) protocol: String,
    pub(super) message: String,
    pub(super) signature: String,
    pub(super) pubcert: String,
}

#[derive(Serialize, Deserialize)]
pub(super) struct Request {
    pub(super) protocol: String,
    pub(super) message: String,
    pub(super) envelope: RequestEnvelope,
}

#[derive(Serialize, Deserialize)]
pub(super) struct RequestEnvelope {
    pub(super) requestid: String,
    pub(super) senderid: String,
    pub(super) callerid: String,
    pub(super) collective: String,
    pub(super) agent: String,
    pub(super) ttl: i64,
    pub(super) time: i64,
    pub(super) filter: Filter,
}

/// The envelope as it is written, borrowing the request.
#[derive(Serialize)]
pub(super) struct ReplyEnvelopeOut<'a> {
    pub(super) requestid: &'a str,
    pub(super) senderid: &'a str,
    pub(super) agent: &'a str,
    pub(super) time: i64,
}

fn open_parsed(t: TransportIn<'_>) -> Result<(Vec<u8>, HeadersIn<'_>), ProtocolError> {
    t.open(TRANSPORT)
}

pub(crate) fn decode_request(bytes: &[u8]) -> Result<DecodedRequest, ProtocolError> {
    decode_parsed_request(parse(bytes)?)
}

/// [`decode_request`] of a transport [`parse`]d already.
pub(crate) fn decode_parsed_request(t: Parsed) -> Result<DecodedRequest, ProtocolError> {
    let (data, headers) = open_parsed(t.0)?;
    let SecureRequest {
        protocol,
        message,
        signature,
        pubcert,
    } = serde_json::from_slice(&data).map_err(|e| ProtocolError::json(Layer::Secure, &e))?;
    expect_protocol(Layer::Secure, &protocol, SECURE_REQUEST)?;
    if signature.is_empty() || pubcert.is_empty() || message.is_empty() {
        return Err(ProtocolError::new(
            Layer::Secure,
            "message, signature and pubcert must not be empty",
        ));
    }
    let request: Request =
        serde_json::from_str(&message).map_err(|e| ProtocolError::json(Layer::Request, &e))?;
    expect_protocol(Layer::Request, &request.protocol, REQUEST)?;
    let e = request.envelope;
    Ok(DecodedRequest {
        protocol: Protocol::V1,
        request_id: e.requestid,
        sender_id: e.senderid,
        caller_id: e.callerid,
        collective: e.collective,
        agent: e.agent,
        ttl: e.ttl,
        time: e.time,
        filter: e.filter,
        body: server_body(request.message.as_bytes()),
        reply_to: headers.reply_to.map(Cow::into_owned).unwrap_or_default(),
    })
}

pub(crate) fn encode_reply(
    request: &DecodedRequest,
    sender: &str,
    body: &[u8],
    time: i64,
    seen_by: Option<&str>,
) -> Vec<u8> {
    // `Reply` and `SecureReply`, written by hand: the nested message is escaped in
    // one pass.
    let mut reply = Vec::with_capacity(body.len() * 2 + 256);
    gojson::Object::start(&mut reply)
        .str("protocol", REPLY)
        .str("message", &String::from_utf8_lossy(body))
        .value(
            "envelope",
            &ReplyEnvelopeOut {
                requestid: &request.request_id,
                senderid: sender,
                agent: &request.agent,
                time,
            },
        )
        .end();
    let mut secure = Vec::with_capacity(reply.len() * 2 + 128);
    gojson::Object::start(&mut secure)
        .str("protocol", SECURE_REPLY)
        // Written above from `&str`s alone: nested without validating it again.
        .nested_json("message", &reply)
        .str("hash", &hash(&reply))
        .end();
    let mut out = Vec::new();
    transport(&mut out, &secure, "", sender, seen_by);
    out
}
