#!/usr/bin/env bash
# Started in the background by .ci/run before its first build: fetches and installs what the
# later steps need from the network (Debian's chromium; Node 22 with the conformance suite; Node
# 22 with the MCP Inspector and playwright-core; the official TypeScript and Python clients and
# tools/peer-ts's packages) while the Rust builds keep both cores busy. Each install is the one
# the step itself runs, with the step's own pinned versions, only earlier: every step checks again
# and installs whatever is missing itself, so a failure here costs time, never a check, and its
# error shows in the step that needed the package. Each install's output goes to
# <target>/ci-prefetch/<name>.log, and one line per install says how it went and how long it took.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
target_dir=${CARGO_TARGET_DIR:-target}
case $target_dir in /*) ;; *) target_dir=$repo/$target_dir ;; esac
logs=$target_dir/ci-prefetch
mkdir -p "$logs"

# Runs `$2...` with its output in $logs/$1.log, then prints one line about it.
fetch() {
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" >"$logs/$name.log" 2>&1 || rc=$?
  if ((rc == 0)); then
    echo "prefetch: $name in $((SECONDS - start)) s"
  else
    echo "prefetch: $name FAILED (exit $rc; the step that needs it installs it again): $logs/$name.log"
  fi
}

# The two installers written to be sourced run in a shell of their own (`bash -c`: `set -e`
# holds there, where a subshell tested by `||` would ignore it).
browser() { bash -c 'set -euo pipefail; headless_no_notes_server=1; source .ci/headless.sh'; }
conformance_node() { repo=$repo bash -c 'set -euo pipefail; source .ci/ci-node.sh'; }

fetch browser browser &
fetch conformance-suite conformance_node &
fetch clients bash .ci/install-clients.sh &
wait
