//! Pruning of old evidence segments (`[retention] evidence_keep_segments`) and
//! `evidence/pruned.json`, which says where the kept segments start.

use super::segments::first_prev;
use super::{corrupt, Evidence};
use crate::error::{IoContext, StoreError};
use crate::Store;
use serde_json::{json, Value};
use std::io;

/// The schema of `evidence/pruned.json`.
pub const PRUNED_SCHEMA: &str = "stopline.evidence-pruned.v1";

impl Store {
    /// `[retention] evidence_keep_segments`: remove every segment but the newest `keep`, under
    /// the exclusive lock. First `evidence/pruned.json` says where the kept segments start — the
    /// record before the oldest kept one and its hash (that segment's first `prev`) —, replaced
    /// atomically (`evidence.prune.mark`); only then are the older segments removed
    /// (`evidence.prune.remove`, `.dirsync`). A crash between leaves segments the marker already
    /// covers, which readers skip and the next pruning removes.
    pub(super) fn prune_evidence(&self, keep: u64) -> Result<(), StoreError> {
        let segments = self.evidence_segments()?;
        let keep = usize::try_from(keep).unwrap_or(usize::MAX);
        if segments.len() <= keep {
            return Ok(());
        }
        let (cut, oldest) = segments.split_at(segments.len() - keep);
        let (first, name) = &oldest[0];
        let bytes = self
            .read_optional(&self.layout.evidence().join(name))?
            .unwrap_or_default();
        let hash =
            first_prev(&bytes, *first).map_err(|fault| corrupt(format!("{name}: {fault}")))?;
        let mark = || {
            let marker = json!({"schema": PRUNED_SCHEMA, "through": first - 1, "hash": hash});
            self.replace_atomic(
                &self.layout.evidence_pruned(),
                marker.to_string().as_bytes(),
                "evidence.prune.mark",
            )
        };
        #[cfg(feature = "planted-bugs")]
        let mark_first = self.planted != crate::planted::PlantedBug::PruneBeforeMark;
        #[cfg(not(feature = "planted-bugs"))]
        let mark_first = true;
        if mark_first {
            mark()?;
        }
        let dir = self.layout.evidence();
        for (_, name) in cut {
            let path = dir.join(name);
            match self.fs.remove_file(&path, "evidence.prune.remove") {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(error).context(|| format!("removing {}", path.display())),
            }
        }
        self.fs
            .sync_dir(&dir, "evidence.prune.dirsync")
            .context(|| format!("syncing {}", dir.display()))?;
        if !mark_first {
            mark()?;
        }
        Ok(())
    }
}

impl Evidence<'_> {
    /// Where the kept segments start when older ones were pruned: the `seq` of the last pruned
    /// record and its hash. `Ok(None)` when nothing was pruned; `Err` with why when
    /// `evidence/pruned.json` exists but cannot be read or parsed.
    pub fn pruned(&self) -> Result<Option<(u64, String)>, String> {
        let bytes = match self
            .store
            .read_optional(&self.store.layout.evidence_pruned())
        {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Ok(None),
            Err(error) => return Err(error.to_string()),
        };
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("evidence/pruned.json is not JSON: {e}"))?;
        match (
            value["schema"].as_str(),
            value["through"].as_u64(),
            value["hash"].as_str(),
        ) {
            (Some(PRUNED_SCHEMA), Some(through), Some(hash)) if through > 0 => {
                Ok(Some((through, hash.to_string())))
            }
            _ => Err("evidence/pruned.json has no schema, through and hash".into()),
        }
    }
}
