//! What one attempt is doing now and what it learnt, shared between the worker that
//! runs it (which shows it on `/nodes` and writes it to the audit trail when the
//! attempt ends) and the sequence that fills it in step by step.
//!
//! Nothing secret is ever put here: identifiers (`jti`), expiry times, certificate
//! serials and fingerprints, versions and the helper's `msg`, each node string
//! already cut and escaped by [`crate::untrusted::shown`].

use std::time::Instant;

use parking_lot::Mutex;
use serde::Serialize;

/// The facts an auditor asks about one attempt. Every field is optional: an attempt
/// records only what it got to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Facts {
    /// The provisioning JWT's `jti` (features.jwt).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provisioning_jwt_id: Option<String>,
    /// The provisioning JWT's expiry (Unix seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provisioning_jwt_expires: Option<i64>,
    /// The `jti` of the server JWT this attempt signed (features.ed25519).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_jwt_id: Option<String>,
    /// The signed server JWT's expiry (Unix seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_jwt_expires: Option<i64>,
    /// Serial number (hex) of the certificate the helper handed out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate_serial: Option<String>,
    /// SHA-256 fingerprint (hex of the DER) of that certificate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate_sha256: Option<String>,
    /// The version the node reported in its inventory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version_before: Option<String>,
    /// The version the helper asked the node to upgrade to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version_after: Option<String>,
    /// The helper's `msg` (defer, shutdown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub helper_msg: Option<String>,
    /// The tries that failed and were retried, oldest first (at most
    /// [`RETRIES_KEPT`]): why an attempt that ended well took long.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retries: Vec<String>,
}

/// Most failed tries kept in [`Facts::retries`].
pub(crate) const RETRIES_KEPT: usize = 10;

/// Most characters of one [`Facts::retries`] entry.
const RETRY_TEXT_MAX: usize = 300;

impl Facts {
    /// Notes a failed try that is retried (bounded in count and length).
    pub(crate) fn retried(&mut self, what: &str) {
        if self.retries.len() < RETRIES_KEPT {
            self.retries
                .push(what.chars().take(RETRY_TEXT_MAX).collect());
        }
    }
}

/// Where an attempt is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Position {
    /// The step: an RPC's action (`inventory`, `configure` …) or `helper`,
    /// `server_jwt`, `key_transport`, `upgrade_slot`, `stale`, `start`.
    pub step: &'static str,
    /// When that step started.
    pub since: Instant,
    /// Tries of the step's RPC so far (0 for steps that are not RPCs).
    pub tries: u32,
}

#[derive(Debug)]
struct State {
    position: Position,
    facts: Facts,
}

/// One attempt's live position and facts.
#[derive(Debug)]
pub struct Progress {
    state: Mutex<State>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new()
    }
}

impl Progress {
    /// An attempt at its `start`.
    pub(crate) fn new() -> Progress {
        Progress {
            state: Mutex::new(State {
                position: Position {
                    step: "start",
                    since: Instant::now(),
                    tries: 0,
                },
                facts: Facts::default(),
            }),
        }
    }

    /// The attempt moved on to `step`.
    pub(crate) fn step(&self, step: &'static str) {
        let mut s = self.state.lock();
        if s.position.step != step {
            s.position = Position {
                step,
                since: Instant::now(),
                tries: 0,
            };
        }
    }

    /// Try `n` of the RPC `step` is starting.
    pub(crate) fn rpc_try(&self, step: &'static str, n: u32) {
        self.step(step);
        self.state.lock().position.tries = n;
    }

    /// Records what the attempt learnt.
    pub(crate) fn record(&self, f: impl FnOnce(&mut Facts)) {
        f(&mut self.state.lock().facts)
    }

    /// Where the attempt is now.
    pub(crate) fn position(&self) -> Position {
        self.state.lock().position.clone()
    }

    /// What the attempt learnt so far.
    pub(crate) fn facts(&self) -> Facts {
        self.state.lock().facts.clone()
    }
}

/// The serial and SHA-256 fingerprint (both lower-case hex) of the first
/// certificate in `pem`, or `None` when it holds no parseable certificate.
pub(crate) fn certificate_facts(pem: &str) -> Option<(String, String)> {
    use der::{DecodePem, Encode};
    let cert = x509_cert::Certificate::from_pem(pem.trim().as_bytes())
        .ok()
        .or_else(|| {
            // A bundle: the first PEM block only.
            let end = "-----END CERTIFICATE-----";
            let first = &pem[..pem.find(end)? + end.len()];
            x509_cert::Certificate::from_pem(first.trim().as_bytes()).ok()
        })?;
    let der = cert.to_der().ok()?;
    let serial = hex::encode(cert.tbs_certificate.serial_number.as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA256, &der);
    Some((serial, hex::encode(digest.as_ref())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_tries_move_forward() {
        let p = Progress::new();
        assert_eq!(p.position().step, "start");
        p.rpc_try("inventory", 1);
        p.rpc_try("inventory", 2);
        assert_eq!((p.position().step, p.position().tries), ("inventory", 2));
        p.step("helper");
        assert_eq!((p.position().step, p.position().tries), ("helper", 0));
        p.record(|f| f.version_before = Some("0.30.2".into()));
        for n in 0..RETRIES_KEPT + 3 {
            p.record(|f| f.retried(&format!("try {n} {}", "x".repeat(400))));
        }
        assert_eq!(p.facts().retries.len(), RETRIES_KEPT);
        assert_eq!(p.facts().retries[0].chars().count(), RETRY_TEXT_MAX);
        p.record(|f| f.retries.clear());
        assert_eq!(p.facts().version_before.as_deref(), Some("0.30.2"));
        let json = serde_json::to_value(p.facts()).unwrap();
        assert_eq!(json, serde_json::json!({"version_before": "0.30.2"}));
    }

    #[test]
    fn a_certificate_s_serial_and_fingerprint_and_the_first_of_a_bundle() {
        let pem = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/rsa2048-cert.pem"
        ))
        .unwrap();
        use base64::Engine as _;
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap();
        let want = hex::encode(ring::digest::digest(&ring::digest::SHA256, &der).as_ref());
        let (serial, sha256) = certificate_facts(&pem).unwrap();
        assert_eq!(sha256, want);
        assert!(!serial.is_empty() && serial.bytes().all(|b| b.is_ascii_hexdigit()));
        let bundle = format!("{pem}{pem}");
        assert_eq!(certificate_facts(&bundle), Some((serial, sha256)));
    }

    #[test]
    fn no_certificate_no_facts() {
        assert_eq!(certificate_facts(""), None);
        assert_eq!(
            certificate_facts("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
            None
        );
    }
}
