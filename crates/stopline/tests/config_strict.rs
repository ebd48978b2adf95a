//! `config.toml` is strict, and engage does not depend on it (docs/reference.md §5).
//!
//! Reproduces a reported defect: a TOML syntax error made `engage` fail (`control_state_corrupt`), and
//! `status`, `check` and `token issue` too; a misspelled key (`operater = [...]`) was silently
//! ignored, dropping the operator list.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod util;

use util::Home;

fn with_config(text: &str) -> Home {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    std::fs::write(home.file("config.toml"), text).unwrap();
    home
}

/// Every command but engage refuses `config_invalid`, naming the file, line and column.
fn every_other_command_refuses(home: &Home, line: &str, also: &[&str]) {
    let file = home.file("config.toml").display().to_string();
    for args in [
        vec!["status"],
        vec!["token", "issue", "--agent", "worker"],
        vec!["ops", "list"],
        vec![
            "disengage",
            "--scope",
            "machine",
            "--reason",
            "r",
            "--by",
            "operator",
        ],
    ] {
        let out = home.run(&args);
        assert_eq!(out.code, 1, "{args:?}: {}", out.stdout);
        assert_eq!(out.code_str(), "config_invalid", "{args:?}: {}", out.stdout);
        let message = out.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(message.contains(&file), "{args:?}: {message}");
        assert!(message.contains(line), "{args:?}: {message}");
        assert!(message.contains("column"), "{args:?}: {message}");
        for needle in also {
            assert!(message.contains(needle), "{args:?}: {message}");
        }
    }
    let (code, receipt) = home.check(&["--class", "critical"]);
    assert_eq!(code, 4, "{receipt}");
    assert_eq!(receipt["code"], "config_invalid", "{receipt}");
}

#[test]
fn a_syntax_error_does_not_stop_engage_and_every_other_command_names_where_it_is() {
    let home = with_config("listen = \"127.0.0.1:7077\"\noperators = [\"alice\"\nmonitors = []\n");
    let out = home.run(&["engage", "--scope", "machine", "--reason", "broken config"]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let receipt = out.json();
    assert_eq!(receipt["engaged"], true);
    assert!(
        receipt["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().starts_with("config_invalid")),
        "{receipt}"
    );
    assert_eq!(home.entries("latches").len(), 1);
    every_other_command_refuses(&home, "line 3", &[]);
}

#[test]
fn a_misspelled_key_is_refused_naming_it_and_the_nearest_known_key() {
    let home = with_config("listen = \"127.0.0.1:7077\"\noperater = [\"alice\"]\n");
    every_other_command_refuses(&home, "line 2", &["`operater`", "did you mean `operators`"]);
    let out = home.run(&["engage", "--scope", "agent:x", "--reason", "typo config"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // A misspelled key deep inside a section, too.
    let home = with_config("[breakers]\nunauthorised_calls = 2\n");
    every_other_command_refuses(&home, "line 2", &["did you mean `unauthorized_calls`"]);
}

#[test]
fn serve_refuses_to_start_on_an_unknown_key() {
    let home = with_config("listen = \"127.0.0.1:1\"\n[mcp.tools]\nurl = \"http://127.0.0.1:9/mcp\"\nalowed_tools = [\"echo\"]\n");
    let out = home.run(&["serve"]);
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.code_str(), "config_invalid", "{}", out.stdout);
    assert!(
        out.stdout.contains("did you mean `allowed_tools`"),
        "{}",
        out.stdout
    );
}
