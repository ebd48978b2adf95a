//! Why a presented token was refused, and the stable codes each reason reports as.
//!
//! A token arrives from outside (a file, an environment variable, an HTTP header), so every way
//! it can fail is a value here, never a panic. The enum says only *what* is wrong with the token
//! itself; whether its issue epoch still stands is judged elsewhere (see
//! [`crate::Claims::standing`]). This module must never carry key material or echo a whole token
//! into a message: messages end up in receipts and logs.

use stopline_core::{Refusal, RefusalCode};

/// A token that cannot be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The text is not a well-formed stopline token: wrong shape, prefix or encoding, claims
    /// that do not parse or break a structural rule. The string says which rule.
    #[error("the token is malformed: {0}")]
    Malformed(String),
    /// The signature does not verify against the control plane's public key: the token was
    /// altered, or minted by another control plane.
    #[error("the token's signature does not verify against this control plane's key")]
    BadSignature,
    /// The token was genuine but its lifetime is over.
    #[error("the token expired at {}; do not retry with it: mint a new token", stopline_core::refusal::rfc3339_seconds(*exp))]
    Expired {
        /// The token's `exp` claim.
        exp: i64,
    },
}

impl TokenError {
    /// The refusal code this error reports as on every surface (docs/reference.md §3).
    pub fn code(&self) -> RefusalCode {
        match self {
            TokenError::Malformed(_) | TokenError::BadSignature => RefusalCode::TokenInvalid,
            TokenError::Expired { .. } => RefusalCode::TokenExpired,
        }
    }

    /// The `code` field of a `token verify` receipt (docs/reference.md §3): `malformed`, `bad_signature` or
    /// `expired`.
    pub fn verify_code(&self) -> &'static str {
        match self {
            TokenError::Malformed(_) => "malformed",
            TokenError::BadSignature => "bad_signature",
            TokenError::Expired { .. } => "expired",
        }
    }
}

impl From<TokenError> for Refusal {
    fn from(error: TokenError) -> Refusal {
        Refusal::new(error.code(), error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_maps_to_its_contract_codes() {
        let cases = [
            (
                TokenError::Malformed("x".into()),
                "token_invalid",
                "malformed",
            ),
            (TokenError::BadSignature, "token_invalid", "bad_signature"),
            (TokenError::Expired { exp: 5 }, "token_expired", "expired"),
        ];
        for (error, code, verify_code) in cases {
            assert_eq!(error.code().as_str(), code);
            assert_eq!(error.verify_code(), verify_code);
            assert_eq!(Refusal::from(error.clone()).code, error.code());
        }
    }
}
