//! The A2A JSON-RPC binding as the gateway reads it (docs/reference.md §8 "A2A"): which method a
//! request calls and what the gateway must judge about it, the task an answer or a stream event
//! speaks of, the refusal as a JSON-RPC error, and the agent card with its URLs rewritten.
//!
//! Two versions share the endpoint, as `a2a-sdk` serves them: A2A 1.0 (`SendMessage`,
//! `SendStreamingMessage`, `GetTask`, `CancelTask`, `SubscribeToTask`, …) and 0.3's
//! (`message/send`, `message/stream`, `tasks/get`, `tasks/cancel`, `tasks/resubscribe`, …), which
//! a 0.3 client selects with `A2A-Version: 0.3`. A method is judged by its name alone (the
//! names never collide); a name of neither version is refused, never forwarded unjudged. Only what a decision needs is read (the method, a
//! task id, a task's state); the body goes upstream as the agent wrote it. Pure functions: no
//! I/O, nothing of admission.

use serde_json::{json, Value};
use stopline_core::Refusal;

/// The header that selects the protocol version.
pub const VERSION_HEADER: &str = "a2a-version";

/// The protocol version a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// A2A 1.0 (no header, or a `1.x` one).
    V1,
    /// A2A 0.3, through the `A2A-Version: 0.3` header.
    V03,
}

impl Version {
    /// The version an `A2A-Version` header value selects.
    pub fn from_header(value: Option<&str>) -> Version {
        match value.map(str::trim) {
            Some(v) if v == "0.3" || v.starts_with("0.3.") => Version::V03,
            _ => Version::V1,
        }
    }

    /// The version a journal's `task` record names (`header_value`'s form); 1.0 otherwise.
    pub fn from_label(label: Option<&str>) -> Version {
        Version::from_header(label)
    }

    /// The method that cancels a task in this version.
    pub fn cancel_method(self) -> &'static str {
        match self {
            Version::V1 => "CancelTask",
            Version::V03 => "tasks/cancel",
        }
    }

    /// The header value to send upstream with a request of this version (`None`: none).
    pub fn header_value(self) -> Option<&'static str> {
        match self {
            Version::V1 => Some("1.0"),
            Version::V03 => Some("0.3"),
        }
    }
}

/// What the gateway must do with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A message send: an operation on `a2a:<name>` (it counts `tool_calls`). `task` is the task
    /// it continues, if it names one (it must be the caller's).
    Send {
        /// `SendStreamingMessage` / `message/stream`.
        stream: bool,
        /// The task it continues.
        task: Option<String>,
    },
    /// A method on one task (get, cancel, subscribe, push configuration): the task must be the
    /// caller's. `stream` for a subscription; `cancel` for the cancel method.
    OnTask {
        /// The task it names.
        task: String,
        /// A subscription (a stream).
        stream: bool,
        /// The cancel method.
        cancel: bool,
    },
    /// Harmless for other chains (the extended card): admitted as noncritical work.
    Other,
    /// A method that would show other chains' tasks (`ListTasks`), or a task method without a
    /// task id: refused `task_not_owned`.
    NotOwnable,
    /// A method of neither version: refused (`bad_request`), never forwarded unjudged.
    Unknown,
}

/// One JSON-RPC request, as far as the gateway reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Its id (`null` when absent).
    pub id: Value,
    /// Its method.
    pub method: String,
    /// What it asks.
    pub kind: Kind,
    /// The version its method belongs to (the task it opens is cancelled in that version).
    pub version: Version,
}

/// Why a body is not a request the gateway forwards (answered as a JSON-RPC error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

/// Read one request; `header` is the version its `A2A-Version` header names (a batch is
/// refused: A2A has none, and the SDK refuses them).
pub fn parse_request(body: &[u8], header: Version) -> Result<Request, Malformed> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Malformed(format!("the body is not JSON: {e}")))?;
    let Value::Object(object) = &value else {
        return Err(Malformed("one JSON-RPC request object is expected".into()));
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(Malformed("\"jsonrpc\" must be \"2.0\"".into()));
    }
    let id = object.get("id").cloned().unwrap_or(Value::Null);
    if !matches!(id, Value::String(_) | Value::Number(_)) {
        return Err(Malformed(
            "a request needs a string or number id (A2A has no notifications)".into(),
        ));
    }
    let method = object
        .get("method")
        .and_then(Value::as_str)
        .ok_or_else(|| Malformed("\"method\" is missing".into()))?
        .to_string();
    let params = object.get("params").cloned().unwrap_or(Value::Null);
    let kind = classify(&method, &params);
    let version = version_of(&method, header);
    Ok(Request {
        id,
        method,
        kind,
        version,
    })
}

