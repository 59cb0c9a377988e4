//! Decoding a struct whose top-level keys match case-insensitively, as Go's decoder
//! matches them, straight from the JSON text: a `serde::Deserializer` adapter that
//! hands the struct's derived decoder each top-level key lowercased (ASCII, as
//! `helper::folded` does) and everything else untouched.
//!
//! It gives the answer Go's rules give only when the text decodes without an error:
//! two keys that fold to the same name are a "duplicate field" here, where Go (and
//! the helper's decoding through a folded map) takes the last. Its caller falls back
//! to that slower path on any error, which then decides the answer and the error.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

/// Decodes `T` from `bytes` with its top-level keys lowercased.
pub(crate) fn from_slice<T: de::DeserializeOwned>(bytes: &[u8]) -> serde_json::Result<T> {
    let mut json = serde_json::Deserializer::from_slice(bytes);
    let value = T::deserialize(Folding(&mut json))?;
    json.end()?;
    Ok(value)
}

/// The whole document: a struct is read as a map whose keys are folded.
struct Folding<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Folding<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(FoldingVisitor(visitor))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

/// Passes the map on with its keys folded.
struct FoldingVisitor<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for FoldingVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(FoldingMap(map))
    }
}

/// A map whose keys are read lowercased; values are read as they are.
struct FoldingMap<A>(A);

impl<'de, A: MapAccess<'de>> MapAccess<'de> for FoldingMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.0.next_key_seed(FoldedKey(seed))
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.0.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

/// A key: read as a string and given to the field's decoder lowercased.
struct FoldedKey<K>(K);

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for FoldedKey<K> {
    type Value = K::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<K::Value, D::Error> {
        self.0.deserialize(KeyText(d))
    }
}

/// The key's deserializer: whatever is asked of it, it reads a string.
struct KeyText<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for KeyText<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_str(Lowered(visitor))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map struct
        enum identifier ignored_any
    }
}

/// Hands on a string lowercased; one already lowercase is not copied.
struct Lowered<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for Lowered<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<V::Value, E> {
        if s.bytes().any(|b| b.is_ascii_uppercase()) {
            self.0.visit_string(s.to_ascii_lowercase())
        } else {
            self.0.visit_str(s)
        }
    }

    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<V::Value, E> {
        if s.bytes().any(|b| b.is_ascii_uppercase()) {
            self.0.visit_string(s.to_ascii_lowercase())
        } else {
            self.0.visit_borrowed_str(s)
        }
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<V::Value, E> {
        self.visit_str(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::collections::BTreeMap;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Answer {
        defer: bool,
        msg: String,
        configuration: BTreeMap<String, String>,
    }

    #[test]
    fn top_level_keys_match_in_any_case_and_nested_keys_are_kept() {
        let got: Answer = from_slice(
            br#"{"DEFER":true,"Msg":"Hi","configuration":{"Plugin.X":"Y"},"Other":[1,{"A":2}]}"#,
        )
        .unwrap();
        assert_eq!(
            got,
            Answer {
                defer: true,
                msg: "Hi".into(),
                configuration: [("Plugin.X".to_string(), "Y".to_string())].into(),
            }
        );
    }

    #[test]
    fn escaped_keys_are_folded_too() {
        let got: Answer = from_slice(br#"{"\u004dSG":"escaped"}"#).unwrap();
        assert_eq!(got.msg, "escaped");
    }

    #[test]
    fn what_the_slow_path_must_decide_is_an_error_here() {
        for text in [
            &br#"{"msg":"a","MSG":"b"}"#[..], // folds to a duplicate: Go takes the last
            br#"{"msg":"a"} {}"#,             // trailing data
            br#"[]"#,                         // not an object
            br#"{"defer":"yes"}"#,            // a wrong type
            br#"{"msg":"a""#,                 // cut short
        ] {
            assert!(
                from_slice::<Answer>(text).is_err(),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }
}
