//! Governing frames member by member, against a scripted governor: refused requests are
//! answered locally with the stopline code in `error.data`, refused notifications vanish, a
//! refusal at dispatch removes the member, and what is forwarded is each survivor re-serialized
//! on its own (a batch's members one by one, never as a batch). Tool calls carry whether the upstream declared the tool read-only.

use futures::future::BoxFuture;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use stopline_core::{Refusal, RefusalCode, Role};
use stopline_mcp::govern::{govern_frame, ToolCatalog, Tracker};
use stopline_mcp::jsonrpc::{parse, Incoming, Message};
use stopline_mcp::{Admission, Call, Caller, Governor, Outcome};

/// Refuses tools named `refuse-*` at admission and `late-*` at dispatch; logs every event.
#[derive(Default)]
struct Scripted {
    log: Arc<Mutex<Vec<String>>>,
}

struct Ticket {
    name: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Admission for Ticket {
    fn dispatch(&mut self) -> Result<(), Refusal> {
        if self.name.starts_with("late-") {
            return Err(Refusal::new(
                RefusalCode::BreakGlassContained,
                "a stop landed",
            ));
        }
        self.log
            .lock()
            .unwrap()
            .push(format!("dispatch {}", self.name));
        Ok(())
    }
    fn finish(self: Box<Self>, outcome: Outcome) {
        self.log
            .lock()
            .unwrap()
            .push(format!("finish {} {outcome:?}", self.name));
    }
    fn cut(self: Box<Self>, reason: &str) {
        self.log
            .lock()
            .unwrap()
            .push(format!("cut {} {reason}", self.name));
    }
}

impl Governor for Scripted {
    fn authenticate(&self, _bearer: Option<&str>) -> Result<Caller, Refusal> {
        Ok(Caller::opaque("w", Role::Agent, "t"))
    }
    fn admit<'a>(
        &'a self,
        _caller: &'a Caller,
        call: &'a Call,
    ) -> BoxFuture<'a, Result<Box<dyn Admission>, Refusal>> {
        let name = call.tool.clone().unwrap_or_else(|| call.method.clone());
        self.log
            .lock()
            .unwrap()
            .push(format!("admit {name} read_only={}", call.read_only));
        let log = self.log.clone();
        Box::pin(async move {
            if name.starts_with("refuse-") {
                return Err(Refusal::new(RefusalCode::ToolNotAllowed, "not this one"));
            }
            Ok(Box::new(Ticket { name, log }) as Box<dyn Admission>)
        })
    }
    fn cut(&self, _caller: &Caller) -> BoxFuture<'static, Refusal> {
        Box::pin(std::future::pending())
    }
}

fn call(id: u64, tool: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool}})
}

