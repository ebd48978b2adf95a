//! Bounded input, projects that are gone, and a closed standard output (docs/reference.md §5).
//!
//! Reproduces a reported defect: a revoked token engaged ~970 distinct latches and then 25 latches with
//! 1.9 MB reasons (the home grew to 121 MB, `status` took 1.4 s); `engage --scope
//! project:<a directory that was deleted>` was refused; and `stopline status | head -1` and
//! `ops list | head` panicked with "failed printing to stdout: Broken pipe".

mod util;

use std::process::Stdio;
use util::Home;

#[test]
fn a_reason_is_at_most_1024_bytes_of_utf8() {
    let home = Home::new();
    let at_most = "é".repeat(512);
    assert_eq!(at_most.len(), 1024);
    let out = home.run(&["engage", "--scope", "agent:a", "--reason", &at_most]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    for reason in ["x".repeat(1025), "é".repeat(513)] {
        let out = home.run(&["engage", "--scope", "agent:b", "--reason", &reason]);
        assert_eq!(out.code, 1, "{}", out.stdout);
        assert_eq!(out.code_str(), "reason_invalid");
    }
    assert_eq!(
        home.entries("latches").len(),
        1,
        "a refused engage wrote a latch"
    );
}

#[test]
fn a_token_caller_holds_at_most_32_latches_and_is_told_a_wider_scope_machine_always_lands() {
    let home = Home::new();
    let token = home.token(&["--agent", "flooder", "--role", "monitor"]);
    for i in 0..32 {
        let out = home.run(&[
            "engage",
            "--scope",
            &format!("agent:a{i}"),
            "--level",
            "halt-all",
            "--reason",
            "r",
            "--token",
            &token,
        ]);
        assert_eq!(out.code, 0, "{i}: {}", out.stderr);
    }
    // Again one it already holds: not a new scope.
    let again = home.run(&[
        "engage", "--scope", "agent:a3", "--reason", "r", "--token", &token,
    ]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    let out = home.run(&[
        "engage",
        "--scope",
        "agent:a32",
        "--reason",
        "r",
        "--token",
        &token,
    ]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert_eq!(out.code_str(), "engage_limit");
    assert!(out.stdout.contains("--scope machine"), "{}", out.stdout);
    let machine = home.run(&[
        "engage", "--scope", "machine", "--reason", "r", "--token", &token,
    ]);
    assert_eq!(machine.code, 0, "{}", machine.stderr);
    // The console is not limited.
    let console = home.run(&["engage", "--scope", "agent:a40", "--reason", "r"]);
    assert_eq!(console.code, 0, "{}", console.stderr);
    assert_eq!(home.entries("latches").len(), 32 + 1 + 1 + 1);
}

#[test]
fn a_project_whose_directory_is_gone_can_still_be_stopped_and_covers_both_forms() {
    let home = Home::new();
    let base = home.dir.path().canonicalize().unwrap();
    let gone = base.join("gone-project");
    let scope = format!("project:{}//./sub/../sub/", gone.display());
    let out = home.run(&[
        "engage",
        "--scope",
        &scope,
        "--reason",
        "the project vanished",
    ]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let receipt = out.json();
    assert_eq!(
        receipt["latch"]["scope"],
        format!("project:{}/sub", gone.display())
    );
    assert!(
        receipt["warnings"]
            .to_string()
            .contains("project_root_missing"),
        "{receipt}"
    );
    // Work under it is covered, whether the path is given lexically or exists again.
    let deeper = format!("{}/sub/deeper/../deeper", gone.display());
    let (code, check) = home.check(&["--class", "noncritical", "--project", &deeper]);
    assert_eq!(code, 4, "{check}");
    std::fs::create_dir_all(gone.join("sub/deeper")).unwrap();
    let (code, check) = home.check(&["--class", "noncritical", "--project", &deeper]);
    assert_eq!(code, 4, "{check}");
    let (code, _) = home.check(&[
        "--class",
        "noncritical",
        "--project",
        base.to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
}

#[test]
fn a_closed_stdout_ends_status_and_ops_list_quietly() {
    let home = Home::new();
    for i in 0..20 {
        home.engage(&format!("agent:w{i}"), "halt-all");
    }
    for args in [
        vec!["status"],
        vec!["--json", "status"],
        vec!["ops", "list"],
        vec!["--json", "ops", "list"],
    ] {
        let mut child = home
            .command(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before a byte is read, as `| head -1` does after one line.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
        assert_ne!(out.status.code(), Some(101), "{args:?}: {stderr}");
        assert!(out.status.code().is_some(), "{args:?}: killed by a signal");
    }
}
