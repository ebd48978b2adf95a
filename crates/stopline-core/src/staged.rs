//! Staged latches: bodies a gate read in `latches.staging/` before their entry was published in
//! `latches/` (docs/reference.md §5, "The gate closes before the disk answers").
//!
//! A scoped engage writes its latch into `latches.staging/`, fsyncs it, hard-links it into
//! `latches/` and fsyncs the directory; the fsyncs are where a stop waits on a busy disk. A gate
//! may refuse on the staged body from the moment it reads it: refusing earlier is always safe.
//! It must never *acknowledge* one, report it in `status`, derive a phase, an alert or evidence
//! from it: the stop is not durable yet, and the engage may still fail (then a fresh latch is
//! staged under another name) or crash (then nothing was stopped).
//!
//! [`StagedLatches`] is that rule and nothing else, pure (the caller passes the time): a staged
//! body counts from the moment it was read until its entry is in the durable view, until its
//! staging file was seen gone by a read that then found `latches/` (the writer removes it only
//! after publishing, or after a failed link), or until [`STAGED_FOR_MS`] passed. A body that does
//! not parse as a latch is never staged. The only thing it yields is [`StagedLatches::admission_view`],
//! a view for admission decisions; the durable view itself is never changed, so what
//! acknowledges or reports reads no staged latch. The gateway and the model check share it.

use crate::latch::ActiveLatch;
use crate::view::ControlView;
use std::collections::BTreeSet;

/// How long a staged body counts for admission without its entry appearing in `latches/`.
pub const STAGED_FOR_MS: i64 = 2000;

/// The staged bodies a gate counts for admission (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StagedLatches {
    /// By file name, each with the time it was first read.
    entries: Vec<(ActiveLatch, i64)>,
    /// Bodies whose time passed while their staging file stayed (an engage that crashed
    /// before publishing leaves one): they counted once and never count again.
    spent: BTreeSet<String>,
}

impl StagedLatches {
    /// Count `latch`, read in `latches.staging/` at `now_ms`, unless it did not parse as a latch
    /// (a body being written, or not a latch at all: ignored), it is in `durable` already, or
    /// it is staged already (it keeps its first reading's time: re-reading never extends it),
    /// or its time passed already.
    /// Returns whether it was added.
    pub fn stage(&mut self, latch: ActiveLatch, durable: &ControlView, now_ms: i64) -> bool {
        let parsed = latch.problem.is_none() && latch.record.is_some();
        let known = durable.latches.iter().any(|l| l.file == latch.file)
            || self.entries.iter().any(|(l, _)| l.file == latch.file)
            || self.spent.contains(&latch.file);
        if !parsed || known {
            return false;
        }
        self.entries.push((latch, now_ms));
        true
    }

    /// Forget what no longer counts at `now_ms`: bodies whose entry is in `durable`, and those
    /// read [`STAGED_FOR_MS`] or more ago. Returns whether anything was forgotten.
    pub fn settle(&mut self, durable: &ControlView, now_ms: i64) -> bool {
        let before = self.entries.len();
        let spent = &mut self.spent;
        self.entries.retain(|(latch, seen_ms)| {
            if durable.latches.iter().any(|l| l.file == latch.file) {
                return false;
            }
            if now_ms - seen_ms >= STAGED_FOR_MS {
                spent.insert(latch.file.clone());
                return false;
            }
            true
        });
        self.entries.len() != before
    }

    /// Keep the memory of spent bodies only for the files still in `listed` (a listing of
    /// `latches.staging/`), so it never grows past what the directory holds.
    pub fn keep_spent(&mut self, listed: &BTreeSet<String>) {
        self.spent.retain(|file| listed.contains(file));
    }

    /// Forget the bodies named in `gone`: their staging file was seen gone, and a read of
    /// `latches/` that began after that listing has been taken (the caller's duty), so the
    /// durable view answers for them now. Returns whether anything was forgotten.
    pub fn forget(&mut self, gone: &BTreeSet<String>) -> bool {
        let before = self.entries.len();
        self.entries
            .retain(|(latch, _)| !gone.contains(&latch.file));
        self.spent.retain(|file| !gone.contains(file));
        self.entries.len() != before
    }

    /// The file names staged now (to tell which staging files went away).
    pub fn files(&self) -> BTreeSet<String> {
        self.entries.iter().map(|(l, _)| l.file.clone()).collect()
    }

