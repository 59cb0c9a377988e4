//! `choria-provisioner pause`, `resume`, `pending`, `approve`, `deny` and `forget`:
//! an operator's requests to the running daemon, sent through its
//! `control_socket` (see `fleet/control.rs`).

use std::path::PathBuf;

use super::args::Invocation;
use super::fail;
use crate::fleet::approvals::{MatchAction, PendingRow, MAX_PAGE};
use crate::fleet::control::{
    ApprovalAnswer, ControlRequest, NotTakenRow, Response, MAX_IDENTITIES,
};
use crate::fleet::control_socket::{send, MAX_REQUEST};
use crate::untrusted::shown;

/// Runs `pause`; returns the exit code.
pub(super) fn pause(inv: &Invocation, reason: Option<&str>) -> i32 {
    ask(
        inv,
        &ControlRequest::Pause {
            reason: reason.unwrap_or_default().to_string(),
        },
    )
}

/// Runs `resume`; returns the exit code.
pub(super) fn resume(inv: &Invocation) -> i32 {
    ask(inv, &ControlRequest::Resume)
}

fn ask(inv: &Invocation, request: &ControlRequest) -> i32 {
    let path = match socket_of(inv) {
        Ok(p) => p,
        Err(code) => return code,
    };
    match exchange(&path, request) {
        Ok(answer) => {
            println!("{}", describe(&answer));
            0
        }
        Err(code) => code,
    }
}

/// The control socket `--config` names, or the exit code of the error printed.
fn socket_of(inv: &Invocation) -> Result<PathBuf, i32> {
    let Some(file) = inv.config.as_deref() else {
        return Err(fail(
            "give the provisioner's --config (it names the control_socket)",
        ));
    };
    let loaded = match crate::config::Config::load(std::path::Path::new(file)) {
        Ok(l) => l,
        Err(e) => return Err(fail(format!("Provisioning could not be configured: {e}"))),
    };
    loaded.config.control_socket.ok_or_else(|| {
        fail(format!(
            "{file} sets no control_socket: the provisioner takes no requests from operators"
        ))
    })
}

/// Sends `request`; a refusal or a failure is printed and its exit code returned.
fn exchange(path: &std::path::Path, request: &ControlRequest) -> Result<Response, i32> {
    match send(path, request) {
        Ok(answer) if answer.ok => Ok(answer),
        Ok(answer) => Err(fail(shown(answer.error.as_deref().unwrap_or("refused")))),
        Err(e) => Err(fail(e)),
    }
}

/// The approval part of an answer (a daemon that answers always gives it).
fn approval_part(answer: Response) -> Result<ApprovalAnswer, i32> {
    answer
        .approvals
        .ok_or_else(|| fail("the provisioner's answer says nothing of approvals"))
}

/// The most pages `pending` follows (a daemon keeps 100,000 pending at most).
const MAX_PAGES: usize = 1_001;

/// Runs `pending`: every page, then one table (or JSON document).
pub(super) fn pending(inv: &Invocation, json: bool) -> i32 {
    let path = match socket_of(inv) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let mut rows: Vec<PendingRow> = Vec::new();
    let mut total = 0;
    for _ in 0..MAX_PAGES {
        let request = ControlRequest::Pending {
            offset: rows.len(),
            limit: MAX_PAGE,
        };
        let page = match exchange(&path, &request).and_then(approval_part) {
            Ok(p) => p,
            Err(code) => return code,
        };
        total = page.total_pending;
        let empty = page.pending.is_empty();
        rows.extend(page.pending);
        if empty || rows.len() >= total {
            break;
        }
    }
    if json {
        println!(
            "{}",
            serde_json::json!({"total_pending": total, "pending": rows})
        );
    } else {
        print!("{}", pending_table(&rows, total));
    }
    0
}

