//! One simulated provisioning-mode server: its state and the `rpcutil#inventory` and
//! `choria_provision` actions with the inputs, checks and messages of go-choria's
//! provision agent (`spec/provision-agent.md`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use crate::choria::protocol::ids::{hex, random_bytes};
use crate::choria::protocol::mcorpc::{RpcReply, StatusCode};
use crate::host::{crypto, pem};

/// How long a provisioning lock lasts after the owner's last locked call.
pub const LOCK: Duration = Duration::from_secs(120);

/// Where a node is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// In provisioning mode, answering the provisioner.
    Provisioning,
    /// Restarting (after restart or release_update); silent until it comes back.
    Restarting,
    /// Configured and restarted out of provisioning mode.
    Provisioned,
    /// Shut down on the helper's request.
    Shutdown,
}

/// What a node does after the provisioner restarts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRestart {
    /// Leaves the provisioning collective for good.
    Leave,
    /// Comes back in provisioning mode (e.g. no `plugin.choria.server.provision`
    /// and a `--default` JWT).
    ComeBack,
}

/// A node's state, all of it visible in the summary.
#[derive(Debug)]
pub struct Node {
    /// Identity.
    pub identity: String,
    /// Server version reported in inventory.
    pub version: String,
    /// Whether `release_update` is allowed (JWT `update` claim).
    pub upgradable: bool,
    /// The provisioning token (`cht`); empty accepts anything.
    pub token: String,
    /// The provisioning JWT text returned by `jwt`.
    pub jwt: String,
    /// Current phase.
    pub phase: Phase,
    /// What happens after a restart.
    pub after_restart: AfterRestart,
    /// Every action received, in order (`agent#action`).
    pub rpcs: Vec<String>,
    /// The configuration last written by `configure`.
    pub configuration: Option<BTreeMap<String, String>>,
    /// The private key decrypted by the last `configure`, if one was sent.
    pub private_key: Option<Vec<u8>>,
    /// The server JWT last written.
    pub server_jwt: Option<String>,
    /// Policies written (file names).
    pub policies: Vec<String>,
    /// Times `restart` succeeded.
    pub restarts: u32,
    /// Versions upgraded to.
    pub upgrades: Vec<String>,
    /// Requests received (all agents), for faults.
    pub requests: u32,
    /// When the first request arrived.
    pub first_request: Option<Instant>,
    /// When the last successful restart was asked for.
    pub restarted_at: Option<Instant>,
    lock: Option<(String, Instant)>,
    ecdh: Option<[u8; 32]>,
    seed: Option<[u8; 32]>,
}

/// What handling one request produced.
#[derive(Debug)]
pub enum Effect {
    /// Nothing more.
    None,
    /// Restart in 2 s (then leave or come back).
    Restart,
    /// Upgrade to this version and restart in 2 s.
    Upgrade(String),
    /// Exit and stay down.
    Shutdown,
}

fn ok(action: &str, data: Value) -> RpcReply {
    RpcReply::new(action, StatusCode::Ok, "OK", data)
}

fn abort(action: &str, msg: &str) -> RpcReply {
    RpcReply::new(action, StatusCode::Aborted, msg, json!({}))
}

/// The string input `key`, with Go's decoding: missing is empty, wrong type is status 4.
fn input<'a>(data: &'a Value, key: &str) -> Result<&'a str, String> {
    match data.get(key) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!("{key} is {other}, not a string")),
    }
}

impl Node {
    /// A node in provisioning mode.
    pub fn new(identity: &str, version: &str, token: &str, jwt: String) -> Node {
        Node {
            identity: identity.to_string(),
            version: version.to_string(),
            upgradable: false,
            token: token.to_string(),
            jwt,
            phase: Phase::Provisioning,
            after_restart: AfterRestart::Leave,
            rpcs: Vec::new(),
            configuration: None,
            private_key: None,
            server_jwt: None,
            policies: Vec::new(),
            restarts: 0,
            upgrades: Vec::new(),
            requests: 0,
            first_request: None,
            restarted_at: None,
            lock: None,
            ecdh: None,
            seed: None,
        }
    }

