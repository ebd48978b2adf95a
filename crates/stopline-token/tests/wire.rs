//! The wire format from outside: tokens round-trip, and every alteration, foreign key, expiry
//! and structural violation is refused with the right code. Tests only; no behaviour lives here.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::Signer;
use stopline_core::budget::BudgetKind;
use stopline_core::{Name, RefusalCode, Role};
use stopline_token::keys::signing_key_from_seed;
use stopline_token::{decode_unverified, issue, verify, IssueRequest, SigningKey, TokenError};

const NOW: i64 = 1_800_000_000;

fn key() -> SigningKey {
    signing_key_from_seed(&[7; 32]).unwrap()
}

fn request() -> IssueRequest {
    let mut request = IssueRequest::new(Name::parse("worker-1").unwrap(), 4, NOW);
    request.role = Role::Operator;
    request.project = Some("/srv/project".into());
    request.run = Some(Name::parse("eval-7").unwrap());
    request.budgets = [(BudgetKind::ToolCalls, 10.0), (BudgetKind::SpendUsd, 0.1)].into();
    request
}

/// A token over arbitrary JSON, signed with `key()` exactly as `issue` would sign it.
fn signed_json(json: &str) -> String {
    let signed = format!("stl1.{}", URL_SAFE_NO_PAD.encode(json));
    let signature = key().sign(signed.as_bytes());
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()))
}

/// `verify` at `NOW` gives `expected` (a `verify_code`), or succeeds when `expected` is `None`.
fn check(token: &str, expected: Option<&str>) {
    let got = verify(&key().verifying_key(), token, NOW);
    let got_code = got.as_ref().err().map(TokenError::verify_code);
    assert_eq!(got_code, expected, "token {token:?} gave {got:?}");
}

#[test]
fn minted_tokens_round_trip() {
    let minted = request().mint(&key()).unwrap();
    assert!(minted.token.starts_with("stl1."));
    let claims = verify(&key().verifying_key(), &minted.token, NOW).unwrap();
    assert_eq!(claims, minted.claims);
    assert_eq!(decode_unverified(&minted.token).unwrap(), minted.claims);
    assert_eq!(claims.exp, NOW + 3600);
    assert_eq!(claims.epoch, 4);
    assert_eq!(claims.budgets[&BudgetKind::SpendUsd], 0.1);
    let subject = claims.subject();
    assert!(subject.provable);
    assert_eq!(subject.agent().unwrap().as_str(), "worker-1");
    assert_eq!(subject.runs[0].as_str(), "eval-7");
    assert_ne!(
        request().mint(&key()).unwrap().claims.jti,
        minted.claims.jti
    );
}

#[test]
fn every_altered_character_is_refused() {
    let token = request().mint(&key()).unwrap().token;
    // One verify per position keeps this fast in debug builds; the replacement stays inside
    // the base64url alphabet, so most alterations get past decoding to the signature check.
    for (index, original) in token.char_indices() {
        let replacement = if original == 'A' { "B" } else { "A" };
        let mut altered = token.clone();
        altered.replace_range(index..index + 1, replacement);
        let error = verify(&key().verifying_key(), &altered, NOW).unwrap_err();
        assert_eq!(
            error.code(),
            RefusalCode::TokenInvalid,
            "at {index}: {error}"
        );
    }
}

