//! The dispatch tracker behind latch acknowledgements.
//!
//! A call enters a ticket (tagged with the view generation current at that moment) before it
//! takes its final admission decision, and leaves it once the call has been handed upstream or
//! refused. An acknowledgement of a latch first makes sure the view holds the latch (generation
//! `g`), then waits until no ticket older than `g` is open. Because a ticket is entered *before*
//! the view is re-read for the dispatch decision, no decision taken on a view older than `g` can
//! still be waiting to send when the acknowledgement is given. This module must stay free of
//! async: the acknowledgement thread waits on it with a plain condition variable.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// Open dispatch tickets by generation.
#[derive(Debug, Default)]
pub struct DispatchTracker {
    open: Mutex<Open>,
    closed: Condvar,
}

#[derive(Debug, Default)]
struct Open {
    /// Open tickets by generation. A generation's entry stays at 0 when its tickets close and
    /// is dropped when a newer generation enters, so calls under one view (nearly all of them)
    /// neither allocate nor free a node of the map.
    by_generation: BTreeMap<u64, usize>,
    /// Threads waiting in [`DispatchTracker::wait_older_than`]: a closing ticket wakes them
    /// only when there are some (a wake is a system call).
    waiting: usize,
}

/// One open ticket; closes on drop.
#[derive(Debug)]
pub struct Ticket {
    tracker: Arc<DispatchTracker>,
    generation: u64,
}

impl DispatchTracker {
    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Open a ticket at `generation`.
    pub fn enter(self: &Arc<Self>, generation: u64) -> Ticket {
        let mut open = self.lock();
        if open.by_generation.len() > 1
            || open
                .by_generation
                .keys()
                .next()
                .is_some_and(|&g| g != generation)
        {
            open.by_generation.retain(|&g, n| *n > 0 || g == generation);
        }
        *open.by_generation.entry(generation).or_default() += 1;
        Ticket {
            tracker: self.clone(),
            generation,
        }
    }

    /// Wait until no ticket older than `generation` is open, or `deadline`. True when none is.
    pub fn wait_older_than(&self, generation: u64, deadline: Instant) -> bool {
        let mut open = self.lock();
        loop {
            if open.by_generation.range(..generation).all(|(_, &n)| n == 0) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            open.waiting += 1;
            open = self
                .closed
                .wait_timeout(open, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            open.waiting -= 1;
        }
    }

    /// Tickets open right now.
    pub fn open_count(&self) -> usize {
        self.lock().by_generation.values().sum()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut open = self.tracker.lock();
        let closed_all = match open.by_generation.get_mut(&self.generation) {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n == 0
            }
            None => false,
        };
        if closed_all && open.waiting > 0 {
            self.tracker.closed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn acknowledgement_waits_only_for_older_tickets() {
        let tracker = Arc::new(DispatchTracker::default());
        let old = tracker.enter(1);
        let _new = tracker.enter(2);
        let soon = Instant::now() + Duration::from_millis(20);
        assert!(!tracker.wait_older_than(2, soon));
        assert!(tracker.wait_older_than(1, soon));
        let t = tracker.clone();
        let waiter = std::thread::spawn(move || {
            t.wait_older_than(2, Instant::now() + Duration::from_secs(5))
        });
        std::thread::sleep(Duration::from_millis(10));
        drop(old);
        assert!(waiter.join().unwrap());
        assert_eq!(tracker.open_count(), 1);
    }
}
