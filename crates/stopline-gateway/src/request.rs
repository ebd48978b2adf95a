//! What every route does with a request before its own work: find the bearer token, read the
//! JSON body (a body that is not the expected JSON is the typed refusal `bad_request`), run a
//! synchronous verb off the async workers, and decide what a caller's role may see.
//!
//! A leaf: the JSON routes (`api.rs`), the model routes (`model.rs`, `anthropic.rs`) and the
//! status page (`page.rs`) all use it, and it uses none of them.

use crate::error::GatewayError;
use axum::body::Bytes;
use axum::http::{header, HeaderMap};
use stopline_core::{Refusal, RefusalCode, Role};

/// The `Authorization` header as text (the caller checks its `Bearer ` form), if any.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

/// The body as `T`, or the refusal `bad_request` saying why it is not.
pub(crate) fn parse_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, GatewayError> {
    serde_json::from_slice(body).map_err(|e| {
        GatewayError::Refused(Refusal::new(
            RefusalCode::BadRequest,
            format!("the request body is not the expected JSON: {e}"),
        ))
    })
}

/// Run a synchronous (fsyncing) verb on the blocking pool; a panic in it is `control_io`.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Refusal> + Send + 'static,
) -> Result<T, GatewayError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| GatewayError::Refused(Refusal::new(RefusalCode::ControlIo, e.to_string())))?
        .map_err(GatewayError::Refused)
}

/// Operators and monitors see every agent's latches, workers and budgets; an agent (or
/// critical) token sees only what concerns its own chain (docs/reference.md §6).
pub(crate) fn sees_everything(role: Role) -> bool {
    matches!(role, Role::Operator | Role::Monitor)
}

/// True when `chain` is the caller's chain, one of its ancestors' or one of its sub-agents'
/// (one is a prefix of the other).
pub(crate) fn in_own_chain(caller: &[String], chain: &[String]) -> bool {
    let shorter = caller.len().min(chain.len());
    shorter > 0 && caller[..shorter] == chain[..shorter]
}
