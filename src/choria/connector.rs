//! The one NATS connection of the daemon, built from the Choria client configuration.
//!
//! Go opened new connections for every RPC try; here everything (RPCs, discovery,
//! events, election) shares one connection with routed replies. The initial connect
//! is retried with the `FIVE_SEC` back-off until it succeeds or the daemon is told to
//! stop; after that the client reconnects forever with the `TWENTY_SEC` back-off.
//! TLS is required whenever it is configured (a server with `allow_non_tls` would
//! otherwise silently get plaintext).
//!
//! Every CONNECT is ours, built on every connect and reconnect from that server's
//! nonce, with what go-choria's client sends (`choria/connection.go`;
//! `docs/operations.md`, "Connecting to a Choria broker"):
//!
//! * `file` and `puppet`: mutual TLS with the provider's certificate;
//! * `choria`: TLS (the broker verified against `plugin.security.choria.ca`, or, as in
//!   go-choria, not verified when no CA is set), the client JWT as `auth_token` and
//!   as `jwt`, and `sig`: the nonce signed with the seed, base64url without padding.
//!   Like go-choria's client, no CONNECT is sent with an expired client JWT;
//! * any provider: `user` and `pass` when both are set (`provisioner` and
//!   `broker_provisioning_password`), or the credentials written into the broker URLs
//!   (in their place, as the NATS client took them).
//!
//! Credentials never reach a log line: URLs are logged without user information, and
//! passwords, tokens, seeds and signatures are never formatted.
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use crate::backoff::{FIVE_SEC, TWENTY_SEC};
use crate::config::Secret;
use crate::metrics::Metrics;

use super::bus::Bus;
use super::client_config::{
    split_broker_url, Brokers, BrokersFoundBy, ClientConfig, SecurityProvider, UrlCredentials,
};
use super::client_jwt::{self, ClientJwt, CredentialError, Seed, PROVISIONER_USER};

pub(crate) use super::broker_tls::BrokerTlsError;

/// Why the client configuration cannot produce a connection, found before any
/// broker is dialled. No variant holds a credential: the file is named, not quoted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DialError {
    /// The client JWT or its seed cannot be used (which setting, which file, why).
    #[error(transparent)]
    Credentials(CredentialError),
    /// The client certificate for a broker that is not verified cannot be used.
    #[error(transparent)]
    Tls(BrokerTlsError),
}

/// Why no connection was made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The daemon was told to stop while still trying to connect.
    #[error("exiting on shut down")]
    Shutdown,
    /// The configuration cannot produce a connection (unreadable token file ...).
    #[error(transparent)]
    Config(DialError),
}

/// Why one connection attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectAttemptError {
    /// The configuration cannot produce a connection.
    #[error(transparent)]
    Config(DialError),
    /// The broker answered the CONNECT with `-ERR`: its text, and our report of what
    /// was sent and what a Choria broker would object to.
    #[error("{report}")]
    Refused {
        /// The broker's `-ERR` text (`Authorization Violation`), shortened.
        broker: String,
        /// The whole message for the log.
        report: String,
    },
    /// No broker reached, the TLS handshake failed, the connection broke, or no
    /// CONNECT could be built (an expired client JWT).
    #[error("{0}")]
    Failed(String),
}

/// Whether the connection is up, for `/healthz` and the RPC layer.
#[derive(Debug, Default)]
pub struct ConnectionState {
    connected: AtomicBool,
    closing: AtomicBool,
    /// Told (without waiting) of every reconnection: whatever was published while
    /// we were away is to be found again at once, not at the next `interval`.
    reconnected: parking_lot::Mutex<Vec<crossbeam_channel::Sender<()>>>,
    /// When the connection last came back, if it ever went.
    reconnected_at: parking_lot::Mutex<Option<std::time::Instant>>,
}

impl ConnectionState {
    /// True while connected to a broker.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// From now on, every reconnection is told to `tell` (a discovery trigger, the
    /// approvals' catch-up), if it has room; each caller gets its own.
    pub(crate) fn tell_reconnections(&self, tell: crossbeam_channel::Sender<()>) {
        self.reconnected.lock().push(tell);
    }

