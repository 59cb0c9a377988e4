//! Signed peer messages: only a provisioner writes the tables instances share.
//!
//! Anyone holding the broker's provisioning password may publish on
//! `provisioning.provisioner.>`, so where the instance has credentials of its own
//! every heartbeat, handoff and approvals message goes out sealed: the body, the
//! subject it was sent on, the sending process (a random incarnation and a sequence
//! that only grows) and the time, signed with the instance's key, with the
//! credential that proves the key (the `file`/`puppet` certificate, or the
//! `choria` client JWT). A receiver believes a sealed message only when
//!
//! 1. the credential is vouched for by the same trust the site configures for its
//!    broker connection: a chain to the CA bundle, or a client JWT signed
//!    (directly or through a chain issuer) by an organisation issuer of
//!    `plugin.security.issuer.names` (refused: `untrusted`);
//! 2. its name is one the site allows as a provisioner (`peer_signers`, by default
//!    this instance's own certificate name; with an issuer the JWT must also carry
//!    the `provisioner` permission) (`signer`);
//! 3. the signature verifies over exactly what was signed (`signature`);
//! 4. it was signed for the subject it arrived on, and is not one the receiver
//!    saw already or older than the last it saw from that sending process on that
//!    subject (`replayed`);
//! 5. it was sealed less than [`MAX_AGE`] ago by the receiver's clock (`stale`).
//!
//! A plain message in secure mode is `unsigned`. The checks are made in that order,
//! so nothing unauthenticated ever touches the replay memory. With
//! `choria_insecure: true` there is nothing to sign or check with: messages go out
//! plain and are believed as they come.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use parking_lot::Mutex;
use ring::signature::{
    Ed25519KeyPair, RsaKeyPair, UnparsedPublicKey, ED25519, RSA_PKCS1_2048_8192_SHA256,
    RSA_PKCS1_SHA256,
};
use serde::{Deserialize, Serialize};

use super::PeerMessageError;
use crate::choria::client_config::ClientConfig;
use crate::choria::protocol::{client_identity, Credentials};
use crate::crypto::x509::{self, Anchors};

/// How old a sealed message may be when it arrives, by the receiver's clock (the
/// instances' clocks must agree within it, as Choria requests must within their TTL).
pub(crate) const MAX_AGE: u64 = 600;

/// The largest credential (a certificate's DER or a client JWT) a sealed message
/// may carry.
const MAX_CREDENTIAL: usize = 16 * 1024;

/// The most sending processes and subjects remembered against replays; past it
/// the one heard from longest ago is forgotten.
const MAX_REMEMBERED: usize = 4096;

/// The most verified credentials kept, so that each message costs one signature
/// check and not a chain's.
const MAX_VERIFIED: usize = 64;

/// What is signed: a fixed label, then each part and a NUL.
const DOMAIN: &[u8] = b"choria-provisioner peer message v1\0";

/// How this instance signs.
pub(crate) enum PeerKey {
    /// The `file`/`puppet` provider's RSA key and the DER of its certificate.
    Rsa {
        /// The private key.
        key: Arc<RsaKeyPair>,
        /// The certificate that proves it.
        certificate: Vec<u8>,
    },
    /// The `choria` provider's ed25519 seed and its client JWT.
    Ed25519 {
        /// The key of the seed.
        key: Arc<Ed25519KeyPair>,
        /// The client JWT that proves it.
        jwt: String,
    },
}

/// What a receiver trusts.
pub(crate) enum PeerTrust {
    /// Certificates the site's CA vouched for.
    Ca(Anchors),
    /// Client JWTs the organisation issuers (ed25519 public keys) signed.
    Issuers(Vec<[u8; 32]>),
}

/// The secure half of a [`Seal`].
struct Secure {
    key: PeerKey,
    trust: PeerTrust,
    /// `peer_signers`, compiled.
    signers: Vec<regex::Regex>,
    /// Credentials verified already, by the SHA-256 of their bytes.
    verified: Mutex<HashMap<[u8; 32], Signer>>,
}

/// A credential that verified: who it names, its key, until when.
#[derive(Clone)]
struct Signer {
    name: String,
    key: SignerKey,
    until: i64,
}

#[derive(Clone)]
enum SignerKey {
    Rsa(Vec<u8>),
    Ed25519([u8; 32]),
}

