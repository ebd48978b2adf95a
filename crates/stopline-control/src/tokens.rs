//! Minting, delegating and verifying tokens against the control directory's key and epochs.
//!
//! A token is minted under the current confirmed epoch; a control state that cannot be trusted
//! mints nothing. Delegation requires a parent whose signature, expiry and epoch standing are all
//! current: a stopped agent hands out no fresh-looking tokens.

use crate::context::Context;
use crate::receipts::{MintedReceipt, TokenListReceipt, TokenRevokeReceipt, TokenVerifyReceipt};
use std::path::Path;
use stopline_core::budget::Budgets;
use stopline_core::minted::MintedToken;
use stopline_core::{Label, Name, Refusal, RefusalCode, Role};
use stopline_token::{IssueRequest, Minted};

/// What `token issue` asks for.
#[derive(Debug, Clone)]
pub struct IssueArgs {
    /// The agent.
    pub agent: String,
    /// The role.
    pub role: Role,
    /// A project root (canonicalized here).
    pub project: Option<String>,
    /// A run id.
    pub run: Option<String>,
    /// Lifetime.
    pub ttl_s: u64,
    /// Budgets.
    pub budgets: Budgets,
    /// Labels signed into the token (docs/reference.md §1, Label).
    pub labels: Vec<Label>,
}

impl IssueArgs {
    /// A token for `agent` in `role`, lasting `ttl_s`: no project, no run, no budgets (set them
    /// with struct update syntax).
    pub fn new(agent: impl Into<String>, role: Role, ttl_s: u64) -> IssueArgs {
        IssueArgs {
            agent: agent.into(),
            role,
            project: None,
            run: None,
            ttl_s,
            budgets: Budgets::default(),
            labels: Vec::new(),
        }
    }
}

fn current_epoch(ctx: &Context) -> Result<u64, Refusal> {
    let view = ctx.plane.load_view();
    match view.faults.into_iter().next() {
        Some(fault) => Err(fault),
        None => Ok(view.epoch.seq),
    }
}

/// Mint a root token.
pub fn issue(ctx: &Context, args: &IssueArgs) -> Result<Minted, Refusal> {
    let agent = Name::parse(&args.agent)?;
    let project = match &args.project {
        Some(p) => Some(std::fs::canonicalize(Path::new(p)).map_err(|e| {
            Refusal::new(RefusalCode::ProjectRootUnresolvable, format!("{p}: {e}"))
        })?),
        None => None,
    };
    let run = args.run.as_deref().map(Name::parse).transpose()?;
    let epoch = current_epoch(ctx)?;
    let mut request = IssueRequest::new(agent, epoch, ctx.now_s());
    request.role = args.role;
    request.project = project;
    request.run = run;
    request.ttl_s = args.ttl_s;
    request.max_ttl_s = ctx.config.tokens.max_ttl_s.get();
    request.budgets = args.budgets.clone();
    request.labels = args.labels.clone();
    let minted = request.mint(&ctx.issuing_key()?)?;
    ctx.store
        .keys()
        .note_issued_epoch(epoch)
        .map_err(|e| e.to_refusal())?;
    record(&ctx.store, &minted.claims)?;
    Ok(minted)
}

/// Put a freshly minted token in the registry (`keys/minted.jsonl`), fsynced, before its text is
/// handed to anyone: a token that was handed out is always listed and revocable by its id.
pub fn record(
    store: &stopline_store::Store,
    claims: &stopline_token::Claims,
) -> Result<(), Refusal> {
    store
        .record_minted(&minted_record(claims))
        .map_err(|e| e.to_refusal())
}

/// The registry's record of `claims`.
pub fn minted_record(claims: &stopline_token::Claims) -> MintedToken {
    MintedToken {
        jti: claims.jti.clone(),
        parent: claims.parent.clone(),
        chain: claims.chain.clone(),
        run: claims.run.clone(),
        labels: claims.label_list(),
        role: claims.role,
        epoch: claims.epoch,
        iat: claims.iat,
        exp: claims.exp,
    }
}

/// `token list`: the live tokens minted here (and their delegates, a gateway's included).
pub fn list(ctx: &Context) -> Result<TokenListReceipt, Refusal> {
    let tokens = ctx.store.live_minted().map_err(|e| e.to_refusal())?;
    Ok(TokenListReceipt { tokens })
}

