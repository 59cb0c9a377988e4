//! A site's approval policy program against the real binary, a real nats-server
//! and the simulated fleet: the example policy (`packaging/examples`) approves the
//! machines its CSV lists when their serial matches, and a wrapper around it denies
//! one name with a reason, crashes on another, hangs on another and prints garbage
//! on another: exactly the listed machines are provisioned, the denied one is
//! refused with its reason, and the rest wait for a person.
#![cfg(feature = "sim")]

mod support;

use std::time::Duration;

use support::approval::*;
use support::daemon::cli_ok;
use support::rig::*;
use support::{free_port, NatsServer, TempDir};

/// The policy program's runs with `result` so far.
fn policy_runs(port: u16, result: &str) -> f64 {
    metric(
        port,
        &format!("choria_provisioner_approval_policy_runs{{result=\"{result}\""),
    )
}

/// The daemon of `dir` with `policy` as its approval policy, the serial among the
/// facts shown, and `extra`.
fn with_policy(
    dir: &TempDir,
    server: &NatsServer,
    port: u16,
    policy: &std::path::Path,
    extra: &str,
) -> Daemon {
    spawn(
        dir,
        "p1.test",
        &server.url(),
        port,
        &format!(
            "approval_policy: {}\napproval_facts: [dmi.product.serial_number, networking.fqdn]\n{extra}",
            policy.display()
        ),
    )
}

/// The example policy program.
fn example_policy() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/examples/approval-policy.sh")
}

#[test]
fn a_policy_program_approves_the_listed_serials_and_an_error_never_approves() {
    let server = NatsServer::start();
    let dir = TempDir::new("approval-policy");
    let port = free_port();
    // The simulator's serials are SN<number>: 00000 and 00001 listed right,
    // 00006 listed with a wrong serial, 00007 not listed.
    let csv = dir.write(
        "expected.csv",
        "# identity,serial\nsim-00000.example.net,SN00000000\nsim-00001.example.net,SN00000001\nsim-00006.example.net,SN99999999\n",
    );
    let policy = dir.script(
        "policy.sh",
        &format!(
            "#!/bin/sh\ninput=$(cat)\ncase \"$input\" in\n\
             *'\"identity\":\"sim-00002.example.net\"'*) echo 'not in the rack plan'; exit 1 ;;\n\
             *'\"identity\":\"sim-00003.example.net\"'*) kill -SEGV $$ ;;\n\
             *'\"identity\":\"sim-00004.example.net\"'*) exec sleep 60 ;;\n\
             *'\"identity\":\"sim-00005.example.net\"'*) printf '\\377\\376garbage\\n'; exit 0 ;;\n\
             esac\nprintf '%s' \"$input\" | exec /bin/sh {} {}\n",
            example_policy().display(),
            csv.display()
        ),
    );
    let daemon = with_policy(&dir, &server, port, &policy, "helper_timeout: 2s\n");
    let fleet = sim(&server.url(), 8, |_| {});
    wait_provisioned(&fleet, 2, Duration::from_secs(60));
    wait_until("every run counted", Duration::from_secs(30), || {
        ["approved", "denied", "undecided", "failed"]
            .iter()
            .map(|r| policy_runs(port, r))
            .sum::<f64>()
            >= 8.0
    });
    let runs = |r: &str| policy_runs(port, r);
    assert_eq!(runs("approved"), 2.0);
    assert_eq!(runs("denied"), 1.0);
    assert_eq!(
        runs("undecided"),
        2.0,
        "00006 (wrong serial) and 00007 (not listed)"
    );
    assert_eq!(runs("failed"), 3.0, "a crash, a timeout and garbage");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        provisioned_names(&fleet),
        ["sim-00000.example.net", "sim-00001.example.net"]
    );
    let mut waiting = pending_names(&dir);
    waiting.sort();
    assert_eq!(
        waiting,
        [3, 4, 5, 6, 7].map(|n| format!("sim-0000{n}.example.net")),
        "the failures and the unknown wait for a person"
    );
    let audit = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    let denial = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["event"] == "approval" && l["identity"] == "sim-00002.example.net")
        .expect("the denial is audited");
    assert_eq!(denial["decision"], "denied");
    assert_eq!(denial["by"], "policy");
    assert_eq!(denial["reason"], "not in the rack plan");
    assert_eq!(denial["program"], policy.display().to_string());
    let approvals: Vec<serde_json::Value> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["event"] == "approval" && l["decision"] == "approved")
        .collect();
    assert_eq!(approvals.len(), 2);
    assert!(approvals.iter().all(|l| l["by"] == "policy"));
    assert_eq!(
        metric(
            port,
            "choria_provisioner_approval_decisions{by=\"policy\",decision=\"approved\""
        ),
        2.0
    );
    // A person decides for one the program could not.
    cli_ok(&dir, &["approve", "sim-00003.example.net"]);
    wait_provisioned(&fleet, 3, Duration::from_secs(30));
    stop(daemon);
    fleet.stop();
}

