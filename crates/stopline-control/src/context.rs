//! What every verb needs: the store, the configuration, and the token keys derived from the
//! store's signing seed.

use crate::config::Config;
use stopline_core::{Refusal, RefusalCode};
use stopline_store::Store;
use stopline_token::{SigningKey, VerifyingKey};

/// The control plane as one process sees it.
#[derive(Debug, Clone)]
pub struct Context {
    /// The durable state.
    pub store: Store,
    /// The configuration.
    pub config: Config,
}

impl Context {
    /// A context over `store` with `config`.
    pub fn new(store: Store, config: Config) -> Context {
        Context { store, config }
    }

    /// Now, Unix seconds, from the store's clock.
    pub fn now_s(&self) -> i64 {
        self.store.now_ms().div_euclid(1000)
    }

    /// The token signing key (created on first use).
    pub fn signing_key(&self) -> Result<SigningKey, Refusal> {
        let seed = self.store.signing_seed().map_err(|e| e.to_refusal())?;
        stopline_token::keys::signing_key_from_seed(&seed)
            .map_err(|e| Refusal::new(RefusalCode::ControlStateCorrupt, e.to_string()))
    }

    /// The key tokens are verified with.
    pub fn verifying_key(&self) -> Result<VerifyingKey, Refusal> {
        Ok(self.signing_key()?.verifying_key())
    }

    /// True when `name` is a configured operator.
    pub fn is_operator(&self, name: &str) -> bool {
        self.config.operators.iter().any(|o| o == name)
    }

    /// True when `name` is a configured monitor.
    pub fn is_monitor(&self, name: &str) -> bool {
        self.config.monitors.iter().any(|m| m == name)
    }
}
