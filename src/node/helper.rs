//! The site helper: a child process that gets a node's facts as JSON on stdin and
//! answers with its configuration as JSON on stdout (the Go provisioner, choria-io/provisioner).
//!
//! Beyond Go: the timeout is configurable; the child runs in its own process group,
//! and on timeout it is killed with every process it started, even those that left
//! the group or the session (`proctree`), then reaped, so a helper's grandchildren
//! cannot keep a worker waiting; stdout is capped; stderr is captured (bounded) and
//! logged with every secret of the input replaced by `***`; the stdin write error is
//! not ignored. The error texts are Go's (§4.4), each naming the helper.

use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Deserializer, Serialize};

use super::pipes::{self, End};
use super::proctree;
use super::redact::redact;
use super::spawn;
use crate::choria::identity::Identity;
use crate::config::shell_words;
use crate::crypto::jwt::ProvisioningClaims;
use crate::json_text;

/// Most bytes of stdout accepted from a helper (certificates, policies and a
/// configuration fit many times over).
pub const MAX_OUTPUT: usize = 4 * 1024 * 1024;

/// Most bytes of stderr kept for the log.
pub(crate) const MAX_STDERR: usize = 16 * 1024;

/// What the helper gets on stdin, in Go's key order (§4.2). Every key is always
/// present; features that are off give `null`. `Debug` shows neither the JWT claims
/// (they hold the token and the broker password) nor the inventory.
#[derive(Serialize)]
pub struct HelperInput<'a> {
    /// Node identity (validated: only an [`Identity`] reaches a helper).
    pub identity: &'a Identity,
    /// The CSR reply (`pki`).
    pub csr: Option<&'a CsrInfo>,
    /// The ed25519 reply (`ed25519`).
    pub ed25519_pubkey: Option<&'a Ed25519Info>,
    /// The inventory reply data, as a JSON *string*.
    pub inventory: &'a str,
    /// The verified provisioning JWT claims (`jwt`).
    pub jwt: Option<&'a ProvisioningClaims>,
}

impl fmt::Debug for HelperInput<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HelperInput")
            .field("identity", &self.identity)
            .field("csr", &self.csr)
            .field("ed25519_pubkey", &self.ed25519_pubkey)
            .field(
                "inventory",
                &format_args!("<{} bytes>", self.inventory.len()),
            )
            .field("jwt", &self.jwt.map(|_| "***"))
            .finish()
    }
}

/// The node's `gencsr` reply as the helper sees it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CsrInfo {
    /// PEM CSR.
    pub csr: String,
    /// PEM public key.
    pub public_key: String,
    /// SSL directory on the node.
    pub ssldir: String,
}

/// The node's `gen25519` reply as the helper sees it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Ed25519Info {
    /// Hex ed25519 public key.
    pub public_key: String,
    /// Directory holding `server.seed` (and the future `server.jwt`).
    pub directory: String,
    /// Hex signature of the nonce (already verified).
    pub signature: String,
}

/// What the helper answers (§4.3). Keys match case-insensitively and unknown keys
/// are ignored, as with Go's decoder; `null` means "not set". `Debug` shows the
/// private key as `***`, the configuration's keys with `***` values (they may hold
/// passwords), and the sizes of certificates and policies.
#[derive(Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct HelperOutput {
    /// Stop now; retried on the next discovery or startup event.
    #[serde(deserialize_with = "nullable")]
    pub defer: bool,
    /// Tell the node to exit and stay down.
    #[serde(deserialize_with = "nullable")]
    pub shutdown: bool,
    /// Reason for defer/shutdown.
    #[serde(deserialize_with = "nullable")]
    pub msg: String,
    /// The node's new configuration, `key=value` per entry (sorted, as Go sends it).
    #[serde(deserialize_with = "nullable")]
    pub configuration: BTreeMap<String, String>,
    /// Signed certificate PEM (pki).
    #[serde(deserialize_with = "nullable")]
    pub certificate: String,
    /// CA bundle PEM (pki).
    #[serde(deserialize_with = "nullable")]
    pub ca: String,
    /// Private key PEM, re-encrypted for the node before it is sent.
    #[serde(deserialize_with = "nullable")]
    pub key: String,
    /// Where the node keeps its TLS files.
    #[serde(deserialize_with = "nullable")]
    pub ssldir: String,
    /// Requested server JWT claims (ed25519).
    pub server_claims: Option<serde_json::Value>,
    /// Action Policy files (`*.policy`).
    #[serde(deserialize_with = "nullable")]
    pub action_policies: BTreeMap<String, String>,
    /// Open Policy Agent files (`*.rego`).
    #[serde(deserialize_with = "nullable")]
    pub opa_policies: BTreeMap<String, String>,
    /// Target server version (upgrades).
    #[serde(deserialize_with = "nullable")]
    pub upgrade: String,
}

