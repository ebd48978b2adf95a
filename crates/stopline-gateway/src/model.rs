//! The OpenAI-compatible model proxy: `/v1/chat/completions`, `/v1/completions`,
//! `/v1/responses`, `/v1/embeddings`.
//!
//! Every request is a model operation (`model:<model>`), prepared and fsynced before dispatch.
//! Budgets are reserved at an upper bound before dispatch (input tokens ≤ body bytes, output
//! tokens ≤ the request's max, else the model's `max_output_tokens`; a model without a price is
//! refused when the token carries a spend budget) and settled from the reported usage. Streams
//! pass through chunk by chunk, never buffered; usage is asked for
//! (`stream_options.include_usage`) and read as it passes. The upstream key comes from the
//! gateway's environment (`[model] api_key_env`); the agent's token is never forwarded.
//!
//! Admission and the hand-over are `exchange`, shared with the Anthropic Messages route
//! (`anthropic.rs`): a route builds a `ModelCall` (its plan, its upstream request, its usage
//! vocabulary, its cut frame) and hands it over, so every model API obeys the same stop. The
//! exchange itself runs detached in `exchange.rs` (docs/reference.md §8): finished by the gateway whether
//! the agent stays or not, the agent answered at once at EMERGENCY while the exchange goes on.

use crate::admit::Plan;
use crate::caller::Caller;
use crate::error::GatewayError;
use crate::exchange::{Answer, DetachedCall, Meter};
use crate::governor::Governor;
use crate::hosted::{self, Provider};
use crate::outgoing::{upstream_key, Outgoing};
use crate::request::{bearer, parse_body};
use crate::responses::Companions;
use crate::state::AppState;
use crate::usage::{ResponseSeen, SseScanner, Usage, Vocabulary};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::time::Duration;
use stopline_control::config::Price;
use stopline_core::budget::{BudgetKind, Budgets};
use stopline_core::refusal::bounded_record;
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
        // Not `budget_exhausted`: nothing was spent, the gateway cannot bound the spend. The
        // message names the key the operator adds (docs/reference.md "Refusal codes").
        let refusal = Refusal::new(
            RefusalCode::PriceMissing,
            format!(
                "model {model:?} has no price and this token carries a spend budget: add                  [prices.{}] with input and output (USD per million tokens) to the gateway's                  config.toml",
                toml_key(model)
            ),
        );
        crate::logs::refused(
            caller.agent(),
            Some(&format!("model:{model}")),
            &refusal,
            std::time::Instant::now(),
        );
        return Err(gov.refused(refusal).into());
    }
    Ok(price)
}

/// `model` as a TOML key: bare when it can be, else quoted (`"gpt-4.1"`, as a dot would split it).
fn toml_key(model: &str) -> String {
    let bare = !model.is_empty()
        && model
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if bare {
        model.to_string()
    } else {
        toml::Value::String(model.to_string()).to_string()
    }
}

/// The `model` a request body names (required, non-empty, at most
/// [`stopline_core::refusal::MAX_RECORDED_BYTES`]: it is recorded in the operation's target).
pub(crate) fn model_of(request: &Value) -> Result<String, GatewayError> {
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| Refusal::new(RefusalCode::BadRequest, "the request names no model"))?;
    bounded_record("model", model)?;
    Ok(model.to_string())
}

/// The caller's `x-request-id`, recorded with the operation (bounded like every recorded
/// string).
pub(crate) fn request_id(headers: &HeaderMap) -> Result<Option<String>, GatewayError> {
    let id = headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    if let Some(id) = &id {
        bounded_record("the x-request-id header", id)?;
    }
    Ok(id)
}

/// One operation per allowed hosted tool a call carries (`hosted::admit`'s targets), each
/// governed like a tool call: prepared before dispatch, admitted against the stops and the
/// unresolved operations on its target, one `tool_calls` from the budget.
pub(crate) fn hosted_plans(
    gov: &Governor,
    caller: &Caller,
    targets: Vec<String>,
    request_id: &Option<String>,
) -> Vec<Plan> {
    targets
        .into_iter()
        .map(|target| Plan {
            class: gov.class_for(caller, true),
            target: Some(target),
            record: true,
            blocks: stopline_core::ops::BlockScope::Agent,
            budget: [(BudgetKind::ToolCalls, 1.0)].into(),
            upstream: None,
            request_id: request_id.clone(),
            surface: "model",
        })
        .collect()
}

