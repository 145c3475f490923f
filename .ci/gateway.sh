#!/usr/bin/env bash
# The confirmation gateway in front of servers nobody here wrote, each with no confirmation of
# its own: the official TypeScript SDK's notes server (tools/peer-ts/upstream-plain.mjs) and the
# official Python SDK's (tools/upstream-py/server.py), one route each in one gateway. Reached
# directly, the first notes_delete deletes. Through the gateway, the official TypeScript and
# Python clients decline, cancel and accept its form, and only the accepted calls reach the
# upstream (which prints every deletion). `check` prints each tool's verdict.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
die() { echo "gateway: $*" >&2; for f in "$work"/*.log; do echo "--- $f"; cat "$f"; done >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$1/" && return 0; sleep 0.1; done; return 1; }

bash .ci/install-clients.sh
clients="$root/target/ci-clients"
bash .ci/build-bins.sh
gateway_bin="$root/target/debug/mcp-confirm-gateway"

ts_port=$(free_port)
node tools/peer-ts/upstream-plain.mjs --addr "127.0.0.1:$ts_port" >"$work/upstream-ts.log" 2>&1 &
pids+=($!)
py_port=$(free_port)
"$clients/venv/bin/python" tools/upstream-py/server.py --port "$py_port" >"$work/upstream-py.log" 2>&1 &
pids+=($!)
wait_port "$ts_port" || die "the TypeScript upstream did not start"
wait_port "$py_port" || die "the Python upstream did not start"

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
[[route]]
path = "/py/mcp"
upstream = "http://127.0.0.1:$py_port/mcp"
TOML

echo "== check: what each upstream tool gets"
"$gateway_bin" check --config "$work/gateway.toml" | tee "$work/check.out"
[ "$(grep -Ec '^  notes_delete +confirm +the upstream says destructiveHint: true' "$work/check.out")" = 2 ] || die "notes_delete is not confirmed on both routes"
[ "$(grep -Ec '^  notes_list +pass +the upstream says readOnlyHint: true' "$work/check.out")" = 2 ] || die "notes_list does not pass on both routes"

"$gateway_bin" --config "$work/gateway.toml" >"$work/gateway.log" 2>&1 &
pids+=($!)
wait_port "$gw_port" || die "the gateway did not start"
ws="file:///notes/personal"
client() { # ts|py url token title action -> the client's JSON line
  local args="{\"workspaceUri\":\"$ws\",\"title\":\"$4\"}"
  case $1 in
    ts) node "$clients/ts/mrtr-client.mjs" "$2" "$3" notes_delete "$args" "$5" 0 || true ;;
    py) "$clients/venv/bin/python" .ci/clients/mrtr_client.py "$2" "$3" notes_delete "$args" "$5" 0 || true ;;
  esac
}
field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1]).get(sys.argv[1]))' "$1"; }

for upstream in ts py; do
  gw="http://127.0.0.1:$gw_port/$upstream/mcp"
  log="$work/upstream-$upstream.log"
  deletions() { grep -c '^deleted ' "$log" || true; }
  echo "== through the gateway to the $upstream upstream: decline and cancel run nothing, accept runs the call once"
  for c in ts py; do
    for action in decline cancel; do
      before=$(deletions)
      out=$(client "$c" "$gw" alice-token-0123456789 Groceries "$action"); echo "$c $action: $out"
      [ "$(echo "$out" | field forms)" = 1 ] || die "$upstream, $c $action: no form was asked"
      [ "$(deletions)" = "$before" ] || die "$upstream, $c $action: the upstream deleted a note"
    done
  done
  before=$(deletions)
  out=$(client ts "$gw" alice-token-0123456789 Groceries accept); echo "ts accept: $out"
  [ "$(echo "$out" | field forms)" = 1 ] || die "$upstream, ts accept: no form"
  echo "$out" | grep -q 'Deleted note-1 (Groceries)' || die "$upstream, ts accept: not deleted"
  [ "$(deletions)" = $((before + 1)) ] || die "$upstream, ts accept: not exactly one deletion"
  out=$(client py "$gw" alice-token-0123456789 Standup accept); echo "py accept: $out"
  [ "$(echo "$out" | field forms)" = 1 ] || die "$upstream, py accept: no form"
  echo "$out" | grep -q 'Deleted note-2 (Standup)' || die "$upstream, py accept: not deleted"
  [ "$(deletions)" = $((before + 2)) ] || die "$upstream, py accept: not exactly one more deletion"
done

echo "== without a token, the gateway answers 401 and forwards nothing"
status=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$gw_port/ts/mcp" -H 'content-type: application/json' -d '{}')
[ "$status" = 401 ] || die "no token: HTTP $status"

echo "== the same upstreams reached directly: the first call deletes, no form"
out=$(client ts "http://127.0.0.1:$ts_port/mcp" operator-token-0123456789 Ideas accept); echo "direct (ts): $out"
[ "$(echo "$out" | field forms)" = 0 ] || die "direct (ts): a form was asked"
echo "$out" | grep -q 'Deleted note-3 (Ideas)' || die "direct (ts): not deleted"
out=$(client py "http://127.0.0.1:$py_port/mcp" none Ideas accept); echo "direct (py): $out"
[ "$(echo "$out" | field forms)" = 0 ] || die "direct (py): a form was asked"
echo "$out" | grep -q 'Deleted note-3 (Ideas)' || die "direct (py): not deleted"
echo "== gateway: passed"
