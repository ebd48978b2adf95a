//! What the Streamable HTTP proxy forwards, byte for byte: a request's `params` reach the
//! upstream as the agent wrote them (member order, escapes, numbers no tree keeps; only the
//! whitespace between tokens removed), inside the canonical message the governor judged (unknown and duplicated top-level
//! members dropped, the last one kept); the upstream's JSON answer reaches the agent exactly as
//! the upstream wrote it; the agent's token never goes upstream; and a `tools/call` naming its
//! tool twice is refused without anything reaching the upstream. Runs the real gateway (in
//! process) and a recording upstream on loopback sockets.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use stopline_control::config::Config;
use stopline_control::{tokens, Context};
use stopline_core::Role;
use stopline_gateway::{start, ServeOptions};
use stopline_store::Store;

/// Every body the upstream received, with whether it carried an `Authorization` header.
type Seen = Arc<Mutex<Vec<(String, bool)>>>;

/// The answer the upstream gives a `tools/call`, spelled as no serializer would.
const ANSWER: &str = "{ \"result\" : {\"isError\":false, \"content\": [{\"type\":\"text\",\"text\":\"\\u0041 9007199254740993\"}], \"n\": 1.50e3}, \"id\" : 3, \"jsonrpc\":\"2.0\" }";

async fn upstream(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> Response {
    let text = String::from_utf8(body.to_vec()).unwrap();
    let request: Value = serde_json::from_str(&text).unwrap();
    seen.lock()
        .unwrap()
        .push((text, headers.contains_key(header::AUTHORIZATION)));
    let answer = match request["method"].as_str() {
        Some("tools/call") => ANSWER.to_string(),
        _ => format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{}}}}",
            request["id"]
        ),
    };
    ([(header::CONTENT_TYPE, "application/json")], answer).into_response()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_go_upstream_and_answers_come_back_exactly_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let seen = Seen::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route("/mcp", post(upstream))
        .with_state(seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    std::fs::write(
        home.join("config.toml"),
        format!("[mcp.rec]\nurl = \"http://{upstream_addr}/mcp\"\n"),
    )
    .unwrap();
    let gateway = start(ServeOptions {
        home: home.clone(),
        config: None,
        listen: Some("127.0.0.1:0".into()),
        mount: Some(Box::new(stopline_mcp::http::router)),
    })
    .await
    .expect("gateway");
    let ctx = Context::new(Store::open(&home), Config::default());
    let args = tokens::IssueArgs {
        agent: "writer".into(),
        role: Role::Agent,
        project: None,
        run: None,
        ttl_s: 600,
        budgets: Default::default(),
    };
    let token = tokens::issue(&ctx, &args).expect("token").token;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let post = |body: String| {
        client
            .post(format!("http://{}/mcp/rec", gateway.addr))
            .bearer_auth(&token)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .body(body)
            .send()
    };

    let params = r#"{ "name" : "echo", "arguments": {"z": [1, {"b": 2, "a": "\u00e9\n"}], "big": 123456789012345678901234567890, "f": 1.50e3} }"#;
    let call = format!(
        r#"{{"params": {params}, "method":"tools/call", "id":3, "x": {{"dropped": true}}, "jsonrpc":"2.0", "id": 3}}"#
    );
    let compact = r#"{"name":"echo","arguments":{"z":[1,{"b":2,"a":"\u00e9\n"}],"big":123456789012345678901234567890,"f":1.50e3}}"#;
    let reply = post(call).await.unwrap();
    assert_eq!(reply.status(), 200);
    assert_eq!(
        reply.text().await.unwrap(),
        ANSWER,
        "the agent gets the upstream's answer as written"
    );
    let forwarded = seen.lock().unwrap().clone();
    assert_eq!(
        forwarded,
        [(
            format!(r#"{{"id":3,"jsonrpc":"2.0","method":"tools/call","params":{compact}}}"#),
            false
        )],
        "the upstream gets the judged message, its params as the agent wrote them, no token"
    );

    // A tool named twice: the judge would read one name and the upstream might run the other.
    let twice = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","n\u0061me":"write"}}"#;
    let reply = post(twice.to_string()).await.unwrap();
    let answer: Value = reply.json().await.unwrap();
    assert_eq!(answer["id"], 4, "{answer}");
    assert_eq!(answer["error"]["data"]["code"], "bad_request", "{answer}");
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "nothing more reached the upstream"
    );
    gateway.shutdown().await;
}
