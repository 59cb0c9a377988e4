//! The provisioner YAML: every key of the Go provisioner, its defaults, and the
//! validation Go never did.
//!
//! Keys are matched case-insensitively as Go's `encoding/json` does. A value of the
//! wrong type, a broken rule or an unreadable file is a `Problem`; all problems of a
//! file are reported together in one `ConfigError`. Unknown keys are warnings that
//! name the closest known key. This module imports nothing else of the crate: it is
//! the bottom layer that everything else reads.

mod approval;
mod duration;
mod identity_policy;
mod pause;
mod problem;
mod secret;
pub(crate) mod shell_words;
mod validate;
mod yaml_keys;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use approval::ApprovalRules;
pub(crate) use approval::{
    DEFAULT_AHEAD_EXPIRY, DEFAULT_APPROVAL_FACTS, DEFAULT_MAX_PENDING, DEFAULT_PENDING_EXPIRY,
    MAX_APPROVAL_FACTS,
};
pub use duration::{format_duration, parse_duration, DurationError, MAX_DURATION};
pub use identity_policy::IdentityPolicy;
pub use pause::{OperatorPause, Pause};
pub(crate) use problem::{closest, ConfigError, Problem};
pub(crate) use secret::Secret;
pub(crate) use yaml_keys::strip_slashes;

/// The `cert_deny_list` used when the key is absent or empty: client and privileged
/// certificate names that must never be signed for a server.
pub(crate) const DEFAULT_CERT_DENY_LIST: [&str; 4] = [
    r"\.privileged.mcollective$",
    r"\.privileged.choria$",
    r"\.mcollective$",
    r"\.choria$",
];

/// The lifecycle component provisioning-mode servers announce themselves with.
pub(crate) const DEFAULT_LIFECYCLE_COMPONENT: &str = "provision_mode_server";

/// The default `csr_reply_grace`: longer than go-choria takes to make an RSA 2048 key
/// on ordinary hardware, short enough that a pki node's attempt is not much slower
/// (the grace overlaps the helper run).
pub(crate) const DEFAULT_CSR_REPLY_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The default `reply_grace`: a real node answers its requests within this time even
/// in its first, busy boot, so that its reply still contests one someone else sent
/// first. It costs each node that much latency and the fleet no throughput.
pub(crate) const DEFAULT_REPLY_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The default `max_waiting_attempts`: at 68,000 nodes a minute (a 100,000-node fleet
/// at full rate) with the 2 s reply grace about 2,400 attempts are under way at
/// once; twice that leaves room for slow nodes and retries.
pub(crate) const DEFAULT_MAX_WAITING_ATTEMPTS: usize = 5_000;

/// The most `max_waiting_attempts` accepted: each waiting attempt holds a few
/// kilobytes.
pub(crate) const MAX_WAITING_ATTEMPTS: usize = 1_000_000;

/// The default `max_reply_bytes`: nats-server's default `max_payload`, so that no
/// reply a stock broker passes is refused; a site whose nodes' facts are small sets
/// it lower.
pub(crate) const DEFAULT_MAX_REPLY_BYTES: u64 = 1024 * 1024;

/// The default `max_held_bytes`: with the 1 MiB replies a stock broker allows, 64
/// first replies at once, or 2,500 kept inventories of 50 KB; the provisioner's own
/// memory at 100,000 nodes is under 64 MB beside it.
pub(crate) const DEFAULT_MAX_HELD_BYTES: u64 = 128 * 1024 * 1024;

/// The longest `csr_reply_grace` accepted: a twin later than this is past any node's
/// `gencsr` timeout in practice, and a longer wait only delays every node. The same
/// bound holds for `reply_grace`.
pub(crate) const MAX_CSR_REPLY_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// Optional provisioning features (the `features` map).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Features {
    /// Fetch and validate a CSR from the node and hand it to the helper.
    pub pki: bool,
    /// Fetch and verify the node's provisioning JWT (forced on by `ed25519`).
    pub jwt: bool,
    /// Fetch an ed25519 key from the node and issue it a signed server JWT.
    pub ed25519: bool,
    /// Honour the helper's `upgrade` field.
    pub upgrades: bool,
}

/// Log verbosity, from `loglevel` (absent means `info`) or `--debug`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Everything, including every RPC try.
    Debug,
    /// Progress per node (the default).
    Info,
    /// Only what an operator should look at.
    Warn,
    /// Only failures.
    Error,
    /// Only failures that stop the daemon.
    Fatal,
}

impl LogLevel {
    /// Parses `debug`, `info`, `warn` (or `warning`), `error` or `fatal`.
    pub(crate) fn parse(text: &str) -> Option<LogLevel> {
        match text.to_ascii_lowercase().as_str() {
            "debug" => Some(LogLevel::Debug),
            "info" => Some(LogLevel::Info),
            "warn" | "warning" => Some(LogLevel::Warn),
            "error" => Some(LogLevel::Error),
            "fatal" => Some(LogLevel::Fatal),
            _ => None,
        }
    }

