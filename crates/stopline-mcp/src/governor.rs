//! The seam between the MCP surfaces and whatever enforces stops: the [`Governor`] trait.
//!
//! The HTTP proxy, the stdio proxy and the hook never decide admission themselves. They parse,
//! classify and track; every judgement (token, latch, epoch, class, `allowed_tools`, queueing,
//! budgets, breakers, the prepared operation, when to cut a stream) is asked of a `Governor`.
//! Its shape follows the gateway's (`crates/stopline-gateway/GOVERNOR.md`):
//! [`crate::gateway`] implements it over `stopline_gateway::Governor`, [`crate::local`] over
//! fresh reads of the local control directory, [`crate::remote`] over a gateway's HTTP API.
//!
//! An implementation fails closed: an internal error is a refusal, never an admission.

use futures::future::BoxFuture;
use std::sync::Arc;
use stopline_core::{Refusal, Role};

pub use stopline_gateway::Outcome;

/// The caller a bearer token established.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The acting agent (last link of the chain).
    pub agent: Arc<str>,
    /// The token's role.
    pub role: Role,
    /// The token as presented (a remote governor forwards it to its gateway, never upstream).
    pub token: Arc<str>,
    /// What the governor that authenticated it needs to judge it later.
    pub(crate) proof: Proof,
}

impl Caller {
    /// A caller whose governor keeps no proof besides the token text (it judges that text on
    /// every call, as a remote gateway does).
    pub fn opaque(agent: &str, role: Role, token: &str) -> Caller {
        Caller {
            agent: Arc::from(agent),
            role,
            token: Arc::from(token),
            proof: Proof::Opaque,
        }
    }
}

/// Implementation-specific proof of a caller's identity.
#[derive(Debug, Clone)]
pub(crate) enum Proof {
    /// Authenticated by an in-process gateway.
    Gateway(stopline_gateway::Caller),
    /// Verified with the local store's key.
    Local(Box<stopline_token::Claims>),
    /// Nothing kept: the governor judges the token text on every call (a remote gateway).
    Opaque,
}

/// One governed JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The configured MCP server name (`everything` for `/mcp/everything`).
    pub server: String,
    /// The JSON-RPC method (`response` for a client's answer to a server request, `GET` for
    /// opening the server's stream).
    pub method: String,
    /// For `tools/call`: the tool name.
    pub tool: Option<String>,
    /// For `tools/call`: true only when the server declared `readOnlyHint: true` for the tool.
    /// A call that is not read-only is recorded as a destination operation.
    pub read_only: bool,
    /// The JSON-RPC id, recorded with the operation.
    pub request_id: Option<String>,
}

/// A granted call. Dispatch it right before forwarding, then finish it with the outcome the
/// exchange gives (or cut it when that outcome cannot be known). Dropping it unfinished leaves a
/// dispatched operation in doubt and an undispatched one failed.
pub trait Admission: Send {
    /// Re-check admission against the current state and record `dispatched`. On `Err` the
    /// call must not be forwarded (its outcome is already recorded).
    fn dispatch(&mut self) -> Result<(), Refusal>;
    /// Record how the call ended.
    fn finish(self: Box<Self>, outcome: Outcome);
    /// The call's outcome cannot be known (a cut exchange gave none in time): its operation is
    /// left in doubt.
    fn cut(self: Box<Self>, reason: &str);
    /// False when how the call ended changes nothing this admission records (no operation:
    /// committed, failed and in doubt settle it alike), so its answer need not be read for it.
    fn records_outcome(&self) -> bool {
        true
    }
}

/// What enforces stops for the MCP surfaces.
pub trait Governor: Send + Sync + 'static {
    /// Verify a bearer token (`Bearer <t>` or bare): signature and expiry only; standing is
    /// judged at admission.
    fn authenticate(&self, bearer: Option<&str>) -> Result<Caller, Refusal>;

    /// Admit one message: latches, epochs, class, queueing under HALT_NONCRITICAL; for a
    /// `tools/call` also `allowed_tools`, budgets, breakers, the unresolved-target rule and,
    /// unless read-only, a prepared (fsynced) destination operation.
    fn admit<'a>(
        &'a self,
        caller: &'a Caller,
        call: &'a Call,
    ) -> BoxFuture<'a, Result<Box<dyn Admission>, Refusal>>;

    /// Resolves when streams still open to `caller` must be cut: an emergency covering it, a
    /// contained machine, or a control state that can no longer be trusted.
    fn cut(&self, caller: &Caller) -> BoxFuture<'static, Refusal>;

    /// How long an exchange cut at a stop may still take to give its outcome before its open
    /// operations are left in doubt (`cut_outcome_wait_s`, default 30 s).
    fn cut_outcome_wait(&self) -> std::time::Duration {
        std::time::Duration::from_secs(30)
    }
}
