//! The budget ledger: reservation before dispatch, settlement after, along the token chain.
//!
//! Every token is an account keyed by its `jti`, with the limits signed into it and a link to its
//! parent's account. A call reserves an upper bound of what it may consume in *every* account of
//! its chain (so a delegated child's spending also counts against its parent); a reservation that
//! does not fit while others are outstanding waits for their settlements, and one that cannot fit
//! even then is refused (`budget_exhausted`). Settlement replaces the reservation with what was
//! actually used. Concurrent calls therefore never overrun a limit.
//!
//! With spending journals ([`Ledger::durable`], what `stopline serve` uses) the ledger survives a
//! restart and a crash, and is shared by every gateway over the same control directory: a
//! reservation that draws on a limit is decided under the store's spend lock, after folding
//! what the other gateways' journals say (spent, and reserved by their calls in flight), and is
//! recorded and fsynced before the call is dispatched; its settlement is appended after. A
//! reservation that cannot be recorded is not granted.
//!
//! On a distributed plane ([`Ledger::fleet`]) the same decision is made with what the whole fleet
//! has settled and holds open ([`FleetLedger`]), and the reservation is recorded there, not in
//! this host's journals: such reservations never touch this ledger's own counters (the fleet's
//! figures, this gateway's calls included, are kept as what is used and reserved elsewhere), so
//! nothing is counted twice. A gateway that cannot reach the fleet refuses the call.

use crate::fleet::{FleetAccounts, FleetLedger};
use foldhash::{HashMap, HashMapExt};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stopline_core::budget::{BudgetKind, Budgets};
use stopline_store::spend::{Elsewhere, SpendJournal};
use stopline_token::Claims;
use tokio::sync::Notify;

/// One account: a token's limits, its use and outstanding reservations.
#[derive(Debug, Clone, Default)]
struct Account {
    limits: Budgets,
    known_limits: bool,
    used: BTreeMap<BudgetKind, f64>,
    reserved: BTreeMap<BudgetKind, f64>,
    parent: Option<String>,
    iat: i64,
    /// The token's delegation chain (its acting agent last), for the status page.
    chain: Vec<String>,
    /// Spent through other gateways (their journals), as of the last look.
    used_elsewhere: BTreeMap<BudgetKind, f64>,
    /// Reserved by calls in flight at other gateways, as of the last look.
    reserved_elsewhere: BTreeMap<BudgetKind, f64>,
}

impl Account {
    fn used(&self, kind: BudgetKind) -> f64 {
        self.used.get(&kind).copied().unwrap_or(0.0)
            + self.used_elsewhere.get(&kind).copied().unwrap_or(0.0)
    }
    fn reserved(&self, kind: BudgetKind) -> f64 {
        self.reserved.get(&kind).copied().unwrap_or(0.0)
            + self.reserved_elsewhere.get(&kind).copied().unwrap_or(0.0)
    }
}

/// One account as the status page shows it (`GET /v1/budgets`): whose it is, and for every
/// limited kind its limit, what was used and what is reserved by calls still in flight.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AccountSummary {
    /// The acting agent of the token (last link of its chain); empty when not yet seen.
    pub agent: String,
    /// The delegation chain, root first.
    pub chain: Vec<String>,
    /// The first 12 characters of the token's `jti` (enough to tell tokens apart; never the
    /// token itself).
    pub token: String,
    /// The parent token's `jti` prefix, for delegated tokens.
    pub parent: Option<String>,
    /// Limited kinds: `{kind: {"limit", "used", "reserved"}}`.
    pub budgets: BTreeMap<String, KindUse>,
}

/// Use of one budget kind.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct KindUse {
    /// The limit signed into the token.
    pub limit: f64,
    /// Settled use (for `wall_clock_s`, seconds since the token was issued).
    pub used: f64,
    /// Reserved by calls not yet settled.
    pub reserved: f64,
}

fn short_jti(jti: &str) -> String {
    jti.chars().take(12).collect()
}

