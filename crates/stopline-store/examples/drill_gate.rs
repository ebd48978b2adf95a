//! The drill gate's read of the drill index, for instruction counts (callgrind): a
//! diagnostic, not a benchmark. Builds a home whose evidence log holds `DRILLS` drill records
//! (so the index keeps its `RECENT_DRILLS` newest), then reads the drills `READS` times as the
//! gate does (`summary`: `Evidence::drill_summary`) or as `GET /v1/drills` does (`index`:
//! `Evidence::drills`). The difference between two `READS` is the reads' own cost.
//!
//! ```sh
//! cargo build --release -p stopline-store --example drill_gate
//! for r in 0 100; do valgrind --tool=callgrind --callgrind-out-file=cg.summary.$r \
//!   target/release/examples/drill_gate DIR summary 150 $r; done
//! ```
#![allow(clippy::disallowed_methods)] // an example building its own scratch home

use serde_json::json;
use std::path::PathBuf;
use stopline_store::Store;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, how, drills, reads] = args.as_slice() else {
        eprintln!("usage: drill_gate DIR summary|index DRILLS READS");
        std::process::exit(2);
    };
    let drills: u64 = drills.parse().expect("DRILLS");
    let reads: u64 = reads.parse().expect("READS");
    let home = PathBuf::from(dir).join(format!("home-{how}-{drills}-{reads}"));
    let _ = std::fs::remove_dir_all(&home);
    let store = Store::open(&home);
    store.ensure_home().expect("home");
    for n in 0..drills {
        // A drill record with a body of the size the drill writes (its per-caller figures).
        let calls: Vec<_> = (0..20).map(|i| json!({"caller": i, "ms": 1.5})).collect();
        let record = stopline_store::chain::fields([
            (
                "schema",
                json!(stopline_store::evidence::drills::DRILL_SCHEMA),
            ),
            ("harness_version", json!("bench")),
            ("pass", json!(true)),
            ("n", json!(n)),
            ("calls", json!(calls)),
        ]);
        store
            .evidence()
            .append(stopline_store::evidence::drills::DRILL_SCHEMA, record)
            .expect("append");
    }
    let mut passed = 0;
    for _ in 0..reads {
        let last = match how.as_str() {
            "summary" => store
                .evidence()
                .drill_summary()
                .expect("gate")
                .history("bench"),
            _ => store.evidence().drills().expect("index").history("bench"),
        };
        passed += usize::from(last.last_passed == Some(true));
    }
    println!("{passed}");
}
