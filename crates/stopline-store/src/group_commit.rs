//! Group commit for an append-only journal: records that arrive together share one write and
//! one fsync.
//!
//! One writer thread per journal takes everything queued, writes it as one append (records in
//! arrival order, each a whole line) and fsyncs it once, then releases every caller of that
//! batch. Records that arrive while a batch is being written and fsynced wait for the next
//! batch, so under load the number of fsyncs is the number of batches, not of records, and no
//! caller waits for more than the batch in flight plus its own.
//!
//! The rule this module exists to keep: **a caller is released only once its own record is
//! durable** — its batch was written and fsynced (for a record that asks for it) and the commit
//! returned `Ok`. A batch that fails releases every caller in it with the error; nothing in a
//! failed batch counts as written, and the next batch is a fresh append (a failed fsync is never
//! retried on the same descriptor, see `fs.rs`). Callers either block ([`Ticket::wait`]) or
//! await the ticket ([`Ticket`] is a `Future`), so an async caller holds no thread while its
//! record is made durable.
//!
//! The writer thread starts with the first record and ends after [`IDLE`] without one; the
//! commit itself (which file, which failpoint names, the directory fsyncs of a new journal) is
//! the journal's, passed in as a closure. This module never decides what a record says.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// How long the writer thread waits for a record before it ends (the next record starts it).
pub const IDLE: Duration = Duration::from_millis(100);

/// Writes one batch: its bytes, whether any record of it must be fsynced, and the failpoint
/// name of the batch (the record's own for a batch of one, `<journal>.batch` otherwise).
pub type Commit = dyn Fn(&[u8], bool, &str) -> io::Result<()> + Send + Sync;

/// A journal's group-commit queue; clones share one queue and one writer.
#[derive(Clone)]
pub struct GroupCommit {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("batch_fp", &self.shared.batch_fp)
            .finish()
    }
}

struct Shared {
    queue: Mutex<Queue>,
    arrived: Condvar,
    commit: Box<Commit>,
    /// The failpoint name of a batch of several records.
    batch_fp: String,
    /// Release callers after writing a batch, before (without) its fsync: the bug the model
    /// checker must find (`PlantedBug::GroupReleasedBeforeFsync`).
    #[cfg(feature = "planted-bugs")]
    release_before_fsync: bool,
}

#[derive(Default)]
struct Queue {
    records: Vec<Record>,
    writer_running: bool,
    /// Batches committed so far (for tests: how many writes the records shared).
    batches: u64,
}

struct Record {
    bytes: Vec<u8>,
    sync: bool,
    fp: &'static str,
    done: Arc<Done>,
}

/// The outcome of a batch, shared by the tickets of its records.
#[derive(Default)]
struct Done {
    state: Mutex<DoneState>,
    ready: Condvar,
}

#[derive(Default)]
struct DoneState {
    result: Option<Result<(), Failure>>,
    waker: Option<Waker>,
}

/// A batch's I/O error, kept so that every caller of the batch gets its own copy.
#[derive(Clone, Debug)]
struct Failure {
    kind: io::ErrorKind,
    os: Option<i32>,
    message: String,
}

impl Failure {
    fn of(error: &io::Error) -> Failure {
        Failure {
            kind: error.kind(),
            os: error.raw_os_error(),
            message: error.to_string(),
        }
    }

    fn to_error(&self) -> io::Error {
        match self.os {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(self.kind, self.message.clone()),
        }
    }
}

/// One record's place in a batch: resolves once its batch was committed (or failed).
#[must_use = "a record is durable only when its ticket resolves Ok"]
pub struct Ticket {
    done: Arc<Done>,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ticket")
    }
}

impl Done {
    fn finish(&self, result: Result<(), Failure>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.result = Some(result);
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
        self.ready.notify_all();
    }
}

