//! What can be wrong with a configuration file, said so an operator can fix it.

use std::fmt;
use std::path::{Path, PathBuf};

/// One problem (or warning) found in a configuration file: which key, which value,
/// and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key as the operator should write it (`features.pki`, `interval`), or
    /// `(file)` for problems with the file as a whole.
    pub key: String,
    /// The offending value as written, when showing it is safe and useful.
    pub value: Option<String>,
    /// What is wrong, and where possible what to do about it.
    pub message: String,
}

impl Problem {
    /// A problem with `key` that does not quote the value (secrets, long values).
    pub(crate) fn new(key: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem {
            key: key.into(),
            value: None,
            message: message.into(),
        }
    }

    /// A problem with `key` whose value `value` is shown in the message.
    pub(crate) fn with_value(
        key: impl Into<String>,
        value: impl Into<String>,
        message: impl Into<String>,
    ) -> Problem {
        Problem {
            key: key.into(),
            value: Some(value.into()),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(value) => write!(
                f,
                "{}: {}: {}",
                self.key,
                crate::untrusted::quoted(value),
                self.message
            ),
            None => write!(f, "{}: {}", self.key, self.message),
        }
    }
}

/// A configuration file that cannot be used, with every problem found in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file that was read.
    pub file: PathBuf,
    /// Every problem, in the order of the key table.
    pub problems: Vec<Problem>,
}

impl ConfigError {
    /// An error with a single problem.
    pub(crate) fn single(file: &Path, problem: Problem) -> ConfigError {
        ConfigError {
            file: file.to_path_buf(),
            problems: vec![problem],
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.problems.as_slice() {
            [one] => write!(f, "{}: {}", self.file.display(), one),
            many => {
                write!(f, "{} problems in {}:", many.len(), self.file.display())?;
                for problem in many {
                    write!(f, "\n  - {problem}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// The closest of `candidates` to `word`, when it is close enough to be a likely
/// typo (`upgrade_repository` → `upgrades_repository`).
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(2);
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_closest_key() {
        let keys = ["upgrades_repository", "upgrades_optional", "interval"];
        assert_eq!(
            closest("upgrade_repository", keys),
            Some("upgrades_repository")
        );
        assert_eq!(closest("intervall", keys), Some("interval"));
        assert_eq!(closest("colour", keys), None);
    }

    #[test]
    fn error_lists_every_problem() {
        let err = ConfigError {
            file: "/etc/p.yaml".into(),
            problems: vec![
                Problem::with_value("interval", "30s", "too small"),
                Problem::new("helper", "is required"),
            ],
        };
        let text = err.to_string();
        assert!(text.starts_with("2 problems in /etc/p.yaml:"), "{text}");
        assert!(
            text.contains("\n  - interval: \"30s\": too small"),
            "{text}"
        );
        assert!(text.contains("\n  - helper: is required"), "{text}");
    }
}
