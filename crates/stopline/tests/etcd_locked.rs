//! The fleet plane locked (docs/reference.md §10), against a real etcd on loopback through the real binary.
//!
//! - TLS and auth on (`etcds://`, client certificates, `etcd roles --apply`): an attacker without
//!   credentials cannot delete the latch, WAL and epoch keys nor write `keys/verify.pub`, and a
//!   gateway-role user cannot delete a latch — etcd itself refuses — while the operator and
//!   gateway users work as intended.
//! - Auth off (the operator's choice): a wipe of the latch, WAL and epoch keys makes `check` and
//!   a gateway refuse with `control_state_corrupt` (the high-water marks), and a swapped
//!   `keys/verify.pub` makes an attacker-minted token `control_state_corrupt` (the pinned key).
//! - Credentials never from the URL, and a password file others can read is refused.
//!
//! Certificates are made with the `openssl` CLI (Debian's); etcd is `/usr/bin/etcd`.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

#[path = "../../stopline-etcd/tests/cluster/mod.rs"]
mod cluster;
mod etcd_support;
mod gw;
mod util;

use etcd_support::secure::SecureEtcd;
use etcd_support::Host;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;
use stopline_etcd::EtcdClient;
use util::Home;

fn put(client: &EtcdClient, key: &str, value: &str) -> Result<(), String> {
    let (key, value) = (key.to_string(), value.to_string());
    client
        .call("test put", move |mut c| {
            let (key, value) = (key.clone(), value.clone());
            async move { c.put(key, value, None).await.map(|_| ()) }
        })
        .map_err(|e| e.to_string())
}

fn delete_prefix(client: &EtcdClient, prefix: &str) -> Result<i64, String> {
    let prefix = prefix.to_string();
    client
        .call("test delete", move |mut c| {
            let prefix = prefix.clone();
            async move {
                let options = stopline_etcd::etcd_client::DeleteOptions::new().with_prefix();
                c.delete(prefix, Some(options)).await.map(|r| r.deleted())
            }
        })
        .map_err(|e| e.to_string())
}

fn count(client: &EtcdClient, prefix: &str) -> usize {
    let prefix = prefix.to_string();
    client
        .call("test count", move |mut c| {
            let prefix = prefix.clone();
            async move {
                let options = stopline_etcd::etcd_client::GetOptions::new().with_prefix();
                c.get(prefix, Some(options)).await.map(|r| r.kvs().len())
            }
        })
        .expect("a read as root")
}

fn check_agent(host: &Host, agent: &str) -> (i32, serde_json::Value) {
    let run = host.run(&["check", "--class", "noncritical", "--agent", agent]);
    (run.code, run.json())
}

