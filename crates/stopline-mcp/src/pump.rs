//! Passing an upstream SSE stream to the agent event by event, and finishing it on its own.
//!
//! One task per stream reads upstream chunks, splits them into events, lets the [`Tracker`]
//! see every JSON-RPC message inside, and hands each event to the agent as soon as it is
//! complete. The task owns the exchange, not the agent (docs/reference.md §8):
//! - an agent that goes away ends the relay, not the exchange: the task reads on until every
//!   forwarded request has its answer (recorded as its outcome) or the upstream ends the stream;
//! - when an emergency covers the agent, each request still open on the stream is answered at
//!   once with a `break_glass_contained` error and the agent's stream ends; the task reads on for
//!   up to `cut_outcome_wait_s`, recording the answers that come (never shown to the agent), and
//!   only what is still open then is left in doubt;
//! - an upstream stream that breaks, or ends without an answer, leaves its open requests in
//!   doubt (the tracker's drop does that);
//! - a stream with nothing open on it (a `GET` stream, or a `POST` stream whose answers all
//!   came) whose agent went away is closed within [`DEPARTURE_CHECK`], without waiting for
//!   the upstream to send something: nothing is left to learn from it, and an upstream stream
//!   held for an agent that is gone is a connection and a session leaked per agent session.

use crate::govern::{refusal_response, Tracker};
use crate::jsonrpc::{parse, Incoming};
use crate::sse::{message_event, Splitter};
use bytes::Bytes;
use futures::channel::mpsc;
use futures::future::BoxFuture;
use futures::{FutureExt, SinkExt, Stream, StreamExt};
use std::io;
use std::time::Duration;
use stopline_core::{Refusal, RefusalCode};
use tokio::time::Instant;

/// How often a stream with nothing open on it checks that its agent is still there.
pub const DEPARTURE_CHECK: Duration = Duration::from_millis(500);

/// Resolves once `client`'s receiving end (the agent's response body) is gone.
async fn departed(client: Client) {
    while !client.is_closed() {
        tokio::time::sleep(DEPARTURE_CHECK).await;
    }
}

/// The receiving half: what the agent's response body reads.
pub type BodyStream = mpsc::Receiver<Result<Bytes, io::Error>>;

/// What a pump needs besides the upstream bytes.
pub struct Pump {
    /// Follows responses and operations.
    pub tracker: Tracker,
    /// Resolves when the stream must be cut.
    pub cut: BoxFuture<'static, Refusal>,
    /// Events to send before anything from the upstream (locally answered refusals).
    pub prelude: Vec<Bytes>,
    /// How long a cut exchange may still take to give its outcomes.
    pub cut_wait: Duration,
    /// Where the stream's open requests are parked if it ends after a priming event (a
    /// resumable stream); `None`: they are left in doubt at its end.
    pub resume: Option<crate::resume::Resume>,
}

/// Start pumping `upstream` (SSE bytes) to the returned body stream.
pub fn spawn<S, E>(upstream: S, pump: Pump) -> BodyStream
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(run(Box::pin(upstream), pump, tx));
    rx
}

/// Read a cut exchange's upstream to its end (or to `deadline`, the end of its `cut_wait`) with
/// no agent left to relay to.
pub fn drain<S, E>(upstream: S, tracker: Tracker, cut_wait: Duration, deadline: Instant)
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let pump = Pump {
        tracker,
        cut: Box::pin(std::future::pending()),
        prelude: Vec::new(),
        cut_wait,
        resume: None,
    };
    let mut relay = Relay {
        pump,
        client: None,
        deadline: Some(deadline),
        primed: false,
    };
    tokio::spawn(async move { relay.read(Box::pin(upstream)).await });
}

/// The notice an open request gets when its stream is cut.
pub fn cut_notice(refusal: &Refusal) -> Refusal {
    let code = if refusal.code == RefusalCode::StaleControlEpoch {
        refusal.code
    } else {
        RefusalCode::BreakGlassContained
    };
    Refusal::new(code, format!("the call was cut by a stop ({}); it is not retried, and the gateway records its outcome when the server gives one", refusal.message))
}

type Client = mpsc::Sender<Result<Bytes, io::Error>>;

struct Relay {
    pump: Pump,
    /// The agent's end, until it goes away or is cut.
    client: Option<Client>,
    /// Set by a cut: the exchange must give its outcomes by then.
    deadline: Option<Instant>,
    /// The upstream sent an event with an `id`: the stream may be resumed (SEP-1699).
    primed: bool,
}

enum Event<T> {
    Cut(Refusal),
    Deadline,
    Done(T),
}

impl Relay {
    /// Wait for `work`, unless a cut or the cut's deadline comes first.
    async fn next<F: std::future::Future>(&mut self, work: F) -> Event<F::Output> {
        let cut_pending = self.deadline.is_none();
        let deadline = self.deadline.unwrap_or_else(Instant::now);
        tokio::select! {
            biased;
            refusal = &mut self.pump.cut, if cut_pending => Event::Cut(refusal),
            _ = tokio::time::sleep_until(deadline), if !cut_pending => Event::Deadline,
            out = work => Event::Done(out),
        }
    }

