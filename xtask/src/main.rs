//! `cargo xtask lint`: check the architecture invariants of ARCHITECTURE.md.

fn main() {
    let task = std::env::args().nth(1).unwrap_or_default();
    match task.as_str() {
        "lint" => {
            let problems = xtask::check();
            for p in &problems {
                eprintln!("invariant: {p}");
            }
            if !problems.is_empty() {
                std::process::exit(1);
            }
            println!("architecture invariants hold");
        }
        _ => {
            eprintln!("usage: cargo xtask lint");
            std::process::exit(2);
        }
    }
}
