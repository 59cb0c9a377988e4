//! Messages between provisioner instances, on `provisioning.provisioner.>`.
//!
//! A Choria broker lets provisioning-mode servers publish only on
//! `choria.lifecycle.>`, `provisioning.reply.>` and `provisioning.registration.>`,
//! and subscribe only to `provisioning.node.>` and four broadcast agent subjects
//! (`spec/broker-auth.md`); the `provisioner` user has no subject limits in the
//! provisioning account. So a message on this prefix can only come from another
//! provisioner: a node can neither fake one nor read one. Nothing that decides who
//! leads or who provisions what is ever read from `choria.lifecycle.>`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::bus::{Bus, Subscription};
use super::subject::{Subject, SubjectError, SubjectFilter};

/// The subject space of provisioner-to-provisioner messages.
pub const PEER_PREFIX: &str = "provisioning.provisioner";

/// The largest peer message read.
const MAX_PEER_MESSAGE: usize = 4096;

/// A leader that stopped cleanly: it wrote `revision` (an empty value) as its last
/// write to the election key, and a standby may take the key over by writing with
/// that revision expected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resignation {
    /// The instance that resigned.
    pub identity: String,
    /// The key's revision after its last write.
    pub revision: u64,
}

fn resignation_subject(election: &str) -> Result<Subject, SubjectError> {
    Subject::new(format!("{PEER_PREFIX}.election.{election}.resigned"))
}

/// Announces `resignation` from the election `election`.
pub fn publish_resignation(
    bus: &Bus,
    election: &str,
    resignation: &Resignation,
) -> std::io::Result<()> {
    let subject = resignation_subject(election)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let body = serde_json::to_vec(resignation).map_err(std::io::Error::other)?;
    bus.publish(&subject, &body)
}

/// Calls `deliver` (on the reader thread: it must return at once) for every
/// resignation announced in the election `election`; malformed messages are ignored.
pub fn subscribe_resignations(
    bus: &Bus,
    election: &str,
    deliver: impl Fn(Resignation) + Send + Sync + 'static,
) -> std::io::Result<Subscription> {
    let filter: SubjectFilter = resignation_subject(election)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?
        .into();
    let deliver = Arc::new(deliver);
    bus.subscribe(&filter, None, move |msg| {
        if msg.data.len() > MAX_PEER_MESSAGE {
            return;
        }
        if let Ok(r) = serde_json::from_slice::<Resignation>(&msg.data) {
            deliver(r);
        }
    })
}
