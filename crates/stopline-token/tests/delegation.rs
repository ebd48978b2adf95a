//! Delegation from outside: chains grow by one link, never widen lifetime, role or budgets, and
//! a stop of any ancestor revokes the child through the epoch map. Tests only.

use stopline_core::budget::{BudgetKind, Budgets};
use stopline_core::refusal::MAX_DELEGATION_DEPTH;
use stopline_core::{AuthorityStatus, EpochMap, Name, RefusalCode, Role, Scope};
use stopline_token::keys::signing_key_from_seed;
use stopline_token::{verify, Claims, DelegateRequest, IssueRequest, Minted, SigningKey};

const NOW: i64 = 1_800_000_000;

fn key() -> SigningKey {
    signing_key_from_seed(&[9; 32]).unwrap()
}

fn name(text: &str) -> Name {
    Name::parse(text).unwrap()
}

/// A root `planner` token under epoch 2 with a tool-call and wall-clock budget.
fn planner() -> Claims {
    let mut request = IssueRequest::new(name("planner"), 2, NOW);
    request.role = Role::Operator;
    request.project = Some("/srv/project".into());
    request.run = Some(name("eval-1"));
    request.budgets = [
        (BudgetKind::ToolCalls, 10.0),
        (BudgetKind::WallClockS, 600.0),
    ]
    .into();
    request.mint(&key()).unwrap().claims
}

/// Delegate under the default `max_ttl_s`.
fn delegate(
    key: &SigningKey,
    parent: &Claims,
    child: Name,
    ttl_s: Option<u64>,
    budgets: &Budgets,
    now_unix_s: i64,
) -> Result<Minted, stopline_core::Refusal> {
    let request = DelegateRequest {
        child,
        ttl_s,
        budgets: budgets.clone(),
        labels: Vec::new(),
        max_ttl_s: stopline_core::epoch::DEFAULT_MAX_TTL_S,
        now_unix_s,
    };
    stopline_token::delegate(key, parent, &request)
}

fn child_of(parent: &Claims, child: &str, ttl_s: Option<u64>, budgets: &Budgets) -> Claims {
    let minted = delegate(&key(), parent, name(child), ttl_s, budgets, NOW + 100).unwrap();
    assert_eq!(
        verify(&key().verifying_key(), &minted.token, NOW + 100),
        Ok(minted.claims.clone())
    );
    minted.claims
}

#[test]
fn the_chain_grows_by_one_link_and_inherits_the_rest() {
    let root = planner();
    let child = child_of(&root, "coder", None, &Budgets::new());
    let grandchild = child_of(&child, "tester", Some(60), &Budgets::new());
    let chain: Vec<&str> = grandchild.chain.iter().map(Name::as_str).collect();
    assert_eq!(chain, ["planner", "coder", "tester"]);
    assert_eq!(grandchild.parent.as_deref(), Some(child.jti.as_str()));
    assert_eq!(child.parent.as_deref(), Some(root.jti.as_str()));
    assert_eq!((child.role, grandchild.role), (Role::Agent, Role::Agent));
    assert_eq!((child.epoch, grandchild.epoch), (2, 2));
    assert_eq!(grandchild.project, root.project);
    assert_eq!(grandchild.run, root.run);
    assert_eq!(grandchild.iat, NOW + 100);
    assert_eq!(grandchild.exp, NOW + 160);
    // The default ttl would outlive the parent: the parent's exp caps it.
    assert_eq!(child.exp, root.exp);
    assert_eq!(grandchild.subject().agent(), Some(&name("tester")));
}

#[test]
fn budgets_are_carved_from_the_parent() {
    let root = planner();
    let child = child_of(&root, "coder", None, &[(BudgetKind::ToolCalls, 4.0)].into());
    assert_eq!(child.budgets[&BudgetKind::ToolCalls], 4.0);
    // Wall-clock counts from the parent's issue: 100 s of its 600 are gone.
    assert_eq!(child.budgets[&BudgetKind::WallClockS], 500.0);
    let new_kind = child_of(&root, "reader", None, &[(BudgetKind::Steps, 3.0)].into());
    assert_eq!(new_kind.budgets[&BudgetKind::Steps], 3.0);
    for greedy in [
        (BudgetKind::ToolCalls, 11.0),
        (BudgetKind::WallClockS, 550.0),
    ] {
        let refusal = delegate(
            &key(),
            &root,
            name("greedy"),
            None,
            &[greedy].into(),
            NOW + 100,
        )
        .unwrap_err();
        assert_eq!(refusal.code, RefusalCode::BudgetExhausted, "{greedy:?}");
    }
}

