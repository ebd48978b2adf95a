//! The drill's callers: N agents and their delegated sub-agents, each an async task that calls a
//! tool, writes and calls the model through the gateway as fast as it can, until told to stop.
//!
//! Every call carries a unique request id (the JSON-RPC id of a tool call, `x-request-id` and
//! `metadata.stopline_request_id` of a model call), so the destination's record of what it
//! executed can be matched against the operation registry; every call also names it in
//! `x-request-id`, by which the in-process gateway's timeline marks it (`crate::breakdown`).
//! A caller with an A2A agent to reach also sends it messages (`SendMessage`, a JSON-RPC id
//! like a tool call's); one agent keeps a long streaming task open besides (`crate::long_task`).
//! A caller notes the moment it first
//! sees a refusal at or after the pull, and the longest successful call it made before the pull
//! (the drill's window must be longer than the longest task). A caller never retries and never
//! interprets a refusal: it counts it and goes on, as an agent that ignores stops would.

use crate::client::CallerClient;
use hyper::header::{HeaderName, HeaderValue};
use hyper::Uri;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
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
    /// The A2A agent on the gateway (`/a2a/<name>`), when A2A sends reach the drill's remote.
    pub a2a: Option<String>,
}

/// What every call goes to, parsed once for the whole drill (not on every call).
#[derive(Debug)]
pub struct Targets {
    /// `POST /mcp/<server>`.
    mcp: Result<Uri, String>,
    /// `POST /v1/chat/completions` and the model's name as JSON text, when model calls are made.
    model: Option<(Result<Uri, String>, String)>,
    /// `POST /a2a/<name>`, when A2A sends are made.
    pub(crate) a2a: Option<Result<Uri, String>>,
}

