//! Process start-up: the command line, loading and checking configuration, the pid
//! file and signals. Everything here runs before (or around) the daemon proper.

pub(crate) mod args;
mod check;
mod control;
mod nodes;
mod overrides;
mod pidfile;
mod prepare;
mod run;
mod signals;

pub use overrides::apply_provisioner_overrides;
pub(crate) use pidfile::PidFile;
pub(crate) use prepare::prepare;

use crate::fleet::approvals::MatchAction;
use args::Action;

/// The program name used in error lines.
pub(crate) const PROGRAM: &str = "choria-provisioner";

/// Runs the command line and returns the process exit code.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let inv = match args::parse(PROGRAM, &args) {
        Ok(inv) => inv,
        Err(early) => {
            return match early.status {
                Ok(()) => {
                    println!("{}", early.output);
                    0
                }
                Err(()) => {
                    eprintln!("{PROGRAM}: error: {}", early.output.trim_end());
                    eprintln!("{}", usage());
                    1
                }
            };
        }
    };
    match &inv.action {
        Action::Version => {
            println!("{}", crate::VERSION);
            0
        }
        Action::Check => check::check(&inv),
        Action::Run { pid } => run::run(&inv, pid.as_deref()),
        Action::Nodes(args) => nodes::nodes(&inv, args),
        Action::Pause { reason } => control::pause(&inv, reason.as_deref()),
        Action::Resume => control::resume(&inv),
        Action::Pending { json } => control::pending(&inv, *json),
        Action::Approve {
            identities,
            pattern: Some(pattern),
            all,
            yes,
        } => control::by_pattern(
            &inv,
            MatchAction::Approve,
            pattern,
            identities,
            *all,
            *yes,
            None,
        ),
        Action::Approve {
            identities,
            all,
            yes,
            ..
        } => control::approve(&inv, identities, *all, *yes),
        Action::Deny {
            identities,
            reason,
            pattern: Some(pattern),
            yes,
        } => control::by_pattern(
            &inv,
            MatchAction::Deny,
            pattern,
            identities,
            false,
            *yes,
            reason.as_deref(),
        ),
        Action::Deny {
            identities, reason, ..
        } => control::deny(&inv, identities, reason.as_deref()),
        Action::Forget {
            identities,
            pattern: Some(pattern),
            yes,
        } => control::by_pattern(
            &inv,
            MatchAction::Forget,
            pattern,
            identities,
            false,
            *yes,
            None,
        ),
        Action::Forget { identities, .. } => control::forget(&inv, identities),
    }
}

/// The usage text argh prints for `--help`.
pub(crate) fn usage() -> String {
    args::TopLevel::from_args_help().unwrap_or_default()
}

impl args::TopLevel {
    fn from_args_help() -> Option<String> {
        use argh::FromArgs;
        args::TopLevel::from_args(&[PROGRAM], &["--help"])
            .err()
            .map(|e| e.output)
    }
}

/// Prints `choria-provisioner: error: <message>` to standard error and returns 1.
pub(crate) fn fail(message: impl std::fmt::Display) -> i32 {
    eprintln!("{PROGRAM}: error: {message}");
    1
}
