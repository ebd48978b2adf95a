//! Repair on the owner console (docs/reference.md §5): a torn WAL tail closes every gate until the owner
//! repairs it, keeping the old bytes as evidence; a WAL broken anywhere else is refused and left
//! exactly as it was. Gates never repair.

use super::{case, Case};
use crate::conformance::sandbox::Sandbox;
use crate::conformance::steps::{allowed, blocked, refused, OPERATOR};
use crate::conformance::{ensure, harness, Verdict};

pub const CASES: &[Case] = &[
    case(
        "repair_truncates_a_torn_tail_keeping_evidence",
        "a torn WAL closes the gates (control_wal_corrupt); repair is refused off the console, and on it truncates the tail, rebuilds epoch.json and keeps the old bytes",
        repair_torn_tail,
    ),
    case(
        "repair_refuses_a_wal_broken_midway",
        "repair refuses (repair_refused) a WAL broken anywhere but its unterminated tail and leaves it untouched",
        repair_refuses_broken_midway,
    ),
];

fn repair_torn_tail(s: &Sandbox) -> Verdict {
    s.engage("agent:a", "emergency")?;
    let token = s.token(&["--agent", "b"])?;
    let wal = s.file("breakglass.wal.jsonl");
    let mut bytes = std::fs::read(&wal).map_err(harness)?;
    bytes.extend_from_slice(b"{\"seq\":3,\"pr");
    std::fs::write(&wal, &bytes).map_err(harness)?;
    std::fs::remove_file(s.file("epoch.json")).map_err(harness)?;
    blocked(&s.check_token(&token)?, "control_wal_corrupt", "a torn WAL")?;
    let args = [
        "recover",
        "repair",
        "--reason",
        "torn tail after a crash",
        "--by",
        OPERATOR,
    ];
    refused(
        &s.run(&args)?,
        "owner_control_required",
        "repair off the console",
    )?;
    let out = s.console(&args)?;
    let receipt = out.json();
    ensure(
        out.code == 0
            && receipt["wal_truncated_bytes"].as_u64() > Some(0)
            && receipt["epoch_rebuilt"] == true,
        || format!("repair: {}", out.brief()),
    )?;
    ensure(s.entries("recovery-evidence").len() == 1, || {
        format!("evidence kept: {:?}", s.entries("recovery-evidence"))
    })?;
    allowed(&s.check_token(&token)?, "after repair")?;
    Ok(format!("gate closed control_wal_corrupt; repair refused off console; on console truncated {} bytes, rebuilt epoch, kept {:?}", receipt["wal_truncated_bytes"], s.entries("recovery-evidence")))
}

fn repair_refuses_broken_midway(s: &Sandbox) -> Verdict {
    s.engage("agent:a", "emergency")?;
    s.engage("agent:b", "emergency")?;
    let wal = s.file("breakglass.wal.jsonl");
    let text = std::fs::read_to_string(&wal).map_err(harness)?;
    let broken = text.replacen("latch_engaged", "latch_engagef", 1);
    std::fs::write(&wal, &broken).map_err(harness)?;
    let out = s.console(&["recover", "repair", "--reason", "x", "--by", OPERATOR])?;
    refused(&out, "repair_refused", "a WAL broken in the middle")?;
    let after = std::fs::read_to_string(&wal).map_err(harness)?;
    ensure(after == broken, || "repair changed a WAL it refused".into())?;
    Ok("WAL altered in its first record: repair_refused; bytes untouched".into())
}
