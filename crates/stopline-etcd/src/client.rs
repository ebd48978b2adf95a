//! A synchronous face on the async etcd client, with its own small runtime.
//!
//! The [`ControlPlane`](stopline_store::ControlPlane) trait is synchronous and is called from
//! plain threads (the CLI, `spawn_blocking` in the gateway). Every call here is spawned on this
//! client's dedicated tokio runtime and waited for on a std channel with a deadline, so it never
//! needs (or disturbs) a caller's runtime and never hangs: an etcd that does not answer within
//! the deadline is *unreachable*, which the callers turn into a fault or a fallback.
//!
//! One connection is kept to one member at a time. Any error drops it and the next call (or the
//! retry within the same deadline) connects to the next member, so losing a member costs one
//! failed attempt, not an outage, and a restarted member is reconnected on first use.

use crate::access::Access;
use crate::url::EtcdTarget;
use etcd_client::{Client, ConnectOptions};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};
use stopline_core::{Refusal, RefusalCode};
use stopline_store::StoreError;
use tokio::runtime::{Handle, Runtime};

/// How long one synchronous call may take, retries across members included.
pub const CALL_DEADLINE: Duration = Duration::from_millis(1500);
/// How long a connection attempt to one member may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(400);
/// The same, when connecting includes authenticating as an etcd user: etcd checks the password
/// against its bcrypt hash, tens of milliseconds of its CPU (more on a loaded host), after the
/// TLS handshake. Still well inside [`CALL_DEADLINE`].
const AUTH_CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);

/// Why etcd could not be used.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdError {
    /// No member answered within the deadline.
    #[error("distributed_unavailable: etcd did not answer ({0})")]
    Unreachable(String),
    /// Concurrent writers kept winning the compare-and-swap.
    #[error("distributed_unavailable: etcd transaction kept conflicting ({0})")]
    Contention(String),
}

impl From<EtcdError> for StoreError {
    fn from(error: EtcdError) -> StoreError {
        StoreError::Refused(Refusal::new(
            RefusalCode::DistributedUnavailable,
            error.to_string(),
        ))
    }
}

/// The client: a runtime, the members, the current connection.
pub struct EtcdClient {
    target: EtcdTarget,
    access: Access,
    runtime: Option<Runtime>,
    current: Mutex<Option<Client>>,
    next_member: AtomicUsize,
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient")
            .field("target", &self.target.display())
            .finish()
    }
}

