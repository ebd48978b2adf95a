//! Starting and stopping the gateway: configuration, the first view, registration, the threads
//! (view watch, periodic reload, heartbeat, acknowledgements), the HTTP listener and the router.
//!
//! `/healthz` answers 200 only after the first view was loaded and the registration written, so
//! a supervisor that waits for health never hands an agent a gateway that cannot yet enforce. A
//! graceful stop removes the registration first (engage stops waiting for a gateway that is
//! going away) and gives in-flight calls a bounded time to finish.

use crate::acks::AckServer;
use crate::config::{GatewayConfig, GatewayConfigError};
use crate::governor::Governor;
use crate::inflight::DispatchTracker;
pub use crate::listener::{mcp_post_server, McpPost};
use crate::registry::Registry;
use crate::state::AppState;
use crate::view::ViewHolder;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use stopline_control::view_source::Distributed;
use stopline_control::Context;
use stopline_core::Refusal;
use stopline_store::Store;
use tokio::sync::oneshot;

/// Builds extra routes (the MCP proxy) from the governor; merged into the gateway's router.
pub type MountFn = Box<dyn FnOnce(Governor) -> Mount + Send>;

/// What a mount adds to the gateway: routes merged into its router, and the MCP proxy's
/// `POST /mcp/<server>` handler served before the router (`listener.rs`), which must be the
/// handler the mounted router has at that route.
pub struct Mount {
    /// Routes merged into the gateway's router.
    pub router: axum::Router,
    /// The `POST /mcp/<server>` handler served on hyper directly, when there is one.
    pub mcp_post: Option<Arc<dyn McpPost>>,
}

impl From<axum::Router> for Mount {
    fn from(router: axum::Router) -> Mount {
        Mount {
            router,
            mcp_post: None,
        }
    }
}

/// How to start a gateway.
pub struct ServeOptions {
    /// The control directory.
    pub home: PathBuf,
    /// The configuration file (default `<home>/config.toml`).
    pub config: Option<PathBuf>,
    /// The listen address (default: the config's `listen`).
    pub listen: Option<String>,
    /// Extra routes, e.g. the MCP proxy at `/mcp/{server}`.
    pub mount: Option<MountFn>,
    /// Log every admitted call at its end (`serve --access-log`, `crate::logs::admitted`).
    pub access_log: bool,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("home", &self.home)
            .field("config", &self.config)
            .field("listen", &self.listen)
            .field("mount", &self.mount.is_some())
            .field("access_log", &self.access_log)
            .finish()
    }
}

