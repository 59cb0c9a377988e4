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
    write(&mut out, value);
    out
}

/// Appends `value` to `out` as Go would write it.
pub fn write<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    let mut ser = serde_json::Serializer::with_formatter(out, GoFormatter);
    // Serialising plain structs, strings and maps into a Vec cannot fail.
    value
        .serialize(&mut ser)
        .expect("JSON serialisation into memory");
}

/// What a byte needs in a JSON string as Go writes it: 0 nothing, `u` a `\u00XX`
/// escape, `E` a look at the next two bytes (U+2028 and U+2029 start with 0xE2),
/// anything else the letter after a backslash.
const ESCAPES: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = b'u';
        b += 1;
    }
    t[b'\n' as usize] = b'n';
    t[b'\r' as usize] = b'r';
    t[b'\t' as usize] = b't';
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t[b'<' as usize] = b'u';
    t[b'>' as usize] = b'u';
    t[b'&' as usize] = b'u';
    t[0xE2] = b'E';
    t
};

/// Appends `text` as a JSON string literal with Go's escapes: the bytes
/// [`to_vec`]`(text)` gives, in one pass over a table (serde_json scans a string
/// twice through the formatter, which made escaping the envelopes' nested messages
/// the largest cost of a request).
pub fn write_str(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        let class = ESCAPES[byte as usize];
        if class == 0 {
            i += 1;
            continue;
        }
        let mut escape = [b'\\', class, 0, 0, 0, 0];
        let (len, consumed) = match class {
            b'E' => match bytes.get(i + 1..i + 3) {
                Some([0x80, last @ (0xA8 | 0xA9)]) => {
                    escape = *b"\\u2028";
                    escape[5] = if *last == 0xA8 { b'8' } else { b'9' };
                    (6, 3)
                }
                _ => {
                    i += 1;
                    continue;
                }
            },
            b'u' => {
                escape = [
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[(byte >> 4) as usize],
                    HEX[(byte & 15) as usize],
                ];
                (6, 1)
            }
            _ => (2, 1),
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(&escape[..len]);
        i += consumed;
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Appends `value` as Go would write it, every object's keys sorted when `sorted`
/// (Go's maps) or in their order otherwise: the bytes [`write`] gives, with strings
/// through [`write_str`].
pub fn write_value(out: &mut Vec<u8>, value: &serde_json::Value, sorted: bool) {
    use serde_json::Value;
    match value {
        Value::String(text) => write_str(out, text),
        Value::Array(items) => {
            out.push(b'[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                write_value(out, item, sorted);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if sorted {
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            }
            write_entries(out, entries, sorted);
        }
        scalar => write(out, scalar),
    }
}

/// Appends an object of `entries`, in their order, values as [`write_value`].
pub fn write_entries<'a>(
    out: &mut Vec<u8>,
    entries: impl IntoIterator<Item = (&'a String, &'a serde_json::Value)>,
    sorted: bool,
) {
    out.push(b'{');
    for (n, (key, value)) in entries.into_iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        write_str(out, key);
        out.push(b':');
        write_value(out, value, sorted);
    }
    out.push(b'}');
}

