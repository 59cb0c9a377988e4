//! What happens to a server JWT after the node restarts with it: the checks the
//! server makes on itself (choria-io/tokens) and the check a Choria broker makes
//! with the organisation issuer's public key (`IsSignedByIssuer`, §5): signed by the
//! issuer itself, or by a chain issuer the issuer vouched for. The same check verifies
//! client JWTs (the test broker front end in `tests/support/broker.rs` uses it).

use serde::de::DeserializeOwned;

use crate::crypto::jwt::{ServerClaims, SERVER_PURPOSE};

/// Verifies `token` as a server JWT signed, directly or through a chain issuer, by the
/// organisation issuer whose ed25519 public key is `issuer`, at Unix time `now`.
pub fn verify_server_token(
    token: &str,
    issuer: &[u8; 32],
    now: i64,
) -> Result<ServerClaims, String> {
    verify_issued_token(token, SERVER_PURPOSE, issuer, now)
}

/// Verifies `token` as a token of `purpose` (`choria_server`, `choria_client_id`)
/// signed, directly or through a chain issuer, by the organisation issuer whose
/// ed25519 public key is `issuer`, at Unix time `now` (the daemon's own check,
/// `crypto::jwt::verify_issued_token`); returns its claims as `T`, or why not as
/// text for the simulator's and the test broker's replies.
pub fn verify_issued_token<T: DeserializeOwned>(
    token: &str,
    purpose: &'static str,
    issuer: &[u8; 32],
    now: i64,
) -> Result<T, String> {
    crate::crypto::jwt::verify_issued_token(token, purpose, issuer, now).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tokens.md §6.2: the chain-issued server token, verified at its issue time.
    const CHAIN_TOKEN: &str = "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9.eyJpZGVudGl0eSI6Im4xLmV4YW1wbGUubmV0IiwiY29sbGVjdGl2ZXMiOlsiY2hvcmlhIl0sInBlcm1pc3Npb25zIjp7InN1Ym1pc3Npb24iOnRydWUsInN0cmVhbXMiOnRydWV9LCJvdSI6ImNob3JpYSIsInB1cnBvc2UiOiJjaG9yaWFfc2VydmVyIiwidGNzIjoiNzE1NmI5MDE0ZWIxY2YzMzQ1YWU5YzgzMzJhNzI5NTljYTIyOWQwN2I5MmNkM2EwNTgwZGJiYjBmMzdlNzJiNWQwOGRlMjc3MTI5MDExYmJiNWQ1YmM3M2VlNmVmMTI0MmY1Y2ExZWFjNDRlZjFhNzRhODNmMWM0ZTA1MmViMDUuMTVmNDY4MjEyYTgwYzAwZjViMDQxOGUxNDU5YWMzM2EyYWM4YmJkZDcyOTM5NjUxZjk3MTI4ODgyYzY0YjcyNzhkZjkyM2U2MWEyNDliZmJlMjNiM2Q0YTRmMTYxZThmYjU3OGEwYzI4N2IzNDcxYmMzZjkwYjM1MmUzNTViMDEiLCJwdWJsaWNfa2V5IjoiYjAxMmVmMWU0NDc5NDdiM2NkYWYzZjZlOTQ1OTM0MjQwN2UyNGU1OTdlYzViNGNlY2NhYzhhYjVjYjAzYTZlOSIsImlzc2V4cCI6MTc4MjY5MTIwMCwiaXNzIjoiQy0zN2FSVEN5TFpoQTMzTkNqYXpqU1VVYmZEOGQuM2FhNzMwOGYwYTJlNjM0MjQ5OGJjOGE4ZjhjMmE5MjExY2QxMTBkN2E2MWRjYjQ0MjBhYjljYjU4Mzg2MDRlYyIsImV4cCI6MTc4MjY5MTIwMCwibmJmIjoxNzY3MjI1NjAwLCJpYXQiOjE3NjcyMjU2MDAsImp0aSI6IjM3ZEdhc1JLNkR1aElhbVlvdlBnQVRFYVhCViJ9.TvyHAiTGheNvvAzcLnxU8Q07t_L9Grr9hRI0K4IpX15PrFHTh23cyb8pAJCTISqDwyJ646VKnh2z1-gSzE6PAA";
    /// tokens.md §6.1: the same claims signed directly by the provisioner seed.
    const DIRECT_TOKEN: &str = "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9.eyJpZGVudGl0eSI6Im4xLmV4YW1wbGUubmV0IiwiY29sbGVjdGl2ZXMiOlsiY2hvcmlhIl0sInBlcm1pc3Npb25zIjp7InN1Ym1pc3Npb24iOnRydWUsInN0cmVhbXMiOnRydWV9LCJvdSI6ImNob3JpYSIsInB1cnBvc2UiOiJjaG9yaWFfc2VydmVyIiwicHVibGljX2tleSI6ImIwMTJlZjFlNDQ3OTQ3YjNjZGFmM2Y2ZTk0NTkzNDI0MDdlMjRlNTk3ZWM1YjRjZWNjYWM4YWI1Y2IwM2E2ZTkiLCJpc3MiOiJDaG9yaWEgUHJvdmlzaW9uZXIiLCJleHAiOjE3OTg3NjE2MDAsIm5iZiI6MTc2NzIyNTYwMCwiaWF0IjoxNzY3MjI1NjAwLCJqdGkiOiIzN2RHYXNSSzZEdWhJYW1Zb3ZQZ0FURWFYQlYifQ.yCiZ0kOQCuA9ziMx7yt_M2TCE8EwDMpfchfxfCI9i8oXJzfFUFgbc7DNBgzh4maxTMQKRy9d2GD3cwh7IvWXCA";
    const ORG: &str = "a4d9745451398b6ec6e8d4529a26f3314f504b9f18da9e9de32c665509f19b0d";
    const PROVISIONER: &str = "3aa7308f0a2e6342498bc8a8f8c2a9211cd110d7a61dcb4420ab9cb5838604ec";
    const AT: i64 = 1_767_225_601;

    fn key(hex: &str) -> [u8; 32] {
        hex::decode(hex).unwrap().try_into().unwrap()
    }

    #[test]
    fn the_spec_tokens_verify_against_their_issuers() {
        let claims = verify_server_token(CHAIN_TOKEN, &key(ORG), AT).unwrap();
        assert_eq!(claims.identity, "n1.example.net");
        verify_server_token(DIRECT_TOKEN, &key(PROVISIONER), AT).unwrap();
    }

    #[test]
    fn other_issuers_expiry_and_tampering_are_refused() {
        let e = verify_server_token(CHAIN_TOKEN, &key(PROVISIONER), AT).unwrap_err();
        assert!(e.contains("did not vouch"), "{e}");
        let e = verify_server_token(DIRECT_TOKEN, &key(ORG), AT).unwrap_err();
        assert!(e.contains("signature is invalid"), "{e}");
        let e = verify_server_token(CHAIN_TOKEN, &key(ORG), 1_782_691_200).unwrap_err();
        assert!(e.contains("expired"), "{e}");
        let mut parts: Vec<String> = DIRECT_TOKEN.split('.').map(String::from).collect();
        parts[2] = parts[2].replace('y', "z");
        let e = verify_server_token(&parts.join("."), &key(PROVISIONER), AT).unwrap_err();
        assert!(e.contains("signature"), "{e}");
        assert!(verify_server_token("nonsense", &key(ORG), AT).is_err());
    }
}
