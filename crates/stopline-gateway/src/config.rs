//! The gateway's part of `config.toml` (docs/reference.md §8): `[mcp.<server>]` upstreams, the `[model]`
//! and `[anthropic]` upstreams, `[breakers]`, and the alert hooks, on top of the shared
//! [`stopline_control::config::Config`] (operators, monitors, timeouts, prices).
//!
//! The sections are typed in [`stopline_control::config`] (one strict parser for every reader);
//! this file interprets them for the gateway. A section that does not parse, or names a key
//! that does not exist, is an error at start-up (`config_invalid`): a typo must not silently
//! drop an `allowed_tools` list or a breaker threshold.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
pub use stopline_control::config::{
    A2aAgentConfig, AnthropicConfig, BreakerConfig, Config, McpServerConfig, ModelConfig, Price,
};
use stopline_core::Level;

/// The configuration a gateway runs on, swapped whole when it reloads (`reload.rs`).
pub type SharedConfig = std::sync::Arc<arc_swap::ArcSwap<GatewayConfig>>;

/// Everything the gateway reads from its configuration file.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The shared keys (listen, operators, monitors, timeouts, prices).
    pub base: Config,
    /// `[mcp.<server>]` sections by server name.
    pub mcp: BTreeMap<String, McpServerConfig>,
    /// Each `[mcp.<server>]`'s `headers`, their `${env:…}`/`${file:…}` resolved (only servers
    /// that name some).
    pub mcp_headers: BTreeMap<String, UpstreamHeaders>,
    /// `[a2a.<name>]` remote agents by name, their headers resolved (`a2a.rs`).
    pub a2a: BTreeMap<String, A2aAgent>,
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
    /// Whether the file names `operators` (false: the default `["operator"]` is in force).
    pub operators_set: bool,
}

/// A configuration that cannot be used (`config_invalid`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("config_invalid: {why}")]
pub struct GatewayConfigError {
    /// The file.
    pub path: String,
    /// What is wrong, naming the file (and line and column when there is one).
    pub why: String,
}

impl GatewayConfigError {
    /// The refusal `serve` answers with.
    pub fn to_refusal(&self) -> stopline_core::Refusal {
        stopline_core::Refusal::new(stopline_core::RefusalCode::ConfigInvalid, self.why.clone())
    }
}

