//! v2's node side (see `protocol::node_side`): a request read as a server reads it,
//! a reply written as a server writes it.

use super::super::node_side::server_body;
use super::super::{
    b64, expect_protocol, gojson, hash, read_json, unb64, DecodedRequest, Layer, Protocol,
    ProtocolError,
};
use super::{open, transport, Reply, Request, SecureReply, SecureRequest, REPLY, REQUEST};
use super::{SECURE_REPLY, SECURE_REQUEST};

pub(crate) fn decode_request(bytes: &[u8]) -> Result<DecodedRequest, ProtocolError> {
    let (data, headers) = open(bytes)?;
    let secure: SecureRequest = read_json(Layer::Secure, &data)?;
    expect_protocol(Layer::Secure, &secure.protocol, SECURE_REQUEST)?;
    if secure.caller.is_empty() {
        return Err(ProtocolError::new(
            Layer::Secure,
            "caller must not be empty",
        ));
    }
    let request_bytes = unb64(&secure.request, Layer::Secure, "request")?;
    let request: Request = read_json(Layer::Request, &request_bytes)?;
    expect_protocol(Layer::Request, &request.protocol, REQUEST)?;
    Ok(DecodedRequest {
        protocol: Protocol::V2,
        body: server_body(&unb64(&request.message, Layer::Request, "message")?),
        request_id: request.id,
        sender_id: request.sender,
        caller_id: request.caller,
        collective: request.collective,
        agent: request.agent,
        ttl: request.ttl,
        time: request.time.div_euclid(1_000_000_000),
        filter: request.filter,
        reply_to: headers.reply.unwrap_or_default(),
    })
}

pub(crate) fn encode_reply(
    request: &DecodedRequest,
    sender: &str,
    body: &[u8],
    time_ns: i64,
) -> Vec<u8> {
    let reply = gojson::to_vec(&Reply {
        protocol: REPLY.into(),
        message: b64(body),
        request: request.request_id.clone(),
        sender: sender.into(),
        agent: request.agent.clone(),
        time: time_ns,
    });
    let secure = gojson::to_vec(&SecureReply {
        protocol: SECURE_REPLY.into(),
        hash: hash(&reply),
        reply: b64(&reply),
        signature: String::new(),
        sender: String::new(),
    });
    let mut out = Vec::new();
    transport(&mut out, &secure, "", sender);
    out
}
