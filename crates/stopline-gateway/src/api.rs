//! The JSON routes of the gateway (docs/reference.md §8 table); `routes.rs` mounts them with the model
//! routes and the status page (whose two data routes, `/v1/budgets` and `/v1/drills`, live in
//! `page.rs`).
//!
//! Every route but `/healthz`, `/metrics` and `/` needs a bearer token. Engage accepts any
//! validly signed, unexpired token even when a stop made it stale; recover and drain are refused
//! here always (`owner_control_required`): nothing on the recovery path is reachable from the
//! gateway. Verbs are the same functions the CLI calls (`stopline-control`), run off the async
//! workers because they do synchronous, fsyncing I/O.

use crate::error::GatewayError;
use crate::request::{bearer, blocking, parse_body, sees_everything};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use stopline_control::receipts::{
    AgentStatusView, GatewayStatus, GatewayViewReport, Receipt, UncoveredServer,
};
use stopline_control::{engage, status};
use stopline_core::budget::{BudgetKind, Budgets};
use stopline_core::{AuthorityStatus, Name, Refusal, RefusalCode, Role, TaskClass};

pub(crate) async fn healthz(State(state): State<AppState>) -> Response {
    let snapshot = state.gov.snapshot();
    let ready = snapshot.loaded_ms > 0 && state.registry.is_registered();
    let body = json!({
        "ok": ready,
        "server": state.gov.server_id(),
        "view_generation": snapshot.generation,
        "view_faults": snapshot.view.faults,
    });
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body)).into_response()
}

pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    let text = state.gov.scrape_metrics();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

