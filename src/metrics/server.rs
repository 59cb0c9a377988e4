//! The monitoring HTTP listener: `/metrics` (Prometheus text), `/healthz`,
//! `/readyz`, `/nodes` and `/nodes/<identity>` (JSON), served by our patched
//! `tiny_http`'s `GuardedServer` (`patches/tiny_http/README.md`): every request is
//! answered on its connection's thread, within fixed limits of connections, bytes
//! and time, so no client can kill, freeze or starve the daemon through this port
//! (`docs/security.md`). Read-only.

use std::net::SocketAddr;
use std::sync::Arc;

use super::Metrics;

/// What the monitoring listener asks the daemon: the `/healthz` document, and
/// whether this instance is ready (`/readyz`).
///
/// Any `Fn() -> serde_json::Value` is a `Health` whose readiness is read from its
/// document (see `Readiness::from_health`); an implementor that knows more (an
/// active-active member, say) overrides [`Health::readiness`].
pub trait Health: Send + Sync {
    /// The `/healthz` document (version, paused, connected, leader ...).
    fn health(&self) -> serde_json::Value;

    /// Whether this instance is ready; by default read from [`Health::health`].
    fn readiness(&self) -> Readiness {
        Readiness::from_health(&self.health())
    }
}

impl<F> Health for F
where
    F: Fn() -> serde_json::Value + Send + Sync,
{
    fn health(&self) -> serde_json::Value {
        self()
    }
}

/// The daemon's side of the monitoring listener.
pub type HealthSource = Arc<dyn Health>;

/// What `/nodes/<identity>` found.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeLookup {
    /// The node's document (200).
    Found(serde_json::Value),
    /// Nothing is known of a valid identity (404).
    Unknown,
    /// Not a valid identity; the text says why without echoing it (400).
    Invalid(String),
}

/// The lists of `/nodes`, in the order the document and the `nodes` table show
/// them; `?state=` takes one of them.
pub const NODE_LISTS: [&str; 7] = [
    "queued",
    "in_flight",
    "cooling_down",
    "upgrading",
    "pending",
    "denied",
    "recent",
];

/// Entries of each list in one `/nodes` page unless `?limit=` says otherwise.
pub const NODES_PAGE: usize = 500;

/// The most entries of each list one `/nodes` page holds (`?limit=` beyond it is
/// refused): an answer's size never grows with the fleet.
pub const NODES_PAGE_MAX: usize = 1000;

/// Which page of `/nodes` a request asks for: `?state=&offset=&limit=`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodesQuery {
    /// Only this list (one of [`NODE_LISTS`]); every list when `None`.
    pub state: Option<&'static str>,
    /// Entries of each list skipped.
    pub offset: usize,
    /// Entries of each list shown, at most [`NODES_PAGE_MAX`].
    pub limit: usize,
}

impl Default for NodesQuery {
    fn default() -> NodesQuery {
        NodesQuery {
            state: None,
            offset: 0,
            limit: NODES_PAGE,
        }
    }
}

impl NodesQuery {
    /// Reads a query string (what follows `?`); the text says what is wrong
    /// without echoing the request.
    pub fn parse(query: &str) -> Result<NodesQuery, String> {
        let mut parsed = NodesQuery::default();
        let number = |key: &str, value: &str, max: usize| {
            value
                .parse::<usize>()
                .ok()
                .filter(|n| *n <= max)
                .ok_or_else(|| format!("{key} must be a whole number from 0 to {max}"))
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "state" => {
                    let list = NODE_LISTS
                        .iter()
                        .find(|l| **l == value)
                        .ok_or_else(|| format!("state must be one of {}", NODE_LISTS.join(", ")))?;
                    parsed.state = Some(list);
                }
                "offset" => parsed.offset = number(key, value, 1_000_000_000)?,
                "limit" => parsed.limit = number(key, value, NODES_PAGE_MAX)?.max(1),
                _ => return Err("the parameters are state, offset and limit".into()),
            }
        }
        Ok(parsed)
    }

    /// Whether `list` is part of the answer.
    pub fn wants(&self, list: &str) -> bool {
        self.state.is_none_or(|s| s == list)
    }

    /// The path of the page after this one of `list`.
    pub fn next_of(&self, list: &str) -> String {
        format!(
            "/nodes?state={list}&offset={}&limit={}",
            self.offset + self.limit,
            self.limit
        )
    }
}

