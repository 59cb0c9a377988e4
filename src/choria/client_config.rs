//! The Choria client configuration (`--choria-config`, e.g. `choria.cfg`).
//!
//! An INI-style `key = value` file parsed as go-choria does (`config/util.go`): each
//! line is trimmed, lines starting with `#` and empty lines are skipped, and
//! `(.+?)\s*=\s*(.+)` splits key and value; then every `plugin.d/<name>.cfg` (and
//! `.conf`) next to the file is read with its keys prefixed `plugin.<name>.`. Unlike
//! Go, lines that are not `key = value` are reported as warnings instead of being
//! dropped silently, and the "project" `choria.conf` files of the working directory
//! and its parents are not merged: a daemon's configuration must not depend on the
//! directory it was started from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{parse_duration, Problem, Secret};

/// The longest `discovery_timeout` accepted. It is added to every RPC's timeout and
/// to the discovery deadline, so it is bounded where it is read: no sum of timeouts
/// can overflow a `Duration` or an `Instant`.
pub(crate) const MAX_DISCOVERY_TIMEOUT: Duration = Duration::from_secs(3600);

/// The longest `plugin.choria.network.connect_timeout` accepted (go-choria: "must not
/// exceed 120 seconds").
pub(crate) const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(120);

/// The longest request `ttl` accepted, in seconds (a day). Requests carry it as a
/// signed 64-bit number and nodes add and subtract it from Unix times.
pub(crate) const MAX_TTL: u64 = 86_400;

/// Security providers go-choria knows; this provisioner implements `file`, `choria`
/// and `puppet` (as fixed file locations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProvider {
    /// Puppet's SSL directory layout (go-choria's default).
    Puppet,
    /// Explicit certificate, key and CA files (x509 networks).
    File,
    /// Organization Issuer networks: a client JWT and an ed25519 seed (protocol v2).
    Choria,
    /// cert-manager on Kubernetes (not supported here).
    Certmanager,
    /// PKCS#11 tokens (not supported here).
    Pkcs11,
}

impl SecurityProvider {
    fn parse(text: &str) -> Option<SecurityProvider> {
        match text.trim().to_ascii_lowercase().as_str() {
            "puppet" => Some(SecurityProvider::Puppet),
            "file" => Some(SecurityProvider::File),
            "choria" => Some(SecurityProvider::Choria),
            "certmanager" => Some(SecurityProvider::Certmanager),
            "pkcs11" => Some(SecurityProvider::Pkcs11),
            _ => None,
        }
    }

    /// The name used in configuration files.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SecurityProvider::Puppet => "puppet",
            SecurityProvider::File => "file",
            SecurityProvider::Choria => "choria",
            SecurityProvider::Certmanager => "certmanager",
            SecurityProvider::Pkcs11 => "pkcs11",
        }
    }
}

/// TLS files for the broker connection and v1 request signing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsFiles {
    /// Client certificate PEM (optional for the `choria` provider).
    pub certificate: Option<PathBuf>,
    /// Client private key PEM.
    pub key: Option<PathBuf>,
    /// CA bundle PEM used to verify the broker.
    pub ca: Option<PathBuf>,
}

