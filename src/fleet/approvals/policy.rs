//! A site's policy program decides before a person does (`approval_policy`), as
//! Puppet's policy-based autosigning does: when a node is first held, the program
//! gets what the node told about itself as JSON on stdin, and its exit code
//! decides. 0 approves; 1 denies, with the first line of its stdout as the reason;
//! 2 says it does not know (the node waits for a person, counted `undecided`);
//! anything else (another code, a signal, a timeout, output that is not one short
//! line of text) is a failure and leaves the node pending for a person too: **an
//! error never approves**. Its decision is recorded like an operator's (`by: policy`, with the
//! program), shared with the site's other instances, and never overrides a
//! person's: it applies only to an identity still pending when it comes.
//!
//! The program runs with the same care as the helper (`node::helper`: its own
//! process group and tree, `helper_timeout`, bounded pipes, no shell), on threads
//! of its own (at most [`MAX_RUNNING`] at once, never a worker's), at most once per
//! identity per `interval`, and from a bounded queue: a flood of made-up names
//! costs skipped runs (counted), never an unbounded backlog or the workers' time.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, Receiver, Sender};
use parking_lot::Mutex;
use serde_json::json;

use super::{Approvals, Decider};
use crate::choria::identity::Identity;
use crate::choria::peers::{ApprovalRecord, Decision, MAX_REASON};
use crate::config::Config;
use crate::node::approval::Evidence;
use crate::node::helper::Helper;
use crate::throttle::Throttle;

/// The most bytes of stdout read from the program.
pub(crate) const MAX_POLICY_OUTPUT: usize = 4096;

/// The most programs running at once.
pub(crate) const MAX_RUNNING: usize = 4;

/// The most identities waiting for a run.
const QUEUE: usize = 4096;

/// The most identities whose last run is remembered.
const REMEMBERED: usize = 100_000;

/// What one run said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PolicyAnswer {
    /// Exit 0.
    Approve,
    /// Exit 1, with the first line of stdout.
    Deny(String),
    /// Exit 2: the program does not know; the node waits for a person.
    Undecided,
    /// Anything else: the node waits for a person.
    Failed(String),
}

impl PolicyAnswer {
    /// `approved`, `denied`, `undecided` or `failed`: the `result` label.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            PolicyAnswer::Approve => "approved",
            PolicyAnswer::Deny(_) => "denied",
            PolicyAnswer::Undecided => "undecided",
            PolicyAnswer::Failed(_) => "failed",
        }
    }
}

/// What an exit status and stdout mean: stdout must be UTF-8 and its first line
/// at most [`MAX_REASON`] characters without control characters, whatever the code.
pub(crate) fn classify(status: ExitStatus, stdout: &[u8]) -> PolicyAnswer {
    let Ok(text) = std::str::from_utf8(stdout) else {
        return PolicyAnswer::Failed("its output is not UTF-8".into());
    };
    let first = text.lines().next().unwrap_or_default().trim();
    if first.chars().count() > MAX_REASON || first.chars().any(char::is_control) {
        return PolicyAnswer::Failed(format!(
            "the first line of its output is not a reason (at most {MAX_REASON} characters, no control characters)"
        ));
    }
    match (status.code(), status.signal()) {
        (Some(0), _) => PolicyAnswer::Approve,
        (Some(1), _) => PolicyAnswer::Deny(first.to_string()),
        (Some(2), _) => PolicyAnswer::Undecided,
        (Some(code), _) => PolicyAnswer::Failed(format!("it exited {code}")),
        (None, Some(signal)) => PolicyAnswer::Failed(format!("it was killed by signal {signal}")),
        (None, None) => PolicyAnswer::Failed("it ended abnormally".into()),
    }
}

/// One identity waiting for a run, with its input.
struct Job {
    identity: Identity,
    input: Vec<u8>,
}

/// The program, its queue and who it ran for.
pub(crate) struct Policy {
    program: Helper,
    /// The command, as records and the audit trail name the decider.
    command: String,
    every: Duration,
    running: usize,
    tx: Sender<Job>,
    rx: Receiver<Job>,
    ran: Mutex<HashMap<Identity, Instant>>,
    failures: Throttle,
}

impl Policy {
    /// The policy of `config`, if it names a program.
    pub(crate) fn of(config: &Config) -> Option<Policy> {
        let command = config.approval_policy.trim();
        if command.is_empty() {
            return None;
        }
        let (tx, rx) = bounded(QUEUE);
        Some(Policy {
            program: Helper::new(command, config.helper_timeout),
            command: command.chars().take(200).collect(),
            every: config.interval,
            running: config.workers.clamp(1, MAX_RUNNING),
            tx,
            rx,
            ran: Mutex::new(HashMap::new()),
            failures: Throttle::default(),
        })
    }

