//! `stopline bench history`: what a long history costs, measured beside a fresh home in one run.
//!
//! Two throwaway homes side by side: a fresh one, and an aged one built with the store's own
//! calls (operations prepared, dispatched and resolved in the journals of gateways that have
//! since gone, engage/disengage cycles, evidence records). The build skips fsync (a wrapper
//! [`Fs`] that turns every sync into a plain write) so a long history can be made in seconds;
//! the bytes on disk are exactly what the synced calls write. Every measure then alternates
//! fresh, aged, fresh, aged … on the real binary (`check`, `status`, `engage`, `disengage`) or
//! the gateway's own view code (a full reload, engage → refusal through the inotify watch). Before
//! those, an idle `stopline serve` on each home is sampled from `/proc` for CPU and RSS (first,
//! as a deployment's gateway starts in front of its home). Figures, never assertions.

use crate::view::ViewHolder;
use serde_json::{json, Value};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stopline_core::{Decision, Level, Name, Scope, Subject, TaskClass};
use stopline_store::env::{Env, GoneProcess, SystemEnv};
use stopline_store::fs::{Fs, LockGuard, RealFs};
use stopline_store::ops::OpOwner;
use stopline_store::{EngageRequest, Store};

/// How much history the aged home gets.
#[derive(Debug, Clone, Copy)]
pub struct HistorySizes {
    /// Recorded operations (prepared, dispatched, resolved).
    pub operations: usize,
    /// Engage/disengage cycles.
    pub cycles: usize,
    /// Evidence records.
    pub evidence: usize,
}

impl Default for HistorySizes {
    fn default() -> Self {
        HistorySizes {
            operations: 100_000,
            cycles: 10_000,
            evidence: 10_000,
        }
    }
}

/// The real filesystem without fsync: only for building a benchmark's throwaway history fast.
struct UnsyncedFs(RealFs);

