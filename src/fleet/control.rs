//! The operator's control socket (`control_socket`): `choria-provisioner pause`,
//! `resume` and `status` talk to the running daemon through it.
//!
//! A Unix socket of mode 0600 (created under a temporary name, made 0600, then
//! renamed into place, so it is never reachable with wider rights). One request per
//! connection, one JSON line each way:
//!
//! ```text
//! {"command": "pause", "reason": "CA outage"}  ->  {"ok": true, "paused": true, "operator_pause": {...}, "message": "..."}
//! {"command": "resume"}                        ->  {"ok": true, "paused": false, "operator_pause": null, "message": "..."}
//! {"command": "status"}                        ->  {"ok": true, ...}
//! anything else                                ->  {"ok": false, "error": "..."}
//! ```
//!
//! The socket itself, who may use it and what a client may cost, are in
//! `fleet/control_socket.rs`. An operator's pause is kept in `pause_file` (when
//! set) so that it holds across a restart until `resume`; every request that
//! changes something is logged with the operator who made it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crossbeam_channel::Sender;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::Fleet;
use crate::choria::identity::Identity;
use crate::config::{OperatorPause, Pause};

/// The longest reason kept.
pub(crate) const MAX_REASON: usize = 256;

/// What an operator asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum ControlRequest {
    /// Stop provisioning until `resume`.
    Pause {
        /// Why (shown in `/healthz`, `/readyz`, `nodes` and the log).
        #[serde(default)]
        reason: String,
    },
    /// Lift an operator's pause and discover at once.
    Resume,
    /// Only say how things are.
    Status,
    /// A page of the identities waiting for approval.
    Pending {
        /// How many to skip.
        #[serde(default)]
        offset: usize,
        /// How many at most (at most `approvals::MAX_PAGE`).
        #[serde(default = "page_size")]
        limit: usize,
    },
    /// Approve these identities (pending or not seen yet).
    Approve {
        /// The identities.
        identities: Vec<String>,
    },
    /// Approve every identity pending since `as_of` or before (Unix nanoseconds, as
    /// a `pending` answer's `now` gave it).
    ApproveAll {
        /// The listing's time.
        as_of: u64,
    },
    /// Deny these identities: refused at admission until forgotten.
    Deny {
        /// The identities.
        identities: Vec<String>,
        /// Why (the log, the audit trail, `nodes`).
        #[serde(default)]
        reason: String,
    },
    /// Take back any decision on these identities: each waits again when seen.
    Forget {
        /// The identities.
        identities: Vec<String>,
    },
    /// Count the identities `pattern` selects among those `action` acts on; with
    /// `as_of` (a count's `as_of`), take `action`'s decision for those selected
    /// then.
    Match {
        /// Approve, deny or forget.
        action: super::approvals::MatchAction,
        /// An RE2 regular expression (`/re/` slashes stripped).
        pattern: String,
        /// The count's time: decide; absent: only count.
        #[serde(default)]
        as_of: Option<u64>,
        /// Why (a denial).
        #[serde(default)]
        reason: String,
    },
}

fn page_size() -> usize {
    super::approvals::MAX_PAGE
}

/// The approval part of an answer (`pending`, `approve`, `deny`, `forget`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ApprovalAnswer {
    /// Identities pending now.
    pub total_pending: usize,
    /// The daemon's time of the answer, Unix nanoseconds (`approve --all` passes it
    /// back as `as_of`).
    pub now: u64,
    /// A page of the pending identities (`pending` only).
    #[serde(default)]
    pub pending: Vec<super::approvals::PendingRow>,
    /// The identities whose standing the request changed.
    #[serde(default)]
    pub changed: Vec<String>,
    /// The identities the decision could not be taken for, each with why: nothing
    /// was recorded or audited for them.
    #[serde(default)]
    pub not_taken: Vec<NotTakenRow>,
    /// Why the approval file does not have the decisions taken (a full disk, a
    /// read-only filesystem): they apply, the daemon keeps trying to write them,
    /// and a restart before it succeeds would not know them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_saved: Option<String>,
    /// How many identities the request changed (`changed` lists at most
    /// [`MAX_LISTED`] of them).
    #[serde(default)]
    pub changed_count: usize,
    /// What a pattern selected (`match`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched: Option<Matched>,
}

impl ApprovalAnswer {
    /// An answer with `total_pending` identities pending now, and nothing else yet.
    fn with_pending(total_pending: usize) -> ApprovalAnswer {
        ApprovalAnswer {
            total_pending,
            now: now_nanos(),
            pending: Vec::new(),
            changed: Vec::new(),
            not_taken: Vec::new(),
            not_saved: None,
            changed_count: 0,
            matched: None,
        }
    }
}

