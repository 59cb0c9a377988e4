//! The attempt once its helper has answered: deferred, shut down, upgraded, or
//! given its secrets (a key, the server JWT, the configuration) for `configure`.

use crate::choria::protocol::mcorpc::RequestData;
use crate::node::failure::AttemptError;
use crate::node::helper::{HelperError, HelperOutput};
use crate::node::outcome::Outcome;
use crate::node::progress::certificate_facts;
use crate::node::requests::ConfigureData;
use crate::node::sequence::NodeSequence;
use std::time::Instant;

use super::{Action, Attempt, Phase, Step};

impl Attempt {
    /// The helper's answer: defer, shut down, or go on to the secrets.
    pub(super) fn helper_ran(
        &mut self,
        seq: &NodeSequence,
        result: Result<HelperOutput, HelperError>,
        now: Instant,
        paused: bool,
    ) -> Step<()> {
        if self.phase != Phase::Helper {
            return Ok(());
        }
        let answer = result.map_err(|e| {
            // A paused refusal is not the helper's fault (Go counted it).
            if !matches!(e, HelperError::Paused(_)) {
                seq.metrics().helper_errors.inc();
            }
            if matches!(e, HelperError::Timeout(..)) {
                seq.metrics().helper_timeouts.inc();
            }
            AttemptError::Helper(e)
        })?;
        if (answer.defer || answer.shutdown) && !answer.msg.is_empty() {
            self.progress
                .record(|f| f.helper_msg = Some(crate::untrusted::shown(&answer.msg)));
        }
        if answer.defer {
            self.done = Some(Outcome::Deferred(answer.msg));
            return Ok(());
        }
        if answer.shutdown {
            log::warn!(
                "Shutting down {} as the helper asked: {}",
                self.identity,
                answer.msg
            );
            self.answer = Some(Box::new(answer));
            return self.call(seq, Action::Shutdown, now, paused);
        }
        self.answer = Some(Box::new(answer));
        if let Some(target) = self.upgrade(seq)? {
            self.upgrading_to = Some(target);
            self.progress.step("upgrade");
            return self.call(seq, Action::ReleaseUpdate, now, paused);
        }
        self.configure(seq, now, paused)
    }

    /// Whether the helper's upgrade is to be made now: the target version, `None`
    /// to go on to `configure`; or the attempt ends waiting for a slot.
    pub(super) fn upgrade(&mut self, seq: &NodeSequence) -> Step<Option<String>> {
        let answer = self.answer.as_ref().expect("the helper answered");
        let config = seq.config();
        if !config.features.upgrades || answer.upgrade.is_empty() {
            return Ok(None);
        }
        let identity = &self.identity;
        let target = answer.upgrade.clone();
        self.progress.step("upgrade");
        let refuse = |why: String| -> Step<Option<String>> {
            if config.upgrades_optional {
                log::warn!("Could not upgrade {identity} to {target}, continuing: {why}");
                Ok(None)
            } else {
                Err(AttemptError::Upgrade {
                    identity: identity.clone(),
                    target: target.clone(),
                    why,
                })
            }
        };
        if config.upgrades_repository.is_empty() {
            return refuse("upgrades_repository is not set".into());
        }
        let version = &self.learnt.version;
        if version.is_empty() {
            return refuse("did not receive a version in inventory".into());
        }
        if !self.learnt.upgradable {
            return refuse(format!("{identity} does not support upgrades"));
        }
        if crate::node::version::compare(version, &target) == std::cmp::Ordering::Equal {
            log::info!("{identity} already runs {target}, upgrade skipped");
            return Ok(None);
        }
        self.progress
            .record(|f| f.version_after = Some(crate::untrusted::shown(&target)));
        let slots = seq.slots();
        if !slots.try_take(identity, version) {
            let max = config.upgrades_max_in_flight.unwrap_or(0);
            let why = match slots.part() {
                Some(part) if part != max => format!(
                    "this instance's part ({part}) of upgrades_max_in_flight ({max}) is in use"
                ),
                _ => format!("upgrades_max_in_flight ({max}) nodes are upgrading"),
            };
            self.done = Some(Outcome::UpgradeWaiting(format!(
                "{identity} waits to be upgraded to {}: {why}",
                crate::untrusted::shown(&target),
            )));
            return Ok(None);
        }
        seq.metrics()
            .upgrades_in_flight
            .set(slots.holders().len() as i64);
        Ok(Some(target))
    }

