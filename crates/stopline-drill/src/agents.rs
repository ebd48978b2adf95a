//! The drill's callers: N agents and their delegated sub-agents, each an async task that calls a
//! tool, writes and calls the model through the gateway as fast as it can, until told to stop.
//!
//! Every call carries a unique request id (the JSON-RPC id of a tool call, `x-request-id` and
//! `metadata.stopline_request_id` of a model call), so the destination's record of what it
//! executed can be matched against the operation registry. A caller notes the moment it first
//! sees a refusal at or after the pull, and the longest successful call it made before the pull
//! (the drill's window must be longer than the longest task). A caller never retries and never
//! interprets a refusal: it counts it and goes on, as an agent that ignores stops would.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// One caller: an agent or a sub-agent acting under a delegated token.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Its agent name.
    pub name: String,
    /// Its bearer token.
    pub token: String,
    /// True for a sub-agent.
    pub delegated: bool,
}

/// Where calls go.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// The gateway's base URL (`http://127.0.0.1:port`).
    pub gateway: String,
    /// The MCP server name on the gateway (`/mcp/<server>`).
    pub mcp_server: String,
    /// The model to call, when model calls reach the drill's destination.
    pub model: Option<String>,
}

/// State shared by the callers and the puller.
#[derive(Debug, Default)]
pub struct Shared {
    /// The instant of the pull, set by the puller just before it engages.
    pub pulled: OnceLock<Instant>,
    /// Set when the window is over: callers finish their current call and end.
    pub stop: AtomicBool,
    /// The next request id.
    pub next_id: AtomicU64,
    /// Longest successful call before the pull, microseconds.
    pub longest_task_us: AtomicU64,
    /// Calls answered so far (for the progress bar).
    pub answered: AtomicU64,
}

/// What one caller saw.
#[derive(Debug, Clone, Default)]
pub struct CallerReport {
    /// The caller's name.
    pub name: String,
    /// True for a sub-agent.
    pub delegated: bool,
    /// From the pull to the first refusal it received, if any.
    pub first_rejection: Option<Duration>,
    /// How long that first refused call took, from sending it to its refusal.
    pub first_refused_call: Option<Duration>,
    /// From the pull to sending that first refused call (zero if it was sent before the pull):
    /// the wait for the call the caller had in flight when the stop landed.
    pub first_refused_sent: Option<Duration>,
    /// Calls that succeeded before the pull.
    pub ok_before_pull: u64,
    /// Calls that succeeded with an answer at or after the pull.
    pub ok_after_pull: u64,
    /// Refusals received before the pull (unexpected: nothing was stopped yet).
    pub refused_before_pull: u64,
    /// Refusals at or after the pull, by code.
    pub refusals: BTreeMap<String, u64>,
    /// Transport or upstream errors.
    pub errors: u64,
}

/// The answer to one call.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The call went through.
    Ok,
    /// The gateway refused it, with this code.
    Refused(String),
    /// Anything else (transport failure, upstream error).
    Error(String),
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Tool,
    Write,
    Model,
}

/// Run one caller until `shared.stop`.
pub async fn run_caller(
    client: reqwest::Client,
    endpoints: Arc<Endpoints>,
    caller: Caller,
    offset: usize,
    shared: Arc<Shared>,
) -> CallerReport {
    let mut actions = vec![Action::Tool, Action::Write];
    if endpoints.model.is_some() {
        actions.push(Action::Model);
    }
    let mut report = CallerReport {
        name: caller.name.clone(),
        delegated: caller.delegated,
        ..CallerReport::default()
    };
    let mut turn = offset;
    while !shared.stop.load(Ordering::Relaxed) {
        let action = actions[turn % actions.len()];
        turn += 1;
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let sent = Instant::now();
        let answer = call(&client, &endpoints, &caller.token, action, id).await;
        let done = Instant::now();
        shared.answered.fetch_add(1, Ordering::Relaxed);
        let after_pull = shared.pulled.get().is_some_and(|p| done >= *p);
        match answer {
            Answer::Ok if after_pull => report.ok_after_pull += 1,
            Answer::Ok => {
                report.ok_before_pull += 1;
                let took = (done - sent).as_micros() as u64;
                shared.longest_task_us.fetch_max(took, Ordering::Relaxed);
            }
            Answer::Refused(code) if after_pull => {
                if report.first_rejection.is_none() {
                    let pulled = *shared.pulled.get().expect("after_pull implies a pull");
                    report.first_rejection = Some(done - pulled);
                    report.first_refused_call = Some(done - sent);
                    report.first_refused_sent = Some(sent.saturating_duration_since(pulled));
                }
                *report.refusals.entry(code).or_default() += 1;
            }
            Answer::Refused(code) => {
                tracing::warn!(caller = %caller.name, code, "refused before the pull");
                report.refused_before_pull += 1;
            }
            Answer::Error(why) => {
                tracing::debug!(caller = %caller.name, why, "call failed");
                report.errors += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    report
}

/// Make one call and classify the answer.
async fn call(
    client: &reqwest::Client,
    endpoints: &Endpoints,
    token: &str,
    action: Action,
    id: u64,
) -> Answer {
    let (url, body, header_id) = match (action, &endpoints.model) {
        (Action::Model, Some(model)) => (
            format!("{}/v1/chat/completions", endpoints.gateway),
            json!({"model": model, "max_tokens": 1,
                   "messages": [{"role": "user", "content": "drill"}],
                   "metadata": {"stopline_request_id": id.to_string()}}),
            Some(id.to_string()),
        ),
        _ => {
            let tool = if matches!(action, Action::Write) {
                "write"
            } else {
                "lookup"
            };
            (
                format!("{}/mcp/{}", endpoints.gateway, endpoints.mcp_server),
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                       "params": {"name": tool, "arguments": {"key": id}}}),
                None,
            )
        }
    };
    let mut request = client
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(header_id) = header_id {
        request = request.header("x-request-id", header_id);
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(error) => return Answer::Error(error.to_string()),
    };
    let status = response.status().as_u16();
    let body: Value = match response.bytes().await {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_default(),
        Err(error) => return Answer::Error(error.to_string()),
    };
    classify(status, &body)
}

/// A refusal is an HTTP 401/403/429/503 or a JSON-RPC error carrying a stopline code; an
/// upstream that could not be reached is an error, not a refusal.
pub fn classify(status: u16, body: &Value) -> Answer {
    let code = body["error"]["data"]["code"]
        .as_str()
        .or(body["error"]["code"].as_str())
        .map(String::from);
    match (status, code) {
        (200, _) if body.get("error").is_none() => Answer::Ok,
        (_, Some(code)) if code == "upstream_unavailable" => Answer::Error(code),
        (401 | 403 | 429 | 503, Some(code)) => Answer::Refused(code),
        (401 | 403 | 429 | 503, None) => Answer::Refused(format!("http_{status}")),
        (_, Some(code)) if body["error"]["data"]["code"].is_string() => Answer::Refused(code),
        _ => Answer::Error(format!("HTTP {status}: {body}")),
    }
}
