//! One model request's upstream exchange, finished by the gateway on its own (docs/reference.md §8).
//!
//! Every model route (the OpenAI-compatible ones and the Anthropic Messages one, through
//! `model::exchange`) hands an admitted call to [`Governor::model_exchange`]. It dispatches the call and runs the exchange
//! in a detached task that owns the [`Admission`]: whatever happens to the agent's connection,
//! the task reads the upstream's answer to its end and records the outcome and the usage it
//! reported. The agent's handler only waits for what the task hands it.
//!
//! - The client goes away (a dropped connection, a `curl -m 1`): the task carries on and records
//!   the outcome; nothing is left in doubt because of it.
//! - An EMERGENCY covers the agent (or the machine is contained, a stop made its token stale, or
//!   the view can no longer be trusted: `stopline_core::call::must_cut`): the waiting agent is answered at once with its refusal — an HTTP refusal before the
//!   response has started, the route's own error event on a stream that has — and the exchange
//!   goes on detached. It then has `cut_outcome_wait_s` to give its outcome; only if it does not
//!   is the operation left in doubt (and a model operation in doubt blocks nobody: its cost
//!   stays reserved at its bound). At HALT_ALL and HALT_NONCRITICAL nothing is cut.
//! - The upstream connection breaks after dispatch: the outcome cannot be known, so the
//!   operation is in doubt. A connection refused before anything was sent is `UpstreamUnreachable`.
//!
//! Every wait is bounded: by the upstream request timeout (`[model] timeout_s`, from sending the
//! request to the last byte of its answer), and after a cut by `cut_outcome_wait_s`. Nothing
//! here retries anything, and no redirect is followed: an upstream's `3xx` is the agent's answer
//! (following it would send the request and the upstream key to a URL the owner never
//! configured). The request goes through the gateway's pooled hyper client (`client.rs`, rustls
//! for `https`), the one the MCP proxy uses.

use crate::admit::{Admission, CutWatch, Outcome};
use crate::caller::Caller;
use crate::client::{body_bytes, body_stream, UpstreamClient};
use crate::error::GatewayError;
use crate::governor::Governor;
use crate::outgoing::Outgoing;
use crate::responses::Companions;
use crate::usage::ResponseSeen;
use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use futures::StreamExt;
use std::future::Future;
use std::time::Duration;
use stopline_core::budget::{BudgetKind, Budgets};
use stopline_core::Refusal;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// How a route's upstream reports what a call used. One per call.
pub trait Meter: Send + 'static {
    /// See one chunk of a streamed answer as it passes (never holds it back).
    fn feed(&mut self, chunk: &[u8]);
    /// What a whole (non-streamed) answer used, when it says.
    fn whole(&self, body: &[u8]) -> Option<Budgets>;
    /// What the stream has reported so far.
    fn streamed(&self) -> Option<Budgets>;
    /// The Responses API response the stream was about, if it said.
    fn seen(&self) -> Option<ResponseSeen> {
        None
    }
}

/// One admitted model call, ready to be handed upstream.
pub struct DetachedCall {
    /// The admission (not yet dispatched).
    pub admission: Admission,
    /// The upstream request, fully built (URL, upstream key, body, timeout).
    pub request: Outgoing,
    /// True when the agent asked for a stream.
    pub stream: bool,
    /// The route's usage reader.
    pub meter: Box<dyn Meter>,
    /// The bytes that end a stream cut at EMERGENCY: the route's own error event carrying the
    /// refusal (for OpenAI `data: {"error":{…}}`; for A2A the JSON-RPC error answering the
    /// request's id).
    pub stream_refusal: StreamRefusal,
    /// The call's hosted-tool and background operations, and its response's book entry
    /// (`responses.rs`): dispatched with it, finished with its outcome.
    pub(crate) companions: Option<Companions>,
    /// Who finishes the call's own operation when the exchange ends (`None`: the exchange
    /// does, with the outcome it saw). An A2A send whose task is still open keeps it open
    /// (`a2a.rs`).
    pub(crate) keeper: Option<Box<dyn Keeper>>,
    /// Cut at a HALT_ALL covering the agent too, not only at what cuts a model stream: the
    /// exchange is remote work that would otherwise run on (`stopline_core::call::must_end_remote`).
    pub(crate) cut_at_halt: bool,
}

