//! `runs.live/`: the index of supervised workers that may be live, so that `status`, an
//! engage's reach and the owner console read what is live, never every run that ever ran.
//!
//! One entry per supervised worker instance, `runs.live/<run>@<agent>@<supervisor pid>@<nonce>.json`
//! (`@` is in no valid name, so the name alone says whose entry it is even when its body cannot
//! be read). The rules:
//!
//! - **Written before the run exists.** [`Runs::begin_run`](super::Runs::begin_run) creates the entry (create-new,
//!   fsync, fsync of `runs.live/`) before the policy card and run record, and the supervisor
//!   starts nothing before both returned: a worker that may be running always has its entry.
//! - **Removed only when nothing of it is live.** [`Runs::end_run`](crate::runs::Runs::end_run) (the supervisor, after its
//!   worker's last registration) and [`Runs::retire_finished_live_runs`](crate::runs::Runs::retire_finished_live_runs) (a census) remove an
//!   entry only when the registration *naming that entry* (`live_entry`) says `quiescent` or
//!   `exited`; a registration of another instance of the same run and agent never counts. A
//!   census that proved a crashed supervisor's worker gone (supervisor and group both gone)
//!   uses [`Runs::remove_live_run`](crate::runs::Runs::remove_live_run).
//! - **Read fail-closed.** A home with no `runs.live/complete` marker (an older home, or one
//!   whose index is being built) is read whole, as before the index. An entry whose name does
//!   not parse makes the read whole; one whose body cannot be read makes its run's workers read
//!   whole; both also return an error beside the registrations, so a census knows it has a
//!   hole. An entry whose registration does not name it (not yet written, or another
//!   instance's) stands for a worker `starting`, with the entry's cgroup and project.
//! - **Built once for an older home.** The first [`Runs::begin_run`](super::Runs::begin_run) on a home with `runs/` but
//!   no marker indexes every registration that is not finished (legacy entries, which accept a
//!   registration without `live_entry`), then writes the marker: a crash before the marker
//!   leaves the home read whole, and the next run builds the index again.

use crate::error::{IoContext, StoreError};
use crate::runs::Runs;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use stopline_core::run_record::RunRecord;
use stopline_core::worker::WorkerRegistration;
use stopline_core::{Name, RefusalCode};

/// The marker that makes `runs.live/` the index readers trust.
pub const COMPLETE: &str = "complete";
/// The nonce prefix of an entry built from an older home's registration.
const LEGACY: &str = "legacy";

/// A worker instance's entry in `runs.live/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveRun {
    /// The entry's file name.
    pub file: String,
    /// The run.
    pub run: String,
    /// The agent.
    pub agent: String,
    /// The supervising process named by the entry.
    pub supervisor_pid: u32,
}

impl LiveRun {
    /// Parse an entry's file name, `None` when it is not one.
    pub fn parse(file: &str) -> Option<LiveRun> {
        let stem = file.strip_suffix(".json")?;
        let mut parts = stem.split('@');
        let (run, agent, pid, nonce) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some()
            || nonce.is_empty()
            || !nonce.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return None;
        }
        let run = Name::parse(run).ok().filter(|n| n.as_str() == run)?;
        let agent = Name::parse(agent).ok().filter(|n| n.as_str() == agent)?;
        let supervisor_pid = pid.parse().ok()?;
        Some(LiveRun {
            file: file.to_string(),
            run: run.as_str().to_string(),
            agent: agent.as_str().to_string(),
            supervisor_pid,
        })
    }

    /// True for an entry built from an older home's registration.
    pub fn legacy(&self) -> bool {
        self.file
            .rsplit('@')
            .next()
            .is_some_and(|nonce| nonce.starts_with(LEGACY))
    }

    /// True when `registration` is this entry's worker's (it names the entry; for a legacy
    /// entry, it names none).
    pub fn owns(&self, registration: &WorkerRegistration) -> bool {
        match &registration.live_entry {
            Some(file) => *file == self.file,
            None => self.legacy(),
        }
    }
}

