//! Admitting one call: queueing, budgets, breakers, the prepared operation, and the guard that
//! re-checks at dispatch and records the outcome.
//!
//! Order of a call: agent breaker → view decision (queue under HALT_NONCRITICAL: the held call is
//! persisted as a prepared operation, re-admitted when the mode drops, failed at once on an
//! escalation, `queued_timeout` after `queue_timeout_s`) → budget reservation along the chain →
//! adapter breaker → `prepared` + fsync → [`Admission`]. The caller then calls
//! [`Admission::dispatch`] right before handing the call upstream (admission is re-checked there,
//! under a dispatch ticket, see `inflight.rs`) and [`Admission::finish`] with the outcome. The
//! surfaces finish every dispatched exchange on their own (`exchange.rs`), so an admission is
//! left in doubt only when its outcome cannot be known (the upstream connection broke, a cut
//! exchange got no answer within `cut_outcome_wait_s`, or an admission dropped after dispatch
//! without an outcome); it then blocks whom [`stopline_core::ops::Blocks`] says until the owner
//! reconciles it. Nothing here ever retries a call.

use crate::budget::{Reservation, Shortfall};
use crate::caller::Caller;
use crate::governor::Governor;
use crate::waiters::{wait_until, Interest, Registration};
use std::time::{Duration, Instant};
use stopline_core::budget::{BudgetKind, Budgets};
use stopline_core::call::{allowed_tool, must_cut, must_end_remote};
use stopline_core::ops::{blocks_of, target_kind, BlockScope};
use stopline_core::view::{Authority, Blocker};
use stopline_core::{ControlState, Decision, Refusal, RefusalCode, TaskClass};
use stopline_store::ops::OpOwner;

/// What one call asks for; built by the surfaces.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub class: TaskClass,
    /// The operation target (`mcp:<server>:<tool>`, `model:<m>`), checked against unresolved ops.
    pub target: Option<String>,
    /// Record a prepared operation for this call.
    pub record: bool,
    /// Whom its operation blocks if its outcome is ever in doubt (a model request: nobody,
    /// whatever this says).
    pub blocks: BlockScope,
    pub budget: Budgets,
    /// The adapter breaker to consult (`model`, `mcp:<server>`).
    pub upstream: Option<String>,
    pub request_id: Option<String>,
    /// The surface, for metrics (`mcp`, `model`).
    pub surface: &'static str,
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The upstream performed it.
    Committed,
    /// The upstream answered that it did not happen.
    Failed,
    /// The upstream could not be reached (counts against its adapter breaker); nothing happened.
    UpstreamUnreachable,
    /// Nobody knows whether it happened (the upstream connection broke after dispatch, or a cut
    /// exchange got no answer in time).
    InDoubt(String),
    /// Work the upstream had started was cancelled, and the upstream confirmed it (a background
    /// response, `responses.rs`).
    Cancelled,
}

/// A granted call. Dispatch it with [`Admission::dispatch`], end it with [`Admission::finish`].
#[derive(Debug)]
pub struct Admission {
    gov: Governor,
    caller: Caller,
    plan: Plan,
    op: Option<String>,
    prepared_ms: Option<i64>,
    reservation: Option<Reservation>,
    dispatched: bool,
    finished: bool,
    started: Instant,
    /// The HTTP path the call came in on, taken at admission: the call may end on a task that
    /// no longer serves the request (a detached exchange), where [`crate::logs::route`] is `-`.
    route: std::sync::Arc<str>,
    /// When [`Admission::dispatch`] handed it upstream (the `stopline.dispatch` span's start).
    dispatched_at: Option<Instant>,
}

/// `mcp:<server>` (an MCP server's adapter breaker) or `mcp:<server>:<tool>` (a tool call's
/// operation target), made by copying, not through `format!`'s machinery: two of them are made
/// for every call (the read-only path's profile, BENCHMARKS.md).
fn mcp_name(server: &str, tool: Option<&str>) -> String {
    let tool_len = tool.map_or(0, |t| t.len() + 1);
    let mut name = String::with_capacity(4 + server.len() + tool_len);
    name.push_str("mcp:");
    name.push_str(server);
    if let Some(tool) = tool {
        name.push(':');
        name.push_str(tool);
    }
    name
}

