//! The command line as a process: exit codes, error lines, `check`, the pid file,
//! signals, and `/metrics`, `/healthz` and `/readyz` scraped over HTTP.

mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::{free_port, http_get, wait_for_port, NatsServer, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_choria-provisioner");

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run choria-provisioner")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A directory with a valid provisioner YAML, choria.cfg and helper, and a broker.
struct Rig {
    dir: TempDir,
    yaml: PathBuf,
    cfg: PathBuf,
    _broker: Option<NatsServer>,
}

impl Rig {
    /// A rig whose choria.cfg points at a running nats-server.
    fn new(extra_yaml: &str) -> Rig {
        let broker = NatsServer::start();
        let mut rig = Rig::without_broker(extra_yaml);
        std::fs::write(
            &rig.cfg,
            format!(
                "identity = provisioner.test.local\nplugin.choria.middleware_hosts = {}\n",
                broker.url()
            ),
        )
        .unwrap();
        rig._broker = Some(broker);
        rig
    }

    /// A rig whose broker address has nothing listening.
    fn without_broker(extra_yaml: &str) -> Rig {
        let dir = TempDir::new("cli");
        let helper = dir.script("helper.sh", "#!/bin/sh\necho '{\"defer\":true}'\n");
        let yaml = dir.write(
            "provisioner.yaml",
            &format!(
                "helper: {}\ntoken: s3cr3t-t0ken\nsite: testsite\nchoria_insecure: true\n{extra_yaml}",
                helper.display()
            ),
        );
        let cfg = dir.write(
            "choria.cfg",
            &format!(
                "identity = provisioner.test.local\nplugin.choria.middleware_hosts = 127.0.0.1:{}\n",
                free_port()
            ),
        );
        Rig {
            dir,
            yaml,
            cfg,
            _broker: None,
        }
    }

    fn write_file(&self, name: &str, contents: &str) -> PathBuf {
        self.dir.write(name, contents)
    }

    fn args(&self) -> Vec<String> {
        vec![
            "--config".into(),
            self.yaml.display().to_string(),
            "--choria-config".into(),
            self.cfg.display().to_string(),
        ]
    }

    /// `choria-provisioner` run on this rig's files, which must exit 1 at start: its
    /// stderr.
    fn refused_at_start(&self) -> String {
        let o = Command::new(BIN).args(self.args()).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        stderr(&o)
    }

    /// `choria-provisioner check` on this rig's files.
    fn check(&self) -> Output {
        Command::new(BIN)
            .arg("check")
            .args(self.args())
            .stdin(Stdio::null())
            .output()
            .expect("run choria-provisioner check")
    }

    fn spawn(&self, extra: &[&str]) -> Child {
        Command::new(BIN)
            .args(self.args())
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn")
    }
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    None
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

fn wait_for_file(path: &Path, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn version_prints_the_cargo_version() {
    let o = run(&["--version"]);
    assert!(o.status.success());
    assert_eq!(stdout(&o).trim(), env!("CARGO_PKG_VERSION"));
}

#[test]
fn usage_errors_exit_1_and_say_what_is_wrong() {
    for (args, starts, then) in [
        (
            &[][..],
            "choria-provisioner: error: required flag --config not provided",
            "Usage: choria-provisioner",
        ),
        (
            &["--config", "/no/such/provisioner.yaml"],
            "choria-provisioner: error: path '/no/such/provisioner.yaml' does not exist",
            "Usage:",
        ),
        (&["--frobnicate"], "", "--frobnicate"),
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let e = stderr(&o);
        assert!(e.starts_with(starts) && e.contains(then), "{args:?}: {e}");
    }
}

#[test]
fn help_exits_zero() {
    let o = run(&["--help"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("The Choria Provisioning Framework"));
}

#[test]
fn check_on_a_good_config_prints_it_without_secrets() {
    let rig = Rig::new("broker_provisioning_password: br0ker-pw\n");
    let o = rig.check();
    let out = stdout(&o);
    assert!(o.status.success(), "{}\n{}", out, stderr(&o));
    assert!(out.contains("site: testsite"), "{out}");
    assert!(out.contains("token: '***'"), "{out}");
    assert!(out.contains("broker_provisioning_password: '***'"), "{out}");
    assert!(out.contains("nats_user: provisioner"), "{out}");
    assert!(out.contains("csr_reply_grace: 2s"), "{out}");
    assert!(out.contains("configuration is valid"), "{out}");
    let all = format!("{out}{}", stderr(&o));
    assert!(
        !all.contains("s3cr3t-t0ken") && !all.contains("br0ker-pw"),
        "{all}"
    );
}

#[test]
fn check_warns_of_a_signing_token_with_less_than_30_days_left() {
    let rig = Rig::without_broker("");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    use base64::Engine as _;
    let b64 = |v: serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let token = |exp: i64| {
        format!(
            "{}.{}.c2ln",
            b64(serde_json::json!({"alg": "EdDSA", "typ": "JWT"})),
            b64(
                serde_json::json!({"purpose": "choria_client_id", "tcs": "t", "jti": "c1",
                                   "public_key": "ab".repeat(32), "exp": exp})
            )
        )
    };
    let seed = rig.dir.write("signer.seed", &"11".repeat(32));
    let chain = rig.dir.path().join("signer.jwt");
    let yaml = std::fs::read_to_string(&rig.yaml).unwrap();
    std::fs::write(
        &rig.yaml,
        format!(
            "{yaml}features: {{ed25519: true}}\njwt_verify_cert: {}\njwt_signing_key: {}\n\
             jwt_signing_token: {}\n",
            "ab".repeat(32),
            seed.display(),
            chain.display()
        ),
    )
    .unwrap();
    for (exp, warned) in [
        (now + 40 * 86_400, None),
        (
            now + 10 * 86_400 + 60,
            Some(", in 10 days: no server JWT is signed past it"),
        ),
        (now - 60, Some(" expired at ")),
    ] {
        std::fs::write(&chain, token(exp)).unwrap();
        let o = rig.check();
        assert!(o.status.success(), "{}", stderr(&o));
        let e = stderr(&o);
        let line = e
            .lines()
            .find(|l| l.starts_with(&format!("warning: jwt_signing_token {}", chain.display())));
        match warned {
            None => assert_eq!(line, None, "{e}"),
            Some(text) => assert!(line.is_some_and(|l| l.contains(text)), "{e}"),
        }
    }
}

#[test]
fn check_on_a_broken_config_lists_every_problem() {
    let rig = Rig::new(
        "interval: 10s\nworkers: -1\nfeatures: {pki: true, ed25519: true}\nupgrade_repository: x\n\
         csr_reply_grace: 2m\n",
    );
    std::fs::write(&rig.cfg, "identity = x.test\n").unwrap();
    let o = rig.check();
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("choria-provisioner: error: Provisioning could not be configured:"),
        "{e}"
    );
    assert!(e.contains("interval is too small"), "{e}");
    assert!(e.contains("workers: \"-1\": must not be negative"), "{e}");
    assert!(
        e.contains("can only enable one of pki or ed25519 features"),
        "{e}"
    );
    assert!(e.contains("jwt_signing_key: is required"), "{e}");
    assert!(
        e.contains("csr_reply_grace: \"2m\": must be at most 1m"),
        "{e}"
    );
    assert!(!e.contains("s3cr3t-t0ken"), "{e}");
}

/// Values in errors are quoted as a person writes them: quotes and apostrophes as
/// they are; only a value with a control character is shown escaped.
#[test]
fn errors_quote_values_plainly_and_escape_only_control_characters() {
    let rig = Rig::new("shutdown_timeout: \"it's 5m\"\nhelper_timeout: \"a\\tb\"\n");
    let e = stderr(&rig.check());
    assert!(
        e.contains("shutdown_timeout: \"it's 5m\": invalid duration \"it's 5m\""),
        "{e}"
    );
    assert!(e.contains("\"a\\tb\""), "the tab escaped: {e}");
    assert!(!e.contains("\\'") && !e.contains("\\\"it"), "{e}");
}

#[test]
fn run_with_a_broken_config_exits_1_with_go_s_error_line() {
    let rig = Rig::new("interval: 10s\n");
    let e = rig.refused_at_start();
    assert!(
        e.starts_with("choria-provisioner: error: Provisioning could not be configured: "),
        "{e}"
    );
}

#[test]
fn garbage_config_exits_1_naming_the_file() {
    let rig = Rig::new("");
    std::fs::write(&rig.yaml, [0xff, 0xfe, 0x00, 0x12, b':', b'[']).unwrap();
    let e = rig.refused_at_start();
    assert!(e.contains(&rig.yaml.display().to_string()), "{e}");
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn run_writes_and_removes_the_pid_file_and_stops_on_sigterm() {
    let rig = Rig::new("");
    let pid = rig.dir.path().join("prov.pid");
    let mut child = rig.spawn(&["--pid", &pid.display().to_string()]);
    assert!(
        wait_for_file(&pid, Duration::from_secs(10)),
        "pid file not written"
    );
    // The file holds the pid in decimal without a newline, mode 0644.
    let mut text = String::new();
    for _ in 0..50 {
        text = std::fs::read_to_string(&pid).unwrap();
        if !text.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(text, child.id().to_string());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&pid).unwrap().permissions().mode() & 0o777,
        0o644
    );
    signal(&child, libc::SIGTERM);
    let status = wait_exit(&mut child, Duration::from_secs(10)).expect("exits after SIGTERM");
    assert_eq!(status.code(), Some(0));
    assert!(!pid.exists(), "pid file removed on normal exit");
}

/// A running provisioner whose monitor port on 127.0.0.1 listens: with a nats-server
/// (`broker`) or with nothing at the broker address.
fn monitored(broker: bool, extra_yaml: &str) -> (Rig, Child, u16) {
    let port = free_port();
    let yaml = format!("monitor_port: {port}\nmonitor_host: 127.0.0.1\n{extra_yaml}");
    let rig = if broker {
        Rig::new(&yaml)
    } else {
        Rig::without_broker(&yaml)
    };
    let child = rig.spawn(&[]);
    assert!(
        wait_for_port(port, Duration::from_secs(10)),
        "monitor port not listening"
    );
    (rig, child, port)
}

#[test]
fn metrics_and_healthz_over_http() {
    let (_rig, mut child, port) = monitored(true, "");

    let (status, body) = http_get(port, "/metrics");
    assert_eq!(status, 200);
    let families = [
        (
            "choria_provisioner_discovered",
            "counter",
            "How many nodes were found through discovery",
        ),
        (
            "choria_provisioner_event_discovered",
            "counter",
            "How many nodes were found through receiving an event about them",
        ),
        (
            "choria_provisioner_discover_cycles",
            "counter",
            "How many discovery cycles were ran",
        ),
        (
            "choria_provisioner_discovery_errors",
            "counter",
            "How many discovery related errors were encountered",
        ),
        (
            "choria_provisioner_provision_errors",
            "counter",
            "How many provision related errors were encountered",
        ),
        (
            "choria_provisioner_provisioned",
            "counter",
            "How many nodes were successfully provisioned",
        ),
        (
            "choria_provisioner_busy_workers",
            "gauge",
            "How many workers are busy provisioning nodes",
        ),
        (
            "choria_provisioner_work_queue_entries",
            "gauge",
            "Number of nodes on the work queue waiting to be provisioned",
        ),
        (
            "choria_provisioner_waiting_nodes",
            "gauge",
            "The number of nodes currently waiting to be provisioned",
        ),
        (
            "choria_provisioner_paused",
            "gauge",
            "Indicates if the provisioner is paused",
        ),
        (
            "choria_provisioner_rpc_time",
            "summary",
            "How long it took to perform RPC requests",
        ),
        (
            "choria_provisioner_rpc_errors",
            "counter",
            "How many rpc related errors were encountered",
        ),
        (
            "choria_provisioner_helper_time",
            "summary",
            "How long it took to run the helper",
        ),
        (
            "choria_provisioner_helper_errors",
            "counter",
            "How many helper related errors were encountered",
        ),
        (
            "choria_provisioner_helper_shutdown_requests",
            "counter",
            "Host many times the helper asked for a node to be shutdown and it succeeded",
        ),
    ];
    for (name, kind, help) in families {
        assert!(
            body.contains(&format!("# HELP {name} {help}\n")),
            "help of {name} missing:\n{body}"
        );
        assert!(
            body.contains(&format!("# TYPE {name} {kind}\n")),
            "type of {name} missing:\n{body}"
        );
    }
    assert!(
        body.contains("choria_provisioner_discovered{site=\"testsite\"} 0"),
        "{body}"
    );
    assert!(
        body.contains("choria_provisioner_paused{site=\"testsite\"} 0"),
        "{body}"
    );
    assert!(
        body.contains(
            "choria_provisioner_rpc_errors{rpc=\"choria_provision#configure\",site=\"testsite\"} 0"
        ),
        "{body}"
    );
    assert!(body.contains("process_resident_memory_bytes "), "{body}");
    for series in [
        "choria_provisioner_outcomes{outcome=\"provisioned\",site=\"testsite\"} 0\n",
        "choria_provisioner_outcomes{outcome=\"locked\",site=\"testsite\"} 0\n",
        "choria_provisioner_node_duration_seconds_count{site=\"testsite\"} 0\n",
    ] {
        assert!(body.contains(series), "{series} missing from\n{body}");
    }
    let build_info = format!(
        "choria_provisioner_build_info{{site=\"testsite\",version=\"{}\"}} 1\n",
        env!("CARGO_PKG_VERSION")
    );
    assert!(body.contains(&build_info), "{build_info} missing");
    assert!(!body.contains("s3cr3t-t0ken"));

    let (status, body) = http_get(port, "/healthz");
    assert_eq!(status, 200);
    let health: serde_json::Value = serde_json::from_str(&body).expect("healthz is JSON");
    assert_eq!(health["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(health["paused"], false);
    assert!(
        health.get("connected").is_some() && health.get("leader").is_some(),
        "{health}"
    );

    // No election: ready as soon as the broker connection is up.
    let (status, body) = readyz_until(port, 200, Duration::from_secs(10));
    assert_eq!(status, 200, "{body}");
    let ready: serde_json::Value = serde_json::from_str(&body).expect("readyz is JSON");
    assert_eq!(ready["ready"], true, "{ready}");
    assert_eq!(ready["connected"], true, "{ready}");
    assert_eq!(ready["role"], "alone", "{ready}");

    let (status, _) = http_get(port, "/nope");
    assert_eq!(status, 404);

    signal(&child, libc::SIGINT);
    let status = wait_exit(&mut child, Duration::from_secs(10)).expect("exits after SIGINT");
    assert_eq!(status.code(), Some(0));
}

/// Polls `/readyz` every 50 ms until it answers `want` or `within` has passed; the
/// last status and body.
fn readyz_until(port: u16, want: u16, within: Duration) -> (u16, String) {
    let deadline = Instant::now() + within;
    loop {
        let (status, body) = http_get(port, "/readyz");
        if status == want || Instant::now() >= deadline {
            return (status, body);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn readyz_is_503_saying_why_while_the_broker_is_unreachable() {
    let (_rig, mut child, port) = monitored(false, "");
    let (status, body) = http_get(port, "/readyz");
    assert_eq!(status, 503, "{body}");
    let ready: serde_json::Value = serde_json::from_str(&body).expect("readyz is JSON");
    assert_eq!(ready["ready"], false, "{ready}");
    assert_eq!(ready["connected"], false, "{ready}");
    assert_eq!(
        ready["reasons"],
        serde_json::json!(["not connected to the broker"]),
        "{ready}"
    );
    // /healthz stays 200: the process is alive, only not ready.
    assert_eq!(http_get(port, "/healthz").0, 200);
    signal(&child, libc::SIGTERM);
    wait_exit(&mut child, Duration::from_secs(10)).expect("exits after SIGTERM");
}

#[test]
fn readyz_is_503_while_the_election_has_no_leader() {
    // A plain nats-server has no election bucket: connected, but never leader.
    let (_rig, mut child, port) = monitored(true, "leader_election: true\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    let ready = loop {
        let (status, body) = http_get(port, "/readyz");
        assert_eq!(status, 503, "{body}");
        let ready: serde_json::Value = serde_json::from_str(&body).expect("readyz is JSON");
        if ready["connected"] == true || Instant::now() >= deadline {
            break ready;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(ready["connected"], true, "{ready}");
    assert_eq!(ready["ready"], false, "{ready}");
    let role = ready["role"].as_str().unwrap_or_default();
    assert!(
        ["starting", "unavailable", "standby"].contains(&role),
        "{ready}"
    );
    assert_eq!(
        ready["reasons"],
        serde_json::json!([format!(
            "not provisioning: election or membership state is {role}"
        )]),
        "{ready}"
    );
    signal(&child, libc::SIGTERM);
    wait_exit(&mut child, Duration::from_secs(10)).expect("exits after SIGTERM");
}

#[test]
fn a_busy_monitor_port_is_a_clear_startup_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let rig = Rig::new(&format!("monitor_port: {port}\nmonitor_host: 127.0.0.1\n"));
    let mut child = rig.spawn(&[]);
    let status = wait_exit(&mut child, Duration::from_secs(10)).expect("exits");
    assert_eq!(status.code(), Some(1));
    let mut e = String::new();
    child.stderr.take().unwrap().read_to_string(&mut e).unwrap();
    assert!(
        e.contains(&format!("cannot listen on 127.0.0.1:{port} for /metrics")),
        "{e}"
    );
}

#[test]
fn logfile_gets_json_lines() {
    let rig = Rig::new("");
    let log = rig.dir.path().join("prov.log");
    let yaml = std::fs::read_to_string(&rig.yaml).unwrap();
    std::fs::write(
        &rig.yaml,
        format!("{yaml}logfile: {}\nloglevel: info\n", log.display()),
    )
    .unwrap();
    let pid = rig.dir.path().join("p.pid");
    let mut child = rig.spawn(&["--pid", &pid.display().to_string()]);
    assert!(wait_for_file(&pid, Duration::from_secs(10)));
    // SIGHUP reopens the file: move it away, signal, and the next lines land in a new one.
    assert!(wait_for_file(&log, Duration::from_secs(5)));
    std::fs::rename(&log, rig.dir.path().join("prov.log.1")).unwrap();
    signal(&child, libc::SIGHUP);
    assert!(
        wait_for_file(&log, Duration::from_secs(5)),
        "log reopened after SIGHUP"
    );
    signal(&child, libc::SIGTERM);
    assert_eq!(
        wait_exit(&mut child, Duration::from_secs(10))
            .unwrap()
            .code(),
        Some(0)
    );
    let first = std::fs::read_to_string(rig.dir.path().join("prov.log.1")).unwrap();
    let line: serde_json::Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    assert_eq!(line["level"], "info");
    assert!(line["msg"].as_str().unwrap().contains("starting"), "{line}");
    assert!(line["time"].as_str().unwrap().ends_with('Z'));
    let second = std::fs::read_to_string(&log).unwrap();
    assert!(second.contains("Reopened the log file"), "{second}");
    assert!(!first.contains("s3cr3t-t0ken") && !second.contains("s3cr3t-t0ken"));
}

#[test]
fn sigterm_while_the_broker_is_unreachable_exits_1_with_go_s_message() {
    let rig = Rig::without_broker("");
    let pid = rig.dir.path().join("p.pid");
    let mut child = rig.spawn(&["--pid", &pid.display().to_string()]);
    assert!(wait_for_file(&pid, Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(700));
    let signalled = Instant::now();
    signal(&child, libc::SIGTERM);
    let status = wait_exit(&mut child, Duration::from_secs(10)).expect("exits");
    assert!(signalled.elapsed() < Duration::from_secs(2), "promptly");
    assert_eq!(status.code(), Some(1));
    let mut e = String::new();
    child.stderr.take().unwrap().read_to_string(&mut e).unwrap();
    assert!(
        e.contains("choria-provisioner: error: Provisioning could not start: could not create initial events connection: exiting on shut down"),
        "{e}"
    );
    assert!(!pid.exists(), "pid file removed");
}

#[test]
fn an_undecodable_jwt_verify_cert_is_refused_at_start() {
    let rig = Rig::new("features: {jwt: true}\n");
    let cert = rig.write_file(
        "verify.pem",
        "-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n",
    );
    let yaml = std::fs::read_to_string(&rig.yaml).unwrap();
    std::fs::write(
        &rig.yaml,
        format!("{yaml}jwt_verify_cert: {}\n", cert.display()),
    )
    .unwrap();
    let e = rig.refused_at_start();
    assert!(
        e.contains("Provisioning could not be configured: jwt_verify_cert:"),
        "{e}"
    );
}

#[test]
fn check_shows_active_active_and_refuses_it_with_leader_election() {
    let check = |yaml: &str| Rig::new(yaml).check();
    let o = check("active_active: true\n");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("active_active: true"), "{}", stdout(&o));
    let o = check("active_active: true\nleader_election: true\n");
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("active_active: cannot be used with leader_election"),
        "{e}"
    );
}

#[test]
fn an_active_active_instance_is_ready_once_it_has_joined_and_says_so() {
    let (_rig, mut child, port) = monitored(true, "active_active: true\n");
    // Joining for one heartbeat (2 s) before it owns anything.
    let (status, body) = readyz_until(port, 200, Duration::from_secs(10));
    assert_eq!(status, 200, "{body}");
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["role"], "active", "{ready}");
    let (_, body) = http_get(port, "/healthz");
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["active_active"]["state"], "active", "{health}");
    assert_eq!(
        health["active_active"]["peers"],
        serde_json::json!(["provisioner.test.local"]),
        "{health}"
    );
    assert_eq!(health["active_active"]["share"], 1.0, "{health}");
    assert_eq!(
        health["active_active"]["upgrade_slots"],
        serde_json::Value::Null,
        "no upgrades_max_in_flight: unlimited, {health}"
    );
    let (_, body) = http_get(port, "/metrics");
    assert!(
        body.contains("choria_provisioner_peers{site=\"testsite\"} 1\n"),
        "{body}"
    );
    assert!(
        body.contains("choria_provisioner_share{site=\"testsite\"} 1\n"),
        "{body}"
    );
    assert!(
        body.contains("choria_provisioner_upgrade_slots{site=\"testsite\"} 0\n"),
        "{body}"
    );
    signal(&child, libc::SIGTERM);
    let status = wait_exit(&mut child, Duration::from_secs(10)).expect("exits after SIGTERM");
    assert_eq!(status.code(), Some(0));
}