/// True when a registration's state says nothing of its worker is running.
pub fn finished(registration: &WorkerRegistration) -> bool {
    registration.finished()
}

/// What a census of `runs.live/` did.
#[derive(Debug, Default, Clone)]
pub struct Retired {
    /// Entries removed.
    pub removed: Vec<String>,
    /// Entries that could not be looked at or removed.
    pub errors: Vec<String>,
}

/// One listing of `runs.live/`: `None` when the index is not trusted (no marker).
pub type LiveListing = Option<Vec<String>>;

impl Runs<'_> {
    /// `runs.live/<file>`.
    fn live_path(&self, file: &str) -> std::path::PathBuf {
        self.store.layout.runs_live().join(file)
    }

    /// Record a run before it starts: its entry in `runs.live/` first (durable), then its policy
    /// card and run record ([`Runs::record_run`](super::Runs::record_run)). `entry` is the entry's body (an object: the
    /// caller puts `project` and the expected `cgroup` in it); the run, agent and supervisor pid
    /// are added. Returns the entry, or `None` when the home has no trusted index and one could
    /// not be built (then every reader reads `runs/` whole, this run included).
    pub fn begin_run(
        &self,
        run_id: &str,
        agent: &str,
        supervisor_pid: u32,
        entry: &Value,
        card: &Value,
        record: &RunRecord,
    ) -> Result<Option<LiveRun>, StoreError> {
        let run = Name::parse(run_id).map_err(StoreError::Refused)?;
        let agent = Name::parse(agent).map_err(StoreError::Refused)?;
        let live = match self.ensure_live_index() {
            Ok(()) => {
                let nonce = self.store.env.random_hex(8);
                let file = format!(
                    "{}@{}@{supervisor_pid}@{nonce}.json",
                    run.as_str(),
                    agent.as_str()
                );
                let mut body = entry.clone();
                if !body.is_object() {
                    body = json!({});
                }
                body["schema"] = "live-run.v1".into();
                body["run"] = run.as_str().into();
                body["agent"] = agent.as_str().into();
                body["supervisor_pid"] = supervisor_pid.into();
                self.write_live_entry(&file, &body, "runs.live.entry")?;
                LiveRun::parse(&file)
            }
            Err(error) => {
                tracing::warn!(%error, "runs.live/ could not be built; runs/ is read whole");
                None
            }
        };
        self.record_run(run.as_str(), card, record)?;
        Ok(live)
    }

    /// Remove the supervisor's own entry once its worker's registration (naming the entry)
    /// says `quiescent` or `exited`, or once no registration names it (the worker never
    /// started). Refused while the registration naming it says anything else.
    pub fn end_run(&self, live: &LiveRun) -> Result<(), StoreError> {
        let registration = self.worker_registration(&live.run, &live.agent)?;
        if let Some(registration) = registration.filter(|r| live.owns(r)) {
            if !finished(&registration) {
                return Err(StoreError::refused(
                    RefusalCode::BadRequest,
                    format!(
                        "{}: the worker is still registered {:?}; its entry stays",
                        live.file,
                        registration.state.as_str()
                    ),
                ));
            }
        }
        self.remove_live_run(&live.file)
    }

    /// Remove `runs.live/<file>` (and fsync the directory). Only for an entry whose worker was
    /// observed finished, or proved gone with its supervisor.
    pub fn remove_live_run(&self, file: &str) -> Result<(), StoreError> {
        let dir = self.store.layout.runs_live();
        let path = dir.join(file);
        match self.store.fs.remove_file(&path, "runs.live.remove") {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(error).context(|| format!("removing {}", path.display())),
        }
        self.store
            .fs
            .sync_dir(&dir, "runs.live.remove.dirsync")
            .context(|| format!("syncing {}", dir.display()))
    }

    /// The entries of a trusted `runs.live/` (the marker left out), `None` when the home has no
    /// trusted index (read `runs/` whole), an error when it cannot be listed.
    pub fn live_runs(&self) -> Result<LiveListing, StoreError> {
        let dir = self.store.layout.runs_live();
        match self.store.fs.read_dir(&dir) {
            Ok(names) if names.iter().any(|n| n == COMPLETE) => {
                Ok(Some(names.into_iter().filter(|n| n != COMPLETE).collect()))
            }
            Ok(_) => Ok(None),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error).context(|| format!("listing {}", dir.display())),
        }
    }

    /// The body of one entry.
    pub fn live_run_body(&self, file: &str) -> Result<Value, StoreError> {
        let path = self.live_path(file);
        let bytes = self.store.read_optional(&path)?.unwrap_or_default();
        serde_json::from_slice::<Value>(&bytes)
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| {
                StoreError::corrupt(
                    RefusalCode::ControlStateCorrupt,
                    format!("{}: not a live-run entry", path.display()),
                )
            })
    }

    /// The worker registrations of what may be live: through `runs.live/` when the home has a
    /// trusted index, else every registration under `runs/` ([`Runs::worker_registrations`](crate::runs::Runs::worker_registrations)).
    /// Same shape as that: an entry or registration that cannot be read is an error beside the
    /// others, and what it hides is read whole (see the module docs).
    pub fn live_worker_registrations(&self) -> Vec<Result<WorkerRegistration, StoreError>> {
        let names = match self.live_runs() {
            Ok(Some(names)) => names,
            Ok(None) => return self.worker_registrations(),
            Err(error) => {
                let mut all = self.worker_registrations();
                all.push(Err(error));
                return all;
            }
        };
        let mut found = Vec::new();
        let mut used: BTreeSet<(String, String)> = BTreeSet::new();
        let mut whole_runs: BTreeSet<String> = BTreeSet::new();
        for name in names {
            let Some(live) = LiveRun::parse(&name) else {
                let mut all = self.worker_registrations();
                all.push(Err(StoreError::corrupt(
                    RefusalCode::ControlStateCorrupt,
                    format!("runs.live/{name}: not an entry name; runs/ read whole"),
                )));
                return all;
            };
            let body = match self.live_run_body(&name) {
                Ok(body) => body,
                Err(error) => {
                    found.push(Err(error));
                    whole_runs.insert(live.run.clone());
                    continue;
                }
            };
            let registration = match self.worker_registration(&live.run, &live.agent) {
                Ok(registration) => registration,
                Err(error) => {
                    found.push(Err(error));
                    None
                }
            };
            let owned = registration.filter(|r| self.owns_registration(&live, r));
            match owned {
                Some(registration) => {
                    if used.insert((live.run.clone(), live.agent.clone())) {
                        found.push(Ok(registration));
                    }
                }
                None => found.push(Ok(starting(&live, &body))),
            }
        }
        for run in whole_runs {
            for registration in self.run_worker_registrations(&run) {
                let key = registration
                    .as_ref()
                    .ok()
                    .map(|r| (r.run.clone(), r.agent.clone()));
                if key.is_none_or(|key| used.insert(key)) {
                    found.push(registration);
                }
            }
        }
        found
    }

    /// The reader's rule of ownership (a planted bug may drop it).
    fn owns_registration(&self, live: &LiveRun, registration: &WorkerRegistration) -> bool {
        #[cfg(feature = "planted-bugs")]
        if self.store.planted == crate::planted::PlantedBug::LiveEntryTrustsAnyRegistration {
            return true;
        }
        live.owns(registration)
    }

    /// A census of `runs.live/` by the store's own rule: remove every entry whose registration
    /// names it and says `quiescent` or `exited`. Reads only the index and the registrations it
    /// names.
    pub fn retire_finished_live_runs(&self) -> Retired {
        let mut retired = Retired::default();
        let names = match self.live_runs() {
            Ok(Some(names)) => names,
            Ok(None) => return retired,
            Err(error) => {
                retired.errors.push(error.to_string());
                return retired;
            }
        };
        for name in names {
            let Some(live) = LiveRun::parse(&name) else {
                retired
                    .errors
                    .push(format!("runs.live/{name}: not an entry name"));
                continue;
            };
            match self.worker_registration(&live.run, &live.agent) {
                Ok(Some(registration))
                    if self.owns_registration(&live, &registration) && finished(&registration) =>
                {
                    match self.remove_live_run(&name) {
                        Ok(()) => retired.removed.push(name),
                        Err(error) => retired.errors.push(error.to_string()),
                    }
                }
                Ok(_) => {}
                Err(error) => retired.errors.push(error.to_string()),
            }
        }
        retired
    }

    /// Every registration of one run, `runs/<run>/workers/*.json`.
    fn run_worker_registrations(&self, run: &str) -> Vec<Result<WorkerRegistration, StoreError>> {
        let workers = match self.run_dir(run) {
            Ok(dir) => dir.join("workers"),
            Err(error) => return vec![Err(error)],
        };
        let names = match self.store.fs.read_dir(&workers) {
            Ok(names) => names,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(error) => {
                return vec![Err(error).context(|| format!("listing {}", workers.display()))]
            }
        };
        names
            .into_iter()
            .filter(|n| n.ends_with(".json"))
            .map(|name| self.store.registration_at(&workers.join(name)))
            .collect()
    }

    /// Make `runs.live/` the trusted index: create it, and on a home that has `runs/` but no
    /// marker, index every registration that is not finished before writing the marker.
    fn ensure_live_index(&self) -> Result<(), StoreError> {
        let dir = self.store.layout.runs_live();
        if self
            .store
            .fs
            .read_dir(&dir)
            .is_ok_and(|names| names.iter().any(|n| n == COMPLETE))
        {
            return Ok(());
        }
        let runs_existed = self
            .store
            .fs
            .exists(&self.store.layout.runs())
            .context(|| format!("checking {}", self.store.layout.runs().display()))?;
        self.store.ensure_dirs(&[])?;
        self.store
            .fs
            .create_dir_all(&dir, "runs.live.mkdir")
            .context(|| format!("creating {}", dir.display()))?;
        self.store
            .fs
            .sync_dir(self.store.layout.home(), "runs.live.mkdir.dirsync")
            .context(|| format!("syncing {}", self.store.layout.home().display()))?;
        #[cfg(feature = "planted-bugs")]
        if self.store.planted == crate::planted::PlantedBug::LiveIndexMarkedFirst {
            self.mark_live_index()?;
        }
        if runs_existed {
            for registration in self.worker_registrations() {
                // A registration that cannot be read cannot be indexed: the index stays
                // untrusted and readers keep reading runs/ whole.
                let registration = registration?;
                if finished(&registration) {
                    continue;
                }
                let (run, agent) = (registration.run.as_str(), registration.agent.as_str());
                let pid = registration.supervisor_pid.unwrap_or(0);
                let file = format!(
                    "{run}@{agent}@{pid}@{LEGACY}{}.json",
                    self.store.env.random_hex(4)
                );
                if LiveRun::parse(&file).is_none() {
                    return Err(StoreError::corrupt(
                        RefusalCode::ControlStateCorrupt,
                        format!("a registration names run {run:?} agent {agent:?}"),
                    ));
                }
                let body = json!({
                    "schema": "live-run.v1", "run": run, "agent": agent,
                    "supervisor_pid": pid, "project": registration.project,
                    "cgroup": registration.cgroup, "legacy": true,
                });
                self.write_live_entry(&file, &body, "runs.live.legacy")?;
            }
        }
        self.mark_live_index()
    }

    /// Write the marker `runs.live/complete` (create-new, fsync, fsync of the directory): from
    /// here on readers trust the index.
    fn mark_live_index(&self) -> Result<(), StoreError> {
        let dir = self.store.layout.runs_live();
        let marker = dir.join(COMPLETE);
        match self.store.fs.write_new(
            &marker,
            b"{\"schema\":\"live-run-index.v1\"}\n",
            "runs.live.complete",
        ) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error).context(|| format!("writing {}", marker.display())),
        }
        self.store
            .fs
            .sync_dir(&dir, "runs.live.complete.dirsync")
            .context(|| format!("syncing {}", dir.display()))
    }

    /// Create one entry durably: create-new, fsync, fsync of `runs.live/`.
    fn write_live_entry(&self, file: &str, body: &Value, fp: &str) -> Result<(), StoreError> {
        let path = self.live_path(file);
        let mut bytes = serde_json::to_vec(body).unwrap_or_default();
        bytes.push(b'\n');
        #[cfg(feature = "planted-bugs")]
        if self.store.planted == crate::planted::PlantedBug::LiveEntryUnsynced {
            return self
                .store
                .fs
                .append(&path, &bytes, false, fp)
                .context(|| format!("writing {}", path.display()));
        }
        self.store
            .fs
            .write_new(&path, &bytes, fp)
            .context(|| format!("writing {}", path.display()))?;
        let dir = self.store.layout.runs_live();
        self.store
            .fs
            .sync_dir(&dir, &format!("{fp}.dirsync"))
            .context(|| format!("syncing {}", dir.display()))
    }
}

