//! Engage and disengage, as every surface offers them.
//!
//! Engage admits any caller: a local user, or a validly signed, unexpired token even when a stop
//! made it stale (refusing to stop is the more dangerous default). The scope and level are
//! validated before anything is written; then the store publishes the latch, and only then do
//! the secondary steps run, each failure a warning.

use crate::context::Context;
use crate::receipts::{DisengageReceipt, EngageEpoch, EngageReceipt, EngagedLatch};
use std::path::Path;
use stopline_core::latch::LatchSession;
use stopline_core::{Level, Refusal, RefusalCode, Role, Scope};
use stopline_store::EngageRequest;
use stopline_token::Claims;

/// Who is acting, as the surface established it.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// A token the caller presented, verified by signature and expiry (not epoch).
    pub token: Option<Claims>,
    /// `--by NAME`.
    pub by: Option<String>,
    /// True for a local CLI user (no token needed to engage).
    pub local: bool,
}

/// Parse a scope from user input, canonicalizing project roots (a root that no longer exists
/// is normalized lexically).
pub fn parse_scope(text: &str) -> Result<Scope, Refusal> {
    Scope::parse_input(text, |p: &Path| std::fs::canonicalize(p))
}

/// The most active latches one token's caller may hold that it engaged itself (docs/reference.md §5).
pub const ENGAGE_LIMIT: usize = 32;

/// Refuse a token caller's 33rd distinct scope (`engage_limit`), naming a wider scope that
/// would cover all of them. The latches counted are those engaged by `root`'s whole delegation
/// chain (the root itself and every sub-agent under it, docs/reference.md §6). `machine` always lands;
/// console callers are not limited; a scope the chain already holds a latch of is not a new
/// one. Counts the latches in this host's `latches/` (read without the WAL lock: it must never
/// wait).
fn check_engage_limit(ctx: &Context, root: Option<&str>, scope: &Scope) -> Result<(), Refusal> {
    let Some(agent) = root else {
        return Ok(());
    };
    if *scope == Scope::Machine {
        return Ok(());
    }
    let Ok(scan) = ctx.store.latches().scan() else {
        // An unreadable directory is the gates' fault to report; a stop is never refused for it.
        return Ok(());
    };
    let held: std::collections::BTreeSet<Scope> = scan
        .latches
        .iter()
        .filter_map(|l| l.record.as_ref())
        .filter(|r| r.session.root.as_deref().or(r.session.bound.as_deref()) == Some(agent))
        .map(|r| r.scope.clone())
        .collect();
    if held.len() < ENGAGE_LIMIT || held.contains(scope) {
        return Ok(());
    }
    let mut all: Vec<&Scope> = held.iter().collect();
    all.push(scope);
    let wider = wider_scope(&all);
    Err(Refusal::new(
        RefusalCode::EngageLimit,
        format!(
            "{agent}'s delegation chain already holds {} active latches it engaged itself (at most {ENGAGE_LIMIT}); engage one wider scope that covers them instead: --scope {wider}",
            held.len()
        ),
    ))
}

/// The narrowest scope covering every one of `scopes`: their deepest common project root when
/// all are projects (and it is not `/`), else `machine`.
fn wider_scope(scopes: &[&Scope]) -> Scope {
    let mut common: Option<std::path::PathBuf> = None;
    for scope in scopes {
        let Scope::Project(root) = scope else {
            return Scope::Machine;
        };
        common = Some(match common {
            None => root.clone(),
            Some(prefix) => prefix
                .components()
                .zip(root.components())
                .take_while(|(a, b)| a == b)
                .map(|(a, _)| a)
                .collect(),
        });
    }
    match common {
        Some(root) if root != Path::new("/") && root.components().count() > 1 => {
            Scope::Project(root)
        }
        _ => Scope::Machine,
    }
}

/// Verify a token's signature and expiry (not its epoch standing).
pub fn verify_token(ctx: &Context, token: &str) -> Result<Claims, Refusal> {
    let key = ctx.verifying_key()?;
    stopline_token::verify(&key, token.trim(), ctx.now_s())
        .map_err(|e| Refusal::new(e.code(), e.to_string()))
}

