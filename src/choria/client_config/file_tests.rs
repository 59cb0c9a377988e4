//! The Choria client configuration parser on a realistic file.

use crate::choria::client_config::{ClientConfig, ClientConfigError, SecurityProvider, TlsFiles};
use crate::test_nats_server::TempDir;
use std::time::Duration;

const CHORIA_CFG: &str = "\
# Choria client configuration for the provisioner
identity = provisioner.example.net

  plugin.choria.middleware_hosts = broker1.example.net:4222, nats://broker2.example.net:4223
plugin.choria.use_srv=false
plugin.security.provider = file
plugin.security.file.certificate = /etc/choria-provisioner/ssl/cert.pem
plugin.security.file.key = /etc/choria-provisioner/ssl/key.pem
plugin.security.file.ca = /etc/choria-provisioner/ssl/ca.pem
# discovery_timeout = 9
discovery_timeout = 3
loglevel = debug
value.with.equals = a=b=c
this line is not a setting
empty.value =
";

/// `text` loaded as a `choria.cfg` with no `plugin.d` beside it.
fn load(text: &str) -> Result<ClientConfig, ClientConfigError> {
    let dir = TempDir::new("ccfg");
    ClientConfig::load(&dir.write("choria.cfg", text))
}

#[test]
fn realistic_file_with_comments_and_plugin_d() {
    let dir = TempDir::new("ccfg");
    let path = dir.write("choria.cfg", CHORIA_CFG);
    dir.write(
        "plugin.d/nats.cfg",
        "# NATS\nuser = fleet\npass = hunter2\n",
    );
    dir.write("plugin.d/choria.conf", "network.connect_timeout = 5\n");
    dir.write("plugin.d/ignored.txt", "x = y\n");
    let c = ClientConfig::load(&path).unwrap();
    assert_eq!(c.identity, "provisioner.example.net");
    assert_eq!(
        c.middleware_hosts,
        [
            "nats://broker1.example.net:4222",
            "nats://broker2.example.net:4223"
        ]
    );
    assert!(!c.use_srv);
    assert_eq!(c.security_provider, SecurityProvider::File);
    assert_eq!(c.discovery_timeout, Duration::from_secs(3));
    assert_eq!(
        c.connect_timeout,
        Duration::from_secs(5),
        "plugin.d/choria.conf"
    );
    assert_eq!(c.ttl, 60);
    assert_eq!(c.nats_user, "fleet", "plugin.d/nats.cfg → plugin.nats.user");
    assert_eq!(c.nats_pass.expose(), "hunter2");
    assert_eq!(c.get("value.with.equals"), Some("a=b=c"));
    assert_eq!(c.get("empty.value"), None, "Go's regex needs a value");
    assert_eq!(c.get("plugin.ignored.x"), None);
    assert_eq!(c.parsed_files.len(), 3);
    let lines: Vec<String> = c.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        lines
            .iter()
            .any(|w| w.starts_with("line 14: is not a `key = value`")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|w| w.starts_with("line 15:")), "{lines:?}");
    assert_eq!(
        c.tls_files(),
        Some(TlsFiles {
            certificate: Some("/etc/choria-provisioner/ssl/cert.pem".into()),
            key: Some("/etc/choria-provisioner/ssl/key.pem".into()),
            ca: Some("/etc/choria-provisioner/ssl/ca.pem".into()),
        })
    );
    assert_eq!(
        c.rpc_timeout(Duration::from_secs(20)),
        Duration::from_secs(23)
    );
    // The TLS files do not exist here: validation names each one.
    let problems: Vec<String> = c.validate().iter().map(|p| p.to_string()).collect();
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].starts_with("plugin.security.file.certificate: \"/etc/choria-provisioner/ssl/cert.pem\": cannot be read"));
}

#[test]
fn no_brokers_means_srv_records_and_a_bad_srv_domain_is_refused() {
    let c = load("identity = x.example.net\n").unwrap();
    assert!(c.use_srv, "go-choria's default");
    assert!(!c.randomize_middleware_hosts, "go-choria's default");
    let problems: Vec<String> = c.validate().iter().map(|p| p.to_string()).collect();
    assert!(
        !problems.iter().any(|p| p.contains("middleware_hosts")),
        "{problems:?}"
    );
    let e = load(
        "identity = x.example.net\nplugin.choria.srv_domain = bad..domain\n\
         plugin.choria.randomize_middleware_hosts = maybe\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("plugin.choria.randomize_middleware_hosts")
            && e.contains("must be true or false"),
        "{e}"
    );
    let c = load("identity = x.example.net\nplugin.choria.srv_domain = bad..domain.\n").unwrap();
    let problems: Vec<String> = c.validate().iter().map(|p| p.to_string()).collect();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("plugin.choria.srv_domain")
                && p.contains("must be a DNS domain name")),
        "{problems:?}"
    );
}

#[test]
fn puppet_provider_uses_the_ssl_dir_layout() {
    let c = load("identity = p.example.net\nplugin.choria.ssldir = /var/ssl\nplugin.choria.middleware_hosts = b:4222\n").unwrap();
    let files = c.tls_files().unwrap();
    assert_eq!(
        files.certificate.unwrap(),
        std::path::Path::new("/var/ssl/certs/p.example.net.pem")
    );
    assert_eq!(
        files.key.unwrap(),
        std::path::Path::new("/var/ssl/private_keys/p.example.net.pem")
    );
    assert_eq!(
        files.ca.unwrap(),
        std::path::Path::new("/var/ssl/certs/ca.pem")
    );
}

#[test]
fn bad_values_are_problems() {
    let err = load(
        "identity = x\nttl = soon\nplugin.security.provider = vault\ndiscovery_timeout = 5min\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("3 problems in"), "{err}");
    assert!(err.contains("ttl: \"soon\""), "{err}");
    assert!(err.contains("plugin.security.provider: \"vault\""), "{err}");
    assert!(err.contains("discovery_timeout: \"5min\""), "{err}");
    let dir = TempDir::new("ccfg");
    let missing = ClientConfig::load(&dir.path().join("nope.cfg")).unwrap_err();
    assert!(
        missing.to_string().ends_with("nope.cfg: (file): not found"),
        "{missing}"
    );
}

/// Found by the `client_config` fuzzer: `Debug` printed every raw setting, the NATS
/// password included.
#[test]
fn debug_output_never_shows_setting_values() {
    let c = load("identity = p.example.net\nplugin.nats.pass = hunter2-secret\nplugin.choria.middleware_hosts = b:4222\n").unwrap();
    assert_eq!(c.get("plugin.nats.pass"), Some("hunter2-secret"));
    let shown = format!("{c:?}");
    assert!(!shown.contains("hunter2-secret"), "{shown}");
    assert!(
        shown.contains("plugin.nats.pass"),
        "keys are still listed: {shown}"
    );
}