/// A JSON object written field by field, as Go writes a struct: for the envelopes,
/// whose big fields (a nested message, base64 data) are written without serde.
/// Fields must be added in the struct's declaration order.
pub struct Object<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Object<'a> {
    /// Starts an object at the end of `out`.
    pub fn start(out: &'a mut Vec<u8>) -> Object<'a> {
        out.push(b'{');
        Object { out, first: true }
    }

    fn key(&mut self, key: &str) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        write_str(self.out, key);
        self.out.push(b':');
    }

    /// A string field.
    pub fn str(mut self, key: &str, value: &str) -> Self {
        self.key(key);
        write_str(self.out, value);
        self
    }

    /// A field holding `bytes` as standard base64 (Go's `[]byte`, or base64 made by
    /// hand), which never needs an escape.
    pub fn base64(mut self, key: &str, bytes: &[u8]) -> Self {
        use base64::engine::general_purpose::STANDARD;
        use base64::Engine as _;
        self.key(key);
        self.out.push(b'"');
        let at = self.out.len();
        self.out
            .resize(at + base64::encoded_len(bytes.len(), true).unwrap_or(0), 0);
        let written = STANDARD
            .encode_slice(bytes, &mut self.out[at..])
            .expect("room for the base64 was made");
        self.out.truncate(at + written);
        self.out.push(b'"');
        self
    }

    /// An integer field.
    pub fn int(mut self, key: &str, value: i64) -> Self {
        self.key(key);
        // Writing to a Vec cannot fail.
        let _ = write!(self.out, "{value}");
        self
    }

    /// A field holding an array of strings.
    pub fn strs(mut self, key: &str, values: &[impl AsRef<str>]) -> Self {
        self.key(key);
        self.out.push(b'[');
        for (n, value) in values.iter().enumerate() {
            if n > 0 {
                self.out.push(b',');
            }
            write_str(self.out, value.as_ref());
        }
        self.out.push(b']');
        self
    }

    /// A field holding an array of JSON values, written in their order.
    pub fn values(mut self, key: &str, values: &[serde_json::Value]) -> Self {
        self.key(key);
        self.out.push(b'[');
        for (n, value) in values.iter().enumerate() {
            if n > 0 {
                self.out.push(b',');
            }
            write_value(self.out, value, false);
        }
        self.out.push(b']');
        self
    }

    /// A field whose value `f` appends.
    pub fn raw(mut self, key: &str, f: impl FnOnce(&mut Vec<u8>)) -> Self {
        self.key(key);
        f(self.out);
        self
    }

    /// A field of any serialisable value.
    pub fn value<T: Serialize + ?Sized>(mut self, key: &str, value: &T) -> Self {
        self.key(key);
        write(self.out, value);
        self
    }

    /// Closes the object.
    pub fn end(self) {
        self.out.push(b'}');
    }
}

/// Serialises `value` as Go would, as a `String`.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> String {
    String::from_utf8(to_vec(value)).expect("serde_json writes UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_str_gives_the_bytes_serde_and_the_formatter_give() {
        let mut every_byte: String = (0u8..0x80).map(char::from).collect();
        every_byte.push_str("é\u{2028}x\u{2029}\u{2027}\u{202a}€<&>\u{7f}");
        for text in [
            "",
            "plain",
            every_byte.as_str(),
            "\u{2028}",
            "end\u{2029}",
            "\u{e2}",
            r#"{"a":"<b>"}"#,
        ] {
            let mut out = Vec::new();
            write_str(&mut out, text);
            assert_eq!(String::from_utf8(out).unwrap(), to_string(text), "{text:?}");
        }
    }

    #[test]
    fn an_object_written_by_hand_is_the_struct_serialised() {
        #[derive(Serialize)]
        struct S<'a> {
            protocol: &'a str,
            data: String,
            nested: serde_json::Value,
        }
        let bytes = b"\x00\xff<&> any bytes";
        let nested = serde_json::json!({"b": "<x>", "a": [1, null]});
        let mut out = Vec::new();
        Object::start(&mut out)
            .str("protocol", "p\u{2028}1")
            .base64("data", bytes)
            .value("nested", &nested)
            .end();
        use base64::Engine as _;
        assert_eq!(
            out,
            to_vec(&S {
                protocol: "p\u{2028}1",
                data: base64::engine::general_purpose::STANDARD.encode(bytes),
                nested,
            })
        );
    }

    #[test]
    fn write_value_gives_the_bytes_serde_gives() {
        let v = serde_json::json!({
            "z": [1, -2, 3.5, 1e300, null, true, "<\u{2028}>", {"y": {}, "b": []}],
            "a": {"d": "x\n", "c": 0.1},
            "m": "é&",
        });
        let mut out = Vec::new();
        write_value(&mut out, &v, false);
        assert_eq!(out, to_vec(&v));
        let sorted: std::collections::BTreeMap<&String, &serde_json::Value> =
            v.as_object().unwrap().iter().collect();
        let mut out = Vec::new();
        write_entries(&mut out, sorted.clone(), false);
        assert_eq!(out, to_vec(&sorted), "top level sorted, nested as they are");
        let mut out = Vec::new();
        write_value(&mut out, &v, true);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a":{"c":0.1,"d":"x\n"},"m":"é\u0026","z":[1,-2,3.5,1e+300,null,true,"\u003c\u2028\u003e",{"b":[],"y":{}}]}"#
        );
    }

    #[test]
    fn escapes_like_go() {
        let v = serde_json::json!({"a": "<b>&\u{2028}\"\\\n\u{1}é\u{8}\u{c}\t"});
        assert_eq!(
            to_string(&v),
            r#"{"a":"\u003cb\u003e\u0026\u2028\"\\\n\u0001é\u0008\u000c\t"}"#
        );
    }
}
