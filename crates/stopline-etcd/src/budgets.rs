//! [`EtcdBudgets`]: the fleet's budget ledger kept in etcd (docs/reference.md, "Many hosts:
//! etcd"), the `FleetLedger` of every gateway on an etcd plane.
//!
//! A reservation reads, in one transaction (one revision), the account of every token of the
//! caller's chain and every live holder key; folds in the reservations of holders that are gone
//! (at their bound, [`FleetAccount::fold_dead`]); lets the gateway's ledger decide; and commits
//! the new open reservation into every account of the chain in one compare-and-swap: every
//! account's `mod_revision` as read, and this gateway's own holder key still there. A lost race is
//! read again. So concurrent gateways never grant past a limit, and a reservation is never held
//! by a holder already gone.
//!
//! The holder is this gateway's lease ([`LEASE_TTL_S`], renewed every second by its own thread):
//! its key `budgets/holders/<lease>` is attached to it. A gateway that dies stops renewing; its
//! reservations count at their bound while the lease lives, and once etcd ends the lease, the
//! next writer of each account settles them at their bound. Settlements are queued to a thread
//! and retried until they land, so the request path never waits on them.
//!
//! Every failure to reach etcd refuses the reservation (`control_io`); an account that does not
//! parse refuses it (`control_state_corrupt`). Nothing here falls back to local spending.

use crate::budget_record::{FleetAccount, OpenReservation};
use crate::client::EtcdError;
use crate::plane::EtcdPlane;
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};
use stopline_control::fleet::{FleetAccounts, FleetLedger};
use stopline_core::budget::Budgets;
use stopline_core::{Refusal, RefusalCode};

/// The holder lease's time to live: how long a dead gateway's reservations count as reserved
/// before they are settled at their bound.
pub const LEASE_TTL_S: i64 = 5;
/// How often the holder lease is renewed.
const RENEW_EVERY: Duration = Duration::from_secs(1);
/// How long one reservation may keep losing compare-and-swap races to other gateways.
const RACE_BOUND: Duration = Duration::from_secs(3);
/// How long a settlement that did not land waits before it is tried again.
const SETTLE_RETRY: Duration = Duration::from_millis(200);

/// The fleet's ledger in etcd, for one gateway.
#[derive(Debug, Clone)]
pub struct EtcdBudgets {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    plane: EtcdPlane,
    /// This gateway's name in its reservations (for people).
    gateway: String,
    /// The lease this gateway holds its reservations under, once granted and not lost.
    holder: Mutex<Option<i64>>,
    /// One reservation at a time from this gateway (its races are with other gateways only).
    one_at_a_time: Mutex<()>,
    next_id: AtomicU64,
    queue: Mutex<Vec<Settlement>>,
    queued: Condvar,
    threads: std::sync::Once,
}

#[derive(Debug, Clone)]
struct Settlement {
    chain: Vec<String>,
    id: String,
    actual: Budgets,
}

/// One read of a chain's accounts.
struct Look {
    /// Per token of the chain: its key, its `mod_revision` (0: absent) and its account with
    /// the dead holders' reservations folded in.
    accounts: Vec<(String, String, i64, FleetAccount)>,
    holders: BTreeSet<String>,
}

fn io(what: &str, error: &EtcdError) -> Refusal {
    Refusal::new(
        RefusalCode::ControlIo,
        format!("the fleet's budget ledger in etcd cannot be reached to {what}, so the call is refused rather than spent locally: {error}"),
    )
}

fn holder_name(lease: i64) -> String {
    format!("{lease:016x}")
}

impl EtcdBudgets {
    /// The ledger on `plane`, for the gateway named `gateway`. Starts nothing until first used.
    pub fn new(plane: EtcdPlane, gateway: &str) -> EtcdBudgets {
        EtcdBudgets {
            inner: Arc::new(Inner {
                plane,
                gateway: gateway.to_string(),
                holder: Mutex::new(None),
                one_at_a_time: Mutex::new(()),
                next_id: AtomicU64::new(0),
                queue: Mutex::new(Vec::new()),
                queued: Condvar::new(),
                threads: std::sync::Once::new(),
            }),
        }
    }

    fn start_threads(&self) {
        self.inner.threads.call_once(|| {
            let weak = Arc::downgrade(&self.inner);
            let renew = weak.clone();
            let spawned = std::thread::Builder::new()
                .name("stopline-etcd-budget-lease".into())
                .spawn(move || renew_loop(&renew))
                .and_then(|_| {
                    std::thread::Builder::new()
                        .name("stopline-etcd-settle".into())
                        .spawn(move || settle_loop(&weak))
                });
            if let Err(error) = spawned {
                tracing::error!(%error, "cannot start the fleet budget threads");
            }
        });
    }
}

