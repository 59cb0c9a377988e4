//! Provisioning JWT verification and server JWT signing (choria-io/tokens), one test per rule.

use crate::crypto::jwt::*;
use crate::crypto::pem;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use ring::signature;
use std::path::PathBuf;
use std::time::Duration;

const NOW: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z, tokens.md §6
const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

const SERVER_SEED_PUB: &str = "b012ef1e447947b3cdaf3f6e9459342407e24e597ec5b4ceccac8ab5cb03a6e9";
const PROV_SEED: &str = "782eb891b61af7f024a65ffad7687703b08e7ecf4722a1b616f084b5cdf1c9fb";
const PROV_PUB: &str = "3aa7308f0a2e6342498bc8a8f8c2a9211cd110d7a61dcb4420ab9cb5838604ec";
const ORG_SEED: &str = "3b96038599e5acdd6dd19c26240f037147b2a302b2a700d6f6c3c28d7d8b78d9";
const ORG_PUB: &str = "a4d9745451398b6ec6e8d4529a26f3314f504b9f18da9e9de32c665509f19b0d";
const JTI: &str = "37dGasRK6DuhIamYovPgATEaXBV";

const SPEC_6_1_TOKEN: &str = "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9.eyJpZGVudGl0eSI6Im4xLmV4YW1wbGUubmV0IiwiY29sbGVjdGl2ZXMiOlsiY2hvcmlhIl0sInBlcm1pc3Npb25zIjp7InN1Ym1pc3Npb24iOnRydWUsInN0cmVhbXMiOnRydWV9LCJvdSI6ImNob3JpYSIsInB1cnBvc2UiOiJjaG9yaWFfc2VydmVyIiwicHVibGljX2tleSI6ImIwMTJlZjFlNDQ3OTQ3YjNjZGFmM2Y2ZTk0NTkzNDI0MDdlMjRlNTk3ZWM1YjRjZWNjYWM4YWI1Y2IwM2E2ZTkiLCJpc3MiOiJDaG9yaWEgUHJvdmlzaW9uZXIiLCJleHAiOjE3OTg3NjE2MDAsIm5iZiI6MTc2NzIyNTYwMCwiaWF0IjoxNzY3MjI1NjAwLCJqdGkiOiIzN2RHYXNSSzZEdWhJYW1Zb3ZQZ0FURWFYQlYifQ.yCiZ0kOQCuA9ziMx7yt_M2TCE8EwDMpfchfxfCI9i8oXJzfFUFgbc7DNBgzh4maxTMQKRy9d2GD3cwh7IvWXCA";

const SPEC_6_2_TOKEN: &str = "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9.eyJpZGVudGl0eSI6Im4xLmV4YW1wbGUubmV0IiwiY29sbGVjdGl2ZXMiOlsiY2hvcmlhIl0sInBlcm1pc3Npb25zIjp7InN1Ym1pc3Npb24iOnRydWUsInN0cmVhbXMiOnRydWV9LCJvdSI6ImNob3JpYSIsInB1cnBvc2UiOiJjaG9yaWFfc2VydmVyIiwidGNzIjoiNzE1NmI5MDE0ZWIxY2YzMzQ1YWU5YzgzMzJhNzI5NTljYTIyOWQwN2I5MmNkM2EwNTgwZGJiYjBmMzdlNzJiNWQwOGRlMjc3MTI5MDExYmJiNWQ1YmM3M2VlNmVmMTI0MmY1Y2ExZWFjNDRlZjFhNzRhODNmMWM0ZTA1MmViMDUuMTVmNDY4MjEyYTgwYzAwZjViMDQxOGUxNDU5YWMzM2EyYWM4YmJkZDcyOTM5NjUxZjk3MTI4ODgyYzY0YjcyNzhkZjkyM2U2MWEyNDliZmJlMjNiM2Q0YTRmMTYxZThmYjU3OGEwYzI4N2IzNDcxYmMzZjkwYjM1MmUzNTViMDEiLCJwdWJsaWNfa2V5IjoiYjAxMmVmMWU0NDc5NDdiM2NkYWYzZjZlOTQ1OTM0MjQwN2UyNGU1OTdlYzViNGNlY2NhYzhhYjVjYjAzYTZlOSIsImlzc2V4cCI6MTc4MjY5MTIwMCwiaXNzIjoiQy0zN2FSVEN5TFpoQTMzTkNqYXpqU1VVYmZEOGQuM2FhNzMwOGYwYTJlNjM0MjQ5OGJjOGE4ZjhjMmE5MjExY2QxMTBkN2E2MWRjYjQ0MjBhYjljYjU4Mzg2MDRlYyIsImV4cCI6MTc4MjY5MTIwMCwibmJmIjoxNzY3MjI1NjAwLCJpYXQiOjE3NjcyMjU2MDAsImp0aSI6IjM3ZEdhc1JLNkR1aElhbVlvdlBnQVRFYVhCViJ9.TvyHAiTGheNvvAzcLnxU8Q07t_L9Grr9hRI0K4IpX15PrFHTh23cyb8pAJCTISqDwyJ646VKnh2z1-gSzE6PAA";

