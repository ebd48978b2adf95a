//! The gateway's in-memory view of latches and epochs, swapped atomically.
//!
//! Admission reads the current [`Snapshot`] without a lock (`ArcSwap`); refreshes build a new
//! snapshot from fresh store reads and swap it in, bumping the generation whenever what gates
//! decide on changed. A *fast* refresh re-reads latches, WAL, epoch and state (what inotify
//! reports); a *full* refresh also re-takes the census of unresolved operations (periodic).
//! Refreshes are serialized. A snapshot older than [`ViewHolder::max_age_ms`] closes the gate: a
//! view that cannot be refreshed must never keep admitting on old news. What is read comes from
//! the holder's [`ViewSource`] (the local directory unless a distributed backend is configured).
//! A latch that appears in `latches/` joins the view at once ([`ViewHolder::add_appeared_latches`],
//! latches first), before the locked read that waits while an engage advances the epoch; only
//! additions take that path, since they can only make decisions stricter.
//!
//! Earlier still, a body read in `latches.staging/` before its entry is published counts for
//! admission (docs/reference.md §5, "The gate closes before the disk answers"; the rule is
//! `stopline_core::staged`). The staged latches are kept apart from the durable view in the
//! type: a [`Snapshot`]'s `view` and `latch_files` never hold one (what acknowledges, reports
//! status, alerts or files evidence reads those), and the only way to them is
//! `Snapshot::decide_admission`, which only decides.

use crate::local_source::LocalSource;
use crate::timeline::{Mark, Timeline};
use crate::waiters::Waiters;
use arc_swap::ArcSwap;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stopline_control::view_feed::ViewFeed;
use stopline_control::view_source::ViewSource;
use stopline_core::staged::StagedLatches;
use stopline_core::view::{Authority, Blocker};
use stopline_core::{
    ActiveLatch, CheckReceipt, ControlView, Refusal, RefusalCode, Subject, TaskClass,
};
use stopline_store::follow::JournalFollower;
use stopline_store::Store;
use tokio::sync::watch;

/// One immutable view with its generation and load time.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The control view gates decide from.
    pub view: ControlView,
    /// Bumped every time the view's content changes.
    pub generation: u64,
    /// Unix ms of the read this snapshot came from.
    pub loaded_ms: i64,
    /// File names of the latches it holds.
    pub latch_files: BTreeSet<String>,
    /// The view admission decides from while latches are staged: `view` with them
    /// (`StagedLatches::admission_view`); `None` when nothing is staged. Private: read only
    /// by [`Snapshot::decide_admission`].
    admission: Option<Arc<ControlView>>,
    /// The file names of the staged latches `admission` holds.
    staged: BTreeSet<String>,
}

impl Snapshot {
    fn new(view: ControlView, generation: u64, loaded_ms: i64) -> Snapshot {
        let latch_files = view.latches.iter().map(|l| l.file.clone()).collect();
        Snapshot {
            view,
            generation,
            loaded_ms,
            latch_files,
            admission: None,
            staged: BTreeSet::new(),
        }
    }

    /// Decide a call for admission (`ControlView::decide`): from the durable view, and from the
    /// latches staged in `latches.staging/` too while there are any. Admission only: nothing
    /// that acknowledges, reports or alerts may decide through this (they read `view`).
    pub(crate) fn decide_admission(
        &self,
        subject: &Subject,
        class: TaskClass,
        authority: Option<Authority>,
        target: Option<&str>,
        now_ms: i64,
    ) -> CheckReceipt {
        self.admission
            .as_deref()
            .unwrap_or(&self.view)
            .decide(subject, class, authority, target, now_ms)
    }

    /// How many staged latches admission counts besides the view's own.
    pub fn staged_count(&self) -> usize {
        self.staged.len()
    }

    /// True when this view closes every gate because the control state cannot be trusted.
    pub fn is_faulted(&self) -> bool {
        !self.view.faults.is_empty()
    }
}

