//! The drill index: what the evidence log says about drills, kept beside it in two files, so
//! the drill gate of `stopline run` and the gateway's `GET /v1/drills` read what is live, never
//! the history.
//!
//! **What it holds.** `evidence/drills.json`, the summary: per harness version the `pass` of
//! its last drill, whether any drill of it passed, and the `seq`/hash of that last drill's line;
//! how many drills the log recorded; and its anchor, `through`: the `seq`/hash of the newest
//! drill line it covers (`null` when it covers none). `evidence/drills-recent.json`: the newest
//! [`RECENT_DRILLS`] drill records themselves (so pruning old segments no longer forgets
//! drills), with the same anchor. The drill gate reads the summary alone, a small file whatever
//! the records weigh; `GET /v1/drills` reads both.
//!
//! **How it is anchored.** Every `evidence/head.json` a current writer writes carries the same
//! anchor, `"drills"`: the newest drill line at or before the head's line (copied forward by an
//! append of any other kind). A reader reads the head, the newest line at its offset (which must
//! hash to the head) and what follows it — exactly what an append reads — and the index; the
//! index is current when its `through` equals the head's `drills`, or equals the one line after
//! the head when that line is a drill (a crash after the index, before the head). When that line
//! is a drill the index does not cover yet (a crash after the line's fsync, before the index),
//! the reader folds that one line in; a crash leaves no more than that one line behind (the
//! evidence log's own rule), so it never reads further back.
//!
//! **How it is written.** An append of a drill record writes its line and fsyncs it (the record
//! is durable), then replaces the recent records' file atomically (`evidence.drills-recent.tmp.*`,
//! `.rename`, `.dirsync`), then the summary (`evidence.drills.tmp.*`, `.rename`, `.dirsync`), then
//! the head naming the new line as `drills`. An append that finds an unanchored drill line after
//! the head folds it into the index before it anchors it. So every durable head's `drills` is
//! covered by the durable index, or by it and the line after the head; and the summary is never
//! ahead of the records' file: a crash between the two files leaves the records' file one drill
//! ahead — the drill line after the head — which a reader folds into the summary it reads and the
//! next append writes (repaired, never trusted further). A records' file behind the summary, or
//! ahead by anything else, is not what any crash leaves: `GET /v1/drills` refuses it as an index
//! that does not match the log (below); the gate, which reads the summary alone, is not affected.
//! The summary says a drill passed only once that drill's line is durable, whichever file a crash
//! interrupts (model-checked: the `drill-index` and `drills-split` scenarios).
//!
//! **Older layouts.** An older stopline kept the records in `evidence/drills.json` itself
//! ([`DRILLS_SCHEMA_V1`]). Such an index is still read (the gate skips its records unread) and
//! `evidence/drills-recent.json` is ignored beside it; the next drill append (or index build)
//! writes the split layout, the records' file first, so a crash during that migration leaves the
//! older file in place and whole. An older stopline reading the split layout finds a summary of
//! another schema: it refuses its drill gate (`drill_required`) and its `GET /v1/drills`, and its
//! appends never rewrite the index, until the operator removes `evidence/drills.json` (it then
//! rebuilds its own from a full verified read).
//!
//! **When it cannot be used.** A home whose head has no `drills` (written by an older stopline,
//! or by an append that could not update the index) or that has no index at all is read whole
//! once, verified (an unverifiable log refuses, as the gate always did), and its index written
//! and its head re-anchored under the log's exclusive lock; after that the history is not read
//! again. An index that is present but unreadable, of another schema, or whose anchor is not the
//! chain's is never trusted and never silently replaced: it is a second witness of the log (a
//! log cut back to before a failed drill, its head rewritten to match, still disagrees with it),
//! so the gate refuses `drill_required` until the operator has looked (`evidence verify --all`
//! names the disagreement) and removed it, which rebuilds it from a full verified read.

use crate::error::StoreError;
use crate::evidence::Evidence;
use crate::Store;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use stopline_core::wal::WalEntry;

/// The schema (and evidence kind) of a drill record (docs/reference.md §9).
pub const DRILL_SCHEMA: &str = "control-observation.v1";

/// The schema of `evidence/drills.json`: the drill index's summary (the records are in
/// `evidence/drills-recent.json`, [`RECENT_SCHEMA`]).
pub const DRILLS_SCHEMA: &str = "stopline.evidence-drills.v2";

/// The schema of `evidence/drills.json` as an older stopline wrote it: the summary and the
/// recent records in one file. Still read; the next write replaces it with the split layout.
pub const DRILLS_SCHEMA_V1: &str = "stopline.evidence-drills.v1";

/// The schema of `evidence/drills-recent.json`: the newest drill records.
pub const RECENT_SCHEMA: &str = "stopline.evidence-drills-recent.v1";

/// How many of the newest drill records the index keeps (`GET /v1/drills?limit` is at most this).
pub const RECENT_DRILLS: usize = 100;

/// Whether an evidence record is a drill (its kind or its schema says `control-observation.v1`).
pub fn is_drill(body: &Map<String, Value>) -> bool {
    body.get("kind").and_then(Value::as_str) == Some(DRILL_SCHEMA)
        || body.get("schema").and_then(Value::as_str) == Some(DRILL_SCHEMA)
}

pub use crate::evidence::LineRef;

/// What the evidence log says about drills of one harness version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DrillHistory {
    /// The `pass` of the last drill of the version, `None` when there was none.
    pub last_passed: Option<bool>,
    /// Whether any drill of the version passed.
    pub any_passed: bool,
}

/// The drills of one harness version.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VersionDrills {
    /// The `pass` of its last drill (a drill whose `pass` is missing or not a boolean did not
    /// pass).
    pub last_pass: bool,
    /// Whether any of its drills passed.
    pub any_pass: bool,
    /// Its last drill's line.
    pub last: LineRef,
}

/// One of the newest drill records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecentDrill {
    /// Its line.
    pub line: LineRef,
    /// The record as the log holds it.
    pub record: Map<String, Value>,
}

/// The drill index, both its files (and what a reader makes of them). Serialized whole, it is
/// the older one-file layout ([`DRILLS_SCHEMA_V1`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrillIndex {
    /// The schema of the file its summary was read from ([`DRILLS_SCHEMA`] when built here).
    pub schema: String,
    /// The newest drill line it covers: its anchor, equal to the head's `drills`.
    pub through: Option<LineRef>,
    /// How many drill records it covers.
    pub total: u64,
    /// Per harness version.
    pub versions: BTreeMap<String, VersionDrills>,
    /// The newest drill records, oldest first, at most [`RECENT_DRILLS`].
    pub recent: Vec<RecentDrill>,
}

impl Default for DrillIndex {
    fn default() -> DrillIndex {
        DrillIndex {
            schema: DRILLS_SCHEMA.into(),
            through: None,
            total: 0,
            versions: BTreeMap::new(),
            recent: Vec::new(),
        }
    }
}

