//! Start-up warnings and the misconfigurations that used to pass in silence: `serve`
//! warns on a missing `[model]`, a tool server command that does not exist on PATH and
//! `operators` left at its default; `serve` on a taken port refuses naming the address;
//! `disengage` of a scope with no latch says so on stderr (exit code unchanged: docs/reference.md §3 names
//! no refusal for it). The real binary throughout.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use gw::{free_port, within};
use std::process::Stdio;
use std::time::Duration;
use util::Home;

/// Start `serve` on `config` (a listen line is prepended) and return its stderr once it is
/// healthy, then stop it.
fn serve_stderr(home: &Home, config: &str) -> String {
    let addr = format!("127.0.0.1:{}", free_port());
    std::fs::create_dir_all(home.path()).unwrap();
    std::fs::write(
        home.file("config.toml"),
        format!("listen = \"{addr}\"\n{config}\n"),
    )
    .unwrap();
    let log = home.dir.path().join("serve.log");
    let mut child = home
        .command(&["serve"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("stopline serve");
    let healthy = within(Duration::from_secs(30), || {
        (std::net::TcpStream::connect(&addr).is_ok()
            && gw::http(&addr, "GET", "/healthz", None, None).status == 200)
            .then_some(())
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(healthy.is_some(), "the gateway did not become healthy");
    std::fs::read_to_string(&log).unwrap()
}

const NO_MODEL: &str = "config.toml has no [model] section";
const NO_OPERATORS: &str =
    "config.toml does not set operators: the default [\"operator\"] is in force";

#[test]
fn serve_warns_on_no_model_a_missing_tool_server_and_default_operators() {
    let home = Home::new();
    let stderr = serve_stderr(
        &home,
        "[mcp.ghost]\ncommand = [\"no-such-tool-server-f00d\", \"stdio\"]\n\
         [mcp.pathless]\ncommand = [\"/nonexistent/bin/server\"]\n",
    );
    assert!(stderr.contains(NO_MODEL), "{stderr}");
    assert!(stderr.contains(NO_OPERATORS), "{stderr}");
    assert!(
        stderr
            .contains("[mcp.ghost] command \"no-such-tool-server-f00d\" does not exist on PATH ("),
        "{stderr}"
    );
    assert!(
        stderr.contains("[mcp.pathless] command \"/nonexistent/bin/server\" does not exist"),
        "{stderr}"
    );
    assert!(stderr.contains("WARN"), "{stderr}");
}

#[test]
fn a_complete_configuration_starts_without_warnings() {
    let home = Home::new();
    let stderr = serve_stderr(
        &home,
        "operators = [\"alice\"]\n[model]\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         [mcp.shell]\ncommand = [\"sh\", \"-c\", \"exec cat\"]\nwarm_spare = false\n",
    );
    assert!(!stderr.contains("WARN"), "{stderr}");
    assert!(!stderr.contains(NO_MODEL), "{stderr}");
    assert!(!stderr.contains("does not exist on PATH"), "{stderr}");
    assert!(!stderr.contains("does not set operators"), "{stderr}");
}

#[test]
fn serve_on_a_taken_port_refuses_naming_the_address() {
    let home = Home::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = home
        .command(&["serve", "--listen", &addr])
        .output()
        .expect("stopline serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {addr}: ")),
        "{stderr}"
    );
    assert!(stderr.contains("--listen"), "{stderr}");
    drop(taken);
}

#[test]
fn disengaging_a_scope_with_no_latch_says_so_on_stderr() {
    let home = Home::new();
    let args = [
        "disengage",
        "--scope",
        "agent:nobody",
        "--reason",
        "typo",
        "--by",
        "operator",
    ];
    let out = home.command(&args).output().expect("disengage");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr
            .contains("warning: no halt latch of scope agent:nobody is active: nothing was lifted"),
        "{stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "nothing to disengage for agent:nobody"
    );
    // With --json too (the receipt unchanged on stdout, the warning on stderr).
    let json = home.run(&args);
    assert_eq!(json.code, 0);
    assert_eq!(
        json.json()["cleared"],
        serde_json::json!([]),
        "{}",
        json.stdout
    );
    assert!(
        json.stderr.contains("nothing was lifted"),
        "{}",
        json.stderr
    );
    // A real halt lifted: no warning.
    home.engage("agent:somebody", "halt-all");
    let out = home
        .command(&[
            "disengage",
            "--scope",
            "agent:somebody",
            "--reason",
            "done",
            "--by",
            "operator",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
