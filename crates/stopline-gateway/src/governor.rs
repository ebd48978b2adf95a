//! The [`Governor`]: the one admission path every proxied call takes (model proxy, MCP proxy,
//! `/v1/check`), shared with the MCP proxy crate as a cloneable handle.
//!
//! It authenticates the bearer token, derives the task class from configuration and the token's
//! role (never from the agent's claim), decides from the in-memory view through
//! `ControlView::decide`, holds noncritical work under HALT_NONCRITICAL, reserves budgets along
//! the token chain, consults the agent and adapter breakers, records a prepared operation (fsync)
//! before dispatch, and re-checks admission at dispatch. Calls are admitted in `admit.rs`; this
//! file holds the shared state and the decision itself.

use crate::breaker::{
    AdapterBreakers, AdapterState, AgentBreakerSummary, AgentBreakers, BreakerKind,
};
use crate::budget::{AccountSummary, Ledger, Reservation, Shortfall};
use crate::caller::{Authenticator, Caller};
use crate::config::{GatewayConfig, McpServerConfig};
use crate::inflight::{DispatchTracker, Ticket};
use crate::metrics::{Metrics, ScrapeState};
use crate::refusals::{Key as RefusalKey, RefusalCache};
use crate::trip::Tripper;
use crate::view::{Snapshot, ViewHolder};
use crate::waiters::{Interest, Registration};
use std::sync::Arc;
use std::time::Duration;
use stopline_control::Context;
use stopline_core::budget::{BudgetKind, Budgets};
use stopline_core::view::{Authority, Blocker};
use stopline_core::{
    CheckReceipt, ControlState, Decision, Mode, Refusal, RefusalCode, Role, TaskClass,
};
use stopline_store::ops::OpsJournal;
use stopline_token::{Claims, SigningKey};

/// The cloneable handle on the gateway's admission machinery. Its parts are private: the other
/// modules (admission, routes, the page, the exchange) use the methods below, so what a call
/// may do to the view, the ledger, the breakers and the journal is written down here.
#[derive(Clone, Debug)]
pub struct Governor {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    ctx: Context,
    /// The configuration in force: swapped whole by a reload (`reload.rs`), read whole by each
    /// use (a call never sees half of one file and half of another).
    config: crate::config::SharedConfig,
    /// `[mcp.<server>]` as the gateway started: the proxy's routes and tool servers are set up
    /// from it once, so a reload never changes it (a restart does).
    mcp: std::collections::BTreeMap<String, McpServerConfig>,
    auth: Authenticator,
    /// This host's signing key, when it is the key every host verifies with (`None` on a host
    /// of a distributed plane whose published key is another host's: it cannot delegate).
    signing: Option<SigningKey>,
    view: Arc<ViewHolder>,
    tracker: Arc<DispatchTracker>,
    ledger: Arc<Ledger>,
    /// The delegated tokens minted here and still live, per chain root (docs/reference.md §6).
    delegates: crate::delegates::LiveDelegates,
    agents: Arc<AgentBreakers>,
    /// The fleet's breaker counters, on a distributed plane.
    fleet_breakers: Option<Arc<dyn crate::fleet::FleetBreakers>>,
    adapters: AdapterBreakers,
    /// Carries out breaker trips (it shares `agents` and `view`, nothing else of this).
    tripper: Tripper,
    journal: OpsJournal,
    metrics: Metrics,
    /// Refusals already worded under the current view (see `refusals.rs`).
    refusals: RefusalCache,
    server_id: String,
    /// The pooled upstream client every model exchange, the bench's passthrough and the
    /// breakers' webhooks are sent with (`client.rs`).
    upstream: crate::client::UpstreamClient,
    /// Who created which Responses API response, and the background ones still open
    /// (`responses.rs`).
    responses: crate::response_book::ResponseBook,
    /// Which A2A tasks each chain opened, and the sends still open on them (`a2a.rs`).
    a2a_tasks: crate::a2a_book::TaskBook,
    /// Where alerts are queued (`None` for a governor made outside a runtime, which has no
    /// task to deliver them on).
    alerts: Option<crate::alerts::Alerts>,
    /// `serve --access-log`: log every admitted call at its end.
    access_log: std::sync::atomic::AtomicBool,
}