/// The most identities an answer lists as changed: a decision by pattern may
/// change tens of thousands, and an answer is 2 MiB at most.
pub(crate) const MAX_LISTED: usize = 1000;

/// What a pattern selected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Matched {
    /// How many identities.
    pub count: usize,
    /// The first few of them, sorted.
    pub first: Vec<String>,
    /// The count's time (Unix nanoseconds): pass it back to decide these.
    pub as_of: u64,
    /// What the decision acts on (`pending`, `pending or approved` ...).
    pub among: String,
}

/// An identity a decision was not taken for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NotTakenRow {
    /// The identity.
    pub identity: String,
    /// Why.
    pub reason: String,
}

/// The daemon's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Response {
    /// Whether the request was carried out.
    pub ok: bool,
    /// Whether provisioning is paused now (by an operator or the election).
    #[serde(default)]
    pub paused: bool,
    /// The operator's pause, if any.
    pub operator_pause: Option<OperatorPause>,
    /// What was done, for the operator.
    #[serde(default)]
    pub message: String,
    /// Why the request was refused (`ok` false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What an approval request found or did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<ApprovalAnswer>,
}

/// Why a pause reason is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReasonError {
    /// Over [`MAX_REASON`] characters.
    #[error("the reason is longer than {MAX_REASON} characters")]
    TooLong,
    /// A control character (a newline, an escape sequence).
    #[error("the reason holds control characters")]
    ControlCharacter,
}

fn check_reason(reason: &str) -> Result<(), ReasonError> {
    if reason.chars().count() > MAX_REASON {
        return Err(ReasonError::TooLong);
    }
    if reason.chars().any(char::is_control) {
        return Err(ReasonError::ControlCharacter);
    }
    Ok(())
}

/// The pause file could not be written or removed.
#[derive(Debug)]
pub(crate) struct PauseFileError {
    path: PathBuf,
    writing: bool,
    error: std::io::Error,
}

impl std::fmt::Display for PauseFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.writing { "write" } else { "remove" };
        write!(
            f,
            "could not {what} the pause file {}: {}",
            self.path.display(),
            self.error
        )
    }
}

impl std::error::Error for PauseFileError {}

/// Who sent a request: the control socket's peer, as the kernel tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Operator {
    /// The peer's effective uid when it connected.
    pub uid: u32,
    /// The peer's pid when it connected.
    pub pid: i32,
    /// The uid's name in `/etc/passwd`, if it has one.
    pub user: Option<String>,
}

impl Operator {
    /// The operator behind a socket's peer credentials.
    pub(crate) fn from_peer(peer: crate::sys::PeerCredentials) -> Operator {
        Operator {
            uid: peer.uid,
            pid: peer.pid,
            user: user_name(peer.uid),
        }
    }
}

impl std::fmt::Display for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.user {
            Some(user) => write!(f, "{user} (uid {}, pid {})", self.uid, self.pid),
            None => write!(f, "uid {} (pid {})", self.uid, self.pid),
        }
    }
}

/// The name of `uid` in `/etc/passwd` (without NSS: a name from LDAP is not found,
/// and the uid alone is shown).
fn user_name(uid: u32) -> Option<String> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id: u32 = fields.nth(1)?.parse().ok()?;
        (id == uid && !name.is_empty() && name.chars().all(|c| c.is_ascii_graphic()))
            .then(|| name.to_string())
    })
}

/// What the daemon lets the control socket reach once it runs: the scheduler (its
/// queue is emptied on pause), the discovery trigger (pulled on resume) and the
/// operators' approvals (with `approval: required`).
pub(crate) struct DaemonHooks {
    /// The scheduler.
    pub fleet: Arc<Fleet>,
    /// Starts a discovery now.
    pub discover: Sender<()>,
}

/// The most identities one request names (a request is 4 KiB at most anyway).
pub(crate) const MAX_IDENTITIES: usize = 256;

/// Carries out operators' requests: the pause flag, the pause file, the daemon.
pub(crate) struct Controller {
    pause: Arc<Pause>,
    pause_file: Option<PathBuf>,
    daemon: Mutex<Option<DaemonHooks>>,
}

impl Controller {
    /// A controller for `pause`, keeping operators' pauses in `pause_file`.
    pub(crate) fn new(pause: Arc<Pause>, pause_file: Option<PathBuf>) -> Controller {
        Controller {
            pause,
            pause_file,
            daemon: Mutex::new(None),
        }
    }

