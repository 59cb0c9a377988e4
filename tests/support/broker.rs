//! A test-only Choria broker front end: the broker's side of the handshake as
//! go-choria's `broker/network/choria_auth.go` plays it, in
//! front of a real nats-server.
//!
//! For every client on 127.0.0.1 it sends an INFO with a fresh nonce and
//! `tls_required`, does the TLS upgrade (the client certificate is verified when one
//! is given, as `VerifyClientCertIfGiven`), reads the CONNECT and decides:
//!
//! * user `provisioner` (`handleProvisioningUserConnection`): the provisioning
//!   password must match; with an organisation issuer `auth_token` must be a client
//!   JWT that issuer signed (directly or through a chain issuer) with the provisioner
//!   permission, unexpired (unless `provisioner_without_token` and no token); without
//!   an issuer the TLS client certificate must have been verified. Stricter than the
//!   broker on one point, to prove our signatures: a `sig`, when sent, must verify
//!   with the JWT's `public_key`.
//! * anyone else (`handleDefaultConnection`): a client or server JWT in `auth_token`
//!   must verify and the nonce must be signed by its key; without a JWT only a
//!   verified certificate gets in (not in issuer mode). Failing that, an unverified TLS
//!   connection with a provisioning JWT is a server in provisioning mode
//!   (`handleUnverifiedProvisioningConnection`).
//!
//! A refusal is answered `-ERR 'Authorization Violation'` as nats-server does, and
//! its reason is recorded (the broker's log line). An admitted client is relayed
//! byte for byte to the nats-server, which it joins as the user whose permissions
//! match the broker's decision: `provisioner` (provisioning account, no limits),
//! `node` (the provisioning-mode server permissions) or `choria`.
//!
//! Bounded: the handshake has a deadline, every read and write a timeout, and every
//! thread ends within a poll interval of the front end being dropped.
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use choria_provisioner::choria::client_config::ClientConfig;
use choria_provisioner::choria::client_jwt::ClientClaims;
use choria_provisioner::config::Config;
use choria_provisioner::crypto::ids;
use choria_provisioner::crypto::jwt::unverified_claims;
use choria_provisioner::crypto::jwt::{
    verify_provisioning_token, ServerClaims, VerifyKey, CLIENT_ID_PURPOSE, SERVER_PURPOSE,
};
use choria_provisioner::sim::keygen::{write_keys, KeysOptions};
use choria_provisioner::sim::verify::verify_issued_token;
use choria_provisioner::sim::SimOptions;
use nats::rustls;
use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection, StreamOwned};

use super::{election_broker, NatsServer, TempDir};

/// How long a client has from TCP accept to a complete CONNECT line.
const HANDSHAKE: Duration = Duration::from_secs(5);
/// How often blocked loops look at the stop flag.
const TICK: Duration = Duration::from_millis(50);
/// The longest CONNECT line read.
const MAX_CONNECT: usize = 64 * 1024;

/// A nats-server user: name and password.
#[derive(Debug, Clone)]
pub struct BackendUser {
    pub user: String,
    pub pass: String,
}

impl BackendUser {
    fn new(user: &str, pass: &str) -> BackendUser {
        BackendUser {
            user: user.into(),
            pass: pass.into(),
        }
    }
}

/// Where the broker puts a client, and so which nats-server user it relays as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landing {
    /// The provisioning account, no subject limits (user `provisioner`).
    Provisioner,
    /// The provisioning account with `setProvisioningServerPermissions`.
    ProvisioningServer,
    /// The choria account.
    Choria,
}

/// The broker's settings and the nats-server behind it.
#[derive(Debug, Clone)]
pub struct FrontEndOptions {
    /// The broker's certificate and key (PEM).
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CA client certificates are verified with, when a client sends one.
    pub ca: PathBuf,
    /// `plugin.choria.network.provisioning.client_password`.
    pub provisioning_password: Option<String>,
    /// The organisation issuer of ou `choria` (`plugin.security.issuer.choria.public`).
    pub issuer: Option<[u8; 32]>,
    /// `plugin.choria.network.provisioning.provisioner_without_token`.
    pub provisioner_without_token: bool,
    /// `plugin.choria.network.provisioning.signer_cert` (non-issuer provisioning JWTs).
    pub provisioning_signer: Option<VerifyKey>,
    /// The nats-server on 127.0.0.1.
    pub backend_port: u16,
    /// Its users for [`Landing::Provisioner`], [`Landing::ProvisioningServer`] and
    /// [`Landing::Choria`].
    pub provisioner: BackendUser,
    pub node: BackendUser,
    pub choria: BackendUser,
}