/// The Choria client configuration the daemon needs, after the provisioner's
/// overrides. `Debug` shows no secret: passwords as `***`, broker URLs without
/// credentials, and only the names of the raw settings.
#[derive(Clone)]
pub struct ClientConfig {
    /// The file named on the command line.
    pub file: PathBuf,
    /// Every file read, main file first.
    pub parsed_files: Vec<PathBuf>,
    raw: BTreeMap<String, String>,
    /// Sender identity, election candidate name, reply-subject hash input.
    pub identity: String,
    /// Broker URLs (`nats://host:port`), from `plugin.choria.middleware_hosts`.
    pub middleware_hosts: Vec<String>,
    /// Whether brokers are looked up by SRV records when no hosts are set
    /// (`plugin.choria.use_srv`, default true).
    pub use_srv: bool,
    /// `plugin.choria.srv_domain`: the domain of the SRV records (else the host's).
    pub srv_domain: Option<String>,
    /// `plugin.choria.randomize_middleware_hosts` (default false, as go-choria): try
    /// the brokers in a random order instead of the order given or found.
    pub randomize_middleware_hosts: bool,
    /// The resolver of SRV lookups; `None`: the host's (`/etc/resolv.conf`). Not a
    /// setting: tests point it at a DNS server of their own.
    pub resolver: Option<super::srv::Resolver>,
    /// Security provider in use (forced to `file` when insecure).
    pub security_provider: SecurityProvider,
    /// NATS user name (`provisioner` when `broker_provisioning_password` is set).
    pub nats_user: String,
    /// NATS password.
    pub nats_pass: Secret,
    /// NATS credentials file, if any.
    pub nats_credentials: Option<PathBuf>,
    /// `discovery_timeout`, seconds added to every RPC's agent timeout.
    pub discovery_timeout: Duration,
    /// `plugin.choria.network.connect_timeout`.
    pub connect_timeout: Duration,
    /// Request TTL in seconds.
    pub ttl: u64,
    /// Collectives (always `[provisioning]` after the overrides).
    pub collectives: Vec<String>,
    /// Main collective (always `provisioning` after the overrides).
    pub main_collective: String,
    /// TLS is off (`choria_insecure`): no TLS and no request signing.
    pub insecure: bool,
    /// Non-fatal findings: unparsable lines, ignored settings.
    pub warnings: Vec<Problem>,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("file", &self.file)
            .field("parsed_files", &self.parsed_files)
            .field("settings", &self.raw.keys().collect::<Vec<_>>())
            .field("identity", &self.identity)
            .field("middleware_hosts", &self.broker_addresses())
            .field("use_srv", &self.use_srv)
            .field("srv_domain", &self.srv_domain)
            .field("security_provider", &self.security_provider)
            .field("nats_user", &self.nats_user)
            .field("nats_pass", &self.nats_pass)
            .field("nats_credentials", &self.nats_credentials)
            .field("discovery_timeout", &self.discovery_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("ttl", &self.ttl)
            .field("collectives", &self.collectives)
            .field("main_collective", &self.main_collective)
            .field("insecure", &self.insecure)
            .field("warnings", &self.warnings)
            .finish()
    }
}

/// The client configuration could not be read or is unusable: the same shape (file
/// and every problem) as a provisioner YAML error.
pub(crate) type ClientConfigError = crate::config::ConfigError;

/// The default `--choria-config`: the first of Go's candidates that exists, else the
/// last one (which must then exist).
pub(crate) fn default_path() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(h) = &home {
        candidates.push(h.join(".choriarc"));
        candidates.push(h.join(".mcollective"));
    }
    candidates.push("/etc/choria/client.conf".into());
    candidates.push("/usr/local/etc/choria/client.conf".into());
    let fallback = PathBuf::from("/etc/puppetlabs/mcollective/client.cfg");
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or(fallback)
}

/// Parses `key = value` lines, adding them to `into` with `prefix`; returns the
/// numbers of lines that were neither comments nor settings.
pub(crate) fn parse_lines(
    text: &str,
    prefix: &str,
    into: &mut BTreeMap<String, String>,
) -> Vec<usize> {
    let mut unparsed = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        // `(.+?)\s*=\s*(.+)`: the key needs one character, the value one non-space one.
        let Some(eq) = line.char_indices().skip(1).find(|(_, c)| *c == '=') else {
            unparsed.push(n + 1);
            continue;
        };
        let key = line[..eq.0].trim_end();
        let value = line[eq.0 + 1..].trim_start();
        if value.is_empty() {
            unparsed.push(n + 1);
            continue;
        }
        let key = if prefix.is_empty() {
            key.to_string()
        } else {
            format!("{prefix}.{key}")
        };
        into.insert(key, value.to_string());
    }
    unparsed
}

fn truthy(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "y" | "yes" | "t" | "true" | "on" => Some(true),
        "0" | "n" | "no" | "f" | "false" | "off" => Some(false),
        _ => None,
    }
}

