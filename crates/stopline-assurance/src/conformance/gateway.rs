//! `stopline serve` as a child of a case: the case's home, a free 127.0.0.1 port, a config the
//! case writes, output to files in the case's directory (no pipe to drain), healthy before use.

use super::http::{free_port, request, Reply};
use super::process::Background;
use super::sandbox::Sandbox;
use super::{harness, CaseError};
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::Duration;

/// The upstream key the gateway reads from its own environment (never handed to agents).
pub const UPSTREAM_KEY: &str = "conformance-upstream-key";

/// A running gateway.
pub struct Gateway {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    process: Background,
}

impl Gateway {
    /// Write `<home>/config.toml` (`listen` plus `extra`) and start `serve`; wait for `/healthz`.
    pub fn start(sandbox: &Sandbox, extra: &str) -> Result<Gateway, CaseError> {
        let addr = format!("127.0.0.1:{}", free_port().map_err(harness)?);
        std::fs::create_dir_all(sandbox.home()).map_err(harness)?;
        sandbox.write(
            "config.toml",
            format!("listen = \"{addr}\"\n{extra}\n").as_bytes(),
        )?;
        let log = std::fs::File::create(sandbox.dir().join("gateway.log")).map_err(harness)?;
        let mut cmd = sandbox.command(&["serve"]);
        cmd.env("UPSTREAM_API_KEY", UPSTREAM_KEY)
            .env("STOPLINE_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| harness(format!("cannot start serve: {e}")))?;
        let gateway = Gateway {
            addr,
            process: Background::adopt(child, sandbox.guard().clone()),
        };
        loop {
            if gateway.get("/healthz", None).status == 200 {
                return Ok(gateway);
            }
            if !gateway.process.running() {
                let log =
                    std::fs::read_to_string(sandbox.dir().join("gateway.log")).unwrap_or_default();
                return Err(harness(format!(
                    "serve exited before it was healthy: {log}"
                )));
            }
            if sandbox.guard().expired() {
                return Err(CaseError::TimedOut(
                    "the gateway never became healthy".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(15));
        }
    }

    /// `GET path`.
    pub fn get(&self, path: &str, token: Option<&str>) -> Reply {
        request(&self.addr, "GET", path, token, None)
    }

    /// `POST path` with a JSON body.
    pub fn post(&self, path: &str, token: Option<&str>, body: &Value) -> Reply {
        request(&self.addr, "POST", path, token, Some(body))
    }

    /// A small chat completion for `model` (10 output tokens at most).
    pub fn chat(&self, token: &str, model: &str) -> Reply {
        let body = serde_json::json!({"model": model, "max_tokens": 10,
            "messages": [{"role": "user", "content": "conformance"}]});
        self.post("/v1/chat/completions", Some(token), &body)
    }
}

/// The `[model]` section for an upstream, with `gpt-test` priced (USD per million tokens).
pub fn model_config(upstream_url: &str) -> String {
    format!(
        "[model]\nbase_url = \"{upstream_url}/v1\"\napi_key_env = \"UPSTREAM_API_KEY\"\ntimeout_s = 10\n\n\
         [prices.\"gpt-test\"]\ninput = 1.0\noutput = 2.0\nmax_output_tokens = 64\n"
    )
}

/// Poll `probe` every 15 ms until it returns `Some` or `within` passes (or the case expires).
pub fn poll<T>(
    sandbox: &Sandbox,
    within: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> Option<T> {
    let until = std::time::Instant::now() + within;
    loop {
        if let Some(value) = probe() {
            return Some(value);
        }
        if std::time::Instant::now() >= until || sandbox.guard().expired() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(15));
    }
}
