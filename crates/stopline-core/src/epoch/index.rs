//! The epoch map indexed for admission: a decision looks up the subject's own scopes instead of
//! walking every revision (docs/reference.md §5, "What admission costs").
//!
//! [`IndexedEpochMap`] is built once for each read of the map (the control view holds one),
//! never per decision. Building it parses every stored key once and files its newest revision
//! under the key's kind; a key that does not parse (a kind a newer binary wrote, or a damaged
//! one) is filed with `machine` as covering everyone, so the rule stays fail closed. A decision
//! then costs one lookup per link of the chain, per ancestor directory of each project, per run,
//! per label and per id of the token's lineage: nothing that grows with how many agents, runs,
//! labels or tokens the map has revoked.
//!
//! The verdict is exactly the walk's (every revision newer than the issue epoch, each key
//! parsed and judged by [`super::key_covers`]): the newest covering revision, the smallest key
//! among equals. The unit tests compare the two over random maps and subjects.

use super::{AuthorityStatus, EpochMap};
use crate::scope::{Label, Name, Scope};
use crate::subject::Subject;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::Hash;
use std::ops::Deref;
use std::path::PathBuf;

/// The newest revision filed under one index entry, and the stored key that carries it (the
/// smallest such key when several do, as the walk in key order would report it).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Newest {
    revision: u64,
    key: String,
}

impl Newest {
    /// True when `self` should be reported before `other`: a higher revision, or the same one
    /// under a smaller key.
    fn beats(&self, other: &Newest) -> bool {
        self.revision > other.revision || self.revision == other.revision && self.key < other.key
    }
}

/// Keep in `slot` whichever of it and `candidate` is reported first.
fn offer(slot: &mut Option<Newest>, candidate: Newest) {
    if slot.as_ref().is_none_or(|held| candidate.beats(held)) {
        *slot = Some(candidate);
    }
}

/// Keep under `at` in `table` whichever of what is there and `candidate` is reported first.
fn keep<K: Hash + Eq>(table: &mut HashMap<K, Newest>, at: K, candidate: Newest) {
    match table.entry(at) {
        Entry::Occupied(mut held) => {
            if candidate.beats(held.get()) {
                held.insert(candidate);
            }
        }
        Entry::Vacant(slot) => {
            slot.insert(candidate);
        }
    }
}

/// Make `found` the `best` so far if it is reported before what `best` holds.
fn consider<'a>(best: &mut Option<&'a Newest>, found: Option<&'a Newest>) {
    if let Some(found) = found {
        if best.is_none_or(|held| found.beats(held)) {
            *best = Some(found);
        }
    }
}

/// Where each stored key of the map is filed, by what it covers.
#[derive(Debug, Clone, Default)]
struct ScopeIndex {
    /// `machine` and every key that does not parse: they cover everyone.
    everyone: Option<Newest>,
    agents: HashMap<Name, Newest>,
    /// By root; a subject's project is covered by the entry of any of its ancestors.
    projects: HashMap<PathBuf, Newest>,
    runs: HashMap<Name, Newest>,
    labels: HashMap<Label, Newest>,
    /// `token:<jti>`: covers the token itself.
    tokens: HashMap<String, Newest>,
    /// `token:<jti>+delegates`: covers the token and every token its lineage descends from it.
    token_lineages: HashMap<String, Newest>,
    /// The planted `IndexForgetsAncestorDelegates`: look up only the token's own id.
    #[cfg(feature = "planted-bugs")]
    forgets_ancestor_delegates: bool,
}

impl ScopeIndex {
    /// File the stored `key` at `revision`.
    fn file(&mut self, key: &str, revision: u64) {
        let entry = Newest {
            revision,
            key: key.to_string(),
        };
        match Scope::parse_stored(key) {
            Ok(Scope::Machine) | Err(_) => offer(&mut self.everyone, entry),
            Ok(Scope::Agent(name)) => keep(&mut self.agents, name, entry),
            Ok(Scope::Project(root)) => keep(&mut self.projects, root, entry),
            Ok(Scope::Run(id)) => keep(&mut self.runs, id, entry),
            Ok(Scope::Label(label)) => keep(&mut self.labels, label, entry),
            Ok(Scope::Token {
                jti,
                delegates: false,
            }) => keep(&mut self.tokens, jti, entry),
            Ok(Scope::Token {
                jti,
                delegates: true,
            }) => keep(&mut self.token_lineages, jti, entry),
        }
    }

