//! The archive of operation journals whose writer is gone: off the hot path, kept on disk.
//!
//! A journal `ops/<label>-<pid>-<start>.jsonl` whose writer has ended is never appended to
//! again. Left in `ops/`, every gate would still open its snapshot and anchor on every read, so
//! the cost of a read would grow with the number of gateways a home has ever run. Archiving
//! moves it to `ops/archive/<writer>.jsonl` and keeps only the lines of its open operations (in
//! doubt, or a model request never settled) in one small file, `ops/archive/open.json`, which is
//! all the hot path reads of the archive. Under `[retention] gone_journals = "prune"` every
//! archived journal is then deleted (`ops.archive.prune`; its open lines stay in `open.json`).
//!
//! The steps, for one journal (`ops.archive.*` failpoints), under the archive's lock:
//! 1. `open.json` is rewritten atomically with the journal's open lines added
//!    (`ops.archive.snapshot.tmp|rename|dirsync`);
//! 2. the journal is hard-linked into `ops/archive/` (`ops.archive.link`), the directory fsynced
//!    (`ops.archive.link.dirsync`);
//! 3. the journal is removed from `ops/` (`ops.archive.remove`), `ops/` fsynced
//!    (`ops.archive.dirsync`); its own snapshot is removed best effort.
//!
//! Readers take a journal still in `ops/` over the archive's entry for the same writer, so a
//! crash at any step leaves every open operation readable exactly once: before step 3 is durable
//! the journal is in `ops/` (and read as always), after it the archive's entry stands for it.
//! An `open.json` that cannot be read or parsed is not trusted: every archived journal is read
//! whole, and an unreadable one is a registry error (which closes the blocked-target check for
//! everyone). Only journals whose writer name carries a pid and start time that no live process
//! has are archived (never `owner.jsonl`).

use crate::error::{IoContext, StoreError};
use crate::ops_handle::Ops;
use crate::ops_snapshot::{self, Anchor};
use crate::Store;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::io;
use std::path::PathBuf;
use stopline_core::ops::OpLine;
use stopline_core::wal::sha256_hex;
use stopline_core::RefusalCode;

/// The schema of `ops/archive/open.json`.
pub const ARCHIVE_SCHEMA: &str = "stopline.ops-archive-open.v1";

/// The archive's directory under `ops/` (named in `layout.rs`, which `ops.rs` reads it from).
pub use crate::layout::OPS_ARCHIVE_DIR as ARCHIVE_DIR;

/// What becomes of a gone writer's journal (`[retention] gone_journals`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GoneJournals {
    /// Moved to `ops/archive/`, kept whole (the default: everything stays on disk).
    #[default]
    Archive,
    /// Archived, then deleted: only its open operations are kept (in `open.json`).
    Prune,
}

/// One archived journal's open set.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ArchivedJournal {
    writer: String,
    /// The journal's length when it was archived (complete lines only).
    offset: u64,
    /// Its last complete line then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    anchor: Option<Anchor>,
    /// The lines of every operation it left open.
    lines: Vec<OpLine>,
}

/// `ops/archive/open.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ArchiveOpen {
    schema: String,
    /// Archived journals with open operations (one with none needs no entry).
    journals: Vec<ArchivedJournal>,
}

/// What one archive pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ArchiveReport {
    /// Journals moved out of `ops/`.
    pub archived: usize,
    /// Archived journals deleted (`gone_journals = "prune"`).
    pub pruned: usize,
    /// Journals left where they were, and why.
    pub errors: Vec<String>,
}

/// True when `writer` names a process by pid and start time (`<label>-<pid>-<start>`).
pub(crate) fn names_a_process(writer: &str) -> bool {
    let mut parts = writer.rsplitn(3, '-');
    matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some(start), Some(pid), Some(label))
            if !label.is_empty() && start.parse::<u64>().is_ok() && pid.parse::<u32>().is_ok()
    )
}

impl Store {
    fn archive_dir(&self) -> PathBuf {
        self.layout.ops().join(ARCHIVE_DIR)
    }

    fn archive_open_path(&self) -> PathBuf {
        self.archive_dir().join("open.json")
    }

    /// The archive's open set as it stands, when it can be trusted.
    fn archive_open(&self) -> Option<ArchiveOpen> {
        let bytes = self.read_optional(&self.archive_open_path()).ok()??;
        let open: ArchiveOpen = serde_json::from_slice(&bytes).ok()?;
        (open.schema == ARCHIVE_SCHEMA).then_some(open)
    }

