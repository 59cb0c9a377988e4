//! One node's attempt as a state machine that does no I/O (boringtun's `noise::Tunn`
//! is the model): it is given what arrived and the time, and answers with what to
//! send, whether to run the helper, and when to wake it. It never sleeps, never reads
//! a clock and never touches a socket, so a worker thread runs one of its steps and
//! moves on: a node that is slow or silent holds memory, not a thread.
//!
//! The steps are the Go provisioner's (inventory, the features' `jwt`, `gen25519`,
//! `gencsr`, the helper, then `shutdown`, `release_update` or `configure` and
//! `restart`), each RPC with go-choria's tries and FiveSec back-off. What differs from
//! Go is what a node that reads the requests of others cannot do to us:
//!
//! - **Every request of the attempt stays watched until `restart` is answered.** The
//!   first valid reply to a request is remembered; a second, different valid reply in
//!   the node's name contests the attempt at once, whatever step it is at. Before
//!   `configure` nothing secret has left; after it the security event names what was
//!   handed out, so that the operator can revoke it.
//! - **A reply grace before anything secret is made.** The helper (which signs a
//!   certificate), the server JWT and the key transport wait until `reply_grace` has
//!   passed since each accepted request was sent (`csr_reply_grace` for `gencsr`), so
//!   the real node's reply, if someone else answered first, arrives while it still
//!   stops the attempt. The grace is a timer, not a thread: it costs latency only.
//! - **A refusal is believed only after the same grace**: a forged "Could not obtain
//!   provisioning lock" followed by the node's own reply is a contest, not a lock.
//! - **The upgrade slot** of a node back from an upgrade is given back only by an
//!   inventory that survived its grace.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::approval::Verdict;
use super::failure::AttemptError;
use super::helper::{CsrInfo, Ed25519Info, HelperError, HelperInput, HelperOutput};
use super::outcome::Outcome;
use super::progress::Progress;
use super::requests::RestartData;
use super::retry::CallError;
use super::sequence::NodeSequence;
use crate::choria::identity::Identity;
use crate::choria::protocol::mcorpc::RequestData;
use crate::choria::rpc::{Flush, Reply, RpcError, PROVISION_AGENT};
use crate::crypto::jwt::ProvisioningClaims;

/// A request of one attempt, numbered from 0 in the order it was made.
pub(crate) type Tag = u32;

/// What the driver hands the attempt.
#[derive(Debug)]
pub(crate) enum Input {
    /// The attempt begins: it makes its first requests.
    Start,
    /// Something arrived for request `tag`.
    Reply {
        /// The request.
        tag: Tag,
        /// What arrived.
        incoming: Incoming,
    },
    /// The helper ran (asked for by [`Effect::RunHelper`]).
    Helper(Result<HelperOutput, HelperError>),
    /// A wake-up the attempt asked for came (or anything else made the driver look).
    Tick,
    /// The daemon is stopping.
    Stop,
}

/// What the wire made of one message routed to a request.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A reply for this request from the node asked, decoded, with its RPC body.
    Reply(Reply, Vec<u8>),
    /// A message that is not a valid reply to this request (counted, skipped).
    Rejected {
        /// The `rejected_replies` label.
        reason: &'static str,
        /// What was wrong (no node value in it).
        detail: String,
    },
    /// A "no responders" status, not yet believed: anyone who reads the request can
    /// send one.
    NoResponders,
    /// Replies dropped unread because more came than a request keeps.
    Dropped(u64),
    /// The request could not be sent.
    Unsent(String),
    /// What the broker said of the probe the attempt asked for ([`Effect::Probe`]):
    /// `nobody` when its own "no responders" came before the probe's fence.
    Probed {
        /// Nobody subscribes to the node's subject.
        nobody: bool,
    },
}

