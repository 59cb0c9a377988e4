//! The sequence's rules, one test each, against a scripted fake node: no broker, no
//! simulator. The helper is a real (tiny) shell script, as the sequence runs it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{json, Value};

use super::{NodeSequence, Timeouts};
use crate::choria::identity::Identity;
use crate::choria::protocol::mcorpc::{ReplyData, RequestData};
use crate::choria::rpc::{Contest, Contested, Flush, Reply, RpcError};
use crate::config::{Config, Pause, Secret};
use crate::host::node_rpc::{AskedRpc, Called, NodeRpc, ReplyWatch};
use crate::host::outcome::Outcome;
use crate::metrics::Metrics;

/// What the fake node answers to one try of one action.
#[derive(Clone)]
enum Answer {
    /// OK with this data.
    Ok(Value),
    /// A non-OK status with this message.
    Status(u64, &'static str),
    /// No reply in time.
    Silent,
    /// Nobody subscribes to the node's subject.
    NoResponders,
    /// OK with this data, and a second, different reply in the node's name.
    Contested(Value),
    /// More replies than a request keeps: some were dropped unread while waiting.
    Flooded,
    /// OK with this data, and a second, different reply this long after it; its
    /// watch waits as a real one does.
    LateTwin(Value, Duration),
    /// OK with this data and no second reply; its watch waits as a real one does.
    Alone(Value),
    /// As `Alone`, the reply arriving this long after the request.
    SlowAlone(Value, Duration),
}

/// A node whose answers are scripted per action (the last one repeats).
#[derive(Default)]
struct FakeNode {
    script: Mutex<HashMap<String, VecDeque<Answer>>>,
    calls: Mutex<Vec<String>>,
    /// The tries sent ahead (`NodeRpc::ask`), with their flush.
    asked: Mutex<Vec<(String, Flush)>>,
}

struct FakeWatch {
    at: Instant,
    /// The forged twin and when it arrives after the accepted reply (`ZERO`: already
    /// there).
    twin: Option<(Contested, Duration)>,
    /// Whether `settle` reads until its deadline, as the real watch does (off for the
    /// plain answers, so that the other tests do not wait out the graces).
    waits: bool,
}

impl ReplyWatch for FakeWatch {
    fn asked_at(&self) -> Instant {
        self.at
    }

