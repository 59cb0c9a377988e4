//! The private-key transport (go-choria's provision agent, `providers/agent/mcorpc/golang/provision`): an ephemeral X25519
//! agreement with the node's `ecdh_public`, and Go's legacy `x509.EncryptPEMBlock`
//! (AES-256-CBC, OpenSSL `EVP_BytesToKey` with MD5) keyed with the raw shared secret.
//! Deprecated cryptography, kept byte-compatible because every deployed server
//! decrypts exactly this; do not "improve" it.

use aes::cipher::{block_padding::Pkcs7, BlockEncryptMut, KeyIvInit};
use md5::{Digest, Md5};
use ring::agreement::{agree_ephemeral, EphemeralPrivateKey, UnparsedPublicKey, X25519};
use ring::rand::SystemRandom;

use super::ids::random_bytes;
use super::pem::{self, Block};

#[cfg(any(test, feature = "node-side"))]
mod node_side;
#[cfg(any(test, feature = "node-side"))]
pub use node_side::{decrypt_pem_block, PemDecryptError};

type Enc = cbc::Encryptor<aes::Aes256>;

/// OpenSSL's `EVP_BytesToKey` (MD5, one round) for a 32-byte key: `D1 = MD5(pw‖salt)`,
/// `D2 = MD5(D1‖pw‖salt)`, key = `D1‖D2`.
pub(crate) fn evp_bytes_to_key(password: &[u8], salt: &[u8]) -> [u8; 32] {
    let d1 = Md5::new()
        .chain_update(password)
        .chain_update(salt)
        .finalize();
    let d2 = Md5::new()
        .chain_update(d1)
        .chain_update(password)
        .chain_update(salt)
        .finalize();
    let mut key = [0u8; 32];
    key[..16].copy_from_slice(&d1);
    key[16..].copy_from_slice(&d2);
    key
}

/// Go's `x509.EncryptPEMBlock(rand, "RSA PRIVATE KEY", der, password, AES256)` with
/// the given IV.
pub fn encrypt_pem_block(der: &[u8], password: &[u8], iv: [u8; 16]) -> String {
    let key = evp_bytes_to_key(password, &iv[..8]);
    let ciphertext = Enc::new(&key.into(), &iv.into()).encrypt_padded_vec_mut::<Pkcs7>(der);
    pem::encode(&Block {
        label: "RSA PRIVATE KEY".into(),
        headers: vec![
            ("Proc-Type".into(), "4,ENCRYPTED".into()),
            (
                "DEK-Info".into(),
                format!("AES-256-CBC,{}", hex::encode(iv)),
            ),
        ],
        der: ciphertext,
    })
}

/// Why the helper's private key could not be encrypted for a node; the caller names
/// the node. No variant holds the key, the shared secret or our X25519 key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyTransportError {
    /// The helper's key is not PEM.
    #[error("bad key received")]
    BadKey,
    /// The node's `ecdh_public` is not 32 bytes of hex.
    #[error("the node's ecdh_public is not 64 hex characters")]
    NodeKeyNotHex,
    /// No ephemeral X25519 key could be made.
    #[error("could not generate an X25519 key")]
    Generate,
    /// The ephemeral key's public half could not be computed.
    #[error("could not compute the X25519 public key")]
    ComputePublic,
    /// The agreement with the node's `ecdh_public` failed (a low-order point).
    #[error("the node's ecdh_public is not a usable X25519 key")]
    UnusableNodeKey,
}

/// Encrypts the helper's private key PEM for the node whose X25519 public key is
/// `node_public_hex`; returns the encrypted PEM and our public key in hex.
pub fn encrypt_key_for_node(
    key_pem: &str,
    node_public_hex: &str,
) -> Result<(String, String), KeyTransportError> {
    let block = pem::decode(key_pem).ok_or(KeyTransportError::BadKey)?;
    let node_public = hex::decode(node_public_hex)
        .ok()
        .filter(|k| k.len() == 32)
        .ok_or(KeyTransportError::NodeKeyNotHex)?;
    let rng = SystemRandom::new();
    let ours =
        EphemeralPrivateKey::generate(&X25519, &rng).map_err(|_| KeyTransportError::Generate)?;
    let our_public = ours
        .compute_public_key()
        .map_err(|_| KeyTransportError::ComputePublic)?;
    let mut iv = [0u8; 16];
    random_bytes(&mut iv);
    let pem = agree_ephemeral(
        ours,
        &UnparsedPublicKey::new(&X25519, &node_public),
        |secret| encrypt_pem_block(&block.der, secret, iv),
    )
    .map_err(|_| KeyTransportError::UnusableNodeKey)?;
    Ok((pem, hex::encode(our_public.as_ref())))
}