impl DrillIndex {
    /// The index of `entries` (a log read whole, oldest first).
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = &'a WalEntry>) -> DrillIndex {
        let mut index = DrillIndex::default();
        for entry in entries {
            index.fold(entry);
        }
        index
    }

    /// Fold one more line in (nothing when it is not a drill).
    pub fn fold(&mut self, entry: &WalEntry) {
        if !is_drill(&entry.body) {
            return;
        }
        self.fold_summary(entry);
        self.recent.push(RecentDrill {
            line: LineRef::of(entry),
            record: entry.body.clone(),
        });
        if self.recent.len() > RECENT_DRILLS {
            let excess = self.recent.len() - RECENT_DRILLS;
            self.recent.drain(..excess);
        }
    }

    /// Fold a drill line into the summary only (its record is in the recent list already).
    fn fold_summary(&mut self, entry: &WalEntry) {
        let line = fold_versions(&mut self.versions, entry);
        self.total += 1;
        self.through = Some(line);
    }

    /// The drills of `harness_version`.
    pub fn history(&self, harness_version: &str) -> DrillHistory {
        history_of(&self.versions, harness_version)
    }

    /// The newest `limit` drill records, newest first.
    pub fn newest(&self, limit: usize) -> impl Iterator<Item = &Map<String, Value>> {
        self.recent.iter().rev().take(limit).map(|d| &d.record)
    }

    /// The line of the drill before the newest one the recent list holds (`None`: it holds
    /// one drill or none), what the summary covers when a crash left the recent records one
    /// drill ahead of it.
    fn recent_before_newest(&self) -> Option<&LineRef> {
        let n = self.recent.len();
        (n >= 2).then(|| &self.recent[n - 2].line)
    }

    /// An older one-file index ([`DRILLS_SCHEMA_V1`]), read whole.
    fn parse_older(bytes: &[u8]) -> Result<DrillIndex, String> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| format!("evidence/drills.json is not JSON: {e}"))?;
        if value.get("schema").and_then(Value::as_str) != Some(DRILLS_SCHEMA_V1) {
            return Err(format!("evidence/drills.json is not {DRILLS_SCHEMA}"));
        }
        let index: DrillIndex = serde_json::from_value(value)
            .map_err(|e| format!("evidence/drills.json is malformed: {e}"))?;
        check_counts(index.recent.len(), index.total)?;
        Ok(index)
    }

    /// The summary of this index, as `evidence/drills.json` holds it.
    fn summary(&self) -> DrillSummary {
        DrillSummary {
            schema: DRILLS_SCHEMA.into(),
            through: self.through.clone(),
            total: self.total,
            versions: self.versions.clone(),
        }
    }
}

/// Fold a drill line into `versions`; returns its line.
fn fold_versions(versions: &mut BTreeMap<String, VersionDrills>, entry: &WalEntry) -> LineRef {
    let line = LineRef::of(entry);
    let passed = entry.body.get("pass").and_then(Value::as_bool) == Some(true);
    // A drill without a harness version is counted and listed, and gates no version.
    if let Some(version) = entry.body.get("harness_version").and_then(Value::as_str) {
        let any = versions.get(version).is_some_and(|v| v.any_pass);
        versions.insert(
            version.to_string(),
            VersionDrills {
                last_pass: passed,
                any_pass: any || passed,
                last: line.clone(),
            },
        );
    }
    line
}

fn history_of(versions: &BTreeMap<String, VersionDrills>, harness_version: &str) -> DrillHistory {
    match versions.get(harness_version) {
        Some(v) => DrillHistory {
            last_passed: Some(v.last_pass),
            any_passed: v.any_pass,
        },
        None => DrillHistory {
            last_passed: None,
            any_passed: false,
        },
    }
}

/// An index listing more recent drills than it keeps or counts is not trusted.
fn check_counts(recent: usize, total: u64) -> Result<(), String> {
    if recent > RECENT_DRILLS || recent as u64 > total {
        return Err("evidence/drills.json lists more drills than it counts".into());
    }
    Ok(())
}

/// The drill index as the drill gate reads it: `evidence/drills.json`, the summary, without the
/// recent records (in their own file), so a gate's cost does not grow with them. Serialized, it
/// is that file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DrillSummary {
    /// [`DRILLS_SCHEMA`], or [`DRILLS_SCHEMA_V1`] when read from an older index.
    pub schema: String,
    /// The newest drill line it covers.
    pub through: Option<LineRef>,
    /// How many drill records it covers.
    pub total: u64,
    /// Per harness version.
    pub versions: BTreeMap<String, VersionDrills>,
}

/// `evidence/drills.json` as read, in either layout: an older index's records are counted
/// (an index listing more than it counts is still refused) and skipped unread.
#[derive(Deserialize)]
struct SummaryRead {
    schema: String,
    through: Option<LineRef>,
    total: u64,
    versions: BTreeMap<String, VersionDrills>,
    #[serde(default)]
    recent: Option<RecentCount>,
}

/// An older index's recent records, counted: each must be `{"line": …, "record": {…}}` as
/// [`RecentDrill`] is, and the record's contents are skipped unread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct RecentCount(usize);

/// One recent record's shape, its contents skipped.
#[derive(Deserialize)]
#[allow(dead_code)] // read for its shape only
struct RecentShape {
    line: LineRef,
    record: SkippedObject,
}

/// A JSON object whose entries are skipped.
struct SkippedObject;

impl<'de> Deserialize<'de> for SkippedObject {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Skip;
        impl<'de> serde::de::Visitor<'de> for Skip {
            type Value = SkippedObject;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a drill record")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<SkippedObject, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(SkippedObject)
            }
        }
        deserializer.deserialize_map(Skip)
    }
}

impl<'de> Deserialize<'de> for RecentCount {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Count;
        impl<'de> serde::de::Visitor<'de> for Count {
            type Value = RecentCount;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of drill records")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<RecentCount, A::Error> {
                let mut n = 0;
                while seq.next_element::<RecentShape>()?.is_some() {
                    n += 1;
                }
                Ok(RecentCount(n))
            }
        }
        deserializer.deserialize_seq(Count)
    }
}

impl Default for DrillSummary {
    fn default() -> DrillSummary {
        DrillIndex::default().summary()
    }
}

impl From<DrillIndex> for DrillSummary {
    fn from(index: DrillIndex) -> DrillSummary {
        DrillSummary {
            schema: index.schema,
            through: index.through,
            total: index.total,
            versions: index.versions,
        }
    }
}

impl DrillSummary {
    /// The drills of `harness_version`.
    pub fn history(&self, harness_version: &str) -> DrillHistory {
        history_of(&self.versions, harness_version)
    }

    /// Fold one more line in, as [`DrillIndex::fold`] does (nothing when it is not a drill).
    pub fn fold(&mut self, entry: &WalEntry) {
        if !is_drill(&entry.body) {
            return;
        }
        let line = fold_versions(&mut self.versions, entry);
        self.total += 1;
        self.through = Some(line);
    }

