//! Conversions for the control plane's ed25519 key pair: generate, seed bytes in and out,
//! public key bytes and hex in and out, and a short fingerprint for receipts.
//!
//! The store owns `keys/` and persists the bytes; this module only converts them. It must never
//! read or write a file, and never put secret bytes into an error message or a `Debug` string.
//! Public keys are checked when loaded: a malformed point or a weak (small-order) key is refused
//! here rather than discovered as a signature that mysteriously never verifies.

use ed25519_dalek::{SigningKey, VerifyingKey};
use rand::rngs::OsRng;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Length in bytes of a signing key's secret seed.
pub const SEED_LEN: usize = 32;
/// Length in bytes of a public (verifying) key.
pub const PUBLIC_KEY_LEN: usize = 32;

/// Key bytes that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The byte string has the wrong length.
    #[error("{what} must be {expected} bytes, got {got}")]
    WrongLength {
        /// Which key material.
        what: &'static str,
        /// The required length.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// Hex text that is not hex.
    #[error("the public key is not hex")]
    NotHex,
    /// The bytes do not encode a point on the curve.
    #[error("the public key is not a valid ed25519 point")]
    InvalidPoint,
    /// The key has small order: signatures under it prove nothing.
    #[error("the public key is weak (small order)")]
    WeakKey,
    /// The operating system's random source failed.
    #[error("the system random source failed: {0}")]
    Entropy(String),
}

/// A fresh signing key from the operating system's random source.
pub fn generate_signing_key() -> Result<SigningKey, KeyError> {
    let mut seed = [0u8; SEED_LEN];
    OsRng
        .try_fill_bytes(&mut seed)
        .map_err(|error| KeyError::Entropy(error.to_string()))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// A signing key from its 32-byte secret seed (as the store persists it).
pub fn signing_key_from_seed(seed: &[u8]) -> Result<SigningKey, KeyError> {
    let seed: &[u8; SEED_LEN] = seed.try_into().map_err(|_| KeyError::WrongLength {
        what: "a signing key seed",
        expected: SEED_LEN,
        got: seed.len(),
    })?;
    Ok(SigningKey::from_bytes(seed))
}

/// The 32-byte secret seed of `key`, for the store to persist (mode 0600). Never log it.
pub fn signing_key_seed(key: &SigningKey) -> [u8; SEED_LEN] {
    key.to_bytes()
}

/// A public key from its 32 bytes; refuses invalid points and weak keys.
pub fn verifying_key_from_bytes(bytes: &[u8]) -> Result<VerifyingKey, KeyError> {
    let bytes: &[u8; PUBLIC_KEY_LEN] = bytes.try_into().map_err(|_| KeyError::WrongLength {
        what: "a public key",
        expected: PUBLIC_KEY_LEN,
        got: bytes.len(),
    })?;
    let key = VerifyingKey::from_bytes(bytes).map_err(|_| KeyError::InvalidPoint)?;
    if key.is_weak() {
        return Err(KeyError::WeakKey);
    }
    Ok(key)
}

/// A public key from 64 hex digits (no surrounding whitespace).
pub fn verifying_key_from_hex(text: &str) -> Result<VerifyingKey, KeyError> {
    let bytes = hex::decode(text).map_err(|_| KeyError::NotHex)?;
    verifying_key_from_bytes(&bytes)
}

/// The public key as 64 lowercase hex digits.
pub fn verifying_key_hex(key: &VerifyingKey) -> String {
    hex::encode(key.as_bytes())
}

/// A short, stable name for a public key: the first 16 hex digits of its SHA-256. Receipts and
/// errors can say *which* key judged a token without printing the key.
pub fn fingerprint(key: &VerifyingKey) -> String {
    hex::encode(&Sha256::digest(key.as_bytes())[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_and_public_keys_round_trip() {
        let key = generate_signing_key().unwrap();
        let again = signing_key_from_seed(&signing_key_seed(&key)).unwrap();
        assert_eq!(again.verifying_key(), key.verifying_key());
        let public = key.verifying_key();
        assert_eq!(
            verifying_key_from_hex(&verifying_key_hex(&public)).unwrap(),
            public
        );
        assert_eq!(verifying_key_from_bytes(public.as_bytes()).unwrap(), public);
        assert_eq!(fingerprint(&public).len(), 16);
        assert_ne!(generate_signing_key().unwrap().to_bytes(), key.to_bytes());
    }

    #[test]
    fn bad_key_bytes_are_refused() {
        assert!(matches!(
            signing_key_from_seed(&[1; 31]),
            Err(KeyError::WrongLength { got: 31, .. })
        ));
        assert!(matches!(
            verifying_key_from_bytes(&[0; 33]),
            Err(KeyError::WrongLength { got: 33, .. })
        ));
        assert_eq!(verifying_key_from_hex("zz"), Err(KeyError::NotHex));
        // The identity point encodes as 1 followed by zeros: a valid point of small order.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        assert_eq!(verifying_key_from_bytes(&identity), Err(KeyError::WeakKey));
        // About half of all y coordinates are not on the curve; some small one must be refused.
        let off_curve = (2u8..64).any(|y| {
            let mut bytes = [0u8; 32];
            bytes[0] = y;
            verifying_key_from_bytes(&bytes) == Err(KeyError::InvalidPoint)
        });
        assert!(off_curve);
    }
}
