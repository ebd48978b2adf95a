//! The drill index, `evidence/drills.json`: what the evidence log says about drills, kept beside
//! it, so the drill gate of `stopline run` and the gateway's `GET /v1/drills` read what is
//! live, never the history.
//!
//! **What it holds.** Per harness version the `pass` of its last drill, whether any drill of it
//! passed, and the `seq`/hash of that last drill's line; how many drills the log recorded; the
//! newest [`RECENT_DRILLS`] drill records themselves (so pruning old segments no longer forgets
//! drills); and its anchor, `through`: the `seq`/hash of the newest drill line it covers
//! (`null` when it covers none).
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
//! is durable), then replaces the index atomically (`evidence.drills.tmp.*`, `.rename`,
//! `.dirsync`), then the head naming the new line as `drills`. An append that finds an
//! unanchored drill line after the head folds it into the index before it anchors it. So every
//! durable head's `drills` is covered by the durable index, or by it and the line after the
//! head (model-checked: the `drill-index` scenarios).
//!
//! **What the gate reads of it.** The drill gate needs the summary only (the versions, the
//! count, the anchor): [`Evidence::drill_summary`] reads the same file as [`DrillSummary`], whose
//! `recent` records are counted and skipped unread (`serde::de::IgnoredAny`), so a gate costs
//! the same however full the recent list is. `GET /v1/drills` reads the whole [`DrillIndex`].
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

/// The schema of `evidence/drills.json`.
pub const DRILLS_SCHEMA: &str = "stopline.evidence-drills.v1";

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

/// The drill index, `evidence/drills.json` (and what a reader makes of it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrillIndex {
    /// [`DRILLS_SCHEMA`].
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
        let line = fold_versions(&mut self.versions, entry);
        self.total += 1;
        self.recent.push(RecentDrill {
            line: line.clone(),
            record: entry.body.clone(),
        });
        if self.recent.len() > RECENT_DRILLS {
            let excess = self.recent.len() - RECENT_DRILLS;
            self.recent.drain(..excess);
        }
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

    fn parse(bytes: &[u8]) -> Result<DrillIndex, String> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| format!("evidence/drills.json is not JSON: {e}"))?;
        if value.get("schema").and_then(Value::as_str) != Some(DRILLS_SCHEMA) {
            return Err(format!("evidence/drills.json is not {DRILLS_SCHEMA}"));
        }
        let index: DrillIndex = serde_json::from_value(value)
            .map_err(|e| format!("evidence/drills.json is malformed: {e}"))?;
        check_counts(index.recent.len(), index.total)?;
        Ok(index)
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

/// The drill index as the drill gate reads it: [`DrillIndex`] without its recent records,
/// which are counted (an index listing more than it counts is still refused) and skipped
/// unread, so a gate's cost does not grow with them. The same file, the same checks.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DrillSummary {
    /// [`DRILLS_SCHEMA`].
    pub schema: String,
    /// The newest drill line it covers.
    pub through: Option<LineRef>,
    /// How many drill records it covers.
    pub total: u64,
    /// Per harness version.
    pub versions: BTreeMap<String, VersionDrills>,
    /// How many recent records the file lists (their contents are not read).
    #[serde(rename = "recent")]
    recent: RecentCount,
}

/// The recent records, counted: each must be `{"line": …, "record": {…}}` as [`RecentDrill`]
/// is, and the record's contents are skipped unread.
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
        DrillSummary::from(DrillIndex::default())
    }
}

