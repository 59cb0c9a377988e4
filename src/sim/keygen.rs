//! `choria-fleet-sim keys`: every credential a test, a demo or an operator's trial
//! run needs, in one directory, with the provisioner YAML, choria.cfg, nats-server
//! and helper snippets that use them.
//!
//! * `issuer.seed` / `issuer.public`: the organisation issuer (ed25519, hex);
//! * `provisioning.jwt`: the nodes' provisioning JWT (`cht`, `chu`, `chpd`, and `v2`
//!   and `update` when asked), signed by the issuer;
//! * `signer.seed` / `signer.public` / `signer.jwt`: the provisioner's server-JWT
//!   signing key and its chain-issuer client token (`tcs` by the issuer), as
//!   `choria jwt client signer.jwt provisioner_signer issuer.seed --server-provisioner
//!   --stream-user --elections-user --service --issuer` makes them. With `--v2` it is
//!   also the provisioner's client JWT for the broker connection: `ou` `choria` and the
//!   permissions a Choria broker checks (`provisioner`, `streams_user`,
//!   `election_user`; choria-io/tokens `ClientPermissions`);
//! * `ca.pem`, `broker.pem` + `broker-key.pem` (SANs `localhost`, `127.0.0.1` and
//!   any `--broker-name`), `provisioner.pem` + `provisioner-key.pem` (RSA 2048,
//!   because the `file` security provider signs requests with it);
//! * `choria-provisioner.yaml`, `choria.cfg`, `nats-server.conf`, `helper.sh`.
//!
//! Secrets are written mode 0600; nothing is overwritten unless `force` is set.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::str::FromStr as _;
use std::time::Duration;

use ring::signature::{Ed25519KeyPair, KeyPair as _};
use serde_json::json;
use x509_cert::builder::{Builder, CertificateBuilder, Profile};
use x509_cert::der::asn1::{Ia5String, OctetString};
use x509_cert::der::EncodePem as _;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{ExtendedKeyUsage, SubjectAltName};
use x509_cert::name::Name;
use x509_cert::serial_number::SerialNumber;
use x509_cert::spki::{EncodePublicKey as _, SubjectPublicKeyInfoOwned};
use x509_cert::time::Validity;

use crate::crypto::ids;
use crate::crypto::jwt::{ProvisioningClaims, SigningKey, StandardClaims};
use crate::crypto::pem;

/// What to make.
#[derive(Debug, Clone)]
pub struct KeysOptions {
    /// Directory to write into (created if missing).
    pub dir: PathBuf,
    /// The provisioning token (`cht`).
    pub token: String,
    /// The provisioning broker URL (`chu`, `middleware_hosts`, the nats-server listener).
    pub url: String,
    /// Nodes speak protocol v2 (`v2` claim); the provisioner uses the `choria` provider.
    pub v2: bool,
    /// Nodes allow in-place upgrades (`update` claim).
    pub upgrades: bool,
    /// The provisioner's identity (certificate CN).
    pub identity: String,
    /// Extra DNS names for the broker certificate.
    pub broker_names: Vec<String>,
    /// Validity of every token and certificate.
    pub validity: Duration,
    /// Overwrite existing files.
    pub force: bool,
}

impl Default for KeysOptions {
    fn default() -> Self {
        KeysOptions {
            dir: PathBuf::from("sim-keys"),
            token: String::new(),
            url: "nats://127.0.0.1:4222".into(),
            v2: false,
            upgrades: false,
            identity: "provisioner.example.net".into(),
            broker_names: Vec::new(),
            validity: Duration::from_secs(365 * 86_400),
            force: false,
        }
    }
}

/// A random number generator over the system source, for the RustCrypto APIs.
pub struct SystemRng;

impl rsa::rand_core::RngCore for SystemRng {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        ids::random_bytes(&mut b);
        u32::from_le_bytes(b)
    }
    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        ids::random_bytes(&mut b);
        u64::from_le_bytes(b)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        ids::random_bytes(dest);
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rsa::rand_core::Error> {
        ids::random_bytes(dest);
        Ok(())
    }
}

