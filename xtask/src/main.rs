//! `cargo xtask lint`: check the architecture invariants of ARCHITECTURE.md.
//! `cargo xtask dist [--out DIR]`: build the release binary, generate shell completions and man
//! pages from the CLI definition into `dist/` (or DIR), and package all of it with the systemd
//! unit as `stopline_<version>_<arch>.deb` there (see `dist.rs`).
//! `cargo xtask plot-history OUT.svg RUN.json…`: the plot of `stopline bench history` runs
//! against history size (see `history_plot.rs`).
//! `cargo xtask release-gate`: build the release binary, qualify it by its own conformance
//! battery, and write `target/release-manifest.json` (see `release_gate.rs`).
#![allow(clippy::disallowed_methods)] // repository chores: packaging, the release gate, cargo itself

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
        "dist" => {
            let mut args = std::env::args().skip(2);
            let out = match (args.next().as_deref(), args.next()) {
                (None, _) => xtask::root()
                    .canonicalize()
                    .unwrap_or_else(|_| xtask::root())
                    .join("dist"),
                (Some("--out"), Some(dir)) => std::path::PathBuf::from(dir),
                _ => {
                    eprintln!("usage: cargo xtask dist [--out DIR]");
                    std::process::exit(2);
                }
            };
            match xtask::dist::build(&xtask::root(), &out) {
                Ok(files) => {
                    for file in files {
                        println!("{}", file.display());
                    }
                }
                Err(error) => {
                    eprintln!("dist: {error}");
                    std::process::exit(1);
                }
            }
        }
        "plot-history" => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            let Some((out, runs)) = args.split_first().filter(|(_, runs)| !runs.is_empty()) else {
                eprintln!("usage: cargo xtask plot-history OUT.svg RUN.json…");
                std::process::exit(2);
            };
            let receipts: Result<Vec<serde_json::Value>, String> = runs
                .iter()
                .map(|run| {
                    let text = std::fs::read_to_string(run).map_err(|e| format!("{run}: {e}"))?;
                    serde_json::from_str(&text).map_err(|e| format!("{run}: {e}"))
                })
                .collect();
            if let Err(error) =
                receipts.and_then(|r| xtask::history_plot::plot(std::path::Path::new(out), &r))
            {
                eprintln!("plot-history: {error}");
                std::process::exit(1);
            }
            println!("{out}");
        }
        "release-gate" => match xtask::release_gate::run(&xtask::root()) {
            Ok(manifest) => println!("release-gate: qualified; manifest {}", manifest.display()),
            Err(error) => {
                eprintln!("{error}");
                std::process::exit(1);
            }
        },
        _ => {
            eprintln!(
                "usage: cargo xtask lint | cargo xtask dist [--out DIR] | cargo xtask plot-history OUT.svg RUN.json… | cargo xtask release-gate"
            );
            std::process::exit(2);
        }
    }
}
