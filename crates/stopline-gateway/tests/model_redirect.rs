//! A model upstream's redirect is the agent's answer, never followed: following it would send
//! the request (and the upstream key) to a URL the owner never configured. The gateway (in
//! process) sends through its pooled hyper client; the upstream answers `307` towards a second
//! server on loopback, which must never see a request.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

use bytes::Bytes;
use http_body_util::Full;
use std::time::Duration;
use stopline_control::config::Config;
use stopline_control::{tokens, Context};
use stopline_core::Role;
use stopline_gateway::client::{body_bytes, UpstreamClient};
use stopline_gateway::{start, ServeOptions};
use stopline_store::Store;
use stopline_testkit::upstream::{Answer, Upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_upstreams_redirect_is_answered_not_followed() {
    let elsewhere = Upstream::start(|_| Answer::json("{}"));
    let location = elsewhere.url("/v1/chat/completions");
    let upstream =
        Upstream::start(move |_| Answer::status(307, "moved").header("location", location.clone()));

    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.toml"),
        format!("[model]\nbase_url = \"{}\"\n", upstream.url("/v1")),
    )
    .unwrap();
    let gateway = start(ServeOptions {
        home: home.clone(),
        config: None,
        listen: Some("127.0.0.1:0".into()),
        mount: None,
        access_log: false,
    })
    .await
    .expect("gateway");
    let ctx = Context::new(Store::open(&home), Config::default());
    let args = tokens::IssueArgs::new("modeller", Role::Agent, 600);
    let token = tokens::issue(&ctx, &args).expect("token").token;
    // The agent's side: a client that follows no redirect either, so the 307 is what it sees.
    let request = hyper::Request::post(format!("http://{}/v1/chat/completions", gateway.addr))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
        )))
        .unwrap();
    let reply = UpstreamClient::new().send(request).await.unwrap();
    assert_eq!(reply.status(), 307);
    assert_eq!(body_bytes(reply.into_body()).await.unwrap(), "moved");
    assert_eq!(upstream.received().len(), 1, "the upstream was asked once");
    assert!(
        elsewhere.received().is_empty(),
        "the redirect was followed: {:?}",
        elsewhere.received()
    );
    // The operation was dispatched and answered: its outcome is known (not in doubt), and it
    // is not a success.
    let mut outcome = None;
    for _ in 0..200 {
        let (ops, _) = ctx.store.ops().all();
        let op = ops.values().find(|o| o.target == "model:m").cloned();
        if let Some(op) = op.filter(|o| o.outcome.is_some() || o.in_doubt) {
            outcome = Some((op.outcome, op.in_doubt));
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(outcome, Some((Some("failed".to_string()), false)));
    gateway.shutdown().await;
}
