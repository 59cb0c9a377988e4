//! Decisions by pattern (`approve --match`, `deny --match`, `forget --match`): which
//! identities a regular expression selects among those a decision acts on, as of
//! the moment the operator counted them, so that `--yes` decides exactly those.

use serde::{Deserialize, Serialize};

use super::{Decided, Decider};
use crate::choria::identity::Identity;
use crate::choria::peers::{ApprovalRecord, Decision};
use crate::fleet::control::Operator;

/// The longest pattern taken.
pub(crate) const MAX_PATTERN: usize = 1024;

/// The most names a count shows.
pub(crate) const SHOWN: usize = 10;

/// The decision a pattern is for; it says which identities it may select.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MatchAction {
    /// The pending ones.
    Approve,
    /// The pending and the approved ones.
    Deny,
    /// Every one with a record: pending, approved or denied.
    Forget,
}

impl MatchAction {
    /// The decision it takes.
    pub(crate) fn decision(self) -> Decision {
        match self {
            MatchAction::Approve => Decision::Approved,
            MatchAction::Deny => Decision::Denied,
            MatchAction::Forget => Decision::Forgotten,
        }
    }

    /// What it acts on, for the operator.
    pub(crate) fn among(self) -> &'static str {
        match self {
            MatchAction::Approve => "pending",
            MatchAction::Deny => "pending or approved",
            MatchAction::Forget => "pending, approved or denied",
        }
    }

    /// True when `record` is one it acts on and was in that state at `as_of`
    /// (Unix nanoseconds): held by then if pending, decided by then otherwise.
    pub(crate) fn selects(self, record: &ApprovalRecord, as_of: u64) -> bool {
        let standing = record.standing();
        let acted_on = match self {
            MatchAction::Approve => standing == Decision::Pending,
            MatchAction::Deny => matches!(standing, Decision::Pending | Decision::Approved),
            MatchAction::Forget => standing != Decision::Forgotten,
        };
        let since = if standing == Decision::Pending {
            record.held_at
        } else {
            record.at
        };
        acted_on && since <= as_of
    }
}

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PatternError {
    /// Empty, or longer than [`MAX_PATTERN`].
    #[error("the pattern must be 1 to {MAX_PATTERN} characters")]
    Length,
    /// Not an RE2 regular expression (or one too large to run).
    #[error("the pattern is not a regular expression: {0}")]
    Syntax(String),
}

/// `pattern` (RE2 syntax, `/re/` slashes stripped, as `identity_allow`) compiled.
pub(crate) fn compile(pattern: &str) -> Result<regex::Regex, PatternError> {
    let chars = pattern.chars().count();
    if chars == 0 || chars > MAX_PATTERN {
        return Err(PatternError::Length);
    }
    let bare = crate::config::strip_slashes(pattern);
    regex::RegexBuilder::new(bare)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| {
            PatternError::Syntax(
                e.to_string()
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .trim()
                    .chars()
                    .take(200)
                    .collect(),
            )
        })
}

/// The identities of `records` that `action` selects as of `as_of` and `pattern`
/// matches, sorted.
pub(crate) fn select<'a>(
    records: impl Iterator<Item = &'a ApprovalRecord>,
    action: MatchAction,
    pattern: &regex::Regex,
    as_of: u64,
) -> Vec<Identity> {
    let mut chosen: Vec<Identity> = records
        .filter(|r| action.selects(r, as_of) && pattern.is_match(r.identity.as_str()))
        .map(|r| r.identity.clone())
        .collect();
    chosen.sort_unstable();
    chosen
}

impl super::Approvals {
    /// How many identities `pattern` selects among those `action` acts on now, the
    /// first [`SHOWN`] of them (sorted), and the time of the count (Unix
    /// nanoseconds) to decide them by.
    pub(crate) fn count_matching(
        &self,
        action: MatchAction,
        pattern: &regex::Regex,
    ) -> (usize, Vec<Identity>, u64) {
        let as_of = u64::try_from(crate::clock::unix_nanos()).unwrap_or(0);
        let mut chosen = select(self.table.lock().records(), action, pattern, as_of);
        let count = chosen.len();
        chosen.truncate(SHOWN);
        (count, chosen, as_of)
    }

    /// Takes `action`'s decision for the identities `pattern` (its text `text`)
    /// selected as of `as_of`: the ones counted, none that came or changed since.
    pub(crate) fn decide_matching(
        &self,
        action: MatchAction,
        text: &str,
        pattern: &regex::Regex,
        as_of: u64,
        reason: &str,
        by: &Operator,
    ) -> Decided {
        let chosen = select(self.table.lock().records(), action, pattern, as_of);
        let reason = if action == MatchAction::Deny {
            reason
        } else {
            ""
        };
        self.decide(
            &chosen,
            action.decision(),
            reason,
            Decider::Operator(by),
            Some(text),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, decision: Decision, since: u64) -> ApprovalRecord {
        let mut r = ApprovalRecord::held(Identity::parse(id).unwrap(), since);
        if decision != Decision::Pending {
            (r.decision, r.clock, r.at) = (decision, 1, since);
        }
        if decision == Decision::Forgotten {
            // Not held since it was forgotten (a hold would make it pending).
            (r.held_at, r.first_seen, r.last_seen) = (0, 0, 0);
        }
        r
    }

    #[test]
    fn each_action_selects_its_states_as_of_the_count() {
        let records = [
            record("ghost-1", Decision::Pending, 10),
            record("ghost-2", Decision::Approved, 10),
            record("ghost-3", Decision::Denied, 10),
            record("ghost-4", Decision::Forgotten, 10),
            record("ghost-5", Decision::Pending, 30),
            record("web-1", Decision::Pending, 10),
        ];
        let ghost = compile("/^ghost-/").unwrap();
        let names = |action| -> Vec<String> {
            select(records.iter(), action, &ghost, 20)
                .iter()
                .map(|i| i.to_string())
                .collect()
        };
        assert_eq!(names(MatchAction::Approve), ["ghost-1"]);
        assert_eq!(names(MatchAction::Deny), ["ghost-1", "ghost-2"]);
        assert_eq!(
            names(MatchAction::Forget),
            ["ghost-1", "ghost-2", "ghost-3"]
        );
        // Held after the count: not among those counted.
        assert_eq!(
            select(records.iter(), MatchAction::Approve, &ghost, 30).len(),
            2
        );
    }

    #[test]
    fn bad_patterns_are_refused_with_why() {
        assert_eq!(compile("").unwrap_err(), PatternError::Length);
        assert_eq!(
            compile(&"a".repeat(MAX_PATTERN + 1)).unwrap_err(),
            PatternError::Length
        );
        assert!(matches!(compile("[z-a]"), Err(PatternError::Syntax(_))));
        assert!(
            compile("/^ghost-/").unwrap().is_match("ghost-1"),
            "slashes stripped"
        );
        assert!(matches!(
            compile("a{100000}{100000}"),
            Err(PatternError::Syntax(_))
        ));
    }
}
