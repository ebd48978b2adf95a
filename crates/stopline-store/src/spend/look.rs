//! A look at the other journals before a reservation: what each added since the last look,
//! folded incrementally (a replaced file from its start), plus `spend/settled.json`.

use super::{add, fold_lines, Meaning, SpendJournal};
use crate::error::{IoContext, StoreError};
use std::collections::BTreeMap;
use std::sync::Arc;
use stopline_core::budget::Budgets;
use stopline_core::RefusalCode;

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
pub(super) struct Folded {
    /// The file folded (`None`: not known, or this filesystem cannot tell).
    file: Option<crate::fs::FileId>,
    /// Bytes of complete lines already folded.
    offset: usize,
    /// Where folding started: the length `spend/settled.json` covers of it (`None`: from 0).
    covered_from: Option<u64>,
    /// What its lines folded so far mean.
    meaning: Meaning,
}

/// What a journal's looks keep between them: every other journal as folded so far, and the
/// compacted spending of `spend/settled.json` with the identity of the file it came from.
#[derive(Debug, Default)]
pub(super) struct Follow {
    pub(super) journals: BTreeMap<String, Folded>,
    pub(super) settled: Option<(Option<crate::fs::FileId>, Arc<LoadedSettled>)>,
    /// Uncovered journals of others that make a look compact the gone ones itself.
    pub(super) compact_at: usize,
}

/// `spend/settled.json` as a look uses it.
#[derive(Debug)]
pub(super) struct LoadedSettled {
    /// Spent per account (settled use and reservations in doubt).
    totals: BTreeMap<String, Budgets>,
    /// Journals it covers, with the bytes folded of each.
    covered: BTreeMap<String, u64>,
}

impl SpendJournal {
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
        let Some((settled, id)) = self.store.spend().read_settled()? else {
            return Ok(None);
        };
        let loaded = Arc::new(LoadedSettled {
            totals: settled.totals(),
            covered: settled.covered,
        });
        follow.settled = Some((id, loaded.clone()));
        Ok(Some(loaded))
    }

    pub(super) fn fold_others(&self) -> Result<Elsewhere, StoreError> {
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
}
