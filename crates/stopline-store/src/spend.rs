//! The spending journals: budgets survive a gateway restart and a crash, and are shared by every
//! gateway over one control directory.
//!
//! A gateway appends `reserved` — the reservation's id, the token chain (`jti`s, the caller's
//! first) and the reserved upper bound — and fsyncs it *before* the call is dispatched, then
//! appends `settled` with what the call actually used (no fsync). Each writer has its own
//! journal, `spend/<label>-<pid>-<start>.jsonl`. A reservation is decided under the exclusive
//! lock `spend/.lock` ([`SpendJournal::lock`]), after folding what every *other* journal added
//! since the last look ([`Elsewhere`]): settled reservations at what they used; open ones of a
//! writer that is gone (crashed, killed, restarted) at their bound — spending in doubt is spent,
//! never forgotten; open ones of a live writer as calls in flight elsewhere. Each look reads of
//! every other journal only the bytes after the complete lines it already folded,
//! and keeps of them only the open reservations and each account's settled total (`Meaning`,
//! the one fold of a journal's lines); a journal that is another file than the one folded
//! (another inode, or the same inode number born later) is folded again from its start, the
//! same file shorter than what was folded is corruption. A live writer's own journal is
//! rewritten to what it means once it has grown past `[retention] spend_journal_bytes`
//! ([`REWRITE_BYTES`]): per account the settled total and every open reservation, fsynced,
//! renamed over it, `spend/` fsynced — so what another gateway reads of it is bounded by that,
//! not by how long it has run (see `SpendJournal::rewrite_if_grown`). The journals of writers that are gone are
//! folded into `spend/settled.json` and leave `spend/` ([`crate::spend_compact`]): a look reads
//! that small snapshot (only when it changed) and the journals still listed, so what it costs
//! depends on the live writers, not on how many gateways the home has ever run. Losing a `settled`
//! line in a crash therefore only over-counts. A torn last line is a remnant (a `reserved` that
//! was never fsynced was never dispatched on) and is left for later; a broken line anywhere else
//! is corruption and fails closed.

use crate::error::{IoContext, StoreError};
use crate::fs::LockGuard;
use crate::Store;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use stopline_core::budget::Budgets;
use stopline_core::RefusalCode;

/// One line of a spending journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum SpendLine {
    /// Reserved before dispatch (fsynced).
    Reserved {
        /// The reservation.
        id: String,
        /// The accounts it draws on: the caller's `jti`, then its parents'.
        chain: Vec<String>,
        /// The reserved upper bound.
        amounts: Budgets,
        /// When (unix ms).
        ts_ms: i64,
    },
    /// What it actually used (not fsynced; empty when the call was never dispatched).
    Settled {
        /// The reservation.
        id: String,
        /// What was used.
        used: Budgets,
    },
}

/// What the other writers' journals say, per account (`jti`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Elsewhere {
    /// Spent: settled reservations at what they used, open ones of gone writers at their bound.
    pub used: BTreeMap<String, Budgets>,
    /// Reserved by calls still in flight at a live writer, at their bound.
    pub in_flight: BTreeMap<String, Budgets>,
}

/// One other writer's journal as folded so far.
#[derive(Debug, Default)]
struct Folded {
    /// The file folded (`None`: not known, or this filesystem cannot tell).
    file: Option<crate::fs::FileId>,
    /// Bytes of complete lines already folded.
    offset: usize,
    /// Where folding started: the length `spend/settled.json` covers of it (`None`: from 0).
    covered_from: Option<u64>,
    /// What its lines folded so far mean.
    meaning: Meaning,
}

/// What a spending journal's lines mean: the reservations not settled yet and what the settled
/// ones used, per account. The one fold of a journal's lines, for a look
/// ([`SpendJournal::lock`]), a compaction (`spend_compact.rs`) and a live writer's rewrite of
/// its own journal alike.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Meaning {
    /// Reservations not settled yet, by id.
    pub(crate) open: BTreeMap<String, Open>,
    /// What settled reservations used, per account.
    pub(crate) settled: BTreeMap<String, Budgets>,
}

/// A reservation not settled yet, as its `reserved` line says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Open {
    /// The accounts it draws on.
    pub(crate) chain: Vec<String>,
    /// Its reserved bound.
    pub(crate) amounts: Budgets,
    /// When it was reserved (unix ms).
    pub(crate) ts_ms: i64,
}

impl Meaning {
    /// Fold one more line: a `reserved` opens its reservation, a `settled` takes it out of the
    /// open set and adds what it used to every account of its chain (a `settled` of nothing
    /// open is ignored).
    pub(crate) fn fold(&mut self, line: SpendLine) {
        match line {
            SpendLine::Reserved {
                id,
                chain,
                amounts,
                ts_ms,
            } => {
                self.open.insert(
                    id,
                    Open {
                        chain,
                        amounts,
                        ts_ms,
                    },
                );
            }
            SpendLine::Settled { id, used } => {
                if let Some(open) = self.open.remove(&id) {
                    for jti in &open.chain {
                        add(&mut self.settled, jti, &used);
                    }
                }
            }
        }
    }

