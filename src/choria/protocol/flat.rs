//! A fast path for the secure layer of a reply: a JSON object whose values are all
//! strings, written as Go writes it (no whitespace, no `\u` escape), decoded in one
//! pass over its bytes.
//!
//! serde_json unescapes a string escape by escape (a scan set up anew after each
//! one); the secure `message` is JSON text in a string, so its escapes are a few
//! bytes apart and that costs about 14 instructions a byte. [`strings`] takes the
//! usual shape only and answers `None` for anything else (whitespace, another key, a
//! key twice or missing, a value that is not a string, a `\u` escape, a control
//! character, invalid UTF-8, trailing bytes): the caller then decodes with serde,
//! which gives the errors it always gave. Where it answers, the values are the ones
//! serde gives (tested byte for byte against it below).

use std::borrow::Cow;

/// The values of `keys` in the flat object `bytes`, each key exactly once and no
/// other key, in any order; `None` when `bytes` is not of that simple shape.
pub(super) fn strings<'a, const N: usize>(
    bytes: &'a [u8],
    keys: [&str; N],
) -> Option<[Cow<'a, str>; N]> {
    let mut values: [Option<Cow<'a, str>>; N] = std::array::from_fn(|_| None);
    let mut at = expect(bytes, 0, b'{')?;
    loop {
        let (key, next) = string(bytes, at)?;
        let slot = keys.iter().position(|k| *k == key)?;
        at = expect(bytes, next, b':')?;
        let (value, next) = string(bytes, at)?;
        if values[slot].replace(value).is_some() {
            return None; // serde refuses a duplicate field
        }
        match bytes.get(next) {
            Some(b',') => at = next + 1,
            Some(b'}') if next + 1 == bytes.len() => break,
            _ => return None,
        }
    }
    // A missing key is serde's error to give.
    if values.iter().any(Option::is_none) {
        return None;
    }
    Some(values.map(Option::unwrap_or_default))
}

fn expect(bytes: &[u8], at: usize, byte: u8) -> Option<usize> {
    (bytes.get(at) == Some(&byte)).then_some(at + 1)
}

/// The JSON string starting at `at` (its opening quote) and the index after its
/// closing quote; borrowed when it has no escape.
fn string(bytes: &[u8], at: usize) -> Option<(Cow<'_, str>, usize)> {
    let start = expect(bytes, at, b'"')?;
    let mut i = start;
    let mut out: Option<Vec<u8>> = None;
    let mut run = start;
    loop {
        let &b = bytes.get(i)?;
        match b {
            b'"' => break,
            b'\\' => {
                let unescaped = match *bytes.get(i + 1)? {
                    b'"' => b'"',
                    b'\\' => b'\\',
                    b'/' => b'/',
                    b'n' => b'\n',
                    b't' => b'\t',
                    b'r' => b'\r',
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    _ => return None, // `\u` and invalid escapes: serde's to judge
                };
                let buf = out.get_or_insert_with(|| Vec::with_capacity(bytes.len() - start));
                buf.extend_from_slice(&bytes[run..i]);
                buf.push(unescaped);
                i += 2;
                run = i;
            }
            0..=0x1f => return None, // serde refuses a control character
            _ => i += 1,
        }
    }
    let end = i + 1;
    // Escapes only ever add ASCII, so the result is UTF-8 exactly when the raw bytes
    // between them are.
    let value = match out {
        None => Cow::Borrowed(std::str::from_utf8(&bytes[start..i]).ok()?),
        Some(mut buf) => {
            buf.extend_from_slice(&bytes[run..i]);
            Cow::Owned(String::from_utf8(buf).ok()?)
        }
    };
    Some((value, end))
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
}
