//! `cargo xtask dist`: what a package of stopline ships beside the binary, generated from the
//! CLI definition itself (`stopline::cli::Cli`) so it can never drift from the flags the binary
//! parses: shell completions for bash, zsh and fish (`dist/completions/`) and man pages
//! (`dist/man/stopline.1` and one page per subcommand).
//!
//! It writes only under the output directory it is given, and never touches the hand-written
//! files beside them (`dist/systemd/stopline-serve.service`).
//!
//! [`package`] builds the Debian package (`stopline_<version>_<arch>.deb`) from a binary: the
//! binary stripped of its symbols and debug information (the release profile keeps debug info;
//! the package need not carry it), its man pages, completions, the systemd unit and the
//! `sysusers.d` entry that creates the `stopline` user the unit runs as, packed by `dpkg-deb`.
//! The release gate packages the binary it qualified, extracts the package and runs the
//! extracted binary.

use clap::CommandFactory;
use clap_complete::Shell;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// `cargo xtask dist`: build the release binary, generate the completions and man pages under
/// `out`, and package them with the binary as `out/stopline_<version>_<arch>.deb`. Returns every
/// file written, the package last.
pub fn build(repo: &Path, out: &Path) -> std::io::Result<Vec<PathBuf>> {
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "stopline",
            "--bin",
            "stopline",
        ])
        .current_dir(repo)
        .status()?;
    if !status.success() {
        return Err(std::io::Error::other(format!(
            "cargo build --release failed ({status})"
        )));
    }
    let binary = crate::release_gate::target_dir(repo).join("release/stopline");
    let mut written = generate(out)?;
    written.push(package(repo, &binary, out)?);
    Ok(written)
}

/// Where each generated or hand-written file goes in the package, relative to its root.
const BASH_COMPLETION: &str = "usr/share/bash-completion/completions/stopline";
const ZSH_COMPLETION: &str = "usr/share/zsh/vendor-completions/_stopline";
const FISH_COMPLETION: &str = "usr/share/fish/vendor_completions.d/stopline.fish";
const MAN_DIR: &str = "usr/share/man/man1";
const UNIT: &str = "lib/systemd/system/stopline-serve.service";
/// The system user the unit runs as, created by systemd-sysusers (at boot, and by `postinst`).
const SYSUSERS: &str = "usr/lib/sysusers.d/stopline.conf";
/// Its line: a system user and group `stopline`, home the unit's state directory, no shell.
pub const SYSUSERS_LINE: &str =
    "u stopline - \"stopline gateway\" /var/lib/stopline /usr/sbin/nologin\n";
/// Creates the user at install time, where systemd-sysusers exists.
const POSTINST: &str = "#!/bin/sh\nset -e\nif [ \"$1\" = configure ] && command -v systemd-sysusers > /dev/null; then\n    systemd-sysusers stopline.conf\nfi\n";
/// Where the packaged binary lives (the unit's `ExecStart` is rewritten to it).
pub const PACKAGED_BINARY: &str = "usr/bin/stopline";

/// Build `stopline_<version>_<arch>.deb` in `out` from `binary` (normally the release binary the
/// gate qualified): the binary as [`stripped`] makes it, gzipped man pages, completions for three
/// shells, the systemd unit and its user, staged in a temporary tree and packed by `dpkg-deb`
/// with root ownership. Returns the package's path.
pub fn package(repo: &Path, binary: &Path, out: &Path) -> std::io::Result<PathBuf> {
    let stage = tempfile::Builder::new()
        .prefix("stopline-deb.")
        .tempdir_in(out_parent(out)?)?;
    let root = stage.path().join("root");
    let generated = stage.path().join("generated");
    generate(&generated)?;
    stripped(binary, &root.join(PACKAGED_BINARY))?;
    install(
        &generated.join("completions/stopline.bash"),
        &root.join(BASH_COMPLETION),
        0o644,
    )?;
    install(
        &generated.join("completions/_stopline"),
        &root.join(ZSH_COMPLETION),
        0o644,
    )?;
    install(
        &generated.join("completions/stopline.fish"),
        &root.join(FISH_COMPLETION),
        0o644,
    )?;
    for page in std::fs::read_dir(generated.join("man"))? {
        let page = page?.path();
        let name = page.file_name().unwrap_or_default().to_string_lossy();
        let target = root.join(MAN_DIR).join(&*name);
        install(&page, &target, 0o644)?;
        // Debian policy: man pages are compressed, reproducibly (no name or time stamp).
        run(Command::new("gzip").args(["-9", "-n"]).arg(&target))?;
    }
    let unit = std::fs::read_to_string(repo.join("dist/systemd/stopline-serve.service"))?;
    let unit = unit.replace(
        "ExecStart=/usr/local/bin/stopline",
        &format!("ExecStart=/{PACKAGED_BINARY}"),
    );
    write(&root.join(UNIT), unit.as_bytes(), 0o644)?;
    write(&root.join(SYSUSERS), SYSUSERS_LINE.as_bytes(), 0o644)?;
    write(&root.join("DEBIAN/postinst"), POSTINST.as_bytes(), 0o755)?;
    let arch = output(Command::new("dpkg").arg("--print-architecture"))?;
    let version = env!("CARGO_PKG_VERSION");
    write(
        &root.join("DEBIAN/control"),
        control(version, &arch, installed_size_kib(&root)?).as_bytes(),
        0o644,
    )?;
    std::fs::create_dir_all(out)?;
    let deb = out.join(format!("stopline_{version}_{arch}.deb"));
    run(Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zxz", "--build"])
        .arg(&root)
        .arg(&deb))?;
    Ok(deb)
}