/// Holds the current snapshot and refreshes it.
#[derive(Debug)]
pub struct ViewHolder {
    store: Store,
    source: Arc<dyn ViewSource>,
    current: ArcSwap<Snapshot>,
    refresh: Mutex<()>,
    changed: watch::Sender<u64>,
    loaded: AtomicBool,
    degraded: AtomicBool,
    notes: Mutex<Vec<String>>,
    max_age_ms: i64,
    /// A deliberate delay before a changed view is swapped in (drills of a slow gateway only).
    swap_delay_ms: AtomicU64,
    /// Serializes swaps (refreshes, latches-first additions, blocked targets).
    swap: Mutex<()>,
    /// Reads started so far; a read numbered above a pin saw `latches/` after it.
    reads: AtomicU64,
    /// Latches added before the locked read confirmed them, with the read count at the time.
    pinned: Mutex<Vec<(u64, ActiveLatch)>>,
    /// The bodies read in `latches.staging/` that admission counts (`stopline_core::staged`).
    staged: Mutex<Staged>,
    /// What the last census read of each operation journal (`stopline_store::follow`): each
    /// census reads only what the journals gained since.
    journals: JournalFollower,
    /// The calls waiting on the view (to be cut, or refused while being prepared), each woken
    /// only by a change that concerns it.
    waiters: Arc<Waiters>,
    /// A drill's marks of each changed view (off unless a drill turns it on).
    timeline: Arc<Timeline>,
}

impl ViewHolder {
    /// A holder that starts closed until the first refresh.
    pub fn new(store: Store, reload_interval: Duration) -> ViewHolder {
        let closed = ControlView::closed(Refusal::new(
            RefusalCode::ControlIo,
            "the gateway has not loaded its view yet",
        ));
        let (changed, _) = watch::channel(0);
        ViewHolder {
            source: Arc::new(LocalSource::new(store.clone())),
            store,
            current: ArcSwap::from_pointee(Snapshot::new(closed, 0, 0)),
            refresh: Mutex::new(()),
            changed,
            loaded: AtomicBool::new(false),
            degraded: AtomicBool::new(false),
            notes: Mutex::new(Vec::new()),
            max_age_ms: (reload_interval.as_millis() as i64 * 5).max(5000),
            swap_delay_ms: AtomicU64::new(0),
            swap: Mutex::new(()),
            reads: AtomicU64::new(0),
            pinned: Mutex::new(Vec::new()),
            staged: Mutex::default(),
            journals: JournalFollower::default(),
            waiters: Arc::default(),
            timeline: Arc::default(),
        }
    }

    /// The timeline a drill reads (`crate::timeline`); shared with the listener.
    pub fn timeline(&self) -> &Arc<Timeline> {
        &self.timeline
    }

    /// The current snapshot.
    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// A receiver woken with the generation whenever the view changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The calls waiting on the view; a changed view wakes only those it concerns.
    pub(crate) fn waiters(&self) -> &Arc<Waiters> {
        &self.waiters
    }

