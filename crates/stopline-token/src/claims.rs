//! The claims a token carries, and the structural rules every token must satisfy.
//!
//! One rule set ([`Claims::check`]) is applied both when minting and when decoding, so the
//! control plane can never mint a token its own verifier refuses, and a token that passes the
//! verifier always has a non-empty chain, a canonical project root and sane budgets. The claims
//! say who the subject is; they never say whether its authority still stands — that is the
//! epoch map's judgment ([`Claims::standing`]), made by the caller against fresh control state.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use stopline_core::budget::Budgets;
use stopline_core::view::Authority;
use stopline_core::{
    AuthorityStatus, IndexedEpochMap, Label, Name, Refusal, RefusalCode, Role, Scope, Subject,
};

/// The only claims version this crate mints and accepts.
pub const CLAIMS_VERSION: u32 = 1;
/// The longest delegation chain (root included) a token may carry. Deep chains are refused
/// rather than allowed to grow a token towards the size limit.
pub const MAX_CHAIN_LEN: usize = 32;
/// The longest project root, in bytes, a token may carry (Linux `PATH_MAX`).
pub const MAX_PROJECT_LEN: usize = 4096;
/// The most labels a token may carry (each at most 129 bytes, so a token stays far below the
/// wire limit).
pub const MAX_LABELS: usize = 16;
/// Length of a `jti` in hex digits (16 random bytes).
pub const JTI_HEX_LEN: usize = 32;

/// What a signed token asserts. Fields are public for callers to read; a value built by hand is
/// only usable once [`crate::issue`] has accepted it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    /// The claims version; always [`CLAIMS_VERSION`].
    pub v: u32,
    /// This token's id: 16 random bytes as 32 lowercase hex digits.
    pub jti: String,
    /// The delegation chain, root first, the acting agent last. Never empty, no repeats.
    pub chain: Vec<Name>,
    /// The canonical absolute project root the subject works in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<PathBuf>,
    /// The run the subject belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<Name>,
    /// The role the token grants. Delegated tokens are always [`Role::Agent`].
    pub role: Role,
    /// The issue epoch: the global `seq` the token was minted under.
    pub epoch: u64,
    /// Issued at, unix seconds.
    pub iat: i64,
    /// Expires at, unix seconds; the token is refused from this second on. Always after `iat`.
    pub exp: i64,
    /// Budget limits; absent kinds are unlimited.
    #[serde(default, skip_serializing_if = "Budgets::is_empty")]
    pub budgets: Budgets,
    /// The parent token's `jti`; present exactly when the chain has more than one link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Labels, key → value (docs/reference.md §1, Label): a delegated token carries every one
    /// of its parent's, unchanged, and may add more. Absent from tokens without any.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<Name, Name>,
    /// The ancestors' `jti`s, root first, the parent's last (docs/reference.md §5, "Revoking one
    /// token"): what lets `token revoke --with-delegates` refuse a grandchild by its signed
    /// claims alone. Absent from root tokens, and from delegates minted before it existed (their
    /// lineage is their parent alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lineage: Vec<String>,
}

impl Claims {
    /// The subject these claims prove. Only meaningful for claims returned by [`crate::verify`]:
    /// the subject is marked provable.
    pub fn subject(&self) -> Subject {
        Subject::proven(
            self.chain.clone(),
            self.project.iter().cloned().collect(),
            self.run.iter().cloned().collect(),
        )
        .with_labels(self.label_list())
        .with_tokens(self.token_lineage())
    }

    /// The ids of this token's lineage, ancestors root first, its own last: `lineage` (or, for
    /// a delegate minted before lineages were signed, its parent) and then `jti`.
    pub fn token_lineage(&self) -> Vec<String> {
        let mut ids = if self.lineage.is_empty() {
            self.parent.iter().cloned().collect()
        } else {
            self.lineage.clone()
        };
        ids.push(self.jti.clone());
        ids
    }

    /// The labels as [`Label`]s, in key order.
    pub fn label_list(&self) -> Vec<Label> {
        self.labels
            .iter()
            .map(|(key, value)| Label {
                key: key.clone(),
                value: value.clone(),
            })
            .collect()
    }

    /// The acting agent: the last link of the chain. `None` only for hand-built claims with an
    /// empty chain, which [`crate::issue`] refuses and a decoded token never has.
    pub fn agent(&self) -> Option<&Name> {
        self.chain.last()
    }

    /// True from the second `exp` on.
    pub fn is_expired(&self, now_unix_s: i64) -> bool {
        now_unix_s >= self.exp
    }

    /// The authority these claims present to an admission decision.
    pub fn authority(&self) -> Authority {
        Authority {
            issue_epoch: self.epoch,
        }
    }

