//! The approvals table as the fleet, the attempts and operators use it, without a
//! broker (`tests/approval.rs` runs the daemon, the simulator and the control
//! socket end to end).

use super::*;
use crate::test_nats_server::TempDir;

fn id(s: &str) -> Identity {
    Identity::parse(s).unwrap()
}

fn alice() -> Operator {
    Operator {
        uid: 1000,
        pid: 42,
        user: Some("alice".into()),
    }
}

fn config(dir: &TempDir, extra: impl FnOnce(&mut Config)) -> Config {
    let mut c = Config::defaults(&dir.path().join("p.yaml"));
    c.approval = true;
    c.approval_file = Some(dir.path().join("approvals.json"));
    extra(&mut c);
    c
}

fn approvals(c: &Config) -> (Arc<Approvals>, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new("test").unwrap());
    let a = Approvals::new(c, "p1.example.net", Arc::clone(&metrics));
    a.restore();
    (a, metrics)
}

const INVENTORY: &str = r#"{"facts":{"os":{"name":"AlmaLinux"},"networking":{"fqdn":"n1.example.net","ip":"10.0.0.1"}},"version":"0.29.4"}"#;

#[test]
fn a_new_identity_is_held_with_its_facts_and_goes_on_once_approved() {
    let dir = TempDir::new("approvals-hold");
    let (a, metrics) = approvals(&config(&dir, |_| {}));
    let n1 = id("n1.example.net");
    assert_eq!(a.admission(&n1), Admission::Go, "not seen yet: asked");
    assert_eq!(
        a.judge(&n1, "0.29.4", INVENTORY, Default::default()),
        Verdict::Held
    );
    assert_eq!(a.admission(&n1), Admission::Pending, "not queued again");
    assert_eq!(
        a.judge(&n1, "0.29.4", INVENTORY, Default::default()),
        Verdict::Held
    );
    let (total, rows) = a.pending(0, 10);
    assert_eq!(total, 1);
    assert_eq!(rows[0].identity, "n1.example.net");
    assert_eq!(rows[0].version, "0.29.4");
    assert_eq!(
        rows[0].facts,
        [
            ("networking.fqdn".to_string(), "n1.example.net".to_string()),
            ("networking.ip".into(), "10.0.0.1".into()),
            ("os.name".into(), "AlmaLinux".into()),
        ]
    );
    assert_eq!(metrics.pending_approval.get(), 1);
    let decided = a.approve(std::slice::from_ref(&n1), &alice());
    assert_eq!(decided.changed, std::slice::from_ref(&n1));
    assert!(decided.saved.is_ok());
    assert_eq!(a.admission(&n1), Admission::Go);
    assert_eq!(
        a.judge(&n1, "0.29.4", INVENTORY, Default::default()),
        Verdict::Go
    );
    assert_eq!(metrics.pending_approval.get(), 0);
    assert_eq!(
        metrics
            .approval_decisions
            .with_label_values(&["approved", "operator"])
            .get(),
        1
    );
    let r = a.record(&n1).unwrap();
    assert_eq!(r.by, "alice (uid 1000, pid 42)");
    assert_eq!(r.facts.len(), 3, "the facts stay with the decision");
    // Approving again changes nothing.
    assert!(a.approve(&[n1], &alice()).changed.is_empty());
}