/// Engage a stop and return the receipt (docs/reference.md §3).
pub fn engage(
    ctx: &Context,
    caller: &Caller,
    scope: &str,
    level: Option<&str>,
    reason: &str,
) -> Result<EngageReceipt, Refusal> {
    let started = std::time::Instant::now();
    let scope = parse_scope(scope)?;
    let mut early_warnings = Vec::new();
    if let Scope::Project(root) = &scope {
        if matches!(std::fs::symlink_metadata(root), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
        {
            early_warnings.push(format!(
                "project_root_missing: {} does not exist; the latch names it in lexical form and covers work under it in either form",
                root.display()
            ));
        }
    }
    let level = level
        .map(Level::parse)
        .transpose()?
        .unwrap_or(Level::Emergency);
    stopline_core::refusal::require_reason(reason)?;
    if caller.token.is_none() && !caller.local {
        return Err(Refusal::new(
            RefusalCode::TokenInvalid,
            "engage needs a validly signed token",
        ));
    }
    let bound = caller
        .token
        .as_ref()
        .and_then(|c| c.agent())
        .map(|a| a.to_string());
    // A sub-agent's latches count against its chain's root (docs/reference.md §6), so delegating does
    // not multiply the limit.
    let root = caller
        .token
        .as_ref()
        .filter(|c| c.chain.len() > 1)
        .and_then(|c| c.chain.first())
        .map(|r| r.to_string());
    check_engage_limit(ctx, root.as_deref().or(bound.as_deref()), &scope)?;
    let tier = match caller.token.as_ref().map(|c| c.role) {
        Some(Role::Agent) => "governed",
        Some(Role::Critical) => "critical",
        Some(Role::Monitor) => "monitor",
        Some(Role::Operator) => "operator",
        None => "console",
    };
    let by = caller
        .by
        .clone()
        .or_else(|| bound.clone())
        .unwrap_or_else(|| {
            format!(
                "console:{}",
                std::env::var("USER").unwrap_or_else(|_| "unknown".into())
            )
        });
    let request = EngageRequest {
        scope,
        level,
        by,
        reason: reason.to_string(),
        session: LatchSession {
            bound,
            root,
            tier: tier.into(),
        },
    };
    let outcome = ctx.plane.engage(&request).map_err(|e| e.to_refusal())?;
    // Only after the latch is durable: reach covered supervised groups directly (docs/reference.md §6).
    let reached = crate::reach::covered_groups(ctx, &outcome.latch);
    let latch = EngagedLatch {
        file: outcome.latch.file_name(),
        record: outcome.latch.clone(),
    };
    // Only after the latch is durable: bounded wait for every live gateway's acknowledgement.
    let timeout = std::time::Duration::from_millis(ctx.config.ack_timeout_ms);
    let collecting = started.elapsed();
    let acks = crate::acks::collect(ctx, &outcome.latch.file_name(), timeout);
    let mut warnings = early_warnings;
    warnings.extend(outcome.warnings);
    warnings.extend(reached.warnings);
    let unacknowledged = (!acks.unacknowledged.is_empty()).then(|| {
        format!(
            "gateways_unacknowledged: {} did not acknowledge within {} ms",
            acks.unacknowledged.join(", "),
            ctx.config.ack_timeout_ms
        )
    });
    let receipt = EngageReceipt {
        engaged: true,
        latch,
        coalesced: outcome.coalesced,
        engaged_at: outcome.engaged_at,
        wal_deferred: outcome.wal_deferred,
        epoch: EngageEpoch {
            seq: outcome.epoch_seq,
            scope_revision: outcome.scope_revision,
        },
        groups_reached: reached.groups,
        acknowledged_by: Vec::new(),
        unacknowledged: Vec::new(),
        warnings,
        time_to_contained_us: outcome.time_to_contained.as_micros() as u64,
        last_ack_us: None,
        ack_collect_us: None,
    };
    // The acknowledgement warnings, then the gateways that did not acknowledge.
    let mut receipt = receipt.with_acks(acks, collecting.as_micros() as u64);
    receipt.warnings.extend(unacknowledged);
    Ok(receipt)
}

/// Disengage the halt-level latches of exactly `scope` (docs/reference.md §3, Disengage).
///
/// `presented` is any token the caller presented or has in `STOPLINE_TOKEN`: an agent or
/// critical token whose subject the latch covers is refused, so a stopped agent never lifts its
/// own stop. Admission otherwise needs `--by` naming an operator or monitor, or a current
/// monitor/operator token.
pub fn disengage(
    ctx: &Context,
    scope: &str,
    reason: &str,
    by: Option<&str>,
    presented: Option<&str>,
) -> Result<DisengageReceipt, Refusal> {
    let scope = parse_scope(scope)?;
    stopline_core::refusal::require_reason(reason)?;
    let not_permitted = |why: String| Refusal::new(RefusalCode::DisengageNotPermitted, why);
    let view = ctx.plane.load_view();
    let mut admitted_as: Option<String> = None;
    if let Some(token) = presented {
        let claims = verify_token(ctx, token)?;
        let subject = claims.subject();
        match claims.role {
            Role::Agent | Role::Critical => {
                let covering = view
                    .latches
                    .iter()
                    .any(|l| l.scope == scope && l.covers(&subject));
                if covering || subject.is_covered_by(&scope) {
                    return Err(not_permitted(
                        "a stopped agent never lifts its own stop".into(),
                    ));
                }
            }
            Role::Monitor | Role::Operator => {
                if claims.standing(&view.epoch) == stopline_core::AuthorityStatus::Current {
                    admitted_as = claims.agent().map(|a| a.to_string());
                } else {
                    return Err(Refusal::new(
                        RefusalCode::StaleControlEpoch,
                        "the token was revoked by a stop",
                    ));
                }
            }
        }
    }
    if admitted_as.is_none() {
        match by.map(str::trim).filter(|b| !b.is_empty()) {
            Some(name) if ctx.is_operator(name) || ctx.is_monitor(name) => admitted_as = Some(name.to_string()),
            Some(name) => return Err(not_permitted(format!("{name:?} is not a configured operator or monitor"))),
            None => return Err(not_permitted("disengage needs --by NAME (operator or monitor) or a current monitor/operator token".into())),
        }
    }
    let by = admitted_as.unwrap_or_default();
    let receipt = ctx
        .plane
        .disengage(&scope, reason, &by)
        .map_err(|e| e.to_refusal())?;
    Ok(DisengageReceipt(receipt))
}
