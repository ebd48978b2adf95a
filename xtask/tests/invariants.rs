//! The architecture invariants hold (the same checks as `cargo xtask lint`).

#[test]
fn architecture_invariants_hold() {
    let problems = xtask::check();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
