//! Secrets out of captured text: what a helper wrote to stderr is logged, and a
//! helper may well echo its input — where the token and the broker password are JSON
//! strings — or die half-way through writing them.
//!
//! Each secret is looked for as is and in every form a JSON encoder gives it inside a
//! string (serde_json's, Go's with its HTML escapes, Python's all-ASCII, PHP's escaped
//! slash); and since the capture is cut at a cap, a *prefix* of any of those forms at
//! the very end of the text is redacted too. Secrets shorter than 3 bytes are left
//! alone (redacting every `a` would destroy the text and hide nothing).

use std::collections::BTreeSet;

/// What a secret is replaced with.
pub(crate) const MASK: &str = "***";

/// Shortest secret (and shortest cut-off prefix) that is redacted.
const MIN_LEN: usize = 3;

/// How one JSON encoder escapes a string's contents.
#[derive(Clone, Copy)]
struct Style {
    /// `<`, `>`, `&`, U+2028 and U+2029 as `\u003c`... (Go).
    html: bool,
    /// Everything outside ASCII as `\uXXXX` (Python's default, `jq -a`).
    ascii: bool,
    /// `/` as `\/` (PHP).
    slash: bool,
    /// Backspace and form feed as `\b` and `\f` rather than `\u0008` and `\u000c`.
    short_controls: bool,
}

fn escape(secret: &str, style: Style) -> String {
    let mut out = String::with_capacity(secret.len() + 8);
    let unicode = |out: &mut String, c: char| {
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            out.push_str(&format!("\\u{unit:04x}"));
        }
    };
    for c in secret.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' if style.short_controls => out.push_str("\\b"),
            '\u{c}' if style.short_controls => out.push_str("\\f"),
            '/' if style.slash => out.push_str("\\/"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if style.html => unicode(&mut out, c),
            c if (c as u32) < 0x20 => unicode(&mut out, c),
            c if !c.is_ascii() && style.ascii => unicode(&mut out, c),
            c => out.push(c),
        }
    }
    out
}

/// `secret` as is and as the contents of a JSON string in each encoder's style,
/// without duplicates.
pub(crate) fn forms(secret: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::from([secret.to_string()]);
    for bits in 0u8..16 {
        out.insert(escape(
            secret,
            Style {
                html: bits & 1 != 0,
                ascii: bits & 2 != 0,
                slash: bits & 4 != 0,
                short_controls: bits & 8 != 0,
            },
        ));
    }
    out
}

/// The length of the longest proper prefix of `pattern` that `text` ends with
/// (Knuth–Morris–Pratt over the pattern, then a scan of the text: linear, whatever
/// the secret looks like).
fn trailing_prefix(text: &[u8], pattern: &[u8]) -> usize {
    if pattern.is_empty() {
        return 0;
    }
    let mut fail = vec![0usize; pattern.len()];
    let mut k = 0;
    for i in 1..pattern.len() {
        while k > 0 && pattern[i] != pattern[k] {
            k = fail[k - 1];
        }
        if pattern[i] == pattern[k] {
            k += 1;
        }
        fail[i] = k;
    }
    // Only the last `pattern.len() - 1` bytes of the text can hold a proper prefix.
    let start = text.len().saturating_sub(pattern.len() - 1);
    let mut matched = 0;
    for &b in &text[start..] {
        while matched > 0 && b != pattern[matched] {
            matched = fail[matched - 1];
        }
        if b == pattern[matched] {
            matched += 1;
        }
        if matched == pattern.len() {
            matched = fail[matched - 1];
        }
    }
    matched
}

