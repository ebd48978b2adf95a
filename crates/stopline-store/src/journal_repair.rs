//! Torn lines in the middle of a journal (docs/reference.md §5): found for `status`, cut out by the
//! owner's repair. The journals are the ops and spend journals and the minted registry
//! (`keys/minted.jsonl`, whose bad line otherwise makes `token list` and `token revoke` refuse).
//!
//! Every append lands whole or not at all (`fs.rs`), so a torn line can only be a crash's
//! remnant at the very end of a journal — or, in a home written by an older stopline, a failed
//! append that the next record was glued onto. Such a line in the middle is a fault: `status`
//! names it, the gates stay closed to what it could concern (a torn ops journal is a registry
//! error, which blocks every target; a torn spend journal fails every spend fold), and
//! `stopline recover repair` rewrites the journal without it. The repair keeps the old bytes
//! under `recovery-evidence/` first, keeps every complete record — including one glued after a
//! torn prefix on the same line, found by parsing from each `{` of the line — and never touches
//! a journal whose writer still runs (it appends to it; stop it first). A prepared record it
//! recovers has no outcome in a dead writer's journal, so its operation stays in doubt until
//! the owner reconciles it.

use crate::error::{IoContext, StoreError};
use crate::Store;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io;
use std::path::PathBuf;
use stopline_core::ops::OpLine;

/// A journal with torn lines before its end.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TornJournal {
    /// Its path in the home, e.g. `ops/gateway-12-345.jsonl`.
    pub file: String,
    /// The byte offsets where its torn lines start.
    pub torn_at: Vec<u64>,
}

/// What the repair did to one journal (a field of the WAL's `repair_applied`).
pub use stopline_core::wal_record::JournalRepair;

/// Which journal family a file belongs to: how its lines parse.
#[derive(Clone, Copy)]
enum Family {
    Ops,
    Spend,
    /// `keys/minted.jsonl`, the registry of minted tokens (`tokens.rs`): appended under its own
    /// lock, which the repair takes.
    Minted,
}

impl Family {
    fn parses(self, line: &[u8]) -> bool {
        match self {
            Family::Ops => parses::<OpLine>(line),
            Family::Spend => parses::<crate::spend::SpendLine>(line),
            Family::Minted => parses::<stopline_core::minted::MintedToken>(line),
        }
    }
}

fn parses<T: DeserializeOwned>(line: &[u8]) -> bool {
    serde_json::from_slice::<T>(line).is_ok()
}

/// A journal's bytes split into its kept lines. `torn` counts complete lines that do not parse,
/// `recovered` those of them that end in a whole record (kept), `torn_at` where they start.
struct Cut {
    kept: Vec<u8>,
    torn_at: Vec<u64>,
    recovered: usize,
}

fn cut(family: Family, bytes: &[u8]) -> Cut {
    let complete = bytes
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |end| end + 1);
    let mut out = Cut {
        kept: Vec::with_capacity(complete),
        torn_at: Vec::new(),
        recovered: 0,
    };
    let mut at = 0usize;
    for line in bytes[..complete].split_inclusive(|&b| b == b'\n') {
        let body = &line[..line.len() - 1];
        if body.is_empty() || family.parses(body) {
            out.kept.extend_from_slice(line);
        } else {
            out.torn_at.push(at as u64);
            // A record appended onto a torn one: the first `{` from which the rest parses.
            let glued = (1..body.len())
                .filter(|&i| body[i] == b'{')
                .find(|&i| family.parses(&body[i..]));
            if let Some(start) = glued {
                out.kept.extend_from_slice(&line[start..]);
                out.recovered += 1;
            }
        }
        at += line.len();
    }
    out
}

impl Store {
    /// Every ops and spend journal of the home, and the minted registry, with its family.
    fn journal_files(&self) -> Vec<(String, PathBuf, Family)> {
        let mut files = Vec::new();
        for (dir, prefix, family) in [
            (self.layout.ops(), "ops", Family::Ops),
            (self.layout.spend(), "spend", Family::Spend),
        ] {
            let Ok(names) = self.fs.read_dir(&dir) else {
                continue;
            };
            for name in names.into_iter().filter(|n| n.ends_with(".jsonl")) {
                files.push((format!("{prefix}/{name}"), dir.join(&name), family));
            }
        }
        let minted = self.layout.minted();
        if self.fs.exists(&minted).unwrap_or(false) {
            files.push(("keys/minted.jsonl".into(), minted, Family::Minted));
        }
        files
    }

