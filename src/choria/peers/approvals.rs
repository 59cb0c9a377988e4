//! Operators' approvals shared by the instances of one site, on
//! `provisioning.provisioner.approvals.<site>`, and the same records as the
//! approval file keeps them.
//!
//! A record says what was last decided on one identity (approved, denied,
//! forgotten, or nothing yet), the decision's clock (a per-identity counter that
//! orders it), by whom and on which instance, and the sightings since. Instances
//! merge records by the rule of `fleet/approvals/merge.rs`, so every instance ends
//! with the same table whatever order the messages came in. A batch
//! is a few hundred records at most; each record's strings are bounded and free of
//! control characters, its identity passes [`Identity::parse`], and a batch from
//! another site is refused: a hostile or buggy peer costs a counted refusal.

use serde::{Deserialize, Serialize};

use super::{decode, publish_on, PeerMessageError, PEER_PREFIX};
use crate::choria::bus::{Bus, Subscription};
use crate::choria::identity::Identity;
use crate::choria::subject::{Subject, SubjectError, SubjectFilter};

/// The most records one message carries.
pub(crate) const MAX_RECORDS: usize = 128;

/// The largest approvals message read: [`MAX_RECORDS`] records of the largest size.
pub(crate) const MAX_APPROVAL_MESSAGE: usize = 512 * 1024;

/// The longest "by" (an operator, or the instance that held the node).
pub(crate) const MAX_BY: usize = 160;
/// The longest reason an operator gives.
pub(crate) const MAX_REASON: usize = 256;
/// The longest version kept.
pub(crate) const MAX_VERSION: usize = 64;
/// The most facts a record keeps.
pub(crate) const MAX_FACTS: usize = 8;
/// The longest fact name.
pub(crate) const MAX_FACT_NAME: usize = 64;
/// The longest fact value kept (longer ones are cut when taken from an inventory).
pub(crate) const MAX_FACT_VALUE: usize = 128;

/// An operator's decision on an identity, or none yet ([`Decision::Pending`]). The
/// order breaks ties between two decisions of the same [`ApprovalRecord::clock`]
/// (taken on two instances that had not heard of each other's): the one that lets
/// less through wins, so a tie never provisions a node one of them held back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Decision {
    /// No decision yet (clock 0): the identity waits for an operator once held.
    Pending,
    /// Its helper may run.
    Approved,
    /// An operator took the decision back: the identity waits again when seen.
    Forgotten,
    /// Refused at admission until forgotten.
    Denied,
}

impl Decision {
    /// `pending`, `forgotten`, `approved` or `denied`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Decision::Pending => "pending",
            Decision::Forgotten => "forgotten",
            Decision::Approved => "approved",
            Decision::Denied => "denied",
        }
    }
}

/// The operator who took a decision, as the deciding instance's kernel named them
/// (the control socket's peer credentials).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecidedBy {
    /// Their effective uid.
    pub uid: u32,
    /// The uid's name, if it had one.
    #[serde(default)]
    pub user: Option<String>,
    /// The pid of the command they ran.
    pub pid: i32,
}

/// The highest decision clock accepted from a peer or the file: far beyond what
/// operators can reach (one decision a nanosecond for a century is under 2^62),
/// and far enough below `u64::MAX` that one more is never a wrap.
pub(crate) const MAX_CLOCK: u64 = 1 << 62;

/// One identity's record: the last decision taken on it, and the sightings since.
///
/// Two parts, merged by the rule in `fleet/approvals/merge.rs`: the decision (its
/// `clock`, a counter of this identity's decisions, decides which is later; the
/// times are only shown) and the sightings that belong to it (`held_at`,
/// `first_seen`, `last_seen`, `version`, `facts`: the node as instances saw it
/// since that decision).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApprovalRecord {
    /// The node.
    pub identity: Identity,
    /// The decision's place in this identity's history: one more than the clock of
    /// every decision the deciding instance had seen for it; 0 with no decision.
    pub clock: u64,
    /// The last decision ([`Decision::Pending`] exactly when `clock` is 0).
    pub decision: Decision,
    /// When it was taken, Unix nanoseconds, by the deciding instance's clock: shown,
    /// and a tie-break, never an order (0 with no decision).
    pub at: u64,
    /// Who decided, as shown: the operator as the deciding instance's kernel named
    /// them.
    pub by: String,
    /// The operator who decided, field by field (none for a record without a
    /// decision, or one from a file written before it was kept).
    pub operator: Option<DecidedBy>,
    /// The instance that took the decision (its Choria identity).
    pub instance: String,
    /// The operator's reason (deny).
    pub reason: String,
    /// When an instance first held the node since the decision, Unix nanoseconds
    /// (0: not held since): a held node without an approval or denial waits.
    pub held_at: u64,
    /// When the node was first held since the decision, Unix seconds (0: never).
    pub first_seen: u64,
    /// When the node was last seen (held, discovered or announced), Unix seconds.
    pub last_seen: u64,
    /// The version its inventory gave.
    pub version: String,
    /// The facts `approval_facts` names, as its inventory gave them.
    pub facts: Vec<(String, String)>,
}

