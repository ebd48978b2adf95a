//! Scopes (`machine`, `agent:<name>`, `project:<root>`, `run:<id>`, `label:<key>=<value>`) and
//! the rules that match them.
//!
//! Parsing never touches the filesystem: a project root is canonicalized by a function the caller
//! passes in (the CLI passes the filesystem's canonicalize), and the stored form of a scope is
//! re-validated purely by syntax. Project matching is by whole path components, so `/srv/a`
//! covers `/srv/a/b` but never `/srv/ab`.

use crate::refusal::{Refusal, RefusalCode};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Component, Path, PathBuf};

/// An agent name or run id: `[a-z0-9][a-z0-9._-]{0,63}` after lowercasing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Name(String);

impl Name {
    /// Lowercase `input` and validate it; refuse with `scope_invalid` otherwise.
    pub fn parse(input: &str) -> Result<Name, Refusal> {
        let lowered = input.to_lowercase();
        let bytes = lowered.as_bytes();
        let valid_first = bytes
            .first()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let valid_rest = bytes[1.min(bytes.len())..].iter().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        });
        if !valid_first || !valid_rest || bytes.len() > 64 {
            return Err(Refusal::new(
                RefusalCode::ScopeInvalid,
                format!("{input:?} is not a valid name ([a-z0-9][a-z0-9._-]{{0,63}})"),
            ));
        }
        Ok(Name(lowered))
    }

    /// The validated name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Name {
    type Error = Refusal;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        let name = Name::parse(&value)?;
        if name.0 != value {
            return Err(Refusal::new(
                RefusalCode::ScopeInvalid,
                "name is not lowercase",
            ));
        }
        Ok(name)
    }
}

impl From<Name> for String {
    fn from(value: Name) -> Self {
        value.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A label signed into a token (`KEY=VALUE`, both names): what a workload is — its type, its
/// agent type, its evaluation task (docs/reference.md §1). A delegated token carries its
/// parent's labels and may add more, never remove or change one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Label {
    /// The key.
    pub key: Name,
    /// The value.
    pub value: Name,
}

impl Label {
    /// Parse `KEY=VALUE` (each lowercased and checked as a name); refuse with `scope_invalid`.
    pub fn parse(input: &str) -> Result<Label, Refusal> {
        let (key, value) = input.split_once('=').ok_or_else(|| {
            Refusal::new(
                RefusalCode::ScopeInvalid,
                format!("label {input:?} is not KEY=VALUE"),
            )
        })?;
        Ok(Label {
            key: Name::parse(key)?,
            value: Name::parse(value)?,
        })
    }

