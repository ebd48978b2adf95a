//! Refusal codes: the stable strings every surface (CLI, HTTP, MCP, hook) reports.
//!
//! A refusal is data, not a panic or a log line: the code is part of the contract in docs/reference.md §3 and
//! outside tests match on it exactly, so a variant's string must never change once shipped.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Every refusal code stopline can report. The string form is fixed by the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RefusalCode {
    /// The reason was empty or only whitespace.
    ReasonRequired,
    /// The scope text is not `machine`, `agent:<name>`, `project:<root>` or `run:<id>`.
    ScopeInvalid,
    /// A project root does not exist or cannot be canonicalized.
    ProjectRootUnresolvable,
    /// A level that is not `halt-noncritical`, `halt-all` or `emergency`.
    LevelInvalid,
    /// One of the three owner-console predicates failed.
    OwnerControlRequired,
    /// A latch (or a contained machine state) blocks the call.
    BreakGlassContained,
    /// A halt-noncritical latch holds noncritical work.
    HaltedNoncritical,
    /// A held call waited longer than the queue timeout.
    QueuedTimeout,
    /// The authority was minted before a stop that covers it.
    StaleControlEpoch,
    /// The authority claims an epoch the control plane never issued.
    FutureControlEpoch,
    /// The epoch snapshot does not match the WAL, or could not be read back.
    ControlEpochUnconfirmed,
    /// The write-ahead log is broken: a gap, a broken hash link, or an unparsable line.
    ControlWalCorrupt,
    /// `state.json` (or another control record) cannot be trusted.
    ControlStateCorrupt,
    /// The token is absent, malformed, or its signature does not verify.
    TokenInvalid,
    /// The token has expired.
    TokenExpired,
    /// An operation on the same target has no recorded outcome.
    UnresolvedOperation,
    /// `drain` needs an active machine latch.
    DrainRequiresMachineLatch,
    /// `drain --deadline` outside 1..=3600 seconds.
    DrainDeadlineOutOfRange,
    /// `recover apply --plan` names no known plan.
    PlanUnknown,
    /// The caller may not lift this halt.
    DisengageNotPermitted,
    /// An emergency latch can only be cleared by recovery.
    EmergencyRequiresRecovery,
    /// A budget is exhausted.
    BudgetExhausted,
    /// An agent or adapter breaker is open.
    BreakerOpen,
    /// A policy card lacks required fields.
    PolicyCardIncomplete,
    /// The harness version needs a passing drill.
    DrillRequired,
    /// The tool is not in the server's `allowed_tools`.
    ToolNotAllowed,
    /// Egress outside the gateway was refused.
    EgressRefused,
    /// The latch could not be made durable (its fsync failed, twice, on fresh files).
    LatchNotDurable,
    /// A control-plane I/O error that is not corruption.
    ControlIo,
    /// `recover repair` found nothing it is allowed to repair, or refused to.
    RepairRefused,
    /// The operation id does not exist or is already resolved.
    OperationUnknown,
    /// A run is refused because a latch covers it.
    RunContained,
    /// The gateway handed to an agent is not reachable.
    GatewayUnreachable,
    /// A request body or argument is malformed.
    BadRequest,
    /// The distributed backend could not be reached.
    DistributedUnavailable,
    /// The uid an agent or tool server would run as already runs another live agent or a
    /// process outside the run.
    UidInUse,
    /// `config.toml` cannot be read or parsed, or names a key that does not exist.
    ConfigInvalid,
    /// The control directory does not exist: a gate refuses rather than reading "no stop".
    ControlHomeMissing,
    /// A reason longer than [`MAX_REASON_BYTES`] bytes.
    ReasonInvalid,
    /// A token's caller already holds the most active latches it may engage.
    EngageLimit,
    /// A delegation past the chain's limits: deeper than [`MAX_DELEGATION_DEPTH`], or a
    /// [`MAX_LIVE_DELEGATES`]th-plus live delegated token of one chain (docs/reference.md §6).
    DelegateLimit,
    /// A model request asks the provider to act on the agent's behalf (a hosted tool, a
    /// background response, an MCP server) and the gateway's config does not allow it.
    HostedToolRefused,
    /// A request names something the gateway will not record or act on: a string longer than
    /// [`MAX_RECORDED_BYTES`], or a reference (e.g. `previous_response_id`) the caller does not own.
    RequestInvalid,
    /// A token carrying a spend budget asked for a model the gateway's `[prices]` table does
    /// not price: its spend cannot be bounded, so the call is refused (it was `budget_exhausted`,
    /// which read as if the agent had spent its money).
    PriceMissing,
    /// A task method names an A2A task the caller's delegation chain did not open through this
    /// gateway (docs/reference.md §8): one agent cannot read, follow or cancel another's remote
    /// work.
    TaskNotOwned,
    /// A token asked to live longer than `[tokens] max_ttl_s` (docs/reference.md §5, "Bounded
    /// tail"), a delegated one included.
    TtlTooLong,
}

