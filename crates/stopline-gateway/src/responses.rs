//! Responses API ownership and background work (docs/reference.md §6 "Background work is cancelled").
//!
//! Every response the `[model]` provider creates through `POST /v1/responses` is written in the
//! gateway's [`ResponseBook`] against the root of the caller's delegation chain. Only that chain
//! may name it again: as `previous_response_id` (anything else is refused `request_invalid`), or
//! at `GET`, `POST …/cancel` and `DELETE /v1/responses/{id}` (anything else: 404, the same answer
//! as an id that does not exist).
//!
//! A background response (`background: true`, only with `background` in `[model]
//! allow_hosted_tools`) is an operation of its own, `hosted:openai:background`, prepared before
//! dispatch like every hosted tool. It stays open while the provider works: it is closed when
//! the gateway sees its final status (the create's answer, a `GET`, a cancel) or confirms its
//! cancel. While it is open a watcher waits for a cut of its agent (`must_cut`: an EMERGENCY
//! covering the chain, a contained machine); then the gateway cancels it upstream (`POST
//! {base_url}/responses/{id}/cancel`, within `cut_outcome_wait_s`) and records the outcome:
//! `cancelled` when the provider confirms, else the operation is left in doubt. A `DELETE`
//! of an open background response cancels it the same way first.
//!
//! The book is memory: a gateway that restarts forgets it, so every earlier id is refused as
//! `previous_response_id` and answered 404 (fail closed), and a background operation it left
//! open is found unresolved (its writer is gone) until the owner reconciles it — the provider
//! may still be working on it. The book holds at most [`MAX_IDS`] closed ids (the oldest are
//! forgotten first); open ones are never forgotten.

use crate::admit::{Admission, Outcome};
use crate::caller::Caller;
use crate::error::GatewayError;
use crate::governor::Governor;
use crate::outgoing::{upstream_key, Outgoing};
use crate::request::bearer;
use crate::response_book::{chain_root, usable_id, Open};
use crate::state::AppState;
use crate::usage::ResponseSeen;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::time::Duration;
use stopline_core::Refusal;
use tokio::sync::oneshot;

/// The open background operation of `id`, taken from the book (its watcher ends). Only this
/// module puts operations in the book, and each is an `Admission`.
fn take_admission(gov: &Governor, id: &str) -> Option<Admission> {
    let operation = gov.responses().take_open(id)?;
    Some(
        *operation
            .downcast::<Admission>()
            .expect("the response book holds only the admissions responses.rs put in it"),
    )
}

/// The outcome a final status records.
fn terminal_outcome(seen: &ResponseSeen) -> Outcome {
    match seen.status.as_deref() {
        Some("cancelled") => Outcome::Cancelled,
        Some("failed") => Outcome::Failed,
        _ => Outcome::Committed,
    }
}

/// What a model call carries besides its own operation: its hosted tools' operations, the
/// background response's, and whether the response it creates is written in the book.
pub(crate) struct Companions {
    gov: Governor,
    caller: Caller,
    hosted: Vec<Admission>,
    background: Option<Admission>,
    /// Write the created response's id in the book (the Responses API).
    book: bool,
}

impl Companions {
    /// `admissions` (one per allowed hosted tool; `hosted:openai:background` is the background
    /// response's), for a call whose created response `book` says to write.
    pub(crate) fn new(
        gov: &Governor,
        caller: &Caller,
        admissions: Vec<Admission>,
        book: bool,
    ) -> Companions {
        let (background, hosted): (Vec<_>, Vec<_>) = admissions
            .into_iter()
            .partition(|a| a.target() == Some(BACKGROUND_TARGET));
        Companions {
            gov: gov.clone(),
            caller: caller.clone(),
            hosted,
            background: background.into_iter().next(),
            book,
        }
    }

    fn all(&mut self) -> impl Iterator<Item = &mut Admission> {
        self.hosted.iter_mut().chain(self.background.as_mut())
    }

