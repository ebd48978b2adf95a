#!/usr/bin/env bash
# Installs what the tests need and nothing else: system packages through apt, the Python
# third-party clients in .venv, the Node MCP reference server in node_modules.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
APT_PACKAGES=(python3-venv)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
if [ -f requirements-test.txt ]; then
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/pip install -q -r requirements-test.txt
fi
if [ -f package-lock.json ]; then
  npm ci --no-audit --no-fund --silent
fi
