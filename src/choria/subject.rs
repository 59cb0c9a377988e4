//! NATS subjects, subscription filters, queue groups and headers, validated when made.
//!
//! The NATS text protocol puts a subject in a control line (`PUB <subject> <reply>
//! <size>`): a space or a CRLF inside one starts another argument or another command
//! on our connection, and a wildcard or an oversized line makes the server close it.
//! These types are the choke point: [`super::bus::Bus`] takes nothing else, so no code
//! path can publish or subscribe on a string that was not checked here, whoever
//! built it.
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

use std::fmt;

/// Longest subject or filter we send (nats-server's control line limit is 4 KiB).
pub(crate) const MAX_SUBJECT_LEN: usize = 512;

/// Longest header value we send.
pub(crate) const MAX_HEADER_VALUE_LEN: usize = 1024;

/// Why a string cannot be used on the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubjectError {
    /// Empty.
    #[error("empty subject")]
    Empty,
    /// Longer than `MAX_SUBJECT_LEN` (the length).
    #[error("subject of {0} bytes exceeds {max}", max = MAX_SUBJECT_LEN)]
    TooLong(usize),
    /// A space, control character or non-ASCII byte at this offset.
    #[error("subject has a space, control or non-ASCII byte at offset {0}")]
    Byte(usize),
    /// An empty token (leading, trailing or doubled `.`).
    #[error("subject has an empty token")]
    EmptyToken,
    /// `*` or `>` where only a literal is allowed, or not as a whole token, or `>`
    /// before the last token.
    #[error("subject has a misplaced wildcard")]
    Wildcard,
    /// A header name or value that would break the header block.
    #[error("invalid header: {0}")]
    Header(&'static str),
    /// Several tokens where one is expected (a name with a `.`).
    #[error("a subject token contains a '.'")]
    NotOneToken,
}

/// Checks the form every subject, filter and queue group shares and returns its
/// tokens.
fn tokens(text: &str) -> Result<std::str::Split<'_, char>, SubjectError> {
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        return Err(SubjectError::Empty);
    }
    if bytes.len() > MAX_SUBJECT_LEN {
        return Err(SubjectError::TooLong(bytes.len()));
    }
    if let Some(at) = bytes.iter().position(|b| !(0x21..=0x7e).contains(b)) {
        return Err(SubjectError::Byte(at));
    }
    if text.split('.').any(str::is_empty) {
        return Err(SubjectError::EmptyToken);
    }
    Ok(text.split('.'))
}

/// A literal subject one can publish to: no wildcards.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Subject(String);

impl Subject {
    /// Checks `text`.
    pub fn new(text: impl Into<String>) -> Result<Subject, SubjectError> {
        let text = text.into();
        // One pass over the bytes (every request makes two subjects); the errors and
        // their precedence are `tokens`' followed by the wildcard check.
        let bytes = text.as_bytes();
        if bytes.is_empty() {
            return Err(SubjectError::Empty);
        }
        if bytes.len() > MAX_SUBJECT_LEN {
            return Err(SubjectError::TooLong(bytes.len()));
        }
        let (mut empty_token, mut wildcard, mut previous) = (false, false, b'.');
        for (at, &b) in bytes.iter().enumerate() {
            if !(0x21..=0x7e).contains(&b) {
                return Err(SubjectError::Byte(at));
            }
            empty_token |= b == b'.' && previous == b'.';
            wildcard |= b == b'*' || b == b'>';
            previous = b;
        }
        if empty_token || previous == b'.' {
            return Err(SubjectError::EmptyToken);
        }
        if wildcard {
            return Err(SubjectError::Wildcard);
        }
        Ok(Subject(text))
    }

    /// `self` followed by `.token`, checked as a whole.
    pub(crate) fn child(&self, token: &str) -> Result<Subject, SubjectError> {
        // `self` is checked already: only the new token is, with the errors and
        // offsets a check of the whole would give.
        let len = self.0.len() + 1 + token.len();
        if len > MAX_SUBJECT_LEN {
            return Err(SubjectError::TooLong(len));
        }
        let bytes = token.as_bytes();
        if let Some(at) = bytes.iter().position(|b| !(0x21..=0x7e).contains(b)) {
            return Err(SubjectError::Byte(self.0.len() + 1 + at));
        }
        if bytes.is_empty() || (bytes.contains(&b'.') && token.split('.').any(str::is_empty)) {
            return Err(SubjectError::EmptyToken);
        }
        if bytes.iter().any(|&b| b == b'*' || b == b'>') {
            return Err(SubjectError::Wildcard);
        }
        let mut text = String::with_capacity(len);
        text.push_str(&self.0);
        text.push('.');
        text.push_str(token);
        Ok(Subject(text))
    }

