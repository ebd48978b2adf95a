//! `cargo xtask dist` generates completions and man pages from the CLI definition, and the
//! example systemd unit keeps its hardening. The completions are exercised in a real bash: the
//! generated script must complete the real subcommands and flags.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

use std::path::Path;
use std::process::Command;

#[test]
fn dist_writes_completions_for_three_shells_and_man_pages() {
    let out = tempfile::tempdir().unwrap();
    let files = xtask::dist::generate(out.path()).expect("generate");
    for rel in [
        "completions/stopline.bash",
        "completions/_stopline",
        "completions/stopline.fish",
        "man/stopline.1",
        "man/stopline-engage.1",
        "man/stopline-recover-plan.1",
    ] {
        let path = out.path().join(rel);
        assert!(files.contains(&path), "{rel} not reported in {files:?}");
        assert!(
            std::fs::metadata(&path).unwrap().len() > 0,
            "{rel} is empty"
        );
    }
    let man = std::fs::read_to_string(out.path().join("man/stopline.1")).unwrap();
    assert!(
        man.starts_with(".ie") || man.contains(".TH stopline 1"),
        "{man}"
    );
    for subcommand in ["engage", "recover", "serve", "run", "check"] {
        assert!(man.contains(subcommand), "man page lacks {subcommand}");
    }
    let fish = std::fs::read_to_string(out.path().join("completions/stopline.fish")).unwrap();
    assert!(fish.contains("complete -c stopline") && fish.contains("engage"));
    let zsh = std::fs::read_to_string(out.path().join("completions/_stopline")).unwrap();
    assert!(zsh.starts_with("#compdef stopline"));
}

/// What bash offers after `words`, with the generated completion function.
fn bash_completes(script: &Path, words: &[&str]) -> Vec<String> {
    let line = words.join(" ");
    let program = format!(
        "source {script}; COMP_WORDS=({line}); COMP_CWORD={cword}; COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; _stopline stopline '{current}' '{previous}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script = script.display(),
        cword = words.len() - 1,
        current = words.last().unwrap(),
        previous = words[words.len() - 2],
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .expect("bash");
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
fn the_bash_completion_completes_real_subcommands_and_flags() {
    let out = tempfile::tempdir().unwrap();
    xtask::dist::generate(out.path()).expect("generate");
    let script = out.path().join("completions/stopline.bash");
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .status()
        .unwrap();
    assert!(syntax.success(), "the bash completion does not parse");
    assert!(bash_completes(&script, &["stopline", "rec"]).contains(&"recover".to_string()));
    let engage = bash_completes(&script, &["stopline", "engage", "--"]);
    for flag in ["--scope", "--reason", "--level", "--by", "--token-file"] {
        assert!(
            engage.contains(&flag.to_string()),
            "{flag} not in {engage:?}"
        );
    }
    let recover = bash_completes(&script, &["stopline", "recover", ""]);
    for sub in ["plan", "apply", "repair"] {
        assert!(
            recover.contains(&sub.to_string()),
            "{sub} not in {recover:?}"
        );
    }
}

#[test]
fn the_example_systemd_unit_keeps_its_hardening_and_state_directory() {
    let unit = std::fs::read_to_string(xtask::root().join("dist/systemd/stopline-serve.service"))
        .expect("dist/systemd/stopline-serve.service");
    let directives: Vec<&str> = unit
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && l.contains('='))
        .collect();
    for required in [
        "ExecStart=/usr/local/bin/stopline serve",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ReadWritePaths=%S/stopline",
        "StateDirectory=stopline",
        "StateDirectoryMode=0700",
        "Environment=STOPLINE_HOME=%S/stopline",
        "UMask=0077",
        "CapabilityBoundingSet=",
    ] {
        assert!(
            directives.contains(&required),
            "the unit lacks `{required}`"
        );
    }
}
