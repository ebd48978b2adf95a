//! Provider-side tools (docs/reference.md §6 "Provider-side tools are effects"): what in a model request
//! asks the provider to act on the agent's behalf, and whether the owner allows it.
//!
//! A provider that runs a tool (searches the web, fetches a page, calls an MCP server the agent
//! names, runs code, keeps working in the background) acts from its own network, with the
//! gateway's key, outside the network boundary, `allowed_tools` and the operation records. So
//! the model routes refuse every such ask by default (`hosted_tool_refused`, naming the field):
//!
//! - Responses API: a tool whose `type` is not `function` or `custom` (a `namespace` is a group:
//!   its tools are judged); `background: true`.
//! - Chat Completions: `web_search_options`; a tool whose `type` is not `function` or `custom`.
//! - Messages API: `mcp_servers`; a typed tool that is not one the client runs (`custom`,
//!   `bash_*`, `text_editor_*`, `computer_*`, `memory_*`): `web_search_*`, `web_fetch_*`,
//!   `code_execution_*`, `mcp_toolset`, `tool_search_tool_*`, and any type not known here; an
//!   `anthropic-beta` value that enables one (`mcp-client-*`, `code-execution-*`, `web-fetch-*`,
//!   `web-search-*`, `skills-*`).
//!
//! `[model]` / `[anthropic] allow_hosted_tools` names the allowed ones. A name allows the tool
//! type equal to it or starting with it and `_` (`web_search` allows `web_search_preview` and
//! `web_search_20250305`); `mcp` allows `mcp` tools, `mcp_servers` and `mcp_toolset`;
//! `background` allows `background: true`. Each allowed tool a request carries is then an
//! operation of its own, `hosted:<provider>:<name>` (see `model.rs`).

use axum::http::HeaderMap;
use serde_json::Value;
use stopline_core::{Refusal, RefusalCode};

/// The provider a hosted tool runs at, as its target names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Provider {
    /// The `[model]` upstream (OpenAI-compatible).
    OpenAi,
    /// The `[anthropic]` upstream.
    Anthropic,
}

impl Provider {
    fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
        }
    }

    fn section(self) -> &'static str {
        match self {
            Provider::OpenAi => "[model]",
            Provider::Anthropic => "[anthropic]",
        }
    }
}

/// One thing in a request that asks the provider to act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ask {
    /// The field that asks, and what it says (`tools[1].type = "mcp"`).
    pub field: String,
    /// The tool type as written (`web_search_preview`, `mcp`, `background`).
    pub kind: String,
    /// True when the provider acts because of it (a tool, `mcp_servers`, `background`); false
    /// for what only enables acting (a beta header), which is checked but is no operation.
    pub acts: bool,
}

fn ask(field: String, kind: &str, acts: bool) -> Ask {
    Ask {
        field,
        kind: kind.to_string(),
        acts,
    }
}

/// What an OpenAI-compatible request asks the provider to do (`responses`: the Responses API,
/// else Chat Completions and the rest).
pub(crate) fn openai_asks(request: &Value, responses: bool) -> Vec<Ask> {
    let mut asks = Vec::new();
    if let Some(tools) = request.get("tools").and_then(Value::as_array) {
        tool_asks(tools, "tools", 0, &mut asks);
    }
    if responses {
        if request
            .get("background")
            .is_some_and(|b| b != &Value::Bool(false) && !b.is_null())
        {
            asks.push(ask("background = true".into(), "background", true));
        }
    } else if request
        .get("web_search_options")
        .is_some_and(|o| !o.is_null())
    {
        asks.push(ask("web_search_options".into(), "web_search", true));
    }
    asks
}

/// How deep `namespace` tools may nest before the deeper ones are asks themselves.
const MAX_NAMESPACE_DEPTH: usize = 4;

/// The asks among `tools` (at `path`): every tool whose `type` is not `function` or `custom`,
/// except a `namespace` (a named group of tools, as the Codex CLI sends), whose own tools are
/// judged the same way.
fn tool_asks(tools: &[Value], path: &str, depth: usize, asks: &mut Vec<Ask>) {
    for (i, tool) in tools.iter().enumerate() {
        match tool.get("type") {
            Some(Value::String(kind)) if kind == "function" || kind == "custom" => {}
            Some(Value::String(kind)) if kind == "namespace" && depth < MAX_NAMESPACE_DEPTH => {
                match tool.get("tools") {
                    Some(Value::Array(inner)) => {
                        tool_asks(inner, &format!("{path}[{i}].tools"), depth + 1, asks)
                    }
                    None | Some(Value::Null) => {}
                    Some(_) => asks.push(ask(
                        format!("{path}[{i}].tools is not a list"),
                        "namespace",
                        true,
                    )),
                }
            }
            Some(Value::String(kind)) => {
                asks.push(ask(format!("{path}[{i}].type = {kind:?}"), kind, true))
            }
            other => asks.push(ask(
                format!("{path}[{i}].type = {}", other.unwrap_or(&Value::Null)),
                "untyped",
                true,
            )),
        }
    }
}

