#!/usr/bin/env bash
# The MCP Inspector's web UI (@modelcontextprotocol/inspector 2.12.0, "modern" protocol era, i.e.
# MCP 2026-07-28) drives notes_delete's form confirmation against the notes server in headless
# Chromium: connect over Streamable HTTP as alice, execute notes_delete on the personal workspace's
# "Groceries", pick the second note the form offers (note-7), tick the confirmation, submit; then
# exactly personal/note-7.md must be gone from disk and every other note still there.
#
# Installs what it needs itself: Debian's chromium (apt-get, when absent), and Node 22 (the Inspector
# needs >= 22.19), the Inspector and playwright-core from npm under <target>/ci-inspector (reused
# when the pinned versions are there). playwright-core downloads no browser: it starts the system
# Chromium. Screenshots (inspector-form.png, inspector-done.png, inspector-failure.png on failure),
# the MCP traffic the UI saw and both servers' logs go to <target>/browser. Needs cargo, npm, curl
# and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

node_version=22.23.3
inspector_version=2.12.0
playwright_version=1.65.2
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

echo "== Node $node_version, @modelcontextprotocol/inspector@$inspector_version and playwright-core@$playwright_version in $node_dir"
if [[ $(installed_version node) == "$node_version" &&
      $(installed_version @modelcontextprotocol/inspector) == "$inspector_version" &&
      $(installed_version playwright-core) == "$playwright_version" ]]; then
  echo "already installed"
else
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
echo "node $("$node" --version) ($took)"

echo "== build the notes server"
cargo build -q --example notes_server
server_bin=$target_dir/debug/examples/notes_server
lap
echo "built ($took)"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
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
INSPECTOR_URL=$ui_url NOTES_SERVER="127.0.0.1:$port" WORKSPACE_URI=$workspace CHROMIUM=$chromium_bin \
  PLAYWRIGHT_FROM=$node_dir OUT=$out "$node" .ci/clients/inspector.mjs 2>&1 | tee "$out/driver.out" || status=$?
[[ $status -eq 0 ]] || die "the browser drive failed (exit $status); screenshots and logs in $out"
lap
echo "drove the form ($took)"

echo "== the notes on disk"
notes_after=$(cd "$work/notes" && find . -type f | sort)
gone=$(comm -23 <(echo "$notes_before") <(echo "$notes_after"))
added=$(comm -13 <(echo "$notes_before") <(echo "$notes_after"))
echo "before: $(echo $notes_before)"
echo "after:  $(echo $notes_after)"
[[ $gone == "./personal/note-7.md" && -z $added ]] ||
  die "expected exactly ./personal/note-7.md to be gone; gone: [$(echo $gone)], new: [$(echo $added)]"
echo "exactly personal/note-7.md is gone, the other notes remain"
echo "screenshots: $out/inspector-form.png $out/inspector-done.png"
echo "== MCP Inspector step passed in ${SECONDS}s"
