//! The registry of minted tokens (`keys/minted.jsonl`) and the revocation of one token.
//!
//! The registry is a JSON-lines file appended under its own exclusive lock and fsynced before the
//! mint answers, so a token whose text was handed out is listed after any crash. It is bounded:
//! an append that finds as many expired records as live ones (and at least [`FOLD_AT`]) rewrites
//! the file with the live ones alone (atomically: a crash leaves the old file or the new one).
//!
//! A revocation is an epoch advance of the scope `token:<jti>` (`+delegates` with
//! `--with-delegates`), written under the WAL's rules like an emergency's (`epoch.rs`): the WAL
//! record fsynced, then `epoch.json` replaced and read back, before the command answers. So every
//! gate judges it as it judges any revision, and the fold bounds it as it bounds any revision.

use crate::error::{IoContext, StoreError};
use crate::Store;
use stopline_core::minted::MintedToken;
use stopline_core::wal_record::AdvanceCause;
use stopline_core::{EpochMap, RefusalCode, Scope};

/// The fewest expired records a rewrite drops: fewer are left for a later append.
pub const FOLD_AT: usize = 64;

impl Store {
    /// Record a minted token, fsynced before this returns (dropping expired records when enough
    /// have gathered).
    pub fn record_minted(&self, token: &MintedToken) -> Result<(), StoreError> {
        let path = self.layout.minted();
        self.ensure_dirs(&[&self.layout.keys()])?;
        let _guard = self.lock_log_exclusive(&path)?;
        let mut line = serde_json::to_vec(token).expect("a minted record always serializes");
        line.push(b'\n');
        let now_s = self.now_ms().div_euclid(1000);
        let records = self.read_minted()?;
        let expired = records.iter().filter(|r| !r.is_live(now_s)).count();
        if expired >= FOLD_AT && expired >= records.len() - expired {
            let mut bytes = Vec::new();
            for record in records.iter().filter(|r| r.is_live(now_s)) {
                bytes.extend(serde_json::to_vec(record).expect("a minted record serializes"));
                bytes.push(b'\n');
            }
            bytes.extend(line);
            return self.replace_atomic(&path, &bytes, "minted.fold");
        }
        self.fs
            .append(&path, &line, true, "minted.append")
            .context(|| format!("appending to {}", path.display()))
    }

    /// Every record of the registry, expired ones included, oldest first. A line that does not
    /// parse (a torn last line after a crash: the mint it belonged to never answered) is skipped.
    pub fn read_minted(&self) -> Result<Vec<MintedToken>, StoreError> {
        let bytes = self
            .read_optional(&self.layout.minted())?
            .unwrap_or_default();
        Ok(bytes
            .split(|&b| b == b'\n')
            .filter(|line| !line.is_empty())
            .filter_map(|line| serde_json::from_slice(line).ok())
            .collect())
    }

    /// The records of the tokens alive now, oldest first.
    pub fn live_minted(&self) -> Result<Vec<MintedToken>, StoreError> {
        let now_s = self.now_ms().div_euclid(1000);
        let mut records = self.read_minted()?;
        records.retain(|r| r.is_live(now_s));
        Ok(records)
    }

    /// Revoke the token `scope` names (a [`Scope::Token`]): advance its revision under the WAL's
    /// exclusive lock, the WAL record fsynced and `epoch.json` replaced and read back before this
    /// returns. Returns the map after the advance.
    pub fn revoke_token(
        &self,
        scope: &Scope,
        by: &str,
        reason: &str,
    ) -> Result<EpochMap, StoreError> {
        if !matches!(scope, Scope::Token { .. }) {
            return Err(StoreError::refused(
                RefusalCode::BadRequest,
                format!("{scope} is not a token"),
            ));
        }
        #[cfg(feature = "planted-bugs")]
        let planted_scope;
        #[cfg(feature = "planted-bugs")]
        let scope = match scope {
            Scope::Token { jti, .. }
                if self.planted == crate::planted::PlantedBug::RevokeForgetsDelegates =>
            {
                planted_scope = Scope::Token {
                    jti: jti.clone(),
                    delegates: false,
                };
                &planted_scope
            }
            _ => scope,
        };
        let wal = self.layout.wal();
        let _guard = self.lock_log_exclusive(&wal)?;
        let log = self.read_log(&wal, RefusalCode::ControlWalCorrupt)?;
        let (_, epoch) = self.advance_epoch_locked(
            &log,
            scope,
            AdvanceCause::Revoke,
            by,
            reason,
            Vec::new(),
            "revoke.epoch",
        )?;
        Ok(epoch)
    }
}
