//! The MCollective-RPC layer inside request and reply messages
//! (go-choria's `protocol/v1` and `protocol/v2`): `{"agent","action","data"}` requests and
//! `{"action","statuscode","statusmsg","data"}` replies.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{gojson, read_json, Layer, ProtocolError};

#[cfg(any(test, feature = "node-side"))]
mod node_side;
#[cfg(any(test, feature = "node-side"))]
pub use node_side::{RpcReply, StatusCode};

/// An RPC request's `data` object as a node gets it: written as Go's encoder writes
/// the map it is made from (keys sorted, strings escaped as Go escapes them). A
/// `serde_json::Value` is one; a request sent on every node (`configure`) has a typed
/// one that writes itself without building a tree of copies first.
pub(crate) trait RequestData {
    /// Appends the object to `out`.
    fn write_go(&self, out: &mut Vec<u8>);
}

impl RequestData for serde_json::Value {
    fn write_go(&self, out: &mut Vec<u8>) {
        gojson::write_value(out, self, gojson::Style::SortedKeys)
    }
}

impl<T: RequestData + ?Sized> RequestData for &T {
    fn write_go(&self, out: &mut Vec<u8>) {
        (**self).write_go(out)
    }
}

/// A request body, keys in Go's order (`agent`, `action`, `data`).
#[derive(Clone, Serialize, Deserialize, PartialEq)]
pub struct RpcRequestBody {
    /// Agent name.
    pub agent: String,
    /// Action name.
    pub action: String,
    /// Inputs (an object; Go's map makes the keys sorted).
    #[serde(default)]
    pub data: serde_json::Value,
}

impl RpcRequestBody {
    /// The bytes [`RpcRequestBody::new`]`(agent, action, data).encode()` gives, without
    /// copying `data` to sort it: its keys are sorted as they are written.
    #[cfg(test)]
    pub(crate) fn encode_for(agent: &str, action: &str, data: &serde_json::Value) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        RpcRequestBody::write_for(&mut out, agent, action, data);
        out
    }

    /// [`RpcRequestBody::encode_for`] appended to `out`, so a caller can reuse its
    /// buffer.
    pub(crate) fn write_for(out: &mut Vec<u8>, agent: &str, action: &str, data: &dyn RequestData) {
        gojson::Object::start(out)
            .str("agent", agent)
            .str("action", action)
            .raw("data", |out| data.write_go(out))
            .end();
    }
}

/// A reply's `data` as the provisioner reads it: checked to be one JSON object and
/// kept as its text. Each action decodes the few fields it reads into a typed struct
/// straight from it ([`ReplyData::fields`]), with no `serde_json::Value` tree per
/// reply; only the accepted inventory is decoded whole, once, to be re-encoded
/// (`gojson::write_map`). The object's syntax is checked when the reply is read; a
/// value is checked (a number's range, a field's type) when an action reads it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ReplyData(String);

impl Default for ReplyData {
    fn default() -> ReplyData {
        ReplyData("{}".into())
    }
}

/// The node's data is not shown: it can hold anything, a key or a forged log line.
impl fmt::Debug for ReplyData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReplyData(<object of {} bytes>)", self.0.len())
    }
}

impl ReplyData {
    /// The data of `value`, which must be an object (scripted replies in tests).
    #[cfg(test)]
    pub(crate) fn from_value(value: &serde_json::Value) -> Option<ReplyData> {
        value
            .is_object()
            .then(|| ReplyData(gojson::to_string(value)))
    }

    /// The object's JSON text.
    pub(crate) fn text(&self) -> &str {
        &self.0
    }

    /// The fields `T` names, decoded from the text (the others are skipped unread).
    /// serde's error may quote the node's value: it is shown only through
    /// `json_text::describe`, as `node::replies::read` does.
    pub(crate) fn fields<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.0)
    }

    /// The whole object as a `Value` (tests and rare paths).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn to_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_str(&self.0)
    }
}

/// A reply body as the provisioner reads it: [`RpcReply::decode`]'s rules, with the
/// data kept as checked JSON text ([`ReplyData`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ReplyBody {
    /// Status code, 0 for OK.
    pub(crate) statuscode: u64,
    /// `OK` or the reason for failure.
    pub(crate) statusmsg: String,
    /// The outputs, an object.
    pub(crate) data: ReplyData,
}

#[derive(Deserialize)]
struct WireReplyText<'a> {
    #[serde(default, rename = "action")]
    _action: Option<std::borrow::Cow<'a, str>>,
    statuscode: u64,
    statusmsg: Option<String>,
    #[serde(default, borrow)]
    data: Option<&'a serde_json::value::RawValue>,
}