    /// Parse the stored form by syntax only (already lowercase).
    pub fn parse_stored(stored: &str) -> Result<Label, Refusal> {
        let (key, value) = stored.split_once('=').ok_or_else(|| {
            Refusal::new(
                RefusalCode::ScopeInvalid,
                format!("label {stored:?} is not KEY=VALUE"),
            )
        })?;
        Ok(Label {
            key: Name::try_from(key.to_string())?,
            value: Name::try_from(value.to_string())?,
        })
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

impl Serialize for Label {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Label {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Label::parse_stored(&text).map_err(serde::de::Error::custom)
    }
}

/// What a latch (or an epoch revision) applies to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Everything on the machine.
    Machine,
    /// One agent and every sub-agent it delegated to.
    Agent(Name),
    /// A canonical absolute project root and everything beneath it.
    Project(PathBuf),
    /// One evaluation run.
    Run(Name),
    /// Every subject whose token carries the label (a delegate inherits its parent's).
    Label(Label),
    /// One token, by its id (`stopline token revoke`, docs/reference.md §5 "Revoking one
    /// token"): only ever an epoch revision's scope, never a latch's (no command parses it from
    /// input). `delegates`: every token minted under it, at any depth, too.
    Token {
        /// The token's `jti`: 32 lowercase hex digits.
        jti: String,
        /// True for `--with-delegates`.
        delegates: bool,
    },
}

/// Length of a token id (`jti`) in hex digits.
pub const JTI_LEN: usize = 32;

/// True for a well-formed token id: [`JTI_LEN`] lowercase hex digits.
pub fn is_jti(text: &str) -> bool {
    text.len() == JTI_LEN
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The suffix of a `token:` scope that reaches the token's delegates.
const DELEGATES_SUFFIX: &str = "+delegates";

impl Scope {
    /// Parse user input. `canonicalize` resolves a project root (symlinks, existence); the
    /// result must be absolute. A root that does not exist (`NotFound`) is normalized lexically
    /// instead ([`lexical_absolute`], docs/reference.md §5): a project whose directory vanished can still
    /// be stopped and recovered. Nothing is written by this function.
    pub fn parse_input(
        input: &str,
        canonicalize: impl FnOnce(&Path) -> std::io::Result<PathBuf>,
    ) -> Result<Scope, Refusal> {
        let trimmed = input.trim();
        if trimmed.eq_ignore_ascii_case("machine") {
            return Ok(Scope::Machine);
        }
        let Some((kind, rest)) = trimmed.split_once(':') else {
            return Err(invalid(
                input,
                "expected machine, agent:<name>, project:<root>, run:<id> or label:<key>=<value>",
            ));
        };
        match kind.to_ascii_lowercase().as_str() {
            "agent" => Ok(Scope::Agent(Name::parse(rest)?)),
            "run" => Ok(Scope::Run(Name::parse(rest)?)),
            "label" => Ok(Scope::Label(Label::parse(rest)?)),
            "project" => {
                if rest.is_empty() || !rest.starts_with('/') || rest.contains('\0') {
                    return Err(invalid(input, "a project root must be an absolute path"));
                }
                let resolved = match canonicalize(Path::new(rest)) {
                    Ok(resolved) => resolved,
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                        lexical_absolute(Path::new(rest)).ok_or_else(|| {
                            invalid(input, "a project root must be an absolute path")
                        })?
                    }
                    Err(error) => {
                        return Err(Refusal::new(
                            RefusalCode::ProjectRootUnresolvable,
                            format!("project root {rest:?} cannot be resolved: {error}"),
                        ))
                    }
                };
                if !is_canonical_absolute(&resolved) {
                    return Err(Refusal::new(
                        RefusalCode::ProjectRootUnresolvable,
                        format!(
                            "project root {rest:?} did not resolve to a canonical absolute path"
                        ),
                    ));
                }
                Ok(Scope::Project(resolved))
            }
            _ => Err(invalid(input, "unknown scope kind")),
        }
    }

    /// Parse the stored form written by `Display`, by syntax only. Used when reading
    /// latch records and epoch maps; the caller fails closed on error.
    pub fn parse_stored(stored: &str) -> Result<Scope, Refusal> {
        if stored == "machine" {
            return Ok(Scope::Machine);
        }
        let Some((kind, rest)) = stored.split_once(':') else {
            return Err(invalid(stored, "unknown scope kind"));
        };
        let scope = match kind {
            "agent" => Scope::Agent(Name::try_from(rest.to_string())?),
            "run" => Scope::Run(Name::try_from(rest.to_string())?),
            "label" => Scope::Label(Label::parse_stored(rest)?),
            "token" => {
                let (jti, delegates) = match rest.strip_suffix(DELEGATES_SUFFIX) {
                    Some(jti) => (jti, true),
                    None => (rest, false),
                };
                if !is_jti(jti) {
                    return Err(invalid(stored, "a token id is 32 lowercase hex digits"));
                }
                Scope::Token {
                    jti: jti.to_string(),
                    delegates,
                }
            }
            "project" => {
                let path = PathBuf::from(rest);
                if !is_canonical_absolute(&path) || rest.len() > 1 && rest.ends_with('/') {
                    return Err(invalid(stored, "project root is not canonical"));
                }
                Scope::Project(path)
            }
            _ => return Err(invalid(stored, "unknown scope kind")),
        };
        Ok(scope)
    }

    /// The scope kind as written before the colon.
    pub fn kind(&self) -> &'static str {
        match self {
            Scope::Machine => "machine",
            Scope::Agent(_) => "agent",
            Scope::Project(_) => "project",
            Scope::Run(_) => "run",
            Scope::Label(_) => "label",
            Scope::Token { .. } => "token",
        }
    }

