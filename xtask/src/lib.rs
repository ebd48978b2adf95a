//! Machine checks of the invariants ARCHITECTURE.md states, so a forbidden edge or a side door
//! fails the build instead of waiting for review. Run with `cargo xtask lint`; the same checks
//! run as tests (`cargo test -p xtask`), so CI enforces them.
#![allow(clippy::disallowed_methods)] // repository chores: packaging, the release gate, cargo itself

use std::path::{Path, PathBuf};
use std::process::Command;

pub mod bounded;
pub mod crate_graph;
pub mod cycles;
pub mod deny;
pub mod dist;
pub mod history_plot;
pub mod release_gate;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Direct dependencies of a workspace package, from `cargo metadata`.
pub fn dependencies(package: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root())
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == package)
        .map(|p| {
            p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| d["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The workspace packages with a direct (normal) dependency on any of `deps`.
pub fn dependents_of(deps: &[&str]) -> Vec<String> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root())
        .output()
        .expect("cargo metadata");
    assert!(out.status.success(), "cargo metadata failed");
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["dependencies"].as_array().into_iter().flatten().any(|d| {
                d["kind"].is_null() && d["name"].as_str().is_some_and(|n| deps.contains(&n))
            })
        })
        .filter_map(|p| p["name"].as_str().map(String::from))
        .collect()
}

/// Rust source files under `dir` (excluding `tests/` and `benches/`).
pub fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                if !matches!(
                    path.file_name().and_then(|n| n.to_str()),
                    Some("tests" | "benches" | "target")
                ) {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Violations of the invariants, one line each. Empty means all hold.
pub fn check() -> Vec<String> {
    let mut problems = Vec::new();
    let root = root();

    // stopline-core does no I/O: only pure dependencies, no I/O modules in its sources.
    let allowed_core = ["serde", "serde_json", "thiserror", "sha2", "hex"];
    for dep in dependencies("stopline-core") {
        if !allowed_core.contains(&dep.as_str()) {
            problems.push(format!(
                "stopline-core depends on {dep}: the core must stay pure"
            ));
        }
    }
    for file in sources(&root.join("crates/stopline-core/src")) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for forbidden in [
            "std::fs",
            "std::net",
            "std::thread",
            "SystemTime",
            "Instant::now",
            "std::process",
            "tokio",
        ] {
            if text.contains(forbidden) {
                problems.push(format!(
                    "{}: uses {forbidden}; stopline-core does no I/O",
                    file.display()
                ));
            }
        }
    }

    // The token crate holds no files either.
    for file in sources(&root.join("crates/stopline-token/src")) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        if text.contains("std::fs") {
            problems.push(format!(
                "{}: stopline-token must not touch the filesystem",
                file.display()
            ));
        }
    }

    // Only the owners write files or start processes: clippy's `disallowed-methods`
    // (clippy.toml), allowed at each owner with its reason, not a search of the source text.

    // Only the store reads the control directory: the verbs, gates and the drill see runs,
    // workers and cards through the store (`runs()`: `live_worker_registrations`, `run_card`, …), never by
    // walking `runs/` or listing a directory themselves.
    for crate_dir in [
        "crates/stopline-control/src",
        "crates/stopline-owner/src",
        "crates/stopline-run/src",
        "crates/stopline-gateway/src",
        "crates/stopline-mcp/src",
        "crates/stopline-drill/src",
        "crates/stopline-etcd/src",
    ] {
        for file in sources(&root.join(crate_dir)) {
            // `bench history` measures throwaway homes it built itself, never a real one.
            if file.ends_with("stopline-gateway/src/history.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            // `.worker_registrations(` is the whole history of runs: what is live is read
            // through the live-run index (`.live_worker_registrations(`).
            for forbidden in [
                "std::fs::read_dir",
                ".layout().runs()",
                ".worker_registrations(",
            ] {
                if text.contains(forbidden) {
                    problems.push(format!(
                        "{}: reads the control directory itself ({forbidden}); go through the store",
                        file.display()
                    ));
                }
            }
        }
    }

    // The drill gate and `GET /v1/drills` read the drill index
    // (`Evidence::drills`), never the whole evidence log.
    for file in [
        "crates/stopline-run/src/preflight.rs",
        "crates/stopline-gateway/src/page.rs",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        for forbidden in [".evidence().entries(", ".evidence().chain("] {
            if text.contains(forbidden) {
                problems.push(format!(
                    "{file}: reads the whole evidence log ({forbidden}); read the drill index (Evidence::drills)"
                ));
            }
        }
    }

    // Only the store watches the control directory (`Store::watch`): inotify (or `notify`)
    // anywhere else is a watch of its own. The supervisor's is on `cgroup.events` files under
    // the cgroup2 mount, never on the control directory.
    let allowed_watchers = [
        "crates/stopline-store/",
        "crates/stopline-supervisor/src/events.rs",
    ];
    for file in sources(&root.join("crates")) {
        let rel = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .to_string_lossy()
            .replace("/../", "/");
        if allowed_watchers
            .iter()
            .any(|prefix| rel.starts_with(prefix))
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        if let Some(forbidden) = ["inotify::", "notify::"]
            .into_iter()
            .find(|forbidden| text.contains(forbidden))
        {
            problems.push(format!(
                "{rel}: watches files itself ({forbidden}); the control directory is watched through Store::watch"
            ));
        }
    }
    for package in dependents_of(&["inotify", "notify"]) {
        if !matches!(package.as_str(), "stopline-store" | "stopline-supervisor") {
            problems.push(format!(
                "{package} depends on a file watcher; only stopline-store watches the control directory (Store::watch)"
            ));
        }
    }

    // Nothing on the recovery path is reachable from the gateway: the crate graph says so.
    problems.extend(crate_graph::recovery_out_of_reach(&root));

    // The supply chain: licences, sources and banned crates (deny.toml).
    problems.extend(deny::check(&root));

    // Every source file opens with a `//!` paragraph.
    for crate_dir in ["crates", "xtask"] {
        for file in sources(&root.join(crate_dir)) {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or_default();
            if !first.starts_with("//!") {
                problems.push(format!(
                    "{}: must open with a //! paragraph",
                    file.display()
                ));
            }
        }
    }

    // The gateway's modules import one another one way only (no file cycle on the stop path).
    for crate_src in ACYCLIC_CRATES {
        for cycle in cycles::module_cycles(&root.join(crate_src)) {
            problems.push(format!(
                "{crate_src}: the modules {} import one another in a cycle; split a leaf module out so dependencies point one way",
                cycle.join(", ")
            ));
        }
    }

    problems.extend(thin_binary(&root));
    problems
}

