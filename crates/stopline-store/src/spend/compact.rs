//! Compaction of the spending journals: what gone writers spent leaves the hot set.
//!
//! A journal `spend/<label>-<pid>-<start>.jsonl` whose writer has ended is never appended to
//! again. Left in `spend/`, every reservation on a limit would still list and open it, and a
//! fresh reader (a new gateway) would read it whole. Compaction folds it into one small
//! snapshot, `spend/settled.json`: per account (`jti`) what its settled reservations used, the
//! reservations it never settled (in doubt: spent at their bound, never dropped), and the
//! journals it covers that may still be listed in `spend/`, each with the bytes it folded. Then
//! the journal leaves `spend/` for `spend/archive/` (kept on disk; deleted only under
//! `[retention] gone_journals = "prune"`), which no reservation reads.
//!
//! The steps, under `spend/.lock` (the lock every reservation is decided under), for the gone
//! writers' journals a pass finds (`spend.compact.*` failpoints):
//! 1. `settled.json` is rewritten atomically with their spending added and their names and
//!    folded lengths in `covered` (`spend.compact.snapshot.tmp|rename|dirsync`);
//! 2. `spend/archive/` is made once (`spend.compact.mkdir`, `.mkdir.dirsync`) — after the first
//!    snapshot, so an archive without a snapshot means the snapshot was lost;
//! 3. each journal is hard-linked into the archive (`spend.compact.link`), the archive fsynced
//!    (`spend.compact.link.dirsync`), removed from `spend/` (`spend.compact.remove`) and
//!    `spend/` fsynced (`spend.compact.dirsync`);
//! 4. under `prune`, the archived journals are deleted (`spend.compact.prune`, `.prune.dirsync`).
//!
//! Readers count a journal that `covered` names only from the length folded (nothing, for a
//! gone writer), so after a crash at any step every reservation is counted exactly once: by the
//! journal before step 1 is durable, by the snapshot after. A later pass forgets a `covered`
//! name once the journal has left `spend/`, after fsyncing `spend/` first
//! (`spend.compact.forget.dirsync`), so a removal a power cut could undo never outlives the
//! name that keeps it from being counted twice. `settled.json` that cannot be read, does not
//! parse or names another schema — or is missing while `spend/archive/` exists — fails closed:
//! every reservation on a limit is refused `control_state_corrupt`, never counted as zero spent.

use crate::error::{IoContext, StoreError};
use crate::fs::FileId;
use crate::ops_archive::{names_a_process, GoneJournals};
use crate::spend::Spend;
use crate::spend::{add, fold_lines, Meaning};
use crate::Store;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use stopline_core::budget::Budgets;
use stopline_core::RefusalCode;

/// The schema of `spend/settled.json`.
pub const SETTLED_SCHEMA: &str = "stopline.spend-settled.v1";

/// Gone writers' journals (not yet compacted) a reservation tolerates in `spend/` before it
/// compacts them itself, under the lock it holds anyway. A gateway's upkeep (at start and
/// every minute) and `stopline ops compact` compact whatever there is.
pub const COMPACT_AFTER: usize = 8;

/// A gone writer's reservation that never settled: spent at its bound.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InDoubt {
    /// The journal it was recorded in (`<label>-<pid>-<start>`).
    pub writer: String,
    /// The reservation.
    pub id: String,
    /// The accounts it draws on.
    pub chain: Vec<String>,
    /// Its reserved bound.
    pub amounts: Budgets,
}

/// `spend/settled.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settled {
    /// [`SETTLED_SCHEMA`].
    pub schema: String,
    /// What the settled reservations of every journal folded in used, per account.
    pub used: BTreeMap<String, Budgets>,
    /// Their reservations that never settled.
    pub in_doubt: Vec<InDoubt>,
    /// Journals folded in that may still be listed in `spend/` (a pass that has not removed
    /// them yet, or crashed first), with the bytes folded of each.
    pub covered: BTreeMap<String, u64>,
    /// How many journals were ever folded in (a figure for reports).
    #[serde(default)]
    pub journals: u64,
}