impl ClientConfig {
    /// Reads `path` and the `plugin.d` directory beside it.
    pub fn load(path: &Path) -> Result<ClientConfig, ClientConfigError> {
        let err = |message: String| ClientConfigError {
            file: path.to_path_buf(),
            problems: vec![Problem::new("(file)", message)],
        };
        let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => err("not found".into()),
            _ => err(format!("cannot be read: {e}")),
        })?;
        let mut raw = BTreeMap::new();
        let mut warnings = Vec::new();
        let mut parsed_files = vec![path.to_path_buf()];
        for line in parse_lines(&text, "", &mut raw) {
            warnings.push(Problem::new(
                format!("line {line}"),
                "is not a `key = value` setting, ignored",
            ));
        }
        let dotd = path.parent().unwrap_or(Path::new(".")).join("plugin.d");
        if let Ok(entries) = std::fs::read_dir(&dotd) {
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("cfg" | "conf")))
                .collect();
            files.sort();
            for file in files {
                let Some(plugin) = file.file_stem().and_then(|s| s.to_str()) else {
                    continue;
                };
                match std::fs::read_to_string(&file) {
                    Ok(text) => {
                        for line in parse_lines(&text, &format!("plugin.{plugin}"), &mut raw) {
                            warnings.push(Problem::new(
                                format!("{}:{line}", file.display()),
                                "is not a `key = value` setting, ignored",
                            ));
                        }
                        parsed_files.push(file);
                    }
                    Err(e) => warnings.push(Problem::new(
                        file.display().to_string(),
                        format!("cannot be read, ignored: {e}"),
                    )),
                }
            }
        }
        ClientConfig::from_raw(path, raw, parsed_files, warnings)
    }

    /// Builds the typed configuration from raw settings.
    pub(crate) fn from_raw(
        path: &Path,
        raw: BTreeMap<String, String>,
        parsed_files: Vec<PathBuf>,
        mut warnings: Vec<Problem>,
    ) -> Result<ClientConfig, ClientConfigError> {
        let mut problems = Vec::new();
        let get = |k: &str| raw.get(k).map(|s| s.as_str());
        let seconds =
            |key: &str, default: u64, max: Duration, problems: &mut Vec<Problem>| -> Duration {
                let Some(v) = get(key) else {
                    return Duration::from_secs(default);
                };
                let parsed = match v.parse::<u64>() {
                    Ok(n) => Ok(Duration::from_secs(n)),
                    Err(_) => parse_duration(v).map_err(|e| e.to_string()),
                };
                match parsed {
                    Ok(d) if d <= max => d,
                    Ok(_) => {
                        problems.push(Problem::with_value(
                            key,
                            v,
                            format!("must not exceed {} seconds", max.as_secs()),
                        ));
                        Duration::from_secs(default)
                    }
                    Err(e) => {
                        problems.push(Problem::with_value(key, v, e));
                        Duration::from_secs(default)
                    }
                }
            };
        let discovery_timeout =
            seconds("discovery_timeout", 2, MAX_DISCOVERY_TIMEOUT, &mut problems);
        let connect_timeout = seconds(
            "plugin.choria.network.connect_timeout",
            2,
            MAX_CONNECT_TIMEOUT,
            &mut problems,
        );
        let ttl = match get("ttl") {
            None => 60,
            Some(v) => match v.parse::<u64>() {
                Ok(n) if n <= MAX_TTL => n,
                Ok(_) => {
                    problems.push(Problem::with_value(
                        "ttl",
                        v,
                        format!("must not exceed {MAX_TTL} seconds"),
                    ));
                    60
                }
                Err(_) => {
                    problems.push(Problem::with_value(
                        "ttl",
                        v,
                        "must be a whole number of seconds",
                    ));
                    60
                }
            },
        };
        let mut flag = |key: &str, default: bool| match get(key) {
            None => default,
            Some(v) => truthy(v).unwrap_or_else(|| {
                problems.push(Problem::with_value(key, v, "must be true or false"));
                default
            }),
        };
        let use_srv = flag("plugin.choria.use_srv", true);
        let randomize_middleware_hosts = flag("plugin.choria.randomize_middleware_hosts", false);
        let security_provider = match get("plugin.security.provider") {
            None => SecurityProvider::Puppet,
            Some(v) => SecurityProvider::parse(v).unwrap_or_else(|| {
                problems.push(Problem::with_value(
                    "plugin.security.provider",
                    v,
                    "must be one of puppet, file, choria, certmanager, pkcs11",
                ));
                SecurityProvider::Puppet
            }),
        };
        let middleware_hosts: Vec<String> = get("plugin.choria.middleware_hosts")
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|h| !h.is_empty())
                    .map(broker_url)
                    .collect()
            })
            .unwrap_or_default();
        let identity = match get("identity") {
            Some(id) => id.to_string(),
            None => default_identity().unwrap_or_else(|| {
                problems.push(Problem::new(
                    "identity",
                    "could not be determined from the hostname or DNS; set identity",
                ));
                String::new()
            }),
        };
        let collectives: Vec<String> = get("collectives")
            .unwrap_or("mcollective")
            .split(',')
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect();
        let main_collective = get("main_collective")
            .map(str::to_string)
            .unwrap_or_else(|| collectives.first().cloned().unwrap_or_default());
        if !problems.is_empty() {
            return Err(ClientConfigError {
                file: path.to_path_buf(),
                problems,
            });
        }
        if raw.contains_key("plugin.choria.srv_domain") && !middleware_hosts.is_empty() {
            warnings.push(Problem::new(
                "plugin.choria.srv_domain",
                "is ignored because plugin.choria.middleware_hosts is set",
            ));
        }
        Ok(ClientConfig {
            file: path.to_path_buf(),
            parsed_files,
            identity,
            middleware_hosts,
            use_srv,
            srv_domain: get("plugin.choria.srv_domain")
                .map(|d| d.trim().trim_end_matches('.').to_string())
                .filter(|d| !d.is_empty()),
            resolver: None,
            randomize_middleware_hosts,
            security_provider,
            nats_user: get("plugin.nats.user").unwrap_or("").to_string(),
            nats_pass: Secret::new(get("plugin.nats.pass").unwrap_or("")),
            nats_credentials: get("plugin.nats.credentials").map(PathBuf::from),
            discovery_timeout,
            connect_timeout,
            ttl,
            collectives,
            main_collective,
            insecure: false,
            warnings,
            raw,
        })
    }

    /// A raw setting as written (after `plugin.d` merging), e.g. `plugin.choria.ssldir`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.raw.get(key).map(|s| s.as_str())
    }

    /// The per-try RPC timeout for an agent whose DDL timeout is `agent_timeout`
    /// (`discovery_timeout` + DDL timeout: 22 s for `choria_provision`, 4 s for `rpcutil`).
    /// Saturates instead of overflowing (`discovery_timeout` is also bounded when read).
    pub(crate) fn rpc_timeout(&self, agent_timeout: Duration) -> Duration {
        self.discovery_timeout.saturating_add(agent_timeout)
    }

    /// True when the connection presents the `choria` provider's client JWT and signs
    /// the broker's nonce with its seed.
    pub(crate) fn uses_client_jwt(&self) -> bool {
        !self.insecure && self.security_provider == SecurityProvider::Choria
    }

    /// The broker URLs without credentials, to connect to and to show.
    pub(crate) fn broker_addresses(&self) -> Vec<String> {
        self.middleware_hosts
            .iter()
            .map(|u| split_broker_url(u).0)
            .collect()
    }

    /// The brokers to connect to, in order, and how they were found: the configured
    /// hosts; else, with `use_srv`, those SRV records name (a DNS lookup, made again
    /// for every call); else, as go-choria, `puppet:4222`.
    pub fn brokers(&self) -> Brokers {
        if !self.middleware_hosts.is_empty() {
            return Brokers {
                urls: self.broker_addresses(),
                found_by: BrokersFoundBy::Configuration,
            };
        }
        let fallback = |search| Brokers {
            urls: vec![super::srv::FALLBACK_BROKER.to_string()],
            found_by: BrokersFoundBy::Fallback(search),
        };
        if !self.use_srv {
            return fallback(None);
        }
        let system;
        let resolver = match &self.resolver {
            Some(r) => r,
            None => {
                system = super::srv::Resolver::system();
                &system
            }
        };
        let host_domain = self
            .identity
            .split_once('.')
            .map(|(_, domain)| domain)
            .filter(|d| super::srv::valid_host(d));
        let domain = self
            .srv_domain
            .as_deref()
            .or(resolver.domain())
            .or(host_domain);
        let search = super::srv::find_brokers(resolver, domain);
        if search.urls.is_empty() {
            return fallback(Some(search));
        }
        Brokers {
            urls: search.urls.clone(),
            found_by: BrokersFoundBy::Srv(search),
        }
    }

    /// The credentials the broker URLs carry (validation makes sure they all carry
    /// the same), which take the place of `plugin.nats.user`/`pass` as they did in the
    /// NATS client.
    pub(crate) fn url_credentials(&self) -> Option<UrlCredentials> {
        self.middleware_hosts
            .iter()
            .find_map(|u| split_broker_url(u).1)
    }

    /// The user name the broker sees: the URLs' or `plugin.nats.user` (`provisioner`
    /// with `broker_provisioning_password`), when a password goes with it.
    pub(crate) fn broker_user(&self) -> Option<String> {
        match self.url_credentials() {
            Some(UrlCredentials::UserPass { user, .. }) => Some(user),
            Some(UrlCredentials::Token(_)) => None,
            None => (!self.nats_user.is_empty() && !self.nats_pass.is_empty())
                .then(|| self.nats_user.clone()),
        }
    }

    /// The TLS files of the security provider in use; `None` when insecure.
    pub fn tls_files(&self) -> Option<TlsFiles> {
        if self.insecure {
            return None;
        }
        let path = |k: &str| self.get(k).map(PathBuf::from);
        match self.security_provider {
            SecurityProvider::File => Some(TlsFiles {
                certificate: path("plugin.security.file.certificate"),
                key: path("plugin.security.file.key"),
                ca: path("plugin.security.file.ca"),
            }),
            SecurityProvider::Choria => Some(TlsFiles {
                certificate: path("plugin.security.choria.certificate"),
                key: path("plugin.security.choria.key"),
                ca: path("plugin.security.choria.ca"),
            }),
            SecurityProvider::Puppet => {
                let ssl = path("plugin.choria.ssldir")
                    .unwrap_or_else(|| PathBuf::from("/etc/puppetlabs/puppet/ssl"));
                let certname = self
                    .get("plugin.choria.certname")
                    .unwrap_or(&self.identity)
                    .to_string();
                Some(TlsFiles {
                    certificate: Some(ssl.join("certs").join(format!("{certname}.pem"))),
                    key: Some(ssl.join("private_keys").join(format!("{certname}.pem"))),
                    ca: Some(ssl.join("certs").join("ca.pem")),
                })
            }
            SecurityProvider::Certmanager | SecurityProvider::Pkcs11 => None,
        }
    }

    /// Everything that would stop the daemon from connecting, all at once.
    pub fn validate(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        if let Some(domain) = &self.srv_domain {
            if !super::srv::valid_host(domain) {
                problems.push(Problem::with_value(
                    "plugin.choria.srv_domain",
                    domain,
                    "must be a DNS domain name",
                ));
            }
        }
        for url in &self.middleware_hosts {
            if broker_host_port(url).is_none() {
                problems.push(Problem::with_value(
                    "plugin.choria.middleware_hosts",
                    split_broker_url(url).0,
                    "must be host:port or nats://host:port",
                ));
            }
        }
        let mut credentials = self.middleware_hosts.iter().map(|u| split_broker_url(u).1);
        if let Some(first) = credentials.next() {
            if credentials.any(|c| c != first) {
                problems.push(Problem::new(
                    "plugin.choria.middleware_hosts",
                    "every broker URL must carry the same credentials, or none: one set is \
                     sent to whichever broker the connection reaches",
                ));
            }
        }
        if self.insecure {
            return problems;
        }
        match self.security_provider {
            SecurityProvider::Certmanager | SecurityProvider::Pkcs11 => {
                problems.push(Problem::with_value(
                    "plugin.security.provider",
                    self.security_provider.as_str(),
                    "is not supported by this provisioner; use file, choria or puppet",
                ));
            }
            SecurityProvider::Choria => {
                for key in [
                    "plugin.security.choria.token_file",
                    "plugin.security.choria.seed_file",
                ] {
                    require_readable(self.get(key), key, &mut problems);
                }
                // TLS files are optional with this provider, but usable when set.
                let (cert, key) = (
                    "plugin.security.choria.certificate",
                    "plugin.security.choria.key",
                );
                for k in [cert, key, "plugin.security.choria.ca"] {
                    if let Some(path) = self.get(k) {
                        require_readable(Some(path), k, &mut problems);
                    }
                }
                if self.get(cert).is_some() != self.get(key).is_some() {
                    problems.push(Problem::new(
                        cert,
                        format!("{cert} and {key} are set together or not at all"),
                    ));
                }
            }
            SecurityProvider::File | SecurityProvider::Puppet => {
                let files = self.tls_files().unwrap_or_default();
                let (c, k, a) = match self.security_provider {
                    SecurityProvider::File => (
                        "plugin.security.file.certificate",
                        "plugin.security.file.key",
                        "plugin.security.file.ca",
                    ),
                    _ => (
                        "puppet certificate",
                        "puppet private key",
                        "puppet CA certificate",
                    ),
                };
                for (key, path) in [(c, &files.certificate), (k, &files.key), (a, &files.ca)] {
                    let text = path.as_ref().map(|p| p.display().to_string());
                    require_readable(text.as_deref(), key, &mut problems);
                }
            }
        }
        if let Some(creds) = &self.nats_credentials {
            let text = creds.display().to_string();
            require_readable(Some(&text), "plugin.nats.credentials", &mut problems);
        }
        problems
    }
}

