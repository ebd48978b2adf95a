//! A recording upstream on loopback: the MCP server or model API a gateway under test forwards
//! to. It keeps every request it received (method, path, headers, body as sent) before answering
//! it, and answers what the test's function says: a whole body with any status and headers (a
//! redirect, say), server-sent events written one by one (some after a delay, the stream ended
//! or left open for good), or an answer held until the test releases it.
//!
//! It runs on a thread and a runtime of its own, so synchronous tests and async ones (whose
//! runtime also runs an in-process gateway) use it alike, and it never takes a worker of the
//! test's runtime. Dropping it stops the server, open streams and held answers included. It only
//! listens on 127.0.0.1 and holds no control logic.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use futures::StreamExt;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Semaphore};

/// How long [`Upstream::next_held`] waits for a held request before it fails the test.
const ARRIVAL_BOUND: Duration = Duration::from_secs(10);

/// One request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Received {
    /// The method (`POST`).
    pub method: String,
    /// The path and query (`/mcp`).
    pub path: String,
    /// The headers, names lowercased, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body, byte for byte (lossy UTF-8).
    pub body: String,
}

impl Received {
    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        crate::http::header_in(&self.headers, name)
    }

    /// The body as JSON, `Null` when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// What the upstream answers one request.
#[derive(Debug, Clone)]
pub struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Content,
    held: bool,
}

#[derive(Debug, Clone)]
enum Content {
    Whole(String),
    /// `(delay before it, data)` for each `event: message`, then whether the stream stays open.
    Events(Vec<(Duration, String)>, bool),
}

impl Answer {
    /// `200`, `Content-Type: application/json`, `body` exactly as given.
    pub fn json(body: impl Into<String>) -> Answer {
        Answer::status(200, body).header("content-type", "application/json")
    }

    /// `status` with `body` exactly as given and no headers yet.
    pub fn status(status: u16, body: impl Into<String>) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
            body: Content::Whole(body.into()),
            held: false,
        }
    }

    /// `200`, `Content-Type: text/event-stream`, no events yet; the stream ends after the last.
    pub fn events() -> Answer {
        Answer {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: Content::Events(Vec::new(), false),
            held: false,
        }
    }

    /// One more header.
    pub fn header(mut self, name: &str, value: impl Into<String>) -> Answer {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// One more event (`event: message`, `data: <data>`), written as soon as the one before it.
    pub fn event(self, data: impl Into<String>) -> Answer {
        self.event_after(Duration::ZERO, data)
    }

    /// One more event, written `delay` after the one before it.
    pub fn event_after(mut self, delay: Duration, data: impl Into<String>) -> Answer {
        if let Content::Events(events, _) = &mut self.body {
            events.push((delay, data.into()));
        }
        self
    }

    /// The event stream stays open after its last event: the upstream never finishes.
    pub fn then_hang(mut self) -> Answer {
        if let Content::Events(_, open) = &mut self.body {
            *open = true;
        }
        self
    }

    /// Nothing is answered until the test calls [`Upstream::release_one`] (one release per held
    /// answer, in the order they arrived).
    pub fn held(mut self) -> Answer {
        self.held = true;
        self
    }
}

type AnswerFn = dyn Fn(&Received) -> Answer + Send + Sync;

struct Shared {
    answer: Box<AnswerFn>,
    received: Mutex<Vec<Received>>,
    held: mpsc::UnboundedSender<Received>,
    release: Semaphore,
}

/// A running recording upstream; see the module documentation.
pub struct Upstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    held: tokio::sync::Mutex<mpsc::UnboundedReceiver<Received>>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Upstream {
    /// Start an upstream on `127.0.0.1` that answers every request with `answer(request)`.
    /// Panics when it cannot (a test set-up that cannot be made).
    pub fn start(answer: impl Fn(&Received) -> Answer + Send + Sync + 'static) -> Upstream {
        let (held_tx, held_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            answer: Box::new(answer),
            received: Mutex::new(Vec::new()),
            held: held_tx,
            release: Semaphore::new(0),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an upstream");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the upstream's address");
        let (stop, stopped) = oneshot::channel::<()>();
        let state = shared.clone();
        let thread = std::thread::Builder::new()
            .name("recording-upstream".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the upstream's runtime");
                runtime.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                    let app = axum::Router::new().fallback(serve).with_state(state);
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime ends every connection task: open streams, held answers.
            })
            .expect("the upstream's thread");
        Upstream {
            addr,
            shared,
            held: tokio::sync::Mutex::new(held_rx),
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request received so far, in order (held ones included).
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// The next request whose answer is held, once it has arrived; panics after 10 s.
    pub async fn next_held(&self) -> Received {
        let mut held = self.held.lock().await;
        tokio::time::timeout(ARRIVAL_BOUND, held.recv())
            .await
            .expect("no held request arrived")
            .expect("the upstream is running")
    }

    /// Let one held answer go (the first still held; or the next to be held).
    pub fn release_one(&self) {
        self.shared.release.add_permits(1);
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received = Received {
        method: method.to_string(),
        path: uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
                (k.as_str().to_string(), value)
            })
            .collect(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    shared.received.lock().unwrap().push(received.clone());
    let answer = (shared.answer)(&received);
    if answer.held {
        let _ = shared.held.send(received);
        if let Ok(permit) = shared.release.acquire().await {
            permit.forget();
        }
    }
    respond(answer)
}

fn respond(answer: Answer) -> Response {
    let body = match answer.body {
        Content::Whole(text) => Body::from(text),
        Content::Events(events, open) => {
            let written = futures::stream::iter(events).then(|(delay, data)| async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                Ok::<_, std::io::Error>(Bytes::from(format!("event: message\ndata: {data}\n\n")))
            });
            if open {
                Body::from_stream(written.chain(futures::stream::pending()))
            } else {
                Body::from_stream(written)
            }
        }
    };
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::from_u16(answer.status).expect("a valid status");
    for (name, value) in answer.headers {
        response.headers_mut().append(
            HeaderName::from_bytes(name.as_bytes()).expect("a valid header name"),
            HeaderValue::from_str(&value).expect("a valid header value"),
        );
    }
    response
}
