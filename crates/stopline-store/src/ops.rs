//! The operation registry: one append-only journal per writer under `ops/`.
//!
//! A writer (a gateway, a CLI process) records `prepared` and fsyncs it before anything is
//! dispatched, then `dispatched`, then the outcome. Fsynced records go through the journal's
//! group commit (`group_commit.rs`): concurrent `prepared`, outcome and in-doubt records share
//! one append and one fsync, and each caller is released only once its own record is durable.
//! `dispatched` is not fsynced and is appended directly (one `write`, after its `prepared` is
//! durable). Journals are named
//! `<label>-<pid>-<starttime>.jsonl`, so a reader can tell a live writer (its in-flight
//! operations are pending) from a dead one (its operations without outcome are in doubt). An
//! operation in doubt blocks whom its prepared line says ([`Blocks`]: nobody for a model request,
//! else its agent's chain or everyone) on its target until reconciled. The owner's reconciliations go to `owner.jsonl`. A torn last line is a crash's
//! remnant and is ignored (it was never fsynced, so nothing was dispatched on it); a broken line
//! anywhere else is a registry error, reported, never omitted.

use crate::error::{IoContext, StoreError};
use crate::group_commit::{GroupCommit, Ticket};
use crate::ops_handle::Ops;
use crate::Store;
use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use stopline_core::ops::{fold, target_kind, BlockScope, Blocks, OpKind, OpLine, Operation, Phase};
use stopline_core::view::Blocker;
use stopline_core::wal_record::CarriedOperation;
use stopline_core::{Refusal, RefusalCode};

/// The journal name of reconciliations.
pub const OWNER_JOURNAL: &str = "owner";

/// An open journal of one writer.
#[derive(Debug, Clone)]
pub struct OpsJournal {
    store: Store,
    writer: String,
    /// Its file, shared with every [`Durable`] it hands out.
    path: std::sync::Arc<PathBuf>,
    /// Where its records are batched and written, in arrival order, by one writer thread
    /// (shared by every clone of this journal).
    queue: GroupCommit,
}

/// A record on its way to the disk: resolves (or [`Durable::wait`] returns) once it is durable.
#[derive(Debug)]
#[must_use = "a record is durable only when this resolves Ok"]
pub struct Durable {
    ticket: Ticket,
    path: std::sync::Arc<PathBuf>,
}

impl Durable {
    /// Block until the record is durable.
    pub fn wait(self) -> Result<(), StoreError> {
        let path = self.path;
        self.ticket
            .wait()
            .context(|| format!("appending to {}", path.display()))
    }
}

impl std::future::Future for Durable {
    type Output = Result<(), StoreError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let path = self.path.clone();
        std::pin::Pin::new(&mut self.ticket)
            .poll(cx)
            .map(|r| r.context(|| format!("appending to {}", path.display())))
    }
}

/// The census of unresolved operations (docs/reference.md §3 status `unresolved`).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Census {
    /// Unresolved file operations.
    pub file: Vec<CensusEntry>,
    /// Unresolved destination operations (`mcp:` and provider-side `hosted:` tools).
    pub destination: Vec<CensusEntry>,
    /// Unresolved model operations.
    pub model: Vec<CensusEntry>,
    /// Registries that could not be read.
    pub errors: Vec<String>,
}

/// One unresolved operation in a census.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CensusEntry {
    /// The operation.
    #[serde(flatten)]
    pub operation: Operation,
    /// True while its writer is alive and has not marked it in doubt.
    pub in_flight: bool,
    /// True when it blocks someone now: in doubt, and not a model request.
    pub blocking: bool,
    /// Why its writer marked it in doubt, when it said (e.g. "remote cancel not confirmed: …").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doubt: Option<String>,
}

/// Who an operation is prepared for (docs/reference.md §8): the acting agent, the root of its delegation
/// chain, and whom the operation blocks if its outcome is ever in doubt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpOwner {
    /// The acting agent (the last link of the chain).
    pub agent: Option<String>,
    /// The root of its delegation chain (absent: the agent itself).
    pub root: Option<String>,
    /// Whom it blocks while in doubt.
    pub blocks: BlockScope,
}