    /// True when a latch of scope `self` covers the scope `other`: `self` is machine, equals
    /// `other`, or is a project that is an ancestor of the project `other`.
    pub fn covers_scope(&self, other: &Scope) -> bool {
        match (self, other) {
            (Scope::Machine, _) => true,
            (Scope::Project(root), Scope::Project(path)) => path_within(root, path),
            (a, b) => a == b,
        }
    }
}

/// True when `path` equals `root` or lies beneath it, by whole components.
pub fn path_within(root: &Path, path: &Path) -> bool {
    path.starts_with(root)
}

/// `path` normalized by its text alone: `.` segments and repeated `/` dropped, `..` taking
/// away the segment before it (never above `/`), no trailing `/`. Symlinks are not resolved: this
/// is the form of a project root that no longer exists. `None` for a relative path.
pub fn lexical_absolute(path: &Path) -> Option<PathBuf> {
    if !path.is_absolute() {
        return None;
    }
    let mut normal = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(segment) => normal.push(segment),
            Component::ParentDir => {
                normal.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Some(normal)
}

/// True when `path` is absolute and canonical in form: no `.`/`..` segments, no `//`, no trailing
/// `/` (except the root itself). Symlinks are the canonicalizer's business, not this check's.
pub fn is_canonical_absolute(path: &Path) -> bool {
    let text = path.to_string_lossy();
    path.is_absolute()
        && !text.contains("//")
        && !text
            .split('/')
            .any(|segment| segment == "." || segment == "..")
        && !text.contains('\0')
        && (text == "/" || !text.ends_with('/'))
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

fn invalid(input: &str, why: &str) -> Refusal {
    Refusal::new(RefusalCode::ScopeInvalid, format!("scope {input:?}: {why}"))
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Machine => f.write_str("machine"),
            Scope::Agent(name) => write!(f, "agent:{name}"),
            Scope::Project(root) => write!(f, "project:{}", root.display()),
            Scope::Run(id) => write!(f, "run:{id}"),
            Scope::Label(label) => write!(f, "label:{label}"),
            Scope::Token { jti, delegates } => {
                write!(f, "token:{jti}")?;
                if *delegates {
                    f.write_str(DELEGATES_SUFFIX)?;
                }
                Ok(())
            }
        }
    }
}

impl Serialize for Scope {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Scope::parse_stored(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(p: &Path) -> std::io::Result<PathBuf> {
        Ok(p.to_path_buf())
    }

    #[test]
    fn labels_parse_as_two_names_and_round_trip() {
        let scope = Scope::parse_input("label:Task=CTF-17", canon).unwrap();
        assert_eq!(scope.to_string(), "label:task=ctf-17");
        assert_eq!(Scope::parse_stored("label:task=ctf-17").unwrap(), scope);
        assert!(Scope::parse_stored("label:Task=ctf-17").is_err());
        for bad in [
            "label:task",
            "label:=x",
            "label:task=",
            "label:a=b=c",
            "label:a b=c",
        ] {
            assert!(Scope::parse_input(bad, canon).is_err(), "{bad}");
        }
        let label = Label::parse("task=ctf-17").unwrap();
        assert!(scope.covers_scope(&Scope::Label(label)));
        assert!(!scope.covers_scope(&Scope::Label(Label::parse("task=ctf-18").unwrap())));
    }

    #[test]
    fn names_follow_the_grammar() {
        assert_eq!(Name::parse("Worker-1").unwrap().as_str(), "worker-1");
        for bad in ["", "-x", ".x", "a b", "ä", &"a".repeat(65), "a/b"] {
            assert!(Name::parse(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(Name::parse(&"a".repeat(64)).is_ok());
    }

    #[test]
    fn project_matching_is_by_whole_components() {
        let a = Scope::Project("/srv/a".into());
        assert!(a.covers_scope(&Scope::Project("/srv/a/b".into())));
        assert!(a.covers_scope(&Scope::Project("/srv/a".into())));
        assert!(!a.covers_scope(&Scope::Project("/srv/ab".into())));
        assert!(!a.covers_scope(&Scope::Project("/srv".into())));
    }

    #[test]
    fn stored_form_round_trips_and_rejects_unknown_kinds() {
        for text in [
            "machine",
            "agent:x",
            "run:eval-1",
            "project:/srv/a",
            "project:/",
        ] {
            assert_eq!(Scope::parse_stored(text).unwrap().to_string(), text);
        }
        for bad in [
            "host:x",
            "project:rel",
            "project:/a/",
            "project:/a/../b",
            "agent:X",
            "agent:",
        ] {
            assert!(Scope::parse_stored(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn input_refuses_relative_and_unresolvable_roots() {
        assert_eq!(
            Scope::parse_input("project:rel", canon).unwrap_err().code,
            RefusalCode::ScopeInvalid
        );
        let err = Scope::parse_input("project:/nope", |_| Err(std::io::Error::other("missing")));
        assert_eq!(err.unwrap_err().code, RefusalCode::ProjectRootUnresolvable);
        assert_eq!(
            Scope::parse_input("MACHINE", canon).unwrap(),
            Scope::Machine
        );
        assert_eq!(
            Scope::parse_input("Agent:Bob", canon).unwrap(),
            Scope::Agent(Name::parse("bob").unwrap())
        );
    }
}
