//! The receipts of `token issue|delegate|verify` (docs/reference.md §3).

use serde::{Deserialize, Serialize};
use std::fmt;
use stopline_core::budget::Budgets;
use stopline_core::{Name, Role, Subject};

/// The receipt of `token issue` and `token delegate` (`--json`; people get the token alone).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MintedReceipt {
    /// The token.
    pub token: String,
    /// Whom it proves.
    pub subject: Subject,
    /// Its role.
    pub role: Role,
    /// The epoch it was minted under.
    pub issue_epoch: u64,
    /// Expiry, Unix seconds.
    pub exp: i64,
    /// The budgets signed into it.
    pub budgets: Budgets,
}

impl fmt::Display for MintedReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.token)
    }
}

/// The receipt of `token verify`: validity including epoch standing.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenVerifyReceipt {
    /// True when it verifies and its authority stands.
    pub valid: bool,
    /// Why not, when it does not.
    pub code: Option<String>,
    /// Whom it claims to prove (decoded without verification).
    pub subject: Option<Subject>,
    /// Its delegation chain (decoded without verification).
    pub chain: Vec<Name>,
    /// Its issue epoch (decoded without verification).
    pub issue_epoch: Option<u64>,
    /// Its expiry (decoded without verification).
    pub exp: Option<i64>,
}

impl fmt::Display for TokenVerifyReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.code {
            None => f.write_str("valid"),
            Some(code) => write!(f, "invalid: {code}"),
        }
    }
}
