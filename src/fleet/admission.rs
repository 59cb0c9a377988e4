//! Admission: what [`Fleet::add`] makes of an identity offered by a discovery, a
//! startup event or a retry (the policy, the approvals, ownership, the two lanes of
//! the queue and its bound; the scheduler's rules in ARCHITECTURE.md).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crossbeam_channel::TrySendError;

use super::{approvals, AddResult, Entry, Fleet, Job, Lane, Source, State};
use crate::choria::identity::Identity;

impl Fleet {
    /// Offers `identity` for provisioning. Counts `discovered`/`event_discovered`
    /// only when it was queued.
    pub fn add(&self, identity: &Identity, source: Source) -> AddResult {
        if self.stopping.load(Ordering::Relaxed) {
            return AddResult::Stopping;
        }
        if let Some(policy) = &self.options.identity_policy {
            if !policy.admits(identity.as_str()) {
                return self.refuse_by_policy(identity, source);
            }
        }
        if let Some(approvals) = self.approvals.get() {
            match approvals.admission(identity) {
                approvals::Admission::Go => {}
                approvals::Admission::Pending | approvals::Admission::Deferred => {
                    return AddResult::Pending
                }
                approvals::Admission::Denied => return self.refuse_denied(identity, source),
            }
        }
        if !self.owns(identity) {
            return AddResult::NotOurs;
        }
        let lane = match source {
            Source::Discovery | Source::Retry => Lane::Confirmed,
            Source::Event => Lane::Announced,
        };
        let result = {
            let mut hosts = self.hosts.lock();
            let now = Instant::now();
            // A cool-down that has run out is over even if the finisher, which wakes
            // a little late on purpose (`finisher::slack`), has not forgotten the
            // entry yet: the node is queued under a new generation, and the
            // finisher's late walk leaves a queued entry alone.
            let over = |e: &Entry| matches!(e.state, State::CoolingDown(at, _) if at <= now);
            match hosts.get_mut(identity).filter(|e| !over(e)) {
                Some(entry) => {
                    self.seen_again(identity, entry, lane, now);
                    AddResult::Known
                }
                None => self.queue(&mut hosts, identity, lane, now),
            }
        };
        if result == AddResult::Added {
            match source {
                Source::Discovery => self.metrics.discovered.inc(),
                Source::Event => self.metrics.event_discovered.inc(),
                Source::Retry => {}
            }
            log::debug!(
                "Adding {identity} to the work queue with {} entries",
                self.queued()
            );
        }
        self.update_gauges();
        result
    }

    /// A known node seen again: while it is queued it is alive, so its stale clock
    /// restarts but it keeps its place (re-queuing would cost a second slot), unless
    /// a discovery confirms a node that waits in the announced lane: it moves to the
    /// confirmed one (its old job is then of an older generation and ignored).
    fn seen_again(&self, identity: &Identity, entry: &mut Entry, lane: Lane, now: Instant) {
        let State::Queued(since, queued_in) = &mut entry.state else {
            return;
        };
        *since = now;
        if *queued_in == Lane::Announced && lane == Lane::Confirmed {
            let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
            let job = Job {
                identity: identity.clone(),
                generation,
            };
            if self.work_tx.try_send(job).is_ok() {
                entry.generation = generation;
                *queued_in = Lane::Confirmed;
            }
        }
    }

    /// Queues a node not known yet in `lane`, under a new generation.
    fn queue(
        &self,
        hosts: &mut HashMap<Identity, Entry>,
        identity: &Identity,
        lane: Lane,
        now: Instant,
    ) -> AddResult {
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let job = Job {
            identity: identity.clone(),
            generation,
        };
        let queue = match lane {
            Lane::Confirmed => &self.work_tx,
            Lane::Announced => &self.announced_tx,
        };
        match queue.try_send(job) {
            Ok(()) => {
                let entry = Entry {
                    generation,
                    state: State::Queued(now, lane),
                };
                hosts.insert(identity.clone(), entry);
                AddResult::Added
            }
            Err(TrySendError::Full(_)) => {
                self.queue_full.fetch_add(1, Ordering::Relaxed);
                AddResult::QueueFull
            }
            Err(TrySendError::Disconnected(_)) => AddResult::Stopping,
        }
    }

    /// Counts (and logs, at most once a minute) an identity the policy refuses.
    fn refuse_by_policy(&self, identity: &Identity, source: Source) -> AddResult {
        self.metrics
            .refused_identities
            .with_label_values(&[source.label(), "policy"])
            .inc();
        if let Some(note) = self.policy_refusals.ready_note("identities refused") {
            log::warn!(
                "Refused {identity} from {}: identity_allow / identity_deny exclude it{note}",
                source.label()
            );
        }
        AddResult::Refused
    }

    /// Counts (and logs, once per identity per `approvals::DENIED_LOG_EVERY`) an
    /// identity an operator denied.
    fn refuse_denied(&self, identity: &Identity, source: Source) -> AddResult {
        self.metrics
            .refused_identities
            .with_label_values(&[source.label(), "denied"])
            .inc();
        if self
            .approvals
            .get()
            .is_some_and(|a| a.log_denial_now(identity))
        {
            log::warn!(
                "Refused {identity} from {}: an operator denied it (choria-provisioner forget {identity} to undo)",
                source.label()
            );
        }
        AddResult::Refused
    }
}