    /// Makes the secrets (server JWT, encrypted key) and sends `configure`.
    pub(super) fn configure(&mut self, seq: &NodeSequence, now: Instant, paused: bool) -> Step<()> {
        if self.done.is_some() {
            return Ok(());
        }
        let answer = self.answer.as_ref().expect("the helper answered");
        if answer.configuration.is_empty() {
            return Err(AttemptError::EmptyConfiguration {
                identity: self.identity.clone(),
            });
        }
        self.progress.step("key_transport");
        self.configure_data = self.make_configure_data(seq)?;
        let answer = self.answer.take().expect("the helper answered");
        seq.check_loops(&self.identity, &answer);
        // The helper's answer (its private key above all) is not kept: configure's
        // data holds what is sent, the key encrypted.
        drop(answer);
        self.progress.step("configure");
        self.call(seq, Action::Configure, now, paused)?;
        self.handed_out = true;
        Ok(())
    }

    /// `configure`'s data: the secrets are made here, after the grace.
    pub(super) fn make_configure_data(&self, seq: &NodeSequence) -> Step<Vec<u8>> {
        let (config, key, ecdh_public, server_jwt) = self.make_secrets(seq)?;
        let mut out = Vec::with_capacity(4096);
        let answer = self.answer.as_ref().expect("the helper answered");
        // The node writes its key where its CSR reply said; the helper cannot move it.
        let ssldir = self
            .learnt
            .csr
            .as_ref()
            .map(|c| c.ssldir.as_str())
            .filter(|d| !d.is_empty())
            .unwrap_or(&answer.ssldir);
        ConfigureData {
            token: seq.token(),
            config: &config,
            ca: &answer.ca,
            certificate: &answer.certificate,
            ssldir,
            key: &key,
            ecdh_public: &ecdh_public,
            action_policies: &answer.action_policies,
            opa_policies: &answer.opa_policies,
            server_jwt: &server_jwt,
        }
        .write_go(&mut out);
        // Kept while configure and restart are out: no more than it needs.
        out.shrink_to_fit();
        Ok(out)
    }

    /// The configuration's JSON, the encrypted key and our side of the exchange, and
    /// the signed server JWT (empty without `ed25519`).
    pub(super) fn make_secrets(
        &self,
        seq: &NodeSequence,
    ) -> Step<(String, String, String, String)> {
        let identity = &self.identity;
        let answer = self.answer.as_ref().expect("the helper answered");
        let config = serde_json::to_string(&answer.configuration).map_err(|e| {
            AttemptError::Encode(format!("could not encode the configuration: {e}"))
        })?;
        let server_jwt = if seq.config().features.ed25519 {
            let signed = seq
                .keys()
                .server_jwt(identity, self.learnt.ed25519.as_deref(), answer)?;
            self.progress.record(|f| {
                f.server_jwt_id = Some(signed.claims.standard.jti.clone());
                f.server_jwt_expires = signed.claims.standard.exp;
            });
            if let Some(chain_expires) = signed.claims.standard.issexp {
                // The token is read again for every node: a rotation shows here.
                seq.metrics().signing_token_expiry.set(chain_expires);
            }
            signed.token
        } else {
            String::new()
        };
        if !answer.certificate.is_empty() {
            if let Some((serial, sha256)) = certificate_facts(&answer.certificate) {
                self.progress.record(|f| {
                    f.certificate_serial = Some(serial);
                    f.certificate_sha256 = Some(sha256);
                });
            }
        }
        let (key, ecdh_public) = if answer.key.is_empty() {
            (String::new(), String::new())
        } else if self.learnt.ecdh_public.is_empty() {
            return Err(AttemptError::NoKeyExchange {
                identity: identity.clone(),
            });
        } else {
            crate::crypto::key_transport::encrypt_key_for_node(
                &answer.key,
                &self.learnt.ecdh_public,
            )
            .map_err(|why| AttemptError::KeyTransport {
                identity: identity.clone(),
                why,
            })?
        };
        Ok((config, key, ecdh_public, server_jwt))
    }
}
