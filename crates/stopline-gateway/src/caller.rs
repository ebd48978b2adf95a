//! Who is calling: a bearer token verified against the control plane's key.
//!
//! Authentication checks only the signature and expiry (a failure is a 401). Whether the
//! token's authority still stands is judged at admission from the view (a stale token is a
//! 403), except for engage, which any validly signed token may do. Verified tokens are cached by
//! their exact text, so the ed25519 check runs once per token, not once per call; expiry is
//! re-checked on every use.

use foldhash::{HashMap, HashMapExt};
use std::sync::{Arc, Mutex};
use stopline_core::{Name, Refusal, RefusalCode, Role, Subject};
use stopline_token::{Claims, VerifyingKey};

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller {
    claims: Arc<Claims>,
    /// Shared: a caller is cloned into every admission and exchange of a call.
    subject: Arc<Subject>,
    token: Arc<str>,
    /// The acting agent's name, shared (made once per token).
    agent: Arc<str>,
}

impl Caller {
    /// The verified claims.
    pub fn claims(&self) -> &Claims {
        &self.claims
    }

    /// The subject the token proves (chain, project, run).
    pub fn subject(&self) -> &Subject {
        &self.subject
    }

    /// The acting agent (last link of the chain).
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The acting agent, shared (a copy costs no allocation).
    pub fn shared_agent(&self) -> &Arc<str> {
        &self.agent
    }

    /// The token's role.
    pub fn role(&self) -> Role {
        self.claims.role
    }

    /// The token text (to forward to nothing but this gateway's own verbs).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The token text, shared (a key of what was decided for it; a copy costs no allocation).
    pub fn shared_token(&self) -> &Arc<str> {
        &self.token
    }
}

/// Verifies bearer tokens, with a bounded cache of verified texts.
#[derive(Debug)]
pub struct Authenticator {
    key: VerifyingKey,
    /// Verified token texts, with their claims and the subject they prove (made once). Hashed
    /// with foldhash (keyed per process and per map, a fraction of SipHash's cost over a whole
    /// token); only a token whose signature verified enters it, so an agent cannot
    /// fill it with texts chosen to collide.
    cache: Mutex<HashMap<Arc<str>, Verified>>,
}

#[derive(Debug, Clone)]
struct Verified {
    claims: Arc<Claims>,
    subject: Arc<Subject>,
    agent: Arc<str>,
}

/// Entries kept before the cache is cleared (a flood of distinct tokens costs verifications,
/// never memory).
const CACHE_LIMIT: usize = 4096;

/// Strip an optional `Bearer ` prefix (case-insensitive) and surrounding whitespace.
pub fn bearer_token(header: &str) -> &str {
    let trimmed = header.trim();
    match trimmed.get(..7) {
        Some(prefix) if prefix.eq_ignore_ascii_case("bearer ") => trimmed[7..].trim(),
        _ => trimmed,
    }
}

impl Authenticator {
    /// An authenticator for tokens signed by the holder of `key`.
    pub fn new(key: VerifyingKey) -> Authenticator {
        Authenticator {
            key,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Authenticate the `Authorization` header value (or a bare token) at `now_s`.
    pub fn authenticate(&self, bearer: Option<&str>, now_s: i64) -> Result<Caller, Refusal> {
        let token = bearer
            .map(bearer_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                Refusal::new(
                    RefusalCode::TokenInvalid,
                    "an Authorization: Bearer <token> header is required",
                )
            })?;
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_key_value(token)
            .map(|(k, v)| (k.clone(), v.clone()));
        let (text, verified) = match cached {
            Some((text, verified)) => {
                if verified.claims.is_expired(now_s) {
                    let exp = verified.claims.exp;
                    return Err(stopline_token::TokenError::Expired { exp }.into());
                }
                (text, verified)
            }
            None => {
                let claims = Arc::new(stopline_token::verify(&self.key, token, now_s)?);
                let verified = Verified {
                    subject: Arc::new(claims.subject()),
                    agent: Arc::from(claims.agent().map(Name::as_str).unwrap_or("")),
                    claims,
                };
                let text: Arc<str> = Arc::from(token);
                let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
                if cache.len() >= CACHE_LIMIT {
                    cache.clear();
                }
                cache.insert(text.clone(), verified.clone());
                (text, verified)
            }
        };
        Ok(Caller {
            subject: verified.subject,
            claims: verified.claims,
            agent: verified.agent,
            token: text,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_prefix_is_optional() {
        assert_eq!(bearer_token("Bearer abc"), "abc");
        assert_eq!(bearer_token("bearer  abc "), "abc");
        assert_eq!(bearer_token("abc"), "abc");
    }
}
