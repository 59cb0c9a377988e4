//! Rules that span keys or touch the file system, run once at load so that an
//! operator sees every problem before the daemon starts instead of one node at a
//! time at run time (as the Go provisioner did).

use std::path::Path;
use std::time::Duration;

use super::shell_words::{find_program, split};
use super::yaml_keys::strip_slashes;
use super::{Config, LogTarget, Problem};

/// Checks `c` and appends every problem and warning found.
pub(crate) fn validate(c: &Config, problems: &mut Vec<Problem>, warnings: &mut Vec<Problem>) {
    lifecycle_component(c, problems);
    features(c, problems, warnings);
    interval(c, problems);
    helper(c, problems);
    approval_policy(c, problems);
    timeouts(c, problems);
    deny_list(c, problems);
    jwt_files(c, problems, warnings);
    upgrades(c, problems);
    monitor(c, problems);
    logfile(c, problems);
    active_active(c, problems);
    audit_file(c, problems, warnings);
    control_files(c, problems, warnings);
    approval(c, problems, warnings);
}

/// `approval: required` needs a place to keep decisions (they must survive a
/// restart) and a control socket to take them; its patterns compile, its facts are
/// a short list of dotted names.
fn approval(c: &Config, problems: &mut Vec<Problem>, warnings: &mut Vec<Problem>) {
    patterns("approval_identities", &c.approval_identities, problems);
    patterns("approval_preapproved", &c.approval_preapproved, problems);
    if c.approval_facts.len() > super::MAX_APPROVAL_FACTS {
        problems.push(Problem::new(
            "approval_facts",
            format!(
                "names {} facts; at most {} are shown",
                c.approval_facts.len(),
                super::MAX_APPROVAL_FACTS
            ),
        ));
    }
    for (i, fact) in c.approval_facts.iter().enumerate() {
        if !super::approval::valid_fact_name(fact) {
            problems.push(Problem::with_value(
                format!("approval_facts[{i}]"),
                fact,
                "must be a dotted name of letters, digits, `_` and `-`, at most 64 characters",
            ));
        }
    }
    if let Some(path) = &c.approval_file {
        if !names_a_directory("approval_file", path, "name the file", problems) {
            directory_exists("approval_file", path, problems);
        }
        if Some(path) == c.pause_file.as_ref() || Some(path) == c.control_socket.as_ref() {
            problems.push(Problem::new(
                "approval_file",
                "is the pause_file or the control_socket; approvals need a file of their own",
            ));
        }
    }
    if !c.approval {
        let set = !c.approval_identities.is_empty()
            || !c.approval_preapproved.is_empty()
            || c.approval_file.is_some();
        if set {
            warnings.push(Problem::new(
                "approval",
                "is off: approval_identities, approval_preapproved and approval_file are not used",
            ));
        }
        return;
    }
    if c.approval_state_file().is_none() {
        problems.push(Problem::new(
            "approval",
            "is required but neither approval_file nor pause_file is set: decisions and pending identities must survive a restart",
        ));
    }
    if c.control_socket.is_none() {
        problems.push(Problem::new(
            "approval",
            "is required but no control_socket is set: operators approve through it",
        ));
    }
}

/// Active-active shares the fleet among the instances of one `site`, which names
/// their heartbeat subject (`provisioning.provisioner.peers.<site>`): one token.
fn active_active(c: &Config, problems: &mut Vec<Problem>) {
    if !c.active_active {
        return;
    }
    if c.leader_election {
        problems.push(Problem::new(
            "active_active",
            "cannot be used with leader_election: with active_active every instance \
             provisions its share, with leader_election one instance provisions and the \
             others wait; choose one",
        ));
    }
    if c.site.is_empty() {
        problems.push(Problem::new(
            "site",
            "is required with active_active: the instances of one site share its fleet",
        ));
    } else if c.site.len() > 64
        || !c
            .site
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        problems.push(Problem::with_value(
            "site",
            &c.site,
            "must be at most 64 letters, digits, '-' or '_' with active_active \
             (it names the instances' heartbeat subject)",
        ));
    }
}

fn lifecycle_component(c: &Config, problems: &mut Vec<Problem>) {
    if c.lifecycle_component.contains(['.', '>', '*']) {
        problems.push(Problem::with_value(
            "lifecycle_component",
            &c.lifecycle_component,
            "invalid lifecycle component: it must not contain '.', '>' or '*'",
        ));
    }
}

