//! The worker pool: each worker begins attempts for the nodes it takes off the
//! bounded queue, and runs the turns of parked attempts that have something to do
//! (a reply, a timeout, the end of a grace). A worker never waits on a node: an
//! attempt that waits is parked by the driver (`node::driver`) and comes back on its
//! ready channel. Workers run the helper, so `workers` is the helper concurrency, as
//! in Go. Parked attempts come first: a worker takes a new node only when none is
//! ready and fewer than `max_waiting_attempts` are under way; and a confirmed node
//! (found by a discovery) before an announced one (known only from a startup
//! event, which anyone may publish): see `Lane`.
//!
//! A panic inside one attempt does not cost the worker: the driver catches it around
//! the attempt's turn, and the node is finished as failed with the panic message
//! (counted in `provision_errors` and logged like any failure). This relies on
//! `panic = "unwind"`, which the release profile keeps (`Cargo.toml`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{never, select, Receiver};

use super::{AddResult, Fleet, Job, Source};
use crate::node::driver::{panicked, Finished, Ticket};
use crate::node::outcome::Outcome;
use crate::node::progress::Progress;

/// One worker's loop; returns when the fleet stops.
pub(super) fn run(fleet: &Fleet) {
    run_as_batch();
    let ready = fleet.provisioner.ready();
    let none: Receiver<Job> = never();
    loop {
        // A parked attempt that is ready goes first.
        if let Ok(r) = ready.try_recv() {
            resume(fleet, r);
            continue;
        }
        let room = fleet.provisioner.has_room();
        // Then a confirmed node (found by a discovery); an announced one (known only
        // from a startup event) only when no confirmed one waits.
        if room {
            if let Ok(job) = fleet.work_rx.try_recv() {
                begin(fleet, job);
                continue;
            }
        }
        let work = if room { &fleet.work_rx } else { &none };
        let announced = if room && fleet.announced_has_room() {
            &fleet.announced_rx
        } else {
            &none
        };
        select! {
            recv(ready) -> r => match r {
                Ok(r) => resume(fleet, r),
                Err(_) => return,
            },
            recv(work) -> job => match job {
                Ok(job) => begin(fleet, job),
                Err(_) => return,
            },
            recv(announced) -> job => match job {
                Ok(job) => begin(fleet, job),
                Err(_) => return,
            },
            recv(fleet.stop_rx) -> _ => return drain(fleet, &ready),
        }
        if fleet.is_stopping() {
            return drain(fleet, &ready);
        }
    }
}

/// Once stopping: the attempts under way finish their current step (each ends at its
/// next turn), until none is left or the shutdown timeout has passed; the fleet then
/// ends the rest.
fn drain(fleet: &Fleet, ready: &Receiver<crate::node::driver::Ready>) {
    let deadline = fleet
        .stop_deadline
        .get()
        .copied()
        .unwrap_or_else(Instant::now);
    while fleet.provisioner.waiting() > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        if let Ok(r) = ready.recv_timeout(left.min(std::time::Duration::from_millis(20))) {
            resume(fleet, r);
        }
    }
}

/// Runs a parked attempt's turns.
fn resume(fleet: &Fleet, ready: crate::node::driver::Ready) {
    fleet.metrics.busy_workers.inc();
    let finished = fleet.provisioner.resume(ready, &fleet.stopping);
    fleet.metrics.busy_workers.dec();
    if let Some(finished) = finished {
        self::finished(fleet, finished);
    }
}