/// What `/nodes` shows: every node the daemon knows, a page at a time, and one by
/// identity. This module cannot name identities or fleets, so the daemon validates
/// and looks up.
pub trait NodeStatus: Send + Sync {
    /// The `/nodes` document: the page `query` asks for of each list, with each
    /// list's `total` and, where more follow, the path of its `next` page.
    fn nodes(&self, query: &NodesQuery) -> serde_json::Value;
    /// The `/nodes/<raw>` answer; `raw` is the path segment as received.
    fn node(&self, raw: &str) -> NodeLookup;
}

/// The daemon's node status, shared with the listener.
pub type NodeSource = Arc<dyn NodeStatus>;

/// A [`NodeStatus`] set once the daemon runs (the listener starts before it): until
/// then `/nodes` says it is starting and knows no node.
#[derive(Default)]
pub struct LateNodes(parking_lot::Mutex<Option<NodeSource>>);

impl LateNodes {
    /// From now on, answer from `source`.
    pub(crate) fn set(&self, source: NodeSource) {
        *self.0.lock() = Some(source);
    }
}

impl NodeStatus for LateNodes {
    fn nodes(&self, query: &NodesQuery) -> serde_json::Value {
        let source = self.0.lock().clone();
        match source {
            Some(s) => s.nodes(query),
            None => serde_json::json!({"starting": true}),
        }
    }
    fn node(&self, raw: &str) -> NodeLookup {
        let source = self.0.lock().clone();
        source.map_or(NodeLookup::Unknown, |s| s.node(raw))
    }
}

/// Which part this instance plays among the provisioners of its site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Neither leader election nor active-active: the only instance, always working.
    Alone,
    /// Leader of the election: this instance provisions.
    Leader,
    /// An active-active member taking its share of the nodes.
    Active,
    /// Not provisioning: the text is the election (or membership) state, such as
    /// `starting`, `standby` or `unavailable`.
    Waiting(String),
}

impl Role {
    /// `alone`, `leader`, `active`, or the waiting state's own name.
    pub(crate) fn name(&self) -> &str {
        match self {
            Role::Alone => "alone",
            Role::Leader => "leader",
            Role::Active => "active",
            Role::Waiting(state) => state,
        }
    }
}

/// What `/readyz` answers from: ready means connected to the broker and
/// provisioning (alone, leader or active).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// Connected to the broker now.
    pub connected: bool,
    /// This instance's part.
    pub role: Role,
    /// An operator's pause, with its reason (maybe empty).
    pub operator_pause: Option<String>,
}

impl Readiness {
    /// Reads a `/healthz` document: `connected` (a missing or non-boolean value is
    /// "not connected") and `leader`, the election state (`null` or missing: no
    /// election; `"leader"`; any other string: waiting in that state).
    pub(crate) fn from_health(doc: &serde_json::Value) -> Readiness {
        let connected = doc
            .get("connected")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        let role = match doc.get("leader") {
            None | Some(serde_json::Value::Null) => Role::Alone,
            Some(serde_json::Value::String(s)) if s == "leader" => Role::Leader,
            Some(serde_json::Value::String(s)) => Role::Waiting(s.clone()),
            Some(_) => Role::Waiting("unknown".into()),
        };
        let operator_pause = doc.get("operator_pause").filter(|p| !p.is_null()).map(|p| {
            p.get("reason")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_string()
        });
        Readiness {
            connected,
            role,
            operator_pause,
        }
    }

