//! The attempt's defences, one test each, on the harness of `tests/mod.rs`: the reply
//! grace, twins and contests, forged refusals and statuses, the upgrade slots, and a
//! silent node's wakes.

use super::*;

/// A pki node whose `gencsr` (or `inventory`) reply gets a forged twin 600 ms later,
/// with `csr_reply_grace` of `csr_grace` and a reply grace of 50 ms.
fn late_twin(action: &'static str, csr_grace: Duration) -> (Rig, Outcome) {
    let csr = json!({"csr": include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/csr-n1.pem")), "ssldir": "/ssl"});
    let inventory = json!({"version": "0.30.2"});
    let late = Duration::from_millis(600);
    let script: [(&str, &[Answer]); 2] = if action == "gencsr" {
        [
            ("gencsr", &[Answer::LateTwin(csr, late)]),
            ("inventory", &[Answer::Ok(inventory)]),
        ]
    } else {
        [
            ("gencsr", &[Answer::Ok(csr)]),
            ("inventory", &[Answer::LateTwin(inventory, late)]),
        ]
    };
    let r = rig(FakeNode::answering(&script), CONFIGURED, |c| {
        c.features.pki = true;
        c.csr_reply_grace = csr_grace;
        c.reply_grace = Duration::from_millis(50);
    });
    let outcome = r.attempt();
    (r, outcome)
}

#[test]
fn a_gencsr_twin_later_than_the_reply_grace_but_within_csr_reply_grace_stops_the_attempt() {
    // A real node answers gencsr only once it has made its key; a forger at once.
    let (r, outcome) = late_twin("gencsr", Duration::from_secs(2));
    assert_contested(&outcome, "choria_provision#gencsr was answered twice");
    assert_eq!(r.node.count("configure"), 0, "no certificate was sent");
    // With a csr_reply_grace shorter than the twin, the attempt goes on: the longer
    // grace is what catches it.
    let (r, outcome) = late_twin("gencsr", Duration::from_millis(100));
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(r.node.count("configure"), 1);
    // Every request stays watched until restart is answered: inventory's twin, later
    // than the reply grace but before the helper ran (gencsr's grace), stops it too.
    let (r, outcome) = late_twin("inventory", Duration::from_secs(2));
    assert_contested(&outcome, "rpcutil#inventory was answered twice");
    assert_eq!(r.node.count("configure"), 0);
}

#[test]
fn nothing_secret_is_made_before_the_grace_a_lone_gencsr_reply_waits_csr_reply_grace() {
    // The helper signs the certificate: it runs only once every reply before it has
    // had its grace (`csr_reply_grace` for gencsr, which a real node answers late).
    let csr = json!({"csr": include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/csr-n1.pem")), "ssldir": "/ssl"});
    let r = rig(
        FakeNode::answering(&[("gencsr", &[Answer::Ok(csr)])]),
        CONFIGURED,
        |c| {
            c.features.pki = true;
            c.csr_reply_grace = Duration::from_secs(3);
            c.reply_grace = Duration::from_secs(2);
        },
    );
    let played = r.play(&n1(), Duration::ZERO, None);
    assert_eq!(played.outcome, Outcome::Done);
    assert_eq!(
        played.helper_at.map(|at| at - played.began),
        Some(Duration::from_secs(3)),
        "the helper ran when gencsr's grace ended"
    );
    let configured = r.node.sent.lock()[2].2 - played.began;
    assert_eq!(configured, Duration::from_secs(3), "configure right after");
}

#[test]
fn the_reply_grace_counts_from_the_request_so_a_slow_reply_does_not_add_to_it() {
    // The real node answers in its own time after it was asked, whoever answered
    // first: the grace covers the round trip instead of following it.
    let slow = Duration::from_millis(300);
    let inventory = json!({"version": "0.30.2"});
    let r = rig(
        FakeNode::answering(&[("inventory", &[Answer::SlowAlone(inventory, slow)])]),
        CONFIGURED,
        |c| c.reply_grace = Duration::from_millis(500),
    );
    let played = r.play(&n1(), Duration::ZERO, None);
    assert_eq!(played.outcome, Outcome::Done);
    assert_eq!(r.node.calls(), ["inventory", "configure", "restart"]);
    // Counted from the reply, the grace would have ended at 800 ms.
    assert_eq!(
        played.helper_at.map(|at| at - played.began),
        Some(Duration::from_millis(500))
    );
}

#[test]
fn an_empty_configuration_is_refused_before_configure() {
    let r = rig(FakeNode::answering(&[]), r#"{"msg": "nothing"}"#, |_| {});
    assert_eq!(
        r.attempt(),
        Outcome::Failed(
            "choria_provision#configure failed for n1.example.net: empty configuration".into()
        )
    );
    assert_eq!(r.node.calls(), ["inventory"]);
}

#[test]
fn a_helper_key_without_a_key_exchange_is_refused() {
    let r = rig(
        FakeNode::answering(&[]),
        r#"{"configuration": {"a": "b"}, "key": "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"}"#,
        |_| {},
    );
    let outcome = r.attempt();
    assert!(
        matches!(&outcome, Outcome::Failed(m) if m.contains("did not start Diffie-Hellman exchange")),
        "{outcome}"
    );
    assert_eq!(r.node.count("configure"), 0);
}

/// One upgrade rule: its name, the inventory reply, `upgrades_optional`, the RPCs
/// made and a check of the outcome.
type UpgradeCase = (
    &'static str,
    Answer,
    bool,
    &'static [&'static str],
    fn(&Outcome) -> bool,
);

/// The upgrade rules, for a helper asking for 0.31.0.
#[test]
fn upgrade_decisions() {
    let upgrade = |version: &str, upgradable: bool| {
        Answer::Ok(json!({"version": version, "upgradable": upgradable}))
    };
    let configured: &[&str] = &["inventory", "configure", "restart"];
    let done = |o: &Outcome| *o == Outcome::Done;
    #[rustfmt::skip]
    let cases: [UpgradeCase; 5] = [
        ("a newer version is installed and the node comes back",
            upgrade("0.30.2", true), false, &["inventory", "release_update"], |o| *o == Outcome::Upgraded),
        ("the same version is skipped and the node configured",
            upgrade("0.31.0", true), false, configured, done),
        ("a node that cannot upgrade fails",
            upgrade("0.30.2", false), false, &["inventory"],
            |o| matches!(o, Outcome::Failed(m) if m.contains("does not support upgrades"))),
        ("a node that cannot upgrade is configured when upgrades are optional",
            upgrade("0.30.2", false), true, configured, done),
        ("no version in inventory fails",
            Answer::Ok(json!({})), false, &["inventory"],
            |o| matches!(o, Outcome::Failed(m) if m.contains("did not receive a version"))),
    ];
    for (name, inventory, optional, rpcs, expect) in cases {
        let node = FakeNode::answering(&[("inventory", &[inventory])]);
        let r = rig(
            node,
            r#"{"configuration": {"a": "b"}, "upgrade": "0.31.0"}"#,
            |c| {
                c.features.upgrades = true;
                c.upgrades_repository = "https://repo.example.net".into();
                c.upgrades_optional = optional;
            },
        );
        let outcome = r.attempt();
        assert!(expect(&outcome), "{name}: {outcome}");
        assert_eq!(r.node.calls(), rpcs, "{name}");
    }
}

#[test]
fn a_paused_provisioner_sends_nothing() {
    let r = rig(FakeNode::answering(&[]), CONFIGURED, |_| {});
    r.pause.pause();
    let outcome = r.attempt();
    assert!(
        matches!(&outcome, Outcome::Failed(m) if m.contains("provisioning is paused")),
        "{outcome}"
    );
    assert!(r.node.calls().is_empty());
}

#[test]
fn a_stopping_daemon_ends_the_attempt_between_steps() {
    let r = rig(FakeNode::answering(&[]), CONFIGURED, |_| {});
    // Stopped at its second turn: inventory's reply.
    let outcome = r.play(&n1(), Duration::ZERO, Some(1)).outcome;
    assert_eq!(
        outcome,
        Outcome::Failed(
            "stopped provisioning n1.example.net: the provisioner is shutting down".into()
        )
    );
    assert_eq!(r.node.calls(), ["inventory"]);
}

/// A node on 0.30.2 that the helper upgrades to 0.31.0, with `cap` upgrade slots.
fn upgrade_rig(cap: usize) -> Rig {
    let inventory = Answer::Ok(json!({"version": "0.30.2", "upgradable": true}));
    let node = FakeNode::answering(&[("inventory", &[inventory])]);
    rig(
        node,
        r#"{"configuration": {"a": "b"}, "upgrade": "0.31.0"}"#,
        |c| {
            c.features.upgrades = true;
            c.upgrades_repository = "https://repo.example.net".into();
            c.upgrades_max_in_flight = Some(cap);
        },
    )
}

#[test]
fn upgrades_over_the_cap_wait_without_an_rpc_and_a_returning_node_frees_its_slot() {
    let r = upgrade_rig(1);
    let n2 = Identity::parse("n2.example.net").unwrap();
    let go = |id: &Identity| r.go(id);
    assert_eq!(go(&n1()), Outcome::Upgraded);
    assert_eq!(r.metrics.upgrades_in_flight.get(), 1);
    let waiting = go(&n2);
    assert_eq!(
        waiting,
        Outcome::UpgradeWaiting(
            "n2.example.net waits to be upgraded to 0.31.0: upgrades_max_in_flight (1) nodes are upgrading".into()
        )
    );
    assert!(!waiting.is_error() && !waiting.is_success());
    assert_eq!(r.node.count("release_update"), 1, "n2 sent nothing");
    assert_eq!(
        r.sequence
            .upgrading()
            .iter()
            .map(|(i, _)| i.as_str())
            .collect::<Vec<_>>(),
        ["n1.example.net"]
    );
    // n1 is found again before it went down: still on its old version, it keeps its
    // slot (and is sent again), and n2 still waits.
    assert_eq!(go(&n1()), Outcome::Upgraded, "n1 took its own slot again");
    let played = r.play(&n2, Duration::ZERO, None);
    assert!(matches!(played.outcome, Outcome::UpgradeWaiting(_)));
    assert_eq!(played.progress.position().step, "upgrade");
    assert_eq!(r.node.count("release_update"), 2);
    // n1 comes back upgraded: its slot is free, and n2 (still on 0.30.2) takes it.
    let inventory = |v: &str| Answer::Ok(json!({"version": v, "upgradable": true}));
    r.node.script.lock().insert(
        "inventory".into(),
        [inventory("0.31.0"), inventory("0.30.2")]
            .into_iter()
            .collect(),
    );
    assert_eq!(go(&n1()), Outcome::Done, "n1 is configured on 0.31.0");
    assert_eq!(go(&n2), Outcome::Upgraded);
    assert_eq!(r.node.count("release_update"), 3);
    assert_eq!(r.metrics.upgrades_in_flight.get(), 1);
}

#[test]
fn an_upgrade_waits_for_this_instances_part_of_the_cap_and_says_so() {
    let r = upgrade_rig(3);
    assert_eq!(r.metrics.upgrade_slots.get(), 3, "the whole cap");
    let slots = r.sequence.upgrade_slots();
    // What the active-active membership does while this instance is out of the set.
    slots.set_part(0);
    assert_eq!(r.metrics.upgrade_slots.get(), 0);
    let go = || r.go(&n1());
    assert_eq!(
        go(),
        Outcome::UpgradeWaiting(
            "n1.example.net waits to be upgraded to 0.31.0: this instance's part (0) of upgrades_max_in_flight (3) is in use".into()
        )
    );
    assert_eq!(r.node.count("release_update"), 0);
    slots.set_part(1);
    assert_eq!(r.sequence.woken(), [n1()], "a larger part wakes it");
    assert_eq!(go(), Outcome::Upgraded);
    assert_eq!(r.metrics.upgrades_in_flight.get(), 1);
}

#[test]
fn the_attempt_reports_its_step_and_facts() {
    let node = FakeNode::answering(&[(
        "inventory",
        &[Answer::Ok(
            json!({"version": "0.30.2\n\"x", "upgradable": false}),
        )],
    )]);
    let r = rig(node, CONFIGURED, |_| {});
    let (outcome, progress) = r.attempt_reporting();
    assert_eq!(outcome, Outcome::Done);
    let at = progress.position();
    assert_eq!((at.step, at.tries), ("restart", 1));
    let facts = progress.facts();
    assert_eq!(
        facts.version_before.as_deref(),
        Some("0.30.2\\n\\\"x"),
        "a node's string is escaped"
    );
    assert_eq!(facts.version_after, None);

    let r = rig(
        FakeNode::answering(&[]),
        r#"{"defer": true, "msg": "not in the CMDB yet"}"#,
        |_| {},
    );
    let (_, progress) = r.attempt_reporting();
    assert_eq!(progress.position().step, "helper");
    assert_eq!(
        progress.facts().helper_msg.as_deref(),
        Some("not in the CMDB yet")
    );
}

#[test]
fn a_configuration_that_loops_is_sent_counted_and_warned_once() {
    let r = rig(
        FakeNode::answering(&[]),
        r#"{"configuration": {"identity": "n1.example.net"}}"#,
        |_| {},
    );
    assert_eq!(r.attempt(), Outcome::Done, "sent anyway, as Go does");
    assert_eq!(r.attempt(), Outcome::Done);
    let counted = |key: &str| {
        r.metrics
            .looping_configurations
            .with_label_values(&[key])
            .get()
    };
    assert_eq!(counted("plugin.choria.server.provision"), 2);
    assert_eq!(counted("plugin.choria.middleware_hosts"), 2);
    assert_eq!(counted("identity"), 0);
    let stamp = crate::node::loop_check::HelperStamp::of(&r.dir.join("helper.sh"));
    assert!(
        !r.sequence
            .loops()
            .first(&stamp, "plugin.choria.server.provision"),
        "already warned for this helper version"
    );
}

#[test]
fn a_forged_refusal_followed_by_the_nodes_own_reply_is_a_contest_not_a_lock() {
    for refusal in [
        "Could not obtain provisioning lock",
        "Incorrect provision token supplied",
    ] {
        let node = FakeNode::answering(&[(
            "configure",
            &[Answer::ForgedRefusal(
                refusal,
                json!({"message": "Configuration written"}),
                Duration::from_millis(300),
            )],
        )]);
        let r = rig(node, CONFIGURED, |c| c.reply_grace = Duration::from_secs(1));
        let outcome = r.attempt();
        assert_contested(&outcome, "choria_provision#configure was answered twice");
        assert_eq!(r.metrics.lock_refusals.get(), 0, "{refusal}: not a lock");
        assert_eq!(r.node.count("restart"), 0, "{refusal}");
    }
}

#[test]
fn a_lock_refusal_is_believed_once_its_grace_passed_and_is_counted() {
    let node = FakeNode::answering(&[(
        "configure",
        &[Answer::Status(1, "Could not obtain provisioning lock")],
    )]);
    let r = rig(node, CONFIGURED, |c| {
        c.reply_grace = Duration::from_millis(700)
    });
    let played = r.play(&n1(), Duration::ZERO, None);
    assert!(
        matches!(played.outcome, Outcome::Locked(_)),
        "{}",
        played.outcome
    );
    assert_eq!(r.metrics.lock_refusals.get(), 1);
    let configure_sent = r.node.sent.lock()[1].2;
    assert_eq!(
        played.ended - configure_sent,
        Duration::from_millis(700),
        "believed when its grace ended, not before"
    );
}

#[test]
fn a_different_reply_after_configure_is_a_security_event_naming_what_was_handed_out() {
    let cert = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cert-n1.pem"
    ));
    let helper = format!(
        r#"{{"configuration": {{"identity": "n1.example.net", "plugin.choria.server.provision": "false"}}, "certificate": {}}}"#,
        serde_json::to_string(cert).unwrap()
    );
    // The forged twin of configure's reply comes while restart is out.
    let node = FakeNode::answering(&[
        (
            "configure",
            &[Answer::LateTwin(json!({}), Duration::from_millis(10))],
        ),
        (
            "restart",
            &[Answer::SlowAlone(json!({}), Duration::from_millis(50))],
        ),
    ]);
    let r = rig(node, &helper, |_| {});
    let played = r.play(&n1(), Duration::ZERO, None);
    assert_contested(&played.outcome, "configure was answered twice");
    assert_eq!(r.metrics.contested_after_configure.get(), 1);
    assert_eq!(
        r.metrics
            .contested_replies
            .with_label_values(&["choria_provision#configure"])
            .get(),
        1
    );
    let facts = played.progress.facts();
    let serial = facts
        .certificate_serial
        .clone()
        .expect("the certificate's serial");
    assert!(
        facts
            .retries
            .iter()
            .any(|r| r.contains("contested after configure") && r.contains(&serial)),
        "the audit line names what to revoke: {facts:?}"
    );
}

#[test]
fn requests_stay_watched_until_restart_is_answered() {
    // inventory's forged twin arrives while configure is out: still a contest.
    let node = FakeNode::answering(&[
        (
            "inventory",
            &[Answer::LateTwin(json!({}), Duration::from_millis(400))],
        ),
        (
            "configure",
            &[Answer::SlowAlone(json!({}), Duration::from_secs(1))],
        ),
    ]);
    let r = rig(node, CONFIGURED, |c| {
        c.reply_grace = Duration::from_millis(100)
    });
    let outcome = r.attempt();
    assert_contested(&outcome, "rpcutil#inventory");
    assert_eq!(r.node.count("restart"), 0);
    assert_eq!(r.metrics.contested_after_configure.get(), 1);
}

#[test]
fn an_upgrade_slot_is_given_back_only_by_an_inventory_that_survived_its_grace() {
    let inventory = Answer::Ok(json!({"version": "0.30.2", "upgradable": true}));
    let r = rig(
        FakeNode::answering(&[("inventory", &[inventory])]),
        r#"{"configuration": {"a": "b"}, "upgrade": "0.31.0"}"#,
        |c| {
            c.features.upgrades = true;
            c.upgrades_repository = "https://repo.example.net".into();
            c.upgrades_max_in_flight = Some(1);
            c.reply_grace = Duration::from_secs(1);
        },
    );
    assert_eq!(r.go(&n1()), Outcome::Upgraded);
    assert_eq!(r.sequence.upgrading().len(), 1);
    // A forger answers n1's inventory with the new version; n1 itself (still
    // upgrading) answers later with another reply: the slot stays taken.
    let new = json!({"version": "0.31.0", "upgradable": true});
    r.node.script.lock().insert(
        "inventory".into(),
        [Answer::LateTwin(new, Duration::from_millis(200))]
            .into_iter()
            .collect(),
    );
    let played = r.play(&n1(), Duration::ZERO, None);
    assert!(
        matches!(played.outcome, Outcome::Contested(_)),
        "{}",
        played.outcome
    );
    assert_eq!(
        r.sequence.upgrading().len(),
        1,
        "a forged inventory freed no slot"
    );
}

#[test]
fn a_forged_no_responders_status_is_probed_counted_and_ignored() {
    let node = FakeNode::answering(&[("inventory", &[Answer::ForgedNoResponders(json!({}))])]);
    let r = rig(node, CONFIGURED, |_| {});
    assert_eq!(r.attempt(), Outcome::Done);
    assert_eq!(
        r.metrics
            .rejected_replies
            .with_label_values(&["forged_no_responders"])
            .get(),
        1
    );
    assert_eq!(r.metrics.unreachable_nodes.get(), 0);
}

#[test]
fn a_silent_node_is_woken_only_at_its_deadlines_and_back_offs() {
    let node = FakeNode::answering(&[("inventory", &[Answer::Silent])]);
    let r = rig(node, CONFIGURED, |_| {});
    let played = r.play(&n1(), Duration::ZERO, None);
    assert!(matches!(played.outcome, Outcome::Failed(_)));
    let sent: Vec<Instant> = r.node.sent.lock().iter().map(|(_, _, at)| *at).collect();
    assert_eq!(sent.len(), 5);
    for (n, pair) in sent.windows(2).enumerate() {
        // A 1 s timeout, then FiveSec's step n jittered to [½, 1½).
        let gap = pair[1] - pair[0] - Duration::from_secs(1);
        let step = crate::backoff::FIVE_SEC.step(n + 1);
        assert!(
            gap >= step / 2 && gap < step * 3 / 2,
            "try {}: {gap:?}",
            n + 2
        );
    }
    assert_eq!(played.ended - sent[4], Duration::from_secs(1));
}