/// Why the gateway could not start or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The configuration file cannot be used.
    #[error(transparent)]
    Config(#[from] GatewayConfigError),
    /// The control directory refused (keys, journal, registration).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The listen address cannot be bound (taken by another process, not local, …).
    #[error("cannot listen on {addr}: {error} (another process holds it, or it is not an address of this machine; choose one with --listen or `listen` in config.toml)")]
    Listen {
        /// The address asked for.
        addr: String,
        /// Why.
        error: std::io::Error,
    },
    /// `[telemetry]` cannot be used.
    #[error("config_invalid: {0}")]
    Telemetry(#[from] crate::telemetry::TelemetryError),
    /// A socket or runtime could not be set up.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// A started gateway.
#[derive(Debug)]
pub struct RunningGateway {
    /// The bound HTTP address.
    pub addr: SocketAddr,
    /// The admission handle.
    pub governor: Governor,
    registry: Arc<Registry>,
    stop: Arc<AtomicBool>,
    shutdown: Option<oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    telemetry: Option<crate::telemetry::Telemetry>,
}

static INSTANCES: AtomicU32 = AtomicU32::new(0);

/// Start a gateway on the current tokio runtime.
pub async fn start(options: ServeOptions) -> Result<RunningGateway, ServeError> {
    start_with(options, None).await
}

/// Start a gateway on the current tokio runtime, on `distributed` when given.
pub async fn start_with(
    options: ServeOptions,
    distributed: Option<Distributed>,
) -> Result<RunningGateway, ServeError> {
    let config_path = options
        .config
        .clone()
        .unwrap_or_else(|| options.home.join("config.toml"));
    let config = GatewayConfig::load(&config_path)?;
    for warning in config.startup_warnings() {
        tracing::warn!(config = %config_path.display(), "{warning}");
    }
    let telemetry = crate::telemetry::start(&config.base.telemetry)?;
    let store = Store::open(&options.home)
        .with_read_timeout(Duration::from_millis(config.base.read_timeout_ms.max(1)))
        .with_gone_journals(config.base.retention.gone_journals);
    let layout = store.layout().clone();
    store.ensure_home().map_err(|e| e.to_refusal())?;
    store
        .ensure_dirs(&[&layout.servers(), &layout.ops()])
        .map_err(|e| e.to_refusal())?;
    let mut ctx = Context::new(store.clone(), config.base.clone());
    let mut view = ViewHolder::new(store.clone(), config.reload_interval());
    let mut fleet = crate::fleet::Fleet::default();
    if let Some(distributed) = distributed {
        ctx = ctx.with_plane(distributed.plane);
        view = view.with_source(distributed.source);
        fleet = distributed.fleet;
    }
    let view = Arc::new(view);
    view.refresh_full();
    let instance = INSTANCES.fetch_add(1, Ordering::SeqCst);
    let mut id = Registry::id_for_this_process();
    if instance > 0 {
        id = format!("{id}-{instance}");
    }
    let listen = options
        .listen
        .clone()
        .unwrap_or_else(|| config.base.listen.clone());
    let http = tokio::net::TcpListener::bind(&listen)
        .await
        .map_err(|error| ServeError::Listen {
            addr: listen.clone(),
            error,
        })?;
    let addr = http.local_addr()?;
    let ack_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let ack_addr = ack_listener.local_addr()?;
    let config_hash = config.config_hash.clone();
    let reload = config.reload_interval();
    let tracker = Arc::new(DispatchTracker::default());
    let gov = Governor::new(
        ctx,
        config,
        view.clone(),
        tracker.clone(),
        id.clone(),
        fleet,
    )?;
    gov.set_access_log(options.access_log);
    // The A2A task book is durable (docs/reference.md §8 "A2A"): the tasks earlier gateways
    // recorded are owned again, and those still open are cancelled at a stop covering their
    // chain. A journal that cannot be read is reported by the census, as everywhere.
    if !gov.config().a2a.is_empty() {
        let (ops, _) = store.ops().open();
        let open = crate::a2a_task::rebuild(&gov, &ops);
        if open > 0 {
            tracing::info!(
                open,
                "open remote A2A tasks rebuilt from the operation journals"
            );
        }
    }
    if let Some(alerts) = gov.alerts() {
        crate::alerts::watch_latches(view.clone(), alerts, id.clone());
    }
    let registry = Arc::new(
        Registry::new(
            store,
            view.clone(),
            tracker.clone(),
            id,
            addr.to_string(),
            ack_addr.to_string(),
            config_hash,
        )
        .with_ledger(gov.shared_ledger()),
    );
    let stop = Arc::new(AtomicBool::new(false));
    view.source()
        .clone()
        .spawn_watchers(view.clone(), reload, stop.clone());
    if view.source().pushes_acks() {
        crate::acks::spawn_push(
            view.clone(),
            tracker.clone(),
            registry.clone(),
            stop.clone(),
        );
    }
    AckServer {
        view: view.clone(),
        tracker,
        registry: registry.clone(),
    }
    .spawn(ack_listener, stop.clone())?;
    registry.heartbeat().map_err(|e| e.to_refusal())?;
    crate::registry::spawn_heartbeat(registry.clone(), stop.clone());
    let state = AppState {
        gov: gov.clone(),
        registry: registry.clone(),
    };
    let mut router = crate::routes::router(state);
    let mut mcp_post = None;
    if let Some(mount) = options.mount {
        let mount = mount(gov.clone());
        router = router.merge(mount.router);
        mcp_post = mount.mcp_post;
    }
    // Every request's path is the `route` of what it logs (`crate::logs`); the MCP handler
    // served before the router sets it itself.
    let router = router.layer(axum::middleware::from_fn(crate::logs::with_route));
    let (tx, rx) = oneshot::channel::<()>();
    let timeline = view.timeline().clone();
    let server = tokio::spawn(async move {
        crate::listener::serve(http, router, mcp_post, timeline, async move {
            let _ = rx.await;
        })
        .await
    });
    tracing::info!(%addr, %ack_addr, "stopline gateway listening");
    Ok(RunningGateway {
        addr,
        governor: gov,
        registry,
        stop,
        shutdown: Some(tx),
        server,
        telemetry,
    })
}

impl RunningGateway {
    /// Make this in-process gateway swap in every changed view `delay` late (the drill's
    /// deliberately slow gateway, which must fail the drill). `stopline serve` never calls it.
    pub fn delay_view_swaps_for_drill(&self, delay: Duration) {
        self.governor.delay_view_swaps_for_drill(delay);
    }

    /// This gateway's timeline (`crate::timeline`), off until a drill starts it. `stopline
    /// serve` never does.
    pub fn timeline(&self) -> Arc<crate::timeline::Timeline> {
        self.governor.view_timeline()
    }

    /// Resolves once every operation record this gateway has queued so far is written (a
    /// `dispatched` record is queued, not written, when its call is handed upstream): what a
    /// reader of the registry in this process waits for before it judges what was dispatched.
    pub async fn settle_journal(&self) -> Result<(), stopline_store::StoreError> {
        self.governor.journal().flush().await
    }

    /// Stop: deregister, stop accepting, give in-flight calls up to 5 s, then write what the
    /// operation journal still has queued (up to 5 s more).
    pub async fn shutdown(mut self) {
        self.registry.remove();
        self.stop.store(true, Ordering::SeqCst);
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.server).await;
        self.server.abort();
        match tokio::time::timeout(Duration::from_secs(5), self.settle_journal()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::error!(%error, "operation records queued at shutdown were not written")
            }
            Err(_) => {
                tracing::error!("operation records queued at shutdown were not written within 5 s")
            }
        }
        if let Some(telemetry) = self.telemetry.take() {
            // The SDK's last export blocks (bounded by its timeout): off the runtime's workers.
            let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
        }
    }
}

