//! The connector against a real nats-server: user/password, TLS with a generated CA,
//! retries until shutdown, reconnects after a restart.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use choria_provisioner::choria::client_config::ClientConfig;
use choria_provisioner::choria::connector::{ConnectError, Connector};
use choria_provisioner::choria::subject::{Subject, SubjectFilter};
use choria_provisioner::config::Config;
use choria_provisioner::metrics::Metrics;
use crossbeam_channel::bounded;
use support::{free_port, http_get, make_tls, NatsServer, TempDir};

const USERS: &str =
    "authorization { users = [ {user: provisioner, password: s3cret}, {user: node, password: n0de} ] }";

/// A client configuration for `url` with extra choria.cfg lines and provisioner YAML.
fn client(dir: &TempDir, url: &str, cfg: &str, yaml: &str) -> ClientConfig {
    let path = dir.write(
        "choria.cfg",
        &format!(
            "identity = provisioner.test.local\nplugin.choria.middleware_hosts = {url}\n{cfg}"
        ),
    );
    let helper = dir.script("helper", "#!/bin/sh\n");
    let yaml = dir.write("p.yaml", &format!("helper: {}\n{yaml}", helper.display()));
    let config = Config::load(&yaml).unwrap().config;
    let mut c = ClientConfig::load(&path).unwrap();
    choria_provisioner::cli::apply_provisioner_overrides(&mut c, &config);
    c
}

/// An insecure client of `url` that logs in with the provisioning `password`.
fn with_password(dir: &TempDir, url: &str, password: &str) -> ClientConfig {
    let yaml = format!("choria_insecure: true\nbroker_provisioning_password: {password}\n");
    client(dir, url, "", &yaml)
}

/// A connector's metrics, for one test.
fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics::new("t").unwrap())
}

/// The connections nats-server's monitoring port reports.
fn connz(monitor: u16) -> serde_json::Value {
    let (status, body) = http_get(monitor, "/connz?auth=1");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn connects_with_the_provisioning_password_and_names_the_connection() {
    let monitor = free_port();
    let server = NatsServer::with_config(&format!("{USERS}\nhttp: 127.0.0.1:{monitor}"));
    let dir = TempDir::new("conn");
    let c = with_password(&dir, &server.url(), "s3cret");
    let metrics = metrics();
    let (_stop, shutdown) = bounded::<()>(0);
    let conn = Connector::connect(&c, &metrics, &shutdown).expect("connects");
    assert!(conn.is_connected());
    let info = connz(monitor);
    let entry = &info["connections"][0];
    assert_eq!(entry["name"], "provisioner.test.local");
    assert_eq!(entry["authorized_user"], "provisioner");
    assert!(
        entry.get("tls_version").is_none(),
        "insecure means plaintext: {entry}"
    );
    assert!(metrics.render().contains(
        "choria_connector_initial_connection_attempts{identity=\"provisioner.test.local\"} 1"
    ));
}

#[test]
fn a_wrong_password_is_retried_until_shutdown() {
    let server = NatsServer::with_config(USERS);
    let dir = TempDir::new("conn");
    let c = with_password(&dir, &server.url(), "wrong");
    let metrics = metrics();
    let (stop, shutdown) = bounded::<()>(0);
    let m = Arc::clone(&metrics);
    let handle = std::thread::spawn(move || Connector::connect(&c, &m, &shutdown));
    std::thread::sleep(Duration::from_millis(2500));
    let stopped = Instant::now();
    drop(stop);
    let result = handle.join().unwrap();
    assert!(matches!(result, Err(ConnectError::Shutdown)), "{result:?}");
    assert!(stopped.elapsed() < Duration::from_secs(2), "prompt stop");
    let attempts = metrics
        .connector_initial_attempts
        .with_label_values(&["provisioner.test.local"])
        .get();
    assert!(attempts >= 2, "retried: {attempts}");
}

#[test]
fn tls_with_a_generated_ca_user_and_password() {
    let dir = TempDir::new("tls");
    let Some(tls) = make_tls(&dir) else { return };
    let monitor = free_port();
    let server = NatsServer::with_config(&format!(
        "{USERS}\nhttp: 127.0.0.1:{monitor}\nallow_non_tls: true\n\
         tls {{ cert_file: \"{}\", key_file: \"{}\", ca_file: \"{}\", verify: true }}",
        tls.server_cert.display(),
        tls.server_key.display(),
        tls.ca.display()
    ));
    let c = client(
        &dir,
        &server.url(),
        &tls.client_settings(),
        "broker_provisioning_password: s3cret\n",
    );
    assert!(c.validate().is_empty(), "{:?}", c.validate());
    let metrics = metrics();
    let (_stop, shutdown) = bounded::<()>(0);
    let conn = Connector::connect(&c, &metrics, &shutdown).expect("TLS connect");
    let (_sub, got) = listen(&conn, "tls.test");
    conn.bus()
        .publish(&Subject::new("tls.test").unwrap(), b"x")
        .unwrap();
    assert!(got.recv_timeout(Duration::from_secs(5)).is_ok());
    let entry = &connz(monitor)["connections"][0];
    assert!(
        entry["tls_version"]
            .as_str()
            .is_some_and(|v| v.starts_with("1.")),
        "the connection is TLS even though the server allows plaintext: {entry}"
    );
    assert_eq!(entry["authorized_user"], "provisioner");
}

#[test]
fn tls_configured_but_server_without_tls_never_falls_back_to_plaintext() {
    let dir = TempDir::new("tls");
    let Some(tls) = make_tls(&dir) else { return };
    let server = NatsServer::start();
    let c = client(&dir, &server.url(), &tls.client_settings(), "");
    let metrics = metrics();
    let (stop, shutdown) = bounded::<()>(0);
    let m = Arc::clone(&metrics);
    let handle = std::thread::spawn(move || Connector::connect(&c, &m, &shutdown));
    std::thread::sleep(Duration::from_millis(1500));
    drop(stop);
    assert!(matches!(
        handle.join().unwrap(),
        Err(ConnectError::Shutdown)
    ));
}

/// Subscribes to `subject` through the connector's bus; payloads go to the channel.
fn listen(
    conn: &Connector,
    subject: &str,
) -> (
    choria_provisioner::choria::bus::Subscription,
    crossbeam_channel::Receiver<Vec<u8>>,
) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let filter = SubjectFilter::new(subject).unwrap();
    let sub = conn
        .bus()
        .subscribe(&filter, None, move |m| {
            let _ = tx.send(m.data);
        })
        .unwrap();
    conn.bus().flush(Duration::from_secs(5)).unwrap();
    (sub, rx)
}

#[test]
fn reconnects_after_the_server_restarts() {
    let mut server = NatsServer::start();
    let dir = TempDir::new("conn");
    let c = client(&dir, &server.url(), "", "choria_insecure: true\n");
    let metrics = metrics();
    let (_stop, shutdown) = bounded::<()>(0);
    let conn = Connector::connect(&c, &metrics, &shutdown).unwrap();
    let (_sub, got) = listen(&conn, "after.restart");
    server.stop();
    let deadline = Instant::now() + Duration::from_secs(5);
    while conn.is_connected() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!conn.is_connected(), "disconnect noticed");
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !conn.is_connected() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(conn.is_connected(), "reconnected");
    conn.bus()
        .publish(&Subject::new("after.restart").unwrap(), b"back")
        .unwrap();
    assert_eq!(got.recv_timeout(Duration::from_secs(5)).unwrap(), b"back");
    assert_eq!(
        metrics
            .connector_reconnections
            .with_label_values(&["provisioner.test.local"])
            .get(),
        1
    );
}
