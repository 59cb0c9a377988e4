//! The facts `approval_facts` names, read from a held node's inventory for the
//! operator who decides: each a dotted path under the inventory's `facts`, its
//! value as text (a string as is, anything else as compact JSON), cut to
//! [`MAX_FACT_VALUE`] characters with control characters escaped, so that a node
//! can neither flood the table nor forge a terminal line.

use serde_json::Value;

use crate::choria::peers::{MAX_FACTS, MAX_FACT_VALUE};

/// The facts of `names` in `inventory` (the inventory reply's JSON object); a fact
/// the node does not have is left out. Runs once per held node, never on the
/// provisioning path.
pub(crate) fn facts_of(inventory: &str, names: &[String]) -> Vec<(String, String)> {
    if names.is_empty() {
        return Vec::new();
    }
    let Ok(doc) = serde_json::from_str::<Value>(inventory) else {
        return Vec::new();
    };
    let Some(facts) = doc.get("facts") else {
        return Vec::new();
    };
    names
        .iter()
        .take(MAX_FACTS)
        .filter_map(|name| {
            let value = name.split('.').try_fold(facts, |v, token| v.get(token))?;
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Null => return None,
                other => other.to_string(),
            };
            Some((name.clone(), fit(&text)))
        })
        .collect()
}

/// `text` escaped and cut to at most [`MAX_FACT_VALUE`] characters (an ellipsis
/// marks a cut).
fn fit(text: &str) -> String {
    let mut out = String::new();
    let mut count = 0;
    for c in text.chars() {
        let piece: String = if c.is_control() {
            c.escape_debug().collect()
        } else {
            c.to_string()
        };
        let n = piece.chars().count();
        if count + n > MAX_FACT_VALUE - 1 {
            out.push('…');
            return out;
        }
        count += n;
        out.push_str(&piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::strings;

    #[test]
    fn dotted_facts_are_read_as_text_and_missing_ones_left_out() {
        let inventory = r#"{"agents":["rpcutil"],"facts":{"os":{"name":"AlmaLinux","release":{"major":9}},
            "networking":{"fqdn":"n1.example.net"},"tags":["a","b"],"none":null}}"#;
        let got = facts_of(
            inventory,
            &strings(&[
                "networking.fqdn",
                "os.release.major",
                "tags",
                "os.kernel",
                "none",
            ]),
        );
        assert_eq!(
            got,
            [
                ("networking.fqdn".to_string(), "n1.example.net".to_string()),
                ("os.release.major".into(), "9".into()),
                ("tags".into(), r#"["a","b"]"#.into()),
            ]
        );
        assert!(facts_of("not json", &strings(&["os.name"])).is_empty());
        assert!(facts_of(r#"{"facts":1}"#, &strings(&["os.name"])).is_empty());
    }

    #[test]
    fn hostile_values_are_escaped_and_cut() {
        let long = "x".repeat(10_000);
        let inventory = format!(r#"{{"facts":{{"a":"{long}","b":"line\nforged\u001b[31m"}}}}"#);
        let got = facts_of(&inventory, &strings(&["a", "b"]));
        assert_eq!(got[0].1.chars().count(), MAX_FACT_VALUE);
        assert!(got[0].1.ends_with('…'));
        assert_eq!(got[1].1, "line\\nforged\\u{1b}[31m");
        assert!(!got.iter().any(|(_, v)| v.chars().any(char::is_control)));
    }
}