/// The sealed form of a peer message on the wire.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    /// Always 1: tells a sealed message from a plain one.
    peer_seal: u8,
    subject: String,
    incarnation: u64,
    seq: u64,
    time: u64,
    /// The message, base64.
    body: String,
    /// The signer's certificate (DER, base64), with the `file`/`puppet` providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    certificate: Option<String>,
    /// The signer's client JWT, with the `choria` provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    jwt: Option<String>,
    /// The signature, base64.
    signature: String,
}

/// A message opened: its body, and who signed it (none when insecure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Opened {
    /// The message.
    pub body: Vec<u8>,
    /// The signer's name, when the message was signed and verified.
    pub signer: Option<String>,
}

/// Seals what this instance sends to its peers and opens what they send.
pub(crate) struct Seal {
    secure: Option<Secure>,
    incarnation: u64,
    seq: AtomicU64,
    /// The last sequence seen per sending process and subject, and when.
    seen: Mutex<HashMap<(String, u64), (u64, Instant)>>,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seal")
            .field("secure", &self.secure.is_some())
            .finish_non_exhaustive()
    }
}

/// Why a seal could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// A `peer_signers` pattern did not compile.
    #[error("peer_signers pattern {0:?} does not compile")]
    Pattern(String),
    /// The instance's certificate is not one its own CA vouches for.
    #[error("this instance's certificate cannot sign peer messages: {0}")]
    OwnCertificate(x509::X509Error),
}

impl Seal {
    /// A seal that signs nothing and believes everything (`choria_insecure`).
    pub(crate) fn insecure() -> Arc<Seal> {
        Arc::new(Seal::new(None))
    }

