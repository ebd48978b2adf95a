//! The child processes behind a stdio upstream: one per MCP session, each in its own process
//! group, stopped by pid (the whole group) when its session ends or the proxy goes away. A
//! reader task routes what the child prints: a response to the stream that carries its
//! request, anything the server initiates to the session's `GET` stream (else to an open
//! `POST` stream). When the child dies every stream of its session ends.
//!
//! A tool server can take seconds to start (a Node server loads its modules before it reads
//! `initialize`), so each server keeps one *warm spare* ([`StdioSessions::claim`]): a child
//! started ahead, with its own session id, uid and cgroup, that has read nothing yet. A new
//! session takes it and a fresh spare is started for the next one; a spare serves exactly one
//! session, so nothing an agent left in a server ever reaches another agent.

use crate::govern::id_key;
use crate::jsonrpc::{parse, Message};
use futures::channel::mpsc;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

pub(crate) type Route = mpsc::Sender<Message>;

/// One child serving one MCP session.
pub(crate) struct Session {
    pub(crate) stdin: tokio::sync::Mutex<ChildStdin>,
    pub(crate) routes: Mutex<HashMap<String, Route>>,
    pub(crate) server_stream: Mutex<Option<Route>>,
    pub(crate) pgid: u32,
    /// Its cgroup and uid (docs/reference.md §6); ending it kills the whole group.
    held: Mutex<crate::stdio_spawn::Held>,
    /// The last time the session carried traffic.
    last_used: Mutex<std::time::Instant>,
}

impl Session {
    /// Note traffic (the idle bound counts from the last).
    pub(crate) fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = std::time::Instant::now();
    }

    /// End the server: its process group, then its whole cgroup.
    pub(crate) fn end(&self) {
        kill_group(self.pgid);
        self.held.lock().unwrap_or_else(|e| e.into_inner()).end();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.end();
    }
}

/// Stop a child's whole process group by its pid (it leads the group).
pub(crate) fn kill_group(pgid: u32) {
    if let Some(pid) = i32::try_from(pgid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// The live stdio sessions, by `<server>\0<session id>`, and each server's warm spare.
#[derive(Default)]
pub struct StdioSessions {
    pub(crate) sessions: Mutex<HashMap<String, Arc<Session>>>,
    spares: Mutex<HashMap<String, Spawned>>,
}

/// A started tool server that serves no session yet: the child, its pipes and its hold, and
/// the session id it will serve under. Dropped unused, it is killed (the child on drop, its
/// group by [`crate::stdio_spawn::Held`]).
pub(crate) struct Spawned {
    pub(crate) id: String,
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    pgid: u32,
    held: crate::stdio_spawn::Held,
}

/// Start `command` for a session of `server` that has no id yet.
fn spawn(
    server: &str,
    command: &[String],
    config: &stopline_gateway::config::McpServerConfig,
) -> std::io::Result<Spawned> {
    let id = new_session_id();
    let (mut command, held) = crate::stdio_spawn::prepare(server, &id, command, config)?;
    let mut child = command.spawn()?;
    let pgid = child.id().unwrap_or_default();
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no stdin"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("no stdout"))?;
    if let Some(stderr) = child.stderr.take() {
        relay_stderr(server.to_string(), stderr);
    }
    Ok(Spawned {
        id,
        child,
        stdin,
        stdout,
        pgid,
        held,
    })
}

fn warm(config: &stopline_gateway::config::McpServerConfig) -> bool {
    config.warm_spare != Some(false)
}

/// A fresh session id: 128 bits from `rand`'s thread-local CSPRNG (seeded by the OS), so an
/// agent cannot guess another's session. It cannot fail quietly into a predictable id: `rand`
/// panics if the OS has no randomness to give, where reading `/dev/urandom` by hand used to
/// leave all zeros.
pub(crate) fn new_session_id() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn deliver(route: &Route, message: Message) {
    let _ = route.clone().try_send(message);
}

/// Whom a session's server serves, under which configuration.
pub(crate) struct Start<'a> {
    pub(crate) config: &'a stopline_gateway::config::McpServerConfig,
    pub(crate) governor: Arc<dyn crate::governor::Governor>,
    pub(crate) caller: crate::governor::Caller,
}

/// Relay a tool server's stderr into the gateway's log, one event a line, each prefixed with
/// the server's name (and carrying it as `server`), until the server closes it.
fn relay_stderr(server: String, stderr: tokio::process::ChildStderr) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::info!(target: "tool_server", server = %server, "[{server}] {line}");
        }
    });
}

/// Make `spawned` the server of the session `key` (`<server>\0<spawned.id>`).
pub(crate) fn start(
    what: Start<'_>,
    sessions: &Arc<StdioSessions>,
    spawned: Spawned,
    key: String,
) -> Arc<Session> {
    let Spawned {
        child,
        stdin,
        stdout,
        pgid,
        held,
        ..
    } = spawned;
    let mut child = child;
    let session = Arc::new(Session {
        stdin: tokio::sync::Mutex::new(stdin),
        routes: Mutex::default(),
        server_stream: Mutex::default(),
        pgid,
        held: Mutex::new(held),
        last_used: Mutex::new(std::time::Instant::now()),
    });
    watch_session(
        &session,
        sessions,
        key.clone(),
        crate::stdio_spawn::idle_bound(what.config),
        what.governor.cut(&what.caller),
    );
    let weak = Arc::downgrade(&session);
    let registry = Arc::downgrade(sessions);
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let Some(session) = weak.upgrade() else { break };
            let Ok(frame) = parse(line.as_bytes()) else {
                continue;
            };
            for message in frame.messages().iter().cloned() {
                let route = match &message {
                    Message::Response { id, .. } => session
                        .routes
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&id_key(id)),
                    _ => {
                        let stream = session
                            .server_stream
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .clone();
                        stream.or_else(|| {
                            session
                                .routes
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .values()
                                .next()
                                .cloned()
                        })
                    }
                };
                if let Some(route) = route {
                    deliver(&route, message);
                }
            }
        }
        // The child is gone: end every stream of the session and forget it.
        if let Some(session) = weak.upgrade() {
            session
                .routes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
            session
                .server_stream
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
        }
        if let Some(registry) = registry.upgrade() {
            registry
                .sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
        }
        let _ = child.wait().await;
    });
    session
}

