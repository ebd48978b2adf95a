//! A breaker trip's alert webhook (`[breakers] alert_webhook`): one JSON POST of the trip's
//! `evidence-record.v1` through the gateway's pooled client (`client.rs`), bounded as a whole.
//!
//! The alert follows the stop and never stands in its way (docs/reference.md §8): it is sent off the request
//! path after the latch is durable, and every failure — no connection, a broken exchange, an
//! answer other than `2xx`, the bound passing — is an error in the log; whether to try again is
//! `alerts.rs`'s decision. A redirect is never followed: the owner configured one URL, and following a
//! `3xx` would hand the record, and any credentials of that URL, to another. Credentials in the
//! URL (`https://user:pass@host/…`) go as `Authorization: Basic`, as reqwest sent them, and
//! never appear in the log.

use crate::client::{body_bytes, UpstreamClient};
use base64::Engine;
use bytes::Bytes;
use http_body_util::Full;
use hyper::http::uri::{Authority, Uri};
use std::time::Duration;

/// The bound on one webhook exchange, from connecting to the answer's last byte.
pub(crate) const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// How a webhook exchange ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// The receiver answered `2xx`.
    Delivered,
    /// It answered another status (a redirect included, which is not followed).
    Refused(u16),
    /// The URL is not one a request can be made to.
    BadUrl,
    /// No answer: the connection or the exchange failed (the text says how).
    Failed(String),
    /// No answer within [`WEBHOOK_TIMEOUT`].
    TimedOut,
}

/// POST `body` (JSON) to `url`, bounded by `timeout`, and log any failure.
pub(crate) async fn post(
    client: &UpstreamClient,
    url: &str,
    body: String,
    timeout: Duration,
) -> Sent {
    let sent = match request(url, body) {
        None => Sent::BadUrl,
        Some(request) => match tokio::time::timeout(timeout, exchange(client, request)).await {
            Ok(sent) => sent,
            Err(_) => Sent::TimedOut,
        },
    };
    let shown = without_credentials(url);
    match &sent {
        Sent::Delivered => {}
        Sent::Refused(status) if (300..400).contains(status) => {
            tracing::error!(status, url = %shown, "breaker alert webhook answered a redirect, not followed");
        }
        Sent::Refused(status) => {
            tracing::error!(status, url = %shown, "breaker alert webhook refused the alert");
        }
        Sent::BadUrl => tracing::error!(url = %shown, "breaker alert webhook URL is not usable"),
        Sent::Failed(error) => {
            tracing::error!(%error, url = %shown, "breaker alert webhook failed")
        }
        Sent::TimedOut => {
            let timeout_s = timeout.as_secs_f64();
            tracing::error!(timeout_s, url = %shown, "breaker alert webhook timed out");
        }
    }
    sent
}

async fn exchange(client: &UpstreamClient, request: hyper::Request<Full<Bytes>>) -> Sent {
    let response = match client.send(request).await {
        Ok(response) => response,
        Err(error) => return Sent::Failed(error.to_string()),
    };
    let status = response.status().as_u16();
    // Read the answer whole, so the connection can go back to the pool.
    if let Err(error) = body_bytes(response.into_body()).await {
        return Sent::Failed(error.to_string());
    }
    if (200..300).contains(&status) {
        Sent::Delivered
    } else {
        Sent::Refused(status)
    }
}

/// The POST to `url`, its credentials (if any) moved from the URL into `Authorization`.
fn request(url: &str, body: String) -> Option<hyper::Request<Full<Bytes>>> {
    let uri: Uri = url.parse().ok()?;
    let authority = uri.authority()?;
    let mut builder = hyper::Request::post(&uri).header("content-type", "application/json");
    if let Some((userinfo, host)) = authority.as_str().rsplit_once('@') {
        let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
        let decode = |s| percent_encoding::percent_decode_str(s).decode_utf8_lossy();
        let credentials = format!("{}:{}", decode(user), decode(password));
        let basic = base64::engine::general_purpose::STANDARD.encode(credentials);
        let mut parts = uri.clone().into_parts();
        parts.authority = Some(host.parse::<Authority>().ok()?);
        builder = hyper::Request::post(Uri::from_parts(parts).ok()?)
            .header("content-type", "application/json")
            .header("authorization", format!("Basic {basic}"));
    }
    builder.body(Full::new(Bytes::from(body))).ok()
}

/// `url` as it may be logged: without what stands before an `@` in its authority.
fn without_credentials(url: &str) -> String {
    match url.parse::<Uri>() {
        Ok(uri) => match uri.authority().and_then(|a| a.as_str().rsplit_once('@')) {
            Some((_, host)) => {
                let scheme = uri.scheme_str().unwrap_or("http");
                let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("");
                format!("{scheme}://{host}{path}")
            }
            None => url.to_string(),
        },
        Err(_) => "(not a URL)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_the_url_go_as_basic_auth_and_never_in_the_log() {
        let sent = request("http://al%40ce:s%3Acret@127.0.0.1:9/hook?x=1", "{}".into()).unwrap();
        assert_eq!(sent.uri().to_string(), "http://127.0.0.1:9/hook?x=1");
        let basic = base64::engine::general_purpose::STANDARD.encode("al@ce:s:cret");
        assert_eq!(
            sent.headers()["authorization"].to_str().unwrap(),
            format!("Basic {basic}")
        );
        assert_eq!(
            without_credentials("https://u:p@hooks.example/x?y"),
            "https://hooks.example/x?y"
        );
        let plain = request("http://127.0.0.1:9/hook", "{}".into()).unwrap();
        assert!(plain.headers().get("authorization").is_none());
        assert_eq!(
            without_credentials("http://127.0.0.1:9/hook"),
            "http://127.0.0.1:9/hook"
        );
        assert!(request("not a url", "{}".into()).is_none());
        assert!(request("/relative", "{}".into()).is_none());
    }

    /// A receiver that never answers is given up at the bound; one that redirects is not
    /// followed (the exchange ends with its status, and the other place sees nothing).
    #[tokio::test]
    async fn a_hung_receiver_is_given_up_and_a_redirect_is_not_followed() {
        use stopline_testkit::upstream::{Answer, Upstream};
        let client = UpstreamClient::new();
        let hung = Upstream::start(|_| Answer::json("{}").held());
        let bound = Duration::from_millis(300);
        assert_eq!(
            post(&client, &hung.url("/hook"), "{}".into(), bound).await,
            Sent::TimedOut
        );
        assert_eq!(hung.received().len(), 1);

        let elsewhere = Upstream::start(|_| Answer::json("{}"));
        let location = elsewhere.url("/hook");
        let redirecting =
            Upstream::start(move |_| Answer::status(308, "").header("location", location.clone()));
        let sent = post(
            &client,
            &redirecting.url("/hook"),
            "{}".into(),
            WEBHOOK_TIMEOUT,
        )
        .await;
        assert_eq!(sent, Sent::Refused(308));
        assert!(
            elsewhere.received().is_empty(),
            "{:?}",
            elsewhere.received()
        );

        let fine = Upstream::start(|_| Answer::status(204, ""));
        let sent = post(
            &client,
            &fine.url("/hook"),
            "{\"a\":1}".into(),
            WEBHOOK_TIMEOUT,
        )
        .await;
        assert_eq!(sent, Sent::Delivered);
        assert_eq!(fine.received()[0].body, "{\"a\":1}");
    }
}