    /// The archive's open set as (writer, lines) pairs, every writer included, when
    /// `open.json` can be trusted (`follow.rs` keeps it while the file stays the same).
    pub(crate) fn archive_open_sets(&self) -> Option<Vec<(String, Vec<OpLine>)>> {
        let open = self.archive_open()?;
        Some(
            open.journals
                .into_iter()
                .map(|j| (j.writer, j.lines))
                .collect(),
        )
    }

    /// `ops/archive/open.json`'s path.
    pub(crate) fn archive_open_file(&self) -> PathBuf {
        self.archive_open_path()
    }

    /// The journal files under `ops/archive/`.
    fn archived_names(&self) -> Result<Vec<String>, String> {
        match self.fs.read_dir(&self.archive_dir()) {
            Ok(names) => Ok(names
                .into_iter()
                .filter(|n| ops_snapshot::is_journal(n))
                .collect()),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(error) => Err(format!("ops/archive/ is unreadable: {error}")),
        }
    }

    /// Every line of the archived journal `name`. `Err` when it cannot be read.
    fn read_archived_whole(&self, name: &str) -> Result<ops_snapshot::HotJournal, String> {
        let bytes = self
            .fs
            .read(&self.archive_dir().join(name))
            .map_err(|error| format!("ops/archive/{name} is unreadable: {error}"))?;
        Ok(ops_snapshot::parse_journal(
            &format!("archive/{name}"),
            &bytes,
        ))
    }

    /// The archive's (writer, lines) for writers whose journal is not in `ops/` (`live`, the
    /// writers listed there), with errors. `hot`: the open set of `open.json` (every archived
    /// journal read whole when it cannot be trusted); otherwise every line of every archived
    /// journal.
    pub(crate) fn read_archive(
        &self,
        live: &BTreeSet<String>,
        hot: bool,
    ) -> (Vec<(String, Vec<OpLine>)>, Vec<String>) {
        if hot {
            if let Some(open) = self.archive_open() {
                let journals = open
                    .journals
                    .into_iter()
                    .filter(|j| !live.contains(&j.writer))
                    .map(|j| (j.writer, j.lines))
                    .collect();
                return (journals, Vec::new());
            }
        }
        let names = match self.archived_names() {
            Ok(names) => names,
            Err(error) => return (Vec::new(), vec![error]),
        };
        let mut journals = Vec::new();
        let mut errors = Vec::new();
        if !hot {
            // Pruned journals: their open lines are all that is left, in `open.json`.
            let archived: BTreeSet<&str> =
                names.iter().map(|n| n.trim_end_matches(".jsonl")).collect();
            if let Some(open) = self.archive_open() {
                journals.extend(
                    open.journals
                        .into_iter()
                        .filter(|j| {
                            !live.contains(&j.writer) && !archived.contains(j.writer.as_str())
                        })
                        .map(|j| (j.writer, j.lines)),
                );
            }
        }
        for name in names {
            let writer = name.trim_end_matches(".jsonl").to_string();
            if live.contains(&writer) {
                continue;
            }
            match self.read_archived_whole(&name) {
                Ok(journal) => {
                    errors.extend(journal.errors);
                    journals.push((writer, journal.lines));
                }
                Err(error) => errors.push(error),
            }
        }
        if hot {
            // Pruned journals are gone from the directory; their open lines only from an
            // `open.json` that cannot be read: say so rather than read an incomplete set as
            // complete.
            if self.fs.exists(&self.archive_open_path()).unwrap_or(true) {
                errors.push(
                    "ops/archive/open.json cannot be trusted; the archived journals were read whole"
                        .into(),
                );
            }
        }
        (journals, errors)
    }

    /// Delete every archived journal (`gone_journals = "prune"`; the caller holds the
    /// archive's lock): its open lines are in `open.json` since before it was linked. Nothing
    /// is deleted while `open.json` cannot be trusted. Returns how many were deleted.
    fn prune_archived(&self) -> Result<usize, StoreError> {
        let corrupt = |why: String| StoreError::corrupt(RefusalCode::ControlStateCorrupt, why);
        if self.archive_open().is_none() {
            return Err(corrupt(
                "ops/archive/open.json cannot be trusted; nothing pruned".into(),
            ));
        }
        let live = self
            .fs
            .read_dir(&self.layout.ops())
            .context(|| "listing ops/".to_string())?;
        let mut pruned = 0;
        for name in self.archived_names().map_err(corrupt)? {
            if live.contains(&name) {
                continue;
            }
            let path = self.archive_dir().join(&name);
            self.fs
                .remove_file(&path, "ops.archive.prune")
                .context(|| format!("pruning ops/archive/{name}"))?;
            pruned += 1;
        }
        if pruned > 0 {
            self.fs
                .sync_dir(&self.archive_dir(), "ops.archive.prune.dirsync")
                .context(|| "syncing ops/archive/".to_string())?;
        }
        Ok(pruned)
    }

