//! The refusals `ControlView::decide` gave under the current view, kept for the rest of the
//! second, so a stopped agent that keeps calling is refused without its refusal being worded
//! again on every call.
//!
//! A refusal names its latch in words (who, why, scope, level, age: docs/reference.md §4), and the
//! profile of a gateway refusing 300 callers at once (the drill's floor) showed that wording —
//! the latch summary, the age, the list of other covering latches, the advice — as the largest
//! part of admission. `decide` is a pure function of the view, the caller's token (subject and
//! authority), the class, the target and the time, and the time enters its words only as an age
//! in whole seconds: so a receipt it gave for one token, class and target under one view
//! generation is the receipt it gives for them again within the same second, byte for byte.
//! Only refusals are kept ([`Decision::Block`]): a block stays a block while the view does not
//! change (the one state that moves with time, a drain reaching its deadline, moves from a
//! block to a block), so a kept refusal is never one a fresh decision would not give. Any other
//! generation or second starts an empty cache; at most [`MAX_TOKENS`] tokens are kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use stopline_core::{CheckReceipt, Decision, TaskClass};

/// Tokens kept before the cache is emptied (a flood of distinct tokens costs decisions, never
/// memory).
const MAX_TOKENS: usize = 4096;

/// Refusals by token, under one view generation and one second.
#[derive(Debug, Default)]
pub(crate) struct RefusalCache {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    generation: u64,
    second: i64,
    /// Token text → what was refused for it.
    refusals: HashMap<Arc<str>, Vec<Kept>>,
}

/// Tokens the map has room for from the start. Refusals begin all at once, when a stop lands
/// on every caller: grown from empty, the map was reallocated and rehashed eight times inside
/// the stop's window, on fresh memory (3–8 % of the gateway's CPU in the 60 ms after the pull
/// at 300 callers, by the drill's profile; BENCHMARKS.md). Emptied, it keeps its room.
const TOKENS_PRESIZED: usize = 512;

impl Default for State {
    fn default() -> State {
        State {
            generation: 0,
            second: 0,
            refusals: HashMap::with_capacity(TOKENS_PRESIZED),
        }
    }
}

/// One kept refusal: the class and target it was decided for, and the receipt.
type Kept = (TaskClass, Option<String>, CheckReceipt);

/// What a receipt was decided for.
pub(crate) struct Key<'a> {
    pub generation: u64,
    pub now_ms: i64,
    pub token: &'a Arc<str>,
    pub class: TaskClass,
    pub target: Option<&'a str>,
}

impl RefusalCache {
    /// The receipt of `key`: the refusal kept for it, or `decide()`'s answer (kept when it is
    /// a refusal).
    pub fn get_or_decide(
        &self,
        key: Key<'_>,
        decide: impl FnOnce() -> CheckReceipt,
    ) -> CheckReceipt {
        let second = key.now_ms.div_euclid(1000);
        {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if state.generation != key.generation || state.second != second {
                state.generation = key.generation;
                state.second = second;
                state.refusals.clear();
            }
            let kept = state.refusals.get(&**key.token).and_then(|entries| {
                entries
                    .iter()
                    .find(|(class, target, _)| {
                        *class == key.class && target.as_deref() == key.target
                    })
                    .map(|(_, _, receipt)| receipt.clone())
            });
            if let Some(receipt) = kept {
                return receipt;
            }
        }
        let receipt = decide();
        if receipt.decision == Decision::Block {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            // Another generation or second may have begun while deciding: keep it only under
            // the one it was decided in.
            if state.generation == key.generation && state.second == second {
                if state.refusals.len() >= MAX_TOKENS {
                    state.refusals.clear();
                }
                state.refusals.entry(key.token.clone()).or_default().push((
                    key.class,
                    key.target.map(String::from),
                    receipt.clone(),
                ));
            }
        }
        receipt
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stopline_core::{Mode, RefusalCode};

    fn block(message: &str) -> CheckReceipt {
        CheckReceipt::block(
            Mode::Emergency,
            RefusalCode::BreakGlassContained,
            message,
            Vec::new(),
        )
    }

    #[test]
    fn a_refusal_is_kept_for_its_token_class_target_generation_and_second_only() {
        let cache = RefusalCache::default();
        let token: Arc<str> = Arc::from("stl1.a");
        let other: Arc<str> = Arc::from("stl1.b");
        let key = |generation, now_ms, token, target| Key {
            generation,
            now_ms,
            token,
            class: TaskClass::Noncritical,
            target,
        };
        let first = cache.get_or_decide(key(1, 1_000, &token, Some("t")), || block("first"));
        assert_eq!(first.message, "first");
        let again = cache.get_or_decide(key(1, 1_999, &token, Some("t")), || block("again"));
        assert_eq!(again.message, "first", "kept within the second");
        for (generation, now_ms, token, target) in [
            (2, 1_999, &token, Some("t")),
            (2, 2_000, &token, Some("t")),
            (2, 2_000, &other, Some("t")),
            (2, 2_000, &token, Some("u")),
            (2, 2_000, &token, None),
        ] {
            let fresh =
                cache.get_or_decide(key(generation, now_ms, token, target), || block("fresh"));
            assert_eq!(
                fresh.message, "fresh",
                "{generation} {now_ms} {token} {target:?}"
            );
        }
        let critical = cache.get_or_decide(
            Key {
                class: TaskClass::Critical,
                ..key(2, 2_000, &token, Some("t"))
            },
            || block("critical"),
        );
        assert_eq!(critical.message, "critical");
    }

    /// A stop refusing 300 callers at once keeps their refusals without the map growing (so
    /// without reallocating it inside the stop's window), and a new second keeps its room.
    #[test]
    fn a_stop_on_hundreds_of_callers_keeps_their_refusals_without_growing_the_map() {
        let cache = RefusalCache::default();
        let room = || {
            let state = cache.state.lock().unwrap();
            state.refusals.capacity()
        };
        let before = room();
        assert!(before >= TOKENS_PRESIZED, "{before}");
        let tokens: Vec<Arc<str>> = (0..300).map(|i| Arc::from(format!("stl1.{i}"))).collect();
        for now_ms in [1_000, 2_000] {
            for token in &tokens {
                let key = Key {
                    generation: 1,
                    now_ms,
                    token,
                    class: TaskClass::Noncritical,
                    target: None,
                };
                cache.get_or_decide(key, || block("stopped"));
            }
            assert_eq!(cache.state.lock().unwrap().refusals.len(), 300);
            assert_eq!(room(), before, "at {now_ms}");
        }
    }

    #[test]
    fn an_allowed_call_is_decided_every_time() {
        let cache = RefusalCache::default();
        let token: Arc<str> = Arc::from("stl1.a");
        let mut decided = 0;
        for _ in 0..3 {
            let receipt = cache.get_or_decide(
                Key {
                    generation: 1,
                    now_ms: 5,
                    token: &token,
                    class: TaskClass::Noncritical,
                    target: None,
                },
                || {
                    decided += 1;
                    CheckReceipt {
                        decision: Decision::Allow,
                        ..block("")
                    }
                },
            );
            assert_eq!(receipt.decision, Decision::Allow);
        }
        assert_eq!(decided, 3);
    }
}
