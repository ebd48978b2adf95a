//! A driver for counting the CPU the read-only MCP path costs per call, where the
//! machine's hardware counters are not available: run it under callgrind twice with different
//! call counts and divide the difference of the totals by the difference of the counts.
//!
//! ```sh
//! cargo build --release -p stopline-bench --example gateway_calls
//! for path in direct bare gateway; do for n in 200 1200; do
//!   valgrind --tool=callgrind --callgrind-out-file=cg.$path.$n \
//!     target/release/examples/gateway_calls $path $n; done; done
//! ```
//!
//! Each run sets up what `stopline bench gateway` does (upstream, gateway with the MCP proxy
//! mounted, bare proxy, every handshake, the warm-up) and then makes only the given number of
//! read-only `tools/call`s at concurrency 1 through one path. The gateway's added instructions
//! per call are its path's less the direct path's, the bare proxy's likewise.

use stopline_bench::gateway::{calls, OnePath};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = match args.next().as_deref() {
        Some("direct") => OnePath::Direct,
        Some("bare") => OnePath::Bare,
        Some("gateway") => OnePath::Gateway,
        _ => {
            eprintln!("usage: gateway_calls direct|bare|gateway CALLS");
            std::process::exit(2);
        }
    };
    let Some(count) = args.next().and_then(|n| n.parse().ok()) else {
        eprintln!("usage: gateway_calls direct|bare|gateway CALLS");
        std::process::exit(2);
    };
    let mount = Some(Box::new(stopline_mcp::http::router) as _);
    if let Err(error) = calls(path, count, mount) {
        eprintln!("{error}");
        std::process::exit(1);
    }
}
