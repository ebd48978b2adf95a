//! Which A2A tasks each delegation chain opened through this gateway, and the sends still open
//! on them (the book `a2a.rs` keeps; its module doc has the rules). A leaf the governor holds:
//! the open sends are held type-erased, so it names no admission type and nothing below the
//! governor depends on the route that fills it.
//!
//! Every change of an entry happens under one lock, so a send that ends and a cancel that is
//! answered at the same moment cannot both miss each other: whichever comes second finds the
//! other's result and settles the open sends.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use tokio::sync::oneshot;

/// The most tasks the book remembers; the oldest with nothing open are forgotten first (a
/// forgotten task is refused `task_not_owned`: fail closed).
pub const MAX_TASKS: usize = 65_536;

/// What became of the cancel the gateway sent for a task at a stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cancel {
    /// None was sent.
    NotSent,
    /// Sent, not answered yet.
    Sent,
    /// The remote answered the task is cancelled.
    Confirmed,
    /// The remote did not confirm it (why).
    NotConfirmed(String),
}

/// How a task ended, as far as the gateway saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Completed.
    Completed,
    /// Failed or rejected.
    Failed,
    /// Cancelled.
    Canceled,
}

/// An open send on a task: its operation (an `Admission`, type-erased).
pub(crate) type OpenSend = Box<dyn Any + Send>;

#[derive(Debug)]
struct Entry {
    root: String,
    cancel: Cancel,
    ended: Option<Ended>,
    /// Sends whose exchange ended while the task was still open.
    parked: Vec<OpenSend>,
    /// Dropped when the task ends: its watcher ends.
    watching: Option<oneshot::Sender<()>>,
}

/// What to do with a send whose exchange ended while its task looked open.
pub(crate) enum Settle {
    /// The book keeps it until the task ends or its cancel is answered.
    Parked,
    /// The task already has a result: finish the send with it.
    Now(OpenSend, Result<Ended, String>),
}

/// Who opened which task (by A2A agent and task id), and what is open on it.
#[derive(Debug, Default)]
pub struct TaskBook {
    inner: Mutex<Book>,
}

#[derive(Debug, Default)]
struct Book {
    tasks: HashMap<(String, String), Entry>,
    order: VecDeque<(String, String)>,
}

fn key(agent: &str, task: &str) -> (String, String) {
    (agent.to_string(), task.to_string())
}

impl TaskBook {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Write `task` of `agent` as opened by the chain `root`. `Some(receiver)` when it is new:
    /// the receiver ends when the task ends (the caller's watcher waits on it). A task already
    /// written keeps its first owner.
    pub(crate) fn opened(
        &self,
        agent: &str,
        task: &str,
        root: &str,
    ) -> Option<oneshot::Receiver<()>> {
        let mut book = self.book();
        let key = key(agent, task);
        if book.tasks.contains_key(&key) {
            return None;
        }
        let (watching, ended) = oneshot::channel();
        book.tasks.insert(
            key.clone(),
            Entry {
                root: root.to_string(),
                cancel: Cancel::NotSent,
                ended: None,
                parked: Vec::new(),
                watching: Some(watching),
            },
        );
        book.order.push_back(key);
        let mut turns = book.order.len();
        while book.tasks.len() > MAX_TASKS && turns > 0 {
            turns -= 1;
            let Some(oldest) = book.order.pop_front() else {
                break;
            };
            let busy = book.tasks.get(&oldest).is_some_and(|e| {
                !e.parked.is_empty() || (e.ended.is_none() && e.cancel == Cancel::Sent)
            });
            if busy {
                book.order.push_back(oldest);
            } else {
                book.tasks.remove(&oldest);
            }
        }
        Some(ended)
    }

    /// True when `task` of `agent` was opened through this gateway by the chain `root`.
    pub(crate) fn owned_by(&self, agent: &str, task: &str, root: &str) -> bool {
        self.book()
            .tasks
            .get(&key(agent, task))
            .is_some_and(|e| e.root == root)
    }

    /// The open tasks of `agent`'s chain `root` (for a test's or a status's eyes).
    #[cfg(test)]
    pub(crate) fn open_of(&self, root: &str) -> Vec<String> {
        self.book()
            .tasks
            .iter()
            .filter(|(_, e)| e.root == root && e.ended.is_none())
            .map(|((_, t), _)| t.clone())
            .collect()
    }

    /// `task` ended as `ended` (seen in an answer or an event): its watcher ends, and the sends
    /// parked on it are returned to be finished.
    pub(crate) fn ended(&self, agent: &str, task: &str, ended: Ended) -> Vec<OpenSend> {
        let mut book = self.book();
        let Some(entry) = book.tasks.get_mut(&key(agent, task)) else {
            return Vec::new();
        };
        if entry.ended.is_none() {
            entry.ended = Some(ended);
        }
        entry.watching = None;
        std::mem::take(&mut entry.parked)
    }

