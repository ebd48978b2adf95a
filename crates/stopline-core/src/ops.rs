//! Governed operations: targets, the `prepared → dispatched → outcome` records, and the fold that
//! tells which operations are unresolved.
//!
//! An operation with no outcome is unresolved. One still in flight in a live writer is pending,
//! and blocks nothing. One whose writer is gone, or that its writer marked in doubt (the upstream
//! connection broke after dispatch, or a cut exchange got no answer in time), is in doubt until
//! the owner reconciles it, and then blocks according to [`Blocks`] (docs/reference.md §8): a `model:`
//! operation blocks nobody (a model request has no effect outside; its cost stays reserved), a
//! tool or file operation blocks new operations on its target by the same agent — the root of
//! the delegation chain it was made under, its sub-agents included — unless the server it went
//! to is configured `unresolved_blocks = "everyone"`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The registry an operation belongs to, derived from its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    /// `file:<canonical path>`.
    File,
    /// `mcp:<server>:<tool>`, and `a2a:<agent>` (a message send to a remote A2A agent,
    /// docs/reference.md §8): an effect outside, whose outcome blocks like a tool call's.
    Destination,
    /// `model:<model>`.
    Model,
    /// `hosted:<provider>:<tool>`: a tool the model provider runs on the agent's behalf (web
    /// search, an MCP server it calls, a background response), allowed by the owner's config.
    /// Governed like a tool call: in doubt, it blocks like one.
    Hosted,
}

/// Classify a target string, or `None` when it is not one of the three forms.
pub fn target_kind(target: &str) -> Option<OpKind> {
    let (kind, rest) = target.split_once(':')?;
    if rest.is_empty() {
        return None;
    }
    match kind {
        "file" if rest.starts_with('/') => Some(OpKind::File),
        "mcp"
            if rest
                .split_once(':')
                .is_some_and(|(s, t)| !s.is_empty() && !t.is_empty()) =>
        {
            Some(OpKind::Destination)
        }
        "model" => Some(OpKind::Model),
        "a2a" if !rest.contains(':') => Some(OpKind::Destination),
        "hosted"
            if rest
                .split_once(':')
                .is_some_and(|(p, t)| !p.is_empty() && !t.is_empty()) =>
        {
            Some(OpKind::Hosted)
        }
        _ => None,
    }
}

/// Whom an unresolved tool or file operation blocks, as recorded when it was prepared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockScope {
    /// Only the agent whose delegation chain it was made under (the chain's root and every
    /// sub-agent of it). The default, and the reading of a line that names nothing.
    #[default]
    Agent,
    /// Every caller (`[mcp.<name>] unresolved_blocks = "everyone"`).
    Everyone,
}

/// Whom an operation blocks while it is in doubt.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Blocks {
    /// Nobody: a `model:` operation.
    Nobody,
    /// New operations on the same target by this agent (a chain root) and its sub-agents.
    Agent(String),
    /// New operations on the same target by anyone.
    Everyone,
}

impl Blocks {
    /// True when it blocks a call by `subject`. A subject whose identity cannot be proven is
    /// blocked by every agent's operations, as every agent latch covers it (docs/reference.md §1).
    pub fn covers(&self, subject: &crate::subject::Subject) -> bool {
        match self {
            Blocks::Nobody => false,
            Blocks::Everyone => true,
            Blocks::Agent(root) => {
                !subject.provable || subject.chain.first().is_some_and(|n| n.as_str() == root)
            }
        }
    }

    /// Whom an operation blocks when its record does not say: everyone.
    pub fn unknown() -> Blocks {
        Blocks::Everyone
    }

    /// `nobody`, `agent:<root>` or `everyone`: the form `ops list` and `status` show.
    pub fn label(&self) -> String {
        match self {
            Blocks::Nobody => "nobody".into(),
            Blocks::Agent(root) => format!("agent:{root}"),
            Blocks::Everyone => "everyone".into(),
        }
    }
}

impl Serialize for Blocks {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.label())
    }
}

impl<'de> Deserialize<'de> for Blocks {
    /// The label [`Blocks::label`] writes, and nothing else.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let label = String::deserialize(deserializer)?;
        match label.as_str() {
            "nobody" => Ok(Blocks::Nobody),
            "everyone" => Ok(Blocks::Everyone),
            _ => match label.strip_prefix("agent:") {
                Some(root) if !root.is_empty() => Ok(Blocks::Agent(root.to_string())),
                _ => Err(serde::de::Error::custom(format!(
                    "{label:?} is not nobody, everyone or agent:<root>"
                ))),
            },
        }
    }
}