/// A client the front end let in.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// CONNECT `user`.
    pub user: String,
    pub landing: Landing,
    /// The nonce of its INFO.
    pub nonce: String,
    /// A `sig` was sent and verified against the nonce with the JWT's key.
    pub signed: bool,
    /// The TLS client certificate verified against the CA.
    pub tls_verified: bool,
    /// The JWT's caller id or identity, if it sent one.
    pub caller: String,
}

struct Shared {
    options: FrontEndOptions,
    tls: Arc<ServerConfig>,
    port: u16,
    stop: AtomicBool,
    generation: AtomicU64,
    admitted: Mutex<Vec<Admitted>>,
    refused: Mutex<Vec<String>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// The front end: listening on 127.0.0.1 until dropped.
pub struct FrontEnd {
    pub port: u16,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

fn tls_config(o: &FrontEndOptions) -> Arc<ServerConfig> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&o.cert)
        .expect("broker certificate")
        .collect::<Result<_, _>>()
        .expect("broker certificate PEM");
    let key = PrivateKeyDer::from_pem_file(&o.key).expect("broker key");
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(&o.ca).expect("CA") {
        roots.add(ca.expect("CA PEM")).expect("CA certificate");
    }
    let verifier = WebPkiClientVerifier::builder(Arc::new(roots))
        .allow_unauthenticated()
        .build()
        .expect("client verifier");
    Arc::new(
        ServerConfig::builder()
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .expect("server TLS configuration"),
    )
}

impl FrontEnd {
    /// Listens on a free port of 127.0.0.1.
    pub fn start(options: FrontEndOptions) -> FrontEnd {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the front end");
        listener.set_nonblocking(true).expect("non-blocking accept");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            tls: tls_config(&options),
            options,
            port,
            stop: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            admitted: Mutex::new(Vec::new()),
            refused: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
        });
        let s = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("front-accept".into())
            .spawn(move || accept_loop(&listener, &s))
            .expect("accept thread");
        FrontEnd {
            port,
            shared,
            accept: Some(accept),
        }
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Every client let in so far.
    pub fn admitted(&self) -> Vec<Admitted> {
        self.shared.admitted.lock().clone()
    }

    /// The reason of every refusal so far.
    pub fn refusals(&self) -> Vec<String> {
        self.shared.refused.lock().clone()
    }

    /// Closes every client connection, as a broker restart does; clients that
    /// reconnect get a new INFO with a new nonce.
    pub fn drop_connections(&self) {
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for FrontEnd {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let threads: Vec<_> = self.shared.threads.lock().drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((sock, _)) => {
                let s = Arc::clone(shared);
                let spawned = std::thread::Builder::new()
                    .name("front-conn".into())
                    .spawn(move || serve(sock, &s));
                if let Ok(handle) = spawned {
                    let mut threads = shared.threads.lock();
                    threads.retain(|t| !t.is_finished());
                    threads.push(handle);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(TICK / 5),
            Err(_) => std::thread::sleep(TICK),
        }
    }
}

/// What the client sent in CONNECT.
#[derive(Debug, Default)]
struct Connect {
    json: serde_json::Map<String, serde_json::Value>,
    user: String,
    pass: String,
    token: String,
    sig: String,
}

impl Connect {
    fn parse(line: &str) -> Result<Connect, String> {
        let body = line
            .strip_prefix("CONNECT ")
            .or_else(|| line.strip_prefix("connect "))
            .ok_or("the first line is not CONNECT")?;
        let json: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(body.trim()).map_err(|e| format!("CONNECT JSON: {e}"))?;
        let text = |k: &str| {
            json.get(k)
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string()
        };
        Ok(Connect {
            user: text("user"),
            pass: text("pass"),
            token: text("auth_token"),
            sig: text("sig"),
            json,
        })
    }
}

/// The broker's decision: where the client lands, whether it signed, who it is.
type Decision = Result<(Landing, bool, String), String>;

fn now() -> i64 {
    choria_provisioner::clock::unix_now() as i64
}

/// `verifyNonceSignature`: `sig` must be the nonce signed by `public_hex`.
fn verify_nonce(nonce: &str, sig: &str, public_hex: &str) -> Result<(), String> {
    if sig.is_empty() {
        return Err("connection nonce was not signed".into());
    }
    if public_hex.is_empty() {
        return Err("no public key found in the JWT to verify nonce signature".into());
    }
    let public = hex::decode(public_hex).map_err(|_| "invalid nonce signature")?;
    let raw = URL_SAFE_NO_PAD
        .decode(sig)
        .map_err(|e| format!("invalid url encoded signature: {e}"))?;
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public)
        .verify(nonce.as_bytes(), &raw)
        .map_err(|_| "nonce signature did not verify using pub key in the jwt".into())
}