/// Why a reservation was not granted.
#[derive(Debug, Clone, PartialEq)]
pub enum Shortfall {
    /// It does not fit now, but outstanding reservations may settle lower.
    Wait,
    /// It cannot fit: the limit is spent.
    Exhausted {
        /// The kind.
        kind: BudgetKind,
        /// The limit.
        limit: f64,
        /// Used plus the attempted amount.
        observed: f64,
        /// The account (`jti`) whose limit it is.
        account: String,
    },
    /// The reservation could not be recorded durably, or the spending it must be decided
    /// with cannot be trusted (a corrupt journal or `spend/settled.json`:
    /// `control_state_corrupt`), so it was not granted.
    Unrecorded(stopline_core::RefusalCode, String),
}

/// The ledger of every account this gateway has seen.
#[derive(Debug, Default)]
pub struct Ledger {
    accounts: Mutex<HashMap<String, Account>>,
    settled: Notify,
    /// Where reservations on a limit are recorded before dispatch (none: in memory only).
    journal: Option<SpendJournal>,
    /// The fleet's ledger, on a distributed plane: it decides and records instead of `journal`.
    fleet: Option<Arc<dyn FleetLedger>>,
}

/// A granted reservation; release or settle it exactly once (drop releases).
#[derive(Debug)]
pub struct Reservation {
    ledger: Arc<Ledger>,
    chain: Vec<String>,
    amounts: Budgets,
    done: bool,
    /// True when an account of the chain limits a kind it reserves.
    limited: bool,
    /// Its id in the spending journal (or the fleet's ledger), once recorded.
    spend_id: Option<String>,
    /// True when recorded in the fleet's ledger: this ledger's own counters never held it.
    fleet: bool,
}

impl Ledger {
    /// A ledger whose reservations on a limit are decided with the other gateways' spending
    /// and recorded in `journal`.
    pub fn durable(journal: SpendJournal) -> Ledger {
        Ledger {
            accounts: Mutex::new(HashMap::new()),
            settled: Notify::new(),
            journal: Some(journal),
            fleet: None,
        }
    }

    /// A ledger whose reservations on a limit are decided with the fleet's spending and
    /// recorded in `fleet` (a gateway on a distributed plane).
    pub fn fleet(fleet: Arc<dyn FleetLedger>) -> Ledger {
        Ledger {
            accounts: Mutex::new(HashMap::new()),
            settled: Notify::new(),
            journal: None,
            fleet: Some(fleet),
        }
    }

    /// Take in what the fleet says of the accounts of one chain (replacing the last look at
    /// those accounts).
    fn set_fleet(&self, fleet: &FleetAccounts) {
        let mut accounts = self.accounts.lock().unwrap_or_else(|p| p.into_inner());
        for (jti, seen) in fleet {
            let account = accounts.entry(jti.clone()).or_default();
            account.used_elsewhere = seen.used.clone();
            account.reserved_elsewhere = seen.reserved.clone();
        }
    }

    /// Take in what the other gateways' journals say (replacing the last look).
    pub fn set_elsewhere(&self, elsewhere: &Elsewhere) {
        let mut accounts = self.accounts.lock().unwrap_or_else(|p| p.into_inner());
        for account in accounts.values_mut() {
            account.used_elsewhere.clear();
            account.reserved_elsewhere.clear();
        }
        for (jti, used) in &elsewhere.used {
            accounts.entry(jti.clone()).or_default().used_elsewhere = used.clone();
        }
        for (jti, reserved) in &elsewhere.in_flight {
            accounts.entry(jti.clone()).or_default().reserved_elsewhere = reserved.clone();
        }
    }

    /// Make sure the caller's account exists and carries its limits.
    pub fn register(&self, claims: &Claims) {
        let mut accounts = self.accounts.lock().unwrap_or_else(|p| p.into_inner());
        Ledger::register_in(&mut accounts, claims);
    }

    fn register_in(accounts: &mut HashMap<String, Account>, claims: &Claims) {
        // Known already (every call after a token's first): nothing to add, nothing to copy.
        let parent_known = claims
            .parent
            .as_ref()
            .is_none_or(|parent| accounts.contains_key(parent));
        if parent_known
            && accounts
                .get(&claims.jti)
                .is_some_and(|account| account.known_limits)
        {
            return;
        }
        let account = accounts.entry(claims.jti.clone()).or_default();
        if !account.known_limits {
            account.limits = claims.budgets.clone();
            account.known_limits = true;
            account.parent = claims.parent.clone();
            account.iat = claims.iat;
            account.chain = claims
                .chain
                .iter()
                .map(|n| n.as_str().to_string())
                .collect();
        }
        if let Some(parent) = &claims.parent {
            accounts.entry(parent.clone()).or_default();
        }
    }

