//! Validation of the CSR a node returns from `choria_provision#gencsr` (`pki` feature), and the
//! compiled `cert_deny_list`.
//!
//! Why it exists: the helper will hand the CSR to a CA, so the provisioner must refuse one whose
//! subject CN is not the node's identity, or whose CN or DNS SANs match a denied pattern
//! (privileged or client certificate names), as the Go provisioner does. Unlike Go, the deny
//! list is compiled once at configuration load and a bad pattern is an error, not a silent
//! "never matches", and a non-PEM CSR is an error, not a crash.
//!
//! What it must never do: panic on any reply content, or verify/sign anything (the CSR
//! signature is deliberately not checked, as in Go; signing is the helper's business).

use crate::crypto::pem;
use crate::untrusted::shown;
use der::asn1::{Ia5StringRef, PrintableStringRef, TeletexStringRef, Utf8StringRef};
use der::oid::ObjectIdentifier;
use der::{Decode, Tag, Tagged};
use regex::Regex;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::request::{CertReq, ExtensionReq};

/// `cert_deny_list` patterns used when the configuration gives none.
pub(crate) const DEFAULT_DENY_PATTERNS: &[&str] = &[
    r"\.privileged.mcollective$",
    r"\.privileged.choria$",
    r"\.mcollective$",
    r"\.choria$",
];

/// Largest CSR text accepted; the real one is about 1 KB.
pub(crate) const MAX_CSR_LEN: usize = 64 * 1024;

const OID_COMMON_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
const OID_SUBJECT_ALT_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.17");

/// A `cert_deny_list` pattern that does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cert_deny_list pattern {}: {reason}", crate::untrusted::quoted(.pattern))]
pub struct DenyListError {
    /// The pattern as written in the configuration.
    pub pattern: String,
    /// The regex compiler's explanation.
    pub reason: String,
}

/// The compiled `cert_deny_list`: built once from the configuration, shared read-only.
#[derive(Debug, Clone)]
pub(crate) struct DenyList {
    patterns: Vec<(String, Regex)>,
}

impl DenyList {
    /// Compiles the configured patterns; an empty list means `DEFAULT_DENY_PATTERNS`.
    ///
    /// A pattern written `/re/` (matching `^/.+/$`) has all its leading and trailing `/`
    /// stripped, as Go does. Patterns are matched unanchored (a search anywhere in the name).
    /// The syntax is the `regex` crate's, which is RE2's for practical purposes (one difference:
    /// `\d`, `\w`, `\s` and `\b` are Unicode-aware here, ASCII-only in Go).
    pub(crate) fn new<S: AsRef<str>>(patterns: &[S]) -> Result<DenyList, DenyListError> {
        let list: Vec<&str> = if patterns.is_empty() {
            DEFAULT_DENY_PATTERNS.to_vec()
        } else {
            patterns.iter().map(|p| p.as_ref()).collect()
        };
        let mut compiled = Vec::with_capacity(list.len());
        for p in list {
            let re_text = if p.len() >= 3 && p.starts_with('/') && p.ends_with('/') {
                p.trim_matches('/')
            } else {
                p
            };
            let re = Regex::new(re_text).map_err(|e| DenyListError {
                pattern: p.to_string(),
                reason: e.to_string(),
            })?;
            compiled.push((p.to_string(), re));
        }
        Ok(DenyList { patterns: compiled })
    }

    /// The first configured pattern (as written) that matches `name`, if any.
    pub(crate) fn matching_pattern(&self, name: &str) -> Option<&str> {
        self.patterns
            .iter()
            .find(|(_, re)| re.is_match(name))
            .map(|(p, _)| p.as_str())
    }

    /// True when any pattern matches `name`.
    pub(crate) fn is_denied(&self, name: &str) -> bool {
        self.matching_pattern(name).is_some()
    }
}

impl Default for DenyList {
    /// The default deny list.
    fn default() -> Self {
        DenyList::new::<&str>(&[]).expect("default deny patterns compile")
    }
}

/// Why a CSR was refused. Messages follow the Go provisioner's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsrError {
    /// No CSR in the reply.
    #[error("no CSR received")]
    NoCsr,
    /// Larger than `MAX_CSR_LEN`.
    #[error("could not parse CSR: {0} bytes exceeds {max}", max = MAX_CSR_LEN)]
    TooLarge(usize),
    /// No PEM block in the text (Go would crash here).
    #[error("could not parse CSR: no PEM block found")]
    NotPem,
    /// The PEM block is not a certificate request.
    #[error("could not parse CSR: PEM block is \"{}\", expected \"CERTIFICATE REQUEST\"", shown(.0))]
    WrongBlockType(String),
    /// The DER does not parse as PKCS#10, or a name in it is malformed.
    #[error("could not parse CSR: {0}")]
    Parse(String),
    /// The subject has no CN, or more than one.
    #[error("could not parse CSR: expected one common name, found {0}")]
    CommonNameCount(usize),
    /// The CN is not the node's identity.
    #[error("common name {} does not match identity {identity}", shown(.common_name))]
    CommonNameMismatch {
        /// CN found in the CSR.
        common_name: String,
        /// Identity being provisioned.
        identity: String,
    },
    /// The CN or a DNS SAN matches the deny list.
    #[error("{} matches denied certificate pattern", shown(.0))]
    Denied(String),
}