impl Shared {
    /// `parseClientIDJWTWithIssuer`: the issuer of the token's `ou` must have signed it.
    fn client_claims_with_issuer(&self, token: &str) -> Result<ClientClaims, String> {
        let issuer = self.issuer_for(token)?;
        verify_issued_token(token, CLIENT_ID_PURPOSE, &issuer, now())
            .map_err(|e| format!("failed to parse client token issued by the choria chain: {e}"))
    }

    fn issuer_for(&self, token: &str) -> Result<[u8; 32], String> {
        let claims: serde_json::Value = unverified_claims(token).map_err(|e| e.to_string())?;
        match claims.get("ou").and_then(|o| o.as_str()) {
            None => Err("no ou claim in token".into()),
            Some("choria") => self.options.issuer.ok_or("no issuer configured".into()),
            Some(other) => Err(format!("no issuer configured for ou '{other}'")),
        }
    }

    /// `handleProvisioningUserConnection`.
    fn provisioner(&self, c: &Connect, nonce: &str, tls_verified: bool) -> Decision {
        let Some(password) = &self.options.provisioning_password else {
            return Err("provisioning user password not enabled".into());
        };
        if c.pass.is_empty() {
            return Err("password required".into());
        }
        if &c.pass != password {
            return Err("invalid provisioner password supplied".into());
        }
        if self.options.issuer.is_none() {
            if !tls_verified {
                return Err(
                    "provisioning user is only allowed over verified TLS connections".into(),
                );
            }
            return Ok((Landing::Provisioner, false, String::new()));
        }
        if c.token.is_empty() {
            if self.options.provisioner_without_token {
                return Ok((Landing::Provisioner, false, String::new()));
            }
            return Err("no token provided in connection".into());
        }
        let claims = self.client_claims_with_issuer(&c.token)?;
        if !claims.has("provisioner") {
            return Err(format!(
                "provisioner claim is false in token with caller id '{}'",
                claims.callerid
            ));
        }
        // The broker does not check the nonce signature here; we do when one is sent.
        let signed = !c.sig.is_empty();
        if signed {
            verify_nonce(nonce, &c.sig, &claims.public_key)?;
        }
        Ok((Landing::Provisioner, signed, claims.callerid))
    }

    /// `handleDefaultConnection`.
    fn default_connection(&self, c: &Connect, nonce: &str, tls_verified: bool) -> Decision {
        if !c.token.is_empty() {
            let purpose: serde_json::Value =
                unverified_claims(&c.token).map_err(|e| e.to_string())?;
            match purpose
                .get("purpose")
                .and_then(|p| p.as_str())
                .unwrap_or("")
            {
                CLIENT_ID_PURPOSE => {
                    let claims = self.client_claims_with_issuer(&c.token)?;
                    if claims.callerid.is_empty() {
                        return Err("no callerid in claims".into());
                    }
                    verify_nonce(nonce, &c.sig, &claims.public_key)?;
                    return Ok((Landing::Choria, true, claims.callerid));
                }
                SERVER_PURPOSE => {
                    let issuer = self.issuer_for(&c.token)?;
                    let claims: ServerClaims =
                        verify_issued_token(&c.token, SERVER_PURPOSE, &issuer, now())?;
                    verify_nonce(nonce, &c.sig, &claims.standard.public_key)?;
                    return Ok((Landing::Choria, true, claims.identity));
                }
                other => return Err(format!("do not know how to handle {other:?} purpose token")),
            }
        }
        if !tls_verified {
            return Err("unverified connection without JWT token".into());
        }
        // A verified certificate without a JWT: legacy full access without an issuer,
        // pub-sub access with one (the front end always has a CA).
        Ok((Landing::Choria, false, String::new()))
    }

