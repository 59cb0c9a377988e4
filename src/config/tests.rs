//! One test per rule: every default, every validation rule (asserting the message),
//! case-insensitive keys, unknown keys, and files that are not configurations at all.

use super::*;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh scratch directory with an executable helper in it, under one per-run
/// parent in `target/tmp`; parents of test runs that have ended are removed by the
/// next run.
fn scratch() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = run_dir().join(N.fetch_add(1, Ordering::SeqCst).to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let helper = dir.join("helper");
    std::fs::write(&helper, "#!/bin/sh\necho '{}'\n").unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// This run's parent directory, `target/tmp/config-tests/<pid>`.
fn run_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let parent = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tmp/config-tests");
        for old in std::fs::read_dir(&parent).into_iter().flatten().flatten() {
            let pid = old.file_name();
            if !Path::new("/proc").join(&pid).exists() {
                let _ = std::fs::remove_dir_all(old.path());
            }
        }
        parent.join(std::process::id().to_string())
    })
    .clone()
}

/// Loads `yaml` with a valid helper prepended unless the YAML names one itself.
fn load(yaml: &str) -> Result<Loaded, ConfigError> {
    let dir = scratch();
    let text = if yaml.to_ascii_lowercase().contains("helper:") {
        yaml.to_string()
    } else {
        format!("helper: {}\n{yaml}", dir.join("helper").display())
    };
    Config::from_yaml(&dir.join("provisioner.yaml"), text.as_bytes())
}

fn config(yaml: &str) -> Config {
    match load(yaml) {
        Ok(l) => l.config,
        Err(e) => panic!("expected a valid config, got: {e}"),
    }
}

/// The messages of every problem in an invalid config.
fn problems(yaml: &str) -> Vec<String> {
    match load(yaml) {
        Ok(_) => panic!("expected problems in:\n{yaml}"),
        Err(e) => e.problems.iter().map(|p| p.to_string()).collect(),
    }
}

fn assert_problem(yaml: &str, needle: &str) {
    let all = problems(yaml);
    assert!(
        all.iter().any(|p| p.contains(needle)),
        "no problem containing {needle:?} in {all:#?}"
    );
}

fn warnings(yaml: &str) -> Vec<String> {
    load(yaml)
        .unwrap()
        .warnings
        .iter()
        .map(|p| p.to_string())
        .collect()
}

#[test]
fn every_key_has_its_default() {
    let c = config("");
    assert_eq!(c.workers, default_workers());
    assert_eq!(c.interval, Duration::from_secs(60));
    assert_eq!(
        c.logfile,
        LogTarget::Stderr,
        "absent logfile is stderr, not ./info"
    );
    assert_eq!(
        c.loglevel,
        LogLevel::Info,
        "absent loglevel is info, not warn"
    );
    assert_eq!(c.helper_timeout, Duration::from_secs(10));
    assert_eq!(c.csr_reply_grace, Duration::from_secs(2));
    assert!(c.token.is_empty());
    assert_eq!(c.lifecycle_component, "provision_mode_server");
    assert!(!c.choria_insecure);
    assert_eq!(c.site, "");
    assert_eq!(c.monitor_port, 0);
    assert_eq!(c.monitor_host, None);
    assert!(c.broker_provisioning_password.is_empty());
    assert_eq!(c.cert_deny_list, DEFAULT_CERT_DENY_LIST);
    assert_eq!(c.jwt_verify_cert, "");
    assert_eq!(c.jwt_signing_key, "");
    assert_eq!(c.jwt_signing_token, "");
    assert_eq!(c.server_jwt_validity, Duration::from_secs(365 * 86_400));
    assert!(!c.leader_election);
    assert_eq!(c.upgrades_repository, "");
    assert!(!c.upgrades_optional);
    assert_eq!(c.shutdown_timeout, Duration::from_secs(10));
    assert_eq!(c.features, Features::default());
    assert_eq!(c.stale_after(), Duration::from_secs(120));
}

