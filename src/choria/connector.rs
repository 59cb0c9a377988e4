//! The one NATS connection of the daemon, built from the Choria client configuration.
//!
//! Go opened new connections for every RPC try; here everything (RPCs, discovery,
//! events, election) shares one connection with routed replies. The initial connect
//! is retried with the `FIVE_SEC` back-off until it succeeds or the daemon is told to
//! stop; after that the client reconnects forever with the `TWENTY_SEC` back-off.
//! TLS is required whenever it is configured (a server with `allow_non_tls` would
//! otherwise silently get plaintext). Credentials never reach a log line: URLs are
//! logged without user information and passwords are never formatted.

#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use crate::backoff::{FIVE_SEC, TWENTY_SEC};
use crate::metrics::Metrics;

use super::bus::Bus;
use super::client_config::{ClientConfig, SecurityProvider};

/// Why no connection was made.
#[derive(Debug)]
pub enum ConnectError {
    /// The daemon was told to stop while still trying to connect.
    Shutdown,
    /// The configuration cannot produce a connection (unreadable token file ...).
    Config(String),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Shutdown => f.write_str("exiting on shut down"),
            ConnectError::Config(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ConnectError {}

/// Whether the connection is up, for `/healthz` and the RPC layer.
#[derive(Debug, Default)]
pub struct ConnectionState {
    connected: AtomicBool,
    closing: AtomicBool,
}

impl ConnectionState {
    /// True while connected to a broker.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
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

/// `nats://user:pass@host:4222` → `nats://host:4222`, for log lines.
pub fn redact_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_, host)) => format!("{scheme}://{host}"),
            None => url.to_string(),
        },
        None => match url.rsplit_once('@') {
            Some((_, host)) => host.to_string(),
            None => url.to_string(),
        },
    }
}

impl Connector {
    /// Connects, retrying until connected or until `shutdown` disconnects.
    pub fn connect(
        client: &ClientConfig,
        metrics: &Arc<Metrics>,
        shutdown: &Receiver<()>,
    ) -> Result<Connector, ConnectError> {
        let started = Instant::now();
        let urls = client.middleware_hosts.join(",");
        let shown: Vec<String> = client
            .middleware_hosts
            .iter()
            .map(|u| redact_url(u))
            .collect();
        let identity = client.identity.clone();
        for attempt in 0usize.. {
            metrics
                .connector_initial_attempts
                .with_label_values(&[&identity])
                .inc();
            let state = Arc::new(ConnectionState::default());
            let options = options(client, metrics, &state)?;
            match options.connect(urls.as_str()) {
                Ok(nc) => {
                    state.connected.store(true, Ordering::Relaxed);
                    metrics
                        .connector_initial_connect_time
                        .observe(&[&identity], started.elapsed().as_secs_f64());
                    log::info!("Connected to {} as {}", shown.join(", "), identity);
                    return Ok(Connector {
                        bus: Bus::new(nc.clone()),
                        nc,
                        state,
                        identity,
                    });
                }
                Err(e) => {
                    let delay = FIVE_SEC.duration(attempt);
                    log::warn!(
                        "Initial connection to {} failed, retrying in {:.1}s: {e}",
                        shown.join(", "),
                        delay.as_secs_f64()
                    );
                    match shutdown.recv_timeout(delay) {
                        Err(RecvTimeoutError::Timeout) | Ok(()) => {}
                        Err(RecvTimeoutError::Disconnected) => return Err(ConnectError::Shutdown),
                    }
                }
            }
        }
        unreachable!("the connect loop only ends by returning")
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

    /// The identity this connection was named after.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Flushes pending publishes, waiting at most `timeout`.
    pub fn flush(&self, timeout: Duration) -> std::io::Result<()> {
        self.nc.flush_timeout(timeout)
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

/// The NATS options for `client`: auth, TLS, name, reconnect policy and callbacks.
fn options(
    client: &ClientConfig,
    metrics: &Arc<Metrics>,
    state: &Arc<ConnectionState>,
) -> Result<nats::Options, ConnectError> {
    let choria = !client.insecure && client.security_provider == SecurityProvider::Choria;
    let mut options = if let Some(creds) = &client.nats_credentials {
        nats::Options::with_credentials(creds)
    } else if !client.nats_user.is_empty() && !client.nats_pass.is_empty() {
        if choria {
            log::warn!(
                "The NATS client library sends one kind of credentials: the password of user {} \
                 is sent, the client JWT is not (brokers that require both will refuse)",
                client.nats_user
            );
        }
        nats::Options::with_user_pass(&client.nats_user, client.nats_pass.expose())
    } else if choria {
        let path = client
            .get("plugin.security.choria.token_file")
            .unwrap_or_default();
        let token = std::fs::read_to_string(path)
            .map_err(|e| ConnectError::Config(format!("cannot read the client JWT {path}: {e}")))?;
        nats::Options::with_token(token.trim())
    } else {
        nats::Options::new()
    };
    if let Some(tls) = client.tls_files() {
        options = options.tls_required(true);
        if let Some(ca) = &tls.ca {
            options = options.add_root_certificate(ca);
        }
        if let (Some(cert), Some(key)) = (&tls.certificate, &tls.key) {
            options = options.client_cert(cert, key);
        }
    }
    let identity = client.identity.clone();
    let (m2, m3, m4) = (
        Arc::clone(metrics),
        Arc::clone(metrics),
        Arc::clone(metrics),
    );
    let (s1, s2, s3) = (Arc::clone(state), Arc::clone(state), Arc::clone(state));
    let (i2, i3, i4) = (identity.clone(), identity.clone(), identity.clone());
    Ok(options
        .with_name(&identity)
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
            m2.connector_reconnections.with_label_values(&[&i2]).inc();
            log::info!("Reconnected to the broker");
        })
        .close_callback(move || {
            s3.connected.store(false, Ordering::Relaxed);
            m3.connector_closed.with_label_values(&[&i3]).inc();
            log::info!("Broker connection closed");
        })
        .error_callback(move |e| {
            m4.connector_errors.with_label_values(&[&i4]).inc();
            log::warn!("Broker connection error: {e}");
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_credentials_in_logs() {
        assert_eq!(redact_url("nats://u:p@h:4222"), "nats://h:4222");
        assert_eq!(redact_url("tls://tok@h:4222"), "tls://h:4222");
        assert_eq!(redact_url("nats://h:4222"), "nats://h:4222");
        assert_eq!(redact_url("u:p@h:4222"), "h:4222");
    }
}
