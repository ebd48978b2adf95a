//! What the Streamable HTTP proxy forwards, byte for byte: a request's `params` reach the
//! upstream as the agent wrote them (member order, escapes, numbers no tree keeps; only the
//! whitespace between tokens removed), inside the canonical message the governor judged (unknown and duplicated top-level
//! members dropped, the last one kept); the upstream's JSON answer reaches the agent exactly as
//! the upstream wrote it; the agent's token never goes upstream; and a `tools/call` naming its
//! tool twice is refused without anything reaching the upstream. Runs the real gateway (in
//! process) and a recording upstream on loopback sockets.

mod support;

use serde_json::Value;
use stopline_testkit::upstream::{Answer, Received, Upstream};
use support::World;

/// The answer the upstream gives a `tools/call`, spelled as no serializer would.
const ANSWER: &str = "{ \"result\" : {\"isError\":false, \"content\": [{\"type\":\"text\",\"text\":\"\\u0041 9007199254740993\"}], \"n\": 1.50e3}, \"id\" : 3, \"jsonrpc\":\"2.0\" }";

fn answer(request: &Received) -> Answer {
    let request = request.json();
    match request["method"].as_str() {
        Some("tools/call") => Answer::json(ANSWER),
        _ => Answer::json(format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{}}}}",
            request["id"]
        )),
    }
}

/// Every body the upstream received, with whether it carried an `Authorization` header.
fn seen(upstream: &Upstream) -> Vec<(String, bool)> {
    upstream
        .received()
        .into_iter()
        .map(|r| {
            let authorized = r.header("authorization").is_some();
            (r.body, authorized)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_go_upstream_and_answers_come_back_exactly_as_written() {
    let upstream = Upstream::start(answer);
    let config = format!("[mcp.rec]\nurl = \"{}\"\n", upstream.url("/mcp"));
    let world = World::start(&config, "writer").await;
    let (url, token) = (world.mcp_url("rec"), &world.token);
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let post = |body: String| {
        client
            .post(&url)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
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
    let forwarded = seen(&upstream);
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
        upstream.received().len(),
        1,
        "nothing more reached the upstream"
    );
    world.shutdown().await;
}
