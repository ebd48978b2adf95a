//! The fleet's budget ledger as records in etcd: one [`FleetAccount`] per token
//! (`budgets/accounts/<jti>.json`), its settled use and its open reservations, each open
//! reservation naming the holder (a gateway's lease) it is held under.
//!
//! Pure: the reading, folding and writing of these records, no etcd calls. The fold is the rule
//! that makes a dead gateway's reservations safe: a reservation whose holder key
//! (`budgets/holders/<holder>`, attached to the holder's lease) is gone is settled at its
//! bound, never dropped; until then it counts as reserved at its bound.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use stopline_control::fleet::FleetUse;
use stopline_core::budget::Budgets;

/// One token's account in the fleet's ledger (`budgets/accounts/<jti>.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetAccount {
    /// Settled use per kind: settlements, and dead holders' reservations at their bound.
    #[serde(default)]
    pub settled: Budgets,
    /// Reservations not yet settled, by id.
    #[serde(default)]
    pub open: BTreeMap<String, OpenReservation>,
}

/// A reservation not yet settled, held under a gateway's lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenReservation {
    /// The holder (the lease, hex) it lives under: `budgets/holders/<holder>`.
    pub holder: String,
    /// The gateway that holds it (its registration id), for people.
    pub gateway: String,
    /// The reserved upper bound.
    pub amounts: Budgets,
}

fn add(into: &mut Budgets, amounts: &Budgets) {
    for (&kind, &amount) in amounts {
        *into.entry(kind).or_default() += amount;
    }
}

impl FleetAccount {
    /// Parse a stored account; `Err` is a record nobody may trust (the caller fails closed).
    pub fn parse(bytes: &[u8]) -> Result<FleetAccount, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }

    /// The stored form.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an account always serializes")
    }

    /// Settle at their bound the reservations whose holder is not among `alive`; true when
    /// any was.
    pub fn fold_dead(&mut self, alive: &BTreeSet<String>) -> bool {
        let dead: Vec<String> = self
            .open
            .iter()
            .filter(|(_, r)| !alive.contains(&r.holder))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &dead {
            if let Some(reservation) = self.open.remove(id) {
                add(&mut self.settled, &reservation.amounts);
            }
        }
        !dead.is_empty()
    }

    /// Replace open reservation `id` with `actual`; false when it is not open (already settled,
    /// or settled at its bound once its holder's lease ended).
    pub fn settle(&mut self, id: &str, actual: &Budgets) -> bool {
        if self.open.remove(id).is_none() {
            return false;
        }
        add(&mut self.settled, actual);
        true
    }

    /// What the ledger decides with: settled use, and the open reservations' total.
    pub fn usage(&self) -> FleetUse {
        let mut reserved = Budgets::new();
        for reservation in self.open.values() {
            add(&mut reserved, &reservation.amounts);
        }
        FleetUse {
            used: self.settled.clone(),
            reserved,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stopline_core::budget::BudgetKind;

    fn calls(n: f64) -> Budgets {
        [(BudgetKind::ToolCalls, n)].into()
    }

    #[test]
    fn a_dead_holders_reservation_is_settled_at_its_bound_never_dropped() {
        let mut account = FleetAccount {
            settled: calls(3.0),
            ..Default::default()
        };
        for (id, holder) in [("a-1", "a"), ("b-1", "b"), ("b-2", "b")] {
            account.open.insert(
                id.into(),
                OpenReservation {
                    holder: holder.into(),
                    gateway: "gw".into(),
                    amounts: calls(1.0),
                },
            );
        }
        assert_eq!(account.usage().reserved, calls(3.0));
        let alive: BTreeSet<String> = ["a".to_string()].into();
        assert!(account.fold_dead(&alive));
        assert_eq!(account.usage().used, calls(5.0), "b's two at their bound");
        assert_eq!(account.usage().reserved, calls(1.0));
        assert!(!account.settle("b-1", &calls(0.0)), "already settled");
        assert!(account.settle("a-1", &calls(0.0)));
        assert_eq!(
            account.usage(),
            FleetUse {
                used: calls(5.0),
                reserved: Budgets::new()
            }
        );
        let again = FleetAccount::parse(&account.to_bytes()).unwrap();
        assert_eq!(again, account);
        assert!(FleetAccount::parse(br#"{"settled":{},"spent":1}"#).is_err());
    }
}