    /// Answer every open request at once and end the agent's stream; the exchange reads on.
    async fn cut(&mut self, refusal: Refusal) {
        tracing::warn!(code = %refusal.code, "cutting an MCP stream: {}", refusal.message);
        self.deadline = Some(Instant::now() + self.pump.cut_wait);
        let notice = cut_notice(&refusal);
        let ids = self.pump.tracker.mute_open();
        if let Some(mut client) = self.client.take() {
            for id in ids {
                let event =
                    message_event(&Incoming::Single(refusal_response(id, &notice)).to_bytes());
                // Best effort and bounded: a client that stopped reading does not hold the cut up.
                let _ =
                    tokio::time::timeout(Duration::from_millis(100), client.send(Ok(event))).await;
            }
            client.close_channel();
        }
    }

    /// At the upstream's end: if the stop that ended it (a gateway-owned tool server is killed
    /// at an emergency, docs/reference.md §6) is due but this stream has not seen it yet, the agent is
    /// answered with the cut, as at any cut, rather than with a broken stream. What is still
    /// open is then left in doubt. True when it cut.
    async fn cut_if_due(&mut self) -> bool {
        if self.deadline.is_some() {
            return false;
        }
        let Some(refusal) = (&mut self.pump.cut).now_or_never() else {
            return false;
        };
        self.cut(refusal).await;
        self.pump.tracker.cut(
            "cut at a stop; the server's stream ended (the server was ended) before it gave an outcome",
        );
        true
    }

    /// At the upstream's clean end of a primed stream that owes answers: the server may deliver
    /// them on a resumed stream, so they are parked for one (`crate::resume`) rather than left
    /// in doubt at once.
    fn park_for_resumption(&mut self) {
        if self.deadline.is_some() || self.pump.tracker.is_done() {
            return;
        }
        if let Some(resume) = self
            .pump
            .resume
            .as_ref()
            .filter(|r| self.primed || r.resumed)
        {
            let pending = self.pump.tracker.take_pending();
            resume.parked.park(resume, pending);
        }
    }

    /// Hand `bytes` to the agent, if it is still there.
    async fn relay(&mut self, bytes: Bytes) {
        let Some(mut client) = self.client.clone() else {
            return;
        };
        match self.next(client.send(Ok(bytes))).await {
            Event::Done(Ok(())) => {}
            Event::Done(Err(_)) => self.client = None, // the agent went away: read on
            Event::Cut(refusal) => self.cut(refusal).await,
            Event::Deadline => {}
        }
    }

    async fn read<E: std::fmt::Display>(
        &mut self,
        mut upstream: std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, E>> + Send>>,
    ) {
        for event in std::mem::take(&mut self.pump.prelude) {
            self.relay(event).await;
        }
        let mut splitter = Splitter::default();
        loop {
            if self.client.is_none() && self.pump.tracker.is_done() {
                return; // nobody to relay to and nothing left to learn
            }
            // Nothing open on the stream: the agent's departure ends it too.
            let watched = self.client.clone().filter(|_| self.pump.tracker.is_done());
            let next = async {
                match watched {
                    Some(client) => tokio::select! {
                        chunk = upstream.next() => Some(chunk),
                        () = departed(client) => None,
                    },
                    None => Some(upstream.next().await),
                }
            };
            let chunk = match self.next(next).await {
                Event::Done(None) => {
                    self.client = None; // the agent went away: nothing more to read for
                    continue;
                }
                Event::Done(Some(chunk)) => chunk,
                Event::Cut(refusal) => {
                    self.cut(refusal).await;
                    continue;
                }
                Event::Deadline => {
                    let wait = self.pump.cut_wait.as_secs();
                    self.pump.tracker.cut(&format!(
                        "cut at a stop; the server gave no outcome within cut_outcome_wait_s ({wait} s)"
                    ));
                    return;
                }
            };
            match chunk {
                Some(Ok(bytes)) => {
                    if splitter.push(&bytes).is_err() {
                        if let Some(mut client) = self.client.take() {
                            let _ = client
                                .send(Err(io::Error::other("upstream event too large")))
                                .await;
                        }
                        return; // the tracker's drop leaves open operations in doubt
                    }
                    while let Some(event) = splitter.next_event() {
                        self.primed |= has_id(&event.raw);
                        let frame = event.data.as_deref().and_then(|d| parse(d.as_bytes()).ok());
                        let forward = frame.as_ref().is_none_or(|f| {
                            f.messages()
                                .iter()
                                .any(|m| self.pump.tracker.forwardable(m))
                        });
                        if let Some(frame) = &frame {
                            self.pump.tracker.observe_frame(frame);
                        }
                        if forward {
                            self.relay(event.raw).await;
                        }
                    }
                }
                Some(Err(error)) => {
                    if self.cut_if_due().await {
                        return;
                    }
                    tracing::warn!("upstream stream failed: {error}");
                    if let Some(mut client) = self.client.take() {
                        let _ = client.send(Err(io::Error::other(error.to_string()))).await;
                    }
                    return;
                }
                None => {
                    if !self.cut_if_due().await {
                        self.park_for_resumption();
                    }
                    return;
                }
            }
        }
    }
}

async fn run<E: std::fmt::Display>(
    upstream: std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, E>> + Send>>,
    pump: Pump,
    tx: Client,
) {
    let mut relay = Relay {
        pump,
        client: Some(tx),
        deadline: None,
        primed: false,
    };
    relay.read(upstream).await;
}

/// True when the event's raw bytes have an `id` field (a line `id:…`).
fn has_id(raw: &[u8]) -> bool {
    raw.split(|&b| b == b'\n' || b == b'\r')
        .any(|line| line.starts_with(b"id:") || line == b"id")
}