    /// `handleUnverifiedProvisioningConnection`.
    fn provisioning_server(&self, c: &Connect) -> Decision {
        if c.user == "provisioner" {
            return Err("provisioning user requires a verified connection".into());
        }
        if c.token.is_empty() {
            return Err("provisioning requires a token".into());
        }
        let header = c.token.split('.').next().unwrap_or("");
        let alg: serde_json::Value = URL_SAFE_NO_PAD
            .decode(header)
            .ok()
            .and_then(|h| serde_json::from_slice(&h).ok())
            .ok_or("could not determine token algorithm")?;
        let key = if alg["alg"] == "EdDSA" && self.options.issuer.is_some() {
            if self.options.provisioning_password.is_none() {
                return Err("provisioning is not enabled".into());
            }
            VerifyKey::Ed25519(self.issuer_for(&c.token)?)
        } else {
            self.options
                .provisioning_signer
                .clone()
                .ok_or("provisioning is not enabled")?
        };
        verify_provisioning_token(&c.token, &key, now()).map_err(|e| e.to_string())?;
        Ok((Landing::ProvisioningServer, false, String::new()))
    }

    /// `Check`: the provisioner user, else the default path, else a server in
    /// provisioning mode on an unverified connection.
    fn decide(&self, c: &Connect, nonce: &str, tls_verified: bool) -> Decision {
        if c.user == "provisioner" {
            return self.provisioner(c, nonce, tls_verified);
        }
        match self.default_connection(c, nonce, tls_verified) {
            Ok(d) => Ok(d),
            Err(default) if !tls_verified => self
                .provisioning_server(c)
                .map_err(|prov| format!("verified error: {default}, unverified error: {prov}")),
            Err(default) => Err(default),
        }
    }

    fn backend_user(&self, landing: Landing) -> &BackendUser {
        match landing {
            Landing::Provisioner => &self.options.provisioner,
            Landing::ProvisioningServer => &self.options.node,
            Landing::Choria => &self.options.choria,
        }
    }

    fn stopped(&self, generation: u64) -> bool {
        self.stop.load(Ordering::SeqCst) || self.generation.load(Ordering::SeqCst) != generation
    }
}

type Tls = StreamOwned<ServerConnection, TcpStream>;

fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// One client, from accept to close.
fn serve(sock: TcpStream, shared: &Arc<Shared>) {
    let generation = shared.generation.load(Ordering::SeqCst);
    let _ = handle(sock, shared, generation);
}

fn handle(sock: TcpStream, shared: &Arc<Shared>, generation: u64) -> io::Result<()> {
    let deadline = Instant::now() + HANDSHAKE;
    sock.set_nonblocking(false)?;
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(TICK))?;
    sock.set_write_timeout(Some(HANDSHAKE))?;
    let mut nonce_bytes = [0u8; 11];
    ids::random_bytes(&mut nonce_bytes);
    let nonce = URL_SAFE_NO_PAD.encode(nonce_bytes);
    let info = serde_json::json!({
        "server_id": "choria-broker-front-end",
        "server_name": "choria-broker-front-end",
        "version": "2.10.0",
        "go": "go1.22",
        "host": "127.0.0.1",
        "port": shared.port,
        "headers": true,
        "auth_required": true,
        "tls_required": true,
        "tls_verify": true,
        "max_payload": 1_048_576,
        "proto": 1,
        "client_id": 1,
        "client_ip": "127.0.0.1",
        "nonce": nonce,
    });
    (&sock).write_all(format!("INFO {info}\r\n").as_bytes())?;
    let mut tls = StreamOwned::new(
        ServerConnection::new(Arc::clone(&shared.tls)).map_err(io_err)?,
        sock,
    );
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let line_end = loop {
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            break end;
        }
        if Instant::now() > deadline || shared.stopped(generation) || buf.len() > MAX_CONNECT {
            return Err(io_err("no CONNECT in time"));
        }
        match tls.read(&mut chunk) {
            Ok(0) => return Err(io_err("closed before CONNECT")),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if timed_out(&e) => {}
            Err(e) => return Err(e),
        }
    };
    let tls_verified = tls.conn.peer_certificates().is_some_and(|c| !c.is_empty());
    let line = String::from_utf8_lossy(&buf[..line_end]).into_owned();
    let pending = buf[line_end + 2..].to_vec();
    let decision =
        Connect::parse(&line).and_then(|c| shared.decide(&c, &nonce, tls_verified).map(|d| (c, d)));
    let (connect, (landing, signed, caller)) = match decision {
        Ok(ok) => ok,
        Err(reason) => {
            shared.refused.lock().push(reason);
            tls.write_all(b"-ERR 'Authorization Violation'\r\n")?;
            tls.conn.send_close_notify();
            let _ = tls.flush();
            let _ = tls.sock.shutdown(Shutdown::Both);
            return Ok(());
        }
    };
    let mut backend = backend_connect(shared, &connect, landing)?;
    backend.write_all(&pending)?;
    shared.admitted.lock().push(Admitted {
        user: connect.user.clone(),
        landing,
        nonce,
        signed,
        tls_verified,
        caller,
    });
    relay(tls, backend, shared, generation)
}

