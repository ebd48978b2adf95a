//! Harness for the etcd tests: hosts (a throwaway home each) that run the real binary with
//! `--control etcd://…`, and `stopline --control … serve` gateways on free loopback ports.
//! The etcd members come from `stopline-etcd`'s test cluster (`tests/cluster/mod.rs`).
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes
#![allow(dead_code)]

pub mod secure;

use crate::gw::{free_port, http, Proc, Reply};
use crate::util::{Home, Run};
use serde_json::{json, Value};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// One host: its own control directory, every command pointed at the same etcd.
pub struct Host {
    pub home: Home,
    pub url: String,
}

impl Host {
    /// A host with `config` as its `config.toml`.
    pub fn new(url: &str, config: &str) -> Host {
        let home = Home::new();
        std::fs::create_dir_all(home.path()).unwrap();
        std::fs::write(home.file("config.toml"), config).unwrap();
        Host {
            home,
            url: url.to_string(),
        }
    }

    /// Run the binary with `--json --control URL` and `args`.
    pub fn run(&self, args: &[&str]) -> Run {
        let mut full = vec!["--control", self.url.as_str()];
        full.extend_from_slice(args);
        self.home.run(&full)
    }

    /// A token for `agent` (with `extra` flags), minted on this host.
    pub fn token(&self, agent: &str, extra: &[&str]) -> String {
        let mut args = vec!["token", "issue", "--agent", agent];
        args.extend_from_slice(extra);
        let run = self.run(&args);
        run.assert_ok();
        run.json()["token"].as_str().unwrap().to_string()
    }

    /// Engage from the CLI; the receipt.
    pub fn engage(&self, scope: &str, level: &str) -> Value {
        let run = self.run(&[
            "engage",
            "--scope",
            scope,
            "--level",
            level,
            "--reason",
            "etcd test",
            "--by",
            "tester",
        ]);
        run.assert_ok();
        run.json()
    }

    /// Start `stopline --control URL serve` on a free port and wait until healthy.
    pub fn serve(&self) -> EtcdGateway {
        let addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(self.home.dir.path().join("gateway.log")).unwrap();
        let child = self
            .home
            .command(&["--control", &self.url, "serve", "--listen", &addr])
            .env("STOPLINE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start stopline serve");
        let gateway = EtcdGateway {
            proc: Proc(child),
            addr,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(TcpStream::connect(&gateway.addr).is_ok()
            && http(&gateway.addr, "GET", "/healthz", None, None).status == 200)
        {
            assert!(
                Instant::now() < deadline,
                "the gateway did not become healthy"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        gateway
    }
}

/// A running gateway in etcd mode.
pub struct EtcdGateway {
    pub proc: Proc,
    pub addr: String,
}

impl EtcdGateway {
    /// `POST /v1/check` for a noncritical tool call with `token`: (decision, code).
    pub fn check(&self, token: &str) -> (String, String) {
        self.check_class(token, "noncritical")
    }

    /// `POST /v1/check` with `class`.
    pub fn check_class(&self, token: &str, class: &str) -> (String, String) {
        let body = json!({"class": class, "action": "tool_call"});
        let r = http(&self.addr, "POST", "/v1/check", Some(token), Some(&body)).json();
        (
            r["decision"].as_str().unwrap_or_default().to_string(),
            r["code"].as_str().unwrap_or_default().to_string(),
        )
    }

    /// `POST /v1/engage` with `token`.
    pub fn engage(&self, token: &str, scope: &str, level: &str) -> Reply {
        let body = json!({"scope": scope, "level": level, "reason": "engaged through a gateway"});
        http(&self.addr, "POST", "/v1/engage", Some(token), Some(&body))
    }

    /// `GET /v1/status` with `token`.
    pub fn status(&self, token: &str) -> Value {
        http(&self.addr, "GET", "/v1/status", Some(token), None).json()
    }

    /// This gateway's registration id (from its health answer).
    pub fn id(&self) -> String {
        http(&self.addr, "GET", "/healthz", None, None).json()["server"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

/// Poll `probe` every 25 ms until it is true or `limit` passes; the time it took.
pub fn wait_until(limit: Duration, mut probe: impl FnMut() -> bool) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if probe() {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    None
}

/// The `p`th percentile (0..=100) of `samples`, nearest rank.
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// Sorted ids from a JSON array of strings.
pub fn ids(value: &Value) -> Vec<String> {
    let mut out: Vec<String> = value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(String::from))
        .collect();
    out.sort();
    out
}
