//! A request to a model upstream before it is sent: its URL, headers, body and the time its
//! whole exchange may take, and the upstream key it carries. A leaf below the routes that
//! build requests (`model.rs`, `anthropic.rs`, `responses.rs`) and `exchange.rs`, which sends
//! them: it knows nothing of admission.

use crate::client::{body_bytes, UpstreamClient};
use crate::error::GatewayError;
use axum::body::Bytes;
use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode, Uri};
use http_body_util::Full;
use std::time::Duration;

/// The upstream key from the gateway's environment variable `name`, if set and not empty.
pub(crate) fn upstream_key(name: Option<&str>) -> Option<String> {
    name.and_then(|name| std::env::var(name).ok())
        .filter(|k| !k.is_empty())
}

/// A model request ready to go upstream, and how long its whole exchange may take.
pub struct Outgoing {
    pub(crate) request: hyper::Request<Full<Bytes>>,
    pub(crate) timeout: Duration,
}

impl Outgoing {
    /// A `POST` of `body` (JSON) to `url`, whose exchange may take `timeout` from sending to
    /// the answer's last byte. A URL that is not one refuses the call before anything is
    /// admitted or sent.
    pub fn post(url: &str, timeout: Duration, body: Bytes) -> Result<Outgoing, GatewayError> {
        Outgoing::new(Method::POST, url, timeout, body)
    }

    /// A `method` request of `body` to `url` (see [`Outgoing::post`]).
    pub fn new(
        method: Method,
        url: &str,
        timeout: Duration,
        body: Bytes,
    ) -> Result<Outgoing, GatewayError> {
        let uri: Uri = url.parse().map_err(|error| {
            GatewayError::Upstream(format!(
                "the model upstream URL {url:?} is not a URL: {error}"
            ))
        })?;
        let mut request = hyper::Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        Ok(Outgoing { request, timeout })
    }

    /// Add a header (a value that cannot be sent refuses the call before anything is sent).
    pub fn header(&mut self, name: HeaderName, value: &[u8]) -> Result<(), GatewayError> {
        let value = HeaderValue::from_bytes(value).map_err(|_| {
            GatewayError::Upstream(format!(
                "the {name} header for the model upstream is not a valid header value"
            ))
        })?;
        self.request.headers_mut().append(name, value);
        Ok(())
    }
}

impl Outgoing {
    /// Send it and read the answer whole, all within its timeout: the status, content type and
    /// body, or why there is none (for the short requests of `responses.rs`).
    pub(crate) async fn send_whole(
        self,
        client: &UpstreamClient,
    ) -> Result<(StatusCode, String, Bytes), String> {
        let timeout = self.timeout;
        let exchange = async {
            let response = client.send(self.request).await.map_err(|e| e.to_string())?;
            let (parts, body) = response.into_parts();
            let content_type = parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("application/json")
                .to_string();
            let body = body_bytes(body).await.map_err(|e| e.to_string())?;
            Ok((parts.status, content_type, body))
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {} s", timeout.as_secs())))
    }
}
