//! `stopline conformance` (docs/reference.md §11): run the boundary battery of `stopline-assurance` against
//! this very executable and print its report; exit 0 only when every case passed.
//!
//! Also the deliberately broken refusals of the `conformance-broken` feature, which exist only
//! so a test can show that the battery fails a binary that accepts what it must refuse. The
//! feature is off by default, refuses to compile outside debug builds, and even when compiled
//! in does nothing unless `STOPLINE_CONFORMANCE_BREAK` names the break (comma-separated):
//! `reason_required` (engage accepts a blank reason) and `stale_token` (`check` allows a token
//! a stop made stale). A release binary contains none of it.

#[cfg(all(feature = "conformance-broken", not(debug_assertions)))]
compile_error!(
    "the conformance-broken feature is for tests only and never part of a release build"
);

/// Run the battery; print the report (JSON with `--json`); the exit code.
pub fn run(json: bool, filter: Option<String>) -> i32 {
    let options = stopline_assurance::conformance::Options {
        filter,
        progress: !json,
        ..Default::default()
    };
    match stopline_assurance::conformance::run(&options) {
        Ok(report) => crate::output::verdict(json, &report.json(), &report.text(), report.ok()),
        Err(error) => {
            crate::output::error_line(&format!("error: conformance: {error}"));
            if json {
                let refusal = stopline_core::Refusal::new(
                    stopline_core::RefusalCode::ControlIo,
                    error.to_string(),
                );
                let body = FailedToRun {
                    ok: false,
                    total: 0,
                    failed: 0,
                    error: &refusal,
                    cases: [(); 0],
                };
                let value = serde_json::to_value(body).unwrap_or_default();
                crate::output::line(&value.to_string());
            }
            1
        }
    }
}

/// The report of a battery that could not run at all: no case passed.
#[derive(serde::Serialize)]
struct FailedToRun<'a> {
    ok: bool,
    total: usize,
    failed: usize,
    error: &'a stopline_core::Refusal,
    cases: [(); 0],
}

/// True when this build deliberately breaks the refusal `which` (see the module comment).
#[cfg(feature = "conformance-broken")]
pub fn broken(which: &str) -> bool {
    std::env::var("STOPLINE_CONFORMANCE_BREAK")
        .map(|breaks| breaks.split(',').any(|b| b.trim() == which))
        .unwrap_or(false)
}

/// True when this build deliberately breaks the refusal `which`: never, in this build.
#[cfg(not(feature = "conformance-broken"))]
pub fn broken(_which: &str) -> bool {
    false
}
