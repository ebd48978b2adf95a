//! Gateways on every host, seen from the engaging side: registrations under `servers/`,
//! acknowledgements under `acks/<gateway>/<latch file>`, and the published verification key.
//!
//! A gateway in etcd mode keeps `servers/<id>.json` and its acknowledgement keys on a lease, so
//! a gateway that dies (or stops refreshing) disappears with its lease. After a latch commits,
//! engage reads the registrations and acknowledgements at one revision, then watches `acks/`
//! from the next revision until every registered gateway acknowledged the latch or the deadline
//! passed; the rest are named `unacknowledged`. Nothing here changes a latch.
//!
//! `keys/verify.pub` holds the control plane's public key (64 hex digits). It is written once,
//! create-if-absent, by the first host that mints; every host verifies tokens with it, and keeps
//! a copy in its own `keys/verify.pub` for when etcd cannot be reached. Every key read or
//! published is held against this host's pin ([`EtcdPlane::hold_pin`]): a swapped key is
//! `control_state_corrupt`. [`rotate_key`] replaces it, at the owner console only.

use crate::client::EtcdError;
use crate::plane::EtcdPlane;
use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse, WatchOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use stopline_core::RefusalCode;
use stopline_store::{PlaneAcks, PlaneGateway, StoreError};

/// Registrations and acknowledgements at one revision: id → (record, acknowledged latch files).
type Registry = (i64, BTreeMap<String, (serde_json::Value, BTreeSet<String>)>);

fn read_registry(plane: &EtcdPlane) -> Result<Registry, EtcdError> {
    let names = plane.names.clone();
    plane
        .client
        .call("reading gateway registrations", move |mut client| {
            let names = names.clone();
            async move {
                let txn = Txn::new().and_then(vec![
                    TxnOp::get(names.servers(), Some(GetOptions::new().with_prefix())),
                    TxnOp::get(
                        names.acks(),
                        Some(GetOptions::new().with_prefix().with_keys_only()),
                    ),
                ]);
                let response = client.txn(txn).await?;
                let revision = response.header().map_or(0, |h| h.revision());
                let mut gets = response.op_responses().into_iter().map(|r| match r {
                    TxnOpResponse::Get(get) => get.kvs().to_vec(),
                    _ => Vec::new(),
                });
                let (servers, acks) = (
                    gets.next().unwrap_or_default(),
                    gets.next().unwrap_or_default(),
                );
                let mut registry = BTreeMap::new();
                for kv in &servers {
                    let Some(name) = crate::names::Names::strip(&names.servers(), kv.key()) else {
                        continue;
                    };
                    let id = name.trim_end_matches(".json").to_string();
                    let record =
                        serde_json::from_slice(kv.value()).unwrap_or(serde_json::Value::Null);
                    registry.insert(id, (record, BTreeSet::new()));
                }
                for kv in &acks {
                    let Some(rest) = crate::names::Names::strip(&names.acks(), kv.key()) else {
                        continue;
                    };
                    if let Some((id, latch)) = rest.split_once('/') {
                        if let Some((_, acked)) = registry.get_mut(id) {
                            acked.insert(latch.to_string());
                        }
                    }
                }
                Ok((revision, registry))
            }
        })
}

/// Every gateway registered under the prefix, with what it acknowledged.
pub fn registered(plane: &EtcdPlane) -> Result<Vec<PlaneGateway>, EtcdError> {
    let (_, registry) = read_registry(plane)?;
    Ok(registry
        .into_values()
        .map(|(record, acked)| PlaneGateway {
            record,
            acknowledged: acked.into_iter().collect(),
        })
        .collect())
}

/// Wait up to `timeout` for every registered gateway to acknowledge `latch_file`.
pub fn collect_acks(
    plane: &EtcdPlane,
    latch_file: &str,
    timeout: Duration,
) -> Result<PlaneAcks, EtcdError> {
    let deadline = Instant::now() + timeout;
    let (revision, registry) = read_registry(plane)?;
    let mut outcome = PlaneAcks::default();
    let mut pending = BTreeSet::new();
    for (id, (record, acked)) in &registry {
        if record.is_null() {
            outcome
                .warnings
                .push(format!("servers/{id}.json is unreadable"));
        }
        if acked.contains(latch_file) {
            outcome.acknowledged_by.push(id.clone());
        } else {
            pending.insert(id.clone());
        }
    }
    if !pending.is_empty() {
        let acks = plane.names.acks();
        let latch = latch_file.to_string();
        let waiting = pending.clone();
        let limit = timeout + Duration::from_millis(500);
        let arrived = plane.client.call_within(
            "waiting for acknowledgements",
            limit,
            move |mut client| {
                let (acks, latch, mut waiting) = (acks.clone(), latch.clone(), waiting.clone());
                async move {
                    let options = WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(revision + 1);
                    let mut stream = client.watch(acks.clone(), Some(options)).await?;
                    let mut arrived = Vec::new();
                    while !waiting.is_empty() {
                        let next = tokio::time::timeout_at(
                            tokio::time::Instant::from_std(deadline),
                            stream.message(),
                        )
                        .await;
                        let Ok(Ok(Some(response))) = next else { break };
                        for event in response.events() {
                            let Some(kv) = event.kv() else { continue };
                            let Some(rest) = crate::names::Names::strip(&acks, kv.key()) else {
                                continue;
                            };
                            if let Some((id, acked)) = rest.split_once('/') {
                                if acked == latch && waiting.remove(id) {
                                    arrived.push(id.to_string());
                                }
                            }
                        }
                    }
                    Ok(arrived)
                }
            },
        )?;
        for id in arrived {
            pending.remove(&id);
            outcome.acknowledged_by.push(id);
        }
    }
    outcome.unacknowledged = pending.into_iter().collect();
    Ok(outcome)
}

