//! A stop that cannot hang, fail or be flooded (docs/reference.md §5): engage answers while another
//! process holds the WAL's lock, does not depend on `config.toml`, stops a project that is gone;
//! nothing in the control directory blocks a reader; the home is made whole and a missing one
//! refuses; input is bounded; a closed stdout ends a command quietly.
//!
//! The battery holds the WAL's lock itself (`flock`, as a frozen reader would): it is the
//! boundary under test, not a library call.

use super::{case, Case};
use crate::conformance::sandbox::Sandbox;
use crate::conformance::steps::{blocked, refused};
use crate::conformance::{ensure, harness, Verdict};
use std::process::Stdio;

pub const CASES: &[Case] = &[
    case(
        "engage_never_waits_on_a_held_wal_lock",
        "with another process holding the WAL's shared lock, engage returns engaged with warning wal_deferred and its latch in force; the next writer records it",
        engage_never_waits,
    ),
    case(
        "config_invalid_engage_lands_others_refuse",
        "a config.toml that does not parse: engage lands with warning config_invalid; status, token issue refuse config_invalid naming file, line and column; check blocks",
        config_invalid,
    ),
    case(
        "etcd_credentials_never_from_the_url",
        "--control etcd://user:password@… is config_invalid and the refusal never repeats the password; an [etcd] password_file others can read is config_invalid",
        etcd_credentials,
    ),
    case(
        "config_unknown_key_is_refused",
        "an unknown key in config.toml is config_invalid naming it and the nearest known key; serve refuses to start",
        config_unknown_key,
    ),
    case(
        "project_gone_is_stopped_lexically",
        "engage of a project whose directory does not exist lands in lexical form with warning project_root_missing and covers work under it",
        project_gone,
    ),
    case(
        "non_regular_latch_entry_is_a_machine_emergency",
        "a FIFO, socket, directory or symlink in latches/ is read as a machine emergency without blocking check or status",
        non_regular_entries,
    ),
    case(
        "init_creates_the_home_whole",
        "init creates the home 0700 with latches/, latches.staging/ and the reserve, and nothing else",
        init_whole,
    ),
    case(
        "control_home_missing_refuses_gates",
        "check, the Claude Code and Codex hooks and status against a home that does not exist refuse control_home_missing (exit 4, exit 2, exit 1) and create nothing",
        home_missing,
    ),
    case(
        "reason_invalid",
        "a reason longer than 1024 bytes of UTF-8 is refused reason_invalid and writes nothing",
        reason_invalid,
    ),
    case(
        "engage_limit",
        "a token caller's 33rd distinct scope is refused engage_limit naming a wider scope; machine lands; the console is not limited",
        engage_limit,
    ),
    case(
        "delegate_limit_depth",
        "a delegation chain is at most 8 deep: the 9th token delegate down one chain is refused delegate_limit",
        delegate_limit_depth,
    ),
    case(
        "closed_stdout_is_quiet",
        "status and ops list with a closed stdout end without a panic or a broken-pipe message",
        closed_stdout,
    ),
];

fn warned(receipt: &serde_json::Value, prefix: &str) -> bool {
    receipt["warnings"].as_array().is_some_and(|w| {
        w.iter()
            .any(|w| w.as_str().is_some_and(|w| w.starts_with(prefix)))
    })
}

