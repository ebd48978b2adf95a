//! What wakes a supervisor's reaction loop: the store's watch of the control directory
//! (`Store::watch`: a new latch in `latches/` is a stop order; epoch, state and WAL changes in the
//! home), on its own thread feeding one channel.
//!
//! A watch that is lost or cannot be made is re-created in a loop and reported as
//! [`Wake::Degraded`], as is anything the watch notes about itself (events missed, `latches/`
//! lost); the caller's periodic sweep keeps enforcing meanwhile, so silence is never read as
//! "nothing changed". The thread ends when the [`Wakers`] handle is dropped. This module never
//! reads a latch: it only says that something may have changed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Duration;
use stopline_store::Store;

/// How long a watcher thread waits before checking whether it should end.
const WATCH_TICK: Duration = Duration::from_millis(200);

/// Why the loop woke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// Something changed in a watched directory.
    Changed,
    /// A watch was lost or could not be made (reload everything; only sweeps cover it now).
    Degraded(String),
}

/// The watcher thread of one loop.
pub struct Wakers {
    receiver: Receiver<Wake>,
    stop: Arc<AtomicBool>,
}

impl Wakers {
    /// Watch `store`'s control directory on a thread of its own.
    pub fn spawn(store: Store) -> Wakers {
        let (sender, receiver) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let spawned = std::thread::Builder::new()
            .name("stopline-run-watch".into())
            .spawn(move || watch(store, sender, thread_stop));
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot start a watcher thread; sweeping only");
        }
        Wakers { receiver, stop }
    }

    /// Wait up to `timeout` for a wake; every queued wake is drained. `None` on timeout.
    pub fn wait(&self, timeout: Duration) -> Option<Vec<Wake>> {
        let first = match self.receiver.recv_timeout(timeout) {
            Ok(wake) => wake,
            Err(RecvTimeoutError::Timeout) => return None,
            Err(RecvTimeoutError::Disconnected) => {
                // No watcher thread is left: behave like a timeout so the sweep goes on.
                std::thread::sleep(timeout);
                return None;
            }
        };
        let mut wakes = vec![first];
        wakes.extend(self.receiver.try_iter());
        Some(wakes)
    }
}

impl Drop for Wakers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn watch(store: Store, sender: Sender<Wake>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        let mut watch = match store.watch() {
            Ok(watch) => watch,
            Err(error) => {
                if sender.send(Wake::Degraded(error.to_string())).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        // The watch may have missed changes made before it existed: say so once.
        if sender.send(Wake::Changed).is_err() {
            return;
        }
        while !stop.load(Ordering::SeqCst) {
            let changes = match watch.wait(Some(WATCH_TICK)) {
                Ok(changes) => changes,
                Err(error) => {
                    let _ = sender.send(Wake::Degraded(error.to_string()));
                    break;
                }
            };
            let mut wakes: Vec<Wake> = changes
                .notes
                .iter()
                .map(|note| Wake::Degraded(note.to_string()))
                .collect();
            if wakes.is_empty() && changes.any() {
                wakes.push(Wake::Changed);
            }
            for wake in wakes {
                if sender.send(wake).is_err() {
                    return;
                }
            }
        }
    }
}