#[test]
fn every_key_is_read() {
    let dir = scratch();
    let verify = dir.join("verify.pem");
    std::fs::write(&verify, "-----BEGIN PUBLIC KEY-----\n").unwrap();
    let seed = dir.join("signer.seed");
    std::fs::write(&seed, "ab".repeat(32)).unwrap();
    let token = dir.join("signer.jwt");
    std::fs::write(&token, "x.y.z").unwrap();
    let log = dir.join("p.log");
    let c = config(&format!(
        "workers: 7\ninterval: 5m\nlogfile: {}\nloglevel: debug\nhelper_timeout: 30s\n\
         csr_reply_grace: 5s\ntoken: s3cret\nlifecycle_component: custom\nchoria_insecure: true\nsite: lon\n\
         monitor_port: 8080\nmonitor_host: 127.0.0.1\nbroker_provisioning_password: pw\n\
         cert_deny_list: ['/\\.evil$/', 'bad']\njwt_verify_cert: {}\njwt_signing_key: {}\n\
         jwt_signing_token: {}\nserver_jwt_validity: 2w\nleader_election: true\n\
         upgrades_repository: https://repo\nupgrades_optional: true\nshutdown_timeout: 3s\n\
         features: {{ed25519: true, upgrades: true}}\n",
        log.display(),
        verify.display(),
        seed.display(),
        token.display()
    ));
    assert_eq!(c.workers, 7);
    assert_eq!(c.interval, Duration::from_secs(300));
    assert_eq!(c.logfile, LogTarget::File(log));
    assert_eq!(c.loglevel, LogLevel::Debug);
    assert_eq!(c.helper_timeout, Duration::from_secs(30));
    assert_eq!(c.csr_reply_grace, Duration::from_secs(5));
    assert_eq!(c.token.expose(), "s3cret");
    assert_eq!(c.lifecycle_component, "custom");
    assert!(c.choria_insecure);
    assert_eq!(c.site, "lon");
    assert_eq!(c.monitor_port, 8080);
    assert_eq!(c.monitor_host.as_deref(), Some("127.0.0.1"));
    assert_eq!(c.broker_provisioning_password.expose(), "pw");
    assert_eq!(
        c.cert_deny_list,
        [r"\.evil$", "bad"],
        "/re/ loses its slashes"
    );
    assert_eq!(c.jwt_verify_cert, verify.display().to_string());
    assert_eq!(c.server_jwt_validity, Duration::from_secs(14 * 86_400));
    assert!(c.leader_election);
    assert_eq!(c.upgrades_repository, "https://repo");
    assert!(c.upgrades_optional);
    assert_eq!(c.shutdown_timeout, Duration::from_secs(3));
    assert!(c.features.ed25519 && c.features.upgrades);
    assert!(c.features.jwt, "ed25519 forces jwt on");
    assert!(!c.features.pki);
}

#[test]
fn special_logfiles_and_zero_workers() {
    assert_eq!(config("logfile: stdout").logfile, LogTarget::Stdout);
    assert_eq!(config("logfile: stderr").logfile, LogTarget::Stderr);
    assert_eq!(config("logfile: discard").logfile, LogTarget::Discard);
    assert_eq!(config("workers: 0").workers, default_workers());
    assert_eq!(
        config("lifecycle_component: ''").lifecycle_component,
        "provision_mode_server"
    );
}

#[test]
fn keys_are_case_insensitive() {
    let c = config("Workers: 3\nINTERVAL: 2m\nFeatures: {PKI: true}\nSite: x");
    assert_eq!(c.workers, 3);
    assert_eq!(c.interval, Duration::from_secs(120));
    assert!(c.features.pki);
    assert_eq!(c.site, "x");
}

#[test]
fn a_key_given_twice_warns_and_the_last_wins() {
    let l = load("site: a\nSITE: b").unwrap();
    assert_eq!(l.config.site, "b");
    assert!(l.warnings[0].to_string().contains("more than once"));
}

#[test]
fn unknown_key_warns_with_the_closest_known_key() {
    let w = warnings("upgrade_repository: x\ncolour: blue\nfeatures: {pky: true}");
    assert!(
        w.iter().any(|w| w
            == "upgrade_repository: unknown key, ignored; did you mean `upgrades_repository`?"),
        "{w:#?}"
    );
    assert!(
        w.iter().any(|w| w == "colour: unknown key, ignored"),
        "{w:#?}"
    );
    assert!(
        w.iter()
            .any(|w| w.contains("features.pky") && w.contains("`features.pki`")),
        "{w:#?}"
    );
}

