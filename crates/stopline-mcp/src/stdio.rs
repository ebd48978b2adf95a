//! `stopline mcp proxy --token T -- CMD [ARGS…]`: a governed wrapper around a stdio MCP server.
//!
//! The agent talks to us on stdin/stdout exactly as it would talk to the server. Each line is
//! parsed, checked against [`crate::frame`]'s rules (a refused frame is answered with an
//! "Invalid Request" error and nothing of it is forwarded) and governed ([`crate::govern`]);
//! admitted members are re-serialized and written to the child's stdin one line each (never as
//! a batch), refusals are answered here as JSON-RPC errors. The child's stdout passes back line
//! by line, watched for answers (outcomes, tool annotations). The child is started on the first
//! admitted message, in its own process group. When an emergency covers the token, open calls
//! are answered at once and every later call is refused here; the child gets up to
//! `cut_outcome_wait_s` to give the open calls' outcomes (recorded, not shown to the agent),
//! then its group is killed by pid and what is still open is left in doubt. When the agent
//! closes stdin, open calls are likewise given up to `cut_outcome_wait_s` to finish before the
//! child's stdin is closed. Nothing the agent sends reaches the child unparsed.

use crate::frame::check_frame;
use crate::govern::{govern_frame, refusal_response, ToolCatalog, Tracker};
use crate::governor::{Caller, Governor};
use crate::jsonrpc::{parse, Incoming, Message};
use crate::stdio_child::{spawn, start, termination, watch_for_cut, Proxy, Upstream};
use crate::stdio_session::kill_group;
use std::sync::{Arc, Mutex};
use stopline_core::{Refusal, RefusalCode};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// What `mcp proxy` was asked to run.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    /// The agent's token.
    pub token: String,
    /// The server's name in targets (`mcp:<name>:<tool>`) and in `[mcp.<name>]`.
    pub name: String,
    /// The server's program and arguments.
    pub command: Vec<String>,
}

/// Why the proxy could not run at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// No command was given.
    #[error("mcp proxy needs a server command after --")]
    NoCommand,
    /// The runtime or our own stdio failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// Run the proxy until the agent closes stdin; returns the exit code.
pub fn run(governor: Arc<dyn Governor>, options: ProxyOptions) -> Result<i32, ProxyError> {
    if options.command.is_empty() {
        return Err(ProxyError::NoCommand);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = runtime.block_on(proxy(governor, options));
    // Do not wait for the blocking stdin reader: it may sit in a read that never returns.
    runtime.shutdown_background();
    result
}

async fn proxy(governor: Arc<dyn Governor>, options: ProxyOptions) -> Result<i32, ProxyError> {
    let (out, mut lines_out) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(mut line) = lines_out.recv().await {
            line.push(b'\n');
            if stdout
                .write_all(&line)
                .await
                .and(stdout.flush().await)
                .is_err()
            {
                return;
            }
        }
    });
    let catalog = Arc::new(ToolCatalog::default());
    let tracker = Mutex::new(Tracker::new(catalog.clone(), &options.name));
    let proxy = Arc::new(Proxy {
        governor,
        catalog,
        options,
        tracker,
        out,
        stopping: Default::default(),
    });
    let caller = proxy.governor.authenticate(Some(&proxy.options.token));
    let upstream = Arc::new(tokio::sync::Mutex::new(Upstream::NotStarted));
    let watcher = caller.as_ref().ok().map(|caller| {
        tokio::spawn(watch_for_cut(
            proxy.clone(),
            caller.clone(),
            upstream.clone(),
        ))
    });
    // A signal ends the proxy too; the child lives in its own process group, so it must be
    // stopped here or it would outlive us.
    let signalled = tokio::select! {
        read = read_stdin(&proxy, &caller, &upstream) => { read?; false }
        _ = termination() => true,
    };
    if !signalled {
        // The agent went away: open calls still finish on their own (bounded), and their
        // outcomes are recorded, before the child's stdin is closed.
        let deadline = tokio::time::Instant::now() + proxy.governor.cut_outcome_wait();
        while !proxy.tracker().is_done() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    let mut upstream = upstream.lock().await;
    if let Upstream::Running { stdin, pgid } =
        std::mem::replace(&mut *upstream, Upstream::NotStarted)
    {
        // Close its stdin now (binding it with `..` would keep it open to the end of this
        // block), give it up to two seconds to exit on its own (its reader task reaps it) unless
        // we were told to stop, then stop what is left of its group.
        drop(stdin);
        for _ in 0..if signalled { 0 } else { 20 } {
            if !std::path::Path::new(&format!("/proc/{pgid}")).exists() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        kill_group(pgid);
    }
    drop(upstream);
    // The watcher holds the proxy (and so the output channel): end it, so the writer sees the
    // channel close as soon as what is queued is written, instead of waiting out its timeout.
    if let Some(watcher) = watcher {
        watcher.abort();
        let _ = watcher.await;
    }
    // A cut that was still waiting for the child's outcomes: stop the child now.
    let stopping = proxy.stopping.load(std::sync::atomic::Ordering::SeqCst);
    if stopping != 0 {
        kill_group(stopping);
    }
    drop(proxy);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), writer).await;
    Ok(if signalled { 143 } else { 0 })
}