    /// A state as the callbacks would have left it: connected or not, and when the
    /// connection last came back.
    #[cfg(test)]
    pub(crate) fn as_if(connected: bool, reconnected_at: Option<std::time::Instant>) -> Self {
        let state = ConnectionState::default();
        state.connected.store(connected, Ordering::Relaxed);
        *state.reconnected_at.lock() = reconnected_at;
        state
    }

    /// True while disconnected, or for `window` after the connection came back:
    /// nodes reconnect on their own schedule after a broker outage, so one that
    /// does not answer now may simply not be back yet.
    pub(crate) fn recovering(&self, window: Duration) -> bool {
        !self.is_connected()
            || self
                .reconnected_at
                .lock()
                .is_some_and(|at| at.elapsed() < window)
    }
}

/// The daemon's NATS connection.
#[derive(Clone)]
pub struct Connector {
    nc: nats::Connection,
    bus: Bus,
    state: Arc<ConnectionState>,
    identity: String,
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connector")
            .field("identity", &self.identity)
            .field("connected", &self.state.is_connected())
            .finish()
    }
}

/// `nats://user:pass@host:4222` → `nats://host:4222`, for log lines and `check`.
pub(crate) fn redact_url(url: &str) -> String {
    split_broker_url(url).0
}

/// The login every CONNECT carries (user and password, URL token, or client JWT and
/// seed; not the protocol's signing `Credentials`); the nonce signature is made per
/// connect.
struct BrokerLogin {
    user: Option<String>,
    pass: Option<Secret>,
    url_token: Option<Secret>,
    client: Option<(ClientJwt, Seed)>,
}

impl BrokerLogin {
    fn new(client: &ClientConfig) -> Result<BrokerLogin, CredentialError> {
        let (user, pass, url_token) = match client.url_credentials() {
            Some(UrlCredentials::UserPass { user, pass }) => (Some(user), Some(pass), None),
            Some(UrlCredentials::Token(token)) => (None, None, Some(token)),
            None if !client.nats_user.is_empty() && !client.nats_pass.is_empty() => (
                Some(client.nats_user.clone()),
                Some(client.nats_pass.clone()),
                None,
            ),
            None => (None, None, None),
        };
        let jwt_and_seed = if client.uses_client_jwt() {
            let path = |key| client.get(key).unwrap_or_default();
            let jwt = ClientJwt::load(path(client_jwt::TOKEN_FILE_KEY))?;
            let seed = Seed::load(path(client_jwt::SEED_FILE_KEY))?;
            Some((jwt, seed))
        } else {
            None
        };
        Ok(BrokerLogin {
            user,
            pass,
            url_token,
            client: jwt_and_seed,
        })
    }

    /// The CONNECT credentials for a server that sent `nonce`, at Unix time `now`.
    fn build(&self, nonce: &[u8], now: i64) -> std::io::Result<nats::ConnectCredentials> {
        let mut c = nats::ConnectCredentials {
            user: self.user.clone(),
            pass: self.pass.as_ref().map(|p| p.expose().to_string()),
            ..Default::default()
        };
        if let Some((jwt, seed)) = &self.client {
            if jwt.expired(now) {
                let exp = jwt.claims().exp.unwrap_or_default();
                log::error!(
                    "Cannot sign the connection nonce: the client JWT of {} in {} expired at {}",
                    jwt.caller_id(),
                    jwt.path(),
                    crate::clock::rfc3339(exp as f64)
                );
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("the client JWT of {} has expired", jwt.caller_id()),
                ));
            }
            c.auth_token = Some(jwt.token().to_string());
            c.jwt = Some(jwt.token().to_string());
            c.sig = Some(seed.sign_nonce(nonce));
        }
        if let Some(token) = &self.url_token {
            c.auth_token = Some(token.expose().to_string());
        }
        Ok(c)
    }

    /// What the CONNECT carries, without a secret.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        match (&self.user, &self.url_token) {
            (Some(user), _) => parts.push(format!("user {user} with a password")),
            (None, Some(_)) => parts.push("the token of the broker URL".to_string()),
            (None, None) => {}
        }
        if let Some((jwt, _)) = &self.client {
            parts.push(format!(
                "the client JWT of {} ({}) as {} and jwt, and the nonce signed with the seed",
                jwt.caller_id(),
                jwt.path(),
                if self.url_token.is_some() {
                    "jwt (auth_token from the URL)"
                } else {
                    "auth_token"
                }
            ));
        }
        if parts.is_empty() {
            "no user, password or token".into()
        } else {
            parts.join(", ")
        }
    }
}

