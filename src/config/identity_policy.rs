//! `identity_allow` and `identity_deny`: which node identities a site would ever
//! enrol, checked before an identity is queued, so that a refused one costs no queue
//! slot, no request and no helper run.

/// The compiled identity policy: built once from the configuration, shared
/// read-only.
#[derive(Debug, Clone)]
pub struct IdentityPolicy {
    allow: Vec<regex::Regex>,
    deny: Vec<regex::Regex>,
    /// A pattern of either list did not compile: nothing is admitted.
    broken: bool,
}

impl IdentityPolicy {
    /// The policy of `allow` and `deny` (RE2 patterns, `/re/` slashes stripped
    /// already); `None` when both are empty (every valid identity is admitted).
    /// Patterns were checked when the configuration was loaded; should one not
    /// compile here all the same, in either list, the policy fails closed: it
    /// admits nothing (an allow list that lost a pattern would refuse some honest
    /// nodes, a deny list that lost one would let its nodes in).
    pub fn new(allow: &[String], deny: &[String]) -> Option<IdentityPolicy> {
        if allow.is_empty() && deny.is_empty() {
            return None;
        }
        let (allow, deny) = (compile_all(allow), compile_all(deny));
        let broken = allow.is_none() || deny.is_none();
        Some(IdentityPolicy {
            allow: allow.unwrap_or_default(),
            deny: deny.unwrap_or_default(),
            broken,
        })
    }

    /// True when `identity` matches no deny pattern and, if there are allow
    /// patterns, one of them; never when a pattern did not compile.
    pub fn admits(&self, identity: &str) -> bool {
        !self.broken
            && !self.deny.iter().any(|r| r.is_match(identity))
            && (self.allow.is_empty() || self.allow.iter().any(|r| r.is_match(identity)))
    }
}

/// Every pattern compiled, or `None` when one does not compile.
pub(crate) fn compile_all(patterns: &[String]) -> Option<Vec<regex::Regex>> {
    patterns.iter().map(|p| regex::Regex::new(p).ok()).collect()
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

    #[test]
    fn a_pattern_that_does_not_compile_in_either_list_admits_nothing() {
        for p in [
            policy(&["^web", "(unclosed"], &[]),
            policy(&[], &["(unclosed"]),
            policy(&["^web"], &["^ghost-", "a{99999999}"]),
        ] {
            let p = p.unwrap();
            assert!(!p.admits("web1.example.net"));
            assert!(!p.admits("anything.example.net"));
        }
    }
}