fn string_at(value: &Value, path: &[&str]) -> Option<String> {
    let mut at = value;
    for key in path {
        at = at.get(key)?;
    }
    at.as_str().filter(|s| !s.is_empty()).map(String::from)
}

/// The task a push-configuration method names (`taskId` in 1.0, `id` or `taskId` in 0.3).
fn push_task(params: &Value) -> Option<String> {
    string_at(params, &["taskId"])
        .or_else(|| string_at(params, &["id"]))
        .or_else(|| string_at(params, &["name"]).and_then(|n| task_from_name(&n)))
}

/// `tasks/<id>/…` (a resource name some 0.3 methods carry) → `<id>`.
fn task_from_name(name: &str) -> Option<String> {
    let rest = name.strip_prefix("tasks/")?;
    let id = rest.split('/').next()?;
    (!id.is_empty()).then(|| id.to_string())
}

fn on_task(task: Option<String>, stream: bool, cancel: bool) -> Kind {
    match task {
        Some(task) => Kind::OnTask {
            task,
            stream,
            cancel,
        },
        None => Kind::NotOwnable,
    }
}

/// What `method` asks, by its name alone. The two versions' names never collide (1.0's are
/// `PascalCase`, 0.3's `noun/verb`), and `a2a-sdk`'s server routes a 0.3 name whether or not the
/// request carries `A2A-Version: 0.3`: judging by the header would let `tasks/get` without it
/// pass as a method that names no task.
fn classify(method: &str, params: &Value) -> Kind {
    let send = |stream| Kind::Send {
        stream,
        task: string_at(params, &["message", "taskId"]),
    };
    let id = || string_at(params, &["id"]);
    match method {
        "SendMessage" | "message/send" => send(false),
        "SendStreamingMessage" | "message/stream" => send(true),
        "GetTask" | "tasks/get" => on_task(id(), false, false),
        "CancelTask" | "tasks/cancel" => on_task(id(), false, true),
        "SubscribeToTask" | "tasks/resubscribe" => on_task(id(), true, false),
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig"
        | "tasks/pushNotificationConfig/set"
        | "tasks/pushNotificationConfig/get"
        | "tasks/pushNotificationConfig/list"
        | "tasks/pushNotificationConfig/delete" => on_task(push_task(params), false, false),
        "ListTasks" => Kind::NotOwnable,
        "GetExtendedAgentCard" | "agent/getAuthenticatedExtendedCard" => Kind::Other,
        _ => Kind::Unknown,
    }
}

/// The version a method name belongs to (the header decides only for a name of neither).
fn version_of(method: &str, header: Version) -> Version {
    if method.contains('/') {
        Version::V03
    } else if method
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_uppercase())
    {
        Version::V1
    } else {
        header
    }
}

/// A task's state as an answer or an event gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSeen {
    /// The task id.
    pub id: String,
    /// Its state in 0.3 words (`working`, `completed`, `canceled`, …), when said.
    pub state: Option<String>,
}

impl TaskSeen {
    /// True once the task can do nothing more.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self.state.as_deref(),
            Some("completed" | "failed" | "canceled" | "cancelled" | "rejected")
        )
    }

    /// True when the task ended cancelled.
    pub fn is_canceled(&self) -> bool {
        matches!(self.state.as_deref(), Some("canceled" | "cancelled"))
    }
}

/// `TASK_STATE_INPUT_REQUIRED` (1.0) and `input-required` (0.3) → `input-required`.
fn state_word(state: &str) -> String {
    state
        .strip_prefix("TASK_STATE_")
        .map(|s| s.to_ascii_lowercase().replace('_', "-"))
        .unwrap_or_else(|| state.to_string())
}

/// The task a JSON-RPC response object's `result` speaks of: a task (1.0 `{"task":…}` or a bare
/// task, 0.3 `kind: "task"`), a status or artifact update (1.0 `statusUpdate` /
/// `artifactUpdate`, 0.3 `status-update` / `artifact-update`), or a message in a task.
pub fn task_in_response(response: &Value) -> Option<TaskSeen> {
    let result = response.get("result")?;
    let inner = ["task", "statusUpdate", "artifactUpdate", "message"]
        .iter()
        .find_map(|k| result.get(*k))
        .unwrap_or(result);
    let is_task = inner.get("status").is_some() && inner.get("taskId").is_none()
        || inner.get("kind").and_then(Value::as_str) == Some("task");
    let id = if is_task {
        string_at(inner, &["id"])
    } else {
        string_at(inner, &["taskId"])
    }?;
    let state = string_at(inner, &["status", "state"]).map(|s| state_word(&s));
    Some(TaskSeen { id, state })
}

/// The JSON-RPC code of a refused request: JSON-RPC's generic server error. Not the MCP
/// proxy's -32001, which A2A reserves for `TaskNotFoundError` (an A2A SDK would report a stop
/// as a missing task).
pub const REFUSED_CODE: i64 = -32000;