impl RefusalCode {
    /// The stable string of this code.
    pub fn as_str(self) -> &'static str {
        use RefusalCode::*;
        match self {
            ReasonRequired => "reason_required",
            ScopeInvalid => "scope_invalid",
            ProjectRootUnresolvable => "project_root_unresolvable",
            LevelInvalid => "level_invalid",
            OwnerControlRequired => "owner_control_required",
            BreakGlassContained => "break_glass_contained",
            HaltedNoncritical => "halted_noncritical",
            QueuedTimeout => "queued_timeout",
            StaleControlEpoch => "stale_control_epoch",
            FutureControlEpoch => "future_control_epoch",
            ControlEpochUnconfirmed => "control_epoch_unconfirmed",
            ControlWalCorrupt => "control_wal_corrupt",
            ControlStateCorrupt => "control_state_corrupt",
            TokenInvalid => "token_invalid",
            TokenExpired => "token_expired",
            UnresolvedOperation => "unresolved_operation",
            DrainRequiresMachineLatch => "drain_requires_machine_latch",
            DrainDeadlineOutOfRange => "drain_deadline_out_of_range",
            PlanUnknown => "plan_unknown",
            DisengageNotPermitted => "disengage_not_permitted",
            EmergencyRequiresRecovery => "emergency_requires_recovery",
            BudgetExhausted => "budget_exhausted",
            BreakerOpen => "breaker_open",
            PolicyCardIncomplete => "policy_card_incomplete",
            DrillRequired => "drill_required",
            ToolNotAllowed => "tool_not_allowed",
            EgressRefused => "egress_refused",
            LatchNotDurable => "latch_not_durable",
            ControlIo => "control_io",
            RepairRefused => "repair_refused",
            OperationUnknown => "operation_unknown",
            RunContained => "run_contained",
            GatewayUnreachable => "gateway_unreachable",
            BadRequest => "bad_request",
            DistributedUnavailable => "distributed_unavailable",
            UidInUse => "uid_in_use",
            ConfigInvalid => "config_invalid",
            ControlHomeMissing => "control_home_missing",
            ReasonInvalid => "reason_invalid",
            EngageLimit => "engage_limit",
            DelegateLimit => "delegate_limit",
            HostedToolRefused => "hosted_tool_refused",
            RequestInvalid => "request_invalid",
            PriceMissing => "price_missing",
            TaskNotOwned => "task_not_owned",
            TtlTooLong => "ttl_too_long",
        }
    }

    /// True for codes that mean "the control state itself cannot be trusted".
    pub fn is_corruption(self) -> bool {
        matches!(
            self,
            RefusalCode::ControlWalCorrupt
                | RefusalCode::ControlStateCorrupt
                | RefusalCode::ControlEpochUnconfirmed
        )
    }
}

impl fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How deep a delegation chain may go (docs/reference.md §6): the root's token is depth 0, a child of a
/// depth-8 token is refused `delegate_limit`.
pub const MAX_DELEGATION_DEPTH: usize = 8;

/// How many delegated tokens minted through one gateway's `/v1/delegate` may be live (not yet
/// expired) at once for one delegation chain, counted by its root (docs/reference.md §6).
pub const MAX_LIVE_DELEGATES: usize = 256;

/// The longest reason a refusal quotes, in characters (docs/reference.md §4).
pub const REFUSAL_REASON_CHARS: usize = 200;

/// The latch a refusal names (docs/reference.md §4): the error object's `latch`. Fields in sorted order,
/// as [`Refusal`]'s.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatchRef {
    /// Who engaged it (`unknown` for an entry whose body cannot be trusted).
    pub by: String,
    /// RFC 3339 time of engagement, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engaged_at: Option<String>,
    /// `latch_<hex>`.
    pub id: String,
    /// Its level.
    pub level: String,
    /// Why, at most [`REFUSAL_REASON_CHARS`] characters (an untrusted entry: what is wrong).
    pub reason: String,
    /// The scope it stops.
    pub scope: String,
}

impl LatchRef {
    /// How long ago the latch was engaged, in words (`42s`, `5m 3s`, `2h 5m`, `3d 4h`), from
    /// `now_unix_ms`; `None` when its time is unknown.
    pub fn age(&self, now_unix_ms: i64) -> Option<String> {
        let engaged = crate::time::parse_rfc3339_ms(self.engaged_at.as_deref()?)?;
        let seconds = (now_unix_ms - engaged).max(0) / 1000;
        let (d, h, m, s) = (
            seconds / 86_400,
            seconds / 3600 % 24,
            seconds / 60 % 60,
            seconds % 60,
        );
        Some(match (d, h, m) {
            (0, 0, 0) => format!("{s}s"),
            (0, 0, _) => format!("{m}m {s}s"),
            (0, _, _) => format!("{h}h {m}m"),
            _ => format!("{d}d {h}h"),
        })
    }

