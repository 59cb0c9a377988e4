//! The fields each action's reply is read for, decoded straight from the reply's JSON
//! text ([`ReplyData::fields`]): no `serde_json::Value` per reply. As go-choria's
//! generated clients read them, a missing or `null` field is empty; a field of another
//! type fails the try with a message that names the action and the field, never the
//! node's value.

use serde::Deserialize;

use crate::choria::protocol::mcorpc::ReplyData;

/// `choria_provision#jwt`.
#[derive(Deserialize)]
pub(crate) struct JwtReply {
    /// The provisioning JWT the node was given.
    pub(crate) jwt: Option<String>,
    /// The node's X25519 public key for key transport (hex).
    pub(crate) ecdh_public: Option<String>,
}

/// `choria_provision#gen25519`.
#[derive(Deserialize)]
pub(crate) struct Gen25519Reply {
    /// Hex ed25519 public key.
    pub(crate) public_key: Option<String>,
    /// Directory holding `server.seed`.
    pub(crate) directory: Option<String>,
    /// Hex signature of the nonce.
    pub(crate) signature: Option<String>,
}

/// `choria_provision#gencsr`.
#[derive(Deserialize)]
pub(crate) struct GencsrReply {
    /// PEM CSR.
    pub(crate) csr: Option<String>,
    /// PEM public key.
    pub(crate) public_key: Option<String>,
    /// SSL directory on the node.
    pub(crate) ssldir: Option<String>,
}

/// What the sequence reads of `rpcutil#inventory` itself (the whole object goes to
/// the helper, re-encoded as Go does).
#[derive(Deserialize)]
pub(crate) struct InventoryReply<'a> {
    /// The server's version.
    #[serde(default, borrow)]
    pub(crate) version: Option<std::borrow::Cow<'a, str>>,
    /// Whether the server can upgrade itself.
    pub(crate) upgradable: Option<bool>,
}

/// A reply whose data does not hold what its action reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{action} reply data: {why}")]
pub(crate) struct BadReplyData {
    /// The action that answered.
    action: &'static str,
    /// What is wrong and where, without the node's value.
    why: String,
}

impl BadReplyData {
    /// `e`, met reading `action`'s reply data.
    pub(crate) fn new(action: &'static str, e: &serde_json::Error) -> BadReplyData {
        BadReplyData {
            action,
            why: crate::json_text::describe(e),
        }
    }
}

/// `data`'s fields as `T`, or why not.
pub(crate) fn read<'a, T: Deserialize<'a>>(
    data: &'a ReplyData,
    action: &'static str,
) -> Result<T, BadReplyData> {
    data.fields().map_err(|e| BadReplyData::new(action, &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(text: &str) -> ReplyData {
        let body = format!(r#"{{"statuscode":0,"data":{text}}}"#);
        crate::choria::protocol::mcorpc::ReplyBody::decode(body.as_bytes())
            .unwrap()
            .data
    }

    /// Why `data`, as `action`'s reply data, is not a `T`.
    fn refused<'a, T: Deserialize<'a>>(data: &'a ReplyData, action: &'static str) -> String {
        match read::<T>(data, action) {
            Ok(_) => panic!("{action} reply data was read"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn missing_and_null_fields_are_empty_and_others_are_skipped() {
        let r: GencsrReply = read(
            &data(r#"{"csr":"PEM","ssldir":null,"x":[{"y":1e400}]}"#),
            "gencsr",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.csr.as_deref(), Some("PEM"));
        assert_eq!((r.public_key, r.ssldir), (None, None));
        let inventory = data(r#"{"facts":{},"version":"0.30.2"}"#);
        let r: InventoryReply = read(&inventory, "inventory").unwrap();
        assert_eq!(r.version.as_deref(), Some("0.30.2"));
        assert_eq!(r.upgradable, None);
    }

    #[test]
    fn a_field_of_another_type_is_named_but_its_value_is_not_shown() {
        let e = refused::<JwtReply>(&data(r#"{"jwt":["tok-3f9a"]}"#), "jwt");
        assert!(
            e.starts_with("jwt reply data: invalid type: sequence, expected a string"),
            "{e}"
        );
        assert!(!e.contains("tok-3f9a"), "{e}");
        let e = refused::<InventoryReply>(&data(r#"{"upgradable":"yes"}"#), "inventory");
        assert!(
            e.starts_with("inventory reply data: invalid type: string"),
            "{e}"
        );
        assert!(!e.contains("yes"), "{e}");
        // Go's map-based client would take the last; a real node never repeats a
        // field, so the ambiguity is refused.
        let e = refused::<JwtReply>(&data(r#"{"jwt":"a","jwt":"b"}"#), "jwt");
        assert!(
            e.starts_with("jwt reply data: duplicate field `jwt`"),
            "{e}"
        );
    }
}
