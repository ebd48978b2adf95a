//! The [`Governor`]: the one admission path every proxied call takes (model proxy, MCP proxy,
//! `/v1/check`), shared with the MCP proxy crate as a cloneable handle.
//!
//! It authenticates the bearer token, derives the task class from configuration and the token's
//! role (never from the agent's claim), decides from the in-memory view through
//! `ControlView::decide`, holds noncritical work under HALT_NONCRITICAL, reserves budgets along
//! the token chain, consults the agent and adapter breakers, records a prepared operation (fsync)
//! before dispatch, and re-checks admission at dispatch. Calls are admitted in `admit.rs`; this
//! file holds the shared state and the decision itself.

use crate::breaker::{AdapterBreakers, AgentBreakers, BreakerKind};
use crate::budget::Ledger;
use crate::caller::{Authenticator, Caller};
use crate::config::{GatewayConfig, McpServerConfig};
use crate::inflight::DispatchTracker;
use crate::metrics::{Metrics, ScrapeState};
use crate::trip::Tripper;
use crate::view::{Snapshot, ViewHolder};
use std::sync::Arc;
use stopline_control::Context;
use stopline_core::view::Authority;
use stopline_core::{
    CheckReceipt, ControlState, Decision, Mode, Refusal, RefusalCode, Role, TaskClass,
};
use stopline_store::ops::OpsJournal;
use stopline_token::SigningKey;

/// The cloneable handle on the gateway's admission machinery.
#[derive(Clone, Debug)]
pub struct Governor {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) ctx: Context,
    pub(crate) config: GatewayConfig,
    pub(crate) auth: Authenticator,
    /// This host's signing key, when it is the key every host verifies with (`None` on a host
    /// of a distributed plane whose published key is another host's: it cannot delegate).
    pub(crate) signing: Option<SigningKey>,
    pub(crate) view: Arc<ViewHolder>,
    pub(crate) tracker: Arc<DispatchTracker>,
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) agents: Arc<AgentBreakers>,
    pub(crate) adapters: AdapterBreakers,
    /// Carries out breaker trips (it shares `agents` and `view`, nothing else of this).
    pub(crate) tripper: Tripper,
    pub(crate) journal: OpsJournal,
    pub(crate) metrics: Metrics,
    pub(crate) server_id: String,
    pub(crate) http: reqwest::Client,
}

impl Governor {
    pub(crate) fn new(
        ctx: Context,
        config: GatewayConfig,
        view: Arc<ViewHolder>,
        server_id: String,
    ) -> Result<Governor, Refusal> {
        let signing = ctx.signing_key()?;
        let verifying = ctx.verifying_key()?;
        let issuer = signing.verifying_key() == verifying;
        let journal = ctx
            .store
            .ops_journal("gateway")
            .map_err(|e| e.to_refusal())?;
        // Budgets survive restarts and are shared with every gateway over this home: start
        // from what the spending journals say (a corrupt one refuses the start).
        let spend = ctx
            .store
            .spend_journal("gateway")
            .map_err(|e| e.to_refusal())?;
        let ledger = Ledger::durable(spend.clone());
        ledger.set_elsewhere(spend.lock().map_err(|e| e.to_refusal())?.elsewhere());
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| Refusal::new(RefusalCode::ControlIo, e.to_string()))?;
        let agents = Arc::new(AgentBreakers::default());
        let tripper = Tripper::new(
            ctx.clone(),
            agents.clone(),
            view.clone(),
            &config,
            server_id.clone(),
            http.clone(),
        );
        Ok(Governor {
            inner: Arc::new(Inner {
                auth: Authenticator::new(verifying),
                signing: issuer.then_some(signing),
                ctx,
                config,
                view,
                tracker: Arc::new(DispatchTracker::default()),
                ledger: Arc::new(ledger),
                agents,
                adapters: AdapterBreakers::default(),
                tripper,
                journal,
                metrics: Metrics::new(),
                server_id,
                http,
            }),
        })
    }

    /// Authenticate an `Authorization` header value (`Bearer <token>`, or a bare token).
    /// Refuses `token_invalid` / `token_expired` (HTTP 401). Does not judge the epoch.
    pub fn authenticate(&self, bearer: Option<&str>) -> Result<Caller, Refusal> {
        let result = self.inner.auth.authenticate(bearer, self.now_s());
        if let Err(refusal) = &result {
            self.inner.metrics.decision("block", Some(refusal.code));
        }
        result
    }

    /// The gateway configuration (`[mcp.*]`, `[model]`, `[breakers]`, prices, timeouts).
    pub fn config(&self) -> &GatewayConfig {
        &self.inner.config
    }

    /// The `[mcp.<server>]` section, if configured.
    pub fn mcp_server(&self, server: &str) -> Option<&McpServerConfig> {
        self.inner.config.mcp.get(server)
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
        let emergency = snapshot.is_faulted()
            || snapshot.view.latches.iter().any(|l| {
                l.scope == stopline_core::Scope::Machine
                    && l.level == stopline_core::Level::Emergency
            });
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
            adapters: inner
                .adapters
                .states(&inner.config.breakers, emergency)
                .into_iter()
                .map(|(name, state)| (name, state.gauge()))
                .collect(),
            tripped_agents: inner.agents.tripped_agents(),
        };
        inner.metrics.render(&state)
    }

    /// The shared HTTP client for upstream calls.
    pub fn http_client(&self) -> &reqwest::Client {
        &self.inner.http
    }

    pub(crate) fn now_s(&self) -> i64 {
        self.inner.ctx.now_s()
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.inner.ctx.store.now_ms()
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
    /// local mode (SPEC §12.3).
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
            if let Some(refusal) = self.inner.view.source().permit_lapsed() {
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
        let receipt = snapshot
            .view
            .decide(&subject, class, Some(authority), target, now);
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
                // made-up EMERGENCY for a token that could not be read (SPEC §12.4).
                let unprovable =
                    stopline_core::Subject::unprovable(None, paths.to_vec(), Vec::new());
                let mode = self.snapshot().view.mode_for(&unprovable);
                return CheckReceipt::refused(mode, refusal, Vec::new());
            }
        };
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

    pub(crate) fn note_breaker(&self, agent: &str, kind: BreakerKind, trigger: &str, value: f64) {
        if agent.is_empty() {
            return;
        }
        let order =
            self.inner
                .agents
                .note(&self.inner.config.breakers, agent, kind, trigger, value);
        if let Some(order) = order {
            self.inner.tripper.spawn(order);
        }
    }
}
