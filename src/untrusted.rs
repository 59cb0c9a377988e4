//! Text that came from the network, made fit for a log line or an error message:
//! escaped so that it cannot forge a line, and cut so that it cannot flood one.
//! Imports nothing of the crate.

/// How much of a hostile string a log line shows.
pub(crate) const SHOWN_CHARS: usize = 200;

/// `text` fit for a log line or an error message: at most [`SHOWN_CHARS`]
/// characters, and a marker with the full length when it was cut. Shown as a
/// person wrote it (quotes and backslashes as they are) unless it holds a control
/// character or one that would not print (a newline, an escape sequence, a bidi
/// override): then the whole value is shown escaped, so that it cannot forge a
/// line and an escaped `\n` cannot be told from a written one.
pub(crate) fn shown(text: &str) -> String {
    let plain = |c: char| matches!(c, '"' | '\'' | '\\') || c.escape_debug().len() == 1;
    let escape = !text.chars().take(SHOWN_CHARS).all(plain);
    let mut out = String::with_capacity(text.len().min(SHOWN_CHARS) + 16);
    for (n, c) in text.chars().enumerate() {
        if n == SHOWN_CHARS {
            out.push_str(&format!("…({} bytes)", text.len()));
            break;
        }
        if escape {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// [`shown`] between double quotes, as a person quotes a value in a sentence.
pub(crate) fn quoted(text: &str) -> String {
    format!("\"{}\"", shown(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_strings_are_cut_and_escaped_for_logs() {
        assert_eq!(shown("a\r\nb\"c"), "a\\r\\nb\\\"c");
        assert_eq!(shown("it's \"plain\" C:\\x é"), "it's \"plain\" C:\\x é");
        assert_eq!(quoted("not an identity"), "\"not an identity\"");
        assert_eq!(shown("bidi\u{202e}"), "bidi\\u{202e}");
        let long = "x".repeat(5000);
        let s = shown(&long);
        assert!(s.starts_with(&"x".repeat(200)), "{s}");
        assert!(s.ends_with("…(5000 bytes)"), "{s}");
        assert!(s.len() < 230);
    }
}