    /// The newest entry covering `subject`, by lookups of its own keys.
    fn newest_covering(&self, subject: &Subject) -> Option<&Newest> {
        let mut best = self.everyone.as_ref();
        for name in &subject.chain {
            consider(&mut best, self.agents.get(name));
        }
        for project in &subject.projects {
            // `path_within(root, project)` is `project.starts_with(root)`: `root` is one of
            // the project's ancestors, compared by components as the map's keys are.
            for ancestor in project.ancestors() {
                consider(&mut best, self.projects.get(ancestor));
            }
        }
        for run in &subject.runs {
            consider(&mut best, self.runs.get(run));
        }
        for label in &subject.labels {
            consider(&mut best, self.labels.get(label));
        }
        // As `Subject::is_revoked_by`: the token's own id under either key, an ancestor's
        // only under `+delegates`.
        if let Some((own, ancestors)) = subject.tokens.split_last() {
            consider(&mut best, self.tokens.get(own));
            consider(&mut best, self.token_lineages.get(own));
            #[cfg(feature = "planted-bugs")]
            if self.forgets_ancestor_delegates {
                return best;
            }
            for ancestor in ancestors {
                consider(&mut best, self.token_lineages.get(ancestor));
            }
        }
        best
    }
}

/// An [`EpochMap`] with its keys indexed for [`IndexedEpochMap::authority_status`]. It reads
/// as the map (`Deref`) and cannot be changed in place, so the index never goes stale: to
/// change the map, take it out ([`IndexedEpochMap::into_map`]) and index the result again.
#[derive(Debug, Clone, Default)]
pub struct IndexedEpochMap {
    map: EpochMap,
    index: ScopeIndex,
}

impl From<EpochMap> for IndexedEpochMap {
    fn from(map: EpochMap) -> IndexedEpochMap {
        let mut index = ScopeIndex::default();
        for (key, &revision) in &map.scopes {
            index.file(key, revision);
        }
        IndexedEpochMap { map, index }
    }
}

impl Deref for IndexedEpochMap {
    type Target = EpochMap;
    fn deref(&self) -> &EpochMap {
        &self.map
    }
}

impl PartialEq for IndexedEpochMap {
    /// Equal when the maps are: the index is a function of the map.
    fn eq(&self, other: &IndexedEpochMap) -> bool {
        self.map == other.map
    }
}

impl Eq for IndexedEpochMap {}

impl PartialEq<EpochMap> for IndexedEpochMap {
    fn eq(&self, other: &EpochMap) -> bool {
        self.map == *other
    }
}

impl IndexedEpochMap {
    /// The map, to change it.
    pub fn into_map(self) -> EpochMap {
        self.map
    }

    /// This index with the planted bug `IndexForgetsAncestorDelegates` of the store's
    /// `PlantedBug` (the model checker's tests only): a decision looks up `token:<jti>+delegates`
    /// for the token's own id and never for its ancestors', so a token delegated under a
    /// revoked one keeps working.
    #[cfg(feature = "planted-bugs")]
    pub fn planted_forgetting_ancestor_delegates(mut self) -> IndexedEpochMap {
        self.index.forgets_ancestor_delegates = true;
        self
    }

    /// The map.
    pub fn map(&self) -> &EpochMap {
        &self.map
    }

