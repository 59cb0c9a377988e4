//! The `gen25519` challenge: a fresh nonce per try, and the check of the node's
//! ed25519 signature over it (`spec/provision-agent.md`).

use super::ids::{unhex as hexdec, v1_request_id};

/// A `gen25519` nonce: 32 lowercase hex characters, new for every try.
pub fn new_nonce() -> String {
    v1_request_id()
}

/// Checks a `gen25519` reply as Go does, with the lengths checked first (Go's
/// `ed25519.Verify` panics on a key that is not 32 bytes).
pub fn verify_nonce_signature(
    public_key_hex: &str,
    nonce: &str,
    signature_hex: &str,
) -> Result<(), String> {
    if public_key_hex.is_empty() {
        return Err("no public key received".into());
    }
    if signature_hex.is_empty() {
        return Err("no signature received".into());
    }
    let public = hexdec(public_key_hex).ok_or("invalid public key received: not hex")?;
    if public.len() != 32 {
        return Err(format!(
            "invalid public key received: {} bytes, not 32",
            public.len()
        ));
    }
    let signature = hexdec(signature_hex).ok_or("invalid signature")?;
    if signature.len() != 64 {
        return Err(format!(
            "invalid signature: {} bytes, not 64",
            signature.len()
        ));
    }
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, &public)
        .verify(nonce.as_bytes(), &signature)
        .map_err(|_| "invalid nonce signature".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nonce_signature_vector_and_its_failures() {
        let public = "b012ef1e447947b3cdaf3f6e9459342407e24e597ec5b4ceccac8ab5cb03a6e9";
        let nonce = "6f0c3b9e2a4d4f1c8b7e5d3a2c1b0f9e";
        let sig = "ed441a6ca0a293309266a2e30a72b8cc19c6c8b4e3816a683398f2bc1cc1c15c0eaf07ff94022e68f156da33aaf4e7c3eeea5a18e6b1a2f54fa5d7745afaec09";
        assert_eq!(verify_nonce_signature(public, nonce, sig), Ok(()));
        assert_eq!(
            verify_nonce_signature(public, "other", sig).unwrap_err(),
            "invalid nonce signature"
        );
        assert_eq!(
            verify_nonce_signature("", nonce, sig).unwrap_err(),
            "no public key received"
        );
        assert_eq!(
            verify_nonce_signature(public, nonce, "").unwrap_err(),
            "no signature received"
        );
        assert!(verify_nonce_signature(&public[..62], nonce, sig)
            .unwrap_err()
            .contains("31 bytes"));
        assert!(verify_nonce_signature("xyz", nonce, sig)
            .unwrap_err()
            .contains("not hex"));
        assert!(verify_nonce_signature(public, nonce, &sig[..10])
            .unwrap_err()
            .contains("5 bytes"));
        assert_eq!(new_nonce().len(), 32);
    }
}