    /// Record that `child` was delegated from `parent` (both known) by this gateway.
    pub fn register_child(&self, child: &Claims) {
        self.register(child);
    }

    fn chain_of(accounts: &HashMap<String, Account>, jti: &str) -> Vec<String> {
        let mut chain = vec![jti.to_string()];
        let mut next = accounts.get(jti).and_then(|a| a.parent.clone());
        while let Some(parent) = next {
            if chain.contains(&parent) || chain.len() > 64 {
                break;
            }
            next = accounts.get(&parent).and_then(|a| a.parent.clone());
            chain.push(parent);
        }
        chain
    }

    /// False only when every account of the caller's chain is known and none limits a kind of
    /// `amounts`: such a reservation can never be refused for what other gateways spent, and
    /// records nothing, so it is decided in memory without the spend lock (on every call of an
    /// agent without budgets, that lock, the fold of every journal and a blocking-pool hand-off
    /// were most of the read-only path's cost). An account not yet seen here (a parent whose
    /// token never reached this gateway) may limit anything: the journal decides then.
    fn may_draw_on_limit(&self, claims: &Claims, amounts: &Budgets) -> bool {
        let mut accounts = self.accounts.lock().unwrap_or_else(|p| p.into_inner());
        Ledger::register_in(&mut accounts, claims);
        Ledger::chain_of(&accounts, &claims.jti).iter().any(|jti| {
            accounts.get(jti).is_none_or(|account| {
                !account.known_limits || amounts.keys().any(|k| account.limits.contains_key(k))
            })
        })
    }

    /// Try to reserve `amounts` along the caller's chain at `now_s`.
    pub fn try_reserve(
        self: &Arc<Self>,
        claims: &Claims,
        amounts: &Budgets,
        now_s: i64,
    ) -> Result<Reservation, Shortfall> {
        self.try_reserve_in(claims, amounts, now_s, false)
    }

    /// [`Ledger::try_reserve`]; with `fleet`, the decision is made on the fleet's figures alone
    /// (taken in just before) and this ledger's own counters are left untouched.
    fn try_reserve_in(
        self: &Arc<Self>,
        claims: &Claims,
        amounts: &Budgets,
        now_s: i64,
        fleet: bool,
    ) -> Result<Reservation, Shortfall> {
        let mut accounts = self.accounts.lock().unwrap_or_else(|p| p.into_inner());
        Ledger::register_in(&mut accounts, claims);
        let chain = Ledger::chain_of(&accounts, &claims.jti);
        for jti in &chain {
            let Some(account) = accounts.get(jti) else {
                continue;
            };
            if let Some(&limit) = account.limits.get(&BudgetKind::WallClockS) {
                let elapsed = (now_s - account.iat).max(0) as f64;
                if account.known_limits && elapsed >= limit {
                    return Err(Shortfall::Exhausted {
                        kind: BudgetKind::WallClockS,
                        limit,
                        observed: elapsed,
                        account: jti.clone(),
                    });
                }
            }
            for (&kind, &amount) in amounts {
                let Some(&limit) = account.limits.get(&kind) else {
                    continue;
                };
                let (used, reserved) = (account.used(kind), account.reserved(kind));
                if used + reserved + amount > limit + 1e-12 {
                    if reserved > 0.0 && used + amount <= limit + 1e-12 {
                        return Err(Shortfall::Wait);
                    }
                    return Err(Shortfall::Exhausted {
                        kind,
                        limit,
                        observed: used + amount,
                        account: jti.clone(),
                    });
                }
            }
        }
        let mut limited = false;
        for jti in &chain {
            if let Some(account) = accounts.get_mut(jti) {
                limited |= amounts.keys().any(|kind| account.limits.contains_key(kind));
                if fleet {
                    continue;
                }
                for (&kind, &amount) in amounts {
                    *account.reserved.entry(kind).or_default() += amount;
                }
            }
        }
        Ok(Reservation {
            ledger: self.clone(),
            chain,
            amounts: amounts.clone(),
            done: false,
            limited,
            spend_id: None,
            fleet,
        })
    }

