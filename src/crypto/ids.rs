//! Identifiers: v1 request ids (a UUIDv4 without dashes, 32 lowercase hex), KSUIDs
//! (v2 request ids, JWT ids), UUIDv4 with dashes (lifecycle event ids).

use ring::rand::{SecureRandom, SystemRandom};

/// Fills `buf` from the system random source.
pub fn random_bytes(buf: &mut [u8]) {
    // The system RNG failing is not something a daemon can recover from; ring only
    // fails when getrandom(2) itself is unavailable.
    SystemRandom::new()
        .fill(buf)
        .expect("the system random number generator is available");
}

/// Bytes of the system random source drawn for one identifier per refill.
const POOL_IDS: usize = 16;

/// 16 random bytes for an identifier (request ids, nonces, KSUID payloads, run
/// markers), taken from a per-thread pool that one getrandom(2) call refills every
/// [`POOL_IDS`] identifiers: a system call per identifier was four of a node's 55.
/// The bytes are the kernel's CSPRNG output all the same, used once each; keys and
/// key-transport randomness still come straight from [`random_bytes`]. The pool is
/// scratch of the calling thread alone, never shared.
pub(crate) fn id_bytes() -> [u8; 16] {
    use std::cell::RefCell;
    thread_local! {
        static POOL: RefCell<([u8; 16 * POOL_IDS], usize)> =
            const { RefCell::new(([0; 16 * POOL_IDS], 16 * POOL_IDS)) };
    }
    POOL.with_borrow_mut(|(bytes, used)| {
        if *used == bytes.len() {
            random_bytes(bytes);
            *used = 0;
        }
        let mut out = [0u8; 16];
        out.copy_from_slice(&bytes[*used..*used + 16]);
        // Never handed out twice: wiped as it is taken.
        bytes[*used..*used + 16].fill(0);
        *used += 16;
        out
    })
}

fn uuid_v4_bytes() -> [u8; 16] {
    let mut b = id_bytes();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    b
}

/// A v1 request id: a random UUIDv4 without dashes.
pub fn v1_request_id() -> String {
    hex::encode(uuid_v4_bytes())
}

/// A random UUIDv4 with dashes (lifecycle event ids).
pub fn uuid_v4() -> String {
    let h = hex::encode(uuid_v4_bytes());
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// The KSUID epoch (2014-05-13T16:53:20Z).
pub(crate) const KSUID_EPOCH: u64 = 1_400_000_000;

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// A KSUID for Unix time `unix_seconds` with the given 16 payload bytes: 4-byte
/// big-endian `(seconds - 1400000000)` then the payload, base62, 27 characters.
pub(crate) fn ksuid_from(unix_seconds: u64, payload: [u8; 16]) -> String {
    let mut bytes = [0u8; 20];
    let ts = unix_seconds.saturating_sub(KSUID_EPOCH) as u32;
    bytes[..4].copy_from_slice(&ts.to_be_bytes());
    bytes[4..].copy_from_slice(&payload);
    // Repeated division of the 160-bit big-endian number by 62.
    let mut digits = Vec::with_capacity(27);
    let mut number = bytes.to_vec();
    while number.iter().any(|&b| b != 0) {
        let mut rem = 0u32;
        for byte in number.iter_mut() {
            let acc = (rem << 8) | u32::from(*byte);
            *byte = (acc / 62) as u8;
            rem = acc % 62;
        }
        digits.push(BASE62[rem as usize]);
    }
    while digits.len() < 27 {
        digits.push(b'0');
    }
    digits.reverse();
    String::from_utf8(digits).expect("base62 is ASCII")
}

/// The Unix time (seconds) inside a 27-character KSUID, `None` if it is not one.
pub fn ksuid_time(ksuid: &str) -> Option<u64> {
    if ksuid.len() != 27 {
        return None;
    }
    // Multiply-and-add the base62 digits into a 160-bit big-endian number.
    let mut number = [0u8; 20];
    for c in ksuid.bytes() {
        let digit = BASE62.iter().position(|&d| d == c)? as u32;
        let mut carry = digit;
        for byte in number.iter_mut().rev() {
            let acc = u32::from(*byte) * 62 + carry;
            *byte = (acc & 0xff) as u8;
            carry = acc >> 8;
        }
        if carry != 0 {
            return None;
        }
    }
    let ts = u32::from_be_bytes([number[0], number[1], number[2], number[3]]);
    Some(u64::from(ts) + KSUID_EPOCH)
}

/// A new KSUID for the current time.
pub fn ksuid() -> String {
    ksuid_from(crate::clock::unix_now(), id_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooled_id_bytes_differ_across_refills_and_threads() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..POOL_IDS * 3 {
            assert!(seen.insert(id_bytes()), "an id's bytes came twice");
        }
        let other = std::thread::spawn(|| (0..POOL_IDS).map(|_| id_bytes()).collect::<Vec<_>>())
            .join()
            .unwrap();
        for b in other {
            assert!(seen.insert(b), "two threads drew the same bytes");
        }
        assert!(!seen.contains(&[0u8; 16]));
    }

    #[test]
    fn ids_have_their_shapes() {
        let id = v1_request_id();
        assert_eq!(id.len(), 32);
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(&id[12..13], "4", "version nibble");
        let u = uuid_v4();
        assert_eq!(u.len(), 36);
        assert_eq!(u.matches('-').count(), 4);
        assert_eq!(ksuid().len(), 27);
        assert_ne!(v1_request_id(), v1_request_id());
    }

    /// Found by the `ids` fuzzer in our own decoder (since replaced by the `hex`
    /// crate's): `"6f+a"` decoded as `[0x6f, 0x0a]`.
    #[test]
    fn hex_decoding_takes_hex_digits_only() {
        let unhex = |text: &str| hex::decode(text).ok();
        assert_eq!(unhex("6fA0"), Some(vec![0x6f, 0xa0]));
        assert_eq!(unhex(""), Some(vec![]));
        for bad in ["6f+a", "+a", "-1", " a", "a ", "0x", "é1", "abc"] {
            assert_eq!(unhex(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn ksuid_matches_the_reference_encoding() {
        // segmentio/ksuid: the nil KSUID and the maximum KSUID.
        assert_eq!(
            ksuid_from(KSUID_EPOCH, [0; 16]),
            "000000000000000000000000000"
        );
        assert_eq!(
            ksuid_from(KSUID_EPOCH + u64::from(u32::MAX), [0xff; 16]),
            "aWgEPTl1tmebfsQzFP4bxwgy80V"
        );
        // tokens.md §6: the jti of a token issued at 2026-01-01T00:00:00Z.
        assert_eq!(
            ksuid_time("37dGasRK6DuhIamYovPgATEaXBV"),
            Some(1_767_225_600)
        );
        assert_eq!(
            ksuid_time(&ksuid_from(1_767_225_600, [7; 16])),
            Some(1_767_225_600)
        );
        assert_eq!(
            ksuid_time("aWgEPTl1tmebfsQzFP4bxwgy80W"),
            None,
            "overflows 160 bits"
        );
        assert_eq!(ksuid_time("short"), None);
        assert_eq!(ksuid_time("37dGasRK6DuhIamYovPgATEaXB!"), None);
    }
}