impl OpOwner {
    /// An operation of `agent` alone (its own chain root), blocking only it.
    pub fn agent(agent: &str) -> OpOwner {
        OpOwner {
            agent: Some(agent.to_string()),
            root: None,
            blocks: BlockScope::Agent,
        }
    }
}

impl Census {
    /// Every unresolved operation as a recovery plan carries it forward (its WAL record and
    /// receipt): `{"kind": "<kind>_operation", "operation": …, "in_flight": …}`.
    pub fn carried_forward(&self) -> Vec<CarriedOperation> {
        self.entries()
            .map(|e| CarriedOperation {
                kind: format!("{:?}_operation", e.operation.kind).to_lowercase(),
                operation: e.operation.clone(),
                in_flight: e.in_flight,
            })
            .collect()
    }

    /// True when nothing is unresolved and every registry was read.
    pub fn is_clean(&self) -> bool {
        self.file.is_empty()
            && self.destination.is_empty()
            && self.model.is_empty()
            && self.errors.is_empty()
    }

    /// Every unresolved entry.
    pub fn entries(&self) -> impl Iterator<Item = &CensusEntry> {
        self.file.iter().chain(&self.destination).chain(&self.model)
    }
}

// Kept at its old path for the gateway's registry and the acknowledgements.
pub use crate::env::process_start_time;

/// True when the journal `writer` belongs to a live process.
pub fn writer_alive(writer: &str) -> bool {
    writer_alive_by(writer, process_start_time)
}

/// [`writer_alive`] with `start_time` telling a process's start time.
pub(crate) fn writer_alive_with(writer: &str, start_time: impl Fn(u32) -> Option<u64>) -> bool {
    writer_alive_by(writer, start_time)
}

fn writer_alive_by(writer: &str, start_time: impl Fn(u32) -> Option<u64>) -> bool {
    let mut parts = writer.rsplitn(3, '-');
    let (Some(start), Some(pid)) = (parts.next(), parts.next()) else {
        return false;
    };
    let (Ok(start), Ok(pid)) = (start.parse::<u64>(), pid.parse::<u32>()) else {
        return false;
    };
    start_time(pid) == Some(start)
}

