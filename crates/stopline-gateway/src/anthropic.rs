//! The Anthropic Messages API proxy: `POST /v1/messages` (streamed and not) and
//! `POST /v1/messages/count_tokens` (docs/reference.md §3), so Claude Code and the Anthropic SDKs reach
//! their model only through the stop.
//!
//! What is Anthropic's here, and only here: the agent's token is read from `x-api-key` (what the
//! SDKs send for an API key) or `Authorization: Bearer` (an auth token); the upstream is
//! `[anthropic] base_url` with the request's own path and query appended, and its key, from the
//! gateway's environment (`[anthropic] api_key_env`), goes as `x-api-key` — the agent's token is
//! never forwarded, nor any header but `anthropic-version` and `anthropic-beta`; the reservation
//! bound is the body's bytes for input and `max_tokens` for output; usage is read in Anthropic's
//! vocabulary, cache tokens included (`usage.rs`); and every refusal is written in Anthropic's
//! error shape, `{"type":"error","error":{"type","message","stopline_code"}}`, with the status
//! the gateway gives it everywhere (401, 403, 429, 503, …), so the SDKs raise the matching
//! `AuthenticationError`, `PermissionDeniedError`, `RateLimitError`. A stream an EMERGENCY
//! answers at once ends with an `event: error` frame in the same shape (the exchange goes on
//! detached and its outcome is recorded, docs/reference.md §8).
//!
//! Admission, dispatch, the cut and the settlement are not here: they are the shared
//! `crate::model::exchange` (and `exchange.rs` behind it), the same path as the
//! OpenAI-compatible routes.

use crate::admit::Plan;
use crate::error::{refusal_status, retry_after_s, GatewayError};
use crate::governor::Governor;
use crate::hosted::{self, Provider};
use crate::model::{self, ModelCall};
use crate::outgoing::Outgoing;
use crate::request::parse_body;
use crate::state::AppState;
use crate::usage::Vocabulary;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::time::Duration;
use stopline_core::budget::Budgets;
use stopline_core::Refusal;

/// Which Messages API route a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Messages,
    CountTokens,
}

impl Route {
    fn path(self) -> &'static str {
        match self {
            Route::Messages => "/v1/messages",
            Route::CountTokens => "/v1/messages/count_tokens",
        }
    }
}

/// Headers passed through to the upstream as they came.
const PASSED_THROUGH: [&str; 2] = ["anthropic-version", "anthropic-beta"];

/// `POST /v1/messages`.
pub async fn messages(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond(run(&state.gov, &headers, query, body, Route::Messages).await)
}

/// `POST /v1/messages/count_tokens`.
pub async fn count_tokens(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond(run(&state.gov, &headers, query, body, Route::CountTokens).await)
}

fn respond(result: Result<Response, GatewayError>) -> Response {
    result.unwrap_or_else(error_response)
}

/// The agent's token: `x-api-key`, else `Authorization` (`Bearer <token>`).
fn agent_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("x-api-key")
        .or_else(|| headers.get(header::AUTHORIZATION))
        .and_then(|v| v.to_str().ok())
}

async fn run(
    gov: &Governor,
    headers: &HeaderMap,
    query: Option<String>,
    body: Bytes,
    route: Route,
) -> Result<Response, GatewayError> {
    let caller = gov.authenticate(agent_token(headers))?;
    let request: Value = parse_body(&body)?;
    let model = model::model_of(&request)?;
    let request_id = model::request_id(headers)?;
    let Some(upstream) = gov.config().anthropic.clone() else {
        return Err(GatewayError::Upstream(
            "no [anthropic] upstream is configured".into(),
        ));
    };
    // Counting tokens runs nothing at the provider; a message may run server tools.
    let hosted = match route {
        Route::Messages => model::refuse_hosted(
            gov,
            &caller,
            hosted::admit(
                &hosted::anthropic_asks(&request, headers),
                &upstream.allow_hosted_tools,
                Provider::Anthropic,
            ),
        )?,
        Route::CountTokens => Vec::new(),
    };
    let forwarded = Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
    let input_bound = body.len().max(forwarded.len()) as u64;
    let (plan, price, stream) = match route {
        Route::Messages => {
            let price = model::price_for(gov, &caller, &model)?;
            let output_bound = request
                .get("max_tokens")
                .and_then(Value::as_u64)
                .unwrap_or_else(|| price.as_ref().map_or(4096, |p| p.max_output_tokens));
            let plan = Plan {
                class: gov.class_for(&caller, true),
                target: Some(format!("model:{model}")),
                record: true,
                blocks: stopline_core::ops::BlockScope::Agent,
                budget: model::reservation_bound(input_bound, output_bound, price.as_ref()),
                upstream: Some("anthropic".into()),
                request_id: request_id.clone(),
                surface: "model",
            };
            let stream = request.get("stream") == Some(&Value::Bool(true));
            (plan, price, stream)
        }
        // Counting tokens runs no model: noncritical work, no operation, nothing reserved.
        Route::CountTokens => {
            let plan = Plan {
                class: gov.class_for(&caller, false),
                target: None,
                record: false,
                blocks: stopline_core::ops::BlockScope::Agent,
                budget: Budgets::new(),
                upstream: Some("anthropic".into()),
                request_id: request_id.clone(),
                surface: "model",
            };
            (plan, None, false)
        }
    };
    let mut url = format!(
        "{}{}",
        upstream.base_url.trim_end_matches('/'),
        route.path()
    );
    if let Some(query) = query.filter(|q| !q.is_empty()) {
        url.push('?');
        url.push_str(&query);
    }
    let mut outgoing = Outgoing::post(&url, Duration::from_secs(upstream.timeout_s), forwarded)?;
    for name in PASSED_THROUGH {
        for value in headers.get_all(name) {
            outgoing.header(header::HeaderName::from_static(name), value.as_bytes())?;
        }
    }
    if let Some(key) = crate::outgoing::upstream_key(upstream.api_key_env.as_deref()) {
        outgoing.header(header::HeaderName::from_static("x-api-key"), key.as_bytes())?;
    }
    let call = ModelCall {
        plan,
        outgoing,
        stream,
        price,
        vocabulary: Vocabulary::Anthropic,
        settles_usage: route == Route::Messages,
        cut_frame: Some(cut_frame),
        hosted: model::hosted_plans(gov, &caller, hosted, &request_id),
        book: false,
    };
    model::exchange(gov, &caller, call).await
}

