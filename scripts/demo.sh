#!/usr/bin/env bash
# The main job on the embedded default: a local control directory, no server. Builds stopline,
# mints an agent token and a delegated sub-agent token, stops the agent, and shows that both
# tokens are refused while an unrelated agent keeps working.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p stopline
# Where cargo put it: CARGO_TARGET_DIR when set (relative to this checkout, as cargo reads it).
S="${CARGO_TARGET_DIR:-target}/release/stopline"
export STOPLINE_HOME="${STOPLINE_HOME:-$(mktemp -d)/stopline}"
echo "control directory: $STOPLINE_HOME"
parent=$($S token issue --agent researcher)
child=$($S token delegate --parent "$parent" --agent researcher-helper)
other=$($S token issue --agent unrelated)
echo "tokens: the parent is agent researcher, its sub-agent researcher-helper (delegated by the"
echo "parent), and agent unrelated (not in the parent's chain)"
echo
echo "before the stop, the sub-agent researcher-helper:"
$S check --class noncritical --token "$child" || true
echo
echo "engage: stop agent:researcher (the parent and every sub-agent it delegated to)"
$S engage --scope agent:researcher --reason "demo: anomalous behaviour" --by safety-monitor
echo
echo "after the stop, the parent researcher (refused):"
$S check --class noncritical --token "$parent" || true
echo "after the stop, the sub-agent researcher-helper (refused with its parent):"
$S check --class noncritical --token "$child" || true
echo "after the stop, the unrelated agent (still allowed):"
$S check --class noncritical --token "$other" || true
echo
$S status
