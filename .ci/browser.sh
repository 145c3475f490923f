#!/usr/bin/env bash
# Approval in a real browser: notes_destroy approved, declined and refused on the notes server's
# approval page in headless Chromium, with a plain JSON-RPC client on the MCP side
# (.ci/clients/approval.mjs): alice follows the page's sign-in link, sees the candidates, approves
# note-7 by typing its id, and the client's retry deletes exactly personal/note-7.md; the captured
# approve POST replayed is refused with 409; bob, signed in, is refused alice's approval (403, no
# note shown) and it stays undecided; a declined approval makes the retry's result declined.
#
# Installs what it needs itself, the same way and in the same place as .ci/inspector.sh (whose pinned
# versions it reads, so the two share one install): Debian's chromium (apt-get, when absent), and
# Node, playwright-core and the Inspector from npm under <target>/ci-inspector. playwright-core
# downloads no browser: it starts the system Chromium. The screenshot of the approval page
# (approval-page.png, before any click), approval-failure.png on failure, the server's log and the
# driver's output go to <target>/browser; with UPDATE_SCREENSHOT=1 the screenshot is also copied to
# docs/approval-page.png (the README's). Needs cargo, npm, curl and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

pin() { # a version pinned in .ci/inspector.sh
  local value
  value=$(sed -n "s/^$1=\([0-9][0-9.]*\)\$/\1/p" .ci/inspector.sh | head -n 1)
  [[ -n $value ]] || { echo "no $1=<version> line in .ci/inspector.sh" >&2; exit 1; }
  echo "$value"
}
node_version=$(pin node_version)
inspector_version=$(pin inspector_version)
playwright_version=$(pin playwright_version)
target_dir=${CARGO_TARGET_DIR:-target}
case $target_dir in /*) ;; *) target_dir=$repo/$target_dir ;; esac
node_dir=$target_dir/ci-inspector
out=$target_dir/browser

installed_version() { # the version of an installed npm package, or nothing
  local manifest=$node_dir/node_modules/$1/package.json
  [[ -f $manifest ]] && sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$manifest" | head -n 1
  return 0
}
lap_start=$SECONDS
lap() { # sets $took to the seconds since the last lap (not in a subshell: it keeps its start)
  took="$((SECONDS - lap_start))s"
  lap_start=$SECONDS
}

echo "== Chromium (Debian's)"
chromium_bin=
find_chromium() {
  # The real binary; /usr/bin/chromium is a shell wrapper around it.
  for candidate in /usr/lib/chromium/chromium "$(command -v chromium || true)"; do
    [[ -n $candidate && -x $candidate ]] && { chromium_bin=$candidate; return 0; }
  done
  return 1
}
if ! find_chromium; then
  # Installed as root; with stale package lists (a 404) update them once and try again.
  apt_log=$(mktemp)
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends chromium >"$apt_log" 2>&1 ||
    { apt-get update -q >>"$apt_log" 2>&1 &&
      apt-get install -y -q --no-install-recommends chromium >>"$apt_log" 2>&1; } ||
    { cat "$apt_log" >&2; echo "apt-get could not install chromium" >&2; exit 1; }
  find_chromium || { cat "$apt_log" >&2; echo "chromium is not installed after apt-get install" >&2; exit 1; }
  rm -f "$apt_log"
fi
lap
echo "$("$chromium_bin" --version 2>/dev/null | sed 's/ *$//') at $chromium_bin ($took)"

echo "== Node $node_version and playwright-core@$playwright_version in $node_dir (shared with the Inspector step)"
if [[ $(installed_version node) == "$node_version" && $(installed_version playwright-core) == "$playwright_version" ]]; then
  echo "already installed"
else
  # Exactly the Inspector step's package.json, so that neither step reinstalls after the other.
  mkdir -p "$node_dir"
  cat >"$node_dir/package.json" <<EOF
{
  "name": "mcp-confirm-ci-inspector",
  "private": true,
  "dependencies": {
    "node": "$node_version",
    "@modelcontextprotocol/inspector": "$inspector_version",
    "playwright-core": "$playwright_version"
  }
}
EOF
  (cd "$node_dir" && npm install --no-audit --no-fund --loglevel=error)
fi
node=$node_dir/node_modules/.bin/node
lap
echo "node $("$node" --version), playwright-core $(installed_version playwright-core) ($took)"

echo "== build the notes server"
cargo build -q --example notes_server
server_bin=$target_dir/debug/examples/notes_server
lap
echo "built ($took)"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
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

echo "== in headless Chromium: sign in, approve, replay, another user, decline"
status=0
MCP_URL=$mcp_url WORKSPACE_URI=$workspace DATA_DIR=$data_dir CHROMIUM=$chromium_bin \
  PLAYWRIGHT_FROM=$node_dir OUT=$out "$node" .ci/clients/approval.mjs 2>&1 | tee "$out/approval-driver.out" || status=$?
[[ $status -eq 0 ]] || die "the browser drive failed (exit $status); screenshots in $out"
lap
echo "drove the page ($took)"

echo "== the notes on disk"
notes_after=$(cd "$data_dir" && find . -type f | sort)
gone=$(comm -23 <(echo "$notes_before") <(echo "$notes_after"))
added=$(comm -13 <(echo "$notes_before") <(echo "$notes_after"))
echo "before: $(echo $notes_before)"
echo "after:  $(echo $notes_after)"
[[ $gone == "./personal/note-7.md" && -z $added ]] ||
  die "expected exactly ./personal/note-7.md to be gone; gone: [$(echo $gone)], new: [$(echo $added)]"
! grep -q "panicked" "$server_log" || die "the notes server panicked"
echo "exactly personal/note-7.md is gone, the other notes remain"

echo "screenshot: $out/approval-page.png"
if [[ ${UPDATE_SCREENSHOT:-} == 1 ]]; then
  mkdir -p docs
  cp "$out/approval-page.png" docs/approval-page.png
  echo "copied to docs/approval-page.png"
fi
echo "== approval in the browser passed in ${SECONDS}s"