    fn new(secure: Option<Secure>) -> Seal {
        let mut bytes = [0u8; 8];
        crate::crypto::ids::random_bytes(&mut bytes);
        Seal {
            secure,
            incarnation: u64::from_le_bytes(bytes),
            seq: AtomicU64::new(0),
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// A seal that signs with `key` and believes what `trust` vouches for and
    /// `signers` (RE2 patterns) name; no pattern: only this instance's own name
    /// with a certificate, any name with an issuer (whose JWTs must carry the
    /// `provisioner` permission in any case).
    pub(crate) fn secure(
        key: PeerKey,
        trust: PeerTrust,
        signers: &[String],
        now: u64,
    ) -> Result<Arc<Seal>, SealError> {
        let mut compiled = Vec::with_capacity(signers.len());
        for pattern in signers {
            compiled
                .push(regex::Regex::new(pattern).map_err(|_| SealError::Pattern(pattern.clone()))?);
        }
        if compiled.is_empty() {
            if let (PeerKey::Rsa { certificate, .. }, PeerTrust::Ca(anchors)) = (&key, &trust) {
                let own =
                    x509::vouch(certificate, anchors, now).map_err(SealError::OwnCertificate)?;
                let exact = format!("^{}$", regex::escape(&own.common_name));
                compiled.push(regex::Regex::new(&exact).map_err(|_| SealError::Pattern(exact))?);
            }
        }
        Ok(Arc::new(Seal::new(Some(Secure {
            key,
            trust,
            signers: compiled,
            verified: Mutex::new(HashMap::new()),
        }))))
    }

    /// True when messages are signed and checked.
    pub(crate) fn is_secure(&self) -> bool {
        self.secure.is_some()
    }

    /// How messages are signed and whose are believed, for `check`.
    pub(crate) fn describe(&self) -> String {
        let Some(secure) = &self.secure else {
            return "plain (choria_insecure: nothing is signed or checked)".into();
        };
        let names: Vec<&str> = secure.signers.iter().map(regex::Regex::as_str).collect();
        match (&secure.key, names.is_empty()) {
            (PeerKey::Rsa { .. }, _) => format!(
                "signed with this instance's certificate; a peer's believed when the CA bundle \
                 vouches for its certificate and its name matches {}",
                names.join(" or ")
            ),
            (PeerKey::Ed25519 { .. }, true) => "signed with this instance's seed and client JWT; \
                 a peer's believed when an organisation issuer signed its JWT with the \
                 provisioner permission"
                .into(),
            (PeerKey::Ed25519 { .. }, false) => format!(
                "signed with this instance's seed and client JWT; a peer's believed when an \
                 organisation issuer signed its JWT with the provisioner permission and its \
                 callerid matches {}",
                names.join(" or ")
            ),
        }
    }

    /// `body` as sent on `subject`: sealed when secure, as it is otherwise.
    pub(crate) fn seal(&self, subject: &str, body: &[u8], now: u64) -> std::io::Result<Vec<u8>> {
        let Some(secure) = &self.secure else {
            return Ok(body.to_vec());
        };
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let signed = signed_bytes(subject, self.incarnation, seq, now, body);
        let (signature, certificate, jwt) = match &secure.key {
            PeerKey::Rsa { key, certificate } => {
                let mut sig = vec![0u8; key.public().modulus_len()];
                key.sign(
                    &RSA_PKCS1_SHA256,
                    &ring::rand::SystemRandom::new(),
                    &signed,
                    &mut sig,
                )
                .map_err(|_| std::io::Error::other("RSA signing of a peer message failed"))?;
                (sig, Some(STANDARD.encode(certificate)), None)
            }
            PeerKey::Ed25519 { key, jwt } => {
                (key.sign(&signed).as_ref().to_vec(), None, Some(jwt.clone()))
            }
        };
        serde_json::to_vec(&Envelope {
            peer_seal: 1,
            subject: subject.to_string(),
            incarnation: self.incarnation,
            seq,
            time: now,
            body: STANDARD.encode(body),
            certificate,
            jwt,
            signature: STANDARD.encode(signature),
        })
        .map_err(std::io::Error::other)
    }

    /// The most bytes a sealed message of a `most`-byte body may take.
    pub(crate) fn sealed_limit(most: usize) -> usize {
        most.saturating_mul(4) / 3 + MAX_CREDENTIAL * 2 + 1024
    }

    /// The body of `data`, which arrived on `subject`, once checked as the module
    /// says; `most` bounds the body. Plain messages are taken as they are only when
    /// insecure.
    pub(crate) fn open(
        &self,
        subject: &str,
        data: &[u8],
        most: usize,
        now: u64,
    ) -> Result<Opened, PeerMessageError> {
        let envelope = if data.starts_with(b"{\"peer_seal\"") {
            if data.len() > Seal::sealed_limit(most) {
                return Err(PeerMessageError::TooLarge(data.len()));
            }
            Some(
                serde_json::from_slice::<Envelope>(data)
                    .map_err(|_| PeerMessageError::Undecodable)?,
            )
        } else {
            None
        };
        let Some(secure) = &self.secure else {
            // Nothing to check with: a sealed body is read as a plain one.
            let body = match envelope {
                Some(e) => STANDARD
                    .decode(e.body.as_bytes())
                    .map_err(|_| PeerMessageError::Undecodable)?,
                None => data.to_vec(),
            };
            return within(body, most, None);
        };
        let envelope = envelope.ok_or(PeerMessageError::Unsigned)?;
        let signer = secure.signer_of(&envelope, now)?;
        let body = STANDARD
            .decode(envelope.body.as_bytes())
            .map_err(|_| PeerMessageError::Undecodable)?;
        let signature = STANDARD
            .decode(envelope.signature.as_bytes())
            .map_err(|_| PeerMessageError::Signature)?;
        let signed = signed_bytes(
            &envelope.subject,
            envelope.incarnation,
            envelope.seq,
            envelope.time,
            &body,
        );
        let verified = match &signer.key {
            SignerKey::Rsa(public) => UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, public)
                .verify(&signed, &signature),
            SignerKey::Ed25519(public) => {
                UnparsedPublicKey::new(&ED25519, public).verify(&signed, &signature)
            }
        };
        verified.map_err(|_| PeerMessageError::Signature)?;
        if envelope.subject != subject {
            return Err(PeerMessageError::Replayed);
        }
        if now.abs_diff(envelope.time) > MAX_AGE {
            return Err(PeerMessageError::Stale);
        }
        self.remember(subject, envelope.incarnation, envelope.seq)?;
        within(body, most, Some(signer.name))
    }

    /// Notes sequence `seq` of the process `incarnation` on `subject`; refuses one
    /// not above the last noted.
    fn remember(&self, subject: &str, incarnation: u64, seq: u64) -> Result<(), PeerMessageError> {
        let mut seen = self.seen.lock();
        let key = (subject.to_string(), incarnation);
        if let Some((last, at)) = seen.get_mut(&key) {
            if seq <= *last {
                return Err(PeerMessageError::Replayed);
            }
            (*last, *at) = (seq, Instant::now());
            return Ok(());
        }
        if seen.len() >= MAX_REMEMBERED {
            if let Some(oldest) = seen
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone())
            {
                seen.remove(&oldest);
            }
        }
        seen.insert(key, (seq, Instant::now()));
        Ok(())
    }
}

