//! What arrives for an attempt: each reply checked against its request and judged
//! (accepted, retried, refused or contested), and what an accepted reply said.

use crate::backoff::FIVE_SEC;
use crate::choria::identity::Identity;
use crate::choria::rpc::{Contest, Contested, Reply, RpcError};
use crate::node::failure::AttemptError;
use crate::node::helper::{CsrInfo, Ed25519Info};
use crate::node::replies::{
    self, BadReplyData, Gen25519Reply, GencsrReply, InventoryReply, JwtReply,
};
use crate::node::retry::{is_fatal_refusal, CallError, LOCK_REFUSAL};
use crate::node::sequence::NodeSequence;
use std::time::{Duration, Instant};

use super::{Action, Attempt, Check, Effect, Incoming, Stage, Step, Tag, Value};

impl Attempt {
    pub(super) fn incoming(
        &mut self,
        seq: &NodeSequence,
        tag: Tag,
        incoming: Incoming,
        now: Instant,
    ) -> Step<()> {
        let Some(sent) = self.sent.get_mut(tag as usize) else {
            return Ok(());
        };
        let metrics = seq.metrics();
        match incoming {
            Incoming::Rejected { reason, detail } => {
                metrics.rejected_replies.with_label_values(&[reason]).inc();
                sent.rejected += 1;
                sent.last_rejection = detail;
                Ok(())
            }
            Incoming::Dropped(dropped) => {
                metrics
                    .rejected_replies
                    .with_label_values(&["overflow"])
                    .inc_by(dropped);
                let call = sent.call;
                Err(self.contest(seq, call, Contest::Flooded { dropped }))
            }
            Incoming::Unsent(why) => {
                let call = sent.call;
                if matches!(self.calls[call].stage, Stage::Asking(t) if t == tag) {
                    return self.retry(seq, call, why, now);
                }
                Ok(())
            }
            Incoming::NoResponders => {
                let current = matches!(self.calls[sent.call].stage, Stage::Asking(t) if t == tag);
                if sent.listened || !current {
                    count_forged_status(seq, &self.identity, 1);
                } else {
                    sent.statuses += 1;
                    if !sent.probing {
                        sent.probing = true;
                        self.effects.push(Effect::Probe(tag));
                    }
                }
                Ok(())
            }
            Incoming::Probed { nobody } => self.probed(seq, tag, nobody),
            Incoming::Reply(reply, body) => self.replied(seq, tag, reply, &body, now),
        }
    }

    /// The probe of request `tag` answered: `nobody` listens on the node's subject,
    /// or somebody does (then the "no responders" statuses it held were forged).
    fn probed(&mut self, seq: &NodeSequence, tag: Tag, nobody: bool) -> Step<()> {
        let sent = &mut self.sent[tag as usize];
        sent.probing = false;
        let held = std::mem::take(&mut sent.statuses);
        let current = matches!(self.calls[sent.call].stage, Stage::Asking(t) if t == tag);
        if nobody && !sent.listened && current {
            seq.metrics().unreachable_nodes.inc();
            let label = self.calls[sent.call].action.label();
            let e = RpcError::NoResponders {
                identity: self.identity.clone(),
            };
            return Err(AttemptError::Call(CallError::Unreachable(format!(
                "{label} failed: {e}"
            ))));
        }
        sent.listened = true;
        // The broker says somebody listens (or a reply came meanwhile): the
        // statuses were forged.
        count_forged_status(seq, &self.identity, held);
        Ok(())
    }

    /// A valid reply to request `tag`: a different twin contests the call, an
    /// identical copy is ignored, and the first reply to the call's current try is
    /// judged.
    fn replied(
        &mut self,
        seq: &NodeSequence,
        tag: Tag,
        reply: Reply,
        body: &[u8],
        now: Instant,
    ) -> Step<()> {
        let sent = &mut self.sent[tag as usize];
        sent.listened = true;
        if !sent.probing {
            let held = std::mem::take(&mut sent.statuses);
            count_forged_status(seq, &self.identity, held);
        }
        let call = sent.call;
        let digest = digest(body);
        match &sent.first {
            Some(first) if *first != digest => {
                return Err(self.contest(seq, call, Contest::Different))
            }
            // An identical copy (a broker's redelivery, a replayed reply).
            Some(_) => return Ok(()),
            None => sent.first = Some(digest),
        }
        self.answered = true;
        let asked_at = sent.asked_at;
        // Only the reply to the call's current try is judged; one to an earlier try
        // that timed out is watched, nothing more.
        if !matches!(self.calls[call].stage, Stage::Asking(t) if t == tag) {
            return Ok(());
        }
        let action = self.calls[call].action;
        seq.metrics().observe_rpc(
            action.agent(),
            action.name(),
            now.saturating_duration_since(asked_at).as_secs_f64(),
        );
        self.judge(seq, call, tag, reply, now)
    }

