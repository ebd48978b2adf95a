//! `cargo xtask dist`: what a package of stopline ships beside the binary, generated from the
//! CLI definition itself (`stopline::cli::Cli`) so it can never drift from the flags the binary
//! parses: shell completions for bash, zsh and fish (`dist/completions/`) and man pages
//! (`dist/man/stopline.1` and one page per subcommand).
//!
//! It writes only under the output directory it is given, and never touches the hand-written
//! files beside them (`dist/systemd/stopline-serve.service`).

use clap::CommandFactory;
use clap_complete::Shell;
use std::path::{Path, PathBuf};

/// Generate completions and man pages under `out` (normally `<repo>/dist`); returns the files
/// written.
pub fn generate(out: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let completions = out.join("completions");
    std::fs::create_dir_all(&completions)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let mut command = stopline::cli::Cli::command();
        written.push(clap_complete::generate_to(
            shell,
            &mut command,
            "stopline",
            &completions,
        )?);
    }
    let man = out.join("man");
    std::fs::create_dir_all(&man)?;
    let command = stopline::cli::Cli::command();
    clap_mangen::generate_to(command, &man)?;
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&man)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "1"))
        .collect();
    pages.sort();
    written.extend(pages);
    Ok(written)
}