#[test]
fn a_denied_identity_is_refused_until_forgotten_and_then_waits_again() {
    let dir = TempDir::new("approvals-deny");
    let (a, _) = approvals(&config(&dir, |_| {}));
    let n2 = id("n2.example.net");
    a.judge(&n2, "0.29.4", INVENTORY, Default::default());
    a.deny(std::slice::from_ref(&n2), "unknown rack", &alice());
    assert_eq!(a.admission(&n2), Admission::Denied);
    assert_eq!(
        a.judge(&n2, "0.29.4", INVENTORY, Default::default()),
        Verdict::Denied
    );
    assert_eq!(a.record(&n2).unwrap().reason, "unknown rack");
    assert!(a.log_denial_now(&n2));
    assert!(!a.log_denial_now(&n2), "once per identity per cool-down");
    a.forget(std::slice::from_ref(&n2), &alice());
    assert_eq!(a.admission(&n2), Admission::Go);
    assert_eq!(
        a.judge(&n2, "0.29.4", INVENTORY, Default::default()),
        Verdict::Held
    );
    // A pre-approval: never seen, approved, goes on at once.
    let n3 = id("n3.example.net");
    a.approve(std::slice::from_ref(&n3), &alice());
    assert_eq!(a.judge(&n3, "", "{}", Default::default()), Verdict::Go);
}

#[test]
fn decisions_and_pending_identities_survive_a_restart() {
    let dir = TempDir::new("approvals-restart");
    let c = config(&dir, |_| {});
    {
        let (a, _) = approvals(&c);
        for n in 0..5 {
            a.judge(
                &id(&format!("p{n}.example.net")),
                "1",
                INVENTORY,
                Default::default(),
            );
        }
        a.deny(&[id("p0.example.net")], "", &alice());
        a.approve(&[id("p1.example.net")], &alice());
        // The holds are written by the approvals thread, or here.
        a.save().unwrap();
    }
    let (again, metrics) = approvals(&c);
    assert_eq!(again.pending(0, 10).0, 3);
    assert_eq!(metrics.pending_approval.get(), 3);
    assert_eq!(again.admission(&id("p0.example.net")), Admission::Denied);
    assert_eq!(
        again.judge(&id("p1.example.net"), "1", "{}", Default::default()),
        Verdict::Go
    );
    // A file that cannot be read is moved aside: every node waits again.
    std::fs::write(dir.path().join("approvals.json"), b"{not json").unwrap();
    let (empty, _) = approvals(&c);
    assert_eq!(empty.pending(0, 10).0, 0);
    assert_eq!(empty.admission(&id("p0.example.net")), Admission::Go);
    let moved = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| e.file_name().to_string_lossy().contains(".unreadable-"));
    assert!(moved, "the unreadable file is kept for the operator");
}

#[test]
fn pre_approved_and_unlisted_identities_never_wait() {
    let dir = TempDir::new("approvals-rules");
    let (a, _) = approvals(&config(&dir, |c| {
        c.approval_identities = vec![r"\.dmz\.example\.net$".into()];
        c.approval_preapproved = vec![r"^bastion\.".into()];
    }));
    assert_eq!(
        a.judge(&id("web.example.net"), "", "{}", Default::default()),
        Verdict::Go
    );
    assert_eq!(
        a.judge(&id("bastion.dmz.example.net"), "", "{}", Default::default()),
        Verdict::Go
    );
    assert_eq!(
        a.judge(&id("web.dmz.example.net"), "", "{}", Default::default()),
        Verdict::Held
    );
}

#[test]
fn approve_all_takes_the_identities_counted_not_those_held_since() {
    let dir = TempDir::new("approvals-all");
    let (a, _) = approvals(&config(&dir, |_| {}));
    for n in 0..3 {
        a.judge(&id(&format!("early{n}")), "", "{}", Default::default());
    }
    let as_of = u64::try_from(crate::clock::unix_nanos()).unwrap();
    std::thread::sleep(Duration::from_millis(2));
    a.judge(&id("late"), "", "{}", Default::default());
    let decided = a.approve_all(as_of, &alice());
    assert_eq!(decided.changed.len(), 3);
    assert_eq!(a.admission(&id("late")), Admission::Pending);
}

