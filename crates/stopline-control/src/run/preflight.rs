//! The checks `stopline run` makes before anything is recorded or started: no latch covers the
//! run, the harness version's drills allow it, and the agent will not run as the caller's uid
//! unless `--unconfined` says so.
//!
//! Every check fails closed: a control state with faults refuses with the fault's code, and an
//! evidence log that cannot be verified refuses with `drill_required`, because "no failed drill"
//! cannot be proven from it. Nothing here writes.

use crate::context::Context;
use serde_json::{Map, Value};
use stopline_core::{ActiveLatch, Refusal, RefusalCode, Subject};
use stopline_supervisor::{UidError, UidLease, UidRange, UserIdentity};

/// The schema (and evidence kind) of a drill record.
pub const DRILL_SCHEMA: &str = "control-observation.v1";

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

/// What the evidence log says about drills of one harness version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrillHistory {
    /// The `pass` of the last drill of the version, `None` when there was none.
    pub last_passed: Option<bool>,
    /// Whether any drill of the version passed.
    pub any_passed: bool,
}

/// Read the drill history of `harness_version` from evidence entries (oldest first).
pub fn drill_history<'a>(
    entries: impl IntoIterator<Item = &'a Map<String, Value>>,
    harness_version: &str,
) -> DrillHistory {
    let mut history = DrillHistory {
        last_passed: None,
        any_passed: false,
    };
    for body in entries {
        let is_drill = body.get("kind").and_then(Value::as_str) == Some(DRILL_SCHEMA)
            || body.get("schema").and_then(Value::as_str) == Some(DRILL_SCHEMA);
        if !is_drill || body.get("harness_version").and_then(Value::as_str) != Some(harness_version)
        {
            continue;
        }
        // A drill whose `pass` is missing or not a boolean did not pass.
        let passed = body.get("pass").and_then(Value::as_bool) == Some(true);
        history.last_passed = Some(passed);
        history.any_passed |= passed;
    }
    history
}

/// Refuse (`drill_required`) when the last drill of the version failed, and, with
/// `require_drill`, when none passed.
pub fn drills_allow(
    ctx: &Context,
    harness_version: &str,
    require_drill: bool,
) -> Result<(), Refusal> {
    let refuse = |message: String| Refusal::new(RefusalCode::DrillRequired, message);
    let entries = ctx.store.evidence_entries().map_err(|fault| {
        refuse(format!(
            "the evidence log cannot be verified ({fault}), so the drills of {harness_version:?} are unknown"
        ))
    })?;
    if let Some(why) = ctx.store.evidence_anchor_fault(&entries) {
        return Err(refuse(format!(
            "the evidence log cannot be verified ({why}), so the drills of {harness_version:?} are unknown"
        )));
    }
    let history = drill_history(entries.iter().map(|entry| &entry.body), harness_version);
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
    /// The uid held for this run (SPEC §12.3: one uid per live agent).
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
/// `auto_home` is the home an anonymous uid gets.
pub fn choose_identity(
    ctx: &Context,
    user: Option<&str>,
    unconfined: bool,
    auto_home: &std::path::Path,
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
            let lease = UidLease::fresh(uid_range(ctx)?).map_err(uid_refusal)?;
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
    use serde_json::json;

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
}
