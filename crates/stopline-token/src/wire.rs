//! The wire format: `stl1.<payload>.<signature>`, minted with [`issue`], read with
//! [`decode_unverified`] and [`verify`].
//!
//! `payload` is base64url without padding of the JSON claims; `signature` is base64url without
//! padding of the ed25519 signature over the ASCII bytes of `stl1.<payload>`. Parsing is strict
//! and bounded: the length is checked before anything is decoded, both parts must be canonical
//! base64, and [`verify`] checks the signature (with `verify_strict`) before it parses a byte of
//! JSON, so unauthenticated input reaches only the base64 decoder. No whitespace is trimmed:
//! callers that read a token from a file trim it first. This module must never accept a token
//! on any path that skipped the signature, and never panic on any input.

use crate::claims::Claims;
use crate::error::TokenError;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use stopline_core::{Refusal, RefusalCode};

/// The first part of every token; the `1` is the wire-format version.
pub const TOKEN_PREFIX: &str = "stl1";
/// The longest token accepted or minted, in bytes. Longer input is refused before decoding.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// Sign `claims` into a token. Refuses (`bad_request`) claims that break a structural rule or
/// would make a token longer than [`MAX_TOKEN_BYTES`]: what this returns, [`verify`] accepts.
pub fn issue(key: &SigningKey, claims: &Claims) -> Result<String, Refusal> {
    let refuse = |why: String| {
        Refusal::new(
            RefusalCode::BadRequest,
            format!("cannot issue these claims: {why}"),
        )
    };
    claims.check().map_err(refuse)?;
    let json = serde_json::to_vec(claims).map_err(|error| refuse(error.to_string()))?;
    let mut token = format!("{TOKEN_PREFIX}.{}", URL_SAFE_NO_PAD.encode(json));
    let signature = key.sign(token.as_bytes());
    token.push('.');
    token.push_str(&URL_SAFE_NO_PAD.encode(signature.to_bytes()));
    if token.len() > MAX_TOKEN_BYTES {
        return Err(refuse(format!(
            "the token would be longer than {MAX_TOKEN_BYTES} bytes"
        )));
    }
    Ok(token)
}

/// Parse a token's claims **without** checking its signature or expiry. For display and
/// diagnosis only (`token verify` prints what a refused token claimed); never grant anything on
/// what this returns.
pub fn decode_unverified(token: &str) -> Result<Claims, TokenError> {
    parse_claims(&split(token)?.payload)
}

/// Verify `token` offline against the control plane's public key and return its claims.
///
/// Checks, in order: shape and encoding (`Malformed`), the signature (`BadSignature`), the
/// claims' structure (`Malformed`), expiry at `now_unix_s` (`Expired`). It does not judge the
/// issue epoch: call [`Claims::standing`] with fresh control state before granting anything.
pub fn verify(key: &VerifyingKey, token: &str, now_unix_s: i64) -> Result<Claims, TokenError> {
    let parts = split(token)?;
    key.verify_strict(parts.signed.as_bytes(), &parts.signature)
        .map_err(|_| TokenError::BadSignature)?;
    let claims = parse_claims(&parts.payload)?;
    if claims.is_expired(now_unix_s) {
        return Err(TokenError::Expired { exp: claims.exp });
    }
    Ok(claims)
}

/// A token cut into its parts, each decoded but nothing yet trusted.
struct Parts<'a> {
    /// `stl1.<payload>`: the bytes the signature covers.
    signed: &'a str,
    /// The decoded JSON bytes.
    payload: Vec<u8>,
    /// The decoded signature.
    signature: Signature,
}

fn split(token: &str) -> Result<Parts<'_>, TokenError> {
    let malformed = |why: &str| TokenError::Malformed(why.to_string());
    if token.len() > MAX_TOKEN_BYTES {
        return Err(malformed("the token is longer than 8 KiB"));
    }
    let mut pieces = token.split('.');
    let (Some(prefix), Some(payload), Some(signature), None) =
        (pieces.next(), pieces.next(), pieces.next(), pieces.next())
    else {
        return Err(malformed("expected three parts separated by '.'"));
    };
    if prefix != TOKEN_PREFIX {
        return Err(malformed("the token does not start with 'stl1.'"));
    }
    let payload_bytes = decode_part(payload, "payload")?;
    let signature_bytes: [u8; 64] = decode_part(signature, "signature")?
        .try_into()
        .map_err(|_| malformed("the signature is not 64 bytes"))?;
    Ok(Parts {
        signed: &token[..prefix.len() + 1 + payload.len()],
        payload: payload_bytes,
        signature: Signature::from_bytes(&signature_bytes),
    })
}

/// Decode one base64url part and insist it is the canonical encoding of what it decodes to, so
/// no two texts carry the same token.
fn decode_part(part: &str, what: &str) -> Result<Vec<u8>, TokenError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|error| TokenError::Malformed(format!("the {what} is not base64url: {error}")))?;
    if bytes.is_empty() || URL_SAFE_NO_PAD.encode(&bytes) != part {
        return Err(TokenError::Malformed(format!(
            "the {what} is empty or not canonical base64url"
        )));
    }
    Ok(bytes)
}

fn parse_claims(payload: &[u8]) -> Result<Claims, TokenError> {
    let claims: Claims = serde_json::from_slice(payload)
        .map_err(|error| TokenError::Malformed(format!("the claims do not parse: {error}")))?;
    claims.check().map_err(TokenError::Malformed)?;
    Ok(claims)
}