#[test]
fn ignored_go_keys_warn() {
    let w = warnings("broker_port: 4222\nrego_policy: x");
    assert!(w
        .iter()
        .any(|w| w.starts_with("broker_port: is accepted for compatibility and ignored")));
    assert!(w.iter().any(|w| w.starts_with("rego_policy:")));
}

#[test]
fn rule_lifecycle_component_characters() {
    for bad in ["a.b", "a>", "a*"] {
        assert_problem(
            &format!("lifecycle_component: '{bad}'"),
            "invalid lifecycle component",
        );
    }
}

#[test]
fn rule_pki_and_ed25519_are_exclusive() {
    assert_problem(
        "features: {pki: true, ed25519: true}",
        "features: can only enable one of pki or ed25519 features",
    );
}

#[test]
fn rule_interval_must_parse() {
    assert_problem("interval: 5min", "interval: \"5min\": invalid duration");
    assert_problem("interval: '10'", "invalid time unit");
}

#[test]
fn rule_server_jwt_validity_must_parse() {
    assert_problem(
        "server_jwt_validity: 1x",
        "server_jwt_validity: \"1x\": invalid duration",
    );
}

#[test]
fn rule_interval_at_least_one_minute() {
    assert_problem(
        "interval: 30s",
        "interval is too small, minimum is 1 minute",
    );
}

#[test]
fn rule_helper_is_required() {
    let all = Config::from_yaml(Path::new("/x.yaml"), b"site: x").unwrap_err();
    assert!(all.to_string().contains("helper: is required"), "{all}");
}

#[test]
fn rule_helper_must_split() {
    assert_problem(
        "helper: \"/bin/helper 'unclosed\"",
        "cannot parse helper command: unterminated ' quote",
    );
}

#[test]
fn rule_helper_must_exist_and_be_executable() {
    assert_problem(
        "helper: /nonexistent/helper --x",
        "program /nonexistent/helper does not exist",
    );
    assert_problem("helper: no-such-helper-anywhere", "was not found in PATH");
    let dir = scratch();
    let plain = dir.join("plain");
    std::fs::write(&plain, "x").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_problem(&format!("helper: {}", plain.display()), "is not executable");
    assert_problem(
        &format!("helper: {}", dir.display()),
        "is not a regular file",
    );
    // PATH lookup with arguments, as Go does since #214.
    assert_eq!(config("helper: sh -c 'echo {}'").helper, "sh -c 'echo {}'");
}

#[test]
fn rule_jwt_verify_cert_required_and_readable() {
    assert_problem("features: {jwt: true}", "jwt_verify_cert: is required");
    assert_problem(
        "features: {jwt: true}\njwt_verify_cert: /etc/no/such.pem",
        "names a file that does not exist",
    );
    assert_problem(
        "features: {jwt: true}\njwt_verify_cert: e72cba52",
        "neither an existing file nor a hex ed25519 public key",
    );
    let hex = "ab".repeat(32);
    assert!(
        config(&format!("features: {{jwt: true}}\njwt_verify_cert: {hex}"))
            .features
            .jwt
    );
}

#[test]
fn rule_jwt_signing_key_required_and_valid_with_ed25519() {
    let hex = "ab".repeat(32);
    let base = format!("features: {{ed25519: true}}\njwt_verify_cert: {hex}\n");
    assert_problem(
        &base,
        "jwt_signing_key: is required when features.ed25519 is enabled",
    );
    assert_problem(
        &format!("{base}jwt_signing_key: /no/such/seed"),
        "jwt_signing_key: \"/no/such/seed\": cannot be read",
    );
    let dir = scratch();
    let bad = dir.join("bad.seed");
    std::fs::write(&bad, "not a key").unwrap();
    assert_problem(
        &format!("{base}jwt_signing_key: {}", bad.display()),
        "neither a hex ed25519 seed",
    );
    let good = dir.join("good.seed");
    std::fs::write(&good, format!("{hex}\n")).unwrap();
    config(&format!("{base}jwt_signing_key: {}", good.display()));
}