    /// The subject as text.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// A subscription filter: a subject whose tokens may be `*`, and whose last token may
/// be `>`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SubjectFilter(String);

impl SubjectFilter {
    /// Checks `text`.
    pub fn new(text: impl Into<String>) -> Result<SubjectFilter, SubjectError> {
        let text = text.into();
        let mut tokens = tokens(&text)?.peekable();
        while let Some(token) = tokens.next() {
            let last = tokens.peek().is_none();
            let wild = token.contains(['*', '>']);
            if wild && !(token == "*" || (token == ">" && last)) {
                return Err(SubjectError::Wildcard);
            }
        }
        Ok(SubjectFilter(text))
    }

    /// The filter as text.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<Subject> for SubjectFilter {
    fn from(s: Subject) -> SubjectFilter {
        SubjectFilter(s.0)
    }
}

/// A queue group name: a literal subject-like name.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct QueueGroup(String);

impl QueueGroup {
    /// Checks `text`.
    pub(crate) fn new(text: impl Into<String>) -> Result<QueueGroup, SubjectError> {
        Subject::new(text).map(|s| QueueGroup(s.0))
    }

    /// The name as text.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

macro_rules! text_impls {
    ($t:ty) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }
    };
}
text_impls!(Subject);
text_impls!(SubjectFilter);
text_impls!(QueueGroup);

/// Message headers with names and values that cannot break the header block.
#[derive(Debug, Clone, Default)]
pub(crate) struct Headers(pub(super) nats::header::HeaderMap);

impl Headers {
    /// No headers.
    pub(crate) fn new() -> Headers {
        Headers::default()
    }

    /// Adds `name: value` after checking both.
    pub(crate) fn insert(&mut self, name: &str, value: &str) -> Result<(), SubjectError> {
        if name.is_empty()
            || name
                .bytes()
                .any(|b| !(0x21..=0x7e).contains(&b) || b == b':')
        {
            return Err(SubjectError::Header("name"));
        }
        if value.len() > MAX_HEADER_VALUE_LEN
            || value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0)
        {
            return Err(SubjectError::Header("value"));
        }
        self.0.insert(name, value.to_string());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_cannot_carry_another_command() {
        let injected = "provisioning.node.evil 0\r\n\r\nPUB provisioning.injected 5\r\nhello";
        assert_eq!(Subject::new(injected).unwrap_err(), SubjectError::Byte(22));
        assert_eq!(
            SubjectFilter::new(injected).unwrap_err(),
            SubjectError::Byte(22)
        );
        assert!(Subject::new("a b").is_err());
        assert!(Subject::new("a\tb").is_err());
        assert!(Subject::new("a.é").is_err());
    }

    #[test]
    fn literal_subjects_have_no_wildcards_or_empty_tokens() {
        assert!(Subject::new("provisioning.node.n1").is_ok());
        for bad in ["a.*", "a.>", "a*", ".a", "a.", "a..b", ""] {
            assert!(Subject::new(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Subject::new("x".repeat(513)).unwrap_err(),
            SubjectError::TooLong(513)
        );
        let parent = Subject::new("provisioning.reply.abc").unwrap();
        assert_eq!(
            parent.child("id1").unwrap().as_str(),
            "provisioning.reply.abc.id1"
        );
        assert!(parent.child("a b").is_err());
        assert!(parent.child("").is_err());
    }

    #[test]
    fn the_one_pass_check_gives_the_errors_of_the_token_check() {
        // Every string of up to four of these bytes: the same verdict, the same error.
        let alphabet = ["a", ".", "*", ">", " ", "\u{e9}"];
        let mut texts = vec![String::new()];
        for _ in 0..4 {
            let longer: Vec<String> = texts
                .iter()
                .flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}")))
                .collect();
            texts.extend(longer);
        }
        texts.sort();
        texts.dedup();
        for text in &texts {
            let by_tokens = tokens(text).and_then(|mut t| {
                if t.any(|t| t.contains(['*', '>'])) {
                    Err(SubjectError::Wildcard)
                } else {
                    Ok(())
                }
            });
            assert_eq!(
                Subject::new(text.as_str()).map(|_| ()),
                by_tokens,
                "{text:?}"
            );
        }
        assert!(texts.len() > 1000);
        let parent = Subject::new("a.b").unwrap();
        for token in &texts {
            assert_eq!(
                parent.child(token),
                Subject::new(format!("a.b.{token}")),
                "child {token:?}"
            );
        }
        assert_eq!(
            parent.child(&"x".repeat(600)),
            Subject::new(format!("a.b.{}", "x".repeat(600)))
        );
    }

    #[test]
    fn filters_take_whole_token_wildcards_only() {
        for ok in ["a.*", "a.>", "*.b.>", "provisioning.node.>"] {
            assert!(SubjectFilter::new(ok).is_ok(), "{ok}");
        }
        for bad in ["a.>.b", "a*", "a.b>", "a..>", "a >"] {
            assert!(SubjectFilter::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn header_values_cannot_start_new_lines() {
        let mut h = Headers::new();
        assert!(h
            .insert("Nats-Expected-Last-Subject-Sequence", "12")
            .is_ok());
        assert!(h.insert("X", "1\r\nPUB a 1").is_err());
        assert!(h.insert("Bad:Name", "1").is_err());
        assert!(h.insert("Bad Name", "1").is_err());
    }
}
