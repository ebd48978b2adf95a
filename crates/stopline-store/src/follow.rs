//! Following the control directory across reads: what a long-lived reader (a gateway's view)
//! remembers, so that a read costs what changed since the last one, never what is on disk.
//!
//! [`WalFollower`] remembers the WAL it verified last (from the checkpoint or whole, as
//! `Store::read_wal` reads it) and the file it came from; the next read, under the same shared
//! lock as always, re-checks the hash of the last line it verified and verifies only the bytes
//! appended after it ([`stopline_core::wal::verify_appended`]). [`JournalFollower`] does the same
//! for the operation journals the census folds: per journal, the file it read, the offset just
//! after its last complete line and the lines of the operations it leaves open; the next read
//! takes only the bytes appended after that offset (an unterminated last line is left for the
//! next read, which reads it again from the start of the line). `ops/archive/open.json`, which is
//! rewritten atomically and never appended to, is kept while its file stays the same, and a
//! writer found gone (no process has its pid and start time) is not looked up in `/proc` again.
//!
//! A file that is not the one remembered — another inode (replaced, renamed over), shorter than
//! what was read (truncated), the same length but changed, or whose remembered last line no
//! longer hashes as verified — is read again the way a reader that never saw it reads it (the
//! WAL from its newest checkpoint, a journal from its open-set snapshot), and judged as always:
//! a WAL that does not verify is `control_wal_corrupt`, a journal line that does not parse a
//! registry error that blocks every target for everyone. So is any append that does not verify:
//! following never trusts more than a fresh read would. A followed WAL re-bases on its newest
//! checkpoint once twice `Store::wal_checkpoint_every` lines follow its base, so what is kept
//! stays bounded by what is live.
//!
//! Following is not a durable step: nothing here writes. A follower whose lock is held (a read
//! still stuck past its bound holds it) is bypassed: the read is done whole, as without one.

use crate::fs::FileId;
use crate::ops_snapshot::{is_journal, open_lines, parse_lines};
use crate::Store;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::Mutex;
use stopline_core::ops::OpLine;
use stopline_core::view::Blocker;
use stopline_core::wal::{self, sha256_hex, WalLog};

/// What a reader remembers of the WAL between reads (see the module docs).
#[derive(Debug, Default)]
pub struct WalFollower {
    followed: Mutex<Option<FollowedWal>>,
}

#[derive(Debug)]
struct FollowedWal {
    id: FileId,
    log: WalLog,
}

/// What a reader remembers of the operation journals between censuses (see the module docs).
#[derive(Debug, Default)]
pub struct JournalFollower {
    followed: Mutex<Journals>,
}

/// Journals' open lines by writer.
type OpenSets = Vec<(String, Vec<OpLine>)>;

#[derive(Debug, Default)]
struct Journals {
    files: BTreeMap<String, FollowedJournal>,
    /// `ops/archive/open.json` as last read: the file and its open sets.
    archive: Option<(FileId, OpenSets)>,
    /// Writers found gone (pid and start time of no live process): never alive again.
    gone: BTreeSet<String>,
}

#[derive(Debug)]
struct FollowedJournal {
    id: FileId,
    /// The offset just after the last complete line read.
    end: u64,
    /// The lines of the operations the journal leaves open, up to `end`.
    lines: Vec<OpLine>,
    /// Lines that did not parse: reported on every census until the file is replaced.
    errors: Vec<String>,
}

/// True when `now` is the file `then` was, with nothing changed but bytes appended.
fn unchanged_or_grown(then: &FileId, now: &FileId, end: u64) -> bool {
    now.same_file(then) && now.len >= end && !(now.len == end && now.ctime_ns != then.ctime_ns)
}

impl Store {
    /// The identity of the file at `path` (no bytes read), if this filesystem can tell.
    fn identify(&self, path: &std::path::Path) -> Option<FileId> {
        self.fs
            .read_from_identified(path, u64::MAX)
            .ok()
            .and_then(|(_, id)| id)
    }

