//! The gateway's own admission path behind the MCP [`Governor`] seam.
//!
//! This file only translates: a `tools/call` goes to `admit_tool_call` (which checks the server,
//! `allowed_tools`, class, breakers, the view, queueing, the `tool_calls` budget along the token
//! chain and prepares the operation), every other message to `admit_request`, stream cuts to
//! `subscribe_cuts`. It must never judge anything itself.

use crate::governor::{Admission, Call, Caller, Governor, Outcome, Proof};
use futures::future::BoxFuture;
use stopline_core::{Refusal, RefusalCode};
use stopline_gateway as gw;

impl Admission for gw::Admission {
    fn dispatch(&mut self) -> Result<(), Refusal> {
        gw::Admission::dispatch(self)
    }

    fn finish(self: Box<Self>, outcome: Outcome) {
        gw::Admission::finish(*self, outcome)
    }

    fn cut(self: Box<Self>, reason: &str) {
        gw::Admission::cut(*self, reason)
    }

    fn records_outcome(&self) -> bool {
        gw::Admission::records_outcome(self)
    }
}

fn gateway_caller(caller: &Caller) -> Result<&gw::Caller, Refusal> {
    match &caller.proof {
        Proof::Gateway(inner) => Ok(inner),
        _ => Err(Refusal::new(
            RefusalCode::TokenInvalid,
            "the caller was not authenticated by this gateway",
        )),
    }
}

impl Governor for gw::Governor {
    fn authenticate(&self, bearer: Option<&str>) -> Result<Caller, Refusal> {
        let inner = gw::Governor::authenticate(self, bearer)?;
        Ok(Caller {
            agent: inner.shared_agent().clone(),
            role: inner.role(),
            token: inner.shared_token().clone(),
            proof: Proof::Gateway(inner),
        })
    }

    fn admit<'a>(
        &'a self,
        caller: &'a Caller,
        call: &'a Call,
    ) -> BoxFuture<'a, Result<Box<dyn Admission>, Refusal>> {
        Box::pin(async move {
            let inner = gateway_caller(caller)?;
            let admission = match (&call.tool, call.method.as_str()) {
                (Some(tool), "tools/call") => {
                    self.admit_tool_call(
                        inner,
                        &call.server,
                        tool,
                        call.read_only,
                        call.request_id.as_deref(),
                    )
                    .await?
                }
                _ => {
                    self.admit_request(inner, &call.server, &call.method)
                        .await?
                }
            };
            Ok(Box::new(admission) as Box<dyn Admission>)
        })
    }

    fn cut_outcome_wait(&self) -> std::time::Duration {
        self.config().cut_outcome_wait()
    }

    fn cut(&self, caller: &Caller) -> BoxFuture<'static, Refusal> {
        let watch = gateway_caller(caller).map(|inner| self.subscribe_cuts(inner));
        Box::pin(async move {
            match watch {
                Ok(mut watch) => watch.cut().await,
                Err(refusal) => refusal,
            }
        })
    }
}