fn features(c: &Config, problems: &mut Vec<Problem>, warnings: &mut Vec<Problem>) {
    if c.features.pki && c.features.ed25519 {
        problems.push(Problem::new(
            "features",
            "can only enable one of pki or ed25519 features",
        ));
    }
    if !c.jwt_signing_token.is_empty() && !c.features.ed25519 {
        warnings.push(Problem::new(
            "jwt_signing_token",
            "is only used with features.ed25519, which is off",
        ));
    }
}

fn interval(c: &Config, problems: &mut Vec<Problem>) {
    if c.interval < Duration::from_secs(60) {
        problems.push(Problem::with_value(
            "interval",
            super::format_duration(c.interval),
            "interval is too small, minimum is 1 minute",
        ));
    }
}

fn helper(c: &Config, problems: &mut Vec<Problem>) {
    runnable(
        "helper",
        &c.helper,
        Some("is required: the command that turns a node's facts into its configuration"),
        problems,
    );
}

/// `approval_policy`, when set, names a program that can be run.
fn approval_policy(c: &Config, problems: &mut Vec<Problem>) {
    runnable("approval_policy", &c.approval_policy, None, problems);
}

/// The command line `value` of `key` splits into words, the first a program that
/// can be run; an empty one is a problem only when `required` says why it is.
fn runnable(key: &str, value: &str, required: Option<&str>, problems: &mut Vec<Problem>) {
    let words = match split(value) {
        Ok(words) => words,
        Err(super::shell_words::SplitError::Empty) => {
            if let Some(why) = required {
                problems.push(Problem::new(key, why));
            }
            return;
        }
        Err(e) => {
            let what = if key == "helper" {
                "helper"
            } else {
                "the policy"
            };
            problems.push(Problem::with_value(
                key,
                value,
                format!("cannot parse {what} command: {e}"),
            ));
            return;
        }
    };
    if let Err(why) = find_program(&words[0]) {
        problems.push(Problem::with_value(
            key,
            value,
            format!("program {} {why}", words[0]),
        ));
    }
}

fn timeouts(c: &Config, problems: &mut Vec<Problem>) {
    for (key, value) in [
        ("helper_timeout", c.helper_timeout),
        ("shutdown_timeout", c.shutdown_timeout),
        ("approval_pending_expiry", c.approval_pending_expiry),
        ("approval_ahead_expiry", c.approval_ahead_expiry),
    ] {
        if value.is_zero() {
            problems.push(Problem::with_value(key, "0s", "must be longer than zero"));
        }
    }
    for (key, value) in [
        ("csr_reply_grace", c.csr_reply_grace),
        ("reply_grace", c.reply_grace),
    ] {
        if value > super::MAX_CSR_REPLY_GRACE {
            problems.push(Problem::with_value(
                key,
                super::format_duration(value),
                format!(
                    "must be at most {}: a longer wait only delays every node",
                    super::format_duration(super::MAX_CSR_REPLY_GRACE)
                ),
            ));
        }
    }
    if c.max_waiting_attempts == 0 || c.max_waiting_attempts > super::MAX_WAITING_ATTEMPTS {
        problems.push(Problem::with_value(
            "max_waiting_attempts",
            c.max_waiting_attempts.to_string(),
            format!(
                "must be from 1 to {}: each waiting attempt holds a few kilobytes",
                super::MAX_WAITING_ATTEMPTS
            ),
        ));
    }
    if !(MIN_REPLY_BYTES..=MAX_REPLY_BYTES).contains(&c.max_reply_bytes) {
        problems.push(Problem::with_value(
            "max_reply_bytes",
            c.max_reply_bytes.to_string(),
            format!(
                "must be from {MIN_REPLY_BYTES} to {MAX_REPLY_BYTES} bytes (a node's inventory reply must fit)"
            ),
        ));
    }
    if c.max_held_bytes < 4 * c.max_reply_bytes || c.max_held_bytes > MAX_HELD_BYTES {
        problems.push(Problem::with_value(
            "max_held_bytes",
            c.max_held_bytes.to_string(),
            format!(
                "must be at least four times max_reply_bytes ({}) and at most {MAX_HELD_BYTES} bytes",
                4 * c.max_reply_bytes
            ),
        ));
    }
    if c.server_jwt_validity.is_zero() {
        problems.push(Problem::with_value(
            "server_jwt_validity",
            "0s",
            "must be longer than zero",
        ));
    }
}

