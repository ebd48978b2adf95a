//! Engage (docs/reference.md §1, §5, §3): what is refused before anything is written, and what a stop
//! leaves on disk when it is accepted — latch first, private, ledgered, coalesced under a flood.

use super::{case, Case};
use crate::conformance::sandbox::Sandbox;
use crate::conformance::steps::refused;
use crate::conformance::{ensure, harness, Verdict};
use std::os::unix::fs::PermissionsExt;

pub const CASES: &[Case] = &[
    case(
        "reason_required",
        "engage with a blank or whitespace-only reason is refused reason_required and writes nothing",
        reason_required,
    ),
    case(
        "scope_invalid",
        "every malformed scope is refused scope_invalid before the control directory is created",
        scope_invalid,
    ),
    case(
        "project_root_unresolvable",
        "a project scope whose root cannot be a directory (a component is a file) is refused project_root_unresolvable and writes nothing",
        project_root_unresolvable,
    ),
    case(
        "level_invalid",
        "an unknown level is refused level_invalid and no latch appears",
        level_invalid,
    ),
    case(
        "engage_is_latch_first_and_private",
        "machine and scoped engages publish a 0600 latch in a 0700 home, record it in the WAL and leave no staging file",
        engage_is_latch_first_and_private,
    ),
    case(
        "engage_flood_is_coalesced_never_refused",
        "repeated engages by one caller within a second coalesce into one latch; another caller still gets its own",
        engage_flood_is_coalesced,
    ),
];

fn reason_required(s: &Sandbox) -> Verdict {
    for reason in ["", "   ", "\t\n"] {
        let out = s.run(&["engage", "--scope", "machine", "--reason", reason])?;
        refused(&out, "reason_required", &format!("reason {reason:?}"))?;
    }
    ensure(!s.home().exists(), || {
        "a refused engage created the control directory".into()
    })?;
    Ok("blank, empty and whitespace reasons: exit 1 reason_required; no home created".into())
}

fn scope_invalid(s: &Sandbox) -> Verdict {
    let long = format!("agent:{}", "a".repeat(65));
    let scopes = [
        "",
        "everything",
        "host:x",
        "agent:",
        "agent:-bad",
        "agent:a b",
        "agent:ünï",
        "run:x/y",
        "project:relative/path",
        "project:",
        long.as_str(),
    ];
    for scope in scopes {
        let out = s.run(&["engage", "--scope", scope, "--reason", "x"])?;
        refused(&out, "scope_invalid", &format!("scope {scope:?}"))?;
        ensure(!s.home().exists(), || {
            format!("scope {scope:?}: the refusal created the control directory")
        })?;
    }
    Ok(format!(
        "{} malformed scopes: each exit 1 scope_invalid; no home created",
        scopes.len()
    ))
}

fn project_root_unresolvable(s: &Sandbox) -> Verdict {
    let file = s.dir().join("a-file");
    std::fs::write(&file, b"not a directory").map_err(harness)?;
    let scope = format!("project:{}/sub", file.display());
    let out = s.run(&["engage", "--scope", &scope, "--reason", "x"])?;
    refused(&out, "project_root_unresolvable", &scope)?;
    ensure(!s.home().exists(), || {
        "the refusal created the control directory".into()
    })?;
    Ok(format!(
        "{scope}: exit 1 project_root_unresolvable; no home created"
    ))
}

fn level_invalid(s: &Sandbox) -> Verdict {
    for level in ["stop-ish", "EMERGENCY!", ""] {
        let out = s.run(&[
            "engage", "--scope", "machine", "--reason", "x", "--level", level,
        ])?;
        refused(&out, "level_invalid", &format!("level {level:?}"))?;
    }
    ensure(s.entries("latches").is_empty(), || {
        format!("latches appeared: {:?}", s.entries("latches"))
    })?;
    Ok("three unknown levels: exit 1 level_invalid; latches/ empty".into())
}

