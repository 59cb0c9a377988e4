//! Small helpers the unit tests of several modules share. Compiled for tests only.

/// Owned copies of `list`, for the APIs that take `&[String]`.
pub(crate) fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}
