//! Who a view change concerns: the calls waiting on the view, each woken only when a change
//! can end its wait.
//!
//! A call in flight waits to be cut (`stopline_core::call::must_cut`), a call waiting for its
//! `prepared` fsync waits to be refused if the view now blocks it, and a call held under
//! HALT_NONCRITICAL waits for the halt to lift or escalate. All used to wait on
//! the view's one change signal, so every change woke every such call — a stop of one agent
//! woke every call of every other agent, each to find it was not concerned. Now each waiting
//! call registers what it waits for ([`Interest`]), and the holder, right after it swapped a
//! changed view in, asks every registration whether the new view concerns it and wakes only
//! those ([`Waiters::wake_concerned`]). The question is [`stopline_core::call::cut_cause`] for
//! a call in flight (exactly when `must_cut` cuts, with no message built), and for a call being
//! admitted anything that can make `decide` refuse it (a fault, a contained machine, a latch
//! covering it, a stale or future token, a blocked target) — a superset, so the woken call
//! judges itself and may wait on. A held call is concerned exactly when `decide` would no
//! longer queue it: a stop of another agent leaves it asleep.
//!
//! No stop is ever missed, by the order of the two sides. A waiter registers (under this
//! registry's lock) *before* it reads the view to check itself ([`wait_until`]); the holder
//! stores the new view *before* it takes that lock to scan the registrations. So either the
//! scan finds the registration (and wakes it, if concerned), or the registration came after
//! the scan took the lock, hence after the store, and the waiter's own check reads the new
//! view (or a later one). A wake is a
//! [`Notify`] permit: one given while the waiter is not waiting is kept for its next wait.

use crate::caller::Caller;
use foldhash::HashMap;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use stopline_core::call::{cut_cause, ends_remote};
use stopline_core::view::Authority;
use stopline_core::{ControlState, ControlView, Decision, TaskClass};
use tokio::sync::Notify;

/// What a waiting call waits for.
#[derive(Debug, Clone)]
pub(crate) enum Interest {
    /// A call in flight: to be cut.
    Cut,
    /// Remote work in flight (an A2A task or stream): to be ended, at a HALT_ALL too.
    EndRemote,
    /// A call still being admitted (waiting for its `prepared` record): to be refused, on its
    /// operation target if it has one.
    Admission { target: Option<String> },
    /// A call held under HALT_NONCRITICAL: to be admitted when the halt lifts, or refused when
    /// it escalates; judged as `class` on its operation target, if it has one.
    Held {
        class: TaskClass,
        target: Option<String>,
    },
    /// An acknowledgement of `held` (the latches it recorded, for a distributed source): to
    /// acknowledge again once the view holds another set. It has no caller.
    Latches { held: BTreeSet<String> },
}

#[derive(Debug)]
struct Entry {
    /// The waiting call (`None` for [`Interest::Latches`]).
    caller: Option<Caller>,
    interest: Interest,
    wake: Arc<Notify>,
}

/// Every call waiting on the view, by registration.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    entries: Mutex<(u64, HashMap<u64, Entry>)>,
}

/// One call's registration; dropping it leaves the registry.
#[derive(Debug)]
pub(crate) struct Registration {
    id: u64,
    wake: Arc<Notify>,
    waiters: Arc<Waiters>,
}

impl Waiters {
    /// Register `caller` as waiting for `interest`. Register before the first check.
    pub fn register(self: &Arc<Self>, caller: &Caller, interest: Interest) -> Registration {
        self.enter(Some(caller.clone()), interest)
    }

    /// Register a wait with no caller (remote work a restarted gateway rebuilt from its
    /// journal): woken at every change, to judge itself.
    pub fn register_uncalled(self: &Arc<Self>, interest: Interest) -> Registration {
        self.enter(None, interest)
    }

    /// Register an acknowledgement of `held` as waiting for the view to hold another set of
    /// latches. Register before comparing the view with `held`.
    pub fn register_latches(self: &Arc<Self>, held: BTreeSet<String>) -> Registration {
        self.enter(None, Interest::Latches { held })
    }

    fn enter(self: &Arc<Self>, caller: Option<Caller>, interest: Interest) -> Registration {
        let wake = Arc::new(Notify::new());
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.0 += 1;
        let id = entries.0;
        entries.1.insert(
            id,
            Entry {
                caller,
                interest,
                wake: wake.clone(),
            },
        );
        Registration {
            id,
            wake,
            waiters: self.clone(),
        }
    }