    /// Judge the issue epoch against `epochs` for this token's subject (docs/reference.md §5, Epochs): stale
    /// when any scope covering any link of the chain, the project or the run advanced past it.
    ///
    /// `epochs` must be freshly read (indexed once per read: the judgement is a lookup). On [`AuthorityStatus::Future`], re-read the epoch once
    /// before refusing: the token may have been minted a moment after the caller's read.
    pub fn standing(&self, epochs: &IndexedEpochMap) -> AuthorityStatus {
        epochs.authority_status(self.epoch, &self.subject())
    }

    /// The structural rules every minted or decoded token satisfies. Returns which rule failed.
    pub fn check(&self) -> Result<(), String> {
        if self.v != CLAIMS_VERSION {
            return Err(format!("unsupported claims version {}", self.v));
        }
        if !is_jti(&self.jti) {
            return Err(format!("jti must be {JTI_HEX_LEN} lowercase hex digits"));
        }
        self.check_chain()?;
        if let Some(project) = &self.project {
            check_project(project)?;
        }
        if self.labels.len() > MAX_LABELS {
            return Err(format!("a token carries at most {MAX_LABELS} labels"));
        }
        if self.exp <= self.iat {
            return Err("exp must be after iat".into());
        }
        if let Some((kind, _)) = self
            .budgets
            .iter()
            .find(|(_, limit)| !limit.is_finite() || **limit < 0.0)
        {
            return Err(format!("budget {kind} must be a finite number ≥ 0"));
        }
        Ok(())
    }

    fn check_chain(&self) -> Result<(), String> {
        if self.chain.is_empty() {
            return Err("the delegation chain is empty".into());
        }
        if self.chain.len() > MAX_CHAIN_LEN {
            return Err(format!(
                "the delegation chain is longer than {MAX_CHAIN_LEN} links"
            ));
        }
        for (index, name) in self.chain.iter().enumerate() {
            if self.chain[..index].contains(name) {
                return Err(format!("{name} appears twice in the delegation chain"));
            }
        }
        match (&self.parent, self.chain.len()) {
            (None, 1) if !self.lineage.is_empty() => {
                Err("a root token cannot name a lineage".into())
            }
            (None, 1) => Ok(()),
            (Some(_), 1) => Err("a root token cannot name a parent".into()),
            (None, _) => Err("a delegated token must name its parent".into()),
            (Some(parent), _) if !is_jti(parent) => {
                Err(format!("parent must be {JTI_HEX_LEN} lowercase hex digits"))
            }
            (Some(_), _) if self.role != Role::Agent => {
                Err("a delegated token must have role agent".into())
            }
            (Some(parent), links) if !self.lineage.is_empty() => {
                if self.lineage.len() != links - 1
                    || self.lineage.last() != Some(parent)
                    || !self.lineage.iter().all(|id| is_jti(id))
                {
                    Err(
                        "the lineage must name every ancestor's jti, root first, the parent last"
                            .into(),
                    )
                } else {
                    Ok(())
                }
            }
            (Some(_), _) => Ok(()),
        }
    }
}

/// `inherited` with `added` put in: every inherited label stays as it is (a delegate that
/// names an inherited key with another value, or the same key twice with two values, is refused
/// `bad_request`: a label may be added, never removed or changed).
pub(crate) fn merge_labels(
    inherited: &BTreeMap<Name, Name>,
    added: &[Label],
) -> Result<BTreeMap<Name, Name>, Refusal> {
    let mut labels = inherited.clone();
    for label in added {
        match labels.get(&label.key) {
            Some(value) if *value != label.value => {
                return Err(Refusal::new(
                    RefusalCode::BadRequest,
                    format!(
                        "label {} is already {}={value}: a label may be added, never changed or removed",
                        label.key, label.key
                    ),
                ))
            }
            _ => {
                labels.insert(label.key.clone(), label.value.clone());
            }
        }
    }
    if labels.len() > MAX_LABELS {
        return Err(Refusal::new(
            RefusalCode::BadRequest,
            format!("a token carries at most {} labels", MAX_LABELS),
        ));
    }
    Ok(labels)
}

/// A fresh `jti` from the operating system's random source.
pub(crate) fn new_jti() -> Result<String, rand::Error> {
    use rand::RngCore;
    let mut bytes = [0u8; JTI_HEX_LEN / 2];
    rand::rngs::OsRng.try_fill_bytes(&mut bytes)?;
    Ok(hex::encode(bytes))
}

fn is_jti(text: &str) -> bool {
    stopline_core::scope::is_jti(text)
}