/// How often a worker of the gateway's runtime takes a task woken from outside the runtime
/// before the next one of its own queue: every other poll.
///
/// The stop reaches calls in flight from outside the runtime: the view watcher (an OS thread)
/// wakes every call waiting on a view change — the cut of an exchange in flight, a call waiting
/// for its `prepared` fsync —, and the journal's group-commit thread wakes the callers of each
/// batch. Such wakeups go to the runtime's shared queue, which tokio's self-tuning reads about
/// once per 200 µs per worker while the workers' own queues hold work, one task at a time: under
/// load the cuts a stop of 300 callers wakes waited there for tens of milliseconds (the
/// time to first rejection; BENCHMARKS.md). At 2 they are served within a few polls.
pub const GLOBAL_QUEUE_INTERVAL: u32 = 2;

/// The runtime a gateway runs on: `stopline serve`, and the in-process gateways of
/// `stopline drill` and `stopline bench gateway`, so that they measure the scheduler `serve`
/// runs.
pub fn runtime(name: &str) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name(name)
        .global_queue_interval(GLOBAL_QUEUE_INTERVAL)
        .build()
}

/// Run a gateway until SIGINT or SIGTERM (what `stopline serve` calls).
pub fn serve(options: ServeOptions) -> Result<(), ServeError> {
    serve_with(options, None)
}

/// [`serve`], on `distributed` when given (`stopline --control etcd://… serve`).
pub fn serve_with(
    options: ServeOptions,
    distributed: Option<Distributed>,
) -> Result<(), ServeError> {
    if let Some(distributed) = &distributed {
        distributed.source.prime();
    }
    let runtime = runtime("stopline-gw")?;
    let config_path = options
        .config
        .clone()
        .unwrap_or_else(|| options.home.join("config.toml"));
    runtime.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        // Before the gateway starts, so a SIGHUP sent once it is healthy is never the default
        // action (which would end the process).
        let mut hangup = signal(SignalKind::hangup())?;
        let gateway = start_with(options, distributed).await?;
        // Through the log, so `--log-format json` keeps stderr one JSON object a line.
        tracing::info!(url = %format!("http://{}", gateway.addr), "stopline gateway serving");
        let mut term = signal(SignalKind::terminate())?;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                _ = term.recv() => break,
                _ = hangup.recv() => {
                    tracing::info!(config = %config_path.display(), "SIGHUP: reloading the configuration");
                    let config = gateway.governor.shared_config().clone();
                    let path = config_path.clone();
                    // The file is read off the runtime's workers.
                    let reloaded = tokio::task::spawn_blocking(move || crate::reload::reload(&config, &path)).await;
                    if let Ok(Ok(_)) = reloaded {
                        let hash = gateway.governor.config().config_hash.clone();
                        gateway.registry.set_config_hash(hash);
                    }
                }
            }
        }
        gateway.shutdown().await;
        Ok(())
    })
}
