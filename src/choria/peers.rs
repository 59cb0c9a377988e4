//! Messages between provisioner instances, on `provisioning.provisioner.>`.
//!
//! A Choria broker lets provisioning-mode servers publish only on
//! `choria.lifecycle.>`, `provisioning.reply.>` and `provisioning.registration.>`,
//! and subscribe only to `provisioning.node.>` and four broadcast agent subjects
//! (go-choria's `broker/network/choria_auth.go`); the `provisioner` user has no subject limits in the
//! provisioning account. So a message on this prefix can only come from another
//! provisioner: a node can neither fake one nor read one. Nothing that decides who
//! leads or who provisions what is ever read from `choria.lifecycle.>`.
//!
//! Two kinds of messages live here: the election handover ([`Resignation`]) and the
//! active-active membership of one site: [`Heartbeat`]s on
//! `provisioning.provisioner.peers.<site>` and startup events handed to the instance
//! that owns the node ([`Handoff`]) on `provisioning.provisioner.peers.<site>.node.
//! <md5(owner)>`. Every message is read as hostile all the same (a misconfigured or
//! buggy provisioner is possible): bounded in size, decoded strictly, identities
//! checked with [`Identity::parse`], the site compared; a refusal is reported with a
//! [`PeerMessageError`] whose [`reason`](PeerMessageError::reason) is a metric label.

mod approvals;
mod seal;
#[cfg(test)]
pub(crate) use approvals::approvals_subject_of;
pub(crate) use approvals::{
    publish_approvals, subscribe_approvals, ApprovalBatch, ApprovalRecord, BatchKind, DecidedBy,
    Decision, RecordWire, TableDigest, MAX_APPROVAL_MESSAGE, MAX_BY, MAX_CLOCK, MAX_FACTS,
    MAX_FACT_VALUE, MAX_REASON, MAX_RECORDS, MAX_VERSION,
};
#[cfg(test)]
pub(crate) use seal::MAX_AGE;
pub(crate) use seal::{Opened, Seal, SealSetupError};
#[cfg(feature = "sim")]
pub(crate) use seal::{PeerKey, PeerTrust};

use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};

use super::bus::{Bus, Subscription};
use super::identity::{Identity, IdentityError};
use super::subject::{Subject, SubjectError, SubjectFilter};

/// The subject space of provisioner-to-provisioner messages.
pub(crate) const PEER_PREFIX: &str = "provisioning.provisioner";

/// The largest peer message read.
const MAX_PEER_MESSAGE: usize = 4096;

/// A leader that stopped cleanly: it wrote `revision` (an empty value) as its last
/// write to the election key, and a standby may take the key over by writing with
/// that revision expected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Resignation {
    /// The instance that resigned.
    pub identity: String,
    /// The key's revision after its last write.
    pub revision: u64,
}

fn resignation_subject(election: &str) -> Result<Subject, SubjectError> {
    Subject::new(format!("{PEER_PREFIX}.election.{election}.resigned"))
}

/// Announces `resignation` from the election `election`.
pub(crate) fn publish_resignation(
    bus: &Bus,
    election: &str,
    resignation: &Resignation,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(resignation).map_err(std::io::Error::other)?;
    bus.publish(&resignation_subject(election).map_err(invalid)?, &body)
}

/// Calls `deliver` (on the reader thread: it must return at once) for every
/// resignation announced in the election `election`; malformed messages are ignored.
pub(crate) fn subscribe_resignations(
    bus: &Bus,
    election: &str,
    deliver: impl Fn(Resignation) + Send + Sync + 'static,
) -> std::io::Result<Subscription> {
    let filter: SubjectFilter = resignation_subject(election).map_err(invalid)?.into();
    bus.subscribe(&filter, None, move |msg| {
        if let Ok(r) = decode::<Resignation>(&msg.data, MAX_PEER_MESSAGE) {
            deliver(r);
        }
    })
}

/// What an active-active instance says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PeerState {
    /// Alive and taking its share.
    Alive,
    /// Stopping cleanly: its share belongs to the others from now on.
    Leaving,
}

/// One heartbeat of an active-active instance, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Heartbeat {
    /// The instance (its Choria identity).
    pub identity: Identity,
    /// Its `site`.
    pub site: String,
    /// Random per process start: a restarted instance is a new incarnation, and an
    /// old incarnation's messages never remove the new one.
    pub incarnation: u64,
    /// Counts up from 1 within one incarnation; an older or repeated one is ignored.
    pub sequence: u64,
    /// Unix seconds when sent (informational: expiry uses the receiver's own clock).
    pub time: u64,
    /// The sender's heartbeat period in milliseconds (10 ms to 1 minute): a peer is
    /// silent after three of its own periods, whatever the receiver's.
    pub every_ms: u64,
    /// Alive or leaving.
    pub state: PeerState,
}

