//! The checks `stopline run` makes before anything is recorded or started: no latch covers the
//! run, the harness version's drills allow it, and the agent will not run as the caller's uid
//! unless `--unconfined` says so.
//!
//! Every check fails closed: a control state with faults refuses with the fault's code, and an
//! evidence log (or drill index) that cannot be verified refuses with `drill_required`, because
//! "no failed drill" cannot be proven from it. Nothing here writes, but for the drill index an
//! older home gets once (`Evidence::drills`).

use stopline_control::context::Context;
use stopline_core::{ActiveLatch, Refusal, RefusalCode, Subject};
use stopline_supervisor::{UidError, UidLease, UidRange, UserIdentity};

/// The schema (and evidence kind) of a drill record.
pub use stopline_store::evidence::drills::DRILL_SCHEMA;

/// Refuse while a latch covers `subject`, or while the control state cannot be trusted: the
/// plane's view (with `--control etcd://…`, the etcd latches merged with this host's own; an
/// unreachable plane refuses the start with `distributed_unavailable`).
pub fn no_covering_latch(ctx: &Context, subject: &Subject) -> Result<(), Refusal> {
    let view = ctx.plane.load_view();
    if let Some(fault) = view.faults.first() {
        return Err(fault.clone());
    }
    let covering: Vec<&ActiveLatch> = view.covering(subject).collect();
    if covering.is_empty() {
        return Ok(());
    }
    let named: Vec<String> = covering
        .iter()
        .map(|latch| format!("{} ({} at {})", latch.file, latch.scope, latch.level))
        .collect();
    Err(Refusal::new(
        RefusalCode::RunContained,
        format!("a latch covers this run: {}", named.join(", ")),
    ))
}

/// Refuse (`drill_required`) when the last drill of the version failed, and, with
/// `require_drill`, when none passed. Reads the drill index's summary
/// (`Evidence::drill_summary`, its recent records skipped unread): the evidence log's head, its
/// newest line and `evidence/drills.json`, never the history (an older home's log is read
/// whole once, to build the index).
pub fn drills_allow(
    ctx: &Context,
    harness_version: &str,
    require_drill: bool,
) -> Result<(), Refusal> {
    let refuse = |message: String| Refusal::new(RefusalCode::DrillRequired, message);
    let index = ctx.store.evidence().drill_summary().map_err(|fault| {
        refuse(format!(
            "the evidence log cannot be verified ({fault}), so the drills of {harness_version:?} are unknown"
        ))
    })?;
    let history = index.history(harness_version);
    if history.last_passed == Some(false) {
        return Err(refuse(format!(
            "the last drill of harness version {harness_version:?} failed; run a passing drill first"
        )));
    }
    if require_drill && !history.any_passed {
        return Err(refuse(format!(
            "the policy card requires a passing drill of harness version {harness_version:?} and none is recorded"
        )));
    }
    Ok(())
}

/// The identity the agent runs as and the lease that keeps its uid to this run.
pub struct Identity {
    /// The resolved user; `None` for `--unconfined`.
    pub user: Option<UserIdentity>,
    /// The uid held for this run (docs/reference.md §6: one uid per live agent).
    pub lease: Option<UidLease>,
}

fn uid_refusal(error: UidError) -> Refusal {
    match error {
        UidError::InUse { .. } | UidError::Exhausted { .. } => {
            Refusal::new(RefusalCode::UidInUse, error.to_string())
        }
        other => Refusal::new(RefusalCode::ControlIo, other.to_string()),
    }
}

/// The configured `[run] uid_range`, or the default.
pub fn uid_range(ctx: &Context) -> Result<UidRange, Refusal> {
    match &ctx.config.run.uid_range {
        None => Ok(stopline_supervisor::uid::DEFAULT_UID_RANGE),
        Some(text) => UidRange::parse(text)
            .map_err(|why| Refusal::new(RefusalCode::BadRequest, format!("[run] {why}"))),
    }
}

