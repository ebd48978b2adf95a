//! One supervised worker and the step its reaction loop takes on every wake: read the control
//! state, turn the run's mode into a level, enforce it through the worker, record what was
//! observed.
//!
//! The order is read fresh (`Store::load_view`) on every full wake. A view with faults, or a
//! check that panics, is a stop order at `emergency`: a supervisor that cannot tell whether a
//! stop is in force must act as if one were. The wall-clock budget is enforced here too, and an
//! agent whose root process exits while others live on in its group has them killed: nothing of
//! a run outlives it unsupervised. This module must never report quiescence it did not observe;
//! it only relays what [`Worker::enforce_with`] saw.

use super::record::{Recorder, StopCause};
use crate::context::Context;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitStatus;
use std::time::{Duration, Instant};
use stopline_core::{ControlView, Level, Refusal, RefusalCode, Subject};
use stopline_supervisor::{EnforcementAction, Worker, WorkerState};

/// What the control state orders for one subject.
#[derive(Debug, Clone, PartialEq)]
pub struct Order {
    /// The level to enforce; `None` runs (or thaws) the worker.
    pub level: Option<Level>,
    /// Why, when a level is in force.
    pub cause: Option<StopCause>,
}

/// The order a view gives `subject`: the highest covering level, or `emergency` for a view
/// with faults.
pub fn order_from_view(view: &ControlView, subject: &Subject) -> Order {
    if let Some(fault) = view.faults.first() {
        return Order {
            level: Some(Level::Emergency),
            cause: Some(StopCause::ControlState {
                code: fault.code,
                message: fault.message.clone(),
            }),
        };
    }
    let covering: Vec<_> = view.covering(subject).collect();
    let level = covering.iter().map(|latch| latch.level).max();
    Order {
        level,
        cause: level.map(|level| StopCause::Latch {
            latches: covering.iter().map(|latch| latch.id()).collect(),
            level: level.as_str().to_string(),
        }),
    }
}

/// Read the order from the store; a panic while reading or judging is an `emergency` order.
///
/// `latches/` is read first, on its own: a full view waits for the WAL's shared lock, which an
/// engage holds while it fsyncs the WAL and the epoch snapshot, and a latch file is a stop
/// whatever the WAL says. So a killing latch seen there is acted on at once (this can only
/// over-stop, never under-stop); anything less is judged from the full view.
pub fn read_order(ctx: &Context, subject: &Subject) -> Order {
    match catch_unwind(AssertUnwindSafe(|| {
        let mut early = ControlView::empty();
        match ctx.store.scan_latches() {
            Ok(latches) => early.latches = latches,
            Err(error) => early.faults.push(error.to_refusal()),
        }
        let early = order_from_view(&early, subject);
        if early.level >= Some(Level::HaltAll) {
            return early;
        }
        order_from_view(&ctx.store.load_view(), subject)
    })) {
        Ok(order) => order,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            tracing::error!(%message, "the supervisor's check panicked: treating it as a stop order");
            Order {
                level: Some(Level::Emergency),
                cause: Some(StopCause::CheckPanicked(message)),
            }
        }
    }
}

/// Where a supervised worker stands after a wake.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// Running (or a freeze or thaw is not yet confirmed).
    Running,
    /// Frozen, `frozen 1` observed.
    Frozen,
    /// A kill is issued and quiescence is not yet observed.
    Stopping,
    /// Stopped: quiescence was observed after a kill.
    Stopped(StopCause),
    /// The agent ended by itself and nothing of it is alive.
    Exited(ExitStatus),
}

/// The wall-clock budget of a run.
#[derive(Debug, Clone)]
pub struct WallClock {
    /// The budget in seconds.
    pub budget_s: f64,
    /// When the run started.
    pub started: Instant,
    /// The level the breaker engages at (at least `halt-all`: the budget is a kill).
    pub level: Level,
}

