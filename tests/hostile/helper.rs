//! Hostile helpers in a real run: one daemon against a real nats-server and two
//! simulated fleets, `honest-*` and `evil-*`, with one helper script that misbehaves
//! for the `evil-*` identities and answers properly for the others.
//!
//! Each test asserts the specific error in the log, the counters, that the broker
//! connection stayed up (connected, no reconnection counted), that the honest
//! nodes were provisioned exactly once in the same run, and that no secret reached
//! any log line. Every identity carries a domain only its test uses, so tests running
//! in parallel in this process read only their own log lines.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use choria_provisioner::fleet::daemon::DaemonOptions;
use choria_provisioner::sim::{Phase, Sim, SimOptions};

use crate::support::daemon::{example_helper, InProcess};
use crate::support::rig::{hex, public_of};
use crate::support::{logs, NatsServer, TempDir};

/// The provisioning token. Its `"`, `/` and `<` make its JSON-escaped forms differ
/// from it, so a helper echoing its input shows the token only escaped.
const TOKEN: &str = r#"Zq9x<T0k3n>/S3cr3t"q"#;

/// The token as serde_json writes it inside a string (as the helper receives it).
const TOKEN_IN_JSON: &str = r#"Zq9x<T0k3n>/S3cr3t\"q"#;

/// Signs the nodes' provisioning JWTs (whose `cht` is [`TOKEN`]).
const ISSUER_SEED: [u8; 32] = [5; 32];

const HONEST: usize = 6;
const HOSTILE: usize = 2;

fn issuer_public_hex() -> String {
    hex(&public_of(&ISSUER_SEED))
}

/// One daemon run with honest and hostile nodes.
struct Run {
    domain: String,
    helper: PathBuf,
    honest: Sim,
    _hostile: Sim,
    prov: InProcess,
    dir: TempDir,
    _server: NatsServer,
}

/// Starts a run whose helper executes `hostile` (shell, with the input in `$input`
/// and this run's scratch directory in `$dir`) for `evil-*` nodes; it must exit.
fn start(test: &str, hostile: &str, helper_timeout: &str) -> Run {
    logs::capture();
    let server = NatsServer::start();
    let dir = TempDir::new(&format!("hostile-{test}"));
    let domain = format!("{}.hostile.test", test.replace('_', "-"));
    let helper = dir.script(
        "helper.sh",
        &format!(
            "#!/bin/sh\ninput=$(cat)\ndir='{}'\ncase \"$input\" in\n'{{\"identity\":\"evil-'*)\n{hostile}\n;;\nesac\nprintf '%s' \"$input\" | exec {}\n",
            dir.path().display(),
            example_helper().display()
        ),
    );
    let fleet = |prefix: &str, nodes: usize| {
        Sim::start(
            &server.url(),
            SimOptions {
                nodes,
                prefix: prefix.into(),
                domain: domain.clone(),
                token: TOKEN.into(),
                issuer_seed: Some(ISSUER_SEED),
                restart_delay: Duration::from_millis(300),
                ..SimOptions::default()
            },
        )
        .unwrap()
    };
    let honest = fleet("honest-", HONEST);
    let hostile = fleet("evil-", HOSTILE);
    let yaml = format!(
        "workers: 6\nhelper: {}\nhelper_timeout: {helper_timeout}\ntoken: '{TOKEN}'\n\
         features: {{jwt: true}}\njwt_verify_cert: {}\n",
        helper.display(),
        issuer_public_hex()
    );
    let options = DaemonOptions {
        cooldown: Duration::from_secs(3),
        interval: Some(Duration::from_secs(2)),
        ..DaemonOptions::default()
    };
    let prov = InProcess::start(&server.url(), "p1.test", &yaml, options);
    Run {
        domain,
        helper,
        honest,
        _hostile: hostile,
        prov,
        dir,
        _server: server,
    }
}

/// What a finished run showed.
struct Seen {
    /// The `Provisioning evil-… failed: …` lines.
    failures: Vec<String>,
    /// Every log line of this run.
    lines: Vec<String>,
    helper_errors: u64,
    provision_errors: u64,
    provisioned: u64,
    helper_timeouts: u64,
    outcome_provisioned: u64,
    outcome_failed: u64,
    took: Duration,
    /// The run's scratch directory, kept for what the helper wrote there.
    dir: TempDir,
}

impl Run {
    fn evil(&self, n: usize) -> String {
        format!("evil-{n:05}.{}", self.domain)
    }

