//! `config.toml`: operators, monitors, gateway defaults, upstreams, prices, breakers (docs/reference.md §8).
//!
//! One typed [`Config`] for every reader (the CLI, the gateway, the etcd wiring, the hook), and
//! it rejects what it does not know (docs/reference.md §5): every struct is `deny_unknown_fields`, so a
//! misspelled key (`operater = [...]`) is `config_invalid` naming the key, the nearest known
//! one, and the file, line and column — never silently ignored (that once dropped an operator
//! list). A file that exists but cannot be read or parsed is the same error.
//!
//! To add a key: add a typed field (with `#[serde(default…)]` when it is optional) to the
//! struct of its section. Nothing else is needed; the did-you-mean list comes from serde.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use stopline_core::{Refusal, RefusalCode};

/// Prices for one model, USD per million tokens.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
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

/// One `[a2a.<name>]` remote agent, served at `/a2a/<name>` (docs/reference.md §8).
#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct A2aAgentConfig {
    /// The agent's JSON-RPC endpoint (its card is read at `<url>/.well-known/agent-card.json`,
    /// unless `card_url` names it).
    pub url: String,
    /// Where the agent's card is, when not beside `url`.
    #[serde(default)]
    pub card_url: Option<String>,
    /// Headers the gateway sends to this agent on every request (its own credentials), resolved
    /// as `[mcp.<server>] headers` are.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Seconds one exchange with the agent may take, a stream included (default 600).
    #[serde(default)]
    pub timeout_s: Option<u64>,
}

/// One `[mcp.<server>]` upstream.
#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
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
    /// default: a fresh uid of its own, docs/reference.md §6).
    #[serde(default)]
    pub user: Option<String>,
    /// The variables a stdio server gets besides `PATH`, `HOME` and `LANG` (nothing else of
    /// the gateway's environment reaches it).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Seconds without traffic after which a session ends (default 300): a stdio server's is
    /// ended with its server; an HTTP upstream's, that no stream of its agent holds open, is
    /// ended upstream with `DELETE`.
    #[serde(default)]
    pub session_idle_s: Option<u64>,
    /// Keep one stdio server started ahead of the next session (default true), so a session
    /// does not wait for the server's own start-up. Each spare serves exactly one session:
    /// it is never shared between agents.
    #[serde(default)]
    pub warm_spare: Option<bool>,
    /// Whom a tool call left in doubt blocks on its tool: `"agent"` (default: the chain of the
    /// agent that made it) or `"everyone"` (docs/reference.md §8).
    #[serde(default)]
    pub unresolved_blocks: stopline_core::ops::BlockScope,
    /// Trust the server's `readOnlyHint` annotations (default false): only then is a tool it
    /// declares read-only called without a recorded operation. MCP calls them untrusted hints.
    #[serde(default)]
    pub trust_read_only_hints: bool,
    /// Headers the gateway sends to this server (a `url` upstream) on every request, e.g.
    /// `{ Authorization = "Bearer ${env:NAME}" }`: the upstream's own credentials. `${env:NAME}`
    /// and `${file:PATH}` in a value are resolved when the gateway loads its configuration (a
    /// missing one is `config_invalid`); the values are sent to this upstream only, never
    /// logged and never returned to the agent (docs/reference.md §8).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// The `[model]` upstream.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The OpenAI-compatible base URL, e.g. `http://127.0.0.1:8081/v1`.
    pub base_url: String,
    /// The environment variable holding the upstream key (read by the gateway only).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Upstream request timeout in seconds (default 600).
    #[serde(default = "default_model_timeout")]
    pub timeout_s: u64,
    /// Provider-side tools the agents may ask this provider to run (docs/reference.md §6): names such
    /// as `web_search`, `file_search`, `code_interpreter`, `mcp`, and `background` for
    /// background responses. Empty (the default): every one is refused `hosted_tool_refused`.
    #[serde(default)]
    pub allow_hosted_tools: Vec<String>,
}