fn engage_never_waits(s: &Sandbox) -> Verdict {
    s.engage("agent:before", "halt-all")?;
    let wal = std::fs::File::open(s.file("breakglass.wal.jsonl")).map_err(harness)?;
    rustix::fs::flock(&wal, rustix::fs::FlockOperation::LockShared).map_err(harness)?;
    let out = s.run(&["engage", "--scope", "agent:held", "--reason", "lock held"])?;
    let receipt = out.json();
    ensure(out.code == 0 && receipt["engaged"] == true, || {
        format!("engage with the WAL lock held: {}", out.brief())
    })?;
    ensure(
        receipt["wal_deferred"] == true && warned(&receipt, "wal_deferred"),
        || format!("no wal_deferred: {}", out.stdout),
    )?;
    let file = Sandbox::latch_file(&receipt);
    ensure(s.file("latches").join(&file).is_file(), || {
        format!("{file} is not in latches/")
    })?;
    blocked(
        &s.check(&["--class", "critical", "--agent", "held"])?,
        "break_glass_contained",
        "the deferred stop",
    )?;
    drop(wal);
    s.engage("agent:after", "halt-all")?;
    let log = std::fs::read_to_string(s.file("breakglass.wal.jsonl")).unwrap_or_default();
    ensure(
        log.lines().any(|l| {
            l.contains("\"latch_engaged\"") && l.contains(&file) && l.contains("\"deferred\":true")
        }),
        || format!("the next writer did not record {file}"),
    )?;
    Ok(format!("lock held: engaged {file} with wal_deferred; check blocks; the next engage recorded it (deferred)"))
}

fn config_invalid(s: &Sandbox) -> Verdict {
    s.write(
        "config.toml",
        b"listen = \"127.0.0.1:7077\"\noperators = [\"alice\"\n",
    )?;
    let out = s.run(&["engage", "--scope", "machine", "--reason", "broken config"])?;
    ensure(
        out.code == 0 && warned(&out.json(), "config_invalid"),
        || format!("engage with a broken config: {}", out.brief()),
    )?;
    for args in [vec!["status"], vec!["token", "issue", "--agent", "w"]] {
        let out = s.run(&args)?;
        refused(&out, "config_invalid", &args.join(" "))?;
        let message = out.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        ensure(
            message.contains("config.toml")
                && message.contains("line")
                && message.contains("column"),
            || {
                format!(
                    "{}: the refusal does not say where: {message}",
                    args.join(" ")
                )
            },
        )?;
    }
    blocked(
        &s.check(&["--class", "critical"])?,
        "config_invalid",
        "check",
    )?;
    Ok("engage landed with config_invalid; status and token issue refused naming file, line, column; check blocked".into())
}

fn config_unknown_key(s: &Sandbox) -> Verdict {
    s.write("config.toml", b"operater = [\"alice\"]\n")?;
    let out = s.run(&["status"])?;
    refused(&out, "config_invalid", "status")?;
    ensure(
        out.stdout.contains("operater") && out.stdout.contains("did you mean `operators`"),
        || format!("no did-you-mean: {}", out.stdout),
    )?;
    let serve = s.run(&["serve", "--listen", "127.0.0.1:1"])?;
    refused(&serve, "config_invalid", "serve")?;
    Ok("`operater`: config_invalid naming `operators`; serve refused to start".into())
}

fn project_gone(s: &Sandbox) -> Verdict {
    let gone = s.dir().join("gone");
    let scope = format!("project:{}/./a//b/..", gone.display());
    let out = s.run(&["engage", "--scope", &scope, "--reason", "vanished"])?;
    let receipt = out.json();
    ensure(
        out.code == 0 && warned(&receipt, "project_root_missing"),
        || format!("engage of a gone project: {}", out.brief()),
    )?;
    let stored = format!("project:{}/a", gone.display());
    ensure(receipt["latch"]["scope"] == stored.as_str(), || {
        format!("not normalized lexically: {}", receipt["latch"]["scope"])
    })?;
    let under = format!("{}/a/src", gone.display());
    blocked(
        &s.check(&["--class", "noncritical", "--project", &under])?,
        "break_glass_contained",
        "work under the gone project",
    )?;
    Ok(format!(
        "{scope} → {stored} with project_root_missing; work under it blocked"
    ))
}

