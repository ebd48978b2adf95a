//! Confinement: an agent run under its own fresh uid (`--user auto`, the default) can neither
//! read nor write the control directory even with the host's filesystem in view (`--net host`),
//! and `recover` from inside a supervised group is refused with the failed owner-console
//! predicate named (`no_agent_session`) — also with the session variables unset, under `setsid`,
//! on a pseudo-terminal of its own (`script`), and from a daemon that left the agent's process
//! tree.

mod run_support;
mod util;

use run_support::*;
use std::time::Duration;
use util::Home;

#[test]
fn a_confined_agent_cannot_touch_the_control_directory() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let run = run_id("nobody");
    let card = write_card(&home, &card(&run, "agent-c"));
    let out = open_dir("stopline-run-nobody-");
    let script = r#"
id -u > "$OUT/uid"
echo "${STOPLINE_HOME:-unset}" > "$OUT/home_var"
ls "$H" > /dev/null 2>&1; echo $? > "$OUT/ls"
cat "$H/keys/signing.key" > /dev/null 2>&1; echo $? > "$OUT/key"
touch "$H/latches/forged.json" 2> /dev/null; echo $? > "$OUT/forge"
rm -rf "$H/runs" 2> /dev/null; echo $? > "$OUT/rm"
"$STOPLINE_BIN" --home "$H" --json recover plan --scope "run:$RUN" --reason r --by operator > "$OUT/recover.out" 2>&1
echo $? > "$OUT/recover"
"#;
    let home_path = home.path();
    let running = start_run_env(
        &home,
        &card,
        &["--net", "host", "--gateway", &gateway.url()],
        out.path(),
        script,
        &[
            ("OUT", out.path().to_str().unwrap()),
            ("H", home_path.to_str().unwrap()),
            ("RUN", &run),
        ],
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "{stderr}");
    let uid: u32 = read(out.path(), "uid").unwrap().parse().unwrap();
    assert!((61184..=65519).contains(&uid), "uid {uid}");
    assert_eq!(read(out.path(), "home_var").as_deref(), Some("unset"));
    for probe in ["ls", "key", "forge", "rm"] {
        assert_ne!(
            read(out.path(), probe).as_deref(),
            Some("0"),
            "{probe} succeeded as uid {uid}"
        );
    }
    assert!(
        home.file("keys/signing.key").exists(),
        "the key exists; it was only unreadable"
    );
    assert!(!home.file("latches/forged.json").exists());
    assert!(home.file(&format!("runs/{run}/run.json")).exists());
    assert_eq!(
        read(out.path(), "recover").as_deref(),
        Some("1"),
        "{:?}",
        read(out.path(), "recover.out")
    );
    // Refused as the agent session it is, not as a corrupt control state it may not even read.
    let refused = read(out.path(), "recover.out").unwrap_or_default();
    assert!(
        refused.contains("owner_control_required") && refused.contains("no_agent_session"),
        "{refused}"
    );
    let worker = registration(&home, &run, "agent-c").unwrap();
    assert_eq!(
        (worker["unconfined"].as_bool(), worker["user"].as_str()),
        (Some(false), Some(format!("uid-{uid}").as_str()))
    );
}

#[test]
fn recover_from_inside_a_supervised_group_is_refused_as_an_agent_session() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let run = run_id("console");
    let card = write_card(&home, &card(&run, "agent-r"));
    let out = open_dir("stopline-run-console-");
    let recover = r#""$STOPLINE_BIN" --home "$H" --json recover plan --scope machine --reason r --by operator"#;
    let script = format!(
        r#"
script -qec '{recover}' /dev/null > "$OUT/session.out" 2>&1
script -qec 'env -u STOPLINE_TOKEN -u STOPLINE_SESSION {recover}' /dev/null > "$OUT/unset.out" 2>&1
script -qec 'env -u STOPLINE_TOKEN -u STOPLINE_SESSION setsid -w {recover}' /dev/null > "$OUT/setsid.out" 2>&1
( setsid sh -c 'script -qec "env -u STOPLINE_TOKEN -u STOPLINE_SESSION {recover_escaped}" /dev/null > "$OUT/daemon.tmp" 2>&1; echo "ppid=$PPID" >> "$OUT/daemon.tmp"; mv "$OUT/daemon.tmp" "$OUT/daemon.out"' & )
while [ ! -e "$OUT/daemon.out" ]; do sleep 0.05; done
exit 0
"#,
        recover_escaped = recover.replace('"', "\\\""),
    );
    let home_path = home.path();
    let running = start_run_env(
        &home,
        &card,
        &["--unconfined", "--net", "host", "--gateway", &gateway.url()],
        out.path(),
        &script,
        &[
            ("OUT", out.path().to_str().unwrap()),
            ("H", home_path.to_str().unwrap()),
        ],
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(60));
    assert_eq!(code, 0, "{stderr}");
    for (file, terminal_passes) in [
        ("session.out", true),
        ("unset.out", true),
        ("setsid.out", false),
        ("daemon.out", true),
    ] {
        let text = read(out.path(), file).unwrap_or_default();
        assert!(
            text.contains("owner_control_required") && text.contains("no_agent_session"),
            "{file}: {text}"
        );
        assert!(!text.contains("operator_identity"), "{file}: {text}");
        if terminal_passes {
            // On its own pseudo-terminal, in the foreground: only the session predicate fails.
            assert!(!text.contains("interactive_terminal"), "{file}: {text}");
        }
    }
    let unset = read(out.path(), "unset.out").unwrap();
    assert!(
        !unset.contains("is set"),
        "the variables were unset: {unset}"
    );
    assert!(unset.contains("supervised"), "{unset}");
    let daemon = read(out.path(), "daemon.out").unwrap();
    assert!(daemon.contains("supervised cgroup"), "{daemon}");
    // Nothing was planned.
    assert!(
        !home.file("breakglass.wal.jsonl").exists()
            || !std::fs::read_to_string(home.file("breakglass.wal.jsonl"))
                .unwrap()
                .contains("recovery_intent")
    );
}
