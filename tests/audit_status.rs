//! What operators see of each node, end to end against a real nats-server and the
//! simulator: the audit trail (one JSON line per attempt, the auditor's facts, never
//! a secret, write failures counted, SIGHUP reopens it), `/nodes` and
//! `/nodes/<identity>`, the `nodes` command, `upgrades_max_in_flight`, and a helper
//! configuration that would loop called out.
#![cfg(feature = "sim")]

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use choria_provisioner::metrics::MetricsServer;
use serde_json::Value;
use support::daemon::{nodes, nodes_ok};
use support::rig::*;
use support::{NatsServer, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_choria-provisioner");

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .unwrap()
}

fn audit_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn der(pem: &str) -> Vec<u8> {
    use base64::Engine as _;
    let body: String = pem
        .lines()
        .take_while(|l| !l.starts_with("-----END"))
        .filter(|l| !l.starts_with("-----"))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap()
}

fn monitor(prov: &Provisioner) -> MetricsServer {
    MetricsServer::start_with_nodes(
        Some("127.0.0.1"),
        0,
        Arc::clone(&prov.metrics),
        Arc::new(|| serde_json::json!({"connected": true})),
        prov.daemon().node_status(),
    )
    .unwrap()
}

#[test]
fn every_attempt_is_audited_with_its_facts_and_never_a_secret() {
    const TOKEN: &str = "tok-7f3e9a1c55";
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 6, |o| {
        o.issuer_seed = Some(ISSUER_SEED);
        o.token = TOKEN.into();
    });
    let dir = TempDir::new("audit");
    let key_pem = fixture("rsa2048-pkcs1.pem");
    let cert = fixture("rsa2048-cert.pem");
    let answer = serde_json::json!({
        "configuration": {"identity": "$id", "plugin.choria.server.provision": "false",
                          "plugin.choria.middleware_hosts": "nats://b1:4222"},
        "certificate": cert, "ca": cert, "key": key_pem,
    });
    let h = helper_answering(&dir, "h.sh", &answer.to_string(), "0");
    let seed_hex = hex(&ISSUER_SEED);
    let seed_file = dir.write("signer.seed", &seed_hex);
    let audit = dir.path().join("audit.log");
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        &format!(
            "helper: {}\ntoken: {TOKEN}\nfeatures: {{ed25519: true}}\njwt_verify_cert: {}\njwt_signing_key: {}\naudit_file: {}\n",
            h.display(),
            issuer_public_hex(),
            seed_file.display(),
            audit.display()
        ),
        fast(),
    );
    wait_provisioned(&fleet, 6, Duration::from_secs(60));
    wait_until("all audited", Duration::from_secs(10), || {
        audit_lines(&audit).len() >= 6
    });
    let lines = audit_lines(&audit);
    let outcomes: u64 = ["provisioned", "failed", "deferred", "unreachable"]
        .iter()
        .map(|o| prov.metrics.outcomes.with_label_values(&[o]).get())
        .sum();
    assert_eq!(
        lines.len() as u64,
        outcomes,
        "one line per finished attempt"
    );
    let summary = fleet.summary();
    let fingerprint = hex(ring::digest::digest(&ring::digest::SHA256, &der(&cert)).as_ref());
    for node in &summary.nodes {
        let mine: Vec<&Value> = lines
            .iter()
            .filter(|l| l["identity"] == node.identity.as_str())
            .collect();
        let line = mine
            .last()
            .unwrap_or_else(|| panic!("{} audited", node.identity));
        assert_eq!(line["outcome"], "provisioned", "{line}");
        assert_eq!(line["step"], "restart", "{line}");
        assert_eq!(line["instance"], "p1.test");
        assert_eq!(line["attempt"], mine.len() as u64);
        assert!(line["time"].as_str().unwrap().ends_with('Z'), "{line}");
        assert!(line["duration_seconds"].as_f64().unwrap() > 0.0);
        assert_eq!(line["version_before"], node.version.as_str());
        assert_eq!(line["certificate_sha256"], fingerprint.as_str());
        // The server JWT the node got is the one audited.
        let jwt = node.server_jwt.as_deref().expect("a server JWT");
        use base64::Engine as _;
        let claims: Value = serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(jwt.split('.').nth(1).unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(line["server_jwt_id"], claims["jti"], "{line}");
        assert_eq!(line["server_jwt_expires"], claims["exp"], "{line}");
        assert!(
            line["provisioning_jwt_id"]
                .as_str()
                .is_some_and(|j| j.len() == 27),
            "{line}"
        );
        assert!(line["provisioning_jwt_expires"].as_i64().unwrap() > 1_700_000_000);
        assert!(line.get("error").is_none(), "{line}");
    }
    if support::on_path("openssl") {
        let out = std::process::Command::new("openssl")
            .args(["x509", "-noout", "-serial", "-in"])
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rsa2048-cert.pem"))
            .output()
            .unwrap();
        let serial = String::from_utf8_lossy(&out.stdout)
            .trim()
            .trim_start_matches("serial=")
            .to_ascii_lowercase();
        assert_eq!(lines[0]["certificate_serial"], serial.as_str());
    }
    // Never a secret: the token, the key the helper made, the signing seed, the JWTs.
    let text = std::fs::read_to_string(&audit).unwrap();
    let mut secrets = vec![TOKEN.to_string(), seed_hex, "PRIVATE KEY".to_string()];
    secrets.extend(
        key_pem
            .lines()
            .filter(|l| !l.starts_with("-----") && l.len() > 20)
            .map(String::from),
    );
    for node in &summary.nodes {
        let jwt = node.server_jwt.clone().unwrap();
        secrets.push(jwt.split('.').nth(2).unwrap().to_string());
    }
    for secret in &secrets {
        assert!(
            !text.contains(secret.as_str()),
            "{secret} in the audit trail"
        );
    }
    assert_eq!(prov.metrics.audit_write_errors.get(), 0);
}

