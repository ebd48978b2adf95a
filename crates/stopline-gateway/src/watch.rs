//! What keeps the view fresh: a thread on the store's watch of the control directory
//! (`Store::watch`, inotify) and a periodic full reload thread.
//!
//! Any change the watch reports triggers a fast refresh; a new entry in `latches/` is first
//! added to the view on its own (latches first, see `view.rs`), and before that a body written
//! into `latches.staging/` is counted for admission (staged latches, `view.rs`); the watch also
//! wakes when a staged body's time passes, to forget it. A queue overflow or a lost
//! watch on `latches/` triggers a full refresh and a note in status; if the watch cannot be
//! kept at all (the home went away, a read error), the thread ends and the gateway degrades to
//! the periodic reload, saying so. A change to another process's operation journal (or the
//! archive) re-takes the census from what the journals gained (`stopline_store::follow`). The
//! periodic thread does a full refresh every `reload_interval_ms` (which reads of the WAL and of
//! each operation journal only what was appended since the last read, never the history) and, at start and every minute, rewrites the snapshots of
//! journals that grew and archives the journals of writers that are gone (`ops_archive.rs`). Both are OS threads so request load cannot starve them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use stopline_control::view_feed::ViewFeed;
use stopline_store::follow::WalFollower;
use stopline_store::{Store, WatchError};

