//! The writers of every WAL record against the golden lines in
//! `crates/stopline-core/tests/golden/` (docs/reference.md, "Record shapes"): both backends
//! drive every kind once, and each line they write has exactly the fields, in the same JSON
//! types, of the golden line of its kind. The goldens were written by these writers before the
//! records had Rust types; `STOPLINE_WRITE_GOLDEN=1` writes them again from what runs here.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod cluster;

use cluster::{Cluster, Raw};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use stopline_core::ops::{Blocks, OpKind, Operation};
use stopline_core::{Level, Scope};
use stopline_etcd::{EtcdPlane, EtcdTarget};
use stopline_store::ops::{Census, CensusEntry};
use stopline_store::OwnerPlane;
use stopline_store::{EngageRequest, Store};

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../stopline-core/tests/golden")
}

fn request(scope: &str, level: Level) -> EngageRequest {
    EngageRequest::console(
        Scope::parse_stored(scope).unwrap(),
        level,
        "operator",
        "golden",
    )
}

/// The first line of each kind (a deferred `latch_engaged` under its own name).
fn by_kind(lines: Vec<Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for line in lines {
        let body: Map<String, Value> = serde_json::from_slice(&line).unwrap();
        let mut kind = body["kind"].as_str().unwrap().to_string();
        if body.get("deferred") == Some(&Value::Bool(true)) {
            kind.push_str("+deferred");
        }
        out.entry(kind).or_insert(line);
    }
    out
}

/// Each field's name and JSON type, recursively for objects.
fn shape(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), shape(v))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().take(1).map(shape).collect()),
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(_) => "number".into(),
        Value::String(_) => "string".into(),
    }
}

fn check_or_write(name: &str, lines: BTreeMap<String, Vec<u8>>) {
    let path = golden_dir().join(name);
    if std::env::var_os("STOPLINE_WRITE_GOLDEN").is_some() {
        let mut bytes = Vec::new();
        for line in lines.values() {
            bytes.extend_from_slice(line);
            bytes.push(b'\n');
        }
        std::fs::write(&path, bytes).unwrap();
        return;
    }
    let golden = std::fs::read(&path).unwrap();
    let golden = by_kind(
        golden
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect(),
    );
    assert_eq!(
        golden.keys().collect::<Vec<_>>(),
        lines.keys().collect::<Vec<_>>(),
        "{name}: the kinds written"
    );
    for (kind, line) in &lines {
        let mut now: Value = serde_json::from_slice(line).unwrap();
        if kind == "epoch_advance" {
            bounded_tail_fields(name, &mut now);
        }
        let then: Value = serde_json::from_slice(&golden[kind]).unwrap();
        assert_eq!(shape(&now), shape(&then), "{name}: {kind}");
    }
}

/// The fields the bounded tail added to `epoch_advance` (docs/reference.md §5, "Bounded tail";
/// the goldens were written before them and must keep their bytes): `scope_since`, an object of
/// whole seconds with the advanced scope among its keys, and `floor`, a whole number when present
/// (absent while nothing was folded). Checked here, then taken out for the golden comparison.
fn bounded_tail_fields(name: &str, line: &mut Value) {
    let scope = line["scope"].as_str().unwrap().to_string();
    let object = line.as_object_mut().unwrap();
    let since = object.remove("scope_since");
    assert!(
        since
            .as_ref()
            .and_then(Value::as_object)
            .is_some_and(|m| m.contains_key(&scope) && m.values().all(Value::is_i64)),
        "{name}: epoch_advance scope_since {since:?}"
    );
    if let Some(floor) = object.remove("floor") {
        assert!(floor.is_u64(), "{name}: epoch_advance floor {floor}");
    }
}

