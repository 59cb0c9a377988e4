//! The monitoring HTTP listener: `/metrics` (Prometheus text) and `/healthz` (JSON),
//! served by `tiny_http` on one thread.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::Metrics;

/// Produces the `/healthz` document (version, paused, connected, leader ...).
pub type HealthSource = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// The listener could not be started.
#[derive(Debug)]
pub struct ServeError {
    /// The address that was asked for.
    pub addr: String,
    /// Why binding failed.
    pub reason: String,
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot listen on {} for /metrics: {}",
            self.addr, self.reason
        )
    }
}

impl std::error::Error for ServeError {}

/// A running monitoring listener; [`MetricsServer::stop`] ends it.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl MetricsServer {
    /// Binds `host:port` (host `None` = all interfaces, as Go) and serves from a thread.
    pub fn start(
        host: Option<&str>,
        port: u16,
        metrics: Arc<Metrics>,
        health: HealthSource,
    ) -> Result<MetricsServer, ServeError> {
        let addr = match host {
            Some(h) if h.contains(':') => format!("[{h}]:{port}"),
            Some(h) => format!("{h}:{port}"),
            None => format!("0.0.0.0:{port}"),
        };
        let server = tiny_http::Server::http(&addr).map_err(|e| ServeError {
            addr: addr.clone(),
            reason: e.to_string(),
        })?;
        let bound = server.server_addr().to_ip().ok_or_else(|| ServeError {
            addr: addr.clone(),
            reason: "not an IP listener".into(),
        })?;
        let server = Arc::new(server);
        let serving = Arc::clone(&server);
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || serve(&serving, &metrics, &health))
            .map_err(|e| ServeError {
                addr,
                reason: format!("cannot start thread: {e}"),
            })?;
        Ok(MetricsServer {
            server,
            thread: Some(thread),
            addr: bound,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting requests and joins the thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn serve(server: &tiny_http::Server, metrics: &Metrics, health: &HealthSource) {
    for request in server.incoming_requests() {
        let path = request.url().split('?').next().unwrap_or("").to_string();
        let response = match (request.method(), path.as_str()) {
            (tiny_http::Method::Get, "/metrics") => text_response(
                200,
                metrics.render(),
                "text/plain; version=0.0.4; charset=utf-8",
            ),
            (tiny_http::Method::Get, "/healthz") => {
                text_response(200, health().to_string(), "application/json")
            }
            _ => text_response(404, "404 page not found\n".into(), "text/plain"),
        };
        if let Err(e) = request.respond(response) {
            log::debug!("could not answer a monitoring request for {path}: {e}");
        }
    }
}

fn text_response(
    status: u16,
    body: String,
    content_type: &str,
) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let header = tiny_http::Header::from_bytes("Content-Type", content_type)
        .expect("static header is valid");
    tiny_http::Response::from_string(body)
        .with_status_code(status)
        .with_header(header)
}
