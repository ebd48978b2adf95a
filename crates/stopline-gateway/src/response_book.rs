//! Who created which Responses API response through this gateway, and the background
//! responses still open (the book `responses.rs` keeps; see its module doc for the rules).
//! A leaf the governor holds: it names no admission type, so nothing below the governor
//! depends on the routes that fill it.

use crate::caller::Caller;
use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use stopline_core::{Refusal, RefusalCode};
use tokio::sync::oneshot;

/// The most closed response ids the book remembers.
pub const MAX_IDS: usize = 65_536;

/// Who created which response, and the background responses still open.
#[derive(Debug, Default)]
pub struct ResponseBook {
    inner: Mutex<Book>,
}

#[derive(Debug, Default)]
struct Book {
    ids: HashMap<String, Entry>,
    /// Ids in the order they were written, for forgetting the oldest.
    order: VecDeque<String>,
}

#[derive(Debug)]
struct Entry {
    root: String,
    open: Option<Open>,
}

/// An open background response: its operation (an `Admission`, held type-erased so the book
/// stays a leaf below the governor; `responses.rs` puts it in and takes it out), and the sender
/// whose drop ends its watcher.
#[derive(Debug)]
pub(crate) struct Open {
    operation: Box<dyn Any + Send>,
    /// Dropped when it closes: its watcher ends.
    _closed: oneshot::Sender<()>,
}

impl Open {
    /// `operation`, open until taken; dropping `closed` tells its watcher it closed.
    pub(crate) fn new(operation: Box<dyn Any + Send>, closed: oneshot::Sender<()>) -> Open {
        Open {
            operation,
            _closed: closed,
        }
    }
}

/// The root of `caller`'s delegation chain: whom its responses belong to.
pub(crate) fn chain_root(caller: &Caller) -> String {
    caller
        .subject()
        .chain
        .first()
        .map(|n| n.to_string())
        .unwrap_or_else(|| caller.agent().to_string())
}

/// An id the book keeps and puts in a URL: a provider's `resp_…`, nothing else.
pub(crate) fn usable_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= stopline_core::refusal::MAX_RECORDED_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl ResponseBook {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Write `id` as created by the chain `root` (a second writing keeps the first owner).
    pub(crate) fn created(&self, id: &str, root: &str, open: Option<Open>) {
        let mut book = self.book();
        if let Some(entry) = book.ids.get_mut(id) {
            if entry.root == root && entry.open.is_none() {
                entry.open = open;
            }
            return;
        }
        book.ids.insert(
            id.to_string(),
            Entry {
                root: root.to_string(),
                open,
            },
        );
        book.order.push_back(id.to_string());
        let mut turns = book.order.len();
        while book.ids.len() > MAX_IDS && turns > 0 {
            turns -= 1;
            let Some(oldest) = book.order.pop_front() else {
                break;
            };
            if book.ids.get(&oldest).is_some_and(|e| e.open.is_some()) {
                book.order.push_back(oldest);
            } else {
                book.ids.remove(&oldest);
            }
        }
    }

    /// True when `id` was created through this gateway by the chain `root`.
    pub(crate) fn owned_by(&self, id: &str, root: &str) -> bool {
        self.book().ids.get(id).is_some_and(|e| e.root == root)
    }

    /// The open background operation of `id`, taken (its watcher ends).
    pub(crate) fn take_open(&self, id: &str) -> Option<Box<dyn Any + Send>> {
        let open = self.book().ids.get_mut(id)?.open.take()?;
        Some(open.operation)
    }

    /// Refuse a `previous_response_id` the caller's chain did not create through this gateway.
    pub(crate) fn check_previous(&self, caller: &Caller, id: &str) -> Result<(), Refusal> {
        stopline_core::refusal::bounded_record("previous_response_id", id)?;
        if self.owned_by(id, &chain_root(caller)) {
            return Ok(());
        }
        Err(Refusal::new(
            RefusalCode::RequestInvalid,
            format!(
                "previous_response_id = {id:?} names no response this agent's chain created \
                 through this gateway"
            ),
        ))
    }

    pub(crate) fn forget(&self, id: &str) {
        let mut book = self.book();
        if book.ids.remove(id).is_some() {
            book.order.retain(|i| i != id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_book_answers_only_the_creating_chain_and_forgets_the_oldest_closed_ids() {
        let book = ResponseBook::default();
        book.created("resp_a", "alice", None);
        book.created("resp_a", "mallory", None);
        assert!(book.owned_by("resp_a", "alice"));
        assert!(!book.owned_by("resp_a", "mallory"), "the first owner stays");
        assert!(!book.owned_by("resp_b", "alice"));
        for i in 0..MAX_IDS {
            book.created(&format!("resp_{i}"), "alice", None);
        }
        assert!(!book.owned_by("resp_a", "alice"), "the oldest is forgotten");
        assert!(book.owned_by(&format!("resp_{}", MAX_IDS - 1), "alice"));
        assert_eq!(book.book().ids.len(), MAX_IDS);
        assert!(usable_id("resp_68a1-b"));
        assert!(!usable_id("../x") && !usable_id("") && !usable_id("a?b"));
    }
}
