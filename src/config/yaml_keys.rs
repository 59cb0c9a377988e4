//! The key table: how each YAML key is read into [`Config`], and how the effective
//! configuration is printed back.
//!
//! Go decodes the YAML through JSON into a struct, so keys match case-insensitively,
//! unknown keys are dropped and a value of the wrong type is fatal. We keep the
//! first two behaviours (with a warning for unknown keys) and turn the third into a
//! [`Problem`] that says what type was expected.

use serde_yaml::{Mapping, Value};

use super::{
    closest, format_duration, parse_duration, Config, LogLevel, LogTarget, Problem, Secret,
};

/// Top-level keys, in the order `check` prints them.
pub(crate) const TOP_KEYS: &[&str] = &[
    "workers",
    "interval",
    "logfile",
    "loglevel",
    "helper",
    "helper_timeout",
    "csr_reply_grace",
    "reply_grace",
    "max_reply_bytes",
    "max_held_bytes",
    "max_waiting_attempts",
    "token",
    "lifecycle_component",
    "choria_insecure",
    "site",
    "monitor_port",
    "monitor_host",
    "broker_port",
    "broker_provisioning_password",
    "cert_deny_list",
    "identity_allow",
    "identity_deny",
    "peer_signers",
    "jwt_verify_cert",
    "jwt_signing_key",
    "jwt_signing_token",
    "server_jwt_validity",
    "rego_policy",
    "leader_election",
    "active_active",
    "upgrades_repository",
    "upgrades_optional",
    "upgrades_max_in_flight",
    "audit_file",
    "control_socket",
    "pause_file",
    "approval",
    "approval_identities",
    "approval_preapproved",
    "approval_file",
    "approval_max_pending",
    "approval_facts",
    "approval_pending_expiry",
    "approval_ahead_expiry",
    "approval_policy",
    "shutdown_timeout",
    "features",
];

/// Keys of the `features` map.
pub(crate) const FEATURE_KEYS: &[&str] = &["pki", "jwt", "ed25519", "upgrades"];

/// Keys Go accepts and ignores; setting them earns a warning.
const IGNORED_KEYS: &[&str] = &["broker_port", "rego_policy"];

/// Parses `bytes` as YAML and applies every key to `config`.
pub(crate) fn apply_yaml(
    config: &mut Config,
    bytes: &[u8],
    problems: &mut Vec<Problem>,
    warnings: &mut Vec<Problem>,
) {
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            problems.push(Problem::new(
                "(file)",
                format!(
                    "is not UTF-8 text (invalid byte at offset {})",
                    e.valid_up_to()
                ),
            ));
            return;
        }
    };
    let root: Value = match serde_yaml::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            problems.push(Problem::new("(file)", format!("is not valid YAML: {e}")));
            return;
        }
    };
    let map = match root {
        Value::Mapping(map) => map,
        Value::Null => Mapping::new(),
        other => {
            problems.push(Problem::new(
                "(file)",
                format!(
                    "must be a map of keys to values, but the document is {}",
                    describe(&other)
                ),
            ));
            return;
        }
    };
    for (key, value) in fold_keys(&map, "", TOP_KEYS, problems, warnings) {
        apply_top(config, &key, value, problems, warnings);
    }
    if config.features.ed25519 {
        config.features.jwt = true;
    }
}

