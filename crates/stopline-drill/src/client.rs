//! The callers' HTTP client: hyper-util's pooled client (the one the MCP proxy forwards with and
//! `stopline bench gateway`'s bare proxy uses), plain HTTP to the gateway on loopback.
//!
//! It replaced a `reqwest::Client` in the callers' loop because the profile of the drill's floor
//! (every call refused, so the load generator is half of the work) showed reqwest's own
//! per-request work — its redirect layer re-parsing every URL, the request builder, a boxed
//! future per send, the response wrappers — as much of the callers' CPU, which the two cores
//! share with the gateway they measure. What a caller sends is built once where it can be (the
//! URL parsed once per drill, the `Authorization` value once per caller) and the answer is read
//! into the few fields a caller classifies by, not into a tree. Behaviour kept: no proxy,
//! `TCP_NODELAY`, a pool large enough for every caller, a 30 s bound on every call, redirects
//! not followed.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::time::Duration;
use stopline_gateway::client::error_chain;

/// The bound on one call, answer read included.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The pooled client; cheap to clone (the pool is shared).
#[derive(Clone, Debug)]
pub struct CallerClient {
    inner: Client<HttpConnector, Full<Bytes>>,
}

/// An answer: its status and its body, read whole.
#[derive(Debug)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: Bytes,
}

impl CallerClient {
    /// A client that keeps up to `idle` connections to the gateway.
    pub fn new(idle: usize) -> CallerClient {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(10)));
        let inner = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_max_idle_per_host(idle)
            .build(http);
        CallerClient { inner }
    }

    /// `POST` `body` (JSON) to `uri` as `authorization`, with `extra` headers; the answer, or
    /// why there was none.
    pub async fn post(
        &self,
        uri: &Uri,
        authorization: &HeaderValue,
        extra: &[(HeaderName, HeaderValue)],
        body: Vec<u8>,
    ) -> Result<Reply, String> {
        let request = request(uri, authorization, extra, body);
        let exchange = async {
            let response = self
                .inner
                .request(request)
                .await
                .map_err(|e| error_chain(&e))?;
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| error_chain(&e))?
                .to_bytes();
            Ok(Reply { status, body })
        };
        match tokio::time::timeout(CALL_TIMEOUT, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("no answer within {} s", CALL_TIMEOUT.as_secs())),
        }
    }

    /// `POST` as [`CallerClient::post`] does, but hand back the answer's body to be read as it
    /// comes (a stream): its status and body. The bound holds only until the answer's head.
    pub async fn open(
        &self,
        uri: &Uri,
        authorization: &HeaderValue,
        extra: &[(HeaderName, HeaderValue)],
        body: Vec<u8>,
    ) -> Result<(u16, hyper::body::Incoming), String> {
        let request = request(uri, authorization, extra, body);
        match tokio::time::timeout(CALL_TIMEOUT, self.inner.request(request)).await {
            Ok(Ok(response)) => Ok((response.status().as_u16(), response.into_body())),
            Ok(Err(e)) => Err(error_chain(&e)),
            Err(_) => Err(format!("no answer within {} s", CALL_TIMEOUT.as_secs())),
        }
    }
}

/// A JSON `POST` of `body` to `uri` as `authorization`, with `extra` headers.
fn request(
    uri: &Uri,
    authorization: &HeaderValue,
    extra: &[(HeaderName, HeaderValue)],
    body: Vec<u8>,
) -> Request<Full<Bytes>> {
    let mut request = Request::new(Full::new(Bytes::from(body)));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = uri.clone();
    let headers = request.headers_mut();
    headers.insert(AUTHORIZATION, authorization.clone());
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    for (name, value) in extra {
        headers.insert(name.clone(), value.clone());
    }
    request
}