#[test]
fn a_decision_by_pattern_takes_exactly_the_identities_counted() {
    let dir = TempDir::new("approvals-match");
    let (a, metrics) = approvals(&config(&dir, |_| {}));
    for name in ["ghost-1", "ghost-2", "web-1"] {
        a.judge(&id(name), "", "{}", Default::default());
    }
    a.approve(&[id("ghost-3")], &alice());
    let ghost = compile_pattern("^ghost-").unwrap();
    let (count, first, as_of) = a.count_matching(MatchAction::Deny, &ghost);
    assert_eq!(count, 3, "pending and approved: {first:?}");
    std::thread::sleep(Duration::from_millis(2));
    a.judge(&id("ghost-4"), "", "{}", Default::default());
    let decided = a.decide_matching(
        MatchAction::Deny,
        "^ghost-",
        &ghost,
        as_of,
        "made up",
        &alice(),
    );
    let mut changed: Vec<String> = decided.changed.iter().map(|i| i.to_string()).collect();
    changed.sort();
    assert_eq!(
        changed,
        ["ghost-1", "ghost-2", "ghost-3"],
        "not ghost-4, held since"
    );
    assert_eq!(a.admission(&id("ghost-4")), Admission::Pending);
    assert_eq!(a.admission(&id("web-1")), Admission::Pending);
    assert_eq!(a.record(&id("ghost-1")).unwrap().reason, "made up");
    assert_eq!(
        metrics
            .approval_decisions
            .with_label_values(&["denied", "operator"])
            .get(),
        3
    );
    // Approve selects only the pending; forget any record.
    let (count, _, _) = a.count_matching(MatchAction::Approve, &ghost);
    assert_eq!(count, 1);
    let (count, _, _) = a.count_matching(MatchAction::Forget, &ghost);
    assert_eq!(count, 4);
}

#[test]
fn stale_pending_identities_and_unused_approvals_expire_and_denials_do_not() {
    let dir = TempDir::new("approvals-expiry");
    let (a, metrics) = approvals(&config(&dir, |c| {
        c.approval_pending_expiry = Duration::from_secs(100);
        c.approval_ahead_expiry = Duration::from_secs(100);
    }));
    for name in ["stale", "denied"] {
        a.judge(&id(name), "", "{}", Default::default());
    }
    a.deny(&[id("denied")], "no", &alice());
    a.approve(&[id("ahead"), id("came")], &alice());
    assert_eq!(
        a.admission(&id("ahead")),
        Admission::Go,
        "queued, not there yet"
    );
    assert_eq!(
        a.judge(&id("came"), "", "{}", Default::default()),
        Verdict::Go,
        "the node came"
    );
    let now = crate::clock::unix_now();
    assert_eq!(a.expire(now), 0, "nothing is due yet");
    assert_eq!(
        a.expire(now + 101),
        2,
        "the stale pending and the unused approval"
    );
    assert_eq!(
        a.record(&id("stale")).unwrap().decision,
        Decision::Forgotten
    );
    assert_eq!(
        a.record(&id("ahead")).unwrap().decision,
        Decision::Forgotten
    );
    assert_eq!(a.record(&id("came")).unwrap().decision, Decision::Approved);
    assert_eq!(a.record(&id("denied")).unwrap().decision, Decision::Denied);
    assert_eq!(a.record(&id("stale")).unwrap().by, "expiry");
    assert!(a.record(&id("stale")).unwrap().operator.is_none());
    assert_eq!(
        metrics
            .approval_decisions
            .with_label_values(&["forgotten", "expiry"])
            .get(),
        2
    );
    assert_eq!(a.expire(now + 10_000), 0, "a denial never expires");
}