impl Governor {
    /// Admit one MCP `tools/call` of `tool` on `server` (see GOVERNOR.md).
    pub async fn admit_tool_call(
        &self,
        caller: &Caller,
        server: &str,
        tool: &str,
        read_only: bool,
        request_id: Option<&str>,
    ) -> Result<Admission, Refusal> {
        let Some(config) = self.mcp_server(server) else {
            self.note_refused_egress(caller, &format!("unknown MCP server {server}"));
            return Err(self.refused_at_once(
                caller,
                &format!("mcp:{server}:{tool}"),
                Refusal::new(
                    RefusalCode::EgressRefused,
                    format!("no MCP server {server:?} is configured"),
                ),
            ));
        };
        if let Err(refusal) = allowed_tool(config.allowed_tools.as_deref(), server, tool) {
            self.note_unauthorized(caller, &format!("tool_not_allowed mcp:{server}:{tool}"));
            return Err(self.refused_at_once(caller, &format!("mcp:{server}:{tool}"), refusal));
        }
        let critical = config.critical_tools.iter().any(|t| t == tool);
        // `readOnlyHint` is an untrusted hint (MCP): it spares the operation record only for a
        // server the owner said to trust.
        let plan = Plan {
            class: self.class_for(caller, critical),
            target: Some(mcp_name(server, Some(tool))),
            record: !(read_only && config.trust_read_only_hints),
            blocks: config.unresolved_blocks,
            budget: [(BudgetKind::ToolCalls, 1.0)].into(),
            upstream: Some(mcp_name(server, None)),
            request_id: request_id.map(String::from),
            surface: "mcp",
        };
        self.admit(caller, plan).await
    }

    /// Admit a JSON-RPC message that is not a tool call: `ping` and `notifications/*` are
    /// critical (heartbeats and protocol bookkeeping, docs/reference.md §8), anything else noncritical
    /// for an agent token.
    pub async fn admit_request(
        &self,
        caller: &Caller,
        server: &str,
        method: &str,
    ) -> Result<Admission, Refusal> {
        if self.mcp_server(server).is_none() {
            self.note_refused_egress(caller, &format!("unknown MCP server {server} ({method})"));
            return Err(self.refused_at_once(
                caller,
                &format!("mcp:{server}"),
                Refusal::new(
                    RefusalCode::EgressRefused,
                    format!("no MCP server {server:?} is configured"),
                ),
            ));
        }
        let class = if method == "ping" || method.starts_with("notifications/") {
            TaskClass::Critical
        } else {
            self.class_for(caller, true)
        };
        let plan = Plan {
            class,
            target: None,
            record: false,
            blocks: BlockScope::Agent,
            budget: Budgets::new(),
            upstream: Some(mcp_name(server, None)),
            request_id: None,
            surface: "mcp",
        };
        self.admit(caller, plan).await
    }

    /// A refusal decided before any plan (an unknown server, a tool not allowed), logged.
    fn refused_at_once(&self, caller: &Caller, target: &str, refusal: Refusal) -> Refusal {
        crate::logs::refused(caller.agent(), Some(target), &refusal, Instant::now());
        self.refused(refusal)
    }

    /// Admit `plan` for `caller`; every refusal is logged (`crate::logs`).
    pub(crate) async fn admit(&self, caller: &Caller, plan: Plan) -> Result<Admission, Refusal> {
        let started = Instant::now();
        let mut admission = Admission {
            gov: self.clone(),
            caller: caller.clone(),
            plan,
            op: None,
            prepared_ms: None,
            reservation: None,
            dispatched: false,
            finished: false,
            started,
            route: crate::logs::route(),
            dispatched_at: None,
        };
        match self.admit_plan(caller, &mut admission).await {
            Ok(()) => {
                crate::telemetry::admitted(
                    caller.agent(),
                    &admission.route,
                    admission.plan.target.as_deref(),
                    admission.plan.surface,
                    started,
                );
                Ok(admission)
            }
            Err(refusal) => {
                let target = admission.plan.target.as_deref();
                crate::logs::refused(caller.agent(), target, &refusal, started);
                Err(refusal)
            }
        }
    }

