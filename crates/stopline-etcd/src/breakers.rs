//! [`EtcdBreakers`]: the agent breakers' counters kept in etcd (docs/reference.md, "Many hosts:
//! etcd"), so that `unauthorized_calls` and `refused_egress` trip on what the whole fleet
//! counted for an agent, not on one host's share of it.
//!
//! One record per agent, `breakers/<agent>.json` ([`BreakerCount`]), changed by
//! compare-and-swap on its `mod_revision`: an event is one increment, and the gateway whose
//! increment reaches the threshold trips the breaker and starts the count again from zero (the
//! trip's latch holds the agent on every host from then on). A gateway that cannot reach etcd
//! counts on its own (the caller's fallback), never not at all.

use crate::client::EtcdError;
use crate::plane::{EtcdPlane, CAS_ATTEMPTS};
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use stopline_control::fleet::FleetBreakers;
use stopline_core::{BreakerKind, Refusal, RefusalCode};

/// One agent's counts since its breaker last tripped (`breakers/<agent>.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerCount {
    /// Unauthorized calls counted by every gateway.
    #[serde(default)]
    pub unauthorized_calls: u32,
    /// Refused egress attempts counted by every gateway.
    #[serde(default)]
    pub refused_egress: u32,
}

impl BreakerCount {
    fn slot(&mut self, kind: BreakerKind) -> Option<&mut u32> {
        match kind {
            BreakerKind::UnauthorizedCalls => Some(&mut self.unauthorized_calls),
            BreakerKind::RefusedEgress => Some(&mut self.refused_egress),
            _ => None,
        }
    }
}

/// The fleet's breaker counters in etcd.
#[derive(Debug, Clone)]
pub struct EtcdBreakers {
    plane: EtcdPlane,
}

fn io(error: &EtcdError) -> Refusal {
    Refusal::new(
        RefusalCode::ControlIo,
        format!("the fleet's breaker counters in etcd cannot be reached: {error}"),
    )
}

impl EtcdBreakers {
    /// The counters on `plane`.
    pub fn new(plane: EtcdPlane) -> EtcdBreakers {
        EtcdBreakers { plane }
    }

    /// Read `agent`'s record, change it with `change`, write it back by compare-and-swap.
    fn update(
        &self,
        agent: &str,
        change: impl Fn(&mut BreakerCount),
    ) -> Result<BreakerCount, Refusal> {
        if agent.is_empty() || agent.contains('/') {
            return Err(Refusal::new(RefusalCode::BadRequest, "not an agent name"));
        }
        let key = self.plane.names.breaker(agent);
        for _ in 0..CAS_ATTEMPTS {
            let read = key.clone();
            let got = self
                .plane
                .client
                .call("read a breaker count", move |mut c| {
                    let key = read.clone();
                    async move { c.get(key, None).await }
                })
                .map_err(|e| io(&e))?;
            let (revision, mut count) = match got.kvs().first() {
                None => (0, BreakerCount::default()),
                Some(kv) => (
                    kv.mod_revision(),
                    serde_json::from_slice(kv.value()).map_err(|e| {
                        Refusal::new(
                            RefusalCode::ControlStateCorrupt,
                            format!("{key} is not a breaker count: {e}"),
                        )
                    })?,
                ),
            };
            change(&mut count);
            let bytes = serde_json::to_vec(&count).expect("a count always serializes");
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    revision,
                )])
                .and_then([TxnOp::put(key.clone(), bytes, None)]);
            if self
                .plane
                .commit("count a breaker event", txn)
                .map_err(|e| io(&e))?
                .succeeded()
            {
                return Ok(count);
            }
        }
        Err(io(&EtcdError::Contention(format!(
            "{key}: {CAS_ATTEMPTS} attempts lost the race"
        ))))
    }
}

impl FleetBreakers for EtcdBreakers {
    fn count(&self, agent: &str, kind: BreakerKind) -> Result<u32, Refusal> {
        let mut count = self.update(agent, |c| {
            if let Some(slot) = c.slot(kind) {
                *slot += 1;
            }
        })?;
        Ok(count.slot(kind).map_or(0, |n| *n))
    }

    fn reset(&self, agent: &str, kind: BreakerKind) {
        let reset = self.update(agent, |c| {
            if let Some(slot) = c.slot(kind) {
                *slot = 0;
            }
        });
        if let Err(refusal) = reset {
            tracing::warn!(code = %refusal.code, message = %refusal.message, agent, "the fleet's breaker count was not reset after its trip");
        }
    }
}