/// One worker under supervision.
pub struct Supervision {
    ctx: Context,
    subject: Subject,
    /// The worker.
    pub worker: Worker,
    /// Its registration and evidence writer.
    pub recorder: Recorder,
    order: Order,
    cause: Option<StopCause>,
    wall_clock: Option<WallClock>,
    wall_clock_tripped: Option<StopCause>,
    root_exit: Option<ExitStatus>,
}

impl Supervision {
    /// Supervise `worker` for `subject`; writes the first registration at once.
    pub fn new(
        ctx: Context,
        subject: Subject,
        worker: Worker,
        mut recorder: Recorder,
        wall_clock: Option<WallClock>,
    ) -> Supervision {
        recorder.register(&worker.status(), None);
        Supervision {
            ctx,
            subject,
            worker,
            recorder,
            order: Order {
                level: None,
                cause: None,
            },
            cause: None,
            wall_clock,
            wall_clock_tripped: None,
            root_exit: None,
        }
    }

    /// Why the worker is being (or was) stopped.
    pub fn cause(&self) -> Option<&StopCause> {
        self.cause.as_ref()
    }

    /// One step. With `reload`, the order is read fresh from the store; without, the last one
    /// is enforced again (a pending kill is retried, a root exit is noticed).
    pub fn wake(&mut self, reload: bool) -> Result<Progress, Refusal> {
        if reload {
            self.order = read_order(&self.ctx, &self.subject);
        }
        let mut level = self.order.level;
        if let Some(cause) = self.check_wall_clock() {
            level = level.max(Some(Level::HaltAll));
            self.cause.get_or_insert(cause);
        }
        if level >= Some(Level::HaltAll) && self.cause.is_none() {
            self.cause = self.order.cause.clone();
        }
        if self.cause.is_none() && self.root_exited()? && self.alive()? {
            // The root is gone but its group is not empty: the run is over, its stragglers are not
            // left behind unsupervised.
            tracing::warn!("the agent exited leaving processes in its group; killing them");
            self.cause = Some(StopCause::AgentExited);
        }
        if self.cause.is_some() {
            level = level.max(Some(Level::HaltAll));
        }
        let progress = self.enforce(level)?;
        if progress == Progress::Running && self.root_exited()? && !self.alive()? {
            // One more enforcement step observes the empty group itself, so the registration
            // says `exited` (with the exit code) from the worker's own observation.
            self.enforce(level)?;
            if let Some(status) = self.root_exit {
                return Ok(Progress::Exited(status));
            }
        }
        Ok(progress)
    }

    fn enforce(&mut self, level: Option<Level>) -> Result<Progress, Refusal> {
        let before = self.worker.status();
        let cause = self.cause.clone();
        let recorder = &mut self.recorder;
        let result = self.worker.enforce_with(level, &mut |phase| {
            let cause = cause.clone().unwrap_or(StopCause::AgentExited);
            recorder.phase(&before, phase, &cause);
        });
        let enforcement = result.map_err(|e| {
            Refusal::new(RefusalCode::ControlIo, format!("enforcing {level:?}: {e}"))
        })?;
        self.recorder
            .register(&enforcement.status, self.cause.as_ref());
        Ok(match enforcement.action {
            EnforcementAction::Quiescent => match &self.cause {
                Some(StopCause::AgentExited) => match self.root_exited()? {
                    true => Progress::Exited(self.root_exit.expect("root exit was just seen")),
                    false => Progress::Stopping,
                },
                Some(cause) => Progress::Stopped(cause.clone()),
                None => Progress::Stopping,
            },
            EnforcementAction::KillPending => Progress::Stopping,
            EnforcementAction::Frozen => Progress::Frozen,
            _ if enforcement.status.state == WorkerState::Frozen => Progress::Frozen,
            _ => Progress::Running,
        })
    }

    fn root_exited(&mut self) -> Result<bool, Refusal> {
        if self.root_exit.is_none() {
            self.root_exit = self.worker.try_wait().map_err(|e| {
                Refusal::new(RefusalCode::ControlIo, format!("waiting on the agent: {e}"))
            })?;
        }
        Ok(self.root_exit.is_some())
    }

