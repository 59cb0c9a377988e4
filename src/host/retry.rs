//! The one RPC wrapper every call to a node goes through (`spec/provisioner.md` §2.4):
//! pause check before and between tries, go-choria's FiveSec back-off with jitter,
//! `rpc_time{rpc}` per try, `rpc_errors{rpc}` once per failed call.
//!
//! Beyond Go: a refusal that retrying cannot change (wrong token, node not in
//! provisioning mode, provisioning lock held by another provisioner) fails at once
//! with the node's own message; the error of an exhausted call names the action, the
//! node, the number of tries and the last real reason (Go said `context canceled`);
//! and a stopping daemon is noticed between tries.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::node_rpc::{AskedRpc, NodeRpc, ReplyWatch};
use crate::backoff::FIVE_SEC;
use crate::choria::identity::Identity;
use crate::choria::protocol::mcorpc::RequestData;
use crate::choria::rpc::{Contested, Flush, Reply, RpcError};
use crate::config::Pause;
use crate::metrics::Metrics;

/// Status messages of go-choria's provision agent that no retry can change
/// (`providers/agent/mcorpc/golang/provision`).
pub const FATAL_REFUSALS: [&str; 6] = [
    "Incorrect provision token supplied",
    "Could not obtain provisioning lock",
    "Cannot reconfigure a server that is not in provisioning mode",
    "Cannot update a server that is not in provisioning mode",
    "Cannot restart a server that is not in provisioning mode or with no token set",
    "Cannot shutdown a server that is not in provisioning mode or with no token set",
];

/// go-choria's abort when another caller holds the node's provisioning lock.
pub const LOCK_REFUSAL: &str = "Could not obtain provisioning lock";

/// True when `statusmsg` is a refusal retrying cannot change.
pub fn is_fatal_refusal(statusmsg: &str) -> bool {
    FATAL_REFUSALS.iter().any(|m| statusmsg.starts_with(m))
        || statusmsg == "Version updates is not enabled in the configuration"
}

/// What one try's reply check decided.
pub enum Check<T> {
    /// The reply is good.
    Accept(T),
    /// The reply is bad in a way another try may fix.
    Retry(String),
    /// The reply is bad in a way no try will fix.
    Fail(String),
}

/// `agent#action`: an RPC's name in messages and its `rpc` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label(&'static str, &'static str);

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.0, self.1)
    }
}

/// Everything the wrapper needs for one call.
pub struct Call<'a> {
    /// The node.
    pub identity: &'a Identity,
    /// Agent name (`choria_provision`, `rpcutil`).
    pub agent: &'static str,
    /// Action name.
    pub action: &'static str,
    /// Maximum tries.
    pub tries: usize,
    /// Per-try timeout.
    pub timeout: Duration,
}

impl Call<'_> {
    /// `agent#action`, the `rpc` label, written where it is shown (a call that
    /// succeeds makes no string of it).
    pub fn label(&self) -> Label {
        Label(self.agent, self.action)
    }
}

/// What every call of one attempt shares: the node RPC, metrics, the pause flag and
/// the stop flag.
pub struct Retrier<'a> {
    /// The node RPC (the wire, or a fake in tests).
    pub rpc: &'a dyn NodeRpc,
    /// Metrics.
    pub metrics: &'a Metrics,
    /// Pause flag.
    pub pause: &'a Pause,
    /// Set when the daemon is stopping.
    pub stopping: &'a AtomicBool,
    /// The attempt's position, moved to each call's action and try.
    pub progress: &'a super::progress::Progress,
}

/// Why a call gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// Tries exhausted, a fatal refusal, a pause or a stop: the message says which.
    Failed(String),
    /// No server subscribes to the node's subject (a made-up identity, or a node that
    /// is gone): nobody will ever answer.
    Unreachable(String),
    /// The node's provisioning lock is held by another caller (another provisioner):
    /// not retried here.
    Locked(String),
    /// Someone else answers in the node's name (a try's replies were flooded): not
    /// retried here, no try's reply can be trusted.
    Contested(Contested),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Failed(why) | CallError::Unreachable(why) | CallError::Locked(why) => {
                f.write_str(why)
            }
            CallError::Contested(contested) => contested.fmt(f),
        }
    }
}

/// A call whose first try is on its way ([`Retrier::send`]); [`Retrier::finish`]
/// awaits it.
pub struct Sent<'r> {
    first: Result<Box<dyn AskedRpc<'r> + 'r>, RpcError>,
    started: Instant,
}

impl<'r> Retrier<'r> {
    /// Runs `call`, building the request data per try with `data` and judging each
    /// OK reply with `check`. Non-OK statuses are retried unless fatal. The accepted
    /// try's [`ReplyWatch`] keeps listening for other replies in the node's name.
    pub fn run<D: RequestData, T>(
        &self,
        call: &Call,
        data: impl FnMut() -> D,
        check: impl FnMut(&mut Reply) -> Check<T>,
    ) -> Result<(T, Box<dyn ReplyWatch + 'r>), CallError> {
        self.refuse_if_paused(call)?;
        self.tries(call, None, data, check)
    }