/// A request the driver sends for the attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    /// The attempt's number for it: its replies come back with it.
    pub(crate) tag: Tag,
    /// `rpcutil` or `choria_provision`.
    pub(crate) agent: &'static str,
    /// The action.
    pub(crate) action: &'static str,
    /// The action's data, as Go's encoder writes it.
    pub(crate) data: Vec<u8>,
    /// Whether it leaves at once or with the next request.
    pub(crate) flush: Flush,
}

/// Something the attempt asks the driver to do.
#[derive(Debug)]
pub(crate) enum Effect {
    /// Send a request.
    Send(Request),
    /// Ask the broker whether anybody subscribes to the node's subject (a "no
    /// responders" came for request `Tag`); the answer comes as
    /// [`Incoming::Probed`].
    Probe(Tag),
    /// Run the helper with this input; the result comes as [`Input::Helper`].
    RunHelper(Vec<u8>),
}

/// What one step of the attempt produced.
#[derive(Debug, Default)]
pub(crate) struct Turn {
    /// What to do now, in order.
    pub(crate) effects: Vec<Effect>,
    /// When to give the attempt a [`Input::Tick`] at the latest (`None` with `done`).
    pub(crate) wake: Option<Instant>,
    /// The attempt has ended.
    pub(crate) done: Option<Outcome>,
}

/// The actions of the sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Jwt,
    Gen25519,
    Inventory,
    Gencsr,
    Shutdown,
    ReleaseUpdate,
    Configure,
    Restart,
}

impl Action {
    fn agent(self) -> &'static str {
        match self {
            Action::Inventory => crate::choria::rpc::RPCUTIL_AGENT,
            _ => PROVISION_AGENT,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Action::Jwt => "jwt",
            Action::Gen25519 => "gen25519",
            Action::Inventory => "inventory",
            Action::Gencsr => "gencsr",
            Action::Shutdown => "shutdown",
            Action::ReleaseUpdate => "release_update",
            Action::Configure => "configure",
            Action::Restart => "restart",
        }
    }

    /// Tries per call: Go's, but `gencsr` (Go tried once; a lost reply then cost a
    /// whole attempt, and the node makes a new key on every call, so a retry is safe).
    fn tries(self) -> u32 {
        match self {
            Action::Gen25519 | Action::Inventory | Action::Configure => 5,
            _ => 3,
        }
    }

    fn label(self) -> String {
        format!("{}#{}", self.agent(), self.name())
    }
}

/// Where one call is.
#[derive(Debug, Clone)]
enum Stage {
    /// A try is out; its reply is awaited until its deadline.
    Asking(Tag),
    /// Waiting to make the next try.
    BackingOff(Instant),
    /// The node refused; the refusal is believed once the grace has passed with no
    /// different reply.
    Refused {
        until: Instant,
        locked: bool,
        why: String,
    },
    /// A reply was accepted.
    Accepted(Tag),
}

#[derive(Debug)]
struct Call {
    action: Action,
    tries: u32,
    stage: Stage,
}

/// One request sent, watched until the attempt ends.
#[derive(Debug)]
struct Sent {
    call: usize,
    asked_at: Instant,
    deadline: Instant,
    /// The nonce a `gen25519` try signs.
    nonce: String,
    /// The SHA-256 of the first valid reply's body: a different one is a contest
    /// (kept as a digest, so that thousands of waiting attempts hold no reply).
    first: Option<Digest>,
    /// A reply came, or a probe found a subscriber: a "no responders" is forged.
    listened: bool,
    probing: bool,
    /// "No responders" statuses held while a probe says whether they are forged.
    statuses: u64,
    rejected: u64,
    last_rejection: String,
}

/// Where the attempt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The requests before the helper are out.
    Gather,
    /// Every one answered; waiting out the reply grace.
    Grace(Instant),
    /// The helper runs.
    Helper,
    /// One call after the helper (`shutdown`, `release_update`, `configure`,
    /// `restart`) is out.
    Calling,
}