    /// Judge an authority minted under `issue_epoch` for `subject` (docs/reference.md §5,
    /// Epochs): refused as unknown lineage when `issue_epoch > seq`, as folded below `floor`,
    /// stale when a scope covering the subject advanced past it (the newest such revision is
    /// reported). A stored key that cannot be parsed covers everyone (fail closed).
    pub fn authority_status(&self, issue_epoch: u64, subject: &Subject) -> AuthorityStatus {
        if issue_epoch > self.map.seq {
            return AuthorityStatus::Future { seq: self.map.seq };
        }
        if issue_epoch < self.map.floor {
            return AuthorityStatus::Folded {
                floor: self.map.floor,
            };
        }
        match self.index.newest_covering(subject) {
            Some(newest) if newest.revision > issue_epoch => AuthorityStatus::Stale {
                scope: newest.key.clone(),
                revision: newest.revision,
            },
            _ => AuthorityStatus::Current,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A small seeded generator (xorshift64*): the same cases on every run, no dependency.
    struct Seeded(u64);

    impl Seeded {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
            from[self.below(from.len() as u64) as usize]
        }
        fn some<'a>(&mut self, from: &[&'a str], most: u64) -> Vec<&'a str> {
            (0..self.below(most + 1)).map(|_| self.pick(from)).collect()
        }
    }

    const J1: &str = "0123456789abcdef0123456789abcdef";
    const J2: &str = "fedcba9876543210fedcba9876543210";
    const J3: &str = "00000000000000000000000000000003";

    /// Stored keys of every kind, those that do not parse among them.
    fn keys() -> Vec<String> {
        let mut keys: Vec<String> = [
            "machine",
            "agent:a",
            "agent:b",
            "agent:c",
            "project:/",
            "project:/srv",
            "project:/srv/a",
            "project:/srv/a/x",
            "project:/srv/ab",
            "run:r1",
            "run:r2",
            "label:k=v",
            "label:k=w",
            "label:t=v",
            // Unreadable: an upper-case name, an unknown kind, a relative or untidy root, a
            // short token id, a label without a value, an empty key.
            "agent:A",
            "future:x",
            "project:srv/a",
            "project:/srv/a/",
            "token:abc",
            "label:k",
            "",
        ]
        .iter()
        .map(|k| k.to_string())
        .collect();
        for jti in [J1, J2, J3] {
            keys.push(format!("token:{jti}"));
            keys.push(format!("token:{jti}+delegates"));
        }
        keys
    }

    fn subject(rng: &mut Seeded) -> Subject {
        let names = |v: Vec<&str>| v.into_iter().map(|n| Name::parse(n).unwrap()).collect();
        let chain = names(rng.some(&["a", "b", "c", "d"], 3));
        let projects = rng
            .some(
                &[
                    "/srv/a/x/y",
                    "/srv/a",
                    "/srv//a/x",
                    "/srv/a/.",
                    "/srv/ab/c",
                    "/srv/abc",
                    "/",
                    "/other",
                    "srv/a",
                    "",
                ],
                2,
            )
            .into_iter()
            .map(PathBuf::from)
            .collect();
        let runs = names(rng.some(&["r1", "r2", "r3"], 2));
        let labels = rng
            .some(&["k=v", "k=w", "t=v", "t=w"], 3)
            .into_iter()
            .map(|l| Label::parse(l).unwrap())
            .collect();
        let tokens = rng
            .some(&[J1, J2, J3, "11111111111111111111111111111111"], 3)
            .into_iter()
            .map(str::to_string)
            .collect();
        let provable = rng.below(4) != 0;
        let subject = if provable {
            Subject::proven(chain, projects, runs)
        } else {
            Subject::unprovable(chain.last().cloned(), projects, runs)
        };
        subject.with_labels(labels).with_tokens(tokens)
    }

    fn map(rng: &mut Seeded, keys: &[String]) -> EpochMap {
        let seq = 1 + rng.below(12);
        let mut scopes = BTreeMap::new();
        for _ in 0..rng.below(10) {
            let key = keys[rng.below(keys.len() as u64) as usize].clone();
            // Revisions often tie, which no real advance makes: the order of report must
            // still be the walk's.
            scopes.insert(key, 1 + rng.below(seq));
        }
        let floor = if rng.below(4) == 0 {
            rng.below(seq + 1)
        } else {
            0
        };
        EpochMap {
            seq,
            scopes,
            floor,
            ..EpochMap::default()
        }
    }

    #[test]
    fn the_lookup_judges_every_authority_as_the_walk_does() {
        let keys = keys();
        let mut rng = Seeded(0x5eed_0fad_1551_0101);
        let mut stale = 0;
        for _ in 0..4_000 {
            let map = map(&mut rng, &keys);
            let indexed = map.clone().indexed();
            for _ in 0..8 {
                let subject = subject(&mut rng);
                let issue_epoch = rng.below(map.seq + 2);
                let walked = map.walked_authority_status(issue_epoch, &subject);
                stale += usize::from(matches!(walked, AuthorityStatus::Stale { .. }));
                assert_eq!(
                    indexed.authority_status(issue_epoch, &subject),
                    walked,
                    "map {map:?}, subject {subject:?}, issue epoch {issue_epoch}"
                );
            }
        }
        // The cases exercise the rule, not only its edges.
        assert!(stale > 1_000, "only {stale} stale verdicts");
    }

    #[test]
    fn a_key_that_does_not_parse_revokes_everyone_and_a_delegates_key_the_lineage() {
        let mut map = EpochMap {
            seq: 3,
            ..EpochMap::default()
        };
        map.scopes.insert(format!("token:{J1}+delegates"), 2);
        let child = Subject::proven(vec![Name::parse("a").unwrap()], vec![], vec![])
            .with_tokens(vec![J1.to_string(), J2.to_string()]);
        let other = Subject::proven(vec![Name::parse("a").unwrap()], vec![], vec![])
            .with_tokens(vec![J2.to_string()]);
        let indexed = map.clone().indexed();
        assert!(matches!(
            indexed.authority_status(1, &child),
            AuthorityStatus::Stale { revision: 2, .. }
        ));
        assert_eq!(
            indexed.authority_status(1, &other),
            AuthorityStatus::Current
        );
        map.scopes.insert("workload:ctf".into(), 3);
        assert_eq!(
            map.indexed().authority_status(2, &other),
            AuthorityStatus::Stale {
                scope: "workload:ctf".into(),
                revision: 3
            }
        );
    }
}
