#!/usr/bin/env bash
# Installs what the tests need and nothing else: system packages through apt, the Python
# third-party clients in .venv, the agent frameworks in .venv-frameworks (they need the mcp 1.x
# client, .venv pins mcp 2.x), the Node MCP reference server and playwright-core (which drives
# the system's chromium) in node_modules.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
# No protobuf-compiler: the build runs the vendored protoc (scripts/protoc). etcd-server: the
# distributed backend tests; openssl: the locked-etcd tests make their CA and certificates. chromium: the status-page browser test. curl, jq: the documented
# commands. man-db: the man page test renders `stopline man`. nginx-light: `bench gateway` measures
# nginx beside the gateway (its test needs that column; the package's service is never used). dpkg-dev is not needed: the package
# is built by dpkg-deb, which every Debian has.
APT_PACKAGES=(python3-venv etcd-server openssl chromium curl jq man-db nginx-light)
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
if [ -f requirements-frameworks.txt ]; then
  [ -x .venv-frameworks/bin/python ] || python3 -m venv .venv-frameworks
  .venv-frameworks/bin/pip install -q -r requirements-frameworks.txt
fi
if [ -f package-lock.json ]; then
  npm ci --no-audit --no-fund --silent
fi
