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
# Chromium, Node and playwright-core (and the Inspector), and the notes server; starting the
# Inspector's web UI (start_inspector_ui).
source .ci/headless.sh
source .ci/inspector-ui.sh
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
# Seeded with the notes server (read-only) and alice's bearer token as a custom header.
start_inspector_ui inspector "$server_url" --header "Authorization: Bearer alice-token"
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