    /// The reply to call `call`'s current try.
    pub(super) fn judge(
        &mut self,
        seq: &NodeSequence,
        call: usize,
        tag: Tag,
        mut reply: Reply,
        now: Instant,
    ) -> Step<()> {
        let action = self.calls[call].action;
        if reply.statuscode != 0 {
            // The node's own words: escaped and cut before they reach a log line.
            let why = format!(
                "invalid response from {}: {} ({})",
                reply.sender,
                crate::untrusted::shown(&reply.statusmsg),
                reply.statuscode
            );
            let locked = reply.statusmsg.starts_with(LOCK_REFUSAL);
            if locked || is_fatal_refusal(&reply.statusmsg) {
                // Believed once a different reply had its chance to come.
                let until = self.sent[tag as usize].asked_at + self.grace(seq, action);
                self.calls[call].stage = Stage::Refused { until, locked, why };
                return Ok(());
            }
            return self.retry(seq, call, why, now);
        }
        let nonce = std::mem::take(&mut self.sent[tag as usize].nonce);
        match check(action, &mut reply, &nonce) {
            Check::Accept(value) => {
                self.calls[call].stage = Stage::Accepted(tag);
                self.accepted(seq, value)
            }
            Check::Retry(why) => self.retry(seq, call, why, now),
        }
    }

    /// The grace a reply to `action` gets before what it said is trusted.
    pub(super) fn grace(&self, seq: &NodeSequence, action: Action) -> Duration {
        let grace = seq.config().reply_grace;
        if action == Action::Gencsr {
            // A real node answers only once it has made its key (RSA 2048 in
            // go-choria: tens of milliseconds to seconds).
            grace.max(seq.config().csr_reply_grace)
        } else {
            grace
        }
    }

    /// Stores what an accepted reply said, checking what can be checked at once.
    pub(super) fn accepted(&mut self, seq: &NodeSequence, value: Value) -> Step<()> {
        let identity = &self.identity;
        match value {
            Value::Jwt(jwt, ecdh) => {
                if jwt.is_empty() {
                    return Err(AttemptError::NoJwt {
                        identity: identity.clone(),
                    });
                }
                let claims = seq.keys().verify_provisioning_jwt(identity, &jwt)?;
                self.progress.record(|f| {
                    let jti = &claims.standard.jti;
                    f.provisioning_jwt_id = (!jti.is_empty()).then(|| crate::untrusted::shown(jti));
                    f.provisioning_jwt_expires = claims.standard.exp;
                });
                self.learnt.claims = Some(claims);
                self.learnt.ecdh_public = ecdh;
            }
            Value::Ed25519(info) => self.learnt.ed25519 = Some(Box::new(info)),
            Value::Inventory {
                version,
                upgradable,
                inventory,
            } => {
                if !version.is_empty() {
                    self.progress
                        .record(|f| f.version_before = Some(crate::untrusted::shown(&version)));
                }
                self.learnt.version = version;
                self.learnt.upgradable = upgradable;
                // In memory already: charged whatever the budget holds, so that
                // while many are kept, new replies give way.
                self.learnt.inventory_held = Some(seq.budget().charge(inventory.len()));
                self.learnt.inventory = inventory;
            }
            Value::Csr(csr) => {
                seq.keys().check_csr(identity, &csr.csr)?;
                self.learnt.csr = Some(Box::new(csr));
            }
            Value::Empty => {}
        }
        Ok(())
    }

    /// A try of call `call` failed with `why`: tried again after the back-off, or
    /// the call fails once its tries are spent.
    pub(super) fn retry(
        &mut self,
        seq: &NodeSequence,
        call: usize,
        why: String,
        now: Instant,
    ) -> Step<()> {
        let c = &mut self.calls[call];
        let (action, tries) = (c.action, c.tries);
        let max = action.tries();
        let label = action.label();
        if tries >= max {
            let what = format!("failed for {} after {max} tries: {why}", self.identity);
            return Err(self.failed(seq, action, what));
        }
        log::warn!(
            "{label} try {tries}/{max} for {} failed: {why}",
            self.identity
        );
        self.progress
            .record(|f| f.retried(&format!("{label} try {tries}/{max}: {why}")));
        c.stage = Stage::BackingOff(now + FIVE_SEC.duration(tries as usize));
        Ok(())
    }

    /// A call that failed for good: counted under its `rpc` label.
    pub(super) fn failed(&self, seq: &NodeSequence, action: Action, what: String) -> AttemptError {
        let label = action.label();
        seq.metrics().rpc_errors.with_label_values(&[&label]).inc();
        AttemptError::Call(CallError::Failed(format!("{label} {what}")))
    }

