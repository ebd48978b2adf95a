//! The open set of an operation journal: what the hot path reads instead of the history.
//!
//! A journal `ops/<writer>.jsonl` is append-only and never rewritten: its history stays on
//! disk whole. Beside it, `ops/<writer>.open.json` holds, for a byte offset of the journal, the
//! lines of every operation that offset leaves open — all of it except the operations both
//! prepared and resolved in this journal — anchored by the length and sha256 of the last line
//! before the offset. A gate reads the snapshot and only the journal's bytes after the offset,
//! so its cost depends on what is open and on what was appended since, never on how much was
//! resolved before.
//!
//! The snapshot is derived data, verified by its anchor on every read, so it is written without
//! any fsync (`Store::replace_visible`: `ops.snapshot.tmp.write`, `ops.snapshot.rename`) by the
//! journal's writer from the open set it keeps in memory (`ops_open_set.rs`), and by a gateway
//! from a read of the journal for journals whose writer is gone. A snapshot that cannot be
//! read, is empty or torn, does not parse, or whose anchor does not match the journal — one a
//! power cut left older than the journal, or NEWER than the journal's durable end (renamed
//! before the journal's tail reached the disk) — is not trusted: that journal is read whole,
//! as before snapshots existed (a journal that is really damaged is reported by that read, as
//! always). An older snapshot whose anchor matches is true of its own offset, because the
//! journal before it never changes. `docs/durability.md` gives the whole argument.

use crate::error::StoreError;
use crate::ops_handle::Ops;
use crate::Store;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use stopline_core::ops::{OpLine, Phase};
use stopline_core::wal::sha256_hex;

/// The schema of `ops/<writer>.open.json`.
pub const SNAPSHOT_SCHEMA: &str = "stopline.ops-open.v1";

/// The suffix of a snapshot beside its journal.
pub const SNAPSHOT_SUFFIX: &str = ".open.json";

/// A writer rewrites its journal's snapshot once this many bytes were appended since the last.
pub const SNAPSHOT_EVERY_BYTES: u64 = 64 * 1024;

/// The last line before the snapshot's offset: its length with the newline, and its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Anchor {
    pub(crate) len: u64,
    pub(crate) sha256: String,
}

/// `ops/<writer>.open.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Snapshot {
    schema: String,
    /// Bytes of the journal this snapshot stands for (complete lines only).
    offset: u64,
    /// The line ending at `offset` (absent when `offset` is 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    anchor: Option<Anchor>,
    /// The lines of every operation the journal leaves open at `offset`, in journal order.
    lines: Vec<OpLine>,
}

/// One journal as the hot path reads it: the open lines up to `offset`, then the tail.
pub(crate) struct HotJournal {
    /// Lines of open operations from the snapshot, then every complete line after it.
    pub lines: Vec<OpLine>,
    /// Lines that did not parse (after the snapshot's offset, or anywhere when read whole).
    pub errors: Vec<String>,
    /// The byte offset just after the last complete line read.
    pub end: u64,
    /// The last complete line read (with its newline), if any.
    last_line: Option<Vec<u8>>,
    /// The offset the snapshot stood for (0: none was used).
    pub(crate) snapshot_offset: u64,
}

/// Parse the complete lines of `bytes` (an unterminated last line is a crash's remnant and is
/// left out). Returns the lines, errors naming `name` and 1-based numbers from `first_line`,
/// the length of the complete part and the last complete line.
pub(crate) fn parse_lines(
    name: &str,
    bytes: &[u8],
    first_line: usize,
) -> (Vec<OpLine>, Vec<String>, usize, Option<Vec<u8>>) {
    let complete = bytes
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |end| end + 1);
    let mut lines = Vec::new();
    let mut errors = Vec::new();
    let mut last = None;
    let mut start = 0usize;
    for (number, line) in bytes[..complete].split(|&b| b == b'\n').enumerate() {
        let end = start + line.len() + 1;
        if end <= complete {
            last = Some(bytes[start..end].to_vec());
        }
        start = end;
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<OpLine>(line) {
            Ok(line) => lines.push(line),
            Err(error) => errors.push(format!("ops/{name} line {}: {error}", first_line + number)),
        }
    }
    (lines, errors, complete, last)
}