/// How the connection does TLS.
enum Tls {
    /// `choria_insecure`: plaintext.
    Off,
    /// The broker verified against `ca`; a client certificate when configured.
    Verified {
        ca: Option<PathBuf>,
        client: Option<(PathBuf, PathBuf)>,
    },
    /// The broker not verified (`choria` provider without a CA), as go-choria does.
    Unverified(nats::rustls::ClientConfig, Option<PathBuf>),
}

impl Tls {
    fn new(client: &ClientConfig) -> Result<Tls, BrokerTlsError> {
        let Some(files) = client.tls_files() else {
            return Ok(Tls::Off);
        };
        let pair = match (files.certificate, files.key) {
            (Some(c), Some(k)) => Some((c, k)),
            _ => None,
        };
        if files.ca.is_none() && client.security_provider == SecurityProvider::Choria {
            let config = super::broker_tls::unverified(
                pair.as_ref().map(|(c, _)| c.as_path()),
                pair.as_ref().map(|(_, k)| k.as_path()),
            )?;
            return Ok(Tls::Unverified(config, pair.map(|(c, _)| c)));
        }
        Ok(Tls::Verified {
            ca: files.ca,
            client: pair,
        })
    }

    fn apply(&self, options: nats::Options) -> nats::Options {
        match self {
            Tls::Off => options,
            Tls::Verified { ca, client } => {
                let mut options = options.tls_required(true);
                if let Some(ca) = ca {
                    options = options.add_root_certificate(ca);
                }
                if let Some((cert, key)) = client {
                    options = options.client_cert(cert, key);
                }
                options
            }
            Tls::Unverified(config, _) => {
                options.tls_required(true).tls_client_config(config.clone())
            }
        }
    }

    fn describe(&self) -> String {
        let with_cert = |c: &Option<PathBuf>| match c {
            Some(c) => format!(", client certificate {}", c.display()),
            None => String::new(),
        };
        match self {
            Tls::Off => "no TLS (choria_insecure)".into(),
            Tls::Verified { ca, client } => format!(
                "TLS verifying the broker with {}{}",
                ca.as_ref()
                    .map(|c| c.display().to_string())
                    .unwrap_or_else(|| "the system's CAs".into()),
                with_cert(&client.as_ref().map(|(c, _)| c.clone()))
            ),
            Tls::Unverified(_, cert) => format!(
                "TLS without verifying the broker (plugin.security.choria.ca is not set){}",
                with_cert(cert)
            ),
        }
    }
}

/// Everything one connection attempt needs, prepared once.
struct Dialer {
    client: ClientConfig,
    credentials: Arc<BrokerLogin>,
    tls: Tls,
}

impl Dialer {
    fn new(client: &ClientConfig) -> Result<Dialer, DialError> {
        Ok(Dialer {
            client: client.clone(),
            credentials: Arc::new(BrokerLogin::new(client).map_err(DialError::Credentials)?),
            tls: Tls::new(client).map_err(DialError::Tls)?,
        })
    }

    /// The brokers for the next attempt (SRV records are looked up again each
    /// time), logged when they are not the configured ones.
    fn brokers(&self, last: &mut Option<Brokers>) -> Brokers {
        let brokers = self.client.brokers();
        if last.as_ref() != Some(&brokers) {
            for line in brokers.lookups() {
                log::info!("{line}");
            }
            match &brokers.found_by {
                BrokersFoundBy::Configuration => {}
                BrokersFoundBy::Srv(_) => {
                    log::info!("Brokers {} {}", brokers.urls.join(", "), brokers.describe())
                }
                BrokersFoundBy::Fallback(_) => log::warn!(
                    "Trying broker {} ({})",
                    brokers.urls.join(", "),
                    brokers.describe()
                ),
            }
        }
        *last = Some(brokers.clone());
        brokers
    }

