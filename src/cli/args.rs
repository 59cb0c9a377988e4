//! The command line, exactly the Go provisioner's (`choria-provisioner [--debug]
//! [--version] [run] --config FILE [--choria-config FILE] [--pid FILE]`) plus `check`.
//!
//! argh has neither a default subcommand nor global flags, so the flags are declared
//! on the top level and on each subcommand and merged: `prog --config x`,
//! `prog run --config x` and `prog --config x run` all mean `run`. argh also does not
//! take `--flag=value` (the Go unit file uses `--config=...`), so that form is split
//! before parsing.

use argh::FromArgs;

/// The Choria Provisioning Framework.
#[derive(FromArgs, Debug, Default)]
pub(crate) struct TopLevel {
    /// enable debug logging regardless of the configured loglevel
    #[argh(switch)]
    pub debug: bool,
    /// print the version and exit
    #[argh(switch)]
    pub version: bool,
    /// the provisioner configuration file (required)
    #[argh(option)]
    pub config: Option<String>,
    /// the Choria client configuration file
    #[argh(option)]
    pub choria_config: Option<String>,
    /// write the process id to this file
    #[argh(option)]
    pub pid: Option<String>,
    /// the command (default: run)
    #[argh(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(FromArgs, Debug)]
#[argh(subcommand)]
pub(crate) enum Command {
    /// run the provisioner
    Run(RunArgs),
    /// validate the configuration and print it
    Check(CheckArgs),
    /// show the nodes a running provisioner knows
    Nodes(NodesArgs),
    /// pause a running provisioner until resume
    Pause(PauseArgs),
    /// resume a provisioner an operator paused
    Resume(ResumeArgs),
    /// list the identities waiting for an operator's approval
    Pending(PendingArgs),
    /// approve identities: their helper runs
    Approve(ApproveArgs),
    /// deny identities: refused until forget
    Deny(DenyArgs),
    /// take back any decision on identities: each waits again when seen
    Forget(ForgetArgs),
}

/// Lists the identities waiting for approval (approval: required), longest
/// waiting first, with the facts approval_facts names, through the control_socket.
#[derive(FromArgs, Debug, Default, Clone, PartialEq, Eq)]
#[argh(subcommand, name = "pending")]
pub(crate) struct PendingArgs {
    /// the provisioner configuration file (for its control_socket)
    #[argh(option)]
    pub config: Option<String>,
    /// print JSON lines, one per identity, instead of a table
    #[argh(switch)]
    pub json: bool,
}

/// Approves identities through the control_socket: pending ones are provisioned
/// at once, others when they are next seen. With --all, every identity pending
/// now; with --match, the pending ones a regular expression selects: the count is
/// shown, and nothing is approved without --yes.
#[derive(FromArgs, Debug, Default, Clone, PartialEq, Eq)]
#[argh(subcommand, name = "approve")]
pub(crate) struct ApproveArgs {
    /// the provisioner configuration file (for its control_socket)
    #[argh(option)]
    pub config: Option<String>,
    /// every identity pending now (with --yes)
    #[argh(switch)]
    pub all: bool,
    /// the pending identities this RE2 regular expression matches (with --yes)
    #[argh(option, long = "match")]
    pub pattern: Option<String>,
    /// confirm --all or --match
    #[argh(switch)]
    pub yes: bool,
    /// the identities
    #[argh(positional)]
    pub identities: Vec<String>,
}

/// Denies identities through the control_socket: they are refused at admission
/// until forget. With --match, the pending and approved ones a regular expression
/// selects: the count is shown, and nothing is denied without --yes.
#[derive(FromArgs, Debug, Default, Clone, PartialEq, Eq)]
#[argh(subcommand, name = "deny")]
pub(crate) struct DenyArgs {
    /// the provisioner configuration file (for its control_socket)
    #[argh(option)]
    pub config: Option<String>,
    /// why, kept with the decision and in the audit trail
    #[argh(option)]
    pub reason: Option<String>,
    /// the pending and approved identities this RE2 regular expression matches
    /// (with --yes)
    #[argh(option, long = "match")]
    pub pattern: Option<String>,
    /// confirm --match
    #[argh(switch)]
    pub yes: bool,
    /// the identities
    #[argh(positional)]
    pub identities: Vec<String>,
}

/// Takes back any decision on identities through the control_socket: each waits
/// for a decision again when it is next seen. With --match, those a regular
/// expression selects: the count is shown, and nothing is forgotten without --yes.
#[derive(FromArgs, Debug, Default, Clone, PartialEq, Eq)]
#[argh(subcommand, name = "forget")]
pub(crate) struct ForgetArgs {
    /// the provisioner configuration file (for its control_socket)
    #[argh(option)]
    pub config: Option<String>,
    /// the identities with a record (pending, approved or denied) this RE2
    /// regular expression matches (with --yes)
    #[argh(option, long = "match")]
    pub pattern: Option<String>,
    /// confirm --match
    #[argh(switch)]
    pub yes: bool,
    /// the identities
    #[argh(positional)]
    pub identities: Vec<String>,
}

/// Pauses a running provisioner through its control_socket: no discovery, no RPC,
/// no helper run until `resume`; the election and active-active keep working. The
/// pause holds across restarts when pause_file is set.
#[derive(FromArgs, Debug, Default)]
#[argh(subcommand, name = "pause")]
pub(crate) struct PauseArgs {
    /// the provisioner configuration file (for its control_socket)
    #[argh(option)]
    pub config: Option<String>,
    /// why, shown in /healthz, /readyz, nodes and the log
    #[argh(option)]
    pub reason: Option<String>,
}

/// Ends an operator's pause through the control_socket and starts a discovery at once.
#[derive(FromArgs, Debug, Default)]
#[argh(subcommand, name = "resume")]
pub(crate) struct ResumeArgs {
    /// the provisioner configuration file (for its control_socket)
    #[argh(option)]
    pub config: Option<String>,
}

/// Runs the provisioner (the default command).
#[derive(FromArgs, Debug, Default)]
#[argh(subcommand, name = "run")]
pub(crate) struct RunArgs {
    /// enable debug logging regardless of the configured loglevel
    #[argh(switch)]
    pub debug: bool,
    /// the provisioner configuration file (required)
    #[argh(option)]
    pub config: Option<String>,
    /// the Choria client configuration file
    #[argh(option)]
    pub choria_config: Option<String>,
    /// write the process id to this file
    #[argh(option)]
    pub pid: Option<String>,
}

/// Loads and validates everything `run` would, prints the effective configuration
/// with secrets as `***`, and exits 0 when it is sound, 1 otherwise.
#[derive(FromArgs, Debug, Default)]
#[argh(subcommand, name = "check")]
pub(crate) struct CheckArgs {
    /// enable debug logging regardless of the configured loglevel
    #[argh(switch)]
    pub debug: bool,
    /// the provisioner configuration file (required)
    #[argh(option)]
    pub config: Option<String>,
    /// the Choria client configuration file
    #[argh(option)]
    pub choria_config: Option<String>,
}

/// Shows what a running provisioner knows of each node, read from its monitoring
/// port (/nodes): queued, in flight, cooling down, upgrading, and the recent
/// attempts with their outcome and error. With an identity, that node's state and
/// its recent attempts.
#[derive(FromArgs, Debug, Default, Clone, PartialEq, Eq)]
#[argh(subcommand, name = "nodes")]
pub(crate) struct NodesArgs {
    /// the monitoring address, http://host:port (default: from --config's
    /// monitor_host and monitor_port)
    #[argh(option)]
    pub monitor: Option<String>,
    /// only nodes in this state: queued, in_flight, cooling_down, upgrading or
    /// recent
    #[argh(option)]
    pub state: Option<String>,
    /// print the JSON document instead of a table
    #[argh(switch)]
    pub json: bool,
    /// the provisioner configuration file (for its monitoring address)
    #[argh(option)]
    pub config: Option<String>,
    /// show only this node
    #[argh(positional)]
    pub identity: Option<String>,
}

/// What to do, with the top-level and subcommand flags merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invocation {
    /// Which command, with the flags only it takes.
    pub action: Action,
    /// `--debug`.
    pub debug: bool,
    /// `--config`, still to be checked for existence.
    pub config: Option<String>,
    /// `--choria-config`.
    pub choria_config: Option<String>,
}

