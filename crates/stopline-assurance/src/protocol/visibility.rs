//! Which steps are scheduling points, and the checks that keep that choice sound.
//!
//! Every path of the control directory follows one discipline in a scenario:
//! *quiet* — no racing process changes it (the reserve's files, `keys/` unless a reader of a
//! distributed plane races; `ops/` unless an operation
//! races; `breakglass.cleared/`
//! unless a recovery races; `state.json` unless a recovery or a drain races); *guarded* — changed
//! only under the WAL's exclusive lock and read under the WAL lock (the WAL, `epoch.json`;
//! `state.json` when only a drain writes it); *private* — a `.<file>.tmp-<id>` in the home or an
//! entry of `latches.staging/`, which only its writer touches and nobody reads after a crash
//! (unless a gate counts staged latches: then `latches.staging/` is shared, and every write of
//! a staged body is a scheduling point the gate may read between);
//! *shared* — everything else (`latches/`, and the cleared folders and `state.json` when a
//! recovery races, since its last step writes `state.json` outside the lock).
//!
//! A step is *invisible* (runs without a scheduling decision) when it is a read of a quiet
//! path, a read of a guarded path while holding the WAL lock, a `create_dir_all` of an existing
//! directory (directories are never removed), or any step on a private path. Every other step is
//! a scheduling point. [`Rules::check`] verifies at every explored step that the disciplines
//! hold, so a protocol change that breaks one stops the search instead of hiding interleavings.

use crate::protocol::fs_state::{FsState, Proc};
use crate::protocol::op::Op;
use crate::protocol::process::ProcSpec;
use std::path::Path;
use stopline_store::Layout;

/// The disciplines of one scenario's paths.
#[derive(Debug, Clone)]
pub struct Rules {
    home: String,
    /// `latches.staging/`, private unless a gate of the scenario reads it.
    staging: Option<String>,
    wal: String,
    quiet: Vec<String>,
    guarded: Vec<String>,
}

fn text(path: &Path) -> &str {
    path.to_str().unwrap_or("")
}

/// `path` is `prefix` or lies beneath it.
fn under(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// `path` is an entry directly inside `dir`.
fn entry_of<'a>(path: &'a str, dir: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(dir)?.strip_prefix('/')?;
    (!rest.is_empty() && !rest.contains('/')).then_some(rest)
}

impl Rules {
    /// The disciplines for a scenario racing `procs`.
    pub fn new(layout: &Layout, procs: &[ProcSpec]) -> Rules {
        let owned = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
        let recovery = procs.iter().any(|p| {
            matches!(
                p,
                ProcSpec::RecoverApply { .. } | ProcSpec::RecoverPlanApply { .. }
            )
        });
        let drain = procs.iter().any(|p| matches!(p, ProcSpec::Drain { .. }));
        let staged_gate = procs
            .iter()
            .any(|p| matches!(p, ProcSpec::Admission { staged: true, .. }));
        let operation = procs.iter().any(|p| {
            matches!(
                p,
                ProcSpec::Operation { .. }
                    | ProcSpec::PrepareBatch { .. }
                    | ProcSpec::PrepareEach { .. }
                    | ProcSpec::ArchiveOps
            )
        });
        let evidence = procs.iter().any(|p| {
            matches!(
                p,
                ProcSpec::AppendEvidence { .. }
                    | ProcSpec::AppendDrill { .. }
                    | ProcSpec::DrillGate
            )
        });
        let mut quiet: Vec<_> = layout.reserve_files().into_iter().map(owned).collect();
        // A reader of a distributed plane raises its high-water marks in `keys/`.
        if !procs
            .iter()
            .any(|p| matches!(p, ProcSpec::ReadPlane { .. }))
        {
            quiet.push(owned(layout.keys()));
        }
        if !evidence {
            quiet.push(owned(layout.evidence()));
        }
        if !operation {
            quiet.push(owned(layout.ops()));
        }
        let mut guarded = vec![owned(layout.wal()), owned(layout.epoch())];
        if !recovery {
            quiet.push(owned(layout.cleared()));
            if drain {
                guarded.push(owned(layout.state()));
            } else {
                quiet.push(owned(layout.state()));
            }
        }
        Rules {
            home: owned(layout.home().to_path_buf()),
            staging: (!staged_gate).then(|| owned(layout.staging())),
            wal: owned(layout.wal()),
            quiet,
            guarded,
        }
    }

    /// A name only its writer touches and nobody reads after a crash.
    pub fn private(&self, path: &Path) -> bool {
        let path = text(path);
        entry_of(path, &self.home).is_some_and(|n| n.starts_with('.') && n.contains(".tmp-"))
            || self
                .staging
                .as_deref()
                .is_some_and(|staging| entry_of(path, staging).is_some())
    }

    fn quiet(&self, path: &Path) -> bool {
        self.quiet.iter().any(|q| under(text(path), q))
    }

    fn guarded(&self, path: &Path) -> bool {
        self.guarded.iter().any(|g| text(path) == g)
    }

    /// Whether `op`, the next step of `proc`, runs without a scheduling decision.
    pub fn invisible(&self, fs: &FsState, proc: Proc, op: &Op, gate: bool) -> bool {
        match op {
            Op::Begin => !gate,
            Op::Create { path, .. }
            | Op::Write { path, .. }
            | Op::Fsync { path, .. }
            | Op::Remove { path, .. } => self.private(path),
            Op::Read { path }
            | Op::Identify { path }
            | Op::Exists { path }
            | Op::ReadDir { dir: path } => {
                self.private(path)
                    || self.quiet(path)
                    || (self.guarded(path) && fs.holds_lock(proc, Path::new(&self.wal)).is_some())
            }
            Op::CreateDirAll { path, .. } => fs.resolve(path).is_some(),
            _ => false,
        }
    }

    /// What `op` breaks of the disciplines, if anything.
    pub fn check(&self, fs: &FsState, proc: Proc, op: &Op) -> Option<String> {
        let changed: Vec<&Path> = match op {
            Op::Create { path, .. }
            | Op::Write { path, .. }
            | Op::Fsync { path, .. }
            | Op::Append { path, .. }
            | Op::AppendFsync { path, .. }
            | Op::Remove { path, .. }
            | Op::Truncate { path, .. } => vec![path],
            Op::HardLink { to, .. } => vec![to],
            Op::Rename { from, to, .. } => vec![from, to],
            Op::CreateDirAll { path, .. } if fs.resolve(path).is_none() => vec![path],
            Op::Lock {
                path, create: true, ..
            } if fs.resolve(path).is_none() => vec![path],
            _ => Vec::new(),
        };
        for path in changed {
            if self.quiet(path) {
                return Some(format!(
                    "{} changed the quiet path {}",
                    op.name(),
                    path.display()
                ));
            }
            let locked = fs.holds_lock(proc, Path::new(&self.wal)) == Some(true);
            let creating_the_wal = matches!(op, Op::Lock { .. });
            if self.guarded(path) && !locked && !creating_the_wal {
                return Some(format!(
                    "{} changed {} without the WAL lock",
                    op.name(),
                    path.display()
                ));
            }
            if fs.is_dir(path) && matches!(op, Op::Rename { .. } | Op::Remove { .. }) {
                return Some(format!(
                    "{} moved the directory {}",
                    op.name(),
                    path.display()
                ));
            }
        }
        None
    }
}
