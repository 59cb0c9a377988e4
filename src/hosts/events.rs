//! The lifecycle listener: startup events of `lifecycle_component` queue the node at
//! once, without waiting for the next discovery. Dropped while paused (standbys do
//! not buffer, as in Go).

use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver};

use super::{AddResult, Fleet, Source};

/// Reads a startup event: the identity it announces, `None` for other event types.
pub type EventDecoder = dyn Fn(&[u8]) -> Result<Option<String>, String> + Send + Sync;

/// How often the same kind of warning may be logged.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Handles event payloads from `events` until the fleet stops or `events` closes.
pub fn run(fleet: &Fleet, events: &Receiver<Vec<u8>>, decode: &EventDecoder) {
    let stopped = fleet.stopped();
    let mut warned_paused: Option<Instant> = None;
    let mut warned_full: Option<Instant> = None;
    let due = |last: &mut Option<Instant>| {
        let now = Instant::now();
        if last.is_none_or(|t| now.duration_since(t) >= WARN_EVERY) {
            *last = Some(now);
            true
        } else {
            false
        }
    };
    loop {
        let payload = select! {
            recv(events) -> msg => match msg { Ok(p) => p, Err(_) => return },
            recv(stopped) -> _ => return,
        };
        if fleet.pause().paused() {
            if due(&mut warned_paused) {
                log::warn!("Skipping event processing while paused");
            }
            continue;
        }
        match decode(&payload) {
            Ok(Some(identity)) => {
                match fleet.add(&identity, Source::Event) {
                    AddResult::QueueFull => {
                        fleet.take_queue_full();
                        if due(&mut warned_full) {
                            log::warn!("The work queue is full: startup events are not queued until it drains");
                        }
                    }
                    AddResult::Added => log::debug!("Queued {identity} from its startup event"),
                    AddResult::Known | AddResult::Stopping => {}
                }
            }
            Ok(None) => {}
            Err(e) => log::warn!("could not handle message: {e}"),
        }
    }
}
