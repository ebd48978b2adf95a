//! Subjects: who acts, as a token proves it.
//!
//! A subject is an agent with its delegation chain (root first, itself last), its project roots
//! and its runs. Identity comes only from a verified token; a subject built from a bare claim is
//! *unprovable*, and every agent latch covers it (docs/reference.md §1).

use crate::scope::{Label, Name, Scope};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The role a token grants. The class a call is admitted as derives from it, never from a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// An agent doing domain work.
    Agent,
    /// A safety monitor: may engage and disengage halts.
    Monitor,
    /// An operator: may engage and disengage halts.
    Operator,
    /// Critical infrastructure (safety, logging, heartbeat, audit): admitted as critical.
    Critical,
}

impl Role {
    /// Parse a role name.
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "agent" => Some(Role::Agent),
            "monitor" => Some(Role::Monitor),
            "operator" => Some(Role::Operator),
            "critical" => Some(Role::Critical),
            _ => None,
        }
    }
}

/// Who acts: a chain of agents (possibly unprovable), projects and runs.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Subject {
    /// The delegation chain, root first, the acting agent last. Empty when unknown.
    pub chain: Vec<Name>,
    /// False when the identity rests on a claim, not a verified token.
    pub provable: bool,
    /// Canonical project roots the subject works in.
    pub projects: Vec<PathBuf>,
    /// Runs the subject belongs to.
    pub runs: Vec<Name>,
    /// The labels its token carries (a delegate's include every ancestor's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<Label>,
    /// The ids (`jti`) of its token's lineage: the ancestors' root first (as far as the token
    /// names them), its own last. Empty for a subject without a token. Never written: a subject
    /// read back from a record has none, so judge a token's standing by its own claims.
    #[serde(skip)]
    pub tokens: Vec<String>,
}

impl Subject {
    /// A subject proven by a verified token.
    pub fn proven(chain: Vec<Name>, projects: Vec<PathBuf>, runs: Vec<Name>) -> Subject {
        Subject {
            chain,
            provable: true,
            projects,
            runs,
            labels: Vec::new(),
            tokens: Vec::new(),
        }
    }

    /// A subject whose identity cannot be proven: every agent latch covers it.
    pub fn unprovable(claimed: Option<Name>, projects: Vec<PathBuf>, runs: Vec<Name>) -> Subject {
        Subject {
            chain: claimed.into_iter().collect(),
            provable: false,
            projects,
            runs,
            labels: Vec::new(),
            tokens: Vec::new(),
        }
    }

    /// This subject proven by the token whose lineage is `tokens` (ancestors root first, its own
    /// id last).
    pub fn with_tokens(mut self, tokens: Vec<String>) -> Subject {
        self.tokens = tokens;
        self
    }

    /// True when a revocation of the token `jti` covers this subject: `jti` is its own token's
    /// id, or (`delegates`) any id of its lineage.
    pub fn is_revoked_by(&self, jti: &str, delegates: bool) -> bool {
        match self.tokens.split_last() {
            Some((own, _)) if own == jti => true,
            Some((_, ancestors)) => delegates && ancestors.iter().any(|id| id == jti),
            None => false,
        }
    }

    /// This subject carrying `labels`.
    pub fn with_labels(mut self, labels: Vec<Label>) -> Subject {
        self.labels = labels;
        self
    }

    /// The acting agent, if known.
    pub fn agent(&self) -> Option<&Name> {
        self.chain.last()
    }

    /// True when a latch of `scope` covers this subject (docs/reference.md §1, Latch).
    pub fn is_covered_by(&self, scope: &Scope) -> bool {
        match scope {
            Scope::Machine => true,
            Scope::Agent(name) => !self.provable || self.chain.contains(name),
            Scope::Project(root) => self
                .projects
                .iter()
                .any(|p| crate::scope::path_within(root, p)),
            Scope::Run(id) => self.runs.contains(id),
            // As for an agent: a caller who cannot prove its labels may carry this one.
            Scope::Label(label) => !self.provable || self.labels.contains(label),
            Scope::Token { jti, delegates } => self.is_revoked_by(jti, *delegates),
        }
    }
}
