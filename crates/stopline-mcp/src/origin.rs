//! Which web origins may use the MCP proxy (docs/reference.md §8): a request whose `Origin`
//! header is present and not allowed is refused 403 before anything else is read (MCP's DNS
//! rebinding protection; the upstream never sees the agent's `Origin`, so only the gateway can
//! check it). An allowed origin gets the CORS headers a browser-based MCP client needs: its
//! preflight answered, and `Mcp-Session-Id` exposed on every answer.

use crate::reply::json_reply;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use stopline_core::{Refusal, RefusalCode};

/// The methods of `/mcp/<server>`.
pub const METHODS: &str = "GET, POST, DELETE, OPTIONS";
/// The request headers an MCP client sends.
const ALLOWED_HEADERS: &str =
    "authorization, content-type, accept, mcp-session-id, mcp-protocol-version, last-event-id";
/// The answer headers a browser lets the client read.
const EXPOSED_HEADERS: &str = "mcp-session-id, mcp-protocol-version, www-authenticate";

/// The origins served: `allowed_origins`, or the loopback ones when it is absent.
#[derive(Debug, Clone)]
pub enum Origins {
    /// `http`/`https` on `localhost`, `127.0.0.1` or `[::1]`, any port.
    Loopback,
    /// Exactly these (scheme, host and port; compared without case or a trailing `/`).
    Listed(Vec<String>),
}

impl Origins {
    /// The configured list, or the loopback default.
    pub fn new(allowed: Option<Vec<String>>) -> Origins {
        match allowed {
            None => Origins::Loopback,
            Some(list) => Origins::Listed(
                list.iter()
                    .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                    .collect(),
            ),
        }
    }

    /// Whether `origin` is served.
    pub fn allows(&self, origin: &str) -> bool {
        let origin = origin.trim_end_matches('/').to_ascii_lowercase();
        match self {
            Origins::Listed(list) => list.contains(&origin),
            Origins::Loopback => {
                let Ok(uri) = origin.parse::<axum::http::Uri>() else {
                    return false;
                };
                let scheme = matches!(uri.scheme_str(), Some("http" | "https"));
                let path = uri.path_and_query().is_none_or(|p| p.as_str() == "/");
                let host = matches!(
                    uri.host(),
                    Some("localhost" | "127.0.0.1" | "[::1]" | "::1")
                );
                scheme && path && host && uri.authority().is_some_and(|a| !a.as_str().contains('@'))
            }
        }
    }

    /// The request's `Origin` when it is allowed (`None`: it sent none), or the 403 that
    /// refuses it.
    pub fn check(&self, headers: &HeaderMap) -> Result<Option<HeaderValue>, Box<Response>> {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(None);
        };
        match origin.to_str() {
            Ok(text) if self.allows(text) => Ok(Some(origin.clone())),
            _ => Err(Box::new(refused(origin))),
        }
    }
}

/// The 403 for an origin that is not allowed: a JSON-RPC error with no id, as any refusal of a
/// request the proxy did not read.
fn refused(origin: &HeaderValue) -> Response {
    let refusal = Refusal::new(
        RefusalCode::BadRequest,
        format!(
            "Origin {:?} is not in the gateway's allowed_origins",
            String::from_utf8_lossy(origin.as_bytes())
        ),
    );
    let message = crate::govern::refusal_response(serde_json::Value::Null, &refusal);
    json_reply(403, crate::jsonrpc::Incoming::Single(message).to_bytes())
}

/// `response` with the CORS headers of an allowed `origin` (unchanged without one).
pub fn with_cors(origin: Option<HeaderValue>, mut response: Response) -> Response {
    if let Some(origin) = origin {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSED_HEADERS),
        );
        headers.append(header::VARY, HeaderValue::from_static("origin"));
    }
    response
}

/// The answer to an allowed origin's preflight.
pub fn preflight(origin: HeaderValue) -> Response {
    let response = (
        StatusCode::NO_CONTENT,
        [
            (
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static(METHODS),
            ),
            (
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static(ALLOWED_HEADERS),
            ),
            (
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("600"),
            ),
        ],
    )
        .into_response();
    with_cors(Some(origin), response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_origins_are_the_default_and_a_list_replaces_them() {
        let loopback = Origins::new(None);
        for allowed in [
            "http://localhost",
            "http://localhost:6274",
            "https://127.0.0.1:8443",
            "http://[::1]:3000",
            "HTTP://LOCALHOST:1/",
        ] {
            assert!(loopback.allows(allowed), "{allowed}");
        }
        for refused in [
            "http://evil.example.com",
            "http://localhost.evil.example.com",
            "null",
            "file://localhost",
            "http://127.0.0.2",
            "http://localhost:1/path",
            "",
        ] {
            assert!(!loopback.allows(refused), "{refused}");
        }
        let listed = Origins::new(Some(vec!["https://app.example.com/".into()]));
        assert!(listed.allows("https://APP.example.com"));
        assert!(!listed.allows("http://app.example.com"));
        assert!(!listed.allows("http://localhost:6274"));
    }
}
