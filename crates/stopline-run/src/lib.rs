//! `stopline run`: start an agent under a policy card, contained, and enforce every stop on it
//! until it ends (docs/reference.md §6).
//!
//! In order, and nothing is started unless every step before it passed: the card is read and
//! validated (`policy_card_incomplete` names every missing field); no latch may cover the run
//! (`run_contained`); the harness version's drills must allow it (`drill_required`); the agent
//! must not run as the caller's uid unless `--unconfined`; the gateway must answer `/healthz`
//! (`gateway_unreachable`). Then the card and the run record are written under `runs/<run_id>/`,
//! the token is minted, and the command starts in its own cgroup. The reaction loop then wakes on
//! inotify and on a periodic sweep, and enforces the run's mode through the worker until the
//! agent has exited or been observed quiescent. This module never lifts a stop, and never reports
//! an agent stopped before its group was observed empty.

mod card;
pub mod codex;
mod environment;
mod gateway;
mod hook_check;
mod preflight;
mod record;
mod relay;
mod start;
mod supervise;
mod wake;

pub mod kill_probe;

pub use card::LoadedCard;
pub use preflight::DRILL_SCHEMA;
pub use record::StopCause;
pub use supervise::{order_from_view, Order, Progress};

use record::{Recorder, RunFacts};
use serde_json::json;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stopline_control::context::Context;
use stopline_core::run_record::{Begun, Concluded, OperatorStop, Outcome, RunRecord, StartedAgent};
use stopline_core::{Level, Refusal, RefusalCode, Subject};
use stopline_supervisor::{Group, Hierarchy};
use supervise::{Supervision, WallClock};

/// The periodic enforcement point: the order is re-read at least this often.
pub const SWEEP_INTERVAL: Duration = Duration::from_millis(250);
/// How often the loop looks at the agent between sweeps (root exit, a pending kill).
const TICK: Duration = Duration::from_millis(50);
/// How long the operator's stop (a stop signal to the supervisor) waits for the killed group to
/// be observed empty before the run ends anyway, recorded as a kill issued and not confirmed.
pub const OPERATOR_STOP_WAIT: Duration = Duration::from_secs(10);

/// `--net`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetMode {
    /// The host's network.
    Host,
    /// A namespace whose only way out is the gateway.
    GatewayOnly,
}

impl NetMode {
    fn as_str(self) -> &'static str {
        match self {
            NetMode::Host => "host",
            NetMode::GatewayOnly => "gateway-only",
        }
    }
}

/// `--agent-kind`: what the agent is, when its program does not say (docs/reference.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentKind {
    /// The Codex CLI: it gets a `CODEX_HOME` of its own naming the gateway and the hook.
    Codex,
    /// Claude Code: the stopline hooks its settings name must be executable by the agent.
    ClaudeCode,
    /// Anything else: the environment alone wires it.
    Other,
}

impl AgentKind {
    /// `given`, else what `command`'s program says.
    pub fn of(given: Option<AgentKind>, command: &[OsString]) -> AgentKind {
        match given {
            Some(kind) => kind,
            None if codex::is_codex(command) => AgentKind::Codex,
            None if hook_check::is_claude_code(command) => AgentKind::ClaudeCode,
            None => AgentKind::Other,
        }
    }
}

/// What `stopline run` was asked.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The policy card (JSON or TOML).
    pub policy: PathBuf,
    /// `--agent`.
    pub agent: Option<String>,
    /// `--user`: `auto` (also when `None`, the default) or a user name; exclusive with
    /// `unconfined`.
    pub user: Option<String>,
    /// `--unconfined`.
    pub unconfined: bool,
    /// `--net`.
    pub net: NetMode,
    /// `--stdin`: feed the agent the supervisor's stdin through a pipe (else `/dev/null`).
    pub stdin: bool,
    /// `--share PATH`: paths mapped into the agent's private mount namespace.
    pub share: Vec<PathBuf>,
    /// `--gateway`.
    pub gateway: Option<String>,
    /// `--agent-kind` (`None`: told by the command's program).
    pub agent_kind: Option<AgentKind>,
    /// The command and its arguments.
    pub command: Vec<OsString>,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The run record as finally written.
    pub record: RunRecord,
    /// The agent's exit code when it ended by itself (128 + signal for a signal).
    pub exit_code: i32,
    /// Set when the run was stopped: the refusal to report (exit 1).
    pub stopped: Option<Refusal>,
}

