//! POSIX-shell-style splitting of the `helper` command line (Go uses
//! `github.com/google/shlex`-like rules since provisioner #214).
//!
//! Single quotes keep everything literally, double quotes allow `\"`, `\\`, `\$` and
//! `` \` `` escapes, a backslash outside quotes escapes the next character, and
//! unquoted whitespace separates words. No variables, globs, pipes or redirections:
//! the words are handed to `execve` as they are.

/// Why a command line could not be split.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SplitError {
    /// A `'` or `"` was opened and never closed.
    #[error("unterminated {0} quote")]
    UnterminatedQuote(char),
    /// The line ends with a lone backslash.
    #[error("trailing backslash")]
    TrailingBackslash,
    /// Nothing but whitespace.
    #[error("empty")]
    Empty,
}

/// Splits `line` into words as a POSIX shell would, without any expansion.
pub(crate) fn split(line: &str) -> Result<Vec<String>, SplitError> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => word.push(ch),
                        None => return Err(SplitError::UnterminatedQuote('\'')),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(ch @ ('"' | '\\' | '$' | '`')) => word.push(ch),
                            Some('\n') => {}
                            Some(ch) => {
                                word.push('\\');
                                word.push(ch);
                            }
                            None => return Err(SplitError::UnterminatedQuote('"')),
                        },
                        Some(ch) => word.push(ch),
                        None => return Err(SplitError::UnterminatedQuote('"')),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(ch) => {
                    in_word = true;
                    word.push(ch);
                }
                None => return Err(SplitError::TrailingBackslash),
            },
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err(SplitError::Empty);
    }
    Ok(words)
}

/// Finds the program a command line's first word names, as `execve` via a shell
/// would: a word with a `/` is a path, anything else is looked up in `PATH`. The
/// program must be a regular file with an execute bit.
pub(crate) fn find_program(word: &str) -> Result<std::path::PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let check = |path: &std::path::Path| -> Result<(), String> {
        let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "does not exist".to_string(),
            _ => format!("cannot be read: {e}"),
        })?;
        if !meta.is_file() {
            return Err("is not a regular file".into());
        }
        if meta.permissions().mode() & 0o111 == 0 {
            return Err("is not executable (chmod +x it)".into());
        }
        Ok(())
    };
    if word.contains('/') {
        let path = std::path::PathBuf::from(word);
        return check(&path).map(|_| path);
    }
    let search = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&search) {
        let candidate = dir.join(word);
        if check(&candidate).is_ok() {
            return Ok(candidate);
        }
    }
    Err("was not found in PATH".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(line: &str) -> Vec<String> {
        split(line).unwrap()
    }

    #[test]
    fn splits_like_a_shell() {
        assert_eq!(s("/usr/bin/helper"), ["/usr/bin/helper"]);
        assert_eq!(s("  helper   --site  x "), ["helper", "--site", "x"]);
        assert_eq!(s("helper 'a b' \"c d\""), ["helper", "a b", "c d"]);
        assert_eq!(
            s(r#"helper "a \"q\" \$x \n""#),
            ["helper", r#"a "q" $x \n"#]
        );
        assert_eq!(s(r"helper a\ b"), ["helper", "a b"]);
        assert_eq!(s("helper ''"), ["helper", ""]);
        assert_eq!(s("helper 'it'\"'\"'s'"), ["helper", "it's"]);
        assert_eq!(s("helper $HOME *"), ["helper", "$HOME", "*"]);
    }

    #[test]
    fn rejects_broken_quoting() {
        assert_eq!(split("helper 'a"), Err(SplitError::UnterminatedQuote('\'')));
        assert_eq!(split("helper \"a"), Err(SplitError::UnterminatedQuote('"')));
        assert_eq!(split("helper a\\"), Err(SplitError::TrailingBackslash));
        assert_eq!(split("   "), Err(SplitError::Empty));
        assert_eq!(split(""), Err(SplitError::Empty));
    }
}
