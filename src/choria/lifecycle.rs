//! Choria lifecycle events (go-choria's `protocol/v1` and `protocol/v2`): decoding startup (and
//! other) events in the flat Choria format and the CloudEvents 1.0 envelope that
//! servers send by default; encoding the provisioner's own events.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::{bounded, unbounded, Receiver};
use serde::{Deserialize, Serialize};

use super::bus::{Bus, Subscription as BusSubscription};
use super::identity::{Identity, IdentityError};
use super::protocol::{gojson, Layer, ProtocolError, MAX_PAYLOAD};
use super::subject::{QueueGroup, Subject, SubjectError, SubjectFilter};
use crate::crypto::ids;
use crate::metrics::Metrics;
use crate::throttle::Throttle;
use crate::untrusted::shown;

/// A lifecycle event as the provisioner reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Normalised protocol, `io.choria.lifecycle.v1.<type>`.
    pub protocol: String,
    /// Event id.
    #[serde(default)]
    pub id: String,
    /// Identity of the emitter.
    #[serde(default)]
    pub identity: String,
    /// Emitting component (`provision_mode_server`, `provisioner`, ...).
    #[serde(default)]
    pub component: String,
    /// Unix seconds.
    #[serde(default)]
    pub timestamp: i64,
    /// Version (startup, alive, upgraded).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// New version (upgraded).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub new_version: String,
}

impl Event {
    /// The event type: `startup`, `shutdown`, `provisioned`, ...
    pub fn kind(&self) -> &str {
        self.protocol.rsplit('.').next().unwrap_or("")
    }

    /// A new event of `kind` for `identity`/`component` stamped now.
    pub(crate) fn new(kind: &str, identity: &str, component: &str, version: &str) -> Event {
        Event {
            protocol: format!("io.choria.lifecycle.v1.{kind}"),
            id: ids::uuid_v4(),
            identity: identity.to_string(),
            component: component.to_string(),
            timestamp: crate::clock::unix_now() as i64,
            version: version.to_string(),
            new_version: String::new(),
        }
    }

    /// The flat Choria format (the provisioner's own events).
    pub(crate) fn to_choria_json(&self) -> Vec<u8> {
        gojson::to_vec(self)
    }

    /// The CloudEvents 1.0 envelope servers publish by default, written field by
    /// field (no `serde_json::Value` made first: the simulator publishes one per node
    /// start). Node side: the daemon only reads these.
    #[cfg(any(test, feature = "node-side"))]
    pub(crate) fn to_cloudevent_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(512);
        gojson::Object::start(&mut out)
            .str("specversion", "1.0")
            .str("id", &self.id)
            .str("source", "io.choria.lifecycle")
            .str("type", &self.protocol)
            .str("subject", &self.identity)
            .str("datacontenttype", "application/json")
            .str("time", &crate::clock::rfc3339(self.timestamp as f64))
            .value("data", self)
            .end();
        out
    }

    /// The subject this event is published on (the component must be a valid token).
    pub(crate) fn subject(&self) -> Result<Subject, SubjectError> {
        subject(self.kind(), &self.component)
    }
}

/// `choria.lifecycle.event.<kind>.<component>`.
pub(crate) fn subject(kind: &str, component: &str) -> Result<Subject, SubjectError> {
    Subject::new(format!("choria.lifecycle.event.{kind}.{component}"))
}

/// Publishes `event` in the flat Choria format on its subject.
pub fn publish(bus: &Bus, event: &Event) -> std::io::Result<()> {
    let subject = event
        .subject()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    bus.publish(&subject, &event.to_choria_json())
}

/// The largest startup event read; real ones are a few hundred bytes.
pub(crate) const MAX_EVENT_BYTES: usize = 64 * 1024;

/// Startup events waiting for the listener; a fleet of 50,000 booting at once fits.
/// Counted on an unbounded channel: a bounded one would hold every slot (1.5 MiB)
/// for the daemon's whole life.
pub(crate) const EVENT_BACKLOG: usize = 65_536;

