//! The registry of minted tokens (`keys/minted.jsonl`) and the revocation of one token.
//!
//! The registry is a JSON-lines file appended under its own exclusive lock and fsynced before the
//! mint answers, so a token whose text was handed out is listed after any crash. It is bounded:
//! an append that finds as many expired records as live ones (and at least [`FOLD_AT`]) rewrites
//! the file with the live ones alone (atomically: a crash leaves the old file or the new one).
//! It looks only when the file's size crosses a doubling of [`FOLD_CHECK_BYTES`], so a mint
//! costs O(1) amortised, not a read of every live record.
//!
//! Only its last line may be torn (a crash mid-append); a line before it that does not parse is
//! a fault: every reader refuses `control_state_corrupt`, no fold rewrites over it, and
//! `stopline recover repair` cuts it out, keeping the old bytes first (`journal_repair.rs`).
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

/// The registry is read whole at an append (to count its expired records) only when the append
/// carries the file's size past this many bytes, or twice as many, four times as many, and so
/// on: a mint costs an append, and the reads add up to a small multiple of what was appended.
pub const FOLD_CHECK_BYTES: u64 = 16 * 1024;

/// Which band of sizes `len` lies in: 0 below [`FOLD_CHECK_BYTES`], then one more for each
/// doubling.
fn size_band(len: u64) -> u32 {
    u64::BITS - (len / FOLD_CHECK_BYTES).leading_zeros()
}

/// Read the registry's bytes, oldest record first: every complete line must be a record; only
/// a last line without its newline may be torn, and is skipped (docs/reference.md §5,
/// "Revoking one token").
fn parse_registry(path: &std::path::Path, bytes: &[u8]) -> Result<Vec<MintedToken>, StoreError> {
    let complete = bytes
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |end| end + 1);
    let mut records = Vec::new();
    let mut at = 0usize;
    for line in bytes[..complete].split_inclusive(|&b| b == b'\n') {
        let body = &line[..line.len() - 1];
        if !body.is_empty() {
            let record = serde_json::from_slice(body).map_err(|error| {
                StoreError::corrupt(
                    RefusalCode::ControlStateCorrupt,
                    format!(
                        "{} has a line that is not a minted token's record at byte {at} ({error}); only a torn last line is a crash's remnant: the registry is not rewritten, and token list and token revoke refuse until `stopline recover repair` cuts it out",
                        path.display()
                    ),
                )
            })?;
            records.push(record);
        }
        at += line.len();
    }
    Ok(records)
}

impl Store {
    /// Record a minted token, fsynced before this returns (dropping expired records when enough
    /// have gathered).
    ///
    /// An append reads nothing of the registry but its size, except when it carries the file
    /// into its next size band (16 KiB, then each doubling) or the file's size cannot be told:
    /// then the whole registry is read, and rewritten without its expired records when at
    /// least [`FOLD_AT`] expired and they are no fewer than the live ones. A registry with a line that does not
    /// parse before its end is never rewritten: the record is appended after it. A torn last
    /// line is cut by the append itself (`fs.rs`) or left out of the rewrite.
    pub fn record_minted(&self, token: &MintedToken) -> Result<(), StoreError> {
        let path = self.layout.minted();
        self.ensure_dirs(&[&self.layout.keys()])?;
        let _guard = self.lock_log_exclusive(&path)?;
        let mut line = serde_json::to_vec(token).expect("a minted record always serializes");
        line.push(b'\n');
        let whole = match self.fs.identify(&path) {
            Ok(Some(id)) => size_band(id.len) != size_band(id.len + line.len() as u64),
            Ok(None) => true,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
            Err(error) => return Err(error).context(|| format!("reading {}", path.display())),
        };
        if whole {
            let bytes = self.read_optional(&path)?.unwrap_or_default();
            match parse_registry(&path, &bytes) {
                Ok(records) => {
                    let now_s = self.now_ms().div_euclid(1000);
                    let expired = records.iter().filter(|r| !r.is_live(now_s)).count();
                    if expired >= FOLD_AT && expired >= records.len() - expired {
                        let mut folded = Vec::new();
                        for record in records.iter().filter(|r| r.is_live(now_s)) {
                            folded.extend(
                                serde_json::to_vec(record).expect("a minted record serializes"),
                            );
                            folded.push(b'\n');
                        }
                        folded.extend(line);
                        return self.replace_atomic(&path, &folded, "minted.fold");
                    }
                }
                // Left for the owner's repair, which `token list` and `status` ask for.
                Err(error) => tracing::warn!(%error, "the minted registry is not folded"),
            }
        }
        self.fs
            .append(&path, &line, true, "minted.append")
            .context(|| format!("appending to {}", path.display()))
    }

