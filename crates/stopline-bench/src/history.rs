//! `stopline bench history`: what a long history costs, measured beside a fresh home in one run.
//!
//! Three throwaway homes side by side: a fresh one (nothing in it), a live one (only the live
//! state the aged home has too: three gone gateways' unresolved model requests, which stay in
//! doubt until reconciled), and an aged one built with the store's own calls (that live state,
//! plus operations prepared, dispatched and resolved in the journals of gateways that have since
//! gone, engage/disengage cycles, evidence records). `ratio` is aged ÷ fresh, as the issue asks;
//! `ratio_vs_live` is aged ÷ live: the cost of the history alone, with the live state equal on
//! both sides (cost may follow what is live, never what happened). The build skips fsync (a
//! wrapper [`Fs`] that turns every sync into a plain write) so a long history can be made in
//! seconds; the bytes on disk are exactly what the synced calls write. Every measure then
//! alternates fresh, live, aged, fresh, … on the real binary (`check`, `status`, `engage`, `disengage`) or
//! the gateway's own view code (a full reload, engage → refusal through the inotify watch), and a
//! reservation on a budget limit through the store's spending journals (a new gateway's first,
//! a running one's next; the aged home holds 40 gone gateways' spending journals, the live one
//! only their reservations in doubt), and `stopline run`'s drill gate (`drill_gate`, the drill
//! index; every tenth aged evidence record is a drill, the live home holds its last one) beside
//! the whole verified read of the evidence log it made before the index (`evidence_whole_read`,
//! what `evidence verify --all` and `evidence list` still read). Before
//! those, an idle `stopline serve` on each home is sampled from `/proc` for CPU and RSS (first,
//! as a deployment's gateway starts in front of its home). Figures, never assertions.
#![allow(clippy::disallowed_methods)] // `bench history`: throwaway homes it built itself and the binary it times, never a real home

use crate::stats::quantile;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stopline_core::run_record::{Begun, GatewayRecord, RunRecord};
use stopline_core::worker::{WorkerRegistration, WorkerState};
use stopline_core::{Decision, Level, Name, Scope, Subject, TaskClass};
use stopline_gateway::view::ViewHolder;
use stopline_store::env::{Env, GoneProcess, SystemEnv};
use stopline_store::evidence::drills::DRILL_SCHEMA;
use stopline_store::fs::{Fs, FsLayer, RealFs};
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
    /// Supervised runs that ran to their end (their card, record and `exited` registration
    /// under `runs/`, their `runs.live/` entry gone), as `stopline run` leaves them.
    pub runs: usize,
    /// Token revocations on record for the authority measure (beside 16 label revisions and a
    /// token carrying 16 labels).
    pub revocations: usize,
}

impl Default for HistorySizes {
    fn default() -> Self {
        HistorySizes {
            operations: 100_000,
            cycles: 10_000,
            evidence: 10_000,
            runs: 10_000,
            revocations: 1_000,
        }
    }
}

/// The real filesystem without fsync: only for building a benchmark's throwaway history fast.
struct UnsyncedFs(RealFs);

