//! Helpers shared by the supervisor's integration tests: unique group names, a guard that kills
//! and removes a test's group even when the test fails, and liveness checks by pid.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};
use stopline_supervisor::{CommandSpec, Group, Hierarchy};

/// The hierarchy of this machine; a test fails (never skips) when cgroup v2 is missing.
pub fn hierarchy() -> Hierarchy {
    Hierarchy::discover().expect("these tests need a cgroup2 mount in /proc/mounts")
}

/// A group name no other test (or other run of this test) uses.
pub fn unique_name(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("test-{test}-{}-{nanos}", std::process::id())
}

/// Kills and removes its group when dropped, so a failing test leaves nothing running.
pub struct GroupGuard(pub Group);

impl GroupGuard {
    pub fn create(test: &str) -> GroupGuard {
        GroupGuard(Group::create(&hierarchy(), &unique_name(test)).expect("create group"))
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.0.path().exists() {
            let _ = self.0.kill_until_quiescent(Duration::from_secs(5));
            let _ = self.0.remove();
        }
    }
}

/// A command run by `/bin/sh -c script` with a minimal PATH.
pub fn sh(script: &str) -> CommandSpec {
    CommandSpec::new("/bin/sh", ["-c", script]).env("PATH", "/usr/local/bin:/usr/bin:/bin")
}

/// True when `pid` is a live process (not gone, not a zombie).
pub fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => {
            let state = text[text.rfind(')').unwrap() + 1..]
                .split_whitespace()
                .next()
                .unwrap();
            !matches!(state, "Z" | "X" | "x")
        }
        Err(_) => false,
    }
}

/// Wait until `file` holds at least `lines` lines of pids, and return them.
pub fn wait_for_pids(file: &Path, lines: usize, timeout: Duration) -> Vec<u32> {
    let started = Instant::now();
    loop {
        let pids: Vec<u32> = std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect();
        if pids.len() >= lines {
            return pids;
        }
        assert!(
            started.elapsed() < timeout,
            "only {} of {lines} pids appeared in {}",
            pids.len(),
            file.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The test agent of the kill tests: records its own pid, forks `children` sleepers that ignore
/// SIGTERM, double-forks a `setsid` daemon that ignores SIGTERM, and waits. Every pid it starts
/// is appended to `pids`; `children + 2` lines in all.
pub fn escaping_agent_script(pids: &Path, children: usize) -> String {
    let pids = pids.display();
    format!(
        r#"trap '' TERM
echo $$ >> {pids}
i=0
while [ $i -lt {children} ]; do
  sleep 1000 &
  echo $! >> {pids}
  i=$((i+1))
done
( setsid sh -c 'trap "" TERM; echo $$ >> {pids}; exec sleep 1000' & )
wait
"#
    )
}
