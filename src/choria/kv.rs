//! One key of a JetStream key/value bucket, through the two subjects a Choria broker
//! imports into the provisioning account (go-choria's Streams leader election): the bucket's stream
//! info (`<prefix>STREAM.INFO.KV_<bucket>`) and writes to the key
//! (`<prefix>$KV.<bucket>.<key>`) with an expected last revision. The `nats` crate's
//! KV store cannot be used: it writes to unprefixed `$KV...` subjects and has no
//! write timeout.
//!
//! Replies are parsed by [`parse_pub_ack`] and [`parse_bucket_ttl`], pure functions
//! of the bytes (fuzzed), into typed [`KvError`]s.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use super::bus::Bus;
use super::subject::{Headers, Subject, SubjectError};

/// JetStream's error code for a write whose expected revision is not the key's.
const WRONG_LAST_SEQUENCE: u64 = 10071;

/// Why a bucket or key operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KvError {
    /// The key's revision is not the one expected; the current one when the server
    /// said it. Someone else wrote the key.
    WrongRevision(Option<u64>),
    /// No answer, no responders, a broken connection, or an error from JetStream.
    Unavailable(String),
    /// The bucket exists but cannot be used as configured (TTL, history).
    BadBucket(String),
    /// The answer was not what JetStream sends.
    Invalid(String),
}

impl fmt::Display for KvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KvError::WrongRevision(Some(n)) => write!(f, "wrong last sequence: {n}"),
            KvError::WrongRevision(None) => f.write_str("wrong last sequence"),
            KvError::Unavailable(why) | KvError::BadBucket(why) | KvError::Invalid(why) => {
                f.write_str(why)
            }
        }
    }
}

impl std::error::Error for KvError {}

#[derive(Deserialize)]
struct ApiError {
    #[serde(default)]
    err_code: u64,
    #[serde(default)]
    description: String,
}

#[derive(Deserialize)]
struct PubAck {
    error: Option<ApiError>,
    #[serde(default)]
    seq: u64,
}

/// The revision a PubAck reports, or why the write failed.
pub(crate) fn parse_pub_ack(bytes: &[u8]) -> Result<u64, KvError> {
    let ack: PubAck = serde_json::from_slice(bytes)
        .map_err(|e| KvError::Invalid(format!("invalid PubAck: {e}")))?;
    if let Some(err) = ack.error {
        if err.err_code == WRONG_LAST_SEQUENCE {
            let current = err
                .description
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse().ok());
            return Err(KvError::WrongRevision(current));
        }
        return Err(KvError::Unavailable(
            err.description.chars().take(200).collect(),
        ));
    }
    if ack.seq == 0 {
        return Err(KvError::Invalid("PubAck without a sequence".into()));
    }
    Ok(ack.seq)
}

#[derive(Deserialize)]
struct StreamConfig {
    #[serde(default)]
    max_age: u64,
    #[serde(default)]
    max_msgs_per_subject: i64,
}

#[derive(Deserialize)]
struct StreamInfo {
    error: Option<ApiError>,
    config: Option<StreamConfig>,
}

/// The TTL (`max_age`) of `bucket` from its stream info, checked as nats.go does.
pub(crate) fn parse_bucket_ttl(bytes: &[u8], bucket: &str) -> Result<Duration, KvError> {
    let info: StreamInfo = serde_json::from_slice(bytes).map_err(|e| {
        KvError::Invalid(format!(
            "cannot access KV Bucket {bucket}: invalid stream info: {e}"
        ))
    })?;
    if let Some(err) = info.error {
        let description: String = err.description.chars().take(200).collect();
        return Err(KvError::Unavailable(format!(
            "cannot access KV Bucket {bucket}: {}",
            if description.is_empty() {
                "error"
            } else {
                &description
            }
        )));
    }
    let config = info
        .config
        .ok_or_else(|| KvError::Invalid(format!("cannot access KV Bucket {bucket}: no config")))?;
    if config.max_msgs_per_subject < 1 {
        return Err(KvError::BadBucket(format!(
            "bad bucket {bucket}: max_msgs_per_subject must be 1"
        )));
    }
    let ttl = Duration::from_nanos(config.max_age);
    if ttl < Duration::from_secs(1) {
        return Err(KvError::BadBucket(
            "bucket TTL should be 1 second or more".into(),
        ));
    }
    if ttl > Duration::from_secs(3600) {
        return Err(KvError::BadBucket(
            "bucket TTL should be less than or equal to 1 hour".into(),
        ));
    }
    let interval = ttl.mul_f64(0.75);
    if interval < Duration::from_secs(1) {
        return Err(KvError::BadBucket(format!(
            "campaign interval {interval:?} too small"
        )));
    }
    if ttl - interval < Duration::from_secs(1) {
        return Err(KvError::BadBucket(format!(
            "campaign interval {interval:?} is too close to bucket ttl {ttl:?}"
        )));
    }
    Ok(ttl)
}

