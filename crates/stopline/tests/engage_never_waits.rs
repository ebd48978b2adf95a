//! Engage never waits on anyone (docs/reference.md §5): a real `stopline serve` is parked by SIGSTOP
//! while it holds the WAL's shared lock (a failpoint stops it exactly there, so the test is
//! deterministic), and `engage` still answers — its latch in force, `wal_deferred` in its
//! receipt — again and again; once the gateway is resumed, the next process that takes the lock
//! writes every deferred record and epoch advance.
//!
//! Reproduces a reported defect: engage sat in `locks_lock_inode_wait` on `breakglass.wal.jsonl` for
//! over 150 s, 3 times out of 3, while one gateway was frozen with `kill -STOP`. The only time
//! bound here is a hang detector (60 s, far beyond the 2 s contract): the assertions are on what
//! the receipt says, never on how fast it came.
//!
//! Needs the binary built with `--features stopline/failpoints` (it fails, never skips, without).
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use serde_json::Value;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use util::{run_or_hang, Home, HANG};

/// The process state letter of `pid` (`T` when stopped).
fn state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
        .unwrap_or('?')
}

/// True when `pid` holds a shared flock on the file with inode `ino` (`/proc/locks`).
fn holds_read_lock(pid: u32, ino: u64) -> bool {
    std::fs::read_to_string("/proc/locks")
        .unwrap_or_default()
        .lines()
        .any(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            f.len() > 5
                && f[1] == "FLOCK"
                && f[3] == "READ"
                && f[4] == pid.to_string()
                && f[5].rsplit(':').next() == Some(&ino.to_string())
        })
}

struct Parked {
    child: Child,
    park: std::path::PathBuf,
}

