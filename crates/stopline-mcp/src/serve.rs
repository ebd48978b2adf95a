//! `stopline mcp serve`: an MCP server on stdio whose tools are exactly `engage` and `status`.
//!
//! It lets an agent (or its operator's assistant) pull the stop from inside an MCP session. It
//! offers no recovery tool, and it marks its own environment as an agent session
//! (`STOPLINE_SESSION`), so anything started from it fails the owner console's first predicate:
//! a recovery attempted from inside its session is refused. With `STOPLINE_URL` set it talks to
//! that gateway with the session's token (a confined agent cannot write the control directory);
//! otherwise it uses the local control directory through `stopline-control`'s verbs.

use crate::jsonrpc::{parse, Incoming, Message};
use serde_json::{json, Value};
use std::io::{BufRead, Write};
use stopline_control::receipts::Receipt;
use stopline_control::{engage, status, Context};
use stopline_core::{Refusal, RefusalCode};

/// Protocol versions this server speaks, newest first.
pub const PROTOCOL_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// JSON-RPC "Method not found".
const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC "Invalid params".
const INVALID_PARAMS: i64 = -32602;

/// Where the verbs go.
pub enum Backend {
    /// The local control directory.
    Local(Box<Context>),
    /// A gateway: its base URL and the session's token.
    Gateway {
        /// e.g. `http://127.0.0.1:7077`.
        url: String,
        /// The session's token (`STOPLINE_TOKEN`).
        token: Option<String>,
    },
}

/// The two tools, with their schemas and annotations.
pub fn tools() -> Value {
    json!([
        {
            "name": "engage",
            "title": "Engage a stop",
            "description": "Stop an agent, a project, a run or the whole machine, durably. Only the owner, at a local console, can recover.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "scope": {"type": "string", "description": "machine | agent:<name> | project:<root> | run:<id> | label:<key>=<value>"},
                    "level": {"type": "string", "enum": ["halt-noncritical", "halt-all", "emergency"], "description": "default emergency"},
                    "reason": {"type": "string", "description": "why (required)"}
                },
                "required": ["scope", "reason"]
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true, "openWorldHint": false}
        },
        {
            "name": "status",
            "title": "Stop status",
            "description": "The derived phase, active latches, epochs, workers and unresolved operations.",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        }
    ])
}

impl Backend {
    fn engage(&self, scope: &str, level: Option<&str>, reason: &str) -> Result<Value, Refusal> {
        match self {
            Backend::Local(ctx) => {
                let token = std::env::var("STOPLINE_TOKEN")
                    .ok()
                    .filter(|t| !t.trim().is_empty());
                let claims = token.map(|t| engage::verify_token(ctx, &t)).transpose()?;
                let by = match &claims {
                    Some(_) => None,
                    None => Some(format!(
                        "mcp-serve:{}",
                        std::env::var("USER").unwrap_or_else(|_| "unknown".into())
                    )),
                };
                engage::engage(
                    ctx,
                    &engage::Caller {
                        token: claims,
                        by,
                        local: true,
                    },
                    scope,
                    level,
                    reason,
                )
                .map(|receipt| receipt.to_json())
            }
            Backend::Gateway { url, token } => gateway_call(
                url,
                token.as_deref(),
                "/v1/engage",
                Some(json!({"scope": scope, "level": level, "reason": reason})),
            ),
        }
    }

    fn status(&self) -> Result<Value, Refusal> {
        match self {
            Backend::Local(ctx) => Ok(status::status(ctx).to_json()),
            Backend::Gateway { url, token } => {
                gateway_call(url, token.as_deref(), "/v1/status", None)
            }
        }
    }
}

/// One call to the gateway's API on a small runtime of its own (this server is synchronous).
fn gateway_call(
    url: &str,
    token: Option<&str>,
    path: &str,
    body: Option<Value>,
) -> Result<Value, Refusal> {
    let unreachable =
        |e: String| Refusal::new(RefusalCode::GatewayUnreachable, format!("{url}: {e}"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| unreachable(e.to_string()))?;
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| unreachable(e.to_string()))?;
        let target = format!("{}{path}", url.trim_end_matches('/'));
        let mut request = match &body {
            Some(body) => client.post(target).json(body),
            None => client.get(target),
        };
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let status = response.status();
        let value: Value = response
            .json()
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        if status.is_success() {
            return Ok(value);
        }
        Err(refused(status, value))
    })
}