/// `refusal` as the JSON-RPC error answering `id`:
/// `{"code":-32000,"message":"<code>: <message>","data":{refusal}}`. The code leads the message
/// because A2A SDKs pass on the message of an error they do not know, and drop its `data`.
pub fn refusal_response(id: &Value, refusal: &Refusal) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": REFUSED_CODE,
            "message": format!("{}: {}", refusal.code, refusal.message),
            "data": refusal,
        },
    })
}

/// A body that is not a request, as the JSON-RPC error `-32600 Invalid Request`.
pub fn malformed_response(why: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32600, "message": format!("Invalid Request: {why}")},
    })
}

/// An SSE event carrying `response`.
pub fn sse_event(response: &Value) -> Vec<u8> {
    format!("data: {response}\n\n").into_bytes()
}

/// The SSE `data:` payloads complete in `buffer` (each parsed as JSON), the rest kept for the
/// next chunk. Lines that are not `data:` (comments, `event:`, `id:`) are skipped.
pub fn take_events(buffer: &mut Vec<u8>) -> Vec<Value> {
    let mut events = Vec::new();
    while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
        let line: Vec<u8> = buffer.drain(..=end).collect();
        let line = String::from_utf8_lossy(&line);
        let line = line.trim_end_matches(['\r', '\n']);
        if let Some(data) = line.strip_prefix("data:") {
            if let Ok(value) = serde_json::from_str::<Value>(data.trim_start()) {
                events.push(value);
            }
        }
    }
    events
}

