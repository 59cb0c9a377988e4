//! Protocol v1 (`choria:*:1`): only the transport `data` is base64; the secure
//! `message` and the request/reply `message` are JSON text in strings.

use serde::{Deserialize, Serialize};

use super::credentials::Credentials;
use super::{
    b64, expect_protocol, gojson, hash, server_body, unb64, DecodedReply, DecodedRequest, Filter,
    Layer, Protocol, ProtocolError, RequestSpec,
};

/// Transport protocol string.
pub(super) const TRANSPORT: &str = "choria:transport:1";
const SECURE_REQUEST: &str = "choria:secure:request:1";
const SECURE_REPLY: &str = "choria:secure:reply:1";
const REQUEST: &str = "choria:request:1";
const REPLY: &str = "choria:reply:1";

#[derive(Serialize)]
struct Transport<'a> {
    protocol: &'a str,
    data: String,
    headers: Headers<'a>,
}

#[derive(Serialize)]
struct Headers<'a> {
    #[serde(rename = "reply-to", skip_serializing_if = "str::is_empty")]
    reply_to: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    mc_sender: &'a str,
    #[serde(rename = "seen-by", skip_serializing_if = "Vec::is_empty")]
    seen_by: Vec<[&'a str; 3]>,
}

#[derive(Deserialize)]
struct TransportIn {
    protocol: String,
    data: String,
    #[serde(default)]
    headers: HeadersIn,
}

#[derive(Deserialize, Default)]
struct HeadersIn {
    #[serde(rename = "reply-to", default)]
    reply_to: Option<String>,
    #[serde(default)]
    mc_sender: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct SecureRequest {
    protocol: String,
    message: String,
    signature: String,
    pubcert: String,
}

#[derive(Serialize, Deserialize)]
struct SecureReply {
    protocol: String,
    message: String,
    hash: String,
}

#[derive(Serialize, Deserialize)]
struct Request {
    protocol: String,
    message: String,
    envelope: RequestEnvelope,
}

#[derive(Serialize, Deserialize)]
struct RequestEnvelope {
    requestid: String,
    senderid: String,
    callerid: String,
    collective: String,
    agent: String,
    ttl: i64,
    time: i64,
    filter: Filter,
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

fn text(body: &[u8], layer: Layer) -> Result<String, ProtocolError> {
    String::from_utf8(body.to_vec())
        .map_err(|_| ProtocolError::new(layer, "v1 messages must be UTF-8 text"))
}

fn transport(data: &[u8], reply_to: &str, sender: &str, seen_by: Option<&str>) -> Vec<u8> {
    gojson::to_vec(&Transport {
        protocol: TRANSPORT,
        data: b64(data),
        headers: Headers {
            reply_to,
            mc_sender: sender,
            seen_by: seen_by
                .map(|url| vec![[url, sender, url]])
                .unwrap_or_default(),
        },
    })
}

pub(super) fn encode_request(
    spec: &RequestSpec,
    id: &str,
    time: i64,
    reply_to: &str,
    credentials: &Credentials,
) -> Result<Vec<u8>, ProtocolError> {
    let request = gojson::to_vec(&Request {
        protocol: REQUEST.into(),
        message: text(&spec.body, Layer::Request)?,
        envelope: RequestEnvelope {
            requestid: id.into(),
            senderid: spec.sender_id.clone(),
            callerid: spec.caller_id.clone(),
            collective: spec.collective.clone(),
            agent: spec.agent.clone(),
            ttl: spec.wire_ttl(),
            time,
            filter: spec.filter.clone(),
        },
    });
    let (signature, pubcert) = credentials.sign_v1(&request)?;
    let secure = gojson::to_vec(&SecureRequest {
        protocol: SECURE_REQUEST.into(),
        message: String::from_utf8(request).expect("JSON is UTF-8"),
        signature,
        pubcert,
    });
    Ok(transport(
        &secure,
        reply_to,
        &spec.sender_id,
        spec.seen_by.as_deref(),
    ))
}

fn open(bytes: &[u8]) -> Result<(Vec<u8>, HeadersIn), ProtocolError> {
    let t: TransportIn =
        serde_json::from_slice(bytes).map_err(|e| ProtocolError::json(Layer::Transport, &e))?;
    expect_protocol(Layer::Transport, &t.protocol, TRANSPORT)?;
    Ok((unb64(&t.data, Layer::Transport, "data")?, t.headers))
}

pub(super) fn transport_sender(bytes: &[u8]) -> Result<String, ProtocolError> {
    Ok(open(bytes)?.1.mc_sender.unwrap_or_default())
}

pub(super) fn decode_reply(bytes: &[u8]) -> Result<DecodedReply, ProtocolError> {
    let (data, _) = open(bytes)?;
    let secure: SecureReply =
        serde_json::from_slice(&data).map_err(|e| ProtocolError::json(Layer::Secure, &e))?;
    expect_protocol(Layer::Secure, &secure.protocol, SECURE_REPLY)?;
    if hash(secure.message.as_bytes()) != secure.hash {
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

pub(super) fn decode_request(bytes: &[u8]) -> Result<DecodedRequest, ProtocolError> {
    let (data, headers) = open(bytes)?;
    let secure: SecureRequest =
        serde_json::from_slice(&data).map_err(|e| ProtocolError::json(Layer::Secure, &e))?;
    expect_protocol(Layer::Secure, &secure.protocol, SECURE_REQUEST)?;
    if secure.signature.is_empty() || secure.pubcert.is_empty() || secure.message.is_empty() {
        return Err(ProtocolError::new(
            Layer::Secure,
            "message, signature and pubcert must not be empty",
        ));
    }
    let request: Request = serde_json::from_str(&secure.message)
        .map_err(|e| ProtocolError::json(Layer::Request, &e))?;
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
        reply_to: headers.reply_to.unwrap_or_default(),
    })
}

pub(super) fn encode_reply(
    request: &DecodedRequest,
    sender: &str,
    body: &[u8],
    time: i64,
    seen_by: Option<&str>,
) -> Vec<u8> {
    let reply = gojson::to_string(&Reply {
        protocol: REPLY.into(),
        message: String::from_utf8_lossy(body).into_owned(),
        envelope: ReplyEnvelope {
            requestid: request.request_id.clone(),
            senderid: sender.into(),
            agent: request.agent.clone(),
            time,
        },
    });
    let secure = gojson::to_vec(&SecureReply {
        protocol: SECURE_REPLY.into(),
        hash: hash(reply.as_bytes()),
        message: reply,
    });
    transport(&secure, "", sender, seen_by)
}