impl Drop for EtcdClient {
    fn drop(&mut self) {
        // Never block (we may be dropped inside someone else's runtime).
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn connect_timeout(access: &Access) -> Duration {
    if access.user.is_some() {
        AUTH_CONNECT_TIMEOUT
    } else {
        CONNECT_TIMEOUT
    }
}

fn options(access: &Access) -> ConnectOptions {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(connect_timeout(access))
        .with_timeout(CALL_DEADLINE)
        .with_keep_alive(Duration::from_millis(500), Duration::from_millis(1000))
        .with_require_leader(true);
    if let Some(tls) = &access.tls {
        options = options.with_tls(tls.clone());
    }
    if let Some((user, password)) = &access.user {
        // A gateway runs for days: etcd's auth token expires, and is fetched again.
        options = options
            .with_user(user.clone(), password.expose())
            .with_auto_token_refresh(true);
    }
    options
}

impl EtcdClient {
    /// A client for `target` on an open etcd (no TLS, no user); connects lazily.
    pub fn new(target: EtcdTarget) -> std::io::Result<EtcdClient> {
        EtcdClient::with_access(target, Access::default())
    }

    /// A client for `target` that speaks TLS and authenticates as `access` says.
    pub fn with_access(target: EtcdTarget, access: Access) -> std::io::Result<EtcdClient> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("stopline-etcd")
            .enable_all()
            .build()?;
        Ok(EtcdClient {
            target,
            access,
            runtime: Some(runtime),
            current: Mutex::new(None),
            next_member: AtomicUsize::new(0),
        })
    }

    /// Where this client connects.
    pub fn target(&self) -> &EtcdTarget {
        &self.target
    }

    /// The dedicated runtime, for long-running tasks (watches, leases).
    pub fn handle(&self) -> Handle {
        self.runtime
            .as_ref()
            .expect("the runtime lives as long as the client")
            .handle()
            .clone()
    }

    /// A connection to the next member in turn (for long-running tasks, which keep their own).
    pub async fn connect_next(&self) -> Result<Client, EtcdError> {
        let members = &self.target.endpoints;
        let index = self.next_member.fetch_add(1, Ordering::SeqCst) % members.len();
        let endpoint = members[index].clone();
        tokio::time::timeout(
            connect_timeout(&self.access),
            Client::connect([endpoint.as_str()], Some(options(&self.access))),
        )
        .await
        .map_err(|_| EtcdError::Unreachable(format!("{endpoint}: connect timed out")))?
        .map_err(|e| EtcdError::Unreachable(format!("{endpoint}: {e}")))
    }

    fn connection(&self) -> Result<Client, EtcdError> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = current.as_ref() {
            return Ok(client.clone());
        }
        let (tx, rx) = mpsc::channel();
        let members = self.target.endpoints.clone();
        let index = self.next_member.fetch_add(1, Ordering::SeqCst) % members.len();
        let options = options(&self.access);
        let limit = connect_timeout(&self.access);
        self.handle().spawn(async move {
            let endpoint = members[index].clone();
            let result =
                tokio::time::timeout(limit, Client::connect([endpoint.as_str()], Some(options)))
                    .await
                    .map_err(|_| EtcdError::Unreachable(format!("{endpoint}: connect timed out")))
                    .and_then(|r| {
                        r.map_err(|e| EtcdError::Unreachable(format!("{endpoint}: {e}")))
                    });
            let _ = tx.send(result);
        });
        let client = rx
            .recv_timeout(limit + Duration::from_millis(100))
            .map_err(|_| EtcdError::Unreachable("connect timed out".into()))??;
        *current = Some(client.clone());
        Ok(client)
    }

    fn wait<T, Fut>(&self, limit: Duration, future: Fut) -> Result<T, EtcdError>
    where
        T: Send + 'static,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel();
        self.handle().spawn(async move {
            let result = tokio::time::timeout(limit, future).await;
            let _ = tx.send(result);
        });
        match rx.recv_timeout(limit + Duration::from_millis(100)) {
            Ok(Ok(Ok(value))) => Ok(value),
            Ok(Ok(Err(error))) => Err(EtcdError::Unreachable(error.to_string())),
            Ok(Err(_)) | Err(_) => Err(EtcdError::Unreachable("timed out".into())),
        }
    }

    /// Run `op` against the cluster, retrying on the next member after an error, within
    /// [`CALL_DEADLINE`]. Every error drops the connection, so the next call reconnects.
    pub fn call<T, F, Fut>(&self, what: &str, op: F) -> Result<T, EtcdError>
    where
        T: Send + 'static,
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
    {
        self.call_within(what, CALL_DEADLINE, op)
    }

    /// [`EtcdClient::call`] with a deadline of `limit` instead of [`CALL_DEADLINE`].
    pub fn call_within<T, F, Fut>(&self, what: &str, limit: Duration, op: F) -> Result<T, EtcdError>
    where
        T: Send + 'static,
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
    {
        let deadline = Instant::now() + limit;
        let mut last = String::from("no member tried");
        for _ in 0..self.target.endpoints.len().max(1) + 1 {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            let client = match self.connection() {
                Ok(client) => client,
                Err(error) => {
                    last = error.to_string();
                    continue;
                }
            };
            let future = op(client);
            match self.wait(left, future) {
                Ok(value) => return Ok(value),
                Err(error) => {
                    last = error.to_string();
                    *self.current.lock().unwrap_or_else(|p| p.into_inner()) = None;
                }
            }
        }
        Err(EtcdError::Unreachable(format!(
            "{what} at {}: {last}",
            self.target.display()
        )))
    }
}
