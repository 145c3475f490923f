#!/usr/bin/env bash
# The official MCP conformance suite, 2026-07-28 requirement set, against
# tools/src/bin/conformance_server/ (rmcp behind HostOriginLayer and ConfirmLayer).
#
# Installs Node 22 and the suite from npm into <target>/ci-node (reused when the pinned versions are
# already there), builds the fixture, starts it on a free port, runs the suite with
# .ci/conformance-baseline.yml and exits with the suite's status, or 1 when a not-scored scenario
# the fixture implements (http-custom-header-server-validation, the Tasks extension's tasks-*) has
# a check that did not succeed. Results and the server log go to <target>/conformance (override
# with CONFORMANCE_OUT). Needs cargo, npm and python3; the system Node may be older, the suite runs
# on the Node 22 it installs.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

# Node 22 and the suite (pinned in .ci/ci-node.sh): target_dir, node_dir, suite_dir, PATH.
source .ci/ci-node.sh
out=${CONFORMANCE_OUT:-$target_dir/conformance}
case $out in /*) ;; *) out=$repo/$out ;; esac
baseline=$repo/.ci/conformance-baseline.yml

echo "== build the fixture"
bash .ci/build-bins.sh
server_bin=$target_dir/debug/conformance_server

echo "== start it on a free port"
rm -rf "$out"
mkdir -p "$out"
server_log=$out/server.log
# The file exists before the fixture starts: the background job opens its own redirection,
# possibly after the loop below first reads it (a loaded machine once lost that race).
: >"$out/server.out"
"$server_bin" --addr 127.0.0.1:0 >>"$out/server.out" 2>"$server_log" &
server=$!
stop_server() {
  if kill -0 "$server" 2>/dev/null; then
    kill "$server"
    wait "$server" 2>/dev/null || true
  fi
}
trap stop_server EXIT
url=
for _ in $(seq 1 100); do
  url=$(sed -n 's/^.* listening on \(http:[^ ]*\)$/\1/p' "$out/server.out")
  [[ -n $url ]] && break
  kill -0 "$server" 2>/dev/null || { cat "$server_log" >&2; echo "the fixture exited" >&2; exit 1; }
  sleep 0.1
done
[[ -n $url ]] || { echo "the fixture did not report its address" >&2; exit 1; }
echo "fixture at $url (pid $server)"

echo "== conformance suite, --requirements 2026-07-28"
status=0
(cd "$node_dir" && npx --no-install conformance server --url "$url" \
  --requirements 2026-07-28 --expected-failures "$baseline" -o "$out") || status=$?

stop_server
trap - EXIT
echo "results in $out (server log: $server_log)"
echo "== conformance suite exited with $status after ${SECONDS}s"

# http-custom-header-server-validation is not scored by the suite, so the baseline never judges
# it; the fixture's x-mcp-header tool passes through ConfirmLayer, and every check must succeed.
echo "== http-custom-header-server-validation through the layer"
python3 - "$out" <<'PY' || status=1
import glob, json, sys
runs = glob.glob(f"{sys.argv[1]}/server-http-custom-header-server-validation-*/checks.json")
if not runs:
    sys.exit("no results for http-custom-header-server-validation")
checks = json.load(open(runs[0]))
bad = [f"{c['id']} {c['name']}: {c['status']} {c.get('errorMessage', '')}" for c in checks
       if c["status"] != "SUCCESS"]
print(f"{len(checks) - len(bad)} of {len(checks)} checks passed")
if bad or not checks:
    sys.exit("\n".join(bad) or "no checks")
PY

# The Tasks extension (SEP-2663) scenarios are run by the same --requirements run (its not_scored
# list, reason "extension"), so the baseline never judges them either. The fixture implements every
# one through ConfirmLayer: each scenario the pinned requirements file names must have results, and
# every check must succeed.
echo "== tasks-* (the Tasks extension) through the layer"
requirements=$suite_dir/requirements/2026-07-28.yaml
python3 - "$out" "$requirements" <<'PY' || status=1
import glob, json, re, sys
out, requirements = sys.argv[1], sys.argv[2]
# Checks the suite itself always reports SKIPPED, never SUCCESS, whatever the server does: allowed
# as SKIPPED, and only as that.
SUITE_SKIPS = {
    # A placeholder: notifications/tasks arrive on subscriptions/listen, which its harness does not
    # open yet (the suite's own note). The fixture offers no subscriptions/listen.
    ("tasks-status-notifications", "tasks-status-notifications"),
}
listed = re.findall(r"- scenario: (tasks-[\w-]+)\s+leg: server", open(requirements).read())
expected = sorted(set(listed))
if not expected:
    sys.exit(f"no server tasks-* scenarios in {requirements}")
bad, scenarios_ok, checks_ok, checks_all, skipped = [], 0, 0, 0, 0
for scenario in expected:
    runs = glob.glob(f"{out}/server-{scenario}-2*/checks.json")
    if len(runs) != 1:
        bad.append(f"{scenario}: {len(runs)} result sets, expected 1")
        continue
    checks = json.load(open(runs[0]))
    failed = []
    for c in checks:
        if c["status"] == "SUCCESS":
            checks_ok += 1
        elif c["status"] == "SKIPPED" and (scenario, c["id"]) in SUITE_SKIPS:
            skipped += 1
        else:
            failed.append(f"{scenario} {c['id']}: {c['status']} {c.get('errorMessage', '')}")
    checks_all += len(checks)
    if not checks:
        failed.append(f"{scenario}: no checks")
    scenarios_ok += not failed
    bad += failed
print(f"tasks-*: {scenarios_ok} of {len(expected)} scenarios and {checks_ok} of {checks_all} "
      f"checks succeeded ({skipped} skipped by the suite itself)")
if bad:
    sys.exit("\n".join(bad))
PY

# Scored or not, no check of any scenario may fail or warn: the fixture serves every tool and
# feature the suite calls (json-schema-2020-12 included). SKIPPED (what the suite cannot observe)
# and INFO (a note, no verdict) are the suite's own, and stay allowed.
echo "== every scenario: no FAILURE and no WARNING"
python3 - "$out" <<'PY' || status=1
import glob, json, sys
runs = glob.glob(f"{sys.argv[1]}/server-*/checks.json")
if not runs:
    sys.exit("no results")
counts, bad = {}, []
for run in runs:
    for c in json.load(open(run)):
        counts[c["status"]] = counts.get(c["status"], 0) + 1
        if c["status"] not in ("SUCCESS", "SKIPPED", "INFO"):
            bad.append(f"{run.split('/')[-2]} {c['id']}: {c['status']} {c.get('errorMessage', '')}")
print(f"{len(runs)} scenarios: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
if bad:
    sys.exit("\n".join(bad))
PY
exit "$status"
