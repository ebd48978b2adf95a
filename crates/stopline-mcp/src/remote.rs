//! A [`Governor`] that asks a gateway (`STOPLINE_URL`) through its public API, for surfaces
//! running inside a confined agent that cannot read the control directory.
//!
//! Every admission is a `POST /v1/check` with the agent's own token: the gateway verifies it,
//! judges latches, epochs and unresolved targets, and answers with a receipt (a bad token is a
//! `block`). A `queue` is re-asked until it turns or the queue timeout passes. Stream cuts poll
//! the same route. An unreachable gateway is a refusal (`gateway_unreachable`), never an allow.
//! What this cannot do, because the API offers no route for it: count budgets, feed breakers or
//! journal operations — the gateway owns those for the calls that pass through it.

use crate::governor::{Admission, Call, Caller, Governor, Outcome, Proof};
use futures::future::BoxFuture;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use stopline_core::{CheckReceipt, Decision, Mode, Refusal, RefusalCode, Role};

/// How often held calls and the cut watcher ask again.
const POLL: Duration = Duration::from_millis(250);
/// How long a call is held under HALT_NONCRITICAL before `queued_timeout`.
const QUEUE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the gateway may stay unreachable before open streams are cut.
const UNREACHABLE_CUT: Duration = Duration::from_secs(2);

/// Governs through a gateway's HTTP API.
#[derive(Clone, Debug)]
pub struct RemoteGovernor {
    base: String,
    client: reqwest::Client,
}

/// A receipt of `POST /v1/check`.
#[derive(Debug, Clone, PartialEq)]
pub struct Receipt {
    /// allow, queue or block.
    pub decision: Decision,
    /// The subject's mode.
    pub mode: Mode,
    /// Why it was not allowed.
    pub refusal: Option<Refusal>,
}

impl RemoteGovernor {
    /// A governor asking the gateway at `base` (e.g. `http://127.0.0.1:7077`).
    pub fn new(base: &str) -> RemoteGovernor {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap_or_default();
        RemoteGovernor {
            base: base.trim_end_matches('/').to_string(),
            client,
        }
    }

    /// One `POST /v1/check`. Any failure to get a receipt is a `block`.
    pub async fn check(
        &self,
        token: &str,
        critical: bool,
        action: &str,
        target: Option<&str>,
    ) -> Receipt {
        let targets: Vec<String> = target.map(String::from).into_iter().collect();
        self.check_targets(token, critical, action, &targets).await
    }

    /// One `POST /v1/check` naming several targets: the first is the operation's, every
    /// `file:<path>` one is a place the call works in (a project stop covering it blocks).
    pub async fn check_targets(
        &self,
        token: &str,
        critical: bool,
        action: &str,
        targets: &[String],
    ) -> Receipt {
        let target = match targets {
            [] => Value::Null,
            [one] => json!(one),
            many => json!(many),
        };
        let body = json!({"class": if critical { "critical" } else { "noncritical" }, "action": action, "target": target});
        let mut request = self
            .client
            .post(format!("{}/v1/check", self.base))
            .json(&body);
        if !token.is_empty() {
            request = request.bearer_auth(token);
        }
        let blocked = |code, message: String| Receipt {
            decision: Decision::Block,
            mode: Mode::Emergency,
            refusal: Some(Refusal::new(code, message)),
        };
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => {
                return blocked(
                    RefusalCode::GatewayUnreachable,
                    format!("the gateway at {} is unreachable: {error}", self.base),
                )
            }
        };
        let body = match response.text().await {
            Ok(body) => body,
            Err(error) => {
                return blocked(
                    RefusalCode::GatewayUnreachable,
                    format!("the gateway's answer is not a receipt: {error}"),
                )
            }
        };
        let (decision, mode, refusal) = match answered(&body) {
            Ok(receipt) => (
                receipt.decision,
                receipt.mode,
                answered_refusal(&receipt, &body),
            ),
            Err(refusal) => (Decision::Block, Mode::Emergency, Some(refusal)),
        };
        Receipt {
            decision,
            mode,
            refusal,
        }
    }
}

/// The gateway's answer to `POST /v1/check` as a check receipt. An answer that is not JSON is an
/// unreachable gateway; one that does not read as a check receipt (a field missing or renamed)
/// is a refusal without a code, never an allow.
fn answered(body: &str) -> Result<CheckReceipt, Refusal> {
    serde_json::from_str::<CheckReceipt>(body).map_err(|error| {
        if serde_json::from_str::<serde::de::IgnoredAny>(body).is_err() {
            Refusal::new(
                RefusalCode::GatewayUnreachable,
                format!("the gateway's answer is not a receipt: {error}"),
            )
        } else {
            Refusal::new(
                RefusalCode::BreakGlassContained,
                format!("the gateway refused without a check receipt ({error}): {body}"),
            )
        }
    })
}

/// Why `receipt` does not allow (`None` when it does): its typed refusal, latch included
/// (docs/reference.md §4).
fn answered_refusal(receipt: &CheckReceipt, body: &str) -> Option<Refusal> {
    match receipt.decision {
        Decision::Allow => None,
        _ => Some(receipt.refusal().unwrap_or_else(|| {
            Refusal::new(
                RefusalCode::BreakGlassContained,
                format!("the gateway refused without a code: {body}"),
            )
        })),
    }
}

/// A call admitted by the gateway's check: nothing to record on this side.
struct RemoteAdmission;

impl Admission for RemoteAdmission {
    fn dispatch(&mut self) -> Result<(), Refusal> {
        Ok(())
    }
    fn finish(self: Box<Self>, _outcome: Outcome) {}
    fn cut(self: Box<Self>, _reason: &str) {}
}

