//! The gateway's router: every route of docs/reference.md §8 and the handler that answers it — the JSON
//! routes (`api.rs`), the model proxy (`model.rs`, `anthropic.rs`), metrics and the status page
//! (`page.rs`). It only mounts; the handlers never reach back here.

use crate::state::AppState;
use crate::{a2a, anthropic, api, model, page, responses};
use axum::routing::{get, post};
use axum::Router;

/// The full router: API, model proxy, metrics, page.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(page::page))
        .route("/healthz", get(api::healthz))
        .route("/metrics", get(api::metrics))
        .route("/v1/status", get(api::status_route))
        .route("/v1/budgets", get(page::budgets_route))
        .route("/v1/drills", get(page::drills_route))
        .route("/v1/engage", post(api::engage_route))
        .route("/v1/disengage", post(api::disengage_route))
        .route("/v1/recover", post(api::owner_only))
        .route("/v1/drain", post(api::owner_only))
        .route("/v1/check", post(api::check_route))
        .route("/v1/delegate", post(api::delegate_route))
        .route("/v1/anomaly", post(api::anomaly_route))
        .route("/v1/chat/completions", post(model::chat_completions))
        .route("/v1/completions", post(model::completions))
        .route("/v1/responses", post(model::responses))
        .route(
            "/v1/responses/{id}",
            get(responses::get_response).delete(responses::delete_response),
        )
        .route(
            "/v1/responses/{id}/cancel",
            post(responses::cancel_response),
        )
        .route("/v1/embeddings", post(model::embeddings))
        .route("/v1/messages", post(anthropic::messages))
        .route("/a2a/{name}", post(a2a::post))
        .route("/a2a/{name}/.well-known/agent-card.json", get(a2a::card))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .with_state(state)
}
