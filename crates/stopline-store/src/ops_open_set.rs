//! The open set of a journal as its own writer knows it: kept in memory from the batches the
//! writer itself committed, so that rewriting the journal's snapshot (`ops_snapshot.rs`) reads
//! nothing back.
//!
//! The group-commit writer (`ops.rs`, one thread per journal) tells [`WriterOpenSet`] of every
//! batch it committed, with where the file ended just after it (`Fs::append_end`: one lseek).
//! The set holds what the snapshot would: the lines of every operation still open, the
//! journal's end and the last line before it (the anchor). It trusts itself only while the
//! file holds exactly what it was told: a batch that did not start at the end it knows (another
//! writer of the same file, a truncation, a filesystem that cannot tell the end) or a batch that
//! failed (its bytes may be on disk in part, or not at all) empties it, and the next snapshot
//! falls back to reading the journal (`Store::open_set_at_end`), from which it is seeded again.
//! **A failed batch is never counted**: the writer learns of a batch only once its commit
//! returned `Ok`, that is once its records are durable (fsynced, for a batch that asks for it).
//!
//! Lines of an operation are dropped once its outcome follows its `prepared` in this journal,
//! as a read of the whole journal drops them (`ops_snapshot::open_lines`). One writer's queue
//! writes an operation's lines in order, so a line of an operation never follows its outcome;
//! if one did, it would be kept (the snapshot would say more than the journal, never less).

use crate::ops_snapshot::{closing_phases, OpenAtEnd};
use crate::Store;
use std::collections::{BTreeMap, HashMap};
use stopline_core::ops::Phase;

/// The open set of one journal, as its writer committed it.
#[derive(Debug)]
pub(crate) struct WriterOpenSet {
    /// The journal's end after the last batch this set counts (`None`: unknown — the next
    /// snapshot reads the journal).
    end: Option<u64>,
    /// The lines (JSON objects, no newline) of open operations, by their order in the journal.
    lines: BTreeMap<u64, Vec<u8>>,
    /// Each open operation: whether its `prepared` line was seen, and its lines' keys.
    ops: HashMap<String, OpenOp>,
    /// The key of the next line.
    next: u64,
    /// The line ending at `end`, with its newline.
    last_line: Option<Vec<u8>>,
    /// Bytes committed since the last snapshot.
    since_snapshot: u64,
}

#[derive(Debug, Default)]
struct OpenOp {
    prepared: bool,
    keys: Vec<u64>,
}

/// The two fields of a line the open set needs.
#[derive(serde::Deserialize)]
struct LineKey {
    op: String,
    phase: Phase,
}

impl WriterOpenSet {
    /// The set of a journal this writer starts: empty, at offset 0 (a file that already has
    /// bytes shows at the first batch, which then does not start at 0).
    pub(crate) fn new() -> WriterOpenSet {
        WriterOpenSet {
            end: Some(0),
            lines: BTreeMap::new(),
            ops: HashMap::new(),
            next: 0,
            last_line: None,
            since_snapshot: 0,
        }
    }

    /// Forget everything: the file no longer holds exactly what this set was told.
    pub(crate) fn forget(&mut self) {
        self.end = None;
        self.lines.clear();
        self.ops.clear();
        self.last_line = None;
    }

    /// Count the batch `bytes` (whole lines) that committed `Ok`, after which the file ended at
    /// `end_after` (`None`: the filesystem cannot tell).
    pub(crate) fn committed(&mut self, bytes: &[u8], end_after: Option<u64>, store: &Store) {
        self.since_snapshot += bytes.len() as u64;
        let len = bytes.len() as u64;
        let contiguous = matches!(
            (self.end, end_after),
            (Some(expected), Some(after)) if after.checked_sub(len) == Some(expected)
        );
        if !contiguous || !bytes.ends_with(b"\n") {
            self.forget();
            return;
        }
        for line in bytes[..bytes.len() - 1].split(|&b| b == b'\n') {
            if line.is_empty() {
                continue;
            }
            let Ok(key) = serde_json::from_slice::<LineKey>(line) else {
                // Not a line of ours: only a read of the journal can say what it means.
                self.forget();
                return;
            };
            self.add(key, line.to_vec(), store);
        }
        let last_start = bytes[..bytes.len() - 1]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        self.last_line = Some(bytes[last_start..].to_vec());
        self.end = end_after;
    }