pub(crate) async fn status_route(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, GatewayError> {
    let caller = state.gov.authenticate(bearer(&headers))?;
    let ctx = state.gov.context().clone();
    let mut receipt = blocking(move || Ok(status::status(&ctx))).await?;
    let snapshot = state.gov.snapshot();
    if let Some(lapsed) = state.gov.permit_lapsed() {
        // No word from the distributed backend: this gateway cannot vouch for stops engaged
        // elsewhere since, so it reports itself uncovered.
        receipt
            .uncovered_servers
            .push(UncoveredServer::PermitLapsed {
                id: state.gov.server_id().to_string(),
                permit_lapsed: true,
                why: lapsed.message,
            });
    }
    // An agent token reads a view built from the receipt with only what concerns it (docs/reference.md
    // §8): never the receipt with fields taken out, so nothing new reaches it by default.
    let gateway = GatewayViewReport {
        id: state.gov.server_id().to_string(),
        view_generation: snapshot.generation,
        view_age_ms: state.gov.now_ms() - snapshot.loaded_ms,
        view_degraded: state.registry.record().degraded,
        notes: state.registry.record().notes,
    };
    Ok(Json(if sees_everything(caller.role()) {
        GatewayStatus {
            status: receipt,
            gateway,
        }
        .to_json()
    } else {
        GatewayStatus {
            status: AgentStatusView::of(&receipt, caller.subject()),
            gateway,
        }
        .to_json()
    }))
}

#[derive(Deserialize)]
struct EngageBody {
    scope: String,
    #[serde(default)]
    level: Option<String>,
    #[serde(default)]
    reason: String,
}

pub(crate) async fn engage_route(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, GatewayError> {
    // Any validly signed, unexpired token may stop, stale or not: refusing to stop is the more
    // dangerous default.
    let caller = state.gov.authenticate(bearer(&headers))?;
    let request: EngageBody = parse_body(&body)?;
    let ctx = state.gov.context().clone();
    let claims = caller.claims().clone();
    let receipt = blocking(move || {
        let who = engage::Caller {
            token: Some(claims),
            by: None,
            local: false,
        };
        engage::engage(
            &ctx,
            &who,
            &request.scope,
            request.level.as_deref(),
            &request.reason,
        )
    })
    .await?;
    Ok(Json(receipt.to_json()))
}

#[derive(Deserialize)]
struct DisengageBody {
    scope: String,
    #[serde(default)]
    reason: String,
}

pub(crate) async fn disengage_route(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, GatewayError> {
    let caller = state.gov.authenticate(bearer(&headers))?;
    let request: DisengageBody = parse_body(&body)?;
    if matches!(caller.role(), Role::Agent | Role::Critical) {
        state.gov.note_unauthorized(&caller, "disengage attempt");
    }
    let ctx = state.gov.context().clone();
    let token = caller.token().to_string();
    let receipt = blocking(move || {
        engage::disengage(&ctx, &request.scope, &request.reason, None, Some(&token))
    })
    .await?;
    state.gov.refresh_view();
    Ok(Json(receipt.to_json()))
}

pub(crate) async fn owner_only(State(state): State<AppState>, headers: HeaderMap) -> GatewayError {
    if let Ok(caller) = state.gov.authenticate(bearer(&headers)) {
        if matches!(caller.role(), Role::Agent | Role::Critical) {
            state
                .gov
                .note_unauthorized(&caller, "recovery or drain attempted through the gateway");
        }
    }
    GatewayError::Refused(Refusal::new(
        RefusalCode::OwnerControlRequired,
        "recovery and drain are only available at the owner console (no_agent_session, operator_identity, interactive_terminal); never through the gateway",
    ))
}

#[derive(Deserialize)]
struct CheckBody {
    #[serde(default)]
    class: Option<String>,
    #[serde(default)]
    action: Option<String>,
    /// One target, or several (the Claude Code hook sends its tool's target first, then the
    /// event's `cwd` and the tool's file paths as `file:<path>`).
    #[serde(default)]
    target: Option<OneOrMany>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

pub(crate) async fn check_route(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Json<Value> {
    let request: CheckBody = serde_json::from_slice(&body).unwrap_or(CheckBody {
        class: None,
        action: None,
        target: None,
    });
    let class = match request.class.as_deref() {
        Some("critical") => TaskClass::Critical,
        _ => TaskClass::Noncritical,
    };
    let targets = match request.target {
        None => Vec::new(),
        Some(OneOrMany::One(target)) => vec![target],
        Some(OneOrMany::Many(targets)) => targets,
    };
    // Every absolute `file:` target is a place the call works in: a project stop covering it
    // covers the call. Only absolute paths count; nothing is read from the disk for them.
    let paths: Vec<std::path::PathBuf> = targets
        .iter()
        .filter_map(|t| t.strip_prefix("file:"))
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute())
        .collect();
    let receipt = state.gov.check_at(
        bearer(&headers),
        class,
        targets.first().map(String::as_str),
        &paths,
    );
    let mut value = serde_json::to_value(&receipt).unwrap_or_default();
    value["action"] = request.action.into();
    Json(value)
}

#[derive(Deserialize)]
struct DelegateBody {
    agent: String,
    #[serde(default)]
    ttl: Option<u64>,
    #[serde(default)]
    budgets: BTreeMap<String, f64>,
    /// Labels to add to the parent's (`{"KEY": "VALUE"}`); a key the parent carries keeps its value.
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

pub(crate) async fn delegate_route(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, GatewayError> {
    let gov = &state.gov;
    let caller = gov.authenticate(bearer(&headers))?;
    let request: DelegateBody = parse_body(&body)?;
    let snapshot = gov.snapshot();
    if let Some(fault) = snapshot.view.faults.first() {
        return Err(fault.clone().into());
    }
    // A stopped parent mints nothing, whatever its token's standing (docs/reference.md §6).
    if let Some(latch) = snapshot.view.covering(caller.subject()).next() {
        return Err(Refusal::new(
            RefusalCode::BreakGlassContained,
            format!(
                "{} ({} at {}) covers the parent; no sub-agent token is minted while it stands",
                latch.file, latch.scope, latch.level
            ),
        )
        .into());
    }
    let standing = caller.claims().standing(&snapshot.view.epoch);
    if standing != AuthorityStatus::Current {
        let refusal = standing
            .refusal(caller.claims().epoch)
            .unwrap_or_else(|| Refusal::new(RefusalCode::StaleControlEpoch, "revoked"));
        return Err(refusal.into());
    }
    let mut budgets = Budgets::new();
    for (kind, limit) in &request.budgets {
        let kind = BudgetKind::parse(kind).ok_or_else(|| {
            Refusal::new(
                RefusalCode::BadRequest,
                format!("unknown budget kind {kind:?}"),
            )
        })?;
        if let Some(remaining) = gov.budget_remaining(&caller.claims().jti, kind) {
            if *limit > remaining {
                return Err(Refusal::new(
                    RefusalCode::BudgetExhausted,
                    format!("child {kind} {limit} exceeds what the parent has left ({remaining})"),
                )
                .into());
            }
        }
        budgets.insert(kind, *limit);
    }
    gov.register_budgets(caller.claims());
    let labels = request
        .labels
        .iter()
        .map(|(key, value)| stopline_core::Label::parse(&format!("{key}={value}")))
        .collect::<Result<Vec<_>, _>>()?;
    let child = Name::parse(&request.agent)?;
    let minted = stopline_token::delegate(
        gov.signing_key()?,
        caller.claims(),
        &stopline_token::DelegateRequest {
            child,
            ttl_s: request.ttl,
            budgets,
            labels,
            max_ttl_s: gov.max_ttl_s(),
            now_unix_s: gov.now_s(),
        },
    )?;
    // Counted only once minted (its exp is known) and before anyone sees it; a refused token
    // is dropped unseen.
    gov.admit_delegate(&minted.claims)?;
    gov.record_minted(&minted.claims)?;
    gov.register_child_budgets(&minted.claims);
    Ok(Json(
        stopline_control::tokens::minted_receipt(&minted).to_json(),
    ))
}

#[derive(Deserialize)]
struct AnomalyBody {
    agent: String,
    score: f64,
}

pub(crate) async fn anomaly_route(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, GatewayError> {
    let gov = &state.gov;
    let caller = gov.authenticate(bearer(&headers))?;
    let request: AnomalyBody = parse_body(&body)?;
    if !matches!(caller.role(), Role::Monitor | Role::Operator) {
        gov.note_unauthorized(&caller, "anomaly report from a non-monitor token");
        return Err(Refusal::new(
            RefusalCode::DisengageNotPermitted,
            "only a monitor or operator token may report anomalies",
        )
        .into());
    }
    if caller.claims().standing(&gov.snapshot().view.epoch) != AuthorityStatus::Current {
        return Err(Refusal::new(
            RefusalCode::StaleControlEpoch,
            "the monitor's token was revoked by a stop",
        )
        .into());
    }
    let agent = Name::parse(&request.agent)?;
    if !request.score.is_finite() {
        return Err(Refusal::new(RefusalCode::BadRequest, "score must be a finite number").into());
    }
    let threshold = gov.config().breakers.anomaly_score;
    gov.note_anomaly(agent.as_str(), request.score);
    Ok(Json(json!({
        "agent": agent.as_str(),
        "score": request.score,
        "threshold": threshold,
        "tripped": request.score >= threshold,
    })))
}
