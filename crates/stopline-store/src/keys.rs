//! The token signing key under `keys/`, and the issuance high-water mark.
//!
//! This file stores bytes only; `stopline-token` turns them into keys. The signing seed is
//! created once (written whole under a temporary name, then hard-linked into place, 0600) and
//! never rewritten. `issued-epoch` records the newest epoch
//! any token was minted under, so the owner's repair can refuse to rebuild an epoch snapshot
//! older than a live authority.

use crate::error::{IoContext, StoreError};
use crate::Store;
use std::io;

impl Store {
    /// The 32-byte signing seed, created on first use.
    pub fn signing_seed(&self) -> Result<[u8; 32], StoreError> {
        let dir = self.layout.keys();
        let path = dir.join("signing.key");
        if let Some(bytes) = self.read_optional(&path)? {
            return parse_seed(&bytes);
        }
        // A gate verifying a token must never create a home (and a fresh key no token was signed
        // with): a missing home is `control_home_missing`. Writers make the home first.
        if !self
            .fs
            .exists(self.layout.home())
            .context(|| "looking at the control directory".into())?
        {
            return Err(StoreError::refused(
                stopline_core::RefusalCode::ControlHomeMissing,
                format!(
                    "the control directory {} does not exist (run `stopline init`)",
                    self.layout.home().display()
                ),
            ));
        }
        self.ensure_home()?;
        self.ensure_dirs(&[&dir])?;
        // The key appears under its name only whole: written and fsynced under a name of this
        // process's own, then hard-linked to `signing.key`, which fails when another process's
        // key got there first (then that one is the key, and this seed is dropped). Written in
        // place, a second process starting on a fresh home read the first one's key while it
        // was still empty and refused `control_state_corrupt`, and a crash between the create
        // and the write left an empty key that refused every token after it.
        let seed_hex = self.env.random_hex(32);
        let (_, tmp) = self.temporary_beside(&path);
        if let Err(error) = self.fs.write_new(&tmp, seed_hex.as_bytes(), "keys.create") {
            let _ = self.fs.remove_file(&tmp, "keys.create.cleanup");
            return Err(error).context(|| "creating the signing key".into());
        }
        let linked = self.fs.hard_link(&tmp, &path, "keys.link");
        // The temporary name is only this process's: a failed removal leaves a stray file in
        // keys/ that nothing reads.
        let _ = self.fs.remove_file(&tmp, "keys.create.cleanup");
        match linked {
            Ok(()) => {
                self.fs
                    .sync_dir(&dir, "keys.dirsync")
                    .context(|| "syncing keys/".into())?;
            }
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error).context(|| "linking the signing key".into()),
        }
        let bytes = self
            .fs
            .read(&path)
            .context(|| "reading the signing key".into())?;
        parse_seed(&bytes)
    }

    /// Record that a token was minted under `epoch` (keeps the maximum).
    pub fn note_issued_epoch(&self, epoch: u64) -> Result<(), StoreError> {
        if epoch <= self.highest_issued_epoch()? {
            return Ok(());
        }
        self.ensure_dirs(&[&self.layout.keys()])?;
        self.replace_atomic(
            &self.layout.keys().join("issued-epoch"),
            epoch.to_string().as_bytes(),
            "keys.issued",
        )
    }

    /// The newest epoch any token was minted under (0 when none).
    pub fn highest_issued_epoch(&self) -> Result<u64, StoreError> {
        Ok(self
            .read_optional(&self.layout.keys().join("issued-epoch"))?
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0))
    }
}

fn parse_seed(bytes: &[u8]) -> Result<[u8; 32], StoreError> {
    let text = std::str::from_utf8(bytes).unwrap_or_default().trim();
    let decoded = hex::decode(text).ok().filter(|d| d.len() == 32);
    decoded.and_then(|d| d.try_into().ok()).ok_or_else(|| {
        StoreError::corrupt(
            stopline_core::RefusalCode::ControlStateCorrupt,
            "keys/signing.key is corrupt",
        )
    })
}
