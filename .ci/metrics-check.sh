#!/usr/bin/env bash
# Scrapes a Prometheus text page with curl and checks it against the expected series on stdin.
#
#   bash .ci/metrics-check.sh URL [SECONDS] <<'EOF'
#   mcp_confirm_decisions_total{tool="notes_delete",outcome="declined",channel="form"} 1
#   mcp_confirm_refusals_total none
#   mcp_confirm_log_checkpoint_timestamp_seconds{backend="file"} now
#   EOF
#
# Every metric name that appears on the left is checked exactly: each expected series must be
# on the page with that value, and the page may have no other series of that name (`NAME none`:
# none at all, as an exporter shows a counter nothing has moved). `now` is a Unix time within
# two minutes of this machine's clock. Label order does not matter; names not listed are not
# checked (a histogram is checked through its `_count`, `_sum` or `_bucket` lines, as listed).
# Until everything matches, the page is scraped again every half second for up to SECONDS
# (default 0: once); then each difference is printed, naming the series, the expected and the
# seen value, and the status is 1.
set -euo pipefail
url=$1
within=${2:-0}
expected=$(cat)
deadline=$(($(date +%s) + within))
compare=$(
  cat <<'PY'
import re, sys, time

LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')

def series(text):
    """`name{labels} value` -> (name, sorted labels), value; and the series as written."""
    m = re.fullmatch(r'([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?', text.strip())
    if not m:
        raise ValueError(f"not a series line: {text!r}")
    name, labels, value = m.groups()
    pairs, rest = [], labels or ""
    while rest.strip():
        lm = LABEL.match(rest)
        if not lm:
            raise ValueError(f"bad labels in: {text!r}")
        pairs.append((lm.group(1), lm.group(2)))
        rest = rest[lm.end():]
    return (name, tuple(sorted(pairs))), value, text.strip().rsplit(None, 1)[0]

def matches(want, seen):
    if want == "now":
        return abs(float(seen) - time.time()) <= 120
    return float(want) == float(seen)

want, names, shown = {}, set(), {}
for line in sys.argv[1].splitlines():
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    if re.fullmatch(r'\S+\s+none', line):
        names.add(line.split()[0])
        continue
    key, value, shown[key] = series(line)
    want[key] = value
    names.add(key[0])

seen = {}
for line in sys.stdin.read().splitlines():
    if line.strip() and not line.startswith("#"):
        key, value, text = series(line)
        if key[0] in names:
            seen[key] = value
            shown.setdefault(key, text)

problems = []
for key, value in want.items():
    if key not in seen:
        problems.append(f"{shown[key]}: expected {value}, absent from the page")
    elif not matches(value, seen[key]):
        problems.append(f"{shown[key]}: expected {value}, seen {seen[key]}")
for key, value in seen.items():
    if key not in want:
        problems.append(f"{shown[key]}: expected none, seen {value}")
if problems:
    print("\n".join(problems))
    sys.exit(1)
print(f"{len(want)} series as expected, {len(names)} names checked exactly")
PY
)
while :; do
  page=$(curl -fsS "$url" 2>&1) && rc=0 || rc=$?
  if [ "$rc" = 0 ]; then
    report=$(python3 -c "$compare" "$expected" <<<"$page") && rc=0 || rc=$?
  else
    report="could not scrape: $page"
  fi
  if [ "$rc" = 0 ]; then
    echo "metrics at $url: $report"
    exit 0
  fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "metrics at $url differ from what was expected:" >&2
    sed 's/^/  /' <<<"$report" >&2
    exit 1
  fi
  sleep 0.5
done