    /// Forgets in-memory state as a process restart does (keys, lock).
    pub fn reboot(&mut self) {
        self.lock = None;
        self.ecdh = None;
    }

    /// Takes or extends the provisioning lock for `owner`.
    fn lock(&mut self, owner: &str, now: Instant) -> bool {
        match &self.lock {
            Some((held, until)) if held != owner && *until > now => false,
            _ => {
                self.lock = Some((owner.to_string(), now + LOCK));
                true
            }
        }
    }

    /// Handles `agent#action` with `data` from `sender`/`caller`.
    pub fn handle(
        &mut self,
        agent: &str,
        action: &str,
        data: &Value,
        owner: &str,
        now: Instant,
    ) -> (RpcReply, Effect) {
        self.rpcs.push(format!("{agent}#{action}"));
        match (agent, action) {
            ("rpcutil", "inventory") => (self.inventory(), Effect::None),
            ("choria_provision", _) => self.provision(action, data, owner, now),
            _ => (
                RpcReply::new(
                    action,
                    StatusCode::UnknownAction,
                    &format!("Unknown action {action} for agent {agent}"),
                    json!({}),
                ),
                Effect::None,
            ),
        }
    }

    fn inventory(&self) -> RpcReply {
        ok(
            "inventory",
            json!({
                "agents": ["choria_provision", "choria_util", "discovery", "rpcutil"],
                "classes": [],
                "collectives": ["provisioning"],
                "data_plugins": ["choria", "config_item", "scout"],
                "facts": {"role": "web", "identity": self.identity},
                "machines": [],
                "main_collective": "provisioning",
                "version": self.version,
                "upgradable": self.upgradable,
            }),
        )
    }

    fn provision(
        &mut self,
        action: &str,
        data: &Value,
        owner: &str,
        now: Instant,
    ) -> (RpcReply, Effect) {
        let locked = matches!(
            action,
            "configure" | "gen25519" | "gencsr" | "jwt" | "release_update"
        );
        if locked && !self.lock(owner, now) {
            return (
                abort(action, "Could not obtain provisioning lock"),
                Effect::None,
            );
        }
        if self.phase != Phase::Provisioning && action != "restart" && action != "shutdown" {
            let msg = if action == "release_update" {
                "Cannot update a server that is not in provisioning mode"
            } else {
                "Cannot reconfigure a server that is not in provisioning mode"
            };
            return (abort(action, msg), Effect::None);
        }
        let token = match input(data, "token") {
            Ok(t) => t,
            Err(e) => return (self.invalid(action, &e), Effect::None),
        };
        if !self.token.is_empty() && token != self.token {
            return (
                abort(action, "Incorrect provision token supplied"),
                Effect::None,
            );
        }
        let result = match action {
            "jwt" => Ok((self.jwt(), Effect::None)),
            "gen25519" => self.gen25519(data).map(|r| (r, Effect::None)),
            "configure" => self.configure(data).map(|r| (r, Effect::None)),
            "restart" => self.restart(data),
            "release_update" => self.release_update(data),
            "shutdown" => Ok((
                ok(
                    "shutdown",
                    json!({"message": "Shutting Choria Server down after 1s"}),
                ),
                Effect::Shutdown,
            )),
            "gencsr" => self.gencsr(data).map(|r| (r, Effect::None)),
            other => Ok((
                RpcReply::new(
                    other,
                    StatusCode::UnknownAction,
                    &format!("Unknown action {other} for agent choria_provision"),
                    json!({}),
                ),
                Effect::None,
            )),
        };
        result.unwrap_or_else(|(code, msg)| {
            (RpcReply::new(action, code, &msg, json!({})), Effect::None)
        })
    }