#[test]
fn rule_every_deny_list_pattern_compiles() {
    assert_problem(
        "cert_deny_list: ['ok$', '(unclosed']",
        "cert_deny_list[1]: \"(unclosed\": is not a valid regular expression",
    );
    assert_problem(
        "cert_deny_list: ['/[z-a]/']",
        "cert_deny_list[0]: \"[z-a]\"",
    );
}

#[test]
fn rule_workers_not_negative() {
    assert_problem("workers: -1", "workers: \"-1\": must not be negative");
    assert_problem("workers: 100000", "more than 4096");
}

#[test]
fn rule_upgrades_need_a_repository_unless_optional() {
    assert_problem(
        "features: {upgrades: true}",
        "upgrades_repository: is required when features.upgrades",
    );
    config("features: {upgrades: true}\nupgrades_optional: true");
    config("features: {upgrades: true}\nupgrades_repository: https://r");
}

#[test]
fn rule_loglevel_known() {
    assert_problem(
        "loglevel: verbose",
        "loglevel: \"verbose\": must be one of debug, info, warn, error, fatal",
    );
}

#[test]
fn rule_monitor_port_and_host() {
    assert_problem("monitor_port: 70000", "must be a TCP port");
    assert_problem("monitor_host: localhost", "must be an IP address");
}

#[test]
fn rule_timeouts_positive() {
    assert_problem(
        "helper_timeout: 0s",
        "helper_timeout: \"0s\": must be longer than zero",
    );
}

#[test]
fn rule_max_waiting_attempts_from_one_to_a_million() {
    for bad in ["0", "-3", "1000001"] {
        assert_problem(
            &format!("max_waiting_attempts: {bad}"),
            "must be from 1 to 1000000",
        );
    }
    assert_eq!(config("").max_waiting_attempts, 5_000);
    assert_eq!(
        config("max_waiting_attempts: 500").max_waiting_attempts,
        500
    );
}

#[test]
fn rule_reply_graces_at_most_a_minute() {
    for key in ["csr_reply_grace", "reply_grace"] {
        assert_problem(
            &format!("{key}: 61s"),
            &format!("{key}: \"1m1s\": must be at most 1m: a longer wait only delays every node"),
        );
    }
    assert!(config("").effective_yaml().contains("\nreply_grace: 2s"));
    assert_eq!(
        config("reply_grace: 0.5s").reply_grace,
        Duration::from_millis(500)
    );
    assert_problem(
        "csr_reply_grace: -1s",
        "csr_reply_grace: \"-1s\": invalid duration \"-1s\": negative durations are not allowed",
    );
    assert!(config("").effective_yaml().contains("csr_reply_grace: 2s"));
    assert_eq!(
        config("csr_reply_grace: 0s").csr_reply_grace,
        Duration::ZERO
    );
    assert_eq!(
        config("csr_reply_grace: 1m").csr_reply_grace,
        Duration::from_secs(60)
    );
}

#[test]
fn rule_logfile_directory_exists() {
    assert_problem(
        "logfile: /no/such/dir/p.log",
        "directory /no/such/dir does not exist",
    );
}

#[test]
fn all_problems_are_reported_together() {
    let all = problems("interval: 10s\nworkers: -2\nfeatures: {pki: true, ed25519: true}\nsite: 5");
    assert!(all.len() >= 4, "{all:#?}");
}

#[test]
fn binary_garbage_is_a_problem_not_a_panic() {
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let err = Config::from_yaml(Path::new("/g.yaml"), &garbage).unwrap_err();
    assert!(err.to_string().starts_with("/g.yaml: (file): "), "{err}");
    let err = Config::from_yaml(Path::new("/g.yaml"), b"\x00\x01: [\x02").unwrap_err();
    assert_eq!(err.problems.len(), 1, "{err}");
}

#[test]
fn a_list_instead_of_a_map_is_a_problem() {
    let err = Config::from_yaml(Path::new("/l.yaml"), b"- workers\n- 4\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "/l.yaml: (file): must be a map of keys to values, but the document is a list"
    );
}

