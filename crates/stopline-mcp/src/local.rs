//! A [`Governor`] over the local control directory, for MCP traffic that passes no gateway
//! (`stopline mcp proxy` without `STOPLINE_URL`).
//!
//! Every decision reads a fresh [`ControlView`] (there is no acknowledgement protocol here, so
//! nothing may be judged against an older read), at admission and again at dispatch. Tokens are
//! verified with the store's key. `allowed_tools` and `critical_tools` come from the
//! `[mcp.<name>]` table when one exists. The `tool_calls` and `wall_clock_s` budgets signed into
//! a token are counted in this process; exhausting one, or crossing `unauthorized_calls`, trips
//! the agent's breaker ([`crate::breaker`]). Operations go to this process's own journal.
//!
//! With `--control etcd://…` the view is the plane's (etcd merged with this host's directory),
//! so a stop engaged on any host reaches the proxied server. This governor keeps no permit: a
//! call made while etcd cannot be read is refused `distributed_unavailable` unless it is
//! critical (as at a gateway whose permit lapsed), and an outage alone never cuts a stream.

use crate::breaker::Breakers;
use crate::governor::{Admission, Call, Caller, Governor, Proof};
use crate::local_admission::{refused, LocalAdmission};
use futures::future::BoxFuture;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use stopline_control::engage::verify_token;
use stopline_control::Context;
use stopline_core::call::{allowed_tool, must_cut};
use stopline_core::view::Authority;
use stopline_core::{CheckReceipt, ControlView, Decision, Refusal, RefusalCode, Role, TaskClass};
use stopline_gateway::GatewayConfig;
use stopline_store::ops::{OpOwner, OpsJournal};
use stopline_token::Claims;
use tokio::sync::watch;
// Tokio's clock (the system clock unless a test paused it), like the gateway's hold: a paused
// test then sees the queue timeout pass without waiting for it.
use tokio::time::Instant;

/// How often held calls and the stream-cut watcher re-read the control directory.
const POLL: Duration = Duration::from_millis(100);

/// Governs against the local control directory.
#[derive(Clone)]
pub struct LocalGovernor {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    ctx: Context,
    config: GatewayConfig,
    breakers: Breakers,
    journal: OnceLock<Result<OpsJournal, Refusal>>,
    view: OnceLock<watch::Receiver<Arc<ControlView>>>,
}

impl LocalGovernor {
    /// A governor over `ctx`'s control directory; its `[mcp.*]` and `[breakers]` tables must parse.
    pub fn new(ctx: Context) -> Result<LocalGovernor, Refusal> {
        let config = GatewayConfig::from_base((*ctx.config).clone())
            .map_err(|why| Refusal::new(RefusalCode::ControlStateCorrupt, why))?;
        let breakers = Breakers::new(
            ctx.clone(),
            config.breakers.unauthorized_calls.into(),
            config.breakers.mode.unauthorized_calls,
            config.trip_level,
        );
        Ok(LocalGovernor {
            inner: Arc::new(Inner {
                ctx,
                config,
                breakers,
                journal: OnceLock::new(),
                view: OnceLock::new(),
            }),
        })
    }
}

impl Inner {
    pub(crate) fn journal(&self) -> Result<&OpsJournal, Refusal> {
        let journal = self.journal.get_or_init(|| {
            self.ctx
                .store
                .ops()
                .journal("mcp")
                .map_err(|e| e.to_refusal())
        });
        journal.as_ref().map_err(Clone::clone)
    }

    /// One decision from a fresh read.
    pub(crate) fn decide(
        &self,
        claims: &Claims,
        class: TaskClass,
        target: Option<&str>,
    ) -> CheckReceipt {
        let authority = Authority {
            issue_epoch: claims.epoch,
        };
        let mut view = self.ctx.plane.load_view();
        if authority.minted_after(&view) {
            view = self.ctx.plane.load_view(); // minted a moment ago: re-read before refusing as future
        }
        if class == TaskClass::Critical {
            // An unreachable distributed plane closes only noncritical work.
            view.faults
                .retain(|f| f.code != RefusalCode::DistributedUnavailable);
        }
        view.decide(
            &claims.subject(),
            class,
            Some(authority),
            target,
            self.ctx.store.now_ms(),
        )
    }

    fn watch(&self) -> watch::Receiver<Arc<ControlView>> {
        let receiver = self.view.get_or_init(|| {
            let (tx, rx) = watch::channel(Arc::new(self.ctx.plane.load_view()));
            let plane = self.ctx.plane.clone();
            std::thread::spawn(move || loop {
                std::thread::sleep(POLL);
                if tx.send(Arc::new(plane.load_view())).is_err() {
                    return; // every receiver, the governor's own included, is gone
                }
            });
            rx
        });
        receiver.clone()
    }
}

