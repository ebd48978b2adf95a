//! `stopline completions <shell>` and `stopline man` (docs/reference.md §3), from the binary alone: with
//! no control directory and no repository, a user gets completion scripts that real shells
//! accept and that complete the real subcommands and flags, and a man page `man` renders.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

use std::io::Write;
use std::process::{Command, Stdio};

fn stopline(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stopline"))
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        // A home that does not exist: neither verb may need or create one.
        .env("STOPLINE_HOME", "/nonexistent/stopline-home")
        .output()
        .expect("run stopline");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What bash offers for `line` with the completion script `script` sourced.
fn bash_offers(script: &str, words: &[&str]) -> Vec<String> {
    let line = words.join(" ");
    let program = format!(
        "eval \"$(cat)\"; COMP_WORDS=({line}); COMP_CWORD={cword}; COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; _stopline stopline '{current}' '{previous}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        cword = words.len() - 1,
        current = words.last().unwrap(),
        previous = words[words.len() - 2],
    );
    let mut child = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn the_bash_completion_from_the_binary_completes_real_subcommands_and_flags() {
    let (code, script, stderr) = stopline(&["completions", "bash"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(bash_offers(&script, &["stopline", "eng"]).contains(&"engage".to_string()));
    let engage = bash_offers(&script, &["stopline", "engage", "--"]);
    for flag in ["--scope", "--reason", "--level", "--by"] {
        assert!(
            engage.contains(&flag.to_string()),
            "{flag} not in {engage:?}"
        );
    }
    assert!(
        !std::path::Path::new("/nonexistent/stopline-home").exists(),
        "completions created a home"
    );
}

#[test]
fn zsh_and_fish_scripts_name_the_subcommands() {
    let (code, zsh, _) = stopline(&["completions", "zsh"]);
    assert_eq!(code, 0);
    assert!(zsh.starts_with("#compdef stopline"), "{zsh}");
    let (code, fish, _) = stopline(&["completions", "fish"]);
    assert_eq!(code, 0);
    for sub in ["engage", "disengage", "recover", "completions", "man"] {
        assert!(
            fish.contains(&format!("-a \"{sub}\"")) || fish.contains(&format!("-a {sub}")),
            "fish lacks {sub}"
        );
    }
    let (code, _, stderr) = stopline(&["completions", "tcsh"]);
    assert_eq!(code, 2, "an unknown shell is a usage error: {stderr}");
}

#[test]
fn the_man_page_renders_with_man_and_lists_every_verb() {
    let (code, page, stderr) = stopline(&["man"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(page.contains(".TH stopline 1"), "{page}");
    // Render it as a reader would: man's formatter must accept it and show the verbs.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stopline.1");
    std::fs::write(&file, &page).unwrap();
    let rendered = Command::new("man")
        .arg("-l")
        .arg(&file)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .expect("man");
    assert!(rendered.status.success(), "man -l failed");
    let text = String::from_utf8_lossy(&rendered.stdout);
    for verb in ["engage", "disengage", "status", "recover", "serve", "run"] {
        assert!(
            text.contains(verb),
            "the rendered page lacks {verb}:\n{text}"
        );
    }
}

#[test]
fn a_closed_stdout_ends_the_man_page_quietly() {
    // The reading end is closed before the binary starts, so its first write meets EPIPE.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_stopline"))
        .arg("man")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.is_empty(),
        "a closed stdout is not reported: {stderr}"
    );
}
