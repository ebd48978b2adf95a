//! What every verb needs: the store, the configuration, the control plane that keeps latches,
//! epochs, the WAL and state (the local directory, or a distributed backend), and the token keys
//! derived from the store's signing seed.
//!
//! Operation journals, runs, evidence and the signing seed are always this host's (`store`);
//! latches, epochs, the WAL and state go through `plane`, so one verb works against either
//! backend. With a distributed plane, tokens are verified with the key the plane publishes to
//! every host, and only the host whose key that is may mint.

use crate::config::Config;
use std::sync::Arc;
use stopline_core::{Refusal, RefusalCode};
use stopline_store::{ControlPlane, Store};
use stopline_token::{SigningKey, VerifyingKey};

/// The control plane as one process sees it.
#[derive(Debug, Clone)]
pub struct Context {
    /// This host's durable state (operations, runs, evidence, keys; and, locally, latches).
    pub store: Store,
    /// The configuration (shared: it is read-only once loaded, and a context is cloned into
    /// every thread and surface that needs one).
    pub config: Arc<Config>,
    /// Where latches, epochs, the WAL and state are kept (the local `store` unless
    /// `--control` names a distributed backend).
    pub plane: Arc<dyn ControlPlane>,
}

impl Context {
    /// A context over `store` with `config`, the store itself as the control plane.
    pub fn new(store: Store, config: Config) -> Context {
        let store =
            store.with_evidence_segment_records(config.retention.evidence_segment_records.get());
        let store = store.with_evidence_keep_segments(
            config
                .retention
                .evidence_keep_segments
                .map(std::num::NonZeroU64::get),
        );
        let store = store.with_spend_rewrite_bytes(config.retention.spend_journal_bytes.get());
        let store = store.with_max_ttl_s(config.tokens.max_ttl_s.get());
        let plane: Arc<dyn ControlPlane> = Arc::new(store.clone());
        Context {
            store,
            config: Arc::new(config),
            plane,
        }
    }

    /// This context with `plane` keeping latches, epochs, the WAL and state.
    pub fn with_plane(mut self, plane: Arc<dyn ControlPlane>) -> Context {
        self.plane = plane;
        self
    }

    /// Now, Unix seconds, from the store's clock.
    pub fn now_s(&self) -> i64 {
        self.store.now_ms().div_euclid(1000)
    }

    /// This host's token signing key (created on first use).
    pub fn signing_key(&self) -> Result<SigningKey, Refusal> {
        let seed = self
            .store
            .keys()
            .signing_seed()
            .map_err(|e| e.to_refusal())?;
        stopline_token::keys::signing_key_from_seed(&seed)
            .map_err(|e| Refusal::new(RefusalCode::ControlStateCorrupt, e.to_string()))
    }

    /// The key to mint with: this host's, once the plane publishes it as the key every host
    /// verifies with. A host whose key is not the published one refuses to mint, because no
    /// other host would accept what it signed.
    pub fn issuing_key(&self) -> Result<SigningKey, Refusal> {
        let key = self.signing_key()?;
        let public = key.verifying_key().to_bytes();
        let standing = self.plane.publish_key(public).map_err(|e| e.to_refusal())?;
        if standing != public {
            return Err(Refusal::new(
                RefusalCode::TokenInvalid,
                "this host does not hold the control plane's signing key: another host published keys/verify.pub, and tokens are minted there",
            ));
        }
        Ok(key)
    }

    /// The key tokens are verified with: the plane's published key, else this host's.
    pub fn verifying_key(&self) -> Result<VerifyingKey, Refusal> {
        match self.plane.published_key().map_err(|e| e.to_refusal())? {
            Some(bytes) => stopline_token::keys::verifying_key_from_bytes(&bytes)
                .map_err(|e| Refusal::new(RefusalCode::ControlStateCorrupt, e.to_string())),
            None => Ok(self.signing_key()?.verifying_key()),
        }
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