#[test]
fn a_number_where_a_string_belongs_is_a_problem() {
    assert_problem(
        "site: 5",
        "site: expected a string, got the number 5 (quote it: \"5\")",
    );
    assert_problem("interval: 60", "interval: expected a duration string");
    assert_problem(
        "workers: four",
        "workers: expected a whole number, got the string \"four\"",
    );
    assert_problem(
        "choria_insecure: 3",
        "choria_insecure: expected true or false",
    );
    assert_problem("features: [pki]", "features: expected a map");
    assert_problem(
        "cert_deny_list: 5",
        "cert_deny_list: expected a list of strings",
    );
}

#[test]
fn a_mistyped_secret_is_not_echoed() {
    let all = problems("token: 123456789");
    assert!(all.iter().all(|p| !p.contains("123456789")), "{all:#?}");
}

#[test]
fn missing_file_is_named() {
    let err = Config::load(Path::new("/no/such/provisioner.yaml")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "/no/such/provisioner.yaml: (file): not found"
    );
}

#[test]
fn effective_yaml_hides_secrets() {
    let c = config("token: s3cret\nbroker_provisioning_password: pw\nsite: x");
    let out = c.effective_yaml();
    assert!(out.contains("token: '***'"), "{out}");
    assert!(out.contains("broker_provisioning_password: '***'"), "{out}");
    assert!(!out.contains("s3cret") && !out.contains("pw\n"), "{out}");
    let reparsed: serde_yaml::Value = serde_yaml::from_str(&out).unwrap();
    assert_eq!(reparsed["site"], serde_yaml::Value::String("x".into()));
}

#[test]
fn audit_file_is_off_by_default_and_its_directory_must_exist() {
    assert_eq!(config("").audit_file, None);
    assert_eq!(config("audit_file: ''").audit_file, None);
    let dir = scratch();
    let path = dir.join("audit.log");
    let c = config(&format!("audit_file: {}", path.display()));
    assert_eq!(c.audit_file.as_deref(), Some(path.as_path()));
    let out = c.effective_yaml();
    assert!(
        out.contains(&format!("audit_file: {}", path.display())),
        "{out}"
    );
    assert!(!config("").effective_yaml().contains("audit_file: /"));
    assert_problem(
        "audit_file: /no/such/dir/audit.log",
        "audit_file: \"/no/such/dir/audit.log\": directory /no/such/dir does not exist",
    );
    assert_problem(
        &format!("audit_file: {}", dir.display()),
        "is a directory; name the file",
    );
    let log = dir.join("p.log");
    assert_problem(
        &format!("logfile: {0}\naudit_file: {0}", log.display()),
        "is the logfile; the audit trail needs a file of its own",
    );
    assert_problem(
        "audit_file: [a]",
        "audit_file: expected a string, got a list",
    );
}

#[test]
fn the_control_socket_and_the_pause_file_are_off_by_default_and_need_their_directories() {
    let c = config("");
    assert_eq!((c.control_socket, c.pause_file), (None, None));
    let dir = scratch();
    let (socket, paused) = (dir.join("control.sock"), dir.join("paused"));
    let c = config(&format!(
        "control_socket: {}\npause_file: {}",
        socket.display(),
        paused.display()
    ));
    assert_eq!(c.control_socket.as_deref(), Some(socket.as_path()));
    assert_eq!(c.pause_file.as_deref(), Some(paused.as_path()));
    let out = c.effective_yaml();
    assert!(
        out.contains(&format!("control_socket: {}", socket.display())),
        "{out}"
    );
    assert!(
        out.contains(&format!("pause_file: {}", paused.display())),
        "{out}"
    );
    assert_problem(
        "pause_file: /no/such/dir/paused",
        "pause_file: \"/no/such/dir/paused\": directory /no/such/dir does not exist",
    );
    assert_problem(
        &format!("control_socket: {}", dir.display()),
        "is a directory; name the file",
    );
    assert_problem(
        &format!("control_socket: {0}\npause_file: {0}", socket.display()),
        "is the control_socket; the pause needs a file of its own",
    );
    // The socket's directory under /run is made by systemd as the service starts:
    // only a warning when `check` runs without it.
    let w = warnings("control_socket: /no/such/run/control.sock");
    assert!(
        w.iter().any(|w| w.contains(
            "directory /no/such/run does not exist; the service's RuntimeDirectory= makes it"
        )),
        "{w:?}"
    );
}

