//! The recovery wall as a fact of the crate graph (docs/reference.md, "The owner console"): the
//! enforcement points — the gateway and the MCP proxy — never link the owner console's crate
//! (recovery, repair, drain, reconcile, rotate-key), `stopline run`'s supervisor loop, or the
//! store's owner verbs (its `owner` feature, which the etcd backend enables too). Read from
//! `cargo tree` over the workspace's normal dependencies, so a new edge anywhere on the way (a
//! crate the gateway depends on that depends on the owner crate) is caught as well as a direct
//! one. Dev-dependencies do not count: a test may drain a store; the library never links it.

use std::path::Path;
use std::process::Command;

/// The crates that enforce a stop on agents' calls: nothing of the owner's may be in their graph.
pub const ENFORCEMENT_POINTS: &[&str] = &["stopline-gateway", "stopline-mcp"];

/// The crates the enforcement points must never link: the owner console and `run`'s loop.
pub const OUT_OF_REACH: &[&str] = &["stopline-owner", "stopline-run"];

/// The store's feature that compiles its owner verbs (`OwnerPlane`).
pub const OWNER_FEATURE: &str = "stopline-store feature \"owner\"";

/// `cargo tree` in the workspace at `root` with `args`; its standard output, or why not.
fn cargo_tree(root: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(env!("CARGO"))
        .arg("tree")
        .args(args)
        .args(["--prefix", "none"])
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run cargo tree: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo tree {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The package names of `cargo tree --prefix none` lines (`name vX.Y.Z (…)`), feature lines
/// (`name feature "f"`) left out.
fn packages(tree: &str) -> Vec<&str> {
    tree.lines()
        .filter(|line| !line.contains(" feature \""))
        .filter_map(|line| line.split_whitespace().next())
        .collect()
}

/// Violations of the recovery wall in the workspace at `root`, one line each.
pub fn recovery_out_of_reach(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for crate_name in OUT_OF_REACH {
        // Every workspace package that links `crate_name` through normal dependencies.
        let tree = match cargo_tree(root, &["--workspace", "-e", "normal", "-i", crate_name]) {
            Ok(tree) => tree,
            Err(why) => {
                problems.push(why);
                continue;
            }
        };
        for point in ENFORCEMENT_POINTS {
            if packages(&tree).contains(point) {
                problems.push(format!(
                    "{point} links {crate_name} (cargo tree -e normal -i {crate_name}): the enforcement point must never reach the owner's verbs or run's loop"
                ));
            }
        }
    }
    // What the enforcement points compile when built on their own: the store without `owner`.
    let mut args = vec!["-e", "normal,features"];
    for point in ENFORCEMENT_POINTS {
        args.extend(["-p", point]);
    }
    match cargo_tree(root, &args) {
        Ok(tree) if tree.lines().any(|line| line.trim() == OWNER_FEATURE) => {
            problems.push(format!(
                "{} enable {OWNER_FEATURE} (cargo tree {}): the store's owner verbs are compiled into an enforcement point",
                ENFORCEMENT_POINTS.join(" and "),
                args.join(" ")
            ));
        }
        Ok(_) => {}
        Err(why) => problems.push(why),
    }
    problems
}