    fn add(&mut self, key: LineKey, line: Vec<u8>, store: &Store) {
        let op = self.ops.entry(key.op.clone()).or_default();
        op.prepared |= key.phase == Phase::Prepared;
        if !(op.prepared && closing_phases(store).contains(&key.phase)) {
            op.keys.push(self.next);
            self.lines.insert(self.next, line);
            self.next += 1;
            return;
        }
        // Resolved: its lines leave the set, and so does it.
        if let Some(resolved) = self.ops.remove(&key.op) {
            for k in resolved.keys {
                self.lines.remove(&k);
            }
        }
    }

    /// Seed the set from a read of the journal (`open`), once it was found untrustworthy.
    pub(crate) fn seed(&mut self, open: &OpenAtEnd, store: &Store) {
        self.forget();
        for line in &open.lines {
            let bytes = serde_json::to_vec(line).expect("an op line always serializes");
            let key = LineKey {
                op: line.op.clone(),
                phase: line.phase,
            };
            self.add(key, bytes, store);
        }
        self.end = Some(open.end);
        self.last_line = Some(open.last_line.clone());
    }

    /// True once `every` bytes were committed since the last snapshot; the count restarts.
    pub(crate) fn snapshot_due(&mut self, every: u64) -> bool {
        if self.since_snapshot < every {
            return false;
        }
        self.since_snapshot = 0;
        true
    }

    /// What the snapshot says, when this set is trusted: the offset, the line ending there
    /// and the open lines in journal order.
    pub(crate) fn snapshot(&self) -> Option<(u64, &[u8], impl Iterator<Item = &[u8]>)> {
        let end = self.end?;
        let last = self.last_line.as_deref()?;
        Some((end, last, self.lines.values().map(Vec::as_slice)))
    }

    /// Operations this set holds open (for tests).
    #[cfg(test)]
    pub(crate) fn open_ops(&self) -> usize {
        self.ops.len()
    }
}

impl Store {
    /// Rewrite the snapshot of the journal file `name` for its writer, from `open` when it is
    /// trusted, else from a read of the journal (which seeds `open` again). Returns whether a
    /// snapshot was written.
    pub(crate) fn snapshot_own_journal(
        &self,
        name: &str,
        open: &mut WriterOpenSet,
    ) -> Result<bool, crate::error::StoreError> {
        if let Some((end, last, lines)) = open.snapshot() {
            self.write_ops_snapshot(name, end, last, lines)?;
            return Ok(true);
        }
        let Some(read) = self.open_set_at_end(name)? else {
            return Ok(false);
        };
        open.seed(&read, self);
        if read.end <= read.snapshot_offset {
            return Ok(false);
        }
        let (end, last, lines) = open.snapshot().expect("a seeded set is trusted");
        self.write_ops_snapshot(name, end, last, lines)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileId, Fs, FsLayer, RealFs};
    use crate::ops::OpOwner;
    use std::io;
    use std::path::Path;
    use std::sync::{Arc, Mutex};

    /// The real filesystem, recording every call that reads a journal or syncs anything, and
    /// failing the batch whose failpoint name is armed (after writing it, as a failed fsync).
    #[derive(Default)]
    struct Recorded {
        calls: Mutex<Vec<String>>,
        fail_fp: Mutex<Option<String>>,
    }