fn claims(caller: &Caller) -> Result<&Claims, Refusal> {
    match &caller.proof {
        Proof::Local(claims) => Ok(claims),
        _ => Err(Refusal::new(
            RefusalCode::TokenInvalid,
            "the token was not verified with this store's key",
        )),
    }
}

impl Governor for LocalGovernor {
    fn authenticate(&self, bearer: Option<&str>) -> Result<Caller, Refusal> {
        let token = stopline_gateway::bearer_token(bearer.unwrap_or_default());
        if token.is_empty() {
            return Err(Refusal::new(
                RefusalCode::TokenInvalid,
                "no token was presented",
            ));
        }
        let claims = verify_token(&self.inner.ctx, token)?;
        Ok(Caller {
            agent: std::sync::Arc::from(claims.agent().map(|a| a.as_str()).unwrap_or_default()),
            role: claims.role,
            token: std::sync::Arc::from(token),
            proof: Proof::Local(Box::new(claims)),
        })
    }

    fn admit<'a>(
        &'a self,
        caller: &'a Caller,
        call: &'a Call,
    ) -> BoxFuture<'a, Result<Box<dyn Admission>, Refusal>> {
        Box::pin(async move {
            let claims = claims(caller)?.clone();
            let server = self
                .inner
                .config
                .mcp
                .get(&call.server)
                .cloned()
                .unwrap_or_default();
            let tool = call.tool.as_deref().filter(|_| call.method == "tools/call");
            if let Some(tool) = tool {
                let allowed = allowed_tool(server.allowed_tools.as_deref(), &call.server, tool);
                if let Err(refusal) = allowed {
                    self.inner.breakers.unauthorized(&caller.agent);
                    return Err(refusal);
                }
            }
            let critical = tool.is_some_and(|t| server.critical_tools.iter().any(|c| c == t))
                || call.method == "ping"
                || call.method.starts_with("notifications/");
            let class = if claims.role == Role::Critical || critical {
                TaskClass::Critical
            } else {
                TaskClass::Noncritical
            };
            let target = tool.map(|t| format!("mcp:{}:{t}", call.server));
            let deadline = Instant::now() + self.inner.config.queue_timeout();
            loop {
                let (inner, held, target) = (self.inner.clone(), claims.clone(), target.clone());
                let receipt = tokio::task::spawn_blocking(move || {
                    inner.decide(&held, class, target.as_deref())
                })
                .await
                .map_err(|e| {
                    Refusal::new(RefusalCode::ControlIo, format!("admission failed: {e}"))
                })?;
                match receipt.decision {
                    Decision::Allow => break,
                    Decision::Block => return Err(refused(receipt)),
                    Decision::Queue if Instant::now() >= deadline => {
                        return Err(Refusal::new(
                            RefusalCode::QueuedTimeout,
                            format!("held past the queue timeout: {}", receipt.message),
                        )
                        .with_latch(receipt.latch));
                    }
                    Decision::Queue => tokio::time::sleep(POLL).await,
                }
            }
            if tool.is_some() {
                self.inner
                    .breakers
                    .reserve_tool_call(&claims, self.inner.ctx.now_s())?;
            }
            // `readOnlyHint` is an untrusted hint: it spares the record only when trusted.
            let read_only = call.read_only && server.trust_read_only_hints;
            let op = match (&target, read_only) {
                (Some(target), false) => {
                    let journal = self.inner.journal()?;
                    let owner = OpOwner {
                        agent: Some(caller.agent.to_string()),
                        root: claims.subject().chain.first().map(|n| n.to_string()),
                        blocks: server.unresolved_blocks,
                    };
                    Some(
                        journal
                            .prepare_for(target, &owner, call.request_id.as_deref())
                            .map_err(|e| e.to_refusal())?,
                    )
                }
                _ => None,
            };
            let admission = LocalAdmission {
                inner: self.inner.clone(),
                claims,
                class,
                target,
                op,
                dispatched: false,
                finished: false,
            };
            Ok(Box::new(admission) as Box<dyn Admission>)
        })
    }

    fn cut_outcome_wait(&self) -> std::time::Duration {
        self.inner.config.cut_outcome_wait()
    }

    fn cut(&self, caller: &Caller) -> BoxFuture<'static, Refusal> {
        let mut rx = self.inner.watch();
        let store = self.inner.ctx.store.clone();
        let claims = claims(caller).cloned();
        Box::pin(async move {
            let claims = match claims {
                Ok(claims) => claims,
                Err(refusal) => return refusal,
            };
            loop {
                let authority = Authority {
                    issue_epoch: claims.epoch,
                };
                let now = store.now_ms();
                if let Some(refusal) =
                    must_cut(&rx.borrow_and_update(), &claims.subject(), authority, now)
                {
                    return refusal;
                }
                if rx.changed().await.is_err() {
                    return Refusal::new(
                        RefusalCode::ControlIo,
                        "the control directory is no longer watched",
                    );
                }
            }
        })
    }
}