/// The shortest and longest heartbeat periods accepted, in milliseconds.
pub(crate) const HEARTBEAT_MS: std::ops::RangeInclusive<u64> = 10..=60_000;

/// The wire form of [`Heartbeat`] and [`Handoff`] before validation.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HeartbeatWire {
    identity: String,
    site: String,
    incarnation: u64,
    sequence: u64,
    time: u64,
    every_ms: u64,
    state: PeerState,
}

/// A startup event read by an instance that does not own the node, handed to the
/// owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Handoff {
    /// The instance handing the node over.
    pub from: Identity,
    /// The node.
    pub node: Identity,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HandoffWire {
    from: String,
    node: String,
}

/// Why a peer message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PeerMessageError {
    /// Larger than its kind may be (4 KiB; approvals 512 KiB).
    #[error("a peer message of {0} bytes, more than its kind may be (4096; approvals: 524288)")]
    TooLarge(usize),
    /// Not the expected JSON document.
    #[error("an undecodable peer message")]
    Undecodable,
    /// An identity in it breaks the identity rule.
    #[error("a peer message with a bad identity: {0}")]
    Identity(IdentityError),
    /// From another site (a misconfigured instance on our subject).
    #[error("a peer message from another site")]
    ForeignSite,
    /// A heartbeat period outside [`HEARTBEAT_MS`].
    #[error("a heartbeat with a period of {0} ms (allowed: {min} to {max} ms)", min = HEARTBEAT_MS.start(), max = HEARTBEAT_MS.end())]
    Period(u64),
    /// An approvals message with too many records, or a string in a record too
    /// long or holding a control character.
    #[error("an approvals message with too many records or a bad string in a record")]
    Field,
    /// An approvals record whose decision clock is past [`MAX_CLOCK`], or does not
    /// match its decision (0 exactly when undecided), or an undecided record that
    /// was never held.
    #[error("an approvals record with a bad decision clock")]
    Clock,
    /// Not sealed, where peer messages must be signed.
    #[error("an unsigned peer message (this site signs them)")]
    Unsigned,
    /// A signature that does not verify over what it claims to sign.
    #[error("a peer message whose signature does not verify")]
    Signature,
    /// A credential the site's CA or organisation issuer does not vouch for (or
    /// expired, or of the other kind).
    #[error("a peer message signed with a credential the site does not trust")]
    Untrusted,
    /// A trusted credential whose name `peer_signers` does not allow, or a client
    /// JWT without the `provisioner` permission.
    #[error("a peer message signed by a name not allowed as a provisioner (peer_signers)")]
    Signer,
    /// Signed for another subject, or not newer than the last one seen from its
    /// sending process on this subject.
    #[error("a replayed peer message")]
    Replayed,
    /// Sealed more than `MAX_AGE` seconds away from the receiver's clock.
    #[error("a peer message sealed more than 600 s from this instance's clock")]
    Stale,
}

impl PeerMessageError {
    /// `too_large`, `undecodable`, `identity`, `foreign_site`, `period`, `field`,
    /// `clock`, `unsigned`, `signature`, `untrusted`, `signer`, `replayed` or
    /// `stale`: the metric label.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            PeerMessageError::TooLarge(_) => "too_large",
            PeerMessageError::Undecodable => "undecodable",
            PeerMessageError::Identity(_) => "identity",
            PeerMessageError::ForeignSite => "foreign_site",
            PeerMessageError::Period(_) => "period",
            PeerMessageError::Field => "field",
            PeerMessageError::Clock => "clock",
            PeerMessageError::Unsigned => "unsigned",
            PeerMessageError::Signature => "signature",
            PeerMessageError::Untrusted => "untrusted",
            PeerMessageError::Signer => "signer",
            PeerMessageError::Replayed => "replayed",
            PeerMessageError::Stale => "stale",
        }
    }
}

/// Every [`PeerMessageError::reason`]: the metrics layer's list, whose series start
/// at 0 (a test checks every reason is in it).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) const PEER_REFUSALS: [&str; 13] = crate::metrics::PEER_REFUSALS;

/// `provisioning.provisioner.peers.<site>`; `site` must be one subject token.
pub(crate) fn heartbeat_subject(site: &str) -> Result<Subject, SubjectError> {
    if site.contains('.') {
        return Err(SubjectError::NotOneToken);
    }
    Subject::new(format!("{PEER_PREFIX}.peers.{site}"))
}

/// `provisioning.provisioner.peers.<site>.node.<md5hex(owner)>`: where nodes are
/// handed to `owner`.
pub(crate) fn handoff_subject(site: &str, owner: &Identity) -> Result<Subject, SubjectError> {
    heartbeat_subject(site)?
        .child("node")?
        .child(&hex::encode(Md5::digest(owner.as_str().as_bytes())))
}