/// `body` if it is at most `most` bytes.
fn within(body: Vec<u8>, most: usize, signer: Option<String>) -> Result<Opened, PeerMessageError> {
    if body.len() > most {
        return Err(PeerMessageError::TooLarge(body.len()));
    }
    Ok(Opened { body, signer })
}

/// What is signed for a message.
fn signed_bytes(subject: &str, incarnation: u64, seq: u64, time: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(DOMAIN.len() + subject.len() + body.len() + 64);
    out.extend_from_slice(DOMAIN);
    for part in [
        subject.as_bytes(),
        incarnation.to_string().as_bytes(),
        seq.to_string().as_bytes(),
        time.to_string().as_bytes(),
    ] {
        out.extend_from_slice(part);
        out.push(0);
    }
    out.extend_from_slice(body);
    out
}

impl Secure {
    /// The verified signer of `envelope`'s credential (from the cache, or checked
    /// now and kept), still valid at `now` and allowed.
    fn signer_of(&self, envelope: &Envelope, now: u64) -> Result<Signer, PeerMessageError> {
        let credential: Vec<u8> = match (&envelope.certificate, &envelope.jwt, &self.trust) {
            (Some(c), None, PeerTrust::Ca(_)) => STANDARD
                .decode(c.as_bytes())
                .map_err(|_| PeerMessageError::Undecodable)?,
            (None, Some(j), PeerTrust::Issuers(_)) => j.as_bytes().to_vec(),
            _ => return Err(PeerMessageError::Untrusted),
        };
        if credential.len() > MAX_CREDENTIAL {
            return Err(PeerMessageError::TooLarge(credential.len()));
        }
        let digest: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, &credential)
            .as_ref()
            .try_into()
            .unwrap_or([0; 32]);
        let cached = self.verified.lock().get(&digest).cloned();
        let signer = match cached {
            Some(s) => s,
            None => {
                let s = self.verify(&credential, now)?;
                let mut verified = self.verified.lock();
                if verified.len() >= MAX_VERIFIED {
                    verified.clear();
                }
                verified.insert(digest, s.clone());
                s
            }
        };
        if now as i64 >= signer.until {
            return Err(PeerMessageError::Untrusted);
        }
        Ok(signer)
    }

    /// Checks a credential against the trust and the allowed names.
    fn verify(&self, credential: &[u8], now: u64) -> Result<Signer, PeerMessageError> {
        let signer = match &self.trust {
            PeerTrust::Ca(anchors) => {
                let vouched = x509::vouch(credential, anchors, now)
                    .map_err(|_| PeerMessageError::Untrusted)?;
                Signer {
                    name: vouched.common_name,
                    key: SignerKey::Rsa(vouched.rsa_public_key),
                    until: vouched.not_after,
                }
            }
            PeerTrust::Issuers(issuers) => {
                let jwt =
                    std::str::from_utf8(credential).map_err(|_| PeerMessageError::Untrusted)?;
                issued_signer(jwt, issuers, now)?
            }
        };
        if !self.signers.is_empty() && !self.signers.iter().any(|r| r.is_match(&signer.name)) {
            return Err(PeerMessageError::Signer);
        }
        Ok(signer)
    }
}

