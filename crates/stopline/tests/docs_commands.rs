//! Every command in the documentation runs: the fenced ```` ```sh ```` blocks of `README.md` and
//! `docs/*.md` are executed, in order, one bash session per document, with the binary under test
//! first on `PATH`, in a throwaway `$HOME` and working directory, on a fresh pseudo-terminal (so
//! the owner-console commands, `recover`, `drain`, `ops reconcile`, pass their terminal check
//! exactly as they would for an operator). A document is a walkthrough: its blocks share the
//! session, so a token minted in one block is used in the next. Any command that fails fails
//! the test (`set -euo pipefail`).
//!
//! The conventions a document follows (docs/README of them is this file):
//! - A line ending in `# exit N` must exit with status N (e.g. `stopline check …  # exit 4`);
//!   any other status fails the test. Other non-zero exits are failures.
//! - A line ending in `# => TEXT` must print TEXT (a substring of its stdout), e.g.
//!   `stopline --json status | jq -r .phase   # => FROZEN_SAFE`.
//! - A block that cannot run here is marked on the line before its fence with
//!   `<!-- doc-test: skip: REASON -->`. The reason is required, and every skipped block is listed
//!   in the test's output; nothing is skipped silently.
//! - Addresses are the documented defaults; the harness rewrites them to free ports so
//!   documents run in parallel: `127.0.0.1:7077` (the gateway) and `127.0.0.1:7079` (the
//!   destination `stopline drill --against` binds) to free ports, and
//!   `127.0.0.1:8081` (the OpenAI-compatible upstream a document points the gateway at) to a
//!   stand-in upstream it starts (`tests/py/fake_openai_upstream.py`), and `127.0.0.1:8082`
//!   (the Anthropic Messages API upstream) to another (`tests/py/fake_anthropic_upstream.py`).
//! - `README.md` belongs to the lead and carries no markers; its exceptions are listed in
//!   [`README_EXCEPTIONS`] with their reasons, and its `plan_…` placeholder (the id `recover plan`
//!   printed) is replaced by the id the WAL recorded for the last plan.
//!
//! Needs what the other integration tests need: `.venv` (python with `openai` and `mcp`),
//! `node_modules` (the MCP reference server, the `claude` and `codex` CLIs), and `curl` and
//! `jq` on `PATH`.
//! Missing ones fail.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long one document may take.
const DOC_TIMEOUT: Duration = Duration::from_secs(300);

/// README blocks that cannot run in this test, identified by a line they contain.
const README_EXCEPTIONS: &[(&str, &str)] = &[(
    "./scripts/test-all.sh",
    "the setup block builds a release binary (scripts/demo.sh) and runs the whole test suite \
     (scripts/test-all.sh), which runs this test: it cannot run inside it",
)];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

/// One fenced shell block.
#[derive(Debug, Clone)]
struct Block {
    /// `docs/runbook.md:42` (the fence's line).
    origin: String,
    text: String,
    skip: Option<String>,
}

/// The ```` ```sh ```` blocks of a markdown file, with their skip markers.
fn shell_blocks(rel: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_start();
        let Some(info) = line.strip_prefix("```") else {
            i += 1;
            continue;
        };
        let fence_line = i;
        let mut body = Vec::new();
        i += 1;
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            body.push(lines[i]);
            i += 1;
        }
        i += 1;
        let lang = info.split_whitespace().next().unwrap_or("");
        if !matches!(lang, "sh" | "bash" | "shell") {
            continue;
        }
        let marker = lines[..fence_line]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim())
            .unwrap_or("");
        let skip = marker.strip_prefix("<!-- doc-test: skip").map(|rest| {
            let reason = rest
                .trim_end_matches("-->")
                .trim()
                .trim_start_matches(':')
                .trim();
            assert!(
                !reason.is_empty(),
                "{rel}:{}: a doc-test skip marker needs a reason",
                fence_line + 1
            );
            reason.to_string()
        });
        blocks.push(Block {
            origin: format!("{rel}:{}", fence_line + 1),
            text: body.join("\n"),
            skip,
        });
    }
    blocks
}

