//! How a refusal leaves the gateway: one HTTP status per refusal code, a JSON body
//! `{"error":{"code","message"}}`, and `Retry-After` where waiting can help.
//!
//! The mapping is part of the contract (docs/reference.md §8): 401 for a token that is absent, malformed,
//! forged or expired; 403 for a call a latch blocks or a token a stop made stale; 503 with
//! `Retry-After` for a queue timeout (and an open upstream breaker, a view that cannot be
//! refreshed, or a lapsed distributed permit); 429 for a budget. This module must never turn a
//! refusal into a success status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use stopline_core::{LatchRef, Refusal, RefusalCode};

/// The HTTP status a refusal is reported with.
pub fn refusal_status(refusal: &Refusal) -> StatusCode {
    match refusal.code {
        RefusalCode::TokenInvalid | RefusalCode::TokenExpired => StatusCode::UNAUTHORIZED,
        RefusalCode::BudgetExhausted => StatusCode::TOO_MANY_REQUESTS,
        RefusalCode::QueuedTimeout
        | RefusalCode::ControlIo
        | RefusalCode::GatewayUnreachable
        | RefusalCode::DistributedUnavailable
        | RefusalCode::ControlHomeMissing => StatusCode::SERVICE_UNAVAILABLE,
        RefusalCode::BreakerOpen if refusal.message.starts_with(ADAPTER_PREFIX) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        RefusalCode::BadRequest
        | RefusalCode::ScopeInvalid
        | RefusalCode::LevelInvalid
        | RefusalCode::ReasonRequired
        | RefusalCode::ReasonInvalid
        | RefusalCode::RequestInvalid
        | RefusalCode::ProjectRootUnresolvable => StatusCode::BAD_REQUEST,
        _ => StatusCode::FORBIDDEN,
    }
}

/// Seconds a client should wait before retrying, for the refusals where waiting can help.
pub fn retry_after_s(refusal: &Refusal) -> Option<u64> {
    match refusal_status(refusal) {
        StatusCode::SERVICE_UNAVAILABLE => Some(1),
        _ => None,
    }
}

/// Messages of adapter (upstream) breaker refusals start with this, so they map to 503 while an
/// agent breaker's `breaker_open` stays a 403.
pub const ADAPTER_PREFIX: &str = "upstream ";

/// An error the gateway answers with: a refusal, or an upstream failure that is not one.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// A refusal with its stable code.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The upstream could not be reached or answered garbage; nothing is known to have happened.
    #[error("upstream_error: {0}")]
    Upstream(String),
}

impl GatewayError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            GatewayError::Refused(refusal) => refusal_status(refusal),
            GatewayError::Upstream(_) => StatusCode::BAD_GATEWAY,
        }
    }

    /// The stable code string of the body.
    pub fn code(&self) -> &str {
        match self {
            GatewayError::Refused(refusal) => refusal.code.as_str(),
            GatewayError::Upstream(_) => "upstream_error",
        }
    }

    /// The JSON body `{"error":{"code","message"}}`, with `latch` when a latch caused the
    /// refusal (docs/reference.md §4).
    pub fn body(&self) -> serde_json::Value {
        serde_json::to_value(self.shape()).unwrap_or_default()
    }

    /// [`GatewayError::body`]'s text, written straight from the refusal with no tree made for
    /// it (a stopped agent is answered this on every call), byte for byte what the tree prints.
    pub(crate) fn body_text(&self) -> Vec<u8> {
        serde_json::to_vec(&self.shape()).unwrap_or_default()
    }

    fn shape(&self) -> Body<'_> {
        let error = match self {
            GatewayError::Refused(refusal) => ErrorObject {
                code: refusal.code.as_str(),
                latch: refusal.latch.as_deref(),
                message: &refusal.message,
            },
            GatewayError::Upstream(message) => ErrorObject {
                code: self.code(),
                latch: None,
                message,
            },
        };
        Body { error }
    }
}

/// The body's shape, members in the sorted order a `serde_json` tree prints them in.
#[derive(Serialize)]
struct Body<'a> {
    error: ErrorObject<'a>,
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    code: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    latch: Option<&'a LatchRef>,
    message: &'a str,
}

/// A refusal as an HTTP response.
pub fn refusal_response(refusal: &Refusal) -> Response {
    GatewayError::Refused(refusal.clone()).into_response()
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let content_type = [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )];
        let mut response = (self.status(), content_type, self.body_text()).into_response();
        if let GatewayError::Refused(refusal) = &self {
            if let Some(seconds) = retry_after_s(refusal) {
                response
                    .headers_mut()
                    .insert("retry-after", HeaderValue::from(seconds));
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: RefusalCode, message: &str) -> u16 {
        refusal_status(&Refusal::new(code, message)).as_u16()
    }

    #[test]
    fn each_refusal_family_has_its_fixed_status() {
        assert_eq!(status(RefusalCode::TokenInvalid, ""), 401);
        assert_eq!(status(RefusalCode::TokenExpired, ""), 401);
        assert_eq!(status(RefusalCode::BreakGlassContained, ""), 403);
        assert_eq!(status(RefusalCode::StaleControlEpoch, ""), 403);
        assert_eq!(status(RefusalCode::OwnerControlRequired, ""), 403);
        assert_eq!(status(RefusalCode::QueuedTimeout, ""), 503);
        assert_eq!(status(RefusalCode::BudgetExhausted, ""), 429);
        assert_eq!(status(RefusalCode::BreakerOpen, "agent w"), 403);
        assert_eq!(
            status(RefusalCode::BreakerOpen, "upstream model is open"),
            503
        );
        let queued = Refusal::new(RefusalCode::QueuedTimeout, "");
        assert_eq!(retry_after_s(&queued), Some(1));
    }

    /// The body written straight is the body's tree printed: members sorted, the latch when a
    /// latch caused the refusal, `upstream_error` for an upstream failure.
    #[test]
    fn the_body_written_straight_is_its_tree_printed() {
        let latch = LatchRef {
            by: "safety \"monitor\"".into(),
            engaged_at: Some("2026-12-06T03:00:00Z".into()),
            id: "latch_7f2a".into(),
            level: "emergency".into(),
            reason: "anomalous é\n".into(),
            scope: "agent:example-worker".into(),
        };
        let errors = [
            GatewayError::Refused(
                Refusal::new(RefusalCode::BreakGlassContained, "stopped").with_latch(Some(latch)),
            ),
            GatewayError::Refused(Refusal::new(RefusalCode::TokenInvalid, "no token")),
            GatewayError::Upstream("connection refused".into()),
        ];
        for error in &errors {
            let text = String::from_utf8(error.body_text()).unwrap();
            assert_eq!(text, error.body().to_string());
        }
        let upstream: serde_json::Value = serde_json::from_slice(&errors[2].body_text()).unwrap();
        assert_eq!(
            upstream,
            serde_json::json!({"error": {"code": "upstream_error", "message": "connection refused"}})
        );
        let contained: serde_json::Value = serde_json::from_slice(&errors[0].body_text()).unwrap();
        assert_eq!(contained["error"]["latch"]["by"], "safety \"monitor\"");
        assert_eq!(contained["error"]["code"], "break_glass_contained");
    }
}