impl ApprovalRecord {
    /// A node held for the first time, with no decision.
    pub(crate) fn held(identity: Identity, now_ns: u64) -> ApprovalRecord {
        let now = now_ns / 1_000_000_000;
        ApprovalRecord {
            identity,
            clock: 0,
            decision: Decision::Pending,
            at: 0,
            by: String::new(),
            operator: None,
            instance: String::new(),
            reason: String::new(),
            held_at: now_ns.max(1),
            first_seen: now,
            last_seen: now,
            version: String::new(),
            facts: Vec::new(),
        }
    }

    /// Where the identity stands: approved or denied as decided; otherwise
    /// (no decision, or one forgotten) pending once held since, forgotten if not.
    pub(crate) fn standing(&self) -> Decision {
        match self.decision {
            Decision::Approved | Decision::Denied => self.decision,
            _ if self.held_at > 0 => Decision::Pending,
            _ => Decision::Forgotten,
        }
    }
}

/// The wire form of [`ApprovalRecord`] before validation.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecordWire {
    identity: String,
    #[serde(default)]
    clock: u64,
    decision: Decision,
    #[serde(default)]
    at: u64,
    #[serde(default)]
    by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    operator: Option<DecidedBy>,
    #[serde(default)]
    instance: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    held_at: u64,
    #[serde(default)]
    first_seen: u64,
    #[serde(default)]
    last_seen: u64,
    #[serde(default)]
    version: String,
    #[serde(default)]
    facts: Vec<(String, String)>,
}

impl From<&ApprovalRecord> for RecordWire {
    fn from(r: &ApprovalRecord) -> RecordWire {
        RecordWire {
            identity: r.identity.to_string(),
            clock: r.clock,
            decision: r.decision,
            at: r.at,
            by: r.by.clone(),
            operator: r.operator.clone(),
            instance: r.instance.clone(),
            reason: r.reason.clone(),
            held_at: r.held_at,
            first_seen: r.first_seen,
            last_seen: r.last_seen,
            version: r.version.clone(),
            facts: r.facts.clone(),
        }
    }
}

/// A string of a record is at most `most` characters and holds no control
/// character.
fn bounded(text: &str, most: usize) -> bool {
    text.chars().count() <= most && !text.chars().any(char::is_control)
}

impl RecordWire {
    /// The record, checked: its strings bounded, its clock at most [`MAX_CLOCK`]
    /// and 0 exactly when it holds no decision, and a record without a decision
    /// held (there is nothing else it could say).
    pub(crate) fn check(self) -> Result<ApprovalRecord, PeerMessageError> {
        let identity = Identity::parse(&self.identity).map_err(PeerMessageError::Identity)?;
        let facts_ok = self.facts.len() <= MAX_FACTS
            && self.facts.iter().all(|(k, v)| {
                !k.is_empty() && bounded(k, MAX_FACT_NAME) && bounded(v, MAX_FACT_VALUE)
            });
        let user_ok = self
            .operator
            .as_ref()
            .and_then(|o| o.user.as_deref())
            .is_none_or(|u| bounded(u, MAX_BY));
        if !bounded(&self.by, MAX_BY)
            || !user_ok
            || !bounded(&self.instance, MAX_BY)
            || !bounded(&self.reason, MAX_REASON)
            || !bounded(&self.version, MAX_VERSION)
            || !facts_ok
        {
            return Err(PeerMessageError::Field);
        }
        let undecided = self.decision == Decision::Pending;
        if self.clock > MAX_CLOCK
            || undecided != (self.clock == 0)
            || (undecided && self.held_at == 0)
        {
            return Err(PeerMessageError::Clock);
        }
        Ok(ApprovalRecord {
            identity,
            clock: self.clock,
            decision: self.decision,
            at: self.at,
            by: self.by,
            operator: self.operator,
            instance: self.instance,
            reason: self.reason,
            held_at: self.held_at,
            first_seen: self.first_seen,
            last_seen: self.last_seen,
            version: self.version,
            facts: self.facts,
        })
    }
}

/// What an approvals message is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum BatchKind {
    /// Records that changed.
    Update,
    /// An instance that (re)started asks for everybody's table.
    Hello,
    /// What the sender's table holds, as a digest ([`TableDigest`]): a peer whose
    /// own differs twice in a row sends its whole table. No records.
    Digest,
}

