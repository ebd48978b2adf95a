//! Delegation (`stopline token delegate`): a verified parent token mints a child for a
//! sub-agent, with the parent's chain plus the child, and never more than the parent has.
//!
//! The child inherits the parent's issue epoch, project and run, so every scope that revokes
//! the parent revokes the child by the chain rule of `IndexedEpochMap::authority_status`; it lives no
//! longer than the parent and carries budgets carved from the parent's. This module must never
//! widen anything: not the lifetime, not a budget, not the role (children are always `agent`).

use crate::claims::{Claims, CLAIMS_VERSION};
use crate::mint::{check_ttl, fresh_jti, Minted, DEFAULT_TTL_S};
use crate::wire::issue;
use ed25519_dalek::SigningKey;
use stopline_core::budget::{carve, BudgetKind, Budgets};
use stopline_core::refusal::MAX_DELEGATION_DEPTH;
use stopline_core::{Label, Name, Refusal, RefusalCode, Role};

/// What a delegation asks for besides the parent: the child's name, lifetime and budgets.
#[derive(Debug, Clone, PartialEq)]
pub struct DelegateRequest {
    /// The sub-agent the child token names.
    pub child: Name,
    /// The child's lifetime; [`DEFAULT_TTL_S`] (or `max_ttl_s`, when shorter) when `None`.
    pub ttl_s: Option<u64>,
    /// The budgets carved from the parent's.
    pub budgets: Budgets,
    /// Labels to add to the parent's (docs/reference.md §1, Label): a key the parent carries
    /// must keep its value.
    pub labels: Vec<Label>,
    /// The longest lifetime allowed (`[tokens] max_ttl_s`); a longer `ttl_s` is `ttl_too_long`.
    pub max_ttl_s: u64,
    /// The time of issue, unix seconds.
    pub now_unix_s: i64,
}

/// Mint a child token for `child` under `parent` and sign it. See [`delegated_claims`].
pub fn delegate(
    key: &SigningKey,
    parent: &Claims,
    request: &DelegateRequest,
) -> Result<Minted, Refusal> {
    let claims = delegated_claims(parent, request)?;
    let token = issue(key, &claims)?;
    Ok(Minted { token, claims })
}

/// The claims of a child of `parent` named `child`, issued at `now_unix_s`.
///
/// The caller's duties: `parent` must come from [`crate::verify`] (signature checked), and its
/// standing must have been judged current ([`Claims::standing`]) against fresh control state —
/// a stopped agent must not hand out fresh-looking tokens. (Were that skipped, the child would
/// still be stale, since it shares the parent's epoch and chain; the check is the front door.)
///
/// - `exp` = min(parent's `exp`, now + ttl), ttl defaulting to [`DEFAULT_TTL_S`];
/// - budgets = [`carve`] of `requested_budgets` from the parent's, where the parent's
///   `wall_clock_s` first shrinks by the seconds elapsed since the parent was issued (the
///   child's clock starts now; it must not outrun the parent's). Budgets the parent has already
///   spent are not known here: the gateway accounts spending along the chain.
///
/// Refuses: an expired parent (`token_expired`); a child deeper than [`MAX_DELEGATION_DEPTH`]
/// (`delegate_limit`; far below the claims' structural `MAX_CHAIN_LEN`); a ttl above
/// `max_ttl_s` (`ttl_too_long`); a child already in the chain or a zero ttl (`bad_request`);
/// parent claims that break a structural rule (`token_invalid`); a requested budget above the
/// parent's (`budget_exhausted`).
pub fn delegated_claims(parent: &Claims, request: &DelegateRequest) -> Result<Claims, Refusal> {
    let DelegateRequest {
        child,
        ttl_s,
        budgets: requested_budgets,
        labels,
        max_ttl_s,
        now_unix_s,
    } = request;
    let (child, now_unix_s) = (child.clone(), *now_unix_s);
    parent.check().map_err(|why| {
        Refusal::new(
            RefusalCode::TokenInvalid,
            format!("the parent token is invalid: {why}"),
        )
    })?;
    if parent.is_expired(now_unix_s) {
        return Err(Refusal::new(
            RefusalCode::TokenExpired,
            format!(
                "the parent token expired at {}",
                stopline_core::refusal::rfc3339_seconds(parent.exp)
            ),
        ));
    }
    let ttl_s = ttl_s.unwrap_or(DEFAULT_TTL_S.min(*max_ttl_s));
    check_ttl(ttl_s, *max_ttl_s)?;
    if parent.chain.contains(&child) {
        return Err(Refusal::new(
            RefusalCode::BadRequest,
            format!("{child} is already in the delegation chain"),
        ));
    }
    // Depth is the parent's delegations plus this one (the root's own token is depth 0).
    let depth = parent.chain.len();
    if depth > MAX_DELEGATION_DEPTH {
        return Err(Refusal::new(
            RefusalCode::DelegateLimit,
            format!(
                "a delegation chain may be at most {MAX_DELEGATION_DEPTH} deep; {} would be {depth} deep under {}",
                child,
                parent.chain[0]
            ),
        ));
    }
    if ttl_s == 0 {
        return Err(Refusal::new(
            RefusalCode::BadRequest,
            "--ttl must be at least 1 second",
        ));
    }
    // The parent is unexpired, so `parent.exp > now` and the child's exp is after its iat. A ttl
    // too large to add is simply capped by the parent's lifetime.
    let ttl_s = i64::try_from(ttl_s).unwrap_or(i64::MAX);
    let exp = now_unix_s.saturating_add(ttl_s).min(parent.exp);
    let budgets = carve(&remaining_at(parent, now_unix_s), requested_budgets)?;
    let labels = crate::claims::merge_labels(&parent.labels, labels)?;
    let mut chain = parent.chain.clone();
    chain.push(child);
    // A parent minted before lineages were signed, deeper than one link, cannot name its whole
    // lineage: its child names its parent alone, as such tokens always did.
    let mut lineage = parent.token_lineage();
    if lineage.len() != parent.chain.len() {
        lineage.clear();
    }
    Ok(Claims {
        v: CLAIMS_VERSION,
        jti: fresh_jti()?,
        chain,
        project: parent.project.clone(),
        run: parent.run.clone(),
        role: Role::Agent,
        epoch: parent.epoch,
        iat: now_unix_s,
        exp,
        budgets,
        parent: Some(parent.jti.clone()),
        labels,
        lineage,
    })
}

/// The parent's budgets as seen at `now`: `wall_clock_s` counts from the parent's `iat`.
fn remaining_at(parent: &Claims, now_unix_s: i64) -> Budgets {
    let mut budgets = parent.budgets.clone();
    if let Some(limit) = budgets.get_mut(&BudgetKind::WallClockS) {
        let elapsed = now_unix_s.saturating_sub(parent.iat).max(0) as f64;
        *limit = (*limit - elapsed).max(0.0);
    }
    budgets
}
