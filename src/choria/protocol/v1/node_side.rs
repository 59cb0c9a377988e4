//! v1's node side (see `protocol::node_side`): a request read as a server reads it,
//! a reply written as a server writes it.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::super::node_side::server_body;
use super::super::{
    expect_protocol, gojson, hash, read_json, DecodedRequest, Filter, Layer, Protocol,
    ProtocolError,
};
use super::{
    parse, transport, HeadersIn, Parsed, TransportIn, REPLY, REQUEST, SECURE_REPLY, SECURE_REQUEST,
    TRANSPORT,
};

#[derive(Serialize, Deserialize)]
struct SecureRequest {
    protocol: String,
    message: String,
    signature: String,
    pubcert: String,
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

/// The envelope as it is written, borrowing the request.
#[derive(Serialize)]
struct ReplyEnvelopeOut<'a> {
    requestid: &'a str,
    senderid: &'a str,
    agent: &'a str,
    time: i64,
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
    } = read_json(Layer::Secure, &data)?;
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

#[cfg(test)]
mod tests {
    use super::super::super::{b64, Credentials, RequestSpec, TransportOut};
    use super::super::{encode_request, Headers, Reply, ReplyEnvelope, SecureReply};
    use super::*;

    /// The hand-written envelopes are the structs serialised.
    #[test]
    fn requests_and_replies_written_by_hand_are_the_structs_serialised() {
        let spec = RequestSpec {
            agent: "choria_provision",
            collective: "provisioning",
            caller_id: "choria=p<1>",
            sender_id: "p&1",
            ttl: 60,
            filter: &Filter::agent("choria_provision"),
            body: br#"{"agent":"a","data":{"x":"<\u2028>"}}"#,
            request_id: None,
            time_ns: None,
            seen_by: Some("nats://b:4222"),
        };
        let mut payload = b"kept".to_vec();
        encode_request(&spec, "id1", 7, "r.1", &Credentials::Insecure, &mut payload).unwrap();
        let payload = payload.strip_prefix(b"kept").expect("appended").to_vec();
        let request = gojson::to_vec(&Request {
            protocol: REQUEST.into(),
            message: String::from_utf8(spec.body.to_vec()).unwrap(),
            envelope: RequestEnvelope {
                requestid: "id1".into(),
                senderid: spec.sender_id.to_string(),
                callerid: spec.caller_id.to_string(),
                collective: spec.collective.to_string(),
                agent: spec.agent.to_string(),
                ttl: 60,
                time: 7,
                filter: spec.filter.clone(),
            },
        });
        let secure = gojson::to_vec(&SecureRequest {
            protocol: SECURE_REQUEST.into(),
            message: String::from_utf8(request).unwrap(),
            signature: "insecure".into(),
            pubcert: "insecure".into(),
        });
        let by_serde = |data: &[u8], reply_to, seen_by: Option<&str>| {
            gojson::to_vec(&TransportOut {
                protocol: TRANSPORT,
                data: b64(data),
                headers: Headers {
                    reply_to,
                    mc_sender: "p&1",
                    seen_by: seen_by
                        .map(|url| vec![[url, "p&1", url]])
                        .unwrap_or_default(),
                },
            })
        };
        assert_eq!(payload, by_serde(&secure, "r.1", Some("nats://b:4222")));
        let decoded = decode_request(&payload).unwrap();
        let body = br#"{"statuscode":0,"data":{"a":"<&>"}}"#;
        let encoded = encode_reply(&decoded, "p&1", body, 9, None);
        let reply = gojson::to_string(&Reply {
            protocol: REPLY.into(),
            message: String::from_utf8(body.to_vec()).unwrap(),
            envelope: ReplyEnvelope {
                requestid: "id1".into(),
                senderid: "p&1".into(),
                agent: "choria_provision".into(),
                time: 9,
            },
        });
        let secure = gojson::to_vec(&SecureReply {
            protocol: SECURE_REPLY.into(),
            hash: hash(reply.as_bytes()),
            message: reply,
        });
        assert_eq!(encoded, by_serde(&secure, "", None));
    }
}