/// The smallest `max_reply_bytes`: a bare inventory reply takes a few KB.
const MIN_REPLY_BYTES: u64 = 16 * 1024;
/// The largest `max_reply_bytes`: nats-server's own largest `max_payload`.
const MAX_REPLY_BYTES: u64 = 64 * 1024 * 1024;
/// The largest `max_held_bytes`.
const MAX_HELD_BYTES: u64 = 64 * 1024 * 1024 * 1024;

fn deny_list(c: &Config, problems: &mut Vec<Problem>) {
    let lists = [
        ("cert_deny_list", &c.cert_deny_list),
        ("identity_allow", &c.identity_allow),
        ("identity_deny", &c.identity_deny),
        ("peer_signers", &c.peer_signers),
    ];
    for (key, list) in lists {
        patterns(key, list, problems);
    }
}

/// Each pattern of `list` (the key `key`) compiles.
fn patterns(key: &str, list: &[String], problems: &mut Vec<Problem>) {
    for (i, pattern) in list.iter().enumerate() {
        if let Err(e) = regex::Regex::new(strip_slashes(pattern)) {
            let first_line = e
                .to_string()
                .lines()
                .last()
                .unwrap_or("")
                .trim()
                .to_string();
            problems.push(Problem::with_value(
                format!("{key}[{i}]"),
                pattern,
                format!("is not a valid regular expression: {first_line}"),
            ));
        }
    }
}

fn jwt_files(c: &Config, problems: &mut Vec<Problem>, warnings: &mut Vec<Problem>) {
    if c.features.jwt {
        verify_cert(c, problems);
    }
    if c.features.ed25519 {
        if c.jwt_signing_key.is_empty() {
            problems.push(Problem::new(
                "jwt_signing_key",
                "is required when features.ed25519 is enabled: the key that signs server JWTs",
            ));
        } else {
            signing_key(&c.jwt_signing_key, problems);
        }
        if !c.jwt_signing_token.is_empty() {
            readable("jwt_signing_token", &c.jwt_signing_token, problems);
        }
    } else if !c.jwt_signing_key.is_empty() {
        warnings.push(Problem::new(
            "jwt_signing_key",
            "is only used with features.ed25519, which is off",
        ));
    }
}

/// `jwt_verify_cert` is a file if one exists by that name, otherwise the hex of an
/// ed25519 public key (Go's rule). A value that looks like a path but names no file is
/// reported here rather than as a hex error per node.
fn verify_cert(c: &Config, problems: &mut Vec<Problem>) {
    let value = c.jwt_verify_cert.as_str();
    if value.is_empty() {
        problems.push(Problem::new(
            "jwt_verify_cert",
            "is required when features.jwt (or ed25519) is enabled: no JWT verification certificate configured",
        ));
        return;
    }
    let path = Path::new(value);
    if path.exists() {
        readable("jwt_verify_cert", value, problems);
    } else if value.contains('/') {
        problems.push(Problem::with_value(
            "jwt_verify_cert",
            value,
            "names a file that does not exist",
        ));
    } else if !is_hex_of_len(value, 32) {
        problems.push(Problem::with_value(
            "jwt_verify_cert",
            value,
            "is neither an existing file nor a hex ed25519 public key (64 hex characters)",
        ));
    }
}

/// The signing key must be a hex ed25519 seed or an RSA private key PEM; its full
/// decoding is checked again by the token code before the daemon starts.
fn signing_key(path: &str, problems: &mut Vec<Problem>) {
    let Some(text) = read_text("jwt_signing_key", path, problems) else {
        return;
    };
    let trimmed = text.trim();
    let pem = trimmed.starts_with("-----BEGIN RSA PRIVATE KEY-----")
        || trimmed.starts_with("-----BEGIN PRIVATE KEY-----");
    if !pem && !is_hex_of_len(trimmed, 32) {
        problems.push(Problem::with_value(
            "jwt_signing_key",
            path,
            "is neither a hex ed25519 seed (64 hex characters) nor an RSA private key PEM",
        ));
    }
}

