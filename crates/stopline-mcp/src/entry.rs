//! The commands this crate gives the binary: `mcp proxy`, `mcp serve` and `hook claude-code`.
//!
//! Each picks its backend the same way (docs/reference.md §7): the gateway at `STOPLINE_URL` with the
//! session's token when it is set — a confined agent cannot write the control directory — and
//! the local control directory otherwise. The binary only parses arguments and calls these.

use crate::governor::Governor;
use crate::hook::{Harness, HookOptions};
use crate::local::LocalGovernor;
use crate::remote::RemoteGovernor;
use crate::serve::Backend;
use crate::stdio::ProxyOptions;
use std::path::Path;
use std::sync::Arc;
use stopline_control::Context;
use stopline_core::{Refusal, RefusalCode};

/// `STOPLINE_URL`, when set and not empty.
pub fn gateway_url() -> Option<String> {
    std::env::var("STOPLINE_URL")
        .ok()
        .map(|u| u.trim().to_string())
        .filter(|u| !u.is_empty())
}

fn session_token() -> Option<String> {
    std::env::var("STOPLINE_TOKEN")
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
}

/// `stopline mcp proxy --token T [--name N] -- CMD…`: exit code, or a refusal to start.
pub fn proxy(
    ctx: &Context,
    token: Option<String>,
    name: &str,
    command: Vec<String>,
) -> Result<i32, Refusal> {
    stopline_core::Name::parse(name)?;
    let governor: Arc<dyn Governor> = match gateway_url() {
        Some(url) => Arc::new(RemoteGovernor::new(&url)),
        None => Arc::new(LocalGovernor::new(ctx.clone())?),
    };
    let options = ProxyOptions {
        token: token.unwrap_or_default(),
        name: name.to_string(),
        command,
    };
    crate::stdio::run(governor, options)
        .map_err(|e| Refusal::new(RefusalCode::BadRequest, e.to_string()))
}

/// `stopline mcp serve`.
pub fn serve(ctx: &Context) -> Result<i32, Refusal> {
    let backend = match gateway_url() {
        Some(url) => Backend::Gateway {
            url,
            token: session_token(),
        },
        None => Backend::Local(Box::new(ctx.clone())),
    };
    crate::serve::run(backend).map_err(|e| Refusal::new(RefusalCode::ControlIo, e.to_string()))
}

/// `stopline hook claude-code`: 0 allows, 2 blocks. Call it before anything that could fail
/// with another exit code (configuration loading included): it must own the whole process.
pub fn hook_claude_code(home: &Path) -> i32 {
    crate::hook::run(HookOptions {
        harness: Harness::ClaudeCode,
        home: home.to_path_buf(),
        gateway: gateway_url(),
        token: session_token(),
    })
}

/// `stopline hook codex`: 0 allows, 2 with the reason on stderr blocks (Codex fails open on
/// any other exit, and on an exit 2 with nothing on stderr). As [`hook_claude_code`], call it
/// before anything that could fail with another exit code.
pub fn hook_codex(home: &Path) -> i32 {
    crate::hook::run(HookOptions {
        harness: Harness::Codex,
        home: home.to_path_buf(),
        gateway: gateway_url(),
        token: session_token(),
    })
}
