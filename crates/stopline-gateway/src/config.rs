//! The gateway's part of `config.toml` (SPEC §5): `[mcp.<server>]` upstreams, the `[model]`
//! and `[anthropic]` upstreams, `[breakers]`, and the alert hooks, on top of the shared
//! [`stopline_control::config::Config`] (operators, monitors, timeouts, prices).
//!
//! A section that exists but does not parse is an error at start-up: a typo must not silently
//! drop an `allowed_tools` list or a breaker threshold.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use stopline_control::config::{Config, Price};
use stopline_core::Level;

/// One `[mcp.<server>]` upstream.
#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
pub struct McpServerConfig {
    /// A Streamable HTTP upstream.
    #[serde(default)]
    pub url: Option<String>,
    /// A stdio upstream the gateway starts.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Tools that may be called; `None` means all.
    #[serde(default)]
    pub allowed_tools: Option<Vec<String>>,
    /// Tools admitted as critical.
    #[serde(default)]
    pub critical_tools: Vec<String>,
    /// The user a stdio server runs as (`command`): a name, a uid, or `auto` (as root the
    /// default: a fresh uid of its own, SPEC §12.3).
    #[serde(default)]
    pub user: Option<String>,
    /// The variables a stdio server gets besides `PATH`, `HOME` and `LANG` (nothing else of
    /// the gateway's environment reaches it).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Seconds without traffic after which a stdio server's session ends (default 300).
    #[serde(default)]
    pub session_idle_s: Option<u64>,
    /// Whom a tool call left in doubt blocks on its tool: `"agent"` (default: the chain of the
    /// agent that made it) or `"everyone"` (SPEC §12.2).
    #[serde(default)]
    pub unresolved_blocks: stopline_core::ops::BlockScope,
    /// Trust the server's `readOnlyHint` annotations (default false): only then is a tool it
    /// declares read-only called without a recorded operation. MCP calls them untrusted hints.
    #[serde(default)]
    pub trust_read_only_hints: bool,
    /// Keys this crate does not know, for the MCP proxy.
    #[serde(flatten)]
    pub extra: BTreeMap<String, toml::Value>,
}

/// The `[model]` upstream.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ModelConfig {
    /// The OpenAI-compatible base URL, e.g. `http://127.0.0.1:8081/v1`.
    pub base_url: String,
    /// The environment variable holding the upstream key (read by the gateway only).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Upstream request timeout in seconds (default 600).
    #[serde(default = "default_model_timeout")]
    pub timeout_s: u64,
}

fn default_model_timeout() -> u64 {
    600
}

/// The `[anthropic]` upstream of `/v1/messages` (SPEC §12.5).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AnthropicConfig {
    /// The Messages API base URL without `/v1`, e.g. `https://api.anthropic.com`; the gateway
    /// appends `/v1/messages`.
    pub base_url: String,
    /// The environment variable holding the upstream key, sent as `x-api-key` (read by the
    /// gateway only).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Upstream request timeout in seconds (default 600).
    #[serde(default = "default_model_timeout")]
    pub timeout_s: u64,
}

/// `[breakers]`: per-agent thresholds and the adapter breakers.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default)]
pub struct BreakerConfig {
    /// Unauthorized calls before the agent's breaker trips.
    pub unauthorized_calls: u32,
    /// Refused egress attempts before the agent's breaker trips.
    pub refused_egress: u32,
    /// Anomaly score at or above which the agent's breaker trips.
    pub anomaly_score: f64,
    /// The level of the latch a trip engages.
    pub trip_level: String,
    /// Consecutive upstream failures that open an adapter breaker.
    pub adapter_failures: u32,
    /// How long an adapter breaker stays open before a half-open trial.
    pub adapter_cooldown_ms: u64,
    /// A URL that receives a JSON POST for every trip.
    pub alert_webhook: Option<String>,
    /// A command run for every trip, with the evidence record as JSON on stdin.
    pub alert_command: Option<Vec<String>>,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            unauthorized_calls: 5,
            refused_egress: 3,
            anomaly_score: 0.9,
            trip_level: "halt-all".into(),
            adapter_failures: 5,
            adapter_cooldown_ms: 5000,
            alert_webhook: None,
            alert_command: None,
        }
    }
}

/// Everything the gateway reads from its configuration file.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The shared keys (listen, operators, monitors, timeouts, prices).
    pub base: Config,
    /// `[mcp.<server>]` sections by server name.
    pub mcp: BTreeMap<String, McpServerConfig>,
    /// The `[model]` section.
    pub model: Option<ModelConfig>,
    /// The `[anthropic]` section.
    pub anthropic: Option<AnthropicConfig>,
    /// The `[breakers]` section.
    pub breakers: BreakerConfig,
    /// The level a breaker trip engages.
    pub trip_level: Level,
    /// A hash of the file's bytes, for registrations and run records.
    pub config_hash: String,
}

/// A configuration that cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
#[error("config {path}: {why}")]
pub struct GatewayConfigError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub why: String,
}

