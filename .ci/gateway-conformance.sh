#!/usr/bin/env bash
# The official MCP conformance suite (2026-07-28 requirement set) through the confirmation gateway
# in front of the conformance fixture (tools/src/bin/conformance_server/): nothing that passes
# without the gateway may be lost with it.
#
# One fixture; the suite runs twice with .ci/conformance-baseline.yml: directly against the
# fixture, then through `mcp-confirm-gateway` (one route, /mcp, to the fixture). Every check that
# succeeds directly must succeed through the gateway (compared check by check, scenario by
# scenario); the script fails otherwise and names each check lost. The suite's exit status is
# reported for both runs but not judged here (.ci/conformance.sh judges the fixture).
#
# The gateway's file allows each tool the suite calls. The suite's fixture tools carry no
# annotations (the spec's default: they may be destructive), so the gateway would ask its own
# yes/no form before each, and the suite would get that form instead of the tool's answer. That
# includes the two tools the fixture's own ConfirmLayer confirms (request-state, tampered-state):
# the suite answers the fixture's form (key `confirm`, field `ok`) and expects the fixture to
# reject a tampered state; a form of the gateway's first would be answered with `{ok: true}`,
# which is no yes to it, and input-required-result-request-state would fail. `check` proves every
# tool passes.
#
# The suite sends no credentials and has no option to (no header flag, no environment variable:
# only per-scenario headers of its own), and the gateway lets no caller in without a bearer
# token. A small forwarder (python3, stdlib) stands between the suite and the gateway: it adds
# `Authorization: Bearer …`, passes everything else as it came (Host and Origin included, so the
# gateway sees what the suite sent) and streams answers back unbuffered.
#
# Reuses Node 22 and the suite in <target>/ci-node (.ci/ci-node.sh) and the binaries the other
# steps build (.ci/build-bins.sh, every step's one build command: after the first, it builds
# nothing). Results and logs go to <target>/gateway-conformance
# (override with GATEWAY_CONFORMANCE_OUT). Needs cargo, npm, curl and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

