//! Delivering alerts: the `evidence-record.v1` of a breaker trip and the `latch-alert.v1` of
//! every latch change (`stopline_core::alert`) go to `[breakers] alert_webhook` (a JSON POST,
//! `webhook.rs`) and `alert_command` (the record as JSON on its stdin; exit 0 is delivered).
//!
//! An alert follows the stop and never stands in its way: `Alerts::send` only queues (a
//! bounded queue; a full one drops the alert, counts it and logs it), and delivery runs on its
//! own tasks, at most [`MAX_DELIVERING`] at once. Each destination is tried up to
//! [`ATTEMPTS`] times, waiting [`FIRST_BACKOFF`] and then twice as long after each failure (a
//! command that fails, a webhook that does not answer or answers `429` or `5xx`); a webhook URL
//! that is not usable, redirects or answers another `4xx` is not tried again. The hooks are read from the configuration in force when the alert
//! is delivered, so a reload that changes them applies to the next alert.

use crate::client::UpstreamClient;
use crate::config::SharedConfig;
use crate::webhook::{Sent, WEBHOOK_TIMEOUT};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};

/// Alerts waiting to be delivered before the next one is dropped.
pub const QUEUE: usize = 1024;
/// Deliveries under way at once.
pub const MAX_DELIVERING: usize = 32;
/// Tries per destination.
pub const ATTEMPTS: u32 = 5;
/// The wait after the first failed try; it doubles after each.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The bound on one run of `alert_command`; past it the command is killed and the try failed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// The gateway's alert queue.
#[derive(Debug, Clone)]
pub(crate) struct Alerts {
    queue: mpsc::Sender<String>,
    dropped: Arc<AtomicU64>,
}

impl Alerts {
    /// Start delivering on `runtime`, reading the hooks from `config` at each delivery.
    pub(crate) fn start(
        runtime: &tokio::runtime::Handle,
        config: SharedConfig,
        client: UpstreamClient,
    ) -> Alerts {
        let (queue, mut received) = mpsc::channel::<String>(QUEUE);
        let delivering = Arc::new(Semaphore::new(MAX_DELIVERING));
        runtime.spawn(async move {
            while let Some(body) = received.recv().await {
                let Ok(permit) = delivering.clone().acquire_owned().await else {
                    return;
                };
                let (config, client) = (config.clone(), client.clone());
                tokio::spawn(async move {
                    let current = config.load_full();
                    let hooks = Hooks {
                        webhook: current.breakers.alert_webhook.clone(),
                        command: current.breakers.alert_command.clone(),
                    };
                    deliver(&client, &hooks, &body).await;
                    drop(permit);
                });
            }
        });
        Alerts {
            queue,
            dropped: Arc::default(),
        }
    }

    /// Queue `body` (a JSON record) for delivery; never waits.
    pub(crate) fn send(&self, body: String) {
        if self.queue.try_send(body).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::error!(dropped, "alert dropped: the alert queue is full");
        }
    }
}

/// Where an alert goes.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hooks {
    /// `alert_webhook`.
    pub webhook: Option<String>,
    /// `alert_command`.
    pub command: Option<Vec<String>>,
}

impl Hooks {
    /// The hooks `[breakers]` names; `None` when it names none.
    pub fn of(breakers: &crate::config::BreakerConfig) -> Option<Hooks> {
        let hooks = Hooks {
            webhook: breakers.alert_webhook.clone(),
            command: breakers.alert_command.clone().filter(|c| !c.is_empty()),
        };
        (hooks.webhook.is_some() || hooks.command.is_some()).then_some(hooks)
    }
}

/// What a CLI process hands the detached `stopline alert-deliver` on its stdin: the hooks of
/// its configuration and the records to send. One type for the writer and the reader.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Handoff {
    /// Where to send them.
    pub hooks: Hooks,
    /// The records, in order.
    pub records: Vec<stopline_core::alert::LatchAlert>,
}

/// Deliver `body` to every hook, each with its own retries.
pub async fn deliver(client: &UpstreamClient, hooks: &Hooks, body: &str) {
    let webhook = async {
        if let Some(url) = &hooks.webhook {
            retried("alert webhook", || async {
                match crate::webhook::post(client, url, body.to_string(), WEBHOOK_TIMEOUT).await {
                    Sent::Delivered => Try::Done,
                    // The receiver may come back: no answer, an overload, its own fault.
                    Sent::Failed(_) | Sent::TimedOut => Try::Again,
                    Sent::Refused(status) if status == 429 || status >= 500 => Try::Again,
                    // A redirect or a refusal says the URL or its credentials are wrong: trying
                    // the same again changes nothing.
                    Sent::Refused(_) | Sent::BadUrl => Try::GiveUp,
                }
            })
            .await;
        }
    };
    let command = async {
        if let Some(command) = hooks.command.as_ref().filter(|c| !c.is_empty()) {
            retried("alert command", || run_command(command, body)).await;
        }
    };
    tokio::join!(webhook, command);
}

