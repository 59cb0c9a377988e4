//! Shared test fixtures: scratch directories and a real `nats-server` on 127.0.0.1,
//! and (with the `sim` feature) a Choria broker front end before it (`broker.rs`).
#![allow(dead_code)]

#[cfg(feature = "sim")]
pub mod broker;
pub mod daemon;
pub mod dns;
pub mod logs;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A scratch directory removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new empty directory under the system temp dir.
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "choria-prov-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `contents` to `name` inside the directory and returns its path.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent");
        }
        std::fs::write(&path, contents).expect("write file");
        path
    }

    /// Writes an executable script.
    pub fn script(&self, name: &str, contents: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.write(name, contents);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A free TCP port on 127.0.0.1 (bound and released; good enough for tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Waits until something accepts TCP connections on 127.0.0.1:`port`.
pub fn wait_for_port(port: u16, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The nats-server binary: `$NATS_SERVER`, then `PATH`, then the copy `make test`
/// installs under `target/tools`.
pub fn nats_server_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("NATS_SERVER").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let search = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&search).chain([
        PathBuf::from("/usr/sbin"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/tools/bin"),
    ]) {
        let candidate = dir.join("nats-server");
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!("no nats-server found: run the tests through `make test`, which installs one, or set NATS_SERVER")
}

/// A nats-server on 127.0.0.1 with a generated config, killed when dropped.
pub struct NatsServer {
    pub port: u16,
    child: Option<Child>,
    config: PathBuf,
    _dir: TempDir,
}

impl NatsServer {
    /// Starts a plain single-account server.
    pub fn start() -> NatsServer {
        NatsServer::with_config("")
    }

    /// Starts a server whose config file has `extra` appended after `listen`; `{dir}`
    /// in `extra` stands for the server's own scratch directory.
    pub fn with_config(extra: &str) -> NatsServer {
        let dir = TempDir::new("nats");
        let port = free_port();
        let extra = extra.replace("{dir}", &dir.path().display().to_string());
        let config = dir.write("nats.conf", &format!("listen: 127.0.0.1:{port}\n{extra}\n"));
        let mut server = NatsServer {
            port,
            child: None,
            config,
            _dir: dir,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let child = Command::new(nats_server_binary())
            .arg("-c")
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        assert!(
            wait_for_port(self.port, Duration::from_secs(10)),
            "nats-server did not listen on 127.0.0.1:{} within 10s",
            self.port
        );
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (connections drop at once).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and config.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A plain HTTP/1.0 GET on 127.0.0.1; returns (status, body).
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or("")
        .to_string();
    (status, body)
}

/// A CA with a server certificate for 127.0.0.1 and a client certificate, made with
/// the `openssl` command line.
pub struct TlsFiles {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// Generates [`TlsFiles`] in `dir`; `None` (with a printed reason) without openssl.
pub fn make_tls(dir: &TempDir) -> Option<TlsFiles> {
    let openssl = |args: &[&str]| -> bool {
        Command::new("openssl")
            .args(args)
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if !openssl(&["version"]) {
        eprintln!("SKIP: the openssl command is not installed");
        return None;
    }
    dir.write("server.ext", "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
    let ok = openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=Test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]) && openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]) && openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "server.ext",
        "-out",
        "server.pem",
    ]) && openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=provisioner.test.local",
        "-keyout",
        "client.key",
        "-out",
        "client.csr",
    ]) && openssl(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-out",
        "client.pem",
    ]);
    assert!(ok, "openssl failed to make test certificates");
    let p = |n: &str| dir.path().join(n);
    Some(TlsFiles {
        ca: p("ca.pem"),
        server_cert: p("server.pem"),
        server_key: p("server.key"),
        client_cert: p("client.pem"),
        client_key: p("client.key"),
    })
}

/// A nats-server laid out like a Choria broker for elections (go-choria's Streams leader election,
/// layout A): JetStream lives in account `choria`, the `provisioning` account sees only
/// the bucket's stream info and the `provisioner` key under `choria.streams.`. User
/// `node` has the permissions a broker gives servers in provisioning mode
/// (go-choria's `broker/network/choria_auth.go`).
pub fn election_broker() -> NatsServer {
    NatsServer::with_config(
        r#"jetstream { store_dir: "{dir}/js" }
accounts {
  choria: {
    jetstream: enabled
    users: [ { user: choria, password: choria } ]
    exports: [
      { service: "$JS.API.STREAM.INFO.KV_CHORIA_LEADER_ELECTION", accounts: [ provisioning ] }
      { service: "$KV.CHORIA_LEADER_ELECTION.provisioner", accounts: [ provisioning ] }
    ]
  }
  provisioning: {
    users: [
      { user: provisioner, password: s3cret }
      # What a Choria broker lets a provisioning-mode server do (go-choria's `broker/network/choria_auth.go`).
      { user: node, password: n0de, permissions: {
          publish: { allow: [ "choria.lifecycle.>", "provisioning.reply.>", "provisioning.registration.>" ] }
          subscribe: { allow: [ "provisioning.node.>", "provisioning.broadcast.agent.discovery", "provisioning.broadcast.agent.rpcutil", "provisioning.broadcast.agent.choria_util", "provisioning.broadcast.agent.choria_provision" ] }
      } }
    ]
    imports: [
      { service: { account: choria, subject: "$JS.API.STREAM.INFO.KV_CHORIA_LEADER_ELECTION" }, to: "choria.streams.STREAM.INFO.KV_CHORIA_LEADER_ELECTION" }
      { service: { account: choria, subject: "$KV.CHORIA_LEADER_ELECTION.provisioner" }, to: "choria.streams.$KV.CHORIA_LEADER_ELECTION.provisioner" }
    ]
  }
}"#,
    )
}

/// Creates the election bucket (as the broker would) with `ttl`, as user `choria`.
pub fn create_election_bucket(server: &NatsServer, ttl: Duration) {
    #[allow(deprecated)]
    let nc = nats::Options::with_user_pass("choria", "choria")
        .connect(server.url())
        .expect("connect as choria");
    let config = serde_json::json!({
        "name": "KV_CHORIA_LEADER_ELECTION",
        "subjects": ["$KV.CHORIA_LEADER_ELECTION.>"],
        "retention": "limits",
        "max_age": ttl.as_nanos() as u64,
        "max_msgs_per_subject": 1,
        "max_msg_size": 1024,
        "discard": "new",
        "deny_delete": true,
        "allow_rollup_hdrs": true,
        "storage": "memory",
        "num_replicas": 1,
    });
    let reply = nc
        .request_timeout(
            "$JS.API.STREAM.CREATE.KV_CHORIA_LEADER_ELECTION",
            config.to_string(),
            Duration::from_secs(5),
        )
        .expect("stream create answered");
    let answer: serde_json::Value = serde_json::from_slice(&reply.data).unwrap();
    assert!(
        answer.get("error").is_none(),
        "stream create failed: {answer}"
    );
}

#[cfg(feature = "sim")]
pub mod hostile;
#[cfg(feature = "sim")]
pub mod rig;
#[cfg(feature = "sim")]
pub mod sim_node;

/// True when `tool` is an executable name found on `PATH` (tests that need an optional
/// tool print SKIP without it).
pub fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
        .unwrap_or(false)
}
