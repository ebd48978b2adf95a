//! The architecture invariants hold (the same checks as `cargo xtask lint`).
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

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

/// A throwaway workspace shaped like ours: a store whose `owner` feature compiles the owner
/// verbs, the owner console's crate, `run`'s crate, a control crate, the gateway and the MCP
/// proxy. `gateway_deps` and `control_deps` are extra lines of their `[dependencies]`.
fn workspace(name: &str, gateway_deps: &str, control_deps: &str) -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!("xtask-graph-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let crates = [
        ("stopline-store", "", "[features]\nowner = []\n"),
        (
            "stopline-owner",
            "stopline-store = { path = \"../stopline-store\", features = [\"owner\"] }\n",
            "",
        ),
        ("stopline-control", control_deps, ""),
        (
            "stopline-run",
            "stopline-store = { path = \"../stopline-store\" }\n",
            "",
        ),
        (
            "stopline-gateway",
            &format!("stopline-control = {{ path = \"../stopline-control\" }}\n{gateway_deps}"),
            // A test of the gateway may drain a store: dev-dependencies do not count.
            "[dev-dependencies]\nstopline-owner = { path = \"../stopline-owner\" }\n",
        ),
        (
            "stopline-mcp",
            "stopline-gateway = { path = \"../stopline-gateway\" }\n",
            "",
        ),
    ];
    let mut members = Vec::new();
    for (krate, deps, extra) in crates {
        let dir = root.join(krate);
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(dir.join("src/lib.rs"), "//! x\n").unwrap();
        std::fs::write(
            dir.join("Cargo.toml"),
            format!("[package]\nname = \"{krate}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n{deps}\n{extra}"),
        )
        .unwrap();
        members.push(format!("\"{krate}\""));
    }
    std::fs::write(
        root.join("Cargo.toml"),
        format!(
            "[workspace]\nresolver = \"2\"\nmembers = [{}]\n",
            members.join(", ")
        ),
    )
    .unwrap();
    root
}

fn graph_problems(name: &str, gateway_deps: &str, control_deps: &str) -> Vec<String> {
    let root = workspace(name, gateway_deps, control_deps);
    let problems = xtask::crate_graph::recovery_out_of_reach(&root);
    std::fs::remove_dir_all(&root).unwrap();
    problems
}

/// The crate-graph check passes a graph where only the binary's side links the owner, and fails
/// one where the gateway links the owner console directly, links `run` through another crate, or
/// turns on the store's owner verbs — and the MCP proxy, which depends on the gateway, with it.
#[test]
fn the_crate_graph_keeps_recovery_out_of_the_gateways_reach() {
    assert_eq!(graph_problems("clean", "", ""), Vec::<String>::new());

    let direct = graph_problems(
        "direct",
        "stopline-owner = { path = \"../stopline-owner\" }\n",
        "",
    );
    assert!(
        direct
            .iter()
            .any(|p| p.starts_with("stopline-gateway links stopline-owner")),
        "{direct:#?}"
    );
    assert!(
        direct
            .iter()
            .any(|p| p.starts_with("stopline-mcp links stopline-owner")),
        "{direct:#?}"
    );
    assert!(
        direct
            .iter()
            .any(|p| p.contains("stopline-store feature \"owner\"")),
        "{direct:#?}"
    );

    // An edge two hops away: the control crate the gateway needs starts depending on run's.
    let indirect = graph_problems(
        "indirect",
        "",
        "stopline-run = { path = \"../stopline-run\" }\n",
    );
    assert!(
        indirect
            .iter()
            .any(|p| p.starts_with("stopline-gateway links stopline-run")),
        "{indirect:#?}"
    );

    let feature = graph_problems(
        "feature",
        "stopline-store = { path = \"../stopline-store\", features = [\"owner\"] }\n",
        "",
    );
    assert_eq!(feature.len(), 1, "{feature:#?}");
    assert!(
        feature[0].contains("stopline-store feature \"owner\""),
        "{feature:#?}"
    );
}
