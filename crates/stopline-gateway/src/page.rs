//! The operator's status page at `GET /`, and the two token-authenticated routes only it needs
//! beside `/v1/status`: `GET /v1/budgets` (each agent's budgets and breakers as this gateway's
//! ledger and breakers hold them) and `GET /v1/drills` (the last `control-observation.v1`
//! records of the evidence log).
//!
//! The page is a static shell (HTML, CSS and JS from `assets/`, embedded at compile time, no build
//! step) that needs no token; its data comes from the authenticated routes with a token the
//! operator types in, and its stop form posts to `/v1/engage`. It has no recovery control and
//! must never get one: recovery is the owner console's alone (nothing here reaches it). Its
//! inline script and style are pinned by hash in a Content-Security-Policy, so text an agent
//! wrote (a latch's reason) can never run as script on the page that holds the operator's token.

use crate::error::GatewayError;
use crate::request::{bearer, blocking, in_own_chain, sees_everything};
use crate::state::AppState;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::OnceLock;

const HTML: &str = include_str!("../assets/status.html");
const STYLE: &str = include_str!("../assets/status.css");
const SCRIPT: &str = include_str!("../assets/status.js");

/// The page with its style and script inlined, and the policy that admits exactly those two.
struct Page {
    html: String,
    policy: String,
}

fn csp_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

fn assembled() -> &'static Page {
    static PAGE: OnceLock<Page> = OnceLock::new();
    PAGE.get_or_init(|| Page {
        html: HTML
            .replacen("/*STYLE*/", STYLE, 1)
            .replacen("/*SCRIPT*/", SCRIPT, 1),
        policy: format!(
            "default-src 'none'; script-src {}; style-src {}; connect-src 'self'; img-src data:; \
             form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
            csp_hash(SCRIPT),
            csp_hash(STYLE)
        ),
    })
}

/// `GET /`: the shell. No token needed; it holds no data.
pub async fn page() -> Response {
    let page = assembled();
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, page.policy.as_str()),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        page.html.as_str(),
    )
        .into_response()
}

/// `GET /v1/budgets`: every agent this gateway holds an account or a breaker for, with its
/// accounts' limits, use and reservations, its breaker counters, the breaker thresholds and the
/// adapter breakers. Any validly signed, unexpired token may read it, like `/v1/status` (a stop
/// that made the operator's token stale must not blind the page). It shows no token, only the
/// first characters of each token's id.
pub async fn budgets_route(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, GatewayError> {
    let gov = &state.gov;
    let caller = gov.authenticate(bearer(&headers))?;
    // An agent token reads only its own chain's accounts (docs/reference.md §6).
    let own_chain: Option<Vec<String>> = (!sees_everything(caller.role())).then(|| {
        caller
            .claims()
            .chain
            .iter()
            .map(|n| n.to_string())
            .collect()
    });
    let now_ms = gov.now_ms();
    let mut agents: BTreeMap<String, (Vec<Value>, Value)> = BTreeMap::new();
    for account in gov.budget_summaries(now_ms / 1000) {
        if let Some(chain) = &own_chain {
            if !in_own_chain(chain, &account.chain) {
                continue;
            }
        }
        let entry = agents.entry(account.agent.clone()).or_default();
        entry
            .0
            .push(serde_json::to_value(&account).unwrap_or_default());
    }
    for breaker in gov.agent_breaker_summaries() {
        let visible = match &own_chain {
            None => true,
            Some(chain) => agents.contains_key(&breaker.agent) || chain.contains(&breaker.agent),
        };
        if visible {
            agents.entry(breaker.agent.clone()).or_default().1 =
                serde_json::to_value(&breaker).unwrap_or_default();
        }
    }
    let snapshot = gov.snapshot();
    let breakers = &gov.config().breakers;
    let mut adapters: Vec<Value> = gov
        .adapter_states(&snapshot)
        .into_iter()
        .map(|(upstream, state)| json!({"upstream": upstream, "state": state.as_str()}))
        .collect();
    adapters.sort_by(|a, b| a["upstream"].as_str().cmp(&b["upstream"].as_str()));
    Ok(Json(json!({
        "now_ms": now_ms,
        "agents": agents
            .into_iter()
            .map(|(agent, (accounts, breaker))| json!({"agent": agent, "accounts": accounts, "breaker": breaker}))
            .collect::<Vec<_>>(),
        "thresholds": {
            "unauthorized_calls": breakers.unauthorized_calls,
            "refused_egress": breakers.refused_egress,
            "anomaly_score": breakers.anomaly_score,
            "trip_level": breakers.trip_level,
        },
        "adapters": adapters,
    })))
}

/// `?limit=N` of `/v1/drills` (default 5, at most 100).
#[derive(Debug, Deserialize)]
pub struct DrillsQuery {
    #[serde(default)]
    limit: Option<usize>,
}

/// `GET /v1/drills`: the newest drill records first, from the drill index
/// (`Evidence::drills`: the evidence log's head, its newest line and
/// `evidence/drills.json`, never the history). A log or index that cannot be verified is
/// reported as `error` (with no drills), never shown as "no drills".
pub async fn drills_route(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<DrillsQuery>,
) -> Result<Json<Value>, GatewayError> {
    state.gov.authenticate(bearer(&headers))?;
    let limit = query
        .limit
        .unwrap_or(5)
        .clamp(1, stopline_store::evidence::drills::RECENT_DRILLS);
    let store = state.gov.context().store.clone();
    let index = blocking(move || Ok(store.evidence().drills())).await?;
    let body = match index {
        Ok(index) => {
            let newest: Vec<&serde_json::Map<String, Value>> = index.newest(limit).collect();
            json!({"drills": newest, "total": index.total, "error": null})
        }
        Err(fault) => json!({"drills": [], "total": null, "error": fault.to_string()}),
    };
    Ok(Json(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_assembled_and_its_policy_pins_exactly_its_script_and_style() {
        let page = assembled();
        assert!(!page.html.contains("/*STYLE*/") && !page.html.contains("/*SCRIPT*/"));
        assert!(page.html.contains(SCRIPT) && page.html.contains(STYLE));
        assert!(page.policy.contains(&csp_hash(SCRIPT)));
        assert!(page.policy.contains("connect-src 'self'"));
        assert!(!page.policy.contains("unsafe-inline"));
    }

    #[test]
    fn the_page_has_no_recovery_control() {
        // The page names the recovery commands (as text for the owner console) but never calls
        // a recovery route: the only POST it makes is /v1/engage.
        for forbidden in ["/v1/recover", "/v1/drain", "/v1/disengage", "innerHTML"] {
            assert!(
                !SCRIPT.contains(forbidden),
                "the page script uses {forbidden}"
            );
            assert!(!HTML.contains(forbidden), "the page uses {forbidden}");
        }
        assert_eq!(SCRIPT.matches("method: \"POST\"").count(), 1);
    }
}