    /// [`Store::read_wal`] for a reader that follows the WAL: only what was appended since
    /// `follower`'s last read is verified. The caller holds a lock on the WAL.
    pub(crate) fn read_wal_following(
        &self,
        follower: Option<&WalFollower>,
    ) -> Result<WalLog, crate::StoreError> {
        let Some(mut held) = follower.and_then(|f| f.followed.try_lock().ok()) else {
            return self.read_wal();
        };
        if let Some(followed) = held.take().and_then(|f| self.follow_wal(f)) {
            let log = followed.log.clone();
            *held = Some(followed);
            return Ok(log);
        }
        let log = self.read_wal()?;
        // Under the lock nothing was appended since: remember the file this log came from.
        if let Some((end, _)) = log.end {
            if let Ok((rest, Some(id))) = self.fs.read_from_identified(&self.layout.wal(), end) {
                if rest.is_empty() && id.len == end {
                    *held = Some(FollowedWal {
                        id,
                        log: log.clone(),
                    });
                }
            }
        }
        Ok(log)
    }

    /// `followed` brought up to the WAL's end, or `None` when it must be read afresh.
    fn follow_wal(&self, followed: FollowedWal) -> Option<FollowedWal> {
        let (end, last_len) = followed.log.end?;
        let from = end.checked_sub(last_len)?;
        let (bytes, id) = self
            .fs
            .read_from_identified(&self.layout.wal(), from)
            .ok()?;
        let id = id?;
        if !unchanged_or_grown(&followed.id, &id, end) {
            return None;
        }
        // The last line verified must still be what it was.
        let len = usize::try_from(last_len).ok()?;
        let last = followed.log.last()?;
        if len == 0
            || bytes.len() < len
            || bytes[len - 1] != b'\n'
            || sha256_hex(&bytes[..len - 1]) != last.hash
        {
            return None;
        }
        if bytes.len() == len {
            return Some(FollowedWal { id, ..followed });
        }
        let log = wal::verify_appended(followed.log, &bytes[len..]).ok()?;
        // Re-base on the newest checkpoint before what is kept outgrows what is live.
        if log.entries.len() > 2 * self.wal_checkpoint_every.max(1) {
            return None;
        }
        Some(FollowedWal { id, log })
    }

    /// [`crate::ops_handle::Ops::blocked_targets`] for a reader that follows the journals: each journal's bytes
    /// appended since `follower`'s last census are read, never its history.
    pub fn blocked_targets_following(
        &self,
        follower: &JournalFollower,
    ) -> BTreeMap<String, Vec<Blocker>> {
        let Ok(mut held) = follower.followed.try_lock() else {
            return self.ops().blocked_targets();
        };
        let journals = Self::fold_journals(self.follow_journals(&mut held));
        let census = self.census_remembering(journals, &mut held.gone);
        self.blocked_of(census)
    }

