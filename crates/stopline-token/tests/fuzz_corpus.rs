//! Replays the token fuzz corpus (`fuzz/corpus/token/`) on the stable toolchain, with the same
//! checks as `fuzz/fuzz_targets/token.rs`: no input may panic the parser, `decode_unverified`
//! and `verify` must agree, and accepted claims must re-issue to a token that verifies to the
//! same claims. Named seeds are also held to the outcome their name states.
//!
//! The named seeds are generated here; `STOPLINE_BLESS=1` rewrites them after a deliberate
//! format change. Nothing else in this test writes to the source tree.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::Signer;
use std::path::PathBuf;
use stopline_core::budget::BudgetKind;
use stopline_core::{Name, Role};
use stopline_token::keys::signing_key_from_seed;
use stopline_token::{
    decode_unverified, issue, verify, Claims, SigningKey, TokenError, CLAIMS_VERSION,
};

/// The key the `valid-` seeds are signed with (shared with the fuzz target).
const FUZZ_KEY_SEED: &[u8; 32] = b"stopline-fuzz-token-key-seed-32b";
/// The time the seeds are judged at (shared with the fuzz target).
const NOW: i64 = 1_800_000_000;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/token")
}

fn fuzz_key() -> SigningKey {
    signing_key_from_seed(FUZZ_KEY_SEED).unwrap()
}

/// The fuzz target's checks; returns what `verify` said.
fn exercise(data: &[u8]) -> Result<Claims, TokenError> {
    let text = String::from_utf8_lossy(data);
    let key = fuzz_key();
    let public = key.verifying_key();
    let unverified = decode_unverified(&text);
    let verified = verify(&public, &text, NOW);
    match (&unverified, &verified) {
        (Ok(decoded), Ok(claims)) => assert_eq!(decoded, claims),
        (Err(_), Ok(_)) => panic!("verify accepted what decode_unverified refused"),
        _ => {}
    }
    if let Ok(claims) = unverified {
        if let Ok(token) = issue(&key, &claims) {
            assert_eq!(verify(&public, &token, claims.iat), Ok(claims));
        }
    }
    verified
}

fn name(text: &str) -> Name {
    Name::parse(text).unwrap()
}

fn root_claims() -> Claims {
    Claims {
        v: CLAIMS_VERSION,
        jti: "00000000000000000000000000000001".into(),
        chain: vec![name("root-agent")],
        project: None,
        run: None,
        role: Role::Agent,
        epoch: 3,
        iat: 1_700_000_000,
        exp: 4_102_444_800,
        budgets: Default::default(),
        parent: None,
        labels: Default::default(),
        lineage: Vec::new(),
    }
}

/// The raw JSON payload signed as `issue` would sign it, valid claims or not.
fn signed_raw(key: &SigningKey, json: &str) -> String {
    let signed = format!("stl1.{}", URL_SAFE_NO_PAD.encode(json));
    let signature = URL_SAFE_NO_PAD.encode(key.sign(signed.as_bytes()).to_bytes());
    format!("{signed}.{signature}")
}

/// Every named seed: file name and contents. Deterministic (ed25519 signing is).
fn seeds() -> Vec<(&'static str, String)> {
    let key = fuzz_key();
    let root = root_claims();
    let mut delegated = root_claims();
    delegated.jti = "00000000000000000000000000000002".into();
    delegated.chain.push(name("sub.agent_1"));
    delegated.parent = Some(root.jti.clone());
    delegated.project = Some("/srv/project".into());
    delegated.run = Some(name("eval-1"));
    delegated.budgets = [(BudgetKind::ToolCalls, 4.0), (BudgetKind::SpendUsd, 0.25)].into();
    let mut operator = root_claims();
    operator.role = Role::Operator;
    let mut expired = root_claims();
    expired.exp = 1_700_000_100;
    let stranger = signing_key_from_seed(&[0x42; 32]).unwrap();
    let valid = issue(&key, &root).unwrap();
    let json = serde_json::to_string(&root).unwrap();
    vec![
        ("valid-root", valid.clone()),
        ("valid-delegated", issue(&key, &delegated).unwrap()),
        ("valid-operator", issue(&key, &operator).unwrap()),
        ("expired-root", issue(&key, &expired).unwrap()),
        (
            "bad_signature-foreign-key",
            issue(&stranger, &root).unwrap(),
        ),
        ("malformed-empty", String::new()),
        (
            "malformed-two-parts",
            valid.rsplit_once('.').unwrap().0.to_string(),
        ),
        ("malformed-wrong-prefix", valid.replacen("stl1", "stl2", 1)),
        ("malformed-trailing-newline", format!("{valid}\n")),
        ("malformed-padded", format!("{valid}==")),
        ("malformed-not-json", signed_raw(&key, "not json")),
        (
            "malformed-unknown-field",
            signed_raw(&key, &json.replace("\"v\":1", "\"v\":1,\"x\":0")),
        ),
        (
            "malformed-version-2",
            signed_raw(&key, &json.replace("\"v\":1", "\"v\":2")),
        ),
        (
            "malformed-empty-chain",
            signed_raw(&key, &json.replace("[\"root-agent\"]", "[]")),
        ),
        (
            "malformed-dotdot-project",
            signed_raw(
                &key,
                &json.replace("\"epoch\"", "\"project\":\"/srv/../etc\",\"epoch\""),
            ),
        ),
        (
            "malformed-oversize",
            format!("stl1.{}.AA", "e30".repeat(3000)),
        ),
    ]
}

/// Under `STOPLINE_BLESS`, write the named seeds, once per test process, before any test
/// reads the corpus.
fn bless_once() {
    static BLESSED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BLESSED.get_or_init(|| {
        if std::env::var_os("STOPLINE_BLESS").is_some() {
            for (file, contents) in seeds() {
                std::fs::write(corpus_dir().join(file), contents).unwrap();
            }
        }
    });
}

#[test]
fn named_seeds_are_current() {
    bless_once();
    for (file, contents) in seeds() {
        let path = corpus_dir().join(file);
        let on_disk = std::fs::read(&path).unwrap_or_default();
        assert!(
            on_disk == contents.as_bytes(),
            "{} is stale; rerun with STOPLINE_BLESS=1",
            path.display()
        );
    }
}

#[test]
fn every_corpus_file_replays_without_panic_and_named_ones_as_named() {
    bless_once();
    let entries = std::fs::read_dir(corpus_dir()).expect("fuzz/corpus/token exists");
    let mut named = 0;
    for entry in entries {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = exercise(&data);
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let expected = match file.split('-').next() {
            Some("valid") => None,
            Some(code @ ("expired" | "bad_signature" | "malformed")) => Some(code),
            _ => continue,
        };
        named += 1;
        let got = outcome.as_ref().err().map(TokenError::verify_code);
        assert_eq!(got, expected, "{file}: {outcome:?}");
    }
    assert!(named >= seeds().len(), "only {named} named seeds found");
}