impl ReplyBody {
    /// Decodes a reply body, tolerating `data` as `null` or as a string holding JSON
    /// (Go's occasional `"{}"`), which must be an object either way.
    pub(crate) fn decode(bytes: &[u8]) -> Result<ReplyBody, ProtocolError> {
        let wire: WireReplyText = read_json(Layer::Body, bytes)?;
        let not_object = || ProtocolError::new(Layer::Body, "data is not an object");
        let data = match wire.data.map(|raw| raw.get()) {
            None => ReplyData::default(),
            Some(text) if text.starts_with('"') => {
                let inner: String =
                    serde_json::from_str(text).map_err(|e| ProtocolError::json(Layer::Body, &e))?;
                let raw: &serde_json::value::RawValue =
                    serde_json::from_str(&inner).map_err(|e| {
                        ProtocolError::new(
                            Layer::Body,
                            format!(
                                "data is a string that is not JSON: {}",
                                crate::json_text::describe(&e)
                            ),
                        )
                    })?;
                if !raw.get().starts_with('{') {
                    return Err(not_object());
                }
                ReplyData(raw.get().to_owned())
            }
            Some(text) if text.starts_with('{') => ReplyData(text.to_owned()),
            Some(_) => return Err(not_object()),
        };
        Ok(ReplyBody {
            statuscode: wire.statuscode,
            statusmsg: wire.statusmsg.unwrap_or_default(),
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_bodies_as_go_writes_them() {
        let body = RpcRequestBody::new(
            "choria_provision",
            "restart",
            serde_json::json!({"token": "s3cret", "splay": 1}),
        );
        assert_eq!(
            String::from_utf8(body.encode()).unwrap(),
            r#"{"agent":"choria_provision","action":"restart","data":{"splay":1,"token":"s3cret"}}"#
        );
        let inventory = RpcRequestBody::new("rpcutil", "inventory", serde_json::json!({}));
        assert_eq!(
            inventory.encode().len(),
            50,
            "the 50 bytes of the worked example"
        );
        let nested = serde_json::json!({"z": [{"b": 1, "a": "<&>"}], "a": {"d": null, "c": true}});
        assert_eq!(
            RpcRequestBody::encode_for("x", "y", &nested),
            RpcRequestBody::new("x", "y", nested.clone()).encode(),
            "sorted while written, as when sorted first"
        );
    }

    #[test]
    fn a_reply_body_is_written_as_serde_writes_the_struct() {
        let reply = RpcReply::new(
            "inventory",
            StatusCode::Ok,
            "OK <&>",
            serde_json::json!({"z": [1, 2.5, null, {"b": "\u{2028}", "a": true}], "a": "x\n"}),
        );
        assert_eq!(reply.encode(), gojson::to_vec(&reply));
        assert_eq!(RpcReply::decode(&reply.encode()).unwrap(), reply);
    }

    #[test]
    fn replies_tolerate_string_and_null_data() {
        let r = RpcReply::decode(br#"{"action":"x","statuscode":0,"statusmsg":"OK","data":"{}"}"#)
            .unwrap();
        assert_eq!(r.data, serde_json::json!({}));
        let r = RpcReply::decode(
            br#"{"statuscode":1,"statusmsg":"Could not obtain provisioning lock","data":null}"#,
        )
        .unwrap();
        assert_eq!(r.statuscode, 1);
        assert!(RpcReply::decode(br#"{"statuscode":"0"}"#).is_err());
        assert!(RpcReply::decode(br#"{"statuscode":0,"data":[1]}"#).is_err());
        assert!(RpcReply::decode(b"pong").is_err());
    }

    #[test]
    fn decode_errors_do_not_repeat_what_the_node_sent() {
        // A node can put anything where a number belongs, our token or a forged
        // log line: the error says what and where, not the value.
        let e = RpcReply::decode(b"{\"statuscode\": \"tok-3f9a\\nlevel=info msg=forged\"}")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("tok-3f9a") && !e.contains("forged"), "{e}");
        assert_eq!(
            e,
            "invalid RPC body: invalid type: string, expected u64 at line 1 column 48"
        );
        let e = RpcRequestBody::decode(br#"{"agent": ["tok-3f9a"]}"#)
            .unwrap_err()
            .to_string();
        assert!(!e.contains("tok-3f9a"), "{e}");
    }
}