/// The registration an entry stands for while no registration names it: a worker `starting`
/// with the entry's project and group.
fn starting(live: &LiveRun, body: &Value) -> WorkerRegistration {
    let text = |field: &str| body.get(field).and_then(Value::as_str).map(str::to_string);
    WorkerRegistration::starting(
        &live.run,
        &live.agent,
        live.supervisor_pid,
        &live.file,
        text("project"),
        text("cgroup").map(std::path::PathBuf::from),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::follow::tests::Counting;
    use crate::Store;
    use std::sync::Arc;

    fn home() -> (tempfile::TempDir, Store, Arc<Counting>) {
        let dir = tempfile::tempdir().unwrap();
        let counting = Arc::new(Counting::default());
        let store = Store::with_io(
            dir.path().join("home"),
            counting.clone(),
            Arc::new(crate::env::SystemEnv),
        );
        (dir, store, counting)
    }

    fn registration(
        live: Option<&LiveRun>,
        run: &str,
        agent: &str,
        state: &str,
    ) -> WorkerRegistration {
        let state = stopline_core::worker::WorkerState::named(state);
        let mut registration = WorkerRegistration::new(run, agent, state);
        registration.live_entry = live.map(|l| l.file.clone());
        if let Some(observed) = registration.observed.as_mut() {
            observed.pid = Some(4_200_002);
        }
        registration
    }

    /// A run of `agent` from start to end through the store, as `stopline run` writes it.
    fn finished_run(store: &Store, run: &str, agent: &str) {
        let live = begin(store, run, agent);
        store
            .runs()
            .register_worker(
                run,
                agent,
                &registration(Some(&live), run, agent, "running"),
            )
            .unwrap();
        store
            .runs()
            .register_worker(run, agent, &registration(Some(&live), run, agent, "exited"))
            .unwrap();
        store.runs().end_run(&live).unwrap();
    }

    fn begin(store: &Store, run: &str, agent: &str) -> LiveRun {
        store
            .runs().begin_run(
                run,
                agent,
                4_200_001,
                &json!({"project": "/p", "cgroup": format!("/sys/fs/cgroup/stopline/run-{run}.{agent}")}),
                &json!({"schema": "policy-card.v1"}),
                &crate::runs::tests::stand_in_record(run),
            )
            .unwrap()
            .expect("an index")
    }

    fn states(found: &[Result<WorkerRegistration, StoreError>]) -> Vec<(String, String)> {
        found
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .map(|r| {
                (
                    format!("{}/{}", r.run, r.agent),
                    r.state.as_str().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn entry_names_parse_only_whole() {
        let live = LiveRun::parse("r1@a.b@42@00ff.json").unwrap();
        assert_eq!(
            (live.run.as_str(), live.agent.as_str(), live.supervisor_pid),
            ("r1", "a.b", 42)
        );
        assert!(!live.legacy());
        assert!(LiveRun::parse("r1@a@42@legacy0a.json").unwrap().legacy());
        for bad in [
            "complete",
            "r1@a@42.json",
            "r1@a@x@00.json",
            "R1@a@1@00.json",
            "../x@a@1@00.json",
            "r1@a@1@0/0.json",
            "r1@a@1@.json",
            "r1@a@1@00@x.json",
        ] {
            assert!(LiveRun::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn finished_runs_are_never_read() {
        let (_dir, store, counting) = home();
        for n in 0..40 {
            finished_run(&store, &format!("old-{n}"), "a");
        }
        let live = begin(&store, "now", "a");
        store
            .runs()
            .register_worker(
                "now",
                "a",
                &registration(Some(&live), "now", "a", "running"),
            )
            .unwrap();
        counting.reset();
        let found = store.runs().live_worker_registrations();
        assert_eq!(
            states(&found),
            [("now/a".to_string(), "running".to_string())]
        );
        for n in 0..40 {
            let path = store.layout.runs().join(format!("old-{n}/workers/a.json"));
            assert_eq!(counting.take(&path), 0, "{} was read", path.display());
        }
        // The whole walk, by contrast, reads every one of them.
        assert_eq!(store.runs().worker_registrations().len(), 41);
        assert!(store.runs().live_runs().unwrap().unwrap().len() == 1);
    }

    #[test]
    fn an_entry_stands_for_a_worker_until_its_own_registration_finishes() {
        let (_dir, store, _) = home();
        // An earlier instance of the same run and agent ended: its registration says exited.
        finished_run(&store, "r1", "a");
        let live = begin(&store, "r1", "a");
        // Not registered yet: the earlier instance's registration must not hide it.
        assert_eq!(
            states(&store.runs().live_worker_registrations()),
            [("r1/a".into(), "starting".into())]
        );
        assert!(store.runs().retire_finished_live_runs().removed.is_empty());
        store
            .runs()
            .register_worker("r1", "a", &registration(Some(&live), "r1", "a", "running"))
            .unwrap();
        assert_eq!(
            states(&store.runs().live_worker_registrations()),
            [("r1/a".into(), "running".into())]
        );
        assert!(
            store.runs().end_run(&live).is_err(),
            "removed while the worker runs"
        );
        assert!(store.runs().retire_finished_live_runs().removed.is_empty());
        store
            .runs()
            .register_worker(
                "r1",
                "a",
                &registration(Some(&live), "r1", "a", "quiescent"),
            )
            .unwrap();
        assert_eq!(
            store.runs().retire_finished_live_runs().removed,
            vec![live.file.clone()]
        );
        assert!(store.runs().live_worker_registrations().is_empty());
        // Ending twice is not an error (the census got there first).
        store.runs().end_run(&live).unwrap();
    }

    #[test]
    fn a_corrupt_entry_fails_closed() {
        let (_dir, store, _) = home();
        finished_run(&store, "old", "a");
        let live = begin(&store, "r1", "a");
        store
            .runs()
            .register_worker("r1", "a", &registration(Some(&live), "r1", "a", "running"))
            .unwrap();
        std::fs::write(store.layout.runs_live().join(&live.file), b"{torn").unwrap();
        let found = store.runs().live_worker_registrations();
        assert!(found.iter().any(Result::is_err), "a hole must be reported");
        assert_eq!(states(&found), [("r1/a".into(), "running".into())]);
        // A name that is no entry's: the whole of runs/ is read, and the hole reported.
        std::fs::write(store.layout.runs_live().join("junk"), b"{}").unwrap();
        let found = store.runs().live_worker_registrations();
        assert!(found.iter().any(Result::is_err));
        let mut seen = states(&found);
        seen.sort();
        assert_eq!(
            seen,
            [
                ("old/a".into(), "exited".into()),
                ("r1/a".into(), "running".into())
            ]
        );
        // An unreadable registration of an entry: a hole, and the entry still stands.
        std::fs::remove_file(store.layout.runs_live().join("junk")).unwrap();
        std::fs::write(store.layout.runs().join("r1/workers/a.json"), b"[").unwrap();
        let found = store.runs().live_worker_registrations();
        assert!(found.iter().any(Result::is_err));
    }

    #[test]
    fn an_older_home_is_read_whole_then_indexed_by_the_first_run() {
        let (_dir, store, _) = home();
        store
            .runs()
            .record_run(
                "old",
                &json!({}),
                &crate::runs::tests::stand_in_record("old"),
            )
            .unwrap();
        store
            .runs()
            .register_worker("old", "a", &registration(None, "old", "a", "exited"))
            .unwrap();
        store
            .runs()
            .record_run(
                "legacy",
                &json!({}),
                &crate::runs::tests::stand_in_record("legacy"),
            )
            .unwrap();
        store
            .runs()
            .register_worker("legacy", "b", &registration(None, "legacy", "b", "running"))
            .unwrap();
        assert_eq!(store.runs().live_runs().unwrap(), None);
        assert_eq!(
            store.runs().live_worker_registrations().len(),
            2,
            "read whole"
        );
        let live = begin(&store, "new", "c");
        let mut seen = states(&store.runs().live_worker_registrations());
        seen.sort();
        assert_eq!(
            seen,
            [
                ("legacy/b".into(), "running".into()),
                ("new/c".into(), "starting".into())
            ]
        );
        store
            .runs()
            .register_worker("legacy", "b", &registration(None, "legacy", "b", "exited"))
            .unwrap();
        assert_eq!(store.runs().retire_finished_live_runs().removed.len(), 1);
        assert_eq!(store.runs().live_runs().unwrap().unwrap(), [live.file]);
    }

    /// A clock and randomness that stand still, so the entry's name is the golden's.
    struct Still;
    impl crate::env::Env for Still {
        fn now_ms(&self) -> i64 {
            1_796_612_909_638
        }
        fn random_hex(&self, bytes: usize) -> String {
            "ab".repeat(bytes)
        }
        fn pid(&self) -> u32 {
            24_077
        }
    }

    fn golden(name: &str) -> String {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../stopline-core/tests/golden")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The entry in `runs.live/` as `stopline run` hands it over (project, expected group,
    /// the supervisor's start time, since when), and the registration that entry stands for
    /// while no registration names it (`starting`, as `status --json` shows it): the goldens'
    /// bytes (docs/reference.md §9).
    #[test]
    fn an_entry_and_the_starting_worker_it_stands_for_are_the_goldens() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::with_io(
            dir.path().join("home"),
            Arc::new(crate::fs::RealFs),
            Arc::new(Still),
        );
        let live = store
            .runs()
            .begin_run(
                "r1",
                "coder",
                24_077,
                &json!({
                    "project": "/home/op/project",
                    "cgroup": "/sys/fs/cgroup/stopline/run-r1.coder",
                    "supervisor_start": 91_234_567,
                    "since": "2026-12-07T03:08:29.638Z",
                }),
                &json!({"schema": "policy-card.v1"}),
                &crate::runs::tests::stand_in_record("r1"),
            )
            .unwrap()
            .unwrap();
        assert_eq!(live.file, "r1@coder@24077@abababababababab.json");
        let entry = std::fs::read_to_string(store.layout.runs_live().join(&live.file)).unwrap();
        assert_eq!(entry, golden("live-run-entry.json"));
        let found = store.runs().live_worker_registrations();
        let [Ok(starting)] = found.as_slice() else {
            panic!("{found:?}")
        };
        let mut text = serde_json::to_string_pretty(starting).unwrap();
        text.push('\n');
        assert_eq!(text, golden("worker-registration-starting.json"));
    }
}