impl Settled {
    fn empty() -> Settled {
        Settled {
            schema: SETTLED_SCHEMA.into(),
            used: BTreeMap::new(),
            in_doubt: Vec::new(),
            covered: BTreeMap::new(),
            journals: 0,
        }
    }

    /// Spent per account: settled use, and every reservation in doubt at its bound.
    pub fn totals(&self) -> BTreeMap<String, Budgets> {
        let mut totals = self.used.clone();
        for doubt in &self.in_doubt {
            for jti in &doubt.chain {
                add(&mut totals, jti, &doubt.amounts);
            }
        }
        totals
    }
}

/// What one compaction pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SpendCompactReport {
    /// Gone writers' journals folded into `settled.json` and moved out of `spend/`.
    pub compacted: usize,
    /// Archived journals deleted (`gone_journals = "prune"`).
    pub pruned: usize,
    /// What was left undone, and why.
    pub errors: Vec<String>,
}

fn corrupt(why: String) -> StoreError {
    StoreError::corrupt(RefusalCode::ControlStateCorrupt, why)
}

impl Store {
    /// The pass itself; the caller holds `spend/.lock`. `own`: the caller's own journal, never
    /// compacted. `Err` only when `settled.json` cannot be trusted or `spend/` not listed.
    pub(crate) fn compact_spend_locked(
        &self,
        own: Option<&str>,
        retention: GoneJournals,
    ) -> Result<SpendCompactReport, StoreError> {
        let mut report = SpendCompactReport::default();
        let dir = self.layout.spend();
        let names = self
            .fs
            .read_dir(&dir)
            .context(|| format!("listing {}", dir.display()))?;
        let mut settled = match self.spend().read_settled()? {
            Some((settled, _)) => settled,
            None => Settled::empty(),
        };
        let gone: Vec<&String> = names
            .iter()
            .filter(|n| n.ends_with(".jsonl") && Some(n.as_str()) != own)
            .filter(|n| {
                let writer = n.trim_end_matches(".jsonl");
                names_a_process(writer)
                    && !crate::ops::writer_alive_with(writer, |p| self.env.process_start_time(p))
            })
            .collect();
        // What a gone writer's rewrite of its own journal left (it died before the rename):
        // never read, removed (a power cut that brings one back leaves it for the next pass).
        for tmp in names.iter().filter(|n| {
            n.strip_prefix('.')
                .and_then(|n| n.split_once(".jsonl.tmp-"))
                .is_some_and(|(writer, _)| {
                    Some(format!("{writer}.jsonl").as_str()) != own
                        && names_a_process(writer)
                        && !crate::ops::writer_alive_with(writer, |p| {
                            self.env.process_start_time(p)
                        })
                })
        }) {
            if let Err(error) = self
                .fs
                .remove_file(&dir.join(tmp), "spend.compact.tmp.remove")
            {
                report.errors.push(format!("removing spend/{tmp}: {error}"));
            }
        }
        let forget: Vec<String> = settled
            .covered
            .keys()
            .filter(|n| !names.contains(n))
            .cloned()
            .collect();
        let mut changed = false;
        let fresh: Vec<&String> = gone
            .iter()
            .copied()
            .filter(|n| !settled.covered.contains_key(*n))
            .collect();
        for name in fresh {
            let bytes = match self.fs.read(&dir.join(name)) {
                Ok(bytes) => bytes,
                Err(error) => {
                    report
                        .errors
                        .push(format!("spend/{name} is unreadable: {error}"));
                    continue;
                }
            };
            let (lines, complete) = match fold_lines(&bytes) {
                Ok(folded) => folded,
                Err(why) => {
                    report
                        .errors
                        .push(format!("spend/{name}: {why}; left in spend/"));
                    continue;
                }
            };
            let mut meaning = Meaning::default();
            for line in lines {
                meaning.fold(line);
            }
            for (jti, used) in &meaning.settled {
                add(&mut settled.used, jti, used);
            }
            let writer = name.trim_end_matches(".jsonl");
            settled
                .in_doubt
                .extend(meaning.open.into_iter().map(|(id, open)| InDoubt {
                    writer: writer.to_string(),
                    id,
                    chain: open.chain,
                    amounts: open.amounts,
                }));
            settled.covered.insert(name.clone(), complete as u64);
            settled.journals += 1;
            changed = true;
        }
        if !forget.is_empty() {
            // Their removal from spend/ made durable before the names that cover them go.
            self.fs
                .sync_dir(&dir, "spend.compact.forget.dirsync")
                .context(|| "syncing spend/".to_string())?;
            for name in &forget {
                settled.covered.remove(name);
            }
            changed = true;
        }
        let leaving: Vec<&String> = gone
            .iter()
            .copied()
            .filter(|n| settled.covered.contains_key(*n))
            .collect();
        #[allow(unused_mut)]
        let mut snapshot_first = true;
        #[cfg(feature = "planted-bugs")]
        if self.planted == crate::planted::PlantedBug::SpendJournalMovedBeforeSnapshot {
            snapshot_first = false;
        }
        let bytes = serde_json::to_vec(&settled).expect("the spend snapshot always serializes");
        if changed && snapshot_first {
            self.replace_atomic(
                &self.layout.spend_settled(),
                &bytes,
                "spend.compact.snapshot",
            )?;
        }
        if !leaving.is_empty() {
            report.compacted = self.archive_spend_journals(&leaving, &mut report.errors)?;
        }
        if changed && !snapshot_first {
            self.replace_atomic(
                &self.layout.spend_settled(),
                &bytes,
                "spend.compact.snapshot",
            )?;
        }
        if retention == GoneJournals::Prune {
            report.pruned = self.prune_spend_archive()?;
        }
        Ok(report)
    }