    fn ensure_archive_dir(&self) -> Result<(), StoreError> {
        let dir = self.archive_dir();
        if self
            .fs
            .exists(&dir)
            .context(|| "checking ops/archive/".to_string())?
        {
            return Ok(());
        }
        self.ensure_dirs(&[&self.layout.ops()])?;
        self.fs
            .create_dir_all(&dir, "ops.archive.mkdir")
            .context(|| format!("creating {}", dir.display()))?;
        self.fs
            .sync_dir(&self.layout.ops(), "ops.archive.mkdir.dirsync")
            .context(|| "syncing ops/".to_string())
    }

    /// Archive the journal file `name` (its writer is gone; the caller holds the archive's
    /// lock).
    fn archive_journal(&self, name: &str) -> Result<(), StoreError> {
        let corrupt = |why: String| StoreError::corrupt(RefusalCode::ControlStateCorrupt, why);
        let journal = self.read_journal_hot(name).map_err(corrupt)?;
        if !journal.errors.is_empty() {
            return Err(corrupt(format!(
                "left in ops/: {}",
                journal.errors.join("; ")
            )));
        }
        let writer = name.trim_end_matches(".jsonl").to_string();
        // 1. The open set first: once the journal leaves ops/, this is what stands for it.
        let mut open = match self.archive_open() {
            Some(open) => open,
            None => self.rebuild_archive_open()?,
        };
        open.journals.retain(|j| j.writer != writer);
        let lines = ops_snapshot::open_lines(journal.lines.clone(), self);
        if !lines.is_empty() {
            open.journals.push(ArchivedJournal {
                writer: writer.clone(),
                offset: journal.end,
                anchor: journal.last_line().map(|last| Anchor {
                    len: last.len() as u64,
                    sha256: sha256_hex(&last[..last.len() - 1]),
                }),
                lines,
            });
        }
        let bytes = serde_json::to_vec(&open).expect("the archive's open set always serializes");
        #[allow(unused_mut)]
        let mut open_set_first = true;
        #[cfg(feature = "planted-bugs")]
        if self.planted == crate::planted::PlantedBug::ArchiveBeforeOpenSet {
            open_set_first = false;
        }
        if open_set_first {
            self.replace_atomic(&self.archive_open_path(), &bytes, "ops.archive.snapshot")?;
        }
        // 2. The history into the archive (a link: the journal is never in neither place).
        let from = self.layout.ops().join(name);
        let to = self.archive_dir().join(name);
        match self.fs.hard_link(&from, &to, "ops.archive.link") {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                // An earlier pass linked it and crashed before the removal: the same file?
                let same = self.fs.read(&from).ok() == self.fs.read(&to).ok();
                if !same {
                    return Err(corrupt(format!(
                        "ops/archive/{name} exists and differs from ops/{name}; left in ops/"
                    )));
                }
            }
            Err(error) => return Err(error).context(|| format!("linking {name} into the archive")),
        }
        self.fs
            .sync_dir(&self.archive_dir(), "ops.archive.link.dirsync")
            .context(|| "syncing ops/archive/".to_string())?;
        // 3. Out of the hot listing.
        self.fs
            .remove_file(&from, "ops.archive.remove")
            .context(|| format!("removing ops/{name}"))?;
        self.fs
            .sync_dir(&self.layout.ops(), "ops.archive.dirsync")
            .context(|| "syncing ops/".to_string())?;
        if !open_set_first {
            self.replace_atomic(&self.archive_open_path(), &bytes, "ops.archive.snapshot")?;
        }
        let snapshot = self
            .layout
            .ops()
            .join(format!("{writer}{}", ops_snapshot::SNAPSHOT_SUFFIX));
        if self.fs.exists(&snapshot).unwrap_or(false) {
            let _ = self.fs.remove_file(&snapshot, "ops.archive.unsnapshot");
        }
        Ok(())
    }

    /// The archive's open set rebuilt from the archived journals, when `open.json` is missing
    /// or cannot be trusted. Refused when an archived journal cannot be read, or when the
    /// archive may have held pruned journals whose open lines only `open.json` had.
    fn rebuild_archive_open(&self) -> Result<ArchiveOpen, StoreError> {
        let corrupt = |why: String| StoreError::corrupt(RefusalCode::ControlStateCorrupt, why);
        if self
            .fs
            .exists(&self.archive_open_path())
            .context(|| "checking ops/archive/open.json".to_string())?
        {
            return Err(corrupt(
                "ops/archive/open.json cannot be trusted; nothing archived until it is repaired"
                    .into(),
            ));
        }
        let mut journals = Vec::new();
        for name in self.archived_names().map_err(corrupt)? {
            let journal = self.read_archived_whole(&name).map_err(corrupt)?;
            if !journal.errors.is_empty() {
                return Err(corrupt(journal.errors.join("; ")));
            }
            let lines = ops_snapshot::open_lines(journal.lines.clone(), self);
            if !lines.is_empty() {
                journals.push(ArchivedJournal {
                    writer: name.trim_end_matches(".jsonl").to_string(),
                    offset: journal.end,
                    anchor: None,
                    lines,
                });
            }
        }
        Ok(ArchiveOpen {
            schema: ARCHIVE_SCHEMA.into(),
            journals,
        })
    }
}