    /// Someone else answers in the node's name: counted, logged as a security event
    /// naming what was handed out if `configure` was sent, and the attempt stops.
    pub(super) fn contest(&self, seq: &NodeSequence, call: usize, why: Contest) -> AttemptError {
        let rpc = self.calls[call].action.label();
        let metrics = seq.metrics();
        metrics.contested_replies.with_label_values(&[&rpc]).inc();
        let contested = Contested {
            identity: self.identity.clone(),
            rpc,
            why,
        };
        if self.handed_out {
            metrics.contested_after_configure.inc();
            let facts = self.progress.facts();
            let cert = match (&facts.certificate_serial, &facts.certificate_sha256) {
                (Some(serial), Some(sha)) => format!("certificate serial {serial} (sha256 {sha})"),
                _ => "no certificate".to_string(),
            };
            let jwt = facts.server_jwt_id.as_deref().map_or_else(
                || "no server JWT".to_string(),
                |id| format!("server JWT id {id}"),
            );
            log::error!(
                "SECURITY: {contested} after its configuration was sent: {cert}, {jwt} and the \
                 private key it carried may be in another's hands; revoke them"
            );
            self.progress.record(|f| {
                f.retried(&format!(
                    "contested after configure: {cert}, {jwt}; revoke them"
                ))
            });
        } else {
            seq.security_warning(format_args!(
                "{contested}; nothing secret was sent to {}, it is tried again after the cool-down",
                self.identity
            ));
        }
        AttemptError::Contested {
            identity: self.identity.clone(),
            contested,
        }
    }
}

/// A reply body's SHA-256.
pub(super) type Digest = [u8; 32];

pub(super) fn digest(body: &[u8]) -> Digest {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, body).as_ref());
    out
}

/// Counts `n` "no responders" statuses that a probe or a reply proved false.
pub(super) fn count_forged_status(seq: &NodeSequence, identity: &Identity, n: u64) {
    if n == 0 {
        return;
    }
    seq.metrics()
        .rejected_replies
        .with_label_values(&["forged_no_responders"])
        .inc_by(n);
    log::debug!("Ignored {n} forged \"no responders\" statuses for {identity}");
}

/// Reads an OK reply to `action` (`nonce`: what a `gen25519` try asked to sign).
pub(super) fn check(action: Action, reply: &mut Reply, nonce: &str) -> Check {
    let data = &reply.data;
    match action {
        Action::Jwt => match replies::read::<JwtReply>(data, "jwt") {
            Ok(d) => Check::Accept(Value::Jwt(
                d.jwt.unwrap_or_default(),
                d.ecdh_public.unwrap_or_default(),
            )),
            Err(why) => Check::Retry(why.to_string()),
        },
        Action::Gen25519 => {
            let d = match replies::read::<Gen25519Reply>(data, "gen25519") {
                Ok(d) => d,
                Err(why) => return Check::Retry(why.to_string()),
            };
            let info = Ed25519Info {
                public_key: d.public_key.unwrap_or_default(),
                directory: d.directory.unwrap_or_default(),
                signature: d.signature.unwrap_or_default(),
            };
            match crate::crypto::nonce::verify_nonce_signature(
                &info.public_key,
                nonce,
                &info.signature,
            ) {
                Ok(()) => Check::Accept(Value::Ed25519(info)),
                Err(e) => Check::Retry(e.to_string()),
            }
        }
        Action::Inventory => {
            let d = match replies::read::<InventoryReply>(data, "inventory") {
                Ok(d) => d,
                Err(why) => return Check::Retry(why.to_string()),
            };
            // Go keeps the whole object for the helper, re-encoded as it writes a
            // decoded map (keys sorted at every depth, numbers as float64),
            // `upgradable` added.
            let mut inventory = Vec::with_capacity(data.text().len() + 32);
            if let Err(e) = crate::choria::protocol::gojson::write_map(
                &mut inventory,
                data.text(),
                &[("upgradable", "false")],
            ) {
                return Check::Retry(BadReplyData::new("inventory", &e).to_string());
            }
            Check::Accept(Value::Inventory {
                version: d.version.unwrap_or_default().into_owned(),
                upgradable: d.upgradable.unwrap_or(false),
                inventory: String::from_utf8(inventory).expect("JSON is UTF-8"),
            })
        }
        Action::Gencsr => match replies::read::<GencsrReply>(data, "gencsr") {
            Ok(d) => Check::Accept(Value::Csr(CsrInfo {
                csr: d.csr.unwrap_or_default(),
                public_key: d.public_key.unwrap_or_default(),
                ssldir: d.ssldir.unwrap_or_default(),
            })),
            Err(why) => Check::Retry(why.to_string()),
        },
        _ => Check::Accept(Value::Empty),
    }
}