    /// Takes up a pause kept in the pause file by an earlier run. A file that cannot
    /// be read or decoded still pauses (an operator wrote it), with a reason that
    /// says so.
    pub(crate) fn restore(&self) {
        let Some(path) = &self.pause_file else {
            return;
        };
        let text = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                log::error!(
                    "Could not read the pause file {}: {e}; staying paused until resume",
                    path.display()
                );
                self.pause.hold_for_operator(OperatorPause {
                    reason: format!("the pause file could not be read: {}", e.kind()),
                    since: crate::clock::unix_seconds(),
                });
                return;
            }
        };
        let held = match serde_json::from_slice::<OperatorPause>(&text) {
            Ok(p) if check_reason(&p.reason).is_ok() => p,
            _ => OperatorPause {
                reason: "the pause file could not be decoded".into(),
                since: crate::clock::unix_seconds(),
            },
        };
        log::warn!(
            "Paused by an operator since {} (kept in {}): {}; run choria-provisioner resume to go on",
            crate::clock::rfc3339(held.since as f64),
            path.display(),
            shown(&held.reason)
        );
        self.pause.hold_for_operator(held);
    }

    /// From now on, a pause empties `hooks.fleet`'s queue and a resume discovers.
    pub(crate) fn attach(&self, hooks: DaemonHooks) {
        *self.daemon.lock() = Some(hooks);
    }

    /// Carries out `request`, made by `by`.
    pub(crate) fn handle(&self, request: ControlRequest, by: &Operator) -> Response {
        match request {
            ControlRequest::Pause { reason } => {
                if let Err(e) = check_reason(&reason) {
                    return self.refuse(e.to_string());
                }
                let held = OperatorPause {
                    reason,
                    since: crate::clock::unix_seconds(),
                };
                self.pause.hold_for_operator(held.clone());
                log::warn!("Paused by an operator, {by}: {}", shown(&held.reason));
                if let Some(hooks) = &*self.daemon.lock() {
                    // Queued nodes are forgotten, as when leadership is lost: the
                    // discovery after resume finds them again.
                    hooks.fleet.remove_all();
                }
                let message = match self.keep(&held) {
                    Ok(Some(path)) => format!(
                        "paused; the pause holds across restarts until resume (kept in {})",
                        path.display()
                    ),
                    Ok(None) => {
                        "paused until resume or the end of this process (no pause_file is set)"
                            .into()
                    }
                    Err(e) => {
                        log::error!("{e}");
                        format!("paused, but {e}: a restart would not be paused")
                    }
                };
                self.answer(message)
            }
            ControlRequest::Resume => {
                let lifted = self.pause.release_operator();
                if let Err(e) = self.forget() {
                    log::error!("{e}");
                    self.pause
                        .hold_for_operator(lifted.clone().unwrap_or(OperatorPause {
                            reason: String::new(),
                            since: crate::clock::unix_seconds(),
                        }));
                    return self.refuse(format!("{e}: still paused"));
                }
                let message = match lifted {
                    None => "provisioning was not paused by an operator".to_string(),
                    Some(_) => {
                        log::warn!("Resumed by an operator, {by}");
                        let discovering = match &*self.daemon.lock() {
                            Some(hooks) => hooks.discover.try_send(()).is_ok(),
                            None => false,
                        };
                        if discovering {
                            "resumed; a discovery starts now".to_string()
                        } else {
                            "resumed".to_string()
                        }
                    }
                };
                let message = if self.pause.paused() {
                    format!("{message}; still paused by the election (this instance does not lead)")
                } else {
                    message
                };
                self.answer(message)
            }
            ControlRequest::Status => self.answer(String::new()),
            request => self.approval(request, by),
        }
    }

    /// Carries out `pending`, `approve`, `approve_all`, `deny` and `forget`.
    fn approval(&self, request: ControlRequest, by: &Operator) -> Response {
        let approvals = self
            .daemon
            .lock()
            .as_ref()
            .map(|hooks| hooks.fleet.approvals().cloned());
        let approvals = match approvals {
            None => {
                return self.refuse(
                    "the provisioner is still starting (connecting to the broker): try again"
                        .into(),
                )
            }
            Some(None) => return self.refuse(
                "approval is off: this provisioner's configuration does not set approval: required"
                    .into(),
            ),
            Some(Some(approvals)) => approvals,
        };
        let decided = match request {
            ControlRequest::Pending { offset, limit } => {
                let limit = limit.min(super::approvals::MAX_PAGE);
                let (total_pending, pending) = approvals.pending(offset, limit);
                return Response {
                    approvals: Some(ApprovalAnswer {
                        pending,
                        ..ApprovalAnswer::with_pending(total_pending)
                    }),
                    ..self.answer(String::new())
                };
            }
            ControlRequest::ApproveAll { as_of } => approvals.approve_all(as_of, by),
            ControlRequest::Approve { identities } => match parse_identities(&identities) {
                Ok(ids) => approvals.approve(&ids, by),
                Err(e) => return self.refuse(e.to_string()),
            },
            ControlRequest::Deny { identities, reason } => {
                if let Err(e) = check_reason(&reason) {
                    return self.refuse(e.to_string());
                }
                match parse_identities(&identities) {
                    Ok(ids) => approvals.deny(&ids, &reason, by),
                    Err(e) => return self.refuse(e.to_string()),
                }
            }
            ControlRequest::Forget { identities } => match parse_identities(&identities) {
                Ok(ids) => approvals.forget(&ids, by),
                Err(e) => return self.refuse(e.to_string()),
            },
            ControlRequest::Match {
                action,
                pattern,
                as_of,
                reason,
            } => {
                if let Err(e) = check_reason(&reason) {
                    return self.refuse(e.to_string());
                }
                let regex = match super::approvals::compile_pattern(&pattern) {
                    Ok(r) => r,
                    Err(e) => return self.refuse(e.to_string()),
                };
                let Some(as_of) = as_of else {
                    return self.counted(&approvals, action, &regex);
                };
                approvals.decide_matching(action, &pattern, &regex, as_of, &reason, by)
            }
            ControlRequest::Pause { .. } | ControlRequest::Resume | ControlRequest::Status => {
                unreachable!("handled by Controller::handle")
            }
        };
        self.decided_answer(&approvals, &decided)
    }

    /// The answer to a count by pattern.
    fn counted(
        &self,
        approvals: &super::approvals::Approvals,
        action: super::approvals::MatchAction,
        pattern: &regex::Regex,
    ) -> Response {
        let (count, first, as_of) = approvals.count_matching(action, pattern);
        let (total_pending, _) = approvals.pending(0, 0);
        Response {
            approvals: Some(ApprovalAnswer {
                matched: Some(Matched {
                    count,
                    first: first.iter().map(|i| i.to_string()).collect(),
                    as_of,
                    among: action.among().to_string(),
                }),
                ..ApprovalAnswer::with_pending(total_pending)
            }),
            ..self.answer(format!("{count} selected"))
        }
    }

    /// The answer to a decision: what changed, what was not taken and why, and
    /// whether the approval file has it.
    fn decided_answer(
        &self,
        approvals: &super::approvals::Approvals,
        decided: &super::approvals::Decided,
    ) -> Response {
        let not_saved = decided.saved.as_ref().err().map(|e| {
            log::error!("{e}; trying again every second");
            format!("{e}: the daemon keeps trying to write it; a restart before it succeeds would not know the decision")
        });
        let message = format!(
            "{} changed{}",
            decided.changed.len(),
            if decided.not_taken.is_empty() {
                String::new()
            } else {
                format!(", {} not taken", decided.not_taken.len())
            }
        );
        let (total_pending, _) = approvals.pending(0, 0);
        Response {
            approvals: Some(ApprovalAnswer {
                changed: decided
                    .changed
                    .iter()
                    .take(MAX_LISTED)
                    .map(|i| i.to_string())
                    .collect(),
                changed_count: decided.changed.len(),
                not_taken: decided
                    .not_taken
                    .iter()
                    .map(|(identity, why)| NotTakenRow {
                        identity: identity.to_string(),
                        reason: why.to_string(),
                    })
                    .collect(),
                not_saved,
                ..ApprovalAnswer::with_pending(total_pending)
            }),
            ..self.answer(message)
        }
    }

    fn answer(&self, message: String) -> Response {
        Response {
            ok: true,
            paused: self.pause.paused(),
            operator_pause: self.pause.operator(),
            message,
            error: None,
            approvals: None,
        }
    }

    /// A refusal carrying `error` and the state as it is.
    pub(crate) fn refuse(&self, error: String) -> Response {
        Response {
            ok: false,
            error: Some(error),
            ..self.answer(String::new())
        }
    }

    /// Writes the pause file (whole, through a rename); the path written, if any.
    fn keep(&self, held: &OperatorPause) -> Result<Option<&Path>, PauseFileError> {
        let Some(path) = &self.pause_file else {
            return Ok(None);
        };
        let temporary = path.with_extension("tmp");
        // Two plain fields: serialising cannot fail.
        let text = serde_json::to_vec(held).unwrap_or_default();
        std::fs::write(&temporary, text)
            .and_then(|()| std::fs::rename(&temporary, path))
            .map_err(|error| PauseFileError {
                path: path.clone(),
                writing: true,
                error,
            })?;
        Ok(Some(path))
    }

    /// Removes the pause file.
    fn forget(&self) -> Result<(), PauseFileError> {
        let Some(path) = &self.pause_file else {
            return Ok(());
        };
        match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(PauseFileError {
                path: path.clone(),
                writing: false,
                error,
            }),
        }
    }
}