impl Targets {
    /// The URLs of `endpoints`.
    pub fn new(endpoints: &Endpoints) -> Targets {
        let uri = |text: String| text.parse::<Uri>().map_err(|e| format!("{text}: {e}"));
        Targets {
            mcp: uri(format!(
                "{}/mcp/{}",
                endpoints.gateway, endpoints.mcp_server
            )),
            model: endpoints.model.as_ref().map(|model| {
                (
                    uri(format!("{}/v1/chat/completions", endpoints.gateway)),
                    Value::from(model.as_str()).to_string(),
                )
            }),
            a2a: endpoints
                .a2a
                .as_ref()
                .map(|name| uri(format!("{}/a2a/{name}", endpoints.gateway))),
        }
    }
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
    /// Set when the long A2A task's agent has seen its task open (`crate::long_task`): the
    /// pull waits for it, so the stop always finds the task open.
    pub long_task_open: AtomicBool,
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
    /// That first refused call's request id, when it was sent and when its refusal came: the
    /// ends of its timeline, which the gateway's marks of the same request id fill in
    /// (`crate::breakdown`).
    pub first_refused: Option<FirstRefused>,
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

/// A caller's first refused call at or after the pull.
#[derive(Debug, Clone, Copy)]
pub struct FirstRefused {
    /// Its request id (also its `x-request-id`).
    pub request: u64,
    /// When the caller sent it.
    pub sent: Instant,
    /// When the caller had its refusal.
    pub refused: Instant,
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
    A2a,
}

/// Run one caller until `shared.stop`.
pub async fn run_caller(
    client: CallerClient,
    targets: Arc<Targets>,
    caller: Caller,
    offset: usize,
    shared: Arc<Shared>,
) -> CallerReport {
    let mut actions = vec![Action::Tool, Action::Write];
    if targets.model.is_some() {
        actions.push(Action::Model);
    }
    if targets.a2a.is_some() {
        actions.push(Action::A2a);
    }
    // A token is header-safe text (base64url and dots); one that is not fails every call.
    let authorization = HeaderValue::from_str(&format!("Bearer {}", caller.token))
        .map_err(|e| format!("the caller's token is not a header value: {e}"));
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
        let answer = match &authorization {
            Ok(authorization) => call(&client, &targets, authorization, action, id).await,
            Err(why) => Answer::Error(why.clone()),
        };
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
                    report.first_refused = Some(FirstRefused {
                        request: id,
                        sent,
                        refused: done,
                    });
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
    client: &CallerClient,
    targets: &Targets,
    authorization: &HeaderValue,
    action: Action,
    id: u64,
) -> Answer {
    // Every call names its request id in `x-request-id` too (a model call's is how the gateway
    // records it; the gateway's timeline marks every call by it, `crate::breakdown`).
    let mut extra = Vec::new();
    if let Ok(value) = HeaderValue::from_str(&id.to_string()) {
        extra.push((HeaderName::from_static("x-request-id"), value));
    }
    let (uri, body) = match (action, &targets.model, &targets.a2a) {
        (Action::A2a, _, Some(uri)) => (uri, a2a_send(id, false)),
        (Action::Model, Some((uri, model)), _) => {
            let body = format!(
                r#"{{"max_tokens":1,"messages":[{{"content":"drill","role":"user"}}],"metadata":{{"stopline_request_id":"{id}"}},"model":{model}}}"#
            );
            (uri, body)
        }
        _ => {
            let tool = if matches!(action, Action::Write) {
                "write"
            } else {
                "lookup"
            };
            let body = format!(
                r#"{{"id":{id},"jsonrpc":"2.0","method":"tools/call","params":{{"arguments":{{"key":{id}}},"name":"{tool}"}}}}"#
            );
            (&targets.mcp, body)
        }
    };
    let uri = match uri {
        Ok(uri) => uri,
        Err(why) => return Answer::Error(why.clone()),
    };
    match client
        .post(uri, authorization, &extra, body.into_bytes())
        .await
    {
        Ok(reply) => classify(reply.status, &reply.body),
        Err(why) => Answer::Error(why),
    }
}

/// An A2A 1.0 message send with JSON-RPC id `id` (`SendStreamingMessage` when `stream`).
pub(crate) fn a2a_send(id: u64, stream: bool) -> String {
    let method = if stream {
        "SendStreamingMessage"
    } else {
        "SendMessage"
    };
    format!(
        r#"{{"id":{id},"jsonrpc":"2.0","method":"{method}","params":{{"message":{{"messageId":"drill-{id}","parts":[{{"text":"drill"}}],"role":"ROLE_USER"}}}}}}"#
    )
}

/// The few fields of an answer a caller classifies it by (the rest is skipped, not built: the
/// error object is kept as the raw text it was sent as, and only its codes are read from it).
#[derive(Debug, Default, Deserialize)]
struct Shape<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

#[derive(Debug, Default, Deserialize)]
struct ErrorShape {
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    data: Option<DataShape>,
}

#[derive(Debug, Default, Deserialize)]
struct DataShape {
    #[serde(default)]
    code: Option<Value>,
}

/// `"error"` counts as present whatever it holds (`null` included), as a tree's lookup had it.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// A refusal is an HTTP 401/403/429/503 or a JSON-RPC error carrying a stopline code; an
/// upstream that could not be reached is an error, not a refusal. A body that is not JSON is
/// read as `null`.
pub fn classify(status: u16, body: &[u8]) -> Answer {
    let shape: Shape = serde_json::from_slice(body).unwrap_or_default();
    let error: Option<ErrorShape> = shape
        .error
        .map(|raw| serde_json::from_str(raw.get()).unwrap_or_default());
    let data_code = error
        .as_ref()
        .and_then(|e| e.data.as_ref())
        .and_then(|d| d.code.as_ref())
        .and_then(Value::as_str);
    let code = data_code
        .or(error
            .as_ref()
            .and_then(|e| e.code.as_ref())
            .and_then(Value::as_str))
        .map(String::from);
    match (status, code) {
        (200, _) if error.is_none() => Answer::Ok,
        (_, Some(code)) if code == "upstream_unavailable" => Answer::Error(code),
        (401 | 403 | 429 | 503, Some(code)) => Answer::Refused(code),
        (401 | 403 | 429 | 503, None) => Answer::Refused(format!("http_{status}")),
        (_, Some(code)) if data_code.is_some() => Answer::Refused(code),
        _ => Answer::Error(format!("HTTP {status}: {}", String::from_utf8_lossy(body))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answers a caller meets, classified as the tree lookup classified them.
    #[test]
    fn answers_are_classified_by_status_and_stopline_code() {
        let c = |status, body: &str| classify(status, body.as_bytes());
        assert_eq!(
            c(200, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Answer::Ok
        );
        assert_eq!(c(200, "not json"), Answer::Ok);
        let refused = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"m","data":{"code":"break_glass_contained","latch":{"id":"x"}}}}"#;
        assert_eq!(
            c(403, refused),
            Answer::Refused("break_glass_contained".into())
        );
        assert_eq!(
            c(200, refused),
            Answer::Refused("break_glass_contained".into()),
            "a refusal inside a 200 (a batch member, an SSE answer)"
        );
        let openai = r#"{"error":{"code":"stale_control_epoch","message":"m","type":"x"}}"#;
        assert_eq!(
            c(403, openai),
            Answer::Refused("stale_control_epoch".into())
        );
        assert_eq!(c(503, "{}"), Answer::Refused("http_503".into()));
        let unavailable =
            r#"{"error":{"code":-32002,"message":"m","data":{"code":"upstream_unavailable"}}}"#;
        assert_eq!(
            c(502, unavailable),
            Answer::Error("upstream_unavailable".into())
        );
        assert!(matches!(c(200, r#"{"error":null}"#), Answer::Error(_)));
        assert!(matches!(c(500, "{}"), Answer::Error(_)));
    }
}
