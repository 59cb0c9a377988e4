//! A string that must never reach a log line, a metric or `check` output.

use std::fmt;

/// A secret value (token, password). `Debug` and `Display` print `***` when set.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub(crate) fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the one place that sends it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// True when no value was configured.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("")
        } else {
            f.write_str("***")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_the_value() {
        let s = Secret::new("s3cret");
        assert_eq!(format!("{s} {s:?}"), "*** ***");
        assert_eq!(s.expose(), "s3cret");
        assert_eq!(Secret::default().to_string(), "");
    }

    #[test]
    fn the_configuration_s_debug_shows_neither_token_nor_password() {
        let mut config = crate::config::Config::defaults(std::path::Path::new("p.yaml"));
        config.token = Secret::new("tok-3f9a");
        config.broker_provisioning_password = Secret::new("pw-4242");
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("tok-3f9a") && !shown.contains("pw-4242"),
            "{shown}"
        );
        assert!(shown.contains("token: ***"), "{shown}");
        assert!(
            shown.contains("broker_provisioning_password: ***"),
            "{shown}"
        );
    }
}