impl From<DrillIndex> for DrillSummary {
    fn from(index: DrillIndex) -> DrillSummary {
        DrillSummary {
            schema: index.schema,
            through: index.through,
            total: index.total,
            versions: index.versions,
            recent: RecentCount(index.recent.len()),
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
        self.recent.0 = (self.recent.0 + 1).min(RECENT_DRILLS);
        self.through = Some(line);
    }

    fn parse(bytes: &[u8]) -> Result<DrillSummary, String> {
        let Ok(summary) = serde_json::from_slice::<DrillSummary>(bytes) else {
            // Refused either way; the whole read words why, as it always did.
            return DrillIndex::parse(bytes).map(DrillSummary::from);
        };
        if summary.schema != DRILLS_SCHEMA {
            return Err(format!("evidence/drills.json is not {DRILLS_SCHEMA}"));
        }
        check_counts(summary.recent.0, summary.total)?;
        Ok(summary)
    }
}

/// What a reader of the drill index reads it as: the whole index or its summary.
trait IndexRead: Sized + Default + From<DrillIndex> {
    fn parse(bytes: &[u8]) -> Result<Self, String>;
    fn through(&self) -> &Option<LineRef>;
    fn fold(&mut self, entry: &WalEntry);
}

impl IndexRead for DrillIndex {
    fn parse(bytes: &[u8]) -> Result<Self, String> {
        DrillIndex::parse(bytes)
    }
    fn through(&self) -> &Option<LineRef> {
        &self.through
    }
    fn fold(&mut self, entry: &WalEntry) {
        DrillIndex::fold(self, entry);
    }
}

impl IndexRead for DrillSummary {
    fn parse(bytes: &[u8]) -> Result<Self, String> {
        DrillSummary::parse(bytes)
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
        let index = match self.evidence().drill_index_as::<I>() {
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

    /// Replace `evidence/drills.json` with `index`: temporary file, fsync, rename, directory
    /// fsync (`evidence.drills.*`).
    pub(crate) fn write_drill_index(&self, index: &DrillIndex) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(index).map_err(|e| {
            StoreError::corrupt(
                stopline_core::RefusalCode::ControlIo,
                format!("the drill index does not serialize: {e}"),
            )
        })?;
        let path = self.layout.evidence_drills();
        #[cfg(feature = "planted-bugs")]
        if self.planted == crate::planted::PlantedBug::DrillIndexRenamedBeforeFsync {
            return self.replace_visible(&path, &bytes, "evidence.drills");
        }
        self.replace_atomic(&path, &bytes, "evidence.drills")
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
        let mut index = match self.evidence().drill_index() {
            Ok(Some(index)) if index.through.as_ref() == Some(&here) => return Some(Some(here)),
            Ok(Some(index)) if index.through == before => index,
            Ok(None) if before.is_none() => DrillIndex::default(),
            Ok(None) => return None,
            Ok(Some(_)) | Err(_) => {
                tracing::warn!(
                    "evidence/drills.json does not match the evidence log; the drill gate refuses until it is removed"
                );
                return Some(Some(here));
            }
        };
        index.fold(line);
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

    /// `evidence/drills.json`: `Ok(None)` when missing, `Err` with why when it cannot be read
    /// or trusted.
    pub fn drill_index(&self) -> Result<Option<DrillIndex>, String> {
        self.drill_index_as()
    }

    fn drill_index_as<I: IndexRead>(&self) -> Result<Option<I>, String> {
        match self
            .store
            .read_optional(&self.store.layout.evidence_drills())
        {
            Ok(Some(bytes)) => I::parse(&bytes).map(Some),
            Ok(None) => Ok(None),
            Err(error) => Err(error.to_string()),
        }
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
            ["drills.json", "head.json", "log-000000000046.jsonl"],
            "{read:?}"
        );
        same(&index, &full(&store));
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
                name == "drills.json" || name == "head.json" || name == "log-000000000046.jsonl"
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
        let bytes = serde_json::to_vec(&index).unwrap();
        assert_eq!(DrillIndex::parse(&bytes).unwrap(), index);
    }

    /// The gate's summary reads the same file as the whole index and answers the same, its
    /// recent records skipped unread; what the whole read refuses, the summary refuses too.
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

        let mut whole = serde_json::to_value(&index).unwrap();
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
            let index = DrillIndex::parse(&bytes).expect_err(what);
            assert_eq!(
                DrillSummary::parse(&bytes).expect_err(what),
                index,
                "{what}"
            );
        }
        let torn = &serde_json::to_vec(&whole).unwrap()[..200];
        assert_eq!(
            DrillSummary::parse(torn).unwrap_err(),
            DrillIndex::parse(torn).unwrap_err()
        );
        whole["recent"] = json!([]);
        let bytes = serde_json::to_vec(&whole).unwrap();
        assert_eq!(
            DrillSummary::parse(&bytes).unwrap().history("h"),
            index.history("h")
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

    #[test]
    fn a_drill_line_left_after_the_head_is_folded_in_and_then_indexed_by_the_next_append() {
        let (_dir, store, _) = home();
        append(&store, drill("h", true, 1));
        append(&store, trip(2));
        // A crash after the drill line's fsync, before the index and the head: both are as
        // they were before it.
        let head = std::fs::read(store.layout().evidence_head()).unwrap();
        let index = std::fs::read(store.layout().evidence_drills()).unwrap();
        append(&store, drill("h", false, 3));
        std::fs::write(store.layout().evidence_head(), &head).unwrap();
        std::fs::write(store.layout().evidence_drills(), &index).unwrap();
        let read = store.evidence().drills().unwrap();
        assert_eq!(read.history("h").last_passed, Some(false));
        same(&read, &full(&store));
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
            assert!(fault.to_string().contains(why), "{why}: {fault}");
            assert_eq!(std::fs::read(&path).unwrap(), bytes, "never replaced");
            let (_, check) = store.evidence().chain_with_drills().unwrap();
            assert!(matches!(check, DrillIndexCheck::Disagrees(_)), "{check:?}");
        };
        refused(b"{", "not JSON");
        let mut other: Value = serde_json::from_slice(&good).unwrap();
        other["schema"] = json!("stopline.evidence-drills.v0");
        refused(other.to_string().as_bytes(), "is not");
        // An index older than the head's anchor (the failed drill cut from it): not the chain's.
        let older = serde_json::to_vec(&DrillIndex::from_entries(
            &store.evidence().entries().unwrap()[..1],
        ))
        .unwrap();
        refused(&older, "covers the drills through line 1");
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