    /// `evidence/drills.json` in either layout: the split one's summary (which lists no
    /// records), or an older index (whose records are counted and skipped).
    fn parse(bytes: &[u8]) -> Result<DrillSummary, String> {
        let read = match serde_json::from_slice::<SummaryRead>(bytes) {
            Ok(read) => read,
            Err(error) => return Err(unreadable_index(bytes, &error)),
        };
        match (read.schema.as_str(), read.recent) {
            (DRILLS_SCHEMA, None) => {}
            (DRILLS_SCHEMA_V1, Some(RecentCount(n))) => check_counts(n, read.total)?,
            (DRILLS_SCHEMA, Some(_)) => {
                return Err(
                    "evidence/drills.json is malformed: a summary that lists records".into(),
                )
            }
            (DRILLS_SCHEMA_V1, None) => {
                return Err("evidence/drills.json is malformed: missing field `recent`".into())
            }
            _ => return Err(format!("evidence/drills.json is not {DRILLS_SCHEMA}")),
        }
        Ok(DrillSummary {
            schema: read.schema,
            through: read.through,
            total: read.total,
            versions: read.versions,
        })
    }
}

/// Why `evidence/drills.json` does not read, worded as the whole read always worded it.
fn unreadable_index(bytes: &[u8], error: &serde_json::Error) -> String {
    match serde_json::from_slice::<Value>(bytes) {
        Err(e) => format!("evidence/drills.json is not JSON: {e}"),
        Ok(value)
            if !matches!(
                value.get("schema").and_then(Value::as_str),
                Some(DRILLS_SCHEMA | DRILLS_SCHEMA_V1)
            ) =>
        {
            format!("evidence/drills.json is not {DRILLS_SCHEMA}")
        }
        // An older index: refused as its whole read words it.
        Ok(value) if value.get("schema").and_then(Value::as_str) == Some(DRILLS_SCHEMA_V1) => {
            DrillIndex::parse_older(bytes)
                .err()
                .unwrap_or_else(|| format!("evidence/drills.json is malformed: {error}"))
        }
        Ok(_) => format!("evidence/drills.json is malformed: {error}"),
    }
}

/// `evidence/drills-recent.json`: the newest drill records, anchored as the summary is (its
/// `through` is its newest record's line).
#[derive(Deserialize)]
struct RecentFile {
    schema: String,
    through: Option<LineRef>,
    recent: Vec<RecentDrill>,
}

/// `evidence/drills-recent.json` as written.
#[derive(Serialize)]
struct RecentOut<'a> {
    schema: &'a str,
    through: &'a Option<LineRef>,
    recent: &'a [RecentDrill],
}

impl RecentFile {
    fn parse(bytes: &[u8]) -> Result<RecentFile, String> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| format!("evidence/drills-recent.json is not JSON: {e}"))?;
        if value.get("schema").and_then(Value::as_str) != Some(RECENT_SCHEMA) {
            return Err(format!(
                "evidence/drills-recent.json is not {RECENT_SCHEMA}"
            ));
        }
        let file: RecentFile = serde_json::from_value(value)
            .map_err(|e| format!("evidence/drills-recent.json is malformed: {e}"))?;
        if file.recent.len() > RECENT_DRILLS
            || file.recent.last().map(|d| &d.line) != file.through.as_ref()
        {
            return Err(
                "evidence/drills-recent.json is malformed: its anchor is not its newest record"
                    .into(),
            );
        }
        debug_assert_eq!(file.schema, RECENT_SCHEMA);
        Ok(file)
    }
}

/// The drill index's files as read: the index (the summary's fields, the records' file's
/// records) and the anchor of the records' file (`None`: an older one-file index).
struct IndexFiles {
    index: DrillIndex,
    recent_through: Option<Option<LineRef>>,
}

impl IndexFiles {
    /// The index the two files make once a crash between them is accounted for: the records'
    /// file covers what the summary covers, or one drill more — `after`, the drill line a crash
    /// left after the head, when the summary covers `anchor`, the head's (the records' file is
    /// written first) — which is folded into the summary. Anything else is not what a crash
    /// leaves, and is refused.
    fn settle(
        self,
        anchor: &Option<LineRef>,
        after: Option<&WalEntry>,
    ) -> Result<DrillIndex, String> {
        let IndexFiles {
            mut index,
            recent_through,
        } = self;
        let Some(recent) = recent_through else {
            return Ok(index);
        };
        if recent != index.through {
            let ahead = after.filter(|line| {
                is_drill(&line.body)
                    && recent.as_ref() == Some(&LineRef::of(line))
                    && index.through == *anchor
                    && index.recent_before_newest() == anchor.as_ref()
            });
            let Some(line) = ahead else {
                return Err(format!(
                    "evidence/drills-recent.json does not hold the drills evidence/drills.json covers (the records through {}, the summary through {})",
                    describe(recent.as_ref()),
                    describe(index.through.as_ref())
                ));
            };
            index.fold_summary(line);
        }
        check_counts(index.recent.len(), index.total)?;
        Ok(index)
    }
}

/// What a reader of the drill index reads it as: the whole index or its summary.
trait IndexRead: Sized + Default + From<DrillIndex> {
    /// Read it from `store`, the head's drill anchor `anchor` and the line after the head
    /// `after` (if any) in hand; `Ok(None)` when `evidence/drills.json` is missing.
    fn read(
        store: &Store,
        anchor: &Option<LineRef>,
        after: Option<&WalEntry>,
    ) -> Result<Option<Self>, String>;
    fn through(&self) -> &Option<LineRef>;
    fn fold(&mut self, entry: &WalEntry);
}

impl IndexRead for DrillIndex {
    fn read(
        store: &Store,
        anchor: &Option<LineRef>,
        after: Option<&WalEntry>,
    ) -> Result<Option<Self>, String> {
        store
            .drill_files()?
            .map(|files| files.settle(anchor, after))
            .transpose()
    }
    fn through(&self) -> &Option<LineRef> {
        &self.through
    }
    fn fold(&mut self, entry: &WalEntry) {
        DrillIndex::fold(self, entry);
    }
}

impl IndexRead for DrillSummary {
    fn read(
        store: &Store,
        _: &Option<LineRef>,
        _: Option<&WalEntry>,
    ) -> Result<Option<Self>, String> {
        match store.read_optional(&store.layout.evidence_drills()) {
            Ok(Some(bytes)) => DrillSummary::parse(&bytes).map(Some),
            Ok(None) => Ok(None),
            Err(error) => Err(error.to_string()),
        }
    }
    fn through(&self) -> &Option<LineRef> {
        &self.through
    }
    fn fold(&mut self, entry: &WalEntry) {
        DrillSummary::fold(self, entry);
    }
}

/// Why the drills cannot be read from the index: the gate refuses `drill_required` with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DrillsFault {
    /// The evidence log's end (its head and newest line) cannot be trusted or read.
    #[error("{0}")]
    Log(String),
    /// A home without a current index was read whole, and that read failed.
    #[error("{0}")]
    Unverified(String),
    /// `evidence/drills.json` exists but cannot be trusted.
    #[error("{0}; `stopline evidence verify --all` compares it with the log, and removing it rebuilds it from a full verified read")]
    Index(String),
}

/// How the drill index stands against the evidence log read whole (`evidence verify --all`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrillIndexCheck {
    /// What the drill gate reads is what the log says.
    Agrees,
    /// A home from an older stopline: the index is built by the next drill gate.
    NotBuilt,
    /// Why the index, or what the gate would read, is not what the log says.
    Disagrees(String),
}