#[test]
fn altered_parts_report_what_broke() {
    let token = request().mint(&key()).unwrap().token;
    let (prefix_and_payload, signature) = token.rsplit_once('.').unwrap();
    check(&token.replacen("stl1.", "stl2.", 1), Some("malformed"));
    check(&token.replacen("stl1.", "STL1.", 1), Some("malformed"));
    // A different, canonically encoded payload under the old signature.
    let other = signed_json(r#"{"v":1}"#);
    let other_payload = other.split('.').nth(1).unwrap();
    check(
        &format!("stl1.{other_payload}.{signature}"),
        Some("bad_signature"),
    );
    // A canonically encoded signature that is not the payload's.
    let foreign = URL_SAFE_NO_PAD.encode(key().sign(b"something else").to_bytes());
    check(
        &format!("{prefix_and_payload}.{foreign}"),
        Some("bad_signature"),
    );
    check(&format!("{token}.x"), Some("malformed"));
    check(&format!("{token}\n"), Some("malformed"));
    check(&format!("{token}="), Some("malformed"));
}

#[test]
fn a_foreign_key_is_refused() {
    let token = request().mint(&key()).unwrap().token;
    let stranger = signing_key_from_seed(&[8; 32]).unwrap();
    assert_eq!(
        verify(&stranger.verifying_key(), &token, NOW),
        Err(TokenError::BadSignature)
    );
    let forged = request().mint(&stranger).unwrap().token;
    check(&forged, Some("bad_signature"));
}

#[test]
fn expiry_is_exclusive_of_exp() {
    let mut short = request();
    short.ttl_s = 10;
    let token = short.mint(&key()).unwrap().token;
    let public = key().verifying_key();
    assert!(verify(&public, &token, NOW + 9).is_ok());
    let expired = verify(&public, &token, NOW + 10).unwrap_err();
    assert_eq!(expired, TokenError::Expired { exp: NOW + 10 });
    assert_eq!(expired.code(), RefusalCode::TokenExpired);
    // Still readable for diagnosis.
    assert!(decode_unverified(&token).is_ok());
}

#[test]
fn genuine_signatures_over_bad_claims_are_malformed() {
    let jti = "0123456789abcdef0123456789abcdef";
    let good = format!(
        r#"{{"v":1,"jti":"{jti}","chain":["a"],"role":"agent","epoch":0,"iat":1,"exp":2000000000}}"#
    );
    check(&signed_json(&good), None);
    let cases = [
        good.replace(r#""v":1"#, r#""v":2"#),
        good.replace(r#""epoch":0"#, r#""epoch":0,"admin":true"#),
        good.replace(r#"["a"]"#, "[]"),
        good.replace(r#"["a"]"#, r#"["A"]"#),
        good.replace(r#"["a"]"#, r#"["a","a"]"#),
        good.replace(r#""role":"agent""#, r#""role":"root""#),
        good.replace(r#""epoch":0"#, r#""epoch":-1"#),
        good.replace(r#""epoch":0,"#, ""),
        good.replace(r#""epoch":0"#, r#""epoch":0,"epoch":1"#),
        good.replace(r#""epoch":0"#, r#""epoch":0,"project":"srv""#),
        good.replace(r#""epoch":0"#, r#""epoch":0,"project":"/srv/../etc""#),
        good.replace(r#""epoch":0"#, r#""epoch":0,"budgets":{"steps":-1}"#),
        good.replace(r#""epoch":0"#, r#""epoch":0,"budgets":{"coins":1}"#),
        good.replace(r#""epoch":0"#, r#""epoch":0,"parent":"{jti}""#),
        good.replace(jti, "not-hex"),
        good.replace("2000000000", "1"),
        format!("{good}x"),
        "[]".to_string(),
        "null".to_string(),
    ];
    for json in cases {
        check(&signed_json(&json), Some("malformed"));
    }
}

#[test]
fn shapes_and_sizes_are_refused_before_decoding() {
    for text in [
        "",
        "stl1",
        "stl1.",
        "stl1..",
        "stl1.e30.",
        ".e30.AA",
        "stl1.e30=.AA",
    ] {
        check(text, Some("malformed"));
    }
    let huge = format!("stl1.{}.AA", "A".repeat(9000));
    assert!(
        matches!(decode_unverified(&huge), Err(TokenError::Malformed(why)) if why.contains("8 KiB"))
    );
}

#[test]
fn unissuable_claims_are_refused_at_mint() {
    let mut claims = request().mint(&key()).unwrap().claims;
    claims.project = Some(format!("/{}", "\u{1}".repeat(4000)).into());
    let refusal = issue(&key(), &claims).unwrap_err();
    assert_eq!(refusal.code, RefusalCode::BadRequest);
    assert!(refusal.message.contains("longer than"), "{refusal}");
    let mut zero = request();
    zero.ttl_s = 0;
    assert_eq!(zero.mint(&key()).unwrap_err().code, RefusalCode::BadRequest);
    let mut overflow = request();
    overflow.ttl_s = u64::MAX;
    overflow.max_ttl_s = u64::MAX;
    assert_eq!(
        overflow.mint(&key()).unwrap_err().code,
        RefusalCode::BadRequest
    );
    // docs/reference.md §5 "Bounded tail": a lifetime past max_ttl_s is ttl_too_long; max_ttl_s
    // itself is allowed.
    let mut long = request();
    long.ttl_s = long.max_ttl_s + 1;
    assert_eq!(long.mint(&key()).unwrap_err().code, RefusalCode::TtlTooLong);
    long.ttl_s = long.max_ttl_s;
    assert!(long.mint(&key()).is_ok());
    let mut relative = request();
    relative.project = Some("srv/project".into());
    assert_eq!(
        relative.mint(&key()).unwrap_err().code,
        RefusalCode::BadRequest
    );
}