    /// Every record of the registry, expired ones included, oldest first. A torn last line
    /// (a crash mid-append: the mint it belonged to never answered) is skipped; a line before
    /// it that does not parse is `control_state_corrupt`.
    pub fn read_minted(&self) -> Result<Vec<MintedToken>, StoreError> {
        let path = self.layout.minted();
        let bytes = self.read_optional(&path)?.unwrap_or_default();
        parse_registry(&path, &bytes)
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

#[cfg(test)]
mod tests {
    use super::*;
    use stopline_core::subject::Role;
    use stopline_core::Name;

    fn record(n: usize, exp: i64) -> MintedToken {
        MintedToken {
            jti: format!("{n:032x}"),
            parent: None,
            chain: vec![Name::parse("worker").unwrap()],
            run: None,
            labels: Vec::new(),
            role: Role::Agent,
            epoch: 0,
            iat: exp - 60,
            exp,
        }
    }

    fn line(record: &MintedToken) -> Vec<u8> {
        let mut line = serde_json::to_vec(record).unwrap();
        line.push(b'\n');
        line
    }

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"));
        store.ensure_home().unwrap();
        store.ensure_dirs(&[&store.layout.keys()]).unwrap();
        (dir, store)
    }

    fn now_s(store: &Store) -> i64 {
        store.now_ms().div_euclid(1000)
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_cut_by_the_next_mint() {
        let (_dir, store) = store();
        let live = now_s(&store) + 3600;
        let mut bytes = [line(&record(1, live)), line(&record(2, live))].concat();
        bytes.extend_from_slice(br#"{"jti":"0000000000000000000000000000"#);
        std::fs::write(store.layout.minted(), &bytes).unwrap();
        let listed: Vec<String> = store
            .read_minted()
            .unwrap()
            .into_iter()
            .map(|r| r.jti)
            .collect();
        assert_eq!(listed, [record(1, live).jti, record(2, live).jti]);
        store.record_minted(&record(3, live)).unwrap();
        assert_eq!(store.read_minted().unwrap().len(), 3);
        let after = std::fs::read(store.layout.minted()).unwrap();
        assert_eq!(
            after,
            [
                line(&record(1, live)),
                line(&record(2, live)),
                line(&record(3, live))
            ]
            .concat()
        );
    }

    #[test]
    fn a_bad_line_before_the_end_refuses_and_is_never_rewritten() {
        let (_dir, store) = store();
        let now = now_s(&store);
        // Enough expired records to fold, a bad line among them.
        let mut bytes = Vec::new();
        for n in 0..100 {
            bytes.extend(line(&record(n, now - 10)));
            if n == 50 {
                bytes.extend_from_slice(b"{\"jti\":\"not a record\"}\n");
            }
        }
        std::fs::write(store.layout.minted(), &bytes).unwrap();
        let refused = store.read_minted().unwrap_err().to_refusal();
        assert_eq!(refused.code, RefusalCode::ControlStateCorrupt);
        assert!(store.live_minted().is_err());
        // Mint until the file has doubled, past a band where an append reads the whole
        // registry: nothing is rewritten, each record is appended after the old bytes.
        let start = bytes.len();
        let mut n = 1000;
        while std::fs::read(store.layout.minted()).unwrap().len() < 2 * start.max(16 * 1024) {
            store.record_minted(&record(n, now + 3600)).unwrap();
            n += 1;
            let after = std::fs::read(store.layout.minted()).unwrap();
            assert_eq!(&after[..start], &bytes[..], "the registry was rewritten");
        }
        assert!(store.read_minted().is_err());
    }

    #[test]
    fn the_owners_repair_cuts_a_bad_line_out_of_the_registry_and_status_names_it() {
        let (_dir, store) = store();
        let live = now_s(&store) + 3600;
        let bytes = [
            line(&record(1, live)),
            b"garbage\n".to_vec(),
            line(&record(2, live)),
        ]
        .concat();
        std::fs::write(store.layout.minted(), &bytes).unwrap();
        let torn = store.torn_journals();
        assert_eq!(torn.len(), 1, "{torn:?}");
        assert_eq!(torn[0].file, "keys/minted.jsonl");
        let (repaired, _) = store.repair_journals().unwrap();
        assert_eq!(repaired.len(), 1);
        assert_eq!(repaired[0].torn_lines, 1);
        assert_eq!(store.read_minted().unwrap().len(), 2);
        assert!(store.torn_journals().is_empty());
    }

    #[test]
    fn expired_records_are_folded_away_when_the_size_crosses_a_band() {
        let (_dir, store) = store();
        let now = now_s(&store);
        let bytes: Vec<u8> = (0..100).flat_map(|n| line(&record(n, now - 10))).collect();
        std::fs::write(store.layout.minted(), &bytes).unwrap();
        let mut n = 1000;
        while store.read_minted().unwrap().iter().any(|r| !r.is_live(now)) {
            store.record_minted(&record(n, now + 3600)).unwrap();
            n += 1;
            assert!(n < 1000 + 200, "no fold after 200 mints");
        }
        // Every live record is kept, the last one minted included.
        assert_eq!(store.read_minted().unwrap().len(), n - 1000);
    }

    #[test]
    fn an_append_reads_the_whole_registry_only_when_its_size_crosses_a_band() {
        assert_eq!(size_band(0), 0);
        assert_eq!(size_band(FOLD_CHECK_BYTES - 1), 0);
        assert_eq!(size_band(FOLD_CHECK_BYTES), 1);
        assert_eq!(size_band(2 * FOLD_CHECK_BYTES - 1), 1);
        assert_eq!(size_band(2 * FOLD_CHECK_BYTES), 2);
        assert_eq!(size_band(4 * FOLD_CHECK_BYTES), 3);
    }
}