    /// Why this instance is not ready; empty when it is.
    pub(crate) fn reasons(&self) -> Vec<String> {
        let mut reasons = Vec::new();
        if !self.connected {
            reasons.push("not connected to the broker".to_string());
        }
        match self.operator_pause.as_deref() {
            None => {}
            Some("") => reasons.push("paused by an operator".to_string()),
            Some(reason) => reasons.push(format!("paused by an operator: {reason}")),
        }
        if let Role::Waiting(state) = &self.role {
            reasons.push(format!(
                "not provisioning: election or membership state is {state}"
            ));
        }
        reasons
    }

    /// True when connected and provisioning.
    pub(crate) fn is_ready(&self) -> bool {
        self.reasons().is_empty()
    }

    /// The `/readyz` status code (200 or 503) and JSON body.
    pub(crate) fn response(&self) -> (u16, serde_json::Value) {
        let reasons = self.reasons();
        let ready = reasons.is_empty();
        let body = serde_json::json!({
            "ready": ready,
            "connected": self.connected,
            "role": self.role.name(),
            "reasons": reasons,
        });
        (if ready { 200 } else { 503 }, body)
    }
}

/// The listener could not be started.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} for /metrics: {reason}")]
pub struct ServeError {
    /// The address that was asked for.
    pub addr: String,
    /// Why binding failed.
    pub reason: String,
}

/// What one client of the monitoring listener may cost: 64 connections at once
/// (beyond that, the connection idle longest is closed), a head of 8 KiB, a body of
/// 1 KiB, 5 s to send a request and 5 s to read its answer (`docs/security.md`).
pub(crate) fn monitor_limits() -> tiny_http::Limits {
    tiny_http::Limits::default()
}

/// A running monitoring listener; dropping it (or `MetricsServer::stop`) ends it
/// without waiting on any client.
pub struct MetricsServer {
    /// Kept for its drop, which closes the port and every connection.
    _server: tiny_http::GuardedServer,
    addr: SocketAddr,
}

impl MetricsServer {
    /// Binds `host:port` (host `None` = all interfaces, as Go) and serves from a thread.
    #[cfg(test)]
    pub(crate) fn start(
        host: Option<&str>,
        port: u16,
        metrics: Arc<Metrics>,
        health: HealthSource,
    ) -> Result<MetricsServer, ServeError> {
        Self::start_with_nodes(host, port, metrics, health, Arc::new(LateNodes::default()))
    }

    /// `MetricsServer::start`, with `/nodes` answered from `nodes`.
    pub fn start_with_nodes(
        host: Option<&str>,
        port: u16,
        metrics: Arc<Metrics>,
        health: HealthSource,
        nodes: NodeSource,
    ) -> Result<MetricsServer, ServeError> {
        Self::start_limited(host, port, metrics, health, nodes, monitor_limits())
    }