    /// Dispatch every companion operation (right before the model call's own); on a refusal
    /// none is sent, and every one is closed `failed`.
    pub(crate) fn dispatch(&mut self) -> Result<(), Refusal> {
        let mut refused = None;
        for admission in self.all() {
            if let Err(refusal) = admission.dispatch() {
                refused = Some(refusal);
                break;
            }
        }
        match refused {
            None => Ok(()),
            Some(refusal) => {
                self.fail();
                Err(refusal)
            }
        }
    }

    /// Close every companion `failed`: the model call was not sent.
    pub(crate) fn fail(&mut self) {
        for admission in self.hosted.drain(..).chain(self.background.take()) {
            if admission.is_dispatched() {
                admission.finish(Outcome::Failed);
            }
            // Not dispatched: dropping it records `failed`.
        }
    }

    /// The model call ended with `outcome`; `seen` is the response it created, if one was seen.
    /// Hosted tools take the call's outcome (the provider ran them, or not, within it); the
    /// background response stays open while the provider still works on it.
    pub(crate) fn finish(mut self, outcome: &Outcome, seen: Option<ResponseSeen>) {
        for admission in self.hosted.drain(..) {
            admission.finish(outcome.clone());
        }
        let seen = seen.filter(|s| usable_id(&s.id));
        let book = self.gov.responses();
        let root = chain_root(&self.caller);
        match (self.background.take(), &seen) {
            (Some(admission), Some(seen)) if !seen.is_terminal() => {
                let (closed, watched) = oneshot::channel();
                let open = Open::new(Box::new(admission), closed);
                book.created(&seen.id, &root, Some(open));
                watch(
                    self.gov.clone(),
                    self.caller.clone(),
                    seen.id.clone(),
                    watched,
                );
                return;
            }
            (Some(admission), Some(seen)) => admission.finish(terminal_outcome(seen)),
            (Some(admission), None) => admission.finish(outcome.clone()),
            (None, _) => {}
        }
        if let (true, Some(seen)) = (self.book, seen) {
            book.created(&seen.id, &root, None);
        }
    }
}

/// The target of a background response's operation.
pub(crate) const BACKGROUND_TARGET: &str = "hosted:openai:background";

/// Wait, while `id` is open, for a cut of `caller`; then cancel it upstream.
fn watch(gov: Governor, caller: Caller, id: String, closed: oneshot::Receiver<()>) {
    tokio::spawn(async move {
        let mut cuts = gov.subscribe_cuts(&caller);
        tokio::select! {
            refusal = cuts.cut() => {
                tracing::info!(id, code = %refusal.code, "cancelling a background response at a cut");
                cancel_open(&gov, &id).await;
            }
            _ = closed => {}
        }
    });
}

/// The `[model]` upstream request `method {base_url}/responses/{id}{suffix}`.
fn upstream_request(
    gov: &Governor,
    method: Method,
    id: &str,
    suffix: &str,
    timeout: Duration,
) -> Result<Outgoing, GatewayError> {
    let Some(upstream) = gov.config().model.clone() else {
        return Err(GatewayError::Upstream(
            "no [model] upstream is configured".into(),
        ));
    };
    let url = format!(
        "{}/responses/{id}{suffix}",
        upstream.base_url.trim_end_matches('/')
    );
    let body = if method == Method::POST {
        Bytes::from_static(b"{}")
    } else {
        Bytes::new()
    };
    let mut outgoing = Outgoing::new(method, &url, timeout, body)?;
    if let Some(key) = upstream_key(upstream.api_key_env.as_deref()) {
        outgoing.header(header::AUTHORIZATION, format!("Bearer {key}").as_bytes())?;
    }
    Ok(outgoing)
}

