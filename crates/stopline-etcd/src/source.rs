//! [`EtcdSource`]: the gateway's view in etcd mode — a watch on the prefix, and a permit.
//!
//! A dedicated thread connects to a member, reads the control records at one revision, and
//! watches the prefix from the next revision. Every change to latches, the WAL, the epoch, the
//! state or the cleared folder triggers a fresh consistent read, cached here, then a refresh of
//! the gateway's view. Any watch error, a cancelled watch or a broken connection is answered by
//! reconnecting (to the next member) and a full reload; a periodic full reload runs besides.
//!
//! The *permit*: every successful answer from etcd (a read, a watch message) renews it; while
//! idle the thread makes a lightweight read every quarter of `permit_ttl`. When no answer came
//! for `permit_ttl` (default 2 s), [`ViewSource::permit_lapsed`] refuses noncritical work and
//! the gateway reports itself uncovered. Reading never blocks on the network: the view is the
//! last etcd view merged with a fresh read of this host's own control directory (whose latches —
//! fallback engages included — are watched by inotify as in local mode).

use crate::merge::merge;
use crate::names::Names;
use crate::plane::EtcdPlane;
use crate::read::Snapshot;
use crate::register::Registration;
use etcd_client::{Client, GetOptions, WatchOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stopline_control::view_feed::ViewFeed;
use stopline_control::view_source::{read_local, ViewSource};
use stopline_core::ack::ServerRecord;
use stopline_core::{ControlView, Refusal, RefusalCode};

/// The default permit: how long a gateway trusts its view without word from etcd.
pub const DEFAULT_PERMIT_TTL: Duration = stopline_control::config::DEFAULT_PERMIT_TTL;

/// The gateway's view source in etcd mode.
#[derive(Debug)]
pub struct EtcdSource {
    plane: EtcdPlane,
    permit_ttl: Duration,
    cache: Mutex<Option<ControlView>>,
    heard: Mutex<Option<Instant>>,
    registration: Arc<Registration>,
    /// This host's own directory as a view source (the gateway's `LocalSource`): its watchers
    /// keep fallback latches in the view, exactly as in local mode.
    local: Arc<dyn ViewSource>,
}

impl EtcdSource {
    /// A source over `plane` with the given permit, starting `local`'s watchers beside its own
    /// (`local` reads the directory of `plane`'s host).
    pub fn new(plane: EtcdPlane, permit_ttl: Duration, local: Arc<dyn ViewSource>) -> EtcdSource {
        let registration = Arc::new(Registration::new(plane.clone()));
        EtcdSource {
            plane,
            permit_ttl,
            cache: Mutex::new(None),
            heard: Mutex::new(None),
            registration,
            local,
        }
    }

    fn heard(&self) {
        *self.heard.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    fn install(&self, snapshot: &Snapshot, view: &dyn ViewFeed) {
        // Judged against the high-water marks (raised durably first) before the gate sees it.
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = Some(self.plane.judge(snapshot));
        self.heard();
        view.refresh_fast();
    }

    /// The watch loop: connect, read, watch; on any error reconnect and read again.
    fn run(&self, view: &dyn ViewFeed, reload: Duration, stop: &AtomicBool) {
        let handle = self.plane.client.handle();
        let names = self.plane.names.clone();
        let (mut failures, mut next_note) = (0u32, 1u32);
        while !stop.load(Ordering::SeqCst) {
            let outcome = handle.block_on(async {
                let mut client = self
                    .plane
                    .client
                    .connect_next()
                    .await
                    .map_err(|e| e.to_string())?;
                self.watch_once(&mut client, &names, view, reload, stop)
                    .await
            });
            if let Err(error) = outcome {
                failures += 1;
                if failures >= next_note {
                    view.note(format!("etcd watch lost ({error}); reconnecting"), false);
                    next_note = failures + 50;
                }
                std::thread::sleep(Duration::from_millis(100));
            } else {
                (failures, next_note) = (0, 1);
            }
        }
    }

    async fn watch_once(
        &self,
        client: &mut Client,
        names: &Names,
        view: &dyn ViewFeed,
        reload: Duration,
        stop: &AtomicBool,
    ) -> Result<(), String> {
        let text = |e: etcd_client::Error| e.to_string();
        let snapshot = Snapshot::fetch_async(client, names).await.map_err(text)?;
        self.install(&snapshot, view);
        let mut last_full = Instant::now();
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(snapshot.revision + 1);
        let mut stream = client
            .watch(names.all(), Some(options))
            .await
            .map_err(text)?;
        let tick = (self.permit_ttl / 4).max(Duration::from_millis(50));
        let relevant = [
            names.latches(),
            names.wal(),
            names.epoch(),
            names.state(),
            names.cleared(),
        ];
        while !stop.load(Ordering::SeqCst) {
            match tokio::time::timeout(tick, stream.message()).await {
                Ok(Ok(Some(response))) => {
                    self.heard();
                    if response.canceled() {
                        return Err(format!("watch cancelled: {}", response.cancel_reason()));
                    }
                    let changed = response.events().iter().any(|event| {
                        event.kv().is_some_and(|kv| {
                            relevant.iter().any(|r| kv.key().starts_with(r.as_bytes()))
                        })
                    });
                    if changed {
                        let snapshot = Snapshot::fetch_async(client, names).await.map_err(text)?;
                        self.install(&snapshot, view);
                        last_full = Instant::now();
                    }
                }
                Ok(Ok(None)) => return Err("the watch stream ended".into()),
                Ok(Err(error)) => return Err(text(error)),
                Err(_idle) if last_full.elapsed() >= reload => {
                    let snapshot = Snapshot::fetch_async(client, names).await.map_err(text)?;
                    self.install(&snapshot, view);
                    last_full = Instant::now();
                }
                Err(_idle) => {
                    // A lightweight linearizable read: it renews the permit only if the cluster
                    // has a leader and answers.
                    let count = Some(GetOptions::new().with_count_only());
                    let read = client.get(names.epoch(), count);
                    tokio::time::timeout(tick, read)
                        .await
                        .map_err(|_| "etcd did not answer a read".to_string())?
                        .map_err(text)?;
                    self.heard();
                }
            }
        }
        Ok(())
    }
}

impl ViewSource for EtcdSource {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn read(&self) -> ControlView {
        let etcd = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| {
                ControlView::closed(Refusal::new(
                    RefusalCode::DistributedUnavailable,
                    "the gateway has not read the control records from etcd yet",
                ))
            });
        merge(etcd, read_local(&self.plane.local))
    }

    fn prime(&self) {
        // The verification key too, so that starting the gateway needs no network call.
        if let Err(error) = crate::gateways::published_key(&self.plane) {
            tracing::warn!(%error, "keys/verify.pub cannot be read yet");
        }
        match self.plane.snapshot() {
            Ok(snapshot) => {
                *self.cache.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(self.plane.judge(&snapshot));
                self.heard();
            }
            Err(error) => tracing::warn!(%error, "etcd cannot be read yet; the gate starts closed"),
        }
    }

    fn spawn_watchers(
        self: Arc<Self>,
        view: Arc<dyn ViewFeed>,
        reload_interval: Duration,
        stop: Arc<AtomicBool>,
    ) {
        // This host's own directory (fallback latches), exactly as in local mode.
        self.local
            .clone()
            .spawn_watchers(view.clone(), reload_interval, stop.clone());
        self.registration.clone().spawn(stop.clone());
        let spawned = std::thread::Builder::new()
            .name("stopline-etcd-watch".into())
            .spawn(move || self.run(&*view, reload_interval, &stop));
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot start the etcd watch thread");
        }
    }

    fn permit_left(&self) -> Option<Duration> {
        let heard = *self.heard.lock().unwrap_or_else(|p| p.into_inner());
        Some(heard.map_or(Duration::ZERO, |h| {
            self.permit_ttl.saturating_sub(h.elapsed())
        }))
    }

    fn permit_lapsed(&self) -> Option<Refusal> {
        let heard = *self.heard.lock().unwrap_or_else(|p| p.into_inner());
        let silent = heard.map(|h| h.elapsed());
        match silent {
            Some(silent) if silent <= self.permit_ttl => None,
            _ => Some(Refusal::new(
                RefusalCode::DistributedUnavailable,
                format!(
                    "no word from etcd for {} (permit_ttl {} ms): noncritical work is refused until etcd answers",
                    silent.map_or("ever".into(), |s| format!("{} ms", s.as_millis())),
                    self.permit_ttl.as_millis()
                ),
            )),
        }
    }

    fn publish(&self, record: &ServerRecord) {
        self.registration.publish(record);
    }

    fn withdraw(&self) {
        self.registration.withdraw();
    }

    fn pushes_acks(&self) -> bool {
        true
    }
}
