//! The acknowledgement thread: the gateway's side of "engage waits for every live gateway".
//!
//! A loopback TCP listener served by one dedicated OS thread (never the async runtime, so load
//! cannot starve it). A request is one JSON line `{"latch":"<file>","timeout_ms":N}`; the thread
//! refreshes the view itself until it holds that latch (or closes every gate), waits until no
//! call admitted under an older view is still waiting to be handed upstream, records the
//! acknowledgement in the registration, and answers `{"ack":true,…}` — or `{"ack":false,"why"}`
//! when it could not within the deadline. It never acknowledges what its view does not hold.
//! `token revoke` asks the same of an epoch scope's revision, `{"revision":R,"scope":S,…}`: the
//! view holds that revision or a later one (so it refuses the revoked token), under the same rules.
//!
//! With a distributed view source, engaging hosts cannot reach this socket; they watch the
//! backend for acknowledgements instead, so [`spawn_push`] acknowledges by itself each set of
//! latches the view comes to hold, under the same rule (the view holds the latch, nothing older
//! is still dispatching), woken only when that set changes.

use crate::inflight::DispatchTracker;
use crate::registry::Registry;
use crate::view::{Snapshot, ViewHolder};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stopline_core::ack::{AckReply, AckRequest, EpochAckRequest};

/// The longest an acknowledgement request may ask to be waited for.
const MAX_WAIT: Duration = Duration::from_secs(5);

/// The acknowledgement server's shared parts.
#[derive(Debug, Clone)]
pub struct AckServer {
    /// The view to refresh and inspect.
    pub view: Arc<ViewHolder>,
    /// Calls waiting to be handed upstream.
    pub tracker: Arc<DispatchTracker>,
    /// Where acknowledgements are recorded.
    pub registry: Arc<Registry>,
}