/// One key of one bucket.
#[derive(Debug, Clone)]
pub(crate) struct KvKey {
    bus: Bus,
    bucket: String,
    info: Subject,
    key: Subject,
    timeout: Duration,
}

impl KvKey {
    /// The key `key` of `bucket` under the JetStream API prefix `api_prefix` (with
    /// its trailing dot, e.g. `choria.streams.`), each request waiting at most
    /// `timeout`.
    pub(crate) fn new(
        bus: Bus,
        api_prefix: &str,
        bucket: &str,
        key: &str,
        timeout: Duration,
    ) -> Result<KvKey, SubjectError> {
        Ok(KvKey {
            info: Subject::new(format!("{api_prefix}STREAM.INFO.KV_{bucket}"))?,
            key: Subject::new(format!("{api_prefix}$KV.{bucket}.{key}"))?,
            bucket: bucket.to_string(),
            bus,
            timeout,
        })
    }

    /// The bucket's TTL, checked.
    pub(crate) fn ttl(&self) -> Result<Duration, KvError> {
        let reply = self
            .bus
            .request(&self.info, None, b"", self.timeout)
            .map_err(|e| {
                KvError::Unavailable(format!("cannot access KV Bucket {}: {e}", self.bucket))
            })?;
        parse_bucket_ttl(&reply.data, &self.bucket)
    }

    /// Writes `value` if the key's last revision is `expected` (0: the key must not
    /// exist); returns the new revision.
    pub(crate) fn write(&self, expected: u64, value: &[u8]) -> Result<u64, KvError> {
        let mut headers = Headers::new();
        headers
            .insert("Nats-Expected-Last-Subject-Sequence", &expected.to_string())
            .map_err(|e| KvError::Invalid(e.to_string()))?;
        let reply = self
            .bus
            .request(&self.key, Some(&headers), value, self.timeout)
            .map_err(|e| KvError::Unavailable(e.to_string()))?;
        if reply.no_responders {
            return Err(KvError::Unavailable("no responders".into()));
        }
        parse_pub_ack(&reply.data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pub_acks_are_revisions_or_typed_errors() {
        assert_eq!(
            parse_pub_ack(br#"{"stream":"KV_CHORIA_LEADER_ELECTION","seq":7}"#),
            Ok(7)
        );
        assert_eq!(
            parse_pub_ack(
                br#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 1"},"stream":"KV_CHORIA_LEADER_ELECTION","seq":0}"#
            ),
            Err(KvError::WrongRevision(Some(1)))
        );
        assert!(matches!(
            parse_pub_ack(br#"{"error":{"code":503,"description":"no stream"}}"#),
            Err(KvError::Unavailable(d)) if d == "no stream"
        ));
        assert!(matches!(parse_pub_ack(b"{}"), Err(KvError::Invalid(_))));
        assert!(matches!(parse_pub_ack(b"\xff"), Err(KvError::Invalid(_))));
    }

    #[test]
    fn bucket_ttls_are_checked_as_nats_go_does() {
        let info = |age: u64, per: i64| {
            format!(r#"{{"config":{{"max_age":{age},"max_msgs_per_subject":{per}}}}}"#)
        };
        assert_eq!(
            parse_bucket_ttl(info(60_000_000_000, 1).as_bytes(), "B"),
            Ok(Duration::from_secs(60))
        );
        for (age, per, text) in [
            (60_000_000_000, 0, "max_msgs_per_subject must be 1"),
            (500_000_000, 1, "1 second or more"),
            (7_200_000_000_000, 1, "less than or equal to 1 hour"),
            (2_000_000_000, 1, "too close to bucket ttl"),
        ] {
            let e = parse_bucket_ttl(info(age, per).as_bytes(), "B").unwrap_err();
            assert!(e.to_string().contains(text), "{e}");
        }
        let e = parse_bucket_ttl(
            br#"{"error":{"code":404,"err_code":10059,"description":"stream not found"}}"#,
            "B",
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "cannot access KV Bucket B: stream not found");
    }
}
