//! One simulated provisioning-mode server: its state and the `rpcutil#inventory` and
//! `choria_provision` actions with the inputs, checks and messages of go-choria's
//! provision agent (go-choria's provision agent, `providers/agent/mcorpc/golang/provision`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use crate::choria::protocol::mcorpc::{RpcReply, StatusCode};
use crate::crypto::ids::random_bytes;
use crate::crypto::{key_transport as crypto, pem};

/// The setting that turns provisioning mode on or off.
pub const PROVISION_KEY: &str = "plugin.choria.server.provision";

/// A Choria boolean setting that is true.
fn config_true(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "true" | "1" | "yes" | "y" | "t" | "on"
    )
}

/// A random number in `[0, n)` (n > 0), as Go's `rand.Intn` for the delays.
fn below(n: u64) -> u64 {
    let mut r = [0u8; 8];
    random_bytes(&mut r);
    u64::from_le_bytes(r) % n.max(1)
}

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
    /// Restarted with a server JWT the broker refuses: out of provisioning mode and
    /// unable to join the fleet (see the node's `note`).
    Rejected,
}

/// The key a node makes for `gencsr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CsrKey {
    /// RSA 2048, as real nodes make (tens of milliseconds each).
    #[default]
    Rsa,
    /// P-256: far cheaper, for benchmarks; the same CSR checks apply.
    Ec,
}

/// The agents a provisioning-mode server runs.
pub const AGENTS: [&str; 4] = ["choria_provision", "choria_util", "discovery", "rpcutil"];

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
    /// The provisioning JWT text returned by `jwt`: one text shared by the whole fleet
    /// (a copy per node was 550 bytes each, 55 MB at 100,000 nodes).
    pub jwt: Arc<str>,
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
    /// The certificate written by the last `configure`, if one was sent.
    pub certificate: Option<String>,
    /// The CA written by the last `configure`, if one was sent.
    pub ca: Option<String>,
    /// Why the node is where it is after its last restart, when that is not plain.
    pub note: Option<String>,
    /// The key `gencsr` makes.
    pub csr_key: CsrKey,
    /// go-choria's provisioning lock window (two minutes, extended on each locked
    /// call); `None` plays a server older than v0.29, which has no lock.
    pub lock_window: Option<Duration>,
    /// The distinct senders (provisioner identities) that sent it an agent request,
    /// in order of their first one.
    pub callers: Vec<String>,
    /// The sender whose `restart` succeeded last.
    pub restarted_by: Option<String>,
    lock: Option<(String, Instant)>,
    ecdh: Option<[u8; 32]>,
    seed: Option<[u8; 32]>,
}