impl fmt::Debug for HelperOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn hidden(m: &BTreeMap<String, String>) -> BTreeMap<&str, &str> {
            m.keys().map(|k| (k.as_str(), "***")).collect()
        }
        let size = |s: &str| format!("<{} bytes>", s.len());
        f.debug_struct("HelperOutput")
            .field("defer", &self.defer)
            .field("shutdown", &self.shutdown)
            .field("msg", &self.msg)
            .field("configuration", &hidden(&self.configuration))
            .field("certificate", &size(&self.certificate))
            .field("ca", &size(&self.ca))
            .field("key", &if self.key.is_empty() { "" } else { "***" })
            .field("ssldir", &self.ssldir)
            .field(
                "server_claims",
                &self.server_claims.as_ref().map(|c| match c {
                    serde_json::Value::Object(m) => m.keys().cloned().collect::<Vec<_>>(),
                    other => vec![json_kind(other).to_string()],
                }),
            )
            .field("action_policies", &self.action_policies.keys())
            .field("opa_policies", &self.opa_policies.keys())
            .field("upgrade", &self.upgrade)
            .finish()
    }
}

impl HelperOutput {
    /// Decodes helper output as Go does: exactly one JSON object, keys matched
    /// case-insensitively, unknown keys ignored, wrong types rejected.
    ///
    /// The error says what was wrong, where (line and column for bad JSON) and in
    /// which field (for a wrong type), but never quotes a value: the output carries
    /// private keys and passwords.
    pub(crate) fn decode(bytes: &[u8]) -> Result<HelperOutput, OutputError> {
        // Through a map of folded keys (Go takes the last of keys that fold to the
        // same name); when that fails, the output is read again to say which field is
        // wrong.
        let output: HelperOutput =
            match serde_json::from_value(serde_json::Value::Object(folded(bytes)?)) {
                Ok(output) => output,
                Err(e) => return Err(field_error(folded(bytes)?, &e)),
            };
        if let Some(claims) = &output.server_claims {
            if !claims.is_object() && !claims.is_null() {
                return Err(OutputError::ServerClaims(json_kind(claims)));
            }
        }
        Ok(output)
    }
}

/// Why helper output could not be decoded: what was wrong, where (line and column
/// for bad JSON) and in which field (for a wrong type), never a value (the output
/// carries private keys and passwords). The caller names the helper
/// ([`HelperError::Decode`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OutputError {
    /// Not JSON, more than one value, or a wrong type no single field explains
    /// (what and where, from `json_text`).
    #[error("{0}")]
    Json(String),
    /// JSON, but not an object (the kind it is).
    #[error("expected a JSON object, got {0}")]
    NotObject(&'static str),
    /// A known field whose value has the wrong type.
    #[error("field {}: {why}", crate::untrusted::quoted(.name))]
    Field {
        /// The field, lowercased (a known one: unknown fields are ignored).
        name: String,
        /// What was expected (from `json_text`, without the value).
        why: String,
    },
    /// `server_claims` is neither an object nor null (the kind it is).
    #[error("server_claims: expected an object, got {0}")]
    ServerClaims(&'static str),
}

/// The helper's answer as one JSON object with its keys lowercased (Go matches them
/// case-insensitively).
fn folded(bytes: &[u8]) -> Result<serde_json::Map<String, serde_json::Value>, OutputError> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| OutputError::Json(json_text::describe(&e)))?;
    let serde_json::Value::Object(map) = value else {
        return Err(OutputError::NotObject(json_kind(&value)));
    };
    Ok(map
        .into_iter()
        .map(|(mut k, v)| {
            k.make_ascii_lowercase();
            (k, v)
        })
        .collect())
}

