//! `choria-fleet-sim keys` driving a TLS broker, the provisioner and the simulator
//! binaries end to end, and the simulator's refusals of remote brokers and bad flags.
#![cfg(feature = "sim")]
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{free_port, wait_for_port, TempDir};

fn bin(name: &str) -> PathBuf {
    PathBuf::from(match name {
        "sim" => env!("CARGO_BIN_EXE_choria-fleet-sim"),
        _ => env!("CARGO_BIN_EXE_choria-provisioner"),
    })
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `keys`, a TLS nats-server from its `nats-server.conf`, the provisioner from its
/// YAML and choria.cfg, and the simulator from `--keys`: every node provisioned.
fn keys_end_to_end(v2: bool) -> Value {
    let dir = TempDir::new("keys");
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let mut args = vec![
        "keys".to_string(),
        "--dir".into(),
        dir.path().display().to_string(),
        "--token".into(),
        "s3cret".into(),
        "--nats".into(),
        url.clone(),
    ];
    if v2 {
        args.push("--v2".into());
    }
    let out = Command::new(bin("sim")).args(&args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = String::from_utf8(out.stdout).unwrap();
    for f in [
        "issuer.seed",
        "provisioning.jwt",
        "signer.jwt",
        "ca.pem",
        "provisioner-key.pem",
    ] {
        assert!(listed.contains(f), "{f} in {listed}");
    }
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |f: &str| {
        std::fs::metadata(dir.path().join(f))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("issuer.seed"), 0o600);
    assert_eq!(mode("provisioner-key.pem"), 0o600);
    assert_eq!(mode("ca.pem"), 0o644);
    // It never overwrites without --force.
    let again = Command::new(bin("sim")).args(&args).output().unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));

    let _nats = Killed(
        Command::new(support::nats_server_binary())
            .arg("-c")
            .arg(dir.path().join("nats-server.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(wait_for_port(port, Duration::from_secs(10)));
    let yaml = dir.path().join("choria-provisioner.yaml");
    let cfg = dir.path().join("choria.cfg");
    support::passing_check(bin("provisioner"), &yaml, &cfg);
    let log = dir.path().join("provisioner.log");
    let _provisioner = Killed(
        Command::new(bin("provisioner"))
            .arg("--config")
            .arg(&yaml)
            .arg("--choria-config")
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let summary = dir.path().join("summary.json");
    let sim = Command::new(bin("sim"))
        .args([
            "--nats", &url, "--nodes", "5", "--quiet",
            // No --duration: it ends once every node is finished (at most the
            // deadline below).
            "--keys",
        ])
        .arg(dir.path())
        .arg("--summary")
        .arg(&summary)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut sim = Killed(sim);
    loop {
        match sim.0.try_wait().unwrap() {
            Some(status) => {
                assert!(status.success());
                break;
            }
            None if Instant::now() > deadline => panic!("the simulator did not finish"),
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    let summary: Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    assert_eq!(
        summary["progress"]["provisioned"],
        5,
        "{summary:#}\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    summary
}

#[test]
fn keys_drive_a_tls_broker_the_provisioner_and_the_simulator_v1() {
    let summary = keys_end_to_end(false);
    for node in summary["nodes"].as_array().unwrap() {
        // jwt and inventory go out together, so the node may handle either first.
        let rpcs: Vec<&str> = node["rpcs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        let mut together = rpcs[..2].to_vec();
        together.sort_unstable();
        assert_eq!(
            together,
            ["choria_provision#jwt", "rpcutil#inventory"],
            "{rpcs:?}"
        );
        assert_eq!(
            rpcs[2..],
            ["choria_provision#configure", "choria_provision#restart"]
        );
    }
}

#[test]
fn keys_drive_a_tls_broker_the_provisioner_and_the_simulator_v2_with_a_chain_issuer() {
    let summary = keys_end_to_end(true);
    for node in summary["nodes"].as_array().unwrap() {
        assert_eq!(node["phase"], "provisioned", "{node}");
        let jwt = node["server_jwt"].as_str().expect("a server JWT");
        let claims: choria_provisioner::crypto::jwt::ServerClaims =
            choria_provisioner::crypto::jwt::unverified_claims(jwt).unwrap();
        assert!(claims.standard.iss.starts_with("C-"), "chain-issued");
        assert_eq!(claims.identity, node["identity"].as_str().unwrap());
    }
}

#[test]
fn the_simulator_refuses_a_remote_broker_and_bad_flags() {
    let run = |args: &[&str]| Command::new(bin("sim")).args(args).output().unwrap();
    let out = run(&["--nats", "nats://broker.example.net:4222", "--nodes", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-remote"));
    let out = run(&["--features", "v3"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown feature \"v3\""));
    let out = run(&["--csr-key", "dsa"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--csr-key must be rsa or ec"));
    let out = run(&["keys"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dir"));
    let out = run(&["keys", "--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--v2"));
}
