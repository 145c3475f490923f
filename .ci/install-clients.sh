#!/usr/bin/env bash
# Installs the official TypeScript (@modelcontextprotocol/client) and Python (mcp) clients under
# target/ci-clients, once; .ci/real-clients.sh and .ci/gateway.sh drive them. Also tools/peer-ts's
# packages (the TypeScript SDK's servers the gateway steps and the load generator start), once.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(pwd)/target/ci-clients"
mkdir -p "$work"
if [ ! -d "$work/ts/node_modules/@modelcontextprotocol/client" ]; then
  mkdir -p "$work/ts"
  (cd "$work/ts" && npm init -y >/dev/null && npm install --no-audit --no-fund @modelcontextprotocol/client@2.4.0 >/dev/null)
fi
cp .ci/clients/mrtr-client.mjs "$work/ts/"
[ -d tools/peer-ts/node_modules ] || npm ci --prefix tools/peer-ts --no-audit --no-fund >/dev/null
if [ ! -x "$work/venv/bin/python" ] || ! "$work/venv/bin/python" -c 'import mcp' 2>/dev/null; then
  python3 -m venv "$work/venv"
  "$work/venv/bin/pip" install -q mcp==2.3.0
fi
