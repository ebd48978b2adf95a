//! The per-call rules every gate applies beside [`ControlView::decide`]: the `allowed_tools`
//! list, whether a stream already admitted must be cut, and when a view is too old to judge a
//! token by.
//!
//! The gateway (`stopline serve`) and the stdio governor (`stopline mcp proxy`) both call these,
//! so the two cannot drift apart again (they had: each cut on conditions the other ignored, and
//! nothing said why). Pure functions of their arguments: the caller passes the view and the time.

use crate::epoch::AuthorityStatus;
use crate::view::{Authority, ControlView};
use crate::{ControlState, Mode, Refusal, RefusalCode, Subject};

/// Whether `tool` of MCP server `server` may be called under its `allowed_tools` list (SPEC §5;
/// no list allows every tool). The refusal is `tool_not_allowed`, which the caller also counts
/// toward the agent's `unauthorized_calls` breaker.
pub fn allowed_tool(allowed: Option<&[String]>, server: &str, tool: &str) -> Result<(), Refusal> {
    match allowed {
        Some(allowed) if !allowed.iter().any(|t| t == tool) => Err(Refusal::new(
            RefusalCode::ToolNotAllowed,
            format!("{tool:?} is not in {server}'s allowed_tools"),
        )),
        _ => Ok(()),
    }
}

impl Authority {
    /// True when a token of this authority was minted under an epoch `view` has not seen yet:
    /// a token minted a moment ago, after the view was read. Judged as it is, it would be
    /// refused as from the future; every gate reads the control plane once more first.
    pub fn minted_after(&self, view: &ControlView) -> bool {
        self.issue_epoch > view.epoch.seq
    }
}

/// Why a stream already admitted to `subject` under `authority` must be cut now, if it must.
///
/// It is cut by anything that means its admission no longer stands: a fault in the view (a
/// state that cannot be trusted), a machine state other than RUNNING (contained, draining), an
/// authority a stop has made stale, or an EMERGENCY covering the subject. A halt does not cut:
/// it refuses new work and lets admitted work finish.
///
/// One fault does not cut: `distributed_unavailable`. An outage of the distributed plane is
/// not a stop. The stdio governor keeps no permit, so every read that fails to reach etcd shows
/// this fault at once; cutting on it would end every stream at the first network blip. A
/// gateway keeps its last view through an outage (its permit refuses new noncritical work
/// instead), so its view holds this fault only before its first read, when the gate is closed
/// and no stream exists to cut.
pub fn must_cut(
    view: &ControlView,
    subject: &Subject,
    authority: Authority,
    now_ms: i64,
) -> Option<Refusal> {
    if let Some(fault) = view
        .faults
        .iter()
        .find(|f| f.code != RefusalCode::DistributedUnavailable)
    {
        return Some(fault.clone());
    }
    if view.state.effective(now_ms) != ControlState::Running {
        return Some(Refusal::new(
            RefusalCode::BreakGlassContained,
            "the machine is contained",
        ));
    }
    let standing = view.epoch.authority_status(authority.issue_epoch, subject);
    if matches!(standing, AuthorityStatus::Stale { .. }) {
        return Some(Refusal::new(
            RefusalCode::StaleControlEpoch,
            "the token was revoked by a stop",
        ));
    }
    (view.mode_for(subject) == Mode::Emergency).then(|| {
        Refusal::new(
            RefusalCode::BreakGlassContained,
            "an emergency stop covers this agent; the stream was cut",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ActiveLatch, Level, Name, Scope, StateRecord};

    fn subject() -> Subject {
        Subject::proven(vec![Name::parse("worker").unwrap()], Vec::new(), Vec::new())
    }

    fn latch(scope: Scope, level: Level) -> ActiveLatch {
        ActiveLatch {
            file: format!("latch_{level}.json"),
            scope,
            level,
            record: None,
            problem: None,
        }
    }

    fn code(view: &ControlView, issue_epoch: u64) -> Option<RefusalCode> {
        must_cut(view, &subject(), Authority { issue_epoch }, 0).map(|r| r.code)
    }

    #[test]
    fn what_cuts_a_stream_and_what_does_not() {
        let mut view = ControlView::empty();
        assert_eq!(code(&view, 0), None, "a clear view");
        view.latches.push(latch(Scope::Machine, Level::HaltAll));
        assert_eq!(code(&view, 0), None, "a halt lets admitted work finish");
        view.latches.push(latch(
            Scope::Agent(Name::parse("worker").unwrap()),
            Level::Emergency,
        ));
        assert_eq!(code(&view, 0), Some(RefusalCode::BreakGlassContained));

        let mut stale = ControlView::empty();
        stale.epoch = stale.epoch.advanced(&Scope::Machine).unwrap();
        assert_eq!(code(&stale, 0), Some(RefusalCode::StaleControlEpoch));
        assert_eq!(code(&stale, 1), None, "minted after the advance");

        let mut contained = ControlView::empty();
        contained.state = StateRecord {
            state: ControlState::FrozenSafe,
            ..StateRecord::running()
        };
        assert_eq!(code(&contained, 0), Some(RefusalCode::BreakGlassContained));

        let outage = ControlView::closed(Refusal::new(RefusalCode::DistributedUnavailable, "x"));
        assert_eq!(code(&outage, 0), None, "an outage is not a stop");
        let corrupt = ControlView::closed(Refusal::new(RefusalCode::ControlWalCorrupt, "x"));
        assert_eq!(code(&corrupt, 0), Some(RefusalCode::ControlWalCorrupt));
    }

    #[test]
    fn allowed_tools_lists_what_may_be_called() {
        let list = vec!["read".to_string()];
        assert!(allowed_tool(None, "s", "anything").is_ok());
        assert!(allowed_tool(Some(&list), "s", "read").is_ok());
        let refused = allowed_tool(Some(&list), "s", "write").unwrap_err();
        assert_eq!(refused.code, RefusalCode::ToolNotAllowed);
        assert_eq!(refused.message, "\"write\" is not in s's allowed_tools");
    }
}