/// Lower-cases the keys of `map`, reports non-string, unknown and repeated keys, and
/// returns the known ones with their values in file order.
fn fold_keys<'a>(
    map: &'a Mapping,
    prefix: &str,
    known: &[&str],
    problems: &mut Vec<Problem>,
    warnings: &mut Vec<Problem>,
) -> Vec<(String, &'a Value)> {
    let mut out: Vec<(String, &Value)> = Vec::new();
    for (key, value) in map {
        let Some(name) = key.as_str() else {
            problems.push(Problem::new(
                format!("{prefix}{}", scalar_text(key)),
                "keys must be strings",
            ));
            continue;
        };
        let lower = name.to_ascii_lowercase();
        if !known.contains(&lower.as_str()) {
            let hint = match closest(&lower, known.iter().copied()) {
                Some(k) => format!("unknown key, ignored; did you mean `{prefix}{k}`?"),
                None => "unknown key, ignored".to_string(),
            };
            warnings.push(Problem::new(format!("{prefix}{name}"), hint));
            continue;
        }
        if let Some(pos) = out.iter().position(|(k, _)| *k == lower) {
            warnings.push(Problem::new(
                format!("{prefix}{name}"),
                "is set more than once (keys are case-insensitive); the last one wins",
            ));
            out.remove(pos);
        }
        out.push((lower, value));
    }
    out
}

fn apply_top(
    c: &mut Config,
    key: &str,
    v: &Value,
    problems: &mut Vec<Problem>,
    warnings: &mut Vec<Problem>,
) {
    let result =
        match key {
            "workers" => int(key, v).and_then(workers).map(|n| {
                if let Some(n) = n {
                    c.workers = n
                }
            }),
            "interval" => duration(key, v).map(|d| c.interval = d.unwrap_or(c.interval)),
            "logfile" => string(key, v).map(|s| c.logfile = log_target(&s)),
            "loglevel" => string(key, v).and_then(|s| log_level(key, &s).map(|l| c.loglevel = l)),
            "helper" => string(key, v).map(|s| c.helper = s),
            "helper_timeout" => {
                duration(key, v).map(|d| c.helper_timeout = d.unwrap_or(c.helper_timeout))
            }
            "csr_reply_grace" => {
                duration(key, v).map(|d| c.csr_reply_grace = d.unwrap_or(c.csr_reply_grace))
            }
            "reply_grace" => duration(key, v).map(|d| c.reply_grace = d.unwrap_or(c.reply_grace)),
            "max_reply_bytes" => bytes(key, v).map(|n| {
                if let Some(n) = n {
                    c.max_reply_bytes = n;
                }
            }),
            "max_held_bytes" => bytes(key, v).map(|n| {
                if let Some(n) = n {
                    c.max_held_bytes = n;
                }
            }),
            "max_waiting_attempts" => int(key, v).map(|n| {
                if let Some(n) = n {
                    c.max_waiting_attempts = usize::try_from(n).unwrap_or(0);
                }
            }),
            "token" => secret(key, v).map(|s| c.token = s),
            "lifecycle_component" => string(key, v).map(|s| {
                if !s.is_empty() {
                    c.lifecycle_component = s
                }
            }),
            "choria_insecure" => boolean(key, v).map(|b| c.choria_insecure = b),
            "site" => string(key, v).map(|s| c.site = s),
            "monitor_port" => port(key, v).map(|p| c.monitor_port = p),
            "monitor_host" => {
                string(key, v).map(|s| c.monitor_host = Some(s).filter(|s| !s.is_empty()))
            }
            "broker_provisioning_password" => {
                secret(key, v).map(|s| c.broker_provisioning_password = s)
            }
            "cert_deny_list" => string_list(key, v).map(|list| {
                if !list.is_empty() {
                    c.cert_deny_list = list.iter().map(|p| strip_slashes(p).to_string()).collect()
                }
            }),
            "identity_allow" => string_list(key, v).map(|list| {
                c.identity_allow = list.iter().map(|p| strip_slashes(p).to_string()).collect()
            }),
            "identity_deny" => string_list(key, v).map(|list| {
                c.identity_deny = list.iter().map(|p| strip_slashes(p).to_string()).collect()
            }),
            "peer_signers" => string_list(key, v).map(|list| {
                c.peer_signers = list.iter().map(|p| strip_slashes(p).to_string()).collect()
            }),
            "jwt_verify_cert" => string(key, v).map(|s| c.jwt_verify_cert = s),
            "jwt_signing_key" => string(key, v).map(|s| c.jwt_signing_key = s),
            "jwt_signing_token" => string(key, v).map(|s| c.jwt_signing_token = s),
            "server_jwt_validity" => {
                duration(key, v).map(|d| c.server_jwt_validity = d.unwrap_or(c.server_jwt_validity))
            }
            "leader_election" => boolean(key, v).map(|b| c.leader_election = b),
            "active_active" => boolean(key, v).map(|b| c.active_active = b),
            "upgrades_repository" => string(key, v).map(|s| c.upgrades_repository = s),
            "upgrades_optional" => boolean(key, v).map(|b| c.upgrades_optional = b),
            "upgrades_max_in_flight" => int(key, v)
                .and_then(max_in_flight)
                .map(|n| c.upgrades_max_in_flight = n),
            "audit_file" => string(key, v)
                .map(|s| c.audit_file = Some(s).filter(|s| !s.is_empty()).map(Into::into)),
            "control_socket" => string(key, v)
                .map(|s| c.control_socket = Some(s).filter(|s| !s.is_empty()).map(Into::into)),
            "pause_file" => string(key, v)
                .map(|s| c.pause_file = Some(s).filter(|s| !s.is_empty()).map(Into::into)),
            "approval" => string(key, v).and_then(|s| match s.to_ascii_lowercase().as_str() {
                "required" => {
                    c.approval = true;
                    Ok(())
                }
                "" | "off" => {
                    c.approval = false;
                    Ok(())
                }
                _ => Err(Problem::with_value(key, s, "must be `required` or `off`")),
            }),
            "approval_identities" => string_list(key, v).map(|list| {
                c.approval_identities = list.iter().map(|p| strip_slashes(p).to_string()).collect()
            }),
            "approval_preapproved" => string_list(key, v).map(|list| {
                c.approval_preapproved = list.iter().map(|p| strip_slashes(p).to_string()).collect()
            }),
            "approval_file" => string(key, v)
                .map(|s| c.approval_file = Some(s).filter(|s| !s.is_empty()).map(Into::into)),
            "approval_max_pending" => int(key, v).and_then(max_pending).map(|n| {
                if let Some(n) = n {
                    c.approval_max_pending = n;
                }
            }),
            "approval_facts" => string_list(key, v).map(|list| c.approval_facts = list),
            "approval_pending_expiry" => duration(key, v)
                .map(|d| c.approval_pending_expiry = d.unwrap_or(c.approval_pending_expiry)),
            "approval_ahead_expiry" => duration(key, v)
                .map(|d| c.approval_ahead_expiry = d.unwrap_or(c.approval_ahead_expiry)),
            "approval_policy" => string(key, v).map(|s| c.approval_policy = s),
            "shutdown_timeout" => {
                duration(key, v).map(|d| c.shutdown_timeout = d.unwrap_or(c.shutdown_timeout))
            }
            "features" => {
                apply_features(c, v, problems, warnings);
                Ok(())
            }
            ignored if IGNORED_KEYS.contains(&ignored) => {
                warnings.push(Problem::new(
                    key,
                    "is accepted for compatibility and ignored",
                ));
                Ok(())
            }
            _ => unreachable!("fold_keys only returns known keys"),
        };
    if let Err(problem) = result {
        problems.push(problem);
    }
}