/// Connects to the nats-server as the user of `landing`, sending the client's CONNECT
/// with that user's credentials in place of the client's.
fn backend_connect(shared: &Shared, client: &Connect, landing: Landing) -> io::Result<TcpStream> {
    let addr = SocketAddr::from(([127, 0, 0, 1], shared.options.backend_port));
    let backend = TcpStream::connect_timeout(&addr, HANDSHAKE)?;
    backend.set_nodelay(true)?;
    backend.set_read_timeout(Some(HANDSHAKE))?;
    backend.set_write_timeout(Some(HANDSHAKE))?;
    let mut info = Vec::new();
    let mut byte = [0u8; 1];
    let deadline = Instant::now() + HANDSHAKE;
    while !info.ends_with(b"\r\n") {
        if info.len() > MAX_CONNECT || Instant::now() > deadline {
            return Err(io_err("no INFO from the backend in time"));
        }
        (&backend).read_exact(&mut byte)?;
        info.push(byte[0]);
    }
    let user = shared.backend_user(landing);
    let mut json = client.json.clone();
    for k in ["user", "pass", "auth_token", "jwt", "sig", "nkey"] {
        json.remove(k);
    }
    json.insert("user".into(), user.user.clone().into());
    json.insert("pass".into(), user.pass.clone().into());
    json.insert("tls_required".into(), false.into());
    (&backend).write_all(format!("CONNECT {}\r\n", serde_json::Value::Object(json)).as_bytes())?;
    backend.set_read_timeout(Some(TICK))?;
    Ok(backend)
}