impl GatewayConfig {
    /// Load `path` (a missing file gives the defaults).
    pub fn load(path: &Path) -> Result<GatewayConfig, GatewayConfigError> {
        let error = |why: String| GatewayConfigError {
            path: path.display().to_string(),
            why: format!("{}: {why}", path.display()),
        };
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(error(e.to_string())),
        };
        let base = Config::load(path).map_err(|e| GatewayConfigError {
            path: e.path.clone(),
            why: e.to_string(),
        })?;
        let mut config =
            GatewayConfig::from_base_in(base, path.parent().filter(|p| !p.as_os_str().is_empty()))
                .map_err(error)?;
        config.config_hash = hex::encode(sha2::Sha256::digest(&bytes));
        // (The file parsed above, so it is UTF-8 TOML; a missing file sets nothing.)
        config.operators_set = std::str::from_utf8(&bytes)
            .ok()
            .and_then(|text| text.parse::<toml::Table>().ok())
            .is_some_and(|table| table.contains_key("operators"));
        Ok(config)
    }

    /// Interpret the gateway sections of an already parsed config (a relative `${file:…}`
    /// path is relative to the working directory).
    pub fn from_base(base: Config) -> Result<GatewayConfig, String> {
        GatewayConfig::from_base_in(base, None)
    }

    /// [`GatewayConfig::from_base`] for the file in `dir`: a relative `${file:…}` path is
    /// relative to `dir`.
    pub fn from_base_in(base: Config, dir: Option<&Path>) -> Result<GatewayConfig, String> {
        let mcp = base.mcp.clone();
        let mut mcp_headers = BTreeMap::new();
        for (name, server) in &mcp {
            if server.headers.is_empty() {
                continue;
            }
            if server.url.is_none() {
                return Err(format!(
                    "[mcp.{name}] headers: only a url upstream takes headers (a stdio server gets env)"
                ));
            }
            mcp_headers.insert(
                name.clone(),
                UpstreamHeaders::resolve(&format!("mcp.{name}"), &server.headers, dir)?,
            );
        }
        let mut a2a = BTreeMap::new();
        for (name, agent) in &base.a2a {
            a2a.insert(name.clone(), A2aAgent::resolve(name, agent, dir)?);
        }
        let model = base.model.clone();
        let anthropic = base.anthropic.clone();
        let breakers = base.breakers.clone();
        let trip_level = Level::parse(&breakers.trip_level)
            .map_err(|r| format!("[breakers] trip_level: {}", r.message))?;
        Ok(GatewayConfig {
            base,
            mcp,
            mcp_headers,
            a2a,
            model,
            anthropic,
            breakers,
            trip_level,
            config_hash: String::new(),
            // Only a file read by `load` can tell: a configuration built in code claims nothing.
            operators_set: true,
        })
    }

    /// What `serve` warns about at start-up: a configuration that runs, but probably not as
    /// meant — no `[model]`, a tool server whose command cannot be found, `operators` left at
    /// its default.
    pub fn startup_warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.model.is_none() {
            warnings.push(
                "config.toml has no [model] section: the model routes (/v1/chat/completions, \
                 /v1/completions, /v1/embeddings) answer upstream_error until one names base_url"
                    .to_string(),
            );
        }
        for (name, server) in &self.mcp {
            let Some(program) = server.command.as_ref().and_then(|c| c.first()) else {
                continue;
            };
            let path = server
                .env
                .get("PATH")
                .cloned()
                .or_else(|| std::env::var("PATH").ok())
                .unwrap_or_default();
            if find_program(program, &path).is_none() {
                warnings.push(format!(
                    "[mcp.{name}] command {program:?} does not exist on PATH ({path}): every session of {name} will fail to start"
                ));
            }
        }
        if !self.operators_set {
            warnings.push(format!(
                "config.toml does not set operators: the default {:?} is in force, so whoever gives --by {} at the owner console may recover, drain and reconcile; name the people who may",
                self.base.operators,
                self.base.operators.first().map(String::as_str).unwrap_or("operator")
            ));
        }
        warnings
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

/// One upstream's own headers (`[mcp.<server>] headers`), resolved: sent to that upstream only.
/// Their values are credentials: marked sensitive, and never printed (`Debug` names the
/// headers only).
#[derive(Clone, Default, PartialEq)]
pub struct UpstreamHeaders(pub axum::http::HeaderMap);

impl std::fmt::Debug for UpstreamHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.keys().map(|k| format!("{k}: <redacted>")))
            .finish()
    }
}

/// Headers the proxy itself decides, which a configured header may not replace.
const PROXY_HEADERS: [&str; 8] = [
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

impl UpstreamHeaders {
    /// `headers` of the section `[<section>]` (`mcp.<server>`, `a2a.<name>`), each value's `${env:NAME}` and `${file:PATH}` replaced
    /// (a file's trailing newline dropped). An error names the header and the reference, never
    /// a value.
    pub fn resolve(
        section: &str,
        headers: &BTreeMap<String, String>,
        dir: Option<&Path>,
    ) -> Result<UpstreamHeaders, String> {
        use axum::http::{HeaderName, HeaderValue};
        let mut out = axum::http::HeaderMap::with_capacity(headers.len());
        for (name, template) in headers {
            let at = |why: String| format!("[{section}] headers.{name}: {why}");
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| at("not a valid header name".into()))?;
            if PROXY_HEADERS.contains(&header.as_str()) {
                return Err(at("set by the proxy itself, not configurable".into()));
            }
            let text = resolve_value(template, dir).map_err(at)?;
            let mut value = HeaderValue::from_str(&text)
                .map_err(|_| at("the resolved value is not a valid header value".into()))?;
            value.set_sensitive(true);
            out.insert(header, value);
        }
        Ok(UpstreamHeaders(out))
    }
}