impl rsa::rand_core::CryptoRng for SystemRng {}

/// A new RSA 2048 private key.
pub fn rsa_key() -> Result<rsa::RsaPrivateKey, String> {
    rsa::RsaPrivateKey::new(&mut SystemRng, 2048).map_err(|e| format!("RSA key generation: {e}"))
}

/// `key` as PKCS#1 PEM (`RSA PRIVATE KEY`), as Choria writes private keys.
pub fn rsa_private_pem(key: &rsa::RsaPrivateKey) -> Result<String, String> {
    use rsa::pkcs1::EncodeRsaPrivateKey as _;
    let der = key
        .to_pkcs1_der()
        .map_err(|e| format!("RSA key encoding: {e}"))?;
    Ok(pem::encode(&pem::Block {
        label: "RSA PRIVATE KEY".into(),
        headers: vec![],
        der: der.as_bytes().to_vec(),
    }))
}

fn random_seed() -> [u8; 32] {
    let mut seed = [0u8; 32];
    ids::random_bytes(&mut seed);
    seed
}

/// The ed25519 public key of `seed`.
pub fn ed25519_public(seed: &[u8; 32]) -> [u8; 32] {
    let pair = Ed25519KeyPair::from_seed_unchecked(seed).expect("a 32-byte seed is a key");
    let mut public = [0u8; 32];
    public.copy_from_slice(pair.public_key().as_ref());
    public
}

/// [`ed25519_public`] as lowercase hex, as Choria writes keys.
pub fn ed25519_public_hex(seed: &[u8; 32]) -> String {
    hex::encode(ed25519_public(seed))
}

fn ed25519_sign_hex(seed: &[u8; 32], message: &str) -> String {
    let pair = Ed25519KeyPair::from_seed_unchecked(seed).expect("a 32-byte seed is a key");
    hex::encode(pair.sign(message.as_bytes()).as_ref())
}

/// A provisioning JWT signed with the issuer `seed`, valid for `validity`.
pub fn provisioning_jwt(
    seed: &[u8; 32],
    token: &str,
    url: &str,
    v2: bool,
    update: bool,
    validity: Duration,
) -> Result<String, String> {
    let now = crate::clock::unix_now() as i64;
    let claims = ProvisioningClaims {
        cht: token.to_string(),
        chu: url.to_string(),
        chpd: true,
        // `choria jwt prov` writes the default organisation; a broker with an
        // issuer picks the issuer to verify with by it.
        ou: "choria".into(),
        v2,
        update,
        standard: StandardClaims {
            purpose: "choria_provisioning".into(),
            iss: format!("I-{}", ed25519_public_hex(seed)),
            sub: "choria_provisioning".into(),
            iat: Some(now),
            nbf: Some(now),
            exp: Some(now + validity.as_secs() as i64),
            jti: ids::ksuid(),
            ..StandardClaims::default()
        },
        ..ProvisioningClaims::default()
    };
    SigningKey::from_ed25519_seed(seed)
        .sign_jwt(&claims)
        .map_err(|e| format!("signing the provisioning JWT: {e}"))
}

/// The provisioner's chain-issuer client token for `signer_public`, vouched for by
/// the issuer `issuer_seed` (`tcs` = issuer signature over `<jti>.<signer_public>`).
pub fn signer_jwt(
    issuer_seed: &[u8; 32],
    signer_public: &str,
    validity: Duration,
) -> Result<String, String> {
    let now = crate::clock::unix_now() as i64;
    let jti = ids::ksuid();
    let claims = json!({
        "callerid": "provisioner_signer",
        "ou": "choria",
        "permissions": {
            "streams_user": true,
            "election_user": true,
            "fleet_management": true,
            "service": true,
            "provisioner": true,
        },
        "purpose": "choria_client_id",
        "tcs": ed25519_sign_hex(issuer_seed, &format!("{jti}.{signer_public}")),
        "public_key": signer_public,
        "iss": format!("I-{}", ed25519_public_hex(issuer_seed)),
        "exp": now + validity.as_secs() as i64,
        "nbf": now,
        "iat": now,
        "jti": jti,
    });
    SigningKey::from_ed25519_seed(issuer_seed)
        .sign_jwt(&claims)
        .map_err(|e| format!("signing the signer token: {e}"))
}