    /// As the real watch: a twin that arrived by `until`, or by now if later, stops
    /// the attempt (once it has arrived); otherwise the watch reads until `until`.
    fn settle(&self, until: Instant) -> Result<(), Contested> {
        let deadline = until.max(Instant::now());
        match &self.twin {
            Some((contested, after)) if self.at + *after <= deadline => {
                std::thread::sleep((self.at + *after).saturating_duration_since(Instant::now()));
                Err(contested.clone())
            }
            _ => {
                if self.waits {
                    std::thread::sleep(until.saturating_duration_since(Instant::now()));
                }
                Ok(())
            }
        }
    }
}

impl FakeNode {
    fn answering(script: &[(&'static str, &[Answer])]) -> Arc<FakeNode> {
        let node = FakeNode::default();
        for (action, answers) in script {
            node.script
                .lock()
                .insert(action.to_string(), answers.iter().cloned().collect());
        }
        Arc::new(node)
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().clone()
    }

    fn asked(&self) -> Vec<(String, Flush)> {
        self.asked.lock().clone()
    }

    fn count(&self, action: &str) -> usize {
        self.calls().iter().filter(|c| *c == action).count()
    }
}

impl NodeRpc for FakeNode {
    fn call(
        &self,
        identity: &Identity,
        agent: &str,
        action: &str,
        _data: &dyn RequestData,
        _timeout: Duration,
    ) -> Result<Called<'_>, RpcError> {
        self.calls.lock().push(action.to_string());
        let answer = {
            let mut script = self.script.lock();
            let queue = script.entry(action.to_string()).or_default();
            if queue.len() > 1 {
                queue.pop_front()
            } else {
                queue.front().cloned()
            }
        }
        .unwrap_or(Answer::Ok(json!({})));
        let reply = |statuscode, statusmsg: &str, data: Value| Reply {
            sender: identity.to_string(),
            statuscode,
            statusmsg: statusmsg.to_string(),
            // The wire refuses a reply whose data is not an object before the
            // sequence sees it, so a script holds objects only.
            data: ReplyData::from_value(&data).expect("scripted data is an object"),
        };
        let asked = Instant::now();
        let watch = |twin, waits| -> Box<dyn ReplyWatch> {
            Box::new(FakeWatch {
                at: asked,
                twin,
                waits,
            })
        };
        let forged = || Contested {
            identity: identity.clone(),
            rpc: format!("{agent}#{action}"),
            why: Contest::Different,
        };
        match answer {
            Answer::Ok(data) => Ok(Called {
                reply: reply(0, "OK", data),
                watch: watch(None, false),
            }),
            Answer::Status(code, msg) => Ok(Called {
                reply: reply(code, msg, json!({})),
                watch: watch(None, false),
            }),
            Answer::Silent => Err(RpcError::NoReply {
                identity: identity.clone(),
                waited: Duration::from_millis(1),
                rejected: None,
            }),
            Answer::NoResponders => Err(RpcError::NoResponders {
                identity: identity.clone(),
            }),
            Answer::Flooded => Err(RpcError::Contested(Contested {
                why: Contest::Flooded { dropped: 3 },
                ..forged()
            })),
            Answer::Contested(data) => Ok(Called {
                reply: reply(0, "OK", data),
                watch: watch(Some((forged(), Duration::ZERO)), false),
            }),
            Answer::LateTwin(data, after) => Ok(Called {
                reply: reply(0, "OK", data),
                watch: watch(Some((forged(), after)), true),
            }),
            Answer::Alone(data) => Ok(Called {
                reply: reply(0, "OK", data),
                watch: watch(None, true),
            }),
            Answer::SlowAlone(data, after) => {
                std::thread::sleep(after);
                Ok(Called {
                    reply: reply(0, "OK", data),
                    watch: watch(None, true),
                })
            }
        }
    }

    /// Records the call and makes its answer now, as `call` does (a sent request's
    /// answer is fixed by the script, whenever it is read).
    fn ask(
        &self,
        identity: &Identity,
        agent: &'static str,
        action: &'static str,
        data: &dyn RequestData,
        timeout: Duration,
        flush: Flush,
    ) -> Result<Box<dyn AskedRpc<'_> + '_>, RpcError> {
        self.asked.lock().push((action.to_string(), flush));
        Ok(Box::new(FakeAsked(
            self.call(identity, agent, action, data, timeout),
        )))
    }
}

/// A fake try sent ahead: its scripted answer, made when it was asked.
struct FakeAsked<'a>(Result<Called<'a>, RpcError>);

impl<'a> AskedRpc<'a> for FakeAsked<'a> {
    fn answer(self: Box<Self>) -> Result<Called<'a>, RpcError> {
        self.0
    }
}

/// A sequence for the fake `node`, with a helper that prints `helper_json`.
struct Rig {
    sequence: NodeSequence,
    node: Arc<FakeNode>,
    metrics: Arc<Metrics>,
    pause: Arc<Pause>,
    dir: std::path::PathBuf,
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn rig(node: Arc<FakeNode>, helper_json: &str, adjust: impl FnOnce(&mut Config)) -> Rig {
    use std::os::unix::fs::PermissionsExt;
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "choria-prov-seq-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let helper = dir.join("helper.sh");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\ncat >'{}'\ncat <<'EOF'\n{helper_json}\nEOF\n",
            dir.join("input.json").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut config = Config::defaults(&dir.join("p.yaml"));
    config.helper = helper.display().to_string();
    config.helper_timeout = Duration::from_secs(5);
    config.token = Secret::new("s3cret");
    config.features.pki = false;
    config.features.jwt = false;
    adjust(&mut config);
    let metrics = Arc::new(Metrics::new("test").unwrap());
    let pause = Arc::new(Pause::new(metrics.paused.clone()));
    let sequence = NodeSequence::new(
        Arc::new(config),
        Arc::clone(&node) as Arc<dyn NodeRpc>,
        Arc::clone(&metrics),
        Arc::clone(&pause),
        Timeouts {
            provision: Duration::from_secs(1),
            rpcutil: Duration::from_secs(1),
            reply_grace: Duration::ZERO,
        },
    )
    .unwrap();
    Rig {
        sequence,
        node,
        metrics,
        pause,
        dir,
    }
}

const CONFIGURED: &str = r#"{"configuration": {"identity": "n1.example.net", "plugin.choria.server.provision": "false"}}"#;

fn n1() -> Identity {
    Identity::parse("n1.example.net").unwrap()
}

impl Rig {
    fn attempt(&self) -> Outcome {
        self.sequence
            .provision(&n1(), Instant::now(), &AtomicBool::new(false))
    }