    /// Who stopped the caller and why, for a refusal's message: scope, level, `by`, age, the
    /// latch id and the reason (docs/reference.md §4).
    pub fn describe(&self, now_unix_ms: i64) -> String {
        let when = match self.age(now_unix_ms) {
            Some(age) => format!("engaged {age} ago"),
            None => "engaged at an unknown time".to_string(),
        };
        format!(
            "stopped by {} (latch {}: scope {}, level {}, {when}); reason: {:?}",
            self.by, self.id, self.scope, self.level, self.reason
        )
    }

    /// What a caller should do about a stop at this latch's level: never retry.
    pub fn advice(&self) -> &'static str {
        // `Level::Emergency`'s name: refusal.rs imports nothing of admission.rs (which refuses
        // with it), so the level is the string the summary carries; latch.rs's tests hold the
        // two together.
        if self.level == "emergency" {
            "do not retry: every call stays refused until the owner recovers from this stop"
        } else {
            "do not retry: every call stays refused until an operator disengages this stop"
        }
    }
}

/// A typed refusal: a stable code, a human message and, when a latch caused it, that latch
/// (docs/reference.md §4: `{"code","message","latch":{id,scope,level,by,reason}}`).
///
/// Its fields, and [`LatchRef`]'s, are declared in sorted order, so that serialized directly
/// it prints what a `serde_json` tree of it prints (a map sorts its keys): an MCP refusal is
/// written straight to its text, byte for byte the canonical message (`Message::error_with`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Refusal {
    /// The stable code.
    pub code: RefusalCode,
    /// The latch that caused the refusal, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// (Boxed: a refusal is the error of many small results.)
    pub latch: Option<Box<LatchRef>>,
    /// What happened, for a human.
    pub message: String,
}

impl Refusal {
    /// A refusal with `code` and `message`.
    pub fn new(code: RefusalCode, message: impl Into<String>) -> Self {
        Refusal {
            code,
            message: message.into(),
            latch: None,
        }
    }

    /// This refusal naming `latch` as its cause.
    pub fn with_latch(mut self, latch: Option<LatchRef>) -> Self {
        self.latch = latch.map(Box::new);
        self
    }
}

/// `unix_s` (seconds) as RFC 3339 UTC, the form every refusal prints times in (docs/reference.md §4).
pub fn rfc3339_seconds(unix_s: i64) -> String {
    crate::time::rfc3339_seconds(unix_s)
}

/// The longest reason accepted, in bytes of UTF-8 (docs/reference.md §5): a reason is evidence, not a
/// payload, and every status read carries it.
pub const MAX_REASON_BYTES: usize = 1024;

/// Refuse an empty or whitespace-only reason (`reason_required`) and one longer than
/// [`MAX_REASON_BYTES`] (`reason_invalid`); return the trimmed reason otherwise.
pub fn require_reason(reason: &str) -> Result<String, Refusal> {
    if reason.len() > MAX_REASON_BYTES {
        return Err(Refusal::new(
            RefusalCode::ReasonInvalid,
            format!(
                "a reason is at most {MAX_REASON_BYTES} bytes of UTF-8; this one is {} bytes",
                reason.len()
            ),
        ));
    }
    let trimmed = reason.trim();
    if trimmed.is_empty() {
        return Err(Refusal::new(
            RefusalCode::ReasonRequired,
            "a non-empty reason is required",
        ));
    }
    Ok(trimmed.to_string())
}

/// The longest agent-supplied string that is recorded (a model name, a tool name, a target, a
/// request id), in bytes of UTF-8 (docs/reference.md §6 "Bounded records"): no call writes more than a
/// few KiB to a journal.
pub const MAX_RECORDED_BYTES: usize = 256;

/// Refuse (`request_invalid`, naming `field`) a `value` longer than [`MAX_RECORDED_BYTES`]: the
/// one check every path that records an agent-supplied string makes before it writes anything.
pub fn bounded_record(field: &str, value: &str) -> Result<(), Refusal> {
    bounded_len(field, value.len())
}

/// [`bounded_record`] of a string `len` bytes long.
pub fn bounded_len(field: &str, len: usize) -> Result<(), Refusal> {
    if len <= MAX_RECORDED_BYTES {
        return Ok(());
    }
    Err(Refusal::new(
        RefusalCode::RequestInvalid,
        format!("{field} is {len} bytes; a recorded string is at most {MAX_RECORDED_BYTES} bytes"),
    ))
}