/// A census with one operation carried forward and one registry that could not be read.
fn census() -> Census {
    let operation = Operation {
        op: "op_1".into(),
        target: "file:/project/a.txt".into(),
        kind: OpKind::File,
        agent: Some("a".into()),
        root: None,
        blocks: Blocks::Agent("a".into()),
        request_id: Some("req_1".into()),
        prepared_ms: 1_700_000_000_000,
        dispatched: true,
        dispatched_ms: Some(1_700_000_000_010),
        in_doubt: true,
        outcome: None,
        writer: "gateway-4200001-1".into(),
        doubt: None,
        task: None,
    };
    Census {
        file: vec![CensusEntry {
            operation,
            in_flight: false,
            blocking: true,
            doubt: None,
        }],
        errors: vec!["ops/gateway-4200002-1.jsonl: unreadable".into()],
        ..Census::default()
    }
}

/// Every kind the local directory writes: engage (emergency, halt), a deferred record,
/// disengage, drain, recovery plan and apply, repair of a torn tail.
#[test]
fn the_local_directory_writes_every_kind_in_its_golden_shape() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("home"));
    store.ensure_home().unwrap();
    let other = Store::open(dir.path().join("other"));
    other.ensure_home().unwrap();

    store.engage(&request("agent:a", Level::Emergency)).unwrap();
    store.engage(&request("agent:b", Level::HaltAll)).unwrap();
    store
        .disengage(
            &Scope::parse_stored("agent:b").unwrap(),
            "lifted",
            "operator",
        )
        .unwrap();
    // A latch published without its record (another home's file, copied in): recorded deferred.
    let planted = other.engage(&request("machine", Level::HaltAll)).unwrap();
    let file = planted.latch.file_name();
    std::fs::copy(other.layout().latch(&file), store.layout().latch(&file)).unwrap();
    OwnerPlane::drain(&store, 60, "finish queued work", "operator").unwrap();
    let plan = OwnerPlane::recover_plan(
        &store,
        &Scope::parse_stored("agent:a").unwrap(),
        "all clear",
        "operator",
        &census(),
    )
    .unwrap();
    OwnerPlane::recover_apply(&store, &plan.plan, "operator").unwrap();
    // A journal of a gone writer with a torn line: the repair cuts it out and says so.
    let ops = store.layout().ops();
    std::fs::create_dir_all(&ops).unwrap();
    std::fs::write(ops.join("gateway-4200001-1.jsonl"), b"{\"to\n").unwrap();
    let wal = store.layout().wal();
    let mut bytes = std::fs::read(&wal).unwrap();
    bytes.extend_from_slice(b"{\"torn");
    std::fs::write(&wal, &bytes).unwrap();
    let repaired = OwnerPlane::repair(&store, "torn tail", "operator", 0).unwrap();
    assert!(repaired.wal_truncated_bytes > 0, "{repaired:?}");

    let lines = std::fs::read(&wal).unwrap();
    let lines = lines
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    check_or_write("wal-local.jsonl", by_kind(lines));
}

/// Every kind the etcd plane writes: engage, disengage, drain, recovery plan and apply, the
/// repair of an epoch snapshot knocked back.
#[test]
fn the_etcd_plane_writes_every_kind_in_its_golden_shape() {
    let etcd = Cluster::start(1);
    let url = etcd.url("/golden");
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("home"));
    store.ensure_home().unwrap();
    let plane = EtcdPlane::new(EtcdTarget::parse(&url).unwrap(), store).unwrap();
    let raw = Raw::new(&url);

    plane.engage(&request("machine", Level::Emergency)).unwrap();
    plane.engage(&request("agent:b", Level::HaltAll)).unwrap();
    plane
        .disengage(
            &Scope::parse_stored("agent:b").unwrap(),
            "lifted",
            "operator",
        )
        .unwrap();
    plane.drain(60, "finish queued work", "operator").unwrap();
    let plan = plane
        .recover_plan(&Scope::Machine, "all clear", "operator", &census())
        .unwrap();
    plane.recover_apply(&plan.plan, "operator").unwrap();
    raw.put(
        "/golden/epoch.json",
        br#"{"seq":1,"scopes":{"machine":1},"wal_seq":2}"#,
    );
    plane.repair("rebuild", "operator", 2).unwrap();

    let lines = raw
        .list("/golden/breakglass.wal/")
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    check_or_write("wal-etcd.jsonl", by_kind(lines));
}