    /// An attempt, and the progress it reported (its retries, its facts).
    fn attempt_reporting(&self) -> (Outcome, crate::host::progress::Progress) {
        let progress = crate::host::progress::Progress::new();
        let outcome =
            self.sequence
                .provision_with(&n1(), Instant::now(), &AtomicBool::new(false), &progress);
        (outcome, progress)
    }
}

#[test]
fn a_plain_node_is_inventoried_configured_and_restarted() {
    let r = rig(FakeNode::answering(&[]), CONFIGURED, |_| {});
    assert_eq!(r.attempt(), Outcome::Done);
    assert_eq!(r.node.calls(), ["inventory", "configure", "restart"]);
}

#[test]
fn the_helper_gets_the_inventory_as_go_rewrites_it_and_a_mistyped_field_is_retried() {
    let node = FakeNode::answering(&[(
        "inventory",
        &[
            Answer::Ok(json!({"version": 5})),
            Answer::Ok(json!({
                "version": "0.30.2",
                "facts": {"b": 1.0, "a": {"d": 2, "c": 1e21}, "<": "&"},
                "agents": ["z", "a"],
            })),
        ],
    )]);
    let r = rig(node, CONFIGURED, |_| {});
    let (outcome, progress) = r.attempt_reporting();
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(r.node.count("inventory"), 2);
    let retries = progress.facts().retries;
    assert_eq!(retries.len(), 1);
    assert!(
        retries[0].starts_with(
            "rpcutil#inventory try 1/5: inventory reply data: invalid type: integer, expected a string"
        ),
        "{retries:?}"
    );
    let input: Value =
        serde_json::from_slice(&std::fs::read(r.dir.join("input.json")).unwrap()).unwrap();
    assert_eq!(
        input["inventory"],
        r#"{"agents":["z","a"],"facts":{"\u003c":"\u0026","a":{"c":1e+21,"d":2},"b":1},"upgradable":false,"version":"0.30.2"}"#,
        "keys sorted at every depth, numbers as Go's float64, upgradable added"
    );
}

#[test]
fn a_node_waiting_longer_than_twice_the_interval_is_stale_and_not_asked() {
    let r = rig(FakeNode::answering(&[]), CONFIGURED, |c| {
        c.interval = Duration::from_secs(60)
    });
    let since = Instant::now() - Duration::from_secs(121);
    let outcome = r.sequence.provision(&n1(), since, &AtomicBool::new(false));
    assert_eq!(
        outcome,
        Outcome::Stale("skipping node that's been waiting 121s".into())
    );
    assert!(r.node.calls().is_empty());
}

#[test]
fn a_deferral_is_an_outcome_not_a_failure_and_configures_nothing() {
    let r = rig(
        FakeNode::answering(&[]),
        r#"{"defer": true, "msg": "not in the CMDB yet"}"#,
        |_| {},
    );
    assert_eq!(r.attempt(), Outcome::Deferred("not in the CMDB yet".into()));
    assert_eq!(r.node.calls(), ["inventory"]);
}

#[test]
fn a_helper_shutdown_shuts_the_node_down_and_counts_it() {
    let r = rig(
        FakeNode::answering(&[]),
        r#"{"shutdown": true, "msg": "retired"}"#,
        |_| {},
    );
    assert_eq!(r.attempt(), Outcome::ShutDown);
    assert_eq!(r.node.calls(), ["inventory", "shutdown"]);
    assert_eq!(r.metrics.helper_shutdown_requests.get(), 1);
}

#[test]
fn a_refused_shutdown_is_a_failure_not_a_success() {
    let node = FakeNode::answering(&[("shutdown", &[Answer::Status(5, "disk on fire")])]);
    let r = rig(node, r#"{"shutdown": true}"#, |_| {});
    let outcome = r.attempt();
    assert!(
        matches!(&outcome, Outcome::Failed(m) if m.contains("disk on fire")),
        "{outcome}"
    );
    assert_eq!(r.metrics.helper_shutdown_requests.get(), 0);
}

#[test]
fn a_non_ok_status_is_retried_until_it_succeeds() {
    let node = FakeNode::answering(&[(
        "inventory",
        &[Answer::Status(5, "busy"), Answer::Ok(json!({}))],
    )]);
    let r = rig(node, CONFIGURED, |_| {});
    let (outcome, progress) = r.attempt_reporting();
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(r.node.count("inventory"), 2);
    assert_eq!(
        progress.facts().retries,
        ["rpcutil#inventory try 1/5: invalid response from n1.example.net: busy (5)"],
        "why it took long is kept"
    );
}

#[test]
fn a_node_echoing_the_token_does_not_get_it_into_texts_we_show() {
    let node = FakeNode::answering(&[(
        "inventory",
        &[
            Answer::Status(5, "busy, token was s3cret"),
            Answer::Ok(json!({})),
        ],
    )]);
    let r = rig(node, r#"{"defer": true, "msg": "s3cret is wrong"}"#, |_| {});
    let (outcome, progress) = r.attempt_reporting();
    assert_eq!(outcome, Outcome::Deferred("*** is wrong".into()));
    let facts = progress.facts();
    assert_eq!(facts.helper_msg.as_deref(), Some("*** is wrong"));
    assert!(
        facts.retries[0].ends_with("busy, token was *** (5)"),
        "{facts:?}"
    );
    // A refusal no retry changes: failed at once, the node's words in the error.
    let failing = FakeNode::answering(&[(
        "configure",
        &[Answer::Status(
            1,
            "Incorrect provision token supplied: s3cret",
        )],
    )]);
    let r = rig(failing, CONFIGURED, |_| {});
    let outcome = r.attempt().to_string();
    assert!(
        !outcome.contains("s3cret") && outcome.contains("token supplied: ***"),
        "{outcome}"
    );
}

#[test]
fn a_silent_node_is_tried_five_times_for_inventory_then_fails_naming_the_tries() {
    let node = FakeNode::answering(&[("inventory", &[Answer::Silent])]);
    let r = rig(node, CONFIGURED, |_| {});
    let outcome = r.attempt();
    assert!(
        matches!(&outcome, Outcome::Failed(m) if m.starts_with("rpcutil#inventory failed for n1.example.net after 5 tries")),
        "{outcome}"
    );
    assert_eq!(r.node.count("inventory"), 5);
    assert_eq!(
        r.metrics
            .rpc_errors
            .with_label_values(&["rpcutil#inventory"])
            .get(),
        1
    );
}

#[test]
fn a_wrong_token_is_refused_at_once_without_retries() {
    let node = FakeNode::answering(&[(
        "configure",
        &[Answer::Status(1, "Incorrect provision token supplied")],
    )]);
    let r = rig(node, CONFIGURED, |_| {});
    assert!(matches!(r.attempt(), Outcome::Failed(_)));
    assert_eq!(r.node.count("configure"), 1);
}

#[test]
fn a_node_locked_by_another_provisioner_is_left_to_it_without_an_error() {
    let node = FakeNode::answering(&[(
        "configure",
        &[Answer::Status(1, "Could not obtain provisioning lock")],
    )]);
    let r = rig(node, CONFIGURED, |_| {});
    let outcome = r.attempt();
    assert!(matches!(outcome, Outcome::Locked(_)), "{outcome}");
    assert!(!outcome.is_error() && !outcome.is_success());
    assert_eq!(r.node.count("configure"), 1);
    assert_eq!(
        r.metrics
            .rpc_errors
            .with_label_values(&["choria_provision#configure"])
            .get(),
        0
    );
}

#[test]
fn a_node_nobody_listens_for_is_unreachable_after_one_try() {
    let node = FakeNode::answering(&[("inventory", &[Answer::NoResponders])]);
    let r = rig(node, CONFIGURED, |_| {});
    let outcome = r.attempt();
    assert!(matches!(outcome, Outcome::Unreachable(_)), "{outcome}");
    assert!(!outcome.is_error());
    assert_eq!(r.node.calls(), ["inventory"]);
}

#[test]
fn a_contested_reply_stops_the_attempt_before_configure() {
    let node = FakeNode::answering(&[("inventory", &[Answer::Contested(json!({}))])]);
    let r = rig(node, CONFIGURED, |_| {});
    let outcome = r.attempt();
    assert!(
        matches!(&outcome, Outcome::Contested(m) if m.contains("rpcutil#inventory was answered twice")),
        "{outcome}"
    );
    assert!(outcome.needs_cooldown(), "tried again only later");
    assert_eq!(r.node.calls(), ["inventory"], "no configure was sent");
}

#[test]
fn the_requests_before_the_helper_go_out_together_and_only_the_last_is_flushed() {
    let csr = json!({"csr": include_str!("../../tests/fixtures/csr-n1.pem"), "ssldir": "/ssl"});
    let node = FakeNode::answering(&[("gencsr", &[Answer::Ok(csr)])]);
    let r = rig(node, CONFIGURED, |c| c.features.pki = true);
    assert_eq!(r.attempt(), Outcome::Done);
    assert_eq!(
        r.node.asked(),
        [
            ("inventory".to_string(), Flush::Later),
            ("gencsr".to_string(), Flush::Now)
        ]
    );
    assert_eq!(
        r.node.calls(),
        ["inventory", "gencsr", "configure", "restart"]
    );
    // Without a feature, inventory alone goes out ahead, flushed at once.
    let r = rig(FakeNode::answering(&[]), CONFIGURED, |_| {});
    assert_eq!(r.attempt(), Outcome::Done);
    assert_eq!(r.node.asked(), [("inventory".to_string(), Flush::Now)]);
}

#[test]
fn a_request_sent_ahead_that_failed_is_tried_again_alone_and_the_other_answer_is_kept() {
    let csr = json!({"csr": include_str!("../../tests/fixtures/csr-n1.pem"), "ssldir": "/ssl"});
    let node = FakeNode::answering(&[
        ("inventory", &[Answer::Silent, Answer::Ok(json!({}))]),
        ("gencsr", &[Answer::Ok(csr)]),
    ]);
    let r = rig(node, CONFIGURED, |c| c.features.pki = true);
    assert_eq!(r.attempt(), Outcome::Done);
    assert_eq!(
        r.node.asked().len(),
        2,
        "only the first tries went out ahead"
    );
    assert_eq!(
        r.node.calls(),
        ["inventory", "gencsr", "inventory", "configure", "restart"],
        "gencsr's answer, sent ahead, was read after inventory's second try"
    );
}

#[test]
fn a_flooded_call_stops_the_attempt_at_once_and_is_not_retried() {
    for (action, expected) in [
        ("inventory", &["inventory"][..]),
        ("configure", &["inventory", "configure"][..]),
        ("restart", &["inventory", "configure", "restart"][..]),
    ] {
        let node = FakeNode::answering(&[(action, &[Answer::Flooded])]);
        let r = rig(node, CONFIGURED, |_| {});
        let outcome = r.attempt();
        assert!(
            matches!(&outcome, Outcome::Contested(m) if m.contains(&format!("#{action} was answered in the name of n1.example.net more often than a node answers (3 replies dropped unread"))),
            "{action}: {outcome}"
        );
        assert!(outcome.needs_cooldown(), "{action}: tried again only later");
        assert_eq!(
            r.node.calls(),
            expected,
            "{action}: one try, nothing after it"
        );
    }
}

/// A pki node whose `gencsr` (or `inventory`) reply gets a forged twin 600 ms later,
/// with `csr_reply_grace` of `csr_grace` and a reply grace of 50 ms.
fn late_twin(action: &'static str, csr_grace: Duration) -> (Rig, Outcome) {
    let csr = json!({"csr": include_str!("../../tests/fixtures/csr-n1.pem"), "ssldir": "/ssl"});
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
    let mut r = rig(FakeNode::answering(&script), CONFIGURED, |c| {
        c.features.pki = true;
        c.csr_reply_grace = csr_grace;
    });
    r.sequence.timeouts.reply_grace = Duration::from_millis(50);
    let outcome = r.attempt();
    (r, outcome)
}

#[test]
fn a_gencsr_twin_later_than_the_reply_grace_but_within_csr_reply_grace_stops_the_attempt() {
    // A real node answers gencsr only once it has made its key; a forger at once.
    let (r, outcome) = late_twin("gencsr", Duration::from_secs(2));
    assert!(
        matches!(&outcome, Outcome::Contested(m) if m.contains("choria_provision#gencsr was answered twice")),
        "{outcome}"
    );
    assert_eq!(r.node.count("configure"), 0, "no certificate was sent");
    // With a csr_reply_grace shorter than the twin, the attempt goes on: the longer
    // grace is what catches it.
    let (r, outcome) = late_twin("gencsr", Duration::from_millis(100));
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(r.node.count("configure"), 1);
    // A prompt reply's twin is awaited only for the reply grace, not csr_reply_grace.
    let (r, outcome) = late_twin("inventory", Duration::from_secs(2));
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(r.node.count("configure"), 1);
}

#[test]
fn a_lone_gencsr_reply_is_watched_for_csr_reply_grace_while_the_helper_runs() {
    let csr = json!({"csr": include_str!("../../tests/fixtures/csr-n1.pem"), "ssldir": "/ssl"});
    let r = rig(
        FakeNode::answering(&[("gencsr", &[Answer::Alone(csr)])]),
        CONFIGURED,
        |c| {
            c.features.pki = true;
            c.csr_reply_grace = Duration::from_secs(1);
            c.helper = format!("sh -c 'sleep 0.8; exec {}'", c.helper);
        },
    );
    let started = Instant::now();
    assert_eq!(r.attempt(), Outcome::Done);
    let took = started.elapsed();
    assert_eq!(r.node.count("configure"), 1, "the certificate was sent");
    assert!(
        took >= Duration::from_secs(1),
        "configured before csr_reply_grace ended: {took:?}"
    );
    // One after the other, the 0.8 s helper and the 1 s grace would take 1.8 s.
    assert!(
        took < Duration::from_millis(1700),
        "the grace did not run while the helper ran: {took:?}"
    );
}

#[test]
fn the_reply_grace_counts_from_the_request_so_a_slow_reply_does_not_add_to_it() {
    // The real node answers in its own time after it was asked, whoever answered
    // first: the grace covers the round trip instead of following it.
    let slow = Duration::from_millis(300);
    let inventory = json!({"version": "0.30.2"});
    let mut r = rig(
        FakeNode::answering(&[("inventory", &[Answer::SlowAlone(inventory, slow)])]),
        CONFIGURED,
        |_| {},
    );
    r.sequence.timeouts.reply_grace = Duration::from_millis(500);
    let started = Instant::now();
    assert_eq!(r.attempt(), Outcome::Done);
    let took = started.elapsed();
    assert_eq!(r.node.calls(), ["inventory", "configure", "restart"]);
    assert!(
        took >= Duration::from_millis(500),
        "configured before the grace ended: {took:?}"
    );
    // Counted from the reply, the grace would have ended at 800 ms.
    assert!(
        took < Duration::from_millis(750),
        "the grace was counted from the reply: {took:?}"
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
    let cases: [UpgradeCase; 5] = [
        (
            "a newer version is installed and the node comes back",
            upgrade("0.30.2", true),
            false,
            &["inventory", "release_update"],
            |o| *o == Outcome::Upgraded,
        ),
        (
            "the same version is skipped and the node configured",
            upgrade("0.31.0", true),
            false,
            &["inventory", "configure", "restart"],
            |o| *o == Outcome::Done,
        ),
        (
            "a node that cannot upgrade fails",
            upgrade("0.30.2", false),
            false,
            &["inventory"],
            |o| matches!(o, Outcome::Failed(m) if m.contains("does not support upgrades")),
        ),
        (
            "a node that cannot upgrade is configured when upgrades are optional",
            upgrade("0.30.2", false),
            true,
            &["inventory", "configure", "restart"],
            |o| *o == Outcome::Done,
        ),
        (
            "no version in inventory fails",
            Answer::Ok(json!({})),
            false,
            &["inventory"],
            |o| matches!(o, Outcome::Failed(m) if m.contains("did not receive a version")),
        ),
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
    let outcome = r
        .sequence
        .provision(&n1(), Instant::now(), &AtomicBool::new(true));
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
    let go = |id: &Identity| {
        r.sequence
            .provision(id, Instant::now(), &AtomicBool::new(false))
    };
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
    let progress = crate::host::progress::Progress::new();
    assert!(matches!(
        r.sequence
            .provision_with(&n2, Instant::now(), &AtomicBool::new(false), &progress),
        Outcome::UpgradeWaiting(_)
    ));
    assert_eq!(progress.position().step, "upgrade");
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
    let go = || {
        r.sequence
            .provision(&n1(), Instant::now(), &AtomicBool::new(false))
    };
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
    let stamp = crate::host::loop_check::HelperStamp::of(&r.dir.join("helper.sh"));
    assert!(
        !r.sequence
            .loops
            .first(&stamp, "plugin.choria.server.provision"),
        "already warned for this helper version"
    );
}