/// One `[a2a.<name>]` remote agent, ready to be called: its endpoint and card parsed, its
/// headers resolved.
#[derive(Debug, Clone)]
pub struct A2aAgent {
    /// The agent's JSON-RPC endpoint.
    pub url: String,
    /// Where its card is read.
    pub card_url: String,
    /// Its own credentials, sent to it only.
    pub headers: UpstreamHeaders,
    /// How long one exchange may take, a stream included.
    pub timeout: Duration,
}

impl A2aAgent {
    fn resolve(name: &str, agent: &A2aAgentConfig, dir: Option<&Path>) -> Result<A2aAgent, String> {
        let section = format!("a2a.{name}");
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid_name {
            return Err(format!(
                "[{section}]: a name of letters, digits, `-` and `_` (it is a path segment of /a2a/<name>)"
            ));
        }
        let http = |url: &str, key: &str| -> Result<(), String> {
            let parsed: axum::http::Uri = url
                .parse()
                .map_err(|_| format!("[{section}] {key}: not a URL: {url:?}"))?;
            match parsed.scheme_str() {
                Some("http" | "https") if parsed.host().is_some() => Ok(()),
                _ => Err(format!(
                    "[{section}] {key}: an http or https URL, not {url:?}"
                )),
            }
        };
        http(&agent.url, "url")?;
        let card_url = match &agent.card_url {
            Some(card) => card.clone(),
            None => format!(
                "{}/.well-known/agent-card.json",
                agent.url.trim_end_matches('/')
            ),
        };
        http(&card_url, "card_url")?;
        Ok(A2aAgent {
            url: agent.url.clone(),
            card_url,
            headers: UpstreamHeaders::resolve(&section, &agent.headers, dir)?,
            timeout: Duration::from_secs(agent.timeout_s.unwrap_or(600)),
        })
    }
}

/// `template` with every `${env:NAME}` and `${file:PATH}` replaced.
fn resolve_value(template: &str, dir: Option<&Path>) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unclosed ${{ in {template:?}"))?;
        let reference = &after[..end];
        let value = match reference.split_once(':') {
            Some(("env", name)) => std::env::var(name)
                .map_err(|_| format!("${{env:{name}}} is not set in the gateway's environment"))?,
            Some(("file", file)) => {
                let path = match dir {
                    Some(dir) => dir.join(file),
                    None => Path::new(file).to_path_buf(),
                };
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    format!("${{file:{file}}} cannot be read ({}): {e}", path.display())
                })?;
                text.trim_end_matches(['\n', '\r']).to_string()
            }
            _ => {
                return Err(format!(
                    "${{{reference}}} is neither ${{env:NAME}} nor ${{file:PATH}}"
                ))
            }
        };
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Where `program` would be found: itself when it names a path (it has a `/`), else the first
/// executable file of that name in the `:`-separated `path`.
fn find_program(program: &str, path: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let runnable = |candidate: &Path| {
        std::fs::metadata(candidate)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let candidate = Path::new(program).to_path_buf();
        return runnable(&candidate).then_some(candidate);
    }
    path.split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| runnable(candidate))
}

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
        let typo: Result<Config, _> =
            toml::from_str("[anthropic]\nbase_url = \"x\"\napi_key = \"k\"\n");
        assert!(typo.is_err(), "an unknown [anthropic] key is refused");
        assert_eq!(config.breakers.refused_egress, 3);
        assert_eq!(config.trip_level, Level::HaltAll);
        let bad: Config = toml::from_str("[breakers]\ntrip_level = \"stop\"\n").unwrap();
        assert!(GatewayConfig::from_base(bad).is_err());
        let bad: Result<Config, _> =
            toml::from_str("[mcp.x]\nurl = \"u\"\nunresolved_blocks = \"some\"\n");
        assert!(bad.is_err());
    }
}