impl FsLayer for UnsyncedFs {
    fn inner(&self) -> &dyn Fs {
        &self.0
    }
    fn append(&self, path: &Path, bytes: &[u8], _sync: bool, fp: &str) -> io::Result<()> {
        self.0.append(path, bytes, false, fp)
    }
    fn append_end(
        &self,
        path: &Path,
        bytes: &[u8],
        _sync: bool,
        fp: &str,
    ) -> io::Result<Option<u64>> {
        self.0.append_end(path, bytes, false, fp)
    }
    fn sync_dir(&self, _dir: &Path, _fp: &str) -> io::Result<()> {
        Ok(())
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

/// Gone gateways that left one model request unresolved each (which blocks nobody): the live
/// state the aged home and the live home share.
const UNRESOLVED_WRITERS: usize = 3;

/// Build in `home`, through the store's own calls (without fsync), `operations` recorded
/// operations shared by ten earlier gateways, and the live state: the first
/// [`UNRESOLVED_WRITERS`] of them left their last model request unresolved, as a long-lived home
/// would have (the live request counts among `operations`). With `operations` 0 only the live
/// state is written (one unresolved model request per such gateway, no history).
fn record_operations(home: &Path, operations: usize) -> io::Result<()> {
    let writers = 10usize;
    let per_writer = operations.div_ceil(writers);
    let mut left = operations;
    for w in 0..writers {
        let history = per_writer.min(left);
        left = left.saturating_sub(per_writer);
        let unresolved = w < UNRESOLVED_WRITERS;
        if history == 0 && !unresolved {
            continue;
        }
        // A gateway that has gone (no such process runs): its journal reads as that of an
        // earlier, finished gateway.
        let env = Arc::new(GoneProcess(4_100_000 + w as u32));
        let store = Store::with_io(home, Arc::new(UnsyncedFs(RealFs)), env);
        let journal = store.ops().journal("gateway").map_err(other)?;
        let owner = OpOwner::agent(&format!("history-{w}"));
        let count = history.max(usize::from(unresolved));
        for i in 0..count {
            // The live one is the writer's last operation, a model request.
            let live = unresolved && i + 1 == count;
            let target = if i % 2 == 0 && !live {
                "mcp:bench:echo"
            } else {
                "model:bench-model"
            };
            let op = journal
                .prepare_for(target, &owner, Some(&format!("{i}")))
                .map_err(other)?;
            journal.dispatched(&op).map_err(other)?;
            if !live {
                journal.outcome(&op, "committed").map_err(other)?;
            }
        }
    }
    Ok(())
}

/// Gone gateways whose spending journals the aged home holds (settled reservations on a
/// budget limit: the spending history a reservation must not re-read).
const SPEND_WRITERS: usize = 40;

/// Settled reservations in the aged home's spending journals: one for every ten operations.
fn spend_reservations(sizes: HistorySizes) -> usize {
    sizes.operations / 10
}

/// The account the spending journals draw on, and the one the measured reservations do.
const SPEND_ACCOUNT: &str = "bench-spend";

/// Write in `home` the spending journals of gone gateways (`spend/gateway-<pid>-1.jsonl`: no
/// process has start time 1), as a gateway writes them (`reserved`, `settled`): `settled`
/// reservations of one tool call each spread over [`SPEND_WRITERS`] of them, and the live
/// state — the first [`UNRESOLVED_WRITERS`] left one reservation that never settled (in doubt,
/// spent at its bound). Written as files, not through a reservation's lock, so the state is
/// the same whatever the store under measurement does with gone writers' journals. Returns how
/// many journals it wrote.
fn record_spending(home: &Path, settled: usize) -> io::Result<usize> {
    use stopline_store::spend::SpendLine;
    let one: stopline_core::budget::Budgets =
        [(stopline_core::budget::BudgetKind::ToolCalls, 1.0)].into();
    let chain = vec![SPEND_ACCOUNT.to_string()];
    let per_writer = settled.div_ceil(SPEND_WRITERS);
    let mut left = settled;
    std::fs::create_dir_all(home.join("spend"))?;
    let mut written = 0;
    for w in 0..SPEND_WRITERS {
        let history = per_writer.min(left);
        left -= history;
        let unresolved = w < UNRESOLVED_WRITERS;
        if history == 0 && !unresolved {
            continue;
        }
        let mut bytes = Vec::new();
        let mut push = |line: SpendLine| {
            bytes.extend(serde_json::to_vec(&line).expect("a spend line serializes"));
            bytes.push(b'\n');
        };
        for i in 0..history {
            let id = format!("sp_{w}_{i}");
            push(SpendLine::Reserved {
                id: id.clone(),
                chain: chain.clone(),
                amounts: one.clone(),
                ts_ms: i as i64,
            });
            push(SpendLine::Settled {
                id,
                used: one.clone(),
            });
        }
        if unresolved {
            push(SpendLine::Reserved {
                id: format!("sp_{w}_open"),
                chain: chain.clone(),
                amounts: one.clone(),
                ts_ms: 0,
            });
        }
        let name = format!("gateway-{}-1.jsonl", 4_200_000 + w);
        std::fs::write(home.join("spend").join(name), bytes)?;
        written += 1;
    }
    Ok(written)
}

/// The live home: the aged home's live state and none of its history (its last drill).
fn make_live(home: &Path) -> io::Result<()> {
    record_operations(home, 0)?;
    record_spending(home, 0)?;
    let store = Store::with_io(home, Arc::new(UnsyncedFs(RealFs)), Arc::new(SystemEnv));
    store
        .evidence()
        .append(DRILL_SCHEMA, drill_record(0))
        .map(|_| ())
        .map_err(other)
}

/// A passing drill of harness version `bench`, `i` naming it.
fn drill_record(i: usize) -> serde_json::Map<String, Value> {
    stopline_store::chain::fields([
        ("schema", json!(DRILL_SCHEMA)),
        ("harness_version", json!("bench")),
        ("pass", json!(true)),
        ("i", json!(i)),
    ])
}

/// Every tenth evidence record of the aged home is a drill, and so is its last (the live
/// home's one drill).
fn is_drill_at(i: usize, evidence: usize) -> bool {
    i % 10 == 9 || i + 1 == evidence
}

/// What `stopline run`'s drill gate reads of `store` (the drill index) and decides.
fn drill_gate(store: &Store) -> io::Result<Duration> {
    let started = Instant::now();
    let index = store.evidence().drill_summary().map_err(other)?;
    let history = index.history("bench");
    let elapsed = started.elapsed();
    if history.last_passed == Some(false) {
        return Err(other("the bench's drills failed"));
    }
    Ok(elapsed)
}

/// The whole verified read of the evidence log the drill gate used to make (and
/// `evidence verify --all` and `evidence list` still make), folded as the gate folds it.
fn evidence_whole_read(store: &Store) -> io::Result<Duration> {
    let started = Instant::now();
    let entries = store.evidence().entries().map_err(other)?;
    if let Some(why) = store.evidence().anchor_fault(&entries) {
        return Err(other(why));
    }
    let history =
        stopline_store::evidence::drills::DrillIndex::from_entries(&entries).history("bench");
    let elapsed = started.elapsed();
    if history.last_passed == Some(false) {
        return Err(other("the bench's drills failed"));
    }
    Ok(elapsed)
}

/// Build the aged home: the live state and `sizes` of history. Returns how many gone
/// gateways' spending journals it holds.
fn age(home: &Path, sizes: HistorySizes) -> io::Result<usize> {
    record_operations(home, sizes.operations)?;
    let spend_journals = record_spending(home, spend_reservations(sizes))?;
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
    for i in 0..sizes.runs {
        finished_run(&store, &format!("bench-run-{i}")).map_err(other)?;
    }
    for i in 0..sizes.evidence {
        if is_drill_at(i, sizes.evidence) {
            store
                .evidence()
                .append(DRILL_SCHEMA, drill_record(i))
                .map_err(other)?;
            continue;
        }
        let record = stopline_store::chain::fields([
            ("schema", json!("stopline.bench-history.v1")),
            ("i", json!(i)),
        ]);
        store
            .evidence()
            .append("bench_history", record)
            .map_err(other)?;
    }
    Ok(spend_journals)
}

/// One supervised run from start to end through the store's own calls, as `stopline run`
/// makes them: the entry in `runs.live/`, card and record, the registrations `running` and
/// `exited`, the entry removed.
fn finished_run(store: &Store, run: &str) -> Result<(), stopline_store::StoreError> {
    // A supervisor that has gone (no such process runs).
    let pid = 4_200_001;
    let live = store.runs().begin_run(
        run,
        "bench",
        pid,
        &json!({"project": "/bench"}),
        &json!({"schema": "policy-card.v1", "run_id": run}),
        &RunRecord::begun(Begun {
            run_id: run.into(),
            agent: "bench".into(),
            harness_version: "bench".into(),
            command: vec!["bench".into()],
            project: "/bench".into(),
            user: None,
            uid: None,
            unconfined: true,
            net: "host".into(),
            gateway: GatewayRecord {
                url: "http://127.0.0.1:1".into(),
                addr: "127.0.0.1:1".into(),
                config_sha256: None,
                config_hash_source: "bench".into(),
            },
            gateway_config_sha256: None,
            supervisor_pid: pid,
            started_at: stopline_store::env::rfc3339(store.now_ms()),
        }),
    )?;
    for state in ["running", "exited"] {
        let mut registration = WorkerRegistration::new(run, "bench", WorkerState::named(state));
        registration.project = Some("/bench".into());
        registration.supervisor_pid = Some(pid);
        registration.live_entry = live.as_ref().map(|l| l.file.clone());
        store.runs().register_worker(run, "bench", &registration)?;
    }
    match live {
        Some(live) => store.runs().end_run(&live),
        None => Ok(()),
    }
}

/// The median ([`quantile`]) in milliseconds.
fn p50_ms(samples: &mut [Duration]) -> f64 {
    samples.sort();
    quantile(samples, 0.5).as_secs_f64() * 1e3
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

/// `bench history`: each measure on a fresh, a live and an aged home, side by side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryReport {
    /// What the aged home holds.
    pub aged: AgedHome,
    /// What the live home holds.
    pub live: LiveHome,
    /// Samples per measure and home.
    pub samples: usize,
    /// Samples of the in-process reload per home.
    pub reload_samples: usize,
    /// One line per measure.
    pub runs: Vec<MeasuredLine>,
    /// An idle gateway on each home.
    pub idle_gateway: IdleGateway,
    /// `check` and admission with labels and revocations on record, beside none.
    pub authority: crate::authority::AuthorityCost,
}

/// The aged home's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgedHome {
    /// Operations recorded.
    pub operations: usize,
    /// Engage/disengage cycles.
    pub cycles: usize,
    /// Evidence records.
    pub evidence: usize,
    /// Of them, drills.
    pub drills: usize,
    /// Finished runs.
    pub runs: usize,
    /// Its size on disk.
    pub disk_mb: f64,
    /// How long building it took.
    pub build_s: f64,
    /// Gone writers' spending journals.
    pub spend_journals: usize,
    /// Reservations in them.
    pub spend_reservations: usize,
}

/// The live home's unresolved state (the aged home's too).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveHome {
    /// Operations in doubt.
    pub unresolved_operations: usize,
    /// Reservations in doubt.
    pub spend_in_doubt: usize,
}

