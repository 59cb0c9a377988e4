//! CSR validation (`pki`): PKCS#10 parsing, CN == identity, DNS SANs against the deny list.

use std::path::PathBuf;
use std::process::Command;

use crate::crypto::csr::{parse_csr, validate_csr, CsrError, DenyList};
use crate::crypto::pem;

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

/// Validates fixture `name` for `identity` against Go's default deny list.
fn validate(name: &str, identity: &str) -> Result<crate::crypto::csr::CsrNames, CsrError> {
    validate_csr(&fixture(name), identity, &DenyList::default())
}

#[test]
fn csr_with_matching_cn_is_accepted_and_only_dns_sans_listed() {
    let names = validate("csr-n1.pem", "n1.example.net").unwrap();
    assert_eq!(names.common_name, "n1.example.net");
    assert!(names.dns_names.is_empty());
    let names = validate("csr-n1-sans.pem", "n1.example.net").unwrap();
    assert_eq!(names.dns_names, vec!["n1.example.net", "www.example.net"]);
}

#[test]
fn csr_refusals_say_what_failed() {
    for (name, identity, error) in [
        (
            "csr-n1.pem",
            "N1.example.net",
            "common name n1.example.net does not match identity N1.example.net",
        ),
        (
            "csr-n1-denied-san.pem",
            "n1.example.net",
            "admin.privileged.choria matches denied certificate pattern",
        ),
        (
            "csr-privileged.pem",
            "bob.privileged.choria",
            "bob.privileged.choria matches denied certificate pattern",
        ),
    ] {
        assert_eq!(validate(name, identity).unwrap_err().to_string(), error);
    }
    assert_eq!(
        validate("csr-privileged.pem", "bob.privileged.choria"),
        Err(CsrError::Denied("bob.privileged.choria".into()))
    );
    // With a custom list that does not cover it, it passes.
    let custom = DenyList::new(&["/^root\\./"]).unwrap();
    assert!(validate_csr(
        &fixture("csr-privileged.pem"),
        "bob.privileged.choria",
        &custom
    )
    .is_ok());
}

#[test]
fn csr_parse_failures_are_errors_not_panics() {
    assert_eq!(parse_csr(""), Err(CsrError::NoCsr));
    assert_eq!(parse_csr("not pem at all"), Err(CsrError::NotPem));
    assert!(matches!(
        parse_csr(&fixture("cert-n1.pem")),
        Err(CsrError::WrongBlockType(_))
    ));
    let garbage = pem::encode(&pem::Block {
        label: "CERTIFICATE REQUEST".into(),
        headers: vec![],
        der: vec![0x30, 0x82, 0xff, 0xff, 1, 2],
    });
    assert!(matches!(parse_csr(&garbage), Err(CsrError::Parse(_))));
    assert_eq!(
        parse_csr(&fixture("csr-no-cn.pem")),
        Err(CsrError::CommonNameCount(0))
    );
    assert!(matches!(
        parse_csr(&"A".repeat(10 << 20)),
        Err(CsrError::TooLarge(_))
    ));
    let e = parse_csr(&garbage).unwrap_err().to_string();
    assert!(e.starts_with("could not parse CSR: "), "{e}");
}

#[test]
fn csr_made_by_the_openssl_cli_is_validated() {
    if !openssl_available() {
        return;
    }
    let d = tmpdir("csr");
    let csr = d.join("csr.pem");
    let key = d.join("key.pem");
    openssl(&[
        "req",
        "-new",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        key.to_str().unwrap(),
        "-subj",
        "/CN=web1.example.net",
        "-addext",
        "subjectAltName=DNS:web1.example.net,DNS:x.mcollective",
        "-out",
        csr.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&csr).unwrap();
    let e = validate_csr(&text, "web1.example.net", &DenyList::default()).unwrap_err();
    assert_eq!(e, CsrError::Denied("x.mcollective".into()));
    let lax = DenyList::new(&["\\.privileged\\."]).unwrap();
    assert!(validate_csr(&text, "web1.example.net", &lax).is_ok());
    let _ = std::fs::remove_dir_all(&d);
}

fn openssl_available() -> bool {
    match Command::new("openssl").arg("version").output() {
        Ok(o) if o.status.success() => true,
        _ => {
            eprintln!("SKIP: openssl CLI not found, interop test not run");
            false
        }
    }
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("choria-crypto-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn openssl(args: &[&str]) -> std::process::Output {
    let o = Command::new("openssl").args(args).output().unwrap();
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}
