//! The local control directory as a gateway's view source: reads through the store (following
//! the WAL across reads), kept fresh by the store's watch plus a periodic reload (`watch.rs`).
//! The trait it implements, `ViewSource`, is `stopline_control::view_source`'s, below both this
//! crate and the etcd backend, whose source starts this one's watchers for its host's directory.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use stopline_control::view_feed::ViewFeed;
use stopline_control::view_source::{read_local_with, ViewSource};
use stopline_core::ControlView;
use stopline_store::follow::WalFollower;
use stopline_store::Store;

/// The local control directory, read through the store.
#[derive(Debug, Clone)]
pub struct LocalSource {
    store: Store,
    /// What the last read verified of the WAL (`stopline_store::follow`): each read verifies
    /// only what was appended since.
    follower: Arc<WalFollower>,
}

impl LocalSource {
    /// A source reading `store`.
    pub fn new(store: Store) -> LocalSource {
        LocalSource {
            store,
            follower: Arc::default(),
        }
    }
}

impl ViewSource for LocalSource {
    fn name(&self) -> &'static str {
        "local"
    }

    fn read(&self) -> ControlView {
        read_local_with(&self.store, Some(&self.follower))
    }

    fn spawn_watchers(
        self: Arc<Self>,
        view: Arc<dyn ViewFeed>,
        reload_interval: Duration,
        stop: Arc<AtomicBool>,
    ) {
        crate::watch::spawn_watcher(self.store.clone(), view.clone(), stop.clone());
        crate::watch::spawn_periodic(
            self.store.clone(),
            view,
            reload_interval,
            stop,
            self.follower.clone(),
        );
    }
}