    /// True when nothing is staged.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// When the next staged body stops counting by time alone (Unix ms), if any is staged.
    pub fn next_expiry_ms(&self) -> Option<i64> {
        self.entries
            .iter()
            .map(|(_, seen_ms)| seen_ms + STAGED_FOR_MS)
            .min()
    }

    /// The view an admission decides from: `durable` with every staged latch it lacks, or
    /// `None` when nothing is staged (decide from `durable` itself). Adding latches can only
    /// make a decision stricter, so this view never admits what `durable` refuses. It is for
    /// admission only: never acknowledge, report or alert from it.
    pub fn admission_view(&self, durable: &ControlView) -> Option<ControlView> {
        if self.entries.is_empty() {
            return None;
        }
        let mut view = durable.clone();
        for (latch, _) in &self.entries {
            if !view.latches.iter().any(|l| l.file == latch.file) {
                view.latches.push(latch.clone());
            }
        }
        Some(view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latch::{LatchRecord, LatchSession};
    use crate::{Decision, Level, Name, Scope, Subject, TaskClass};

    fn body(id: &str, agent: &str) -> Vec<u8> {
        serde_json::to_vec(&LatchRecord {
            kind: "breakglass_latch".into(),
            id: id.into(),
            scope: Scope::Agent(Name::parse(agent).unwrap()),
            level: Level::HaltAll,
            by: "test".into(),
            reason: "staged".into(),
            pid: 1,
            session: LatchSession {
                bound: None,
                root: None,
                tier: "console".into(),
            },
            ts: "2026-12-07T00:00:00.000Z".into(),
        })
        .unwrap()
    }

    fn staged(id: &str, agent: &str) -> ActiveLatch {
        ActiveLatch::from_entry(&format!("{id}.json"), Ok(&body(id, agent)))
    }

    fn decision(view: &ControlView, staged: &StagedLatches) -> Decision {
        let subject = Subject::proven(vec![Name::parse("worker").unwrap()], vec![], vec![]);
        let admission = staged.admission_view(view);
        admission
            .as_ref()
            .unwrap_or(view)
            .decide(&subject, TaskClass::Noncritical, None, None, 0)
            .decision
    }

    #[test]
    fn a_staged_body_refuses_until_its_entry_appears_or_two_seconds_pass() {
        let empty = ControlView::empty();
        let mut set = StagedLatches::default();
        assert_eq!(decision(&empty, &set), Decision::Allow);
        assert!(set.stage(staged("latch_a", "worker"), &empty, 1_000));
        assert!(
            !set.stage(staged("latch_a", "worker"), &empty, 1_500),
            "staged once"
        );
        assert_eq!(decision(&empty, &set), Decision::Block);
        assert_eq!(set.next_expiry_ms(), Some(1_000 + STAGED_FOR_MS));
        assert!(!set.settle(&empty, 2_999), "still counting just before 2 s");
        assert!(set.settle(&empty, 3_000), "dropped at 2 s");
        assert_eq!(decision(&empty, &set), Decision::Allow);
        assert!(
            !set.stage(staged("latch_a", "worker"), &empty, 3_001),
            "a body whose time passed never counts again"
        );

        let mut durable = ControlView::empty();
        assert!(set.stage(staged("latch_b", "worker"), &durable, 5_000));
        durable.latches.push(staged("latch_b", "worker"));
        assert!(
            set.settle(&durable, 5_001),
            "its entry appeared: the durable view answers"
        );
        assert!(set.is_empty());
        assert!(
            !set.stage(staged("latch_b", "worker"), &durable, 5_002),
            "a body already durable is not staged again"
        );
    }

    #[test]
    fn a_body_that_does_not_parse_is_ignored_and_a_gone_one_forgotten() {
        let empty = ControlView::empty();
        let mut set = StagedLatches::default();
        for bytes in [&b""[..], b"{\"kind\":", b"not json"] {
            let latch = ActiveLatch::from_entry("latch_x.json", Ok(bytes));
            assert!(!set.stage(latch, &empty, 0), "{bytes:?}");
        }
        assert_eq!(decision(&empty, &set), Decision::Allow);
        assert!(set.admission_view(&empty).is_none());
        assert!(set.stage(staged("latch_c", "other"), &empty, 0));
        assert_eq!(
            decision(&empty, &set),
            Decision::Allow,
            "another agent's stop"
        );
        assert!(set.forget(&BTreeSet::from(["latch_c.json".to_string()])));
        assert!(set.is_empty());
    }
}