/// The phases that resolve an operation prepared in the same journal (its outcome).
pub(crate) fn closing_phases(#[allow(unused)] store: &Store) -> &'static [Phase] {
    // The planted bug closes an operation at its dispatch already.
    #[cfg(feature = "planted-bugs")]
    if store.planted == crate::planted::PlantedBug::CompactionDropsDispatched {
        return &[Phase::Outcome, Phase::Dispatched];
    }
    &[Phase::Outcome]
}

/// The lines of `lines` that leave an operation open: every line except those of operations
/// both prepared and resolved among them.
pub(crate) fn open_lines(lines: Vec<OpLine>, store: &Store) -> Vec<OpLine> {
    let prepared: BTreeSet<&str> = lines
        .iter()
        .filter(|l| l.phase == Phase::Prepared)
        .map(|l| l.op.as_str())
        .collect();
    let closing = closing_phases(store);
    let resolved: BTreeSet<String> = lines
        .iter()
        .filter(|l| closing.contains(&l.phase) && prepared.contains(l.op.as_str()))
        .map(|l| l.op.clone())
        .collect();
    lines
        .into_iter()
        .filter(|l| !resolved.contains(&l.op))
        .collect()
}

/// A journal's open set at its end, as a read of it found it (`Store::open_set_at_end`).
pub(crate) struct OpenAtEnd {
    /// The byte offset just after the last complete line.
    pub end: u64,
    /// That line, with its newline.
    pub last_line: Vec<u8>,
    /// The lines of every operation open at `end`, in journal order.
    pub lines: Vec<OpLine>,
    /// The offset of the snapshot the read started from (0: the journal was read whole).
    pub snapshot_offset: u64,
}

/// Every complete line of a journal's `bytes` (`name` for errors).
pub(crate) fn parse_journal(name: &str, bytes: &[u8]) -> HotJournal {
    let (lines, errors, complete, last_line) = parse_lines(name, bytes, 1);
    HotJournal {
        lines,
        errors,
        end: complete as u64,
        last_line,
        snapshot_offset: 0,
    }
}

impl HotJournal {
    /// The last complete line read (with its newline), if any.
    pub(crate) fn last_line(&self) -> Option<&[u8]> {
        self.last_line.as_deref()
    }
}

impl Store {
    /// `ops/<writer>.open.json` for the journal file `name` (`<writer>.jsonl`).
    fn snapshot_path(&self, name: &str) -> std::path::PathBuf {
        let writer = name.trim_end_matches(".jsonl");
        self.layout.ops().join(format!("{writer}{SNAPSHOT_SUFFIX}"))
    }

    /// The snapshot of `name` and the journal bytes after it, when the snapshot can be trusted.
    fn snapshot_and_tail(&self, name: &str) -> Option<(Snapshot, Vec<u8>)> {
        let bytes = self.read_optional(&self.snapshot_path(name)).ok()??;
        let snapshot: Snapshot = serde_json::from_slice(&bytes).ok()?;
        if snapshot.schema != SNAPSHOT_SCHEMA {
            return None;
        }
        let journal = self.layout.ops().join(name);
        match &snapshot.anchor {
            None if snapshot.offset == 0 => {
                let tail = self.fs.read(&journal).ok()?;
                Some((snapshot, tail))
            }
            None => None,
            Some(anchor) => {
                let from = snapshot.offset.checked_sub(anchor.len)?;
                let mut bytes = self.fs.read_from(&journal, from).ok()?;
                let len = usize::try_from(anchor.len).ok()?;
                #[cfg(feature = "planted-bugs")]
                if self.planted == crate::planted::PlantedBug::SnapshotAnchorUnchecked {
                    // The planted bug: trust the snapshot's offset without its anchor.
                    let tail = bytes.split_off(len.min(bytes.len()));
                    return Some((snapshot, tail));
                }
                if len == 0
                    || bytes.len() < len
                    || bytes[len - 1] != b'\n'
                    || sha256_hex(&bytes[..len - 1]) != anchor.sha256
                {
                    return None;
                }
                let tail = bytes.split_off(len);
                Some((snapshot, tail))
            }
        }
    }