#[cfg(test)]
mod openssl_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worked_vector_of_the_spec() {
        let secret =
            hex::decode("2052e6e903184821071a1d5e82444d6e5e5a6bb2cbaf29f4b40b4bd3317e6c20")
                .unwrap();
        let iv: [u8; 16] = hex::decode("000102030405060708090a0b0c0d0e0f")
            .unwrap()
            .try_into()
            .unwrap();
        assert_eq!(
            hex::encode(evp_bytes_to_key(&secret, &iv[..8])),
            "3c2dd28e7a3cde3c14f62afccf0cac6c10d56c0b6d7746cce1d44597e12cde25"
        );
        let pem = encrypt_pem_block(b"choria provisioning!", &secret, iv);
        assert_eq!(
            pem,
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-256-CBC,000102030405060708090a0b0c0d0e0f\n\n4YyMhsaqj/rOQ64+dL6/oD5sEI2+H/U1CramLV9yLNY=\n-----END RSA PRIVATE KEY-----\n"
        );
        let block = pem::decode(&pem).unwrap();
        assert_eq!(
            decrypt_pem_block(&block, &secret).unwrap(),
            b"choria provisioning!"
        );
        let wrong = decrypt_pem_block(&block, &[0u8; 32])
            .unwrap_err()
            .to_string();
        assert!(
            wrong.contains("decryption password incorrect") || wrong.contains("block size"),
            "{wrong}"
        );
    }

    #[test]
    fn the_key_exchange_matches_the_spec_keys() {
        use x25519_dalek::{PublicKey, StaticSecret};
        let server: [u8; 32] =
            hex::decode("67e4a9b3934a3030470ed7a30f89eeaf7dab7b492aa9ee02fb864d690b7e6eeb")
                .unwrap()
                .try_into()
                .unwrap();
        let server = StaticSecret::from(server);
        assert_eq!(
            hex::encode(PublicKey::from(&server).as_bytes()),
            "88a9a0ed27dc93c29466ea2bef99e078342b27e7a1d789fc35a9131f86c3a022"
        );
        let key_pem = pem::encode(&Block {
            label: "PRIVATE KEY".into(),
            headers: vec![],
            der: b"a key".to_vec(),
        });
        let (encrypted, ours) = encrypt_key_for_node(
            &key_pem,
            "88a9a0ed27dc93c29466ea2bef99e078342b27e7a1d789fc35a9131f86c3a022",
        )
        .unwrap();
        // The node side: its static secret and our public key give the same secret.
        let ours: [u8; 32] = hex::decode(&ours).unwrap().try_into().unwrap();
        let shared = server.diffie_hellman(&PublicKey::from(ours));
        let block = pem::decode(&encrypted).unwrap();
        assert_eq!(
            block.label, "RSA PRIVATE KEY",
            "always this label, as Go writes it"
        );
        assert_eq!(
            decrypt_pem_block(&block, shared.as_bytes()).unwrap(),
            b"a key"
        );
    }

    #[test]
    fn hostile_key_exchange_input_is_an_error() {
        let key_pem = pem::encode(&Block {
            label: "RSA PRIVATE KEY".into(),
            headers: vec![],
            der: vec![1, 2, 3],
        });
        assert_eq!(
            encrypt_key_for_node("not pem", &"00".repeat(32))
                .unwrap_err()
                .to_string(),
            "bad key received"
        );
        assert_eq!(
            encrypt_key_for_node(&key_pem, "abc"),
            Err(KeyTransportError::NodeKeyNotHex)
        );
        assert_eq!(
            encrypt_key_for_node(&key_pem, &"zz".repeat(32)),
            Err(KeyTransportError::NodeKeyNotHex)
        );
        // The all-zero point is a low-order point: no usable shared secret.
        assert_eq!(
            encrypt_key_for_node(&key_pem, &"00".repeat(32)),
            Err(KeyTransportError::UnusableNodeKey)
        );
    }
}