/// Tool types of the Messages API that the client runs (the agent executes them and sends the
/// result back): not provider-side.
const ANTHROPIC_CLIENT_TOOLS: [&str; 4] = ["bash_", "text_editor_", "computer_", "memory_"];

/// `anthropic-beta` values that enable a server tool, and the tool each enables.
const ANTHROPIC_BETAS: [(&str, &str); 5] = [
    ("mcp-client-", "mcp"),
    ("code-execution-", "code_execution"),
    ("web-fetch-", "web_fetch"),
    ("web-search-", "web_search"),
    ("skills-", "code_execution"),
];

/// What a Messages API request (its body and its `anthropic-beta` headers) asks Anthropic to do.
pub(crate) fn anthropic_asks(request: &Value, headers: &HeaderMap) -> Vec<Ask> {
    let mut asks = Vec::new();
    if let Some(servers) = request.get("mcp_servers").filter(|s| !s.is_null()) {
        let named = servers.as_array().map_or(0, Vec::len);
        asks.push(ask(format!("mcp_servers ({named} servers)"), "mcp", true));
    }
    if let Some(tools) = request.get("tools").and_then(Value::as_array) {
        for (i, tool) in tools.iter().enumerate() {
            let kind = match tool.get("type") {
                None | Some(Value::Null) => continue,
                Some(Value::String(kind)) => kind.as_str(),
                Some(other) => {
                    asks.push(ask(format!("tools[{i}].type = {other}"), "untyped", true));
                    continue;
                }
            };
            let client_side =
                kind == "custom" || ANTHROPIC_CLIENT_TOOLS.iter().any(|p| kind.starts_with(p));
            if !client_side {
                let name = if kind == "mcp_toolset" { "mcp" } else { kind };
                asks.push(ask(format!("tools[{i}].type = {kind:?}"), name, true));
            }
        }
    }
    for value in headers.get_all("anthropic-beta") {
        let Ok(value) = value.to_str() else {
            continue;
        };
        for beta in value.split(',').map(str::trim) {
            if let Some((_, tool)) = ANTHROPIC_BETAS.iter().find(|(p, _)| beta.starts_with(p)) {
                asks.push(ask(format!("anthropic-beta = {beta:?}"), tool, false));
            }
        }
    }
    asks
}

/// The allow-list entry that allows `kind`, if one does.
fn allowing<'a>(allow: &'a [String], kind: &str) -> Option<&'a str> {
    allow
        .iter()
        .find(|name| {
            kind == name.as_str()
                || (kind.len() > name.len()
                    && kind.starts_with(name.as_str())
                    && kind.as_bytes()[name.len()] == b'_')
                || (name.as_str() == "mcp" && kind == "mcp_toolset")
        })
        .map(String::as_str)
}

