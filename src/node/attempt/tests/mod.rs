//! The attempt's rules, one test each, against a scripted node and a virtual clock:
//! no threads, no sockets, no sleeping. The harness plays the driver: it hands the
//! attempt what the script says the node sent and when, and the time; it checks what
//! the attempt sent. The helper is a real (tiny) shell script, as the driver runs it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{json, Value};

use super::{Attempt, Effect, Incoming, Input, Tag};
use crate::choria::identity::Identity;
use crate::choria::protocol::mcorpc::ReplyData;
use crate::choria::rpc::{Flush, Reply};
use crate::config::{Config, Pause, Secret};
use crate::metrics::Metrics;
use crate::node::outcome::Outcome;
use crate::node::progress::Progress;
use crate::node::sequence::{NodeSequence, Timeouts};

/// What the scripted node answers to one try of one action.
#[derive(Clone)]
enum Answer {
    /// OK with this data.
    Ok(Value),
    /// A non-OK status with this message.
    Status(u64, &'static str),
    /// No reply, ever.
    Silent,
    /// Nobody subscribes to the node's subject (the broker's status; a probe agrees).
    NoResponders,
    /// A forged "no responders" status, then this reply; a probe finds a listener.
    ForgedNoResponders(Value),
    /// OK with this data, and at once a second, different reply in the node's name.
    Contested(Value),
    /// More replies than a request keeps: 3 were dropped unread.
    Flooded,
    /// OK with this data, and a second, different reply this long after the request.
    LateTwin(Value, Duration),
    /// OK with this data, this long after the request.
    SlowAlone(Value, Duration),
    /// A forged refusal at once, then the node's own OK with this data this long
    /// after the request.
    ForgedRefusal(&'static str, Value, Duration),
}

/// A node whose answers are scripted per action (the last one repeats).
#[derive(Default)]
struct FakeNode {
    script: Mutex<HashMap<String, VecDeque<Answer>>>,
    /// Every try sent: its action, its flush and when (virtual).
    sent: Mutex<Vec<(String, Flush, Instant)>>,
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
        self.sent.lock().iter().map(|(a, _, _)| a.clone()).collect()
    }

    fn asked(&self) -> Vec<(String, Flush)> {
        self.sent
            .lock()
            .iter()
            .map(|(a, f, _)| (a.clone(), *f))
            .collect()
    }

    fn count(&self, action: &str) -> usize {
        self.calls().iter().filter(|c| *c == action).count()
    }

    fn next(&self, action: &str) -> Answer {
        let mut script = self.script.lock();
        let queue = script.entry(action.to_string()).or_default();
        if queue.len() > 1 {
            queue.pop_front()
        } else {
            queue.front().cloned()
        }
        .unwrap_or(Answer::Ok(json!({})))
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
        "choria-prov-attempt-{}-{}",
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
    config.reply_grace = Duration::ZERO;
    adjust(&mut config);
    let metrics = Arc::new(Metrics::new("test").unwrap());
    let pause = Arc::new(Pause::new(metrics.paused.clone()));
    let sequence = NodeSequence::new(
        Arc::new(config),
        Arc::clone(&metrics),
        Arc::clone(&pause),
        Timeouts {
            provision: Duration::from_secs(1),
            rpcutil: Duration::from_secs(1),
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

/// Something the script makes arrive for a request at a (virtual) time.
struct Arrival {
    at: Instant,
    order: usize,
    tag: Tag,
    incoming: Incoming,
}

/// One attempt played to its end on a virtual clock.
struct Played {
    outcome: Outcome,
    progress: Arc<Progress>,
    /// When the attempt began.
    began: Instant,
    /// When the helper was asked for, if it was.
    helper_at: Option<Instant>,
    /// When the attempt ended.
    ended: Instant,
}

impl Rig {
    fn attempt(&self) -> Outcome {
        self.play(&n1(), Duration::ZERO, None).outcome
    }

    /// An attempt, and the progress it reported (its retries, its facts).
    fn attempt_reporting(&self) -> (Outcome, Arc<Progress>) {
        let played = self.play(&n1(), Duration::ZERO, None);
        (played.outcome, played.progress)
    }

    fn go(&self, identity: &Identity) -> Outcome {
        self.play(identity, Duration::ZERO, None).outcome
    }

    /// Plays one attempt for `identity`, known for `waited` already; after `stop_at`
    /// turns the daemon stops.
    fn play(&self, identity: &Identity, waited: Duration, stop_at: Option<usize>) -> Played {
        let began = Instant::now() + Duration::from_secs(3600);
        let mut now = began;
        let progress = Arc::new(Progress::new());
        let mut attempt = Attempt::new(identity.clone(), began - waited, Arc::clone(&progress));
        let mut arrivals: Vec<Arrival> = Vec::new();
        let mut order = 0;
        let mut probes: HashMap<Tag, bool> = HashMap::new();
        let mut helper_at = None;
        let mut input = Input::Start;
        for turn_number in 0..10_000 {
            if stop_at == Some(turn_number) {
                input = Input::Stop;
            }
            let turn = attempt.handle(&self.sequence, [input], now, self.pause.paused());
            let mut helper = None;
            for effect in turn.effects {
                match effect {
                    Effect::Send(request) => {
                        self.node.sent.lock().push((
                            request.action.to_string(),
                            request.flush,
                            now,
                        ));
                        let answer = self.node.next(request.action);
                        let mut arrive = |after: Duration, incoming: Incoming| {
                            order += 1;
                            arrivals.push(Arrival {
                                at: now + after,
                                order,
                                tag: request.tag,
                                incoming,
                            });
                        };
                        let ok = |data: &Value| reply(identity, 0, "OK", data);
                        match answer {
                            Answer::Ok(data) => arrive(Duration::ZERO, ok(&data)),
                            Answer::Status(code, msg) => {
                                arrive(Duration::ZERO, reply(identity, code, msg, &json!({})))
                            }
                            Answer::Silent => {}
                            Answer::NoResponders => {
                                probes.insert(request.tag, true);
                                arrive(Duration::ZERO, Incoming::NoResponders);
                            }
                            Answer::ForgedNoResponders(data) => {
                                probes.insert(request.tag, false);
                                arrive(Duration::ZERO, Incoming::NoResponders);
                                arrive(Duration::from_millis(5), ok(&data));
                            }
                            Answer::Contested(data) => {
                                arrive(Duration::ZERO, ok(&data));
                                arrive(Duration::ZERO, ok(&json!({"forged": true})));
                            }
                            Answer::Flooded => arrive(Duration::ZERO, Incoming::Dropped(3)),
                            Answer::LateTwin(data, after) => {
                                arrive(Duration::ZERO, ok(&data));
                                arrive(after, ok(&json!({"forged": true})));
                            }
                            Answer::SlowAlone(data, after) => arrive(after, ok(&data)),
                            Answer::ForgedRefusal(msg, data, after) => {
                                arrive(Duration::ZERO, reply(identity, 1, msg, &json!({})));
                                arrive(after, ok(&data));
                            }
                        }
                    }
                    Effect::Probe(tag) => {
                        order += 1;
                        arrivals.push(Arrival {
                            at: now,
                            order,
                            tag,
                            incoming: Incoming::Probed {
                                nobody: probes.get(&tag).copied().unwrap_or(false),
                            },
                        });
                    }
                    Effect::RunHelper(bytes) => {
                        helper_at = Some(now);
                        let secrets = attempt.secrets(&self.sequence);
                        helper = Some(
                            self.sequence
                                .helper()
                                .run(identity, &bytes, self.pause.paused(), &secrets, None)
                                .map(|run| run.output),
                        );
                    }
                }
            }
            if let Some(outcome) = turn.done {
                return Played {
                    outcome,
                    progress,
                    began,
                    helper_at,
                    ended: now,
                };
            }
            if let Some(result) = helper {
                input = Input::Helper(result);
                continue;
            }
            arrivals.sort_by_key(|a| (a.at, a.order));
            let first_due = arrivals
                .first()
                .is_some_and(|a| turn.wake.is_none_or(|w| a.at <= w));
            if first_due {
                let a = arrivals.remove(0);
                now = now.max(a.at);
                input = Input::Reply {
                    tag: a.tag,
                    incoming: a.incoming,
                };
            } else if let Some(wake) = turn.wake {
                assert!(wake >= now, "a wake in the past: {:?}", now - wake);
                now = wake;
                input = Input::Tick;
            } else {
                panic!("the attempt waits on nothing");
            }
        }
        panic!("the attempt did not end in 10,000 turns");
    }
}

/// A reply in `identity`'s name; its body's bytes differ with its contents.
fn reply(identity: &Identity, code: u64, msg: &str, data: &Value) -> Incoming {
    Incoming::Reply(
        Reply {
            sender: identity.to_string(),
            statuscode: code,
            statusmsg: msg.to_string(),
            // The wire refuses a reply whose data is not an object before the
            // attempt sees it, so a script holds objects only.
            data: ReplyData::from_value(data).expect("scripted data is an object"),
        },
        format!("{code}|{msg}|{data}").into_bytes(),
    )
}

const CONFIGURED: &str = r#"{"configuration": {"identity": "n1.example.net", "plugin.choria.server.provision": "false"}}"#;

fn n1() -> Identity {
    Identity::parse("n1.example.net").unwrap()
}

/// `outcome` is a contest whose message says `what`.
fn assert_contested(outcome: &Outcome, what: &str) {
    assert!(
        matches!(outcome, Outcome::Contested(m) if m.contains(what)),
        "{outcome}"
    );
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
    let outcome = r.play(&n1(), Duration::from_secs(121), None).outcome;
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

/// An attempt whose `configure` the node refuses with `statusmsg`, which must be
/// asked once and not again: the rig and how the attempt ended.
fn configure_refused(statusmsg: &'static str) -> (Rig, Outcome) {
    let node = FakeNode::answering(&[("configure", &[Answer::Status(1, statusmsg)])]);
    let r = rig(node, CONFIGURED, |_| {});
    let outcome = r.attempt();
    assert_eq!(r.node.count("configure"), 1);
    (r, outcome)
}

#[test]
fn a_wrong_token_is_refused_at_once_without_retries() {
    let (_, outcome) = configure_refused("Incorrect provision token supplied");
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome}");
}

#[test]
fn a_node_locked_by_another_provisioner_is_left_to_it_without_an_error() {
    let (r, outcome) = configure_refused("Could not obtain provisioning lock");
    assert!(matches!(outcome, Outcome::Locked(_)), "{outcome}");
    assert!(!outcome.is_error() && !outcome.is_success());
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
    let r = rig(node, CONFIGURED, |c| {
        c.reply_grace = Duration::from_millis(50)
    });
    let outcome = r.attempt();
    assert_contested(&outcome, "rpcutil#inventory was answered twice");
    assert!(outcome.needs_cooldown(), "tried again only later");
    assert_eq!(r.node.calls(), ["inventory"], "no configure was sent");
}

#[test]
fn the_requests_before_the_helper_go_out_together_and_only_the_last_is_flushed() {
    let csr = json!({"csr": include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/csr-n1.pem")), "ssldir": "/ssl"});
    let node = FakeNode::answering(&[("gencsr", &[Answer::Ok(csr)])]);
    let r = rig(node, CONFIGURED, |c| c.features.pki = true);
    assert_eq!(r.attempt(), Outcome::Done);
    assert_eq!(
        r.node.asked()[..2],
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
    assert_eq!(r.node.asked()[0], ("inventory".to_string(), Flush::Now));
}

#[test]
fn a_request_sent_ahead_that_failed_is_tried_again_alone_and_the_other_answer_is_kept() {
    let csr = json!({"csr": include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/csr-n1.pem")), "ssldir": "/ssl"});
    let node = FakeNode::answering(&[
        ("inventory", &[Answer::Silent, Answer::Ok(json!({}))]),
        ("gencsr", &[Answer::Ok(csr)]),
    ]);
    let r = rig(node, CONFIGURED, |c| c.features.pki = true);
    assert_eq!(r.attempt(), Outcome::Done);
    assert_eq!(
        r.node.asked()[..3],
        [
            ("inventory".to_string(), Flush::Later),
            ("gencsr".to_string(), Flush::Now),
            ("inventory".to_string(), Flush::Now),
        ],
        "only the first tries went out together"
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
        assert_contested(&outcome, &format!("#{action} was answered in the name of n1.example.net more often than a node answers (3 replies dropped unread"));
        assert!(outcome.needs_cooldown(), "{action}: tried again only later");
        assert_eq!(
            r.node.calls(),
            expected,
            "{action}: one try, nothing after it"
        );
    }
}

mod graces_and_contests;
