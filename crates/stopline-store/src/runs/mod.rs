//! `runs/`: the policy card and run record of every supervised run, and its worker
//! registrations (`runs/<run_id>/policy-card.json`, `runs/<run_id>/run.json`,
//! `runs/<run_id>/workers/<agent>.json`).
//!
//! Every file is written by atomic replacement (fresh temporary file, fsync, rename, fsync of the
//! directory), and a newly created directory is made durable by an fsync of its parent, so a
//! registration that was reported written survives a crash and a reader never sees a torn one.
//! The policy card is recorded before the run starts: `stopline run` calls
//! [`Runs::record_run`] before it mints a token or starts a process. This module never
//! interprets what it stores; the supervisor and `status` give the fields their meaning.

use crate::error::{IoContext, StoreError};
use crate::Store;
use serde_json::Value;
use std::path::{Path, PathBuf};
use stopline_core::run_record::RunRecord;
use stopline_core::worker::WorkerRegistration;
use stopline_core::{Name, Refusal, RefusalCode};

pub mod live;

impl Store {
    /// One registration file, read and parsed (a missing or empty one is corrupt: it was
    /// listed; so is one that is not a registration).
    pub(crate) fn registration_at(&self, path: &Path) -> Result<WorkerRegistration, StoreError> {
        let bytes = self.read_optional(path)?.unwrap_or_default();
        serde_json::from_slice(&bytes).map_err(|e| {
            StoreError::corrupt(
                RefusalCode::ControlStateCorrupt,
                format!("{}: {e}", path.display()),
            )
        })
    }

    /// A JSON file of a run parsed as `T`: `None` when it is missing, corrupt when it does not
    /// parse.
    fn json_at<T: serde::de::DeserializeOwned>(
        &self,
        path: &Path,
    ) -> Result<Option<T>, StoreError> {
        match self.read_optional(path)? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                StoreError::corrupt(
                    RefusalCode::ControlStateCorrupt,
                    format!("{}: {e}", path.display()),
                )
            }),
        }
    }

    /// Create `dir` (and its parents under the home) and fsync each parent whose entries
    /// changed, so the new directory entries survive a crash.
    pub(crate) fn ensure_durable_dir(&self, dir: &Path) -> Result<(), StoreError> {
        let existed = self
            .fs
            .exists(dir)
            .context(|| format!("checking {}", dir.display()))?;
        if existed {
            return Ok(());
        }
        self.ensure_dirs(&[&self.layout.runs()])?;
        self.fs
            .create_dir_all(dir, "runs.mkdir")
            .context(|| format!("creating {}", dir.display()))?;
        let mut current = dir;
        while let Some(parent) = current.parent() {
            self.fs
                .sync_dir(parent, "runs.dirsync")
                .context(|| format!("syncing {}", parent.display()))?;
            if parent == self.layout.home() || !parent.starts_with(self.layout.home()) {
                break;
            }
            current = parent;
        }
        Ok(())
    }

    pub(crate) fn replace_json(
        &self,
        path: &Path,
        value: &Value,
        fp: &str,
    ) -> Result<(), StoreError> {
        let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| {
            StoreError::Refused(Refusal::new(RefusalCode::BadRequest, e.to_string()))
        })?;
        bytes.push(b'\n');
        self.replace_atomic(path, &bytes, fp)
    }
}

/// The runs of one control directory ([`Store::runs`]): their policy cards, run records and
/// worker registrations under `runs/`, and the live-run index `runs.live/` ([`live`]).
#[derive(Debug, Clone, Copy)]
pub struct Runs<'a> {
    store: &'a Store,
}

impl Store {
    /// The runs of this control directory.
    pub fn runs(&self) -> Runs<'_> {
        Runs { store: self }
    }
}