/// The bytes that end a stream cut at a stop, made from its refusal.
pub type StreamRefusal = Box<dyn Fn(&Refusal) -> Bytes + Send + Sync>;

/// Finishes an exchange's own operation in its surface's terms (see [`DetachedCall::keeper`]).
pub(crate) trait Keeper: Send {
    /// The exchange ended with `outcome` (`used`: what it used, if it said).
    fn finish(self: Box<Self>, admission: Admission, outcome: Outcome, used: Option<Budgets>);
}

/// What the agent gets back.
#[derive(Debug)]
pub enum Answer {
    /// A whole answer, passed on as the upstream gave it.
    Whole {
        /// The upstream's status.
        status: StatusCode,
        /// Its content type.
        content_type: String,
        /// Its body.
        body: Bytes,
    },
    /// A stream, passed on chunk by chunk.
    Stream {
        /// The upstream's status.
        status: StatusCode,
        /// Its content type.
        content_type: String,
        /// The relayed body.
        body: Body,
    },
}

/// What the detached task hands the waiting handler.
type Head = Result<Answer, GatewayError>;
type Chunks = mpsc::Sender<Result<Bytes, std::io::Error>>;

/// The agent's side of the exchange, as the task sees it.
enum Client {
    /// The handler waits for the head.
    Waiting(oneshot::Sender<Head>),
    /// The stream is being relayed.
    Streaming(Chunks),
    /// Answered already (cut), or gone.
    Gone,
}

impl Governor {
    /// Dispatch `call` and run its upstream exchange detached (see the module docs); returns
    /// what the agent gets. A refusal at dispatch is returned and nothing is sent.
    pub async fn model_exchange(
        &self,
        caller: &Caller,
        call: DetachedCall,
    ) -> Result<Answer, GatewayError> {
        let DetachedCall {
            mut admission,
            request,
            stream,
            meter,
            stream_refusal,
            mut companions,
            keeper,
            cut_at_halt,
        } = call;
        let cuts = if cut_at_halt {
            self.subscribe_remote_cuts(caller)
        } else {
            self.subscribe_cuts(caller)
        };
        if let Some(companions) = companions.as_mut() {
            companions.dispatch()?;
        }
        if let Err(refusal) = admission.dispatch() {
            if let Some(companions) = companions.as_mut() {
                companions.fail();
            }
            return Err(refusal.into());
        }
        let (head, answer) = oneshot::channel();
        let task = Task {
            admission: Some(admission),
            cuts,
            client: Client::Waiting(head),
            cut_deadline: None,
            cut_wait: self.config().cut_outcome_wait(),
            stream_refusal,
            companions,
            keeper,
            seen: None,
        };
        tokio::spawn(task.run(self.upstream_client().clone(), request, stream, meter));
        match answer.await {
            Ok(head) => head,
            Err(_) => Err(GatewayError::Upstream(
                "the model exchange ended without an answer".into(),
            )),
        }
    }
}

enum Event<T> {
    Cut(Refusal),
    Deadline,
    Done(T),
}

struct Task {
    admission: Option<Admission>,
    cuts: CutWatch,
    client: Client,
    /// Set when the agent was answered by a cut: the exchange must end by then.
    cut_deadline: Option<Instant>,
    cut_wait: Duration,
    stream_refusal: StreamRefusal,
    companions: Option<Companions>,
    keeper: Option<Box<dyn Keeper>>,
    /// The response the answer created, once seen (a whole body's, or the stream's events').
    seen: Option<ResponseSeen>,
}

impl Task {
    /// Answer the agent with `refusal` now; the exchange goes on until the cut deadline.
    async fn answer_cut(&mut self, refusal: Refusal) {
        tracing::debug!(code = %refusal.code, "answering a model call at once: {}", refusal.message);
        self.cut_deadline = Some(Instant::now() + self.cut_wait);
        match std::mem::replace(&mut self.client, Client::Gone) {
            Client::Waiting(head) => {
                let _ = head.send(Err(GatewayError::Refused(refusal)));
            }
            Client::Streaming(chunks) => {
                let event = (self.stream_refusal)(&refusal);
                // Bounded: a client that stopped reading does not hold the exchange up.
                let _ =
                    tokio::time::timeout(Duration::from_millis(100), chunks.send(Ok(event))).await;
            }
            Client::Gone => {}
        }
    }