/// The agent card `card` with every URL an A2A client would call rewritten to `gateway_url`
/// (the gateway's `/a2a/<name>`): the JSON-RPC interfaces kept and pointed at the gateway, the
/// others dropped (the gateway serves only the JSON-RPC binding); 0.3's `url` and
/// `additionalInterfaces` likewise. The card's own security schemes and signatures are dropped:
/// the agent authenticates to the gateway with its stopline token, and a signature over the
/// upstream's URLs no longer holds.
pub fn rewrite_card(card: &mut Value, gateway_url: &str) {
    let Some(object) = card.as_object_mut() else {
        return;
    };
    let jsonrpc = |i: &Value, key: &str| {
        i.get(key)
            .and_then(Value::as_str)
            .is_some_and(|b| b.eq_ignore_ascii_case("JSONRPC"))
    };
    if let Some(Value::Array(interfaces)) = object.get_mut("supportedInterfaces") {
        interfaces.retain(|i| jsonrpc(i, "protocolBinding"));
        for interface in interfaces.iter_mut() {
            interface["url"] = Value::String(gateway_url.to_string());
        }
    }
    if object.contains_key("url") {
        object.insert("url".into(), Value::String(gateway_url.to_string()));
        object.insert("preferredTransport".into(), Value::String("JSONRPC".into()));
    }
    if let Some(Value::Array(interfaces)) = object.get_mut("additionalInterfaces") {
        interfaces.retain(|i| jsonrpc(i, "transport"));
        for interface in interfaces.iter_mut() {
            interface["url"] = Value::String(gateway_url.to_string());
        }
    }
    for key in [
        "securitySchemes",
        "securityRequirements",
        "security",
        "signatures",
    ] {
        object.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(body: Value, version: Version) -> Kind {
        parse_request(body.to_string().as_bytes(), version)
            .unwrap()
            .kind
    }

    #[test]
    fn methods_of_both_versions_are_read_for_what_the_gateway_judges() {
        let send = json!({"jsonrpc":"2.0","id":1,"method":"SendMessage",
            "params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}]}}});
        assert_eq!(
            kind(send, Version::V1),
            Kind::Send {
                stream: false,
                task: None
            }
        );
        let stream = json!({"jsonrpc":"2.0","id":"a","method":"message/stream",
            "params":{"message":{"messageId":"m","taskId":"t1","parts":[]}}});
        assert_eq!(
            kind(stream.clone(), Version::V03),
            Kind::Send {
                stream: true,
                task: Some("t1".into())
            }
        );
        assert_eq!(
            kind(stream.clone(), Version::V1),
            Kind::Send {
                stream: true,
                task: Some("t1".into())
            },
            "a 0.3 name without the header is judged the same (the SDK's server serves it)"
        );
        let parsed = parse_request(stream.to_string().as_bytes(), Version::V1).unwrap();
        assert_eq!(parsed.version, Version::V03);
        let unknown = json!({"jsonrpc":"2.0","id":2,"method":"tasks/list","params":{}});
        assert_eq!(kind(unknown, Version::V03), Kind::Unknown);
        let card = json!({"jsonrpc":"2.0","id":2,"method":"GetExtendedAgentCard"});
        assert_eq!(kind(card, Version::V1), Kind::Other);
        for (method, version, stream, cancel) in [
            ("GetTask", Version::V1, false, false),
            ("CancelTask", Version::V1, false, true),
            ("SubscribeToTask", Version::V1, true, false),
            ("tasks/get", Version::V03, false, false),
            ("tasks/cancel", Version::V03, false, true),
            ("tasks/resubscribe", Version::V03, true, false),
        ] {
            let body = json!({"jsonrpc":"2.0","id":2,"method":method,"params":{"id":"t9"}});
            assert_eq!(
                kind(body, version),
                Kind::OnTask {
                    task: "t9".into(),
                    stream,
                    cancel
                },
                "{method}"
            );
        }
        let push = json!({"jsonrpc":"2.0","id":2,"method":"GetTaskPushNotificationConfig",
            "params":{"taskId":"t3","id":"cfg"}});
        assert!(matches!(kind(push, Version::V1), Kind::OnTask { task, .. } if task == "t3"));
        let list = json!({"jsonrpc":"2.0","id":2,"method":"ListTasks","params":{}});
        assert_eq!(kind(list, Version::V1), Kind::NotOwnable);
        let no_id = json!({"jsonrpc":"2.0","id":2,"method":"GetTask","params":{}});
        assert_eq!(kind(no_id, Version::V1), Kind::NotOwnable);
        for bad in [
            json!([{"jsonrpc":"2.0","id":1,"method":"SendMessage"}]),
            json!({"jsonrpc":"2.0","method":"SendMessage"}),
            json!({"jsonrpc":"1.0","id":1,"method":"SendMessage"}),
        ] {
            assert!(parse_request(bad.to_string().as_bytes(), Version::V1).is_err());
        }
    }

    #[test]
    fn the_task_of_answers_and_events_of_both_versions() {
        let seen = |v: Value| task_in_response(&json!({"jsonrpc":"2.0","id":1,"result":v}));
        let working = |id: &str| TaskSeen {
            id: id.into(),
            state: Some("working".into()),
        };
        assert_eq!(
            seen(json!({"task":{"id":"t","status":{"state":"TASK_STATE_WORKING"}}})),
            Some(working("t"))
        );
        assert_eq!(
            seen(json!({"id":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING"}})),
            Some(working("t"))
        );
        assert_eq!(
            seen(json!({"statusUpdate":{"taskId":"t","status":{"state":"TASK_STATE_CANCELED"}}}))
                .map(|s| s.is_canceled()),
            Some(true)
        );
        assert_eq!(
            seen(json!({"artifactUpdate":{"taskId":"t","artifact":{}}})).map(|s| s.id),
            Some("t".into())
        );
        assert_eq!(
            seen(json!({"kind":"task","id":"t","status":{"state":"working"}})),
            Some(working("t"))
        );
        assert!(
            seen(json!({"kind":"status-update","taskId":"t","status":{"state":"completed"}}))
                .unwrap()
                .is_terminal()
        );
        assert_eq!(
            seen(json!({"message":{"messageId":"m","parts":[]}})),
            None,
            "a message outside a task opens nothing"
        );
        assert_eq!(
            task_in_response(&json!({"jsonrpc":"2.0","id":1,"error":{"code":-1}})),
            None
        );
    }

    #[test]
    fn sse_events_are_taken_whole_across_chunks() {
        let mut buffer = b"data: {\"a\":1}\n\n: ping\ndata: {\"b\"".to_vec();
        assert_eq!(take_events(&mut buffer), vec![json!({"a":1})]);
        buffer.extend_from_slice(b":2}\r\n\r\n");
        assert_eq!(take_events(&mut buffer), vec![json!({"b":2})]);
        assert!(buffer.is_empty());
    }

    #[test]
    fn the_card_points_only_at_the_gateway() {
        let mut card = json!({
            "name": "remote",
            "supportedInterfaces": [
                {"url": "http://remote:9/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                {"url": "http://remote:9/grpc", "protocolBinding": "GRPC"}
            ],
            "url": "http://remote:9/rpc",
            "additionalInterfaces": [{"url": "http://remote:9/rest", "transport": "HTTP+JSON"}],
            "securitySchemes": {"k": {}},
            "signatures": [{}]
        });
        rewrite_card(&mut card, "http://gw/a2a/remote");
        assert_eq!(
            card["supportedInterfaces"],
            json!([{"url": "http://gw/a2a/remote", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}])
        );
        assert_eq!(card["url"], "http://gw/a2a/remote");
        assert_eq!(card["additionalInterfaces"], json!([]));
        assert!(card.get("securitySchemes").is_none() && card.get("signatures").is_none());
        assert!(!card.to_string().contains("remote:9"));
    }
}
