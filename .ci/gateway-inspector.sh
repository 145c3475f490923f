#!/usr/bin/env bash
# The MCP Inspector's web UI (the same pinned version, in headless Chromium, as .ci/inspector.sh)
# through the confirmation gateway in front of the official TypeScript SDK's notes server with no
# confirmation of its own (tools/peer-ts/upstream-plain.mjs, which prints each deletion as
# `deleted <id>`). The Inspector connects to the gateway's route as alice, with her bearer token
# as a custom header of the server entry (the launcher's --header; the UI's server settings edit
# the same list), which its backend sends on every request to the gateway. notes_delete
# "Groceries" in the personal workspace gets the gateway's own yes/no form (inputRequests key
# mcp-confirm-gateway/confirmation, a `confirm` boolean): declined, nothing is deleted; cancelled,
# nothing is deleted; accepted with the box ticked, exactly note-1 is deleted, once. notes_list
# (read-only: it passes with no form) through the gateway then lists every note but note-1, and
# the upstream's log holds exactly one deletion, note-1's (.ci/clients/gateway-inspector.mjs
# checks the log after each answer too).
#
# Installs what it needs itself through .ci/headless.sh (Debian's chromium; Node, the Inspector and
# playwright-core under <target>/ci-inspector, shared with the other browser steps) and
# tools/peer-ts's npm packages (.ci/install-clients.sh); builds the gateway with
# .ci/build-bins.sh, every step's one build command (after the first step, nothing to build).
# Screenshots (gateway-inspector-form.png,
# gateway-inspector-done.png, gateway-inspector-failure.png on failure), the MCP traffic the UI
# saw and every process's log go to <target>/browser, named gateway-inspector-*. Needs cargo, npm,
# curl and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
# Chromium, Node and playwright-core (and the Inspector), no notes server of the library's own;
# starting the Inspector's web UI (start_inspector_ui).
headless_no_notes_server=1
source .ci/headless.sh
source .ci/inspector-ui.sh
work=$(mktemp -d)
mkdir -p "$out"
rm -f "$out"/gateway-inspector*
upstream_log=$out/gateway-inspector-upstream.log
gateway_log=$out/gateway-inspector-gateway.log
pids=()
inspector=
cleanup() {
  for pid in $inspector "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$work"
}
trap cleanup EXIT
die() {
  echo "FAILED after ${SECONDS}s: $*" >&2
  for f in "$upstream_log" "$gateway_log" "$out/gateway-inspector.out"; do
    echo "--- $f (last 40 lines) ---" >&2; tail -n 40 "$f" >&2 || true
  done
  exit 1
}
wait_port() { for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$1/" && return 0; sleep 0.1; done; return 1; }

echo "== the TypeScript SDK's packages and the gateway (built already by .ci/gateway.sh)"
bash .ci/install-clients.sh
bash .ci/build-bins.sh
gateway_bin=$target_dir/debug/mcp-confirm-gateway
lap
echo "ready ($took)"

echo "== start the TypeScript upstream and the gateway in front of it"
ts_port=$(free_port)
"$node" tools/peer-ts/upstream-plain.mjs --addr "127.0.0.1:$ts_port" >"$upstream_log" 2>&1 &
pids+=($!)
gw_port=$(free_port)
echo "alice alice-token-0123456789" >"$work/tokens"
echo "Bearer operator-token-0123456789" >"$work/upstream-token"
cat >"$work/gateway.toml" <<TOML
listen = "127.0.0.1:$gw_port"
[auth]
kind = "static_tokens"
file = "tokens"
[[route]]
path = "/ts/mcp"
upstream = "http://127.0.0.1:$ts_port/mcp"
upstream_header = { name = "authorization", value = { file = "upstream-token" } }
TOML
wait_port "$ts_port" || die "the TypeScript upstream did not start"
NO_COLOR=1 "$gateway_bin" --config "$work/gateway.toml" >"$gateway_log" 2>&1 &
pids+=($!)
wait_port "$gw_port" || die "the gateway did not start"
gateway_url="http://127.0.0.1:$gw_port/ts/mcp"
status=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$gateway_url" -H 'content-type: application/json' -d '{}')
[[ $status == 401 ]] || die "the gateway answers a request with no token with HTTP $status, not 401"
lap
echo "upstream at http://127.0.0.1:$ts_port/mcp, gateway at $gateway_url (401 without a token) ($took)"

echo "== start the Inspector's web UI, seeded with the gateway's route and alice's token"
start_inspector_ui gateway-inspector "$gateway_url" --header "Authorization: Bearer alice-token-0123456789"
lap
echo "Inspector $inspector_version web UI at http://127.0.0.1:$ui_port ($took)"

echo "== drive it in headless Chromium: notes_delete Groceries declined, cancelled, then accepted"
status=0
INSPECTOR_URL=$ui_url GATEWAY_SERVER="127.0.0.1:$gw_port" WORKSPACE_URI="file:///notes/personal" \
  UPSTREAM_LOG=$upstream_log CHROMIUM=$chromium_bin PLAYWRIGHT_FROM=$node_dir OUT=$out \
  "$node" .ci/clients/gateway-inspector.mjs 2>&1 | tee "$out/gateway-inspector-driver.out" || status=$?
[[ $status -eq 0 ]] || die "the browser drive failed (exit $status); screenshots and logs in $out"
lap
echo "drove the form ($took)"

echo "== the upstream's deletions"
deletions=$(grep '^deleted ' "$upstream_log" || true)
echo "upstream log: $(echo $deletions)"
[[ $deletions == "deleted note-1" ]] || die "expected exactly one deletion, note-1's; the upstream deleted [$(echo $deletions)]"
echo "screenshots: $out/gateway-inspector-form.png $out/gateway-inspector-done.png"
echo "== MCP Inspector through the gateway passed in ${SECONDS}s"