fn parse_key(bytes: &[u8]) -> Result<[u8; 32], StoreError> {
    let text = std::str::from_utf8(bytes).unwrap_or_default().trim();
    hex::decode(text)
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| {
            StoreError::corrupt(
                RefusalCode::ControlStateCorrupt,
                "keys/verify.pub in etcd is corrupt",
            )
        })
}

/// The published verification key, if any. A copy is kept in this host's `keys/verify.pub`, so
/// a host cut off from etcd still verifies tokens (a stop presented with a token is never
/// refused for want of etcd).
pub fn published_key(plane: &EtcdPlane) -> Result<Option<[u8; 32]>, StoreError> {
    if let Some(key) = plane.verify_key.get() {
        return Ok(Some(*key));
    }
    let key = plane.names.verify_key();
    let cache = plane.local.layout().keys().join("verify.pub");
    let value = plane
        .client
        .call("reading keys/verify.pub", move |mut client| {
            let key = key.clone();
            async move {
                let response = client.get(key, None).await?;
                Ok(response.kvs().first().map(|kv| kv.value().to_vec()))
            }
        });
    match value {
        Ok(Some(bytes)) => {
            let key = parse_key(&bytes)?;
            // A key other than the pinned one is never taken (nor copied over the local copy).
            plane.hold_pin(&key)?;
            if plane.local.fs().read(&cache).ok().as_deref() != Some(bytes.as_slice()) {
                let kept = plane
                    .local
                    .ensure_dirs(&[&plane.local.layout().keys()])
                    .and_then(|()| {
                        plane
                            .local
                            .replace_atomic(&cache, &bytes, "keys.verify_pub")
                    });
                if let Err(error) = kept {
                    tracing::warn!(%error, "cannot keep a copy of keys/verify.pub");
                }
            }
            Ok(Some(*plane.verify_key.get_or_init(|| key)))
        }
        Ok(None) => Ok(None),
        Err(error) => match plane.local.fs().read(&cache) {
            Ok(bytes) => {
                let key = parse_key(&bytes)?;
                plane.hold_pin(&key)?;
                Ok(Some(key))
            }
            Err(_) => Err(error.into()),
        },
    }
}

/// Publish `key` unless a key is published; returns the key that stands.
pub fn publish_key(plane: &EtcdPlane, key: [u8; 32]) -> Result<[u8; 32], StoreError> {
    let name = plane.names.verify_key();
    let txn = Txn::new()
        .when(vec![Compare::create_revision(
            name.clone(),
            CompareOp::Equal,
            0,
        )])
        .and_then(vec![TxnOp::put(name.clone(), hex::encode(key), None)])
        .or_else(vec![TxnOp::get(name, None)]);
    let response = plane.commit("publishing keys/verify.pub", txn)?;
    if response.succeeded() {
        plane.hold_pin(&key)?;
        return Ok(key);
    }
    match response.op_responses().into_iter().next() {
        Some(TxnOpResponse::Get(get)) => match get.kvs().first() {
            Some(kv) => {
                let standing = parse_key(kv.value())?;
                plane.hold_pin(&standing)?;
                Ok(standing)
            }
            None => Err(EtcdError::Contention("keys/verify.pub vanished".into()).into()),
        },
        _ => Err(EtcdError::Contention("keys/verify.pub could not be read".into()).into()),
    }
}

/// Replace the published key with `key` and pin it (`recover rotate-key`, owner console), or,
/// with `None`, pin the key etcd holds now (`--adopt`: another host rotated it). The old value
/// is kept as recovery evidence under the prefix, in the same transaction.
pub fn rotate_key(plane: &EtcdPlane, key: Option<[u8; 32]>) -> Result<[u8; 32], StoreError> {
    let name = plane.names.verify_key();
    // The key the plane publishes now: evidence when it is replaced, the key when adopted.
    let published = plane.client.call("reading keys/verify.pub", move |mut c| {
        let name = name.clone();
        async move {
            Ok(c.get(name, None)
                .await?
                .kvs()
                .first()
                .map(|kv| kv.value().to_vec()))
        }
    })?;
    let key = match key {
        Some(key) => {
            let mut ops = vec![TxnOp::put(plane.names.verify_key(), hex::encode(key), None)];
            if let Some(old) = published {
                let evidence = format!("verify.pub-{}.bin", stopline_core::wal::sha256_hex(&old));
                ops.push(TxnOp::put(plane.names.evidence(&evidence), old, None));
            }
            plane.commit("rotating keys/verify.pub", Txn::new().and_then(ops))?;
            key
        }
        None => {
            let bytes = published.ok_or_else(|| {
                StoreError::refused(
                    RefusalCode::BadRequest,
                    "no key is published under the prefix: nothing to adopt",
                )
            })?;
            parse_key(&bytes)?
        }
    };
    plane.pin(&key)?;
    let cache = plane.local.layout().keys().join("verify.pub");
    plane.local.ensure_dirs(&[&plane.local.layout().keys()])?;
    plane
        .local
        .replace_atomic(&cache, hex::encode(key).as_bytes(), "keys.verify_pub")?;
    Ok(key)
}