    /// One attempt through the fleet's ledger: read the chain's accounts there, decide with
    /// them, and record a granted reservation there before it is returned. Refused when the
    /// fleet cannot be reached or read (`control_io`, `control_state_corrupt`).
    async fn try_reserve_fleet(
        self: &Arc<Self>,
        fleet: Arc<dyn FleetLedger>,
        claims: &Claims,
        amounts: &Budgets,
        now_s: i64,
    ) -> Result<Reservation, Shortfall> {
        let (ledger, claims, amounts) = (self.clone(), claims.clone(), amounts.clone());
        let attempt = tokio::task::spawn_blocking(move || {
            let chain = {
                let mut accounts = ledger.accounts.lock().unwrap_or_else(|p| p.into_inner());
                Ledger::register_in(&mut accounts, &claims);
                Ledger::chain_of(&accounts, &claims.jti)
            };
            let mut decided = None;
            let recorded = fleet.reserve(&chain, &amounts, &mut |seen| {
                ledger.set_fleet(seen);
                let outcome = ledger.try_reserve_in(&claims, &amounts, now_s, true);
                let granted = outcome.is_ok();
                // A grant an earlier attempt made is dropped here: it touched no counter.
                decided = Some(outcome);
                granted
            });
            match (recorded, decided) {
                (Ok(Some(id)), Some(Ok(mut reservation))) => {
                    reservation.spend_id = Some(id);
                    Ok(reservation)
                }
                (Ok(_), Some(Err(shortfall))) => Err(shortfall),
                (Ok(_), _) => Err(Shortfall::Unrecorded(
                    stopline_core::RefusalCode::ControlIo,
                    "the fleet's ledger recorded no decision".into(),
                )),
                (Err(refusal), _) => Err(Shortfall::Unrecorded(refusal.code, refusal.message)),
            }
        })
        .await;
        attempt.unwrap_or_else(|error| {
            Err(Shortfall::Unrecorded(
                stopline_core::RefusalCode::ControlIo,
                error.to_string(),
            ))
        })
    }