/// One measure's p50 on each home, in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredLine {
    /// Its name.
    pub measure: String,
    /// On the fresh home.
    pub fresh_p50_ms: f64,
    /// On the live home.
    pub live_p50_ms: f64,
    /// On the aged home.
    pub aged_p50_ms: f64,
    /// Aged over fresh.
    pub ratio: f64,
    /// Aged over live.
    pub ratio_vs_live: f64,
}

/// An idle gateway's CPU and resident set on one home.
#[derive(Debug, Clone, Copy, PartialEq)]
struct IdleSample {
    cpu_pct: f64,
    rss_mb: f64,
}

/// An idle gateway on the aged home, beside the fresh and live ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleGateway {
    /// CPU on the aged home, percent of one core.
    pub cpu_pct: f64,
    /// Resident set on the aged home.
    pub rss_mb: f64,
    /// The window sampled.
    pub window_s: f64,
    /// CPU on the fresh home.
    pub fresh_cpu_pct: f64,
    /// Resident set on the fresh home.
    pub fresh_rss_mb: f64,
    /// CPU on the live home.
    pub live_cpu_pct: f64,
    /// Resident set on the live home.
    pub live_rss_mb: f64,
}

/// The homes in the order every measure alternates them.
const FRESH: usize = 0;
const LIVE: usize = 1;
const AGED: usize = 2;

