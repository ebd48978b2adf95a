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
//!
//! Admission, dispatch, the cut and the settlement are `exchange`, shared with the Anthropic
//! Messages route (`anthropic.rs`): a route builds a `ModelCall` (its plan, its upstream
//! request, its usage vocabulary) and hands it over, so every model API obeys the same stop.

use crate::admit::{Admission, CutWatch, Outcome, Plan};
use crate::api::{bearer, parse_body};
use crate::caller::Caller;
use crate::error::GatewayError;
use crate::governor::Governor;
use crate::server::AppState;
use crate::usage::{SseScanner, Usage, Vocabulary};
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
fn bounds(request: &Value, body_len: usize, endpoint: Endpoint, price: Option<&Price>) -> Budgets {
    let output = endpoint
        .max_output_fields()
        .iter()
        .find_map(|f| request.get(*f).and_then(Value::as_u64))
        .or_else(|| {
            (endpoint != Endpoint::Embeddings).then(|| price.map_or(4096, |p| p.max_output_tokens))
        })
        .unwrap_or(0);
    reservation_bound(body_len as u64, output, price)
}

/// The upper bound a model call reserves: one step, `input` + `output` tokens, and, priced, every
/// input token at the dearest input price (plain, cache read or cache write: which kind each
/// token is only the usage says) plus every output token at the output price.
pub(crate) fn reservation_bound(input: u64, output: u64, price: Option<&Price>) -> Budgets {
    let (input, output) = (input as f64, output as f64);
    let mut budget: Budgets = [
        (BudgetKind::Steps, 1.0),
        (BudgetKind::Tokens, input + output),
    ]
    .into();
    if let Some(price) = price {
        budget.insert(
            BudgetKind::SpendUsd,
            (input * price.max_input_price() + output * price.output) / 1e6,
        );
    }
    budget
}

/// What a response actually used.
pub(crate) fn used(usage: Option<Usage>, price: Option<&Price>) -> Option<Budgets> {
    let usage = usage?;
    let mut budget: Budgets = [
        (BudgetKind::Steps, 1.0),
        (BudgetKind::Tokens, usage.total() as f64),
    ]
    .into();
    if let Some(price) = price {
        let spend = (usage.input as f64 * price.input
            + usage.cache_read as f64 * price.cache_read_price()
            + usage.cache_write as f64 * price.cache_write_price()
            + usage.output as f64 * price.output)
            / 1e6;
        budget.insert(BudgetKind::SpendUsd, spend);
    }
    Some(budget)
}

/// The price of `model`; refused when it has none and `caller`'s token carries a spend budget.
pub(crate) fn price_for(
    gov: &Governor,
    caller: &Caller,
    model: &str,
) -> Result<Option<Price>, GatewayError> {
    let price = gov.config().price(model).cloned();
    if price.is_none() && caller.claims().budgets.contains_key(&BudgetKind::SpendUsd) {
        return Err(gov
            .refused(Refusal::new(
                RefusalCode::BudgetExhausted,
                format!("model {model:?} has no price, and this token carries a spend budget"),
            ))
            .into());
    }
    Ok(price)
}

/// The `model` a request body names (required, non-empty).
pub(crate) fn model_of(request: &Value) -> Result<String, GatewayError> {
    Ok(request
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| Refusal::new(RefusalCode::BadRequest, "the request names no model"))?
        .to_string())
}

/// The caller's `x-request-id`, recorded with the operation.
pub(crate) fn request_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(String::from)
}

async fn run(
    gov: &Governor,
    headers: &HeaderMap,
    body: Bytes,
    endpoint: Endpoint,
) -> Result<Response, GatewayError> {
    let caller = gov.authenticate(bearer(headers))?;
    let mut request: Value = parse_body(&body)?;
    let model = model_of(&request)?;
    let Some(upstream) = gov.config().model.clone() else {
        return Err(GatewayError::Upstream(
            "no [model] upstream is configured".into(),
        ));
    };
    let price = price_for(gov, &caller, &model)?;
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
            &request,
            body.len().max(forwarded.len()),
            endpoint,
            price.as_ref(),
        ),
        upstream: Some("model".into()),
        request_id: request_id(headers),
        surface: "model",
    };
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
    if let Some(key) = upstream_key(upstream.api_key_env.as_deref()) {
        outgoing = outgoing.bearer_auth(key);
    }
    let call = ModelCall {
        plan,
        outgoing,
        stream,
        price,
        vocabulary: Vocabulary::OpenAi,
        settles_usage: true,
        cut_frame: None,
    };
    exchange(gov, &caller, call).await
}

/// The upstream key from the gateway's environment variable `name`, if set and not empty.
pub(crate) fn upstream_key(name: Option<&str>) -> Option<String> {
    name.and_then(|name| std::env::var(name).ok())
        .filter(|k| !k.is_empty())
}

/// One model call a route has built: what to admit, what to send, how to read its usage.
pub(crate) struct ModelCall {
    /// The admission plan (class, `model:<m>` target, reservation bound, adapter breaker).
    pub plan: Plan,
    /// The upstream request, headers and key included, ready to send.
    pub outgoing: reqwest::RequestBuilder,
    /// The response is a stream to relay chunk by chunk.
    pub stream: bool,
    /// The model's price, for settling spend from usage.
    pub price: Option<Price>,
    /// How the upstream reports usage.
    pub vocabulary: Vocabulary,
    /// Settle the reservation from the reported usage; `false` for work that runs no model
    /// (`count_tokens`), which settles at nothing.
    pub settles_usage: bool,
    /// The last frame a cut stream sends before it ends (Anthropic's `event: error`); `None`
    /// ends the body with a transport error instead.
    pub cut_frame: Option<fn(&Refusal) -> Bytes>,
}

/// Admit, dispatch and relay one model call: the one path every model route shares.
///
/// Admission (breakers, view, queueing, the reservation, the prepared operation) comes first;
/// the re-check at dispatch right before the request leaves; an EMERGENCY covering the caller
/// while the request is out or the response is streaming cuts it and leaves its operation in
/// doubt; otherwise the outcome and the usage the response reported settle the reservation.
pub(crate) async fn exchange(
    gov: &Governor,
    caller: &Caller,
    call: ModelCall,
) -> Result<Response, GatewayError> {
    let ModelCall {
        plan,
        outgoing,
        stream,
        price,
        vocabulary,
        settles_usage,
        cut_frame,
    } = call;
    let mut admission = gov.admit(caller, plan).await?;
    let mut cuts = gov.subscribe_cuts(caller);
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
        let body = relay(response, admission, cuts, price, vocabulary, cut_frame);
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
    let usage = if settles_usage {
        let usage = used(Usage::from_body_in(&bytes, vocabulary), price.as_ref());
        usage.or_else(|| (!status.is_success()).then(|| [(BudgetKind::Steps, 1.0)].into()))
    } else {
        Some(Budgets::new())
    };
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
    cut_frame: Option<fn(&Refusal) -> Bytes>,
    /// A cut frame was sent: the body ends next.
    ended: bool,
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
    vocabulary: Vocabulary,
    cut_frame: Option<fn(&Refusal) -> Bytes>,
) -> Body {
    let relay = Relay {
        upstream: response.bytes_stream().boxed(),
        admission: Some(admission),
        cuts,
        scanner: SseScanner::new(vocabulary),
        price,
        cut_frame,
        ended: false,
    };
    let stream = futures::stream::unfold(relay, |mut relay| async move {
        if relay.ended {
            return None;
        }
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
                if let Some(frame) = relay.cut_frame {
                    relay.ended = true;
                    return Some((Ok(frame(&refusal)), relay));
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
