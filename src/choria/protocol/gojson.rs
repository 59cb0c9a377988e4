//! JSON bytes exactly as Go's `encoding/json` writes them: compact, struct fields in
//! declaration order, and `<`, `>`, `&`, U+2028 and U+2029 escaped as `\u003c`,
//! `\u003e`, `\u0026`, `\u2028`, `\u2029`. Whatever is hashed or signed is these bytes,
//! so they must match Go's to the byte.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter};

/// serde_json's compact formatter plus Go's HTML-safe escapes.
struct GoFormatter;

impl Formatter for GoFormatter {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        // Bytes, not chars: every escape starts with an ASCII byte or with 0xE2 (the
        // first byte of U+2028 and U+2029), and a UTF-8 continuation byte is never
        // one of them, so a byte scan finds exactly the chars a char scan would.
        let bytes = fragment.as_bytes();
        let mut start = 0;
        let mut i = 0;
        while i < bytes.len() {
            let (escape, len): (&[u8], usize) = match bytes[i] {
                b'<' => (b"\\u003c", 1),
                b'>' => (b"\\u003e", 1),
                b'&' => (b"\\u0026", 1),
                0xE2 if bytes.get(i + 1) == Some(&0x80) => match bytes.get(i + 2) {
                    Some(0xA8) => (b"\\u2028", 3),
                    Some(0xA9) => (b"\\u2029", 3),
                    _ => {
                        i += 1;
                        continue;
                    }
                },
                _ => {
                    i += 1;
                    continue;
                }
            };
            w.write_all(&bytes[start..i])?;
            w.write_all(escape)?;
            i += len;
            start = i;
        }
        w.write_all(&bytes[start..])
    }

    fn write_char_escape<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        escape: serde_json::ser::CharEscape,
    ) -> io::Result<()> {
        use serde_json::ser::CharEscape;
        // Go writes \b and \f as \u0008 and \u000c.
        match escape {
            CharEscape::Backspace => w.write_all(b"\\u0008"),
            CharEscape::FormFeed => w.write_all(b"\\u000c"),
            other => CompactFormatter.write_char_escape(w, other),
        }
    }
}

/// Serialises `value` as Go would.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, GoFormatter);
    // Serialising plain structs, strings and maps into a Vec cannot fail.
    value
        .serialize(&mut ser)
        .expect("JSON serialisation into memory");
    out
}

/// Serialises `value` as Go would, as a `String`.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> String {
    String::from_utf8(to_vec(value)).expect("serde_json writes UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_go() {
        let v = serde_json::json!({"a": "<b>&\u{2028}\"\\\n\u{1}é\u{8}\u{c}\t"});
        assert_eq!(
            to_string(&v),
            r#"{"a":"\u003cb\u003e\u0026\u2028\"\\\n\u0001é\u0008\u000c\t"}"#
        );
    }
}