    /// Sends `call`'s first try (its data from `data`) and returns without waiting, so
    /// that calls which do not depend on each other travel together; `flush` is
    /// [`Flush::Later`] for all but the last of them. [`Retrier::finish`] awaits it.
    pub fn send<D: RequestData>(
        &self,
        call: &Call,
        mut data: impl FnMut() -> D,
        flush: Flush,
    ) -> Result<Sent<'r>, CallError> {
        self.refuse_if_paused(call)?;
        self.progress.rpc_try(call.action, 1);
        let started = Instant::now();
        let first = self.rpc.ask(
            call.identity,
            call.agent,
            call.action,
            &data(),
            call.timeout,
            flush,
        );
        Ok(Sent { first, started })
    }

    /// [`Retrier::run`] for a call whose first try was `sent`: that try's reply is
    /// judged first, and the later tries (if any) are made as `run` makes them.
    pub fn finish<D: RequestData, T>(
        &self,
        call: &Call,
        sent: Sent<'r>,
        data: impl FnMut() -> D,
        check: impl FnMut(&mut Reply) -> Check<T>,
    ) -> Result<(T, Box<dyn ReplyWatch + 'r>), CallError> {
        self.tries(call, Some(sent), data, check)
    }

    fn refuse_if_paused(&self, call: &Call) -> Result<(), CallError> {
        if self.pause.paused() {
            return Err(CallError::Failed(format!(
                "provisioning is paused, cannot perform {}",
                call.label()
            )));
        }
        Ok(())
    }

    /// The tries of `call`, the first one already `sent` or made here.
    fn tries<D: RequestData, T>(
        &self,
        call: &Call,
        mut sent: Option<Sent<'r>>,
        mut data: impl FnMut() -> D,
        mut check: impl FnMut(&mut Reply) -> Check<T>,
    ) -> Result<(T, Box<dyn ReplyWatch + 'r>), CallError> {
        let label = call.label();
        let mut last = String::from("no try was made");
        for attempt in 1..=call.tries {
            if attempt > 1 {
                if let Some(why) = self.sleep(FIVE_SEC.duration(attempt - 1)) {
                    return Err(self.failed(label, format!("failed for {}: {why}", call.identity)));
                }
            }
            self.progress.rpc_try(call.action, attempt as u32);
            let (started, result) = match sent.take() {
                Some(Sent { first, started }) => (started, first.and_then(|asked| asked.answer())),
                None => {
                    let started = Instant::now();
                    let result = self.rpc.call(
                        call.identity,
                        call.agent,
                        call.action,
                        &data(),
                        call.timeout,
                    );
                    (started, result)
                }
            };
            self.metrics
                .observe_rpc(call.agent, call.action, started.elapsed().as_secs_f64());
            // (fatal?, why) for a try that did not end in an accepted reply.
            let (fatal, why) = match result {
                Err(e @ RpcError::NoResponders { .. }) => {
                    return Err(CallError::Unreachable(format!("{label} failed: {e}")));
                }
                Err(RpcError::Contested(contested)) => {
                    log::error!(
                        "SECURITY: {contested}; {} is tried again after the cool-down",
                        call.identity
                    );
                    return Err(CallError::Contested(contested));
                }
                Err(e) => (false, e.to_string()),
                Ok(answer) if answer.reply.statuscode != 0 => {
                    let reply = &answer.reply;
                    // The node's own words: escaped and cut before they reach a log line.
                    let why = format!(
                        "invalid response from {}: {} ({})",
                        reply.sender,
                        crate::untrusted::shown(&reply.statusmsg),
                        reply.statuscode
                    );
                    if reply.statusmsg.starts_with(LOCK_REFUSAL) {
                        return Err(CallError::Locked(format!(
                            "{label} refused for {}: {why}",
                            call.identity
                        )));
                    }
                    (is_fatal_refusal(&reply.statusmsg), why)
                }
                Ok(mut answer) => match check(&mut answer.reply) {
                    Check::Accept(value) => return Ok((value, answer.watch)),
                    Check::Fail(why) => (true, why),
                    Check::Retry(why) => (false, why),
                },
            };
            if fatal {
                return Err(self.failed(label, format!("failed for {}: {why}", call.identity)));
            }
            log::warn!(
                "{label} try {attempt}/{} for {} failed: {why}",
                call.tries,
                call.identity
            );
            self.progress
                .record(|f| f.retried(&format!("{label} try {attempt}/{}: {why}", call.tries)));
            last = why;
        }
        Err(self.failed(
            label,
            format!(
                "failed for {} after {} tries: {last}",
                call.identity, call.tries
            ),
        ))
    }

    /// A call that failed for good: counted under its `rpc` label, and the error that
    /// says so (`what` follows the label).
    fn failed(&self, label: Label, what: String) -> CallError {
        self.metrics
            .rpc_errors
            .with_label_values(&[&label.to_string()])
            .inc();
        CallError::Failed(format!("{label} {what}"))
    }

    /// Sleeps `d` unless paused or stopping first; returns why it was cut short.
    fn sleep(&self, d: Duration) -> Option<String> {
        let until = Instant::now() + d;
        loop {
            if self.pause.paused() {
                return Some("provisioning was paused".into());
            }
            if self.stopping.load(Ordering::Relaxed) {
                return Some("the provisioner is shutting down".into());
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatal_refusals_are_recognised() {
        assert!(is_fatal_refusal("Incorrect provision token supplied"));
        assert!(is_fatal_refusal("Could not obtain provisioning lock"));
        assert!(!is_fatal_refusal("Could not create keypair: entropy"));
        assert!(!is_fatal_refusal("OK"));
    }
}
