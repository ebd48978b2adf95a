#!/usr/bin/env bash
# Runs every test of stopline on a fresh Debian 12 machine: installs what the tests need
# (system packages, Python venvs with the third-party clients and agent frameworks, npm
# packages), then the gates and the whole test suite. Idempotent; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-test-deps.sh
echo "== rustfmt"
cargo fmt --all -- --check
echo "== clippy"
cargo clippy --workspace --all-targets --features stopline/failpoints -- -D warnings
echo "== rustdoc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
echo "== tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --features stopline/failpoints --no-fail-fast
else
  cargo test --workspace --features stopline/failpoints --no-fail-fast
fi
echo "== doc tests"
# The suite's feature set, so the doc tests link the libraries the suite just built.
cargo test --workspace --doc --features stopline/failpoints
echo "== release gate (release build + its own conformance battery)"
cargo xtask release-gate
echo "all tests passed"
