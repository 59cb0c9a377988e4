//! `Debug` for the protocol types that carry secrets: a request's body holds the
//! provisioning token, a reply's body may hold a node's provisioning JWT (whose
//! `cht` is the token) and the `seen-by` URL may hold broker credentials. These
//! show the routing fields and only the size or the keys of what they carry.

use std::fmt;

use super::mcorpc::RpcRequestBody;
#[cfg(any(test, feature = "node-side"))]
use super::{mcorpc::RpcReply, DecodedRequest};
use super::{DecodedReply, RequestSpec};

/// `<N bytes>`.
struct Size(usize);

impl fmt::Debug for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} bytes>", self.0)
    }
}

/// The keys of an object (values hidden); the kind of anything else.
struct Keys<'a>(&'a serde_json::Value);

impl fmt::Debug for Keys<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            serde_json::Value::Object(m) => f
                .debug_map()
                .entries(m.keys().map(|k| (k, format_args!("***"))))
                .finish(),
            serde_json::Value::Null => f.write_str("null"),
            serde_json::Value::Array(a) => write!(f, "<array of {}>", a.len()),
            serde_json::Value::String(s) => write!(f, "<string of {} bytes>", s.len()),
            _ => f.write_str("***"),
        }
    }
}

impl fmt::Debug for RequestSpec<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestSpec")
            .field("agent", &self.agent)
            .field("collective", &self.collective)
            .field("caller_id", &self.caller_id)
            .field("sender_id", &self.sender_id)
            .field("ttl", &self.ttl)
            .field("filter", &self.filter)
            .field("body", &Size(self.body.len()))
            .field("request_id", &self.request_id)
            .field("time_ns", &self.time_ns)
            .field("seen_by", &self.seen_by.as_ref().map(|_| "***"))
            .finish()
    }
}

impl fmt::Debug for DecodedReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecodedReply")
            .field("protocol", &self.protocol)
            .field("request_id", &self.request_id)
            .field("sender_id", &self.sender_id)
            .field("agent", &self.agent)
            .field("time", &self.time)
            .field("body", &Size(self.body.len()))
            .finish()
    }
}

impl fmt::Debug for RpcRequestBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RpcRequestBody")
            .field("agent", &self.agent)
            .field("action", &self.action)
            .field("data", &Keys(&self.data))
            .finish()
    }
}

#[cfg(any(test, feature = "node-side"))]
impl fmt::Debug for DecodedRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecodedRequest")
            .field("protocol", &self.protocol)
            .field("request_id", &self.request_id)
            .field("sender_id", &self.sender_id)
            .field("caller_id", &self.caller_id)
            .field("collective", &self.collective)
            .field("agent", &self.agent)
            .field("ttl", &self.ttl)
            .field("time", &self.time)
            .field("filter", &self.filter)
            .field("body", &Size(self.body.len()))
            .field("reply_to", &self.reply_to)
            .finish()
    }
}

#[cfg(any(test, feature = "node-side"))]
impl fmt::Debug for RpcReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RpcReply")
            .field("action", &self.action)
            .field("statuscode", &self.statuscode)
            .field("statusmsg", &self.statusmsg)
            .field("data", &Keys(&self.data))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Filter, Protocol};
    use super::*;
    use serde_json::json;

    const TOKEN: &str = "tok-3f9a";

    #[test]
    fn requests_and_replies_never_show_their_contents() {
        let body = RpcRequestBody::new("choria_provision", "jwt", json!({ "token": TOKEN }));
        let spec = RequestSpec {
            agent: "choria_provision",
            collective: "provisioning",
            caller_id: "choria=p1",
            sender_id: "p1",
            ttl: 60,
            filter: &Filter::default(),
            body: &body.encode(),
            request_id: None,
            time_ns: None,
            seen_by: Some("nats://user:pw-4242@broker:4222"),
        };
        let reply = RpcReply {
            action: "jwt".into(),
            statuscode: 0,
            statusmsg: "OK".into(),
            data: json!({ "jwt": format!("eyJ.{TOKEN}.sig"), "ecdh_public": "ab" }),
        };
        let decoded_reply = DecodedReply {
            protocol: Protocol::V1,
            request_id: "r1".into(),
            sender_id: "n1".into(),
            agent: "choria_provision".into(),
            time: 1,
            body: reply.encode(),
        };
        let decoded_request = DecodedRequest {
            protocol: Protocol::V2,
            request_id: "r1".into(),
            sender_id: "p1".into(),
            caller_id: "choria=p1".into(),
            collective: "provisioning".into(),
            agent: "choria_provision".into(),
            ttl: 60,
            time: 1,
            filter: Filter::default(),
            body: body.encode(),
            reply_to: "provisioning.reply.x".into(),
        };
        for shown in [
            format!("{body:?}"),
            format!("{spec:?}"),
            format!("{reply:?}"),
            format!("{decoded_reply:?}"),
            format!("{decoded_request:?}"),
        ] {
            assert!(!shown.contains(TOKEN), "{shown}");
            assert!(!shown.contains("pw-4242"), "{shown}");
        }
        assert!(format!("{body:?}").contains("\"token\": ***"), "{body:?}");
        assert!(format!("{reply:?}").contains("\"jwt\": ***"), "{reply:?}");
        assert!(format!("{spec:?}").contains("body: <"), "{spec:?}");
    }
}
