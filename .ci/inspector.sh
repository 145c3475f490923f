#!/usr/bin/env bash
# The MCP Inspector's web UI (@modelcontextprotocol/inspector 2.12.0, "modern" protocol era, i.e.
# MCP 2026-07-28) drives notes_delete's form confirmation against the notes server in headless
# Chromium: connect over Streamable HTTP as alice, execute notes_delete on the personal workspace's
# "Groceries", pick the second note the form offers (note-7), tick the confirmation, choose the
# standing option ("also allow notes_delete on workspace personal for the next 10 minutes"),
# submit; then "Taxes 2026" in the same workspace runs with no form, and "Sprint plan" in the team
# workspace gets the form again. Exactly personal/note-7.md, personal/note-1.md and team/note-5.md
# must be gone from disk and every other note still there.
#
# Installs what it needs itself through .ci/headless.sh (Debian's chromium, and Node 22, which the
# Inspector needs at >= 22.19, the Inspector and playwright-core from npm under
# <target>/ci-inspector, reused when the pinned versions are there). Screenshots (inspector-form.png, inspector-done.png, inspector-failure.png on failure),
# the MCP traffic the UI saw and both servers' logs go to <target>/browser. Needs cargo, npm, curl
# and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
# Chromium, Node and playwright-core (and the Inspector), and the notes server.
source .ci/headless.sh
work=$(mktemp -d)
mkdir -p "$out"
rm -f "$out"/inspector-* "$out"/notes-server.log "$out"/driver.out
server=
inspector=
cleanup() {
  for pid in $inspector $server; do
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$work"
}
trap cleanup EXIT
show_logs() {
  echo "--- notes server log ---" >&2; cat "$out/notes-server.log" >&2 || true
  echo "--- Inspector output ---" >&2; cat "$out/inspector.out" >&2 || true
}
die() { echo "FAILED after ${SECONDS}s: $*" >&2; show_logs; exit 1; }

echo "== start the notes server on a fresh data dir"
port=$(free_port)
NO_COLOR=1 "$server_bin" --addr "127.0.0.1:$port" --data-dir "$work/notes" >"$out/notes-server.log" 2>&1 &
server=$!
server_url="http://127.0.0.1:$port/mcp"
for _ in $(seq 1 100); do
  curl -s -o /dev/null "$server_url" && break
  kill -0 "$server" 2>/dev/null || die "the notes server exited"
  sleep 0.1
done
curl -s -o /dev/null "$server_url" || die "the notes server does not answer on $server_url"
workspace="file://$(cd "$work/notes/personal" && pwd -P)"
notes_before=$(cd "$work/notes" && find . -type f | sort)
grep -qx './personal/note-7.md' <<<"$notes_before" || die "no personal/note-7.md to start with: $notes_before"
lap
echo "notes server at $server_url, workspace personal is $workspace ($took)"

echo "== start the Inspector's web UI"
# Its web server needs a fixed port (CLIENT_PORT); the MCP Apps sandbox and app-origin servers take
# any free one (0). Its API stays authenticated with a token of ours. HOME and its storage dir are
# throwaway, secrets stay in memory, and it opens no browser itself. The server is seeded ad hoc,
# read-only, with alice's bearer token as a custom header and the modern (2026-07-28) era.
ui_token=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
mkdir -p "$work/home" "$work/storage"
start_inspector() { # port: starts it in the background, sets $inspector
  (
    cd "$work"
    HOME=$work/home MCP_STORAGE_DIR=$work/storage MCP_INSPECTOR_SECRET_STORE=memory \
    CLIENT_PORT=$1 MCP_SANDBOX_PORT=0 MCP_APP_ORIGIN_PORT=0 HOST=127.0.0.1 \
    MCP_INSPECTOR_API_TOKEN=$ui_token MCP_AUTO_OPEN_ENABLED=false MCP_LOG_FILE=$out/inspector-log.jsonl \
    exec "$node" "$node_dir/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js" \
      --web --transport http --server-url "$server_url" --protocol-era modern \
      --header "Authorization: Bearer alice-token"
  ) >"$out/inspector.out" 2>&1 &
  inspector=$!
}
ui_url=
for _attempt in 1 2 3; do # the port we found free may be taken before the Inspector binds it
  ui_port=$(free_port)
  start_inspector "$ui_port"
  for _ in $(seq 1 300); do
    grep -q "is up and running at" "$out/inspector.out" && { ui_url="http://127.0.0.1:$ui_port/?MCP_INSPECTOR_API_TOKEN=$ui_token"; break; }
    kill -0 "$inspector" 2>/dev/null || break
    sleep 0.1
  done
  [[ -n $ui_url ]] && break
  kill -0 "$inspector" 2>/dev/null && die "the Inspector's web UI did not come up within 30 s"
  grep -q "PORT IS IN USE" "$out/inspector.out" || die "the Inspector exited"
  echo "port $ui_port was taken, trying another"
done
[[ -n $ui_url ]] || die "the Inspector found no free port in three tries"
lap
echo "Inspector $inspector_version web UI at http://127.0.0.1:$ui_port ($took)"

echo "== drive it in headless Chromium: notes_delete Groceries, pick the second note, confirm, submit"
status=0
INSPECTOR_URL=$ui_url NOTES_SERVER="127.0.0.1:$port" WORKSPACE_URI=$workspace \
  TEAM_URI="file://$(cd "$work/notes/team" && pwd -P)" CHROMIUM=$chromium_bin \
  PLAYWRIGHT_FROM=$node_dir OUT=$out "$node" .ci/clients/inspector.mjs 2>&1 | tee "$out/driver.out" || status=$?
[[ $status -eq 0 ]] || die "the browser drive failed (exit $status); screenshots and logs in $out"
lap
echo "drove the form ($took)"

echo "== the notes on disk"
expect_only_gone "$work/notes" "$notes_before" "$(printf './personal/note-1.md\n./personal/note-7.md\n./team/note-5.md')"
echo "screenshots: $out/inspector-form.png $out/inspector-done.png $out/inspector-standing.png"
echo "== MCP Inspector step passed in ${SECONDS}s"
