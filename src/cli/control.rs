//! `choria-provisioner pause` and `resume`: an operator's requests to the running
//! daemon, sent through its `control_socket` (see `fleet/control.rs`).

use super::args::Invocation;
use super::fail;
use crate::fleet::control::{ControlRequest, Response};
use crate::fleet::control_socket::send;
use crate::untrusted::shown;

/// Runs `pause`; returns the exit code.
pub(super) fn pause(inv: &Invocation) -> i32 {
    ask(
        inv,
        &ControlRequest::Pause {
            reason: inv.reason.clone().unwrap_or_default(),
        },
    )
}

/// Runs `resume`; returns the exit code.
pub(super) fn resume(inv: &Invocation) -> i32 {
    ask(inv, &ControlRequest::Resume)
}

fn ask(inv: &Invocation, request: &ControlRequest) -> i32 {
    let Some(file) = inv.config.as_deref() else {
        return fail("give the provisioner's --config (it names the control_socket)");
    };
    let loaded = match crate::config::Config::load(std::path::Path::new(file)) {
        Ok(l) => l,
        Err(e) => return fail(format!("Provisioning could not be configured: {e}")),
    };
    let Some(path) = loaded.config.control_socket else {
        return fail(format!(
            "{file} sets no control_socket: the provisioner takes no pause or resume"
        ));
    };
    match send(&path, request) {
        Ok(answer) if answer.ok => {
            println!("{}", describe(&answer));
            0
        }
        Ok(answer) => fail(shown(answer.error.as_deref().unwrap_or("refused"))),
        Err(e) => fail(e),
    }
}

/// What the daemon said, for a terminal.
fn describe(answer: &Response) -> String {
    let state = match (&answer.operator_pause, answer.paused) {
        (Some(p), _) if p.reason.is_empty() => "paused by an operator".to_string(),
        (Some(p), _) => format!("paused by an operator: {}", shown(&p.reason)),
        (None, true) => "paused by the election".to_string(),
        (None, false) => "provisioning".to_string(),
    };
    if answer.message.is_empty() {
        state
    } else {
        format!("{} (now {state})", shown(&answer.message))
    }
}