#[tokio::test]
async fn batches_are_governed_member_by_member() {
    let governor = Scripted::default();
    let catalog = Arc::new(ToolCatalog::default());
    catalog.learn("s", &json!({"tools": [{"name": "read", "annotations": {"readOnlyHint": true}}, {"name": "write"}]}));
    let caller = governor.authenticate(None).unwrap();
    let frame = json!([
        call(1, "read"),
        call(2, "refuse-me"),
        {"jsonrpc": "2.0", "method": "refuse-note"},
        call(3, "late-one"),
        call(4, "write"),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]);
    let frame = parse(frame.to_string().as_bytes()).unwrap();
    let mut governed = govern_frame(&governor, &catalog, "s", &caller, frame).await;
    let dispatch = governed.dispatch(&caller);

    let forwarded: Vec<String> = dispatch
        .members
        .iter()
        .map(|m| String::from_utf8(m.frame().to_bytes()).unwrap())
        .collect();
    assert_eq!(
        forwarded,
        [
            r#"{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"name":"read"}}"#,
            r#"{"id":4,"jsonrpc":"2.0","method":"tools/call","params":{"name":"write"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        ]
    );
    let answered: Vec<(Value, Value)> = governed
        .local
        .iter()
        .map(|m| {
            let v = m.to_value();
            (v["id"].clone(), v["error"]["data"]["code"].clone())
        })
        .collect();
    assert_eq!(
        answered,
        vec![
            (json!(2), json!("tool_not_allowed")),
            (json!(3), json!("break_glass_contained"))
        ]
    );
    assert!(governed
        .local
        .iter()
        .all(|m| m.to_value()["error"]["code"] == -32001));
    assert_eq!(
        governed.refusals.len(),
        3,
        "the refused notification counts too"
    );

    let mut tracker = Tracker::new(catalog.clone(), "s");
    for mut member in dispatch.members {
        tracker.track(member.take_pending());
    }
    let reply = parse(br#"[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":4,"result":{"isError":true}}]"#).unwrap();
    tracker.observe_frame(&reply);
    assert!(tracker.is_done());
    let log = governor.log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            "admit read read_only=true",
            "admit refuse-me read_only=false",
            "admit refuse-note read_only=false",
            "admit late-one read_only=false",
            "admit write read_only=false",
            "admit notifications/initialized read_only=false",
            "dispatch read",
            "dispatch write",
            "dispatch notifications/initialized",
            "finish notifications/initialized Committed",
            "finish read Committed",
            "finish write Failed",
        ]
    );
}

#[tokio::test]
async fn what_is_still_open_when_an_exchange_ends_is_left_in_doubt_and_a_cut_is_a_cut() {
    let governor = Scripted::default();
    let catalog = Arc::new(ToolCatalog::default());
    let caller = governor.authenticate(None).unwrap();
    for (ending, expected) in [("drop", "finish a InDoubt"), ("cut", "cut a stop")] {
        governor.log.lock().unwrap().clear();
        let frame = Incoming::Single(Message::from_value(call(9, "a")).unwrap());
        let mut governed = govern_frame(&governor, &catalog, "s", &caller, frame).await;
        let mut tracker = Tracker::new(catalog.clone(), "s");
        for mut member in governed.dispatch(&caller).members {
            tracker.track(member.take_pending());
        }
        assert_eq!(tracker.open_ids(), vec![json!(9)]);
        match ending {
            "cut" => tracker.cut("stop"),
            _ => drop(tracker),
        }
        let log = governor.log.lock().unwrap().clone();
        assert!(
            log.last().unwrap().starts_with(expected),
            "{ending}: {log:?}"
        );
    }
}

/// `params` are forwarded as the agent wrote them, so a `tools/call` naming its tool twice (the
/// judge would read one name, an upstream might run the other) is refused before admission and
/// nothing of it is forwarded; a tool named once, however it is spelled, is judged by that name.
#[tokio::test]
async fn a_tool_named_twice_is_refused_and_never_forwarded() {
    let governor = Scripted::default();
    let catalog = Arc::new(ToolCatalog::default());
    let caller = governor.authenticate(None).unwrap();
    let frame = parse(
        br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","n\u0061me":"write"}},
             {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{ "n\u0061me" : "read" }}]"#,
    )
    .unwrap();
    let mut governed = govern_frame(&governor, &catalog, "s", &caller, frame).await;
    let dispatch = governed.dispatch(&caller);
    let forwarded: Vec<String> = dispatch
        .members
        .iter()
        .map(|m| String::from_utf8(m.frame().to_bytes()).unwrap())
        .collect();
    assert_eq!(
        forwarded,
        [r#"{"id":2,"jsonrpc":"2.0","method":"tools/call","params":{"n\u0061me":"read"}}"#]
    );
    let refused = governed.local[0].to_value();
    assert_eq!(refused["id"], 1);
    assert_eq!(refused["error"]["data"]["code"], "bad_request");
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap()
        .contains("names its tool 2 times"));
    assert_eq!(
        governor.log.lock().unwrap().clone(),
        ["admit read read_only=false", "dispatch read"],
        "the ambiguous call never reached admission"
    );
}
