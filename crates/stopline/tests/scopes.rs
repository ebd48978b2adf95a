//! Every scope kind engages; every malformed scope is refused before any file appears.

mod util;
use util::Home;

#[test]
fn every_scope_kind_engages_and_is_listed() {
    let home = Home::new();
    let project = home.dir.path().join("proj");
    std::fs::create_dir_all(&project).unwrap();
    let project_scope = format!("project:{}", project.display());
    for scope in [
        "machine",
        "agent:Worker-1",
        project_scope.as_str(),
        "run:eval-88220",
    ] {
        let receipt = home.engage(scope, "halt-all");
        assert_eq!(receipt["engaged"], true);
        let file = receipt["latch"]["file"].as_str().unwrap().to_string();
        assert!(
            home.file("latches").join(&file).exists(),
            "{scope}: {file} missing"
        );
    }
    let status = home.status();
    let scopes: Vec<&str> = status["latches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["scope"].as_str().unwrap())
        .collect();
    assert!(
        scopes.contains(&"agent:worker-1"),
        "names are lowercased: {scopes:?}"
    );
    assert!(scopes.contains(
        &format!(
            "project:{}",
            std::fs::canonicalize(&project).unwrap().display()
        )
        .as_str()
    ));
    assert!(scopes.contains(&"machine") && scopes.contains(&"run:eval-88220"));
    assert!(
        home.entries("latches.staging").is_empty(),
        "staging files are removed after publication"
    );
}

#[test]
fn project_scopes_are_canonicalized_through_symlinks() {
    let home = Home::new();
    let real = home.dir.path().join("real");
    std::fs::create_dir_all(&real).unwrap();
    let link = home.dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let receipt = home.engage(&format!("project:{}", link.display()), "halt-all");
    let canonical = std::fs::canonicalize(&real).unwrap();
    assert_eq!(
        receipt["latch"]["scope"],
        format!("project:{}", canonical.display())
    );
}

#[test]
fn malformed_scopes_are_refused_before_anything_is_written() {
    let cases = [
        ("", "scope_invalid"),
        ("everything", "scope_invalid"),
        ("host:x", "scope_invalid"),
        ("agent:", "scope_invalid"),
        ("agent:-bad", "scope_invalid"),
        ("agent:a b", "scope_invalid"),
        ("agent:ünï", "scope_invalid"),
        ("run:x/y", "scope_invalid"),
        ("project:relative/path", "scope_invalid"),
        ("project:", "scope_invalid"),
        // A root that is gone is stopped in lexical form (docs/reference.md §5, tests/bounded_input.rs);
        // one that cannot be a directory at all is unresolvable.
        ("project:/etc/passwd/not-a-dir", "project_root_unresolvable"),
    ];
    let long = format!("agent:{}", "a".repeat(65));
    for (scope, code) in cases
        .iter()
        .copied()
        .chain([(long.as_str(), "scope_invalid")])
    {
        let home = Home::new();
        let r = home.run(&["engage", "--scope", scope, "--reason", "x"]);
        assert_eq!(r.code, 1, "{scope:?} should be refused: {}", r.stdout);
        assert_eq!(r.code_str(), code, "{scope:?}");
        assert!(
            r.stderr.starts_with(&format!("error: {code}: ")),
            "{}",
            r.stderr
        );
        assert!(
            !home.path().exists(),
            "{scope:?}: refused engage must not create the control directory"
        );
    }
}

#[test]
fn blank_reason_and_bad_level_are_refused_without_a_latch() {
    let home = Home::new();
    let r = home.run(&["engage", "--scope", "machine", "--reason", "   "]);
    assert_eq!((r.code, r.code_str().as_str()), (1, "reason_required"));
    let r = home.run(&[
        "engage", "--scope", "machine", "--reason", "x", "--level", "stop-ish",
    ]);
    assert_eq!((r.code, r.code_str().as_str()), (1, "level_invalid"));
    assert!(home.entries("latches").is_empty());
}

#[test]
fn repeated_engages_within_a_second_are_coalesced() {
    let home = Home::new();
    let args = [
        "engage",
        "--scope",
        "agent:flood",
        "--reason",
        "flood",
        "--by",
        "monitor-a",
    ];
    let first = home.run(&args).json();
    let second = home.run(&args).json();
    assert_eq!(second["coalesced"], true);
    assert_eq!(first["latch"]["id"], second["latch"]["id"]);
    assert_eq!(home.entries("latches").len(), 1);
    // A different caller or level is never coalesced away.
    home.run(&[
        "engage",
        "--scope",
        "agent:flood",
        "--reason",
        "flood",
        "--by",
        "monitor-b",
    ])
    .assert_ok();
    assert_eq!(home.entries("latches").len(), 2);
}

#[test]
fn latch_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    let receipt = home.engage("machine", "emergency");
    let mode = |p: std::path::PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(home.path()), 0o700);
    assert_eq!(
        mode(
            home.file("latches")
                .join(receipt["latch"]["file"].as_str().unwrap())
        ),
        0o600
    );
    assert_eq!(mode(home.file("breakglass.wal.jsonl")), 0o600);
}
