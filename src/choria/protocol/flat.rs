//! A fast path for the two nested layers of a v1 reply, written as Go writes them
//! (no whitespace, no `\u` escape), decoded in one pass over their bytes: the secure
//! layer, a flat object of strings ([`strings`]), and the reply layer, two strings
//! and an envelope of three strings and an integer ([`reply`]).
//!
//! serde_json unescapes a string escape by escape (a scan set up anew after each
//! one); each layer's `message` is JSON text in a string, so its escapes are a few
//! bytes apart and that costs about 14 instructions a byte. These functions take the
//! usual shape only and answer `None` for anything else (whitespace, another key, a
//! key twice or missing, a value of another type, a number that is not a plain
//! integer, a `\u` escape, a control character, invalid UTF-8, trailing bytes): the
//! caller then decodes with serde, which gives the errors it always gave. Where they
//! answer, the values are the ones serde gives (tested byte for byte against it
//! below).

use std::borrow::Cow;

/// The values of `keys` in the flat object `bytes`, each key exactly once and no
/// other key, in any order; `None` when `bytes` is not of that simple shape.
pub(super) fn strings<'a, const N: usize>(
    bytes: &'a [u8],
    keys: [&str; N],
) -> Option<[Cow<'a, str>; N]> {
    strings_with(bytes, keys, None)
}

/// [`strings`], the first value that has an escape unescaped into `spare` (emptied
/// first) and borrowed from it, rather than into a new allocation: a v1 reply's
/// secure `message` is most of the reply, and a buffer the reading thread keeps
/// spares an allocation of that size per reply (glibc's slow path, as it is over
/// the per-thread cache's sizes).
pub(super) fn strings_with<'a, const N: usize>(
    bytes: &'a [u8],
    keys: [&str; N],
    mut spare: Option<&'a mut Vec<u8>>,
) -> Option<[Cow<'a, str>; N]> {
    let mut values: [Option<Cow<'a, str>>; N] = std::array::from_fn(|_| None);
    let end = object(bytes, 0, |key, at| {
        let slot = keys.iter().position(|k| *k == key)?;
        let (value, next) = string_into(bytes, at, &mut spare)?;
        fill(&mut values[slot], value)?;
        Some(next)
    })?;
    whole(bytes, end)?;
    all(values)
}

/// A v1 reply layer's fields, borrowed where nothing is escaped.
#[derive(Debug, PartialEq)]
pub(super) struct ReplyFields<'a> {
    pub(super) protocol: Cow<'a, str>,
    pub(super) message: Cow<'a, str>,
    pub(super) requestid: Cow<'a, str>,
    pub(super) senderid: Cow<'a, str>,
    pub(super) agent: Cow<'a, str>,
    pub(super) time: i64,
}

/// The reply layer `{"protocol","message","envelope":{"requestid","senderid","agent",
/// "time"}}` in `bytes`, each key exactly once and no other, in any order; `None` for
/// any other shape.
pub(super) fn reply(bytes: &[u8]) -> Option<ReplyFields<'_>> {
    let [mut protocol, mut message] = [None, None];
    let mut envelope = None;
    let end = object(bytes, 0, |key, at| match &*key {
        "protocol" | "message" => {
            let (value, next) = string(bytes, at)?;
            fill(
                if key == "protocol" {
                    &mut protocol
                } else {
                    &mut message
                },
                value,
            )?;
            Some(next)
        }
        "envelope" => {
            let mut strs: [Option<Cow<'_, str>>; 3] = [None, None, None];
            let mut time = None;
            let next = object(bytes, at, |key, at| {
                if key == "time" {
                    let (value, next) = integer(bytes, at)?;
                    fill(&mut time, value)?;
                    return Some(next);
                }
                let slot = ["requestid", "senderid", "agent"]
                    .iter()
                    .position(|k| *k == key)?;
                let (value, next) = string(bytes, at)?;
                fill(&mut strs[slot], value)?;
                Some(next)
            })?;
            let [requestid, senderid, agent] = all(strs)?;
            fill(&mut envelope, (requestid, senderid, agent, time?))?;
            Some(next)
        }
        _ => None,
    })?;
    whole(bytes, end)?;
    let (requestid, senderid, agent, time) = envelope?;
    Some(ReplyFields {
        protocol: protocol?,
        message: message?,
        requestid,
        senderid,
        agent,
        time,
    })
}