#[test]
fn upgrades_max_in_flight_is_unlimited_by_default_and_not_negative() {
    assert_eq!(config("").upgrades_max_in_flight, None);
    assert_eq!(
        config("upgrades_max_in_flight: 0").upgrades_max_in_flight,
        None
    );
    let c = config(
        "features: {upgrades: true}\nupgrades_repository: https://r\nupgrades_max_in_flight: 5",
    );
    assert_eq!(c.upgrades_max_in_flight, Some(5));
    assert!(c.effective_yaml().contains("upgrades_max_in_flight: 5"));
    assert!(config("")
        .effective_yaml()
        .contains("upgrades_max_in_flight: 0"));
    assert_problem(
        "upgrades_max_in_flight: -2",
        "upgrades_max_in_flight: \"-2\": must not be negative",
    );
    assert_problem(
        "upgrades_max_in_flight: many",
        "upgrades_max_in_flight: expected a whole number",
    );
    assert!(warnings("upgrades_max_in_flight: 3")
        .iter()
        .any(|w| w.contains("only used with features.upgrades")));
}

#[test]
fn active_active_is_read_and_shown() {
    let c = config("site: lon-1\nactive_active: true\n");
    assert!(c.active_active && !c.leader_election);
    assert!(c.effective_yaml().contains("active_active: true"));
    assert!(!config("").active_active);
    assert!(config("").effective_yaml().contains("active_active: false"));
}

#[test]
fn active_active_is_refused_with_leader_election() {
    assert_problem(
        "site: lon\nactive_active: true\nleader_election: true\n",
        "active_active: cannot be used with leader_election",
    );
}

#[test]
fn active_active_needs_a_site_that_is_one_subject_token() {
    assert_problem(
        "active_active: true\n",
        "site: is required with active_active",
    );
    for bad in ["lon.1", "lon*", "a b", "l>", &"x".repeat(65)] {
        assert_problem(
            &format!("site: '{bad}'\nactive_active: true\n"),
            "must be at most 64 letters, digits",
        );
    }
    // Without active_active the site is only a label, as in Go.
    assert_eq!(config("site: lon.1\n").site, "lon.1");
}

#[test]
fn every_key_the_reader_knows_is_in_the_configuration_reference() {
    let page = include_str!("../../docs/configuration.md");
    for key in super::yaml_keys::TOP_KEYS
        .iter()
        .chain(super::yaml_keys::FEATURE_KEYS)
    {
        assert!(
            page.contains(&format!("`{key}`")),
            "docs/configuration.md does not describe `{key}`"
        );
    }
}

#[test]
fn identity_patterns_are_read_like_cert_deny_list_and_must_compile() {
    let c = config("identity_allow: ['\\.example\\.net$']\nidentity_deny: ['/^ghost-/']\n");
    assert_eq!(c.identity_allow, [r"\.example\.net$"]);
    assert_eq!(c.identity_deny, ["^ghost-"], "slashes stripped");
    assert!(config("").identity_allow.is_empty());
    assert_problem(
        "identity_deny: ['ok', '(unclosed']\n",
        "identity_deny[1]: \"(unclosed\": is not a valid regular expression",
    );
    assert_problem(
        "identity_allow: ['[z-a]']\n",
        "identity_allow[0]: \"[z-a]\"",
    );
}

#[test]
fn byte_sizes_take_numbers_and_units_and_their_bounds() {
    let c = config("");
    assert_eq!((c.max_reply_bytes, c.max_held_bytes), (1 << 20, 128 << 20));
    let c = config("max_reply_bytes: 512KiB\nmax_held_bytes: '1 GB'\n");
    assert_eq!(
        (c.max_reply_bytes, c.max_held_bytes),
        (512 << 10, 1_000_000_000)
    );
    assert_eq!(config("max_reply_bytes: 65536\n").max_reply_bytes, 65536);
    assert_problem(
        "max_reply_bytes: 1KiB\n",
        "must be from 16384 to 67108864 bytes",
    );
    assert_problem("max_reply_bytes: lots\n", "a size in bytes");
    assert_problem("max_reply_bytes: -5\n", "a size in bytes");
    assert_problem(
        "max_reply_bytes: 1MiB\nmax_held_bytes: 2MiB\n",
        "must be at least four times max_reply_bytes (4194304)",
    );
}