/// The claims of a client JWT a peer signs with.
#[derive(Deserialize)]
struct PeerClaims {
    #[serde(default)]
    callerid: String,
    #[serde(default)]
    public_key: String,
    #[serde(default)]
    exp: Option<i64>,
    #[serde(default)]
    permissions: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The signer of a client JWT one of `issuers` signed, which holds the
/// `provisioner` permission.
fn issued_signer(jwt: &str, issuers: &[[u8; 32]], now: u64) -> Result<Signer, PeerMessageError> {
    let claims: PeerClaims = issuers
        .iter()
        .find_map(|issuer| {
            crate::crypto::jwt::verify_issued_token(
                jwt,
                crate::crypto::jwt::CLIENT_ID_PURPOSE,
                issuer,
                now as i64,
            )
            .ok()
        })
        .ok_or(PeerMessageError::Untrusted)?;
    let provisioner = claims
        .permissions
        .as_ref()
        .and_then(|p| p.get("provisioner"))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    if !provisioner || claims.callerid.is_empty() {
        return Err(PeerMessageError::Signer);
    }
    let key: [u8; 32] = hex::decode(&claims.public_key)
        .ok()
        .and_then(|k| k.try_into().ok())
        .ok_or(PeerMessageError::Untrusted)?;
    Ok(Signer {
        name: claims.callerid,
        key: SignerKey::Ed25519(key),
        until: claims.exp.unwrap_or(i64::MAX),
    })
}

/// Why this instance cannot seal peer messages with its client configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealSetupError {
    /// The instance's own key or credential could not be read.
    #[error("cannot sign peer messages: {0}")]
    Credentials(String),
    /// The `file`/`puppet` certificate holds no certificate.
    #[error("cannot sign peer messages: the client certificate file holds no certificate")]
    NoCertificate,
    /// The CA bundle could not be read or holds nothing usable.
    #[error("cannot check peer messages: the CA bundle {path}: {reason}")]
    Ca {
        /// The bundle's path.
        path: String,
        /// Why.
        reason: String,
    },
    /// The `choria` provider without an organisation issuer to verify peers with.
    #[error(
        "cannot check peer messages: no organisation issuer is configured \
         (plugin.security.issuer.names and plugin.security.issuer.<name>.public)"
    )]
    NoIssuer,
    /// An issuer's public key that is not 64 hex digits.
    #[error("plugin.security.issuer.{0}.public is not a hex ed25519 public key")]
    IssuerKey(String),
    /// `peer_signers` or this instance's own certificate.
    #[error("{0}")]
    Seal(SealError),
}

/// The organisation issuers of the client configuration: every name of
/// `plugin.security.issuer.names` (comma separated) with its
/// `plugin.security.issuer.<name>.public` key.
fn issuers(client: &ClientConfig) -> Result<Vec<[u8; 32]>, SealSetupError> {
    let mut keys = Vec::new();
    let names = client.get("plugin.security.issuer.names").unwrap_or("");
    for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(public) = client.get(&format!("plugin.security.issuer.{name}.public")) else {
            continue;
        };
        let key: [u8; 32] = hex::decode(public.trim())
            .ok()
            .and_then(|k| k.try_into().ok())
            .ok_or_else(|| SealSetupError::IssuerKey(name.chars().take(64).collect()))?;
        keys.push(key);
    }
    if keys.is_empty() {
        return Err(SealSetupError::NoIssuer);
    }
    Ok(keys)
}

impl Seal {
    /// The seal of an instance whose client configuration is `client`: insecure
    /// with `choria_insecure`; else signed with its RSA key and certificate, checked
    /// against its CA bundle (`file`, `puppet`), or signed with its seed and client
    /// JWT, checked against its organisation issuers (`choria`).
    pub(crate) fn for_client(
        client: &ClientConfig,
        signers: &[String],
    ) -> Result<Arc<Seal>, SealSetupError> {
        let (_, credentials, _) =
            client_identity(client).map_err(|e| SealSetupError::Credentials(e.to_string()))?;
        let now = crate::clock::unix_now();
        let (key, trust) = match credentials {
            Credentials::Insecure => return Ok(Seal::insecure()),
            Credentials::Ed25519 { key, jwt, .. } => (
                PeerKey::Ed25519 { key, jwt },
                PeerTrust::Issuers(issuers(client)?),
            ),
            Credentials::Rsa { key, pubcert } => {
                let certificate = x509::pem_certificates(&pubcert)
                    .into_iter()
                    .next()
                    .ok_or(SealSetupError::NoCertificate)?;
                let path = client
                    .tls_files()
                    .and_then(|f| f.ca)
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                let ca = |reason: String| SealSetupError::Ca {
                    path: path.clone(),
                    reason,
                };
                let text = std::fs::read_to_string(&path).map_err(|e| ca(e.to_string()))?;
                let anchors = Anchors::from_pem(&text).map_err(|e| ca(e.to_string()))?;
                (PeerKey::Rsa { key, certificate }, PeerTrust::Ca(anchors))
            }
        };
        Seal::secure(key, trust, signers, now).map_err(SealSetupError::Seal)
    }
}