fn require_readable(path: Option<&str>, key: &str, problems: &mut Vec<Problem>) {
    match path {
        None | Some("") => problems.push(Problem::new(key, "is required by the security provider")),
        Some(p) => {
            if let Err(e) = std::fs::File::open(p) {
                problems.push(Problem::with_value(key, p, format!("cannot be read: {e}")));
            }
        }
    }
}

/// Credentials written into a broker URL: `nats://user:pass@host:port` or
/// `nats://token@host:port` (kept as written, as the NATS client took them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UrlCredentials {
    /// `user:pass@`.
    UserPass {
        /// The user name.
        user: String,
        /// The password.
        pass: Secret,
    },
    /// `token@`.
    Token(Secret),
}

/// Splits a broker URL into the URL without user information and the credentials
/// it carried: `nats://u:p@h:4222` → (`nats://h:4222`, user `u` and password `p`).
pub(crate) fn split_broker_url(url: &str) -> (String, Option<UrlCredentials>) {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let Some((info, host)) = rest.rsplit_once('@') else {
        return (url.to_string(), None);
    };
    let address = match scheme {
        Some(scheme) => format!("{scheme}://{host}"),
        None => host.to_string(),
    };
    let credentials = match info.split_once(':') {
        Some(("", _)) => None,
        Some((user, pass)) => Some(UrlCredentials::UserPass {
            user: user.to_string(),
            pass: Secret::new(pass),
        }),
        None if info.is_empty() => None,
        None => Some(UrlCredentials::Token(Secret::new(info))),
    };
    (address, credentials)
}

