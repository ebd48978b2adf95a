//! Replays the `jsonrpc` fuzz seed corpus on stable with the fuzz target's assertions (a frame
//! parses or is refused without a panic; what is forwarded parses back to exactly what was
//! judged), so CI exercises it without libFuzzer. Seed names say what the replay expects:
//! `valid-` must parse, `invalid-` must be refused; any other name (what the fuzzer writes) only
//! has to keep the properties.

use std::path::PathBuf;
use stopline_mcp::jsonrpc::parse;

#[test]
fn jsonrpc_corpus_round_trips_exactly_what_was_judged() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/jsonrpc");
    let mut seeds: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    seeds.sort();
    assert!(seeds.len() >= 10, "the jsonrpc corpus lost its seeds");
    for (name, path) in seeds {
        let bytes = std::fs::read(&path).unwrap();
        let judged = parse(&bytes);
        if name.starts_with("valid-") {
            assert!(judged.is_ok(), "{name}: {judged:?}");
        }
        if name.starts_with("invalid-") {
            assert!(judged.is_err(), "{name}: {judged:?}");
        }
        if let Ok(judged) = judged {
            let forwarded = judged.to_bytes();
            let reparsed = parse(&forwarded)
                .unwrap_or_else(|e| panic!("{name}: the forwarded frame does not parse: {e}"));
            assert_eq!(reparsed, judged, "{name}");
            assert_eq!(reparsed.to_bytes(), forwarded, "{name}");
        }
    }
}
