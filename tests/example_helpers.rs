//! The example helpers shipped in packaging/examples answer the real helper contract.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use choria_provisioner::choria::identity::Identity;
use choria_provisioner::node::helper::{CsrInfo, Ed25519Info, Helper, HelperInput, HelperOutput};

fn example(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/examples")
        .join(name)
        .display()
        .to_string()
}

/// True when every program answers `--version`; otherwise prints why the test skips.
fn has(programs: &[&str]) -> bool {
    let missing: Vec<&str> = programs
        .iter()
        .copied()
        .filter(|program| {
            !std::process::Command::new(program)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    if !missing.is_empty() {
        eprintln!("SKIP: {} not installed", missing.join(" and "));
    }
    missing.is_empty()
}

/// What `helper` answers for n1.example.net with `inventory` and, by feature, its CSR
/// or ed25519 key.
fn run(
    helper: &Helper,
    inventory: &str,
    csr: Option<&CsrInfo>,
    ed: Option<&Ed25519Info>,
) -> HelperOutput {
    let input = serde_json::to_vec(&HelperInput {
        identity: &Identity::parse("n1.example.net").unwrap(),
        csr,
        ed25519_pubkey: ed,
        inventory,
        jwt: None,
    })
    .unwrap();
    helper
        .run("n1.example.net", &input, false, &[], None)
        .unwrap()
        .output
}

#[test]
fn the_shell_helper_configures_the_node() {
    let h = Helper::new(&example("provision-helper.sh"), Duration::from_secs(5));
    let out = run(&h, "{}", None, None);
    assert!(!out.defer);
    assert_eq!(out.configuration["identity"], "n1.example.net");
    assert_eq!(out.configuration["plugin.choria.server.provision"], "false");
}

#[test]
fn the_python_helper_defers_shuts_down_and_configures() {
    if !has(&["python3"]) {
        return;
    }
    let h = Helper::new(&example("provision-helper.py"), Duration::from_secs(10));
    let answer = |inv: &str| run(&h, inv, None, None);
    let out = answer(r#"{"facts":{}}"#);
    assert!(out.defer, "no role: deferred");
    let out = answer(r#"{"facts":{"role":"web","decommissioned":true}}"#);
    assert!(out.shutdown && !out.defer);
    let out = answer(r#"{"facts":{"role":"web"}}"#);
    assert!(!out.defer && !out.shutdown);
    assert_eq!(out.configuration["plugin.choria.server.provision"], "false");
}

#[test]
fn the_python_helper_signs_a_csr_with_the_configured_ca() {
    if !has(&["python3", "openssl"]) {
        return;
    }
    let dir = support::TempDir::new("pki");
    let Some(tls) = support::make_tls(&dir) else {
        return;
    };
    let openssl = |args: &[&str]| {
        assert!(std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap()
            .status
            .success())
    };
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=n1.example.net",
        "-keyout",
        "node.key",
        "-out",
        "node.csr",
    ]);
    let csr = CsrInfo {
        csr: std::fs::read_to_string(dir.path().join("node.csr")).unwrap(),
        public_key: String::new(),
        ssldir: "/etc/choria/ssl".into(),
    };
    let helper_cmd = format!(
        "env PROVISION_CA_CERT={} PROVISION_CA_KEY={} {}",
        tls.ca.display(),
        dir.path().join("ca.key").display(),
        example("provision-helper.py")
    );
    let h = Helper::new(&helper_cmd, Duration::from_secs(10));
    let out = run(&h, r#"{"facts":{"role":"web"}}"#, Some(&csr), None);
    assert!(!out.defer, "{}", out.msg);
    assert!(out.certificate.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(out.ca.contains("BEGIN CERTIFICATE"));
    assert_eq!(out.ssldir, "/etc/choria/ssl");
    assert_eq!(out.configuration["plugin.security.provider"], "file");
}

#[test]
fn the_ed25519_helper_asks_for_server_claims() {
    if !has(&["python3"]) {
        return;
    }
    let ed = Ed25519Info {
        public_key: "ab".repeat(32),
        directory: "/etc/choria".into(),
        signature: "cd".repeat(64),
    };
    let h = Helper::new(
        &format!(
            "env PROVISION_ISSUER_PUBLIC={} {}",
            "ef".repeat(32),
            example("ed25519-helper.py")
        ),
        Duration::from_secs(10),
    );
    let out = run(&h, "{}", None, Some(&ed));
    assert!(!out.defer, "{}", out.msg);
    assert_eq!(
        out.configuration["plugin.security.choria.seed_file"],
        "/etc/choria/server.seed"
    );
    let claims = out.server_claims.unwrap();
    assert_eq!(claims["exp"], 5 * 365 * 24 * 3600);
    assert_eq!(claims["permissions"]["streams"], true);
}
