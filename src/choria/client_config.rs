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

use crate::config::{parse_duration, Config, Problem, Secret};

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
    pub fn as_str(self) -> &'static str {
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
/// overrides.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The file named on the command line.
    pub file: PathBuf,
    /// Every file read, main file first.
    pub parsed_files: Vec<PathBuf>,
    raw: RawSettings,
    /// Sender identity, election candidate name, reply-subject hash input.
    pub identity: String,
    /// Broker URLs (`nats://host:port`), from `plugin.choria.middleware_hosts`.
    pub middleware_hosts: Vec<String>,
    /// Whether SRV lookup was asked for when no hosts are set.
    pub use_srv: bool,
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

/// Every setting as written. `Debug` lists the keys only: values include the NATS
/// password (`plugin.nats.pass`) and whatever else a site puts in the file.
#[derive(Clone, Default)]
struct RawSettings(BTreeMap<String, String>);

impl std::fmt::Debug for RawSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// The client configuration could not be read or is unusable: the same shape (file
/// and every problem) as a provisioner YAML error.
pub type ClientConfigError = crate::config::ConfigError;

/// The default `--choria-config`: the first of Go's candidates that exists, else the
/// last one (which must then exist).
pub fn default_path() -> PathBuf {
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
pub fn parse_lines(text: &str, prefix: &str, into: &mut BTreeMap<String, String>) -> Vec<usize> {
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
    pub fn from_raw(
        path: &Path,
        raw: BTreeMap<String, String>,
        parsed_files: Vec<PathBuf>,
        mut warnings: Vec<Problem>,
    ) -> Result<ClientConfig, ClientConfigError> {
        let mut problems = Vec::new();
        let get = |k: &str| raw.get(k).map(|s| s.as_str());
        let seconds = |key: &str, default: u64, problems: &mut Vec<Problem>| -> Duration {
            match get(key) {
                None => Duration::from_secs(default),
                Some(v) => match v.parse::<u64>() {
                    Ok(n) => Duration::from_secs(n),
                    Err(_) => parse_duration(v).unwrap_or_else(|e| {
                        problems.push(Problem::with_value(key, v, e.to_string()));
                        Duration::from_secs(default)
                    }),
                },
            }
        };
        let discovery_timeout = seconds("discovery_timeout", 2, &mut problems);
        let connect_timeout = seconds("plugin.choria.network.connect_timeout", 2, &mut problems);
        let ttl = match get("ttl") {
            None => 60,
            Some(v) => v.parse().unwrap_or_else(|_| {
                problems.push(Problem::with_value(
                    "ttl",
                    v,
                    "must be a whole number of seconds",
                ));
                60
            }),
        };
        let use_srv = match get("plugin.choria.use_srv") {
            None => true,
            Some(v) => truthy(v).unwrap_or_else(|| {
                problems.push(Problem::with_value(
                    "plugin.choria.use_srv",
                    v,
                    "must be true or false",
                ));
                true
            }),
        };
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
            raw: RawSettings(raw),
        })
    }

    /// A raw setting as written (after `plugin.d` merging), e.g. `plugin.choria.ssldir`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.raw.0.get(key).map(|s| s.as_str())
    }

    /// Applies what the daemon overrides in code (`cmd/provisioner.go:61-79`):
    /// collectives, insecure mode and the provisioning broker account.
    pub fn apply_provisioner_overrides(&mut self, config: &Config) {
        self.collectives = vec!["provisioning".into()];
        self.main_collective = "provisioning".into();
        if config.choria_insecure {
            self.insecure = true;
            self.security_provider = SecurityProvider::File;
        }
        if !config.broker_provisioning_password.is_empty() {
            self.nats_user = "provisioner".into();
            self.nats_pass = config.broker_provisioning_password.clone();
        }
    }

    /// The per-try RPC timeout for an agent whose DDL timeout is `agent_timeout`
    /// (`discovery_timeout` + DDL timeout: 22 s for `choria_provision`, 4 s for `rpcutil`).
    pub fn rpc_timeout(&self, agent_timeout: Duration) -> Duration {
        self.discovery_timeout + agent_timeout
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
        if self.middleware_hosts.is_empty() {
            problems.push(Problem::new(
                "plugin.choria.middleware_hosts",
                "no broker is configured: set plugin.choria.middleware_hosts (SRV lookup of \
                 _mcollective-server._tcp is not supported by this provisioner)",
            ));
        }
        for url in &self.middleware_hosts {
            if broker_host_port(url).is_none() {
                problems.push(Problem::with_value(
                    "plugin.choria.middleware_hosts",
                    url,
                    "must be host:port or nats://host:port",
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
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let (host, port) = rest.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// go-choria's identity rule: the hostname if it has at least two dots, else the
/// DNS FQDN, else the short hostname.
pub fn default_identity() -> Option<String> {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())?;
    if hostname.matches('.').count() > 1 {
        return Some(hostname);
    }
    Some(canonical_name(&hostname).unwrap_or(hostname))
}

/// The canonical DNS name of `host` through the system resolver (`getaddrinfo` with
/// `AI_CANONNAME`, what `hostname -f` does).
fn canonical_name(host: &str) -> Option<String> {
    let c_host = std::ffi::CString::new(host).ok()?;
    // SAFETY: hints is a zeroed addrinfo with only flags set; getaddrinfo allocates
    // `res`, which is freed with freeaddrinfo before returning; ai_canonname is a
    // NUL-terminated string owned by `res` and copied before the free.
    unsafe {
        let mut hints: libc::addrinfo = std::mem::zeroed();
        hints.ai_flags = libc::AI_CANONNAME;
        hints.ai_family = libc::AF_UNSPEC;
        let mut res: *mut libc::addrinfo = std::ptr::null_mut();
        if libc::getaddrinfo(c_host.as_ptr(), std::ptr::null(), &hints, &mut res) != 0 {
            return None;
        }
        let name = if !res.is_null() && !(*res).ai_canonname.is_null() {
            std::ffi::CStr::from_ptr((*res).ai_canonname)
                .to_str()
                .ok()
                .map(|s| s.trim_end_matches('.').to_string())
        } else {
            None
        };
        libc::freeaddrinfo(res);
        name.filter(|n| n.contains('.'))
    }
}