/// The `[anthropic]` upstream of `/v1/messages` (docs/reference.md §3).
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
    /// Server tools the agents may ask Anthropic to run (docs/reference.md §6): names such as
    /// `web_search`, `web_fetch`, `code_execution`, `mcp` (`mcp_servers`). Empty (the default):
    /// every one is refused `hosted_tool_refused`.
    #[serde(default)]
    pub allow_hosted_tools: Vec<String>,
}

fn default_model_timeout() -> u64 {
    600
}

/// `[breakers]`: per-agent thresholds and the adapter breakers.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
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
    /// A URL that receives a JSON POST for every trip (`evidence-record.v1`) and every latch
    /// change (`latch-alert.v1`), retried with backoff.
    pub alert_webhook: Option<String>,
    /// A command run for every trip and every latch change, with the record as JSON on stdin
    /// (exit 0: delivered; otherwise retried with backoff).
    pub alert_command: Option<Vec<String>>,
    /// `[breakers.mode]`: which agent breakers only observe (docs/reference.md §8).
    pub mode: BreakerModes,
}

/// `[breakers.mode]`: `enforce` (the default) or `observe` for each agent breaker that counts.
/// A budget's breaker always enforces (`budget_exhausted` is not a key here).
#[derive(Debug, Clone, Copy, Deserialize, Default, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct BreakerModes {
    /// Unauthorized calls.
    pub unauthorized_calls: stopline_core::policy::ConditionMode,
    /// Refused egress.
    pub refused_egress: stopline_core::policy::ConditionMode,
    /// A monitor's anomaly score.
    pub anomaly_score: stopline_core::policy::ConditionMode,
}

impl BreakerModes {
    /// The mode of `kind`'s breaker (a budget's always enforces).
    pub fn of(&self, kind: stopline_core::BreakerKind) -> stopline_core::policy::ConditionMode {
        use stopline_core::BreakerKind;
        match kind {
            BreakerKind::UnauthorizedCalls => self.unauthorized_calls,
            BreakerKind::RefusedEgress => self.refused_egress,
            BreakerKind::AnomalyScore => self.anomaly_score,
            BreakerKind::BudgetExhausted => stopline_core::policy::ConditionMode::Enforce,
        }
    }

    /// `breakers.<kind>` of every breaker that only observes (empty when all enforce).
    pub fn observe_only(&self) -> Vec<String> {
        use stopline_core::policy::ConditionMode::Observe;
        [
            ("unauthorized_calls", self.unauthorized_calls),
            ("refused_egress", self.refused_egress),
            ("anomaly_score", self.anomaly_score),
        ]
        .into_iter()
        .filter(|(_, mode)| *mode == Observe)
        .map(|(name, _)| format!("breakers.{name}"))
        .collect()
    }
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
            mode: BreakerModes::default(),
        }
    }
}

/// `[run]`: how `stopline run` starts agents.
#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RunConfig {
    /// `uid_range = "FIRST-LAST"`: where `--user auto` takes a fresh uid from (default
    /// `61184-65519`, docs/reference.md §6).
    pub uid_range: Option<String>,
}