impl Store {
    /// Read every journal: (writer, lines) pairs and errors. `hot` reads each journal's
    /// open-set snapshot and only what follows it (`ops_snapshot.rs`); otherwise every line.
    pub(crate) fn read_journals(&self, hot: bool) -> (Vec<(String, Vec<OpLine>)>, Vec<String>) {
        let dir = self.layout.ops();
        let names = match self.fs.read_dir(&dir) {
            Ok(names) => names,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return (Vec::new(), Vec::new())
            }
            Err(error) => return (Vec::new(), vec![format!("ops/ is unreadable: {error}")]),
        };
        let mut journals = Vec::new();
        let mut errors = Vec::new();
        let mut live = std::collections::BTreeSet::new();
        for name in names.iter().filter(|n| crate::ops_snapshot::is_journal(n)) {
            live.insert(name.trim_end_matches(".jsonl").to_string());
            let writer = name.trim_end_matches(".jsonl").to_string();
            let read = if hot {
                self.read_journal_hot(name)
            } else {
                self.read_journal_whole(name)
            };
            match read {
                Ok(journal) => {
                    errors.extend(journal.errors);
                    journals.push((writer, journal.lines));
                }
                Err(error) => errors.push(error),
            }
        }
        // Journals of writers that are gone, archived (`ops_archive.rs`): a journal still in
        // `ops/` stands for its writer over the archive's entry.
        if names.iter().any(|n| n == crate::layout::OPS_ARCHIVE_DIR) {
            let (archived, archive_errors) = self.read_archive(&live, hot);
            journals.extend(archived);
            errors.extend(archive_errors);
        }
        (journals, errors)
    }

    pub(crate) fn fold_journals(
        (journals, errors): (Vec<(String, Vec<OpLine>)>, Vec<String>),
    ) -> (BTreeMap<String, Operation>, Vec<String>) {
        let lines = journals
            .iter()
            .flat_map(|(writer, lines)| lines.iter().map(move |l| (writer.as_str(), l.clone())));
        (fold(lines), errors)
    }

    /// The census of `ops` (folded open operations) and the registry errors read with them.
    pub(crate) fn census_of(&self, journals: (BTreeMap<String, Operation>, Vec<String>)) -> Census {
        self.census_remembering(journals, &mut Default::default())
    }

    /// [`Store::census_of`], with `gone`: writers already found gone, which are never alive
    /// again (a writer is named by pid and start time), so they are not looked up again; the
    /// writers found gone now are added.
    pub(crate) fn census_remembering(
        &self,
        (ops, errors): (BTreeMap<String, Operation>, Vec<String>),
        gone: &mut std::collections::BTreeSet<String>,
    ) -> Census {
        let mut census = Census {
            errors,
            ..Census::default()
        };
        let mut alive: BTreeMap<String, bool> = BTreeMap::new();
        for op in ops.into_values().filter(Operation::is_unresolved) {
            let live = *alive.entry(op.writer.clone()).or_insert_with(|| {
                if gone.contains(&op.writer) {
                    return false;
                }
                let live = writer_alive_by(&op.writer, |p| self.env.process_start_time(p));
                if !live {
                    gone.insert(op.writer.clone());
                }
                live
            });
            let in_flight = live && !op.in_doubt;
            let entry = CensusEntry {
                in_flight,
                blocking: !in_flight && op.blocks != Blocks::Nobody,
                doubt: op.doubt.clone(),
                operation: op,
            };
            match entry.operation.kind {
                OpKind::File => census.file.push(entry),
                // A provider-side tool is a destination reached through the model provider.
                OpKind::Destination | OpKind::Hosted => census.destination.push(entry),
                OpKind::Model => census.model.push(entry),
            }
        }
        census
    }

    /// The blocked targets `census` says.
    pub(crate) fn blocked_of(&self, census: Census) -> BTreeMap<String, Vec<Blocker>> {
        let mut blocked: BTreeMap<String, Vec<Blocker>> = BTreeMap::new();
        for entry in census.entries().filter(|e| e.blocking) {
            #[allow(unused_mut)]
            let mut blocks = entry.operation.blocks.clone();
            #[cfg(feature = "planted-bugs")]
            if self.planted == crate::planted::PlantedBug::DoubtBlocksEveryone {
                blocks = Blocks::Everyone;
            }
            blocked
                .entry(entry.operation.target.clone())
                .or_default()
                .push(Blocker {
                    op: entry.operation.op.clone(),
                    blocks,
                });
        }
        if !census.errors.is_empty() {
            blocked.insert(
                "*".into(),
                vec![Blocker {
                    op: census.errors.join("; "),
                    blocks: Blocks::Everyone,
                }],
            );
        }
        blocked
    }

    /// Record the owner's outcome for an unresolved operation.
    #[cfg_attr(not(feature = "owner"), allow(dead_code))]
    pub(crate) fn reconcile(
        &self,
        op_id: &str,
        outcome: &str,
        reason: &str,
        by: &str,
    ) -> Result<Operation, StoreError> {
        let reason = stopline_core::refusal::require_reason(reason)?;
        if !matches!(outcome, "committed" | "failed" | "abandoned") {
            return Err(StoreError::refused(
                RefusalCode::BadRequest,
                format!("outcome {outcome:?} is not committed, failed or abandoned"),
            ));
        }
        let (ops, _) = self.ops().open();
        let Some(op) = ops.get(op_id).filter(|op| op.is_unresolved()).cloned() else {
            return Err(StoreError::refused(
                RefusalCode::OperationUnknown,
                format!("no unresolved operation {op_id:?}"),
            ));
        };
        let now = self.env.now_ms();
        let line = OpLine {
            outcome: Some(outcome.to_string()),
            by: Some(by.to_string()),
            reason: Some(reason),
            ..OpLine::new(op_id, Phase::Outcome, crate::env::rfc3339(now), now)
        };
        let path = self.layout.ops().join(format!("{OWNER_JOURNAL}.jsonl"));
        let mut bytes = serde_json::to_vec(&line).expect("an op line always serializes");
        bytes.push(b'\n');
        self.fs
            .append(&path, &bytes, true, "ops.reconcile")
            .context(|| "recording the reconciliation".to_string())?;
        let mut resolved = op;
        resolved.outcome = Some(outcome.to_string());
        Ok(resolved)
    }
}