    /// One attempt through the spending journals: under the spend lock, take in the other
    /// gateways' spending, decide, and record a granted reservation on a limit (fsynced) before
    /// the lock is released. A reservation that cannot be recorded is released, not granted.
    async fn try_reserve_recorded(
        self: &Arc<Self>,
        journal: SpendJournal,
        claims: &Claims,
        amounts: &Budgets,
        now_s: i64,
    ) -> Result<Reservation, Shortfall> {
        let (ledger, claims, amounts) = (self.clone(), claims.clone(), amounts.clone());
        let attempt = tokio::task::spawn_blocking(move || {
            let lock = journal.lock()?;
            ledger.set_elsewhere(lock.elsewhere());
            let mut reservation = match ledger.try_reserve(&claims, &amounts, now_s) {
                Ok(reservation) => reservation,
                Err(shortfall) => return Ok(Err(shortfall)),
            };
            if reservation.limited {
                // On error the reservation drops here, released.
                let id = lock.reserved(&reservation.chain, &reservation.amounts)?;
                reservation.spend_id = Some(id);
            }
            Ok::<_, stopline_store::StoreError>(Ok(reservation))
        })
        .await;
        match attempt {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(error)) => Err(Shortfall::Unrecorded(
                error.to_refusal().code,
                error.to_string(),
            )),
            Err(error) => Err(Shortfall::Unrecorded(
                stopline_core::RefusalCode::ControlIo,
                error.to_string(),
            )),
        }
    }

    /// Reserve, waiting up to `wait` for outstanding reservations to settle.
    pub async fn reserve(
        self: &Arc<Self>,
        claims: &Claims,
        amounts: &Budgets,
        now_s: impl Fn() -> i64,
        wait: Duration,
    ) -> Result<Reservation, Shortfall> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            let attempt = match (&self.fleet, &self.journal) {
                (Some(fleet), _) if self.may_draw_on_limit(claims, amounts) => {
                    self.try_reserve_fleet(fleet.clone(), claims, amounts, now_s())
                        .await
                }
                (None, Some(journal)) if self.may_draw_on_limit(claims, amounts) => {
                    self.try_reserve_recorded(journal.clone(), claims, amounts, now_s())
                        .await
                }
                _ => self.try_reserve(claims, amounts, now_s()),
            };
            match attempt {
                Err(Shortfall::Wait) => {
                    // A settlement here wakes it; one at another gateway does not, so look
                    // again every 50 ms.
                    let look_again = tokio::time::Instant::now() + Duration::from_millis(50);
                    let _ = tokio::time::timeout_at(look_again.min(deadline), settled).await;
                    if tokio::time::Instant::now() >= deadline {
                        return Err(Shortfall::Wait);
                    }
                }
                other => return other,
            }
        }
    }

    /// The remaining amount of `kind` for `jti` (limit − used − reserved), if limited.
    pub fn remaining(&self, jti: &str, kind: BudgetKind) -> Option<f64> {
        let accounts = self.accounts.lock().unwrap_or_else(|p| p.into_inner());
        let account = accounts.get(jti)?;
        let limit = *account.limits.get(&kind)?;
        Some((limit - account.used(kind) - account.reserved(kind)).max(0.0))
    }

    /// (kind, used, limit) of every limited kind of every account, for metrics.
    pub fn usage(&self) -> Vec<(String, BudgetKind, f64, f64)> {
        let accounts = self.accounts.lock().unwrap_or_else(|p| p.into_inner());
        let mut rows = Vec::new();
        for (jti, account) in accounts.iter() {
            for (&kind, &limit) in &account.limits {
                let used = account.used.get(&kind).copied().unwrap_or(0.0);
                rows.push((jti.clone(), kind, used, limit));
            }
        }
        rows
    }

    /// Every account with limits, for the status page, sorted by agent then token (spending
    /// through other gateways included, as of the last look).
    pub fn summaries(&self, now_s: i64) -> Vec<AccountSummary> {
        let accounts = self.accounts.lock().unwrap_or_else(|p| p.into_inner());
        let mut rows: Vec<AccountSummary> = accounts
            .iter()
            .filter(|(_, account)| account.known_limits && !account.limits.is_empty())
            .map(|(jti, account)| AccountSummary {
                agent: account.chain.last().cloned().unwrap_or_default(),
                chain: account.chain.clone(),
                token: short_jti(jti),
                parent: account.parent.as_deref().map(short_jti),
                budgets: account
                    .limits
                    .iter()
                    .map(|(&kind, &limit)| {
                        let used = if kind == BudgetKind::WallClockS {
                            (now_s - account.iat).max(0) as f64
                        } else {
                            account.used(kind)
                        };
                        let reserved = account.reserved(kind);
                        (
                            kind.as_str().to_string(),
                            KindUse {
                                limit,
                                used,
                                reserved,
                            },
                        )
                    })
                    .collect(),
            })
            .collect();
        rows.sort_by(|a, b| (&a.agent, &a.token).cmp(&(&b.agent, &b.token)));
        rows
    }

    fn finish(
        &self,
        chain: &[String],
        amounts: &Budgets,
        actual: Option<&Budgets>,
        spend_id: Option<&str>,
        fleet: bool,
    ) {
        if fleet {
            // Recorded in the fleet's ledger only: settled there (queued, retried until it
            // lands; a gateway that dies first leaves it to its lease), never counted here.
            if let (Some(ledger), Some(id)) = (&self.fleet, spend_id) {
                ledger.settle(chain, id, actual.unwrap_or(&Budgets::new()));
            }
            self.settled.notify_waiters();
            return;
        }
        if let (Some(journal), Some(id)) = (&self.journal, spend_id) {
            // Not fsynced: a settlement lost in a crash only counts the call at its bound.
            if let Err(error) = journal.settled(id, actual.unwrap_or(&Budgets::new())) {
                tracing::warn!(%error, id, "a settlement was not recorded; a restart counts the call at its bound");
            }
        }
        let mut accounts = self.accounts.lock().unwrap_or_else(|p| p.into_inner());
        for jti in chain {
            if let Some(account) = accounts.get_mut(jti) {
                for (&kind, &amount) in amounts {
                    let reserved = account.reserved.entry(kind).or_default();
                    *reserved = (*reserved - amount).max(0.0);
                }
                for (&kind, &amount) in actual.into_iter().flatten() {
                    *account.used.entry(kind).or_default() += amount;
                }
            }
        }
        drop(accounts);
        self.settled.notify_waiters();
    }
}

