//! Fuzz the MCP JSON-RPC parser (every frame an agent sends towards an MCP server goes through
//! it): any bytes must parse or be refused without a panic, and what is forwarded — the
//! re-serialized frame — must parse back to exactly the message that was judged.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stopline_mcp::jsonrpc::parse;

fuzz_target!(|data: &[u8]| {
    if let Ok(judged) = parse(data) {
        let forwarded = judged.to_bytes();
        let reparsed = parse(&forwarded).expect("a forwarded frame always parses");
        assert_eq!(reparsed, judged, "the upstream would see another message");
        assert_eq!(reparsed.to_bytes(), forwarded, "re-serialization is stable");
    }
});
