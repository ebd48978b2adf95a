//! One supervised worker and the step its reaction loop takes on every wake: read the control
//! state, turn the run's mode into a level, enforce it through the worker, record what was
//! observed.
//!
//! The order is read fresh (`Store::load_view_timed`) on every full wake. A view with faults, or
//! a check that panics, is a stop order at `emergency`: a supervisor that cannot tell whether a
//! stop is in force must act as if one were. A read that does not finish within
//! `read_timeout_ms` is a stop order too, at `halt-noncritical` (docs/reference.md §5: freeze; kill at
//! emergency), held until a latch holds it ([`FaultHold`]). The wall-clock budget is enforced here too, and an
//! agent whose root process exits while others live on in its group has them killed: nothing of
//! a run outlives it unsupervised. This module must never report quiescence it did not observe;
//! it only relays what [`Worker::enforce_with`] saw.
//!
//! With a distributed plane (`--control etcd://…`) the order is also what the plane says
//! ([`PlaneWatch`]): a latch engaged on any host stops this host's workers too. The plane is
//! polled on its own thread, so a slow or unreachable etcd never delays the reaction to a local
//! latch. An unreachable plane is not a corrupt one: its last known latches stay in force (an
//! outage never forgets a stop), and once it has been silent for the permit (2 s, the gateways'
//! default `permit_ttl_ms`) the workers are frozen — the supervisor's form of "noncritical work
//! stops" — and thawed when it answers again. Any other fault it reports is a stop order, as
//! locally.

use super::record::{Recorder, StopCause};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stopline_control::context::Context;
use stopline_core::{ActiveLatch, ControlView, Level, Refusal, RefusalCode, Subject};
use stopline_store::ControlPlane;
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
            named: view.cause_for(subject),
        }),
    }
}

/// Read the order from the store, within a bound: a check that has not completed within the
/// store's `read_timeout_ms` (and a second more, for the judging) is a stop order that freezes
/// the worker (docs/reference.md §5) — it cannot tell whether a stop is in force, and the next wake reads
/// again, killing at emergency. The read runs on its own thread, so whatever blocks it (an
/// entry that never finishes reading, a lock held by a stopped process) never wedges the
/// reaction loop: a later emergency still kills. The store's own bound on the whole read
/// (`Store::load_view_timed`) is the same fault, found a second sooner.
pub fn read_order(ctx: &Context, subject: &Subject) -> Order {
    let bound = ctx
        .store
        .read_timeout()
        .unwrap_or(stopline_store::DEFAULT_READ_TIMEOUT)
        + Duration::from_secs(1);
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    let (ctx_read, subject_read) = (ctx.clone(), subject.clone());
    let spawned = std::thread::Builder::new()
        .name("stopline-check".into())
        .spawn(move || {
            let _ = sender.send(read_order_now(&ctx_read, &subject_read));
        });
    if let Err(error) = spawned {
        return read_fault(format!("cannot start the check: {error}"));
    }
    match receiver.recv_timeout(bound) {
        Ok(order) => order,
        Err(_) => read_fault(format!(
            "the check did not complete within {} ms",
            bound.as_millis()
        )),
    }
}

/// The order a read that did not finish gives: freeze (docs/reference.md §5), for `why`.
fn read_fault(why: String) -> Order {
    tracing::error!(%why, "the supervisor's check did not complete: treating it as a stop order");
    Order {
        level: Some(Level::HaltNoncritical),
        cause: Some(StopCause::ReadFault { message: why }),
    }
}

