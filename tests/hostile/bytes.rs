//! Attacks on bytes: what a node sends is bounded in bytes on its way in, not only
//! in count, and a flood of bytes never slows the NATS reader thread enough for the
//! broker to drop the provisioner.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::support::hostile::{ok, GhostFlood, Hostile};
use super::support::rig::{fast, sim, wait_provisioned, Provisioner};
use super::support::{NatsServer, RawPublisher, TempDir};
use super::{assert_all_provisioned_once, assert_connection_held};

/// The example helper, `seconds` late: a script in `dir`.
fn slow_helper(dir: &TempDir, seconds: &str) -> std::path::PathBuf {
    dir.script(
        "helper.sh",
        &format!(
            "#!/bin/sh\nsleep {seconds}\nexec {} \"$@\"\n",
            super::support::daemon::example_helper().display()
        ),
    )
}

/// A header block of about `bytes` bytes of tiny lines, as nats-server passes an
/// HPUB's on unread.
fn header_block(bytes: usize) -> Vec<u8> {
    let mut block = b"NATS/1.0\r\n".to_vec();
    let mut n = 0u32;
    while block.len() < bytes {
        block.extend_from_slice(format!("k{n}:v\r\n").as_bytes());
        n += 1;
    }
    block.extend_from_slice(b"\r\n");
    block
}