/// Govern and forward every line the agent sends until it closes stdin.
async fn read_stdin(
    proxy: &Arc<Proxy>,
    caller: &Result<Caller, Refusal>,
    upstream: &Arc<tokio::sync::Mutex<Upstream>>,
) -> std::io::Result<()> {
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = stdin.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let frame = match parse(line.as_bytes()) {
            Ok(frame) => frame,
            Err(error) => {
                proxy.reply(error.to_response());
                continue;
            }
        };
        if let Err(error) = check_frame(&frame) {
            tracing::info!("mcp frame refused: {error}");
            proxy.reply(error.to_response());
            continue;
        }
        match caller {
            Ok(caller) => handle(proxy, caller, upstream, frame).await,
            Err(refusal) => refuse_all(proxy, frame, refusal),
        }
    }
    Ok(())
}

fn refuse_all(proxy: &Proxy, frame: Incoming, refusal: &Refusal) {
    for message in frame.messages() {
        if let Message::Request { id, .. } = message {
            proxy.reply(refusal_response(id.clone(), refusal));
        }
    }
}

async fn handle(
    proxy: &Arc<Proxy>,
    caller: &Caller,
    upstream: &Arc<tokio::sync::Mutex<Upstream>>,
    frame: Incoming,
) {
    let mut governed = govern_frame(
        proxy.governor.as_ref(),
        &proxy.catalog,
        &proxy.options.name,
        caller,
        frame,
    )
    .await;
    let mut upstream = upstream.lock().await;
    if let Upstream::NotStarted = &*upstream {
        if governed.has_admitted() {
            *upstream = match spawn(&proxy.options.command) {
                Ok(child) => start(proxy.clone(), child),
                Err(error) => Upstream::Gone(Refusal::new(
                    RefusalCode::GatewayUnreachable,
                    format!("the MCP server could not be started: {error}"),
                )),
            };
        }
    }
    if let Upstream::Gone(refusal) = &*upstream {
        governed.refuse_admitted(caller, refusal.clone());
    }
    let dispatch = governed.dispatch(caller);
    for message in governed.local.drain(..) {
        proxy.reply(message);
    }
    for mut member in dispatch.members {
        let Upstream::Running { stdin, .. } = &mut *upstream else {
            return;
        };
        let mut line = member.message.to_bytes();
        line.push(b'\n');
        proxy.tracker().track(member.take_pending());
        if let Err(error) = stdin.write_all(&line).await.and(stdin.flush().await) {
            let refusal = Refusal::new(
                RefusalCode::GatewayUnreachable,
                format!("the MCP server stopped reading: {error}"),
            );
            proxy.close_upstream(&refusal, false);
            *upstream = Upstream::Gone(refusal);
        }
    }
}