    async fn admit_plan(&self, caller: &Caller, admission: &mut Admission) -> Result<(), Refusal> {
        let started = admission.started;
        let snapshot = self.snapshot();
        if let Some(refusal) = self.agent_breaker_refusal(caller, &snapshot) {
            return Err(self.refused(refusal));
        }
        let receipt = self.judge(
            &snapshot,
            caller,
            admission.plan.class,
            admission.plan.target.as_deref(),
        );
        match receipt.decision {
            Decision::Allow => {}
            Decision::Block => return Err(self.refused(receipt.to_refusal(None))),
            Decision::Queue => {
                self.count_decision("queue", receipt.code);
                admission.prepare().await?;
                self.hold(admission).await?;
            }
        }
        admission.reserve().await?;
        if let Some(upstream) = &admission.plan.upstream {
            if let Err(refusal) = self.admit_upstream(upstream, &snapshot) {
                admission.refuse(&refusal);
                return Err(self.refused(refusal));
            }
        }
        admission.prepare().await?;
        self.count_decision("allow", None);
        self.count_admission_latency(admission.plan.surface, started.elapsed());
        Ok(())
    }

    /// Hold a queued call until the mode drops (re-admitted), an escalation (refused at once)
    /// or the queue timeout (`queued_timeout`).
    ///
    /// It wakes only for a view change that ends its hold (`waiters.rs`: registered before the
    /// first judgment, so none is missed) and at the moments time alone can change its
    /// judgment: the view growing too old, a drain's deadline, a distributed source's permit
    /// lapsing. There is no periodic re-check: a held call is never dispatched without a
    /// judgment that admits it, and each of those moments is known.
    async fn hold(&self, admission: &mut Admission) -> Result<(), Refusal> {
        let deadline = tokio::time::Instant::now() + self.config().queue_timeout();
        let registration = self.wait_on_view(
            &admission.caller,
            Interest::Held {
                class: admission.plan.class,
                target: admission.plan.target.clone(),
            },
        );
        loop {
            let snapshot = self.snapshot();
            let receipt = self.judge(
                &snapshot,
                &admission.caller,
                admission.plan.class,
                admission.plan.target.as_deref(),
            );
            match receipt.decision {
                Decision::Allow => return Ok(()),
                Decision::Block if self.drain_allows(&snapshot, admission.prepared_ms) => {
                    return Ok(())
                }
                Decision::Block => {
                    let refusal = receipt.to_refusal(Some("escalated while held"));
                    admission.refuse(&refusal);
                    return Err(self.refused(refusal));
                }
                Decision::Queue => {}
            }
            let wake = self.next_change_by_time(&snapshot).min(deadline);
            if tokio::time::timeout_at(wake, registration.woken())
                .await
                .is_err()
                && tokio::time::Instant::now() >= deadline
            {
                let refusal = Refusal::new(
                    RefusalCode::QueuedTimeout,
                    format!(
                        "held under HALT_NONCRITICAL for {} s; the halt was not lifted ({})",
                        self.config().base.queue_timeout_s,
                        receipt.message
                    ),
                )
                .with_latch(receipt.latch);
                admission.refuse(&refusal);
                return Err(self.refused(refusal));
            }
        }
    }

    /// The next moment time alone can change a held call's judgment of `snapshot` (see
    /// [`Governor::hold`]): the view too old, a drain's deadline, the permit lapsing.
    fn next_change_by_time(&self, snapshot: &crate::view::Snapshot) -> tokio::time::Instant {
        let now_ms = self.now_ms();
        let stale_at = snapshot.loaded_ms + self.max_view_age_ms() + 1;
        let drain_at = match snapshot.view.state.state {
            ControlState::Draining => snapshot.view.state.deadline_unix_ms,
            _ => None,
        };
        let at_ms = drain_at.map_or(stale_at, |d| d.min(stale_at));
        let now = tokio::time::Instant::now();
        let by_time = now + Duration::from_millis(u64::try_from(at_ms - now_ms).unwrap_or(0));
        let permit = self
            .permit_left()
            .map(|left| now + left + Duration::from_millis(1));
        permit.map_or(by_time, |p| p.min(by_time))
    }

    /// A watch that resolves when `caller` must be cut: an EMERGENCY covering its subject, a
    /// contained machine state, or a view that closes every gate.
    pub fn subscribe_cuts(&self, caller: &Caller) -> CutWatch {
        CutWatch {
            gov: self.clone(),
            registration: self.wait_on_view(caller, Interest::Cut),
            caller: caller.clone(),
            route: crate::logs::route(),
            since: Instant::now(),
            remote: false,
        }
    }

    /// A watch that resolves when remote work `caller` started must end: what
    /// [`Governor::subscribe_cuts`] resolves on, and a HALT_ALL covering it too
    /// (`stopline_core::call::must_end_remote`).
    pub fn subscribe_remote_cuts(&self, caller: &Caller) -> CutWatch {
        CutWatch {
            gov: self.clone(),
            registration: self.wait_on_view(caller, Interest::EndRemote),
            caller: caller.clone(),
            route: crate::logs::route(),
            since: Instant::now(),
            remote: true,
        }
    }
}

