//! Fuzz the token parser: `decode_unverified` and `verify` on arbitrary text must never panic,
//! must agree with each other, and any claims they accept must re-issue to a token that verifies
//! to the same claims. This target must never need a real key or the filesystem.
//!
//! The same checks run on stable over the seed corpus in
//! `crates/stopline-token/tests/fuzz_corpus.rs`; keep the two in step.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stopline_token::keys::signing_key_from_seed;
use stopline_token::{decode_unverified, issue, verify};

/// The key the `valid-` seeds are signed with (shared with the replay test).
const FUZZ_KEY_SEED: &[u8; 32] = b"stopline-fuzz-token-key-seed-32b";
/// The time the seeds are judged at (shared with the replay test).
const NOW: i64 = 1_800_000_000;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let key = signing_key_from_seed(FUZZ_KEY_SEED).expect("a 32-byte seed");
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
});
