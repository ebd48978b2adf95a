//! `cargo xtask release-gate`: qualify the release binary by its own conformance battery, and
//! write `target/release-manifest.json` only when it passed.
//!
//! Steps (docs/reference.md §11; the seed's candidate-binary publication gate): remove any stale manifest;
//! build `stopline` in release mode; hash it; run its own `conformance --json` as a bounded
//! child (stdin closed, stdout and stderr drained on threads, polled every 100 ms, the child and
//! all its descendants killed by pid on timeout); require exit 0, a valid report with `ok: true`,
//! no failed case, at least [`MIN_CASES`] cases, and the report's `binary_sha256` equal to the
//! hash taken before; hash the binary again and require it unchanged; then write the manifest
//! to a temporary name and rename it into place. Any failure returns an error and leaves no
//! manifest behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The smallest battery that qualifies a binary.
pub const MIN_CASES: u64 = 45;
/// The bound on the conformance run (the battery takes about a minute).
pub const CONFORMANCE_TIMEOUT: Duration = Duration::from_secs(240);

/// Why the gate refused.
#[derive(Debug)]
pub struct GateError(pub String);

impl std::fmt::Display for GateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "release gate refused: {}", self.0)
    }
}

impl std::error::Error for GateError {}

fn refuse(why: impl Into<String>) -> GateError {
    GateError(why.into())
}

/// The target directory (`CARGO_TARGET_DIR`, else `<root>/target`).
pub fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| if p.is_absolute() { p } else { root.join(p) })
        .unwrap_or_else(|| root.join("target"))
}

/// Run the gate; returns the manifest's path.
pub fn run(root: &Path) -> Result<PathBuf, GateError> {
    let target = target_dir(root);
    let manifest = target.join("release-manifest.json");
    remove_stale(&manifest)?;
    eprintln!("release-gate: building the release binary");
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "stopline",
            "--bin",
            "stopline",
        ])
        .current_dir(root)
        .status()
        .map_err(|e| refuse(format!("cannot run cargo: {e}")))?;
    if !status.success() {
        return Err(refuse(format!("cargo build --release failed ({status})")));
    }
    let binary = target.join("release/stopline");
    qualify(root, &binary, &manifest, CONFORMANCE_TIMEOUT)?;
    // The package ships the qualified binary: build it, extract it as an installer would and
    // run what was extracted. A package that fails takes the manifest with it.
    match package_and_try(root, &binary, &target.join("dist")) {
        Ok(package) => add_package(&manifest, package),
        Err(error) => {
            let _ = std::fs::remove_file(&manifest);
            Err(error)
        }
    }
}

