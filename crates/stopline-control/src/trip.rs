//! A breaker trip, as every surface carries it out: the gateway's agent breakers, the stdio
//! governor's, and the run loop's wall clock all call [`trip`].
//!
//! The protocol, in this order: (1) engage an agent-scoped latch through the same
//! [`crate::engage::engage`] every surface uses (`by:` from [`Trip::by`], level from the
//! configuration); (2) file one [`EvidenceRecord`] (`evidence-record.v1`) naming that latch, or
//! an empty latch id when the engage failed. The latch comes first so nothing after it can delay
//! the stop, and a later failure never undoes it: a failed engage is logged as an error (the
//! caller still stops what it can), a failed evidence append is returned for the caller to
//! report. Deciding *whether* to trip (counting, thresholds, once-only) stays with the caller.

use crate::context::Context;
use stopline_core::evidence::SCHEMA;
use stopline_core::policy::ConditionMode;
use stopline_core::{BreakerKind, EvidenceRecord, Level};
use stopline_store::StoreError;

/// Which surface trips, and what it adds to the record.
#[derive(Debug, Clone, PartialEq)]
pub enum Surface {
    /// A gateway, by its registration id (the record's `gateway`).
    Gateway(String),
    /// The stdio governor of `mcp proxy` / `mcp serve` (no gateway in the path).
    Stdio,
    /// The supervisor of `stopline run`, for the run's wall-clock budget (the record's `run`).
    RunWallClock(String),
}

/// A trip to carry out: which breaker of which agent, and what crossed what.
#[derive(Debug, Clone, PartialEq)]
pub struct Trip {
    /// The agent whose breaker trips.
    pub agent: String,
    /// The breaker.
    pub breaker: BreakerKind,
    /// What set it off (the budget kind, the refused tool or egress, the anomaly).
    pub trigger: String,
    /// The threshold or budget limit.
    pub threshold: f64,
    /// The observed value that crossed it.
    pub observed: f64,
    /// The level of the agent latch (`[breakers] trip_level`, or the card's).
    pub level: Level,
    /// Who trips.
    pub surface: Surface,
    /// `Observe`: file the record (and let the caller alert), engage nothing.
    pub mode: ConditionMode,
}

impl Trip {
    /// The latch's `by:`: `breaker:<kind>` (docs/reference.md §8), with one exception. The run loop's
    /// wall-clock latch has always been `breaker:wall_clock`, after the policy card's stop
    /// condition `wall_clock` (docs/reference.md §6) rather than the breaker kind, and the run tests pin it
    /// (`run_kill`); it stays so, and its evidence record still says `breaker:
    /// budget_exhausted`, trigger `wall_clock_s`.
    pub fn by(&self) -> String {
        match self.surface {
            Surface::RunWallClock(_) => "breaker:wall_clock".into(),
            Surface::Gateway(_) | Surface::Stdio => self.breaker.by(),
        }
    }

    /// The latch's reason.
    pub fn reason(&self) -> String {
        format!(
            "breaker {} tripped: {} (observed {}, threshold {})",
            self.breaker.as_str(),
            self.trigger,
            self.observed,
            self.threshold
        )
    }
}

/// What a trip did.
#[derive(Debug)]
pub struct Tripped {
    /// The id of the latch it engaged, `None` when the engage failed.
    pub latch: Option<String>,
    /// The record it filed (or tried to).
    pub record: EvidenceRecord,
    /// Why the record could not be appended, if it could not.
    pub evidence_error: Option<StoreError>,
}

/// Carry out `trip`: the latch first, then the evidence record (see the module comment). A trip
/// that only observes engages nothing: its record names no latch and says `mode: observe`.
pub fn trip(ctx: &Context, trip: &Trip) -> Tripped {
    let observe = trip.mode == ConditionMode::Observe;
    let caller = crate::engage::Caller {
        token: None,
        by: Some(trip.by()),
        local: true,
    };
    let scope = format!("agent:{}", trip.agent);
    let engaged = (!observe).then(|| {
        crate::engage::engage(
            ctx,
            &caller,
            &scope,
            Some(trip.level.as_str()),
            &trip.reason(),
        )
    });
    let latch = match engaged {
        None => None,
        Some(Ok(receipt)) => Some(receipt.latch.record.id),
        Some(Err(refusal)) => {
            tracing::error!(agent = %trip.agent, breaker = trip.breaker.as_str(), %refusal, "a breaker trip could not engage its latch");
            None
        }
    };
    let (gateway, run) = match &trip.surface {
        Surface::Gateway(id) => (Some(id.clone()), None),
        Surface::Stdio => (None, None),
        Surface::RunWallClock(run) => (None, Some(run.clone())),
    };
    let record = EvidenceRecord {
        schema: SCHEMA.into(),
        agent: trip.agent.clone(),
        kind: trip.breaker.record_kind().into(),
        breaker: trip.breaker,
        trigger: trip.trigger.clone(),
        threshold: trip.threshold,
        observed: trip.observed,
        latch: latch.clone().unwrap_or_default(),
        level: trip.level,
        gateway,
        run,
        mode: observe.then_some(ConditionMode::Observe),
        ts: stopline_store::env::rfc3339(ctx.store.now_ms()),
    };
    let evidence_error = ctx
        .store
        .evidence()
        .append(&record.kind, record.log_fields())
        .err();
    if let Some(error) = &evidence_error {
        tracing::error!(agent = %trip.agent, %error, "a breaker trip's evidence record was not written");
    }
    Tripped {
        latch,
        record,
        evidence_error,
    }
}
