//! The byte forwarder behind `--net gateway-only`: accept on the listener inside the agent's
//! namespace, connect to the gateway from the host namespace, copy bytes both ways.
//!
//! Plain threads: one accept loop, two copy threads per connection, a cap on concurrent
//! connections so an agent cannot exhaust the supervisor's threads. The forwarder must never
//! connect anywhere but the one gateway address it was given, and never interpret the bytes.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// At most this many forwarded connections at once; more are closed on accept.
const MAX_CONNECTIONS: usize = 256;

/// How long connecting to the gateway may take before the agent's connection is closed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A running forwarder. Dropping it does not stop it; call [`Forwarder::shutdown`].
pub(crate) struct Forwarder {
    listener: TcpListener,
    stopping: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
}

impl Forwarder {
    /// Start forwarding every connection accepted on `listener` to `gateway`.
    pub(crate) fn start(listener: TcpListener, gateway: SocketAddr) -> io::Result<Forwarder> {
        let stopping = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicU64::new(0));
        let accept_listener = listener.try_clone()?;
        let (stop, count) = (Arc::clone(&stopping), Arc::clone(&accepted));
        std::thread::Builder::new()
            .name("stopline-netns-forward".into())
            .spawn(move || accept_loop(accept_listener, gateway, stop, count))?;
        Ok(Forwarder {
            listener,
            stopping,
            accepted,
        })
    }

    /// Connections accepted so far.
    pub(crate) fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Stop accepting: shutting a listening socket down wakes a blocked `accept` with an error.
    pub(crate) fn shutdown(&self) {
        if !self.stopping.swap(true, Ordering::SeqCst) {
            let _ = rustix::net::shutdown(&self.listener, rustix::net::Shutdown::Read);
        }
    }
}

fn accept_loop(
    listener: TcpListener,
    gateway: SocketAddr,
    stopping: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
) {
    let live = Arc::new(AtomicUsize::new(0));
    loop {
        let result = listener.accept();
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let (inside, _) = match result {
            Ok(pair) => pair,
            Err(error) => {
                tracing::warn!(%error, "gateway forwarder: accept failed");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        accepted.fetch_add(1, Ordering::Relaxed);
        if live.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            live.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!("gateway forwarder: too many connections; closing one");
            continue;
        }
        let live_for_connection = Arc::clone(&live);
        let spawned = std::thread::Builder::new()
            .name("stopline-netns-conn".into())
            .spawn(move || {
                if let Err(error) = forward_one(inside, gateway) {
                    tracing::debug!(%error, "gateway forwarder: connection ended with an error");
                }
                live_for_connection.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            live.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Connect to the gateway and copy both ways until both directions have ended.
fn forward_one(inside: TcpStream, gateway: SocketAddr) -> io::Result<()> {
    let outside = TcpStream::connect_timeout(&gateway, CONNECT_TIMEOUT)?;
    let _ = inside.set_nodelay(true);
    let _ = outside.set_nodelay(true);
    let (inside_read, outside_write) = (inside.try_clone()?, outside.try_clone()?);
    let upstream = std::thread::Builder::new()
        .name("stopline-netns-up".into())
        .spawn(move || copy_then_close(inside_read, outside_write))?;
    copy_then_close(outside, inside);
    let _ = upstream.join();
    Ok(())
}

/// Copy `from` to `to`; at the end of `from`, end `to`'s write side so the peer sees EOF.
fn copy_then_close(mut from: TcpStream, mut to: TcpStream) {
    let _ = io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