    /// Steps 2 and 3: move `names` (covered by a durable `settled.json`) from `spend/` into
    /// `spend/archive/`. Returns how many left `spend/`.
    fn archive_spend_journals(
        &self,
        names: &[&String],
        errors: &mut Vec<String>,
    ) -> Result<usize, StoreError> {
        let (dir, archive) = (self.layout.spend(), self.layout.spend_archive());
        if !self
            .fs
            .exists(&archive)
            .context(|| "checking spend/archive/".to_string())?
        {
            self.fs
                .create_dir_all(&archive, "spend.compact.mkdir")
                .context(|| format!("creating {}", archive.display()))?;
            self.fs
                .sync_dir(&dir, "spend.compact.mkdir.dirsync")
                .context(|| "syncing spend/".to_string())?;
        }
        let mut linked = Vec::new();
        for name in names {
            let (from, to) = (dir.join(name), archive.join(name));
            match self.fs.hard_link(&from, &to, "spend.compact.link") {
                Ok(()) => linked.push(from),
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                    // An earlier pass linked it and crashed before the removal: the same file?
                    if self.fs.read(&from).ok() == self.fs.read(&to).ok() {
                        linked.push(from);
                    } else {
                        errors.push(format!(
                            "spend/archive/{name} exists and differs from spend/{name}; left in spend/"
                        ));
                    }
                }
                Err(error) => {
                    errors.push(format!("linking spend/{name} into the archive: {error}"))
                }
            }
        }
        if linked.is_empty() {
            return Ok(0);
        }
        self.fs
            .sync_dir(&archive, "spend.compact.link.dirsync")
            .context(|| "syncing spend/archive/".to_string())?;
        for from in &linked {
            self.fs
                .remove_file(from, "spend.compact.remove")
                .context(|| format!("removing {}", from.display()))?;
        }
        self.fs
            .sync_dir(&dir, "spend.compact.dirsync")
            .context(|| "syncing spend/".to_string())?;
        Ok(linked.len())
    }

    /// Step 4 (`gone_journals = "prune"`): delete every archived journal no longer in `spend/`;
    /// each was linked only after a durable `settled.json` covered it.
    fn prune_spend_archive(&self) -> Result<usize, StoreError> {
        let (dir, archive) = (self.layout.spend(), self.layout.spend_archive());
        let archived = match self.fs.read_dir(&archive) {
            Ok(names) => names,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(error) => return Err(error).context(|| "listing spend/archive/".to_string()),
        };
        let listed = self
            .fs
            .read_dir(&dir)
            .context(|| "listing spend/".to_string())?;
        let mut pruned = 0;
        for name in archived
            .iter()
            .filter(|n| n.ends_with(".jsonl") && !listed.contains(n))
        {
            self.fs
                .remove_file(&archive.join(name), "spend.compact.prune")
                .context(|| format!("pruning spend/archive/{name}"))?;
            pruned += 1;
        }
        if pruned > 0 {
            self.fs
                .sync_dir(&archive, "spend.compact.prune.dirsync")
                .context(|| "syncing spend/archive/".to_string())?;
        }
        Ok(pruned)
    }
}

