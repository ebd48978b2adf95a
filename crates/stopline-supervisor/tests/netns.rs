//! `--net gateway-only`: from inside the agent's namespace the gateway answers through the
//! forwarder, and a server on the host's loopback on another port is unreachable.

mod common;

use common::GroupGuard;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;
use stopline_supervisor::{
    spawn, CommandSpec, GatewayNamespace, SpawnOptions, StdioMode, UserIdentity,
};

/// A TCP server on the host's loopback that answers each connection's first line with
/// `<greeting> <line>`. It runs until the test process ends.
fn greeter(greeting: &'static str) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        while let Ok((mut stream, _)) = listener.accept() {
            let mut request = [0u8; 64];
            let read = stream.read(&mut request).unwrap_or(0);
            let line = String::from_utf8_lossy(&request[..read]).trim().to_owned();
            let _ = stream.write_all(format!("{greeting} {line}\n").as_bytes());
        }
    });
    addr
}

fn bash_probe(gateway_port: u16, other_port: u16) -> String {
    format!(
        r#"if exec 3<>/dev/tcp/127.0.0.1/{gateway_port}; then echo ping >&3; read -r line <&3; echo "gateway:$line"; else echo gateway:unreachable; fi
if exec 4<>/dev/tcp/127.0.0.1/{other_port}; then echo other:reachable; else echo other:unreachable; fi
cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | sed 's/^/iface:/'
"#
    )
}

fn run_probe(
    namespace: &GatewayNamespace,
    gateway_port: u16,
    other_port: u16,
    as_nobody: bool,
) -> String {
    let guard = GroupGuard::create(if as_nobody { "netnsnobody" } else { "netns" });
    let mut spec = CommandSpec::new(
        "/bin/bash",
        ["-c".to_string(), bash_probe(gateway_port, other_port)],
    )
    .env("PATH", "/usr/bin:/bin");
    spec.stdin = StdioMode::Null;
    spec.stdout = StdioMode::Piped;
    if as_nobody {
        spec.user = Some(UserIdentity::resolve("nobody").unwrap());
    }
    let options = SpawnOptions {
        group: Some(&guard.0),
        netns: Some(namespace.namespace_fd()),
        ..SpawnOptions::default()
    };
    let mut spawned = spawn(&spec, &options).unwrap();
    let mut out = String::new();
    spawned
        .child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    spawned.child.wait().unwrap();
    out
}

#[test]
fn only_the_gateway_is_reachable_from_inside() {
    let gateway = greeter("gateway-says");
    // Another server on the host's loopback, which nothing inside may reach. Nobody accepts on
    // it: a connection that reached it would wait in its backlog, where the test looks.
    let other_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let other = other_listener.local_addr().unwrap();
    other_listener.set_nonblocking(true).unwrap();

    let namespace = GatewayNamespace::create(gateway, gateway.port()).unwrap();
    assert_eq!(namespace.inside_addr().port(), gateway.port());

    for as_nobody in [false, true] {
        let out = run_probe(&namespace, gateway.port(), other.port(), as_nobody);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "gateway:gateway-says ping", "{out}");
        assert_eq!(lines[1], "other:unreachable", "{out}");
        // The namespace has one interface: lo.
        assert_eq!(&lines[2..], ["iface:lo"], "{out}");
    }
    assert_eq!(namespace.forwarded_connections(), 2);
    // Nothing ever reached the other server from inside.
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        other_listener.accept().is_err(),
        "the other server was reached"
    );

    // The host itself still reaches the other server: the namespace changed nothing outside.
    let _direct = std::net::TcpStream::connect(other).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(other_listener.accept().is_ok());
    namespace.shutdown();
}

#[test]
fn the_calling_thread_stays_in_the_host_namespace() {
    let before = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
    let namespace = GatewayNamespace::create("127.0.0.1:9".parse().unwrap(), 9).unwrap();
    let after = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
    assert_eq!(before, after);
    let inside = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&namespace.namespace_fd())
    ))
    .unwrap();
    assert_ne!(
        inside, before,
        "the namespace descriptor names the host namespace"
    );
}