/// `[retention]`: what is kept of the history (docs/wiring-agents.md shows every key).
/// Whatever it says, the hot path (gates, reloads, status, evidence appends) reads none of the
/// history: only what is open, and the evidence log's newest line.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// The journal of an operation writer that is gone (a gateway or CLI that ended):
    /// `"archive"` (default) moves it to `ops/archive/` and keeps it whole; `"prune"` deletes it
    /// once its open operations are kept in `ops/archive/open.json`. The same for its spending
    /// journal: folded into `spend/settled.json`, then moved to `spend/archive/` (`"archive"`)
    /// or deleted (`"prune"`).
    pub gone_journals: stopline_store::ops_archive::GoneJournals,
    /// Records an evidence log segment holds before the next record starts a new one
    /// (default 8192; 0 is refused). Every segment is kept; an append reads none of them but
    /// the newest line, and `stopline evidence verify --all` reads them all.
    pub evidence_segment_records: std::num::NonZeroU64,
    /// Evidence segments kept, the current one included (at least 1): at each segment switch
    /// older ones are pruned, after `evidence/pruned.json` records where the kept ones start.
    /// Absent (the default): every segment is kept on disk.
    pub evidence_keep_segments: Option<std::num::NonZeroU64>,
    /// A live gateway's spending journal is rewritten to what it means (per account the
    /// settled total, and the open reservations) once it has grown past this many bytes
    /// (default 1 MiB; 0 is refused), so a reservation of another gateway, a new one's first
    /// included, reads at most about this much of it however long the gateway has run.
    pub spend_journal_bytes: std::num::NonZeroU64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            gone_journals: Default::default(),
            evidence_segment_records: std::num::NonZeroU64::new(
                stopline_store::evidence::DEFAULT_SEGMENT_RECORDS,
            )
            .unwrap_or(std::num::NonZeroU64::MIN),
            evidence_keep_segments: None,
            spend_journal_bytes: std::num::NonZeroU64::new(stopline_store::spend::REWRITE_BYTES)
                .unwrap_or(std::num::NonZeroU64::MIN),
        }
    }
}

/// `[tokens]`: the bounded tail of authority (docs/reference.md §5, "Bounded tail").
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TokensConfig {
    /// The longest lifetime of any token, delegated ones included (default 86400; 0 is
    /// refused): a longer `--ttl` is `ttl_too_long`, and an epoch revision older than this plus
    /// the margin is folded out of `epoch.json`.
    pub max_ttl_s: std::num::NonZeroU64,
}

impl Default for TokensConfig {
    fn default() -> Self {
        TokensConfig {
            max_ttl_s: std::num::NonZeroU64::new(stopline_core::epoch::DEFAULT_MAX_TTL_S)
                .unwrap_or(std::num::NonZeroU64::MIN),
        }
    }
}

/// The configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// The bound of one whole read of the control state (docs/reference.md §5).
    #[serde(default = "default_read_timeout")]
    pub read_timeout_ms: u64,
    /// Seconds an upstream exchange the gateway cut (its agent answered at EMERGENCY) may
    /// still take to give its outcome before the operation is left in doubt (docs/reference.md §8).
    #[serde(default = "default_cut_outcome_wait")]
    pub cut_outcome_wait_s: u64,
    /// The distributed permit (etcd mode, docs/reference.md §10); 2000 when absent.
    #[serde(default)]
    pub permit_ttl_ms: Option<u64>,
    /// Model prices.
    #[serde(default)]
    pub prices: BTreeMap<String, Price>,
    /// `[mcp.<server>]` upstreams by server name.
    #[serde(default)]
    pub mcp: BTreeMap<String, McpServerConfig>,
    /// `[a2a.<name>]` remote A2A agents by name (docs/reference.md §8).
    #[serde(default)]
    pub a2a: BTreeMap<String, A2aAgentConfig>,
    /// The `[model]` upstream.
    #[serde(default)]
    pub model: Option<ModelConfig>,
    /// The `[anthropic]` upstream.
    #[serde(default)]
    pub anthropic: Option<AnthropicConfig>,
    /// `[breakers]`.
    #[serde(default)]
    pub breakers: BreakerConfig,
    /// `[run]`.
    #[serde(default)]
    pub run: RunConfig,
    /// `[retention]`.
    #[serde(default)]
    pub retention: RetentionConfig,
    /// `[tokens]`: how long a token may live.
    #[serde(default)]
    pub tokens: TokensConfig,
    /// `[etcd]`: how to reach a locked etcd (docs/reference.md §10).
    #[serde(default)]
    pub etcd: EtcdConfig,
    /// `[telemetry]`: OpenTelemetry export of the gateway's spans.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// `[drill]`: the gateway's scheduled drill of itself (docs/reference.md §8).
    #[serde(default)]
    pub drill: DrillConfig,
    /// The `Origin`s whose requests the MCP proxy serves (e.g. `"http://localhost:6274"`);
    /// a request with any other `Origin` is refused 403 (docs/reference.md §8). Absent: the
    /// loopback origins (`http`/`https` on `localhost`, `127.0.0.1`, `[::1]`, any port).
    #[serde(default)]
    pub allowed_origins: Option<Vec<String>>,
}

