//! Every fail-closed read of docs/reference.md §5: whatever cannot be trusted closes every gate, critical
//! work included. Each case starts from a healthy home whose critical token is allowed, damages
//! one thing, and expects the critical token and an unprovable caller both blocked.

use super::{case, Case};
use crate::conformance::sandbox::Sandbox;
use crate::conformance::steps::{allowed, blocked};
use crate::conformance::{ensure, harness, CaseError, Verdict};

pub const CASES: &[Case] = &[
    case("fail_closed_empty_latch", "an empty entry in latches/ is a machine emergency", |s| {
        latch_entry(s, "latch_empty.json", Some(b""))
    }),
    case("fail_closed_malformed_latch", "a malformed latch body is a machine emergency", |s| {
        latch_entry(s, "latch_bad.json", Some(b"{\"kind\":\"breakglass_latch\",\"id\":"))
    }),
    case("fail_closed_unknown_level", "a latch with an unknown level is a machine emergency", |s| {
        let body = br#"{"kind":"breakglass_latch","id":"latch_lv","scope":"agent:x","level":"gentle","by":"a","reason":"r","pid":1,"session":{"bound":null,"tier":"console"},"ts":"2026-01-01T00:00:00Z"}"#;
        latch_entry(s, "latch_lv.json", Some(body))
    }),
    case("fail_closed_unknown_scope_kind", "a latch with an unknown scope kind is a machine emergency", |s| {
        let body = br#"{"kind":"breakglass_latch","id":"latch_sc","scope":"galaxy:far","level":"halt-noncritical","by":"a","reason":"r","pid":1,"session":{"bound":null,"tier":"console"},"ts":"2026-01-01T00:00:00Z"}"#;
        latch_entry(s, "latch_sc.json", Some(body))
    }),
    case("fail_closed_unreadable_latch", "a latch entry that cannot be read (a directory in its place) is a machine emergency", |s| {
        latch_entry(s, "latch_dir.json", None)
    }),
    case("fail_closed_unreadable_latches_dir", "an unreadable latches/ closes every gate (control_state_corrupt)", |s| {
        damage(s, "control_state_corrupt", |s| {
            std::fs::rename(s.file("latches"), s.file("latches.moved")).map_err(harness)?;
            s.write("latches", b"not a directory")
        })
    }),
    case("fail_closed_wal_altered", "a WAL with an altered byte closes every gate (control_wal_corrupt)", |s| {
        damage(s, "control_wal_corrupt", |s| {
            edit(s, "breakglass.wal.jsonl", |text| text.replacen("reason", "Reason", 1))
        })
    }),
    case("fail_closed_wal_torn", "a WAL with a torn last line closes every gate (control_wal_corrupt)", |s| {
        damage(s, "control_wal_corrupt", |s| {
            edit(s, "breakglass.wal.jsonl", |text| format!("{text}{{\"seq\":99,\"prev\":\"00"))
        })
    }),
    case("fail_closed_wal_gap", "a WAL with a gap in its sequence closes every gate (control_wal_corrupt)", |s| {
        damage(s, "control_wal_corrupt", |s| {
            edit(s, "breakglass.wal.jsonl", |text| {
                text.lines().skip(1).map(|l| format!("{l}\n")).collect()
            })
        })
    }),
    case("fail_closed_wal_ahead_of_epoch", "a WAL whose last epoch advance is ahead of epoch.json closes every gate (control_epoch_unconfirmed)", |s| {
        damage(s, "control_epoch_unconfirmed", |s| {
            let before = std::fs::read(s.file("epoch.json")).map_err(harness)?;
            s.engage("agent:third", "emergency")?;
            s.write("epoch.json", &before)
        })
    }),
    case("fail_closed_epoch_corrupt", "a corrupt epoch.json closes every gate (control_epoch_unconfirmed)", |s| {
        damage(s, "control_epoch_unconfirmed", |s| s.write("epoch.json", b"{\"seq\":"))
    }),
    case("fail_closed_epoch_missing", "a missing epoch.json after advances closes every gate (control_epoch_unconfirmed)", |s| {
        damage(s, "control_epoch_unconfirmed", |s| {
            std::fs::remove_file(s.file("epoch.json")).map_err(harness)
        })
    }),
    case("fail_closed_state_corrupt", "a corrupt state.json closes every gate (control_state_corrupt)", |s| {
        damage(s, "control_state_corrupt", |s| s.write("state.json", b"RUNNING, honest"))
    }),
    case("fail_closed_deleted_latch", "a latch the WAL records as engaged whose file was deleted counts as a machine emergency", deleted_latch),
    case("fail_closed_recovery_pending", "state.json at RECOVERY_PENDING closes every gate until a machine recovery ends", |s| {
        damage(s, "break_glass_contained", |s| {
            s.write("state.json", br#"{"state":"RECOVERY_PENDING","by":"operator","reason":"interrupted","since":"2026-01-01T00:00:00Z"}"#)
        })
    }),
    case("empty_home_means_no_emergency", "a control directory that `init` just made declares no emergency: allow, status RUNNING", |s| {
        let init = s.run(&["init"])?;
        ensure(init.code == 0, || format!("init: {}", init.brief()))?;
        allowed(&s.check(&["--class", "noncritical", "--agent", "a"])?, "an empty home")?;
        let status = s.status()?;
        ensure(status["phase"] == "RUNNING", || format!("phase {}", status["phase"]))?;
        Ok("empty home: check allow, status RUNNING".into())
    }),
];

/// A healthy home with a stop on someone else and a critical token allowed before the damage.
fn healthy(s: &Sandbox) -> Result<String, CaseError> {
    s.engage("agent:someone-else", "emergency")?;
    let token = s.token(&["--agent", "monitor-1", "--role", "critical"])?;
    allowed(
        &s.check(&["--class", "critical", "--token", &token])?,
        "critical work before the damage",
    )?;
    Ok(token)
}

/// Damage the home and expect every gate closed with `code`.
fn damage(s: &Sandbox, code: &str, f: impl FnOnce(&Sandbox) -> Result<(), CaseError>) -> Verdict {
    let token = healthy(s)?;
    f(s)?;
    closed(s, &token, code)
}

fn closed(s: &Sandbox, token: &str, code: &str) -> Verdict {
    blocked(
        &s.check(&["--class", "critical", "--token", token])?,
        code,
        "critical work",
    )?;
    let c = s.check(&["--class", "noncritical", "--agent", "anyone"])?;
    ensure(c.0 == 4, || format!("noncritical work passed: {}", c.1))?;
    Ok(format!(
        "critical token: block {code}; unprovable caller: block"
    ))
}

fn edit(s: &Sandbox, rel: &str, f: impl FnOnce(String) -> String) -> Result<(), CaseError> {
    let text = std::fs::read_to_string(s.file(rel)).map_err(harness)?;
    s.write(rel, f(text).as_bytes())
}

/// Drop an entry into latches/ and expect a machine emergency named by status.
fn latch_entry(s: &Sandbox, name: &str, bytes: Option<&[u8]>) -> Verdict {
    let token = healthy(s)?;
    match bytes {
        Some(bytes) => s.write(&format!("latches/{name}"), bytes)?,
        None => std::fs::create_dir_all(s.file("latches").join(name)).map_err(harness)?,
    }
    closed(s, &token, "break_glass_contained")?;
    let status = s.status()?;
    let listed = status["latches"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["file"] == name)
        .cloned()
        .unwrap_or_default();
    ensure(
        listed["scope"] == "machine" && listed["level"] == "emergency",
        || format!("status does not show {name} as a machine emergency: {listed}"),
    )?;
    Ok(format!(
        "{name}: critical work blocked break_glass_contained; status lists it as machine emergency"
    ))
}

fn deleted_latch(s: &Sandbox) -> Verdict {
    let receipt = s.engage("agent:victim", "halt-all")?;
    let token = s.token(&["--agent", "bystander"])?;
    allowed(&s.check_token(&token)?, "before the deletion")?;
    let file = Sandbox::latch_file(&receipt);
    std::fs::remove_file(s.file("latches").join(&file)).map_err(harness)?;
    let c = s.check_token(&token)?;
    ensure(c.0 == 4, || {
        format!("a deleted stop went unnoticed: {}", c.1)
    })?;
    let status = s.status()?;
    let machine = status["latches"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|l| l["file"] == file.as_str() && l["scope"] == "machine");
    ensure(machine, || {
        format!("status does not show {file} as a machine latch")
    })?;
    Ok(format!(
        "{file} deleted: the bystander is blocked; status shows it as a machine latch"
    ))
}
