//! Request filter matching as a go-choria server does it (go-choria's `protocol/v1` and `protocol/v2`
//! §2.5): every non-empty category must pass; agents and classes are ANDed,
//! identities ORed, `/re/` entries are regular expressions, facts are compared with
//! the seven Choria operators.
//!
//! Compound filters use the expr language, which the simulator does not evaluate: a
//! node never matches a non-empty compound filter (the provisioner sends none).

use regex::{Regex, RegexBuilder};
use serde_json::Value;

use crate::choria::protocol::Filter;

/// What a node offers to a filter.
pub struct NodeFacts<'a> {
    /// Identity.
    pub identity: &'a str,
    /// Agents it runs.
    pub agents: &'a [&'a str],
    /// Configuration-management classes (a provisioning-mode node has none).
    pub classes: &'a [&'a str],
    /// Its facts document.
    pub facts: &'a Value,
}

/// `/re/` as a regular expression, anything else `None`.
fn as_regex(entry: &str, case_insensitive: bool) -> Option<Option<Regex>> {
    let inner = entry.strip_prefix('/')?.strip_suffix('/')?;
    Some(
        RegexBuilder::new(inner)
            .case_insensitive(case_insensitive)
            .size_limit(1 << 20)
            .build()
            .ok(),
    )
}

/// True when `value` matches `entry` (`/re/` or exact).
fn matches(entry: &str, value: &str, case_insensitive: bool) -> bool {
    match as_regex(entry, case_insensitive) {
        Some(Some(re)) => re.is_match(value),
        Some(None) => false,
        None => entry == value,
    }
}

/// The fact at a dotted path (gjson's simple form).
fn fact_at<'a>(facts: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(facts, |v, key| match v {
        Value::Object(map) => map.get(key),
        Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

fn fact_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One `{"fact","operator","value"}` filter against the facts.
fn fact_matches(filter: &Value, facts: &Value) -> bool {
    let field = |k: &str| filter.get(k).and_then(Value::as_str).unwrap_or_default();
    let (name, operator, wanted) = (field("fact"), field("operator"), field("value"));
    if name.is_empty() || wanted.is_empty() {
        return false;
    }
    let Some(actual) = fact_at(facts, name) else {
        return false;
    };
    let actual_text = fact_text(actual);
    let numbers = (actual_text.parse::<f64>(), wanted.parse::<f64>());
    match operator {
        "==" => match numbers {
            (Ok(a), Ok(b)) => a == b,
            _ => actual_text == wanted,
        },
        "!=" => match numbers {
            (Ok(a), Ok(b)) => a != b,
            _ => actual_text != wanted,
        },
        "=~" => {
            let pattern = wanted.trim_start_matches('/').trim_end_matches('/');
            RegexBuilder::new(pattern)
                .case_insensitive(true)
                .size_limit(1 << 20)
                .build()
                .is_ok_and(|re| re.is_match(&actual_text))
        }
        "<" | ">" | "<=" | ">=" => {
            let ordering = match numbers {
                (Ok(a), Ok(b)) => a.partial_cmp(&b),
                _ => Some(actual_text.as_str().cmp(wanted)),
            };
            let Some(o) = ordering else { return false };
            match operator {
                "<" => o.is_lt(),
                ">" => o.is_gt(),
                "<=" => o.is_le(),
                _ => o.is_ge(),
            }
        }
        _ => false,
    }
}

/// True when a node with `node`'s agents, classes, identity and facts passes `filter`.
pub fn passes(filter: &Filter, node: &NodeFacts<'_>) -> bool {
    let agents_ok = filter
        .agent
        .iter()
        .all(|want| node.agents.iter().any(|a| matches(want, a, false)));
    let classes_ok = filter
        .cf_class
        .iter()
        .all(|want| node.classes.iter().any(|c| matches(want, c, true)));
    let identity_ok = filter.identity.is_empty()
        || filter
            .identity
            .iter()
            .any(|want| matches(want, node.identity, false));
    let facts_ok = filter.fact.iter().all(|f| fact_matches(f, node.facts));
    agents_ok && classes_ok && identity_ok && facts_ok && filter.compound.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(facts: &Value) -> NodeFacts<'_> {
        NodeFacts {
            identity: "n1.example.net",
            agents: &["choria_provision", "rpcutil"],
            classes: &[],
            facts,
        }
    }

    fn filter(v: Value) -> Filter {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn empty_filter_matches_and_every_category_must_pass() {
        let facts = json!({"role": "web", "os": {"family": "RedHat"}, "cpus": 8});
        let n = node(&facts);
        assert!(passes(&Filter::default(), &n));
        assert!(passes(&Filter::agent("choria_provision"), &n));
        assert!(!passes(&Filter::agent("puppet"), &n));
        assert!(passes(
            &filter(json!({"agent": ["/^choria_/", "rpcutil"]})),
            &n
        ));
        assert!(!passes(
            &filter(json!({"agent": ["rpcutil", "puppet"]})),
            &n
        ));
        assert!(passes(
            &filter(json!({"identity": ["other", "n1.example.net"]})),
            &n
        ));
        assert!(passes(&filter(json!({"identity": ["/^n\\d\\./"]})), &n));
        assert!(!passes(
            &filter(json!({"identity": ["n2.example.net"]})),
            &n
        ));
        assert!(!passes(&filter(json!({"cf_class": ["apache"]})), &n));
        assert!(!passes(
            &filter(json!({"compound": [[{"expr": "true"}]]})),
            &n
        ));
    }

    #[test]
    fn fact_operators() {
        let facts = json!({"role": "web", "os": {"family": "RedHat"}, "cpus": 8});
        let n = node(&facts);
        let f = |fact: &str, op: &str, value: &str| {
            passes(
                &filter(json!({"fact": [{"fact": fact, "operator": op, "value": value}]})),
                &n,
            )
        };
        assert!(f("role", "==", "web"));
        assert!(!f("role", "==", "db"));
        assert!(f("role", "!=", "db"));
        assert!(f("os.family", "=~", "/^red/"));
        assert!(f("cpus", ">", "4"));
        assert!(f("cpus", "<=", "8"));
        assert!(!f("cpus", "<", "8"));
        assert!(!f("missing", "==", "x"));
        assert!(!f("role", "~~", "web"));
    }
}