/// Names the first field of `fields` whose value has the wrong type (decoding each
/// known field alone finds it; serde_json's error on the whole object does not say).
fn field_error(
    fields: serde_json::Map<String, serde_json::Value>,
    e: &serde_json::Error,
) -> OutputError {
    for (key, value) in fields {
        let alone = serde_json::Map::from_iter([(key.clone(), value)]);
        if let Err(e) = serde_json::from_value::<HelperOutput>(serde_json::Value::Object(alone)) {
            return OutputError::Field {
                name: key,
                why: json_text::describe(&e),
            };
        }
    }
    OutputError::Json(json_text::describe(e))
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// `null` decodes to the type's default, as Go's decoder leaves a field unset.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Why a helper run failed; `Display` gives Go's text (§4.4) without the
/// `could not invoke configure helper:` prefix, which the caller adds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelperError {
    /// Provisioning is paused.
    #[error("provisioning is paused, cannot perform {0}")]
    Paused(String),
    /// Bad quoting or an empty command line.
    #[error("cannot parse helper command: {0}")]
    Parse(String),
    /// The program could not be started.
    #[error("cannot start {0}: {1}")]
    Start(String, String),
    /// Reading stdout failed.
    #[error("cannot read {0} output: {1}")]
    Read(String, String),
    /// The helper wrote nothing.
    #[error("cannot read {0} output: zero bytes received")]
    ZeroBytes(String),
    /// More than [`MAX_OUTPUT`] bytes on stdout.
    #[error("cannot read {0} output: more than {MAX_OUTPUT} bytes received")]
    TooLarge(String),
    /// The helper exited non-zero or was killed.
    #[error("could not wait for {0}: {1}")]
    Wait(String, String),
    /// The helper ran longer than its timeout and was killed.
    #[error("could not wait for {0}: signal: killed (it ran longer than {secs}s)", secs = .1.as_secs_f64())]
    Timeout(String, Duration),
    /// The daemon is stopping; the helper was killed.
    #[error("could not wait for {0}: signal: killed (the provisioner is shutting down)")]
    Stopped(String),
    /// Stdout was not one JSON object of the right types.
    #[error("cannot decode output from {0}: {1}")]
    Decode(String, String),
}

/// What a finished run produced.
#[derive(Debug)]
pub struct HelperRun {
    /// The decoded answer.
    pub output: HelperOutput,
}

/// Runs the configured helper command. Its words and the daemon's environment are
/// made ready once, when it is made (`spawn`); `Debug` shows no environment.
#[derive(Debug, Clone)]
pub struct Helper {
    command: String,
    timeout: Duration,
    prepared: Arc<Result<spawn::SpawnCommand, Unprepared>>,
}

/// Why a command could not be made ready: reported by every run, as before.
#[derive(Debug)]
enum Unprepared {
    /// Its words could not be split.
    Parse(String),
    /// They cannot be a command (empty, or a NUL byte).
    Start(String),
}

/// Go's rendering of an exit status (`exit status 3`, `signal: killed`).
pub(crate) fn exit_status_text(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    match status.signal() {
        Some(libc::SIGKILL) => "signal: killed".into(),
        Some(libc::SIGTERM) => "signal: terminated".into(),
        Some(libc::SIGSEGV) => "signal: segmentation fault".into(),
        Some(libc::SIGABRT) => "signal: aborted".into(),
        Some(n) => format!("signal: {n}"),
        None => "exited abnormally".into(),
    }
}

impl Helper {
    /// A helper running `command` (split shell-style) for at most `timeout`.
    pub fn new(command: &str, timeout: Duration) -> Helper {
        let prepared = shell_words::split(command)
            .map_err(|e| Unprepared::Parse(e.to_string()))
            .and_then(|words| {
                spawn::SpawnCommand::new(&words, proctree::MARKER_VAR)
                    .map_err(|e| Unprepared::Start(e.to_string()))
            });
        Helper {
            command: command.to_string(),
            timeout,
            prepared: Arc::new(prepared),
        }
    }

    /// Runs the helper with `input` on stdin for node `identity`. `paused` is checked
    /// before starting; `secrets` are redacted from the stderr that is logged; when
    /// `stopping` becomes true the helper and everything it started are killed.
    pub fn run(
        &self,
        identity: &str,
        input: &[u8],
        paused: bool,
        secrets: &[&str],
        stopping: Option<&AtomicBool>,
    ) -> Result<HelperRun, HelperError> {
        if paused {
            return Err(HelperError::Paused(self.command.clone()));
        }
        let pumped = self.pump(identity, input, MAX_OUTPUT, stopping)?;
        self.judge(identity, pumped, secrets)
    }