impl Admission {
    /// The operation id, when this call is a recorded operation.
    pub fn op_id(&self) -> Option<&str> {
        self.op.as_deref()
    }

    /// Its operation target, if it has one.
    pub fn target(&self) -> Option<&str> {
        self.plan.target.as_deref()
    }

    /// The class it was admitted as.
    pub fn class(&self) -> TaskClass {
        self.plan.class
    }

    /// The caller.
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    async fn prepare(&mut self) -> Result<(), Refusal> {
        if !self.plan.record || self.op.is_some() {
            return Ok(());
        }
        let Some(target) = self.plan.target.clone() else {
            return Ok(());
        };
        let journal = self.gov.journal().clone();
        let owner = self.owner();
        // The record joins the journal's group commit: it shares an fsync with whatever else
        // is being recorded, and this call is not dispatched before it is durable.
        let (op, mut writing) =
            match journal.submit_prepare(&target, &owner, self.plan.request_id.as_deref()) {
                Ok(submitted) => submitted,
                Err(error) => {
                    self.finished = true;
                    return Err(self.gov.refused(error.to_refusal()));
                }
            };
        // The fsync may queue behind many others. A stop that lands meanwhile refuses the call
        // at once rather than after the queue drains; the prepared line, when it lands, is
        // closed as refused (the call is never dispatched).
        // Only a view change that can refuse this call wakes it (`waiters.rs`).
        let registration = self.gov.wait_on_view(
            &self.caller,
            Interest::Admission {
                target: self.plan.target.clone(),
            },
        );
        let waited = tokio::select! {
            biased;
            written = &mut writing => Ok(written),
            refusal = wait_until(&registration, || self.blocked_now()) => Err(refusal),
        };
        drop(registration);
        let joined = match waited {
            Ok(written) => written,
            Err(refusal) => {
                tokio::spawn(async move {
                    if writing.await.is_ok() {
                        if let Err(error) = journal.submit_outcome(&op, "refused").await {
                            tracing::error!(op, %error, "cannot close a refused operation; it stays unresolved");
                        }
                    }
                });
                self.refuse(&refusal);
                return Err(self.gov.refused(refusal));
            }
        };
        match joined.map_err(|e| e.to_refusal()) {
            Ok(()) => {
                self.op = Some(op);
                self.prepared_ms = Some(self.gov.now_ms());
                Ok(())
            }
            Err(refusal) => {
                self.finished = true;
                Err(self.gov.refused(refusal))
            }
        }
    }

    /// Who the operation is for: the acting agent, its chain's root, whom it blocks in doubt.
    fn owner(&self) -> OpOwner {
        let chain = &self.caller.subject().chain;
        OpOwner {
            agent: Some(self.caller.agent().to_string()),
            root: chain.first().map(|n| n.to_string()),
            blocks: self.plan.blocks,
        }
    }

    /// The refusal the current view gives this call, if it now blocks it.
    fn blocked_now(&self) -> Option<Refusal> {
        let snapshot = self.gov.snapshot();
        let receipt = self.gov.judge(
            &snapshot,
            &self.caller,
            self.plan.class,
            self.plan.target.as_deref(),
        );
        (receipt.decision == Decision::Block)
            .then(|| receipt.to_refusal(Some("refused while being prepared")))
    }

    async fn reserve(&mut self) -> Result<(), Refusal> {
        let claims = self.caller.claims();
        if self.plan.budget.is_empty() && claims.budgets.is_empty() {
            return Ok(());
        }
        if claims.budgets.is_empty() && claims.parent.is_none() {
            // A root token that limits nothing: its chain is its own account alone, which can
            // refuse nothing, and whose use of a kind it does not limit the ledger neither
            // journals nor shows (`/v1/budgets` and the metrics list limited kinds only). So no
            // reservation is made (it was a lock, two walks of the chain and their copies on
            // every call of the read-only path); the account is still registered, as a
            // reservation would have, so a child delegated elsewhere finds its parent known.
            self.gov.register_budgets(claims);
            return Ok(());
        }
        let gov = self.gov.clone();
        let result = gov
            .reserve_budget(self.caller.claims(), &self.plan.budget)
            .await;
        match result {
            Ok(reservation) => {
                self.reservation = Some(reservation);
                Ok(())
            }
            Err(shortfall) => {
                let refusal = match &shortfall {
                    Shortfall::Wait => Refusal::new(
                        RefusalCode::BudgetExhausted,
                        "the budget stayed fully reserved by calls in flight",
                    ),
                    Shortfall::Exhausted {
                        kind,
                        limit,
                        observed,
                        ..
                    } => Refusal::new(
                        RefusalCode::BudgetExhausted,
                        format!("{kind} budget {limit} exhausted ({observed} needed)"),
                    ),
                    Shortfall::Unrecorded(code, why) => Refusal::new(
                        *code,
                        format!("the budget reservation could not be recorded durably: {why}"),
                    ),
                };
                if let Shortfall::Exhausted {
                    kind,
                    limit,
                    observed,
                    ..
                } = shortfall
                {
                    gov.budget_exhausted(self.caller.agent(), kind, limit, observed);
                }
                self.refuse(&refusal);
                Err(gov.refused(refusal))
            }
        }
    }

