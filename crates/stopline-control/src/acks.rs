//! Gateway registrations and latch acknowledgements, from the engaging side.
//!
//! Every running gateway registers itself as `servers/<id>.json` ([`ServerRecord`]) and rewrites
//! it every heartbeat. A gateway is *live* when its process exists (pid and start time match) and
//! its heartbeat is fresh. After a latch is durable, engage asks every live gateway, each over its
//! loopback acknowledgement socket, to acknowledge the latch, and waits (bounded by
//! `ack_timeout_ms`) for each. A gateway acknowledges only once its view holds the latch and every
//! call it admitted under an older view has been handed upstream. Status lists live gateways that
//! have not acknowledged an active latch, or speak an older protocol, as uncovered. This module
//! never changes a latch: an unanswered acknowledgement is a name in `unacknowledged`, no more.
//!
//! `token revoke` waits the same way, bounded by the same `ack_timeout_ms`, for every live
//! gateway to acknowledge the revocation's epoch revision ([`collect_revocation`]): a gateway
//! acknowledges once its view holds it, so it refuses the token from the next call on.

use crate::context::Context;
use serde::Serialize;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use stopline_core::ack::{AckReply, AckRequest, EpochAckRequest, UncoveredServer};
use stopline_core::ControlView;

/// The acknowledgement protocol version this build speaks. A live gateway registered with an
/// older one counts as uncovered.
pub const GATEWAY_PROTOCOL: u32 = 1;
/// A heartbeat older than this means the gateway is not live.
pub const HEARTBEAT_STALE_MS: i64 = 5_000;

pub use stopline_core::ack::{BudgetNearLimit, ServerRecord, NEAR_LIMIT};

/// The result of asking the live gateways to acknowledge a latch.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AckOutcome {
    /// Gateways that acknowledged in time.
    pub acknowledged_by: Vec<String>,
    /// Live gateways that did not.
    pub unacknowledged: Vec<String>,
    /// Registrations that could not be read, and similar notes.
    pub warnings: Vec<String>,
    /// Microseconds from the start of the collection to the last acknowledgement received
    /// (`None` when no gateway acknowledged).
    pub last_ack_us: Option<u64>,
}

/// Every live gateway registration, and notes about those that could not be read: the ones a
/// distributed plane keeps (on every host), else those in the local `servers/`.
pub fn live_servers(ctx: &Context) -> (Vec<ServerRecord>, Vec<String>) {
    match ctx.plane.gateways() {
        Some(registered) => plane_servers(registered),
        None => local_servers(ctx),
    }
}

/// Gateways registered with a distributed plane. Their lease is their liveness (their pids
/// belong to other hosts), and what they acknowledged is what the plane holds for them.
fn plane_servers(
    registered: Result<Vec<stopline_store::PlaneGateway>, stopline_store::StoreError>,
) -> (Vec<ServerRecord>, Vec<String>) {
    let gateways = match registered {
        Ok(gateways) => gateways,
        Err(e) => {
            return (
                Vec::new(),
                vec![format!("gateway registrations cannot be read: {e}")],
            )
        }
    };
    let (mut live, mut notes) = (Vec::new(), Vec::new());
    for gateway in gateways {
        match serde_json::from_value::<ServerRecord>(gateway.record) {
            Ok(mut record) => {
                record.acknowledged = gateway.acknowledged;
                live.push(record);
            }
            Err(e) => notes.push(format!("a gateway registration is unreadable: {e}")),
        }
    }
    (live, notes)
}

/// Every registration in the local `servers/` that is live.
fn local_servers(ctx: &Context) -> (Vec<ServerRecord>, Vec<String>) {
    let dir = ctx.store.layout().servers();
    let names = match ctx.store.fs().read_dir(&dir) {
        Ok(names) => names,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (Vec::new(), Vec::new()),
        Err(e) => return (Vec::new(), vec![format!("servers/ is unreadable: {e}")]),
    };
    let now = ctx.store.now_ms();
    let mut live = Vec::new();
    let mut notes = Vec::new();
    for name in names
        .iter()
        .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
    {
        let record = ctx
            .store
            .fs()
            .read(&dir.join(name))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<ServerRecord>(&bytes).ok());
        match record {
            Some(record) if is_live(&record, now) => live.push(record),
            Some(_) => {}
            None => notes.push(format!("servers/{name} is unreadable")),
        }
    }
    (live, notes)
}

fn is_live(record: &ServerRecord, now_ms: i64) -> bool {
    now_ms - record.heartbeat_ms < HEARTBEAT_STALE_MS
        && stopline_store::ops::process_start_time(record.pid) == Some(record.start_time)
}

/// Ask every live gateway to acknowledge `latch_file`, waiting at most `timeout` in all: through
/// a distributed plane when it can (gateways on every host), else over the loopback sockets of
/// the gateways registered in the local `servers/` (a stop that could only be written locally).
pub fn collect(ctx: &Context, latch_file: &str, timeout: Duration) -> AckOutcome {
    let started = Instant::now();
    if let Some(acks) = ctx.plane.collect_acks(latch_file, timeout) {
        let mut outcome = AckOutcome {
            warnings: acks.warnings,
            ..AckOutcome::default()
        };
        if !acks.acknowledged_by.is_empty() {
            outcome.last_ack_us = Some(started.elapsed().as_micros() as u64);
        }
        outcome.acknowledged_by = acks.acknowledged_by;
        outcome.unacknowledged = acks.unacknowledged;
        return outcome;
    }
    let (servers, warnings) = local_servers(ctx);
    let latch = latch_file.to_string();
    ask_every(servers, warnings, started, timeout, move |timeout_ms| {
        serde_json::to_vec(&AckRequest {
            latch: latch.clone(),
            timeout_ms: Some(timeout_ms),
        })
    })
}