    /// Queues a run for `identity`, just held with `record`, unless the program ran
    /// for it within `interval` or the queue is full (a skipped run, counted).
    pub(super) fn offer(
        &self,
        record: &ApprovalRecord,
        evidence: Evidence<'_>,
        metrics: &crate::metrics::Metrics,
    ) {
        let identity = &record.identity;
        let now = Instant::now();
        let taken = {
            let mut ran = self.ran.lock();
            if ran
                .get(identity)
                .is_some_and(|at| now.duration_since(*at) < self.every)
            {
                false
            } else {
                if ran.len() >= REMEMBERED {
                    let every = self.every;
                    ran.retain(|_, at| now.duration_since(*at) < every);
                }
                ran.len() < REMEMBERED && {
                    ran.insert(identity.clone(), now);
                    true
                }
            }
        };
        let queued = taken
            && self
                .tx
                .try_send(Job {
                    identity: identity.clone(),
                    input: input_of(record, evidence),
                })
                .is_ok();
        if !queued {
            metrics
                .approval_policy_runs
                .with_label_values(&["skipped"])
                .inc();
            log::debug!("{identity}: the approval policy program was not run (ran recently, or its queue is full)");
        }
    }
}

/// What the program reads on stdin: the identity, the version, the facts
/// `approval_facts` names, and by feature the provisioning JWT's claims (without
/// its token) and the CSR's subject.
fn input_of(record: &ApprovalRecord, evidence: Evidence<'_>) -> Vec<u8> {
    let facts: serde_json::Map<String, serde_json::Value> = record
        .facts
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    let jwt = evidence
        .claims
        .and_then(|c| serde_json::to_value(c).ok())
        .map(|mut v| {
            if let Some(o) = v.as_object_mut() {
                o.remove("cht");
            }
            v
        });
    let csr = evidence
        .csr
        .and_then(|c| crate::crypto::csr::parse_csr(&c.csr).ok())
        .map(|n| json!({"common_name": n.common_name, "dns_names": n.dns_names}));
    serde_json::to_vec(&json!({
        "identity": record.identity.as_str(),
        "version": record.version,
        "facts": facts,
        "jwt": jwt,
        "csr": csr,
    }))
    .unwrap_or_default()
}

/// Starts the policy's threads for `approvals`; they end when `stop` is dropped.
pub(crate) fn start(
    approvals: &Arc<Approvals>,
    stop: &Receiver<()>,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    let Some(policy) = approvals.policy.as_ref() else {
        return Ok(Vec::new());
    };
    log::info!(
        "The approval policy program {} decides before a person does ({} at once)",
        policy.command,
        policy.running
    );
    (0..policy.running)
        .map(|n| {
            let (approvals, stop) = (Arc::clone(approvals), stop.clone());
            std::thread::Builder::new()
                .name(format!("approval-policy-{n}"))
                .spawn(move || run(&approvals, &stop))
        })
        .collect()
}

fn run(approvals: &Approvals, stop: &Receiver<()>) {
    let Some(policy) = approvals.policy.as_ref() else {
        return;
    };
    loop {
        let job = select! {
            recv(stop) -> _ => return,
            recv(policy.rx) -> job => match job {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        let started = Instant::now();
        let answer = match policy.program.run_for_status(
            job.identity.as_str(),
            &job.input,
            MAX_POLICY_OUTPUT,
            None,
        ) {
            Ok((status, stdout)) => classify(status, &stdout),
            Err(e) => PolicyAnswer::Failed(e.to_string()),
        };
        let metrics = &approvals.metrics;
        metrics
            .approval_policy_time
            .observe(&[], started.elapsed().as_secs_f64());
        metrics
            .approval_policy_runs
            .with_label_values(&[answer.label()])
            .inc();
        let by = Decider::Policy(&policy.command);
        match answer {
            PolicyAnswer::Approve => {
                approvals.decide(&[job.identity], Decision::Approved, "", by, None);
            }
            PolicyAnswer::Deny(reason) => {
                approvals.decide(&[job.identity], Decision::Denied, &reason, by, None);
            }
            PolicyAnswer::Undecided => {
                log::info!(
                    "The approval policy program leaves {} to a person",
                    job.identity
                );
            }
            PolicyAnswer::Failed(why) => {
                if let Some(note) = policy.failures.ready_note("failed runs") {
                    log::warn!(
                        "The approval policy program could not decide for {}: {why}; it waits for a person{note}",
                        job.identity
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn only_exit_zero_approves_and_only_exit_one_with_a_reason_denies() {
        assert_eq!(classify(exited(0), b""), PolicyAnswer::Approve);
        assert_eq!(classify(exited(0), b"listed\n"), PolicyAnswer::Approve);
        assert_eq!(
            classify(exited(1), b"not in the asset database\nmore\n"),
            PolicyAnswer::Deny("not in the asset database".into())
        );
        assert_eq!(classify(exited(2), b"not listed"), PolicyAnswer::Undecided);
        for (status, out) in [
            (exited(3), &b""[..]),
            (exited(0), b"\xff\xfe"),
            (exited(1), b"a\x1b[31mred"),
            (ExitStatus::from_raw(9), b""),
        ] {
            assert!(
                matches!(classify(status, out), PolicyAnswer::Failed(_)),
                "{status:?} {out:?}"
            );
        }
        let long = "x".repeat(MAX_REASON + 1);
        assert!(matches!(
            classify(exited(1), long.as_bytes()),
            PolicyAnswer::Failed(_)
        ));
    }
}