/// Turn `CMD  # exit N` lines into checked commands; heredoc bodies pass through untouched.
fn expect_exits(block: &Block) -> String {
    let mut out = Vec::new();
    let mut heredoc_end: Option<String> = None;
    let mut previous_continues = false;
    for line in block.text.lines() {
        if let Some(end) = &heredoc_end {
            if line.trim() == end {
                heredoc_end = None;
            }
            out.push(line.to_string());
            continue;
        }
        if let Some(at) = line.find("<<") {
            let word = line[at + 2..]
                .trim_start_matches('-')
                .split_whitespace()
                .next()
                .unwrap_or("")
                .trim_matches(|c| c == '\'' || c == '"');
            if !word.is_empty() {
                heredoc_end = Some(word.to_string());
            }
        }
        if let Some(at) = line.find("# => ") {
            let command = line[..at].trim_end();
            let wanted = line[at + 5..].trim();
            assert!(
                !previous_continues && !wanted.contains('\''),
                "{}: `# => TEXT` must end a one-line command, without quotes in TEXT: {line}",
                block.origin
            );
            out.push(format!(
                "__out=$({command}); printf '%s\\n' \"$__out\"; case \"$__out\" in *'{wanted}'*) ;; *) echo 'doc-test: expected output containing: {wanted}' >&2; exit 98;; esac"
            ));
            previous_continues = false;
            continue;
        }
        let expected = line.find("# exit ").and_then(|at| {
            let code: String = line[at + 7..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            code.parse::<i32>()
                .ok()
                .map(|code| (line[..at].trim_end(), code))
        });
        match expected {
            Some((command, code)) => {
                assert!(
                    !previous_continues,
                    "{}: `# exit N` must end a one-line command: {line}",
                    block.origin
                );
                let shown = command.replace('\'', "'\\''");
                out.push(format!(
                    "set +e; {command}\n__rc=$?; set -e; if [ \"$__rc\" != {code} ]; then echo \"doc-test: expected exit {code}, got $__rc: {shown}\" >&2; exit 97; fi"
                ));
            }
            None => out.push(line.to_string()),
        }
        previous_continues = line.trim_end().ends_with('\\');
    }
    out.join("\n")
}

/// A loopback port free now, below the kernel's ephemeral range: the document's own process binds
/// it later (`stopline_testkit::http::free_port` says why the range matters).
fn free_port() -> u16 {
    stopline_testkit::http::free_port().expect("a free loopback port")
}

/// A child killed with its whole process group when dropped.
struct Session(Child);

impl Session {
    fn kill_group(&self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.kill_group();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The stand-in OpenAI-compatible upstream, started only for documents that point at one.
fn model_upstream(dir: &Path) -> (Session, u16) {
    stand_in(dir, "fake_openai_upstream.py", "upstream")
}

/// The stand-in Anthropic Messages API upstream, started only for documents that point at one.
fn messages_upstream(dir: &Path) -> (Session, u16) {
    stand_in(dir, "fake_anthropic_upstream.py", "messages-upstream")
}

fn stand_in(dir: &Path, script: &str, name: &str) -> (Session, u16) {
    let python = repo().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run ./scripts/setup-test-deps.sh",
        python.display()
    );
    let port_file = dir.join(format!("{name}.port"));
    let child = Command::new(python)
        .arg(repo().join("crates/stopline/tests/py").join(script))
        .arg(&port_file)
        .arg(dir.join(format!("{name}.log")))
        .stdin(Stdio::null())
        .spawn()
        .expect("start the stand-in upstream");
    let session = Session(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(port) = std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return (session, port);
        }
        assert!(
            Instant::now() < deadline,
            "the stand-in upstream did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn require_tools() {
    for tool in ["curl", "jq", "setsid", "node"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            found,
            "`{tool}` is not on PATH (scripts/setup-test-deps.sh installs it)"
        );
    }
    for needed in [
        ".venv/bin/python",
        "node_modules/.bin/mcp-server-everything",
        "node_modules/.bin/claude",
        "node_modules/.bin/codex",
    ] {
        assert!(
            repo().join(needed).exists(),
            "{needed} is missing: run ./scripts/setup-test-deps.sh"
        );
    }
}

/// Run every runnable shell block of `rel` in one session; panic with the transcript on failure.
fn run_doc(rel: &str) {
    require_tools();
    let blocks = shell_blocks(rel);
    assert!(!blocks.is_empty(), "{rel} has no shell block");
    let root = tempfile::Builder::new()
        .prefix("stopline-doc-")
        .tempdir()
        .unwrap();
    // World-traversable, so an agent run `--user nobody` can read the scripts a document
    // writes; the control directory inside is created 0700 by stopline itself.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let home = root.path().join("home");
    let work = root.path().join("work");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&work).unwrap();

    let mut script = String::from("set -euo pipefail\n");
    let gateway_port = free_port();
    let drill_port = free_port();
    let all_text: String = blocks.iter().map(|b| b.text.as_str()).collect();
    let upstream = all_text
        .contains("127.0.0.1:8081")
        .then(|| model_upstream(root.path()));
    let messages = all_text
        .contains("127.0.0.1:8082")
        .then(|| messages_upstream(root.path()));
    let mut skipped = Vec::new();
    let mut ran = 0;
    for block in &blocks {
        let readme_skip = (rel == "README.md")
            .then(|| {
                README_EXCEPTIONS
                    .iter()
                    .find(|(line, _)| block.text.contains(line))
                    .map(|(_, why)| why.to_string())
            })
            .flatten();
        if let Some(reason) = block.skip.clone().or(readme_skip) {
            skipped.push(format!("{}: {reason}", block.origin));
            continue;
        }
        let mut text = expect_exits(block)
            .replace("127.0.0.1:7077", &format!("127.0.0.1:{gateway_port}"))
            .replace("127.0.0.1:7079", &format!("127.0.0.1:{drill_port}"));
        if let Some((_, port)) = &upstream {
            text = text.replace("127.0.0.1:8081", &format!("127.0.0.1:{port}"));
        }
        if let Some((_, port)) = &messages {
            text = text.replace("127.0.0.1:8082", &format!("127.0.0.1:{port}"));
        }
        if rel == "README.md" {
            text = text.replace("plan_…", "\"$(doc_last_plan)\"");
        }
        script.push_str(&format!("echo '### doc-test: {}'\n{text}\n", block.origin));
        ran += 1;
    }
    script.push_str("echo '### doc-test: done'\nkill $(jobs -p) 2>/dev/null || true\n");
    let script_path = root.path().join("doc.sh");
    std::fs::write(
        &script_path,
        format!(
            "doc_last_plan() {{ grep '\"kind\":\"recovery_intent\"' \"${{STOPLINE_HOME:-$HOME/.local/state/stopline}}/breakglass.wal.jsonl\" | tail -n 1 | jq -r .plan; }}\n{script}"
        ),
    )
    .unwrap();

    let bin_dir = Path::new(env!("CARGO_BIN_EXE_stopline")).parent().unwrap();
    let path = format!(
        "{}:{}:{}:{}",
        bin_dir.display(),
        repo().join(".venv/bin").display(),
        repo().join("node_modules/.bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (transcript, status) = run_on_pty(&script_path, &work, &home, &path);
    let ok = status == Some(0) && transcript.contains("### doc-test: done");
    eprintln!("--- {rel} transcript ---\n{transcript}");
    eprintln!(
        "{rel}: {ran} block(s) run, {} skipped{}",
        skipped.len(),
        skipped
            .iter()
            .map(|s| format!("\n  skipped {s}"))
            .collect::<String>()
    );
    assert!(
        ok,
        "{rel}: the documented commands failed (exit {status:?}).\n--- transcript ---\n{transcript}\n--- script ---\n{script}"
    );
    drop(upstream);
    drop(messages);
}

/// Run `script` with bash as the leader of a new session whose controlling terminal is a fresh
/// pseudo-terminal (stdin, stdout and stderr); returns everything printed and the exit status.
fn run_on_pty(script: &Path, work: &Path, home: &Path, path: &str) -> (String, Option<i32>) {
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let slave_path = PathBuf::from(
        ptsname(&master, Vec::new())
            .expect("ptsname")
            .to_string_lossy()
            .into_owned(),
    );
    let open_slave = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&slave_path)
            .expect("open the pty")
    };
    // `setsid --ctty` makes bash a session leader with the pty as its controlling terminal, so
    // it and everything it runs in the foreground are in the terminal's foreground group.
    let child = Command::new("setsid")
        .args(["--ctty", "bash", "--noprofile", "--norc"])
        .arg(script)
        .current_dir(work)
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .env("TERM", "dumb")
        .env("LANG", "C.UTF-8")
        .env("STOPLINE_LOG", "warn")
        .stdin(open_slave())
        .stdout(open_slave())
        .stderr(open_slave())
        .spawn()
        .expect("start bash");
    let mut session = Session(child);
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let mut master_file = std::fs::File::from(master);
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match master_file.read(&mut buf) {
                Ok(0) | Err(_) => break, // EIO once every slave descriptor is closed
                Ok(n) => {
                    if tx.send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut out = Vec::new();
    let deadline = Instant::now() + DOC_TIMEOUT;
    let status = loop {
        while let Ok(chunk) = rx.try_recv() {
            out.extend_from_slice(&chunk);
        }
        if let Some(status) = session.0.try_wait().expect("wait") {
            break status.code();
        }
        if Instant::now() > deadline {
            out.extend_from_slice(b"\n### doc-test: TIMED OUT\n");
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Whatever the document left running in its session goes now.
    session.kill_group();
    let drain_until = Instant::now() + Duration::from_secs(5);
    while let Ok(chunk) = rx.recv_timeout(drain_until.saturating_duration_since(Instant::now())) {
        out.extend_from_slice(&chunk);
    }
    (
        strip_ansi(&String::from_utf8_lossy(&out).replace('\r', "")),
        status,
    )
}

/// The transcript without terminal colour codes (jq colours its output on a terminal).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn readme() {
    run_doc("README.md");
}

#[test]
fn quickstart() {
    run_doc("docs/quickstart.md");
}

#[test]
fn wiring_agents() {
    run_doc("docs/wiring-agents.md");
}

#[test]
fn runbook() {
    run_doc("docs/runbook.md");
}

#[test]
fn threat_model() {
    run_doc("docs/threat-model.md");
}

#[test]
fn durability() {
    // No shell block today; if one is added, it runs.
    let blocks = shell_blocks("docs/durability.md");
    if !blocks.is_empty() {
        run_doc("docs/durability.md");
    }
}

#[test]
fn reference() {
    // The contract, no walkthrough: no shell block today; if one is added, it runs.
    let blocks = shell_blocks("docs/reference.md");
    if !blocks.is_empty() {
        run_doc("docs/reference.md");
    }
}

/// Every document under docs/ has a test above, and every relative link in the documents
/// resolves to a file of the repository.
#[test]
fn every_document_is_covered_and_its_links_resolve() {
    let covered = [
        "durability.md",
        "quickstart.md",
        "reference.md",
        "runbook.md",
        "threat-model.md",
        "wiring-agents.md",
    ];
    let mut docs: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect();
    docs.sort();
    assert_eq!(
        docs, covered,
        "a document without a test in docs_commands.rs"
    );
    let mut broken = Vec::new();
    for rel in
        std::iter::once("README.md".to_string()).chain(docs.iter().map(|d| format!("docs/{d}")))
    {
        let text = std::fs::read_to_string(repo().join(&rel)).unwrap();
        let base = repo().join(&rel).parent().unwrap().to_path_buf();
        for (at, _) in text.match_indices("](") {
            let target: String = text[at + 2..].chars().take_while(|c| *c != ')').collect();
            let target = target.split('#').next().unwrap_or("");
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            if !base.join(target).exists() {
                broken.push(format!("{rel}: {target}"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn exit_expectations_are_checked_and_heredocs_left_alone() {
    let block = Block {
        origin: "t".into(),
        text: "stopline check --class noncritical  # exit 4: stale\ncat > f <<'EOF'\nx  # exit 3\nEOF\necho ok\nstopline status  # => RUNNING"
            .into(),
        skip: None,
    };
    let script = expect_exits(&block);
    assert!(script.contains("if [ \"$__rc\" != 4 ]"), "{script}");
    assert!(script.contains("\nx  # exit 3\n"), "{script}");
    assert!(!script.contains("!= 3"), "{script}");
    assert!(
        script.contains("__out=$(stopline status); ") && script.contains("*'RUNNING'*"),
        "{script}"
    );
}