    /// The lines of a journal that means exactly this: per account (in order) one `reserved`
    /// and one `settled` line carrying its settled total (ids `carried-<n>`, never an id a
    /// reservation gets), then every open reservation's own `reserved` line. Any reader folds
    /// them to this same meaning, an older binary's too: no line kind is new.
    pub(crate) fn lines(&self, ts_ms: i64) -> Vec<SpendLine> {
        let mut lines = Vec::with_capacity(2 * self.settled.len() + self.open.len());
        for (n, (account, used)) in self.settled.iter().enumerate() {
            let id = format!("carried-{n}");
            lines.push(SpendLine::Reserved {
                id: id.clone(),
                chain: vec![account.clone()],
                amounts: used.clone(),
                ts_ms,
            });
            lines.push(SpendLine::Settled {
                id,
                used: used.clone(),
            });
        }
        for (id, open) in &self.open {
            lines.push(SpendLine::Reserved {
                id: id.clone(),
                chain: open.chain.clone(),
                amounts: open.amounts.clone(),
                ts_ms: open.ts_ms,
            });
        }
        lines
    }
}

/// Add `amounts` to `account` in `into`.
pub(crate) fn add(into: &mut BTreeMap<String, Budgets>, account: &str, amounts: &Budgets) {
    let account = into.entry(account.to_string()).or_default();
    for (&kind, &amount) in amounts {
        *account.entry(kind).or_default() += amount;
    }
}

/// What a journal's looks keep between them: every other journal as folded so far, and the
/// compacted spending of `spend/settled.json` with the identity of the file it came from.
#[derive(Debug, Default)]
struct Follow {
    journals: BTreeMap<String, Folded>,
    settled: Option<(Option<crate::fs::FileId>, Arc<LoadedSettled>)>,
    /// Uncovered journals of others that make a look compact the gone ones itself.
    compact_at: usize,
}

/// `spend/settled.json` as a look uses it.
#[derive(Debug)]
struct LoadedSettled {
    /// Spent per account (settled use and reservations in doubt).
    totals: BTreeMap<String, Budgets>,
    /// Journals it covers, with the bytes folded of each.
    covered: BTreeMap<String, u64>,
}

/// A live writer's journal is rewritten to what it means once it has grown past this many
/// bytes (`[retention] spend_journal_bytes`).
pub const REWRITE_BYTES: u64 = 1 << 20;

/// `Own::len` before the first reservation looked at the journal.
const UNKNOWN: u64 = u64::MAX;

/// This process's spending journal (`spend/<label>-<pid>-<start>.jsonl`).
#[derive(Debug, Clone)]
pub struct SpendJournal {
    store: Store,
    name: String,
    others: Arc<Mutex<Follow>>,
    /// Whether this journal's directory entry (and `spend/`'s in the home) is durable yet.
    entry_durable: Arc<std::sync::atomic::AtomicBool>,
    own: Arc<Own>,
}

/// This journal as its writer keeps it.
#[derive(Debug)]
struct Own {
    /// Appends hold it shared (a `settled` line is written without the spend lock), a rewrite
    /// exclusive: no line lands in the file being replaced after the rewrite read it.
    appends: RwLock<()>,
    /// Bytes in the journal: what this process found at its first reservation, then what it
    /// appended and rewrote ([`UNKNOWN`] before that first reservation).
    len: AtomicU64,
    /// The length past which the next reservation rewrites it (`u64::MAX`: never, this
    /// filesystem cannot tell one generation of the file from the next).
    rewrite_at: AtomicU64,
}

/// The spend lock, held while a reservation is decided and recorded.
pub struct SpendLock<'a> {
    journal: &'a SpendJournal,
    _guard: Box<dyn LockGuard>,
    elsewhere: Elsewhere,
}

impl Store {
    /// Open this process's spending journal, labelled `label` (e.g. `gateway`).
    pub fn spend_journal(&self, label: &str) -> Result<SpendJournal, StoreError> {
        self.ensure_dirs(&[&self.layout.spend()])?;
        let pid = self.env.pid();
        let start = self.env.process_start_time(pid).unwrap_or(0);
        Ok(SpendJournal {
            store: self.clone(),
            name: format!("{label}-{pid}-{start}.jsonl"),
            others: Arc::new(Mutex::new(Follow {
                compact_at: self.spend_compact_after,
                ..Follow::default()
            })),
            entry_durable: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            own: Arc::new(Own {
                appends: RwLock::new(()),
                len: AtomicU64::new(UNKNOWN),
                rewrite_at: AtomicU64::new(self.spend_rewrite_bytes),
            }),
        })
    }
}

