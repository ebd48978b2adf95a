//! A call admitted by [`crate::local::LocalGovernor`]: re-judged from a fresh read at dispatch,
//! its destination operation finished with the outcome the proxy observed. Dropped unfinished,
//! a dispatched call is left in doubt and an undispatched one is recorded failed, so a proxy
//! that loses track of a call can never make it look committed.

use crate::governor::{Admission, Outcome};
use crate::local::Inner;
use std::sync::Arc;
use stopline_core::{CheckReceipt, Decision, Refusal, TaskClass};
use stopline_token::Claims;

pub(crate) fn refused(receipt: CheckReceipt) -> Refusal {
    receipt.to_refusal(None)
}

/// A call admitted by [`LocalGovernor`].
pub(crate) struct LocalAdmission {
    pub(crate) inner: Arc<Inner>,
    pub(crate) claims: Claims,
    pub(crate) class: TaskClass,
    pub(crate) target: Option<String>,
    pub(crate) op: Option<String>,
    pub(crate) dispatched: bool,
    pub(crate) finished: bool,
}

impl LocalAdmission {
    fn record(&mut self, outcome: Result<&str, &str>) {
        self.finished = true;
        let Some(op) = self.op.clone() else { return };
        let written = self.inner.journal().and_then(|journal| {
            match outcome {
                Ok(outcome) => journal.outcome(&op, outcome),
                Err(reason) => journal.in_doubt(&op, reason),
            }
            .map_err(|e| e.to_refusal())
        });
        if let Err(refusal) = written {
            tracing::error!(%op, "cannot record the operation's outcome; it stays unresolved: {}", refusal.message);
        }
    }
}

impl Admission for LocalAdmission {
    fn dispatch(&mut self) -> Result<(), Refusal> {
        let receipt = self
            .inner
            .decide(&self.claims, self.class, self.target.as_deref());
        if receipt.decision != Decision::Allow {
            self.record(Ok("refused"));
            return Err(refused(receipt));
        }
        if let Some(op) = &self.op {
            if let Err(error) = self
                .inner
                .journal()
                .and_then(|j| j.dispatched(op).map_err(|e| e.to_refusal()))
            {
                self.record(Ok("refused"));
                return Err(error);
            }
        }
        self.dispatched = true;
        Ok(())
    }

    fn finish(mut self: Box<Self>, outcome: Outcome) {
        match outcome {
            Outcome::Committed => self.record(Ok("committed")),
            Outcome::Cancelled => self.record(Ok("cancelled")),
            Outcome::Failed | Outcome::UpstreamUnreachable => self.record(Ok("failed")),
            Outcome::InDoubt(reason) => self.record(Err(&reason)),
        }
    }

    fn cut(mut self: Box<Self>, reason: &str) {
        self.record(Err(reason));
    }
}

impl Drop for LocalAdmission {
    fn drop(&mut self) {
        if !self.finished {
            let dispatched = self.dispatched;
            self.record(if dispatched {
                Err("the call was dropped after dispatch without an outcome")
            } else {
                Ok("failed")
            });
        }
    }
}
