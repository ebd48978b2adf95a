//! `config.toml`: operators, monitors, gateway defaults, prices, breakers (SPEC §5).
//!
//! Fixed keys are typed; anything else is kept in `extra` for the gateway. A config that exists
//! but does not parse is an error (a typo must not silently drop an operator list).

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Prices for one model, USD per million tokens.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Price {
    /// Input tokens.
    pub input: f64,
    /// Output tokens.
    pub output: f64,
    /// Reserved when a request names no max_tokens.
    #[serde(default = "default_max_output")]
    pub max_output_tokens: u64,
    /// Input tokens read from a prompt cache (Anthropic `cache_read_input_tokens`); default:
    /// the input price.
    #[serde(default)]
    pub cache_read: Option<f64>,
    /// Input tokens written to a prompt cache (Anthropic `cache_creation_input_tokens`);
    /// default: the input price.
    #[serde(default)]
    pub cache_write: Option<f64>,
}

impl Price {
    /// The price of a cache-read input token (`cache_read`, else `input`).
    pub fn cache_read_price(&self) -> f64 {
        self.cache_read.unwrap_or(self.input)
    }

    /// The price of a cache-write input token (`cache_write`, else `input`).
    pub fn cache_write_price(&self) -> f64 {
        self.cache_write.unwrap_or(self.input)
    }

    /// The highest price any input token can have: what a reservation bound charges for each
    /// input token before usage says which kind it was.
    pub fn max_input_price(&self) -> f64 {
        self.input
            .max(self.cache_read_price())
            .max(self.cache_write_price())
    }
}

fn default_max_output() -> u64 {
    4096
}

/// The configuration file.
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    /// Gateway listen address.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Names that may recover, drain and disengage.
    #[serde(default = "default_operators")]
    pub operators: Vec<String>,
    /// Names that may disengage halts.
    #[serde(default = "default_monitors")]
    pub monitors: Vec<String>,
    /// Seconds a held call waits under HALT_NONCRITICAL.
    #[serde(default = "default_queue_timeout")]
    pub queue_timeout_s: u64,
    /// How long engage waits for gateway acknowledgements.
    #[serde(default = "default_ack_timeout")]
    pub ack_timeout_ms: u64,
    /// Periodic full reload of a gateway's view.
    #[serde(default = "default_reload")]
    pub reload_interval_ms: u64,
    /// Seconds an upstream exchange the gateway cut (its agent answered at EMERGENCY) may
    /// still take to give its outcome before the operation is left in doubt (SPEC §12.2).
    #[serde(default = "default_cut_outcome_wait")]
    pub cut_outcome_wait_s: u64,
    /// Model prices.
    #[serde(default)]
    pub prices: BTreeMap<String, Price>,
    /// `[run]`: how `stopline run` starts agents.
    #[serde(default)]
    pub run: RunConfig,
    /// Everything else (mcp servers, model upstream, breakers), for the gateway.
    #[serde(flatten)]
    pub extra: BTreeMap<String, toml::Value>,
}

/// `[run]` of the configuration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// `uid_range = "FIRST-LAST"`: where `--user auto` takes a fresh uid from (default
    /// `61184-65519`).
    #[serde(default)]
    pub uid_range: Option<String>,
}

fn default_listen() -> String {
    "127.0.0.1:7077".into()
}
fn default_operators() -> Vec<String> {
    vec!["operator".into()]
}
fn default_monitors() -> Vec<String> {
    vec!["safety-monitor".into()]
}
fn default_queue_timeout() -> u64 {
    30
}
fn default_ack_timeout() -> u64 {
    250
}
fn default_reload() -> u64 {
    1000
}
fn default_cut_outcome_wait() -> u64 {
    30
}

impl Default for Config {
    fn default() -> Self {
        toml::from_str("").expect("the empty config parses")
    }
}

/// A config file that exists but cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("config {path}: {why}")]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub why: String,
}

impl Config {
    /// Load `path`; a missing file gives the defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let error = |why: String| ConfigError {
            path: path.display().to_string(),
            why,
        };
        match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text).map_err(|e| error(e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(e) => Err(error(e.to_string())),
        }
    }
}
