//! serde_json errors described without the input they are about.
//!
//! A serde_json data error quotes the value it refused (`invalid type: string
//! "s3cret", expected a boolean`), and the JSON a helper prints, a JWT carries or a
//! node sends back may hold secrets (the token, passwords, private keys) or bytes
//! meant to forge log lines. Imports nothing of the crate, so every layer uses it. [`describe`] keeps what helps
//! an operator — what was wrong, what was expected, the line and column — and drops
//! the value.

use serde_json::error::Category;

/// What went wrong in `e`, with its position when known, never quoting the input.
///
/// Syntax errors keep serde_json's own text (a fixed phrase such as `trailing
/// characters` or `expected value`, which never contains input); type errors keep
/// the kind of value found and what was expected (`invalid type: string, expected a
/// boolean`); any other data error is only named as such.
pub(crate) fn describe(e: &serde_json::Error) -> String {
    let at = if e.line() > 0 {
        format!(" at line {} column {}", e.line(), e.column())
    } else {
        String::new()
    };
    let text = e.to_string();
    let what = match e.classify() {
        Category::Io => "I/O error".to_string(),
        Category::Eof => "unexpected end of input".to_string(),
        // serde_json's syntax errors are fixed phrases followed by the position.
        Category::Syntax => text.strip_suffix(&at).unwrap_or("invalid JSON").to_string(),
        Category::Data => data_error(text.strip_suffix(&at).unwrap_or(&text)),
    };
    format!("{what}{at}")
}

/// `invalid type: <kind> <value>, expected <what>` without `<value>`; the same for
/// `invalid value`. The value sits between the kind and the *last* `, expected `
/// (a value may itself contain that phrase; the expectation, from our own types,
/// does not). Everything else is reduced to a generic phrase.
fn data_error(message: &str) -> String {
    for prefix in ["invalid type: ", "invalid value: "] {
        let Some(rest) = message.strip_prefix(prefix) else {
            continue;
        };
        let Some((found, expected)) = rest.rsplit_once(", expected ") else {
            break;
        };
        // The kind is the words before the quoted or back-quoted value
        // (`string "x"`, `integer `5``, `floating point `1.5``, `map`, `null`).
        let kind = found.split(['"', '`']).next().unwrap_or_default().trim();
        let plain = kind.len() <= 20 && kind.chars().all(|c| c.is_ascii_alphabetic() || c == ' ');
        let kind = if plain && !kind.is_empty() {
            kind
        } else {
            "value"
        };
        return format!("{prefix}{kind}, expected {expected}");
    }
    for prefix in ["missing field `", "duplicate field `"] {
        if let Some(field) = message
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix('`'))
        {
            // Field names come from our own types.
            return format!("{prefix}{field}`");
        }
    }
    "a value of the wrong type or range".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Probe {
        flag: bool,
        map: BTreeMap<String, String>,
        n: u8,
    }

    fn err(json: &str) -> String {
        describe(&serde_json::from_str::<Probe>(json).unwrap_err())
    }

    #[test]
    fn type_errors_name_the_kinds_and_the_position_not_the_value() {
        let e = err(r#"{"flag": "s3cret, expected a map", "map": {}, "n": 1}"#);
        assert_eq!(
            e,
            "invalid type: string, expected a boolean at line 1 column 33"
        );
        let e = err(r#"{"flag": true, "map": {"k": 12345}, "n": 1}"#);
        assert_eq!(
            e,
            "invalid type: integer, expected a string at line 1 column 33"
        );
        let e = err(r#"{"flag": true, "map": {}, "n": 1.5}"#);
        assert!(
            e.starts_with("invalid type: floating point, expected u8"),
            "{e}"
        );
        let e = err(r#"{"flag": true, "map": {}, "n": 99999}"#);
        assert!(e.starts_with("invalid value: integer, expected u8"), "{e}");
        assert!(!e.contains("99999"), "{e}");
        let e = err(r#"{"flag": true, "map": []}"#);
        assert!(
            e.starts_with("invalid type: sequence, expected a map"),
            "{e}"
        );
        let e = err(r#"{"flag": true, "map": {}}"#);
        assert_eq!(e, "missing field `n` at line 1 column 25");
        let e = err(r#"{"flag": true, "map": {}, "n": 1, "flag": false}"#);
        assert_eq!(e, "duplicate field `flag` at line 1 column 40");
    }

    #[test]
    fn syntax_errors_keep_their_phrase_and_position() {
        let e =
            describe(&serde_json::from_str::<serde_json::Value>("{\"a\": s3cret}").unwrap_err());
        assert_eq!(e, "expected value at line 1 column 7");
        let e =
            describe(&serde_json::from_str::<serde_json::Value>("{\"a\": 1} s3cret").unwrap_err());
        assert_eq!(e, "trailing characters at line 1 column 10");
        let e = describe(&serde_json::from_str::<serde_json::Value>("{\"a\": \"s3cr").unwrap_err());
        assert_eq!(e, "unexpected end of input at line 1 column 11");
    }

    #[test]
    fn errors_without_a_position_from_values() {
        let v = serde_json::json!({"flag": "s3cret", "map": {}, "n": 1});
        let e = describe(&serde_json::from_value::<Probe>(v).unwrap_err());
        assert_eq!(e, "invalid type: string, expected a boolean");
    }

    #[test]
    fn custom_messages_are_not_repeated() {
        assert_eq!(
            data_error("something about s3cret"),
            "a value of the wrong type or range"
        );
        assert_eq!(
            data_error("invalid type: string \"s3cret\""),
            "a value of the wrong type or range"
        );
    }
}
