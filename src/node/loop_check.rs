//! A helper configuration that would send the node straight back into provisioning
//! (or leave it unable to join the collective) is called out, once per helper
//! version and missing key, and counted every time. It is not refused: go-choria
//! takes such a configuration, and so do we.
//!
//! What go-choria's server reads (`choria/framework.go` `ProvisionMode`,
//! `provision/restart_action.go`, `config/choria.go`):
//!
//! * `plugin.choria.server.provision`: when absent, a server built for provisioning
//!   falls back to its build default (provisioning on) and comes straight back; when
//!   true, `restart` refuses the configuration ("enables provisioning").
//! * `plugin.choria.middleware_hosts`: without it (and without an explicit
//!   `plugin.choria.srv_domain`) the server looks its brokers up in DNS SRV records
//!   of its own domain, or finds none when `plugin.choria.use_srv` is false.
//! * `identity`: a different name than the node's makes it come back as another
//!   node, whose token no longer matches (go-choria then enables provisioning).
//! * `plugin.security.provider = choria` needs `plugin.security.choria.token_file`
//!   and `plugin.security.choria.seed_file`; `= file` needs
//!   `plugin.security.file.certificate`, `.key` and `.ca`.
//!
//! "Helper version": the path, size and modification time of every file the helper's
//! command line names (the program, and a script given to an interpreter such as
//! `python3 /etc/choria-provisioner/helper.py`), so a fixed helper that is deployed
//! is checked afresh without a restart.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::SystemTime;

use parking_lot::Mutex;

/// The keys a finding can name (the `key` label of the metric), in the order checked.
#[cfg(test)]
pub(crate) const LOOP_KEYS: [&str; 8] = [
    "plugin.choria.server.provision",
    "plugin.choria.middleware_hosts",
    "identity",
    "plugin.security.choria.token_file",
    "plugin.security.choria.seed_file",
    "plugin.security.file.certificate",
    "plugin.security.file.key",
    "plugin.security.file.ca",
];

/// One problem with a helper's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    /// The key (one of [`LOOP_KEYS`]).
    pub key: &'static str,
    /// What is wrong and what the node will do.
    pub why: &'static str,
}

fn lookup<'a>(config: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
    config
        .iter()
        .find(|(k, _)| k.trim().eq_ignore_ascii_case(key))
        .map(|(_, v)| v.trim())
}

/// go-choria's boolean words (`strconv.ParseBool` and the config's `yes`/`on`).
fn truthy(v: &str) -> bool {
    matches!(
        v.to_ascii_lowercase().as_str(),
        "1" | "t" | "true" | "y" | "yes" | "on"
    )
}

/// What in `config` (the helper's `configuration` for `identity`) will bring the
/// node back into provisioning or leave it without a broker.
pub(crate) fn findings(config: &BTreeMap<String, String>, identity: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    let has = |k: &str| lookup(config, k).is_some_and(|v| !v.is_empty());
    match lookup(config, "plugin.choria.server.provision") {
        None | Some("") => out.push(Finding {
            key: "plugin.choria.server.provision",
            why: "is not set to false: a server built for provisioning falls back to provisioning mode and comes straight back",
        }),
        Some(v) if truthy(v) => out.push(Finding {
            key: "plugin.choria.server.provision",
            why: "is true: the node refuses to restart with a configuration that enables provisioning",
        }),
        Some(_) => {}
    }
    let srv_off = lookup(config, "plugin.choria.use_srv").is_some_and(|v| !truthy(v));
    if !has("plugin.choria.middleware_hosts") && (srv_off || !has("plugin.choria.srv_domain")) {
        out.push(Finding {
            key: "plugin.choria.middleware_hosts",
            why: "is not set (nor plugin.choria.srv_domain): the node must find its brokers in DNS SRV records of its own domain",
        });
    }
    if let Some(name) = lookup(config, "identity") {
        if !name.is_empty() && name != identity {
            out.push(Finding {
                key: "identity",
                why: "names another node: the server comes back under that name and its token no longer matches",
            });
        }
    }
    let provider = lookup(config, "plugin.security.provider").map(str::to_ascii_lowercase);
    let needs: &[&'static str] = match provider.as_deref() {
        Some("choria") => &[
            "plugin.security.choria.token_file",
            "plugin.security.choria.seed_file",
        ],
        Some("file") => &[
            "plugin.security.file.certificate",
            "plugin.security.file.key",
            "plugin.security.file.ca",
        ],
        _ => &[],
    };
    for key in needs {
        if !has(key) {
            out.push(Finding {
                key,
                why: "is not set but the configured security provider needs it: the node cannot connect",
            });
        }
    }
    out
}

/// The helper's version as this check sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct HelperStamp {
    files: Vec<(PathBuf, u64, Option<SystemTime>)>,
}

impl HelperStamp {
    /// The stamp of one file now (an unreadable file still has its path).
    #[cfg(test)]
    pub(crate) fn of(program: &std::path::Path) -> HelperStamp {
        HelperStamp::of_files([program.to_path_buf()])
    }