/// The example policy while 500 made-up identities a second answer their
/// inventory: the 20 honest nodes its CSV lists are provisioned, the program runs
/// at most once per identity and never more than 4 at once, and the daemon's memory
/// stays bounded.
#[test]
fn honest_listed_nodes_get_through_a_flood_of_made_up_names_with_the_policy_bounded() {
    let server = NatsServer::start();
    let dir = TempDir::new("approval-policy-flood");
    let port = free_port();
    let listed: String = (0..20)
        .map(|n| format!("hon-{n:05}.example.net,SN{n:08}\n"))
        .collect();
    let csv = dir.write("expected.csv", &listed);
    // The example, counting how many run at once (a directory per run: mkdir is
    // atomic, and the count of entries is the runs under way).
    let running = dir.path().join("running");
    std::fs::create_dir(&running).unwrap();
    let peak = dir.path().join("peak");
    let policy = dir.script(
        "policy.sh",
        &format!(
            "#!/bin/sh\nmkdir {running}/$$\nn=$(ls {running} | wc -l)\n\
             [ \"$n\" -gt \"$(cat {peak} 2>/dev/null || echo 0)\" ] && echo \"$n\" > {peak}\n\
             /bin/sh {example} {csv}\ncode=$?\nrmdir {running}/$$\nexit $code\n",
            running = running.display(),
            peak = peak.display(),
            example = example_policy().display(),
            csv = csv.display()
        ),
    );
    let daemon = with_policy(&dir, &server, port, &policy, "");
    let ghosts = sim(&server.url(), 3_000, |o| {
        o.prefix = "ghost-".into();
        o.boot_rate = 500.0;
        o.workers = 4;
    });
    let started = std::time::Instant::now();
    let honest = sim(&server.url(), 20, |o| o.prefix = "hon-".into());
    wait_provisioned(&honest, 20, Duration::from_secs(120));
    let honest_took = started.elapsed();
    wait_until("the ghosts are held", Duration::from_secs(120), || {
        metric(port, "choria_provisioner_pending_approval{") >= 3_000.0
    });
    let runs: f64 = ["approved", "denied", "undecided", "failed", "skipped"]
        .iter()
        .map(|r| policy_runs(port, r))
        .sum();
    assert!(runs <= 3_020.0, "once per identity at most: {runs}");
    assert_eq!(
        metric(
            port,
            "choria_provisioner_approval_policy_runs{result=\"approved\""
        ),
        20.0
    );
    let peak: usize = std::fs::read_to_string(&peak)
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(0);
    assert!(
        (1..=4).contains(&peak),
        "at most 4 programs at once: {peak}"
    );
    let rss = peak_rss(daemon.id());
    println!(
        "policy flood: 20 listed nodes provisioned in {honest_took:?}; {runs} runs or skips \
         for 3,020 identities ({} skipped); peak {peak} programs at once, peak RSS {} MB",
        metric(
            port,
            "choria_provisioner_approval_policy_runs{result=\"skipped\""
        ),
        rss >> 20
    );
    assert!(rss < 256 << 20, "{} MB", rss >> 20);
    assert_eq!(ghosts.progress().provisioned, 0);
    stop(daemon);
    ghosts.stop();
    honest.stop();
}