/// `bytes` as text (invalid UTF-8 replaced) with every form of every secret
/// replaced by [`MASK`], including a form cut off at the end of the text.
pub(crate) fn redact(bytes: &[u8], secrets: &[&str]) -> String {
    let mut text = String::from_utf8_lossy(bytes).into_owned();
    // A character cut at the end (the capture stopped inside it) reads as U+FFFD:
    // drop it, so that a secret cut there still ends in a recognisable prefix.
    if text.ends_with('\u{FFFD}') && !bytes.ends_with("\u{FFFD}".as_bytes()) {
        text.pop();
    }
    let mut all: Vec<String> = secrets
        .iter()
        .filter(|s| s.len() >= MIN_LEN)
        .flat_map(|s| forms(s))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    // Longest first, so that a form containing another is masked whole.
    all.sort_by_key(|f| std::cmp::Reverse(f.len()));
    for form in &all {
        if text.contains(form.as_str()) {
            text = text.replace(form.as_str(), MASK);
        }
    }
    let cut = all
        .iter()
        .map(|f| trailing_prefix(text.as_bytes(), f.as_bytes()))
        .max()
        .unwrap_or(0);
    if cut >= MIN_LEN {
        // The prefix starts a form, so it starts on a character boundary.
        text.truncate(text.len() - cut);
        text.push_str(MASK);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted() {
        assert_eq!(
            redact(b"token=s3cret pw=hunter2", &["s3cret", "hunter2", ""]),
            "token=*** pw=***"
        );
        assert_eq!(redact(b"ab ab", &["ab"]), "ab ab", "too short to redact");
    }

    #[test]
    fn json_escaped_forms_are_redacted() {
        let token = "t\"o/k<e>n\\é";
        // serde_json (the helper input itself), Go, Python, PHP.
        let serde = serde_json::to_string(token).unwrap();
        let serde = &serde[1..serde.len() - 1];
        assert_eq!(serde, r#"t\"o/k<e>n\\é"#);
        for shown in [
            serde,
            r#"t\"o/k\u003ce\u003en\\é"#,
            r#"t\"o/k<e>n\\\u00e9"#,
            r#"t\"o\/k<e>n\\\u00e9"#,
            r#"t\"o\/k\u003ce\u003en\\\u00e9"#,
        ] {
            let line = format!("helper echoed {{\"token\":\"{shown}\"}} and died");
            assert_eq!(
                redact(line.as_bytes(), &[token]),
                "helper echoed {\"token\":\"***\"} and died",
                "{shown}"
            );
        }
    }

    #[test]
    fn control_characters_and_astral_characters() {
        let token = "a\u{8}b\u{1}c😀";
        for shown in [r"a\bb\u0001c😀", r"a\u0008b\u0001c\ud83d\ude00"] {
            assert_eq!(redact(shown.as_bytes(), &[token]), "***", "{shown}");
        }
    }

    #[test]
    fn a_secret_cut_at_the_end_of_the_capture_is_redacted() {
        let token = "0123456789abcdef";
        assert_eq!(
            redact(b"error: token 0123456", &[token]),
            "error: token ***"
        );
        // Its escaped form cut inside an escape sequence.
        let token = "abc<def";
        assert_eq!(redact(br"echo abc\u00", &[token]), "echo ***");
        // Cut inside a multi-byte character: the stray byte goes with the prefix.
        let token = "pässwörd";
        let bytes = &token.as_bytes()[..7];
        assert!(std::str::from_utf8(bytes).is_err(), "cut inside ö");
        let mut line = b"pw=".to_vec();
        line.extend_from_slice(bytes);
        assert_eq!(redact(&line, &[token]), "pw=***");
        // Two characters of a secret at the end are not worth destroying the text.
        assert_eq!(redact(b"count: 01", &["0123456789"]), "count: 01");
        // Text that merely ends like the secret's start but is the whole secret
        // elsewhere is redacted in both places.
        assert_eq!(
            redact(b"0123456789 then 01234", &["0123456789"]),
            "*** then ***"
        );
    }

    #[test]
    fn a_repetitive_secret_does_not_make_redaction_quadratic() {
        let token = "a".repeat(60_000);
        let text = "a".repeat(16 * 1024);
        let started = std::time::Instant::now();
        assert_eq!(redact(text.as_bytes(), &[&token]), "***");
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn trailing_prefix_is_the_longest_proper_prefix() {
        assert_eq!(trailing_prefix(b"xxabab", b"ababc"), 4);
        assert_eq!(
            trailing_prefix(b"xxababc", b"ababc"),
            0,
            "whole: not a proper prefix"
        );
        assert_eq!(trailing_prefix(b"", b"abc"), 0);
        assert_eq!(trailing_prefix(b"aaaa", b"aaaaaa"), 4);
    }
}