/// What a reader found before deciding whether the index must be built.
enum Found<I> {
    /// The index, current through the newest line.
    Current(I),
    /// The index is missing or the head carries no drill anchor: read the log whole.
    Rebuild,
}

impl Store {
    /// The index as a reader finds it (the caller holds the log's lock).
    fn drills_found<I: IndexRead>(&self) -> Result<Found<I>, DrillsFault> {
        let log = |error: StoreError| DrillsFault::Log(error.to_string());
        let head = self
            .evidence()
            .head()
            .map_err(|why| DrillsFault::Log(format!("the evidence log's head: {why}")))?;
        let anchor = match &head {
            // No head: a fresh home (an empty log), or the very first append died before its
            // head; the log is then at most one line, and that is read as the history.
            None => Some(None),
            Some(head) => head.drills.clone(),
        };
        let Some(anchor) = anchor else {
            return Ok(Found::Rebuild);
        };
        let tail = self.evidence_tail(head, false).map_err(log)?;
        let after = tail.unanchored();
        // The index must cover the newest drill line: the head's, or the one line after it.
        let expected = match after {
            Some(line) if is_drill(&line.body) => Some(LineRef::of(line)),
            _ => anchor.clone(),
        };
        let index = match I::read(self, &anchor, after) {
            Ok(Some(index)) => index,
            Ok(None) if expected.is_none() => return Ok(Found::Current(I::default())),
            Ok(None) => return Ok(Found::Rebuild),
            Err(why) => return Err(DrillsFault::Index(why)),
        };
        if *index.through() == expected {
            return Ok(Found::Current(index));
        }
        #[cfg(feature = "planted-bugs")]
        let skip = self.planted == crate::planted::PlantedBug::DrillLineAfterHeadIgnored;
        #[cfg(not(feature = "planted-bugs"))]
        let skip = false;
        match after {
            // A crash after a drill line's fsync, before the index: fold that one line in.
            Some(line) if is_drill(&line.body) && *index.through() == anchor => {
                let mut index = index;
                if !skip {
                    index.fold(line);
                }
                Ok(Found::Current(index))
            }
            _ => Err(DrillsFault::Index(format!(
                "evidence/drills.json covers the drills through {} but the evidence log's are through {}",
                describe(index.through().as_ref()),
                describe(expected.as_ref())
            ))),
        }
    }

    /// Build the index from a full verified read, under the log's exclusive lock: the end of
    /// the log is made what an append would make it (a torn remnant kept and cut off, a line
    /// after the head made durable), the whole log read and verified, the index written, and
    /// the head re-anchored with the index's anchor. A crash before the head leaves a head
    /// without an anchor (built again) or with the one the index has.
    fn rebuild_drills(&self) -> Result<DrillIndex, DrillsFault> {
        let log = |error: StoreError| DrillsFault::Log(error.to_string());
        let head = self
            .evidence()
            .head()
            .map_err(|why| DrillsFault::Log(format!("the evidence log's head: {why}")))?;
        let anchor = head.as_ref().map_or(Some(None), |h| h.drills.clone());
        // A torn remnant is left to the next append to cut, as a reader leaves it: until then
        // the log does not verify, and the gate refuses as it always did.
        let tail = self.evidence_tail(head, false).map_err(log)?;
        if tail.after > 0 {
            self.confirm_unanchored(&tail).map_err(log)?;
        }
        let chain = self.evidence_chain_held(true).map_err(|fault| {
            DrillsFault::Unverified(format!("the evidence log cannot be verified ({fault})"))
        })?;
        if let Some(why) = self.evidence().anchor_fault(&chain.entries) {
            return Err(DrillsFault::Unverified(format!(
                "the evidence log cannot be verified ({why})"
            )));
        }
        let index = DrillIndex::from_entries(&chain.entries);
        if let Some(anchor) = anchor {
            // The head says which drill is the newest; a whole read that disagrees is a log
            // that was changed behind it.
            let expected = match tail.unanchored() {
                Some(line) if is_drill(&line.body) => Some(LineRef::of(line)),
                _ => anchor,
            };
            if index.through != expected {
                return Err(DrillsFault::Unverified(format!(
                    "the evidence log's head names its newest drill {} but the log's is {}",
                    describe(expected.as_ref()),
                    describe(index.through.as_ref())
                )));
            }
        }
        self.write_drill_index(&index)
            .map_err(|e| DrillsFault::Log(format!("cannot write the drill index: {e}")))?;
        if let Some(last) = &tail.last {
            let (segment, offset) = &tail.last_at;
            self.write_evidence_head(last.seq, &last.hash, segment, *offset, Some(&index.through))
                .map_err(log)?;
        }
        Ok(index)
    }

    /// Replace the drill index with `index`: `evidence/drills-recent.json` first, then
    /// `evidence/drills.json` (each a temporary file, fsync, rename, directory fsync:
    /// `evidence.drills-recent.*`, then `evidence.drills.*`), so the summary is never ahead of
    /// the records' file (an older one-file index is replaced by the split layout the same way).
    pub(crate) fn write_drill_index(&self, index: &DrillIndex) -> Result<(), StoreError> {
        let unserializable = |e: serde_json::Error| {
            StoreError::corrupt(
                stopline_core::RefusalCode::ControlIo,
                format!("the drill index does not serialize: {e}"),
            )
        };
        let recent = serde_json::to_vec(&RecentOut {
            schema: RECENT_SCHEMA,
            through: &index.through,
            recent: &index.recent,
        })
        .map_err(unserializable)?;
        let summary = serde_json::to_vec(&index.summary()).map_err(unserializable)?;
        let (recent_path, path) = (
            self.layout.evidence_drills_recent(),
            self.layout.evidence_drills(),
        );
        #[cfg(feature = "planted-bugs")]
        match self.planted {
            crate::planted::PlantedBug::DrillIndexRenamedBeforeFsync => {
                self.replace_atomic(&recent_path, &recent, "evidence.drills-recent")?;
                return self.replace_visible(&path, &summary, "evidence.drills");
            }
            crate::planted::PlantedBug::DrillSummaryBeforeRecords => {
                self.replace_atomic(&path, &summary, "evidence.drills")?;
                return self.replace_atomic(&recent_path, &recent, "evidence.drills-recent");
            }
            _ => {}
        }
        self.replace_atomic(&recent_path, &recent, "evidence.drills-recent")?;
        self.replace_atomic(&path, &summary, "evidence.drills")
    }