/// What the attempt learnt from the node.
#[derive(Default)]
struct Learnt {
    claims: Option<Arc<ProvisioningClaims>>,
    ecdh_public: String,
    /// Boxed, as `csr`: only the features that ask for them fill them, and each of
    /// the thousands of attempts under way would otherwise carry their 144 bytes.
    ed25519: Option<Box<Ed25519Info>>,
    inventory: String,
    /// The inventory's bytes, held against `max_held_bytes` until the helper has it.
    inventory_held: Option<crate::budget::Charge>,
    version: String,
    upgradable: bool,
    csr: Option<Box<CsrInfo>>,
}

/// What an accepted reply gave.
enum Value {
    Jwt(String, String),
    Ed25519(Ed25519Info),
    Inventory {
        version: String,
        upgradable: bool,
        inventory: String,
    },
    Csr(CsrInfo),
    Empty,
}

/// What a try's reply check decided.
enum Check {
    Accept(Value),
    Retry(String),
}

/// One attempt for one node.
pub(crate) struct Attempt {
    identity: Identity,
    since: Instant,
    progress: Arc<Progress>,
    calls: Vec<Call>,
    sent: Vec<Sent>,
    phase: Phase,
    learnt: Learnt,
    answer: Option<Box<HelperOutput>>,
    /// The helper asked for an upgrade (for what the `release_update` reply means).
    upgrading_to: Option<String>,
    /// `configure` was sent: what it carried may be in the hands of whoever
    /// contests a reply from now on.
    handed_out: bool,
    /// Whether any valid reply came from the node: an attempt that ends on
    /// timeouts with none is a silent identity's.
    answered: bool,
    /// A try timed out.
    timed_out: bool,
    /// `configure`'s data, made once after the grace (every try sends the same
    /// encrypted key and signed server JWT).
    configure_data: Vec<u8>,
    effects: Vec<Effect>,
    done: Option<Outcome>,
    /// The attempt has ended: nothing more is handled.
    ended: bool,
}

type Step<T> = Result<T, AttemptError>;

impl Attempt {
    /// An attempt for `identity`, known (or last refreshed) since `since`, reporting
    /// to `progress`. Nothing happens until it is given [`Input::Start`].
    pub(crate) fn new(identity: Identity, since: Instant, progress: Arc<Progress>) -> Attempt {
        Attempt {
            identity,
            since,
            progress,
            calls: Vec::new(),
            sent: Vec::new(),
            phase: Phase::Gather,
            learnt: Learnt::default(),
            answer: None,
            upgrading_to: None,
            handed_out: false,
            answered: false,
            timed_out: false,
            configure_data: Vec::new(),
            effects: Vec::new(),
            done: None,
            ended: false,
        }
    }

    /// The node.
    pub(crate) fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Whether any valid reply came from the node so far.
    pub(crate) fn answered(&self) -> bool {
        self.answered
    }

    /// Whether a try timed out so far.
    pub(crate) fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// Values in the helper's input that must never reach a log line.
    pub(crate) fn secrets<'a>(&'a self, seq: &'a NodeSequence) -> Vec<&'a str> {
        let mut out = vec![seq.token()];
        if let Some(claims) = &self.learnt.claims {
            out.extend(
                [claims.cht.as_str(), claims.chpwd.as_str()]
                    .into_iter()
                    .filter(|v| !v.is_empty()),
            );
        }
        out
    }

