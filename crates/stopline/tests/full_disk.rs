//! A full disk tears no journal, loses no record and stops no stop (docs/reference.md §5).
//!
//! Reproduces a reported defect: on a small filesystem filled under load, a failed append left half a
//! line in `ops/` and `spend/` journals and the next record was glued onto it (a prepared
//! record lost to readers, and a gateway that would not restart); and on tmpfs out of inodes a
//! scoped stop needed two inodes (a staged file and its link) where the reserve freed one.
//! The filesystems here are real: a tmpfs with few inodes, and an ext4 image on a loop device,
//! filled by a file the test writes and removes.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use gw::{http_with, rpc_messages, FrameUpstream, Gateway};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use util::{Home, Run};

/// A small filesystem mounted for one test, unmounted (and its loop device freed) on drop.
struct SmallFs {
    dir: tempfile::TempDir,
    image: Option<PathBuf>,
}

impl SmallFs {
    fn mount_with(kind: &str, options: &str, source: &Path, image: Option<PathBuf>) -> SmallFs {
        let dir = tempfile::Builder::new()
            .prefix("stopline-full-")
            .tempdir_in("/tmp")
            .unwrap();
        let status = Command::new("mount")
            .args(["-t", kind, "-o", options])
            .arg(source)
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mount -t {kind} needs root (the suite runs as root)"
        );
        SmallFs { dir, image }
    }

    /// A tmpfs of `size` with `inodes` inodes.
    fn tmpfs(size: &str, inodes: u32) -> SmallFs {
        SmallFs::mount_with(
            "tmpfs",
            &format!("size={size},nr_inodes={inodes},mode=0700"),
            Path::new("tmpfs"),
            None,
        )
    }

    /// A 16 MiB ext4 image on a loop device.
    fn ext4() -> SmallFs {
        let image = tempfile::Builder::new()
            .prefix("stopline-ext4-")
            .suffix(".img")
            .tempfile_in("/tmp")
            .unwrap()
            .into_temp_path()
            .keep()
            .unwrap();
        let made = Command::new("sh")
            .arg("-c")
            .arg("truncate -s 16M \"$1\" && mkfs.ext4 -q -F \"$1\"")
            .arg("sh")
            .arg(&image)
            .status()
            .expect("run mkfs.ext4");
        assert!(made.success(), "mkfs.ext4 must be installed");
        SmallFs::mount_with("ext4", "loop", &image.clone(), Some(image))
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fill every free inode: create empty files until the kernel refuses.
    fn fill_inodes(&self) {
        let junk = self.path().join("junk");
        std::fs::create_dir(&junk).expect("a directory for the junk");
        for i in 0.. {
            if let Err(error) = std::fs::File::create(junk.join(format!("f{i}"))) {
                assert_eq!(error.raw_os_error(), Some(28), "{error}");
                break;
            }
        }
        assert_eq!(
            std::fs::File::create(self.path().join("one-more"))
                .unwrap_err()
                .raw_os_error(),
            Some(28),
            "the filesystem still has free inodes"
        );
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
        if let Some(image) = &self.image {
            let _ = std::fs::remove_file(image);
        }
    }
}

/// Write `path` until its filesystem has not one more block.
fn fill_file(path: &Path) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    let block = vec![0u8; 64 * 1024];
    for _ in 0..100 {
        let mut wrote = 0usize;
        loop {
            match file.write(&block) {
                Ok(n) if n > 0 => wrote += n,
                Ok(_) => break,
                Err(error) => {
                    assert_eq!(error.raw_os_error(), Some(28), "{error}");
                    break;
                }
            }
        }
        let _ = file.sync_all();
        if wrote == 0 {
            return;
        }
    }
    panic!("{} never filled its filesystem", path.display());
}

fn run(home: &Path, args: &[&str]) -> Run {
    Command::new(util::bin())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .arg("--home")
        .arg(home)
        .arg("--json")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run stopline")
        .into()
}

/// A scoped stop, then a machine stop, on a home whose filesystem is full: both land, and the
/// gates refuse.
fn scoped_then_machine_stop_land(home: &Path) {
    let scoped = run(
        home,
        &["engage", "--scope", "agent:worker", "--reason", "disk full"],
    );
    assert_eq!(scoped.code, 0, "{}\n{}", scoped.stdout, scoped.stderr);
    assert_eq!(scoped.json()["engaged"], true, "{}", scoped.stdout);
    let machine = run(
        home,
        &[
            "engage",
            "--scope",
            "machine",
            "--reason",
            "disk still full",
        ],
    );
    assert_eq!(machine.code, 0, "{}\n{}", machine.stdout, machine.stderr);
    assert_eq!(machine.json()["engaged"], true, "{}", machine.stdout);
    let check = run(home, &["check", "--class", "critical"]);
    assert_eq!(check.code, 4, "{}", check.stdout);
    assert_eq!(check.json()["mode"], "EMERGENCY", "{}", check.stdout);
}

#[test]
fn a_scoped_stop_then_a_machine_stop_land_on_a_tmpfs_home_out_of_inodes() {
    let fs = SmallFs::tmpfs("16m", 64);
    let home = fs.path().join("home");
    run(&home, &["init"]).assert_ok();
    fs.fill_inodes();
    scoped_then_machine_stop_land(&home);
}