    /// `read_journals(true)`, following.
    fn follow_journals(&self, held: &mut Journals) -> (Vec<(String, Vec<OpLine>)>, Vec<String>) {
        let names = match self.fs.read_dir(&self.layout.ops()) {
            Ok(names) => names,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                *held = Journals::default();
                return (Vec::new(), Vec::new());
            }
            Err(error) => return (Vec::new(), vec![format!("ops/ is unreadable: {error}")]),
        };
        held.files.retain(|name, _| names.contains(name));
        let mut journals = Vec::new();
        let mut errors = Vec::new();
        let mut live = BTreeSet::new();
        for name in names.iter().filter(|n| is_journal(n)) {
            let writer = name.trim_end_matches(".jsonl").to_string();
            live.insert(writer.clone());
            match self.follow_journal(&mut held.files, name) {
                Ok((lines, journal_errors)) => {
                    errors.extend(journal_errors);
                    journals.push((writer, lines));
                }
                Err(error) => errors.push(error),
            }
        }
        if names.iter().any(|n| n == crate::ops_archive::ARCHIVE_DIR) {
            let (archived, archive_errors) = self.follow_archive(&mut held.archive, &live);
            journals.extend(archived);
            errors.extend(archive_errors);
        } else {
            held.archive = None;
        }
        (journals, errors)
    }

    /// One journal's open lines and errors, reading only what was appended since the last time.
    fn follow_journal(
        &self,
        files: &mut BTreeMap<String, FollowedJournal>,
        name: &str,
    ) -> Result<(Vec<OpLine>, Vec<String>), String> {
        let path = self.layout.ops().join(name);
        if let Some(followed) = files.get_mut(name) {
            if let Ok((bytes, Some(id))) = self.fs.read_from_identified(&path, followed.end) {
                if unchanged_or_grown(&followed.id, &id, followed.end) {
                    let label = format!("{name} (after byte {})", followed.end);
                    let (lines, errors, complete, _) = parse_lines(&label, &bytes, 1);
                    followed.id = id;
                    followed.end += complete as u64;
                    followed.errors.extend(errors);
                    if !lines.is_empty() {
                        let mut all = std::mem::take(&mut followed.lines);
                        all.extend(lines);
                        followed.lines = open_lines(all, self);
                    }
                    return Ok((followed.lines.clone(), followed.errors.clone()));
                }
            }
            files.remove(name);
        }
        // First sight, or not the file remembered: read it the hot way (its snapshot and what
        // follows), remembering the file it was before the read; a file replaced meanwhile is
        // caught by the next read (another inode).
        let before = self.identify(&path);
        let journal = self.read_journal_hot(name)?;
        let lines = open_lines(journal.lines, self);
        if let Some(id) = before {
            files.insert(
                name.to_string(),
                FollowedJournal {
                    id,
                    end: journal.end,
                    lines: lines.clone(),
                    errors: journal.errors.clone(),
                },
            );
        }
        Ok((lines, journal.errors))
    }

    /// The archive's open sets for writers not in `live`, `open.json` re-read only when it is
    /// another file than the one kept.
    fn follow_archive(
        &self,
        kept: &mut Option<(FileId, OpenSets)>,
        live: &BTreeSet<String>,
    ) -> (Vec<(String, Vec<OpLine>)>, Vec<String>) {
        let not_live = |sets: &[(String, Vec<OpLine>)]| {
            sets.iter()
                .filter(|(writer, _)| !live.contains(writer))
                .cloned()
                .collect()
        };
        let path = self.archive_open_file();
        let before = self.identify(&path);
        if let (Some((id, sets)), Some(now)) = (kept.as_ref(), before) {
            if *id == now {
                return (not_live(sets), Vec::new());
            }
        }
        *kept = None;
        if let Some(before) = before {
            if let Some(sets) = self.archive_open_sets() {
                if self.identify(&path) == Some(before) {
                    let journals = not_live(&sets);
                    *kept = Some((before, sets));
                    return (journals, Vec::new());
                }
                return (not_live(&sets), Vec::new());
            }
        }
        self.read_archive(live, true)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::env::{GoneProcess, SystemEnv};
    use crate::fs::{Fs, FsLayer, RealFs};
    use crate::ops::OpOwner;
    use crate::EngageRequest;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use stopline_core::ops::Blocks;
    use stopline_core::{Level, Name, RefusalCode, Scope};

    /// The real filesystem, counting the bytes every read returns, per path.
    #[derive(Default)]
    pub(crate) struct Counting {
        read: Mutex<BTreeMap<PathBuf, u64>>,
        /// Reads (each one open and fstat) per path, counted apart from the bytes.
        opened: Mutex<BTreeMap<PathBuf, u64>>,
    }

    impl Counting {
        fn count(&self, path: &Path, bytes: usize) {
            *self
                .read
                .lock()
                .unwrap()
                .entry(path.to_path_buf())
                .or_default() += bytes as u64;
            *self
                .opened
                .lock()
                .unwrap()
                .entry(path.to_path_buf())
                .or_default() += 1;
        }
        /// Every path under `dir` read since the last reset, with how many times, and the
        /// bytes read of each.
        pub(crate) fn read_under(&self, dir: &Path) -> BTreeMap<PathBuf, (u64, u64)> {
            let bytes = self.read.lock().unwrap();
            self.opened
                .lock()
                .unwrap()
                .iter()
                .filter(|(path, _)| path.starts_with(dir))
                .map(|(path, n)| (path.clone(), (*n, bytes.get(path).copied().unwrap_or(0))))
                .collect()
        }
        pub(crate) fn take(&self, path: &Path) -> u64 {
            self.read.lock().unwrap().remove(path).unwrap_or(0)
        }
        pub(crate) fn reset(&self) {
            self.read.lock().unwrap().clear();
            self.opened.lock().unwrap().clear();
        }
    }

    impl FsLayer for Counting {
        fn inner(&self) -> &dyn Fs {
            &RealFs
        }
        fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
            let bytes = RealFs.read(path)?;
            self.count(path, bytes.len());
            Ok(bytes)
        }
        fn read_from(&self, path: &Path, offset: u64) -> io::Result<Vec<u8>> {
            let bytes = RealFs.read_from(path, offset)?;
            self.count(path, bytes.len());
            Ok(bytes)
        }
        fn read_from_identified(
            &self,
            path: &Path,
            offset: u64,
        ) -> io::Result<(Vec<u8>, Option<FileId>)> {
            let (bytes, id) = RealFs.read_from_identified(path, offset)?;
            self.count(path, bytes.len());
            Ok((bytes, id))
        }
        /// An identity is an open and an fstat too: counted as a read of no bytes.
        fn identify(&self, path: &Path) -> io::Result<Option<FileId>> {
            let id = RealFs.identify(path)?;
            self.count(path, 0);
            Ok(id)
        }
    }

    /// A home, a reader of it counting its reads, and the journal of a writer that is gone
    /// with `resolved` resolved tool calls.
    fn home(
        resolved: usize,
    ) -> (
        tempfile::TempDir,
        Store,
        Arc<Counting>,
        crate::ops::OpsJournal,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let counting = Arc::new(Counting::default());
        let reader = Store::with_io(&home, counting.clone(), Arc::new(SystemEnv))
            .with_wal_checkpoint_every(8);
        reader.ensure_home().unwrap();
        let writer = Store::with_io(&home, Arc::new(RealFs), Arc::new(GoneProcess(4_200_001)));
        let journal = writer.ops().journal("gateway").unwrap();
        let owner = OpOwner::agent("worker");
        for _ in 0..resolved {
            let op = journal.prepare_for("mcp:s:echo", &owner, None).unwrap();
            journal.dispatched(&op).unwrap();
            journal.outcome(&op, "committed").unwrap();
        }
        (dir, reader, counting, journal)
    }

    fn journal_path(store: &Store, journal: &crate::ops::OpsJournal) -> PathBuf {
        store
            .layout()
            .ops()
            .join(format!("{}.jsonl", journal.writer()))
    }

    /// A dispatched call with no outcome, in the journal of a gone writer: in doubt.
    fn doubt(journal: &crate::ops::OpsJournal, target: &str) {
        let op = journal
            .prepare_for(target, &OpOwner::agent("worker"), None)
            .unwrap();
        journal.dispatched(&op).unwrap();
    }

    fn len(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().len()
    }

    fn append(path: &Path, bytes: &[u8]) {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        file.write_all(bytes).unwrap();
    }

    #[test]
    fn a_census_reads_only_what_the_journals_gained() {
        let (_dir, store, counting, journal) = home(200);
        let path = journal_path(&store, &journal);
        let follower = JournalFollower::default();
        assert!(store.blocked_targets_following(&follower).is_empty());
        counting.reset();
        assert!(store.blocked_targets_following(&follower).is_empty());
        assert_eq!(
            counting.take(&path),
            0,
            "nothing was appended, nothing is read"
        );
        let before = len(&path);
        doubt(&journal, "mcp:s:write");
        let blocked = store.blocked_targets_following(&follower);
        assert_eq!(
            blocked.get("mcp:s:write").map(|b| b[0].blocks.clone()),
            Some(Blocks::Agent("worker".into())),
            "{blocked:?}"
        );
        assert_eq!(
            counting.take(&path),
            len(&path) - before,
            "only the appended bytes are read"
        );
        // What a reader that never saw the journal says, too.
        assert_eq!(store.ops().blocked_targets(), blocked);
    }

    #[test]
    fn a_partial_line_is_taken_once_it_is_complete() {
        let (_dir, store, _, journal) = home(3);
        let path = journal_path(&store, &journal);
        let follower = JournalFollower::default();
        assert!(store.blocked_targets_following(&follower).is_empty());
        let before = len(&path);
        doubt(&journal, "mcp:s:write");
        let whole = std::fs::read(&path).unwrap();
        let gained = whole[before as usize..].to_vec();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(before)
            .unwrap();
        let half = gained.len() / 2;
        append(&path, &gained[..half]);
        assert!(
            store.blocked_targets_following(&follower).is_empty(),
            "a line still being written is neither an operation nor an error"
        );
        append(&path, &gained[half..]);
        assert!(store
            .blocked_targets_following(&follower)
            .contains_key("mcp:s:write"));
    }

    #[test]
    fn a_replaced_or_truncated_journal_is_read_again() {
        let (_dir, store, _, journal) = home(3);
        let path = journal_path(&store, &journal);
        let follower = JournalFollower::default();
        let resolved = std::fs::read(&path).unwrap();
        doubt(&journal, "mcp:s:write");
        let in_doubt = std::fs::read(&path).unwrap();
        assert!(store
            .blocked_targets_following(&follower)
            .contains_key("mcp:s:write"));
        // Renamed over by a file without the call in doubt (another inode).
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, &resolved).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert!(
            store.blocked_targets_following(&follower).is_empty(),
            "the replacement is read"
        );
        // Back to the call in doubt, then cut shorter in place (the same inode).
        std::fs::write(&tmp, &in_doubt).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert!(store
            .blocked_targets_following(&follower)
            .contains_key("mcp:s:write"));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(resolved.len() as u64)
            .unwrap();
        assert!(
            store.blocked_targets_following(&follower).is_empty(),
            "the truncated journal is read again"
        );
    }

    #[test]
    fn a_corrupt_append_blocks_every_target_for_everyone() {
        let (_dir, store, _, journal) = home(3);
        let path = journal_path(&store, &journal);
        let follower = JournalFollower::default();
        assert!(store.blocked_targets_following(&follower).is_empty());
        append(&path, b"{\"op\": not json\n");
        for _ in 0..2 {
            let blocked = store.blocked_targets_following(&follower);
            let everyone = blocked.get("*").expect("an unreadable registry blocks all");
            assert_eq!(everyone[0].blocks, Blocks::Everyone, "{blocked:?}");
        }
    }

    /// A console stop of `scope` at `level`, as these tests engage it.
    fn request(scope: Scope, level: Level) -> EngageRequest {
        EngageRequest::console(scope, level, "monitor", "follow test")
    }

    fn halt(store: &Store, agent: &str) -> Scope {
        let scope = Scope::Agent(Name::parse(agent).unwrap());
        store
            .engage(&request(scope.clone(), Level::HaltAll))
            .unwrap();
        scope
    }

    /// A home with a checkpointed WAL and lines after the checkpoint, read once through `follower`.
    fn followed_wal() -> (tempfile::TempDir, Store, Arc<Counting>, Arc<WalFollower>) {
        let (dir, store, counting, _) = home(0);
        for i in 0..6 {
            let scope = halt(&store, &format!("cycle-{i}"));
            store.disengage(&scope, "follow test", "monitor").unwrap();
        }
        let follower = Arc::new(WalFollower::default());
        let view = store.load_control_view_following(&follower);
        assert!(view.faults.is_empty(), "{:?}", view.faults);
        assert!(follower.followed.lock().unwrap().is_some(), "followed");
        (dir, store, counting, follower)
    }

    #[test]
    fn a_followed_wal_is_verified_from_the_last_line_verified() {
        let (_dir, store, counting, follower) = followed_wal();
        let wal = store.layout().wal();
        let last_line = {
            let bytes = std::fs::read(&wal).unwrap();
            let body = &bytes[..bytes.len() - 1];
            (body.len() - body.iter().rposition(|&b| b == b'\n').unwrap()) as u64
        };
        counting.reset();
        let view = store.load_control_view_following(&follower);
        assert!(view.faults.is_empty(), "{:?}", view.faults);
        assert_eq!(
            counting.take(&wal),
            last_line,
            "only the last line is re-checked"
        );
        assert_eq!(counting.take(&store.layout().wal_checkpoint()), 0);
        let before = len(&wal);
        halt(&store, "new");
        counting.reset();
        let view = store.load_control_view_following(&follower);
        assert!(view.faults.is_empty(), "{:?}", view.faults);
        assert_eq!(view.latches.len(), 1, "the new stop is seen");
        assert_eq!(
            counting.take(&wal),
            last_line + len(&wal) - before,
            "the last line verified and what was appended after it"
        );
        let fresh = store.load_control_view();
        assert_eq!(view.latches, fresh.latches);
        assert_eq!(view.epoch, fresh.epoch);
    }

    #[test]
    fn a_followed_wal_still_finds_a_deferred_record() {
        let (_dir, store, _, follower) = followed_wal();
        // The WAL's lock held elsewhere for the whole of an engage: its record is deferred.
        let held = store.lock_log_exclusive(&store.layout().wal()).unwrap();
        let scope = Scope::Agent(Name::parse("deferred").unwrap());
        let outcome = store.engage(&request(scope, Level::Emergency)).unwrap();
        assert!(outcome.wal_deferred, "{:?}", outcome.warnings);
        drop(held);
        assert_eq!(store.finish_deferred_following(&follower).unwrap(), 1);
        let whole = store.wal().read_whole().unwrap();
        assert!(whole
            .recorded_latches()
            .contains(&outcome.latch.file_name()));
        let view = store.load_control_view_following(&follower);
        assert!(view.faults.is_empty(), "{:?}", view.faults);
        assert_eq!(
            view.epoch,
            store.load_control_view().epoch,
            "its advance too"
        );
        assert_eq!(store.finish_deferred_following(&follower).unwrap(), 0);
    }

    #[test]
    fn a_corrupt_append_to_a_followed_wal_is_a_fault() {
        let (_dir, store, _, follower) = followed_wal();
        append(&store.layout().wal(), b"{\"seq\": 999}\n");
        let view = store.load_control_view_following(&follower);
        assert_eq!(
            view.faults.first().map(|f| f.code),
            Some(RefusalCode::ControlWalCorrupt),
            "{:?}",
            view.faults
        );
    }

    #[test]
    fn a_followed_wal_cut_shorter_is_read_again() {
        let (_dir, store, _, follower) = followed_wal();
        let wal = store.layout().wal();
        let whole = std::fs::read(&wal).unwrap();
        // Its last line torn in half (shorter, the same inode): a fault.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&wal)
            .unwrap()
            .set_len(whole.len() as u64 - 10)
            .unwrap();
        let view = store.load_control_view_following(&follower);
        assert_eq!(
            view.faults.first().map(|f| f.code),
            Some(RefusalCode::ControlWalCorrupt),
            "{:?}",
            view.faults
        );
        // Whole again: read again, and trusted.
        std::fs::write(&wal, &whole).unwrap();
        let view = store.load_control_view_following(&follower);
        assert!(view.faults.is_empty(), "{:?}", view.faults);
    }
}