    /// Takes what arrived at `now`, in order, then moves on as far as the time
    /// allows: every reply that is there is read before a deadline is judged, so a
    /// reply that waited for a worker is not taken for a timeout. `paused` is the
    /// pause flag as the driver read it.
    pub(crate) fn handle(
        &mut self,
        seq: &NodeSequence,
        inputs: impl IntoIterator<Item = Input>,
        now: Instant,
        paused: bool,
    ) -> Turn {
        if !self.ended {
            let mut result = Ok(());
            for input in inputs {
                result = match input {
                    Input::Start => self.start(seq, now, paused),
                    Input::Reply { tag, incoming } => self.incoming(seq, tag, incoming, now),
                    Input::Helper(result) => self.helper_ran(seq, result, now, paused),
                    Input::Tick => Ok(()),
                    Input::Stop => Err(AttemptError::Stopping {
                        identity: self.identity.clone(),
                    }),
                };
                if result.is_err() || self.done.is_some() {
                    break;
                }
            }
            if self.done.is_none() {
                result = result.and_then(|()| self.advance(seq, now, paused));
            }
            if let Err(e) = result {
                self.done = Some(e.into_outcome());
            }
        }
        let done = self.done.take().map(|o| {
            self.ended = true;
            seq.conclude(o, &self.progress)
        });
        Turn {
            effects: std::mem::take(&mut self.effects),
            wake: if self.ended { None } else { self.next_wake() },
            done,
        }
    }

    fn start(&mut self, seq: &NodeSequence, now: Instant, paused: bool) -> Step<()> {
        let waited = now.saturating_duration_since(self.since);
        if waited > seq.config().stale_after() {
            self.progress.step("stale");
            return Err(AttemptError::Stale { waited });
        }
        let features = &seq.config().features;
        let mut actions = Vec::with_capacity(4);
        if features.jwt {
            actions.push(Action::Jwt);
        }
        if features.ed25519 {
            actions.push(Action::Gen25519);
        }
        actions.push(Action::Inventory);
        if features.pki {
            actions.push(Action::Gencsr);
        }
        let last = actions.len() - 1;
        for (n, action) in actions.into_iter().enumerate() {
            let flush = if n == last { Flush::Now } else { Flush::Later };
            self.begin_call(seq, action, now, paused, flush)?;
        }
        Ok(())
    }

    /// Adds a call of `action` and makes its first try.
    fn begin_call(
        &mut self,
        seq: &NodeSequence,
        action: Action,
        now: Instant,
        paused: bool,
        flush: Flush,
    ) -> Step<()> {
        let call = self.calls.len();
        self.calls.push(Call {
            action,
            tries: 0,
            stage: Stage::BackingOff(now),
        });
        self.send_try(seq, call, now, paused, flush)
    }

    /// The request data of a try of `action` (and the nonce a `gen25519` try signs).
    fn data(&self, seq: &NodeSequence, action: Action) -> (Vec<u8>, String) {
        let token = seq.token();
        let mut out = Vec::with_capacity(128);
        let mut nonce = String::new();
        match action {
            Action::Jwt | Action::Shutdown => json!({ "token": token }).write_go(&mut out),
            Action::Gen25519 => {
                nonce = crate::crypto::nonce::new_nonce();
                json!({ "nonce": nonce, "token": token }).write_go(&mut out)
            }
            Action::Inventory => out.extend_from_slice(b"{}"),
            Action::Gencsr => json!({ "token": token, "cn": self.identity }).write_go(&mut out),
            Action::ReleaseUpdate => json!({
                "repository": seq.config().upgrades_repository,
                "token": token,
                "version": self.upgrading_to.as_deref().unwrap_or_default(),
            })
            .write_go(&mut out),
            Action::Configure => out.extend_from_slice(&self.configure_data),
            Action::Restart => RestartData { token }.write_go(&mut out),
        }
        (out, nonce)
    }

