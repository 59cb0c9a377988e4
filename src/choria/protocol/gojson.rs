//! JSON bytes exactly as Go's `encoding/json` writes them: compact, struct fields in
//! declaration order, and `<`, `>`, `&`, U+2028 and U+2029 escaped as `\u003c`,
//! `\u003e`, `\u0026`, `\u2028`, `\u2029`. Whatever is hashed or signed is these bytes,
//! so they must match Go's to the byte.

use std::io::{self, Write};

use super::scan;
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
pub(crate) fn to_vec<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write(&mut out, value);
    out
}

/// Appends `value` to `out` as Go would write it.
pub(crate) fn write<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
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
/// [`to_vec`]`(text)` gives. Bytes go through a table one by one while escapes come
/// close together (a nested message's quotes); a run of more than eight plain bytes
/// (PEM lines, base64, the values of a nested message) is scanned for its end
/// (`scan::escape_special`) and copied whole.
pub(crate) fn write_str(out: &mut Vec<u8>, text: &str) {
    write_utf8(out, text.as_bytes())
}

/// [`write_str`] of `bytes`, which are UTF-8: the escapes are found byte by byte, so
/// they need no `&str`, and JSON this module wrote need not be validated again to be
/// nested as a string (a v1 request inside its secure layer).
fn write_utf8(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // Room for a nested message's share of escapes (about one byte in four needs
    // one); more grows the vector as usual.
    out.reserve(bytes.len() + bytes.len() / 2 + 2);
    out.push(b'"');
    let mut i = 0;
    loop {
        // Escapes in a nested message come a few bytes apart: the next eight bytes
        // go through the table one by one, and only a run longer than that is
        // scanned and copied whole.
        let stop = (i + 8).min(bytes.len());
        while i < stop && ESCAPES[bytes[i] as usize] == 0 {
            out.push(bytes[i]);
            i += 1;
        }
        if i == stop {
            let at = scan::escape_special(bytes, i);
            out.extend_from_slice(&bytes[i..at]);
            i = at;
        }
        let Some(&byte) = bytes.get(i) else { break };
        i += 1;
        match ESCAPES[byte as usize] {
            0 => out.push(byte),
            b'E' => match bytes.get(i..i + 2) {
                Some([0x80, last @ (0xA8 | 0xA9)]) => {
                    out.extend_from_slice(if *last == 0xA8 {
                        b"\\u2028"
                    } else {
                        b"\\u2029"
                    });
                    i += 2;
                }
                _ => out.push(byte),
            },
            b'u' => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(byte >> 4) as usize],
                HEX[(byte & 15) as usize],
            ]),
            class => out.extend_from_slice(&[b'\\', class]),
        }
    }
    out.push(b'"');
}

/// Appends `value` in decimal, as `{value}` formats it, without the formatting
/// machinery (two integers per request: its ttl and time).
fn write_int(out: &mut Vec<u8>, value: i64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = value.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if value < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[at..]);
}

/// How [`write_value`] writes objects and numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// Keys in their order, numbers as they are (a Go struct's fields).
    AsIs,
    /// Keys sorted (a Go map), numbers as they are.
    SortedKeys,
    /// As Go writes what it decoded into a `map[string]any`: keys sorted, every
    /// number as the float64 Go holds ([`write_go_float`]).
    GoMap,
}

/// Appends `value` as Go would write it in `style`: the bytes [`write()`] gives, with
/// strings through [`write_str`].
pub(crate) fn write_value(out: &mut Vec<u8>, value: &serde_json::Value, style: Style) {
    use serde_json::Value;
    match value {
        Value::String(text) => write_str(out, text),
        Value::Number(n) if style == Style::GoMap => {
            write_go_float(out, n.as_f64().unwrap_or_default())
        }
        Value::Array(items) => {
            out.push(b'[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                write_value(out, item, style);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if style != Style::AsIs {
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            }
            write_entries(out, entries, style);
        }
        scalar => write(out, scalar),
    }
}