impl Reservation {
    /// What was reserved.
    pub fn amounts(&self) -> &Budgets {
        &self.amounts
    }

    /// Replace the reservation with what was actually used (capped at nothing; actual use is
    /// recorded even when it exceeds the bound, so a lying upstream shows up as overrun).
    pub fn settle(mut self, actual: &Budgets) {
        self.done = true;
        self.ledger.finish(
            &self.chain,
            &self.amounts,
            Some(actual),
            self.spend_id.as_deref(),
            self.fleet,
        );
    }

    /// Settle at the reserved upper bound (the outcome is unknown).
    pub fn settle_at_bound(mut self) {
        self.done = true;
        let amounts = self.amounts.clone();
        self.ledger.finish(
            &self.chain,
            &self.amounts,
            Some(&amounts),
            self.spend_id.as_deref(),
            self.fleet,
        );
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.done {
            self.ledger.finish(
                &self.chain,
                &self.amounts,
                None,
                self.spend_id.as_deref(),
                self.fleet,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stopline_core::{Name, Role};

    fn claims(jti: char, parent: Option<char>, limit: f64) -> Claims {
        Claims {
            v: 1,
            jti: jti.to_string().repeat(32),
            chain: vec![Name::parse("a").unwrap()],
            project: None,
            run: None,
            role: Role::Agent,
            epoch: 0,
            iat: 0,
            exp: 10,
            budgets: [(BudgetKind::ToolCalls, limit)].into(),
            parent: parent.map(|p| p.to_string().repeat(32)),
            labels: Default::default(),
            lineage: Vec::new(),
        }
    }

    #[test]
    fn a_child_spends_from_its_parent_and_reservations_never_overrun() {
        let ledger = Arc::new(Ledger::default());
        let parent = claims('a', None, 3.0);
        let child = claims('b', Some('a'), 3.0);
        ledger.register(&parent);
        let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
        let r1 = ledger.try_reserve(&child, &one, 0).unwrap();
        let r2 = ledger.try_reserve(&parent, &one, 0).unwrap();
        let r3 = ledger.try_reserve(&child, &one, 0).unwrap();
        assert_eq!(
            ledger.try_reserve(&child, &one, 0).unwrap_err(),
            Shortfall::Wait
        );
        r1.settle(&one);
        r2.settle(&one);
        drop(r3);
        let r4 = ledger.try_reserve(&parent, &one, 0).unwrap();
        r4.settle(&one);
        assert!(matches!(
            ledger.try_reserve(&child, &one, 0),
            Err(Shortfall::Exhausted { .. })
        ));
        assert_eq!(
            ledger.remaining(&parent.jti, BudgetKind::ToolCalls),
            Some(0.0)
        );
    }

    #[test]
    fn summaries_show_use_and_reservations_per_token_without_the_token() {
        let ledger = Arc::new(Ledger::default());
        let parent = claims('a', None, 3.0);
        let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
        ledger.try_reserve(&parent, &one, 0).unwrap().settle(&one);
        let held = ledger.try_reserve(&parent, &one, 0).unwrap();
        let rows = ledger.summaries(5);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].agent, "a");
        assert_eq!(rows[0].token, "a".repeat(12));
        let use_ = rows[0].budgets["tool_calls"];
        assert_eq!((use_.limit, use_.used, use_.reserved), (3.0, 1.0, 1.0));
        drop(held);
    }

    /// A fleet ledger in memory: one account map, or unreachable.
    #[derive(Debug, Default)]
    struct FakeFleet {
        accounts: Mutex<crate::fleet::FleetAccounts>,
        unreachable: bool,
        settled: Mutex<Vec<(String, Budgets)>>,
    }

    impl FleetLedger for FakeFleet {
        fn reserve(
            &self,
            chain: &[String],
            amounts: &Budgets,
            decide: &mut dyn FnMut(&FleetAccounts) -> bool,
        ) -> Result<Option<String>, stopline_core::Refusal> {
            if self.unreachable {
                return Err(stopline_core::Refusal::new(
                    stopline_core::RefusalCode::ControlIo,
                    "unreachable",
                ));
            }
            let mut accounts = self.accounts.lock().unwrap();
            let seen: FleetAccounts = chain
                .iter()
                .map(|jti| (jti.clone(), accounts.get(jti).cloned().unwrap_or_default()))
                .collect();
            if !decide(&seen) {
                return Ok(None);
            }
            for jti in chain {
                let account = accounts.entry(jti.clone()).or_default();
                for (&kind, &amount) in amounts {
                    *account.reserved.entry(kind).or_default() += amount;
                }
            }
            Ok(Some("r".into()))
        }

        fn settle(&self, _chain: &[String], id: &str, actual: &Budgets) {
            self.settled
                .lock()
                .unwrap()
                .push((id.to_string(), actual.clone()));
        }
    }

    #[test]
    fn a_fleet_ledger_decides_on_the_fleets_figures_and_an_unreachable_one_refuses() {
        // Time enabled for the reservation's own wait bound (10 ms), which the refusal ends.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
        let limited = claims('a', None, 3.0);
        let fleet = Arc::new(FakeFleet::default());
        // Other gateways spent two and hold one open: nothing fits, one settlement may free it.
        fleet.accounts.lock().unwrap().insert(
            limited.jti.clone(),
            crate::fleet::FleetUse {
                used: [(BudgetKind::ToolCalls, 2.0)].into(),
                reserved: one.clone(),
            },
        );
        let ledger = Arc::new(Ledger::fleet(fleet.clone()));
        let wait = Duration::from_millis(10);
        let refused = runtime.block_on(ledger.reserve(&limited, &one, || 0, wait));
        assert_eq!(refused.unwrap_err(), Shortfall::Wait);
        fleet.accounts.lock().unwrap().clear();
        let held = runtime
            .block_on(ledger.reserve(&limited, &one, || 0, wait))
            .unwrap();
        assert!(held.fleet && held.spend_id.as_deref() == Some("r"));
        held.settle(&one);
        assert_eq!(
            fleet.settled.lock().unwrap().len(),
            1,
            "settled in the fleet"
        );
        assert_eq!(
            ledger.remaining(&limited.jti, BudgetKind::ToolCalls),
            Some(3.0),
            "this gateway's own counters never held the fleet's reservation"
        );
        let cut_off = Arc::new(Ledger::fleet(Arc::new(FakeFleet {
            unreachable: true,
            ..Default::default()
        })));
        assert!(matches!(
            runtime.block_on(cut_off.reserve(&limited, &one, || 0, wait)),
            Err(Shortfall::Unrecorded(
                stopline_core::RefusalCode::ControlIo,
                _
            ))
        ));
    }

    #[test]
    fn only_a_chain_that_may_draw_on_a_limit_goes_through_the_spend_journal() {
        let dir = tempfile::tempdir().unwrap();
        let store = stopline_store::Store::open(dir.path().join("home"));
        store.ensure_home().unwrap();
        let ledger = Arc::new(Ledger::durable(store.spend().journal("test").unwrap()));
        let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
        let mut unlimited = claims('a', None, 3.0);
        unlimited.budgets = Budgets::new();
        assert!(!ledger.may_draw_on_limit(&unlimited, &one));
        let limited = claims('b', None, 3.0);
        assert!(ledger.may_draw_on_limit(&limited, &one));
        let mut orphan = claims('c', Some('z'), 3.0);
        orphan.budgets = Budgets::new();
        assert!(
            ledger.may_draw_on_limit(&orphan, &one),
            "a parent never seen here may limit the call"
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let wait = Duration::from_millis(10);
        let held = runtime
            .block_on(ledger.reserve(&unlimited, &one, || 0, wait))
            .unwrap();
        assert!(!held.limited && held.spend_id.is_none());
        let recorded = runtime
            .block_on(ledger.reserve(&limited, &one, || 0, wait))
            .unwrap();
        assert!(
            recorded.spend_id.is_some(),
            "a limited reservation is recorded"
        );
    }
}