impl OpsJournal {
    /// This journal's writer name.
    pub fn writer(&self) -> &str {
        &self.writer
    }

    /// Queue a record for the group commit; `sync` asks for it to be fsynced.
    fn submit(&self, line: &OpLine, sync: bool, fp: &'static str) -> Durable {
        self.durable(self.queue.submit(line_bytes(line), sync, fp))
    }

    /// `ticket`, reporting errors against this journal's file.
    fn durable(&self, ticket: Ticket) -> Durable {
        Durable {
            ticket,
            path: self.path.clone(),
        }
    }

    fn line(&self, op: &str, phase: Phase) -> OpLine {
        let now = self.store.env.now_ms();
        OpLine::new(op, phase, crate::env::rfc3339(now), now)
    }

    /// Record durable intent (fsynced before returning) of an operation by `agent`, which is
    /// its own chain root and blocks only itself if in doubt. Returns the operation id.
    pub fn prepare(
        &self,
        target: &str,
        agent: Option<&str>,
        request_id: Option<&str>,
    ) -> Result<String, StoreError> {
        let owner = OpOwner {
            agent: agent.map(String::from),
            ..OpOwner::default()
        };
        self.prepare_for(target, &owner, request_id)
    }

    /// Record durable intent (fsynced before returning) of an operation for `owner`. Returns the
    /// operation id.
    pub fn prepare_for(
        &self,
        target: &str,
        owner: &OpOwner,
        request_id: Option<&str>,
    ) -> Result<String, StoreError> {
        let (id, durable) = self.submit_prepare(target, owner, request_id)?;
        durable.wait()?;
        Ok(id)
    }

    /// Queue the `prepared` record of an operation for `owner`: its id at once, and what
    /// resolves once the record is durable. Nothing may be dispatched on it before that.
    pub fn submit_prepare(
        &self,
        target: &str,
        owner: &OpOwner,
        request_id: Option<&str>,
    ) -> Result<(String, Durable), StoreError> {
        let (id, line) = self.prepared_line(target, owner, request_id)?;
        Ok((id, self.submit(&line, true, "ops.prepare")))
    }