/// `host:port` → `nats://host:port`; URLs with a scheme are kept.
fn broker_url(host: &str) -> String {
    if host.contains("://") {
        host.to_string()
    } else {
        format!("nats://{host}")
    }
}

/// The `host` and `port` of a broker URL, if it has both.
pub fn broker_host_port(url: &str) -> Option<(String, u16)> {
    let (url, _) = split_broker_url(url);
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(&url);
    let (host, port) = rest.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// go-choria's identity rule: the hostname if it has at least two dots, else the
/// DNS FQDN, else the short hostname.
pub(crate) fn default_identity() -> Option<String> {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())?;
    if hostname.matches('.').count() > 1 {
        return Some(hostname);
    }
    Some(crate::sys::canonical_name(&hostname).unwrap_or(hostname))
}

/// The brokers to connect to, and how they were found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Brokers {
    /// `nats://host:port` (no credentials), in the order to try them.
    pub urls: Vec<String>,
    /// Where they come from.
    pub found_by: BrokersFoundBy,
}

/// Where the brokers come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokersFoundBy {
    /// `plugin.choria.middleware_hosts`.
    Configuration,
    /// SRV records; what was looked up.
    Srv(super::srv::SrvSearch),
    /// Nothing named a broker: `puppet:4222`, as go-choria; the SRV lookups made, if
    /// any (`None` with `plugin.choria.use_srv = false`).
    Fallback(Option<super::srv::SrvSearch>),
}