# Node 22 and the suite (pinned in .ci/ci-node.sh): target_dir, node_dir, suite_dir, PATH.
source .ci/ci-node.sh
out=${GATEWAY_CONFORMANCE_OUT:-$target_dir/gateway-conformance}
case $out in /*) ;; *) out=$repo/$out ;; esac
baseline=$repo/.ci/conformance-baseline.yml

echo "== build the fixture and the gateway (built already by the earlier steps)"
bash .ci/build-bins.sh
fixture_bin=$target_dir/debug/conformance_server
gateway_bin=$target_dir/debug/mcp-confirm-gateway

rm -rf "$out"
mkdir -p "$out"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
die() {
  echo "gateway-conformance: $*" >&2
  for f in "$out"/*.log; do echo "--- $f (last 40 lines)"; tail -n 40 "$f"; done >&2
  exit 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$1/" && return 0; sleep 0.1; done; return 1; }

echo "== start the fixture on a free port"
# The file exists before the fixture starts (see .ci/conformance.sh).
: >"$out/fixture.out"
"$fixture_bin" --addr 127.0.0.1:0 >>"$out/fixture.out" 2>"$out/fixture.log" &
pids+=($!)
fixture=
for _ in $(seq 1 100); do
  fixture=$(sed -n 's/^.* listening on \(http:[^ ]*\)$/\1/p' "$out/fixture.out")
  [[ -n $fixture ]] && break
  kill -0 "${pids[0]}" 2>/dev/null || die "the fixture exited"
  sleep 0.1
done
[[ -n $fixture ]] || die "the fixture did not report its address"
echo "fixture at $fixture"

# Every tool the suite calls: the fixture's (tools/src/bin/conformance_server/), none annotated
# but json_schema_2020_12_tool (read-only: it passes as it is). test_custom_header_region is found
# by its x-mcp-header annotation (http-custom-header-server-validation); the task tools are the
# Tasks extension's (tasks-*).
allowed=(
  test_simple_text test_image_content test_audio_content test_embedded_resource
  test_multiple_content_types test_error_handling test_tool_with_progress
  test_logging_tool test_missing_capability test_streaming_elicitation
  test_custom_header_region
  test_input_required_result_elicitation test_input_required_result_sampling
  test_input_required_result_list_roots test_input_required_result_multiple_inputs
  test_input_required_result_multi_round test_input_required_result_capabilities
  # Confirmed by the fixture's own ConfirmLayer, which the suite's scenarios answer.
  test_input_required_result_request_state test_input_required_result_tampered_state
  # The Tasks extension.
  test_tool_with_task greet slow_compute failing_job protocol_error_job confirm_delete multi_input
)
gw_port=$(free_port)
token=conformance-token-0123456789
echo "conformance $token" >"$out/tokens"
echo "$token" >"$out/token"
{
  cat <<TOML
listen = "127.0.0.1:$gw_port"
[auth]
kind = "static_tokens"
file = "tokens"
[[route]]
path = "/mcp"
upstream = "$fixture"
TOML
  for tool in "${allowed[@]}"; do printf '[route.tools.%s]\npolicy = "allow"\n' "$tool"; done
} >"$out/gateway.toml"

echo "== check: every tool the fixture lists passes the gateway"
"$gateway_bin" check --config "$out/gateway.toml" >"$out/check.out" 2>"$out/check.log" ||
  die "check failed: $(cat "$out/check.out")"
cat "$out/check.out"
# `  NAME  VERDICT  REASON`, or `  NAME  (the operator names it; the upstream does not list it)`.
not_passing=$(awk '/^  / && $2 != "pass" { printf "%s ", $1 }' "$out/check.out")
[[ -z $not_passing ]] || die "not passing as they are (allow what the suite calls, drop what the fixture no longer lists): $not_passing"

"$gateway_bin" --config "$out/gateway.toml" >"$out/gateway.log" 2>&1 &
pids+=($!)
wait_port "$gw_port" || die "the gateway did not start"
status=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$gw_port/mcp" \
  -H 'content-type: application/json' -d '{}')
[[ $status == 401 ]] || die "without a token the gateway answered HTTP $status, not 401"

# The forwarder: every request as it came, plus the bearer token; answers streamed back as they
# come (an event stream chunk by chunk, flushed), each connection closed after its answer so no
# length has to be known.
cat >"$out/forwarder.py" <<'PY'
import http.client, http.server, os, sys

port_file, host, port, token_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
token = open(token_file).read().strip()
NOT_FORWARDED = {"connection", "keep-alive", "proxy-connection", "te", "trailer",
                 "transfer-encoding", "upgrade", "authorization"}


class Forward(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def forward(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else None
        upstream = http.client.HTTPConnection(host, port, timeout=120)
        # Host as the suite sent it (dns-rebinding-protection sends another one on purpose).
        upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for name, value in self.headers.items():
            if name.lower() not in NOT_FORWARDED:
                upstream.putheader(name, value)
        upstream.putheader("Authorization", f"Bearer {token}")
        upstream.endheaders(body)
        answer = upstream.getresponse()
        self.send_response_only(answer.status, answer.reason)
        for name, value in answer.getheaders():
            if name.lower() not in NOT_FORWARDED:
                self.send_header(name, value)
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        try:
            while chunk := answer.read1(65536):
                self.wfile.write(chunk)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the suite stops reading an event stream once it holds its answer
        upstream.close()

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = do_OPTIONS = do_HEAD = forward

    def log_message(self, format, *args):
        sys.stderr.write("forwarder: " + format % args + "\n")


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forward)
server.daemon_threads = True
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
PY
python3 "$out/forwarder.py" "$out/forwarder.port" 127.0.0.1 "$gw_port" "$out/token" \
  >"$out/forwarder.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [[ -s $out/forwarder.port ]] && break; sleep 0.1; done
[[ -s $out/forwarder.port ]] || die "the forwarder did not start"
through="http://127.0.0.1:$(cat "$out/forwarder.port")/mcp"
echo "gateway at http://127.0.0.1:$gw_port/mcp, the suite's way in (with the token) at $through"

suite() { # suite NAME URL -> the suite's exit status in $out/NAME.status
  local rc=0
  echo "== conformance suite, --requirements 2026-07-28, $1 ($2)"
  (cd "$node_dir" && npx --no-install conformance server --url "$2" \
    --requirements 2026-07-28 --expected-failures "$baseline" -o "$out/$1") \
    >"$out/suite-$1.txt" 2>&1 || rc=$?
  grep -E '^Total:' "$out/suite-$1.txt" || true
  echo "$rc" >"$out/$1.status"
}
suite direct "$fixture"
suite gateway "$through"
calls=$(grep -c 'tools/call' "$out/gateway.log" || true)
[[ $calls -gt 0 ]] || die "the gateway logged no tools/call: the suite did not go through it"
echo "the gateway logged $calls tools/call"

echo "== compare: every check that succeeds directly succeeds through the gateway"
result=0
python3 - "$out" <<'PY' || result=1
import collections, glob, json, re, sys

out = sys.argv[1]


def load(run):
    """{scenario: Counter((check id, status))}, the statuses' totals, and each check's messages."""
    scenarios, totals, messages = {}, collections.Counter(), collections.defaultdict(list)
    for path in glob.glob(f"{out}/{run}/server-*/checks.json"):
        name = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", path.split("/")[-2])
        name = name.removeprefix("server-")
        checks = json.load(open(path))
        scenarios[name] = collections.Counter((c["id"], c["status"]) for c in checks)
        totals.update(c["status"] for c in checks)
        for c in checks:
            if c.get("errorMessage"):
                messages[(name, c["id"])].append(c["errorMessage"])
    return scenarios, totals, messages