    /// The drill anchor of the head an append writes after `line` (a line durable already),
    /// given `before`, the anchor through the line before it: a drill is folded into the index
    /// first. `None` (the head is written without an anchor, so the next reader rebuilds the
    /// index from a full read) when the anchor before is unknown or the index cannot be
    /// written; an index that does not match `before` is left as it is, and the head names
    /// the new line anyway, so the gate keeps refusing it.
    pub(crate) fn drills_after(
        &self,
        before: Option<Option<LineRef>>,
        line: &WalEntry,
    ) -> Option<Option<LineRef>> {
        let before = before?;
        if !is_drill(&line.body) {
            return Some(before);
        }
        let here = LineRef::of(line);
        let mismatch = || {
            tracing::warn!(
                "evidence/drills.json does not match the evidence log; the drill gate refuses until it is removed"
            );
            Some(Some(here.clone()))
        };
        let IndexFiles {
            mut index,
            recent_through,
        } = match self.drill_files() {
            Ok(Some(files)) => files,
            Ok(None) if before.is_none() => IndexFiles {
                index: DrillIndex::default(),
                recent_through: None,
            },
            Ok(None) => return None,
            Err(_) => return mismatch(),
        };
        // The summary covers the line already: so does the records' file, written before it.
        if index.through.as_ref() == Some(&here) {
            return Some(Some(here));
        }
        if index.through != before {
            return mismatch();
        }
        match recent_through {
            // A crash between the two files: the records' file holds the line already.
            Some(Some(recent))
                if recent == here && index.recent_before_newest() == before.as_ref() =>
            {
                index.fold_summary(line);
            }
            Some(recent) if recent != before => return mismatch(),
            _ => index.fold(line),
        }
        match self.write_drill_index(&index) {
            Ok(()) => Some(Some(here)),
            Err(error) => {
                // The record is durable; the next reader builds the index from a full read.
                tracing::warn!(%error, "cannot update the drill index");
                None
            }
        }
    }
}

/// Why `index` (what the gate reads) is not `full` (the log read whole), if it is not. Records
/// pruned with their segments (through `pruned`) are in the index only: what the kept
/// segments hold must agree with it.
fn disagreement(index: &DrillIndex, full: &DrillIndex, pruned: Option<u64>) -> Option<String> {
    let through_agrees = match (&index.through, pruned) {
        // The index's newest drill was pruned: the kept segments hold none.
        (Some(through), Some(p)) if through.seq <= p => full.through.is_none(),
        _ => index.through == full.through,
    };
    if !through_agrees {
        return Some(format!(
            "evidence/drills.json covers the drills through {} but the log's are through {}",
            describe(index.through.as_ref()),
            describe(full.through.as_ref())
        ));
    }
    let kept = |seq: u64| pruned.is_none_or(|p| seq > p);
    let total_ok = match pruned {
        None => index.total == full.total,
        Some(_) => index.total >= full.total,
    };
    if !total_ok {
        return Some(format!(
            "evidence/drills.json counts {} drills, the log holds {}",
            index.total, full.total
        ));
    }
    let versions = index.versions.keys().chain(full.versions.keys());
    for version in versions {
        let (i, f) = (index.versions.get(version), full.versions.get(version));
        let agrees = match (i, f) {
            (Some(i), Some(f)) => {
                i.last == f.last
                    && i.last_pass == f.last_pass
                    && (i.any_pass == f.any_pass || (pruned.is_some() && i.any_pass))
            }
            // Only the index remembers a version whose every drill was pruned.
            (Some(i), None) => !kept(i.last.seq),
            (None, _) => false,
        };
        if !agrees {
            return Some(format!(
                "evidence/drills.json says of harness version {version:?} {} but the log says {}",
                version_text(i),
                version_text(f)
            ));
        }
    }
    let i: Vec<&RecentDrill> = index.recent.iter().filter(|d| kept(d.line.seq)).collect();
    let f: Vec<&RecentDrill> = full.recent.iter().collect();
    let k = i.len().min(f.len());
    if i[i.len() - k..] != f[f.len() - k..] || (pruned.is_none() && i.len() != f.len()) {
        return Some("evidence/drills.json's newest drill records are not the log's".into());
    }
    None
}

fn version_text(v: Option<&VersionDrills>) -> String {
    match v {
        Some(v) => format!(
            "last drill line {} pass {}, any passed {}",
            v.last.seq, v.last_pass, v.any_pass
        ),
        None => "no drill".into(),
    }
}

fn describe(line: Option<&LineRef>) -> String {
    match line {
        Some(line) => format!("line {}", line.seq),
        None => "no drill".into(),
    }
}

impl Evidence<'_> {
    /// The drills the evidence log records, from the drill index: reads `evidence/head.json`,
    /// the newest line and what follows it, and `evidence/drills.json` — never the history.
    /// An older home (no index, or a head without its anchor) is read whole once, verified,
    /// and indexed durably.
    pub fn drills(&self) -> Result<DrillIndex, DrillsFault> {
        self.drills_as()
    }

    /// What the drill gate reads: [`Evidence::drills`] as a [`DrillSummary`], whose recent
    /// records are skipped unread (`stopline run`'s gate decides from the versions alone).
    pub fn drill_summary(&self) -> Result<DrillSummary, DrillsFault> {
        self.drills_as()
    }

    fn drills_as<I: IndexRead>(&self) -> Result<I, DrillsFault> {
        let log = |error: StoreError| DrillsFault::Log(error.to_string());
        {
            let _guard = self
                .store
                .lock_log_shared(&self.store.layout.evidence_lock())
                .map_err(log)?;
            if let Found::Current(index) = self.store.drills_found::<I>()? {
                return Ok(index);
            }
        }
        // The index is built by one process at a time and never under a racing append.
        self.store
            .ensure_dirs(&[&self.store.layout.evidence()])
            .map_err(log)?;
        let _guard = self
            .store
            .lock_log_exclusive(&self.store.layout.evidence_lock())
            .map_err(log)?;
        match self.store.drills_found::<I>()? {
            Found::Current(index) => Ok(index),
            Found::Rebuild => self.store.rebuild_drills().map(I::from),
        }
    }

    /// The evidence log read whole (every segment, as `evidence_chain(true)`) and, under the
    /// same lock, what the drill gate would read checked against it. Writes nothing.
    pub fn chain_with_drills(
        &self,
    ) -> Result<(crate::evidence::EvidenceChain, DrillIndexCheck), stopline_core::wal::WalFault>
    {
        let _guard = self
            .store
            .lock_log_shared(&self.store.layout.evidence_lock())
            .map_err(|error| stopline_core::wal::WalFault::Unparsable {
                line: 0,
                why: format!("the evidence log cannot be read: {error}"),
            })?;
        let chain = self.store.evidence_chain_held(true)?;
        let check = match self.store.drills_found::<DrillIndex>() {
            Err(fault) => DrillIndexCheck::Disagrees(fault.to_string()),
            Ok(Found::Rebuild) => DrillIndexCheck::NotBuilt,
            Ok(Found::Current(index)) => {
                let full = DrillIndex::from_entries(&chain.entries);
                match disagreement(&index, &full, chain.pruned_through) {
                    Some(why) => DrillIndexCheck::Disagrees(why),
                    None => DrillIndexCheck::Agrees,
                }
            }
        };
        Ok((chain, check))
    }

    /// The drill index as its files hold it (the summary and the records' file agreeing, or
    /// an older one-file index): `Ok(None)` when `evidence/drills.json` is missing, `Err` with
    /// why when it cannot be read or trusted (a crash between the two files, which a reader
    /// settles against the log's end, included).
    pub fn drill_index(&self) -> Result<Option<DrillIndex>, String> {
        self.store
            .drill_files()?
            .map(|files| {
                let through = files.index.through.clone();
                files.settle(&through, None)
            })
            .transpose()
    }
}