    /// `MetricsServer::start_with_nodes` held to `limits`.
    pub(crate) fn start_limited(
        host: Option<&str>,
        port: u16,
        metrics: Arc<Metrics>,
        health: HealthSource,
        nodes: NodeSource,
        limits: tiny_http::Limits,
    ) -> Result<MetricsServer, ServeError> {
        let addr = match host {
            Some(h) if h.contains(':') => format!("[{h}]:{port}"),
            Some(h) => format!("{h}:{port}"),
            None => format!("0.0.0.0:{port}"),
        };
        let refused = |reason: &str| ServeError {
            addr: addr.clone(),
            reason: reason.to_string(),
        };
        let listener = std::net::TcpListener::bind(&addr).map_err(|e| refused(&e.to_string()))?;
        let bound = listener.local_addr().map_err(|e| refused(&e.to_string()))?;
        let counted = Arc::clone(&metrics);
        let on_refusal: tiny_http::OnRefusal = Arc::new(move |why: tiny_http::Refusal| {
            counted
                .connections_refused
                .with_label_values(&["monitor", why.as_str()])
                .inc();
        });
        let handler: tiny_http::Handler = Arc::new(move |request: tiny_http::Request| {
            answer(request, &metrics, &health, &nodes);
        });
        let server = tiny_http::GuardedServer::start(listener, limits, on_refusal, handler)
            .map_err(|e| refused(&format!("cannot start its threads: {e}")))?;
        Ok(MetricsServer {
            _server: server,
            addr: bound,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections open now (served, or being closed).
    #[cfg(test)]
    pub(crate) fn connections(&self) -> usize {
        self._server.connections()
    }

    /// Stops accepting requests and closes every connection; waits on no client.
    #[cfg(test)]
    pub(crate) fn stop(self) {
        drop(self);
    }
}

/// Answers one request, on its connection's thread.
fn answer(
    request: tiny_http::Request,
    metrics: &Metrics,
    health: &HealthSource,
    nodes: &NodeSource,
) {
    let (path, query) = request.url().split_once('?').unwrap_or((request.url(), ""));
    let response = match (request.method(), path) {
        (tiny_http::Method::Get, "/metrics") => {
            let readiness = health.readiness();
            metrics.connected.set(i64::from(readiness.connected));
            metrics.ready.set(i64::from(readiness.is_ready()));
            text_response(
                200,
                metrics.render(),
                "text/plain; version=0.0.4; charset=utf-8",
            )
        }
        (tiny_http::Method::Get, "/healthz") => {
            text_response(200, health.health().to_string(), "application/json")
        }
        (tiny_http::Method::Get, "/readyz") => {
            let (status, body) = health.readiness().response();
            text_response(status, body.to_string(), "application/json")
        }
        (tiny_http::Method::Get, "/nodes" | "/nodes/") => match NodesQuery::parse(query) {
            Ok(query) => text_response(200, nodes.nodes(&query).to_string(), "application/json"),
            Err(why) => text_response(
                400,
                serde_json::json!({ "error": why }).to_string(),
                "application/json",
            ),
        },
        (tiny_http::Method::Get, p) if p.starts_with("/nodes/") => {
            let raw = &p["/nodes/".len()..];
            let (status, body) = match nodes.node(raw) {
                NodeLookup::Found(doc) => (200, doc),
                NodeLookup::Unknown => (404, serde_json::json!({"error": "no such node is known"})),
                NodeLookup::Invalid(why) => (400, serde_json::json!({"error": why})),
            };
            text_response(status, body.to_string(), "application/json")
        }
        _ => text_response(404, "404 page not found\n".into(), "text/plain"),
    };
    if let Err(e) = request.respond(response) {
        log::debug!("could not answer a monitoring request: {e}");
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

#[cfg(test)]
mod door_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
        request(addr, "GET", path)
    }

    /// One HTTP/1.0 request: status, head and body of the answer.
    fn request(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.0\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        (status, head.to_string(), body.to_string())
    }

    fn serve_with(health: HealthSource) -> MetricsServer {
        let metrics = Arc::new(Metrics::new("lon").unwrap());
        MetricsServer::start(Some("127.0.0.1"), 0, metrics, health).unwrap()
    }

    /// A listener whose health source is a closure returning `doc`, which the test
    /// changes between requests.
    fn serve_document(
        doc: serde_json::Value,
    ) -> (Arc<parking_lot::Mutex<serde_json::Value>>, MetricsServer) {
        let doc = Arc::new(parking_lot::Mutex::new(doc));
        let shared = Arc::clone(&doc);
        (doc, serve_with(Arc::new(move || shared.lock().clone())))
    }

    fn ready_body(server: &MetricsServer) -> (u16, serde_json::Value) {
        let (status, head, body) = get(server.local_addr(), "/readyz");
        assert!(head.contains("application/json"), "{head}");
        (status, serde_json::from_str(&body).unwrap())
    }

    #[test]
    fn readyz_of_a_closure_source_follows_its_health_document() {
        let (doc, server) = serve_document(serde_json::json!({
            "connected": false, "leader": null
        }));

        let (status, body) = ready_body(&server);
        assert_eq!(status, 503);
        assert_eq!(body["ready"], false);
        assert_eq!(body["role"], "alone");
        assert_eq!(body["reasons"][0], "not connected to the broker");

        *doc.lock() = serde_json::json!({"connected": true, "leader": null});
        let (status, body) = ready_body(&server);
        assert_eq!((status, &body["ready"]), (200, &serde_json::json!(true)));
        assert_eq!(body["reasons"], serde_json::json!([]));

        *doc.lock() = serde_json::json!({"connected": true, "leader": "standby"});
        let (status, body) = ready_body(&server);
        assert_eq!(status, 503);
        assert_eq!(body["role"], "standby");
        assert_eq!(
            body["reasons"],
            serde_json::json!(["not provisioning: election or membership state is standby"])
        );

        *doc.lock() = serde_json::json!({"connected": true, "leader": "leader"});
        let (status, body) = ready_body(&server);
        assert_eq!((status, &body["role"]), (200, &serde_json::json!("leader")));

        // /healthz is the same document, always 200.
        let (status, _, body) = get(server.local_addr(), "/healthz");
        assert_eq!(status, 200);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&body).unwrap(),
            *doc.lock()
        );
        server.stop();
    }

    struct ActiveActive {
        connected: bool,
        member: bool,
    }

    impl Health for ActiveActive {
        fn health(&self) -> serde_json::Value {
            serde_json::json!({"connected": self.connected})
        }
        fn readiness(&self) -> Readiness {
            Readiness {
                connected: self.connected,
                role: if self.member {
                    Role::Active
                } else {
                    Role::Waiting("joining".into())
                },
                operator_pause: None,
            }
        }
    }

    #[test]
    fn an_operator_s_pause_is_not_ready_and_says_why() {
        let paused = |pause: serde_json::Value| {
            Readiness::from_health(&serde_json::json!({
                "connected": true, "leader": null, "operator_pause": pause,
            }))
        };
        assert!(paused(serde_json::Value::Null).is_ready());
        let r = paused(serde_json::json!({"reason": "CA outage", "since": 1}));
        assert_eq!(r.operator_pause.as_deref(), Some("CA outage"));
        assert_eq!(r.reasons(), ["paused by an operator: CA outage"]);
        assert_eq!(r.response().0, 503);
        let r = paused(serde_json::json!({"reason": "", "since": 1}));
        assert_eq!(r.reasons(), ["paused by an operator"]);
    }

    #[test]
    fn readyz_uses_an_overridden_readiness() {
        let server = serve_with(Arc::new(ActiveActive {
            connected: true,
            member: true,
        }));
        let (status, body) = ready_body(&server);
        assert_eq!((status, &body["role"]), (200, &serde_json::json!("active")));
        server.stop();

        let server = serve_with(Arc::new(ActiveActive {
            connected: false,
            member: false,
        }));
        let (status, body) = ready_body(&server);
        assert_eq!(status, 503);
        assert_eq!(body["connected"], false);
        assert_eq!(
            body["reasons"],
            serde_json::json!([
                "not connected to the broker",
                "not provisioning: election or membership state is joining"
            ])
        );
        server.stop();
    }

    #[test]
    fn each_scrape_sets_connected_and_ready_from_the_health_source() {
        let (doc, server) = serve_document(serde_json::json!({}));
        for (health, connected, ready) in [
            (
                serde_json::json!({"connected": true, "leader": "standby"}),
                1,
                0,
            ),
            (
                serde_json::json!({"connected": true, "leader": "leader"}),
                1,
                1,
            ),
            (
                serde_json::json!({"connected": false, "leader": "leader"}),
                0,
                0,
            ),
            (serde_json::json!({"connected": true, "leader": null}), 1, 1),
        ] {
            *doc.lock() = health.clone();
            let text = get(server.local_addr(), "/metrics").2;
            for series in [
                format!("choria_provisioner_connected{{site=\"lon\"}} {connected}\n"),
                format!("choria_provisioner_ready{{site=\"lon\"}} {ready}\n"),
            ] {
                assert!(
                    text.contains(&series),
                    "{health}: {series} missing from\n{text}"
                );
            }
        }
        server.stop();
    }

    #[test]
    fn readiness_from_odd_health_documents_is_not_ready() {
        for doc in [
            serde_json::json!({}),
            serde_json::json!({"connected": "yes"}),
            serde_json::json!([1, 2]),
            serde_json::json!({"connected": true, "leader": 7}),
        ] {
            let r = Readiness::from_health(&doc);
            assert!(!r.is_ready(), "{doc} gave {r:?}");
            assert_eq!(r.response().0, 503, "{doc}");
        }
    }

    struct TwoNodes;

    impl NodeStatus for TwoNodes {
        fn nodes(&self, _: &NodesQuery) -> serde_json::Value {
            serde_json::json!({"queued": [{"identity": "a"}]})
        }
        fn node(&self, raw: &str) -> NodeLookup {
            match raw {
                "a" => NodeLookup::Found(serde_json::json!({"identity": "a"})),
                "b" => NodeLookup::Unknown,
                _ => NodeLookup::Invalid("not an identity".into()),
            }
        }
    }

    #[test]
    fn nodes_answers_200_404_and_400_and_waits_for_its_source() {
        let metrics = Arc::new(Metrics::new("lon").unwrap());
        let late = Arc::new(LateNodes::default());
        let server = MetricsServer::start_with_nodes(
            Some("127.0.0.1"),
            0,
            metrics,
            Arc::new(|| serde_json::json!({})),
            Arc::clone(&late) as NodeSource,
        )
        .unwrap();
        let addr = server.local_addr();
        assert_eq!(
            get(addr, "/nodes"),
            (200, get(addr, "/nodes").1, r#"{"starting":true}"#.into())
        );
        assert_eq!(
            get(addr, "/nodes/a").0,
            404,
            "nothing known before the daemon runs"
        );
        late.set(Arc::new(TwoNodes));
        let (status, head, body) = get(addr, "/nodes");
        assert_eq!(
            (status, body.as_str()),
            (200, r#"{"queued":[{"identity":"a"}]}"#)
        );
        assert!(head.contains("application/json"), "{head}");
        assert_eq!(get(addr, "/nodes/a").2, r#"{"identity":"a"}"#);
        assert_eq!(
            get(addr, "/nodes/b"),
            (
                404,
                get(addr, "/nodes/b").1,
                r#"{"error":"no such node is known"}"#.into()
            )
        );
        let (status, _, body) = get(addr, "/nodes/%2e%0a");
        assert_eq!(
            (status, body.as_str()),
            (400, r#"{"error":"not an identity"}"#)
        );
        assert_eq!(request(addr, "POST", "/nodes").0, 404, "read-only");
        let (status, _, body) = get(addr, "/nodes?limit=5000");
        assert_eq!(
            (status, body.as_str()),
            (
                400,
                r#"{"error":"limit must be a whole number from 0 to 1000"}"#
            )
        );
        server.stop();
    }

    #[test]
    fn other_paths_and_methods_are_404() {
        let server = serve_with(Arc::new(|| serde_json::json!({"connected": true})));
        assert_eq!(get(server.local_addr(), "/readyz/x").0, 404);
        assert_eq!(get(server.local_addr(), "/readyz?verbose=1").0, 200);
        assert_eq!(request(server.local_addr(), "POST", "/readyz").0, 404);
        assert_eq!(request(server.local_addr(), "HEAD", "/healthz").0, 404);
        server.stop();
    }
}
