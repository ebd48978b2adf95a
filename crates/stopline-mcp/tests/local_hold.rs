//! The local governor's hold under HALT_NONCRITICAL (`stopline mcp proxy` without a gateway), on
//! paused tokio time: a held call is refused `queued_timeout` once `queue_timeout_s` has passed
//! on tokio's clock, re-admitted when the halt is lifted, and refused at once when the stop
//! escalates. The control directory, the token and the engage are real; only the clock is
//! virtual, so the 2 s queue timeout costs no wall time and its bound is exact.

use std::time::Duration;
use stopline_control::config::Config;
use stopline_control::{engage, tokens, Context};
use stopline_core::{Refusal, RefusalCode, Role};
use stopline_mcp::local::LocalGovernor;
use stopline_mcp::{Call, Caller, Governor};
use stopline_store::Store;
use tokio::time::Instant;

/// `queue_timeout_s` of these tests.
const QUEUE_TIMEOUT: Duration = Duration::from_secs(2);
/// The governor re-reads the control directory this often while it holds a call.
const POLL: Duration = Duration::from_millis(100);

struct Setup {
    _dir: tempfile::TempDir,
    ctx: Context,
    governor: LocalGovernor,
    caller: Caller,
}

/// A home with agent `q` halted noncritical, its governor, and `q` authenticated.
fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let config = Config {
        queue_timeout_s: QUEUE_TIMEOUT.as_secs(),
        ..Config::default()
    };
    let ctx = Context::new(Store::open(&home), config);
    let args = tokens::IssueArgs::new("q", Role::Agent, 600);
    let token = tokens::issue(&ctx, &args).expect("token").token;
    stop(&ctx, "halt-noncritical");
    let governor = LocalGovernor::new(ctx.clone()).expect("governor");
    let caller = governor.authenticate(Some(&token)).expect("caller");
    Setup {
        _dir: dir,
        ctx,
        governor,
        caller,
    }
}

fn stop(ctx: &Context, level: &str) {
    let caller = engage::Caller {
        token: None,
        by: Some("tester".into()),
        local: true,
    };
    engage::engage(ctx, &caller, "agent:q", Some(level), "hold test").expect("engage");
}

fn write_call() -> Call {
    Call {
        server: "tools".into(),
        method: "tools/call".into(),
        tool: Some("write".into()),
        read_only: false,
        request_id: Some("1".into()),
    }
}

/// Admit one noncritical call: its refusal (`None` when admitted) and how long it was held on
/// tokio's clock. A hold that never ends fails here after a virtual minute.
async fn held(setup: &Setup) -> (Option<Refusal>, Duration) {
    let started = Instant::now();
    let call = write_call();
    let admitted = tokio::time::timeout(
        Duration::from_secs(60),
        setup.governor.admit(&setup.caller, &call),
    )
    .await
    .expect("the hold ended");
    (admitted.err(), started.elapsed())
}

#[tokio::test(start_paused = true)]
async fn a_held_call_is_refused_queued_timeout_when_the_queue_timeout_passes() {
    let setup = setup();
    let (refusal, waited) = held(&setup).await;
    let refusal = refusal.expect("refused");
    assert_eq!(refusal.code, RefusalCode::QueuedTimeout, "{refusal:?}");
    // Refused at the first re-read after the deadline: not before, and not on another clock.
    assert!(
        waited >= QUEUE_TIMEOUT && waited <= QUEUE_TIMEOUT + POLL,
        "held for {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_held_call_is_readmitted_when_the_halt_is_lifted() {
    let setup = setup();
    let ctx = setup.ctx.clone();
    let lift = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        tokio::task::spawn_blocking(move || {
            engage::disengage(&ctx, "agent:q", "resume", Some("operator"), None)
        })
        .await
        .unwrap()
    });
    let (refusal, waited) = held(&setup).await;
    lift.await.unwrap().expect("disengage");
    assert!(refusal.is_none(), "{refusal:?}");
    assert!(
        waited >= Duration::from_millis(300) && waited < QUEUE_TIMEOUT,
        "held for {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_held_call_is_refused_at_once_when_the_stop_escalates() {
    let setup = setup();
    let ctx = setup.ctx.clone();
    let escalate = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        tokio::task::spawn_blocking(move || stop(&ctx, "halt-all"))
            .await
            .unwrap()
    });
    let (refusal, waited) = held(&setup).await;
    escalate.await.unwrap();
    let refusal = refusal.expect("refused");
    assert_eq!(
        refusal.code,
        RefusalCode::BreakGlassContained,
        "{refusal:?}"
    );
    assert!(
        waited >= Duration::from_millis(200) && waited <= Duration::from_millis(200) + POLL,
        "held for {waited:?}"
    );
}
