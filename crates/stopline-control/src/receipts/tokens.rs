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
    /// Its id (`jti`): what `token revoke` names.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub jti: String,
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

/// The receipt of `token list`: the live tokens minted here, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenListReceipt {
    /// One record per live token.
    pub tokens: Vec<stopline_core::minted::MintedToken>,
}

impl fmt::Display for TokenListReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.tokens.is_empty() {
            return f.write_str("no live tokens minted here");
        }
        writeln!(
            f,
            "{:<32}  {:<32}  {:<8}  {:<20}  {:<32}  labels",
            "id", "agent", "role", "expires", "parent"
        )?;
        for (index, token) in self.tokens.iter().enumerate() {
            let agent = token
                .chain
                .iter()
                .map(Name::as_str)
                .collect::<Vec<_>>()
                .join("/");
            let role = serde_json::to_value(token.role)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            let labels = token
                .labels
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join(",");
            write!(
                f,
                "{:<32}  {:<32}  {:<8}  {:<20}  {:<32}  {}",
                token.jti,
                stopline_core::text::inert(&agent),
                role,
                stopline_core::refusal::rfc3339_seconds(token.exp),
                token.parent.as_deref().unwrap_or("-"),
                if labels.is_empty() { "-" } else { &labels }
            )?;
            if index + 1 < self.tokens.len() {
                writeln!(f)?;
            }
        }
        Ok(())
    }
}

/// The receipt of `token revoke`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenRevokeReceipt {
    /// True once the revocation is durable.
    pub revoked: bool,
    /// The token's id.
    pub jti: String,
    /// True for `--with-delegates`: every token delegated under it is refused too.
    pub with_delegates: bool,
    /// The scope the revocation advanced (`token:<jti>`, `+delegates`).
    pub scope: String,
    /// The global epoch sequence after it.
    pub epoch_seq: u64,
    /// Who revoked it.
    pub by: String,
    /// Live gateways that acknowledged the revocation: each refuses the token from its next
    /// call on (docs/reference.md §3, as an engage's).
    pub acknowledged_by: Vec<String>,
    /// Live gateways that did not within `ack_timeout_ms`.
    pub unacknowledged: Vec<String>,
    /// What failed after the revocation was durable (never an undone revocation):
    /// `gateways_unacknowledged: …` names the gateways that did not acknowledge.
    pub warnings: Vec<String>,
}

impl fmt::Display for TokenRevokeReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "revoked token {}", self.jti)?;
        if self.with_delegates {
            f.write_str(" and every token delegated under it")?;
        }
        write!(f, " (epoch {}, by {})", self.epoch_seq, self.by)?;
        if !self.acknowledged_by.is_empty() {
            write!(f, "\nacknowledged by {}", self.acknowledged_by.join(", "))?;
        }
        for warning in &self.warnings {
            write!(f, "\nwarning: {warning}")?;
        }
        Ok(())
    }
}