#[test]
fn refusals() {
    let root = planner();
    let none = Budgets::new();
    let refused = |parent: &Claims, child: &str, ttl: Option<u64>, now: i64| {
        delegate(&key(), parent, name(child), ttl, &none, now)
            .unwrap_err()
            .code
    };
    assert_eq!(
        refused(&root, "coder", None, root.exp),
        RefusalCode::TokenExpired
    );
    assert_eq!(
        refused(&root, "planner", None, NOW),
        RefusalCode::BadRequest
    );
    let child = child_of(&root, "coder", None, &none);
    assert_eq!(
        refused(&child, "planner", None, NOW),
        RefusalCode::BadRequest
    );
    assert_eq!(
        refused(&root, "coder", Some(0), NOW),
        RefusalCode::BadRequest
    );
    // docs/reference.md §5 "Bounded tail": no child lives longer than max_ttl_s, whatever its
    // parent's lifetime.
    assert_eq!(
        refused(&root, "coder", Some(u64::MAX), NOW),
        RefusalCode::TtlTooLong
    );
    assert_eq!(
        refused(&root, "coder", Some(86_401), NOW),
        RefusalCode::TtlTooLong
    );
    assert!(delegate(&key(), &root, name("coder"), Some(86_400), &none, NOW).is_ok());
    // docs/reference.md §6: a chain is at most MAX_DELEGATION_DEPTH (8) delegations deep.
    let mut deepest = root.clone();
    for link in 1..=MAX_DELEGATION_DEPTH {
        deepest = child_of(&deepest, &format!("a{link}"), None, &none);
    }
    assert_eq!(deepest.chain.len(), MAX_DELEGATION_DEPTH + 1);
    assert_eq!(
        refused(&deepest, "one-more", None, NOW),
        RefusalCode::DelegateLimit
    );
    let mut forged = root.clone();
    forged.chain.clear();
    assert_eq!(
        refused(&forged, "coder", None, NOW),
        RefusalCode::TokenInvalid
    );
}

#[test]
fn a_stop_of_any_ancestor_makes_the_child_stale() {
    let root = planner();
    let child = child_of(&root, "coder", None, &Budgets::new());
    let epochs = EpochMap {
        seq: 2,
        ..EpochMap::default()
    };
    assert_eq!(
        child.standing(&epochs.clone().indexed()),
        AuthorityStatus::Current
    );
    let stale = |scope: Scope| {
        let advanced = epochs.advanced(&scope).unwrap().indexed();
        matches!(child.standing(&advanced), AuthorityStatus::Stale { .. })
    };
    assert!(stale(Scope::Agent(name("planner"))), "parent stopped");
    assert!(stale(Scope::Agent(name("coder"))), "child stopped");
    assert!(
        stale(Scope::Project("/srv".into())),
        "enclosing project stopped"
    );
    assert!(stale(Scope::Run(name("eval-1"))), "run stopped");
    assert!(stale(Scope::Machine), "machine stopped");
    assert!(
        !stale(Scope::Agent(name("unrelated"))),
        "unrelated agent stopped"
    );
    assert!(
        !stale(Scope::Project("/srv/projectx".into())),
        "sibling project stopped"
    );
    assert!(!stale(Scope::Run(name("eval-2"))), "other run stopped");
    // A parent minted under an epoch the verifier has not seen yet gives a future child.
    let behind = EpochMap {
        seq: 1,
        ..EpochMap::default()
    };
    assert_eq!(
        child.standing(&behind.indexed()),
        AuthorityStatus::Future { seq: 1 }
    );
}