    /// Wake every registration `view` (just stored as the current view) concerns at `now_ms`;
    /// how many were woken.
    pub fn wake_concerned(&self, view: &ControlView, now_ms: i64) -> usize {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut woken = 0;
        for entry in entries.1.values() {
            if concerns(view, entry.caller.as_ref(), &entry.interest, now_ms) {
                entry.wake.notify_one();
                woken += 1;
            }
        }
        woken
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut entries = self
            .waiters
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        entries.1.remove(&self.id);
    }
}

impl Registration {
    /// Resolves at the next wake (at once when one came since the last).
    pub async fn woken(&self) {
        self.wake.notified().await;
    }
}

/// Wait on `registration` until `check` (a read of the current view) gives an answer. The
/// registration must exist before the first check (see the module's ordering argument);
/// cancel-safe, so it can be one arm of a `select!` polled again and again.
pub(crate) async fn wait_until<T>(
    registration: &Registration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    loop {
        if let Some(answer) = check() {
            return answer;
        }
        registration.woken().await;
    }
}

/// True when `view` can end the wait of `caller` for `interest`.
fn concerns(view: &ControlView, caller: Option<&Caller>, interest: &Interest, now_ms: i64) -> bool {
    if let Interest::Latches { held } = interest {
        return view.latches.len() != held.len()
            || view.latches.iter().any(|l| !held.contains(&l.file));
    }
    // Every other interest is a call's; one without its caller is woken to judge itself.
    let Some(caller) = caller else {
        return true;
    };
    let authority = Authority {
        issue_epoch: caller.claims().epoch,
    };
    let subject = caller.subject();
    match interest {
        Interest::Cut => cut_cause(view, subject, authority, now_ms).is_some(),
        Interest::EndRemote => ends_remote(view, subject, authority, now_ms),
        Interest::Admission { target } => {
            !view.faults.is_empty()
                || view.state.effective(now_ms) != ControlState::Running
                || view.covering(subject).next().is_some()
                || authority.minted_after(view)
                || !matches!(
                    view.epoch.authority_status(authority.issue_epoch, subject),
                    stopline_core::epoch::AuthorityStatus::Current
                )
                || view.blocked_targets.contains_key("*")
                || target
                    .as_deref()
                    .is_some_and(|t| view.blocked_targets.contains_key(t))
        }
        // Exactly when the held call's own judgment would stop queueing it (the gateway adds
        // only an unreadable registry to `decide`, which `blocked_targets["*"]` is).
        Interest::Held { class, target } => {
            view.decide(subject, *class, Some(authority), target.as_deref(), now_ms)
                .decision
                != Decision::Queue
                || (target.is_some() && view.blocked_targets.contains_key("*"))
        }
        Interest::Latches { .. } => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caller::Authenticator;
    use crate::view::ViewHolder;
    use futures::FutureExt;
    use std::time::Duration;
    use stopline_core::call::must_cut;
    use stopline_core::latch::LatchSession;
    use stopline_core::{Level, Name, Scope};
    use stopline_store::{EngageRequest, OwnerPlane, Store};
    use stopline_token::SigningKey;

    struct World {
        _dir: tempfile::TempDir,
        store: Store,
        view: Arc<ViewHolder>,
        key: SigningKey,
        auth: Authenticator,
    }

    fn world() -> World {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"));
        store.ensure_home().unwrap();
        let view = Arc::new(ViewHolder::new(store.clone(), Duration::from_secs(1)));
        view.refresh_full();
        let key = stopline_token::keys::generate_signing_key().unwrap();
        let auth = Authenticator::new(key.verifying_key());
        World {
            _dir: dir,
            store,
            view,
            key,
            auth,
        }
    }

    impl World {
        fn caller(&self, agent: &str) -> Caller {
            let now_s = self.store.now_ms() / 1000;
            let minted = stopline_token::IssueRequest::new(Name::parse(agent).unwrap(), 0, now_s)
                .mint(&self.key)
                .unwrap();
            self.auth.authenticate(Some(&minted.token), now_s).unwrap()
        }

        fn engage(&self, agent: &str, level: Level) {
            self.engage_scope(Scope::Agent(Name::parse(agent).unwrap()), level);
        }

        fn engage_scope(&self, scope: Scope, level: Level) {
            self.store
                .engage(&EngageRequest {
                    scope,
                    level,
                    by: "test".into(),
                    reason: "waiters".into(),
                    session: LatchSession {
                        bound: None,
                        root: None,
                        tier: "console".into(),
                    },
                })
                .unwrap();
        }

        /// What a call in flight checks for itself: the cut the current view gives it.
        fn cut_of(&self, caller: &Caller) -> Option<stopline_core::Refusal> {
            let authority = Authority {
                issue_epoch: caller.claims().epoch,
            };
            must_cut(
                &self.view.load().view,
                caller.subject(),
                authority,
                self.store.now_ms(),
            )
        }
    }

    fn not_woken(registration: &Registration) -> bool {
        registration.woken().now_or_never().is_none()
    }

    /// A stop of one agent wakes that agent's calls, not every call in flight; a halt wakes the
    /// calls it can refuse (those being admitted) but cuts nothing, so it wakes no call in
    /// flight.
    #[tokio::test]
    async fn a_view_change_wakes_only_the_calls_it_concerns() {
        let w = world();
        let (a, b) = (w.caller("a"), w.caller("b"));
        let a_flight = w.view.waiters().register(&a, Interest::Cut);
        let b_flight = w.view.waiters().register(&b, Interest::Cut);
        let b_admitting = w.view.waiters().register(
            &b,
            Interest::Admission {
                target: Some("mcp:s:t".into()),
            },
        );
        w.engage("a", Level::Emergency);
        assert!(w.view.add_appeared_latches());
        tokio::time::timeout(Duration::from_secs(5), a_flight.woken())
            .await
            .expect("the stopped agent's call is woken");
        assert!(w.cut_of(&a).is_some(), "and its own check cuts it");
        assert!(not_woken(&b_flight), "another agent's call is not woken");
        assert!(not_woken(&b_admitting), "nor its call being admitted");
        assert!(w.cut_of(&b).is_none());

        w.engage("b", Level::HaltAll);
        assert!(w.view.add_appeared_latches());
        assert!(
            !not_woken(&b_admitting),
            "a halt can refuse a call being admitted"
        );
        assert!(not_woken(&b_flight), "but it cuts no call in flight");
        w.engage("b", Level::Emergency);
        w.view.refresh_fast();
        tokio::time::timeout(Duration::from_secs(5), b_flight.woken())
            .await
            .expect("b's emergency wakes b's call");
        assert!(w.cut_of(&b).is_some());
    }

    /// A stop of the machine concerns every agent: a machine HALT_ALL wakes every call being
    /// admitted, whatever its agent (and cuts no call in flight), and a machine EMERGENCY wakes
    /// every call in flight.
    #[tokio::test]
    async fn a_machine_stop_wakes_every_agents_calls() {
        let w = world();
        let (a, b) = (w.caller("a"), w.caller("b"));
        let admitting = [&a, &b].map(|c| {
            w.view
                .waiters()
                .register(c, Interest::Admission { target: None })
        });
        let flight = [&a, &b].map(|c| w.view.waiters().register(c, Interest::Cut));
        let machine = |level: Level| {
            w.engage_scope(Scope::Machine, level);
            w.view.refresh_fast();
        };
        machine(Level::HaltAll);
        for (registration, agent) in admitting.iter().zip(["a", "b"]) {
            tokio::time::timeout(Duration::from_secs(5), registration.woken())
                .await
                .unwrap_or_else(|_| panic!("a machine halt wakes {agent}'s call being admitted"));
        }
        for registration in &flight {
            assert!(not_woken(registration), "a halt cuts no call in flight");
        }
        machine(Level::Emergency);
        for (registration, caller) in flight.iter().zip([&a, &b]) {
            tokio::time::timeout(Duration::from_secs(5), registration.woken())
                .await
                .expect("a machine emergency wakes every call in flight");
            assert!(w.cut_of(caller).is_some());
        }
    }

    /// A call held under HALT_NONCRITICAL sleeps through a stop of another agent (the view
    /// signal it used to wait on fires for that change) and is woken by the lift of its own
    /// halt and by its escalation.
    #[tokio::test]
    async fn a_held_call_is_woken_only_by_what_ends_its_hold() {
        let w = world();
        let b = w.caller("b");
        w.engage("b", Level::HaltNoncritical);
        w.view.refresh_fast();
        let held = || Interest::Held {
            class: TaskClass::Noncritical,
            target: Some("mcp:s:write".into()),
        };
        let queued = |w: &World| {
            w.view
                .load()
                .view
                .decide(
                    b.subject(),
                    TaskClass::Noncritical,
                    Some(Authority {
                        issue_epoch: b.claims().epoch,
                    }),
                    Some("mcp:s:write"),
                    w.store.now_ms(),
                )
                .decision
        };
        assert_eq!(queued(&w), Decision::Queue, "b's call is held");
        let b_held = w.view.waiters().register(&b, held());
        let mut every_change = w.view.subscribe();
        every_change.borrow_and_update();

        w.engage("a", Level::Emergency);
        w.view.refresh_fast();
        assert!(
            every_change.has_changed().unwrap(),
            "the view changed (the old wait woke here)"
        );
        assert!(not_woken(&b_held), "another agent's stop leaves it asleep");
        assert_eq!(queued(&w), Decision::Queue);

        // Lifted: woken, and its own judgment admits it.
        w.store
            .disengage(&Scope::Agent(Name::parse("b").unwrap()), "lift", "test")
            .unwrap();
        w.view.refresh_fast();
        tokio::time::timeout(Duration::from_secs(5), b_held.woken())
            .await
            .expect("the lift wakes the held call");
        assert_eq!(queued(&w), Decision::Allow);

        // Held again, then escalated: woken, and refused.
        w.engage("b", Level::HaltNoncritical);
        w.view.refresh_fast();
        let b_held = w.view.waiters().register(&b, held());
        assert!(not_woken(&b_held), "a registration starts asleep");
        w.engage("b", Level::HaltAll);
        assert!(w.view.add_appeared_latches());
        tokio::time::timeout(Duration::from_secs(5), b_held.woken())
            .await
            .expect("an escalation wakes the held call");
        assert_eq!(queued(&w), Decision::Block);
    }

    /// An acknowledgement of a set of latches sleeps through a view change that keeps the set
    /// (a drain changes only the state; the view signal it used to wait on fires for it) and is
    /// woken when a latch joins the set.
    #[tokio::test]
    async fn an_acknowledgement_is_woken_only_when_the_latches_change() {
        let w = world();
        w.store
            .engage(&EngageRequest {
                scope: Scope::Machine,
                level: Level::HaltAll,
                by: "test".into(),
                reason: "waiters".into(),
                session: LatchSession {
                    bound: None,
                    root: None,
                    tier: "console".into(),
                },
            })
            .unwrap();
        w.view.refresh_fast();
        let held = w.view.load().latch_files.clone();
        assert_eq!(held.len(), 1);
        let ack = w.view.waiters().register_latches(held.clone());
        let mut every_change = w.view.subscribe();
        every_change.borrow_and_update();

        OwnerPlane::drain(&w.store, 60, "drain", "test").unwrap();
        w.view.refresh_fast();
        assert!(
            every_change.has_changed().unwrap(),
            "the view changed (the old wait woke here)"
        );
        assert_eq!(w.view.load().latch_files, held);
        assert!(
            not_woken(&ack),
            "a change that keeps the latches leaves it asleep"
        );

        w.engage("a", Level::Emergency);
        assert!(w.view.add_appeared_latches());
        tokio::time::timeout(Duration::from_secs(5), ack.woken())
            .await
            .expect("a new latch wakes the acknowledgement");
    }

    /// Stop wins the race between a view swap and a call that starts waiting: the swapping
    /// thread parked (failpoint `gateway.view.wake`, `hold_if:`) after storing the view that
    /// holds the stop and before scanning the waiters. A call registering then is cut by its own
    /// check at once; one registered before is cut as soon as the scan runs. Needs
    /// `--features stopline-store/failpoints` (or the workspace's `stopline/failpoints`); without
    /// it the swap is never parked and the test fails, never skips.
    #[test]
    fn a_call_is_cut_whichever_side_of_a_parked_swap_it_registers_on() {
        let holds = tempfile::tempdir().unwrap();
        let hold = holds.path().join("hold");
        std::env::set_var(
            "STOPLINE_FAILPOINTS",
            format!("gateway.view.wake=hold_if:{}", hold.display()),
        );
        let w = world();
        let a = w.caller("a");
        let before = w.view.waiters().register(&a, Interest::Cut);
        w.engage("a", Level::Emergency);
        std::fs::write(&hold, "").unwrap();
        let view = w.view.clone();
        let swap = std::thread::spawn(move || view.add_appeared_latches());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while w.cut_of(&a).is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the stop never reached the view"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !swap.is_finished(),
            "the swap must be parked between storing the view and waking the waiters (is the failpoints feature on?)"
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let after = w.view.waiters().register(&a, Interest::Cut);
        let cut = runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(1), wait_until(&after, || w.cut_of(&a))).await
        });
        assert!(
            cut.is_ok(),
            "a call registered after the store is cut by its own check"
        );
        assert!(!swap.is_finished(), "while the swap is still parked");
        assert!(not_woken(&before), "the scan has not run yet");
        std::fs::remove_file(&hold).unwrap();
        assert!(swap.join().unwrap());
        let cut = runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), wait_until(&before, || w.cut_of(&a))).await
        });
        assert!(cut.is_ok(), "the call registered before is cut by the scan");
    }
}
