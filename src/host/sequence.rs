//! The provisioning sequence for one node (`spec/provisioner.md` §2.2): every step in
//! order with its condition, tries and timeout, ending in an [`Outcome`].
//!
//! A [`NodeSequence`] holds what every attempt shares (configuration, keys loaded
//! once at start, the node RPC, metrics); an attempt keeps what it learnt from the
//! node in an `Attempt`. Nothing survives between attempts, as in Go: a node queued
//! again is asked everything again. The sequence talks to nodes only through
//! [`NodeRpc`], so its rules are unit-tested against a scripted fake node
//! (`sequence_tests.rs`). A step returns `Err` only when the attempt failed; an
//! attempt that ends early without failing (deferred, shut down, upgraded) returns
//! its outcome.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::replies::{self, BadReplyData, Gen25519Reply, GencsrReply, InventoryReply, JwtReply};
use super::requests::{ConfigureData, RestartData};

use super::failure::AttemptError;
use super::helper::{CsrInfo, Ed25519Info, Helper, HelperError, HelperInput, HelperOutput};
use super::key_material::{KeyLoadError, KeyMaterial};
use super::loop_check::{HelperStamp, LoopWarnings};
use super::node_rpc::{NodeRpc, ReplyWatch};
use super::outcome::Outcome;
use super::progress::{certificate_facts, Progress};
use super::retry::{Call, Check, Retrier, Sent};
use super::upgrade_slots::{UpgradeSlots, SLOT_TIMEOUT};
use crate::choria::identity::Identity;
use crate::choria::rpc::Flush;
use crate::config::{Config, Pause};
use crate::crypto::jwt::ProvisioningClaims;
use crate::metrics::Metrics;

/// Per-try timeouts: `discovery_timeout` + the agent's DDL timeout.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// `choria_provision` actions (22 s by default).
    pub provision: Duration,
    /// `rpcutil` actions (4 s by default).
    pub rpcutil: Duration,
    /// How long after sending `jwt`, `gen25519`, `gencsr` or `inventory` a second,
    /// different reply in the node's name still stops the attempt before anything
    /// secret is sent ([`REPLY_GRACE`] by default; for `gencsr` at least the
    /// configuration's `csr_reply_grace`). It is counted from the request, not from
    /// the first reply: a real node answers in its own time after it was asked,
    /// whoever answered first, and the window then also covers the round trip.
    pub reply_grace: Duration,
}

/// The default [`Timeouts::reply_grace`]. It runs concurrently with the rest of the
/// attempt (the inventory round trip and the helper above all), so it only delays
/// nodes that got that far in less time.
pub const REPLY_GRACE: Duration = Duration::from_millis(50);

/// What every attempt shares.
pub struct NodeSequence {
    config: Arc<Config>,
    rpc: Arc<dyn NodeRpc>,
    metrics: Arc<Metrics>,
    pause: Arc<Pause>,
    helper: Helper,
    timeouts: Timeouts,
    keys: KeyMaterial,
    /// Warns (once a minute) about active-active nodes older than go-choria v0.29.
    lockless: crate::throttle::Throttle,
    slots: Arc<UpgradeSlots>,
    loops: LoopWarnings,
}

/// The first go-choria release whose provisioning agent has the provisioning lock.
pub const LOCK_SINCE: &str = "0.29.0";

/// What one attempt learnt from the node so far.
#[derive(Default)]
struct Attempt<'r> {
    /// The accepted replies whose requests are still watched for forged twins.
    watches: Vec<Watched<'r>>,
    claims: Option<Arc<ProvisioningClaims>>,
    ecdh_public: String,
    ed25519: Option<Ed25519Info>,
    inventory: String,
    version: String,
    upgradable: bool,
    csr: Option<CsrInfo>,
}

/// An accepted reply still watched for a forged twin, and the least time after its
/// request that is watched before anything secret is made or sent.
struct Watched<'r> {
    watch: Box<dyn ReplyWatch + 'r>,
    at_least: Duration,
}