    /// Record durable intent of several operations at once (one batch: one append, one fsync),
    /// returned once every one of them is durable. Their ids, in order.
    pub fn prepare_batch(
        &self,
        operations: &[(&str, &OpOwner, Option<&str>)],
    ) -> Result<Vec<String>, StoreError> {
        let mut ids = Vec::with_capacity(operations.len());
        let mut records = Vec::with_capacity(operations.len());
        for (target, owner, request_id) in operations {
            let (id, line) = self.prepared_line(target, owner, *request_id)?;
            ids.push(id);
            records.push((line_bytes(&line), true, "ops.prepare"));
        }
        let mut first_error = None;
        for ticket in self.queue.submit_all(records) {
            if let Err(error) = self.durable(ticket).wait() {
                first_error.get_or_insert(error);
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(ids),
        }
    }

    fn prepared_line(
        &self,
        target: &str,
        owner: &OpOwner,
        request_id: Option<&str>,
    ) -> Result<(String, OpLine), StoreError> {
        if target_kind(target).is_none() {
            return Err(StoreError::Refused(Refusal::new(
                RefusalCode::BadRequest,
                format!("{target:?} is not mcp:<server>:<tool>, file:<path> or model:<model>"),
            )));
        }
        let id = format!("op_{}", self.store.env.random_hex(8));
        let mut line = self.line(&id, Phase::Prepared);
        line.target = Some(target.to_string());
        line.agent = owner.agent.clone();
        line.root = owner
            .root
            .clone()
            .filter(|r| owner.agent.as_ref() != Some(r));
        line.blocks = (owner.blocks != BlockScope::Agent).then_some(owner.blocks);
        line.request_id = request_id.map(String::from);
        Ok((id, line))
    }

    /// Record that the operation was handed upstream, and wait until the record is written
    /// ([`OpsJournal::submit_dispatched`], waited for).
    pub fn dispatched(&self, op: &str) -> Result<(), StoreError> {
        self.submit_dispatched(op).wait()
    }

    /// Queue the `dispatched` record (not fsynced): resolves once it is written. It is stamped
    /// now and written by the journal's writer thread, after this operation's `prepared`
    /// record and before its outcome (one queue, in arrival order), so a gateway's worker never
    /// touches the file: an append there could block the runtime's worker on the file, and
    /// every 64 KiB wrote the journal's snapshot on it. Nothing relies on the
    /// record surviving a crash: an operation without an outcome is unresolved whether or not
    /// its `dispatched` record was written (`docs/durability.md`); the gateway does not wait
    /// for it, and a failure to write it is logged by the writer.
    pub fn submit_dispatched(&self, op: &str) -> Durable {
        self.submit(&self.line(op, Phase::Dispatched), false, "ops.dispatch")
    }

    /// Resolves once every record queued so far has been written (and fsynced where it asked
    /// to be): what a reader of the registry that must see them waits for.
    pub fn flush(&self) -> Durable {
        self.durable(self.queue.flush())
    }

    /// Record the outcome (fsynced).
    pub fn outcome(&self, op: &str, outcome: &str) -> Result<(), StoreError> {
        self.submit_outcome(op, outcome).wait()
    }

    /// Queue the outcome record: resolves once it is durable.
    pub fn submit_outcome(&self, op: &str, outcome: &str) -> Durable {
        let mut line = self.line(op, Phase::Outcome);
        line.outcome = Some(outcome.to_string());
        #[allow(unused_mut)]
        let mut sync = true;
        #[cfg(feature = "planted-bugs")]
        if self.store.planted == crate::planted::PlantedBug::OutcomeUnsynced {
            sync = false;
        }
        self.submit(&line, sync, "ops.outcome")
    }

    /// Mark the operation in doubt (the upstream connection broke after dispatch, or a cut
    /// exchange got no answer within `cut_outcome_wait_s`); it blocks whom it was prepared to.
    pub fn in_doubt(&self, op: &str, reason: &str) -> Result<(), StoreError> {
        self.submit_in_doubt(op, reason).wait()
    }

    /// Queue the in-doubt record: resolves once it is durable.
    pub fn submit_in_doubt(&self, op: &str, reason: &str) -> Durable {
        let mut line = self.line(op, Phase::InDoubt);
        line.reason = Some(reason.to_string());
        self.submit(&line, true, "ops.in_doubt")
    }

    /// Queue the `task` record of a send (an `a2a:<agent>` operation) that opened remote task
    /// `task` in A2A `version`, made by `subject`: resolves once it is durable. What a restarted
    /// gateway rebuilds its task book from, and whom a stop must cover to cancel the task
    /// (docs/reference.md §8 "A2A").
    pub fn submit_task(
        &self,
        op: &str,
        task: &str,
        version: &str,
        subject: &stopline_core::Subject,
    ) -> Durable {
        let mut line = self.line(op, Phase::Task);
        line.task = Some(task.to_string());
        line.version = Some(version.to_string());
        line.subject = Some(subject.clone());
        self.submit(&line, true, "ops.task")
    }

    /// Batches the group commit has written so far (each one append and at most one fsync).
    pub fn batches(&self) -> u64 {
        self.queue.batches()
    }
}

fn line_bytes(line: &OpLine) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(line).expect("an op line always serializes");
    bytes.push(b'\n');
    bytes
}

/// The first synced line creates the journal: fsync `ops/` (its entry) and the home (the entry
/// of `ops/`), or a power cut could lose the whole journal, fsynced lines and all — an
/// operation dispatched with no trace, an outcome recorded and gone. Found by `stopline
/// model-check` (op scenarios). Done once per journal, by its group-commit writer.
fn make_entry_durable(
    store: &Store,
    entry_durable: &std::sync::atomic::AtomicBool,
) -> io::Result<()> {
    use std::sync::atomic::Ordering;
    if entry_durable.load(Ordering::SeqCst) {
        return Ok(());
    }
    store.fs.sync_dir(&store.layout.ops(), "ops.dirsync")?;
    store.fs.sync_dir(store.layout.home(), "ops.home.dirsync")?;
    entry_durable.store(true, Ordering::SeqCst);
    Ok(())
}

