//! `stopline completions <shell>` and `stopline man` (docs/reference.md §3): the shell completion scripts
//! and the manual page, generated from the very CLI definition this binary parses, so a user
//! with only the binary has them and they cannot drift from the flags. `cargo xtask dist`
//! generates the same files (and one page per subcommand) for the package.

use crate::cli::{Cli, ShellArg};
use clap::CommandFactory;
use std::io::Write;

/// Print the completion script for `shell`; exit 0, or 1 if stdout failed (a closed stdout
/// ends the command quietly, docs/reference.md §5).
pub fn completions(shell: ShellArg) -> i32 {
    let shell = match shell {
        ShellArg::Bash => clap_complete::Shell::Bash,
        ShellArg::Zsh => clap_complete::Shell::Zsh,
        ShellArg::Fish => clap_complete::Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "stopline", &mut script);
    emit(&script)
}

/// Print the manual page (roff) of `stopline`; exit 0, or 1 if it could not be written.
pub fn man() -> i32 {
    let mut page = Vec::new();
    if let Err(error) = clap_mangen::Man::new(Cli::command()).render(&mut page) {
        eprintln!("stopline man: {error}");
        return 1;
    }
    emit(&page)
}

fn emit(bytes: &[u8]) -> i32 {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => 1,
        Err(error) => {
            eprintln!("stopline: cannot write to stdout: {error}");
            1
        }
    }
}
