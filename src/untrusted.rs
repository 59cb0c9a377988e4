//! Text that came from the network, made fit for a log line or an error message:
//! escaped so that it cannot forge a line, and cut so that it cannot flood one.
//! Imports nothing of the crate.

/// How much of a hostile string a log line shows.
pub(crate) const SHOWN_CHARS: usize = 200;

/// `text` fit for a log line: at most [`SHOWN_CHARS`] characters, control
/// characters, quotes and non-ASCII escaped, and a marker with the full length when
/// it was cut. For strings that failed validation (a valid identity is shown as is).
pub(crate) fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(SHOWN_CHARS) + 16);
    for (n, c) in text.chars().enumerate() {
        if n == SHOWN_CHARS {
            out.push_str(&format!("…({} bytes)", text.len()));
            break;
        }
        out.extend(c.escape_debug());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_strings_are_cut_and_escaped_for_logs() {
        assert_eq!(shown("a\r\nb\"c"), "a\\r\\nb\\\"c");
        let long = "x".repeat(5000);
        let s = shown(&long);
        assert!(s.starts_with(&"x".repeat(200)), "{s}");
        assert!(s.ends_with("…(5000 bytes)"), "{s}");
        assert!(s.len() < 230);
    }
}