fn apply_features(
    c: &mut Config,
    v: &Value,
    problems: &mut Vec<Problem>,
    warnings: &mut Vec<Problem>,
) {
    let map = match v {
        Value::Mapping(map) => map,
        Value::Null => return,
        other => {
            problems.push(Problem::new(
                "features",
                format!(
                    "expected a map such as `{{jwt: true}}`, got {}",
                    describe(other)
                ),
            ));
            return;
        }
    };
    for (key, value) in fold_keys(map, "features.", FEATURE_KEYS, problems, warnings) {
        let full = format!("features.{key}");
        match boolean(&full, value) {
            Ok(b) => match key.as_str() {
                "pki" => c.features.pki = b,
                "jwt" => c.features.jwt = b,
                "ed25519" => c.features.ed25519 = b,
                "upgrades" => c.features.upgrades = b,
                _ => unreachable!("fold_keys only returns known keys"),
            },
            Err(p) => problems.push(p),
        }
    }
}

/// A count where absent or 0 means the key's default (`None`): negative is refused
/// with `negative`, and with `most`, more than its number with its message.
fn count(
    key: &str,
    n: Option<i64>,
    negative: &str,
    most: Option<(i64, &str)>,
) -> Result<Option<usize>, Problem> {
    match (n, most) {
        (None | Some(0), _) => Ok(None),
        (Some(n), _) if n < 0 => Err(Problem::with_value(key, n.to_string(), negative)),
        (Some(n), Some((most, why))) if n > most => {
            Err(Problem::with_value(key, n.to_string(), why))
        }
        (Some(n), _) => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
    }
}