    /// Makes the next try of call `call`.
    fn send_try(
        &mut self,
        seq: &NodeSequence,
        call: usize,
        now: Instant,
        paused: bool,
        flush: Flush,
    ) -> Step<()> {
        let action = self.calls[call].action;
        if paused {
            return Err(AttemptError::Call(CallError::Failed(format!(
                "provisioning is paused, cannot perform {}",
                action.label()
            ))));
        }
        let (data, nonce) = self.data(seq, action);
        let tag = self.sent.len() as Tag;
        let c = &mut self.calls[call];
        c.tries += 1;
        c.stage = Stage::Asking(tag);
        self.progress.rpc_try(action.name(), c.tries);
        self.sent.push(Sent {
            call,
            asked_at: now,
            deadline: now + seq.timeout(action.agent()),
            nonce,
            first: None,
            listened: false,
            probing: false,
            statuses: 0,
            rejected: 0,
            last_rejection: String::new(),
        });
        self.effects.push(Effect::Send(Request {
            tag,
            agent: action.agent(),
            action: action.name(),
            data,
            flush,
        }));
        Ok(())
    }

    /// Starts a call after the helper.
    fn call(&mut self, seq: &NodeSequence, action: Action, now: Instant, paused: bool) -> Step<()> {
        self.phase = Phase::Calling;
        self.begin_call(seq, action, now, paused, Flush::Now)
    }

    /// Moves on as far as the time allows: timeouts, back-offs and refusals whose
    /// time came, then the next step once every call it waits for is answered.
    fn advance(&mut self, seq: &NodeSequence, now: Instant, paused: bool) -> Step<()> {
        self.advance_calls(seq, now, paused)?;
        let all_accepted = self
            .calls
            .iter()
            .all(|c| matches!(c.stage, Stage::Accepted(_)));
        match self.phase {
            Phase::Gather if all_accepted => {
                let until = self
                    .calls
                    .iter()
                    .filter_map(|c| match c.stage {
                        Stage::Accepted(tag) => {
                            Some(self.sent[tag as usize].asked_at + self.grace(seq, c.action))
                        }
                        _ => None,
                    })
                    .max()
                    .unwrap_or(now);
                self.phase = Phase::Grace(until);
                self.progress.step("reply_grace");
                self.advance(seq, now, paused)
            }
            Phase::Grace(until) if until <= now => self.start_helper(seq),
            Phase::Calling if all_accepted => self.called(seq, now, paused),
            _ => Ok(()),
        }
    }