#[test]
fn deferrals_and_failures_are_audited_with_the_helper_s_msg_or_the_error() {
    let server = NatsServer::start();
    let _fleet = sim(&server.url(), 2, |_| {});
    let dir = TempDir::new("audit-defer");
    let audit = dir.path().join("audit.log");
    let prov = start_answering(
        &server,
        &dir,
        r#"{"defer": true, "msg": "not in \"CMDB\"\nyet"}"#,
        "0",
        &format!("audit_file: {}\n", audit.display()),
    );
    wait_until("deferred twice each", Duration::from_secs(30), || {
        audit_lines(&audit).len() >= 4
    });
    let lines = audit_lines(&audit);
    for line in &lines {
        assert_eq!(line["outcome"], "deferred", "{line}");
        assert_eq!(line["step"], "helper");
        assert_eq!(
            line["helper_msg"],
            "not in \\\"CDMB\\\"\\nyet".replace("CDMB", "CMDB")
        );
    }
    let n0 = |n: u64| {
        lines
            .iter()
            .any(|l| l["identity"] == lines[0]["identity"] && l["attempt"] == n)
    };
    assert!(n0(1) && n0(2), "attempts are numbered per identity");
    // /nodes/<identity>: the node's recent attempts, newest first.
    let server = monitor(&prov);
    let port = server.local_addr().port();
    let id = lines[0]["identity"].as_str().unwrap();
    let (status, body) = support::http_get(port, &format!("/nodes/{id}"));
    assert_eq!(status, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["identity"], id);
    let recent = doc["recent"].as_array().unwrap();
    assert!(recent.len() >= 2);
    assert!(recent[0]["attempt"].as_u64() > recent[1]["attempt"].as_u64());
    assert_eq!(support::http_get(port, "/nodes/unknown.example.net").0, 404);
    let (status, body) = support::http_get(port, "/nodes/bad%0aname");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("only letters, digits"), "{body}");
    assert!(!body.contains("bad"), "not echoed: {body}");
}

#[test]
fn an_audit_file_that_cannot_be_written_is_counted_and_provisioning_goes_on() {
    support::logs::capture();
    let server = NatsServer::start();
    let fleet = sim(&server.url(), 5, |_| {});
    let prov = Provisioner::start(&server.url(), "p1.test", "audit_file: /dev/full\n", fast());
    wait_provisioned(&fleet, 5, Duration::from_secs(60));
    wait_until("counted", Duration::from_secs(5), || {
        prov.metrics.audit_write_errors.get() >= 5
    });
    prov.assert_renders("choria_provisioner_audit_write_errors{site=\"test\"}");
    // Warned about at most once a minute, not once per line.
    let warnings = support::logs::lines_with("Could not write the audit file /dev/full");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("provisioning goes on"), "{warnings:?}");
}