#[cfg(test)]
mod upstream_header_tests {
    use super::*;

    fn load(text: &str, dir: Option<&Path>) -> Result<GatewayConfig, String> {
        GatewayConfig::from_base_in(toml::from_str(text).unwrap(), dir)
    }

    #[test]
    fn upstream_headers_resolve_env_and_file_and_a_missing_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        #[allow(clippy::disallowed_methods)] // a test's own fixture
        std::fs::write(dir.path().join("key"), "from-file\n").unwrap();
        // A variable no test sets, and one this test's process holds.
        let (name, value) = std::env::vars()
            .find(|(k, v)| k == "PATH" && !v.is_empty())
            .expect("PATH is set");
        let text = format!(
            "[mcp.remote]\nurl = \"http://127.0.0.1:1/mcp\"\n[mcp.remote.headers]\nAuthorization = \"Bearer ${{env:{name}}}\"\nX-Key = \"${{file:key}}\"\n"
        );
        let config = load(&text, Some(dir.path())).unwrap();
        let headers = &config.mcp_headers["remote"].0;
        assert_eq!(headers["authorization"], format!("Bearer {value}").as_str());
        assert_eq!(headers["x-key"], "from-file");
        assert!(headers["authorization"].is_sensitive());
        let printed = format!("{config:?}");
        assert!(!printed.contains("from-file"), "{printed}");

        for (bad, named) in [
            (
                "Authorization = \"Bearer ${env:STOPLINE_TEST_NEVER_SET_3F1}\"",
                "STOPLINE_TEST_NEVER_SET_3F1",
            ),
            ("X-Key = \"${file:absent}\"", "absent"),
            ("X-Key = \"${vault:x}\"", "vault:x"),
            ("Host = \"evil\"", "set by the proxy"),
        ] {
            let text = format!(
                "[mcp.remote]\nurl = \"http://127.0.0.1:1/mcp\"\n[mcp.remote.headers]\n{bad}\n"
            );
            let why = load(&text, Some(dir.path())).unwrap_err();
            assert!(
                why.contains("[mcp.remote] headers.") && why.contains(named),
                "{why}"
            );
        }
        let a2a = load(
            "[a2a.remote]\nurl = \"http://127.0.0.1:9/rpc/\"\nheaders = { X-Key = \"${file:key}\" }\n",
            Some(dir.path()),
        )
        .unwrap();
        let remote = &a2a.a2a["remote"];
        assert_eq!(
            remote.card_url,
            "http://127.0.0.1:9/rpc/.well-known/agent-card.json"
        );
        assert_eq!(remote.headers.0["x-key"], "from-file");
        assert_eq!(remote.timeout, Duration::from_secs(600));
        for (bad, named) in [
            ("[a2a.remote]\nurl = \"ftp://x/\"\n", "[a2a.remote] url"),
            ("[a2a.\"a/b\"]\nurl = \"http://x/\"\n", "path segment"),
            (
                "[a2a.remote]\nurl = \"http://x/\"\nheaders = { Host = \"h\" }\n",
                "[a2a.remote] headers.Host",
            ),
        ] {
            let why = load(bad, Some(dir.path())).unwrap_err();
            assert!(why.contains(named), "{why}");
        }
        let typo: Result<Config, _> =
            toml::from_str("[a2a.remote]\nurl = \"http://x/\"\nheader = {}\n");
        assert!(typo.is_err(), "an unknown [a2a.<name>] key is refused");
        let stdio = "[mcp.local]\ncommand = [\"x\"]\nheaders = { X-Key = \"k\" }\n";
        assert!(load(stdio, None)
            .unwrap_err()
            .contains("only a url upstream"));
    }
}