    /// Mark the cancel of `task` sent; false when there is nothing to cancel (ended, or sent).
    pub(crate) fn cancel_sent(&self, agent: &str, task: &str) -> bool {
        let mut book = self.book();
        match book.tasks.get_mut(&key(agent, task)) {
            Some(entry) if entry.ended.is_none() && entry.cancel == Cancel::NotSent => {
                entry.cancel = Cancel::Sent;
                true
            }
            _ => false,
        }
    }

    /// The remote's answer to the cancel of `task`; the sends parked on it are returned to be
    /// finished with it.
    pub(crate) fn cancel_answered(&self, agent: &str, task: &str, answer: Cancel) -> Vec<OpenSend> {
        let mut book = self.book();
        let Some(entry) = book.tasks.get_mut(&key(agent, task)) else {
            return Vec::new();
        };
        if answer == Cancel::Confirmed && entry.ended.is_none() {
            entry.ended = Some(Ended::Canceled);
        }
        entry.cancel = answer;
        entry.watching = None;
        std::mem::take(&mut entry.parked)
    }

    /// A send on `task` whose exchange ended with the task still open: parked until the task
    /// ends or its cancel is answered, or given back with the result the task already has.
    pub(crate) fn settle_or_park(&self, agent: &str, task: &str, send: OpenSend) -> Settle {
        let mut book = self.book();
        let Some(entry) = book.tasks.get_mut(&key(agent, task)) else {
            return Settle::Now(send, Err(format!("remote task {task} is not in the book")));
        };
        if let Some(ended) = entry.ended {
            return Settle::Now(send, Ok(ended));
        }
        if let Cancel::NotConfirmed(why) = &entry.cancel {
            return Settle::Now(send, Err(why.clone()));
        }
        entry.parked.push(send);
        Settle::Parked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(n: u32) -> OpenSend {
        Box::new(n)
    }

    fn numbers(sends: Vec<OpenSend>) -> Vec<u32> {
        sends
            .into_iter()
            .map(|s| *s.downcast::<u32>().unwrap())
            .collect()
    }

    #[test]
    fn a_task_belongs_to_the_chain_that_opened_it() {
        let book = TaskBook::default();
        assert!(book.opened("remote", "t1", "alice").is_some());
        assert!(
            book.opened("remote", "t1", "bob").is_none(),
            "first owner kept"
        );
        assert!(book.owned_by("remote", "t1", "alice"));
        assert!(!book.owned_by("remote", "t1", "bob"));
        assert!(!book.owned_by("other", "t1", "alice"), "per A2A agent");
        assert!(!book.owned_by("remote", "t2", "alice"));
    }

    /// A send that ends before the cancel is answered is parked and handed back with the
    /// answer; one that ends after it gets the answer at once: neither order loses it.
    #[test]
    fn a_cancel_answer_settles_sends_whichever_comes_first() {
        let book = TaskBook::default();
        let mut watching = book.opened("remote", "t", "alice").unwrap();
        assert!(book.cancel_sent("remote", "t"));
        assert!(!book.cancel_sent("remote", "t"), "one cancel per task");
        assert!(matches!(
            book.settle_or_park("remote", "t", send(1)),
            Settle::Parked
        ));
        let why = "remote cancel not confirmed".to_string();
        let parked = book.cancel_answered("remote", "t", Cancel::NotConfirmed(why.clone()));
        assert_eq!(numbers(parked), vec![1]);
        assert!(watching.try_recv().is_err(), "the watcher is told to end");
        match book.settle_or_park("remote", "t", send(2)) {
            Settle::Now(_, Err(got)) => assert_eq!(got, why),
            _ => panic!("a late send gets the answer"),
        }

        book.opened("remote", "u", "alice").unwrap();
        assert!(book.cancel_sent("remote", "u"));
        assert!(book
            .cancel_answered("remote", "u", Cancel::Confirmed)
            .is_empty());
        assert!(matches!(
            book.settle_or_park("remote", "u", send(3)),
            Settle::Now(_, Ok(Ended::Canceled))
        ));
        assert!(
            !book.cancel_sent("remote", "u"),
            "an ended task is not cancelled"
        );
        assert_eq!(
            book.open_of("alice"),
            vec!["t".to_string()],
            "a task whose cancel was not confirmed may still run; the cancelled one does not"
        );
    }

    #[test]
    fn a_task_seen_ending_hands_back_its_parked_sends() {
        let book = TaskBook::default();
        book.opened("remote", "t", "alice").unwrap();
        assert_eq!(book.open_of("alice"), vec!["t".to_string()]);
        assert!(matches!(
            book.settle_or_park("remote", "t", send(7)),
            Settle::Parked
        ));
        assert_eq!(
            numbers(book.ended("remote", "t", Ended::Completed)),
            vec![7]
        );
        assert!(!book.cancel_sent("remote", "t"));
    }
}