/// A table's digest: the wrapping sum of a hash of each record's decision and first
/// hold, and the number of records. Two tables with the same records have the
/// same digest, however they were built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TableDigest {
    /// The sum.
    pub sum: u128,
    /// The records counted.
    pub count: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DigestWire {
    /// 32 hexadecimal digits.
    sum: String,
    count: u64,
}

/// One approvals message, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApprovalBatch {
    /// The sending instance's identity (as its client configuration names it).
    pub from: String,
    /// Its site.
    pub site: String,
    /// Update, hello or digest.
    pub kind: BatchKind,
    /// At most [`MAX_RECORDS`].
    pub records: Vec<ApprovalRecord>,
    /// The sender's table's digest (a [`BatchKind::Digest`] has one).
    pub digest: Option<TableDigest>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchWire {
    from: String,
    site: String,
    kind: BatchKind,
    records: Vec<RecordWire>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    digest: Option<DigestWire>,
}

impl ApprovalBatch {
    /// The JSON body.
    pub(crate) fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(&BatchWire {
            from: self.from.clone(),
            site: self.site.clone(),
            kind: self.kind,
            records: self.records.iter().map(RecordWire::from).collect(),
            digest: self.digest.map(|d| DigestWire {
                sum: format!("{:032x}", d.sum),
                count: d.count,
            }),
        })
        .unwrap_or_default()
    }

    /// Reads and checks a batch for `site`. One bad record refuses the batch: a
    /// peer that writes it is broken, and its other records are not trusted either.
    pub(crate) fn parse(body: &[u8], site: &str) -> Result<ApprovalBatch, PeerMessageError> {
        let wire: BatchWire = decode(body, MAX_APPROVAL_MESSAGE)?;
        if wire.site != site {
            return Err(PeerMessageError::ForeignSite);
        }
        if wire.records.len() > MAX_RECORDS || !bounded(&wire.from, MAX_BY) {
            return Err(PeerMessageError::Field);
        }
        let digest = match wire.digest {
            None if wire.kind == BatchKind::Digest => return Err(PeerMessageError::Field),
            None => None,
            Some(d) => {
                let sum = (d.sum.len() == 32 && d.sum.bytes().all(|b| b.is_ascii_hexdigit()))
                    .then(|| u128::from_str_radix(&d.sum, 16).ok())
                    .flatten()
                    .ok_or(PeerMessageError::Field)?;
                Some(TableDigest {
                    sum,
                    count: d.count,
                })
            }
        };
        let records = wire
            .records
            .into_iter()
            .map(RecordWire::check)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ApprovalBatch {
            from: wire.from,
            site: wire.site,
            kind: wire.kind,
            records,
            digest,
        })
    }
}

/// `provisioning.provisioner.approvals.<site>` (`_` for an empty site); `site` must
/// be one subject token.
pub(crate) fn approvals_subject(site: &str) -> Result<Subject, SubjectError> {
    if site.contains('.') {
        return Err(SubjectError::NotOneToken);
    }
    let token = if site.is_empty() { "_" } else { site };
    Subject::new(format!("{PEER_PREFIX}.approvals.{token}"))
}

/// Where `instance` publishes: [`approvals_subject`]`.<md5hex(instance)>`, so that
/// an instance can leave its own messages unread without reading them.
pub(crate) fn approvals_subject_of(site: &str, instance: &str) -> Result<Subject, SubjectError> {
    use md5::{Digest, Md5};
    approvals_subject(site)?.child(&hex::encode(Md5::digest(instance.as_bytes())))
}

/// Publishes `batch` on its sender's subject.
pub(crate) fn publish_approvals(
    bus: &Bus,
    seal: &super::Seal,
    batch: &ApprovalBatch,
) -> std::io::Result<()> {
    publish_on(
        bus,
        seal,
        approvals_subject_of(&batch.site, &batch.from),
        &batch.to_json(),
    )
}

