//! The key transport's node side (what a provisioning-mode server does with the
//! `key` of `configure`): Go's `x509.DecryptPEMBlock`. The simulator and the tests
//! use it to prove what the daemon encrypts decrypts; the daemon never compiles it.

use aes::cipher::{block_padding::Pkcs7, BlockDecryptMut, KeyIvInit};

use super::super::pem::Block;
use super::evp_bytes_to_key;

type Dec = cbc::Decryptor<aes::Aes256>;

/// Why an encrypted PEM block could not be decrypted (the node side of the key
/// transport); `Display` gives Go's text where Go has one. No variant holds the
/// password, the key or the plaintext.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PemDecryptError {
    /// The block has no `DEK-Info` header.
    #[error("key is not encrypted")]
    NotEncrypted,
    /// The `DEK-Info` header is not `cipher,iv`.
    #[error("malformed DEK-Info header")]
    MalformedDekInfo,
    /// The cipher is not AES-256-CBC (the header's cipher name).
    #[error("unsupported cipher {0}")]
    UnsupportedCipher(String),
    /// The IV is not 16 bytes of hex.
    #[error("incorrect IV size")]
    IvSize,
    /// The ciphertext is empty or not a whole number of AES blocks.
    #[error("x509: encrypted PEM data is not a multiple of the block size")]
    BlockSize,
    /// The padding is wrong after decryption: the wrong password.
    #[error("x509: decryption password incorrect")]
    IncorrectPassword,
}

/// Go's `x509.DecryptPEMBlock` for AES-256-CBC blocks (the node side).
pub fn decrypt_pem_block(block: &Block, password: &[u8]) -> Result<Vec<u8>, PemDecryptError> {
    let info = block
        .header("DEK-Info")
        .ok_or(PemDecryptError::NotEncrypted)?;
    let (cipher, iv_hex) = info
        .split_once(',')
        .ok_or(PemDecryptError::MalformedDekInfo)?;
    if cipher != "AES-256-CBC" {
        return Err(PemDecryptError::UnsupportedCipher(cipher.to_string()));
    }
    let iv: [u8; 16] = hex::decode(iv_hex)
        .ok()
        .and_then(|v| v.try_into().ok())
        .ok_or(PemDecryptError::IvSize)?;
    if block.der.is_empty() || block.der.len() % 16 != 0 {
        return Err(PemDecryptError::BlockSize);
    }
    let key = evp_bytes_to_key(password, &iv[..8]);
    Dec::new(&key.into(), &iv.into())
        .decrypt_padded_vec_mut::<Pkcs7>(&block.der)
        .map_err(|_| PemDecryptError::IncorrectPassword)
}