/// Check `asks` against `allow`: `hosted_tool_refused` naming the first field not allowed, else
/// the targets (`hosted:<provider>:<name>`, each once, in order) of the allowed ones that act.
pub(crate) fn admit(
    asks: &[Ask],
    allow: &[String],
    provider: Provider,
) -> Result<Vec<String>, Refusal> {
    let mut targets: Vec<String> = Vec::new();
    for ask in asks {
        let Some(name) = allowing(allow, &ask.kind) else {
            return Err(Refusal::new(
                RefusalCode::HostedToolRefused,
                format!(
                    "{} asks the provider to act on the agent's behalf (a provider-side tool \
                     runs outside the gateway's boundary and records); {} allow_hosted_tools \
                     does not allow {:?}",
                    ask.field,
                    provider.section(),
                    ask.kind
                ),
            ));
        };
        let target = format!("hosted:{}:{name}", provider.as_str());
        if ask.acts && !targets.contains(&target) {
            targets.push(target);
        }
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kinds(asks: &[Ask]) -> Vec<&str> {
        asks.iter().map(|a| a.kind.as_str()).collect()
    }

    #[test]
    fn responses_tools_other_than_functions_and_background_are_asks() {
        let request = json!({"model": "m", "background": true, "tools": [
            {"type": "function", "name": "f"}, {"type": "mcp", "server_url": "https://x"},
            {"type": "web_search_preview"}, {"type": "custom", "name": "c"},
            {"type": "code_interpreter"}, {"name": "untyped"}]});
        let asks = openai_asks(&request, true);
        assert_eq!(
            kinds(&asks),
            [
                "mcp",
                "web_search_preview",
                "code_interpreter",
                "untyped",
                "background"
            ]
        );
        assert_eq!(asks[0].field, "tools[1].type = \"mcp\"");
        let refused = admit(&asks, &[], Provider::OpenAi).unwrap_err();
        assert_eq!(refused.code, RefusalCode::HostedToolRefused);
        assert!(
            refused.message.starts_with("tools[1].type = \"mcp\""),
            "{}",
            refused.message
        );
        assert!(openai_asks(&json!({"background": false, "tools": []}), true).is_empty());
        let chat = json!({"web_search_options": {}, "tools": [{"type": "function"}]});
        assert_eq!(kinds(&openai_asks(&chat, false)), ["web_search"]);
    }

    /// Codex groups client functions in a `namespace`: the group is no ask, what it holds is
    /// judged as any tool.
    #[test]
    fn a_namespace_of_functions_is_no_ask_but_a_hosted_tool_inside_one_is() {
        let functions = json!({"tools": [{"type": "namespace", "name": "multi_agent_v1",
            "tools": [{"type": "function", "name": "spawn_agent"}, {"type": "custom", "name": "c"}]}]});
        assert!(openai_asks(&functions, true).is_empty());
        let hidden = json!({"tools": [{"type": "function", "name": "f"}, {"type": "namespace",
            "name": "n", "tools": [{"type": "function", "name": "g"}, {"type": "web_search"}]}]});
        let asks = openai_asks(&hidden, true);
        assert_eq!(kinds(&asks), ["web_search"]);
        assert_eq!(asks[0].field, "tools[1].tools[1].type = \"web_search\"");
        let mut deep = json!({"type": "function", "name": "f"});
        for _ in 0..=MAX_NAMESPACE_DEPTH {
            deep = json!({"type": "namespace", "tools": [deep]});
        }
        assert_eq!(
            kinds(&openai_asks(&json!({"tools": [deep]}), true)),
            ["namespace"]
        );
    }

    #[test]
    fn allowed_names_become_targets_once() {
        let request = json!({"tools": [{"type": "web_search_preview"}, {"type": "web_search"}]});
        let asks = openai_asks(&request, true);
        let allow = vec!["web_search".to_string()];
        assert_eq!(
            admit(&asks, &allow, Provider::OpenAi).unwrap(),
            ["hosted:openai:web_search"]
        );
        // A name allows itself and its versions, not another tool that shares a prefix.
        assert_eq!(allowing(&allow, "web_searchx"), None);
        assert_eq!(allowing(&["mcp".to_string()], "mcp_toolset"), Some("mcp"));
    }

    #[test]
    fn messages_server_tools_mcp_servers_and_betas_are_asks() {
        let request = json!({"mcp_servers": [{"type": "url", "url": "https://x", "name": "x"}],
            "tools": [{"name": "f", "input_schema": {}}, {"type": "custom", "name": "c"},
                {"type": "bash_20250124", "name": "bash"}, {"type": "web_fetch_20250910", "name": "web_fetch"},
                {"type": "code_execution_20250522"}, {"type": "mcp_toolset", "mcp_server_name": "x"}]});
        let mut headers = HeaderMap::new();
        headers.insert(
            "anthropic-beta",
            "fine-grained-tool-streaming-2025-05-14, mcp-client-2025-04-04"
                .parse()
                .unwrap(),
        );
        let asks = anthropic_asks(&request, &headers);
        assert_eq!(
            kinds(&asks),
            [
                "mcp",
                "web_fetch_20250910",
                "code_execution_20250522",
                "mcp",
                "mcp"
            ]
        );
        assert_eq!(asks[4].field, "anthropic-beta = \"mcp-client-2025-04-04\"");
        assert!(!asks[4].acts);
        let allow = vec![
            "mcp".to_string(),
            "web_fetch".into(),
            "code_execution".into(),
        ];
        assert_eq!(
            admit(&asks, &allow, Provider::Anthropic).unwrap(),
            [
                "hosted:anthropic:mcp",
                "hosted:anthropic:web_fetch",
                "hosted:anthropic:code_execution"
            ]
        );
        for target in admit(&asks, &allow, Provider::Anthropic).unwrap() {
            assert!(
                stopline_core::ops::target_kind(&target).is_some(),
                "{target}"
            );
        }
    }
}