/// Deliver `body` to `hooks` on a runtime of its own, blocking until every try is over: what a
/// CLI process that found no gateway to tell runs, detached from the command that changed the
/// latch.
pub fn deliver_blocking(hooks: &Hooks, body: &str) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = UpstreamClient::new();
        deliver(&client, hooks, body).await
    });
    Ok(())
}

enum Try {
    Done,
    Again,
    GiveUp,
}

async fn retried<F, Fut>(what: &str, mut attempt: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Try>,
{
    let mut wait = FIRST_BACKOFF;
    for tried in 1..=ATTEMPTS {
        match attempt().await {
            Try::Done => return,
            Try::GiveUp => {
                tracing::error!("{what} not delivered: not tried again");
                return;
            }
            Try::Again if tried < ATTEMPTS => {
                tracing::warn!(
                    tried,
                    retry_in_ms = wait.as_millis() as u64,
                    "{what} failed; trying again"
                );
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            Try::Again => {}
        }
    }
    tracing::error!("{what} not delivered: every try failed");
}

/// One run of `command` with `body` on its stdin: delivered when it exits 0 within the bound.
async fn run_command(command: &[String], body: &str) -> Try {
    use tokio::io::AsyncWriteExt as _;
    // The operator's `alert_command`: the gateway owns the process it starts for an alert.
    #[allow(clippy::disallowed_methods)]
    let spawned = tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            tracing::error!(%error, program = %command[0], "alert command cannot start");
            return Try::Again;
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(body.as_bytes()).await;
    }
    match tokio::time::timeout(COMMAND_TIMEOUT, child.wait()).await {
        Ok(Ok(status)) if status.success() => Try::Done,
        Ok(Ok(status)) => {
            tracing::error!(%status, program = %command[0], "alert command failed");
            Try::Again
        }
        Ok(Err(error)) => {
            tracing::error!(%error, program = %command[0], "alert command failed");
            Try::Again
        }
        Err(_) => {
            tracing::error!(program = %command[0], "alert command timed out; killed");
            Try::Again
        }
    }
}

/// Watch `view` for latch changes and alert each one (`latch-alert.v1`, sent as
/// `gateway:<server_id>`), until the gateway stops. The view as the gateway started is the
/// baseline: a latch already there is not news. A view that closes every gate for a fault is
/// skipped (its latch list is not the truth; the fault is logged apart), and the next good view
/// is compared with the last good one.
pub(crate) fn watch_latches(view: Arc<crate::view::ViewHolder>, alerts: Alerts, server_id: String) {
    use stopline_core::alert::{changes, LatchAlert};
    let well_formed = |snapshot: &crate::view::Snapshot| -> Vec<stopline_core::LatchRecord> {
        let mut latches: Vec<_> = snapshot
            .view
            .latches
            .iter()
            .filter_map(|l| l.record.clone())
            .collect();
        latches.sort_by(|a, b| a.id.cmp(&b.id));
        latches
    };
    let mut changed = view.subscribe();
    let first = view.load();
    let mut latches = well_formed(&first);
    let mut epoch = first.view.epoch.seq;
    let sender = format!("gateway:{server_id}");
    tokio::spawn(async move {
        while changed.changed().await.is_ok() {
            let snapshot = view.load();
            if snapshot.is_faulted() {
                continue;
            }
            let now = well_formed(&snapshot);
            let advanced = snapshot.view.epoch.seq > epoch;
            let ts = stopline_core::time::rfc3339_seconds(view.store().now_ms() / 1000);
            for (change, latch) in changes(&latches, &now, advanced) {
                let alert = LatchAlert::new(change, latch, &sender, &ts);
                tracing::warn!(
                    change = change.as_str(),
                    latch = %latch.id,
                    scope = %latch.scope,
                    level = %latch.level,
                    by = %latch.by,
                    "ALERT: latch {}",
                    change.as_str()
                );
                match serde_json::to_string(&alert) {
                    Ok(body) => alerts.send(body),
                    Err(error) => tracing::error!(%error, "latch alert not serialized"),
                }
            }
            latches = now;
            epoch = epoch.max(snapshot.view.epoch.seq);
        }
    });
}