/// The pending identities as a table, longest waiting first.
pub(crate) fn pending_table(rows: &[PendingRow], total: usize) -> String {
    let mut out = format!("{total} identities wait for approval\n");
    if rows.is_empty() {
        return out;
    }
    let time = |t: u64| crate::clock::rfc3339(t as f64);
    let table: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            let facts: Vec<String> = r
                .facts
                .iter()
                .map(|(k, v)| format!("{k}={}", shown(v)))
                .collect();
            [
                shown(&r.identity),
                time(r.first_seen),
                time(r.last_seen),
                if r.expires == 0 {
                    "-".to_string()
                } else {
                    time(r.expires)
                },
                shown(&r.version),
                facts.join(" "),
            ]
        })
        .collect();
    let header = [
        "IDENTITY",
        "FIRST SEEN",
        "LAST SEEN",
        "EXPIRES",
        "VERSION",
        "FACTS",
    ];
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &table {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: &[String]| {
        let mut text = String::new();
        for (n, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if n + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<w$}  "));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&header.map(String::from));
    for row in &table {
        line(row);
    }
    out
}

/// Identities split into requests that each fit the daemon's caps: the control
/// socket's 4 KiB and [`MAX_IDENTITIES`] a request.
fn chunks(identities: &[String]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut bytes = 0;
    for identity in identities {
        // Quotes, a comma, and room for escapes (a bad name is refused by the
        // daemon with its reason, not cut here).
        let size = identity.len() + 8;
        let full = out
            .last()
            .is_none_or(|last| last.len() == MAX_IDENTITIES || bytes + size > MAX_REQUEST - 512);
        if full {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += size;
        if let Some(last) = out.last_mut() {
            last.push(identity.clone());
        }
    }
    out
}

/// `n` identities named, with the first and the last: `3 (a … c)`.
fn named(identities: &[String]) -> String {
    match identities {
        [] => "none".into(),
        [one] => format!("1 ({})", shown(one)),
        [first, .., last] => format!("{} ({} … {})", identities.len(), shown(first), shown(last)),
    }
}

/// Sends one request per chunk of `identities`, made by `make`, and says what
/// changed; exits non-zero when anything was not decided or not written, saying
/// which identities were decided and which were not.
fn decide(
    inv: &Invocation,
    identities: &[String],
    verb: &str,
    make: impl Fn(Vec<String>) -> ControlRequest,
) -> i32 {
    if identities.is_empty() {
        return fail(format!("name the identities to {verb}"));
    }
    let path = match socket_of(inv) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let chunks = chunks(identities);
    let (mut changed, mut pending, mut sent) = (0, 0, 0);
    let mut not_taken = Vec::new();
    let mut not_saved = None;
    for (n, chunk) in chunks.iter().enumerate() {
        let size = chunk.len();
        match exchange(&path, &make(chunk.clone())).and_then(approval_part) {
            Ok(a) => {
                changed += a.changed.len();
                pending = a.total_pending;
                not_taken.extend(a.not_taken);
                not_saved = a.not_saved.or(not_saved);
                sent += size;
            }
            Err(code) => {
                if n > 0 {
                    eprintln!(
                        "{verb}: stopped at request {} of {}: decided {} of the {} named; not decided: {}",
                        n + 1,
                        chunks.len(),
                        named(&identities[..sent]),
                        identities.len(),
                        named(&identities[sent..])
                    );
                }
                return code;
            }
        }
    }
    println!(
        "{verb}: {changed} of {} changed; {pending} identities wait for approval",
        identities.len()
    );
    shortfall(verb, &not_taken, not_saved.as_deref())
}

/// Says which decisions were not taken and whether they were not written; the
/// exit code: 1 if either, 0 if neither.
fn shortfall(verb: &str, not_taken: &[NotTakenRow], not_saved: Option<&str>) -> i32 {
    for row in not_taken {
        eprintln!(
            "{verb}: not taken for {}: {}",
            shown(&row.identity),
            shown(&row.reason)
        );
    }
    if let Some(e) = not_saved {
        eprintln!("{verb}: decided, but {}", shown(e));
    }
    i32::from(!not_taken.is_empty() || not_saved.is_some())
}

/// Runs `approve`; returns the exit code.
pub(super) fn approve(inv: &Invocation, identities: &[String], all: bool, yes: bool) -> i32 {
    if !all {
        return decide(inv, identities, "approve", |identities| {
            ControlRequest::Approve { identities }
        });
    }
    if !identities.is_empty() {
        return fail("approve --all names no identity");
    }
    let path = match socket_of(inv) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let listing = ControlRequest::Pending {
        offset: 0,
        limit: 0,
    };
    let counted = match exchange(&path, &listing).and_then(approval_part) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let when = crate::clock::rfc3339(counted.now as f64 / 1e9);
    if !yes {
        println!(
            "{} identities wait for approval (as of {when}); run approve --all --yes to approve them",
            counted.total_pending
        );
        return 1;
    }
    println!(
        "Approving the {} identities pending as of {when}",
        counted.total_pending
    );
    let request = ControlRequest::ApproveAll { as_of: counted.now };
    match exchange(&path, &request).and_then(approval_part) {
        Ok(a) => {
            println!(
                "approve --all: {} approved; {} identities wait for approval (held since the count)",
                a.changed_count.max(a.changed.len()),
                a.total_pending
            );
            shortfall("approve --all", &a.not_taken, a.not_saved.as_deref())
        }
        Err(code) => code,
    }
}

/// Runs `deny`; returns the exit code.
pub(super) fn deny(inv: &Invocation, identities: &[String], reason: Option<&str>) -> i32 {
    let reason = reason.unwrap_or_default();
    decide(inv, identities, "deny", |identities| ControlRequest::Deny {
        identities,
        reason: reason.to_string(),
    })
}

/// Runs `forget`; returns the exit code.
pub(super) fn forget(inv: &Invocation, identities: &[String]) -> i32 {
    decide(inv, identities, "forget", |identities| {
        ControlRequest::Forget { identities }
    })
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

/// Runs `approve`, `deny` or `forget` with `--match`: counts what the pattern
/// selects (and shows the first few names); with `--yes`, decides exactly those
/// counted. Returns the exit code.
pub(super) fn by_pattern(
    inv: &Invocation,
    action: MatchAction,
    pattern: &str,
    identities: &[String],
    all: bool,
    yes: bool,
    reason: Option<&str>,
) -> i32 {
    let verb = match action {
        MatchAction::Approve => "approve",
        MatchAction::Deny => "deny",
        MatchAction::Forget => "forget",
    };
    if !identities.is_empty() || all {
        return fail(format!(
            "{verb} --match names no identity and takes no --all"
        ));
    }
    let path = match socket_of(inv) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let reason = reason.unwrap_or_default().to_string();
    let count = ControlRequest::Match {
        action,
        pattern: pattern.to_string(),
        as_of: None,
        reason: reason.clone(),
    };
    let matched = match exchange(&path, &count)
        .and_then(approval_part)
        .and_then(|a| {
            a.matched
                .ok_or_else(|| fail("the provisioner's answer counts nothing"))
        }) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let when = crate::clock::rfc3339(matched.as_of as f64 / 1e9);
    let shown_names: Vec<String> = matched.first.iter().map(|n| shown(n).to_string()).collect();
    let more = matched.count.saturating_sub(matched.first.len());
    println!(
        "{} identities {} match {} (as of {when}){}{}",
        matched.count,
        matched.among,
        shown(pattern),
        if shown_names.is_empty() {
            String::new()
        } else {
            format!(": {}", shown_names.join(", "))
        },
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    );
    if !yes {
        println!("Run it again with --yes to {verb} them.");
        return 1;
    }
    let decide = ControlRequest::Match {
        action,
        pattern: pattern.to_string(),
        as_of: Some(matched.as_of),
        reason,
    };
    match exchange(&path, &decide).and_then(approval_part) {
        Ok(a) => {
            println!(
                "{verb} --match: {} of the {} counted changed; {} identities wait for approval",
                a.changed_count, matched.count, a.total_pending
            );
            shortfall(verb, &a.not_taken, a.not_saved.as_deref())
        }
        Err(code) => code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_split_by_the_daemon_s_count_and_byte_caps() {
        let short: Vec<String> = (0..300).map(|n| format!("n{n}")).collect();
        let sizes: Vec<usize> = chunks(&short).iter().map(Vec::len).collect();
        assert_eq!(sizes, [MAX_IDENTITIES, 300 - MAX_IDENTITIES]);
        let long: Vec<String> = (0..40).map(|n| format!("{n}{}", "x".repeat(200))).collect();
        let split = chunks(&long);
        assert!(split.len() > 1);
        for chunk in &split {
            let request = serde_json::to_vec(&ControlRequest::Approve {
                identities: chunk.clone(),
            })
            .unwrap();
            assert!(request.len() < MAX_REQUEST, "{} bytes", request.len());
        }
        assert_eq!(split.concat(), long, "in order, none lost");
        assert_eq!(named(&short[..3]), "3 (n0 … n2)");
    }
}