    /// Wait for `work`, answering the agent at once if a cut comes first; `None` when a cut
    /// exchange reached its deadline without finishing.
    async fn wait<F: Future>(&mut self, work: F) -> Option<F::Output> {
        tokio::pin!(work);
        loop {
            match self.next_event(&mut work).await {
                Event::Cut(refusal) => self.answer_cut(refusal).await,
                Event::Deadline => return None,
                Event::Done(out) => return Some(out),
            }
        }
    }

    async fn next_event<F: Future>(
        &mut self,
        work: &mut std::pin::Pin<&mut F>,
    ) -> Event<F::Output> {
        let cut_pending = self.cut_deadline.is_none();
        let deadline = self.cut_deadline.unwrap_or_else(Instant::now);
        tokio::select! {
            biased;
            refusal = self.cuts.cut(), if cut_pending => Event::Cut(refusal),
            _ = tokio::time::sleep_until(deadline), if !cut_pending => Event::Deadline,
            out = work.as_mut() => Event::Done(out),
        }
    }

    fn finish(&mut self, outcome: Outcome, used: Option<Budgets>) {
        if let Some(companions) = self.companions.take() {
            companions.finish(&outcome, self.seen.take());
        }
        if let Some(admission) = self.admission.take() {
            match self.keeper.take() {
                Some(keeper) => keeper.finish(admission, outcome, used),
                None => admission.finish_with_usage(outcome, used),
            }
        }
    }

    fn answer(&mut self, head: Head) {
        if let Client::Waiting(sender) = std::mem::replace(&mut self.client, Client::Gone) {
            let _ = sender.send(head);
        }
    }

    fn no_answer_in_time(&self) -> String {
        format!(
            "the exchange was cut at a stop and the upstream gave no outcome within cut_outcome_wait_s ({} s)",
            self.cut_wait.as_secs()
        )
    }

    async fn run(
        mut self,
        client: UpstreamClient,
        outgoing: Outgoing,
        stream: bool,
        meter: Box<dyn Meter>,
    ) {
        let deadline = Instant::now() + outgoing.timeout;
        let timeout_s = outgoing.timeout.as_secs();
        let sent = self
            .wait(tokio::time::timeout_at(
                deadline,
                client.send(outgoing.request),
            ))
            .await;
        let sent = match sent {
            Some(Ok(sent)) => sent,
            Some(Err(_)) => {
                let why =
                    format!("the upstream gave no answer within [model] timeout_s ({timeout_s} s)");
                self.finish(Outcome::InDoubt(why), None);
                return self.answer(Err(GatewayError::Upstream(format!(
                    "the model upstream gave no answer within {timeout_s} s"
                ))));
            }
            None => {
                let why = self.no_answer_in_time();
                return self.finish(Outcome::InDoubt(why), None);
            }
        };
        let response = match sent {
            Ok(response) => response,
            Err(error) if error.is_connect() => {
                self.finish(Outcome::UpstreamUnreachable, None);
                return self.answer(Err(GatewayError::Upstream(format!(
                    "the model upstream is unreachable: {error}"
                ))));
            }
            Err(error) => {
                let why = format!("the upstream connection broke after dispatch: {error}");
                self.finish(Outcome::InDoubt(why), None);
                return self.answer(Err(GatewayError::Upstream(format!(
                    "the model upstream failed: {error}"
                ))));
            }
        };
        let (parts, body) = response.into_parts();
        let status = parts.status;
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
            .to_string();
        if stream && status.is_success() {
            return self
                .relay(body, deadline, status, content_type, meter)
                .await;
        }
        let read = self
            .wait(tokio::time::timeout_at(deadline, body_bytes(body)))
            .await;
        let bytes = match read {
            None => {
                let why = self.no_answer_in_time();
                return self.finish(Outcome::InDoubt(why), None);
            }
            Some(Err(_)) => {
                let why = format!(
                    "the upstream's answer did not end within [model] timeout_s ({timeout_s} s)"
                );
                self.finish(Outcome::InDoubt(why), None);
                return self.answer(Err(GatewayError::Upstream(format!(
                    "the model response did not end within {timeout_s} s"
                ))));
            }
            Some(Ok(Err(error))) => {
                let why = format!("the upstream's answer was lost: {error}");
                self.finish(Outcome::InDoubt(why), None);
                return self.answer(Err(GatewayError::Upstream(format!(
                    "the model response was lost: {error}"
                ))));
            }
            Some(Ok(Ok(bytes))) => bytes,
        };
        if status.is_success() && self.companions.is_some() {
            self.seen = ResponseSeen::from_body(&bytes);
        }
        let outcome = if status.is_success() {
            Outcome::Committed
        } else if status.is_server_error() {
            Outcome::UpstreamUnreachable
        } else {
            Outcome::Failed
        };
        let used = meter
            .whole(&bytes)
            .or_else(|| (!status.is_success()).then(|| [(BudgetKind::Steps, 1.0)].into()));
        self.finish(outcome, used);
        self.answer(Ok(Answer::Whole {
            status,
            content_type,
            body: bytes,
        }));
    }