impl Ops<'_> {
    /// Move every journal of a writer that is gone out of `ops/` into the archive (and delete
    /// it after under `GoneJournals::Prune`). Another process archiving at the same time makes
    /// this pass a no-op. Nothing is ever lost: see the module's steps.
    pub fn archive_gone_journals(&self, retention: GoneJournals) -> ArchiveReport {
        let mut report = ArchiveReport::default();
        let names = match self.store.fs.read_dir(&self.store.layout.ops()) {
            Ok(names) => names,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return report,
            Err(error) => {
                report.errors.push(format!("ops/ is unreadable: {error}"));
                return report;
            }
        };
        let is_gone = |writer: &str| {
            names_a_process(writer)
                && !crate::ops::writer_alive_with(writer, |p| self.store.env.process_start_time(p))
        };
        let gone: Vec<&String> = names
            .iter()
            .filter(|n| ops_snapshot::is_journal(n) && is_gone(n.trim_end_matches(".jsonl")))
            .collect();
        // A gone writer's snapshot whose journal has left (a pass that crashed before removing
        // it): nobody reads it (snapshots are read by their journal's name); tidy it away.
        for name in &names {
            if let Some(writer) = name.strip_suffix(ops_snapshot::SNAPSHOT_SUFFIX) {
                let journal = format!("{writer}.jsonl");
                if is_gone(writer) && !names.contains(&journal) {
                    let path = self.store.layout.ops().join(name);
                    let _ = self.store.fs.remove_file(&path, "ops.archive.unsnapshot");
                }
            }
        }
        let leftover = retention == GoneJournals::Prune
            && names.iter().any(|n| n == ARCHIVE_DIR)
            && self.store.archived_names().is_ok_and(|n| !n.is_empty());
        if gone.is_empty() && !leftover {
            return report;
        }
        if let Err(error) = self.store.ensure_archive_dir() {
            report.errors.push(error.to_string());
            return report;
        }
        let lock = self.store.fs.lock(
            &self.store.archive_dir().join(".lock"),
            true,
            true,
            Some(std::time::Duration::ZERO),
        );
        let _guard = match lock {
            Ok(guard) => guard,
            Err(error) if crate::fs::lock_busy(&error) => return report,
            Err(error) => {
                report.errors.push(format!("locking ops/archive/: {error}"));
                return report;
            }
        };
        for name in gone {
            match self.store.archive_journal(name) {
                Ok(()) => report.archived += 1,
                Err(error) => report.errors.push(format!("ops/{name}: {error}")),
            }
        }
        if retention == GoneJournals::Prune {
            match self.store.prune_archived() {
                Ok(pruned) => report.pruned = pruned,
                Err(error) => report.errors.push(error.to_string()),
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::GoneProcess;
    use crate::ops::OpOwner;
    use std::sync::Arc;

    /// A writer that has gone.
    const GONE: GoneProcess = GoneProcess(4242);

    /// A home with a gone gateway's journal: `resolved` resolved calls, one in doubt.
    fn home(resolved: usize) -> (tempfile::TempDir, Store, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("home");
        let gone = Store::with_io(&path, Arc::new(crate::fs::RealFs), Arc::new(GONE));
        gone.ensure_home().unwrap();
        let journal = gone.ops().journal("gateway").unwrap();
        let owner = OpOwner::agent("worker");
        for _ in 0..resolved {
            let op = journal.prepare_for("mcp:s:echo", &owner, None).unwrap();
            journal.dispatched(&op).unwrap();
            journal.outcome(&op, "committed").unwrap();
        }
        let doubt = journal.prepare_for("mcp:s:write", &owner, None).unwrap();
        journal.dispatched(&doubt).unwrap();
        drop(journal);
        (
            dir,
            Store::with_io(&path, Arc::new(crate::fs::RealFs), Arc::new(GONE)),
            doubt,
        )
    }

    #[test]
    fn a_gone_writers_journal_leaves_the_hot_listing_and_its_doubt_still_blocks() {
        let (_dir, store, doubt) = home(30);
        let before = store.ops().all().0;
        let report = store.ops().archive_gone_journals(GoneJournals::Archive);
        assert_eq!((report.archived, report.pruned), (1, 0), "{report:?}");
        let ops = store.layout().ops();
        let listed: Vec<String> = std::fs::read_dir(&ops)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(
            listed
                .iter()
                .all(|n| !n.ends_with(".jsonl") && !n.ends_with(".open.json")),
            "nothing of the journal left in ops/: {listed:?}"
        );
        let (open, errors) = store.ops().open();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(open.keys().collect::<Vec<_>>(), vec![&doubt]);
        assert!(store.ops().blocked_targets().contains_key("mcp:s:write"));
        assert_eq!(
            store.ops().all().0,
            before,
            "the whole history is still read"
        );
        // Nothing left to do the second time.
        assert_eq!(
            store.ops().archive_gone_journals(GoneJournals::Archive),
            ArchiveReport::default()
        );
    }

    #[test]
    fn prune_deletes_the_history_and_keeps_the_open_set() {
        let (_dir, store, doubt) = home(5);
        let report = store.ops().archive_gone_journals(GoneJournals::Prune);
        assert_eq!((report.archived, report.pruned), (1, 1), "{report:?}");
        assert!(store.archived_names().unwrap().is_empty());
        let (all, errors) = store.ops().all();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            all.keys().collect::<Vec<_>>(),
            vec![&doubt],
            "the whole history of a pruned journal is its open set"
        );
        let (open, errors) = store.ops().open();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(open.keys().collect::<Vec<_>>(), vec![&doubt]);
        assert!(store.ops().blocked_targets().contains_key("mcp:s:write"));
    }

    #[test]
    fn an_untrusted_open_set_reads_the_archive_whole_and_a_pruned_one_fails_closed() {
        let (_dir, store, doubt) = home(5);
        store.ops().archive_gone_journals(GoneJournals::Archive);
        std::fs::write(store.archive_open_path(), b"{").unwrap();
        let (open, errors) = store.ops().open();
        assert!(open.contains_key(&doubt));
        assert_eq!(errors.len(), 1, "{errors:?}");
        // With an error in the registry every target is blocked for everyone.
        assert!(store.ops().blocked_targets().contains_key("*"));
    }

    #[test]
    fn a_journal_in_both_places_is_read_once_from_ops() {
        let (_dir, store, doubt) = home(5);
        let ops = store.layout().ops();
        let name = std::fs::read_dir(&ops)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .find(|n| n.ends_with(".jsonl"))
            .unwrap();
        let keep = std::fs::read(ops.join(&name)).unwrap();
        store.ops().archive_gone_journals(GoneJournals::Archive);
        // As if the pass had crashed between the link and the removal.
        std::fs::write(ops.join(&name), &keep).unwrap();
        let (open, errors) = store.ops().open();
        assert!(errors.is_empty(), "{errors:?}");
        let unresolved: Vec<&String> = open
            .iter()
            .filter(|(_, op)| op.is_unresolved())
            .map(|(id, _)| id)
            .collect();
        assert_eq!(unresolved, vec![&doubt], "once, from the journal in ops/");
        assert_eq!(open.len(), 6, "the journal in ops/ is read whole, once");
        // The next pass finishes it.
        let report = store.ops().archive_gone_journals(GoneJournals::Archive);
        assert_eq!(report.archived, 1, "{report:?}");
        assert!(!ops.join(&name).exists());
    }

    #[test]
    fn a_live_writers_and_the_owners_journals_stay() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"));
        store.ensure_home().unwrap();
        let journal = store.ops().journal("gateway").unwrap();
        let op = journal
            .prepare_for("mcp:s:write", &OpOwner::agent("worker"), None)
            .unwrap();
        store
            .reconcile(&op, "failed", "checked by hand", "operator")
            .unwrap();
        let report = store.ops().archive_gone_journals(GoneJournals::Archive);
        assert_eq!(report, ArchiveReport::default());
        assert!(store.layout().ops().join("owner.jsonl").exists());
        assert!(names_a_process("gateway-12-34"));
        assert!(!names_a_process("owner"));
        assert!(!names_a_process("-12-34"));
    }
}