/// Unix nanoseconds now.
fn now_nanos() -> u64 {
    u64::try_from(crate::clock::unix_nanos()).unwrap_or(0)
}

/// Why the identities of a request were refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IdentityListError {
    /// The request names none.
    #[error("name at least one identity")]
    Empty,
    /// More than [`MAX_IDENTITIES`].
    #[error("{0} identities in one request; at most {MAX_IDENTITIES}")]
    TooMany(usize),
    /// One breaks the identity rule (shown escaped and cut).
    #[error("\"{shown}\" is not a valid identity: {error}")]
    Invalid {
        /// The identity as given, fit for a log line.
        shown: String,
        /// Why.
        error: crate::choria::identity::IdentityError,
    },
}

/// The identities of a request, each checked by the identity rule; the first bad
/// one refuses the request.
fn parse_identities(raw: &[String]) -> Result<Vec<Identity>, IdentityListError> {
    if raw.is_empty() {
        return Err(IdentityListError::Empty);
    }
    if raw.len() > MAX_IDENTITIES {
        return Err(IdentityListError::TooMany(raw.len()));
    }
    raw.iter()
        .map(|r| {
            Identity::parse(r).map_err(|error| IdentityListError::Invalid {
                shown: crate::untrusted::shown(r),
                error,
            })
        })
        .collect()
}