impl Inner {
    /// This gateway's holder lease, granted (with its key) when it has none.
    fn holder(&self) -> Result<i64, Refusal> {
        let mut held = self.holder.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(lease) = *held {
            return Ok(lease);
        }
        let client = &self.plane.client;
        let lease = client
            .call("grant the budget lease", |mut c| async move {
                c.lease_grant(LEASE_TTL_S, None).await.map(|r| r.id())
            })
            .map_err(|e| io("hold a reservation", &e))?;
        let key = self.plane.names.budget_holder(&holder_name(lease));
        let gateway = self.gateway.clone();
        client
            .call("write the budget holder", move |mut c| {
                let (key, gateway) = (key.clone(), gateway.clone());
                async move {
                    c.put(key, gateway, Some(PutOptions::new().with_lease(lease)))
                        .await
                        .map(|_| ())
                }
            })
            .map_err(|e| io("hold a reservation", &e))?;
        *held = Some(lease);
        Ok(lease)
    }

    fn lose_holder(&self, lease: i64) {
        let mut held = self.holder.lock().unwrap_or_else(|p| p.into_inner());
        if *held == Some(lease) {
            *held = None;
        }
    }

    /// One consistent read of the accounts of `chain` and of every live holder.
    fn look(&self, chain: &[String]) -> Result<Look, Refusal> {
        let names = &self.plane.names;
        let mut keys = Vec::new();
        for jti in chain {
            if jti.is_empty() || !jti.chars().all(|c| c.is_ascii_alphanumeric()) {
                return Err(Refusal::new(
                    RefusalCode::TokenInvalid,
                    "a token id of the chain is not a token id",
                ));
            }
            keys.push((jti.clone(), names.budget_account(jti)));
        }
        let mut ops: Vec<TxnOp> = keys
            .iter()
            .map(|(_, k)| TxnOp::get(k.clone(), None))
            .collect();
        ops.push(TxnOp::get(
            names.budget_holders(),
            Some(GetOptions::new().with_prefix()),
        ));
        let txn = Txn::new().and_then(ops);
        let answer = self
            .plane
            .commit("read the budget ledger", txn)
            .map_err(|e| io("read the budget ledger", &e))?;
        let mut responses = answer.op_responses().into_iter();
        let mut accounts = Vec::new();
        for (jti, key) in keys {
            let Some(TxnOpResponse::Get(got)) = responses.next() else {
                return Err(io(
                    "read the budget ledger",
                    &EtcdError::Unreachable("a short answer".into()),
                ));
            };
            let (revision, account) = match got.kvs().first() {
                None => (0, FleetAccount::default()),
                Some(kv) => (
                    kv.mod_revision(),
                    FleetAccount::parse(kv.value()).map_err(|e| {
                        Refusal::new(
                            RefusalCode::ControlStateCorrupt,
                            format!("{key} is not a budget account ({e}); no reservation is decided on it"),
                        )
                    })?,
                ),
            };
            accounts.push((jti, key, revision, account));
        }
        let Some(TxnOpResponse::Get(holders)) = responses.next() else {
            return Err(io(
                "read the budget ledger",
                &EtcdError::Unreachable("a short answer".into()),
            ));
        };
        let range = names.budget_holders();
        let holders: BTreeSet<String> = holders
            .kvs()
            .iter()
            .filter_map(|kv| crate::names::Names::strip(&range, kv.key()).map(String::from))
            .collect();
        for (_, _, _, account) in &mut accounts {
            account.fold_dead(&holders);
        }
        Ok(Look { accounts, holders })
    }

    /// Commit `look`'s accounts as they now stand, guarded by the revisions it read (and by
    /// `holder` still being there, when given). `Ok(false)`: someone wrote first.
    fn write(&self, what: &str, look: &Look, holder: Option<i64>) -> Result<bool, Refusal> {
        let names = &self.plane.names;
        let mut guards: Vec<Compare> = look
            .accounts
            .iter()
            .map(|(_, key, revision, _)| {
                Compare::mod_revision(key.clone(), CompareOp::Equal, *revision)
            })
            .collect();
        if let Some(lease) = holder {
            guards.push(Compare::version(
                names.budget_holder(&holder_name(lease)),
                CompareOp::Greater,
                0,
            ));
        }
        let puts: Vec<TxnOp> = look
            .accounts
            .iter()
            .map(|(_, key, _, account)| TxnOp::put(key.clone(), account.to_bytes(), None))
            .collect();
        let answer = self
            .plane
            .commit(what, Txn::new().when(guards).and_then(puts))
            .map_err(|e| io(what, &e))?;
        Ok(answer.succeeded())
    }