#[test]
fn a_locked_etcd_refuses_the_wipe_the_key_swap_and_a_gateway_deleting_a_latch() {
    let etcd = SecureEtcd::start();
    let url = etcd.url("/sl");
    // The set-up, applied through the client as the owner (etcd is open until `auth enable`).
    let admin = Host::new(&url, &etcd.config(None));
    let files = [
        ("root", "root-pw-1"),
        ("stopline-operator", "operator-pw-2"),
        ("stopline-gateway", "gateway-pw-3"),
    ]
    .map(|(user, pw)| etcd.password_file(user, pw).display().to_string());
    let applied = admin.run(&[
        "etcd",
        "roles",
        "--prefix",
        "/sl",
        "--apply",
        "--root-password-file",
        &files[0],
        "--operator-password-file",
        &files[1],
        "--gateway-password-file",
        &files[2],
    ]);
    applied.assert_ok();
    assert_eq!(applied.json()["applied"], true, "{}", applied.stdout);
    for pw in ["root-pw-1", "operator-pw-2", "gateway-pw-3"] {
        assert!(!applied.stdout.contains(pw) && !applied.stderr.contains(pw));
    }

    // The operator publishes to etcd: a stop and the verification key.
    let operator = Host::new(
        &url,
        &format!(
            "ack_timeout_ms = 5000\n{}",
            etcd.config(Some(("stopline-operator", "operator-pw-2")))
        ),
    );
    let receipt = operator.engage("agent:evil", "emergency");
    assert!(
        !receipt.to_string().contains("distributed_publish_failed"),
        "the operator's engage reached etcd: {receipt}"
    );
    let worker = operator.token("worker", &[]);
    let root = etcd.client(Some(("root", "root-pw-1")));
    assert_eq!(count(&root, "/sl/latches/"), 1);
    assert_eq!(count(&root, "/sl/keys/verify.pub"), 1);

    // A gateway-role host reads the plane: the stop holds there.
    let gateway = Host::new(
        &url,
        &etcd.config(Some(("stopline-gateway", "gateway-pw-3"))),
    );
    assert_eq!(
        check_agent(&gateway, "evil").0,
        4,
        "the stop is seen by the gateway user"
    );
    let run = gateway.run(&["check", "--class", "noncritical", "--token", &worker]);
    assert_eq!(
        run.code, 0,
        "an agent the stop does not cover works: {}",
        run.stdout
    );

    // An attacker with a client certificate but no etcd user, and a gateway-role user: etcd
    // refuses the wipe and the key swap.
    let nobody = etcd.client(None);
    let gateway_user = etcd.client(Some(("stopline-gateway", "gateway-pw-3")));
    for (who, client) in [("no user", &nobody), ("gateway user", &gateway_user)] {
        for range in ["/sl/latches/", "/sl/breakglass.wal/", "/sl/epoch.json"] {
            assert!(
                delete_prefix(client, range).is_err(),
                "{who} deleted {range}"
            );
        }
        assert!(
            put(client, "/sl/keys/verify.pub", &"ab".repeat(32)).is_err(),
            "{who} wrote keys/verify.pub"
        );
    }
    // The gateway user may write what a gateway writes.
    put(&gateway_user, "/sl/servers/test-gw.json", "{}").expect("a gateway registers");
    assert_eq!(count(&root, "/sl/latches/"), 1, "the latch stands");
    assert_eq!(check_agent(&operator, "evil").0, 4);

    // A gateway under the gateway user registers on its lease, verifies the operator's tokens
    // and acknowledges the operator's stop.
    let serving = gateway.serve();
    assert!(
        etcd_support::wait_until(Duration::from_secs(10), || serving.check(&worker).0
            == "allow")
        .is_some(),
        "{:?}",
        serving.check(&worker)
    );
    let id = serving.id();
    assert!(
        etcd_support::wait_until(Duration::from_secs(10), || count(
            &root,
            &format!("/sl/servers/{id}.json")
        ) == 1)
        .is_some(),
        "the gateway registered under the gateway user"
    );
    let receipt = operator.engage("agent:worker", "halt-all");
    assert_eq!(
        etcd_support::ids(&receipt["acknowledged_by"]),
        vec![id],
        "{receipt}"
    );
    assert_eq!(
        serving.check(&worker),
        ("block".into(), "break_glass_contained".into())
    );
}

#[test]
fn an_open_etcd_wiped_fails_closed_until_the_owner_refounds_it() {
    let etcd = cluster::Cluster::start(1);
    let url = etcd.url("/open");
    let owner = Host::new(&url, "");
    owner.run(&["init"]).assert_ok();
    let revoked = owner.token("worker", &[]);
    let check_token = |host: &Host, token: &str| {
        let run = host.run(&["check", "--class", "noncritical", "--token", token]);
        (run.code, run.json())
    };
    assert_eq!(check_token(&owner, &revoked).0, 0);
    // A second host (a gateway's) that has read the plane.
    let other = Host::new(&url, "");
    let pinned = other.run(&["init"]);
    pinned.assert_ok();
    assert!(
        pinned.json()["verify_key_sha256"].is_string(),
        "{}",
        pinned.stdout
    );
    let gateway = other.serve();
    owner.engage("agent:worker", "emergency");
    let (code, blocked) = check_token(&owner, &revoked);
    assert_eq!(code, 4, "{blocked}");
    let worker = owner.token("worker-2", &[]);
    assert!(
        etcd_support::wait_until(Duration::from_secs(10), || gateway.check(&worker).0
            == "allow")
        .is_some()
    );

    // The wipe: latch, WAL and epoch keys deleted.
    let raw = cluster::Raw::new(&url);
    for (key, _) in raw
        .list("/open/latches/")
        .into_iter()
        .chain(raw.list("/open/breakglass.wal/"))
        .chain(raw.list("/open/epoch.json"))
    {
        raw.delete(&key);
    }
    let (code, receipt) = check_token(&owner, &revoked);
    assert_eq!(
        (code, receipt["code"].as_str()),
        (4, Some("control_state_corrupt")),
        "a wiped plane is a stop, never an all-clear: {receipt}"
    );
    assert!(
        etcd_support::wait_until(Duration::from_secs(10), || {
            gateway.check(&worker) == ("block".into(), "control_state_corrupt".into())
        })
        .is_some(),
        "the gateway refuses after the wipe: {:?}",
        gateway.check(&worker)
    );

    // The owner's way out: repair at the console re-founds the plane past the marks, and the
    // token revoked before the wipe stays revoked.
    let repair = owner.home.run_on_pty(
        &[
            "--control",
            &url,
            "recover",
            "repair",
            "--reason",
            "plane wiped",
            "--by",
            "operator",
        ],
        &[],
    );
    repair.assert_ok();
    assert_eq!(repair.json()["plane_refounded"], true, "{}", repair.stdout);
    let (code, receipt) = check_token(&owner, &revoked);
    assert_eq!(code, 4, "{receipt}");
    assert_ne!(receipt["code"], "control_state_corrupt", "{receipt}");
    assert_eq!(
        check_agent(&owner, "bystander").0,
        0,
        "the owner's host reopens"
    );
}

