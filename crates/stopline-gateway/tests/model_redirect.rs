//! A model upstream's redirect is the agent's answer, never followed: following it would send
//! the request (and the upstream key) to a URL the owner never configured. The gateway (in
//! process) sends through its pooled hyper client; the upstream answers `307` towards a second
//! server on loopback, which must never see a request.

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use stopline_control::config::Config;
use stopline_control::{tokens, Context};
use stopline_core::Role;
use stopline_gateway::{start, ServeOptions};
use stopline_store::Store;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_upstreams_redirect_is_answered_not_followed() {
    let elsewhere_hits = Arc::new(AtomicUsize::new(0));
    let hits = elsewhere_hits.clone();
    let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let elsewhere_addr = elsewhere.local_addr().unwrap();
    let app = axum::Router::new().fallback(move || {
        hits.fetch_add(1, Ordering::SeqCst);
        async { "{}" }
    });
    tokio::spawn(async move { axum::serve(elsewhere, app).await });
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = upstream.local_addr().unwrap();
    let location = format!("http://{elsewhere_addr}/v1/chat/completions");
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move || async move {
            (
                StatusCode::TEMPORARY_REDIRECT,
                [(header::LOCATION, location)],
                "moved",
            )
                .into_response()
        }),
    );
    tokio::spawn(async move { axum::serve(upstream, app).await });

    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.toml"),
        format!("[model]\nbase_url = \"http://{upstream_addr}/v1\"\n"),
    )
    .unwrap();
    let gateway = start(ServeOptions {
        home: home.clone(),
        config: None,
        listen: Some("127.0.0.1:0".into()),
        mount: None,
    })
    .await
    .expect("gateway");
    let ctx = Context::new(Store::open(&home), Config::default());
    let args = tokens::IssueArgs {
        agent: "modeller".into(),
        role: Role::Agent,
        project: None,
        run: None,
        ttl_s: 600,
        budgets: Default::default(),
    };
    let token = tokens::issue(&ctx, &args).expect("token").token;
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let reply = client
        .post(format!("http://{}/v1/chat/completions", gateway.addr))
        .bearer_auth(&token)
        .header(header::CONTENT_TYPE, "application/json")
        .body(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), StatusCode::TEMPORARY_REDIRECT);
    assert_eq!(reply.text().await.unwrap(), "moved");
    assert_eq!(
        elsewhere_hits.load(Ordering::SeqCst),
        0,
        "the redirect was followed"
    );
    // The operation was dispatched and answered: its outcome is known (not in doubt), and it
    // is not a success.
    let mut outcome = None;
    for _ in 0..200 {
        let (ops, _) = ctx.store.operations();
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