#[test]
fn a_flood_of_made_up_identities_is_bounded_and_approve_still_works() {
    let dir = TempDir::new("approvals-flood");
    let (a, metrics) = approvals(&config(&dir, |c| c.approval_max_pending = 1_000));
    for n in 0..10_000 {
        a.judge(
            &id(&format!("ghost-{n}.example.net")),
            "",
            INVENTORY,
            Default::default(),
        );
        assert!(a.pending(0, 0).0 <= 1_000);
    }
    let (total, page) = a.pending(0, MAX_PAGE);
    assert!((900..=1_000).contains(&total), "{total}");
    assert_eq!(page.len(), MAX_PAGE, "the table is paged");
    assert_eq!(metrics.pending_evicted.get() as usize, 10_000 - total);
    // The rule of which give way (seen longest ago) is `table.rs`'s tests'.
    let newest = id("ghost-9999.example.net");
    assert_eq!(a.admission(&newest), Admission::Pending);
    a.approve(std::slice::from_ref(&newest), &alice());
    assert_eq!(
        a.judge(&newest, "", INVENTORY, Default::default()),
        Verdict::Go
    );
    a.save().unwrap();
    let bytes = std::fs::metadata(dir.path().join("approvals.json"))
        .unwrap()
        .len();
    assert!(bytes < 1_000 * 400, "{bytes} bytes for 1,000 records");
}

#[test]
fn records_from_another_instance_merge_and_queue_nothing_without_a_fleet() {
    let dir = TempDir::new("approvals-merge");
    let (a, _) = approvals(&config(&dir, |_| {}));
    let n1 = id("n1.example.net");
    a.judge(&n1, "", "{}", Default::default());
    let mut approved = a.record(&n1).unwrap();
    (approved.clock, approved.decision) = (1, Decision::Approved);
    approved.by = "bob (uid 1001, pid 7)".into();
    a.merge(vec![approved.clone()], "p2.example.net");
    assert_eq!(a.admission(&n1), Admission::Go);
    // An older decision never wins, however late its time.
    let mut stale = approved;
    (stale.clock, stale.decision, stale.at) = (0, Decision::Pending, u64::MAX);
    stale.held_at = 1;
    a.merge(vec![stale], "p3.example.net");
    assert_eq!(a.judge(&n1, "", "{}", Default::default()), Verdict::Go);
}

/// A connection as `p1.example.net` to `server` (no TLS), with metrics of site
/// `lon`.
fn connected(
    dir: &TempDir,
    server: &crate::test_nats_server::NatsServer,
) -> (crate::choria::connector::Connector, Arc<Metrics>) {
    let cfg = dir.write(
        "choria.cfg",
        &format!(
            "identity = p1.example.net\nplugin.choria.middleware_hosts = {}\n",
            server.url()
        ),
    );
    let mut client = crate::choria::client_config::ClientConfig::load(&cfg).unwrap();
    client.insecure = true;
    let metrics = Arc::new(Metrics::new("lon").unwrap());
    // Never told to stop: the connection is made at once or the test fails.
    let (_shutdown_tx, shutdown) = bounded::<()>(0);
    let connector =
        crate::choria::connector::Connector::connect(&client, &metrics, &shutdown).unwrap();
    (connector, metrics)
}

/// The approvals thread of `a` on `connector` for site `lon`, told of its
/// reconnections; it stops when the returned sender is dropped.
fn start_sync(
    a: Arc<Approvals>,
    connector: &crate::choria::connector::Connector,
    metrics: &Arc<Metrics>,
) -> (Sender<()>, std::thread::JoinHandle<()>) {
    let (reconnected_tx, reconnected) = bounded(1);
    connector.state().tell_reconnections(reconnected_tx);
    let (stop_tx, stop) = bounded::<()>(0);
    let thread = sync::start(
        a,
        connector.bus().clone(),
        crate::choria::peers::Seal::insecure(),
        "lon",
        Arc::clone(metrics),
        stop,
        reconnected,
    )
    .unwrap();
    (stop_tx, thread)
}

