//! Every journal append lands whole or leaves the file as it was (docs/reference.md §5).
//!
//! On a real tmpfs filled by the test, an append that lands partly (the kernel writes what fits
//! and then reports ENOSPC) is cut back before the error is returned; a torn tail (a crash's
//! remnant, or a cut-back that failed) is cut before the next line is written, never glued to
//! it. The failpoint cases run in a child process of this test binary, which arms
//! `STOPLINE_FAILPOINTS` for itself.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

use std::path::{Path, PathBuf};
use std::process::Command;
use stopline_store::fs::{Fs, RealFs};

/// A tmpfs of a few pages, unmounted on drop.
struct SmallTmpfs {
    dir: tempfile::TempDir,
}

impl SmallTmpfs {
    fn mount() -> SmallTmpfs {
        let dir = tempfile::Builder::new()
            .prefix("stopline-append-")
            .tempdir_in("/tmp")
            .unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mount -t tmpfs needs root (the suite runs as root)"
        );
        SmallTmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fill every free page with one file; returns it.
    fn fill(&self) -> PathBuf {
        let filler = self.path().join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 4096];
        loop {
            if let Err(error) = std::io::Write::write_all(&mut file, &block) {
                assert_eq!(error.raw_os_error(), Some(28), "{error}");
                break;
            }
        }
        filler
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn line(n: usize, len: usize) -> Vec<u8> {
    let mut line = format!("{{\"n\":{n},\"pad\":\"").into_bytes();
    line.resize(len - 3, b'x');
    line.extend_from_slice(b"\"}\n");
    line
}

#[test]
fn an_append_on_a_full_tmpfs_lands_whole_or_leaves_the_journal_as_it_was() {
    let fs = SmallTmpfs::mount();
    let journal = fs.path().join("gateway-1-1.jsonl");
    let first = line(1, 100);
    RealFs
        .append(&journal, &first, true, "test.append")
        .unwrap();
    let filler = fs.fill();
    // The journal's page has room for ~4 KB more: a 40 KB line lands partly, then ENOSPC.
    let error = RealFs
        .append(&journal, &line(2, 40_000), true, "test.append")
        .unwrap_err();
    assert_eq!(error.raw_os_error(), Some(28), "{error}");
    assert_eq!(
        std::fs::read(&journal).unwrap(),
        first,
        "the failed append was not cut back"
    );
    // Space returns: the next record lands on a line of its own.
    std::fs::remove_file(filler).unwrap();
    let third = line(3, 200);
    RealFs
        .append(&journal, &third, true, "test.append")
        .unwrap();
    assert_eq!(std::fs::read(&journal).unwrap(), [first, third].concat());
}

#[test]
fn a_torn_tail_is_cut_before_the_next_line_is_appended() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("gateway-1-1.jsonl");
    let first = line(1, 100);
    std::fs::write(&journal, [&first[..], b"{\"n\":2,\"pa"].concat()).unwrap();
    let third = line(3, 100);
    RealFs
        .append(&journal, &third, false, "test.append")
        .unwrap();
    assert_eq!(std::fs::read(&journal).unwrap(), [first, third].concat());
}

/// Run `case` in a child of this test binary with `failpoints` armed.
fn in_child(test: &str, failpoints: &str, dir: &Path) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("STOPLINE_FAILPOINTS", failpoints)
        .env("APPEND_WHOLE_CHILD", dir)
        .output()
        .expect("run the child");
    assert!(
        out.status.success(),
        "child failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("child ran"),
        "the child ran no case: {stdout}"
    );
}

#[test]
fn a_partial_write_is_cut_back_before_the_failure_is_reported() {
    if let Some(dir) = std::env::var_os("APPEND_WHOLE_CHILD") {
        let journal = Path::new(&dir).join("j.jsonl");
        let first = line(1, 100);
        RealFs.append(&journal, &first, true, "ok").unwrap();
        let error = RealFs
            .append(&journal, &line(2, 100), true, "torn")
            .unwrap_err();
        assert_eq!(error.raw_os_error(), Some(28), "{error}");
        assert_eq!(std::fs::read(&journal).unwrap(), first);
        println!("child ran");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    in_child(
        "a_partial_write_is_cut_back_before_the_failure_is_reported",
        "torn.partial=enospc",
        dir.path(),
    );
}

#[test]
fn a_failed_cut_back_fails_appends_until_the_torn_tail_is_cut() {
    if let Some(dir) = std::env::var_os("APPEND_WHOLE_CHILD") {
        let journal = Path::new(&dir).join("j.jsonl");
        let first = line(1, 100);
        RealFs.append(&journal, &first, true, "ok").unwrap();
        // Half of the line lands, and cutting it off fails: the failure says so.
        let error = RealFs
            .append(&journal, &line(2, 100), true, "torn")
            .unwrap_err();
        assert!(error.to_string().contains("torn bytes"), "{error}");
        assert_eq!(std::fs::read(&journal).unwrap().len(), 150);
        // The next append cannot cut it either: it fails, and writes nothing.
        let error = RealFs
            .append(&journal, &line(3, 100), true, "torn")
            .unwrap_err();
        assert!(error.to_string().contains("torn bytes"), "{error}");
        assert_eq!(std::fs::read(&journal).unwrap().len(), 150);
        // Once a cut succeeds, the record lands on a line of its own.
        let fourth = line(4, 100);
        RealFs.append(&journal, &fourth, true, "ok").unwrap();
        assert_eq!(std::fs::read(&journal).unwrap(), [first, fourth].concat());
        println!("child ran");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    in_child(
        "a_failed_cut_back_fails_appends_until_the_torn_tail_is_cut",
        "torn.partial=enospc;torn.cutback=error",
        dir.path(),
    );
}

#[test]
fn a_failed_fsync_is_cut_back_so_nothing_unsynced_is_read() {
    if let Some(dir) = std::env::var_os("APPEND_WHOLE_CHILD") {
        let journal = Path::new(&dir).join("j.jsonl");
        let first = line(1, 100);
        RealFs.append(&journal, &first, true, "ok").unwrap();
        RealFs
            .append(&journal, &line(2, 100), true, "unsynced")
            .unwrap_err();
        assert_eq!(std::fs::read(&journal).unwrap(), first);
        println!("child ran");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    in_child(
        "a_failed_fsync_is_cut_back_so_nothing_unsynced_is_read",
        "unsynced.fsync=error",
        dir.path(),
    );
}
