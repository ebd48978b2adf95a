//! Signed stopline tokens and delegation chains.
//!
//! A token is `stl1.<claims>.<signature>`: base64url JSON [`Claims`] (subject chain, role,
//! issue epoch, expiry, budgets) signed with the control plane's ed25519 key. Anyone holding the
//! public key verifies a token offline with [`verify`]; [`IssueRequest::mint`] and [`delegate`]
//! mint them. Whether a genuine token's authority still stands is the epoch map's judgment,
//! reached through [`Claims::standing`] with fresh control state.
//!
//! This crate must never touch the filesystem, the network or the clock: the store persists
//! key bytes ([`keys`] only converts them), and callers pass in the time and the current epoch.
//! It must never grant anything on claims that did not come out of [`verify`].
#![deny(missing_docs)]

mod claims;
mod delegate;
mod error;
pub mod keys;
mod mint;
mod wire;

pub use claims::{Claims, CLAIMS_VERSION, JTI_HEX_LEN, MAX_CHAIN_LEN, MAX_LABELS, MAX_PROJECT_LEN};
pub use delegate::{delegate, delegated_claims, DelegateRequest};
pub use ed25519_dalek::{SigningKey, VerifyingKey};
pub use error::TokenError;
pub use keys::KeyError;
pub use mint::{IssueRequest, Minted, DEFAULT_TTL_S};
pub use wire::{decode_unverified, issue, verify, MAX_TOKEN_BYTES, TOKEN_PREFIX};