impl AckServer {
    /// Serve `listener` on a dedicated thread until `stop`.
    pub fn spawn(self, listener: TcpListener, stop: Arc<AtomicBool>) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name("stopline-ack".into())
            .spawn(move || {
                crate::stop_threads::raise();
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    match stream {
                        Ok(stream) => {
                            if let Err(error) = self.serve_one(stream) {
                                tracing::debug!(%error, "acknowledgement request failed");
                            }
                        }
                        Err(error) => tracing::warn!(%error, "acknowledgement accept failed"),
                    }
                }
            })?;
        Ok(())
    }

    fn serve_one(&self, stream: TcpStream) -> std::io::Result<()> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let wait = |timeout_ms: Option<u64>| {
            Instant::now() + Duration::from_millis(timeout_ms.unwrap_or(250)).min(MAX_WAIT)
        };
        let reply = match serde_json::from_str::<AckRequest>(&line) {
            Ok(request) => self.acknowledge(&request.latch, wait(request.timeout_ms)),
            Err(_) => match serde_json::from_str::<EpochAckRequest>(&line) {
                Ok(request) => self.acknowledge_epoch(
                    &request.scope,
                    request.revision,
                    wait(request.timeout_ms),
                ),
                Err(_) => AckReply::refused(
                    None,
                    "expected {\"latch\": \"<file>\"} or {\"revision\": R, \"scope\": S}",
                ),
            },
        };
        let mut reply = serde_json::to_vec(&reply).expect("a reply always serializes");
        reply.push(b'\n');
        let mut stream = stream;
        stream.write_all(&reply)
    }

    /// Acknowledge `latch` by `deadline`, or say why not.
    pub fn acknowledge(&self, latch: &str, deadline: Instant) -> AckReply {
        let started = Instant::now();
        let answer = self.acknowledge_by(latch, deadline);
        let latency_ms = crate::logs::ms_since(started);
        match &answer.why {
            None => tracing::info!(latch, latency_ms, "latch acknowledged"),
            Some(why) => tracing::warn!(latch, latency_ms, "latch not acknowledged: {why}"),
        }
        answer
    }

    /// Acknowledge revision `revision` of epoch scope `scope` (a `token revoke`'s) by
    /// `deadline`, or say why not.
    pub fn acknowledge_epoch(&self, scope: &str, revision: u64, deadline: Instant) -> AckReply {
        let started = Instant::now();
        let answer = self.acknowledge_epoch_by(scope, revision, deadline);
        let latency_ms = crate::logs::ms_since(started);
        match &answer.why {
            None => tracing::info!(scope, revision, latency_ms, "epoch acknowledged"),
            Some(why) => {
                tracing::warn!(scope, revision, latency_ms, "epoch not acknowledged: {why}")
            }
        }
        answer
    }

    /// As [`AckServer::acknowledge_by`], for an epoch scope: a read begun after the request
    /// that holds the revision (or a view that closes every gate, which refuses the token too),
    /// then no call admitted under an older view still waiting to be handed upstream. Nothing
    /// is recorded in the registration: the answer on this socket is the acknowledgement.
    fn acknowledge_epoch_by(&self, scope: &str, revision: u64, deadline: Instant) -> AckReply {
        let id = self.registry.record().id;
        match self.settled_holding(
            |snapshot| snapshot.view.epoch.holds(scope, revision),
            "the view does not hold the revocation",
            deadline,
        ) {
            Ok(snapshot) => AckReply::acknowledged(&id, snapshot.generation),
            Err(why) => AckReply::refused(Some(id.as_str()), why),
        }
    }

    /// Read the view afresh until it `holds` what was asked (or is faulted, which closes every
    /// gate), then wait until no call admitted under an older view is still being handed
    /// upstream: what both acknowledgements answer on. Always a read started after the request,
    /// even when the watcher has put the change in the view already. `Err` says why not by
    /// `deadline`.
    fn settled_holding(
        &self,
        holds: impl Fn(&Snapshot) -> bool,
        not_held: &'static str,
        deadline: Instant,
    ) -> Result<Arc<Snapshot>, &'static str> {
        let mut snapshot = self.view.refresh_fast();
        while !holds(&snapshot) && !snapshot.is_faulted() {
            if Instant::now() >= deadline {
                return Err(not_held);
            }
            std::thread::sleep(Duration::from_millis(2));
            snapshot = self.view.refresh_fast();
        }
        if !self.tracker.wait_older_than(snapshot.generation, deadline) {
            return Err("calls admitted under the older view are still being dispatched");
        }
        Ok(snapshot)
    }

    fn acknowledge_by(&self, latch: &str, deadline: Instant) -> AckReply {
        let id = self.registry.record().id;
        // A read started after the request, even when the watcher has put the latch in the
        // view already (latches first): that addition holds the latch but not the epoch advance
        // the engage recorded before asking, and an acknowledged stop must refuse every token
        // minted before it as stale from the first call after the receipt.
        let snapshot = match self.settled_holding(
            |snapshot| snapshot.latch_files.contains(latch),
            "the view does not hold the latch",
            deadline,
        ) {
            Ok(snapshot) => snapshot,
            Err(why) => return AckReply::refused(Some(id.as_str()), why),
        };
        let held: Vec<String> = snapshot.latch_files.iter().cloned().collect();
        if let Err(error) = self.registry.acknowledge(held) {
            tracing::warn!(%error, "cannot record the acknowledgement in servers/");
        }
        AckReply::acknowledged(&id, snapshot.generation)
    }
}

/// Acknowledge by itself (distributed sources): whenever the view holds another set of latches,
/// wait (bounded) until no call admitted under an older view is still being handed upstream,
/// then record the latches the view holds, which the source carries to its backend.
///
/// The thread wakes only when the set of latches changes (`waiters.rs`: its registration is
/// made before the view is compared with what was recorded, so no change is missed), not on
/// every view change: an epoch, a state or a census change acknowledges nothing new.
pub fn spawn_push(
    view: Arc<ViewHolder>,
    tracker: Arc<DispatchTracker>,
    registry: Arc<Registry>,
    stop: Arc<AtomicBool>,
) {
    let spawned = std::thread::Builder::new()
        .name("stopline-ack-push".into())
        .spawn(move || {
            crate::stop_threads::raise();
            let mut acknowledged: Option<BTreeSet<String>> = None;
            while !stop.load(Ordering::SeqCst) {
                let snapshot = view.load();
                if acknowledged.as_ref() != Some(&snapshot.latch_files) {
                    if tracker.wait_older_than(snapshot.generation, Instant::now() + MAX_WAIT) {
                        let held: Vec<String> = snapshot.latch_files.iter().cloned().collect();
                        if let Err(error) = registry.acknowledge(held) {
                            tracing::warn!(%error, "cannot record the acknowledgement");
                        }
                        acknowledged = Some(snapshot.latch_files.clone());
                    }
                    continue;
                }
                let held = snapshot.latch_files.clone();
                let registration = view.waiters().register_latches(held.clone());
                if view.load().latch_files == held {
                    futures::executor::block_on(registration.woken());
                }
            }
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start the acknowledgement push thread");
    }
}