    /// Each call's due step: a try that timed out is retried, a back-off that ran
    /// out sends the next try, a refusal past its grace ends the attempt.
    fn advance_calls(&mut self, seq: &NodeSequence, now: Instant, paused: bool) -> Step<()> {
        for call in 0..self.calls.len() {
            match self.calls[call].stage.clone() {
                Stage::Asking(tag) => {
                    let sent = &self.sent[tag as usize];
                    if sent.deadline > now || sent.probing {
                        continue;
                    }
                    let action = self.calls[call].action;
                    self.timed_out = true;
                    seq.metrics().observe_rpc(
                        action.agent(),
                        action.name(),
                        now.saturating_duration_since(sent.asked_at).as_secs_f64(),
                    );
                    let e = RpcError::NoReply {
                        identity: self.identity.clone(),
                        waited: now.saturating_duration_since(sent.asked_at),
                        rejected: (sent.rejected > 0)
                            .then(|| (sent.rejected, sent.last_rejection.clone())),
                    };
                    self.retry(seq, call, e.to_string(), now)?;
                }
                Stage::BackingOff(until) if until <= now => {
                    self.send_try(seq, call, now, paused, Flush::Now)?;
                }
                Stage::Refused {
                    until, locked, why, ..
                } if until <= now => {
                    let action = self.calls[call].action;
                    let label = action.label();
                    if locked {
                        seq.metrics().lock_refusals.inc();
                        log::info!(
                            "{label} refused for {}: another provisioner holds its provisioning lock: {why}",
                            self.identity
                        );
                        return Err(AttemptError::Call(CallError::Locked(format!(
                            "{label} refused for {}: {why}",
                            self.identity
                        ))));
                    }
                    let what = format!("failed for {}: {why}", self.identity);
                    return Err(self.failed(seq, action, what));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The grace is over and the inventory survived it: the helper runs now, unless
    /// the node waits for an operator's approval or was denied.
    fn start_helper(&mut self, seq: &NodeSequence) -> Step<()> {
        // A node back from an upgrade on another version gives its slot back.
        seq.slots().seen(&self.identity, &self.learnt.version);
        seq.warn_if_lockless(&self.identity, &self.learnt.version);
        if self.held_for_approval(seq) {
            return Ok(());
        }
        self.phase = Phase::Helper;
        self.progress.step("helper");
        let input = HelperInput {
            identity: &self.identity,
            csr: self.learnt.csr.as_deref(),
            ed25519_pubkey: self.learnt.ed25519.as_deref(),
            inventory: &self.learnt.inventory,
            jwt: self.learnt.claims.as_deref(),
        };
        let bytes = serde_json::to_vec(&input)
            .map_err(|e| AttemptError::Encode(format!("could not JSON encode host: {e}")))?;
        // Only the helper reads it: not kept while the attempt goes on.
        self.learnt.inventory = String::new();
        self.learnt.inventory_held = None;
        self.effects.push(Effect::RunHelper(bytes));
        Ok(())
    }

    /// Asks the approval gate (`approval: required`); true when the attempt ends
    /// here, before anything is made: the node is pending or denied.
    fn held_for_approval(&mut self, seq: &NodeSequence) -> bool {
        let Some(gate) = seq.gate() else {
            return false;
        };
        let evidence = super::approval::Evidence {
            claims: self.learnt.claims.as_deref(),
            csr: self.learnt.csr.as_deref(),
        };
        let verdict = gate.judge(
            &self.identity,
            &self.learnt.version,
            &self.learnt.inventory,
            evidence,
        );
        let outcome = match verdict {
            Verdict::Go => return false,
            Verdict::Held => Outcome::PendingApproval(format!(
                "{} waits for an operator's approval (choria-provisioner pending)",
                self.identity
            )),
            Verdict::Denied => {
                Outcome::Denied(format!("{} was denied by an operator", self.identity))
            }
        };
        self.progress.step("approval");
        self.learnt.inventory = String::new();
        self.learnt.inventory_held = None;
        self.done = Some(outcome);
        true
    }

    /// The call after the helper was answered.
    fn called(&mut self, seq: &NodeSequence, now: Instant, paused: bool) -> Step<()> {
        let last = self.calls.last().map(|c| c.action);
        match last {
            Some(Action::Shutdown) => {
                seq.metrics().helper_shutdown_requests.inc();
                self.done = Some(Outcome::ShutDown);
                Ok(())
            }
            Some(Action::ReleaseUpdate) => {
                log::info!(
                    "Upgrading {} from {} to {}",
                    self.identity,
                    self.learnt.version,
                    self.upgrading_to.as_deref().unwrap_or_default()
                );
                self.done = Some(Outcome::Upgraded);
                Ok(())
            }
            Some(Action::Configure) => {
                self.configure_data = Vec::new();
                self.progress.step("restart");
                self.call(seq, Action::Restart, now, paused)
            }
            Some(Action::Restart) => {
                self.done = Some(Outcome::Done);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The earliest time something is due: a try's deadline, a back-off's end, a
    /// refusal's or the reply grace's end.
    fn next_wake(&self) -> Option<Instant> {
        let calls = self.calls.iter().filter_map(|c| match &c.stage {
            Stage::Asking(tag) => {
                let sent = &self.sent[*tag as usize];
                (!sent.probing).then_some(sent.deadline)
            }
            Stage::BackingOff(until) => Some(*until),
            Stage::Refused { until, .. } => Some(*until),
            Stage::Accepted(_) => None,
        });
        let grace = match self.phase {
            Phase::Grace(until) => Some(until),
            _ => None,
        };
        calls.chain(grace).min()
    }
}

mod after_helper;
mod arrivals;

use arrivals::Digest;

#[cfg(test)]
mod tests;