/// Package `binary` into `out`, extract the package into a throwaway directory and run the
/// extracted binary: it must be the qualified binary as the package strips it, byte for byte,
/// and it must stop a machine
/// on a throwaway home (`init`, `engage --scope machine`, then `check` blocks with exit 4) and
/// print its man page. Returns the package's manifest entry.
pub fn package_and_try(
    root: &Path,
    binary: &Path,
    out: &Path,
) -> Result<serde_json::Value, GateError> {
    eprintln!("release-gate: packaging {}", binary.display());
    let deb = crate::dist::package(root, binary, out)
        .map_err(|e| refuse(format!("cannot build the package: {e}")))?;
    let scratch = tempfile::tempdir().map_err(|e| refuse(format!("scratch directory: {e}")))?;
    let extracted = crate::dist::extract(&deb, &scratch.path().join("root"))
        .map_err(|e| refuse(format!("cannot extract {}: {e}", deb.display())))?;
    let expected = scratch.path().join("qualified-stripped");
    crate::dist::stripped(binary, &expected)
        .map_err(|e| refuse(format!("cannot strip {}: {e}", binary.display())))?;
    let (want, got) = (sha256(&expected)?, sha256(&extracted)?);
    if want != got {
        return Err(refuse(format!(
            "the packaged binary is not the qualified one: {got} != {want}"
        )));
    }
    let home = scratch.path().join("home");
    let try_it = |args: &[&str], want: i32| -> Result<String, GateError> {
        let out = Command::new(&extracted)
            .args(args)
            .env("STOPLINE_HOME", &home)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| refuse(format!("cannot run the extracted binary: {e}")))?;
        if out.status.code() != Some(want) {
            return Err(refuse(format!(
                "the extracted binary's `{}` exited {:?}, not {want}: {}",
                args.join(" "),
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    try_it(&["init"], 0)?;
    try_it(&["check", "--class", "noncritical"], 0)?;
    try_it(
        &[
            "engage",
            "--scope",
            "machine",
            "--level",
            "emergency",
            "--reason",
            "release gate: the packaged binary stops",
            "--by",
            "release-gate",
        ],
        0,
    )?;
    try_it(&["check", "--class", "critical"], 4)?;
    if !try_it(&["man"], 0)?.contains(".TH stopline 1") {
        return Err(refuse("the extracted binary's man page is not a man page"));
    }
    eprintln!(
        "release-gate: {} ships the qualified binary and stops",
        deb.display()
    );
    Ok(serde_json::json!({
        "path": deb.display().to_string(),
        "sha256": sha256(&deb)?,
    }))
}

/// Add the package entry to a written manifest (a temporary name, then a rename).
fn add_package(manifest: &Path, package: serde_json::Value) -> Result<PathBuf, GateError> {
    let fail = |e: String| {
        let _ = std::fs::remove_file(manifest);
        refuse(format!("cannot update {}: {e}", manifest.display()))
    };
    let text = std::fs::read_to_string(manifest).map_err(|e| fail(e.to_string()))?;
    let mut body: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?;
    body["package"] = package;
    let partial = partial(manifest);
    let text = serde_json::to_string_pretty(&body).unwrap_or_default();
    std::fs::write(&partial, format!("{text}\n"))
        .and_then(|()| std::fs::rename(&partial, manifest))
        .map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            fail(e.to_string())
        })?;
    Ok(manifest.to_path_buf())
}

/// The manifest and its temporary name, removed so a failure can leave neither behind.
fn remove_stale(manifest: &Path) -> Result<(), GateError> {
    for stale in [manifest.to_path_buf(), partial(manifest)] {
        match std::fs::remove_file(&stale) {
            Ok(()) => eprintln!("release-gate: removed stale {}", stale.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(refuse(format!("cannot remove {}: {e}", stale.display()))),
        }
    }
    Ok(())
}

fn partial(manifest: &Path) -> PathBuf {
    manifest.with_extension("json.partial")
}

/// Qualify `binary` by its own battery (bounded by `timeout`) and write `manifest`; on any
/// failure no manifest is left. `root` is the repository the binary was built from.
pub fn qualify(
    root: &Path,
    binary: &Path,
    manifest: &Path,
    timeout: Duration,
) -> Result<PathBuf, GateError> {
    remove_stale(manifest)?;
    let partial = partial(manifest);
    let before = sha256(binary)?;
    eprintln!("release-gate: {} sha256 {before}", binary.display());
    let started = Instant::now();
    let run = crate::bounded::run(
        Command::new(binary).args(["conformance", "--json"]),
        timeout,
    )
    .map_err(|e| refuse(format!("conformance: {e}")))?;
    let elapsed = started.elapsed();
    let report: serde_json::Value = serde_json::from_str(run.stdout.trim()).map_err(|e| {
        refuse(format!(
            "conformance printed no valid report ({e}); exit {:?}; stderr: {}",
            run.code,
            tail(&run.stderr)
        ))
    })?;
    let failed: Vec<&str> = report["cases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["pass"] != true)
        .filter_map(|c| c["id"].as_str())
        .collect();
    if run.code != Some(0) || report["ok"] != true || report["failed"] != 0 || !failed.is_empty() {
        return Err(refuse(format!(
            "conformance failed: exit {:?}, ok {}, failed {} {failed:?}",
            run.code, report["ok"], report["failed"]
        )));
    }
    let total = report["total"].as_u64().unwrap_or(0);
    if total < MIN_CASES {
        return Err(refuse(format!(
            "only {total} cases ran; at least {MIN_CASES} qualify a binary"
        )));
    }
    if report["binary_sha256"] != before.as_str() {
        return Err(refuse(format!(
            "the battery ran a different binary ({}) than the one built ({before})",
            report["binary_sha256"]
        )));
    }
    let after = sha256(binary)?;
    if after != before {
        return Err(refuse(format!(
            "the binary changed during qualification: {before} → {after}"
        )));
    }
    let body = serde_json::json!({
        "schema": "release-manifest.v1",
        "binary": binary.display().to_string(),
        "sha256": before,
        "version": env!("CARGO_PKG_VERSION"),
        "git_commit": git_commit(root),
        "conformance": {
            "ok": true, "total": total, "failed": 0,
            "binary_sha256": report["binary_sha256"],
            "elapsed_ms": elapsed.as_millis() as u64,
        },
        "timestamp": rfc3339_now(),
    });
    let text = serde_json::to_string_pretty(&body).unwrap_or_default();
    std::fs::write(&partial, format!("{text}\n"))
        .and_then(|()| std::fs::rename(&partial, manifest))
        .map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            refuse(format!("cannot write {}: {e}", manifest.display()))
        })?;
    Ok(manifest.to_path_buf())
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// sha256 (hex) of a file: the same function the battery reports its own binary's hash with.
pub fn sha256(path: &Path) -> Result<String, GateError> {
    stopline_assurance::conformance::report::sha256_file(path)
        .map_err(|e| refuse(format!("{}: {e}", path.display())))
}

/// `git rev-parse HEAD`, with `-dirty` when the tree has uncommitted changes; `null` without git.
fn git_commit(root: &Path) -> serde_json::Value {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(root)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "HEAD"]) {
        None => serde_json::Value::Null,
        Some(commit) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            serde_json::Value::String(if dirty {
                format!("{commit}-dirty")
            } else {
                commit
            })
        }
    }
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn rfc3339_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}