    /// Runs the program with `input` on stdin for node `identity`, with the same
    /// care as the helper (its process tree, deadline, pipes and caps, `stdout_cap`
    /// bytes of stdout at most), and gives its exit status and stdout as they are:
    /// the caller reads them (the approval policy program). A timeout, a stop, a
    /// stdout over the cap or one that cannot be read is an error.
    pub(crate) fn run_for_status(
        &self,
        identity: &str,
        input: &[u8],
        stdout_cap: usize,
        stopping: Option<&AtomicBool>,
    ) -> Result<(ExitStatus, Vec<u8>), HelperError> {
        let pumped = self.pump(identity, input, stdout_cap, stopping)?;
        let (status, bytes, _) = self.ended(identity, pumped, &[])?;
        Ok((status, bytes))
    }

    /// A run that ended, as far as any caller needs: its stderr logged (`secrets`
    /// masked), a timeout or a stop, an unreadable or oversized stdout, or a status
    /// that could not be had made errors; its status, stdout and why its input could
    /// not be written in full, if it could not.
    fn ended(
        &self,
        identity: &str,
        pumped: pipes::Pumped,
        secrets: &[&str],
    ) -> Result<(ExitStatus, Vec<u8>, Option<std::io::Error>), HelperError> {
        let name = &self.command;
        log_stderr(identity, name, &pumped.stderr, pumped.stderr_over, secrets);
        match pumped.end {
            End::TimedOut => return Err(HelperError::Timeout(name.clone(), self.timeout)),
            End::Stopped => return Err(HelperError::Stopped(name.clone())),
            End::Finished => {}
        }
        let bytes = pumped
            .stdout
            .map_err(|e| HelperError::Read(name.clone(), e.to_string()))?;
        if pumped.stdout_over {
            return Err(HelperError::TooLarge(name.clone()));
        }
        let status = pumped
            .status
            .map_err(|e| HelperError::Wait(name.clone(), e.to_string()))?;
        Ok((status, bytes, pumped.write_error))
    }

    /// Starts the program and pumps its pipes until it ends, its deadline passes
    /// or the daemon stops.
    fn pump(
        &self,
        identity: &str,
        input: &[u8],
        stdout_cap: usize,
        stopping: Option<&AtomicBool>,
    ) -> Result<pipes::Pumped, HelperError> {
        // Copied into an error only: a run that succeeds makes no copy of it.
        let name = &self.command;
        let prepared = match &*self.prepared {
            Ok(prepared) => prepared,
            Err(Unprepared::Parse(e)) => return Err(HelperError::Parse(e.clone())),
            Err(Unprepared::Start(e)) => return Err(HelperError::Start(name.clone(), e.clone())),
        };
        let started = Instant::now();
        let marker = proctree::new_marker();
        let spawn::Spawned {
            process: mut child,
            stdin,
            stdout,
            stderr,
        } = prepared
            .spawn((proctree::MARKER_VAR, &marker))
            .map_err(|e| HelperError::Start(name.clone(), e.to_string()))?;
        // stdin is closed once the input is written, so its pipe is known now; stdout
        // and stderr stay open (borrowed by the run) until it ends, so theirs are
        // looked up only by a kill (two system calls fewer per run).
        let stdin_pipe = proctree::pipe_inode(&stdin);
        let child_id = child.id();
        // Kills the helper, its group and whatever left the group (`proctree`); the
        // helper itself is reaped by `pump`.
        let kill_tree = || {
            let pipes = [&stdout, &stderr]
                .into_iter()
                .filter_map(proctree::pipe_inode)
                .chain(stdin_pipe)
                .collect();
            let n = proctree::HelperTree::new(child_id, &marker, pipes).kill();
            log::debug!("helper {name} for {identity}: {n} processes killed");
        };
        let run = pipes::Run {
            stdin,
            stdout: &stdout,
            stderr: &stderr,
            input,
            stdout_cap,
            stderr_cap: MAX_STDERR,
            deadline: started + self.timeout,
            stopping,
        };
        Ok(pipes::pump(&mut child, run, &kill_tree))
    }