    /// One attempt to connect to `urls`.
    fn attempt(
        &self,
        urls: &[String],
        metrics: &Arc<Metrics>,
        started: Instant,
    ) -> Result<Connector, ConnectAttemptError> {
        let identity = self.client.identity.clone();
        metrics
            .connector_initial_attempts
            .with_label_values(&[&identity])
            .inc();
        let state = Arc::new(ConnectionState::default());
        let options = self.options(metrics, &state);
        match options.connect(urls.join(",").as_str()) {
            Ok(nc) => {
                state.connected.store(true, Ordering::Relaxed);
                metrics
                    .connector_initial_connect_time
                    .observe(&[&identity], started.elapsed().as_secs_f64());
                log::info!("Connected to {} as {}", urls.join(", "), identity);
                Ok(Connector {
                    bus: Bus::new(nc.clone()),
                    nc,
                    state,
                    identity,
                })
            }
            Err(e) => Err(match broker_error(&e) {
                Some(broker) => {
                    let report = self.refusal_report(&broker);
                    ConnectAttemptError::Refused { broker, report }
                }
                None => ConnectAttemptError::Failed(e.to_string()),
            }),
        }
    }

    /// What the broker refused, what we sent, and what a Choria broker objects to.
    fn refusal_report(&self, broker: &str) -> String {
        let mut report = format!(
            "the broker refused the connection ({broker}); the CONNECT carried {} over {}",
            self.credentials.describe(),
            self.tls.describe()
        );
        let checked = client_jwt::check(&self.client, false, crate::clock::unix_now() as i64);
        let findings: Vec<String> = checked
            .iter()
            .flat_map(|c| c.errors.iter().chain(&c.warnings))
            .map(|p| p.message.clone())
            .collect();
        if !findings.is_empty() {
            report.push_str("; ");
            report.push_str(&findings.join("; "));
        } else if self.client.broker_user().as_deref() == Some(PROVISIONER_USER) {
            report.push_str(
                "; a Choria broker takes user provisioner when the password equals its \
                 plugin.choria.network.provisioning.client_password and, with an organisation \
                 issuer, the client JWT is issued by it with the provisioner permission, or, \
                 without an issuer, the TLS client certificate verifies against its CA",
            );
        } else {
            report.push_str(
                "; a Choria broker takes other users with a client JWT it can verify and the \
                 nonce signed by the JWT's key, or with a TLS client certificate it verifies",
            );
        }
        report
    }

    /// The NATS options: credentials, TLS, name, reconnect policy and callbacks.
    fn options(&self, metrics: &Arc<Metrics>, state: &Arc<ConnectionState>) -> nats::Options {
        let options = if let Some(creds) = &self.client.nats_credentials {
            nats::Options::with_credentials(creds)
        } else {
            let credentials = Arc::clone(&self.credentials);
            nats::Options::with_connect_credentials(move |nonce| {
                credentials.build(nonce, crate::clock::unix_now() as i64)
            })
        };
        // go-choria tries the brokers in order (SRV records: by priority and weight)
        // unless plugin.choria.randomize_middleware_hosts is set.
        let options = if self.client.randomize_middleware_hosts {
            options
        } else {
            options.no_randomize()
        };
        callbacks(
            self.tls.apply(options),
            &self.client.identity,
            metrics,
            state,
        )
    }
}

/// The text of a `-ERR` the broker answered the CONNECT with, from the NATS client's
/// error (`unexpected line while connecting: Err("Authorization Violation")`);
/// shortened, as it comes from the network.
fn broker_error(e: &std::io::Error) -> Option<String> {
    let text = e.to_string();
    let start = text.find("Err(\"")? + 5;
    let end = text[start..].rfind("\")")? + start;
    Some(text[start..end].chars().take(200).collect())
}

impl Connector {
    /// Connects, retrying until connected or until `shutdown` disconnects.
    pub fn connect(
        client: &ClientConfig,
        metrics: &Arc<Metrics>,
        shutdown: &Receiver<()>,
    ) -> Result<Connector, ConnectError> {
        let started = Instant::now();
        let dialer = Dialer::new(client).map_err(ConnectError::Config)?;
        let mut last = None;
        let mut brokers = dialer.brokers(&mut last);
        log::info!(
            "Connecting to {} as {} with {} over {}",
            brokers.urls.join(", "),
            client.identity,
            dialer.credentials.describe(),
            dialer.tls.describe()
        );
        if matches!(dialer.tls, Tls::Unverified(..)) {
            log::warn!(
                "plugin.security.choria.ca is not set: the broker's certificate is not \
                 verified (as go-choria does); set it to verify the broker"
            );
        }
        for attempt in 0usize.. {
            let delay = FIVE_SEC.duration(attempt);
            if attempt > 0 {
                brokers = dialer.brokers(&mut last);
            }
            let shown = brokers.urls.join(", ");
            match dialer.attempt(&brokers.urls, metrics, started) {
                Ok(connector) => return Ok(connector),
                Err(ConnectAttemptError::Config(e)) => return Err(ConnectError::Config(e)),
                Err(e @ ConnectAttemptError::Refused { .. }) => log::error!(
                    "Initial connection to {shown} failed, retrying in {:.1}s: {e}",
                    delay.as_secs_f64()
                ),
                Err(e) => log::warn!(
                    "Initial connection to {shown} failed, retrying in {:.1}s: {e}",
                    delay.as_secs_f64()
                ),
            }
            match shutdown.recv_timeout(delay) {
                Err(RecvTimeoutError::Timeout) | Ok(()) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(ConnectError::Shutdown),
            }
        }
        unreachable!("the connect loop only ends by returning")
    }

