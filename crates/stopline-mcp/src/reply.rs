//! How the MCP proxy answers an agent itself: a refused JSON-RPC request as its JSON-RPC error
//! with HTTP 200, so that an MCP client raises its protocol error with the refusal's text
//! (docs/reference.md §8); refusals of what is not a request (a token, a session, a `GET`
//! stream, a frame of notifications) as JSON-RPC errors with the HTTP status the gateway gives
//! the same refusal; and the messages of a reply gathered for a batch's answer. Nothing here
//! decides anything; it only shapes replies.

use crate::govern::Governed;
use crate::jsonrpc::{Incoming, Message};
use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use stopline_core::Refusal;
use stopline_gateway::{refusal_status, retry_after_s};

/// A JSON body with `status`.
pub fn json_reply(status: u16, body: Vec<u8>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// A refusal as a JSON-RPC error (id `id`, `null` when unknown) with its HTTP status.
pub fn refusal_reply(id: Option<serde_json::Value>, refusal: &Refusal) -> Response {
    let message = crate::govern::refusal_response(id.unwrap_or_default(), refusal);
    with_retry_after(
        json_reply(
            refusal_status(refusal).as_u16(),
            Incoming::Single(message).to_bytes(),
        ),
        refusal,
    )
}

/// Add `Retry-After` where waiting can help (a queue timeout, an open upstream breaker).
fn with_retry_after(mut reply: Response, refusal: &Refusal) -> Response {
    if let Some(seconds) = retry_after_s(refusal) {
        reply
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    reply
}

/// The reply when nothing of a frame was forwarded: its local errors (HTTP 200: each is the
/// JSON-RPC answer to its request), or, when it held no request, the first refusal.
pub fn local_reply(governed: Governed) -> Response {
    match (governed.is_batch(), governed.local.len()) {
        (false, 1) => {
            let reply = json_reply(
                200,
                Incoming::Single(governed.local.into_iter().next().expect("one")).to_bytes(),
            );
            match governed.refusals.first() {
                Some(refusal) => with_retry_after(reply, refusal),
                None => reply,
            }
        }
        (_, 0) => match governed.refusals.first() {
            Some(refusal) => refusal_reply(None, refusal),
            None => StatusCode::ACCEPTED.into_response(),
        },
        _ => json_reply(200, Incoming::Batch(governed.local).to_bytes()),
    }
}

/// The JSON-RPC messages of a reply the proxy built (a JSON body or an SSE stream, read to its
/// end), for gathering a batch's answers.
pub async fn reply_messages(reply: Response) -> Vec<Message> {
    let sse = reply
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let Ok(bytes) = axum::body::to_bytes(reply.into_body(), crate::sse::MAX_EVENT_BYTES).await
    else {
        return Vec::new();
    };
    let frames: Vec<Incoming> = if sse {
        let mut splitter = crate::sse::Splitter::default();
        let _ = splitter.push(&bytes);
        let _ = splitter.push(b"\n\n");
        std::iter::from_fn(|| splitter.next_event())
            .filter_map(|e| e.data)
            .filter_map(|d| crate::jsonrpc::parse(d.as_bytes()).ok())
            .collect()
    } else {
        crate::jsonrpc::parse(&bytes).ok().into_iter().collect()
    };
    frames
        .into_iter()
        .flat_map(|f| f.messages().to_vec())
        .collect()
}

/// Build a body from a pumped stream.
pub fn stream_body(stream: crate::pump::BodyStream) -> Body {
    Body::from_stream(stream)
}
