//! The worker pool: each worker takes one job at a time off the bounded queue,
//! skips it if its entry is no longer current, provisions it and routes the outcome.
//!
//! A panic inside one attempt does not cost the worker: it is caught around the
//! attempt, the node is finished as failed with the panic message (counted in
//! `provision_errors` and logged like any failure), `busy_workers` is restored and
//! the worker takes its next job. This relies on `panic = "unwind"`, which the
//! release profile keeps (`Cargo.toml`).
//!
//! Workers run under `SCHED_BATCH` with `SCHED_RESET_ON_FORK` ([`run_as_batch`]): a
//! worker woken by its reply does not preempt the thread that woke it (the NATS reader
//! thread, which has more replies to hand out), and the helpers a worker starts run
//! under the normal policy.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::select;

use super::{AddResult, Fleet, Job, Source};
use crate::host::outcome::Outcome;
use crate::host::progress::Progress;

/// Most characters of a panic message kept in the outcome.
const PANIC_MESSAGE_MAX: usize = 500;

/// One worker's loop; returns when the fleet stops.
pub(super) fn run(fleet: &Fleet) {
    run_as_batch();
    loop {
        let job: Job = select! {
            recv(fleet.work_rx) -> job => match job {
                Ok(job) => job,
                Err(_) => return,
            },
            recv(fleet.stop_rx) -> _ => return,
        };
        fleet.update_gauges();
        if fleet.is_stopping() {
            return;
        }
        if !fleet.owns(&job.identity) {
            // Active-active: the live set changed while it waited; its owner has it.
            log::debug!("Dropping {}: another instance owns it now", job.identity);
            fleet.remove(&job.identity, job.generation);
            continue;
        }
        let Some(since) = fleet.begin(&job) else {
            continue;
        };
        let metrics = &fleet.metrics;
        metrics.busy_workers.inc();
        let started = Instant::now();
        let progress = Arc::new(Progress::new());
        fleet.board.begin(&job.identity, Arc::clone(&progress));
        // The provisioner shares nothing with this worker that a panic could leave
        // half-updated: its state is per attempt, and parking_lot locks do not poison.
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            fleet
                .provisioner
                .provision_with(&job.identity, since, &fleet.stopping, &progress)
        }))
        .unwrap_or_else(|payload| panicked(&job.identity, payload.as_ref()));
        metrics.busy_workers.dec();
        metrics.observe_outcome(outcome.label(), started.elapsed().as_secs_f64());
        fleet
            .board
            .finish(&job.identity, &outcome, started.elapsed());
        if outcome.is_success() {
            metrics.provisioned.inc();
            log::info!("{}: {outcome}", job.identity);
        } else if outcome.is_error() {
            metrics.provision_errors.inc();
            log::error!("Provisioning {} failed: {outcome}", job.identity);
        } else if let Outcome::UpgradeWaiting(why) = &outcome {
            log::info!("{why}");
        } else {
            // A made-up identity or a node that left (counted in unreachable_nodes),
            // or a node another provisioner holds: not an error of ours; forgotten
            // until it is seen again.
            log::debug!("Dropping {}: {outcome}", job.identity);
        }
        fleet.finish(&job, &outcome);
        queue_woken(fleet);
    }
}

/// Most rounds of [`queue_woken`] after one attempt: each round's nodes were all
/// another instance's, which a live-set change can make true of a few, not of many.
const WAKE_ROUNDS: usize = 16;

/// Queues again the nodes whose turn came (an upgrade slot was given back); a woken
/// node that another instance owns now passes its turn on to the next waiting one,
/// so the slot is not left idle until the next discovery.
fn queue_woken(fleet: &Fleet) {
    for _ in 0..WAKE_ROUNDS {
        let woken = fleet.provisioner.woken();
        let not_ours = woken
            .iter()
            .filter(|identity| fleet.add(identity, Source::Retry) == AddResult::NotOurs)
            .count();
        if not_ours == 0 {
            return;
        }
        fleet.provisioner.pass_on_wakes(not_ours);
    }
}

/// The outcome of an attempt that panicked, with the panic message (a `&str` or
/// `String` payload, as `panic!` makes; anything else is named as such).
pub(super) fn panicked(identity: &str, payload: &(dyn Any + Send)) -> Outcome {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message");
    let mut shown: String = message.chars().take(PANIC_MESSAGE_MAX).collect();
    if shown.len() < message.len() {
        shown.push_str("...");
    }
    Outcome::Failed(format!(
        "provisioning {identity} panicked: {}",
        shown.escape_debug()
    ))
}

/// Puts the calling thread under `SCHED_BATCH`, with `SCHED_RESET_ON_FORK` so that
/// the processes it starts (the helper) get the normal policy back. A batch thread has
/// the same share of the CPU as a normal one at the same nice level; it only does not
/// preempt the running thread when it is woken. Here that thread is mostly the NATS
/// reader, which goes on to hand out the replies it has read: with wake-up preemption
/// every reply cost it a switch out and back (`make bench`: 8.9–9.0 context switches
/// per node before, 7.5–7.6 after). Where the kernel refuses (a seccomp filter, a
/// kernel without the policy), the worker runs under the normal policy, as before. A
/// daemon started under another policy (`CPUSchedulingPolicy=` in its unit) keeps it.
pub(crate) fn run_as_batch() {
    // SAFETY: reads the calling thread's policy.
    if unsafe { libc::sched_getscheduler(0) } != libc::SCHED_OTHER {
        return;
    }
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler(0, ..) sets the calling thread's policy and reads one
    // valid sched_param; SCHED_BATCH takes priority 0 and needs no privilege.
    let rc = unsafe {
        libc::sched_setscheduler(0, libc::SCHED_BATCH | libc::SCHED_RESET_ON_FORK, &param)
    };
    if rc != 0 {
        log::debug!(
            "Workers keep the normal scheduling policy: SCHED_BATCH refused: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::run_as_batch;
    use crate::host::helper::Helper;
    use std::time::Duration;

    /// A helper that answers with its scheduling policy (field 41 of
    /// `/proc/self/stat`, read by its child `cut`, which inherits it).
    const POLICY_OF_HELPER: &str = r#"sh -c 'p=$(cut -d" " -f41 /proc/self/stat); printf "{\"defer\":true,\"msg\":\"policy %s\"}" "$p"'"#;

    #[test]
    fn a_worker_runs_as_batch_and_its_helper_does_not() {
        std::thread::spawn(|| {
            run_as_batch();
            // SAFETY: reads the calling thread's policy.
            let policy = unsafe { libc::sched_getscheduler(0) };
            assert_eq!(
                policy & !libc::SCHED_RESET_ON_FORK,
                libc::SCHED_BATCH,
                "the worker's policy"
            );
            assert_ne!(policy & libc::SCHED_RESET_ON_FORK, 0, "reset on fork");
            let helper = Helper::new(POLICY_OF_HELPER, Duration::from_secs(10));
            let run = helper
                .run("n1.example.net", b"{}", false, &[], None)
                .expect("the helper runs");
            assert_eq!(
                run.output.msg,
                format!("policy {}", libc::SCHED_OTHER),
                "the helper's policy"
            );
        })
        .join()
        .unwrap();
    }
}