impl Ticket {
    /// Block until the record's batch was committed.
    pub fn wait(self) -> io::Result<()> {
        let mut state = self
            .done
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(result) = &state.result {
                return result.clone().map_err(|f| f.to_error());
            }
            state = self
                .done
                .ready
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// True once the record's batch was committed or failed.
    pub fn is_done(&self) -> bool {
        self.done
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .result
            .is_some()
    }
}

impl Future for Ticket {
    type Output = io::Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut state = self
            .done
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match &state.result {
            Some(result) => Poll::Ready(result.clone().map_err(|f| f.to_error())),
            None => {
                state.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl GroupCommit {
    /// A queue whose batches `commit` writes; `batch_fp` names a batch of several records.
    pub fn new(batch_fp: impl Into<String>, commit: Box<Commit>) -> GroupCommit {
        GroupCommit {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                arrived: Condvar::new(),
                commit,
                batch_fp: batch_fp.into(),
                #[cfg(feature = "planted-bugs")]
                release_before_fsync: false,
            }),
        }
    }

    /// This queue with the planted bug of releasing callers before their batch's fsync.
    #[cfg(feature = "planted-bugs")]
    pub fn with_release_before_fsync(batch_fp: impl Into<String>, commit: Box<Commit>) -> Self {
        let mut queue = GroupCommit::new(batch_fp, commit);
        if let Some(shared) = Arc::get_mut(&mut queue.shared) {
            shared.release_before_fsync = true;
        }
        queue
    }

    /// Queue one record (a whole line); `sync` asks for it to be fsynced before its ticket
    /// resolves. `fp` is its failpoint name when it is written alone.
    pub fn submit(&self, bytes: Vec<u8>, sync: bool, fp: &'static str) -> Ticket {
        self.submit_all(vec![(bytes, sync, fp)])
            .pop()
            .expect("one ticket per record")
    }

    /// Queue several records at once: they are in the same batch (with whatever else is queued).
    pub fn submit_all(&self, records: Vec<(Vec<u8>, bool, &'static str)>) -> Vec<Ticket> {
        let mut tickets = Vec::with_capacity(records.len());
        let mut queue = self
            .shared
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (bytes, sync, fp) in records {
            let done = Arc::new(Done::default());
            tickets.push(Ticket { done: done.clone() });
            queue.records.push(Record {
                bytes,
                sync,
                fp,
                done,
            });
        }
        if !queue.writer_running {
            let shared = self.shared.clone();
            let started = std::thread::Builder::new()
                .name("stopline-journal".into())
                .spawn(move || write_batches(&shared));
            match started {
                Ok(_) => queue.writer_running = true,
                Err(error) => {
                    // No writer: nothing queued can become durable; fail it rather than hang.
                    let failure = Failure::of(&error);
                    for record in queue.records.drain(..) {
                        record.done.finish(Err(failure.clone()));
                    }
                }
            }
        } else {
            self.shared.arrived.notify_one();
        }
        tickets
    }

    /// A ticket that resolves once every record queued before it has been committed (or has
    /// failed): a mark in the queue that writes nothing.
    pub fn flush(&self) -> Ticket {
        self.submit(Vec::new(), false, "flush")
    }

    /// Batches committed so far.
    pub fn batches(&self) -> u64 {
        self.shared
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .batches
    }
}

/// The writer: take everything queued, commit it as one batch, release its callers; end after
/// [`IDLE`] with nothing queued.
fn write_batches(shared: &Shared) {
    loop {
        let batch = {
            let mut queue = shared.queue.lock().unwrap_or_else(PoisonError::into_inner);
            while queue.records.is_empty() {
                let (next, waited) = shared
                    .arrived
                    .wait_timeout(queue, IDLE)
                    .unwrap_or_else(PoisonError::into_inner);
                queue = next;
                if waited.timed_out() && queue.records.is_empty() {
                    queue.writer_running = false;
                    return;
                }
            }
            queue.batches += 1;
            std::mem::take(&mut queue.records)
        };
        let result = commit(shared, &batch).map_err(|e| Failure::of(&e));
        if let Err(failure) = &result {
            // A record whose ticket was dropped (a `dispatched` record, which nothing waits
            // for) has nobody to report its failure to: it is said here, never dropped quietly.
            let unwatched = batch
                .iter()
                .filter(|r| Arc::strong_count(&r.done) == 1 && !r.bytes.is_empty())
                .count();
            if unwatched > 0 {
                tracing::error!(batch = %shared.batch_fp, records = unwatched, error = %failure.to_error(), "journal records nobody waits for were not written");
            }
        }
        for record in batch {
            record.done.finish(result.clone());
        }
    }
}

fn commit(shared: &Shared, batch: &[Record]) -> io::Result<()> {
    let sync = batch.iter().any(|r| r.sync);
    let fp = match batch {
        [one] => one.fp,
        _ => shared.batch_fp.as_str(),
    };
    let mut bytes = Vec::with_capacity(batch.iter().map(|r| r.bytes.len()).sum());
    for record in batch {
        bytes.extend_from_slice(&record.bytes);
    }
    if bytes.is_empty() {
        // Only flush marks ([`GroupCommit::flush`]): everything before them is committed.
        return Ok(());
    }
    #[cfg(feature = "planted-bugs")]
    if shared.release_before_fsync && batch.len() > 1 {
        // The planted bug: the batch is released once written, its fsync left to a later batch.
        return (shared.commit)(&bytes, false, fp);
    }
    // A panicking commit must not leave its callers waiting for good.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        (shared.commit)(&bytes, sync, fp)
    })) {
        Ok(result) => result,
        Err(_) => Err(io::Error::other("the journal's commit panicked")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    /// A commit that records every batch and blocks until the test lets it finish.
    struct Gate {
        batches: Mutex<Vec<(Vec<u8>, bool, String)>>,
        entered: Mutex<mpsc::Sender<()>>,
        release: Mutex<mpsc::Receiver<io::Result<()>>>,
    }

    fn gated() -> (
        GroupCommit,
        Arc<Gate>,
        mpsc::Receiver<()>,
        mpsc::Sender<io::Result<()>>,
    ) {
        let (entered_tx, entered) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        let gate = Arc::new(Gate {
            batches: Mutex::new(Vec::new()),
            entered: Mutex::new(entered_tx),
            release: Mutex::new(release_rx),
        });
        let inner = gate.clone();
        let queue = GroupCommit::new(
            "t.batch",
            Box::new(move |bytes: &[u8], sync: bool, fp: &str| {
                inner
                    .batches
                    .lock()
                    .unwrap()
                    .push((bytes.to_vec(), sync, fp.to_string()));
                inner.entered.lock().unwrap().send(()).unwrap();
                inner.release.lock().unwrap().recv().unwrap()
            }),
        );
        (queue, gate, entered, release)
    }

    #[test]
    fn records_that_arrive_during_a_commit_share_the_next_one_and_wait_for_it() {
        let (queue, gate, entered, release) = gated();
        let first = queue.submit(b"a\n".to_vec(), true, "t.prepare");
        entered.recv().unwrap();
        // Arrive while the first batch is being committed.
        let second = queue.submit(b"b\n".to_vec(), true, "t.prepare");
        let third = queue.submit(b"c\n".to_vec(), false, "t.outcome");
        assert!(!first.is_done(), "released before its commit returned");
        release.send(Ok(())).unwrap();
        first.wait().unwrap();
        entered.recv().unwrap();
        assert!(
            !second.is_done() && !third.is_done(),
            "a record is released only by its own batch's commit"
        );
        release.send(Ok(())).unwrap();
        second.wait().unwrap();
        third.wait().unwrap();
        let batches = gate.batches.lock().unwrap().clone();
        assert_eq!(
            batches,
            vec![
                (b"a\n".to_vec(), true, "t.prepare".to_string()),
                (b"b\nc\n".to_vec(), true, "t.batch".to_string()),
            ]
        );
        assert_eq!(queue.batches(), 2);
    }

    #[test]
    fn a_failed_batch_fails_every_caller_in_it_and_the_next_batch_is_fresh() {
        let (queue, _gate, entered, release) = gated();
        let tickets = queue.submit_all(vec![
            (b"a\n".to_vec(), true, "t.prepare"),
            (b"b\n".to_vec(), true, "t.prepare"),
        ]);
        entered.recv().unwrap();
        release.send(Err(io::Error::from_raw_os_error(28))).unwrap();
        for ticket in tickets {
            assert_eq!(ticket.wait().unwrap_err().raw_os_error(), Some(28));
        }
        let next = queue.submit(b"c\n".to_vec(), true, "t.prepare");
        entered.recv().unwrap();
        release.send(Ok(())).unwrap();
        next.wait().unwrap();
    }

    #[test]
    fn an_awaited_ticket_resolves_with_its_batch() {
        let (queue, _gate, entered, release) = gated();
        let ticket = queue.submit(b"a\n".to_vec(), true, "t.prepare");
        let polls = Arc::new(AtomicUsize::new(0));
        let counted = polls.clone();
        let waiter = std::thread::spawn(move || {
            // A minimal executor: poll, park until woken.
            let thread = std::thread::current();
            let waker = Waker::from(Arc::new(Unpark(thread)));
            let mut cx = Context::from_waker(&waker);
            let mut ticket = ticket;
            loop {
                counted.fetch_add(1, Ordering::SeqCst);
                if let Poll::Ready(result) = Pin::new(&mut ticket).poll(&mut cx) {
                    return result;
                }
                std::thread::park();
            }
        });
        entered.recv().unwrap();
        release.send(Ok(())).unwrap();
        waiter.join().unwrap().unwrap();
        assert!(polls.load(Ordering::SeqCst) >= 1);
    }

    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
}