fn upgrades(c: &Config, problems: &mut Vec<Problem>) {
    if c.features.upgrades && c.upgrades_repository.is_empty() && !c.upgrades_optional {
        problems.push(Problem::new(
            "upgrades_repository",
            "is required when features.upgrades is enabled (or set upgrades_optional: true)",
        ));
    }
}

fn monitor(c: &Config, problems: &mut Vec<Problem>) {
    if let Some(host) = &c.monitor_host {
        if host.parse::<std::net::IpAddr>().is_err() {
            problems.push(Problem::with_value(
                "monitor_host",
                host,
                "must be an IP address to bind to, such as 127.0.0.1 or ::",
            ));
        }
    }
}

fn logfile(c: &Config, problems: &mut Vec<Problem>) {
    if let LogTarget::File(path) = &c.logfile {
        directory_exists("logfile", path, problems);
    }
}

fn audit_file(c: &Config, problems: &mut Vec<Problem>, warnings: &mut Vec<Problem>) {
    if let Some(path) = &c.audit_file {
        let hint = "name the file the audit lines are appended to";
        if !names_a_directory("audit_file", path, hint, problems) {
            directory_exists("audit_file", path, problems);
        }
        if c.logfile == LogTarget::File(path.clone()) {
            problems.push(Problem::with_value(
                "audit_file",
                path.display().to_string(),
                "is the logfile; the audit trail needs a file of its own",
            ));
        }
    }
    if c.upgrades_max_in_flight.is_some() && !c.features.upgrades {
        warnings.push(Problem::new(
            "upgrades_max_in_flight",
            "is only used with features.upgrades, which is off",
        ));
    }
}

/// The control socket and the pause file are created in directories that exist,
/// and are not the same file.
fn control_files(c: &Config, problems: &mut Vec<Problem>, warnings: &mut Vec<Problem>) {
    for (key, path) in [
        ("control_socket", &c.control_socket),
        ("pause_file", &c.pause_file),
    ] {
        let Some(path) = path else { continue };
        if names_a_directory(key, path, "name the file", problems) {
            continue;
        }
        if key == "control_socket" {
            // Under /run, made by systemd's RuntimeDirectory= as the service starts:
            // absent when `check` runs outside it.
            let mut missing = Vec::new();
            directory_exists(key, path, &mut missing);
            warnings.extend(missing.into_iter().map(|p| {
                Problem::with_value(
                    key,
                    path.display().to_string(),
                    format!(
                        "{}; the service's RuntimeDirectory= makes it at start, else run fails",
                        p.message
                    ),
                )
            }));
        } else {
            directory_exists(key, path, problems);
        }
    }
    if c.control_socket.is_some() && c.control_socket == c.pause_file {
        problems.push(Problem::new(
            "pause_file",
            "is the control_socket; the pause needs a file of its own",
        ));
    }
}

/// A file of `key` must not be a directory: `true`, with a problem that says
/// `is a directory; {hint}`, when it is.
fn names_a_directory(key: &str, path: &Path, hint: &str, problems: &mut Vec<Problem>) -> bool {
    let is_dir = path.is_dir();
    if is_dir {
        problems.push(Problem::with_value(
            key,
            path.display().to_string(),
            format!("is a directory; {hint}"),
        ));
    }
    is_dir
}

/// The directory a file of `key` is created in must exist.
fn directory_exists(key: &str, path: &Path, problems: &mut Vec<Problem>) {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        problems.push(Problem::with_value(
            key,
            path.display().to_string(),
            format!("directory {} does not exist", dir.display()),
        ));
    }
}

fn read_text(key: &str, path: &str, problems: &mut Vec<Problem>) -> Option<String> {
    match std::fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => Some(text),
            Err(_) => {
                problems.push(Problem::with_value(key, path, "is not a text file"));
                None
            }
        },
        Err(e) => {
            problems.push(Problem::with_value(
                key,
                path,
                format!("cannot be read: {e}"),
            ));
            None
        }
    }
}

fn readable(key: &str, path: &str, problems: &mut Vec<Problem>) {
    let _ = read_text(key, path, problems);
}

fn is_hex_of_len(text: &str, bytes: usize) -> bool {
    text.len() == bytes * 2 && text.bytes().all(|b| b.is_ascii_hexdigit())
}