impl Heartbeat {
    /// The JSON body.
    pub(crate) fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(&HeartbeatWire {
            identity: self.identity.to_string(),
            site: self.site.clone(),
            incarnation: self.incarnation,
            sequence: self.sequence,
            time: self.time,
            every_ms: self.every_ms,
            state: self.state,
        })
        .unwrap_or_default()
    }

    /// Reads and checks a heartbeat body for `site`.
    pub(crate) fn parse(body: &[u8], site: &str) -> Result<Heartbeat, PeerMessageError> {
        let wire: HeartbeatWire = decode(body, MAX_PEER_MESSAGE)?;
        let identity = Identity::parse(&wire.identity).map_err(PeerMessageError::Identity)?;
        if wire.site != site {
            return Err(PeerMessageError::ForeignSite);
        }
        if !HEARTBEAT_MS.contains(&wire.every_ms) {
            return Err(PeerMessageError::Period(wire.every_ms));
        }
        Ok(Heartbeat {
            identity,
            site: wire.site,
            incarnation: wire.incarnation,
            sequence: wire.sequence,
            time: wire.time,
            every_ms: wire.every_ms,
            state: wire.state,
        })
    }
}

impl Handoff {
    /// The JSON body.
    pub(crate) fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(&HandoffWire {
            from: self.from.to_string(),
            node: self.node.to_string(),
        })
        .unwrap_or_default()
    }

    /// Reads and checks a handoff body.
    pub(crate) fn parse(body: &[u8]) -> Result<Handoff, PeerMessageError> {
        let wire: HandoffWire = decode(body, MAX_PEER_MESSAGE)?;
        Ok(Handoff {
            from: Identity::parse(&wire.from).map_err(PeerMessageError::Identity)?,
            node: Identity::parse(&wire.node).map_err(PeerMessageError::Identity)?,
        })
    }
}

/// A peer message's body of at most `most` bytes, decoded strictly as `T`.
fn decode<T: serde::de::DeserializeOwned>(body: &[u8], most: usize) -> Result<T, PeerMessageError> {
    if body.len() > most {
        return Err(PeerMessageError::TooLarge(body.len()));
    }
    serde_json::from_slice(body).map_err(|_| PeerMessageError::Undecodable)
}

/// Publishes `body` on `subject`, sealed by `seal`; a subject that could not be
/// made (a site that is not one token) is `InvalidInput`.
fn publish_on(
    bus: &Bus,
    seal: &Seal,
    subject: Result<Subject, SubjectError>,
    body: &[u8],
) -> std::io::Result<()> {
    let subject = subject.map_err(invalid)?;
    let sealed = seal.seal(subject.as_str(), body, crate::clock::unix_now())?;
    bus.publish(&subject, &sealed)
}

/// Calls `deliver` (on the reader thread: it must return at once) with the body of
/// every message on `subject` that `seal` opens (of at most `most` bytes), or why
/// one was refused; a subject that could not be made is `InvalidInput`.
fn subscribe_on(
    bus: &Bus,
    seal: &std::sync::Arc<Seal>,
    subject: Result<Subject, SubjectError>,
    most: usize,
    deliver: impl Fn(Result<Opened, PeerMessageError>) + Send + Sync + 'static,
) -> std::io::Result<Subscription> {
    let filter: SubjectFilter = subject.map_err(invalid)?.into();
    let seal = std::sync::Arc::clone(seal);
    bus.subscribe(&filter, None, move |msg| {
        deliver(seal.open(&msg.subject, &msg.data, most, crate::clock::unix_now()))
    })
}

fn invalid(e: SubjectError) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, e)
}

/// Publishes `heartbeat` on its site's subject, sealed by `seal`.
pub(crate) fn publish_heartbeat(
    bus: &Bus,
    seal: &Seal,
    heartbeat: &Heartbeat,
) -> std::io::Result<()> {
    publish_on(
        bus,
        seal,
        heartbeat_subject(&heartbeat.site),
        &heartbeat.to_json(),
    )
}

/// Calls `deliver` (on the reader thread: it must return at once) with every
/// heartbeat of `site`, or why one was refused.
pub(crate) fn subscribe_heartbeats(
    bus: &Bus,
    seal: &std::sync::Arc<Seal>,
    site: &str,
    deliver: impl Fn(Result<Heartbeat, PeerMessageError>) + Send + Sync + 'static,
) -> std::io::Result<Subscription> {
    let mine = site.to_string();
    subscribe_on(
        bus,
        seal,
        heartbeat_subject(site),
        MAX_PEER_MESSAGE,
        move |opened| deliver(opened.and_then(|o| Heartbeat::parse(&o.body, &mine))),
    )
}