    /// Read the journal file `name` the hot way: its snapshot and what follows it, or the
    /// whole journal when there is no snapshot it can trust. `Err` when the journal itself
    /// cannot be read.
    pub(crate) fn read_journal_hot(&self, name: &str) -> Result<HotJournal, String> {
        if let Some((snapshot, tail)) = self.snapshot_and_tail(name) {
            let (tail_lines, errors, complete, last) = parse_lines(name, &tail, 1);
            let mut lines = snapshot.lines;
            lines.extend(tail_lines);
            // No line after the snapshot leaves `last_line` empty: no new snapshot is due.
            return Ok(HotJournal {
                lines,
                errors,
                end: snapshot.offset + complete as u64,
                last_line: last,
                snapshot_offset: snapshot.offset,
            });
        }
        self.read_journal_whole(name)
    }

    /// Read every line of the journal file `name`. `Err` when it cannot be read.
    pub(crate) fn read_journal_whole(&self, name: &str) -> Result<HotJournal, String> {
        let bytes = self
            .fs
            .read(&self.layout.ops().join(name))
            .map_err(|error| format!("ops/{name} is unreadable: {error}"))?;
        Ok(parse_journal(name, &bytes))
    }

    /// The open set of the journal file `name` at its current end, read the hot way (its
    /// snapshot and what follows). `None` when it has no complete line or a line that does not
    /// parse (the hot read keeps reporting it); `Err` when it cannot be read.
    pub(crate) fn open_set_at_end(&self, name: &str) -> Result<Option<OpenAtEnd>, StoreError> {
        let journal = self.read_journal_hot(name).map_err(|why| {
            StoreError::corrupt(stopline_core::RefusalCode::ControlStateCorrupt, why)
        })?;
        let Some(last_line) = journal.last_line else {
            return Ok(None);
        };
        if !journal.errors.is_empty() {
            return Ok(None);
        }
        Ok(Some(OpenAtEnd {
            end: journal.end,
            last_line,
            lines: open_lines(journal.lines, self),
            snapshot_offset: journal.snapshot_offset,
        }))
    }

    /// Write the snapshot of the journal file `name` at `offset`: `last_line` (with its
    /// newline) ends there, `lines` are the JSON objects of the open lines, in journal order.
    /// Without fsync (`replace_visible`): the snapshot is derived data checked by its anchor
    /// on every read, so whatever a power cut leaves of it — nothing, an empty or torn file,
    /// an older snapshot, or one newer than the journal's durable end — is either true of its
    /// own offset or not trusted.
    pub(crate) fn write_ops_snapshot<'a>(
        &self,
        name: &str,
        offset: u64,
        last_line: &[u8],
        lines: impl Iterator<Item = &'a [u8]>,
    ) -> Result<(), StoreError> {
        #[derive(Serialize)]
        struct Head<'h> {
            schema: &'h str,
            offset: u64,
            anchor: Anchor,
        }
        let head = Head {
            schema: SNAPSHOT_SCHEMA,
            offset,
            anchor: Anchor {
                len: last_line.len() as u64,
                sha256: sha256_hex(last_line.strip_suffix(b"\n").unwrap_or(last_line)),
            },
        };
        let mut bytes = serde_json::to_vec(&head).expect("a snapshot head always serializes");
        bytes.pop(); // the head's closing brace: the lines follow
        bytes.extend_from_slice(b",\"lines\":[");
        for (n, line) in lines.enumerate() {
            if n > 0 {
                bytes.push(b',');
            }
            bytes.extend_from_slice(line);
        }
        bytes.extend_from_slice(b"]}");
        self.replace_visible(&self.snapshot_path(name), &bytes, "ops.snapshot")
    }
}

/// True for a journal's file name (`<writer>.jsonl`).
pub(crate) fn is_journal(name: &str) -> bool {
    name.ends_with(".jsonl")
}