    fn invalid(&self, action: &str, why: &str) -> RpcReply {
        RpcReply::new(
            action,
            StatusCode::InvalidData,
            &format!("Could not parse request data for choria_provision#{action}: {why}"),
            json!({}),
        )
    }

    fn jwt(&mut self) -> RpcReply {
        let mut secret = [0u8; 32];
        random_bytes(&mut secret);
        let public = x25519_dalek::PublicKey::from(&x25519_dalek::StaticSecret::from(secret));
        self.ecdh = Some(secret);
        ok(
            "jwt",
            json!({"jwt": self.jwt, "ecdh_public": hex(public.as_bytes())}),
        )
    }

    fn gen25519(&mut self, data: &Value) -> Result<RpcReply, (StatusCode, String)> {
        let nonce = input(data, "nonce").map_err(|e| (StatusCode::InvalidData, e))?;
        let mut seed = [0u8; 32];
        random_bytes(&mut seed);
        let key = ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed)
            .map_err(|_| (StatusCode::Aborted, "Could not create keypair".to_string()))?;
        use ring::signature::KeyPair as _;
        self.seed = Some(seed);
        self.server_jwt = None;
        Ok(ok(
            "gen25519",
            json!({
                "public_key": hex(key.public_key().as_ref()),
                "directory": "/etc/choria",
                "signature": hex(key.sign(nonce.as_bytes()).as_ref()),
            }),
        ))
    }

    /// `gencsr`: a new key and a CSR whose CN is `cn` (or the identity). Real nodes
    /// make RSA 2048 keys; the simulator makes P-256 keys, which are far cheaper and
    /// exercise the same parsing and checks.
    fn gencsr(&mut self, data: &Value) -> Result<RpcReply, (StatusCode, String)> {
        use p256::pkcs8::{EncodePublicKey, LineEnding};
        use std::str::FromStr;
        use x509_cert::builder::{Builder, RequestBuilder};
        use x509_cert::der::EncodePem;
        let cn = input(data, "cn").map_err(|e| (StatusCode::InvalidData, e))?;
        let cn = if cn.is_empty() {
            self.identity.clone()
        } else {
            cn.to_string()
        };
        let fail = |e: String| (StatusCode::Aborted, format!("Could not create CSR: {e}"));
        let mut secret = [0u8; 32];
        random_bytes(&mut secret);
        let key = p256::ecdsa::SigningKey::from_slice(&secret).map_err(|e| fail(e.to_string()))?;
        let subject = x509_cert::name::Name::from_str(&format!("CN={cn}"))
            .map_err(|e| fail(e.to_string()))?;
        let csr = RequestBuilder::new(subject, &key)
            .and_then(|b| b.build::<p256::ecdsa::DerSignature>())
            .map_err(|e| fail(e.to_string()))?;
        let csr_pem = csr
            .to_pem(LineEnding::LF)
            .map_err(|e| fail(e.to_string()))?;
        let public = key
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .map_err(|e| fail(e.to_string()))?;
        Ok(ok(
            "gencsr",
            json!({"csr": csr_pem, "public_key": public, "ssldir": "/etc/choria/ssl"}),
        ))
    }

    fn configure(&mut self, data: &Value) -> Result<RpcReply, (StatusCode, String)> {
        let text = |k: &str| {
            input(data, k)
                .map(str::to_string)
                .map_err(|e| (StatusCode::InvalidData, e))
        };
        let config = text("config")?;
        if config.is_empty() {
            return Err((StatusCode::Aborted, "Did not receive any configuration to write, cannot write a empty configuration file".into()));
        }
        let (key, ecdh_public) = (text("key")?, text("ecdh_public")?);
        if !key.is_empty() && ecdh_public.is_empty() {
            return Err((
                StatusCode::Aborted,
                "EDCH Public Key not supplied while providing a private key".into(),
            ));
        }
        let settings: BTreeMap<String, String> = serde_json::from_str(&config).map_err(|e| {
            (
                StatusCode::Aborted,
                format!("Could not decode configuration data: {e}"),
            )
        })?;
        let (certificate, ca, ssldir) = (text("certificate")?, text("ca")?, text("ssldir")?);
        if !certificate.is_empty() && !ca.is_empty() && !ssldir.is_empty() && !key.is_empty() {
            self.private_key = Some(self.decrypt(&key, &ecdh_public).map_err(|e| {
                (
                    StatusCode::Aborted,
                    format!("TLS Setup Failed: could not decrypt private key: {e}"),
                )
            })?);
        }
        let server_jwt = text("server_jwt")?;
        if !server_jwt.is_empty() {
            self.server_jwt = Some(server_jwt);
        }
        for (kind, ext) in [("action_policies", ".policy"), ("opa_policies", ".rego")] {
            if let Some(map) = data.get(kind).and_then(|m| m.as_object()) {
                for name in map.keys() {
                    if !name.ends_with(ext) {
                        return Err((StatusCode::Aborted, format!("Could not save policies: expected \"{name}\" to have {ext} extension")));
                    }
                    self.policies.push(name.clone());
                }
            }
        }
        let lines = settings.len() + 1;
        self.configuration = Some(settings);
        Ok(ok(
            "configure",
            json!({"message": format!("Wrote {lines} lines to /etc/choria/server.conf")}),
        ))
    }

    fn decrypt(&self, key: &str, ecdh_public: &str) -> Result<Vec<u8>, String> {
        let secret = self.ecdh.ok_or("private key not set")?;
        let theirs: [u8; 32] = crate::choria::protocol::ids::unhex(ecdh_public)
            .and_then(|k| k.try_into().ok())
            .ok_or("invalid ecdh_public")?;
        let shared = x25519_dalek::StaticSecret::from(secret)
            .diffie_hellman(&x25519_dalek::PublicKey::from(theirs));
        let block = pem::decode(key).ok_or("bad key received")?;
        crypto::decrypt_pem_block(&block, shared.as_bytes())
    }

    fn restart(&mut self, data: &Value) -> Result<(RpcReply, Effect), (StatusCode, String)> {
        match data.get("splay") {
            None | Some(Value::Null) => {}
            Some(Value::Number(n)) if n.is_i64() && n.as_i64().unwrap_or(0) >= 0 => {}
            Some(other) => {
                return Err((
                    StatusCode::InvalidData,
                    format!("splay is {other}, not an integer"),
                ))
            }
        }
        let enables = self
            .configuration
            .as_ref()
            .and_then(|c| c.get("plugin.choria.server.provision"))
            .map(|v| matches!(v.as_str(), "true" | "1" | "yes" | "y" | "t"))
            .unwrap_or(false);
        if enables || self.configuration.is_none() {
            return Err((StatusCode::Aborted, "Configuration /etc/choria/server.conf enables provisioning, restart cannot continue".into()));
        }
        self.restarts += 1;
        self.restarted_at = Some(Instant::now());
        Ok((
            ok(
                "restart",
                json!({"message": "Restarting Choria Server after 2s"}),
            ),
            Effect::Restart,
        ))
    }

    fn release_update(&mut self, data: &Value) -> Result<(RpcReply, Effect), (StatusCode, String)> {
        if !self.upgradable {
            return Err((
                StatusCode::Aborted,
                "Version updates is not enabled in the configuration".into(),
            ));
        }
        let version = input(data, "version")
            .map_err(|e| (StatusCode::InvalidData, e))?
            .to_string();
        let repository = input(data, "repository").map_err(|e| (StatusCode::InvalidData, e))?;
        if version.is_empty() || !repository.starts_with("http") {
            return Err((StatusCode::Aborted, format!("Update to version {version} failed, release rolled back: invalid repository or version")));
        }
        self.upgrades.push(version.clone());
        Ok((
            ok(
                "release_update",
                json!({"message": "Restarting Choria Server after 2s"}),
            ),
            Effect::Upgrade(version),
        ))
    }
}