/// [`read_order`] on this thread; a panic while reading or judging is an `emergency` order.
///
/// `latches/` is read first, on its own: a full view waits for the WAL's shared lock, which an
/// engage holds while it fsyncs the WAL and the epoch snapshot, and a latch file is a stop
/// whatever the WAL says. So a well-formed killing latch seen there is acted on at once (this
/// can only over-stop, never under-stop); anything less is judged from the full view. An entry
/// that cannot be read or parsed there is left to the full view too: without the lock, a
/// disengage or a recovery may remove a latch between the listing and the read of its entry,
/// and that gap is no emergency (it killed a paused agent whose pause was being lifted). The
/// full view lists and reads `latches/` under the lock, where nothing is removed, and a doubtful
/// entry there is a machine emergency as always; an unlistable `latches/` is a fault at once.
/// An entry too slow to read (docs/reference.md §5) is no latch here either: the full view counts it as a
/// read that did not finish (`Store::load_view_timed`), which freezes, and a well-formed
/// killing latch beside it still kills from here.
fn read_order_now(ctx: &Context, subject: &Subject) -> Order {
    match catch_unwind(AssertUnwindSafe(|| {
        let mut early = ControlView::empty();
        match ctx.store.latches().scan() {
            Ok(scan) => {
                early.latches = scan
                    .latches
                    .into_iter()
                    .filter(|latch| latch.problem.is_none())
                    .collect()
            }
            Err(error) => early.faults.push(error.to_refusal()),
        }
        let early = order_from_view(&early, subject);
        if early.level >= Some(Level::HaltAll) {
            return early;
        }
        match ctx.store.load_view_timed() {
            Ok(view) => order_from_view(&view, subject),
            Err(timed_out) => read_fault(timed_out.refusal.message),
        }
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

impl Order {
    /// The stricter of two orders (the first on a tie).
    pub fn stricter(self, other: Order) -> Order {
        if other.level > self.level {
            other
        } else {
            self
        }
    }
}

/// How long a distributed plane may stay silent before the workers are frozen when
/// `permit_ttl_ms` is absent: the gateways' default.
pub const PLANE_PERMIT: Duration = stopline_control::config::DEFAULT_PERMIT_TTL;

/// How often the distributed plane is read.
const PLANE_POLL: Duration = Duration::from_millis(100);

/// What a distributed plane last said, kept current by a poller thread (etcd mode only).
#[derive(Debug)]
pub struct PlaneWatch {
    seen: Arc<Mutex<PlaneSeen>>,
    stop: Arc<AtomicBool>,
    permit: Duration,
}

#[derive(Debug, Clone)]
struct PlaneSeen {
    started: Instant,
    /// The last read that reached the plane.
    last_ok: Option<Instant>,
    /// The latches of the last read that reached it (kept while it is unreachable).
    latches: Vec<ActiveLatch>,
    /// Faults of the last read other than unreachability: each is a stop order.
    faults: Vec<Refusal>,
    /// Why the last read did not reach the plane.
    unreachable: Option<Refusal>,
}

impl PlaneSeen {
    /// Fold one read of the plane in.
    fn update(&mut self, view: ControlView, now: Instant) {
        let (unreachable, faults): (Vec<Refusal>, Vec<Refusal>) = view
            .faults
            .into_iter()
            .partition(|f| f.code == RefusalCode::DistributedUnavailable);
        self.faults = faults;
        match unreachable.into_iter().next() {
            Some(why) => {
                // Latches the merged read still saw (this host's own) join the ones last seen.
                for latch in view.latches {
                    if !self.latches.iter().any(|l| l.file == latch.file) {
                        self.latches.push(latch);
                    }
                }
                self.unreachable = Some(why);
            }
            None => {
                self.latches = view.latches;
                self.unreachable = None;
                self.last_ok = Some(now);
            }
        }
    }

    /// The order for `subject` at `now`.
    fn order(&self, subject: &Subject, now: Instant, permit: Duration) -> Order {
        let view = ControlView {
            latches: self.latches.clone(),
            faults: self.faults.clone(),
            ..ControlView::empty()
        };
        let order = order_from_view(&view, subject);
        let silent = now.duration_since(self.last_ok.unwrap_or(self.started));
        if silent <= permit {
            return order;
        }
        let why = self
            .unreachable
            .as_ref()
            .map_or_else(|| "no read has finished".to_string(), |r| r.message.clone());
        order.stricter(Order {
            level: Some(Level::HaltNoncritical),
            cause: Some(StopCause::ControlState {
                code: RefusalCode::DistributedUnavailable,
                message: format!(
                    "no word from the distributed control plane for {} ms: {why}",
                    silent.as_millis()
                ),
            }),
        })
    }
}

impl PlaneWatch {
    /// Poll `plane` on a thread of its own until dropped; `None` for the local plane (the
    /// reaction loop reads the control directory itself).
    pub fn start(plane: Arc<dyn ControlPlane>, permit: Duration) -> Option<PlaneWatch> {
        if plane.backend() == "local" {
            return None;
        }
        let seen = Arc::new(Mutex::new(PlaneSeen {
            started: Instant::now(),
            last_ok: None,
            latches: Vec::new(),
            faults: Vec::new(),
            unreachable: None,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (poll_seen, poll_stop) = (seen.clone(), stop.clone());
        let spawned = std::thread::Builder::new()
            .name("stopline-plane-watch".into())
            .spawn(move || {
                while !poll_stop.load(Ordering::SeqCst) {
                    let view =
                        catch_unwind(AssertUnwindSafe(|| plane.load_view())).unwrap_or_else(|_| {
                            let mut view = ControlView::empty();
                            view.faults.push(Refusal::new(
                                RefusalCode::ControlIo,
                                "reading the distributed control plane panicked",
                            ));
                            view
                        });
                    poll_seen
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .update(view, Instant::now());
                    std::thread::sleep(PLANE_POLL);
                }
            });
        let watch = PlaneWatch { seen, stop, permit };
        if let Err(error) = spawned {
            // Without its poller the watch never hears from the plane: the permit lapses and
            // the workers are frozen, which is the safe side.
            tracing::error!(%error, "cannot start the distributed plane watch");
        }
        Some(watch)
    }

    /// The order the plane gives `subject` now.
    pub fn order(&self, subject: &Subject) -> Order {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).order(
            subject,
            Instant::now(),
            self.permit,
        )
    }
}

impl Drop for PlaneWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
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
    /// The order was read fresh after the root exited ([`Supervision::attribute_exit`]).
    exit_order_read: bool,
    /// The distributed plane's order (etcd mode).
    plane: Option<PlaneWatch>,
    /// The freeze a read fault ordered, held until the latch engaged for it is in force.
    fault_hold: Option<FaultHold>,
}

/// A freeze a read fault ordered (docs/reference.md §5), kept in force after the reads succeed again: a
/// stop is never undone by itself (§1, §4), and a fault that clears says nothing about whether
/// a stop was engaged meanwhile. The supervisor makes it a latch (`run:<id>` at
/// `halt-noncritical`, by `supervisor:read_fault`), so the freeze is lifted the normal way
/// (`stopline disengage`, or a recovery); the hold ends at the first whole read that began
/// after that latch landed, which then either holds the freeze itself or shows it lifted.
struct FaultHold {
    /// The freeze order; its cause names the first fault.
    order: Order,
    /// The engage of the latch: `None` while it runs, then its latch id or why it failed (a
    /// failed engage is tried again at the next wake).
    engaged: Arc<Mutex<Option<Result<String, String>>>>,
}

impl FaultHold {
    fn engaged(&self) -> Option<Result<String, String>> {
        self.engaged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The `by:` of the latch a supervisor engages for a read fault.
pub const READ_FAULT_BY: &str = "supervisor:read_fault";

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
        // The permit the gateways keep (`permit_ttl_ms`). A zero one was refused when the
        // distributed plane was attached, before any run started; a local plane has no watch.
        let permit = ctx.config.permit_ttl().unwrap_or(PLANE_PERMIT);
        let plane = PlaneWatch::start(ctx.plane.clone(), permit);
        Supervision {
            plane,
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
            exit_order_read: false,
            fault_hold: None,
        }
    }

    /// Read the order ([`read_order`]) and keep a read fault's freeze in force (see
    /// [`FaultHold`]).
    fn read(&mut self) -> Order {
        let landed = self
            .fault_hold
            .as_ref()
            .is_some_and(|hold| matches!(hold.engaged(), Some(Ok(_))));
        let order = read_order(&self.ctx, &self.subject);
        if matches!(order.cause, Some(StopCause::ReadFault { .. })) {
            match &self.fault_hold {
                None => {
                    let hold = FaultHold {
                        order: order.clone(),
                        engaged: Arc::new(Mutex::new(None)),
                    };
                    self.engage_fault_latch(&hold);
                    self.fault_hold = Some(hold);
                }
                Some(hold) if matches!(hold.engaged(), Some(Err(_))) => {
                    self.engage_fault_latch(hold)
                }
                Some(_) => {}
            }
        } else if landed {
            tracing::info!(
                "the control state reads again; the read fault's latch holds its freeze"
            );
            self.fault_hold = None;
        }
        match &self.fault_hold {
            Some(hold) => order.stricter(hold.order.clone()),
            None => order,
        }
    }

    /// Engage the latch that holds a read fault's freeze, on a thread of its own: the store
    /// that could not be read may not be written quickly either, and the reaction loop never
    /// waits on it (the hold keeps the freeze meanwhile).
    fn engage_fault_latch(&self, hold: &FaultHold) {
        *hold.engaged.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let status = self.worker.status();
        let scope = format!("run:{}", status.run_id);
        let why = match &hold.order.cause {
            Some(StopCause::ReadFault { message }) => message.chars().take(200).collect(),
            _ => String::new(),
        };
        let reason = format!(
            "the supervisor of agent {} could not read the control state ({why}) and froze it; this latch keeps it frozen until it is disengaged",
            status.agent
        );
        let (ctx, engaged) = (self.ctx.clone(), hold.engaged.clone());
        let spawned = std::thread::Builder::new()
            .name("stopline-fault-latch".into())
            .spawn(move || {
                let caller = stopline_control::engage::Caller {
                    token: None,
                    by: Some(READ_FAULT_BY.into()),
                    local: true,
                };
                let result = stopline_control::engage::engage(
                    &ctx,
                    &caller,
                    &scope,
                    Some(Level::HaltNoncritical.as_str()),
                    &reason,
                )
                .map(|receipt| receipt.latch.record.id)
                .map_err(|refusal| refusal.to_string());
                match &result {
                    Ok(latch) => tracing::warn!(%latch, %scope, "a read fault's freeze is held by a latch"),
                    Err(refusal) => tracing::error!(%refusal, %scope, "cannot engage the latch that holds a read fault's freeze; the freeze is held in memory and the engage is tried again"),
                }
                *engaged.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
            });
        if let Err(error) = spawned {
            *hold.engaged.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(Err(format!("cannot start the engage: {error}")));
        }
    }

    /// The operator stopped the run with `signal` (SIGINT, SIGTERM, SIGHUP reached the
    /// supervisor): from the next wake the group is killed, unless a stop with a cause of its
    /// own is already under way (that cause stays; the kill is the same).
    pub fn operator_stop(&mut self, signal: &str) {
        self.cause.get_or_insert(StopCause::Operator {
            signal: signal.to_string(),
        });
    }

    /// Why the worker is being (or was) stopped.
    pub fn cause(&self) -> Option<&StopCause> {
        self.cause.as_ref()
    }

    /// One step. With `reload`, the order is read fresh from the store; without, the last one
    /// is enforced again (a pending kill is retried, a root exit is noticed).
    pub fn wake(&mut self, reload: bool) -> Result<Progress, Refusal> {
        if reload {
            self.order = self.read();
            tracing::debug!(level = ?self.order.level, "order read");
            // A test seam (`stop_if:` parks the supervisor just after its read); no action of
            // it means anything here, so its result is not a fault of the run.
            stopline_store::failpoint::hit("run.wake.ordered").ok();
        }
        if let Some(plane) = &self.plane {
            // Every wake: the poller keeps it current, and reading it costs a lock.
            self.order = self.order.clone().stricter(plane.order(&self.subject));
        }
        if self.order.level.is_none() && self.frozen_by_another()? {
            // An engage freezes a covered group itself (docs/reference.md §6), so a group this worker did
            // not freeze may be frozen by a stop this wake's order was read too early to hold:
            // read it again before thawing (a pause lifted meanwhile still thaws).
            self.order = self.read();
            if let Some(plane) = &self.plane {
                self.order = self.order.clone().stricter(plane.order(&self.subject));
            }
        }
        let mut level = self.order.level;
        if let Some(cause) = self.check_wall_clock() {
            level = level.max(Some(Level::HaltAll));
            self.cause.get_or_insert(cause);
        }
        if level >= Some(Level::HaltAll) && self.cause.is_none() {
            self.cause = self.order.cause.clone();
        }
        if self.root_exited()? {
            self.attribute_exit();
            level = level.max(self.order.level);
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
            self.attribute_exit();
            if self.cause.is_some() {
                return self.enforce(level.max(self.order.level).max(Some(Level::HaltAll)));
            }
            // One more enforcement step observes the empty group itself, so the registration
            // says `exited` (with the exit code) from the worker's own observation.
            self.enforce(level)?;
            if let Some(status) = self.root_exit {
                return Ok(Progress::Exited(status));
            }
        }
        Ok(progress)
    }

    /// Once, when the agent's root is first seen gone with no stop cause: read the order fresh
    /// (the distributed plane's too) before the exit is put down to the agent. An engage kills
    /// a covered group itself (docs/reference.md §6), so the root can die of a stop this wake has not read
    /// yet, its children still dying; stop wins that race. An unreachable plane is not a stop of
    /// an agent that has already ended.
    fn attribute_exit(&mut self) {
        if self.cause.is_some() || self.exit_order_read {
            return;
        }
        self.exit_order_read = true;
        self.order = read_order(&self.ctx, &self.subject);
        if self.plane.is_some() {
            let mut view = self.ctx.plane.load_view();
            view.faults
                .retain(|f| f.code != RefusalCode::DistributedUnavailable);
            self.order = self
                .order
                .clone()
                .stricter(order_from_view(&view, &self.subject));
        }
        if self.order.level >= Some(Level::HaltAll) {
            self.cause = self.order.cause.clone();
        }
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
        // A read fault's freeze says why in the registration, as a kill does.
        let recorded = self.cause.clone().or_else(|| {
            self.fault_hold
                .as_ref()
                .filter(|_| level.is_some())
                .and_then(|hold| hold.order.cause.clone())
        });
        self.recorder
            .register(&enforcement.status, recorded.as_ref());
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

    /// True when the worker's group is frozen although this worker did not freeze it.
    fn frozen_by_another(&self) -> Result<bool, Refusal> {
        if matches!(
            self.worker.status().state,
            WorkerState::Frozen | WorkerState::Freezing
        ) {
            return Ok(false);
        }
        let Some(group) = self.worker.group() else {
            return Ok(false);
        };
        group
            .events()
            .map(|events| events.frozen)
            .map_err(|e| Refusal::new(RefusalCode::ControlIo, format!("observing the agent: {e}")))
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
        let status = self.worker.status();
        let trip = stopline_control::trip::Trip {
            agent: status.agent,
            breaker: stopline_core::BreakerKind::BudgetExhausted,
            trigger: "wall_clock_s".into(),
            threshold: budget_s,
            observed: elapsed.as_secs_f64(),
            level,
            surface: stopline_control::trip::Surface::RunWallClock(status.run_id),
            // The wall clock always stops (a card that sets it to observe is refused).
            mode: stopline_core::policy::ConditionMode::Enforce,
        };
        // A failed engage is logged by the trip; the run is killed anyway.
        let tripped = stopline_control::trip::trip(&self.ctx, &trip);
        if let Some(error) = tripped.evidence_error {
            self.recorder
                .warn(format!("wall-clock evidence not appended: {error}"));
        }
        let latch = tripped.latch;
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

    fn seen(started: Instant) -> PlaneSeen {
        PlaneSeen {
            started,
            last_ok: None,
            latches: Vec::new(),
            faults: Vec::new(),
            unreachable: None,
        }
    }

    fn unreachable() -> ControlView {
        let mut view = ControlView::empty();
        view.faults.push(Refusal::new(
            RefusalCode::DistributedUnavailable,
            "etcd at 127.0.0.1:1 is unreachable",
        ));
        view
    }

    #[test]
    fn a_plane_latch_stops_and_an_outage_never_forgets_it() {
        let t0 = Instant::now();
        let permit = Duration::from_secs(2);
        let mut plane = seen(t0);
        plane.update(ControlView::empty(), t0);
        assert_eq!(plane.order(&subject(), t0, permit).level, None);
        let mut stopped = ControlView::empty();
        stopped.latches.push(latch(
            Scope::Run(Name::parse("run-1").unwrap()),
            Level::Emergency,
        ));
        plane.update(stopped, t0);
        assert_eq!(
            plane.order(&subject(), t0, permit).level,
            Some(Level::Emergency)
        );
        // etcd goes away: the stop it showed stays in force, within the permit and after.
        plane.update(unreachable(), t0 + Duration::from_millis(100));
        for later in [100, 5000] {
            let order = plane.order(&subject(), t0 + Duration::from_millis(later), permit);
            assert_eq!(order.level, Some(Level::Emergency), "after {later} ms");
        }
    }

    #[test]
    fn a_silent_plane_freezes_after_the_permit_and_thaws_when_it_answers() {
        let t0 = Instant::now();
        let permit = Duration::from_secs(2);
        let mut plane = seen(t0);
        plane.update(ControlView::empty(), t0);
        plane.update(unreachable(), t0 + Duration::from_millis(500));
        // Within the permit: nothing ordered (an outage is not a corrupt state).
        let within = plane.order(&subject(), t0 + Duration::from_millis(1900), permit);
        assert_eq!(within.level, None);
        // Past it: frozen, and the cause names the outage.
        let past = plane.order(&subject(), t0 + Duration::from_millis(2100), permit);
        assert_eq!(past.level, Some(Level::HaltNoncritical));
        assert!(
            matches!(past.cause, Some(StopCause::ControlState { code: RefusalCode::DistributedUnavailable, ref message }) if message.contains("unreachable")),
            "{past:?}"
        );
        // A plane that never answered at all lapses the same way, counted from the start.
        let mut never = seen(t0);
        never.update(unreachable(), t0);
        assert_eq!(
            never
                .order(&subject(), t0 + Duration::from_millis(2100), permit)
                .level,
            Some(Level::HaltNoncritical)
        );
        // It answers again with nothing in force: the order lifts (the worker is thawed).
        plane.update(ControlView::empty(), t0 + Duration::from_millis(3000));
        assert_eq!(
            plane
                .order(&subject(), t0 + Duration::from_millis(3000), permit)
                .level,
            None
        );
    }

    #[test]
    fn any_other_plane_fault_is_an_emergency() {
        let t0 = Instant::now();
        let mut plane = seen(t0);
        let mut corrupt = ControlView::empty();
        corrupt.faults.push(Refusal::new(
            RefusalCode::ControlWalCorrupt,
            "the WAL under the prefix has a gap",
        ));
        plane.update(corrupt, t0);
        let order = plane.order(&subject(), t0, Duration::from_secs(2));
        assert_eq!(order.level, Some(Level::Emergency));
    }

    #[test]
    fn the_stricter_order_wins() {
        let none = Order {
            level: None,
            cause: None,
        };
        let halt = Order {
            level: Some(Level::HaltAll),
            cause: None,
        };
        assert_eq!(none.clone().stricter(halt.clone()), halt);
        assert_eq!(halt.clone().stricter(none), halt);
    }

    #[test]
    fn the_local_plane_needs_no_watch() {
        let dir = tempfile::tempdir().unwrap();
        let store = stopline_store::Store::open(dir.path().join("home"));
        assert!(PlaneWatch::start(Arc::new(store), PLANE_PERMIT).is_none());
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
