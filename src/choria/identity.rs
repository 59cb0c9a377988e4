//! A node's identity, validated once at the edge.
//!
//! Every identity the provisioner learns comes from the network (a discovery reply's
//! sender, a startup event, an RPC reply's envelope) and is attacker-controlled until
//! checked. [`Identity::parse`] is the only way to make one, so anything that holds an
//! `Identity` (the fleet, the sequence, the helper's input, a subject) can trust it.
//!
//! The rule is go-choria's own (`validIdentity` in
//! `providers/discovery/flatfile/flatfile.go`: dot-separated labels of ASCII letters,
//! digits and inner hyphens) with one addition, `_`, plus the DNS limit of 253 bytes.
//! A go-choria server never checks its own identity (only flatfile discovery does), so
//! a host named `web_01.example.net` runs, connects and is discovered; refusing it
//! would lose an honest node for a character that is harmless in a subject, a log line
//! and a file name. The rule is still far stricter than what a NATS subject token
//! needs (no `*`, `>`, `/`, whitespace, control characters or empty tokens can get
//! through), so an identity is always safe in a subject, a log line and a file name.

use std::fmt;
use std::sync::Arc;

/// The longest identity accepted, in bytes (a DNS name's limit).
pub(crate) const MAX_IDENTITY_LEN: usize = 253;

/// A validated Choria identity. A clone shares the text rather than copying it: the
/// fleet's map, the queued job, the finisher's due time and a discovery's set each
/// hold the same node (one allocation per node where there were three or four;
/// the peak RSS of `NODES=100000 make bench` fell from 60.6 to 54.9 MB).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity(Arc<str>);

/// Why a string is not an identity. `IdentityError::reason` is the metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// Nothing at all.
    #[error("the identity is empty")]
    Empty,
    /// Longer than `MAX_IDENTITY_LEN` bytes (the length).
    #[error("the identity is {0} bytes long, more than {max}", max = MAX_IDENTITY_LEN)]
    TooLong(usize),
    /// A byte that is not a letter, digit, `_`, `-` or `.` (its offset and value).
    #[error("the identity has the byte 0x{byte:02x} at offset {at}; only letters, digits, '_', '-' and '.' are allowed")]
    Character {
        /// Byte offset.
        at: usize,
        /// The byte.
        byte: u8,
    },
    /// An empty label: a leading, trailing or doubled dot.
    #[error("the identity has an empty label (a leading, trailing or doubled '.')")]
    EmptyLabel,
    /// A label that starts or ends with `-`.
    #[error("a label of the identity starts or ends with '-'")]
    Hyphen,
}

impl IdentityError {
    /// A short, fixed label for metrics: `empty`, `too_long`, `character`,
    /// `empty_label` or `hyphen`.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            IdentityError::Empty => "empty",
            IdentityError::TooLong(_) => "too_long",
            IdentityError::Character { .. } => "character",
            IdentityError::EmptyLabel => "empty_label",
            IdentityError::Hyphen => "hyphen",
        }
    }
}

impl Identity {
    /// Checks `text` against the identity rule.
    pub fn parse(text: &str) -> Result<Identity, IdentityError> {
        let bytes = text.as_bytes();
        if bytes.is_empty() {
            return Err(IdentityError::Empty);
        }
        if bytes.len() > MAX_IDENTITY_LEN {
            return Err(IdentityError::TooLong(bytes.len()));
        }
        if let Some(at) = bytes
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')))
        {
            return Err(IdentityError::Character {
                at,
                byte: bytes[at],
            });
        }
        for label in text.split('.') {
            if label.is_empty() {
                return Err(IdentityError::EmptyLabel);
            }
            if label.starts_with('-') || label.ends_with('-') {
                return Err(IdentityError::Hyphen);
            }
        }
        Ok(Identity(text.into()))
    }

    /// The identity as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Identity {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for Identity {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Identity {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl serde::Serialize for Identity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_shares_the_text() {
        let one = Identity::parse("node-1.example.net").unwrap();
        let two = one.clone();
        assert_eq!(one, two);
        assert!(std::ptr::eq(one.as_str(), two.as_str()), "not copied");
    }

    #[test]
    fn host_names_are_identities() {
        for ok in [
            "n1",
            "node-1.example.net",
            "A.b-c.D9",
            "x",
            "web_01.example.net",
            "_a._b_",
            &"a".repeat(253),
        ] {
            assert_eq!(Identity::parse(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn everything_a_subject_or_log_could_choke_on_is_refused() {
        let cases: [(&str, &str); 12] = [
            ("", "empty"),
            ("evil 0\r\nPUB x 5", "character"),
            ("a*b", "character"),
            ("a.>", "character"),
            ("tab\there", "character"),
            ("nul\0", "character"),
            ("ünï.example", "character"),
            ("a/b.example", "character"),
            ("a..b", "empty_label"),
            (".a", "empty_label"),
            ("a.", "empty_label"),
            ("-a.b", "hyphen"),
        ];
        for (bad, reason) in cases {
            let e = Identity::parse(bad).unwrap_err();
            assert_eq!(e.reason(), reason, "{bad:?}: {e}");
        }
        assert_eq!(
            Identity::parse(&"a".repeat(254)).unwrap_err(),
            IdentityError::TooLong(254)
        );
        assert_eq!(
            Identity::parse("a.b-").unwrap_err().reason(),
            "hyphen",
            "trailing hyphen"
        );
    }
}
