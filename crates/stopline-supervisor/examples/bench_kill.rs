//! Print the kill bench for a few group sizes as JSON lines:
//! `cargo run -p stopline-supervisor --example bench_kill -- [ITERATIONS] [N…]` (as root).

fn main() {
    let mut args = std::env::args().skip(1);
    let iterations: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let sizes: Vec<usize> = args.filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() {
        vec![10, 100, 500]
    } else {
        sizes
    };
    for n in sizes {
        match stopline_supervisor::bench_kill(n, iterations) {
            Ok(bench) => println!("{}", serde_json::to_string(&bench).unwrap_or_default()),
            Err(error) => {
                eprintln!("error: bench kill n={n}: {error}");
                std::process::exit(1);
            }
        }
    }
}
