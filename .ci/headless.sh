# Sourced by .ci/inspector.sh, .ci/gateway-inspector.sh, .ci/browser.sh and .ci/passkeys.sh: what
# they need to drive headless Chromium.
#
# Installs, when absent: Debian's chromium (apt-get, as root), and under <target>/ci-inspector
# Node, the MCP Inspector and playwright-core from npm, at the versions pinned here (one install
# for all of them). playwright-core downloads no browser: it starts the system Chromium. Defines
# $repo, $target_dir, $node_dir, $out (<target>/browser), $chromium_bin, $node, and lap (sets
# $took to the seconds since the last lap). Then it builds the notes server ($server_bin), unless
# the sourcing script set headless_no_notes_server=1 (one that drives another server).

node_version=22.23.3
inspector_version=2.12.0
playwright_version=1.65.2

repo=$PWD
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
echo "node $("$node" --version), playwright-core $(installed_version playwright-core) ($took)"

if [[ ${headless_no_notes_server:-} != 1 ]]; then
  echo "== build the notes server"
  bash .ci/build-bins.sh
  server_bin=$target_dir/debug/examples/notes_server
  lap
  echo "built ($took)"
fi

# Exactly ./personal/note-7.md is gone from data dir $1 since the file list $2, nothing added.
expect_only_gone() { # data-dir notes-before expected-gone (sorted, one ./<ws>/<id>.md a line)
  local notes_after gone added
  notes_after=$(cd "$1" && find . -type f | sort)
  gone=$(comm -23 <(echo "$2") <(echo "$notes_after"))
  added=$(comm -13 <(echo "$2") <(echo "$notes_after"))
  echo "before: $(echo $2)"
  echo "after:  $(echo $notes_after)"
  [[ $gone == "$3" && -z $added ]] ||
    die "expected exactly [$(echo $3)] to be gone; gone: [$(echo $gone)], new: [$(echo $added)]"
  echo "exactly $(echo $3) gone, the other notes remain"
}
expect_only_note_7_gone() { expect_only_gone "$1" "$2" "./personal/note-7.md"; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