/// The crates whose modules must form a DAG (ARCHITECTURE.md, "Module cycles"); a crate joins
/// once its cycles are broken.
pub const ACYCLIC_CRATES: &[&str] = &[
    "crates/stopline-gateway/src",
    "crates/stopline-bench/src",
    "crates/stopline-control/src",
    "crates/stopline-owner/src",
    "crates/stopline-run/src",
    "crates/stopline-etcd/src",
    "crates/stopline-supervisor/src",
    "crates/stopline-token/src",
    "crates/stopline-assurance/src",
    "crates/stopline-testkit/src",
    "crates/stopline-core/src",
    "crates/stopline-store/src",
    "crates/stopline/src",
];

/// The binary crate stays thin (ARCHITECTURE.md: "no control logic in the binary"): every file
/// of it only turns arguments into calls and typed receipts into output. So none of them builds
/// or reads JSON by hand (`json!`, `value["key"]`: receipts are typed in `stopline-control`),
/// touches a file (`std::fs`: the store and the verbs do), or grows past a size where logic
/// hides; `main.rs` stays at most 60 lines, `cli.rs` (the declarative clap contract of docs/reference.md §3)
/// is exempt from the size cap only.
pub fn thin_binary(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for file in sources(&root.join("crates/stopline/src")) {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let cap = match name.as_str() {
            "main.rs" => Some(60),
            "cli.rs" => None,
            _ => Some(160),
        };
        if let Some(cap) = cap.filter(|&cap| text.lines().count() > cap) {
            problems.push(format!(
                "crates/stopline/src/{name} is over {cap} lines: move logic into a crate"
            ));
        }
        for (forbidden, why) in [
            (
                "json!",
                "builds JSON by hand; return a typed receipt from stopline-control",
            ),
            (
                "[\"",
                "reads a receipt back by string keys; use its typed fields",
            ),
            ("std::fs", "touches files; the store and the verbs do that"),
        ] {
            if text.contains(forbidden) {
                problems.push(format!("crates/stopline/src/{name}: {why} ({forbidden})"));
            }
        }
    }
    problems
}