    /// Re-check admission against the current view and record `dispatched`. Call it right before
    /// handing the call upstream; on `Err` the call must not be sent (its outcome is recorded).
    pub fn dispatch(&mut self) -> Result<(), Refusal> {
        let _ticket = self.gov.enter_dispatch();
        let snapshot = self.gov.snapshot();
        let receipt = self.gov.judge(
            &snapshot,
            &self.caller,
            self.plan.class,
            self.plan.target.as_deref(),
        );
        let allowed = receipt.decision == Decision::Allow
            || self.gov.drain_allows(&snapshot, self.prepared_ms);
        if !allowed {
            let refusal = receipt.to_refusal(Some("refused at dispatch"));
            self.refuse(&refusal);
            return Err(self.gov.refused(refusal));
        }
        if let Some(op) = &self.op {
            // Queued, not written here: the journal's writer thread writes it after this
            // call's `prepared` record and before its outcome, and logs a failure. This worker
            // never blocks on the journal's file under the dispatch ticket, which a latch's
            // acknowledgement waits for.
            drop(self.gov.journal().submit_dispatched(op));
        }
        self.dispatched = true;
        self.dispatched_at = Some(Instant::now());
        Ok(())
    }

    /// End the call with `outcome`; for a tool call or request, what was reserved is settled.
    pub fn finish(self, outcome: Outcome) {
        // What settles is the plan's bound; with nothing reserved nothing reads it.
        let actual = self.reservation.as_ref().map(|_| self.plan.budget.clone());
        self.finish_with_usage(outcome, actual);
    }

    /// End the call with `outcome` and the budget actually used (`None`: settle at the bound).
    pub fn finish_with_usage(mut self, outcome: Outcome, used: Option<Budgets>) {
        self.finished = true;
        if let Some(upstream) = &self.plan.upstream {
            let reached = !matches!(outcome, Outcome::UpstreamUnreachable);
            self.gov.record_upstream(upstream, reached);
        }
        if let Some(reservation) = self.reservation.take() {
            match (&outcome, used) {
                (Outcome::UpstreamUnreachable, _) => drop(reservation),
                (_, Some(used)) => reservation.settle(&used),
                (_, None) => reservation.settle_at_bound(),
            }
        }
        self.gov
            .count_call_latency(self.plan.surface, self.started.elapsed());
        self.access(match &outcome {
            Outcome::Committed => "committed",
            Outcome::Cancelled => "cancelled",
            Outcome::Failed => "failed",
            Outcome::UpstreamUnreachable => "unreachable",
            Outcome::InDoubt(_) => "in_doubt",
        });
        if let Some(op) = self.op.clone() {
            let (text, doubt) = match &outcome {
                Outcome::Committed => ("committed", None),
                Outcome::Cancelled => ("cancelled", None),
                Outcome::Failed | Outcome::UpstreamUnreachable => ("failed", None),
                Outcome::InDoubt(reason) => ("", Some(reason.clone())),
            };
            self.record(op, text, doubt);
        }
    }

    /// False when the outcome [`Admission::finish`] is given changes nothing it records: a
    /// call with no operation settles its reservation, its upstream's breaker and its metrics
    /// alike whether it was committed, failed or is in doubt (only an upstream that could not be
    /// reached differs, and that is known without an answer).
    pub fn records_outcome(&self) -> bool {
        self.op.is_some()
    }

    /// True once [`Admission::dispatch`] handed it upstream.
    pub fn is_dispatched(&self) -> bool {
        self.dispatched
    }