/// The command chosen, with the flags only it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Print the version.
    Version,
    /// Run the daemon, writing its process id to `pid` (`--pid`) when given.
    Run {
        /// `--pid`.
        pid: Option<String>,
    },
    /// Validate and print the configuration.
    Check,
    /// Show the nodes of a running provisioner.
    Nodes(NodesArgs),
    /// Pause a running provisioner.
    Pause {
        /// `--reason`.
        reason: Option<String>,
    },
    /// Resume a paused provisioner.
    Resume,
    /// List the identities waiting for approval.
    Pending {
        /// `--json`.
        json: bool,
    },
    /// Approve `identities`, or with `all` every pending one.
    Approve {
        /// The identities named.
        identities: Vec<String>,
        /// `--all`.
        all: bool,
        /// `--match`.
        pattern: Option<String>,
        /// `--yes`, which `--all` and `--match` need.
        yes: bool,
    },
    /// Deny identities.
    Deny {
        /// The identities named.
        identities: Vec<String>,
        /// `--reason`.
        reason: Option<String>,
        /// `--match`.
        pattern: Option<String>,
        /// `--yes`, which `--match` needs.
        yes: bool,
    },
    /// Forget the decisions on identities.
    Forget {
        /// The identities named.
        identities: Vec<String>,
        /// `--match`.
        pattern: Option<String>,
        /// `--yes`, which `--match` needs.
        yes: bool,
    },
}

