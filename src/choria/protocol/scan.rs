//! Finding the next byte a JSON string being written must escape, eight bytes at a
//! time, in safe code on plain `u64` words (no SIMD, no `unsafe`, the same on every
//! target). It is part of the writer ([`super::gojson`]), not a second parser.
//!
//! Most strings of a request have no escape at all, and some are long runs of base64
//! or PEM. Tested one at a time, each byte cost a load, three compares and their
//! branches; here a word of eight costs about as much as two did. The usual bit
//! tricks: a lane is flagged where it equals a byte (`x ^ b` has a zero lane) or is
//! below a bound. Only the lowest flagged lane of a word is certain (a borrow out of
//! a flagged lane can flag the lanes above it), and the lowest is all that is used:
//! the index of the first byte of interest, which the caller then reads byte by byte.

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Lanes of `v` below `n` (`n` at most 0x80); the lowest flag is exact.
#[inline(always)]
fn below(v: u64, n: u8) -> u64 {
    v.wrapping_sub(ONES * u64::from(n)) & !v & HIGHS
}

/// Lanes of `v` equal to `b`; the lowest flag is exact.
#[inline(always)]
fn equal(v: u64, b: u8) -> u64 {
    below(v ^ (ONES * u64::from(b)), 1)
}

/// The index of the first byte at or after `from` that Go's `encoding/json` escapes in
/// a string, or that may start such an escape: a control character, `"`, `\`, `<`,
/// `>`, `&`, or 0xE2 (the first byte of U+2028 and U+2029); `bytes.len()` if there is
/// none. Where a string being written must leave its plain run.
pub(super) fn escape_special(bytes: &[u8], from: usize) -> usize {
    // `"` (0x22) and `&` (0x26) differ in bit 2 alone, `<` (0x3c) and `>` (0x3e) in
    // bit 1 alone: setting that bit tests each pair with one compare (no other byte
    // becomes 0x26 or 0x3e so).
    first(
        bytes,
        from,
        |v| {
            below(v, 0x20)
                | equal(v | (ONES * 0x04), 0x26)
                | equal(v | (ONES * 0x02), 0x3e)
                | equal(v, b'\\')
                | equal(v, 0xe2)
        },
        is_escape_special,
    )
}

fn is_escape_special(b: u8) -> bool {
    matches!(b, 0..=0x1f | b'"' | b'\\' | b'<' | b'>' | b'&' | 0xe2)
}

/// The index of the first byte at or after `from` that `is` holds for; `hits` flags
/// the same bytes in a word (its lowest flag exact), which is tested eight at a time
/// before the tail is tested byte by byte.
#[inline(always)]
fn first(bytes: &[u8], from: usize, hits: impl Fn(u64) -> u64, is: impl Fn(u8) -> bool) -> usize {
    let mut i = from;
    while let Some(word) = bytes.get(i..i + 8) {
        let mut lanes = [0u8; 8];
        lanes.copy_from_slice(word);
        let found = hits(u64::from_le_bytes(lanes));
        if found != 0 {
            return i + (found.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < bytes.len() && !is(bytes[i]) {
        i += 1;
    }
    i.min(bytes.len())
}

/// A fixed xorshift stream for tests: the same cases on every run.
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

    fn naive(bytes: &[u8], from: usize, is: impl Fn(u8) -> bool) -> usize {
        (from..bytes.len())
            .find(|&i| is(bytes[i]))
            .unwrap_or(bytes.len())
    }

    #[test]
    fn every_byte_value_in_every_lane_is_found_where_a_byte_scan_finds_it() {
        // Each byte value at each position of a word and of the tail, after plain
        // bytes, after high bytes (the lanes a borrow could wrongly flag) and after
        // another byte of interest further on.
        for fill in [b'a', 0x7f, 0x80, 0x81, 0xff, 0x21] {
            for len in 0..20 {
                for at in 0..len {
                    for b in 0..=255u8 {
                        let mut bytes = vec![fill; len];
                        bytes[at] = b;
                        if at + 1 < len {
                            bytes[len - 1] = b'"';
                        }
                        for from in [0, at.min(3), at] {
                            assert_eq!(
                                escape_special(&bytes, from),
                                naive(&bytes, from, is_escape_special),
                                "escape: {bytes:?} from {from}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn random_text_is_scanned_as_a_byte_scan_scans_it() {
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
        for _ in 0..20_000 {
            let len = (next() % 64) as usize;
            // Mostly plain bytes, now and then one of interest or a high byte.
            let bytes: Vec<u8> = (0..len)
                .map(|_| match next() % 16 {
                    0 => b"\"\\\n\x00\x1f<>&\xe2"[(next() % 9) as usize],
                    1 => 0x80 | (next() as u8),
                    2 => b' ',
                    _ => b'A' + (next() % 26) as u8,
                })
                .collect();
            let from = if len == 0 { 0 } else { (next() as usize) % len };
            assert_eq!(
                escape_special(&bytes, from),
                naive(&bytes, from, is_escape_special)
            );
        }
    }

    #[test]
    fn a_start_past_the_end_finds_nothing() {
        assert_eq!(escape_special(b"abc", 3), 3);
        assert_eq!(escape_special(b"abc", 5), 3);
        assert_eq!(escape_special(b"", 0), 0);
    }
}