#[test]
fn nodes_shows_every_state_and_the_command_prints_it() {
    let server = NatsServer::start();
    // Slow nodes: some queued and some in flight while we look.
    let fleet = sim(&server.url(), 12, all_late(Duration::from_millis(400)));
    let long_cooldown = choria_provisioner::fleet::daemon::DaemonOptions {
        cooldown: Duration::from_secs(60),
        ..fast()
    };
    // At most two attempts under way: the rest wait in the queue.
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        "workers: 2\nmax_waiting_attempts: 2\n",
        long_cooldown,
    );
    let m = monitor(&prov);
    let port = m.local_addr().port();
    let mut seen_queued = false;
    let mut seen_flight = false;
    wait_until("queued and in flight seen", Duration::from_secs(30), || {
        let doc: Value = serde_json::from_str(&support::http_get(port, "/nodes").1).unwrap();
        if let Some(q) = doc["queued"].as_array().filter(|q| !q.is_empty()) {
            let positions: Vec<u64> = q.iter().map(|v| v["position"].as_u64().unwrap()).collect();
            let mut sorted = positions.clone();
            sorted.sort();
            assert_eq!(sorted, (1..=q.len() as u64).collect::<Vec<_>>(), "{doc}");
            seen_queued = true;
        }
        if let Some(f) = doc["in_flight"].as_array().filter(|f| !f.is_empty()) {
            assert!(f[0]["step"].is_string() && f[0]["tries"].is_u64(), "{doc}");
            seen_flight = true;
        }
        seen_queued && seen_flight
    });
    // The command, while nodes are in flight.
    let table = nodes_ok(port, &[]);
    assert!(table.starts_with("Provisioner p1.test at "), "{table}");
    assert!(
        table.contains("STATE") && table.contains("IDENTITY"),
        "{table}"
    );
    wait_provisioned(&fleet, 12, Duration::from_secs(60));
    let doc: Value = serde_json::from_str(&support::http_get(port, "/nodes").1).unwrap();
    assert_eq!(doc["recent"].as_array().unwrap().len(), 12, "{doc}");
    assert!(
        doc["cooling_down"].as_array().unwrap().len() == 12,
        "provisioned nodes cool down: {doc}"
    );
    let id = doc["recent"][0]["identity"].as_str().unwrap().to_string();
    for (args, needle) in [
        (vec!["--state", "recent"], "provisioned"),
        (vec!["--state", "cooling_down"], "until "),
        (vec![id.as_str()], "cooling_down"),
        (vec!["--json"], "\"cooling_down\": ["),
    ] {
        let text = nodes_ok(port, &args);
        assert!(text.contains(needle), "{args:?}: {text}");
    }
    let out = nodes(port, &["nobody.example.net"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nobody.example.net is not known"));
    let out = nodes(port, &["--state", "gone"]);
    assert_eq!(out.status.code(), Some(1));
    // The address from the provisioner's own configuration.
    let dir = TempDir::new("nodes-config");
    let yaml = dir.write(
        "p.yaml",
        &format!(
            "helper: {}\nmonitor_host: 127.0.0.1\nmonitor_port: {port}\n",
            support::daemon::example_helper().display()
        ),
    );
    let out = std::process::Command::new(BIN)
        .args(["nodes", "--state", "recent", "--config"])
        .arg(&yaml)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains(&id), "{text}");
    let closed = format!("http://127.0.0.1:{}", support::free_port());
    let out = std::process::Command::new(BIN)
        .args(["nodes", "--monitor", &closed])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect"));
}

