//! Starting an agent: inside its group from the first instruction, with only the environment
//! given, as another user when asked.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod common;

use common::{sh, GroupGuard};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;
use stopline_supervisor::hierarchy::unified_cgroup_path;
use stopline_supervisor::{spawn, CommandSpec, SpawnOptions, StdioMode, UserIdentity};

fn run_to_output(
    spec: CommandSpec,
    guard: &GroupGuard,
) -> (std::process::ExitStatus, String, String) {
    let options = SpawnOptions {
        group: Some(&guard.0),
        ..SpawnOptions::default()
    };
    let mut spawned = spawn(&spec, &options).unwrap();
    let mut stdout = String::new();
    let mut stderr = String::new();
    spawned
        .child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    spawned
        .child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = spawned.child.wait().unwrap();
    (status, stdout, stderr)
}

fn piped(mut spec: CommandSpec) -> CommandSpec {
    spec.stdin = StdioMode::Null;
    spec.stdout = StdioMode::Piped;
    spec.stderr = StdioMode::Piped;
    spec
}

#[test]
fn the_child_is_in_its_group_from_its_first_instruction() {
    let guard = GroupGuard::create("joinbeforeexec");
    // `cat` reads its own cgroup as the very first thing it does after exec.
    let spec = piped(CommandSpec::new("/bin/cat", ["/proc/self/cgroup"]));
    let (status, stdout, _) = run_to_output(spec, &guard);
    assert!(status.success());
    let relative = unified_cgroup_path(&stdout).expect("a 0:: line");
    let expected = guard
        .0
        .path()
        .strip_prefix(common::hierarchy().mount())
        .unwrap()
        .to_owned();
    assert_eq!(
        std::path::Path::new(relative),
        std::path::Path::new("/").join(expected)
    );
}

#[test]
fn only_the_given_environment_reaches_the_agent() {
    let guard = GroupGuard::create("envscrub");
    // The test process has PATH, HOME and more; none of them may reach the agent.
    assert!(std::env::var_os("PATH").is_some());
    let spec = piped(CommandSpec::new("/usr/bin/env", Vec::<String>::new()).env("ONLY_THIS", "1"));
    let (status, stdout, _) = run_to_output(spec, &guard);
    assert!(status.success());
    assert_eq!(stdout.trim(), "ONLY_THIS=1");
}

#[test]
fn the_working_directory_is_the_one_given() {
    let guard = GroupGuard::create("cwd");
    let mut spec = piped(sh("pwd"));
    spec.cwd = "/usr".into();
    let (_, stdout, _) = run_to_output(spec, &guard);
    assert_eq!(stdout.trim(), "/usr");
}

#[test]
fn as_nobody_the_agent_has_nobodys_uid_and_cannot_read_a_root_only_directory() {
    let guard = GroupGuard::create("usernobody");
    let secret_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(secret_dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(secret_dir.path().join("secret"), "root only").unwrap();
    let nobody = UserIdentity::resolve("nobody").expect("user nobody");
    assert_ne!(nobody.uid, 0);

    let script = format!(
        "id -u; id -g; id -G; if cat {0}/secret; then echo READ; else echo DENIED; fi; \
         if ls {0}; then echo LISTED; else echo UNLISTED; fi",
        secret_dir.path().display()
    );
    let mut spec = piped(sh(&script));
    spec.user = Some(nobody.clone());
    let (status, stdout, stderr) = run_to_output(spec, &guard);
    assert!(status.success(), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], nobody.uid.to_string(), "{stdout}");
    assert_eq!(lines[1], nobody.gid.to_string(), "{stdout}");
    // Root's supplementary groups are gone: only nobody's own remain.
    for gid in lines[2].split_whitespace() {
        assert!(nobody.groups.contains(&gid.parse().unwrap()), "{stdout}");
    }
    assert_eq!(lines[3], "DENIED", "{stdout}");
    assert_eq!(lines[4], "UNLISTED", "{stdout}");
    assert!(stderr.contains("Permission denied"), "{stderr}");
}

#[test]
fn a_nobody_agent_is_still_joined_to_its_group_and_killable() {
    let guard = GroupGuard::create("nobodykill");
    let mut spec = sh("exec sleep 1000");
    spec.user = Some(UserIdentity::resolve("nobody").unwrap());
    let options = SpawnOptions {
        group: Some(&guard.0),
        ..SpawnOptions::default()
    };
    let mut spawned = spawn(&spec, &options).unwrap();
    assert!(guard.0.contains_pid(spawned.pid).unwrap());
    let report = guard
        .0
        .kill_until_quiescent(Duration::from_secs(5))
        .unwrap();
    assert!(report.confirmed());
    let _ = spawned.child.wait();
}

#[test]
fn a_failed_exec_is_an_error_and_leaves_the_group_empty() {
    let guard = GroupGuard::create("badexec");
    let options = SpawnOptions {
        group: Some(&guard.0),
        ..SpawnOptions::default()
    };
    let result = spawn(
        &CommandSpec::new("/no/such/program", Vec::<String>::new()),
        &options,
    );
    assert!(result.is_err());
    // The failed child may take a moment to be fully gone.
    let started = std::time::Instant::now();
    while guard.0.observe().unwrap().populated && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!guard.0.observe().unwrap().populated);
}

#[test]
fn supervised_cgroup_of_names_the_group_of_a_supervised_process_only() {
    let guard = GroupGuard::create("ownerconsole");
    let options = SpawnOptions {
        group: Some(&guard.0),
        ..SpawnOptions::default()
    };
    let mut spawned = spawn(&sh("exec sleep 1000"), &options).unwrap();
    let found = stopline_supervisor::supervised_cgroup_of(spawned.pid).unwrap();
    assert_eq!(found.as_deref(), Some(guard.0.path()));
    assert_eq!(
        stopline_supervisor::supervised_cgroup_of(std::process::id()).unwrap(),
        None
    );
    assert!(stopline_supervisor::supervised_cgroup_of(u32::MAX - 1).is_err());
    guard
        .0
        .kill_until_quiescent(Duration::from_secs(5))
        .unwrap();
    let _ = spawned.child.wait();
}