impl Runs<'_> {
    /// `runs/<run_id>/`. The id must be a valid name, so it is one path component.
    pub fn run_dir(&self, run_id: &str) -> Result<PathBuf, StoreError> {
        let name = Name::parse(run_id).map_err(StoreError::Refused)?;
        Ok(self.store.layout.runs().join(name.as_str()))
    }

    /// Record a run before it starts: its policy card (as validated JSON) and its run record.
    /// The card is written first, so a run record never exists without its card.
    pub fn record_run(
        &self,
        run_id: &str,
        card: &Value,
        record: &RunRecord,
    ) -> Result<(), StoreError> {
        let dir = self.run_dir(run_id)?;
        self.store.ensure_durable_dir(&dir)?;
        self.store
            .replace_json(&dir.join("policy-card.json"), card, "runs.card")?;
        self.store
            .replace_json(&dir.join("run.json"), &record.to_json(), "runs.record")
    }

    /// Replace the run record (for example with how the run ended).
    pub fn update_run_record(&self, run_id: &str, record: &RunRecord) -> Result<(), StoreError> {
        let dir = self.run_dir(run_id)?;
        self.store.ensure_durable_dir(&dir)?;
        self.store
            .replace_json(&dir.join("run.json"), &record.to_json(), "runs.record")
    }

    /// Write (or replace) the registration of one worker, `runs/<run_id>/workers/<agent>.json`
    /// (through `Value`, so its keys are sorted as they have always been).
    pub fn register_worker(
        &self,
        run_id: &str,
        agent: &str,
        registration: &WorkerRegistration,
    ) -> Result<(), StoreError> {
        let agent = Name::parse(agent).map_err(StoreError::Refused)?;
        let workers = self.run_dir(run_id)?.join("workers");
        self.store.ensure_durable_dir(&workers)?;
        let path = workers.join(format!("{}.json", agent.as_str()));
        let value = serde_json::to_value(registration).map_err(|e| {
            StoreError::Refused(Refusal::new(RefusalCode::BadRequest, e.to_string()))
        })?;
        self.store.replace_json(&path, &value, "runs.worker")
    }

    /// The policy card a run was started with (`runs/<run>/policy-card.json`), `None` when the
    /// run has none.
    pub fn run_card(&self, run_id: &str) -> Result<Option<Value>, StoreError> {
        let path = self.run_dir(run_id)?.join("policy-card.json");
        self.store.json_at(&path)
    }

    /// The registration of one worker, `None` when there is none.
    pub fn worker_registration(
        &self,
        run_id: &str,
        agent: &str,
    ) -> Result<Option<WorkerRegistration>, StoreError> {
        let agent = Name::parse(agent).map_err(StoreError::Refused)?;
        let path = self
            .run_dir(run_id)?
            .join("workers")
            .join(format!("{}.json", agent.as_str()));
        self.store.json_at(&path)
    }

    /// Every worker registration under `runs/*/workers/*.json`, in name order: the whole
    /// history. Readers of what is live use [`Runs::live_worker_registrations`], which reads
    /// this only on a home without a trusted `runs.live/` index. An entry that
    /// cannot be read or parsed is returned as an error beside the others, never dropped: the
    /// caller (an engage containing covered groups) must know what it could not look at.
    pub fn worker_registrations(&self) -> Vec<Result<WorkerRegistration, StoreError>> {
        let runs = self.store.layout.runs();
        let run_names = match self.store.fs.read_dir(&runs) {
            Ok(names) => names,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(error) => return vec![Err(error).context(|| format!("listing {}", runs.display()))],
        };
        let mut found = Vec::new();
        for run in run_names {
            let workers = runs.join(&run).join("workers");
            let names = match self.store.fs.read_dir(&workers) {
                Ok(names) => names,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => {
                    found.push(Err(error).context(|| format!("listing {}", workers.display())));
                    continue;
                }
            };
            for name in names.into_iter().filter(|n| n.ends_with(".json")) {
                found.push(self.store.registration_at(&workers.join(&name)));
            }
        }
        found
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A run record with every begun field, for tests of what the store does with it.
    pub(crate) fn stand_in_record(run: &str) -> RunRecord {
        RunRecord::begun(stopline_core::run_record::Begun {
            run_id: run.into(),
            agent: "a".into(),
            harness_version: "h".into(),
            command: vec!["true".into()],
            project: "/p".into(),
            user: None,
            uid: None,
            unconfined: true,
            net: "host".into(),
            gateway: stopline_core::run_record::GatewayRecord {
                url: "http://127.0.0.1:1".into(),
                addr: "127.0.0.1:1".into(),
                config_sha256: None,
                config_hash_source: "unknown".into(),
            },
            gateway_config_sha256: None,
            supervisor_pid: 1,
            started_at: "2026-12-07T00:00:00.000Z".into(),
        })
    }

    #[test]
    fn run_records_and_registrations_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"));
        let card = serde_json::json!({"schema": "policy-card.v1", "run_id": "r1"});
        store
            .runs()
            .record_run("r1", &card, &tests::stand_in_record("r1"))
            .unwrap();
        let home = dir.path().join("home/runs/r1");
        assert!(home.join("policy-card.json").exists());
        assert!(home.join("run.json").exists());
        assert_eq!(store.runs().worker_registration("r1", "a").unwrap(), None);
        let record =
            WorkerRegistration::new("r1", "a", stopline_core::worker::WorkerState::Running);
        store.runs().register_worker("r1", "a", &record).unwrap();
        assert_eq!(
            store.runs().worker_registration("r1", "a").unwrap(),
            Some(record)
        );
    }

    #[test]
    fn names_that_are_not_one_component_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"));
        assert!(store.runs().run_dir("../x").is_err());
        assert!(store
            .runs()
            .register_worker(
                "r1",
                "../../etc",
                &WorkerRegistration::new("r1", "x", stopline_core::worker::WorkerState::Running)
            )
            .is_err());
    }
}
