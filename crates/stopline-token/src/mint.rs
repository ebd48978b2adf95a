//! Minting a root token (`stopline token issue`): an [`IssueRequest`] becomes [`Claims`] with a
//! fresh `jti`, then a signed token.
//!
//! The caller supplies everything that needs the outside world — the current epoch `seq`, the
//! time, an already canonicalized project root — so this module reads no clock, file or epoch.
//! It must never mint under an epoch the caller did not read from confirmed control state: a
//! guessed epoch either revives revoked authority (too low) or is refused as future (too high).

use crate::claims::{new_jti, Claims, CLAIMS_VERSION};
use crate::wire::issue;
use ed25519_dalek::SigningKey;
use std::path::PathBuf;
use stopline_core::budget::Budgets;
use stopline_core::{Name, Refusal, RefusalCode, Role};

/// Token lifetime when none is asked for (docs/reference.md §3: `--ttl`, default 3600 s).
pub const DEFAULT_TTL_S: u64 = 3600;

/// A freshly minted token with the claims it carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Minted {
    /// The token text, `stl1.…`.
    pub token: String,
    /// What it asserts.
    pub claims: Claims,
}

/// What `stopline token issue` asks for. Build with [`IssueRequest::new`], then set fields.
#[derive(Debug, Clone, PartialEq)]
pub struct IssueRequest {
    /// The agent the token names (the whole chain of a root token).
    pub agent: Name,
    /// The role it grants.
    pub role: Role,
    /// The project root, already canonicalized by the caller.
    pub project: Option<PathBuf>,
    /// The run.
    pub run: Option<Name>,
    /// Lifetime in seconds; at least 1, at most `max_ttl_s`.
    pub ttl_s: u64,
    /// The longest lifetime allowed (`[tokens] max_ttl_s`).
    pub max_ttl_s: u64,
    /// Budget limits.
    pub budgets: Budgets,
    /// Labels signed into the token (docs/reference.md §1, Label).
    pub labels: Vec<stopline_core::Label>,
    /// The current global epoch `seq`, read from confirmed control state.
    pub epoch: u64,
    /// The time of issue, unix seconds.
    pub now_unix_s: i64,
}

impl IssueRequest {
    /// A request for an `agent`-role token for `agent` under `epoch`, issued at `now_unix_s`,
    /// living [`DEFAULT_TTL_S`], with no project, run or budgets.
    pub fn new(agent: Name, epoch: u64, now_unix_s: i64) -> IssueRequest {
        IssueRequest {
            agent,
            role: Role::Agent,
            project: None,
            run: None,
            ttl_s: DEFAULT_TTL_S,
            max_ttl_s: stopline_core::epoch::DEFAULT_MAX_TTL_S,
            budgets: Budgets::new(),
            labels: Vec::new(),
            epoch,
            now_unix_s,
        }
    }

    /// The claims this request mints, with a fresh random `jti`. Refuses a ttl above
    /// `max_ttl_s` (`ttl_too_long`), a zero or overflowing ttl and anything [`Claims::check`]
    /// refuses (`bad_request`).
    pub fn claims(&self) -> Result<Claims, Refusal> {
        check_ttl(self.ttl_s, self.max_ttl_s)?;
        let exp = expiry(self.now_unix_s, self.ttl_s)?;
        let claims = Claims {
            v: CLAIMS_VERSION,
            jti: fresh_jti()?,
            chain: vec![self.agent.clone()],
            project: self.project.clone(),
            run: self.run.clone(),
            role: self.role,
            epoch: self.epoch,
            iat: self.now_unix_s,
            exp,
            budgets: self.budgets.clone(),
            parent: None,
            labels: crate::claims::merge_labels(&Default::default(), &self.labels)?,
            lineage: Vec::new(),
        };
        claims
            .check()
            .map_err(|why| Refusal::new(RefusalCode::BadRequest, why))?;
        Ok(claims)
    }

    /// Mint and sign.
    pub fn mint(&self, key: &SigningKey) -> Result<Minted, Refusal> {
        let claims = self.claims()?;
        let token = issue(key, &claims)?;
        Ok(Minted { token, claims })
    }
}

/// Refuse (`ttl_too_long`) a lifetime above `max_ttl_s` (docs/reference.md §5, "Bounded tail").
pub(crate) fn check_ttl(ttl_s: u64, max_ttl_s: u64) -> Result<(), Refusal> {
    if ttl_s > max_ttl_s {
        return Err(Refusal::new(
            RefusalCode::TtlTooLong,
            format!("--ttl {ttl_s} is longer than max_ttl_s {max_ttl_s} ([tokens] in config.toml)"),
        ));
    }
    Ok(())
}

/// `now + ttl`, refusing a zero ttl and arithmetic overflow.
pub(crate) fn expiry(now_unix_s: i64, ttl_s: u64) -> Result<i64, Refusal> {
    if ttl_s == 0 {
        return Err(Refusal::new(
            RefusalCode::BadRequest,
            "--ttl must be at least 1 second",
        ));
    }
    i64::try_from(ttl_s)
        .ok()
        .and_then(|ttl| now_unix_s.checked_add(ttl))
        .ok_or_else(|| Refusal::new(RefusalCode::BadRequest, "--ttl is too large"))
}

/// A fresh `jti`; a failing system random source refuses the mint rather than reusing an id.
pub(crate) fn fresh_jti() -> Result<String, Refusal> {
    new_jti().map_err(|error| {
        Refusal::new(
            RefusalCode::ControlIo,
            format!("the system random source failed: {error}"),
        )
    })
}
