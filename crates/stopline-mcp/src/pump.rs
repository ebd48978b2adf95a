//! Passing an upstream SSE stream to the agent event by event, and cutting it on a stop.
//!
//! One task per stream reads upstream chunks, splits them into events, lets the [`Tracker`]
//! see every JSON-RPC message inside, and hands each event to the agent as soon as it is
//! complete. It races every read and every write against the governor's cut signal: when an
//! emergency covers the agent, the upstream connection is dropped, each request still open on
//! the stream is answered with a `break_glass_contained` error that says its outcome is
//! unknown, its operation is left in doubt, and the stream ends. A client that goes away also
//! ends the stream; its open operations are left in doubt too (the tracker's drop does that).

use crate::govern::{refusal_response, Tracker};
use crate::jsonrpc::{parse, Incoming};
use crate::sse::{message_event, Splitter};
use bytes::Bytes;
use futures::channel::mpsc;
use futures::future::BoxFuture;
use futures::{SinkExt, Stream, StreamExt};
use std::io;
use stopline_core::{Refusal, RefusalCode};

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
}

enum Step {
    Continue,
    Stop,
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

async fn send(
    tx: &mut mpsc::Sender<Result<Bytes, io::Error>>,
    cut: &mut BoxFuture<'static, Refusal>,
    tracker: &mut Tracker,
    bytes: Bytes,
) -> Step {
    tokio::select! {
        biased;
        refusal = cut => {
            cut_stream(tx, tracker, refusal).await;
            Step::Stop
        }
        sent = tx.send(Ok(bytes)) => if sent.is_ok() { Step::Continue } else { Step::Stop },
    }
}

/// Answer every open request with an error, leave their operations in doubt, end the stream.
async fn cut_stream(
    tx: &mut mpsc::Sender<Result<Bytes, io::Error>>,
    tracker: &mut Tracker,
    refusal: Refusal,
) {
    tracing::warn!(code = %refusal.code, "cutting an MCP stream: {}", refusal.message);
    let code = if refusal.code == RefusalCode::StaleControlEpoch {
        refusal.code
    } else {
        RefusalCode::BreakGlassContained
    };
    let notice = Refusal::new(code, format!("the stream was cut by a stop ({}); the call's outcome is unknown and it is recorded in doubt", refusal.message));
    for id in tracker.open_ids() {
        let event = message_event(&Incoming::Single(refusal_response(id, &notice)).to_bytes());
        // Best effort and bounded: a client that stopped reading does not hold the cut up.
        let _ =
            tokio::time::timeout(std::time::Duration::from_millis(100), tx.send(Ok(event))).await;
    }
    tracker.cut(&format!("stream cut by a stop: {}", refusal.code));
    tx.close_channel();
}

async fn run<E: std::fmt::Display>(
    mut upstream: std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, E>> + Send>>,
    pump: Pump,
    mut tx: mpsc::Sender<Result<Bytes, io::Error>>,
) {
    let Pump {
        mut tracker,
        mut cut,
        prelude,
    } = pump;
    for event in prelude {
        if let Step::Stop = send(&mut tx, &mut cut, &mut tracker, event).await {
            return;
        }
    }
    let mut splitter = Splitter::default();
    loop {
        let chunk = tokio::select! {
            biased;
            refusal = &mut cut => return cut_stream(&mut tx, &mut tracker, refusal).await,
            chunk = upstream.next() => chunk,
        };
        match chunk {
            Some(Ok(bytes)) => {
                if splitter.push(&bytes).is_err() {
                    let _ = tx
                        .send(Err(io::Error::other("upstream event too large")))
                        .await;
                    return; // the tracker's drop leaves open operations in doubt
                }
                while let Some(event) = splitter.next_event() {
                    if let Some(frame) =
                        event.data.as_deref().and_then(|d| parse(d.as_bytes()).ok())
                    {
                        tracker.observe_frame(&frame);
                    }
                    if let Step::Stop = send(&mut tx, &mut cut, &mut tracker, event.raw).await {
                        return;
                    }
                }
            }
            Some(Err(error)) => {
                tracing::warn!("upstream stream failed: {error}");
                let _ = tx.send(Err(io::Error::other(error.to_string()))).await;
                return;
            }
            None => return,
        }
    }
}