impl Store {
    /// `evidence/drills.json` and, when it is a summary, `evidence/drills-recent.json`, as
    /// they are on disk (not yet settled against each other: [`IndexFiles::settle`]).
    fn drill_files(&self) -> Result<Option<IndexFiles>, String> {
        let bytes = match self.read_optional(&self.layout.evidence_drills()) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Ok(None),
            Err(error) => return Err(error.to_string()),
        };
        let summary = DrillSummary::parse(&bytes)?;
        if summary.schema == DRILLS_SCHEMA_V1 {
            // An older index holds its records; a records' file beside it is not its own.
            return DrillIndex::parse_older(&bytes).map(|index| {
                Some(IndexFiles {
                    index,
                    recent_through: None,
                })
            });
        }
        let recent = match self.read_optional(&self.layout.evidence_drills_recent()) {
            Ok(Some(bytes)) => RecentFile::parse(&bytes)?,
            Ok(None) => return Err("evidence/drills-recent.json is missing".into()),
            Err(error) => return Err(error.to_string()),
        };
        Ok(Some(IndexFiles {
            index: DrillIndex {
                schema: summary.schema,
                through: summary.through,
                total: summary.total,
                versions: summary.versions,
                recent: recent.recent,
            },
            recent_through: Some(recent.through),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::follow::tests::Counting;
    use serde_json::json;
    use std::sync::Arc;

    fn drill(version: &str, pass: bool, n: u64) -> Map<String, Value> {
        crate::chain::fields([
            ("schema", json!(DRILL_SCHEMA)),
            ("harness_version", json!(version)),
            ("pass", json!(pass)),
            ("n", json!(n)),
        ])
    }

    fn trip(n: u64) -> Map<String, Value> {
        crate::chain::fields([("schema", json!("evidence-record.v1")), ("n", json!(n))])
    }

    /// A home whose store counts its reads, three evidence records to a segment.
    fn home() -> (tempfile::TempDir, Store, Arc<Counting>) {
        let dir = tempfile::tempdir().unwrap();
        let counting = Arc::new(Counting::default());
        let store = Store::with_io(
            dir.path().join("home"),
            counting.clone(),
            Arc::new(crate::env::SystemEnv),
        )
        .with_evidence_segment_records(3);
        (dir, store, counting)
    }

    fn append(store: &Store, record: Map<String, Value>) -> u64 {
        let kind = if is_drill(&record) {
            DRILL_SCHEMA
        } else {
            "breaker"
        };
        store.evidence().append(kind, record).unwrap()
    }

    /// What a whole read of the log says (the old gate's answer).
    fn full(store: &Store) -> DrillIndex {
        DrillIndex::from_entries(&store.evidence().entries().unwrap())
    }

    fn same(a: &DrillIndex, b: &DrillIndex) {
        assert_eq!(
            (&a.through, a.total, &a.versions, &a.recent),
            (&b.through, b.total, &b.versions, &b.recent)
        );
    }

    #[test]
    fn the_gate_reads_the_head_the_newest_segment_and_the_index_never_the_history() {
        let (_dir, store, counting) = home();
        for n in 1..=45 {
            let record = match n % 3 {
                0 => drill("h", n % 2 == 0, n),
                1 => drill("other", true, n),
                _ => trip(n),
            };
            append(&store, record);
        }
        // The newest line is a trip starting a segment: the index's anchor is carried forward
        // by the head.
        append(&store, trip(46));
        counting.reset();
        let index = store.evidence().drills().unwrap();
        let read = counting.read_under(&store.layout().evidence());
        let names: Vec<String> = read
            .keys()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "drills-recent.json",
                "drills.json",
                "head.json",
                "log-000000000046.jsonl"
            ],
            "{read:?}"
        );
        same(&index, &full(&store));
        // The gate reads the summary alone: never the records' file.
        counting.reset();
        let summary = store.evidence().drill_summary().unwrap();
        let read = counting.read_under(&store.layout().evidence());
        let names: Vec<String> = read
            .keys()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["drills.json", "head.json", "log-000000000046.jsonl"],
            "{read:?}"
        );
        assert_eq!(summary, index.summary());
        assert_eq!(index.history("h").last_passed, Some(false));
        assert!(index.history("h").any_passed);
        assert_eq!(index.total, 30);
        assert_eq!(index.newest(1).next().unwrap()["n"], 45);
        // An append reads no more either.
        counting.reset();
        append(&store, drill("h", true, 47));
        let read = counting.read_under(&store.layout().evidence());
        assert!(
            read.keys().all(|p| {
                let name = p.file_name().unwrap().to_string_lossy();
                name == "drills.json"
                    || name == "drills-recent.json"
                    || name == "head.json"
                    || name == "log-000000000046.jsonl"
            }),
            "{read:?}"
        );
        assert_eq!(
            store.evidence().drills().unwrap().history("h").last_passed,
            Some(true)
        );
    }

    #[test]
    fn the_index_keeps_the_newest_hundred_records_and_counts_them_all() {
        let entries: Vec<WalEntry> = (1..=150u64)
            .map(|n| WalEntry {
                seq: n,
                kind: DRILL_SCHEMA.into(),
                body: drill("h", n != 150, n),
                hash: format!("{n:064x}"),
                record: None,
            })
            .collect();
        let index = DrillIndex::from_entries(&entries);
        assert_eq!(index.total, 150);
        assert_eq!(index.recent.len(), RECENT_DRILLS);
        assert_eq!(index.recent[0].line.seq, 51);
        let newest: Vec<&Value> = index.newest(2).map(|r| &r["n"]).collect();
        assert_eq!(newest, [&json!(150), &json!(149)]);
        assert_eq!(
            index.history("h"),
            DrillHistory {
                last_passed: Some(false),
                any_passed: true
            }
        );
        // Serialized whole it is the older one-file layout, and reads back as it.
        let older = DrillIndex {
            schema: DRILLS_SCHEMA_V1.into(),
            ..index
        };
        let bytes = serde_json::to_vec(&older).unwrap();
        assert_eq!(DrillIndex::parse_older(&bytes).unwrap(), older);
    }

