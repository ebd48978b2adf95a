//! The HTTP client every upstream exchange goes through (the MCP proxy's Streamable HTTP
//! upstreams, the model routes' `[model]`/`[anthropic]` upstreams, the breakers' alert webhooks
//! and the bench's built-in passthrough): hyper-util's pooled client
//! (the one `stopline bench gateway`'s bare proxy uses), over plain HTTP or HTTPS (rustls, the
//! web PKI roots, as reqwest had them).
//!
//! It replaced `reqwest::Client` because the profile of the read-only path showed reqwest's own
//! per-request work (its redirect layer re-parses every URI, a boxed future per send, its own
//! request and response wrappers) as the largest item the gateway added over the bare proxy. Behaviour kept: a 10 s connect timeout, no proxy, `TCP_NODELAY`,
//! idle connections pooled per host and dropped after 90 s, no overall timeout (a stream can
//! last), and "could not connect" told apart from a failure after the message may have been
//! delivered. Redirects are not followed: an upstream's `3xx` is passed back to the agent as the
//! upstream said it (a proxy that followed one would forward a governed message to a URL the
//! owner never configured).

use bytes::Bytes;
use futures::Stream;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::time::Duration;

/// How long connecting to an upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an idle pooled connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// An upstream's answer, its body not read yet.
pub type UpstreamResponse = hyper::Response<Incoming>;

/// Why a request to an upstream failed.
#[derive(Debug)]
pub struct UpstreamError {
    connect: bool,
    text: String,
}

impl UpstreamError {
    fn new(error: &(dyn std::error::Error + 'static), connect: bool) -> UpstreamError {
        UpstreamError {
            connect,
            text: error_chain(error),
        }
    }

    /// True when no connection could be made: nothing was delivered.
    pub fn is_connect(&self) -> bool {
        self.connect
    }
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// An error with its causes, `: `-separated: hyper-util's own text ("client error (Connect)")
/// says little alone.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The pooled client; cheap to clone (the pool is shared).
#[derive(Clone, Debug)]
pub struct UpstreamClient {
    inner: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Default for UpstreamClient {
    fn default() -> UpstreamClient {
        UpstreamClient::new()
    }
}

impl UpstreamClient {
    /// A client with the settings above.
    pub fn new() -> UpstreamClient {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        // The TLS layer below decides the scheme.
        http.enforce_http(false);
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        // ring implements every protocol version rustls enables by default, so this cannot fail.
        let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("ring offers rustls' default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let inner = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(IDLE_TIMEOUT)
            .build(connector);
        UpstreamClient { inner }
    }

    /// Send `request` and wait for the upstream's status line and headers.
    pub async fn send(
        &self,
        request: hyper::Request<Full<Bytes>>,
    ) -> Result<UpstreamResponse, UpstreamError> {
        self.inner.request(request).await.map_err(|error| {
            let connect = error.is_connect();
            UpstreamError::new(&error, connect)
        })
    }
}

/// Read an answer's body whole.
pub async fn body_bytes(body: Incoming) -> Result<Bytes, UpstreamError> {
    body.collect()
        .await
        .map(|collected| collected.to_bytes())
        .map_err(|error| UpstreamError::new(&error, false))
}

/// An answer's body as the stream of its data chunks (for SSE).
pub fn body_stream(
    body: Incoming,
) -> impl Stream<Item = Result<Bytes, UpstreamError>> + Send + 'static {
    futures::StreamExt::map(body.into_data_stream(), |chunk| {
        chunk.map_err(|error| UpstreamError::new(&error, false))
    })
}
