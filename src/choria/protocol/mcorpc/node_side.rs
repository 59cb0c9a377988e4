//! The MCollective-RPC layer's node side (see `protocol::node_side`): status codes,
//! a request body read, a reply body written and read.

use serde::{Deserialize, Serialize};

use super::super::{gojson, read_json, Layer, ProtocolError};
use super::RpcRequestBody;

/// MCollective SimpleRPC status codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusCode {
    /// 0: the action completed.
    Ok = 0,
    /// 1: refused or failed (token, lock, abort).
    Aborted = 1,
    /// 2: no such action.
    UnknownAction = 2,
    /// 3: a required input is missing.
    MissingData = 3,
    /// 4: the request or its data could not be parsed.
    InvalidData = 4,
    /// 5: generic failure.
    UnknownError = 5,
}

impl RpcRequestBody {
    /// A body for `agent#action` with `data` (objects are sent with sorted keys).
    pub fn new(agent: &str, action: &str, data: serde_json::Value) -> RpcRequestBody {
        RpcRequestBody {
            agent: agent.to_string(),
            action: action.to_string(),
            data: sorted(data),
        }
    }

    /// The body's bytes as Go writes them.
    pub fn encode(&self) -> Vec<u8> {
        gojson::to_vec(self)
    }

    /// Decodes a request body (server side); `data` of `null` becomes `{}`.
    pub fn decode(bytes: &[u8]) -> Result<RpcRequestBody, ProtocolError> {
        let mut body: RpcRequestBody = read_json(Layer::Body, bytes)?;
        if body.data.is_null() {
            body.data = serde_json::json!({});
        }
        Ok(body)
    }
}

/// Sorts object keys recursively, as Go's map encoding does.
fn sorted(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<_> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(sorted).collect())
        }
        other => other,
    }
}

/// A reply body.
#[derive(Clone, Serialize, PartialEq)]
pub struct RpcReply {
    /// The action that answered (`""` when the request could not be parsed).
    pub action: String,
    /// Status code, 0 for OK.
    pub statuscode: u64,
    /// `OK` or the reason for failure.
    pub statusmsg: String,
    /// The outputs (always an object here; Go's occasional string `"{}"` becomes `{}`).
    pub data: serde_json::Value,
}

#[derive(Deserialize)]
struct WireReply {
    action: Option<String>,
    statuscode: u64,
    statusmsg: Option<String>,
    #[serde(default)]
    data: serde_json::Value,
}

impl RpcReply {
    /// A reply with `code`, `msg` and `data`.
    pub fn new(action: &str, code: StatusCode, msg: &str, data: serde_json::Value) -> RpcReply {
        RpcReply {
            action: action.to_string(),
            statuscode: code as u64,
            statusmsg: msg.to_string(),
            data,
        }
    }

    /// The body's bytes as Go writes them, field by field (the bytes
    /// `gojson::to_vec(self)` gives, without serde's formatter: the simulator writes
    /// one per request).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        gojson::Object::start(&mut out)
            .str("action", &self.action)
            .value("statuscode", &self.statuscode)
            .str("statusmsg", &self.statusmsg)
            .raw("data", |out| {
                gojson::write_value(out, &self.data, gojson::Style::AsIs)
            })
            .end();
        out
    }

    /// Decodes a reply body, tolerating `data` as `null` or as a string holding JSON.
    pub fn decode(bytes: &[u8]) -> Result<RpcReply, ProtocolError> {
        let wire: WireReply = read_json(Layer::Body, bytes)?;
        let data = match wire.data {
            serde_json::Value::Null => serde_json::json!({}),
            serde_json::Value::String(text) => serde_json::from_str(&text).map_err(|e| {
                ProtocolError::new(
                    Layer::Body,
                    format!("data is a string that is not JSON: {e}"),
                )
            })?,
            other => other,
        };
        if !data.is_object() {
            return Err(ProtocolError::new(Layer::Body, "data is not an object"));
        }
        Ok(RpcReply {
            action: wire.action.unwrap_or_default(),
            statuscode: wire.statuscode,
            statusmsg: wire.statusmsg.unwrap_or_default(),
            data,
        })
    }
}
