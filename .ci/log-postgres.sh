#!/usr/bin/env bash
# Two notes servers share one replay store and one decision log in PostgreSQL: a confirmed
# deletion through each, both stopped, the log copied out (`mcp-confirm-audit pull`) and
# verified offline: one sequence, both instances' records, signed, sound.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pg=${POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
bash .ci/build-bins.sh
work=$(mktemp -d)
table="ci_decisions_$$_$RANDOM"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
start() { # start NAME PORT
  (cd "$work" && exec "$root/target/debug/examples/notes_server" --addr "127.0.0.1:$2" \
     --replay-store "$pg" --audit-postgres "$pg" --audit-table "$table") >"$work/$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$2/mcp" && return 0; sleep 0.2; done
  cat "$work/$1.log"; return 1
}
a=$(free_port); start a "$a"
b=$(free_port); start b "$b"
client() { (cd "$work" && "$root/target/debug/examples/notes_client" --url "http://127.0.0.1:$1/mcp" "${@:2}"); }
client "$a" --choose 2 delete --workspace personal Groceries | tee "$work/out"; grep -q "Deleted note-7" "$work/out"
client "$b" --choose 1 delete --workspace personal Groceries | tee "$work/out"; grep -q "Deleted note-3" "$work/out"
# Stopped (SIGTERM), each flushes; the signing instance signs what both wrote.
for p in "${pids[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done
pids=()
audit() { "$root/target/debug/mcp-confirm-audit" "$@"; }
vkey=$(grep -o 'notes.example/decisions+[0-9a-f]*+[A-Za-z0-9+/=]*' "$work/a.log" | head -1)
audit pull --postgres "$pg" --table "$table" --dir "$work/pulled"
audit verify --dir "$work/pulled" --key "$vkey" --witness "$work/notes-data-decisions.witness" | tee "$work/out"
grep -q "; sound relative to the checkpoint of [0-9]* records kept elsewhere$" "$work/out"
audit show --dir "$work/pulled" --event accepted | tee "$work/out"
test "$(grep -c '"chosen":"note-7"' "$work/out")" = 1
test "$(grep -c '"chosen":"note-3"' "$work/out")" = 1
test "$(python3 -c 'import json,sys; print(len({json.loads(l)["instance"] for l in open(sys.argv[1])}))' "$work/out")" = 2
# The tables refuse TRUNCATE like UPDATE and DELETE.
if psql -q "$pg" -c "TRUNCATE $table" 2>"$work/err"; then echo "TRUNCATE went through"; exit 1; fi
grep -q "append-only" "$work/err"
psql -q "$pg" -c "DROP TABLE $table, ${table}_checkpoints; DROP FUNCTION ${table}_append_only()" || true
echo "two instances, one PostgreSQL decision log: sound"