impl Spend<'_> {
    /// `spend/settled.json` and the identity of the file it came from; `None` when there is
    /// none (and nothing was ever compacted). Fails closed (`control_state_corrupt`) when it
    /// cannot be trusted, or is missing while `spend/archive/` exists.
    pub fn read_settled(&self) -> Result<Option<(Settled, Option<FileId>)>, StoreError> {
        let path = self.store.layout.spend_settled();
        let (bytes, id) = match self.store.fs.read_from_identified(&path, 0) {
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                let archive = self.store.layout.spend_archive();
                let archived = self
                    .store
                    .fs
                    .exists(&archive)
                    .context(|| format!("checking {}", archive.display()))?;
                if archived {
                    return Err(corrupt(
                        "spend/settled.json is missing but spend/archive/ exists: the spending \
                         compacted into it is unknown"
                            .into(),
                    ));
                }
                return Ok(None);
            }
            Err(error) => return Err(error).context(|| format!("reading {}", path.display())),
        };
        let settled: Settled = serde_json::from_slice(&bytes)
            .map_err(|e| corrupt(format!("spend/settled.json does not parse: {e}")))?;
        if settled.schema != SETTLED_SCHEMA {
            return Err(corrupt(format!(
                "spend/settled.json names schema {:?}, not {SETTLED_SCHEMA}",
                settled.schema
            )));
        }
        Ok(Some((settled, id)))
    }

    /// Fold the spending journals of writers that are gone into `spend/settled.json` and move
    /// them out of `spend/` (deleting them after under `GoneJournals::Prune`). Takes
    /// `spend/.lock` without waiting: when a reservation holds it, this pass does nothing
    /// (that reservation, or the next pass, compacts). Nothing is lost or counted twice at any
    /// crash: see the module's steps.
    pub fn compact_journals(&self, retention: GoneJournals) -> SpendCompactReport {
        let dir = self.store.layout.spend();
        match self.store.fs.exists(&dir) {
            Ok(true) => {}
            Ok(false) => return SpendCompactReport::default(),
            Err(error) => {
                return SpendCompactReport {
                    errors: vec![format!("spend/ is unreadable: {error}")],
                    ..Default::default()
                }
            }
        }
        let lock = self.store.fs.lock(
            &dir.join(".lock"),
            true,
            true,
            Some(std::time::Duration::ZERO),
        );
        let _guard = match lock {
            Ok(guard) => guard,
            Err(error) if crate::fs::lock_busy(&error) => return SpendCompactReport::default(),
            Err(error) => {
                return SpendCompactReport {
                    errors: vec![format!("locking spend/.lock: {error}")],
                    ..Default::default()
                }
            }
        };
        self.store
            .compact_spend_locked(None, retention)
            .unwrap_or_else(|error| SpendCompactReport {
                errors: vec![error.to_string()],
                ..Default::default()
            })
    }
}