/// One measure's line from its samples per home (indexed [`FRESH`], [`LIVE`], [`AGED`]).
fn measured(name: &str, mut samples: [Vec<Duration>; 3]) -> MeasuredLine {
    let [fresh, live, aged] = samples.each_mut().map(|s| p50_ms(s));
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    MeasuredLine {
        measure: name.into(),
        fresh_p50_ms: fresh,
        live_p50_ms: live,
        aged_p50_ms: aged,
        ratio: ratio(aged, fresh),
        ratio_vs_live: ratio(aged, live),
    }
}

/// One measure, alternating fresh, live and aged `samples` times each (`measure` gets the
/// home's index and the sample's).
/// How many times `samples` a measure taken inside this process (no process start, a fraction
/// of a millisecond each) samples per home.
const IN_PROCESS_SAMPLES: usize = 25;

fn side_by_side(
    name: &str,
    samples: usize,
    mut measure: impl FnMut(usize, usize) -> io::Result<Duration>,
) -> io::Result<MeasuredLine> {
    let mut taken: [Vec<Duration>; 3] = Default::default();
    for i in 0..samples.max(1) {
        for (slot, samples) in taken.iter_mut().enumerate() {
            samples.push(measure(slot, i)?);
        }
    }
    Ok(measured(name, taken))
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

/// One reservation of one tool call on a budget limit, recorded (fsynced) and settled, by
/// `journal` — a new gateway's first (a fresh reader) or a running one's next.
fn reserve_once(journal: &stopline_store::spend::SpendJournal) -> io::Result<Duration> {
    let one: stopline_core::budget::Budgets =
        [(stopline_core::budget::BudgetKind::ToolCalls, 1.0)].into();
    let started = Instant::now();
    let lock = journal.lock().map_err(other)?;
    let id = lock
        .reserved(&[SPEND_ACCOUNT.to_string()], &one)
        .map_err(other)?;
    drop(lock);
    let elapsed = started.elapsed();
    journal.settled(&id, &one).map_err(other)?;
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
fn idle_gateway(exe: &Path, home: &Path, window: Duration) -> io::Result<IdleSample> {
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
        Ok(IdleSample {
            cpu_pct,
            rss_mb: rss_kb as f64 / 1024.0,
        })
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
) -> io::Result<HistoryReport> {
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
) -> io::Result<HistoryReport> {
    let fresh = base.join("fresh");
    let live = base.join("live");
    let aged = base.join("aged");
    for home in [&fresh, &live, &aged] {
        prepare(home)?;
    }
    make_live(&live)?;
    let building = Instant::now();
    let spend_journals = age(&aged, sizes)?;
    let build_s = building.elapsed().as_secs_f64();
    let disk_bytes = du(&aged);
    let homes = [fresh.as_path(), live.as_path(), aged.as_path()];
    // The idle gateways first, as a deployment's gateway starts in front of its home: its
    // upkeep snapshots the journals the earlier, gone gateways left.
    let idle = homes
        .iter()
        .map(|home| idle_gateway(exe, home, window))
        .collect::<io::Result<Vec<IdleSample>>>()?;
    let mut runs = Vec::new();
    runs.push(side_by_side("check", samples, |slot, _| {
        run_binary(
            exe,
            homes[slot],
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
    runs.push(side_by_side("status", samples, |slot, _| {
        run_binary(exe, homes[slot], &["status"])
    })?);
    let (mut engaged, mut disengaged): ([Vec<Duration>; 3], [Vec<Duration>; 3]) =
        Default::default();
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
            engaged[slot].push(e);
            disengaged[slot].push(d);
        }
    }
    runs.push(measured("engage", engaged));
    runs.push(measured("disengage", disengaged));
    let holders: Vec<Arc<ViewHolder>> = homes
        .iter()
        .map(|home| Arc::new(ViewHolder::new(Store::open(*home), Duration::from_secs(1))))
        .collect();
    // A reload takes about a tenth of a millisecond in this process: a handful of samples of it
    // measure the scheduler, not the reload, so it takes `IN_PROCESS_SAMPLES` times as many.
    runs.push(side_by_side(
        "gateway_reload",
        samples * IN_PROCESS_SAMPLES,
        |slot, _| {
            let started = Instant::now();
            holders[slot].refresh_full();
            Ok(started.elapsed())
        },
    )?);
    let stop = Arc::new(AtomicBool::new(false));
    for view in &holders {
        stopline_gateway::spawn_watcher(view.store().clone(), view.clone(), stop.clone());
    }
    std::thread::sleep(Duration::from_millis(200));
    let stores: Vec<Store> = homes.iter().map(|h| Store::open(*h)).collect();
    runs.push(side_by_side("engage_to_refusal", samples, |slot, i| {
        engage_to_refusal(&holders[slot], &stores[slot], i)
    })?);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (plain, loaded) = (base.join("plain"), base.join("loaded"));
    for home in [&plain, &loaded] {
        prepare(home)?;
    }
    let authority = crate::authority::authority_cost(
        exe,
        &plain,
        &loaded,
        stopline_token::MAX_LABELS,
        sizes.revocations,
        samples,
        samples * IN_PROCESS_SAMPLES,
    )?;
    // A reservation on a budget limit: a new gateway's first (its journal opened afresh each
    // time, so it folds every other writer's spending), then a running gateway's next.
    runs.push(side_by_side("spend_reserve_fresh", samples, |slot, _| {
        let journal = stores[slot].spend().journal("bench").map_err(other)?;
        reserve_once(&journal)
    })?);
    let running = stores
        .iter()
        .map(|s| s.spend().journal("bench-running").map_err(other))
        .collect::<io::Result<Vec<_>>>()?;
    for journal in &running {
        reserve_once(journal)?;
    }
    runs.push(side_by_side("spend_reserve", samples, |slot, _| {
        reserve_once(&running[slot])
    })?);
    // The drill gate of `stopline run` (and `GET /v1/drills`), beside the whole read it made
    // before the drill index.
    runs.push(side_by_side("drill_gate", samples, |slot, _| {
        drill_gate(&stores[slot])
    })?);
    runs.push(side_by_side("evidence_whole_read", samples, |slot, _| {
        evidence_whole_read(&stores[slot])
    })?);
    Ok(HistoryReport {
        aged: AgedHome {
            operations: sizes.operations,
            cycles: sizes.cycles,
            evidence: sizes.evidence,
            drills: (0..sizes.evidence)
                .filter(|i| is_drill_at(*i, sizes.evidence))
                .count(),
            runs: sizes.runs,
            disk_mb: disk_bytes as f64 / 1048576.0,
            build_s,
            spend_journals,
            spend_reservations: spend_reservations(sizes),
        },
        live: LiveHome {
            unresolved_operations: UNRESOLVED_WRITERS,
            spend_in_doubt: UNRESOLVED_WRITERS,
        },
        samples: samples.max(1),
        reload_samples: samples.max(1) * IN_PROCESS_SAMPLES,
        runs,
        idle_gateway: IdleGateway {
            cpu_pct: idle[AGED].cpu_pct,
            rss_mb: idle[AGED].rss_mb,
            window_s: window.as_secs_f64(),
            fresh_cpu_pct: idle[FRESH].cpu_pct,
            fresh_rss_mb: idle[FRESH].rss_mb,
            live_cpu_pct: idle[LIVE].cpu_pct,
            live_rss_mb: idle[LIVE].rss_mb,
        },
        authority,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The live home and the aged home carry the same live state (so `ratio_vs_live` is the
    /// history's cost alone): the same unresolved model requests of the same gone gateways, and
    /// the aged home's history is all resolved.
    #[test]
    fn the_live_home_has_the_aged_homes_live_state_and_no_history() {
        let base = std::env::temp_dir().join(format!(
            "stopline-history-live-{}-{}",
            std::process::id(),
            SystemEnv.random_hex(4)
        ));
        let (live, aged) = (base.join("live"), base.join("aged"));
        for home in [&live, &aged] {
            prepare(home).expect("prepare");
        }
        make_live(&live).expect("live");
        let sizes = HistorySizes {
            operations: 101,
            cycles: 2,
            runs: 3,
            evidence: 2,
            revocations: 0,
        };
        age(&aged, sizes).expect("aged");
        // The finished runs are under runs/, none of them in the live-run index.
        let aged_store = Store::open(&aged);
        assert_eq!(
            aged_store.runs().live_runs().expect("index"),
            Some(Vec::new())
        );
        assert!(aged_store.runs().live_worker_registrations().is_empty());
        assert_eq!(
            std::fs::read_dir(aged.join("runs")).expect("runs").count(),
            3
        );
        let unresolved = |home: &Path| {
            let census = Store::open(home).ops().census();
            assert!(census.errors.is_empty(), "{:?}", census.errors);
            let mut found: Vec<(String, String)> = census
                .entries()
                .map(|e| {
                    (
                        e.operation.target.clone(),
                        e.operation.agent.clone().unwrap_or_default(),
                    )
                })
                .collect();
            found.sort();
            found
        };
        let (in_live, in_aged) = (unresolved(&live), unresolved(&aged));
        assert_eq!(in_live.len(), UNRESOLVED_WRITERS, "{in_live:?}");
        assert!(in_live.iter().all(|(t, _)| t == "model:bench-model"));
        assert_eq!(in_live, in_aged);
        let (all_live, _) = Store::open(&live).ops().all();
        let (all_aged, _) = Store::open(&aged).ops().all();
        assert_eq!(all_live.len(), UNRESOLVED_WRITERS);
        assert_eq!(all_aged.len(), sizes.operations);
        let _ = std::fs::remove_dir_all(&base);
    }
}