/// The phase a journal line records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Durable intent, written and fsynced before anything is sent.
    Prepared,
    /// Handed to the upstream.
    Dispatched,
    /// Its writer lost track of it (a stream cut by a stop): in doubt until reconciled.
    InDoubt,
    /// Its outcome.
    Outcome,
    /// The remote task a send opened (`a2a:<agent>` operations, docs/reference.md §8): the
    /// A2A task id, so a restarted gateway knows which chain owns it and can cancel it.
    Task,
}

/// One line of an operation journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpLine {
    /// The operation id.
    pub op: String,
    /// The phase.
    pub phase: Phase,
    /// RFC 3339 time.
    pub ts: String,
    /// Unix milliseconds (for ordering and age).
    pub ts_ms: i64,
    /// `prepared`: the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `prepared`: the acting agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// `prepared`: the caller's request id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// `prepared`: the root of the acting agent's delegation chain (absent: the agent itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// `prepared`: whom it blocks while in doubt (absent: the agent's chain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<BlockScope>,
    /// `outcome`: committed, failed, abandoned, refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// `outcome` by reconciliation: who.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// `outcome` by reconciliation, or `in_doubt`: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `task`: the remote A2A task id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// `task`: the A2A version the task was opened in (`1.0` or `0.3`; its cancel method).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `task`: the subject whose send opened the task (its chain, projects, runs and labels),
    /// so that a gateway rebuilding the task after a restart cancels it at every stop that
    /// covered the send, a project's or a run's too. Absent in lines written before it was
    /// recorded: the chain is then rebuilt from `prepared`'s root and agent alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<crate::subject::Subject>,
}

impl OpLine {
    /// A line of `phase` for `op`, written at `ts_ms` (`ts`: the same time in RFC 3339), with
    /// every phase's own fields empty for the caller to fill.
    pub fn new(op: &str, phase: Phase, ts: String, ts_ms: i64) -> OpLine {
        OpLine {
            op: op.to_string(),
            phase,
            ts,
            ts_ms,
            target: None,
            agent: None,
            request_id: None,
            root: None,
            blocks: None,
            outcome: None,
            by: None,
            reason: None,
            task: None,
            version: None,
            subject: None,
        }
    }
}

/// The folded state of one operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    /// Its id.
    pub op: String,
    /// Its target.
    pub target: String,
    /// Its registry.
    pub kind: OpKind,
    /// The acting agent.
    pub agent: Option<String>,
    /// The root of the acting agent's delegation chain.
    pub root: Option<String>,
    /// Whom it blocks while it is in doubt.
    ///
    /// Read from a recovery plan written before operations said whom they block: everyone
    /// (the widest, as an unknown is read everywhere else).
    #[serde(default = "Blocks::unknown")]
    pub blocks: Blocks,
    /// The caller's request id.
    pub request_id: Option<String>,
    /// Unix ms it was prepared.
    pub prepared_ms: i64,
    /// Whether it was handed upstream.
    pub dispatched: bool,
    /// Unix ms it was handed upstream (its final admission), if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatched_ms: Option<i64>,
    /// Whether its writer marked it in doubt.
    pub in_doubt: bool,
    /// Its outcome, if any.
    pub outcome: Option<String>,
    /// The journal (writer) it was prepared in.
    pub writer: String,
    /// Why its writer marked it in doubt (e.g. "remote cancel not confirmed: …"), as the journal
    /// says. Shown by `ops list` and `status`; never part of a record that carries the
    /// operation (a recovery plan in the WAL keeps its shape).
    #[serde(skip)]
    pub doubt: Option<String>,
    /// The remote A2A task its send opened (its `task` line): what a restarted gateway
    /// rebuilds its task book from. Never part of a record that carries the operation.
    #[serde(skip)]
    pub task: Option<RemoteTask>,
}

/// The remote A2A task a send opened, as its `task` line records it.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteTask {
    /// The task id at the remote.
    pub id: String,
    /// The A2A version it was opened in (`1.0` or `0.3`), when recorded.
    pub version: Option<String>,
    /// The subject whose send opened it, when recorded (lines of older gateways have none).
    pub subject: Option<crate::subject::Subject>,
}

