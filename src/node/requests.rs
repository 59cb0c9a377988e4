//! The data of the requests sent to every node (`configure`, `restart`), typed and
//! written field by field as Go's encoder writes the map the Go provisioner sends
//! (keys sorted, strings escaped as Go escapes them), without building a
//! `serde_json::Value` of copies first. Requests sent to some nodes only keep their
//! `json!` values.

use std::collections::BTreeMap;

use crate::choria::protocol::gojson;
use crate::choria::protocol::mcorpc::RequestData;

/// `choria_provision#configure`'s data (go-choria's provision agent, `providers/agent/mcorpc/golang/provision`).
pub(crate) struct ConfigureData<'a> {
    /// The provisioning token.
    pub(crate) token: &'a str,
    /// The configuration as a JSON object in a string.
    pub(crate) config: &'a str,
    /// CA bundle PEM.
    pub(crate) ca: &'a str,
    /// Signed certificate PEM.
    pub(crate) certificate: &'a str,
    /// Where the node keeps its TLS files.
    pub(crate) ssldir: &'a str,
    /// The private key, encrypted for the node.
    pub(crate) key: &'a str,
    /// Our side of the key exchange.
    pub(crate) ecdh_public: &'a str,
    /// Action Policy files.
    pub(crate) action_policies: &'a BTreeMap<String, String>,
    /// Open Policy Agent files.
    pub(crate) opa_policies: &'a BTreeMap<String, String>,
    /// The signed server JWT.
    pub(crate) server_jwt: &'a str,
}

impl RequestData for ConfigureData<'_> {
    fn write_go(&self, out: &mut Vec<u8>) {
        // Sorted, as Go's encoder sorts a map's keys.
        gojson::Object::start(out)
            .str_map("action_policies", self.action_policies)
            .str("ca", self.ca)
            .str("certificate", self.certificate)
            .str("config", self.config)
            .str("ecdh_public", self.ecdh_public)
            .str("key", self.key)
            .str_map("opa_policies", self.opa_policies)
            .str("server_jwt", self.server_jwt)
            .str("ssldir", self.ssldir)
            .str("token", self.token)
            .end();
    }
}

/// `choria_provision#restart`'s data: the token and a splay of one second.
pub(crate) struct RestartData<'a> {
    /// The provisioning token.
    pub(crate) token: &'a str,
}

impl RequestData for RestartData<'_> {
    fn write_go(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(br#"{"splay":1,"token":"#);
        gojson::write_str(out, self.token);
        out.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn written(data: &dyn RequestData) -> String {
        let mut out = Vec::new();
        data.write_go(&mut out);
        String::from_utf8(out).unwrap()
    }

    /// What the `json!` value the sequence used to send writes: the typed data must
    /// give the node the same bytes.
    fn as_value(data: serde_json::Value) -> String {
        written(&data)
    }

    #[test]
    fn configure_data_is_the_map_go_sends_byte_for_byte() {
        let policies: BTreeMap<String, String> = [
            (
                "z.policy".to_string(),
                "policy 1\nallow\t<all> & \"more\"".to_string(),
            ),
            ("a.policy".to_string(), "\u{2028}\u{7f}\u{1}é".to_string()),
        ]
        .into();
        for (actions, opa) in [
            (BTreeMap::new(), BTreeMap::new()),
            (policies.clone(), policies),
        ] {
            let data = ConfigureData {
                token: "s3cr\"et<",
                config: r#"{"plugin.choria.srv_domain":"x&y","a":"\n"}"#,
                ca: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
                certificate: "",
                ssldir: "/etc/choria/ssl",
                key: "ENCRYPTED\u{0}KEY",
                ecdh_public: "abcd",
                action_policies: &actions,
                opa_policies: &opa,
                server_jwt: "a.b.c",
            };
            let value = json!({
                "token": data.token,
                "config": data.config,
                "ca": data.ca,
                "certificate": data.certificate,
                "ssldir": data.ssldir,
                "key": data.key,
                "ecdh_public": data.ecdh_public,
                "action_policies": actions,
                "opa_policies": opa,
                "server_jwt": data.server_jwt,
            });
            assert_eq!(written(&data), as_value(value));
        }
    }

    #[test]
    fn restart_data_is_the_map_go_sends_byte_for_byte() {
        for token in ["s3cret", "", "{<\"&\u{2029}>}"] {
            assert_eq!(
                written(&RestartData { token }),
                as_value(json!({ "token": token, "splay": 1 }))
            );
        }
    }
}
