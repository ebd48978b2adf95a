//! `--net gateway-only`: a network namespace whose only way out is the gateway.
//!
//! A short-lived thread unshares a fresh network namespace (it has nothing but `lo`), brings
//! `lo` up, keeps a descriptor of the namespace, and opens a TCP listener on
//! `127.0.0.1:<port>` inside it (a socket stays in the namespace it was created in). The agent's
//! pre-exec hook enters the namespace through the descriptor. A forwarder in the host namespace
//! accepts on that listener and connects each connection to the real gateway. No other
//! interface, route or address exists inside, so egress that bypasses the gateway has nowhere
//! to go.
//!
//! This module must never move the calling thread (or any thread but its own short-lived one)
//! into the new namespace, and never forward to any address but the gateway's.
//!
//! Limitation: the boundary holds against an agent without `CAP_SYS_ADMIN`. An agent that runs
//! as root (`--unconfined` as root) could `setns` back into the host namespace.

use crate::forward::Forwarder;
use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// Why the namespace could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetnsError {
    /// A step of the setup failed.
    #[error("{step}: {source}")]
    Setup {
        /// The step.
        step: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The setup thread panicked.
    #[error("the namespace setup thread panicked")]
    SetupPanicked,
}

/// A gateway-only network namespace and the forwarder that is its only exit.
pub struct GatewayNamespace {
    namespace: OwnedFd,
    inside: SocketAddr,
    gateway: SocketAddr,
    forwarder: Forwarder,
}

impl GatewayNamespace {
    /// Create the namespace with a listener on `127.0.0.1:<inside_port>` inside it, forwarded to
    /// `gateway` (an address reachable from the calling thread's namespace). Pass the gateway's
    /// own port as `inside_port` so the agent uses the same URL port it would outside.
    pub fn create(gateway: SocketAddr, inside_port: u16) -> Result<GatewayNamespace, NetnsError> {
        let setup = std::thread::Builder::new()
            .name("stopline-netns-setup".into())
            .spawn(move || setup_inside(inside_port))
            .map_err(|source| NetnsError::Setup {
                step: "spawning the setup thread",
                source,
            })?;
        let (namespace, listener) = setup.join().map_err(|_| NetnsError::SetupPanicked)??;
        let inside = listener.local_addr().map_err(|source| NetnsError::Setup {
            step: "reading the inside listener's address",
            source,
        })?;
        // The forwarder's threads are spawned from this thread, so they live in the caller's
        // (host) namespace: their outgoing connections leave through the host's network.
        let forwarder =
            Forwarder::start(listener, gateway).map_err(|source| NetnsError::Setup {
                step: "starting the forwarder",
                source,
            })?;
        tracing::info!(%inside, %gateway, "gateway-only network namespace ready");
        Ok(GatewayNamespace {
            namespace,
            inside,
            gateway,
            forwarder,
        })
    }

    /// A descriptor of the namespace, for [`crate::SpawnOptions::netns`].
    pub fn namespace_fd(&self) -> BorrowedFd<'_> {
        self.namespace.as_fd()
    }

    /// The gateway's address as seen from inside: what the agent's `STOPLINE_URL` names.
    pub fn inside_addr(&self) -> SocketAddr {
        self.inside
    }

    /// The real gateway the forwarder connects to.
    pub fn gateway_addr(&self) -> SocketAddr {
        self.gateway
    }

    /// How many connections have been forwarded so far.
    pub fn forwarded_connections(&self) -> u64 {
        self.forwarder.accepted()
    }

    /// Stop accepting. Connections already forwarded end when either side closes.
    pub fn shutdown(&self) {
        self.forwarder.shutdown();
    }
}

impl Drop for GatewayNamespace {
    fn drop(&mut self) {
        self.forwarder.shutdown();
    }
}

/// Runs on a dedicated thread that ends right after: only it ever enters the new namespace.
fn setup_inside(port: u16) -> Result<(OwnedFd, TcpListener), NetnsError> {
    // SAFETY: `unshare_unsafe` is unsafe only for `CLONE_FILES`, which would split the
    // descriptor table between threads; `CLONE_NEWNET` changes only this thread's network
    // namespace, and this thread exits when the function returns.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }.map_err(
        |errno| NetnsError::Setup {
            step: "unshare(CLONE_NEWNET)",
            source: io::Error::from_raw_os_error(errno.raw_os_error()),
        },
    )?;
    bring_loopback_up().map_err(|source| NetnsError::Setup {
        step: "bringing lo up",
        source,
    })?;
    let namespace = File::open("/proc/thread-self/ns/net").map_err(|source| NetnsError::Setup {
        step: "opening /proc/thread-self/ns/net",
        source,
    })?;
    let listener =
        TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)).map_err(|source| {
            NetnsError::Setup {
                step: "binding the inside listener",
                source,
            }
        })?;
    Ok((OwnedFd::from(namespace), listener))
}

/// `ip link set lo up`, with the `SIOCGIFFLAGS` / `SIOCSIFFLAGS` ioctls.
fn bring_loopback_up() -> io::Result<()> {
    let socket = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        None,
    )
    .map_err(|errno| io::Error::from_raw_os_error(errno.raw_os_error()))?;
    // SAFETY: `ifreq` is plain old data and valid when zeroed.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: `socket` is an open socket and `request` a live, NUL-terminated `ifreq`;
    // SIOCGIFFLAGS writes only the flags member of it.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut request) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union, so reading it is defined.
    let flags = unsafe { request.ifr_ifru.ifru_flags };
    request.ifr_ifru.ifru_flags = flags | (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: as above; SIOCSIFFLAGS reads the name and flags.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &request) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