/// `[drill]`: `serve` drills its own gateway on a synthetic run every `every` (absent: never),
/// recorded as any drill against `harness_version`; a failed one closes that harness version's
/// drill gate and is alerted through `[breakers] alert_webhook` / `alert_command`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DrillConfig {
    /// How often: a number with `ms`, `s`, `m`, `h` or `d` (`"24h"`).
    pub every: Option<Interval>,
    /// The harness version the drills are recorded against (default `drill`).
    pub harness_version: String,
    /// The p99 time to first rejection above which a drill fails (default 1000).
    pub target_ms: u64,
}

impl Default for DrillConfig {
    fn default() -> Self {
        DrillConfig {
            every: None,
            harness_version: "drill".into(),
            target_ms: 1000,
        }
    }
}

/// A positive duration written as a number and a unit: `500ms`, `90s`, `15m`, `24h`, `7d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Interval(pub std::time::Duration);

impl TryFrom<String> for Interval {
    type Error = String;

    fn try_from(text: String) -> Result<Interval, String> {
        let text = text.trim();
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let ms_per: u64 = match unit {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => 0,
        };
        match number.parse::<u64>() {
            Ok(n) if n > 0 && ms_per > 0 => Ok(Interval(std::time::Duration::from_millis(
                n.saturating_mul(ms_per),
            ))),
            _ => Err(format!(
                "{text:?} is not an interval (a positive number with ms, s, m, h or d: \"24h\")"
            )),
        }
    }
}

/// `[telemetry]`: where `serve` exports its spans (admission, dispatch, refusal) over
/// OTLP/HTTP (protobuf). Absent: nothing is exported and nothing is buffered.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP traces endpoint, e.g. `http://127.0.0.1:4318/v1/traces` (a URL that ends
    /// in `/v1/traces` is used as is; a bare collector URL gets `/v1/traces` appended).
    pub otlp_endpoint: Option<String>,
    /// The `service.name` resource attribute (default `stopline-gateway`).
    pub service_name: Option<String>,
}

/// `[etcd]`: TLS and authentication for `--control etcd://…` / `etcds://…` (docs/reference.md §10). Read
/// by every process that attaches the plane (the CLI and `serve` alike). Relative paths are
/// relative to the home. The password is only ever read from `password_file` (0600 or
/// stricter, owned by the caller), never from this file or the URL.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EtcdConfig {
    /// The CA that signed the members' certificates (PEM); required for `etcds://`.
    pub ca_file: Option<std::path::PathBuf>,
    /// This host's client certificate (PEM), for members that demand one.
    pub cert_file: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM).
    pub key_file: Option<std::path::PathBuf>,
    /// The etcd user to authenticate as.
    pub user: Option<String>,
    /// The file holding that user's password (one line).
    pub password_file: Option<std::path::PathBuf>,
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
fn default_read_timeout() -> u64 {
    5000
}
fn default_cut_outcome_wait() -> u64 {
    30
}

impl Default for Config {
    fn default() -> Self {
        toml::from_str("").expect("the empty config parses")
    }
}

/// A config file that exists but cannot be used: `config_invalid`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{path}{}: {why}", position(.line, .column))]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// The line of the problem (1-based), when it has one.
    pub line: Option<usize>,
    /// The column of the problem (1-based), when it has one.
    pub column: Option<usize>,
    /// What is wrong.
    pub why: String,
}