/// Choose the agent's identity: `--unconfined` runs as the caller; `--user auto` (the default)
/// leases a fresh uid from `[run] uid_range` (root only); `--user NAME` resolves the user and
/// leases its uid, refused `uid_in_use` while another agent or any other process runs under it.
/// `auto_home` is the home an anonymous uid gets; `share` the paths the run maps in (a fresh uid
/// owning files there is not leased, docs/reference.md §6).
pub fn choose_identity(
    ctx: &Context,
    user: Option<&str>,
    unconfined: bool,
    auto_home: &std::path::Path,
    share: &[std::path::PathBuf],
) -> Result<Identity, Refusal> {
    match (user, unconfined) {
        (None, true) => Ok(Identity {
            user: None,
            lease: None,
        }),
        (Some(_), true) => Err(Refusal::new(
            RefusalCode::BadRequest,
            "give at most one of --user USER or --unconfined",
        )),
        (None | Some("auto"), false) => {
            if !rustix::process::geteuid().is_root() {
                return Err(Refusal::new(
                    RefusalCode::BadRequest,
                    "--user auto (the default) starts the agent under a fresh uid and needs root; run as root, give --user NAME, or --unconfined to run it as yourself",
                ));
            }
            let lease = UidLease::fresh_sharing(uid_range(ctx)?, share).map_err(uid_refusal)?;
            let user = UserIdentity::anonymous(lease.uid(), auto_home.to_owned());
            Ok(Identity {
                user: Some(user),
                lease: Some(lease),
            })
        }
        (Some(number), false) if number.bytes().all(|b| b.is_ascii_digit()) => {
            // A bare uid needs no passwd entry, like `--user auto`.
            let uid: u32 = number
                .parse()
                .ok()
                .filter(|uid| *uid > 0 && *uid < u32::MAX)
                .ok_or_else(|| {
                    Refusal::new(
                        RefusalCode::BadRequest,
                        format!("--user {number}: not a uid"),
                    )
                })?;
            let user = UserIdentity::anonymous(uid, auto_home.to_owned());
            if user.is_caller() {
                return Err(Refusal::new(
                    RefusalCode::BadRequest,
                    format!("--user {number} is the caller's own uid; use --unconfined to run it so on purpose"),
                ));
            }
            let lease = UidLease::exact(uid).map_err(|e| {
                let refusal = uid_refusal(e);
                Refusal::new(
                    refusal.code,
                    format!("--user {number}: {}", refusal.message),
                )
            })?;
            Ok(Identity {
                user: Some(user),
                lease: Some(lease),
            })
        }
        (Some(name), false) => {
            let user = confined_identity(name)?;
            let lease = UidLease::exact(user.uid).map_err(|e| {
                let refusal = uid_refusal(e);
                Refusal::new(refusal.code, format!("--user {name}: {}", refusal.message))
            })?;
            Ok(Identity {
                user: Some(user),
                lease: Some(lease),
            })
        }
    }
}