    /// Waits (10 s at most) until every honest node is provisioned and each hostile
    /// one failed at least once, checks the connection, stops the daemon and checks
    /// the honest nodes were provisioned exactly once.
    fn finish(mut self) -> Seen {
        let started = Instant::now();
        let failed_all = || {
            (0..HOSTILE).all(|n| {
                !logs::lines_with(&format!("Provisioning {} failed: ", self.evil(n))).is_empty()
            })
        };
        while !(self.honest.progress().provisioned == HONEST as u64 && failed_all()) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "after 10 s: {} of {HONEST} honest nodes provisioned; failures: {:?}",
                self.honest.progress().provisioned,
                logs::lines_with("failed: could not invoke configure helper: ")
                    .into_iter()
                    .filter(|l| l.contains(&self.domain))
                    .map(|l| l.chars().take(300).collect::<String>())
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let took = started.elapsed();
        assert!(
            self.prov.daemon().connection().is_connected(),
            "the broker connection is up"
        );
        assert!(self.prov.stop(), "a clean stop");
        let metrics = &self.prov.metrics;
        let reconnections: f64 = metrics
            .render()
            .lines()
            .filter(|l| l.starts_with("choria_connector_reconnections{"))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum();
        assert_eq!(reconnections, 0.0, "no reconnection");
        for node in self.honest.summary().nodes {
            assert_eq!(node.phase, Phase::Provisioned, "{}", node.identity);
            assert_eq!(node.restarts, 1, "{}: {:?}", node.identity, node.rpcs);
        }
        let lines = logs::lines_with(&self.domain);
        assert!(
            !lines
                .iter()
                .any(|l| l.contains("failed") && l.contains("honest-")),
            "no honest node failed: {lines:?}"
        );
        let mut failures = Vec::new();
        for n in 0..HOSTILE {
            failures.extend(logs::lines_with(&format!(
                "Provisioning {} failed: ",
                self.evil(n)
            )));
        }
        Seen {
            failures,
            lines,
            helper_errors: metrics.helper_errors.get(),
            provision_errors: metrics.provision_errors.get(),
            provisioned: metrics.provisioned.get(),
            helper_timeouts: metrics.helper_timeouts.get(),
            outcome_provisioned: metrics.outcomes.with_label_values(&["provisioned"]).get(),
            outcome_failed: metrics.outcomes.with_label_values(&["failed"]).get(),
            took,
            dir: self.dir,
        }
    }

    /// `could not invoke configure helper: <what>` as the log shows it for `evil-*`.
    fn helper_failure(&self, what: &str) -> String {
        format!(
            "failed: could not invoke configure helper: {}",
            what.replace("{helper}", &self.helper.display().to_string())
        )
    }
}

impl Seen {
    /// Every hostile failure is `expected` (or the shutdown's kill of a run in
    /// progress), each hostile node failed, and the counters agree.
    fn assert_failures(&self, expected: &str) {
        let specific = self
            .failures
            .iter()
            .filter(|l| l.contains(expected))
            .count();
        for line in &self.failures {
            assert!(
                line.contains(expected) || line.contains("shutting down"),
                "unexpected failure: {:.400}",
                line
            );
        }
        assert!(specific >= HOSTILE, "{specific} failures `{expected}`");
        assert!(
            self.helper_errors >= specific as u64,
            "helper_errors {} counts every helper failure ({specific})",
            self.helper_errors
        );
        assert!(
            self.provision_errors >= self.helper_errors,
            "provision_errors {} >= helper_errors {}",
            self.provision_errors,
            self.helper_errors
        );
        assert_eq!(self.provisioned, HONEST as u64, "only the honest nodes");
        assert_eq!(
            self.outcome_provisioned, self.provisioned,
            "outcomes{{provisioned}} agrees with provisioned"
        );
        assert!(
            self.outcome_failed >= specific as u64,
            "outcomes{{failed}} {} counts every failed attempt ({specific})",
            self.outcome_failed
        );
        assert!(self.took < Duration::from_secs(10), "{:?}", self.took);
    }

    /// No line of the run holds the token, any JSON form of it, or its first
    /// `prefix` characters.
    fn assert_no_token(&self, prefix: usize) {
        for line in logs::all_lines() {
            assert!(
                !line.contains(TOKEN)
                    && !line.contains(TOKEN_IN_JSON)
                    && !line.contains(&TOKEN[..prefix]),
                "a secret in the log: {:.300}",
                line
            );
        }
    }
}

#[test]
fn a_helper_writing_5_mb_to_stdout_is_refused_at_the_cap() {
    let run = start(
        "stdout_5mb",
        "head -c 5000000 /dev/zero | tr '\\0' x\nexit 0",
        "5s",
    );
    let expected =
        run.helper_failure("cannot read {helper} output: more than 4194304 bytes received");
    let seen = run.finish();
    seen.assert_failures(&expected);
}