impl Ops<'_> {
    /// Rewrite the snapshot of the journal file `name` (`<writer>.jsonl`) at its current end,
    /// when at least `min_new_bytes` of complete lines were appended since the snapshot it has.
    /// Returns whether a snapshot was written. A journal with a line that does not parse is
    /// left alone (the hot read keeps reporting it). Journals are append-only, so this never
    /// races a writer: lines appended meanwhile are simply after the new offset.
    pub fn snapshot_journal(&self, name: &str, min_new_bytes: u64) -> Result<bool, StoreError> {
        let Some(open) = self.store.open_set_at_end(name)? else {
            return Ok(false);
        };
        if open.end <= open.snapshot_offset
            || open.end - open.snapshot_offset < min_new_bytes.max(1)
        {
            return Ok(false);
        }
        let lines: Vec<Vec<u8>> = open
            .lines
            .iter()
            .map(|line| serde_json::to_vec(line).expect("an op line always serializes"))
            .collect();
        self.store.write_ops_snapshot(
            name,
            open.end,
            &open.last_line,
            lines.iter().map(Vec::as_slice),
        )?;
        Ok(true)
    }

    /// Rewrite the snapshot of every journal under `ops/` that grew by at least
    /// `min_new_bytes` since its last one (a gateway's upkeep for journals whose writer is gone;
    /// a live writer keeps its own). Returns how many were written; failures are reported.
    pub fn snapshot_journals(&self, min_new_bytes: u64) -> (usize, Vec<String>) {
        let names = match self.store.fs.read_dir(&self.store.layout.ops()) {
            Ok(names) => names,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return (0, Vec::new()),
            Err(error) => return (0, vec![format!("ops/ is unreadable: {error}")]),
        };
        let mut written = 0;
        let mut errors = Vec::new();
        for name in names.iter().filter(|n| is_journal(n)) {
            match self.snapshot_journal(name, min_new_bytes) {
                Ok(true) => written += 1,
                Ok(false) => {}
                Err(error) => errors.push(format!("ops/{name}: {error}")),
            }
        }
        (written, errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::OpOwner;

    /// A home whose journal (of this live process) has `resolved` resolved tool calls and one
    /// dispatched call with no outcome, snapshotted at its end.
    fn aged(resolved: usize) -> (tempfile::TempDir, Store, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"));
        store.ensure_home().unwrap();
        let journal = store.ops().journal("gateway").unwrap();
        let owner = OpOwner::agent("worker");
        for _ in 0..resolved {
            let op = journal.prepare_for("mcp:s:echo", &owner, None).unwrap();
            journal.dispatched(&op).unwrap();
            journal.outcome(&op, "committed").unwrap();
        }
        let open = journal.prepare_for("mcp:s:write", &owner, None).unwrap();
        journal.dispatched(&open).unwrap();
        let name = format!("{}.jsonl", journal.writer());
        store.ops().snapshot_journal(&name, 1).unwrap();
        (dir, store, name, open)
    }

    #[test]
    fn the_snapshot_keeps_exactly_the_open_operations_and_the_hot_read_skips_the_history() {
        let (_dir, store, name, open) = aged(200);
        let snapshot: Snapshot =
            serde_json::from_slice(&std::fs::read(store.snapshot_path(&name)).unwrap()).unwrap();
        assert_eq!(
            snapshot.lines.len(),
            2,
            "prepared + dispatched of the open call"
        );
        assert!(snapshot.lines.iter().all(|l| l.op == open));
        // Damage a line of the history before the snapshot's offset: the whole read reports
        // it, the hot read never reads it.
        let path = store.layout().ops().join(&name);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[5] = b'#';
        std::fs::write(&path, &bytes).unwrap();
        let (all, errors) = store.ops().all();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(all.len(), 200, "every other operation is in the history");
        let (hot, errors) = store.ops().open();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(hot.keys().collect::<Vec<_>>(), vec![&open]);
        assert!(hot[&open].dispatched && hot[&open].outcome.is_none());
        let census = store.ops().census();
        assert_eq!(census.destination.len(), 1);
        assert!(census.destination[0].in_flight, "its writer is alive");
    }

    /// The `task` record of an open A2A send is one of its lines: a snapshot keeps it with
    /// them, so the hot read a restarted gateway rebuilds its task book from still names the
    /// task; once the send has its outcome the snapshot drops it with them.
    #[test]
    fn an_open_sends_task_record_survives_the_snapshot() {
        let (_dir, store, name, _open) = aged(20);
        let journal = store.ops().journal("gateway").unwrap();
        let owner = OpOwner::agent("alice");
        let send = journal.prepare_for("a2a:remote", &owner, None).unwrap();
        journal.dispatched(&send).unwrap();
        let alice = stopline_core::Subject::proven(
            vec![stopline_core::Name::parse("alice").unwrap()],
            vec!["/srv/repo".into()],
            Vec::new(),
        );
        journal
            .submit_task(&send, "task-1", "1.0", &alice)
            .wait()
            .unwrap();
        let done = journal.prepare_for("a2a:remote", &owner, None).unwrap();
        journal
            .submit_task(&done, "task-2", "0.3", &alice)
            .wait()
            .unwrap();
        journal.outcome(&done, "committed").unwrap();
        store.ops().snapshot_journal(&name, 1).unwrap();
        let snapshot: Snapshot =
            serde_json::from_slice(&std::fs::read(store.snapshot_path(&name)).unwrap()).unwrap();
        assert!(snapshot
            .lines
            .iter()
            .any(|l| l.op == send && l.phase == Phase::Task));
        assert!(snapshot.lines.iter().all(|l| l.op != done));
        let (hot, errors) = store.ops().open();
        assert!(errors.is_empty(), "{errors:?}");
        let task = hot[&send].task.clone().unwrap();
        assert_eq!(
            (task.id.as_str(), task.version.as_deref(), task.subject),
            ("task-1", Some("1.0"), Some(alice))
        );
        assert!(hot[&send].is_unresolved());
        assert!(!hot.contains_key(&done));
    }

    #[test]
    fn lines_after_the_snapshot_are_read_and_an_untrusted_snapshot_means_the_whole_journal() {
        let (_dir, store, name, open) = aged(20);
        let journal = store.ops().journal("gateway").unwrap();
        let later = journal
            .prepare_for("mcp:s:later", &OpOwner::agent("worker"), None)
            .unwrap();
        journal.outcome(&open, "failed").unwrap();
        let (hot, errors) = store.ops().open();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(hot[&open].outcome.as_deref(), Some("failed"));
        assert!(hot[&later].is_unresolved());
        // A snapshot whose anchor no longer matches (the journal was replaced) is not trusted:
        // the journal is read whole, and says what it says.
        let path = store.layout().ops().join(&name);
        let bytes = std::fs::read(&path).unwrap();
        let keep = bytes.len() / 2;
        let cut = bytes[..keep].iter().rposition(|&b| b == b'\n').unwrap() + 1;
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let (hot, _) = store.ops().open();
        let (all, _) = store.ops().all();
        assert_eq!(hot, all, "an untrusted snapshot reads as no snapshot");
        // A snapshot that does not parse is not trusted either.
        std::fs::write(store.snapshot_path(&name), b"{").unwrap();
        let (hot, _) = store.ops().open();
        assert_eq!(hot, all);
    }

    #[test]
    fn a_gone_writers_journal_is_snapshotted_by_anyone_and_nothing_open_is_lost() {
        let (_dir, store, name, open) = aged(50);
        // Rename the journal as a gone writer's (pid 1 never started at tick 1).
        let ops = store.layout().ops();
        std::fs::rename(ops.join(&name), ops.join("gateway-1-1.jsonl")).unwrap();
        std::fs::remove_file(store.snapshot_path(&name)).unwrap();
        let (written, errors) = store.ops().snapshot_journals(1);
        assert_eq!((written, errors.len()), (1, 0), "{errors:?}");
        let (again, _) = store.ops().snapshot_journals(1);
        assert_eq!(again, 0, "nothing new since");
        let census = store.ops().census();
        assert_eq!(census.destination.len(), 1, "{census:?}");
        let entry = &census.destination[0];
        assert_eq!(entry.operation.op, open);
        assert!(
            !entry.in_flight && entry.blocking,
            "its writer is gone: in doubt"
        );
        assert!(store.ops().blocked_targets().contains_key("mcp:s:write"));
    }
}