    /// Journals with a torn line before their end (the fault `status` reports). A journal that
    /// cannot be read is not reported here (its reader reports it).
    pub fn torn_journals(&self) -> Vec<TornJournal> {
        let mut torn = Vec::new();
        for (file, path, family) in self.journal_files() {
            let Ok(bytes) = self.fs.read(&path) else {
                continue;
            };
            let found = cut(family, &bytes);
            if !found.torn_at.is_empty() {
                torn.push(TornJournal {
                    file,
                    torn_at: found.torn_at,
                });
            }
        }
        torn
    }

    /// Cut the torn lines out of every ops and spend journal whose writer is gone, and out of the
    /// minted registry (under its lock) (the owner's
    /// repair; the caller checked the console). Returns what was repaired and the journals left
    /// alone because their writer still runs.
    pub(crate) fn repair_journals(&self) -> Result<(Vec<JournalRepair>, Vec<String>), StoreError> {
        let mut repaired = Vec::new();
        let mut live = Vec::new();
        let spend_lock = self.layout.spend().join(".lock");
        // Bounded, as every verb's lock: a gateway frozen while it holds the spend lock costs
        // the repair this much, then an error, never a hang.
        let bound = Some(std::time::Duration::from_secs(5));
        let _spend = match self.fs.lock(&spend_lock, true, false, bound) {
            Ok(guard) => Some(guard),
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            Err(error) => return Err(error).context(|| "locking spend/.lock".to_string()),
        };
        for (file, path, family) in self.journal_files() {
            // The registry's appenders hold its lock: a mint waits for the rewrite.
            let _minted = match family {
                Family::Minted => Some(self.lock_log_exclusive(&path)?),
                Family::Ops | Family::Spend => None,
            };
            let bytes = self
                .fs
                .read(&path)
                .context(|| format!("reading {}", path.display()))?;
            let found = cut(family, &bytes);
            if found.torn_at.is_empty() {
                continue;
            }
            let writer = file
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .trim_end_matches(".jsonl");
            if crate::ops::writer_alive_with(writer, |pid| self.env.process_start_time(pid)) {
                live.push(file);
                continue;
            }
            let evidence = self.keep_recovery_evidence(&file.replace('/', "-"), &bytes)?;
            self.replace_atomic(&path, &found.kept, "repair.journal")?;
            if let Family::Ops = family {
                // Its open-set snapshot anchors offsets of the old bytes.
                let snapshot = self
                    .layout
                    .ops()
                    .join(format!("{writer}{}", crate::ops_snapshot::SNAPSHOT_SUFFIX));
                match self.fs.remove_file(&snapshot, "repair.journal.snapshot") {
                    Ok(()) => {}
                    Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                    Err(error) => {
                        return Err(error).context(|| format!("removing {}", snapshot.display()))
                    }
                }
            }
            tracing::warn!(
                file,
                torn = found.torn_at.len(),
                recovered = found.recovered,
                "cut torn lines out of a journal"
            );
            repaired.push(JournalRepair {
                file,
                torn_lines: found.torn_at.len(),
                recovered_records: found.recovered,
                removed_bytes: (bytes.len() - found.kept.len()) as u64,
                evidence,
            });
        }
        Ok((repaired, live))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(id: &str) -> Vec<u8> {
        let line = OpLine::new(id, stopline_core::ops::Phase::Prepared, "t".into(), 1);
        serde_json::to_vec(&line).unwrap()
    }

    #[test]
    fn a_record_glued_onto_a_torn_one_is_kept_and_the_torn_prefix_cut() {
        let (a, b, c) = (op("op_a"), op("op_b"), op("op_c"));
        let mut bytes = a.clone();
        bytes.push(b'\n');
        bytes.extend_from_slice(&b[..b.len() / 2]);
        bytes.extend_from_slice(&c);
        bytes.push(b'\n');
        bytes.extend_from_slice(b"{\"op\":");
        let found = cut(Family::Ops, &bytes);
        assert_eq!(found.torn_at, vec![a.len() as u64 + 1]);
        assert_eq!(found.recovered, 1);
        let mut want = a;
        want.push(b'\n');
        want.extend_from_slice(&c);
        want.push(b'\n');
        assert_eq!(found.kept, want);
    }

    #[test]
    fn a_torn_last_line_alone_is_no_fault() {
        let mut bytes = op("op_a");
        bytes.push(b'\n');
        bytes.extend_from_slice(b"{\"op\":\"op_b\",\"pha");
        assert!(cut(Family::Ops, &bytes).torn_at.is_empty());
    }
}