impl<'r> Watched<'r> {
    /// A reply that a real node sends at once (`jwt`, `gen25519`, `inventory`): its
    /// twin is awaited for the attempt's reply grace.
    fn prompt(watch: Box<dyn ReplyWatch + 'r>) -> Watched<'r> {
        Watched {
            watch,
            at_least: Duration::ZERO,
        }
    }
}

/// A step that either gives its result or fails the attempt.
type Step<T> = Result<T, AttemptError>;

impl NodeSequence {
    /// The sequence for `config`, loading and checking every key it will need.
    pub fn new(
        config: Arc<Config>,
        rpc: Arc<dyn NodeRpc>,
        metrics: Arc<Metrics>,
        pause: Arc<Pause>,
        timeouts: Timeouts,
    ) -> Result<NodeSequence, KeyLoadError> {
        let keys = KeyMaterial::load(&config)?;
        Ok(NodeSequence {
            helper: Helper::new(&config.helper, config.helper_timeout),
            slots: Arc::new(UpgradeSlots::with_gauge(
                config.upgrades_max_in_flight,
                SLOT_TIMEOUT,
                metrics.upgrade_slots.clone(),
            )),
            loops: LoopWarnings::default(),
            config,
            rpc,
            metrics,
            pause,
            timeouts,
            keys,
            lockless: crate::throttle::Throttle::default(),
        })
    }

    /// Runs one attempt for `identity`.
    pub fn provision(
        &self,
        identity: &Identity,
        waiting_since: Instant,
        stopping: &AtomicBool,
    ) -> Outcome {
        self.provision_with(identity, waiting_since, stopping, &Progress::new())
    }

    /// Runs one attempt for `identity`, keeping `progress` up to date with the step
    /// it is at and the facts it learns.
    pub fn provision_with(
        &self,
        identity: &Identity,
        waiting_since: Instant,
        stopping: &AtomicBool,
        progress: &Progress,
    ) -> Outcome {
        let outcome = self
            .attempt(identity, waiting_since, stopping, progress)
            .unwrap_or_else(AttemptError::into_outcome);
        // A node's words end up in these texts, and a node has the token: whatever it
        // echoes, the log, `/nodes` and the audit trail never show our secrets.
        let secrets = [
            self.token(),
            self.config.broker_provisioning_password.expose(),
        ];
        let scrub = |text: &str| super::redact::redact(text.as_bytes(), &secrets);
        let outcome = outcome.map_text(scrub);
        progress.record(|f| {
            for text in f.retries.iter_mut().chain(f.helper_msg.as_mut()) {
                *text = scrub(text);
            }
        });
        self.metrics
            .upgrades_in_flight
            .set(self.slots.holders().len() as i64);
        outcome
    }

    /// The nodes away upgrading now (holding an `upgrades_max_in_flight` slot), with
    /// when they were sent.
    pub fn upgrading(&self) -> Vec<(Identity, Instant)> {
        self.slots.holders()
    }

    /// This instance's upgrade slots, shared with whatever splits the cap among
    /// several instances (the active-active membership sets its part).
    pub fn upgrade_slots(&self) -> Arc<UpgradeSlots> {
        Arc::clone(&self.slots)
    }

    /// Nodes that waited for an upgrade slot and whose turn has come.
    pub fn woken(&self) -> Vec<Identity> {
        self.slots.take_woken()
    }

    /// Wakes `n` more waiting nodes in place of woken ones that another instance owns
    /// now ([`UpgradeSlots::pass_on`]).
    pub fn pass_on_wakes(&self, n: usize) {
        self.slots.pass_on(n);
    }