    impl Recorded {
        fn note(&self, call: String) {
            self.calls.lock().unwrap().push(call);
        }
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.calls.lock().unwrap())
        }
        fn note_read(&self, path: &Path) {
            if is_journal(path) {
                self.note("read journal".into());
            }
        }
    }

    fn is_journal(path: &Path) -> bool {
        path.extension().is_some_and(|e| e == "jsonl")
    }

    impl FsLayer for Recorded {
        fn inner(&self) -> &dyn Fs {
            &RealFs
        }
        fn write_new(&self, path: &Path, bytes: &[u8], fp: &str) -> io::Result<()> {
            self.note(format!("fsync {fp}"));
            RealFs.write_new(path, bytes, fp)
        }
        fn append(&self, path: &Path, bytes: &[u8], sync: bool, fp: &str) -> io::Result<()> {
            if sync {
                self.note(format!("fsync {fp}"));
            }
            RealFs.append(path, bytes, sync, fp)
        }
        fn append_end(
            &self,
            path: &Path,
            bytes: &[u8],
            sync: bool,
            fp: &str,
        ) -> io::Result<Option<u64>> {
            if sync {
                self.note(format!("fsync {fp}"));
            }
            let end = RealFs.append_end(path, bytes, sync, fp)?;
            if self.fail_fp.lock().unwrap().as_deref() == Some(fp) {
                *self.fail_fp.lock().unwrap() = None;
                return Err(io::Error::other("injected: the batch's fsync failed"));
            }
            Ok(end)
        }
        fn sync_dir(&self, dir: &Path, fp: &str) -> io::Result<()> {
            self.note(format!("dirsync {fp}"));
            RealFs.sync_dir(dir, fp)
        }
        fn rename(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()> {
            self.note(format!("rename {fp}"));
            RealFs.rename(from, to, fp)
        }
        fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
            self.note_read(path);
            RealFs.read(path)
        }
        fn read_from(&self, path: &Path, offset: u64) -> io::Result<Vec<u8>> {
            self.note_read(path);
            RealFs.read_from(path, offset)
        }
        fn read_from_identified(
            &self,
            path: &Path,
            offset: u64,
        ) -> io::Result<(Vec<u8>, Option<FileId>)> {
            self.note_read(path);
            RealFs.read_from_identified(path, offset)
        }
        /// An identity opens the file: a read of it, as the other read methods.
        fn identify(&self, path: &Path) -> io::Result<Option<FileId>> {
            self.note_read(path);
            RealFs.identify(path)
        }
    }

    fn home(every: u64) -> (tempfile::TempDir, Store, Arc<Recorded>) {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(Recorded::default());
        let store = Store::with_io(
            dir.path().join("home"),
            fs.clone(),
            Arc::new(crate::env::SystemEnv),
        )
        .with_ops_snapshot_every(every);
        store.ensure_home().unwrap();
        fs.take();
        (dir, store, fs)
    }

    /// `calls` resolved tool calls and one left open (prepared, dispatched) on `journal`.
    fn calls(journal: &crate::ops::OpsJournal, resolved: usize) -> String {
        let owner = OpOwner::agent("worker");
        for _ in 0..resolved {
            let op = journal.prepare_for("mcp:s:echo", &owner, None).unwrap();
            journal.dispatched(&op).unwrap();
            journal.outcome(&op, "committed").unwrap();
        }
        let open = journal.prepare_for("mcp:s:write", &owner, None).unwrap();
        journal.dispatched(&open).unwrap();
        open
    }

    /// The snapshot beside `name`, parsed as a reader parses it.
    fn snapshot_of(store: &Store, name: &str) -> serde_json::Value {
        let writer = name.trim_end_matches(".jsonl");
        let path = store.layout().ops().join(format!("{writer}.open.json"));
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    #[test]
    fn the_writers_snapshot_is_written_from_memory_without_a_read_or_an_fsync() {
        // A snapshot after every batch: each of the 3 x 20 + 2 batches rewrites it.
        let (_dir, store, fs) = home(1);
        let journal = store.ops().journal("gateway").unwrap();
        let open = calls(&journal, 20);
        let name = format!("{}.jsonl", journal.writer());
        let recorded = fs.take();
        assert!(
            recorded
                .iter()
                .filter(|c| *c == "rename ops.snapshot.rename")
                .count()
                >= 60,
            "the writer rewrote its snapshot after every batch: {recorded:?}"
        );
        let stray: Vec<&String> = recorded
            .iter()
            .filter(|c| {
                c.starts_with("read journal")
                    || c.contains("ops.snapshot.") && !c.starts_with("rename")
            })
            .collect();
        assert!(
            stray.is_empty(),
            "the writer's snapshot reads no journal and syncs nothing: {stray:?}"
        );
        // Every batch's fsync is the journal's own: one per synced batch (41), plus the two
        // directory fsyncs of the new journal's entry.
        assert_eq!(
            recorded
                .iter()
                .filter(|c| c.starts_with("fsync") || c.starts_with("dirsync"))
                .count(),
            41 + 2,
            "{recorded:?}"
        );
        // What it wrote is what a read of the journal says, and what the hot read trusts.
        let snapshot = snapshot_of(&store, &name);
        let journal_len = std::fs::metadata(store.layout().ops().join(&name))
            .unwrap()
            .len();
        assert_eq!(snapshot["offset"], journal_len);
        let ops: Vec<&str> = snapshot["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["op"].as_str().unwrap())
            .collect();
        assert_eq!(
            ops,
            vec![open.as_str(), open.as_str()],
            "prepared + dispatched"
        );
        let read = store.read_journal_hot(&name).unwrap();
        assert_eq!(read.snapshot_offset, journal_len, "the hot read trusted it");
        let (hot, errors) = store.ops().open();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(hot.keys().collect::<Vec<_>>(), vec![&open]);
    }

    #[test]
    fn another_writer_of_the_same_file_or_a_failed_batch_makes_the_writer_read_the_journal() {
        let (_dir, store, fs) = home(1);
        let first = store.ops().journal("gateway").unwrap();
        let second = store.ops().journal("gateway").unwrap();
        let name = format!("{}.jsonl", first.writer());
        let open_first = calls(&first, 2);
        // Another queue on the same file: the first writer's end is no longer the file's.
        let open_second = calls(&second, 1);
        fs.take();
        let owner = OpOwner::agent("worker");
        let op = first.prepare_for("mcp:s:third", &owner, None).unwrap();
        assert!(
            fs.take().iter().any(|c| c == "read journal"),
            "a file that grew under the writer is read, not trusted"
        );
        let snapshot = snapshot_of(&store, &name);
        let mut ops: Vec<String> = snapshot["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["op"].as_str().unwrap().to_string())
            .collect();
        ops.dedup();
        assert_eq!(ops, vec![open_first.clone(), open_second, op.clone()]);
        // A batch whose commit failed (written, its fsync failed): not counted; the next
        // snapshot reads the journal, which says what the file holds.
        *fs.fail_fp.lock().unwrap() = Some("ops.outcome".into());
        assert!(first.outcome(&op, "committed").is_err());
        fs.take();
        first.outcome(&open_first, "committed").unwrap();
        assert!(fs.take().iter().any(|c| c == "read journal"));
        let read = store.read_journal_hot(&name).unwrap();
        let journal_len = std::fs::metadata(store.layout().ops().join(&name))
            .unwrap()
            .len();
        assert_eq!((read.snapshot_offset, read.end), (journal_len, journal_len));
        // Once seeded again, the writer is back on its memory.
        fs.take();
        first.prepare_for("mcp:s:fourth", &owner, None).unwrap();
        assert!(!fs.take().iter().any(|c| c == "read journal"));
    }

    #[test]
    fn a_snapshot_newer_than_the_journal_is_ignored_and_the_open_operation_kept() {
        // The writer's snapshot after the outcome of `resolved`, then a power cut that kept
        // the snapshot (renamed without fsync) but not the journal's last batch.
        let (_dir, store, _fs) = home(1);
        let journal = store.ops().journal("gateway").unwrap();
        let open = calls(&journal, 3);
        let name = format!("{}.jsonl", journal.writer());
        let path = store.layout().ops().join(&name);
        let before_outcome = std::fs::metadata(&path).unwrap().len();
        journal.outcome(&open, "committed").unwrap();
        let snapshot = snapshot_of(&store, &name);
        assert_eq!(snapshot["lines"].as_array().unwrap().len(), 0);
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(before_outcome).unwrap();
        let (hot, errors) = store.ops().open();
        assert!(errors.is_empty(), "{errors:?}");
        assert!(
            hot.get(&open).is_some_and(|op| op.is_unresolved()),
            "the outcome the journal lost is not taken from the snapshot: {hot:?}"
        );
        // And shorter still, into the anchor's own line: read whole as well.
        file.set_len(before_outcome - 10).unwrap();
        let (hot, errors) = store.ops().open();
        assert!(errors.is_empty(), "{errors:?}");
        assert!(hot.get(&open).is_some_and(|op| op.is_unresolved()));
    }

    #[test]
    fn the_open_set_drops_an_operation_once_resolved_and_forgets_itself_on_a_gap() {
        let (_dir, store, _fs) = home(u64::MAX);
        let mut set = WriterOpenSet::new();
        let line = |op: &str, phase: &str| {
            format!("{{\"op\":\"{op}\",\"phase\":\"{phase}\",\"ts\":\"t\",\"ts_ms\":1}}\n")
        };
        let batch = format!("{}{}", line("a", "prepared"), line("b", "prepared"));
        set.committed(batch.as_bytes(), Some(batch.len() as u64), &store);
        assert_eq!(set.open_ops(), 2);
        let end = batch.len() as u64;
        let outcome = line("a", "outcome");
        set.committed(outcome.as_bytes(), Some(end + outcome.len() as u64), &store);
        assert_eq!(set.open_ops(), 1);
        let (offset, last, lines) = set.snapshot().unwrap();
        assert_eq!(
            (offset, last),
            (end + outcome.len() as u64, outcome.as_bytes())
        );
        assert_eq!(lines.count(), 1);
        // A batch that does not start where the set ended: it no longer knows the file.
        set.committed(outcome.as_bytes(), Some(10_000), &store);
        assert!(set.snapshot().is_none());
    }
}