    /// The gate's summary is `evidence/drills.json` alone, and answers as the whole index;
    /// an older one-file index reads as a summary with its records skipped unread, and what the
    /// whole read of it refuses, the summary refuses too.
    #[test]
    fn the_summary_answers_as_the_index_and_refuses_what_it_refuses() {
        let (_dir, store, _) = home();
        assert_eq!(
            store.evidence().drill_summary().unwrap(),
            DrillSummary::default()
        );
        for n in 1..=130u64 {
            append(
                &store,
                drill(if n % 2 == 0 { "h" } else { "g" }, n != 129, n),
            );
        }
        let index = store.evidence().drills().unwrap();
        let summary = store.evidence().drill_summary().unwrap();
        assert_eq!(summary, DrillSummary::from(index.clone()));
        for version in ["h", "g", "none"] {
            assert_eq!(
                summary.history(version),
                index.history(version),
                "{version}"
            );
        }
        assert_eq!(summary.total, 130);
        // The summary file lists no record: it is the same size with one drill or a hundred.
        let file: Value =
            serde_json::from_slice(&std::fs::read(store.layout().evidence_drills()).unwrap())
                .unwrap();
        assert_eq!(file, serde_json::to_value(&summary).unwrap());
        assert!(file.get("recent").is_none(), "{file}");

        let summary_value = serde_json::to_value(&summary).unwrap();
        let refused_summaries = [
            ("a summary that lists records", {
                let mut v = summary_value.clone();
                v["recent"] = json!([]);
                v
            }),
            ("another schema", {
                let mut v = summary_value.clone();
                v["schema"] = json!("stopline.evidence-drills.v0");
                v
            }),
            ("no versions", {
                let mut v = summary_value.clone();
                v.as_object_mut().unwrap().remove("versions");
                v
            }),
        ];
        for (what, value) in refused_summaries {
            let bytes = serde_json::to_vec(&value).unwrap();
            DrillSummary::parse(&bytes).expect_err(what);
        }

        let mut whole = serde_json::to_value(DrillIndex {
            schema: DRILLS_SCHEMA_V1.into(),
            ..index.clone()
        })
        .unwrap();
        let older = DrillSummary::parse(&serde_json::to_vec(&whole).unwrap()).unwrap();
        assert_eq!(
            (&older.through, older.total, &older.versions),
            (&summary.through, summary.total, &summary.versions)
        );
        let broken = [
            ("a recent record that is not an object", {
                let mut v = whole.clone();
                v["recent"][3]["record"] = json!(7);
                v
            }),
            ("a recent record without its line", {
                let mut v = whole.clone();
                v["recent"][0].as_object_mut().unwrap().remove("line");
                v
            }),
            ("more recent records than it counts", {
                let mut v = whole.clone();
                v["total"] = json!(2);
                v
            }),
            ("another schema", {
                let mut v = whole.clone();
                v["schema"] = json!("stopline.evidence-drills.v0");
                v
            }),
        ];
        for (what, value) in broken {
            let bytes = serde_json::to_vec(&value).unwrap();
            let index = DrillIndex::parse_older(&bytes).expect_err(what);
            assert_eq!(
                DrillSummary::parse(&bytes).expect_err(what),
                index,
                "{what}"
            );
        }
        let torn = &serde_json::to_vec(&whole).unwrap()[..200];
        assert_eq!(
            DrillSummary::parse(torn).unwrap_err(),
            DrillIndex::parse_older(torn).unwrap_err()
        );
        whole["recent"] = json!([]);
        let bytes = serde_json::to_vec(&whole).unwrap();
        assert_eq!(
            DrillSummary::parse(&bytes).unwrap().history("h"),
            index.history("h")
        );
    }

    /// A one-file index an older stopline wrote is read (its gate and its `/v1/drills`), a
    /// records' file beside it ignored, and the next drill append writes the split layout; the
    /// older stopline's read of the split layout's summary (a schema check against
    /// [`DRILLS_SCHEMA_V1`], as `parse_older` does) refuses it.
    #[test]
    fn an_older_one_file_index_is_read_and_the_next_drill_splits_it() {
        let (_dir, store, counting) = home();
        for n in 1..=5u64 {
            append(&store, drill("h", n != 4, n));
        }
        let split = std::fs::read(store.layout().evidence_drills()).unwrap();
        assert!(
            DrillIndex::parse_older(&split).is_err(),
            "an older stopline refuses the split layout's summary"
        );
        let index = store.evidence().drills().unwrap();
        let older = DrillIndex {
            schema: DRILLS_SCHEMA_V1.into(),
            ..index.clone()
        };
        std::fs::write(
            store.layout().evidence_drills(),
            serde_json::to_vec(&older).unwrap(),
        )
        .unwrap();
        // A stale records' file beside it (a newer stopline's, before a downgrade) is ignored.
        let stale = DrillIndex::from_entries(&store.evidence().entries().unwrap()[..2]);
        store.write_drill_index(&stale).unwrap();
        std::fs::write(
            store.layout().evidence_drills(),
            serde_json::to_vec(&older).unwrap(),
        )
        .unwrap();
        counting.reset();
        same(&store.evidence().drills().unwrap(), &index);
        assert!(!counting
            .read_under(&store.layout().evidence())
            .keys()
            .any(|p| p.ends_with("drills-recent.json")));
        assert_eq!(
            store.evidence().drill_summary().unwrap().history("h"),
            index.history("h")
        );
        append(&store, drill("h", false, 6));
        let file: Value =
            serde_json::from_slice(&std::fs::read(store.layout().evidence_drills()).unwrap())
                .unwrap();
        assert_eq!(file["schema"], DRILLS_SCHEMA, "{file}");
        same(&store.evidence().drills().unwrap(), &full(&store));
        assert_eq!(
            store.evidence().drill_summary().unwrap().history("h"),
            DrillHistory {
                last_passed: Some(false),
                any_passed: true
            }
        );
    }

    #[test]
    fn pruned_segments_no_longer_forget_drills() {
        let (_dir, store, _) = home();
        let store = store.with_evidence_keep_segments(Some(1));
        append(&store, drill("h", false, 1));
        for n in 2..=7 {
            append(&store, trip(n));
        }
        assert!(!store.layout().evidence_segment(1).exists());
        let index = store.evidence().drills().unwrap();
        assert_eq!(index.history("h").last_passed, Some(false));
        assert_eq!(full(&store).total, 0, "the whole read lost it");
        let (_, check) = store.evidence().chain_with_drills().unwrap();
        assert_eq!(check, DrillIndexCheck::Agrees);
    }

    /// A crash after a drill line's fsync leaves the index one drill behind the log (before
    /// the records' file), or the records' file one drill ahead of the summary (between the two
    /// files): a reader folds the line in, and the next append indexes it.
    #[test]
    fn a_drill_line_left_after_the_head_is_folded_in_and_then_indexed_by_the_next_append() {
        for between_the_files in [false, true] {
            let (_dir, store, _) = home();
            append(&store, drill("h", true, 1));
            append(&store, trip(2));
            let head = std::fs::read(store.layout().evidence_head()).unwrap();
            let index = std::fs::read(store.layout().evidence_drills()).unwrap();
            let recent = std::fs::read(store.layout().evidence_drills_recent()).unwrap();
            append(&store, drill("h", false, 3));
            std::fs::write(store.layout().evidence_head(), &head).unwrap();
            std::fs::write(store.layout().evidence_drills(), &index).unwrap();
            if !between_the_files {
                std::fs::write(store.layout().evidence_drills_recent(), &recent).unwrap();
            }
            let read = store.evidence().drills().unwrap();
            assert_eq!(read.history("h").last_passed, Some(false));
            same(&read, &full(&store));
            assert_eq!(
                store.evidence().drill_summary().unwrap(),
                read.summary(),
                "between the files: {between_the_files}"
            );
            assert_eq!(
                std::fs::read(store.layout().evidence_drills()).unwrap(),
                index,
                "a reader writes nothing"
            );
            append(&store, trip(4));
            let written = store.evidence().drill_index().unwrap().unwrap();
            assert_eq!(written.through.as_ref().map(|l| l.seq), Some(3));
            same(&store.evidence().drills().unwrap(), &full(&store));
        }
    }