/// Calls `deliver` (on the reader thread: it must return at once) with the subject
/// and bytes of every approvals message of `site` but those `instance` sent itself
/// (told by their subject alone), unread; [`super::Seal::open`] and
/// [`ApprovalBatch::parse`] read them off the reader thread.
pub(crate) fn subscribe_approvals(
    bus: &Bus,
    site: &str,
    instance: &str,
    deliver: impl Fn(String, Vec<u8>) + Send + Sync + 'static,
) -> std::io::Result<Subscription> {
    let own = approvals_subject_of(site, instance).map_err(super::invalid)?;
    let filter = approvals_subject(site)
        .and_then(|s| SubjectFilter::new(format!("{}.*", s.as_str())))
        .map_err(super::invalid)?;
    bus.subscribe(&filter, None, move |msg| {
        if msg.subject != own.as_str() {
            deliver(msg.subject, msg.data);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, decision: Decision, at: u64) -> ApprovalRecord {
        ApprovalRecord {
            identity: Identity::parse(id).unwrap(),
            decision,
            clock: 1,
            instance: "p1.example.net".into(),
            held_at: 0,
            at,
            by: "alice (uid 1000, pid 7)".into(),
            operator: Some(DecidedBy {
                uid: 1000,
                user: Some("alice".into()),
                pid: 7,
            }),
            reason: String::new(),
            first_seen: 10,
            last_seen: 20,
            version: "0.29.4".into(),
            facts: vec![("os.name".into(), "AlmaLinux".into())],
        }
    }

    #[test]
    fn a_batch_round_trips_and_bad_ones_are_refused_with_a_reason() {
        let batch = ApprovalBatch {
            from: "p1.example.net".into(),
            site: "lon".into(),
            kind: BatchKind::Update,
            records: vec![
                record("n1.example.net", Decision::Approved, 5),
                record("n2.example.net", Decision::Denied, 6),
            ],
            digest: None,
        };
        let body = batch.to_json();
        assert_eq!(ApprovalBatch::parse(&body, "lon").unwrap(), batch);
        let reason = |body: &[u8]| ApprovalBatch::parse(body, "lon").unwrap_err().reason();
        assert_eq!(
            ApprovalBatch::parse(&body, "par").unwrap_err().reason(),
            "foreign_site"
        );
        assert_eq!(reason(b"{"), "undecodable");
        assert_eq!(reason(&vec![b' '; MAX_APPROVAL_MESSAGE + 1]), "too_large");
        let text = String::from_utf8(body).unwrap();
        assert_eq!(
            reason(text.replace("n1.example.net", "n1 bad").as_bytes()),
            "identity"
        );
        assert_eq!(
            reason(text.replace("AlmaLinux", "Alma\\nLinux").as_bytes()),
            "field"
        );
        // Decision clocks: past the limit, or not matching the decision.
        let clocked = |from: &str, to: &str| reason(text.replacen(from, to, 1).as_bytes());
        assert_eq!(
            clocked("\"clock\":1", "\"clock\":4611686018427387905"),
            "clock"
        );
        assert_eq!(clocked("\"clock\":1", "\"clock\":0"), "clock");
        assert_eq!(clocked("\"approved\"", "\"pending\""), "clock");
        let mut many = batch.clone();
        many.records = vec![record("n.example.net", Decision::Pending, 1); MAX_RECORDS + 1];
        assert_eq!(reason(&many.to_json()), "field");
        assert_eq!(
            reason(text.replace("\"kind\"", "\"extra\":1,\"kind\"").as_bytes()),
            "undecodable"
        );
    }

    #[test]
    fn a_digest_round_trips_and_a_bad_one_is_refused() {
        let digest = ApprovalBatch {
            from: "p1.example.net".into(),
            site: "lon".into(),
            kind: BatchKind::Digest,
            records: Vec::new(),
            digest: Some(TableDigest {
                sum: u128::MAX - 7,
                count: 40_000,
            }),
        };
        let body = digest.to_json();
        assert_eq!(ApprovalBatch::parse(&body, "lon").unwrap(), digest);
        let text = String::from_utf8(body).unwrap();
        let reason = |t: String| {
            ApprovalBatch::parse(t.as_bytes(), "lon")
                .unwrap_err()
                .reason()
        };
        assert_eq!(reason(text.replace("fffffff8", "fffffffg")), "field");
        assert_eq!(reason(text.replace("fffffff8", "ffffff8")), "field");
        let without = ApprovalBatch {
            digest: None,
            ..digest
        };
        assert_eq!(
            reason(String::from_utf8(without.to_json()).unwrap()),
            "field"
        );
    }

    #[test]
    fn the_subject_is_one_per_site_and_the_stricter_decision_ranks_higher() {
        let own = approvals_subject_of("lon", "p1.example.net").unwrap();
        assert!(own
            .as_str()
            .starts_with("provisioning.provisioner.approvals.lon."));
        assert_eq!(
            own.as_str().len(),
            "provisioning.provisioner.approvals.lon.".len() + 32
        );
        assert_eq!(
            approvals_subject("lon").unwrap().as_str(),
            "provisioning.provisioner.approvals.lon"
        );
        assert_eq!(
            approvals_subject("").unwrap().as_str(),
            "provisioning.provisioner.approvals._"
        );
        assert!(approvals_subject("a.b").is_err());
        assert!(Decision::Denied > Decision::Forgotten);
        assert!(Decision::Forgotten > Decision::Approved);
        assert!(Decision::Approved > Decision::Pending);
    }
}