/// Write `binary` to `to` (mode 0755) as the package ships it: an ELF file without its symbols
/// and debug information (`strip --strip-all`, deterministic, so the gate can compare), anything
/// else (a test's stand-in script) byte for byte.
pub fn stripped(binary: &Path, to: &Path) -> std::io::Result<()> {
    let mut magic = [0u8; 4];
    let is_elf = std::io::Read::read_exact(&mut std::fs::File::open(binary)?, &mut magic).is_ok()
        && magic == *b"\x7fELF";
    if !is_elf {
        return install(binary, to, 0o755);
    }
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    run(Command::new("strip")
        .arg("--strip-all")
        .arg("-o")
        .arg(to)
        .arg(binary))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755))
}

/// The `DEBIAN/control` of the package.
fn control(version: &str, arch: &str, installed_kib: u64) -> String {
    format!(
        "Package: stopline\n\
         Version: {version}\n\
         Architecture: {arch}\n\
         Maintainer: stopline maintainers <maintainers@stopline.invalid>\n\
         Installed-Size: {installed_kib}\n\
         Depends: libc6 (>= 2.36)\n\
         Section: admin\n\
         Priority: optional\n\
         Homepage: https://github.com/stopline/stopline\n\
         Description: kill switch and containment control plane for AI agents\n \
         stopline stops an agent, a project, a run or the whole machine in one durable,\n \
         fsynced step; the stop reaches every tool call, write and model call through its\n \
         gateway and every process through its supervisor. Only the owner at a local\n \
         console can recover.\n"
    )
}

/// Extract `deb` into `into` with `dpkg-deb -x`, as an installer would lay it out; returns the
/// extracted binary's path.
pub fn extract(deb: &Path, into: &Path) -> std::io::Result<PathBuf> {
    run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(into))?;
    Ok(into.join(PACKAGED_BINARY))
}

/// Every path the package installs (`dpkg-deb -c`), without the leading `./`.
pub fn contents(deb: &Path) -> std::io::Result<Vec<String>> {
    let listing = output(Command::new("dpkg-deb").arg("-c").arg(deb))?;
    Ok(listing
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches("./").trim_end_matches('/').to_string())
        .filter(|p| !p.is_empty())
        .collect())
}

fn out_parent(out: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(out)?;
    Ok(out.to_path_buf())
}

fn install(from: &Path, to: &Path, mode: u32) -> std::io::Result<()> {
    let bytes = std::fs::read(from)?;
    write(to, &bytes, mode)
}

fn write(to: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(to, bytes)?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode))
}

fn installed_size_kib(root: &Path) -> std::io::Result<u64> {
    fn walk(dir: &Path, total: &mut u64) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                walk(&entry.path(), total)?;
            } else {
                *total += meta.len().div_ceil(1024);
            }
        }
        Ok(())
    }
    let mut total = 0;
    walk(root, &mut total)?;
    Ok(total)
}

fn run(command: &mut Command) -> std::io::Result<()> {
    output(command).map(drop)
}

/// Run `command`; its trimmed stdout, or an error naming it with its stderr.
fn output(command: &mut Command) -> std::io::Result<String> {
    let out = command.output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "{command:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