impl GatewayConfig {
    /// Load `path` (a missing file gives the defaults).
    pub fn load(path: &Path) -> Result<GatewayConfig, GatewayConfigError> {
        let error = |why: String| GatewayConfigError {
            path: path.display().to_string(),
            why,
        };
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(error(e.to_string())),
        };
        let base = Config::load(path).map_err(|e| error(e.why))?;
        let mut config = GatewayConfig::from_base(base).map_err(error)?;
        config.config_hash = hex::encode(sha2::Sha256::digest(&bytes));
        Ok(config)
    }

    /// Interpret the gateway sections of an already parsed config.
    pub fn from_base(base: Config) -> Result<GatewayConfig, String> {
        fn section<T: serde::de::DeserializeOwned>(
            base: &Config,
            key: &str,
        ) -> Result<Option<T>, String> {
            base.extra
                .get(key)
                .map(|v| v.clone().try_into().map_err(|e| format!("[{key}]: {e}")))
                .transpose()
        }
        let mcp = section(&base, "mcp")?.unwrap_or_default();
        let model = section(&base, "model")?;
        let anthropic = section(&base, "anthropic")?;
        let breakers: BreakerConfig = section(&base, "breakers")?.unwrap_or_default();
        let trip_level = Level::parse(&breakers.trip_level)
            .map_err(|r| format!("[breakers] trip_level: {}", r.message))?;
        Ok(GatewayConfig {
            base,
            mcp,
            model,
            anthropic,
            breakers,
            trip_level,
            config_hash: String::new(),
        })
    }

    /// The price of `model`, if configured.
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.base.prices.get(model)
    }

    /// How long an exchange the gateway cut (an agent answered at EMERGENCY) may still take to
    /// give its outcome before its operation is left in doubt (`cut_outcome_wait_s`).
    pub fn cut_outcome_wait(&self) -> Duration {
        Duration::from_secs(self.base.cut_outcome_wait_s)
    }

    /// How long a held call waits under HALT_NONCRITICAL.
    pub fn queue_timeout(&self) -> Duration {
        Duration::from_secs(self.base.queue_timeout_s)
    }

    /// The periodic full reload interval (at least 10 ms).
    pub fn reload_interval(&self) -> Duration {
        Duration::from_millis(self.base.reload_interval_ms.max(10))
    }
}

use sha2::Digest as _;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_parse_and_typos_are_refused() {
        let base: Config = toml::from_str(
            r#"
            [mcp.everything]
            url = "http://127.0.0.1:3001/mcp"
            allowed_tools = ["echo"]
            unresolved_blocks = "everyone"
            trust_read_only_hints = true
            [mcp.other]
            url = "http://127.0.0.1:3002/mcp"
            [model]
            base_url = "http://127.0.0.1:8081/v1"
            api_key_env = "K"
            [anthropic]
            base_url = "http://127.0.0.1:8082"
            api_key_env = "A"
            [prices."claude-test"]
            input = 3.0
            output = 15.0
            cache_read = 0.3
            [breakers]
            unauthorized_calls = 2
            "#,
        )
        .unwrap();
        let config = GatewayConfig::from_base(base).unwrap();
        assert_eq!(
            config.mcp["everything"].allowed_tools,
            Some(vec!["echo".to_string()])
        );
        assert_eq!(
            config.mcp["everything"].unresolved_blocks,
            stopline_core::ops::BlockScope::Everyone
        );
        assert!(config.mcp["everything"].trust_read_only_hints);
        assert_eq!(
            config.mcp["other"].unresolved_blocks,
            stopline_core::ops::BlockScope::Agent
        );
        assert!(!config.mcp["other"].trust_read_only_hints);
        assert_eq!(config.cut_outcome_wait(), Duration::from_secs(30));
        assert_eq!(config.breakers.unauthorized_calls, 2);
        let anthropic = config.anthropic.as_ref().unwrap();
        assert_eq!(anthropic.base_url, "http://127.0.0.1:8082");
        assert_eq!(anthropic.api_key_env.as_deref(), Some("A"));
        let price = config.price("claude-test").unwrap();
        assert_eq!(price.cache_read_price(), 0.3);
        assert_eq!(
            price.cache_write_price(),
            3.0,
            "cache_write defaults to input"
        );
        assert_eq!(price.max_input_price(), 3.0);
        let typo: Config =
            toml::from_str("[anthropic]\nbase_url = \"x\"\napi_key = \"k\"\n").unwrap();
        assert!(
            GatewayConfig::from_base(typo).is_err(),
            "an unknown [anthropic] key is refused"
        );
        assert_eq!(config.breakers.refused_egress, 3);
        assert_eq!(config.trip_level, Level::HaltAll);
        let bad: Config = toml::from_str("[breakers]\ntrip_level = \"stop\"\n").unwrap();
        assert!(GatewayConfig::from_base(bad).is_err());
        let bad: Config =
            toml::from_str("[mcp.x]\nurl = \"u\"\nunresolved_blocks = \"some\"\n").unwrap();
        assert!(GatewayConfig::from_base(bad).is_err());
    }
}
