#!/usr/bin/env bash
# The main job on the embedded default: a local control directory, no server. Builds stopline,
# mints an agent token and a delegated sub-agent token, stops the agent, and shows that both
# tokens are refused while an unrelated agent keeps working.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p stopline
S=./target/release/stopline
export STOPLINE_HOME="${STOPLINE_HOME:-$(mktemp -d)/stopline}"
echo "control directory: $STOPLINE_HOME"
parent=$($S token issue --agent researcher)
child=$($S token delegate --parent "$parent" --agent researcher-helper)
other=$($S token issue --agent unrelated)
echo "before the stop:"; $S check --class noncritical --token "$child" || true
$S engage --scope agent:researcher --reason "demo: anomalous behaviour" --by safety-monitor
echo "after the stop:"
$S check --class noncritical --token "$parent" || true
$S check --class noncritical --token "$child" || true
$S check --class noncritical --token "$other" || true
$S status
