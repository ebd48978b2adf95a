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

/// The token keys of one control directory ([`Store::keys`]): the signing seed and the
/// issuance high-water mark.
#[derive(Debug, Clone, Copy)]
pub struct Keys<'a> {
    store: &'a Store,
}

impl Store {
    /// The token keys of this control directory.
    pub fn keys(&self) -> Keys<'_> {
        Keys { store: self }
    }
}

impl Keys<'_> {
    /// The 32-byte signing seed, created on first use.
    pub fn signing_seed(&self) -> Result<[u8; 32], StoreError> {
        let dir = self.store.layout.keys();
        let path = dir.join("signing.key");
        if let Some(bytes) = self.store.read_optional(&path)? {
            return parse_seed(&bytes);
        }
        // A gate verifying a token must never create a home (and a fresh key no token was signed
        // with): a missing home is `control_home_missing`. Writers make the home first.
        if !self
            .store
            .fs
            .exists(self.store.layout.home())
            .context(|| "looking at the control directory".into())?
        {
            return Err(StoreError::refused(
                stopline_core::RefusalCode::ControlHomeMissing,
                format!(
                    "the control directory {} does not exist (run `stopline init`)",
                    self.store.layout.home().display()
                ),
            ));
        }
        self.store.ensure_home()?;
        self.store.ensure_dirs(&[&dir])?;
        // The key appears under its name only whole: written and fsynced under a name of this
        // process's own, then hard-linked to `signing.key`, which fails when another process's
        // key got there first (then that one is the key, and this seed is dropped). Written in
        // place, a second process starting on a fresh home read the first one's key while it
        // was still empty and refused `control_state_corrupt`, and a crash between the create
        // and the write left an empty key that refused every token after it.
        let seed_hex = self.store.env.random_hex(32);
        let (_, tmp) = self.store.temporary_beside(&path);
        if let Err(error) = self
            .store
            .fs
            .write_new(&tmp, seed_hex.as_bytes(), "keys.create")
        {
            let _ = self.store.fs.remove_file(&tmp, "keys.create.cleanup");
            return Err(error).context(|| "creating the signing key".into());
        }
        let linked = self.store.fs.hard_link(&tmp, &path, "keys.link");
        // The temporary name is only this process's: a failed removal leaves a stray file in
        // keys/ that nothing reads.
        let _ = self.store.fs.remove_file(&tmp, "keys.create.cleanup");
        match linked {
            Ok(()) => {
                self.store
                    .fs
                    .sync_dir(&dir, "keys.dirsync")
                    .context(|| "syncing keys/".into())?;
            }
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error).context(|| "linking the signing key".into()),
        }
        let bytes = self
            .store
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
        self.store.ensure_dirs(&[&self.store.layout.keys()])?;
        self.store.replace_atomic(
            &self.store.layout.keys().join("issued-epoch"),
            epoch.to_string().as_bytes(),
            "keys.issued",
        )
    }

    /// The newest epoch any token was minted under (0 when none).
    pub fn highest_issued_epoch(&self) -> Result<u64, StoreError> {
        Ok(self
            .store
            .read_optional(&self.store.layout.keys().join("issued-epoch"))?
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0))
    }
}