/// The complete lines of `bytes` (what a journal holds after the lines already folded): an
/// unterminated last line is a remnant, left for a later look; a complete line that does not
/// parse is corruption. Returns the lines and the length of the complete part.
pub(crate) fn fold_lines(bytes: &[u8]) -> Result<(Vec<SpendLine>, usize), String> {
    let complete = bytes
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |end| end + 1);
    let lines = bytes[..complete]
        .split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| {
            serde_json::from_slice(line)
                .map_err(|e| format!("{e} in {:?}", String::from_utf8_lossy(line)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((lines, complete))
}

impl SpendJournal {
    fn path(&self) -> PathBuf {
        self.store.layout.spend().join(&self.name)
    }

    /// Take the spend lock and fold what the other journals added since the last look.
    pub fn lock(&self) -> Result<SpendLock<'_>, StoreError> {
        let dir = self.store.layout.spend();
        self.store.ensure_dirs(&[&dir])?;
        let guard = self
            .store
            .fs
            .lock(&dir.join(".lock"), true, true, None)
            .context(|| "locking spend/.lock".to_string())?;
        let elsewhere = self.fold_others()?;
        Ok(SpendLock {
            journal: self,
            _guard: guard,
            elsewhere,
        })
    }

    /// `spend/settled.json` as of now: the one already loaded when the file is the same
    /// (a read of nothing at its end tells), else read and parsed again.
    fn load_settled(&self, follow: &mut Follow) -> Result<Option<Arc<LoadedSettled>>, StoreError> {
        let path = self.store.layout.spend_settled();
        if let Some((Some(was), loaded)) = &follow.settled {
            if let Ok((bytes, Some(now))) = self.store.fs.read_from_identified(&path, was.len) {
                if bytes.is_empty() && now.same_file(was) && now == *was {
                    return Ok(Some(loaded.clone()));
                }
            }
        }
        follow.settled = None;
        let Some((settled, id)) = self.store.read_spend_settled()? else {
            return Ok(None);
        };
        let loaded = Arc::new(LoadedSettled {
            totals: settled.totals(),
            covered: settled.covered,
        });
        follow.settled = Some((id, loaded.clone()));
        Ok(Some(loaded))
    }

    fn fold_others(&self) -> Result<Elsewhere, StoreError> {
        let dir = self.store.layout.spend();
        let list = || {
            self.store
                .fs
                .read_dir(&dir)
                .context(|| format!("listing {}", dir.display()))
        };
        let mut follow = self.others.lock().unwrap_or_else(|p| p.into_inner());
        let mut names = list()?;
        let mut settled = self.load_settled(&mut follow)?;
        let uncovered = |names: &[String], settled: &Option<Arc<LoadedSettled>>| {
            names
                .iter()
                .filter(|n| n.ends_with(".jsonl") && **n != self.name)
                .filter(|n| settled.as_ref().is_none_or(|s| !s.covered.contains_key(*n)))
                .count()
        };
        if uncovered(&names, &settled) >= follow.compact_at {
            // Many journals nobody compacted (no gateway upkeep ran): the gone writers' among
            // them are folded into the snapshot now, under the lock this look holds anyway.
            // Only a snapshot that cannot be trusted fails the look; anything else left undone
            // is left for the upkeep, and this look reads what is there.
            self.store
                .compact_spend_locked(Some(&self.name), self.store.gone_journals())?;
            names = list()?;
            settled = self.load_settled(&mut follow)?;
            follow.compact_at = uncovered(&names, &settled) + self.store.spend_compact_after;
        }
        let journals = &mut follow.journals;
        // A journal that left spend/ is in the snapshot (compaction moved it) or gone for
        // every reader alike: nothing of it is counted from memory.
        journals.retain(|name, _| names.contains(name));
        for name in names
            .iter()
            .filter(|n| n.ends_with(".jsonl") && **n != self.name)
        {
            let path = dir.join(name);
            let read = |offset: usize| {
                self.store
                    .fs
                    .read_from_identified(&path, offset as u64)
                    .context(|| format!("reading {}", path.display()))
            };
            let corrupt = |why: String| {
                StoreError::corrupt(
                    RefusalCode::ControlStateCorrupt,
                    format!("spend/{name}: {why}"),
                )
            };
            // What the snapshot covers of it (all of it, for a gone writer's journal a crash
            // left behind) is counted there, never again here.
            #[allow(unused_mut)]
            let mut covered = settled.as_ref().and_then(|s| s.covered.get(name).copied());
            #[cfg(feature = "planted-bugs")]
            if self.store.planted == crate::planted::PlantedBug::SpendCoveredCountedTwice {
                covered = None;
            }
            let from_covered = || Folded {
                offset: covered.unwrap_or(0) as usize,
                covered_from: covered,
                ..Folded::default()
            };
            let folded = journals.entry(name.clone()).or_insert_with(from_covered);
            if folded.covered_from != covered {
                *folded = from_covered();
            }
            let (mut bytes, mut file) = read(folded.offset)?;
            if let (Some(was), Some(now)) = (folded.file, file) {
                if !was.same_file(&now) {
                    // Another file under the same name: fold it from its start.
                    *folded = from_covered();
                    (bytes, file) = read(folded.offset)?;
                }
            }
            if let Some(now) = file {
                if now.len < folded.offset as u64 {
                    return Err(corrupt(format!(
                        "shrank from {} to {} bytes",
                        folded.offset, now.len
                    )));
                }
            }
            let (lines, complete) = fold_lines(&bytes).map_err(corrupt)?;
            folded.file = file;
            folded.offset += complete;
            for line in lines {
                folded.meaning.fold(line);
            }
        }
        let mut elsewhere = Elsewhere {
            used: settled.map(|s| s.totals.clone()).unwrap_or_default(),
            ..Elsewhere::default()
        };
        for (name, folded) in journals.iter() {
            for (jti, used) in &folded.meaning.settled {
                add(&mut elsewhere.used, jti, used);
            }
            if folded.meaning.open.is_empty() {
                continue;
            }
            let alive = crate::ops::writer_alive_with(name.trim_end_matches(".jsonl"), |p| {
                self.store.env.process_start_time(p)
            });
            for open in folded.meaning.open.values() {
                let into = if alive {
                    &mut elsewhere.in_flight
                } else {
                    &mut elsewhere.used
                };
                for jti in &open.chain {
                    add(into, jti, &open.amounts);
                }
            }
        }
        Ok(elsewhere)
    }

    fn append(&self, line: &SpendLine, sync: bool, fp: &str) -> Result<(), StoreError> {
        let mut bytes = serde_json::to_vec(line).expect("a spend line always serializes");
        bytes.push(b'\n');
        let path = self.path();
        let _appends = self.own.appends.read().unwrap_or_else(|p| p.into_inner());
        self.store
            .fs
            .append(&path, &bytes, sync, fp)
            .context(|| format!("appending to {}", path.display()))?;
        let grown = bytes.len() as u64;
        let _ = self
            .own
            .len
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |len| {
                (len != UNKNOWN).then(|| len.saturating_add(grown))
            });
        if sync {
            self.make_entry_durable()?;
        }
        Ok(())
    }

    /// Rewrite this journal to what it means once it has grown past its bound: a
    /// new file holding per account the settled total and every open reservation's `reserved`
    /// line, fsynced, renamed over the journal's name, `spend/` fsynced. The caller holds the
    /// spend lock, so no other process is folding it; appends of this process wait. A reader
    /// sees the old file or the new one, both meaning the same, and folds a new one from its
    /// start (another file: another inode, or the same inode number born later). See
    /// docs/durability.md.
    fn rewrite_if_grown(&self) -> Result<(), StoreError> {
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

    /// The first fsynced reservation creates the journal: fsync `spend/` (its entry) and the
    /// home (the entry of `spend/`), or a power cut could lose the whole journal with every
    /// durable reservation in it — budget spent before the cut would be spendable again. The
    /// same gap the model checker found in `ops/` (see `ops.rs`). Done once per journal, before
    /// the reservation is reported durable, so before the call it pays for is dispatched.
    fn make_entry_durable(&self) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering;
        if self.entry_durable.load(Ordering::SeqCst) {
            return Ok(());
        }
        let spend = self.store.layout.spend();
        self.store
            .fs
            .sync_dir(&spend, "spend.dirsync")
            .context(|| format!("fsyncing {}", spend.display()))?;
        let home = self.store.layout.home().to_path_buf();
        self.store
            .fs
            .sync_dir(&home, "spend.home.dirsync")
            .context(|| format!("fsyncing {}", home.display()))?;
        self.entry_durable.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Record what reservation `id` actually used (not fsynced: a lost line over-counts).
    pub fn settled(&self, id: &str, used: &Budgets) -> Result<(), StoreError> {
        let line = SpendLine::Settled {
            id: id.to_string(),
            used: used.clone(),
        };
        self.append(&line, false, "spend.settle")
    }
}

impl SpendLock<'_> {
    /// What the other journals say (as of taking this lock).
    pub fn elsewhere(&self) -> &Elsewhere {
        &self.elsewhere
    }

    /// Record a reservation durably (fsynced before returning) while the lock is held; returns
    /// its id.
    pub fn reserved(&self, chain: &[String], amounts: &Budgets) -> Result<String, StoreError> {
        let store = &self.journal.store;
        let id = format!("sp_{}", store.env.random_hex(8));
        let line = SpendLine::Reserved {
            id: id.clone(),
            chain: chain.to_vec(),
            amounts: amounts.clone(),
            ts_ms: store.env.now_ms(),
        };
        self.journal.rewrite_if_grown()?;
        self.journal.append(&line, true, "spend.reserve")?;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stopline_core::budget::BudgetKind;

    /// A journal named as if a gone process wrote it (pid 1 never has start time 1).
    fn gone_writer(store: &Store, lines: &[SpendLine]) -> PathBuf {
        let path = store.layout().spend().join("gateway-1-1.jsonl");
        let mut bytes = Vec::new();
        for line in lines {
            bytes.extend(serde_json::to_vec(line).unwrap());
            bytes.push(b'\n');
        }
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn reserved(id: &str, chain: &[&str], amounts: &Budgets) -> SpendLine {
        SpendLine::Reserved {
            id: id.into(),
            chain: chain.iter().map(|s| s.to_string()).collect(),
            amounts: amounts.clone(),
            ts_ms: 0,
        }
    }

    #[test]
    fn a_gone_writers_open_reservations_count_at_their_bound_and_settled_ones_at_their_use() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"));
        let bound: Budgets = [(BudgetKind::ToolCalls, 1.0), (BudgetKind::SpendUsd, 0.5)].into();
        let used: Budgets = [(BudgetKind::ToolCalls, 1.0), (BudgetKind::SpendUsd, 0.1)].into();
        gone_writer(
            &store,
            &[
                reserved("a", &["child", "parent"], &bound),
                SpendLine::Settled {
                    id: "a".into(),
                    used: used.clone(),
                },
                reserved("b", &["child", "parent"], &bound),
                SpendLine::Settled {
                    id: "b".into(),
                    used: Budgets::new(),
                },
                reserved("c", &["child"], &bound), // it crashed before this settled
            ],
        );
        let journal = store.spend_journal("gateway").unwrap();
        let lock = journal.lock().unwrap();
        let spent = &lock.elsewhere().used;
        assert_eq!(spent["parent"][&BudgetKind::ToolCalls], 1.0);
        assert!((spent["parent"][&BudgetKind::SpendUsd] - 0.1).abs() < 1e-9);
        assert_eq!(spent["child"][&BudgetKind::ToolCalls], 2.0);
        assert!((spent["child"][&BudgetKind::SpendUsd] - 0.6).abs() < 1e-9);
        assert!(lock.elsewhere().in_flight.is_empty());
    }

    #[test]
    fn a_live_writers_open_reservations_are_in_flight_and_its_own_are_not_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"));
        let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
        let other = store.spend_journal("other").unwrap(); // this live process, another journal
        let mine = store.spend_journal("gateway").unwrap();
        let id = other
            .lock()
            .unwrap()
            .reserved(&["t".to_string()], &one)
            .unwrap();
        mine.lock()
            .unwrap()
            .reserved(&["t".to_string()], &one)
            .unwrap();
        let seen = mine.lock().unwrap().elsewhere().clone();
        assert_eq!(seen.in_flight["t"][&BudgetKind::ToolCalls], 1.0);
        assert!(
            seen.used.is_empty(),
            "its own reservation is not elsewhere: {seen:?}"
        );
        other.settled(&id, &one).unwrap();
        let seen = mine.lock().unwrap().elsewhere().clone();
        assert_eq!(seen.used["t"][&BudgetKind::ToolCalls], 1.0);
        assert!(seen.in_flight.is_empty());
    }

    #[test]
    fn a_look_reads_only_what_the_other_journals_gained() {
        let dir = tempfile::tempdir().unwrap();
        let counting = Arc::new(crate::follow::tests::Counting::default());
        let store = Store::with_io(
            dir.path().join("home"),
            counting.clone(),
            Arc::new(crate::env::SystemEnv),
        );
        let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
        let history: Vec<SpendLine> = (0..200)
            .flat_map(|i| {
                let id = format!("r{i}");
                [
                    reserved(&id, &["t"], &one),
                    SpendLine::Settled {
                        id,
                        used: one.clone(),
                    },
                ]
            })
            .collect();
        let path = gone_writer(&store, &history);
        let journal = store.spend_journal("gateway").unwrap();
        assert_eq!(
            journal.lock().unwrap().elsewhere().used["t"][&BudgetKind::ToolCalls],
            200.0
        );
        counting.reset();
        let before = std::fs::metadata(&path).unwrap().len();
        let mut bytes = serde_json::to_vec(&reserved("open", &["t"], &one)).unwrap();
        bytes.push(b'\n');
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(&bytes)
            .unwrap();
        let seen = journal.lock().unwrap().elsewhere().clone();
        assert_eq!(seen.used["t"][&BudgetKind::ToolCalls], 201.0, "{seen:?}");
        assert_eq!(
            counting.take(&path),
            std::fs::metadata(&path).unwrap().len() - before,
            "only the appended line is read"
        );
    }

    #[test]
    fn a_replaced_journal_is_folded_again_and_a_shorter_one_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"));
        let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
        let two: Budgets = [(BudgetKind::ToolCalls, 2.0)].into();
        let path = gone_writer(&store, &[reserved("a", &["t"], &one)]);
        let journal = store.spend_journal("gateway").unwrap();
        assert_eq!(
            journal.lock().unwrap().elsewhere().used["t"][&BudgetKind::ToolCalls],
            1.0
        );
        // Renamed over by another file: folded from its start, not from the old offset.
        let mut bytes = Vec::new();
        for line in [reserved("x", &["t"], &two), reserved("y", &["u"], &one)] {
            bytes.extend(serde_json::to_vec(&line).unwrap());
            bytes.push(b'\n');
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, &bytes).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        let seen = journal.lock().unwrap().elsewhere().clone();
        assert_eq!(seen.used["t"][&BudgetKind::ToolCalls], 2.0, "{seen:?}");
        assert_eq!(seen.used["u"][&BudgetKind::ToolCalls], 1.0, "{seen:?}");
        // Cut shorter in place: what was folded is gone, which fails closed.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(10)
            .unwrap();
        let error = journal
            .lock()
            .err()
            .expect("a shorter journal")
            .to_refusal();
        assert_eq!(
            error.code,
            RefusalCode::ControlStateCorrupt,
            "{}",
            error.message
        );
    }

    #[test]
    fn a_torn_tail_waits_and_a_broken_line_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"));
        let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
        let path = gone_writer(&store, &[reserved("a", &["t"], &one)]);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"{\"phase\":\"reser");
        std::fs::write(&path, &bytes).unwrap();
        let journal = store.spend_journal("gateway").unwrap();
        assert_eq!(
            journal.lock().unwrap().elsewhere().used["t"][&BudgetKind::ToolCalls],
            1.0
        );
        bytes.extend_from_slice(b"\n");
        std::fs::write(&path, &bytes).unwrap();
        let error = journal.lock().err().expect("a broken line").to_refusal();
        assert_eq!(
            error.code,
            RefusalCode::ControlStateCorrupt,
            "{}",
            error.message
        );
    }

    /// A journal at `spend/<name>` holding `lines`, as a gone writer left it.
    fn journal_named(store: &Store, name: &str, lines: &[SpendLine]) -> PathBuf {
        let path = store.layout().spend().join(name);
        let mut bytes = Vec::new();
        for line in lines {
            bytes.extend(serde_json::to_vec(line).unwrap());
            bytes.push(b'\n');
        }
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// `n` settled reservations of `bound` that used `used`, on `chain`, then one left open.
    fn settled_then_open(
        n: usize,
        chain: &[&str],
        bound: &Budgets,
        used: &Budgets,
    ) -> Vec<SpendLine> {
        let mut lines: Vec<SpendLine> = (0..n)
            .flat_map(|i| {
                let id = format!("r{i}");
                [
                    reserved(&id, chain, bound),
                    SpendLine::Settled {
                        id,
                        used: used.clone(),
                    },
                ]
            })
            .collect();
        lines.push(reserved("open", &chain[..1], bound));
        lines
    }

    fn tool_calls(seen: &Elsewhere, account: &str) -> f64 {
        seen.used
            .get(account)
            .and_then(|b| b.get(&BudgetKind::ToolCalls))
            .copied()
            .unwrap_or(0.0)
    }

    fn listed(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.map(|e| e.unwrap().file_name().into_string().unwrap())
                    .filter(|n| n.ends_with(".jsonl"))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    #[test]
    fn a_reservation_with_many_gone_writers_reads_only_their_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let counting = Arc::new(crate::follow::tests::Counting::default());
        let store = Store::with_io(
            dir.path().join("home"),
            counting.clone(),
            Arc::new(crate::env::SystemEnv),
        );
        let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
        let two: Budgets = [(BudgetKind::ToolCalls, 2.0)].into();
        // 40 gateways that have gone (no process has start time 1), 25 settled calls each and
        // one reservation each that never settled (in doubt: spent at its bound).
        for w in 0..40 {
            let lines = settled_then_open(25, &["child", "parent"], &two, &one);
            journal_named(
                &store,
                &format!("gateway-{}-1.jsonl", 3_000_000 + w),
                &lines,
            );
        }
        let spend = store.layout().spend();
        let first = store.spend_journal("gateway").unwrap();
        let seen = first.lock().unwrap().elsewhere().clone();
        assert_eq!(tool_calls(&seen, "parent"), 1000.0, "{seen:?}");
        assert_eq!(tool_calls(&seen, "child"), 1080.0, "{seen:?}");
        assert!(seen.in_flight.is_empty(), "{seen:?}");
        // A fresh reader (a new gateway) decides a reservation: it reads the snapshot, and
        // nothing of any gone writer's journal.
        counting.reset();
        let fresh = store.spend_journal("fresh").unwrap();
        let lock = fresh.lock().unwrap();
        assert_eq!(
            lock.elsewhere(),
            &seen,
            "the same spending, from the snapshot"
        );
        lock.reserved(&["child".to_string()], &one).unwrap();
        drop(lock);
        let settled = spend.join("settled.json");
        let reads = counting.read_under(&spend);
        assert_eq!(
            reads.keys().collect::<Vec<_>>(),
            vec![&settled],
            "a fresh reservation reads spend/settled.json only: {reads:?}"
        );
        // The first reader's next look: the snapshot did not change (a zero-byte read tells),
        // and the live writer's journal is read from where it was folded.
        counting.reset();
        let again = first.lock().unwrap().elsewhere().clone();
        assert_eq!(tool_calls(&again, "child"), 1080.0, "{again:?}");
        assert_eq!(again.in_flight["child"][&BudgetKind::ToolCalls], 1.0);
        let reads = counting.read_under(&spend);
        assert_eq!(reads.get(&settled).map(|r| r.1), Some(0), "{reads:?}");
        assert_eq!(
            reads.len(),
            2,
            "the snapshot and the live journal: {reads:?}"
        );
    }

    #[test]
    fn compaction_by_another_process_neither_loses_nor_counts_twice() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"));
        let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
        let two: Budgets = [(BudgetKind::ToolCalls, 2.0)].into();
        for w in 0..3 {
            let lines = settled_then_open(1, &["t"], &two, &one);
            journal_named(
                &store,
                &format!("gateway-{}-1.jsonl", 3_000_100 + w),
                &lines,
            );
        }
        let (spend, archive) = (store.layout().spend(), store.layout().spend_archive());
        let names = listed(&spend);
        let follower = store.spend_journal("gateway").unwrap();
        let total = |journal: &SpendJournal| tool_calls(journal.lock().unwrap().elsewhere(), "t");
        assert_eq!(total(&follower), 9.0, "3 settled at 1, 3 in doubt at 2");
        let report = store.compact_spend_journals(crate::ops_archive::GoneJournals::Archive);
        assert_eq!((report.compacted, report.pruned), (3, 0), "{report:?}");
        assert!(listed(&spend).is_empty(), "{:?}", listed(&spend));
        assert_eq!(listed(&archive), names, "kept on disk, off the hot path");
        assert_eq!(
            total(&follower),
            9.0,
            "what it folded before is in the snapshot now"
        );
        assert_eq!(total(&store.spend_journal("fresh").unwrap()), 9.0);
        // A crash between the snapshot and the removal leaves a covered journal in spend/.
        std::fs::copy(archive.join(&names[0]), spend.join(&names[0])).unwrap();
        assert_eq!(
            total(&follower),
            9.0,
            "a covered journal is not counted again"
        );
        assert_eq!(total(&store.spend_journal("fresh").unwrap()), 9.0);
        let report = store.compact_spend_journals(crate::ops_archive::GoneJournals::Archive);
        assert_eq!(report.compacted, 1, "the next pass finishes it: {report:?}");
        assert!(listed(&spend).is_empty());
        // The pass after forgets the names whose journals left spend/.
        store.compact_spend_journals(crate::ops_archive::GoneJournals::Archive);
        let (settled, _) = store.read_spend_settled().unwrap().unwrap();
        assert!(settled.covered.is_empty(), "{settled:?}");
        assert_eq!(settled.in_doubt.len(), 3, "{settled:?}");
        assert_eq!(total(&follower), 9.0);
        assert_eq!(total(&store.spend_journal("fresh").unwrap()), 9.0);
        let report = store.compact_spend_journals(crate::ops_archive::GoneJournals::Prune);
        assert_eq!(report.pruned, 3, "{report:?}");
        assert!(listed(&archive).is_empty());
        assert_eq!(
            total(&store.spend_journal("fresh").unwrap()),
            9.0,
            "pruned, still spent"
        );
    }

    #[test]
    fn a_snapshot_that_cannot_be_trusted_fails_closed_never_zero_spent() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"));
        let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
        journal_named(
            &store,
            "gateway-3000200-1.jsonl",
            &settled_then_open(2, &["t"], &one, &one),
        );
        let report = store.compact_spend_journals(crate::ops_archive::GoneJournals::Archive);
        assert_eq!(report.compacted, 1, "{report:?}");
        let settled = store.layout().spend_settled();
        let good = std::fs::read(&settled).unwrap();
        let journal = store.spend_journal("gateway").unwrap();
        assert_eq!(tool_calls(journal.lock().unwrap().elsewhere(), "t"), 3.0);
        let refused = |why: &str| {
            let error = journal
                .lock()
                .err()
                .unwrap_or_else(|| panic!("{why}: not refused"));
            let refusal = error.to_refusal();
            assert_eq!(
                refusal.code,
                RefusalCode::ControlStateCorrupt,
                "{why}: {refusal:?}"
            );
            let fresh = store.spend_journal("fresh").unwrap();
            assert!(fresh.lock().is_err(), "{why}: a fresh reader too");
            let report = store.compact_spend_journals(crate::ops_archive::GoneJournals::Prune);
            assert!(!report.errors.is_empty(), "{why}: {report:?}");
        };
        std::fs::write(&settled, b"{\"schema\":").unwrap();
        refused("torn");
        let other = String::from_utf8(good.clone()).unwrap().replace(
            crate::spend_compact::SETTLED_SCHEMA,
            "stopline.spend-settled.v0",
        );
        std::fs::write(&settled, other).unwrap();
        refused("another schema");
        std::fs::remove_file(&settled).unwrap();
        refused("missing beside the archive");
        assert_eq!(
            listed(&store.layout().spend_archive()),
            vec!["gateway-3000200-1.jsonl".to_string()],
            "nothing pruned while the snapshot cannot be trusted"
        );
        std::fs::write(&settled, &good).unwrap();
        assert_eq!(tool_calls(journal.lock().unwrap().elsewhere(), "t"), 3.0);
    }

    /// `calls` reservations of one tool call on `t` and `p` by `journal`, each settled at what
    /// it reserved, then one of two on `t` left open; returns the open one's id.
    fn live_history(journal: &SpendJournal, calls: usize) -> String {
        let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
        let two: Budgets = [(BudgetKind::ToolCalls, 2.0)].into();
        let chain = ["t".to_string(), "p".to_string()];
        for _ in 0..calls {
            let id = journal.lock().unwrap().reserved(&chain, &one).unwrap();
            journal.settled(&id, &one).unwrap();
        }
        journal.lock().unwrap().reserved(&chain[..1], &two).unwrap()
    }

    fn in_flight(seen: &Elsewhere, account: &str) -> f64 {
        seen.in_flight
            .get(account)
            .and_then(|b| b.get(&BudgetKind::ToolCalls))
            .copied()
            .unwrap_or(0.0)
    }

    #[test]
    fn a_new_gateways_first_reservation_reads_a_bounded_part_of_a_long_lived_writer() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let bound = 4096;
        let writer = Store::open(&home).with_spend_rewrite_bytes(bound);
        let live = writer.spend_journal("gateway").unwrap();
        live_history(&live, 600);
        let path = writer.layout().spend().join(&live.name);
        let counting = Arc::new(crate::follow::tests::Counting::default());
        let reader = Store::with_io(&home, counting.clone(), Arc::new(crate::env::SystemEnv));
        let fresh = reader.spend_journal("fresh").unwrap();
        let lock = fresh.lock().unwrap();
        let seen = lock.elsewhere().clone();
        let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
        lock.reserved(&["p".to_string()], &one).unwrap();
        drop(lock);
        assert_eq!(tool_calls(&seen, "t"), 600.0, "{seen:?}");
        assert_eq!(tool_calls(&seen, "p"), 600.0, "{seen:?}");
        assert_eq!(
            in_flight(&seen, "t"),
            2.0,
            "the open call, in flight: {seen:?}"
        );
        let read = counting.take(&path);
        assert!(
            read <= 2 * bound,
            "600 calls' journal read whole: {read} bytes (bound {bound})"
        );
    }

    #[test]
    fn a_reader_folding_across_rewrites_counts_every_call_once() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let store = Store::open(&home).with_spend_rewrite_bytes(2048);
        let live = store.spend_journal("gateway").unwrap();
        let follower = store.spend_journal("follower").unwrap();
        let path = store.layout().spend().join(&live.name);
        let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
        let chain = ["t".to_string(), "p".to_string()];
        let open = live.lock().unwrap().reserved(&chain[..1], &one).unwrap();
        let mut files = Vec::new();
        let mut reused = false;
        // The follower looks after every call (mid-way through a file, then the next one),
        // then after ever longer gaps: several rewrites between two of its looks, where ext4
        // hands a new generation the inode number of one the follower folded before.
        let mut calls = 0;
        for gap in [1, 1, 1, 40, 40, 90, 130, 200] {
            for _ in 0..gap {
                let id = live.lock().unwrap().reserved(&chain, &one).unwrap();
                live.settled(&id, &one).unwrap();
                calls += 1;
                let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
                if files.last() != Some(&ino) {
                    reused |= files.contains(&ino);
                    files.push(ino);
                }
            }
            let seen = follower.lock().unwrap().elsewhere().clone();
            assert_eq!(tool_calls(&seen, "p"), calls as f64, "{calls}: {seen:?}");
            assert_eq!(tool_calls(&seen, "t"), calls as f64, "{calls}: {seen:?}");
            assert_eq!(in_flight(&seen, "t"), 1.0, "{calls}: {seen:?}");
        }
        assert!(files.len() > 5, "rewritten {} times", files.len() - 1);
        live.settled(&open, &one).unwrap();
        let seen = follower.lock().unwrap().elsewhere().clone();
        assert_eq!(tool_calls(&seen, "t"), calls as f64 + 1.0, "{seen:?}");
        assert!(seen.in_flight.is_empty(), "{seen:?}");
        let fresh = store.spend_journal("fresh").unwrap();
        assert_eq!(fresh.lock().unwrap().elsewhere(), &seen);
        // Not asserted (it is the filesystem's choice), but what this test is for on ext4.
        eprintln!(
            "generations {}, an inode number reused: {reused}",
            files.len()
        );
    }

    #[test]
    fn a_rewrite_keeps_what_the_journal_means_and_a_gone_writers_leftover_is_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home")).with_spend_rewrite_bytes(1024);
        let live = store.spend_journal("gateway").unwrap();
        let open = live_history(&live, 40);
        let path = store.layout().spend().join(&live.name);
        let (lines, _) = fold_lines(&std::fs::read(&path).unwrap()).unwrap();
        let mut meaning = Meaning::default();
        for line in lines.iter().cloned() {
            meaning.fold(line);
        }
        assert_eq!(meaning.open.keys().collect::<Vec<_>>(), vec![&open]);
        assert_eq!(meaning.settled["t"][&BudgetKind::ToolCalls], 40.0);
        assert!(
            lines.len() < 20,
            "rewritten: {} lines for 41 calls",
            lines.len()
        );
        // A rewrite a crash cut short (before its rename) leaves a temporary file: never read,
        // removed once its writer is gone.
        let spend = store.layout().spend();
        let gone = "gateway-3000400-1.jsonl";
        std::fs::copy(&path, spend.join(gone)).unwrap();
        let tmp = spend.join(format!(".{gone}.tmp-0a0b0c"));
        std::fs::write(&tmp, b"{\"phase\":\"reser").unwrap();
        let mine = spend.join(format!(".{}.tmp-0d0e0f", live.name));
        std::fs::write(&mine, b"").unwrap();
        let seen = store
            .spend_journal("fresh")
            .unwrap()
            .lock()
            .unwrap()
            .elsewhere()
            .clone();
        assert_eq!(tool_calls(&seen, "t"), 2.0 * 40.0 + 2.0, "{seen:?}");
        let report = store.compact_spend_journals(crate::ops_archive::GoneJournals::Archive);
        assert_eq!(report.compacted, 1, "{report:?}");
        assert!(report.errors.is_empty(), "{report:?}");
        assert!(!tmp.exists(), "a gone writer's leftover is removed");
        assert!(mine.exists(), "a live writer's is its own");
        let seen = store
            .spend_journal("fresh")
            .unwrap()
            .lock()
            .unwrap()
            .elsewhere()
            .clone();
        assert_eq!(tool_calls(&seen, "t"), 2.0 * 40.0 + 2.0, "{seen:?}");
    }
}
