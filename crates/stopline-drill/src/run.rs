//! One drill, start to finish: set up (locally or against a live gateway), mint the agents'
//! tokens and delegate the sub-agents' through the gateway, prove the scope covers every caller,
//! let them run, pull at a random moment, watch the window, stop the callers, match, judge, tear
//! down, and file the observation in the home's evidence log.
//!
//! The servers (gateway and destination) run on their own runtime and the callers and puller on
//! another, as they would in separate processes; both share the machine's cores, which is the
//! point of a drill under load.

use crate::agents::{run_caller, Caller, CallerReport, Endpoints, Shared, Targets};
use crate::client::CallerClient;
use crate::destination::Destination;
use crate::long_task::{run_long_task, LongTask};
use crate::matching::match_effects;
use crate::observation::{Floor, Inputs, Observation};
use crate::options::resolve_scope;
use crate::progress::Progress;
use crate::pull::{pull, Puller};
use crate::{DrillError, DrillOptions, Mode};
use rand::Rng;
use serde_json::{json, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stopline_control::{engage, tokens, Context};
use stopline_core::{Refusal, RefusalCode, Role};
use stopline_store::Store;

/// What a drill runs against.
pub(crate) struct Env {
    pub gateway_url: String,
    /// The control directory tokens are minted from and operations are read from.
    pub ctx: Context,
    pub puller: Puller,
    pub endpoints: Endpoints,
    pub destination: Destination,
    pub label: String,
    /// The in-process gateway's timeline (`None` against a live gateway): what
    /// [`crate::breakdown`] joins with the callers' reports.
    pub timeline: Option<Arc<stopline_gateway::timeline::Timeline>>,
    /// The gateway's `queue_timeout_s`, in ms: how long it holds a noncritical call under
    /// HALT_NONCRITICAL before refusing it `queued_timeout`.
    pub queue_timeout_ms: u64,
    pub teardown: Teardown,
}

/// How long the drill waits for a `dispatched` record of an executed effect to be written
/// (a live gateway writes them from its journal's queue, milliseconds after the dispatch).
const DISPATCHED_WAIT: Duration = Duration::from_secs(2);

/// How long past its moment the pull waits for the long A2A task to open.
const LONG_TASK_OPEN_WAIT: Duration = Duration::from_secs(10);

impl Env {
    /// Start the gateway's timeline, if there is one (just before the callers start).
    fn start_timeline(&self) {
        if let Some(timeline) = &self.timeline {
            timeline.start();
        }
    }

    /// The breakdown of `reports` against the gateway's marks since [`Env::start_timeline`];
    /// `None` without a timeline or a pull.
    fn breakdown(
        &self,
        shared: &Shared,
        reports: &[CallerReport],
        latched: bool,
    ) -> Option<crate::breakdown::Breakdown> {
        let marks = self.timeline.as_ref()?.take();
        let pulled = *shared.pulled.get()?;
        Some(crate::breakdown::breakdown(
            pulled, &marks, reports, latched,
        ))
    }

    /// The operation registry once it holds what the drill judges by: every record the
    /// in-process gateway queued (a `dispatched` record is queued at the dispatch and written
    /// by the journal's writer thread), and — against a live gateway, up to
    /// [`DISPATCHED_WAIT`] — a `dispatched` record for every operation whose effect the
    /// destination executed. An effect whose record is still missing then is judged as
    /// admitted after the trip (`matching.rs`): a missing record never hides an effect.
    async fn registry_of(
        &self,
        effects: &[crate::effects::Effect],
    ) -> Result<std::collections::BTreeMap<String, stopline_core::ops::Operation>, DrillError> {
        if let Teardown::Local { gateway, .. } = &self.teardown {
            gateway.settle_journal().await.map_err(|e| e.to_refusal())?;
        }
        let waited = Instant::now();
        loop {
            let ctx = self.ctx.clone();
            let (ops, errors) = tokio::task::spawn_blocking(move || ctx.store.ops().all())
                .await
                .map_err(|e| Refusal::new(RefusalCode::ControlIo, e.to_string()))?;
            if !errors.is_empty() {
                return Err(Refusal::new(
                    RefusalCode::ControlStateCorrupt,
                    format!(
                        "the operation registry cannot be read, so effects cannot be matched: {}",
                        errors.join("; ")
                    ),
                )
                .into());
            }
            let undispatched = crate::matching::executed_undispatched(effects, &ops);
            if undispatched == 0 || waited.elapsed() >= DISPATCHED_WAIT {
                return Ok(ops);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// What to take down afterwards.
pub(crate) enum Teardown {
    Local {
        gateway: Box<stopline_gateway::RunningGateway>,
        dir: tempfile::TempDir,
    },
    Remote,
}

fn runtime(name: &str) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name(name)
        .build()
}

/// Run one drill and, unless `options.record` is false, file its observation.
pub fn drill(options: &DrillOptions) -> Result<Observation, DrillError> {
    options.validate()?;
    let mut observation = in_a_world(options, |o, id, env| Box::pin(drive(o, id, env)))?;
    if options.floor {
        let floor = in_a_world(options, |o, id, env| Box::pin(drive_floor(o, id, env)))?;
        observation.floor = Some(floor);
    }
    if options.record {
        observation.file(&Store::open(&options.home))?;
    }
    Ok(observation)
}

/// How a world is driven: the drill (the stop pulled at a random moment under load) or its
/// floor (the stop engaged before any caller starts).
type Driver<T> = for<'a> fn(
    &'a DrillOptions,
    &'a str,
    &'a Env,
) -> Pin<Box<dyn Future<Output = Result<T, DrillError>> + 'a>>;

/// Set up a fresh world (locally or against a live gateway) under a fresh drill id, drive it,
/// and take it down, whatever the driving gave.
fn in_a_world<T>(options: &DrillOptions, driver: Driver<T>) -> Result<T, DrillError> {
    let drill_id = hex::encode(rand::thread_rng().gen::<[u8; 4]>());
    let servers = stopline_gateway::server::runtime("stopline-drill-srv")?;
    let clients = runtime("stopline-drill-cli")?;
    let env = servers.block_on(async {
        match &options.mode {
            Mode::Local => crate::local::start(options).await,
            Mode::Against(url) => crate::remote::start(&options.home, url, &drill_id).await,
        }
    })?;
    let result = clients.block_on(driver(options, &drill_id, &env));
    let Env {
        destination,
        teardown,
        ..
    } = env;
    servers.block_on(async move {
        if let Teardown::Local { gateway, dir } = teardown {
            gateway.shutdown().await;
            drop(dir);
        }
        destination.shutdown();
    });
    result
}

/// The set-up's client (delegation through the gateway); the callers have their own.
fn client(options: &DrillOptions) -> Result<reqwest::Client, DrillError> {
    reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(options.callers() + 8)
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| crate::setup("HTTP client")(e.to_string()))
}

/// The floor of a drill (`--floor`): the callers' tokens minted and delegated, then the stop
/// engaged *before* any caller starts, then the same load; at the same random moment the
/// "pull" is only noted (nothing is engaged) and each caller's first refusal after it is
/// timed. What that takes is the machine answering this many callers, with no gateway
/// reaction in it.
async fn drive_floor(
    options: &DrillOptions,
    drill_id: &str,
    env: &Env,
) -> Result<Floor, DrillError> {
    let Prepared {
        level,
        scope,
        callers,
    } = prepare(options, drill_id, env, &Progress::hidden()).await?;
    // The stop, before the load: every call of every caller is refused from its first.
    pull(
        &env.puller,
        &Arc::new(Shared::default()),
        &scope,
        level.as_str(),
    )
    .await?;
    let shared = Arc::new(Shared::default());
    env.start_timeline();
    let started = Instant::now();
    let running = start_callers(env, callers, &shared, false);
    let pull_at = pull_at_ms(options);
    tokio::time::sleep(Duration::from_millis(pull_at).saturating_sub(started.elapsed())).await;
    let _ = shared.pulled.set(Instant::now());
    tokio::time::sleep(Duration::from_millis(options.window_ms.unwrap_or(1000))).await;
    let (reports, _) = stop_callers(&shared, running).await;
    let breakdown = env.breakdown(&shared, &reports, false);
    let ops = env.registry_of(&env.destination.effects()).await?;
    let prefix = format!("drill-{drill_id}-");
    let admitted = ops
        .values()
        .filter(|op| op.dispatched && op.agent.as_deref().is_some_and(|a| a.starts_with(&prefix)))
        .count() as u64;
    let mut floor = Floor::build(&reports, admitted);
    floor.breakdown = breakdown;
    Ok(floor)
}

/// What both drives start from: the level and scope of the stop, and the callers with their
/// tokens (minted, and delegated through the gateway), every one of them covered by the scope.
struct Prepared {
    level: stopline_core::Level,
    scope: String,
    callers: Vec<Caller>,
}

async fn prepare(
    options: &DrillOptions,
    drill_id: &str,
    env: &Env,
    progress: &Progress,
) -> Result<Prepared, DrillError> {
    let level = options.validate()?;
    let run_id = format!("drill-{drill_id}");
    let scope = resolve_scope(options.scope.as_deref(), &run_id);
    if matches!(options.mode, Mode::Against(_)) && scope != format!("run:{run_id}") {
        return Err(Refusal::new(
            RefusalCode::ScopeInvalid,
            format!("--scope {scope}: against a live gateway a drill stops only its own run, run:{run_id}"),
        )
        .into());
    }
    let client = client(options)?;
    progress.message(format!(
        "{} callers: minting and delegating tokens",
        options.callers()
    ));
    let callers = callers(options, env, &client, drill_id).await?;
    check_covered(&env.ctx, &scope, &callers)?;
    Ok(Prepared {
        level,
        scope,
        callers,
    })
}

/// The callers running, and the long A2A task one of them keeps open.
struct Running {
    callers: Vec<tokio::task::JoinHandle<CallerReport>>,
    long_task: Option<tokio::task::JoinHandle<Option<LongTask>>>,
}

/// Start every caller on the current runtime, all through one pooled client; with
/// `long_task`, the first top-level agent also opens the long A2A task (`crate::long_task`).
fn start_callers(
    env: &Env,
    callers: Vec<Caller>,
    shared: &Arc<Shared>,
    long_task: bool,
) -> Running {
    let client = CallerClient::new(callers.len() + 8);
    let targets = Arc::new(Targets::new(&env.endpoints));
    let long_task = callers
        .iter()
        .find(|c| !c.delegated)
        .filter(|_| long_task)
        .cloned()
        .map(|caller| {
            tokio::spawn(run_long_task(
                client.clone(),
                targets.clone(),
                caller,
                shared.clone(),
            ))
        });
    let callers = callers
        .into_iter()
        .enumerate()
        .map(|(i, caller)| {
            let task = run_caller(client.clone(), targets.clone(), caller, i, shared.clone());
            tokio::spawn(task)
        })
        .collect();
    Running { callers, long_task }
}

/// When the stop is pulled, ms after the callers started: `pull_after_ms` and a random part of
/// half as much again (at least 50 ms), so no caller can time itself to it.
fn pull_at_ms(options: &DrillOptions) -> u64 {
    let jitter = (options.pull_after_ms / 2).max(50);
    options.pull_after_ms + rand::thread_rng().gen_range(0..=jitter)
}

/// Tell the callers to end after their current call, and gather what each saw (and the long
/// A2A task's agent, what it saw).
async fn stop_callers(shared: &Shared, running: Running) -> (Vec<CallerReport>, Option<LongTask>) {
    shared.stop.store(true, Ordering::SeqCst);
    let mut reports = Vec::with_capacity(running.callers.len());
    for task in running.callers {
        reports.push(task.await.unwrap_or_default());
    }
    let long_task = match running.long_task {
        Some(task) => task.await.ok().flatten(),
        None => None,
    };
    (reports, long_task)
}

async fn mint(ctx: &Context, agent: String, run: &str) -> Result<String, DrillError> {
    let (ctx, run) = (ctx.clone(), run.to_string());
    let minted = tokio::task::spawn_blocking(move || {
        tokens::issue(
            &ctx,
            &tokens::IssueArgs {
                run: Some(run),
                ..tokens::IssueArgs::new(agent, Role::Agent, 3600)
            },
        )
    })
    .await
    .map_err(|e| Refusal::new(RefusalCode::ControlIo, e.to_string()))??;
    Ok(minted.token)
}

/// A sub-agent's token, delegated through the gateway's `/v1/delegate`.
async fn delegate(
    client: &reqwest::Client,
    gateway: &str,
    parent: &str,
    child: &str,
) -> Result<String, DrillError> {
    let failed = |why: String| DrillError::Setup {
        what: "delegated tokens",
        why,
    };
    let reply: Value = client
        .post(format!("{gateway}/v1/delegate"))
        .bearer_auth(parent)
        .header("content-type", "application/json")
        .body(json!({"agent": child, "ttl": 3600}).to_string())
        .send()
        .await
        .map_err(|e| failed(e.to_string()))?
        .json()
        .await
        .map_err(|e| failed(e.to_string()))?;
    reply["token"]
        .as_str()
        .map(String::from)
        .ok_or_else(|| failed(format!("/v1/delegate answered {reply}")))
}

/// Every caller must be covered by the scope, or the drill would not stop them all.
fn check_covered(ctx: &Context, scope: &str, callers: &[Caller]) -> Result<(), Refusal> {
    let parsed = engage::parse_scope(scope)?;
    for caller in callers {
        let claims = engage::verify_token(ctx, &caller.token)?;
        if !claims.subject().is_covered_by(&parsed) {
            return Err(Refusal::new(
                RefusalCode::ScopeInvalid,
                format!("--scope {scope} does not cover the drill's caller {}: the drill would not stop it", caller.name),
            ));
        }
    }
    Ok(())
}

async fn callers(
    options: &DrillOptions,
    env: &Env,
    client: &reqwest::Client,
    drill_id: &str,
) -> Result<Vec<Caller>, DrillError> {
    let run = format!("drill-{drill_id}");
    let mut callers = Vec::with_capacity(options.callers());
    for a in 0..options.agents {
        let name = format!("drill-{drill_id}-a{a}");
        let token = mint(&env.ctx, name.clone(), &run).await?;
        for s in 0..options.subagents {
            let child = format!("{name}-s{s}");
            let token = delegate(client, &env.gateway_url, &token, &child).await?;
            callers.push(Caller {
                name: child,
                token,
                delegated: true,
            });
        }
        callers.push(Caller {
            name,
            token,
            delegated: false,
        });
    }
    Ok(callers)
}

async fn drive(
    options: &DrillOptions,
    drill_id: &str,
    env: &Env,
) -> Result<Observation, DrillError> {
    let progress = Progress::new(options.progress, options.pull_after_ms + 1000, "drill");
    let Prepared {
        level,
        scope,
        callers,
    } = prepare(options, drill_id, env, &progress).await?;
    let shared = Arc::new(Shared::default());
    env.start_timeline();
    let started = Instant::now();
    let running = start_callers(env, callers, &shared, true);
    let pull_at = pull_at_ms(options);
    let tick = |label: &str| {
        progress.set_position(started.elapsed().as_millis() as u64);
        progress.message(format!(
            "{label}: {} calls answered",
            shared.answered.load(Ordering::Relaxed)
        ));
    };
    while started.elapsed() < Duration::from_millis(pull_at) {
        tick("agents running");
        tokio::time::sleep(
            Duration::from_millis(20)
                .min(Duration::from_millis(pull_at).saturating_sub(started.elapsed())),
        )
        .await;
    }
    // The stop must find the long A2A task open (its agent has seen the task): on a loaded
    // machine its first event may come after `pull_at`. Waited for a bounded time only; a task
    // still not open then is reported as such (`open_before_pull: false`).
    let long_task_bound = Duration::from_millis(pull_at) + LONG_TASK_OPEN_WAIT;
    while running.long_task.is_some()
        && !shared.long_task_open.load(Ordering::SeqCst)
        && started.elapsed() < long_task_bound
    {
        tick("waiting for the long A2A task to open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pulled = pull(&env.puller, &shared, &scope, level.as_str()).await;
    let longest_ms = shared.longest_task_us.load(Ordering::Relaxed) as f64 / 1000.0;
    // At HALT_NONCRITICAL the first refusals come only after the gateway's hold.
    let floor = if level == stopline_core::Level::HaltNoncritical {
        env.queue_timeout_ms as f64 + 1000.0
    } else {
        1000.0
    };
    let window_ms = match options.window_ms {
        Some(given) => (given as f64).max(longest_ms.ceil() + 1.0) as u64,
        None => (2.0 * longest_ms + 100.0).max(floor).ceil() as u64,
    };
    // The window is watched after the trip (engage returned), so a slow engage never eats it.
    let tripped = Instant::now();
    progress.set_length(started.elapsed().as_millis() as u64 + window_ms);
    while pulled.is_ok() && tripped.elapsed() < Duration::from_millis(window_ms) {
        tick("stop pulled, watching the window");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    progress.message("stopping the callers and matching effects");
    let (reports, long_task) = stop_callers(&shared, running).await;
    let breakdown = env.breakdown(&shared, &reports, true);
    progress.finish();
    let pull = pulled?;
    let effects = env.destination.effects();
    let ops = env.registry_of(&effects).await?;
    let prefix = format!("drill-{drill_id}-");
    let matched = match_effects(&effects, &ops, &prefix, pull.returned_unix_us);
    let cancels = env.destination.a2a_cancels();
    let a2a_long_task = long_task.as_ref().map(|task| {
        crate::long_task::observe(task, shared.pulled.get().copied(), &cancels, &ops, &prefix)
    });
    let mut observation = Observation::build(Inputs {
        options,
        scope,
        drill_id: drill_id.to_string(),
        gateway: env.label.clone(),
        pull: &pull,
        reports: &reports,
        matched,
        window_ms,
        longest_task_ms: longest_ms,
        model_calls_exercised: env.endpoints.model.is_some(),
        a2a_exercised: env.endpoints.a2a.is_some(),
        a2a_cancels_received: cancels.len() as u64,
        a2a_long_task,
        queue_timeout_ms: env.queue_timeout_ms,
    });
    observation.breakdown = breakdown;
    Ok(observation)
}