    /// One connection attempt, without retrying: for diagnostics and tests that want
    /// to see why a broker refuses.
    pub fn connect_once(
        client: &ClientConfig,
        metrics: &Arc<Metrics>,
    ) -> Result<Connector, ConnectAttemptError> {
        let dialer = Dialer::new(client).map_err(ConnectAttemptError::Config)?;
        let brokers = dialer.brokers(&mut None);
        dialer.attempt(&brokers.urls, metrics, Instant::now())
    }

    /// The checked face of the connection: every publish and subscription of the
    /// daemon goes through it.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// The connection state, shared with `/healthz`.
    pub fn state(&self) -> Arc<ConnectionState> {
        Arc::clone(&self.state)
    }

    /// True while connected to a broker.
    pub fn is_connected(&self) -> bool {
        self.state.is_connected()
    }

    /// Closes the connection after flushing what is pending, waiting at most
    /// `within`: the client's close joins its reconnect thread, which never ends
    /// while the broker is down, so the close runs on a thread of its own.
    pub fn close(&self, within: Duration) {
        self.state.closing.store(true, Ordering::Relaxed);
        let nc = self.nc.clone();
        let (done, closed) = crossbeam_channel::bounded::<()>(1);
        let spawned = std::thread::Builder::new()
            .name("nats-close".into())
            .spawn(move || {
                let _ = nc.flush_timeout(Duration::from_secs(1));
                nc.close();
                let _ = done.send(());
            });
        if spawned.is_ok() && closed.recv_timeout(within).is_err() {
            log::warn!("The broker connection did not close within {within:?}; leaving it");
        }
    }
}