/// Appends an object of `entries`, in their order, values as [`write_value`].
fn write_entries<'a>(
    out: &mut Vec<u8>,
    entries: impl IntoIterator<Item = (&'a String, &'a serde_json::Value)>,
    style: Style,
) {
    out.push(b'{');
    for (n, (key, value)) in entries.into_iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        write_str(out, key);
        out.push(b':');
        write_value(out, value, style);
    }
    out.push(b'}');
}

/// Appends the JSON object `text` as Go's `encoding/json` writes what it decoded into
/// a `map[string]any` (go-choria's generated clients hold an action's output so):
/// every object's keys sorted, a repeated key keeping its last value as Go's decoder
/// does, every number as the float64 Go holds ([`write_go_float`]), strings with Go's
/// escapes. At the top level, each `missing` entry (a key and its JSON text) is added
/// when the object lacks it. Nesting is limited as serde_json limits it (128). On an
/// error nothing is written.
///
/// Decoded into a `serde_json::Value`, then written. Until 2026-12-07 it was read
/// straight from the bytes and rearranged in the output buffer (about 250 lines);
/// `make bench` (10,000 nodes, three runs each) measured this version at 0.132–0.137
/// ms of CPU per node (ratio to the simulator 2.45–2.54) against 0.135–0.137 ms
/// (2.40–2.45) for that one: no saving to keep it for.
pub(crate) fn write_map(
    out: &mut Vec<u8>,
    text: &str,
    missing: &[(&str, &str)],
) -> Result<(), serde_json::Error> {
    use serde::de::Error as _;
    use serde_json::Value;
    let mut value: Value = serde_json::from_str(text)?;
    let Value::Object(map) = &mut value else {
        return Err(serde_json::Error::custom("the JSON text is not an object"));
    };
    for (key, json) in missing {
        if !map.contains_key(*key) {
            map.insert((*key).to_string(), serde_json::from_str(json)?);
        }
    }
    write_value(out, &value, Style::GoMap);
    Ok(())
}

/// Appends `f` as Go's `encoding/json` writes a float64: the fewest digits that read
/// back as `f`, in plain notation from 1e-6 up to 1e21, otherwise as `1.5e+21` or
/// `1e-7` (`strconv`'s `e` format with Go's clean-up of a one-digit negative exponent).
pub(crate) fn write_go_float(out: &mut Vec<u8>, f: f64) {
    let abs = f.abs();
    // Writing to a Vec cannot fail.
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let at = out.len();
        let _ = write!(out, "{f:e}");
        // Rust writes `1.5e21` and `1e-7`; Go writes `1.5e+21` and `1e-7`.
        if let Some(e) = out[at..].iter().position(|&b| b == b'e') {
            if out.get(at + e + 1) != Some(&b'-') {
                out.insert(at + e + 1, b'+');
            }
        }
    } else {
        let _ = write!(out, "{f}");
    }
}