    /// True once a refresh has succeeded.
    pub fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::SeqCst)
    }

    /// The oldest a snapshot may be before it closes the gate.
    pub fn max_age_ms(&self) -> i64 {
        self.max_age_ms
    }

    /// The refusal a stale snapshot means at `now_ms`, if it is stale.
    pub fn staleness(&self, snapshot: &Snapshot, now_ms: i64) -> Option<Refusal> {
        let age = now_ms - snapshot.loaded_ms;
        (age > self.max_age_ms).then(|| {
            Refusal::new(
                RefusalCode::ControlIo,
                format!(
                    "the gateway's view could not be refreshed for {age} ms; the gate is closed"
                ),
            )
        })
    }

    /// Record that the watch degraded (lost, overflowed or never made); shown in status.
    pub fn note(&self, note: impl Into<String>, degraded: bool) {
        let note = note.into();
        tracing::warn!(%note, "gateway view");
        if degraded {
            self.degraded.store(true, Ordering::SeqCst);
        }
        let mut notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
        notes.push(format!(
            "{}: {note}",
            stopline_store::env::rfc3339(self.store.now_ms())
        ));
        let excess = notes.len().saturating_sub(20);
        notes.drain(..excess);
    }

    /// True when change notification is not (fully) working and only periodic reloads refresh.
    pub fn is_degraded(&self) -> bool {
        self.degraded.load(Ordering::SeqCst)
    }

    /// The notes recorded so far (newest last).
    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Re-read latches, WAL, epoch and state; keep the last census of blocked targets.
    pub fn refresh_fast(&self) -> Arc<Snapshot> {
        let _serial = self.refresh.lock().unwrap_or_else(|p| p.into_inner());
        let blocked = self.load().view.blocked_targets.clone();
        let (view, read) = self.read(blocked);
        self.install(view, true, Some(read))
    }

    /// Re-read everything, the census of unresolved operations included (of the journals,
    /// only what they gained since the last census, and of the WAL only what was appended
    /// since the last read: `stopline_store::follow`).
    pub fn refresh_full(&self) -> Arc<Snapshot> {
        let _serial = self.refresh.lock().unwrap_or_else(|p| p.into_inner());
        let blocked = self.store.blocked_targets_following(&self.journals);
        let (view, read) = self.read(blocked);
        self.install(view, true, Some(read))
    }

    /// Re-take the census of unresolved operations from what the journals gained, keeping
    /// the latches, epoch and state of the current view (another process's journal changed).
    pub fn refresh_journals(&self) -> Arc<Snapshot> {
        let _serial = self.refresh.lock().unwrap_or_else(|p| p.into_inner());
        let blocked_targets = self.store.blocked_targets_following(&self.journals);
        let view = ControlView {
            blocked_targets,
            ..self.load().view.clone()
        };
        self.install(view, false, None)
    }

    fn read(&self, blocked_targets: BTreeMap<String, Vec<Blocker>>) -> (ControlView, u64) {
        let read = self.reads.fetch_add(1, Ordering::SeqCst) + 1;
        let view = ControlView {
            blocked_targets,
            ..self.source.read()
        };
        (view, read)
    }

    /// Latches first: a well-formed latch that appeared in the local `latches/` joins the view
    /// at once, without waiting for the locked read, which waits while an engage holds the WAL
    /// lock to advance the epoch (the latch's existence is the signal, docs/reference.md §5). Adding a latch
    /// can only make decisions stricter, so this never opens a gate. An entry still being
    /// written, or one that does not parse, waits for the full read (which re-reads it and
    /// fails closed); removals always wait for it. A pinned latch stays in every view until a
    /// read that started after the pin has seen `latches/`. Returns whether anything was added.
    pub fn add_appeared_latches(&self) -> bool {
        let (latches, faults) = self.store.latches().active(None);
        if !faults.is_empty() {
            return false;
        }
        let current = self.load();
        let appeared: Vec<ActiveLatch> = latches
            .into_iter()
            .filter(|l| l.problem.is_none() && !current.latch_files.contains(&l.file))
            .collect();
        if appeared.is_empty() {
            return false;
        }
        let at = self.reads.load(Ordering::SeqCst);
        self.pinned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(appeared.into_iter().map(|l| (at, l)));
        let view = current.view.clone();
        self.install(view, false, None);
        true
    }

    /// Staged latches (docs/reference.md §5, "The gate closes before the disk answers"): list
    /// the local `latches.staging/`, read with the bounded read each body not known yet, and
    /// count for admission at once every one that parses as a latch (one that does not is
    /// ignored). A staged body whose file went away is forgotten only once a read that began
    /// after this listing was installed (the writer removes it after publishing: that read
    /// holds the entry, or its later removal); returns true when one went away, so the caller
    /// reads.
    pub fn add_staged_latches(&self) -> bool {
        let current = self.load();
        let mut known = self
            .staged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .latches
            .files();
        known.extend(current.latch_files.iter().cloned());
        let (listed, bodies) = self.store.latches().staged(&known);
        let now = self.store.now_ms();
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        let mut added = false;
        for body in bodies {
            added |= staged.latches.stage(body, &current.view, now);
        }
        staged.latches.keep_spent(&listed);
        // Reads numbered above this one began after the listing.
        let at = self.reads.load(Ordering::SeqCst);
        let gone: Vec<String> = staged
            .latches
            .files()
            .into_iter()
            .filter(|file| !listed.contains(file))
            .collect();
        let any_gone = !gone.is_empty();
        for file in gone {
            if !staged.gone.iter().any(|(_, f)| *f == file) {
                staged.gone.push((at, file));
            }
        }
        drop(staged);
        if added {
            self.restage();
        }
        any_gone
    }

    /// Forget the staged latches whose time passed; how long until the next one's passes.
    pub fn expire_staged(&self) -> Option<Duration> {
        let now = self.store.now_ms();
        let (expired, next) = {
            let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
            let expired = staged.latches.settle(&self.load().view, now);
            (expired, staged.latches.next_expiry_ms())
        };
        if expired {
            self.restage();
        }
        next.map(|at| Duration::from_millis(u64::try_from(at - now).unwrap_or(0)))
    }

    /// Swap in the current view with the staged latches as they are now (a new generation, so
    /// no refusal kept under the old one outlives the change). The view itself is unchanged:
    /// nothing waiting on it is woken.
    fn restage(&self) {
        let delay = self.swap_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            std::thread::sleep(Duration::from_millis(delay));
        }
        let _swap = self.swap.lock().unwrap_or_else(|p| p.into_inner());
        let previous = self.load();
        let (admission, staged) = self.admission_for(&previous.view, None);
        if staged == previous.staged {
            return;
        }
        self.current.store(Arc::new(Snapshot {
            view: previous.view.clone(),
            generation: previous.generation + 1,
            loaded_ms: previous.loaded_ms,
            latch_files: previous.latch_files.clone(),
            admission,
            staged,
        }));
    }

    /// The admission view for `view` and the staged files it adds: staged latches `view`
    /// holds are forgotten (the durable view answers for them), so are those whose time
    /// passed, and those whose file went away before read number `read` began.
    fn admission_for(
        &self,
        view: &ControlView,
        read: Option<u64>,
    ) -> (Option<Arc<ControlView>>, BTreeSet<String>) {
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(read) = read {
            let forgotten: BTreeSet<String> = staged
                .gone
                .iter()
                .filter(|(at, _)| *at < read)
                .map(|(_, file)| file.clone())
                .collect();
            staged.gone.retain(|(at, _)| *at >= read);
            staged.latches.forget(&forgotten);
        }
        staged.latches.settle(view, self.store.now_ms());
        let files = staged.latches.files();
        staged.gone.retain(|(_, file)| files.contains(file));
        let admission = staged.latches.admission_view(view).map(Arc::new);
        (admission, files)
    }

    /// This holder reading from `source` instead of the local control directory.
    pub fn with_source(mut self, source: Arc<dyn ViewSource>) -> ViewHolder {
        self.source = source;
        self
    }

    /// Where this view comes from.
    pub fn source(&self) -> &Arc<dyn ViewSource> {
        &self.source
    }

    /// Delay every swap of a *changed* view by `delay`: a gateway that refreshes its view late,
    /// for `stopline drill`'s proof that such a gateway fails the drill. Never set by `serve`.
    pub fn delay_swaps_for_drill(&self, delay: Duration) {
        self.swap_delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Swap `view` in; `read` is the number of the read it came from (`None`: a change made to
    /// the current view). Pinned latches the read started too early to see are kept.
    fn install(&self, mut view: ControlView, fresh: bool, read: Option<u64>) -> Arc<Snapshot> {
        self.keep_pinned(&mut view, read);
        let delay = self.swap_delay_ms.load(Ordering::SeqCst);
        if delay > 0 && self.loaded.load(Ordering::SeqCst) && self.load().view != view {
            std::thread::sleep(Duration::from_millis(delay));
        }
        let swap = self.swap.lock().unwrap_or_else(|p| p.into_inner());
        // Latches pinned while this swap waited.
        self.keep_pinned(&mut view, None);
        let previous = self.load();
        let now = if fresh {
            self.store.now_ms()
        } else {
            previous.loaded_ms
        };
        let (admission, staged) = self.admission_for(&view, read);
        let same = self.loaded.load(Ordering::SeqCst) && previous.view == view;
        let generation = if same && staged == previous.staged {
            previous.generation
        } else {
            previous.generation + 1
        };
        let was_loaded = self.loaded.load(Ordering::SeqCst);
        if !same && (was_loaded || !view.faults.is_empty()) && previous.view.faults != view.faults {
            match view.faults.first() {
                Some(fault) => tracing::error!(
                    code = %fault.code,
                    faults = view.faults.len(),
                    "control state fault: every gate is closed: {}",
                    fault.message
                ),
                None => tracing::info!("control state readable again"),
            }
        }
        let snapshot = Arc::new(Snapshot {
            admission,
            staged,
            ..Snapshot::new(view, generation, now)
        });
        self.current.store(snapshot.clone());
        self.loaded.store(true, Ordering::SeqCst);
        drop(swap);
        if !same {
            // The view is stored before the waiters are scanned (see `waiters.rs`: a call that
            // registers after the scan began reads this view itself). A test seam: `hold_if:`
            // parks the swapping thread here, between the two; no action of it means anything.
            stopline_store::failpoint::hit("gateway.view.wake").ok();
            let stored = Instant::now();
            let woken = self
                .waiters
                .wake_concerned(&snapshot.view, self.store.now_ms());
            if self.timeline.is_on() {
                self.timeline.mark(Mark::View {
                    stored,
                    woke: Instant::now(),
                    latches: snapshot.view.latches.len(),
                    woken,
                });
            }
            self.changed.send_replace(generation);
        }
        snapshot
    }

    /// Forget the pins that `read` (a read's number) started after, then add the pinned latches
    /// `view` lacks.
    fn keep_pinned(&self, view: &mut ControlView, read: Option<u64>) {
        let mut pinned = self.pinned.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(read) = read {
            pinned.retain(|(at, _)| read <= *at);
        }
        for (_, latch) in pinned.iter() {
            if !view.latches.iter().any(|l| l.file == latch.file) {
                view.latches.push(latch.clone());
            }
        }
    }

    /// Add an operation this gateway itself marked in doubt to the blocked targets at once,
    /// without waiting for the next census (a model request, which blocks nobody, is not added).
    pub fn block_target(&self, target: &str, blocker: Blocker) {
        if blocker.blocks == stopline_core::ops::Blocks::Nobody {
            return;
        }
        let _serial = self.refresh.lock().unwrap_or_else(|p| p.into_inner());
        let mut view = self.load().view.clone();
        let blockers = view.blocked_targets.entry(target.to_string()).or_default();
        if !blockers.contains(&blocker) {
            blockers.push(blocker);
        }
        self.install(view, false, None);
    }

    /// How many reads of the control state this holder has started.
    pub fn reads_started(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }

    /// The store this view reads.
    pub fn store(&self) -> &Store {
        &self.store
    }
}

/// The staged latches of a holder and the ones whose staging file went away.
#[derive(Debug, Default)]
struct Staged {
    latches: StagedLatches,
    /// A staged file a listing found gone, with the number of reads begun by then: forgotten
    /// once a read numbered above it is installed.
    gone: Vec<(u64, String)>,
}

/// What the source's threads do to this holder (see `feed.rs`).
impl ViewFeed for ViewHolder {
    fn refresh_fast(&self) {
        ViewHolder::refresh_fast(self);
    }

    fn refresh_full(&self) {
        ViewHolder::refresh_full(self);
    }

    fn refresh_journals(&self) {
        ViewHolder::refresh_journals(self);
    }

    fn add_appeared_latches(&self) -> bool {
        ViewHolder::add_appeared_latches(self)
    }

    fn add_staged_latches(&self) -> bool {
        ViewHolder::add_staged_latches(self)
    }

    fn expire_staged(&self) -> Option<Duration> {
        ViewHolder::expire_staged(self)
    }

    fn note(&self, note: String, degraded: bool) {
        ViewHolder::note(self, note, degraded);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stopline_core::latch::LatchSession;
    use stopline_core::{Level, Name, Scope};
    use stopline_store::EngageRequest;

    /// The real clock moved by hand: a staged body's two seconds pass without a sleep.
    #[derive(Debug, Default)]
    struct HandClock(std::sync::atomic::AtomicI64);

    impl stopline_store::env::Env for HandClock {
        fn now_ms(&self) -> i64 {
            stopline_store::env::SystemEnv.now_ms() + self.0.load(Ordering::SeqCst)
        }
        fn random_hex(&self, bytes: usize) -> String {
            stopline_store::env::SystemEnv.random_hex(bytes)
        }
        fn pid(&self) -> u32 {
            std::process::id()
        }
    }

    fn worker_decision(view: &ViewHolder) -> stopline_core::Decision {
        let subject = Subject::proven(vec![Name::parse("worker").unwrap()], vec![], vec![]);
        view.load()
            .decide_admission(
                &subject,
                TaskClass::Noncritical,
                None,
                None,
                view.store().now_ms(),
            )
            .decision
    }

    /// A latch body as an engage stages it: `latches.staging/<id>.json`, not linked.
    #[allow(clippy::disallowed_methods)] // a test writes its own fixture
    fn stage_by_hand(store: &Store, id: &str, agent: &str, bytes: Option<&[u8]>) -> String {
        let record = stopline_core::LatchRecord {
            kind: "breakglass_latch".into(),
            id: id.into(),
            scope: Scope::Agent(Name::parse(agent).unwrap()),
            level: Level::HaltAll,
            by: "test".into(),
            reason: "staged by hand".into(),
            pid: 1,
            session: LatchSession {
                bound: None,
                root: None,
                tier: "console".into(),
            },
            ts: stopline_store::env::rfc3339(store.now_ms()),
        };
        let body = serde_json::to_vec(&record).unwrap();
        let file = record.file_name();
        std::fs::write(store.layout().staging().join(&file), bytes.unwrap_or(&body)).unwrap();
        file
    }

    /// Staged latches refuse for admission at once, are never in the durable view (what
    /// acknowledges and reports), are ignored when they do not parse, and stop counting after
    /// 2 s, when their entry is read in `latches/`, or when their file went away and a later
    /// read found nothing.
    #[test]
    #[allow(clippy::disallowed_methods)] // a test moves its own fixtures
    fn a_staged_body_refuses_for_admission_only_and_for_two_seconds_at_most() {
        use stopline_core::Decision;
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(HandClock::default());
        let store = Store::with_io(
            dir.path().join("home"),
            Arc::new(stopline_store::fs::RealFs),
            clock.clone(),
        );
        store.ensure_home().unwrap();
        let view = ViewHolder::new(store.clone(), Duration::from_secs(1));
        view.refresh_full();
        assert_eq!(worker_decision(&view), Decision::Allow);

        stage_by_hand(
            &store,
            "latch_torn",
            "worker",
            Some(b"{\"kind\":\"breakglass_"),
        );
        assert!(!view.add_staged_latches());
        assert_eq!(
            worker_decision(&view),
            Decision::Allow,
            "a torn body changes nothing"
        );

        let before = view.load().generation;
        let file = stage_by_hand(&store, "latch_staged1", "worker", None);
        view.add_staged_latches();
        let snapshot = view.load();
        assert_eq!(worker_decision(&view), Decision::Block);
        assert!(
            snapshot.generation > before,
            "no refusal kept across the change"
        );
        assert_eq!(snapshot.staged_count(), 1);
        assert!(
            snapshot.view.latches.is_empty() && snapshot.latch_files.is_empty(),
            "the durable view (acknowledgement, status) holds no staged latch"
        );
        assert_eq!(
            view.refresh_fast().view.latches.len(),
            0,
            "a read of latches/ finds nothing"
        );
        assert_eq!(
            worker_decision(&view),
            Decision::Block,
            "a read does not drop it"
        );
        let left = view.expire_staged().expect("one is staged");
        assert!(left <= Duration::from_secs(2));

        clock.0.store(2_000, Ordering::SeqCst);
        assert_eq!(view.expire_staged(), None);
        assert_eq!(worker_decision(&view), Decision::Allow, "2 s passed");
        view.add_staged_latches();
        assert_eq!(
            worker_decision(&view),
            Decision::Allow,
            "a body whose time passed is not staged again"
        );
        std::fs::remove_file(store.layout().staging().join(&file)).unwrap();

        // Published: the durable view answers, the staged body is forgotten.
        let file = stage_by_hand(&store, "latch_staged2", "worker", None);
        view.add_staged_latches();
        assert_eq!(worker_decision(&view), Decision::Block);
        std::fs::hard_link(
            store.layout().staging().join(&file),
            store.layout().latches().join(&file),
        )
        .unwrap();
        let snapshot = view.refresh_fast();
        assert_eq!(snapshot.staged_count(), 0);
        assert!(snapshot.latch_files.contains(&file));
        std::fs::remove_file(store.layout().staging().join(&file)).unwrap();
        std::fs::remove_file(store.layout().latches().join(&file)).unwrap();
        view.refresh_fast();
        assert_eq!(worker_decision(&view), Decision::Allow);

        // Gone from staging and not in `latches/` by the next read: forgotten then, not before.
        let file = stage_by_hand(&store, "latch_staged3", "worker", None);
        view.add_staged_latches();
        std::fs::remove_file(store.layout().staging().join(&file)).unwrap();
        assert!(
            view.add_staged_latches(),
            "its file went away: a read is due"
        );
        assert_eq!(
            worker_decision(&view),
            Decision::Block,
            "not before the read"
        );
        view.refresh_fast();
        assert_eq!(worker_decision(&view), Decision::Allow);
    }

    #[test]
    fn a_new_latch_joins_at_once_and_leaves_only_with_a_later_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"));
        let view = ViewHolder::new(store.clone(), Duration::from_secs(1));
        view.refresh_full();
        assert!(!view.add_appeared_latches(), "nothing new yet");
        let scope = Scope::Agent(Name::parse("worker").unwrap());
        let outcome = store
            .engage(&EngageRequest {
                scope: scope.clone(),
                level: Level::HaltAll,
                by: "test".into(),
                reason: "latches first".into(),
                session: LatchSession {
                    bound: None,
                    root: None,
                    tier: "console".into(),
                },
            })
            .unwrap();
        let file = outcome.latch.file_name();
        let before = view.load().generation;
        assert!(view.add_appeared_latches());
        let snapshot = view.load();
        assert!(snapshot.latch_files.contains(&file));
        assert!(snapshot.generation > before, "a change wakes waiters");
        assert!(!view.add_appeared_latches(), "added once");
        assert!(view.refresh_fast().latch_files.contains(&file));
        store.disengage(&scope, "lifted", "operator").unwrap();
        assert!(
            !view.refresh_fast().latch_files.contains(&file),
            "a read that started after the pin is believed about removals"
        );
    }
}