/// `workers`: negative is refused (Go silently starts no worker at all), 0 means one
/// per CPU, and more than 4,096 threads is refused as a likely typo.
fn workers(n: Option<i64>) -> Result<Option<usize>, Problem> {
    count(
        "workers",
        n,
        "must not be negative (Go would start no worker and provision nothing); use 0 for one per CPU",
        Some((4096, "is more than 4096 worker threads; each holds one node at a time, a few hundred is plenty")),
    )
}

/// `upgrades_max_in_flight`: absent or 0 is unlimited (as Go), negative is refused.
fn max_in_flight(n: Option<i64>) -> Result<Option<usize>, Problem> {
    count(
        "upgrades_max_in_flight",
        n,
        "must not be negative; use 0 (or leave it out) for no limit",
        None,
    )
}

/// `approval_max_pending`: absent or 0 is the default; at most 100,000.
fn max_pending(n: Option<i64>) -> Result<Option<usize>, Problem> {
    count(
        "approval_max_pending",
        n,
        "must not be negative; leave it out for the default of 10000",
        Some((
            100_000,
            "is more than 100000 identities waiting for a person's decision",
        )),
    )
}

/// `/re/` is accepted for a pattern, as in Go: a pattern matching `^/.+/$` has every
/// leading and trailing `/` stripped.
pub(crate) fn strip_slashes(pattern: &str) -> &str {
    if pattern.len() >= 3 && pattern.starts_with('/') && pattern.ends_with('/') {
        pattern.trim_matches('/')
    } else {
        pattern
    }
}

fn log_target(text: &str) -> LogTarget {
    match text {
        "" | "stderr" => LogTarget::Stderr,
        "stdout" => LogTarget::Stdout,
        "discard" => LogTarget::Discard,
        path => LogTarget::File(path.into()),
    }
}

fn log_level(key: &str, text: &str) -> Result<LogLevel, Problem> {
    if text.is_empty() {
        return Ok(LogLevel::Info);
    }
    LogLevel::parse(text).ok_or_else(|| {
        Problem::with_value(key, text, "must be one of debug, info, warn, error, fatal")
    })
}

/// A short description of a YAML value's type for error messages.
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "nothing (null)".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {}", crate::untrusted::quoted(s)),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a map".into(),
        Value::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => describe(other),
    }
}

fn wrong_type(key: &str, want: &str, v: &Value) -> Problem {
    let hint = match v {
        Value::Number(_) | Value::Bool(_) if want == "a string" => {
            format!(" (quote it: \"{}\")", scalar_text(v))
        }
        _ => String::new(),
    };
    Problem::new(key, format!("expected {want}, got {}{hint}", describe(v)))
}

fn string(key: &str, v: &Value) -> Result<String, Problem> {
    match v {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        other => Err(wrong_type(key, "a string", other)),
    }
}

fn secret(key: &str, v: &Value) -> Result<Secret, Problem> {
    match v {
        Value::Null => Ok(Secret::default()),
        Value::String(s) => Ok(Secret::new(s.clone())),
        // Never echo a secret, not even a mistyped one.
        Value::Number(_) | Value::Bool(_) => Err(Problem::new(
            key,
            "expected a string, got a number or boolean (quote the value)",
        )),
        other => Err(wrong_type(key, "a string", other)),
    }
}