/// Anthropic's error `type` for an HTTP status.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// The Anthropic error body of `error`: the gateway's error object with `code` moved to
/// `stopline_code` (every other field kept, e.g. the latch), Anthropic's `type` added, and the
/// message led by the code — clients such as Claude Code show the user only the message.
fn error_body(error: &GatewayError) -> Value {
    let mut object = match error.body().get_mut("error").map(Value::take) {
        Some(Value::Object(object)) => object,
        _ => serde_json::Map::new(),
    };
    let code = object.remove("code").unwrap_or(Value::Null);
    let message = object
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let message = format!("{}: {message}", code.as_str().unwrap_or("error"));
    object.insert("message".into(), json!(message));
    object.insert("type".into(), json!(error_type(error.status())));
    object.insert("stopline_code".into(), code);
    json!({"type": "error", "error": object})
}

/// A refusal or upstream failure as an Anthropic error response.
pub fn error_response(error: GatewayError) -> Response {
    let mut response = (error.status(), axum::Json(error_body(&error))).into_response();
    if let GatewayError::Refused(refusal) = &error {
        if let Some(seconds) = retry_after_s(refusal) {
            response
                .headers_mut()
                .insert("retry-after", HeaderValue::from(seconds));
        }
    }
    response
}

/// The last frame of a stream cut by a stop: an SSE `error` event in Anthropic's shape.
fn cut_frame(refusal: &Refusal) -> Bytes {
    let mut body = error_body(&GatewayError::Refused(refusal.clone()));
    // The HTTP status was sent long ago; the frame names the one the refusal would have had.
    body["error"]["type"] = json!(error_type(refusal_status(refusal)));
    Bytes::from(format!("event: error\ndata: {body}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stopline_core::RefusalCode;

    #[test]
    fn refusals_take_anthropics_shape_with_the_stopline_code() {
        let check = |code: RefusalCode, status: u16, kind: &str| {
            let error = GatewayError::Refused(Refusal::new(code, "why"));
            assert_eq!(error.status().as_u16(), status);
            let body = error_body(&error);
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["type"], kind, "{body}");
            assert_eq!(body["error"]["message"], format!("{}: why", code.as_str()));
            assert_eq!(body["error"]["stopline_code"], code.as_str());
        };
        check(RefusalCode::TokenInvalid, 401, "authentication_error");
        check(RefusalCode::BreakGlassContained, 403, "permission_error");
        check(RefusalCode::StaleControlEpoch, 403, "permission_error");
        check(RefusalCode::BudgetExhausted, 429, "rate_limit_error");
        check(RefusalCode::QueuedTimeout, 503, "overloaded_error");
        check(RefusalCode::BadRequest, 400, "invalid_request_error");
        let upstream = error_body(&GatewayError::Upstream("down".into()));
        assert_eq!(upstream["error"]["type"], "api_error");
        assert_eq!(upstream["error"]["stopline_code"], "upstream_error");
        let frame = cut_frame(&Refusal::new(RefusalCode::BreakGlassContained, "cut"));
        let text = String::from_utf8(frame.to_vec()).unwrap();
        assert!(text.starts_with("event: error\ndata: {"), "{text}");
        assert!(text.ends_with("\n\n"));
        assert!(text.contains("\"stopline_code\":\"break_glass_contained\""));
    }
}