    fn reserve(
        &self,
        chain: &[String],
        amounts: &Budgets,
        decide: &mut dyn FnMut(&FleetAccounts) -> bool,
    ) -> Result<Option<String>, Refusal> {
        let _one = self.one_at_a_time.lock().unwrap_or_else(|p| p.into_inner());
        let started = Instant::now();
        loop {
            let lease = self.holder()?;
            let mut look = self.look(chain)?;
            if !look.holders.contains(&holder_name(lease)) {
                // Our lease ended (etcd unreachable for longer than its time to live): what we
                // held is settled at its bound by now; hold under a new one.
                self.lose_holder(lease);
                continue;
            }
            let seen: FleetAccounts = look
                .accounts
                .iter()
                .map(|(jti, _, _, account)| (jti.clone(), account.usage()))
                .collect();
            if !decide(&seen) {
                return Ok(None);
            }
            let id = format!(
                "{}-{}",
                holder_name(lease),
                self.next_id.fetch_add(1, Ordering::SeqCst)
            );
            for (_, _, _, account) in &mut look.accounts {
                account.open.insert(
                    id.clone(),
                    OpenReservation {
                        holder: holder_name(lease),
                        gateway: self.gateway.clone(),
                        amounts: amounts.clone(),
                    },
                );
            }
            if self.write("record a reservation", &look, Some(lease))? {
                return Ok(Some(id));
            }
            if started.elapsed() > RACE_BOUND {
                return Err(io(
                    "record a reservation",
                    &EtcdError::Contention(format!(
                        "other gateways kept winning for {RACE_BOUND:?}"
                    )),
                ));
            }
        }
    }

    /// One attempt at a settlement; `Ok(false)` when it lost a race.
    fn settle_once(&self, settlement: &Settlement) -> Result<bool, Refusal> {
        let mut look = self.look(&settlement.chain)?;
        for (_, _, _, account) in &mut look.accounts {
            account.settle(&settlement.id, &settlement.actual);
        }
        self.write("record a settlement", &look, None)
    }
}

/// Renew the holder lease every second while the ledger lives; a lease etcd no longer knows is
/// dropped, so the next reservation grants a new one.
fn renew_loop(inner: &Weak<Inner>) {
    loop {
        std::thread::sleep(RENEW_EVERY);
        let Some(inner) = inner.upgrade() else { return };
        let Some(lease) = *inner.holder.lock().unwrap_or_else(|p| p.into_inner()) else {
            continue;
        };
        let renewed = inner
            .plane
            .client
            .call("renew the budget lease", move |mut c| async move {
                let (mut keeper, mut stream) = c.lease_keep_alive(lease).await?;
                keeper.keep_alive().await?;
                Ok(stream.message().await?.map_or(0, |answer| answer.ttl()))
            });
        match renewed {
            Ok(ttl) if ttl > 0 => {}
            Ok(_) => inner.lose_holder(lease),
            Err(error) => {
                tracing::warn!(%error, "the budget lease was not renewed; reservations under it count at their bound until it ends")
            }
        }
    }
}

/// Land every queued settlement, retrying the ones that did not land.
fn settle_loop(inner: &Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let batch: Vec<Settlement> = {
            let queue = strong.queue.lock().unwrap_or_else(|p| p.into_inner());
            let (mut queue, _) = strong
                .queued
                .wait_timeout_while(queue, Duration::from_millis(500), |q| q.is_empty())
                .unwrap_or_else(|p| p.into_inner());
            std::mem::take(&mut *queue)
        };
        let mut failed = Vec::new();
        for settlement in batch {
            let mut landed = false;
            for _ in 0..crate::plane::CAS_ATTEMPTS {
                match strong.settle_once(&settlement) {
                    Ok(true) => {
                        landed = true;
                        break;
                    }
                    Ok(false) => continue,
                    Err(refusal) => {
                        tracing::warn!(code = %refusal.code, message = %refusal.message, "a settlement did not land; it counts at its bound until retried");
                        break;
                    }
                }
            }
            if !landed {
                failed.push(settlement);
            }
        }
        if !failed.is_empty() {
            strong
                .queue
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(failed);
            drop(strong);
            std::thread::sleep(SETTLE_RETRY);
        }
    }
}

impl FleetLedger for EtcdBudgets {
    fn reserve(
        &self,
        chain: &[String],
        amounts: &Budgets,
        decide: &mut dyn FnMut(&FleetAccounts) -> bool,
    ) -> Result<Option<String>, Refusal> {
        self.start_threads();
        self.inner.reserve(chain, amounts, decide)
    }

    fn settle(&self, chain: &[String], id: &str, actual: &Budgets) {
        self.start_threads();
        let mut queue = self.inner.queue.lock().unwrap_or_else(|p| p.into_inner());
        queue.push(Settlement {
            chain: chain.to_vec(),
            id: id.to_string(),
            actual: actual.clone(),
        });
        self.inner.queued.notify_one();
    }
}
