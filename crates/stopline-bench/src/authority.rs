//! `bench history`'s authority measure (docs/reference.md §5, "Revoking one token" and "Bounded
//! tail"): what `check` (the real binary) and an admission decision (`ControlView::decide`, in
//! this process) cost for a token carrying labels on a home whose epoch map holds label
//! revisions and token revocations, beside a plain token on a home that holds none. Figures,
//! never assertions.
#![allow(clippy::disallowed_methods)] // throwaway homes this benchmark built itself and the binary it times

use crate::stats::quantile;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use stopline_core::{Level, Scope, TaskClass};
use stopline_store::{EngageRequest, Store};

/// The authority measure: `check` and an admission decision with `labels` labels and
/// `revocations` revocations on record, beside none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuthorityCost {
    /// Labels the loaded token carries, and label revisions (of other labels) on record.
    pub labels: usize,
    /// Token revocations on record (of other tokens).
    pub revocations: usize,
    /// Samples of `check` per home.
    pub check_samples: usize,
    /// `check --token` on the plain home, p50 ms.
    pub check_none_p50_ms: f64,
    /// `check --token` on the loaded home, p50 ms.
    pub check_loaded_p50_ms: f64,
    /// Loaded over plain.
    pub check_ratio: f64,
    /// Samples of the admission decision per home.
    pub admission_samples: usize,
    /// One admission decision on the plain home's view, p50 µs.
    pub admission_none_p50_us: f64,
    /// One on the loaded home's view, p50 µs.
    pub admission_loaded_p50_us: f64,
    /// Loaded over plain.
    pub admission_ratio: f64,
}

fn other(error: impl std::fmt::Display) -> io::Error {
    io::Error::other(error.to_string())
}

/// Mint a token in `home` with the binary: `token issue --agent probe` and `labels`.
fn mint(exe: &Path, home: &Path, labels: &[String]) -> io::Result<String> {
    let mut command = Command::new(exe);
    command
        .arg("--home")
        .arg(home)
        .args(["token", "issue", "--agent", "probe"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .env_remove("STOPLINE_TOKEN");
    for label in labels {
        command.args(["--label", label]);
    }
    let output = command.output()?;
    if !output.status.success() {
        return Err(other("token issue failed in a benchmark home"));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Give `home` `labels` emergencies on labels no probe carries (each a label revision) and
/// `revocations` revocations of tokens that are not the probe's.
fn load(home: &Path, labels: usize, revocations: usize) -> io::Result<()> {
    let store = Store::open(home);
    for i in 0..labels {
        let label = stopline_core::Label::parse(&format!("bench=other-{i}"))
            .map_err(|e| other(e.message))?;
        store
            .engage(&EngageRequest::console(
                Scope::Label(label),
                Level::Emergency,
                "operator",
                "history benchmark",
            ))
            .map_err(other)?;
    }
    for i in 0..revocations {
        let scope = Scope::Token {
            jti: format!("{i:032x}"),
            delegates: i % 2 == 0,
        };
        store
            .revoke_token(&scope, "operator", "history benchmark")
            .map_err(other)?;
    }
    Ok(())
}

fn p50(samples: &mut [Duration]) -> Duration {
    samples.sort();
    quantile(samples, 0.5)
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// Measure on `plain` (a home with nothing on record) and `loaded` (one this makes: `labels`
/// label revisions and `revocations` revocations), `samples` `check`s each and
/// `admission_samples` decisions each, alternating the homes.
pub fn authority_cost(
    exe: &Path,
    plain: &Path,
    loaded: &Path,
    labels: usize,
    revocations: usize,
    samples: usize,
    admission_samples: usize,
) -> io::Result<AuthorityCost> {
    load(loaded, labels, revocations)?;
    let carried: Vec<String> = (0..labels.min(16)).map(|i| format!("k{i}=v")).collect();
    let tokens = [mint(exe, plain, &[])?, mint(exe, loaded, &carried)?];
    let homes = [plain, loaded];
    let mut checks: [Vec<Duration>; 2] = Default::default();
    for _ in 0..samples.max(1) {
        for (slot, home) in homes.iter().enumerate() {
            let started = Instant::now();
            let status = Command::new(exe)
                .arg("--home")
                .arg(home)
                .args(["--json", "check", "--class", "noncritical", "--token"])
                .arg(&tokens[slot])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .env_remove("STOPLINE_TOKEN")
                .status()?;
            checks[slot].push(started.elapsed());
            if status.code() != Some(0) {
                return Err(other("a benchmark token was not allowed"));
            }
        }
    }
    let subjects = tokens
        .iter()
        .map(|t| stopline_token::decode_unverified(t).map(|c| (c.subject(), c.authority())))
        .collect::<Result<Vec<_>, _>>()
        .map_err(other)?;
    let views: Vec<_> = homes.iter().map(|h| Store::open(*h).load_view()).collect();
    let now_ms = Store::open(plain).now_ms();
    let mut decisions: [Vec<Duration>; 2] = Default::default();
    for _ in 0..admission_samples.max(1) {
        for (slot, view) in views.iter().enumerate() {
            let (subject, authority) = &subjects[slot];
            let started = Instant::now();
            let receipt = view.decide(
                subject,
                TaskClass::Noncritical,
                Some(*authority),
                None,
                now_ms,
            );
            decisions[slot].push(started.elapsed());
            if receipt.decision != stopline_core::Decision::Allow {
                return Err(other("a benchmark token was not admitted"));
            }
        }
    }
    let [check_none, check_loaded] = checks.each_mut().map(|s| p50(s).as_secs_f64() * 1e3);
    let [admission_none, admission_loaded] =
        decisions.each_mut().map(|s| p50(s).as_secs_f64() * 1e6);
    Ok(AuthorityCost {
        labels,
        revocations,
        check_samples: samples.max(1),
        check_none_p50_ms: check_none,
        check_loaded_p50_ms: check_loaded,
        check_ratio: ratio(check_loaded, check_none),
        admission_samples: admission_samples.max(1),
        admission_none_p50_us: admission_none,
        admission_loaded_p50_us: admission_loaded,
        admission_ratio: ratio(admission_loaded, admission_none),
    })
}