    /// The name used in config files and JSON log lines.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
            LogLevel::Fatal => "fatal",
        }
    }
}

/// Where log lines go, from `logfile`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    /// Text lines on standard error (the default when `logfile` is absent).
    Stderr,
    /// Text lines on standard output.
    Stdout,
    /// Nothing is logged.
    Discard,
    /// One JSON object per line, appended to this file.
    File(PathBuf),
}

/// The provisioner configuration, fully defaulted and validated.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file this was read from.
    pub file: PathBuf,
    /// Number of worker threads (absent or 0: the number of CPUs).
    pub workers: usize,
    /// Broadcast discovery period; also half the stale-entry limit.
    pub interval: Duration,
    /// Where logs go.
    pub logfile: LogTarget,
    /// Log verbosity.
    pub loglevel: LogLevel,
    /// The helper command line, split shell-style when run.
    pub helper: String,
    /// How long one helper run may take before it is killed (new key).
    pub helper_timeout: Duration,
    /// How long after a node is sent `gencsr` a second, different reply in its name
    /// still stops the attempt before its certificate is sent (new key; see the
    /// `docs/security.md`).
    pub csr_reply_grace: Duration,
    /// How long after each request before the helper a second, different reply in
    /// the node's name still stops the attempt before anything secret is made or
    /// sent (new key; see the threat model in `docs/security.md`).
    pub reply_grace: Duration,
    /// Attempts under way at once; the workers take no new node from the queue while
    /// this many wait (new key).
    pub max_waiting_attempts: usize,
    /// The largest reply read: a larger one is dropped unread (`max_reply_bytes`).
    pub max_reply_bytes: u64,
    /// The byte budget of unread replies and kept inventories (`max_held_bytes`).
    pub max_held_bytes: u64,
    /// Token sent with every `choria_provision` action.
    pub token: Secret,
    /// Component of the startup events listened to.
    pub lifecycle_component: String,
    /// No TLS to the broker, no request signing.
    pub choria_insecure: bool,
    /// Value of the `site` label on every metric.
    pub site: String,
    /// Port of `/metrics` and `/healthz`; 0 disables the listener.
    pub monitor_port: u16,
    /// Address `/metrics` binds to (new key; absent: all interfaces as Go).
    pub monitor_host: Option<String>,
    /// NATS password of the `provisioner` user, when set.
    pub broker_provisioning_password: Secret,
    /// Name patterns never signed for a server (`/re/` slashes already stripped).
    pub cert_deny_list: Vec<String>,
    /// Identities a site would enrol (`/re/` slashes stripped); empty: any.
    pub identity_allow: Vec<String>,
    /// Identities a site would never enrol (`/re/` slashes stripped).
    pub identity_deny: Vec<String>,
    /// The names allowed to sign peer messages (`/re/` slashes stripped); empty:
    /// this instance's own certificate name, or any provisioner JWT of the issuer.
    pub peer_signers: Vec<String>,
    /// How to verify provisioning JWTs: a file, or a hex ed25519 public key.
    pub jwt_verify_cert: String,
    /// File with the key that signs server JWTs (ed25519 feature).
    pub jwt_signing_key: String,
    /// File with the chain-issuer token (ed25519 feature).
    pub jwt_signing_token: String,
    /// Default lifetime of signed server JWTs.
    pub server_jwt_validity: Duration,
    /// Run active/standby through Choria Streams leader election.
    pub leader_election: bool,
    /// Every instance of this `site` provisions its share of the fleet at once
    /// (new key; refused together with `leader_election`).
    pub active_active: bool,
    /// go-updater repository for `release_update`.
    pub upgrades_repository: String,
    /// Upgrade failures are logged and provisioning continues.
    pub upgrades_optional: bool,
    /// Most nodes upgrading at once (new key; `None`: unlimited, as Go).
    pub upgrades_max_in_flight: Option<usize>,
    /// Where one JSON line per finished attempt is appended (new key; `None`: off).
    pub audit_file: Option<PathBuf>,
    /// `control_socket`: the Unix socket (mode 0600) `pause` and `resume` talk to;
    /// off when unset.
    pub control_socket: Option<PathBuf>,
    /// `pause_file`: where an operator's pause is kept so it holds across a restart;
    /// unset: a pause ends with the process.
    pub pause_file: Option<PathBuf>,
    /// `approval: required`: a new identity waits for an operator's `approve` before
    /// its helper runs (new key; `off` by default).
    pub approval: bool,
    /// `approval_identities`: only identities matching one of these need approval
    /// (`/re/` slashes stripped); empty: every identity does.
    pub approval_identities: Vec<String>,
    /// `approval_preapproved`: identities matching one of these never wait
    /// (`/re/` slashes stripped).
    pub approval_preapproved: Vec<String>,
    /// `approval_file`: where decisions and pending identities are kept; unset:
    /// `approvals.json` beside `pause_file` (see [`Config::approval_state_file`]).
    pub approval_file: Option<PathBuf>,
    /// `approval_max_pending`: the most identities waiting for a decision.
    pub approval_max_pending: usize,
    /// `approval_facts`: the inventory facts (dotted paths) `pending` shows.
    pub approval_facts: Vec<String>,
    /// `approval_pending_expiry`: a pending identity not seen for this long is
    /// forgotten.
    pub approval_pending_expiry: Duration,
    /// `approval_ahead_expiry`: an approval given for an identity never seen is
    /// forgotten after this long unless the node came.
    pub approval_ahead_expiry: Duration,
    /// `approval_policy`: the site's program that decides before a person does
    /// (split shell-style, as `helper`); empty: none.
    pub approval_policy: String,
    /// How long a stopping daemon waits for in-flight nodes (new key).
    pub shutdown_timeout: Duration,
    /// Optional features.
    pub features: Features,
}

