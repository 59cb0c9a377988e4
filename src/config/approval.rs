//! `approval`, `approval_identities` and `approval_preapproved`: which identities
//! wait for an operator's decision before their helper runs.

/// `approval_max_pending`'s default.
pub(crate) const DEFAULT_MAX_PENDING: usize = 10_000;

/// The default `approval_pending_expiry`: a week. A node in provisioning mode is
/// seen at every discovery and every restart, so one unseen for a week is gone
/// (scrapped, renamed, or a name that was made up), and the pending list should
/// stop showing it; a week outlasts a long weekend without anyone deciding.
pub(crate) const DEFAULT_PENDING_EXPIRY: std::time::Duration =
    std::time::Duration::from_secs(7 * 86_400);

/// The default `approval_ahead_expiry`: a day (Salt's `autosign_timeout` is two
/// hours). An approval given ahead of time is for a machine being racked and
/// booted that day; one never seen after a day is a typo or a plan that changed,
/// and should not wait to let in whoever takes the name later.
pub(crate) const DEFAULT_AHEAD_EXPIRY: std::time::Duration = std::time::Duration::from_secs(86_400);

/// The most facts `approval_facts` may name.
pub(crate) const MAX_APPROVAL_FACTS: usize = 8;

/// `approval_facts`' default: what facter calls a machine's name, address and OS.
pub(crate) const DEFAULT_APPROVAL_FACTS: [&str; 3] =
    ["networking.fqdn", "networking.ip", "os.name"];

/// The longest fact name.
const MAX_FACT_NAME: usize = 64;

/// True for a dotted fact name: tokens of letters, digits, `_` and `-`.
pub(crate) fn valid_fact_name(name: &str) -> bool {
    name.len() <= MAX_FACT_NAME
        && name.split('.').all(|token| {
            !token.is_empty()
                && token
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
}

/// The compiled approval rules: built once from the configuration, shared
/// read-only.
#[derive(Debug, Clone)]
pub struct ApprovalRules {
    only: Vec<regex::Regex>,
    preapproved: Vec<regex::Regex>,
}

impl ApprovalRules {
    /// The rules of `approval: required` with `only` (`approval_identities`) and
    /// `preapproved` (`approval_preapproved`), `/re/` slashes stripped already.
    /// Patterns were checked when the configuration was loaded; should one not
    /// compile here all the same, the rules fail closed: a pre-approval that does
    /// not compile exempts nobody, and an `approval_identities` list with one that
    /// does not compile holds every identity.
    pub fn new(only: &[String], preapproved: &[String]) -> ApprovalRules {
        let everyone =
            || vec![regex::Regex::new(".*").unwrap_or_else(|_| unreachable!("fixed pattern"))];
        ApprovalRules {
            only: super::identity_policy::compile_all(only).unwrap_or_else(everyone),
            preapproved: preapproved
                .iter()
                .filter_map(|p| regex::Regex::new(p).ok())
                .collect(),
        }
    }

    /// True when `identity` must wait for an operator: it matches no pre-approved
    /// pattern and, when `approval_identities` is set, one of those.
    pub fn needs_approval(&self, identity: &str) -> bool {
        !self.preapproved.iter().any(|r| r.is_match(identity))
            && (self.only.is_empty() || self.only.iter().any(|r| r.is_match(identity)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(only: &[&str], pre: &[&str]) -> ApprovalRules {
        let owned = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        ApprovalRules::new(&owned(only), &owned(pre))
    }

    #[test]
    fn a_pattern_that_does_not_compile_holds_rather_than_exempts() {
        let only = rules(&["^web", "(unclosed"], &[]);
        assert!(
            only.needs_approval("db1.example.net"),
            "held, not let through"
        );
        let pre = rules(&[], &["(unclosed", r"\.lab\.example\.net$"]);
        assert!(pre.needs_approval("x.example.net"));
        assert!(!pre.needs_approval("t1.lab.example.net"));
    }

    #[test]
    fn every_identity_waits_unless_pre_approved_or_outside_the_listed_ones() {
        let all = rules(&[], &[]);
        assert!(all.needs_approval("web1.example.net"));
        let pre = rules(&[], &[r"\.lab\.example\.net$"]);
        assert!(!pre.needs_approval("t1.lab.example.net"));
        assert!(pre.needs_approval("web1.example.net"));
        let only = rules(&[r"\.dmz\.example\.net$"], &[r"^bastion\."]);
        assert!(only.needs_approval("web1.dmz.example.net"));
        assert!(!only.needs_approval("web1.example.net"), "not listed");
        assert!(
            !only.needs_approval("bastion.dmz.example.net"),
            "pre-approved wins"
        );
    }

    #[test]
    fn fact_names_are_dotted_tokens() {
        for good in ["os.name", "networking.ip", "a_b-c.d1"] {
            assert!(valid_fact_name(good), "{good}");
        }
        for bad in ["", "os..name", ".os", "os name", "a\nb", &"x".repeat(65)] {
            assert!(!valid_fact_name(bad), "{bad:?}");
        }
    }
}
