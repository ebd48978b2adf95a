//! One `trip()` for every surface: each one's latch and `evidence-record.v1`, in a real home,
//! and every evidence line it writes validated against `schemas/evidence-record.v1.json`.

use serde_json::Value;
use stopline_control::config::Config;
use stopline_control::trip::{trip, Surface, Trip};
use stopline_control::Context;
use stopline_core::policy::ConditionMode;
use stopline_core::{BreakerKind, Level};
use stopline_store::Store;

fn validate(instance: &Value) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../schemas/evidence-record.v1.json"
    );
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:?}\n{instance}");
}

fn home() -> (tempfile::TempDir, Context) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("home"));
    store.ensure_home().unwrap();
    (dir, Context::new(store, Config::default()))
}

fn order(agent: &str, breaker: BreakerKind, trigger: &str, surface: Surface) -> Trip {
    Trip {
        agent: agent.into(),
        breaker,
        trigger: trigger.into(),
        threshold: 3.0,
        observed: 4.0,
        level: Level::HaltAll,
        surface,
        mode: ConditionMode::Enforce,
    }
}

/// The evidence log's lines as written, each validated against the schema.
fn log_lines(ctx: &Context) -> Vec<Value> {
    let path = ctx.store.layout().home().join("evidence/log.jsonl");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .inspect(validate)
        .collect()
}

#[test]
fn every_surface_trips_the_same_latch_and_files_the_same_record() {
    let cases = [
        (
            order(
                "gw-agent",
                BreakerKind::UnauthorizedCalls,
                "tool_not_allowed mcp:s:t",
                Surface::Gateway("gw_1".into()),
            ),
            "breaker:unauthorized_calls",
            "breaker",
        ),
        (
            order(
                "stdio-agent",
                BreakerKind::BudgetExhausted,
                "tool_calls",
                Surface::Stdio,
            ),
            "breaker:budget_exhausted",
            "budget_exhausted",
        ),
        (
            order(
                "run-agent",
                BreakerKind::BudgetExhausted,
                "wall_clock_s",
                Surface::RunWallClock("run-1".into()),
            ),
            "breaker:wall_clock",
            "budget_exhausted",
        ),
    ];
    let (_dir, ctx) = home();
    for (trip_order, by, kind) in &cases {
        let tripped = trip(&ctx, trip_order);
        assert!(tripped.evidence_error.is_none(), "{tripped:?}");
        let latch = tripped.latch.clone().expect("the latch was engaged");
        validate(&tripped.record.to_json());
        let view = ctx.store.load_view();
        let engaged = view
            .latches
            .iter()
            .find(|l| l.file == format!("{latch}.json"))
            .expect("the latch is in the view");
        let record = engaged.record.as_ref().unwrap();
        assert_eq!(
            (record.scope.to_string(), record.level, record.by.as_str()),
            (format!("agent:{}", trip_order.agent), Level::HaltAll, *by)
        );
        let line = log_lines(&ctx).pop().unwrap();
        assert_eq!(line["kind"], *kind, "{line}");
        assert_eq!(line["latch"], latch.as_str(), "{line}");
        assert_eq!(line["agent"], trip_order.agent.as_str(), "{line}");
        assert_eq!(line["breaker"], trip_order.breaker.as_str(), "{line}");
        assert_eq!(line["level"], "halt-all", "{line}");
    }
    let lines = log_lines(&ctx);
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["gateway"], "gw_1");
    assert!(lines[1].get("gateway").is_none() && lines[1].get("run").is_none());
    assert_eq!(lines[2]["run"], "run-1");
}

/// A trip that only observes files its record (`mode: observe`, no latch) and engages nothing.
#[test]
fn an_observed_trip_files_its_record_and_engages_nothing() {
    let (_dir, ctx) = home();
    let mut observed = order(
        "watched",
        BreakerKind::RefusedEgress,
        "egress example.com",
        Surface::Gateway("gw_1".into()),
    );
    observed.mode = ConditionMode::Observe;
    let tripped = trip(&ctx, &observed);
    assert_eq!(tripped.latch, None);
    assert!(tripped.evidence_error.is_none());
    let lines = log_lines(&ctx);
    assert_eq!(lines.len(), 1);
    assert_eq!(
        (lines[0]["mode"].as_str(), lines[0]["latch"].as_str()),
        (Some("observe"), Some(""))
    );
    assert!(ctx.store.latches().active(None).0.is_empty());
}