/// What handling one request produced.
#[derive(Debug)]
pub enum NodeEffect {
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
    pub fn new(identity: &str, version: &str, token: &str, jwt: Arc<str>) -> Node {
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
            certificate: None,
            ca: None,
            note: None,
            csr_key: CsrKey::default(),
            lock_window: Some(LOCK),
            callers: Vec::new(),
            restarted_by: None,
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

    /// Takes or extends the provisioning lock for `owner` (always granted without a
    /// lock, as an old server does).
    fn lock(&mut self, owner: &str, now: Instant) -> bool {
        let Some(window) = self.lock_window else {
            return true;
        };
        match &self.lock {
            Some((held, until)) if held != owner && *until > now => false,
            _ => {
                self.lock = Some((owner.to_string(), now + window));
                true
            }
        }
    }

    /// Notes that `sender` sent this node a request.
    pub fn touched_by(&mut self, sender: &str) {
        if !self.callers.iter().any(|c| c == sender) {
            self.callers.push(sender.to_string());
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
    ) -> (RpcReply, NodeEffect) {
        self.rpcs.push(format!("{agent}#{action}"));
        match (agent, action) {
            ("rpcutil", "inventory") => (self.inventory(), NodeEffect::None),
            // go-choria's rpcutil#ping: the server's time.
            ("rpcutil", "ping") => (
                RpcReply::new(
                    action,
                    StatusCode::Ok,
                    "OK",
                    json!({"pong": crate::clock::unix_now() as i64}),
                ),
                NodeEffect::None,
            ),
            ("choria_provision", _) => self.provision(action, data, owner, now),
            _ => (
                RpcReply::new(
                    action,
                    StatusCode::UnknownAction,
                    &format!("Unknown action {action} for agent {agent}"),
                    json!({}),
                ),
                NodeEffect::None,
            ),
        }
    }

    /// The node's facts: a small, realistic document derived from its identity.
    pub fn facts(&self) -> Value {
        let host = self.identity.split('.').next().unwrap_or_default();
        let number: u64 = host.bytes().filter(u8::is_ascii_digit).fold(0, |n, d| {
            n.wrapping_mul(10).wrapping_add(u64::from(d - b'0'))
        });
        let role = ["web", "db", "cache", "worker"][(number % 4) as usize];
        json!({
            "identity": self.identity,
            "role": role,
            "os": {"family": "RedHat", "name": "AlmaLinux", "release": {"major": "9", "full": "9.4"}},
            "networking": {"hostname": host, "fqdn": self.identity},
            "processors": {"count": 2 + number % 7},
            "memory": {"system": {"total_bytes": (4 + number % 29) << 30}},
            "choria": {"version": self.version},
            "dmi": {"product": {"serial_number": format!("SN{number:08}")}},
        })
    }

    fn inventory(&self) -> RpcReply {
        ok(
            "inventory",
            json!({
                "agents": AGENTS,
                "classes": [],
                "collectives": ["provisioning"],
                "data_plugins": ["choria", "config_item", "scout"],
                "facts": self.facts(),
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
    ) -> (RpcReply, NodeEffect) {
        let locked = matches!(
            action,
            "configure" | "gen25519" | "gencsr" | "jwt" | "release_update"
        );
        if locked && !self.lock(owner, now) {
            return (
                abort(action, "Could not obtain provisioning lock"),
                NodeEffect::None,
            );
        }
        if self.phase != Phase::Provisioning && action != "restart" && action != "shutdown" {
            let msg = if action == "release_update" {
                "Cannot update a server that is not in provisioning mode"
            } else {
                "Cannot reconfigure a server that is not in provisioning mode"
            };
            return (abort(action, msg), NodeEffect::None);
        }
        let token = match input(data, "token") {
            Ok(t) => t,
            Err(e) => return (self.invalid(action, &e), NodeEffect::None),
        };
        if !self.token.is_empty() && token != self.token {
            return (
                abort(action, "Incorrect provision token supplied"),
                NodeEffect::None,
            );
        }
        let result = match action {
            "jwt" => Ok((self.jwt(), NodeEffect::None)),
            "gen25519" => self.gen25519(data).map(|r| (r, NodeEffect::None)),
            "configure" => self.configure(data).map(|r| (r, NodeEffect::None)),
            "restart" => self.restart(data),
            "release_update" => self.release_update(data),
            "shutdown" => Ok((
                ok(
                    "shutdown",
                    json!({"message": format!("Shutting Choria Server down after {}s", below(10))}),
                ),
                NodeEffect::Shutdown,
            )),
            "gencsr" => self.gencsr(data).map(|r| (r, NodeEffect::None)),
            other => Ok((
                RpcReply::new(
                    other,
                    StatusCode::UnknownAction,
                    &format!("Unknown action {other} for agent choria_provision"),
                    json!({}),
                ),
                NodeEffect::None,
            )),
        };
        result.unwrap_or_else(|(code, msg)| {
            (
                RpcReply::new(action, code, &msg, json!({})),
                NodeEffect::None,
            )
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
            json!({"jwt": &*self.jwt, "ecdh_public": hex::encode(public.as_bytes())}),
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
                "public_key": hex::encode(key.public_key().as_ref()),
                "directory": "/etc/choria",
                "signature": hex::encode(key.sign(nonce.as_bytes()).as_ref()),
            }),
        ))
    }

    /// `gencsr`: a new key and a CSR whose subject is `cn` (or the identity) with `C`,
    /// `L`, `O` and `OU` when given (`ST` is accepted and left out, as in Go). The key
    /// is RSA 2048 as on real nodes, with the public key as PKCS#1 under a `PUBLIC KEY`
    /// label; or P-256 (SubjectPublicKeyInfo) when the node was told to save CPU.
    fn gencsr(&mut self, data: &Value) -> Result<RpcReply, (StatusCode, String)> {
        use std::str::FromStr;
        use x509_cert::builder::{Builder, RequestBuilder};
        use x509_cert::der::EncodePem;
        let field = |k: &str| {
            // Go decodes input keys case-insensitively.
            let found = data
                .as_object()
                .and_then(|m| m.iter().find(|(key, _)| key.eq_ignore_ascii_case(k)))
                .map(|(_, v)| v);
            match found {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(other) => Err((
                    StatusCode::InvalidData,
                    format!("Could not parse request data for choria_provision#gencsr: {k} is {other}, not a string"),
                )),
            }
        };
        let cn = match field("cn")? {
            cn if cn.is_empty() => self.identity.clone(),
            cn => cn,
        };
        let escape = |v: &str| {
            let mut out = String::with_capacity(v.len());
            for c in v.chars() {
                if ",+\"\\<>;=#".contains(c) {
                    out.push('\\');
                }
                out.push(c);
            }
            out
        };
        // RFC 4514 lists the last RDN first: Go's order is C, L, O, OU, CN.
        let mut subject = format!("CN={}", escape(&cn));
        for key in ["OU", "O", "L", "C"] {
            let v = field(key)?;
            if !v.is_empty() {
                subject.push_str(&format!(",{key}={}", escape(&v)));
            }
        }
        let _ = field("ST")?;
        let fail = |e: String| (StatusCode::Aborted, format!("Could not create CSR: {e}"));
        let subject = x509_cert::name::Name::from_str(&subject).map_err(|e| fail(e.to_string()))?;
        let lf = p256::pkcs8::LineEnding::LF;
        let (csr_pem, public_pem) = match self.csr_key {
            CsrKey::Rsa => {
                use rsa::pkcs1::EncodeRsaPublicKey as _;
                let key = super::keygen::rsa_key().map_err(|e| {
                    (
                        StatusCode::Aborted,
                        format!("Could not create private key: {e}"),
                    )
                })?;
                let public = key
                    .to_public_key()
                    .to_pkcs1_der()
                    .map_err(|e| fail(e.to_string()))?;
                let signer = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(key);
                let csr = RequestBuilder::new(subject, &signer)
                    .and_then(|b| b.build::<rsa::pkcs1v15::Signature>())
                    .map_err(|e| fail(e.to_string()))?;
                let public_pem = pem::encode(&pem::Block {
                    label: "PUBLIC KEY".into(),
                    headers: vec![],
                    der: public.as_bytes().to_vec(),
                });
                (csr.to_pem(lf).map_err(|e| fail(e.to_string()))?, public_pem)
            }
            CsrKey::Ec => {
                use p256::pkcs8::EncodePublicKey;
                let mut secret = [0u8; 32];
                random_bytes(&mut secret);
                let key = p256::ecdsa::SigningKey::from_slice(&secret)
                    .map_err(|e| fail(e.to_string()))?;
                let csr = RequestBuilder::new(subject, &key)
                    .and_then(|b| b.build::<p256::ecdsa::DerSignature>())
                    .map_err(|e| fail(e.to_string()))?;
                let public = key
                    .verifying_key()
                    .to_public_key_pem(lf)
                    .map_err(|e| fail(e.to_string()))?;
                (csr.to_pem(lf).map_err(|e| fail(e.to_string()))?, public)
            }
        };
        Ok(ok(
            "gencsr",
            json!({"csr": csr_pem, "public_key": public_pem, "ssldir": "/etc/choria/ssl"}),
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
        if !certificate.is_empty() && !ca.is_empty() && !ssldir.is_empty() {
            self.certificate = Some(certificate);
            self.ca = Some(ca);
            if !key.is_empty() {
                self.private_key = Some(self.decrypt(&key, &ecdh_public).map_err(|e| {
                    (
                        StatusCode::Aborted,
                        format!("TLS Setup Failed: could not decrypt private key: {e}"),
                    )
                })?);
            }
        }
        let server_jwt = text("server_jwt")?;
        if !server_jwt.is_empty() {
            self.server_jwt = Some(server_jwt);
        }
        let lines = settings.len() + 1;
        self.configuration = Some(settings);
        for (kind, ext, what) in [
            ("action_policies", ".policy", "Action Policies"),
            ("opa_policies", ".rego", "Open Policy Agent Policies"),
        ] {
            match data.get(kind) {
                None | Some(Value::Null) => {}
                Some(Value::Object(map)) => {
                    for (name, body) in map {
                        if !name.ends_with(ext) {
                            return Err((StatusCode::Aborted, format!("Could not save {what}: expected \"{name}\" to have {ext} extension")));
                        }
                        if body.as_str().is_some_and(|b| !b.is_empty()) {
                            self.policies.push(name.clone());
                        }
                    }
                }
                Some(other) => {
                    return Err((
                        StatusCode::InvalidData,
                        format!("Could not parse request data for choria_provision#configure: {kind} is {other}, not an object"),
                    ))
                }
            }
        }
        Ok(ok(
            "configure",
            json!({"message": format!("Wrote {lines} lines to /etc/choria/server.conf")}),
        ))
    }

    fn decrypt(&self, key: &str, ecdh_public: &str) -> Result<Vec<u8>, String> {
        let secret = self.ecdh.ok_or("private key not set")?;
        let theirs: [u8; 32] = hex::decode(ecdh_public)
            .ok()
            .and_then(|k| k.try_into().ok())
            .ok_or("invalid ecdh_public")?;
        let shared = x25519_dalek::StaticSecret::from(secret)
            .diffie_hellman(&x25519_dalek::PublicKey::from(theirs));
        let block = pem::decode(key).ok_or("bad key received")?;
        crypto::decrypt_pem_block(&block, shared.as_bytes()).map_err(|e| e.to_string())
    }

    fn restart(&mut self, data: &Value) -> Result<(RpcReply, NodeEffect), (StatusCode, String)> {
        let splay = match data.get("splay") {
            None | Some(Value::Null) => 0,
            Some(Value::Number(n)) if n.as_i64().is_some_and(|v| v >= 0) => {
                n.as_i64().unwrap_or(0)
            }
            Some(other) => {
                return Err((
                    StatusCode::InvalidData,
                    format!("Could not parse request data for choria_provision#restart: splay is {other}, not a non-negative integer"),
                ))
            }
        };
        // The configuration on disk is re-read: only one that turns provisioning on
        // stops the restart (with none written, the node restarts as it is).
        if self
            .configuration
            .as_ref()
            .is_some_and(|c| c.get(PROVISION_KEY).is_some_and(|v| config_true(v)))
        {
            return Err((StatusCode::Aborted, "Configuration /etc/choria/server.conf enables provisioning, restart cannot continue".into()));
        }
        let splay = if splay == 0 { 10 } else { splay };
        let after = below(splay as u64) + 2;
        self.restarts += 1;
        self.restarted_at = Some(Instant::now());
        Ok((
            ok(
                "restart",
                json!({"message": format!("Restarting Choria Server after {after}s")}),
            ),
            NodeEffect::Restart,
        ))
    }

    /// Where the node ends up when it starts again after a restart (choria-io/tokens and
    /// go-choria's server start-up): back in provisioning mode when its
    /// configuration does not turn provisioning off (the JWT has `chpd`) or, with the
    /// `choria` security provider, when its server JWT or seed is missing, unreadable,
    /// for another key or expired; refused by the broker when the server JWT is not
    /// signed by `issuer` (directly or through a chain issuer); provisioned otherwise.
    pub fn boot(&mut self, issuer: Option<&[u8; 32]>, now: i64) -> Phase {
        let (phase, note) = self.boot_outcome(issuer, now);
        self.phase = phase;
        self.note = note;
        phase
    }

    fn boot_outcome(&self, issuer: Option<&[u8; 32]>, now: i64) -> (Phase, Option<String>) {
        let back = |why: String| (Phase::Provisioning, Some(why));
        let Some(config) = &self.configuration else {
            return back("restarted without a configuration: provisioning mode again".into());
        };
        match config.get(PROVISION_KEY) {
            None => {
                return back(format!(
                    "{PROVISION_KEY} is not set and the provisioning JWT has chpd: provisioning mode again"
                ))
            }
            Some(v) if config_true(v) => return back(format!("{PROVISION_KEY} is {v}")),
            Some(_) => {}
        }
        let choria = config
            .get("plugin.security.provider")
            .is_some_and(|p| p == "choria");
        if choria {
            let Some(token) = &self.server_jwt else {
                return back("the choria security provider has no server.jwt".into());
            };
            let Some(seed) = &self.seed else {
                return back("the choria security provider has no server.seed".into());
            };
            let claims: crate::crypto::jwt::ServerClaims =
                match crate::crypto::jwt::unverified_claims(token) {
                    Ok(c) => c,
                    Err(e) => return back(format!("server.jwt does not parse: {e}")),
                };
            let own = super::keygen::ed25519_public_hex(seed);
            if !claims.standard.public_key.eq_ignore_ascii_case(&own) {
                return back("server.jwt is for another key than server.seed".into());
            }
            if claims.standard.exp.is_some_and(|exp| now >= exp) {
                return back("server.jwt has expired".into());
            }
        }
        if let (Some(token), Some(issuer)) = (&self.server_jwt, issuer) {
            match super::verify::verify_server_token(token, issuer, now) {
                Err(e) => {
                    return (
                        Phase::Rejected,
                        Some(format!("the broker refuses the server JWT: {e}")),
                    )
                }
                Ok(claims) if claims.identity != self.identity => {
                    return (
                        Phase::Rejected,
                        Some(format!(
                            "the broker refuses the server JWT: it is for {:?}",
                            claims.identity
                        )),
                    )
                }
                Ok(_) => {}
            }
        }
        (Phase::Provisioned, None)
    }

    fn release_update(
        &mut self,
        data: &Value,
    ) -> Result<(RpcReply, NodeEffect), (StatusCode, String)> {
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
            NodeEffect::Upgrade(version),
        ))
    }
}
