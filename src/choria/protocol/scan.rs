//! Finding the next byte a JSON string being written must escape: a plain byte
//! scan. It is part of the writer ([`super::gojson`]), not a second parser.
//!
//! Until 2026-12-07 this scanned eight bytes at a time with bit tricks on `u64`
//! words. `make bench` (10,000 nodes, three runs each) measured what that saved: the
//! provisioner's CPU per node was 0.132 ms with it and 0.136 ms with this loop, 3 %,
//! under the 5 % a passage kept only for speed must earn, so the plain loop is back.

/// The index of the first byte at or after `from` that Go's `encoding/json` escapes in
/// a string, or that may start such an escape: a control character, `"`, `\`, `<`,
/// `>`, `&`, or 0xE2 (the first byte of U+2028 and U+2029); `bytes.len()` if there is
/// none. Where a string being written must leave its plain run.
pub(super) fn escape_special(bytes: &[u8], from: usize) -> usize {
    bytes
        .iter()
        .skip(from)
        .position(|&b| is_escape_special(b))
        .map_or(bytes.len(), |at| from + at)
}

fn is_escape_special(b: u8) -> bool {
    matches!(b, 0..=0x1f | b'"' | b'\\' | b'<' | b'>' | b'&' | 0xe2)
}

/// A small deterministic generator for the writer's randomised tests.
#[cfg(test)]
pub(super) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_value_is_found_where_go_would_escape_it() {
        for b in 0..=255u8 {
            let bytes = [b'a', b'b', b, b'c'];
            let expected = if is_escape_special(b) { 2 } else { 4 };
            assert_eq!(escape_special(&bytes, 0), expected, "{b:#x}");
            assert_eq!(escape_special(&bytes, 3), 4);
        }
        for b in [0x00, 0x1f, b'"', b'\\', b'<', b'>', b'&', 0xe2] {
            assert!(is_escape_special(b), "{b:#x}");
        }
        for b in [0x20, b'!', b'A', 0x7f, 0x80, 0xe1, 0xe3, 0xff] {
            assert!(!is_escape_special(b), "{b:#x}");
        }
    }

    #[test]
    fn a_start_past_the_end_finds_nothing() {
        assert_eq!(escape_special(b"abc", 3), 3);
        assert_eq!(escape_special(b"abc", 5), 3);
        assert_eq!(escape_special(b"", 0), 0);
    }
}
