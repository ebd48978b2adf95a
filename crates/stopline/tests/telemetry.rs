//! OpenTelemetry with the real binary: `[telemetry] otlp_endpoint` exports the gateway's
//! admission, dispatch and refusal spans over OTLP/HTTP, checked by a loopback receiver that
//! decodes the protobuf it gets; and a collector that never answers slows no refusal.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use gw::{model_config, Gateway, Upstream};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use util::Home;

/// What the receiver got: each request's path, content type and body.
type Received = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

/// A loopback OTLP/HTTP receiver: answers every POST 200 with an empty protobuf response, or
/// (`hang`) reads it and never answers.
fn receiver(hang: bool) -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let received: Received = Arc::default();
    let store = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let store = store.clone();
            std::thread::spawn(move || serve(stream, store, hang));
        }
    });
    (url, received)
}

fn serve(stream: TcpStream, store: Received, hang: bool) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_string();
        let (mut length, mut content_type) = (0usize, String::new());
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "content-type" => content_type = value.trim().to_string(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        store.lock().unwrap().push((path, content_type, body));
        if hang {
            std::thread::sleep(Duration::from_secs(3600));
            return;
        }
        let answer =
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

fn spans(received: &Received) -> Vec<(Vec<KeyValue>, Span)> {
    let mut out = Vec::new();
    for (path, content_type, body) in received.lock().unwrap().iter() {
        assert_eq!(path, "/v1/traces");
        assert_eq!(content_type, "application/x-protobuf");
        let request = ExportTraceServiceRequest::decode(body.as_slice()).expect("OTLP protobuf");
        for resource in request.resource_spans {
            let attributes = resource.resource.map(|r| r.attributes).unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    out.push((attributes.clone(), span));
                }
            }
        }
    }
    out
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .and_then(|v| match v {
            any_value::Value::StringValue(s) => Some(s.clone()),
            _ => None,
        })
}

#[test]
fn admission_dispatch_and_refusal_spans_reach_an_otlp_receiver() {
    let home = Home::new();
    let upstream = Upstream::start(&home);
    let (collector, received) = receiver(false);
    let config = format!(
        "{}\n[telemetry]\notlp_endpoint = \"{collector}\"\n",
        model_config(&upstream)
    );
    let gateway = Gateway::start(&home, &config);
    let token = home.token(&["--agent", "traced"]);
    let ok = gateway.post(
        "/v1/chat/completions",
        Some(&token),
        &Gateway::chat_body("gpt-test"),
    );
    assert_eq!(ok.status, 200, "{}", ok.body);
    let refused = gateway.post(
        "/v1/chat/completions",
        Some("not-a-token"),
        &Gateway::chat_body("gpt-test"),
    );
    assert_eq!(refused.status, 401);

    let names = [
        "stopline.admission",
        "stopline.dispatch",
        "stopline.refusal",
    ];
    let found = gw::within(Duration::from_secs(30), || {
        let spans = spans(&received);
        names
            .iter()
            .all(|name| spans.iter().any(|(_, s)| s.name == *name))
            .then_some(spans)
    })
    .unwrap_or_else(|| panic!("no span of each kind: {:?}", spans(&received)));
    for (resource, span) in &found {
        assert_eq!(
            attribute(resource, "service.name").as_deref(),
            Some("stopline-gateway")
        );
        assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
        assert_eq!(
            attribute(&span.attributes, "http.route").as_deref(),
            Some("/v1/chat/completions"),
            "{span:?}"
        );
    }
    let named = |name: &str| {
        found
            .iter()
            .find(|(_, s)| s.name == name)
            .map(|(_, s)| s.clone())
            .unwrap()
    };
    let admission = named("stopline.admission");
    assert_eq!(
        attribute(&admission.attributes, "stopline.agent").as_deref(),
        Some("traced")
    );
    assert_eq!(
        attribute(&admission.attributes, "stopline.operation").as_deref(),
        Some("model:gpt-test")
    );
    let dispatch = named("stopline.dispatch");
    assert_eq!(
        attribute(&dispatch.attributes, "stopline.status").as_deref(),
        Some("committed")
    );
    let refusal = named("stopline.refusal");
    assert_eq!(
        attribute(&refusal.attributes, "stopline.code").as_deref(),
        Some("token_invalid")
    );
    let status = refusal
        .status
        .clone()
        .expect("a refusal span has an error status");
    assert!(status.message.contains("token_invalid"), "{status:?}");
}

/// A collector that takes the export and never answers holds the export thread only: a burst of
/// refusals is answered as without telemetry (the bound is generous: an export on the call's
/// path would cost each refusal the export timeout, 5 s).
#[test]
fn a_collector_that_never_answers_slows_no_refusal() {
    let home = Home::new();
    let (collector, received) = receiver(true);
    let gateway = Gateway::start(
        &home,
        &format!("[telemetry]\notlp_endpoint = \"{collector}/v1/traces\"\n"),
    );
    let started = Instant::now();
    for _ in 0..200 {
        let refused = gateway.post("/v1/check", Some("not-a-token"), &serde_json::json!({}));
        assert!(
            refused.status == 200 || refused.status == 401,
            "{}",
            refused.body
        );
    }
    gw::within(Duration::from_secs(30), || {
        (!received.lock().unwrap().is_empty()).then_some(())
    })
    .expect("the export reached the collector, which holds it");
    for _ in 0..50 {
        let refused = gateway.post(
            "/v1/chat/completions",
            Some("not-a-token"),
            &Gateway::chat_body("m"),
        );
        assert_eq!(refused.status, 401);
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "250 refusals took {:?}",
        started.elapsed()
    );
    assert_eq!(gateway.get("/healthz", None).status, 200);
}

#[test]
fn an_unusable_endpoint_is_refused_at_start() {
    let home = Home::new();
    std::fs::create_dir_all(home.path()).unwrap();
    std::fs::write(
        home.file("config.toml"),
        "[telemetry]\notlp_endpoint = \"ftp://collector\"\n",
    )
    .unwrap();
    let out = home.run(&["serve", "--listen", "127.0.0.1:0"]);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert_eq!(out.code, 1, "{said}");
    assert!(said.contains("config_invalid"), "{said}");
    assert!(said.contains("otlp_endpoint"), "{said}");
}