/// Start the watch thread. It ends when `stop` is set (checked after each batch of events).
pub fn spawn_watcher(store: Store, view: Arc<dyn ViewFeed>, stop: Arc<AtomicBool>) {
    let spawned = std::thread::Builder::new()
        .name("stopline-view-watch".into())
        .spawn(move || {
            crate::stop_threads::raise();
            if let Err(error) = watch_loop(&store, &*view, &stop) {
                view.note(
                    format!(
                        "inotify watch lost ({error}); reloading every reload_interval_ms only"
                    ),
                    true,
                );
                view.refresh_full();
            }
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start the view watcher thread");
    }
}

fn watch_loop(store: &Store, view: &dyn ViewFeed, stop: &AtomicBool) -> Result<(), WatchError> {
    let mut watch = store.watch()?;
    watch.watch_staging(store);
    // Anything that happened before the watch existed is caught by this read.
    view.refresh_full();
    let mut next_expiry = None;
    while !stop.load(Ordering::SeqCst) {
        let changes = watch.wait(next_expiry)?;
        // A stopped gateway acts on nothing it is told afterwards (a drill deletes its home
        // right after its gateway stopped: that is not a fault of a gateway still serving).
        if stop.load(Ordering::SeqCst) {
            break;
        }
        for note in &changes.notes {
            view.note(note.to_string(), note.degrades());
        }
        // Earliest of all: a body being published counts for admission (additions only; one
        // that went away is forgotten after the read below).
        let staged_gone = changes.staged && view.add_staged_latches();
        if changes.appeared {
            // A new entry: into the view at once, before the locked read below.
            view.add_appeared_latches();
            // A test seam (`hold_if:` keeps this thread from its locked read); no action of
            // it means anything here.
            stopline_store::failpoint::hit("gateway.watch.appeared").ok();
        }
        if changes.missed {
            view.refresh_full();
        } else {
            if changes.changed || staged_gone {
                view.refresh_fast();
            }
            if changes.journals {
                view.refresh_journals();
            }
        }
        next_expiry = view.expire_staged();
    }
    Ok(())
}

/// How often the periodic thread rewrites the operation journals' open-set snapshots.
const OPS_UPKEEP_EVERY: Duration = Duration::from_secs(60);

/// Start the periodic full reload thread.
pub fn spawn_periodic(
    store: Store,
    view: Arc<dyn ViewFeed>,
    interval: Duration,
    stop: Arc<AtomicBool>,
    follower: Arc<WalFollower>,
) {
    let spawned = std::thread::Builder::new()
        .name("stopline-view-reload".into())
        .spawn(move || {
            let mut last_upkeep: Option<std::time::Instant> = None;
            while !stop.load(Ordering::SeqCst) {
                // Upkeep of the operation journals: at start and then every minute, the open-set
                // snapshot of every journal that grew (a gone writer's above all, which nobody
                // else will ever snapshot), so reloads and gates read the open set, not the
                // history. Derived data: a failure is only logged.
                if last_upkeep.is_none_or(|t| t.elapsed() >= OPS_UPKEEP_EVERY) {
                    last_upkeep = Some(std::time::Instant::now());
                    let (_, errors) = store.ops().snapshot_journals(1);
                    for error in errors {
                        tracing::warn!(%error, "cannot snapshot an operation journal");
                    }
                    // Then the journals of writers that are gone leave `ops/` for the archive
                    // (`[retention]`), so no read lists them again.
                    let archive = store.ops().archive_gone_journals(store.gone_journals());
                    for error in archive.errors {
                        tracing::warn!(%error, "cannot archive an operation journal");
                    }
                    // And their spending journals: folded into `spend/settled.json`, so a
                    // reservation on a limit reads that snapshot, not their history.
                    let spend = store.spend().compact_journals(store.gone_journals());
                    for error in spend.errors {
                        tracing::warn!(%error, "cannot compact a spending journal");
                    }
                }
                std::thread::sleep(interval);
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                // A reader that can take the WAL lock without waiting finishes the records an
                // engage had to defer (docs/reference.md §5); never waits, and a failure is only logged:
                // the latch itself is in force whatever the WAL says.
                if let Err(error) = store.finish_deferred_following(&follower) {
                    tracing::warn!(%error, "cannot finish a deferred WAL record");
                }
                view.refresh_full();
            }
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start the periodic reload thread");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::ViewHolder;
    use stopline_core::{Level, Name, Scope};
    use stopline_store::env::GoneProcess;
    use stopline_store::EngageRequest;

    fn halt(store: &Store, agent: &str) -> Scope {
        let scope = Scope::Agent(Name::parse(agent).unwrap());
        let request =
            EngageRequest::console(scope.clone(), Level::HaltAll, "monitor", "watch test");
        store.engage(&request).unwrap();
        scope
    }

    /// Another writer, one that is gone: its dispatched calls without an outcome are in doubt.
    const GONE_WRITER: GoneProcess = GoneProcess(4_200_003);

    fn decide(view: &ViewHolder, target: &str) -> stopline_core::Decision {
        let subject = stopline_core::Subject::unprovable(
            Some(Name::parse("worker").unwrap()),
            Vec::new(),
            Vec::new(),
        );
        view.load()
            .view
            .decide(
                &subject,
                stopline_core::TaskClass::Noncritical,
                None,
                Some(target),
                view.store().now_ms(),
            )
            .decision
    }

    fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The census of operations in doubt was re-taken only by the periodic reload
    /// (every `reload_interval_ms`, re-reading every journal's open set); now another
    /// writer's journal is followed as it grows, through the watch, and a line that does not
    /// parse closes every target (the governor refuses all on `*`; no periodic reload runs here).
    #[test]
    fn another_writers_journal_reaches_the_view_through_the_watch() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let store = Store::open(&home);
        store.ensure_home().unwrap();
        let view = Arc::new(ViewHolder::new(store.clone(), Duration::from_secs(600)));
        let stop = Arc::new(AtomicBool::new(false));
        spawn_watcher(store.clone(), view.clone(), stop.clone());
        until("the view was never loaded", || view.is_loaded());
        assert_eq!(decide(&view, "mcp:s:write"), stopline_core::Decision::Allow);

        let other = Store::with_io(
            &home,
            Arc::new(stopline_store::fs::RealFs),
            Arc::new(GONE_WRITER),
        );
        let journal = other.ops().journal("gateway").unwrap();
        let owner = stopline_store::ops::OpOwner::agent("worker");
        let op = journal.prepare_for("mcp:s:write", &owner, None).unwrap();
        journal.dispatched(&op).unwrap();
        until("the call in doubt never blocked its target", || {
            decide(&view, "mcp:s:write") == stopline_core::Decision::Block
        });
        assert_eq!(decide(&view, "mcp:s:other"), stopline_core::Decision::Allow);

        let path = home.join("ops").join(format!("{}.jsonl", journal.writer()));
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"op\": not json\n")
            .unwrap();
        // `*`: the registry cannot be read, which the governor refuses every target on.
        until("a corrupt journal never closed the other targets", || {
            view.load().view.blocked_targets.get("*").is_some_and(|b| {
                b.iter()
                    .all(|b| b.blocks == stopline_core::ops::Blocks::Everyone)
            })
        });
        stop.store(true, Ordering::SeqCst);
    }

    /// Every read took the WAL's lock on a descriptor opened for writing, whose
    /// close is an IN_CLOSE_WRITE on the home: the watch read it as a change and read again,
    /// for good — an idle gateway spent its CPU re-reading the control state.
    #[test]
    fn a_gateways_own_reads_never_wake_its_watch_and_a_stop_still_does() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"));
        store.ensure_home().unwrap();
        let scope = halt(&store, "earlier");
        store.disengage(&scope, "watch test", "monitor").unwrap();
        let view = Arc::new(ViewHolder::new(store.clone(), Duration::from_secs(1)));
        let stop = Arc::new(AtomicBool::new(false));
        spawn_watcher(store.clone(), view.clone(), stop.clone());
        std::thread::sleep(Duration::from_millis(500));
        let before = view.reads_started();
        assert!(before >= 1, "the watch read the state at start");
        std::thread::sleep(Duration::from_secs(1));
        let quiet = view.reads_started() - before;
        assert_eq!(
            quiet, 0,
            "{quiet} reads in a second in which nothing changed"
        );
        halt(&store, "later");
        until("the stop was never read", || {
            view.reads_started() != before + quiet
        });
        stop.store(true, Ordering::SeqCst);
    }
}