fn serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    ids::random_bytes(&mut bytes);
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    SerialNumber::new(&bytes).expect("16 bytes is a valid serial")
}

fn name(cn: &str) -> Result<Name, String> {
    let cn = cn.replace([',', '+', '=', '\\', '"'], "_");
    Name::from_str(&format!("CN={cn},O=choria-fleet-sim")).map_err(|e| format!("name {cn}: {e}"))
}

fn alt_names(dns: &[String], ips: &[std::net::IpAddr]) -> Result<SubjectAltName, String> {
    let mut names = Vec::new();
    for d in dns {
        names.push(GeneralName::DnsName(
            Ia5String::new(d).map_err(|e| format!("DNS name {d}: {e}"))?,
        ));
    }
    for ip in ips {
        let octets = match ip {
            std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
            std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
        };
        names.push(GeneralName::IpAddress(
            OctetString::new(octets).map_err(|e| e.to_string())?,
        ));
    }
    Ok(SubjectAltName(names))
}

fn usages() -> ExtendedKeyUsage {
    use x509_cert::der::oid::db::rfc5280::{ID_KP_CLIENT_AUTH, ID_KP_SERVER_AUTH};
    ExtendedKeyUsage(vec![ID_KP_SERVER_AUTH, ID_KP_CLIENT_AUTH])
}

fn p256_key() -> Result<p256::ecdsa::SigningKey, String> {
    // A uniformly random scalar is below the group order with overwhelming
    // probability; retry the rare miss.
    for _ in 0..8 {
        if let Ok(k) = p256::ecdsa::SigningKey::from_slice(&random_seed()) {
            return Ok(k);
        }
    }
    Err("could not make a P-256 key".into())
}

fn p256_private_pem(key: &p256::ecdsa::SigningKey) -> Result<String, String> {
    use p256::pkcs8::EncodePrivateKey as _;
    key.to_pkcs8_pem(p256::pkcs8::LineEnding::LF)
        .map(|p| p.to_string())
        .map_err(|e| format!("P-256 key encoding: {e}"))
}

/// The self-signed CA (P-256).
fn make_ca(validity: Duration) -> Result<(String, p256::ecdsa::SigningKey, Name), String> {
    let key = p256_key()?;
    let subject = name("choria-fleet-sim CA")?;
    let spki = SubjectPublicKeyInfoOwned::from_key(*key.verifying_key())
        .map_err(|e| format!("CA public key: {e}"))?;
    let validity = Validity::from_now(validity).map_err(|e| e.to_string())?;
    let cert = CertificateBuilder::new(
        Profile::Root,
        serial(),
        validity,
        subject.clone(),
        spki,
        &key,
    )
    .and_then(|b| b.build::<p256::ecdsa::DerSignature>())
    .map_err(|e| format!("CA certificate: {e}"))?;
    let cert = cert
        .to_pem(p256::pkcs8::LineEnding::LF)
        .map_err(|e| e.to_string())?;
    // The CA key is not written: the directory is for throw-away setups.
    Ok((cert, key, subject))
}

