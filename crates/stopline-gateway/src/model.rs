//! The OpenAI-compatible model proxy: `/v1/chat/completions`, `/v1/completions`,
//! `/v1/responses`, `/v1/embeddings`.
//!
//! Every request is a model operation (`model:<model>`), prepared and fsynced before dispatch.
//! Budgets are reserved at an upper bound before dispatch (input tokens ≤ body bytes, output
//! tokens ≤ the request's max, else the model's `max_output_tokens`; a model without a price is
//! refused when the token carries a spend budget) and settled from the reported usage. Streams
//! pass through chunk by chunk, never buffered; usage is asked for
//! (`stream_options.include_usage`) and read as it passes. An EMERGENCY covering the agent cuts
//! a running stream and leaves its operation in doubt. The upstream key comes from the gateway's
//! environment (`[model] api_key_env`); the agent's token is never forwarded.

use crate::admit::{Admission, CutWatch, Outcome, Plan};
use crate::api::{bearer, parse_body};
use crate::error::GatewayError;
use crate::governor::Governor;
use crate::server::AppState;
use crate::usage::{SseScanner, Usage};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;
use std::time::Duration;
use stopline_control::config::Price;
use stopline_core::budget::{BudgetKind, Budgets};
use stopline_core::{Refusal, RefusalCode};

/// Which endpoint a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Chat,
    Completions,
    Responses,
    Embeddings,
}

impl Endpoint {
    fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat/completions",
            Endpoint::Completions => "completions",
            Endpoint::Responses => "responses",
            Endpoint::Embeddings => "embeddings",
        }
    }

    fn max_output_fields(self) -> &'static [&'static str] {
        match self {
            Endpoint::Chat => &["max_completion_tokens", "max_tokens"],
            Endpoint::Completions => &["max_tokens"],
            Endpoint::Responses => &["max_output_tokens"],
            Endpoint::Embeddings => &[],
        }
    }
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(state: State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    proxy(state, headers, body, Endpoint::Chat).await
}
/// `POST /v1/completions`.
pub async fn completions(state: State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    proxy(state, headers, body, Endpoint::Completions).await
}
/// `POST /v1/responses`.
pub async fn responses(state: State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    proxy(state, headers, body, Endpoint::Responses).await
}
/// `POST /v1/embeddings`.
pub async fn embeddings(state: State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    proxy(state, headers, body, Endpoint::Embeddings).await
}