/// Ask every live gateway of this host to acknowledge revision `revision` of the epoch scope
/// `scope` (a `token revoke`'s), waiting at most `timeout` in all, over their loopback sockets.
///
/// With a distributed plane, a gateway of another host cannot be asked over loopback and
/// acknowledges no revocation through the plane: each one the plane registers that is not
/// among this host's is named unacknowledged (it refuses the token once its watch of the plane
/// follows, which nothing here waits for), never counted as acknowledged.
pub fn collect_revocation(
    ctx: &Context,
    scope: &str,
    revision: u64,
    timeout: Duration,
) -> AckOutcome {
    let started = Instant::now();
    let (servers, warnings) = local_servers(ctx);
    let here: Vec<String> = servers.iter().map(|s| s.id.clone()).collect();
    let elsewhere: Vec<String> = match ctx.plane.gateways() {
        Some(_) => {
            let (registered, _) = live_servers(ctx);
            registered
                .into_iter()
                .map(|s| s.id)
                .filter(|id| !here.contains(id))
                .collect()
        }
        None => Vec::new(),
    };
    let scope = scope.to_string();
    let mut outcome = ask_every(servers, warnings, started, timeout, move |timeout_ms| {
        serde_json::to_vec(&EpochAckRequest {
            revision,
            scope: scope.clone(),
            timeout_ms: Some(timeout_ms),
        })
    });
    if !elsewhere.is_empty() {
        outcome.warnings.push(format!(
            "gateways of other hosts ({}) are not asked to acknowledge a revocation: each refuses the token once it follows the plane",
            elsewhere.join(", ")
        ));
        outcome.unacknowledged.extend(elsewhere);
    }
    outcome
}

/// One request line with the time left, for [`ask_every`].
type RequestLine = dyn Fn(u64) -> serde_json::Result<Vec<u8>> + Send + Sync;

/// Ask each of `servers` over its loopback socket with the line `request` makes of the time
/// left, all at once, and wait for every answer until `started + timeout`.
fn ask_every(
    servers: Vec<ServerRecord>,
    warnings: Vec<String>,
    started: Instant,
    timeout: Duration,
    request: impl Fn(u64) -> serde_json::Result<Vec<u8>> + Send + Sync + 'static,
) -> AckOutcome {
    let deadline = started + timeout;
    let request: std::sync::Arc<RequestLine> = std::sync::Arc::new(request);
    let askers: Vec<_> = servers
        .into_iter()
        .map(|server| {
            let request = request.clone();
            std::thread::spawn(move || {
                let acked = ask(&server, &*request, deadline).unwrap_or(false);
                (server.id, acked, started.elapsed())
            })
        })
        .collect();
    let mut outcome = AckOutcome {
        warnings,
        ..AckOutcome::default()
    };
    for asker in askers {
        match asker.join() {
            Ok((id, true, after)) => {
                outcome.acknowledged_by.push(id);
                let after = after.as_micros() as u64;
                outcome.last_ack_us = Some(outcome.last_ack_us.map_or(after, |l| l.max(after)));
            }
            Ok((id, false, _)) => outcome.unacknowledged.push(id),
            Err(_) => outcome
                .warnings
                .push("an acknowledgement thread panicked".into()),
        }
    }
    outcome
}

fn ask(server: &ServerRecord, request: &RequestLine, deadline: Instant) -> std::io::Result<bool> {
    let addr: SocketAddr = server
        .ack_addr
        .parse()
        .map_err(|_| std::io::Error::other("bad ack_addr"))?;
    let left = |deadline: Instant| {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::TimedOut))
    };
    let mut stream = TcpStream::connect_timeout(&addr, left(deadline)?)?;
    stream.set_nodelay(true)?;
    let mut bytes = request(left(deadline)?.as_millis() as u64).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    stream.write_all(&bytes)?;
    stream.set_read_timeout(Some(left(deadline)?))?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    // Anything but a reply that says `ack: true` is no acknowledgement.
    Ok(serde_json::from_str::<AckReply>(&line).is_ok_and(|reply| reply.ack))
}

/// Live gateways that leave a latch of `view` unacknowledged or speak an older protocol.
pub fn uncovered_servers(ctx: &Context, view: &ControlView) -> Vec<UncoveredServer> {
    uncovered_among(&live_servers(ctx).0, view)
}

/// Which of the live gateways `servers` do not cover `view`'s latches (as
/// [`uncovered_servers`]).
pub fn uncovered_among(servers: &[ServerRecord], view: &ControlView) -> Vec<UncoveredServer> {
    let mut uncovered = Vec::new();
    for server in servers {
        let missing: Vec<String> = view
            .latches
            .iter()
            .map(|l| l.file.clone())
            .filter(|f| !server.acknowledged.contains(f))
            .collect();
        let old = server.protocol < GATEWAY_PROTOCOL;
        if old || !missing.is_empty() {
            uncovered.push(UncoveredServer::Lagging {
                id: server.id.clone(),
                listen: server.listen.clone(),
                protocol: server.protocol,
                older_protocol: old,
                unacknowledged_latches: missing,
                degraded: server.degraded,
            });
        }
    }
    uncovered
}
