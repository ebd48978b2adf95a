//! The supply chain's rules (`deny.toml`, in cargo-deny's format): which licences a dependency
//! may carry, where crates may come from, and which crates must never be linked. Checked here
//! from `cargo metadata` for the target this product ships on, with no network (no advisory
//! database): bans, sources and licences. `cargo deny check bans licenses sources` reads the
//! same file, for anyone who has cargo-deny.
//!
//! A licence expression is evaluated with the `spdx` crate (the one cargo-deny uses), in its lax
//! mode so the old `MIT/Apache-2.0` spelling still reads as `MIT OR Apache-2.0`. Workspace members
//! (no `source`) are ours and not judged; every other package must be satisfiable by `allow`
//! alone, or be named in `exceptions` with the licences it may use.

use serde::Deserialize;
use std::path::Path;
use std::process::Command;

/// The triple the product ships on: dependencies only other targets pull in are not linked.
pub const SHIPPED_TARGET: &str = "x86_64-unknown-linux-gnu";

/// The crates.io index, the only registry a dependency may come from unless `allow-registry`
/// names another.
pub const CRATES_IO: &str = "https://github.com/rust-lang/crates.io-index";

/// The parts of `deny.toml` checked here.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct DenyConfig {
    /// `[licenses]`.
    #[serde(default)]
    pub licenses: Licenses,
    /// `[bans]`.
    #[serde(default)]
    pub bans: Bans,
    /// `[sources]`.
    #[serde(default)]
    pub sources: Sources,
}

/// `[licenses]`: the SPDX identifiers any dependency may be used under, and per-crate exceptions.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Licenses {
    /// Licence identifiers allowed for every crate.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Crates allowed further licences (`{ name = "ring", allow = ["OpenSSL"] }`).
    #[serde(default)]
    pub exceptions: Vec<LicenseException>,
}

/// One `[[licenses.exceptions]]` entry.
#[derive(Debug, Deserialize)]
pub struct LicenseException {
    /// The crate's name.
    pub name: String,
    /// The further licences it may use.
    pub allow: Vec<String>,
}

/// `[bans]`: crates that must never be in the graph.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Bans {
    /// The banned crates.
    #[serde(default)]
    pub deny: Vec<Banned>,
}

/// One banned crate, with why.
#[derive(Debug, Deserialize)]
pub struct Banned {
    /// The crate's name.
    pub name: String,
    /// Why it is banned (printed with the violation).
    #[serde(default)]
    pub reason: Option<String>,
}

/// `[sources]`: where crates may come from.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Sources {
    /// `"deny"` refuses a registry not in `allow-registry`.
    #[serde(default)]
    pub unknown_registry: Option<String>,
    /// `"deny"` refuses a git dependency not in `allow-git`.
    #[serde(default)]
    pub unknown_git: Option<String>,
    /// Registries allowed beside crates.io.
    #[serde(default)]
    pub allow_registry: Vec<String>,
    /// Git repositories allowed.
    #[serde(default)]
    pub allow_git: Vec<String>,
}

/// One package of `cargo metadata`, as far as the rules look at it.
#[derive(Debug, Deserialize)]
pub struct Package {
    /// `name`.
    pub name: String,
    /// `version`.
    pub version: String,
    /// `source`: absent for workspace members and path dependencies.
    #[serde(default)]
    pub source: Option<String>,
    /// `license`, an SPDX expression.
    #[serde(default)]
    pub license: Option<String>,
}

/// The part of `cargo metadata`'s output the rules read.
#[derive(Debug, Deserialize)]
pub struct Metadata {
    /// Every package of the resolved graph (filtered to [`SHIPPED_TARGET`]).
    pub packages: Vec<Package>,
}

/// Every violation of `config` in `metadata`, one line each, sorted.
pub fn violations(config: &DenyConfig, metadata: &Metadata) -> Vec<String> {
    let mut problems = Vec::new();
    for package in &metadata.packages {
        let Some(source) = package.source.as_deref() else {
            continue; // a workspace member or a path dependency: ours
        };
        let who = format!("{} {}", package.name, package.version);
        if let Some(ban) = config.bans.deny.iter().find(|b| b.name == package.name) {
            problems.push(format!(
                "{who} is banned by deny.toml{}",
                ban.reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ));
        }
        if let Some(problem) = source_problem(&config.sources, source) {
            problems.push(format!("{who}: {problem}"));
        }
        if let Some(problem) = license_problem(&config.licenses, package) {
            problems.push(format!("{who}: {problem}"));
        }
    }
    problems.sort();
    problems.dedup();
    problems
}

fn source_problem(sources: &Sources, source: &str) -> Option<String> {
    if let Some(registry) = source
        .strip_prefix("registry+")
        .or_else(|| source.strip_prefix("sparse+"))
    {
        let known = registry == CRATES_IO
            || registry == "https://index.crates.io/"
            || sources.allow_registry.iter().any(|r| r == registry);
        return (!known && sources.unknown_registry.as_deref() == Some("deny")).then(|| {
            format!("comes from the registry {registry}, which deny.toml does not allow")
        });
    }
    if let Some(git) = source.strip_prefix("git+") {
        let repo = git.split(['?', '#']).next().unwrap_or(git);
        let known = sources.allow_git.iter().any(|g| g == repo);
        return (!known && sources.unknown_git.as_deref() == Some("deny")).then(|| {
            format!("comes from the git repository {repo}, which deny.toml does not allow")
        });
    }
    Some(format!("comes from an unknown kind of source: {source}"))
}

fn license_problem(licenses: &Licenses, package: &Package) -> Option<String> {
    let Some(text) = package.license.as_deref() else {
        return Some("declares no SPDX licence (only a licence file, or none)".into());
    };
    let expression = match spdx::Expression::parse_mode(text, spdx::ParseMode::LAX) {
        Ok(expression) => expression,
        Err(error) => return Some(format!("licence {text:?} does not parse: {error}")),
    };
    let extra: &[String] = licenses
        .exceptions
        .iter()
        .find(|e| e.name == package.name)
        .map(|e| e.allow.as_slice())
        .unwrap_or_default();
    let allowed = |req: &spdx::LicenseReq| {
        let id = match &req.license {
            spdx::LicenseItem::Spdx { id, .. } => id.name,
            spdx::LicenseItem::Other { .. } => return false,
        };
        // An exception (`WITH LLVM-exception`) only ever grants more: judge the licence itself.
        licenses.allow.iter().chain(extra).any(|a| a == id)
    };
    (!expression.evaluate(allowed)).then(|| {
        format!("licence {text:?} is not satisfiable by deny.toml's [licenses] allow list")
    })
}

/// Read `deny.toml` at the workspace `root`.
pub fn config(root: &Path) -> Result<DenyConfig, String> {
    let path = root.join("deny.toml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// `cargo metadata` of the workspace at `root` for [`SHIPPED_TARGET`], from the lock file.
pub fn metadata(root: &Path) -> Result<Metadata, String> {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--filter-platform",
        ])
        .arg(SHIPPED_TARGET)
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata's output: {e}"))
}

/// The supply-chain violations of the workspace at `root`, one line each.
pub fn check(root: &Path) -> Vec<String> {
    match config(root).and_then(|c| metadata(root).map(|m| (c, m))) {
        Ok((config, metadata)) => violations(&config, &metadata)
            .into_iter()
            .map(|p| format!("deny.toml: {p}"))
            .collect(),
        Err(error) => vec![format!("deny.toml: cannot check: {error}")],
    }
}