    /// Relay a stream chunk by chunk while the agent reads it, and read it to its end anyway.
    async fn relay(
        mut self,
        response: hyper::body::Incoming,
        deadline: Instant,
        status: StatusCode,
        content_type: String,
        mut meter: Box<dyn Meter>,
    ) {
        if matches!(self.client, Client::Waiting(_)) {
            let (chunks, body) = mpsc::channel(16);
            let body = Body::from_stream(tokio_stream_of(body));
            if let Client::Waiting(head) =
                std::mem::replace(&mut self.client, Client::Streaming(chunks))
            {
                if head
                    .send(Ok(Answer::Stream {
                        status,
                        content_type,
                        body,
                    }))
                    .is_err()
                {
                    self.client = Client::Gone; // the handler is gone already
                }
            }
        }
        let mut upstream = std::pin::pin!(body_stream(response));
        loop {
            let next = match self
                .wait(tokio::time::timeout_at(deadline, upstream.next()))
                .await
            {
                None => {
                    let why = self.no_answer_in_time();
                    return self.finish(Outcome::InDoubt(why), None);
                }
                Some(Err(_)) => {
                    let why = "the upstream stream did not end within [model] timeout_s";
                    self.finish(Outcome::InDoubt(why.into()), None);
                    if let Client::Streaming(chunks) = &self.client {
                        let _ = chunks.try_send(Err(std::io::Error::other(why)));
                    }
                    return;
                }
                Some(Ok(next)) => next,
            };
            match next {
                None => {
                    let used = meter.streamed();
                    return self.finish(Outcome::Committed, used);
                }
                Some(Err(error)) => {
                    let why = format!("the upstream stream broke after dispatch: {error}");
                    self.finish(Outcome::InDoubt(why), None);
                    if let Client::Streaming(chunks) = &self.client {
                        let _ = chunks.try_send(Err(std::io::Error::other(error.to_string())));
                    }
                    return;
                }
                Some(Ok(chunk)) => {
                    meter.feed(&chunk);
                    if self.companions.is_some() {
                        self.seen = meter.seen();
                    }
                    let Client::Streaming(chunks) = &self.client else {
                        continue; // the agent was answered or is gone: read on, record
                    };
                    let chunks = chunks.clone();
                    let send = chunks.send(Ok(chunk));
                    tokio::pin!(send);
                    match self.next_event(&mut send).await {
                        Event::Done(Ok(())) => {}
                        // The client went away: read on without it.
                        Event::Done(Err(_)) => self.client = Client::Gone,
                        // A cut while the client was not reading: the chunk is dropped, the
                        // agent answered as far as it can be, and the exchange read on.
                        Event::Cut(refusal) => self.answer_cut(refusal).await,
                        Event::Deadline => {}
                    }
                }
            }
        }
    }
}

/// The receiving half of a relay as a body stream.
fn tokio_stream_of(
    mut chunks: mpsc::Receiver<Result<Bytes, std::io::Error>>,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    futures::stream::poll_fn(move |cx| chunks.poll_recv(cx))
}