/// Walks the object starting at `at`: `field` is given each key and the index of its
/// value, and answers the index after the value. The index after the closing brace,
/// or `None` (an empty object is left to serde as well).
fn object<'a>(
    bytes: &'a [u8],
    at: usize,
    mut field: impl FnMut(Cow<'a, str>, usize) -> Option<usize>,
) -> Option<usize> {
    let mut at = expect(bytes, at, b'{')?;
    loop {
        let (key, next) = string(bytes, at)?;
        at = expect(bytes, next, b':')?;
        let next = field(key, at)?;
        match bytes.get(next) {
            Some(b',') => at = next + 1,
            Some(b'}') => return Some(next + 1),
            _ => return None,
        }
    }
}

/// `Some` when `end` is the end of `bytes` (serde refuses trailing bytes).
fn whole(bytes: &[u8], end: usize) -> Option<()> {
    (end == bytes.len()).then_some(())
}

/// Puts `value` in an empty `slot`; `None` for a key given twice (serde refuses a
/// duplicate field).
fn fill<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    slot.replace(value).is_none().then_some(())
}

/// Every value, or `None` when a key was missing (serde's error to give).
fn all<T, const N: usize>(values: [Option<T>; N]) -> Option<[T; N]> {
    if values.iter().any(Option::is_none) {
        return None;
    }
    Some(values.map(|v| v.expect("checked above")))
}

/// A JSON integer at `at` as serde reads an `i64` (`-?(0|[1-9][0-9]*)`), and the index
/// after it; `None` for a fraction, an exponent, a leading zero or an overflow.
fn integer(bytes: &[u8], at: usize) -> Option<(i64, usize)> {
    let negative = bytes.get(at) == Some(&b'-');
    let mut i = at + usize::from(negative);
    let mut value: i64 = 0;
    match *bytes.get(i)? {
        b'0' => i += 1,
        b'1'..=b'9' => {
            while let Some(&digit @ b'0'..=b'9') = bytes.get(i) {
                value = value
                    .checked_mul(10)?
                    .checked_add(i64::from(digit - b'0'))?;
                i += 1;
            }
        }
        _ => return None,
    }
    if matches!(bytes.get(i), Some(b'.' | b'e' | b'E' | b'0'..=b'9')) {
        return None;
    }
    Some((if negative { -value } else { value }, i))
}

fn expect(bytes: &[u8], at: usize, byte: u8) -> Option<usize> {
    (bytes.get(at) == Some(&byte)).then_some(at + 1)
}

/// The JSON string starting at `at` (its opening quote) and the index after its
/// closing quote; borrowed when it has no escape.
fn string(bytes: &[u8], at: usize) -> Option<(Cow<'_, str>, usize)> {
    string_into(bytes, at, &mut None)
}

/// [`string`], unescaped into `spare` (taken, so used once) when it has an escape
/// and a spare buffer is given.
fn string_into<'a>(
    bytes: &'a [u8],
    at: usize,
    spare: &mut Option<&'a mut Vec<u8>>,
) -> Option<(Cow<'a, str>, usize)> {
    let start = expect(bytes, at, b'"')?;
    // Up to the first quote, backslash or control character a word at a time: a
    // string without escapes (most of them) is borrowed from there.
    let first = super::scan::string_special(bytes, start);
    match *bytes.get(first)? {
        b'"' => {
            let value = std::str::from_utf8(&bytes[start..first]).ok()?;
            return Some((Cow::Borrowed(value), first + 1));
        }
        b'\\' => {}
        _ => return None, // serde refuses a control character
    }
    // Escapes only ever add ASCII, so the result is UTF-8 exactly when the raw bytes
    // between them are.
    match spare.take() {
        Some(buf) => {
            buf.clear();
            let end = unescape(bytes, start, first, buf)?;
            let buf: &'a Vec<u8> = buf;
            Some((Cow::Borrowed(std::str::from_utf8(buf).ok()?), end))
        }
        None => {
            let mut buf = Vec::new();
            let end = unescape(bytes, start, first, &mut buf)?;
            Some((Cow::Owned(String::from_utf8(buf).ok()?), end))
        }
    }
}