fn engage_is_latch_first_and_private(s: &Sandbox) -> Verdict {
    let machine = s.engage("machine", "emergency")?;
    let agent = s.engage("agent:Worker-1", "halt-all")?;
    let mode = |p: std::path::PathBuf| {
        std::fs::metadata(&p)
            .map(|m| m.permissions().mode() & 0o777)
            .map_err(|e| harness(format!("{}: {e}", p.display())))
    };
    ensure(mode(s.home())? == 0o700, || "the home is not 0700".into())?;
    let wal = std::fs::read_to_string(s.file("breakglass.wal.jsonl")).unwrap_or_default();
    for receipt in [&machine, &agent] {
        let file = Sandbox::latch_file(receipt);
        let path = s.file("latches").join(&file);
        ensure(path.is_file(), || format!("{file} is not in latches/"))?;
        ensure(mode(path)? == 0o600, || format!("{file} is not 0600"))?;
        let id = receipt["latch"]["id"].as_str().unwrap_or("?");
        ensure(
            wal.lines()
                .any(|l| l.contains("\"latch_engaged\"") && l.contains(id)),
            || format!("the WAL has no latch_engaged record of {id}"),
        )?;
    }
    ensure(agent["latch"]["scope"] == "agent:worker-1", || {
        format!("agent names are lowercased: {}", agent["latch"]["scope"])
    })?;
    ensure(s.entries("latches.staging").is_empty(), || {
        format!("staging left behind: {:?}", s.entries("latches.staging"))
    })?;
    ensure(machine["epoch"]["seq"].as_u64() >= Some(1), || {
        format!("an emergency advances the epoch: {}", machine["epoch"])
    })?;
    Ok(format!(
        "2 latches published 0600 in a 0700 home, both ledgered as latch_engaged; staging empty; epoch {}",
        machine["epoch"]
    ))
}

fn engage_flood_is_coalesced(s: &Sandbox) -> Verdict {
    let args = [
        "engage",
        "--scope",
        "agent:flood",
        "--reason",
        "flood",
        "--by",
        "monitor-a",
    ];
    // Each receipt is judged by the binary's own clock (`engaged_at`, the instant its
    // coalescing decision was made), never by how quickly this battery could start processes:
    // under load two runs a second apart rightly make two latches (once the flake "not
    // coalesced" on a receipt that said "coalesced": true — it had coalesced into the second
    // latch, not the first). The engages run one after another, so every earlier latch was
    // published before the next decision; the flood goes on until at least two engages fell
    // within one second of each other (at most 12).
    let mut fresh: Vec<(String, i64)> = Vec::new();
    let mut coalesced = 0;
    for _ in 0..12 {
        let out = s.run(&args)?;
        let receipt = out.json();
        ensure(out.code == 0 && receipt["engaged"] == true, || {
            format!("a flooded engage was refused: {}", out.brief())
        })?;
        let at = rfc3339_ms(receipt["engaged_at"].as_str().unwrap_or_default())
            .ok_or_else(|| harness(format!("no engaged_at in {}", out.stdout)))?;
        let id = receipt["latch"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let within = fresh
            .iter()
            .rev()
            .find(|(_, ts)| (at - ts).abs() < 1000)
            .map(|(id, _)| id.clone());
        match within {
            Some(expected) => {
                ensure(receipt["coalesced"] == true && id == expected, || {
                    format!("an engage {at} ms within one second of {expected} was not coalesced into it: {}", out.stdout)
                })?;
                coalesced += 1;
            }
            None => {
                ensure(receipt["coalesced"] == false, || {
                    format!(
                        "an engage more than a second after every latch was coalesced: {}",
                        out.stdout
                    )
                })?;
                let ts = rfc3339_ms(receipt["latch"]["ts"].as_str().unwrap_or_default())
                    .ok_or_else(|| harness(format!("no latch ts in {}", out.stdout)))?;
                fresh.push((id, ts));
            }
        }
        if coalesced >= 2 {
            break;
        }
    }
    ensure(coalesced >= 1, || {
        "inconclusive: no two of 12 engages were within one second of each other".into()
    })?;
    ensure(s.entries("latches").len() == fresh.len(), || {
        format!(
            "{} latches for {} fresh receipts: {:?}",
            s.entries("latches").len(),
            fresh.len(),
            s.entries("latches")
        )
    })?;
    let other = s.run(&[
        "engage",
        "--scope",
        "agent:flood",
        "--reason",
        "flood",
        "--by",
        "monitor-b",
    ])?;
    ensure(
        other.code == 0 && s.entries("latches").len() == fresh.len() + 1,
        || format!("another caller was coalesced away: {}", other.brief()),
    )?;
    Ok(format!(
        "identical engages within one second (by the binary's clock) coalesced into one latch ({coalesced} coalesced, {} latches); a second caller → its own latch",
        fresh.len()
    ))
}

/// Unix milliseconds of an RFC 3339 UTC time as the binary writes it
/// (`2026-10-31T20:10:00.123Z`, the fraction optional).
pub(crate) fn rfc3339_ms(text: &str) -> Option<i64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut ymd = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut parts = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (parts.next()??, parts.next()??, parts.next()??);
    let ms: i64 = format!("{fraction:0<3}")[..3].parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000 + ms)
}