/// The gateway's refusal (`{"error":{"code","message",…}}`, docs/reference.md §4) as typed; an
/// answer that is not one is `control_io`, never a success.
fn refused(status: reqwest::StatusCode, value: Value) -> Refusal {
    #[derive(serde::Deserialize)]
    struct Refused {
        error: Refusal,
    }
    match serde_json::from_value::<Refused>(value) {
        Ok(refused) => refused.error,
        Err(error) => Refusal::new(
            RefusalCode::ControlIo,
            format!("the gateway answered {status} with no refusal: {error}"),
        ),
    }
}

fn tool_result(result: Result<Value, Refusal>) -> Value {
    match result {
        Ok(receipt) => json!({
            "content": [{"type": "text", "text": serde_json::to_string_pretty(&receipt).unwrap_or_default()}],
            "structuredContent": receipt,
            "isError": false
        }),
        Err(refusal) => json!({
            "content": [{"type": "text", "text": format!("error: {}: {}", refusal.code, refusal.message)}],
            "structuredContent": {"error": {"code": refusal.code.as_str(), "message": refusal.message}},
            "isError": true
        }),
    }
}

/// Answer one request.
pub fn answer(backend: &Backend, method: &str, params: &Value) -> Result<Value, (i64, String)> {
    match method {
        "initialize" => {
            let asked = params["protocolVersion"].as_str().unwrap_or_default();
            let version = PROTOCOL_VERSIONS
                .iter()
                .find(|v| **v == asked)
                .unwrap_or(&PROTOCOL_VERSIONS[0]);
            Ok(json!({
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": false}},
                "serverInfo": {"name": "stopline", "version": env!("CARGO_PKG_VERSION")},
                "instructions": "Tools: engage (pull a stop) and status. There is no recovery tool: only the owner, at a local console, can recover."
            }))
        }
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": tools()})),
        "tools/call" => {
            let arguments = &params["arguments"];
            let text = |key: &str| arguments[key].as_str();
            match params["name"].as_str() {
                Some("engage") => Ok(tool_result(backend.engage(
                    text("scope").unwrap_or_default(),
                    text("level"),
                    text("reason").unwrap_or_default(),
                ))),
                Some("status") => Ok(tool_result(backend.status())),
                Some(other) => Err((
                    INVALID_PARAMS,
                    format!("unknown tool {other:?}: this server offers engage and status only"),
                )),
                None => Err((INVALID_PARAMS, "tools/call needs params.name".into())),
            }
        }
        other => Err((METHOD_NOT_FOUND, format!("method {other:?} is not offered"))),
    }
}

/// Serve on stdin/stdout until stdin closes.
pub fn run(backend: Backend) -> std::io::Result<i32> {
    if std::env::var_os("STOPLINE_SESSION").is_none() {
        // Anything started from this session is an agent session (owner console predicate 1).
        // Set before any thread exists: this function is the process's only work.
        std::env::set_var(
            "STOPLINE_SESSION",
            format!("mcp-serve-{}", std::process::id()),
        );
    }
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    for line in stdin.lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let parsed = parse(line.as_bytes());
        let batch = matches!(parsed, Ok(Incoming::Batch(_)));
        let replies: Vec<Message> = match parsed {
            Err(error) => vec![error.to_response()],
            Ok(frame) => frame
                .messages()
                .iter()
                .filter_map(|message| match message {
                    Message::Request { id, method, params } => Some(
                        match answer(
                            &backend,
                            method,
                            &params.as_ref().map_or(Value::Null, |p| p.to_value()),
                        ) {
                            Ok(result) => Message::result(id.clone(), &result),
                            Err((code, text)) => Message::error(id.clone(), code, &text, None),
                        },
                    ),
                    _ => None,
                })
                .collect(),
        };
        if let Some(frame) = Incoming::from_messages(replies, batch) {
            let mut bytes = frame.to_bytes();
            bytes.push(b'\n');
            stdout.write_all(&bytes)?;
            stdout.flush()?;
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateway_refusal_reads_with_its_code_and_message() {
        let body = json!({"error": {"code": "disengage_not_permitted", "message": "no"}});
        let refusal = refused(reqwest::StatusCode::FORBIDDEN, body);
        assert_eq!(refusal.code, RefusalCode::DisengageNotPermitted);
        assert_eq!(refusal.message, "no");
    }

    #[test]
    fn an_answer_that_is_no_refusal_is_control_io() {
        let body = json!({"error": {"kode": "disengage_not_permitted"}});
        let refusal = refused(reqwest::StatusCode::BAD_GATEWAY, body);
        assert_eq!(refusal.code, RefusalCode::ControlIo);
        assert!(refusal.message.contains("code"), "{}", refusal.message);
    }
}
