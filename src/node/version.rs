//! RPM-style version comparison (`[epoch:]version[-release]`), exactly as the Go
//! provisioner's `node/version.go` does it, including
//! where it differs from rpm itself: the first `-` splits version and release, `^` is
//! a separator, a non-numeric epoch counts as 0. Only "equal or not" drives
//! upgrades; the order is exact anyway.

use std::cmp::Ordering;

/// A parsed `[epoch:]version[-release]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RpmVersion<'a> {
    /// Epoch (0 when absent or not a number).
    pub epoch: i64,
    /// Version.
    pub version: &'a str,
    /// Release (empty when absent).
    pub release: &'a str,
}

/// Parses with Go's rules.
pub(crate) fn parse(text: &str) -> RpmVersion<'_> {
    let (epoch, rest) = match text.split_once(':') {
        None => (0, text),
        Some((e, rest)) => (e.trim_start().parse::<i64>().unwrap_or(0), rest),
    };
    let (version, release) = rest.split_once('-').unwrap_or((rest, ""));
    RpmVersion {
        epoch,
        version,
        release,
    }
}

/// Compares `a` with `b`: `Less` when `a` is older.
pub(crate) fn compare(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    let (a, b) = (parse(a), parse(b));
    a.epoch
        .cmp(&b.epoch)
        .then_with(|| rpmvercmp(a.version, b.version))
        .then_with(|| rpmvercmp(a.release, b.release))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Segment<'a> {
    Tilde,
    Digits(&'a str),
    Letters(&'a str),
}

fn segments(s: &str) -> Vec<Segment<'_>> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'~' {
            out.push(Segment::Tilde);
            i += 1;
        } else if c.is_ascii_digit() || c.is_ascii_alphabetic() {
            let digit = c.is_ascii_digit();
            let start = i;
            while i < bytes.len()
                && (if digit {
                    bytes[i].is_ascii_digit()
                } else {
                    bytes[i].is_ascii_alphabetic()
                })
            {
                i += 1;
            }
            let run = &s[start..i];
            out.push(if digit {
                Segment::Digits(run)
            } else {
                Segment::Letters(run)
            });
        } else {
            i += 1;
        }
    }
    out
}

/// rpm's segment comparison of one version or release string.
fn rpmvercmp(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    let (sa, sb) = (segments(a), segments(b));
    for (x, y) in sa.iter().zip(sb.iter()) {
        let order = match (x, y) {
            (Segment::Tilde, Segment::Tilde) => Ordering::Equal,
            (Segment::Tilde, _) => Ordering::Less,
            (_, Segment::Tilde) => Ordering::Greater,
            (Segment::Digits(_), Segment::Letters(_)) => Ordering::Greater,
            (Segment::Letters(_), Segment::Digits(_)) => Ordering::Less,
            (Segment::Digits(p), Segment::Digits(q)) => {
                let (p, q) = (p.trim_start_matches('0'), q.trim_start_matches('0'));
                p.len().cmp(&q.len()).then_with(|| p.cmp(q))
            }
            (Segment::Letters(p), Segment::Letters(q)) => p.as_bytes().cmp(q.as_bytes()),
        };
        if order != Ordering::Equal {
            return order;
        }
    }
    match sa.len().cmp(&sb.len()) {
        Ordering::Equal => Ordering::Equal,
        Ordering::Greater if sa[sb.len()] == Segment::Tilde => Ordering::Less,
        Ordering::Less if sb[sa.len()] == Segment::Tilde => Ordering::Greater,
        longer => longer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fifty comparisons as the Go provisioner's `node/version.go` makes them.
    const CASES: [(&str, &str, i8); 50] = [
        ("1.0", "1.0", 0),
        ("1.0", "1.0.1", -1),
        ("1.0.1", "1.0", 1),
        ("1.0", "1.0.0", -1),
        ("1.0.0.0", "1.0.0", 1),
        ("1.10", "1.9", 1),
        ("2.0", "10.0", -1),
        ("1.010", "1.10", 0),
        ("0.30.0", "0.29.4", 1),
        ("0.29.4", "0.30.0", -1),
        ("0.29.4", "0.29.4", 0),
        ("0.99.0.20221129", "0.99.0", 1),
        ("20260101", "1.0", 1),
        ("1:0.1", "2.0", 1),
        ("0:1.0", "1.0", 0),
        ("2:1.0", "1:9.9", 1),
        ("01:1.0", "1:1.0", 0),
        ("1.0~rc1", "1.0", -1),
        ("1.0~rc1", "1.0~rc2", -1),
        ("1.0~rc1", "1.0rc1", -1),
        ("1.0~rc1", "1.0~RC1", 1),
        ("1.0", "1.0~", 1),
        ("1.0~~", "1.0~", -1),
        ("1.0~rc1^git1", "1.0~rc1", 1),
        ("1.0a", "1.0", 1),
        ("1.0a", "1.0.1", -1),
        ("1.0alpha", "1.0beta", -1),
        ("1.0a", "1.0A", 1),
        ("1.0RC1", "1.0rc1", -1),
        ("abc", "abd", -1),
        ("1.0_1", "1.0.1", 0),
        ("1.0", "1_0", 0),
        ("1.0", "1.0.", 0),
        ("0.29.0-1.el8", "0.29.0-2.el8", -1),
        ("0.29.0-10.el8", "0.29.0-9.el8", 1),
        ("1.0-1", "1.0-01", 0),
        ("1.0-1", "1.0-1.el8", -1),
        ("1.0-1~beta", "1.0-1", -1),
        ("1.0", "1.0-1", -1),
        ("0.30.0", "0.30.0-1", -1),
        ("1.0.0-rc.1", "1.0.0", 1),
        ("1.0^git1", "1.0", 1),
        ("1.0^git1", "1.0.1", -1),
        ("1.0^1", "1.0.1", 0),
        ("1.0-2-3", "1.0-2.3", 0),
        ("a:1.0", "1.0", 0),
        ("99999999999999999999:1.0", "1:1.0", -1),
        (" 1:1.0", "1:1.0", 0),
        ("1.0", "1.0-", 0),
        ("1.0", "1.0-~1", 1),
    ];

    #[test]
    fn the_fifty_cases_of_the_spec() {
        for (n, (a, b, want)) in CASES.iter().enumerate() {
            let got = match compare(a, b) {
                Ordering::Less => -1,
                Ordering::Equal => 0,
                Ordering::Greater => 1,
            };
            assert_eq!(got, *want, "row {}: compare({a:?}, {b:?})", n + 1);
            // Antisymmetry: swapping the arguments flips the answer.
            assert_eq!(
                compare(b, a),
                compare(a, b).reverse(),
                "row {} reversed",
                n + 1
            );
        }
    }

    #[test]
    fn equal_spellings_of_a_choria_version() {
        for same in ["0:0.29.4", "0.29.04", "0.29_4", "0.29.4.", "0.29.4-"] {
            assert_eq!(compare("0.29.4", same), Ordering::Equal, "{same}");
        }
        for different in ["0.29.4-1", "0.29.4.0"] {
            assert_ne!(compare("0.29.4", different), Ordering::Equal, "{different}");
        }
    }
}