fn non_regular_entries(s: &Sandbox) -> Verdict {
    s.engage("agent:seed", "halt-all")?;
    let latches = s.file("latches");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        latches.join("fifo.json"),
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .map_err(harness)?;
    // A socket's path must be short (SUN_LEN): bind it in the temporary directory, then move it
    // into latches/ (the same filesystem as the sandbox).
    let short = std::env::temp_dir().join(format!(
        "sl-{}-{:x}.sock",
        std::process::id(),
        s.dir().as_os_str().len() ^ (s as *const Sandbox as usize)
    ));
    let _ = std::fs::remove_file(&short);
    let _socket = std::os::unix::net::UnixListener::bind(&short).map_err(harness)?;
    std::fs::rename(&short, latches.join("socket.json")).map_err(harness)?;
    std::fs::create_dir(latches.join("dir.json")).map_err(harness)?;
    std::os::unix::fs::symlink("/dev/zero", latches.join("link.json")).map_err(harness)?;
    blocked(
        &s.check(&["--class", "critical"])?,
        "break_glass_contained",
        "check",
    )?;
    let status = s.status()?;
    let machine = status["latches"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter(|l| l["scope"] == "machine" && l["level"] == "emergency")
                .count()
        })
        .unwrap_or(0);
    ensure(machine == 4, || {
        format!("{machine} machine emergencies in {}", status["latches"])
    })?;
    Ok(
        "FIFO, socket, directory, symlink: 4 machine emergencies; check blocked; status answered"
            .into(),
    )
}

fn init_whole(s: &Sandbox) -> Verdict {
    use std::os::unix::fs::PermissionsExt;
    let out = s.run(&["init"])?;
    ensure(out.code == 0, || format!("init: {}", out.brief()))?;
    let mode = std::fs::metadata(s.home())
        .map_err(harness)?
        .permissions()
        .mode()
        & 0o777;
    ensure(mode == 0o700, || format!("home mode {mode:o}"))?;
    let names = s.entries("");
    ensure(
        names
            == [
                "latches",
                "latches.staging",
                "reserve.1.bin",
                "reserve.2.bin",
                "reserve.bin",
            ],
        || format!("{names:?}"),
    )?;
    Ok("init: 0700 home with latches/, latches.staging/ and the reserve's three files".into())
}

fn home_missing(s: &Sandbox) -> Verdict {
    let (code, receipt) = s.check(&["--class", "critical", "--agent", "a"])?;
    ensure(
        code == 4 && receipt["code"] == "control_home_missing",
        || format!("check: exit {code} {receipt}"),
    )?;
    let event =
        br#"{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"}}"#;
    for harness in ["claude-code", "codex"] {
        let hook = s.run_with(&["hook", harness], &[], Some(event))?;
        ensure(
            hook.code == 2 && hook.stderr.contains("control_home_missing"),
            || format!("hook {harness}: {}", hook.brief()),
        )?;
    }
    let status = s.run(&["status"])?;
    ensure(
        status.code == 1 && status.json()["error"]["code"] == "control_home_missing",
        || format!("status: {}", status.brief()),
    )?;
    ensure(!s.home().exists(), || "a gate created the home".into())?;
    Ok("no home: check exit 4 control_home_missing; both hooks exit 2; status refused; nothing created".into())
}

fn reason_invalid(s: &Sandbox) -> Verdict {
    let long = "é".repeat(513);
    let out = s.run(&["engage", "--scope", "machine", "--reason", &long])?;
    refused(&out, "reason_invalid", "1026-byte reason")?;
    ensure(s.entries("latches").is_empty(), || {
        "a latch appeared".into()
    })?;
    let ok = s.run(&["engage", "--scope", "machine", "--reason", &"é".repeat(512)])?;
    ensure(ok.code == 0, || {
        format!("a 1024-byte reason: {}", ok.brief())
    })?;
    Ok("1026 bytes: reason_invalid, nothing written; 1024 bytes: engaged".into())
}