#[test]
fn an_open_etcd_given_another_key_refuses_the_attackers_tokens() {
    let etcd = cluster::Cluster::start(1);
    let url = etcd.url("/swap");
    let owner = Host::new(&url, "");
    owner.run(&["init"]).assert_ok();
    let own = owner.token("worker", &[]);
    let other = Host::new(&url, "");
    other.run(&["init"]).assert_ok();
    let check_token = |host: &Host, token: &str| {
        let run = host.run(&["check", "--class", "noncritical", "--token", token]);
        (run.code, run.json())
    };
    assert_eq!(check_token(&other, &own).0, 0);

    // Another key's holder copies its public key into keys/verify.pub and mints, as operator.
    let raw = cluster::Raw::new(&url);
    let attacker = Host::new(&etcd.url("/attacker"), "");
    let forged = attacker.token("worker", &["--role", "operator"]);
    let (_, attacker_key) = raw.list("/attacker/keys/verify.pub").remove(0);
    raw.put("/swap/keys/verify.pub", &attacker_key);
    let (code, receipt) = check_token(&owner, &forged);
    let refused = receipt["code"]
        .as_str()
        .or(receipt["error"]["code"].as_str())
        .unwrap_or_default()
        .to_string();
    assert_ne!(code, 0, "{receipt}");
    assert_eq!(
        refused, "control_state_corrupt",
        "a swapped key is never taken: {receipt}"
    );
    // A gateway started after the swap, on a host that pinned before it, does not start on
    // the swapped key (it would verify every token with it).
    let listen = format!("127.0.0.1:{}", gw::free_port());
    let serve = util::run_or_hang(
        other
            .home
            .command(&["--json", "--control", &url, "serve", "--listen", &listen]),
        "serve on a swapped key",
    );
    assert_ne!(serve.code, 0, "{}", serve.stdout);
    assert_eq!(
        serve.code_str(),
        "control_state_corrupt",
        "{}",
        serve.stdout
    );
    assert_ne!(check_token(&other, &forged).0, 0);

    // The owner restores its key at the console; its tokens work again, the forged never.
    let rotated = owner.home.run_on_pty(
        &[
            "--control",
            &url,
            "recover",
            "rotate-key",
            "--reason",
            "key swapped",
            "--by",
            "operator",
        ],
        &[],
    );
    rotated.assert_ok();
    assert_eq!(check_token(&owner, &own).0, 0);
    assert_ne!(check_token(&owner, &forged).0, 0);
    assert_eq!(
        check_token(&other, &own).0,
        0,
        "the other host's pin is the owner's key"
    );
}

#[test]
fn credentials_come_only_from_a_private_file() {
    let home = Home::new();
    std::fs::create_dir_all(home.path()).unwrap();
    let run = home.run(&[
        "--control",
        "etcd://alice:topsecretpw@127.0.0.1:2379",
        "status",
    ]);
    assert_eq!(run.code_str(), "config_invalid", "{}", run.stdout);
    assert!(!run.stdout.contains("topsecretpw") && !run.stderr.contains("topsecretpw"));

    let password = home.dir.path().join("pw");
    std::fs::write(&password, "hunter22\n").unwrap();
    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(
        home.file("config.toml"),
        format!("[etcd]\nuser = \"stopline-operator\"\npassword_file = {password:?}\n"),
    )
    .unwrap();
    let run = home.run(&["--control", "etcd://127.0.0.1:2379", "status"]);
    assert_eq!(run.code_str(), "config_invalid", "{}", run.stdout);
    assert!(run.stdout.contains("0644"), "{}", run.stdout);
    assert!(!run.stdout.contains("hunter22") && !run.stderr.contains("hunter22"));
}

