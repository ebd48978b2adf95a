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
//! folded into `spend/settled.json` and leave `spend/` ([`compact`]): a look reads
//! that small snapshot (only when it changed) and the journals still listed, so what it costs
//! depends on the live writers, not on how many gateways the home has ever run. Losing a `settled`
//! line in a crash therefore only over-counts. A torn last line is a remnant (a `reserved` that
//! was never fsynced was never dispatched on) and is left for later; a broken line anywhere else
//! is corruption and fails closed.

pub mod compact;
mod format;
mod look;
mod rewrite;
#[cfg(test)]
mod tests;

pub use format::SpendLine;
pub(crate) use format::{add, fold_lines, Meaning};
pub use look::Elsewhere;
use look::Follow;

use crate::error::{IoContext, StoreError};
use crate::fs::LockGuard;
use crate::Store;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use stopline_core::budget::Budgets;

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

/// The spending journals of one control directory ([`Store::spend`]): a writer's own journal,
/// the compacted snapshot `spend/settled.json`, and the compaction of gone writers' journals.
#[derive(Debug, Clone, Copy)]
pub struct Spend<'a> {
    store: &'a Store,
}

impl Store {
    /// The spending journals of this control directory.
    pub fn spend(&self) -> Spend<'_> {
        Spend { store: self }
    }
}

impl Spend<'_> {
    /// Open this process's spending journal, labelled `label` (e.g. `gateway`).
    pub fn journal(&self, label: &str) -> Result<SpendJournal, StoreError> {
        self.store.ensure_dirs(&[&self.store.layout.spend()])?;
        let pid = self.store.env.pid();
        let start = self.store.env.process_start_time(pid).unwrap_or(0);
        Ok(SpendJournal {
            store: self.store.clone(),
            name: format!("{label}-{pid}-{start}.jsonl"),
            others: Arc::new(Mutex::new(Follow {
                compact_at: self.store.spend_compact_after,
                ..Follow::default()
            })),
            entry_durable: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            own: Arc::new(Own {
                appends: RwLock::new(()),
                len: AtomicU64::new(UNKNOWN),
                rewrite_at: AtomicU64::new(self.store.spend_rewrite_bytes),
            }),
        })
    }
}