/// The approvals thread says hello when it starts and again after the broker
/// connection comes back (what the others sent meanwhile is lost), against a real
/// nats-server that is restarted.
#[test]
fn the_approvals_thread_says_hello_at_start_and_after_a_reconnection() {
    use crate::choria::peers::{subscribe_approvals, ApprovalBatch, BatchKind};
    use crate::test_nats_server::NatsServer;

    let mut server = NatsServer::start();
    let dir = TempDir::new("approvals-hello");
    let (connector, metrics) = connected(&dir, &server);
    // Listening on the same connection: its subscriptions are made again on the
    // new server before the reconnection is told, so the hello cannot pass them.
    let (heard_tx, heard) = crossbeam_channel::unbounded();
    let _subscription = subscribe_approvals(connector.bus(), "lon", "listener", move |_, data| {
        if let Ok(batch) = ApprovalBatch::parse(&data, "lon") {
            let _ = heard_tx.send(batch.kind);
        }
    })
    .unwrap();
    connector.bus().flush(Duration::from_secs(2)).unwrap();
    let (a, _) = approvals(&config(&dir, |_| {}));
    let (stop_tx, thread) = start_sync(a, &connector, &metrics);
    let hello = |within: Duration| {
        let until = Instant::now() + within;
        while let Ok(kind) = heard.recv_deadline(until) {
            if kind == BatchKind::Hello {
                return true;
            }
        }
        false
    };
    assert!(hello(Duration::from_secs(5)), "a hello at start");
    server.restart();
    assert!(
        hello(Duration::from_secs(20)),
        "a hello after the reconnection"
    );
    drop(stop_tx);
    thread.join().unwrap();
}

/// Hostile approvals messages on the site's subject: each is refused and counted by
/// its reason, none is merged, and a valid peer's record after them still is.
#[test]
fn bad_approvals_messages_are_refused_counted_and_never_merged() {
    use crate::choria::peers::{approvals_subject_of, ApprovalBatch, BatchKind};
    use crate::test_nats_server::NatsServer;

    let server = NatsServer::start();
    let dir = TempDir::new("approvals-hostile");
    let (connector, metrics) = connected(&dir, &server);
    let (a, _) = approvals(&config(&dir, |_| {}));
    let (stop_tx, thread) = start_sync(Arc::clone(&a), &connector, &metrics);
    let ghost = id("ghost.example.net");
    let mut approved = ApprovalRecord {
        identity: ghost.clone(),
        decision: Decision::Approved,
        clock: 1,
        instance: "p1.example.net".into(),
        held_at: 0,
        at: 1,
        by: "mallory".into(),
        operator: None,
        reason: String::new(),
        first_seen: 0,
        last_seen: 0,
        version: String::new(),
        facts: Vec::new(),
    };
    let batch = |site: &str, records: Vec<ApprovalRecord>| {
        ApprovalBatch {
            from: "p2.example.net".into(),
            site: site.into(),
            kind: BatchKind::Update,
            records,
            digest: None,
        }
        .to_json()
    };
    let good = String::from_utf8(batch("lon", vec![approved.clone()])).unwrap();
    approved.reason = "a\u{1b}[31m".into();
    let hostile: Vec<(&str, Vec<u8>)> = vec![
        ("too_large", vec![b' '; 600 * 1024]),
        ("undecodable", b"{\"from\":".to_vec()),
        ("foreign_site", batch("par", vec![approved.clone()])),
        (
            "identity",
            good.replace("ghost.example.net", "ghost example")
                .into_bytes(),
        ),
        ("field", batch("lon", vec![approved.clone()])),
    ];
    let subject = approvals_subject_of("lon", "p2.example.net").unwrap();
    for (_, body) in &hostile {
        connector.bus().publish(&subject, body).unwrap();
    }
    let refused = |reason: &str| {
        metrics
            .peer_messages_refused
            .with_label_values(&[reason])
            .get()
    };
    wait_for("every hostile message refused", || {
        hostile.iter().all(|(reason, _)| refused(reason) == 1)
    });
    assert!(a.record(&ghost).is_none(), "nothing merged");
    // A valid peer's record after them is merged.
    connector.bus().publish(&subject, good.as_bytes()).unwrap();
    wait_for("the valid record merged", || a.record(&ghost).is_some());
    // Acted on once nobody answered the hello with a table.
    wait_for("caught up", || a.admission(&ghost) == Admission::Go);
    drop(stop_tx);
    thread.join().unwrap();
}

/// Waits (10 s at most) until `done`.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < until, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}