/// A JSON object written field by field, as Go writes a struct: for the envelopes,
/// whose big fields (a nested message, base64 data) are written without serde.
/// Fields must be added in the struct's declaration order.
///
/// What it saves, measured on 2026-12-07 (#45) against the plain version of the
/// hottest use, a v1 request's three layers written by serde derive with a
/// formatter that escapes `<`, `>` and `&` as Go does (it passed the byte-for-byte
/// Go vector too): `PROFILE=callgrind NODES=2000 make bench` counted 843,639
/// instructions a node with serde and 703,217 with this writer (17 % fewer), and
/// five `make bench` runs of each put the provisioner's CPU at 2.62-2.86 times the
/// simulator's (mean 2.75) with serde and 2.42-2.65 (mean 2.53) with it (8 %).
pub(crate) struct Object<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Object<'a> {
    /// Starts an object at the end of `out`.
    pub(crate) fn start(out: &'a mut Vec<u8>) -> Object<'a> {
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
    pub(crate) fn str(mut self, key: &str, value: &str) -> Self {
        self.key(key);
        write_str(self.out, value);
        self
    }

    /// A string field holding `json`, text written by this module's writers (so
    /// UTF-8 by construction, checked in debug builds): a nested message, escaped
    /// without validating it again. Anything else goes through [`Object::str`].
    pub(crate) fn nested_json(mut self, key: &str, json: &[u8]) -> Self {
        debug_assert!(std::str::from_utf8(json).is_ok(), "nested JSON is UTF-8");
        self.key(key);
        write_utf8(self.out, json);
        self
    }

    /// A field holding `bytes` as standard base64 (Go's `[]byte`, or base64 made by
    /// hand), which never needs an escape.
    pub(crate) fn base64(mut self, key: &str, bytes: &[u8]) -> Self {
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
    pub(crate) fn int(mut self, key: &str, value: i64) -> Self {
        self.key(key);
        write_int(self.out, value);
        self
    }

    /// A field holding an array of strings.
    pub(crate) fn strs(mut self, key: &str, values: &[impl AsRef<str>]) -> Self {
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

    /// A field holding a map of strings (Go's `map[string]string`: its keys sorted,
    /// as a `BTreeMap`'s are).
    pub(crate) fn str_map(
        mut self,
        key: &str,
        map: &std::collections::BTreeMap<String, String>,
    ) -> Self {
        self.key(key);
        self.out.push(b'{');
        for (n, (k, v)) in map.iter().enumerate() {
            if n > 0 {
                self.out.push(b',');
            }
            write_str(self.out, k);
            self.out.push(b':');
            write_str(self.out, v);
        }
        self.out.push(b'}');
        self
    }

    /// A field holding an array of JSON values, written in their order.
    pub(crate) fn values(mut self, key: &str, values: &[serde_json::Value]) -> Self {
        self.key(key);
        self.out.push(b'[');
        for (n, value) in values.iter().enumerate() {
            if n > 0 {
                self.out.push(b',');
            }
            write_value(self.out, value, Style::AsIs);
        }
        self.out.push(b']');
        self
    }

    /// A field whose value `f` appends.
    pub(crate) fn raw(mut self, key: &str, f: impl FnOnce(&mut Vec<u8>)) -> Self {
        self.key(key);
        f(self.out);
        self
    }

    /// A field of any serialisable value.
    pub(crate) fn value<T: Serialize + ?Sized>(mut self, key: &str, value: &T) -> Self {
        self.key(key);
        write(self.out, value);
        self
    }

    /// Closes the object.
    pub(crate) fn end(self) {
        self.out.push(b'}');
    }
}

/// Serialises `value` as Go would, as a `String`.
#[cfg(test)]
pub(crate) fn to_string<T: Serialize + ?Sized>(value: &T) -> String {
    String::from_utf8(to_vec(value)).expect("serde_json writes UTF-8")
}

/// What [`write_map`]'s output must be, for its tests and the `rpc_body` fuzz target.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod map_checks {
    use serde_json::Value;

    /// Every object's keys in strictly increasing order, at every depth.
    pub(crate) fn sorted_everywhere(v: &Value) -> bool {
        match v {
            Value::Object(m) => {
                m.keys().zip(m.keys().skip(1)).all(|(a, b)| a < b)
                    && m.values().all(sorted_everywhere)
            }
            Value::Array(items) => items.iter().all(sorted_everywhere),
            _ => true,
        }
    }

    /// Every number as the float64 Go holds.
    pub(crate) fn as_float64(v: Value) -> Value {
        match v {
            Value::Number(n) => n.as_f64().map(Value::from).unwrap_or(Value::Null),
            Value::Array(items) => Value::Array(items.into_iter().map(as_float64).collect()),
            Value::Object(m) => {
                Value::Object(m.into_iter().map(|(k, v)| (k, as_float64(v))).collect())
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests;