impl Parked {
    /// Start `stopline serve` with the `view.locked` failpoint armed on `park`.
    fn start(home: &Home) -> Parked {
        let addr = format!("127.0.0.1:{}", gw::free_port());
        std::fs::write(home.file("config.toml"), format!("listen = \"{addr}\"\n")).unwrap();
        let park = home.dir.path().join("park");
        let child = home
            .command(&["serve"])
            .env(
                "STOPLINE_FAILPOINTS",
                format!("view.locked=stop_if:{}", park.display()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(home.dir.path().join("gateway.log")).unwrap(),
            ))
            .spawn()
            .expect("start stopline serve");
        let deadline = Instant::now() + HANG;
        while !(std::net::TcpStream::connect(&addr).is_ok()
            && gw::http(&addr, "GET", "/healthz", None, None).status == 200)
        {
            assert!(
                Instant::now() < deadline,
                "the gateway did not become healthy"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Parked { child, park }
    }

    /// Park the gateway at its next read: it stops itself holding the WAL's shared lock.
    fn park(&self, home: &Home) {
        std::fs::write(&self.park, b"").unwrap();
        let ino = std::os::unix::fs::MetadataExt::ino(
            &std::fs::metadata(home.file("breakglass.wal.jsonl")).expect("the WAL exists"),
        );
        let pid = self.child.id();
        let deadline = Instant::now() + HANG;
        while !(state(pid) == 'T' && holds_read_lock(pid, ino)) {
            assert!(
                Instant::now() < deadline,
                "the gateway never parked holding the WAL lock: state {}, /proc/locks:\n{}\nWAL inode {ino}",
                state(pid),
                std::fs::read_to_string("/proc/locks").unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn resume(&self) {
        std::fs::remove_file(&self.park).unwrap();
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.child.id() as i32).unwrap(),
            rustix::process::Signal::CONT,
        )
        .unwrap();
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.park);
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.child.id() as i32).unwrap(),
            rustix::process::Signal::CONT,
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wal_kinds(home: &Home) -> Vec<Value> {
    std::fs::read_to_string(home.file("breakglass.wal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn engage_answers_while_a_stopped_gateway_holds_the_wal_lock_and_the_record_is_finished_later() {
    let home = Home::new();
    // A WAL to hold a lock on.
    home.engage("agent:before", "halt-all");
    let gateway = Parked::start(&home);
    gateway.park(&home);

    let mut deferred = Vec::new();
    for (i, level) in ["emergency", "halt-all", "emergency"].iter().enumerate() {
        let scope = format!("agent:frozen-{i}");
        let out = run_or_hang(
            home.command(&[
                "--json", "engage", "--scope", &scope, "--level", level, "--reason", "frozen",
            ]),
            "engage with a stopped gateway holding the WAL lock",
        );
        out.assert_ok();
        let receipt = out.json();
        assert_eq!(receipt["engaged"], true, "{receipt}");
        assert_eq!(receipt["wal_deferred"], true, "{receipt}");
        assert!(
            receipt["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w.as_str().unwrap().starts_with("wal_deferred")),
            "{receipt}"
        );
        let file = receipt["latch"]["file"].as_str().unwrap().to_string();
        assert!(home.file("latches").join(&file).exists());
        // The stop is in force at once, whatever the WAL says.
        let check = run_or_hang(
            home.command(&[
                "--json",
                "check",
                "--class",
                "noncritical",
                "--agent",
                &format!("frozen-{i}"),
            ]),
            "check",
        );
        assert_eq!(check.code, 4, "{}", check.stdout);
        deferred.push((file, *level));
    }
    let recorded = |home: &Home| -> Vec<String> {
        wal_kinds(home)
            .iter()
            .filter(|e| e["kind"] == "latch_engaged")
            .map(|e| e["file"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(deferred.iter().all(|(f, _)| !recorded(&home).contains(f)));

    // Resumed, the gateway's lock is released; the next writer finishes every deferred record,
    // each emergency with its epoch advance, before its own.
    gateway.resume();
    let out = run_or_hang(
        home.command(&[
            "--json",
            "engage",
            "--scope",
            "agent:after",
            "--level",
            "halt-all",
            "--reason",
            "after",
        ]),
        "engage after the resume",
    );
    out.assert_ok();
    assert_eq!(out.json()["wal_deferred"], false, "{}", out.stdout);
    let wal = wal_kinds(&home);
    for (file, level) in &deferred {
        let at = wal
            .iter()
            .position(|e| e["kind"] == "latch_engaged" && e["file"] == file.as_str())
            .unwrap_or_else(|| panic!("{file} was never recorded"));
        assert_eq!(wal[at]["deferred"], true);
        if *level == "emergency" {
            assert_eq!(wal[at + 1]["kind"], "epoch_advance", "{}", wal[at + 1]);
            assert_eq!(wal[at + 1]["cause"], "engage");
        }
    }
    let epoch: Value =
        serde_json::from_str(&std::fs::read_to_string(home.file("epoch.json")).unwrap()).unwrap();
    assert!(
        epoch["scopes"]["agent:frozen-0"].as_u64().unwrap() > 0,
        "{epoch}"
    );
    assert!(
        epoch["scopes"]["agent:frozen-2"].as_u64().unwrap() > 0,
        "{epoch}"
    );
    // Every gate reads the finished ledger without a fault.
    let status = home.status();
    assert_eq!(status["faults"], serde_json::json!([]), "{status}");
}

#[test]
fn recovery_records_a_deferred_epoch_advance_before_it_clears() {
    let home = Home::new();
    home.engage("agent:before", "halt-all");
    let gateway = Parked::start(&home);
    gateway.park(&home);
    let out = run_or_hang(
        home.command(&[
            "--json",
            "engage",
            "--scope",
            "agent:gone",
            "--reason",
            "frozen",
        ]),
        "engage",
    );
    assert_eq!(out.json()["wal_deferred"], true, "{}", out.stdout);
    let file = out.json()["latch"]["file"].as_str().unwrap().to_string();
    // Resumed, the gateway may itself finish the record on its next reload; either way the
    // recovery below must find it recorded (it records it itself otherwise). The gateway stays
    // up: killing it in the middle of that advance would be a crash between WAL and snapshot.
    gateway.resume();
    let plan = home.run_on_pty(
        &[
            "recover",
            "plan",
            "--scope",
            "agent:gone",
            "--reason",
            "r",
            "--by",
            "operator",
        ],
        &[],
    );
    assert_eq!(plan.code, 0, "{} {}", plan.stdout, plan.stderr);
    let plan_id = serde_json::from_str::<Value>(&plan.stdout).unwrap()["plan"]
        .as_str()
        .unwrap()
        .to_string();
    let apply = home.run_on_pty(
        &["recover", "apply", "--plan", &plan_id, "--by", "operator"],
        &[],
    );
    assert_eq!(apply.code, 0, "{} {}", apply.stdout, apply.stderr);
    let wal = wal_kinds(&home);
    let engaged = wal
        .iter()
        .position(|e| e["kind"] == "latch_engaged" && e["file"] == file.as_str())
        .expect("the deferred latch was recorded");
    let advance = wal
        .iter()
        .position(|e| {
            e["kind"] == "epoch_advance" && e["cause"] == "engage" && e["scope"] == "agent:gone"
        })
        .expect("its epoch advance was recorded");
    let applied = wal
        .iter()
        .position(|e| e["kind"] == "recovery_applied")
        .unwrap();
    assert!(engaged < advance && advance < applied, "{wal:?}");
    assert!(home
        .file("breakglass.cleared")
        .read_dir()
        .unwrap()
        .flatten()
        .any(|d| d.path().join(&file).exists()));
}