/// Why a run could not be started or supervised.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Refused before or while starting, with its code.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The supervisor could not start the agent.
    #[error("starting the agent: {0}")]
    Start(stopline_supervisor::WorkerError),
    /// The gateway-only network namespace could not be set up.
    #[error("setting up the gateway-only network namespace: {0}")]
    Namespace(stopline_supervisor::NetnsError),
}

impl RunError {
    /// This error as a refusal with a stable code.
    pub fn to_refusal(&self) -> Refusal {
        match self {
            RunError::Refused(refusal) => refusal.clone(),
            other => Refusal::new(RefusalCode::ControlIo, other.to_string()),
        }
    }
}

/// Start the run and supervise it to its end.
pub fn run(ctx: &Context, request: &RunRequest) -> Result<RunOutcome, RunError> {
    // A job-control character on the supervisor's terminal must never stop the process that
    // enforces a stop (docs/reference.md §6).
    stopline_supervisor::ignore_job_control_signals();
    // Ctrl-C, SIGTERM or a hang-up must never end the supervisor and leave its agent running
    // unsupervised: from here on they are the operator's stop of the run (`react`).
    stopline_supervisor::operator::catch_stop_signals();
    let card = card::load(&request.policy, request.agent.as_deref())?;
    if request.command.is_empty() {
        return Err(Refusal::new(RefusalCode::BadRequest, "no command to run after --").into());
    }
    let project = std::env::current_dir()
        .and_then(std::fs::canonicalize)
        .map_err(|e| {
            Refusal::new(
                RefusalCode::ProjectRootUnresolvable,
                format!("the working directory: {e}"),
            )
        })?;
    let subject = Subject::proven(
        vec![card.agent.clone()],
        vec![project.clone()],
        vec![card.run_id.clone()],
    )
    .with_labels(card.labels()?);
    preflight::no_covering_latch(ctx, &subject)?;
    preflight::drills_allow(ctx, &card.card.harness_version, card.card.require_drill)?;
    if !request.share.is_empty() && request.net == NetMode::Host {
        return Err(Refusal::new(
            RefusalCode::BadRequest,
            "--share maps paths into the private mounts of --net gateway-only; under --net host every path is shared",
        )
        .into());
    }
    // Under gateway-only an anonymous uid gets the fresh, private /tmp as its home.
    let auto_home = match request.net {
        NetMode::GatewayOnly => Path::new("/tmp"),
        NetMode::Host => Path::new("/"),
    };
    let chosen = preflight::choose_identity(
        ctx,
        request.user.as_deref(),
        request.unconfined,
        auto_home,
        &request.share,
    )?;
    let identity = chosen.user.clone();
    not_running_already(&card)?;
    let path_var = std::env::var("PATH").ok();
    let mut mapped = request.share.clone();
    mapped.push(project.clone());
    let kind = AgentKind::of(request.agent_kind, &request.command);
    let check = hook_check::HookCheck {
        command: &request.command,
        project: &project,
        identity: identity.as_ref(),
        path_var: path_var.as_deref(),
        private_mounts: (request.net == NetMode::GatewayOnly).then_some(mapped.as_slice()),
    };
    // What the command needs from under a fresh /tmp (an npm CLI's tree), mapped in too.
    let needed = hook_check::command_visible(&check)?;
    match kind {
        AgentKind::ClaudeCode => hook_check::hook_executable(&check)?,
        AgentKind::Codex => hook_check::codex_hook_executable(&check, &stopline_program()?)?,
        AgentKind::Other => {}
    }
    let share: Vec<PathBuf> = request.share.iter().cloned().chain(needed).collect();
    let env_url = std::env::var("STOPLINE_URL").ok();
    let url = gateway::choose_url(ctx, request.gateway.as_deref(), env_url.as_deref());
    let gateway = gateway::probe(ctx, &url)?;

    let mut record = RunRecord::begun(Begun {
        run_id: card.run_id.to_string(),
        agent: card.agent.to_string(),
        harness_version: card.card.harness_version.clone(),
        command: request
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        project: project.to_string_lossy().into_owned(),
        user: identity.as_ref().map(|i| i.name.clone()),
        uid: identity.as_ref().map(|i| i.uid),
        unconfined: identity.is_none(),
        net: request.net.as_str().into(),
        gateway: gateway.record(),
        gateway_config_sha256: gateway.config_sha256.clone(),
        supervisor_pid: std::process::id(),
        started_at: stopline_store::env::rfc3339(ctx.store.now_ms()),
    });
    record.observe_only = card.card.observe_only();
    // The worker's entry in runs.live/ first, then the card and run record: nothing starts
    // before all three are durable, so a stop's reach never misses a worker that may run.
    for warning in stopline_control::live::retire(ctx) {
        tracing::warn!("{warning}");
    }
    let supervisor_pid = std::process::id();
    let entry = json!({
        "project": project,
        "cgroup": Hierarchy::discover()
            .ok()
            .map(|h| h.parent().join(start::group_name(&card))),
        "supervisor_start": stopline_supervisor::proc::read_stat(supervisor_pid)
            .ok()
            .flatten()
            .map(|s| s.starttime),
        "since": stopline_store::env::rfc3339(ctx.store.now_ms()),
    });
    let live = ctx
        .store
        .runs()
        .begin_run(
            card.run_id.as_str(),
            card.agent.as_str(),
            supervisor_pid,
            &entry,
            &card.json,
            &record,
        )
        .map_err(|e| e.to_refusal())?;

    let plan = start::StartPlan {
        card: &card,
        project: &project,
        command: &request.command,
        identity: identity.as_ref(),
        net: request.net,
        gateway: &gateway,
        stdin: request.stdin,
        share: &share,
        codex: (kind == AgentKind::Codex)
            .then(stopline_program)
            .transpose()?,
    };
    let started = match start::start(ctx, &plan) {
        Ok(started) => started,
        Err(error) => {
            record.start_failed(
                error.to_refusal(),
                stopline_store::env::rfc3339(ctx.store.now_ms()),
            );
            finish_record(ctx, &card, &record, live.as_ref());
            return Err(error);
        }
    };
    let record = record.with_started(StartedAgent {
        pid: started.worker.pid(),
        method: started.worker.method().as_str().into(),
        agent_url: started.agent_url.clone(),
    });
    let facts = RunFacts {
        project: project.display().to_string(),
        user: identity.as_ref().map(|i| i.name.clone()),
        net: request.net.as_str().into(),
        supervisor_pid,
        live_entry: live.as_ref().map(|l| l.file.clone()),
        labels: card.labels()?,
    };
    let wall_clock = card.wall_clock_s().map(|budget_s| WallClock {
        budget_s,
        started: Instant::now(),
        level: card.trip_level().max(Level::HaltAll),
    });
    let mut supervision = Supervision::new(
        ctx.clone(),
        subject,
        started.worker,
        Recorder::new(ctx.store.clone(), facts),
        wall_clock,
    );
    let progress = react(ctx, &mut supervision);
    drop(started.namespace);
    started.relays.drain();
    let outcome = conclude(ctx, &card, record, supervision, progress, live.as_ref());
    // Only once the agent is gone: Codex wrote its sessions there to the end.
    drop(started.codex_home);
    // Held until the agent's group was observed empty or its root exited and was reaped.
    drop(chosen.lease);
    outcome
}

