//! The wrapped server's side of `stopline mcp proxy`: starting the child in its own process
//! group, passing its stdout back line by line (watched by the tracker), and stopping the whole
//! group by pid — when a stop cuts the agent, when the agent goes away, or when the proxy is
//! told to terminate. At a cut, open calls are answered at once and the child gets
//! `cut_outcome_wait_s` to give their outcomes (recorded, never shown to the agent); what is
//! still open then is left in doubt *before* the kill, so the child's end of stream finds
//! nothing left to report.

use crate::govern::{refusal_response, ToolCatalog, Tracker};
use crate::governor::{Caller, Governor};
use crate::jsonrpc::{parse, Incoming, Message};
use crate::stdio::ProxyOptions;
use crate::stdio_session::kill_group;
use std::sync::{Arc, Mutex};
use stopline_core::{Refusal, RefusalCode};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

/// The child's state, as the agent's requests see it.
pub(crate) enum Upstream {
    NotStarted,
    Running { stdin: ChildStdin, pgid: u32 },
    Gone(Refusal),
}

pub(crate) struct Proxy {
    pub(crate) governor: Arc<dyn Governor>,
    pub(crate) catalog: Arc<ToolCatalog>,
    pub(crate) options: ProxyOptions,
    pub(crate) tracker: Mutex<Tracker>,
    pub(crate) out: mpsc::UnboundedSender<Vec<u8>>,
    /// The child's process group while a cut waits for its outcomes (0: none), so a proxy that
    /// ends meanwhile still stops it.
    pub(crate) stopping: std::sync::atomic::AtomicU32,
}

impl Proxy {
    pub(crate) fn reply(&self, message: Message) {
        let _ = self.out.send(Incoming::Single(message).to_bytes());
    }

    pub(crate) fn tracker(&self) -> std::sync::MutexGuard<'_, Tracker> {
        self.tracker.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The child went away (killed by a stop, or exited): answer its open calls.
    pub(crate) fn close_upstream(&self, refusal: &Refusal, cut: bool) {
        let mut tracker = self.tracker();
        for id in tracker.open_ids() {
            self.reply(refusal_response(id, refusal));
        }
        if cut {
            tracker.cut(&refusal.message);
        } else {
            tracker.finish(&refusal.message);
        }
    }
}

// The gateway starts the tool servers its configuration names: it owns these processes.
#[allow(clippy::disallowed_methods)]
pub(crate) fn spawn(command: &[String]) -> std::io::Result<Child> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| std::io::Error::other("empty command"))?;
    Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
}

/// Take over a freshly spawned child: its stdout flows back to the agent.
pub(crate) fn start(proxy: Arc<Proxy>, mut child: Child) -> Upstream {
    let pgid = child.id().unwrap_or_default();
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Upstream::Gone(Refusal::new(
            RefusalCode::GatewayUnreachable,
            "the MCP server has no stdio",
        ));
    };
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let forward = match parse(line.as_bytes()) {
                Ok(frame) => {
                    let mut tracker = proxy.tracker();
                    let forward = frame.messages().iter().any(|m| tracker.forwardable(m));
                    tracker.observe_frame(&frame);
                    forward
                }
                Err(_) => true,
            };
            if forward {
                let _ = proxy.out.send(line.into_bytes());
            }
        }
        let status = child.wait().await;
        let refusal = Refusal::new(
            RefusalCode::GatewayUnreachable,
            format!("the MCP server exited ({status:?}); the call's outcome is unknown"),
        );
        proxy.close_upstream(&refusal, false);
    });
    Upstream::Running { stdin, pgid }
}

/// Resolves on SIGTERM, SIGINT or SIGHUP (never, if they cannot be watched).
pub(crate) async fn termination() {
    use tokio::signal::unix::{signal, SignalKind};
    let kinds = [
        SignalKind::terminate(),
        SignalKind::interrupt(),
        SignalKind::hangup(),
    ];
    let mut streams: Vec<_> = kinds.into_iter().filter_map(|k| signal(k).ok()).collect();
    if streams.is_empty() {
        return std::future::pending().await;
    }
    let waits = streams.iter_mut().map(|s| Box::pin(s.recv()));
    futures::future::select_all(waits).await;
}

/// Kill the child's group by pid when the governor says the caller must be cut.
pub(crate) async fn watch_for_cut(
    proxy: Arc<Proxy>,
    caller: Caller,
    upstream: Arc<tokio::sync::Mutex<Upstream>>,
) {
    let refusal = proxy.governor.cut(&caller).await;
    // Open calls are answered at once; every later call is refused here.
    let notice = crate::pump::cut_notice(&refusal);
    let ids = proxy.tracker().mute_open();
    for id in ids {
        proxy.reply(refusal_response(id, &notice));
    }
    let mut upstream = upstream.lock().await;
    let running = std::mem::replace(
        &mut *upstream,
        Upstream::Gone(Refusal::new(
            RefusalCode::BreakGlassContained,
            format!("the MCP server was stopped: {}", refusal.message),
        )),
    );
    drop(upstream);
    if let Upstream::Running { pgid, .. } = &running {
        proxy
            .stopping
            .store(*pgid, std::sync::atomic::Ordering::SeqCst);
    }
    // The child gets up to cut_outcome_wait_s to give the open calls' outcomes; what is still
    // open then is left in doubt before the kill, so its end of stream finds nothing to report.
    let wait = proxy.governor.cut_outcome_wait();
    let deadline = tokio::time::Instant::now() + wait;
    while !proxy.tracker().is_done() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    proxy.tracker().cut(&format!(
        "cut at a stop; the server gave no outcome within cut_outcome_wait_s ({} s)",
        wait.as_secs()
    ));
    if let Upstream::Running { pgid, .. } = &running {
        tracing::warn!(pgid, code = %refusal.code, "stopping the MCP server: {}", refusal.message);
        kill_group(*pgid);
        proxy.stopping.store(0, std::sync::atomic::Ordering::SeqCst);
    }
}