fn delegate_limit_depth(s: &Sandbox) -> Verdict {
    let mut token = s.token(&["--agent", "root"])?;
    for depth in 1..=8 {
        let child = format!("d{depth}");
        let out = s.run(&["token", "delegate", "--parent", &token, "--agent", &child])?;
        token = out.json()["token"].as_str().unwrap_or_default().to_string();
        ensure(out.code == 0 && !token.is_empty(), || {
            format!("delegation {depth}: {}", out.brief())
        })?;
    }
    let out = s.run(&["token", "delegate", "--parent", &token, "--agent", "d9"])?;
    refused(&out, "delegate_limit", "a 9th delegation")?;
    Ok("8 delegations minted; the 9th refused delegate_limit".into())
}

fn engage_limit(s: &Sandbox) -> Verdict {
    let token = s.token(&["--agent", "flooder", "--role", "monitor"])?;
    for i in 0..32 {
        let scope = format!("agent:f{i}");
        let out = s.run(&[
            "engage", "--scope", &scope, "--level", "halt-all", "--reason", "f", "--token", &token,
        ])?;
        ensure(out.code == 0, || format!("{scope}: {}", out.brief()))?;
    }
    let out = s.run(&[
        "engage",
        "--scope",
        "agent:f32",
        "--reason",
        "f",
        "--token",
        &token,
    ])?;
    refused(&out, "engage_limit", "a 33rd scope")?;
    ensure(out.stdout.contains("--scope machine"), || {
        format!("no wider scope named: {}", out.stdout)
    })?;
    let machine = s.run(&[
        "engage", "--scope", "machine", "--reason", "f", "--token", &token,
    ])?;
    ensure(machine.code == 0, || {
        format!("machine: {}", machine.brief())
    })?;
    let console = s.run(&["engage", "--scope", "agent:f99", "--reason", "f"])?;
    ensure(console.code == 0, || {
        format!("console: {}", console.brief())
    })?;
    Ok("32 scopes landed; the 33rd engage_limit naming --scope machine; machine and the console landed".into())
}

fn closed_stdout(s: &Sandbox) -> Verdict {
    for i in 0..5 {
        s.engage(&format!("agent:w{i}"), "halt-all")?;
    }
    for args in [vec!["status"], vec!["ops", "list"]] {
        let mut cmd = s.command(&args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(harness)?;
        s.guard().register(&child);
        drop(child.stdout.take());
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            std::io::Read::read_to_string(&mut pipe, &mut stderr).map_err(harness)?;
        }
        let code = s.guard().wait(&mut child, &args.join(" "))?;
        ensure(
            code != 101
                && code >= 0
                && !stderr.contains("panicked")
                && !stderr.contains("Broken pipe"),
            || format!("{}: exit {code}, stderr {stderr:?}", args.join(" ")),
        )?;
    }
    Ok("status and ops list with stdout closed: no panic, no broken-pipe message".into())
}

fn etcd_credentials(s: &Sandbox) -> Verdict {
    let secret = "conformance-secret-pw";
    let out = s.run(&[
        "--control",
        &format!("etcd://alice:{secret}@127.0.0.1:9"),
        "status",
    ])?;
    refused(&out, "config_invalid", "credentials in the --control URL")?;
    ensure(
        !out.stdout.contains(secret) && !out.stderr.contains(secret),
        || format!("the refusal repeats the password: {}", out.brief()),
    )?;
    s.write("etcd.pw", format!("{secret}\n").as_bytes())?;
    let password = s.file("etcd.pw");
    std::fs::set_permissions(
        &password,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .map_err(harness)?;
    s.write(
        "config.toml",
        format!(
            "[etcd]\nuser = \"stopline-operator\"\npassword_file = {:?}\n",
            password.display().to_string()
        )
        .as_bytes(),
    )?;
    let out = s.run(&["--control", "etcd://127.0.0.1:9", "status"])?;
    refused(&out, "config_invalid", "a password file others can read")?;
    ensure(
        !out.stdout.contains(secret) && !out.stderr.contains(secret),
        || format!("the refusal repeats the password: {}", out.brief()),
    )?;
    Ok("etcd://user:password@ refused config_invalid without the password; a 0644 password_file refused config_invalid".into())
}
