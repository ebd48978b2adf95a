//! Where the control directory is, and `stopline init`, which makes it whole and does nothing
//! else (docs/reference.md §5).

use crate::receipts::InitReceipt;
use std::path::PathBuf;
use stopline_core::Refusal;
use stopline_store::Store;

/// The control directory when `--home` / `STOPLINE_HOME` name none:
/// `$XDG_STATE_HOME/stopline`, else `$HOME/.local/state/stopline` (`/root` without a `HOME`).
pub fn default_home() -> PathBuf {
    if let Some(state) = std::env::var_os("XDG_STATE_HOME").filter(|s| !s.is_empty()) {
        return PathBuf::from(state).join("stopline");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".local/state/stopline")
}

/// `stopline init`: create the home whole (0700, `latches/`, `latches.staging/`, the reserve).
pub fn init(store: &Store) -> Result<InitReceipt, Refusal> {
    let reserve = store.ensure_home().map_err(|e| e.to_refusal())?;
    Ok(InitReceipt {
        home: store.layout().home().display().to_string(),
        created: true,
        reserve,
        verify_key_sha256: None,
    })
}

/// `init --control …`: the home made whole, then the plane's verification key read and pinned
/// on this host (a key other than one already pinned is refused, `control_state_corrupt`).
pub fn init_on_plane(ctx: &crate::Context) -> Result<InitReceipt, Refusal> {
    let mut receipt = init(&ctx.store)?;
    receipt.verify_key_sha256 = ctx.plane.pin_key().map_err(|e| e.to_refusal())?;
    Ok(receipt)
}