/// Publishes `per_second` startup events with a header block of `bytes` each on a
/// raw connection, until stopped (two minutes at most); how many it sent.
struct HeaderFlood {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HeaderFlood {
    fn start(url: &str, per_second: u32, bytes: usize) -> HeaderFlood {
        let (stop, sent) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (flag, count) = (Arc::clone(&stop), Arc::clone(&sent));
        let mut raw = RawPublisher::connect(url);
        let block = header_block(bytes);
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let gap = Duration::from_secs(1) / per_second;
            let mut n = 0u32;
            while !flag.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(120) {
                raw.hpub(
                    "choria.lifecycle.event.startup.provision_mode_server",
                    &block,
                    br#"{"protocol":"io.choria.lifecycle.v1.startup"}"#,
                );
                count.fetch_add(1, Ordering::Relaxed);
                n += 1;
                // Paced from the start, so a slow write does not lower the rate.
                let due = started + gap * n;
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
        });
        HeaderFlood {
            stop,
            sent,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.sent.load(Ordering::Relaxed)
    }
}

#[test]
fn a_flood_of_huge_header_blocks_is_read_past_and_never_costs_the_connection() {
    // 100 startup events a second, each with an ~840 KB header block of tiny lines:
    // the NATS client used to parse every block into a map on its reader thread,
    // and nats-server dropped the provisioner as a slow consumer.
    let server = NatsServer::start();
    let prov = Provisioner::start(&server.url(), "p1.test", "", fast());
    let flood = HeaderFlood::start(&server.url(), 100, 840 * 1024);
    // The nodes boot into the flood (on a loaded machine the writer is slower than
    // 100 a second: what matters is that the blocks keep coming).
    let flowing = |n: u64, within: Duration| {
        let deadline = Instant::now() + within;
        while flood.sent.load(Ordering::Relaxed) < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    flowing(100, Duration::from_secs(30));
    let fleet = sim(&server.url(), 20, |_| {});
    let booted = Instant::now();
    wait_provisioned(&fleet, 20, Duration::from_secs(30));
    let took = booted.elapsed();
    let during = flood.sent.load(Ordering::Relaxed);
    flowing(during + 100, Duration::from_secs(30));
    let sent = flood.stop();
    let dropped = prov.counter("dropped_events", &["oversized_headers"]);
    println!(
        "20 nodes in {took:?} under {sent} events with 840 KB header blocks; {dropped} dropped"
    );
    assert!(sent >= 200, "the flood ran: {sent}");
    assert!(
        dropped >= sent / 2,
        "read past and counted: {dropped} of {sent}"
    );
    assert!(
        took < Duration::from_secs(15),
        "at their usual pace: {took:?}"
    );
    assert_connection_held(&prov);
}

/// 20 honest nodes booting into 500 made-up identities a second whose inventory
/// the attacker answers, with `yaml` as the provisioner's settings; how long the 20
/// took, and every request the attacker saw.
fn answering_ghosts(yaml: &str) -> (Duration, Vec<String>, Provisioner) {
    let server = NatsServer::start();
    let attacker = Hostile::connect(&server.url(), None);
    let race = attacker.race(Box::new(|target, _, body| {
        (target.starts_with("ghost-") && body.action == "inventory")
            .then(|| ok("inventory", serde_json::json!({"version": "0.30.2"})))
    }));
    attacker.flush();
    let prov = Provisioner::start(&server.url(), "p1.test", yaml, fast());
    let flood = GhostFlood::start(&server.url(), 500);
    // The nodes boot into the flood: 1,500 names first (3 s at full rate).
    flood.until(1500, Duration::from_secs(30));
    let booted = Instant::now();
    let fleet = sim(&server.url(), 20, |_| {});
    wait_provisioned(&fleet, 20, Duration::from_secs(30));
    let took = booted.elapsed();
    let ghosts = flood.stop();
    assert!(ghosts >= 1500, "the flood ran: {ghosts} ghosts");
    assert_all_provisioned_once(&fleet);
    drop(race);
    assert_connection_held(&prov);
    let seen = attacker.loot.seen.lock().clone();
    (took, seen, prov)
}

#[test]
fn an_identity_policy_refuses_made_up_identities_before_they_cost_anything() {
    let (took, seen, prov) = answering_ghosts("workers: 8\nidentity_deny: ['^ghost-']\n");
    let asked: Vec<&String> = seen.iter().filter(|s| s.starts_with("ghost-")).collect();
    assert!(asked.is_empty(), "no request reached a ghost: {asked:?}");
    let refused = prov.counter("refused_identities", &["event", "policy"]);
    println!("20 nodes in {took:?}; {refused} ghosts refused by the policy");
    assert!(refused >= 1000, "{refused}");
    assert!(
        took < Duration::from_secs(10),
        "at their usual pace: {took:?}"
    );
    let most = prov.metrics.waiting_attempts_max.get();
    assert!(most <= 20, "no ghost was ever under way: {most}");
}

#[test]
fn without_a_policy_honest_nodes_are_not_starved_by_answering_ghosts() {
    // A helper of 200 ms: eight workers run 40 a second, and every ghost whose
    // inventory is answered costs one; 500 ghosts a second would fill a single queue
    // ahead of every honest node. Honest nodes are found by a discovery as well
    // (every 2 s here) and go ahead of names known only from events.
    let dir = TempDir::new("slow-helper");
    let helper = slow_helper(&dir, "0.2");
    let (took, seen, prov) =
        answering_ghosts(&format!("workers: 8\nhelper: {}\n", helper.display()));
    let asked = seen.iter().filter(|s| s.starts_with("ghost-")).count();
    println!(
        "20 nodes in {took:?}; {asked} requests to ghosts; {} still queued",
        prov.metrics.work_queue_entries.get()
    );
    assert!(
        took < Duration::from_secs(15),
        "honest nodes starved: {took:?}"
    );
}

#[test]
fn a_silent_ghost_flood_grows_the_audit_file_by_a_bounded_amount() {
    // 2,000 made-up names a second for 20 s, nobody behind them: each attempt ends
    // at once as unreachable (nats-server says no responders, and the probe agrees),
    // having sent nothing and made nothing. Sixty of them a minute are written line
    // by line, the rest summed up.
    let server = NatsServer::start();
    let dir = TempDir::new("audit-flood");
    let audit = dir.path().join("audit.log");
    let prov = Provisioner::start(
        &server.url(),
        "p1.test",
        &format!("workers: 8\naudit_file: {}\n", audit.display()),
        fast(),
    );
    let flood = GhostFlood::start(&server.url(), 2000);
    std::thread::sleep(Duration::from_secs(15));
    flood.until(20_000, Duration::from_secs(30));
    let ghosts = flood.stop();
    let unreachable = prov.metrics.unreachable_nodes.get();
    let fleet = sim(&server.url(), 5, |_| {});
    wait_provisioned(&fleet, 5, Duration::from_secs(30));
    drop(prov);
    let size = std::fs::metadata(&audit).unwrap().len();
    println!("{ghosts} ghosts, {unreachable} unreachable; the audit file has {size} bytes");
    assert!(ghosts >= 20_000, "the flood ran: {ghosts}");
    assert!(size < 100 * 1024, "the audit file grew by {size} bytes");
    let text = std::fs::read_to_string(&audit).unwrap();
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("\"provisioned\""))
            .count(),
        5,
        "every honest node's line is there"
    );
    assert!(
        unreachable >= 10_000,
        "the ghosts' attempts ended: {unreachable}"
    );
    assert!(text.contains("\"aggregated\":"), "summed up");
}

