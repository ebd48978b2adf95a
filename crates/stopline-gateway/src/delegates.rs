//! The delegated tokens this gateway minted through `/v1/delegate` and that have not expired,
//! counted per root of their delegation chain (docs/reference.md §6: a chain holds at most
//! [`MAX_LIVE_DELEGATES`] live delegated tokens), so an agent cannot mint sub-agents without end
//! and multiply every per-agent limit.
//!
//! Held in memory, per gateway: an agent mints sub-agents only here (`token delegate` is the
//! owner's CLI, which needs the signing key), every child lives at most as long as its parent,
//! and the limit is about fan-out, not control state, so a durable count would put a write on
//! every delegation for nothing a stop depends on. What it does not bound: a gateway that
//! restarts forgets what it minted, and each gateway of a distributed plane counts its own.

use std::collections::HashMap;
use std::sync::Mutex;
use stopline_core::refusal::MAX_LIVE_DELEGATES;
use stopline_core::{Refusal, RefusalCode};

/// Live delegated tokens, by chain root: each one's `exp` (unix seconds).
#[derive(Debug, Default)]
pub(crate) struct LiveDelegates {
    by_root: Mutex<HashMap<String, Vec<i64>>>,
}

impl LiveDelegates {
    /// Count a token of `root`'s chain expiring at `exp`, minted at `now_s`; refused
    /// `delegate_limit` (counting nothing) when the chain already holds the most it may.
    pub(crate) fn admit(&self, root: &str, exp: i64, now_s: i64) -> Result<(), Refusal> {
        let mut by_root = self.by_root.lock().unwrap_or_else(|e| e.into_inner());
        by_root.retain(|_, exps| {
            exps.retain(|e| *e > now_s);
            !exps.is_empty()
        });
        let live = by_root.entry(root.to_string()).or_default();
        if live.len() >= MAX_LIVE_DELEGATES {
            let next = live.iter().min().copied().unwrap_or(now_s);
            return Err(Refusal::new(
                RefusalCode::DelegateLimit,
                format!(
                    "the delegation chain of {root} already holds {} live delegated tokens (at most {MAX_LIVE_DELEGATES}); the next one expires at {}",
                    live.len(),
                    stopline_core::refusal::rfc3339_seconds(next)
                ),
            ));
        }
        live.push(exp);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_holds_at_most_the_limit_until_one_expires() {
        let live = LiveDelegates::default();
        for i in 0..MAX_LIVE_DELEGATES {
            live.admit("root", 100 + i as i64, 10).unwrap();
        }
        let refused = live.admit("root", 500, 10).unwrap_err();
        assert_eq!(refused.code, RefusalCode::DelegateLimit);
        // Another chain is not counted with it.
        live.admit("other", 500, 10).unwrap();
        // Once the first expires, one more fits.
        live.admit("root", 500, 100).unwrap();
        assert!(live.admit("root", 500, 100).is_err());
    }
}
