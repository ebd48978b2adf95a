//! The architecture invariants hold (the same checks as `cargo xtask lint`).

#[test]
fn architecture_invariants_hold() {
    let problems = xtask::check();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The thin-binary rule catches what the binary used to do: read receipts back by string keys,
/// build JSON by hand, read files, and grow long.
#[test]
fn the_thin_binary_rule_refuses_logic_in_the_binary() {
    let root = std::env::temp_dir().join(format!("xtask-thin-{}", std::process::id()));
    let src = root.join("crates/stopline/src");
    std::fs::create_dir_all(&src).unwrap();
    let long: String = (0..200).map(|i| format!("// line {i}\n")).collect();
    std::fs::write(
        src.join("commands.rs"),
        format!("//! x\nfn f(r: &Value) {{ r[\"latch\"][\"id\"]; json!({{}}); std::fs::read(\"p\"); }}\n{long}"),
    )
    .unwrap();
    std::fs::write(src.join("cli.rs"), format!("//! the clap contract\n{long}")).unwrap();
    let problems = xtask::thin_binary(&root);
    std::fs::remove_dir_all(&root).unwrap();
    assert_eq!(problems.len(), 4, "{problems:#?}");
    assert!(
        problems.iter().all(|p| p.contains("commands.rs")),
        "{problems:#?}"
    );
}

/// The cycle rule finds what the gateway used to have: `view` holding a `source` whose
/// watchers took the `ViewHolder` back, through a `use crate::{…}` group, a re-export of the
/// crate root and a full path in code; code after `#[cfg(test)]` and comments do not count.
#[test]
fn the_cycle_rule_finds_modules_that_import_each_other() {
    let root = std::env::temp_dir().join(format!("xtask-cycles-{}", std::process::id()));
    let src = root.join("src");
    std::fs::create_dir_all(src.join("bench")).unwrap();
    let files = [
        ("lib.rs", "//! x\nmod view;\npub use view::ViewHolder;\n"),
        (
            "view.rs",
            "//! x\nuse crate::{source::LocalSource, feed};\n",
        ),
        ("source.rs", "//! x\nfn f() { crate::watch::spawn(); }\n"),
        ("watch.rs", "//! x\nuse crate::ViewHolder;\n"),
        (
            "feed.rs",
            "//! x\n// crate::view::ViewHolder\n#[cfg(test)]\nuse crate::view;\n",
        ),
        ("server.rs", "//! x\nuse crate::bench;\n"),
        ("bench/bare.rs", "//! x\nuse crate::feed;\n"),
    ];
    for (name, text) in files {
        std::fs::write(src.join(name), text).unwrap();
    }
    let cycles = xtask::cycles::module_cycles(&src);
    std::fs::remove_dir_all(&root).unwrap();
    assert_eq!(cycles, vec![vec!["source", "view", "watch"]], "{cycles:?}");
}