/// Startup events waiting to be decoded: the decoder takes a real one in
/// microseconds, so a booting fleet's events never pile up this high.
const RAW_EVENT_BACKLOG: usize = 8192;

/// The most bytes of startup events waiting to be decoded: 50,000 real events of a
/// few hundred bytes fit; 64 KiB floods are dropped past it, not buffered.
pub(crate) const EVENT_BYTES_BACKLOG: usize = 32 * 1024 * 1024;

/// Subscribes to startup events of `component` (in `queue` when given). The NATS
/// reader thread only checks an event's size and hands its bytes to a decoder thread
/// (at most 8,192 events and [`EVENT_BYTES_BACKLOG`] bytes waiting), so
/// a flood of large events with thousands of keys cannot delay the replies, PONGs and
/// election messages the reader also carries. The decoder validates each identity;
/// only valid ones reach the returned channel, at most [`EVENT_BACKLOG`] of them
/// waiting. What is dropped is counted in `dropped_events` (and
/// `refused_identities`), and warned about at most once a minute. The decoder ends
/// when the subscription is dropped.
pub(crate) fn subscribe_startups(
    bus: &Bus,
    component: &str,
    queue: Option<&QueueGroup>,
    metrics: Arc<Metrics>,
) -> std::io::Result<(BusSubscription, Receiver<Identity>)> {
    let filter: SubjectFilter = subject("startup", component)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?
        .into();
    let (tx, rx) = unbounded();
    let (raw_tx, raw_rx) = bounded::<Vec<u8>>(RAW_EVENT_BACKLOG);
    let waiting_bytes = Arc::new(AtomicUsize::new(0));
    let dropper = Arc::new(Dropper {
        metrics: Arc::clone(&metrics),
        throttle: Throttle::default(),
    });
    let decoder = {
        let (dropper, waiting_bytes) = (Arc::clone(&dropper), Arc::clone(&waiting_bytes));
        move || {
            for bytes in raw_rx {
                waiting_bytes.fetch_sub(bytes.len(), Ordering::Relaxed);
                match startup_identity(&bytes) {
                    Ok(Some(identity)) => {
                        // This thread is the only sender: the count cannot pass the
                        // bound between the check and the send.
                        if tx.len() >= EVENT_BACKLOG || tx.send(identity).is_err() {
                            dropper.drop_event("backlog_full", &"the listener is behind");
                        }
                    }
                    Ok(None) => {}
                    Err(StartupError::Identity(e, shown)) => {
                        dropper
                            .metrics
                            .refused_identities
                            .with_label_values(&["event", e.reason()])
                            .inc();
                        dropper
                            .drop_event("invalid_identity", &format!("identity \"{shown}\": {e}"));
                    }
                    Err(StartupError::Decode(e)) => dropper.drop_event("undecodable", &e),
                }
            }
        }
    };
    std::thread::Builder::new()
        .name("events-decode".into())
        .spawn(decoder)?;
    let subscription = bus.subscribe(&filter, queue, move |msg| {
        if msg.oversized_headers {
            return dropper.drop_event("oversized_headers", &"its header block was not read");
        }
        let len = msg.data.len();
        if len > MAX_EVENT_BYTES {
            return dropper.drop_event("too_large", &format!("{len} bytes"));
        }
        if waiting_bytes.fetch_add(len, Ordering::Relaxed) + len > EVENT_BYTES_BACKLOG {
            waiting_bytes.fetch_sub(len, Ordering::Relaxed);
            return dropper.drop_event("backlog_full", &"the decoder is behind");
        }
        if raw_tx.try_send(msg.data).is_err() {
            waiting_bytes.fetch_sub(len, Ordering::Relaxed);
            dropper.drop_event("backlog_full", &"the decoder is behind");
        }
    })?;
    Ok((subscription, rx))
}

/// Counts and warns about (once a minute) dropped startup events.
struct Dropper {
    metrics: Arc<Metrics>,
    throttle: Throttle,
}