/// `token revoke ID [--with-delegates]` (docs/reference.md §5, "Revoking one token"): refuse
/// the token `jti` from now on (with `with_delegates`, every token delegated under it, at any
/// depth), durably before this answers; then, as an engage, a wait bounded by `ack_timeout_ms`
/// for every live gateway to acknowledge the revocation's revision, and each that did not is
/// named in `unacknowledged` and in a `gateways_unacknowledged` warning.
///
/// Who may: `--by NAME` naming a configured operator, or a current operator token. An agent's,
/// critical or monitor token is refused `owner_control_required`, and so is a `--by` that names
/// no operator. An id no live token minted here carries is `bad_request`, and nothing changes.
pub fn revoke(
    ctx: &Context,
    jti: &str,
    with_delegates: bool,
    reason: &str,
    by: Option<&str>,
    presented: Option<&str>,
) -> Result<TokenRevokeReceipt, Refusal> {
    let reason = stopline_core::refusal::require_reason(reason)?;
    let not_permitted = |why: String| Refusal::new(RefusalCode::OwnerControlRequired, why);
    let mut admitted_as: Option<String> = None;
    if let Some(token) = presented {
        let claims = crate::engage::verify_token(ctx, token)?;
        if claims.role != Role::Operator {
            return Err(not_permitted(
                "token revoke needs an operator: an agent, critical or monitor token revokes nothing"
                    .into(),
            ));
        }
        let view = ctx.plane.load_view();
        if let Some(refusal) = claims.standing(&view.epoch).refusal(claims.epoch) {
            return Err(refusal);
        }
        admitted_as = claims.agent().map(|a| a.to_string());
    }
    if admitted_as.is_none() {
        match by.map(str::trim).filter(|b| !b.is_empty()) {
            Some(name) if ctx.is_operator(name) => admitted_as = Some(name.to_string()),
            Some(name) => {
                return Err(not_permitted(format!(
                    "{name:?} is not a configured operator"
                )))
            }
            None => return Err(not_permitted(
                "token revoke needs --by NAME (a configured operator) or a current operator token"
                    .into(),
            )),
        }
    }
    let by = admitted_as.unwrap_or_default();
    let jti = jti.trim().to_ascii_lowercase();
    if !stopline_core::scope::is_jti(&jti) {
        return Err(Refusal::new(
            RefusalCode::BadRequest,
            format!("{jti:?} is not a token id (32 hex digits; see stopline token list)"),
        ));
    }
    let live = ctx.store.live_minted().map_err(|e| e.to_refusal())?;
    if !live.iter().any(|t| t.jti == jti) {
        return Err(Refusal::new(
            RefusalCode::BadRequest,
            format!("no live token minted here has id {jti} (see stopline token list)"),
        ));
    }
    let scope = stopline_core::Scope::Token {
        jti: jti.clone(),
        delegates: with_delegates,
    };
    let epoch = ctx
        .plane
        .revoke_token(&scope, &by, &reason)
        .map_err(|e| e.to_refusal())?;
    // Only after the revocation is durable: bounded wait for every live gateway's
    // acknowledgement of its revision, as an engage waits for its latch's.
    let timeout = std::time::Duration::from_millis(ctx.config.ack_timeout_ms);
    let acks =
        crate::acks::collect_revocation(ctx, &scope.to_string(), epoch.revision(&scope), timeout);
    let mut warnings = acks.warnings;
    if !acks.unacknowledged.is_empty() {
        warnings.push(format!(
            "gateways_unacknowledged: {} did not acknowledge within {} ms",
            acks.unacknowledged.join(", "),
            ctx.config.ack_timeout_ms
        ));
    }
    Ok(TokenRevokeReceipt {
        revoked: true,
        jti,
        with_delegates,
        scope: scope.to_string(),
        epoch_seq: epoch.seq,
        by,
        acknowledged_by: acks.acknowledged_by,
        unacknowledged: acks.unacknowledged,
        warnings,
    })
}

