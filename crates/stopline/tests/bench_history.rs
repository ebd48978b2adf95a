//! `stopline bench history --json`: the real binary builds an aged home beside a
//! fresh one and reports every measure side by side, and an idle gateway's CPU and RSS. The
//! figures are not judged here (speed is measured, never asserted); the shape is.

mod util;
use util::Home;

#[test]
fn the_history_benchmark_reports_every_measure_fresh_beside_aged() {
    let home = Home::new();
    let run = home.run(&[
        "bench",
        "history",
        "--operations",
        "300",
        "--cycles",
        "20",
        "--evidence",
        "20",
        "--runs",
        "20",
        "--revocations",
        "10",
        "--samples",
        "2",
        "--idle-window-s",
        "0.5",
    ]);
    run.assert_ok();
    let receipt = run.json();
    assert_eq!(receipt["aged"]["operations"], 300, "{receipt}");
    assert_eq!(receipt["aged"]["cycles"], 20, "{receipt}");
    assert_eq!(receipt["aged"]["evidence"], 20, "{receipt}");
    assert_eq!(receipt["aged"]["runs"], 20, "{receipt}");
    let runs = receipt["runs"].as_array().expect("runs");
    let measures: Vec<&str> = runs.iter().filter_map(|r| r["measure"].as_str()).collect();
    assert_eq!(
        measures,
        [
            "check",
            "status",
            "engage",
            "disengage",
            "gateway_reload",
            "engage_to_refusal",
            "spend_reserve_fresh",
            "spend_reserve",
            "drill_gate",
            "evidence_whole_read"
        ],
        "{receipt}"
    );
    for run in runs {
        for field in [
            "fresh_p50_ms",
            "live_p50_ms",
            "aged_p50_ms",
            "ratio",
            "ratio_vs_live",
        ] {
            assert!(
                run[field].as_f64().is_some_and(|v| v > 0.0),
                "{field} of {run}"
            );
        }
    }
    assert_eq!(receipt["live"]["unresolved_operations"], 3, "{receipt}");
    assert_eq!(receipt["live"]["spend_in_doubt"], 3, "{receipt}");
    assert_eq!(receipt["aged"]["spend_journals"], 30, "{receipt}");
    assert_eq!(receipt["aged"]["spend_reservations"], 30, "{receipt}");
    // check and admission with 16 labels and the revocations on record, beside none.
    let authority = &receipt["authority"];
    assert_eq!(authority["labels"], 16, "{authority}");
    assert_eq!(authority["revocations"], 10, "{authority}");
    for field in [
        "check_none_p50_ms",
        "check_loaded_p50_ms",
        "check_ratio",
        "admission_none_p50_us",
        "admission_loaded_p50_us",
        "admission_ratio",
    ] {
        assert!(
            authority[field].as_f64().is_some_and(|v| v > 0.0),
            "{field} of {authority}"
        );
    }
    let idle = &receipt["idle_gateway"];
    assert!(idle["cpu_pct"].as_f64().is_some_and(|v| v >= 0.0), "{idle}");
    assert!(idle["rss_mb"].as_f64().is_some_and(|v| v > 1.0), "{idle}");
    assert!(
        idle["live_rss_mb"].as_f64().is_some_and(|v| v > 1.0),
        "{idle}"
    );
    // The throwaway homes are gone; the home named on the command line was never touched.
    assert!(home.entries("ops").is_empty(), "{:?}", home.entries("ops"));
}