/// Name, reconnect policy and the state/metrics/log callbacks.
fn callbacks(
    options: nats::Options,
    identity: &str,
    metrics: &Arc<Metrics>,
    state: &Arc<ConnectionState>,
) -> nats::Options {
    let (m2, m3, m4) = (
        Arc::clone(metrics),
        Arc::clone(metrics),
        Arc::clone(metrics),
    );
    let (s1, s2, s3) = (Arc::clone(state), Arc::clone(state), Arc::clone(state));
    let (i2, i3, i4) = (
        identity.to_string(),
        identity.to_string(),
        identity.to_string(),
    );
    options
        .with_name(identity)
        .max_reconnects(None)
        .reconnect_buffer_size(10 * 1024)
        .reconnect_delay_callback(|n| {
            if n == 0 {
                Duration::ZERO
            } else {
                TWENTY_SEC.duration(n - 1)
            }
        })
        .disconnect_callback(move || {
            s1.connected.store(false, Ordering::Relaxed);
            if !s1.closing.load(Ordering::Relaxed) {
                log::warn!("Disconnected from the broker, reconnecting");
            }
        })
        .reconnect_callback(move || {
            s2.connected.store(true, Ordering::Relaxed);
            *s2.reconnected_at.lock() = Some(std::time::Instant::now());
            m2.connector_reconnections.with_label_values(&[&i2]).inc();
            // Every listener is told (none waits on another's full channel).
            let mut told = false;
            for tell in s2.reconnected.lock().iter() {
                told |= tell.try_send(()).is_ok();
            }
            if told {
                log::info!("Reconnected to the broker; discovering what was missed");
            } else {
                log::info!("Reconnected to the broker");
            }
        })
        .close_callback(move || {
            s3.connected.store(false, Ordering::Relaxed);
            m3.connector_closed.with_label_values(&[&i3]).inc();
            log::info!("Broker connection closed");
        })
        .error_callback(move |e| {
            m4.connector_errors.with_label_values(&[&i4]).inc();
            log::warn!("Broker connection error: {e}");
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;

    const SEED_HEX: &str = "782eb891b61af7f024a65ffad7687703b08e7ecf4722a1b616f084b5cdf1c9fb";
    const PUBLIC_HEX: &str = "3aa7308f0a2e6342498bc8a8f8c2a9211cd110d7a61dcb4420ab9cb5838604ec";

    fn credentials(exp: i64, url_token: Option<&str>) -> BrokerLogin {
        let claims = serde_json::json!({
            "callerid": "choria=provisioner",
            "purpose": "choria_client_id",
            "public_key": PUBLIC_HEX,
            "exp": exp,
        });
        let token = format!("e30.{}.c2ln", URL_SAFE_NO_PAD.encode(claims.to_string()));
        BrokerLogin {
            user: Some("provisioner".into()),
            pass: Some(Secret::new("s3cret")),
            url_token: url_token.map(Secret::new),
            client: Some((
                ClientJwt::parse("c.jwt", token.as_bytes()).unwrap(),
                Seed::parse("c.seed", SEED_HEX.as_bytes()).unwrap(),
            )),
        }
    }

    #[test]
    fn the_choria_connect_carries_user_password_token_jwt_and_the_signed_nonce() {
        let c = credentials(2_000_000_000, None);
        let sent = c.build(b"nonce-one", 1_900_000_000).unwrap();
        assert_eq!(sent.user.as_deref(), Some("provisioner"));
        assert_eq!(sent.pass.as_deref(), Some("s3cret"));
        let token = c.client.as_ref().unwrap().0.token();
        assert_eq!(sent.auth_token.as_deref(), Some(token));
        assert_eq!(sent.jwt.as_deref(), Some(token));
        let verify = |nonce: &[u8], sig: &str| {
            ring::signature::UnparsedPublicKey::new(
                &ring::signature::ED25519,
                hex::decode(PUBLIC_HEX).unwrap(),
            )
            .verify(nonce, &URL_SAFE_NO_PAD.decode(sig).unwrap())
            .is_ok()
        };
        assert!(verify(b"nonce-one", sent.sig.as_deref().unwrap()));
        // A reconnect signs its own nonce.
        let again = c.build(b"nonce-two", 1_900_000_000).unwrap();
        assert!(verify(b"nonce-two", again.sig.as_deref().unwrap()));
        assert!(!verify(b"nonce-one", again.sig.as_deref().unwrap()));
        let shown = c.describe();
        assert!(shown.contains("user provisioner") && shown.contains("choria=provisioner"));
        assert!(
            !shown.contains("s3cret") && !shown.contains(token),
            "{shown}"
        );
    }

    #[test]
    fn no_connect_is_built_with_an_expired_client_jwt() {
        let c = credentials(1_000, None);
        let e = c.build(b"n", 1_000).unwrap_err();
        assert!(e.to_string().contains("has expired"), "{e}");
    }

    #[test]
    fn a_token_in_the_broker_url_takes_the_place_of_auth_token() {
        let c = credentials(2_000_000_000, Some("urltoken"));
        let sent = c.build(b"n", 0).unwrap();
        assert_eq!(sent.auth_token.as_deref(), Some("urltoken"));
        assert_eq!(
            sent.jwt.as_deref(),
            Some(c.client.as_ref().unwrap().0.token())
        );
    }

    #[test]
    fn the_broker_s_refusal_is_read_from_the_client_error() {
        let e = std::io::Error::other(
            "unexpected line while connecting: Err(\"Authorization Violation\")",
        );
        assert_eq!(broker_error(&e).as_deref(), Some("Authorization Violation"));
        assert_eq!(
            broker_error(&std::io::Error::other("connection refused")),
            None
        );
    }

    #[test]
    fn urls_lose_their_credentials_in_logs() {
        assert_eq!(redact_url("nats://u:p@h:4222"), "nats://h:4222");
        assert_eq!(redact_url("tls://tok@h:4222"), "tls://h:4222");
        assert_eq!(redact_url("nats://h:4222"), "nats://h:4222");
        assert_eq!(redact_url("u:p@h:4222"), "h:4222");
    }
}