/// The provisioner's binary as `spawn_with` runs it: its resident memory at its
/// peak (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap()
        * 1024
}

#[test]
fn a_flood_of_megabyte_replies_is_held_within_the_byte_budget() {
    reply_flood("max_held_bytes: 32MiB\n", (32 << 20) + (48 << 20));
}

#[test]
fn with_the_defaults_a_reply_flood_never_takes_the_daemon_past_256_mb() {
    reply_flood("", 256 << 20);
}

/// For every request it reads, the attacker sends eight replies of 1 MB of junk to
/// its reply subject, while 40 honest nodes boot and a helper takes a second (unread
/// replies used to be bounded by count, 8 a request, only): the daemon's binary with
/// `yaml` added must stay connected and grow by less than `allowed` bytes.
fn reply_flood(yaml: &str, allowed: u64) {
    let server = NatsServer::start();
    let attacker = Hostile::connect(&server.url(), None);
    let publisher = attacker.nc().clone();
    let junk = vec![b'j'; 1 << 20];
    let sent = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&sent);
    let _flood = attacker
        .nc()
        .subscribe("provisioning.node.>")
        .unwrap()
        .with_handler(move |msg| {
            if let Some(reply) = &msg.reply {
                for _ in 0..8 {
                    publisher.publish(reply, &junk)?;
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        });
    attacker.flush();
    let dir = TempDir::new("reply-flood");
    let helper = slow_helper(&dir, "1");
    let bin = env!("CARGO_BIN_EXE_choria-provisioner");
    let mut child = super::support::daemon::spawn_with(
        bin,
        &dir,
        "p1.test",
        &server.url(),
        &format!(
            "helper: {}\nworkers: 4\nreply_grace: 300ms\n{yaml}interval: 1m\n",
            helper.display()
        ),
    );
    std::thread::sleep(Duration::from_secs(2));
    let before = peak_rss(child.id());
    let fleet = sim(&server.url(), 40, |_| {});
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(250));
        if sent.load(Ordering::Relaxed) > 1500 {
            break;
        }
    }
    let peak = peak_rss(child.id());
    let flooded = sent.load(Ordering::Relaxed);
    let _ = child.kill();
    let _ = child.wait();
    drop(fleet);
    let log = std::fs::read_to_string(dir.path().join("p.log")).unwrap_or_default();
    println!(
        "{flooded} junk replies of 1 MB; peak RSS {} MB (at start {} MB)",
        peak >> 20,
        before >> 20
    );
    assert!(flooded >= 400, "the flood ran: {flooded}");
    assert!(
        peak < before + allowed,
        "peak RSS {peak} bytes: over the budget and the allowance"
    );
    assert!(
        !log.contains("Disconnected from the broker"),
        "connected throughout"
    );
}