    /// The stamp of the helper command line `command`: its program (looked up on
    /// `PATH` as it is run) and every other word that names a file.
    pub(crate) fn of_command(command: &str) -> HelperStamp {
        let words = crate::config::shell_words::split(command).unwrap_or_default();
        let mut files = Vec::new();
        for (n, word) in words.iter().enumerate() {
            if n == 0 {
                files.push(
                    crate::config::shell_words::find_program(word).unwrap_or_else(|_| word.into()),
                );
            } else if std::path::Path::new(word).is_file() {
                files.push(word.into());
            }
        }
        HelperStamp::of_files(files)
    }

    fn of_files(paths: impl IntoIterator<Item = PathBuf>) -> HelperStamp {
        HelperStamp {
            files: paths
                .into_iter()
                .map(|path| {
                    let meta = std::fs::metadata(&path).ok();
                    let size = meta.as_ref().map_or(0, |m| m.len());
                    (path, size, meta.and_then(|m| m.modified().ok()))
                })
                .collect(),
        }
    }
}

/// Most (helper version, key) pairs remembered; beyond it the memory restarts (and
/// each warning may be given once more).
const REMEMBERED: usize = 1024;

/// Which warnings were given.
#[derive(Debug, Default)]
pub(crate) struct LoopWarnings {
    given: Mutex<HashSet<(HelperStamp, &'static str)>>,
}

impl LoopWarnings {
    /// True the first time `key` is found for this helper version.
    pub(crate) fn first(&self, stamp: &HelperStamp, key: &'static str) -> bool {
        let mut given = self.given.lock();
        if given.len() >= REMEMBERED {
            given.clear();
        }
        given.insert((stamp.clone(), key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn keys(c: &BTreeMap<String, String>) -> Vec<&'static str> {
        findings(c, "n1.example.net")
            .iter()
            .map(|f| f.key)
            .collect()
    }

    #[test]
    fn a_complete_configuration_has_no_findings() {
        let c = cfg(&[
            ("identity", "n1.example.net"),
            ("plugin.choria.server.provision", "false"),
            ("plugin.choria.middleware_hosts", "nats://b1:4222"),
            ("plugin.security.provider", "file"),
            ("plugin.security.file.certificate", "/e/c.pem"),
            ("plugin.security.file.key", "/e/k.pem"),
            ("plugin.security.file.ca", "/e/ca.pem"),
        ]);
        assert!(keys(&c).is_empty(), "{:?}", findings(&c, "n1.example.net"));
        let srv = cfg(&[
            ("plugin.choria.server.provision", "no"),
            ("plugin.choria.srv_domain", "example.net"),
        ]);
        assert!(keys(&srv).is_empty());
    }

    #[test]
    fn each_missing_or_wrong_key_is_named() {
        assert_eq!(
            keys(&cfg(&[("identity", "n1.example.net")])),
            [
                "plugin.choria.server.provision",
                "plugin.choria.middleware_hosts"
            ]
        );
        assert_eq!(
            keys(&cfg(&[
                ("Plugin.Choria.Server.Provision", "TRUE"),
                ("plugin.choria.middleware_hosts", "b1:4222"),
                ("identity", "other.example.net"),
                ("plugin.security.provider", "choria"),
                ("plugin.security.choria.seed_file", "/e/seed"),
            ])),
            [
                "plugin.choria.server.provision",
                "identity",
                "plugin.security.choria.token_file"
            ]
        );
        assert_eq!(
            keys(&cfg(&[
                ("plugin.choria.server.provision", "false"),
                ("plugin.choria.srv_domain", "example.net"),
                ("plugin.choria.use_srv", "false"),
            ])),
            ["plugin.choria.middleware_hosts"],
            "SRV off and no hosts: no broker at all"
        );
        for f in findings(&BTreeMap::new(), "n1") {
            assert!(LOOP_KEYS.contains(&f.key));
        }
    }

    #[test]
    fn warned_once_per_helper_version_and_key() {
        let dir = std::env::temp_dir().join(format!("choria-prov-loop-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let helper = dir.join("h.sh");
        std::fs::write(&helper, "#!/bin/sh\n").unwrap();
        let w = LoopWarnings::default();
        let v1 = HelperStamp::of(&helper);
        assert!(w.first(&v1, "identity"));
        assert!(!w.first(&v1, "identity"));
        assert!(w.first(&v1, "plugin.choria.server.provision"));
        std::fs::write(&helper, "#!/bin/sh\necho fixed\n").unwrap();
        let v2 = HelperStamp::of(&helper);
        assert_ne!(v1, v2, "a new helper is a new version");
        assert!(w.first(&v2, "identity"));
        // A script run by an interpreter: the script is the version.
        let script = dir.join("h.py");
        std::fs::write(&script, "print('{}')\n").unwrap();
        let command = format!("sh {}", script.display());
        let s1 = HelperStamp::of_command(&command);
        assert_eq!(s1, HelperStamp::of_command(&command));
        std::fs::write(&script, "print('{\"configuration\": {}}')\n").unwrap();
        assert_ne!(s1, HelperStamp::of_command(&command), "the script changed");
        let _ = std::fs::remove_dir_all(dir);
    }
}