/// A reason as logged: quoted, or "no reason given".
fn shown(reason: &str) -> String {
    if reason.is_empty() {
        "no reason given".into()
    } else {
        crate::untrusted::quoted(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_nats_server::TempDir;

    fn root() -> Operator {
        Operator {
            uid: 0,
            pid: 1,
            user: Some("root".into()),
        }
    }

    fn pause() -> Arc<Pause> {
        Arc::new(Pause::new(prometheus::IntGauge::new("p", "p").unwrap()))
    }

    #[test]
    fn a_pause_is_kept_in_its_file_until_resume_and_taken_up_again_at_start() {
        let dir = TempDir::new("control-keep");
        let file = dir.path().join("pause");
        let flag = pause();
        let controller = Controller::new(Arc::clone(&flag), Some(file.clone()));
        let r = controller.handle(
            ControlRequest::Pause {
                reason: "CA outage".into(),
            },
            &root(),
        );
        assert!(r.ok && r.paused, "{r:?}");
        assert_eq!(r.operator_pause.as_ref().unwrap().reason, "CA outage");
        assert!(r.message.contains("holds across restarts"), "{r:?}");
        assert!(flag.paused());
        // A new process: paused again from the file.
        let again = pause();
        Controller::new(Arc::clone(&again), Some(file.clone())).restore();
        assert_eq!(again.operator().unwrap().reason, "CA outage");
        let r = controller.handle(ControlRequest::Resume, &root());
        assert!(r.ok && !r.paused && r.operator_pause.is_none(), "{r:?}");
        assert!(!file.exists());
        let fresh = pause();
        Controller::new(Arc::clone(&fresh), Some(file.clone())).restore();
        assert!(!fresh.paused());
        // A file that does not decode still pauses.
        std::fs::write(&file, b"{\"reason\": 7}").unwrap();
        Controller::new(Arc::clone(&fresh), Some(file)).restore();
        assert_eq!(
            fresh.operator().unwrap().reason,
            "the pause file could not be decoded"
        );
    }

    #[test]
    fn reasons_are_bounded_and_free_of_control_characters() {
        let controller = Controller::new(pause(), None);
        for bad in [
            "a\nb".to_string(),
            "\u{1b}[31m".into(),
            "x".repeat(MAX_REASON + 1),
        ] {
            let r = controller.handle(ControlRequest::Pause { reason: bad }, &root());
            assert!(!r.ok && !r.paused, "{r:?}");
        }
        let r = controller.handle(
            ControlRequest::Pause {
                reason: "é".repeat(MAX_REASON),
            },
            &root(),
        );
        assert!(r.ok && r.paused, "{r:?}");
    }
}
