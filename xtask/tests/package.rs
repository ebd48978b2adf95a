//! `cargo xtask dist`'s Debian package and the release gate's try of it, against stand-in
//! binaries (shell scripts): the package lays out the binary byte for byte, gzipped man pages,
//! completions for three shells and the systemd unit pointing at the packaged binary, owned by
//! root; the gate runs the extracted binary and refuses one that does not stop.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A stand-in binary that behaves like a stopline that stops: `check` after an `engage` of
/// `$STOPLINE_HOME` exits 4; or, with `stops = false`, one whose `check` always allows.
fn stand_in(dir: &Path, stops: bool) -> PathBuf {
    let path = dir.join("stopline");
    let check = if stops {
        r#"[ -e "$STOPLINE_HOME/engaged" ] && exit 4; exit 0"#
    } else {
        "exit 0"
    };
    let script = format!(
        "#!/bin/sh\ncase \"$1\" in\n  init) mkdir -p \"$STOPLINE_HOME\" ;;\n  engage) touch \"$STOPLINE_HOME/engaged\" ;;\n  check) {check} ;;\n  man) echo '.TH stopline 1' ;;\n  *) exit 2 ;;\nesac\n"
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn field(deb: &Path, name: &str) -> String {
    let out = Command::new("dpkg-deb")
        .arg("-f")
        .arg(deb)
        .arg(name)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_package_ships_the_binary_man_pages_completions_and_unit_owned_by_root() {
    let dir = tempfile::tempdir().unwrap();
    let binary = stand_in(dir.path(), true);
    let out = dir.path().join("out");
    let deb = xtask::dist::package(&xtask::root(), &binary, &out).expect("package");
    assert_eq!(
        deb.file_name().unwrap().to_string_lossy(),
        format!(
            "stopline_{}_{}.deb",
            env!("CARGO_PKG_VERSION"),
            field(&deb, "Architecture")
        )
    );
    assert_eq!(field(&deb, "Package"), "stopline");
    assert_eq!(field(&deb, "Version"), env!("CARGO_PKG_VERSION"));
    let contents = xtask::dist::contents(&deb).unwrap();
    for path in [
        "usr/bin/stopline",
        "usr/share/man/man1/stopline.1.gz",
        "usr/share/man/man1/stopline-engage.1.gz",
        "usr/share/bash-completion/completions/stopline",
        "usr/share/zsh/vendor-completions/_stopline",
        "usr/share/fish/vendor_completions.d/stopline.fish",
        "lib/systemd/system/stopline-serve.service",
        "usr/lib/sysusers.d/stopline.conf",
    ] {
        assert!(
            contents.iter().any(|p| p == path),
            "{path} not in {contents:?}"
        );
    }
    let listing = Command::new("dpkg-deb")
        .arg("-c")
        .arg(&deb)
        .output()
        .unwrap();
    for line in String::from_utf8_lossy(&listing.stdout).lines() {
        assert!(line.contains(" root/root "), "not owned by root: {line}");
    }
    let extracted = xtask::dist::extract(&deb, &dir.path().join("root")).unwrap();
    assert_eq!(
        std::fs::read(&extracted).unwrap(),
        std::fs::read(&binary).unwrap()
    );
    let mode = std::fs::metadata(&extracted).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
    let unit = std::fs::read_to_string(
        dir.path()
            .join("root/lib/systemd/system/stopline-serve.service"),
    )
    .unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/stopline serve"), "{unit}");
    // The user the unit runs as is created by the package (nothing created it).
    assert!(unit.contains("User=stopline"), "{unit}");
    let sysusers =
        std::fs::read_to_string(dir.path().join("root/usr/lib/sysusers.d/stopline.conf")).unwrap();
    assert!(sysusers.starts_with("u stopline "), "{sysusers}");
    let control = dir.path().join("control");
    let out = Command::new("dpkg-deb")
        .arg("-e")
        .arg(&deb)
        .arg(&control)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let postinst = std::fs::read_to_string(control.join("postinst")).unwrap();
    assert!(
        postinst.contains("systemd-sysusers stopline.conf"),
        "{postinst}"
    );
    let mode = std::fs::metadata(control.join("postinst"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    let page = Command::new("zcat")
        .arg(dir.path().join("root/usr/share/man/man1/stopline.1.gz"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&page.stdout).contains(".TH stopline 1"));
}

#[test]
fn the_gate_tries_the_extracted_binary_and_refuses_one_that_does_not_stop() {
    let dir = tempfile::tempdir().unwrap();
    let good = stand_in(dir.path(), true);
    let entry = xtask::release_gate::package_and_try(&xtask::root(), &good, &dir.path().join("a"))
        .expect("a binary that stops passes");
    assert!(entry["path"].as_str().unwrap().ends_with(".deb"));
    assert_eq!(entry["sha256"].as_str().unwrap().len(), 64);

    let bad_dir = dir.path().join("bad");
    std::fs::create_dir(&bad_dir).unwrap();
    let bad = stand_in(&bad_dir, false);
    let error = xtask::release_gate::package_and_try(&xtask::root(), &bad, &dir.path().join("b"))
        .expect_err("a binary whose check allows after an engage must be refused")
        .to_string();
    assert!(error.contains("check --class critical"), "{error}");
}

/// The package shipped the release binary with its debug information (124 MB). An ELF
/// binary is packaged stripped: no debug sections, smaller, and the gate's comparison is with
/// the qualified binary stripped the same way.
#[test]
fn an_elf_binary_is_packaged_without_its_debug_information() {
    let dir = tempfile::tempdir().unwrap();
    // This test's own executable: an ELF file with debug information (the test profile).
    let binary = std::env::current_exe().unwrap();
    let sections = |path: &Path| {
        let out = Command::new("readelf")
            .arg("-S")
            .arg(path)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        sections(&binary).contains(".debug_info"),
        "the input has debug info"
    );
    let deb = xtask::dist::package(&xtask::root(), &binary, &dir.path().join("out")).unwrap();
    let extracted = xtask::dist::extract(&deb, &dir.path().join("root")).unwrap();
    let packaged = sections(&extracted);
    // (`.debug_gdb_scripts` is loaded with the program, not debug information: it stays.)
    for gone in [".debug_info", ".debug_line", ".debug_str", ".symtab"] {
        assert!(!packaged.contains(gone), "{gone} in {packaged}");
    }
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    assert!(
        size(&extracted) < size(&binary) / 2,
        "{} vs {}",
        size(&extracted),
        size(&binary)
    );
    let again = dir.path().join("again");
    xtask::dist::stripped(&binary, &again).unwrap();
    assert_eq!(
        std::fs::read(&again).unwrap(),
        std::fs::read(&extracted).unwrap(),
        "stripping is deterministic: the gate can compare"
    );
}