/// Appends the string whose text starts at `start` and whose first escape is at
/// `first` to `buf`, unescaped; the index after its closing quote.
fn unescape(bytes: &[u8], start: usize, first: usize, buf: &mut Vec<u8>) -> Option<usize> {
    // A nested message has an escape every few bytes: from the first one on, byte by
    // byte into a buffer sized for the rest (copying the runs between escapes cost
    // more than pushing their bytes).
    buf.reserve(bytes.len() - start);
    buf.extend_from_slice(&bytes[start..first]);
    let mut i = first;
    loop {
        let &b = bytes.get(i)?;
        i += 1;
        match b {
            b'"' => return Some(i),
            b'\\' => {
                buf.push(match *bytes.get(i)? {
                    b'"' => b'"',
                    b'\\' => b'\\',
                    b'/' => b'/',
                    b'n' => b'\n',
                    b't' => b'\t',
                    b'r' => b'\r',
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    _ => return None, // `\u` and invalid escapes: serde's to judge
                });
                i += 1;
            }
            0..=0x1f => return None, // serde refuses a control character
            _ => buf.push(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug, PartialEq)]
    struct Secure {
        protocol: String,
        message: String,
        hash: String,
    }

    const KEYS: [&str; 3] = ["protocol", "message", "hash"];

    /// The fast path against serde: where it answers, serde gives the same values;
    /// where serde refuses, it does not answer.
    fn same_as_serde(bytes: &[u8]) -> bool {
        let fast = strings(bytes, KEYS);
        // The same values unescaped into a spare buffer that held something before.
        let mut spare = b"left over from the last reply".to_vec();
        let spared = strings_with(bytes, KEYS, Some(&mut spare));
        assert_eq!(fast, spared, "{bytes:?}");
        let serde = serde_json::from_slice::<Secure>(bytes).ok();
        match (fast, serde) {
            (Some([p, m, h]), Some(s)) => {
                assert_eq!((&*p, &*m, &*h), (&*s.protocol, &*s.message, &*s.hash));
                true
            }
            (Some(v), None) => panic!("fast path accepts what serde refuses: {v:?} from {bytes:?}"),
            (None, _) => false,
        }
    }

    #[test]
    fn the_first_escaped_value_is_unescaped_into_the_spare_buffer_and_borrowed_from_it() {
        let bytes = br#"{"protocol":"p\"1","message":"m\"2","hash":"h\"3"}"#;
        let mut spare = b"old".to_vec();
        let [p, m, h] = strings_with(bytes, KEYS, Some(&mut spare)).unwrap();
        assert_eq!((&*p, &*m, &*h), ("p\"1", "m\"2", "h\"3"));
        assert!(matches!(p, Cow::Borrowed(_)), "borrowed from the spare");
        assert!(matches!(m, Cow::Owned(_)), "the spare is used once");
        assert!(matches!(h, Cow::Owned(_)));
        drop((p, m, h));
        assert_eq!(spare, b"p\"1", "emptied, then the first escaped value");
    }

    fn secure(message: &str) -> Vec<u8> {
        let mut out = Vec::new();
        super::super::gojson::Object::start(&mut out)
            .str("protocol", "choria:secure:reply:1")
            .str("message", message)
            .str("hash", "aGFzaA==")
            .end();
        out
    }

    #[test]
    fn escaped_and_unescaped_values_are_the_ones_serde_gives() {
        // (message, fast path taken): Go writes `<`, `>`, `&`, U+2028, U+2029 and
        // most control characters as `\u` escapes, which are left to serde.
        let messages = [
            ("", true),
            ("plain", true),
            (
                r#"{"protocol":"choria:reply:1","message":"{\"statuscode\":0,\"data\":{\"a\":\"\u003c\"}}"}"#,
                true,
            ),
            (
                "tab\there, newline\n, cr\r, slash / and back \\ and \"quotes\"",
                true,
            ),
            ("non-ASCII é, 日本", true),
            ("\u{8} and \u{c}", false),
            ("<&>", false),
            ("\u{2028}", false),
        ];
        for (message, fast) in messages {
            let bytes = secure(message);
            assert_eq!(same_as_serde(&bytes), fast, "{message:?}");
            if !fast {
                continue;
            }
            let [_, m, _] = strings(&bytes, KEYS).unwrap();
            assert_eq!(m, message);
            assert_eq!(
                matches!(m, Cow::Borrowed(_)),
                !message.contains(['"', '\\', '\n', '\t', '\r']),
                "borrowed exactly when nothing is escaped: {message:?}"
            );
        }
        // `\b`, `\f` and `\/` as other writers send them.
        assert!(same_as_serde(
            br#"{"protocol":"p","message":"a\/b\b\f","hash":"h"}"#
        ));
        // In any key order, with `\/`.
        let bytes = br#"{"hash":"h","message":"a\/b","protocol":"p"}"#;
        assert!(same_as_serde(bytes));
    }

    #[test]
    fn values_are_exact_wherever_an_escape_falls_in_a_long_run() {
        // Escapes, a raw control character and a quote at every offset of a run
        // longer than a 16-byte block.
        for (special, fast) in [
            ("\"", true),
            ("\\", true),
            ("\n", true),
            ("\t", true),
            ("é", true),
            ("<", false), // written as `\u003c`: left to serde
        ] {
            for at in 0..40 {
                let mut text: Vec<&str> = vec!["a"; 40];
                text[at] = special;
                let bytes = secure(&text.concat());
                assert_eq!(same_as_serde(&bytes), fast, "{special:?} at {at}");
            }
        }
        for at in 0..40 {
            let mut raw = br#"{"protocol":"p","hash":"h","message":""#.to_vec();
            let mut run = vec![b'a'; 40];
            run[at] = 0x01;
            raw.extend_from_slice(&run);
            raw.extend_from_slice(b"\"}");
            assert!(
                !same_as_serde(&raw),
                "a raw control character at {at} is refused"
            );
        }
    }

    #[test]
    fn other_shapes_are_left_to_serde() {
        let cases: [&[u8]; 16] = [
            br#"{"protocol":"p","message":"m"}"#,
            br#"{"protocol":"p","message":"m","hash":"h","x":"y"}"#,
            br#"{"protocol":"p","message":"m","hash":"h","hash":"h"}"#,
            br#"{"protocol":"p","message":"m","hash":1}"#,
            br#"{"protocol":"p", "message":"m","hash":"h"}"#,
            br#"{"protocol":"p","message":"m","hash":"h"} "#,
            br#"{"protocol":"p","message":"\u0041","hash":"h"}"#,
            br#"{"protocol":"p","message":"\x","hash":"h"}"#,
            b"{\"protocol\":\"p\",\"message\":\"a\nb\",\"hash\":\"h\"}",
            b"{\"protocol\":\"p\",\"message\":\"\xff\",\"hash\":\"h\"}",
            b"{\"protocol\":\"p\",\"message\":\"\\n\xc3\",\"hash\":\"h\"}",
            br#"{"protocol":"p","message":"m","hash":"h"}}"#,
            br#"{"protocol":"p","message":"m","hash":"h""#,
            br#"{"protocol":"p","message":"m\"#,
            br#"{"prot\u006fcol":"p","message":"m","hash":"h"}"#,
            b"",
        ];
        for bytes in cases {
            assert!(
                strings(bytes, KEYS).is_none(),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
            same_as_serde(bytes);
        }
        // A key given as "" is present; one left out is not.
        assert!(same_as_serde(br#"{"protocol":"","message":"","hash":""}"#));
    }

    #[test]
    fn every_one_byte_change_of_a_reply_agrees_with_serde() {
        let bytes = secure(r#"{"message":"{\"a\":\"\u003c\\\"é\"}","x":"\t"}"#);
        let replacements = [
            b'"', b'\\', b'{', b'}', b',', b':', b' ', b'n', b'u', 0x1f, 0xc3, 0xff,
        ];
        let mut fast = 0;
        for i in 0..bytes.len() {
            let mut cut = bytes.clone();
            cut.remove(i);
            fast += usize::from(same_as_serde(&cut));
            for r in replacements {
                let mut changed = bytes.clone();
                changed[i] = r;
                fast += usize::from(same_as_serde(&changed));
            }
        }
        assert!(
            fast > bytes.len(),
            "the fast path is taken for many of them: {fast}"
        );
    }

    #[derive(Deserialize, Debug)]
    struct Reply {
        protocol: String,
        message: String,
        envelope: Envelope,
    }

    #[derive(Deserialize, Debug)]
    struct Envelope {
        requestid: String,
        senderid: String,
        agent: String,
        time: i64,
    }

    /// [`reply`] against serde: where it answers, serde gives the same values; where
    /// serde refuses, it does not answer.
    fn reply_as_serde(bytes: &[u8]) -> bool {
        let fast = reply(bytes);
        let serde = serde_json::from_slice::<Reply>(bytes).ok();
        match (fast, serde) {
            (Some(f), Some(s)) => {
                assert_eq!(
                    (&*f.protocol, &*f.message, f.time),
                    (&*s.protocol, &*s.message, s.envelope.time)
                );
                assert_eq!(
                    (&*f.requestid, &*f.senderid, &*f.agent),
                    (
                        &*s.envelope.requestid,
                        &*s.envelope.senderid,
                        &*s.envelope.agent
                    )
                );
                true
            }
            (Some(f), None) => panic!("fast path accepts what serde refuses: {f:?} from {bytes:?}"),
            (None, _) => false,
        }
    }

    fn go_reply(message: &str, time: i64) -> Vec<u8> {
        let mut out = Vec::new();
        super::super::gojson::Object::start(&mut out)
            .str("protocol", "choria:reply:1")
            .str("message", message)
            .raw("envelope", |out| {
                super::super::gojson::Object::start(out)
                    .str("requestid", "0123456789abcdef0123456789abcdef")
                    .str("senderid", "n1.example.net")
                    .str("agent", "rpcutil")
                    .int("time", time)
                    .end()
            })
            .end();
        out
    }

    #[test]
    fn replies_as_go_writes_them_are_read_as_serde_reads_them() {
        let body = r#"{"action":"inventory","statuscode":0,"statusmsg":"OK","data":{"facts":{"a":"\"q\"\n"}}}"#;
        for time in [0, 1_733_300_000, -5, i64::MAX] {
            let bytes = go_reply(body, time);
            assert!(reply_as_serde(&bytes), "{time}");
            let f = reply(&bytes).unwrap();
            assert_eq!((&*f.message, f.time), (body, time));
        }
        // Keys in another order are still the usual shape.
        let bytes = br#"{"envelope":{"time":7,"agent":"a","senderid":"s","requestid":"r"},"message":"m","protocol":"p"}"#;
        assert!(reply_as_serde(bytes));
        // Everything else is serde's: numbers that are not plain integers, unknown,
        // duplicate or missing keys, other types, whitespace, i64::MIN.
        for bytes in [
            &br#"{"protocol":"p","message":"m","envelope":{"requestid":"r","senderid":"s","agent":"a","time":1.0}}"#[..],
            br#"{"protocol":"p","message":"m","envelope":{"requestid":"r","senderid":"s","agent":"a","time":1e3}}"#,
            br#"{"protocol":"p","message":"m","envelope":{"requestid":"r","senderid":"s","agent":"a","time":01}}"#,
            br#"{"protocol":"p","message":"m","envelope":{"requestid":"r","senderid":"s","agent":"a","time":99999999999999999999}}"#,
            br#"{"protocol":"p","message":"m","envelope":{"requestid":"r","senderid":"s","agent":"a","time":-9223372036854775808}}"#,
            br#"{"protocol":"p","message":"m","envelope":{"requestid":"r","senderid":"s","agent":"a","time":"1"}}"#,
            br#"{"protocol":"p","message":"m","envelope":{"requestid":"r","senderid":"s","agent":"a"}}"#,
            br#"{"protocol":"p","message":"m","envelope":{"requestid":"r","senderid":"s","agent":"a","time":1,"x":"y"}}"#,
            br#"{"protocol":"p","message":"m","envelope":{"requestid":"r","senderid":"s","agent":"a","time":1,"time":2}}"#,
            br#"{"protocol":"p","message":"m","envelope":{}}"#,
            br#"{"protocol":"p","message":"m"}"#,
            br#"{"protocol":"p","message":"m","envelope":{"requestid":"r","senderid":"s","agent":"a","time":1},"x":1}"#,
            br#"{"protocol":"p","message":"m","envelope":{"requestid":"r","senderid":"s","agent":"a","time":1}} "#,
            br#"{"protocol":"p", "message":"m","envelope":{"requestid":"r","senderid":"s","agent":"a","time":1}}"#,
        ] {
            assert!(
                reply(bytes).is_none(),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
            reply_as_serde(bytes);
        }
        assert_eq!(
            serde_json::from_slice::<Reply>(br#"{"protocol":"p","message":"m","envelope":{"requestid":"r","senderid":"s","agent":"a","time":-9223372036854775808}}"#).unwrap().envelope.time,
            i64::MIN,
            "left to serde, which reads it"
        );
    }

    #[test]
    fn every_one_byte_change_of_a_reply_layer_agrees_with_serde() {
        let bytes = go_reply(
            r#"{"statuscode":0,"data":{"a":"\u003c\\\"é","n":-12}}"#,
            1_733_300_123,
        );
        let replacements = [
            b'"', b'\\', b'{', b'}', b',', b':', b' ', b'-', b'0', b'9', b'.', b'e', b'u', 0x1f,
            0xc3, 0xff,
        ];
        let mut fast = 0;
        for i in 0..bytes.len() {
            let mut cut = bytes.clone();
            cut.remove(i);
            fast += usize::from(reply_as_serde(&cut));
            for r in replacements {
                let mut changed = bytes.clone();
                changed[i] = r;
                fast += usize::from(reply_as_serde(&changed));
            }
        }
        assert!(
            fast > bytes.len(),
            "the fast path is taken for many of them: {fast}"
        );
    }
}