/// Resolve `--user`, refusing the caller's own uid (that would give the agent the owner's access
/// to the control directory; `--unconfined` is the explicit way to do it).
pub fn confined_identity(user: &str) -> Result<UserIdentity, Refusal> {
    let identity = UserIdentity::resolve(user)
        .map_err(|e| Refusal::new(RefusalCode::BadRequest, format!("--user {user}: {e}")))?;
    if identity.is_caller() {
        return Err(Refusal::new(
            RefusalCode::BadRequest,
            format!(
                "--user {user} is the caller's own uid {}: the agent would have the owner's access to the control directory; use --unconfined to run it so on purpose",
                identity.uid
            ),
        ));
    }
    Ok(identity)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map, Value};
    use stopline_store::evidence::drills::DrillHistory;

    /// Read the drill history of `harness_version` from evidence records (oldest first), as the
    /// drill index folds them.
    fn drill_history<'a>(
        entries: impl IntoIterator<Item = &'a Map<String, Value>>,
        harness_version: &str,
    ) -> DrillHistory {
        let mut index = stopline_store::evidence::drills::DrillIndex::default();
        for (seq, body) in (1..).zip(entries) {
            index.fold(&stopline_core::wal::WalEntry {
                seq,
                kind: String::new(),
                body: body.clone(),
                hash: String::new(),
                record: None,
            });
        }
        index.history(harness_version)
    }

    fn check(entries: &[Value], version: &str, expected: (Option<bool>, bool)) {
        let maps = entries.iter().filter_map(Value::as_object);
        let history = drill_history(maps, version);
        assert_eq!(
            (history.last_passed, history.any_passed),
            expected,
            "{entries:?}"
        );
    }

    #[test]
    fn the_last_drill_of_the_version_decides() {
        let drill = |v: &str, pass: Value| json!({"kind": DRILL_SCHEMA, "harness_version": v, "pass": pass});
        check(&[], "h", (None, false));
        check(&[drill("h", json!(true))], "h", (Some(true), true));
        check(
            &[drill("h", json!(true)), drill("h", json!(false))],
            "h",
            (Some(false), true),
        );
        check(
            &[drill("h", json!(false)), drill("other", json!(true))],
            "h",
            (Some(false), false),
        );
        check(&[drill("h", json!("yes"))], "h", (Some(false), false));
        let by_schema =
            json!({"kind": "drill", "schema": DRILL_SCHEMA, "harness_version": "h", "pass": true});
        check(&[by_schema], "h", (Some(true), true));
        check(
            &[json!({"kind": "stop_observation", "harness_version": "h", "pass": false})],
            "h",
            (None, false),
        );
    }

    /// The real filesystem, naming every file it reads.
    #[derive(Default)]
    struct Counting(std::sync::Mutex<Vec<std::path::PathBuf>>);

    impl Counting {
        fn note(&self, path: &std::path::Path) {
            self.0.lock().unwrap().push(path.to_path_buf());
        }
        fn take(&self) -> Vec<String> {
            let mut read: Vec<String> = std::mem::take(&mut *self.0.lock().unwrap())
                .iter()
                .filter(|p| p.parent().is_some_and(|d| d.ends_with("evidence")))
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect();
            read.sort();
            read.dedup();
            read
        }
    }

    impl stopline_store::fs::FsLayer for Counting {
        fn inner(&self) -> &dyn stopline_store::fs::Fs {
            &stopline_store::fs::RealFs
        }
        fn read(&self, path: &std::path::Path) -> std::io::Result<Vec<u8>> {
            let bytes = stopline_store::fs::Fs::read(&stopline_store::fs::RealFs, path)?;
            self.note(path);
            Ok(bytes)
        }
        fn read_from(&self, path: &std::path::Path, offset: u64) -> std::io::Result<Vec<u8>> {
            let bytes =
                stopline_store::fs::Fs::read_from(&stopline_store::fs::RealFs, path, offset)?;
            self.note(path);
            Ok(bytes)
        }
        fn read_from_identified(
            &self,
            path: &std::path::Path,
            offset: u64,
        ) -> std::io::Result<(Vec<u8>, Option<stopline_store::fs::FileId>)> {
            let read = stopline_store::fs::Fs::read_from_identified(
                &stopline_store::fs::RealFs,
                path,
                offset,
            )?;
            self.note(path);
            Ok(read)
        }
        fn identify(
            &self,
            path: &std::path::Path,
        ) -> std::io::Result<Option<stopline_store::fs::FileId>> {
            let id = stopline_store::fs::Fs::identify(&stopline_store::fs::RealFs, path)?;
            self.note(path);
            Ok(id)
        }
    }

    /// The drill gate reads the evidence log's head, its newest segment and the drill
    /// index, never an older segment (before, it read every one: on 12 segments of drills it
    /// read all 12).
    #[test]
    fn the_drill_gate_opens_no_evidence_segment_but_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let counting = std::sync::Arc::new(Counting::default());
        let store = stopline_store::Store::with_io(
            dir.path().join("home"),
            counting.clone(),
            std::sync::Arc::new(stopline_store::env::SystemEnv),
        );
        let mut config = stopline_control::config::Config::default();
        config.retention.evidence_segment_records = std::num::NonZeroU64::new(3).unwrap();
        let ctx = Context::new(store, config);
        for n in 1..=36u64 {
            let (version, pass) = if n % 2 == 0 {
                ("h", n != 36)
            } else {
                ("g", true)
            };
            let record =
                json!({"schema": DRILL_SCHEMA, "harness_version": version, "pass": pass, "n": n});
            ctx.store
                .evidence()
                .append(DRILL_SCHEMA, record.as_object().unwrap().clone())
                .unwrap();
        }
        counting.take();
        let refused = drills_allow(&ctx, "h", false).unwrap_err();
        assert_eq!(refused.code, RefusalCode::DrillRequired);
        assert!(refused.message.contains("failed"), "{}", refused.message);
        assert_eq!(
            counting.take(),
            ["drills.json", "head.json", "log-000000000034.jsonl"]
        );
        drills_allow(&ctx, "g", true).unwrap();
        assert_eq!(
            counting.take(),
            ["drills.json", "head.json", "log-000000000034.jsonl"]
        );
    }
}
