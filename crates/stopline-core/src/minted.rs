//! The registry of minted tokens (docs/reference.md §5, "Revoking one token"): one record per
//! token this control directory minted — `token issue`, `token delegate`, a gateway's
//! `/v1/delegate`, `stopline run`'s tokens — so `token list` can show the live ones and `token
//! revoke` refuses an id nobody minted here.
//!
//! The registry holds no authority: a token is admitted by its signature and the epoch map, never
//! by being listed, and a token missing from the registry is still refused once revoked. It is
//! bounded like the epoch map's tail: a record whose token expired is dropped at a later append.

use crate::scope::{Label, Name};
use crate::subject::Role;
use serde::{Deserialize, Serialize};

/// One minted token, as `keys/minted.jsonl` holds it (one JSON object a line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MintedToken {
    /// The token's id.
    pub jti: String,
    /// The parent's id, for a delegate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The delegation chain, root first, the acting agent last.
    pub chain: Vec<Name>,
    /// The run, if the token names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<Name>,
    /// The labels it carries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<Label>,
    /// The role it grants.
    pub role: Role,
    /// The issue epoch.
    pub epoch: u64,
    /// Issued at, unix seconds.
    pub iat: i64,
    /// Expires at, unix seconds.
    pub exp: i64,
}

impl MintedToken {
    /// True while the token is alive at `now_s` (it is refused from the second `exp` on).
    pub fn is_live(&self, now_s: i64) -> bool {
        now_s < self.exp
    }

    /// The acting agent.
    pub fn agent(&self) -> Option<&Name> {
        self.chain.last()
    }
}