/// Cancel the open background response `id` upstream and record the outcome: `cancelled` when
/// the provider confirms it (or its final status when it had ended), in doubt otherwise. Waits
/// at most `cut_outcome_wait_s`. `None` when it is not open.
pub(crate) async fn cancel_open(gov: &Governor, id: &str) -> Option<Outcome> {
    let admission = take_admission(gov, id)?;
    let wait = gov.config().cut_outcome_wait();
    let answer = match upstream_request(gov, Method::POST, id, "/cancel", wait) {
        Ok(outgoing) => outgoing.send_whole(gov.upstream_client()).await,
        Err(error) => Err(error.to_string()),
    };
    let outcome = match answer {
        Ok((status, _, body)) if status.is_success() => match ResponseSeen::from_body(&body) {
            Some(seen) if seen.is_terminal() => terminal_outcome(&seen),
            seen => Outcome::InDoubt(format!(
                "the provider did not confirm the cancel of background response {id} (status {:?})",
                seen.and_then(|s| s.status)
            )),
        },
        Ok((status, _, _)) => Outcome::InDoubt(format!(
            "the provider refused the cancel of background response {id} (HTTP {status})"
        )),
        Err(why) => Outcome::InDoubt(format!(
            "the cancel of background response {id} was not confirmed: {why}"
        )),
    };
    tracing::info!(id, ?outcome, "background response cancel");
    admission.finish(outcome.clone());
    Some(outcome)
}

/// The OpenAI-shaped 404 for an id the caller's chain did not create here.
fn not_found(id: &str) -> Response {
    let body = json!({"error": {
        "message": format!("No response with id {id:?} found."),
        "type": "invalid_request_error",
        "param": null,
        "code": "not_found",
    }});
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

/// `GET /v1/responses/{id}`.
pub async fn get_response(
    State(state): State<AppState>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let suffix = query.map(|q| format!("?{q}")).unwrap_or_default();
    answer(&state.gov, &headers, &id, Method::GET, &suffix).await
}

/// `POST /v1/responses/{id}/cancel`.
pub async fn cancel_response(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    answer(&state.gov, &headers, &id, Method::POST, "/cancel").await
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete_response(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    answer(&state.gov, &headers, &id, Method::DELETE, "").await
}

async fn answer(
    gov: &Governor,
    headers: &HeaderMap,
    id: &str,
    method: Method,
    suffix: &str,
) -> Response {
    match relay(gov, headers, id, method, suffix).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn relay(
    gov: &Governor,
    headers: &HeaderMap,
    id: &str,
    method: Method,
    suffix: &str,
) -> Result<Response, GatewayError> {
    let caller = gov.authenticate(bearer(headers))?;
    if !usable_id(id) || !gov.responses().owned_by(id, &chain_root(&caller)) {
        return Ok(not_found(id));
    }
    // Reading a result is the agent's work, and a stop's cut ends it; a cancel or a delete
    // only stops work, so no stop refuses it.
    if method == Method::GET {
        if let Some(refusal) = gov.subscribe_cuts(&caller).check() {
            return Err(gov.refused(refusal).into());
        }
    }
    if method == Method::DELETE {
        cancel_open(gov, id).await;
    }
    let timeout = gov
        .config()
        .model
        .as_ref()
        .map_or(Duration::from_secs(600), |m| {
            Duration::from_secs(m.timeout_s)
        });
    let (status, content_type, body) = upstream_request(gov, method.clone(), id, suffix, timeout)?
        .send_whole(gov.upstream_client())
        .await
        .map_err(|why| GatewayError::Upstream(format!("the model upstream failed: {why}")))?;
    if status.is_success() {
        if method == Method::DELETE {
            gov.responses().forget(id);
        } else if let Some(seen) = ResponseSeen::from_body(&body).filter(ResponseSeen::is_terminal)
        {
            if let Some(admission) = take_admission(gov, id) {
                admission.finish(terminal_outcome(&seen));
            }
        }
    }
    Ok((status, [(header::CONTENT_TYPE, content_type)], body).into_response())
}