const SIGNING_TOKEN_CLAIMS: &str = r#"{"callerid":"choria=provisioner","ou":"choria","permissions":{"provisioner":true},"purpose":"choria_client_id","tcs":"7156b9014eb1cf3345ae9c8332a72959ca229d07b92cd3a0580dbbb0f37e72b5d08de277129011bbb5d5bc73ee6ef1242f5ca1eac44ef1a74a83f1c4e052eb05","public_key":"3aa7308f0a2e6342498bc8a8f8c2a9211cd110d7a61dcb4420ab9cb5838604ec","iss":"I-a4d9745451398b6ec6e8d4529a26f3314f504b9f18da9e9de32c665509f19b0d","exp":1782691200,"nbf":1767139200,"iat":1767139200,"jti":"37aRTCyLZhA33NCjazjSUUbfD8d"}"#;

fn unhex<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out).unwrap();
    out
}

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(fixture_path(name)).unwrap()
}

fn tmp_file(name: &str, content: &[u8]) -> PathBuf {
    let d = std::env::temp_dir().join(format!("choria-tokens-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

/// Compact JWS with an arbitrary header/claims and a caller-made signature.
fn jws(header: &str, claims: &str, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
    let signing_input = format!("{}.{}", B64.encode(header), B64.encode(claims));
    let sig = sign(signing_input.as_bytes());
    format!("{signing_input}.{}", B64.encode(sig))
}

fn ed_sign(seed: &str) -> impl Fn(&[u8]) -> Vec<u8> {
    let kp = signature::Ed25519KeyPair::from_seed_unchecked(&unhex::<32>(seed)).unwrap();
    move |d| kp.sign(d).as_ref().to_vec()
}

fn rsa_sign(alg: &'static dyn signature::RsaEncoding) -> impl Fn(&[u8]) -> Vec<u8> {
    let der = pem::decode(&fixture("test-rsa-signer.key")).unwrap().der;
    let kp = signature::RsaKeyPair::from_der(&der).unwrap();
    move |d| {
        let mut sig = vec![0; kp.public().modulus_len()];
        kp.sign(alg, &ring::rand::SystemRandom::new(), d, &mut sig)
            .unwrap();
        sig
    }
}

const ED_HEADER: &str = r#"{"alg":"EdDSA","typ":"JWT"}"#;
const PROV_CLAIMS: &str = r#"{"cht":"toomanysecrets","chs":true,"chu":"nats://example.net:4222","chpd":false,"purpose":"choria_provisioning","iss":"choria cli","sub":"choria_provisioning","nbf":1767225000,"iat":1767225000,"exp":1798761600}"#;

fn ed_key() -> VerifyKey {
    VerifyKey::from_hex(PROV_PUB).unwrap()
}

fn rsa_key() -> VerifyKey {
    VerifyKey::load(fixture_path("test-rsa-signer.pub").to_str().unwrap()).unwrap()
}

fn ed_token(claims: &str) -> String {
    jws(ED_HEADER, claims, ed_sign(PROV_SEED))
}

// ------------------------------------------------------------------ §2.1 verification: accept

#[test]
fn eddsa_provisioning_token_verifies_and_ou_defaults_to_choria() {
    let c = verify_provisioning_token(&ed_token(PROV_CLAIMS), &ed_key(), NOW).unwrap();
    assert_eq!(c.cht, "toomanysecrets");
    assert!(c.chs);
    assert_eq!(c.chu, "nats://example.net:4222");
    assert_eq!(c.ou, "choria");
    assert_eq!(c.standard.exp, Some(1798761600));
}

#[test]
fn helper_json_has_go_field_order_and_omissions() {
    let c = verify_provisioning_token(&ed_token(PROV_CLAIMS), &ed_key(), NOW).unwrap();
    assert_eq!(
        serde_json::to_string(&c).unwrap(),
        r#"{"cht":"toomanysecrets","chs":true,"chu":"nats://example.net:4222","chpd":false,"extensions":null,"ou":"choria","purpose":"choria_provisioning","iss":"choria cli","sub":"choria_provisioning","exp":1798761600,"nbf":1767225000,"iat":1767225000}"#
    );
}

#[test]
fn every_provisioning_claim_round_trips_in_order() {
    let claims = r#"{"cht":"t","chs":false,"chu":"u","chsrv":"example.net","chpd":true,"chrd":",","chf":"/f","chusr":"usr","chpwd":"pw","extensions":{"k":[1,2]},"ou":"acme","v2":true,"update":true,"purpose":"choria_provisioning","tcs":"","public_key":"ab","iss":"i","sub":"s","aud":"a","exp":1798761600,"nbf":1,"iat":1,"jti":"j","unknown":"dropped"}"#;
    let c = verify_provisioning_token(&ed_token(claims), &ed_key(), NOW).unwrap();
    assert_eq!(
        serde_json::to_string(&c).unwrap(),
        r#"{"cht":"t","chs":false,"chu":"u","chsrv":"example.net","chpd":true,"chrd":",","chf":"/f","chusr":"usr","chpwd":"pw","extensions":{"k":[1,2]},"ou":"acme","v2":true,"update":true,"purpose":"choria_provisioning","public_key":"ab","iss":"i","sub":"s","aud":"a","exp":1798761600,"nbf":1,"iat":1,"jti":"j"}"#
    );
}

#[test]
fn rs256_rs384_rs512_verify_with_spki_certificate_and_loaded_keys() {
    let cert_key = VerifyKey::load(fixture_path("test-rsa-signer.crt").to_str().unwrap()).unwrap();
    for (alg, enc) in [
        (
            "RS256",
            &signature::RSA_PKCS1_SHA256 as &'static dyn signature::RsaEncoding,
        ),
        ("RS384", &signature::RSA_PKCS1_SHA384),
        ("RS512", &signature::RSA_PKCS1_SHA512),
    ] {
        let header = format!(r#"{{"alg":"{alg}","typ":"JWT"}}"#);
        let t = jws(&header, PROV_CLAIMS, rsa_sign(enc));
        verify_provisioning_token(&t, &rsa_key(), NOW).unwrap();
        verify_provisioning_token(&t, &cert_key, NOW).unwrap();
    }
}

#[test]
fn old_tokens_with_only_sub_are_provisioning_tokens() {
    let t = ed_token(r#"{"cht":"x","sub":"choria_provisioning"}"#);
    verify_provisioning_token(&t, &ed_key(), NOW).unwrap();
    let t = ed_token(r#"{"cht":"x","purpose":"choria_provisioning"}"#);
    verify_provisioning_token(&t, &ed_key(), NOW).unwrap();
}

#[test]
fn exp_and_nbf_are_optional_and_fractional_dates_truncate() {
    let t = ed_token(r#"{"purpose":"choria_provisioning"}"#);
    verify_provisioning_token(&t, &ed_key(), NOW).unwrap();
    let t = ed_token(r#"{"purpose":"choria_provisioning","exp":1798761600.9}"#);
    let c = verify_provisioning_token(&t, &ed_key(), NOW).unwrap();
    assert_eq!(c.standard.exp, Some(1798761600));
}

#[test]
fn chained_provisioning_token_with_live_issuer_is_accepted() {
    let t = ed_token(
        r#"{"purpose":"choria_provisioning","tcs":"aa.bb","iss":"C-x.y","issexp":1798761600,"exp":1798761600}"#,
    );
    verify_provisioning_token(&t, &ed_key(), NOW).unwrap();
}

// ------------------------------------------------------------------ §2.1 verification: reject

#[test]
fn alg_none_is_rejected() {
    let t = format!(
        "{}.{}.",
        B64.encode(r#"{"alg":"none","typ":"JWT"}"#),
        B64.encode(PROV_CLAIMS)
    );
    let e = verify_provisioning_token(&t, &ed_key(), NOW).unwrap_err();
    assert_eq!(e, TokenError::UnsupportedAlgorithm("none".into()));
    assert!(e.to_string().contains("signing method none is invalid"));
}

#[test]
fn hs256_with_the_public_key_as_secret_is_rejected() {
    let secret = unhex::<32>(PROV_PUB);
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret);
    let t = jws(r#"{"alg":"HS256","typ":"JWT"}"#, PROV_CLAIMS, |d| {
        ring::hmac::sign(&key, d).as_ref().to_vec()
    });
    assert_eq!(
        verify_provisioning_token(&t, &ed_key(), NOW),
        Err(TokenError::UnsupportedAlgorithm("HS256".into()))
    );
}

#[test]
fn other_algorithms_and_missing_alg_are_rejected() {
    for h in [
        r#"{"alg":"ES256"}"#,
        r#"{"alg":"PS256"}"#,
        r#"{"alg":"eddsa"}"#,
        r#"{"typ":"JWT"}"#,
    ] {
        let t = jws(h, PROV_CLAIMS, ed_sign(PROV_SEED));
        assert!(matches!(
            verify_provisioning_token(&t, &ed_key(), NOW),
            Err(TokenError::UnsupportedAlgorithm(_))
        ));
    }
}

#[test]
fn wrong_keys_are_rejected() {
    let t = ed_token(PROV_CLAIMS);
    let other = VerifyKey::from_hex(ORG_PUB).unwrap();
    assert_eq!(
        verify_provisioning_token(&t, &other, NOW),
        Err(TokenError::BadSignature)
    );
    assert_eq!(
        verify_provisioning_token(&t, &rsa_key(), NOW),
        Err(TokenError::Ed25519KeyRequired)
    );
    let rt = jws(
        r#"{"alg":"RS256","typ":"JWT"}"#,
        PROV_CLAIMS,
        rsa_sign(&signature::RSA_PKCS1_SHA256),
    );
    assert_eq!(
        verify_provisioning_token(&rt, &ed_key(), NOW),
        Err(TokenError::RsaKeyRequired)
    );
    let other_rsa = VerifyKey::load(fixture_path("test-rsa-other.pub").to_str().unwrap()).unwrap();
    assert_eq!(
        verify_provisioning_token(&rt, &other_rsa, NOW),
        Err(TokenError::BadSignature)
    );
}

#[test]
fn tampered_claims_or_signature_are_rejected() {
    let t = ed_token(PROV_CLAIMS);
    let parts: Vec<&str> = t.split('.').collect();
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        B64.encode(PROV_CLAIMS.replace("toomanysecrets", "mine")),
        parts[2]
    );
    assert_eq!(
        verify_provisioning_token(&forged, &ed_key(), NOW),
        Err(TokenError::BadSignature)
    );
    let no_sig = format!("{}.{}.", parts[0], parts[1]);
    assert_eq!(
        verify_provisioning_token(&no_sig, &ed_key(), NOW),
        Err(TokenError::BadSignature)
    );
    let bad_b64 = format!("{}.{}.!!!", parts[0], parts[1]);
    assert_eq!(
        verify_provisioning_token(&bad_b64, &ed_key(), NOW),
        Err(TokenError::BadSignature)
    );
}

#[test]
fn expired_and_not_yet_valid_are_rejected() {
    let t = ed_token(r#"{"purpose":"choria_provisioning","exp":1767225600}"#);
    let e = verify_provisioning_token(&t, &ed_key(), NOW).unwrap_err();
    assert_eq!(e, TokenError::Expired);
    assert_eq!(
        e.to_string(),
        "could not parse provisioner token: token has invalid claims: token is expired"
    );
    verify_provisioning_token(&t, &ed_key(), NOW - 1).unwrap();
    let t = ed_token(r#"{"purpose":"choria_provisioning","nbf":1767225601}"#);
    assert_eq!(
        verify_provisioning_token(&t, &ed_key(), NOW),
        Err(TokenError::NotValidYet)
    );
}

#[test]
fn non_provisioning_tokens_are_rejected() {
    for claims in [
        r#"{"purpose":"choria_server"}"#,
        r#"{"purpose":"choria_client_id","sub":"x"}"#,
        r#"{}"#,
    ] {
        let e = verify_provisioning_token(&ed_token(claims), &ed_key(), NOW).unwrap_err();
        assert_eq!(e, TokenError::NotProvisioningToken);
        assert_eq!(e.to_string(), "not a provisioning token");
    }
}

#[test]
fn tcs_without_a_live_chain_issuer_is_expired() {
    for claims in [
        // not a chain issuer
        r#"{"purpose":"choria_provisioning","tcs":"aa","iss":"I-abc","exp":1798761600}"#,
        // no issexp
        r#"{"purpose":"choria_provisioning","tcs":"aa.bb","iss":"C-x.y","exp":1798761600}"#,
        // issexp passed
        r#"{"purpose":"choria_provisioning","tcs":"aa.bb","iss":"C-x.y","issexp":1767225600,"exp":1798761600}"#,
    ] {
        let e = verify_provisioning_token(&ed_token(claims), &ed_key(), NOW).unwrap_err();
        assert_eq!(e, TokenError::IssuerExpired, "{claims}");
        assert_eq!(e.to_string(), "token is expired");
    }
}

#[test]
fn malformed_tokens_are_rejected() {
    let k = ed_key();
    assert_eq!(
        verify_provisioning_token("", &k, NOW),
        Err(TokenError::NoJwt)
    );
    for t in ["a.b", "a.b.c.d", "nodots"] {
        assert!(matches!(
            verify_provisioning_token(t, &k, NOW),
            Err(TokenError::Malformed(_))
        ));
    }
    let bad_header = format!("{}.{}.x", B64.encode("not json"), B64.encode("{}"));
    assert!(matches!(
        verify_provisioning_token(&bad_header, &k, NOW),
        Err(TokenError::Malformed(_))
    ));
    let padded = format!("{}=.{}.x", B64.encode(ED_HEADER), B64.encode("{}"));
    assert!(matches!(
        verify_provisioning_token(&padded, &k, NOW),
        Err(TokenError::Malformed(_))
    ));
    for claims in [
        "not json",
        r#"{"chs":"yes","purpose":"choria_provisioning"}"#,
        r#"{"exp":"tomorrow","purpose":"choria_provisioning"}"#,
        r#"{"extensions":[1],"purpose":"choria_provisioning"}"#,
        r#"[]"#,
    ] {
        let e = verify_provisioning_token(&ed_token(claims), &k, NOW).unwrap_err();
        assert!(matches!(e, TokenError::Malformed(_)), "{claims}: {e:?}");
        assert!(!e.to_string().contains("tomorrow"));
    }
    let huge = "a".repeat(10 << 20);
    assert!(matches!(
        verify_provisioning_token(&huge, &k, NOW),
        Err(TokenError::TooLarge(_))
    ));
}

// ------------------------------------------------------------------ jwt_verify_cert forms

#[test]
fn verify_key_forms() {
    assert_eq!(VerifyKey::load(""), Err(TokenError::NoVerifyCert));
    assert_eq!(
        VerifyKey::load(PROV_PUB).unwrap(),
        VerifyKey::Ed25519(unhex(PROV_PUB))
    );
    // A hex file, with the trailing newline Go would choke on.
    let p = tmp_file("pub.hex", format!("{PROV_PUB}\n").as_bytes());
    assert_eq!(
        VerifyKey::load(p.to_str().unwrap()).unwrap(),
        VerifyKey::Ed25519(unhex(PROV_PUB))
    );
    let p = tmp_file("short.hex", b"abcd");
    assert_eq!(
        VerifyKey::load(p.to_str().unwrap()),
        Err(TokenError::Ed25519PublicKeySize(2))
    );
    // A mistyped path is "not a file", so it is read as hex and fails as such.
    assert_eq!(
        VerifyKey::load("/etc/choria/no-such-signer.pem"),
        Err(TokenError::Ed25519PublicData)
    );
    // A PKCS#1 `RSA PUBLIC KEY` file falls into the hex branch, as in Go.
    assert_eq!(
        VerifyKey::load(fixture_path("test-rsa-signer-pkcs1.pub").to_str().unwrap()),
        Err(TokenError::Ed25519PublicData)
    );
    // SPKI and certificate give the same RSA key.
    assert_eq!(
        rsa_key(),
        VerifyKey::load(fixture_path("test-rsa-signer.crt").to_str().unwrap()).unwrap()
    );
    // Deliberate tightening: RSA keys below 2048 bits are refused at load.
    assert_eq!(
        VerifyKey::load(fixture_path("test-rsa-1024.pub").to_str().unwrap()),
        Err(TokenError::RsaKeyTooSmall(1024))
    );
    // PEM header but garbage inside.
    assert!(matches!(
        VerifyKey::from_file_contents(
            b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"
        ),
        Err(TokenError::VerifyCertParse(_))
    ));
    assert!(matches!(
        VerifyKey::from_file_contents(b"-----BEGIN CERTIFICATE-----\nnot base64"),
        Err(TokenError::VerifyCertParse(_))
    ));
}

// ------------------------------------------------------------------ §6 server JWTs

fn spec_requested() -> RequestedServerClaims {
    serde_json::from_str(r#"{"permissions":{"submission":true,"streams":true},"identity":"ignored","iss":"ignored"}"#)
        .unwrap()
}

fn spec_input(req: &RequestedServerClaims) -> ServerClaimsInput<'_> {
    ServerClaimsInput {
        identity: "n1.example.net",
        public_key_hex: SERVER_SEED_PUB,
        security_provider: Some("choria"),
        collectives_setting: None,
        requested: Some(req),
        default_validity: YEAR,
        now: NOW,
        jti: JTI,
    }
}

fn prov_key() -> SigningKey {
    SigningKey::from_ed25519_seed(&unhex(PROV_SEED))
}

#[test]
fn spec_6_1_server_token_byte_for_byte() {
    let req = spec_requested();
    let signed = sign_server_token(&spec_input(&req), &prov_key(), None).unwrap();
    assert_eq!(signed.warning, None);
    assert_eq!(signed.token.len(), 574);
    assert_eq!(signed.token, SPEC_6_1_TOKEN);
}

fn signing_token_text() -> String {
    jws(ED_HEADER, SIGNING_TOKEN_CLAIMS, ed_sign(ORG_SEED))
}

#[test]
fn spec_6_2_chained_server_token_byte_for_byte() {
    let req = spec_requested();
    let chain = SigningToken::parse(&signing_token_text()).unwrap();
    let signed = sign_server_token(&spec_input(&req), &prov_key(), Some(&chain)).unwrap();
    assert_eq!(signed.claims.standard.exp, Some(1782691200));
    assert_eq!(signed.claims.standard.issexp, Some(1782691200));
    assert_eq!(signed.token.len(), 1056);
    assert_eq!(signed.token, SPEC_6_2_TOKEN);
}

#[test]
fn spec_6_2_chain_verifies_like_the_broker() {
    // tokens.md §5 "How a verifier checks it", with the org issuer public key.
    let claims_b64 = SPEC_6_2_TOKEN.split('.').nth(1).unwrap();
    let claims: ServerClaims = serde_json::from_slice(&B64.decode(claims_b64).unwrap()).unwrap();
    let s = &claims.standard;
    let (id, pubk) = s.iss.strip_prefix("C-").unwrap().split_once('.').unwrap();
    let (itcs, sig) = s.tcs.split_once('.').unwrap();
    let org = signature::UnparsedPublicKey::new(&signature::ED25519, unhex::<32>(ORG_PUB));
    org.verify(
        format!("{id}.{pubk}").as_bytes(),
        &hex::decode(itcs).unwrap(),
    )
    .unwrap();
    let chain = signature::UnparsedPublicKey::new(&signature::ED25519, unhex::<32>(pubk));
    chain
        .verify(
            format!("{}.{itcs}", s.jti).as_bytes(),
            &hex::decode(sig).unwrap(),
        )
        .unwrap();
    assert_eq!(pubk, PROV_PUB);
    assert_eq!(prov_key().ed25519_public_hex().unwrap(), PROV_PUB);
}

#[test]
fn collectives_rules() {
    let base = |provider, setting, req: Option<&RequestedServerClaims>| {
        let input = ServerClaimsInput {
            identity: "n1",
            public_key_hex: SERVER_SEED_PUB,
            security_provider: provider,
            collectives_setting: setting,
            requested: req,
            default_validity: YEAR,
            now: NOW,
            jti: JTI,
        };
        build_server_claims(&input).unwrap().claims.collectives
    };
    assert_eq!(base(None, None, None), vec!["mcollective"]);
    assert_eq!(base(Some("puppet"), None, None), vec!["mcollective"]);
    assert_eq!(base(Some("choria"), None, None), vec!["choria"]);
    // Trimming fix: Go would give ["a", " b"].
    assert_eq!(base(Some("choria"), Some("a, b,,"), None), vec!["a", "b"]);
    assert_eq!(base(Some("choria"), Some(" , "), None), vec!["choria"]);
    let req: RequestedServerClaims = serde_json::from_str(r#"{"collectives":["x"]}"#).unwrap();
    assert_eq!(base(None, Some("a,b"), Some(&req)), vec!["x"]);
    let empty: RequestedServerClaims = serde_json::from_str(r#"{"collectives":[]}"#).unwrap();
    assert_eq!(base(None, Some("a"), Some(&empty)), vec!["a"]);
}

fn with_exp(exp: &str) -> BuiltServerClaims {
    let req: RequestedServerClaims = serde_json::from_str(&format!(r#"{{"exp":{exp}}}"#)).unwrap();
    let input = ServerClaimsInput {
        requested: Some(&req),
        ..spec_input(&req)
    };
    build_server_claims(&input).unwrap()
}

#[test]
fn exp_below_ten_years_is_a_duration() {
    // What every sample helper sends: 5 years "from now".
    let b = with_exp("157680000");
    assert_eq!(b.claims.standard.exp, Some(NOW + 157_680_000));
    assert_eq!(b.warning, None);
}

#[test]
fn exp_above_ten_years_is_an_absolute_time() {
    let b = with_exp("1800000000");
    assert_eq!(b.claims.standard.exp, Some(1_800_000_000));
    assert_eq!(b.warning, None);
}

#[test]
fn validity_of_an_hour_or_less_becomes_the_default_with_a_warning() {
    for exp in ["3600", "60", "-5", "1767225601", "1000000000"] {
        let b = with_exp(exp);
        assert_eq!(
            b.claims.standard.exp,
            Some(NOW + YEAR.as_secs() as i64),
            "{exp}"
        );
        let w = b.warning.unwrap();
        assert!(
            w.starts_with("Server validity ") && w.contains("is too short, setting to default")
        );
    }
    let b = with_exp("3601");
    assert_eq!(b.claims.standard.exp, Some(NOW + 3601));
    let b = with_exp("0");
    assert_eq!(b.claims.standard.exp, Some(NOW + YEAR.as_secs() as i64));
    assert_eq!(b.warning, None);
}

#[test]
fn requested_ou_pub_subjects_permissions_and_ignored_keys() {
    let req: RequestedServerClaims = serde_json::from_str(
        r#"{"ou":"acme","pub_subjects":["reg.>"],"permissions":{"governor":true},"identity":"evil","public_key":"00"}"#,
    )
    .unwrap();
    let b = build_server_claims(&spec_input(&req)).unwrap();
    assert_eq!(b.claims.identity, "n1.example.net");
    assert_eq!(b.claims.ou, "acme");
    assert_eq!(b.claims.pub_subjects, vec!["reg.>"]);
    assert_eq!(b.claims.standard.public_key, SERVER_SEED_PUB);
    let token = prov_key().sign_jwt(&b.claims).unwrap();
    let json = String::from_utf8(B64.decode(token.split('.').nth(1).unwrap()).unwrap()).unwrap();
    assert!(json.contains(r#""permissions":{"governor":true}"#));
    // Go's encoder escapes '>' inside strings.
    assert!(json.contains(r#""pub_subjects":["reg.\u003e"]"#), "{json}");
}

#[test]
fn server_claims_preconditions() {
    let req = spec_requested();
    let mut input = spec_input(&req);
    input.public_key_hex = "";
    assert_eq!(
        build_server_claims(&input),
        Err(TokenError::NoNodePublicKey)
    );
    input.public_key_hex = "abcd";
    assert_eq!(
        build_server_claims(&input),
        Err(TokenError::NoNodePublicKey)
    );
    input.public_key_hex = SERVER_SEED_PUB;
    input.default_validity = Duration::ZERO;
    assert_eq!(
        build_server_claims(&input),
        Err(TokenError::NoDefaultValidity)
    );
    input.default_validity = YEAR;
    input.identity = "";
    assert_eq!(build_server_claims(&input), Err(TokenError::NoIdentity));
}

// ------------------------------------------------------------------ jwt_signing_key forms

#[test]
fn seed_files_with_and_without_newline() {
    for content in [
        PROV_SEED.to_string(),
        format!("{PROV_SEED}\n"),
        format!("{PROV_SEED}\r\n"),
    ] {
        let p = tmp_file("seed", content.as_bytes());
        let k = SigningKey::load(&p).unwrap();
        assert_eq!(k.algorithm(), "EdDSA");
        assert_eq!(k.ed25519_public_hex().unwrap(), PROV_PUB);
    }
    let p = tmp_file("seed-bad", format!("{PROV_SEED}00").as_bytes());
    assert!(matches!(
        SigningKey::load(&p),
        Err(TokenError::UnsupportedSigningKey(_))
    ));
    let p = tmp_file("seed-nothex", "zz".repeat(32).as_bytes());
    assert_eq!(SigningKey::load(&p).unwrap_err(), TokenError::InvalidSeed);
    assert!(matches!(
        SigningKey::load("/no/such/seed"),
        Err(TokenError::ReadFile { .. })
    ));
}

#[test]
fn rsa_signing_keys_sign_rs256_that_verifies() {
    for f in ["test-rsa-signer.key", "test-rsa-signer-pkcs8.key"] {
        let k = SigningKey::load(fixture_path(f)).unwrap();
        assert_eq!(k.algorithm(), "RS256");
        let t = k
            .sign_jwt(&serde_json::json!({"purpose": "choria_provisioning", "cht": "x"}))
            .unwrap();
        assert!(t.starts_with(&B64.encode(r#"{"alg":"RS256","typ":"JWT"}"#)));
        verify_provisioning_token(&t, &rsa_key(), NOW).unwrap();
        assert!(!format!("{k:?}").contains("PRIVATE"));
    }
}

#[test]
fn unusable_signing_keys_are_rejected() {
    assert!(matches!(
        SigningKey::load(fixture_path("test-rsa-1024.key")),
        Err(TokenError::SigningKeyParse(_))
    ));
    // An ed25519 PKCS#8 key is "PRIVATE KEY" but not RSA.
    let ed_pkcs8 =
        signature::Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).unwrap();
    let pem_text = pem::encode(&pem::Block {
        label: "PRIVATE KEY".into(),
        headers: vec![],
        der: ed_pkcs8.as_ref().to_vec(),
    });
    assert!(matches!(
        SigningKey::from_file_contents(pem_text.as_bytes(), "k"),
        Err(TokenError::SigningKeyParse(_))
    ));
    assert_eq!(
        SigningKey::from_file_contents(b"hello", "k.pem")
            .unwrap_err()
            .to_string(),
        "unsupported key in k.pem"
    );
    let public_pem = fixture("test-rsa-signer.pub");
    assert!(matches!(
        SigningKey::from_file_contents(public_pem.as_bytes(), "k"),
        Err(TokenError::UnsupportedSigningKey(_))
    ));
}

/// Found by the `key_files` fuzzer: an RSA key whose parameters disagree loads in ring
/// but no signature with it succeeds, so every node would fail; it is refused at load.
#[test]
fn rsa_signing_key_that_cannot_sign_is_refused_at_load() {
    // The fuzz input: a mode byte (1: PKCS#1 DER in an `RSA PRIVATE KEY` block), the DER.
    let input = include_bytes!("../../../fuzz/regressions/key_files/rsa-key-that-cannot-sign");
    let der = &input[1..];
    assert!(
        signature::RsaKeyPair::from_der(der).is_ok(),
        "ring loads it"
    );
    let pem_text = pem::encode(&pem::Block {
        label: "RSA PRIVATE KEY".into(),
        headers: vec![],
        der: der.to_vec(),
    });
    assert_eq!(
        SigningKey::from_file_contents(pem_text.as_bytes(), "k")
            .unwrap_err()
            .to_string(),
        "could not parse signing key: the RSA key cannot sign"
    );
}

// ------------------------------------------------------------------ jwt_signing_token

#[test]
fn signing_token_rejections() {
    let make = |claims: &str| jws(ED_HEADER, claims, ed_sign(ORG_SEED));
    let msg = |claims: &str| SigningToken::parse(&make(claims)).unwrap_err().to_string();
    assert_eq!(msg(r#"{"purpose":"choria_server"}"#), "not a client token");
    assert_eq!(
        msg(r#"{"purpose":"choria_client_id","jti":"a","public_key":"b","exp":1}"#),
        "no Trust Chain Signature claim in JWT Signing Token"
    );
    assert_eq!(
        msg(r#"{"purpose":"choria_client_id","tcs":"t","public_key":"b","exp":1}"#),
        "id not set"
    );
    assert_eq!(
        msg(r#"{"purpose":"choria_client_id","tcs":"t","jti":"a","exp":1}"#),
        "public key not set"
    );
    assert_eq!(
        msg(r#"{"purpose":"choria_client_id","tcs":"t","jti":"a","public_key":"b"}"#),
        "issuer has no expiry"
    );
    assert!(SigningToken::parse("garbage").is_err());
    // Trailing newline in the file is fine.
    let p = tmp_file(
        "signer.jwt",
        format!("{}\n", signing_token_text()).as_bytes(),
    );
    let t = SigningToken::load(&p).unwrap();
    assert_eq!(t.jti, "37aRTCyLZhA33NCjazjSUUbfD8d");
    assert!(!format!("{t:?}").contains("7156b901"));
}

#[test]
fn chain_needs_an_ed25519_key_and_caps_exp() {
    let chain = SigningToken::parse(&signing_token_text()).unwrap();
    let rsa = SigningKey::load(fixture_path("test-rsa-signer.key")).unwrap();
    let req = spec_requested();
    assert_eq!(
        sign_server_token(&spec_input(&req), &rsa, Some(&chain)).unwrap_err(),
        TokenError::ChainNeedsEd25519Key
    );
    // A short server validity stays below the signing token's expiry.
    let short: RequestedServerClaims = serde_json::from_str(r#"{"exp":86400}"#).unwrap();
    let signed = sign_server_token(&spec_input(&short), &prov_key(), Some(&chain)).unwrap();
    assert_eq!(signed.claims.standard.exp, Some(NOW + 86400));
    assert_eq!(signed.claims.standard.issexp, Some(1782691200));
}
