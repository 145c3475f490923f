#!/usr/bin/env bash
# Smoke test for the TypeScript SDK peer: starts server.mjs on a free port, drives the wire contract
# the load generator uses with curl, and exits non-zero on the first mismatch. Needs node, curl, jq.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
node="${NODE:-node}"
[ -d "$here/node_modules/@modelcontextprotocol/server" ] || (cd "$here" && npm ci --no-audit --no-fund >/dev/null)

port="$("$node" -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")"
addr="127.0.0.1:$port"
work="$(mktemp -d)"
"$node" "$here/server.mjs" --addr "$addr" --data-dir /nonexistent --key 00ff --notes memory \
  --load-titles 4 --load-notes-per-title 3 2>"$work/stderr" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/stderr"; echo "FAIL: server exited"; exit 1; }
  sleep 0.1
done

fail() { echo "FAIL: $*"; echo "  body: $(cat "$work/body")"; exit 1; }
ok() { echo "ok   $*"; }
id=0
meta='{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}},"io.modelcontextprotocol/clientInfo":{"name":"loadgen","version":"1"}}'
# call TOKEN TOOL PARAMS_JSON (arguments, requestState, inputResponses): body in $work/body,
# "status content-type" in $status
call() {
  id=$((id + 1))
  local body
  body="$(jq -cn --argjson id "$id" --arg tool "$2" --argjson p "$3" --argjson meta "$meta" \
    '{jsonrpc:"2.0",id:$id,method:"tools/call",params:($p + {name:$tool,_meta:$meta})}')"
  status="$(curl -sS -o "$work/body" -w '%{http_code} %{content_type}' "http://$addr/mcp" \
    ${1:+-H "authorization: Bearer $1"} -H 'content-type: application/json' \
    -H 'accept: application/json, text/event-stream' -H 'mcp-protocol-version: 2026-07-28' \
    -H 'mcp-method: tools/call' -H "mcp-name: $2" --data-binary "$body")"
}
q() { jq -r "$1" "$work/body"; }
json_ok() { [[ "$status" == "200 application/json"* ]] || fail "$1: status/content-type '$status'"; }

ws='file:///srv/loadgen-notes/load'
# 1. notes_list personal
call alice-token notes_list '{"arguments":{"workspaceUri":"file:///srv/loadgen-notes/personal"}}'
json_ok "notes_list"
[[ "$(q '.result.content[0].text')" == *"note-1: "* ]] || fail "notes_list: no 'note-1: '"
ok "notes_list personal -> $(q '.result.content[0].text' | tr '\n' '|')"

# 2. notes_delete load-0, first round
args="$(jq -cn --arg ws "$ws" '{workspaceUri:$ws,title:"load-0"}')"
call alice-token notes_delete "{\"arguments\":$args}"
json_ok "first round"
[ "$(q '.result.resultType')" = input_required ] || fail "first round: resultType"
[ "$(q '.result.inputRequests.delete_choice.method')" = elicitation/create ] || fail "first round: method"
[ "$(q '.result.inputRequests.delete_choice.params.requestedSchema.properties.note_id.oneOf | length')" = 3 ] ||
  fail "first round: oneOf"
[ "$(q '.result.inputRequests.delete_choice.params.requestedSchema.properties.confirm.type')" = boolean ] ||
  fail "first round: confirm"
state="$(q '.result.requestState | strings')"
[ -n "$state" ] || fail "first round: requestState"
choice="$(q '.result.inputRequests.delete_choice.params.requestedSchema.properties.note_id.oneOf[0].const')"
ok "first round: input_required, oneOf $(q '[.result.inputRequests.delete_choice.params.requestedSchema.properties.note_id.oneOf[].const] | join(",")'), requestState ${#state} chars"

# 3. accepting retry
retry="$(jq -cn --argjson a "$args" --arg s "$state" --arg c "$choice" \
  '{arguments:$a,requestState:$s,inputResponses:{delete_choice:{action:"accept",content:{note_id:$c,confirm:true}}}}')"
call alice-token notes_delete "$retry"
json_ok "retry"
[[ "$(q '.result.content[0].text')" == "Deleted "* && "$(q '.result.isError')" != true ]] || fail "retry: not deleted"
ok "retry -> $(q '.result.content[0].text')"

# 4. the same retry again: must not delete a second note
call alice-token notes_delete "$retry"
[[ "$(q '.result.content[0].text // ""')" != "Deleted "* ]] || fail "replay deleted again"
ok "replay -> $(q '.error // .result | tostring')"
call alice-token notes_list "{\"arguments\":{\"workspaceUri\":\"$ws\"}}"
[ "$(q '.result.content[0].text' | grep -c ': load-0$')" = 2 ] || fail "load-0 should have 2 notes left"
ok "load-0 has 2 notes left"

# 5. tampered requestState
tampered="$(jq -c --arg s "$state-TAMPERED" '.requestState = $s' <<<"$retry")"
call alice-token notes_delete "$tampered"
[ "$(q '.error.code')" = -32602 ] || fail "tampered: no -32602"
ok "tampered -> HTTP ${status%% *} $(q '.error | tostring')"
# 5b. a state minted for load-0 presented with other arguments (args digest in the payload)
other="$(jq -c --arg ws "$ws" '.arguments = {workspaceUri:$ws,title:"load-1"}' <<<"$retry")"
call alice-token notes_delete "$other"
[ "$(q '.result.isError')" = true ] || fail "other arguments: not refused"
ok "state with other arguments -> isError: $(q '.result.content[0].text')"
# 5c. alice's state presented by bob (principal bound by the codec's bind hook)
call bob-token notes_delete "$retry"
[ "$(q '.error.code')" = -32602 ] || fail "other principal: no -32602"
ok "state presented by bob -> $(q '.error.message')"

# 6. decline
args1="$(jq -cn --arg ws "$ws" '{workspaceUri:$ws,title:"load-1"}')"
call alice-token notes_delete "{\"arguments\":$args1}"
state1="$(q '.result.requestState')"
call alice-token notes_delete "$(jq -cn --argjson a "$args1" --arg s "$state1" \
  '{arguments:$a,requestState:$s,inputResponses:{delete_choice:{action:"decline"}}}')"
[[ "$(q '.result.content[0].text')" == "Nothing was deleted"* ]] || fail "decline"
ok "decline -> $(q '.result.content[0].text')"

# 7. 401 without a token, and with an unknown one
call "" notes_list '{"arguments":{"workspaceUri":"file:///srv/loadgen-notes/personal"}}'
[ "${status%% *}" = 401 ] || fail "no token: $status"
call eve-token notes_list '{"arguments":{"workspaceUri":"file:///srv/loadgen-notes/personal"}}'
[ "${status%% *}" = 401 ] || fail "unknown token: $status"
ok "401 without a token and with an unknown one"

# 8. SIGTERM exits promptly
kill -TERM "$pid"
for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then echo "FAIL: still running 3 s after SIGTERM"; exit 1; fi
ok "SIGTERM: exited"
echo "all checks passed"
