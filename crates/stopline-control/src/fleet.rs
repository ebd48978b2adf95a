//! The seams a gateway's budget ledger and breaker counters are shared across hosts through:
//! [`FleetLedger`] and [`FleetBreakers`], kept in etcd by `stopline-etcd` (docs/reference.md,
//! "Many hosts: etcd"). A leaf: the ledger (`budget.rs`) and the governor use it, it uses nothing
//! of the gateway.
//!
//! In local mode the ledger is shared through the spending journals of one control directory;
//! on a distributed plane every reservation that draws on a limit is decided with what the
//! whole fleet has settled and holds open, and recorded there before the call is dispatched, in
//! one compare-and-swap over every account of the chain. A reservation that cannot be decided
//! or recorded (the backend unreachable, its records corrupt) is not granted: the call is
//! refused, never spent locally.

use std::collections::BTreeMap;
use std::sync::Arc;
use stopline_core::budget::Budgets;
use stopline_core::{BreakerKind, Refusal};

/// What a gateway on a distributed plane shares with the rest of the fleet (nothing: local mode).
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    /// The budget ledger (`None`: this home's spending journals).
    pub budgets: Option<Arc<dyn FleetLedger>>,
    /// The agent breakers' counters (`None`: this gateway's own).
    pub breakers: Option<Arc<dyn FleetBreakers>>,
}

/// The agent breakers' counters (`unauthorized_calls`, `refused_egress`) shared by every
/// gateway of a fleet, so a breaker trips on the fleet's count, not one host's.
pub trait FleetBreakers: Send + Sync + std::fmt::Debug {
    /// Add one event of `kind` for `agent` to the fleet's count and return the count after it.
    /// Blocks (bounded); call it off the runtime's workers.
    fn count(&self, agent: &str, kind: BreakerKind) -> Result<u32, Refusal>;
    /// Start `agent`'s count of `kind` again from zero (its breaker tripped: the trip's latch
    /// holds the agent from now on, on every host). Blocks (bounded).
    fn reset(&self, agent: &str, kind: BreakerKind);
}

/// One account as the fleet holds it: its settled use and what its open reservations hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetUse {
    /// Settled use per kind (a dead gateway's reservations included at their bound).
    pub used: Budgets,
    /// Reserved by calls not yet settled, per kind, at every gateway (this one's included).
    pub reserved: Budgets,
}

/// Every account of a chain, by `jti`, as one read of the fleet saw them.
pub type FleetAccounts = BTreeMap<String, FleetUse>;

/// A budget ledger shared by every gateway of a fleet.
pub trait FleetLedger: Send + Sync + std::fmt::Debug {
    /// Read the accounts of `chain`, let `decide` judge a reservation of `amounts` with them,
    /// and when it grants (`true`) record the reservation on every account of `chain` at once,
    /// held by this gateway, before returning its id. `decide` may be called again when another
    /// gateway changed an account in between; `Ok(None)` when its last call refused. Blocks
    /// (bounded); call it off the runtime's workers. An unreachable or corrupt backend is the
    /// refusal (`control_io`, `control_state_corrupt`).
    fn reserve(
        &self,
        chain: &[String],
        amounts: &Budgets,
        decide: &mut dyn FnMut(&FleetAccounts) -> bool,
    ) -> Result<Option<String>, Refusal>;

    /// Replace reservation `id` on every account of `chain` with `actual`. Never blocks: the
    /// settlement is queued and retried until it lands; until then the reservation counts at its
    /// bound.
    fn settle(&self, chain: &[String], id: &str, actual: &Budgets);
}