fn position(line: &Option<usize>, column: &Option<usize>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(" line {line}, column {column}"),
        (Some(line), None) => format!(" line {line}"),
        _ => String::new(),
    }
}

impl ConfigError {
    /// The refusal every command but engage answers with.
    pub fn to_refusal(&self) -> Refusal {
        Refusal::new(RefusalCode::ConfigInvalid, self.to_string())
    }
}

/// The distributed permit when `permit_ttl_ms` is absent: how long a gateway trusts its view,
/// and a supervisor its plane, without word from etcd (docs/reference.md §10).
pub const DEFAULT_PERMIT_TTL: std::time::Duration = std::time::Duration::from_millis(2000);

impl Config {
    /// The distributed permit: `permit_ttl_ms`, else [`DEFAULT_PERMIT_TTL`]. Zero is refused
    /// (`config_invalid`) rather than silently replaced: a zero permit would close every gate
    /// at once, a default would hide the typo. Judged where a distributed plane is attached,
    /// so a local home never refuses over a key it does not use.
    pub fn permit_ttl(&self) -> Result<std::time::Duration, Refusal> {
        match self.permit_ttl_ms {
            None => Ok(DEFAULT_PERMIT_TTL),
            Some(0) => Err(Refusal::new(
                RefusalCode::ConfigInvalid,
                "config.toml: permit_ttl_ms must be a positive integer, not 0",
            )),
            Some(ms) => Ok(std::time::Duration::from_millis(ms)),
        }
    }

    /// Load `path`; a missing file gives the defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::parse(path, &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(e) => Err(ConfigError {
                path: path.display().to_string(),
                line: None,
                column: None,
                why: format!("cannot be read: {e}"),
            }),
        }
    }

    /// Parse `text`, the contents of `path`, strictly.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|error| {
            let (line, column) = match error.span() {
                Some(span) => {
                    let (line, column) = line_column(text, span.start);
                    (Some(line), Some(column))
                }
                None => (None, None),
            };
            ConfigError {
                path: path.display().to_string(),
                line,
                column,
                why: explain(error.message()),
            }
        })
    }
}

/// The 1-based line and column of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map_or(0, |tail| tail.chars().count())
        + 1;
    (line, column)
}

