//! Approval at a site's scale, against the real binary, a real nats-server and the
//! simulated fleet: decisions by pattern that take exactly what the operator
//! counted, and requests that expire (a pending identity not seen, an approval
//! given ahead of time for a node that did not come).
#![cfg(feature = "sim")]

mod support;

use std::time::Duration;

use support::approval::*;
use support::daemon::{cli, cli_ok};
use support::rig::*;
use support::{free_port, NatsServer, TempDir};

/// The audit trail's approval lines.
fn audited(dir: &TempDir) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.path().join("audit.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "approval")
        .collect()
}

#[test]
fn a_pattern_denies_exactly_the_made_up_names_it_counted_and_none_of_the_honest() {
    let server = NatsServer::start();
    let dir = TempDir::new("approval-match");
    let port = free_port();
    let daemon = spawn(&dir, "p1.test", &server.url(), port, "");
    let ghosts = sim(&server.url(), 1_000, |o| {
        o.prefix = "ghost-".into();
        o.workers = 4;
    });
    let honest = sim(&server.url(), 20, |o| o.prefix = "hon-".into());
    wait_until("1,020 pending", Duration::from_secs(180), || {
        total_pending(&dir) == 1_020
    });

    // Counted, shown, nothing denied without --yes.
    let out = cli(&dir, &["deny", "--match", "^ghost-"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("1000 identities pending or approved match ^ghost-"),
        "{text}"
    );
    assert!(text.contains("ghost-00000.example.net"), "{text}");
    assert!(text.contains("and 990 more"), "{text}");
    assert_eq!(total_pending(&dir), 1_020);

    // A bad pattern is refused with why.
    let bad = cli(&dir, &["deny", "--match", "[z-a", "--yes"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("not a regular expression"),
        "{bad:?}"
    );

    let text = cli_ok(
        &dir,
        &[
            "deny",
            "--match",
            "^ghost-",
            "--reason",
            "made-up names",
            "--yes",
        ],
    );
    assert!(
        text.contains("1000 of the 1000 counted changed; 20 identities wait for approval"),
        "{text}"
    );
    let left = pending_names(&dir);
    assert_eq!(left.len(), 20);
    assert!(left.iter().all(|n| n.starts_with("hon-")), "{left:?}");
    let denials: Vec<_> = audited(&dir)
        .into_iter()
        .filter(|l| l["decision"] == "denied")
        .collect();
    assert_eq!(denials.len(), 1_000, "audited once per identity");
    assert!(denials.iter().all(|l| l["pattern"] == "^ghost-"
        && l["reason"] == "made-up names"
        && l["by"] == "operator"
        && l["identity"].as_str().unwrap().starts_with("ghost-")));
    assert_eq!(
        metric(
            port,
            "choria_provisioner_approval_decisions{by=\"operator\",decision=\"denied\""
        ),
        1_000.0
    );

    // The honest ones, by pattern too.
    cli_ok(&dir, &["approve", "--match", "/^hon-/", "--yes"]);
    wait_provisioned(&honest, 20, Duration::from_secs(60));
    assert_eq!(ghosts.progress().provisioned, 0);
    assert_eq!(helper_runs(&dir), 20);
    // forget --match takes back the denials it selects, and only those.
    let text = cli_ok(&dir, &["forget", "--match", "^ghost-0000", "--yes"]);
    assert!(text.contains("10 of the 10 counted changed"), "{text}");
    stop(daemon);
    ghosts.stop();
    honest.stop();
}

#[test]
fn stale_requests_expire_and_an_approval_given_ahead_of_time_expires_unless_its_node_came() {
    let server = NatsServer::start();
    let dir = TempDir::new("approval-expiry");
    let port = free_port();
    let daemon = spawn(
        &dir,
        "p1.test",
        &server.url(),
        port,
        // The ahead-of-time expiry is longer than a node takes to answer its
        // inventory, or a slow machine could expire the approval of the node that
        // comes at once (expiries are looked for every 10 s).
        "approval_pending_expiry: 3s\napproval_ahead_expiry: 8s\n",
    );
    // Two nodes wait, then go away: forgotten once not seen for 3 s.
    let gone = sim(&server.url(), 2, |o| o.prefix = "gone-".into());
    wait_until("2 pending", Duration::from_secs(60), || {
        total_pending(&dir) == 2
    });
    let listed = pending(&dir);
    let row = &listed["pending"][0];
    assert_eq!(
        row["expires"].as_u64().unwrap(),
        row["last_seen"].as_u64().unwrap() + 3,
        "pending says when each expires: {row}"
    );
    gone.stop();
    // One approval ahead of time for a node that never comes, one for a node
    // that comes at once.
    cli_ok(
        &dir,
        &[
            "approve",
            "late-00000.example.net",
            "came-00000.example.net",
        ],
    );
    let came = sim(&server.url(), 1, |o| o.prefix = "came-".into());
    wait_provisioned(&came, 1, Duration::from_secs(30));
    wait_until("both pending forgotten", Duration::from_secs(40), || {
        total_pending(&dir) == 0
    });
    let expired_late = || {
        audited(&dir)
            .iter()
            .any(|l| l["identity"] == "late-00000.example.net" && l["by"] == "expiry")
    };
    let until = std::time::Instant::now() + Duration::from_secs(40);
    while !expired_late() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        expired_late(),
        "the unused approval expired: {:?}",
        audited(&dir)
    );
    let expired: Vec<_> = audited(&dir)
        .into_iter()
        .filter(|l| l["by"] == "expiry")
        .collect();
    assert_eq!(expired.len(), 3, "{expired:?}");
    assert!(expired
        .iter()
        .all(|l| l["decision"] == "forgotten" && l["reason"].as_str().unwrap().contains("expiry")));
    assert!(
        !expired
            .iter()
            .any(|l| l["identity"] == "came-00000.example.net"),
        "the node came: its approval stays"
    );
    assert_eq!(
        metric(
            port,
            "choria_provisioner_approval_decisions{by=\"expiry\",decision=\"forgotten\""
        ),
        3.0
    );
    // The late node comes after its approval expired: it waits for a person.
    let late = sim(&server.url(), 1, |o| o.prefix = "late-".into());
    wait_until("the late node waits", Duration::from_secs(30), || {
        pending_names(&dir) == ["late-00000.example.net"]
    });
    assert_eq!(late.progress().provisioned, 0);
    stop(daemon);
    came.stop();
    late.stop();
}