impl Brokers {
    /// One line per lookup made, for `check` and the log: the name and what it gave.
    pub fn lookups(&self) -> Vec<String> {
        let search = match &self.found_by {
            BrokersFoundBy::Srv(search) | BrokersFoundBy::Fallback(Some(search)) => search,
            _ => return Vec::new(),
        };
        search
            .lookups
            .iter()
            .map(|(name, result)| match result {
                Ok(0) => format!("SRV {name}: no records"),
                Ok(n) => format!("SRV {name}: {n} brokers"),
                Err(e) => format!("SRV {name}: {e}"),
            })
            .collect()
    }

    /// How they were found, in a few words.
    pub fn describe(&self) -> String {
        match &self.found_by {
            BrokersFoundBy::Configuration => "from plugin.choria.middleware_hosts".into(),
            BrokersFoundBy::Srv(search) => format!(
                "from the SRV records of {}",
                search
                    .lookups
                    .last()
                    .map(|(n, _)| n.as_str())
                    .unwrap_or_default()
            ),
            BrokersFoundBy::Fallback(None) => {
                "go-choria's default: no middleware_hosts and plugin.choria.use_srv is false".into()
            }
            BrokersFoundBy::Fallback(Some(_)) => {
                "go-choria's default: no middleware_hosts and no SRV records found".into()
            }
        }
    }
}

#[cfg(test)]
mod file_tests;
#[cfg(test)]
mod tests;