/// This program, as the hook a Codex agent runs (`<it> hook codex`).
fn stopline_program() -> Result<PathBuf, Refusal> {
    std::env::current_exe().map_err(|e| {
        Refusal::new(
            RefusalCode::ControlIo,
            format!("this program's own path, for the Codex hook: {e}"),
        )
    })
}

/// The reaction loop: wake on inotify or every [`TICK`], re-read the order on every change and
/// at least every [`SWEEP_INTERVAL`], until the agent has exited or been observed quiescent.
fn react(ctx: &Context, supervision: &mut Supervision) -> Progress {
    if let Err(error) = ctx.store.ensure_home() {
        tracing::warn!(%error, "the control directory cannot be created whole; relying on sweeps");
    }
    let wakers = wake::Wakers::spawn(ctx.store.clone());
    let mut last_sweep: Option<Instant> = None;
    let mut operator_stop: Option<Instant> = None;
    loop {
        if operator_stop.is_none() {
            if let Some(signal) = stopline_supervisor::operator::caught() {
                let name = stopline_supervisor::operator::signal_name(signal);
                tracing::warn!(
                    signal = name,
                    "stopped by the operator: killing the agent's group"
                );
                supervision.operator_stop(name);
                operator_stop = Some(Instant::now());
            }
        }
        if operator_stop.is_some_and(|at| at.elapsed() >= OPERATOR_STOP_WAIT) {
            tracing::error!(
                "the agent's group was not observed empty within {} s of the operator's stop",
                OPERATOR_STOP_WAIT.as_secs()
            );
            return Progress::Stopping;
        }
        let due = last_sweep.is_none_or(|at| at.elapsed() >= SWEEP_INTERVAL);
        let woke = if due { None } else { wakers.wait(TICK) };
        let reload = due || woke.is_some();
        if reload {
            last_sweep = Some(Instant::now());
        }
        match supervision.wake(reload) {
            Ok(progress @ (Progress::Stopped(_) | Progress::Exited(_))) => return progress,
            Ok(_) => {}
            Err(refusal) => {
                tracing::error!(%refusal, "enforcement step failed; retrying");
                std::thread::sleep(TICK);
            }
        }
    }
}