#[test]
fn upgrades_max_in_flight_caps_the_nodes_away_upgrading() {
    let run = |cap: &str| {
        let server = NatsServer::start();
        let fleet = sim(&server.url(), 10, |o| {
            o.upgradable = true;
            o.version = "0.30.2".into();
            o.restart_delay = Duration::from_millis(300);
        });
        let dir = TempDir::new("upgrade-cap");
        let prov = Provisioner::start(
            &server.url(),
            "p1.test",
            &format!("workers: 8\n{}{cap}", upgrading_settings(&dir)),
            // No discovery after the first: nodes that waited are queued again when
            // a slot is given back, not when discovery finds them.
            choria_provisioner::fleet::daemon::DaemonOptions {
                interval: Some(Duration::from_secs(600)),
                ..fast()
            },
        );
        wait_provisioned(&fleet, 10, Duration::from_secs(90));
        for node in fleet.summary().nodes {
            assert_eq!(node.upgrades, ["0.31.0"], "{}", node.identity);
        }
        assert_eq!(
            prov.metrics.provision_errors.get(),
            0,
            "waiting is no error"
        );
        (
            fleet.progress().upgrading_peak,
            prov.metrics
                .outcomes
                .with_label_values(&["upgrade_waiting"])
                .get(),
        )
    };
    let (peak, waited) = run("upgrades_max_in_flight: 2\n");
    assert!(
        peak <= 2,
        "at most 2 nodes away upgrading at once, saw {peak}"
    );
    assert_eq!(peak, 2, "the cap was used");
    assert!(waited > 0, "some nodes waited their turn");
    let (peak, waited) = run("");
    assert!(peak > 2, "unlimited by default: {peak} at once");
    assert_eq!(waited, 0);
}

#[test]
fn a_helper_configuration_that_loops_is_counted_and_still_sent() {
    let server = NatsServer::start();
    support::logs::capture();
    let fleet = sim(&server.url(), 3, |o| o.prefix = "loop-".into());
    let dir = TempDir::new("loop");
    let prov = start_answering(
        &server,
        &dir,
        r#"{"configuration": {"identity": "$id"}}"#,
        "0",
        "",
    );
    wait_until("configured", Duration::from_secs(30), || {
        fleet.progress().configured >= 3
    });
    for key in [
        "plugin.choria.server.provision",
        "plugin.choria.middleware_hosts",
    ] {
        assert!(
            prov.metrics
                .looping_configurations
                .with_label_values(&[key])
                .get()
                >= 3,
            "{key}"
        );
    }
    assert_eq!(
        prov.metrics
            .looping_configurations
            .with_label_values(&["identity"])
            .get(),
        0
    );
    // Warned once per helper version and key, naming the node and the key.
    let warned = |key: &str| {
        support::logs::lines_with("will not keep it out of provisioning")
            .into_iter()
            .filter(|l| l.contains(".example.net") && l.contains("loop-") && l.contains(key))
            .count()
    };
    assert_eq!(
        warned("plugin.choria.server.provision is not set to false"),
        1
    );
    assert_eq!(warned("plugin.choria.middleware_hosts is not set"), 1);
}

#[test]
fn sighup_reopens_the_audit_file_of_the_binary() {
    let server = NatsServer::start();
    let first = sim(&server.url(), 3, |o| o.prefix = "first-".into());
    let dir = TempDir::new("audit-hup");
    let audit = dir.path().join("audit.log");
    let mut child = support::daemon::spawn(
        &dir,
        &server.url(),
        &format!(
            "workers: 4\nshutdown_timeout: 3s\naudit_file: {}\n",
            audit.display()
        ),
    );
    wait_until("first audited", Duration::from_secs(60), || {
        audit_lines(&audit).len() >= 3
    });
    let rotated = dir.path().join("audit.log.1");
    std::fs::rename(&audit, &rotated).unwrap();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    wait_until("reopened", Duration::from_secs(10), || audit.exists());
    let second = sim(&server.url(), 2, |o| o.prefix = "second-".into());
    wait_until(
        "second audited in the new file",
        Duration::from_secs(60),
        || {
            audit_lines(&audit)
                .iter()
                .filter(|l| l["identity"].as_str().unwrap().starts_with("second-"))
                .count()
                >= 2
        },
    );
    assert!(audit_lines(&rotated)
        .iter()
        .all(|l| l["identity"].as_str().unwrap().starts_with("first-")));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(child.wait().unwrap().code(), Some(0));
    drop((first, second));
}