impl Governor for RemoteGovernor {
    fn authenticate(&self, bearer: Option<&str>) -> Result<Caller, Refusal> {
        let token = stopline_gateway::bearer_token(bearer.unwrap_or_default());
        if token.is_empty() {
            return Err(Refusal::new(
                RefusalCode::TokenInvalid,
                "no token was presented",
            ));
        }
        // Decoded for labels only: the gateway verifies the signature on every check.
        let claims = stopline_token::decode_unverified(token)
            .map_err(|e| Refusal::new(RefusalCode::TokenInvalid, e.to_string()))?;
        Ok(Caller {
            agent: std::sync::Arc::from(claims.agent().map(|a| a.as_str()).unwrap_or_default()),
            role: claims.role,
            token: std::sync::Arc::from(token),
            proof: Proof::Opaque,
        })
    }

    fn admit<'a>(
        &'a self,
        caller: &'a Caller,
        call: &'a Call,
    ) -> BoxFuture<'a, Result<Box<dyn Admission>, Refusal>> {
        Box::pin(async move {
            let target = call
                .tool
                .as_ref()
                .filter(|_| call.method == "tools/call")
                .map(|t| format!("mcp:{}:{t}", call.server));
            let deadline = Instant::now() + QUEUE_TIMEOUT;
            loop {
                let receipt = self
                    .check(
                        &caller.token,
                        caller.role == Role::Critical,
                        "tool_call",
                        target.as_deref(),
                    )
                    .await;
                match (receipt.decision, receipt.refusal) {
                    (Decision::Allow, _) => {
                        return Ok(Box::new(RemoteAdmission) as Box<dyn Admission>)
                    }
                    (Decision::Queue, _) if Instant::now() < deadline => {
                        tokio::time::sleep(POLL).await
                    }
                    (Decision::Queue, _) => {
                        return Err(Refusal::new(
                            RefusalCode::QueuedTimeout,
                            "held past the queue timeout",
                        ))
                    }
                    (Decision::Block, refusal) => {
                        return Err(refusal.unwrap_or_else(|| {
                            Refusal::new(RefusalCode::BreakGlassContained, "blocked")
                        }))
                    }
                }
            }
        })
    }

    fn cut(&self, caller: &Caller) -> BoxFuture<'static, Refusal> {
        let (governor, token, critical) = (
            self.clone(),
            caller.token.clone(),
            caller.role == Role::Critical,
        );
        Box::pin(async move {
            let mut unreachable_since: Option<Instant> = None;
            loop {
                let receipt = governor.check(&token, critical, "tool_call", None).await;
                let code = receipt.refusal.as_ref().map(|r| r.code);
                match code {
                    Some(RefusalCode::GatewayUnreachable) => {
                        let since = *unreachable_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= UNREACHABLE_CUT {
                            return receipt.refusal.expect("a code means a refusal");
                        }
                    }
                    Some(RefusalCode::HaltedNoncritical | RefusalCode::BreakGlassContained)
                        if receipt.mode != Mode::Emergency =>
                    {
                        unreachable_since = None
                    }
                    Some(_) => return receipt.refusal.expect("a code means a refusal"),
                    None => unreachable_since = None,
                }
                tokio::time::sleep(POLL).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stopline_core::latch::LatchRef;

    /// A refusal as the gateway's check route writes it (`action` added by the route).
    fn refused_answer() -> (Refusal, String) {
        let latch = LatchRef {
            by: "owner".into(),
            engaged_at: Some("2026-12-07T14:03:44.853Z".into()),
            id: "latch_aa93d383e7ad8202".into(),
            level: "halt-all".into(),
            reason: "golden".into(),
            scope: "agent:alice".into(),
        };
        let refusal =
            Refusal::new(RefusalCode::BreakGlassContained, "stopped").with_latch(Some(latch));
        let receipt = CheckReceipt::refused(
            Mode::HaltAll,
            refusal.clone(),
            vec!["latch_aa93d383e7ad8202".into()],
        );
        let mut value = serde_json::to_value(&receipt).unwrap();
        value["action"] = "tools/call".into();
        (refusal, value.to_string())
    }

    #[test]
    fn a_refusal_reads_with_its_code_and_latch() {
        let (refusal, body) = refused_answer();
        let receipt = answered(&body).unwrap();
        assert_eq!(receipt.decision, Decision::Block);
        assert_eq!(answered_refusal(&receipt, &body), Some(refusal));
    }

    #[test]
    fn an_allow_reads_as_one() {
        let receipt = CheckReceipt {
            decision: Decision::Allow,
            mode: Mode::Disengaged,
            code: None,
            latches: Vec::new(),
            message: String::new(),
            latch: None,
        };
        let body = serde_json::to_string(&receipt).unwrap();
        let read = answered(&body).unwrap();
        assert_eq!(read.decision, Decision::Allow);
        assert_eq!(answered_refusal(&read, &body), None);
    }

    #[test]
    fn an_answer_with_a_field_renamed_is_a_refusal_never_an_allow() {
        let body =
            r#"{"decision":"allow","code":null,"latches":[],"message":"","state":"RUNNING"}"#;
        let refusal = answered(body).unwrap_err();
        assert_eq!(refusal.code, RefusalCode::BreakGlassContained);
        assert!(refusal.message.contains("mode"), "{}", refusal.message);
    }

    #[test]
    fn an_answer_that_is_not_json_is_an_unreachable_gateway() {
        let refusal = answered("<html>bad gateway</html>").unwrap_err();
        assert_eq!(refusal.code, RefusalCode::GatewayUnreachable);
    }
}