runs = {run: load(run) for run in ("direct", "gateway")}
for run, (scenarios, totals, _) in runs.items():
    status = open(f"{out}/{run}.status").read().strip()
    print(f"{run:>8}: {len(scenarios)} scenarios, "
          + ", ".join(f"{n} {s}" for s, n in sorted(totals.items()))
          + f"; the suite exited with {status}")
direct, through = runs["direct"][0], runs["gateway"][0]
if not direct:
    sys.exit("no results directly")
lost, other = [], []
for scenario in sorted(set(direct) | set(through)):
    d, g = direct.get(scenario), through.get(scenario)
    if g is None:
        lost.append(f"{scenario}: no results through the gateway")
        continue
    if d is None:
        other.append(f"{scenario}: results through the gateway only")
        continue
    for check in sorted({c for c, _ in d} | {c for c, _ in g}):
        ok_d, ok_g = d[(check, "SUCCESS")], g[(check, "SUCCESS")]
        seen_d = sorted(s for (c, s), n in d.items() if c == check for _ in range(n))
        seen_g = sorted(s for (c, s), n in g.items() if c == check for _ in range(n))
        line = f"{scenario} {check}: directly {seen_d}, through the gateway {seen_g}"
        if ok_g < ok_d:
            said = runs["gateway"][2].get((scenario, check))
            lost.append(line + (f" ({'; '.join(said)})" if said else ""))
        elif seen_d != seen_g:
            other.append(line)
for line in other:
    print(f"differs (nothing lost): {line}")
for line in lost:
    print(f"LOST through the gateway: {line}")
if lost:
    sys.exit(f"{len(lost)} check(s) succeed directly and not through the gateway; results in "
             f"{out}/direct and {out}/gateway, the gateway's log in {out}/gateway.log")
print("nothing lost: every check that succeeds directly succeeds through the gateway")
PY

# Not in the suite: a Host naming another server, without an Origin (DNS rebinding from a page
# that sends none). The fixture refuses it (HostOriginLayer); the upstream behind the gateway never
# sees the caller's Host, so the gateway must refuse it at its edge, as directly: both 403.
probe() {
  curl -s -o /dev/null -w '%{http_code}' -X POST "$1" -H 'Host: evil.example.com' \
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: server/discover' \
    -d '{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
}
direct_host=$(probe "$fixture")
gateway_host=$(probe "$through")
echo "Host: evil.example.com without an Origin: directly HTTP $direct_host, through the gateway HTTP $gateway_host"
if [[ $direct_host != 403 || $gateway_host != 403 ]]; then
  echo "a foreign Host must be refused (403) directly and through the gateway" >&2
  result=1
fi

echo "results in $out"
if [[ $result != 0 ]]; then
  echo "== gateway-conformance: FAILED" >&2
  exit 1
fi
echo "== gateway-conformance: passed"