impl Ops<'_> {
    /// Open this process's journal, labelled `label` (e.g. `gateway`, `cli`).
    pub fn journal(&self, label: &str) -> Result<OpsJournal, StoreError> {
        self.store.ensure_dirs(&[&self.store.layout.ops()])?;
        let pid = self.store.env.pid();
        let start = self.store.env.process_start_time(pid).unwrap_or(0);
        let writer = format!("{label}-{pid}-{start}");
        let path = self.store.layout.ops().join(format!("{writer}.jsonl"));
        let entry_durable = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // The journal's open set as this writer committed it (`ops_open_set.rs`): what its
        // snapshot is rewritten from, every `ops_snapshot_every` bytes, without reading back.
        let open = std::sync::Mutex::new(crate::ops_open_set::WriterOpenSet::new());
        let (store, file, name) = (self.store.clone(), path.clone(), format!("{writer}.jsonl"));
        let commit = Box::new(move |bytes: &[u8], sync: bool, fp: &str| {
            let committed = store.fs.append_end(&file, bytes, sync, fp).and_then(|end| {
                if sync {
                    make_entry_durable(&store, &entry_durable)?;
                }
                Ok(end)
            });
            let mut open = open
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match committed {
                Ok(end) => open.committed(bytes, end, &store),
                Err(error) => {
                    // Whatever of the batch reached the file is not counted: only a read of
                    // the journal can say what it holds now.
                    open.forget();
                    return Err(error);
                }
            }
            if open.snapshot_due(store.ops_snapshot_every) {
                if let Err(error) = store.snapshot_own_journal(&name, &mut open) {
                    tracing::warn!(%error, journal = %name, "cannot rewrite the journal's open-set snapshot");
                }
            }
            Ok(())
        });
        #[cfg(feature = "planted-bugs")]
        if self.store.planted == crate::planted::PlantedBug::GroupReleasedBeforeFsync {
            return Ok(OpsJournal {
                store: self.store.clone(),
                writer,
                path: std::sync::Arc::new(path),
                queue: GroupCommit::with_release_before_fsync("ops.batch", commit),
            });
        }
        Ok(OpsJournal {
            store: self.store.clone(),
            writer,
            path: std::sync::Arc::new(path),
            queue: GroupCommit::new("ops.batch", commit),
        })
    }

    /// Every operation, folded across journals, with registry errors: the whole history
    /// (`ops list`, evidence, drills). Gates read [`Ops::open`].
    pub fn all(&self) -> (BTreeMap<String, Operation>, Vec<String>) {
        Store::fold_journals(self.store.read_journals(false))
    }

    /// The operations the journals leave open — every unresolved one, and whatever else their
    /// snapshots have not yet folded away — with registry errors. What gates read: its cost
    /// depends on the open set and the lines since each journal's snapshot, not the history.
    pub fn open(&self) -> (BTreeMap<String, Operation>, Vec<String>) {
        Store::fold_journals(self.store.read_journals(true))
    }

    /// The census of unresolved file, destination and model operations.
    pub fn census(&self) -> Census {
        self.store.census_of(self.open())
    }

    /// Targets blocked by operations in doubt, with whom each blocks (model requests block
    /// nobody and are left out). An unreadable registry blocks every target for everyone (`*`).
    pub fn blocked_targets(&self) -> BTreeMap<String, Vec<Blocker>> {
        self.store.blocked_of(self.census())
    }

    /// Unresolved operations prepared more than `older_than_ms` ago (the age-based in-doubt query).
    pub fn in_doubt_older_than(&self, older_than_ms: i64) -> Vec<Operation> {
        let now = self.store.env.now_ms();
        let (ops, _) = self.open();
        ops.into_values()
            .filter(|op| op.is_unresolved() && now - op.prepared_ms > older_than_ms)
            .collect()
    }
}