    /// The records' file behind the summary (which no crash leaves: it is written first), or
    /// missing or unreadable beside it: `GET /v1/drills` refuses, the gate (the summary alone)
    /// still answers.
    #[test]
    fn a_records_file_behind_the_summary_or_unreadable_fails_closed_for_the_listing_only() {
        let (_dir, store, _) = home();
        append(&store, drill("h", true, 1));
        let behind = std::fs::read(store.layout().evidence_drills_recent()).unwrap();
        append(&store, drill("h", false, 2));
        let path = store.layout().evidence_drills_recent();
        for bytes in [Some(behind), Some(b"{".to_vec()), None] {
            match &bytes {
                Some(bytes) => std::fs::write(&path, bytes).unwrap(),
                None => std::fs::remove_file(&path).unwrap(),
            }
            let fault = store.evidence().drills().unwrap_err();
            assert!(matches!(fault, DrillsFault::Index(_)), "{fault}");
            assert!(fault.to_string().contains("drills-recent.json"), "{fault}");
            assert_eq!(
                store.evidence().drill_summary().unwrap().history("h"),
                DrillHistory {
                    last_passed: Some(false),
                    any_passed: true
                }
            );
            let (_, check) = store.evidence().chain_with_drills().unwrap();
            assert!(matches!(check, DrillIndexCheck::Disagrees(_)), "{check:?}");
        }
        // Removing the summary, as the refusal says, rebuilds both files.
        std::fs::remove_file(store.layout().evidence_drills()).unwrap();
        same(&store.evidence().drills().unwrap(), &full(&store));
        assert!(path.exists());
    }

    #[test]
    fn an_older_home_is_indexed_once_from_a_whole_verified_read() {
        let (_dir, store, counting) = home();
        for n in 1..=8 {
            append(
                &store,
                if n % 4 == 0 {
                    drill("h", n == 4, n)
                } else {
                    trip(n)
                },
            );
        }
        // What an older stopline left: no index, a head without the drill anchor.
        std::fs::remove_file(store.layout().evidence_drills()).unwrap();
        let mut head: Value =
            serde_json::from_slice(&std::fs::read(store.layout().evidence_head()).unwrap())
                .unwrap();
        head.as_object_mut().unwrap().remove("drills");
        std::fs::write(store.layout().evidence_head(), head.to_string()).unwrap();
        counting.reset();
        let index = store.evidence().drills().unwrap();
        assert_eq!(index.history("h").last_passed, Some(false));
        assert!(index.history("h").any_passed);
        assert!(counting
            .read_under(&store.layout().evidence())
            .keys()
            .any(|p| p.ends_with("log.jsonl")));
        let head: Value =
            serde_json::from_slice(&std::fs::read(store.layout().evidence_head()).unwrap())
                .unwrap();
        assert_eq!(head["drills"]["seq"], 8, "{head}");
        // Once built, the history is not read again.
        counting.reset();
        same(&store.evidence().drills().unwrap(), &index);
        assert!(!counting
            .read_under(&store.layout().evidence())
            .keys()
            .any(|p| p.ends_with("log.jsonl")));
        // An older home whose log does not verify refuses, as the gate always did.
        std::fs::remove_file(store.layout().evidence_drills()).unwrap();
        let path = store.layout().evidence_segment(1);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replacen("\"n\":2", "\"n\":9", 1)).unwrap();
        assert!(matches!(
            store.evidence().drills(),
            Err(DrillsFault::Unverified(_))
        ));
    }

    #[test]
    fn an_index_that_is_corrupt_or_does_not_match_the_chain_fails_closed() {
        let (_dir, store, _) = home();
        append(&store, drill("h", true, 1));
        append(&store, drill("h", false, 2));
        append(&store, trip(3));
        let path = store.layout().evidence_drills();
        let good = std::fs::read(&path).unwrap();
        let refused = |bytes: &[u8], why: &str| {
            std::fs::write(&path, bytes).unwrap();
            let fault = store.evidence().drills().unwrap_err();
            assert!(matches!(fault, DrillsFault::Index(_)), "{fault}");
            // The gate reads the summary alone, and refuses it for the same reason.
            let gate = store.evidence().drill_summary().unwrap_err();
            assert!(matches!(gate, DrillsFault::Index(_)), "{gate}");
            assert!(gate.to_string().contains(why), "{why}: {gate}");
            assert_eq!(std::fs::read(&path).unwrap(), bytes, "never replaced");
            let (_, check) = store.evidence().chain_with_drills().unwrap();
            assert!(matches!(check, DrillIndexCheck::Disagrees(_)), "{check:?}");
        };
        refused(b"{", "not JSON");
        let mut other: Value = serde_json::from_slice(&good).unwrap();
        other["schema"] = json!("stopline.evidence-drills.v0");
        refused(other.to_string().as_bytes(), "is not");
        // An index older than the head's anchor (the failed drill cut from it): not the chain's.
        let older = DrillIndex::from_entries(&store.evidence().entries().unwrap()[..1]);
        let recent = std::fs::read(store.layout().evidence_drills_recent()).unwrap();
        store.write_drill_index(&older).unwrap();
        refused(
            &std::fs::read(&path).unwrap(),
            "covers the drills through line 1",
        );
        std::fs::write(store.layout().evidence_drills_recent(), recent).unwrap();
        // The same content with another anchor hash.
        let mut forged: Value = serde_json::from_slice(&good).unwrap();
        forged["through"]["hash"] = json!("00");
        forged["versions"]["h"]["last_pass"] = json!(true);
        refused(forged.to_string().as_bytes(), "covers the drills");
        // An append on a home whose index does not match keeps its record and leaves the gate
        // refusing.
        append(&store, drill("h", true, 4));
        assert!(matches!(
            store.evidence().drills(),
            Err(DrillsFault::Index(_))
        ));
        // Removed by the operator: rebuilt from the whole verified log.
        std::fs::remove_file(&path).unwrap();
        let index = store.evidence().drills().unwrap();
        same(&index, &full(&store));
        assert_eq!(index.history("h").last_passed, Some(true));
        let (_, check) = store.evidence().chain_with_drills().unwrap();
        assert_eq!(check, DrillIndexCheck::Agrees);
    }

    #[test]
    fn a_fresh_home_has_no_drills_and_no_index_until_one_is_recorded() {
        let (_dir, store, _) = home();
        same(&store.evidence().drills().unwrap(), &DrillIndex::default());
        append(&store, trip(1));
        same(&store.evidence().drills().unwrap(), &DrillIndex::default());
        assert!(!store.layout().evidence_drills().exists());
        append(&store, drill("h", true, 2));
        assert!(store.layout().evidence_drills().exists());
        assert_eq!(
            store.evidence().drills().unwrap().history("h").last_passed,
            Some(true)
        );
    }
}