impl Governor {
    pub(crate) fn new(
        ctx: Context,
        config: GatewayConfig,
        view: Arc<ViewHolder>,
        tracker: Arc<DispatchTracker>,
        server_id: String,
        fleet: crate::fleet::Fleet,
    ) -> Result<Governor, Refusal> {
        let signing = ctx.signing_key()?;
        let verifying = ctx.verifying_key()?;
        let issuer = signing.verifying_key() == verifying;
        let journal = ctx
            .store
            .ops()
            .journal("gateway")
            .map_err(|e| e.to_refusal())?;
        let ledger = match fleet.budgets {
            // On a distributed plane budgets are the fleet's, kept by its backend (and read
            // there at every reservation that draws on a limit); this home's journals are not
            // used.
            Some(fleet) => Ledger::fleet(fleet),
            None => {
                // Budgets survive restarts and are shared with every gateway over this home:
                // start from what the spending journals say (a corrupt one refuses the start).
                let spend = ctx
                    .store
                    .spend()
                    .journal("gateway")
                    .map_err(|e| e.to_refusal())?;
                let ledger = Ledger::durable(spend.clone());
                ledger.set_elsewhere(spend.lock().map_err(|e| e.to_refusal())?.elsewhere());
                ledger
            }
        };
        let upstream = crate::client::UpstreamClient::new();
        let agents = Arc::new(AgentBreakers::default());
        let mcp = config.mcp.clone();
        let config: crate::config::SharedConfig = Arc::new(arc_swap::ArcSwap::from_pointee(config));
        let alerts = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => Some(crate::alerts::Alerts::start(
                &runtime,
                config.clone(),
                upstream.clone(),
            )),
            Err(_) => None,
        };
        let tripper = Tripper::new(
            ctx.clone(),
            agents.clone(),
            view.clone(),
            config.clone(),
            server_id.clone(),
            alerts.clone(),
        );
        Ok(Governor {
            inner: Arc::new(Inner {
                auth: Authenticator::new(verifying),
                signing: issuer.then_some(signing),
                ctx,
                config,
                mcp,
                alerts,
                view,
                tracker,
                ledger: Arc::new(ledger),
                delegates: crate::delegates::LiveDelegates::default(),
                agents,
                fleet_breakers: fleet.breakers,
                adapters: AdapterBreakers::default(),
                tripper,
                journal,
                metrics: Metrics::new(),
                refusals: RefusalCache::default(),
                server_id,
                upstream,
                responses: Default::default(),
                a2a_tasks: Default::default(),
                access_log: Default::default(),
            }),
        })
    }

    /// Authenticate an `Authorization` header value (`Bearer <token>`, or a bare token).
    /// Refuses `token_invalid` / `token_expired` (HTTP 401). Does not judge the epoch.
    pub fn authenticate(&self, bearer: Option<&str>) -> Result<Caller, Refusal> {
        let result = self.inner.auth.authenticate(bearer, self.now_s());
        if let Err(refusal) = &result {
            self.inner.metrics.decision("block", Some(refusal.code));
            crate::logs::unauthenticated(refusal);
        }
        result
    }

    /// Whether every admitted call is logged at its end (`serve --access-log`).
    pub fn access_log(&self) -> bool {
        self.inner
            .access_log
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Log every admitted call at its end, or stop doing so.
    pub fn set_access_log(&self, on: bool) {
        self.inner
            .access_log
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// The gateway configuration (`[mcp.*]`, `[model]`, `[breakers]`, prices, timeouts).
    pub fn config(&self) -> Arc<GatewayConfig> {
        self.inner.config.load_full()
    }

    /// The configuration cell a reload swaps (`reload.rs`).
    pub(crate) fn shared_config(&self) -> &crate::config::SharedConfig {
        &self.inner.config
    }

    /// The alert queue (`None` for a governor made outside a runtime).
    pub(crate) fn alerts(&self) -> Option<crate::alerts::Alerts> {
        self.inner.alerts.clone()
    }

    /// The `[mcp.<server>]` section, if configured.
    pub fn mcp_server(&self, server: &str) -> Option<&McpServerConfig> {
        self.inner.mcp.get(server)
    }

    /// The control-plane context (store and shared config).
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// This gateway's registration id in `servers/`.
    pub fn server_id(&self) -> &str {
        &self.inner.server_id
    }

    /// The current view snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.view.load()
    }

    /// The Prometheus exposition (`GET /metrics`): the counters kept on the request path and
    /// the state gauges read now from the view, the ledger and the breakers admission uses.
    pub(crate) fn scrape_metrics(&self) -> String {
        let inner = &self.inner;
        let snapshot = inner.view.load();
        let state = ScrapeState {
            latches: snapshot.view.latches.len(),
            view_age_ms: self.now_ms() - snapshot.loaded_ms,
            view_generation: snapshot.generation,
            view_degraded: inner.view.is_degraded(),
            budgets: inner
                .ledger
                .usage()
                .into_iter()
                .map(|(jti, kind, used, limit)| (jti, kind.as_str().to_string(), used, limit))
                .collect(),
            adapters: self
                .adapter_states(&snapshot)
                .into_iter()
                .map(|(name, state)| (name, state.gauge()))
                .collect(),
            tripped_agents: inner.agents.tripped_agents(),
        };
        inner.metrics.render(&state)
    }

    /// The pooled upstream client model exchanges are sent with.
    pub fn upstream_client(&self) -> &crate::client::UpstreamClient {
        &self.inner.upstream
    }

    /// The A2A task book (`a2a.rs`).
    pub(crate) fn a2a_tasks(&self) -> &crate::a2a_book::TaskBook {
        &self.inner.a2a_tasks
    }

    /// The Responses API ownership book (`responses.rs`).
    pub(crate) fn responses(&self) -> &crate::response_book::ResponseBook {
        &self.inner.responses
    }

    pub(crate) fn now_s(&self) -> i64 {
        self.inner.ctx.now_s()
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.inner.ctx.store.now_ms()
    }

    /// Put a token `/v1/delegate` minted in the home's registry, fsynced, before anyone sees it
    /// (docs/reference.md §5, "Revoking one token").
    pub(crate) fn record_minted(&self, claims: &stopline_token::Claims) -> Result<(), Refusal> {
        stopline_control::tokens::record(&self.inner.ctx.store, claims)
    }

    /// `[tokens] max_ttl_s`: the longest lifetime of a token `/v1/delegate` mints.
    pub(crate) fn max_ttl_s(&self) -> u64 {
        self.inner.ctx.config.tokens.max_ttl_s.get()
    }

    /// The key delegated tokens are signed with; refused on a host that does not hold the
    /// control plane's published key (no other host would accept what it signed).
    pub(crate) fn signing_key(&self) -> Result<&SigningKey, Refusal> {
        self.inner.signing.as_ref().ok_or_else(|| {
            Refusal::new(
                RefusalCode::TokenInvalid,
                "this gateway's host does not hold the control plane's signing key; delegate at the issuing host's gateway",
            )
        })
    }

    /// The class a call is admitted as: critical only for a token of role `critical` doing
    /// something the configuration admits as critical (a tool in `critical_tools`; any model
    /// request or non-tool request); never from the agent's own claim.
    pub fn class_for(&self, caller: &Caller, critical_by_config: bool) -> TaskClass {
        if caller.role() == Role::Critical && critical_by_config {
            TaskClass::Critical
        } else {
            TaskClass::Noncritical
        }
    }

    /// Decide one call from `snapshot` (no side effects): staleness of the view, faults, the
    /// token's epoch standing, the machine state, the subject's mode, and unresolved targets.
    pub(crate) fn judge(
        &self,
        snapshot: &Snapshot,
        caller: &Caller,
        class: TaskClass,
        target: Option<&str>,
    ) -> CheckReceipt {
        self.judge_at(snapshot, caller, class, target, &[])
    }

    /// [`Governor::judge`] for a call that also works in `paths` (a hook's working directory
    /// and file paths): a project stop covering any of them covers the call, as it does in
    /// local mode (docs/reference.md §6).
    pub(crate) fn judge_at(
        &self,
        snapshot: &Snapshot,
        caller: &Caller,
        class: TaskClass,
        target: Option<&str>,
        paths: &[std::path::PathBuf],
    ) -> CheckReceipt {
        let subject = if paths.is_empty() {
            std::borrow::Cow::Borrowed(caller.subject())
        } else {
            let mut subject = caller.subject().clone();
            subject.projects.extend(paths.iter().cloned());
            std::borrow::Cow::Owned(subject)
        };
        let now = self.now_ms();
        if let Some(refusal) = self.inner.view.staleness(snapshot, now) {
            return CheckReceipt::block(Mode::Emergency, refusal.code, refusal.message, Vec::new());
        }
        if class == TaskClass::Noncritical {
            // A distributed source that has not heard from its backend within its permit.
            if let Some(refusal) = self.permit_lapsed() {
                return CheckReceipt::block(
                    Mode::HaltAll,
                    refusal.code,
                    refusal.message,
                    Vec::new(),
                );
            }
        }
        let authority = Authority {
            issue_epoch: caller.claims().epoch,
        };
        let fresh;
        let snapshot = if authority.minted_after(&snapshot.view) {
            // A token minted a moment ago is not refused as future: re-read before judging.
            fresh = self.inner.view.refresh_fast();
            &fresh
        } else {
            snapshot
        };
        // Admission counts the latches staged in `latches.staging/` too (`view.rs`).
        let decide = || snapshot.decide_admission(&subject, class, Some(authority), target, now);
        // A refusal is worded once per token, class, target, view and second (`refusals.rs`);
        // paths widen the subject beyond the token's, so a call with paths is decided afresh.
        let receipt = if paths.is_empty() {
            let key = RefusalKey {
                generation: snapshot.generation,
                now_ms: now,
                token: caller.shared_token(),
                class,
                target,
            };
            self.inner.refusals.get_or_decide(key, decide)
        } else {
            decide()
        };
        if receipt.decision == Decision::Allow && target.is_some() {
            if let Some(why) = snapshot
                .view
                .blocked_targets
                .get("*")
                .and_then(|b| b.first())
            {
                return CheckReceipt::block(
                    receipt.mode,
                    RefusalCode::UnresolvedOperation,
                    format!("the operation registry cannot be read: {}", why.op),
                    receipt.latches,
                );
            }
        }
        receipt
    }

    /// True when a draining machine still lets an operation prepared at `prepared_ms` dispatch.
    pub(crate) fn drain_allows(&self, snapshot: &Snapshot, prepared_ms: Option<i64>) -> bool {
        let state = &snapshot.view.state;
        let now = self.now_ms();
        matches!(state.effective(now), ControlState::Draining)
            && snapshot.view.faults.is_empty()
            && matches!((prepared_ms, state.prepared_before_unix_ms), (Some(p), Some(b)) if p < b)
    }

    /// A check receipt for `/v1/check`: never an error, a bad token is a `block`.
    pub fn check(
        &self,
        bearer: Option<&str>,
        class: TaskClass,
        target: Option<&str>,
    ) -> CheckReceipt {
        self.check_at(bearer, class, target, &[])
    }

    /// [`Governor::check`] for a call that also works in `paths` (canonical, absolute).
    pub fn check_at(
        &self,
        bearer: Option<&str>,
        class: TaskClass,
        target: Option<&str>,
        paths: &[std::path::PathBuf],
    ) -> CheckReceipt {
        let caller = match self.authenticate(bearer) {
            Ok(caller) => caller,
            Err(refusal) => {
                // The mode an unprovable caller is in (every agent latch covers it), never a
                // made-up EMERGENCY for a token that could not be read (docs/reference.md §4).
                let unprovable =
                    stopline_core::Subject::unprovable(None, paths.to_vec(), Vec::new());
                let mode = self.snapshot().view.mode_for(&unprovable);
                return CheckReceipt::refused(mode, refusal, Vec::new());
            }
        };
        // The target is the agent's string, written back in the receipt and the logs: bounded
        // like every recorded string (docs/reference.md §6), and judged no further. (The further
        // `file:` targets are places only, read as paths and never written.)
        let too_long =
            target.and_then(|t| stopline_core::refusal::bounded_record("target", t).err());
        if let Some(refusal) = too_long {
            let mode = self.snapshot().view.mode_for(caller.subject());
            return CheckReceipt::refused(mode, refusal, Vec::new());
        }
        let class = if class == TaskClass::Critical {
            self.class_for(&caller, true)
        } else {
            TaskClass::Noncritical
        };
        let receipt = self.judge_at(&self.snapshot(), &caller, class, target, paths);
        self.inner
            .metrics
            .decision(receipt.decision.as_str(), receipt.code);
        receipt
    }

    /// Count an unauthorized call by `caller` (feeds the `unauthorized_calls` breaker).
    pub fn note_unauthorized(&self, caller: &Caller, what: &str) {
        self.note_breaker(caller.agent(), BreakerKind::UnauthorizedCalls, what, 1.0);
    }

    /// Count a refused egress attempt by `caller` (feeds the `refused_egress` breaker).
    pub fn note_refused_egress(&self, caller: &Caller, what: &str) {
        self.note_breaker(caller.agent(), BreakerKind::RefusedEgress, what, 1.0);
    }

    /// Feed a monitor's anomaly score for `agent`.
    pub fn note_anomaly(&self, agent: &str, score: f64) {
        self.note_breaker(
            agent,
            BreakerKind::AnomalyScore,
            &format!("anomaly score {score}"),
            score,
        );
    }

    /// Why noncritical work must be refused now: the view's source has not heard from its
    /// distributed backend within its permit (`None` for the local directory).
    pub(crate) fn permit_lapsed(&self) -> Option<Refusal> {
        self.inner.view.source().permit_lapsed()
    }

    /// How long the view source's permit holds from now (`None`: it never lapses by time).
    pub(crate) fn permit_left(&self) -> Option<std::time::Duration> {
        self.inner.view.source().permit_left()
    }

    /// The oldest the view may be (ms) before it closes the gate.
    pub(crate) fn max_view_age_ms(&self) -> i64 {
        self.inner.view.max_age_ms()
    }

    /// Re-read the view now (after this gateway changed the control state itself).
    pub(crate) fn refresh_view(&self) -> Arc<Snapshot> {
        self.inner.view.refresh_fast()
    }

    /// Register `caller` as waiting on the view for `interest`: a changed view wakes the
    /// registration only when it concerns it (see `waiters.rs`). Register before checking.
    pub(crate) fn wait_on_view(&self, caller: &Caller, interest: Interest) -> Registration {
        self.inner.view.waiters().register(caller, interest)
    }

    /// Register a wait on the view with no caller for `interest` (woken at every change).
    pub(crate) fn wait_on_view_uncalled(&self, interest: Interest) -> Registration {
        self.inner.view.waiters().register_uncalled(interest)
    }

    /// Block `target` in the view at once: an operation this gateway marked in doubt.
    pub(crate) fn block_target(&self, target: &str, blocker: Blocker) {
        self.inner.view.block_target(target, blocker);
    }

    /// Make every changed view swap in `delay` late (the drill's slow gateway only).
    pub(crate) fn delay_view_swaps_for_drill(&self, delay: std::time::Duration) {
        self.inner.view.delay_swaps_for_drill(delay);
    }

    /// The view's timeline, which the listener shares (a drill's marks only).
    pub(crate) fn view_timeline(&self) -> Arc<crate::timeline::Timeline> {
        self.inner.view.timeline().clone()
    }

    /// A dispatch ticket under the current view's generation (see `inflight.rs`): a latch is
    /// acknowledged only once every call admitted under an older view has been handed upstream.
    pub(crate) fn enter_dispatch(&self) -> Ticket {
        self.inner.tracker.enter(self.inner.view.load().generation)
    }

    /// This gateway's operation journal (`ops/gateway…`).
    pub(crate) fn journal(&self) -> &OpsJournal {
        &self.inner.journal
    }

    /// Count `refusal` as a blocked decision, and hand it back.
    pub(crate) fn refused(&self, refusal: Refusal) -> Refusal {
        self.count_decision("block", Some(refusal.code));
        refusal
    }

    /// Count a decision (`allow`, `queue`, `block`) in the metrics.
    pub(crate) fn count_decision(&self, outcome: &'static str, code: Option<RefusalCode>) {
        self.inner.metrics.decision(outcome, code);
    }

    /// Count how long admitting a call on `surface` took.
    pub(crate) fn count_admission_latency(&self, surface: &'static str, elapsed: Duration) {
        self.inner.metrics.admission_latency(surface, elapsed);
    }

    /// Count how long a call on `surface` took, admission to outcome.
    pub(crate) fn count_call_latency(&self, surface: &'static str, elapsed: Duration) {
        self.inner.metrics.call_latency(surface, elapsed);
    }

    /// The refusal `caller`'s agent breaker gives while the latch it tripped stands in
    /// `snapshot`.
    pub(crate) fn agent_breaker_refusal(
        &self,
        caller: &Caller,
        snapshot: &Snapshot,
    ) -> Option<Refusal> {
        self.inner
            .agents
            .check(caller.agent(), |latch| snapshot.latch_files.contains(latch))
    }

    /// Consult the adapter breaker of `upstream` (`model`, `mcp:<server>`) under `snapshot`.
    pub(crate) fn admit_upstream(
        &self,
        upstream: &str,
        snapshot: &Snapshot,
    ) -> Result<(), Refusal> {
        self.inner.adapters.admit(
            &self.inner.config.load().breakers,
            upstream,
            closes_adapters(snapshot),
        )
    }

    /// Tell the adapter breaker of `upstream` whether it was reached.
    pub(crate) fn record_upstream(&self, upstream: &str, reached: bool) {
        self.inner
            .adapters
            .record(&self.inner.config.load().breakers, upstream, reached);
    }

    /// Every adapter breaker's state under `snapshot`.
    pub(crate) fn adapter_states(&self, snapshot: &Snapshot) -> Vec<(String, AdapterState)> {
        self.inner.adapters.states(
            &self.inner.config.load().breakers,
            closes_adapters(snapshot),
        )
    }

    /// Every agent breaker, for the status page.
    pub(crate) fn agent_breaker_summaries(&self) -> Vec<AgentBreakerSummary> {
        self.inner.agents.summaries()
    }

    /// Reserve `amounts` along `claims`' chain before dispatch, waiting up to the queue timeout
    /// for calls in flight to settle.
    pub(crate) async fn reserve_budget(
        &self,
        claims: &Claims,
        amounts: &Budgets,
    ) -> Result<Reservation, Shortfall> {
        self.inner
            .ledger
            .reserve(
                claims,
                amounts,
                || self.now_s(),
                self.inner.config.load().queue_timeout(),
            )
            .await
    }

    /// What is left of `kind` on the account of token `jti`, if it has a limit.
    pub(crate) fn budget_remaining(&self, jti: &str, kind: BudgetKind) -> Option<f64> {
        self.inner.ledger.remaining(jti, kind)
    }

    /// Open the accounts of `claims` (a parent about to delegate).
    pub(crate) fn register_budgets(&self, claims: &Claims) {
        self.inner.ledger.register(claims);
    }

    /// Count a token minted through `/v1/delegate` against its chain's live delegates; refused
    /// `delegate_limit` when the chain holds the most it may (the token is then never handed
    /// out).
    pub(crate) fn admit_delegate(&self, child: &Claims) -> Result<(), Refusal> {
        let root = child.chain.first().map(|r| r.as_str()).unwrap_or_default();
        self.inner.delegates.admit(root, child.exp, self.now_s())
    }

    /// Open the accounts of a delegated token under its parent's.
    pub(crate) fn register_child_budgets(&self, child: &Claims) {
        self.inner.ledger.register_child(child);
    }

    /// The budget ledger itself, for the registration (which reports the budgets near their
    /// limit in every heartbeat); it only reads it.
    pub(crate) fn shared_ledger(&self) -> Arc<Ledger> {
        self.inner.ledger.clone()
    }

    /// Every budget account at `now_s`, for the status page.
    pub(crate) fn budget_summaries(&self, now_s: i64) -> Vec<AccountSummary> {
        self.inner.ledger.summaries(now_s)
    }

    /// A budget ran out: trip `agent`'s breaker with its evidence (see `trip.rs`).
    pub(crate) fn budget_exhausted(
        &self,
        agent: &str,
        kind: BudgetKind,
        limit: f64,
        observed: f64,
    ) {
        self.inner
            .tripper
            .budget_exhausted(agent, kind, limit, observed);
    }

    pub(crate) fn note_breaker(&self, agent: &str, kind: BreakerKind, trigger: &str, value: f64) {
        if agent.is_empty() {
            return;
        }
        let counted_by_fleet = matches!(
            kind,
            BreakerKind::UnauthorizedCalls | BreakerKind::RefusedEgress
        );
        if let Some(fleet) = self
            .inner
            .fleet_breakers
            .clone()
            .filter(|_| counted_by_fleet)
        {
            if self.inner.agents.is_tripped(agent) {
                return;
            }
            // Counted in the fleet off the request path; the trip follows from the fleet's count.
            let (gov, agent, trigger) = (self.clone(), agent.to_string(), trigger.to_string());
            let work = move || gov.note_in_fleet(fleet.as_ref(), &agent, kind, &trigger, value);
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => {
                    handle.spawn_blocking(work);
                }
                Err(_) => {
                    std::thread::spawn(work);
                }
            }
            return;
        }
        let order = self.inner.agents.note(
            &self.inner.config.load().breakers,
            agent,
            kind,
            trigger,
            value,
        );
        if let Some(order) = order {
            self.inner.tripper.spawn(order);
        }
    }

    /// Count one event in the fleet and trip on the fleet's count; a fleet that cannot be
    /// reached leaves this gateway's own count to decide (never no count at all).
    fn note_in_fleet(
        &self,
        fleet: &dyn crate::fleet::FleetBreakers,
        agent: &str,
        kind: BreakerKind,
        trigger: &str,
        value: f64,
    ) {
        let config = self.inner.config.load();
        let breakers = &config.breakers;
        let counted = match fleet.count(agent, kind) {
            Ok(count) => Some(count),
            Err(refusal) => {
                tracing::warn!(code = %refusal.code, message = %refusal.message, agent, "the fleet's breaker count cannot be reached; this gateway's own count decides");
                None
            }
        };
        let order = self
            .inner
            .agents
            .note_counted(breakers, agent, kind, trigger, value, counted);
        if let Some(order) = order {
            self.inner.tripper.spawn(order);
            if counted.is_some() {
                fleet.reset(agent, kind);
            }
        }
    }
}

/// True when the adapter breakers stand aside: a machine EMERGENCY or a view that closes every
/// gate (nothing reaches an upstream anyway, so a failure then says nothing about it).
fn closes_adapters(snapshot: &Snapshot) -> bool {
    snapshot.is_faulted()
        || snapshot.view.latches.iter().any(|l| {
            l.scope == stopline_core::Scope::Machine && l.level == stopline_core::Level::Emergency
        })
}