/// Mint a child token under `parent`, carrying the parent's labels and `labels` besides.
pub fn delegate(
    ctx: &Context,
    parent: &str,
    child: &str,
    ttl_s: Option<u64>,
    budgets: &Budgets,
    labels: &[Label],
) -> Result<Minted, Refusal> {
    let claims = crate::engage::verify_token(ctx, parent)?;
    let view = ctx.plane.load_view();
    if let Some(fault) = view.faults.into_iter().next() {
        return Err(fault);
    }
    if let Some(refusal) = claims.standing(&view.epoch).refusal(claims.epoch) {
        return Err(refusal);
    }
    let request = stopline_token::DelegateRequest {
        child: Name::parse(child)?,
        ttl_s,
        budgets: budgets.clone(),
        labels: labels.to_vec(),
        max_ttl_s: ctx.config.tokens.max_ttl_s.get(),
        now_unix_s: ctx.now_s(),
    };
    let minted = stopline_token::delegate(&ctx.issuing_key()?, &claims, &request)?;
    record(&ctx.store, &minted.claims)?;
    Ok(minted)
}

/// The `token issue`/`delegate` receipt.
pub fn minted_receipt(minted: &Minted) -> MintedReceipt {
    MintedReceipt {
        token: minted.token.clone(),
        subject: minted.claims.subject(),
        role: minted.claims.role,
        issue_epoch: minted.claims.epoch,
        exp: minted.claims.exp,
        budgets: minted.claims.budgets.clone(),
        jti: minted.claims.jti.clone(),
    }
}

/// The `token verify` receipt: validity including epoch standing.
pub fn verify(ctx: &Context, token: &str) -> TokenVerifyReceipt {
    let decoded = stopline_token::decode_unverified(token.trim()).ok();
    let subject = decoded.as_ref().map(|c| c.subject());
    let chain = decoded
        .as_ref()
        .map(|c| c.chain.clone())
        .unwrap_or_default();
    let code: Option<String> = match ctx.verifying_key() {
        Err(refusal) => Some(refusal.code.to_string()),
        Ok(key) => match stopline_token::verify(&key, token.trim(), ctx.now_s()) {
            Err(error) => Some(error.verify_code().to_string()),
            Ok(claims) => {
                let mut view = ctx.plane.load_view();
                let authority = stopline_core::view::Authority {
                    issue_epoch: claims.epoch,
                };
                if authority.minted_after(&view) {
                    // A token minted a moment ago: re-read before judging it as future.
                    view = ctx.plane.load_view();
                }
                match view.faults.first() {
                    Some(fault) => Some(fault.code.to_string()),
                    None => claims
                        .standing(&view.epoch)
                        .refusal(claims.epoch)
                        .map(|r| r.code.to_string()),
                }
            }
        },
    };
    TokenVerifyReceipt {
        valid: code.is_none(),
        code,
        subject,
        chain,
        issue_epoch: decoded.as_ref().map(|c| c.epoch),
        exp: decoded.as_ref().map(|c| c.exp),
    }
}

/// The token a command was given: `--token`, else `--token-file`, else `STOPLINE_TOKEN` (a
/// blank one is none). Surrounding whitespace is never part of a token.
pub fn presented(
    token: Option<&str>,
    token_file: Option<&Path>,
) -> Result<Option<String>, Refusal> {
    if let Some(token) = token {
        return Ok(Some(token.trim().to_string()));
    }
    if let Some(path) = token_file {
        return from_file(path).map(Some);
    }
    Ok(std::env::var("STOPLINE_TOKEN")
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty()))
}

/// A token read from `path` (`--token-file`, `--parent-file`); unreadable is `token_invalid`.
pub fn from_file(path: &Path) -> Result<String, Refusal> {
    std::fs::read_to_string(path)
        .map(|t| t.trim().to_string())
        .map_err(|e| {
            Refusal::new(
                RefusalCode::TokenInvalid,
                format!("--token-file {}: {e}", path.display()),
            )
        })
}

/// The parent of `token delegate`: `--parent`, else `--parent-file`, else `STOPLINE_TOKEN`.
pub fn parent(parent: Option<String>, parent_file: Option<&Path>) -> Result<String, Refusal> {
    match (parent, parent_file) {
        (Some(p), _) => Ok(p),
        (None, Some(file)) => from_file(file),
        (None, None) => std::env::var("STOPLINE_TOKEN")
            .map_err(|_| Refusal::new(RefusalCode::TokenInvalid, "--parent is required")),
    }
}