    fn retrier<'a>(&'a self, stopping: &'a AtomicBool, progress: &'a Progress) -> Retrier<'a> {
        Retrier {
            rpc: &*self.rpc,
            metrics: &self.metrics,
            pause: &self.pause,
            stopping,
            progress,
        }
    }

    fn call<'a>(&self, identity: &'a Identity, action: &'static str, tries: usize) -> Call<'a> {
        Call {
            identity,
            agent: crate::choria::rpc::PROVISION_AGENT,
            action,
            tries,
            timeout: self.timeouts.provision,
        }
    }

    fn token(&self) -> &str {
        self.config.token.expose()
    }

    fn attempt(
        &self,
        identity: &Identity,
        since: Instant,
        stopping: &AtomicBool,
        progress: &Progress,
    ) -> Step<Outcome> {
        let waited = since.elapsed();
        if waited > self.config.stale_after() {
            return Err(AttemptError::Stale { waited });
        }
        let between = || -> Step<()> {
            if stopping.load(Ordering::Relaxed) {
                return Err(AttemptError::Stopping {
                    identity: identity.clone(),
                });
            }
            Ok(())
        };
        let w = self.retrier(stopping, progress);
        let mut a = Attempt::default();
        self.gather(&w, identity, &between, &mut a)?;
        progress.step("helper");
        let answer = self.run_helper(identity, &a, stopping)?;
        if (answer.defer || answer.shutdown) && !answer.msg.is_empty() {
            progress.record(|f| f.helper_msg = Some(crate::untrusted::shown(&answer.msg)));
        }
        if answer.defer {
            return Ok(Outcome::Deferred(answer.msg));
        }
        if answer.shutdown {
            return self.shutdown(&w, identity, &answer.msg);
        }
        between()?;
        // Nothing secret is made or sent for a node someone else answers for.
        self.settle(identity, &a, self.timeouts.reply_grace)?;
        let server_jwt = if self.config.features.ed25519 {
            progress.step("server_jwt");
            let signed = self
                .keys
                .server_jwt(identity, a.ed25519.as_ref(), &answer)?;
            progress.record(|f| {
                f.server_jwt_id = Some(signed.claims.standard.jti.clone());
                f.server_jwt_expires = signed.claims.standard.exp;
            });
            signed.token
        } else {
            String::new()
        };
        if !answer.certificate.is_empty() {
            if let Some((serial, sha256)) = certificate_facts(&answer.certificate) {
                progress.record(|f| {
                    f.certificate_serial = Some(serial);
                    f.certificate_sha256 = Some(sha256);
                });
            }
        }
        progress.step("key_transport");
        let (key, ecdh_public) = self.encrypt_key(identity, &a, &answer)?;
        if let Some(outcome) = self.upgrade(&w, identity, &a, &answer, progress)? {
            return Ok(outcome);
        }
        between()?;
        self.settle(identity, &a, Duration::ZERO)?;
        self.check_loops(identity, &answer);
        self.configure(&w, identity, &a, &answer, &key, &ecdh_public, &server_jwt)?;
        between()?;
        self.restart(&w, identity)?;
        Ok(Outcome::Done)
    }

    /// Asks the node for what the helper needs: `jwt`, `gen25519`, `inventory` and
    /// `gencsr`, as the features say. None depends on another's answer, so their first
    /// tries go out together (only the last one flushed); their replies are read in
    /// Go's order, each call's later tries made alone. `between` runs after each.
    fn gather<'r>(
        &self,
        w: &Retrier<'r>,
        identity: &Identity,
        between: &dyn Fn() -> Step<()>,
        a: &mut Attempt<'r>,
    ) -> Step<()> {
        let features = &self.config.features;
        let nonce = RefCell::new(String::new());
        let jwt_call = self.call(identity, "jwt", 3);
        let ed25519_call = self.call(identity, "gen25519", 5);
        let inventory_call = self.inventory_call(identity);
        let csr_call = self.call(identity, "gencsr", 3);
        let jwt = features
            .jwt
            .then(|| w.send(&jwt_call, || self.jwt_request(), Flush::Later))
            .transpose()?;
        let ed25519 = features
            .ed25519
            .then(|| {
                w.send(
                    &ed25519_call,
                    || self.gen25519_request(&nonce),
                    Flush::Later,
                )
            })
            .transpose()?;
        let last = if features.pki {
            Flush::Later
        } else {
            Flush::Now
        };
        let inventory = w.send(&inventory_call, || json!({}), last)?;
        let csr = features
            .pki
            .then(|| w.send(&csr_call, || self.gencsr_request(identity), Flush::Now))
            .transpose()?;
        if let Some(sent) = jwt {
            self.fetch_jwt(w, &jwt_call, sent, a)?;
            between()?;
        }
        if let Some(sent) = ed25519 {
            self.fetch_ed25519(w, &ed25519_call, sent, &nonce, a)?;
            between()?;
        }
        self.fetch_inventory(w, &inventory_call, inventory, a)?;
        between()?;
        if let Some(sent) = csr {
            self.fetch_csr(w, &csr_call, sent, a)?;
            between()?;
        }
        Ok(())
    }

    fn jwt_request(&self) -> serde_json::Value {
        json!({ "token": self.token() })
    }

    fn fetch_jwt<'r>(
        &self,
        w: &Retrier<'r>,
        call: &Call,
        sent: Sent<'r>,
        a: &mut Attempt<'r>,
    ) -> Step<()> {
        let identity = call.identity;
        let ((jwt, ecdh), watch) = w.finish(
            call,
            sent,
            || self.jwt_request(),
            |r| match replies::read::<JwtReply>(&r.data, "jwt") {
                Ok(d) => {
                    Check::Accept((d.jwt.unwrap_or_default(), d.ecdh_public.unwrap_or_default()))
                }
                Err(why) => Check::Retry(why.to_string()),
            },
        )?;
        a.watches.push(Watched::prompt(watch));
        if jwt.is_empty() {
            return Err(AttemptError::NoJwt {
                identity: identity.clone(),
            });
        }
        let claims = self.keys.verify_provisioning_jwt(identity, &jwt)?;
        w.progress.record(|f| {
            let jti = &claims.standard.jti;
            f.provisioning_jwt_id = (!jti.is_empty()).then(|| crate::untrusted::shown(jti));
            f.provisioning_jwt_expires = claims.standard.exp;
        });
        a.claims = Some(claims);
        a.ecdh_public = ecdh;
        Ok(())
    }

    /// A `gen25519` request with a fresh nonce, which is kept in `nonce` for the check
    /// of the try's reply.
    fn gen25519_request(&self, nonce: &RefCell<String>) -> serde_json::Value {
        let fresh = crate::crypto::nonce::new_nonce();
        let data = json!({ "nonce": fresh, "token": self.token() });
        *nonce.borrow_mut() = fresh;
        data
    }

    fn fetch_ed25519<'r>(
        &self,
        w: &Retrier<'r>,
        call: &Call,
        sent: Sent<'r>,
        nonce: &RefCell<String>,
        a: &mut Attempt<'r>,
    ) -> Step<()> {
        let (info, watch) = w.finish(
            call,
            sent,
            || self.gen25519_request(nonce),
            |r| {
                let d = match replies::read::<Gen25519Reply>(&r.data, "gen25519") {
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
                    &nonce.borrow(),
                    &info.signature,
                ) {
                    Ok(()) => Check::Accept(info),
                    Err(e) => Check::Retry(e.to_string()),
                }
            },
        )?;
        a.watches.push(Watched::prompt(watch));
        a.ed25519 = Some(info);
        Ok(())
    }

    /// Active-active relies on ownership first and on the node's provisioning lock
    /// (go-choria v0.29 and later) only while instances join or leave: an older node
    /// is provisioned all the same, with a warning that churn may configure it twice.
    fn warn_if_lockless(&self, identity: &Identity, version: &str) {
        if !self.config.active_active
            || version.is_empty()
            || super::version::compare(version, LOCK_SINCE) != std::cmp::Ordering::Less
        {
            return;
        }
        if let Some(more) = self.lockless.ready() {
            let more = if more > 0 {
                format!(" ({more} similar warnings suppressed)")
            } else {
                String::new()
            };
            log::warn!(
                "{identity} runs Choria {}, older than {LOCK_SINCE}: it has no provisioning \
                 lock, so while active-active instances join or leave two of them may \
                 configure it at once{more}",
                crate::untrusted::shown(version)
            );
        }
    }

    fn inventory_call<'a>(&self, identity: &'a Identity) -> Call<'a> {
        Call {
            identity,
            agent: crate::choria::rpc::RPCUTIL_AGENT,
            action: "inventory",
            tries: 5,
            timeout: self.timeouts.rpcutil,
        }
    }

    fn fetch_inventory<'r>(
        &self,
        w: &Retrier<'r>,
        call: &Call,
        sent: Sent<'r>,
        a: &mut Attempt<'r>,
    ) -> Step<()> {
        let identity = call.identity;
        // Go keeps the whole object for the helper, re-encoded as it writes a decoded
        // map (keys sorted at every depth, numbers as float64), `upgradable` added.
        let ((version, upgradable, inventory), watch) = w.finish(
            call,
            sent,
            || json!({}),
            |r| {
                let d = match replies::read::<InventoryReply>(&r.data, "inventory") {
                    Ok(d) => d,
                    Err(why) => return Check::Retry(why.to_string()),
                };
                let mut inventory = Vec::with_capacity(r.data.text().len() + 32);
                if let Err(e) = crate::choria::protocol::gojson::write_map(
                    &mut inventory,
                    r.data.text(),
                    &[("upgradable", "false")],
                ) {
                    return Check::Retry(BadReplyData::new("inventory", &e).to_string());
                }
                Check::Accept((
                    d.version.unwrap_or_default().into_owned(),
                    d.upgradable.unwrap_or(false),
                    String::from_utf8(inventory).expect("JSON is UTF-8"),
                ))
            },
        )?;
        a.watches.push(Watched::prompt(watch));
        a.version = version;
        a.upgradable = upgradable;
        a.inventory = inventory;
        self.warn_if_lockless(identity, &a.version);
        if !a.version.is_empty() {
            w.progress
                .record(|f| f.version_before = Some(crate::untrusted::shown(&a.version)));
        }
        // Back from an upgrade on another version: its upgrade slot is free.
        self.slots.seen(identity, &a.version);
        Ok(())
    }

    /// A `gencsr` request. Go tries once; a lost reply then costs a whole attempt. The
    /// node makes a new key and CSR on every call, so retrying is safe.
    fn gencsr_request(&self, identity: &Identity) -> serde_json::Value {
        json!({ "token": self.token(), "cn": identity })
    }

    fn fetch_csr<'r>(
        &self,
        w: &Retrier<'r>,
        call: &Call,
        sent: Sent<'r>,
        a: &mut Attempt<'r>,
    ) -> Step<()> {
        let identity = call.identity;
        let (csr, watch) = w.finish(
            call,
            sent,
            || self.gencsr_request(identity),
            |r| match replies::read::<GencsrReply>(&r.data, "gencsr") {
                Ok(d) => Check::Accept(CsrInfo {
                    csr: d.csr.unwrap_or_default(),
                    public_key: d.public_key.unwrap_or_default(),
                    ssldir: d.ssldir.unwrap_or_default(),
                }),
                Err(why) => Check::Retry(why.to_string()),
            },
        )?;
        // A real node answers only once it has made its key (RSA 2048 in go-choria:
        // tens of milliseconds to seconds), while a forger answers at once: its twin
        // is awaited for `csr_reply_grace`, not the short grace of the others.
        a.watches.push(Watched {
            watch,
            at_least: self.config.csr_reply_grace,
        });
        self.keys.check_csr(identity, &csr.csr)?;
        a.csr = Some(csr);
        Ok(())
    }

    fn run_helper(
        &self,
        identity: &Identity,
        a: &Attempt,
        stopping: &AtomicBool,
    ) -> Step<HelperOutput> {
        let input = HelperInput {
            identity,
            csr: a.csr.as_ref(),
            ed25519_pubkey: a.ed25519.as_ref(),
            inventory: &a.inventory,
            jwt: a.claims.as_deref(),
        };
        let bytes = serde_json::to_vec(&input)
            .map_err(|e| AttemptError::Encode(format!("could not JSON encode host: {e}")))?;
        let secrets = self.secrets(a);
        let started = Instant::now();
        let result = self.helper.run(
            identity,
            &bytes,
            self.pause.paused(),
            &secrets,
            Some(stopping),
        );
        self.metrics.observe_helper(started.elapsed().as_secs_f64());
        match result {
            Ok(run) => Ok(run.output),
            Err(e) => {
                // A paused refusal is not the helper's fault (Go counted it).
                if !matches!(e, HelperError::Paused(_)) {
                    self.metrics.helper_errors.inc();
                }
                if matches!(e, HelperError::Timeout(..)) {
                    self.metrics.helper_timeouts.inc();
                }
                Err(AttemptError::Helper(e))
            }
        }
    }

    /// Values in the helper input that must never reach a log line.
    fn secrets<'a>(&'a self, a: &'a Attempt) -> Vec<&'a str> {
        let mut out = vec![self.token()];
        if let Some(claims) = &a.claims {
            out.extend(
                [claims.cht.as_str(), claims.chpwd.as_str()]
                    .into_iter()
                    .filter(|v| !v.is_empty()),
            );
        }
        out
    }

    /// Stops the attempt if any watched request got a second, different reply in the
    /// node's name within `grace` (or the watch's own longer grace) of its request
    /// being sent, or by now if later.
    fn settle(&self, identity: &Identity, a: &Attempt, grace: Duration) -> Step<()> {
        for Watched { watch, at_least } in &a.watches {
            if let Err(contested) = watch.settle(watch.asked_at() + grace.max(*at_least)) {
                log::error!(
                    "SECURITY: {contested}; nothing secret was sent to {identity}, it is tried again after the cool-down"
                );
                return Err(AttemptError::Contested {
                    identity: identity.clone(),
                    contested,
                });
            }
        }
        Ok(())
    }

    fn shutdown(&self, w: &Retrier, identity: &Identity, msg: &str) -> Step<Outcome> {
        log::warn!("Shutting down {identity} as the helper asked: {msg}");
        let token = self.token().to_string();
        w.run(
            &self.call(identity, "shutdown", 3),
            || json!({ "token": token }),
            |_| Check::Accept(()),
        )
        // Go counted a refused shutdown as success; the node would keep running.
        ?;
        self.metrics.helper_shutdown_requests.inc();
        Ok(Outcome::ShutDown)
    }

    fn encrypt_key(
        &self,
        identity: &Identity,
        a: &Attempt,
        answer: &HelperOutput,
    ) -> Step<(String, String)> {
        if answer.key.is_empty() {
            return Ok((String::new(), String::new()));
        }
        if a.ecdh_public.is_empty() {
            return Err(AttemptError::NoKeyExchange {
                identity: identity.clone(),
            });
        }
        crate::crypto::key_transport::encrypt_key_for_node(&answer.key, &a.ecdh_public).map_err(
            |why| AttemptError::KeyTransport {
                identity: identity.clone(),
                why,
            },
        )
    }

    fn upgrade(
        &self,
        w: &Retrier,
        identity: &Identity,
        a: &Attempt,
        answer: &HelperOutput,
        progress: &Progress,
    ) -> Step<Option<Outcome>> {
        if !self.config.features.upgrades || answer.upgrade.is_empty() {
            return Ok(None);
        }
        let target = answer.upgrade.as_str();
        progress.step("upgrade");
        let refuse = |why: String| -> Step<Option<Outcome>> {
            if self.config.upgrades_optional {
                log::warn!("Could not upgrade {identity} to {target}, continuing: {why}");
                Ok(None)
            } else {
                Err(AttemptError::Upgrade {
                    identity: identity.clone(),
                    target: target.to_string(),
                    why,
                })
            }
        };
        if self.config.upgrades_repository.is_empty() {
            return refuse("upgrades_repository is not set".into());
        }
        if a.version.is_empty() {
            return refuse("did not receive a version in inventory".into());
        }
        if !a.upgradable {
            return refuse(format!("{identity} does not support upgrades"));
        }
        if super::version::compare(&a.version, target) == std::cmp::Ordering::Equal {
            log::info!("{identity} already runs {target}, upgrade skipped");
            return Ok(None);
        }
        progress.record(|f| f.version_after = Some(crate::untrusted::shown(target)));
        if !self.slots.try_take(identity, &a.version) {
            let max = self.config.upgrades_max_in_flight.unwrap_or(0);
            let why = match self.slots.part() {
                Some(part) if part != max => format!(
                    "this instance's part ({part}) of upgrades_max_in_flight ({max}) is in use"
                ),
                _ => format!("upgrades_max_in_flight ({max}) nodes are upgrading"),
            };
            return Ok(Some(Outcome::UpgradeWaiting(format!(
                "{identity} waits to be upgraded to {}: {why}",
                crate::untrusted::shown(target),
            ))));
        }
        self.metrics
            .upgrades_in_flight
            .set(self.slots.holders().len() as i64);
        let token = self.token().to_string();
        let repository = self.config.upgrades_repository.clone();
        match w.run(
            &self.call(identity, "release_update", 3),
            || json!({ "repository": repository, "token": token, "version": target }),
            |_| Check::Accept(()),
        ) {
            Ok(_) => {
                log::info!("Upgrading {identity} from {} to {target}", a.version);
                Ok(Some(Outcome::Upgraded))
            }
            Err(e) => {
                self.slots.release(identity);
                refuse(e.to_string())
            }
        }
    }

    /// Warns (once per helper version and key) and counts a configuration that would
    /// bring the node straight back into provisioning; sends it anyway, as Go does.
    fn check_loops(&self, identity: &Identity, answer: &HelperOutput) {
        let found = super::loop_check::findings(&answer.configuration, identity);
        if found.is_empty() {
            return;
        }
        let stamp = HelperStamp::of_command(&self.config.helper);
        for finding in found {
            self.metrics
                .looping_configurations
                .with_label_values(&[finding.key])
                .inc();
            if self.loops.first(&stamp, finding.key) {
                log::warn!(
                    "The helper's configuration for {identity} will not keep it out of provisioning: {} {} (warned once per helper version; counted in choria_provisioner_looping_configurations)",
                    finding.key,
                    finding.why
                );
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn configure(
        &self,
        w: &Retrier,
        identity: &Identity,
        a: &Attempt,
        answer: &HelperOutput,
        key: &str,
        ecdh_public: &str,
        server_jwt: &str,
    ) -> Step<()> {
        if answer.configuration.is_empty() {
            return Err(AttemptError::EmptyConfiguration {
                identity: identity.clone(),
            });
        }
        let config = serde_json::to_string(&answer.configuration).map_err(|e| {
            AttemptError::Encode(format!("could not encode the configuration: {e}"))
        })?;
        // The node writes its key where its CSR reply said; the helper cannot move it.
        let ssldir = a
            .csr
            .as_ref()
            .map(|c| c.ssldir.as_str())
            .filter(|d| !d.is_empty())
            .unwrap_or(&answer.ssldir);
        let data = ConfigureData {
            token: self.token(),
            config: &config,
            ca: &answer.ca,
            certificate: &answer.certificate,
            ssldir,
            key,
            ecdh_public,
            action_policies: &answer.action_policies,
            opa_policies: &answer.opa_policies,
            server_jwt,
        };
        w.run(
            &self.call(identity, "configure", 5),
            || &data,
            |_| Check::Accept(()),
        )
        .map(|_| ())
        .map_err(AttemptError::from)
    }

    fn restart(&self, w: &Retrier, identity: &Identity) -> Step<()> {
        let data = RestartData {
            token: self.token(),
        };
        w.run(
            &self.call(identity, "restart", 3),
            || &data,
            |_| Check::Accept(()),
        )
        .map(|_| ())
        .map_err(AttemptError::from)
    }
}

#[cfg(test)]
#[path = "sequence_tests.rs"]
mod tests;
