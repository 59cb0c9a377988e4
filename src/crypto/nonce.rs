//! The `gen25519` challenge: a fresh nonce per try, and the check of the node's
//! ed25519 signature over it (go-choria's provision agent, `providers/agent/mcorpc/golang/provision`).

use super::ids::v1_request_id;

/// A `gen25519` nonce: 32 lowercase hex characters, new for every try.
pub(crate) fn new_nonce() -> String {
    v1_request_id()
}

/// Why a `gen25519` reply was refused. `Display` gives the text the retry log and
/// the attempt's failure show; the node is named by the caller (this layer knows
/// nothing of nodes). No variant holds the key, the nonce or the signature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NonceError {
    /// The reply held no public key.
    #[error("no public key received")]
    NoPublicKey,
    /// The reply held no signature.
    #[error("no signature received")]
    NoSignature,
    /// The public key is not hex.
    #[error("invalid public key received: not hex")]
    PublicKeyNotHex,
    /// The public key is not 32 bytes (its length).
    #[error("invalid public key received: {0} bytes, not 32")]
    PublicKeySize(usize),
    /// The signature is not hex.
    #[error("invalid signature")]
    SignatureNotHex,
    /// The signature is not 64 bytes (its length).
    #[error("invalid signature: {0} bytes, not 64")]
    SignatureSize(usize),
    /// The signature does not verify the nonce with the public key.
    #[error("invalid nonce signature")]
    BadSignature,
}

/// Checks a `gen25519` reply as Go does, with the lengths checked first (Go's
/// `ed25519.Verify` panics on a key that is not 32 bytes).
pub fn verify_nonce_signature(
    public_key_hex: &str,
    nonce: &str,
    signature_hex: &str,
) -> Result<(), NonceError> {
    if public_key_hex.is_empty() {
        return Err(NonceError::NoPublicKey);
    }
    if signature_hex.is_empty() {
        return Err(NonceError::NoSignature);
    }
    let public = hex::decode(public_key_hex).map_err(|_| NonceError::PublicKeyNotHex)?;
    if public.len() != 32 {
        return Err(NonceError::PublicKeySize(public.len()));
    }
    let signature = hex::decode(signature_hex).map_err(|_| NonceError::SignatureNotHex)?;
    if signature.len() != 64 {
        return Err(NonceError::SignatureSize(signature.len()));
    }
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, &public)
        .verify(nonce.as_bytes(), &signature)
        .map_err(|_| NonceError::BadSignature)
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
            verify_nonce_signature(public, "other", sig)
                .unwrap_err()
                .to_string(),
            "invalid nonce signature"
        );
        assert_eq!(
            verify_nonce_signature("", nonce, sig)
                .unwrap_err()
                .to_string(),
            "no public key received"
        );
        assert_eq!(
            verify_nonce_signature(public, nonce, "")
                .unwrap_err()
                .to_string(),
            "no signature received"
        );
        assert!(verify_nonce_signature(&public[..62], nonce, sig)
            .unwrap_err()
            .to_string()
            .contains("31 bytes"));
        assert!(verify_nonce_signature("xyz", nonce, sig)
            .unwrap_err()
            .to_string()
            .contains("not hex"));
        // A node's hex with a sign (what `from_str_radix` would take) is not hex.
        let signed = |hex: &str| format!("+{}", &hex[1..]);
        assert_eq!(
            verify_nonce_signature(&signed(public), nonce, sig),
            Err(NonceError::PublicKeyNotHex)
        );
        assert_eq!(
            verify_nonce_signature(public, nonce, &signed(sig)),
            Err(NonceError::SignatureNotHex)
        );
        assert!(verify_nonce_signature(public, nonce, &sig[..10])
            .unwrap_err()
            .to_string()
            .contains("5 bytes"));
        assert_eq!(new_nonce().len(), 32);
    }
}