/// Begins an attempt for `job` if its entry is still current and the node ours.
fn begin(fleet: &Fleet, job: Job) {
    fleet.update_gauges();
    if fleet.is_stopping() {
        return;
    }
    if !fleet.owns(&job.identity) {
        // Active-active: the live set changed while it waited; its owner has it.
        log::debug!("Dropping {}: another instance owns it now", job.identity);
        fleet.remove(&job.identity, job.generation);
        return;
    }
    let Some(since) = fleet.begin(&job) else {
        return;
    };
    let progress = Arc::new(Progress::new());
    fleet.board.begin(&job.identity, Arc::clone(&progress));
    let ticket = Ticket {
        identity: job.identity,
        generation: job.generation,
        since,
        started: Instant::now(),
        progress,
    };
    let (identity, generation, started) =
        (ticket.identity.clone(), ticket.generation, ticket.started);
    let progress = Arc::clone(&ticket.progress);
    fleet.metrics.busy_workers.inc();
    // The driver catches a panic in an attempt's turn; this catches one around it.
    let finished = catch_unwind(AssertUnwindSafe(|| {
        fleet.provisioner.begin(ticket, &fleet.stopping)
    }))
    .unwrap_or_else(|payload| {
        Some(Finished {
            outcome: panicked(&identity, payload.as_ref()),
            ticket: Ticket {
                identity,
                generation,
                since,
                started,
                progress,
            },
            silent: false,
        })
    });
    fleet.metrics.busy_workers.dec();
    if let Some(finished) = finished {
        self::finished(fleet, finished);
    }
}

/// Reports an attempt that ended and routes its outcome.
pub(super) fn finished(fleet: &Fleet, finished: Finished) {
    let Finished {
        ticket,
        outcome,
        silent,
    } = finished;
    let metrics = &fleet.metrics;
    let took = ticket.started.elapsed();
    metrics.observe_outcome(outcome.label(), took.as_secs_f64());
    fleet.board.finish(&ticket.identity, &outcome, took, silent);
    if outcome.is_success() {
        metrics.provisioned.inc();
        log::info!("{}: {outcome}", ticket.identity);
    } else if outcome.is_error() {
        metrics.provision_errors.inc();
        log::error!("Provisioning {} failed: {outcome}", ticket.identity);
    } else if let Outcome::UpgradeWaiting(why) | Outcome::PendingApproval(why) = &outcome {
        log::info!("{why}");
    } else {
        // A made-up identity or a node that left (counted in unreachable_nodes),
        // or a node another provisioner holds: not an error of ours; forgotten
        // until it is seen again.
        log::debug!("Dropping {}: {outcome}", ticket.identity);
    }
    let job = Job {
        identity: ticket.identity,
        generation: ticket.generation,
    };
    fleet.finish(&job, &outcome, silent);
    queue_woken(fleet);
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

/// Puts the calling thread under `SCHED_BATCH`. A batch thread has the same share of
/// the CPU as a normal one at the same nice level; it only does not preempt the
/// running thread when it is woken. Here that thread is mostly the NATS reader, which
/// goes on to hand out the replies it has read: with wake-up preemption every reply
/// cost it a switch out and back (`make bench`: 6.7 context switches and 0.317 ms of
/// CPU per node without, see docs/performance.md for with). The helpers a worker
/// starts inherit the policy (std's posix_spawn cannot reset it; a pre_exec hook
/// would make std fork the whole daemon instead): they are batch work too. Where the
/// kernel refuses (a seccomp filter), the worker runs under the normal policy. A
/// daemon started under another policy (`CPUSchedulingPolicy=` in its unit) keeps it.
fn run_as_batch() {
    if crate::proc_self::thread_has_normal_policy() == Some(false) {
        return;
    }
    if let Err(e) = crate::sys::set_batch_policy() {
        log::debug!("Workers keep the normal scheduling policy: SCHED_BATCH refused: {e}");
    }
}

#[cfg(test)]
mod tests {
    /// The policy of the calling thread, as `/proc/thread-self/stat` says (field 41).
    fn policy() -> String {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        // Fields from 3 on; policy is field 41.
        after_name.split(' ').nth(41 - 3).unwrap().to_string()
    }

    #[test]
    fn a_worker_runs_as_batch() {
        std::thread::spawn(|| {
            assert_eq!(policy(), libc::SCHED_OTHER.to_string());
            super::run_as_batch();
            assert_eq!(
                policy(),
                libc::SCHED_BATCH.to_string(),
                "the worker's policy"
            );
        })
        .join()
        .unwrap();
    }
}