/// A configuration that loaded, with the warnings found on the way.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The usable configuration.
    pub config: Config,
    /// Unknown keys, ignored keys and other things worth a look.
    pub warnings: Vec<Problem>,
}

impl Config {
    /// The configuration an empty file produces, before validation.
    pub(crate) fn defaults(file: &Path) -> Config {
        Config {
            file: file.to_path_buf(),
            workers: default_workers(),
            interval: Duration::from_secs(60),
            logfile: LogTarget::Stderr,
            loglevel: LogLevel::Info,
            helper: String::new(),
            helper_timeout: Duration::from_secs(10),
            csr_reply_grace: DEFAULT_CSR_REPLY_GRACE,
            reply_grace: DEFAULT_REPLY_GRACE,
            max_waiting_attempts: DEFAULT_MAX_WAITING_ATTEMPTS,
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
            max_held_bytes: DEFAULT_MAX_HELD_BYTES,
            token: Secret::default(),
            lifecycle_component: DEFAULT_LIFECYCLE_COMPONENT.into(),
            choria_insecure: false,
            site: String::new(),
            monitor_port: 0,
            monitor_host: None,
            broker_provisioning_password: Secret::default(),
            cert_deny_list: DEFAULT_CERT_DENY_LIST
                .iter()
                .map(|s| s.to_string())
                .collect(),
            identity_allow: Vec::new(),
            identity_deny: Vec::new(),
            peer_signers: Vec::new(),
            jwt_verify_cert: String::new(),
            jwt_signing_key: String::new(),
            jwt_signing_token: String::new(),
            server_jwt_validity: Duration::from_secs(365 * 24 * 3600),
            leader_election: false,
            active_active: false,
            upgrades_repository: String::new(),
            upgrades_optional: false,
            upgrades_max_in_flight: None,
            audit_file: None,
            control_socket: None,
            pause_file: None,
            approval: false,
            approval_identities: Vec::new(),
            approval_preapproved: Vec::new(),
            approval_file: None,
            approval_max_pending: DEFAULT_MAX_PENDING,
            approval_pending_expiry: DEFAULT_PENDING_EXPIRY,
            approval_ahead_expiry: DEFAULT_AHEAD_EXPIRY,
            approval_policy: String::new(),
            approval_facts: DEFAULT_APPROVAL_FACTS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            shutdown_timeout: Duration::from_secs(10),
            features: Features::default(),
        }
    }

    /// Reads, defaults and validates the provisioner YAML at `path`.
    pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ConfigError::single(
                    path,
                    Problem::new("(file)", "not found"),
                ))
            }
            Err(e) => {
                return Err(ConfigError::single(
                    path,
                    Problem::new("(file)", format!("cannot be read: {e}")),
                ))
            }
        };
        Config::from_yaml(path, &bytes)
    }

    /// Defaults and validates YAML text as if it had been read from `path`.
    pub(crate) fn from_yaml(path: &Path, bytes: &[u8]) -> Result<Loaded, ConfigError> {
        let mut config = Config::defaults(path);
        let mut problems = Vec::new();
        let mut warnings = Vec::new();
        yaml_keys::apply_yaml(&mut config, bytes, &mut problems, &mut warnings);
        if problems.iter().all(|p| p.key != "(file)") {
            validate::validate(&config, &mut problems, &mut warnings);
        }
        if problems.is_empty() {
            Ok(Loaded { config, warnings })
        } else {
            Err(ConfigError {
                file: path.to_path_buf(),
                problems,
            })
        }
    }

    /// The effective configuration as YAML, secrets shown as `***`, for `check`.
    pub(crate) fn effective_yaml(&self) -> String {
        yaml_keys::effective_yaml(self)
    }

    /// Where approvals are kept: `approval_file`, else `approvals.json` in
    /// `pause_file`'s directory; `None` when neither is set.
    pub fn approval_state_file(&self) -> Option<PathBuf> {
        self.approval_file.clone().or_else(|| {
            self.pause_file.as_ref().map(|p| {
                p.parent()
                    .unwrap_or_else(|| Path::new("."))
                    .join("approvals.json")
            })
        })
    }

    /// The discovery stale limit: entries waiting longer than this are given up.
    pub(crate) fn stale_after(&self) -> Duration {
        self.interval * 2
    }
}

/// Number of CPUs, the default for `workers`.
fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests;
