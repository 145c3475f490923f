#!/usr/bin/env bash
# The official TypeScript and Python MCP clients run accept, decline and cancel of notes_delete
# against the notes server, and the Python client (through its Tasks-extension claim) accepts and
# cancels the queued notes_purge; after each run the note files on disk are checked. Both clients
# also choose the standing option ("also allow notes_delete on workspace personal for the next
# 10 minutes"): the next call in that workspace runs without a form, one in another workspace is
# asked. Installs both clients under target/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work="$root/target/ci-clients"
bash .ci/install-clients.sh

bash .ci/build-bins.sh
server_bin="$root/target/debug/examples/notes_server"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run_client() { # client action url workspace -> prints the client's JSON line
  local client=$1 action=$2 url=$3 ws=$4
  local args="{\"workspaceUri\":\"$ws\",\"title\":\"Groceries\"}"
  if [ "$action" = standing ]; then
    # Groceries (three notes: the form, "standing" chosen), then Taxes 2026 in the same
    # workspace (one note: no form), then Sprint plan in the team workspace (the form again).
    local taxes="{\"workspaceUri\":\"$ws\",\"title\":\"Taxes 2026\"}"
    local team="{\"workspaceUri\":\"${ws%/personal}/team\",\"title\":\"Sprint plan\"}"
    case $client in
      ts) node "$work/ts/mrtr-client.mjs" "$url" alice-token notes_delete "$args" accept 1 standing "$taxes" "$team" ;;
      py) "$work/venv/bin/python" .ci/clients/mrtr_client.py "$url" alice-token notes_delete "$args" accept 1 standing "$taxes" "$team" ;;
    esac
    return
  fi
  case $client in
    ts) node "$work/ts/mrtr-client.mjs" "$url" alice-token notes_delete "$args" "$action" 1 ;;
    py) "$work/venv/bin/python" .ci/clients/mrtr_client.py "$url" alice-token notes_delete "$args" "$action" 1 ;;
    py-tasks) "$work/venv/bin/python" .ci/clients/tasks_client.py "$url" alice-token notes_purge "$args" "$action" ;;
  esac
}

runs=0
failures=0
run_case() { # client action: a fresh server and data dir, one client run, the files checked
  local client=$1 action=$2
  local data port server ws before after out verdict
  runs=$((runs + 1))
  data=$(mktemp -d)
  port=$(free_port)
  "$server_bin" --addr "127.0.0.1:$port" --data-dir "$data/notes" >"$data/server.log" 2>&1 &
  server=$!
  for _ in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$port/mcp" && break; sleep 0.1; done
  ws="file://$(cd "$data/notes" && pwd -P)/personal"
  before=$(cd "$data/notes" && ls personal/* team/* | sort | tr '\n' ' ')
  out=$(run_client "$client" "$action" "http://127.0.0.1:$port/mcp" "$ws" || true)
  # A cancelled task must stay cancelled: look again only after its queue delay (500 ms) is over.
  if [ "$client" = py-tasks ] && [ "$action" = cancel ]; then sleep 1; fi
  after=$(cd "$data/notes" && ls personal/* team/* | sort | tr '\n' ' ')
  kill $server 2>/dev/null || true
  wait $server 2>/dev/null || true
  verdict=$(python3 - "$client" "$action" "$before" "$after" "$out" <<'PY'
import json, sys
client, action, out = sys.argv[1], sys.argv[2], sys.argv[5]
before, after = set(sys.argv[3].split()), set(sys.argv[4].split())
try:
    line = json.loads(out.strip().splitlines()[-1])
except Exception:
    print(f"FAIL no result: {out!r}"); sys.exit()
if "error" in line:
    print(f"FAIL client error: {line['error']} ({line})"); sys.exit()
gone = before - after
if client == "py-tasks":
    # notes_purge as a Tasks-extension task: the whole "Groceries" set, or (cancelled) nothing.
    if action == "accept":
        ok = (gone == {"personal/note-3.md", "personal/note-7.md", "personal/note-14.md"} and line["status"] == "completed"
              and not line["isError"] and "Deleted 3 notes" in line["text"])
    else:
        ok = not gone and line["status"] == "cancelled"
    print(("ok" if ok else "FAIL") + f" gone={sorted(gone)} task={line['status']} result={line['text']!r}")
    sys.exit()
if action == "standing":
    # The form once (the standing option chosen), no form in scope, the form out of scope.
    calls = [line] + line["later"]
    forms = [c["forms"] for c in calls]
    ok = (forms == [1, 0, 1] and gone == {f"personal/{line['chosen']}.md", "personal/note-1.md", "team/note-5.md"}
          and all(not c["isError"] and "Deleted" in c["text"] for c in calls))
    print(("ok" if ok else "FAIL") + f" forms={forms} gone={sorted(gone)} results={[c['text'] for c in calls]!r}")
    sys.exit()
if action == "accept":
    ok = gone == {f"personal/{line['chosen']}.md"} and not line["isError"] and "Deleted" in line["text"]
else:
    ok = not gone and not line["isError"] and "nothing was changed" in line["text"]
print(("ok" if ok else "FAIL") + f" gone={sorted(gone)} result={line['text']!r}")
PY
)
  echo "$client $action: $verdict"
  case $verdict in ok*) ;; *) failures=$((failures + 1)); cat "$data/server.log" ;; esac
  rm -rf "$data"
}

for client in ts py; do
  for action in accept decline cancel standing; do run_case "$client" "$action"; done
done
# The queued notes_purge through the Tasks extension (only the Python client can follow a task).
for action in accept cancel; do run_case py-tasks "$action"; done
[ "$failures" -eq 0 ] || { echo "real clients: $failures of $runs runs failed"; exit 1; }
echo "real clients: all $runs runs as expected"
