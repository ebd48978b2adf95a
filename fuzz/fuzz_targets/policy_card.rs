//! Fuzz the policy-card validator (`policy-card.v1`, SPEC §6): on any JSON it must never panic,
//! refuse only with `policy_card_incomplete`, and whatever it accepts must be a card the run can
//! use — a valid run id, at least one enforced stop condition, budgets that are finite and not
//! negative, a non-empty stop handle — that validates again, unchanged, from its own
//! serialization (what `stopline run` records is what it validated).
//!
//! The same checks run on stable over the seed corpus in
//! `crates/stopline-core/tests/fuzz_corpus.rs`; keep the two in step.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stopline_core::policy::{validate, HANDLE_LEVELS, STOP_CONDITION_KINDS};
use stopline_core::{Name, RefusalCode};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    match validate(&value) {
        Err(refusal) => assert_eq!(refusal.code, RefusalCode::PolicyCardIncomplete),
        Ok(card) => {
            assert!(Name::parse(&card.run_id).is_ok());
            assert!(!card.stop_conditions.is_empty());
            assert!(card.stop_conditions.iter().all(|c| c["kind"]
                .as_str()
                .is_some_and(|k| STOP_CONDITION_KINDS.contains(&k))));
            assert!(!card.budgets.is_empty());
            assert!(card
                .budgets
                .values()
                .flat_map(|b| b.values())
                .all(|l| l.is_finite() && *l >= 0.0));
            assert!(card
                .stop_handle
                .levels
                .iter()
                .all(|l| HANDLE_LEVELS.contains(&l.as_str())));
            assert!(!card.stop_handle.who_may_approve_restart.is_empty());
            assert!(card.time_to_stop_target_ms > 0);
            let again = serde_json::to_value(&card).expect("a card serializes");
            assert_eq!(validate(&again).ok(), Some(card));
        }
    }
});