const VALUE_FLAGS: [&str; 7] = [
    "--reason",
    "--match",
    "--config",
    "--choria-config",
    "--pid",
    "--monitor",
    "--state",
];

/// Splits `--config=x` into `--config x` for the flags that take a value.
pub(crate) fn split_equals(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    for arg in args {
        match arg.split_once('=') {
            Some((flag, value)) if VALUE_FLAGS.contains(&flag) => {
                out.push(flag.to_string());
                out.push(value.to_string());
            }
            _ => out.push(arg.clone()),
        }
    }
    out
}

/// Parses the arguments after the program name.
pub(crate) fn parse(program: &str, args: &[String]) -> Result<Invocation, argh::EarlyExit> {
    let args = split_equals(args);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let top = TopLevel::from_args(&[program], &refs)?;
    // Each arm chooses the action and merges the flags every command shares.
    let (mut debug, mut config, mut choria_config) = (top.debug, top.config, top.choria_config);
    let action = match top.command {
        _ if top.version => Action::Version,
        None => Action::Run { pid: top.pid },
        Some(Command::Run(run)) => {
            debug |= run.debug;
            config = run.config.or(config);
            choria_config = run.choria_config.or(choria_config);
            Action::Run {
                pid: run.pid.or(top.pid),
            }
        }
        Some(Command::Check(check)) => {
            debug |= check.debug;
            config = check.config.or(config);
            choria_config = check.choria_config.or(choria_config);
            Action::Check
        }
        Some(Command::Nodes(nodes)) => {
            config = nodes.config.clone().or(config);
            Action::Nodes(nodes)
        }
        Some(Command::Pause(pause)) => {
            config = pause.config.or(config);
            Action::Pause {
                reason: pause.reason,
            }
        }
        Some(Command::Resume(resume)) => {
            config = resume.config.or(config);
            Action::Resume
        }
        Some(Command::Pending(pending)) => {
            config = pending.config.or(config);
            Action::Pending { json: pending.json }
        }
        Some(Command::Approve(approve)) => {
            config = approve.config.or(config);
            Action::Approve {
                identities: approve.identities,
                all: approve.all,
                pattern: approve.pattern,
                yes: approve.yes,
            }
        }
        Some(Command::Deny(deny)) => {
            config = deny.config.or(config);
            Action::Deny {
                identities: deny.identities,
                reason: deny.reason,
                pattern: deny.pattern,
                yes: deny.yes,
            }
        }
        Some(Command::Forget(forget)) => {
            config = forget.config.or(config);
            Action::Forget {
                identities: forget.identities,
                pattern: forget.pattern,
                yes: forget.yes,
            }
        }
    };
    Ok(Invocation {
        action,
        debug,
        config,
        choria_config,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::strings;

    fn p(args: &[&str]) -> Invocation {
        parse("choria-provisioner", &strings(args)).unwrap()
    }

    #[test]
    fn run_is_the_default_in_every_position() {
        for args in [
            &["--config", "x"][..],
            &["run", "--config", "x"],
            &["--config", "x", "run"],
            &["--config=x"],
            &["run", "--config=x"],
        ] {
            let inv = p(args);
            assert_eq!(inv.action, Action::Run { pid: None }, "{args:?}");
            assert_eq!(inv.config.as_deref(), Some("x"), "{args:?}");
        }
    }

    #[test]
    fn flags_merge_from_both_levels() {
        let inv = p(&[
            "--debug",
            "run",
            "--choria-config=c",
            "--pid",
            "p",
            "--config",
            "y",
        ]);
        assert!(inv.debug);
        assert_eq!(inv.choria_config.as_deref(), Some("c"));
        assert_eq!(
            inv.action,
            Action::Run {
                pid: Some("p".into())
            }
        );
        assert_eq!(inv.config.as_deref(), Some("y"));
    }

    #[test]
    fn version_and_check() {
        assert_eq!(p(&["--version"]).action, Action::Version);
        assert_eq!(p(&["check", "--config", "x"]).action, Action::Check);
    }

    #[test]
    fn pause_and_resume_take_the_config_and_a_reason() {
        let inv = p(&["pause", "--config=x", "--reason", "CA outage"]);
        assert_eq!(
            inv.action,
            Action::Pause {
                reason: Some("CA outage".into())
            }
        );
        assert_eq!(inv.config.as_deref(), Some("x"));
        let inv = p(&["--config", "y", "pause"]);
        assert_eq!(
            (inv.action, inv.config.as_deref()),
            (Action::Pause { reason: None }, Some("y"))
        );
        let inv = p(&["resume", "--config", "z"]);
        assert_eq!(
            (inv.action, inv.config.as_deref()),
            (Action::Resume, Some("z"))
        );
    }

    #[test]
    fn the_approval_commands_take_identities_and_their_flags() {
        let inv = p(&[
            "approve",
            "--config",
            "x",
            "n1.example.net",
            "n2.example.net",
        ]);
        let named = strings(&["n1.example.net", "n2.example.net"]);
        assert_eq!(
            inv.action,
            Action::Approve {
                identities: named,
                all: false,
                pattern: None,
                yes: false
            }
        );
        let inv = p(&["approve", "--all", "--yes", "--config=x"]);
        let all = Action::Approve {
            identities: Vec::new(),
            all: true,
            pattern: None,
            yes: true,
        };
        assert_eq!(inv.action, all);
        let inv = p(&["deny", "--reason", "unknown rack", "n3.example.net"]);
        let denied = Action::Deny {
            identities: strings(&["n3.example.net"]),
            reason: Some("unknown rack".into()),
            pattern: None,
            yes: false,
        };
        assert_eq!(inv.action, denied);
        let forgotten = Action::Forget {
            identities: strings(&["n3.example.net"]),
            pattern: None,
            yes: false,
        };
        assert_eq!(p(&["forget", "n3.example.net"]).action, forgotten);
        let by_pattern = |args: &[&str]| p(args).action;
        assert_eq!(
            by_pattern(&["deny", "--match=^ghost-", "--reason", "made up", "--yes"]),
            Action::Deny {
                identities: Vec::new(),
                reason: Some("made up".into()),
                pattern: Some("^ghost-".into()),
                yes: true,
            }
        );
        assert_eq!(
            by_pattern(&["approve", "--match", "^web"]),
            Action::Approve {
                identities: Vec::new(),
                all: false,
                pattern: Some("^web".into()),
                yes: false,
            }
        );
        assert_eq!(
            by_pattern(&["forget", "--match", "x", "--yes"]),
            Action::Forget {
                identities: Vec::new(),
                pattern: Some("x".into()),
                yes: true,
            }
        );
        let inv = p(&["--config", "y", "pending", "--json"]);
        assert_eq!(
            (inv.action, inv.config.as_deref()),
            (Action::Pending { json: true }, Some("y"))
        );
    }

    #[test]
    fn unknown_flags_are_errors() {
        let args = vec!["--bogus".to_string()];
        let err = parse("choria-provisioner", &args).unwrap_err();
        assert!(err.status.is_err());
        assert!(err.output.contains("--bogus"), "{}", err.output);
    }
}