/// The names the provisioner checks in a CSR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsrNames {
    /// The subject common name.
    pub common_name: String,
    /// Every DNS subject alternative name requested (IP, e-mail and URI SANs are not listed).
    pub dns_names: Vec<String>,
}

/// Decodes a directory string of the usual kinds into text.
pub(crate) fn directory_string(value: &der::Any) -> Result<String, CsrError> {
    let bad = |e: der::Error| CsrError::Parse(e.to_string());
    let s = match value.tag() {
        Tag::Utf8String => Utf8StringRef::try_from(value).map_err(bad)?.to_string(),
        Tag::PrintableString => PrintableStringRef::try_from(value)
            .map_err(bad)?
            .to_string(),
        Tag::Ia5String => Ia5StringRef::try_from(value).map_err(bad)?.to_string(),
        Tag::TeletexString => TeletexStringRef::try_from(value).map_err(bad)?.to_string(),
        other => {
            return Err(CsrError::Parse(format!(
                "unsupported common name string type {other}"
            )))
        }
    };
    Ok(s)
}

/// Parses a PEM PKCS#10 CSR and extracts its CN and DNS SANs. Accepts the labels
/// `CERTIFICATE REQUEST` and `NEW CERTIFICATE REQUEST`.
pub fn parse_csr(csr_pem: &str) -> Result<CsrNames, CsrError> {
    if csr_pem.is_empty() {
        return Err(CsrError::NoCsr);
    }
    if csr_pem.len() > MAX_CSR_LEN {
        return Err(CsrError::TooLarge(csr_pem.len()));
    }
    let block = pem::decode(csr_pem).ok_or(CsrError::NotPem)?;
    if block.label != "CERTIFICATE REQUEST" && block.label != "NEW CERTIFICATE REQUEST" {
        let shown: String = block.label.chars().take(64).collect();
        return Err(CsrError::WrongBlockType(shown));
    }
    let req = CertReq::from_der(&block.der).map_err(|e| CsrError::Parse(e.to_string()))?;

    let mut cns = Vec::new();
    for rdn in req.info.subject.0.iter() {
        for atv in rdn.0.iter() {
            if atv.oid == OID_COMMON_NAME {
                cns.push(directory_string(&atv.value)?);
            }
        }
    }
    if cns.len() != 1 {
        return Err(CsrError::CommonNameCount(cns.len()));
    }
    let common_name = cns.pop().unwrap_or_default();

    let mut dns_names = Vec::new();
    for attr in req.info.attributes.iter() {
        if attr.oid != <ExtensionReq as der::oid::AssociatedOid>::OID {
            continue;
        }
        for value in attr.values.iter() {
            let der_bytes =
                der::Encode::to_der(value).map_err(|e| CsrError::Parse(e.to_string()))?;
            let exts =
                ExtensionReq::from_der(&der_bytes).map_err(|e| CsrError::Parse(e.to_string()))?;
            for ext in exts.0.iter() {
                if ext.extn_id != OID_SUBJECT_ALT_NAME {
                    continue;
                }
                let san = SubjectAltName::from_der(ext.extn_value.as_bytes())
                    .map_err(|e| CsrError::Parse(e.to_string()))?;
                for gn in san.0.iter() {
                    if let GeneralName::DnsName(d) = gn {
                        dns_names.push(d.to_string());
                    }
                }
            }
        }
    }
    Ok(CsrNames {
        common_name,
        dns_names,
    })
}

/// The provisioner's CSR check (go-choria's provision agent, `providers/agent/mcorpc/golang/provision`): parse, CN must equal `identity`
/// exactly (case-sensitive), then the CN and every DNS SAN against the deny list, first hit wins.
pub(crate) fn validate_csr(
    csr_pem: &str,
    identity: &str,
    deny: &DenyList,
) -> Result<CsrNames, CsrError> {
    let names = parse_csr(csr_pem)?;
    if names.common_name != identity {
        return Err(CsrError::CommonNameMismatch {
            common_name: names.common_name,
            identity: identity.to_string(),
        });
    }
    for name in std::iter::once(&names.common_name).chain(names.dns_names.iter()) {
        if deny.is_denied(name) {
            return Err(CsrError::Denied(name.clone()));
        }
    }
    Ok(names)
}

#[cfg(test)]
mod spec_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_list_denies_choria_names() {
        let d = DenyList::default();
        assert!(d.is_denied("bob.privileged.choria"));
        assert!(d.is_denied("bob.mcollective"));
        assert!(d.is_denied("bob.privilegedXchoria"));
        assert!(!d.is_denied("bobXprivilegedXchoriaX"));
        assert!(!d.is_denied("n1.example.net"));
        assert!(!d.is_denied("choria.example.net"));
    }

    #[test]
    fn slashes_are_stripped() {
        let d = DenyList::new(&["/^bad/", "//x$//"]).unwrap();
        assert!(d.is_denied("bad.example"));
        assert!(d.is_denied("box"));
        assert!(!d.is_denied("a.bad"));
        assert_eq!(d.matching_pattern("bad.x"), Some("/^bad/"));
    }

    #[test]
    fn bad_pattern_is_named() {
        let e = DenyList::new(&["ok", "(unclosed"]).unwrap_err();
        assert_eq!(e.pattern, "(unclosed");
        assert!(e.to_string().contains("(unclosed"));
    }

    #[test]
    fn non_pem_is_an_error() {
        assert_eq!(parse_csr(""), Err(CsrError::NoCsr));
        assert_eq!(parse_csr("hello"), Err(CsrError::NotPem));
    }
}