/// Hands `node` from `from` to `owner` in `site`.
pub(crate) fn publish_handoff(
    bus: &Bus,
    seal: &Seal,
    site: &str,
    owner: &Identity,
    handoff: &Handoff,
) -> std::io::Result<()> {
    publish_on(bus, seal, handoff_subject(site, owner), &handoff.to_json())
}

/// Calls `deliver` (on the reader thread) with every node handed to `me` in `site`.
pub(crate) fn subscribe_handoffs(
    bus: &Bus,
    seal: &std::sync::Arc<Seal>,
    site: &str,
    me: &Identity,
    deliver: impl Fn(Result<Handoff, PeerMessageError>) + Send + Sync + 'static,
) -> std::io::Result<Subscription> {
    subscribe_on(
        bus,
        seal,
        handoff_subject(site, me),
        MAX_PEER_MESSAGE,
        move |opened| deliver(opened.and_then(|o| Handoff::parse(&o.body))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat() -> Heartbeat {
        Heartbeat {
            identity: Identity::parse("p1.example.net").unwrap(),
            site: "lon".into(),
            incarnation: 7,
            sequence: 3,
            time: 1_700_000_000,
            every_ms: 2000,
            state: PeerState::Alive,
        }
    }

    #[test]
    fn a_heartbeat_round_trips() {
        let b = beat();
        assert_eq!(Heartbeat::parse(&b.to_json(), "lon"), Ok(b.clone()));
        let leaving = Heartbeat {
            state: PeerState::Leaving,
            ..b
        };
        let json = leaving.to_json();
        assert!(String::from_utf8_lossy(&json).contains("\"state\":\"leaving\""));
        assert_eq!(Heartbeat::parse(&json, "lon"), Ok(leaving));
    }

    #[test]
    fn bad_heartbeats_are_refused_with_their_reason() {
        let json = String::from_utf8(beat().to_json()).unwrap();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (vec![b' '; MAX_PEER_MESSAGE + 1], "too_large"),
            (b"{".to_vec(), "undecodable"),
            (b"[]".to_vec(), "undecodable"),
            (
                json.replace("\"alive\"", "\"dead\"").into_bytes(),
                "undecodable",
            ),
            (json.replace("}", ",\"x\":1}").into_bytes(), "undecodable"),
            (
                json.replace("\"sequence\":3", "\"sequence\":-3")
                    .into_bytes(),
                "undecodable",
            ),
            (
                json.replace("p1.example.net", "p1 x").into_bytes(),
                "identity",
            ),
            (json.replace("p1.example.net", "").into_bytes(), "identity"),
        ];
        for (body, reason) in cases {
            let e = Heartbeat::parse(&body, "lon").unwrap_err();
            assert_eq!(e.reason(), reason, "{}", String::from_utf8_lossy(&body));
            assert!(PEER_REFUSALS.contains(&e.reason()));
        }
        assert_eq!(
            Heartbeat::parse(json.as_bytes(), "par"),
            Err(PeerMessageError::ForeignSite)
        );
        for bad in ["0", "9", "60001"] {
            let body = json.replace("\"every_ms\":2000", &format!("\"every_ms\":{bad}"));
            assert_eq!(
                Heartbeat::parse(body.as_bytes(), "lon")
                    .unwrap_err()
                    .reason(),
                "period"
            );
        }
    }

    #[test]
    fn handoffs_round_trip_and_check_both_identities() {
        let h = Handoff {
            from: Identity::parse("p1").unwrap(),
            node: Identity::parse("n1.example.net").unwrap(),
        };
        assert_eq!(Handoff::parse(&h.to_json()), Ok(h));
        for body in [
            &br#"{"from":"p1","node":"n1 x"}"#[..],
            br#"{"from":"*","node":"n1"}"#,
        ] {
            assert_eq!(Handoff::parse(body).unwrap_err().reason(), "identity");
        }
        assert_eq!(
            Handoff::parse(br#"{"from":"p1"}"#).unwrap_err().reason(),
            "undecodable"
        );
    }

    #[test]
    fn subjects_stay_in_the_provisioner_space() {
        assert_eq!(
            heartbeat_subject("lon").unwrap().as_str(),
            "provisioning.provisioner.peers.lon"
        );
        assert!(heartbeat_subject("lon.x").is_err());
        assert!(heartbeat_subject("l*").is_err());
        let owner = Identity::parse("p1.example.net").unwrap();
        let s = handoff_subject("lon", &owner).unwrap();
        assert!(
            s.as_str()
                .starts_with("provisioning.provisioner.peers.lon.node."),
            "{s}"
        );
        assert_eq!(s.as_str().rsplit('.').next().unwrap().len(), 32);
    }
}
