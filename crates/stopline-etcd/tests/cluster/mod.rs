//! Real etcd members on loopback, for tests: one member, or a three-member cluster.
//!
//! Each member gets ephemeral client and peer ports and a throwaway data directory; members
//! are stopped by their pid (never by name) and every one still running is killed when the
//! cluster is dropped. A member can be killed and restarted on the same ports and data, so a
//! test can take etcd away and bring it back. `/usr/bin/etcd` (Debian's `etcd-server`) must
//! exist: without it these tests fail, they never skip.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes
#![allow(dead_code)]

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the tests look for etcd.
pub const ETCD: &str = "/usr/bin/etcd";

/// One member.
pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    pub data: PathBuf,
    child: Option<Child>,
}

/// A cluster of members sharing a throwaway directory.
pub struct Cluster {
    _dir: tempfile::TempDir,
    pub members: Vec<Member>,
    initial: String,
}

/// A port for a member, free now and below the kernel's ephemeral range, so that no other
/// test's `bind(…:0)` or outgoing connection takes it before etcd binds it (which made etcd exit
/// at start, `bind: address already in use`, and read as "did not start" 20 s later).
fn free_port() -> u16 {
    stopline_testkit::http::free_port().expect("a free loopback port")
}

/// How a member's start ended, when it ended before the cluster was ready.
enum Exited {
    /// Its port was taken between the choice and its bind (by another test picking the same).
    PortTaken,
}

impl Cluster {
    /// Start `n` members and wait until the cluster answers.
    pub fn start(n: usize) -> Cluster {
        assert!(
            std::path::Path::new(ETCD).exists(),
            "{ETCD} is missing: install Debian's etcd-server (scripts/setup-test-deps.sh)"
        );
        // A port taken between its choice and etcd's bind ends that start at once; the next
        // start has new ports. Any other exit fails the test with the member's log.
        for _ in 0..3 {
            let mut cluster = Cluster::spawn_all(n);
            match cluster.try_wait_ready(Duration::from_secs(20)) {
                Ok(()) => return cluster,
                Err(Exited::PortTaken) => continue,
            }
        }
        panic!("three starts of etcd each found a port of theirs taken");
    }

    fn spawn_all(n: usize) -> Cluster {
        let dir = tempfile::tempdir().expect("a temp dir");
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: free_port(),
                peer_port: free_port(),
                data: dir.path().join(format!("m{i}")),
                child: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            _dir: dir,
            members,
            initial,
        };
        for i in 0..n {
            cluster.spawn(i);
        }
        cluster
    }

    fn spawn(&mut self, i: usize) {
        let initial = self.initial.clone();
        let m = &mut self.members[i];
        let log = std::fs::File::create(format!("{}.log", m.data.display())).expect("a log file");
        let child = Command::new(ETCD)
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&m.data)
            .args([
                "--listen-client-urls",
                &format!("http://127.0.0.1:{}", m.client_port),
            ])
            .args([
                "--advertise-client-urls",
                &format!("http://127.0.0.1:{}", m.client_port),
            ])
            .args([
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{}", m.peer_port),
            ])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{}", m.peer_port),
            ])
            .args(["--initial-cluster", &initial])
            .args([
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                "stopline-test",
            ])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .env("ETCD_UNSUPPORTED_ARCH", std::env::consts::ARCH)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        m.child = Some(child);
    }

    /// `etcd://127.0.0.1:P1,…?prefix=…` for every member.
    pub fn url(&self, prefix: &str) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect();
        format!("etcd://{}?prefix={prefix}", hosts.join(","))
    }

    /// `http://127.0.0.1:P` of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client_port)
    }

    /// Wait until every running member accepts connections and the cluster has a leader.
    pub fn wait_ready(&mut self, limit: Duration) {
        if let Err(Exited::PortTaken) = self.try_wait_ready(limit) {
            panic!("a port of a restarted etcd member was taken while it was down");
        }
    }

    /// [`Cluster::wait_ready`], returning early when a member exited because a port of its was
    /// taken; a member that exited for any other reason fails the test with its log.
    fn try_wait_ready(&mut self, limit: Duration) -> Result<(), Exited> {
        let deadline = Instant::now() + limit;
        for m in self.members.iter_mut().filter(|m| m.child.is_some()) {
            while TcpStream::connect(("127.0.0.1", m.client_port)).is_err() {
                if let Some(status) = m.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                    m.child = None;
                    let log = std::fs::read_to_string(format!("{}.log", m.data.display()))
                        .unwrap_or_default();
                    if log.contains("bind: address already in use") {
                        return Err(Exited::PortTaken);
                    }
                    let tail: Vec<&str> = log.lines().rev().take(20).collect();
                    panic!(
                        "etcd member {} exited at start ({status}); the end of its log:\n{}",
                        m.name,
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    );
                }
                assert!(
                    Instant::now() < deadline,
                    "etcd member {} did not start",
                    m.name
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let health = self.endpoint(
            self.members
                .iter()
                .position(|m| m.child.is_some())
                .unwrap_or(0),
        );
        while !healthy(&health) {
            assert!(Instant::now() < deadline, "the etcd cluster has no leader");
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Kill member `i` (SIGKILL, by pid) and reap it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Restart member `i` on its ports and data, and wait until the cluster answers.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        self.wait_ready(Duration::from_secs(20));
    }
}

/// True when `GET /health` on `endpoint` says the member is healthy (it has a leader).
fn healthy(endpoint: &str) -> bool {
    use std::io::{Read, Write};
    let addr = endpoint.trim_start_matches("http://");
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let request = format!("GET /health HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.contains("\"health\":\"true\"")
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// Raw key access, for tests that corrupt or inspect what stopline wrote.
pub struct Raw {
    client: stopline_etcd::EtcdClient,
}

impl Raw {
    /// A raw client for `url` (an `etcd://…` URL).
    pub fn new(url: &str) -> Raw {
        let target = stopline_etcd::EtcdTarget::parse(url).expect("a valid url");
        Raw {
            client: stopline_etcd::EtcdClient::new(target).expect("an etcd client"),
        }
    }

    /// Put `value` at `key`.
    pub fn put(&self, key: &str, value: &[u8]) {
        let (key, value) = (key.to_string(), value.to_vec());
        self.client
            .call("test put", move |mut c| {
                let (key, value) = (key.clone(), value.clone());
                async move { c.put(key, value, None).await.map(|_| ()) }
            })
            .expect("put");
    }

    /// Delete `key`.
    pub fn delete(&self, key: &str) {
        let key = key.to_string();
        self.client
            .call("test delete", move |mut c| {
                let key = key.clone();
                async move { c.delete(key, None).await.map(|_| ()) }
            })
            .expect("delete");
    }

    /// Every key under `prefix` with its value, in key order.
    pub fn list(&self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        let prefix = prefix.to_string();
        self.client
            .call("test list", move |mut c| {
                let prefix = prefix.clone();
                async move {
                    let options = stopline_etcd::etcd_client::GetOptions::new().with_prefix();
                    let response = c.get(prefix, Some(options)).await?;
                    Ok(response
                        .kvs()
                        .iter()
                        .map(|kv| {
                            (
                                String::from_utf8_lossy(kv.key()).into_owned(),
                                kv.value().to_vec(),
                            )
                        })
                        .collect())
                }
            })
            .expect("list")
    }
}
