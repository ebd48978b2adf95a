//! `check`: one admission decision, always answered with a receipt.
//!
//! A stale, expired or forged token, corrupt state, or any internal error is a `block` with its
//! code — never an allow. `--class critical` is honoured only for a token of role `critical`;
//! `--agent` without a token is an unprovable identity that every agent latch covers.

use crate::context::Context;
use std::path::{Path, PathBuf};
use stopline_core::view::Authority;
use stopline_core::{CheckReceipt, Mode, Name, Refusal, Role, Subject, TaskClass};

/// What to check.
#[derive(Debug, Clone)]
pub struct CheckRequest {
    /// The class asked for.
    pub class: TaskClass,
    /// A token, if presented.
    pub token: Option<String>,
    /// `--agent NAME` (unprovable).
    pub agent: Option<String>,
    /// `--project DIR`.
    pub project: Option<String>,
    /// `--run ID`.
    pub run: Option<String>,
    /// `--target T`: checked against unresolved operations.
    pub target: Option<String>,
}

fn blocked(refusal: Refusal) -> CheckReceipt {
    CheckReceipt::block(Mode::Emergency, refusal.code, refusal.message, Vec::new())
}

/// Decide one call.
pub fn check(ctx: &Context, request: &CheckRequest) -> CheckReceipt {
    match decide(ctx, request) {
        Ok(receipt) => receipt,
        Err(refusal) => blocked(refusal),
    }
}

fn decide(ctx: &Context, request: &CheckRequest) -> Result<CheckReceipt, Refusal> {
    let mut projects: Vec<PathBuf> = Vec::new();
    if let Some(project) = &request.project {
        // Both forms (docs/reference.md §5): a latch on a project that vanished names it lexically, one on
        // a live project canonically; the subject is covered by either.
        let lexical = stopline_core::scope::lexical_absolute(Path::new(project));
        match std::fs::canonicalize(project) {
            Ok(canonical) => projects.push(canonical),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && lexical.is_some() => {}
            Err(e) => {
                return Err(Refusal::new(
                    stopline_core::RefusalCode::ProjectRootUnresolvable,
                    format!("{project}: {e}"),
                ))
            }
        }
        if let Some(lexical) = lexical {
            if !projects.contains(&lexical) {
                projects.push(lexical);
            }
        }
    }
    let runs: Vec<Name> = request
        .run
        .as_deref()
        .map(Name::parse)
        .transpose()?
        .into_iter()
        .collect();
    let mut view = ctx.plane.load_view();
    let now_ms = ctx.store.now_ms();
    let Some(token) = &request.token else {
        let claimed = request.agent.as_deref().map(Name::parse).transpose()?;
        let subject = Subject::unprovable(claimed, projects, runs);
        return Ok(view.decide(
            &subject,
            TaskClass::Noncritical,
            None,
            request.target.as_deref(),
            now_ms,
        ));
    };
    let claims = match crate::engage::verify_token(ctx, token) {
        Ok(claims) => claims,
        Err(refusal) => {
            let subject = Subject::unprovable(None, projects, runs);
            let mode = view.mode_for(&subject);
            return Ok(CheckReceipt::block(
                mode,
                refusal.code,
                refusal.message,
                Vec::new(),
            ));
        }
    };
    let mut subject: Subject = claims.subject();
    subject.projects.extend(projects);
    subject.runs.extend(runs);
    let class = if claims.role == Role::Critical && request.class == TaskClass::Critical {
        TaskClass::Critical
    } else {
        TaskClass::Noncritical
    };
    let authority = Authority {
        issue_epoch: claims.epoch,
    };
    if authority.minted_after(&view) {
        // A token minted a moment ago is not refused as future: re-read before judging.
        view = ctx.plane.load_view();
    }
    Ok(view.decide(
        &subject,
        class,
        Some(authority),
        request.target.as_deref(),
        now_ms,
    ))
}