impl Operation {
    /// True when it has no outcome.
    pub fn is_unresolved(&self) -> bool {
        self.outcome.is_none()
    }
}

/// Whom an operation of `kind`, recorded with `scope` under chain root `root`, blocks while in
/// doubt. An agent-scoped operation with no recorded agent blocks everyone (it cannot be
/// attributed to anyone in particular).
pub fn blocks_of(kind: OpKind, scope: BlockScope, root: Option<&str>) -> Blocks {
    match (kind, scope, root) {
        (OpKind::Model, _, _) => Blocks::Nobody,
        (_, BlockScope::Everyone, _) | (_, BlockScope::Agent, None) => Blocks::Everyone,
        (_, BlockScope::Agent, Some(root)) => Blocks::Agent(root.to_string()),
    }
}

/// Fold journal lines (from any number of writers, each line tagged with its writer) into
/// operations by id. Lines for an op never prepared are ignored unless they are outcomes, which
/// are kept so a reconciliation written before the fold still counts.
pub fn fold<'a>(lines: impl IntoIterator<Item = (&'a str, OpLine)>) -> BTreeMap<String, Operation> {
    let mut ops: BTreeMap<String, Operation> = BTreeMap::new();
    let mut late: Vec<OpLine> = Vec::new();
    for (writer, line) in lines {
        match line.phase {
            Phase::Prepared => {
                let Some(target) = line.target.clone() else {
                    continue;
                };
                let Some(kind) = target_kind(&target) else {
                    continue;
                };
                let root = line.root.clone().or_else(|| line.agent.clone());
                let blocks = blocks_of(kind, line.blocks.unwrap_or_default(), root.as_deref());
                ops.entry(line.op.clone()).or_insert(Operation {
                    op: line.op.clone(),
                    target,
                    kind,
                    agent: line.agent.clone(),
                    root,
                    blocks,
                    request_id: line.request_id.clone(),
                    prepared_ms: line.ts_ms,
                    dispatched: false,
                    dispatched_ms: None,
                    in_doubt: false,
                    outcome: None,
                    writer: writer.to_string(),
                    doubt: None,
                    task: None,
                });
            }
            _ => late.push(line),
        }
    }
    for line in late {
        if let Some(op) = ops.get_mut(&line.op) {
            match line.phase {
                Phase::Dispatched => {
                    op.dispatched = true;
                    op.dispatched_ms = Some(line.ts_ms);
                }
                Phase::InDoubt => {
                    op.in_doubt = true;
                    op.doubt = line.reason.clone().or(op.doubt.take());
                }
                Phase::Outcome => op.outcome = line.outcome.clone().or(Some("unknown".into())),
                Phase::Task => {
                    if op.task.is_none() {
                        op.task = line.task.clone().map(|id| RemoteTask {
                            id,
                            version: line.version.clone(),
                            subject: line.subject.clone(),
                        });
                    }
                }
                Phase::Prepared => {}
            }
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(op: &str, phase: Phase, target: Option<&str>) -> OpLine {
        OpLine {
            target: target.map(String::from),
            outcome: (phase == Phase::Outcome).then(|| "committed".into()),
            ..OpLine::new(op, phase, "t".into(), 1)
        }
    }

    #[test]
    fn targets_are_classified() {
        assert_eq!(
            target_kind("mcp:everything:echo"),
            Some(OpKind::Destination)
        );
        assert_eq!(target_kind("file:/srv/a"), Some(OpKind::File));
        assert_eq!(target_kind("model:gpt-test"), Some(OpKind::Model));
        assert_eq!(
            target_kind("hosted:openai:web_search"),
            Some(OpKind::Hosted)
        );
        assert_eq!(target_kind("a2a:remote"), Some(OpKind::Destination));
        for bad in [
            "a2a:",
            "a2a:x:y",
            "mcp:x",
            "file:rel",
            "model:",
            "web:x",
            "x",
            "hosted:openai",
            "hosted::x",
            "hosted:openai:",
        ] {
            assert_eq!(target_kind(bad), None, "{bad}");
        }
    }

    #[test]
    fn outcome_in_another_journal_resolves() {
        let ops = fold([
            ("gw", line("a", Phase::Prepared, Some("model:m"))),
            ("gw", line("b", Phase::Prepared, Some("model:m"))),
            ("owner", line("a", Phase::Outcome, None)),
        ]);
        assert!(!ops["a"].is_unresolved());
        assert!(ops["b"].is_unresolved());
    }

    /// A send's `task` line names the remote task it opened, the first one wins, and a line
    /// written before this field existed still reads (no task).
    #[test]
    fn a_task_line_names_the_remote_task_of_its_send() {
        let mut task = line("s", Phase::Task, None);
        task.task = Some("t-1".into());
        task.version = Some("0.3".into());
        let mut later = line("s", Phase::Task, None);
        later.task = Some("t-2".into());
        let written = serde_json::to_string(&task).unwrap();
        assert!(written.contains(r#""phase":"task""#), "{written}");
        assert!(written.contains(r#""task":"t-1""#), "{written}");
        let read: OpLine = serde_json::from_str(&written).unwrap();
        let ops = fold([
            ("gw", line("s", Phase::Prepared, Some("a2a:remote"))),
            ("gw", read),
            ("gw", later),
            ("gw", line("p", Phase::Prepared, Some("a2a:remote"))),
        ]);
        assert_eq!(
            ops["s"].task,
            Some(RemoteTask {
                id: "t-1".into(),
                version: Some("0.3".into()),
                subject: None
            })
        );
        assert_eq!(ops["p"].task, None);
        assert!(ops["s"].is_unresolved());
        let old: OpLine =
            serde_json::from_str(r#"{"op":"o","phase":"prepared","ts":"t","ts_ms":1}"#).unwrap();
        assert_eq!(old.task, None);
        assert!(
            !written.contains("subject"),
            "no subject, no field: {written}"
        );
    }

    /// A `task` line may carry the subject whose send opened the task (projects and runs
    /// included), read back whole; a line without one still reads.
    #[test]
    fn a_task_line_keeps_the_subject_of_its_send() {
        use crate::scope::Name;
        let subject = crate::subject::Subject::proven(
            vec![
                Name::parse("alice").unwrap(),
                Name::parse("alice-helper").unwrap(),
            ],
            vec!["/srv/repo".into()],
            vec![Name::parse("eval-7").unwrap()],
        );
        let mut task = line("s", Phase::Task, None);
        task.task = Some("t-1".into());
        task.subject = Some(subject.clone());
        let read: OpLine = serde_json::from_str(&serde_json::to_string(&task).unwrap()).unwrap();
        let ops = fold([
            ("gw", line("s", Phase::Prepared, Some("a2a:remote"))),
            ("gw", read),
        ]);
        assert_eq!(ops["s"].task.as_ref().unwrap().subject, Some(subject));
    }

    #[test]
    fn who_an_operation_blocks() {
        use crate::scope::Name;
        use crate::subject::Subject;
        let chain = |names: &[&str]| {
            Subject::proven(
                names.iter().map(|n| Name::parse(n).unwrap()).collect(),
                vec![],
                vec![],
            )
        };
        let mut tool = line("t", Phase::Prepared, Some("mcp:s:write"));
        tool.agent = Some("child".into());
        tool.root = Some("lead".into());
        let mut everyone = line("e", Phase::Prepared, Some("mcp:s:write"));
        everyone.agent = Some("lead".into());
        everyone.blocks = Some(BlockScope::Everyone);
        let mut model = line("m", Phase::Prepared, Some("model:gpt"));
        model.agent = Some("lead".into());
        let ops = fold([("gw", tool), ("gw", everyone), ("gw", model)]);
        assert_eq!(ops["t"].blocks, Blocks::Agent("lead".into()));
        assert!(ops["t"].blocks.covers(&chain(&["lead"])));
        assert!(ops["t"].blocks.covers(&chain(&["lead", "other-child"])));
        assert!(!ops["t"].blocks.covers(&chain(&["bystander"])));
        assert!(!ops["t"].blocks.covers(&chain(&["bystander", "lead"])));
        assert!(ops["t"]
            .blocks
            .covers(&Subject::unprovable(None, vec![], vec![])));
        assert_eq!(ops["e"].blocks, Blocks::Everyone);
        assert!(ops["e"].blocks.covers(&chain(&["bystander"])));
        assert_eq!(ops["m"].blocks, Blocks::Nobody);
        assert!(!ops["m"]
            .blocks
            .covers(&Subject::unprovable(None, vec![], vec![])));
        assert_eq!(ops["t"].blocks.label(), "agent:lead");
    }
}
