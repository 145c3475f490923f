#!/usr/bin/env bash
# Approval in a real browser: notes_destroy approved, declined and refused on the notes server's
# approval page in headless Chromium, with a plain JSON-RPC client on the MCP side
# (.ci/clients/approval.mjs): alice follows the page's sign-in link, sees the candidates, approves
# note-7 by typing its id, and the client's retry deletes exactly personal/note-7.md; the captured
# approve POST replayed is refused with 409; bob, signed in, is refused alice's approval (403, no
# note shown) and it stays undecided; a declined approval makes the retry's result declined; a
# standing approval alice grants (deleting personal/note-1.md) is listed on her /standing page,
# revoked there, and her next call is asked again. Then (.ci/clients/batch.mjs) the official
# TypeScript client calls notes_discard five times at once, alice approves the five in one decision
# on the page ("Approve 5 requests?", one row per call), and each call deletes exactly its note.
#
# Installs what it needs itself through .ci/headless.sh, shared with .ci/inspector.sh (one install:
# Debian's chromium, and Node, playwright-core and the Inspector from npm under
# <target>/ci-inspector; playwright-core starts the system Chromium). The screenshot of the approval page
# (approval-page.png, before any click), approval-failure.png on failure, the server's log and the
# driver's output go to <target>/browser; with UPDATE_SCREENSHOT=1 the screenshot is also copied to
# docs/approval-page.png (the README's). Needs cargo, npm, curl and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
# Chromium, Node and playwright-core (and the Inspector), and the notes server.
source .ci/headless.sh
work=$(mktemp -d)
mkdir -p "$out"
rm -f "$out"/approval-*
server_log=$out/approval-server.log
server=
cleanup() {
  if [[ -n $server ]] && kill -0 "$server" 2>/dev/null; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
die() {
  echo "FAILED after ${SECONDS}s: $*" >&2
  echo "--- notes server log ($server_log) ---" >&2; cat "$server_log" >&2 || true
  exit 1
}

echo "== start the notes server on a fresh data dir and a free port"
mcp_url=
for _attempt in 1 2 3; do # the port we found free may be taken before the server binds it
  port=$(free_port)
  : >"$server_log" # before the server's own redirection creates it: the loop below reads it at once
  NO_COLOR=1 "$server_bin" --addr "127.0.0.1:$port" --data-dir "$work/notes-$_attempt" >"$server_log" 2>&1 &
  server=$!
  for _ in $(seq 1 100); do
    # It prints its URL once it is listening.
    mcp_url=$(sed -n 's|^notes MCP server .* on \(http://127\.0\.0\.1:[0-9]*/mcp\)$|\1|p' "$server_log" || true)
    [[ -n $mcp_url ]] && break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  [[ -n $mcp_url ]] && break
  kill -0 "$server" 2>/dev/null && die "the notes server did not print its URL within 10 s"
  grep -qi "in use" "$server_log" || die "the notes server exited"
  echo "port $port was taken, trying another"
  server=
done
[[ -n $mcp_url ]] || die "the notes server found no free port in three tries"
[[ $mcp_url == "http://127.0.0.1:$port/mcp" ]] || die "the server prints $mcp_url, not port $port"
curl -s -o /dev/null "$mcp_url" || die "the notes server does not answer on $mcp_url"
data_dir=$(realpath "$work/notes-$_attempt")
workspace="file://$data_dir/personal"
notes_before=$(cd "$data_dir" && find . -type f | sort)
grep -qx './personal/note-7.md' <<<"$notes_before" || die "no personal/note-7.md to start with: $notes_before"
lap
echo "notes server at $mcp_url, workspace personal is $workspace ($took)"

echo "== in headless Chromium: sign in, approve, replay, another user, decline, standing"
status=0
MCP_URL=$mcp_url WORKSPACE_URI=$workspace DATA_DIR=$data_dir CHROMIUM=$chromium_bin \
  PLAYWRIGHT_FROM=$node_dir OUT=$out "$node" .ci/clients/approval.mjs 2>&1 | tee "$out/approval-driver.out" || status=$?
[[ $status -eq 0 ]] || die "the browser drive failed (exit $status); screenshots in $out"
lap
echo "drove the page ($took)"

echo "== in headless Chromium, with the official TypeScript client: five parallel calls, one decision"
bash .ci/install-clients.sh
status=0
MCP_URL=$mcp_url WORKSPACE_URI=$workspace CHROMIUM=$chromium_bin PLAYWRIGHT_FROM=$node_dir \
  CLIENT_FROM=$target_dir/ci-clients/ts OUT=$out "$node" .ci/clients/batch.mjs 2>&1 | tee "$out/batch-driver.out" || status=$?
[[ $status -eq 0 ]] || die "the batch drive failed (exit $status); screenshots in $out"
lap
echo "drove the batch ($took)"

echo "== the notes on disk"
expect_only_gone "$data_dir" "$notes_before" "$(printf './personal/note-1.md\n./personal/note-7.md')"
! grep -q "panicked" "$server_log" || die "the notes server panicked"

echo "screenshot: $out/approval-page.png"
if [[ ${UPDATE_SCREENSHOT:-} == 1 ]]; then
  mkdir -p docs
  cp "$out/approval-page.png" docs/approval-page.png
  echo "copied to docs/approval-page.png"
fi
echo "== approval in the browser passed in ${SECONDS}s"