    /// Leave the call in doubt without waiting any longer (its outcome cannot be known).
    pub fn cut(self, reason: &str) {
        self.finish_with_usage(Outcome::InDoubt(reason.to_string()), None);
    }

    /// The access log's line for a call handed upstream, when `serve --access-log` asked, and
    /// its `stopline.dispatch` span when telemetry is on.
    fn access(&self, status: &str) {
        if let Some(dispatched) = self.dispatched_at {
            crate::telemetry::dispatched(
                self.caller.agent(),
                &self.route,
                self.plan.target.as_deref(),
                status,
                dispatched,
            );
        }
        if self.dispatched && self.gov.access_log() {
            crate::logs::admitted(
                self.caller.agent(),
                &self.route,
                self.plan.target.as_deref(),
                status,
                self.started,
            );
        }
    }

    fn refuse(&mut self, refusal: &Refusal) {
        self.finished = true;
        self.reservation.take();
        if let Some(op) = self.op.clone() {
            tracing::debug!(op, code = %refusal.code, "operation refused");
            self.record(op, "refused", None);
        }
    }

    fn record(&self, op: String, outcome: &'static str, doubt: Option<String>) {
        let journal = self.gov.journal().clone();
        let gov = self.gov.clone();
        let target = self.plan.target.clone().unwrap_or_default();
        let owner = self.owner();
        let blocks = target_kind(&target).map(|kind| {
            blocks_of(
                kind,
                owner.blocks,
                owner.root.as_deref().or(owner.agent.as_deref()),
            )
        });
        let Some(reason) = doubt else {
            // The outcome joins the group commit; nothing waits for it but this log line.
            let written = journal.submit_outcome(&op, outcome);
            tokio::spawn(async move {
                if let Err(error) = written.await {
                    tracing::error!(op, %error, "cannot record an operation's outcome; it stays unresolved");
                }
            });
            return;
        };
        // In doubt (rare): the view's blocked targets take a lock a refresh may hold.
        tokio::task::spawn_blocking(move || {
            if let Some(blocks) = blocks {
                let blocker = Blocker {
                    op: op.clone(),
                    blocks,
                };
                gov.block_target(&target, blocker);
            }
            if let Err(error) = journal.in_doubt(&op, &reason) {
                tracing::error!(op, %error, "cannot record an operation's outcome; it stays unresolved");
            }
        });
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        if let Some(reservation) = self.reservation.take() {
            reservation.settle_at_bound();
        }
        self.access("in_doubt");
        if let Some(op) = self.op.clone() {
            if self.dispatched {
                self.record(
                    op,
                    "",
                    Some("the call was dropped after dispatch without an outcome".into()),
                );
            } else {
                self.record(op, "failed", None);
            }
        }
    }
}

/// Resolves when a caller's streams must be cut (see [`Governor::subscribe_cuts`]).
#[derive(Debug)]
pub struct CutWatch {
    gov: Governor,
    /// Woken only by a view change that cuts this caller (`waiters.rs`).
    registration: Registration,
    caller: Caller,
    /// The route of the request it watches, and since when (for the cut's log event).
    route: std::sync::Arc<str>,
    since: Instant,
    /// Remote work: ended at a HALT_ALL too.
    remote: bool,
}

impl CutWatch {
    /// The reason to cut now, if any: `stopline_core::call::must_cut`, the stdio governor's rule.
    pub fn check(&self) -> Option<Refusal> {
        let snapshot = self.gov.snapshot();
        let authority = Authority {
            issue_epoch: self.caller.claims().epoch,
        };
        let rule = if self.remote {
            must_end_remote
        } else {
            must_cut
        };
        rule(
            &snapshot.view,
            self.caller.subject(),
            authority,
            self.gov.now_ms(),
        )
    }

    /// Wait until the caller must be cut (cancel-safe: a `select!` may poll it again).
    pub async fn cut(&mut self) -> Refusal {
        let refusal = wait_until(&self.registration, || self.check()).await;
        crate::logs::cut(self.caller.agent(), &self.route, &refusal, self.since);
        refusal
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mcp_names_are_what_format_made() {
        for (server, tool) in [("bench", Some("echo")), ("a.b-c", None), ("", Some(""))] {
            let made = match tool {
                Some(tool) => format!("mcp:{server}:{tool}"),
                None => format!("mcp:{server}"),
            };
            assert_eq!(super::mcp_name(server, tool), made);
        }
    }
}