fn conclude(
    ctx: &Context,
    card: &LoadedCard,
    mut record: RunRecord,
    supervision: Supervision,
    progress: Progress,
    live: Option<&stopline_store::runs::live::LiveRun>,
) -> Result<RunOutcome, RunError> {
    let status = supervision.worker.status();
    let warnings = supervision.recorder.warnings.clone();
    let cause = supervision.cause().cloned();
    if let Err(error) = supervision.worker.release() {
        tracing::warn!(%error, "the agent's group could not be removed");
    }
    let mut stragglers_killed = false;
    let (exit_code, stopped) = match &progress {
        Progress::Stopped(cause) => (1, Some(stop_refusal(cause, &status, ctx.store.now_ms()))),
        Progress::Exited(exit) => {
            use std::os::unix::process::ExitStatusExt;
            let code = exit
                .code()
                .unwrap_or_else(|| 128 + exit.signal().unwrap_or(0));
            stragglers_killed = cause == Some(StopCause::AgentExited);
            (code, None)
        }
        _ => (1, None),
    };
    let outcome = match (&stopped, &progress) {
        (Some(_), _) => Outcome::Stopped,
        // The operator's stop ran out of its wait: the kill is issued, quiescence unobserved
        // (the registration says `killing`, so its entry in runs.live/ stays for the census).
        (None, Progress::Stopping) => Outcome::StopUnconfirmed,
        (None, _) => Outcome::Exited,
    };
    let stopped_by_operator = match &cause {
        Some(StopCause::Operator { signal }) => Some(OperatorStop {
            signal: signal.clone(),
        }),
        _ => None,
    };
    record.concluded(
        outcome,
        Concluded {
            exit_code,
            kill_issued_at: status.kill_issued_at.map(record::timestamp),
            quiescent_observed_at: status.quiescent_observed_at.map(record::timestamp),
            warnings,
            stop: stopped.clone(),
            stragglers_killed,
            stopped_by_operator,
        },
        stopline_store::env::rfc3339(ctx.store.now_ms()),
    );
    finish_record(ctx, card, &record, live);
    Ok(RunOutcome {
        record,
        exit_code,
        stopped,
    })
}