#[test]
fn a_helper_writing_100_mb_to_stderr_is_drained_and_logged_within_the_cap() {
    let run = start(
        "stderr_100mb",
        "head -c 100000000 /dev/zero | tr '\\0' e >&2\nexit 3",
        "10s",
    );
    let expected = run.helper_failure("could not wait for {helper}: exit status 3");
    let evil = run.evil(0);
    let seen = run.finish();
    seen.assert_failures(&expected);
    let dropped: Vec<&String> = seen
        .lines
        .iter()
        .filter(|l| l.contains(&format!("for {evil} wrote more than 16384 bytes to stderr")))
        .collect();
    assert!(!dropped.is_empty(), "the truncation is said");
    let kept: usize = seen
        .lines
        .iter()
        .filter(|l| l.contains(&format!("for {evil} wrote to stderr: ")))
        .map(|l| l.matches('e').count())
        .sum();
    assert!(
        kept <= dropped.len() * (16384 + 100),
        "at most 16 KiB of stderr logged per run: {kept} bytes for {} runs",
        dropped.len()
    );
}

#[test]
fn a_helper_writing_nothing_and_exiting_0_is_zero_bytes() {
    let run = start("nothing", "exit 0", "5s");
    let expected = run.helper_failure("cannot read {helper} output: zero bytes received");
    run.finish().assert_failures(&expected);
}

#[test]
fn a_helper_writing_invalid_json_with_the_token_leaks_it_nowhere() {
    // The helper echoes its input to stderr (the token JSON-escaped in `jwt.cht`),
    // pads stderr so that the capture ends 6 characters into the raw token, and
    // answers with the token where a boolean belongs.
    let hostile = format!(
        "printf '%s\\n' \"$input\" >&2\n\
         n=$(printf '%s\\n' \"$input\" | wc -c)\n\
         head -c $((16384 - n - 6)) /dev/zero | tr '\\0' f >&2\n\
         printf '%s' '{token}' >&2\n\
         printf '{{\"msg\": \"%s\", \"defer\": \"%s\"}}' '{escaped}' '{escaped}'\n\
         exit 0",
        token = TOKEN.replace('\'', r"'\''"),
        escaped = TOKEN_IN_JSON.replace('\'', r"'\''"),
    );
    let run = start("token_json", &hostile, "5s");
    let expected = run.helper_failure(
        "cannot decode output from {helper}: field \"defer\": invalid type: string, expected a boolean",
    );
    let evil = run.evil(0);
    let seen = run.finish();
    seen.assert_failures(&expected);
    seen.assert_no_token(6);
    let stderr: Vec<&String> = seen
        .lines
        .iter()
        .filter(|l| l.contains(&format!("for {evil} wrote to stderr: ")))
        .collect();
    assert!(
        stderr.iter().any(|l| l.contains("\"cht\":\"***\"")),
        "the echoed input is logged with the escaped token masked"
    );
    assert!(
        stderr.iter().any(|l| l.ends_with("ffff***")),
        "the token cut at the stderr cap is masked"
    );
}

#[test]
fn a_helper_exiting_non_zero_is_reported_with_its_status() {
    let run = start("exit_7", "echo 'refusing on purpose' >&2\nexit 7", "5s");
    let expected = run.helper_failure("could not wait for {helper}: exit status 7");
    let evil = run.evil(1);
    let seen = run.finish();
    seen.assert_failures(&expected);
    assert_eq!(seen.helper_timeouts, 0, "an exit is not a timeout");
    assert!(seen
        .lines
        .iter()
        .any(|l| l.contains(&format!("for {evil} wrote to stderr: refusing on purpose"))));
}

#[test]
fn a_helper_escaping_its_process_group_and_hanging_is_killed_with_its_escapee() {
    // The helper leaves a child in a session of its own holding stdout, and hangs.
    let run = start(
        "escape",
        "setsid sh -c 'echo $$ >> \"$0/escaped.pids\"; exec sleep 60' \"$dir\" &\n\
         echo $$ >> \"$dir/helpers.pids\"\n\
         sleep 60\n\
         exit 0",
        "1s",
    );
    let expected =
        run.helper_failure("could not wait for {helper}: signal: killed (it ran longer than 1s)");
    let seen = run.finish();
    let dir = seen.dir.path();
    seen.assert_failures(&expected);
    assert!(
        seen.helper_timeouts >= HOSTILE as u64,
        "helper_timeouts {} counts each run stopped at helper_timeout",
        seen.helper_timeouts
    );
    // Every process any hostile run left behind is dead (gone, or a zombie until
    // init reaps it) once the daemon stopped.
    let mut pids = Vec::new();
    for file in ["escaped.pids", "helpers.pids"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        pids.extend(text.lines().map(|l| l.trim().parse::<i32>().unwrap()));
    }
    assert!(pids.len() >= 2 * HOSTILE, "{pids:?}");
    let deadline = Instant::now() + Duration::from_secs(2);
    let alive = |pid: &i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, r)| !r.starts_with('Z')))
            .unwrap_or(false)
    };
    while pids.iter().any(alive) {
        assert!(
            Instant::now() < deadline,
            "left running: {:?}",
            pids.iter().filter(|p| alive(p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