/// End the session's server when its agent is cut (an EMERGENCY covering it, a contained
/// machine, an untrusted control state) or when it has carried no traffic for `idle`; either
/// way the session is forgotten, so its next request is `unknown session`. At a cut the server
/// is ended at once, open calls or not (docs/reference.md §6 "An emergency ends the tool server at
/// once"): the gateway owns it, so nothing is gained by letting a stopped agent's work run on
/// for `cut_outcome_wait_s` (that wait is for upstreams the gateway does not own). Killing it
/// is a write to its `cgroup.kill` and a signal to its process group, bounded and off the
/// admission path (this task is woken by the same view change that cuts the agent's streams).
/// Each open call's stream then ends: an answer the server had already written is read and
/// recorded, every other open call's operation is left unresolved.
fn watch_session(
    session: &Arc<Session>,
    sessions: &Arc<StdioSessions>,
    key: String,
    idle: std::time::Duration,
    cut: futures::future::BoxFuture<'static, stopline_core::Refusal>,
) {
    let weak = Arc::downgrade(session);
    let registry = Arc::downgrade(sessions);
    tokio::spawn(async move {
        let mut cut = cut;
        let (why, cut_landed) = loop {
            let Some(session) = weak.upgrade() else {
                return;
            };
            let since = session
                .last_used
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .elapsed();
            drop(session);
            if since >= idle {
                // A test seam (`hold_if:` keeps an idle session's server running until the test
                // has looked at it); no action of it ends or spares a session. On a blocking
                // thread, so a hold parks no runtime worker.
                let _ = tokio::task::spawn_blocking(|| {
                    stopline_store::failpoint::hit("mcp.stdio.idle_end").ok();
                })
                .await;
                break (format!("no traffic for {} s", idle.as_secs()), false);
            }
            let wait = (idle - since).min(std::time::Duration::from_secs(1));
            tokio::select! {
                refusal = &mut cut => break (format!("its agent was stopped: {}", refusal.message), true),
                () = tokio::time::sleep(wait) => {}
            }
        };
        if let Some(session) = weak.upgrade() {
            if cut_landed {
                tracing::warn!(
                    pgid = session.pgid,
                    "killing a stdio tool server at once: {why}"
                );
            } else {
                tracing::info!(pgid = session.pgid, "ending a stdio tool server: {why}");
            }
            session.end();
        }
        if let Some(registry) = registry.upgrade() {
            registry
                .sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
        }
    });
}

impl StdioSessions {
    /// A server for a new session of `server`: its warm spare when one is alive, else one
    /// started now; then (unless `warm_spare = false`) a fresh spare is started in the
    /// background for the next session.
    pub(crate) fn claim(
        self: &Arc<Self>,
        server: &str,
        command: &[String],
        config: &stopline_gateway::config::McpServerConfig,
    ) -> std::io::Result<Spawned> {
        let spare = self
            .spares
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(server);
        // A spare that died (it failed to start, or was killed) is dropped.
        let alive =
            spare.and_then(|mut spare| matches!(spare.child.try_wait(), Ok(None)).then_some(spare));
        let spawned = match alive {
            Some(spare) => Ok(spare),
            None => spawn(server, command, config),
        };
        if warm(config) {
            self.refill(server, command, config);
        }
        spawned
    }

    /// Start `server`'s spare in the background when it has none (each configured stdio
    /// server at the gateway's start, and after every claim). A spare that cannot start is
    /// logged; the next session then starts its own server and reports the failure.
    pub(crate) fn refill(
        self: &Arc<Self>,
        server: &str,
        command: &[String],
        config: &stopline_gateway::config::McpServerConfig,
    ) {
        if !warm(config) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (sessions, server, command, config) = (
            Arc::downgrade(self),
            server.to_string(),
            command.to_vec(),
            config.clone(),
        );
        // Off the async workers: preparing a server leases a uid and makes a cgroup.
        runtime.spawn_blocking(move || {
            let Some(sessions) = sessions.upgrade() else {
                return;
            };
            if sessions
                .spares
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains_key(&server)
            {
                return;
            }
            match spawn(&server, &command, &config) {
                Ok(spare) => {
                    let mut spares = sessions.spares.lock().unwrap_or_else(|e| e.into_inner());
                    // Another refill may have won the race: keep one spare, end this one.
                    spares.entry(server).or_insert(spare);
                }
                Err(error) => {
                    tracing::warn!(server, %error, "cannot start a warm spare tool server")
                }
            }
        });
    }

    pub(crate) fn get(&self, key: &str) -> Option<Arc<Session>> {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn session_ids_are_128_random_bits() {
        let ids: std::collections::HashSet<String> =
            (0..64).map(|_| super::new_session_id()).collect();
        assert_eq!(ids.len(), 64, "session ids repeat: {ids:?}");
        for id in &ids {
            assert_eq!(id.len(), 32, "{id}");
            assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
            assert_ne!(id, &"0".repeat(32));
        }
    }
}
