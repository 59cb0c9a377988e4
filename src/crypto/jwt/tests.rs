//! Unit tests of the jwt module.

use super::*;
#[allow(unused_imports)]
use super::{claims::*, server_claims::*, signing_key::*, verify::*, verify_key::*};
use std::time::Duration;

#[test]
pub(super) fn go_html_escape_only_touches_special_chars() {
    assert_eq!(
        go_html_escape(r#"{"a":"x.>&<"}"#),
        r#"{"a":"x.\u003e\u0026\u003c"}"#
    );
}

/// `debug` shows every one of `parts` and none of `secrets`.
fn assert_redacted(debug: &str, secrets: &[&str], parts: &[&str]) {
    for secret in secrets {
        assert!(!debug.contains(secret), "{secret} shown in {debug}");
    }
    for part in parts {
        assert!(debug.contains(part), "{part} missing from {debug}");
    }
}

#[test]
pub(super) fn provisioning_claims_debug_redacts_secrets() {
    let c = ProvisioningClaims {
        cht: "toomanysecrets".into(),
        chpwd: "hunter2".into(),
        ..Default::default()
    };
    assert_redacted(
        &format!("{c:?}"),
        &["toomanysecrets", "hunter2"],
        &["cht: \"***\"", "chpwd: \"***\""],
    );
}

#[test]
pub(super) fn signing_key_debug_redacts_seed() {
    let k = SigningKey::from_ed25519_seed(&[0x11; 32]);
    assert_redacted(&format!("{k:?}"), &["1111111111"], &["seed ***"]);
}

#[test]
pub(super) fn signed_server_token_debug_hides_the_token() {
    let key = SigningKey::from_ed25519_seed(&[0x22; 32]);
    let input = ServerClaimsInput {
        identity: "n1",
        public_key_hex: &"ab".repeat(32),
        security_provider: None,
        collectives_setting: None,
        requested: None,
        default_validity: Duration::from_secs(7200),
        now: 1_700_000_000,
        jti: "id",
    };
    let signed = sign_server_token(&input, &key, None).unwrap();
    assert_redacted(
        &format!("{signed:?}"),
        &[&signed.token],
        &["token: \"***\"", "identity: \"n1\""],
    );
}

#[test]
pub(super) fn extreme_times_in_a_provisioning_jwt_neither_overflow_nor_panic() {
    let key = SigningKey::from_ed25519_seed(&[0x33; 32]);
    let verify = VerifyKey::Ed25519(
        key.ed25519_public_hex()
            .map(|h| {
                let mut k = [0u8; 32];
                hex::decode_to_slice(h, &mut k).unwrap();
                k
            })
            .unwrap(),
    );
    let sign = |claims: serde_json::Value| key.sign_jwt(&claims).unwrap();
    let base = |extra: serde_json::Value| {
        let mut c = serde_json::json!({"purpose": PROVISIONING_PURPOSE, "cht": "t"});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c
    };
    // exp beyond i64 (u64::MAX), at i64::MAX, as a huge float: never expired.
    for exp in [
        serde_json::json!(u64::MAX),
        serde_json::json!(i64::MAX),
        serde_json::json!(1e300),
    ] {
        let t = sign(base(
            serde_json::json!({"exp": exp, "iat": exp, "nbf": i64::MIN}),
        ));
        for now in [i64::MIN, 0, 1_700_000_000, i64::MAX - 1] {
            assert!(
                verify_provisioning_token(&t, &verify, now).is_ok(),
                "exp {exp} now {now}"
            );
        }
    }
    // exp at the bottom of i64: always expired; nbf at the top: never valid yet.
    let t = sign(base(serde_json::json!({"exp": i64::MIN})));
    assert_eq!(
        verify_provisioning_token(&t, &verify, 0),
        Err(TokenError::Expired)
    );
    let t = sign(base(serde_json::json!({"nbf": 1e300})));
    assert_eq!(
        verify_provisioning_token(&t, &verify, i64::MAX - 1),
        Err(TokenError::NotValidYet)
    );
    // A chain issuer with an expiry beyond i64.
    let t = sign(base(
        serde_json::json!({"tcs": "x", "iss": "C-a.b", "issexp": u64::MAX}),
    ));
    assert!(verify_provisioning_token(&t, &verify, 1_700_000_000).is_ok());
}

#[test]
pub(super) fn extreme_validities_when_building_server_claims_saturate() {
    let pk = "ab".repeat(32);
    for (now, validity, exp, want) in [
        (i64::MAX, Duration::MAX, None, i64::MAX),
        (
            i64::MAX,
            Duration::from_secs(7200),
            Some(i64::MAX),
            i64::MAX,
        ),
        (i64::MIN, Duration::from_secs(7200), Some(i64::MAX), -1),
        (
            i64::MAX,
            Duration::from_secs(7200),
            Some(i64::MIN),
            i64::MAX,
        ),
        (
            0,
            Duration::from_secs(u64::MAX),
            Some(EXP_DURATION_THRESHOLD - 1),
            EXP_DURATION_THRESHOLD - 1,
        ),
    ] {
        let requested = RequestedServerClaims {
            exp,
            ..RequestedServerClaims::default()
        };
        let input = ServerClaimsInput {
            identity: "n1",
            public_key_hex: &pk,
            security_provider: None,
            collectives_setting: None,
            requested: Some(&requested),
            default_validity: validity,
            now,
            jti: "id",
        };
        let built = build_server_claims(&input).unwrap();
        let std = &built.claims.standard;
        assert_eq!(std.exp, Some(want), "now {now}, requested {exp:?}");
        assert_eq!(std.iat, Some(now));
    }
}
