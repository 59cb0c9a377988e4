//! Shared test fixtures: scratch directories and a real `nats-server` on 127.0.0.1,
//! and (with the `sim` feature) a Choria broker front end before it (`broker.rs`).
#![allow(dead_code)]

#[cfg(feature = "sim")]
pub mod approval;
#[cfg(feature = "sim")]
pub mod broker;
pub mod daemon;
pub mod dns;
pub mod logs;
mod nats_server;

#[allow(unused_imports)] // each test crate uses its own part
pub use nats_server::{
    free_port, nats_server_binary, wait_for_port, NatsServer, RawPublisher, TempDir,
};

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `program check` on a provisioner configuration and a Choria client configuration,
/// which must pass: its stdout.
pub fn passing_check(
    program: impl AsRef<std::ffi::OsStr>,
    yaml: &std::path::Path,
    cfg: &std::path::Path,
) -> String {
    let check = Command::new(program)
        .args(["check", "--config"])
        .arg(yaml)
        .arg("--choria-config")
        .arg(cfg)
        .output()
        .unwrap();
    succeeded(&check, "check")
}

/// The standard output of a command that must have succeeded (`what` names it in
/// the failure, with both outputs).
pub fn succeeded(o: &std::process::Output, what: impl std::fmt::Debug) -> String {
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{what:?}: {out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
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

impl TlsFiles {
    /// The Choria client settings that connect with the client certificate.
    pub fn client_settings(&self) -> String {
        format!(
            "plugin.security.provider = file\nplugin.security.file.certificate = {}\n\
             plugin.security.file.key = {}\nplugin.security.file.ca = {}\n",
            self.client_cert.display(),
            self.client_key.display(),
            self.ca.display()
        )
    }
}

/// Generates [`TlsFiles`] in `dir`; `None` (with a printed reason) without openssl.
pub fn make_tls(dir: &TempDir) -> Option<TlsFiles> {
    // One openssl command line; no argument has a space.
    let openssl = |line: &str| -> bool {
        Command::new("openssl")
            .args(line.split_whitespace())
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if !openssl("version") {
        eprintln!("SKIP: the openssl command is not installed");
        return None;
    }
    dir.write("server.ext", "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
    // A key and a certificate for `cn`, signed by the CA, as `{name}.key`/`{name}.pem`.
    let issue = |name: &str, cn: &str, more: &str| {
        openssl(&format!(
            "req -newkey rsa:2048 -nodes -subj /CN={cn} -keyout {name}.key -out {name}.csr"
        )) && openssl(&format!(
            "x509 -req -in {name}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
             -out {name}.pem {more}"
        ))
    };
    let ok = openssl(
        "req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=Test-CA -keyout ca.key -out ca.pem",
    ) && issue("server", "localhost", "-extfile server.ext")
        && issue("client", "provisioner.test.local", "");
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
