//! Where the gateway's view comes from: a small trait, [`ViewSource`], with the local control
//! directory (`stopline_gateway::LocalSource`: inotify + periodic reload) as the default and a
//! distributed backend (etcd: a watch on the prefix, in `stopline-etcd`) as the other
//! implementation. Here, below both the gateway and the etcd backend, so the storage backend
//! does not depend on the application it serves.
//!
//! A source reads a fresh, fail-closed view without blocking on the network (a distributed
//! source answers from what its own threads last fetched, merged with this host's directory),
//! keeps the view fresh from its own threads (through [`ViewFeed`]), and may hold a *permit*: when it has not
//! heard from its backend for too long, noncritical work is refused. Distributed sources also
//! carry this gateway's registration and acknowledgements to the backend, so that engage on any
//! host collects them; `publish` must queue, never block.

use crate::view_feed::ViewFeed;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use stopline_core::ack::ServerRecord;
use stopline_core::{ControlView, Refusal};
use stopline_store::follow::WalFollower;
use stopline_store::{ControlPlane, Store};

/// How many times a latch entry read as empty is re-read before it is believed: an engage
/// creates the file, then writes it, and inotify reports the creation first.
const EMPTY_RETRIES: usize = 3;

/// What keeps a gateway's view: reads, change notification, permit, registration.
pub trait ViewSource: Send + Sync + std::fmt::Debug {
    /// A short name for status (`local`, `etcd`).
    fn name(&self) -> &'static str;
    /// A fresh, fail-closed view (blocked targets are the holder's). Never blocks on a network.
    fn read(&self) -> ControlView;
    /// Fetch what the first [`ViewSource::read`] needs. Called once by `serve` before its
    /// runtime starts (so it may block); a source that skips it starts closed until its own
    /// threads have read.
    fn prime(&self) {}
    /// Start the threads that keep `view` fresh until `stop`.
    fn spawn_watchers(
        self: Arc<Self>,
        view: Arc<dyn ViewFeed>,
        reload_interval: Duration,
        stop: Arc<AtomicBool>,
    );
    /// Why noncritical work must be refused now: the source has not heard from its backend
    /// within its permit. `None` while the permit holds (always, for the local directory).
    fn permit_lapsed(&self) -> Option<Refusal> {
        None
    }
    /// How long from now the permit holds if the backend is not heard from again (zero once
    /// it lapsed); `None` when it never lapses by time alone (the local directory).
    fn permit_left(&self) -> Option<Duration> {
        None
    }
    /// Carry this gateway's registration (and the latches it acknowledges) to the backend.
    fn publish(&self, record: &ServerRecord) {
        let _ = record;
    }
    /// Withdraw the registration (graceful stop).
    fn withdraw(&self) {}
    /// True when acknowledgements travel through the backend, so the gateway must acknowledge
    /// every view change by itself rather than only when asked over its loopback socket.
    fn pushes_acks(&self) -> bool {
        false
    }
}

/// A distributed backend for a gateway: the control plane its verbs use, and its view source
/// (which also carries its registration and acknowledgements to that backend).
#[derive(Clone, Debug)]
pub struct Distributed {
    /// Where latches, epochs, the WAL and state are kept.
    pub plane: Arc<dyn ControlPlane>,
    /// Where the view comes from.
    pub source: Arc<dyn ViewSource>,
    /// What is shared with the fleet: budgets and breaker counters (nothing: as in local mode).
    pub fleet: crate::fleet::Fleet,
}

/// The registration id of a gateway in this process: `gateway-<pid>-<start time>` (the id it
/// registers under, and holds its fleet reservations under).
pub fn gateway_id_for_this_process() -> String {
    let pid = std::process::id();
    let start = stopline_store::ops::process_start_time(pid).unwrap_or(0);
    format!("gateway-{pid}-{start}")
}

/// Read latches, WAL, epoch and state of a local control directory, failing closed; an entry
/// read as empty is re-read a few times first (its creation is reported before its write).
pub fn read_local(store: &Store) -> ControlView {
    read_local_with(store, None)
}

/// [`read_local`] for a reader that follows the WAL across reads.
pub fn read_local_with(store: &Store, follower: Option<&Arc<WalFollower>>) -> ControlView {
    let mut attempt = 0;
    loop {
        let view = match follower {
            Some(follower) => store.load_control_view_following(follower),
            None => store.load_control_view(),
        };
        let empty_entry = view
            .latches
            .iter()
            .any(|l| l.problem.as_deref() == Some("empty"));
        if empty_entry && attempt < EMPTY_RETRIES {
            attempt += 1;
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        return view;
    }
}
