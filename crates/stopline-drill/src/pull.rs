//! Pulling the stop: the same engage verb every surface uses, timed from the pull.
//!
//! Locally the drill calls `stopline_control::engage::engage` on a dedicated OS thread (never
//! the async runtime its callers load, never the blocking pool the gateway's fsyncs queue on).
//! Against a live gateway it posts `/v1/engage` with a token of its own. The pull instant is
//! taken immediately before the call; `last_ack_us` of the engage receipt (from the start of
//! engage to the last gateway acknowledgement) gives the acknowledgement time.

use crate::agents::Shared;
use crate::effects::unix_us;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stopline_control::receipts::EngageReceipt;
use stopline_control::{engage, Context};
use stopline_core::{Refusal, RefusalCode};

/// How to engage.
#[derive(Debug, Clone)]
pub enum Puller {
    /// In this process, on the given control directory (the drill's throwaway home).
    Local(Context),
    /// Through a live gateway's API.
    Remote {
        /// The gateway's base URL.
        url: String,
        /// A validly signed token of the drill's own.
        token: String,
        /// The HTTP client.
        client: reqwest::Client,
    },
}

/// What the pull measured.
#[derive(Debug, Clone)]
pub struct Pull {
    /// Unix ms of the pull.
    pub pulled_unix_ms: i64,
    /// From the pull to the engage receipt.
    pub engage_returned: Duration,
    /// Unix µs at which the receipt was in hand (the trip, for matching).
    pub returned_unix_us: i64,
    /// From the pull to the last gateway acknowledgement (`None`: none acknowledged).
    pub ack: Option<Duration>,
    /// The receipt.
    pub receipt: EngageReceipt,
}

fn finish(pulled: Instant, pulled_unix_ms: i64, called: Instant, receipt: EngageReceipt) -> Pull {
    let returned = Instant::now();
    let returned_unix_us = unix_us();
    let ack = receipt
        .last_ack_us
        .map(|us| (called - pulled) + Duration::from_micros(us));
    Pull {
        pulled_unix_ms,
        engage_returned: returned - pulled,
        returned_unix_us,
        ack,
        receipt,
    }
}

/// Pull the stop on `scope` at `level`; sets `shared.pulled` at the pull.
pub async fn pull(
    puller: &Puller,
    shared: &Arc<Shared>,
    scope: &str,
    level: &str,
) -> Result<Pull, Refusal> {
    let reason = format!("stopline drill: pulled at a random moment ({scope})");
    match puller {
        Puller::Local(ctx) => {
            let (ctx, shared, scope, level) = (
                ctx.clone(),
                shared.clone(),
                scope.to_string(),
                level.to_string(),
            );
            let (tx, rx) = tokio::sync::oneshot::channel();
            std::thread::Builder::new()
                .name("stopline-drill-pull".into())
                .spawn(move || {
                    let caller = engage::Caller {
                        token: None,
                        by: Some("stopline-drill".into()),
                        local: true,
                    };
                    let pulled = Instant::now();
                    let pulled_unix_ms = unix_us() / 1000;
                    let _ = shared.pulled.set(pulled);
                    let called = Instant::now();
                    let receipt = engage::engage(&ctx, &caller, &scope, Some(&level), &reason);
                    let _ = tx.send(receipt.map(|r| finish(pulled, pulled_unix_ms, called, r)));
                })
                .map_err(|e| Refusal::new(RefusalCode::ControlIo, e.to_string()))?;
            rx.await
                .map_err(|_| Refusal::new(RefusalCode::ControlIo, "the pull thread died"))?
        }
        Puller::Remote { url, token, client } => {
            let body = json!({"scope": scope, "level": level, "reason": reason}).to_string();
            let request = client
                .post(format!("{url}/v1/engage"))
                .bearer_auth(token)
                .header("content-type", "application/json")
                .body(body);
            let pulled = Instant::now();
            let pulled_unix_ms = unix_us() / 1000;
            let _ = shared.pulled.set(pulled);
            let called = Instant::now();
            let refused = |why: String| Refusal::new(RefusalCode::GatewayUnreachable, why);
            let response = request.send().await.map_err(|e| refused(e.to_string()))?;
            let status = response.status();
            let body = response.text().await.map_err(|e| refused(e.to_string()))?;
            let receipt = engage_answered(status, &body)?;
            Ok(finish(pulled, pulled_unix_ms, called, receipt))
        }
    }
}

/// The gateway's answer to `POST /v1/engage` as an engage receipt. A receipt that does not read
/// as one (a field missing or renamed) is no engage, never an engage nobody acknowledged.
fn engage_answered(status: reqwest::StatusCode, body: &str) -> Result<EngageReceipt, Refusal> {
    let refused = |why: String| Refusal::new(RefusalCode::GatewayUnreachable, why);
    if !status.is_success() {
        return Err(refused(format!("engage answered {status}: {body}")));
    }
    let receipt: EngageReceipt = serde_json::from_str(body).map_err(|e| {
        refused(format!(
            "engage answered {status} with no engage receipt ({e}): {body}"
        ))
    })?;
    if !receipt.engaged {
        return Err(refused(format!("engage answered {status}: {body}")));
    }
    Ok(receipt)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `stopline engage --json` printed before receipts could be read back.
    const GOLDEN: &str = include_str!("../../stopline-control/tests/golden/engage.json");

    #[test]
    fn an_engage_receipt_reads_with_its_acknowledgements() {
        let receipt = engage_answered(reqwest::StatusCode::OK, GOLDEN).unwrap();
        assert!(receipt.engaged);
        assert_eq!(receipt.latch.file, "latch_aa93d383e7ad8202.json");
    }

    #[test]
    fn a_receipt_with_a_field_renamed_is_refused_never_read_as_unacknowledged() {
        let renamed = GOLDEN.replace("\"unacknowledged\"", "\"not_acknowledged\"");
        let refusal = engage_answered(reqwest::StatusCode::OK, &renamed).unwrap_err();
        assert_eq!(refusal.code, RefusalCode::GatewayUnreachable);
        assert!(
            refusal.message.contains("unacknowledged"),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn a_refused_engage_is_an_error() {
        let body = r#"{"error":{"code":"scope_invalid","message":"no"}}"#;
        assert!(engage_answered(reqwest::StatusCode::BAD_REQUEST, body).is_err());
    }
}