/// A leaf certificate for `spki`, signed by the CA.
fn make_leaf(
    ca_key: &p256::ecdsa::SigningKey,
    ca_name: &Name,
    cn: &str,
    san: SubjectAltName,
    spki: SubjectPublicKeyInfoOwned,
    validity: Duration,
) -> Result<String, String> {
    let validity = Validity::from_now(validity).map_err(|e| e.to_string())?;
    let profile = Profile::Leaf {
        issuer: ca_name.clone(),
        enable_key_agreement: false,
        enable_key_encipherment: true,
    };
    let mut builder = CertificateBuilder::new(profile, serial(), validity, name(cn)?, spki, ca_key)
        .map_err(|e| format!("certificate for {cn}: {e}"))?;
    builder
        .add_extension(&san)
        .and_then(|_| builder.add_extension(&usages()))
        .map_err(|e| format!("certificate for {cn}: {e}"))?;
    let cert = builder
        .build::<p256::ecdsa::DerSignature>()
        .map_err(|e| format!("certificate for {cn}: {e}"))?;
    cert.to_pem(p256::pkcs8::LineEnding::LF)
        .map_err(|e| e.to_string())
}

/// An RSA client key (PKCS#1 PEM) and its certificate for `cn`.
#[derive(Debug, Clone)]
pub struct ClientCredential {
    /// The certificate PEM, signed by the CA.
    pub certificate: String,
    /// The private key PEM.
    pub key: String,
}

/// A new RSA client key for `cn` and its certificate, signed by the CA.
fn rsa_client(
    ca_key: &p256::ecdsa::SigningKey,
    ca_name: &Name,
    cn: &str,
    validity: Duration,
) -> Result<ClientCredential, String> {
    let key = rsa_key()?;
    let spki = {
        let der = key
            .to_public_key()
            .to_public_key_der()
            .map_err(|e| e.to_string())?;
        SubjectPublicKeyInfoOwned::try_from(der.as_bytes()).map_err(|e| e.to_string())?
    };
    let certificate = make_leaf(
        ca_key,
        ca_name,
        cn,
        alt_names(&[cn.to_string()], &[])?,
        spki,
        validity,
    )?;
    Ok(ClientCredential {
        certificate,
        key: rsa_private_pem(&key)?,
    })
}

/// A CA of its own (PEM) and, for each of `names`, a client credential it signed:
/// what the tests' instances sign their peer messages with.
pub fn client_pki(
    names: &[&str],
    validity: Duration,
) -> Result<(String, Vec<ClientCredential>), String> {
    let (ca, ca_key, ca_name) = make_ca(validity)?;
    let clients = names
        .iter()
        .map(|cn| rsa_client(&ca_key, &ca_name, cn, validity))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((ca, clients))
}

/// The host and port of the first broker in `url`.
fn host_port(url: &str) -> (String, u16) {
    crate::choria::client_config::broker_host_port(url.split(',').next().unwrap_or(url))
        .unwrap_or_else(|| ("127.0.0.1".into(), 4222))
}