fn boolean(key: &str, v: &Value) -> Result<bool, Problem> {
    match v {
        Value::Null => Ok(false),
        Value::Bool(b) => Ok(*b),
        // YAML 1.1 (Go's yaml.v2) reads these words as booleans; so do we.
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "yes" | "on" | "true" => Ok(true),
            "no" | "off" | "false" => Ok(false),
            _ => Err(wrong_type(key, "true or false", v)),
        },
        other => Err(wrong_type(key, "true or false", other)),
    }
}

/// A size: a whole number of bytes, or a string of one with a unit (`B`, `KiB`,
/// `MiB`, `GiB`, or `KB`, `MB`, `GB` as powers of ten), e.g. `128MiB`.
fn bytes(key: &str, v: &Value) -> Result<Option<u64>, Problem> {
    let expected = "a size in bytes, such as 1048576 or \"1MiB\"";
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| wrong_type(key, expected, v)),
        Value::String(s) => {
            let s = s.trim();
            let digits = s.bytes().take_while(u8::is_ascii_digit).count();
            let (number, unit) = s.split_at(digits);
            let scale: u64 = match unit.trim() {
                "" | "B" => 1,
                "KiB" => 1 << 10,
                "MiB" => 1 << 20,
                "GiB" => 1 << 30,
                "KB" => 1_000,
                "MB" => 1_000_000,
                "GB" => 1_000_000_000,
                _ => return Err(wrong_type(key, expected, v)),
            };
            number
                .parse::<u64>()
                .ok()
                .and_then(|n| n.checked_mul(scale))
                .map(Some)
                .ok_or_else(|| wrong_type(key, expected, v))
        }
        other => Err(wrong_type(key, expected, other)),
    }
}

fn int(key: &str, v: &Value) -> Result<Option<i64>, Problem> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| wrong_type(key, "a whole number", v)),
        other => Err(wrong_type(key, "a whole number", other)),
    }
}

fn port(key: &str, v: &Value) -> Result<u16, Problem> {
    match int(key, v)? {
        None => Ok(0),
        Some(n) => u16::try_from(n).map_err(|_| {
            Problem::with_value(key, n.to_string(), "must be a TCP port between 0 and 65535")
        }),
    }
}

fn duration(key: &str, v: &Value) -> Result<Option<std::time::Duration>, Problem> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) if s.is_empty() => Ok(None),
        Value::String(s) => parse_duration(s)
            .map(Some)
            .map_err(|e| Problem::with_value(key, s.clone(), e.to_string())),
        other => Err(Problem::new(
            key,
            format!(
                "expected a duration string such as \"1m\", \"1h30m\" or \"1y\", got {}",
                describe(other)
            ),
        )),
    }
}

fn string_list(key: &str, v: &Value) -> Result<Vec<String>, Problem> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Sequence(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| string(&format!("{key}[{i}]"), item))
            .collect(),
        other => Err(wrong_type(key, "a list of strings", other)),
    }
}