impl Dropper {
    fn drop_event(&self, reason: &str, why: &dyn std::fmt::Display) {
        self.metrics
            .dropped_events
            .with_label_values(&[reason])
            .inc();
        if let Some(held) = self.throttle.ready() {
            log::warn!(
                "Dropped a startup event: {why} ({held} more dropped since the last warning)"
            );
        }
    }
}

fn err(reason: impl std::fmt::Display) -> ProtocolError {
    ProtocolError::new(Layer::Transport, format!("lifecycle event: {reason}"))
}

/// Normalises `choria:lifecycle:<type>:1` to `io.choria.lifecycle.v1.<type>`.
fn normalise(protocol: &str) -> Option<String> {
    if let Some(kind) = protocol.strip_prefix("io.choria.lifecycle.v1.") {
        return (!kind.is_empty()).then(|| protocol.to_string());
    }
    let kind = protocol
        .strip_prefix("choria:lifecycle:")?
        .strip_suffix(":1")?;
    (!kind.is_empty() && !kind.contains(':')).then(|| format!("io.choria.lifecycle.v1.{kind}"))
}

fn from_choria(value: serde_json::Value) -> Result<Event, ProtocolError> {
    let mut event: Event = serde_json::from_value(value).map_err(err)?;
    event.protocol = normalise(&event.protocol)
        .ok_or_else(|| err(format!("unknown protocol \"{}\"", shown(&event.protocol))))?;
    Ok(event)
}

/// Decodes a lifecycle event in either format.
pub fn decode(bytes: &[u8]) -> Result<Event, ProtocolError> {
    if bytes.len() > MAX_PAYLOAD {
        return Err(err(format!("{} bytes is too large", bytes.len())));
    }
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(err)?;
    let protocol = value.get("protocol").and_then(|p| p.as_str()).unwrap_or("");
    if protocol.starts_with("io.choria.lifecycle") || protocol.starts_with("choria:lifecycle:") {
        return from_choria(value);
    }
    if value.get("specversion").and_then(|v| v.as_str()) == Some("1.0")
        && value.get("source").and_then(|v| v.as_str()) == Some("io.choria.lifecycle")
    {
        if let Some(data) = value.get("data").filter(|d| d.is_object()) {
            return from_choria(data.clone());
        }
        if let Some(encoded) = value.get("data_base64").and_then(|d| d.as_str()) {
            use base64::Engine as _;
            let raw = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(err)?;
            return from_choria(serde_json::from_slice(&raw).map_err(err)?);
        }
        return Err(err("CloudEvent without data"));
    }
    Err(err("neither a Choria lifecycle event nor a CloudEvent"))
}

/// Why a startup event was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StartupError {
    /// Not a lifecycle event.
    #[error(transparent)]
    Decode(ProtocolError),
    /// The identity is not valid; the value is escaped and cut for logs.
    #[error("startup event for \"{1}\": {0}")]
    Identity(IdentityError, String),
}

/// The identity a startup event announces, `None` for other event types.
pub(crate) fn startup_identity(bytes: &[u8]) -> Result<Option<Identity>, StartupError> {
    let event = decode(bytes).map_err(StartupError::Decode)?;
    if event.kind() != "startup" {
        return Ok(None);
    }
    Identity::parse(&event.identity)
        .map(Some)
        .map_err(|e| StartupError::Identity(e, shown(&event.identity)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cloudevent_is_the_bytes_of_its_json_value() {
        let mut upgraded = Event::new(
            "upgraded",
            "n1.example.net",
            "provision_mode_server",
            "0.29.4",
        );
        upgraded.new_version = "0.30.0<&>".into();
        for event in [upgraded, Event::new("startup", "n\u{2028}1", "c", "")] {
            let value = serde_json::json!({
                "specversion": "1.0",
                "id": event.id,
                "source": "io.choria.lifecycle",
                "type": event.protocol,
                "subject": event.identity,
                "datacontenttype": "application/json",
                "time": crate::clock::rfc3339(event.timestamp as f64),
                "data": event,
            });
            assert_eq!(event.to_cloudevent_json(), gojson::to_vec(&value));
            assert_eq!(decode(&event.to_cloudevent_json()).unwrap(), event);
        }
    }
}
