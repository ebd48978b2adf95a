//! Crash every explored state five ways, restart, and judge what the restart sees.
//!
//! The disk image of each crash is identified by its digest with private names hidden, and
//! restarted once; the judgment depends on the image and on which processes had returned,
//! so each (image, returns) pair is judged once.

use crate::protocol::hash::digest;
use crate::protocol::judge;
use crate::protocol::restart::{observe, Crash};
use crate::protocol::search::{Frame, Search};
use crate::protocol::state::State;
use crate::protocol::step::Label;

impl Search<'_> {
    /// Crash `state` every way, restart, judge.
    pub(crate) fn crash_all(&mut self, state: &State, stack: &[Frame], label: &Label) {
        let returned = state.ghost.returned.len();
        let facts = judge::facts_key(state, returned);
        let keys = Crash::digests(&state.fs, &self.private);
        for (crash, image_key) in Crash::ALL.into_iter().zip(keys) {
            if !self.crashes_seen.insert(digest(&(image_key, facts))) {
                continue;
            }
            self.report.crash_judgments += 1;
            let restarted = match self.restarts.get(&image_key) {
                Some(done) => done.clone(),
                None => {
                    self.report.restarts += 1;
                    let done = observe(self.scenario, crash.image(&state.fs), true, self.planted());
                    if done.closed {
                        self.report.closed_after_restart += 1;
                    }
                    self.restarts.insert(image_key, done.clone());
                    done
                }
            };
            let verdicts = judge::observation(self, state, &restarted.seen, returned);
            let crash_line = format!("CRASH ({}); restart: {}", crash.name(), restarted.summary);
            self.record(verdicts, stack, &[label], Some(crash_line));
        }
    }
}