/// The effective configuration as YAML, with secrets as `***`.
pub(crate) fn effective_yaml(c: &Config) -> String {
    let mut m = Mapping::new();
    let mut put = |k: &str, v: Value| {
        m.insert(Value::String(k.into()), v);
    };
    let s = |text: &str| Value::String(text.to_string());
    let secret = |v: &Secret| Value::String(v.to_string());
    put("workers", Value::Number(c.workers.into()));
    put("interval", s(&format_duration(c.interval)));
    put(
        "logfile",
        s(&match &c.logfile {
            LogTarget::Stderr => "stderr".to_string(),
            LogTarget::Stdout => "stdout".to_string(),
            LogTarget::Discard => "discard".to_string(),
            LogTarget::File(p) => p.display().to_string(),
        }),
    );
    put("loglevel", s(c.loglevel.as_str()));
    put("helper", s(&c.helper));
    put("helper_timeout", s(&format_duration(c.helper_timeout)));
    put("csr_reply_grace", s(&format_duration(c.csr_reply_grace)));
    put("reply_grace", s(&format_duration(c.reply_grace)));
    put(
        "max_waiting_attempts",
        Value::Number(c.max_waiting_attempts.into()),
    );
    put("max_reply_bytes", Value::Number(c.max_reply_bytes.into()));
    put("max_held_bytes", Value::Number(c.max_held_bytes.into()));
    put("token", secret(&c.token));
    put("lifecycle_component", s(&c.lifecycle_component));
    put("choria_insecure", Value::Bool(c.choria_insecure));
    put("site", s(&c.site));
    put("monitor_port", Value::Number(c.monitor_port.into()));
    put(
        "monitor_host",
        s(c.monitor_host.as_deref().unwrap_or("0.0.0.0")),
    );
    put(
        "broker_provisioning_password",
        secret(&c.broker_provisioning_password),
    );
    put(
        "cert_deny_list",
        Value::Sequence(c.cert_deny_list.iter().map(|p| s(p)).collect()),
    );
    put(
        "identity_allow",
        Value::Sequence(c.identity_allow.iter().map(|p| s(p)).collect()),
    );
    put(
        "identity_deny",
        Value::Sequence(c.identity_deny.iter().map(|p| s(p)).collect()),
    );
    put(
        "peer_signers",
        Value::Sequence(c.peer_signers.iter().map(|p| s(p)).collect()),
    );
    put("jwt_verify_cert", s(&c.jwt_verify_cert));
    put("jwt_signing_key", s(&c.jwt_signing_key));
    put("jwt_signing_token", s(&c.jwt_signing_token));
    put(
        "server_jwt_validity",
        s(&format_duration(c.server_jwt_validity)),
    );
    put("leader_election", Value::Bool(c.leader_election));
    put("active_active", Value::Bool(c.active_active));
    put("upgrades_repository", s(&c.upgrades_repository));
    put("upgrades_optional", Value::Bool(c.upgrades_optional));
    put(
        "upgrades_max_in_flight",
        Value::Number(c.upgrades_max_in_flight.unwrap_or(0).into()),
    );
    put(
        "audit_file",
        s(&c.audit_file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()),
    );
    for (key, path) in [
        ("control_socket", &c.control_socket),
        ("pause_file", &c.pause_file),
    ] {
        put(
            key,
            s(&path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()),
        );
    }
    put("approval", s(if c.approval { "required" } else { "off" }));
    for (key, list) in [
        ("approval_identities", &c.approval_identities),
        ("approval_preapproved", &c.approval_preapproved),
    ] {
        put(key, Value::Sequence(list.iter().map(|p| s(p)).collect()));
    }
    put(
        "approval_file",
        s(&c.approval_state_file()
            .map(|p| p.display().to_string())
            .unwrap_or_default()),
    );
    put(
        "approval_max_pending",
        Value::Number(c.approval_max_pending.into()),
    );
    put(
        "approval_facts",
        Value::Sequence(c.approval_facts.iter().map(|p| s(p)).collect()),
    );
    put(
        "approval_pending_expiry",
        s(&format_duration(c.approval_pending_expiry)),
    );
    put(
        "approval_ahead_expiry",
        s(&format_duration(c.approval_ahead_expiry)),
    );
    put("approval_policy", s(&c.approval_policy));
    put("shutdown_timeout", s(&format_duration(c.shutdown_timeout)));
    let mut features = Mapping::new();
    for (k, v) in [
        ("pki", c.features.pki),
        ("jwt", c.features.jwt),
        ("ed25519", c.features.ed25519),
        ("upgrades", c.features.upgrades),
    ] {
        features.insert(s(k), Value::Bool(v));
    }
    put("features", Value::Mapping(features));
    serde_yaml::to_string(&Value::Mapping(m)).unwrap_or_default()
}