    fn alive(&mut self) -> Result<bool, Refusal> {
        self.worker
            .is_alive()
            .map_err(|e| Refusal::new(RefusalCode::ControlIo, format!("observing the agent: {e}")))
    }

    /// Once the wall-clock budget has run out: engage the agent's breaker latch (best effort),
    /// record the evidence, and return the cause (every later call returns it again).
    fn check_wall_clock(&mut self) -> Option<StopCause> {
        if let Some(cause) = &self.wall_clock_tripped {
            return Some(cause.clone());
        }
        let wall_clock = self.wall_clock.as_ref()?;
        let elapsed = wall_clock.started.elapsed();
        if elapsed < Duration::from_secs_f64(wall_clock.budget_s.max(0.0)) {
            return None;
        }
        let (budget_s, level) = (wall_clock.budget_s, wall_clock.level);
        let agent = self.worker.status().agent;
        let caller = crate::engage::Caller {
            token: None,
            by: Some("breaker:wall_clock".into()),
            local: true,
        };
        let reason = format!(
            "breaker wall_clock tripped: the wall_clock_s budget of {budget_s} s ran out (observed {:.3} s)",
            elapsed.as_secs_f64()
        );
        let scope = format!("agent:{agent}");
        let latch = match crate::engage::engage(
            &self.ctx,
            &caller,
            &scope,
            Some(level.as_str()),
            &reason,
        ) {
            Ok(receipt) => receipt["latch"]["id"].as_str().map(str::to_string),
            Err(refusal) => {
                tracing::error!(%refusal, "the wall-clock breaker could not engage a latch; killing anyway");
                None
            }
        };
        self.recorder.wall_clock(
            &self.worker.status(),
            budget_s,
            elapsed.as_secs_f64(),
            latch.as_deref(),
            level.as_str(),
        );
        let cause = StopCause::WallClock { latch, budget_s };
        self.wall_clock_tripped = Some(cause.clone());
        Some(cause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stopline_core::{ActiveLatch, Name, Scope};

    fn subject() -> Subject {
        Subject::proven(
            vec![Name::parse("agent-a").unwrap()],
            vec!["/srv/p".into()],
            vec![Name::parse("run-1").unwrap()],
        )
    }

    fn latch(scope: Scope, level: Level) -> ActiveLatch {
        ActiveLatch {
            file: format!("latch_{}.json", level.as_str()),
            scope,
            level,
            record: None,
            problem: None,
        }
    }

    #[test]
    fn the_highest_covering_level_is_the_order_and_faults_are_emergencies() {
        let mut view = ControlView::empty();
        assert_eq!(order_from_view(&view, &subject()).level, None);
        view.latches.push(latch(
            Scope::Agent(Name::parse("other").unwrap()),
            Level::Emergency,
        ));
        assert_eq!(order_from_view(&view, &subject()).level, None);
        view.latches.push(latch(
            Scope::Run(Name::parse("run-1").unwrap()),
            Level::HaltNoncritical,
        ));
        assert_eq!(
            order_from_view(&view, &subject()).level,
            Some(Level::HaltNoncritical)
        );
        view.latches
            .push(latch(Scope::Project("/srv".into()), Level::HaltAll));
        let order = order_from_view(&view, &subject());
        assert_eq!(order.level, Some(Level::HaltAll));
        assert!(
            matches!(order.cause, Some(StopCause::Latch { ref latches, .. }) if latches.len() == 2)
        );
        let closed = ControlView::closed(Refusal::new(RefusalCode::ControlWalCorrupt, "torn"));
        let order = order_from_view(&closed, &subject());
        assert_eq!(order.level, Some(Level::Emergency));
        assert!(matches!(
            order.cause,
            Some(StopCause::ControlState {
                code: RefusalCode::ControlWalCorrupt,
                ..
            })
        ));
    }
}
