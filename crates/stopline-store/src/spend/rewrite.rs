//! A live writer's rewrite of its own journal to what it means, once it has grown past
//! `[retention] spend_journal_bytes`: what another gateway reads of it stays bounded.

use super::{fold_lines, Meaning, SpendJournal, UNKNOWN};
use crate::error::{IoContext, StoreError};
use std::sync::atomic::Ordering;
use stopline_core::RefusalCode;

impl SpendJournal {
    /// Rewrite this journal to what it means once it has grown past its bound: a
    /// new file holding per account the settled total and every open reservation's `reserved`
    /// line, fsynced, renamed over the journal's name, `spend/` fsynced. The caller holds the
    /// spend lock, so no other process is folding it; appends of this process wait. A reader
    /// sees the old file or the new one, both meaning the same, and folds a new one from its
    /// start (another file: another inode, or the same inode number born later). See
    /// docs/durability.md.
    pub(super) fn rewrite_if_grown(&self) -> Result<(), StoreError> {
        if self.own.len.load(Ordering::SeqCst) == UNKNOWN {
            // The first reservation: a journal of this name is this process's own from before
            // (another handle on it), or none yet.
            let path = self.path();
            let len = match self.store.fs.identify(&path) {
                Ok(id) => id.map_or(0, |id| id.len),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => 0,
                Err(error) => {
                    return Err(error).context(|| format!("reading {}", path.display()));
                }
            };
            let _ = self
                .own
                .len
                .compare_exchange(UNKNOWN, len, Ordering::SeqCst, Ordering::SeqCst);
        }
        if self.own.len.load(Ordering::SeqCst) < self.own.rewrite_at.load(Ordering::SeqCst) {
            return Ok(());
        }
        let _appends = self.own.appends.write().unwrap_or_else(|p| p.into_inner());
        let path = self.path();
        let corrupt = |why: String| {
            StoreError::corrupt(
                RefusalCode::ControlStateCorrupt,
                format!("spend/{}: {why}", self.name),
            )
        };
        let id = self
            .store
            .fs
            .identify(&path)
            .context(|| format!("reading {}", path.display()))?;
        let bound = self.store.spend_rewrite_bytes;
        let Some(born) = id.and_then(|id| id.born_ns) else {
            // A reader could not tell the new file from the old one under a reused inode
            // number: the journal keeps growing, as it did before journals were rewritten live.
            self.own.rewrite_at.store(u64::MAX, Ordering::SeqCst);
            return Ok(());
        };
        let bytes = self
            .store
            .fs
            .read(&path)
            .context(|| format!("reading {}", path.display()))?;
        // A torn last line is what a failed append left: a reservation never reported, or a
        // `settled` whose loss only over-counts.
        let (lines, _) = fold_lines(&bytes).map_err(corrupt)?;
        let mut meaning = Meaning::default();
        for line in lines {
            meaning.fold(line);
        }
        #[cfg(feature = "planted-bugs")]
        if self.store.planted == crate::planted::PlantedBug::SpendRewriteDropsOpen {
            meaning.open.clear();
        }
        let mut new = Vec::new();
        for line in meaning.lines(self.store.env.now_ms()) {
            new.extend(serde_json::to_vec(&line).expect("a spend line always serializes"));
            new.push(b'\n');
        }
        let (dir, tmp) = self.store.temporary_beside(&path);
        let remove_tmp = || {
            let _ = self.store.fs.remove_file(&tmp, "tmp.cleanup");
        };
        #[allow(unused_mut)]
        let mut synced = true;
        #[cfg(feature = "planted-bugs")]
        if self.store.planted == crate::planted::PlantedBug::SpendRewriteRenamedUnsynced {
            synced = false;
        }
        let written = if synced {
            self.store.fs.write_new(&tmp, &new, "spend.rewrite.tmp")
        } else {
            self.store.fs.append(&tmp, &new, false, "spend.rewrite.tmp")
        };
        if let Err(error) = written {
            remove_tmp();
            return Err(error).context(|| format!("writing {}", tmp.display()));
        }
        // Every generation is born after the one before it, so none shares an inode number
        // and a birth time with an earlier one a reader may have folded.
        let newer = self
            .store
            .fs
            .identify(&tmp)
            .context(|| format!("reading {}", tmp.display()));
        match newer {
            Ok(Some(id)) if id.born_ns.is_some_and(|b| b > born) => {}
            other => {
                remove_tmp();
                other?;
                // Born in the same tick as the file in place (or the clock went back): the
                // next reservation tries again.
                let len = self.own.len.load(Ordering::SeqCst);
                self.own
                    .rewrite_at
                    .store(len.saturating_add(bound / 16 + 1), Ordering::SeqCst);
                return Ok(());
            }
        }
        let durable = self.entry_durable.swap(false, Ordering::SeqCst);
        if let Err(error) = self.store.fs.rename(&tmp, &path, "spend.rewrite.rename") {
            remove_tmp();
            self.entry_durable.store(durable, Ordering::SeqCst);
            return Err(error).context(|| format!("renaming over {}", path.display()));
        }
        // Until spend/ is fsynced a power cut may bring the old file back (the same meaning,
        // without what is appended from now on): nothing is reported durable before.
        self.store
            .fs
            .sync_dir(&dir, "spend.rewrite.dirsync")
            .context(|| format!("fsyncing {}", dir.display()))?;
        self.entry_durable.store(durable, Ordering::SeqCst);
        let len = new.len() as u64;
        self.own.len.store(len, Ordering::SeqCst);
        self.own
            .rewrite_at
            .store(bound.max(len.saturating_mul(2)), Ordering::SeqCst);
        Ok(())
    }
}