fn stop_refusal(
    cause: &StopCause,
    status: &stopline_supervisor::WorkerStatus,
    now_ms: i64,
) -> Refusal {
    let observed = format!(
        "kill issued at {}, quiescence observed at {}",
        status
            .kill_issued_at
            .map(|t| t.to_rfc3339())
            .unwrap_or_default(),
        status
            .quiescent_observed_at
            .map(|t| t.to_rfc3339())
            .unwrap_or_default(),
    );
    let (code, why) = match cause {
        StopCause::Latch {
            latches,
            level,
            named: Some(named),
        } => {
            let why = format!(
                "the agent was stopped by {} at {level}: {}; {}",
                latches.join(", "),
                named.describe(now_ms),
                named.advice()
            );
            let refusal = Refusal::new(
                RefusalCode::BreakGlassContained,
                format!("{why}; {observed}"),
            );
            return refusal.with_latch(Some(named.clone()));
        }
        StopCause::Latch { latches, level, .. } => (
            RefusalCode::BreakGlassContained,
            format!("the agent was stopped by {} at {level}", latches.join(", ")),
        ),
        StopCause::ControlState { code, message } => (
            *code,
            format!("the control state cannot be trusted ({message}), so the agent was stopped"),
        ),
        StopCause::ReadFault { message } => (
            RefusalCode::ControlIo,
            format!("the control state could not be read ({message}), so the agent was stopped"),
        ),
        StopCause::CheckPanicked(message) => (
            RefusalCode::ControlStateCorrupt,
            format!("the supervisor's check panicked ({message}), so the agent was stopped"),
        ),
        StopCause::WallClock { latch, budget_s } => (
            RefusalCode::BudgetExhausted,
            format!(
                "the wall_clock_s budget of {budget_s} s ran out (breaker latch {})",
                latch.as_deref().unwrap_or("not engaged")
            ),
        ),
        StopCause::AgentExited => (
            RefusalCode::ControlIo,
            "the agent's stragglers were killed".into(),
        ),
        StopCause::Operator { signal } => (
            RefusalCode::RunContained,
            format!("the operator stopped the run ({signal} to stopline run): the agent's group was killed"),
        ),
    };
    Refusal::new(code, format!("{why}; {observed}"))
}

/// Write how the run ended, then take its entry out of `runs.live/` (its worker's last
/// registration is written and its group released by now). An entry that cannot be removed
/// stays for the census (`stopline_control::live`), which removes it once this process is gone.
fn finish_record(
    ctx: &Context,
    card: &LoadedCard,
    record: &RunRecord,
    live: Option<&stopline_store::runs::live::LiveRun>,
) {
    if let Err(error) = ctx
        .store
        .runs()
        .update_run_record(card.run_id.as_str(), record)
    {
        tracing::error!(%error, "the run record could not be updated");
    }
    if let Some(live) = live {
        if let Err(error) = ctx.store.runs().end_run(live) {
            tracing::error!(%error, "the run's entry in runs.live/ stays for the census");
        }
    }
}

/// Refuse a second live run of the same run id and agent (their group would be shared).
fn not_running_already(card: &LoadedCard) -> Result<(), Refusal> {
    let Ok(hierarchy) = Hierarchy::discover() else {
        return Ok(());
    };
    let name = start::group_name(card);
    match Group::open(&hierarchy, &name).and_then(|group| group.events()) {
        Ok(events) if events.populated => Err(Refusal::new(
            RefusalCode::BadRequest,
            format!(
                "agent {} of run {} is already running (group {name})",
                card.agent, card.run_id
            ),
        )),
        _ => Ok(()),
    }
}