#[test]
fn a_scoped_stop_then_a_machine_stop_land_on_a_full_ext4_home() {
    let fs = SmallFs::ext4();
    let home = fs.path().join("home");
    run(&home, &["init"]).assert_ok();
    // Full: not one inode, not one block (the filler made before the inodes ran out).
    let filler = fs.path().join("filler");
    std::fs::File::create(&filler).unwrap();
    fs.fill_inodes();
    fill_file(&filler);
    scoped_then_machine_stop_land(&home);
}

/// One prepared line of the operation `op` on `target` by agent `w`.
fn prepared(op: &str, target: &str) -> String {
    format!(
        "{{\"op\":\"{op}\",\"phase\":\"prepared\",\"ts\":\"2026-01-01T00:00:00.000Z\",\"ts_ms\":1767225600000,\"target\":\"{target}\",\"agent\":\"w\"}}"
    )
}

#[test]
fn a_journal_torn_in_its_middle_is_a_fault_until_repaired_at_the_owner_console() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    // What a failed append on a full disk left in a gateway's journals before appends were made whole: half
    // a prepared line, then the next record glued onto it. pid 4194304 is above pid_max, so
    // the writer is certainly gone.
    let ops = home.file("ops");
    std::fs::create_dir_all(&ops).unwrap();
    let torn = prepared("op_torn01", "mcp:everything:echo");
    let glued = prepared("op_glued1", "mcp:everything:write-file");
    let journal = format!(
        "{}\n{{\"op\":\"op_whole1\",\"phase\":\"outcome\",\"ts\":\"2026-01-01T00:00:00.002Z\",\"ts_ms\":1767225600002,\"outcome\":\"committed\"}}\n{}{glued}\n{{\"op\":\"op_glued1\",\"phase\":\"dispatched\",\"ts\":\"2026-01-01T00:00:00.003Z\",\"ts_ms\":1767225600003}}\n",
        prepared("op_whole1", "mcp:everything:echo"),
        &torn[..torn.len() / 2],
    );
    std::fs::write(ops.join("gateway-4194304-1.jsonl"), &journal).unwrap();
    let spend = home.file("spend");
    std::fs::create_dir_all(&spend).unwrap();
    std::fs::write(
        spend.join("gateway-4194304-1.jsonl"),
        "{\"phase\":\"settled\",\"id\":\"r1\",\"used\":{}}\n{\"phase\":\"sett{\"phase\":\"settled\",\"id\":\"r2\",\"used\":{}}\n",
    )
    .unwrap();

    // A fault in status, naming both journals.
    let status = home.status();
    let faults = status["faults"].to_string();
    assert!(
        faults.contains("ops/gateway-4194304-1.jsonl")
            && faults.contains("spend/gateway-4194304-1.jsonl"),
        "status must name the torn journals as faults: {status}"
    );
    // The gates stay closed to what it concerns: a registry error blocks every target.
    let token = home.token(&["--agent", "w"]);
    let (code, refused) = home.check(&[
        "--class",
        "noncritical",
        "--token",
        &token,
        "--target",
        "mcp:everything:echo",
    ]);
    assert_eq!(code, 4, "{refused}");

    // Off the console the repair is refused; on it, the torn lines are cut out.
    let r = home.run(&["recover", "repair", "--reason", "torn", "--by", "operator"]);
    assert_eq!(r.code_str(), "owner_control_required");
    let r = home.run_on_pty(
        &[
            "recover",
            "repair",
            "--reason",
            "a full disk tore two journals",
            "--by",
            "operator",
        ],
        &[],
    );
    r.assert_ok();
    let receipt = r.json();
    assert_eq!(receipt["nothing_to_repair"], false, "{receipt}");
    let repaired = receipt["journals_repaired"].as_array().unwrap();
    assert_eq!(repaired.len(), 2, "{receipt}");
    for journal in repaired {
        assert_eq!(journal["torn_lines"], 1, "{receipt}");
        assert_eq!(journal["recovered_records"], 1, "{receipt}");
    }
    // The old bytes are kept, once per journal.
    let kept = home.entries("recovery-evidence");
    assert_eq!(kept.len(), 2, "{kept:?}");
    let old: Vec<Vec<u8>> = kept
        .iter()
        .map(|name| std::fs::read(home.file("recovery-evidence").join(name)).unwrap())
        .collect();
    assert!(old.contains(&journal.into_bytes()), "{kept:?}");

    // Every line parses; the glued prepared record is kept, in doubt, and blocks its target.
    let text = std::fs::read_to_string(ops.join("gateway-4194304-1.jsonl")).unwrap();
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line).expect(line);
    }
    let status = home.status();
    assert_eq!(
        status["faults"].as_array().map(Vec::len),
        Some(0),
        "{status}"
    );
    let listed = home.run(&["ops", "list", "--unresolved"]);
    listed.assert_ok();
    let listed = listed.json();
    assert!(
        listed.to_string().contains("op_glued1"),
        "the recovered prepared record stays in doubt: {listed}"
    );
    let (code, refused) = home.check(&[
        "--class",
        "noncritical",
        "--token",
        &token,
        "--target",
        "mcp:everything:write-file",
    ]);
    assert_eq!(
        (code, refused["code"].as_str()),
        (4, Some("unresolved_operation")),
        "{refused}"
    );
    assert_eq!(
        home.check(&[
            "--class",
            "noncritical",
            "--token",
            &token,
            "--target",
            "mcp:everything:echo"
        ])
        .0,
        0,
        "the repaired registry blocks only the in-doubt operation's target"
    );
}