/// A project root must be what `Scope::parse_stored` accepts for `project:` (absolute, no
/// doubled or trailing `/`) and have no `.` or `..` segment. It is never resolved here: this
/// crate does no filesystem access, so the minting caller canonicalizes.
fn check_project(project: &Path) -> Result<(), String> {
    let text = project
        .to_str()
        .ok_or("the project root is not valid UTF-8")?;
    if text.len() > MAX_PROJECT_LEN || text.contains('\0') {
        return Err("the project root is too long or contains NUL".into());
    }
    // `Path::components` silently drops `.` segments, so the scope rule alone lets them through.
    if text
        .split('/')
        .any(|segment| segment == "." || segment == "..")
    {
        return Err(format!("the project root {text:?} has a . or .. segment"));
    }
    match Scope::parse_stored(&format!("project:{text}")) {
        Ok(Scope::Project(_)) => Ok(()),
        _ => Err(format!(
            "the project root {text:?} is not canonical and absolute"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stopline_core::budget::BudgetKind;

    fn name(text: &str) -> Name {
        Name::parse(text).unwrap()
    }

    fn root() -> Claims {
        Claims {
            v: CLAIMS_VERSION,
            jti: "0".repeat(32),
            chain: vec![name("root")],
            project: Some("/srv/a".into()),
            run: None,
            role: Role::Operator,
            epoch: 0,
            iat: 10,
            exp: 20,
            budgets: Budgets::new(),
            parent: None,
            labels: BTreeMap::new(),
            lineage: Vec::new(),
        }
    }

    fn check(edit: impl FnOnce(&mut Claims), expected: Option<&str>) {
        let mut claims = root();
        edit(&mut claims);
        match (claims.check(), expected) {
            (Ok(()), None) => {}
            (Err(why), Some(part)) => assert!(why.contains(part), "{why:?} lacks {part:?}"),
            (got, want) => panic!("got {got:?}, wanted an error containing {want:?}"),
        }
    }

    #[test]
    fn structural_rules() {
        check(|_| {}, None);
        check(|c| c.v = 2, Some("version"));
        check(|c| c.jti = "0".repeat(31), Some("jti"));
        check(|c| c.jti = "A".repeat(32), Some("jti"));
        check(|c| c.chain.clear(), Some("empty"));
        check(|c| c.chain.push(name("root")), Some("twice"));
        check(
            |c| c.chain.push(name("child")),
            Some("must name its parent"),
        );
        check(|c| c.parent = Some("1".repeat(32)), Some("root token"));
        let delegated = |c: &mut Claims| {
            c.chain.push(name("child"));
            c.parent = Some("1".repeat(32));
        };
        check(delegated, Some("role agent"));
        check(
            |c| c.lineage = vec!["1".repeat(32)],
            Some("root token cannot name a lineage"),
        );
        let lineage = |ids: Vec<String>| {
            move |c: &mut Claims| {
                delegated(c);
                c.role = Role::Agent;
                c.lineage = ids;
            }
        };
        check(lineage(vec!["1".repeat(32)]), None);
        check(lineage(vec!["2".repeat(32)]), Some("lineage"));
        check(
            lineage(vec!["0".repeat(32), "1".repeat(32)]),
            Some("lineage"),
        );
        check(
            |c| {
                delegated(c);
                c.role = Role::Agent;
            },
            None,
        );
        check(
            |c| {
                c.chain = (0..=MAX_CHAIN_LEN)
                    .map(|i| name(&format!("a{i}")))
                    .collect()
            },
            Some("longer than"),
        );
        for bad in [
            "rel",
            "/srv/a/",
            "/srv//a",
            "/srv/../a",
            "/srv/./a",
            "/srv/a/.",
            "/a\0b",
        ] {
            check(|c| c.project = Some(bad.into()), Some("project root"));
        }
        check(|c| c.project = Some("/".into()), None);
        check(|c| c.exp = c.iat, Some("exp"));
        check(
            |c| {
                c.budgets.insert(BudgetKind::Steps, -1.0);
            },
            Some("steps"),
        );
        check(
            |c| {
                c.budgets.insert(BudgetKind::Tokens, f64::NAN);
            },
            Some("tokens"),
        );
    }

    #[test]
    fn subject_and_expiry() {
        let claims = root();
        let subject = claims.subject();
        assert!(subject.provable);
        assert_eq!(subject.chain, vec![name("root")]);
        assert_eq!(subject.projects, vec![PathBuf::from("/srv/a")]);
        assert_eq!(claims.agent(), Some(&name("root")));
        assert!(!claims.is_expired(19));
        assert!(claims.is_expired(20));
        assert!(new_jti().is_ok_and(|jti| is_jti(&jti)));
    }
}
