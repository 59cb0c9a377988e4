//! Unit tests of `client_config`.

use super::*;

fn load(lines: &[(&str, &str)]) -> Result<ClientConfig, ClientConfigError> {
    let mut raw = BTreeMap::new();
    raw.insert("identity".to_string(), "p.example.net".to_string());
    for (k, v) in lines {
        raw.insert(k.to_string(), v.to_string());
    }
    ClientConfig::from_raw(Path::new("c.cfg"), raw, vec![], vec![])
}

fn problem(lines: &[(&str, &str)]) -> String {
    load(lines).unwrap_err().problems[0].to_string()
}

#[test]
fn timeouts_that_would_overflow_are_refused_when_read() {
    for huge in ["18446744073709551615", "3601", "2h"] {
        let p = problem(&[("discovery_timeout", huge)]);
        assert!(p.contains("must not exceed 3600 seconds"), "{huge}: {p}");
    }
    let p = problem(&[("discovery_timeout", "99999999999999999h")]);
    assert!(p.contains("out of range"), "{p}");
    let p = problem(&[("plugin.choria.network.connect_timeout", "121s")]);
    assert!(p.contains("must not exceed 120 seconds"), "{p}");
    let p = problem(&[("ttl", "9223372036854775808")]);
    assert!(p.contains("must not exceed 86400 seconds"), "{p}");
    let c = load(&[("discovery_timeout", "3600"), ("ttl", "86400")]).unwrap();
    assert_eq!(c.discovery_timeout, MAX_DISCOVERY_TIMEOUT);
    assert_eq!(c.ttl, MAX_TTL);
}

#[test]
fn rpc_timeouts_saturate_instead_of_panicking() {
    let mut c = load(&[("discovery_timeout", "3")]).unwrap();
    assert_eq!(
        c.rpc_timeout(Duration::from_secs(20)),
        Duration::from_secs(23)
    );
    // Even a value that bypassed the bound cannot make the sum panic.
    c.discovery_timeout = Duration::MAX;
    assert_eq!(c.rpc_timeout(Duration::from_secs(20)), Duration::MAX);
    assert_eq!(c.rpc_timeout(Duration::MAX), Duration::MAX);
}

#[test]
fn broker_urls_give_up_their_credentials() {
    assert_eq!(
        split_broker_url("nats://h:4222"),
        ("nats://h:4222".into(), None)
    );
    let (url, creds) = split_broker_url("nats://u:p@ss@h:4222");
    assert_eq!(url, "nats://h:4222");
    assert_eq!(
        creds,
        Some(UrlCredentials::UserPass {
            user: "u".into(),
            pass: Secret::new("p@ss")
        })
    );
    assert_eq!(
        split_broker_url("tok@h:4222"),
        (
            "h:4222".into(),
            Some(UrlCredentials::Token(Secret::new("tok")))
        )
    );
    let c = load(&[(
        "plugin.choria.middleware_hosts",
        "nats://u:p@a:4222, nats://u:p@b:4222",
    )])
    .unwrap();
    assert_eq!(c.broker_addresses(), ["nats://a:4222", "nats://b:4222"]);
    assert_eq!(c.broker_user().as_deref(), Some("u"));
    assert!(c
        .validate()
        .iter()
        .all(|p| !p.message.contains("same credentials")));
    let c = load(&[(
        "plugin.choria.middleware_hosts",
        "nats://u:p@a:4222, nats://b:4222",
    )])
    .unwrap();
    let problems = c.validate();
    assert!(
        problems
            .iter()
            .any(|p| p.message.contains("same credentials")),
        "{problems:?}"
    );
    assert!(
        problems.iter().all(|p| !p.to_string().contains(":p@")),
        "no password in a problem: {problems:?}"
    );
}

#[test]
fn debug_shows_no_password() {
    let c = load(&[
        ("plugin.choria.middleware_hosts", "nats://u:url-pw@a:4222"),
        ("plugin.nats.pass", "cfg-pw"),
    ])
    .unwrap();
    let shown = format!("{c:?}");
    assert!(shown.contains("nats://a:4222"), "{shown}");
    assert!(
        !shown.contains("url-pw") && !shown.contains("cfg-pw"),
        "{shown}"
    );
}