/// Files to write: name, contents, secret.
type Files = Vec<(&'static str, String, bool)>;

/// Makes every credential and snippet in memory.
fn make(opts: &KeysOptions) -> Result<Files, String> {
    let dir = opts.dir.display().to_string();
    let at = |f: &str| format!("{dir}/{f}");
    let issuer = random_seed();
    let signer = random_seed();
    let issuer_public = ed25519_public_hex(&issuer);
    let signer_public = ed25519_public_hex(&signer);
    let prov_jwt = provisioning_jwt(
        &issuer,
        &opts.token,
        &opts.url,
        opts.v2,
        opts.upgrades,
        opts.validity,
    )?;
    let signer_token = signer_jwt(&issuer, &signer_public, opts.validity)?;

    let (ca, ca_key, ca_name) = make_ca(opts.validity)?;
    let (broker_host, port) = host_port(&opts.url);
    let broker_key = p256_key()?;
    let mut dns = vec!["localhost".to_string()];
    let mut ips = vec![std::net::IpAddr::from([127, 0, 0, 1])];
    for n in opts
        .broker_names
        .iter()
        .chain(std::iter::once(&broker_host))
    {
        match n.parse::<std::net::IpAddr>() {
            Ok(ip) if !ips.contains(&ip) => ips.push(ip),
            Ok(_) => {}
            Err(_) if !dns.contains(n) => dns.push(n.clone()),
            Err(_) => {}
        }
    }
    let broker_spki = SubjectPublicKeyInfoOwned::from_key(*broker_key.verifying_key())
        .map_err(|e| e.to_string())?;
    let broker_cert = make_leaf(
        &ca_key,
        &ca_name,
        &broker_host,
        alt_names(&dns, &ips)?,
        broker_spki,
        opts.validity,
    )?;
    let client = rsa_client(&ca_key, &ca_name, &opts.identity, opts.validity)?;

    let security = if opts.v2 {
        format!(
            "plugin.security.provider = choria\n\
             plugin.security.issuer.names = choria\n\
             plugin.security.issuer.choria.public = {issuer_public}\n\
             plugin.security.choria.token_file = {}\n\
             plugin.security.choria.seed_file = {}\n\
             plugin.security.choria.certificate = {}\n\
             plugin.security.choria.key = {}\n\
             plugin.security.choria.ca = {}\n",
            at("signer.jwt"),
            at("signer.seed"),
            at("provisioner.pem"),
            at("provisioner-key.pem"),
            at("ca.pem")
        )
    } else {
        format!(
            "plugin.security.provider = file\n\
             plugin.security.file.certificate = {}\n\
             plugin.security.file.key = {}\n\
             plugin.security.file.ca = {}\n",
            at("provisioner.pem"),
            at("provisioner-key.pem"),
            at("ca.pem")
        )
    };
    let choria_cfg = format!(
        "# The provisioner's choria.cfg for the credentials in {dir} (choria-fleet-sim keys).\n\
         identity = {}\n\
         plugin.choria.middleware_hosts = {}\n\
         {security}",
        opts.identity, opts.url
    );
    let signing = if opts.v2 {
        format!(
            "jwt_signing_key: {}\njwt_signing_token: {}\n",
            at("signer.seed"),
            at("signer.jwt")
        )
    } else {
        String::new()
    };
    let yaml = format!(
        "# choria-provisioner configuration for the credentials in {dir} (choria-fleet-sim keys).\n\
         # Run: choria-provisioner --config {dir}/choria-provisioner.yaml --choria-config {dir}/choria.cfg\n\
         workers: 4\n\
         interval: 1m\n\
         site: sim\n\
         token: {token}\n\
         helper: {helper}\n\
         monitor_port: 0\n\
         choria_insecure: false\n\
         features:\n  jwt: true\n  ed25519: {v2}\n  upgrades: {upgrades}\n\
         jwt_verify_cert: {verify}\n\
         {signing}",
        token = serde_json::to_string(&opts.token).unwrap_or_default(),
        helper = at("helper.sh"),
        v2 = opts.v2,
        upgrades = opts.upgrades,
        verify = at("issuer.public"),
    );
    let nats = format!(
        "# nats-server configuration for a provisioning broker (choria-fleet-sim keys).\n\
         # Provisioning-mode servers always connect with TLS.\n\
         listen: \"127.0.0.1:{port}\"\n\
         tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  timeout: 5\n}}\n",
        at("broker.pem"),
        at("broker-key.pem"),
        at("ca.pem")
    );
    let provider = if opts.v2 {
        "\n    \"plugin.security.provider\": \"choria\","
    } else {
        ""
    };
    let helper = format!(
        "#!/bin/sh\n\
         # A minimal helper for a trial run (choria-fleet-sim keys): every node is\n\
         # configured out of provisioning mode onto the same broker.\n\
         set -eu\n\
         input=$(cat)\n\
         identity=$(printf '%s' \"$input\" | sed -n 's/^{{\"identity\":\"\\([^\"\\\\]*\\)\".*/\\1/p')\n\
         if [ -z \"$identity\" ]; then\n  \
           printf '{{\"defer\": true, \"msg\": \"no identity in the request\"}}\\n'\n  \
           exit 0\n\
         fi\n\
         cat <<JSON\n\
         {{\n  \"defer\": false,\n  \"msg\": \"configured by {dir}/helper.sh\",\n  \"configuration\": {{\n    \
         \"identity\": \"$identity\",{provider}\n    \
         \"plugin.choria.server.provision\": \"false\",\n    \
         \"plugin.choria.middleware_hosts\": \"{url}\"\n  }}\n}}\n\
         JSON\n",
        url = opts.url
    );
    Ok(vec![
        ("issuer.seed", hex::encode(issuer), true),
        ("issuer.public", format!("{issuer_public}\n"), false),
        ("provisioning.jwt", prov_jwt, true),
        ("signer.seed", hex::encode(signer), true),
        ("signer.public", format!("{signer_public}\n"), false),
        ("signer.jwt", signer_token, false),
        ("ca.pem", ca, false),
        ("broker.pem", broker_cert, false),
        ("broker-key.pem", p256_private_pem(&broker_key)?, true),
        ("provisioner.pem", client.certificate, false),
        ("provisioner-key.pem", client.key, true),
        ("choria.cfg", choria_cfg, false),
        ("choria-provisioner.yaml", yaml, true),
        ("nats-server.conf", nats, false),
        ("helper.sh", helper, false),
    ])
}

fn write_file(path: &Path, contents: &str, mode: u32, force: bool) -> Result<(), String> {
    let mut options = OpenOptions::new();
    options.write(true).mode(mode);
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let mut f = options.open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => {
            format!("{} exists (use --force to replace it)", path.display())
        }
        _ => format!("cannot write {}: {e}", path.display()),
    })?;
    f.write_all(contents.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    // A replaced file keeps its old mode: set it explicitly.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))
}

