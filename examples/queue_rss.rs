//! Memory of a paused provisioner holding 50,000 queued nodes (`make bench`).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use choria_provisioner::choria::identity::Identity;
use choria_provisioner::config::Pause;
use choria_provisioner::fleet::{Fleet, FleetOptions, Provision, Source};
use choria_provisioner::metrics::{Metrics, ProcessStats};
use choria_provisioner::node::driver::{Finished, Ready, Ticket};
use choria_provisioner::node::outcome::Outcome;

struct Never;

impl Provision for Never {
    fn begin(&self, ticket: Ticket, _: &AtomicBool) -> Option<Finished> {
        Some(Finished {
            ticket,
            outcome: Outcome::Failed("paused".into()),
            silent: false,
        })
    }

    fn ready(&self) -> crossbeam_channel::Receiver<Ready> {
        crossbeam_channel::never()
    }

    fn resume(&self, _: Ready, _: &AtomicBool) -> Option<Finished> {
        None
    }

    fn has_room(&self) -> bool {
        true
    }

    fn abandon_all(&self) -> Vec<Finished> {
        Vec::new()
    }

    fn waiting(&self) -> usize {
        0
    }

    fn upgrading(&self) -> Vec<(Identity, Instant)> {
        Vec::new()
    }

    fn woken(&self) -> Vec<Identity> {
        Vec::new()
    }

    fn pass_on_wakes(&self, _: usize) {}
}

fn main() {
    let before = ProcessStats::read().resident_bytes;
    let metrics = Arc::new(Metrics::new("bench").unwrap());
    let pause = Arc::new(Pause::new(metrics.paused.clone()));
    pause.pause();
    // No workers run: a paused provisioner's queue only fills.
    let fleet = Fleet::new(
        FleetOptions {
            workers: 0,
            ..FleetOptions::default()
        },
        Arc::clone(&metrics),
        pause,
        Arc::new(Never),
    );
    for n in 0..50_000 {
        fleet.add(
            &Identity::parse(&format!("node-{n:05}.rack-{:03}.dc1.example.net", n % 997))
                .expect("a valid identity"),
            Source::Discovery,
        );
    }
    let after = ProcessStats::read().resident_bytes;
    println!(
        "queued {} nodes: RSS {:.1} MB (was {:.1} MB before the fleet)",
        fleet.queued(),
        after / 1e6,
        before / 1e6
    );
}
