//! `identity_allow` and `identity_deny`: which node identities a site would ever
//! enrol, checked before an identity is queued, so that a refused one costs no queue
//! slot, no request and no helper run.

/// The compiled identity policy: built once from the configuration, shared
/// read-only.
#[derive(Debug, Clone)]
pub struct IdentityPolicy {
    allow: Vec<regex::Regex>,
    deny: Vec<regex::Regex>,
}

impl IdentityPolicy {
    /// The policy of `allow` and `deny` (RE2 patterns, `/re/` slashes stripped
    /// already); `None` when both are empty (every valid identity is admitted).
    /// Patterns were checked when the configuration was loaded: one that does not
    /// compile here (it cannot) admits nothing.
    pub fn new(allow: &[String], deny: &[String]) -> Option<IdentityPolicy> {
        if allow.is_empty() && deny.is_empty() {
            return None;
        }
        let compile = |patterns: &[String]| -> Vec<regex::Regex> {
            patterns
                .iter()
                .map(|p| regex::Regex::new(p).unwrap_or_else(|_| never()))
                .collect()
        };
        Some(IdentityPolicy {
            allow: compile(allow),
            deny: compile(deny),
        })
    }

    /// True when `identity` matches no deny pattern and, if there are allow
    /// patterns, one of them.
    pub fn admits(&self, identity: &str) -> bool {
        !self.deny.iter().any(|r| r.is_match(identity))
            && (self.allow.is_empty() || self.allow.iter().any(|r| r.is_match(identity)))
    }
}

/// A pattern that matches nothing.
fn never() -> regex::Regex {
    regex::Regex::new(r"[^\s\S]").unwrap_or_else(|_| unreachable!("a fixed pattern compiles"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], deny: &[&str]) -> Option<IdentityPolicy> {
        let owned = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        IdentityPolicy::new(&owned(allow), &owned(deny))
    }

    #[test]
    fn no_patterns_is_no_policy_and_deny_wins_over_allow() {
        assert!(policy(&[], &[]).is_none());
        let p = policy(&[r"\.prod\.example\.net$"], &[r"^ghost-"]).unwrap();
        assert!(p.admits("web1.prod.example.net"));
        assert!(!p.admits("web1.dev.example.net"), "not allowed");
        assert!(
            !p.admits("ghost-1.prod.example.net"),
            "denied though allowed"
        );
        let deny_only = policy(&[], &["^ghost-"]).unwrap();
        assert!(deny_only.admits("anything.example.net"));
        assert!(!deny_only.admits("ghost-7.example.net"));
    }
}