async fn proxy(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
    endpoint: Endpoint,
) -> Response {
    match run(&state.gov, &headers, body, endpoint).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

/// The reservation bound of one request.
fn bounds(
    gov: &Governor,
    request: &Value,
    body_len: usize,
    endpoint: Endpoint,
    model: &str,
    price: Option<&Price>,
) -> Budgets {
    let input = body_len as f64;
    let output = endpoint
        .max_output_fields()
        .iter()
        .find_map(|f| request.get(*f).and_then(Value::as_u64))
        .or_else(|| {
            (endpoint != Endpoint::Embeddings).then(|| price.map_or(4096, |p| p.max_output_tokens))
        })
        .unwrap_or(0) as f64;
    let _ = (gov, model);
    let mut budget: Budgets = [
        (BudgetKind::Steps, 1.0),
        (BudgetKind::Tokens, input + output),
    ]
    .into();
    if let Some(price) = price {
        budget.insert(
            BudgetKind::SpendUsd,
            (input * price.input + output * price.output) / 1e6,
        );
    }
    budget
}

/// What a response actually used.
fn used(usage: Option<Usage>, price: Option<&Price>) -> Option<Budgets> {
    let usage = usage?;
    let mut budget: Budgets = [
        (BudgetKind::Steps, 1.0),
        (BudgetKind::Tokens, (usage.input + usage.output) as f64),
    ]
    .into();
    if let Some(price) = price {
        let spend = (usage.input as f64 * price.input + usage.output as f64 * price.output) / 1e6;
        budget.insert(BudgetKind::SpendUsd, spend);
    }
    Some(budget)
}

async fn run(
    gov: &Governor,
    headers: &HeaderMap,
    body: Bytes,
    endpoint: Endpoint,
) -> Result<Response, GatewayError> {
    let caller = gov.authenticate(bearer(headers))?;
    let mut request: Value = parse_body(&body)?;
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| Refusal::new(RefusalCode::BadRequest, "the request names no model"))?
        .to_string();
    let Some(upstream) = gov.config().model.clone() else {
        return Err(GatewayError::Upstream(
            "no [model] upstream is configured".into(),
        ));
    };
    let price = gov.config().price(&model).cloned();
    if price.is_none() && caller.claims().budgets.contains_key(&BudgetKind::SpendUsd) {
        return Err(gov
            .refused(Refusal::new(
                RefusalCode::BudgetExhausted,
                format!("model {model:?} has no price, and this token carries a spend budget"),
            ))
            .into());
    }
    let stream =
        endpoint != Endpoint::Embeddings && request.get("stream") == Some(&Value::Bool(true));
    if stream && matches!(endpoint, Endpoint::Chat | Endpoint::Completions) {
        if let Some(object) = request.as_object_mut() {
            let options = object
                .entry("stream_options")
                .or_insert_with(|| Value::Object(Default::default()));
            if let Some(options) = options.as_object_mut() {
                options.insert("include_usage".into(), Value::Bool(true));
            }
        }
    }
    let forwarded = Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
    let plan = Plan {
        class: gov.class_for(&caller, true),
        target: Some(format!("model:{model}")),
        record: true,
        budget: bounds(
            gov,
            &request,
            body.len().max(forwarded.len()),
            endpoint,
            &model,
            price.as_ref(),
        ),
        upstream: Some("model".into()),
        request_id: headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(String::from),
        surface: "model",
    };
    let mut admission = gov.admit(&caller, plan).await?;
    let url = format!(
        "{}/{}",
        upstream.base_url.trim_end_matches('/'),
        endpoint.path()
    );
    let mut outgoing = gov
        .http_client()
        .post(&url)
        .timeout(Duration::from_secs(upstream.timeout_s))
        .header(header::CONTENT_TYPE, "application/json")
        .body(forwarded);
    if let Some(key) = upstream
        .api_key_env
        .as_deref()
        .and_then(|name| std::env::var(name).ok())
        .filter(|k| !k.is_empty())
    {
        outgoing = outgoing.bearer_auth(key);
    }
    let mut cuts = gov.subscribe_cuts(&caller);
    admission.dispatch()?;
    let sent = tokio::select! {
        biased;
        refusal = cuts.cut() => {
            admission.cut(&refusal.message);
            return Err(refusal.into());
        }
        sent = outgoing.send() => sent,
    };
    let response = match sent {
        Ok(response) => response,
        Err(error) if error.is_connect() => {
            admission.finish(Outcome::UpstreamUnreachable);
            return Err(GatewayError::Upstream(format!(
                "the model upstream is unreachable: {error}"
            )));
        }
        Err(error) => {
            admission.finish_with_usage(
                Outcome::InDoubt(format!("upstream error after dispatch: {error}")),
                None,
            );
            return Err(GatewayError::Upstream(format!(
                "the model upstream failed: {error}"
            )));
        }
    };
    let status =
        StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    if stream && status.is_success() {
        let body = relay(response, admission, cuts, price);
        return Ok(([(header::CONTENT_TYPE, content_type)], body).into_response());
    }
    let bytes = tokio::select! {
        biased;
        refusal = cuts.cut() => {
            admission.cut(&refusal.message);
            return Err(refusal.into());
        }
        bytes = response.bytes() => bytes,
    };
    let bytes = match bytes {
        Ok(bytes) => bytes,
        Err(error) => {
            admission.finish_with_usage(
                Outcome::InDoubt(format!("the response was lost: {error}")),
                None,
            );
            return Err(GatewayError::Upstream(format!(
                "the model response was lost: {error}"
            )));
        }
    };
    let outcome = if status.is_success() {
        Outcome::Committed
    } else if status.is_server_error() {
        Outcome::UpstreamUnreachable
    } else {
        Outcome::Failed
    };
    let usage = used(Usage::from_body(&bytes), price.as_ref());
    let usage = usage.or_else(|| (!status.is_success()).then(|| [(BudgetKind::Steps, 1.0)].into()));
    admission.finish_with_usage(outcome, usage);
    Ok((status, [(header::CONTENT_TYPE, content_type)], bytes).into_response())
}

/// The relay of one stream: chunks pass as they come; a cut ends it with an error.
struct Relay {
    upstream: futures::stream::BoxStream<'static, reqwest::Result<Bytes>>,
    admission: Option<Admission>,
    cuts: CutWatch,
    scanner: SseScanner,
    price: Option<Price>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        // The client went away mid-stream: the upstream had accepted the request, so the call
        // happened; spending is settled at what was reported, else at the bound.
        if let Some(admission) = self.admission.take() {
            let usage = used(self.scanner.usage(), self.price.as_ref());
            admission.finish_with_usage(Outcome::Committed, usage);
        }
    }
}

fn relay(
    response: reqwest::Response,
    admission: Admission,
    cuts: CutWatch,
    price: Option<Price>,
) -> Body {
    let relay = Relay {
        upstream: response.bytes_stream().boxed(),
        admission: Some(admission),
        cuts,
        scanner: SseScanner::default(),
        price,
    };
    let stream = futures::stream::unfold(relay, |mut relay| async move {
        relay.admission.as_ref()?;
        let next = tokio::select! {
            biased;
            refusal = relay.cuts.cut() => Err(refusal),
            chunk = relay.upstream.next() => Ok(chunk),
        };
        match next {
            Err(refusal) => {
                if let Some(admission) = relay.admission.take() {
                    admission.cut(&refusal.message);
                }
                let error = std::io::Error::other(format!("{}: {}", refusal.code, refusal.message));
                Some((Err(error), relay))
            }
            Ok(Some(Ok(chunk))) => {
                relay.scanner.feed(&chunk);
                Some((Ok(chunk), relay))
            }
            Ok(Some(Err(error))) => {
                if let Some(admission) = relay.admission.take() {
                    admission.finish_with_usage(
                        Outcome::InDoubt(format!("the upstream stream broke: {error}")),
                        None,
                    );
                }
                Some((Err(std::io::Error::other(error.to_string())), relay))
            }
            Ok(None) => {
                if let Some(admission) = relay.admission.take() {
                    let usage = used(relay.scanner.usage(), relay.price.as_ref());
                    admission.finish_with_usage(Outcome::Committed, usage);
                }
                None
            }
        }
    });
    Body::from_stream(stream)
}
