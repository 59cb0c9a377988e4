//! Loading everything `run` needs and reporting every problem at once; shared by
//! `run` and `check` so that `check` passing means `run` will start.

use std::path::{Path, PathBuf};

use crate::choria::client_config::{self, ClientConfig};
use crate::choria::client_jwt::{self, ClientJwt};
use crate::config::{Config, ConfigError};

use super::args::Invocation;

/// Configuration that passed every check.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The provisioner YAML.
    pub config: Config,
    /// The Choria client configuration, with the provisioner's overrides applied.
    pub client: ClientConfig,
    /// The `choria` provider's client JWT, read and checked (`None` with another
    /// provider or `choria_insecure`).
    pub client_jwt: Option<ClientJwt>,
    /// Things worth a look that do not stop the daemon.
    pub warnings: Vec<String>,
}

/// Why preparation failed: the error lines to print, Go-style.
#[derive(Debug)]
pub(crate) struct PrepareError {
    /// Each a complete message after `choria-provisioner: error: `.
    pub lines: Vec<String>,
    /// The problem was with the command line itself: print the usage too.
    pub usage: bool,
}

fn usage_error(message: String) -> PrepareError {
    PrepareError {
        lines: vec![message],
        usage: true,
    }
}

fn existing_file(flag: &str, value: Option<&str>) -> Result<PathBuf, PrepareError> {
    let value = value.ok_or_else(|| usage_error(format!("required flag --{flag} not provided")))?;
    let path = Path::new(value);
    if !path.exists() {
        return Err(usage_error(format!("path '{value}' does not exist")));
    }
    Ok(path.to_path_buf())
}

/// Loads and checks the provisioner YAML and the Choria client configuration.
pub(crate) fn prepare(inv: &Invocation) -> Result<Prepared, PrepareError> {
    let config_path = existing_file("config", inv.config.as_deref())?;
    let choria_path = match inv.choria_config.as_deref() {
        Some(p) => existing_file("choria-config", Some(p))?,
        None => {
            let p = client_config::default_path();
            if !p.exists() {
                return Err(usage_error(format!(
                    "path '{}' does not exist (no --choria-config given and none of the default locations exist)",
                    p.display()
                )));
            }
            p
        }
    };
    let mut lines = Vec::new();
    let mut warnings = Vec::new();
    let config = match Config::load(&config_path) {
        Ok(loaded) => {
            warnings.extend(
                loaded
                    .warnings
                    .iter()
                    .map(|w| format!("{}: {w}", config_path.display())),
            );
            Some(loaded.config)
        }
        Err(e) => {
            lines.push(format!("Provisioning could not be configured: {e}"));
            None
        }
    };
    let mut client_jwt = None;
    let client = match ClientConfig::load(&choria_path) {
        Ok(mut client) => {
            warnings.extend(
                client
                    .warnings
                    .iter()
                    .map(|w| format!("{}: {w}", choria_path.display())),
            );
            if let Some(config) = &config {
                crate::cli::apply_provisioner_overrides(&mut client, config);
                let mut problems = client.validate();
                // The client JWT as a Choria broker will judge it, when the files
                // could be read at all.
                if problems.is_empty() {
                    let now = crate::clock::unix_now() as i64;
                    if let Some(checked) = client_jwt::check(&client, config.leader_election, now) {
                        problems.extend(checked.errors);
                        warnings.extend(
                            checked
                                .warnings
                                .iter()
                                .map(|w| format!("{}: {w}", choria_path.display())),
                        );
                        client_jwt = checked.jwt;
                    }
                }
                if !problems.is_empty() {
                    lines.push(format!(
                        "Provisioning could not configure Choria: {}",
                        ConfigError {
                            file: choria_path.clone(),
                            problems,
                        }
                    ));
                }
            }
            Some(client)
        }
        Err(e) => {
            lines.push(format!("Could not load Choria Configuration: {e}"));
            None
        }
    };
    // The keys the features need are loaded here too, so `check` refuses what `run`
    // would refuse.
    if let Some(config) = &config {
        if lines.is_empty() {
            match crate::node::key_material::KeyMaterial::load(config) {
                Ok(keys) => {
                    if let Some(exp) = keys.signing_token_expiry() {
                        warnings.extend(signing_token_warning(
                            &config.jwt_signing_token,
                            exp,
                            crate::clock::unix_seconds(),
                        ));
                    }
                }
                Err(e) => lines.push(format!("Provisioning could not be configured: {e}")),
            }
        }
    }
    match (config, client) {
        (Some(config), Some(client)) if lines.is_empty() => Ok(Prepared {
            config,
            client,
            client_jwt,
            warnings,
        }),
        _ => Err(PrepareError {
            lines,
            usage: false,
        }),
    }
}

/// How long before `jwt_signing_token` expires `check` and `run` start warning.
const SIGNING_TOKEN_WARNING_DAYS: i64 = 30;

/// A warning when the signing token at `path`, expiring at `exp`, has less than
/// [`SIGNING_TOKEN_WARNING_DAYS`] left at `now` (or has expired).
fn signing_token_warning(path: &str, exp: i64, now: i64) -> Option<String> {
    let left = exp - now;
    let when = crate::clock::rfc3339(exp as f64);
    if left <= 0 {
        Some(format!(
            "jwt_signing_token {path} expired at {when}: no server JWT is signed until it \
             is replaced (then send SIGHUP)"
        ))
    } else if left < SIGNING_TOKEN_WARNING_DAYS * 86_400 {
        Some(format!(
            "jwt_signing_token {path} expires at {when}, in {} days: no server JWT is \
             signed past it; replace it (then send SIGHUP)",
            left / 86_400
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod signing_token_tests {
    use super::signing_token_warning;

    #[test]
    fn a_signing_token_warns_under_30_days_and_once_expired() {
        let day = 86_400;
        assert_eq!(
            signing_token_warning("t.jwt", 1_000 + 31 * day, 1_000),
            None
        );
        assert_eq!(
            signing_token_warning("t.jwt", 1_000 + 30 * day, 1_000),
            None
        );
        let soon = signing_token_warning("t.jwt", 1_000 + 29 * day + 5, 1_000).unwrap();
        assert!(
            soon.starts_with("jwt_signing_token t.jwt expires at ")
                && soon.contains(", in 29 days: "),
            "{soon}"
        );
        let gone = signing_token_warning("t.jwt", 1_000, 1_000).unwrap();
        assert!(
            gone.starts_with("jwt_signing_token t.jwt expired at "),
            "{gone}"
        );
    }
}
