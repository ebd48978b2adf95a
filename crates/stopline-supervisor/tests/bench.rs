//! The kill bench runs and prints its figures (timing is not asserted).

use stopline_supervisor::bench_kill;

#[test]
fn bench_kill_of_ten_processes_reports_percentiles() {
    let bench = bench_kill(10, 5).unwrap();
    println!("{}", serde_json::to_string(&bench).unwrap());
    assert_eq!((bench.n, bench.iterations), (10, 5));
    assert!(bench.kill_min_us <= bench.kill_p50_us);
    assert!(bench.kill_p50_us <= bench.kill_p99_us);
    assert!(bench.kill_p99_us <= bench.kill_max_us);
    let json = serde_json::to_value(&bench).unwrap();
    assert!(json.get("kill_p50_us").is_some() && json.get("kill_p99_us").is_some());
}