    /// What a run that ended came to: its stderr logged, then its end, its output
    /// and its exit status checked, and its answer decoded.
    fn judge(
        &self,
        identity: &str,
        pumped: pipes::Pumped,
        secrets: &[&str],
    ) -> Result<HelperRun, HelperError> {
        let name = &self.command;
        let (status, bytes, write_error) = self.ended(identity, pumped, secrets)?;
        if bytes.iter().all(u8::is_ascii_whitespace) && status.success() {
            return Err(HelperError::ZeroBytes(name.clone()));
        }
        if !status.success() {
            return Err(HelperError::Wait(name.clone(), exit_status_text(status)));
        }
        if let Some(e) = write_error {
            // The helper exited 0 without reading its input: say so, but its answer counts.
            log::debug!("helper {name} for {identity} did not read all of its input: {e}");
        }
        // The decoder never quotes values; the known secrets are masked on top, in
        // case a field name is one.
        let output = HelperOutput::decode(&bytes).map_err(|e| {
            HelperError::Decode(name.clone(), redact(e.to_string().as_bytes(), secrets))
        })?;
        Ok(HelperRun { output })
    }
}

/// Logs what the helper wrote to stderr (at most [`MAX_STDERR`] bytes, secrets
/// masked), one warning per line, and says so when more was dropped.
fn log_stderr(identity: &str, helper: &str, bytes: &[u8], over: bool, secrets: &[&str]) {
    if bytes.is_empty() {
        return;
    }
    let text = redact(bytes, secrets);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        log::warn!("helper {helper} for {identity} wrote to stderr: {line}");
    }
    if over {
        log::warn!(
            "helper {helper} for {identity} wrote more than {MAX_STDERR} bytes to stderr; the rest was dropped"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_keys_in_go_order_with_nulls() {
        let input = HelperInput {
            identity: &Identity::parse("n1").unwrap(),
            csr: None,
            ed25519_pubkey: None,
            inventory: "{\"a\":1}",
            jwt: None,
        };
        assert_eq!(
            serde_json::to_string(&input).unwrap(),
            r#"{"identity":"n1","csr":null,"ed25519_pubkey":null,"inventory":"{\"a\":1}","jwt":null}"#
        );
    }

    #[test]
    fn output_matches_keys_case_insensitively_and_ignores_unknown() {
        let o = HelperOutput::decode(
            br#"{"Defer": false, "MSG": "hi", "Configuration": {"b": "2", "a": "1"}, "extra": [1], "ca": null}"#,
        )
        .unwrap();
        assert_eq!(o.msg, "hi");
        assert_eq!(o.configuration.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(o.ca, "");
    }

    #[test]
    fn usual_and_odd_spellings_decode() {
        let certificate = r"-----BEGIN CERTIFICATE-----\nMIIB\u003c\n-----END CERTIFICATE-----\n";
        for text in [
            r#"{"defer":false,"msg":"","configuration":{"b":"2","a":"1"}}"#.to_string(),
            r#"{"Defer": true, "MSG": "hi", "Configuration": null, "extra": [1, {"Msg": 2}]}"#
                .into(),
            r#"{"msg":"a","MSG":"b"}"#.into(),
            r#"{"server_claims":{"Collectives":["x"]},"UPGRADE":"1.2.3","ca":null}"#.into(),
            format!(
                r#"{{"certificate":"{certificate}","key":"k","ssldir":"/s","ca":"{certificate}"}}"#
            ),
            r#"{"action_policies":{"a.policy":"x"},"OPA_Policies":{"b.rego":"y"},"shutdown":true}"#
                .into(),
            r#"{"defer":true}"#.into(),
            "{}".into(),
        ] {
            assert!(HelperOutput::decode(text.as_bytes()).is_ok(), "{text}");
        }
        let both = HelperOutput::decode(br#"{"msg":"a","MSG":"b"}"#).unwrap();
        assert_eq!(
            both.msg, "b",
            "keys that fold together: the last wins, as in Go"
        );
    }

    #[test]
    fn output_rejects_wrong_types_and_trailing_data() {
        let e = HelperOutput::decode(br#"{"configuration": {"a": 1}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid type: integer"), "{e}");
        assert!(HelperOutput::decode(br#"{"defer": true} {"x":1}"#).is_err());
        assert_eq!(
            HelperOutput::decode(br#"[1]"#).err(),
            Some(OutputError::NotObject("an array"))
        );
        assert!(HelperOutput::decode(br#"{"server_claims": "x"}"#).is_err());
        assert!(
            HelperOutput::decode(b"  {\"defer\": true}\n")
                .unwrap()
                .defer
        );
    }

    #[test]
    fn decode_errors_say_where_and_which_field_but_never_the_value() {
        let token = "tok-3f9a";
        // A value of the wrong type: serde_json alone would quote it.
        for (json, field, expected) in [
            (r#"{"defer": "tok-3f9a"}"#, "defer", "expected a boolean"),
            (
                r#"{"Configuration": "tok-3f9a"}"#,
                "configuration",
                "expected a map",
            ),
            (r#"{"key": ["tok-3f9a"]}"#, "key", "expected a string"),
            (
                r#"{"msg": "ok", "action_policies": {"a.policy": 17}}"#,
                "action_policies",
                "expected a string",
            ),
        ] {
            let e = HelperOutput::decode(json.as_bytes())
                .unwrap_err()
                .to_string();
            assert!(!e.contains(token) && !e.contains("17"), "{e}");
            assert!(
                e.starts_with(&format!("field \"{field}\": invalid type: ")),
                "{e}"
            );
            assert!(e.contains(expected), "{e}");
        }
        // Bad JSON: what and where.
        let e = HelperOutput::decode(b"{\"msg\": \"tok-3f9a\",\n \"defer\": tru }").unwrap_err();
        assert_eq!(e.to_string(), "expected ident at line 2 column 14");
        let e = HelperOutput::decode(b"{\"key\": \"-----BEGIN tok-3f9a").unwrap_err();
        assert_eq!(e.to_string(), "unexpected end of input at line 1 column 28");
        let e = HelperOutput::decode(br#"{"server_claims": "tok-3f9a"}"#).unwrap_err();
        assert_eq!(e, OutputError::ServerClaims("a string"));
        assert_eq!(
            e.to_string(),
            "server_claims: expected an object, got a string"
        );
    }

    #[test]
    fn the_claims_are_written_as_a_decoded_value_of_them_was() {
        // The helper input once held the claims as a `serde_json::Value` made from
        // them; written straight from the struct, the bytes are the same.
        let claims: ProvisioningClaims = serde_json::from_str(
            r#"{"cht":"t","chs":true,"chu":"nats://h:4222","chpwd":"pw","extensions":{"b":[1,2.5],"a":null},"v2":true,"purpose":"choria_provisioning","exp":1798761600,"jti":"j"}"#,
        )
        .unwrap();
        let identity = Identity::parse("n1.example.net").unwrap();
        let input = |jwt| HelperInput {
            identity: &identity,
            csr: None,
            ed25519_pubkey: None,
            inventory: "{}",
            jwt,
        };
        #[derive(Serialize)]
        struct AsValue<'a> {
            identity: &'a Identity,
            csr: Option<&'a CsrInfo>,
            ed25519_pubkey: Option<&'a Ed25519Info>,
            inventory: &'a str,
            jwt: Option<&'a serde_json::Value>,
        }
        let value = serde_json::to_value(&claims).unwrap();
        let old = serde_json::to_vec(&AsValue {
            identity: &identity,
            csr: None,
            ed25519_pubkey: None,
            inventory: "{}",
            jwt: Some(&value),
        })
        .unwrap();
        assert_eq!(
            String::from_utf8(serde_json::to_vec(&input(Some(&claims))).unwrap()).unwrap(),
            String::from_utf8(old).unwrap()
        );
    }

    #[test]
    fn debug_output_hides_secrets() {
        let claims = ProvisioningClaims {
            cht: "tok-3f9a".into(),
            chpwd: "hunter22".into(),
            ..ProvisioningClaims::default()
        };
        let input = HelperInput {
            identity: &Identity::parse("n1").unwrap(),
            csr: None,
            ed25519_pubkey: None,
            inventory: r#"{"password":"inv-secret"}"#,
            jwt: Some(&claims),
        };
        let shown = format!("{input:?}");
        for secret in ["tok-3f9a", "hunter22", "inv-secret"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(shown.contains("jwt: Some(\"***\")"), "{shown}");
        let output = HelperOutput::decode(
            br#"{"configuration": {"plugin.choria.middleware_hosts": "nats://u:pw-4242@h:4222"},
                 "key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEkey\n-----END RSA PRIVATE KEY-----",
                 "certificate": "CERT", "opa_policies": {"x.rego": "allow = true"},
                 "server_claims": {"exp": 3600}, "msg": "fine"}"#,
        )
        .unwrap();
        let shown = format!("{output:?}");
        for secret in ["pw-4242", "MIIEkey", "allow = true"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        for visible in [
            "\"plugin.choria.middleware_hosts\": \"***\"",
            "key: \"***\"",
            "certificate: \"<4 bytes>\"",
            "\"x.rego\"",
            "\"exp\"",
            "msg: \"fine\"",
        ] {
            assert!(shown.contains(visible), "{visible} in {shown}");
        }
    }
}
