//! The agent's environment: the caller's, minus every provider key and the control directory's
//! location, plus the session's token and the gateway's addresses.
//!
//! Provider keys are scrubbed by a fixed list and by the `*_API_KEY` pattern, so an agent can
//! only reach a model through the gateway, which holds the upstream key. `OPENAI_API_KEY` and
//! `ANTHROPIC_API_KEY` are set to the agent's own token, and `OPENAI_BASE_URL` /
//! `ANTHROPIC_BASE_URL` to the gateway, so OpenAI and Anthropic SDKs (and Claude Code)
//! authenticate to the gateway. This module never reads
//! a key's value and never logs the token.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

/// Provider credentials removed from every agent's environment (besides any `*_API_KEY`).
pub const PROVIDER_KEYS: [&str; 14] = [
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "GOOGLE_API_KEY",
    "GEMINI_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "MISTRAL_API_KEY",
    "COHERE_API_KEY",
    "GROQ_API_KEY",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
];

/// Variables the agent never inherits from the caller: the control directory's location and
/// any session of the caller's own (the run sets its own).
const NEVER_INHERITED: [&str; 4] = [
    "STOPLINE_HOME",
    "STOPLINE_TOKEN",
    "STOPLINE_SESSION",
    "STOPLINE_URL",
];

/// True for a variable that must not reach the agent from the caller.
pub fn is_scrubbed(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    let upper = name.to_ascii_uppercase();
    PROVIDER_KEYS.contains(&upper.as_str())
        || NEVER_INHERITED.contains(&upper.as_str())
        || upper.ends_with("_API_KEY")
}

/// What the run adds.
#[derive(Debug, Clone)]
pub struct Session<'a> {
    /// The agent's token.
    pub token: &'a str,
    /// `<run_id>/<agent>`.
    pub session: String,
    /// The gateway's base URL as the agent reaches it.
    pub gateway_url: &'a str,
    /// The user the agent runs as, for `HOME`, `USER` and `LOGNAME` (confined runs).
    pub user: Option<(&'a str, &'a std::path::Path)>,
}

/// The agent's complete environment, from the caller's variables.
pub fn agent_environment(
    caller: impl IntoIterator<Item = (OsString, OsString)>,
    session: &Session<'_>,
) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = caller
        .into_iter()
        .filter(|(name, _)| !is_scrubbed(name))
        .collect();
    let mut set = |name: &str, value: &OsStr| {
        env.insert(OsString::from(name), value.to_owned());
    };
    set("STOPLINE_TOKEN", OsStr::new(session.token));
    set("STOPLINE_SESSION", OsStr::new(&session.session));
    set("STOPLINE_URL", OsStr::new(session.gateway_url));
    set(
        "OPENAI_BASE_URL",
        OsStr::new(&format!("{}/v1", session.gateway_url)),
    );
    set("OPENAI_API_KEY", OsStr::new(session.token));
    // The Anthropic SDKs and Claude Code append `/v1/messages` themselves.
    set("ANTHROPIC_BASE_URL", OsStr::new(session.gateway_url));
    set("ANTHROPIC_API_KEY", OsStr::new(session.token));
    if let Some((name, home)) = session.user {
        set("HOME", home.as_os_str());
        set("USER", OsStr::new(name));
        set("LOGNAME", OsStr::new(name));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_keys_and_the_home_are_scrubbed_and_the_session_set() {
        let caller = [
            ("PATH", "/bin"),
            ("OPENAI_API_KEY", "sk-real"),
            ("ANTHROPIC_API_KEY", "a"),
            ("ANTHROPIC_AUTH_TOKEN", "oauth"),
            ("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
            ("HF_TOKEN", "h"),
            ("AWS_SESSION_TOKEN", "s"),
            ("MY_VENDOR_API_KEY", "v"),
            ("STOPLINE_HOME", "/secret"),
            ("STOPLINE_TOKEN", "the-callers-own"),
            ("KEEP_ME", "1"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let session = Session {
            token: "stl1.t",
            session: "run-1/agent-a".into(),
            gateway_url: "http://127.0.0.1:7077",
            user: None,
        };
        let env = agent_environment(caller, &session);
        let get = |k: &str| {
            env.get(OsStr::new(k))
                .map(|v| v.to_string_lossy().into_owned())
        };
        assert_eq!(get("OPENAI_API_KEY").as_deref(), Some("stl1.t"));
        assert_eq!(get("STOPLINE_TOKEN").as_deref(), Some("stl1.t"));
        assert_eq!(get("STOPLINE_SESSION").as_deref(), Some("run-1/agent-a"));
        assert_eq!(
            get("OPENAI_BASE_URL").as_deref(),
            Some("http://127.0.0.1:7077/v1")
        );
        assert_eq!(get("ANTHROPIC_API_KEY").as_deref(), Some("stl1.t"));
        assert_eq!(
            get("ANTHROPIC_BASE_URL").as_deref(),
            Some("http://127.0.0.1:7077")
        );
        for gone in [
            "ANTHROPIC_AUTH_TOKEN",
            "HF_TOKEN",
            "AWS_SESSION_TOKEN",
            "MY_VENDOR_API_KEY",
            "STOPLINE_HOME",
        ] {
            assert_eq!(get(gone), None, "{gone}");
        }
        assert_eq!(get("KEEP_ME").as_deref(), Some("1"));
        assert_eq!(get("PATH").as_deref(), Some("/bin"));
    }
}
