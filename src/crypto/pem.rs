//! PEM blocks with the legacy RFC 1421 headers (`Proc-Type`, `DEK-Info`) that Go's
//! `encoding/pem` reads and writes and that the key transport needs. Strict enough
//! for hostile input: a block must have matching BEGIN/END labels and a base64 body.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

/// One PEM block.
#[derive(Clone, PartialEq, Eq)]
pub struct Block {
    /// The label (`RSA PRIVATE KEY`, `CERTIFICATE REQUEST` ...).
    pub label: String,
    /// Headers in order.
    pub headers: Vec<(String, String)>,
    /// The decoded body.
    pub der: Vec<u8>,
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The body may be a private key: never print it.
        f.debug_struct("Block")
            .field("label", &self.label)
            .field("headers", &self.headers)
            .field("der_len", &self.der.len())
            .finish()
    }
}

impl Block {
    /// The value of header `name` (only the node side reads one: `DEK-Info`).
    #[cfg(any(test, feature = "node-side"))]
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The first PEM block of `text`, or `None` when there is none that parses.
pub fn decode(text: &str) -> Option<Block> {
    let start = text.find("-----BEGIN ")?;
    let after = &text[start + "-----BEGIN ".len()..];
    let (label, rest) = after.split_once("-----")?;
    if label.is_empty() || label.contains('\n') {
        return None;
    }
    let end_marker = format!("-----END {label}-----");
    let end = rest.find(&end_marker)?;
    let mut lines = rest[..end]
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .peekable();
    let mut headers = Vec::new();
    while let Some(line) = lines.peek() {
        match line.split_once(':') {
            Some((k, v)) if !k.contains(' ') || k.starts_with("Proc-Type") => {
                headers.push((k.trim().to_string(), v.trim().to_string()));
                lines.next();
            }
            _ => break,
        }
    }
    let body: String = lines.collect();
    let der = STANDARD.decode(body).ok()?;
    Some(Block {
        label: label.to_string(),
        headers,
        der,
    })
}

/// Encodes a block as Go's `pem.Encode` does: headers, a blank line when there are
/// headers, base64 wrapped at 64 columns.
pub(crate) fn encode(block: &Block) -> String {
    let mut out = format!("-----BEGIN {}-----\n", block.label);
    for (k, v) in &block.headers {
        out.push_str(&format!("{k}: {v}\n"));
    }
    if !block.headers.is_empty() {
        out.push('\n');
    }
    let body = STANDARD.encode(&block.der);
    for chunk in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {}-----\n", block.label));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_with_headers() {
        let block = Block {
            label: "RSA PRIVATE KEY".into(),
            headers: vec![
                ("Proc-Type".into(), "4,ENCRYPTED".into()),
                ("DEK-Info".into(), "AES-256-CBC,00".into()),
            ],
            der: (0..100).collect(),
        };
        let text = encode(&block);
        assert_eq!(decode(&text), Some(block));
        assert!(text
            .lines()
            .all(|l| l.len() <= 64 || l.starts_with("-----")));
    }

    #[test]
    fn rejects_what_is_not_pem() {
        assert_eq!(decode("not pem"), None);
        assert_eq!(decode("-----BEGIN X-----\n%%%\n-----END X-----\n"), None);
        assert_eq!(decode("-----BEGIN X-----\nAAAA\n-----END Y-----\n"), None);
        assert!(decode("junk\n-----BEGIN X-----\nAAAA\n-----END X-----\ntrailing").is_some());
    }

    #[test]
    fn hostile_shapes_are_refused_without_panicking() {
        let long_label = format!("-----BEGIN {}-----\nAAAA\n", "L".repeat(100_000));
        for text in [
            "-----BEGIN ",
            "-----BEGIN -----",
            "-----BEGIN -----END -----",
            "-----BEGIN X-----END X-----",
            "-----BEGIN X-----\n-----END X",
            "-----BEGIN X\n-----\nAAAA\n-----END X\n-----",
            "-----BEGIN X-----\nProc-Type: 4,ENCRYPTED\nDEK-Info\n-----END X-----",
            "\u{FFFD}-----BEGIN \u{10FFFF}-----",
            long_label.as_str(),
        ] {
            assert_eq!(decode(text), None, "{text:.60?}");
        }
        // The END marker must follow the BEGIN line: an earlier one does not count.
        assert_eq!(decode("-----END X----- -----BEGIN X-----\nAAAA\n"), None);
        // Multi-byte characters around every marker and separator.
        let b = decode("é-----BEGIN é-----\né:é\nAAAA\n-----END é-----é").unwrap();
        assert_eq!(
            (b.label.as_str(), b.header("é"), b.der.len()),
            ("é", Some("é"), 3)
        );
        // Empty body: an empty DER, not a panic.
        assert_eq!(
            decode("-----BEGIN X-----\n-----END X-----").map(|b| b.der),
            Some(Vec::new())
        );
    }
}
