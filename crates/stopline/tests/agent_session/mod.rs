//! What the tests of real coding-agent CLIs (Claude Code, Codex) check alike: a stub upstream
//! that holds the session's fourth tool-offering model call while the test engages, and a work
//! directory whose `steps.log` says which steps the agent's tool ran.

use crate::gw::{self, Upstream};
use serde_json::Value;
use std::time::Duration;

/// The fields of the stub's executed-call records: the one that marks a call offering the
/// agent's tool (`bash`, `shell`) and the one that counts the tool results it carried.
pub struct StubFields {
    pub offers_tool: &'static str,
    pub results: &'static str,
}

/// The result counts of every tool-offering model call the stub executed, in order.
pub fn model_calls(upstream: &Upstream, fields: &StubFields) -> Vec<u64> {
    upstream
        .executed()
        .iter()
        .filter(|c| c[fields.offers_tool] == true)
        .filter_map(|c| c[fields.results].as_u64())
        .collect()
}

/// Wait until the stub holds the session's fourth model call; `output` is the agent's, shown
/// when it never does.
pub fn wait_until_held(upstream: &Upstream, output: impl Fn() -> String) {
    let held = gw::within(Duration::from_secs(120), || {
        upstream
            .executed()
            .iter()
            .any(|c| c["held"] == true)
            .then_some(())
    });
    assert!(
        held.is_some(),
        "the session never reached its fourth model call: {:?}\n{}",
        upstream.executed(),
        output()
    );
}

/// Three steps ran, then the stop: no step and no model call after it, and the held call the
/// last request of any kind the upstream saw.
pub fn assert_stopped_after_three_steps(
    upstream: &Upstream,
    fields: &StubFields,
    steps: Vec<String>,
    output: &str,
) {
    assert_eq!(
        steps,
        vec!["step-1", "step-2", "step-3"],
        "no step ran after the stop\n{output}"
    );
    assert_eq!(
        model_calls(upstream, fields),
        vec![0, 1, 2, 3],
        "no model call reached the upstream after the stop\n{output}"
    );
    let executed = upstream.executed();
    assert_eq!(
        executed.last().map(|c| c["held"].clone()),
        Some(Value::Bool(true)),
        "the held call is the last request of any kind the upstream saw: {executed:?}"
    );
}