#[test]
fn etcd_roles_prints_the_etcdctl_set_up() {
    let home = Home::new();
    let run = home.run(&["etcd", "roles", "--prefix", "/x"]);
    run.assert_ok();
    let commands: Vec<String> = run.json()["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    for expected in [
        "etcdctl role grant-permission stopline-operator --prefix=true readwrite /x/",
        "etcdctl role grant-permission stopline-gateway --prefix=true read /x/",
        "etcdctl role grant-permission stopline-gateway --prefix=true readwrite /x/servers/",
        "etcdctl role grant-permission stopline-gateway --prefix=true readwrite /x/acks/",
        "etcdctl user grant-role root root",
        "etcdctl auth enable",
    ] {
        assert!(
            commands.iter().any(|c| c == expected),
            "{expected}: {commands:?}"
        );
    }
    assert_eq!(commands.last().unwrap(), "etcdctl auth enable");
    assert!(
        !commands.iter().any(|c| c.contains("agent")),
        "{commands:?}"
    );
    let text = home
        .command(&["etcd", "roles", "--prefix", "/x"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("etcdctl auth enable"));
}

/// The high-water mark is a durable step: at every failpoint of raising it a crash leaves the
/// trust file old or new (never torn) and the crashed `check` decided nothing, and an I/O error
/// there closes the gate (`control_io`) rather than act on a view it could not record. Needs the
/// binary built with `--features stopline/failpoints` (else the trace is empty and this fails).
#[test]
fn raising_the_high_water_mark_is_durable_before_the_view_is_acted_on() {
    use std::os::unix::process::ExitStatusExt;
    let etcd = cluster::Cluster::start(1);
    let url = etcd.url("/marks");
    let owner = Host::new(&url, "");
    owner.engage("run:r1", "halt-all");
    let probe = [
        "--control",
        url.as_str(),
        "check",
        "--class",
        "noncritical",
        "--agent",
        "probe",
    ];
    // The failpoints of a first read on a fresh host, which raises its marks.
    let fresh = Host::new(&url, "");
    let trace = fresh.home.dir.path().join("trace");
    let run = fresh.home.run_env(
        &probe,
        &[("STOPLINE_FAILPOINT_TRACE", trace.to_str().unwrap())],
    );
    assert_eq!(run.code, 0, "{}", run.stdout);
    let raised: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fresh.home.file("keys/etcd-trust.json")).unwrap())
            .unwrap();
    assert!(
        raised["/marks"]["wal_seq"].as_u64().unwrap() >= 1,
        "{raised}"
    );
    let names: Vec<String> = std::fs::read_to_string(&trace)
        .unwrap_or_default()
        .lines()
        .filter(|n| n.starts_with("etcd.trust"))
        .map(String::from)
        .collect();
    assert!(
        names.len() >= 3,
        "the mark's write, rename and directory sync are failpoints (build with --features stopline/failpoints): {names:?}"
    );
    for name in &names {
        let host = Host::new(&url, "");
        let crashed = host
            .home
            .command(&probe)
            .env("STOPLINE_FAILPOINTS", format!("{name}=crash"))
            .output()
            .unwrap();
        assert_eq!(
            crashed.status.signal(),
            Some(6),
            "{name}: dies at its failpoint"
        );
        assert!(
            !String::from_utf8_lossy(&crashed.stdout).contains("allow"),
            "{name}: nothing was decided before the mark was durable"
        );
        if let Ok(bytes) = std::fs::read(host.home.file("keys/etcd-trust.json")) {
            let trust: serde_json::Value = serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("{name}: the trust file is torn: {e}"));
            assert!(trust["/marks"].is_object(), "{name}: {trust}");
        }
        // Afterwards the host reads, raises and decides normally.
        let again = host.run(&["check", "--class", "noncritical", "--agent", "probe"]);
        assert_eq!(again.code, 0, "{name}: {}", again.stdout);
        // An I/O error there, on a host with a mark still to raise.
        let host = Host::new(&url, "");
        let errored = host
            .home
            .run_env(&probe, &[("STOPLINE_FAILPOINTS", &format!("{name}=error"))]);
        let text = errored.stdout.clone();
        assert_eq!(errored.code, 4, "{name}: {text}");
        assert!(
            text.contains("control_io"),
            "{name}: an unrecorded mark closes the gate: {text}"
        );
        // Afterwards the host reads, raises and decides normally.
        let again = host.run(&["check", "--class", "noncritical", "--agent", "probe"]);
        assert_eq!(again.code, 0, "{name}: {}", again.stdout);
    }
}