/// Writes every file into `opts.dir`; returns their paths.
pub fn write_keys(opts: &KeysOptions) -> Result<Vec<PathBuf>, String> {
    if opts.token.is_empty() {
        return Err("a provisioning token is required (nodes refuse a JWT without one)".into());
    }
    std::fs::create_dir_all(&opts.dir)
        .map_err(|e| format!("cannot create {}: {e}", opts.dir.display()))?;
    let files = make(opts)?;
    if !opts.force {
        if let Some((name, _, _)) = files.iter().find(|(n, _, _)| opts.dir.join(n).exists()) {
            return Err(format!(
                "{} exists (use --force to replace it)",
                opts.dir.join(name).display()
            ));
        }
    }
    let mut written = Vec::new();
    for (name, contents, secret) in files {
        let mode = match (secret, name) {
            (_, "helper.sh") => 0o755,
            (true, _) => 0o600,
            (false, _) => 0o644,
        };
        let path = opts.dir.join(name);
        write_file(&path, &contents, mode, opts.force)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choria::client_jwt::{
        ClientJwt, ELECTION_PERMISSION, PROVISIONER_PERMISSION, STREAMS_PERMISSION,
    };

    #[test]
    fn the_signer_token_carries_the_permissions_a_choria_broker_checks() {
        let issuer = [3u8; 32];
        let signer = ed25519_public_hex(&[4u8; 32]);
        let token = signer_jwt(&issuer, &signer, Duration::from_secs(60)).unwrap();
        let jwt = ClientJwt::parse("signer.jwt", token.as_bytes()).unwrap();
        let claims = jwt.claims();
        for p in [
            PROVISIONER_PERMISSION,
            STREAMS_PERMISSION,
            ELECTION_PERMISSION,
        ] {
            assert!(claims.has(p), "{p}: {:?}", claims.granted());
        }
        assert!(!claims.has("server_provisioner"), "not a Go JSON name");
        assert_eq!(claims.ou, "choria");
        assert_eq!(claims.public_key, signer);
    }

    #[test]
    fn the_provisioning_jwt_names_its_organisation() {
        let token = provisioning_jwt(
            &[3u8; 32],
            "t",
            "nats://h:1",
            true,
            false,
            Duration::from_secs(60),
        )
        .unwrap();
        let claims: serde_json::Value = crate::crypto::jwt::unverified_claims(&token).unwrap();
        assert_eq!(claims["ou"], "choria");
    }
}