/// Every complete line of every journal under `dir`, parsed; panics on one that does not parse
/// or a journal that does not end in a newline.
fn journal_lines(dir: &Path) -> Vec<Value> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".jsonl") {
            continue;
        }
        let bytes = std::fs::read(entry.path()).unwrap();
        assert!(
            bytes.is_empty() || bytes.ends_with(b"\n"),
            "{name} ends in a torn line"
        );
        for line in String::from_utf8(bytes).unwrap().lines() {
            lines.push(
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("{name}: a torn line ({e}): {line:?}")),
            );
        }
    }
    lines
}

#[test]
fn four_clients_calling_tools_while_the_disk_fills_and_empties_tear_no_journal() {
    let home = Home::new();
    // The home is the root of a 16 MiB tmpfs (whose writes land a page at a time, so a line
    // crossing into a page the full disk cannot give lands partly); the upstream's log and the
    // gateway's stderr stay outside it, on the test's own filesystem.
    std::fs::create_dir_all(home.path()).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs"])
        .arg(home.path())
        .status()
        .unwrap();
    assert!(mounted.success(), "mount needs root");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(home.path());
    home.run(&["init"]).assert_ok();

    let upstream = FrameUpstream::start(&home);
    let config = upstream.config("");
    let mut gateway = Gateway::start(&home, &config);
    let token = home.token(&["--agent", "w"]);
    let running = Arc::new(AtomicBool::new(true));
    let answered = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..4u64)
        .map(|client| {
            let (addr, token) = (gateway.addr.clone(), token.clone());
            let (running, answered) = (running.clone(), answered.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while running.load(Ordering::SeqCst) {
                    n += 1;
                    let body = json!({"jsonrpc": "2.0", "id": client * 1_000_000 + n,
                        "method": "tools/call", "params": {"name": "count", "arguments": {}}});
                    let reply = http_with(
                        &addr,
                        "POST",
                        "/mcp/frames",
                        Some(&token),
                        Some(&body),
                        &[("Accept", "application/json, text/event-stream")],
                    );
                    let refused = rpc_messages(&reply)
                        .iter()
                        .any(|m| m.get("error").is_some());
                    if reply.status == 200 && !refused {
                        answered.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    // Fill the disk for 3 s, twice, while the clients call.
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(500));
        let filler = home.path().join("filler");
        fill_file(&filler);
        std::thread::sleep(Duration::from_secs(3));
        std::fs::remove_file(&filler).unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    running.store(false, Ordering::SeqCst);
    for client in clients {
        client.join().unwrap();
    }
    assert!(answered.load(Ordering::SeqCst) > 0, "no call was answered");

    // Every line of every journal parses.
    let ops = journal_lines(&home.file("ops"));
    if home.file("spend").exists() {
        journal_lines(&home.file("spend"));
    }
    // Every call the upstream executed has exactly one prepared record: no more executions
    // than prepared operations, and no operation prepared twice.
    let mut prepared = std::collections::BTreeMap::<String, usize>::new();
    for line in &ops {
        if line["phase"] == "prepared" && line["target"] == "mcp:frames:count" {
            *prepared
                .entry(line["op"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
    assert!(
        prepared.values().all(|&n| n == 1),
        "an operation prepared twice"
    );
    let executed = upstream.received("tools/call").len();
    assert!(
        executed <= prepared.len(),
        "the upstream executed {executed} calls, but only {} were prepared",
        prepared.len()
    );
    let listed = home.run(&["ops", "list"]);
    listed.assert_ok();
    assert_eq!(
        listed.json()["errors"].as_array().map(Vec::len),
        Some(0),
        "ops list reports no error: {}",
        listed.stdout
    );

    // A SIGKILLed gateway restarts and serves (another agent: an operation whose outcome the
    // full disk kept from the journal is rightly in doubt, and blocks `w` on its target).
    let _ = gateway.proc.0.kill();
    let _ = gateway.proc.0.wait();
    gateway = Gateway::start(&home, &config);
    let other = home.token(&["--agent", "v"]);
    let reply = http_with(
        &gateway.addr,
        "POST",
        "/mcp/frames",
        Some(&other),
        Some(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "count", "arguments": {}}})),
        &[("Accept", "application/json, text/event-stream")],
    );
    let messages: Vec<Value> = rpc_messages(&reply);
    assert!(
        reply.status == 200 && messages.iter().all(|m| m.get("error").is_none()),
        "the restarted gateway serves: {} {}",
        reply.status,
        reply.body
    );
    drop(gateway);
}
