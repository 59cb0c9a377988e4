//! The worker pool: each worker takes one job at a time off the bounded queue,
//! skips it if its entry is no longer current, provisions it and routes the outcome.

use crossbeam_channel::select;

use super::{Fleet, Job};
use crate::host::outcome::Outcome;

/// One worker's loop; returns when the fleet stops.
pub(super) fn run(fleet: &Fleet) {
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
        let Some(since) = fleet.begin(&job) else {
            continue;
        };
        let metrics = &fleet.metrics;
        metrics.busy_workers.inc();
        let outcome = fleet
            .provisioner
            .provision(&job.identity, since, &fleet.stopping);
        metrics.busy_workers.dec();
        match &outcome {
            Outcome::Done | Outcome::Upgraded => {
                metrics.provisioned.inc();
                log::info!("{}: {outcome}", job.identity);
            }
            Outcome::Deferred(_) | Outcome::Failed(_) | Outcome::Contested(_) => {
                metrics.provision_errors.inc();
                log::error!("Provisioning {} failed: {outcome}", job.identity);
            }
            // A made-up identity or a node that left: counted in unreachable_nodes,
            // not an error of ours; forgotten until it is seen again.
            Outcome::Unreachable(_) => log::debug!("Dropping {}: {outcome}", job.identity),
        }
        fleet.finish(&job, &outcome);
    }
}