/// Copies bytes both ways until either side closes or the front end stops.
fn relay(mut tls: Tls, mut backend: TcpStream, shared: &Shared, generation: u64) -> io::Result<()> {
    let mut chunk = [0u8; 32 * 1024];
    let result = (|| -> io::Result<()> {
        loop {
            // Plaintext rustls already holds (it may have read ahead).
            loop {
                match tls.conn.reader().read(&mut chunk) {
                    Ok(0) => return Ok(()),
                    Ok(n) => backend.write_all(&chunk[..n])?,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            while tls.conn.wants_write() {
                tls.conn.write_tls(&mut tls.sock)?;
            }
            if shared.stopped(generation) {
                return Ok(());
            }
            let mut fds = [
                libc::pollfd {
                    fd: tls.sock.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: backend.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfd entries for sockets this thread owns.
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, TICK.as_millis() as i32) };
            if ready < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if fds[0].revents != 0 {
                match tls.conn.read_tls(&mut tls.sock) {
                    Ok(0) => return Ok(()),
                    Ok(_) => {
                        tls.conn.process_new_packets().map_err(io_err)?;
                    }
                    Err(e) if timed_out(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            if fds[1].revents != 0 {
                match backend.read(&mut chunk) {
                    Ok(0) => return Ok(()),
                    Ok(n) => tls.conn.writer().write_all(&chunk[..n])?,
                    Err(e) if timed_out(&e) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    })();
    tls.conn.send_close_notify();
    let _ = tls.conn.write_tls(&mut tls.sock);
    let _ = tls.sock.shutdown(Shutdown::Both);
    let _ = backend.shutdown(Shutdown::Both);
    result
}

/// Which Choria network the rig plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// Protocol v1, `file` provider: no issuer, the provisioner in by password and a
    /// verified client certificate; nodes' provisioning JWTs checked with the signer.
    MutualTls,
    /// Protocol v2, `choria` provider: an organisation issuer, the provisioner in by
    /// password and an issuer-signed client JWT with the provisioner permission.
    Issuer,
}

/// The provisioning password the front end wants.
pub const PROVISIONING_PASSWORD: &str = "br0ker-pw";
/// The provisioning token (`cht`) of the rig's nodes.
pub const NODE_TOKEN: &str = "s3cret-token";

/// A Choria broker rig: `choria-fleet-sim keys` credentials, a nats-server laid out
/// like a Choria broker (`election_broker`), and the front end before it.
pub struct ChoriaBroker {
    pub network: Network,
    pub front: FrontEnd,
    pub backend: NatsServer,
    keys: TempDir,
}

impl ChoriaBroker {
    /// Starts the rig with fresh credentials.
    pub fn start(network: Network) -> ChoriaBroker {
        let keys = TempDir::new("choria-broker");
        write_keys(&KeysOptions {
            dir: keys.path().to_path_buf(),
            token: NODE_TOKEN.into(),
            v2: network == Network::Issuer,
            identity: "provisioner.test.local".into(),
            ..KeysOptions::default()
        })
        .expect("choria-fleet-sim keys");
        let backend = election_broker();
        let issuer_public = || -> [u8; 32] {
            let hex = std::fs::read_to_string(keys.path().join("issuer.public")).unwrap();
            hex::decode(hex.trim()).unwrap().try_into().unwrap()
        };
        let front = FrontEnd::start(FrontEndOptions {
            cert: keys.path().join("broker.pem"),
            key: keys.path().join("broker-key.pem"),
            ca: keys.path().join("ca.pem"),
            provisioning_password: Some(PROVISIONING_PASSWORD.into()),
            issuer: (network == Network::Issuer).then(issuer_public),
            provisioner_without_token: false,
            provisioning_signer: Some(VerifyKey::Ed25519(issuer_public())),
            backend_port: backend.port,
            provisioner: BackendUser::new("provisioner", "s3cret"),
            node: BackendUser::new("node", "n0de"),
            choria: BackendUser::new("choria", "choria"),
        });
        ChoriaBroker {
            network,
            front,
            backend,
            keys,
        }
    }

    /// The front end's URL, for the provisioner and the nodes.
    pub fn url(&self) -> String {
        self.front.url()
    }

    /// A file the keys command wrote (`ca.pem`, `signer.jwt` ...).
    pub fn path(&self, name: &str) -> PathBuf {
        self.keys.path().join(name)
    }

    /// The keys directory.
    pub fn dir(&self) -> &Path {
        self.keys.path()
    }

    /// The security lines of the provisioner's choria.cfg (`choria-fleet-sim keys`).
    pub fn choria_cfg(&self) -> String {
        std::fs::read_to_string(self.path("choria.cfg"))
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("plugin.security."))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    /// The provisioner YAML lines the rig needs.
    pub fn yaml(&self) -> String {
        format!(
            "choria_insecure: false\nbroker_provisioning_password: {PROVISIONING_PASSWORD}\ntoken: {NODE_TOKEN}\n"
        )
    }

    /// Writes a provisioner's `choria.cfg` (identity, `url`, `security` lines) and
    /// YAML (the helper the keys command wrote unless `yaml` names one, the rig's
    /// password and token, then `yaml`) into `dir`.
    pub fn write_provisioner(
        &self,
        dir: &TempDir,
        identity: &str,
        url: &str,
        security: &str,
        yaml: &str,
    ) -> (PathBuf, PathBuf) {
        let cfg = dir.write(
            &format!("{identity}.cfg"),
            &format!("identity = {identity}\nplugin.choria.middleware_hosts = {url}\n{security}"),
        );
        let helper = if yaml.contains("helper:") {
            String::new()
        } else {
            format!("helper: {}\n", self.path("helper.sh").display())
        };
        let yaml = dir.write(
            &format!("{identity}.yaml"),
            &format!("{helper}{}{yaml}", self.yaml()),
        );
        (cfg, yaml)
    }

    /// The client configuration of a provisioner named `identity` on this broker, as
    /// `run` loads it.
    pub fn client(&self, identity: &str) -> ClientConfig {
        let (cfg, yaml) =
            self.write_provisioner(&self.keys, identity, &self.url(), &self.choria_cfg(), "");
        let config = Config::load(&yaml).expect("provisioner YAML").config;
        let mut client = ClientConfig::load(&cfg).expect("choria.cfg");
        choria_provisioner::cli::apply_provisioner_overrides(&mut client, &config);
        client
    }

    /// Nodes through the front end: TLS verified with the rig's CA, the keys'
    /// provisioning JWT as their token.
    pub fn nodes(&self, options: &mut SimOptions) {
        options.tls_ca = Some(self.path("ca.pem"));
        options.jwt = Some(std::fs::read_to_string(self.path("provisioning.jwt")).unwrap());
    }
}