/// serde's message, with the nearest known key named when it is an unknown one.
fn explain(message: &str) -> String {
    let message = message.trim();
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_string();
    };
    let Some((unknown, expected)) = rest.split_once('`') else {
        return message.to_string();
    };
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let nearest = known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(unknown, k), *k))
        .min();
    match nearest {
        Some((_, key)) => format!(
            "unknown key `{unknown}` (did you mean `{key}`?); known keys here: {}",
            known.join(", ")
        ),
        None => format!("unknown key `{unknown}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_permit_is_the_configured_one_or_the_default_and_never_zero() {
        let permit = |text: &str| {
            Config::parse(Path::new("c.toml"), text)
                .unwrap()
                .permit_ttl()
        };
        assert_eq!(permit(""), Ok(DEFAULT_PERMIT_TTL));
        assert_eq!(
            permit("permit_ttl_ms = 500\n"),
            Ok(std::time::Duration::from_millis(500))
        );
        assert_eq!(
            permit("permit_ttl_ms = 0\n").unwrap_err().code,
            RefusalCode::ConfigInvalid
        );
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("config.toml"), text)
    }

    #[test]
    fn retention_keeps_everything_unless_told_and_refuses_what_it_does_not_know() {
        use stopline_store::ops_archive::GoneJournals;
        assert_eq!(
            parse("").unwrap().retention.gone_journals,
            GoneJournals::Archive
        );
        assert_eq!(
            parse("[retention]\ngone_journals = \"prune\"\n")
                .unwrap()
                .retention
                .gone_journals,
            GoneJournals::Prune
        );
        let error = parse("[retention]\ngone_journals = \"forget\"\n").unwrap_err();
        assert_eq!((error.line, error.column), (Some(2), Some(17)), "{error:?}");
        let retention = parse("").unwrap().retention;
        assert_eq!(retention.evidence_segment_records.get(), 8192);
        let retention = parse("[retention]\nevidence_segment_records = 3\n")
            .unwrap()
            .retention;
        assert_eq!(retention.evidence_segment_records.get(), 3);
        let error = parse("[retention]\nevidence_segment_records = 0\n").unwrap_err();
        assert_eq!(error.line, Some(2), "{error:?}");
        let error = parse("[retention]\nevidence_segment_records = -4\n").unwrap_err();
        assert_eq!(error.line, Some(2), "{error:?}");
        assert_eq!(parse("").unwrap().retention.evidence_keep_segments, None);
        let retention = parse("[retention]\nevidence_keep_segments = 4\n")
            .unwrap()
            .retention;
        assert_eq!(retention.evidence_keep_segments.map(|n| n.get()), Some(4));
        let error = parse("[retention]\nevidence_keep_segments = 0\n").unwrap_err();
        assert_eq!(error.line, Some(2), "{error:?}");
        assert_eq!(
            parse("").unwrap().retention.spend_journal_bytes.get(),
            1 << 20
        );
        let retention = parse("[retention]\nspend_journal_bytes = 4096\n")
            .unwrap()
            .retention;
        assert_eq!(retention.spend_journal_bytes.get(), 4096);
        let error = parse("[retention]\nspend_journal_bytes = 0\n").unwrap_err();
        assert_eq!(error.line, Some(2), "{error:?}");
        let error = parse("[retention]\nspend_journal_byte = 4096\n").unwrap_err();
        assert!(
            error.why.contains("did you mean `spend_journal_bytes`"),
            "{error:?}"
        );
        let error = parse("[retention]\ngone_journal = \"prune\"\n").unwrap_err();
        assert!(
            error.why.contains("did you mean `gone_journals`"),
            "{error:?}"
        );
    }

    #[test]
    fn a_misspelled_key_names_the_key_the_nearest_one_and_where() {
        let error = parse("listen = \"127.0.0.1:1\"\noperater = [\"alice\"]\n").unwrap_err();
        assert_eq!((error.line, error.column), (Some(2), Some(1)));
        assert!(error.why.contains("`operater`"), "{error}");
        assert!(error.why.contains("did you mean `operators`"), "{error}");
        let error = parse("[breakers]\nunauthorised_calls = 2\n").unwrap_err();
        assert!(
            error.why.contains("did you mean `unauthorized_calls`"),
            "{error}"
        );
        let error = parse("[mcp.x]\nurl = \"http://a\"\nalowed_tools = []\n").unwrap_err();
        assert!(
            error.why.contains("did you mean `allowed_tools`"),
            "{error}"
        );
    }

    #[test]
    fn a_syntax_error_names_line_and_column() {
        let error = parse("operators = [\"a\"\nmonitors = 3\n").unwrap_err();
        assert!(error.line.is_some() && error.column.is_some(), "{error}");
        assert_eq!(error.to_refusal().code, RefusalCode::ConfigInvalid);
    }

    #[test]
    fn every_documented_section_parses() {
        let config = parse(
            r#"
            listen = "127.0.0.1:7077"
            operators = ["operator"]
            read_timeout_ms = 3000
            [mcp.everything]
            url = "http://127.0.0.1:3001/mcp"
            allowed_tools = ["echo"]
            [model]
            base_url = "http://127.0.0.1:8081/v1"
            [prices."gpt-test"]
            input = 1.0
            output = 2.0
            [breakers]
            trip_level = "halt-all"
            [run]
            uid_range = "61184-65519"
            "#,
        )
        .unwrap();
        assert_eq!(config.read_timeout_ms, 3000);
        assert_eq!(
            config.mcp["everything"]
                .allowed_tools
                .as_ref()
                .unwrap()
                .len(),
            1
        );
    }
}
