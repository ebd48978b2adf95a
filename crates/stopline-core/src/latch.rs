//! Latch records and how an entry of `latches/` is read, failing closed.
//!
//! The directory entry's existence is the stop signal; its JSON body is evidence. An entry that
//! is unreadable, empty, malformed, has an unknown level or an unknown scope kind is read as a
//! `machine` latch at level `emergency` — never ignored.

use crate::admission::Level;
use crate::scope::Scope;
use crate::subject::Subject;
// What a refusal names of a latch is the refusal's (refusal.rs stays below every module).
pub use crate::refusal::{LatchRef, REFUSAL_REASON_CHARS};
use serde::{Deserialize, Serialize};

/// The session that engaged a latch, when known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatchSession {
    /// The agent the engaging session was bound to, if any.
    pub bound: Option<String>,
    /// The root of that agent's delegation chain when it was a delegated sub-agent (absent for
    /// a root's own token, and in latches written before it existed): the engage limit counts
    /// per root (docs/reference.md §6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// `governed` (an agent token), `console` (a local user) or `monitor`.
    pub tier: String,
}

/// The body of a latch file (docs/reference.md §5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatchRecord {
    /// Always `breakglass_latch`.
    pub kind: String,
    /// `latch_<hex>`; the file is `<id>.json`.
    pub id: String,
    /// The scope it stops.
    pub scope: Scope,
    /// Its level.
    pub level: Level,
    /// Who engaged it.
    pub by: String,
    /// Why.
    pub reason: String,
    /// The engaging process.
    pub pid: u32,
    /// The engaging session.
    pub session: LatchSession,
    /// RFC 3339 time of engagement.
    pub ts: String,
}

impl LatchRecord {
    /// The file name of this latch inside `latches/`.
    pub fn file_name(&self) -> String {
        format!("{}.json", self.id)
    }
}

/// The first `max` characters of `text`, with `…` when it was longer.
fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// One entry of `latches/` as the gates see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActiveLatch {
    /// The entry's file name.
    pub file: String,
    /// The scope it is enforced as (machine when the body cannot be trusted).
    pub scope: Scope,
    /// The level it is enforced as (emergency when the body cannot be trusted).
    pub level: Level,
    /// The parsed body, when it parsed.
    pub record: Option<LatchRecord>,
    /// Why the body was not trusted, when it was not.
    pub problem: Option<String>,
}

impl ActiveLatch {
    /// Read an entry from its name and the result of reading its bytes. Never fails: anything
    /// that is not a well-formed latch whose id matches its file name becomes a machine emergency.
    pub fn from_entry(file: &str, bytes: Result<&[u8], String>) -> ActiveLatch {
        let fail_closed = |problem: String| ActiveLatch {
            file: file.to_string(),
            scope: Scope::Machine,
            level: Level::Emergency,
            record: None,
            problem: Some(problem),
        };
        let bytes = match bytes {
            Ok(bytes) => bytes,
            Err(error) => return fail_closed(format!("unreadable: {error}")),
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return fail_closed("empty".to_string());
        }
        match serde_json::from_slice::<LatchRecord>(bytes) {
            Ok(record) if record.kind != "breakglass_latch" => {
                fail_closed(format!("unknown kind {:?}", record.kind))
            }
            Ok(record) if record.file_name() != file => {
                fail_closed(format!("id {:?} does not match its file name", record.id))
            }
            Ok(record) => ActiveLatch {
                file: file.to_string(),
                scope: record.scope.clone(),
                level: record.level,
                record: Some(record),
                problem: None,
            },
            Err(error) => fail_closed(format!("malformed: {error}")),
        }
    }

    /// The latch id: the record's, or the file stem.
    pub fn id(&self) -> String {
        self.file.trim_end_matches(".json").to_string()
    }

    /// The latch as a refusal names it ([`LatchRef`]).
    pub fn summary(&self) -> LatchRef {
        match &self.record {
            Some(record) => LatchRef {
                id: record.id.clone(),
                scope: record.scope.to_string(),
                level: record.level.as_str().to_string(),
                by: record.by.clone(),
                reason: truncate_chars(&record.reason, REFUSAL_REASON_CHARS),
                engaged_at: Some(record.ts.clone()),
            },
            None => LatchRef {
                id: self.id(),
                scope: self.scope.to_string(),
                level: self.level.as_str().to_string(),
                by: "unknown".to_string(),
                reason: truncate_chars(
                    &format!(
                        "the latch entry cannot be trusted ({}), so it is enforced as a machine emergency",
                        self.problem.as_deref().unwrap_or("no body")
                    ),
                    REFUSAL_REASON_CHARS,
                ),
                engaged_at: None,
            },
        }
    }

    /// True when this latch covers `subject`.
    pub fn covers(&self, subject: &Subject) -> bool {
        subject.is_covered_by(&self.scope)
    }

    /// This latch as JSON for receipts: the record (or a fail-closed stand-in) with `file`
    /// ([`shown`]).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(Shown::of(self)).unwrap_or_default()
    }
}

/// An active latch as receipts show it: the record with its `file`, or for an entry whose body
/// was not trusted a stand-in naming the scope and level it is enforced as and why.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Shown {
    // First: a stand-in lacks the record's `by`, `reason`, `pid`, `session` and `ts`.
    Trusted {
        #[serde(flatten)]
        record: LatchRecord,
        file: String,
    },
    Untrusted {
        kind: String,
        id: String,
        scope: Scope,
        level: Level,
        // Required on reading: a stand-in always says why its body was not trusted (a
        // trusted record missing a field is not a stand-in).
        #[serde(deserialize_with = "present")]
        problem: Option<String>,
        file: String,
    },
}

fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    String::deserialize(deserializer).map(Some)
}

impl Shown {
    fn of(latch: &ActiveLatch) -> Shown {
        match &latch.record {
            Some(record) => Shown::Trusted {
                record: record.clone(),
                file: latch.file.clone(),
            },
            None => Shown::Untrusted {
                kind: "breakglass_latch".to_string(),
                id: latch.id(),
                scope: latch.scope.clone(),
                level: latch.level,
                problem: latch.problem.clone(),
                file: latch.file.clone(),
            },
        }
    }

    fn latch(self) -> ActiveLatch {
        match self {
            Shown::Trusted { record, file } => ActiveLatch {
                file,
                scope: record.scope.clone(),
                level: record.level,
                record: Some(record),
                problem: None,
            },
            Shown::Untrusted {
                scope,
                level,
                problem,
                file,
                ..
            } => ActiveLatch {
                file,
                scope,
                level,
                record: None,
                problem,
            },
        }
    }
}

/// A list of active latches as receipts show them (`latches` of `status`, docs/reference.md §3):
/// `#[serde(with = "stopline_core::latch::shown")]`. Reading one back that is neither a latch
/// record with its `file` nor a fail-closed stand-in is an error.
pub mod shown {
    use super::{ActiveLatch, Shown};
    use serde::{Deserialize, Deserializer, Serializer};

    /// Write `latches` as shown.
    pub fn serialize<S: Serializer>(
        latches: &[ActiveLatch],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(latches.iter().map(Shown::of))
    }

    /// Read latches as shown.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<ActiveLatch>, D::Error> {
        Ok(Vec::<Shown>::deserialize(deserializer)?
            .into_iter()
            .map(Shown::latch)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(id: &str, scope: &str, level: &str) -> String {
        format!(
            r#"{{"kind":"breakglass_latch","id":"{id}","scope":"{scope}","level":"{level}","by":"x","reason":"r","pid":1,"session":{{"bound":null,"tier":"console"}},"ts":"t"}}"#
        )
    }

    #[test]
    fn a_refusal_names_who_why_and_how_long_ago() {
        let b = format!(
            r#"{{"kind":"breakglass_latch","id":"latch_1","scope":"agent:w","level":"halt-all","by":"safety","reason":"{}","pid":1,"session":{{"bound":null,"tier":"console"}},"ts":"2026-12-03T10:00:00.000Z"}}"#,
            "é".repeat(250)
        );
        let l = ActiveLatch::from_entry("latch_1.json", Ok(b.as_bytes()));
        let r = l.summary();
        assert_eq!(
            r.reason.chars().count(),
            REFUSAL_REASON_CHARS + 1,
            "200 and the ellipsis"
        );
        let at = crate::time::parse_rfc3339_ms("2026-12-03T10:00:00.000Z").unwrap();
        assert_eq!(r.age(at + 42_000).as_deref(), Some("42s"));
        assert_eq!(r.age(at + 3_723_000).as_deref(), Some("1h 2m"));
        let text = r.describe(at + 303_000);
        assert!(text.starts_with("stopped by safety (latch latch_1: scope agent:w, level halt-all, engaged 5m 3s ago)"), "{text}");
        assert!(r.advice().starts_with("do not retry"));
        let broken = ActiveLatch::from_entry("latch_2.json", Ok(b"{"));
        let r = broken.summary();
        assert_eq!((r.by.as_str(), r.level.as_str()), ("unknown", "emergency"));
        assert_eq!(r.level, Level::Emergency.as_str());
        assert!(
            r.advice().contains("until the owner recovers"),
            "{}",
            r.advice()
        );
        assert!(r.describe(0).contains("unknown time"));
    }

    #[test]
    fn well_formed_latch_keeps_its_scope() {
        let b = body("latch_1", "agent:w", "halt-all");
        let l = ActiveLatch::from_entry("latch_1.json", Ok(b.as_bytes()));
        assert_eq!(l.scope.to_string(), "agent:w");
        assert_eq!(l.level, Level::HaltAll);
        assert!(l.problem.is_none());
    }

    #[test]
    fn anything_doubtful_is_a_machine_emergency() {
        let cases: Vec<(&str, Result<Vec<u8>, String>)> = vec![
            ("latch_1.json", Ok(vec![])),
            ("latch_1.json", Ok(b"  \n".to_vec())),
            ("latch_1.json", Ok(b"{not json".to_vec())),
            ("latch_1.json", Err("permission denied".into())),
            (
                "latch_1.json",
                Ok(body("latch_1", "agent:w", "stop").into_bytes()),
            ),
            (
                "latch_1.json",
                Ok(body("latch_1", "host:w", "halt-all").into_bytes()),
            ),
            (
                "latch_2.json",
                Ok(body("latch_1", "agent:w", "halt-all").into_bytes()),
            ),
            ("whatever", Ok(b"[]".to_vec())),
        ];
        for (file, bytes) in cases {
            let l = ActiveLatch::from_entry(file, bytes.as_deref().map_err(Clone::clone));
            assert_eq!(
                (l.scope, l.level),
                (Scope::Machine, Level::Emergency),
                "{file}"
            );
            assert!(l.problem.is_some());
        }
    }
}