/// Refuse a request that asks the provider to act (`hosted.rs`) unless allowed: logged as
/// refused, nothing recorded or sent.
pub(crate) fn refuse_hosted(
    gov: &Governor,
    caller: &Caller,
    result: Result<Vec<String>, Refusal>,
) -> Result<Vec<String>, GatewayError> {
    result.map_err(|refusal| {
        crate::logs::refused(caller.agent(), None, &refusal, std::time::Instant::now());
        gov.refused(refusal).into()
    })
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
    let request_id = request_id(headers)?;
    let Some(upstream) = gov.config().model.clone() else {
        return Err(GatewayError::Upstream(
            "no [model] upstream is configured".into(),
        ));
    };
    let responses = endpoint == Endpoint::Responses;
    let asks = hosted::openai_asks(&request, responses);
    let hosted = refuse_hosted(
        gov,
        &caller,
        hosted::admit(&asks, &upstream.allow_hosted_tools, Provider::OpenAi),
    )?;
    if responses {
        match request.get("previous_response_id") {
            None | Some(Value::Null) => {}
            Some(Value::String(id)) => gov.responses().check_previous(&caller, id)?,
            Some(other) => {
                return Err(Refusal::new(
                    RefusalCode::RequestInvalid,
                    format!("previous_response_id = {other} is not a response id"),
                )
                .into())
            }
        }
    }
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
        blocks: stopline_core::ops::BlockScope::Agent,
        budget: bounds(
            &request,
            body.len().max(forwarded.len()),
            endpoint,
            price.as_ref(),
        ),
        upstream: Some("model".into()),
        request_id: request_id.clone(),
        surface: "model",
    };
    let url = format!(
        "{}/{}",
        upstream.base_url.trim_end_matches('/'),
        endpoint.path()
    );
    let mut outgoing = Outgoing::post(&url, Duration::from_secs(upstream.timeout_s), forwarded)?;
    if let Some(key) = upstream_key(upstream.api_key_env.as_deref()) {
        outgoing.header(header::AUTHORIZATION, format!("Bearer {key}").as_bytes())?;
    }
    let call = ModelCall {
        plan,
        outgoing,
        stream,
        price,
        vocabulary: Vocabulary::OpenAi,
        settles_usage: true,
        cut_frame: None,
        hosted: hosted_plans(gov, &caller, hosted, &request_id),
        book: responses,
    };
    exchange(gov, &caller, call).await
}

/// One model call a route has built: what to admit, what to send, how to read its usage.
pub(crate) struct ModelCall {
    /// The admission plan (class, `model:<m>` target, reservation bound, adapter breaker).
    pub plan: Plan,
    /// The upstream request, headers and key included, ready to send.
    pub outgoing: Outgoing,
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
    /// The operations of the allowed hosted tools it carries (`hosted_plans`).
    pub hosted: Vec<Plan>,
    /// Write the response it creates in the Responses API book (`responses.rs`).
    pub book: bool,
}

/// Admit one model call and hand it to the detached exchange: the one path every model route
/// shares.
///
/// Admission (breakers, view, queueing, the reservation, the prepared operation) comes first;
/// then `Governor::model_exchange` (`exchange.rs`) dispatches it and runs the exchange on its
/// own: the outcome and the usage the response reported settle the reservation whether the
/// agent stays or not, an EMERGENCY covering the caller answers it at once (the route's
/// `cut_frame` on a stream that has started, else an OpenAI error event) while the exchange
/// goes on, and only an exchange whose outcome cannot be known is left in doubt.
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
        hosted,
        book,
    } = call;
    // The hosted tools' operations are prepared first, then the call's own: every one is
    // durable before anything is sent.
    let mut companions = Vec::with_capacity(hosted.len());
    for plan in hosted {
        companions.push(gov.admit(caller, plan).await?);
    }
    let admission = gov.admit(caller, plan).await?;
    let companions =
        (book || !companions.is_empty()).then(|| Companions::new(gov, caller, companions, book));
    let meter = RouteMeter {
        scanner: SseScanner::new(vocabulary),
        vocabulary,
        price,
        settles_usage,
    };
    let detached = DetachedCall {
        admission,
        request: outgoing,
        stream,
        meter: Box::new(meter),
        stream_refusal: Box::new(cut_frame.unwrap_or(openai_stream_refusal)),
        companions,
        keeper: None,
        cut_at_halt: false,
    };
    Ok(match gov.model_exchange(caller, detached).await? {
        Answer::Whole {
            status,
            content_type,
            body,
        } => (status, [(header::CONTENT_TYPE, content_type)], body).into_response(),
        Answer::Stream {
            status,
            content_type,
            body,
        } => (status, [(header::CONTENT_TYPE, content_type)], body).into_response(),
    })
}

/// Usage of a route's answers, whole or streamed, in its vocabulary, priced for spend.
struct RouteMeter {
    scanner: SseScanner,
    vocabulary: Vocabulary,
    price: Option<Price>,
    /// False for work that runs no model (`count_tokens`): it settles at nothing.
    settles_usage: bool,
}

impl Meter for RouteMeter {
    fn feed(&mut self, chunk: &[u8]) {
        self.scanner.feed(chunk);
    }
    fn whole(&self, body: &[u8]) -> Option<Budgets> {
        if !self.settles_usage {
            return Some(Budgets::new());
        }
        used(
            Usage::from_body_in(body, self.vocabulary),
            self.price.as_ref(),
        )
    }
    fn streamed(&self) -> Option<Budgets> {
        if !self.settles_usage {
            return Some(Budgets::new());
        }
        used(self.scanner.usage(), self.price.as_ref())
    }
    fn seen(&self) -> Option<ResponseSeen> {
        self.scanner.response()
    }
}

/// The event that ends an OpenAI-compatible stream cut at EMERGENCY: an error object, which
/// the SDKs raise with its code.
fn openai_stream_refusal(refusal: &Refusal) -> Bytes {
    let body = GatewayError::Refused(refusal.clone()).body_text();
    let mut event = Vec::with_capacity(body.len() + 8);
    event.extend_from_slice(b"data: ");
    event.extend_from_slice(&body);
    event.extend_from_slice(b"\n\n");
    Bytes::from(event)
}