impl Fs for UnsyncedFs {
    fn write_new(&self, path: &Path, bytes: &[u8], fp: &str) -> io::Result<()> {
        self.0.write_new(path, bytes, fp)
    }
    fn append(&self, path: &Path, bytes: &[u8], _sync: bool, fp: &str) -> io::Result<()> {
        self.0.append(path, bytes, false, fp)
    }
    fn sync_dir(&self, _dir: &Path, _fp: &str) -> io::Result<()> {
        Ok(())
    }
    fn hard_link(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()> {
        self.0.hard_link(from, to, fp)
    }
    fn rename(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()> {
        self.0.rename(from, to, fp)
    }
    fn remove_file(&self, path: &Path, fp: &str) -> io::Result<()> {
        self.0.remove_file(path, fp)
    }
    fn create_dir_all(&self, path: &Path, fp: &str) -> io::Result<()> {
        self.0.create_dir_all(path, fp)
    }
    fn truncate(&self, path: &Path, len: u64, fp: &str) -> io::Result<()> {
        self.0.truncate(path, len, fp)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.0.read(path)
    }
    fn read_from(&self, path: &Path, offset: u64) -> io::Result<Vec<u8>> {
        self.0.read_from(path, offset)
    }
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.0.read_dir(dir)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.0.exists(path)
    }
    fn lock(
        &self,
        path: &Path,
        exclusive: bool,
        create: bool,
        wait: Option<Duration>,
    ) -> io::Result<Box<dyn LockGuard>> {
        self.0.lock(path, exclusive, create, wait)
    }
}

fn other(error: impl std::fmt::Display) -> io::Error {
    io::Error::other(error.to_string())
}

const CONFIG: &str = "listen = \"127.0.0.1:0\"\noperators = [\"operator\"]\n";

fn console_request(scope: Scope, by: &str) -> EngageRequest {
    EngageRequest::console(scope, Level::HaltAll, by, "history benchmark")
}

/// Make `home` whole with the benchmark's configuration.
fn prepare(home: &Path) -> io::Result<()> {
    Store::open(home).ensure_home().map_err(other)?;
    std::fs::write(home.join("config.toml"), CONFIG)
}

/// Build the aged history in `home` through the store's own calls (without fsync).
fn age(home: &Path, sizes: HistorySizes) -> io::Result<()> {
    // Ten earlier gateways share the operations; three of them left one model request
    // unresolved each (which blocks nobody), as a long-lived home would have.
    let writers = 10usize;
    let per_writer = sizes.operations.div_ceil(writers);
    let mut left = sizes.operations;
    for w in 0..writers {
        // A gateway that has gone (no such process runs): its journal reads as that of an
        // earlier, finished gateway.
        let env = Arc::new(GoneProcess(4_100_000 + w as u32));
        let store = Store::with_io(home, Arc::new(UnsyncedFs(RealFs)), env);
        let journal = store.ops_journal("gateway").map_err(other)?;
        let owner = OpOwner::agent(&format!("history-{w}"));
        for i in 0..per_writer.min(left) {
            let target = if i % 2 == 0 {
                "mcp:bench:echo".to_string()
            } else {
                "model:bench-model".to_string()
            };
            let op = journal
                .prepare_for(&target, &owner, Some(&format!("{i}")))
                .map_err(other)?;
            journal.dispatched(&op).map_err(other)?;
            let unresolved = w < 3 && i + 1 == per_writer.min(left);
            if !unresolved || target.starts_with("mcp:") {
                journal.outcome(&op, "committed").map_err(other)?;
            }
        }
        left = left.saturating_sub(per_writer);
    }
    let store = Store::with_io(home, Arc::new(UnsyncedFs(RealFs)), Arc::new(SystemEnv));
    for i in 0..sizes.cycles {
        let name = Name::parse(&format!("cycle-{}", i % 64)).map_err(|e| other(e.message))?;
        let scope = Scope::Agent(name);
        store
            .engage(&console_request(scope.clone(), "operator"))
            .map_err(other)?;
        store
            .disengage(&scope, "history benchmark", "operator")
            .map_err(other)?;
    }
    for i in 0..sizes.evidence {
        let record = stopline_store::chain::fields([
            ("schema", json!("stopline.bench-history.v1")),
            ("i", json!(i)),
        ]);
        store
            .append_evidence("bench_history", record)
            .map_err(other)?;
    }
    Ok(())
}

fn p50_ms(samples: &mut [Duration]) -> f64 {
    samples.sort();
    samples
        .get(samples.len() / 2)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// Time one run of the binary with `args` against `home` (its exit code is not judged: a
/// `check` that blocks is as much a measurement as one that allows).
fn run_binary(exe: &Path, home: &Path, args: &[&str]) -> io::Result<Duration> {
    let started = Instant::now();
    let status = Command::new(exe)
        .arg("--home")
        .arg(home)
        .arg("--json")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .env_remove("STOPLINE_TOKEN")
        .status()?;
    let elapsed = started.elapsed();
    if status.code().is_none() {
        return Err(other(format!("{args:?} died: {status}")));
    }
    Ok(elapsed)
}

/// One measure, alternating fresh and aged `samples` times each.
fn side_by_side(
    name: &str,
    homes: [&Path; 2],
    samples: usize,
    mut measure: impl FnMut(&Path, usize) -> io::Result<Duration>,
) -> io::Result<Value> {
    let (mut fresh, mut aged) = (Vec::new(), Vec::new());
    for i in 0..samples.max(1) {
        fresh.push(measure(homes[0], i)?);
        aged.push(measure(homes[1], i)?);
    }
    let (fresh, aged) = (p50_ms(&mut fresh), p50_ms(&mut aged));
    Ok(json!({
        "measure": name,
        "fresh_p50_ms": fresh,
        "aged_p50_ms": aged,
        "ratio": if fresh > 0.0 { aged / fresh } else { 0.0 },
    }))
}

/// From an engage through the store to the moment a watching gateway view refuses the stopped
/// agent (inotify, then the view's fast refresh), then the halt is lifted again.
fn engage_to_refusal(view: &ViewHolder, store: &Store, i: usize) -> io::Result<Duration> {
    let name = Name::parse(&format!("probe-refusal-{}", i % 8)).map_err(|e| other(e.message))?;
    let subject = Subject::unprovable(Some(name.clone()), Vec::new(), Vec::new());
    let scope = Scope::Agent(name);
    let started = Instant::now();
    store
        .engage(&console_request(scope.clone(), &format!("probe-{i}")))
        .map_err(other)?;
    let deadline = started + Duration::from_secs(10);
    let elapsed = loop {
        let snapshot = view.load();
        let receipt =
            snapshot
                .view
                .decide(&subject, TaskClass::Noncritical, None, None, store.now_ms());
        if receipt.decision == Decision::Block {
            break started.elapsed();
        }
        if Instant::now() > deadline {
            return Err(other("the gateway view never refused the stopped agent"));
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    store
        .disengage(&scope, "history benchmark", "operator")
        .map_err(other)?;
    Ok(elapsed)
}

/// utime + stime of `pid` in clock ticks, and its resident set in kB.
fn proc_usage(pid: u32) -> io::Result<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = &stat[stat.rfind(')').ok_or_else(|| other("bad stat"))? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = fields
        .get(11)
        .and_then(|f| f.parse::<u64>().ok())
        .unwrap_or(0)
        + fields
            .get(12)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Ok((ticks, rss))
}

/// `/proc/<pid>/stat` counts CPU time in USER_HZ ticks, 100 per second on Linux.
fn clock_ticks() -> f64 {
    100.0
}

/// Start `stopline serve` on `home`, let it settle, and sample its CPU and RSS over `window`.
fn idle_gateway(exe: &Path, home: &Path, window: Duration) -> io::Result<Value> {
    let mut child = Command::new(exe)
        .arg("--home")
        .arg(home)
        .arg("serve")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = child.id();
    let measured = (|| {
        // Wait for its registration (the view is loaded by then), at most 10 s.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_dir(home.join("servers"))
            .map(|mut d| d.next().is_some())
            .unwrap_or(false)
        {
            if Instant::now() > deadline {
                return Err(other("the gateway did not register within 10 s"));
            }
            if child.try_wait()?.is_some() {
                return Err(other("the gateway exited at start"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_secs(1));
        let (before, _) = proc_usage(pid)?;
        let started = Instant::now();
        std::thread::sleep(window);
        let (after, rss_kb) = proc_usage(pid)?;
        let seconds = started.elapsed().as_secs_f64();
        let cpu_pct = (after - before) as f64 / clock_ticks() / seconds * 100.0;
        Ok(json!({"cpu_pct": cpu_pct, "rss_mb": rss_kb as f64 / 1024.0}))
    })();
    // The child this function started, ended by its own handle.
    let _ = child.kill();
    let _ = child.wait();
    measured
}

/// Run the history benchmark with the binary `exe`, `samples` per measure and home, and an
/// idle gateway sampled over `idle_window` on each home.
pub fn history(
    exe: &Path,
    sizes: HistorySizes,
    samples: usize,
    idle_window: Duration,
) -> io::Result<Value> {
    let base: PathBuf = std::env::temp_dir().join(format!(
        "stopline-bench-history-{}-{}",
        std::process::id(),
        SystemEnv.random_hex(4)
    ));
    let result = history_in(exe, &base, sizes, samples, idle_window);
    let _ = std::fs::remove_dir_all(&base);
    result
}

fn history_in(
    exe: &Path,
    base: &Path,
    sizes: HistorySizes,
    samples: usize,
    window: Duration,
) -> io::Result<Value> {
    let fresh = base.join("fresh");
    let aged = base.join("aged");
    prepare(&fresh)?;
    prepare(&aged)?;
    let building = Instant::now();
    age(&aged, sizes)?;
    let build_s = building.elapsed().as_secs_f64();
    let disk_bytes = du(&aged);
    // The idle gateways first, as a deployment's gateway starts in front of its home: its
    // upkeep snapshots the journals the earlier, gone gateways left.
    let idle_fresh = idle_gateway(exe, &fresh, window)?;
    let idle_aged = idle_gateway(exe, &aged, window)?;
    let homes = [fresh.as_path(), aged.as_path()];
    let mut runs = Vec::new();
    runs.push(side_by_side("check", homes, samples, |home, _| {
        run_binary(
            exe,
            home,
            &[
                "check",
                "--class",
                "noncritical",
                "--agent",
                "probe",
                "--target",
                "mcp:bench:echo",
            ],
        )
    })?);
    runs.push(side_by_side("status", homes, samples, |home, _| {
        run_binary(exe, home, &["status"])
    })?);
    let (mut engaged, mut disengaged) = (Vec::new(), Vec::new());
    for i in 0..samples.max(1) {
        for (slot, home) in homes.iter().enumerate() {
            let scope = format!("agent:probe-cycle-{i}");
            let e = run_binary(
                exe,
                home,
                &[
                    "engage", "--scope", &scope, "--level", "halt-all", "--reason", "bench",
                    "--by", "operator",
                ],
            )?;
            let d = run_binary(
                exe,
                home,
                &[
                    "disengage",
                    "--scope",
                    &scope,
                    "--reason",
                    "bench",
                    "--by",
                    "operator",
                ],
            )?;
            engaged.push((slot, e));
            disengaged.push((slot, d));
        }
    }
    for (name, samples) in [("engage", engaged), ("disengage", disengaged)] {
        let mut split = [Vec::new(), Vec::new()];
        for (slot, d) in samples {
            split[slot].push(d);
        }
        let (f, a) = (p50_ms(&mut split[0]), p50_ms(&mut split[1]));
        runs.push(json!({
            "measure": name,
            "fresh_p50_ms": f,
            "aged_p50_ms": a,
            "ratio": if f > 0.0 { a / f } else { 0.0 },
        }));
    }
    let holders: Vec<Arc<ViewHolder>> = homes
        .iter()
        .map(|home| Arc::new(ViewHolder::new(Store::open(*home), Duration::from_secs(1))))
        .collect();
    runs.push(side_by_side(
        "gateway_reload",
        homes,
        samples,
        |home, _| {
            let view = &holders[usize::from(home == aged.as_path())];
            let started = Instant::now();
            view.refresh_full();
            Ok(started.elapsed())
        },
    )?);
    let stop = Arc::new(AtomicBool::new(false));
    for view in &holders {
        crate::watch::spawn_watcher(view.store().clone(), view.clone(), stop.clone());
    }
    std::thread::sleep(Duration::from_millis(200));
    let stores: Vec<Store> = homes.iter().map(|h| Store::open(*h)).collect();
    runs.push(side_by_side(
        "engage_to_refusal",
        homes,
        samples,
        |home, i| {
            let slot = usize::from(home == aged.as_path());
            engage_to_refusal(&holders[slot], &stores[slot], i)
        },
    )?);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    Ok(json!({
        "aged": {
            "operations": sizes.operations,
            "cycles": sizes.cycles,
            "evidence": sizes.evidence,
            "disk_mb": disk_bytes as f64 / 1048576.0,
            "build_s": build_s,
        },
        "samples": samples.max(1),
        "runs": runs,
        "idle_gateway": {
            "cpu_pct": idle_aged["cpu_pct"],
            "rss_mb": idle_aged["rss_mb"],
            "window_s": window.as_secs_f64(),
            "fresh_cpu_pct": idle_fresh["cpu_pct"],
            "fresh_rss_mb": idle_fresh["rss_mb"],
        },
    }))
}

/// Bytes under `dir` (regular files).
fn du(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => du(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}
